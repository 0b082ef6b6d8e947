#!/usr/bin/env bash
# fallocate_quota.sh -- on a volume with --capacity 64M, fallocate past the free space
# fails with ENOSPC (size-changing and --keep-size), fallocate within it works, and df
# shows the quota as the size.
# format: --capacity 64M
# allow-log: No space left on device
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd fallocate df

MIB=$((1024 * 1024))
read -r size avail < <(df -B1 --output=size,avail "$MNT" | tail -1)
note "df: size $size avail $avail"
[ "$size" -le $((64 * MIB)) ] || fail "df size $size, expected at most the 64 MiB quota"
[ "$avail" -le $((64 * MIB)) ] || fail "df avail $avail past the quota"
cd "$MNT" || fail "cd"
expect_fail 'No space left on device' fallocate -l $((128 * MIB)) f
expect_fail 'No space left on device' fallocate --keep-size -l $((128 * MIB)) f
fallocate -l $((16 * MIB)) f || fail "fallocate of 16 MiB on a 64 MiB volume"
assert_eq "$(stat -c %s f)" $((16 * MIB)) "size after fallocate"
expect_fail 'No space left on device' fallocate -o $((16 * MIB)) -l $((60 * MIB)) f
rm -f f
