#!/usr/bin/env bash
# cli_usage.sh -- usage errors of every command are one line on stderr starting with
# "kegfs: ", naming the bad word and pointing to --help, with exit status 2 and nothing on
# stdout (docs/cli.md "Exit status"); invalid option values of format are usage errors too.
# timeout: 60
. "$(dirname "$0")/../lib.sh"
need_kegfs

U=$WORK/usage
mkdir -p "$U/objs"

# usage_line WORD CMD...: exit 2, no stdout, exactly one stderr line "kegfs: ..." naming WORD
usage_line() {
  local word=$1; shift
  local rc=0
  "$@" > "$U/out" 2> "$U/err" || rc=$?
  [ "$rc" = 2 ] || fail "$*: exit $rc, expected 2 ($(cat "$U/err"))"
  [ ! -s "$U/out" ] || fail "$*: printed on stdout: $(head -3 "$U/out")"
  [ "$(wc -l < "$U/err")" = 1 ] || fail "$*: $(wc -l < "$U/err") lines on stderr: $(head -5 "$U/err")"
  grep -q '^kegfs: ' "$U/err" || fail "$*: message does not start with 'kegfs: ': $(cat "$U/err")"
  grep -qF -- "$word" "$U/err" || fail "$*: message does not name '$word': $(cat "$U/err")"
}

for cmd in format mount umount status info stats gc fsck dump load warmup restore; do
  usage_line "--no-such-flag" "$KEGFS" "$cmd" --no-such-flag
  grep -qF "kegfs $cmd --help" "$U/err" || fail "$cmd: no pointer to --help: $(cat "$U/err")"
done
usage_line "--no-such-flag" "$KEGFS" --no-such-flag
usage_line "-Z" "$KEGFS" format -Z
usage_line "--cache-size" "$KEGFS" mount --cache-size        # missing value
usage_line "3M" "$KEGFS" format --storage file --bucket "$U/objs" --block-size 3M \
  "sqlite3://$U/m.db" vol1
usage_line "--bucket" "$KEGFS" format --storage s3 "sqlite3://$U/m.db" vol1
usage_line "--bucket" "$KEGFS" format --storage file --bucket relative/dir "sqlite3://$U/m.db" vol1
[ ! -e "$U/m.db" ] || fail "a refused format left $U/m.db behind"

# a failure that is not a usage error is still exit 1 (missing storage directory)
rc=0
"$KEGFS" format --storage file --bucket "$U/missing" "sqlite3://$U/m.db" vol1 > /dev/null 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "format with a missing storage directory: exit $rc, expected 1"
echo "# note: usage errors are one line, exit 2"
