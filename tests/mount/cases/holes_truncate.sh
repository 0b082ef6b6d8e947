#!/usr/bin/env bash
# holes_truncate.sh -- sparse files, truncate down/up across chunk boundaries (old data must
# not come back), punched holes, and a truncate by one process seen by another's open fd.
# timeout: 300
. "$(dirname "$0")/../lib.sh"
need_cmd fallocate truncate

MIB=$((1024 * 1024))
f=$MNT/sparse
# zeros_at FILE OFFSET LEN: the range reads as zeros
zeros_at() {
  cmp -s <(dd if="$1" bs=65536 skip="$2" count="$3" iflag=skip_bytes,count_bytes status=none) \
         <(head -c "$3" /dev/zero)
}
bytes_at() {   # bytes_at FILE OFFSET LEN -> hex
  dd if="$1" bs=65536 skip="$2" count="$3" iflag=skip_bytes,count_bytes status=none | od -An -tx1 | tr -d ' \n'
}

# a 200 MiB file that is one hole
truncate -s 200M "$f" || fail "truncate -s 200M"
assert_eq "$(stat -c %s "$f")" $((200 * MIB)) "size"
zeros_at "$f" 0 $MIB || fail "start of a hole file is not zeros"
zeros_at "$f" $((64 * MIB - 100)) 200 || fail "hole across 64 MiB is not zeros"
zeros_at "$f" $((200 * MIB - 4096)) 4096 || fail "end of a hole file is not zeros"

# data islands, then truncate down into the middle of one and back up
printf 'AAAA' | dd of="$f" bs=1 seek=$((64 * MIB - 2)) conv=notrunc status=none
printf 'BBBB' | dd of="$f" bs=1 seek=$((150 * MIB)) conv=notrunc status=none
assert_eq "$(bytes_at "$f" $((64 * MIB - 2)) 4)" 41414141 "island across 64 MiB"
truncate -s $((64 * MIB - 1)) "$f" || fail "truncate down"
assert_eq "$(stat -c %s "$f")" $((64 * MIB - 1)) "size after truncate down"
truncate -s 200M "$f" || fail "truncate up"
assert_eq "$(bytes_at "$f" $((64 * MIB - 2)) 4)" 41000000 "old data after truncate down+up"
zeros_at "$f" $((150 * MIB)) 4 || fail "data beyond a truncate came back at 150 MiB"

# truncate to 0 and regrow
truncate -s 0 "$f" || fail "truncate to 0"
truncate -s 100M "$f" || fail "truncate to 100M"
zeros_at "$f" $((64 * MIB - 2)) 4 || fail "data came back after truncate to 0"

# punch holes (fallocate -p keeps the size)
head -c $((6 * MIB)) /dev/urandom > "$WORK/r"
cp "$WORK/r" "$MNT/p" || fail "cp"
fallocate -p -o $((1 * MIB + 10)) -l $((2 * MIB)) "$MNT/p" || fail "fallocate --punch-hole"
fallocate -p -o $((1 * MIB + 10)) -l $((2 * MIB)) "$WORK/r"
assert_eq "$(stat -c %s "$MNT/p")" $((6 * MIB)) "size after punch"
cmp "$WORK/r" "$MNT/p" || fail "punched file differs from a locally punched copy"
zeros_at "$MNT/p" $((1 * MIB + 10)) $((2 * MIB)) || fail "punched range is not zeros"
# punch across the end of the file: size stays
fallocate -p -o $((5 * MIB)) -l $((4 * MIB)) "$MNT/p" || fail "punch past EOF"
assert_eq "$(stat -c %s "$MNT/p")" $((6 * MIB)) "size after punch past EOF"
# fallocate -l grows the file, reads zeros
fallocate -o $((6 * MIB)) -l $MIB "$MNT/p" || fail "fallocate grow"
assert_eq "$(stat -c %s "$MNT/p")" $((7 * MIB)) "size after fallocate grow"
zeros_at "$MNT/p" $((6 * MIB)) $MIB || fail "fallocated range is not zeros"

# a reader with the file open sees another process's truncate
printf 'xxxxxxxxxxyyyyyyyyyy' > "$MNT/t"
exec 7<"$MNT/t"
truncate -s 10 "$MNT/t" || fail "truncate while open"
assert_eq "$(cat <&7)" xxxxxxxxxx "content read through an fd opened before truncate"
exec 7<&-
# truncate through ftruncate of a writer, then append
exec 8>>"$MNT/t"
printf 'zz' >&8
exec 8>&-
assert_eq "$(cat "$MNT/t")" xxxxxxxxxxzz "append after truncate"
rm -f "$f" "$MNT/p" "$MNT/t"
