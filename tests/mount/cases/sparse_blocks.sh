#!/usr/bin/env bash
# sparse_blocks.sh -- st_blocks counts the data stored, not the size (SQLite engine; the
# Redis engine does not track it yet and reports the size, docs/posix.md): a 1.6 MB file
# holding 50 KB of data shows ~50 KB in du (also through a directory listing), a dense
# file shows its size, truncating down lowers it, and cp --sparse=always keeps the holes.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_cmd du stat dd truncate cp
case "${META_KIND:-}" in
  redis) skip "the Redis engine does not track allocated bytes (st_blocks = size)" ;;
esac

KB=1024
blocks_bytes() { echo $(( $(stat -c %b "$1") * $(stat -c %B "$1") )); }
cd "$MNT" || fail "cd"
mkdir d || fail "mkdir"
truncate -s 1600K d/sparse || fail "truncate"
dd if=/dev/urandom of=d/sparse bs=1K count=50 seek=800 conv=notrunc status=none || fail "dd"
assert_eq "$(stat -c %s d/sparse)" $((1600 * KB)) "size of the sparse file"
b=$(blocks_bytes d/sparse)
note "sparse: $b bytes in st_blocks"
[ "$b" -ge $((50 * KB)) ] || fail "st_blocks $b bytes: less than the 50 KB stored"
[ "$b" -le $((64 * KB)) ] || fail "st_blocks $b bytes for 50 KB of data in a 1.6 MB file"
du_k=$(du -k d/sparse | cut -f1)
[ "$du_k" -ge 50 ] && [ "$du_k" -le 64 ] || fail "du -k: $du_k"
# through a listing (readdirplus attributes), in a fresh kernel view
ls -l d > /dev/null
du_s=$(du -sk d | cut -f1)
note "du -sk d: $du_s"
[ "$du_s" -le 70 ] || fail "du -sk of the directory: $du_s KiB"

# a dense file counts fully
dd if=/dev/urandom of=dense bs=64K count=16 status=none || fail "dd dense"
b=$(blocks_bytes dense)
[ "$b" -ge $((1024 * KB)) ] || fail "dense 1 MiB file: st_blocks $b bytes"
# truncating down lowers it; a hole-only file has none
truncate -s 100K dense || fail "truncate down"
b=$(blocks_bytes dense)
[ "$b" -ge $((100 * KB)) ] && [ "$b" -le $((104 * KB)) ] || fail "after truncate to 100K: $b bytes"
truncate -s 10M holes || fail "truncate -s 10M"
assert_eq "$(stat -c %b holes)" 0 "st_blocks of a file that is one hole"

# cp --sparse=always sees the holes and keeps them
cp --sparse=always d/sparse copy || fail "cp"
cmp d/sparse copy || fail "copy differs"
b=$(blocks_bytes copy)
note "copy: $b bytes in st_blocks"
[ "$b" -le $((64 * KB)) ] || fail "cp --sparse=always: the copy stores $b bytes"
rm -rf d dense holes copy
