#!/bin/bash
# s3-server.sh -- a throw-away single-node Ceph cluster with an S3 gateway (radosgw),
# for the S3 object store's live tests and benchmarks.  It checks SigV4 signatures.
#
#   scripts/s3-server.sh start [DIR]   start (idempotent); returns once S3 answers
#   scripts/s3-server.sh env   [DIR]   print "export KEG_TEST_S3_*=..." for the tests
#   scripts/s3-server.sh stop  [DIR]   kill every daemon and remove DIR (memstore = RAM)
#   scripts/s3-server.sh restart-gw [DIR]   kill -9 radosgw and start it again (tests)
#   scripts/s3-server.sh kill-gw [DIR] / start-gw [DIR]   the two halves of restart-gw
#
# DIR defaults to $KEG_S3_DIR or /tmp/kegfs-s3.  Ports: $KEG_S3_PORT (7480) for S3,
# $KEG_S3_MON_PORT (6789) for the monitor; everything binds 127.0.0.1.
# Layout: one ceph-mon, one ceph-osd with the memstore backend (8 GiB device,
# RAM only), radosgw with beast (tcp_nodelay=1: without it small GETs take ~44 ms);
# "auth * required = none", so there are no keyrings.  Every daemon runs in the
# foreground as a child of a setsid'd subshell of this script; pids in DIR/pids.
# A user with a random access key/secret is created on first start (DIR/credentials,
# mode 0600) and a bucket "kegtest" is created with curl --aws-sigv4.
# Needs (Debian 12): radosgw ceph-mon ceph-osd ceph-common curl.
set -euo pipefail

cmd=${1:-}
DIR=${2:-${KEG_S3_DIR:-/tmp/kegfs-s3}}
PORT=${KEG_S3_PORT:-7480}
MON_PORT=${KEG_S3_MON_PORT:-6789}
BUCKET=${KEG_S3_BUCKET_NAME:-kegtest}
CONF=$DIR/ceph.conf
CEPH=(ceph -c "$CONF" --connect-timeout 10)

die() { echo "s3-server: $*" >&2; exit 1; }

