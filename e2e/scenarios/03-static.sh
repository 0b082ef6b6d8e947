#!/usr/bin/env bash
# 03 static provisioning: a volume made by a retained dynamic claim is mounted
# again through a PV written by hand (volumeHandle + volumeAttributes) and
# shows its data.
. "$(dirname "$0")/lib.sh"
EXTRA_SCS=kegfs-e2e-retain
scenario_start
kubectl apply -f - >/dev/null <<EOF2
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: kegfs-e2e-retain}
provisioner: csi.kegfs.io
reclaimPolicy: Retain
parameters:
  csi.storage.k8s.io/provisioner-secret-name: $SECRET
  csi.storage.k8s.io/provisioner-secret-namespace: $DRIVER_NS
  csi.storage.k8s.io/node-publish-secret-name: $SECRET
  csi.storage.k8s.io/node-publish-secret-namespace: $DRIVER_NS
EOF2
pvc first 1Gi kegfs-e2e-retain
app_pod w first 'echo static-data > /data/keep.txt && sync && sleep 100000'
wait_bound first
wait_ready w
until_true 30 in_pod w 'test -s /data/keep.txt' || fail "writer did not write"
pv=$(pv_of first)
vol=$(volume_of_pv "$pv")
attrs=$(kubectl get pv "$pv" -o jsonpath='{.spec.csi.volumeAttributes}')
kubectl -n "$NS" delete pod w --wait=true >/dev/null
kubectl -n "$NS" delete pvc first --wait=true >/dev/null
kubectl delete pv "$pv" --wait=true >/dev/null     # Retain: the volume stays
EXTRA_PVS="kegfs-e2e-static-$vol"
metaurl=$(echo "$attrs" | sed -n 's/.*"metaurl":"\([^"]*\)".*/\1/p')
say "volume $vol, metaurl ${metaurl%%\?*}?..."
kubectl apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: PersistentVolume
metadata: {name: kegfs-e2e-static-$vol}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: $NS, name: again}
  csi:
    driver: csi.kegfs.io
    volumeHandle: $vol
    volumeAttributes: {metaurl: "$metaurl"}
    nodePublishSecretRef: {name: $SECRET, namespace: $DRIVER_NS}
EOF2
kubectl -n "$NS" apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: again}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: kegfs-e2e-static-$vol
  resources: {requests: {storage: 1Gi}}
EOF2
app_pod r again 'sleep 100000'
wait_bound again
wait_ready r
[ "$(in_pod r 'cat /data/keep.txt')" = static-data ] || fail "static PV shows '$(in_pod r 'cat /data/keep.txt' 2>&1)'"
say "PASS: the static PV mounts volume $vol with its data"
