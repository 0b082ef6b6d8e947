/* test_meta_call.c -- the checked metadata calls (core/meta/meta_call.c): input that
 * every engine refuses alike is refused before any engine is called, with the same
 * errno for the same bad input; ops an engine lacks are -ENOSYS; requests, engine
 * failures and latencies are counted per op. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "keg/meta.h"

/* A fake engine: counts the calls that reach it and answers from `answer`. */
static int fk_calls;
static int fk_answer;

static int fk_open(struct keg_meta *m, const char *url)
{
    (void)m;
    (void)url;
    return 0;
}

static int fk_lookup(struct keg_meta *m, uint64_t parent, const char *name, struct keg_attr *out)
{
    (void)m;
    (void)parent;
    (void)name;
    fk_calls++;
    if (fk_answer == 0)
        out->ino = 7;
    return fk_answer;
}

static int fk_getattr(struct keg_meta *m, uint64_t ino, struct keg_attr *out)
{
    (void)m;
    fk_calls++;
    if (fk_answer == 0)
        out->ino = ino;
    return fk_answer;
}

static int fk_mknod(struct keg_meta *m, uint64_t parent, const char *name, uint64_t ino,
                    uint32_t mode, uint32_t uid, uint32_t gid, uint64_t rdev, const char *target,
                    struct keg_attr *out)
{
    (void)m; (void)parent; (void)name; (void)mode; (void)uid; (void)gid; (void)rdev;
    (void)target;
    fk_calls++;
    struct keg_attr pa = {.ino = parent};
    if (fk_answer == 0) {
        out->ino = ino;
        keg_meta_parents_add(&pa);
    }
    return fk_answer;
}

static int fk_link(struct keg_meta *m, uint64_t ino, uint64_t newparent, const char *newname,
                   struct keg_attr *out)
{
    (void)m; (void)newparent; (void)newname;
    fk_calls++;
    out->ino = ino;
    return 0;
}

static int fk_unlink(struct keg_meta *m, uint64_t parent, const char *name,
                     struct keg_unlinked *gone)
{
    (void)m; (void)parent; (void)name; (void)gone;
    fk_calls++;
    return 0;
}

static int fk_rmdir(struct keg_meta *m, uint64_t parent, const char *name)
{
    (void)m; (void)parent; (void)name;
    fk_calls++;
    return 0;
}

static int fk_rename(struct keg_meta *m, uint64_t parent, const char *name, uint64_t newparent,
                     const char *newname, unsigned flags, struct keg_attr *moved,
                     struct keg_unlinked *gone)
{
    (void)m; (void)parent; (void)name; (void)newparent; (void)newname; (void)flags;
    (void)moved; (void)gone;
    fk_calls++;
    return 0;
}

static ssize_t fk_getxattr(struct keg_meta *m, uint64_t ino, const char *name, void *buf,
                           size_t size)
{
    (void)m; (void)ino; (void)name; (void)buf; (void)size;
    fk_calls++;
    return -ENODATA;
}

static int fk_setxattr(struct keg_meta *m, uint64_t ino, const char *name, const void *val,
                       size_t len, int flags)
{
    (void)m; (void)ino; (void)name; (void)val; (void)len; (void)flags;
    fk_calls++;
    return 0;
}

static int fk_removexattr(struct keg_meta *m, uint64_t ino, const char *name)
{
    (void)m; (void)ino; (void)name;
    fk_calls++;
    return 0;
}

static const struct keg_meta_ops fk_ops = {
    .name = "fakecall",
    .version = 1,
    .open = fk_open,
    .lookup = fk_lookup,
    .getattr = fk_getattr,
    .mknod = fk_mknod,
    .link = fk_link,
    .unlink = fk_unlink,
    .rmdir = fk_rmdir,
    .rename = fk_rename,
    .getxattr = fk_getxattr,
    .setxattr = fk_setxattr,
    .removexattr = fk_removexattr,
};

static int setup(void **state)
{
    struct keg_meta *m = NULL;
    keg_meta_register(&fk_ops);
    if (keg_meta_open("fakecall://x", &m) != 0)
        return -1;
    fk_calls = 0;
    fk_answer = 0;
    *state = m;
    return 0;
}

static int teardown(void **state)
{
    keg_meta_close(*state);
    return 0;
}

static void fill(char *buf, size_t n)
{
    memset(buf, 'a', n);
    buf[n] = '\0';
}

