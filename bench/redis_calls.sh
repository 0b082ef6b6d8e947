#!/usr/bin/env bash
# redis_calls.sh -- Redis calls and latency per metadata operation through a kegfs mount.
#
# A dedicated redis-server (scripts/redis-server.sh, loopback) serves a fresh volume.
# For each phase the script captures the server's MONITOR stream while `fsops -n N OP`
# runs through the mount and counts the requests the mounter sent (an EVALSHA is one
# request; the commands a script runs inside the server are left out -- INFO
# commandstats would count those too), minus the mounter's background traffic
# (heartbeat, deletion-queue polling: measured while idle), divided by N.  Then N more
# ops run without MONITOR for the latency (fsops: median, p99).
#
#   mount 1, default kernel caches (attr/entry 1 s):
#     create   open(O_CREAT|O_EXCL) + close of a new name (includes the kernel's lookup)
#     rename   rename(f<i>, g<i>)
#     unlink   unlink(g<i>)
#     pair     create + rename of a temporary name, timed as one unit
#   mount 2, --attr-cache 0 (entries cached 1 s):
#     stat     stat(g<i>) of files whose entries expired (lookup + getattr)
#     fstat    fstat() of one open file (getattr only)
#     create0  create with --attr-cache 0
#
# Usage: bench/redis_calls.sh --kegfs BUILD/mounter/kegfs --fsops BUILD/bench/fsops
#                             [-n N] [--port PORT] [--query Q] [--sqlite] [--trace] [--keep]
#   --port   the dedicated server's port (default: a random free one)
#   --query  extra META_URL parameters for the Redis mounts, e.g. "dircache=0" (without
#            the directory name cache) or "spin=0"
#   --sqlite also time the same ops on a SQLite-backed mount (same kernel/FUSE path,
#            no network), to separate FUSE cost from Redis cost
#   --trace  also record 3 iterations of each op with MONITOR and the mounter's --debug
#            log (which FUSE requests the kernel sent, which Redis commands they cost)
# Output: a table on stdout; the MONITOR captures stay in WORK/ with --keep.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
KEGFS=""
FSOPS=""
N=2000
PORT=""
TRACE=0
SQLITE=0
KEEP=0
QUERY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kegfs) KEGFS=$2; shift ;;
    --fsops) FSOPS=$2; shift ;;
    -n) N=$2; shift ;;
    --port) PORT=$2; shift ;;
    --query) QUERY=$2; shift ;;
    --trace) TRACE=1 ;;
    --sqlite) SQLITE=1 ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "redis_calls.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$KEGFS" ] || { echo "redis_calls.sh: --kegfs PATH is required" >&2; exit 2; }
