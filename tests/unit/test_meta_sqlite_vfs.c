/* test_meta_sqlite_vfs.c -- the SQLite engine's WAL-gathering VFS
 * (core/meta/meta_sqlite_vfs.c) on real SQLite files: one write per commit,
 * files any SQLite reads, other connections and processes in between, a
 * transaction that spills and rolls back, a process killed between commits,
 * and a full disk (a failed write never becomes a commit). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "meta/meta_sqlite_vfs_i.h"

static char g_dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/keg-sqvfs-XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    return sq_vfs_name() ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "%s/small", g_dir);
    umount2(cmd, MNT_DETACH);   /* left mounted by a failed test_full_disk */
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A connection as the engine opens one (WAL, synchronous=NORMAL); vfs NULL:
 * SQLite's default.  No assertions: forked children use it too.  NULL on
 * failure. */
static sqlite3 *db_connect(const char *name, const char *vfs)
{
    char path[128];
    sqlite3 *db = NULL;
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                        SQLITE_OPEN_NOMUTEX, vfs) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 5000);
    if (sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL,
                     NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

/* db_connect, and the tables made (before any other connection writes: a
 * schema change in autocommit may meet SQLITE_BUSY without waiting). */
static sqlite3 *db_open(const char *name, const char *vfs)
{
    sqlite3 *db = db_connect(name, vfs);
    assert_non_null(db);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS a(k INTEGER PRIMARY KEY, v BLOB);"
                                  "CREATE TABLE IF NOT EXISTS b(k INTEGER PRIMARY KEY, v BLOB);"
                                  "CREATE TABLE IF NOT EXISTS c(k INTEGER PRIMARY KEY, n INTEGER);"
                                  "INSERT OR IGNORE INTO c VALUES(1, 0);", NULL, NULL, NULL),
                     SQLITE_OK);
    return db;
}

