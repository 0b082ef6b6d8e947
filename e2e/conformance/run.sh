#!/usr/bin/env bash
# run.sh -- start kegfs-csi (mode all) on a temp socket with SQLite metadata and
# file objects, and run the conformance client (sanity.py) against it.
# Real mounts are exercised when running as root with /dev/fuse (else skipped).
#   KEG_BUILD=/path/to/build e2e/conformance/run.sh
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
[ -x "$CSI_BIN" ] || die "no $CSI_BIN (build the kegfs-csi target, or set KEG_BUILD)"
$PY -c 'import grpc, grpc_tools' 2>/dev/null ||
  { echo "SKIP: $PY lacks grpcio/grpc_tools (apt-get install python3-grpcio python3-grpc-tools)"; exit 77; }

W=$(mktemp -d /tmp/kegfs-sanity.XXXXXX)
mkdir -p "$W/meta" "$W/bucket" "$W/pods"
cleanup() { stop_plugin; umount_below "$W"; sleep 0.5; rm -rf "$W"; }
trap cleanup EXIT
MOUNTER=$KEGFS_BIN
mount_flag=()
if can_mount; then mount_flag=(--mount); fi
MPORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_plugin "$W" all --kubelet-dir "$W" --cache-root "$W/cache" --metrics "127.0.0.1:$MPORT"
rc=0
$PY "$REPO/e2e/conformance/sanity.py" --endpoint "unix://$W/csi.sock" \
  --metrics-url "http://127.0.0.1:$MPORT/metrics" \
  --metaurl "sqlite3://$W/meta/" --storage file --bucket "$W/bucket" \
  --target-dir "$W/pods" --node-id e2e-node "${mount_flag[@]}" || rc=$?
if [ $rc -ne 0 ]; then log "plugin log:"; tail -50 "$W/plugin.log" >&2; fi
exit $rc
