#!/usr/bin/env bash
# corrupt_block.sh -- a byte flipped in a stored block object must turn into EIO
# ("Input/output error") for the reader and an ERROR line naming the object, never into
# wrong data; other files stay readable.  The object is rewritten from outside kegfs
# (the file store's file, or through the S3 API).
# allow-log: [Cc][Rr][Cc]|[Cc]hecksum|[Cc]orrupt|Input/output|EIO|chunks/
# timeout: 300
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
need_kegfs
need_objstore

head -c $((1024 * 1024)) /dev/urandom > "$WORK/victim"
head -c 100000 /dev/urandom > "$WORK/other"
cp "$WORK/other" "$MNT/other" || fail "cp other"
sync
before=$(obj_keys) || fail "listing the objects failed"
cp "$WORK/victim" "$MNT/victim" || fail "cp victim"
sync
mt_umount
after=$(obj_keys) || fail "listing the objects failed"
key=$(comm -13 <(echo "$before") <(echo "$after") | head -1)
[ -n "$key" ] || fail "no new block object for victim in the ${STORAGE:-file} store"
obj="$WORK/block.obj"
obj_get "$key" "$obj" || fail "cannot fetch $key from the store"
size=$(stat -c %s "$obj")
off=$((size / 2))
flipped=$(flip_byte "$obj" $off)
obj_put "$key" "$obj" || fail "cannot store the damaged $key"
note "flipped byte $off of $key ($size bytes): $flipped"

: > "$WORK/cat.err"
mt_mount
if cat "$MNT/victim" > "$WORK/read.out" 2> "$WORK/cat.err"; then
  cmp -s "$WORK/read.out" "$WORK/victim" && fail "read of a corrupted block succeeded with the OLD data (block not read?)"
  fail "read of a corrupted block returned wrong data without an error"
fi
grep -q 'Input/output error' "$WORK/cat.err" || fail "cat failed without EIO: $(cat "$WORK/cat.err")"
note "cat: $(cat "$WORK/cat.err")"
# the log names the object (its key or its file name)
grep -E ' (ERROR|WARN) ' "$MT_LOG" | grep -qF "$(basename "$key")" \
  || fail "mounter log does not name the corrupted object $key"
# the rest of the volume is fine
cmp "$WORK/other" "$MNT/other" || fail "an undamaged file is unreadable"
# a second read fails the same way (no bad data cached)
cat "$MNT/victim" > /dev/null 2>&1 && fail "second read of the corrupted file succeeded"
exit 0
