# redis_lib.sh -- helpers for the Redis mount cases (tests/mount/cases/redis_*.sh),
# sourced after lib.sh.  Not a case itself.
#
#   need_redis                  skip unless the runner's META is a redis:// URL
#   rd_start VAR [CONF LINE]... start a dedicated redis-server on a free loopback port,
#                               data in $WORK/redis-PORT; sets VAR=PORT
#   rd_restart PORT             start the same server again (same config, same files)
#   rd_stop PORT [save]         SHUTDOWN NOSAVE (or SAVE) and wait until it is gone
#   rd_cli PORT ARGS...         redis-cli against it
#   rd_format VAR PORT          format volume $VOL on it (objects in $WORK/objects2);
#                               sets VAR to its META_URL
#   m2_mount DIR LOG URL [ARGS] `kegfs mount -d` of URL at DIR (an extra mount point)
#   m2_umount DIR               unmount an extra mount point (lazy detach as a fallback)
#   m2_pid DIR                  pid of the mounter serving DIR
#
# Every server started and every extra mount is undone by the EXIT trap, so a
# failing case leaves no redis-server and no dead mount point behind (the runner
# kills the case's cgroup afterwards, which would otherwise leave a dead FUSE mount
# that makes removing $WORK fail).

RD_PORTS=""
M2_DIRS=""

need_redis() {
  need_kegfs
  case "${META:-}" in
    redis://*|unix://*|redis+sentinel://*) ;;
    *) skip "needs a Redis META_URL (run-tests.sh --meta redis)" ;;
  esac
  need_cmd redis-server redis-cli
}

rd_cli() {   # rd_cli PORT ARGS...
  local port=$1
  shift
  redis-cli -h 127.0.0.1 -p "$port" "$@"
}

rd_ping() {
  rd_cli "$1" PING 2>/dev/null | grep -q PONG
}

# A loopback port nobody listens on (ss from iproute2 when present, else a PING).
rd_free_port() {
  local p i
  for i in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    if command -v ss >/dev/null 2>&1; then
      ss -Htln "sport = :$p" 2>/dev/null | grep -q . && continue
    fi
    rd_ping "$p" && continue
    echo "$p"
    return 0
  done
  return 1
}

rd_launch() {   # rd_launch PORT: start the server from its config, wait for PING
  local port=$1 dir=$WORK/redis-$1
  redis-server "$dir/redis.conf" || fail "redis-server on port $port did not start"
  wait_for 10 rd_ping "$port" || fail "redis-server on port $port does not answer; see $dir/redis.log"
  # LOADING: an AOF/RDB being read answers PING but not commands; wait for it
  wait_for 30 sh -c "redis-cli -h 127.0.0.1 -p $port INFO persistence | grep -q '^loading:0'" \
    || fail "redis-server on port $port still loading after 30 s"
}

rd_start() {   # rd_start VAR [CONFIG LINE]... (locals prefixed: VAR may be a caller's local)
  local _rd_var=$1 _rd_port _rd_dir _rd_line
  shift
  _rd_port=$(rd_free_port) || fail "no free port for a redis-server"
  _rd_dir=$WORK/redis-$_rd_port
  mkdir -p "$_rd_dir" || fail "mkdir $_rd_dir"
  {
    echo "# dedicated server of mount case $MT_CASE"
    echo "bind 127.0.0.1"
    echo "port $_rd_port"
    echo "protected-mode yes"
    echo "daemonize yes"
    echo "pidfile $_rd_dir/redis.pid"
    echo "logfile $_rd_dir/redis.log"
    echo "dir $_rd_dir"
    echo "save \"\""
    echo "appendonly no"
    echo "maxmemory 256mb"
    echo "maxmemory-policy noeviction"
    for _rd_line in "$@"; do echo "$_rd_line"; done   # later lines win
  } > "$_rd_dir/redis.conf"
  RD_PORTS="$RD_PORTS $_rd_port"
  rd_launch "$_rd_port"
  note "redis-server on 127.0.0.1:$_rd_port ($*)"
  printf -v "$_rd_var" '%s' "$_rd_port"
}

rd_restart() {
  rd_launch "$1"
}

rd_stop() {   # rd_stop PORT [save]
  local port=$1 how=NOSAVE
  [ "${2:-}" = save ] && how=SAVE
  rd_ping "$port" || return 0
  rd_cli "$port" SHUTDOWN "$how" >/dev/null 2>&1
  wait_for 20 sh -c "! redis-cli -h 127.0.0.1 -p $port PING >/dev/null 2>&1" \
    || fail "redis-server on port $port did not stop"
}

rd_format() {   # rd_format VAR PORT
  local _rf_url="redis://127.0.0.1:$2/0?ns=$VOL"
  mkdir -p "$WORK/objects2" || fail "mkdir $WORK/objects2"
  "$KEGFS" format --storage file --bucket "$WORK/objects2" "$_rf_url" "$VOL" \
    > "$WORK/format2.log" 2>&1 \
    || fail "kegfs format on the dedicated server: $(cat "$WORK/format2.log")"
  printf -v "$1" '%s' "$_rf_url"
}

m2_pid() {
  pgrep -f "kegfs.* mount .*$1\$" 2>/dev/null | head -1
}

m2_is_mounted() {
  grep -qs " $1 " /proc/self/mountinfo
}

m2_mount() {   # m2_mount DIR LOG URL [EXTRA ARGS]
  local dir=$1 log=$2 url=$3
  shift 3
  mkdir -p "$dir" || fail "mkdir $dir"
  M2_DIRS="$M2_DIRS $dir"
  "$KEGFS" mount -d --log-file "$log" "$@" "$url" "$dir" >"$log.out" 2>&1 \
    || fail "kegfs mount $* at $dir failed: $(tail -3 "$log.out") $(tail -3 "$log" 2>/dev/null)"
  m2_is_mounted "$dir" || fail "$dir is not mounted after kegfs mount -d returned"
}

m2_umount() {   # m2_umount DIR
  local dir=$1 pid
  m2_is_mounted "$dir" || return 0
  pid=$(m2_pid "$dir")
  timeout 60 "$KEGFS" umount "$dir" >/dev/null 2>&1 \
    || { fusermount3 -u -z "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null; }
  if [ -n "$pid" ] && ! wait_for 30 sh -c "! kill -0 $pid 2>/dev/null"; then
    kill -9 "$pid" 2>/dev/null
  fi
  return 0
}

rd_cleanup() {
  local d p
  for d in $M2_DIRS; do m2_umount "$d"; done
  for p in $RD_PORTS; do
    rd_cli "$p" SHUTDOWN NOSAVE >/dev/null 2>&1
  done
  return 0
}
trap rd_cleanup EXIT

# ms since the epoch
now_ms() {
  echo $(( $(date +%s%N) / 1000000 ))
}
