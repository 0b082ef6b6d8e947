#!/usr/bin/env bash
# run.sh -- kegfs-csi end to end on a real single-node Kubernetes cluster
# started on this host from binaries (e2e/k8s/cluster.sh), with both install
# modes (kubectl apply -k of a generated overlay, helm install of
# charts/kegfs-csi) against a real Redis and, separately, the file store and
# the Ceph S3 gateway (scripts/redis-server.sh, scripts/s3-server.sh).  Runs the
# scenarios shared with the kind e2e (e2e/scenarios/run.sh) and tears
# everything down.  `make e2e-k8s` runs it.
#
#   KEG_K8S_BIN=/path/to/bin e2e/k8s/run.sh [--install both|kustomize|helm]
#        [--store both|file|s3] [--only REGEX] [--results FILE] [--keep-logs DIR]
#
# --results FILE gets one line per step (label, step, PASS/FAIL/SKIP, seconds);
# FILE without .tsv + .figures.tsv the stall figures of scenarios 05 and 10.
#
# KEG_K8S_BIN holds kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, csi-provisioner, csi-resizer, csi-node-driver-registrar,
# livenessprobe, pause (static) and optionally kubectl and helm (else from
# PATH); docs/testing.md says how to build them on Debian 12.  Also needs root,
# etcd, containerd, runc, podman with the image localhost/debian:12-slim (the
# base of the Dockerfile and the app pods' image), openssl and /dev/fuse.
# Exit 77 with the list of what is missing.
#
# Images: KEG_K8S_IMAGE (default localhost/kegfs-csi:k8s-local) is built with
# `podman build` from this tree unless it exists (KEG_K8S_REBUILD=1 rebuilds);
# the sidecars and pause become FROM-scratch images; all are imported into the
# cluster's containerd.  Ports: KEG_K8S_PORT_BASE (16480) + 0..10 for the
# cluster, the health ports and (helm installs) the metrics of the node plugin
# (+7) and the controller (+10), KEG_K8S_REDIS_PORT (6487), KEG_K8S_S3_PORT
# (7487) and KEG_K8S_S3_MON_PORT (6787).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
. "$REPO/e2e/k8s/cluster.sh"

INSTALLS=both
STORES=both
ONLY=.
RESULTS=""
KEEP_LOGS=""
while [ $# -gt 0 ]; do
  case $1 in
    --install) INSTALLS=$2; shift ;;
    --store) STORES=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --results) RESULTS=$2; shift ;;
    --keep-logs) KEEP_LOGS=$2; shift ;;
    *) echo "usage: $0 [--install both|kustomize|helm] [--store both|file|s3] [--only REGEX]" \
            "[--results FILE] [--keep-logs DIR]" >&2; exit 2 ;;
  esac
  shift
done
[ "$INSTALLS" = both ] && INSTALLS="kustomize helm"
[ "$STORES" = both ] && STORES="file s3"

IMAGE=${KEG_K8S_IMAGE:-localhost/kegfs-csi:k8s-local}
IMAGE2=${IMAGE%:*}:k8s-local-2
APP_IMAGE=${KEG_K8S_APP_IMAGE:-localhost/debian:12-slim}
REDIS_PORT=${KEG_K8S_REDIS_PORT:-6487}
S3_PORT=${KEG_K8S_S3_PORT:-7487}
S3_MON_PORT=${KEG_K8S_S3_MON_PORT:-6787}
HEALTH_NODE=$((PORT_BASE + 8))
HEALTH_CTRL=$((PORT_BASE + 9))
# the helm installs enable metrics (scenario 11 scrapes the node plugin); both
# components are on the host network, so each gets its own port
METRICS_NODE=$((PORT_BASE + 7))
METRICS_CTRL=$((PORT_BASE + 10))
NS=kegfs-system
# the helm installs run the mount holder with --memory-max (scenario 07 checks
# each mounter's memory cgroup); the kustomize installs without
MOUNTER_MEMORY_MAX=1073741824

