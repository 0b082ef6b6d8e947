"""crash_check.py -- what the Python helpers of the worker-crash mount cases share.

crash_worker_during (tests/mount/lib.sh) runs a helper with this directory on
PYTHONPATH.  The helper prepares its descriptors, calls ready_then_wait(work) (the
worker is killed and replaced meanwhile), checks what followed with bad() and
expect_eio(), and ends with done().
"""
import errno
import os
import sys
import time

fails = 0


def bad(msg):
    """Counts and prints one failed check."""
    global fails
    fails += 1
    print("FAIL " + msg, flush=True)


def expect_eio(what, fn, *args):
    """fn(*args) must fail with EIO: a lost write is an error, never a success."""
    try:
        fn(*args)
    except OSError as e:
        if e.errno != errno.EIO:
            bad("%s: %s, expected EIO" % (what, e))
        else:
            print("ok %s: EIO" % what, flush=True)
        return
    bad("%s succeeded, expected EIO" % what)


def ready_then_wait(work):
    """Creates WORK/ready, then waits (at most 60 s) for WORK/go: the new worker runs."""
    open(os.path.join(work, "ready"), "w").close()
    t0 = time.time()
    while not os.path.exists(os.path.join(work, "go")):
        if time.time() - t0 > 60:
            bad("no go after 60 s")
            sys.exit(1)
        time.sleep(0.05)


def done():
    """Exit status 1 when a check failed, else 0."""
    sys.exit(1 if fails else 0)
