#!/usr/bin/env bash
# acl.sh -- POSIX ACLs are enforced (FUSE's POSIX ACL mode): `setfacl -m u:nobody:---` on a
# 0666 file denies uid 65534 while another uid still reads; the mode bits follow the ACL
# mask and chmod changes the mask; default ACLs are inherited by new files and directories
# (umask ignored there, applied elsewhere); setting an access ACL as an owner outside the
# file's group clears S_ISGID; getfacl/setfacl round-trip; ACLs survive a remount and
# `kegfs dump` / `kegfs load`; with -o noacl setfacl fails with EOPNOTSUPP.
# timeout: 180
# mount: -o allow_other
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd setfacl getfacl setpriv
grep -q 'POSIX ACLs on' "$MT_LOG" || fail "the mounter did not turn POSIX ACLs on: $(grep 'POSIX ACLs' "$MT_LOG")"

as_uid() {   # as_uid UID CMD...
  local u=$1
  shift
  setpriv --reuid="$u" --regid="$u" --clear-groups -- "$@"
}
mode_of() { stat -c %a "$1"; }

cd "$MNT" || fail "cd"
umask 022
# 1. a named-user entry with no permissions on a world-readable, world-writable file
printf 'secret\n' > f && chmod 0666 f || fail "setup f"
as_uid 65534 cat f >/dev/null || fail "uid 65534 cannot read a 0666 file before any ACL"
setfacl -m u:65534:--- f || fail "setfacl -m u:65534:--- f"
out=$(as_uid 65534 cat f 2>&1) && fail "uid 65534 read f despite u:65534:--- ($out)"
echo "$out" | grep -q 'Permission denied' || fail "uid 65534 reading f: $out"
out=$(as_uid 65534 sh -c 'echo x >> f' 2>&1) && fail "uid 65534 wrote f despite u:65534:---"
assert_eq "$(as_uid 12345 cat f)" secret "another uid reads f (other::rw-)"
assert_eq "$(mode_of f)" 666 "mode of f after setfacl (mask rw-)"
ls -l f | grep -q '^-rw-rw-rw-+' || fail "ls -l does not show the ACL: $(ls -l f)"
# the mode bits follow the mask, and chmod changes the mask
setfacl -m m::r-- f || fail "setfacl -m m::r--"
assert_eq "$(mode_of f)" 646 "mode after mask r--"
chmod 0640 f || fail "chmod 640"
getfacl -cpnE f | grep -qx 'mask::r--' || fail "mask after chmod 640: $(getfacl -cpnE f)"
getfacl -cpnE f | grep -qx 'other::---' || fail "other after chmod 640: $(getfacl -cpnE f)"
getfacl -cpnE f | grep -qx 'user:65534:---' || fail "named entry lost by chmod: $(getfacl -cpnE f)"
# an ACL equal to the mode bits is no extended ACL
setfacl -b f || fail "setfacl -b"
ls -l f | grep -q '^-rw-r-----  *1 ' || fail "setfacl -b left an ACL: $(ls -l f)"
setfacl --set u::rwx,g::r-x,o::--x f || fail "setfacl --set (minimal)"
assert_eq "$(mode_of f)" 751 "mode after a minimal ACL"
getfattr -n system.posix_acl_access f >/dev/null 2>&1 && fail "a minimal ACL was stored as an xattr"

# 2. default ACLs: inherited by new files and directories; the umask is ignored there
mkdir d && chmod 0777 d || fail "mkdir d"
setfacl -d -m u:65534:rwx,g::r-x,o::--- d || fail "setfacl -d"
umask 077
touch d/newf && mkdir d/newd || fail "create in d"
umask 022
assert_eq "$(mode_of d/newf)" 660 "new file under a default ACL (umask 077 ignored)"
assert_eq "$(mode_of d/newd)" 770 "new directory under a default ACL"
getfacl -cpnE d/newf | grep -qx 'user:65534:rwx' || fail "d/newf lacks the inherited entry"
getfacl -cpnE d/newd | grep -qx 'default:user:65534:rwx' || fail "d/newd lacks the default ACL"
as_uid 65534 sh -c 'echo hi > d/newf' || fail "uid 65534 cannot write d/newf (inherited rw)"
as_uid 12345 cat d/newf >/dev/null 2>&1 && fail "uid 12345 read d/newf (other::---)"
as_uid 65534 touch d/newd/byn || fail "uid 65534 cannot create in d/newd (inherited rwx)"
getfacl -cpnE d/newd/byn | grep -qx 'user:65534:rwx' || fail "grandchild lacks the inherited entry"
mkdir plain && touch plain/x || fail "mkdir plain"
assert_eq "$(mode_of plain/x)" 644 "umask 022 without a default ACL"

