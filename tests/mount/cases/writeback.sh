#!/usr/bin/env bash
# writeback.sh -- --writeback with a --cache-dir: the random-I/O model and the data-path
# POSIX checks behave exactly as without it, and after `kegfs umount` (which drains the
# uploads) files read back whole from a mount WITHOUT the cache (the object store).
# Crashes with staged data are wb_crash.sh's subject.
# timeout: 600
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_bin KEG_FSMODEL keg_fsmodel
need_bin KEG_SYSCALLS keg_syscalls

CACHE=$WORK/cache
WB=(--cache-dir "$CACHE" --cache-size 512M --writeback --upload-workers 2)
mt_umount
mt_mount "${WB[@]}"
"$KEG_FSMODEL" -s "${KEG_TEST_SEED:-4242}" -n 1500 -m 160 "$MNT/model" || fail "keg_fsmodel under --writeback"
rm -f "$MNT/model"
"$KEG_SYSCALLS" -q -t open,rw,truncate,stat,rename,unlinked_open,mmap,buffered,fallocate "$MNT" \
  || fail "keg_syscalls under --writeback"

# files written under --writeback, drained by umount, read back without the cache
mkdir -p "$MNT/wb" "$WORK/src"
for i in $(seq 1 12); do
  head -c $((i * 700000 + 13)) /dev/urandom > "$WORK/src/f$i"
  cp "$WORK/src/f$i" "$MNT/wb/f$i" || fail "cp f$i"
done
(cd "$WORK/src" && sha256sum f*) > "$WORK/sums"
(cd "$MNT/wb" && sha256sum -c --quiet "$WORK/sums") || fail "files differ under --writeback"
mt_umount                       # drains staged uploads
mt_mount                        # no cache dir: everything from the object store
(cd "$MNT/wb" && sha256sum -c --quiet "$WORK/sums") \
  || fail "files differ when read from the object store (staged blocks not uploaded?)"