find_bin() {
  if [ -n "$K8S_BIN" ] && [ -x "$K8S_BIN/$1" ]; then echo "$K8S_BIN/$1"; else command -v "$1"; fi
}
KUBECTL=$(find_bin kubectl || true)
HELM=$(find_bin helm || true)

missing=$(k8s_missing)
[ -n "$KUBECTL" ] || missing="$missing kubectl"
command -v podman >/dev/null && ! podman image exists "$APP_IMAGE" && missing="$missing podman-image:$APP_IMAGE"
if [ -n "$missing" ]; then
  echo "SKIP: the local Kubernetes e2e needs: $missing" | tr -s ' '
  echo "      (docs/testing.md, section 'Kubernetes on this host', says how to get each)"
  exit 77
fi
if [ -z "$HELM" ] && [[ " $INSTALLS " == *" helm "* ]]; then
  echo "SKIP: helm not found in \$KEG_K8S_BIN or PATH: the helm install mode is not run"
  INSTALLS=${INSTALLS/helm/}
fi

K8S_DIR=$(mktemp -d /tmp/kegfs-k8s.XXXXXX)
chmod 700 "$K8S_DIR"
started_redis=0
started_s3=0
export KUBECONFIG=$K8S_DIR/admin.kubeconfig
# kubectl and helm of the scenarios: the ones found above
mkdir -p "$K8S_DIR/path"
ln -s "$KUBECTL" "$K8S_DIR/path/kubectl"
[ -z "$HELM" ] || ln -s "$HELM" "$K8S_DIR/path/helm"
export PATH=$K8S_DIR/path:$PATH

log() { echo "[$(date -u +%H:%M:%S)] e2e-k8s: $*" >&2; }

