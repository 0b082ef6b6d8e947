# shellcheck shell=bash
# lib.sh -- helpers sourced by tests/mount/cases/*.sh (not a case itself).
#
# The runner exports MNT KEGFS META WORK OBJDIR VOL STORAGE META_KIND BUCKET MT_LOG
# MT_MOUNT_EXTRA KEG_SYSCALLS KEG_FSMODEL.  Run a case by hand against any
# directory:  MNT=/tmp/somedir bash tests/mount/cases/model.sh
# (cases that need kegfs itself -- remount, corrupt_block, ... -- then skip).
set -uo pipefail

MT_CASE=${MT_CASE:-$(basename "$0" .sh)}
: "${MNT:?MNT must name the directory under test}"
KEGFS=${KEGFS:-}
META=${META:-}
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/kegmt-hand.XXXX")}
OBJDIR=${OBJDIR:-}
STORAGE=${STORAGE:-}
MT_LOG=${MT_LOG:-$WORK/mounter.log}
MT_MOUNT_EXTRA=${MT_MOUNT_EXTRA:-}

fail() {
  echo "FAIL $MT_CASE: $*"
  exit 1
}

# soft_fail MSG: report a failure but go on (the case ends with `finish`).
MT_SOFT_FAILS=0
soft_fail() {
  echo "FAIL $MT_CASE: $*"
  MT_SOFT_FAILS=$((MT_SOFT_FAILS + 1))
}

# finish: the last line of a case that uses soft_fail.
finish() {
  [ "$MT_SOFT_FAILS" = 0 ] || exit 1
  exit 0
}

skip() {
  echo "SKIP $MT_CASE: $*"
  exit 77
}

note() {
  echo "# $*"
}

need_cmd() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || skip "command '$c' not installed"
  done
}

# A C helper: $KEG_SYSCALLS / $KEG_FSMODEL from the runner, else on PATH.
need_bin() {   # need_bin VAR NAME
  local var=$1 name=$2 path
  path=${!var:-}
  if [ -z "$path" ] || [ ! -x "$path" ]; then
    path=$(command -v "$name" 2>/dev/null) || skip "$name not built (set $var)"
  fi
  printf -v "$var" '%s' "$path"
}

need_kegfs() {
  [ -n "$KEGFS" ] && [ -n "$META" ] || skip "needs a kegfs mount (run through run-tests.sh)"
}

need_objdir() {
  [ -n "$OBJDIR" ] && [ -d "$OBJDIR" ] || skip "needs file storage (OBJDIR)"
}

