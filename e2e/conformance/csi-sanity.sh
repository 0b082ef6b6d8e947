#!/usr/bin/env bash
# csi-sanity.sh -- run kubernetes-csi's csi-sanity (csi-test v5.3.1) against
# kegfs-csi, with real FUSE mounts:
#   1. SQLite metadata + file store, controller and node on one socket
#      (--mode all), mounters as children of the plugin (process mount mode);
#   2. Redis + S3, one socket, mounters owned by `kegfs holder` (holder mount
#      mode, what the chart deploys);
#   3. Redis + S3, controller and node as two processes on two sockets
#      (--csi.controllerendpoint), process mount mode.
# 2 and 3 run when $KEG_TEST_REDIS_URL and $KEG_TEST_S3_BUCKET (with
# $KEG_TEST_S3_ACCESS_KEY, $KEG_TEST_S3_SECRET_KEY) name running servers, as
# scripts/test.sh exports them.
# csi-sanity connects through connect_delay.py (a relay that holds each new
# connection 0.2 s: csi-test v5.3.1's Connect misses a channel that is READY
# at once and times out after a minute; see the relay's header).
# The StorageClass parameters go in a --csi.testvolumeparameters file and the
# Secret (metaurl, storage, bucket, S3 keys) in a 0600 --csi.secrets file, never
# on a command line.  Prints each run's ginkgo summary and a last line
# "sanity: N passed, M failed".
#
#   KEG_BUILD=/path/to/build e2e/conformance/csi-sanity.sh [--store file|s3|both]
#
# The binary: $KEG_CSI_SANITY, else $KEG_K8S_BIN/csi-sanity, else csi-sanity in
# PATH, else in $(go env GOPATH)/bin.  Absent: exit 77 (docs/testing.md says how
# to build it).  $KEG_CSI_SANITY set to something that cannot run is an error.
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"

STORE=both
while [ $# -gt 0 ]; do
  case "$1" in
    --store) STORE=$2; shift ;;
    *) echo "usage: $0 [--store file|s3|both]" >&2; exit 2 ;;
  esac
  shift
done
case "$STORE" in file|s3|both) ;; *) die "--store must be file, s3 or both" ;; esac

if [ -n "${KEG_CSI_SANITY:-}" ] && [ ! -x "$KEG_CSI_SANITY" ]; then
  die "KEG_CSI_SANITY=$KEG_CSI_SANITY is not an executable"
fi
find_sanity() {
  if [ -n "${KEG_CSI_SANITY:-}" ]; then
    echo "$KEG_CSI_SANITY"; return 0
  fi
  if [ -n "${KEG_K8S_BIN:-}" ] && [ -x "$KEG_K8S_BIN/csi-sanity" ]; then
    echo "$KEG_K8S_BIN/csi-sanity"; return 0
  fi
  if command -v csi-sanity >/dev/null; then
    command -v csi-sanity; return 0
  fi
  if command -v go >/dev/null && [ -x "$(go env GOPATH 2>/dev/null)/bin/csi-sanity" ]; then
    echo "$(go env GOPATH)/bin/csi-sanity"; return 0
  fi
  return 1
}
SANITY=$(find_sanity) || {
  echo "SKIP: csi-sanity not found (\$KEG_CSI_SANITY, \$KEG_K8S_BIN, PATH, \$(go env GOPATH)/bin);"
  echo "      build it from kubernetes-csi/csi-test v5.3.1 as docs/testing.md describes"
  exit 77
}
can_mount || { echo "SKIP: csi-sanity publishes real mounts: needs root, /dev/fuse and $KEGFS_BIN"; exit 77; }
[ -x "$CSI_BIN" ] || die "no $CSI_BIN (build the kegfs-csi target, or set KEG_BUILD)"

W=$(mktemp -d /tmp/kegfs-csi-sanity.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do
    if kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p"
      for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$p" 2>/dev/null && kill -KILL "$p"
      wait "$p" 2>/dev/null || true
    fi
  done
  umount_below "$W"
  sleep 0.3
  rm -rf "$W"
}
trap cleanup EXIT
MOUNTER=$KEGFS_BIN
log "csi-sanity: $SANITY ($("$SANITY" --version 2>/dev/null | sed -n 's/^Version = //p'))"

# plugin DIR MODE SOCKET [ARGS...]: start one kegfs-csi; its pid goes to PIDS.
# The watchdog checks every mount each 100 ms (default 2 s), so the specs that
# unpublish right after a publish meet it: an RPC must never be ABORTED by it.
plugin() {
  local dir=$1 mode=$2 sock=$3; shift 3
  mkdir -p "$dir/cache" "$dir/pods"
  "$CSI_BIN" --endpoint "unix://$sock" --nodeid csi-sanity-node --mode "$mode" \
    --state-dir "$dir/state-$mode" --mounter "$MOUNTER" --kubelet-dir "$dir" \
    --cache-root "$dir/cache" --watchdog-ms 100 "$@" >> "$dir/plugin-$mode.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    [ -S "$sock" ] && return 0
    kill -0 "${PIDS[-1]}" 2>/dev/null || { tail -20 "$dir/plugin-$mode.log" >&2; die "kegfs-csi exited"; }
    sleep 0.1
  done
  die "socket $sock did not appear"
}

