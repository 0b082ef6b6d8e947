#!/usr/bin/env bash
# s3_gateway_restart.sh -- the S3 gateway dies (kill -9) under a writer that fsyncs every
# file, stays down a few seconds, and comes back.  The writer never hangs (each file is
# bounded); every file whose fsync returned success reads back exactly, before and after
# an unmount/remount; a file whose fsync failed may be missing or unreadable, but what
# can be read of it is never wrong bytes.
#
# The gateway is the runner's (gw_lib.sh: $KEG_S3_DIR, the one serving BUCKET, else the
# case skips).  It is started again on every way out.  Tunables: KEG_TEST_GW_DOWN (seconds down, default 6),
# KEG_TEST_FILE_LIMIT (seconds one file may take, default 150: above the store's 60 s
# retry deadline).
# needs: s3
# timeout: 600
# allow-log: [Cc]onnect|[Tt]imed out|timeout|ETIMEDOUT|upload|retr(y|ies)|flush|fsync|write
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../obj_lib.sh"
. "$(dirname "$0")/../gw_lib.sh"
need_kegfs
need_gateway

DOWN=${KEG_TEST_GW_DOWN:-6}
LIMIT=${KEG_TEST_FILE_LIMIT:-150}
MIB=$((1024 * 1024))

# file i is SIZE(i) bytes of a random pool from offset OFF(i): no per-file copies needed
head -c $((6 * MIB + 65536)) /dev/urandom > "$WORK/pool"
fsize() {   # every 5th file spans two 4 MiB blocks, the others are small
  if [ $(($1 % 5)) = 0 ]; then echo $((5 * MIB + $1)); else echo $(((($1 * 7919) % 200000) + 1)); fi
}
foff() { echo $((($1 * 997) % 65536)); }
gen() {   # gen I [LEN]: the content of file I (its first LEN bytes)
  dd if="$WORK/pool" iflag=skip_bytes,count_bytes skip="$(foff "$1")" \
     count="${2:-$(fsize "$1")}" bs=1M status=none
}

mkdir "$MNT/w" || fail "mkdir"
echo up > "$WORK/phase"
: > "$WORK/writes"
# The writer: one file after another, each written and fsync'ed by dd (conv=fsync: the
# exit status is non-zero when write, fsync or close fails), bounded by LIMIT seconds.
# Records "I RC MS PHASE T0 T1" per file (PHASE when it started; T0, T1 in ns).
(
  i=0
  while [ ! -e "$WORK/stop" ] && [ $i -lt 2000 ]; do
    i=$((i + 1))
    phase=$(cat "$WORK/phase")
    t0=$(date +%s%N)
    gen $i | timeout -k 5 "$LIMIT" dd of="$MNT/w/f-$i" bs=1M iflag=fullblock conv=fsync \
      status=none 2>> "$WORK/dd.err"
    rc=$?
    t1=$(date +%s%N)
    echo "$i $rc $(( (t1 - t0) / 1000000 )) $phase $t0 $t1" >> "$WORK/writes"
  done
) &
writer=$!

sleep 4
gw kill-gw || fail "kill-gw failed: $(tail -3 "$WORK/gw.log")"
t_kill=$(date +%s%N)
echo down > "$WORK/phase"
note "gateway on port $GW_PORT killed after $(wc -l < "$WORK/writes") files"
curl -s -m 2 -o /dev/null "http://127.0.0.1:$GW_PORT/" && fail "the gateway still answers after kill-gw"
sleep "$DOWN"
echo back > "$WORK/phase"
t0=$(date +%s)
gw start-gw || fail "start-gw failed: $(tail -5 "$WORK/gw.log")"
t_back=$(date +%s%N)
note "gateway back after $DOWN s down (+$(( $(date +%s) - t0 )) s to start)"
# let the writer finish a few files started after the gateway came back
after_back() { [ "$(awk -v b="$t_back" '$5 > b' "$WORK/writes" | wc -l)" -ge 5 ]; }
wait_for $((LIMIT + 30)) after_back || note "fewer than 5 files started after the restart finished in time"
touch "$WORK/stop"
# the writer finishes the file it is on; each file is bounded by LIMIT
wait_for $((LIMIT + 30)) sh -c "! kill -0 $writer 2>/dev/null" \
  || fail "the writer did not finish within $((LIMIT + 30)) s after the gateway came back"
wait "$writer" 2>/dev/null
writer=""

total=$(wc -l < "$WORK/writes")
ok=$(awk '$2 == 0' "$WORK/writes" | wc -l)
hung=$(awk '$2 == 124 || $2 == 137' "$WORK/writes" | wc -l)
down=$(awk -v k="$t_kill" -v b="$t_back" '$5 < b && $6 > k' "$WORK/writes" | wc -l)
slowest=$(awk 'BEGIN { m = 0 } $3 > m { m = $3 } END { print m }' "$WORK/writes")
note "$total files written, $ok fsyncs succeeded, $down were in flight while the gateway was down," \
     "slowest $slowest ms"
[ -s "$WORK/dd.err" ] && note "dd errors: $(sort "$WORK/dd.err" | uniq -c | head -5 | tr '\n' ';')"
[ "$hung" = 0 ] || fail "$hung files took longer than $LIMIT s (writer hung): $(awk '$2 == 124 || $2 == 137' "$WORK/writes" | head -3 | tr '\n' ';')"
[ "$down" -gt 0 ] || fail "no file was written while the gateway was down (the test proves nothing)"
[ "$(awk '$4 == "up" && $2 == 0' "$WORK/writes" | wc -l)" -gt 0 ] || fail "no fsync succeeded before the kill"
[ "$(awk -v b="$t_back" '$5 > b && $2 == 0' "$WORK/writes" | wc -l)" -gt 0 ] \
  || fail "no fsync succeeded after the gateway came back"

check_files() {   # check_files WHEN: every fsync'ed file exact, the others never wrong
  local when=$1 i rc n bad=0
  while read -r i rc _ _; do
    if [ "$rc" = 0 ]; then
      if ! gen "$i" | cmp -s - "$MNT/w/f-$i"; then
        soft_fail "$when: f-$i (fsync succeeded) differs: size $(stat -c %s "$MNT/w/f-$i" 2>&1), want $(fsize "$i")"
        bad=$((bad + 1))
      fi
    elif [ -e "$MNT/w/f-$i" ]; then
      # whatever reads back must be the start of what was written
      if cat "$MNT/w/f-$i" > "$WORK/back" 2> "$WORK/back.err"; then
        n=$(stat -c %s "$WORK/back")
        gen "$i" "$n" | cmp -s - "$WORK/back" \
          || { soft_fail "$when: f-$i (fsync failed, rc $rc) holds wrong bytes ($n bytes)"; bad=$((bad + 1)); }
      else
        note "$when: f-$i (fsync failed) unreadable: $(head -1 "$WORK/back.err")"
      fi
    fi
    [ $bad -lt 5 ] || fail "$when: too many bad files"
  done < "$WORK/writes"
}
check_files "before remount"
mt_umount
mt_mount
check_files "after remount"
# the volume is fully usable afterwards
gen 5 > "$WORK/again"
cp "$WORK/again" "$MNT/again" && sync && cmp "$WORK/again" "$MNT/again" || fail "write after the restart"
finish
