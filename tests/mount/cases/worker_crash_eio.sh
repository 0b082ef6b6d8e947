#!/usr/bin/env bash
# worker_crash_eio.sh -- a worker crash never turns lost buffered data into a success or zeros.
# Through the supervisor's mount (default mode, then again with --writeback --cache-dir), a
# Python helper opens, before the worker is killed with SIGKILL:
#   A  "lost": 10 MiB written, neither closed nor fsync'ed (buffered in the worker);
#   E  "lost" read-only, never written;
#   B  "kept": 1 MiB written and fsync'ed;
#   C  "shared": 1 MiB written, committed by an fsync through another descriptor D.
# After the supervisor started a new worker: a new O_APPEND descriptor G appends 64 KiB S to
# "lost" at once (the kernel must not append past the committed end, where the lost data was:
# that would leave zeros); A's further 10 MiB write, its fsync and its close fail with EIO;
# B and C write 1 MiB more, fsync and close with no error; D and E close with no error; E and a
# fresh descriptor read "lost" as a prefix of what A wrote followed by S (never a zero in place
# of written data).  After a remount: "kept" and "shared" hold exactly their 2 MiB, "lost" is
# still that.  The supervisor's ERROR line names the lost handle.  Mounts use 30 s attribute
# and entry caches, so that the kernel still holds the size A's writes gave "lost" when G
# appends (with the default 1 s it may have asked the new worker again by then).
# timeout: 120
# allow-log: was killed by signal 9
# allow-log: died with uncommitted data in 1 open file handle
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd python3 cmp
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3   # starts in 0.2 s; a pyenv shim takes seconds

cat > "$WORK/crash_helper.py" <<'EOF'
import os, sys, time
from crash_check import bad, done, expect_eio, ready_then_wait

mnt, work = sys.argv[1], sys.argv[2]
MiB = 1 << 20
p = open(os.path.join(work, "p.bin"), "rb").read()      # 20 MiB for "lost"
q = open(os.path.join(work, "q.bin"), "rb").read()      # 2 MiB for "kept"
r = open(os.path.join(work, "r.bin"), "rb").read()      # 2 MiB for "shared"
sfx = open(os.path.join(work, "s.bin"), "rb").read()    # 64 KiB appended to "lost"

def write_all(fd, data):
    off = 0
    while off < len(data):
        off += os.write(fd, data[off:])

def expect_ok(what, fn, *args):
    try:
        return fn(*args)
    except OSError as e:
        bad("%s: %s" % (what, e))

def read_all(fd):
    out = []
    while True:
        b = os.read(fd, MiB)
        if not b:
            return b"".join(out)
        out.append(b)

def check_prefix(what, data):      # "lost" must be a prefix of p, then sfx
    n = len(data) - len(sfx)
    want = p[:max(n, 0)] + sfx
    if data != want:
        i = next((i for i in range(min(len(data), len(want))) if data[i] != want[i]),
                 min(len(data), len(want)))
        bad("%s: %d bytes, differs from what was written at byte %d (%r)"
            % (what, len(data), i, data[i:i + 8]))
    else:
        print("ok %s: %d bytes of A, then the 64 KiB of G" % (what, n), flush=True)

path = lambda n: os.path.join(mnt, n)
T0 = time.time()
def lap(what):
    print("%.2f s: %s" % (time.time() - T0, what), flush=True)
a = os.open(path("lost"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
write_all(a, p[:10 * MiB])
lap("A written")
e = os.open(path("lost"), os.O_RDONLY)
b = os.open(path("kept"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
write_all(b, q[:MiB])
os.fsync(b)
lap("B fsynced")
c = os.open(path("shared"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
write_all(c, r[:MiB])
d = os.open(path("shared"), os.O_RDONLY)
os.fsync(d)
lap("D fsynced")

ready_then_wait(work)

g = os.open(path("lost"), os.O_WRONLY | os.O_APPEND)
expect_ok("append through G", write_all, g, sfx)
expect_ok("fsync of G", os.fsync, g)
expect_ok("close of G", os.close, g)
expect_eio("write through A after the crash", write_all, a, p[10 * MiB:])
expect_eio("fsync of A", os.fsync, a)
expect_eio("close of A", os.close, a)
expect_ok("write through B", write_all, b, q[MiB:])
expect_ok("fsync of B", os.fsync, b)
expect_ok("close of B", os.close, b)
expect_ok("write through C", write_all, c, r[MiB:])
expect_ok("fsync of C", os.fsync, c)
expect_ok("close of C", os.close, c)
expect_ok("close of D", os.close, d)
os.lseek(e, 0, os.SEEK_SET)
check_prefix("read of lost through E", expect_ok("read through E", read_all, e) or b"")
expect_ok("close of E", os.close, e)
f = os.open(path("lost"), os.O_RDONLY)
check_prefix("read of lost through a new descriptor", read_all(f))
os.close(f)
done()
EOF

head -c $((20 << 20)) /dev/urandom > "$WORK/p.bin"
head -c $((2 << 20)) /dev/urandom > "$WORK/q.bin"
head -c $((2 << 20)) /dev/urandom > "$WORK/r.bin"
head -c $((64 << 10)) /dev/urandom > "$WORK/s.bin"

run_crash() {   # run_crash MODE: the helper across one worker crash
  crash_worker_during "$1" "$WORK/crash_helper.py" "$MNT" "$WORK"
  ls "$MNT" > /dev/null || fail "$1: ls after the restart"
}

check_files() {   # check_files WHAT: the committed contents
  cmp "$MNT/kept" "$WORK/q.bin" || fail "$1: kept differs"
  cmp "$MNT/shared" "$WORK/r.bin" || fail "$1: shared differs"
  local n
  n=$(( $(stat -c %s "$MNT/lost") - (64 << 10) ))
  [ "$n" -ge 0 ] || fail "$1: lost is shorter than what G appended"
  cmp -n "$n" "$MNT/lost" "$WORK/p.bin" || fail "$1: lost (A's $n bytes) is not what A wrote"
  tail -c $((64 << 10)) "$MNT/lost" | cmp - "$WORK/s.bin" || fail "$1: G's append is not at the end"
  note "$1: lost has $n bytes of A, all as written, then G's 64 KiB"
}

CACHES="--attr-cache 30 --entry-cache 30"
mt_umount
# shellcheck disable=SC2086
mt_mount $CACHES
run_crash default
check_files "default, after the restart"
mt_umount
# shellcheck disable=SC2086
mt_mount $CACHES
check_files "default, after a remount"

# the same with --writeback: what is staged survives, what was only in memory is EIO
mt_umount
mkdir -p "$WORK/cache"
# shellcheck disable=SC2086
mt_mount $CACHES --writeback --cache-dir "$WORK/cache"
rm -f "$MNT/lost" "$MNT/kept" "$MNT/shared"
run_crash writeback
check_files "writeback, after the restart"
mt_umount
# shellcheck disable=SC2086
mt_mount $CACHES --writeback --cache-dir "$WORK/cache"
check_files "writeback, after a remount"
exit 0
