#!/usr/bin/env bash
# sqlite_file_modes.sh -- the SQLite database holds the object store's secret key, so it and
# its -wal/-shm files are mode 0600 whatever the umask; an existing database readable by
# others is tightened to 0600 (with a WARN line) when it is opened.
# needs: sqlite
# timeout: 60
. "$(dirname "$0")/../lib.sh"
need_kegfs

DB=${META#sqlite3://}
[ -f "$DB" ] || fail "no database file at $DB"

mode_of() { stat -c %a "$1"; }

# 1. the runner's volume, mounted: database and its WAL/SHM are owner-only
printf 'x' > "$MNT/f" && sync || fail "write"
for f in "$DB" "$DB-wal" "$DB-shm"; do
    [ -e "$f" ] || continue
    assert_eq "$(mode_of "$f")" 600 "mode of $f"
done

# 2. a fresh format under umask 000 still makes a 0600 database
B=$WORK/modes
mkdir -p "$B/objs"
(umask 000 && "$KEGFS" format --storage file --bucket "$B/objs" "sqlite3://$B/m.db" vol2) \
    > "$B/format.log" 2>&1 || fail "format: $(cat "$B/format.log")"
assert_eq "$(mode_of "$B/m.db")" 600 "mode of a database formatted under umask 000"
for f in "$B/m.db-wal" "$B/m.db-shm"; do
    [ -e "$f" ] && assert_eq "$(mode_of "$f")" 600 "mode of $f"
done

# 3. an existing database (and WAL) readable by others is tightened when opened, and says so
chmod 0644 "$B/m.db"
: > "$B/m.db-wal"
chmod 0666 "$B/m.db-wal"
"$KEGFS" status "sqlite3://$B/m.db" > "$B/status.log" 2>&1 || fail "status: $(cat "$B/status.log")"
assert_eq "$(mode_of "$B/m.db")" 600 "mode of a 0644 database after status"
# (SQLite removes the WAL when the last connection closes: the warning shows it was fixed)
[ -e "$B/m.db-wal" ] && assert_eq "$(mode_of "$B/m.db-wal")" 600 "mode of a 0666 WAL after status"
grep -q 'm.db had mode 0644; tightened to 0600' "$B/status.log" \
    || fail "no warning about the database's loose mode: $(cat "$B/status.log")"
grep -q 'm.db-wal had mode 0666; tightened to 0600' "$B/status.log" \
    || fail "no warning about the WAL's loose mode: $(cat "$B/status.log")"
exit 0
