#!/usr/bin/env bash
# pvc-pod.sh -- PVC (RWX, kegfs StorageClass) -> two pods write/read the same
# file -> expand the PVC -> cleanup; the PV must be deleted by DeleteVolume.
# Needs a cluster with the driver installed (e2e/kind/run.sh).
set -euo pipefail
NS=kegfs-e2e
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
cleanup() { kubectl delete namespace "$NS" --wait=true --timeout=180s >/dev/null 2>&1 || true; }
trap cleanup EXIT

kubectl -n "$NS" apply -f - <<'YAML'
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: shared}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: kegfs
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  containers:
    - name: c
      image: busybox:1.36
      command: [sh, -c, 'echo hello-from-writer > /data/hello.txt && sync && sleep 3600']
      volumeMounts: [{name: v, mountPath: /data}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: shared}}]
---
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  containers:
    - name: c
      image: busybox:1.36
      command: [sh, -c, 'until [ -f /data/hello.txt ]; do sleep 1; done; cat /data/hello.txt; sleep 3600']
      volumeMounts: [{name: v, mountPath: /data}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: shared}}]
YAML

kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Bound pvc/shared --timeout=120s
kubectl -n "$NS" wait --for=condition=Ready pod/writer pod/reader --timeout=180s
for _ in $(seq 1 60); do
  kubectl -n "$NS" logs reader | grep -q hello-from-writer && break
  sleep 2
done
kubectl -n "$NS" logs reader | grep -q hello-from-writer
kubectl -n "$NS" exec writer -- sh -c 'df -P /data | tail -1'

# expansion: 1Gi -> 2Gi (ControllerExpandVolume, no node step)
kubectl -n "$NS" patch pvc shared -p '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}'
for _ in $(seq 1 60); do
  cap=$(kubectl -n "$NS" get pvc shared -o jsonpath='{.status.capacity.storage}')
  [ "$cap" = 2Gi ] && break
  sleep 2
done
[ "$cap" = 2Gi ] || { echo "PVC capacity is $cap, expected 2Gi"; exit 1; }

pv=$(kubectl -n "$NS" get pvc shared -o jsonpath='{.spec.volumeName}')
kubectl -n "$NS" delete pod writer reader --wait=true --timeout=120s
kubectl -n "$NS" delete pvc shared --wait=true --timeout=120s
for _ in $(seq 1 60); do
  kubectl get pv "$pv" >/dev/null 2>&1 || exit 0
  sleep 2
done
echo "PV $pv was not deleted"; exit 1