teardown() {
  local rc=$? down=0
  trap - EXIT
  if [ -n "$KEEP_LOGS" ]; then
    mkdir -p "$KEEP_LOGS"
    cp -r "$K8S_DIR/logs" "$KEEP_LOGS/" 2>/dev/null
    [ -d "$K8S_DIR/kegfs-state/logs" ] && cp -r "$K8S_DIR/kegfs-state/logs" "$KEEP_LOGS/mounters" 2>/dev/null
    [ -d "$K8S_DIR/kegfs-holder/logs" ] && cp -r "$K8S_DIR/kegfs-holder/logs" "$KEEP_LOGS/holder-mounters" 2>/dev/null
  fi
  k8s_down || down=1
  [ $started_s3 = 1 ] && KEG_S3_PORT=$S3_PORT KEG_S3_MON_PORT=$S3_MON_PORT \
    "$REPO/scripts/s3-server.sh" stop "$K8S_DIR/s3" >/dev/null 2>&1
  [ $started_redis = 1 ] && "$REPO/scripts/redis-server.sh" stop "$REDIS_PORT" "$K8S_DIR/redis" >/dev/null 2>&1
  if [ $down = 0 ]; then
    rm -rf "$K8S_DIR"
    log "teardown complete: no process, mount, cgroup or iptables rule left"
  else
    log "teardown left something behind (see LEFT lines); $K8S_DIR kept"
    [ $rc = 0 ] && rc=1
  fi
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

# --- images --------------------------------------------------------------
build_images() {
  local d=$K8S_DIR/images b
  mkdir -p "$d"
  if [ "${KEG_K8S_REBUILD:-0}" = 1 ] || ! podman image exists "$IMAGE"; then
    log "podman build $IMAGE (the repository's Dockerfile)"
    git -C "$REPO" archive HEAD | tar -x -C "$d" --one-top-level=ctx ||
      { log "git archive of $REPO failed"; return 1; }
    nice -n 10 podman build --network host --pull=never -t "$IMAGE" "$d/ctx" > "$d/build.log" 2>&1 ||
      { tail -30 "$d/build.log"; log "podman build failed"; return 1; }
    rm -rf "$d/ctx"
  fi
  for b in csi-provisioner csi-resizer csi-node-driver-registrar livenessprobe pause; do
    mkdir -p "$d/$b"
    cp "$K8S_BIN/$b" "$d/$b/$b"
    printf 'FROM scratch\nCOPY %s /%s\nENTRYPOINT ["/%s"]\n' "$b" "$b" "$b" > "$d/$b/Containerfile"
    podman build -q --network none --pull=never -t "localhost/$b:e2e" "$d/$b" >/dev/null ||
      { log "podman build of localhost/$b:e2e failed"; return 1; }
  done
  # the "new image" of the rolling update (scenario 05): its kegfs differs from
  # the first image's by trailing bytes (ignored when it runs), so the new node
  # plugin really upgrades every mounter in place to another binary
  printf 'FROM %s\nRUN printf "\\n# kegfs e2e second image\\n" >> /usr/local/bin/kegfs && /usr/local/bin/kegfs --version\n' \
    "$IMAGE" > "$d/Containerfile.2"
  podman build -q --network none --pull=never -t "$IMAGE2" -f "$d/Containerfile.2" "$d" >/dev/null ||
    { log "podman build of $IMAGE2 failed"; return 1; }
  podman tag localhost/pause:e2e "$PAUSE_IMAGE"
  for b in "$IMAGE" "$IMAGE2" "$APP_IMAGE" "$PAUSE_IMAGE" localhost/csi-provisioner:e2e \
           localhost/csi-resizer:e2e localhost/csi-node-driver-registrar:e2e localhost/livenessprobe:e2e; do
    podman save -q --format docker-archive -o "$d/img.tar" "$b" || { log "podman save $b failed"; return 1; }
    k8s_load_image "$d/img.tar" || { log "import of $b into containerd failed"; return 1; }
    rm -f "$d/img.tar"
  done
}

# --- backends ------------------------------------------------------------
start_backends() {
  "$REPO/scripts/redis-server.sh" start "$REDIS_PORT" "$K8S_DIR/redis" >/dev/null ||
    { log "redis-server on $REDIS_PORT did not start"; return 1; }
  started_redis=1
  # a password, so that scenario 09 has one to look for with either store; every
  # redis-cli here (key counts, stop) takes it from REDISCLI_AUTH, the server
  # gets it on stdin
  REDISCLI_AUTH=$(openssl rand -hex 16)
  printf 'CONFIG SET requirepass %s\n' "$REDISCLI_AUTH" | redis-cli -p "$REDIS_PORT" --no-auth-warning >/dev/null ||
    { log "cannot set the Redis password"; return 1; }
  export REDISCLI_AUTH
  if [[ " $STORES " == *" s3 "* ]]; then
    KEG_S3_PORT=$S3_PORT KEG_S3_MON_PORT=$S3_MON_PORT "$REPO/scripts/s3-server.sh" start "$K8S_DIR/s3" \
      > "$K8S_DIR/logs/s3-start.log" 2>&1 || { tail "$K8S_DIR/logs/s3-start.log"; log "S3 gateway did not start"; return 1; }
    started_s3=1
    eval "$(KEG_S3_PORT=$S3_PORT KEG_S3_MON_PORT=$S3_MON_PORT "$REPO/scripts/s3-server.sh" env "$K8S_DIR/s3")"
  fi
}

# secret_lines STORE: the Secret's keys as KEY=VALUE lines
secret_lines() {
  case $1 in
    file) printf 'metaurl=redis://:%s@127.0.0.1:%s/1\nstorage=file\nbucket=%s\n' "$REDISCLI_AUTH" "$REDIS_PORT" "$K8S_DIR/data" ;;
    s3) printf 'metaurl=redis://:%s@127.0.0.1:%s/2\nstorage=s3\nbucket=%s\naccess-key=%s\nsecret-key=%s\n' \
          "$REDISCLI_AUTH" "$REDIS_PORT" "$KEG_TEST_S3_BUCKET" "$KEG_TEST_S3_ACCESS_KEY" "$KEG_TEST_S3_SECRET_KEY" ;;
  esac
}

