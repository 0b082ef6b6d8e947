#!/usr/bin/env bash
# dump_load.sh -- `kegfs dump` / `kegfs load` move a volume between metadata
# engines without touching object data: a tree with files, sparse files, hard
# links, symlinks, xattrs (text and binary), special files and a non-UTF-8 name
# is dumped, loaded into a fresh SQLite database (and, with KEG_TEST_REDIS_URL,
# into a fresh Redis namespace and from there back into another SQLite
# database); every copy is mounted read-only next to the original and compared
# byte for byte (diff -r) and by metadata (type, mode, owner, size, mtime,
# inode number, link count, symlink target, xattrs, rdev).  Each dump of a
# copy must equal the first dump byte for byte.  Loading into a non-empty
# target and loading a truncated dump must fail with a clear message.
# timeout: 600
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd getfattr setfattr diff cmp stat mkfifo mknod
"$KEGFS" dump --help >/dev/null 2>&1 || skip "this kegfs has no dump command"
"$KEGFS" load --help >/dev/null 2>&1 || skip "this kegfs has no load command"

MIB=$((1024 * 1024))
cd "$MNT" || fail "cd $MNT"
mkdir -p t/a/b/c t/empty t/modes t/special || fail "mkdir"
for n in 0 1 4095 4096 4097 65536 $((MIB + 1)); do
  head -c "$n" /dev/urandom > "t/a/size-$n" || fail "write size-$n"
done
head -c $((5 * MIB + 3)) /dev/urandom > t/a/b/c/big || fail "write big"
printf 'hello\n' > t/a/hello
ln t/a/hello t/a/b/hello-hardlink || fail "ln"
ln t/a/hello t/hello-3rd-link || fail "ln 3"
ln -s ../hello t/a/b/rel-link
ln -s /nonexistent/target t/dangling
# a sparse file with data past the second 64 MiB chunk, and one without any data
truncate -s 150M t/sparse || fail "truncate sparse"
printf 'tail' | dd of=t/sparse bs=1 seek=$((130 * MIB)) conv=notrunc status=none \
  || fail "write into sparse"
truncate -s 77777 t/holes-only
# shrink then grow: a hole record in the chunk list
head -c 300000 /dev/urandom > t/shrunk
truncate -s 1000 t/shrunk
truncate -s 5000 t/shrunk
# a non-UTF-8 name and a symlink to it
name_bad=$(printf 'caf\351')
printf 'latin-1\n' > "t/$name_bad" || fail "create non-UTF-8 name"
ln -s "$name_bad" t/link-to-bad
# special files
mkfifo t/special/fifo
mknod t/special/null c 1 3 2>/dev/null || note "mknod c not permitted"
# owners, modes, times
chmod 0640 t/a/hello
chmod 2755 t/modes
install -m 4711 /dev/null t/modes/suid
chown 12345:54321 t/modes/suid
chmod 4711 t/modes/suid
touch -h -d '2001-02-03 04:05:06.123456789' t/a/size-1 t/dangling
touch -d '1999-12-31 23:59:59' t/empty
# xattrs: text, binary (with NUL bytes), on a file, a directory, a symlink target
if setfattr -n user.k -v value t/a/hello 2>/dev/null; then
  setfattr -n user.bin -v 0x00ff0180227c00 t/a/hello || fail "setfattr binary"
  setfattr -n user.dir -v on-a-dir t/a/b || fail "setfattr dir"
  HAVE_XATTR=1
else
  note "setfattr not available"
  HAVE_XATTR=0
fi
# directory mtimes last (creating entries touches them)
touch -d '2010-10-10 10:10:10.5' t/a/b/c

manifest() {   # manifest DIR: everything that must survive, one line per entry
  (cd "$1" && find . -printf '%p %y %m %U %G %s %n %T@ %i %l\n' | LC_ALL=C sort
   find . -type c -printf '%p ' -exec stat -c '%t:%T' {} \; | LC_ALL=C sort
   [ "$HAVE_XATTR" = 1 ] && find . -exec getfattr -h -d -e hex -m - {} + 2>/dev/null)
}
manifest "$MNT/t" > "$WORK/m0" || fail "manifest"
cd "$WORK" || fail "cd work"
mt_umount

"$KEGFS" dump "$META" "$WORK/d1.json" 2> "$WORK/dump1.err" \
  || fail "kegfs dump failed: $(cat "$WORK/dump1.err")"
[ -s "$WORK/d1.json" ] || fail "empty dump"
[ ! -e "$WORK/d1.json.partial" ] || fail "dump left its .partial file"
note "dump: $(wc -c < "$WORK/d1.json") bytes; $(tail -1 "$WORK/dump1.err")"

