#!/usr/bin/env bash
# profile.sh -- where the time of a small-file operation goes: FUSE requests per operation,
# time in each request's handler, metadata and object-store requests per operation, from
# the mounter's own metrics (kegfs mount --metrics), beside libfuse's passthrough_hp
# mounted the same way (default_permissions, allow_other, 1 s cache timeouts, no kernel
# writeback cache) running the same workload.
#
#   bench/profile.sh BUILD_DIR [-n N] [-w LIST] [--port PORT] [--target sqlite|s3wb]
#
# A fresh volume is formatted and mounted under $KEG_BENCH_DIR (default
# /tmp/bench-profile; removed at the end): SQLite + file (--target sqlite, the default),
# or Redis + S3 with --writeback and an SSD cache, mounted as `make bench` mounts its
# s3wb target (--target s3wb: a redis-server on $KEG_BENCH_REDIS_PORT, default 6396, and
# the Ceph gateway of scripts/s3-server.sh in $KEG_BENCH_DIR/s3 are started and stopped
# here, or the gateway that KEG_TEST_S3_BUCKET, _ACCESS_KEY and _SECRET_KEY name is
# used; the volume's objects stay in its bucket).  Each workload of bench/smallfile (LIST,
# default create,randmod,append,empty; N operations, default 2000) runs on it once, with a
# scrape of http://127.0.0.1:PORT/metrics (default 9479) before and after, and once on
# passthrough_hp (bench/fuse-ref.sh; skipped when it cannot be built).  Printed per
# workload: wall µs per operation (median and mean) on both, then one line per FUSE request
# kind, metadata request, object request and (s3wb) staging of an object on local disk
# that the operation caused: how many per operation and the mean µs each (with writeback
# the object requests are the upload workers', after the operation, and shown apart).  A
# handler's time runs from its entry to its reply and so includes the reply's write to
# /dev/fuse (and, on a small VM, the wake-up of the waiting
# application it causes); the difference between the wall time and the sum of the
# handlers is the kernel, the transport and the application's own system calls.
# Needs root and /dev/fuse.  Exit 0, or 1 when a step failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '/^#   bench\/profile.sh/p' "$0" | sed 's/^#   /usage: /' >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "profile.sh: no build dir '$1'" >&2; exit 2; }
shift
N=2000; WL=create,randmod,append,empty; PORT=9479; TARGET=sqlite
while [ $# -gt 0 ]; do
  case "$1" in
    -n) N=$2; shift ;;
    -w) WL=$2; shift ;;
    --port) PORT=$2; shift ;;
    --target) TARGET=$2; shift ;;
    *) echo "profile.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
case "$TARGET" in
  sqlite|s3wb) ;;
  *) echo "profile.sh: --target is sqlite or s3wb, not '$TARGET'" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "profile.sh: needs root (FUSE mounts with allow_other)" >&2; exit 2; }
KEGFS=$BUILD/mounter/kegfs; SF=$BUILD/bench/smallfile
for b in "$KEGFS" "$SF"; do
  [ -x "$b" ] || { echo "profile.sh: $b is missing (make build)" >&2; exit 2; }
done
D=${KEG_BENCH_DIR:-/tmp/bench-profile}
umount -l "$D/keg-mnt" 2>/dev/null; umount -l "$D/pthp-mnt" 2>/dev/null
rm -rf "$D"
mkdir -p "$D/keg-mnt" "$D/objects" "$D/pthp-src" "$D/pthp-mnt"
export KEGFS_RUN_DIR=$D/run
top=$(cd "$here/.." && pwd)
REDIS_PORT=${KEG_BENCH_REDIS_PORT:-6396}
PTHP_PID=''; started_redis=0; started_s3=0
cleanup() {
  timeout 60 "$KEGFS" umount "$D/keg-mnt" >/dev/null 2>&1 || umount -l "$D/keg-mnt" 2>/dev/null
  [ -n "$PTHP_PID" ] && { umount "$D/pthp-mnt" 2>/dev/null || umount -l "$D/pthp-mnt"; kill "$PTHP_PID" 2>/dev/null; }
  [ $started_s3 = 1 ] && "$top/scripts/s3-server.sh" stop "$D/s3" >/dev/null 2>&1
  [ $started_redis = 1 ] && "$top/scripts/redis-server.sh" stop "$REDIS_PORT" "$D/redis" >/dev/null 2>&1
  rm -rf "$D"
}
trap cleanup EXIT

if [ "$TARGET" = sqlite ]; then
  NAME="SQLite+file"
  meta="sqlite3://$D/meta.db"
  "$KEGFS" format --storage file --bucket "$D/objects" "$meta" bench-profile > "$D/format.log" 2>&1 ||
    { cat "$D/format.log" >&2; exit 1; }
  MOUNT_OPTS=()