[ -x "$FSOPS" ] || { echo "redis_calls.sh: --fsops PATH is required (build target fsops)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "redis_calls.sh: needs root (FUSE mounts)" >&2; exit 77; }

TMP=${KEG_TEST_TMP:-/tmp}
WORK=$(mktemp -d "$TMP/kegbench.XXXX")
RDIR=$WORK/redis
MNT=$WORK/mnt
cli() { redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }

cleanup() {
  cd /
  if grep -qs " $MNT " /proc/self/mountinfo; then
    "$KEGFS" umount "$MNT" >/dev/null 2>&1 || umount -l "$MNT"
  fi
  [ -n "${MON_PID:-}" ] && kill "$MON_PID" 2>/dev/null
  "$ROOT/scripts/redis-server.sh" stop "$PORT" "$RDIR" >/dev/null 2>&1
  [ $KEEP = 1 ] && echo "work dir kept: $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# a port of our own: a server that others found "already running" would count their calls
if [ -z "$PORT" ]; then
  for _ in $(seq 1 50); do
    PORT=$((20000 + RANDOM % 20000))
    redis-cli -h 127.0.0.1 -p "$PORT" PING >/dev/null 2>&1 || break
  done
fi
if cli PING >/dev/null 2>&1; then
  echo "redis_calls.sh: something already listens on port $PORT; use --port" >&2
  exit 1
fi
META="redis://127.0.0.1:$PORT/0?ns=bench$$"
"$ROOT/scripts/redis-server.sh" start "$PORT" "$RDIR" >/dev/null || exit 1
mkdir -p "$WORK/objects" "$MNT"
"$KEGFS" format --storage file --bucket "$WORK/objects" "$META" bench >/dev/null || exit 1

mount_it() {   # mount_it [ARGS]  (META_URL: $MOUNT_META, default $META + --query)
  "$KEGFS" mount -d --log-file "$WORK/mounter.log" "$@" "${MOUNT_META:-$META${QUERY:+&$QUERY}}" "$MNT" > /dev/null \
    || { echo "redis_calls.sh: mount failed" >&2; exit 1; }
  mkdir -p "$MNT/b" "$MNT/warm"
  "$FSOPS" -n 20 -p warm create "$MNT/warm" > /dev/null   # dial the connection pool
  rm -rf "$MNT/warm"      # a second mount_it warms up again in an empty directory
  sleep 1
}
umount_it() {
  "$KEGFS" umount "$MNT" || { echo "redis_calls.sh: umount failed" >&2; exit 1; }
}

# Requests the mounter sent, from a MONITOR capture: commands run inside Lua scripts
# ("[0 lua]") are left out, so an EVALSHA counts once, as one round trip.
# Output: "COMMAND COUNT" lines (EVALSHA split by the script's SHA1 prefix, as
# "EVALSHA:1234abcd"; --trace shows which script each prefix is, by its arguments).
monitor_start() {   # monitor_start FILE
  # redis-cli itself (not a subshell around it), so that monitor_stop ends it
  redis-cli -h 127.0.0.1 -p "$PORT" MONITOR > "$1" &
  MON_PID=$!
  sleep 0.3
}
monitor_stop() {
  sleep 0.3
  kill "$MON_PID" 2>/dev/null
  wait "$MON_PID" 2>/dev/null
  MON_PID=""
}
requests() {   # requests FILE
  grep '^[0-9]' "$1" | grep -v ' lua\] ' \
    | awk '{ c = $4; gsub(/"/, "", c)
             if (c == "EVALSHA") { s = $5; gsub(/"/, "", s); c = c ":" substr(s, 1, 8) }
             print c }' | sort | uniq -c | awk '{ print $2, $1 }'
}
sum_calls() { awk '{ s += $2 } END { print s + 0 }'; }

# background requests per second of an idle mount (heartbeat, deletion-queue polling)
idle_rate() {
  local t0
  monitor_start "$WORK/idle.monitor"
  t0=$(date +%s%N)
  sleep 10
  monitor_stop
  requests "$WORK/idle.monitor" > "$WORK/idle.req"
  awk -v a="$t0" -v b="$(date +%s%N)" '{ s += $2 } END { printf "%.2f", s / ((b - a) / 1e9) }' \
    "$WORK/idle.req"
}

ROWS=()
# phase LABEL OP PREFIX: count the requests of N ops under MONITOR (prefix PREFIX), then
# time N more without MONITOR (prefix PREFIX + "l"), which would slow the server down.
phase() {
  local label=$1 op=$2 prefix=$3 t0 t1 out calls net per detail
  monitor_start "$WORK/$label.monitor"
  t0=$(date +%s%N)
  "$FSOPS" -n "$N" -p "$prefix" "$op" "$MNT/b" > /dev/null || { echo "fsops $op failed" >&2; exit 1; }
  t1=$(date +%s%N)
  monitor_stop
  requests "$WORK/$label.monitor" > "$WORK/$label.req"
  calls=$(sum_calls < "$WORK/$label.req")
  net=$(awk -v c="$calls" -v r="$BG" -v a="$t0" -v b="$t1" \
        'BEGIN { n = c - r * ((b - a) / 1e9 + 0.6); if (n < 0) n = 0; printf "%.0f", n }')
  per=$(awk -v c="$net" -v n="$N" 'BEGIN { printf "%.2f", c / n }')
  detail=$(awk -v n="$N" '$2 >= n / 20 { printf "%s%s=%.2f", sep, $1, $2 / n; sep = " " }' \
           "$WORK/$label.req")
  out=$("$FSOPS" -n "$N" -p "${prefix}l" "$op" "$MNT/b") || { echo "fsops $op failed" >&2; exit 1; }
  ROWS+=("$(printf '%-8s %7s %6s  %-30s %s' "$label" "$net" "$per" "$detail" \
            "$(echo "$out" | sed 's/^op=[a-z]* n=[0-9]* //; s/ mean_us=.*//')")")
}

trace() {   # trace LABEL OP PREFIX: 3 iterations under MONITOR, with the FUSE requests
  local label=$1 op=$2 prefix=$3
  : > "$WORK/mounter.log"
  monitor_start "$WORK/trace-$label.monitor"
  "$FSOPS" -n 3 -p "$prefix" "$op" "$MNT/b" > /dev/null
  monitor_stop
  echo "--- $label x3: FUSE requests (mounter --debug) ---"
  grep -oE '\] (lookup|create|open|flush|release|getattr|setattr|rename|unlink|getxattr|mknod|forget|batch_forget|opendir|releasedir|readdir|readdirplus|access)\(' \
    "$WORK/mounter.log" | sed 's/^\] //; s/($//' | sort | uniq -c | sed 's/^/  /'
  echo "--- $label x3: Redis requests (MONITOR; commands inside scripts left out) ---"
  grep -v ' lua\] ' "$WORK/trace-$label.monitor" | grep '^[0-9]' \
    | awk '{ c = $4; gsub(/"/, "", c); k = c
             if (c == "EVALSHA") { k = c " " substr($5, 2, 8); ex[k] = substr($0, index($0, $4) + 53, 110) }
             else ex[k] = substr($0, index($0, $4), 100)
             n[k]++ }
           END { for (k in n) printf "  %5d  %-18s e.g. %s\n", n[k], k, ex[k] }' | sort -k2
}

mount_it
BG=$(idle_rate)
phase create create a
phase rename rename a
phase unlink unlink a
phase pair pair a
"$FSOPS" -n "$N" -p a clean "$MNT/b" > /dev/null
"$FSOPS" -n "$N" -p al clean "$MNT/b" > /dev/null
umount_it

mount_it --attr-cache 0
for p in s sl; do
  "$FSOPS" -n "$N" -p $p create "$MNT/b" > /dev/null
  "$FSOPS" -n "$N" -p $p rename "$MNT/b" > /dev/null
done
sleep 1.5   # let the entries expire
phase stat stat s
phase fstat fstat s
phase create0 create z
umount_it

echo "Redis requests per operation through a kegfs mount (N=$N per phase; dedicated"
echo "$(redis-server --version | cut -d' ' -f1-3) on 127.0.0.1:$PORT; idle background $BG requests/s subtracted)"
echo "$(uname -r), $(nproc) CPUs: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1);" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "redis-cli PING round trip (ms, ~100 samples): min max avg = $(timeout 5 redis-cli -h 127.0.0.1 -p "$PORT" --latency --raw | cut -d' ' -f1-3)"
printf '%-8s %7s %6s  %-30s %s\n' phase calls per_op "by command (per op)" "latency (fsops, no MONITOR)"
for r in "${ROWS[@]}"; do echo "$r"; done

if [ $SQLITE = 1 ]; then
  mkdir -p "$WORK/objects-sq"
  MOUNT_META="sqlite3://$WORK/meta.db"
  "$KEGFS" format --storage file --bucket "$WORK/objects-sq" "$MOUNT_META" benchsq >/dev/null || exit 1
  mount_it
  echo
  echo "same ops on a SQLite-backed mount (default caches), latency only:"
  for op in create rename unlink pair; do
    printf '%-8s %s\n' "$op" "$("$FSOPS" -n "$N" -p q "$op" "$MNT/b" | sed 's/^op=[a-z]* n=[0-9]* //; s/ mean_us=.*//')"
  done
  umount_it
  MOUNT_META=""
fi

if [ $TRACE = 1 ]; then
  mount_it --debug
  echo
  trace create create x
  trace rename rename x
  trace unlink unlink x
  umount_it
  mount_it --debug --attr-cache 0
  trace create0 create y
  "$FSOPS" -n 3 -p y rename "$MNT/b" > /dev/null
  sleep 1.5
  trace stat stat y
  umount_it
  echo "(EVALSHA: first 8 hex digits of the script's SHA1 and one call's arguments after"
  echo " '{ns}' now_sec now_nsec sid; see docs/internals/meta-redis.md, 'Scripts and round trips')"
fi
