#!/usr/bin/env bash
# redis_two_mounts.sh -- two mounters of one Redis volume (A = $MNT, B = $WORK/mnt2):
# close-to-open consistency (write+close on one mount, open+read on the other sees the new
# bytes; also after a same-size overwrite, an in-place overwrite, truncate and rename),
# directory changes seen both ways, a third mount with the default 1 s kernel caches sees
# changes once the caches expired, and locks conflict across mounters: flock(2) (through
# flock(1)) and fcntl byte-range locks, non-blocking and blocking.
# A and B run with the kernel caches off, so every check is exact (no sleeps).
# timeout: 300
# needs: redis
# mount: --attr-cache 0 --entry-cache 0 --dir-entry-cache 0
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"
need_redis
need_cmd flock sha256sum
KEG_LOCKHOLD=${KEG_LOCKHOLD:-$(dirname "${KEG_SYSCALLS:-/nonexistent/x}")/keg_lockhold}
need_bin KEG_LOCKHOLD keg_lockhold

A=$MNT
B=$WORK/mnt2
C=$WORK/mnt3
m2_mount "$B" "$WORK/mounterB.log" "$META" --attr-cache 0 --entry-cache 0 --dir-entry-cache 0
note "mount B at $B (pid $(m2_pid "$B"))"

sha() { sha256sum < "$1" | cut -d' ' -f1; }

#--- close-to-open: file content ------------------------------------------------------
printf 'version-1' > "$A/f" || fail "write f on A"
assert_eq "$(cat "$B/f")" "version-1" "B reads what A wrote"
printf 'version-2' > "$B/f" || fail "overwrite f on B"       # same size, new bytes
assert_eq "$(cat "$A/f")" "version-2" "A reads B's same-size overwrite"
printf 'version-3' > "$A/f"
assert_eq "$(cat "$B/f")" "version-3" "B reads A's second overwrite"

head -c $((3 * 1024 * 1024 + 123)) /dev/urandom > "$WORK/big" || fail "make big"
cp "$WORK/big" "$A/big" || fail "cp big to A"
assert_eq "$(sha "$B/big")" "$(sha "$WORK/big")" "B reads A's 3 MiB file"
# in-place overwrite in the middle on B (file stays open on A meanwhile: page cache)
exec 7< "$A/big"
head -c 70000 /dev/urandom > "$WORK/patch"
dd if="$WORK/patch" of="$B/big" bs=70000 oflag=seek_bytes seek=1000000 conv=notrunc \
  status=none || fail "in-place overwrite on B"
dd if="$WORK/patch" of="$WORK/big" bs=70000 oflag=seek_bytes seek=1000000 conv=notrunc \
  status=none
exec 7<&-
assert_eq "$(sha "$A/big")" "$(sha "$WORK/big")" "A reads B's in-place overwrite after reopening"

truncate -s 1000 "$A/big" || fail "truncate on A"
assert_eq "$(stat -c %s "$B/big")" 1000 "size on B after A truncated"
assert_eq "$(sha "$B/big")" "$(head -c 1000 "$WORK/big" | sha256sum | cut -d' ' -f1)" \
  "content on B after A truncated"
truncate -s 5000 "$B/big" || fail "extend on B"
assert_eq "$(stat -c %s "$A/big")" 5000 "size on A after B extended"
assert_eq "$(tail -c 4000 "$A/big" | tr -d '\0' | wc -c)" 0 "extended part reads as zeros on A"

mv "$B/f" "$B/g" || fail "rename on B"
[ -e "$A/f" ] && fail "f still visible on A after B renamed it"
assert_eq "$(cat "$A/g")" "version-3" "renamed file on A"
printf 'replacement' > "$A/h"
mv "$A/h" "$A/g" || fail "rename over an existing file on A"
assert_eq "$(cat "$B/g")" "replacement" "B reads the file renamed over g"
note "close-to-open ok (content, overwrite, truncate, rename)"

