#!/usr/bin/env bash
# locks_across_workers.sh -- a process's locks and its unlinked-but-open file survive an
# in-place upgrade and a crash of the FUSE worker: the new worker takes over the mount's
# metadata session instead of registering a new one.  A holder takes a flock and a
# byte-range lock on lk, an OFD lock on ofd (through a description that never used
# flock) and keeps u open after unlinking it; after `kegfs upgrade` and after kill -9 of
# the worker, the three locks are still held against other processes and u still reads
# back through the holder's descriptor.  Two processes that wait for the holder's flock
# and byte-range lock meanwhile hold up neither the upgrade nor the crash recovery, and
# get the locks once the holder exits.  Then the three locks are free
# again (the OFD lock's owner was noted in the record that the new workers inherit); u's
# inode stays pending in the session (another mounter may hold it too) and is purged
# when the mount ends (the used inodes of statfs go back).
# timeout: 120
# allow-log: was killed by signal 9
# allow-log: died with uncommitted data in [0-9]+ open file handle
. "$(dirname "$0")/../lib.sh"
need_kegfs
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
sup=$(mounter_pid)
[ -n "$sup" ] || fail "no mounter pid"
worker() { pgrep -P "$sup" | head -1; }
w1=$(worker)
[ -n "$w1" ] || skip "no worker under the supervisor $sup (not root? --no-supervisor?)"

inodes_used() { df --output=iused "$MNT" | tail -1 | tr -d ' '; }
: > "$MNT/lk" || fail "create lk"
: > "$MNT/ofd" || fail "create ofd"
used0=$(inodes_used)
echo "contents of u" > "$MNT/u" || fail "create u"
"$PY" - "$MNT" "$WORK" > "$WORK/holder.out" 2>&1 <<'PY' &
import fcntl, os, struct, sys, time
d, w = sys.argv[1], sys.argv[2]
f = open(d + "/lk", "r+")
fcntl.flock(f, fcntl.LOCK_EX)
fcntl.lockf(f, fcntl.LOCK_EX, 100, 0)
o = open(d + "/ofd", "r+")
fcntl.fcntl(o, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 100, 0))
u = open(d + "/u", "r")
os.unlink(d + "/u")
print("ready", flush=True)
n = 0
while True:
    n += 1
    while not os.path.exists("%s/read%d" % (w, n)):
        time.sleep(0.05)
    u.seek(0)
    try:
        print("read%d %s" % (n, u.read().strip()), flush=True)
    except OSError as e:
        print("read%d error %s" % (n, e), flush=True)
PY
holder=$!
wait_for 20 grep -q ready "$WORK/holder.out" || fail "holder: $(cat "$WORK/holder.out")"

flock_free() { flock -n "$MNT/lk" true; }
posix_free() {
  "$PY" - "$MNT/lk" <<'PY'
import fcntl, sys
f = open(sys.argv[1], "r+")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
PY
}
ofd_free() {
  "$PY" - "$MNT/ofd" <<'PY'
import fcntl, struct, sys
f = open(sys.argv[1], "r+")
fcntl.fcntl(f, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 100, 0))
PY
}
held() {   # held WHEN: the locks held against this shell, u reads back through the holder
  local n=$2
  flock_free && fail "$1: the flock of the holder is gone"
  posix_free 2>/dev/null && fail "$1: the byte-range lock of the holder is gone"
  ofd_free 2>/dev/null && fail "$1: the OFD lock of the holder is gone"
  touch "$WORK/read$n"
  wait_for 10 grep -q "^read$n " "$WORK/holder.out" || fail "$1: the holder did not read u"
  grep -q "^read$n contents of u$" "$WORK/holder.out" \
    || fail "$1: the unlinked open file reads: $(grep "^read$n " "$WORK/holder.out")"
  note "$1: locks held, unlinked open file reads back"
}
held "before" 1

# Two processes wait for the holder's locks (flock, and F_SETLKW on its bytes) across the
# upgrade and the crash: neither holds the handover up (the new worker gets their requests
# again), and each gets its lock once the holder exits, then gives it back.
for kind in flock posix; do
  "$PY" - "$MNT/lk" "$kind" > "$WORK/waiter.$kind" 2>&1 <<'PY' &
import fcntl, sys, time
f = open(sys.argv[1], "r+")
print("waiting", flush=True)
t = time.time()
if sys.argv[2] == "flock":
    fcntl.flock(f, fcntl.LOCK_EX)
else:
    fcntl.lockf(f, fcntl.LOCK_EX, 100, 0)
print("got after %.1f s" % (time.time() - t), flush=True)
PY
done
wait_for 10 grep -q waiting "$WORK/waiter.flock" || fail "the flock waiter did not start"
wait_for 10 grep -q waiting "$WORK/waiter.posix" || fail "the F_SETLKW waiter did not start"
sleep 0.5                               # both are in their blocking request now

t0=$(date +%s%N)
out=$(timeout 60 "$KEGFS" upgrade "$MNT" 2>&1) || fail "upgrade with lock waiters: $out"
note "$out (took $(( ($(date +%s%N) - t0) / 1000000 )) ms with two processes waiting for locks)"
ls "$MNT" > /dev/null || fail "the mount does not answer after the upgrade"
held "after an in-place upgrade" 2
grep -q got "$WORK/waiter.flock" "$WORK/waiter.posix" && fail "a waiter got a held lock: $(cat "$WORK"/waiter.*)"

w2=$(worker)
kill -9 "$w2" || fail "kill worker $w2"
new_worker() { local w; w=$(worker); [ -n "$w" ] && [ "$w" != "$w2" ]; }
wait_for 10 new_worker || fail "no new worker after the crash"
held "after a worker crash" 3
grep -q 'took over session' "$MT_LOG" || fail "no session taken over in the log"

kill "$holder"
wait "$holder" 2>/dev/null
wait_for 10 grep -q got "$WORK/waiter.flock" || fail "the flock waiter: $(cat "$WORK/waiter.flock")"
wait_for 10 grep -q got "$WORK/waiter.posix" || fail "the F_SETLKW waiter: $(cat "$WORK/waiter.posix")"
note "waiters: flock $(tail -1 "$WORK/waiter.flock"), F_SETLKW $(tail -1 "$WORK/waiter.posix")"
wait_for 10 flock_free || fail "the flock is still held after the holder exited"
wait_for 10 posix_free || fail "the byte-range lock is still held after the holder exited"
wait_for 10 ofd_free 2>/dev/null || fail "the OFD lock is still held after the holder exited"
note "locks free after the holder exited"
mt_umount
mt_mount
back() { [ "$(inodes_used)" -le "$used0" ]; }
wait_for 10 back || fail "u's inode was not purged: $(inodes_used) inodes used, $used0 before u"
note "u purged when the mount ended"
exit 0
