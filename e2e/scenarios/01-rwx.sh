#!/usr/bin/env bash
# 01 dynamic provisioning: a ReadWriteMany claim, two pods on the node write
# and read each other's files, and df in the pod shows the claim's size.
. "$(dirname "$0")/lib.sh"
scenario_start
pvc shared 1Gi
app_pod a shared 'echo from-a > /data/a.txt && sleep 100000'
app_pod b shared 'echo from-b > /data/b.txt && sleep 100000'
wait_bound shared
wait_ready a b
until_true 30 in_pod a 'test -f /data/b.txt' || fail "a does not see b's file"
[ "$(in_pod a 'cat /data/b.txt')" = from-b ] || fail "a reads '$(in_pod a 'cat /data/b.txt')' from b.txt"
[ "$(in_pod b 'cat /data/a.txt')" = from-a ] || fail "b reads '$(in_pod b 'cat /data/a.txt')' from a.txt"
# 1 MiB written by a, checksummed by both
in_pod a 'dd if=/dev/urandom of=/data/blob bs=64k count=16 2>/dev/null && sync'
sa=$(in_pod a 'cksum < /data/blob'); sb=$(in_pod b 'cksum < /data/blob')
[ "$sa" = "$sb" ] || fail "checksums differ: a '$sa', b '$sb'"
kb=$(df_kb a)
say "df in pod a: ${kb} KiB"
[ "$kb" = 1048576 ] || fail "df shows $kb KiB, the claim is 1Gi (1048576 KiB)"
say "PASS: two pods share the volume, df shows 1Gi"
