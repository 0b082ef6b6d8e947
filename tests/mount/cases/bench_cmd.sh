#!/usr/bin/env bash
# bench_cmd.sh -- `kegfs bench PATH` on the mount: exit 0, a table of six tests with the
# sizes and operation counts asked for and positive rates in their units, the summary
# line, nothing left behind; a progress bar on a terminal only; clear errors (not a
# directory: 1, usage: 2).
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs

mkdir -p "$MNT/bench" || fail "mkdir"
"$KEGFS" bench --size 8M --files 200 "$MNT/bench" > "$WORK/bench.out" 2> "$WORK/bench.err"
rc=$?
[ $rc = 0 ] || fail "kegfs bench exited $rc: $(cat "$WORK/bench.out" "$WORK/bench.err")"
[ -s "$WORK/bench.err" ] && fail "kegfs bench wrote to stderr when it is not a terminal: $(cat "$WORK/bench.err")"
head -1 "$WORK/bench.out" | grep -qE '^test +size +ops +seconds +rate$' \
  || fail "no table header: $(head -1 "$WORK/bench.out")"
# row: the test name, its size column, ops, seconds, rate, unit
check_row() {   # check_row NAME SIZE_RE OPS UNIT
  local line
  line=$(grep -E "^$1 " "$WORK/bench.out") || fail "no row '$1': $(cat "$WORK/bench.out")"
  echo "$line" | grep -qE "^$1 +$2 +$3 +[0-9]+\.[0-9]{3} +[0-9]+\.[0-9] $4\$" \
    || fail "row '$1' has the wrong shape: '$line'"
  awk -v l="$line" 'BEGIN { n = split(l, f, " "); exit !(f[n - 1] + 0 > 0) }' \
    || fail "row '$1' has no positive rate: '$line'"
}
check_row 'big file write \(fsync\)' '8 MiB' 8 'MiB/s'
check_row 'big file read \(uncached\)' '8 MiB' 8 'MiB/s'
check_row 'small files create\+write' '200 x 4 KiB' 200 'files/s'
check_row 'small files read' '200 x 4 KiB' 200 'files/s'
check_row 'stat' '-' 200 'ops/s'
check_row 'small files unlink' '-' 200 'ops/s'
assert_eq "$(wc -l < "$WORK/bench.out")" 8 "lines of output (header, 6 rows, summary)"
tail -1 "$WORK/bench.out" | grep -qE "^bench of $MNT/bench: all tests passed in [0-9.]+ s$" \
  || fail "no summary line: $(tail -1 "$WORK/bench.out")"
assert_eq "$(ls -A "$MNT/bench" | wc -l)" 0 "entries left in the bench directory"

# empty small files, and the progress bar on a terminal (script(1) gives it a pty)
if command -v script > /dev/null; then
  script -qec "$KEGFS bench --size 2M --files 20 --small-size 0 $MNT/bench" /dev/null \
    > "$WORK/tty.out" 2>&1 || fail "kegfs bench on a terminal failed: $(cat "$WORK/tty.out")"
  grep -q 'big file write \[#*' "$WORK/tty.out" || fail "no progress bar on a terminal: $(cat -v "$WORK/tty.out")"
  grep -qE '^small files read +20 x 0 B +20 ' "$WORK/tty.out" \
    || fail "empty small files not in the table: $(cat -v "$WORK/tty.out")"
  script -qec "$KEGFS bench --no-progress --size 1M --files 5 $MNT/bench" /dev/null \
    > "$WORK/tty2.out" 2>&1 || fail "kegfs bench --no-progress failed"
  grep -q '\[#' "$WORK/tty2.out" && fail "--no-progress drew a bar: $(cat -v "$WORK/tty2.out")"
fi
assert_eq "$(ls -A "$MNT/bench" | wc -l)" 0 "entries left after the terminal runs"

# errors
expect_fail 'No such file' "$KEGFS" bench "$MNT/no_such_dir"
echo x > "$MNT/afile"
expect_fail 'is not a directory' "$KEGFS" bench "$MNT/afile"
"$KEGFS" bench > /dev/null 2>&1; [ $? = 2 ] || fail "kegfs bench without PATH: exit status is not 2"
"$KEGFS" bench --files 0 "$MNT/bench" > /dev/null 2>&1; [ $? = 2 ] || fail "--files 0: exit status is not 2"
"$KEGFS" bench --size nope "$MNT/bench" > /dev/null 2>&1; [ $? = 2 ] || fail "--size nope: exit status is not 2"
exit 0
