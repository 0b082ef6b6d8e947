#!/usr/bin/env bash
# relative_paths.sh -- relative --log-file and --cache-dir of `kegfs mount -d` name files
# in the directory the command was given in, not in / where the background mounter
# runs, and keep that meaning across an in-place upgrade (which parses the same
# command line again): the log goes on in the same file, and the new worker finds the
# object staged in the relative cache directory and uploads it.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
sup=$(mounter_pid)
[ -n "$(pgrep -P "$sup" | head -1)" ] || skip "no worker under the supervisor (not root?)"
mt_umount
name=kegmt-rel-$$
mkdir -p "$WORK/here/$name.cache" || fail "mkdir"
# shellcheck disable=SC2086
(cd "$WORK/here" && "$KEGFS" mount -d --log-file "$name.log" --writeback \
   --cache-dir "$name.cache" --upload-delay 30 $MT_MOUNT_EXTRA "$META" "$MNT") \
  > "$WORK/mount.out" 2>&1 || fail "mount with relative paths: $(cat "$WORK/mount.out")"
is_mounted || fail "not mounted"
log=$WORK/here/$name.log
grep -q "log $log)" "$WORK/mount.out" || fail "mount did not name the absolute log: $(cat "$WORK/mount.out")"
grep -q 'mounted volume' "$log" || fail "no 'mounted volume' line in $log"
[ -e "/$name.log" ] && fail "the log went to /$name.log"

head -c 700000 /dev/urandom > "$WORK/src" || fail "source"
cp "$WORK/src" "$MNT/f" && sync "$MNT/f" || fail "write + fsync"
find "$WORK/here/$name.cache" -type f | grep -q . \
  || fail "nothing staged under the relative cache directory"
[ -e "/$name.cache" ] && fail "a cache directory /$name.cache was made"

out=$("$KEGFS" upgrade "$MNT" 2>&1) || fail "upgrade: $out"
note "$out"
grep -q 'took over' "$log" || fail "the upgraded mounter does not log to $log"
grep -q 'staged objects .* were not uploaded before the last stop: uploading them now' "$log" \
  || fail "the new worker did not find the staged object in the relative cache directory"
[ -e "/$name.log" ] && fail "the upgraded mounter logs to /$name.log"
[ -e "/$name.cache" ] && fail "the upgraded mounter made /$name.cache"
uploaded() { "$KEGFS" stats "$MNT" 2>/dev/null | grep -Eq 'in [1-9][0-9]* objects uploaded'; }
wait_for 10 uploaded || fail "the staged object was not uploaded: $("$KEGFS" stats "$MNT" 2>&1)"
cmp "$WORK/src" "$MNT/f" || fail "content after the upgrade"
[ "$(readlink "/proc/$(mounter_pid)/cwd")" = / ] || fail "the upgraded mounter does not run in /"
mt_umount
mt_mount
cmp "$WORK/src" "$MNT/f" || fail "content after a remount"
exit 0
