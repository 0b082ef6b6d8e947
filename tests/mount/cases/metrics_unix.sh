#!/usr/bin/env bash
# metrics_unix.sh -- `kegfs mount --metrics unix:/PATH` serves the same /metrics over a unix
# socket: a stale socket file left at the path is replaced, the socket is 0600 (also under
# umask 000), a scrape with `curl --unix-socket` follows the bytes written, a restarted FUSE
# worker (kill -9) serves the socket again, the file is gone after the unmount, and the same
# value works in a --config file.  A relative or overlong path is refused before anything
# is mounted, with a message that says why.
# timeout: 120
# allow-log: was killed by signal 9
# allow-log: unknown (file|directory) handle
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd curl
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

SOCK=$WORK/m.sock
scrape() { curl -sf --max-time 5 --unix-socket "$1" http://localhost/metrics > "$WORK/scrape"; }
# value NAME LABELS-REGEX: the sample's value (0 if absent)
value() {
  awk -v n="$1" -v l="$2" '$1 ~ "^"n"{" && $1 ~ l {print $2; f=1} END {if (!f) print 0}' \
    "$WORK/scrape" | head -1
}

mt_umount
# what a killed mounter leaves behind: a socket file nobody accepts on
$PY -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.close()' "$SOCK"
[ -S "$SOCK" ] || fail "no stale socket to start from"
(umask 000 && mt_mount --metrics "unix:$SOCK") || fail "mount with --metrics unix:$SOCK"
wait_for 10 scrape "$SOCK" || fail "no metrics on unix:$SOCK"
[ "$(stat -c %a "$SOCK")" = 600 ] || fail "socket mode $(stat -c %a "$SOCK"), expected 600"
[ "$(stat -c %u "$SOCK")" = "$(id -u)" ] || fail "socket owned by uid $(stat -c %u "$SOCK")"

dd if=/dev/urandom of="$MNT/f" bs=1M count=3 conv=fsync status=none || fail "write f"
scrape "$SOCK" || fail "scrape after the write"
w=$(value kegfs_written_bytes_total '')
[ "$w" -ge $((3 * 1048576)) ] || fail "kegfs_written_bytes_total $w < 3 MiB"
[ "$(value kegfs_fuse_ops_total 'op="write"')" -ge 1 ] || fail "no write ops counted"
grep -q "^kegfs_written_bytes_total{volume=\"$VOL\"} " "$WORK/scrape" || fail "no volume label"
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$SOCK" http://localhost/nope)
[ "$code" = 404 ] || fail "GET /nope over the socket gave $code"

# a crashed worker leaves its socket file behind; the next worker replaces it
worker=$(mounter_worker_pid)
[ -n "$worker" ] && [ "$worker" != "$(mounter_pid)" ] || skip "no supervised worker"
kill -9 "$worker"
fresh() { scrape "$SOCK" && [ "$(value kegfs_written_bytes_total '')" -lt "$w" ]; }
wait_for 10 fresh || fail "the restarted worker does not serve unix:$SOCK"
cat "$MNT/f" > /dev/null || fail "read after the worker restart"

mt_umount
[ -e "$SOCK" ] && fail "socket $SOCK left after the unmount"

# refused before mounting: relative and overlong paths
expect_fail 'absolute' "$KEGFS" mount --metrics unix:rel.sock "$META" "$MNT"
long=/$(printf 'x%.0s' $(seq 1 120)).sock
expect_fail 'longer than 107' "$KEGFS" mount --metrics "unix:$long" "$META" "$MNT"
expect_fail 'HOST:PORT' "$KEGFS" mount --metrics nonsense "$META" "$MNT"
is_mounted && fail "a refused --metrics mounted anyway"

# the same value from a config file
CSOCK=$WORK/c.sock
printf 'metrics: "unix:%s"\n' "$CSOCK" > "$WORK/mount.yaml"
chmod 600 "$WORK/mount.yaml"
mt_mount --config "$WORK/mount.yaml"
wait_for 10 scrape "$CSOCK" || fail "no metrics on the socket of the config file"
grep -q '^# TYPE kegfs_fuse_ops_total counter' "$WORK/scrape" || fail "no FUSE op family"
mt_umount
[ -e "$CSOCK" ] && fail "socket $CSOCK left after the unmount"
note "written $w bytes counted over unix:$SOCK"
