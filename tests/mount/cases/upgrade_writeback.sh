#!/usr/bin/env bash
# upgrade_writeback.sh -- an in-place upgrade of a --writeback mounter does not wait for
# uploads and loses nothing staged: a file written and fsynced while its block is held
# back by --upload-delay 30 is still staged when the old worker hands over (no upload
# wait), the new worker finds it in the staging directory and uploads it, and the file
# reads back (also through a descriptor opened before the upgrade, and after a remount
# without the cache).  `kegfs umount` of the upgraded mounter (running a copy named
# kegfs-new) waits until it has uploaded what was staged and exited.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
sup=$(mounter_pid)
[ -n "$(pgrep -P "$sup" | head -1)" ] || skip "no worker under the supervisor (not root?)"
mt_umount
mkdir -p "$WORK/cache"
# every store request takes 1 s (KEG_FAULTY, kept by the upgraded mounter): the drain at
# unmount takes seconds, long enough to see whether `kegfs umount` waits for it
KEG_FAULTY=delay=1000 mt_mount --writeback --cache-dir "$WORK/cache" --upload-delay 30
sup=$(mounter_pid)
staged() { "$KEGFS" stats "$MNT" 2>/dev/null | sed -n 's/.*staged: .* in \([0-9]*\) objects.*/\1/p' | head -1; }
some_staged() { local n; n=$(staged); [ -n "$n" ] && [ "$n" -ge 1 ]; }

head -c 700000 /dev/urandom > "$WORK/src" || fail "source"
exec 5<>"$MNT/f"
cat "$WORK/src" >&5 || fail "write"
python3 -c 'import os,sys; os.fsync(int(sys.argv[1]))' 5 || fail "fsync"
wait_for 5 some_staged || fail "nothing staged before the upgrade: $("$KEGFS" stats "$MNT" 2>&1)"
cp "$KEGFS" "$WORK/kegfs-new" && chmod 755 "$WORK/kegfs-new"
t0=$(date +%s%N)
out=$("$KEGFS" upgrade --binary "$WORK/kegfs-new" "$MNT" 2>&1) || fail "upgrade: $out"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
note "$out (command ${ms} ms, $(staged) object(s) staged)"
[ "$ms" -lt 15000 ] || fail "the upgrade waited ${ms} ms (for uploads?)"
assert_eq "$(mounter_pid)" "$sup" "supervisor pid after the upgrade"
# the new worker finds the object in the staging directory and uploads it at once
grep -q 'staged objects .* were not uploaded before the last stop: uploading them now' "$MT_LOG" \
  || fail "the new worker did not take over the staged object"
uploaded() { "$KEGFS" stats "$MNT" 2>/dev/null | grep -Eq 'in [1-9][0-9]* objects uploaded'; }
wait_for 10 uploaded || fail "the staged object was not uploaded after the upgrade: $("$KEGFS" stats "$MNT" 2>&1)"
cmp "$WORK/src" "$MNT/f" || fail "content after the upgrade"
python3 -c 'import os,sys; d=os.pread(int(sys.argv[1]), 700000, 0); open(sys.argv[2],"wb").write(d)' 5 "$WORK/back" \
  || fail "read through the descriptor opened before the upgrade"
cmp "$WORK/src" "$WORK/back" || fail "the old descriptor reads wrong data"
exec 5>&-
# staged again (held back by --upload-delay): `kegfs umount` must wait for the mounter,
# now running kegfs-new, to upload it and exit
head -c 500000 /dev/urandom > "$WORK/src2" || fail "source 2"
cp "$WORK/src2" "$MNT/g" && sync "$MNT/g" || fail "write + fsync g"
wait_for 5 some_staged || fail "g not staged before the unmount"
t0=$(date +%s%N)
mt_umount      # the new binary's mounter drains the staged object; umount waits for it
note "kegfs umount returned after $(( ($(date +%s%N) - t0) / 1000000 )) ms (drain through a 1 s store)"
mt_mount
cmp "$WORK/src" "$MNT/f" || fail "content after the drain and a remount without the cache"
cmp "$WORK/src2" "$MNT/g" || fail "content of g after the drain and a remount without the cache"
exit 0
