#!/usr/bin/env bash
# unlink_open.sh -- a file removed while a process holds it open stays readable (through
# /proc/PID/fd) and writable; after the last close its objects disappear from the object
# store within a bounded time (KEG_TEST_GC_WAIT seconds, default 60).
# timeout: 300
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"

MIB=$((1024 * 1024))
head -c $((10 * MIB + 17)) /dev/urandom > "$WORK/data"
want=$(sha256sum < "$WORK/data")
cp "$WORK/data" "$MNT/victim" || fail "cp"
sync

count_objects() {   # block objects of the volume (file store, or listed through S3)
  obj_keys | wc -l
}
store=""            # where the objects are checked ("" = not checked)
if [ -n "$OBJDIR" ]; then
  store=$OBJDIR
elif [ "${STORAGE:-}" = s3 ] && (need_objstore) >/dev/null 2>&1; then
  need_objstore
  store="bucket $BUCKET"
fi
if [ -n "$store" ]; then
  before=$(count_objects)
  [ "$before" -gt 0 ] || fail "no block objects in $store after writing 10 MiB"
  note "$before block objects"
fi

# a reader keeps it open
sleep 600 < "$MNT/victim" &
holder=$!
sleep 0.2
rm "$MNT/victim" || fail "rm"
[ -e "$MNT/victim" ] && fail "victim still visible after rm"
ls "$MNT" | grep -q victim && fail "victim still listed after rm"
assert_eq "$(sha256sum < /proc/$holder/fd/0)" "$want" "content through /proc/$holder/fd/0"
assert_eq "$(stat -L -c %h /proc/$holder/fd/0)" 0 "nlink of the open unlinked file"

# a writer: write after unlink, read back through the same open file
exec 5<>"$MNT/scratch"
rm "$MNT/scratch" || fail "rm scratch"
printf 'written after unlink' >&5 || fail "write after unlink"
assert_eq "$(cat /proc/$$/fd/5)" "written after unlink" "read back after unlink"
exec 5>&-

# a new file with the old name is independent
printf 'new' > "$MNT/victim"
assert_eq "$(cat "$MNT/victim")" new "new file under the old name"
assert_eq "$(sha256sum < /proc/$holder/fd/0)" "$want" "old content after re-create"
rm "$MNT/victim"

kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

if [ -n "$store" ]; then
  limit=${KEG_TEST_GC_WAIT:-60}
  no_objects() { [ "$(count_objects)" -eq 0 ]; }
  wait_for "$limit" no_objects \
    || fail "$(count_objects) of $before block objects still in $store $limit s after the last close"
  note "objects gone after close"
else
  note "objects not reachable (storage ${STORAGE:-?}): object deletion not checked"
fi
