#!/usr/bin/env bash
# 08 bad input through Kubernetes: a StorageClass with an unknown parameter, a
# Secret with a wrong S3 secret key (s3 store only), a Secret naming an
# unreachable Redis.  Each claim stays Pending with an event that says what is
# wrong, and nothing is left half-created (no PV, no key, no object).
. "$(dirname "$0")/lib.sh"
EXTRA_SCS="kegfs-e2e-typo kegfs-e2e-badkey kegfs-e2e-noredis"
scenario_start
cleanup_secrets() {
  kubectl -n "$DRIVER_NS" delete secret kegfs-e2e-badkey kegfs-e2e-noredis --ignore-not-found >/dev/null 2>&1 || true
  scenario_cleanup
}
trap cleanup_secrets EXIT

sc() {   # sc NAME SECRET [EXTRA PARAM LINE]
  kubectl apply -f - >/dev/null <<EOF2
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: $1}
provisioner: csi.kegfs.io
reclaimPolicy: Delete
parameters:
  ${3:-reclaim: delete}
  csi.storage.k8s.io/provisioner-secret-name: $2
  csi.storage.k8s.io/provisioner-secret-namespace: $DRIVER_NS
  csi.storage.k8s.io/node-publish-secret-name: $2
  csi.storage.k8s.io/node-publish-secret-namespace: $DRIVER_NS
EOF2
}
# copy_secret NAME KEY VALUE: the driver's Secret with one key replaced (the
# values go through 0600 files, never on a command line)
copy_secret() {
  local d k v
  d=$(mktemp -d)
  for k in metaurl storage bucket access-key secret-key format-options; do
    v=$(kubectl -n "$DRIVER_NS" get secret "$SECRET" -o jsonpath="{.data.$k}" | base64 -d)
    [ "$k" = "$2" ] && v=$3
    [ -n "$v" ] && (umask 077; printf '%s' "$v" > "$d/$k")
  done
  kubectl -n "$DRIVER_NS" create secret generic "$1" --from-file="$d" --dry-run=client -o yaml |
    kubectl apply -f - >/dev/null
  rm -rf "$d"
}

cases=(typo noredis)
sc kegfs-e2e-typo "$SECRET" "colour: blue"
copy_secret kegfs-e2e-noredis metaurl redis://127.0.0.1:1/1
sc kegfs-e2e-noredis kegfs-e2e-noredis
if [ "$STORE" = s3 ]; then
  copy_secret kegfs-e2e-badkey secret-key wrong-secret-key-for-the-e2e
  sc kegfs-e2e-badkey kegfs-e2e-badkey
  cases+=(badkey)
fi
for c in "${cases[@]}"; do pvc "$c" 1Gi "kegfs-e2e-$c"; done

expect() {   # expect CASE REGEX
  local ev
  until_true 90 sh -c "kubectl -n $NS get events --field-selector involvedObject.name=$1 | grep -q ProvisioningFailed" ||
    fail "$1: no ProvisioningFailed event"
  ev=$(pvc_events "$1" | grep ProvisioningFailed | head -1)
  say "$1: $ev"
  echo "$ev" | grep -Eqi "$2" || fail "$1: the event does not say what is wrong (want /$2/)"
  [ "$(kubectl -n "$NS" get pvc "$1" -o jsonpath='{.status.phase}')" = Pending ] || fail "$1 is not Pending"
}
expect typo 'colour'
expect noredis '127\.0\.0\.1:1|connect|refused|redis'
[ "$STORE" = s3 ] && expect badkey 'signature|403|denied|forbidden|credential|secret'

# nothing half-created: the claims' would-be volumes pvc-<uid> have nothing
for c in "${cases[@]}"; do
  vol=pvc-$(kubectl -n "$NS" get pvc "$c" -o jsonpath='{.metadata.uid}')
  [ -z "$(kubectl -n "$NS" get pvc "$c" -o jsonpath='{.spec.volumeName}')" ] || fail "$c got a PV"
  k=$(key_count "$vol"); o=$(object_count "$vol")
  say "$c: $vol keys=${k:-unchecked} objects=${o:-unchecked}"
  [ -z "$k" ] || [ "$k" = 0 ] || fail "$c: $k metadata keys of $vol exist"
  [ -z "$o" ] || [ "$o" = 0 ] || fail "$c: $o objects of $vol exist"
done
say "PASS: every bad claim stays Pending with an event naming the cause; nothing created"
