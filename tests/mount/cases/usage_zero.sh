#!/usr/bin/env bash
# usage_zero.sh -- deleting everything gives the space back: 200 files, 300 MiB in all,
# are written and synced, then removed; without a trash the deleter drains the deletion
# queue and the object directory returns to (near) zero block objects within 60 s, and
# the volume's used space (df) drops back to about nothing.
# format: --trash-days 0
# timeout: 150
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
need_kegfs
need_objstore

LIMIT=${KEG_TEST_USAGE_WAIT:-60}
MIB=$((1024 * 1024))
blocks() { obj_keys | wc -l; }   # block objects (file store, or listed through S3)
used_kib() { df -k --output=used "$MNT" | tail -1 | tr -d ' '; }

head -c $((5 * MIB / 2)) /dev/urandom > "$WORK/src" || fail "source"
mkdir -p "$MNT/a" "$MNT/b/c" || fail "mkdir"
total=0
for i in $(seq 0 199); do
  size=$(( (i % 3) * MIB + MIB / 2 ))          # 0.5, 1.5, 2.5 MiB: 299 MiB in all
  case $((i % 3)) in 0) d=$MNT ;; 1) d=$MNT/a ;; *) d=$MNT/b/c ;; esac
  head -c "$size" "$WORK/src" > "$d/f$i" || fail "write f$i"
  total=$((total + size))
done
sync
[ "$total" -ge $((298 * MIB)) ] || fail "only $total bytes written"
n0=$(blocks)
u0=$(used_kib)
note "written: 200 files, $((total / MIB)) MiB; $n0 block objects; df used $((u0 / 1024)) MiB"
[ "$n0" -ge 200 ] || fail "only $n0 block objects for 200 files"

t0=$(date +%s)
rm -rf "$MNT"/f* "$MNT/a" "$MNT/b" || fail "rm"
[ -z "$(ls -A "$MNT")" ] || fail "the volume is not empty after rm: $(ls -A "$MNT" | head -3)"
sync
gone() { [ "$(blocks)" -le 2 ]; }
wait_for "$LIMIT" gone || fail "$(blocks) of $n0 block objects still in the store $LIMIT s after the delete"
t1=$(date +%s)
note "block objects $n0 -> $(blocks) in $((t1 - t0)) s"
wait_for 10 sh -c "[ \$(df -k --output=used '$MNT' | tail -1) -lt 1024 ]" \
  || fail "df still shows $(used_kib) KiB used after deleting everything"
note "df used $(used_kib) KiB"
exit 0
