/* test_mnt_util.c -- unit tests of the mounter's helpers: size/seconds parsing,
 * mount-point paths, the state file and the nlookup table (fuse_inode.c).
 * No FUSE, no root: the sources are compiled into this test directly. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../mounter/mnt_util.c"
#include "../../mounter/fuse_inode.c"

static void test_parse_size(void **state)
{
    uint64_t v = 1;
    assert_int_equal(mnt_parse_size("123", &v), 0);
    assert_int_equal(v, 123);
    assert_int_equal(mnt_parse_size("4M", &v), 0);
    assert_int_equal(v, 4u << 20);
    assert_int_equal(mnt_parse_size("4MiB", &v), 0);
    assert_int_equal(v, 4u << 20);
    assert_int_equal(mnt_parse_size("64k", &v), 0);
    assert_int_equal(v, 64u << 10);
    assert_int_equal(mnt_parse_size("10G", &v), 0);
    assert_int_equal(v, 10ULL << 30);
    assert_int_equal(mnt_parse_size("2T", &v), 0);
    assert_int_equal(v, 2ULL << 40);
    assert_int_equal(mnt_parse_size("7B", &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(mnt_parse_size("1.5G", &v), -EINVAL);
    assert_int_equal(v, 0);
    assert_int_equal(mnt_parse_size("", &v), -EINVAL);
    assert_int_equal(mnt_parse_size("G", &v), -EINVAL);
    assert_int_equal(mnt_parse_size("-1", &v), -EINVAL);
    assert_int_equal(mnt_parse_size("4X", &v), -EINVAL);
    assert_int_equal(mnt_parse_size("4Mx", &v), -EINVAL);
    assert_int_equal(mnt_parse_size("99999P", &v), -ERANGE);
    assert_int_equal(mnt_parse_size("99999999999999999999999", &v), -ERANGE);
}

static void test_parse_u64_seconds(void **state)
{
    uint64_t u = 9;
    double d = 9;
    assert_int_equal(mnt_parse_u64("0", &u), 0);
    assert_int_equal(u, 0);
    assert_int_equal(mnt_parse_u64("18446744073709551615", &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(mnt_parse_u64("12a", &u), -EINVAL);
    assert_int_equal(mnt_parse_u64(" 1", &u), -EINVAL);
    assert_int_equal(mnt_parse_seconds("1", &d), 0);
    assert_true(d == 1.0);
    assert_int_equal(mnt_parse_seconds("0.25", &d), 0);
    assert_true(d == 0.25);
    assert_int_equal(mnt_parse_seconds("-1", &d), -EINVAL);
    assert_int_equal(mnt_parse_seconds("1s", &d), -EINVAL);
}

static void test_fmt_size(void **state)
{
    char b[32];
    assert_string_equal(mnt_fmt_size(512, b, sizeof(b)), "512 B");
    assert_string_equal(mnt_fmt_size(4u << 20, b, sizeof(b)), "4 MiB");
    assert_string_equal(mnt_fmt_size(1536, b, sizeof(b)), "1.5 KiB");
}

static void test_paths(void **state)
{
    char *abs = NULL;
    char h1[17], h2[17];
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(mnt_abspath(".", &abs), 0);
    assert_string_equal(abs, cwd);
    keg_free(abs);
    assert_int_equal(mnt_abspath("/no/such/dir/kegfs-test", &abs), -ENOENT);
    assert_null(abs);
    assert_int_equal(mnt_abspath("", &abs), -EINVAL);

    mnt_path_hash("/mnt/a", h1);
    mnt_path_hash("/mnt/a", h2);
    assert_string_equal(h1, h2);
    assert_int_equal(strlen(h1), 16);
    mnt_path_hash("/mnt/b", h2);
    assert_string_not_equal(h1, h2);

    char fstype[64];
    assert_int_equal(mnt_is_mountpoint("/", fstype, sizeof(fstype)), 1);
    assert_true(fstype[0] != '\0');
    assert_int_equal(mnt_is_mountpoint("/proc", fstype, sizeof(fstype)), 1);
    assert_string_equal(fstype, "proc");
    assert_int_equal(mnt_is_mountpoint("/proc/self", NULL, 0), 0);
}

static void test_state_file(void **state)
{
    char dir[] = "/tmp/kegfs-test-run-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("KEGFS_RUN_DIR", dir, 1);
    assert_string_equal(mnt_run_dir(), dir);

    pid_t pid = 0;
    char *url = NULL;
    assert_int_equal(mnt_state_read("/mnt/x", &pid, &url), -ENOENT);
    assert_null(url);
    assert_int_equal(mnt_state_write("/mnt/x", 4242, "redis://:secret@127.0.0.1:6379/1", 0), 0);
    assert_int_equal(mnt_state_read("/mnt/x", &pid, &url), 0);
    assert_int_equal(pid, 4242);
    assert_string_equal(url, "redis://:secret@127.0.0.1:6379/1");
    keg_free(url);

    /* the file holds a password: owner-only */
    char h[17];
    struct stat st;
    mnt_path_hash("/mnt/x", h);
    char *path = keg_asprintf("%s/mounts/%s", dir, h);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    /* rewriting replaces atomically */
    assert_int_equal(mnt_state_write("/mnt/x", 7, "sqlite3:///tmp/m.db", 45), 0);
    assert_int_equal(mnt_state_read("/mnt/x", &pid, NULL), 0);
    assert_int_equal(pid, 7);
    assert_int_equal(mnt_state_drain_timeout("/mnt/x"), 45);
    assert_int_equal(mnt_state_drain_timeout("/mnt/none"), 0);

    /* pruning keeps the files of live mounters and drops the dead ones */
    assert_int_equal(mnt_state_write("/mnt/live", getpid(), "sqlite3:///l.db", 0), 0);
    pid_t dead = fork();
    assert_true(dead >= 0);
    if (dead == 0)
        _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    assert_int_equal(mnt_state_write("/mnt/dead", dead, "sqlite3:///d.db", 0), 0);
    mnt_state_prune();
    assert_int_equal(mnt_state_read("/mnt/live", &pid, NULL), 0);
    assert_int_equal(pid, getpid());
    assert_int_equal(mnt_state_read("/mnt/dead", &pid, NULL), -ENOENT);
    /* only the mounter that wrote the file removes it (a newer mount at the
     * same path keeps its own) */
    mnt_state_remove("/mnt/live", dead);
    assert_int_equal(mnt_state_read("/mnt/live", &pid, NULL), 0);
    mnt_state_remove("/mnt/live", getpid());
    assert_int_equal(mnt_state_read("/mnt/live", &pid, NULL), -ENOENT);

    mnt_state_remove("/mnt/x", 0);
    assert_int_equal(stat(path, &st), -1);
    assert_int_equal(mnt_state_read("/mnt/x", &pid, &url), -ENOENT);
    keg_free(path);

    char *mdir = keg_asprintf("%s/mounts", dir);
    rmdir(mdir);
    keg_free(mdir);
    rmdir(dir);
    unsetenv("KEGFS_RUN_DIR");
}

