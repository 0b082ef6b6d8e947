#!/usr/bin/env bash
# run-tests.sh -- run the real-FUSE mount cases (tests/mount/cases/*.sh) against kegfs.
#
# For every case (sorted; *_long.sh only with --long) the runner
#   1. makes a work dir ${KEG_TEST_TMP:-/tmp}/kegmt.XXXX (mnt/, objects/, logs),
#   2. formats a fresh volume (sqlite db in the work dir, or a fresh Redis ns=;
#      objects in WORK/objects, or a fresh prefix volume in the S3 bucket),
#   3. mounts it with `kegfs mount -d --log-file WORK/mounter.log`,
#   4. runs the case with MNT KEGFS META WORK OBJDIR ... exported, under a
#      timeout and (when cgroup v2 is writable) in its own cgroup, killed after,
#   5. unmounts, then fails the case if the mounter log has ERROR/FATAL lines
#      that the case did not allow, or if a sanitizer report was written.
# Case headers (comment lines anywhere in the case):
#   # timeout: N            seconds (default 300, or --timeout)
#   # allow-log: REGEX      an ERROR line matching REGEX is expected (repeatable)
#   # format: ARGS          extra `kegfs format` arguments
#   # mount: ARGS           extra `kegfs mount` arguments
#   # needs: file|s3|sqlite|redis   skip unless the backend matches
# A case exits 0 = pass, 77 = skipped, anything else = fail.
# Output: one line per case, then exactly "N passed, M failed[, K skipped]".
#
# Usage: run-tests.sh --kegfs PATH [--meta sqlite|redis] [--storage file|s3]
#                     [--only REGEX] [--long] [--keep] [--timeout N] [--bin-dir DIR]
#                     [-v|--verbose  (also show the "# note" lines of passed cases)]
# Environment: KEG_TEST_TMP, KEG_TEST_REDIS_URL (redis://127.0.0.1:PORT/0),
#   KEG_TEST_S3_BUCKET (http://127.0.0.1:7480/BUCKET), KEG_TEST_S3_ACCESS_KEY,
#   KEG_TEST_S3_SECRET_KEY, KEG_TEST_MOUNT_OPTS (extra mount arguments for all cases).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
KEGFS=""
META_KIND=sqlite
STORAGE="file"
ONLY=""
LONG=0
KEEP=0
VERBOSE=0
DEF_TIMEOUT=300
BIN_DIR=""

usage() {
  sed -n '/^# Usage:/,/^# Environment/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    --kegfs) KEGFS=${2:-}; shift ;;
    --meta) META_KIND=${2:-}; shift ;;
    --storage) STORAGE=${2:-}; shift ;;
    --only) ONLY=${2:-}; shift ;;
    --long) LONG=1 ;;
    --keep) KEEP=1 ;;
    -v|--verbose) VERBOSE=1 ;;
    --timeout) DEF_TIMEOUT=${2:-}; shift ;;
    --bin-dir) BIN_DIR=${2:-}; shift ;;
    -h|--help) usage ;;
    *) echo "run-tests.sh: unknown option '$1'" >&2; usage ;;
  esac
  shift
done

[ -n "$KEGFS" ] || { echo "run-tests.sh: --kegfs PATH is required" >&2; usage; }
case "$META_KIND" in sqlite|redis) ;; *) echo "run-tests.sh: --meta must be sqlite or redis" >&2; exit 2 ;; esac
case "$STORAGE" in file|s3) ;; *) echo "run-tests.sh: --storage must be file or s3" >&2; exit 2 ;; esac
case "$DEF_TIMEOUT" in ''|*[!0-9]*) echo "run-tests.sh: --timeout needs seconds" >&2; exit 2 ;; esac

skip_all() {
  echo "run-tests.sh: skipped: $*"
  echo "0 passed, 0 failed, 1 skipped"
  exit 77
}

[ -x "$KEGFS" ] || skip_all "kegfs binary '$KEGFS' is missing or not executable"
KEGFS=$(cd "$(dirname "$KEGFS")" && pwd)/$(basename "$KEGFS")
[ "$(id -u)" = 0 ] || skip_all "needs root (FUSE mounts, uid switching)"
[ -c /dev/fuse ] || skip_all "no /dev/fuse"
if [ -z "$BIN_DIR" ]; then
  BIN_DIR=$(cd "$(dirname "$KEGFS")/.." && pwd)/tests/mount
fi
# every C helper BIN_DIR/keg_NAME is exported as KEG_NAME (KEG_SYSCALLS, KEG_FSMODEL, ...)
export KEG_SYSCALLS=$BIN_DIR/keg_syscalls
export KEG_FSMODEL=$BIN_DIR/keg_fsmodel
for helper in "$BIN_DIR"/keg_*; do
  [ -f "$helper" ] && [ -x "$helper" ] || continue
  hname=$(basename "$helper" | tr 'a-z' 'A-Z' | tr -c 'A-Z0-9_\n' '_')
  export "$hname=$helper"
