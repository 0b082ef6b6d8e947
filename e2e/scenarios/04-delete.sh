#!/usr/bin/env bash
# 04 deletion: pods and claim deleted -> the PV goes and no metadata key and no
# object of the volume remains (reclaim: delete); with the StorageClass
# parameter reclaim: retain the PV goes but the data stays.
. "$(dirname "$0")/lib.sh"
EXTRA_SCS=kegfs-e2e-keep
scenario_start
kubectl apply -f - >/dev/null <<EOF2
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: kegfs-e2e-keep}
provisioner: csi.kegfs.io
reclaimPolicy: Delete
parameters:
  reclaim: retain
  csi.storage.k8s.io/provisioner-secret-name: $SECRET
  csi.storage.k8s.io/provisioner-secret-namespace: $DRIVER_NS
  csi.storage.k8s.io/node-publish-secret-name: $SECRET
  csi.storage.k8s.io/node-publish-secret-namespace: $DRIVER_NS
EOF2
pvc gone 1Gi
pvc kept 1Gi kegfs-e2e-keep
app_pod p gone 'dd if=/dev/urandom of=/data/f bs=64k count=32 2>/dev/null; sync; sleep 100000'
app_pod q kept 'dd if=/dev/urandom of=/data/f bs=64k count=32 2>/dev/null; sync; sleep 100000'
wait_bound gone; wait_bound kept
wait_ready p q
until_true 60 in_pod p 'test "$(wc -c < /data/f)" = 2097152' || fail "p did not write"
until_true 60 in_pod q 'test "$(wc -c < /data/f)" = 2097152' || fail "q did not write"
pv_gone=$(pv_of gone); vol_gone=$(volume_of_pv "$pv_gone")
pv_kept=$(pv_of kept); vol_kept=$(volume_of_pv "$pv_kept")
kubectl -n "$NS" delete pod p q --wait=true >/dev/null
say "before delete: $vol_gone keys=$(key_count "$vol_gone") objects=$(object_count "$vol_gone")"
kubectl -n "$NS" delete pvc gone kept --wait=true >/dev/null
until_true 120 sh -c "! kubectl get pv $pv_gone" || fail "PV $pv_gone was not deleted"
until_true 120 sh -c "! kubectl get pv $pv_kept" || fail "PV $pv_kept was not deleted"
k=$(key_count "$vol_gone"); o=$(object_count "$vol_gone")
say "reclaim delete: $vol_gone keys=${k:-unchecked} objects=${o:-unchecked}"
[ -z "$k" ] || [ "$k" = 0 ] || fail "$k metadata keys of $vol_gone remain"
[ -z "$o" ] || [ "$o" = 0 ] || fail "$o objects of $vol_gone remain"
k=$(key_count "$vol_kept"); o=$(object_count "$vol_kept")
say "reclaim retain: $vol_kept keys=${k:-unchecked} objects=${o:-unchecked}"
[ -z "$k" ] || [ "$k" -gt 0 ] || fail "the retained volume $vol_kept has no metadata keys"
[ -z "$o" ] || [ "$o" -gt 0 ] || fail "the retained volume $vol_kept has no objects"
say "PASS: PVs deleted; reclaim delete left nothing, reclaim retain kept the data"
