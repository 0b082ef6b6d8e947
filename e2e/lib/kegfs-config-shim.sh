#!/usr/bin/env bash
# kegfs-config-shim.sh -- TEST-ONLY adapter for a `kegfs` binary whose
# `mount --config FILE` does not yet accept the keys meta-url / access-key /
# secret-key (the contract kegfs-csi relies on: see docs/csi.md).
#
# kegfs-csi runs   <mounter> mount --config F [--read-only] [-o OPTS] TARGET
# this shim runs   kegfs mount --config F' [--read-only] [-o OPTS] META_URL TARGET
# where F' is F without the three secret keys.  It puts the META_URL on argv,
# which the driver itself never does: use it only for local e2e runs with test
# credentials.  Set KEGFS_BIN to the real binary.
set -euo pipefail
KEGFS_BIN=${KEGFS_BIN:?set KEGFS_BIN to the kegfs binary}
if [ "${1:-}" != mount ]; then exec "$KEGFS_BIN" "$@"; fi
shift
args=() cfg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --config) cfg=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -n "$cfg" ] || exec "$KEGFS_BIN" mount "${args[@]}"
url=$(sed -n 's/^meta-url: "\(.*\)"$/\1/p' "$cfg")
[ -n "$url" ] || { echo "shim: no meta-url in $cfg" >&2; exit 2; }
target=${args[-1]}
unset 'args[-1]'
rest=$(mktemp "${cfg}.shim.XXXXXX")
grep -Ev '^(meta-url|access-key|secret-key):' "$cfg" > "$rest" || true
# exec keeps the pid the driver recorded; the copy goes once the mounter read it
(sleep 10; rm -f "$rest") </dev/null >/dev/null 2>&1 &
if grep -q ':' "$rest"; then
  exec "$KEGFS_BIN" mount --config "$rest" "${args[@]}" "$url" "$target"
fi
exec "$KEGFS_BIN" mount "${args[@]}" "$url" "$target"
