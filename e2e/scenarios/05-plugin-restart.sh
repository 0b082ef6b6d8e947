#!/usr/bin/env bash
# 05 the node plugin restarts and is rolled to a new image under running apps
# (events 1 and 2 of docs/csi.md "Mounts that outlive the node plugin"):
#   1a  kubectl delete pod of the node plugin (a new pod starts)
#   1b  SIGKILL of the plugin's process (kubelet restarts the container); needs
#       KEG_E2E_KILL_CONTAINER_CMD, a command that sends SIGKILL to the main
#       process of the container id $1 on the node (skipped without it)
#   2   the node DaemonSet rolled to KEG_E2E_NODE_IMAGE_2 (its kegfs differs,
#       so the new plugin upgrades every mounter in place)
# Pod `app` (app.pl append: append + fsync + read back every 50 ms, descriptor
# kept open) and pod `lister` (list and read every 50 ms, mountPropagation
# None: no propagation is needed for these events).  First 10 s without an
# event (0-baseline: the stall the node's load alone causes).  For each event the longest
# stall of each and their errors are printed (FIGURES lines); the scenario fails
# on any error, a stall of KEG_E2E_MAX_STALL_MS (2000) or more, or a mounter
# that was restarted (its supervisor pid changed).
. "$(dirname "$0")/lib.sh"
MAX_STALL=${KEG_E2E_MAX_STALL_MS:-2000}
scenario_start
pvc live 1Gi
outlive_pods live None
pv=$(pv_of live)
sleep 3
sups() { supervisors "$pv"; }
exes() { mounter_procs "$pv" | awk '{print $3}' | sort -u | tr '\n' ' '; }
pids0=$(sups)
say "mounter supervisors of $pv: pids $pids0; binaries $(exes)"
[ -n "$pids0" ] || fail "no mounter process of $pv found in $(mounter_pod)"
bad=0
judge() {   # judge EVENT: after report_event
  if [ "$EV_APP_ERR" != 0 ] || [ "$EV_LS_ERR" != 0 ]; then say "$1: the apps saw errors"; bad=1; fi
  if [ "$EV_APP_GAP" -ge "$MAX_STALL" ] || [ "$EV_LS_GAP" -ge "$MAX_STALL" ]; then
    say "$1: a stall of ${MAX_STALL} ms or more"; bad=1
  fi
  local now; now=$(sups)
  if [ "$now" != "$pids0" ]; then say "$1: mounter pids changed: $pids0-> $now"; bad=1; fi
}
node_ready() {   # node_ready OLD_POD OLD_RESTARTS: a plugin pod other than that one (or restarted) is Ready
  local p r; p=$(node_pod)
  [ -n "$p" ] || return 1
  r=$(kubectl -n "$DRIVER_NS" get "$p" -o jsonpath='{.status.containerStatuses[?(@.name=="kegfs-csi")].restartCount}')
  { [ "$p" != "$1" ] || [ "$r" != "$2" ]; } &&
    kubectl -n "$DRIVER_NS" wait --for=condition=Ready "$p" --timeout=5s >/dev/null 2>&1
}

# 0: nothing happens for 10 s: the stall the apps see without any event
# (the cost of an iteration, scheduling on the node)
t0=$(now_s)
sleep 10
report_event 0-baseline "$t0" "$(now_s)"

# 1a: the plugin pod deleted
old=$(node_pod)
t0=$(now_s)
kubectl -n "$DRIVER_NS" delete "$old" --wait=true >/dev/null
until_true 180 node_ready "$old" x || fail "no new node plugin pod became Ready"
say "1a: new plugin pod Ready $(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }') s after the delete"
sleep 3
report_event 1a-plugin-pod-deleted "$t0" "$(now_s)"
judge 1a

# 1b: kill -9 of the plugin process
if [ -n "${KEG_E2E_KILL_CONTAINER_CMD:-}" ]; then
  p=$(node_pod)
  cid=$(kubectl -n "$DRIVER_NS" get "$p" -o jsonpath='{.status.containerStatuses[?(@.name=="kegfs-csi")].containerID}')
  r0=$(kubectl -n "$DRIVER_NS" get "$p" -o jsonpath='{.status.containerStatuses[?(@.name=="kegfs-csi")].restartCount}')
  t0=$(now_s)
  bash -c "$KEG_E2E_KILL_CONTAINER_CMD" _ "${cid#*://}" || fail "cannot kill container $cid"
  until_true 180 node_ready "$p" "$r0" || fail "the killed plugin container did not come back Ready"
  say "1b: plugin container killed (SIGKILL), Ready again $(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }') s later"
  sleep 3
  report_event 1b-plugin-kill-9 "$t0" "$(now_s)"
  judge 1b
else
  say "1b: no KEG_E2E_KILL_CONTAINER_CMD: kill -9 of the plugin not exercised"
fi

# 2: rolling update to a new image
if [ -n "${KEG_E2E_NODE_IMAGE_2:-}" ]; then
  exe0=$(exes)
  t0=$(now_s)
  kubectl -n "$DRIVER_NS" set image ds/kegfs-csi-node "kegfs-csi=$KEG_E2E_NODE_IMAGE_2" >/dev/null
  kubectl -n "$DRIVER_NS" rollout status ds/kegfs-csi-node --timeout=180s >/dev/null ||
    fail "rolling update to $KEG_E2E_NODE_IMAGE_2 did not finish"
  say "2: rolled to $KEG_E2E_NODE_IMAGE_2 in $(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }') s"
  for _ in $(seq 30); do [ "$(exes)" != "$exe0" ] && break; sleep 1; done
  exe1=$(exes)
  say "2: mounter binaries before: $exe0; after: $exe1"
  sleep 3
  report_event 2-rolling-update "$t0" "$(now_s)"
  judge 2
  [ "$exe1" != "$exe0" ] || { say "2: the mounters were not upgraded to the new image's kegfs"; bad=1; }
else
  say "2: no KEG_E2E_NODE_IMAGE_2: rolling update not exercised"
fi
[ $bad = 0 ] || fail "see the lines above"
say "PASS: no error and no stall of ${MAX_STALL} ms in the apps across the plugin restarts and the rolling update"
