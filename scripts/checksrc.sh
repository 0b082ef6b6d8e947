#!/usr/bin/env bash
# checksrc.sh -- reject banned functions in our C sources.
#   strcpy sprintf atoi strtok gets: unsafe or error-swallowing
#   malloc/calloc/realloc/free/strdup: only in core/util/keg_mem.c (allocation-failure tests)
set -uo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files 'core/*.c' 'core/*.h' 'mounter/*.c' 'mounter/*.h' 'csi/*.c' 'csi/*.h' | grep -v '^core/util/keg_mem.c$')
bad=0
check() {
  local what=$1 re=$2
  local hits
  hits=$(grep -nE "$re" $files 2>/dev/null | grep -vE '^\S+:[0-9]+:\s*(/?\*|//)' | grep -v 'checksrc: ok')
  if [ -n "$hits" ]; then
    echo "checksrc: $what:"
    echo "$hits" | sed 's/^/  /'
    bad=1
  fi
}
check "banned unsafe function" '(^|[^_a-zA-Z0-9.>])(strcpy|sprintf|vsprintf|atoi|atol|strtok|gets)\('
check "raw allocation (use keg_malloc/keg_free)" '(^|[^_a-zA-Z0-9.>])(malloc|calloc|realloc|free|strdup|strndup)\('
if [ $bad = 0 ]; then
  echo "checksrc: 1 passed, 0 failed"
else
  echo "checksrc: 0 passed, 1 failed"
  exit 1
fi