done

if [ "$META_KIND" = redis ]; then
  [ -n "${KEG_TEST_REDIS_URL:-}" ] || skip_all "--meta redis needs KEG_TEST_REDIS_URL"
fi
if [ "$STORAGE" = s3 ]; then
  [ -n "${KEG_TEST_S3_BUCKET:-}" ] || skip_all "--storage s3 needs KEG_TEST_S3_BUCKET"
  export AWS_ACCESS_KEY_ID=${KEG_TEST_S3_ACCESS_KEY:-${AWS_ACCESS_KEY_ID:-}}
  export AWS_SECRET_ACCESS_KEY=${KEG_TEST_S3_SECRET_KEY:-${AWS_SECRET_ACCESS_KEY:-}}
fi

TMPROOT=${KEG_TEST_TMP:-/tmp}
mkdir -p "$TMPROOT" || { echo "run-tests.sh: cannot create $TMPROOT" >&2; exit 2; }
TMPROOT=$(cd "$TMPROOT" && pwd)

#--- cgroup v2 (optional) -------------------------------------------------
CG_BASE=""
for d in /sys/fs/cgroup /sys/fs/cgroup/unified; do
  if [ "$(stat -fc %T "$d" 2>/dev/null)" = cgroup2fs ] && mkdir "$d/kegmt.$$" 2>/dev/null; then
    CG_BASE=$d/kegmt.$$
    break
  fi
done

cg_kill() {   # cg_kill DIR: kill every process in the group, remove it
  local cg=$1 pid
  [ -n "$cg" ] && [ -d "$cg" ] || return 0
  if [ -e "$cg/cgroup.kill" ]; then
    echo 1 > "$cg/cgroup.kill" 2>/dev/null
  else
    while read -r pid; do kill -9 "$pid" 2>/dev/null; done < "$cg/cgroup.procs"
  fi
  for _ in $(seq 1 50); do
    rmdir "$cg" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "run-tests.sh: warning: cgroup $cg did not empty" >&2
}

#--- per-case state, cleaned up by the trap ---------------------------------
CUR_WORK=""
CUR_CG=""
CUR_PID=""                      # the case's `timeout` process while it runs

is_mounted() {
  grep -qs " $1 " /proc/self/mountinfo
}

mounter_pids() {   # pids of mounters serving $1 (all started by this runner)
  pgrep -f "kegfs.* mount .*$1\$" 2>/dev/null || pgrep -f "kegfs mount.*$1" 2>/dev/null
}

unmount_cur() {
  local mnt=$1 pid
  [ -n "$mnt" ] || return 0
  if is_mounted "$mnt"; then
    timeout 120 "$KEGFS" umount "$mnt" >>"$CUR_WORK/umount.log" 2>&1
  fi
  if is_mounted "$mnt"; then
    echo "run-tests.sh: 'kegfs umount $mnt' failed; detaching" >>"$CUR_WORK/umount.log"
    UMOUNT_FAILED=1
    for pid in $(mounter_pids "$mnt"); do kill -TERM "$pid" 2>/dev/null; done
    sleep 1
    fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
  fi
  for pid in $(mounter_pids "$mnt"); do
    # a mounter still running after its mount went away is a bug too
    sleep 2
    if kill -0 "$pid" 2>/dev/null; then
      echo "run-tests.sh: mounter $pid still running after unmount; killed" >>"$CUR_WORK/umount.log"
      UMOUNT_FAILED=1
      kill -9 "$pid" 2>/dev/null
    fi
  done
}

