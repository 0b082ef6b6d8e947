#!/usr/bin/env bash
# 09 no secret (S3 secret key, Redis password, the values listed in
# KEG_E2E_SECRET_VALUES) in any container log of the driver, in
# `kubectl describe` of its pods, the PVs, PVCs and StorageClasses, in the
# events, nor in the node's logs under KEG_E2E_HOST_LOGS.  A claim is
# provisioned and mounted first so that every path has logged something.
. "$(dirname "$0")/lib.sh"
scenario_start
pvc s 1Gi
app_pod p s 'echo x > /data/x && sleep 100000'
wait_bound s
wait_ready p
secrets=()
sk=$(secret_value secret-key 2>/dev/null || true)
[ -n "$sk" ] && secrets+=("$sk")
pw=$(secret_value metaurl | sed -n 's#^[a-z0-9]*://[^:@/]*:\([^@/]*\)@.*#\1#p')
[ -n "$pw" ] && secrets+=("$pw")
if [ -n "${KEG_E2E_SECRET_VALUES:-}" ] && [ -f "$KEG_E2E_SECRET_VALUES" ]; then
  while IFS= read -r line; do [ -n "$line" ] && secrets+=("$line"); done < "$KEG_E2E_SECRET_VALUES"
fi
[ ${#secrets[@]} -gt 0 ] || skip "the Secret holds no secret-key and no Redis password, nothing to look for"
out=$(mktemp)
trap 'rm -f "$out"; scenario_cleanup' EXIT
for p in $(kubectl -n "$DRIVER_NS" get pods -o name); do
  for c in $(kubectl -n "$DRIVER_NS" get "$p" -o jsonpath='{.spec.containers[*].name}'); do
    kubectl -n "$DRIVER_NS" logs "$p" -c "$c" >> "$out" 2>/dev/null || true
    kubectl -n "$DRIVER_NS" logs "$p" -c "$c" --previous >> "$out" 2>/dev/null || true
  done
done
{
  kubectl -n "$DRIVER_NS" describe pods
  kubectl describe pv
  kubectl describe pvc -A
  kubectl describe storageclass
  kubectl get events -A -o yaml
} >> "$out" 2>&1
for d in ${KEG_E2E_HOST_LOGS:-}; do
  [ -d "$d" ] && find "$d" -type f -name '*.log' -exec cat {} + >> "$out" 2>/dev/null || true
done
say "searched $(wc -l < "$out") lines for ${#secrets[@]} secret value(s)"
for s in "${secrets[@]}"; do
  if grep -qF -- "$s" "$out"; then
    grep -nF -- "$s" "$out" | head -3 | sed "s/$s/<SECRET>/g"
    fail "a secret value appears in the logs or descriptions"
  fi
done
say "PASS: no secret value in logs, descriptions or events"
