#!/usr/bin/env bash
# progress_cli.sh -- the progress output of warmup, fsck, dump and load: with the output in
# a file there is no bar and no control character, only the summary line; on a terminal
# (a pty from script(1)) the bar is redrawn a bounded number of times (not once per file),
# every phase's last line is at 100% and the summary follows it.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd script

NF=800
mkdir -p "$MNT/p/q" || fail "mkdir"
for i in $(seq 1 $NF); do
  printf 'file %d\n' "$i" > "$MNT/p/q/f$i" || fail "create f$i"
done
head -c 3000000 /dev/urandom > "$MNT/p/big" || fail "big file"
sync
nfiles=$((NF + 1))

has_ctl() { LC_ALL=C grep -q $'[\r\033]' "$1"; }
# the last thing drawn before each newline, for lines that hold a bar
phase_ends() { tr '\r' '\n' < "$1" | awk 'prev ~ /\[[#.]+\]/ && $0 == "" { print prev } { prev = $0 }'; }
# on a pty: run "$@" with stdout+stderr on a terminal, captured in $OUT
on_tty() {
  local out=$1; shift
  local cmd
  printf -v cmd '%q ' "$@"
  script -qfec "$cmd" /dev/null > "$out" 2>&1 < /dev/null
}

# --- warmup, output to a file: the summary only
"$KEGFS" warmup "$MNT/p" > "$WORK/w1.out" 2>&1 || fail "warmup: $(cat "$WORK/w1.out")"
has_ctl "$WORK/w1.out" && fail "warmup to a file wrote control characters: $(od -c "$WORK/w1.out" | head)"
assert_eq "$(wc -l < "$WORK/w1.out")" 1 "lines of warmup output to a file"
grep -Eq "^warmed $nfiles files, [0-9.]+ [KM]iB in [0-9]+\.[0-9] s$" "$WORK/w1.out" \
  || fail "warmup summary: $(cat "$WORK/w1.out")"
"$KEGFS" warmup --no-progress --cache-dir "$WORK/ssd" "$MNT/p" > "$WORK/w2.out" 2>&1 \
  || fail "warmup --cache-dir: $(cat "$WORK/w2.out")"
has_ctl "$WORK/w2.out" && fail "warmup --cache-dir to a file wrote control characters"
grep -Eq "^warmed $nfiles files, [0-9.]+ [KM]iB into $WORK/ssd in [0-9]+\.[0-9] s$" "$WORK/w2.out" \
  || fail "warmup --cache-dir summary: $(cat "$WORK/w2.out")"

# --- warmup on a terminal: a throttled bar ending at 100%, then the summary
t0=$(date +%s.%N)
on_tty "$WORK/w3.out" "$KEGFS" warmup "$MNT/p" || fail "warmup on a tty: $(cat "$WORK/w3.out")"
t1=$(date +%s.%N)
redraws=$(tr -cd '\r' < "$WORK/w3.out" | wc -c)
# script(1) turns each "\n" into "\r\n": count only the bar's own carriage returns
redraws=$((redraws - $(tr -cd '\n' < "$WORK/w3.out" | wc -c)))
max=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", (b - a) / 0.1 + 3 }')
note "warmup of $nfiles files on a tty: $redraws redraws in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"
[ "$redraws" -ge 1 ] || fail "no bar drawn on a tty: $(od -c "$WORK/w3.out" | head)"
[ "$redraws" -le "$max" ] || fail "warmup redrew $redraws times (at most $max expected)"
phase_ends "$WORK/w3.out" > "$WORK/w3.ends"
[ -s "$WORK/w3.ends" ] || fail "no finished bar line in $(od -c "$WORK/w3.out" | head -20)"
grep -v ' 100%' "$WORK/w3.ends" && fail "a warmup bar was left below 100%"
grep -q "warming \[####################\] 100%  $nfiles/$nfiles" "$WORK/w3.ends" \
  || fail "warmup bar: $(cat "$WORK/w3.ends")"
tr -d '\r' < "$WORK/w3.out" | tail -n 1 | grep -Eq "^warmed $nfiles files, .* in [0-9.]+ s$" \
  || fail "warmup on a tty: the summary is not the last line"

mt_umount
# --- fsck: to a file, then --deep on a terminal
"$KEGFS" fsck "$META" > "$WORK/f1.out" 2>&1 || fail "fsck: $(cat "$WORK/f1.out")"
has_ctl "$WORK/f1.out" && fail "fsck to a file wrote control characters"
grep -Eq "^volume is consistent \(checked in [0-9.]+ s\)$" "$WORK/f1.out" \
  || fail "fsck summary: $(cat "$WORK/f1.out")"
on_tty "$WORK/f2.out" "$KEGFS" fsck --deep --threads 8 "$META" || fail "fsck --deep on a tty: $(cat "$WORK/f2.out")"
phase_ends "$WORK/f2.out" > "$WORK/f2.ends"
grep -q "^verifying blocks \[" "$WORK/f2.ends" || fail "fsck --deep drew no 'verifying blocks' bar: $(cat "$WORK/f2.ends")"
grep -v ' 100%' "$WORK/f2.ends" && fail "an fsck bar was left below 100%"
note "fsck --deep on a tty: $(tr -d '\033' < "$WORK/f2.ends" | sed 's/\[K$//' | tail -n 1)"
tr -d '\r' < "$WORK/f2.out" | tail -n 1 | grep -q "^volume is consistent" \
  || fail "fsck on a tty: the verdict is not the last line"
# percentages never go down within a phase
tr '\r' '\n' < "$WORK/f2.out" | awk '/^verifying blocks \[/ { p = $4 + 0; if (p < last) { print "went from " last "% to " p "%"; bad = 1 } last = p } END { exit bad }' \
  || fail "fsck --deep bar went backwards"

# --- dump and load: to a file no control characters; on a terminal the same bar
"$KEGFS" dump "$META" "$WORK/d.json" > "$WORK/d1.out" 2>&1 || fail "dump: $(cat "$WORK/d1.out")"
has_ctl "$WORK/d1.out" && fail "dump to a file wrote control characters"
grep -q "^kegfs: dumped " "$WORK/d1.out" || fail "dump summary: $(cat "$WORK/d1.out")"
on_tty "$WORK/d2.out" "$KEGFS" dump "$META" "$WORK/d2.json" || fail "dump on a tty: $(cat "$WORK/d2.out")"
phase_ends "$WORK/d2.out" > "$WORK/d2.ends"
grep -q "^dumping \[.*\] 100%" "$WORK/d2.ends" || fail "dump bar: $(cat "$WORK/d2.ends")"
case "$META" in
sqlite3://*)
  on_tty "$WORK/l.out" "$KEGFS" load "sqlite3://$WORK/loaded.db" "$WORK/d.json" \
    || fail "load on a tty: $(cat "$WORK/l.out")"
  phase_ends "$WORK/l.out" > "$WORK/l.ends"
  grep -q "^loading \[.*\] 100%" "$WORK/l.ends" || fail "load bar: $(cat "$WORK/l.ends")"
  ;;
esac
mt_mount
exit 0