# --- install -------------------------------------------------------------
# This cluster has no kube-proxy, so the `kubernetes` Service's ClusterIP leads
# nowhere: the sidecars that call the API (provisioner, resizer; the controller
# pod is on the host network) get the API server's real address instead.  Their
# ServiceAccount token and RBAC are used as on any cluster.
apiserver_env_patch() {
  cat <<EOF
- {op: add, path: /spec/template/spec/containers/1/env, value: [{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}, {name: KUBERNETES_SERVICE_PORT, value: "$API_PORT"}]}
- {op: add, path: /spec/template/spec/containers/2/env, value: [{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}, {name: KUBERNETES_SERVICE_PORT, value: "$API_PORT"}]}
EOF
}

# helm_post_renderer: the same patch for `helm install --post-renderer`
helm_post_renderer() {
  local d=$K8S_DIR/post-render
  mkdir -p "$d"
  apiserver_env_patch > "$d/apiserver-env.yaml"
  cat > "$d/render.sh" <<EOF
#!/bin/bash
set -e
w=\$(mktemp -d "$d/w.XXXXXX")
cat > "\$w/all.yaml"
cp "$d/apiserver-env.yaml" "\$w/"
printf 'resources: [all.yaml]\npatches:\n  - path: apiserver-env.yaml\n    target: {kind: Deployment, name: kegfs-csi-controller}\n' > "\$w/kustomization.yaml"
"$KUBECTL" kustomize "\$w"
rm -rf "\$w"
EOF
  chmod +x "$d/render.sh"
  echo "$d/render.sh"
}

