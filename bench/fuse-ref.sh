#!/usr/bin/env bash
# fuse-ref.sh -- build libfuse's own passthrough_hp (the FUSE reference of `make bench`)
# from Debian's fuse3 source package, against the installed libfuse3-dev.
#
#   bench/fuse-ref.sh BUILD_DIR        prints the path of the binary on success
#
# The source is fetched with `apt-get source` into BUILD_DIR/bench/fuse-ref/src (a cache:
# fetched once, never part of the repository); only example/passthrough_hp.cc is compiled,
# with the HAVE_* switches libfuse's build would set here (xattrs, utimensat, fallocate).
# Three settings are changed in the compiled copy so that the reference can be mounted the
# way KegFS mounts (bench/run.sh passes the values):
#   * the kernel cache timeout (entry and attribute) comes from $PTHP_TIMEOUT (seconds;
#     upstream: 86400, or 0 with --nocache); KegFS's default is 1 s
#   * PTHP_NO_WRITEBACK=1 keeps the kernel's writeback cache off (upstream asks for it
#     whenever the timeout is not 0; KegFS never does: see docs/benchmarks.md)
#   * allow_other is added to the upstream mount options (default_permissions,fsname=hpps)
# Needs deb-src lines in the apt sources (added as /etc/apt/sources.list.d/
# kegfs-bench-src.sources for the running Debian release when no deb-src is configured,
# with the URI of the machine's own Debian entry: deb.debian.org when apt names none),
# dpkg-dev, g++ and libfuse3-dev (scripts/install-deps.sh bench).
set -euo pipefail

