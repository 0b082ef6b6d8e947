#!/usr/bin/env bash
# append_two_mounts.sh -- O_APPEND from two --writeback mounters of one volume (A = $MNT,
# B = $WORK/mnt2), 1,000 records of 100 bytes each, written at the same time: once with the
# descriptor kept open, once with open/append/close per record, and once with A's descriptor
# kept open while a reader on A reads the file's end and closes it in a loop (each read and
# each close commits what A buffered) and B appends record by record.  core/fs has the
# metadata engine place each commit's appends at the file's end, so all 2,000 records must
# be there, each exactly once and intact, read on both mounts (and A's own records in its
# order).  A write-only O_APPEND descriptor gets direct I/O: each write() is one FUSE write
# request, also one that crosses a page boundary or is 1 MiB less a page long from an
# unaligned buffer (the kernel's page cache would cut those in two, and a commit between the
# pieces would let B's record land inside A's); counted with the mounter's metrics.  A
# reader on the same mount sees each appended record at once.
# timeout: 300
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"
need_kegfs
need_cmd curl
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || skip "needs python3"

A=$MNT
B=$WORK/mnt2
# Each mount reads blocks the other has staged and not uploaded yet: a read waits for them
# (--missing-block-wait).  Both mounters stage a thousand small objects per round, which a
# gateway sharing two CPUs uploads in seconds to tens of seconds; the wait is set well above
# that, so that what is checked here is where the appends land, not the gateway's rate.
mt_umount
SOCK=$WORK/a.sock
mt_mount --writeback --cache-dir "$WORK/cacheA" --missing-block-wait 60 --metrics "unix:$SOCK"
m2_mount "$B" "$WORK/mounterB.log" "$META" --writeback --cache-dir "$WORK/cacheB" \
  --missing-block-wait 60

cat > "$WORK/app.py" <<'PYEOF'
import os, sys
path, tag, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def rec(i):
    head = "%s %05d " % (tag, i)
    body = "".join(chr(97 + (ord(tag[0]) * 7 + i + k) % 26) for k in range(99 - len(head)))
    return (head + body + "\n").encode()
if mode == "keep":
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for i in range(n):
        assert os.write(fd, rec(i)) == 100
    os.close(fd)
else:
    for i in range(n):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        assert os.write(fd, rec(i)) == 100
        os.close(fd)
PYEOF
cat > "$WORK/check.py" <<'PYEOF'
import sys
data, n = open(sys.argv[1], "rb").read(), int(sys.argv[2])
def rec(tag, i):
    head = "%s %05d " % (tag, i)
    body = "".join(chr(97 + (ord(tag[0]) * 7 + i + k) % 26) for k in range(99 - len(head)))
    return (head + body + "\n").encode()
if len(data) != 2 * n * 100:
    sys.exit("size %d, expected %d" % (len(data), 2 * n * 100))
seen = {}
order = {"A": [], "B": []}
for off in range(0, len(data), 100):
    r = data[off:off + 100]
    tag, i = r[:1].decode(errors="replace"), r[2:7]
    try:
        i = int(i)
    except ValueError:
        sys.exit("garbage record at %d: %r" % (off, r[:20]))
    if tag not in order or r != rec(tag, i):
        sys.exit("record at %d is not intact: %r" % (off, r[:20]))
    seen[(tag, i)] = seen.get((tag, i), 0) + 1
    order[tag].append(i)
missing = [k for k in ((t, i) for t in "AB" for i in range(n)) if seen.get(k) != 1]
if missing:
    sys.exit("%d records missing or repeated, e.g. %r" % (len(missing), missing[:5]))
for t in "AB":
    if order[t] != sorted(order[t]):
        sys.exit("records of %s out of order" % t)
print("all %d records present, intact, in each writer's order" % (2 * n))
PYEOF