install_kustomize() {
  local store=$1 ov
  rm -rf "$K8S_DIR/manifests"
  cp -r "$REPO/manifests" "$K8S_DIR/manifests"
  ov=$K8S_DIR/manifests/overlays/local
  mkdir -p "$ov"
  (umask 077; secret_lines "$store" > "$ov/secret.env")
  {
    cat <<EOF
# generated by e2e/k8s/run.sh: the local single-node cluster
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../../base]
components: [../../components/kubelet-dir]
images:
  - {name: ghcr.io/kegfs/kegfs-csi, newName: ${IMAGE%:*}, newTag: ${IMAGE##*:}}
  - {name: registry.k8s.io/sig-storage/csi-provisioner, newName: localhost/csi-provisioner, newTag: e2e}
  - {name: registry.k8s.io/sig-storage/csi-resizer, newName: localhost/csi-resizer, newTag: e2e}
  - {name: registry.k8s.io/sig-storage/csi-node-driver-registrar, newName: localhost/csi-node-driver-registrar, newTag: e2e}
  - {name: registry.k8s.io/sig-storage/livenessprobe, newName: localhost/livenessprobe, newTag: e2e}
configMapGenerator:
  - name: kegfs-kubelet-dir
    literals: [dir=$K8S_DIR/kubelet]
    options:
      disableNameSuffixHash: true
      annotations: {config.kubernetes.io/local-config: "true"}
secretGenerator:
  - name: kegfs-secret
    namespace: $NS
    envs: [secret.env]
    options: {disableNameSuffixHash: true}
patches:
  - target: {kind: DaemonSet, name: kegfs-csi-node}
    patch: |-
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - {op: add, path: /spec/template/spec/dnsPolicy, value: ClusterFirstWithHostNet}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: -v}
      - {op: replace, path: /spec/template/spec/containers/0/ports/0/containerPort, value: $HEALTH_NODE}
      - {op: replace, path: /spec/template/spec/containers/2/args/1, value: --health-port=$HEALTH_NODE}
      - {op: replace, path: /spec/template/spec/volumes/4/hostPath/path, value: $K8S_DIR/kegfs-state}
      - {op: replace, path: /spec/template/spec/volumes/5/hostPath/path, value: $K8S_DIR/kegfs-cache}
      - {op: replace, path: /spec/template/spec/volumes/6/hostPath/path, value: $K8S_DIR/kegfs-holder}
  - target: {kind: DaemonSet, name: kegfs-mount-holder}
    patch: |-
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - {op: add, path: /spec/template/spec/dnsPolicy, value: ClusterFirstWithHostNet}
      - {op: replace, path: /spec/template/spec/volumes/2/hostPath/path, value: $K8S_DIR/kegfs-holder}
      - {op: replace, path: /spec/template/spec/volumes/3/hostPath/path, value: $K8S_DIR/kegfs-cache}
  - path: apiserver-env.yaml
    target: {kind: Deployment, name: kegfs-csi-controller}
  - target: {kind: Deployment, name: kegfs-csi-controller}
    patch: |-
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - {op: add, path: /spec/template/spec/dnsPolicy, value: ClusterFirstWithHostNet}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: -v}
      - {op: replace, path: /spec/template/spec/containers/0/ports/0/containerPort, value: $HEALTH_CTRL}
      - {op: replace, path: /spec/template/spec/containers/3/args/1, value: --health-port=$HEALTH_CTRL}
EOF
    if [ "$store" = file ]; then
      cat <<EOF
  - target: {kind: Deployment, name: kegfs-csi-controller}
    patch: |-
      - {op: replace, path: /spec/template/spec/securityContext, value: {runAsUser: 0, seccompProfile: {type: RuntimeDefault}}}
      - {op: add, path: /spec/template/spec/volumes/-, value: {name: data, hostPath: {path: $K8S_DIR/data, type: DirectoryOrCreate}}}
      - {op: add, path: /spec/template/spec/containers/0/volumeMounts/-, value: {name: data, mountPath: $K8S_DIR/data}}
  - target: {kind: DaemonSet, name: kegfs-csi-node}
    patch: |-
      - {op: add, path: /spec/template/spec/volumes/-, value: {name: data, hostPath: {path: $K8S_DIR/data, type: DirectoryOrCreate}}}
      - {op: add, path: /spec/template/spec/containers/0/volumeMounts/-, value: {name: data, mountPath: $K8S_DIR/data}}
  - target: {kind: DaemonSet, name: kegfs-mount-holder}
    patch: |-
      - {op: add, path: /spec/template/spec/volumes/-, value: {name: data, hostPath: {path: $K8S_DIR/data, type: DirectoryOrCreate}}}
      - {op: add, path: /spec/template/spec/containers/0/volumeMounts/-, value: {name: data, mountPath: $K8S_DIR/data}}
EOF
    fi
  } > "$ov/kustomization.yaml"
  apiserver_env_patch > "$ov/apiserver-env.yaml"
  kubectl apply -k "$ov" > "$K8S_DIR/logs/install-kustomize-$store.log" 2>&1 ||
    { cat "$K8S_DIR/logs/install-kustomize-$store.log"; return 1; }
  CACHE_IN_PLUGIN=/var/cache/kegfs
}

