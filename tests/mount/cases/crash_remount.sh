#!/usr/bin/env bash
# crash_remount.sh -- kill -9 the mounter: `kegfs umount` cleans up the dead mount
# (ENOTCONN), a new mount of the same volume works, fsync'ed and closed data survived,
# and a file that was open-but-unlinked at the crash is reclaimed, not leaked for ever.
# timeout: 420 (the reclaim check runs only with run-tests.sh --long)
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
need_kegfs

head -c 5000000 /dev/urandom > "$WORK/a"
cp "$WORK/a" "$MNT/a" || fail "cp"
sync
mkdir -p "$MNT/dir/sub" && printf 'x' > "$MNT/dir/sub/x"
sync
# an open file that is unlinked, and one written but not closed
exec 4<"$MNT/a"
# the volume's block objects (file store, or listed through S3; none when unreachable)
if [ -n "$OBJDIR" ] || { [ "${STORAGE:-}" = s3 ] && (need_objstore) >/dev/null 2>&1; }; then
  [ -n "$OBJDIR" ] || need_objstore
  objs() { obj_keys; }
else
  objs() { :; }
fi
objs > "$WORK/objs.before"
cp "$WORK/a" "$MNT/doomed" && sync && exec 5<"$MNT/doomed" && rm "$MNT/doomed"
objs | comm -13 "$WORK/objs.before" - > "$WORK/objs.doomed"
exec 6>"$MNT/unclosed"
printf 'partial' >&6

# the whole mounter dies at once (supervisor and worker), as in a node crash
pids=$(mounter_pids | tr '\n' ' ')
[ -n "$pids" ] || fail "no mounter pid"
# shellcheck disable=SC2086
kill -9 $pids
all_dead() {
  local p
  for p in $pids; do kill -0 "$p" 2>/dev/null && return 1; done
  return 0
}
wait_for 10 all_dead || fail "mounter $pids did not die"
exec 4<&- 5<&- 6>&-
ls "$MNT" >/dev/null 2>&1 && fail "the dead mount still answers"
"$KEGFS" umount "$MNT" > "$WORK/umount.out" 2>&1 \
  || "$KEGFS" umount -f "$MNT" >> "$WORK/umount.out" 2>&1 \
  || fail "kegfs umount of a dead mount failed: $(cat "$WORK/umount.out")"
is_mounted && fail "the dead mount is still in the mount table"
mt_mount
cmp "$WORK/a" "$MNT/a" || fail "fsync'ed file differs after the crash"
assert_eq "$(cat "$MNT/dir/sub/x")" x "small file after the crash"
[ -e "$MNT/doomed" ] && fail "an unlinked file came back"
if [ -e "$MNT/unclosed" ]; then
  note "unclosed file after crash: $(stat -c %s "$MNT/unclosed") bytes (content not guaranteed)"
fi
# the volume is fully usable
cp "$WORK/a" "$MNT/b" && cmp "$WORK/a" "$MNT/b" || fail "write after the crash"
"$KEGFS" status "$META" > "$WORK/status.out" 2>&1 || fail "kegfs status after the crash"
# the crashed mounter's session is still listed (until a live mounter cleans it up), as dead
grep -qE ' ago +dead ' "$WORK/status.out" || fail "status does not mark the crashed session dead: $(cat "$WORK/status.out")"
grep -qE ' ago +live ' "$WORK/status.out" || fail "status does not mark the new session live: $(cat "$WORK/status.out")"
grep -q "dead: the mounter's process on this host is gone" "$WORK/status.out" \
  || fail "status does not explain 'dead': $(cat "$WORK/status.out")"
# the crashed session's open-but-unlinked file is reclaimed by the live mounter once the
# old session is stale (session timeout 60 s + heartbeat): only with --long (takes minutes)
if [ -s "$WORK/objs.doomed" ] && [ "${MT_LONG:-0}" = 1 ]; then
  limit=${KEG_TEST_STALE_WAIT:-180}
  doomed_gone() { [ -z "$(objs | comm -12 "$WORK/objs.doomed" -)" ]; }
  wait_for "$limit" doomed_gone \
    || fail "$(objs | comm -12 "$WORK/objs.doomed" - | wc -l) objects of the unlinked-at-crash file still there after $limit s"
  note "objects of the unlinked-at-crash file reclaimed"
fi
