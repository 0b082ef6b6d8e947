#!/usr/bin/env bash
# holder_memory_cgroup.sh -- `kegfs holder --memory-max SIZE` puts each mounter in
# its own memory cgroup with that limit, a child of the holder's cgroup in the
# cgroup v1 memory hierarchy (hybrid and v1 hosts), and removes it when the
# mount is unmounted.  Its mounts are allow_other (pods of any uid and gid).  The holder mounts its own small volume
# (SQLite + file store in the case's directory) through its socket, the config
# sent as a descriptor as the CSI node plugin does.
# timeout: 90
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd python3
[ "$(id -u)" = 0 ] || skip "needs root (the holder's mounters and cgroups)"
[ -c /dev/fuse ] || skip "no /dev/fuse"
# cgroup v2: the holder moves itself to a leaf and enables the memory
# controller in its cgroup, which needs it to be alone there (its container);
# on a host it shares the cgroup with this script, so only v1 is tested here.
[ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] &&
  skip "cgroup v2 host: the holder needs a cgroup of its own (a container) for --memory-max"
[ "$(stat -f -c %T /sys/fs/cgroup/memory 2>/dev/null)" = cgroupfs ] ||
  skip "no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory"
[ -w /sys/fs/cgroup/memory ] || skip "/sys/fs/cgroup/memory is read-only"

H=$WORK/holder
mkdir -p "$H/objs" "$H/state" "$H/mnt" || fail "mkdir"
"$KEGFS" format --storage file --bucket "$H/objs" "sqlite3://$H/meta.db" hcg > "$H/format.log" 2>&1 ||
  fail "format: $(cat "$H/format.log")"
(umask 077; printf 'meta-url: "sqlite3://%s/meta.db"\n' "$H" > "$H/vol.yaml")
"$KEGFS" holder --socket "$H/h.sock" --state-dir "$H/state" --memory-max 300M --check-ms 100 \
  > "$H/holder.log" 2>&1 &
hpid=$!
cleanup() {
  kill "$hpid" 2>/dev/null
  for _ in 1 2 3; do umount -l "$H/mnt" 2>/dev/null; done
  wait "$hpid" 2>/dev/null
}
trap cleanup EXIT
sock_up() { [ -S "$H/h.sock" ]; }
wait_for 20 sock_up || fail "the holder did not serve its socket: $(tail -3 "$H/holder.log")"

# call VERB KEY=VALUE...: one request; the config file goes along as a descriptor
call() {
  python3 - "$H/h.sock" "$H/vol.yaml" "$@" <<'EOF'
import os, socket, sys
sock, cfg, verb, kv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(60)
s.connect(sock)
text = (verb + "\n" + "".join(x + "\n" for x in kv) + "\n").encode()
if verb == "mount":
    fd = os.open(cfg, os.O_RDONLY)
    socket.send_fds(s, [text], [fd])
    os.close(fd)
else:
    s.sendall(text)
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
print(out.decode(), end="")
EOF
}

out=$(call mount volume_id=hcg "target=$H/mnt" options= readonly=0)
echo "$out" | head -1 | grep -qx ok || fail "mount: $out $(tail -5 "$H/holder.log")"
pid=$(echo "$out" | sed -n 's/^pid=//p')
[ -n "$pid" ] || fail "no pid in: $out"
echo data > "$H/mnt/f" && [ "$(cat "$H/mnt/f")" = data ] || fail "the holder's mount does not work"
# pods run as any uid and gid: the holder's mounts are allow_other
grep " $H/mnt fuse" /proc/self/mounts | grep -q allow_other ||
  fail "the holder's mount is not allow_other: $(grep " $H/mnt " /proc/self/mounts)"

# the mounter's cgroup: a child mnt-<hash> of the holder's, with the limit
cg=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}://p' "/proc/$pid/cgroup")
dir=/sys/fs/cgroup/memory$cg
note "mounter $pid in the memory cgroup $cg"
case ${cg##*/} in mnt-*) ;; *) fail "mounter $pid is not in a per-mounter cgroup: $cg ($(grep cgroup "$H/holder.log"))" ;; esac
assert_eq "$(cat "$dir/memory.limit_in_bytes")" 314572800 "the mounter's memory limit"
# its worker is in the same cgroup
w=$(pgrep -P "$pid" | head -1)
[ -z "$w" ] || grep -q ":${cg}\$" "/proc/$w/cgroup" || fail "the worker $w is not in $cg"

out=$(call unmount "target=$H/mnt")
echo "$out" | head -1 | grep -qx ok || fail "unmount: $out"
gone() { [ ! -d "$dir" ]; }
wait_for 10 gone || fail "the mounter's cgroup $dir is still there after the unmount"
grep -q "$H/mnt fuse" /proc/self/mounts && fail "still mounted"
exit 0
