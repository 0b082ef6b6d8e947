# obj_lib.sh -- the volume's objects, seen from outside kegfs, for the mount cases
# (tests/mount/cases/*.sh), sourced after lib.sh.  Not a case itself.
#
# Works for both stores the runner formats with: file (the runner's OBJDIR) and s3
# (the runner's BUCKET, an http(s)://host[:port]/bucket[/prefix] URL, talked to with
# `curl --aws-sigv4`, so the signature-checking gateway sees ordinary S3 requests).
# Keys are the store's keys: "<volume>/chunks/...", the same for both.
#
#   need_objstore           skip unless the objects can be reached (OBJDIR or S3 + keys)
#   obj_list [SUB]          "KEY SIZE" of every object under "<VOL>/SUB" (default
#                           "chunks/"), sorted by key; temporary files left out
#   obj_keys [SUB]          just the keys
#   obj_get KEY FILE        copy an object into FILE
#   obj_put KEY FILE        store FILE as the object KEY (overwrites)
#   obj_del KEY             remove an object
#   obj_exists KEY          status 0 when the object exists
#   s3_curl ARGS...         curl with SigV4 signing (credentials from the environment,
#                           passed on stdin so they never show in `ps`)
#
# S3 credentials: KEG_TEST_S3_ACCESS_KEY / KEG_TEST_S3_SECRET_KEY, else
# AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (the runner exports both for --storage s3).
# Region: $KEG_TEST_S3_REGION or us-east-1.

OBJ_S3_ENDPOINT=""    # http://host:port
OBJ_S3_BUCKET=""
OBJ_S3_PREFIX=""      # "" or "some/prefix/"

obj_is_s3() {
  [ "${STORAGE:-}" = s3 ]
}