install_helm() {
  local store=$1 v=$K8S_DIR/helm-values.yaml
  (umask 077
   {
     cat <<EOF
image: {repository: ${IMAGE%:*}, tag: ${IMAGE##*:}, pullPolicy: IfNotPresent}
sidecars:
  provisioner: {image: localhost/csi-provisioner:e2e}
  resizer: {image: localhost/csi-resizer:e2e}
  nodeDriverRegistrar: {image: localhost/csi-node-driver-registrar:e2e}
  livenessProbe: {image: localhost/livenessprobe:e2e}
kubeletDir: $K8S_DIR/kubelet
controller: {hostNetwork: true, debug: true, healthPort: $HEALTH_CTRL}
node:
  hostNetwork: true
  debug: true
  healthPort: $HEALTH_NODE
  stateDir: $K8S_DIR/kegfs-state
  cacheDir: $K8S_DIR/kegfs-cache
mountHolder: {hostDir: $K8S_DIR/kegfs-holder, mounterMemoryMax: "$MOUNTER_MEMORY_MAX"}
metrics: {enabled: true, port: $METRICS_NODE, controllerPort: $METRICS_CTRL}
EOF
     [ "$store" = file ] && echo "fileStore: {hostPath: $K8S_DIR/data}"
     echo "secret:"
     echo "  create: true"
     secret_lines "$store" | while IFS='=' read -r k val; do
       case $k in
         metaurl) echo "  metaurl: \"$val\"" ;;
         storage) echo "  storage: \"$val\"" ;;
         bucket) echo "  bucket: \"$val\"" ;;
         access-key) echo "  accessKey: \"$val\"" ;;
         secret-key) echo "  secretKey: \"$val\"" ;;
       esac
     done
   } > "$v")
  helm upgrade --install kegfs-csi "$REPO/charts/kegfs-csi" -n "$NS" --create-namespace -f "$v" \
    --post-renderer "$(helm_post_renderer)" \
    > "$K8S_DIR/logs/install-helm-$store.log" 2>&1 || { cat "$K8S_DIR/logs/install-helm-$store.log"; return 1; }
  CACHE_IN_PLUGIN=$K8S_DIR/kegfs-cache
}

uninstall() {
  local mode=$1 store=$2
  if [ "$mode" = helm ]; then
    helm uninstall kegfs-csi -n "$NS" --wait --timeout 180s >/dev/null 2>&1
  else
    kubectl delete -k "$K8S_DIR/manifests/overlays/local" --wait=true --timeout=180s >/dev/null 2>&1
  fi
  kubectl delete namespace "$NS" --ignore-not-found --wait=true --timeout=180s >/dev/null 2>&1
  # nothing of the driver may stay mounted in the kubelet's pods directory
  if awk -v d="$K8S_DIR/kubelet/pods/" 'index($2, d) == 1 && $3 ~ /fuse/ {f=1} END {exit !f}' /proc/self/mounts; then
    log "FUSE mounts left below the pods directory after uninstall ($mode/$store)"
    return 1
  fi
}

