#!/usr/bin/env bash
# direct_io.sh -- O_DIRECT writes while other processes read the file through the page cache:
# keg_dio rewrites a 4 MiB file with asynchronous direct I/O (io_submit, 8 x 128 KiB in
# flight) and with plain O_DIRECT pwrite, under 3 buffered readers (reopening, or keeping
# their descriptors), several rounds each;
# after each write has completed and the file is closed, a fresh buffered read (and an
# O_DIRECT one) must return the new bytes of every page.  keg_dio -b: 3 readers follow the
# asynchronous and the synchronous writer sequentially, checking every piece whose write
# has completed while the kernel reads ahead into the range being written.  (Longer runs
# of every mode, also with --writeback: direct_io_long.sh.)  Then keg_iomix mixes buffered,
# O_DIRECT, O_APPEND and mmap I/O with copies and truncates on 3 files against its model.
# timeout: 300
. "$(dirname "$0")/../lib.sh"
need_bin KEG_DIO keg_dio
need_bin KEG_IOMIX keg_iomix

for i in 1 2; do
  keep=""; [ "$i" = 2 ] && keep=-k      # run 2: the readers keep their descriptors
  "$KEG_DIO" $keep -r 3 -p 3 -z 4096 "$MNT/aio$i" || fail "asynchronous direct writes, run $i: stale bytes"
  "$KEG_DIO" -s -r 2 -p 3 -z 4096 "$MNT/dio$i" || fail "direct pwrite, run $i: stale bytes"
done
"$KEG_DIO" -b -r 4 -p 3 -z 4096 "$MNT/behind" || fail "readers behind asynchronous direct writes: stale bytes"
"$KEG_DIO" -b -s -k -r 3 -p 2 -z 4096 "$MNT/behind" || fail "readers behind direct pwrite: stale bytes"
rm -f "$MNT/behind"

seed=${KEG_TEST_SEED:-$(( (RANDOM << 15) | RANDOM ))}
mkdir -p "$MNT/mix" || fail "mkdir mix"
note "keg_iomix seed $seed"
"$KEG_IOMIX" -s "$seed" -n 400 -f 3 -z 1024 -v 200 --ops wwaarrddmmcts "$MNT/mix" \
  || fail "keg_iomix seed $seed (buffered + O_DIRECT + mmap) failed (reproduce: keg_iomix -s $seed -n 400 -f 3 -z 1024 -v 200 --ops wwaarrddmmcts DIR)"
