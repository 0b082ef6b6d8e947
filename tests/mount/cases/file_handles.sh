#!/usr/bin/env bash
# file_handles.sh -- FUSE export: name_to_handle_at / open_by_handle_at resolve a file and a
# directory after the kernel dropped its inodes (drop_caches) and after a remount (lookup of
# "." and ".." in the mounter); the handle of a deleted file fails with ESTALE, and so does a
# handle of another volume's file.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
KEG_FHANDLE=${KEG_FHANDLE:-$(dirname "${KEG_SYSCALLS:-/nonexistent/x}")/keg_fhandle}
need_bin KEG_FHANDLE keg_fhandle

mkdir -p "$MNT/a/b/c" || fail "mkdir"
printf 'handle data' > "$MNT/a/b/c/file" || fail "write"
printf 'doomed' > "$MNT/a/gone" || fail "write gone"
for x in a/b/c/file a/b/c a/gone; do
  "$KEG_FHANDLE" save "$MNT/$x" "$WORK/h.${x//\//_}" || fail "name_to_handle_at $x"
done

# in the kernel's cache
assert_eq "$("$KEG_FHANDLE" cat "$MNT" "$WORK/h.a_b_c_file")" 'handle data' "open by handle (cached)"

# after the kernel dropped its dentries and inodes: resolved by lookup(ino, ".")
rm "$MNT/a/gone" || fail "rm"
sync
echo 2 > /proc/sys/vm/drop_caches
assert_eq "$("$KEG_FHANDLE" cat "$MNT" "$WORK/h.a_b_c_file")" 'handle data' \
  "open by handle after drop_caches"
assert_eq "$("$KEG_FHANDLE" cat "$MNT" "$WORK/h.a_b_c")" 'file' "directory by handle after drop_caches"
out=$("$KEG_FHANDLE" cat "$MNT" "$WORK/h.a_gone" 2>&1) && fail "a deleted file opened by handle: $out"
echo "$out" | grep -q ESTALE || fail "deleted file by handle: expected ESTALE, got: $out"

# across a remount of the same volume
mt_umount
mt_mount
assert_eq "$("$KEG_FHANDLE" cat "$MNT" "$WORK/h.a_b_c_file")" 'handle data' \
  "open by handle after a remount"
assert_eq "$("$KEG_FHANDLE" cat "$MNT" "$WORK/h.a_b_c")" 'file' "directory by handle after a remount"
# the directory was reconnected through lookup(ino, ".."): its path is known again
[ -d "$MNT/a/b/c" ] || fail "a/b/c after reconnect"
out=$("$KEG_FHANDLE" cat "$MNT" "$WORK/h.a_gone" 2>&1) && fail "deleted file opened after remount"
echo "$out" | grep -q ESTALE || fail "deleted file after remount: expected ESTALE, got: $out"
mt_umount

# another volume (same inode numbers, another uuid): ESTALE, never its file
if [ "$META_KIND" = sqlite ] && [ -n "$OBJDIR" ]; then
  mkdir -p "$WORK/obj2"
  "$KEGFS" format --bucket "$WORK/obj2" "sqlite3://$WORK/other.db" other-vol >/dev/null \
    || fail "format other volume"
  "$KEGFS" mount -d --log-file "$MT_LOG" "sqlite3://$WORK/other.db" "$MNT" >/dev/null \
    || fail "mount other volume"
  mkdir -p "$MNT/a/b/c" && printf 'other' > "$MNT/a/b/c/file" || fail "other volume setup"
  sync
  echo 2 > /proc/sys/vm/drop_caches
  out=$("$KEG_FHANDLE" cat "$MNT" "$WORK/h.a_b_c_file" 2>&1) \
    && fail "another volume's file opened through a handle: $out"
  echo "$out" | grep -q ESTALE || fail "handle on another volume: expected ESTALE, got: $out"
  mt_umount
fi
mt_mount
exit 0