static void test_names(void **state)
{
    struct keg_meta *m = *state;
    struct keg_attr a;
    char name[KEG_NAME_MAX + 2];

    assert_int_equal(keg_meta_lookup(m, 1, NULL, &a), -EINVAL);
    assert_int_equal(keg_meta_lookup(m, 1, "", &a), -EINVAL);
    fill(name, KEG_NAME_MAX + 1);
    assert_int_equal(keg_meta_lookup(m, 1, name, &a), -ENAMETOOLONG);
    name[3] = '/';          /* a '/' is said first */
    assert_int_equal(keg_meta_lookup(m, 1, name, &a), -EINVAL);
    assert_int_equal(keg_meta_lookup(m, 1, "a/b", &a), -EINVAL);
    assert_int_equal(keg_meta_unlink(m, 1, "a/b", NULL), -EINVAL);
    assert_int_equal(keg_meta_rmdir(m, 1, ""), -EINVAL);
    assert_int_equal(keg_meta_link(m, 5, 1, "x/", &a), -EINVAL);
    assert_int_equal(keg_meta_rename(m, 1, "a", 1, "b/c", 0, &a, NULL), -EINVAL);
    assert_int_equal(keg_meta_rename(m, 1, "", 1, "b", 0, &a, NULL), -EINVAL);
    /* "." and ".." are never added or removed */
    assert_int_equal(keg_meta_mknod(m, 1, ".", 5, S_IFREG | 0644, 0, 0, 0, NULL, &a), -EINVAL);
    assert_int_equal(keg_meta_mknod(m, 1, "..", 5, S_IFDIR | 0755, 0, 0, 0, NULL, &a), -EINVAL);
    assert_int_equal(keg_meta_link(m, 5, 1, "..", &a), -EINVAL);
    assert_int_equal(keg_meta_unlink(m, 1, ".", NULL), -EINVAL);
    assert_int_equal(keg_meta_rmdir(m, 1, ".."), -EINVAL);
    assert_int_equal(keg_meta_rename(m, 1, "a", 1, ".", 0, &a, NULL), -EINVAL);
    assert_int_equal(fk_calls, 0);

    /* valid names reach the engine; a longest name is valid; ".x" and "..." are names */
    fill(name, KEG_NAME_MAX);
    assert_int_equal(keg_meta_lookup(m, 1, name, &a), 0);
    assert_int_equal(a.ino, 7);
    assert_int_equal(keg_meta_mknod(m, 1, ".x", 5, S_IFREG | 0644, 0, 0, 0, NULL, &a), 0);
    assert_int_equal(keg_meta_unlink(m, 1, "...", NULL), 0);
    assert_int_equal(keg_meta_rename(m, 1, "a", 1, "b", KEG_RENAME_EXCHANGE, &a, NULL), 0);
    assert_int_equal(fk_calls, 4);
}

static void test_modes_and_targets(void **state)
{
    struct keg_meta *m = *state;
    struct keg_attr a;
    static char target[KEG_SYMLINK_MAX + 2];

    assert_int_equal(keg_meta_mknod(m, 1, "f", 5, 0644, 0, 0, 0, NULL, &a), -EINVAL);
    assert_int_equal(keg_meta_mknod(m, 1, "f", 5, 0170000 | 0644, 0, 0, 0, NULL, &a), -EINVAL);
    assert_int_equal(keg_meta_mknod(m, 1, "f", KEG_ROOT_INO, S_IFREG | 0644, 0, 0, 0, NULL, &a),
                     -EINVAL);
    assert_int_equal(keg_meta_mknod(m, 1, "l", 5, S_IFLNK | 0777, 0, 0, 0, NULL, &a), -EINVAL);
    assert_int_equal(keg_meta_mknod(m, 1, "l", 5, S_IFLNK | 0777, 0, 0, 0, "", &a), -EINVAL);
    fill(target, KEG_SYMLINK_MAX + 1);
    assert_int_equal(keg_meta_mknod(m, 1, "l", 5, S_IFLNK | 0777, 0, 0, 0, target, &a),
                     -ENAMETOOLONG);
    /* a bad name is reported before a bad mode */
    assert_int_equal(keg_meta_mknod(m, 1, "a/b", 5, 0, 0, 0, 0, NULL, &a), -EINVAL);
    assert_int_equal(keg_meta_rename(m, 1, "a", 1, "b", 4, &a, NULL), -EINVAL);
    assert_int_equal(keg_meta_rename(m, 1, "a", 1, "b",
                                     KEG_RENAME_NOREPLACE | KEG_RENAME_EXCHANGE, &a, NULL),
                     -EINVAL);
    assert_int_equal(fk_calls, 0);

    fill(target, KEG_SYMLINK_MAX);
    assert_int_equal(keg_meta_mknod(m, 1, "l", 5, S_IFLNK | 0777, 0, 0, 0, target, &a), 0);
    uint32_t types[] = {S_IFREG, S_IFDIR, S_IFCHR, S_IFBLK, S_IFIFO, S_IFSOCK};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        assert_int_equal(keg_meta_mknod(m, 1, "n", 6 + i, types[i] | 0600, 0, 0, 0, NULL, &a),
                         0);
    assert_int_equal(fk_calls, 7);
    assert_int_equal(keg_meta_check_target("x"), 0);
    assert_int_equal(keg_meta_check_name("x"), 0);
}

