#!/usr/bin/env bash
# session_takeover_busy_long.sh -- a worker that replaces a crashed one keeps trying to take
# the metadata session over while the engine refuses it for a while, instead of registering
# a new session (which would release the locks processes hold through the mount and purge
# its unlinked open files while the old session still exists).  On SQLite: a holder keeps
# a flock on lk; another process holds the database's write lock (BEGIN EXCLUSIVE) for
# 28 s, longer than SQLite's busy retries (3 x 5 s); the worker is killed meanwhile.  The
# new worker logs that it tries again, takes the session over once the database is free,
# the flock is still held, and the mount works.
# needs: sqlite
# timeout: 180
# allow-log: was killed by signal 9
# allow-log: stays locked by another process
# allow-log: (heartbeat|session).*(Input/output error|locked)
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd python3 flock
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
sup=$(mounter_pid)
[ -n "$sup" ] || fail "no mounter pid"
w1=$(pgrep -P "$sup" | head -1)
[ -n "$w1" ] || skip "no worker under the supervisor $sup (not root? --no-supervisor?)"
db=${META#sqlite3://}
[ -f "$db" ] || fail "no database at $db"

: > "$MNT/lk" || fail "create lk"
start_locker "$MNT/lk"
holder=$LOCKER
flock_free() { flock -n "$MNT/lk" true; }

"$PY" - "$db" > "$WORK/dblock.out" 2>&1 <<'PY' &
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("BEGIN EXCLUSIVE")
print("db locked", flush=True)
time.sleep(28)
c.execute("COMMIT")
print("db free", flush=True)
PY
dbl=$!
wait_for 30 grep -q 'db locked' "$WORK/dblock.out" || fail "cannot lock the database: $(cat "$WORK/dblock.out")"
kill -9 "$w1" || fail "kill the worker"
wait_for 40 grep -q 'cannot take over session .* yet' "$MT_LOG" \
  || fail "the new worker did not report that it tries again: $(grep -E 'session' "$MT_LOG" | tail -3)"
wait "$dbl"
wait_for 30 grep -q 'took over session' "$MT_LOG" \
  || fail "the session was not taken over: $(grep -E 'session' "$MT_LOG" | tail -3)"
grep -q 'registering a new session' "$MT_LOG" && fail "a new session was registered"
ls "$MNT" > /dev/null || fail "the mount does not answer"
flock_free && fail "the holder's flock was lost"
kill "$holder"
wait "$holder" 2> /dev/null
wait_for 10 locks_free "$MNT/lk" || fail "the locks are still held after the holder exited"
exit 0
