#!/usr/bin/env bash
# 05 node plugin restart and DaemonSet rolling update while app pods keep a
# file open and append to it every 0.2 s.  Pod `htc` mounts the claim with
# mountPropagation: HostToContainer, pod `none` without.  The scenario reports
# what each app saw (failed appends on the open descriptor, whether /data still
# answers, whether a newly opened file can be written and read) and passes when
# the HostToContainer pod gets a working /data back after both events.
. "$(dirname "$0")/lib.sh"
scenario_start
pvc live 1Gi
for p in htc none; do
  prop=None; [ $p = htc ] && prop=HostToContainer
  kubectl -n "$NS" apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: Pod
metadata: {name: $p}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: app
      image: $APP_IMAGE
      imagePullPolicy: IfNotPresent
      command:
        - sh
        - -c
        - |
          i=0; bad=0
          exec 3>>/data/$p.log
          while :; do
            if ! echo "\$i" >&3; then bad=\$((bad+1)); echo "append \$i failed (\$bad so far)"; fi
            i=\$((i+1)); sleep 0.2
          done
      volumeMounts: [{name: v, mountPath: /data, mountPropagation: $prop}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: live}}]
EOF2
done
wait_bound live
wait_ready htc none
sleep 3

# observe EVENT: what each pod sees now
observe() {
  local p fails ls rw
  for p in htc none; do
    fails=$(kubectl -n "$NS" logs "$p" 2>/dev/null | grep -c 'failed' || true)
    if in_pod "$p" 'ls /data >/dev/null' 2>/dev/null; then ls=ok; else ls=error; fi
    if in_pod "$p" "echo $1 > /data/$p-$1.txt && cat /data/$p-$1.txt" 2>/dev/null | grep -qx "$1"; then
      rw=ok; else rw=error; fi
    say "after $1: pod $p: failed appends on the open fd so far=$fails, ls /data=$ls, new file write+read=$rw"
    eval "RESULT_${p}_$1=$rw"
  done
}

old=$(node_pod)
t0=$(date +%s)
kubectl -n "$DRIVER_NS" delete "$old" --wait=true >/dev/null
new_ready() {
  local p; p=$(node_pod)
  [ -n "$p" ] && [ "$p" != "$old" ] &&
    kubectl -n "$DRIVER_NS" wait --for=condition=Ready "$p" --timeout=5s >/dev/null 2>&1
}
until_true 180 new_ready || fail "no new node plugin pod became Ready"
say "node plugin restarted in $(( $(date +%s) - t0 )) s"
until_true 30 in_pod htc 'ls /data >/dev/null' || true
observe restart

if [ -n "${KEG_E2E_NODE_IMAGE_2:-}" ]; then
  ds=ds/kegfs-csi-node
  t0=$(date +%s)
  kubectl -n "$DRIVER_NS" set image "$ds" "kegfs-csi=$KEG_E2E_NODE_IMAGE_2" >/dev/null
  kubectl -n "$DRIVER_NS" rollout status "$ds" --timeout=180s >/dev/null
  say "rolling update to $KEG_E2E_NODE_IMAGE_2 done in $(( $(date +%s) - t0 )) s"
  until_true 30 in_pod htc 'ls /data >/dev/null' || true
  observe update
else
  say "no KEG_E2E_NODE_IMAGE_2: rolling update not exercised"
  RESULT_htc_update=ok
fi
kubectl -n "$NS" logs htc | tail -3 | sed 's/^/  htc: /'
kubectl -n "$NS" logs none | tail -3 | sed 's/^/  none: /'
[ "$RESULT_htc_restart" = ok ] || fail "HostToContainer pod has no working /data after the plugin restart"
[ "$RESULT_htc_update" = ok ] || fail "HostToContainer pod has no working /data after the rolling update"
say "PASS: the HostToContainer pod's mount recovers (see the lines above for what the apps saw)"
