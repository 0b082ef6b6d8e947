#!/usr/bin/env bash
# alloc_churn.sh -- the mounter's memory allocator does not give memory back to the system
# and take it again on every file operation: while 1,000 files are removed (rm -rf), the FUSE
# worker makes fewer than 100 madvise and brk calls in all (strace -c).  glibc shrinks an
# arena as soon as its free top reaches the trim threshold; at its 128 KiB default (which a
# fixed mmap threshold also fixes) that was two to three calls per unlink, each with page
# faults and TLB flushes after it.  A count of system calls, not a time: the count does not
# depend on the machine's speed.
# timeout: 180
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd strace

N=1000
small_files "$MNT/churn" "$N"
pid=$(mounter_worker_pid)
[ -n "$pid" ] || fail "no mounter process"
strace_calls -f "$pid" madvise,brk rm -rf "$MNT/churn"
calls=$STRACE_CALLS
grep -q "attached with" "$WORK/strace.err" || fail "strace did not trace the worker's threads"
note "madvise + brk during the removal of $N files: $calls"
[ "$calls" -lt 100 ] || fail "$calls madvise/brk calls for $N unlinks (allocator churn): $(cat "$WORK/strace")"
[ ! -e "$MNT/churn" ] || fail "churn still there after rm -rf"
exit 0
