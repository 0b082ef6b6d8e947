#!/usr/bin/env bash
# install-deps.sh -- install the Debian packages KegFS needs that are missing.
#
#   scripts/install-deps.sh run    build + mount the embedded default (SQLite + local directory)
#   scripts/install-deps.sh test   everything `make test` needs (Redis, Ceph S3 gateway, tools)
#   scripts/install-deps.sh bench  `make test`'s set plus what `make bench` measures and draws
#                                  with (s3fs, rclone, fio, gnuplot, dpkg-dev for
#                                  `apt-get source fuse3`)
#
# Installs only what dpkg does not already have; runs `apt-get update` once, only
# when something is missing.  Needs root (or sudo) when something is missing.
set -euo pipefail

RUN_PKGS=(
  build-essential cmake pkg-config git ca-certificates
  fuse3 libfuse3-dev
  libsqlite3-dev sqlite3
  libhiredis-dev
  libcurl4-openssl-dev libssl-dev libexpat1-dev
  libyaml-dev libyajl-dev libmicrohttpd-dev
  liblz4-dev libzstd-dev
  protobuf-c-compiler libprotobuf-c-dev libgrpc-dev libprotobuf-dev protobuf-compiler
  libcmocka-dev
)
TEST_PKGS=(
  redis-server redis-tools
  radosgw ceph-mon ceph-osd ceph-common
  attr acl util-linux procps psmisc curl xxd
  python3 python3-grpcio python3-grpc-tools python3-yaml
)
BENCH_PKGS=(
  s3fs rclone fio gnuplot-nox dpkg-dev git time
)

want=("${RUN_PKGS[@]}")
case "${1:-run}" in
  test) want+=("${TEST_PKGS[@]}") ;;
  bench) want+=("${TEST_PKGS[@]}" "${BENCH_PKGS[@]}") ;;
esac

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive

# apt_wait CMD...: run an apt-get command; while another apt/dpkg holds its lock
# (usual on a freshly booted cloud VM running unattended-upgrades), say so and
# wait for it (up to 15 minutes) instead of failing.
apt_wait() {
  local out rc waited=0
  while :; do
    out=$("$@" 2>&1) && return 0
    rc=$?
    if echo "$out" | grep -qiE 'could not get lock|unable to acquire the dpkg|is another process using it'; then
      if [ $waited -ge 900 ]; then
        echo "install-deps: another apt/dpkg still holds the package lock after 15 minutes" >&2
        echo "$out" >&2
        return $rc
      fi
      [ $waited = 0 ] && echo "install-deps: another apt/dpkg is running; waiting for its lock..." >&2
      sleep 5
      waited=$((waited + 5))
      continue
    fi
    echo "$out" >&2
    return $rc
  done
}
apt_wait $SUDO apt-get update -qq
apt_wait $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
