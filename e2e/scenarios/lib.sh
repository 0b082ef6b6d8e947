# lib.sh -- helpers of the Kubernetes scenarios (sourced by e2e/scenarios/NN-*.sh).
# The same scenario files run on kind (e2e/kind/run.sh) and on the local
# single-node cluster (e2e/k8s/run.sh); the runner describes the install with:
#
#   KEG_E2E_DRIVER_NS     namespace of the driver and its Secret (kegfs-system)
#   KEG_E2E_SC            the installed StorageClass (kegfs)
#   KEG_E2E_SECRET        the driver's Secret (kegfs-secret)
#   KEG_E2E_APP_IMAGE     image of the app pods, with sh, df, cat, sleep and perl-base
#                         (debian:12-slim; 05 and 10 run app.pl)
#   KEG_E2E_STORE         file | s3: the store behind the Secret
#   KEG_E2E_KEYS_CMD      shell command printing the number of metadata keys of
#                         volume $1 (unset: key counts are not checked)
#   KEG_E2E_OBJECTS_CMD   same for the objects of volume $1
#   KEG_E2E_CACHE_DIR     cache directory of the mounters, as the node plugin sees it
#   KEG_E2E_CACHE_HOST_DIR  the same directory on the node (checked when set)
#   KEG_E2E_NODE_IMAGE_2  a second driver image whose kegfs differs (rolling update, 05)
#   KEG_E2E_KILL_CONTAINER_CMD  command sending SIGKILL to container id $1 on the node (05)
#   KEG_E2E_FIGURES       file that gets the stall figures of 05 and 10
#   KEG_E2E_MAX_STALL_MS  longest stall allowed in events 1-3 (2000)
#   KEG_E2E_SECRET_VALUES file with one secret string per line that no log may show
#   KEG_E2E_HOST_LOGS     directories of logs on the node to search as well (09)
#   KEG_E2E_METRICS_URL   the node plugin's /metrics as the runner reaches it (11;
#                         unset: skipped)
#
# Each scenario uses its own namespace kegfs-e2e-NN, deleted on exit.
set -euo pipefail
DRIVER_NS=${KEG_E2E_DRIVER_NS:-kegfs-system}
SC=${KEG_E2E_SC:-kegfs}
SECRET=${KEG_E2E_SECRET:-kegfs-secret}
APP_IMAGE=${KEG_E2E_APP_IMAGE:-debian:12-slim}
STORE=${KEG_E2E_STORE:-file}
NS=kegfs-e2e-$(basename "$0" .sh | cut -d- -f1)

say() { echo "[$(date -u +%H:%M:%S)] $*"; }
fail() { say "FAIL: $*"; exit 1; }
skip() { say "SKIP: $*"; exit 77; }

scenario_cleanup() {
  # pods and claims first: the namespace controller then finds nothing left
  # and removes the namespace at once (else it backs off for about a minute)
  kubectl -n "$NS" delete pods --all --wait=true --timeout=120s >/dev/null 2>&1 || true
  kubectl -n "$NS" delete pvc --all --wait=true --timeout=120s >/dev/null 2>&1 || true
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

# --- the restart and upgrade scenarios (05, 10): app pods running app.pl ---
# outlive_pods CLAIM LISTER_PROPAGATION: pod `app` appends to /data/app.log
# (mountPropagation HostToContainer), pod `lister` lists and reads /data (with
# the given propagation); both print a tick line a second (app.pl).  Waits
# until both have had a good iteration.
outlive_pods() {
  kubectl -n "$NS" create configmap app-pl --from-file=app.pl="$(dirname "$0")/app.pl" \
    --dry-run=client -o yaml | kubectl -n "$NS" apply -f - >/dev/null
  local p mode arg prop
  for p in app lister; do
    if [ $p = app ]; then mode=append; arg=/data/app.log; prop=HostToContainer
    else mode=list; arg=/data; prop=$2; fi
    kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $p}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: app
      image: $APP_IMAGE
      imagePullPolicy: IfNotPresent
      command: [perl, /app/app.pl, $mode, $arg]
      volumeMounts:
        - {name: v, mountPath: /data, mountPropagation: $prop}
        - {name: app, mountPath: /app}
  volumes:
    - {name: v, persistentVolumeClaim: {claimName: $1}}
    - {name: app, configMap: {name: app-pl}}
EOF
  done
  wait_bound "$1"
  wait_ready app lister
  until_true 60 sh -c "kubectl -n $NS logs app | grep -q ' ok=[1-9]'" || fail "the app made no good iteration"
  until_true 60 sh -c "kubectl -n $NS logs lister | grep -q ' ok=[1-9]'" || fail "the lister made no good iteration"
}

