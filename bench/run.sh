#!/usr/bin/env bash
# run.sh -- the KegFS benchmark (`make bench`): KegFS, local disk, the FUSE passthrough and
# the peers (s3fs, rclone mount) measured in one run on one machine, with the goals checked.
#
#   bench/run.sh BUILD_DIR [--quick] [--reps N] [--slow-reps N] [--slow-targets LIST]
#                          [--fio-reps N] [--targets LIST] [--workloads LIST] [--out DIR]
#                          [--cap SEC] [--keep]
#
# Targets (LIST, comma-separated, default all):
#   disk     a directory on the local file system of the run directory (no FUSE)
#   pthp     libfuse's passthrough_hp (bench/fuse-ref.sh builds it from Debian's fuse3
#            source), mounted as KegFS mounts: default_permissions + allow_other, kernel
#            cache timeouts 1 s, no kernel writeback cache (the reference of the goals)
#   pthpwb   the same with the kernel writeback cache on (upstream's default; a second line)
#   kpt      bench/'s own keg_passthrough (a second line)
#   sqlite   KegFS, SQLite metadata + file object store (the embedded default)
#   s3wb     KegFS, Redis metadata + S3 objects, --writeback, SSD cache
#   s3       KegFS, Redis metadata + S3 objects, no writeback
#   rclone   rclone mount --vfs-cache-mode writes, on the same S3 gateway
#   s3fs     s3fs, on the same S3 gateway
# Workloads (LIST, default all):
#   smallfile  bench/smallfile's four workloads (create, randmod, append, empty), N files
#   meta       bench/fsops: create, rename, stat, unlink of M names in one dir; readdir of
#              a directory of R names (made first, not timed)
#   seq        bench/seqio: one file of SEQ_MIB MiB written in 1 MiB calls and fsync()ed,
#              then read back (its page-cache pages dropped first) with every byte checked
#   fio        fio: write, read, randwrite, randread x 4 MiB and 4 KiB blocks x 1 and 4
#              jobs (psync, end_fsync for writes, page cache invalidated before each job)
#   tar        tar -xf of a tarball of /usr/include (no chown)
#   git        git clone file:// of a local repository of a few thousand files
#   build      make -j2 of a copy of the first 8 C files of the project's core/ (cc -O1 -c,
#              ar; a Makefile generated here)
#   mfiles     10,000 files in 100 dirs: create, ls -lR, rm -rf
# Each figure is repeated N times (--reps, default 3) and the median, min and max are
# reported; the slow targets (--slow-targets, default s3,rclone,s3fs, whose repetitions take
# minutes) run --slow-reps times (default 1) and fio runs once per target (--fio-reps).
# Sizes: small files N=2000, metadata ops M=1000 names, readdir R=10,000 names, sequential 1024 MiB (256 MiB on the
# slow targets), fio 16 MiB per job and at most 1 s, tar of /usr/include, a repository of
# 3000 files, 10,000 files in 100 dirs.  The
# workloads run in the order smallfile, tar, git, mfiles, build, seq, fio, meta, each on every
# target in turn (raw.txt grows as they finish: bench/report.py OUT reports a cut run).  For the targets that buffer writes (s3wb, rclone,
# s3fs) the time from the end of each writing workload until its data is in the object
# store (the durability point) is measured: s3wb until its staging area is empty; rclone
# and s3fs until a listing of the workload's prefix in the bucket holds all its files
# with their bytes.  Every timed command runs under `timeout --cap` (default 300 s).
# --quick: tiny sizes, 1 repetition, the fio matrix cut to 2 jobs; a smoke test.
#
# Servers on 127.0.0.1, started and stopped here: Redis (scripts/redis-server.sh) on
# $KEG_BENCH_REDIS_PORT (6395); the Ceph S3 gateway (scripts/s3-server.sh) in
# $KEG_BENCH_S3_DIR (/tmp/bench-s3) on $KEG_S3_PORT (7680) / $KEG_S3_MON_PORT (6890).
# Credentials reach s3fs and rclone in files (0600), never on a command line.
# Run dir $KEG_BENCH_DIR (default /tmp/bench-run; emptied first).  Results go to --out
# (default BUILD_DIR/bench-results): raw.txt, machine.json, results.json, results.md,
# *.png (bench/report.py); the performance goals are printed.
# Exit: 0 all goals met, 1 a goal missed or a run failed, 2 setup error / usage.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)

