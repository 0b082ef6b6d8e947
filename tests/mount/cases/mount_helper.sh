#!/usr/bin/env bash
# mount_helper.sh -- generic mount options and the mount(8) helper: `kegfs mount -o relatime,...`
# accepts the options mount(8) and fstab pass and maps the kernel flags; `mount -t kegfs`,
# an fstab line (type kegfs and fuse.kegfs) and `mount -o remount,ro|rw` work through
# mount.kegfs / mount.fuse.kegfs; a read-only remount refuses writes with EROFS.
# The helpers are made visible in /sbin only inside a private mount namespace (an overlay of
# a work directory over /usr/sbin), so nothing is installed on the machine.
# timeout: 120
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd unshare mount

opts_of() {   # the per-mount options of $MNT (mountinfo field 6)
  awk -v m="$MNT" '$5 == m { print $6 }' /proc/self/mountinfo | tail -1
}

if [ -z "${MT_HELPER_NS:-}" ]; then
  mt_umount
  # 1. kegfs mount itself: generic options accepted, flags mapped in order
  mt_mount -o relatime,noatime,nodev,nodiratime,defaults,_netdev,auto,nofail,user,nouser,x-systemd.requires=a,comment=x
  o=$(opts_of)
  note "kegfs mount -o relatime,noatime,...: $o"
  echo ",$o," | grep -q ',noatime,' || fail "noatime (given after relatime) not applied: $o"
  echo ",$o," | grep -q ',nodiratime,' || fail "nodiratime not applied: $o"
  echo ",$o," | grep -q ',nodev,' || fail "nodev not applied: $o"
  printf 'one' > "$MNT/f" || fail "write on a mount with generic options"
  # remount through kegfs itself
  "$KEGFS" mount -o remount,ro "$MNT" || fail "kegfs mount -o remount,ro"
  out=$(sh -c "printf x >> '$MNT/f'" 2>&1) && fail "append succeeded after remount,ro"
  echo "$out" | grep -q 'Read-only file system' || fail "append after remount,ro: $out"
  o=$(opts_of)
  echo ",$o," | grep -q ',ro,' || fail "mountinfo does not say ro: $o"
  echo ",$o," | grep -q ',noatime,' || fail "remount,ro lost noatime: $o"
  "$KEGFS" mount -o remount,rw "$MNT" || fail "kegfs mount -o remount,rw"
  printf 'two' >> "$MNT/f" || fail "append after remount,rw"
  mt_umount
  expect_fail 'unknown option' "$KEGFS" mount -o surely_not_an_option "$META" "$MNT"

  mkdir -p "$WORK/sbin"
  ln -s "$KEGFS" "$WORK/sbin/mount.kegfs"
  ln -s "$KEGFS" "$WORK/sbin/mount.fuse.kegfs"
  MT_HELPER_NS=1 exec unshare -m --propagation private bash "$0"
fi

# --- inside the private mount namespace ---
cleanup() {
  is_mounted && "$KEGFS" umount "$MNT" >/dev/null 2>&1
  umount /usr/sbin 2>/dev/null
}
trap cleanup EXIT
mount -t overlay kegfs-sbin -o "lowerdir=$WORK/sbin:/usr/sbin" /usr/sbin \
  || skip "cannot overlay /usr/sbin in a private mount namespace"
[ -x /sbin/mount.kegfs ] || skip "/sbin is not /usr/sbin here"

# 2. mount -t kegfs META MNT (the helper backgrounds the mounter; mount returns when it is live)
mount -t kegfs -o "relatime,nodev,_netdev,log_file=$MT_LOG" "$META" "$MNT" \
  || fail "mount -t kegfs $META $MNT"
is_mounted || fail "not mounted after mount -t kegfs returned"
assert_eq "$(cat "$MNT/f")" onetwo "content through mount -t kegfs"
o=$(opts_of)
echo ",$o," | grep -q ',relatime,' || fail "relatime not applied: $o"

