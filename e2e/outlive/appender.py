#!/usr/bin/python3
"""appender.py -- the application of the "mounts that outlive the plugin" tests.

  appender.py write FILE STOPFILE REPORT   hold FILE open; every 50 ms append one
                                           record, fsync, read the whole file back
                                           and check every record acknowledged so far
  appender.py read DIR STOPFILE REPORT     every 50 ms list DIR and read every file

Creates REPORT.alive after its first good iteration (tests wait for it: starting
python can take seconds on a loaded machine).  Runs until STOPFILE exists, then
writes REPORT (key=value lines): records (acknowledged appends), errors,
max_stall_ms (longest single iteration), first_error.  Any exception, a missing or
wrong record is an error; the loop goes on after one.
"""
import os
import sys
import time

PERIOD = 0.05


def record(i):
    return ("rec %08d %s\n" % (i, "x" * 40)).encode()


def main():
    mode, path, stop, report = sys.argv[1:5]
    errors, acked, max_stall, first = 0, 0, 0.0, ""
    fd = None
    if mode == "write":
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    while not os.path.exists(stop):
        t0 = time.monotonic()
        try:
            if mode == "write":
                os.write(fd, record(acked))
                os.fsync(fd)
                acked += 1
                size = os.fstat(fd).st_size
                data = os.pread(fd, size, 0)
                want = b"".join(record(i) for i in range(acked))
                if data != want:
                    raise RuntimeError("read back %d bytes, want %d (records differ)" %
                                       (len(data), len(want)))
            else:
                for name in sorted(os.listdir(path)):
                    with open(os.path.join(path, name), "rb") as f:
                        f.read()
                acked += 1
            if acked == 1:
                open(report + ".alive", "w").close()
        except Exception as e:  # noqa: BLE001 -- every failure counts
            errors += 1
            if not first:
                first = "%s at %.3f: %r" % (mode, time.time(), e)
        stall = time.monotonic() - t0
        max_stall = max(max_stall, stall)
        time.sleep(max(0.0, PERIOD - stall))
    if fd is not None:
        # what was acknowledged must still be there, read through a fresh descriptor
        try:
            with open(path, "rb") as f:
                data = f.read()
            if data[:len(b"".join(record(i) for i in range(acked)))] != \
                    b"".join(record(i) for i in range(acked)):
                errors += 1
                first = first or "final read: acknowledged records missing"
        except Exception as e:  # noqa: BLE001
            errors += 1
            first = first or "final read: %r" % (e,)
        os.close(fd)
    with open(report + ".tmp", "w") as f:
        f.write("records=%d\nerrors=%d\nmax_stall_ms=%d\nfirst_error=%s\n" %
                (acked, errors, int(max_stall * 1000), first.replace("\n", " ")))
    os.rename(report + ".tmp", report)


if __name__ == "__main__":
    main()
