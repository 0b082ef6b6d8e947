#!/usr/bin/env bash
# cluster.sh -- a throw-away single-node Kubernetes cluster on this host, from
# binaries, for the kegfs-csi end-to-end runs (sourced by e2e/k8s/run.sh).
#
# Everything lives below $K8S_DIR (a fresh temp directory) and listens on
# 127.0.0.1 only: etcd, containerd (own root, state and socket) with runc and
# the Debian CNI plugins (a bridge without masquerading), kube-apiserver,
# kube-controller-manager, kube-scheduler and a kubelet whose root directory is
# $K8S_DIR/kubelet (a bind mount made rshared, so the node plugin's FUSE mounts
# propagate into pods) and whose cgroups are below /kegfs-k8s.  Certificates
# are made with openssl into $K8S_DIR/pki.
#
# k8s_up / k8s_down.  k8s_down kills only the PIDs this script started (and the
# containerd shims serving its own socket), unmounts what is below $K8S_DIR,
# deletes the CNI bridge, removes the cgroups, restores the kernel settings
# kubelet changes, and checks that no iptables rule was added.
#
# Ports (override with KEG_K8S_PORT_BASE, default 16480): base+0 etcd client,
# +1 etcd peer, +2 apiserver, +3 kubelet, +4 kubelet healthz,
# +5 controller-manager, +6 scheduler.

K8S_BIN=${KEG_K8S_BIN:-}
PORT_BASE=${KEG_K8S_PORT_BASE:-16480}
ETCD_PORT=$PORT_BASE
ETCD_PEER_PORT=$((PORT_BASE + 1))
API_PORT=$((PORT_BASE + 2))
KUBELET_PORT=$((PORT_BASE + 3))
KUBELET_HEALTH_PORT=$((PORT_BASE + 4))
KCM_PORT=$((PORT_BASE + 5))
SCHED_PORT=$((PORT_BASE + 6))
# The node is "localhost": kubelet refuses a loopback --node-ip, so the API
# server reaches the kubelet (logs, exec) by the node's Hostname address.
NODE_NAME=${KEG_K8S_NODE:-localhost}
CGROUP_ROOT=kegfs-k8s
BRIDGE=kegk8s0
POD_CIDR=10.244.87.0/24
SERVICE_CIDR=10.96.87.0/24
PAUSE_IMAGE=localhost/pause:3.4.1-kegfs
# kubelet sets these (protectKernelDefaults=false); k8s_down puts them back.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
         kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
K8S_PIDS=()

k8s_log() { echo "[$(date -u +%H:%M:%S)] k8s: $*" >&2; }

# k8s_missing: print what is missing to run a cluster (empty: nothing)
k8s_missing() {
  local m=() b
  [ "$(id -u)" = 0 ] || m+=("root")
  if [ -z "$K8S_BIN" ] || [ ! -d "$K8S_BIN" ]; then
    m+=("KEG_K8S_BIN (a directory with the Kubernetes binaries, see docs/testing.md)")
  else
    for b in kube-apiserver kube-controller-manager kube-scheduler kubelet \
             csi-provisioner csi-resizer csi-node-driver-registrar livenessprobe pause; do
      [ -x "$K8S_BIN/$b" ] || m+=("$K8S_BIN/$b")
    done
  fi
  for b in etcd containerd containerd-shim-runc-v2 runc ctr openssl podman iptables-save ip; do
    command -v "$b" >/dev/null || m+=("$b")
  done
  [ -x /usr/lib/cni/bridge ] || m+=("/usr/lib/cni/bridge (containernetworking-plugins)")
  [ -c /dev/fuse ] || m+=("/dev/fuse")
  [ -d /sys/fs/cgroup/memory ] || m+=("cgroup v1 memory controller at /sys/fs/cgroup/memory")
  echo "${m[*]}"
}

k8s_kubectl() { "$KUBECTL" --kubeconfig "$K8S_DIR/admin.kubeconfig" "$@"; }

