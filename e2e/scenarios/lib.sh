# lib.sh -- helpers of the Kubernetes scenarios (sourced by e2e/scenarios/NN-*.sh).
# The same scenario files run on kind (e2e/kind/run.sh) and on the local
# single-node cluster (e2e/k8s/run.sh); the runner describes the install with:
#
#   KEG_E2E_DRIVER_NS     namespace of the driver and its Secret (kegfs-system)
#   KEG_E2E_SC            the installed StorageClass (kegfs)
#   KEG_E2E_SECRET        the driver's Secret (kegfs-secret)
#   KEG_E2E_APP_IMAGE     image of the app pods, with sh, df, cat, sleep (busybox:1.36)
#   KEG_E2E_STORE         file | s3: the store behind the Secret
#   KEG_E2E_KEYS_CMD      shell command printing the number of metadata keys of
#                         volume $1 (unset: key counts are not checked)
#   KEG_E2E_OBJECTS_CMD   same for the objects of volume $1
#   KEG_E2E_CACHE_DIR     cache directory of the mounters, as the node plugin sees it
#   KEG_E2E_CACHE_HOST_DIR  the same directory on the node (checked when set)
#   KEG_E2E_NODE_IMAGE_2  a second tag of the driver image (rolling update, 05)
#   KEG_E2E_SECRET_VALUES file with one secret string per line that no log may show
#   KEG_E2E_HOST_LOGS     directories of logs on the node to search as well (09)
#
# Each scenario uses its own namespace kegfs-e2e-NN, deleted on exit.
set -euo pipefail
DRIVER_NS=${KEG_E2E_DRIVER_NS:-kegfs-system}
SC=${KEG_E2E_SC:-kegfs}
SECRET=${KEG_E2E_SECRET:-kegfs-secret}
APP_IMAGE=${KEG_E2E_APP_IMAGE:-busybox:1.36}
STORE=${KEG_E2E_STORE:-file}
NS=kegfs-e2e-$(basename "$0" .sh | cut -d- -f1)

say() { echo "[$(date -u +%H:%M:%S)] $*"; }
fail() { say "FAIL: $*"; exit 1; }
skip() { say "SKIP: $*"; exit 77; }

scenario_cleanup() {
  kubectl delete namespace "$NS" --wait=true --timeout=180s >/dev/null 2>&1 || true
  for sc in ${EXTRA_SCS:-}; do kubectl delete storageclass "$sc" --ignore-not-found >/dev/null 2>&1 || true; done
  for pv in ${EXTRA_PVS:-}; do kubectl delete pv "$pv" --ignore-not-found >/dev/null 2>&1 || true; done
}

scenario_start() {
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  trap scenario_cleanup EXIT
}

# pvc NAME SIZE [SC]: a ReadWriteMany claim
pvc() {
  kubectl -n "$NS" apply -f - <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $1}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ${3:-$SC}
  resources: {requests: {storage: $2}}
EOF
}

# app_pod NAME CLAIM CMD [PROPAGATION]: a pod with the claim at /data
app_pod() {
  kubectl -n "$NS" apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: app
      image: $APP_IMAGE
      imagePullPolicy: IfNotPresent
      command: [sh, -c, '$3']
      volumeMounts: [{name: v, mountPath: /data, mountPropagation: ${4:-None}}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: $2}}]
EOF
}

wait_bound() {   # wait_bound CLAIM [SECONDS]
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Bound "pvc/$1" --timeout="${2:-120}s" >/dev/null ||
    { kubectl -n "$NS" describe pvc "$1"; fail "claim $1 not Bound"; }
}

wait_ready() {   # wait_ready POD...
  kubectl -n "$NS" wait --for=condition=Ready "${@/#/pod/}" --timeout=180s >/dev/null ||
    { kubectl -n "$NS" describe pod "$@"; fail "pods $* not Ready"; }
}

in_pod() {   # in_pod POD CMD: run a shell command in the pod
  kubectl -n "$NS" exec "$1" -- sh -c "$2"
}

pv_of() { kubectl -n "$NS" get pvc "$1" -o jsonpath='{.spec.volumeName}'; }
volume_of_pv() { kubectl get pv "$1" -o jsonpath='{.spec.csi.volumeHandle}'; }

# df_bytes POD: the size of /data as df in the pod shows it, in 1K blocks
df_kb() { in_pod "$1" 'df -Pk /data | tail -1' | awk '{print $2}'; }

# key_count VOL / object_count VOL: "" when the runner cannot look
key_count() { [ -n "${KEG_E2E_KEYS_CMD:-}" ] && bash -c "$KEG_E2E_KEYS_CMD" _ "$1" || true; }
object_count() { [ -n "${KEG_E2E_OBJECTS_CMD:-}" ] && bash -c "$KEG_E2E_OBJECTS_CMD" _ "$1" || true; }

# until_true SECONDS CMD...: poll every second
until_true() {
  local secs=$1 i; shift
  for ((i = 0; i < secs; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  return 1
}

# pvc_event CLAIM: the messages of the claim's events
pvc_events() {
  kubectl -n "$NS" get events --field-selector "involvedObject.name=$1" \
    -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}'
}

# node_pod: the node plugin's pod
node_pod() {
  kubectl -n "$DRIVER_NS" get pods -l app.kubernetes.io/component=node -o name 2>/dev/null | head -1 |
    grep . || kubectl -n "$DRIVER_NS" get pods -l app=kegfs-csi-node -o name | head -1
}

# secret_value KEY: a key of the driver's Secret
secret_value() {
  kubectl -n "$DRIVER_NS" get secret "$SECRET" -o jsonpath="{.data.$1}" | base64 -d
}

# mounter_pod: the pod whose container runs the mounters: the mount holder's
# (the default) or, in process mode, the node plugin's; mounter_container: its
# container
mounter_pod() {
  local p
  p=$(kubectl -n "$DRIVER_NS" get pods -l app.kubernetes.io/component=mount-holder -o name 2>/dev/null | head -1)
  [ -n "$p" ] || p=$(kubectl -n "$DRIVER_NS" get pods -l app=kegfs-mount-holder -o name 2>/dev/null | head -1)
  if [ -n "$p" ]; then echo "$p"; else node_pod; fi
}
mounter_container() {
  case $(mounter_pod) in *mount-holder*) echo holder ;; *) echo kegfs-csi ;; esac
}