# 3. remount,ro through mount(8) (which runs mount.fuse.kegfs for type fuse.kegfs)
mount -o remount,ro "$MNT" || fail "mount -o remount,ro"
o=$(opts_of)
echo ",$o," | grep -q ',ro,' || fail "mountinfo does not say ro after remount,ro: $o"
echo ",$o," | grep -q ',nodev,' || fail "remount,ro lost nodev: $o"
for cmd in "touch $MNT/new" "mkdir $MNT/d" "rm $MNT/f" "chmod 600 $MNT/f" "truncate -s 0 $MNT/f"; do
  out=$($cmd 2>&1) && fail "'$cmd' succeeded after remount,ro"
  echo "$out" | grep -q 'Read-only file system' || fail "'$cmd' after remount,ro: $out"
done
assert_eq "$(cat "$MNT/f")" onetwo "read after remount,ro"
mount -o remount,rw "$MNT" || fail "mount -o remount,rw"
printf 'three' >> "$MNT/f" || fail "append after remount,rw"
touch "$MNT/new" || fail "create after remount,rw"
"$KEGFS" umount "$MNT" || fail "kegfs umount after mount -t kegfs"
is_mounted && fail "still mounted"

# 4. fstab lines, type kegfs and fuse.kegfs (mount --fstab reads another fstab)
for t in kegfs fuse.kegfs; do
  printf '%s %s %s defaults,noatime,_netdev,nofail,x-systemd.automount,log_file=%s 0 0\n' \
    "$META" "$MNT" "$t" "$MT_LOG" > "$WORK/fstab"
  mount --fstab "$WORK/fstab" "$MNT" || fail "mount MNT from an fstab line of type $t"
  is_mounted || fail "fstab ($t): not mounted"
  o=$(opts_of)
  echo ",$o," | grep -q ',noatime,' || fail "fstab ($t): noatime not applied: $o"
  assert_eq "$(cat "$MNT/f")" onetwothree "content through fstab ($t)"
  "$KEGFS" umount "$MNT" || fail "kegfs umount ($t)"
done
# the META_URL in a 0600 config file (config=FILE), SPEC "kegfs"; unmounted with umount(8)
printf 'meta-url: "%s"\nlog-file: "%s"\n' "$META" "$MT_LOG" > "$WORK/vol.yaml"
chmod 600 "$WORK/vol.yaml"
printf 'kegfs %s kegfs _netdev,config=%s 0 0\n' "$MNT" "$WORK/vol.yaml" > "$WORK/fstab"
mount --fstab "$WORK/fstab" "$MNT" || fail "mount MNT from an fstab line with config="
assert_eq "$(cat "$MNT/f")" onetwothree "content through fstab with config="
pid=$(pgrep -f "^/sbin/mount.kegfs kegfs $MNT " | head -1)
[ -n "$pid" ] || fail "no mounter process named /sbin/mount.kegfs"
umount "$MNT" || fail "umount(8) of a kegfs mount"
wait_for 20 sh -c "! kill -0 $pid 2>/dev/null" || fail "the mounter did not exit after umount(8)"
# an fstab line with ro: writes fail with EROFS
printf '%s %s kegfs ro,log_file=%s 0 0\n' "$META" "$MNT" "$MT_LOG" > "$WORK/fstab"
mount --fstab "$WORK/fstab" "$MNT" || fail "mount MNT from an fstab line with ro"
out=$(touch "$MNT/x" 2>&1) && fail "create on an fstab ro mount succeeded"
echo "$out" | grep -q 'Read-only file system' || fail "create on an fstab ro mount: $out"
"$KEGFS" umount "$MNT" || fail "kegfs umount (ro)"
# a helper failure is reported by mount(8)
out=$(mount -t kegfs "sqlite3://$WORK/nonexistent.db" "$MNT" 2>&1) \
  && fail "mount -t kegfs of a missing volume succeeded"
note "missing volume: $out"
is_mounted && fail "mounted a missing volume"
exit 0
