#!/usr/bin/env bash
# direct_io_long.sh -- the stale-page hunt of direct_io.sh for longer (runs only with --long):
# keg_dio in every mode -- asynchronous (io_submit, 8 x 128 KiB in flight) and synchronous
# O_DIRECT writes; buffered readers at random places (reopening, or keeping their
# descriptors) and readers that follow the writer sequentially (read-ahead into the range
# being written), also with direct writes of 4.5 KiB (pieces that end inside pages) --
# each for DIO_LONG_SECONDS (default 60), on the mount as the runner
# made it and again with --writeback (a --cache-dir).  After each round's writes complete
# and the file is closed, fresh buffered reads, a descriptor kept open across the write and
# an O_DIRECT read must return the new bytes of every page.
# timeout: 3600
. "$(dirname "$0")/../lib.sh"
need_bin KEG_DIO keg_dio
secs=${DIO_LONG_SECONDS:-60}

run_modes() {   # run_modes LABEL
  local m
  local out
  for m in "" "-k" "-s" "-s -k" "-b" "-b -k" "-b -s" "-c 4608 -z 4608 -k" "-c 4608 -z 4608 -b -k"; do
    # shellcheck disable=SC2086
    out=$("$KEG_DIO" -t "$secs" -r 3 -p 3 -z 4096 $m "$MNT/long" 2>&1) \
      || { echo "$out"; fail "$1: keg_dio $m: stale bytes after direct writes"; }
    note "$1: keg_dio $m: $(echo "$out" | tr '\n' ' ')"
  done
  rm -f "$MNT/long"
}

run_modes "as mounted"
if [ -n "$KEGFS" ] && [ -n "$META" ]; then
  mt_umount
  mt_mount --cache-dir "$WORK/cache" --cache-size 512M --writeback
  run_modes "--writeback"
  mt_umount
  mt_mount
fi
exit 0
