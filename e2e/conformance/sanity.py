#!/usr/bin/python3
"""sanity.py -- KegFS's CSI conformance client (what kubernetes-csi csi-sanity checks).

Drives a running kegfs-csi over its unix socket: every RPC with valid and
invalid requests, idempotency, NOT_FOUND, INVALID_ARGUMENT, ALREADY_EXISTS on a
capacity mismatch, and (with --mount) the real publish path.  Prints one line
per check and a final "N passed, M failed" line; exits 1 on any failure.

    /usr/bin/python3 e2e/conformance/sanity.py --endpoint unix:///tmp/x/csi.sock \
        --metaurl sqlite3:///tmp/x/meta/ --storage file --bucket /tmp/x/bucket \
        --target-dir /tmp/x/pods [--mount]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
import uuid

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csiclient  # noqa: E402
from csiclient import pb, mount_cap, block_cap  # noqa: E402

AM = pb.VolumeCapability.AccessMode
GiB = 1 << 30
MiB = 1 << 20

RESULTS = {"passed": 0, "failed": 0, "skipped": 0}


def check(name):
    def deco(fn):
        fn.check_name = name
        CHECKS.append(fn)
        return fn
    return deco


CHECKS = []


def expect_code(code, fn, *args):
    try:
        fn(*args)
    except grpc.RpcError as e:
        if e.code() != code:
            raise AssertionError("expected %s, got %s: %s" % (code, e.code(), e.details()))
        return e.details()
    raise AssertionError("expected %s, got OK" % code)


class Ctx:
    def __init__(self, args):
        self.args = args
        self.c = csiclient.Client(args.endpoint)
        self.secrets = {"metaurl": args.metaurl, "storage": args.storage,
                        "bucket": args.bucket}
        if args.access_key:
            self.secrets["access-key"] = args.access_key
        if args.secret_key:
            self.secrets["secret-key"] = args.secret_key
        self.created = []

    def name(self, tag):
        return "sanity-%s-%s" % (tag, uuid.uuid4().hex[:8])

    def create(self, name, size=64 * MiB, caps=None, params=None, secrets=None):
        req = pb.CreateVolumeRequest(
            name=name, capacity_range=pb.CapacityRange(required_bytes=size),
            volume_capabilities=caps if caps is not None else [mount_cap()],
            parameters=params or {},
            secrets=self.secrets if secrets is None else secrets)
        resp = self.c.controller.CreateVolume(req, timeout=60)
        self.created.append(resp.volume.volume_id)
        return resp.volume

    def delete(self, vid, secrets=None):
        self.c.controller.DeleteVolume(pb.DeleteVolumeRequest(
            volume_id=vid, secrets=self.secrets if secrets is None else secrets), timeout=60)

    def publish(self, vol, target, readonly=False, cap=None):
        return self.c.node.NodePublishVolume(pb.NodePublishVolumeRequest(
            volume_id=vol.volume_id, target_path=target, readonly=readonly,
            volume_capability=cap or mount_cap(), secrets=self.secrets,
            volume_context=dict(vol.volume_context)), timeout=90)

    def unpublish(self, vid, target):
        return self.c.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
            volume_id=vid, target_path=target), timeout=60)

    def target(self, tag):
        return os.path.join(self.args.target_dir, "%s-%s" % (tag, uuid.uuid4().hex[:6]), "mount")


# ------------------------------------------------------------------ Identity

@check("Identity/GetPluginInfo returns name and vendor_version")
def t_info(x):
    r = x.c.identity.GetPluginInfo(pb.GetPluginInfoRequest())
    assert r.name == "csi.kegfs.io", r.name
    assert r.vendor_version


@check("Identity/GetPluginCapabilities: CONTROLLER_SERVICE and online expansion")
def t_pcaps(x):
    r = x.c.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest())
    svc = [c.service.type for c in r.capabilities if c.HasField("service")]
    exp = [c.volume_expansion.type for c in r.capabilities if c.HasField("volume_expansion")]
    assert pb.PluginCapability.Service.CONTROLLER_SERVICE in svc
    assert pb.PluginCapability.VolumeExpansion.ONLINE in exp


@check("Identity/Probe answers ready")
def t_probe(x):
    r = x.c.identity.Probe(pb.ProbeRequest())
    assert r.ready.value


# ---------------------------------------------------------------- Controller

@check("ControllerGetCapabilities: CREATE_DELETE_VOLUME, EXPAND_VOLUME")
def t_ccaps(x):
    r = x.c.controller.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest())
    types = [c.rpc.type for c in r.capabilities]
    R = pb.ControllerServiceCapability.RPC
    assert R.CREATE_DELETE_VOLUME in types and R.EXPAND_VOLUME in types, types


@check("CreateVolume: INVALID_ARGUMENT without name / capabilities / with block")
def t_create_invalid(x):
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.create, "")
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.create, x.name("nocap"), MiB, [])
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.create, x.name("blk"), MiB, [block_cap()])
    bad = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(),
                              access_mode=AM(mode=AM.UNKNOWN))
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.create, x.name("mode"), MiB, [bad])
    msg = expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.create, x.name("nosec"), MiB, None,
                      None, {"storage": "file"})
    assert "metaurl" in msg, msg
    msg = expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.create, x.name("param"), MiB, None,
                      {"block-size": "3K"})
    assert "block-size" in msg, msg


@check("CreateVolume is idempotent; other capacity -> ALREADY_EXISTS")
def t_create_idem(x):
    n = x.name("idem")
    v1 = x.create(n, 64 * MiB)
    v2 = x.create(n, 64 * MiB)
    assert v1.volume_id == v2.volume_id
    assert v1.capacity_bytes == 64 * MiB
    assert dict(v1.volume_context) == dict(v2.volume_context)
    expect_code(grpc.StatusCode.ALREADY_EXISTS, x.create, n, 128 * MiB)
    x.delete(v1.volume_id)


@check("CreateVolume: volume_context holds no password")
def t_create_ctx(x):
    v = x.create(x.name("ctx"))
    url = v.volume_context.get("metaurl", "")
    assert url, dict(v.volume_context)
    pw = csiclient_password(x.args.metaurl)
    assert not pw or pw not in url, url
    x.delete(v.volume_id)


def csiclient_password(url):
    try:
        auth = url.split("://", 1)[1].split("/", 1)[0]
        if "@" in auth and ":" in auth.split("@")[0]:
            return auth.split("@")[0].split(":", 1)[1]
    except IndexError:
        pass
    return ""


@check("DeleteVolume: unknown id OK, twice OK, bad id INVALID_ARGUMENT")
def t_delete(x):
    v = x.create(x.name("del"))
    x.delete(v.volume_id)
    x.delete(v.volume_id)
    x.delete("sanity-never-created")
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.delete, "")
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.delete, "../etc")


@check("ValidateVolumeCapabilities: mount modes confirmed, block not, unknown NOT_FOUND")
def t_validate(x):
    v = x.create(x.name("val"))
    for mode in (AM.SINGLE_NODE_WRITER, AM.SINGLE_NODE_READER_ONLY, AM.MULTI_NODE_READER_ONLY,
                 AM.MULTI_NODE_SINGLE_WRITER, AM.MULTI_NODE_MULTI_WRITER):
        r = x.c.controller.ValidateVolumeCapabilities(pb.ValidateVolumeCapabilitiesRequest(
            volume_id=v.volume_id, volume_capabilities=[mount_cap(mode)], secrets=x.secrets,
            volume_context=dict(v.volume_context)))
        assert r.HasField("confirmed"), mode
    r = x.c.controller.ValidateVolumeCapabilities(pb.ValidateVolumeCapabilitiesRequest(
        volume_id=v.volume_id, volume_capabilities=[block_cap()], secrets=x.secrets))
    assert not r.HasField("confirmed") and r.message
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.c.controller.ValidateVolumeCapabilities,
                pb.ValidateVolumeCapabilitiesRequest(volume_id=v.volume_id, secrets=x.secrets))
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.c.controller.ValidateVolumeCapabilities,
                pb.ValidateVolumeCapabilitiesRequest(volume_capabilities=[mount_cap()],
                                                     secrets=x.secrets))
    expect_code(grpc.StatusCode.NOT_FOUND, x.c.controller.ValidateVolumeCapabilities,
                pb.ValidateVolumeCapabilitiesRequest(volume_id="sanity-missing",
                                                     volume_capabilities=[mount_cap()],
                                                     secrets=x.secrets))
    x.delete(v.volume_id)


@check("ControllerExpandVolume: grows, idempotent, NOT_FOUND, INVALID_ARGUMENT")
def t_expand(x):
    v = x.create(x.name("exp"), 64 * MiB)
    req = pb.ControllerExpandVolumeRequest(volume_id=v.volume_id, secrets=x.secrets,
                                           capacity_range=pb.CapacityRange(
                                               required_bytes=256 * MiB))
    r = x.c.controller.ControllerExpandVolume(req)
    assert r.capacity_bytes == 256 * MiB and not r.node_expansion_required
    r = x.c.controller.ControllerExpandVolume(req)
    assert r.capacity_bytes == 256 * MiB
    req.volume_id = "sanity-missing"
    expect_code(grpc.StatusCode.NOT_FOUND, x.c.controller.ControllerExpandVolume, req)
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.c.controller.ControllerExpandVolume,
                pb.ControllerExpandVolumeRequest(volume_id=v.volume_id, secrets=x.secrets))
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.c.controller.ControllerExpandVolume,
                pb.ControllerExpandVolumeRequest(secrets=x.secrets,
                                                 capacity_range=pb.CapacityRange(
                                                     required_bytes=MiB)))
    x.delete(v.volume_id)


@check("Concurrent calls: 8 CreateVolume/DeleteVolume in parallel with Probes")
def t_concurrent(x):
    import concurrent.futures as cf
    names = [x.name("par%d" % i) for i in range(8)]

    def life(n):
        v = x.create(n, 32 * MiB)
        x.c.identity.Probe(pb.ProbeRequest())
        x.delete(v.volume_id)
        return v.volume_id

    with cf.ThreadPoolExecutor(max_workers=8) as ex:
        ids = list(ex.map(life, names))
        probes = list(ex.map(lambda _: x.c.identity.Probe(pb.ProbeRequest()).ready.value,
                             range(64)))
    assert len(set(ids)) == 8 and all(probes)


@check("Unknown method -> UNIMPLEMENTED")
def t_unimpl(x):
    call = x.c.channel.unary_unary("/csi.v1.Controller/ListVolumes")
    try:
        call(b"", timeout=10)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e.code()
        return
    raise AssertionError("ListVolumes answered OK")


# ---------------------------------------------------------------------- Node

@check("NodeGetInfo / NodeGetCapabilities")
def t_node_info(x):
    r = x.c.node.NodeGetInfo(pb.NodeGetInfoRequest())
    assert r.node_id == x.args.node_id, r.node_id
    r = x.c.node.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest())
    R = pb.NodeServiceCapability.RPC
    types = [c.rpc.type for c in r.capabilities]
    assert R.GET_VOLUME_STATS in types and R.VOLUME_CONDITION in types
    assert R.STAGE_UNSTAGE_VOLUME not in types


@check("NodePublishVolume: INVALID_ARGUMENT on missing/relative fields and block")
def t_pub_invalid(x):
    v = pb.Volume(volume_id="sanity-x", volume_context={})
    P = x.c.node.NodePublishVolume
    base = dict(volume_id="sanity-x", target_path=x.target("inv"),
                volume_capability=mount_cap(), secrets=x.secrets)
    for drop in ("volume_id", "target_path", "volume_capability"):
        kw = dict(base)
        del kw[drop]
        expect_code(grpc.StatusCode.INVALID_ARGUMENT, P, pb.NodePublishVolumeRequest(**kw))
    kw = dict(base, target_path="relative/mount")
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, P, pb.NodePublishVolumeRequest(**kw))
    kw = dict(base, volume_capability=block_cap())
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, P, pb.NodePublishVolumeRequest(**kw))
    kw = dict(base, volume_id="a/../b")
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, P, pb.NodePublishVolumeRequest(**kw))
    del v


@check("NodeUnpublishVolume: INVALID_ARGUMENT on missing fields; unknown target OK")
def t_unpub_invalid(x):
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.unpublish, "", "/tmp/x")
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.unpublish, "sanity-x", "")
    x.unpublish("sanity-x", x.target("never"))


@check("NodeGetVolumeStats: NOT_FOUND for unknown volume/path, INVALID_ARGUMENT")
def t_stats_invalid(x):
    S = x.c.node.NodeGetVolumeStats
    expect_code(grpc.StatusCode.NOT_FOUND, S,
                pb.NodeGetVolumeStatsRequest(volume_id="sanity-x", volume_path="/some/path"))
    # csi-sanity: a path that does not exist, even a relative one, is NOT_FOUND
    expect_code(grpc.StatusCode.NOT_FOUND, S,
                pb.NodeGetVolumeStatsRequest(volume_id="sanity-x", volume_path="some/path"))
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, S,
                pb.NodeGetVolumeStatsRequest(volume_id="sanity-x"))
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, S,
                pb.NodeGetVolumeStatsRequest(volume_path="/some/path"))


@check("publish -> write -> second target reads -> stats -> unpublish (real mounts)")
def t_mount_cycle(x):
    if not x.args.mount:
        raise Skip("needs --mount (root, /dev/fuse and the kegfs mounter)")
    v = x.create(x.name("mnt"), 256 * MiB)
    t1, t2 = x.target("a"), x.target("b")
    x.publish(v, t1)
    x.publish(v, t1)                                   # idempotent
    expect_code(grpc.StatusCode.ALREADY_EXISTS, x.publish, v, t1, True)
    x.publish(v, t2, readonly=True)
    with open(os.path.join(t1, "hello.txt"), "w") as f:
        f.write("kegfs conformance\n")
    with open(os.path.join(t2, "hello.txt")) as f:
        assert f.read() == "kegfs conformance\n"
    try:
        open(os.path.join(t2, "nope.txt"), "w").close()
        raise AssertionError("read-only target accepted a write")
    except OSError:
        pass
    r = x.c.node.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(volume_id=v.volume_id,
                                                                 volume_path=t1))
    units = {u.unit: u for u in r.usage}
    assert units[pb.VolumeUsage.BYTES].total > 0
    assert not r.volume_condition.abnormal
    x.unpublish(v.volume_id, t1)
    x.unpublish(v.volume_id, t1)
    x.unpublish(v.volume_id, t2)
    assert not os.path.exists(t1) and not os.path.exists(t2)
    x.delete(v.volume_id)


@check("hostile NodePublish/Unpublish: targets outside the kubelet dir or through links, "
       "file-naming mount flags, foreign mounts")
def t_hostile_node(x):
    v = x.create(x.name("hostile"), 64 * MiB)
    P = x.publish
    outside = tempfile.mkdtemp(prefix="kegfs-outside-")
    try:
        # a target outside the kubelet dir: refused, its parents not created
        t = os.path.join(outside, "new", "mount")
        expect_code(grpc.StatusCode.INVALID_ARGUMENT, P, v, t)
        assert not os.path.exists(os.path.join(outside, "new")), "created a parent outside"
        # a link below the kubelet dir pointing outside: refused, not followed
        link = os.path.join(x.args.target_dir, "link-" + uuid.uuid4().hex[:6])
        os.symlink(outside, link)
        expect_code(grpc.StatusCode.INVALID_ARGUMENT, P, v, os.path.join(link, "vol", "mount"))
        expect_code(grpc.StatusCode.INVALID_ARGUMENT, P, v, link)
        assert os.listdir(outside) == [], os.listdir(outside)
        # mount flags naming files the root mounter would write: refused
        victim = os.path.join(outside, "victim")
        with open(victim, "w") as f:
            f.write("x")
        for flags in (["log-file=" + victim], ["cache-dir=" + os.path.join(outside, "c")],
                      ["ca-file=" + victim], ["debug"], ["allow_root"]):
            cap = mount_cap()
            cap.mount.mount_flags.extend(flags)
            expect_code(grpc.StatusCode.INVALID_ARGUMENT, P, v, x.target("flags"), False, cap)
        assert open(victim).read() == "x"
        assert sorted(os.listdir(outside)) == ["victim"], os.listdir(outside)
        if x.args.mount:
            # unpublish of a target never published: a tmpfs mounted there and
            # the directory stay
            t = x.target("foreign")
            os.makedirs(t)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", t], check=True)
            try:
                with open(os.path.join(t, "mine"), "w") as f:
                    f.write("keep")
                x.unpublish(v.volume_id, t)
                assert os.path.ismount(t), "unpublish unmounted a foreign tmpfs"
                assert open(os.path.join(t, "mine")).read() == "keep"
            finally:
                subprocess.run(["umount", t])
            assert os.path.isdir(t), "unpublish removed a directory it never created"
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    x.delete(v.volume_id)


@check("--metrics: RPCs by method and code, latency histograms, publish records; 404")
def t_metrics(x):
    if not x.args.metrics_url:
        raise Skip("needs --metrics-url")
    import urllib.error
    import urllib.request
    x.c.identity.Probe(pb.ProbeRequest())
    expect_code(grpc.StatusCode.INVALID_ARGUMENT, x.unpublish, "", "/tmp/x")
    text = urllib.request.urlopen(x.args.metrics_url, timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            samples[k] = float(v)
    probe = samples.get('kegfs_csi_rpc_total{method="Probe",code="OK"}', 0)
    assert probe >= 1, "Probe not counted"
    bad = samples.get('kegfs_csi_rpc_total{method="NodeUnpublishVolume",code="INVALID_ARGUMENT"}',
                      0)
    assert bad >= 1, "the INVALID_ARGUMENT NodeUnpublishVolume is not counted"
    inf = samples.get('kegfs_csi_rpc_duration_seconds_bucket{method="Probe",le="+Inf"}')
    cnt = samples.get('kegfs_csi_rpc_duration_seconds_count{method="Probe"}')
    assert inf is not None and inf == cnt, (inf, cnt)
    assert "kegfs_csi_published_targets" in samples
    assert "kegfs_csi_recovery_rounds_total" in samples
    assert "://" not in text, "a URL in the metrics"
    for sec in x.secrets.values():
        assert sec not in text, "a secret in the metrics"
    try:
        urllib.request.urlopen(x.args.metrics_url.rsplit("/", 1)[0] + "/nope", timeout=10)
        raise AssertionError("GET /nope answered 200")
    except urllib.error.HTTPError as e:
        assert e.code == 404, e.code


class Skip(Exception):
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--metaurl", required=True)
    ap.add_argument("--storage", default="file")
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--access-key", default="")
    ap.add_argument("--secret-key", default="")
    ap.add_argument("--target-dir", default="/tmp/kegfs-sanity-targets")
    ap.add_argument("--node-id", default="sanity-node")
    ap.add_argument("--mount", action="store_true", help="also run the real mount checks")
    ap.add_argument("--metrics-url", default="", help="the plugin's /metrics URL")
    ap.add_argument("-k", default="", help="run only checks whose name contains this")
    args = ap.parse_args()
    x = Ctx(args)
    x.c.wait_ready(20)
    for fn in CHECKS:
        if args.k and args.k not in fn.check_name:
            continue
        try:
            fn(x)
            RESULTS["passed"] += 1
            print("PASS  %s" % fn.check_name, flush=True)
        except Skip as e:
            RESULTS["skipped"] += 1
            print("SKIP  %s (%s)" % (fn.check_name, e), flush=True)
        except Exception as e:  # noqa: BLE001 -- report and go on
            RESULTS["failed"] += 1
            print("FAIL  %s: %s" % (fn.check_name, e), flush=True)
            if os.environ.get("SANITY_DEBUG"):
                traceback.print_exc()
    for vid in set(x.created):
        try:
            x.delete(vid)
        except grpc.RpcError:
            pass
    print("%d passed, %d failed, %d skipped" % (RESULTS["passed"], RESULTS["failed"],
                                              RESULTS["skipped"]))
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
