#!/usr/bin/env bash
# mem_budget.sh -- one memory budget (--buffer-size) bounds the mounter's memory for reads
# and writes together: with --buffer-size 64 (MiB) and no separate read-cache size, 16
# concurrent writers of 64 MiB files (dd bs=1M, 1 GiB in all) and, at the same time,
# READERS readers of 64 MiB files written before (page cache dropped, so every byte comes
# through the mounter's block cache) never push the mounter's resident set (VmRSS,
# sampled every 100 ms from before the first write) above
#   idle RSS + 64 MiB budget + 96 MiB write allowance + 32 MiB read allowance
# The write allowance covers what the write path holds outside the budget: upload requests
# in flight (one block each, plus its encoded copy), FUSE request buffers (1 MiB + header
# per FUSE thread, up to 64 threads but only a few busy here), allocator slack (writers
# alone peaked at 111-115 MiB over idle, docs/benchmarks.md).  The read allowance covers
# what reads hold outside it: the read cache's floor (budget / 8 = 8 MiB, kept for readers
# while writers hold the rest of the budget) and the block each reader is fetching, as the
# encoded object plus its decoded copy (3 x 8 MiB; read-ahead is off while the cache is
# at its floor).  Every file, read or written, has the right checksum.
#
# glibc: freeing a large mmap()ed block raises malloc's mmap threshold (up to 32 MiB), so
# later 4 MiB block buffers come from the heap arenas and freed ones are kept: with the
# default allocator settings the mounter would peak at ~200 MiB RSS here (64 MiB budget), so
# `kegfs mount` pins the threshold itself (mallopt(M_MMAP_THRESHOLD) at start): the case runs
# the mounter with glibc's defaults otherwise.
# timeout: 150
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd sha256sum dd

BUDGET_MIB=64
ALLOW_MIB=96        # write path, outside the budget (see above)
RALLOW_MIB=32       # read path: the cache floor + blocks being fetched
WRITERS=16
READERS=3
FILE_MIB=64

mt_umount
mt_mount --buffer-size $BUDGET_MIB

# the process serving FUSE requests (with the supervisor: the worker), from kegfs stats
serving_pid() {
  "$KEGFS" stats "$MNT" 2>/dev/null | sed -nE 's/^ *mounter: *pid ([0-9]+),.*/\1/p'
}
pid=""
for _ in $(seq 50); do
  pid=$(serving_pid)
  [ -n "$pid" ] && break
  sleep 0.1
done
[ -n "$pid" ] && [ -r "/proc/$pid/status" ] || fail "cannot find the mounter serving $MNT"
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

ls "$MNT" > /dev/null
sleep 1
idle=$(rss_kib "$pid")
[ -n "$idle" ] || fail "no VmRSS for pid $pid"
limit=$((idle + (BUDGET_MIB + ALLOW_MIB + RALLOW_MIB) * 1024))
note "mounter pid $pid: idle RSS $((idle / 1024)) MiB; limit $((limit / 1024)) MiB" \
     "(idle + $BUDGET_MIB MiB budget + $ALLOW_MIB + $RALLOW_MIB MiB write + read allowance)"

# sampler: max VmRSS every 100 ms until told to stop
(
  max=0
  while [ ! -e "$WORK/stop-sampling" ]; do
    r=$(rss_kib "$pid")
    [ -n "$r" ] && [ "$r" -gt "$max" ] && max=$r && echo "$max" > "$WORK/rss.max"
    sleep 0.1
  done
) &
sampler=$!

# the files the readers will read, written (and checksummed) first
for i in $(seq 1 $READERS); do
  head -c $((FILE_MIB * 1024 * 1024)) /dev/urandom \
    | tee >(sha256sum | cut -d' ' -f1 > "$WORK/rsum.$i") \
    | dd of="$MNT/r.$i" bs=1M iflag=fullblock status=none || fail "writing r.$i failed"
done
sync
for i in $(seq 1 $READERS); do
  wait_for 10 test -s "$WORK/rsum.$i" || fail "no checksum of r.$i"
done
echo 3 > /proc/sys/vm/drop_caches || fail "cannot drop the page cache"

t0=$(date +%s)
pids=""
for i in $(seq 1 $WRITERS); do
  (
    head -c $((FILE_MIB * 1024 * 1024)) /dev/urandom \
      | tee >(sha256sum | cut -d' ' -f1 > "$WORK/sum.$i") \
      | dd of="$MNT/w.$i" bs=1M iflag=fullblock status=none \
      || echo "writer $i failed" > "$WORK/err.$i"
  ) &
  pids="$pids $!"
done
for i in $(seq 1 $READERS); do
  (
    got=$(dd if="$MNT/r.$i" bs=1M status=none | sha256sum | cut -d' ' -f1)
    [ "$got" = "$(cat "$WORK/rsum.$i")" ] || echo "reader $i: r.$i has the wrong checksum" \
      > "$WORK/err.r$i"
    date +%s > "$WORK/rdone.$i"
  ) &
  pids="$pids $!"
done
# shellcheck disable=SC2086
wait $pids
sync
t1=$(date +%s)
touch "$WORK/stop-sampling"
wait "$sampler"
ls "$WORK"/err.* > /dev/null 2>&1 && fail "$(cat "$WORK"/err.* | head -3)"
max=$(cat "$WORK/rss.max" 2>/dev/null || echo 0)
rlast=$(cat "$WORK"/rdone.* | sort -n | tail -1)
note "$WRITERS x $FILE_MIB MiB written in $((t1 - t0)) s, $READERS x $FILE_MIB MiB read" \
     "meanwhile in $((rlast - t0)) s; max RSS $((max / 1024)) MiB ($(((max - idle) / 1024)) MiB" \
     "over idle)"
[ "$max" -le "$limit" ] || fail "mounter RSS reached $((max / 1024)) MiB, above the limit of" \
  "$((limit / 1024)) MiB (idle $((idle / 1024)) + budget $BUDGET_MIB + allowances $ALLOW_MIB" \
  "+ $RALLOW_MIB)"

for i in $(seq 1 $WRITERS); do
  [ "$(stat -c %s "$MNT/w.$i")" = $((FILE_MIB * 1024 * 1024)) ] || fail "w.$i has the wrong size"
  got=$(sha256sum < "$MNT/w.$i" | cut -d' ' -f1)
  [ "$got" = "$(cat "$WORK/sum.$i")" ] || fail "w.$i has the wrong checksum"
done
note "all $WRITERS written and $READERS read files have the right checksums"
rm -f "$MNT"/w.* "$MNT"/r.*
exit 0