now_s() { date +%s.%N; }

# window POD T0 T1: "gap_ms=G errors=E ticks=N" of app.pl in POD between T0 and
# T1 (G: the longest time between two good iterations, 50 ms when nothing
# happens; E: failed iterations)
window() {
  kubectl -n "$NS" logs "$1" | awk -v a="$2" -v b="$3" '
    $1 == "tick" && $2 >= a && $2 <= b { split($5, g, "="); if (g[2] + 0 > m) m = g[2] + 0; n++ }
    $1 == "error" && $2 >= a && $2 <= b { e++ }
    END { printf "gap_ms=%d errors=%d ticks=%d\n", m, e, n }'
}

# errors_in POD T0 T1: the error lines of POD in the window
errors_in() {
  kubectl -n "$NS" logs "$1" | awk -v a="$2" -v b="$3" '$1 == "error" && $2 >= a && $2 <= b' | head -5
}

# report_event NAME T0 T1: print the figures of app and lister for an event and
# append "NAME app_gap_ms app_errors lister_gap_ms lister_errors" to
# $KEG_E2E_FIGURES when set; sets EV_APP_GAP EV_APP_ERR EV_LS_GAP EV_LS_ERR
report_event() {
  local a l
  a=$(window app "$2" "$3"); l=$(window lister "$2" "$3")
  EV_APP_GAP=$(echo "$a" | sed 's/.*gap_ms=\([0-9]*\).*/\1/'); EV_APP_ERR=$(echo "$a" | sed 's/.*errors=\([0-9]*\).*/\1/')
  EV_LS_GAP=$(echo "$l" | sed 's/.*gap_ms=\([0-9]*\).*/\1/'); EV_LS_ERR=$(echo "$l" | sed 's/.*errors=\([0-9]*\).*/\1/')
  say "FIGURES $1: app longest stall ${EV_APP_GAP} ms, errors ${EV_APP_ERR}; lister longest stall ${EV_LS_GAP} ms, errors ${EV_LS_ERR} ($(awk -v a="$2" -v b="$3" 'BEGIN { printf "%.1f", b - a }') s window)"
  errors_in app "$2" "$3" | sed 's/^/  app: /'
  errors_in lister "$2" "$3" | sed 's/^/  lister: /'
  [ -z "${KEG_E2E_FIGURES:-}" ] ||
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "${KEG_E2E_LABEL:-}" "$1" "$EV_APP_GAP" "$EV_APP_ERR" "$EV_LS_GAP" "$EV_LS_ERR" >> "$KEG_E2E_FIGURES"
}

# mounter_procs PV: "pid ppid exe cmdline" of every kegfs mount process
# (supervisors and workers) serving a target of PV, as the container running
# the mounters sees them; supervisors PV: the supervisors' pids (a worker's
# parent is its supervisor), sorted, on one line
mounter_procs() {
  kubectl -n "$DRIVER_NS" exec "$(mounter_pod)" -c "$(mounter_container)" -- sh -c '
    for p in /proc/[0-9]*; do
      c=$(tr "\0" " " 2>/dev/null < $p/cmdline) || continue
      set -- $c
      [ "${2:-}" = mount ] || continue
      case $c in *"'"$1"'"*) ;; *) continue ;; esac
      pp=$(sed -n "s/^PPid:[[:space:]]*//p" $p/status)
      printf "%s %s %s %s\n" "${p#/proc/}" "$pp" "$(readlink $p/exe)" "$c"
    done'
}
supervisors() {
  mounter_procs "$1" | awk '{ pid[$1] = 1; pp[$1] = $2 } END { for (p in pid) if (!(pp[p] in pid)) print p }' |
    sort -n | tr '\n' ' '
}
