#!/usr/bin/env bash
# apps.sh -- real programs on the mount: O_DIRECT I/O (dd), a compiler writing and the
# kernel executing a binary from the mount, and SQLite databases (WAL with its mmap'ed
# -shm file and a concurrent writer + reader, and rollback-journal mode) that pass
# integrity_check; each part is skipped when its tool is missing.
# timeout: 300
. "$(dirname "$0")/../lib.sh"

cd "$MNT" || fail "cd"
mkdir app && cd app || fail "mkdir"

# O_DIRECT write and read, compared with the source
head -c $((8 * 1024 * 1024)) /dev/urandom > "$WORK/direct.src"
dd if="$WORK/direct.src" of=direct bs=1M oflag=direct status=none || fail "dd oflag=direct"
cmp "$WORK/direct.src" direct || fail "O_DIRECT write differs"
dd if=direct of="$WORK/direct.back" bs=1M iflag=direct status=none || fail "dd iflag=direct"
cmp "$WORK/direct.src" "$WORK/direct.back" || fail "O_DIRECT read differs"
# buffered rewrite then O_DIRECT read sees it (no stale page cache on either path)
printf 'BUFFERED' | dd of=direct bs=1 seek=4096 conv=notrunc status=none
assert_eq "$(dd if=direct bs=4096 skip=1 count=1 iflag=direct status=none | head -c 8)" BUFFERED \
  "O_DIRECT read after a buffered write"

if command -v cc >/dev/null 2>&1; then
  printf '#include <stdio.h>\nint main(void) { puts("ran from kegfs"); return 0; }\n' > hello.c
  cc -O1 -o hello hello.c || fail "cc in the mount"
  assert_eq "$(./hello)" "ran from kegfs" "binary executed from the mount"
  cp hello hello2 && assert_eq "$(./hello2)" "ran from kegfs" "copied binary"
else
  note "no C compiler: compile part skipped"
fi

if command -v sqlite3 >/dev/null 2>&1; then
  sq() { sqlite3 -cmd '.timeout 20000' "$@"; }
  sq wal.db 'pragma journal_mode=wal; create table t(a integer primary key, b blob);' >/dev/null \
    || fail "sqlite3 create (WAL)"
  ( for i in $(seq 1 20); do
      sq wal.db "with recursive c(x) as (select 1 union all select x+1 from c where x<500)
                      insert into t(b) select randomblob(200) from c;" || exit 1
    done ) &
  writer=$!
  reads=0
  while kill -0 $writer 2>/dev/null; do
    sq wal.db 'select count(*) from t;' >/dev/null || fail "concurrent sqlite3 reader failed"
    reads=$((reads + 1))
  done
  wait $writer || fail "sqlite3 writer failed"
  note "sqlite WAL: $reads reads during the writes"
  assert_eq "$(sq wal.db 'pragma integrity_check;')" ok "WAL integrity_check"
  assert_eq "$(sq wal.db 'select count(*) from t;')" 10000 "WAL row count"
  sq journal.db 'pragma journal_mode=delete; create table t(a); begin;
    insert into t values(1); insert into t values(2); commit; pragma integrity_check;' \
    > "$WORK/j.out" || fail "sqlite3 rollback journal"
  grep -qx ok "$WORK/j.out" || fail "journal integrity_check: $(cat "$WORK/j.out")"
  assert_eq "$(sq journal.db 'select sum(a) from t;')" 3 "journal content"
else
  note "no sqlite3: database part skipped"
fi
cd "$WORK" && rm -rf "$MNT/app" || fail "rm -rf"
