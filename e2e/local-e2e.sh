#!/usr/bin/env bash
# local-e2e.sh -- the CSI driver end to end on this machine, without Kubernetes:
# real Redis (scripts/redis-server.sh), real S3 when available
# (scripts/s3-server.sh; KEG_E2E_S3=0 forces the file store), real FUSE mounts,
# and e2e/local_e2e.py driving the sockets the way external-provisioner and
# kubelet do.  Needs root and /dev/fuse (exit 77 = skipped otherwise).
#   KEG_BUILD=/path/to/build e2e/local-e2e.sh
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

can_mount || { echo "SKIP: needs root, /dev/fuse and $KEGFS_BIN"; exit 77; }
[ -x "$CSI_BIN" ] || die "no $CSI_BIN (build kegfs-csi, or set KEG_BUILD)"
command -v redis-server >/dev/null || { echo "SKIP: redis-server not installed"; exit 77; }
$PY -c 'import grpc, grpc_tools, yaml' 2>/dev/null ||
  { echo "SKIP: $PY lacks python3-grpcio / python3-grpc-tools / python3-yaml"; exit 77; }

W=$(mktemp -d /tmp/kegfs-e2e.XXXXXX)
REDIS_PORT=${KEG_E2E_REDIS_PORT:-6392}
S3_STARTED=0
cleanup() {
  umount_below "$W"
  "$REPO/scripts/redis-server.sh" stop "$REDIS_PORT" "$W/redis" >/dev/null 2>&1 || true
  if [ "$S3_STARTED" = 1 ]; then "$REPO/scripts/s3-server.sh" stop "$W/s3" >/dev/null 2>&1 || true; fi
  rm -rf "$W"
}
trap cleanup EXIT

"$REPO/scripts/redis-server.sh" start "$REDIS_PORT" "$W/redis" >/dev/null
storage=(--storage file --bucket "$W/bucket")
mkdir -p "$W/bucket" "$W/pods"
if [ "${KEG_E2E_S3:-1}" != 0 ] && [ -n "${KEG_TEST_S3_BUCKET:-}" ]; then
  log "using the running S3 gateway at $KEG_TEST_S3_BUCKET"
  storage=(--storage s3 --bucket "$KEG_TEST_S3_BUCKET"
           --access-key "$KEG_TEST_S3_ACCESS_KEY")
elif [ "${KEG_E2E_S3:-1}" != 0 ] && [ -x "$REPO/scripts/s3-server.sh" ] && command -v radosgw >/dev/null; then
  log "starting the S3 gateway (KEG_E2E_S3=0 to use the file store)"
  if "$REPO/scripts/s3-server.sh" start "$W/s3" >"$W/s3.log" 2>&1; then
    S3_STARTED=1
    eval "$("$REPO/scripts/s3-server.sh" env "$W/s3")"
    storage=(--storage s3 --bucket "$KEG_TEST_S3_BUCKET"
             --access-key "$KEG_TEST_S3_ACCESS_KEY")
  else
    log "S3 gateway did not start (see below); using the file store"; tail -5 "$W/s3.log" >&2
  fi
fi
MOUNTER=$KEGFS_BIN
log "mounter: $MOUNTER; object store: ${storage[1]}"
rc=0
$PY "$REPO/e2e/local_e2e.py" --csi-bin "$CSI_BIN" --mounter "$MOUNTER" --workdir "$W" \
  --redis-port "$REDIS_PORT" "${storage[@]}" || rc=$?
if [ $rc -ne 0 ]; then
  for f in "$W"/plugin-*.log "$W"/state/logs/*.log; do
    [ -f "$f" ] && { log "--- $f"; tail -30 "$f" >&2; }
  done
fi
exit $rc
