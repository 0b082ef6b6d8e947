#!/usr/bin/env bash
# metrics.sh -- `kegfs mount --metrics HOST:PORT` serves Prometheus text that follows the
# work done: after writing and fsyncing 5 files of 1 MiB and reading them back with the
# page cache dropped, written/read bytes cover them, the write/create/fsync op counters
# and the object store's put requests and bytes moved, a failing rmdir counts as an
# error, histograms are consistent (+Inf bucket = _count), other paths get 404, other
# methods 405, and no secret or URL appears in the output.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd curl

PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mt_umount
mt_mount --metrics "127.0.0.1:$PORT"
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
note "written $w read $r bytes; puts $(value kegfs_object_requests_total 'verb="put"')"
