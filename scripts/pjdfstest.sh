#!/usr/bin/env bash
# pjdfstest.sh -- run the pjdfstest POSIX suite on a fresh KegFS mount and summarise it.
#
# pjdfstest is built OUTSIDE the repository (default /tmp/pjdfstest) from a git dir of
# github.com/pjd/pjdfstest (--git-dir, or $PJDFSTEST_GIT) or an unpacked source tree
# (--src).  It is never committed here.  Needs: autoconf automake gcc make perl (prove).
#
# Usage: scripts/pjdfstest.sh --kegfs BUILD/mounter/kegfs [--git-dir DIR | --src DIR]
#                             [--meta-url URL --storage file|s3 --bucket B] [--out FILE]
#                             [--tests SUBDIR...] [--keep]
# Without --meta-url a fresh sqlite+file volume is made in a temporary directory.
# Output: the full prove log (FILE.log) and a summary (FILE, default
# ${KEG_TEST_TMP:-/tmp}/pjdfstest-summary.txt): failed test files with the failed
# assertion numbers, and the total "Tests=..." line.  Exit 0 if prove passed.
set -uo pipefail

KEGFS=""
GITDIR=${PJDFSTEST_GIT:-/work/.mirror/pjd+pjdfstest/repo}
SRC=""
BUILD_DIR=${PJDFSTEST_DIR:-/tmp/pjdfstest}
META_URL=""
STORAGE="file"
BUCKET=""
OUT=""
KEEP=0
TESTS=()

while [ $# -gt 0 ]; do
  case "$1" in
    --kegfs) KEGFS=$2; shift ;;
    --git-dir) GITDIR=$2; shift ;;
    --src) SRC=$2; shift ;;
    --meta-url) META_URL=$2; shift ;;
    --storage) STORAGE=$2; shift ;;
    --bucket) BUCKET=$2; shift ;;
    --out) OUT=$2; shift ;;
    --tests) TESTS+=("$2"); shift ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "pjdfstest.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$KEGFS" ] && [ -x "$KEGFS" ] || { echo "pjdfstest.sh: --kegfs PATH to the kegfs binary is required" >&2; exit 2; }
KEGFS=$(cd "$(dirname "$KEGFS")" && pwd)/$(basename "$KEGFS")
[ "$(id -u)" = 0 ] || { echo "pjdfstest.sh: needs root" >&2; exit 77; }
for c in autoreconf make gcc prove; do
  command -v $c >/dev/null || { echo "pjdfstest.sh: '$c' missing (apt-get install autoconf automake gcc make perl)" >&2; exit 77; }
done
TMP=${KEG_TEST_TMP:-/tmp}
OUT=${OUT:-$TMP/pjdfstest-summary.txt}

#--- build pjdfstest outside the repo ---------------------------------------
if [ ! -x "$BUILD_DIR/pjdfstest" ]; then
  rm -rf "$BUILD_DIR"
  mkdir -p "$BUILD_DIR"
  if [ -n "$SRC" ]; then
    cp -a "$SRC"/. "$BUILD_DIR"/
  elif [ -d "$GITDIR" ]; then
    git --git-dir="$GITDIR" archive HEAD | tar -x -C "$BUILD_DIR" || exit 1
  else
    echo "pjdfstest.sh: no pjdfstest sources (give --git-dir or --src)" >&2
    exit 2
  fi
  (cd "$BUILD_DIR" && autoreconf -ifs >/dev/null 2>&1 && ./configure >/dev/null && make -j2 pjdfstest >/dev/null) \
    || { echo "pjdfstest.sh: building pjdfstest in $BUILD_DIR failed" >&2; exit 1; }
fi

#--- a fresh volume and mount --------------------------------------------------
WORK=$(mktemp -d "$TMP/kegpjd.XXXX")
chmod 0755 "$WORK"
MNT=$WORK/mnt
mkdir -p "$MNT"
cleanup() {
  cd /
  if grep -qs " $MNT " /proc/self/mountinfo; then
    "$KEGFS" umount "$MNT" >/dev/null 2>&1 || umount -l "$MNT"
  fi
  [ $KEEP = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "$META_URL" ]; then
  META_URL="sqlite3://$WORK/meta.db"
  BUCKET=$WORK/objects
  mkdir -p "$BUCKET"
  STORAGE="file"
fi
"$KEGFS" format --storage "$STORAGE" --bucket "$BUCKET" "$META_URL" "pjd$$" >/dev/null \
  || { echo "pjdfstest.sh: format failed" >&2; exit 1; }
# allow_other: pjdfstest runs many checks as other users (a CLI mount is the owner's only)
"$KEGFS" mount -d -o allow_other --log-file "$WORK/mounter.log" "$META_URL" "$MNT" \
  || { echo "pjdfstest.sh: mount failed" >&2; exit 1; }

#--- run --------------------------------------------------------------------------
mkdir -p "$MNT/pjd"
cd "$MNT/pjd" || exit 1
if [ ${#TESTS[@]} = 0 ]; then
  TESTS=("$BUILD_DIR/tests")
else
  for i in "${!TESTS[@]}"; do TESTS[$i]=$BUILD_DIR/tests/${TESTS[$i]}; done
fi
echo "pjdfstest.sh: prove -rv ${TESTS[*]} in $MNT/pjd"
t0=$SECONDS
prove -rv "${TESTS[@]}" > "$OUT.log" 2>&1
rc=$?
cd /

#--- summary ------------------------------------------------------------------------
{
  echo "pjdfstest $(git --git-dir="$GITDIR" rev-parse --short HEAD 2>/dev/null) on KegFS" \
       "($("$KEGFS" --version 2>/dev/null | head -1)), $(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - t0)) s"
  echo "volume: $STORAGE storage, meta ${META_URL%%:*}"
  echo
  # prove prints "Failed N/M subtests" per file and the "Failed tests:" lists at the end
  sed -n '/^Test Summary Report/,$p' "$OUT.log"
  echo
  echo "failed assertions per file:"
  awk '/^\/.*\.t \.\./ { f = $1; sub(".*/tests/", "", f) }
       /^not ok/ && !/# TODO/ { n[f]++; total++ }
       END { for (k in n) printf "  %-28s %d\n", k, n[k]; printf "total failed assertions: %d\n", total }' \
    "$OUT.log" | sort
} > "$OUT"
cat "$OUT"
grep -q ' ERROR ' "$WORK/mounter.log" && {
  echo "mounter log ERROR lines:"
  grep ' ERROR ' "$WORK/mounter.log" | head -20
} | tee -a "$OUT"
echo "pjdfstest.sh: full log $OUT.log"
exit $rc
