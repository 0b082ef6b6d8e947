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
# handlers is the kernel, the transport and the application's own system calls.  Last,
# the CPU time per operation on both file systems: the application's (its rusage: the
# sum is exact, the split into user and system the kernel's estimate) and the file
# system process's while the workload ran, by thread name (from each thread's
# schedstat; KegFS's FUSE handlers run in threads named kegfs, its background work in
# keg-*), and with --target s3wb that of the Redis and Ceph daemons started here
# meanwhile.  On a machine with few CPUs their sum bounds the rate: the handler times
# above include waiting for a CPU, the CPU times do not.
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
# cpu_snap OUT PID...: one line per thread of the PIDs, "T pid tid comm ns" (ns: the CPU
# time the thread has run, the first field of its schedstat), and one per PID, "P pid - -
# ns" (ns: the process's user + system time, in clock ticks in /proc/PID/stat, which
# also counts its threads that have exited: a thread started and ended between two
# snapshots, such as a helper of one fsync batch, shows only there)
TCK=$(getconf CLK_TCK)
cpu_snap() {
  local out=$1 p t f; shift
  : > "$out"
  for p in "$@"; do
    for t in /proc/"$p"/task/*; do
      read -r ns _ < "$t/schedstat" 2>/dev/null || continue
      echo "T $p ${t##*/} $(tr ' ' _ < "$t/comm" 2>/dev/null) $ns" >> "$out"
    done
    read -ra f <<< "$(cut -d')' -f2- "/proc/$p/stat" 2>/dev/null)"
    [ ${#f[@]} -gt 13 ] && echo "P $p - - $(( (f[12] + f[13]) * (1000000000 / TCK) ))" >> "$out"
  done
}
# srv_snap OUT: one line per server process started here (Redis, the Ceph daemons), as
# cpu_snap writes a thread's: "T pid pid comm ns", ns = the CPU time of all its threads
srv_snap() {
  local out=$1 f p t ns sum
  : > "$out"
  for f in "$D/redis/redis.pid" "$D"/s3/pids/*; do
    [ -f "$f" ] && read -r p < "$f" && [ -d "/proc/$p" ] || continue
    sum=0
    for t in /proc/"$p"/task/*; do
      read -r ns _ < "$t/schedstat" 2>/dev/null && sum=$((sum + ns))
    done
    echo "T $p $p $(tr ' ' _ < "/proc/$p/comm") $sum" >> "$out"
  done
}
# the mounter's processes (the supervisor and its worker): comm kegfs, our mountpoint
keg_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = kegfs ] && grep -qaF -- "$D/keg-mnt" "$p/cmdline" 2>/dev/null &&
      echo "${p#/proc/}"
  done
}
# run_sf OUT CPUFILE DIR: bench/smallfile on DIR, its output in OUT and its own CPU
# seconds (user system, its rusage) in CPUFILE
run_sf() {
  python3 -c '
import resource, subprocess, sys
t = resource.getrusage(resource.RUSAGE_CHILDREN)    # (a launcher may have had children)
with open(sys.argv[1], "w") as out:
    rc = subprocess.call(sys.argv[3:], stdout=out)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[2], "w").write("%f %f\n" % (u.ru_utime - t.ru_utime, u.ru_stime - t.ru_stime))
sys.exit(rc)' "$1" "$2" "$SF" -n "$N" -w "$w" "$3"
}
rc=0
echo "KegFS $NAME vs passthrough_hp, bench/smallfile -n $N, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for w in ${WL//,/ }; do
  mkdir -p "$D/keg-mnt/$w" "$D/pthp-mnt/$w"
  scrape "$D/before" || { echo "profile.sh: no metrics on 127.0.0.1:$PORT" >&2; exit 1; }
  kp=$(keg_pids)
  cpu_snap "$D/keg.cpu0" $kp
  srv_snap "$D/srv.cpu0"
  run_sf "$D/keg.out" "$D/keg.app" "$D/keg-mnt/$w" || rc=1
  cpu_snap "$D/keg.cpu1" $kp
  srv_snap "$D/srv.cpu1"
  scrape "$D/after" || rc=1
  pt=""
  if [ -n "$PTHP_PID" ]; then
    cpu_snap "$D/pthp.cpu0" "$PTHP_PID"
    run_sf "$D/pthp.out" "$D/pthp.app" "$D/pthp-mnt/$w" || rc=1
    cpu_snap "$D/pthp.cpu1" "$PTHP_PID"
    pt=$D/pthp.out
  fi
  python3 - "$w" "$N" "$D/before" "$D/after" "$D/keg.out" "$pt" "$TARGET" "$D" <<'EOF'
import re, sys
w, n, fa, fb, keg, pt, target, d = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
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

# CPU time per operation: the application's (user + system, its rusage) and the
# file system process's, by thread name
def app_cpu(f):
    try:
        u, s = (float(x) for x in open(f).read().split()[:2])
    except (OSError, ValueError):
        return None
    return u / n * 1e6, s / n * 1e6

def daemon_cpu(f0, f1):
    # by thread name; the CPU of threads that ended between the snapshots (the
    # process's total less what its threads account for) as "exited threads"
    def rd(f):
        thr, proc = {}, {}
        try:
            for kind, pid, tid, comm, ns in (l.split() for l in open(f) if l.strip()):
                if kind == "T":
                    thr[tid] = (pid, comm, int(ns))
                else:
                    proc[pid] = int(ns)
        except (OSError, ValueError):
            return {}, {}
        return thr, proc
    (ta, pa), (tb, pb) = rd(f0), rd(f1)
    by, per_pid = {}, {}
    for tid, (pid, c, ns) in tb.items():
        d = ns - ta.get(tid, (pid, c, 0))[2]
        by[c] = by.get(c, 0) + d
        per_pid[pid] = per_pid.get(pid, 0) + d
    gone = sum(max(pb[p] - pa[p] - per_pid.get(p, 0), 0) for p in pb if p in pa)
    if gone / n / 1e3 >= 5:     # the totals count in clock ticks: smaller is their rounding
        by["exited threads"] = gone
    return {c: v / n / 1e3 for c, v in by.items() if v > 0}

def cpu_line(who, app, dmn):
    parts = []
    if app:
        parts.append("application %.0f (user %.0f, system %.0f)" % (app[0] + app[1], *app))
    if dmn:
        tot = sum(dmn.values())
        top = sorted(dmn.items(), key=lambda x: -x[1])
        parts.append("%s %.0f (%s)" % ("mounter" if who == "KegFS" else "daemon", tot,
                     ", ".join("%s %.0f" % (c, v) for c, v in top if v >= 1)))
    if parts:
        print("  CPU µs per op, %s: %s" % (who, "; ".join(parts)))

cpu_line("KegFS", app_cpu(d + "/keg.app"), daemon_cpu(d + "/keg.cpu0", d + "/keg.cpu1"))
srv = daemon_cpu(d + "/srv.cpu0", d + "/srv.cpu1")     # (keyed by pid, named by comm)
if srv:
    print("  CPU µs per op, KegFS's servers meanwhile: %s" % ", ".join(
        "%s %.0f" % (c, v) for c, v in sorted(srv.items(), key=lambda x: -x[1])))
if pt:
    cpu_line("passthrough_hp", app_cpu(d + "/pthp.app"),
             daemon_cpu(d + "/pthp.cpu0", d + "/pthp.cpu1"))
EOF
done
exit $rc
