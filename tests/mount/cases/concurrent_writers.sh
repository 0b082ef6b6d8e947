#!/usr/bin/env bash
# concurrent_writers.sh -- several writers at once: threads with their own fds writing
# interleaved stripes of one file (keg_fsmodel --threads), processes appending lines to one
# O_APPEND file, and processes creating files in one directory.
# timeout: 300
. "$(dirname "$0")/../lib.sh"
need_bin KEG_FSMODEL keg_fsmodel

for t in 2 4 8; do
  "$KEG_FSMODEL" --threads $t -s $t "$MNT/striped-$t" || fail "keg_fsmodel --threads $t"
done
rm -f "$MNT"/striped-*

# 4 processes append 500 lines each; every line arrives whole, each writer's in order
W=4
L=500
for w in $(seq 1 $W); do
  (
    exec 3>>"$MNT/appended"
    for i in $(seq 1 $L); do
      printf 'writer %d line %04d %s\n' "$w" "$i" "................................" >&3
    done
  ) &
done
wait
assert_eq "$(wc -l < "$MNT/appended")" $((W * L)) "appended line count"
bad=$(grep -cvE '^writer [0-9]+ line [0-9]{4} \.{32}$' "$MNT/appended")
assert_eq "$bad" 0 "torn or mixed lines"
for w in $(seq 1 $W); do
  grep "^writer $w " "$MNT/appended" | awk '{print $4}' | sort -c 2>/dev/null \
    || fail "writer $w's lines are out of order"
done

# 4 processes create 300 files each in one directory, then one lists them
mkdir "$MNT/d" || fail "mkdir"
for w in $(seq 1 $W); do
  (
    for i in $(seq 1 300); do
      printf '%d-%d' "$w" "$i" > "$MNT/d/f-$w-$i" || exit 1
    done
  ) &
done
wait
assert_eq "$(ls "$MNT/d" | wc -l)" $((W * 300)) "files created concurrently"
assert_eq "$(cat "$MNT/d/f-3-123")" 3-123 "content of one of them"

# two processes rename files back and forth while a third stats them: no lost files
for i in $(seq 1 50); do : > "$MNT/d/r$i"; done
( for n in 1 2 3; do for i in $(seq 1 50); do mv "$MNT/d/r$i" "$MNT/d/s$i"; mv "$MNT/d/s$i" "$MNT/d/r$i"; done; done ) &
( for n in 1 2 3; do for i in $(seq 1 50); do stat "$MNT/d/r$i" "$MNT/d/s$i" >/dev/null 2>&1; done; done ) &
wait
assert_eq "$(ls "$MNT/d" | grep -cE '^[rs][0-9]+$')" 50 "files after concurrent renames"
rm -rf "$MNT/d" "$MNT/appended" || fail "rm -rf"
