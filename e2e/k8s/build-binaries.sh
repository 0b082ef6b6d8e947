#!/usr/bin/env bash
# build-binaries.sh -- build what e2e/k8s/run.sh needs in $KEG_K8S_BIN from
# source trees that vendor their Go modules (offline, Debian's Go 1.19), with
# nice and at most 2 parallel compiles.  docs/testing.md ("Kubernetes on this
# host") says where each tree comes from.
#
#   e2e/k8s/build-binaries.sh SRC OUT
#
# SRC holds (each optional; what is absent is reported and skipped):
#   kubernetes/              a Kubernetes tree: v1.26.x (module mode, -mod=vendor)
#                            or Debian's 1.20.2 source package (GOPATH mode, as its
#                            hack/lib/init.sh builds it)
#   external-provisioner/    kubernetes-csi trees at releases whose go.mod says
#   external-resizer/        go <= 1.19 (v3.4.1, v1.7.0, v2.7.0, v2.9.0)
#   node-driver-registrar/
#   livenessprobe/
#   csi-test/                kubernetes-csi/csi-test v5.3.1 (csi-sanity; go 1.18)
# OUT gets kube-apiserver kube-controller-manager kube-scheduler kubelet
# csi-provisioner csi-resizer csi-node-driver-registrar livenessprobe pause
# csi-sanity.
set -euo pipefail
[ $# = 2 ] || { echo "usage: $0 SRC OUT" >&2; exit 2; }
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
export CGO_ENABLED=0 GOPROXY=off GOCACHE=${GOCACHE:-$SRC/.gocache}
GO="nice -n 10 go"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

k8s_version() {   # the tree's version: v1.26.x from git, else the Debian changelog
  if [ -d "$SRC/kubernetes/.git" ]; then
    git -C "$SRC/kubernetes" describe --tags --abbrev=0
  elif [ -f "$SRC/kubernetes/debian/changelog" ]; then
    sed -n '1s/.*(\([0-9.]*+really\)\?\([0-9.]*\)-.*/v\2/p' "$SRC/kubernetes/debian/changelog"
  else
    echo v0.0.0
  fi
}

if [ -d "$SRC/kubernetes/cmd/kubelet" ]; then
  v=$(k8s_version)
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  if grep -q 'export GO111MODULE=off' "$SRC/kubernetes/hack/lib/init.sh" 2>/dev/null; then
    # GOPATH mode (Kubernetes <= 1.2x): the tree at $GOPATH/src/k8s.io/kubernetes
    export GO111MODULE=off GOFLAGS= GOPATH=$SRC/.gopath
    mkdir -p "$GOPATH/src/k8s.io"
    ln -sfn "$SRC/kubernetes" "$GOPATH/src/k8s.io/kubernetes"
    dir=$GOPATH/src/k8s.io/kubernetes
    pkg=k8s.io/kubernetes/vendor/k8s.io
  else
    export GO111MODULE=on GOFLAGS=-mod=vendor
    dir=$SRC/kubernetes
    pkg=k8s.io
  fi
  ld="-s -w"
  for p in component-base/version client-go/pkg/version; do
    ld="$ld -X $pkg/$p.gitVersion=$v -X $pkg/$p.gitMajor=$major -X $pkg/$p.gitMinor=$minor"
    ld="$ld -X $pkg/$p.gitTreeState=clean"
  done
  # kube-apiserver needs pkg/generated/openapi/zz_generated.openapi.go, which
  # release tarballs (and Debian's source package) do not carry: generate it
  # from every package tagged +k8s:openapi-gen, as Makefile.generated_files does.
  if [ ! -f "$dir/pkg/generated/openapi/zz_generated.openapi.go" ]; then
    log "kubernetes $v: openapi-gen"
    (cd "$dir" && $GO build -o "$SRC/.openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen)
    (cd "$dir" && in=$(grep -Rl --include='*.go' '^// *+k8s:openapi-gen=' pkg cmd plugin vendor |
         grep -v '^vendor/k8s.io/code-generator/\|^vendor/k8s.io/sample-apiserver/\|_test\.go$' |
         xargs -n1 dirname | LC_ALL=C sort -u | sed 's#^#k8s.io/kubernetes/#' | paste -sd,) &&
     nice -n 10 "$SRC/.openapi-gen" -i "$in" -p k8s.io/kubernetes/pkg/generated/openapi \
       -O zz_generated.openapi -h hack/boilerplate/boilerplate.generatego.txt \
       -r "$SRC/.openapi-violations.report")
  fi
  # providerless: no in-tree cloud providers; dockerless: no dockershim (the
  # cluster talks CRI to containerd).  About 250 fewer packages to compile.
  for b in kubelet kube-scheduler kube-controller-manager kube-apiserver; do
    log "kubernetes $v: $b"
    (cd "$dir" && $GO build -p 2 -tags selinux,notest,providerless,dockerless -ldflags "$ld" -o "$OUT/$b" "./cmd/$b")
  done
  log "pause (static)"
  gcc -Os -static -Wall -DVERSION="$v-kegfs" -o "$OUT/pause" "$SRC/kubernetes/build/pause/linux/pause.c"
  strip "$OUT/pause"
else
  log "SKIP kubernetes: no $SRC/kubernetes/cmd/kubelet"
fi

export GO111MODULE=on GOFLAGS=-mod=vendor
unset GOPATH
for t in external-provisioner:csi-provisioner external-resizer:csi-resizer \
         node-driver-registrar:csi-node-driver-registrar livenessprobe:livenessprobe; do
  d=${t%%:*}; b=${t#*:}
  if [ ! -d "$SRC/$d/cmd/$b" ]; then
    log "SKIP $b: no $SRC/$d/cmd/$b"
    continue
  fi
  v=$(git -C "$SRC/$d" describe --tags 2>/dev/null || cat "$SRC/$d.version" 2>/dev/null || echo local)
  log "$b $v"
  (cd "$SRC/$d" && $GO build -p 2 -ldflags "-s -w -X main.version=$v" -o "$OUT/$b" "./cmd/$b")
done
# csi-sanity (e2e/conformance/csi-sanity.sh) stamps its version in main.VERSION
if [ -d "$SRC/csi-test/cmd/csi-sanity" ]; then
  v=$(git -C "$SRC/csi-test" describe --tags 2>/dev/null || cat "$SRC/csi-test.version" 2>/dev/null || echo local)
  log "csi-sanity $v"
  (cd "$SRC/csi-test" && $GO build -p 2 -ldflags "-s -w -X main.VERSION=$v" -o "$OUT/csi-sanity" ./cmd/csi-sanity)
else
  log "SKIP csi-sanity: no $SRC/csi-test/cmd/csi-sanity"
fi
ls -l "$OUT"
