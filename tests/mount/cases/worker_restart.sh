#!/usr/bin/env bash
# worker_restart.sh -- kill -9 the FUSE worker (the child of the `kegfs mount` supervisor):
# the supervisor starts a new worker on the same /dev/fuse descriptor, and within 5 s
# ls, cat, writes through a descriptor opened before the crash (by this shell and by a
# background process), new files, and a directory listing opened before the crash all
# work; the mount never answers ENOTCONN.  A descriptor whose writes were committed before
# the crash (here by an fsync through another descriptor) keeps working without an error;
# the background writer (write + fsync per line, one descriptor) gets EIO only for a line
# the crash took, reopens and writes it again: every line is there, in order, no NUL byte.
# A second crash is survived too, and `kegfs stats` counts the restarts.  --no-supervisor
# keeps the single process.  (worker_crash_eio.sh covers the handles whose data a crash took.)
# timeout: 120
# allow-log: was killed by signal 9
# allow-log: unknown (file|directory) handle
# allow-log: died with uncommitted data in [0-9]+ open file handle
. "$(dirname "$0")/../lib.sh"
need_kegfs
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3   # starts in 0.2 s; a pyenv shim takes seconds

sup=$(mounter_pid)
[ -n "$sup" ] || fail "no mounter pid"
worker() { pgrep -P "$sup" | head -1; }
w1=$(worker)
[ -n "$w1" ] || skip "no worker process under the supervisor $sup (not root? --no-supervisor?)"

mkdir "$MNT/d" && printf 'old' > "$MNT/d/old" || fail "setup"
head -c 3000000 /dev/urandom > "$WORK/big"
cp "$WORK/big" "$MNT/big" || fail "cp big"
exec 5<>"$MNT/open-rw"          # opened before the crash, written after
printf 'before\n' >&5
sync "$MNT/open-rw" || fail "fsync of open-rw"   # commits fd 5's data: nothing to lose
exec 6<"$MNT/big"               # read after the crash
# a background writer that keeps its descriptor across the crash
"$PY" -c 'import errno, os, sys, time
path = sys.argv[1]
flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
fd = os.open(path, flags, 0o644)
i = 1
while i <= 40:
    try:
        os.write(fd, b"line %d\n" % i)
        os.fsync(fd)
        i += 1
    except OSError as e:
        if e.errno != errno.EIO:
            raise
        print("EIO at line %d (lost in the crash): reopening" % i, flush=True)
        try:
            os.close(fd)
        except OSError:
            pass
        fd = os.open(path, flags)
    time.sleep(0.1)
os.close(fd)' "$MNT/bg.log" > "$WORK/bg.out" 2>&1 &
bg=$!
sleep 0.5

enotconn=0
check_alive() {   # check_alive WHAT: no ENOTCONN anywhere
  local out
  out=$(ls "$MNT" 2>&1) || { echo "$out" | grep -q 'not connected' && enotconn=1; return 1; }
  return 0
}

kill -9 "$w1"
note "killed worker $w1 of supervisor $sup"
t0=$(date +%s%N)
wait_for 5 sh -c "w=\$(pgrep -P $sup | head -1); [ -n \"\$w\" ] && [ \"\$w\" != $w1 ]" \
  || fail "no new worker within 5 s"
w2=$(worker)
check_alive || fail "ls after the restart failed"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
note "new worker $w2 serving after ${ms} ms"
kill -0 "$sup" 2>/dev/null || fail "the supervisor died"

assert_eq "$(cat "$MNT/d/old")" old "cat of an old file after the restart"
ls "$MNT/d" >/dev/null || fail "ls of a directory after the restart"
printf 'after\n' >&5 || fail "write through a descriptor opened before the crash"
exec 5>&-
grep -q after "$MNT/open-rw" || fail "the write through the old descriptor is missing: $(cat "$MNT/open-rw")"
cmp - "$WORK/big" <&6 || fail "read through a descriptor opened before the crash"
exec 6<&-
printf 'new' > "$MNT/new" && assert_eq "$(cat "$MNT/new")" new "new file after the restart"
mkdir "$MNT/newdir" && mv "$MNT/new" "$MNT/newdir/" || fail "mkdir/rename after the restart"
wait "$bg" || fail "the background writer failed across the crash: $(cat "$WORK/bg.out")"
[ ! -s "$WORK/bg.out" ] || note "background writer: $(cat "$WORK/bg.out")"
! grep -qaP '\x00' "$MNT/bg.log" || fail "background writer: NUL bytes in bg.log"
assert_eq "$(uniq "$MNT/bg.log")" "$(seq 1 40 | sed 's/^/line /')" "background writer's lines"

# a second crash, this time with a directory open (listed after the crash)
"$PY" -c 'import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
time.sleep(1.5)
print(sorted(os.listdir(fd)))' "$MNT/d" > "$WORK/dirlist" 2>&1 &
py=$!
sleep 0.5
kill -9 "$w2"
wait_for 5 sh -c "w=\$(pgrep -P $sup | head -1); [ -n \"\$w\" ] && [ \"\$w\" != $w2 ]" \
  || fail "no third worker within 5 s"
check_alive || fail "ls after the second restart failed"
cp "$WORK/big" "$MNT/big2" && cmp "$WORK/big" "$MNT/big2" || fail "copy after the second restart"
wait "$py" || fail "listing a directory opened before the crash: $(cat "$WORK/dirlist")"
assert_eq "$(cat "$WORK/dirlist")" "['old']" "directory listed through a handle of the crashed worker"
out=$("$KEGFS" stats "$MNT" 2>&1) || fail "kegfs stats: $out"
echo "$out" | grep -q 'restarted 2 times' || fail "kegfs stats does not count 2 restarts: $out"
[ "$enotconn" = 0 ] || fail "the mount answered ENOTCONN"

# unmount through the supervisor: umount waits for it, nothing left behind
mt_umount
gone() { ! kill -0 "$sup" 2>/dev/null || grep -q '^State:.*Z' "/proc/$sup/status" 2>/dev/null; }
gone || fail "supervisor $sup still running after umount"

# --no-supervisor: one process, no child
mt_mount --no-supervisor
p=$(mounter_pid)
[ -z "$(pgrep -P "$p")" ] || fail "--no-supervisor mounter $p has a child"
assert_eq "$(cat "$MNT/d/old")" old "read with --no-supervisor"
exit 0
