#!/usr/bin/env bash
# redis_lost.sh -- the Redis server of a mounted volume restarts WITHOUT persistence (no
# AOF, no RDB): the volume's keys are gone.  The mount must say so and fail with EIO, not
# pretend every file vanished (ENOENT):
#   1. stat of the mount point, a listing, a read and a create fail with EIO;
#   2. the mounter logs one ERROR line naming the loss ("metadata is gone");
#   3. `kegfs status` exits 1 and says the metadata is gone while a mounter serves it;
#   4. the mount can be unmounted.
# timeout: 120
# needs: redis
# needs: file
# allow-log: metadata is gone|session heartbeat
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"
need_redis

rd_start PORT          # redis_lib's default: save "", appendonly no
rd_format META2 "$PORT"
M=$WORK/mnt2
LOG2=$WORK/mounter2.log
m2_mount "$M" "$LOG2" "$META2" --attr-cache 0 --entry-cache 0 --dir-entry-cache 0 --heartbeat 1 \
  --session-timeout 5
mkdir "$M/d" && printf 'hello' > "$M/d/f" || fail "write before the restart"
"$KEGFS" status "$META2" > "$WORK/status1" 2>&1 || fail "status before: $(cat "$WORK/status1")"

# restart without persistence: everything is gone
rd_stop "$PORT"
rd_restart "$PORT"
assert_eq "$(rd_cli "$PORT" DBSIZE)" 0 "keys after a restart without persistence"

# 1. EIO, never ENOENT
expect_errno() {   # expect_errno WHAT CMD...
  local what=$1 out
  shift
  out=$(timeout 60 "$@" 2>&1) && fail "$what succeeded on a lost volume"
  echo "$out" | grep -q 'No such file' && fail "$what: ENOENT on a lost volume: $out"
  echo "$out" | grep -q 'Input/output error' || fail "$what: not EIO: $out"
}
expect_errno "stat of the mount point" stat "$M"
expect_errno "ls" ls "$M/d"
expect_errno "read" cat "$M/d/f"
expect_errno "create" touch "$M/new"

# 2. one ERROR line that names the loss
wait_for 10 grep -q 'metadata is gone' "$LOG2" || fail "no 'metadata is gone' line: $(tail -5 "$LOG2")"
n=$(grep -c 'ERROR .*metadata is gone' "$LOG2")
[ "$n" = 1 ] || fail "$n 'metadata is gone' ERROR lines (want 1)"
grep -q 'without persistence' "$LOG2" || fail "the ERROR line does not name the likely cause"

# 3. status says so
out=$("$KEGFS" status "$META2" 2>&1) && fail "status succeeded on a lost volume: $out"
echo "$out" | grep -q "metadata is GONE" || fail "status message: $out"
echo "$out" | grep -qF "$M" || fail "status does not name the mount: $out"

# 4. unmount works
m2_umount "$M"
m2_is_mounted "$M" && fail "still mounted"
exit 0
