#!/usr/bin/env bash
# redis_password.sh -- the Redis password never stays visible in `ps`: a dedicated
# redis-server with requirepass serves a volume that is
#   1. formatted with the password in META_PASSWORD (not on the command line);
#   2. mounted with the password in the URL: it is scrubbed from the argv of every
#      kegfs process (supervisor and worker; /proc/PID/cmdline);
#   3. mounted with META_PASSWORD: neither argv nor /proc/PID/environ holds it;
#   4. mounted with --meta-password-file (0600); a file others can read is refused;
#   5. a wrong password fails the mount with a message, the password not in it.
# timeout: 120
# needs: redis
# needs: file
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"
need_redis

PW='Pw-9x/s3cr3t@kegfs'          # '/' and '@' must be escaped in a URL: %2F %40
PW_URL='Pw-9x%2Fs3cr3t%40kegfs'
rd_start PORT
rd_cli "$PORT" CONFIG SET requirepass "$PW" | grep -q OK || fail "CONFIG SET requirepass"
trap 'rd_cleanup; rd_cli "$PORT" -a "$PW" --no-auth-warning SHUTDOWN NOSAVE >/dev/null 2>&1' EXIT
URL="redis://127.0.0.1:$PORT/0?ns=$VOL"
M=$WORK/mnt2
LOG2=$WORK/mounter2.log
mkdir -p "$WORK/objects2"

# 1. format with META_PASSWORD
expect_fail 'NOAUTH|auth|password' "$KEGFS" format --storage file --bucket "$WORK/objects2" "$URL" "$VOL"
META_PASSWORD=$PW "$KEGFS" format --storage file --bucket "$WORK/objects2" "$URL" "$VOL" \
    > "$WORK/format2.log" 2>&1 || fail "format with META_PASSWORD: $(cat "$WORK/format2.log")"

no_password_in_procs() {   # no_password_in_procs WHAT: every kegfs process of $M
  local pids pid n=0
  pids=$(pgrep -f "kegfs.* mount .*$M\$")
  [ -n "$pids" ] || fail "$1: no mounter process found"
  for pid in $pids $(for p in $pids; do pgrep -P "$p"; done); do
    [ -r "/proc/$pid/cmdline" ] || continue
    n=$((n + 1))
    grep -aqF -e "$PW" -e "$PW_URL" -e "s3cr3t" "/proc/$pid/cmdline" \
      && fail "$1: the password is in /proc/$pid/cmdline: $(tr '\0' ' ' < "/proc/$pid/cmdline")"
    grep -aqF -e "$PW" -e "s3cr3t" "/proc/$pid/environ" \
      && fail "$1: the password is in /proc/$pid/environ"
  done
  [ "$n" -ge 2 ] || fail "$1: expected a supervisor and a worker, found $n processes"
  note "$1: $n processes checked: $(tr '\0' ' ' < "/proc/$(echo "$pids" | head -1)/cmdline")"
}
check_works() {   # check_works WHAT
  printf '%s' "$1" > "$M/$1" || fail "$1: write"
  assert_eq "$(cat "$M/$1")" "$1" "$1: read back"
}

# 2. password in the URL on the command line
m2_mount "$M" "$LOG2" "redis://:$PW_URL@127.0.0.1:$PORT/0?ns=$VOL"
no_password_in_procs "password in the URL"
tr '\0' ' ' < "/proc/$(m2_pid "$M")/cmdline" | grep -qF 'redis://:****@127.0.0.1' \
  || fail "the URL on argv is not shown redacted"
check_works url
m2_umount "$M"

# 3. META_PASSWORD
META_PASSWORD=$PW m2_mount "$M" "$LOG2" "$URL"
no_password_in_procs "META_PASSWORD"
check_works env
m2_umount "$M"

# 4. --meta-password-file, 0600 only
printf '%s\n' "$PW" > "$WORK/pw"
chmod 0644 "$WORK/pw"
expect_fail 'readable by group or others|chmod 600' \
  "$KEGFS" mount -d --log-file "$LOG2" --meta-password-file "$WORK/pw" "$URL" "$M"
m2_is_mounted "$M" && fail "mounted with a world-readable password file"
chmod 0600 "$WORK/pw"
m2_mount "$M" "$LOG2" "$URL" --meta-password-file "$WORK/pw"
no_password_in_procs "--meta-password-file"
assert_eq "$(cat "$M/url")" url "file written in step 2"
check_works file
m2_umount "$M"

# the password given twice is refused rather than guessed
out=$(META_PASSWORD=other "$KEGFS" mount -d --log-file "$LOG2" "redis://:$PW_URL@127.0.0.1:$PORT/0?ns=$VOL" "$M" 2>&1) \
  && fail "mounted with a password in the URL and another in META_PASSWORD"
echo "$out" | grep -q 'give it once' || fail "message for two passwords: $out"

# 5. a wrong password: an error, and no password in the message
out=$(META_PASSWORD=wrong-pass "$KEGFS" mount -d --log-file "$LOG2" "$URL" "$M" 2>&1) \
  && fail "mounted with a wrong password"
echo "$out" | grep -qiE 'auth|password|WRONGPASS|NOAUTH' || fail "wrong password message: $out"
echo "$out" | grep -qF 'wrong-pass' && fail "the wrong password is in the message: $out"
grep -aqF -e "$PW" -e "$PW_URL" -e 's3cr3t' "$LOG2" && fail "a password is in the mounter log"
exit 0
