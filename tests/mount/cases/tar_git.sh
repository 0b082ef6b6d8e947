#!/usr/bin/env bash
# tar_git.sh -- tar -xf of a generated tree (~3000 files, symlinks, hard links, odd modes)
# into the mount must equal the same archive extracted locally (content, types, modes,
# sizes, link counts, mtimes); then git init/add/commit/fsck/gc inside the mount.
# timeout: 600
. "$(dirname "$0")/../lib.sh"
need_cmd tar diff

src=$WORK/src
mkdir -p "$src"
n=0
for d in $(seq 1 30); do
  dir=$src/dir$d/sub$((d % 4))
  mkdir -p "$dir"
  for f in $(seq 1 95); do
    size=$(( (d * 131 + f * 977) % 9000 ))
    printf '%*s%d/%d\n' "$size" '' "$d" "$f" > "$dir/file$f.txt"
    n=$((n + 1))
  done
  head -c $(( (d % 5) * 70000 + 1 )) /dev/urandom > "$dir/blob.bin"
  ln -s "file1.txt" "$dir/link-to-file1"
  ln -s "../../dir$(( d % 30 + 1 ))" "$dir/link-to-other-dir"
  ln -s "/nonexistent/$d" "$dir/dangling"
  ln "$dir/file2.txt" "$dir/hardlink-file2"
  ln "$dir/file3.txt" "$src/dir$d/hardlink-up-file3"
  chmod 0755 "$dir/file4.txt"
  chmod 0600 "$dir/file5.txt"
  chmod 1777 "$src/dir$d"
  mkdir -p "$src/dir$d/empty"
done
mkfifo "$src/fifo"
: > "$src/empty-file"
note "$n generated files"
tar -C "$WORK" -cf "$WORK/src.tar" src || fail "tar -c"
mkdir -p "$WORK/ref"
tar -C "$WORK/ref" -xpf "$WORK/src.tar" || fail "local tar -x"

t0=$SECONDS
tar -C "$MNT" -xpf "$WORK/src.tar" || fail "tar -xf into the mount"
note "tar -x into the mount in $((SECONDS - t0)) s"
diff -r --no-dereference --exclude=fifo "$WORK/ref/src" "$MNT/src" > "$WORK/diff.out" 2>&1 \
  || fail "diff -r: $(head -5 "$WORK/diff.out")"
manifest() { (cd "$1" && find . -printf '%p %y %m %s %n %T@ %l\n' | LC_ALL=C sort); }
manifest "$WORK/ref/src" > "$WORK/m.ref"
manifest "$MNT/src" > "$WORK/m.mnt"
if ! cmp -s "$WORK/m.ref" "$WORK/m.mnt"; then
  diff "$WORK/m.ref" "$WORK/m.mnt" | head -10
  soft_fail "metadata differs between the local and the mounted extraction"
fi
# an archive made from the mount extracts to the same tree (its member order, and so
# which hard link is stored as the file, follows readdir order, which is unspecified)
tar -C "$MNT" -cf "$WORK/back.tar" src || fail "tar -c from the mount"
mkdir -p "$WORK/back"
tar -C "$WORK/back" -xpf "$WORK/back.tar" || fail "tar -x of the archive made from the mount"
manifest "$WORK/back/src" > "$WORK/m.back"
cmp -s "$WORK/m.ref" "$WORK/m.back" \
  || soft_fail "the archive made from the mount differs: $(diff "$WORK/m.ref" "$WORK/m.back" | head -4)"

if command -v git >/dev/null 2>&1; then
  cd "$MNT/src" || fail "cd"
  export GIT_CONFIG_NOSYSTEM=1 HOME=$WORK
  git init -q . || fail "git init"
  git config user.email t@example.invalid && git config user.name test
  git add -A || fail "git add"
  git commit -q -m "tree" || fail "git commit"
  git fsck --full --strict 2>&1 | tee "$WORK/fsck.out" | grep -qiE 'error|missing|corrupt' \
    && fail "git fsck: $(head -5 "$WORK/fsck.out")"
  git fsck --full >/dev/null 2>&1 || fail "git fsck failed"
  [ -z "$(git status --porcelain)" ] || fail "git status not clean after commit"
  git gc -q 2>/dev/null || fail "git gc"
  git fsck --full >/dev/null 2>&1 || fail "git fsck after gc failed"
  echo change >> dir1/sub1/file1.txt
  git commit -qam change || fail "second commit"
  assert_eq "$(git rev-list --count HEAD)" 2 "commit count"
  cd "$WORK" || true
else
  note "git not installed: git part skipped"
fi
rm -rf "$MNT/src" || fail "rm -rf"
finish
