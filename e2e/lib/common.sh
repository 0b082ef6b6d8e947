# common.sh -- helpers shared by the local e2e scripts (sourced).
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${KEG_BUILD:-$REPO/build}
PY=/usr/bin/python3          # Debian's python3 has python3-grpcio (NOTES.md)
CSI_BIN=${CSI_BIN:-$BUILD/csi/kegfs-csi}
KEGFS_BIN=${KEGFS_BIN:-$BUILD/mounter/kegfs}

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# 0 if this machine can do real FUSE mounts as root.
can_mount() {
  [ "$(id -u)" = 0 ] && [ -c /dev/fuse ] && [ -x "$KEGFS_BIN" ]
}

# start_plugin DIR MODE [extra args]: starts kegfs-csi, sets PLUGIN_PID.
start_plugin() {
  local dir=$1 mode=$2; shift 2
  "$CSI_BIN" --endpoint "unix://$dir/csi.sock" --nodeid e2e-node --mode "$mode" \
    --state-dir "$dir/state" --mounter "$MOUNTER" "$@" >> "$dir/plugin.log" 2>&1 &
  PLUGIN_PID=$!
  for _ in $(seq 1 100); do
    [ -S "$dir/csi.sock" ] && return 0
    kill -0 "$PLUGIN_PID" 2>/dev/null || { tail -20 "$dir/plugin.log" >&2; die "plugin exited"; }
    sleep 0.1
  done
  die "plugin socket $dir/csi.sock did not appear"
}

stop_plugin() {
  if [ -n "${PLUGIN_PID:-}" ] && kill -0 "$PLUGIN_PID" 2>/dev/null; then
    kill -TERM "$PLUGIN_PID"
    for _ in $(seq 1 50); do kill -0 "$PLUGIN_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PLUGIN_PID" 2>/dev/null && kill -KILL "$PLUGIN_PID"
    wait "$PLUGIN_PID" 2>/dev/null || true
  fi
  PLUGIN_PID=
}

# Unmount every FUSE mount below DIR (cleanup after a failed run).
umount_below() {
  local dir=$1
  awk -v d="$dir" '$2 ~ "^"d {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
}
