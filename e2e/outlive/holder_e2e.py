#!/usr/bin/python3
"""holder_e2e.py -- mounts that outlive the node plugin (holder mount mode), driven
like kubelet drives the plugin.  Started by e2e/outlive/holder-e2e.sh.

Processes: `kegfs holder` (owns the mounters), kegfs-csi --mode all --mount-mode
holder.  Volume on sqlite + file store.  Two "pods" publish the volume; an app in
pod A holds a file open and every 50 ms appends a record, fsyncs and reads the
file back; a reader in pod B lists and reads the directory (appender.py).

  (a) plugin killed -9 and restarted: the same mounters, no errors
  (b) plugin restarted with another kegfs (a copy of the build): the holder
      upgrades every mounter in place (supervisor pid kept, binary changed)
  -> the app and the reader report zero errors and zero lost records; the
     longest stall of each is printed
  (c) a mounter killed outright (its whole process group): mounted again by the
      holder within 2 s
  (d) plugin killed, restarted, NodeUnpublish at once: targets gone, holder
      empty, no mounter left
  metrics: the plugin runs with --metrics; every mounter the holder starts serves
      /metrics on a socket in the holder's directory, and the plugin's endpoint
      includes both mounters' series after the publish, after (a) (the re-adopted
      mounters, their counters going on), after (b) and after (c); after (d) the
      sockets are gone

Prints PASS/FAIL per step, the figures, and "N passed, M failed".
"""
import argparse
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "conformance"))
import csiclient  # noqa: E402
from csiclient import pb, mount_cap  # noqa: E402
sys.path.insert(0, os.path.join(HERE, ".."))
from local_e2e import Scrape, fnv1a64_hex, free_port  # noqa: E402

MiB = 1 << 20
RESULTS = {"passed": 0, "failed": 0}
FUSE_MAGIC = 0x65735546


def step(name, ok, detail=""):
    RESULTS["passed" if ok else "failed"] += 1
    print("%s  %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""),
          flush=True)
    return ok


def holder_call(sock, text):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(sock)
    s.sendall(text.encode())
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    s.close()
    return out.decode()


def holder_list(sock):
    """{target: {field: value}} of the holder's mounts."""
    text = holder_call(sock, "list\n\n")
    assert text.startswith("ok\n"), text
    mounts, cur = {}, None
    for ln in text.splitlines()[1:]:
        if "=" not in ln:
            continue
        k, v = ln.split("=", 1)
        if k == "mount":
            cur = mounts.setdefault(v, {})
        elif cur is not None:
            cur[k] = v
    return mounts


def mounters_of(target):
    """Pids of the mounters (supervisors: `kegfs mount` processes naming target
    whose parent is not one) of target; their workers are not counted."""
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"mount" in argv and target.encode() in argv:
            procs[int(d)] = ppid
    return [p for p, pp in procs.items() if pp not in procs]


def wait_until(seconds, cond):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


def count_lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return -1


def is_live(target):
    try:
        st = os.statvfs(target)
        return st.f_bsize > 0 and os.path.ismount(target)
    except OSError:
        return False


class Plugin:
    def __init__(self, args, sock, holder_sock, metrics_port):
        self.args, self.sock, self.holder_sock = args, sock, holder_sock
        self.metrics_port = metrics_port
        self.proc = None

    def start(self, kegfs):
        log = open(os.path.join(self.args.workdir, "plugin.log"), "a")
        self.proc = subprocess.Popen(
            [self.args.csi_bin, "--endpoint", "unix://" + self.sock, "--nodeid", "e2e-node",
             "--mode", "all", "--state-dir", os.path.join(self.args.workdir, "state"),
             "--mounter", kegfs, "--mount-mode", "holder",
             "--kubelet-dir", self.args.workdir,
             "--holder-socket", self.holder_sock, "--watchdog-ms", "500",
             "--metrics", "127.0.0.1:%d" % self.metrics_port],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        client = csiclient.Client("unix://" + self.sock)
        client.wait_ready(20)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if client.identity.Probe(pb.ProbeRequest(), timeout=5).ready.value:
                    break
            except Exception:  # noqa: BLE001
                pass
            time.sleep(0.1)
        return client

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)