# mkcert NAME CN [O] [SANs]: a key and a certificate signed by the cluster CA
mkcert() {
  local name=$1 cn=$2 o=${3:-} san=${4:-} subj
  subj="/CN=$cn"
  [ -z "$o" ] || subj="/O=$o$subj"
  openssl genrsa -out "$K8S_DIR/pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$K8S_DIR/pki/$name.key" -subj "$subj" -out "$K8S_DIR/pki/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -z "$san" ] || echo "subjectAltName=$san"
  } > "$K8S_DIR/pki/$name.ext"
  openssl x509 -req -in "$K8S_DIR/pki/$name.csr" -CA "$K8S_DIR/pki/ca.crt" -CAkey "$K8S_DIR/pki/ca.key" \
    -CAcreateserial -days 2 -extfile "$K8S_DIR/pki/$name.ext" -out "$K8S_DIR/pki/$name.crt" 2>/dev/null
  chmod 600 "$K8S_DIR/pki/$name.key"
}

# mkkubeconfig NAME CERT: a kubeconfig for the client certificate CERT
mkkubeconfig() {
  cat > "$K8S_DIR/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: local
    cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$K8S_DIR/pki/ca.crt"}
users:
  - name: $1
    user: {client-certificate: "$K8S_DIR/pki/$2.crt", client-key: "$K8S_DIR/pki/$2.key"}
contexts:
  - name: local
    context: {cluster: local, user: $1}
current-context: local
EOF
  chmod 600 "$K8S_DIR/$1.kubeconfig"
}

# start NAME CMD...: run in the background with a log, remember the PID
start() {
  local name=$1; shift
  "$@" > "$K8S_DIR/logs/$name.log" 2>&1 &
  K8S_PIDS+=("$!")
  echo "$!" > "$K8S_DIR/pids/$name"
}

