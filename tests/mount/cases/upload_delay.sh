#!/usr/bin/env bash
# upload_delay.sh -- --upload-delay: a staged block is not uploaded before the delay; a
# file written and deleted within the delay never reaches the store; `kegfs umount`
# does not wait for the delay (it drains at once) and does not upload a file deleted just
# before it; the option needs --writeback.
# timeout: 90
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
need_kegfs
need_objstore

blocks() { obj_keys | wc -l; }

expect_fail 'needs --writeback' "$KEGFS" mount --cache-dir "$WORK/c0" --upload-delay 5 \
  "$META" "$MNT"
expect_fail 'upload-delay' "$KEGFS" mount --writeback --cache-dir "$WORK/c0" \
  --upload-delay 4000 "$META" "$MNT"

mt_umount
mkdir -p "$WORK/cache"
mt_mount --writeback --cache-dir "$WORK/cache" --upload-delay 4
n0=$(blocks)

# written and closed: staged, not uploaded during the delay
head -c 300000 /dev/urandom > "$WORK/keep" || fail "source"
cp "$WORK/keep" "$MNT/keep" || fail "write keep"
# written and deleted within the delay: never uploaded
head -c 200000 /dev/urandom > "$MNT/tmp" || fail "write tmp"
rm "$MNT/tmp" || fail "rm tmp"
sleep 1.5
[ "$(blocks)" = "$n0" ] || fail "$(( $(blocks) - n0 )) objects uploaded within the 4 s delay"
cmp "$WORK/keep" "$MNT/keep" || fail "keep reads back wrong while staged"

# after the delay: exactly keep's block was uploaded
up() { [ "$(blocks)" -gt "$n0" ]; }
wait_for 10 up || fail "nothing uploaded 10 s after the delay started"
sleep 2
[ "$(blocks)" = $((n0 + 1)) ] || fail "$(( $(blocks) - n0 )) objects uploaded, expected 1 (tmp must never be)"
note "after the delay: 1 object uploaded; the deleted file's block never was"

# unmount drains at once, without waiting for the delay; a file deleted just before
# the unmount is dropped, not uploaded (its deletion is carried out before the drain).
# A delay far longer than the writes below take, even on a loaded machine.
mt_umount
mt_mount --writeback --cache-dir "$WORK/cache" --upload-delay 120
n1=$(blocks)
head -c 100000 /dev/urandom > "$MNT/late" || fail "write late"
mkdir "$MNT/gone" || fail "mkdir gone"
for i in $(seq 1 300); do head -c 20000 /dev/urandom > "$MNT/gone/$i" || fail "write gone/$i"; done
rm -r "$MNT/gone" || fail "rm gone"
t0=$(date +%s%N)
mt_umount
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$(blocks)" = $((n1 + 1)) ] || fail "umount left $(( n1 + 1 - $(blocks) )) objects staged"
drained=$(grep -o 'uploading [0-9]* staged objects' "$MT_LOG" | tail -1)
[ "$drained" = "uploading 1 staged objects" ] \
  || fail "the unmount drain should upload only late's block, not the deleted file's: '$drained'"
note "umount with a staged block drained it in $ms ms"
[ "$ms" -lt 30000 ] || fail "umount took $ms ms: it waited for the 120 s delay"
mt_mount
[ "$(stat -c %s "$MNT/late")" = 100000 ] || fail "late has the wrong size after remount"
cmp "$WORK/keep" "$MNT/keep" || fail "keep reads back wrong after remount"
exit 0
