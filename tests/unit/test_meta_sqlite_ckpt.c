/* test_meta_sqlite_ckpt.c -- the SQLite engine's checkpoints
 * (core/meta/meta_sqlite.c, "checkpoints"), through the engine's API on real
 * SQLite files: a log of 1000 pages or more is copied into the database file
 * by the engine's own thread, with no further commit to run it; under a
 * stream of commits the log is restarted and stays bounded; the thread ends
 * with the engine; and every commit is there afterwards, in a database file
 * SQLite's own checks find intact. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "keg/meta.h"

#define PAGE      4096                      /* SQLite's default page size */
#define FRAME     (PAGE + 24)               /* a WAL frame: header and page */
#define CKPT      1000                      /* SQ_CKPT_PAGES */
#define THREAD    "keg-sqlite-ckpt"

static char g_dir[64];
static char g_db[128], g_wal[140], g_url[160];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/keg-sqckpt-XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(g_db, sizeof(g_db), "%s/v.db", g_dir);
    snprintf(g_wal, sizeof(g_wal), "%s-wal", g_db);
    snprintf(g_url, sizeof(g_url), "sqlite3://%s", g_db);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static struct keg_meta *vol_open(int format)
{
    struct keg_meta *m = NULL;
    assert_int_equal(keg_meta_open(g_url, &m), 0);
    if (format) {
        struct keg_format f;
        memset(&f, 0, sizeof(f));
        snprintf(f.name, sizeof(f.name), "ckpt");
        snprintf(f.uuid, sizeof(f.uuid), "5d0c2a3e-6c1f-4a8e-9b7d-0e1f2a3b4c5d");
        snprintf(f.storage, sizeof(f.storage), "file");
        snprintf(f.bucket, sizeof(f.bucket), "%s/objects", g_dir);
        f.block_size = 4u << 20;
        f.meta_version = 1;
        f.created = 1700000000;
        assert_int_equal(keg_meta_format_init(m, &f, 0755, 0, 0, 0), 0);
    }
    return m;
}

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

static long long wal_pages(void)
{
    long long n = file_size(g_wal);
    return n > 32 ? (n - 32) / FRAME : 0;   /* a 32-byte header, then frames */
}

/* Threads of this process named name. */
static int threads_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    assert_non_null(d);
    while ((e = readdir(d))) {
        char path[300], comm[64] = "";
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;     /* ended meanwhile */
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        n += strcmp(comm, name) == 0;
    }
    closedir(d);
    return n;
}

/* Commit k: an xattr of about 3 KiB on the root (two or three log pages). */
static void commit(struct keg_meta *m, int k)
{
    char name[32], val[3000];
    snprintf(name, sizeof(name), "user.k%06d", k);
    memset(val, 'a' + k % 26, sizeof(val));
    assert_int_equal(keg_meta_setxattr(m, KEG_ROOT_INO, name, val, sizeof(val), 0), 0);
}

/* Every commit 0..n-1 as SQLite's own connection reads the file: the
 * database intact, every value there. */
static void assert_all_there(int n)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(g_db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*), sum(length(value)) FROM xattr"
                                        " WHERE ino=1 AND CAST(name AS TEXT) LIKE 'user.k%'",
                                        -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(st, 0), n);
    assert_int_equal(sqlite3_column_int64(st, 1), (long long)n * 3000);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* A log of CKPT pages or more reaches the database file without another
 * commit: the engine's thread copied it (SQLite's own auto-checkpoint is off,
 * it runs only inside a commit); the thread ends with the engine. */
static void test_checkpoint_in_background(void **state)
{
    (void)state;
    struct keg_meta *m = vol_open(1);
    int k = 0;
    assert_int_equal(threads_named(THREAD), 0);
    while (wal_pages() < CKPT / 2)
        commit(m, k++);
    assert_int_equal(threads_named(THREAD), 0);   /* not needed yet */
    long long before = file_size(g_db);
    while (wal_pages() < CKPT + 10)
        commit(m, k++);
    /* no commit from here on */
    int waited = 0;
    while (file_size(g_db) < before + (long long)CKPT / 10 * PAGE && waited < 10000) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        waited += 10;
    }
    /* (the log holds several versions of some pages: its size is an upper bound) */
    assert_true(file_size(g_db) >= before + (long long)CKPT / 10 * PAGE);
    assert_int_equal(threads_named(THREAD), 1);
    keg_meta_close(m);
    assert_int_equal(threads_named(THREAD), 0);
    assert_all_there(k);
}

/* A stream of commits, 50 µs apart: the log is restarted again and again
 * (the checkpointer's last, writer-holding lap), so it never holds more than
 * a fraction of what was written; every commit survives a reopen. */
static void test_log_bounded_under_commits(void **state)
{
    (void)state;
    struct keg_meta *m = vol_open(1);
    long long most = 0;
    int k = 0;
    while (k < 8000) {
        struct timespec gap = {0, 50 * 1000};   /* the rest of an op: FUSE, the caller */
        nanosleep(&gap, NULL);
        commit(m, k++);
        long long w = wal_pages();
        most = w > most ? w : most;
    }
    /* written: about 10 pages of log per 4 commits, 20,000 in all; without
     * the thread's rounds the log would reach SQ_CKPT_HARD (16,000) */
    assert_true(most < 4 * CKPT);
    keg_meta_close(m);
    assert_int_equal(threads_named(THREAD), 0);
    m = vol_open(0);
    char val[3000];
    assert_int_equal(keg_meta_getxattr(m, KEG_ROOT_INO, "user.k007999", val, sizeof(val)), 3000);
    keg_meta_close(m);
    assert_all_there(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_checkpoint_in_background, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_bounded_under_commits, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
