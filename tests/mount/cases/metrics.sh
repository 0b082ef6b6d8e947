#!/usr/bin/env bash
# metrics.sh -- `kegfs mount --metrics HOST:PORT` serves Prometheus text that follows the
# work done: after writing and fsyncing 5 files of 1 MiB and reading them back with the
# page cache dropped, written/read bytes cover them, the write/create/fsync op counters
# and the object store's put requests and bytes moved, a failing rmdir counts as an
# error, histograms are consistent (+Inf bucket = _count), a second read is served by the
# memory read cache (hits grow, nothing fetched again), no store retries are counted on a
# healthy store, other paths get 404, other methods 405, and no secret or URL appears in
# the output.  The metadata engine's counters follow the work too: mknod requests grow
# by at least the files created, with a latency observation each and no engine error;
# the session heartbeat (every second here) is recent and its requests grow; deleting
# files moves the deletion counter; many small appends to one file get its chunk
# compacted or queued for compaction.  Remounted with --writeback, each staged object
# is timed (kegfs_writeback_stage_duration_seconds) and stays counted as staged while
# uploads are held back.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd curl

PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mt_umount
mt_mount --metrics "127.0.0.1:$PORT" --heartbeat 1
URL="http://127.0.0.1:$PORT/metrics"
wait_for 10 curl -sf -o /dev/null "$URL" || fail "no metrics endpoint at $URL"

scrape() { curl -sf "$URL" > "$WORK/scrape" || fail "scrape of $URL failed"; }
# value NAME LABELS-REGEX: the sample's value (0 if absent)
value() {
  awk -v n="$1" -v l="$2" '$1 ~ "^"n"{" && $1 ~ l {print $2; f=1} END {if (!f) print 0}' \
    "$WORK/scrape" | head -1
}

for i in 1 2 3 4 5; do
  dd if=/dev/urandom of="$MNT/f$i" bs=1M count=1 conv=fsync status=none || fail "write f$i"
done
mkdir "$MNT/d" && touch "$MNT/d/x" || fail "mkdir d"
rmdir "$MNT/d" 2>/dev/null && fail "rmdir of a non-empty directory succeeded"
sync
echo 3 > /proc/sys/vm/drop_caches
cat "$MNT"/f? > /dev/null || fail "read back"
scrape

MiB=1048576
w=$(value kegfs_written_bytes_total '')
r=$(value kegfs_read_bytes_total '')
[ "$w" -ge $((5 * MiB)) ] || fail "kegfs_written_bytes_total $w < 5 MiB"
[ "$r" -ge $((5 * MiB)) ] || fail "kegfs_read_bytes_total $r < 5 MiB"
[ "$(value kegfs_fuse_ops_total 'op="create"')" -ge 5 ] || fail "create ops: $(value kegfs_fuse_ops_total 'op="create"')"
[ "$(value kegfs_fuse_ops_total 'op="write"')" -ge 5 ] || fail "write ops"
[ "$(value kegfs_fuse_ops_total 'op="fsync"')" -ge 5 ] || fail "fsync ops"
[ "$(value kegfs_fuse_errors_total 'op="rmdir"')" -ge 1 ] || fail "the failed rmdir is not an error"
[ "$(value kegfs_fuse_errors_total 'op="write"')" = 0 ] || fail "write errors counted"
[ "$(value kegfs_object_requests_total 'verb="put"')" -ge 5 ] || fail "object puts: $(value kegfs_object_requests_total 'verb="put"')"
[ "$(value kegfs_object_bytes_total 'verb="put"')" -ge $((5 * MiB)) ] || fail "object put bytes"
[ "$(value kegfs_object_errors_total 'verb="put"')" = 0 ] || fail "object put errors counted"
grep -q "^kegfs_memory_budget_bytes{volume=\"$VOL\"} [1-9]" "$WORK/scrape" || fail "no memory budget"
grep -q "^kegfs_object_retries_total{volume=\"$VOL\",verb=\"put\"} 0$" "$WORK/scrape" \
  || fail "object put retries not exported as 0 on a healthy store"

