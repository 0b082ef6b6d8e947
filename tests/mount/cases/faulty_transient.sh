#!/usr/bin/env bash
# faulty_transient.sh -- transient object-store errors are retried invisibly: the volume
# is remounted with KEG_FAULTY="seed=7,err=0.1" in the mounter's environment (one get/put
# in ten fails with EIO or EAGAIN), a tree of 300 files is copied in, compared, the
# volume remounted (again with faults, another seed) and compared again.  Every cp and
# cmp must succeed; the mounter log must show that faults were injected and retried.
# No --writeback (a writeback mounter retries in its upload workers instead).
# timeout: 600
. "$(dirname "$0")/../lib.sh"
need_kegfs

src=$WORK/src
mkdir -p "$src" || fail "mkdir $src"
for d in $(seq 0 9); do
  mkdir -p "$src/d$d"
  for f in $(seq 0 29); do
    # sizes 0 .. ~600 KiB, so some files span several blocks
    head -c $(( (RANDOM * 19 + f * 977) % 600000 )) /dev/urandom > "$src/d$d/f$f" \
      || fail "making the source tree"
  done
done
nfiles=$(find "$src" -type f | wc -l)
assert_eq "$nfiles" 300 "files in the source tree"

compare_tree() {   # compare_tree WHEN
  local bad=0 f
  while IFS= read -r f; do
    cmp -s "$src/$f" "$MNT/tree/$f" || { note "$1: $f differs or is unreadable"; bad=$((bad + 1)); }
  done < <(cd "$src" && find . -type f | sed 's|^\./||')
  [ "$bad" = 0 ] || fail "$1: $bad of $nfiles files differ or fail to read"
  note "$1: all $nfiles files identical"
}

mt_umount
KEG_FAULTY="seed=7,err=0.1" mt_mount
grep -q 'fault injection on' "$MT_LOG" || fail "the remounted mounter did not enable fault injection"

cp -r "$src" "$MNT/tree" || fail "cp -r into the faulty mount failed"
sync || fail "sync failed"
compare_tree "same mount"

mt_umount
KEG_FAULTY="seed=8,err=0.1" mt_mount
compare_tree "after remount"

retries=$(grep -c 'retrying for up to' "$MT_LOG")
note "$retries operations were retried"
[ "$retries" -gt 0 ] || fail "no retried operation in the mounter log (were faults injected?)"

# and without faults the data is the same
mt_umount
mt_mount
compare_tree "without faults"
exit 0
