#!/usr/bin/env bash
# s3_outage.sh -- what a mounter says and does while the S3 gateway is down (kill -9):
#   1. an uncached read fails with EIO after one retry deadline (--s3-retry-deadline 5),
#      not two: the kernel reads a failed page again at once, and that second read must
#      not wait another deadline;
#   2. the failure is logged once as a WARN line ("S3 store ... is failing"), and
#      `kegfs stats` shows the store FAILING with the requests being retried, uploads
#      among them;
#   3. an fsync during the outage fails with EIO after one deadline (the store client
#      owns the retries, nothing above it retries again: docs/durability.md, "One retry
#      policy"); once the gateway is back writes work again, the recovery is logged
#      ("recovered after"), and `kegfs stats` shows the store ok again.
# The gateway is the runner's (gw_lib.sh); it is started again on every way out.
# needs: s3
# timeout: 180
# allow-log: gave up after|reading block .* failed|upload of .* failed|[Cc]ouldn't connect
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
. "$(dirname "$0")/../gw_lib.sh"
need_kegfs
need_gateway
stats() { "$KEGFS" stats "$MNT" 2>&1; }

head -c $((8 << 20)) /dev/urandom > "$WORK/f"
cp "$WORK/f" "$MNT/f" && sync || fail "write f"
mt_umount
mt_mount --s3-retry-deadline 5          # nothing of f is cached now
stats | grep -q '^ *store: *ok' || fail "stats before the outage: $(stats)"

#--- 1. an uncached read while the gateway is down: EIO after one deadline ----------
gw kill-gw || fail "kill-gw: $(tail -3 "$WORK/gw.log")"
t0=$(date +%s%N)
err=$(timeout 120 cat "$MNT/f" 2>&1 >/dev/null) && fail "read of f succeeded with the gateway down"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
note "read while down: $ms ms: $err"
echo "$err" | grep -q 'Input/output error' || fail "read error: $err"
[ "$ms" -ge 4500 ] || fail "the read failed after $ms ms, before the 5 s deadline"
[ "$ms" -lt 9000 ] || fail "the read took $ms ms: more than one 5 s deadline"

#--- 2. logged once, shown in stats ----------------------------------------------------
n=$(grep -c 'WARN \[obj_s3\] S3 store .* is failing' "$MT_LOG")
[ "$n" = 1 ] || fail "$n 'is failing' WARN lines (want 1): $(grep 'obj_s3' "$MT_LOG" | tail -5)"
wait_for 5 sh -c "'$KEGFS' stats '$MNT' | grep -q 'store: *FAILING for'" \
  || fail "stats do not show the failing store: $(stats)"
# an fsync during the outage: its upload is retried (failing) for one deadline, then
# the fsync fails with EIO: one 5 s deadline, not the nested retries of minutes
head -c $((1 << 20)) /dev/urandom > "$WORK/g"
t0=$(date +%s%N)
( dd if="$WORK/g" of="$MNT/g" bs=1M conv=fsync status=none 2> "$WORK/dd.err"
  echo $? > "$WORK/dd.rc" ) &
writer=$!
wait_for 5 sh -c "'$KEGFS' stats '$MNT' | grep -qE 'store: *FAILING.*\\([1-9][0-9]* uploads\\)'" \
  || fail "stats do not show the upload being retried: $(stats)"
note "during the outage: $(stats | grep -E 'store:')"
wait_for 30 test -s "$WORK/dd.rc" || fail "the fsync did not end within 30 s of the outage"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
writer=""
note "write + fsync while down: rc $(cat "$WORK/dd.rc") after $ms ms: $(cat "$WORK/dd.err")"
[ "$(cat "$WORK/dd.rc")" != 0 ] || fail "write + fsync succeeded with the gateway down"
grep -q 'Input/output error' "$WORK/dd.err" || fail "fsync error: $(cat "$WORK/dd.err")"
[ "$ms" -lt 20000 ] || fail "write + fsync took $ms ms: more than 2 x (5 s deadline + 5 s attempt)"

#--- 3. the gateway comes back: the recovery is logged, writes work again ---------------
gw start-gw || fail "start-gw: $(tail -5 "$WORK/gw.log")"
wait_for 60 sh -c "dd if='$WORK/g' of='$MNT/g' bs=1M conv=fsync status=none 2>/dev/null" \
  || fail "write + fsync fails after the gateway came back"
grep -q 'INFO \[obj_s3\] S3 store .* recovered after' "$MT_LOG" \
  || fail "no recovery line: $(grep 'obj_s3' "$MT_LOG" | tail -5)"
wait_for 5 sh -c "'$KEGFS' stats '$MNT' | grep -q 'store: *ok'" || fail "stats after: $(stats)"
stats | grep -qE 'store: *ok; [1-9][0-9]* retries, [1-9][0-9]* requests ran out' \
  || fail "stats do not count the retries and the failed read: $(stats)"
cmp "$WORK/g" "$MNT/g" || fail "g differs"
cmp "$WORK/f" "$MNT/f" || fail "f differs after the gateway came back"
exit 0
