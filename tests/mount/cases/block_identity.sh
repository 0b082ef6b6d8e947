#!/usr/bin/env bash
# block_identity.sh -- a valid block of another file stored under a file's key (a
# misdirected PUT, a store bug, a second volume writing the same keys) must be EIO for the
# reader with an ERROR line naming the object, never the other file's bytes -- read
# straight from the store and through the SSD cache -- and `kegfs fsck --deep` must
# report it with the file that uses it.  The object is swapped from outside kegfs (the
# file store's file, or through the S3 API).
# allow-log: identity mismatch|[Cc]orrupt|chunks/|Input/output|verification
# timeout: 120
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
need_kegfs
need_objstore

# two files of one block each, of the same length: their keys differ only in the slice id
head -c 100000 /dev/urandom > "$WORK/a"
head -c 100000 /dev/urandom > "$WORK/b"
before=$(obj_keys) || fail "listing the objects failed"
cp "$WORK/a" "$MNT/a" && sync || fail "cp a"
mid=$(obj_keys) || fail "listing the objects failed"
cp "$WORK/b" "$MNT/b" && sync || fail "cp b"
mt_umount
after=$(obj_keys) || fail "listing the objects failed"
akey=$(comm -13 <(echo "$before") <(echo "$mid") | head -1)
bkey=$(comm -13 <(echo "$mid") <(echo "$after") | head -1)
[ -n "$akey" ] && [ -n "$bkey" ] || fail "no block objects for a and b (a='$akey' b='$bkey')"
[ "${akey##*_}" = "${bkey##*_}" ] || fail "blocks of a and b differ in length: $akey $bkey"

# b's block, a valid object, stored under a's key
obj_get "$bkey" "$WORK/b.obj" || fail "cannot fetch $bkey"
obj_put "$akey" "$WORK/b.obj" || fail "cannot store $bkey's block as $akey"
note "stored the block of $bkey under $akey"

check_read() {   # check_read WHAT
  if cat "$MNT/a" > "$WORK/read.out" 2> "$WORK/cat.err"; then
    cmp -s "$WORK/read.out" "$WORK/b" && fail "$1: read of a returned b's bytes"
    fail "$1: read of a returned wrong data without an error"
  fi
  cmp -s "$WORK/read.out" "$WORK/b" && fail "$1: b's bytes reached the reader of a"
  grep -q 'Input/output error' "$WORK/cat.err" || fail "$1: cat failed without EIO: $(cat "$WORK/cat.err")"
  cmp "$WORK/b" "$MNT/b" || fail "$1: b is unreadable"
}

# straight from the store
mt_mount
check_read "store"
grep ' ERROR ' "$MT_LOG" | grep -F "$(basename "$akey")" | grep -q 'identity mismatch' \
  || fail "no ERROR line naming $akey with the identity mismatch: $(grep -E ' (ERROR|WARN) ' "$MT_LOG" | tail -3)"
note "log: $(grep ' ERROR ' "$MT_LOG" | grep -F "$(basename "$akey")" | tail -1 | cut -c1-200)"
mt_umount

# through the SSD cache: the fill does not cache the foreign block, the read fails the same
mt_mount --cache-dir "$WORK/cache"
check_read "ssd cache"
cat "$MNT/a" > /dev/null 2>&1 && fail "ssd cache: a second read of a succeeded"
mt_umount
grep ' WARN \[cache_ssd\] ' "$MT_LOG" | grep -F "$(basename "$akey")" | grep -q 'verification' \
  || fail "the SSD cache did not refuse the foreign block of $akey"
find "$WORK/cache" -path '*/blocks/*' -name "*$(basename "$akey")" | grep -q . \
  && fail "the SSD cache kept the foreign block of $akey"
find "$WORK/cache" -path '*/blocks/*' -name "*$(basename "$bkey")" | grep -q . \
  || fail "the SSD cache did not keep b's own block"

# fsck: the object exists (shallow passes); --deep names it, why, and the file
"$KEGFS" fsck "$META" > "$WORK/fsck0.out" 2>&1 || fail "shallow fsck failed: $(cat "$WORK/fsck0.out")"
"$KEGFS" fsck --deep "$META" > "$WORK/fsck1.out" 2>&1 && fail "fsck --deep exit 0 with a foreign block"
grep -q "^corrupt: .*$(basename "$akey").*identity mismatch" "$WORK/fsck1.out" \
  || fail "fsck --deep does not report the identity mismatch of $akey: $(cat "$WORK/fsck1.out")"
grep -q "affected file: /a " "$WORK/fsck1.out" || fail "fsck --deep does not name /a"
grep -q "affected file: /b " "$WORK/fsck1.out" && fail "fsck --deep blames /b"
note "fsck: $(grep '^corrupt:' "$WORK/fsck1.out" | head -1 | cut -c1-200)"
mt_mount
exit 0
