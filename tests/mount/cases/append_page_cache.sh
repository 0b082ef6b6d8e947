#!/usr/bin/env bash
# append_page_cache.sh -- write-only O_APPEND descriptions get direct I/O, and a direct
# write drops the kernel's cached pages of the file only when a description that uses
# the page cache was opened on it since the kernel got the inode.  Checked:
#   1. a reader that opened the file first (and cached its last, partial page) and keeps
#      its descriptor sees every appended byte afterwards, through that descriptor and a
#      new one, also after a read, an append and a read again in a loop;
#   2. a reader whose descriptor was closed (pages kept) sees them on its next open;
#   3. a log only ever opened write-only O_APPEND: 200 appends, each by a new open, cost
#      the kernel's permission checks no GETATTR each (the invalidation used to drop the
#      attributes too), and its size and contents are right, through a new reader;
#   4. after one buffered open of that log, every append drops the pages again (each new
#      descriptor's permission check then asks for the attributes), and the log is right;
#   5. a file created write-only is not marked by that open, a buffered write through a
#      write-only descriptor marks it.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd curl

SOCK=$WORK/metrics.sock
mt_umount
mt_mount --metrics "unix:$SOCK"
wait_for 10 test -S "$SOCK" || fail "no metrics socket at $SOCK"
getattrs() { fuse_ops "$SOCK" getattr; }
# appends FILE N WORD: N appends of "WORD %05d\n", each by a new write-only O_APPEND
# descriptor (created if missing); prints the GETATTR requests they caused
appends() {
  local b a
  b=$(getattrs)
  /usr/bin/python3 -c '
import os, sys
for i in range(int(sys.argv[2])):
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, b"%s %05d\n" % (sys.argv[3].encode(), i))
    os.close(fd)' "$1" "$2" "$3" || fail "appends to $1"
  a=$(getattrs)
  echo $((a - b))
}
lines() { for i in $(seq 0 $(($2 - 1))); do printf '%s %05d\n' "$1" "$i"; done; }

/usr/bin/python3 - "$MNT" <<'EOF' || fail "a reader that cached pages saw stale bytes after direct appends"
import os, sys
d = sys.argv[1]
p = os.path.join(d, "shared")
data = bytearray(os.urandom(5000))          # ends inside the second page
with open(p, "wb") as f:
    f.write(data)
r = os.open(p, os.O_RDONLY)                 # a page-cache description, kept open
assert os.pread(r, 1 << 20, 0) == data      # caches both pages, the second one partial
for i in range(50):
    piece = os.urandom(100 + 37 * i)
    a = os.open(p, os.O_WRONLY | os.O_APPEND)
    assert os.write(a, piece) == len(piece)
    os.close(a)
    data += piece
    got = os.pread(r, 1 << 20, 0)
    if got != data:
        first = next((k for k in range(min(len(got), len(data))) if got[k] != data[k]), None)
        sys.exit("append %d: kept descriptor read %d bytes, want %d, first difference at %s"
                 % (i, len(got), len(data), first))
    n = os.open(p, os.O_RDONLY)
    assert os.pread(n, 1 << 20, 0) == data, "append %d: a new descriptor read stale bytes" % i
    os.close(n)
os.close(r)
# 2: closed readers' pages stay cached; the next open must not serve them
piece = os.urandom(3000)
a = os.open(p, os.O_WRONLY | os.O_APPEND)
os.write(a, piece)
os.close(a)
data += piece
n = os.open(p, os.O_RDONLY)
assert os.pread(n, 1 << 20, 0) == data, "reopened reader read stale bytes"
os.close(n)
EOF

# 3: a file only ever opened write-only O_APPEND
log="$MNT/app.log"
n=$(appends "$log" 200 line)
note "200 appends by new descriptors: $n GETATTR requests"
[ "$n" -lt 50 ] || fail "200 write-only appends to a file never cached cost $n GETATTRs (want < 50)"
assert_eq "$(stat -c %s "$log")" 2200 "size of the log"
assert_eq "$(sha256sum < "$log")" "$(lines line 200 | sha256sum)" "contents of the log"

# 4: once a page-cache description was opened, every direct append drops the pages (and
# with them the attributes: each new descriptor's permission check asks for them again)
head -c 100 "$log" > /dev/null || fail "buffered read of the log"
n=$(appends "$log" 20 more)
note "20 appends after a buffered open: $n GETATTR requests"
[ "$n" -ge 15 ] || fail "20 appends after a buffered open cost $n GETATTRs: the pages were not dropped"
assert_eq "$(sha256sum < "$log")" "$( (lines line 200; lines more 20) | sha256sum)" \
  "contents of the log after more appends"

# 5: a file created write-only (as a benchmark's or a logger's setup does) is not marked by
# that open; a buffered write through a write-only descriptor marks it (its pages are in
# the page cache before the request reaches the mounter)
wo="$MNT/wo"
/usr/bin/python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))' \
  "$wo" || fail "create $wo write-only"
n=$(appends "$wo" 20 a)
note "20 appends to a file created write-only: $n GETATTR requests"
[ "$n" -lt 10 ] || fail "20 appends to a file created write-only cost $n GETATTRs (want < 10)"
/usr/bin/python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY); os.pwrite(fd, b"x" * 8192, 0); os.close(fd)' "$wo" ||
  fail "buffered write to $wo"
n=$(appends "$wo" 20 b)
note "20 appends after a buffered write-only write: $n GETATTR requests"
[ "$n" -ge 15 ] || fail "20 appends after a buffered write cost $n GETATTRs: the pages were not dropped"
assert_eq "$(sha256sum < "$wo")" "$( (head -c 8192 /dev/zero | tr '\0' x; lines b 20) | sha256sum)" \
  "contents after appends, an overwrite and appends"
finish