assert_eq() {   # assert_eq GOT WANT WHAT
  [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"
}

is_mounted() {
  grep -qs " $MNT " /proc/self/mountinfo
}

# the first process of the mounter: the supervisor (or the only process with --no-supervisor)
mounter_pid() {
  pgrep -f "kegfs.* mount .*$MNT\$" 2>/dev/null | head -1
}

# the process that serves FUSE requests: the supervisor's worker child, else mounter_pid
mounter_worker_pid() {
  local sup w
  sup=$(mounter_pid)
  [ -n "$sup" ] || return 0
  w=$(pgrep -P "$sup" -f "kegfs.* mount " 2>/dev/null | head -1)
  echo "${w:-$sup}"
}

# every process of the mounter (supervisor and worker), one pid per line
mounter_pids() {
  pgrep -f "kegfs.* mount .*$MNT\$" 2>/dev/null
}

mt_umount() {
  "$KEGFS" umount "$MNT" || fail "kegfs umount $MNT failed"
  is_mounted && fail "$MNT still mounted after kegfs umount"
  [ -z "$(mounter_pid)" ] || fail "mounter still running after kegfs umount"
  return 0
}

mt_mount() {   # mt_mount [EXTRA ARGS]
  # shellcheck disable=SC2086
  "$KEGFS" mount -d --log-file "$MT_LOG" $MT_MOUNT_EXTRA "$@" "$META" "$MNT" \
    || fail "kegfs mount $META $MNT failed"
  is_mounted || fail "$MNT is not mounted after kegfs mount -d returned"
}

flip_byte() {   # flip_byte FILE OFFSET: changes the byte at OFFSET (xor 0x40), so the file
  # always differs afterwards (setting a fixed value leaves random data unchanged 1 time
  # in 256); prints "OLD -> NEW"
  local old new
  old=$(dd if="$1" bs=1 skip="$2" count=1 status=none | od -An -tu1 | tr -d ' ')
  [ -n "$old" ] || fail "flip_byte: $1 has no byte at $2"
  new=$(( old ^ 0x40 ))
  printf "$(printf '\\%03o' $new)" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none \
    || fail "flip_byte: cannot write $1"
  echo "$old -> $new"
}

# expect_fail REGEX CMD...: CMD must exit non-zero and print a line matching REGEX.
expect_fail() {
  local re=$1 out rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  [ $rc != 0 ] || fail "'$*' succeeded, expected failure ($out)"
  echo "$out" | grep -qiE -- "$re" || fail "'$*' failed (rc $rc) without a message matching /$re/: $out"
  note "ok: '$*' -> rc $rc: $(echo "$out" | head -1)"
}

# Run a command as uid/gid 65534 in the current directory.
as_nobody() {
  setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
}

# Wait up to N seconds for a command to succeed.
wait_for() {   # wait_for SECONDS CMD...
  local t=$1 i
  shift
  for i in $(seq 1 $((t * 10))); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

# start_locker FILE: a background process that takes a flock and a write lock on bytes
# 0-99 of FILE and holds them until killed; sets LOCKER to its pid (no command
# substitution: fail must end the case).
start_locker() {
  local file=$1
  python3 - "$file" > "$WORK/locker.out" 2>&1 <<'PY' &
import fcntl, sys, time
f = open(sys.argv[1], "r+")
fcntl.flock(f, fcntl.LOCK_EX)
fcntl.lockf(f, fcntl.LOCK_EX, 100, 0)
print("locked", flush=True)
time.sleep(600)
PY
  LOCKER=$!
  wait_for 20 grep -q locked "$WORK/locker.out" || fail "the locker did not lock: $(cat "$WORK/locker.out")"
}

# locks_free FILE: succeeds when a flock and a write lock on bytes 0-99 of FILE can both
# be taken at once (they are given back)
locks_free() {
  flock -n "$1" true && python3 - "$1" <<'PY'
import fcntl, sys
f = open(sys.argv[1], "r+")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
PY
}

# small_files DIR N: makes DIR with N files f0..f<N-1> of a few bytes each, then syncs
small_files() {
  local d=$1 n=$2 i
  mkdir "$d" || fail "mkdir $d"
  for ((i = 0; i < n; i++)); do
    printf 'file %d\n' "$i" > "$d/f$i" || fail "create $d/f$i"
  done
  sync
}

# strace_calls [-f] ID CALLS CMD...: runs CMD while `strace -c` traces the thread ID (with
# -f: every thread of process ID) for the comma-separated system calls CALLS, and sets
# STRACE_CALLS to how many of them were made (no command substitution: fail must end the
# case).  The table is kept in $WORK/strace.
strace_calls() {
  local f=() id calls spid
  [ "$1" = -f ] && { f=(-f); shift; }
  id=$1 calls=$2
  shift 2
  strace "${f[@]}" -c -e trace="$calls" -p "$id" -o "$WORK/strace" 2> "$WORK/strace.err" &
  spid=$!
  # strace says "attached" (with N threads, for a process) once it traces them all
  wait_for 10 grep -q "attached" "$WORK/strace.err" || { kill "$spid"; fail "strace did not attach to $id"; }
  sleep 0.5
  "$@" || { kill "$spid"; fail "'$*' failed"; }
  sleep 0.2
  kill -INT "$spid"
  wait "$spid"
  # strace -c: "% time  seconds  usecs/call  calls  [errors]  syscall"; it writes no
  # table at all when none of the traced calls was made
  [ -e "$WORK/strace" ] || : > "$WORK/strace"
  STRACE_CALLS=$(awk -v want=",$calls," 'index(want, "," $NF ",") { n += $4 } END { print n + 0 }' \
    "$WORK/strace")
}

# fuse_ops SOCK OP: how many FUSE requests of kind OP the mounter served, from its metrics
# (mounted with --metrics unix:SOCK); 0 when there is no such sample
fuse_ops() {
  curl -sf --max-time 5 --unix-socket "$1" http://localhost/metrics |
    awk -v op="op=\"$2\"" '$1 ~ /^kegfs_fuse_ops_total\{/ && index($1, op) {print $2; f=1}
                            END {if (!f) print 0}'
}

# crash_worker_during MODE HELPER ARGS...: runs `python3 HELPER ARGS...` in the background,
# with crash_check.py (what the helpers share) on its PYTHONPATH;
# when it creates $WORK/ready, kills the supervisor's worker with SIGKILL, waits for the new
# worker and creates $WORK/go, which the helper waits for before it goes on.  The helper's
# output is shown prefixed with MODE.  Fails unless the helper exits 0 and the supervisor
# logged exactly one new "died with uncommitted data in 1 open file handle".
crash_worker_during() {
  local mode=$1 helper=$2 sup w1 py rc n0 n1 out=$WORK/helper.$1
  shift 2
  n0=$(grep -c "died with uncommitted data in 1 open file handle" "$MT_LOG")
  sup=$(mounter_pid)
  [ -n "$sup" ] || fail "$mode: no mounter pid"
  w1=$(pgrep -P "$sup" | head -1)
  [ -n "$w1" ] || skip "no worker process under the supervisor $sup (not root? --no-supervisor?)"
  rm -f "$WORK/ready" "$WORK/go"
  PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")${PYTHONPATH:+:$PYTHONPATH}" \
    "$PY" "$helper" "$@" > "$out" 2>&1 &
  py=$!
  wait_for 60 test -e "$WORK/ready" || fail "$mode: the helper did not get ready: $(cat "$out")"
  kill -9 "$w1"
  wait_for 10 sh -c "w=\$(pgrep -P $sup | head -1); [ -n \"\$w\" ] && [ \"\$w\" != $w1 ]" \
    || fail "$mode: no new worker within 10 s"
  touch "$WORK/go"     # nothing touches the mount before the helper: a listing would
  wait "$py"           # refresh the sizes the kernel caches
  rc=$?
  sed "s/^/# $mode: /" "$out"
  [ "$rc" = 0 ] || fail "$mode: the helper failed (rc $rc)"
  n1=$(grep -c "died with uncommitted data in 1 open file handle" "$MT_LOG")
  [ "$n1" = $((n0 + 1)) ] \
    || fail "$mode: want one new ERROR line from the supervisor naming the lost handle, got $((n1 - n0))"
}
