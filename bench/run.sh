#!/usr/bin/env bash
# run.sh -- the KegFS benchmark (`make bench`): small-file and sequential I/O on KegFS
# against our own FUSE passthrough, all in one run, with the goals checked.
#
#   bench/run.sh BUILD_DIR [--quick] [--reps N] [--n N] [--mib M] [--targets LIST] [--keep]
#                          [--back-to-back]
#
# Builds nothing: needs BUILD_DIR/mounter/kegfs and BUILD_DIR/bench/{keg_passthrough,
# smallfile,seqio}.  Starts on 127.0.0.1 what it needs and stops it on exit:
#   redis   scripts/redis-server.sh on port $KEG_BENCH_REDIS_PORT (6395), dir DIR/redis
#   S3      scripts/s3-server.sh (Ceph gateway) in $KEG_BENCH_S3_DIR (/tmp/bench-s3),
#           S3 port $KEG_S3_PORT (7680), monitor port $KEG_S3_MON_PORT (6890)
# and mounts three targets (LIST, default all: pt,s3wb,sqlite):
#   pt      keg_passthrough over DIR/pt-src (a local directory)
#   s3wb    KegFS, Redis metadata + S3 objects, --writeback, SSD cache (--cache-dir)
#   sqlite  KegFS, SQLite metadata + file object store (the embedded default)
# Each repetition (default 3) runs on every target in turn: bench/smallfile (ZeroFS's four
# small-file workloads, N=2000), then bench/seqio: 1 GiB written (fsync at the end), for
# s3wb the time until the last staged object is in the store, the page cache dropped
# (echo 3 > /proc/sys/vm/drop_caches), the file read back and checked.  Medians of the
# repetitions are printed as a table with ratios to the passthrough, then the goals:
#   s3wb >= 0.5x passthrough ops/s on each small-file workload, with 100% success
#   s3wb sequential write and read >= 0.7x passthrough
# Each workload starts on an idle target: before it, on every target alike, the script runs
# sync(1), waits until the s3wb target's staging area is empty (the previous workload's
# uploads have landed; that time is reported as the workload's drain_s, its durability
# point) and then $KEG_BENCH_PHASE_SETTLE seconds (default 2).  --back-to-back runs the four
# small-file workloads in one process, one right after the other, instead: a workload then
# shares the machine with the previous one's uploads (with S3 on the same host, the
# gateway's CPU).  After each target's run and cleanup the script waits $KEG_BENCH_SETTLE
# seconds (default 10) so that deferred deletions finish before the next target is measured.
# DIR is $KEG_BENCH_DIR (default /tmp/bench-run; emptied first).  Raw results in
# DIR/results.txt, mounter logs in DIR/*.log.
# Exit: 0 all goals met, 1 a goal missed or a run failed, 2 setup error / usage.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)

usage() {
  sed -n '/^#   bench\/run.sh/p' "$0" | sed 's/^#   //' >&2
  exit 2
}

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "run.sh: no build dir '$1'" >&2; exit 2; }
shift
REPS=3
SETTLE=${KEG_BENCH_SETTLE:-10}
PHASE_SETTLE=${KEG_BENCH_PHASE_SETTLE:-2}
JOINED=0
N=2000
MIB=1024
TARGETS=pt,s3wb,sqlite
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) REPS=1; N=200; MIB=128 ;;
    --reps) REPS=$2; shift ;;
    --n) N=$2; shift ;;
    --mib) MIB=$2; shift ;;
    --targets) TARGETS=$2; shift ;;
    --keep) KEEP=1 ;;
    --back-to-back) JOINED=1 ;;
    *) echo "run.sh: unknown option '$1'" >&2; usage ;;
  esac
  shift
done

KEGFS=$BUILD/mounter/kegfs
PT=$BUILD/bench/keg_passthrough
SF=$BUILD/bench/smallfile
SQ=$BUILD/bench/seqio
for b in "$KEGFS" "$PT" "$SF" "$SQ"; do
  [ -x "$b" ] || { echo "run.sh: $b is missing (build first: make build)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (FUSE mounts, drop_caches)" >&2; exit 2; }
[ -c /dev/fuse ] || { echo "run.sh: no /dev/fuse" >&2; exit 2; }

D=${KEG_BENCH_DIR:-/tmp/bench-run}
REDIS_PORT=${KEG_BENCH_REDIS_PORT:-6395}
S3DIR=${KEG_BENCH_S3_DIR:-/tmp/bench-s3}
export KEG_S3_PORT=${KEG_S3_PORT:-7680}
export KEG_S3_MON_PORT=${KEG_S3_MON_PORT:-6890}
export KEGFS_RUN_DIR=$D/run      # the mounters' state and stats files
RES=$D/results.txt

