#!/usr/bin/env bash
# run.sh -- run the Kubernetes scenarios e2e/scenarios/NN-*.sh against the
# cluster kubectl points at, with the driver installed (e2e/kind/run.sh and
# e2e/k8s/run.sh call it; see lib.sh for the KEG_E2E_* settings).
#   e2e/scenarios/run.sh [REGEX]     only scenarios whose file name matches
# Prints PASS/FAIL/SKIP with the time of each, appends "label<TAB>scenario<TAB>
# result<TAB>seconds" to $KEG_E2E_RESULTS when set (label: $KEG_E2E_LABEL), and
# ends with "N passed, M failed, K skipped".
set -uo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
only=${1:-.}
pass=0; failn=0; skipn=0
for s in "$dir"/[0-9][0-9]-*.sh; do
  name=$(basename "$s" .sh)
  [[ $name =~ $only ]] || continue
  echo "=== $name"
  t0=$(date +%s)
  bash "$s"
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  case $rc in
    0) res=PASS; pass=$((pass + 1)) ;;
    77) res=SKIP; skipn=$((skipn + 1)) ;;
    *) res=FAIL; failn=$((failn + 1)) ;;
  esac
  echo "$res $name (${secs}s)"
  [ -z "${KEG_E2E_RESULTS:-}" ] || printf '%s\t%s\t%s\t%s\n' "${KEG_E2E_LABEL:-}" "$name" "$res" "$secs" >> "$KEG_E2E_RESULTS"
done
echo "$pass passed, $failn failed, $skipn skipped"
[ $failn = 0 ]
