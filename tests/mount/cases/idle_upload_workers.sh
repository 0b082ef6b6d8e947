#!/usr/bin/env bash
# idle_upload_workers.sh -- --idle-upload-workers: once writes pause, a backlog of staged
# blocks is uploaded on that many connections, where --upload-workers alone keeps one at a
# time; the option needs --writeback and takes 1 .. 256.  The store is slow (every object
# operation takes 1.5 s), so `kegfs stats` (its figures are refreshed once a second)
# shows the uploads in flight.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs

expect_fail 'needs --writeback' "$KEGFS" mount --cache-dir "$WORK/c0" \
  --idle-upload-workers 4 "$META" "$MNT"
expect_fail 'idle-upload-workers' "$KEGFS" mount --writeback --cache-dir "$WORK/c0" \
  --idle-upload-workers 0 "$META" "$MNT"

# most_in_flight IDLE: stage 8 small files, poll the uploads in flight until all are
# uploaded, print the largest count seen (only that on stdout)
most_in_flight() {
  local most=0 st n i
  mt_umount >&2
  rm -rf "$WORK/cache"
  mkdir -p "$WORK/cache"
  KEG_FAULTY="delay=1500" mt_mount --writeback --cache-dir "$WORK/cache" --upload-workers 1 \
    --idle-upload-workers "$1" --upload-delay 0 >&2
  for i in $(seq 1 8); do
    head -c 5000 /dev/urandom > "$MNT/f$1.$i" || fail "write f$1.$i"
  done
  for i in $(seq 1 300); do
    st=$("$KEGFS" stats "$MNT" 2>&1) || fail "kegfs stats: $st"
    n=$(echo "$st" | sed -n 's/^ *uploads: *\([0-9]*\) in flight.*/\1/p')
    [ -n "$n" ] || fail "no 'uploads: N in flight' line in kegfs stats: $st"
    [ "$n" -gt "$most" ] && most=$n
    echo "$st" | grep -q ' in 8 objects uploaded' && break
    sleep 0.1
  done
  echo "$st" | grep -q ' in 8 objects uploaded' || fail "not all uploaded after 30 s: $st"
  echo "$most"
}

one=$(most_in_flight 1) || fail "staging with --idle-upload-workers 1 failed"
[ "$one" = 1 ] || fail "--upload-workers 1 --idle-upload-workers 1: $one uploads in flight at once"
four=$(most_in_flight 4) || fail "staging with --idle-upload-workers 4 failed"
[ "$four" -ge 2 ] && [ "$four" -le 4 ] \
  || fail "--upload-workers 1 --idle-upload-workers 4: $four uploads in flight at most (want 2 .. 4)"
# every file is whole after the uploads, read back from the store without the cache
for i in $(seq 1 8); do cp "$MNT/f4.$i" "$WORK/ref.$i" || fail "read f4.$i"; done
mt_umount
mt_mount
for i in $(seq 1 8); do cmp -s "$MNT/f4.$i" "$WORK/ref.$i" || fail "f4.$i differs from the store"; done
exit 0
