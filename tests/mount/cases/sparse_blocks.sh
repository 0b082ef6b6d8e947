#!/usr/bin/env bash
# sparse_blocks.sh -- st_blocks counts the data stored, not the size (both engines): a
# 1.6 MB file holding 50 KB of data shows ~50 KB in du (also through a directory listing,
# after a remount with the kernel's attribute cache cold, and in a copy made by kegfs
# dump / load into the same kind of engine), a dense file shows its size, truncating down
# lowers it, and cp --sparse=always keeps the holes.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_cmd du stat dd truncate cp

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

# after a remount (nothing cached in the kernel or the mounter)
if [ -n "$KEGFS" ] && [ -n "$META" ]; then
  cd / || fail "cd /"
  mt_umount
  mt_mount
  cd "$MNT" || fail "cd after remount"
  b=$(blocks_bytes d/sparse)
  note "after remount: $b bytes in st_blocks"
  [ "$b" -ge $((50 * KB)) ] && [ "$b" -le $((64 * KB)) ] || fail "after remount: st_blocks $b bytes"
  du_k=$(du -k d/sparse | cut -f1)
  [ "$du_k" -ge 50 ] && [ "$du_k" -le 64 ] || fail "du -k after remount: $du_k"

  # dump / load into a fresh engine of the same kind: load rebuilds it from the slices
  case "${META_KIND:-sqlite}" in
    redis) META2=${META/ns=$VOL/ns=${VOL}ld} ;;
    *) META2="sqlite3://$WORK/loaded.db" ;;
  esac
  if [ "$META2" != "$META" ]; then
    "$KEGFS" dump "$META" "$WORK/sb.json" 2>/dev/null || fail "kegfs dump"
    "$KEGFS" load "$META2" "$WORK/sb.json" 2> "$WORK/load.err" \
      || fail "kegfs load: $(cat "$WORK/load.err")"
    mkdir -p "$WORK/m2"
    # shellcheck disable=SC2086
    "$KEGFS" mount -d --read-only --log-file "$WORK/m2.log" $MT_MOUNT_EXTRA "$META2" "$WORK/m2" \
      >/dev/null || fail "mount the loaded copy"
    b=$(blocks_bytes "$WORK/m2/d/sparse")
    "$KEGFS" umount "$WORK/m2" || fail "umount the loaded copy"
    note "loaded copy: $b bytes in st_blocks"
    [ "$b" -ge $((50 * KB)) ] && [ "$b" -le $((64 * KB)) ] || fail "loaded copy: st_blocks $b bytes"
  else
    note "no second namespace for the loaded copy: dump/load step skipped"
  fi
fi
rm -rf d dense holes copy