usage() {
  sed -n '/^#   bench\/run.sh/,/^#$/p' "$0" | sed 's/^#   //; /^#$/d' >&2
  exit 2
}

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "run.sh: no build dir '$1'" >&2; exit 2; }
shift
ALL_TARGETS=disk,pthp,pthpwb,kpt,sqlite,s3wb,s3,rclone,s3fs
ALL_WORKLOADS=smallfile,tar,git,mfiles,build,seq,fio,meta
REPS=3
SLOW_REPS=1
FIO_REPS=1
TARGETS=$ALL_TARGETS
WORKLOADS=$ALL_WORKLOADS
OUT=""
CAP=300
SLOW_TARGETS=s3,rclone,s3fs
KEEP=0
QUICK=0
SETTLE=${KEG_BENCH_PHASE_SETTLE:-2}
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --reps) REPS=$2; shift ;;
    --slow-reps) SLOW_REPS=$2; shift ;;
    --slow-targets) SLOW_TARGETS=$2; shift ;;
    --fio-reps) FIO_REPS=$2; shift ;;
    --targets) TARGETS=$2; shift ;;
    --workloads) WORKLOADS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --cap) CAP=$2; shift ;;
    --keep) KEEP=1 ;;
    *) echo "run.sh: unknown option '$1'" >&2; usage ;;
  esac
  shift