# 3. setgid: an owner outside the file's group setting an access ACL loses S_ISGID
mkdir sg && chmod 0777 sg || fail "mkdir sg"
touch sg/g && chown 65534:0 sg/g && chmod 2775 sg/g || fail "setup sg/g"
assert_eq "$(mode_of sg/g)" 2775 "setgid file"
as_uid 65534 setfacl -m u:12345:r-- sg/g || fail "owner uid 65534 setfacl"
assert_eq "$(mode_of sg/g)" 775 "S_ISGID after setfacl by an owner outside the group"
as_uid 12345 setfacl -m u:12345:rwx sg/g 2>/dev/null && fail "a non-owner set an ACL"

# 4. getfacl/setfacl round trip
setfacl -m u:65534:r-x,g:100:rw-,u:12345:--- f || fail "setfacl several entries"
getfacl -pn f > "$WORK/f.acl" || fail "getfacl f"
touch g && setfacl --set-file=- g < <(sed 's/^# file: .*$//' "$WORK/f.acl") || fail "setfacl --set-file"
diff <(getfacl -cpnE f) <(getfacl -cpnE g) || fail "ACL round trip differs"
getfacl -cpnE f > "$WORK/before.acl"
getfacl -cpnER d > "$WORK/before-d.acl"

# 5. survives a remount
cd / && mt_umount && mt_mount && cd "$MNT" || fail "remount"
diff "$WORK/before.acl" <(getfacl -cpnE f) || fail "ACL of f changed across a remount"
diff "$WORK/before-d.acl" <(getfacl -cpnER d) || fail "ACLs under d changed across a remount"
setfacl -m u:65534:--- f || fail "setfacl after remount"
as_uid 65534 cat f >/dev/null 2>&1 && fail "uid 65534 read f after remount"

# 6. dump / load keep them
getfacl -cpnE f > "$WORK/before.acl"
cd /
"$KEGFS" dump "$META" "$WORK/d.json" 2>/dev/null || fail "kegfs dump"
"$KEGFS" load "sqlite3://$WORK/loaded.db" "$WORK/d.json" 2>/dev/null || fail "kegfs load"
mkdir -p "$WORK/m2"
"$KEGFS" mount -d --read-only -o allow_other --log-file "$MT_LOG" "sqlite3://$WORK/loaded.db" "$WORK/m2" \
  >/dev/null || fail "mount the loaded copy"
diff "$WORK/before.acl" <(cd "$WORK/m2" && getfacl -cpnE f) || fail "ACL of f changed by dump/load"
diff "$WORK/before-d.acl" <(cd "$WORK/m2" && getfacl -cpnER d) || fail "ACLs under d changed by dump/load"
(cd "$WORK/m2" && as_uid 65534 cat f >/dev/null 2>&1) && fail "uid 65534 read the loaded f"
"$KEGFS" umount "$WORK/m2" || fail "umount the loaded copy"

# 7. -o noacl: nothing enforces ACLs, so none can be set
mt_umount
mt_mount -o noacl
grep -q 'POSIX ACLs off (-o noacl)' "$MT_LOG" || fail "-o noacl not logged"
out=$(setfacl -m u:65534:rwx "$MNT/g" 2>&1) && fail "setfacl succeeded with -o noacl"
echo "$out" | grep -q 'Operation not supported' || fail "setfacl with -o noacl: $out"
exit 0