static void test_xattr_names(void **state)
{
    struct keg_meta *m = *state;
    char name[KEG_XATTR_NAME_MAX + 2];
    char buf[8];

    assert_int_equal(keg_meta_getxattr(m, 5, "", buf, sizeof(buf)), -EINVAL);
    assert_int_equal(keg_meta_setxattr(m, 5, NULL, "v", 1, 0), -EINVAL);
    fill(name, KEG_XATTR_NAME_MAX + 1);
    assert_int_equal(keg_meta_removexattr(m, 5, name), -ERANGE);
    assert_int_equal(keg_meta_getxattr(m, 5, name, buf, sizeof(buf)), -ERANGE);
    assert_int_equal(fk_calls, 0);
    fill(name, KEG_XATTR_NAME_MAX);
    assert_int_equal(keg_meta_setxattr(m, 5, name, "v", 1, 0), 0);
    assert_int_equal(keg_meta_getxattr(m, 5, "user.a", buf, sizeof(buf)), -ENODATA);
    assert_int_equal(fk_calls, 2);
}

static void test_missing_op(void **state)
{
    struct keg_meta *m = *state;
    struct keg_slice *s = NULL;
    size_t n = 0;
    assert_int_equal(keg_meta_read_chunk(m, 5, 0, &s, &n), -ENOSYS);
    assert_int_equal(keg_meta_session_heartbeat(m), -ENOSYS);
    assert_int_equal(keg_meta_sync(m), -ENOSYS);
    const struct keg_meta_op_stats *st = keg_meta_stats(m);
    assert_int_equal(st[KEG_META_OP_READ_CHUNK].requests, 0);
    assert_int_equal(st[KEG_META_OP_SESSION_HEARTBEAT].requests, 0);
}

static void test_parents_reset(void **state)
{
    struct keg_meta *m = *state;
    struct keg_attr a, pa[2];
    assert_int_equal(keg_meta_mknod(m, 1, "f", 5, S_IFREG | 0644, 0, 0, 0, NULL, &a), 0);
    assert_int_equal(keg_meta_parents(pa, 2), 1);
    assert_int_equal(pa[0].ino, 1);
    /* a refused call leaves no stale record of the call before */
    assert_int_equal(keg_meta_mknod(m, 1, "a/b", 6, S_IFREG | 0644, 0, 0, 0, NULL, &a), -EINVAL);
    assert_int_equal(keg_meta_parents(pa, 2), 0);
    assert_int_equal(keg_meta_mknod(m, 1, "f", 6, S_IFREG | 0644, 0, 0, 0, NULL, &a), 0);
    assert_int_equal(keg_meta_rmdir(m, 1, ""), -EINVAL);
    assert_int_equal(keg_meta_parents(pa, 2), 0);
}

static void test_stats(void **state)
{
    struct keg_meta *m = *state;
    struct keg_attr a;
    const struct keg_meta_op_stats *st = keg_meta_stats(m);

    for (int i = 0; i < 3; i++)
        assert_int_equal(keg_meta_getattr(m, 5, &a), 0);
    fk_answer = -ENOENT;            /* an answer, not a failure */
    assert_int_equal(keg_meta_lookup(m, 1, "x", &a), -ENOENT);
    assert_int_equal(keg_meta_getattr(m, 5, &a), -ENOENT);
    fk_answer = -EIO;               /* a failure of the engine */
    assert_int_equal(keg_meta_getattr(m, 5, &a), -EIO);
    fk_answer = 0;
    assert_int_equal(keg_meta_lookup(m, 1, "a/b", &a), -EINVAL);    /* refused: no request */

    assert_int_equal(st[KEG_META_OP_GETATTR].requests, 5);
    assert_int_equal(st[KEG_META_OP_GETATTR].errors, 1);
    assert_int_equal(st[KEG_META_OP_GETATTR].latency.count, 5);
    assert_int_equal(st[KEG_META_OP_LOOKUP].requests, 1);
    assert_int_equal(st[KEG_META_OP_LOOKUP].errors, 0);
    uint64_t inbuckets = 0;
    for (int i = 0; i < KEG_METRICS_NBUCKETS; i++)
        inbuckets += st[KEG_META_OP_GETATTR].latency.bucket[i];
    assert_true(inbuckets <= 5);
    assert_int_equal(st[KEG_META_OP_MKNOD].requests, 0);

    assert_string_equal(keg_meta_op_name(KEG_META_OP_WRITE_SLICES), "write_slices");
    assert_string_equal(keg_meta_op_name(KEG_META_OP_SESSION_HEARTBEAT), "session_heartbeat");
    for (int i = 0; i < KEG_META_OP_N; i++)
        assert_non_null(keg_meta_op_name((enum keg_meta_op)i));
    assert_true(keg_meta_is_failure(-EIO));
    assert_true(keg_meta_is_failure(-ETIMEDOUT));
    assert_false(keg_meta_is_failure(-ENOENT));
    assert_false(keg_meta_is_failure(-EEXIST));
    assert_false(keg_meta_is_failure(0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_modes_and_targets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xattr_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_op, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parents_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