done
for t in ${TARGETS//,/ }; do
  [[ ",$ALL_TARGETS," == *",$t,"* ]] || { echo "run.sh: unknown target '$t'" >&2; exit 2; }
done
for w in ${WORKLOADS//,/ }; do
  [[ ",$ALL_WORKLOADS," == *",$w,"* ]] || { echo "run.sh: unknown workload '$w'" >&2; exit 2; }
done

# sizes
SF_N=2000; META_N=1000; RD_N=10000; FIO_MIB=16; FIO_SECS=1; MF_DIRS=100; MF_PER=100
SEQ_MIB=1024; SEQ_SLOW_MIB=256
GIT_FILES=3000; TAR_SRC=/usr/include; BUILD_FILES=8
FIO_BS="4m 4k"; FIO_JOBS="1 4"
if [ $QUICK = 1 ]; then
  REPS=1; SLOW_REPS=1; FIO_REPS=1; CAP=120
  SF_N=100; META_N=300; RD_N=300; FIO_MIB=8; FIO_SECS=1; MF_DIRS=10; MF_PER=20
  SEQ_MIB=64; SEQ_SLOW_MIB=16
  GIT_FILES=200; TAR_SRC=/usr/include/linux; BUILD_FILES=2
  FIO_BS="4m 4k"; FIO_JOBS="1"
fi

D=${KEG_BENCH_DIR:-/tmp/bench-run}
OUT=${OUT:-$BUILD/bench-results}
REDIS_PORT=${KEG_BENCH_REDIS_PORT:-6395}
S3DIR=${KEG_BENCH_S3_DIR:-/tmp/bench-s3}
export KEG_S3_PORT=${KEG_S3_PORT:-7680}
export KEG_S3_MON_PORT=${KEG_S3_MON_PORT:-6890}
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (FUSE mounts with allow_other)" >&2; exit 2; }
[ -c /dev/fuse ] || { echo "run.sh: no /dev/fuse" >&2; exit 2; }
for c in fio tar git make cc python3 gnuplot; do
  command -v $c >/dev/null || { echo "run.sh: $c is missing (scripts/install-deps.sh bench)" >&2; exit 2; }
done

for m in $(awk -v d="$D/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo); do
  echo "run.sh: $m is still mounted from an earlier run; unmounting" >&2
  umount -l "$m" 2>/dev/null
done
rm -rf "$D"
mkdir -p "$D/bin" "$D/run" "$D/data" "$OUT"
export KEGFS_RUN_DIR=$D/run
RAW=$OUT/raw.txt
: > "$RAW"
rm -f "$OUT"/*.png "$OUT"/*.dat "$OUT"/*.gp "$OUT"/fio-*.json

# the binaries are copied so that a rebuild during the run does not change what runs
for b in mounter/kegfs bench/keg_passthrough bench/smallfile bench/fsops bench/seqio; do
  [ -x "$BUILD/$b" ] || { echo "run.sh: $BUILD/$b is missing (make build)" >&2; exit 2; }
  cp "$BUILD/$b" "$D/bin/"
done
KEGFS=$D/bin/kegfs; KPT=$D/bin/keg_passthrough; SF=$D/bin/smallfile; FSOPS=$D/bin/fsops
SEQIO=$D/bin/seqio

has() { [[ ",$TARGETS," == *",$1,"* ]]; }
hasw() { [[ ",$WORKLOADS," == *",$1,"* ]]; }
drop_target() { TARGETS=$(echo ",$TARGETS," | sed "s/,$1,/,/; s/^,//; s/,$//"); }
is_mounted() { grep -qs " $1 " /proc/self/mountinfo; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

if has pthp || has pthpwb; then
  PTHP=$("$here/fuse-ref.sh" "$BUILD" 2> "$D/fuse-ref.log") ||
    { tail -5 "$D/fuse-ref.log" >&2; echo "run.sh: no passthrough_hp; dropping pthp, pthpwb" >&2;
      drop_target pthp; drop_target pthpwb; }
fi
if has s3fs && ! command -v s3fs >/dev/null; then
  echo "run.sh: s3fs is not installed; dropping it" >&2; drop_target s3fs
fi
if has rclone && ! command -v rclone >/dev/null; then
  echo "run.sh: rclone is not installed; dropping it" >&2; drop_target rclone
fi
need_s3=0; need_redis=0
for t in s3wb s3 rclone s3fs; do has $t && need_s3=1; done
for t in s3wb s3; do has $t && need_redis=1; done

#--- machine -------------------------------------------------------------------------
ver() { "$@" 2>&1 | head -1; }
{
  echo "cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
  echo "cores=$(nproc)"
  echo "ram_gib=$(awk '/MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
  echo "kernel=$(uname -r)"
  echo "os=$(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "disk=$(df -h "$D" | awk 'NR == 2 { print $1 " " $2 }') $(stat -f -c %T "$D")"
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "started=$(date -u +%FT%TZ)"
  echo "commit=$(git -C "$top" log -1 --format='%h %s' 2>/dev/null | cut -c1-90)"
  echo "kegfs=$("$KEGFS" --version 2>&1 | head -1)"
  echo "libfuse=$(pkg-config --modversion fuse3 2>/dev/null)"
  echo "passthrough_hp=libfuse $(dpkg-query -W -f='${Version}' libfuse3-dev 2>/dev/null) example/passthrough_hp.cc"
  command -v s3fs >/dev/null && echo "s3fs=$(ver s3fs --version)"
  command -v rclone >/dev/null && echo "rclone=$(ver rclone version)"
  echo "fio=$(ver fio --version)"
  echo "gnuplot=$(ver gnuplot --version)"
  echo "tar=$(ver tar --version)"
  echo "git=$(ver git --version)"
  echo "cc=$(ver cc --version)"
  echo "redis=$(ver redis-server --version)"
  echo "ceph=$(ver radosgw --version)"
  echo "reps=$REPS"; echo "slow_reps=$SLOW_REPS"; echo "slow_targets=$SLOW_TARGETS"; echo "fio_reps=$FIO_REPS"; echo "quick=$QUICK"
  echo "smallfile_n=$SF_N"; echo "meta_n=$META_N"; echo "readdir_n=$RD_N"; echo "fio_mib=$FIO_MIB"
  echo "seq_mib=$SEQ_MIB"; echo "seq_slow_mib=$SEQ_SLOW_MIB"
  echo "fio_secs=$FIO_SECS"; echo "mfiles=$((MF_DIRS * MF_PER)) in $MF_DIRS dirs"
  echo "git_files=$GIT_FILES"; echo "tar_src=$TAR_SRC"; echo "cap_s=$CAP"
} > "$OUT/machine.txt"
sed 's/^/  /' "$OUT/machine.txt" | head -8

#--- servers and mounts --------------------------------------------------------------
started_redis=0; started_s3=0
PIDS=()       # FUSE daemons started here (passthroughs, rclone, s3fs)
cleanup() {
  trap - INT TERM EXIT
  local m
  for m in $(awk -v d="$D/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
    case "$m" in
      */sqlite-mnt|*/s3wb-mnt|*/s3-mnt)
        timeout 150 "$KEGFS" umount "$m" >> "$D/umount.log" 2>&1 || umount -l "$m" 2>/dev/null ;;
      *) umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ;;
    esac
  done
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [ $started_s3 = 1 ] && "$top/scripts/s3-server.sh" stop "$S3DIR" >/dev/null 2>&1
  [ $started_redis = 1 ] && "$top/scripts/redis-server.sh" stop "$REDIS_PORT" "$D/redis" \
    >/dev/null 2>&1
  if [ $KEEP = 0 ]; then
    rm -rf "$D"/*-src "$D/objects" "$D"/cache* "$D"/*-mnt "$D/meta.db"* "$D/data" "$D/ref" \
      "$D/rclone-cache"
  fi
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted"; exit 130' INT TERM

if [ $need_redis = 1 ]; then
  if "$top/scripts/redis-server.sh" status "$REDIS_PORT" "$D/redis" 2>/dev/null; then
    echo "run.sh: something already answers on 127.0.0.1:$REDIS_PORT (KEG_BENCH_REDIS_PORT)" >&2
    exit 2
  fi
  if "$top/scripts/redis-server.sh" start "$REDIS_PORT" "$D/redis" >/dev/null; then
    started_redis=1
  else
    echo "run.sh: redis did not start; dropping s3wb, s3" >&2
    drop_target s3wb; drop_target s3
  fi
fi
if [ $need_s3 = 1 ]; then
  if [ ! -d "$S3DIR/pids" ] && curl -s -o /dev/null -m 2 "http://127.0.0.1:$KEG_S3_PORT/"; then
    echo "run.sh: something already answers on 127.0.0.1:$KEG_S3_PORT (KEG_S3_PORT)" >&2
    exit 2
  fi
  log "starting the Ceph S3 gateway in $S3DIR (127.0.0.1:$KEG_S3_PORT) ..."
  started_s3=1
  # a start occasionally fails on a loaded machine (the OSD never comes up): retry once
  if "$top/scripts/s3-server.sh" start "$S3DIR" > "$D/s3-start.log" 2>&1 ||
     { "$top/scripts/s3-server.sh" stop "$S3DIR" >/dev/null 2>&1;
       "$top/scripts/s3-server.sh" start "$S3DIR" >> "$D/s3-start.log" 2>&1; }; then
    eval "$("$top/scripts/s3-server.sh" env "$S3DIR")"
  else
    tail -5 "$D/s3-start.log" >&2
    echo "run.sh: the S3 gateway did not start; dropping the S3 targets" >&2
    for t in s3wb s3 rclone s3fs; do drop_target $t; done
    need_s3=0
  fi
fi
BUCKET=${KEG_TEST_S3_BUCKET:-}    # KegFS takes the URL http://HOST:PORT/NAME
BNAME=${BUCKET##*/}               # s3fs and rclone take the name
S3URL="http://127.0.0.1:$KEG_S3_PORT"

