#!/usr/bin/env bash
# cache_small_disk.sh -- SSD cache and writeback staging share a small disk (a 64 MiB tmpfs,
# --cache-size 1G, far more than the disk):
#   1. the cache leaves free space on the disk: its budget follows the free space (shown
#      by `kegfs stats`), so after 48 MiB written and read back the disk is not full;
#   2. when the disk is full anyway (another file takes the rest), writeback staging comes
#      first: cached blocks are evicted and new writes are still staged, never bypassed
#      ("uploading it directly");
#   3. everything reads back, also after a remount.
# needs: file
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd mount umount

C=$WORK/cdisk
mkdir -p "$C"
mount -t tmpfs -o size=64m kegfs-test-cache "$C" || skip "cannot mount a tmpfs at $C"
cleanup() {
  is_mounted && "$KEGFS" umount "$MNT" > /dev/null 2>&1
  umount "$C" 2> /dev/null || umount -l "$C" 2> /dev/null
}
trap cleanup EXIT
mib_free() { echo $(( $(stat -f -c '%a * %S' "$C") / 1048576 )); }
drained() { "$KEGFS" stats "$MNT" | grep -q 'staged: *0 B in 0 objects'; }

mt_umount
mt_mount --cache-dir "$C" --cache-size 1G --writeback
head -c $((48 << 20)) /dev/urandom > "$WORK/a"
head -c $((16 << 20)) /dev/urandom > "$WORK/b"

# 1. 48 MiB through writeback and the cache on a 64 MiB disk
dd if="$WORK/a" of="$MNT/a" bs=1M conv=fsync status=none || fail "write a"
wait_for 60 drained || fail "a not uploaded: $("$KEGFS" stats "$MNT")"
cmp "$WORK/a" "$MNT/a" || fail "a differs"
sleep 1.5                       # the stats file is rewritten every second
st=$("$KEGFS" stats "$MNT")
note "after a: $(echo "$st" | grep 'cache:'); $(mib_free) MiB free"
[ "$(mib_free)" -ge 24 ] || fail "the cache filled the disk: $(mib_free) MiB free; $st"
echo "$st" | grep -qE 'cache: .* of ([0-9.]+ MiB) ' || fail "no cache line: $st"
echo "$st" | grep -q 'of 1 GiB' && fail "the cache budget ignores the disk's size: $st"

# 2. another file takes most of the free space; writes are still staged
head -c $(( ($(mib_free) - 6) << 20 )) /dev/zero > "$C/filler" || fail "filler"
note "filler written: $(mib_free) MiB free"
dd if="$WORK/b" of="$MNT/b" bs=1M conv=fsync status=none || fail "write b on a full disk"
grep -q 'staging .* failed' "$MT_LOG" && fail "writeback was bypassed: $(grep 'staging .* failed' "$MT_LOG" | head -2)"
wait_for 60 drained || fail "b not uploaded: $("$KEGFS" stats "$MNT")"
sleep 1.5
st=$("$KEGFS" stats "$MNT")
note "after b: $(echo "$st" | grep 'cache:')"
echo "$st" | grep -qE 'cache: .*, [1-9][0-9]* evicted' || fail "no cached block was evicted: $st"
cmp "$WORK/b" "$MNT/b" || fail "b differs"
cmp "$WORK/a" "$MNT/a" || fail "a differs after b"

# 3. after a remount (the cache index is rebuilt within the disk's limit)
rm -f "$C/filler"
mt_umount
mt_mount --cache-dir "$C" --cache-size 1G --writeback
cmp "$WORK/a" "$MNT/a" || fail "a differs after remount"
cmp "$WORK/b" "$MNT/b" || fail "b differs after remount"
mt_umount
umount "$C" || fail "umount the tmpfs"
exit 0
