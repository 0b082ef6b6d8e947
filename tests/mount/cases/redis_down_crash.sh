#!/usr/bin/env bash
# redis_down_crash.sh -- the FUSE worker crashes while the Redis server is down.  The
# mount must not die with it: the worker that replaces it cannot open the volume until
# Redis is back, so the supervisor starts another one after a pause, again and again,
# while the kernel keeps the requests queued.  A dedicated redis-server (AOF) serves a
# volume at $WORK/mnt2; a holder process keeps a flock on lk; Redis is stopped and the
# worker killed (SIGKILL); a reader started during the outage waits.  Once Redis is
# back: the new worker takes over the session (the holder's flock is still held), the
# reader gets the file's bytes, the mount works; when the holder exits its flock is free.
# Then a second holder exits while Redis is down, so its unlocks fail and are kept to be
# tried again, and the worker is killed before Redis returns: the next worker does them.
# timeout: 180
# needs: redis
# needs: file
# allow-log: was killed by signal 9
# allow-log: could not open the volume; starting another
# allow-log: cannot open volume
# allow-log: (Connection refused|cannot connect|unreachable|Input/output error)
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"
need_redis

rd_start PORT "appendonly yes" "appendfsync always"
rd_format META2 "$PORT"
M=$WORK/mnt2
LOG2=$WORK/mounter2.log
m2_mount "$M" "$LOG2" "$META2"
sup=$(m2_pid "$M")
w1=$(pgrep -P "$sup" | head -1)
[ -n "$w1" ] || skip "no worker under the supervisor $sup (not root? --no-supervisor?)"

head -c 300000 /dev/urandom > "$WORK/a"
cp "$WORK/a" "$M/a" && sync "$M/a" || fail "write a"
: > "$M/lk" || fail "create lk"
start_locker "$M/lk"
holder=$LOCKER
flock_free() { flock -n "$M/lk" true; }

rd_stop "$PORT" save
t0=$(now_ms)
kill -9 "$w1" || fail "kill the worker"
# a reader during the outage: its requests wait for a worker that can serve them
( cat "$M/a" > "$WORK/a.read" 2> "$WORK/a.err"; echo "rc=$? at $(now_ms)" > "$WORK/a.done" ) &
wait_for 40 grep -q 'could not open the volume; starting another' "$LOG2" \
  || fail "no new worker attempt after the failed one: $(grep -E 'ERROR|WARN' "$LOG2" | tail -4)"
grep -qs " $M " /proc/self/mountinfo || fail "the mount went away while Redis was down"
[ -e "$WORK/a.done" ] && fail "the reader finished during the outage: $(cat "$WORK/a.done" "$WORK/a.err")"
note "a worker failed to open the volume after $(( $(now_ms) - t0 )) ms; the mount is still there"

rd_restart "$PORT"
t1=$(now_ms)
wait_for 60 test -e "$WORK/a.done" || fail "the reader did not finish after Redis came back"
note "reader done $(( $(sed 's/.* at //' "$WORK/a.done") - t1 )) ms after Redis came back: $(cat "$WORK/a.done" "$WORK/a.err")"
grep -q '^rc=0' "$WORK/a.done" || fail "the reader failed: $(cat "$WORK/a.done" "$WORK/a.err")"
cmp "$WORK/a" "$WORK/a.read" || fail "the reader got other bytes"
grep -q 'took over session' "$LOG2" || fail "the new worker did not take the session over: $(grep -E 'session' "$LOG2" | tail -3)"
flock_free && fail "the holder's flock was lost across the crash"
echo more > "$M/b" && [ "$(cat "$M/b")" = more ] || fail "the mount does not work after recovery"
kill "$holder"
wait "$holder" 2> /dev/null
wait_for 10 locks_free "$M/lk" || fail "the locks are still held after the holder exited"

# 2. A release that fails while Redis is down, then a crash before it could be tried again:
#    the next worker does it (the unlocks still to do are in the record that outlives it).
: > "$M/lk2" || fail "create lk2"
python3 -c 'import fcntl, sys, time
f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); print("locked", flush=True); time.sleep(600)' \
  "$M/lk2" > "$WORK/holder2.out" 2>&1 &
h2=$!            # a flock only: its release fails after one retry window, at the RELEASE
wait_for 20 grep -q locked "$WORK/holder2.out" || fail "holder2: $(cat "$WORK/holder2.out")"
rd_stop "$PORT" save
kill "$h2"
wait "$h2" 2> /dev/null
wait_for 40 grep -q 'releasing the flock of inode .* failed' "$LOG2" \
  || fail "the flock's release did not fail while Redis was down"
w=$(pgrep -P "$sup" | head -1)
n0=$(grep -c 'could not open the volume' "$LOG2")
kill -9 "$w" || fail "kill the worker"
wait_for 30 sh -c "[ \$(grep -c 'could not open the volume' '$LOG2') -gt $n0 ]" \
  || fail "no failed worker start while Redis was down"
rd_restart "$PORT"
wait_for 30 grep -q 'lock releases* of the previous worker still to do' "$LOG2" \
  || fail "the new worker did not take the failed release over: $(grep -E 'release|session' "$LOG2" | tail -4)"
wait_for 10 flock -n "$M/lk2" true || fail "lk2's flock is still held after the new worker started"
note "the release the crashed worker could not do was done by the next one"
m2_umount "$M"
exit 0
