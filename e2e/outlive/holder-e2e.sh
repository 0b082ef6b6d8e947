#!/usr/bin/env bash
# holder-e2e.sh -- mounts that outlive the node plugin, on this host without
# containers: `kegfs holder` owns the mounters, kegfs-csi runs in holder mount
# mode, and e2e/outlive/holder_e2e.py checks, with an app appending + fsyncing
# every 50 ms and a reader listing the directory:
#   (a) the plugin killed -9 and restarted: zero errors, same mounters;
#   (b) the plugin restarted with another kegfs (a copy of the build): every
#       mounter upgraded in place, zero errors, zero lost records;
#   (c) a mounter killed outright: the holder mounts it again within 2 s;
#   (d) unpublish right after a plugin restart unmounts cleanly.
# Needs root, /dev/fuse, python3-grpcio (exit 77 = skipped otherwise).
#   KEG_BUILD=/path/to/build e2e/outlive/holder-e2e.sh
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"

can_mount || { echo "SKIP: needs root, /dev/fuse and $KEGFS_BIN"; exit 77; }
[ -x "$CSI_BIN" ] || die "no $CSI_BIN (build kegfs-csi, or set KEG_BUILD)"
$PY -c 'import grpc, grpc_tools, yaml' 2>/dev/null ||
  { echo "SKIP: $PY lacks python3-grpcio / python3-grpc-tools / python3-yaml"; exit 77; }

W=$(mktemp -d /tmp/kegfs-outlive.XXXXXX)
cleanup() {
  [ -f "$W/holder.pid" ] && kill "$(cat "$W/holder.pid")" 2>/dev/null || true
  for p in $(cat "$W"/pids 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  umount_below "$W"
  if [ "${KEEP:-0}" = 1 ]; then log "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
rc=0
$PY "$REPO/e2e/outlive/holder_e2e.py" --csi-bin "$CSI_BIN" --kegfs "$KEGFS_BIN" \
  --workdir "$W" || rc=$?
if [ $rc -ne 0 ]; then
  for f in "$W"/plugin.log "$W"/holder.log "$W"/holder/logs/*.log; do
    [ -f "$f" ] && { log "--- $f"; tail -30 "$f" >&2; }
  done
fi
exit $rc