# rclone's remote (also the lister for the durability point of rclone and s3fs, and for
# the deferred deletions of the KegFS S3 targets); rclone refuses a plain-http endpoint
# when AWS_CA_BUNDLE is set
rcl() { env -u AWS_CA_BUNDLE rclone "$@"; }
RCONF=$D/rclone.conf
HAVE_LISTER=0
if [ "${need_s3:-0}" = 1 ]; then
  if command -v rclone >/dev/null; then
    HAVE_LISTER=1
  elif has s3fs; then
    echo "run.sh: s3fs's durability check needs rclone" >&2
    drop_target s3fs
  fi
  ( umask 077
    printf '[bench]\ntype = s3\nprovider = Ceph\nendpoint = %s\naccess_key_id = %s\nsecret_access_key = %s\nforce_path_style = true\n' \
      "$S3URL" "$KEG_TEST_S3_ACCESS_KEY" "$KEG_TEST_S3_SECRET_KEY" > "$RCONF"
    printf '%s:%s\n' "$KEG_TEST_S3_ACCESS_KEY" "$KEG_TEST_S3_SECRET_KEY" > "$D/s3fs.passwd" )
fi

wait_mounted() {   # wait_mounted MNT LOG NAME
  local i
  for i in $(seq 100); do is_mounted "$1" && return 0; sleep 0.2; done
  tail -5 "$2" >&2
  echo "run.sh: $3 did not mount; see $2" >&2
  return 1
}

mount_disk() { mkdir -p "$D/disk-mnt"; }
run_pthp() {   # run_pthp NAME ENV...: passthrough_hp on $D/NAME-mnt, 1 s cache timeouts
  local n=$1
  shift
  mkdir -p "$D/$n-src" "$D/$n-mnt"
  env PTHP_TIMEOUT=1 "$@" "$PTHP" --foreground "$D/$n-src" "$D/$n-mnt" > "$D/$n.log" 2>&1 &
  PIDS+=($!)
  wait_mounted "$D/$n-mnt" "$D/$n.log" "passthrough_hp ($n)"
}
mount_pthp() { run_pthp pthp PTHP_NO_WRITEBACK=1; }   # as KegFS mounts: no writeback cache
mount_pthpwb() { run_pthp pthpwb; }                   # upstream's default: writeback cache
mount_kpt() {
  mkdir -p "$D/kpt-src" "$D/kpt-mnt"
  "$KPT" "$D/kpt-src" "$D/kpt-mnt" > "$D/kpt.log" 2>&1 &
  PIDS+=($!)
  wait_mounted "$D/kpt-mnt" "$D/kpt.log" keg_passthrough
}
mount_sqlite() {
  local meta="sqlite3://$D/meta.db"
  mkdir -p "$D/sqlite-mnt" "$D/objects"
  "$KEGFS" format --storage file --bucket "$D/objects" "$meta" bench-sqlite \
    > "$D/sqlite-format.log" 2>&1 || { cat "$D/sqlite-format.log" >&2; return 1; }
  "$KEGFS" mount -d --log-file "$D/sqlite-mounter.log" "$meta" "$D/sqlite-mnt" \
    > "$D/sqlite-mount.log" 2>&1 || { cat "$D/sqlite-mount.log" >&2; return 1; }
}
mount_kegs3() {   # mount_kegs3 NAME DB [MOUNT OPTIONS]
  local name=$1 meta="redis://127.0.0.1:$REDIS_PORT/$2"
  shift 2
  mkdir -p "$D/$name-mnt" "$D/cache-$name"
  AWS_ACCESS_KEY_ID=$KEG_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$KEG_TEST_S3_SECRET_KEY \
    "$KEGFS" format --storage s3 --bucket "$BUCKET" "$meta" "bench-$name" \
    > "$D/$name-format.log" 2>&1 || { cat "$D/$name-format.log" >&2; return 1; }
  "$KEGFS" mount -d --log-file "$D/$name-mounter.log" --cache-dir "$D/cache-$name" \
    --cache-size 8G "$@" "$meta" "$D/$name-mnt" > "$D/$name-mount.log" 2>&1 \
    || { cat "$D/$name-mount.log" >&2; return 1; }
}
mount_s3wb() { mount_kegs3 s3wb 1 --writeback --max-staging 2G; }
mount_s3() { mount_kegs3 s3 2; }
mount_rclone() {
  mkdir -p "$D/rclone-mnt" "$D/rclone-cache"
  rcl mount --config "$RCONF" "bench:$BNAME" "$D/rclone-mnt" --vfs-cache-mode writes \
    --allow-other --cache-dir "$D/rclone-cache" --log-file "$D/rclone.log" --log-level INFO &
  PIDS+=($!)
  wait_mounted "$D/rclone-mnt" "$D/rclone.log" "rclone mount"
}
mount_s3fs() {
  mkdir -p "$D/s3fs-mnt"
  s3fs "$BNAME" "$D/s3fs-mnt" -f -o "passwd_file=$D/s3fs.passwd,url=$S3URL" \
    -o use_path_request_style,allow_other > "$D/s3fs.log" 2>&1 &
  PIDS+=($!)
  wait_mounted "$D/s3fs-mnt" "$D/s3fs.log" s3fs
}