#--- directories -------------------------------------------------------------------------
mkdir -p "$A/d/e" || fail "mkdir on A"
[ -d "$B/d/e" ] || fail "B does not see A's new directory"
for i in 1 2 3; do printf "$i" > "$B/d/file$i" || fail "create on B"; done
assert_eq "$(ls "$A/d" | tr '\n' ' ')" "e file1 file2 file3 " "A lists B's new files"
rm "$A/d/file2" || fail "rm on A"
assert_eq "$(ls "$B/d" | tr '\n' ' ')" "e file1 file3 " "B lists after A's rm"
[ -e "$B/d/file2" ] && fail "B still finds file2 (negative lookup cached?)"
mv "$B/d/e" "$B/d/e2" || fail "rename dir on B"
[ -d "$A/d/e2" ] && [ ! -e "$A/d/e" ] || fail "A does not see the directory rename"
chmod 0700 "$A/d/file1" && chown 123:456 "$A/d/file1" || fail "chmod/chown on A"
assert_eq "$(stat -c '%a %u %g' "$B/d/file1")" "700 123 456" "attributes on B after A's chmod/chown"
ln -s file3 "$A/d/link" && ln "$A/d/file3" "$A/d/hard" || fail "links on A"
assert_eq "$(readlink "$B/d/link")" "file3" "symlink on B"
assert_eq "$(stat -c %h "$B/d/file3")" 2 "nlink on B after A's hard link"
rmdir "$B/d/e2" || fail "rmdir on B"
[ -e "$A/d/e2" ] && fail "A still sees the removed directory"
note "directory changes visible both ways"

#--- names the other mount has just created (directory name cache) --------------------
# With --entry-cache 0 every lookup reaches the mounter, which answers "no such name" for
# a cached directory without asking Redis, learning new names from Redis announcements
# (docs/internals/meta-redis.md).  B must see each name A creates or renames at once.
mkdir "$A/n" || fail "mkdir n on A"
for i in $(seq 1 200); do
  [ -e "$B/n/f$i" ] && fail "B finds n/f$i before it exists"
  : > "$A/n/f$i" || fail "create n/f$i on A"
  [ -e "$B/n/f$i" ] || fail "B does not see n/f$i right after A created it (stale name cache)"
  mv "$A/n/f$i" "$A/n/g$i" || fail "rename n/f$i on A"
  [ -e "$B/n/g$i" ] || fail "B does not see n/g$i right after A's rename (stale name cache)"
  [ -e "$B/n/f$i" ] && fail "B still finds n/f$i after A's rename"
