#!/usr/bin/python3
"""local_e2e.py -- drive kegfs-csi exactly as external-provisioner and kubelet would.

Started by e2e/local-e2e.sh, which provides Redis (and S3 when available).  Two
plugin processes are run like a cluster runs them: a controller plugin (what
external-provisioner/-resizer talk to) and a node plugin (what kubelet talks
to), each on its own socket.  Steps:

  CreateVolume -> NodePublish to two targets (RWX) -> write in one, read in the
  other -> the node plugin's /metrics (--metrics) has both mounters' series: the
  bytes written through the target, its FUSE ops, each family's TYPE once, live
  mounters and records by state -> every query of the chart's dashboard on a real
  Prometheus scraping the plugin (when prometheus is installed) ->
  ControllerExpandVolume -> NodeGetVolumeStats
  -> kill the node plugin and every mounter, restart the plugin -> both targets
  serve the same data again within 10 s, and both mounters' metrics are back ->
  stop one mounter (SIGSTOP: its socket accepts and never answers): the scrape
  still answers 200 within 3 s, without its series, counting the error -> kill
  it while the plugin runs (watchdog) -> NodeUnpublish -> DeleteVolume -> no
  Redis key of the volume ('{ns}*') and no object under its prefix.

Prints PASS/FAIL per step and "N passed, M failed".
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import yaml

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
    def __init__(self, args, mode, sock, metrics_port=0):
        self.args, self.mode, self.sock = args, mode, sock
        self.metrics_port = metrics_port
        self.proc = None

    def start(self):
        log = open(os.path.join(self.args.workdir, "plugin-%s.log" % self.mode), "a")
        extra = ["--metrics", "127.0.0.1:%d" % self.metrics_port] if self.metrics_port else []
        self.proc = subprocess.Popen(
            [self.args.csi_bin, "--endpoint", "unix://" + self.sock, "--nodeid", "e2e-node",
             "--mode", self.mode, "--state-dir", os.path.join(self.args.workdir, "state"),
             "--mounter", self.args.mounter,
             "--kubelet-dir", self.args.workdir,
             "--cache-root", os.path.join(self.args.workdir, "cache")] + extra,
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


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fnv1a64_hex(text):
    """The publish id of a target: its mounter label (keg_fnv1a64_hex)."""
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


class Scrape:
    """One GET of the plugin's /metrics: status, seconds taken, samples."""

    def __init__(self, port):
        t0 = time.time()
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=15) as r:
            self.status = r.status
            self.text = r.read().decode()
        self.took = time.time() - t0
        self.types = re.findall(r"^# TYPE (\S+) ", self.text, re.M)
        self.samples = []
        for ln in self.text.splitlines():
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)", ln)
            if m:
                labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
                self.samples.append((m.group(1), labels, float(m.group(4))))

    def value(self, name, **labels):
        """Sum of the samples of name whose labels include labels (None: no sample)."""
        got = [v for n, lab, v in self.samples
               if n == name and all(lab.get(k) == w for k, w in labels.items())]
        return sum(got) if got else None

    def mounters(self):
        return {lab["mounter"] for n, lab, v in self.samples if "mounter" in lab}


