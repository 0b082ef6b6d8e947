#!/usr/bin/env bash
# deleter_wakeups.sh -- an `rm -rf` does not wake the deleter thread once per file.
# Every unlink of a file with data queues its slices and kicks the deleter, which serves a
# burst of kicks once they pause (fs.c).  Only the first kick of a burst may wake it: a wake
# per unlink costs a futex call and two context switches per file.  While 1,000 files are
# removed, the thread named keg-deleter makes fewer than 200 futex calls (strace -c on that
# thread alone); woken per file, it made at least one per unlink.  Its context switches are
# not the measure: when the removal outlasts the longest hold, the deleter drains in the
# middle of it and waits on the engine and the store.  The background threads are named
# (keg-heartbeat, keg-deleter, keg-upload, ...), which is checked here too.  A count of
# system calls, not a time: it does not depend on the machine's speed.
# timeout: 180
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd strace

N=1000
small_files "$MNT/wake" "$N"
pid=$(mounter_worker_pid)
[ -n "$pid" ] || fail "no mounter process"
names=$(cat /proc/"$pid"/task/*/comm 2>/dev/null | sort -u | tr '\n' ' ')
for want in keg-heartbeat keg-deleter keg-upload; do
  [[ " $names" == *" $want "* ]] || fail "no thread named $want in the mounter (threads: $names)"
done
tid=
for t in /proc/"$pid"/task/*; do
  [ "$(cat "$t/comm" 2>/dev/null)" = keg-deleter ] && tid=${t##*/}
done
[ -n "$tid" ] || fail "no keg-deleter thread"
strace_calls "$tid" futex rm -rf "$MNT/wake"
n=$STRACE_CALLS
note "keg-deleter's futex calls during the removal of $N files: $n"
[ "$n" -lt 200 ] || fail "$n futex calls of the deleter for $N unlinks (woken per file): $(cat "$WORK/strace")"
[ ! -e "$MNT/wake" ] || fail "wake still there after rm -rf"
exit 0