# every FUSE mount below DIR (a case may add mount points), deepest first
mounts_under() {
  awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

unmount_all_under() {
  local m
  [ -n "$1" ] || return 0
  for m in $(mounts_under "$1"); do
    unmount_cur "$m"
  done
}

cg_kill_except_mounters() {
  local cg=$1 pid
  [ -n "$cg" ] && [ -f "$cg/cgroup.procs" ] || return 0
  while read -r pid; do
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qE 'kegfs.* mount ' && continue
    kill -9 "$pid" 2>/dev/null
  done < "$cg/cgroup.procs"
  sleep 0.2
}

cleanup() {
  trap - INT TERM EXIT
  [ -n "$CUR_PID" ] && kill -TERM "$CUR_PID" 2>/dev/null && sleep 0.5
  cg_kill_except_mounters "$CUR_CG"
  unmount_all_under "$CUR_WORK"
  cg_kill "$CUR_CG"
  if [ -n "$CUR_WORK" ] && [ $KEEP = 0 ]; then
    rm -rf "$CUR_WORK"
  fi
  [ -n "$CG_BASE" ] && rmdir "$CG_BASE" 2>/dev/null
}
on_signal() {
  echo
  echo "run-tests.sh: interrupted; cleaning up"
  cleanup
  exit 130
}
trap on_signal INT TERM HUP
trap cleanup EXIT

#--- helpers ------------------------------------------------------------------
header() {   # header CASEFILE KEY: values of "# KEY: value" lines, one per line
  sed -n "s/^# $2: *//p" "$1"
}

volname() {   # a unique, DNS-label-like volume name
  local n
  n=$(echo "$1" | tr 'A-Z_' 'a-z-' | tr -cd 'a-z0-9-' | cut -c1-30)
  echo "mt-$n-$$-$RANDOM"
}

tail_file() {   # tail_file FILE N TITLE
  [ -s "$1" ] || return 0
  echo "    --- $3 (last $2 lines of $1) ---"
  tail -n "$2" "$1" | sed 's/^/    | /'
}

#--- run one case ---------------------------------------------------------
PASSED=0
FAILED=0
SKIPPED=0
RESULTS=()

run_case() {
  local case=$1 name t0 timeout need reason="" rc allow fmt_extra mnt_extra
  name=$(basename "$case" .sh)
  t0=$(date +%s%N)
  UMOUNT_FAILED=0

  for need in $(header "$case" needs); do
    case "$need" in
      file|s3) [ "$need" = "$STORAGE" ] || reason="needs storage $need" ;;
      sqlite|redis) [ "$need" = "$META_KIND" ] || reason="needs meta $need" ;;
    esac
  done
  if [ -n "$reason" ]; then
    report SKIP "$name" "$t0" "$reason"
    return
  fi

  timeout=$(header "$case" timeout | head -1 | awk '{print $1}')
  case "$timeout" in ''|*[!0-9]*) timeout=$DEF_TIMEOUT ;; esac
  fmt_extra=$(header "$case" format | tr '\n' ' ')
  mnt_extra=$(header "$case" mount | tr '\n' ' ')

  CUR_WORK=$(mktemp -d "$TMPROOT/kegmt.XXXX")
  chmod 0755 "$CUR_WORK"        # uid 65534 must reach the mount point
  local WORK=$CUR_WORK MNT=$CUR_WORK/mnt LOG=$CUR_WORK/mounter.log VOL META OBJDIR BUCKET
  mkdir -p "$MNT"
  VOL=$(volname "$name")
  case "$META_KIND" in
    sqlite) META="sqlite3://$WORK/meta.db" ;;
    redis)
      if [[ "$KEG_TEST_REDIS_URL" == *\?* ]]; then META="$KEG_TEST_REDIS_URL&ns=$VOL"
      else META="$KEG_TEST_REDIS_URL?ns=$VOL"; fi ;;
  esac
  case "$STORAGE" in
    file) OBJDIR=$WORK/objects; BUCKET=$OBJDIR; mkdir -p "$OBJDIR" ;;
    s3) OBJDIR=""; BUCKET=$KEG_TEST_S3_BUCKET ;;
  esac
  # sanitizer reports of the kegfs processes land in the work dir
  local asan="log_path=$WORK/sanitizer"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}$asan"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}$asan:print_stacktrace=1"

  # shellcheck disable=SC2086
  if ! "$KEGFS" format --storage "$STORAGE" --bucket "$BUCKET" $fmt_extra "$META" "$VOL" \
       >"$WORK/format.log" 2>&1; then
    report FAIL "$name" "$t0" "kegfs format failed"
    tail_file "$WORK/format.log" 20 "format output"
    finish_case 1
    return
  fi
  # shellcheck disable=SC2086
  if ! timeout 60 "$KEGFS" mount -d --log-file "$LOG" $mnt_extra ${KEG_TEST_MOUNT_OPTS:-} \
       "$META" "$MNT" >"$WORK/mount.log" 2>&1 || ! is_mounted "$MNT"; then
    report FAIL "$name" "$t0" "kegfs mount failed"
    tail_file "$WORK/mount.log" 20 "mount output"
    tail_file "$LOG" 30 "mounter log"
    finish_case 1
    return
  fi

  # the case runs in its own cgroup (if any), under a timeout
  if [ -n "$CG_BASE" ]; then
    CUR_CG=$CG_BASE/$name
    mkdir -p "$CUR_CG" 2>/dev/null || CUR_CG=""
  fi
  (
    cd "$WORK" || exit 1
    export MNT KEGFS META WORK OBJDIR VOL STORAGE META_KIND BUCKET
    export MT_LOG=$LOG MT_MOUNT_EXTRA="$mnt_extra ${KEG_TEST_MOUNT_OPTS:-}"
    export MT_HERE=$here MT_CASE=$name MT_LONG=$LONG
    [ -n "$CUR_CG" ] && echo $BASHPID > "$CUR_CG/cgroup.procs" 2>/dev/null
    exec timeout -k 10 "$timeout" bash "$case"
  ) </dev/null >"$WORK/case.log" 2>&1 &
  # (in the background: `wait` returns at once when a trapped signal arrives)
  CUR_PID=$!
  wait $CUR_PID
  rc=$?
  CUR_PID=""
  # Mounters the case started (remounts, extra mount points) live in its cgroup: kill
  # the case's other leftovers first, unmount cleanly, then kill what is left.
  cg_kill_except_mounters "$CUR_CG"
  unmount_all_under "$WORK"
  cg_kill "$CUR_CG"
  CUR_CG=""

  local errs=""
  if [ -f "$LOG" ]; then
    errs=$(grep -E ' (ERROR|FATAL) ' "$LOG")
    while IFS= read -r allow; do
      [ -n "$allow" ] && [ -n "$errs" ] && errs=$(echo "$errs" | grep -Ev -- "$allow")
    done < <(header "$case" allow-log)
  fi
  local san
  san=$(ls "$WORK"/sanitizer.* 2>/dev/null | head -1)

  if [ $rc = 77 ]; then
    report SKIP "$name" "$t0" "$(grep -m1 -E '^SKIP' "$WORK/case.log" | cut -c1-100)"
    finish_case 0
  elif [ $rc = 124 ] || [ $rc = 137 ]; then
    report FAIL "$name" "$t0" "timed out after $timeout s"
    show_failure
    finish_case 1
  elif [ $rc != 0 ]; then
    report FAIL "$name" "$t0" "exit $rc: $(grep -m1 -E '^FAIL' "$WORK/case.log" | cut -c1-120)"
    show_failure
    finish_case 1
  elif [ -n "$errs" ]; then
    report FAIL "$name" "$t0" "unexpected ERROR lines in the mounter log"
    echo "$errs" | head -20 | sed 's/^/    ! /'
    finish_case 1
  elif [ -n "$san" ]; then
    report FAIL "$name" "$t0" "sanitizer report $san"
    head -40 "$san" | sed 's/^/    ! /'
    finish_case 1
  elif [ $UMOUNT_FAILED = 1 ]; then
    report FAIL "$name" "$t0" "unmount failed"
    tail_file "$WORK/umount.log" 20 "umount output"
    tail_file "$LOG" 30 "mounter log"
    finish_case 1
  else
    report PASS "$name" "$t0" ""
    [ $VERBOSE = 1 ] && grep -E '^(# |SKIP)' "$WORK/case.log" | head -20 | sed 's/^/    /'
    finish_case 0
  fi
}