else
  NAME="Redis+S3 writeback"
  if "$top/scripts/redis-server.sh" status "$REDIS_PORT" "$D/redis" 2>/dev/null; then
    echo "profile.sh: something already answers on 127.0.0.1:$REDIS_PORT (KEG_BENCH_REDIS_PORT)" >&2
    exit 2
  fi
  "$top/scripts/redis-server.sh" start "$REDIS_PORT" "$D/redis" > /dev/null ||
    { echo "profile.sh: redis-server did not start" >&2; exit 1; }
  started_redis=1
  if [ -z "${KEG_TEST_S3_BUCKET:-}" ]; then
    started_s3=1
    "$top/scripts/s3-server.sh" start "$D/s3" > "$D/s3-start.log" 2>&1 ||
      { tail -5 "$D/s3-start.log" >&2; echo "profile.sh: the S3 gateway did not start" >&2; exit 1; }
    eval "$("$top/scripts/s3-server.sh" env "$D/s3")"
  fi
  meta="redis://127.0.0.1:$REDIS_PORT/1"
  AWS_ACCESS_KEY_ID=$KEG_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$KEG_TEST_S3_SECRET_KEY \
    "$KEGFS" format --storage s3 --bucket "$KEG_TEST_S3_BUCKET" "$meta" "bench-profile-$$" \
    > "$D/format.log" 2>&1 || { cat "$D/format.log" >&2; exit 1; }
  MOUNT_OPTS=(--cache-dir "$D/cache" --cache-size 8G --writeback --max-staging 2G)
fi
"$KEGFS" mount -d --metrics "127.0.0.1:$PORT" --log-file "$D/mounter.log" "${MOUNT_OPTS[@]}" \
  "$meta" "$D/keg-mnt" > "$D/mount.log" 2>&1 || { cat "$D/mount.log" >&2; exit 1; }
if PTHP=$("$here/fuse-ref.sh" "$BUILD" 2> "$D/fuse-ref.log"); then
  PTHP_NO_WRITEBACK=1 PTHP_TIMEOUT=1 "$PTHP" --foreground "$D/pthp-src" "$D/pthp-mnt" \
    > "$D/pthp.log" 2>&1 &
  PTHP_PID=$!
  for _ in $(seq 50); do grep -qs " $D/pthp-mnt " /proc/self/mountinfo && break; sleep 0.2; done
else
  echo "profile.sh: no passthrough_hp (see bench/fuse-ref.sh); KegFS only" >&2
fi

scrape() { curl -sf "http://127.0.0.1:$PORT/metrics" > "$1"; }
rc=0
echo "KegFS $NAME vs passthrough_hp, bench/smallfile -n $N, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for w in ${WL//,/ }; do
  mkdir -p "$D/keg-mnt/$w" "$D/pthp-mnt/$w"
  scrape "$D/before" || { echo "profile.sh: no metrics on 127.0.0.1:$PORT" >&2; exit 1; }
  "$SF" -n "$N" -w "$w" "$D/keg-mnt/$w" > "$D/keg.out" || rc=1
  scrape "$D/after" || rc=1
  pt=""
  if [ -n "$PTHP_PID" ]; then
    "$SF" -n "$N" -w "$w" "$D/pthp-mnt/$w" > "$D/pthp.out" || rc=1
    pt=$D/pthp.out
  fi
  python3 - "$w" "$N" "$D/before" "$D/after" "$D/keg.out" "$pt" "$TARGET" <<'EOF'
import re, sys
w, n, fa, fb, keg, pt, target = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
# with writeback the object store's requests are the upload workers' (after the
# operation), not part of any handler

def metrics(f):
    d = {}
    for line in open(f):
        if line.startswith("#") or " " not in line:
            continue
        k, v = line.rsplit(" ", 1)
        d[k] = float(v)
    return d

def sfline(f):
    kv = dict(x.split("=", 1) for x in open(f).read().split()[1:] if "=" in x)
    secs = float(kv["secs"]) - float(kv.get("sync_ms", 0)) / 1000
    return float(kv["median_us"]), secs / n * 1e6

a, b = metrics(fa), metrics(fb)
rows = {}
for k, v in b.items():
    m = re.match(r'kegfs_(fuse_op|meta_request|object_request)_duration_seconds_(sum|count)\{.*(?:op|verb)="(\w+)"', k)
    if not m:   # the writeback layer's staging of an object (no op label)
        m = re.match(r'kegfs_(writeback_stage)_duration_seconds_(sum|count)\{()', k)
    if m and v - a.get(k, 0) > 0:
        rows.setdefault((m.group(1), m.group(3) or "put"), {})[m.group(2)] = v - a.get(k, 0)
kmed, kmean = sfline(keg)
print("\n%s: KegFS %.0f µs per operation (median; mean %.0f)" % (w, kmed, kmean), end="")
if pt:
    pmed, pmean = sfline(pt)
    print(", passthrough_hp %.0f µs (mean %.0f): %.2f×" % (pmed, pmean, pmean / kmean))
else:
    print()
kind = {"fuse_op": "FUSE", "meta_request": "metadata",
        "object_request": "uploads" if target == "s3wb" else "object store",
        "writeback_stage": "staging"}
tot = {}
for (fam, op), v in sorted(rows.items(), key=lambda x: (list(kind).index(x[0][0]), -x[1].get("sum", 0))):
    c, s = v.get("count", 0), v.get("sum", 0)
    if c / n < 0.01:
        continue
    tot[kind[fam]] = tot.get(kind[fam], 0) + s / n * 1e6
    print("  %-12s %-18s %5.2f per op  %7.1f µs each  %7.1f µs per op" % (kind[fam], op, c / n, s / c * 1e6, s / n * 1e6))
inside = ["metadata", "staging" if target == "s3wb" else "object store"]
print("  handlers %.0f µs per op (%s inside them); the rest (kernel, transport, the "
      "application) %.0f" % (tot.get("FUSE", 0), ", ".join("%s %.0f" % (k, tot.get(k, 0))
      for k in inside), kmean - tot.get("FUSE", 0)))
if "uploads" in tot:
    print("  uploads (upload workers, in the background): %.0f µs of requests per op" % tot["uploads"])
EOF
done
exit $rc
