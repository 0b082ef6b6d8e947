#!/usr/bin/env bash
# worker_crash_append.sh -- write-only O_APPEND descriptors (direct I/O; the handle id says
# so) across a worker crash: a lost append is EIO, never a success, a hole or zeros.
# Before the worker is killed with SIGKILL, a helper opens "log" write-only with O_APPEND
# twice: H appends R1 and fsyncs it, then appends R2 without fsync (buffered in the worker);
# K appends nothing.  After the supervisor started a new worker (which adopts both handles):
# H's next append, its fsync and its close fail with EIO; K appends R3 with no error, which
# must land right after R1 (the kernel still believes R2 is there: the mounter places
# appends at the committed end and drops the kernel's cached pages); a read shows exactly
# R1 R3.  The supervisor's ERROR line names the lost handle.  Without and with --writeback.
# timeout: 120
# allow-log: was killed by signal 9
# allow-log: died with uncommitted data in 1 open file handle
. "$(dirname "$0")/../lib.sh"
need_kegfs
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

cat > "$WORK/helper.py" <<'PYEOF'
import os, sys
from crash_check import bad, done, expect_eio, ready_then_wait
mnt, work = sys.argv[1], sys.argv[2]
log = os.path.join(mnt, "log")
R1, R2, R3 = b"1" * 5000 + b"\n", b"2" * 3000 + b"\n", b"3" * 700 + b"\n"
h = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
k = os.open(log, os.O_WRONLY | os.O_APPEND)
os.write(h, R1)
os.fsync(h)
os.write(h, R2)
ready_then_wait(work)
expect_eio("append through H after the crash", os.write, h, R3)
expect_eio("fsync of H", os.fsync, h)
expect_eio("close of H", os.close, h)
try:
    assert os.write(k, R3) == len(R3)
    os.fsync(k)
    os.close(k)
except OSError as e:
    bad("append through K: %s" % e)
data = open(log, "rb").read()
if data != R1 + R3:
    bad("log holds %d bytes (%r ... %r), expected R1 R3 (%d bytes)"
        % (len(data), data[:8], data[-8:], len(R1 + R3)))
else:
    print("ok: H's lost append is EIO, K's append follows R1, no gap", flush=True)
done()
PYEOF

run_crash() {   # run_crash MODE
  rm -f "$MNT/log"
  crash_worker_during "$1" "$WORK/helper.py" "$MNT" "$WORK"
}

mt_umount
mt_mount --attr-cache 30 --entry-cache 30
run_crash default
mt_umount
mkdir -p "$WORK/cache"
mt_mount --attr-cache 30 --entry-cache 30 --writeback --cache-dir "$WORK/cache"
run_crash writeback
exit 0
