#!/usr/bin/env bash
# 06 a pod running as a non-root user with fsGroup, and a subPath mount.
# The CSIDriver says fsGroupPolicy: None (kubelet never chowns a shared
# volume), so a root init container prepares the directory the app owns.
. "$(dirname "$0")/lib.sh"
scenario_start
pvc nr 1Gi
kubectl -n "$NS" apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: Pod
metadata: {name: nonroot}
spec:
  terminationGracePeriodSeconds: 2
  securityContext: {runAsUser: 1000, runAsGroup: 1000, fsGroup: 2000}
  initContainers:
    - name: prepare
      image: $APP_IMAGE
      imagePullPolicy: IfNotPresent
      securityContext: {runAsUser: 0}
      command: [sh, -c, 'mkdir -p /data/app && chown 1000:2000 /data/app && chmod 2775 /data/app']
      volumeMounts: [{name: v, mountPath: /data}]
  containers:
    - name: app
      image: $APP_IMAGE
      imagePullPolicy: IfNotPresent
      command: [sh, -c, 'echo written-by-\$(id -u) > /work/who.txt && sleep 100000']
      volumeMounts: [{name: v, mountPath: /work, subPath: app}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: nr}}]
EOF2
app_pod root nr 'sleep 100000'
wait_bound nr
wait_ready nonroot root
until_true 30 in_pod root 'test -s /data/app/who.txt' || fail "the non-root pod did not write through its subPath"
[ "$(in_pod root 'cat /data/app/who.txt')" = written-by-1000 ] || fail "who.txt: $(in_pod root 'cat /data/app/who.txt')"
owner=$(in_pod root 'stat -c %u:%g /data/app/who.txt')
say "file made by uid 1000 through subPath app: owner $owner"
[ "$owner" = 1000:2000 ] || [ "$owner" = 1000:1000 ] || fail "owner $owner"
ids=$(in_pod nonroot 'id')
say "non-root pod: $ids"
echo "$ids" | grep -q 'uid=1000' || fail "pod not running as uid 1000"
echo "$ids" | grep -q '2000' || fail "fsGroup 2000 not among the pod's groups"
in_pod nonroot 'ls /work/who.txt >/dev/null' || fail "subPath does not show who.txt"
in_pod nonroot 'test ! -e /work/app' || fail "subPath shows the volume root, not app/"
say "PASS: non-root pod with fsGroup writes through a subPath mount"