# relay SOCK: a socket in front of SOCK that holds each new connection 0.2 s
# (connect_delay.py: csi-test v5.3.1's Connect misses a channel that is READY
# at once and then times out after a minute); sets RELAY to its path.
relay() {
  local sock=$1
  RELAY=${sock%.sock}-sanity.sock
  $PY "$REPO/e2e/conformance/connect_delay.py" "$RELAY" "$sock" 0.2 \
    >> "${sock%.sock}-relay.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    [ -S "$RELAY" ] && return 0
    kill -0 "${PIDS[-1]}" 2>/dev/null || { cat "${sock%.sock}-relay.log" >&2; die "relay exited"; }
    sleep 0.1
  done
  die "socket $RELAY did not appear"
}

# holder DIR: start `kegfs holder` on DIR/holder/holder.sock; sets HOLDER_PID
# (the caller adds it to PIDS after its plugin's, so it is stopped after it).
holder() {
  local dir=$1
  mkdir -p "$dir/holder"
  "$KEGFS_BIN" holder --socket "$dir/holder/holder.sock" --state-dir "$dir/holder" \
    --check-ms 100 >> "$dir/holder.log" 2>&1 &
  HOLDER_PID=$!
  for _ in $(seq 1 100); do
    [ -S "$dir/holder/holder.sock" ] && return 0
    kill -0 "$HOLDER_PID" 2>/dev/null || { tail -20 "$dir/holder.log" >&2; die "kegfs holder exited"; }
    sleep 0.1
  done
  die "socket $dir/holder/holder.sock did not appear"
}

# sq STRING: STRING as a single-quoted YAML scalar.
sq() {
  local q="'"
  printf "'%s'" "${1//$q/$q$q}"
}

