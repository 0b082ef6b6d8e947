#!/usr/bin/env bash
# upgrade_inplace.sh -- `kegfs upgrade MOUNTPOINT --binary COPY` switches a running
# mount to another kegfs binary with nothing unmounted: the supervisor keeps its pid
# and /dev/fuse descriptor and runs the new binary, a new worker adopts the open
# files.  An app that holds a file open and appends + fsyncs + reads back every
# 50 ms, and a reader that lists and reads the directory, see zero errors and zero
# lost records across two upgrades; the longest stall is reported.  A binary that
# cannot run is refused before anything stops.
# timeout: 120
# allow-log: cannot run here
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd python3
app=$MT_HERE/../../e2e/outlive/appender.py
[ -f "$app" ] || fail "missing $app"

sup=$(mounter_pid)
[ -n "$sup" ] || fail "no mounter pid"
w1=$(pgrep -P "$sup" | head -1)
[ -n "$w1" ] || skip "no worker under the supervisor $sup (not root? --no-supervisor?)"

cp "$KEGFS" "$WORK/kegfs-new" && chmod 755 "$WORK/kegfs-new" || fail "copy kegfs"
mkdir "$MNT/app" || fail "mkdir"
echo hello > "$MNT/app/hello" || fail "setup"
python3 "$app" write "$MNT/app/log" "$WORK/stop" "$WORK/writer.txt" &
wpid=$!
python3 "$app" read "$MNT/app" "$WORK/stop" "$WORK/reader.txt" &
rpid=$!
alive() { [ -e "$WORK/writer.txt.alive" ] && [ -e "$WORK/reader.txt.alive" ]; }
wait_for 60 alive || fail "the app did not start"
lines() { wc -l < "$MNT/app/log"; }
more_than() { [ "$(lines)" -gt "$1" ]; }

results() { find "${KEGFS_RUN_DIR:-/run/kegfs}/mounts" -name '*.upgrade-result' 2>/dev/null | wc -l; }
r0=$(results)
# a binary that does not run here is refused; the mount is untouched
printf '#!/bin/sh\nexit 3\n' > "$WORK/broken" && chmod 755 "$WORK/broken"
out=$("$KEGFS" upgrade --binary "$WORK/broken" "$MNT" 2>&1) && fail "a broken binary was accepted: $out"
echo "$out" | grep -q "cannot run here" || fail "unclear refusal: $out"
assert_eq "$(pgrep -P "$sup" | head -1)" "$w1" "the worker after a refused upgrade"

t0=$(date +%s%N)
out=$("$KEGFS" upgrade --binary "$WORK/kegfs-new" "$MNT" 2>&1) || fail "upgrade: $out"
assert_eq "$(results)" "$r0" "upgrade result files left in /run/kegfs/mounts"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
note "$out (command took ${ms} ms)"
kill -0 "$sup" || fail "the supervisor is gone"
assert_eq "$(readlink "/proc/$sup/exe")" "$WORK/kegfs-new" "binary of the supervisor"
w2=$(pgrep -P "$sup" | head -1)
[ -n "$w2" ] && [ "$w2" != "$w1" ] || fail "no new worker ($w1 -> $w2)"
assert_eq "$(readlink "/proc/$w2/exe")" "$WORK/kegfs-new" "binary of the new worker"
n1=$(lines)
wait_for 30 more_than $((n1 + 3)) || fail "the app made no progress after the upgrade"

# and back to the original binary, with the default (this kegfs)
out=$("$KEGFS" upgrade "$MNT" 2>&1) || fail "second upgrade: $out"
note "$out"
assert_eq "$(readlink "/proc/$sup/exe")" "$(readlink -f "$KEGFS")" "binary after the second upgrade"
n2=$(lines)
wait_for 30 more_than $((n2 + 3)) || fail "the app made no progress after the second upgrade"
touch "$WORK/stop"
wait "$wpid" || fail "writer failed"
wait "$rpid" || fail "reader failed"
note "writer: $(tr '\n' ' ' < "$WORK/writer.txt")"
note "reader: $(tr '\n' ' ' < "$WORK/reader.txt")"
grep -q '^errors=0$' "$WORK/writer.txt" || fail "writer errors: $(cat "$WORK/writer.txt")"
grep -q '^errors=0$' "$WORK/reader.txt" || fail "reader errors: $(cat "$WORK/reader.txt")"
n=$(sed -n 's/^records=//p' "$WORK/writer.txt")
[ "$n" -ge 8 ] || fail "only $n records written"
assert_eq "$(wc -l < "$MNT/app/log")" "$n" "records in the file"
assert_eq "$(cat "$MNT/app/hello")" hello "old file"
grep -q 'took over' "$MT_LOG" || fail "no handover in the log"
mt_umount
exit 0
