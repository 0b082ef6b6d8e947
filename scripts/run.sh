#!/usr/bin/env bash
# run.sh -- format (once) and mount the embedded default volume:
# SQLite metadata + a local object directory, all under ./var.
set -euo pipefail
KEGFS=${1:-build/mounter/kegfs}
top=$(cd "$(dirname "$0")/.." && pwd)
var=$top/var
meta="sqlite3://$var/meta.db"
mkdir -p "$var/objects" "$var/mnt" "$var/log"

if mountpoint -q "$var/mnt"; then
  echo "KegFS is already mounted at $var/mnt"
  echo "  unmount with: $top/$KEGFS umount $var/mnt   (or: make umount)"
  exit 0
fi
if [ ! -s "$var/meta.db" ]; then
  "$KEGFS" format --storage file --bucket "$var/objects" "$meta" kegfs-local
fi
"$KEGFS" mount -d --log-file "$var/log/mount.log" "$meta" "$var/mnt"
cat <<MSG

KegFS is mounted at $var/mnt
  metadata: $meta
  objects:  $var/objects
  log:      $var/log/mount.log
  status:   $top/$KEGFS status $meta
  unmount:  $top/$KEGFS umount $var/mnt   (or: make umount)
MSG
