#!/usr/bin/env bash
# store_deadline.sh -- the end-to-end bounds of a store that fails every request
# (docs/durability.md, "One retry policy"): with KEG_FAULTY="err=1" in the mounter's
# environment and --s3-retry-deadline 2 (D = 2 s):
#   1. a read of data written before fails with EIO after one D, not two (the kernel
#      reads a failed page again at once) and not the minutes of nested retries;
#   2. write + fsync (no writeback) fails with EIO within 2 D, and nothing of it is
#      committed: the file is empty;
#   3. with --writeback, write + fsync succeeds at once (fsync waits for the local
#      staging files only), the upload keeps being retried in the background, and once
#      the store works again (remount without faults) the file reads back exactly.
# Works on every store: the faulty layer fails requests before they reach it.
# timeout: 120
# allow-log: upload of .* failed|reading block .* failed|upload of .* FAILED|not uploaded|staged
. "$(dirname "$0")/../lib.sh"
need_kegfs

D=2
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

head -c $((3 << 20)) /dev/urandom > "$WORK/f" || fail "source f"
cp "$WORK/f" "$MNT/f" && sync || fail "write f"
mt_umount
KEG_FAULTY="seed=1,err=1" mt_mount --s3-retry-deadline $D
grep -q 'fault injection on' "$MT_LOG" || fail "the mounter did not enable fault injection"

#--- 1. read: EIO after one deadline -----------------------------------------------------
t0=$(date +%s%N)
err=$(timeout 60 cat "$MNT/f" 2>&1 >/dev/null) && fail "read of f succeeded with every request failing"
ms=$(ms_since "$t0")
note "read with the store failing: EIO after $ms ms ($err)"
echo "$err" | grep -q 'Input/output error' || fail "read error: $err"
[ "$ms" -ge $((D * 1000 - 200)) ] || fail "the read failed after $ms ms, before the ${D} s deadline"
[ "$ms" -lt $((D * 1000 + 2500)) ] || fail "the read took $ms ms: more than one ${D} s deadline"

#--- 2. write + fsync without writeback: EIO within 2 D, nothing committed ----------------
head -c $((1 << 20)) /dev/urandom > "$WORK/g" || fail "source g"
t0=$(date +%s%N)
err=$(timeout 60 dd if="$WORK/g" of="$MNT/g" bs=1M conv=fsync status=none 2>&1) \
  && fail "write + fsync of g succeeded with every request failing"
ms=$(ms_since "$t0")
note "write + fsync with the store failing: failed after $ms ms ($err)"
echo "$err" | grep -q 'Input/output error' || fail "fsync error: $err"
[ "$ms" -lt $((2 * D * 1000 + 2500)) ] || fail "write + fsync took $ms ms: more than 2 x ${D} s"
assert_eq "$(stat -c %s "$MNT/g")" 0 "size of g after its failed fsync"
rm -f "$MNT/g" || fail "rm g"
mt_umount

#--- 3. writeback: fsync does not wait for the store; the upload is retried --------------
mkdir -p "$WORK/cache"
KEG_FAULTY="seed=2,err=1" mt_mount --s3-retry-deadline $D --writeback --cache-dir "$WORK/cache" \
  --drain-timeout 1
t0=$(date +%s%N)
dd if="$WORK/g" of="$MNT/g" bs=1M conv=fsync status=none || fail "write + fsync with --writeback"
ms=$(ms_since "$t0")
note "write + fsync with --writeback and the store failing: $ms ms"
[ "$ms" -lt $((D * 1000)) ] || fail "the writeback fsync took $ms ms: it waited for the store"
cmp "$WORK/g" "$MNT/g" || fail "g reads back wrong while staged"
wait_for 20 grep -q 'upload of .* failed' "$MT_LOG" || fail "no failed upload attempt in the log"
mt_umount                   # leaves g staged (drain 1 s)
mt_mount --writeback --cache-dir "$WORK/cache"
cmp "$WORK/g" "$MNT/g" || fail "g differs after the store works again"
cmp "$WORK/f" "$MNT/f" || fail "f differs after the store works again"
exit 0
