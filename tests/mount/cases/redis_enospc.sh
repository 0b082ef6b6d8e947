#!/usr/bin/env bash
# redis_enospc.sh -- a full Redis (maxmemory reached, policy noeviction) is a full file
# system: creating files fails with ENOSPC ("No space left on device") after a bounded
# number of files, while reading existing files, ls, stat and df keep working; as on
# a full local disk, chmod, setting times, truncating and releasing locks work too
# (taking a new lock fails with ENOLCK); deleting files works and makes room for new
# ones.
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
rd_format META2 "$PORT"
M=$WORK/mnt2
m2_mount "$M" "$WORK/mounter2.log" "$META2" --heartbeat 1

# files with data, written before the server fills up
mkdir "$M/keep" "$M/fill" || fail "mkdir"
for i in 1 2 3; do
  head -c $((100000 * i)) /dev/urandom > "$M/keep/data$i" || fail "write data$i"
done
(cd "$M/keep" && sha256sum data*) > "$WORK/keep.sha"
head -c 300000 /dev/urandom > "$M/keep/scratch" || fail "write scratch"
: > "$M/keep/lockfile" || fail "create lockfile"
lock_ino=$(stat -c %i "$M/keep/lockfile")

start_locker "$M/keep/lockfile"
locks_held() {   # the engine's lock records of lockfile (flock hash, plock hash)
  echo "$(rd_cli "$PORT" HLEN "{$VOL}f$lock_ino") $(rd_cli "$PORT" HLEN "{$VOL}p$lock_ino")"
}
assert_eq "$(locks_held)" "1 1" "lock records of the locker"

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

# Redis's used memory moves by tens of KB by itself once the data stops changing
# (a hash table that grew finishes rehashing in the background and frees its old
# table, client buffers shrink), so one of the next creates may still fit: each
# create either succeeds or fails with ENOSPC, and ENOSPC comes again within 200
# (about 5 % of what fitted).
again=0
for i in $(seq 200); do
  last=$M/fill/one-more-$i
  if touch "$last" 2> "$WORK/touch.err"; then
    created=$((created + 1))
    continue
  fi
  grep -q 'No space left on device' "$WORK/touch.err" \
    || fail "create while full failed with something else than ENOSPC: $(head -3 "$WORK/touch.err")"
  [ -e "$last" ] && fail "a create that failed with ENOSPC left a file ($(head -1 "$WORK/touch.err"))"
  again=1
  break
done
note "ENOSPC again after $((i - 1)) more creates"
[ $again = 1 ] || fail "200 creates after ENOSPC all succeeded"

# For the checks of a full server, pin it full: maxmemory 256 KB below what it uses now,
# far more than the memory it frees by itself.
used=$(rd_cli "$PORT" INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
rd_cli "$PORT" CONFIG SET maxmemory $((used - 262144)) > /dev/null || fail "CONFIG SET maxmemory"
expect_fail 'No space left on device' touch "$M/fill/pinned"
[ -e "$M/fill/pinned" ] && fail "a create that failed with ENOSPC left a file"
expect_fail 'No space left on device' mkdir "$M/newdir"
(cd "$M/keep" && sha256sum -c --quiet "$WORK/keep.sha") || fail "existing files read differently while full"
assert_eq "$(ls "$M/fill" | wc -l)" "$created" "ls of the full directory"
stat "$M/fill/f000000" > /dev/null || fail "stat while full"
df "$M" > /dev/null || fail "df while full"

# changing attributes, truncating and releasing locks need no new records
chmod 600 "$M/keep/data1" || fail "chmod while full"
assert_eq "$(stat -c %a "$M/keep/data1")" "600" "mode after chmod while full"
touch -d '2001-02-03 04:05:06 UTC' "$M/keep/data2" || fail "setting times while full"
assert_eq "$(stat -c %Y "$M/keep/data2")" "981173106" "mtime after touch -d while full"
truncate -s 1000 "$M/keep/scratch" || fail "truncate (shrink) while full"
assert_eq "$(stat -c %s "$M/keep/scratch")" "1000" "size after truncate while full"
: > "$M/keep/scratch" || fail "O_TRUNC while full"
assert_eq "$(stat -c %s "$M/keep/scratch")" "0" "size after O_TRUNC while full"
lock_rc=$(python3 - "$M/keep/data3" <<'PY'
import errno, fcntl, sys
f = open(sys.argv[1], "r")
try:
    fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
    print("granted")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
PY
)
assert_eq "$lock_rc" "ENOLCK" "a new flock while full"
kill "$LOCKER" && wait "$LOCKER" 2>/dev/null
wait_for 10 test "$(locks_held)" = "0 0" || fail "the locker's locks are still held while full: $(locks_held)"

# the session's heartbeat (every second here) goes on while full
sleep 2
rd_cli "$PORT" CONFIG SET maxmemory "$MAXMEM" > /dev/null || fail "CONFIG SET maxmemory"

# deleting works while full, and makes room
half=$((created / 2))
ls "$M/fill" > "$WORK/names" || fail "ls"
head -n "$half" "$WORK/names" | (cd "$M/fill" && xargs rm) || fail "rm while full"
assert_eq "$(ls "$M/fill" | wc -l)" "$((created - half))" "files left after deleting half"
wait_for 20 touch "$M/fill/after-delete" || fail "create still fails after deleting $half files"
printf 'room again' > "$M/keep/new" || fail "write after deleting"
assert_eq "$(cat "$M/keep/new")" "room again" "read of a file created after deleting"
(cd "$M/keep" && sha256sum -c --quiet "$WORK/keep.sha") || fail "existing files after deleting"
locks_free "$M/keep/lockfile" || fail "the locks of lockfile after its holder died while full"
grep -E ' (ERROR|FATAL) ' "$WORK/mounter2.log" | head -5 | sed 's/^/# mounter log: /'
grep -E 'releasing|heartbeat' "$WORK/mounter2.log" | head -3 | sed 's/^/# mounter log: /'
grep -qE 'releasing|session heartbeat' "$WORK/mounter2.log" && fail "a lock release or a heartbeat failed"
m2_umount "$M"
exit 0
