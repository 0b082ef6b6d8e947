#!/usr/bin/env bash
# remount_race.sh -- a mounter that outlives its mount (unmounted from outside while it
# still drains) must leave a newer mount at the same path alone: the old supervisor does
# not detach it, and neither process removes or overwrites its state and stats files.
# The old mounter is frozen (SIGSTOP) across a plain umount(8) and a new `kegfs mount`
# at the same directory, then let go.
# timeout: 120
# needs: sqlite
. "$(dirname "$0")/../lib.sh"
need_kegfs

sup=$(mounter_pid)
w=$(mounter_worker_pid)
[ -n "$sup" ] && [ -n "$w" ] && [ "$w" != "$sup" ] \
  || skip "no supervisor/worker pair (not root? --no-supervisor?)"
printf 'kept\n' > "$MNT/f" || fail "write"
sync

kill -STOP "$sup" "$w"
# -c: no stat of the mount point first (it would wait for the frozen mounter)
umount -c "$MNT" || { kill -CONT "$sup" "$w"; fail "umount $MNT"; }
mt_mount
new_sup=$(pgrep -f "kegfs.* mount .*$MNT\$" | grep -vx -e "$sup" -e "$w" | head -1)
[ -n "$new_sup" ] || { kill -CONT "$sup" "$w"; fail "no new mounter"; }
note "old mounter $sup/$w frozen; new mounter $new_sup"
kill -CONT "$w" "$sup"
wait_for 60 sh -c "! kill -0 $sup 2>/dev/null" || fail "the old mounter $sup did not exit"
sleep 1.5      # the new worker rewrites its stats file every second

is_mounted || fail "the old mounter's exit unmounted the new mount at $MNT"
assert_eq "$(cat "$MNT/f")" kept "file through the new mount"
st=$("$KEGFS" stats "$MNT" 2>&1) || fail "kegfs stats after the old mounter exited: $st"
echo "$st" | grep -q "pid $(pgrep -P "$new_sup" | head -1)" \
  || fail "kegfs stats does not describe the new mounter: $st"
mt_umount
mt_mount      # leave the volume mounted for the runner, as it came
