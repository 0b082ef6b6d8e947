#!/usr/bin/env bash
# 11 metrics: with the chart's metrics.enabled, the node plugin's /metrics carries
# the mounters' metrics.  Two pods mount one claim and one of them writes 8 MiB:
# in the node plugin's scrape the volume's kegfs_written_bytes_total (summed over
# its mounters) grows by at least that, both pods' mounters are there apart (label
# mounter), every family's # TYPE comes once, kegfs_csi_live_mounters and
# kegfs_csi_volumes{state="live"} count both publishes, and no target path shows.
# Needs KEG_E2E_METRICS_URL, the node plugin's /metrics as this host reaches it
# (e2e/k8s/run.sh sets it for its helm installs); skipped without it.
. "$(dirname "$0")/lib.sh"
[ -n "${KEG_E2E_METRICS_URL:-}" ] || skip "KEG_E2E_METRICS_URL not set: no metrics in this install"
command -v curl >/dev/null || skip "curl not installed"
scenario_start
pvc m 1Gi
app_pod w m 'sleep 100000'
app_pod r m 'sleep 100000'
wait_bound m
wait_ready w r
vol=$(volume_of_pv "$(pv_of m)")
[ -n "$vol" ] || fail "no volume id for claim m"

scrape() { curl -sf --max-time 10 "$KEG_E2E_METRICS_URL"; }
# written TEXT: the volume's kegfs_written_bytes_total over all its mounters
written() {
  awk -v v="volume=\"$vol\"" '$1 ~ /^kegfs_written_bytes_total\{/ && index($1, v) {s += $2}
       END {printf "%d\n", s}' <<< "$1"
}
# mounters TEXT: the mounter labels of the volume's FUSE op samples
mounters() {
  grep "^kegfs_fuse_ops_total{" <<< "$1" | grep -F "volume=\"$vol\"" |
    sed -n 's/.*mounter="\([0-9a-f]*\)".*/\1/p' | sort -u
}
value() { awk -v n="$2" '$1 == n {print $2}' <<< "$1" | head -1; }

both_scraped() { s0=$(scrape) && [ "$(mounters "$s0" | wc -l)" = 2 ]; }
until_true 30 both_scraped || fail "the node plugin's scrape does not show two mounters of $vol: $(mounters "${s0:-}" | tr '\n' ' ')"
w0=$(written "$s0")
in_pod w 'dd if=/dev/urandom of=/data/blob bs=1M count=8 conv=fsync 2>/dev/null' ||
  fail "writing 8 MiB in pod w"
grew() { s1=$(scrape) && [ "$(written "$s1")" -ge $((w0 + 8 * 1048576)) ]; }
until_true 30 grew || fail "kegfs_written_bytes_total of $vol: $w0 -> $(written "${s1:-}"), expected +8 MiB"

dup=$(grep '^# TYPE ' <<< "$s1" | awk '{print $3}' | sort | uniq -d)
[ -z "$dup" ] || fail "families declared more than once: $dup"
live=$(value "$s1" kegfs_csi_live_mounters)
vlive=$(value "$s1" 'kegfs_csi_volumes{state="live"}')
[ "${live:-0}" -ge 2 ] || fail "kegfs_csi_live_mounters is '$live', two pods mount $vol"
[ "${vlive:-0}" -ge 2 ] || fail "kegfs_csi_volumes{state=\"live\"} is '$vlive'"
if grep -qE 'kubernetes\.io~csi|/pods/' <<< "$s1"; then
  fail "a target path in the metrics: $(grep -E 'kubernetes\.io~csi|/pods/' <<< "$s1" | head -1)"
fi
say "PASS: the node plugin's /metrics: $vol written $w0 -> $(written "$s1") bytes on mounters" \
    "$(mounters "$s1" | tr '\n' ' ')(live mounters $live, live volumes $vlive)"
