#!/usr/bin/env bash
# gc_fsck_warmup.sh -- kegfs fsck, gc and warmup from the command line on a real volume:
# a clean volume is consistent; an injected unreferenced object is found (and deleted
# with --delete, nothing else); a deleted block is found by fsck with the file that uses
# it; a flipped byte only by fsck --deep; warmup reads through the mount and into an SSD
# cache directory.  Objects are listed, damaged and removed from outside kegfs (the file
# store's files, or through the S3 API).
# allow-log: missing|[Cc]orrupt|chunks/|Input/output
# timeout: 300
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
need_kegfs
need_objstore

mkdir -p "$MNT/d/e" || fail "mkdir"
head -c 300000 /dev/urandom > "$WORK/a"
head -c 5000000 /dev/urandom > "$WORK/b"
cp "$WORK/a" "$MNT/d/a" && cp "$WORK/b" "$MNT/d/e/b" && ln "$MNT/d/a" "$MNT/a-link" \
  || fail "populate"
sync

# warmup through the mount, and into a cache directory (while mounted)
"$KEGFS" warmup "$MNT/d" > "$WORK/warm1.out" 2>&1 || fail "warmup through the mount: $(cat "$WORK/warm1.out")"
"$KEGFS" warmup --cache-dir "$WORK/ssd" "$MNT/d" "$MNT/a-link" > "$WORK/warm2.out" 2>&1 \
  || fail "warmup --cache-dir: $(cat "$WORK/warm2.out")"
ncached=$(find "$WORK/ssd" -type f -path '*/blocks/*' | wc -l)
[ "$ncached" -ge 3 ] || fail "warmup --cache-dir left $ncached cache files (want >= 3)"
note "warmup cached $ncached blocks"
"$KEGFS" warmup /tmp > /dev/null 2>&1 && fail "warmup of a path outside any KegFS mount succeeded"
# gc while mounted: a young volume's slice ids are all among the newest, so none is judged
"$KEGFS" gc "$META" > "$WORK/gc-live.out" 2>&1 || fail "gc while mounted: $(cat "$WORK/gc-live.out")"
grep -q "^judged: no slice, because 1 mounter is live" "$WORK/gc-live.out" \
  || fail "gc while mounted does not say that nothing was judged: $(cat "$WORK/gc-live.out")"
grep -q "^to judge every slice, unmount the volume everywhere and run gc again" "$WORK/gc-live.out" \
  || fail "gc while mounted does not say how to judge everything: $(cat "$WORK/gc-live.out")"
grep -q "slice ids >= \|were not judged" "$WORK/gc-live.out" && fail "gc prints the old wording"
mt_umount

"$KEGFS" fsck "$META" > "$WORK/fsck0.out" 2>&1 || fail "fsck of a clean volume: $(cat "$WORK/fsck0.out")"
grep -q "volume is consistent" "$WORK/fsck0.out" || fail "fsck: no 'consistent' line"
"$KEGFS" gc "$META" > "$WORK/gc0.out" 2>&1 || fail "gc: $(cat "$WORK/gc0.out")"
grep -q "leaked: 0 objects" "$WORK/gc0.out" || fail "gc found leaks on a clean volume: $(cat "$WORK/gc0.out")"
grep -qx "judged: every slice (no mounter is live)" "$WORK/gc0.out" \
  || fail "gc with no mounter does not say it judged every slice: $(cat "$WORK/gc0.out")"
grep -v "^judged: every slice" "$WORK/gc0.out" | grep -q "live\|unmount" && fail "gc with no mounter talks of live mounters: $(cat "$WORK/gc0.out")"

# an unreferenced object: a copy of a real block under an unused slice id
obj_list > "$WORK/objs0" || fail "listing the objects failed"
one=$(awk 'NR == 1 { print $1 }' "$WORK/objs0")
[ -n "$one" ] || fail "no block objects in the ${STORAGE:-file} store"
name=$(basename "$one")                      # <id>_<indx>_<len>
leak="$(dirname "$one")/9_${name#*_}"
obj_exists "$leak" && fail "slice id 9 is in use"
obj_get "$one" "$WORK/one.obj" && obj_put "$leak" "$WORK/one.obj" || fail "cannot copy $one to $leak"
nobj=$(obj_keys | wc -l)
"$KEGFS" gc "$META" > "$WORK/gc1.out" 2>&1 || fail "gc: $(cat "$WORK/gc1.out")"
grep -q "leaked: 1 objects" "$WORK/gc1.out" || fail "gc did not find the leak: $(cat "$WORK/gc1.out")"
grep -qF "/9_${name#*_}" "$WORK/gc1.out" || fail "gc does not name the leaked object"
"$KEGFS" gc --delete --threads 2 "$META" > "$WORK/gc2.out" 2>&1 || fail "gc --delete: $(cat "$WORK/gc2.out")"
obj_exists "$leak" && fail "gc --delete left the leak"
assert_eq "$(obj_keys | wc -l)" $((nobj - 1)) "objects after gc --delete"

# a missing block of d/e/b (a full 4 MiB block), a corrupt one of d/a (300000 bytes)
obj_list > "$WORK/objs1" || fail "listing the objects failed"
bobj=$(awk '$2 > 1024000 { print $1; exit }' "$WORK/objs1")
[ -n "$bobj" ] || fail "no full block of b"
obj_del "$bobj" || fail "cannot delete $bobj"
aobj=$(awk '$2 <= 408576 { print $1; exit }' "$WORK/objs1")
[ -n "$aobj" ] || fail "no block of a"
obj_get "$aobj" "$WORK/a.obj" || fail "cannot fetch $aobj"
flip_byte "$WORK/a.obj" 5000 > /dev/null
obj_put "$aobj" "$WORK/a.obj" || fail "cannot store the damaged $aobj"
"$KEGFS" fsck "$META" > "$WORK/fsck1.out" 2>&1 && fail "fsck exit 0 with a missing block"
grep -q "^missing: .*$(basename "$bobj")" "$WORK/fsck1.out" || fail "fsck does not name the missing block: $(cat "$WORK/fsck1.out")"
grep -q "affected file: /d/e/b" "$WORK/fsck1.out" || fail "fsck does not name /d/e/b"
grep -q "corrupt: 0" "$WORK/fsck1.out" || fail "shallow fsck claims corruption"
"$KEGFS" fsck --deep "$META" > "$WORK/fsck2.out" 2>&1 && fail "fsck --deep exit 0"
grep -q "^corrupt: .*$(basename "$aobj")" "$WORK/fsck2.out" || fail "fsck --deep does not name the corrupt block: $(cat "$WORK/fsck2.out")"
grep -q "affected file: /d/a " "$WORK/fsck2.out" && grep -q "affected file: /a-link " "$WORK/fsck2.out" \
  || fail "fsck --deep does not name both links of d/a"
"$KEGFS" fsck 2> /dev/null; [ $? -eq 2 ] || fail "fsck without META_URL: exit status is not 2"
mt_mount
exit 0
