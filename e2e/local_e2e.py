#!/usr/bin/python3
"""local_e2e.py -- drive kegfs-csi exactly as external-provisioner and kubelet would.

Started by e2e/local-e2e.sh, which provides Redis (and S3 when available).  Two
plugin processes are run like a cluster runs them: a controller plugin (what
external-provisioner/-resizer talk to) and a node plugin (what kubelet talks
to), each on its own socket.  Steps:

  CreateVolume -> NodePublish to two targets (RWX) -> write in one, read in the
  other -> ControllerExpandVolume -> NodeGetVolumeStats -> kill the node plugin
  and every mounter, restart the plugin -> both targets serve the same data
  again within 10 s -> kill one mounter while the plugin runs (watchdog) ->
  NodeUnpublish -> DeleteVolume -> no Redis key of the volume ('{ns}*') and no
  object under its prefix.

Prints PASS/FAIL per step and "N passed, M failed".
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance"))
import csiclient  # noqa: E402
from csiclient import pb, mount_cap  # noqa: E402

MiB = 1 << 20
RESULTS = {"passed": 0, "failed": 0}


def step(name, ok, detail=""):
    RESULTS["passed" if ok else "failed"] += 1
    print("%s  %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""),
          flush=True)
    return ok


class Plugin:
    def __init__(self, args, mode, sock):
        self.args, self.mode, self.sock = args, mode, sock
        self.proc = None

    def start(self):
        log = open(os.path.join(self.args.workdir, "plugin-%s.log" % self.mode), "a")
        self.proc = subprocess.Popen(
            [self.args.csi_bin, "--endpoint", "unix://" + self.sock, "--nodeid", "e2e-node",
             "--mode", self.mode, "--state-dir", os.path.join(self.args.workdir, "state"),
             "--mounter", self.args.mounter,
             "--kubelet-dir", self.args.workdir,
             "--cache-root", os.path.join(self.args.workdir, "cache")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        client = csiclient.Client("unix://" + self.sock)
        client.wait_ready(20)
        return client

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def retry(fn, req, timeout=90):
    """Call fn(req), retrying on ABORTED (an operation in progress) as kubelet does."""
    import grpc
    deadline = time.time() + 30
    while True:
        try:
            return fn(req, timeout=timeout)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.ABORTED or time.time() > deadline:
                raise
            time.sleep(0.5)


def mounter_pids(workdir):
    try:
        text = open(os.path.join(workdir, "state", "state.yaml")).read()
    except OSError:
        return []
    return [int(p) for p in re.findall(r"^\s*pid: (\d+)", text, re.M) if int(p) > 0]


def wait_content(path, want, seconds):
    deadline = time.time() + seconds
    last = None
    while time.time() < deadline:
        try:
            with open(path) as f:
                if f.read() == want:
                    return True, time.time()
        except OSError as e:
            last = e
        time.sleep(0.2)
    return False, last


def redis_keys(args, ns):
    out = subprocess.run([args.redis_cli, "-h", "127.0.0.1", "-p", str(args.redis_port), "-n", "1",
                          "--scan", "--pattern", "{%s}*" % ns],
                         capture_output=True, text=True, check=True).stdout
    return [k for k in out.splitlines() if k]


def objects_left(args, vid):
    if args.storage == "file":
        d = os.path.join(args.bucket, vid)
        n = 0
        for _, _, files in os.walk(d):
            n += len(files)
        return n
    # S3: ListObjectsV2 with prefix, signed by curl
    url = "%s?list-type=2&prefix=%s/" % (args.bucket, vid)
    # credentials go to curl through its config on stdin, never on argv
    cfg = 'user = "%s:%s"\n' % (args.access_key, args.secret_key)
    out = subprocess.run(["curl", "-s", "--aws-sigv4", "aws:amz:us-east-1:s3", "-K", "-", url],
                         input=cfg,
                         capture_output=True, text=True, check=True).stdout
    return len(re.findall(r"<Key>", out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csi-bin", required=True)
    ap.add_argument("--mounter", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--redis-port", type=int, required=True)
    ap.add_argument("--redis-cli", default="redis-cli")
    ap.add_argument("--storage", default="file")
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--access-key", default="")
    # the secret key comes from the environment (KEG_TEST_S3_SECRET_KEY), never argv
    ap.add_argument("--secret-key", default=os.environ.get("KEG_TEST_S3_SECRET_KEY", ""))
    args = ap.parse_args()

    secrets = {"metaurl": "redis://127.0.0.1:%d/1" % args.redis_port,
               "storage": args.storage, "bucket": args.bucket}
    if args.access_key:
        secrets["access-key"] = args.access_key
        secrets["secret-key"] = args.secret_key
    pods = os.path.join(args.workdir, "pods")
    t1 = os.path.join(pods, "pod-a", "volumes", "kubernetes.io~csi", "pv", "mount")
    t2 = os.path.join(pods, "pod-b", "volumes", "kubernetes.io~csi", "pv", "mount")
    for t in (t1, t2):
        os.makedirs(os.path.dirname(t), exist_ok=True)

    ctl = Plugin(args, "controller", os.path.join(args.workdir, "controller.sock"))
    node = Plugin(args, "node", os.path.join(args.workdir, "node.sock"))
    c = ctl.start()
    n = node.start()
    vid = None
    try:
        # external-provisioner: CreateVolume with the StorageClass parameters + Secret
        vol = c.controller.CreateVolume(pb.CreateVolumeRequest(
            name="pvc-e2e-0001", capacity_range=pb.CapacityRange(required_bytes=512 * MiB),
            volume_capabilities=[mount_cap()], secrets=secrets,
            parameters={"block-size": "1M", "compress": "lz4", "reclaim": "delete",
                        "csi.storage.k8s.io/pv/name": "pv-e2e"}), timeout=60).volume
        vid = vol.volume_id
        step("CreateVolume", vid == "pvc-e2e-0001" and vol.capacity_bytes == 512 * MiB,
             "%s %d bytes ctx=%s" % (vid, vol.capacity_bytes, dict(vol.volume_context)))
        step("Redis namespace created", len(redis_keys(args, vid)) > 0)

        # kubelet: NodePublishVolume for two pods (RWX)
        cap = mount_cap(pb.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER)
        for t in (t1, t2):
            retry(n.node.NodePublishVolume, pb.NodePublishVolumeRequest(
                volume_id=vid, target_path=t, volume_capability=cap, secrets=secrets,
                volume_context=dict(vol.volume_context)))
        step("NodePublishVolume x2", os.path.ismount(t1) and os.path.ismount(t2))
        data = "written in pod-a at %f\n" % time.time()
        with open(os.path.join(t1, "shared.txt"), "w") as f:
            f.write(data)
        ok, _ = wait_content(os.path.join(t2, "shared.txt"), data, 5)
        step("write in pod-a, read in pod-b", ok)

        # static provisioning: an admin's PV whose volumeHandle is new to the
        # driver and whose volumeAttributes name the existing volume's metaurl
        t3 = os.path.join(pods, "pod-c", "volumes", "kubernetes.io~csi", "pv-static", "mount")
        os.makedirs(os.path.dirname(t3), exist_ok=True)
        retry(n.node.NodePublishVolume, pb.NodePublishVolumeRequest(
            volume_id="static-pv-0001", target_path=t3, volume_capability=cap, secrets=secrets,
            volume_context={"metaurl": vol.volume_context["metaurl"]}))
        ok3, _ = wait_content(os.path.join(t3, "shared.txt"), data, 5)
        n.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(volume_id="static-pv-0001",
                                                                 target_path=t3))
        step("static provisioning: a PV naming the existing volume mounts it", ok3 and
             not os.path.exists(t3))

        # external-resizer: ControllerExpandVolume
        r = c.controller.ControllerExpandVolume(pb.ControllerExpandVolumeRequest(
            volume_id=vid, capacity_range=pb.CapacityRange(required_bytes=1024 * MiB),
            secrets=secrets), timeout=60)
        step("ControllerExpandVolume", r.capacity_bytes == 1024 * MiB and
             not r.node_expansion_required)

        # online expansion: the live mounts report the new quota (statfs
        # re-reads the quota every few seconds) without a remount
        t0 = time.time()
        while True:
            s = n.node.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(volume_id=vid,
                                                                       volume_path=t1))
            units = {u.unit: u for u in s.usage}
            b = units.get(pb.VolumeUsage.BYTES)
            if (b is not None and b.total == 1024 * MiB) or time.time() - t0 > 15:
                break
            time.sleep(0.5)
        step("NodeGetVolumeStats shows the expanded quota on the live mount",
             b is not None and b.total == 1024 * MiB and not s.volume_condition.abnormal,
             "bytes total=%d used=%d after %.1f s; condition=%r"
             % (b.total if b else -1, b.used if b else -1, time.time() - t0,
                s.volume_condition.message))

        # crash: the node plugin and every mounter die; the plugin comes back
        pids = mounter_pids(args.workdir)
        node.stop()
        n.close()
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        dead = True
        try:
            os.stat(os.path.join(t1, "shared.txt"))
            dead = False
        except OSError:
            pass
        step("mounts dead after killing %d mounters" % len(pids), len(pids) == 2 and dead)
        t0 = time.time()
        n = node.start()
        ok1, _ = wait_content(os.path.join(t1, "shared.txt"), data, 10 - (time.time() - t0))
        ok2, _ = wait_content(os.path.join(t2, "shared.txt"), data, 10 - (time.time() - t0))
        step("both targets serve the data again after plugin restart",
             ok1 and ok2, "%.1f s" % (time.time() - t0))

        s = n.node.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(volume_id=vid,
                                                                   volume_path=t2))
        b = {u.unit: u for u in s.usage}.get(pb.VolumeUsage.BYTES)
        step("remounted volume reports the expanded quota",
             b is not None and b.total == 1024 * MiB,
             "total=%s" % (b.total if b else None))

        # watchdog: a mounter dies while the plugin runs
        pids = mounter_pids(args.workdir)
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            t0 = time.time()
            time.sleep(0.3)
            ok1, _ = wait_content(os.path.join(t1, "shared.txt"), data, 10)
            ok2, _ = wait_content(os.path.join(t2, "shared.txt"), data, 10)
            step("watchdog re-mounts a mounter killed while the plugin runs", ok1 and ok2,
                 "%.1f s" % (time.time() - t0))

        # kubelet: NodeUnpublishVolume (twice: idempotent)
        for t in (t1, t2):
            for _ in range(2):
                retry(n.node.NodeUnpublishVolume,
                      pb.NodeUnpublishVolumeRequest(volume_id=vid, target_path=t))
        step("NodeUnpublishVolume", not os.path.exists(t1) and not os.path.exists(t2) and
             not mounter_pids(args.workdir))

        # external-provisioner: DeleteVolume
        c.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vid, secrets=secrets),
                                  timeout=120)
        keys = redis_keys(args, vid)
        step("DeleteVolume: no Redis key '{%s}*' left" % vid, not keys, "%d keys" % len(keys))
        left = objects_left(args, vid)
        step("DeleteVolume: no object under '%s/' left" % vid, left == 0, "%d objects" % left)
        vid = None
    except Exception as e:  # noqa: BLE001
        step("unexpected error", False, repr(e))
    finally:
        if vid:
            try:
                for t in (t1, t2):
                    n.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
                        volume_id=vid, target_path=t), timeout=30)
                c.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vid,
                                                                 secrets=secrets), timeout=60)
            except Exception:  # noqa: BLE001
                pass
        node.stop()
        ctl.stop()
    print("%d passed, %d failed" % (RESULTS["passed"], RESULTS["failed"]))
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
