# gw_lib.sh -- for mount cases that kill and restart the runner's S3 gateway
# (s3_outage.sh, s3_gateway_restart.sh).  Source it after lib.sh and obj_lib.sh,
# then call need_gateway.
#
# The gateway is the one of the runner's bucket: $KEG_S3_DIR (exported by
# `eval "$(scripts/s3-server.sh env DIR)"`), and it must be the gateway that serves
# BUCKET (its ceph.conf names the same port), else the case skips.  gw kill-gw / gw
# start-gw log to $WORK/gw.log; the EXIT trap kills $writer (a background pid the case
# may set) and starts a gateway killed by gw kill-gw again.

GW_KILLED=0
writer=""

# Skips the case unless the runner's gateway can be killed and started from here; sets
# S3SRV, GW_DIR, GW_PORT, exports KEG_S3_PORT, and installs the EXIT trap.
need_gateway() {
  [ "${STORAGE:-}" = s3 ] || skip "needs --storage s3"
  need_objstore
  S3SRV=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/s3-server.sh
  [ -x "$S3SRV" ] || skip "no $S3SRV"
  GW_DIR=${KEG_S3_DIR:-}
  [ -n "$GW_DIR" ] && [ -f "$GW_DIR/ceph.conf" ] \
    || skip "KEG_S3_DIR does not name a running s3-server.sh directory (eval \"\$(scripts/s3-server.sh env DIR)\")"
  GW_PORT=${OBJ_S3_ENDPOINT##*:}
  case "$GW_PORT" in ''|*[!0-9]*) skip "cannot tell the gateway's port from $BUCKET" ;; esac
  grep -q "beast endpoint=127.0.0.1:$GW_PORT " "$GW_DIR/ceph.conf" \
    || skip "the gateway of $GW_DIR does not serve port $GW_PORT of $BUCKET"
  [ -f "$GW_DIR/pids/rgw" ] || skip "no gateway running in $GW_DIR"
  export KEG_S3_PORT=$GW_PORT
  trap gw_on_exit EXIT
}

# The runner kills the case's cgroup at the end: a gateway started from here would die
# with it, so it joins the cgroup (v2) of the cluster's monitor instead.
gw_uncage() {
  local pid mon path root
  pid=$(cat "$GW_DIR/pids/rgw" 2>/dev/null) && mon=$(cat "$GW_DIR/pids/mon" 2>/dev/null) \
    || return 0
  path=$(sed -n 's/^0:://p' "/proc/$mon/cgroup" 2>/dev/null)
  root=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break } }' \
         /proc/self/mountinfo | head -1)
  [ -n "$path" ] && [ -n "$root" ] || return 0
  echo "$pid" > "$root${path%/}/cgroup.procs" 2>/dev/null \
    || echo "WARNING: could not move the gateway (pid $pid) to cgroup $path" >&2
}

gw() {   # gw kill-gw|start-gw
  "$S3SRV" "$1" "$GW_DIR" >> "$WORK/gw.log" 2>&1 || return 1
  case "$1" in
    kill-gw) GW_KILLED=1 ;;
    start-gw) GW_KILLED=0; gw_uncage ;;
  esac
}

gw_on_exit() {
  [ -z "$writer" ] || kill "$writer" 2>/dev/null
  if [ "$GW_KILLED" = 1 ]; then
    gw start-gw || echo "WARNING: could not start the gateway of $GW_DIR again" >&2
  fi
}
