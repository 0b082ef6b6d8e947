#!/usr/bin/env bash
# bigdir_long.sh -- bigdir.sh with 1000000 entries (runs only with --long).
# timeout: 7200
export BIGDIR_N=1000000
export BIGDIR_RSS_MIB=${BIGDIR_RSS_MIB:-300}
exec bash "$(dirname "$0")/bigdir.sh"
