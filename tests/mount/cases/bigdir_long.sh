#!/usr/bin/env bash
# bigdir_long.sh -- bigdir.sh with 100000 entries (runs only with --long).
# timeout: 2400
export BIGDIR_N=100000
export BIGDIR_RSS_MIB=${BIGDIR_RSS_MIB:-300}
exec bash "$(dirname "$0")/bigdir.sh"
