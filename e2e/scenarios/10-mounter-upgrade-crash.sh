#!/usr/bin/env bash
# 10 a mounter upgraded in place, then a mounter crash, under running apps
# (events 3 and 4 of docs/csi.md "Mounts that outlive the node plugin"), with
# the mount holder (skipped in process mode):
#   3  `kegfs upgrade --binary NEW TARGET` of every mounter of the claim, run in
#      the mount holder's container (KEGFS_RUN_DIR=<holder dir>/run), NEW a
#      copy of the image's kegfs: the supervisor execs it, same pid, nothing is
#      unmounted
#   4  kill -9 of every process of every mounter of the claim (supervisor and
#      worker): the holder mounts again on top of the dead mount
# Pods `app` (app.pl append) and `lister` (app.pl list), both with
# mountPropagation HostToContainer.  Event 3 must show no error and no stall of
# KEG_E2E_MAX_STALL_MS (2000) or more.  Event 4: the app's descriptor fails
# (ENOTCONN, expected; app.pl reopens the file), no acknowledged record may be
# lost, and both pods must work again within 2 s (the longest time between two
# good iterations, KEG_E2E_MAX_CRASH_MS).
. "$(dirname "$0")/lib.sh"
MAX_STALL=${KEG_E2E_MAX_STALL_MS:-2000}
MAX_CRASH=${KEG_E2E_MAX_CRASH_MS:-2000}
case $(mounter_pod) in *mount-holder*) ;; *) skip "no mount holder (process mode)" ;; esac
scenario_start
pvc up 1Gi
outlive_pods up HostToContainer
pv=$(pv_of up)
sleep 3
hpod=$(mounter_pod)
hx() { kubectl -n "$DRIVER_NS" exec "$hpod" -c holder -- "$@"; }
hdir=$(kubectl -n "$DRIVER_NS" get "$hpod" -o jsonpath='{.spec.containers[0].args}' |
  tr ',"[]' '\n' | sed -n 's/^--state-dir=//p')
[ -n "$hdir" ] || fail "no --state-dir in the holder's arguments"
sups() { supervisors "$pv"; }
targets=$(mounter_procs "$pv" | awk '{print $NF}' | sort -u)
[ "$(echo "$targets" | wc -l)" -ge 2 ] || fail "expected the two pods' targets of $pv, got: $targets"
pids0=$(sups)
say "mounter supervisors of $pv: pids $pids0"
bad=0

# 3: in-place upgrade of every mounter of the claim
new=$hdir/e2e-kegfs-upgraded
hx sh -c "cp /usr/local/bin/kegfs $new.tmp && mv $new.tmp $new" || fail "cannot copy kegfs in the holder"
t0=$(now_s)
for t in $targets; do
  out=$(hx env KEGFS_RUN_DIR="$hdir/run" kegfs upgrade --binary "$new" "$t" 2>&1) ||
    { say "3: kegfs upgrade $t failed: $out"; bad=1; }
  say "3: $out"
done
sleep 3
report_event 3-mounter-upgrade "$t0" "$(now_s)"
if [ "$EV_APP_ERR" != 0 ] || [ "$EV_LS_ERR" != 0 ]; then say "3: the apps saw errors"; bad=1; fi
if [ "$EV_APP_GAP" -ge "$MAX_STALL" ] || [ "$EV_LS_GAP" -ge "$MAX_STALL" ]; then
  say "3: a stall of ${MAX_STALL} ms or more"; bad=1
fi
[ "$(sups)" = "$pids0" ] || { say "3: mounter pids changed: $pids0-> $(sups)"; bad=1; }
exes=$(mounter_procs "$pv" | awk '{print $3}' | sort -u | tr '\n' ' ')
say "3: mounters now run: $exes"
[ "$exes" = "$new " ] || { say "3: not every mounter runs $new"; bad=1; }

# 4: every process of every mounter of the claim killed at once
pids=$(mounter_procs "$pv" | awk '{print $1}' | tr '\n' ' ')
t0=$(now_s)
hx sh -c "kill -9 $pids"
up=""
for _ in $(seq 100); do
  now=$(sups)
  if [ -n "$now" ] && [ "$(echo $now | wc -w)" -ge "$(echo "$targets" | wc -l)" ] &&
     ! echo " $pids " | grep -q " $(echo $now | cut -d' ' -f1) "; then up=$(now_s); break; fi
  sleep 0.1
done
say "4: killed $pids; new mounters $(sups)$([ -n "$up" ] && awk -v a="$t0" -v b="$up" 'BEGIN { printf " seen %.1f s later", b - a }')"
sleep 5
report_event 4-mounter-crash "$t0" "$(now_s)"
if kubectl -n "$NS" logs app | awk -v a="$t0" '$1 == "error" && $2 >= a' | grep -q LOST; then
  say "4: acknowledged records lost"; bad=1
fi
if [ "$EV_APP_GAP" -ge "$MAX_CRASH" ] || [ "$EV_LS_GAP" -ge "$MAX_CRASH" ]; then
  say "4: a pod did not work again within ${MAX_CRASH} ms"; bad=1
fi
t1=$(now_s); sleep 2
w=$(window app "$t1" "$(now_s)")
case $w in *errors=0*) ;; *) say "4: the app still fails after the crash: $w"; bad=1 ;; esac
hx rm -f "$new" || true
[ $bad = 0 ] || fail "see the lines above"
say "PASS: in-place upgrade without error or stall; after a mounter crash both HostToContainer pods work again within ${MAX_CRASH} ms, nothing acknowledged lost"
