#!/usr/bin/env bash
# default_access.sh -- a CLI mount belongs to the user who mounted it: a new volume's root
# is 0755 and owned by the user who formatted it, and the mount has no allow_other unless
# asked (-o allow_other), so another local user (uid 65534) can neither read nor write it.
# With -o allow_other others may use it, and the 0755 root still keeps them from writing.
# timeout: 60
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd setpriv

# 1. the runner's volume: root 0755, owned by the formatting user (root here)
assert_eq "$(stat -c '%a %u %g' "$MNT")" "755 $(id -u) $(id -g)" "mode and owner of a new root"
opts=$(awk -v m="$MNT" '$2 == m {print $4}' /proc/mounts)
case ",$opts," in
  *,allow_other,*) fail "a default mount has allow_other: $opts" ;;
esac
printf 'mine' > "$MNT/f" || fail "the owner cannot write"
as_nobody ls "$MNT" > /dev/null 2>&1 && fail "another user can list a mount without allow_other"
as_nobody cat "$MNT/f" > /dev/null 2>&1 && fail "another user can read a mount without allow_other"
as_nobody touch "$MNT/x" 2>/dev/null && fail "another user can create in a mount without allow_other"

# 2. mounted again with -o allow_other: others read, but cannot write into the 0755 root
mt_umount
mt_mount -o allow_other
opts=$(awk -v m="$MNT" '$2 == m {print $4}' /proc/mounts)
case ",$opts," in
  *,allow_other,*) ;;
  *) fail "-o allow_other not in the mount options: $opts" ;;
esac
assert_eq "$(as_nobody cat "$MNT/f")" mine "another user reads with allow_other"
as_nobody touch "$MNT/x" 2>/dev/null && fail "another user created a file in the 0755 root"
[ -e "$MNT/x" ] && fail "$MNT/x exists"
# the owner shares a directory explicitly
mkdir "$MNT/pub" && chmod 1777 "$MNT/pub" || fail "mkdir pub"
as_nobody touch "$MNT/pub/x" || fail "another user cannot create in a 1777 directory"
exit 0
