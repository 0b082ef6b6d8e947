#!/usr/bin/env bash
# max_file_size.sh -- KegFS's largest file size, 2^53 - 1 bytes (KEG_MAX_FILE_SIZE,
# docs/posix.md), on both sides: writing the last byte below it, truncating and
# fallocating up to it work and read back; one byte more fails with EFBIG, as does
# pwrite at 0x7ffffffffffffffe; a write that crosses the limit is cut short at it.
# Run by hand on another file system it checks that file system's s_maxbytes instead
# (MAX_FILE_SIZE=...).
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_cmd python3

MAXSZ=${MAX_FILE_SIZE:-$(( (1 << 53) - 1 ))}
cd "$MNT" || fail "cd"
out=$(python3 - "$MAXSZ" <<'PY' 2>&1
import errno, os, sys
M = int(sys.argv[1])
bad = []
def check(what, cond):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        bad.append(what)
def err(fn):
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0

fd = os.open("f", os.O_CREAT | os.O_RDWR, 0o644)
check("pwrite of the last byte below the limit",
      os.pwrite(fd, b"Z", M - 1) == 1)
check("size is the limit", os.fstat(fd).st_size == M)
check("the last byte reads back", os.pread(fd, 4, M - 1) == b"Z")
check("a byte just below it reads as a hole", os.pread(fd, 1, M - 2) == b"\0")
check("pwrite at the limit -> EFBIG", err(lambda: os.pwrite(fd, b"x", M)) == errno.EFBIG)
check("pwrite at 0x7ffffffffffffffe -> EFBIG",
      err(lambda: os.pwrite(fd, b"x", 0x7ffffffffffffffe)) == errno.EFBIG)
check("a write crossing the limit is cut short",
      os.pwrite(fd, b"ABCD", M - 2) == 2 and os.pread(fd, 4, M - 2) == b"AB")
check("size unchanged by the failed writes", os.fstat(fd).st_size == M)
check("ftruncate to the limit - 1", err(lambda: os.ftruncate(fd, M - 1)) == 0
      and os.fstat(fd).st_size == M - 1)
check("ftruncate to the limit", err(lambda: os.ftruncate(fd, M)) == 0
      and os.fstat(fd).st_size == M)
check("ftruncate past the limit -> EFBIG", err(lambda: os.ftruncate(fd, M + 1)) == errno.EFBIG)
check("truncate(path) past the limit -> EFBIG",
      err(lambda: os.truncate("f", 1 << 62)) == errno.EFBIG)
check("size unchanged by the failed truncates", os.fstat(fd).st_size == M)
os.ftruncate(fd, 0)
check("fallocate up to the limit", err(lambda: os.posix_fallocate(fd, M - 4096, 4096)) == 0
      and os.fstat(fd).st_size == M)
check("fallocate past the limit -> EFBIG",
      err(lambda: os.posix_fallocate(fd, M - 4096, 4097)) == errno.EFBIG)
os.close(fd)
os.unlink("f")
sys.exit(1 if bad else 0)
PY
)
rc=$?
echo "$out" | sed 's/^/# /'
[ $rc = 0 ] || fail "$(echo "$out" | grep -m1 '^FAIL\|Error' )"
