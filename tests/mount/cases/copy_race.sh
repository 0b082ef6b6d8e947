#!/usr/bin/env bash
# copy_race.sh -- copy_file_range racing compaction: keg_iomix drives random buffered writes,
# copy_file_range between and inside 4 small files, truncates and frequent commits (fsync,
# close/reopen), so chunks keep reaching the compaction threshold and the mounter replaces the
# slices that concurrent copies share.  Every copy must succeed (never EAGAIN/EBUSY) and every
# byte match the in-memory model, over 2 seeds x 1000 ops (copies often in bursts of pieces right
# after the commit that queued a compaction); then the files are read again on a fresh mount.
# KEG_TEST_SEED fixes the first seed (default: random, printed).
# timeout: 300
. "$(dirname "$0")/../lib.sh"
need_bin KEG_IOMIX keg_iomix

base=${KEG_TEST_SEED:-$(( (RANDOM << 15) | RANDOM ))}
for i in 0 1; do
  seed=$((base + i))
  mkdir -p "$MNT/run$i" || fail "mkdir run$i"
  note "seed $seed"
  "$KEG_IOMIX" -s "$seed" -n 1000 -f 4 -z 1024 -v 250 --ops wwwwwwrccccts "$MNT/run$i" \
    || fail "keg_iomix seed $seed failed (reproduce: keg_iomix -s $seed -n 1000 -f 4 -z 1024 -v 250 --ops wwwwwwrccccts DIR)"
done
# the sizes and bytes survive a remount (committed, not only buffered)
for i in 0 1; do
  for f in 0 1 2 3; do md5sum "$MNT/run$i/iomix-$f"; done
done > "$WORK/sums" || fail "md5sum before remount"
if [ -n "${KEGFS:-}" ]; then
  mt_umount
  mt_mount
  (cd / && md5sum -c --quiet "$WORK/sums") || fail "content changed across a remount"
fi