[ $# = 1 ] || { echo "usage: bench/fuse-ref.sh BUILD_DIR" >&2; exit 2; }
B=$(cd "$1" && pwd)
W=$B/bench/fuse-ref
BIN=$W/passthrough_hp
mkdir -p "$W/src"

ver=$(dpkg-query -W -f='${Version}' libfuse3-dev 2>/dev/null) ||
  { echo "fuse-ref: libfuse3-dev is not installed" >&2; exit 1; }
# the stamp names the package version and this script: a change to either rebuilds
stamp="$W/built-for-$ver-$(sha1sum "$0" | cut -c1-12)"
if [ -x "$BIN" ] && [ -e "$stamp" ]; then
  echo "$BIN"
  exit 0
fi

# apt_wait CMD...: run an apt-get command, waiting (up to 15 min) while another apt/dpkg
# holds the lock (as scripts/install-deps.sh does)
apt_wait() {
  local out rc waited=0
  while :; do
    out=$("$@" 2>&1) && return 0
    rc=$?
    if echo "$out" | grep -qiE 'could not get lock|unable to acquire the dpkg|is another process using it'; then
      [ $waited -ge 900 ] && { echo "$out" >&2; return $rc; }
      [ $waited = 0 ] && echo "fuse-ref: another apt/dpkg is running; waiting for its lock..." >&2
      sleep 5
      waited=$((waited + 5))
      continue
    fi
    echo "$out" >&2
    return $rc
  done
}

src=$(find "$W/src" -maxdepth 3 -path '*/example/passthrough_hp.cc' 2>/dev/null | head -1)
if [ -z "$src" ]; then
  if ! grep -rqs '^\(Types:.*deb-src\|deb-src\)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    [ "$(id -u)" = 0 ] || { echo "fuse-ref: no deb-src in the apt sources (needs root to add)" >&2; exit 1; }
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    # the mirror the machine installs from (a machine may reach no other): the entry
    # whose Release file says Origin Debian, suite CODENAME, component main
    uri=$(apt-cache policy 2>/dev/null | awk -v s="$codename/main" '
      $2 ~ /^[a-z+]+:/ && $3 == s { u = $2; next }
      u && $1 == "release" && /o=Debian,/ { print u; exit }
      { u = "" }')
    uri=${uri:-http://deb.debian.org/debian}
    echo "fuse-ref: adding deb-src for $codename from $uri (/etc/apt/sources.list.d/kegfs-bench-src.sources)" >&2
    cat > /etc/apt/sources.list.d/kegfs-bench-src.sources <<EOF
Types: deb-src
URIs: $uri
Suites: $codename $codename-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt_wait apt-get update -qq
  fi
  echo "fuse-ref: fetching Debian's fuse3 source package into $W/src" >&2
  # apt-get source as root drops to _apt for the download; a directory it can write avoids
  # the "unsandboxed" warning but is not needed
  if ! (cd "$W/src" && apt_wait apt-get source --download-only fuse3); then
    if [ "$(id -u)" = 0 ]; then
      apt_wait apt-get update -qq
      (cd "$W/src" && apt_wait apt-get source --download-only fuse3)
    else
      exit 1
    fi
  fi
  orig=$(ls "$W"/src/fuse3_*.orig.tar.* | head -1)
  tar -C "$W/src" -xf "$orig"
  src=$(find "$W/src" -maxdepth 3 -path '*/example/passthrough_hp.cc' | head -1)
  [ -n "$src" ] || { echo "fuse-ref: no example/passthrough_hp.cc in $orig" >&2; exit 1; }
fi

cp "$src" "$W/passthrough_hp.cc"
cp "$(dirname "$src")/cxxopts.hpp" "$W/"
# the three settings above; fail loudly when the upstream text changed
grep -q 'fs.timeout = options.count("nocache") ? 0 : 86400.0;' "$W/passthrough_hp.cc" &&
  grep -q 'if (fs.timeout && conn->capable & FUSE_CAP_WRITEBACK_CACHE)' "$W/passthrough_hp.cc" &&
  grep -q '"default_permissions,fsname=hpps"' "$W/passthrough_hp.cc" ||
  { echo "fuse-ref: $src does not have the expected timeout / writeback / mount option lines" >&2
    exit 1; }
sed -i \
  -e 's|if (fs.timeout && conn->capable & FUSE_CAP_WRITEBACK_CACHE)|if (fs.timeout \&\& !getenv("PTHP_NO_WRITEBACK") \&\& conn->capable \& FUSE_CAP_WRITEBACK_CACHE)|' \
  -e 's|fs.timeout = options.count("nocache") ? 0 : 86400.0;|fs.timeout = options.count("nocache") ? 0 : (getenv("PTHP_TIMEOUT") ? atof(getenv("PTHP_TIMEOUT")) : 86400.0);|' \
  -e 's|"default_permissions,fsname=hpps"|"default_permissions,allow_other,fsname=hpps"|' \
  "$W/passthrough_hp.cc"
# the HAVE_<FUNCTION> switches of the source (xattrs, utimensat, fallocate...), set as
# libfuse's own meson build sets them: on when this system's C library has the function.
# Without them the example answers ENOSYS / EOPNOTSUPP to those requests and does less
# work than a file system must.
defs=()
for m in $(grep -o 'HAVE_[A-Z_]*' "$W/passthrough_hp.cc" | sort -u); do
  f=$(echo "${m#HAVE_}" | tr 'A-Z' 'a-z')
  if printf '#define _GNU_SOURCE\n#include <fcntl.h>\n#include <stdio.h>\n#include <sys/stat.h>\n#include <sys/xattr.h>\n#include <unistd.h>\nint main(void) { void (*volatile p)(void) = (void (*)(void))%s; return p == 0; }\n' "$f" |
       cc -x c - -o "$W/have-test" 2>/dev/null; then
    defs+=("-D$m")
  fi
done
rm -f "$W/have-test"
echo "fuse-ref: compiling with ${defs[*]:-no HAVE_ switches}" >&2
# shellcheck disable=SC2046
g++ -std=c++17 -O2 "${defs[@]}" -o "$BIN.tmp" "$W/passthrough_hp.cc" -I"$W" \
  $(pkg-config --cflags --libs fuse3) -lpthread >&2
mv "$BIN.tmp" "$BIN"
rm -f "$W"/built-for-*
touch "$stamp"
echo "$BIN"
