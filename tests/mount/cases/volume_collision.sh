#!/usr/bin/env bash
# volume_collision.sh -- two volumes with one name on one bucket must not be possible:
# `kegfs format` of a second volume named like the runner's, on the same storage but with
# another metadata URL, is refused with a clear message (with and without --force, and
# when the name's objects exist without a volume marker); --force cannot move a volume
# onto another volume's prefix.  And if two volumes did share a prefix (made here by hand,
# as an older kegfs allowed), gc --delete of either never deletes the other's objects:
# the marker's owner keeps blocks whose header names another volume, the other volume's
# gc refuses to delete anything.
# allow-log: another volume|volume marker|belong to another
# timeout: 120
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
need_kegfs
need_objstore

case "$META_KIND" in
  sqlite) META2="sqlite3://$WORK/meta2.db" ;;
  redis) if [[ "$KEG_TEST_REDIS_URL" == *\?* ]]; then META2="$KEG_TEST_REDIS_URL&ns=$VOL-b"
         else META2="$KEG_TEST_REDIS_URL?ns=$VOL-b"; fi ;;
  *) skip "unknown META_KIND $META_KIND" ;;
esac

head -c 300000 /dev/urandom > "$WORK/a"
cp "$WORK/a" "$MNT/a" && sync || fail "cp a"
mt_umount
objs_a=$(obj_keys) || fail "listing the objects failed"
[ -n "$objs_a" ] || fail "volume A has no block objects"
obj_exists "$VOL/kegfs.volume" || fail "format wrote no volume marker $VOL/kegfs.volume"
status_out=$("$KEGFS" status "$META" 2>&1)
grep -q "blocks: *version 2 (bound to their key and volume)" <<< "$status_out" \
  || fail "kegfs status does not show block identities on a new volume"

# 1. the same name on the same storage, another metadata URL: refused, nothing written
fmt2() {
  "$KEGFS" format --storage "$STORAGE" --bucket "$BUCKET" "$@"
}
expect_fail "already used .* by another volume" fmt2 "$META2" "$VOL"
expect_fail "already used .* by another volume" fmt2 --force "$META2" "$VOL"
"$KEGFS" status "$META2" > /dev/null 2>&1 && fail "a refused format left a volume at $META2"
assert_eq "$(obj_keys)" "$objs_a" "objects after the refused formats"

# 2. objects of the name without a marker (a volume formatted by an older kegfs): refused
obj_get "$VOL/kegfs.volume" "$WORK/marker" || fail "cannot fetch the marker"
obj_del "$VOL/kegfs.volume" || fail "cannot delete the marker"
expect_fail "already used .* no volume marker" fmt2 "$META2" "$VOL"
obj_exists "$VOL/kegfs.volume" && fail "a refused format wrote a marker"
# the volume itself claims its prefix again with format --force
"$KEGFS" format --force "$META" "$VOL" > "$WORK/force.out" 2>&1 \
  || fail "format --force of the volume itself: $(cat "$WORK/force.out")"
obj_get "$VOL/kegfs.volume" "$WORK/marker2" || fail "format --force wrote no marker"
cmp -s "$WORK/marker" "$WORK/marker2" || fail "the marker changed: $(cat "$WORK/marker2")"

# 3. --force cannot move another volume onto this prefix
mkdir -p "$WORK/objects-b"
if [ "$STORAGE" = file ]; then
  fmt_b=(--storage file --bucket "$WORK/objects-b")
else
  fmt_b=(--storage mem)
fi
"$KEGFS" format "${fmt_b[@]}" "$META2" "$VOL" > "$WORK/fmtb.out" 2>&1 \
  || fail "format of B on its own storage: $(cat "$WORK/fmtb.out")"
expect_fail "already used .* by another volume" fmt2 --force "$META2" "$VOL"
obj_get "$VOL/kegfs.volume" "$WORK/marker3" && cmp -s "$WORK/marker" "$WORK/marker3" \
  || fail "the marker of A changed"

# 4. a shared prefix made by hand (file store: B's directory becomes a link to A's)
if [ "$STORAGE" != file ]; then
  note "shared-prefix gc checks need the file store: skipped on $STORAGE"
  mt_mount
  exit 0
fi
rm -rf "$WORK/objects-b"
ln -s "$WORK/objects-b.real" "$WORK/objects-b"
mkdir -p "$WORK/objects-b.real"
"$KEGFS" format --force --bucket "$WORK/objects-b" "$META2" "$VOL" > "$WORK/fmtb2.out" 2>&1 \
  || fail "format --force of B onto the link: $(cat "$WORK/fmtb2.out")"
mkdir -p "$WORK/mnt-b"
head -c 200000 /dev/urandom > "$WORK/b"
"$KEGFS" mount -d --log-file "$WORK/mounter-b.log" "$META2" "$WORK/mnt-b" \
  || fail "mount of B failed"
cp "$WORK/b" "$WORK/mnt-b/b" && sync || fail "cp b"
"$KEGFS" umount "$WORK/mnt-b" || fail "umount of B failed"
# B's blocks land among A's, as when both wrote to one prefix
(cd "$WORK/objects-b.real" && find "$VOL/chunks" -type f) > "$WORK/objs-b"
[ -s "$WORK/objs-b" ] || fail "B wrote no block objects"
while read -r k; do
  mkdir -p "$OBJDIR/$(dirname "$k")"
  [ -e "$OBJDIR/$k" ] && fail "B's block $k has the key of one of A's"
  cp "$WORK/objects-b.real/$k" "$OBJDIR/$k"
done < "$WORK/objs-b"
rm "$WORK/objects-b" && ln -s "$OBJDIR" "$WORK/objects-b"

# A's gc: B's blocks are not referenced by A, but their headers name B: kept
"$KEGFS" gc --delete "$META" > "$WORK/gc-a.out" 2>&1 || fail "gc --delete of A: $(cat "$WORK/gc-a.out")"
grep -q "deleted 0, kept $(wc -l < "$WORK/objs-b")" "$WORK/gc-a.out" \
  || fail "gc of A did not keep B's blocks: $(cat "$WORK/gc-a.out")"
grep -q "^kept: " "$WORK/gc-a.out" || fail "gc of A does not list the kept objects"
while read -r k; do
  [ -e "$OBJDIR/$k" ] || fail "gc of A deleted B's block $k"
done < "$WORK/objs-b"
# B's gc: the marker names A, so B deletes nothing (A's blocks are leaks to B)
"$KEGFS" gc --delete "$META2" > "$WORK/gc-b.out" 2>&1 && fail "gc --delete of B succeeded"
grep -q "belong to another volume" "$WORK/gc-b.out" || fail "gc of B: no clear message: $(cat "$WORK/gc-b.out")"
note "gc of B: $(grep -m1 'gc refused' "$WORK/gc-b.out")"
for k in $objs_a; do
  obj_exists "$k" || fail "gc of B deleted A's object $k"
done
mt_mount
cmp "$WORK/a" "$MNT/a" || fail "A's file changed"
exit 0
