#!/usr/bin/env bash
# chunk_boundary.sh -- writes that straddle the 64 MiB chunk boundary (aligned and unaligned),
# compared byte for byte with the same writes to a local file; then a 130 MiB file (three
# chunks) compared by sha256, also after dropping the page cache.
# timeout: 400
. "$(dirname "$0")/../lib.sh"

MIB=$((1024 * 1024))
ref=$WORK/ref.bin
f=$MNT/boundary.bin
pat=$WORK/pattern.bin
head -c $((9 * MIB + 4321)) /dev/urandom > "$pat" || fail "cannot make pattern"
rm -f "$ref"

# write_both OFFSET_BYTES COUNT_BYTES: the same dd into the mount and into the local file
write_both() {
  local t
  for t in "$f" "$ref"; do
    dd if="$pat" of="$t" bs=65536 seek="$1" count="$2" iflag=count_bytes oflag=seek_bytes \
       conv=notrunc status=none || fail "dd seek=$1 count=$2 into $t failed"
  done
}
write_both $((60 * MIB)) $((8 * MIB))                 # 60..68 MiB, block aligned
write_both $((64 * MIB - 12345)) $((3 * MIB + 7))     # unaligned across the boundary
write_both $((128 * MIB - 1)) 2                       # one byte each side of 128 MiB
write_both $((64 * MIB)) 1                            # the first byte of chunk 1
write_both 0 4096                                     # some data in chunk 0
write_both $((64 * MIB - 4096)) 4096                  # the last block of chunk 0
sync
cmp "$ref" "$f" || fail "boundary file differs from the local copy"
assert_eq "$(stat -c %s "$f")" "$(stat -c %s "$ref")" "size"
# read it back through a fresh page cache
sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null
cmp "$ref" "$f" || fail "boundary file differs after drop_caches"
# partial reads across the boundary
a=$(dd if="$f" bs=1 skip=$((64 * MIB - 10)) count=20 status=none | sha256sum)
b=$(dd if="$ref" bs=1 skip=$((64 * MIB - 10)) count=20 status=none | sha256sum)
assert_eq "$a" "$b" "20 bytes around 64 MiB"

# a 130 MiB file: three chunks, the last one partial
big=$WORK/big.bin
head -c $((130 * MIB)) /dev/urandom > "$big" || fail "cannot make big file"
want=$(sha256sum < "$big")
cp "$big" "$MNT/big.bin" || fail "cp of 130 MiB failed"
assert_eq "$(stat -c %s "$MNT/big.bin")" $((130 * MIB)) "size of big.bin"
assert_eq "$(sha256sum < "$MNT/big.bin")" "$want" "sha256 of big.bin"
sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null
assert_eq "$(sha256sum < "$MNT/big.bin")" "$want" "sha256 of big.bin after drop_caches"
# overwrite the middle of chunk 1 and the boundary to chunk 2, check again
dd if="$pat" of="$big" bs=1M seek=127 count=3 conv=notrunc status=none
dd if="$pat" of="$MNT/big.bin" bs=1M seek=127 count=3 conv=notrunc status=none \
  || fail "overwrite across 128 MiB failed"
cmp "$big" "$MNT/big.bin" || fail "big.bin differs after overwrite across 128 MiB"
rm -f "$MNT/big.bin" "$f" || fail "rm failed"
