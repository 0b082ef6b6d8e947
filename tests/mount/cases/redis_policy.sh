#!/usr/bin/env bash
# redis_policy.sh -- a Redis server whose maxmemory-policy is not noeviction silently
# deletes keys when full, which for KegFS is corruption.  docs/redis.md: the engine checks
# the policy at open (CONFIG GET, or INFO memory where CONFIG is disabled) and logs a loud
# "WARNING: redis ... has maxmemory-policy '...'"; the mount goes ahead.
# Checked on dedicated servers: allkeys-lru (CONFIG available), volatile-lru with CONFIG
# renamed away (the INFO fallback), and noeviction (no warning).  The warning must reach
# the user: the terminal of `kegfs mount -d` or the mounter's log file.
# timeout: 120
# needs: redis
# needs: file
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"
need_redis

# check_policy POLICY WANT_WARNING [CONFIG LINE]...
check_policy() {
  local policy=$1 want=$2 port meta dir log out
  shift 2
  rd_start port "maxmemory-policy $policy" "$@"
  meta="redis://127.0.0.1:$port/0?ns=$VOL"
  dir=$WORK/mnt-$policy
  log=$WORK/mounter-$policy.log
  mkdir -p "$WORK/objects-$policy"
  "$KEGFS" format --storage file --bucket "$WORK/objects-$policy" "$meta" "$VOL" \
    > "$WORK/format-$policy.log" 2>&1 || fail "kegfs format ($policy): $(cat "$WORK/format-$policy.log")"
  m2_mount "$dir" "$log" "$meta"
  printf 'x' > "$dir/file" && assert_eq "$(cat "$dir/file")" x "mount works ($policy)"
  m2_umount "$dir"
  out=$(cat "$log.out" "$log" 2>/dev/null | grep -E "maxmemory-policy")
  if [ "$want" = yes ]; then
    echo "$out" | grep -q "WARNING.*maxmemory-policy '$policy'" \
      || fail "no 'WARNING ... maxmemory-policy '$policy'' from kegfs mount (terminal: $(cat "$log.out"); log: $(grep -E 'WARN|ERR' "$log" | head -3))"
    echo "$out" | grep -q noeviction || fail "the warning does not say that noeviction is required: $out"
    note "$policy: $(echo "$out" | head -1 | cut -c1-200)"
    if grep -q "maxmemory-policy" "$log.out"; then
      note "$policy: the warning is shown on the terminal of kegfs mount -d"
    else
      note "$policy: the warning is only in the log file, not on the terminal of kegfs mount -d"
    fi
    grep -q "maxmemory-policy" "$WORK/format-$policy.log" \
      && note "$policy: kegfs format warns too" || note "$policy: kegfs format does not warn"
  else
    [ -z "$out" ] || fail "warning with policy $policy: $out"
  fi
  rd_stop "$port"
}

check_policy allkeys-lru yes
check_policy volatile-lru yes 'rename-command CONFIG ""'
check_policy noeviction no
exit 0