MOUNTED=()
cleanup_mounts() {
  local p
  for p in "${MOUNTED[@]}"; do
    grep -qs " $p " /proc/self/mountinfo && "$KEGFS" umount "$p" >/dev/null 2>&1
  done
}
trap cleanup_mounts EXIT

# check_copy NAME META_URL: mount the copy next to the original and compare
check_copy() {
  local name=$1 url=$2 mp=$WORK/mnt-$1
  mkdir -p "$mp"
  # shellcheck disable=SC2086
  "$KEGFS" mount -d --read-only --log-file "$WORK/mounter-$name.log" $MT_MOUNT_EXTRA \
    "$url" "$mp" || fail "$name: mounting the loaded copy failed"
  MOUNTED+=("$mp")
  manifest "$mp/t" > "$WORK/m-$name" || fail "$name: manifest"
  if ! cmp -s "$WORK/m0" "$WORK/m-$name"; then
    diff "$WORK/m0" "$WORK/m-$name" | head -20
    fail "$name: metadata differs from the original"
  fi
  diff -r --no-dereference -x special "$MNT/t" "$mp/t" > "$WORK/diff-$name" 2>&1 \
    || { head -20 "$WORK/diff-$name"; fail "$name: content differs from the original"; }
  [ "$(stat -c %i "$mp/t/a/hello")" = "$(stat -c %i "$mp/t/hello-3rd-link")" ] \
    || fail "$name: hard links do not share an inode"
  assert_eq "$(cat "$mp/t/$name_bad")" "latin-1" "$name: file with a non-UTF-8 name"
  assert_eq "$(readlink "$mp/t/link-to-bad")" "$name_bad" "$name: non-UTF-8 symlink target"
  "$KEGFS" umount "$mp" || fail "$name: kegfs umount $mp failed"
  if grep -E ' (ERROR|FATAL) ' "$WORK/mounter-$name.log"; then
    fail "$name: ERROR lines in the copy's mounter log"
  fi
  # a dump of the copy is the same document
  "$KEGFS" dump "$url" "$WORK/d-$name.json" 2>/dev/null || fail "$name: dumping the copy failed"
  cmp -s "$WORK/d1.json" "$WORK/d-$name.json" || fail "$name: its dump differs from the first"
}

# the original, read-only, for the byte comparisons
mt_mount --read-only

# 1. SQLite -> SQLite
META2="sqlite3://$WORK/meta2.db"
"$KEGFS" load "$META2" "$WORK/d1.json" 2> "$WORK/load2.err" \
  || fail "kegfs load into $META2 failed: $(cat "$WORK/load2.err")"
check_copy sqlite2 "$META2"

# loading again into the same (now non-empty) engine is refused and changes nothing
expect_fail "already holds a volume" "$KEGFS" load "$META2" "$WORK/d1.json"
"$KEGFS" dump "$META2" "$WORK/d-again.json" 2>/dev/null || fail "dump after refused load"
# (every dump probes, and so uses, one id of each counter: compare all but them)
nocounters() { sed 's/"counters":{[^}]*}//' "$1"; }
[ "$(nocounters "$WORK/d1.json")" = "$(nocounters "$WORK/d-again.json")" ] \
  || fail "the refused load changed the target"

# a truncated dump fails and leaves the target empty
head -c $(($(wc -c < "$WORK/d1.json") / 2)) "$WORK/d1.json" > "$WORK/half.json"
expect_fail "truncated|malformed|premature" "$KEGFS" load "sqlite3://$WORK/meta-half.db" \
  "$WORK/half.json"
expect_fail "not formatted|holds no volume" "$KEGFS" dump "sqlite3://$WORK/meta-half.db" \
  "$WORK/half-dump.json"

# 2. -> Redis -> SQLite
if [ -n "${KEG_TEST_REDIS_URL:-}" ]; then
  ns="dl$$r$RANDOM"
  if [[ "$KEG_TEST_REDIS_URL" == *\?* ]]; then META3="$KEG_TEST_REDIS_URL&ns=$ns"
  else META3="$KEG_TEST_REDIS_URL?ns=$ns"; fi
  "$KEGFS" load "$META3" "$WORK/d1.json" 2> "$WORK/load3.err" \
    || fail "kegfs load into Redis failed: $(cat "$WORK/load3.err")"
  check_copy redis "$META3"
  META4="sqlite3://$WORK/meta4.db"
  "$KEGFS" load "$META4" "$WORK/d-redis.json" 2> "$WORK/load4.err" \
    || fail "kegfs load of the Redis dump failed: $(cat "$WORK/load4.err")"
  check_copy sqlite4 "$META4"
else
  note "KEG_TEST_REDIS_URL not set: Redis steps skipped"
fi

# leave MNT mounted read-write for the runner
mt_umount
mt_mount
exit 0
