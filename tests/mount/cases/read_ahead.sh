#!/usr/bin/env bash
# read_ahead.sh -- the mounter sets the kernel read-ahead of its mount
# (/sys/class/bdi/MAJ:MIN/read_ahead_kb): 4 MiB by default, what --read-ahead,
# -o read_ahead= or the CSI plugin's -o read-ahead= gives, the kernel's own default
# with 0; bad values are refused before anything is mounted; a big file reads back
# intact through the larger requests.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs

ra_of() {   # ra_of MOUNTPOINT: its read_ahead_kb
  local dev
  dev=$(mountpoint -d "$1") || fail "$1 is not a mount point"
  cat "/sys/class/bdi/$dev/read_ahead_kb"
}
[ -w "/sys/class/bdi/$(mountpoint -d "$MNT")/read_ahead_kb" ] \
  || skip "/sys/class/bdi is not writable here"

assert_eq "$(ra_of "$MNT")" 4096 "default read-ahead (KiB)"
# 9 MiB of random bytes read back whole, through 1 MiB requests
head -c 9M /dev/urandom > "$WORK/big" || fail "make the data"
cp "$WORK/big" "$MNT/big" || fail "copy in"
mt_umount

mt_mount --read-ahead 1M
assert_eq "$(ra_of "$MNT")" 1024 "--read-ahead 1M"
cmp "$WORK/big" "$MNT/big" || fail "9 MiB file differs after a remount"
mt_umount

mt_mount -o read_ahead=512K
assert_eq "$(ra_of "$MNT")" 512 "-o read_ahead=512K"
mt_umount

# the form the CSI node plugin passes a StorageClass's mountOptions in
mt_mount -o noatime,read-ahead=2M
assert_eq "$(ra_of "$MNT")" 2048 "-o read-ahead=2M"
mt_umount

# 0: the setting is left alone.  A FUSE mount starts from the kernel's default
# (the bdi's, usually 128 KiB); a fresh mount never inherits a value from before.
mt_mount --read-ahead 0
def=$(ra_of "$MNT")
[ "$def" -lt 4096 ] || fail "--read-ahead 0 left $def KiB, not the kernel's default"
cmp "$WORK/big" "$MNT/big" || fail "9 MiB file differs with the kernel's read-ahead"
mt_umount

for bad in 1000 abc 1T -1 4Q; do
  expect_fail "read-ahead" "$KEGFS" mount -d --read-ahead "$bad" "$META" "$MNT"
  is_mounted && fail "--read-ahead $bad mounted anyway"
done
mt_mount