alive() {   # alive NAME: the daemon recorded under DIR/pids/NAME runs
    local f=$DIR/pids/$1
    [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

s3_answers() {
    local code
    code=$(curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:$PORT/" || true)
    [[ $code =~ ^[2-4][0-9][0-9]$ ]]
}

log_tail() {
    for f in "$DIR"/log/*.log; do
        [[ -f $f ]] || continue
        echo "---- $f (last 25 lines)" >&2
        tail -n 25 "$f" >&2
    done
}

spawn() {   # spawn NAME CMD...: run CMD in the foreground of a detached session
    local name=$1; shift
    setsid "$@" >>"$DIR/log/$name.out" 2>&1 < /dev/null &
    echo $! > "$DIR/pids/$name"
}

wait_for() {   # wait_for SECONDS WHAT CMD...
    local secs=$1 what=$2; shift 2
    local end=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= end)); then
            echo "s3-server: timed out after ${secs}s waiting for $what" >&2
            log_tail
            exit 1
        fi
        sleep 0.5
    done
}

# The OSD can send its first monitor command before its monitor client has the
# cluster map; the monitor refuses it ("handle_command on fsid 0000... != ...",
# "wrong fsid" in the OSD's log) and the OSD exits during init.  Seen in a few
# fresh starts on these machines (twice in a row once); it is started again.
start_osd() {
    local try end
    for try in 1 2 3 4 5 6; do
        ((try == 1)) || sleep 1
        spawn osd ceph-osd -c "$CONF" -i 0 -f
        end=$((SECONDS + 60))
        while ((SECONDS < end)) && alive osd; do
            "${CEPH[@]}" osd dump 2>/dev/null | grep -q '^osd.0 up' && return 0
            sleep 0.5
        done
        alive osd && break          # running, but not up within 60 s
        echo "s3-server: the OSD exited while starting (try $try of 6)" >&2
    done
    echo "s3-server: the OSD did not come up" >&2
    log_tail
    kill_daemons
    exit 1
}

write_conf() {
    cat > "$CONF" <<EOF
[global]
fsid = $(cat "$DIR/fsid")
mon host = v1:127.0.0.1:$MON_PORT
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr2 = false
ms bind ipv4 = true
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
keyring = /dev/null
run dir = $DIR/run
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
pid file = $DIR/run/\$name.pid
crash dir = $DIR/crash
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0

[mon]
mon data = $DIR/mon/ceph-\$id

[osd]
osd data = $DIR/osd/ceph-\$id
osd objectstore = memstore
memstore device bytes = 8589934592
osd max object name len = 460
osd max object namespace len = 64

[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$PORT tcp_nodelay=1
rgw data = $DIR/rgw
rgw gc obj min wait = 10
rgw gc processor period = 10
rgw gc processor max time = 10
rgw dns name = localhost
EOF
}

start_gw() {
    alive rgw && return 0
    spawn rgw radosgw -c "$CONF" -n client.rgw.a -f
    wait_for 60 "radosgw on 127.0.0.1:$PORT" s3_answers
}

# port_owner PORT: the listener on PORT as ss(8) shows it (with its process), or nothing
port_owner() {
    command -v ss >/dev/null || return 0
    ss -Hltnp "sport = :$1" 2>/dev/null | head -1
}

do_start() {
    for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool curl; do
        command -v "$b" >/dev/null || die "$b not found (apt-get install radosgw ceph-mon ceph-osd ceph-common curl)"
    done
    if alive mon && alive osd && alive rgw && s3_answers; then
        echo "s3-server: already running in $DIR (http://127.0.0.1:$PORT)"
        return 0
    fi
    if [[ -d $DIR && ! -f $DIR/fsid ]]; then
        die "$DIR exists but is not an s3-server directory"
    fi
    local fresh=0
    if ! alive mon || ! alive osd; then
        # memstore keeps no data across an OSD crash: a half-dead cluster is rebuilt
        # (a dead gateway alone is just restarted below).
        do_stop quiet
        fresh=1
    fi
    if ((fresh)); then
        # Another cluster's monitor on our port answers our OSD with "wrong fsid"
        # and the start times out; say so at once instead.
        local p o
        for p in "$MON_PORT" "$PORT"; do
            o=$(port_owner "$p")
            [[ -z $o ]] || die "port $p is already in use ($o); another cluster? stop it" \
                "(scripts/s3-server.sh stop ITS_DIR) or set KEG_S3_MON_PORT / KEG_S3_PORT"
        done
    fi
    mkdir -p "$DIR"/{run,log,mon,osd/ceph-0,rgw,crash,pids}
    chmod 700 "$DIR"
    if ((fresh)); then
        cat /proc/sys/kernel/random/uuid > "$DIR/fsid"
        write_conf
        monmaptool --create --fsid "$(cat "$DIR/fsid")" --addv a "[v1:127.0.0.1:$MON_PORT]" \
            "$DIR/monmap" >/dev/null
        ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" >>"$DIR/log/mkfs.out" 2>&1 ||
            { log_tail; die "ceph-mon --mkfs failed"; }
        spawn mon ceph-mon -c "$CONF" -i a -f
        wait_for 30 "the monitor" "${CEPH[@]}" mon stat

        local uuid
        uuid=$(cat /proc/sys/kernel/random/uuid)
        "${CEPH[@]}" osd new "$uuid" >/dev/null
        ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$uuid" >>"$DIR/log/mkfs.out" 2>&1 ||
            { log_tail; die "ceph-osd --mkfs failed"; }
    fi
    if ((fresh)); then
        start_osd
    fi
    start_gw

    if [[ ! -f $DIR/credentials ]]; then
        # the gateway generates the key pair: no secret on any command line
        local ak sk out
        out=$(radosgw-admin -c "$CONF" -n client.admin user create --uid=kegtest \
            --display-name="KegFS tests" --gen-access-key --gen-secret) ||
            { log_tail; die "radosgw-admin user create failed"; }
        ak=$(printf '%s\n' "$out" | sed -n 's/.*"access_key": *"\([^"]*\)".*/\1/p' | head -1)
        sk=$(printf '%s\n' "$out" | sed -n 's/.*"secret_key": *"\([^"]*\)".*/\1/p' | head -1)
        [[ -n $ak && -n $sk ]] || die "radosgw-admin user create printed no key pair"
        (umask 077; printf 'AK=%s\nSK=%s\n' "$ak" "$sk" > "$DIR/credentials")
    fi
    # shellcheck disable=SC1091
    . "$DIR/credentials"
    local code end=$((SECONDS + 30))
    while :; do
        # credentials reach curl through its config on stdin, not argv
        code=$(printf 'user = "%s:%s"\n' "$AK" "$SK" |
            curl -s -K - -o "$DIR/log/mkbucket.out" -w '%{http_code}' -m 10 -X PUT \
            --aws-sigv4 "aws:amz:us-east-1:s3" \
            -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
            "http://127.0.0.1:$PORT/$BUCKET" || true)
        [[ $code == 200 || $code == 409 ]] && break
        if ((SECONDS >= end)); then
            cat "$DIR/log/mkbucket.out" >&2 || true
            die "creating bucket $BUCKET failed (HTTP $code)"
        fi
        sleep 1   # the user may take a moment to reach the gateway's cache
    done
    echo "s3-server: up in $DIR: http://127.0.0.1:$PORT/$BUCKET"
}

kill_daemons() {   # stop every daemon of DIR (the directory and its logs stay)
    local n
    for n in rgw osd mon; do
        local f=$DIR/pids/$n
        [[ -f $f ]] || continue
        local pid
        pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$f"
    done
}

do_stop() {
    local quiet=${1:-}
    [[ -d $DIR ]] || return 0
    [[ -f $DIR/fsid || ! -e $DIR ]] || die "$DIR is not an s3-server directory; not removing it"
    kill_daemons
    rm -rf "$DIR"
    [[ -n $quiet ]] || echo "s3-server: stopped, $DIR removed"
}

do_env() {
    [[ -f $DIR/credentials ]] || die "not started (no $DIR/credentials)"
    # shellcheck disable=SC1091
    . "$DIR/credentials"
    echo "export KEG_TEST_S3_BUCKET=http://127.0.0.1:$PORT/$BUCKET KEG_TEST_S3_ACCESS_KEY=$AK KEG_TEST_S3_SECRET_KEY=$SK KEG_S3_DIR=$DIR"
}

kill_gw() {
    local f=$DIR/pids/rgw
    [[ -f $f ]] || return 0
    kill -9 "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
}

case $cmd in
    start) do_start ;;
    stop) do_stop ;;
    env) do_env ;;
    kill-gw) kill_gw ;;
    start-gw) start_gw ;;
    restart-gw) kill_gw; start_gw ;;
    *) echo "usage: $0 start|stop|env|restart-gw|kill-gw|start-gw [DIR]" >&2; exit 2 ;;
esac
