#!/usr/bin/env bash
# statfs_fallocate.sh -- an unlimited volume on a file store reports the store's disk in
# statfs: free space = the disk's available space (not 1 PiB); fallocate of more than
# that fails with ENOSPC (with and without --keep-size) and leaves the file as it was,
# while a small fallocate works.  (A capacity quota: fallocate_quota.)
# allow-log: No space left on device
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_objdir
need_cmd fallocate df

read -r size avail < <(df -B1 --output=size,avail "$MNT" | tail -1)
disk=$(df -B1 --output=avail "$OBJDIR" | tail -1)
note "mount: size $size avail $avail; store disk avail $disk"
[ "$avail" -gt 0 ] || fail "no free space reported"
# the disk may change a little between the two df calls (other writers)
slack=$((256 * 1024 * 1024))
[ "$avail" -le $((disk + slack)) ] || fail "mount reports $avail bytes free, the store's disk $disk"
[ "$avail" -ge $((disk - slack)) ] || fail "mount reports $avail bytes free, the store's disk $disk"
[ "$size" -lt $((1 << 50)) ] || fail "size $size: still the 1 PiB placeholder"

cd "$MNT" || fail "cd"
big=$((avail * 2))
printf 'abc' > f || fail "create"
expect_fail 'No space left on device' fallocate -l $big f
assert_eq "$(stat -c %s f)" 3 "size after a refused fallocate"
expect_fail 'No space left on device' fallocate --keep-size -o 4096 -l $big f
expect_fail 'No space left on device' fallocate -o $((big / 2)) -l $big f
assert_eq "$(cat f)" abc "content after refused fallocates"
fallocate -l $((1024 * 1024)) f || fail "fallocate of 1 MiB"
assert_eq "$(stat -c %s f)" $((1024 * 1024)) "size after fallocate 1 MiB"
assert_eq "$(head -c 3 f)" abc "content kept by fallocate"
# inside the file nothing new is needed
fallocate -o 0 -l 4096 f || fail "fallocate inside the file"
rm -f f
