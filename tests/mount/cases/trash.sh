#!/usr/bin/env bash
# trash.sh -- a volume formatted with --trash-days 1: rm keeps the file in /.trash/<hour>/,
# `kegfs restore` brings it back with its content (a taken name as NAME.restored-INO,
# --no-rename refuses), a rename over a file keeps the old one; after deleting everything
# and remounting with an injected clock three days ahead (KEG_TRASH_NOW, and
# KEG_TRASH_INTERVAL=2 so that expiry runs soon), the trash expires and the object
# directory empties.
# format: --trash-days 1
# timeout: 240
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
need_kegfs
need_objstore

nobjects() {   # block objects (file store, or listed through S3)
  obj_keys | wc -l
}

cd "$MNT" || fail "cd"
mkdir -p d/e || fail "mkdir"
head -c 3000000 /dev/urandom > "$WORK/f" || fail "random data"
cp "$WORK/f" d/e/f || fail "write f"
ino=$(stat -c %i d/e/f)
dino=$(stat -c %i d/e)
rm d/e/f || fail "rm f"
[ -e d/e/f ] && fail "d/e/f still there after rm"
[ -d "$MNT/.trash" ] || fail "no /.trash after rm"
assert_eq "$(stat -c %a "$MNT/.trash")" 555 "mode of /.trash"
ent=$(ls -d "$MNT"/.trash/*/"$dino-$ino-f" 2>/dev/null | head -1)
[ -n "$ent" ] || fail "d/e/f is not in the trash as $dino-$ino-f: $(ls -R "$MNT/.trash")"
hour=$(basename "$(dirname "$ent")")
[[ "$hour" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}-[0-9]{2}$ ]] || fail "hour directory '$hour'"
cmp -s "$WORK/f" "$ent" || fail "the trashed file's content differs"
note "rm kept d/e/f as .trash/$hour/$dino-$ino-f"

# restore it
"$KEGFS" restore "$ent" > "$WORK/restore1.out" 2>&1 || fail "kegfs restore: $(cat "$WORK/restore1.out")"
grep -q "to $MNT/d/e/f\$" "$WORK/restore1.out" || fail "restore output: $(cat "$WORK/restore1.out")"
cmp -s "$WORK/f" d/e/f || fail "restored d/e/f differs"
assert_eq "$(stat -c %i d/e/f)" "$ino" "inode of the restored file"
[ -e "$ent" ] && fail "the entry is still in the trash after restore"

# a taken name: NAME.restored-INO, or left alone with --no-rename
rm d/e/f && echo new > d/e/f || fail "rm + recreate"
expect_fail "name is taken" "$KEGFS" restore --no-rename "$ent"
"$KEGFS" restore "$MNT/.trash/$hour" > "$WORK/restore2.out" 2>&1 \
  || fail "kegfs restore of the hour: $(cat "$WORK/restore2.out")"
cmp -s "$WORK/f" "d/e/f.restored-$ino" || fail "d/e/f.restored-$ino differs"
assert_eq "$(cat d/e/f)" new "the file that took the name"

# rename over a file keeps the old one in the trash
echo old > d/victim && echo newer > d/src || fail "write"
vino=$(stat -c %i d/victim)
mv d/src d/victim || fail "mv"
assert_eq "$(cat d/victim)" newer "renamed file"
assert_eq "$(cat "$MNT"/.trash/*/"$(stat -c %i d)-$vino-victim")" old "replaced file in the trash"

# hard links, symlinks, directories: not kept
ln d/victim d/hl && rm d/hl || fail "hard link"
ln -s x d/sl && rm d/sl || fail "symlink"
mkdir d/sub && rmdir d/sub || fail "rmdir"
ls "$MNT"/.trash/*/ | grep -qE -- '-(hl|sl|sub)$' && fail "a hard link, symlink or directory went to the trash"

# refused: moving into the trash, paths outside it
expect_fail "Operation not permitted" mv d/victim "$MNT/.trash/$hour/x"
expect_fail "not in the trash" "$KEGFS" restore d/victim

# delete everything: the data stays until the trash expires
sync
rm -rf "$MNT"/d "$MNT"/* || fail "rm -rf"
before=$(nobjects)
[ "$before" -ge 1 ] || fail "no objects left in the trash ($before)"
note "$before objects while everything is in the trash"
cd "$WORK" || fail "cd work"
mt_umount
export KEG_TRASH_NOW=$(( $(date +%s) + 3 * 86400 + 7200 )) KEG_TRASH_INTERVAL=2
mt_mount
unset KEG_TRASH_NOW KEG_TRASH_INTERVAL
for _ in $(seq 1 60); do
  [ "$(nobjects)" = 0 ] && break
  sleep 1
done
after=$(nobjects)
[ "$after" = 0 ] || fail "$after objects left after the trash expired (were $before)"
[ -z "$(ls -A "$MNT/.trash")" ] || fail "hour directories left: $(ls "$MNT/.trash")"
grep -q "expired" "$MT_LOG" || fail "no expiry line in the mounter log"
note "trash expired: $before -> $after objects"
