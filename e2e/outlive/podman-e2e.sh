#!/usr/bin/env bash
# podman-e2e.sh -- mounts that outlive the node plugin, under podman: the holder
# and the node plugin in privileged containers (the work dir shared rshared, like
# the kubelet pods dir), app containers binding the target with rslave
# (HostToContainer) propagation; see podman_e2e.py for the events and checks.
# The binaries of the build are bind-mounted into the image: KEG_PODMAN_IMAGE,
# else localhost/kegfs:dev (the Dockerfile), else localhost/kegfs-runtime:<hash of the file>,
# built from Containerfile.runtime on localhost/debian:12-slim when missing.
# Exit 77 (skipped) without podman, root, /dev/fuse or a base image.
#   KEG_BUILD=/path/to/build e2e/outlive/podman-e2e.sh
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"

command -v podman >/dev/null || { echo "SKIP: podman not installed"; exit 77; }
can_mount || { echo "SKIP: needs root, /dev/fuse and $KEGFS_BIN"; exit 77; }
[ -x "$CSI_BIN" ] || die "no $CSI_BIN (build kegfs-csi, or set KEG_BUILD)"
KEGFS_BIN=$(readlink -f "$KEGFS_BIN")     # bind-mount sources must be absolute
CSI_BIN=$(readlink -f "$CSI_BIN")
$PY -c 'import grpc, grpc_tools' 2>/dev/null ||
  { echo "SKIP: $PY lacks python3-grpcio / python3-grpc-tools"; exit 77; }

IMAGE=${KEG_PODMAN_IMAGE:-}
if [ -z "$IMAGE" ]; then
  if podman image exists localhost/kegfs:dev; then
    IMAGE=localhost/kegfs:dev
  else
    IMAGE=localhost/kegfs-runtime:$(sha256sum "$REPO/e2e/outlive/Containerfile.runtime" | cut -c1-12)
    if ! podman image exists "$IMAGE"; then
      podman image exists localhost/debian:12-slim ||
        { echo "SKIP: no localhost/debian:12-slim base image"; exit 77; }
      log "building $IMAGE from e2e/outlive/Containerfile.runtime"
      podman build --network host --pull=never -f "$REPO/e2e/outlive/Containerfile.runtime" \
        -t "$IMAGE" "$REPO/e2e/outlive" >&2 || die "cannot build $IMAGE"
    fi
  fi
fi
podman run --rm --network host -v "$KEGFS_BIN:/usr/local/bin/kegfs:ro" \
  --entrypoint /usr/local/bin/kegfs "$IMAGE" --version >/dev/null 2>&1 ||
  die "the kegfs of $BUILD does not run in $IMAGE (another Debian release?)"
log "image $IMAGE, binaries of $BUILD"

W=$(mktemp -d /tmp/kegfs-podman.XXXXXX)
cleanup() {
  umount_below "$W"
  umount -l "$W" 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then log "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
rc=0
$PY "$REPO/e2e/outlive/podman_e2e.py" --image "$IMAGE" --csi-bin "$CSI_BIN" \
  --kegfs "$KEGFS_BIN" --workdir "$W" || rc=$?
if [ $rc -ne 0 ]; then
  for f in "$W"/holder/logs/*.log "$W"/out/*.err; do
    [ -f "$f" ] && { log "--- $f"; tail -30 "$f" >&2; }
  done
fi
exit $rc
