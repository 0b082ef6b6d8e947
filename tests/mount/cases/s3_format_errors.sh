#!/usr/bin/env bash
# s3_format_errors.sh -- `kegfs format --storage s3` against a signature-checking gateway:
# a wrong secret, a wrong access key, a missing bucket and an unreachable endpoint each
# fail (exit 1) with a message that says what is wrong and which flag to check, within a
# bounded time, and leave no volume behind; the secret never shows in output or logs.
# Then: the credentials stored at format time are all `kegfs mount META_URL` needs, and
# AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the mounter's environment override them
# (proved with a second key of the gateway's user that is revoked after the format:
# the mount works only through the override).
#
# Runs whenever S3 is reachable: KEG_TEST_S3_BUCKET/ACCESS_KEY/SECRET_KEY (from
# `eval "$(scripts/s3-server.sh env DIR)"`), else the runner's s3 BUCKET and AWS_* keys.
# The override part needs radosgw-admin and $KEG_S3_DIR (the s3-server.sh directory).
# timeout: 400
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../redis_lib.sh"     # m2_mount / m2_umount (extra mount points)
need_kegfs
need_cmd curl

S3URL=${KEG_TEST_S3_BUCKET:-}
[ -n "$S3URL" ] || { [ "${STORAGE:-}" = s3 ] && S3URL=$BUCKET; }
AK=${KEG_TEST_S3_ACCESS_KEY:-${AWS_ACCESS_KEY_ID:-}}
SK=${KEG_TEST_S3_SECRET_KEY:-${AWS_SECRET_ACCESS_KEY:-}}
[ -n "$S3URL" ] && [ -n "$AK" ] && [ -n "$SK" ] \
  || skip "no S3 endpoint and keys (eval \"\$(scripts/s3-server.sh env DIR)\")"
