#!/usr/bin/env bash
# bad_input.sh -- wrong input to the CLI fails with a non-zero exit and a message that names
# the problem, and changes nothing: bad META_URL scheme, format over an existing volume,
# mount on a missing / non-empty / already mounted directory, an unformatted volume,
# status of a missing sqlite db (no file may be created), umount of a non-mount, unknown
# Redis URL parameters, an ambiguous '@', control bytes in a rejected name (shown escaped).
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs

B=$WORK/bad
mkdir -p "$B/objs"
printf 'precious' > "$MNT/keep" || fail "write keep"
sync

# 1. META_URL with an unknown scheme
expect_fail 'scheme|bogus|unsupported|META_URL' \
  "$KEGFS" format --storage file --bucket "$B/objs" bogus://127.0.0.1/x vol1
expect_fail 'sqlite|path|META_URL|invalid' \
  "$KEGFS" format --storage file --bucket "$B/objs" sqlite3://relative/path.db vol1
# bad sizes and storage
expect_fail 'block-size|block size' \
  "$KEGFS" format --storage file --bucket "$B/objs" --block-size 3K "sqlite3://$B/m1.db" vol1
expect_fail 'block-size|block size' \
  "$KEGFS" format --storage file --bucket "$B/objs" --block-size 64M "sqlite3://$B/m1.db" vol1
expect_fail 'capacity' \
  "$KEGFS" format --storage file --bucket "$B/objs" --capacity lots "sqlite3://$B/m1.db" vol1
expect_fail 'storage|nosuch' \
  "$KEGFS" format --storage nosuch --bucket "$B/objs" "sqlite3://$B/m1.db" vol1
expect_fail 'usage|needs|META_URL|NAME|missing' "$KEGFS" format
# a misspelt or unknown Redis URL parameter is refused (it would format the default
# namespace); so is a second unescaped '@' (ambiguous password).  No server is contacted.
expect_fail "unknown parameter 'nss'" \
  "$KEGFS" format --storage file --bucket "$B/objs" "redis://127.0.0.1:1/7?nss=vol" vol1
expect_fail "%40" "$KEGFS" format --storage file --bucket "$B/objs" "redis://:@@127.0.0.1:1/6" vol1
expect_fail "unknown parameter 'nss'" "$KEGFS" status "redis://127.0.0.1:1/7?nss=vol"
# control bytes in a rejected name are escaped, never written raw to the terminal
"$KEGFS" format --storage file --bucket "$B/objs" "sqlite3://$B/m1.db" $'bad\e[2Jname' \
  > "$B/ctl.out" 2>&1 && fail "format accepted a volume name with an escape sequence"
grep -q $'\e' "$B/ctl.out" && fail "a raw ESC byte reached the terminal: $(od -c "$B/ctl.out" | head -3)"
grep -qF 'bad\x1b[2Jname' "$B/ctl.out" || fail "the rejected name is not shown escaped: $(cat -v "$B/ctl.out")"
"$KEGFS" status $'redis://127.0.0.1:1/0?n\as=x' > "$B/ctl2.out" 2>&1 && fail "status accepted ?n\\as"
grep -q $'\a' "$B/ctl2.out" && fail "a raw BEL byte reached the terminal: $(cat -v "$B/ctl2.out")"
grep -qF 'n\x07s' "$B/ctl2.out" || fail "the parameter name is not shown escaped: $(cat -v "$B/ctl2.out")"
expect_fail 'usage|unknown|sub-?command|command' "$KEGFS" frobnicate

# 2. format over the mounted, existing volume without --force: refused, volume unchanged
"$KEGFS" status "$META" > "$B/status.before" 2>&1 || fail "status failed: $(cat "$B/status.before")"
expect_fail 'already|exists|formatted|--force' \
  "$KEGFS" format --storage "$STORAGE" --bucket "$BUCKET" "$META" "$VOL"
expect_fail 'already|exists|formatted|--force' \
  "$KEGFS" format --storage "$STORAGE" --bucket "$BUCKET" --block-size 1M "$META" other-name
"$KEGFS" status "$META" > "$B/status.after" 2>&1 || fail "status failed after refused format"
grep -iE 'block|name|uuid' "$B/status.before" | grep -viE 'session|used|time|heartbeat|inodes|bytes|cached' > "$B/s1"
grep -iE 'block|name|uuid' "$B/status.after" | grep -viE 'session|used|time|heartbeat|inodes|bytes|cached' > "$B/s2"
cmp -s "$B/s1" "$B/s2" || fail "volume settings changed by a refused format: $(diff "$B/s1" "$B/s2")"
assert_eq "$(cat "$MNT/keep")" precious "file after a refused format"

# 3. mount errors
expect_fail 'not exist|no such|missing' "$KEGFS" mount -d "$META" "$B/nodir"
mkdir -p "$B/full"
: > "$B/full/file"
expect_fail 'not empty|non-empty|nonempty' "$KEGFS" mount -d "$META" "$B/full"
is_mounted_at() { grep -qs " $1 " /proc/self/mountinfo; }
is_mounted_at "$B/full" && fail "a failed mount left $B/full mounted"
: > "$B/afile"
expect_fail 'not a directory' "$KEGFS" mount -d "$META" "$B/afile"
expect_fail 'already|mount point|mounted' "$KEGFS" mount -d "$META" "$MNT"
mkdir -p "$B/mnt2"
expect_fail 'format|not formatted|no volume' "$KEGFS" mount -d "sqlite3://$B/never.db" "$B/mnt2"
is_mounted_at "$B/mnt2" && fail "an unformatted volume got mounted"
expect_fail 'scheme|bogus|unsupported|META_URL' "$KEGFS" mount -d "bogus://x" "$B/mnt2"

# 4. status of a missing sqlite db: an error, and no file created
expect_fail 'not exist|no such|not formatted|no volume|cannot open|missing' \
  "$KEGFS" status "sqlite3://$B/missing.db"
[ -e "$B/missing.db" ] && fail "kegfs status created $B/missing.db"
ls "$B" | grep -q '^missing.db' && fail "kegfs status created $(ls "$B" | grep '^missing.db')"

# 5. umount of something that is not a kegfs mount
expect_fail 'not mounted|not a mount|not a kegfs|no such' "$KEGFS" umount "$B/mnt2"
expect_fail 'not mounted|not a mount|not a kegfs|no such|not exist' "$KEGFS" umount "$B/nodir"

# the real mount is still fine
assert_eq "$(cat "$MNT/keep")" precious "file at the end"
exit 0
