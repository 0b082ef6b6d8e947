#!/usr/bin/env bash
# bigdir.sh -- a directory with BIGDIR_N entries (default 100000): create, count, sorted
# listing equal to the names created, ls -l (stat of every entry), lookups, rm -rf.
# The mounter's RSS while listing must stay bounded (BIGDIR_RSS_MIB growth, default 200).
# bigdir_long.sh runs the same with 1000000 entries.
# timeout: 1200
. "$(dirname "$0")/../lib.sh"

N=${BIGDIR_N:-100000}
RSS_LIMIT=${BIGDIR_RSS_MIB:-200}
d=$MNT/big
root_before=$(ls -A "$MNT" | wc -l)
mkdir "$d" || fail "mkdir"
t0=$SECONDS
for ((i = 0; i < N; i++)); do
  : > "$d/entry-$i" || fail "create entry-$i"
done
note "created $N files in $((SECONDS - t0)) s"

pid=$(mounter_worker_pid)
rss() {   # VmRSS in KiB of the mounter, 0 without one
  [ -n "$pid" ] && awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0
}
rss0=$(rss)
peak=$rss0
# sample RSS while a listing with stat of every entry runs
ls -l "$d" > "$WORK/ls-l.out" &
lspid=$!
while kill -0 $lspid 2>/dev/null; do
  r=$(rss); [ "${r:-0}" -gt "$peak" ] && peak=$r
  sleep 0.2
done
wait $lspid || fail "ls -l failed"
assert_eq "$(grep -c ' entry-' "$WORK/ls-l.out")" "$N" "entries in ls -l"
t0=$SECONDS
assert_eq "$(ls "$d" | wc -l)" "$N" "ls | wc -l"
note "ls in $((SECONDS - t0)) s"
r=$(rss); [ "${r:-0}" -gt "$peak" ] && peak=$r
if [ -n "$pid" ]; then
  growth=$(( (peak - rss0) / 1024 ))
  note "mounter RSS $((rss0 / 1024)) MiB before listing, peak $((peak / 1024)) MiB (+$growth MiB)"
  [ "$growth" -le "$RSS_LIMIT" ] || fail "mounter RSS grew by $growth MiB while listing $N entries (limit $RSS_LIMIT)"
fi

# the listing is exactly the set of names created
for ((i = 0; i < N; i++)); do echo "entry-$i"; done | LC_ALL=C sort > "$WORK/want"
ls -f "$d" | grep -v '^\.\.\?$' | LC_ALL=C sort > "$WORK/got"
cmp -s "$WORK/want" "$WORK/got" || fail "listing differs: $(diff "$WORK/want" "$WORK/got" | head -5)"
assert_eq "$(ls -f "$d" | grep -c '^\.\.\?$')" 2 "'.' and '..' in the listing"
# random lookups, and one miss
for i in 0 7 $((N / 2)) $((N - 1)); do
  [ -f "$d/entry-$i" ] || fail "lookup of entry-$i"
done
[ -e "$d/entry-$N" ] && fail "entry-$N should not exist"
# find walks it too
assert_eq "$(find "$d" -type f | wc -l)" "$N" "find count"
t0=$SECONDS
rm -rf "$d" || fail "rm -rf"
note "rm -rf in $((SECONDS - t0)) s"
[ -e "$d" ] && fail "$d still exists after rm -rf"
assert_eq "$(ls -A "$MNT" | wc -l)" "$root_before" "entries in the root after rm -rf"