# --- main ----------------------------------------------------------------
log "cluster directory $K8S_DIR"
mkdir -p "$K8S_DIR/logs" "$K8S_DIR/data" "$K8S_DIR/kegfs-state" "$K8S_DIR/kegfs-cache" "$K8S_DIR/kegfs-holder"
t_start=$(date +%s)
start_backends || exit 1
k8s_up || { log "cluster did not come up; logs:"; tail -n 15 "$K8S_DIR"/logs/*.log; exit 1; }
log "cluster up in $(( $(date +%s) - t_start )) s: $(kubectl version --short 2>/dev/null | tr '\n' ' ')"
t0=$(date +%s)
build_images || exit 1
log "images loaded in $(( $(date +%s) - t0 )) s"

[ -n "$RESULTS" ] || RESULTS=$K8S_DIR/results.tsv
: > "$RESULTS"
# the stall figures of scenarios 05 and 10: label, event, app stall ms, app
# errors, lister stall ms, lister errors
FIGURES=${RESULTS%.tsv}.figures.tsv
: > "$FIGURES"
secret_values=$K8S_DIR/secret-values
(umask 077; : > "$secret_values")
[ -n "${KEG_TEST_S3_SECRET_KEY:-}" ] && echo "$KEG_TEST_S3_SECRET_KEY" >> "$secret_values"
echo "$REDISCLI_AUTH" >> "$secret_values"
overall=0
for store in $STORES; do
  for mode in $INSTALLS; do
    label="$mode/$store"
    log "=== install $label"
    t0=$(date +%s)
    "install_$mode" "$store" || { log "install $label failed"; overall=1; continue; }
    if ! kubectl -n "$NS" rollout status deploy/kegfs-csi-controller --timeout=300s ||
       ! kubectl -n "$NS" rollout status ds/kegfs-csi-node --timeout=300s; then
      kubectl -n "$NS" describe pods | tail -60
      log "driver not ready ($label)"; overall=1
      uninstall "$mode" "$store"
      continue
    fi
    printf '%s\t%s\t%s\t%s\n' "$label" install PASS "$(( $(date +%s) - t0 ))" >> "$RESULTS"
    log "driver ready in $(( $(date +%s) - t0 )) s ($label)"
    KEG_E2E_LABEL=$label KEG_E2E_RESULTS=$RESULTS KEG_E2E_STORE=$store \
    KEG_E2E_DRIVER_NS=$NS KEG_E2E_APP_IMAGE=$APP_IMAGE KEG_E2E_NODE_IMAGE_2=$IMAGE2 \
    KEG_E2E_CACHE_DIR=$CACHE_IN_PLUGIN KEG_E2E_CACHE_HOST_DIR=$K8S_DIR/kegfs-cache \
    KEG_E2E_HOST_LOGS="$K8S_DIR/kegfs-state $K8S_DIR/kegfs-holder" KEG_E2E_SECRET_VALUES=$secret_values \
    KEG_E2E_FIGURES=$FIGURES \
    KEG_E2E_MOUNTER_MEMORY_MAX=$([ "$mode" = helm ] && echo "$MOUNTER_MEMORY_MAX") \
    KEG_E2E_METRICS_URL=$([ "$mode" = helm ] && echo "http://127.0.0.1:$METRICS_NODE/metrics") \
    KEG_E2E_KILL_CONTAINER_CMD="ctr -a $K8S_DIR/containerd/containerd.sock -n k8s.io task kill -s SIGKILL \"\$1\"" \
    KEG_E2E_KEYS_CMD="redis-cli --no-auth-warning -p $REDIS_PORT -n $([ "$store" = file ] && echo 1 || echo 2) --scan --pattern \"*{\$1}*\" | wc -l" \
    KEG_E2E_OBJECTS_CMD="VOL=\$1; STORAGE=$store; OBJDIR=$K8S_DIR/data; BUCKET=\${KEG_TEST_S3_BUCKET:-}; . $REPO/tests/mount/obj_lib.sh; [ $store = file ] || obj_s3_parse \"\$BUCKET\"; obj_list '' | wc -l" \
      "$REPO/e2e/scenarios/run.sh" "$ONLY" || overall=1
    t0=$(date +%s)
    if uninstall "$mode" "$store"; then
      printf '%s\t%s\t%s\t%s\n' "$label" uninstall PASS "$(( $(date +%s) - t0 ))" >> "$RESULTS"
    else
      printf '%s\t%s\t%s\t%s\n' "$label" uninstall FAIL "$(( $(date +%s) - t0 ))" >> "$RESULTS"
      overall=1
    fi
  done
done
echo "--- results ($RESULTS)"
column -t -s $'\t' "$RESULTS" 2>/dev/null || cat "$RESULTS"
p=$(awk -F'\t' '$3 == "PASS"' "$RESULTS" | wc -l)
f=$(awk -F'\t' '$3 == "FAIL"' "$RESULTS" | wc -l)
s=$(awk -F'\t' '$3 == "SKIP"' "$RESULTS" | wc -l)
if [ -s "$FIGURES" ]; then
  echo "--- stall figures ($FIGURES): label, event, app stall ms, app errors, lister stall ms, lister errors"
  column -t -s $'\t' "$FIGURES" 2>/dev/null || cat "$FIGURES"
fi
echo "kubernetes: $p passed, $f failed, $s skipped"
[ "$f" = 0 ] && [ $overall = 0 ]