for m in $(awk -v d="$D/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo); do
  echo "run.sh: $m is still mounted from an earlier run; unmounting" >&2
  umount -l "$m" 2>/dev/null
done
rm -rf "$D"
mkdir -p "$D" "$KEGFS_RUN_DIR"
: > "$RES"

has_target() { [[ ",$TARGETS," == *",$1,"* ]]; }

started_redis=0
started_s3=0
PT_PID=""
cleanup() {
  trap - INT TERM EXIT
  local m
  for m in $(awk -v d="$D/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
    case "$m" in
      */pt-mnt) fusermount3 -u "$m" 2>/dev/null || umount -l "$m" ;;
      *) timeout 150 "$KEGFS" umount "$m" >>"$D/umount.log" 2>&1 || umount -l "$m" 2>/dev/null ;;
    esac
  done
  [ -n "$PT_PID" ] && kill "$PT_PID" 2>/dev/null
  [ $started_s3 = 1 ] && "$top/scripts/s3-server.sh" stop "$S3DIR" >/dev/null 2>&1
  [ $started_redis = 1 ] && "$top/scripts/redis-server.sh" stop "$REDIS_PORT" "$D/redis" \
    >/dev/null 2>&1
  if [ $KEEP = 0 ]; then
    rm -rf "$D/pt-src" "$D/objects" "$D/cache" "$D"/*-mnt "$D/meta.db"*
  fi
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted"; exit 130' INT TERM

is_mounted() { grep -qs " $1 " /proc/self/mountinfo; }

#--- machine ---------------------------------------------------------------------
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
disk=$(df -h "$D" | awk 'NR == 2 { print $1 " (" $2 ")" }')
fstype=$(stat -f -c %T "$D")
echo "machine: $(nproc) CPUs ($cpu), $mem RAM, $(uname -r), $D on $disk $fstype"
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "method: $REPS repetitions, medians; smallfile N=$N; seqio $MIB MiB"
git -C "$top" log -1 --format='commit: %h %s' 2>/dev/null | cut -c1-100

#--- servers -----------------------------------------------------------------------
if has_target s3wb && "$top/scripts/redis-server.sh" status "$REDIS_PORT" "$D/redis" 2>/dev/null; then
  echo "run.sh: something already answers on 127.0.0.1:$REDIS_PORT (KEG_BENCH_REDIS_PORT)" >&2
  exit 2
fi
if has_target s3wb && [ ! -d "$S3DIR/pids" ] &&
   curl -s -o /dev/null -m 2 "http://127.0.0.1:$KEG_S3_PORT/"; then
  echo "run.sh: something already answers on 127.0.0.1:$KEG_S3_PORT (KEG_S3_PORT)" >&2
  exit 2
fi
if has_target s3wb; then
  if "$top/scripts/redis-server.sh" start "$REDIS_PORT" "$D/redis" >/dev/null; then
    started_redis=1
  else
    echo "run.sh: redis did not start; dropping target s3wb" >&2
    TARGETS=${TARGETS//s3wb/}
  fi
fi
if has_target s3wb; then
  echo "starting the Ceph S3 gateway in $S3DIR (127.0.0.1:$KEG_S3_PORT) ..."
  started_s3=1      # stopped on exit even when the start failed half-way
  # a start occasionally fails on a loaded machine (the OSD never comes up): retry once
  if "$top/scripts/s3-server.sh" start "$S3DIR" > "$D/s3-start.log" 2>&1 ||
     { "$top/scripts/s3-server.sh" stop "$S3DIR" >/dev/null 2>&1;
       "$top/scripts/s3-server.sh" start "$S3DIR" >> "$D/s3-start.log" 2>&1; }; then
    eval "$("$top/scripts/s3-server.sh" env "$S3DIR")"
  else
    tail -5 "$D/s3-start.log" >&2
    echo "run.sh: the S3 gateway did not start; dropping target s3wb" >&2
    TARGETS=${TARGETS//s3wb/}
  fi
fi

#--- mounts ------------------------------------------------------------------------
mount_pt() {
  mkdir -p "$D/pt-src" "$D/pt-mnt"
  "$PT" "$D/pt-src" "$D/pt-mnt" > "$D/pt.log" 2>&1 &
  PT_PID=$!
  local i
  for i in $(seq 50); do is_mounted "$D/pt-mnt" && return 0; sleep 0.1; done
  echo "run.sh: keg_passthrough did not mount; see $D/pt.log" >&2
  return 1
}

mount_s3wb() {
  local meta="redis://127.0.0.1:$REDIS_PORT/1"
  mkdir -p "$D/s3wb-mnt" "$D/cache"
  AWS_ACCESS_KEY_ID=$KEG_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$KEG_TEST_S3_SECRET_KEY \
    "$KEGFS" format --storage s3 --bucket "$KEG_TEST_S3_BUCKET" "$meta" bench-s3 \
    > "$D/s3wb-format.log" 2>&1 || { cat "$D/s3wb-format.log" >&2; return 1; }
  "$KEGFS" mount -d --log-file "$D/s3wb-mounter.log" --writeback --cache-dir "$D/cache" \
    --cache-size 8G --max-staging 2G "$meta" "$D/s3wb-mnt" > "$D/s3wb-mount.log" 2>&1 \
    || { cat "$D/s3wb-mount.log" >&2; return 1; }
}

mount_sqlite() {
  local meta="sqlite3://$D/meta.db"
  mkdir -p "$D/sqlite-mnt" "$D/objects"
  "$KEGFS" format --storage file --bucket "$D/objects" "$meta" bench-sqlite \
    > "$D/sqlite-format.log" 2>&1 || { cat "$D/sqlite-format.log" >&2; return 1; }
  "$KEGFS" mount -d --log-file "$D/sqlite-mounter.log" "$meta" "$D/sqlite-mnt" \
    > "$D/sqlite-mount.log" 2>&1 || { cat "$D/sqlite-mount.log" >&2; return 1; }
}

ALL=()
for t in pt s3wb sqlite; do
  has_target $t || continue
  if "mount_$t"; then ALL+=("$t"); else echo "run.sh: cannot mount $t; skipping it" >&2; fi
done
[ ${#ALL[@]} -gt 0 ] || { echo "run.sh: nothing mounted" >&2; exit 2; }
echo "targets: ${ALL[*]}"

# staged objects of the writeback mount (files in its staging slots)
staged_files() {
  find "$D/cache" -path '*/staging/*' -type f ! -name '.lock' ! -name '.bad.*' \
    ! -name '.tmp*' 2>/dev/null | wc -l
}

# wait_drain: seconds until the staging area is empty (polled every 0.1 s), max 600
wait_drain() {
  local t0 t1 i
  t0=$(date +%s.%N)
  for i in $(seq 6000); do
    [ "$(staged_files)" = 0 ] && break
    sleep 0.1
  done
  t1=$(date +%s.%N)
  [ "$(staged_files)" = 0 ] || { echo "drain=timeout"; return; }
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "drain_s=%.1f\n", b - a }'
}

# quiesce TARGET REP WHAT: let the target go idle before the next measurement; for s3wb
# the wait for its staging area is recorded as "drain_WHAT"
quiesce() {
  sync
  if [ "$1" = s3wb ]; then
    echo "$1 $2 drain_$3 $(wait_drain)" >> "$RES"
  fi
  sleep "$PHASE_SETTLE"
}

FAILED_RUNS=0
run_one() {   # run_one TARGET REP
  local t=$1 r=$2 dir="$D/$1-mnt/r$2" out line w
  local works=create,randmod,append,empty
  mkdir -p "$dir" || { echo "run.sh: mkdir $dir failed" >&2; FAILED_RUNS=$((FAILED_RUNS + 1)); return; }
  [ $JOINED = 1 ] || works="create randmod append empty"
  for w in $works; do
    sync
    out=$("$SF" -n "$N" -s "$r" -w "$w" "$dir")
    [ $? = 0 ] || FAILED_RUNS=$((FAILED_RUNS + 1))
    while read -r line; do
      [ -n "$line" ] && echo "$t $r $line" >> "$RES"
    done <<< "$out"
    [ $JOINED = 1 ] || quiesce "$t" "$r" "$w"
  done
  sync
  echo 3 > /proc/sys/vm/drop_caches
  out=$("$SQ" write "$dir/big" "$MIB" "$r") || FAILED_RUNS=$((FAILED_RUNS + 1))
  echo "$t $r $out" >> "$RES"
  if [ "$t" = s3wb ]; then
    echo "$t $r drain $(wait_drain)" >> "$RES"
  fi
  sync
  echo 3 > /proc/sys/vm/drop_caches
  out=$("$SQ" read "$dir/big" "$MIB" "$r") || FAILED_RUNS=$((FAILED_RUNS + 1))
  echo "$t $r $out" >> "$RES"
  rm -rf "$dir"
  # Let the deferred work of this cleanup (the deletion queue's object deletes, a
  # gateway's own cleanup) finish before the next measurement instead of in it.
  sync
  sleep "$SETTLE"
}

for r in $(seq "$REPS"); do
  for t in "${ALL[@]}"; do
    echo "rep $r/$REPS: $t ..."
    run_one "$t" "$r"
  done
done
if [[ " ${ALL[*]} " == *" s3wb "* ]]; then
  "$KEGFS" stats "$D/s3wb-mnt" > "$D/s3wb-stats.txt" 2>&1
fi

#--- table ---------------------------------------------------------------------------
# median VALUES...: the median of the numbers (the lower middle one for an even count)
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
# field TARGET WORKLOAD KEY: the KEY values of every repetition
field() {
  awk -v t="$1" -v w="$2" -v k="$3" '$1 == t && $3 == w {
    for (i = 4; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$RES"
}
med() { median $(field "$1" "$2" "$3"); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "") printf "%.2f", a / b; else print "-" }'; }

echo
if [ $JOINED = 1 ]; then
  echo "small-file workloads back to back, in one process"
else
  echo "small-file workloads one at a time, each on an idle target (drain_s: s3wb's wait after it)"
fi
echo "Results (median of $REPS; ops/s, latency median / p99 in microseconds; ratio vs pt)"
printf '%-8s %-8s %9s %6s %10s %10s %9s %8s\n' target workload ops/s ratio median_us p99_us ok \
  drain_s
for w in create randmod append empty; do
  base=$(med pt "$w" ops_s)
  for t in "${ALL[@]}"; do
    ops=$(med "$t" "$w" ops_s)
    okmin=$(field "$t" "$w" ok | sort -n | head -1)
    dr="-"
    [ "$t" = s3wb ] && [ $JOINED = 0 ] && dr=$(med s3wb "drain_$w" drain_s)
    printf '%-8s %-8s %9s %6s %10s %10s %9s %8s\n' "$t" "$w" "${ops:--}" \
      "$(ratio "$ops" "$base")" "$(med "$t" "$w" median_us)" "$(med "$t" "$w" p99_us)" \
      "${okmin:--}/$N" "${dr:--}"
  done
done
echo
printf '%-8s %11s %6s %11s %6s %9s\n' target write_MiB/s ratio read_MiB/s ratio drain_s
bw=$(med pt write mib_s)
br=$(med pt read mib_s)
for t in "${ALL[@]}"; do
  w=$(med "$t" write mib_s)
  rd=$(med "$t" read mib_s)
  dr="-"
  [ "$t" = s3wb ] && dr=$(med s3wb drain drain_s)
  printf '%-8s %11s %6s %11s %6s %9s\n' "$t" "${w:--}" "$(ratio "$w" "$bw")" "${rd:--}" \
    "$(ratio "$rd" "$br")" "${dr:--}"
done
if [ "$(field s3wb read ok | grep -c 0)" != 0 ] || [ "$(field sqlite read ok | grep -c 0)" != 0 ]; then
  echo "run.sh: a read-back found wrong data (see $RES)"
  FAILED_RUNS=$((FAILED_RUNS + 1))
fi

#--- goals ---------------------------------------------------------------------------
echo
MISSED=0
goal() {   # goal TEXT VALUE LIMIT
  if awk -v v="$2" -v l="$3" 'BEGIN { exit !(v != "-" && v != "" && v + 0 >= l + 0) }'; then
    echo "goal met:    $1 ($2 >= $3)"
  else
    echo "goal MISSED: $1 ($2 < $3)"
    MISSED=$((MISSED + 1))
  fi
}
if [[ " ${ALL[*]} " == *" s3wb "* ]] && [[ " ${ALL[*]} " == *" pt "* ]]; then
  for w in create randmod append empty; do
    goal "s3wb $w ops/s vs passthrough" "$(ratio "$(med s3wb "$w" ops_s)" "$(med pt "$w" ops_s)")" 0.5
    okmin=$(field s3wb "$w" ok | sort -n | head -1)
    goal "s3wb $w success" "${okmin:-0}" "$N"
  done
  goal "s3wb sequential write vs passthrough" "$(ratio "$(med s3wb write mib_s)" "$bw")" 0.7
  goal "s3wb sequential read vs passthrough" "$(ratio "$(med s3wb read mib_s)" "$br")" 0.7
else
  echo "goals not checked: needs targets pt and s3wb"
  MISSED=$((MISSED + 1))
fi
echo "load after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw results: $RES"
if [ $FAILED_RUNS -gt 0 ]; then
  echo "run.sh: $FAILED_RUNS benchmark runs failed"
  exit 1
fi
[ $MISSED = 0 ] || exit 1
exit 0