done
# and the cache is what answers: a create costs one script (mknod), not lookup + mknod
hostport=${META#redis://}; hostport=${hostport%%/*}
case "$META" in
  redis://127.0.0.1:*)
    port=${hostport##*:}
    evalsha() { rd_cli "$port" INFO commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p'; }
    before=$(evalsha)
    # relative names: with --entry-cache 0 a full path would look "n" up every time
    ( cd "$A/n" && for i in $(seq 1 100); do : > "c$i" || exit 1; done ) || fail "create n/c* on A"
    calls=$(( $(evalsha) - before ))
    note "100 creates on A: $calls scripts (heartbeats of three mounters included)"
    [ "$calls" -lt 130 ] || fail "100 creates took $calls scripts: the name cache did not answer"
    ;;
esac
# kegfs stats shows the cache at work (the stats file is rewritten every second)
sleep 1.5
names=$("$KEGFS" stats "$A" 2>&1 | grep 'names:' | sed 's/^ *//')
note "A: $names"
case "$names" in
  *"directory name cache up;"*) ;;
  *) fail "kegfs stats of A does not show the name cache up: '$names'" ;;
esac
answered=$(sed -nE 's/.* ([0-9]+) lookups answered.*/\1/p' <<< "$names")
[ "${answered:-0}" -ge 100 ] || fail "kegfs stats of A: only ${answered:-0} lookups answered"
note "names created or renamed on A seen at once on B, 200 times"

#--- a mount with the default kernel caches (1 s) --------------------------------------
m2_mount "$C" "$WORK/mounterC.log" "$META"
assert_eq "$(cat "$C/g")" "replacement" "C reads g"
[ -e "$C/new-in-A" ] && fail "new-in-A exists before it was created"   # negative entry cached
printf 'fresh' > "$A/new-in-A"
printf 'changed-g' > "$A/g"
sleep 1.5    # > --entry-cache and --attr-cache defaults (1 s)
assert_eq "$(cat "$C/new-in-A" 2>&1)" "fresh" "C sees A's new file after the cache timeout"
assert_eq "$(cat "$C/g")" "changed-g" "C reads A's overwrite after the cache timeout"
m2_umount "$C"
note "default-cache mount sees changes after 1.5 s"

#--- flock across mounts ---------------------------------------------------------------
: > "$A/lk"
flock -o -x "$A/lk" -c "echo \$\$ > '$WORK/flock.held'; exec sleep 120" &
holder=$!
wait_for 10 test -s "$WORK/flock.held" || fail "flock holder on A did not get the lock"
flock -x -n "$B/lk" true && fail "flock -x -n on B succeeded while A holds LOCK_EX"
flock -s -n "$B/lk" true && fail "flock -s -n on B succeeded while A holds LOCK_EX"
"$KEG_LOCKHOLD" flock-ex "$B/lk" > "$WORK/lh.out"
assert_eq "$?" 1 "keg_lockhold flock-ex on B while A holds it ($(cat "$WORK/lh.out"))"
# a blocked waiter on B gets the lock once A lets go
flock -x -w 30 "$B/lk" -c "echo got > '$WORK/flock.waiter'" &
waiter=$!
sleep 1
[ -s "$WORK/flock.waiter" ] && fail "waiter on B got the lock while A still holds it"
t0=$(now_ms)
kill "$(cat "$WORK/flock.held")"; wait "$holder" 2>/dev/null   # sleep dies, flock exits
wait "$waiter" || fail "blocked flock on B did not get the lock after A released it"
note "blocked flock on B got the lock $(( $(now_ms) - t0 )) ms after A's release"
# shared locks are shared across mounts
flock -o -s "$A/lk" -c "echo \$\$ > '$WORK/flock.sh'; exec sleep 120" &
holder=$!
wait_for 10 test -s "$WORK/flock.sh" || fail "shared flock holder on A"
flock -s -n "$B/lk" true || fail "flock -s on B refused while A holds only LOCK_SH"
flock -x -n "$B/lk" true && fail "flock -x on B succeeded while A holds LOCK_SH"
kill "$(cat "$WORK/flock.sh")"; wait "$holder" 2>/dev/null
wait_for 10 flock -x -n "$B/lk" true || fail "flock -x on B after A released LOCK_SH"
note "flock conflicts across mounts ok"

#--- fcntl byte-range locks across mounts -----------------------------------------------
: > "$A/pl"
"$KEG_LOCKHOLD" -H 120 wr "$A/pl" 0 100 > "$WORK/pl.held" &
holder=$!
wait_for 10 grep -q '^locked' "$WORK/pl.held" || fail "fcntl holder on A: $(cat "$WORK/pl.held")"
"$KEG_LOCKHOLD" rd "$A/pl" 200 100 > /dev/null   # exits at once: lock taken and released
lh() { "$KEG_LOCKHOLD" "$@" > "$WORK/lh.out"; echo $?; }
assert_eq "$(lh wr "$B/pl" 50 10)" 1 "F_WRLCK [50,60) on B inside A's write lock"
assert_eq "$(lh rd "$B/pl" 99 1)" 1 "F_RDLCK [99,100) on B inside A's write lock"
assert_eq "$(lh wr "$B/pl" 100 10)" 0 "F_WRLCK [100,110) on B next to A's lock"
assert_eq "$(lh wr "$B/pl" 0 0)" 1 "F_WRLCK whole file on B"
"$KEG_LOCKHOLD" getlk "$B/pl" 10 5 > "$WORK/getlk.out" || fail "F_GETLK on B"
grep -q '^locked wr 0 100 ' "$WORK/getlk.out" \
  || fail "F_GETLK on B should report A's write lock [0,100): $(cat "$WORK/getlk.out")"
"$KEG_LOCKHOLD" getlk "$B/pl" 100 5 > "$WORK/getlk.out"
assert_eq "$(cat "$WORK/getlk.out")" unlocked "F_GETLK on B past A's lock"
# a blocking F_SETLKW on B waits for A
"$KEG_LOCKHOLD" -W 30 wr "$B/pl" 0 10 > "$WORK/plw.out" &
waiter=$!
sleep 1
grep -q '^locked' "$WORK/plw.out" && fail "F_SETLKW on B got the lock while A holds it"
t0=$(now_ms)
kill "$holder"; wait "$holder" 2>/dev/null
wait "$waiter" || fail "F_SETLKW on B after A released: $(cat "$WORK/plw.out")"
note "F_SETLKW on B got the lock $(( $(now_ms) - t0 )) ms after A's holder exited"
# read locks are shared across mounts, and block writers
"$KEG_LOCKHOLD" -H 120 rd "$A/pl" 200 100 > "$WORK/pl.held" &
holder=$!
wait_for 10 grep -q '^locked' "$WORK/pl.held" || fail "read-lock holder on A"
assert_eq "$(lh rd "$B/pl" 250 10)" 0 "F_RDLCK on B over A's read lock"
assert_eq "$(lh wr "$B/pl" 250 10)" 1 "F_WRLCK on B over A's read lock"
kill "$holder"; wait "$holder" 2>/dev/null
wait_for 10 "$KEG_LOCKHOLD" wr "$B/pl" 0 0 > /dev/null \
  || fail "whole-file F_WRLCK on B after A's holder exited"
note "fcntl lock conflicts across mounts ok"

m2_umount "$B"
m2_is_mounted "$B" && fail "B still mounted after kegfs umount"
exit 0
