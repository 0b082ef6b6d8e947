#!/usr/bin/env bash
# mount_options.sh -- read-only mounts refuse writes with EROFS and still read; the cache
# timeouts given on the command line are accepted; `kegfs info` describes a file; `kegfs stats`
# shows the --buffer-size memory budget and a sane writeback drain estimate.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs

printf 'content' > "$MNT/f" && mkdir "$MNT/d" || fail "setup"
ino=$(stat -c %i "$MNT/f")
out=$("$KEGFS" info "$MNT/f" 2>&1) || fail "kegfs info failed: $out"
echo "$out" | grep -q "$ino" || fail "kegfs info does not show inode $ino: $out"
mt_umount

mt_mount --read-only
assert_eq "$(cat "$MNT/f")" content "read on a read-only mount"
for cmd in "touch $MNT/new" "mkdir $MNT/d2" "rm $MNT/f" "chmod 600 $MNT/f" "mv $MNT/f $MNT/g" \
           "ln -s x $MNT/l" "truncate -s 0 $MNT/f"; do
  out=$($cmd 2>&1) && fail "'$cmd' succeeded on a read-only mount"
  echo "$out" | grep -q 'Read-only file system' || fail "'$cmd': expected EROFS, got: $out"
done
out=$(sh -c "printf x >> $MNT/f" 2>&1) && fail "append succeeded on a read-only mount"
grep -q ' ro[ ,]' <(grep " $MNT " /proc/self/mountinfo) || fail "mount table does not say ro"
mt_umount

mt_mount --attr-cache 0 --entry-cache 0 --dir-entry-cache 0
printf 'more' >> "$MNT/f" || fail "append after remount rw"
assert_eq "$(cat "$MNT/f")" contentmore "content with zero cache timeouts"
mt_umount

# --buffer-size is the memory budget `kegfs stats` reports.  With --writeback over a slow
# store (every object op takes 1.5 s, one upload worker), a small first upload followed
# by a 6 MiB file must not give an absurd drain estimate: until the upload rate is
# measured over uploads (not the idle time before them) the estimate is "unknown", and it
# is never above a day.
mkdir -p "$WORK/cache"
KEG_FAULTY="delay=1500" mt_mount --buffer-size 64 --writeback --cache-dir "$WORK/cache" \
  --upload-workers 1 --idle-upload-workers 1
st=$("$KEGFS" stats "$MNT" 2>&1) || fail "kegfs stats: $st"
echo "$st" | grep -Eq '^ *memory: +budget 64 MiB; read cache .*; write buffers ' \
  || fail "kegfs stats does not show the 64 MiB budget: $st"
head -c 100 /dev/urandom > "$MNT/small" || fail "write small"
head -c 6M /dev/urandom > "$MNT/big" || fail "write big"
unknown=0 staged=0 prev=
for _ in $(seq 1 50); do
  st=$("$KEGFS" stats "$MNT" 2>&1) || fail "kegfs stats: $st"
  up=$(echo "$st" | grep 'uploads:')
  [ "$up" = "$prev" ] || echo "# $up"
  prev=$up
  echo "$up" | grep -q 'drain time: unknown (rate not measured yet)' && unknown=$((unknown + 1))
  n=$(echo "$up" | sed -nE 's/.*drains in ~([0-9]+)s.*/\1/p')
  [ -z "$n" ] || [ "$n" -le 86400 ] || fail "absurd drain estimate: $up"
  echo "$up" | grep -q 'drains in more than a day' && fail "drain estimate over a day: $up"
  if echo "$st" | grep -q 'staged: .* in 0 objects'; then
    echo "$st" | grep -q 'the oldest waits' && fail "an empty staging area has an oldest age: $st"
    [ "$staged" = 1 ] && break       # drained (before the first update: not staged yet)
  else
    staged=1
    w=$(echo "$st" | sed -nE 's/.*the oldest waits for ([0-9.]+)s.*/\1/p')
    [ -n "$w" ] && awk -v w="$w" -v o="${oldest:-0}" 'BEGIN {exit !(w > o)}' && oldest=$w
  fi
  sleep 0.3
done
[ "$unknown" -gt 0 ] || fail "the drain time was never 'unknown' right after the first upload"
# each object takes 1.5 s per store op, one worker: the last one waits for seconds
awk -v w="${oldest:-0}" 'BEGIN {exit !(w >= 1.5)}' \
  || fail "kegfs stats never showed staged bytes waiting 1.5 s or more (largest: ${oldest:-none})"
echo "# the oldest staged bytes waited up to ${oldest}s"
echo "# samples with an unknown drain time: $unknown"
