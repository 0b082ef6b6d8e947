/* test_fs_attr_race.c -- attributes reported for a file with buffered writes
 * never show a size older than this mount's acknowledged writes, even when a
 * commit of those writes finishes between the engine's answer and the merge
 * of the buffer: getattr, setattr (chmod, truncate + chmod), link and
 * readdirplus.  The race is made deterministic by wrapping the engine's ops:
 * the wrapper of the op under test commits the buffered writes (keg_fs_flush)
 * right after the engine answered, before core/fs merges the buffer. */
#define _GNU_SOURCE 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_fs_helpers.h"

enum race_op { RACE_NONE, RACE_GETATTR, RACE_SETATTR, RACE_LINK, RACE_READDIR };

/* The race to inject: with op armed, the wrapper of that op (once) writes
 * pre_len bytes at pre_off through fh before the engine call (0: none) and
 * commits fh's buffered writes after it. */
static struct {
    enum race_op              op;
    struct keg_fs            *fs;
    struct keg_fh            *fh;
    uint64_t                  pre_off;
    size_t                    pre_len;
    int                       fired;
    const struct keg_meta_ops *real;
    struct keg_meta_ops       hooked;
} rc_;

static void race_pre(enum race_op op)
{
    static const uint8_t buf[4096];
    if (rc_.op != op || !rc_.pre_len)
        return;
    assert_true(rc_.pre_len <= sizeof(buf));
    assert_int_equal(keg_fs_write(rc_.fs, rc_.fh, rc_.pre_off, buf, rc_.pre_len),
                     (ssize_t)rc_.pre_len);
}

static void race_post(enum race_op op)
{
    if (rc_.op != op)
        return;
    rc_.op = RACE_NONE;                 /* once; the flush may call the engine */
    rc_.fired++;
    assert_int_equal(keg_fs_flush(rc_.fs, rc_.fh, 0), 0);
}

static int h_getattr(struct keg_meta *m, uint64_t ino, struct keg_attr *out)
{
    int rc = rc_.real->getattr(m, ino, out);
    race_post(RACE_GETATTR);
    return rc;
}

static int h_setattr(struct keg_meta *m, uint64_t ino, unsigned set, const struct keg_attr *in,
                     struct keg_attr *out)
{
    race_pre(RACE_SETATTR);
    int rc = rc_.real->setattr(m, ino, set, in, out);
    race_post(RACE_SETATTR);
    return rc;
}

static int h_link(struct keg_meta *m, uint64_t ino, uint64_t newparent, const char *newname,
                  struct keg_attr *out)
{
    int rc = rc_.real->link(m, ino, newparent, newname, out);
    race_post(RACE_LINK);
    return rc;
}

static int h_readdir(struct keg_meta *m, uint64_t ino, const char *after, uint32_t max,
                     int plus, keg_meta_dirent_cb *cb, void *arg)
{
    int rc = rc_.real->readdir(m, ino, after, max, plus, cb, arg);
    race_post(RACE_READDIR);
    return rc;
}

static void hook_install(struct tvol *v)
{
    struct keg_meta *m = keg_fs_meta(v->fs);
    memset(&rc_, 0, sizeof(rc_));
    rc_.fs = v->fs;
    rc_.real = m->ops;
    rc_.hooked = *m->ops;
    rc_.hooked.getattr = h_getattr;
    rc_.hooked.setattr = h_setattr;
    rc_.hooked.link = h_link;
    rc_.hooked.readdir = h_readdir;
    m->ops = &rc_.hooked;
}

static void hook_remove(struct tvol *v)
{
    keg_fs_meta(v->fs)->ops = rc_.real;
}

/* A volume with file "f" open read-write here holding `len` buffered
 * (acknowledged, not committed) bytes; the engine says size 0. */
static void setup(struct tvol *v, uint64_t *ino, size_t len)
{
    static const uint8_t buf[4096];
    tvol_init(v, 65536, "none");
    tvol_mount(v);
    hook_install(v);
    rc_.fh = tvol_create(v, KEG_ROOT_INO, "f", ino);
    assert_true(len <= sizeof(buf));
    assert_int_equal(keg_fs_write(v->fs, rc_.fh, 0, buf, len), (ssize_t)len);
}

static void teardown(struct tvol *v)
{
    assert_int_equal(keg_fs_release(v->fs, rc_.fh), 0);
    hook_remove(v);
    tvol_cleanup(v);
}

