"""csiclient.py -- a small CSI v1 client over a unix socket, for the KegFS e2e tests.

The Python stubs are generated at run time from csi/proto/csi.proto with
grpc_tools (Debian: python3-grpc-tools) into a temporary directory; nothing
generated is committed.  Run with Debian's /usr/bin/python3, which has
python3-grpcio.
"""
import atexit
import os
import shutil
import sys
import tempfile

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PROTO_DIR = os.path.join(REPO, "csi", "proto")


def _wkt_include():
    """Directory holding google/protobuf/*.proto (grpc_tools' copy, else /usr/include)."""
    try:
        import grpc_tools
        d = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        if os.path.exists(os.path.join(d, "google", "protobuf", "wrappers.proto")):
            return d
    except ImportError:
        pass
    return "/usr/include"


def load_stubs():
    """Generate csi_pb2 / csi_pb2_grpc into a temp dir and import them."""
    from grpc_tools import protoc
    out = tempfile.mkdtemp(prefix="kegfs-csi-py-")
    atexit.register(shutil.rmtree, out, True)
    args = ["protoc", "-I" + PROTO_DIR, "-I" + _wkt_include(),
            "--python_out=" + out, "--grpc_python_out=" + out,
            os.path.join(PROTO_DIR, "csi.proto")]
    if protoc.main(args) != 0:
        raise RuntimeError("grpc_tools.protoc failed on csi.proto")
    sys.path.insert(0, out)
    import csi_pb2
    import csi_pb2_grpc
    return csi_pb2, csi_pb2_grpc


pb, pb_grpc = load_stubs()


class Client:
    """Identity, Controller and Node stubs on one channel."""

    def __init__(self, endpoint, timeout=60.0):
        if endpoint.startswith("unix://"):
            target = "unix:" + endpoint[len("unix://"):]
        elif endpoint.startswith("/"):
            target = "unix:" + endpoint
        else:
            target = endpoint
        self.channel = grpc.insecure_channel(target)
        self.identity = pb_grpc.IdentityStub(self.channel)
        self.controller = pb_grpc.ControllerStub(self.channel)
        self.node = pb_grpc.NodeStub(self.channel)
        self.timeout = timeout

    def close(self):
        self.channel.close()

    def wait_ready(self, seconds=20.0):
        grpc.channel_ready_future(self.channel).result(timeout=seconds)

    def call(self, stub, method, req):
        return getattr(stub, method)(req, timeout=self.timeout)


def mount_cap(mode=None, flags=()):
    """A VolumeCapability with the mount access type."""
    if mode is None:
        mode = pb.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER
    return pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(mount_flags=list(flags)),
        access_mode=pb.VolumeCapability.AccessMode(mode=mode))


def block_cap(mode=None):
    if mode is None:
        mode = pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
    return pb.VolumeCapability(
        block=pb.VolumeCapability.BlockVolume(),
        access_mode=pb.VolumeCapability.AccessMode(mode=mode))