cat > "$WORK/reader.py" <<'PYEOF'
import os, sys
path, stop = sys.argv[1], sys.argv[2]
while not os.path.exists(stop):
    fd = os.open(path, os.O_RDONLY)
    os.pread(fd, 8192, max(0, os.fstat(fd).st_size - 4096))
    os.close(fd)
PYEOF

N=1000
for mode in keep reopen reader; do
  f=log-$mode
  : > "$A/$f" || fail "create $f"
  rm -f "$WORK/stop"
  pr=
  if [ "$mode" = reader ]; then
    "$PY" "$WORK/reader.py" "$A/$f" "$WORK/stop" & pr=$!
    "$PY" "$WORK/app.py" "$A/$f" A keep "$N" & pa=$!
    "$PY" "$WORK/app.py" "$B/$f" B reopen "$N" & pb=$!
  else
    "$PY" "$WORK/app.py" "$A/$f" A "$mode" "$N" & pa=$!
    "$PY" "$WORK/app.py" "$B/$f" B "$mode" "$N" & pb=$!
  fi
  wait "$pa" || fail "appender on A ($mode) failed"
  wait "$pb" || fail "appender on B ($mode) failed"
  if [ -n "$pr" ]; then
    touch "$WORK/stop"
    wait "$pr" || fail "reader on A failed"
  fi
  # close-to-open: a fresh open on either mount sees every record
  out=$("$PY" "$WORK/check.py" "$A/$f" "$N" "$WORK/app.py" 2>&1) || fail "$mode, read on A: $out"
  note "$mode, read on A: $out"
  out=$("$PY" "$WORK/check.py" "$B/$f" "$N" "$WORK/app.py" 2>&1) || fail "$mode, read on B: $out"
  assert_eq "$(stat -c %s "$A/$f")" $((2 * N * 100)) "size of $f on A"
done

# read-after-append on one mount, same descriptor, while B appends: the reader gets
# its own record back at the offset it reads the file's end from (a fresh read)
"$PY" - "$A/mixed" "$B/mixed" <<'PYEOF' || fail "read-after-append on one mount"
import os, sys
a = os.open(sys.argv[1], os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
b = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND)
for i in range(50):
    os.write(b, b"B%04d\n" % i)
    os.fsync(b)
    os.write(a, b"A%04d\n" % i)
    os.fsync(a)
os.close(b)
data = open(sys.argv[1], "rb").read()
recs = [data[k:k + 6] for k in range(0, len(data), 6)]
assert len(data) == 600, len(data)
assert sorted(recs) == sorted([b"A%04d\n" % i for i in range(50)] + [b"B%04d\n" % i for i in range(50)]), recs[:6]
os.close(a)
PYEOF
# one FUSE write request per write() through a write-only O_APPEND descriptor, and a
# reader's descriptor on the same mount sees each record as soon as write() returned
writes() { fuse_ops "$SOCK" write; }
w0=$(writes)
"$PY" - "$A/direct" <<'PYEOF' || fail "appends through a write-only descriptor"
import mmap, os, sys
path = sys.argv[1]
w = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
r = os.open(path, os.O_RDONLY)
for i in range(90):         # 9,000 bytes: two records cross a page boundary
    rec = b"%02d" % i + b"x" * 97 + b"\n"
    assert os.write(w, rec) == 100
    got = os.pread(r, 200, max(0, (i + 1) * 100 - 150))
    assert got.endswith(rec), "record %d not seen by a reader on the same mount: %r" % (i, got[-20:])
# 1 MiB less a page from a buffer that is not page-aligned: 257 pages of the caller's memory
big = memoryview(mmap.mmap(-1, 2 << 20))[1:1 + (1 << 20) - 4096]
assert os.write(w, big) == len(big)
os.close(w)
assert os.pread(r, 100, 8900)[:2] == b"89"
os.close(r)
assert os.stat(path).st_size == 9000 + (1 << 20) - 4096
PYEOF
w1=$(writes)
assert_eq "$((w1 - w0))" 91 "FUSE write requests for 91 write() calls through a write-only O_APPEND descriptor"

m2_umount "$B"