# Split BUCKET into endpoint, bucket and prefix (path-style URLs only).
obj_s3_parse() {
  local url=${1%%\?*} rest
  case "$url" in
    http://*|https://*) ;;
    *) return 1 ;;
  esac
  OBJ_S3_ENDPOINT=${url%%://*}://
  rest=${url#*://}
  OBJ_S3_ENDPOINT=$OBJ_S3_ENDPOINT${rest%%/*}
  rest=${rest#*/}
  [ "$rest" != "${url#*://}" ] || return 1
  OBJ_S3_BUCKET=${rest%%/*}
  [ -n "$OBJ_S3_BUCKET" ] || return 1
  OBJ_S3_PREFIX=""
  if [ "$rest" != "$OBJ_S3_BUCKET" ]; then
    OBJ_S3_PREFIX=${rest#*/}
    [ -z "$OBJ_S3_PREFIX" ] || OBJ_S3_PREFIX=${OBJ_S3_PREFIX%/}/
  fi
  return 0
}

need_objstore() {
  if obj_is_s3; then
    need_cmd curl
    obj_s3_parse "${BUCKET:-}" || skip "BUCKET '${BUCKET:-}' is not an http(s)://host/bucket URL"
    [ -n "${KEG_TEST_S3_ACCESS_KEY:-${AWS_ACCESS_KEY_ID:-}}" ] \
      && [ -n "${KEG_TEST_S3_SECRET_KEY:-${AWS_SECRET_ACCESS_KEY:-}}" ] \
      || skip "no S3 credentials in the environment"
  else
    need_objdir
  fi
}

s3_curl() {
  local ak=${KEG_TEST_S3_ACCESS_KEY:-${AWS_ACCESS_KEY_ID:-}}
  local sk=${KEG_TEST_S3_SECRET_KEY:-${AWS_SECRET_ACCESS_KEY:-}}
  printf 'user = "%s:%s"\n' "$ak" "$sk" |
    curl -K - -sS -m 60 --aws-sigv4 "aws:amz:${KEG_TEST_S3_REGION:-us-east-1}:s3" \
      -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}

# s3_enc [-p] STRING: percent-encode every byte outside [A-Za-z0-9._~-] with upper-case
# hex, as SigV4's canonical form wants (curl signs the URL as given); -p keeps '/'.
s3_enc() {
  local keep='A-Za-z0-9._~-' s out="" c i
  if [ "$1" = -p ]; then keep="/$keep"; shift; fi
  s=$1
  local LC_ALL=C
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    if [[ $c == [$keep] ]]; then out+=$c; else out+=$(printf '%%%02X' "'$c"); fi
  done
  echo "$out"
}

# s3_url KEY: the object's URL.
s3_url() {
  echo "$OBJ_S3_ENDPOINT/$OBJ_S3_BUCKET/$(s3_enc -p "$OBJ_S3_PREFIX$1")"
}

obj_list() {
  local sub=${1-chunks/}
  if ! obj_is_s3; then
    [ -n "$OBJDIR" ] && [ -d "$OBJDIR" ] || return 0
    (cd "$OBJDIR" && find . -type f -path "./${VOL:-*}/$sub*" ! -name '.tmp.*' \
       -printf '%P %s\n' 2>/dev/null) | sort
    return 0
  fi
  local prefix=$OBJ_S3_PREFIX$VOL/$sub token="" page n=0
  while :; do
    # the query in canonical order (sorted names), encoded the canonical way
    local q="list-type=2${OBJ_S3_MAX_KEYS:+&max-keys=$OBJ_S3_MAX_KEYS}&prefix=$(s3_enc "$prefix")"
    [ -z "$token" ] || q="continuation-token=$(s3_enc "$token")&$q"
    page=$(s3_curl -f "$OBJ_S3_ENDPOINT/$OBJ_S3_BUCKET/?$q") || {
      echo "obj_list: listing $prefix failed" >&2
      return 1
    }
    # one <Contents> per line, then Key and Size out of each
    echo "$page" | sed 's#<Contents>#\n<Contents>#g' | grep '^<Contents>' |
      sed -n 's#.*<Key>\([^<]*\)</Key>.*<Size>\([0-9]*\)</Size>.*#\1 \2#p' |
      sed -e 's/&amp;/\&/g' -e 's/&lt;/</g' -e 's/&gt;/>/g' -e 's/&quot;/"/g' -e "s/&apos;/'/g" |
      { if [ -n "$OBJ_S3_PREFIX" ]; then sed "s#^$OBJ_S3_PREFIX##"; else cat; fi; }
    echo "$page" | grep -q '<IsTruncated>true</IsTruncated>' || break
    token=$(echo "$page" | sed -n 's#.*<NextContinuationToken>\([^<]*\)</NextContinuationToken>.*#\1#p')
    [ -n "$token" ] || { echo "obj_list: truncated page without a token" >&2; return 1; }
    n=$((n + 1))
    [ $n -lt 10000 ] || return 1
  done | sort
}

obj_keys() {
  obj_list "$@" | awk '{ print $1 }'
}

obj_get() {   # obj_get KEY FILE
  if obj_is_s3; then
    s3_curl -f -o "$2" "$(s3_url "$1")"
  else
    cp "$OBJDIR/$1" "$2"
  fi
}

obj_put() {   # obj_put KEY FILE
  if obj_is_s3; then
    s3_curl -f -o /dev/null -T "$2" "$(s3_url "$1")"
  else
    mkdir -p "$(dirname "$OBJDIR/$1")" && cp "$2" "$OBJDIR/$1"
  fi
}

obj_del() {   # obj_del KEY
  if obj_is_s3; then
    s3_curl -f -o /dev/null -X DELETE "$(s3_url "$1")"
  else
    rm -f "$OBJDIR/$1"
  fi
}

obj_exists() {   # obj_exists KEY
  if obj_is_s3; then
    local code
    code=$(s3_curl -o /dev/null -w '%{http_code}' -I "$(s3_url "$1")")
    [ "$code" = 200 ]
  else
    [ -f "$OBJDIR/$1" ]
  fi
}