# the memory read cache: the first read fetched each file's block, a second read
# (the kernel's page cache dropped again) finds them all cached
fetched=$(( $(value kegfs_memory_cache_misses_total '') + $(value kegfs_memory_cache_prefetched_total '') ))
[ "$fetched" -ge 5 ] || fail "memory cache fetched $fetched blocks, expected >= 5"
h0=$(value kegfs_memory_cache_hits_total '')
echo 3 > /proc/sys/vm/drop_caches
cat "$MNT"/f? > /dev/null || fail "read back again"
scrape
h1=$(value kegfs_memory_cache_hits_total '')
[ "$h1" -ge $((h0 + 5)) ] || fail "memory cache hits grew by $((h1 - h0)) on a re-read, expected >= 5"
f1=$(( $(value kegfs_memory_cache_misses_total '') + $(value kegfs_memory_cache_prefetched_total '') ))
[ "$f1" = "$fetched" ] || fail "a re-read of cached blocks fetched $((f1 - fetched)) again"
# `kegfs stats` shows the same counters (its file is rewritten every second)
stats_hits() {
  "$KEGFS" stats "$MNT" 2>/dev/null | sed -n 's/^ *read cache: \([0-9]*\) hits, .*/\1/p'
}
hits_shown() { [ "$(stats_hits)" -ge "$h1" ] 2>/dev/null; }
wait_for 5 hits_shown || fail "kegfs stats shows '$(stats_hits)' read cache hits, expected >= $h1"

# metadata engine: requests per op follow the creates, each with a latency observation
scrape
mk0=$(value kegfs_meta_requests_total 'op="mknod"')
[ "$mk0" -ge 7 ] || fail "meta mknod requests $mk0 < 7 (5 files, d, d/x)"
hb0=$(value kegfs_meta_requests_total 'op="session_heartbeat"')
mkdir "$MNT/many" || fail "mkdir many"
for i in $(seq 1 40); do : > "$MNT/many/e$i" || fail "create many/e$i"; done
sleep 2.5
scrape
mk1=$(value kegfs_meta_requests_total 'op="mknod"')
[ "$mk1" -ge $((mk0 + 41)) ] || fail "meta mknod requests grew by $((mk1 - mk0)), expected >= 41"
[ "$(value kegfs_meta_request_duration_seconds_count 'op="mknod"')" = "$mk1" ] \
  || fail "mknod latency count differs from its requests"
[ "$(value kegfs_meta_requests_total 'op="lookup"')" -ge 1 ] || fail "no meta lookups"
[ "$(value kegfs_meta_requests_total 'op="write_slices"')" -ge 5 ] || fail "meta write_slices < 5"
errs=$(awk '$1 ~ /^kegfs_meta_errors_total\{/ {s += $2} END {print s + 0}' "$WORK/scrape")
[ "$errs" = 0 ] || fail "metadata engine errors counted: $errs"
hb1=$(value kegfs_meta_requests_total 'op="session_heartbeat"')
[ "$hb1" -ge $((hb0 + 1)) ] || fail "heartbeat requests did not grow ($hb0 -> $hb1)"
age=$(value kegfs_session_heartbeat_age_seconds '')
awk -v a="$age" 'BEGIN {exit !(a >= 0 && a < 5)}' || fail "heartbeat age $age s not in [0, 5)"

# compaction: 30 appended-and-fsynced pieces make one chunk of 30 slices
for i in $(seq 1 30); do
  printf 'piece %04d\n' "$i" | dd of="$MNT/frag" oflag=append conv=notrunc,fsync status=none \
    || fail "append $i"
