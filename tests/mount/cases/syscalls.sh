#!/usr/bin/env bash
# syscalls.sh -- the C POSIX exerciser (keg_syscalls, tests/mount/syscalls.c) on the mount.
# timeout: 300
# mount: -o allow_other
# (its permission checks run as uid 65534: a CLI mount is owner-only by default)
. "$(dirname "$0")/../lib.sh"
need_bin KEG_SYSCALLS keg_syscalls

"$KEG_SYSCALLS" -q "$MNT" || fail "keg_syscalls reported failures (see FAIL lines above)"