# wait_for WHAT SECONDS CMD...: poll CMD every second
wait_for() {
  local what=$1 secs=$2 i; shift 2
  for ((i = 0; i < secs; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  k8s_log "timed out after ${secs}s waiting for $what"
  return 1
}

k8s_certs() {
  mkdir -p "$K8S_DIR/pki"
  openssl genrsa -out "$K8S_DIR/pki/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$K8S_DIR/pki/ca.key" -subj "/CN=kegfs-e2e-ca" -days 2 \
    -out "$K8S_DIR/pki/ca.crt" 2>/dev/null
  mkcert apiserver kube-apiserver "" \
    "IP:127.0.0.1,IP:${SERVICE_CIDR%.*}.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  mkcert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  mkcert admin kubernetes-admin system:masters
  mkcert controller-manager system:kube-controller-manager
  mkcert scheduler system:kube-scheduler
  mkcert kubelet "system:node:$NODE_NAME" system:nodes "IP:127.0.0.1,DNS:$NODE_NAME"
  openssl genrsa -out "$K8S_DIR/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$K8S_DIR/pki/sa.key" -pubout -out "$K8S_DIR/pki/sa.pub" 2>/dev/null
  mkkubeconfig admin admin
  mkkubeconfig controller-manager controller-manager
  mkkubeconfig scheduler scheduler
  mkkubeconfig kubelet kubelet
}

k8s_containerd() {
  local c=$K8S_DIR/containerd
  # CAP_SYS_RESOURCE is bit 24 of the effective capabilities
  local capeff
  capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)
  RESTRICT_OOM=false
  (( (0x$capeff >> 24) & 1 )) || RESTRICT_OOM=true
  mkdir -p "$c/root" "$c/state" "$K8S_DIR/cni/net.d" "$K8S_DIR/cni/ipam"
  cat > "$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[debug]
  address = "$c/debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Without CAP_SYS_RESOURCE (as on this VM) runc cannot lower oom_score_adj
  # to kubelet's -998 and every sandbox fails with "can't get final child's
  # PID from pipe: EOF"; bound it by containerd's own value instead.
  restrict_oom_score_adj = $RESTRICT_OOM
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$K8S_DIR/cni/net.d"
EOF
  cat > "$K8S_DIR/cni/net.d/10-kegfs.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kegfs-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "subnet": "$POD_CIDR", "dataDir": "$K8S_DIR/cni/ipam",
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
  start containerd containerd --config "$c/config.toml"
  wait_for containerd 60 ctr -a "$c/containerd.sock" version || return 1
}

k8s_control_plane() {
  local p=$K8S_DIR/pki
  start etcd etcd --name kegfs-e2e --data-dir "$K8S_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "kegfs-e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
    --listen-metrics-urls "" --unsafe-no-fsync
  wait_for etcd 60 curl -sf "http://127.0.0.1:$ETCD_PORT/health" || return 1
  start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --insecure-port 0 --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types Hostname \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true --profiling=false
  wait_for kube-apiserver 120 k8s_kubectl get --raw /readyz || return 1
  start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$K8S_DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$K8S_DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$K8S_DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --port 0 --leader-elect=false \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --use-service-account-credentials --controllers '*,-nodeipam,-cloud-node-lifecycle' \
    --profiling=false
  start kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$K8S_DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$K8S_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig "$K8S_DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --port 0 --leader-elect=false \
    --profiling=false
}

# Paths kubelet uses whatever its --root-dir (device-plugin socket, pod logs):
# removed at teardown when this run created them.
KUBELET_FIXED_DIRS=(/var/lib/kubelet /var/log/pods /var/log/containers)

k8s_kubelet() {
  local k=$K8S_DIR/kubelet s ctrl d
  mkdir -p "$k"
  for d in "${KUBELET_FIXED_DIRS[@]}"; do
    [ -e "$d" ] || echo "$d" >> "$K8S_DIR/created-dirs"
  done
  # The pods directory must be on a shared mount: the node plugin's FUSE
  # mounts (Bidirectional) reach the app containers (HostToContainer) through it.
  mount --bind "$k" "$k"
  mount --make-rshared "$k"
  echo 1 > "$K8S_DIR/kubelet.bound"
  for s in "${SYSCTLS[@]}"; do
    cat "/proc/sys/$s" > "$K8S_DIR/sysctl.$(echo "$s" | tr / .)" 2>/dev/null || true
  done
  for ctrl in /sys/fs/cgroup/*/; do
    [ "$(basename "$ctrl")" = unified ] && continue
    mkdir -p "$ctrl$CGROUP_ROOT" 2>/dev/null || continue
    if [ -f "${ctrl}cpuset.cpus" ]; then
      cat "${ctrl}cpuset.cpus" > "$ctrl$CGROUP_ROOT/cpuset.cpus"
      cat "${ctrl}cpuset.mems" > "$ctrl$CGROUP_ROOT/cpuset.mems"
    fi
  done
  cat > "$K8S_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTH_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$K8S_DIR/pki/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$K8S_DIR/pki/kubelet.crt"
tlsPrivateKeyFile: "$K8S_DIR/pki/kubelet.key"
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
cgroupsPerQOS: true
enforceNodeAllocatable: []
failSwapOn: false
makeIPTablesUtilChains: false
protectKernelDefaults: false
serializeImagePulls: false
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
maxPods: 50
EOF
  start kubelet "$K8S_BIN/kubelet" --config "$K8S_DIR/kubelet.yaml" \
    --kubeconfig "$K8S_DIR/kubelet.kubeconfig" --root-dir "$k" \
    --container-runtime remote \
    --container-runtime-endpoint "unix://$K8S_DIR/containerd/containerd.sock" \
    --hostname-override "$NODE_NAME" \
    --pod-infra-container-image "$PAUSE_IMAGE" --v 2
  wait_for "node $NODE_NAME Ready" 180 k8s_node_ready || return 1
}

k8s_node_ready() {
  [ "$(k8s_kubectl get node "$NODE_NAME" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# k8s_load_image TAR: import a docker-archive into the CRI namespace
k8s_load_image() {
  ctr -a "$K8S_DIR/containerd/containerd.sock" -n k8s.io images import "$1" >/dev/null
}

# k8s_up: start everything; K8S_DIR must be set and empty
k8s_up() {
  mkdir -p "$K8S_DIR/logs" "$K8S_DIR/pids"
  iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' > "$K8S_DIR/iptables.before"
  k8s_log "certificates"
  k8s_certs || return 1
  k8s_log "containerd"
  k8s_containerd || return 1
  k8s_log "etcd and control plane"
  k8s_control_plane || return 1
  k8s_log "kubelet"
  k8s_kubelet || return 1
  k8s_log "node $NODE_NAME is Ready"
}

# kill_pid PID: TERM, wait up to 20 s, KILL
kill_pid() {
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 200; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
}

k8s_stop() {   # k8s_stop NAME
  [ -f "$K8S_DIR/pids/$1" ] || return 0
  kill_pid "$(cat "$K8S_DIR/pids/$1")"
  rm -f "$K8S_DIR/pids/$1"
}

# k8s_down: stop and remove everything k8s_up made; 1 if something was left
k8s_down() {
  local sock=$K8S_DIR/containerd/containerd.sock rc=0 c pid m s ctrl
  [ -n "${K8S_DIR:-}" ] && [ -d "$K8S_DIR" ] || return 0
  k8s_log "teardown"
  k8s_stop kubelet
  if [ -S "$sock" ]; then
    # the containers (and pod sandboxes) of our containerd, then the shims
    for c in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1
    done
    sleep 1
    for c in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1
    done
    for c in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io containers delete "$c" >/dev/null 2>&1
    done
  fi
  for s in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
    k8s_stop "$s"
  done
  # shims serving our containerd (started by it, named by its socket)
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null); do
    kill_pid "$pid"
  done
  # mounts below K8S_DIR: FUSE mounts of killed mounters, rootfs, shm, kubelet dir
  for ((i = 0; i < 3; i++)); do
    awk -v d="$K8S_DIR/" 'index($2, d) == 1 || $2 == substr(d, 1, length(d) - 1) {print $2}' \
      /proc/self/mounts | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
      done
  done
  if awk -v d="$K8S_DIR/" 'index($2, d) == 1 {f=1} END {exit !f}' /proc/self/mounts; then
    k8s_log "LEFT: mounts below $K8S_DIR"; rc=1
  fi
  ip link del "$BRIDGE" 2>/dev/null
  for s in "${SYSCTLS[@]}"; do
    f=$K8S_DIR/sysctl.$(echo "$s" | tr / .)
    [ -f "$f" ] && cat "$f" > "/proc/sys/$s" 2>/dev/null
  done
  for ctrl in /sys/fs/cgroup/*/; do
    [ -d "$ctrl$CGROUP_ROOT" ] || continue
    find "$ctrl$CGROUP_ROOT" -depth -type d -exec rmdir {} + 2>/dev/null
    [ -d "$ctrl$CGROUP_ROOT" ] && { k8s_log "LEFT: cgroup $ctrl$CGROUP_ROOT"; rc=1; }
  done
  if [ -f "$K8S_DIR/created-dirs" ]; then
    while read -r d; do
      case $d in /var/lib/kubelet|/var/log/pods|/var/log/containers) rm -rf "$d" ;; esac
    done < "$K8S_DIR/created-dirs"
  fi
  iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' > "$K8S_DIR/iptables.after"
  if [ -f "$K8S_DIR/iptables.before" ] && ! cmp -s "$K8S_DIR/iptables.before" "$K8S_DIR/iptables.after"; then
    k8s_log "LEFT: iptables rules changed:"
    diff "$K8S_DIR/iptables.before" "$K8S_DIR/iptables.after" >&2
    rc=1
  fi
  for pid in "${K8S_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null && { k8s_log "LEFT: process $pid"; rc=1; }
  done
  return $rc
}