done
cmp_seen() {
  scrape
  local n
  n=$(( $(value kegfs_compactions_total '') + $(value kegfs_compaction_queue_chunks '') \
        + $(value kegfs_compaction_parked_chunks '') ))
  [ "$n" -ge 1 ]
}
wait_for 10 cmp_seen || fail "a chunk of 30 slices was neither compacted, queued nor parked"
# deletion: removing the 1 MiB files sends their slices' objects to the deleter
del0=$(value kegfs_deleted_slices_total '')
rm -f "$MNT"/f? || fail "rm"
del_seen() { scrape; [ "$(value kegfs_deleted_slices_total '')" -ge $((del0 + 5)) ]; }
wait_for 15 del_seen || fail "deleted slices $(value kegfs_deleted_slices_total '') after removing 5 files (was $del0)"
[ "$(value kegfs_deletion_queue_inodes '')" -ge 0 ] || fail "no deletion queue gauge"
grep -q '^kegfs_lock_releases_pending{' "$WORK/scrape" || fail "no kegfs_lock_releases_pending"
assert_eq "$(value kegfs_lock_releases_pending '')" 0 "lock releases pending"

# histograms: the +Inf bucket of each series equals its _count
awk '/_bucket\{.*le="\+Inf"\}/ {k=$1; sub(/_bucket\{/, "{", k); sub(/,?le="\+Inf"/, "", k); inf[k]=$2}
     /_count\{/ {k=$1; sub(/_count\{/, "{", k); cnt[k]=$2}
     END {for (k in cnt) if (inf[k] != cnt[k]) {print "mismatch " k; bad=1}; exit bad}' \
  "$WORK/scrape" || fail "a histogram's +Inf bucket differs from its count"
# every sample belongs to a declared family
awk '/^# TYPE/ {t[$3]=1} /^kegfs_/ {n=$1; sub(/\{.*/, "", n); b=n; sub(/_(bucket|sum|count)$/, "", b);
     if (!t[n] && !t[b]) {print "undeclared " n; bad=1}} END {exit bad}' "$WORK/scrape" \
  || fail "samples without # TYPE"

# nothing secret, no URL
grep -q '://' "$WORK/scrape" && fail "a URL in the metrics: $(grep '://' "$WORK/scrape" | head -1)"
for s in "${KEG_TEST_S3_SECRET_KEY:-}" "${KEG_TEST_S3_ACCESS_KEY:-}"; do
  [ -n "$s" ] && grep -qF -- "$s" "$WORK/scrape" && fail "an S3 key in the metrics"
done

code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/")
[ "$code" = 404 ] || fail "GET / gave $code, expected 404"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/metrics/../../etc/passwd")
[ "$code" = 404 ] || fail "GET of a traversal path gave $code, expected 404"
code=$(curl -s -X POST -o /dev/null -w '%{http_code}' "$URL")
[ "$code" = 405 ] || fail "POST gave $code, expected 405"
puts=$(value kegfs_object_requests_total 'verb="put"')
# writeback: every staged object is timed, and the staging gauges are there
mt_umount
mt_mount --metrics "127.0.0.1:$PORT" --cache-dir "$WORK/wbcache" --writeback --upload-delay 60
wait_for 10 curl -sf -o /dev/null "$URL" || fail "no metrics endpoint after the writeback mount"
scrape
s0=$(value kegfs_writeback_stage_duration_seconds_count '')
for i in $(seq 1 8); do
  printf 'staged %d\n' "$i" > "$MNT/wb$i" || fail "write wb$i"
done
scrape
s1=$(value kegfs_writeback_stage_duration_seconds_count '')
[ "$s1" -ge $((s0 + 8)) ] || fail "stage latency count grew by $((s1 - s0)) for 8 closed files, expected >= 8"
[ "$(value kegfs_writeback_stage_duration_seconds_bucket 'le="\+Inf"')" = "$s1" ] \
  || fail "stage latency +Inf bucket differs from its count"
[ "$(value kegfs_writeback_staged_objects '')" -ge 8 ] \
  || fail "staged objects $(value kegfs_writeback_staged_objects '') < 8 with uploads held for 60 s"
awk -v s="$(value kegfs_writeback_stage_duration_seconds_sum '')" 'BEGIN {exit !(s > 0)}' \
  || fail "stage latency sum is not positive"
note "written $w read $r bytes; puts $puts; meta mknod $mk1, heartbeat age $age s; staged puts timed $((s1 - s0))"
