#!/usr/bin/env bash
# redis_stale_session.sh -- a mounter that dies (kill -9) leaves a session in Redis with
# locks and an unlinked-but-open file.  The surviving mounter A ($MNT) must, within a
# bounded time, clean that session up: release its flock, fcntl and OFD locks (A can take
# them) and purge the unlinked file (its block objects disappear from OBJDIR).
#
# The bound: a session is stale --session-timeout after its last heartbeat (here A uses 6 s
# and B heartbeats every 2 s, so a live B is never stale), and each mounter looks for
# stale sessions every 45-75 s, the first time 30-90 s after mounting (FS_STALE_PERIOD_SEC
# in core/fs/fs.c, not configurable), so the cleanup comes at most ~90 s after A mounted.
# KEG_TEST_STALE_WAIT (default 200) is the limit.  B runs without the supervisor
# (--no-supervisor, where the mounter has it) so that kill -9 really ends it.
# timeout: 420
# needs: redis
# needs: file
# mount: --attr-cache 0 --entry-cache 0 --session-timeout 6 --heartbeat 2
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"
need_redis
need_objdir
need_cmd flock
KEG_LOCKHOLD=${KEG_LOCKHOLD:-$(dirname "${KEG_SYSCALLS:-/nonexistent/x}")/keg_lockhold}
need_bin KEG_LOCKHOLD keg_lockhold
LIMIT=${KEG_TEST_STALE_WAIT:-200}

A=$MNT
B=$WORK/mnt2
count_objects() {
  find "$OBJDIR" -type f -path '*/chunks/*' ! -name '.tmp.*' 2>/dev/null | wc -l
}
sessions() {   # number of sessions `kegfs status` lists with mount point $1
  "$KEGFS" status "$META" 2>/dev/null | grep -c " $1\$"
}

B_OPTS=(--attr-cache 0 --entry-cache 0 --heartbeat 2)
# (the whole help first: grep -q would leave kegfs writing to a closed pipe)
mount_help=$("$KEGFS" mount --help 2>&1)
grep -q -- --no-supervisor <<< "$mount_help" && B_OPTS+=(--no-supervisor)
m2_mount "$B" "$WORK/mounterB.log" "$META" "${B_OPTS[@]}"
pidB=$(m2_pid "$B")
# the `mount -d` parent may still be on its way out on a loaded machine
one_mounter() { [ "$(pgrep -c -f "kegfs.* mount .*$B\$")" = 1 ]; }
wait_for 5 one_mounter || fail "more than one mounter process for $B: $(pgrep -af "kegfs.* mount .*$B\$")"
[ -n "$pidB" ] || fail "no mounter process for $B"
assert_eq "$(sessions "$B")" 1 "sessions of mount B in kegfs status"

# B: a file with data, opened, then unlinked (stays pending while open)
dd if=/dev/urandom of="$B/victim" bs=1M count=6 conv=fsync status=none || fail "write victim on B"
objs=$(count_objects)
[ "$objs" -gt 0 ] || fail "no block objects in $OBJDIR after writing 6 MiB with fsync"
sleep 600 < "$B/victim" &
reader=$!
sleep 0.3
rm "$B/victim" || fail "rm victim on B"
[ -e "$A/victim" ] && fail "A still sees victim after B removed it"

# B: an flock, an fcntl write lock and an OFD write lock
: > "$B/lk"
: > "$B/lk2"
"$KEG_LOCKHOLD" -H 600 flock-ex "$B/lk" > "$WORK/flock.held" &
fholder=$!
"$KEG_LOCKHOLD" -H 600 wr "$B/lk" 0 0 > "$WORK/plock.held" &
pholder=$!
"$KEG_LOCKHOLD" -H 600 ofd-wr "$B/lk2" 0 0 > "$WORK/ofd.held" &
oholder=$!
wait_for 10 grep -q '^locked' "$WORK/flock.held" || fail "flock on B: $(cat "$WORK/flock.held")"
wait_for 10 grep -q '^locked' "$WORK/ofd.held" || fail "OFD lock on B: $(cat "$WORK/ofd.held")"
wait_for 10 grep -q '^locked' "$WORK/plock.held" || fail "fcntl lock on B: $(cat "$WORK/plock.held")"
flock -x -n "$A/lk" true && fail "A got the flock while B holds it"
"$KEG_LOCKHOLD" wr "$A/lk" 0 0 > /dev/null && fail "A got the fcntl lock while B holds it"
note "B (pid $pidB) holds flock + fcntl lock, $objs block objects of an unlinked open file"

# B dies without any cleanup
kill -9 "$pidB"
wait_for 10 sh -c "! kill -0 $pidB 2>/dev/null" || fail "mounter B did not die"
t0=$(date +%s)
kill -9 "$reader" "$fholder" "$pholder" "$oholder" 2>/dev/null
wait "$reader" "$fholder" "$pholder" "$oholder" 2>/dev/null
umount -l "$B" 2>/dev/null || fusermount3 -u -z "$B" 2>/dev/null
m2_is_mounted "$B" && fail "dead mount $B still mounted after umount -l"

# the locks live in Redis: still held by the dead session right after the kill
flock -x -n "$A/lk" true && fail "A got the flock right after B died (locks not in Redis?)"
"$KEG_LOCKHOLD" ofd-wr "$A/lk2" 0 0 > /dev/null && fail "A got the OFD lock right after B died"
assert_eq "$(count_objects)" "$objs" "block objects right after B died"
assert_eq "$(sessions "$B")" 1 "B's session is still listed right after it died"

got_flock() { flock -x -n "$A/lk" true; }
wait_for "$LIMIT" got_flock || fail "A cannot take the flock $LIMIT s after B died"
note "flock free $(( $(date +%s) - t0 )) s after B died"
"$KEG_LOCKHOLD" wr "$A/lk" 0 0 > "$WORK/lh.out" || fail "A cannot take the fcntl lock: $(cat "$WORK/lh.out")"
"$KEG_LOCKHOLD" ofd-wr "$A/lk2" 0 0 > "$WORK/lh.out" || fail "A cannot take the OFD lock: $(cat "$WORK/lh.out")"
no_objects() { [ "$(count_objects)" -eq 0 ]; }
wait_for 60 no_objects || fail "$(count_objects) of $objs block objects of B's unlinked file still in OBJDIR"
note "objects purged $(( $(date +%s) - t0 )) s after B died"
assert_eq "$(sessions "$B")" 0 "B's session after the cleanup"
grep -q 'cleaned 1 stale session' "$MT_LOG" || note "no 'cleaned 1 stale session' line in A's log"

# A keeps working
printf 'still fine' > "$A/after" && assert_eq "$(cat "$A/after")" "still fine" "A after the cleanup"
exit 0
