#!/usr/bin/env bash
# 07 StorageClass mountOptions (writeback, SSD cache size) reach the mounter,
# and its cache directory is the host path the node plugin mounts
# (KEG_E2E_CACHE_DIR, its path in the container running the mounters, the
# mount holder or the node plugin; KEG_E2E_CACHE_HOST_DIR, the
# same directory seen on the node, checked when set), not the container's
# writable layer.  With KEG_E2E_MOUNTER_MEMORY_MAX (bytes; the holder runs with
# --memory-max) each mounter must be in its own memory cgroup with that limit.
. "$(dirname "$0")/lib.sh"
CACHE=${KEG_E2E_CACHE_DIR:-/var/cache/kegfs}
EXTRA_SCS=kegfs-e2e-wb
scenario_start
kubectl apply -f - >/dev/null <<EOF2
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: kegfs-e2e-wb}
provisioner: csi.kegfs.io
reclaimPolicy: Delete
mountOptions: [cache-dir=$CACHE, cache-size=256M, writeback]
parameters:
  csi.storage.k8s.io/provisioner-secret-name: $SECRET
  csi.storage.k8s.io/provisioner-secret-namespace: $DRIVER_NS
  csi.storage.k8s.io/node-publish-secret-name: $SECRET
  csi.storage.k8s.io/node-publish-secret-namespace: $DRIVER_NS
EOF2
pvc wb 1Gi kegfs-e2e-wb
app_pod p wb 'dd if=/dev/urandom of=/data/f bs=1M count=8 2>/dev/null; sync; sleep 100000'
wait_bound wb
wait_ready p
until_true 60 in_pod p 'test "$(wc -c < /data/f)" = 8388608' || fail "the pod did not write 8 MiB"
vol=$(volume_of_pv "$(pv_of wb)")
np=$(mounter_pod)
mc=$(mounter_container)
cmd=$(kubectl -n "$DRIVER_NS" exec "$np" -c "$mc" -- sh -c \
  'for p in /proc/[0-9]*; do tr "\0" " " < $p/cmdline 2>/dev/null; echo; done' | grep ' mount ' | grep "$vol\|$CACHE" | head -1)
say "mounter: $(echo "$cmd" | sed 's/--config [^ ]*/--config .../')"
echo "$cmd" | grep -q "cache-dir=$CACHE" || fail "cache-dir=$CACHE not on the mounter's command line"
echo "$cmd" | grep -q 'writeback' || fail "writeback not on the mounter's command line"
echo "$cmd" | grep -q 'cache-size=256M' || fail "cache-size=256M not on the mounter's command line"
mi=$(kubectl -n "$DRIVER_NS" exec "$np" -c "$mc" -- sh -c "grep ' $CACHE ' /proc/self/mountinfo" || true)
[ -n "$mi" ] || fail "$CACHE is not a mount in $np (it would be the container's writable layer)"
used=$(kubectl -n "$DRIVER_NS" exec "$np" -c "$mc" -- sh -c "du -sk $CACHE | cut -f1")
say "cache dir $CACHE: a host mount, ${used} KiB used"
[ "$used" -gt 0 ] || fail "nothing in $CACHE"
if [ -n "${KEG_E2E_CACHE_HOST_DIR:-}" ]; then
  hu=$(du -sk "$KEG_E2E_CACHE_HOST_DIR" | cut -f1)
  say "on the node: $KEG_E2E_CACHE_HOST_DIR ${hu} KiB"
  [ "$hu" -gt 0 ] || fail "the node's $KEG_E2E_CACHE_HOST_DIR is empty"
fi
if [ -n "${KEG_E2E_MOUNTER_MEMORY_MAX:-}" ]; then
  # the holder runs with --memory-max: each mounter in its own memory cgroup
  for sp in $(supervisors "$(pv_of wb)"); do
    lim=$(kubectl -n "$DRIVER_NS" exec "$np" -c "$mc" -- sh -c '
      cg=$(sed -n "s/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}://p; s/^0:://p" /proc/'"$sp"'/cgroup | head -1)
      n=${cg##*/}
      case $n in mnt-*) ;; *) echo "not in a mnt- cgroup: $cg"; exit ;; esac
      for f in /sys/fs/cgroup/memory/$n/memory.limit_in_bytes /sys/fs/cgroup/$n/memory.max; do
        [ -f "$f" ] && { echo "$n $(cat "$f")"; exit; }
      done
      echo "no limit file for $n"')
    say "mounter $sp: memory cgroup $lim"
    [ "${lim#* }" = "$KEG_E2E_MOUNTER_MEMORY_MAX" ] ||
      fail "mounter $sp: want a cgroup limit of $KEG_E2E_MOUNTER_MEMORY_MAX bytes, got: $lim"
  done
fi
say "PASS: mountOptions reach the mounter; cache and staging on the host path"
