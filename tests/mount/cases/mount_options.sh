#!/usr/bin/env bash
# mount_options.sh -- read-only mounts refuse writes with EROFS and still read; the cache
# timeouts given on the command line are accepted; `kegfs info` describes a file.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs

printf 'content' > "$MNT/f" && mkdir "$MNT/d" || fail "setup"
ino=$(stat -c %i "$MNT/f")
out=$("$KEGFS" info "$MNT/f" 2>&1) || fail "kegfs info failed: $out"
echo "$out" | grep -q "$ino" || fail "kegfs info does not show inode $ino: $out"
mt_umount

mt_mount --read-only
assert_eq "$(cat "$MNT/f")" content "read on a read-only mount"
for cmd in "touch $MNT/new" "mkdir $MNT/d2" "rm $MNT/f" "chmod 600 $MNT/f" "mv $MNT/f $MNT/g" \
           "ln -s x $MNT/l" "truncate -s 0 $MNT/f"; do
  out=$($cmd 2>&1) && fail "'$cmd' succeeded on a read-only mount"
  echo "$out" | grep -q 'Read-only file system' || fail "'$cmd': expected EROFS, got: $out"
done
out=$(sh -c "printf x >> $MNT/f" 2>&1) && fail "append succeeded on a read-only mount"
grep -q ' ro[ ,]' <(grep " $MNT " /proc/self/mountinfo) || fail "mount table does not say ro"
mt_umount

mt_mount --attr-cache 0 --entry-cache 0 --dir-entry-cache 0
printf 'more' >> "$MNT/f" || fail "append after remount rw"
assert_eq "$(cat "$MNT/f")" contentmore "content with zero cache timeouts"