# secrets FILE metaurl storage bucket [access-key secret-key]: the Secret of
# every RPC that takes one, as csi-sanity's --csi.secrets YAML (mode 0600).
secrets() {
  local f=$1
  (umask 077
   {
     echo "CreateVolumeSecret: &s"
     echo "  metaurl: $(sq "$2")"
     echo "  storage: $(sq "$3")"
     echo "  bucket: $(sq "$4")"
     if [ $# -ge 6 ]; then
       echo "  access-key: $(sq "$5")"
       echo "  secret-key: $(sq "$6")"
     fi
     for k in DeleteVolumeSecret ControllerValidateVolumeCapabilitiesSecret \
              ControllerExpandVolumeSecret NodePublishVolumeSecret NodeStageVolumeSecret; do
       echo "$k: *s"
     done
   } > "$f")
}

# redis_cli ARGS...: redis-cli on $KEG_TEST_REDIS_URL's server and database (a
# password in the URL goes to redis-cli in REDISCLI_AUTH, not on its command line).
redis_cli() {
  local u=${KEG_TEST_REDIS_URL#redis://} auth='' host db=0
  case "$u" in *@*) auth=${u%%@*}; auth=${auth#*:}; u=${u#*@} ;; esac
  host=${u%%/*}
  case "$u" in */*) db=${u#*/}; db=${db%%\?*}; db=${db:-0} ;; esac
  if [ -n "$auth" ]; then
    REDISCLI_AUTH=$auth redis-cli -h "${host%:*}" -p "${host##*:}" -n "$db" "$@"
  else
    redis-cli -h "${host%:*}" -p "${host##*:}" -n "$db" "$@"
  fi
}

TOTAL_P=0 TOTAL_F=0 TOTAL_S=0 RC=0
# sanity DIR OUT ARGS...: one csi-sanity run into OUT; its exit code.
sanity() {
  local dir=$1 out=$2; shift 2
  timeout -k 10 150 "$SANITY" --ginkgo.no-color --csi.mountdir "$dir/pods/csi-mount" \
    --csi.stagingdir "$dir/pods/csi-staging" --csi.junitfile "$dir/junit.xml" "$@" \
    > "$out" 2>&1
}

# summary OUT: ginkgo's "SUCCESS! -- N Passed | M Failed | ..." line, or nothing.
summary() {
  grep -E '(SUCCESS|FAIL)! -- [0-9]+ Passed \| [0-9]+ Failed' "$1" | tail -1 || true
}

# run NAME DIR ARGS...: run csi-sanity, add its counts to the totals.
run() {
  local name=$1 dir=$2; shift 2
  local out="$dir/sanity.out" rc=0 line
  log "$name: csi-sanity $*"
  sanity "$dir" "$out" "$@" || rc=$?
  line=$(summary "$out")
  # a failed run in full (ginkgo's report of each failure), then the summary line
  if [ "$rc" != 0 ]; then cat "$out"; fi
  echo "$name: ${line:-no summary (csi-sanity rc=$rc)}"
  if [ -z "$line" ]; then
    tail -30 "$out"
    TOTAL_F=$((TOTAL_F + 1)); RC=1
    return 0
  fi
  local p f s
  p=$(echo "$line" | sed -E 's/.* ([0-9]+) Passed.*/\1/')
  f=$(echo "$line" | sed -E 's/.* ([0-9]+) Failed.*/\1/')
  s=$(echo "$line" | sed -E 's/.* ([0-9]+) Skipped.*/\1/')
  TOTAL_P=$((TOTAL_P + p)); TOTAL_F=$((TOTAL_F + f)); TOTAL_S=$((TOTAL_S + s))
  if [ "$rc" != 0 ] || [ "$f" != 0 ] || [ "$p" = 0 ]; then
    RC=1
    for l in "$dir"/plugin-*.log "$dir"/holder.log; do
      if [ -f "$l" ]; then log "--- $l"; tail -40 "$l" >&2; fi
    done
  fi
}

if [ "$STORE" != s3 ]; then
  d=$W/file
  mkdir -p "$d/meta" "$d/bucket"
  plugin "$d" all "$d/csi.sock"
  relay "$d/csi.sock"
  secrets "$d/secrets.yaml" "sqlite3://$d/meta/" file "$d/bucket"
  echo '{}' > "$d/params.yaml"
  run "sqlite+file" "$d" --csi.endpoint "unix://$RELAY" \
    --csi.secrets "$d/secrets.yaml" --csi.testvolumeparameters "$d/params.yaml"
fi

if [ "$STORE" != file ]; then
  if [ -n "${KEG_TEST_REDIS_URL:-}" ] && [ -n "${KEG_TEST_S3_BUCKET:-}" ] &&
     [ -n "${KEG_TEST_S3_ACCESS_KEY:-}" ] && [ -n "${KEG_TEST_S3_SECRET_KEY:-}" ]; then
    # StorageClass parameters a user would set (charts/kegfs-csi values)
    printf 'block-size: "1M"\ncompress: "lz4"\ntrash-days: "0"\nreclaim: "delete"\n' \
      > "$W/s3-params.yaml"
    secrets "$W/s3-secrets.yaml" "$KEG_TEST_REDIS_URL" s3 "$KEG_TEST_S3_BUCKET" \
      "$KEG_TEST_S3_ACCESS_KEY" "$KEG_TEST_S3_SECRET_KEY"
    s3args=(--csi.secrets "$W/s3-secrets.yaml" --csi.testvolumeparameters "$W/s3-params.yaml")

    d=$W/s3-holder
    mkdir -p "$d"
    holder "$d"
    plugin "$d" all "$d/csi.sock" --mount-mode holder --holder-socket "$d/holder/holder.sock"
    PIDS+=("$HOLDER_PID")
    relay "$d/csi.sock"
    run "redis+s3 holder" "$d" --csi.endpoint "unix://$RELAY" "${s3args[@]}"

    d=$W/s3-split
    mkdir -p "$d"
    plugin "$d" controller "$d/controller.sock"
    plugin "$d" node "$d/node.sock"
    relay "$d/controller.sock"
    ctl=$RELAY
    relay "$d/node.sock"
    run "redis+s3 split" "$d" --csi.controllerendpoint "unix://$ctl" \
      --csi.endpoint "unix://$RELAY" "${s3args[@]}"
    # csi-sanity deletes every volume it creates: no key of any of them (all
    # keys of a volume carry its hash tag {ID}) may be left in Redis
    ids=$(cat "$W"/s3-*/plugin-*.log | sed -n 's/.* volume_id=\([^ ]*\) name=.* created: .*/\1/p' | sort -u)
    nvol=0 nleft=0
    for id in $ids; do
      nvol=$((nvol + 1))
      n=$(redis_cli --scan --pattern "{$id}*" | wc -l)
      if [ "$n" != 0 ]; then log "redis+s3: $n Redis keys of deleted volume $id are left"; fi
      nleft=$((nleft + n))
    done
    log "redis+s3: $nvol volumes created and deleted, $nleft Redis keys of them left"
    if [ "$nvol" = 0 ] || [ "$nleft" != 0 ]; then
      RC=1; TOTAL_F=$((TOTAL_F + 1))
    fi
  elif [ "$STORE" = s3 ]; then
    die "--store s3 needs KEG_TEST_REDIS_URL and KEG_TEST_S3_* (scripts/s3-server.sh env)"
  else
    log "redis+s3: not run (no KEG_TEST_REDIS_URL / KEG_TEST_S3_BUCKET)"
  fi
fi

echo "sanity: $TOTAL_P passed, $TOTAL_F failed (not run: $TOTAL_S specs of capabilities kegfs-csi does not offer)"
exit $RC
