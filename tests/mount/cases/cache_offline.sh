#!/usr/bin/env bash
# cache_offline.sh -- files read once through a mount with --cache-dir read back correctly
# after a remount while the object store is unreachable: served from the SSD cache alone.
#   S3 runs (the runner's gateway started by scripts/s3-server.sh, KEG_S3_DIR set): the
#     gateway is killed (s3-server.sh kill-gw; only the one of KEG_S3_DIR) and started
#     again at the end (start-gw, also when the case fails).
#   file runs: the objects directory is moved away and an empty one put in its place.
# Either way the remounted volume must read every file exactly, with 0 cache misses.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs

S3SH=${MT_HERE:-$(dirname "$0")/..}/../../scripts/s3-server.sh
VARIANT=""
if [ "${STORAGE:-}" = s3 ]; then
  [ -n "${KEG_S3_DIR:-}" ] && [ -f "$KEG_S3_DIR/pids/rgw" ] && [ -x "$S3SH" ] \
    || skip "S3 storage but no gateway of scripts/s3-server.sh (KEG_S3_DIR) to stop"
  # the gateway's port, for start-gw's wait (s3-server.sh env does not export it)
  port=$(echo "${BUCKET:-}" | sed -nE 's#^https?://[^/:]+:([0-9]+)/.*#\1#p')
  [ -n "$port" ] || skip "cannot tell the gateway port from bucket '${BUCKET:-}'"
  export KEG_S3_PORT=$port
  VARIANT=s3
elif [ -n "$OBJDIR" ] && [ -d "$OBJDIR" ]; then
  VARIANT=file
else
  skip "needs file storage or the runner's S3 gateway"
fi
note "variant: $VARIANT"

CACHE=$WORK/cache
offline=0
restore() {
  [ $offline = 1 ] || return 0
  if [ $VARIANT = s3 ]; then
    # The runner kills this case's cgroup when the case ends: the gateway must start in
    # the cgroup of the cluster's other daemons (the OSD's), not in ours.
    ( osd=$(cat "$KEG_S3_DIR/pids/osd" 2>/dev/null)
      cgp=$(sed -n 's/^0:://p' "/proc/$osd/cgroup" 2>/dev/null)
      cgroot=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2")
                      print $5; break } }' /proc/self/mountinfo | head -1)
      if [ -n "$cgp" ] && [ -n "$cgroot" ]; then
        echo $BASHPID > "$cgroot$cgp/cgroup.procs" 2>/dev/null
      fi
      exec "$S3SH" start-gw "$KEG_S3_DIR" ) > "$WORK/start-gw.out" 2>&1 \
      || echo "FAIL cache_offline: s3-server.sh start-gw failed: $(tail -3 "$WORK/start-gw.out")"
  else
    rm -rf "$OBJDIR" && mv "$OBJDIR.away" "$OBJDIR"
  fi
  offline=0
}
trap restore EXIT

mt_umount
mt_mount --cache-dir "$CACHE"

mkdir -p "$MNT/d/sub" || fail "mkdir"
sizes=(0 1 4095 4096 65537 1048576 4194304 9437187)
i=0
for s in "${sizes[@]}"; do
  head -c "$s" /dev/urandom > "$WORK/src.$i"
  cp "$WORK/src.$i" "$MNT/d/f.$i" || fail "write f.$i"
  i=$((i + 1))
done
cp "$WORK/src.6" "$MNT/d/sub/deep" || fail "write deep"
sync
for i in "${!sizes[@]}"; do
  cmp "$WORK/src.$i" "$MNT/d/f.$i" || fail "f.$i differs while the store is up"
done
cmp "$WORK/src.6" "$MNT/d/sub/deep" || fail "deep differs while the store is up"
mt_umount
ncache=$(find "$CACHE" -path '*/blocks/*' -type f | wc -l)
note "$ncache block files in the SSD cache"
[ "$ncache" -ge 7 ] || fail "only $ncache blocks cached"

# take the store away
offline=1
if [ $VARIANT = s3 ]; then
  "$S3SH" kill-gw "$KEG_S3_DIR" || fail "kill-gw"
  code=$(curl -s -o /dev/null -m 3 -w '%{http_code}' "$BUCKET" 2>/dev/null)
  [ "$code" = 000 ] || fail "the gateway still answers ($code) after kill-gw"
  note "gateway of $KEG_S3_DIR stopped"
else
  mv "$OBJDIR" "$OBJDIR.away" && mkdir "$OBJDIR" || fail "moving the objects away"
  note "objects moved away; $OBJDIR is empty"
fi

mt_mount --cache-dir "$CACHE"
for i in "${!sizes[@]}"; do
  [ "$(stat -c %s "$MNT/d/f.$i")" = "${sizes[$i]}" ] || fail "f.$i has the wrong size offline"
  cmp "$WORK/src.$i" "$MNT/d/f.$i" || fail "f.$i differs with the store offline"
done
cmp "$WORK/src.6" "$MNT/d/sub/deep" || fail "deep differs with the store offline"
# the stats file is rewritten every second: wait for one that has seen the reads
hits() { "$KEGFS" stats "$MNT" 2>/dev/null | sed -nE 's/.*; ([0-9]+) hits,.*/\1/p'; }
for _ in $(seq 50); do
  [ "$(hits)" -gt 0 ] 2>/dev/null && break
  sleep 0.1
done
st=$("$KEGFS" stats "$MNT" 2>&1)
echo "$st" | grep cache | sed 's/^/# /'
[ "$(hits)" -ge 7 ] 2>/dev/null || fail "too few cache hits: $(echo "$st" | grep cache)"
echo "$st" | grep -q ' 0 misses' || fail "cache misses while offline: $(echo "$st" | grep cache)"
note "every file read from the SSD cache with the store offline"
mt_umount
restore

# back online: the volume works as before
mt_mount --cache-dir "$CACHE"
cp "$WORK/src.7" "$MNT/after" && sync && cmp "$WORK/src.7" "$MNT/after" || fail "write after the store came back"
exit 0