/* One transaction touching three tables; returns SQLite's code of the commit. */
static int txn(sqlite3 *db, int k, int bytes)
{
    char sql[256];
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return rc;
    snprintf(sql, sizeof(sql),
             "INSERT INTO a VALUES(%d, randomblob(%d)); INSERT INTO b VALUES(%d, zeroblob(%d));"
             "UPDATE c SET n=n+1 WHERE k=1;", k, bytes, k, bytes);
    rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK && !sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static long long count(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    long long n = -1;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* The database as SQLite's default VFS sees it: intact, with n rows in each
 * table and the counter at n. */
static void assert_db(const char *name, long long n)
{
    sqlite3 *db = db_open(name, NULL);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    assert_int_equal(count(db, "SELECT count(*) FROM a"), n);
    assert_int_equal(count(db, "SELECT count(*) FROM b"), n);
    assert_int_equal(count(db, "SELECT n FROM c WHERE k=1"), n);
    sqlite3_close(db);
}

/* Three or more pages per commit, one write of the log file per commit. */
static void test_one_write_per_commit(void **state)
{
    (void)state;
    sqlite3 *db = db_open("gather.db", SQ_VFS_NAME);
    struct sq_vfs_stats s0, s1;
    const int n = 400;
    assert_int_equal(txn(db, 0, 100), SQLITE_OK);   /* the WAL's header and first frame */
    sq_vfs_stats(&s0);
    for (int i = 1; i <= n; i++)
        assert_int_equal(txn(db, i, 100), SQLITE_OK);
    sq_vfs_stats(&s1);
    /* at least three frames (header + page each) per commit... */
    assert_true(s1.wal_writes - s0.wal_writes >= 6ull * n);
    /* ...written once per commit, plus the checkpoints' restarts of the log */
    assert_true(s1.wal_flushes - s0.wal_flushes <= (unsigned long long)n + n / 20);
    sqlite3_close(db);
    assert_db("gather.db", n + 1);
}

/* Connections with and without the VFS, in this process and another, take
 * turns on one database: every commit of each is seen by the others. */
static void test_mixed_writers(void **state)
{
    (void)state;
    sqlite3_close(db_open("mixed.db", NULL));      /* the tables, before the fork */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sqlite3 *c = db_connect("mixed.db", SQ_VFS_NAME);
        int bad = !c;
        for (int i = 0; i < 300 && !bad; i++)
            bad |= txn(c, 100000 + i, 300) != SQLITE_OK;
        sqlite3_close(c);
        _exit(bad);
    }
    sqlite3 *g = db_connect("mixed.db", SQ_VFS_NAME);
    sqlite3 *d = db_connect("mixed.db", NULL);
    assert_non_null(g);
    assert_non_null(d);
    for (int i = 0; i < 300; i++) {
        char sql[64];
        assert_int_equal(txn(i % 2 ? g : d, i, 300), SQLITE_OK);
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM b WHERE k=%d", i);
        assert_int_equal(count(i % 2 ? d : g, sql), 1);    /* the other sees it at once */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(count(d, "SELECT count(*) FROM a"), 600);
    sqlite3_close(g);
    sqlite3_close(d);
    assert_db("mixed.db", 600);
}

/* A transaction larger than the page cache writes frames before its commit;
 * rolled back, they must never land on frames another connection committed
 * meanwhile.  Then the same with a commit. */
static void test_spill_then_rollback(void **state)
{
    (void)state;
    sqlite3 *big = db_open("spill.db", SQ_VFS_NAME);
    sqlite3 *other = db_open("spill.db", SQ_VFS_NAME);
    assert_int_equal(sqlite3_exec(big, "PRAGMA cache_size=10", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(txn(other, 1, 10), SQLITE_OK);

    struct sq_vfs_stats s0, s1;
    sq_vfs_stats(&s0);
    assert_int_equal(sqlite3_exec(big, "BEGIN IMMEDIATE;"
                                  "WITH RECURSIVE s(i) AS (SELECT 1000 UNION ALL SELECT i+1 FROM s"
                                  " WHERE i<1060) INSERT INTO a SELECT i, randomblob(900) FROM s;",
                                  NULL, NULL, NULL), SQLITE_OK);     /* ~15 pages: a few spilled */
    sq_vfs_stats(&s1);
    assert_true(s1.wal_writes > s0.wal_writes);     /* frames before any commit */
    assert_int_equal(sqlite3_exec(big, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    for (int i = 2; i <= 40; i++)
        assert_int_equal(txn(other, i, 2000), SQLITE_OK);
    assert_int_equal(count(big, "SELECT count(*) FROM a"), 40);
    assert_int_equal(txn(big, 41, 10), SQLITE_OK);

    assert_int_equal(sqlite3_exec(big, "BEGIN IMMEDIATE;"
                                  "WITH RECURSIVE s(i) AS (SELECT 1000 UNION ALL SELECT i+1 FROM s"
                                  " WHERE i<3000) INSERT INTO b SELECT i, randomblob(900) FROM s;"
                                  "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(count(other, "SELECT count(*) FROM b"), 41 + 2001);
    assert_int_equal(sqlite3_exec(big, "DELETE FROM b WHERE k>=1000", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(big);
    sqlite3_close(other);
    assert_db("spill.db", 41);
}

/* A process killed between commits loses none of the commits it made. */
static void test_killed_writer_keeps_commits(void **state)
{
    (void)state;
    int fds[2];
    sqlite3_close(db_open("kill.db", NULL));       /* the tables, before the fork */
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        sqlite3 *c = db_connect("kill.db", SQ_VFS_NAME);
        if (!c)
            _exit(1);
        for (int i = 1;; i++) {
            if (txn(c, i, 200) != SQLITE_OK)
                _exit(1);
            if (write(fds[1], &i, sizeof(i)) != (ssize_t)sizeof(i))
                _exit(1);
        }
    }
    close(fds[1]);
    int last = 0, i;
    while (last < 500 && read(fds[0], &i, sizeof(i)) == (ssize_t)sizeof(i))
        last = i;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    while (read(fds[0], &i, sizeof(i)) == (ssize_t)sizeof(i))
        last = i;       /* commits reported before it died */
    close(fds[0]);
    assert_true(last >= 500);
    sqlite3 *db = db_open("kill.db", NULL);
    long long n = count(db, "SELECT count(*) FROM a");
    sqlite3_close(db);
    /* every reported commit is there; at most the one in flight more */
    assert_true(n == last || n == last + 1);
    assert_db("kill.db", n);
}

/* On a full file system the commit that cannot write its frames fails, and
 * no connection ever sees it; the database stays intact. */
static void test_full_disk(void **state)
{
    (void)state;
    char mnt[96], path[128];
    snprintf(mnt, sizeof(mnt), "%s/small", g_dir);
    assert_int_equal(mkdir(mnt, 0700), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=512k") != 0)
        skip();     /* needs root (make test runs as root) */
    snprintf(path, sizeof(path), "small/full.db");
    sqlite3 *w = db_open(path, SQ_VFS_NAME);
    sqlite3 *r = db_open(path, NULL);
    assert_int_equal(sqlite3_exec(w, "PRAGMA wal_autocheckpoint=0", NULL, NULL, NULL), SQLITE_OK);
    int ok = 0, rc = SQLITE_OK;
    for (int i = 1; i < 10000; i++) {
        rc = txn(w, i, 3000);
        if (rc != SQLITE_OK)
            break;
        ok++;
    }
    assert_int_equal(rc & 0xff, SQLITE_FULL);
    assert_true(ok > 10);
    /* neither connection sees the failed commit, and both keep working */
    assert_int_equal(count(r, "SELECT count(*) FROM a"), ok);
    assert_int_equal(count(w, "SELECT count(*) FROM a"), ok);
    assert_int_equal(count(r, "SELECT n FROM c WHERE k=1"), ok);
    sqlite3_close(r);
    sqlite3_close(w);
    assert_db(path, ok);
    assert_int_equal(umount2(mnt, MNT_DETACH), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_write_per_commit),
        cmocka_unit_test(test_mixed_writers),
        cmocka_unit_test(test_spill_then_rollback),
        cmocka_unit_test(test_killed_writer_keeps_commits),
        cmocka_unit_test(test_full_disk),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