def dashboard_queries():
    """(panel title, legend, expr) of every query of the chart's Grafana dashboard."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "charts",
                        "kegfs-csi", "dashboards", "kegfs.json")
    with open(path) as f:
        dash = json.load(f)
    return [(p["title"], t.get("legendFormat", ""), t["expr"])
            for p in dash["panels"] for t in p.get("targets", [])]


class Prometheus:
    """A Prometheus server scraping the node plugin every second (for the dashboard)."""

    def __init__(self, binary, workdir, target_port):
        self.port = free_port()
        d = os.path.join(workdir, "prometheus")
        os.makedirs(d, exist_ok=True)
        cfg = os.path.join(d, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
                    "scrape_configs:\n"
                    "  - job_name: kegfs-csi-node\n"
                    "    static_configs: [{targets: ['127.0.0.1:%d']}]\n" % target_port)
        self.proc = subprocess.Popen(
            [binary, "--config.file", cfg, "--storage.tsdb.path", os.path.join(d, "data"),
             "--web.listen-address", "127.0.0.1:%d" % self.port, "--log.level", "warn"],
            stdout=open(os.path.join(workdir, "prometheus.log"), "a"),
            stderr=subprocess.STDOUT, start_new_session=True)

    def query(self, expr):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (self.port,
                                                      urllib.parse.urlencode({"query": expr}))
        with urllib.request.urlopen(url, timeout=10) as r:
            out = json.load(r)
        if out.get("status") != "success":
            raise RuntimeError("%s: %s" % (expr, out))
        return out["data"]["result"]

    def wait_scrapes(self, n, seconds=30):
        """Wait until the plugin has been scraped n more times."""
        deadline = time.time() + seconds
        first = None
        while time.time() < deadline:
            try:
                got = self.query('count_over_time(up{job="kegfs-csi-node"}[10m])')
                c = int(float(got[0]["value"][1])) if got else 0
            except (OSError, RuntimeError, ValueError):
                c = None
            if c is not None:
                first = c if first is None else first
                if c >= first + n:
                    return True
            time.sleep(0.3)
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def check_dashboard(args, mport, vid, t1):
    """Every query of the dashboard against a real Prometheus that scrapes the node
    plugin: no error, per-volume panels one series per volume (the two mounters of the
    volume summed, not shown apart), and the throughput, live-mounter and state panels
    show what was done.  Skipped when no prometheus binary is installed."""
    binary = shutil.which("prometheus")
    if not binary:
        print("SKIP  dashboard queries on a real Prometheus: prometheus not installed",
              flush=True)
        return
    prom = Prometheus(binary, args.workdir, mport)
    try:
        ok = prom.wait_scrapes(2)
        with open(os.path.join(t1, "dash.bin"), "wb") as f:
            f.write(os.urandom(2 * MiB))
            os.fsync(f.fileno())
        ok = prom.wait_scrapes(3) and ok
        up = prom.query('min_over_time(up{job="kegfs-csi-node"}[10m])')
        step("dashboard: Prometheus scrapes the node plugin, every scrape accepted",
             ok and up and float(up[0]["value"][1]) == 1, "min(up) %s" % up)
        bad, per_volume = [], 0
        for title, legend, expr in dashboard_queries():
            q = expr.replace("$volume", vid)
            try:
                res = prom.query(q)
            except (OSError, RuntimeError) as e:
                bad.append("%s: %s" % (title, e))
                continue
            if "by (volume)" in q:
                per_volume += 1
                vols = [r["metric"].get("volume") for r in res]
                if len(vols) != len(set(vols)) or any("mounter" in r["metric"] for r in res):
                    bad.append("%s (%s): one series per mounter: %s" % (title, legend, res))
        step("dashboard: every query answers, per-volume panels one series per volume",
             not bad and per_volume >= 10, "%d per-volume queries; %s" % (per_volume, bad))

        def one(expr):
            r = prom.query(expr.replace("$volume", vid))
            return float(r[0]["value"][1]) if r else None
        thr = one('sum by (volume) (rate(kegfs_written_bytes_total{volume=~"$volume"}[5m]))')
        live = one("sum(kegfs_csi_live_mounters)")
        st = one('sum(kegfs_csi_volumes{state="live"})')
        step("dashboard: write throughput of the volume, live mounters, volumes by state",
             thr is not None and thr > 0 and live == 2 and st == 2,
             "throughput %s B/s, live mounters %s, live volumes %s" % (thr, live, st))
    finally:
        prom.stop()


def record_pids(workdir):
    """{target: mounter pid} of the plugin's publish records."""
    with open(os.path.join(workdir, "state", "state.yaml")) as f:
        state = yaml.safe_load(f) or {}
    return {r["target"]: int(r.get("pid") or 0) for r in state.get("publishes") or []}


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
    mport = free_port()
    node = Plugin(args, "node", os.path.join(args.workdir, "node.sock"), mport)
    ida, idb = fnv1a64_hex(t1), fnv1a64_hex(t2)
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

        # --metrics of the node plugin: both mounters' series, merged by family
        nbytes = 3 * MiB + 12345
        s0 = Scrape(mport)
        w0 = s0.value("kegfs_written_bytes_total", mounter=ida) or 0
        ops0 = s0.value("kegfs_fuse_ops_total", mounter=ida) or 0
        with open(os.path.join(t1, "metrics.bin"), "wb") as f:
            f.write(os.urandom(nbytes))
            f.flush()
            os.fsync(f.fileno())
        sc = Scrape(mport)
        w1 = sc.value("kegfs_written_bytes_total", mounter=ida, volume=vid) or 0
        wb = sc.value("kegfs_written_bytes_total", mounter=idb, volume=vid)
        ops1 = sc.value("kegfs_fuse_ops_total", mounter=ida, volume=vid) or 0
        dup = sorted({t for t in sc.types if sc.types.count(t) > 1})
        step("metrics: the bytes written through pod-a's target, its FUSE ops, pod-b's "
             "mounter apart", sc.status == 200 and w1 - w0 >= nbytes and ops1 > ops0 and
             wb is not None and sc.mounters() == {ida, idb},
             "written %d -> %d (+%d, wrote %d); fuse ops %d -> %d; mounters %s"
             % (w0, w1, w1 - w0, nbytes, ops0, ops1, sorted(sc.mounters())))
        step("metrics: each family's TYPE once, no target path or secret",
             not dup and len(sc.types) > 20 and args.workdir not in sc.text and
             "://" not in sc.text and
             not any(k in sc.text for k in (args.access_key, args.secret_key) if k),
             "duplicated: %s" % dup)
        step("metrics: live mounters and records by state",
             sc.value("kegfs_csi_live_mounters") == 2 and
             sc.value("kegfs_csi_volumes", state="live") == 2 and
             sc.value("kegfs_csi_volumes", state="failed") == 0 and
             sc.value("kegfs_csi_mounters_scraped") == 2,
             "live=%s volumes live=%s failed=%s scraped=%s"
             % (sc.value("kegfs_csi_live_mounters"), sc.value("kegfs_csi_volumes", state="live"),
                sc.value("kegfs_csi_volumes", state="failed"),
                sc.value("kegfs_csi_mounters_scraped")))

        check_dashboard(args, mport, vid, t1)

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
        sc = Scrape(mport)
        step("metrics: both re-established mounters are scraped again",
             sc.mounters() == {ida, idb} and sc.value("kegfs_csi_live_mounters") == 2,
             "mounters %s live=%s" % (sorted(sc.mounters()), sc.value("kegfs_csi_live_mounters")))

        s = n.node.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(volume_id=vid,
                                                                   volume_path=t2))
        b = {u.unit: u for u in s.usage}.get(pb.VolumeUsage.BYTES)
        step("remounted volume reports the expanded quota",
             b is not None and b.total == 1024 * MiB,
             "total=%s" % (b.total if b else None))

        # a mounter stops answering (SIGSTOP: its socket still accepts): the plugin's
        # scrape answers at once without its series, and counts the error
        recs = record_pids(args.workdir)
        pid_a = recs.get(t1, 0)
        e0 = Scrape(mport).value("kegfs_csi_mounter_scrape_errors_total") or 0
        if pid_a:
            os.killpg(pid_a, signal.SIGSTOP)
            try:
                sc = Scrape(mport)
            finally:
                os.killpg(pid_a, signal.SIGKILL)     # the watchdog starts a new one
            step("metrics: a stopped mounter is left out, the scrape answers 200 quickly",
                 sc.status == 200 and sc.took < 3.0 and sc.mounters() == {idb} and
                 (sc.value("kegfs_csi_mounter_scrape_errors_total") or 0) > e0,
                 "%.2f s; mounters %s; scrape errors %s -> %s"
                 % (sc.took, sorted(sc.mounters()), e0,
                    sc.value("kegfs_csi_mounter_scrape_errors_total")))
        else:
            step("metrics: the mounter of pod-a is recorded", False, str(recs))

        # watchdog: a mounter dies while the plugin runs
        pids = [] if pid_a else mounter_pids(args.workdir)
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            t0 = time.time()
            time.sleep(0.3)
            ok1, _ = wait_content(os.path.join(t1, "shared.txt"), data, 10)
            ok2, _ = wait_content(os.path.join(t2, "shared.txt"), data, 10)
            step("watchdog re-mounts a mounter killed while the plugin runs", ok1 and ok2,
                 "%.1f s" % (time.time() - t0))
        elif pid_a:
            t0 = time.time()
            ok1, _ = wait_content(os.path.join(t1, "shared.txt"), data, 10)
            ok2, _ = wait_content(os.path.join(t2, "shared.txt"), data, 10)
            step("watchdog re-mounts a mounter killed while the plugin runs", ok1 and ok2,
                 "%.1f s" % (time.time() - t0))
            back = False
            deadline = time.time() + 10
            while not back and time.time() < deadline:
                sc = Scrape(mport)
                back = (sc.mounters() == {ida, idb} and
                        (sc.value("kegfs_written_bytes_total", mounter=ida) or 0) < nbytes)
                time.sleep(0.2)
            step("metrics: the new mounter of pod-a is scraped (its counters start again)",
                 back, "mounters %s written %s" % (sorted(sc.mounters()),
                                                   sc.value("kegfs_written_bytes_total",
                                                            mounter=ida)))

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