case "$S3URL" in http://*|https://*) ;; *) skip "KEG_TEST_S3_BUCKET is not an http(s) URL" ;; esac
# the credentials reach kegfs only where a step says so
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN
ENDPOINT=${S3URL%%\?*}
ENDPOINT=${ENDPOINT#*://}
ENDPOINT=${S3URL%%://*}://${ENDPOINT%%/*}

WRONG_SK="Wr0ngSecret$RANDOM$RANDOM$RANDOM"
SECRETS=("$SK" "$WRONG_SK")
n=0

# try_format WHAT REGEX HINT -- ARGS...: format must fail (exit 1) within 120 s, print a
# line matching REGEX and name HINT (the flag to check); no volume may exist afterwards.
try_format() {
  local what=$1 re=$2 hint=$3 t0 secs out rc db
  shift 4
  n=$((n + 1))
  db="sqlite3://$WORK/fe-$n.db"
  out="$WORK/fe-$n.out"
  t0=$(date +%s)
  timeout 120 "$KEGFS" format --log-file "$WORK/fe.log" --storage s3 "$@" "$db" "fe-$n-$$" \
    > "$out" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  note "$what: exit $rc after $secs s: $(grep '^kegfs:' "$out" | head -1)"
  [ $rc != 124 ] || fail "$what: format still running after 120 s"
  [ $rc = 1 ] || soft_fail "$what: exit status $rc, expected 1"
  grep -qE -- "$re" "$out" || soft_fail "$what: no message matching /$re/: $(cat "$out")"
  grep -qF -- "$hint" "$out" || soft_fail "$what: the message does not say to check $hint"
  "$KEGFS" status "$db" > "$WORK/fe-$n.status" 2>&1 && soft_fail "$what: a volume exists after the failed format"
  grep -q 'no volume is formatted' "$WORK/fe-$n.status" \
    || soft_fail "$what: status does not say 'no volume is formatted': $(cat "$WORK/fe-$n.status")"
  LAST_SECS=$secs
}

try_format "wrong secret" 'SignatureDoesNotMatch|403' "--secret-key" -- \
  --bucket "$S3URL" --access-key "$AK" --secret-key "$WRONG_SK"
try_format "wrong access key" 'InvalidAccessKeyId' "--access-key" -- \
  --bucket "$S3URL" --access-key "KEGNOSUCHKEY$RANDOM" --secret-key "$SK"
missing="kegfs-missing-$RANDOM$RANDOM"
try_format "missing bucket" "NoSuchBucket.*$missing|$missing.*NoSuchBucket|$missing.*does not exist" \
  "--bucket" -- --bucket "$ENDPOINT/$missing" --access-key "$AK" --secret-key "$SK"
try_format "unreachable endpoint" '[Cc]onnect' "--bucket" -- \
  --bucket "http://127.0.0.1:1/b" --access-key "$AK" --secret-key "$SK"
[ "$LAST_SECS" -le 90 ] || soft_fail "unreachable endpoint: format took $LAST_SECS s (want <= 90)"
[ "$LAST_SECS" -le 15 ] || note "unreachable endpoint: format took $LAST_SECS s (the probe uses the store's full retry deadline)"
# the same through the environment and --secret-key-file
n_env=$((n + 1))
(export AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$WRONG_SK
 try_format "wrong secret from the environment" 'SignatureDoesNotMatch|403' \
   "AWS_SECRET_ACCESS_KEY" -- --bucket "$S3URL"; exit "$MT_SOFT_FAILS") \
  || MT_SOFT_FAILS=$((MT_SOFT_FAILS + 1))
n=$n_env
printf '%s\n' "$WRONG_SK" > "$WORK/sk-file"
chmod 600 "$WORK/sk-file"
try_format "wrong secret from a file" 'SignatureDoesNotMatch|403' "--secret-key-file" -- \
  --bucket "$S3URL" --access-key "$AK" --secret-key-file "$WORK/sk-file"

#--- stored credentials, and the environment overriding them -----------------------------
VOLDB="sqlite3://$WORK/cred.db"
# A second key of the gateway's user, stored at format time and revoked afterwards: a
# mount that works with it revoked must have used the environment's key.
RGWADM=""
if [ -n "${KEG_S3_DIR:-}" ] && [ -f "$KEG_S3_DIR/ceph.conf" ] && command -v radosgw-admin >/dev/null \
   && grep -q "beast endpoint=${ENDPOINT#*://} " "$KEG_S3_DIR/ceph.conf"; then
  RGWADM="radosgw-admin -c $KEG_S3_DIR/ceph.conf -n client.admin"
fi
if [ -n "$RGWADM" ]; then
  UID_=""
  for u in $($RGWADM user list 2>/dev/null | tr -d '[]",'); do
    if $RGWADM user info --uid="$u" 2>/dev/null | grep -qF "\"access_key\": \"$AK\""; then
      UID_=$u
      break
    fi
  done
  [ -n "$UID_" ] || RGWADM=""
fi
if [ -n "$RGWADM" ]; then
  AK2="KEGFE$RANDOM$RANDOM"
  # the gateway generates the secret (never on a command line); read it from its answer
  kc=$($RGWADM key create --uid="$UID_" --key-type=s3 --access-key="$AK2" --gen-secret \
    2>/dev/null) || fail "radosgw-admin key create failed"
  SK2=$(printf '%s\n' "$kc" | grep -A2 -F "\"access_key\": \"$AK2\"" \
    | sed -n 's/.*"secret_key": *"\([^"]*\)".*/\1/p' | head -1)
  [ -n "$SK2" ] || fail "radosgw-admin key create printed no secret for $AK2"
  SECRETS+=("$SK2")
  STORED_AK=$AK2 STORED_SK=$SK2
else
  note "no radosgw-admin for this gateway: the override is checked with the one key"
  STORED_AK=$AK STORED_SK=$SK
fi
printf '%s\n' "$STORED_SK" > "$WORK/sk2-file"
"$KEGFS" format --storage s3 --bucket "$S3URL" --access-key "$STORED_AK" \
  --secret-key-file "$WORK/sk2-file" "$VOLDB" "cred-$$" > "$WORK/cred-format.out" 2>&1 \
  || fail "format with valid keys: $(cat "$WORK/cred-format.out")"
grep -q 'secret.*\*\*\*\*' "$WORK/cred-format.out" || note "format output shows no masked secret line"

# nothing but META_URL: the stored keys
head -c 300000 /dev/urandom > "$WORK/data"
wr() { timeout 120 dd if="$WORK/data" of="$1" bs=1M conv=fsync status=none; }   # write + fsync
m2_mount "$WORK/m1" "$WORK/m1.log" "$VOLDB"
wr "$WORK/m1/a" || fail "write with the stored keys"
m2_umount "$WORK/m1"
m2_mount "$WORK/m1" "$WORK/m1.log" "$VOLDB"
cmp "$WORK/data" "$WORK/m1/a" || fail "read back with the stored keys"
m2_umount "$WORK/m1"
note "mount with the stored credentials only: ok"

if [ -n "$RGWADM" ]; then
  $RGWADM key rm --uid="$UID_" --key-type=s3 --access-key="$AK2" > /dev/null 2>&1 \
    || fail "radosgw-admin key rm failed"
  # the environment overrides the (now revoked) stored key
  M2_DIRS="$M2_DIRS $WORK/m2"
  (export AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK
   m2_mount "$WORK/m2" "$WORK/m2.log" "$VOLDB") || exit 1
  cmp "$WORK/data" "$WORK/m2/a" || fail "read with the environment's keys over a revoked stored key"
  wr "$WORK/m2/b" || fail "write with the environment's keys over a revoked stored key"
  m2_umount "$WORK/m2"
  note "AWS_* in the environment override the stored (revoked) key: ok"
  # and without the override, the revoked stored key is really refused
  m2_mount "$WORK/m3" "$WORK/m3.log" "$VOLDB"
  if wr "$WORK/m3/c" 2> "$WORK/m3.err"; then
    fail "a write with the revoked stored key succeeded (the gateway did not refuse it?)"
  fi
  note "revoked stored key: $(head -1 "$WORK/m3.err")"
  grep -q 'InvalidAccessKeyId' "$WORK/m3.log" || soft_fail "the mounter log of the revoked key has no InvalidAccessKeyId"
  m2_umount "$WORK/m3"
fi

# no secret anywhere in what kegfs printed or logged
for s in "${SECRETS[@]}"; do
  if grep -rlF -- "$s" "$WORK"/*.out "$WORK"/*.log "$WORK"/*.status "$MT_LOG" 2>/dev/null; then
    soft_fail "a secret key appears in the files listed above"
  fi
done
finish
