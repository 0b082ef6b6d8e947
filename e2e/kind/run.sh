#!/usr/bin/env bash
# run.sh -- kind-based e2e for Docker-capable CI (cannot run on machines without a
# container engine).  Builds the image, creates a one-node kind cluster, loads
# the image, installs the driver (kustomize overlay `ci`, or the Helm chart with
# KEG_E2E_INSTALL=helm), runs the shared scenarios (e2e/scenarios/run.sh, the
# ones kind can run: file store, in-cluster Redis; KEG_E2E_ONLY=REGEX selects),
# and dumps `kubectl describe` and logs on failure.  KEG_E2E_KEEP=1 keeps the
# cluster.
#   e2e/kind/run.sh
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER=${KEG_E2E_CLUSTER:-kegfs-e2e}
IMAGE=kegfs-csi:ci
NS=kegfs-system
export KUBECONFIG=${KUBECONFIG:-$(mktemp /tmp/kegfs-kind-kubeconfig.XXXXXX)}

for t in docker kind kubectl; do
  command -v "$t" >/dev/null || { echo "SKIP: $t not installed"; exit 77; }
done
docker info >/dev/null 2>&1 || { echo "SKIP: no usable Docker daemon"; exit 77; }

dump() {
  echo "=== kubectl get all -A"; kubectl get all -A -o wide || true
  echo "=== describe ($NS)"; kubectl -n "$NS" describe pods || true
  for p in $(kubectl -n "$NS" get pods -o name 2>/dev/null); do
    for c in $(kubectl -n "$NS" get "$p" -o jsonpath='{.spec.containers[*].name}'); do
      echo "=== logs $p -c $c"; kubectl -n "$NS" logs "$p" -c "$c" --tail=200 || true
    done
  done
  echo "=== describe (kegfs-e2e)"; kubectl -n kegfs-e2e describe pvc,pods || true
  echo "=== events"; kubectl get events -A --sort-by=.lastTimestamp | tail -50 || true
}
cleanup() {
  rc=$?
  [ $rc -ne 0 ] && dump
  [ "${KEG_E2E_KEEP:-0}" = 1 ] || kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  exit $rc
}
trap cleanup EXIT

echo "--- build $IMAGE"
docker build -t "$IMAGE" "$REPO"
echo "--- cluster $CLUSTER"
kind get clusters | grep -qx "$CLUSTER" ||
  kind create cluster --name "$CLUSTER" --config "$REPO/e2e/kind/kind-config.yaml" --wait 120s
kind load docker-image "$IMAGE" --name "$CLUSTER"

echo "--- install"
if [ "${KEG_E2E_INSTALL:-kustomize}" = helm ]; then
  command -v helm >/dev/null || { echo "helm not installed"; exit 1; }
  # The same install as the ci overlay: e2e/kind/values-ci.yaml (file store on
  # a hostPath mounted by the controller and the node plugin) and its Redis.
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
  kubectl apply -n "$NS" -f "$REPO/manifests/overlays/ci/redis.yaml"
  helm upgrade --install kegfs-csi "$REPO/charts/kegfs-csi" -n "$NS" \
    -f "$REPO/e2e/kind/values-ci.yaml"
else
  kubectl apply -k "$REPO/manifests/overlays/ci"
fi
# Both installs name the workloads kegfs-csi-controller / kegfs-csi-node.
kubectl -n "$NS" rollout status deploy/kegfs-redis --timeout=180s
kubectl -n "$NS" rollout status deploy/kegfs-csi-controller --timeout=180s
kubectl -n "$NS" rollout status ds/kegfs-csi-node --timeout=180s

echo "--- scenarios"
# The scenario files are shared with the local cluster (e2e/k8s/run.sh).
# Backend inspection: keys in the in-cluster Redis, objects in the node's
# file store.
node_ctr=$CLUSTER-control-plane
# app pods: debian:12-slim (perl-base runs e2e/scenarios/app.pl)
docker pull -q debian:12-slim >/dev/null
kind load docker-image debian:12-slim --name "$CLUSTER"
export KEG_E2E_STORE=file KEG_E2E_APP_IMAGE=debian:12-slim KEG_E2E_CACHE_DIR=/var/cache/kegfs
export KEG_E2E_KEYS_CMD="kubectl -n $NS exec deploy/kegfs-redis -- redis-cli -n 1 --scan --pattern \"*{\$1}*\" | wc -l"
export KEG_E2E_OBJECTS_CMD="docker exec $node_ctr sh -c \"find /var/lib/kegfs-data/\$1 -type f 2>/dev/null | wc -l\""
export KEG_E2E_HOST_LOGS=""
# the new image of the rolling update (05): another kegfs (trailing bytes), so
# the new node plugin upgrades the mounters in place
printf 'FROM %s\nRUN printf "\\n# kegfs e2e second image\\n" >> /usr/local/bin/kegfs && /usr/local/bin/kegfs --version\n' \
  "$IMAGE" | docker build -q -t kegfs-csi:ci2 - >/dev/null
kind load docker-image kegfs-csi:ci2 --name "$CLUSTER"
export KEG_E2E_NODE_IMAGE_2=kegfs-csi:ci2
export KEG_E2E_KILL_CONTAINER_CMD="docker exec $node_ctr ctr -n k8s.io task kill -s SIGKILL \"\$1\""
"$REPO/e2e/scenarios/run.sh" "${KEG_E2E_ONLY:-.}"