def report(path):
    out = {}
    with open(path) as f:
        for ln in f:
            k, _, v = ln.rstrip("\n").partition("=")
            out[k] = v
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csi-bin", required=True)
    ap.add_argument("--kegfs", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    W = args.workdir
    hdir = os.path.join(W, "holder")
    hsock = os.path.join(hdir, "holder.sock")
    os.makedirs(os.path.join(W, "meta"))
    os.makedirs(os.path.join(W, "bucket"))
    secrets = {"metaurl": "sqlite3://%s/meta/" % W, "storage": "file",
               "bucket": os.path.join(W, "bucket")}
    pods = os.path.join(W, "pods")
    t1 = os.path.join(pods, "pod-a", "volumes", "kubernetes.io~csi", "pv", "mount")
    t2 = os.path.join(pods, "pod-b", "volumes", "kubernetes.io~csi", "pv", "mount")
    for t in (t1, t2):
        os.makedirs(os.path.dirname(t), exist_ok=True)
    # like the kubelet pods dir: a shared mount, so mounts below it propagate
    subprocess.run(["mount", "--bind", pods, pods], check=True)
    subprocess.run(["mount", "--make-rshared", pods], check=True)
    kegfs2 = os.path.join(W, "kegfs-v2")
    shutil.copy2(args.kegfs, kegfs2)
    with open(kegfs2, "ab") as f:   # another binary: same code, different bytes
        f.write(b"\0kegfs-v2\0")

    hlog = open(os.path.join(W, "holder.log"), "a")
    holder = subprocess.Popen([args.kegfs, "holder", "--socket", hsock, "--state-dir", hdir,
                               "--check-ms", "100"], stdout=hlog, stderr=subprocess.STDOUT,
                              start_new_session=True)
    with open(os.path.join(W, "holder.pid"), "w") as f:
        f.write(str(holder.pid))
    for _ in range(100):
        if os.path.exists(hsock):
            break
        time.sleep(0.05)

    mport = free_port()
    plugin = Plugin(args, os.path.join(W, "csi.sock"), hsock, mport)
    c = plugin.start(args.kegfs)
    ids = {fnv1a64_hex(t1), fnv1a64_hex(t2)}

    def scraped(what, seconds=10, check=None):
        """Wait until the plugin's scrape has both mounters' series (and check(s))."""
        deadline = time.time() + seconds
        while True:
            sc = Scrape(mport)
            ok = sc.status == 200 and sc.mounters() == ids and (check is None or check(sc))
            if ok or time.time() > deadline:
                break
            time.sleep(0.2)
        step("metrics %s: both mounters' series in the plugin's scrape" % what, ok,
             "mounters %s, live %s, %.2f s" % (sorted(sc.mounters()),
                                               sc.value("kegfs_csi_live_mounters"), sc.took))
        return sc
    vid = None
    stop = os.path.join(W, "stop")
    apps = []
    try:
        vol = c.controller.CreateVolume(pb.CreateVolumeRequest(
            name="pvc-outlive-0001", capacity_range=pb.CapacityRange(required_bytes=256 * MiB),
            volume_capabilities=[mount_cap()], secrets=secrets), timeout=60).volume
        vid = vol.volume_id
        cap = mount_cap(pb.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER)
        for t in (t1, t2):
            c.node.NodePublishVolume(pb.NodePublishVolumeRequest(
                volume_id=vid, target_path=t, volume_capability=cap, secrets=secrets,
                volume_context=dict(vol.volume_context)), timeout=90)
        held = holder_list(hsock)
        step("publish through the holder", is_live(t1) and is_live(t2) and
             set(held) == {t1, t2}, "held: %s" % sorted(held))
        socks = [held[t].get("metrics", "") for t in (t1, t2)]
        step("metrics: the holder gives each mounter a 0600 socket in its directory",
             all(p.startswith(os.path.join(hdir, "metrics") + "/") and
                 stat.S_ISSOCK(os.stat(p).st_mode) and
                 stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in socks if p) and
             all(socks), "%s" % socks)
        scraped("after the publish", check=lambda sc: sc.value("kegfs_csi_live_mounters") == 2)
        with open(os.path.join(W, "pids"), "w") as f:
            f.write(" ".join(held[t]["pid"] for t in held))
        os.makedirs(os.path.join(t1, "app"))
        apps.append(subprocess.Popen([sys.executable, os.path.join(HERE, "appender.py"), "write",
                                      os.path.join(t1, "app", "log"), stop,
                                      os.path.join(W, "writer.txt")]))
        apps.append(subprocess.Popen([sys.executable, os.path.join(HERE, "appender.py"), "read",
                                      os.path.join(t2, "app"), stop,
                                      os.path.join(W, "reader.txt")]))
        # python may take seconds to start on a loaded machine
        assert wait_until(60, lambda: all(os.path.exists(os.path.join(W, r + ".alive"))
                                          for r in ("writer.txt", "reader.txt"))), \
            "the app did not start"
        logf = os.path.join(t1, "app", "log")

        # (a) the plugin dies and comes back
        before = {t: held[t]["pid"] for t in held}
        assert wait_until(30, lambda: count_lines(os.path.join(t1, "app", "log")) > 3)
        w_before = Scrape(mport).value("kegfs_written_bytes_total",
                                       mounter=fnv1a64_hex(t1)) or 0
        c.close()
        plugin.kill()
        time.sleep(0.5)
        t0 = time.time()
        c = plugin.start(args.kegfs)
        ready = time.time() - t0
        time.sleep(1.0)
        after = holder_list(hsock)
        single = all(len(mounters_of(t)) == 1 for t in (t1, t2))
        step("(a) plugin kill -9 + restart: same mounters, one per target",
             {t: after[t]["pid"] for t in after} == before and single,
             "plugin ready again in %.2f s; mounters %s -> %s"
             % (ready, before, {t: after[t]["pid"] for t in after}))
        with open(os.path.join(W, "state", "state.yaml")) as f:
            state = f.read()
        step("(a) plugin state agrees with the holder",
             all(("pid: %s" % before[t]) in state for t in before))
        scraped("(a) re-adopted", check=lambda sc: (sc.value(
            "kegfs_written_bytes_total", mounter=fnv1a64_hex(t1)) or 0) > w_before > 0)
        time.sleep(1.0)

        # (b) a new plugin image: its kegfs differs; the holder upgrades in place
        c.close()
        plugin.kill(signal.SIGTERM)
        t0 = time.time()
        c = plugin.start(kegfs2)
        upgraded = False
        while time.time() - t0 < 60:
            exes = {t: os.readlink("/proc/%s/exe" % after[t]["pid"]) for t in after}
            if all(e.startswith(os.path.join(hdir, "bin") + "/") for e in exes.values()):
                upgraded = True
                break
            time.sleep(0.1)
        now = holder_list(hsock)
        step("(b) plugin with another kegfs: every mounter upgraded in place",
             upgraded and {t: now[t]["pid"] for t in now} == before,
             "%.2f s; binaries %s" % (time.time() - t0, exes))
        n0 = count_lines(logf)
        step("(b) the app goes on after the upgrade",
             wait_until(30, lambda: count_lines(logf) > n0 + 3))
        scraped("(b) upgraded in place")

        open(stop, "w").close()
        for p in apps:
            p.wait(60)
        wr = report(os.path.join(W, "writer.txt"))
        rd = report(os.path.join(W, "reader.txt"))
        with open(os.path.join(t1, "app", "log"), "rb") as f:
            lines = f.read().count(b"\n")
        step("(a)+(b) app: zero errors, zero lost records",
             wr["errors"] == "0" and int(wr["records"]) == lines and lines > 20,
             "records=%s in file=%d longest stall %s ms %s" % (wr["records"], lines,
                                                             wr["max_stall_ms"],
                                                             wr["first_error"]))
        step("(a)+(b) reader: zero errors", rd["errors"] == "0",
             "listings=%s longest stall %s ms %s" % (rd["records"], rd["max_stall_ms"],
                                                    rd["first_error"]))

        # (c) a mounter crashes outright.  "view" is what a container that bound
        # the target with HostToContainer (rslave) propagation holds: a slave
        # copy of the FUSE mount.
        view = os.path.join(W, "view")
        os.makedirs(view)
        subprocess.run(["mount", "--bind", t1, view], check=True)
        subprocess.run(["mount", "--make-slave", view], check=True)
        held_fd = os.open(os.path.join(view, "app", "held"), os.O_RDWR | os.O_CREAT, 0o644)
        pid = int(now[t1]["pid"])
        os.killpg(pid, signal.SIGKILL)
        t0 = time.time()
        back = vback = None
        while time.time() - t0 < 10 and (back is None or vback is None):
            for path, which in ((t1, "host"), (view, "view")):
                if (back if which == "host" else vback) is not None:
                    continue
                try:
                    with open(os.path.join(path, "app", "log"), "rb") as f:
                        if f.read().count(b"\n") == lines:
                            if which == "host":
                                back = time.time() - t0
                            else:
                                vback = time.time() - t0
                except OSError:
                    pass
            time.sleep(0.02)
        # the holder lists the target again once the new mounter is registered
        wait_until(5, lambda: t1 in holder_list(hsock))
        newpid = holder_list(hsock).get(t1, {}).get("pid", "none")
        step("(c) mounter killed outright: mounted again within 2 s",
             back is not None and back < 2.0 and newpid != str(pid),
             "back after %s s (mounter %d -> %s)" % ("%.2f" % back if back else "never", pid,
                                                     newpid))
        step("(c) a HostToContainer view sees it again within 2 s",
             vback is not None and vback < 2.0,
             "after %s s" % ("%.2f" % vback if vback else "never"))
        scraped("(c) mounted again by the holder")
        try:
            os.write(held_fd, b"after the crash\n")
            os.fsync(held_fd)
            fd_err = "none"
        except OSError as e:
            fd_err = e.strerror
        try:
            os.close(held_fd)   # the flush of a dead connection fails too
        except OSError:
            pass
        step("(c) a descriptor opened before the crash fails clearly",
             fd_err != "none", "write+fsync: %s" % fd_err)
        with open(os.path.join(W, "pids"), "a") as f:
            f.write(" " + newpid)

        # the holder itself restarts (outside a container its mounters survive it):
        # the new holder adopts the running mounters from its table
        held = {t: v["pid"] for t, v in holder_list(hsock).items()}
        holder.kill()
        holder.wait(10)
        holder = subprocess.Popen([args.kegfs, "holder", "--socket", hsock, "--state-dir", hdir,
                                   "--check-ms", "100"], stdout=hlog, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        with open(os.path.join(W, "holder.pid"), "w") as f:
            f.write(str(holder.pid))
        for _ in range(100):
            try:
                again = {t: v["pid"] for t, v in holder_list(hsock).items()}
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(0.5)
        again = {t: v["pid"] for t, v in holder_list(hsock).items()}
        step("holder killed -9 and restarted: running mounters adopted",
             again == held and is_live(t1) and is_live(t2), "%s -> %s" % (held, again))
        # an adopted mounter (not the new holder's child) that dies is restarted too
        os.killpg(int(again[t2]), signal.SIGKILL)
        t0 = time.time()
        while time.time() - t0 < 5 and not (is_live(t2) and
                                            holder_list(hsock)[t2]["pid"] not in ("0", again[t2])):
            time.sleep(0.05)
        step("an adopted mounter that dies is mounted again",
             is_live(t2) and holder_list(hsock)[t2]["pid"] != again[t2],
             "%.2f s" % (time.time() - t0))

        # (d) kubelet unpublishes right after a plugin restart (pod deleted meanwhile)
        c.close()
        plugin.kill()
        c = plugin.start(args.kegfs)
        for t in (t1, t2):
            c.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(volume_id=vid,
                                                                     target_path=t), timeout=60)
        left = holder_list(hsock)
        step("(d) unpublish after a plugin restart: clean",
             not os.path.exists(t1) and not os.path.exists(t2) and not left and
             not mounters_of(t1) and not mounters_of(t2), "held=%s" % sorted(left))
        msocks = os.listdir(os.path.join(hdir, "metrics"))
        sc = Scrape(mport)
        step("(d) metrics: no socket left, no mounter series",
             not msocks and not sc.mounters() and sc.value("kegfs_csi_live_mounters") == 0,
             "sockets %s" % msocks)
        c.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vid, secrets=secrets),
                                  timeout=60)
        vid = None
        subprocess.run(["umount", "-l", view])
        print("FIGURES (a)+(b): app records=%s errors=%s longest_stall_ms=%s; reader "
              "errors=%s longest_stall_ms=%s; (c) host back after %.2f s, view after %.2f s"
              % (wr["records"], wr["errors"], wr["max_stall_ms"], rd["errors"],
                 rd["max_stall_ms"], back or -1, vback or -1), flush=True)
    except Exception as e:  # noqa: BLE001
        step("unexpected error", False, repr(e))
    finally:
        open(stop, "w").close()
        for p in apps:
            try:
                p.wait(10)
            except Exception:  # noqa: BLE001
                p.kill()
        if vid:
            try:
                for t in (t1, t2):
                    c.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
                        volume_id=vid, target_path=t), timeout=30)
            except Exception:  # noqa: BLE001
                pass
        c.close()
        plugin.kill(signal.SIGTERM)
        holder.send_signal(signal.SIGTERM)
        holder.wait(20)
    print("%d passed, %d failed" % (RESULTS["passed"], RESULTS["failed"]))
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
