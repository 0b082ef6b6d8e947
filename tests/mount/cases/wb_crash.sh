#!/usr/bin/env bash
# wb_crash.sh -- writeback: a mounter killed with uploads still pending loses nothing that
# was closed or fsync'ed.  A second volume (SQLite in WORK, file store WORK/obj2) is mounted
# with --writeback --cache-dir WORK/cache, one upload worker and a slow store
# (KEG_FAULTY=delay=300: every object op takes 300 ms), so staged objects pile up.  Files
# are written: some fsync'ed, the others only closed; one is left open.  The mounter is
# killed with SIGKILL while objects are still staged.  The volume is mounted again with the
# same cache dir and no delay: every fsync'ed and every closed file reads back exactly, the
# staging area empties (kegfs stats), every object of every file is in WORK/obj2, and a
# third mount WITHOUT the cache dir reads every file from the store alone.
# timeout: 90
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd sha256sum

M2=$WORK/mnt2
OBJ2=$WORK/obj2
CACHE=$WORK/cache
META2="sqlite3://$WORK/meta2.db"
LOG2=$WORK/mounter2.log
mkdir -p "$M2" "$OBJ2" "$CACHE"
"$KEGFS" format --storage file --bucket "$OBJ2" "$META2" wbcrash > "$WORK/format2.log" 2>&1 \
  || fail "format of the second volume: $(tail -3 "$WORK/format2.log")"

m2_pid() { pgrep -f "kegfs.* mount .*$M2\$" | head -1; }
m2_mounted() { grep -qs " $M2 " /proc/self/mountinfo; }
staged() {   # staged files in the staging slots of WORK/cache
  find "$CACHE" -path '*/staging/*' -type f ! -name '.lock' ! -name '.tmp*' 2>/dev/null | wc -l
}
mount2() {   # mount2 LOG [ARGS...]
  local log=$1
  shift
  "$KEGFS" mount -d --no-supervisor --log-file "$log" "$@" "$META2" "$M2" \
    > "$WORK/mount2.out" 2>&1 || fail "mount of the second volume: $(cat "$WORK/mount2.out")"
  m2_mounted || fail "$M2 not mounted"
}

KEG_FAULTY="delay=300" mount2 "$LOG2" --writeback --cache-dir "$CACHE" --upload-workers 1 \
  --idle-upload-workers 1

# sources: sizes across the 4 MiB block size
sizes=(1 4096 100000 1048576 4194304 4194305 6000000 12345)
i=0
for s in "${sizes[@]}"; do
  head -c "$s" /dev/urandom > "$WORK/src.$i"
  i=$((i + 1))
done
: > "$WORK/expect"
for i in "${!sizes[@]}"; do
  if [ $((i % 2)) = 0 ]; then
    dd if="$WORK/src.$i" of="$M2/fsynced.$i" bs=1M conv=fsync status=none \
      || fail "write+fsync fsynced.$i"
    echo "fsynced.$i $i" >> "$WORK/expect"
  else
    cp "$WORK/src.$i" "$M2/closed.$i" || fail "write+close closed.$i"
    echo "closed.$i $i" >> "$WORK/expect"
  fi
done
mkdir -p "$M2/d/e" && cp "$WORK/src.2" "$M2/d/e/nested" || fail "nested file"
echo "d/e/nested 2" >> "$WORK/expect"
exec 6>"$M2/open-at-crash"
printf 'not closed' >&6

n=$(staged)
note "staged objects at the crash: $n (of $(wc -l < "$WORK/expect") files)"
[ "$n" -ge 3 ] || fail "only $n objects staged before the crash: the delay did not hold uploads back"
"$KEGFS" stats "$M2" > "$WORK/stats-before" 2>&1 && sed 's/^/# /' "$WORK/stats-before"

pid=$(m2_pid)
[ -n "$pid" ] || fail "no mounter for $M2"
kill -9 "$pid"
wait_for 10 sh -c "! kill -0 $pid 2>/dev/null" || fail "mounter $pid did not die"
exec 6>&-
umount -l "$M2" 2>/dev/null || "$KEGFS" umount "$M2" > /dev/null 2>&1
m2_mounted && fail "the dead mount is still in the mount table"
[ "$(staged)" -ge 1 ] || fail "staging emptied although the mounter was killed"

# remount, same cache dir, no delay
mount2 "$WORK/mounter2b.log" --writeback --cache-dir "$CACHE"
while read -r f i; do
  cmp "$WORK/src.$i" "$M2/$f" || fail "$f differs after the crash (a closed/fsync'ed file lost data)"
done < "$WORK/expect"
note "every closed and fsync'ed file reads back after the crash"
[ -e "$M2/open-at-crash" ] && note "open-at-crash: $(stat -c %s "$M2/open-at-crash") bytes (not guaranteed)"

drained() { [ "$(staged)" = 0 ] && "$KEGFS" stats "$M2" 2>/dev/null | grep -q 'staged: .* in 0 objects'; }
wait_for 30 drained || fail "staging did not empty within 30 s: $(staged) files; $("$KEGFS" stats "$M2" 2>&1 | grep staged)"
"$KEGFS" stats "$M2" | grep -E 'staged|uploads' | sed 's/^/# after remount: /'

# every object of every file is in the file store
"$KEGFS" info $(awk -v m="$M2" '{ print m "/" $1 }' "$WORK/expect") > "$WORK/info" 2>&1 \
  || fail "kegfs info: $(tail -3 "$WORK/info")"
nobj=0
for key in $(awk '$1 == "object" { print $2 }' "$WORK/info"); do
  [ -f "$OBJ2/$key" ] || fail "object $key is not in $OBJ2"
  nobj=$((nobj + 1))
done
[ "$nobj" -ge "$(wc -l < "$WORK/expect")" ] || fail "only $nobj objects listed by kegfs info"
note "all $nobj objects are in $OBJ2"

"$KEGFS" umount "$M2" > "$WORK/umount2.out" 2>&1 || fail "umount: $(cat "$WORK/umount2.out")"
# the store alone (no cache dir) has everything
mount2 "$WORK/mounter2c.log"
while read -r f i; do
  cmp "$WORK/src.$i" "$M2/$f" || fail "$f differs when read from the store without the cache"
done < "$WORK/expect"
"$KEGFS" umount "$M2" > "$WORK/umount2.out" 2>&1 || fail "umount: $(cat "$WORK/umount2.out")"

errs=$(grep -hE ' (ERROR|FATAL) ' "$WORK/mounter2b.log" "$WORK/mounter2c.log")
[ -z "$errs" ] || fail "ERROR lines after the crash: $(echo "$errs" | head -3)"
exit 0