TL=()
for t in ${TARGETS//,/ }; do
  if "mount_$t"; then TL+=("$t"); else echo "run.sh: cannot mount $t; skipping it" >&2; fi
done
[ ${#TL[@]} -gt 0 ] || { echo "run.sh: nothing mounted" >&2; exit 2; }
log "targets: ${TL[*]}; workloads: ${WORKLOADS//,/ }"

# the working directory of a target: peers on the bucket work under a prefix of their own
wdir() {
  case "$1" in
    rclone|s3fs) echo "$D/$1-mnt/$1-work" ;;
    *) echo "$D/$1-mnt/work" ;;
  esac
}
prefix_of() { echo "${2#"$D/$1-mnt/"}"; }   # prefix_of TARGET PATH: the key prefix in the bucket

#--- durability ------------------------------------------------------------------------
buffers() { case "$1" in s3wb|rclone|s3fs) return 0 ;; *) return 1 ;; esac; }
# staged_files: the files staged by the s3wb target, not yet uploaded (-1: it has no
# staging area).  Only the staging slots are read, not the cache beside them: that holds
# up to tens of thousands of files (a walk of 21,500 costs about 70 ms of CPU), which every
# 0.2 s would take CPU from the uploads being waited for.
staged_files() {
  local dirs=("$D/cache-s3wb"/*/staging)
  [ -d "${dirs[0]}" ] || { echo -1; return; }
  find "${dirs[@]}" -type f ! -name '.lock' ! -name '.bad.*' ! -name '.tmp*' 2>/dev/null | wc -l
}
# listed PREFIX: "COUNT BYTES" of the objects under PREFIX/ in the bucket
listed() {
  rcl size --json --config "$RCONF" "bench:$BNAME/$1" 2>> "$D/rclone-size.err" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["count"], d["bytes"])' 2>/dev/null ||
    echo "-1 -1"
}
# poll_until T_END LIMIT CHECK ARGS...: seconds from T_END until `CHECK ARGS` succeeds,
# counted to the start of the check that did (a listing of thousands of keys takes seconds
# itself), polling every 0.2 s.  CHECK returns 0 (done), 1 (not yet) or 2 (the check itself
# failed: "error" after 5 of those); "timeout" after LIMIT s.
poll_until() {
  local t_end=$1 limit=$2 t_look bad=0 rc
  shift 2
  while :; do
    t_look=$(now)
    "$@"
    rc=$?
    [ $rc = 0 ] && break
    if [ $rc = 2 ]; then
      bad=$((bad + 1))
      [ $bad -ge 5 ] && { echo "error"; return; }
    fi
    [ "$(secs "$t_end" "$(now)" | cut -d. -f1)" -ge "$limit" ] && { echo "timeout"; return; }
    sleep 0.2
  done
  secs "$t_end" "$t_look"
}
# all_stored TARGET DIR COUNT BYTES: the data written under DIR (COUNT files, BYTES bytes)
# is in the object store (s3wb: its staging area is empty; else a listing of the prefix)
all_stored() {
  local c b
  case "$1" in
    s3wb) c=$(staged_files)
          [ "$c" = -1 ] && return 2
          [ "$c" = 0 ] ;;
    *) read -r c b <<< "$(listed "$(prefix_of "$1" "$2")")"
       [ "$c" = -1 ] && return 2
       [ "$c" -ge "$3" ] && [ "$b" -ge "$4" ] ;;
  esac
}
# durable TARGET DIR COUNT BYTES T_END: seconds from T_END until all_stored; "timeout"
# after 600 s
durable() { poll_until "$5" 600 all_stored "$1" "$2" "$3" "$4"; }
# files_of DIR: "COUNT BYTES" of the regular files under DIR (a local reference tree)
files_of() { find "$1" -type f -printf '%s\n' | awk '{ n++; b += $1 } END { print n + 0, b + 0 }'; }

#--- deferred deletions -------------------------------------------------------------------
# KegFS deletes the objects of an unlinked file after the unlink, in the background (its
# deleter); passthrough_hp, rclone and s3fs delete while they unlink.  Before the next
# repetition starts, the store of a KegFS target is waited for until it holds no block
# object, so that a repetition is not measured while the last one's deletions still run.
deletes_later() { case "$1" in sqlite|s3wb|s3) return 0 ;; *) return 1 ;; esac; }
# objects_left TARGET: block objects in the store of a KegFS target's volume (-1: the
# listing failed)
objects_left() {
  case "$1" in
    sqlite) find "$D/objects" -path '*/chunks/*' -type f ! -name '.tmp*' 2>/dev/null | wc -l ;;
    *) if [ $HAVE_LISTER = 1 ]; then listed "bench-$1/chunks" | cut -d' ' -f1; else echo 0; fi ;;
  esac
}
# no_objects TARGET: the target's store holds no block object
no_objects() {
  local c
  c=$(objects_left "$1")
  [ "$c" = -1 ] && return 2
  [ "$c" = 0 ]
}
# deleted TARGET T_END: seconds from T_END until no_objects; "timeout" after CAP s
deleted() { poll_until "$2" "$CAP" no_objects "$1"; }

# record TARGET REP WORKLOAD KEY=VALUE...
record() { echo "$*" >> "$RAW"; }
# after TARGET DIR COUNT BYTES: the durability point of a buffering target, as " durable_s=S"
after() {
  buffers "$1" || return 0
  # a step cut by the cap never wrote all of its data: nothing to wait for
  [ "${LAST_RC:-0}" = 124 ] && { echo " durable_s=cut"; return 0; }
  echo " durable_s=$(durable "$1" "$2" "$3" "$4" "$T_END")"
}
quiesce() { sync; sleep "$SETTLE"; }

#--- inputs ------------------------------------------------------------------------------
if hasw tar; then
  tar -C "$(dirname "$TAR_SRC")" -cf "$D/data/include.tar" "$(basename "$TAR_SRC")"
  mkdir -p "$D/ref/tar" && tar -C "$D/ref/tar" --no-same-owner -xf "$D/data/include.tar"
  read -r TAR_COUNT TAR_BYTES <<< "$(files_of "$D/ref/tar")"
  echo "tar_entries=$(tar -tf "$D/data/include.tar" | wc -l)" >> "$OUT/machine.txt"
fi
if hasw git; then
  # a repository of GIT_FILES files: the first ones of /usr/include and /usr/share/doc
  mkdir -p "$D/data/repo"
  ( cd /usr && find include share/doc -type f -size -256k 2>/dev/null | sort | head -n "$GIT_FILES" |
      tar -cf - -T - ) | tar -C "$D/data/repo" -xf -
  git -C "$D/data/repo" init -q && git -C "$D/data/repo" add -A &&
    git -C "$D/data/repo" -c user.name=bench -c user.email=bench@localhost commit -qm files ||
    { echo "run.sh: cannot make the git repository" >&2; exit 2; }
  git clone -q "file://$D/data/repo" "$D/ref/git"
  read -r GIT_COUNT GIT_BYTES <<< "$(files_of "$D/ref/git")"
  GIT_BYTES=$((GIT_BYTES * 95 / 100))    # pack files differ a little between clones
  echo "git_repo_files=$(git -C "$D/data/repo" ls-files | wc -l)" >> "$OUT/machine.txt"
fi
if hasw build; then
  # the project's core/ sources with a generated Makefile: every .c to .o, then an archive
  mkdir -p "$D/data/proj"
  cp -r "$top/core" "$D/data/proj/"
  ( cd "$D/data/proj" && find core -name '*.c' | sort | head -n "$BUILD_FILES" > sources.txt )
  {
    echo "CFLAGS = -O1 -w -Icore/include -Icore -Icore/obj -Icore/meta -Icore/fs -Icore/cache -Icore/wb -I/usr/include/hiredis $(pkg-config --cflags fuse3 libcurl 2>/dev/null)"
    echo "OBJS = $(sed 's/\.c$/.o/' "$D/data/proj/sources.txt" | tr '\n' ' ')"
    echo "libcore.a: \$(OBJS)"
    printf '\tar rcs $@ $(OBJS)\n'
    echo "%.o: %.c"
    printf '\t$(CC) $(CFLAGS) -c -o $@ $<\n'
  } > "$D/data/proj/Makefile"
  mkdir -p "$D/ref" && cp -r "$D/data/proj" "$D/ref/proj" && make -s -C "$D/ref/proj" -j2 >/dev/null 2>&1 ||
    { echo "run.sh: the build project does not build on local disk" >&2; exit 2; }
  read -r BUILD_COUNT BUILD_BYTES <<< "$(files_of "$D/ref/proj")"
  read -r PROJ_COUNT PROJ_BYTES <<< "$(files_of "$D/data/proj")"
  echo "build_sources=$(wc -l < "$D/data/proj/sources.txt") C files, $(cd "$D/data/proj" && cat $(cat sources.txt) | wc -l) lines" >> "$OUT/machine.txt"
fi

#--- workloads ---------------------------------------------------------------------------
FAILED=0
fail() { FAILED=$((FAILED + 1)); echo "run.sh: FAILED: $*" >&2; }

w_smallfile() {   # TARGET REP DIR
  local t=$1 r=$2 dir=$3/smallfile w out line T0 c b
  mkdir -p "$dir"
  for w in create randmod append empty; do
    T0=$(now)
    out=$(timeout "$CAP" "$SF" -n "$SF_N" -s "$r" -w "$w" "$dir") || fail "$t smallfile $w"
    T_END=$(now)
    case $w in
      create) c=$SF_N; b=$((SF_N * 4096)) ;;
      randmod) c=1; b=40960 ;;
      append) c=1; b=$((SF_N * 4096)) ;;
      empty) c=$SF_N; b=0 ;;
    esac
    line=$(echo "$out" | grep "^$w ")
    [ -n "$line" ] && record "$t $r smallfile.$w ${line#"$w "}$(after "$t" "$dir/$w" $c $b)"
    quiesce
  done
  rm -rf "$dir"
}

w_meta() {
  local t=$1 r=$2 dir=$3/meta op out
  mkdir -p "$dir"
  for op in create rename stat unlink; do
    out=$(timeout "$CAP" "$FSOPS" -n "$META_N" "$op" "$dir") || { fail "$t meta $op"; break; }
    record "$t $r meta.$op $(echo "$out" | sed 's/^op=[a-z]* //')"
  done
  # readdir of RD_N names in a directory of their own, made first (not timed)
  mkdir -p "$dir/rd"
  if timeout "$CAP" "$FSOPS" -n "$RD_N" -p r create "$dir/rd" > /dev/null; then
    quiesce
    if out=$(timeout "$CAP" "$FSOPS" -n "$RD_N" readdir "$dir/rd"); then
      record "$t $r meta.readdir $(echo "$out" | sed 's/^op=[a-z]* //')"
    else
      fail "$t meta readdir"
    fi
  else
    fail "$t meta readdir (making $RD_N names)"
  fi
  rm -rf "$dir"
  quiesce
}

# field KEY LINE: the value of KEY=... in LINE
field() { sed -nE "s/.*(^| )$1=([^ ]*).*/\2/p" <<< "$2"; }

w_seq() {
  local t=$1 r=$2 dir=$3/seq mib=$SEQ_MIB out rc
  [[ ",$SLOW_TARGETS," == *",$t,"* ]] && mib=$SEQ_SLOW_MIB
  mkdir -p "$dir"
  out=$(timeout "$CAP" "$SEQIO" write "$dir/f" "$mib" "$r" 2>> "$D/$t-seq.err")
  rc=$?
  LAST_RC=$rc
  T_END=$(now)
  if [ $rc = 0 ]; then
    record "$t $r seq.write mib_s=$(field mib_s "$out") ok=1$(after "$t" "$dir" 1 $((mib << 20)))"
    out=$(timeout "$CAP" "$SEQIO" read "$dir/f" "$mib" "$r" 2>> "$D/$t-seq.err")
    rc=$?
    record "$t $r seq.read mib_s=$(field mib_s "$out") ok=$([ $rc = 0 ] && field ok "$out")"
    [ $rc = 0 ] || fail "$t seq read (rc $rc)"
  else
    fail "$t seq write (rc $rc)"
  fi
  rm -rf "$dir"
  quiesce
}

w_fio() {
  local t=$1 r=$2 dir=$3/fio bs j rw f
  mkdir -p "$dir"
  for bs in $FIO_BS; do
    for j in $FIO_JOBS; do
      for rw in write read randwrite randread; do
        [ $QUICK = 1 ] && [ "$bs" = 4m ] && [[ $rw == rand* ]] && continue
        [ $QUICK = 1 ] && [ "$bs" = 4k ] && [[ $rw != rand* ]] && continue
        f=$OUT/fio-$t-$r-$rw-$bs-$j.json
        local extra=()
        [[ $rw == *write ]] && extra=(--end_fsync=1)
        timeout "$CAP" fio --name=f --directory="$dir" --rw="$rw" --bs="$bs" --numjobs="$j" \
          --size="${FIO_MIB}m" --runtime="$FIO_SECS" --ioengine=psync --invalidate=1 \
          --group_reporting --output-format=json --output="$f" "${extra[@]}" \
          > /dev/null 2>> "$D/fio.err" || { fail "$t fio $rw $bs $j"; continue; }
        record "$t $r fio.$rw.$bs.$j json=$f"
      done
      rm -f "$dir"/f.*
      quiesce
    done
  done
  rm -rf "$dir"
}

w_tar() {
  local t=$1 r=$2 dir=$3/tar s ok=1
  mkdir -p "$dir"
  timed s tar -C "$dir" --no-same-owner -xf "$D/data/include.tar" 2>> "$D/$t-tar.err" || ok=0
  record "$t $r tar secs=$s ok=$ok$(after "$t" "$dir" "$TAR_COUNT" "$TAR_BYTES")"
  rm -rf "$dir"
  quiesce
}

w_git() {
  local t=$1 r=$2 dir=$3/git s ok=1
  mkdir -p "$dir"
  timed s git clone -q "file://$D/data/repo" "$dir/clone" 2>> "$D/$t-git.err" || ok=0
  record "$t $r git secs=$s ok=$ok$(after "$t" "$dir" "$GIT_COUNT" "$GIT_BYTES")"
  rm -rf "$dir"
  quiesce
}

w_build() {
  local t=$1 r=$2 dir=$3/build s ok=1 T_END
  mkdir -p "$dir"
  cp -r "$D/data/proj" "$dir/proj"
  T_END=$(now)
  [ -z "$(after "$t" "$dir" "$PROJ_COUNT" "$PROJ_BYTES")" ] || true   # the copy is in first
  quiesce
  timed s make -s -C "$dir/proj" -j2 > /dev/null 2>> "$D/$t-build.err" || ok=0
  record "$t $r build secs=$s ok=$ok$(after "$t" "$dir" "$BUILD_COUNT" "$BUILD_BYTES")"
  rm -rf "$dir"
  quiesce
}

mf_create() {   # DIR: MF_DIRS directories of MF_PER files of a few bytes
  local d i
  for ((d = 0; d < MF_DIRS; d++)); do
    mkdir "$1/d$d" || return 1
    for ((i = 0; i < MF_PER; i++)); do
      printf 'file %d/%d\n' "$d" "$i" > "$1/d$d/f$i" || return 1
    done
  done
}
w_mfiles() {
  local t=$1 r=$2 dir=$3/mfiles s ok=1 bytes n
  mkdir -p "$dir"
  n=$((MF_DIRS * MF_PER))
  timed s mf_create "$dir" || ok=0
  bytes=$(for ((d = 0; d < MF_DIRS; d++)); do for ((i = 0; i < MF_PER; i++)); do
    printf 'file %d/%d\n' "$d" "$i"; done; done | wc -c)
  record "$t $r mfiles.create secs=$s ok=$ok$(after "$t" "$dir" "$n" "$bytes")"
  quiesce
  ok=1
  timed s ls -lR "$dir" > /dev/null || ok=0
  record "$t $r mfiles.ls secs=$s ok=$ok"
  ok=1
  timed s rm -rf "$dir" || ok=0
  local del=""
  deletes_later "$t" && del=" deleted_s=$(deleted "$t" "$T_END")"
  record "$t $r mfiles.rm secs=$s ok=$ok$del"
  quiesce
}
# timed OUTVAR CMD...: run CMD (a command or one of the shell functions here) under the
# cap; set OUTVAR to its seconds and T_END to when it ended; return its status
export MF_DIRS MF_PER
timed() {
  local __v=$1 t0 t1 rc
  shift
  t0=$(now)
  if declare -F "$1" >/dev/null; then
    timeout "$CAP" bash -c "$(declare -f "$1"); $(printf '%q ' "$@")"
  else
    timeout "$CAP" "$@"
  fi
  rc=$?
  LAST_RC=$rc
  t1=$(now)
  T_END=$t1
  printf -v "$__v" '%s' "$(secs "$t0" "$t1")"
  [ $rc = 124 ] && echo "run.sh: timed out after ${CAP}s: $*" >&2
  return $rc
}

#--- the run -------------------------------------------------------------------------------
T_START=$(now)
for w in ${ALL_WORKLOADS//,/ }; do
  hasw "$w" || continue
  for t in "${TL[@]}"; do
    n=$REPS
    [[ ",$SLOW_TARGETS," == *",$t,"* ]] && n=$SLOW_REPS
    [ "$w" = fio ] && n=$FIO_REPS
    for r in $(seq "$n"); do
      log "$w on $t, repetition $r/$n"
      base=$(wdir "$t")/r$r
      mkdir -p "$base" || { fail "$t mkdir $base"; continue; }
      "w_$w" "$t" "$r" "$base"
      rm -rf "$base"
      if deletes_later "$t"; then
        ds=$(deleted "$t" "$(now)")
        case $ds in
          timeout|error) fail "$t: block objects left in the store after $w ($ds)" ;;
          *) log "  $t: its objects were deleted ${ds}s after the clean-up" ;;
        esac
      fi
    done
  done
done
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
echo "run_minutes=$(awk -v a="$T_START" -v b="$(now)" 'BEGIN { printf "%.1f", (b - a) / 60 }')" \
  >> "$OUT/machine.txt"
echo "targets=${TL[*]}" >> "$OUT/machine.txt"

#--- report ---------------------------------------------------------------------------------
python3 "$here/report.py" "$OUT"
rc=$?
echo "results: $OUT/results.md, $OUT/results.json, $OUT/*.png"
if [ $FAILED -gt 0 ]; then
  echo "run.sh: $FAILED benchmark steps failed (see the messages above)"
  exit 1
fi
exit $rc
