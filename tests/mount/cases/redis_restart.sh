#!/usr/bin/env bash
# redis_restart.sh -- the Redis server of a mounted volume goes away and comes back.
# A dedicated redis-server with AOF (appendonly yes, appendfsync always) serves a volume
# mounted at $WORK/mnt2 (kernel caches off, so every op reaches Redis).  Then:
#   1. SHUTDOWN SAVE; while it is down, a create and a stat fail (EIO) within a bounded
#      time (the engine retries for 10 s) -- they never hang;
#   2. the server starts again on the same port: the mount works again without a remount
#      (create, write, read, ls) and every file written before is intact;
#   3. down again, an op started during the outage that the server answers within the
#      retry window succeeds (it blocks, then completes);
#   4. a process holding a flock and a byte-range lock is killed while Redis is down: its
#      unlocks fail after the retry window, and the locks are free again within seconds of
#      the server's return (the mounter tries the unlocks again), not held until unmount;
#   5. after unmount + mount, everything is still there.
# timeout: 300
# needs: redis
# needs: file
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"
need_redis
OUTAGE_LIMIT=${KEG_TEST_OUTAGE_LIMIT:-30}   # seconds an op may take while Redis is down

rd_start PORT "appendonly yes" "appendfsync always"
rd_format META2 "$PORT"
M=$WORK/mnt2
LOG2=$WORK/mounter2.log
m2_mount "$M" "$LOG2" "$META2" --attr-cache 0 --entry-cache 0 --dir-entry-cache 0

manifest() {
  (cd "$M/t" && find . -printf '%p %y %m %s %n %l\n' | LC_ALL=C sort
   find . -type f -exec sha256sum {} + | LC_ALL=C sort -k2)
}
mkdir -p "$M/t/a/b" || fail "mkdir"
for n in 0 1 4096 100000 $((2 * 1024 * 1024 + 5)); do
  head -c "$n" /dev/urandom > "$M/t/a/f$n" || fail "write f$n"
done
printf 'hello' > "$M/t/a/b/hello"
ln -s ../a/b/hello "$M/t/link"
ln "$M/t/a/b/hello" "$M/t/hard"
for f in "$M"/t/a/f* "$M/t/a/b/hello"; do
  dd if=/dev/null of="$f" conv=notrunc,fsync status=none 2>/dev/null   # fsync each file
done
manifest > "$WORK/before" || fail "manifest"
keys=$(rd_cli "$PORT" DBSIZE)
note "$keys keys before the restart"

#--- 1. down: ops fail with an error in bounded time --------------------------------
rd_stop "$PORT" save
timed() {   # timed OUTVAR CMD...: run CMD under a hard limit; OUTVAR="rc ms stderr"
  local var=$1 t0 rc err
  shift
  t0=$(now_ms)
  err=$(timeout -k 5 120 "$@" 2>&1 >/dev/null)
  rc=$?
  printf -v "$var" '%s %s %s' "$rc" "$(( $(now_ms) - t0 ))" "$err"
}
timed r touch "$M/t/during-outage"
read -r rc ms msg <<< "$r"
note "create while Redis is down: rc $rc after $ms ms: $msg"
[ "$rc" = 124 ] || [ "$rc" = 137 ] && fail "create hung for 120 s while Redis was down"
[ "$rc" != 0 ] || fail "create succeeded while Redis was down"
[ "$ms" -le $((OUTAGE_LIMIT * 1000)) ] || fail "create took $ms ms to fail (limit $OUTAGE_LIMIT s)"
echo "$msg" | grep -qiE 'input/output error|transport endpoint|no such device' \
  || note "unexpected error text: $msg"
timed r stat "$M/t/a/f0"
read -r rc ms msg <<< "$r"
note "stat while Redis is down: rc $rc after $ms ms: $msg"
[ "$rc" = 124 ] || [ "$rc" = 137 ] && fail "stat hung for 120 s while Redis was down"
[ "$ms" -le $((OUTAGE_LIMIT * 1000)) ] || fail "stat took $ms ms (limit $OUTAGE_LIMIT s)"
m2_is_mounted "$M" || fail "the mount went away during the outage"
[ -n "$(m2_pid "$M")" ] || fail "the mounter died during the outage"

#--- 2. back: the same mount works again ---------------------------------------------
rd_restart "$PORT"
assert_eq "$(rd_cli "$PORT" DBSIZE)" "$keys" "keys after the restart (AOF)"
t0=$(now_ms)
wait_for 20 sh -c "printf again > '$M/t/after-restart'" || fail "create after the restart"
note "first create after the restart took $(( $(now_ms) - t0 )) ms"
assert_eq "$(cat "$M/t/after-restart")" again "read after the restart"
[ -e "$M/t/during-outage" ] && fail "the create that failed during the outage exists"
rm "$M/t/after-restart" || fail "rm after the restart"
manifest > "$WORK/after" || fail "manifest after the restart"
if ! cmp -s "$WORK/before" "$WORK/after"; then
  diff "$WORK/before" "$WORK/after" | head -20
  fail "tree differs after the Redis restart"
fi
head -c 300000 /dev/urandom > "$WORK/new" && cp "$WORK/new" "$M/t/new" || fail "write after restart"
cmp -s "$WORK/new" "$M/t/new" || fail "new file reads back different"
note "mount works again, tree intact"

#--- 3. a short outage inside the retry window: the op blocks, then succeeds ------------
rd_stop "$PORT" save
t0=$(now_ms)
( printf 'late' > "$M/t/blocked-create" ) 2> "$WORK/blocked.err" &
op=$!
sleep 3
kill -0 "$op" 2>/dev/null || note "the op did not wait for Redis: $(cat "$WORK/blocked.err")"
rd_restart "$PORT"
if wait "$op"; then
  note "create issued during a 3 s outage completed after $(( $(now_ms) - t0 )) ms"
  assert_eq "$(cat "$M/t/blocked-create")" late "content of the create issued during the outage"
else
  fail "create issued during a 3 s outage failed: $(cat "$WORK/blocked.err")"
fi

#--- 4. locks released while Redis is down are released when it is back --------------
: > "$M/t/lockfile" || fail "create lockfile"
start_locker "$M/t/lockfile"
rd_stop "$PORT" save
kill "$LOCKER"
wait_for $OUTAGE_LIMIT grep -q 'releasing the flock of inode .* failed' "$LOG2" \
  || fail "no failed flock release logged during the outage"
rd_restart "$PORT"
t0=$(now_ms)
wait_for 15 locks_free "$M/t/lockfile" || fail "the locks of the process killed during the outage are still held"
note "locks of the process killed during the outage free $(( $(now_ms) - t0 )) ms after the restart"
grep -q 'an earlier try had failed' "$LOG2" || fail "no retried unlock in the mounter log"

#--- 5. unmount, mount again: all there ----------------------------------------------
manifest > "$WORK/before2"
m2_umount "$M"
m2_is_mounted "$M" && fail "umount"
m2_mount "$M" "$LOG2" "$META2"
manifest > "$WORK/after2"
cmp -s "$WORK/before2" "$WORK/after2" || fail "tree differs after remount"
if grep -E ' (ERROR|FATAL) ' "$LOG2" > "$WORK/errors2"; then
  note "mounter log ERROR lines (expected during the outage):"
  head -5 "$WORK/errors2" | sed 's/^/#   /'
fi
m2_umount "$M"
rd_stop "$PORT"
exit 0
