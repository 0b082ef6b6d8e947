#!/usr/bin/env bash
# redis_enospc.sh -- a full Redis (maxmemory reached, policy noeviction) is a full file
# system: creating files fails with ENOSPC ("No space left on device") after a bounded
# number of files, while reading existing files, ls, stat and df keep working, and
# deleting files works and makes room for new ones.
# A dedicated redis-server with maxmemory KEG_TEST_ENOSPC_MAXMEM (default 3mb) serves a
# volume mounted at $WORK/mnt2.
# timeout: 300
# needs: redis
# needs: file
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"
need_redis
MAXMEM=${KEG_TEST_ENOSPC_MAXMEM:-3mb}
MAX_FILES=60000   # with ~400 bytes per empty file, 3 MB is full long before this

rd_start PORT "maxmemory $MAXMEM" "maxmemory-policy noeviction"
META2="redis://127.0.0.1:$PORT/0?ns=$VOL"
mkdir -p "$WORK/objects2"
"$KEGFS" format --storage file --bucket "$WORK/objects2" "$META2" "$VOL" > "$WORK/format2.log" 2>&1 \
  || fail "kegfs format on the dedicated server: $(cat "$WORK/format2.log")"
M=$WORK/mnt2
m2_mount "$M" "$WORK/mounter2.log" "$META2"

# files with data, written before the server fills up
mkdir "$M/keep" "$M/fill" || fail "mkdir"
for i in 1 2 3; do
  head -c $((100000 * i)) /dev/urandom > "$M/keep/data$i" || fail "write data$i"
done
(cd "$M/keep" && sha256sum data*) > "$WORK/keep.sha"

# fill: batches of 500 creates until one reports ENOSPC
n=0
full=0
while [ $n -lt $MAX_FILES ]; do
  names=$(seq -f "$M/fill/f%06g" $n $((n + 499)))
  # shellcheck disable=SC2086
  touch $names 2> "$WORK/touch.err"
  if [ -s "$WORK/touch.err" ]; then
    if grep -q 'No space left on device' "$WORK/touch.err"; then
      full=1
      break
    fi
    fail "create failed with something else than ENOSPC: $(head -3 "$WORK/touch.err")"
  fi
  n=$((n + 500))
done
[ $full = 1 ] || fail "no ENOSPC after $MAX_FILES files with maxmemory $MAXMEM"
created=$(ls "$M/fill" | wc -l)
used=$(rd_cli "$PORT" INFO memory | sed -n 's/^used_memory_human:\(.*\)\r*$/\1/p' | tr -d '\r')
note "ENOSPC after $created files (redis used_memory $used, maxmemory $MAXMEM)"
[ "$created" -gt 100 ] || fail "only $created files before ENOSPC"

# full: more creates fail with ENOSPC, mkdir too; reads, ls, stat, df keep working.
# Redis's used memory moves by some bytes from one command to the next (a failed
# command's buffers are freed), so one of the next few creates may still fit: each
# create either succeeds or fails with ENOSPC, and ENOSPC comes again within 20.
again=0
for i in $(seq 20); do
  last=$M/fill/one-more-$i
  if touch "$last" 2> "$WORK/touch.err"; then
    note "create $i after ENOSPC still fitted"
    created=$((created + 1))
    continue
  fi
  grep -q 'No space left on device' "$WORK/touch.err" \
    || fail "create while full failed with something else than ENOSPC: $(head -3 "$WORK/touch.err")"
  again=1
  break
done
[ $again = 1 ] || fail "20 creates after ENOSPC all succeeded"
expect_fail 'No space left on device' mkdir "$M/newdir"
(cd "$M/keep" && sha256sum -c --quiet "$WORK/keep.sha") || fail "existing files read differently while full"
assert_eq "$(ls "$M/fill" | wc -l)" "$created" "ls of the full directory"
stat "$M/fill/f000000" > /dev/null || fail "stat while full"
df "$M" > /dev/null || fail "df while full"
[ -e "$last" ] && fail "a create that failed with ENOSPC left a file"

# deleting works while full, and makes room
half=$((created / 2))
ls "$M/fill" > "$WORK/names" || fail "ls"
head -n "$half" "$WORK/names" | (cd "$M/fill" && xargs rm) || fail "rm while full"
assert_eq "$(ls "$M/fill" | wc -l)" "$((created - half))" "files left after deleting half"
wait_for 20 touch "$M/fill/after-delete" || fail "create still fails after deleting $half files"
printf 'room again' > "$M/keep/new" || fail "write after deleting"
assert_eq "$(cat "$M/keep/new")" "room again" "read of a file created after deleting"
(cd "$M/keep" && sha256sum -c --quiet "$WORK/keep.sha") || fail "existing files after deleting"
grep -E ' (ERROR|FATAL) ' "$WORK/mounter2.log" | head -5 | sed 's/^/# mounter log: /'
m2_umount "$M"
exit 0
