#!/usr/bin/env bash
# two_mounts.sh -- two mounters of one volume on this machine: close-to-open (a file closed
# in A is seen whole when opened in B, also when B had the old version cached), names made
# or renamed in A appear in B after the entry cache timeout, and flock / POSIX locks are
# volume-wide (held in A, refused in B).
# timeout: 300
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd flock

B=$WORK/mnt2
mkdir -p "$B"
# shellcheck disable=SC2086
"$KEGFS" mount -d --log-file "$MT_LOG" $MT_MOUNT_EXTRA "$META" "$B" || fail "second mount failed"
trap '"$KEGFS" umount "$B" >/dev/null 2>&1' EXIT
SETTLE=2   # > the default 1 s attr/entry cache of both mounts

# close-to-open
head -c 3000000 /dev/urandom > "$WORK/v1"
head -c 3000000 /dev/urandom > "$WORK/v2"
cp "$WORK/v1" "$MNT/f" || fail "write v1 in A"
sleep $SETTLE
cmp "$WORK/v1" "$B/f" || fail "B does not see v1 written and closed in A"
cp "$WORK/v2" "$MNT/f" || fail "write v2 in A"          # same size, same inode
sleep $SETTLE
cmp "$WORK/v2" "$B/f" || fail "B reads stale data after A rewrote the file (close-to-open)"
# append in B, read in A
printf 'tail' >> "$B/f" || fail "append in B"
sleep $SETTLE
assert_eq "$(stat -c %s "$MNT/f")" 3000004 "size in A after append in B"
assert_eq "$(tail -c 4 "$MNT/f")" tail "A reads B's append"

# names
mkdir "$MNT/d" && : > "$MNT/d/x" || fail "create in A"
sleep $SETTLE
[ -f "$B/d/x" ] || fail "B does not see d/x created in A"
mv "$MNT/d/x" "$MNT/d/y" || fail "rename in A"
sleep $SETTLE
[ -e "$B/d/x" ] && fail "B still sees d/x after A renamed it"
[ -f "$B/d/y" ] || fail "B does not see d/y"
rm -rf "$B/d" || fail "rm -rf in B"
sleep $SETTLE
[ -e "$MNT/d" ] && fail "A still sees d after B removed it"

# flock across mounts
: > "$MNT/lock"
flock -x "$MNT/lock" sleep 5 &
holder=$!
sleep 1
if flock -n -x "$B/lock" true; then
  fail "flock in B succeeded while A holds an exclusive flock"
fi
wait $holder
flock -n -x "$B/lock" true || fail "flock in B refused after A released it"

# POSIX byte-range locks across mounts (flock(1) cannot do fcntl locks: use perl if present)
if command -v perl >/dev/null 2>&1; then
  lockit='use Fcntl; open(my $f, "+<", $ARGV[0]) or die "open: $!";
          my $fl = pack("s s l l i", F_WRLCK, 0, 0, 100, 0);
          if (fcntl($f, F_SETLK, $fl)) { print "locked\n"; sleep($ARGV[1]); exit 0 }
          print "busy $!\n"; exit 1'
  perl -e "$lockit" "$MNT/lock" 5 > "$WORK/lk1" &
  holder=$!
  sleep 1
  out=$(perl -e "$lockit" "$B/lock" 0) && fail "F_SETLK in B succeeded while A holds it ($out)"
  note "B: $out"
  wait $holder
  perl -e "$lockit" "$B/lock" 0 >/dev/null || fail "F_SETLK in B refused after A released it"
fi
"$KEGFS" umount "$B" || fail "umount of the second mount"
trap - EXIT
