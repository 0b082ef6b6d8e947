#!/usr/bin/env bash
# 02 online expansion: patch the claim from 1Gi to 2Gi; the running pod's df
# shows the new size without a restart.
. "$(dirname "$0")/lib.sh"
scenario_start
pvc grow 1Gi
app_pod p grow 'sleep 100000'
wait_bound grow
wait_ready p
[ "$(df_kb p)" = 1048576 ] || fail "df shows $(df_kb p) KiB before expansion"
restarts0=$(kubectl -n "$NS" get pod p -o jsonpath='{.status.containerStatuses[0].restartCount}')
start=$(date +%s)
kubectl -n "$NS" patch pvc grow -p '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}' >/dev/null
# (functions, so that every poll reads the value again)
capacity_is() { [ "$(kubectl -n "$NS" get pvc grow -o jsonpath='{.status.capacity.storage}')" = "$1" ]; }
df_is() { [ "$(df_kb p)" = "$1" ]; }
until_true 120 capacity_is 2Gi ||
  { kubectl -n "$NS" describe pvc grow; fail "claim capacity did not become 2Gi"; }
t_cap=$(( $(date +%s) - start ))
until_true 60 df_is 2097152 || fail "df in the pod shows $(df_kb p) KiB, expected 2097152"
restarts1=$(kubectl -n "$NS" get pod p -o jsonpath='{.status.containerStatuses[0].restartCount}')
[ "$restarts0" = "$restarts1" ] || fail "the pod restarted ($restarts0 -> $restarts1)"
say "PASS: claim 2Gi after ${t_cap} s, df shows 2Gi $(( $(date +%s) - start )) s after the patch, no restart"
