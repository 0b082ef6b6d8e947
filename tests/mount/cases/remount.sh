#!/usr/bin/env bash
# remount.sh -- a tree written before `kegfs umount` is identical after mounting again:
# content (sha256), types, modes, owners, sizes, mtimes, symlink targets, hard links,
# xattrs; and the volume keeps working after the remount.
# timeout: 300
. "$(dirname "$0")/../lib.sh"
need_kegfs

MIB=$((1024 * 1024))
cd "$MNT" || fail "cd"
mkdir -p t/a/b/c t/empty t/modes || fail "mkdir"
for n in 0 1 4095 4096 4097 65536 $((MIB + 1)); do
  head -c "$n" /dev/urandom > "t/a/size-$n" || fail "write size-$n"
done
head -c $((9 * MIB + 3)) /dev/urandom > t/a/b/c/big
printf 'hello\n' > t/a/hello
ln t/a/hello t/a/b/hello-hardlink
ln -s ../hello t/a/b/rel-link
ln -s /nonexistent/target t/dangling
mkfifo t/fifo
chmod 0640 t/a/hello
chmod 2755 t/modes
install -m 4711 /dev/null t/modes/suid
chown 12345:54321 t/modes/suid
chmod 4711 t/modes/suid
touch -d '2001-02-03 04:05:06.123456789' t/a/size-1
setfattr -n user.k -v value t/a/hello 2>/dev/null || note "setfattr not available"
truncate -s 100M t/sparse
printf 'tail' >> t/sparse

manifest() {   # manifest DIR: one line per entry with everything that must survive
  (cd "$1" && find . -printf '%p %y %m %U %G %s %n %T@ %l\n' | LC_ALL=C sort
   find . -type f -exec sha256sum {} + | LC_ALL=C sort -k2
   getfattr -n user.k --only-values a/hello 2>/dev/null)
}
manifest "$MNT/t" > "$WORK/before" || fail "manifest"
cd "$WORK" || fail "cd work"

mt_umount
[ -z "$(ls -A "$MNT")" ] || fail "mount point not empty after umount"
mt_mount
manifest "$MNT/t" > "$WORK/after" || fail "manifest after remount"
if ! cmp -s "$WORK/before" "$WORK/after"; then
  diff "$WORK/before" "$WORK/after" | head -20
  fail "tree differs after remount"
fi
# the remounted volume is writable and a second remount still agrees
printf 'more' >> "$MNT/t/a/hello" || fail "append after remount"
manifest "$MNT/t" > "$WORK/before2"
mt_umount
mt_mount
manifest "$MNT/t" > "$WORK/after2"
cmp -s "$WORK/before2" "$WORK/after2" || fail "tree differs after the second remount"
assert_eq "$(cat "$MNT/t/a/b/hello-hardlink")" "hello
more" "hard link content after remount"
if [ -n "$META" ] && [ -n "$KEGFS" ]; then
  "$KEGFS" status "$META" > "$WORK/status.out" 2>&1 || fail "kegfs status failed: $(cat "$WORK/status.out")"
fi