show_failure() {
  tail_file "$CUR_WORK/case.log" 40 "case output"
  tail_file "$CUR_WORK/mounter.log" 40 "mounter log"
  tail_file "$CUR_WORK/umount.log" 10 "umount output"
}

# finish_case FAILED: remove the work dir (a failed case keeps its logs)
finish_case() {
  if [ $KEEP = 1 ]; then
    echo "    (work dir kept: $CUR_WORK)"
  elif [ "$1" = 1 ]; then
    find "$CUR_WORK" -mindepth 1 -maxdepth 1 ! -name '*.log' ! -name 'sanitizer.*' \
      -exec rm -rf {} + 2>/dev/null
    echo "    (logs kept in $CUR_WORK)"
  else
    rm -rf "$CUR_WORK"
  fi
  CUR_WORK=""
}

report() {   # report PASS|FAIL|SKIP NAME T0 DETAIL
  local secs
  secs=$(awk -v a="$3" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  printf '%-4s %-22s %7s s%s\n' "$1" "$2" "$secs" "${4:+  $4}"
  RESULTS+=("$1 $2")
  case "$1" in
    PASS) PASSED=$((PASSED + 1)) ;;
    FAIL) FAILED=$((FAILED + 1)) ;;
    SKIP) SKIPPED=$((SKIPPED + 1)) ;;
  esac
}

#--- main -----------------------------------------------------------------------
echo "mount suite: kegfs=$KEGFS meta=$META_KIND storage=$STORAGE tmp=$TMPROOT" \
     "cgroup=${CG_BASE:-none}"
n=0
for case in "$here"/cases/*.sh; do
  [ -e "$case" ] || continue
  name=$(basename "$case" .sh)
  if [[ "$name" == *_long ]] && [ $LONG = 0 ]; then
    continue
  fi
  if [ -n "$ONLY" ] && ! [[ "$name" =~ $ONLY ]]; then
    continue
  fi
  n=$((n + 1))
  run_case "$case"
done
[ $n -gt 0 ] || echo "run-tests.sh: no case matched"

if [ $SKIPPED -gt 0 ]; then
  echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
else
  echo "$PASSED passed, $FAILED failed"
fi
[ $FAILED = 0 ]