static void test_read_small_file(void **state)
{
    char path[] = "/tmp/kegfs-test-secret-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "s3cr3t\n\n", 8), 8);
    close(fd);
    char *s = NULL;
    assert_int_equal(mnt_read_small_file(path, &s), 0);
    assert_string_equal(s, "s3cr3t");
    keg_free(s);
    unlink(path);
    assert_int_equal(mnt_read_small_file(path, &s), -ENOENT);
    assert_null(s);
}

static void test_inode_counts(void **state)
{
    mnt_inode_clear();
    assert_int_equal(mnt_inode_live(), 0);
    mnt_inode_ref(5, 1);
    mnt_inode_ref(5, 2);
    mnt_inode_ref(7, 1);
    assert_int_equal(mnt_inode_count(5), 3);
    assert_int_equal(mnt_inode_count(7), 1);
    assert_int_equal(mnt_inode_count(9), 0);
    assert_int_equal(mnt_inode_live(), 2);
    assert_int_equal(mnt_inode_unref(5, 2), 1);
    assert_int_equal(mnt_inode_unref(7, 1), 0);
    assert_int_equal(mnt_inode_live(), 1);
    assert_int_equal(mnt_inode_unref(5, 1), 0);
    assert_int_equal(mnt_inode_live(), 0);
    assert_int_equal(mnt_inode_unref(11, 0), 0);   /* forget of 0 is harmless */

    /* many inodes: the shards grow and every count survives */
    for (uint64_t i = 1; i <= 20000; i++)
        mnt_inode_ref(i * 7919, i % 3 + 1);
    assert_int_equal(mnt_inode_live(), 20000);
    for (uint64_t i = 1; i <= 20000; i++)
        assert_int_equal(mnt_inode_count(i * 7919), i % 3 + 1);
    for (uint64_t i = 1; i <= 20000; i++)
        assert_int_equal(mnt_inode_unref(i * 7919, i % 3 + 1), 0);
    assert_int_equal(mnt_inode_live(), 0);
    mnt_inode_clear();
}

/* A forget of more references than were given is a bug: the process aborts. */
static void test_inode_negative_panics(void **state)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, STDERR_FILENO);
        mnt_inode_ref(3, 1);
        mnt_inode_unref(3, 2);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGABRT);
}

/* A restarted worker: the kernel forgets references of the crashed worker; the
 * count stops at zero instead of aborting, and known counts still go down. */
static void test_inode_tolerant_after_restart(void **state)
{
    mnt_inode_clear();
    mnt_inode_tolerate_unknown(1);
    assert_int_equal(mnt_inode_unref(77, 5), 0);      /* never seen here */
    mnt_inode_ref(78, 1);
    assert_int_equal(mnt_inode_unref(78, 4), 0);      /* more than counted */
    assert_int_equal(mnt_inode_count(78), 0);
    assert_int_equal(mnt_inode_live(), 0);
    mnt_inode_ref(79, 3);
    assert_int_equal(mnt_inode_unref(79, 1), 2);
    mnt_inode_tolerate_unknown(0);
    mnt_inode_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_parse_u64_seconds),
        cmocka_unit_test(test_fmt_size),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_state_file),
        cmocka_unit_test(test_read_small_file),
        cmocka_unit_test(test_inode_counts),
        cmocka_unit_test(test_inode_negative_panics),
        cmocka_unit_test(test_inode_tolerant_after_restart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
