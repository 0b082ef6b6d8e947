#!/usr/bin/env bash
# statfs_quota.sh -- a volume formatted with --capacity 64M --inodes 100: df shows the
# limits; writing 80 MiB fails with ENOSPC ("No space left on device"); creating more than
# 100 files fails with ENOSPC; space and inodes come back after rm.
# format: --capacity 64M --inodes 100
# allow-log: No space left on device
# timeout: 300
. "$(dirname "$0")/../lib.sh"
need_kegfs

MIB=$((1024 * 1024))
read -r size used avail < <(df -B1 --output=size,used,avail "$MNT" | tail -1)
note "df: size $size used $used avail $avail"
[ "$size" -ge $((60 * MIB)) ] && [ "$size" -le $((64 * MIB)) ] || fail "df size $size, expected ~64 MiB"
read -r itotal iused ifree < <(df --output=itotal,iused,iavail "$MNT" | tail -1)
note "df -i: total $itotal used $iused free $ifree"
assert_eq "$itotal" 100 "df inode total"

# 80 MiB into a 64 MiB volume
out=$(dd if=/dev/urandom of="$MNT/big" bs=1M count=80 conv=fsync 2>&1) \
  && fail "writing 80 MiB into a 64 MiB volume succeeded"
echo "$out" | grep -q 'No space left on device' || fail "dd failed without ENOSPC: $out"
written=$(stat -c %s "$MNT/big" 2>/dev/null || echo 0)
note "dd stopped with ENOSPC after $written bytes"
[ "$written" -le $((64 * MIB)) ] || fail "file grew to $written bytes, beyond the capacity"
rm -f "$MNT/big" || fail "rm big"
# the space comes back (deletion may be asynchronous)
wait_for 60 sh -c "dd if=/dev/zero of='$MNT/again' bs=1M count=32 conv=fsync status=none 2>/dev/null" \
  || fail "32 MiB cannot be written 60 s after removing the big file"
rm -f "$MNT/again"

# more than 100 inodes
mkdir "$MNT/d" || fail "mkdir"
i=0
err=""
while [ $i -lt 200 ]; do
  if ! err=$(touch "$MNT/d/f$i" 2>&1); then break; fi
  i=$((i + 1))
done
note "created $i files before: $err"
[ $i -lt 200 ] || fail "created 200 files on a 100-inode volume"
[ $i -ge 90 ] || fail "only $i files fit on a 100-inode volume"
echo "$err" | grep -q 'No space left on device' || fail "create failed without ENOSPC: $err"
out=$(mkdir "$MNT/d/dir" 2>&1) && fail "mkdir succeeded with no inodes left"
echo "$out" | grep -q 'No space left on device' || fail "mkdir failed without ENOSPC: $out"
read -r itotal iused ifree < <(df --output=itotal,iused,iavail "$MNT" | tail -1)
assert_eq "$ifree" 0 "free inodes when full"
rm -rf "$MNT/d" || fail "rm -rf"
wait_for 30 touch "$MNT/after" || fail "cannot create a file after freeing inodes"
