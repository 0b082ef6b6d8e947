#!/usr/bin/env bash
# permissions.sh -- shell-level permission rules as uid 65534 (setpriv): mkdir and create
# in a 1777 dir, the sticky bit protects other users' files, 0600 files and 0755 dirs of
# root are closed, new files are owned by the creator; root still can do everything.
# timeout: 120
# mount: -o allow_other
# (uid 65534 uses the mount: a CLI mount is owner-only by default)
. "$(dirname "$0")/../lib.sh"
need_cmd setpriv
[ "$(id -u)" = 0 ] || skip "needs root"

cd "$MNT" || fail "cd"
mkdir pub closed && chmod 1777 pub && chmod 0755 closed || fail "setup dirs"
printf 'root' > pub/rootfile && chmod 0666 pub/rootfile
printf 'secret' > closed/secret && chmod 0600 closed/secret
printf 'open' > closed/open && chmod 0644 closed/open

as_nobody mkdir pub/nobodydir || fail "nobody cannot mkdir in a 1777 dir"
as_nobody sh -c 'printf mine > pub/nobodydir/mine && chmod 0600 pub/nobodydir/mine' \
  || fail "nobody cannot create a file in its own dir"
assert_eq "$(stat -c %u:%g pub/nobodydir pub/nobodydir/mine | tr '\n' ' ')" \
  "65534:65534 65534:65534 " "owner of nobody's new dir and file"
out=$(as_nobody rm -f pub/rootfile 2>&1) && fail "nobody deleted root's file in a sticky dir"
echo "$out" | grep -qE 'Operation not permitted|Permission denied' || fail "rm message: $out"
[ -f pub/rootfile ] || fail "root's file is gone"
out=$(as_nobody mv pub/rootfile pub/stolen 2>&1) && fail "nobody renamed root's file in a sticky dir"
as_nobody sh -c 'printf x >> pub/rootfile' || fail "nobody cannot write a 0666 file"
assert_eq "$(cat pub/rootfile)" rootx "content after nobody's append"
out=$(as_nobody cat closed/secret 2>&1) && fail "nobody read root's 0600 file"
echo "$out" | grep -q 'Permission denied' || fail "cat message: $out"
assert_eq "$(as_nobody cat closed/open)" open "nobody reads a 0644 file"
out=$(as_nobody touch closed/new 2>&1) && fail "nobody created a file in root's 0755 dir"
echo "$out" | grep -q 'Permission denied' || fail "touch message: $out"
out=$(as_nobody chmod 0777 closed/open 2>&1) && fail "nobody chmod'ed root's file"
echo "$out" | grep -q 'Operation not permitted' || fail "chmod message: $out"
out=$(as_nobody chown 65534 closed/open 2>&1) && fail "nobody chown'ed root's file"
# a private dir of nobody keeps out a third user
as_nobody chmod 0700 pub/nobodydir || fail "chmod own dir"
out=$(setpriv --reuid=4321 --regid=4321 --clear-groups -- ls pub/nobodydir 2>&1) \
  && fail "uid 4321 listed nobody's 0700 dir"
# group permissions: group-readable file for a supplementary group
printf 'grp' > closed/grp && chgrp 777 closed/grp && chmod 0640 closed/grp
assert_eq "$(setpriv --reuid=4321 --regid=4321 --groups=777 -- cat closed/grp 2>&1)" grp \
  "read through a supplementary group"
out=$(setpriv --reuid=4321 --regid=4321 --clear-groups -- cat closed/grp 2>&1) \
  && fail "read of a 0640 file without the group"
# nobody removes its own things; root removes anything
as_nobody rm -rf pub/nobodydir || fail "nobody cannot remove its own dir"
cat closed/secret > /dev/null || fail "root cannot read a 0600 file"
rm -rf pub closed || fail "root cleanup"
