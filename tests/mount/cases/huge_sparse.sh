#!/usr/bin/env bash
# huge_sparse.sh -- a 1 PiB sparse file with one byte at the end: writing, reading the
# last byte, truncating down and removing it must each take O(data), not O(size): every
# step within HUGE_LIMIT seconds (default 5), and the volume stays responsive while the
# file's chunks are purged in the background (a metadata engine that walks all 16 million
# chunk indices blocks itself -- and with Redis every other client -- for tens of seconds).
# timeout: 300
. "$(dirname "$0")/../lib.sh"

LIMIT=${HUGE_LIMIT:-5}
P=$((1 << 50))
cd "$MNT" || fail "cd"
if ! out=$(truncate -s $P f 2>&1); then
  echo "$out" | grep -q 'File too large' && skip "this file system has a maximum file size below 1 PiB"
  fail "truncate -s 1P: $out"
fi
timed() {   # timed WHAT CMD...: run CMD, fail if it fails or takes more than LIMIT s
  local what=$1 t0 t1 ms
  shift
  t0=$(date +%s%N)
  timeout -k 2 $((LIMIT * 3)) "$@" || fail "$what failed or took more than $((LIMIT * 3)) s"
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  note "$what: $ms ms"
  [ $ms -le $((LIMIT * 1000)) ] || fail "$what took $ms ms (limit $LIMIT s) on a 1 PiB sparse file"
}
timed "write of the last byte" dd if=/dev/zero of=f bs=1 count=1 seek=$((P - 1)) conv=notrunc status=none
assert_eq "$(stat -c %s f)" $P "size"
timed "read of the last byte" sh -c "tail -c 1 f | od -An -tx1 > '$WORK/last'"
assert_eq "$(tr -d ' \n' < "$WORK/last")" 00 "last byte"
printf 'Z' | dd of=f bs=1 seek=$((P - 2)) conv=notrunc status=none
assert_eq "$(tail -c 2 f | head -c 1)" Z "byte written near 1 PiB"
if command -v python3 >/dev/null 2>&1; then
  # SEEK_DATA from 0 must find the data near the end without visiting every chunk
  seek='import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
d = os.lseek(fd, 0, os.SEEK_DATA)
h = os.lseek(fd, 0, os.SEEK_HOLE)
print(d, h)'
  timed "SEEK_DATA/SEEK_HOLE from 0" sh -c "python3 -c '$seek' f > '$WORK/seek'"
  read -r d h < "$WORK/seek"
  [ "$d" -le $((P - 2)) ] && [ "$d" -ge $((P - 64 * 1024 * 1024)) ] || fail "SEEK_DATA gave $d"
  assert_eq "$h" 0 "SEEK_HOLE from 0"
fi
timed "truncate 1P -> 1T" truncate -s 1T f
timed "truncate 1T -> 0" truncate -s 0 f
timed "truncate 0 -> 1P again" truncate -s $P f
timed "rm" rm f
# the purge of the removed file runs in the background: the volume must stay responsive
for i in 1 2 3 4 5; do
  timed "create+stat after the rm ($i)" sh -c ": > after$i && stat after$i > /dev/null"
  sleep 1
done
rm -f after*