static void test_attr_race_getattr(void **state)
{
    struct tvol v;
    struct keg_attr a;
    uint64_t ino;
    (void)state;

    setup(&v, &ino, 100);
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, ino, &a), 0);    /* no race: merged */
    assert_int_equal(a.size, 100);
    assert_int_equal(keg_fs_write(v.fs, rc_.fh, 100, "x", 1), 1);
    rc_.op = RACE_GETATTR;
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, ino, &a), 0);
    assert_int_equal(rc_.fired, 1);
    assert_int_equal(a.size, 101);
    teardown(&v);
}

static void test_attr_race_setattr(void **state)
{
    struct tvol v;
    struct keg_attr in, a;
    uint64_t ino;
    (void)state;

    setup(&v, &ino, 100);
    memset(&in, 0, sizeof(in));

    /* chmod commits the 100 bytes first; 200 more are written (acknowledged)
     * while the engine applies the mode and committed before the merge */
    in.mode = 0600;
    rc_.op = RACE_SETATTR;
    rc_.pre_off = 100;
    rc_.pre_len = 200;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_SET_MODE, &in, &a), 0);
    assert_int_equal(rc_.fired, 1);
    assert_int_equal(a.mode & 07777, 0600);
    assert_int_equal(a.size, 300);

    /* truncate + chmod: the answer of the chmod races a commit the same way */
    in.size = 50;
    in.mode = 0640;
    rc_.op = RACE_SETATTR;
    rc_.pre_off = 50;
    rc_.pre_len = 1000;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_FS_SET_SIZE | KEG_SET_MODE, &in,
                                    &a), 0);
    assert_int_equal(rc_.fired, 2);
    assert_int_equal(a.mode & 07777, 0640);
    assert_int_equal(a.size, 1050);

    /* truncate alone, buffered writes after it: merged */
    in.size = 10;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_FS_SET_SIZE, &in, &a), 0);
    assert_int_equal(a.size, 10);
    assert_int_equal(keg_fs_write(v.fs, rc_.fh, 10, "abc", 3), 3);
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, ino, &a), 0);
    assert_int_equal(a.size, 13);
    teardown(&v);
}

static void test_attr_race_link(void **state)
{
    struct tvol v;
    struct keg_attr a;
    uint64_t ino;
    (void)state;

    setup(&v, &ino, 100);
    rc_.op = RACE_LINK;
    assert_int_equal(keg_fs_link(v.fs, &tv_root, ino, KEG_ROOT_INO, "g", &a), 0);
    assert_int_equal(rc_.fired, 1);
    assert_int_equal(a.ino, ino);
    assert_int_equal(a.nlink, 2);
    assert_int_equal(a.size, 100);
    teardown(&v);
}

struct seen {
    uint64_t ino;
    uint64_t size;
    int      found;
};

static int fill_cb(void *arg, const char *name, const struct keg_attr *attr, uint64_t next_off)
{
    struct seen *s = arg;
    (void)next_off;
    if (strcmp(name, "f") == 0) {
        assert_int_equal(attr->ino, s->ino);
        s->size = attr->size;
        s->found++;
    }
    return 0;
}

static void readdir_plus(struct tvol *v, struct seen *s)
{
    struct keg_dh *dh = NULL;
    s->found = 0;
    s->size = UINT64_MAX;
    assert_int_equal(keg_fs_opendir(v->fs, &tv_root, KEG_ROOT_INO, &dh), 0);
    assert_int_equal(keg_fs_readdir(v->fs, &tv_root, dh, 0, 1, fill_cb, s), 0);
    assert_int_equal(keg_fs_releasedir(v->fs, dh), 0);
    assert_int_equal(s->found, 1);
}

static void test_attr_race_readdirplus(void **state)
{
    struct tvol v;
    struct seen s;
    uint64_t ino;
    (void)state;

    setup(&v, &ino, 100);
    s.ino = ino;
    readdir_plus(&v, &s);                       /* no race: merged */
    assert_int_equal(s.size, 100);

    /* the batch is read (size 0: nothing committed yet), then the buffered
     * writes are committed, then the entry is delivered: the batch's size is
     * older than the 4101 bytes acknowledged */
    assert_int_equal(keg_fs_write(v.fs, rc_.fh, 100, "0123456789", 10), 10);
    assert_int_equal(keg_fs_write(v.fs, rc_.fh, 4100, "y", 1), 1);
    rc_.op = RACE_READDIR;
    readdir_plus(&v, &s);
    assert_int_equal(rc_.fired, 1);
    assert_int_equal(s.size, 4101);
    teardown(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attr_race_getattr),
        cmocka_unit_test(test_attr_race_setattr),
        cmocka_unit_test(test_attr_race_link),
        cmocka_unit_test(test_attr_race_readdirplus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
