#!/usr/bin/env bash
# model.sh -- random I/O against an in-memory model (keg_fsmodel): 3 seeds x 3000 ops on files
# that cross the 64 MiB chunk boundaries (sparse up to 160 MiB, little data written).
# KEG_TEST_SEED fixes the first seed (default: random, printed).
# timeout: 600
. "$(dirname "$0")/../lib.sh"
need_bin KEG_FSMODEL keg_fsmodel

base=${KEG_TEST_SEED:-$(( (RANDOM << 15) | RANDOM ))}
for i in 0 1 2; do
  seed=$((base + i))
  note "seed $seed"
  "$KEG_FSMODEL" -s "$seed" -n 3000 -m 160 "$MNT/model-$i" \
    || fail "keg_fsmodel seed $seed found a mismatch (reproduce: keg_fsmodel -s $seed -n 3000 -m 160 FILE)"
  rm -f "$MNT/model-$i" || fail "rm model-$i"
done
