#!/usr/bin/env bash
# upgrade_lost_data.sh -- an in-place upgrade never turns data it could not commit into a
# success, and never forgets a descriptor that lost data in an earlier worker crash.
#   1. A Python helper writes 1 MiB to "a" and to "a2" (buffered, not committed) and
#      keeps them open.  The object directory is then made read-only (a read-only bind
#      mount over it), so the handing-over worker cannot store that data (it commits the
#      two files in parallel), and `kegfs upgrade` runs.  Once the store is writable
#      again (the bind mount remounted read-write), the helper's next write to "a", its
#      fsync and its close fail with EIO, and so do "a2"'s fsync and close; both read as
#      what was committed (nothing), never as zeros or a success.
#   2. The helper writes 1 MiB to "b" and keeps it open; the worker is killed (SIGKILL),
#      and the helper does not touch "b" until `kegfs upgrade` has run: its write, fsync
#      and close then fail with EIO too (the new binary's worker knows the handle lost data).
#   3. A descriptor committed with fsync before the upgrade ("c") keeps working without an
#      error across both, and the supervisor's log names the handles whose data was lost.
# needs: file
# timeout: 120
# allow-log: was killed by signal 9
# allow-log: died with uncommitted data in 1 open file handle
# allow-log: handed over with uncommitted data in [12] open file handles?
# allow-log: Read-only file system
# allow-log: handed over with the data of 2 open files not committed
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_objdir
need_cmd python3 mount umount

sup=$(mounter_pid)
[ -n "$sup" ] || fail "no mounter pid"
[ -n "$(pgrep -P "$sup" | head -1)" ] || skip "no worker under the supervisor $sup (not root? --no-supervisor?)"
cp "$KEGFS" "$WORK/kegfs-new" && chmod 755 "$WORK/kegfs-new" || fail "copy kegfs"

cleanup() {
  [ -n "${hpid:-}" ] && kill "$hpid" 2> /dev/null
  if grep -qs " $OBJDIR " /proc/self/mountinfo; then     # the mounter's files are on it
    is_mounted && "$KEGFS" umount "$MNT" > /dev/null 2>&1
    umount "$OBJDIR" 2> /dev/null || umount -l "$OBJDIR"
  fi
}
trap cleanup EXIT

# The helper runs steps on request: it waits for "$WORK/go.N" and writes "$WORK/done.N".
cat > "$WORK/helper.py" <<'EOF'
import errno, os, sys, time
mnt, work = sys.argv[1], sys.argv[2]
MiB = 1 << 20
data = os.urandom(MiB)
fails = 0
def bad(msg):
    global fails
    fails += 1
    print("FAIL " + msg, flush=True)
def step(n):
    while not os.path.exists(os.path.join(work, "go.%d" % n)):
        time.sleep(0.05)
def done(n):
    open(os.path.join(work, "done.%d" % n), "w").close()
def expect_eio(what, fn, *args):
    try:
        fn(*args)
    except OSError as e:
        if e.errno == errno.EIO:
            print("ok %s: EIO" % what, flush=True)
        else:
            bad("%s: %s, expected EIO" % (what, e))
        return
    bad("%s succeeded, expected EIO" % what)
def expect_ok(what, fn, *args):
    try:
        fn(*args)
        print("ok %s" % what, flush=True)
    except OSError as e:
        bad("%s: %s" % (what, e))
def zero_free(name):          # the file holds only bytes that were written, or nothing
    got = open(os.path.join(mnt, name), "rb").read()
    if got and got != data[:len(got)] and got != (data + data)[:len(got)]:
        bad("%s: %d bytes that differ from what was written" % (name, len(got)))
    print("%s reads as %d bytes" % (name, len(got)), flush=True)

c = os.open(os.path.join(mnt, "c"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.write(c, data)
os.fsync(c)
a = os.open(os.path.join(mnt, "a"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.write(a, data)                     # buffered in the worker
a2 = os.open(os.path.join(mnt, "a2"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.write(a2, data)
done(1)
step(2)                               # the upgrade ran while the store refused writes
expect_eio("write to a", os.write, a, data)
expect_eio("fsync of a", os.fsync, a)
expect_eio("close of a", os.close, a)
expect_eio("fsync of a2", os.fsync, a2)
expect_eio("close of a2", os.close, a2)
expect_ok("write + fsync of c", lambda: (os.write(c, data), os.fsync(c)))
zero_free("a")
zero_free("a2")
b = os.open(os.path.join(mnt, "b"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.write(b, data)                     # buffered; the worker is killed next
done(2)
step(3)                               # crash, then an upgrade, before b is used again
expect_eio("write to b", os.write, b, data)
expect_eio("fsync of b", os.fsync, b)
expect_eio("close of b", os.close, b)
expect_ok("write + fsync + close of c", lambda: (os.write(c, data), os.fsync(c), os.close(c)))
zero_free("b")
if os.path.getsize(os.path.join(mnt, "c")) != 3 * MiB:
    bad("c has %d bytes, expected %d" % (os.path.getsize(os.path.join(mnt, "c")), 3 * MiB))
print("fails %d" % fails, flush=True)
done(3)
EOF

python3 "$WORK/helper.py" "$MNT" "$WORK" > "$WORK/helper.out" 2>&1 &
hpid=$!
wait_for 30 test -e "$WORK/done.1" || fail "the helper did not start: $(cat "$WORK/helper.out")"

# 1. the handing-over worker cannot store the buffered MiB
mount --bind "$OBJDIR" "$OBJDIR" && mount -o remount,bind,ro "$OBJDIR" \
  || skip "cannot make $OBJDIR read-only with a bind mount"
touch "$OBJDIR/probe" 2> /dev/null && fail "the read-only bind mount lets writes through"
out=$("$KEGFS" upgrade --binary "$WORK/kegfs-new" "$MNT" 2>&1) || fail "upgrade: $out"
note "$out"
mount -o remount,bind,rw "$OBJDIR" || fail "make $OBJDIR writable again"
touch "$OBJDIR/probe" && rm -f "$OBJDIR/probe" || fail "$OBJDIR is still read-only"
grep -q 'handed over with uncommitted data in 2 open file handles' "$MT_LOG" \
  || fail "no ERROR line for the data the handover lost: $(grep -iE 'commit|handed' "$MT_LOG" | tail -5)"
touch "$WORK/go.2"
wait_for 30 test -e "$WORK/done.2" || fail "the helper is stuck after the upgrade: $(cat "$WORK/helper.out")"

# 2. a crash loses b's MiB; the upgrade that follows must not forget it
w=$(pgrep -P "$sup" | head -1)
kill -9 "$w" || fail "kill the worker"
wait_for 20 grep -q 'died with uncommitted data in 1 open file handle' "$MT_LOG" \
  || fail "no ERROR line for the crash"
wait_for 20 sh -c "pgrep -P $sup | grep -qv '^$w\$'" || fail "no new worker after the crash"
out=$("$KEGFS" upgrade "$MNT" 2>&1) || fail "second upgrade: $out"
note "$out"
touch "$WORK/go.3"
wait_for 30 test -e "$WORK/done.3" || fail "the helper is stuck: $(cat "$WORK/helper.out")"
wait "$hpid"
hpid=
cat "$WORK/helper.out" >&2
grep -q '^fails 0$' "$WORK/helper.out" || fail "$(grep FAIL "$WORK/helper.out" | head -5)"
mt_umount                   # the new workers opened the store through the bind mount
umount "$OBJDIR" || fail "umount the bind mount"
exit 0
