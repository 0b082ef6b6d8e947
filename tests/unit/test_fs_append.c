/* test_fs_append.c -- O_APPEND writes (keg_fs_append): their position is chosen
 * at commit by the engine, so two mounts appending to one file lose nothing;
 * the size reported while appends are buffered, read-after-append in the same
 * mount, the invalidation hook when the kernel's offset was wrong, and appends
 * mixed with positioned writes.  Two keg_fs instances on one SQLite volume. */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_fs_helpers.h"
#include "fs/fs_i.h"

#define BS  (64u << 10)
#define REC 100

struct inval {
    int      calls;
    uint64_t ino;
};

static void inval_cb(void *arg, uint64_t ino, uint64_t off, uint64_t len)
{
    struct inval *iv = arg;
    iv->calls++;
    iv->ino = ino;
    assert_int_equal(off, 0);
    assert_int_equal(len, 0);
}

/* Record i of writer w: REC bytes, "w<w> <i>" then a byte pattern, '\n'. */
static void record(uint8_t *p, int w, int i)
{
    int n = snprintf((char *)p, REC, "w%d %05d ", w, i);
    for (int k = n; k < REC - 1; k++)
        p[k] = (uint8_t)('a' + (w * 7 + i + k) % 26);
    p[REC - 1] = '\n';
}

/* Every record of both writers exactly once, intact. */
static void check_records(const uint8_t *data, uint64_t size, int each)
{
    int *seen = keg_calloc(2 * (size_t)each, sizeof(int));
    uint8_t want[REC];
    assert_int_equal(size, 2 * (uint64_t)each * REC);
    for (uint64_t off = 0; off < size; off += REC) {
        int w = -1;
        int i = -1;
        assert_int_equal(sscanf((const char *)data + off, "w%d %d ", &w, &i), 2);
        assert_true(w >= 0 && w < 2 && i >= 0 && i < each);
        record(want, w, i);
        assert_memory_equal(data + off, want, REC);
        seen[w * each + i]++;
    }
    for (int k = 0; k < 2 * each; k++)
        assert_int_equal(seen[k], 1);
    keg_free(seen);
}

/* v mounted, and a second mount of its volume (keg_fs_free it). */
static struct keg_fs *mount_two(struct tvol *v)
{
    struct keg_fs_conf conf;
    struct keg_fs *fs2 = NULL;

    tvol_init(v, BS, "none");
    tvol_mount(v);
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v->url;
    conf.mountpoint = "/test2";
    conf.heartbeat_sec = 1;
    assert_int_equal(keg_fs_new(&conf, &fs2), 0);
    return fs2;
}

/* Two mounts, each with its descriptor kept open, append in turns; each
 * commits now and then (as a reader or the buffer budget would). */
static void test_append_two_mounts(void **state)
{
    struct tvol v;
    struct keg_fs *fs2 = NULL;
    struct inval iv1 = {0};
    struct inval iv2 = {0};
    uint64_t ino = 0;
    uint8_t rec[REC];
    const int each = 300;
    (void)state;

    fs2 = mount_two(&v);
    keg_fs_set_inval(v.fs, inval_cb, &iv1);
    keg_fs_set_inval(fs2, inval_cb, &iv2);
    struct keg_fh *c = tvol_create(&v, KEG_ROOT_INO, "log", &ino);
    assert_int_equal(keg_fs_release(v.fs, c), 0);
    struct keg_fh *a = NULL;
    struct keg_fh *b = NULL;
    int keep = 0;
    assert_int_equal(keg_fs_open(v.fs, &tv_root, ino, O_WRONLY | O_APPEND, &a, &keep), 0);
    assert_int_equal(keg_fs_open(fs2, &tv_root, ino, O_WRONLY | O_APPEND, &b, &keep), 0);
    /* each mount's idea of the end only counts its own appends (like the kernel's) */
    uint64_t ka = 0;
    uint64_t kb = 0;
    for (int i = 0; i < each; i++) {
        record(rec, 0, i);
        assert_int_equal(keg_fs_append(v.fs, a, ka, rec, REC), REC);
        ka += REC;
        record(rec, 1, i);
        assert_int_equal(keg_fs_append(fs2, b, kb, rec, REC), REC);
        kb += REC;
        if (i % 37 == 36)
            assert_int_equal(keg_fs_flush(v.fs, a, 1), 0);
        if (i % 53 == 52)
            assert_int_equal(keg_fs_fsync(fs2, b, 0), 0);
    }
    assert_int_equal(keg_fs_release(v.fs, a), 0);
    assert_int_equal(keg_fs_release(fs2, b), 0);
    /* the mounts whose appends landed elsewhere than their kernel thought were told */
    assert_true(iv1.calls + iv2.calls > 0);
    assert_true(iv1.calls == 0 || iv1.ino == ino);

    uint64_t size = 2 * (uint64_t)each * REC;
    uint8_t *data = keg_malloc(size + 1);
    struct keg_fh *r = tvol_open(&v, ino, O_RDONLY);
    assert_int_equal(keg_fs_read(v.fs, r, 0, data, size + 1), (ssize_t)size);
    check_records(data, size, each);
    keg_fs_release(v.fs, r);
    r = NULL;
    assert_int_equal(keg_fs_open(fs2, &tv_root, ino, O_RDONLY, &r, &keep), 0);
    memset(data, 0, size);
    assert_int_equal(keg_fs_read(fs2, r, 0, data, size + 1), (ssize_t)size);
    check_records(data, size, each);
    keg_fs_release(fs2, r);
    keg_free(data);
    keg_fs_free(fs2);
    tvol_cleanup(&v);
}

/* One mount: the size while appends are buffered, read-after-append, appends
 * mixed with positioned writes of another descriptor, across a chunk boundary. */
static void test_append_one_mount(void **state)
{
    struct tvol v;
    struct inval iv = {0};
    struct keg_attr at;
    uint64_t ino = 0;
    uint8_t buf[8192];
    uint8_t got[8192];
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    keg_fs_set_inval(v.fs, inval_cb, &iv);
    struct keg_fh *w = tvol_create(&v, KEG_ROOT_INO, "f", &ino);
    memset(buf, 'x', 1000);
    assert_int_equal(keg_fs_write(v.fs, w, 0, buf, 1000), 1000);
    assert_int_equal(keg_fs_flush(v.fs, w, 1), 0);
    struct keg_fh *ap = tvol_open(&v, ino, O_RDWR | O_APPEND);
    memset(buf, 'a', 500);
    assert_int_equal(keg_fs_append(v.fs, ap, 1000, buf, 500), 500);
    /* buffered: the size already counts it */
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, ino, &at), 0);
    assert_int_equal(at.size, 1500);
    /* a positioned write of another descriptor: the appends are placed first */
    memset(buf, 'p', 100);
    assert_int_equal(keg_fs_write(v.fs, w, 200, buf, 100), 100);
    memset(buf, 'b', 300);
    assert_int_equal(keg_fs_append(v.fs, ap, 1500, buf, 300), 300);
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, ino, &at), 0);
    assert_int_equal(at.size, 1800);
    /* read-after-append through the same descriptor */
    assert_int_equal(keg_fs_read(v.fs, ap, 0, got, sizeof(got)), 1800);
    for (int i = 0; i < 1800; i++) {
        uint8_t want = i < 200 ? 'x' : i < 300 ? 'p' : i < 1000 ? 'x' : i < 1500 ? 'a' : 'b';
        assert_int_equal(got[i], want);
    }
    assert_int_equal(iv.calls, 0);      /* the kernel's offsets were right */
    /* the kernel's offset was stale (another mount grew the file): placed at
     * the real end, and the owner is told */
    memset(buf, 'c', 10);
    assert_int_equal(keg_fs_append(v.fs, ap, 700, buf, 10), 10);
    assert_int_equal(keg_fs_flush(v.fs, ap, 1), 0);
    assert_int_equal(iv.calls, 1);
    assert_int_equal(keg_fs_read(v.fs, ap, 1790, got, 100), 20);
    assert_memory_equal(got, "bbbbbbbbbbcccccccccc", 20);
    /* across a chunk boundary */
    at.size = KEG_CHUNK_SIZE - 3000;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_FS_SET_SIZE, &at, &at), 0);
    for (int i = 0; i < (int)sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 7 + 1);
    assert_int_equal(keg_fs_append(v.fs, ap, KEG_CHUNK_SIZE - 3000, buf, sizeof(buf)),
                     (ssize_t)sizeof(buf));
    assert_int_equal(keg_fs_release(v.fs, ap), 0);
    assert_int_equal(keg_fs_release(v.fs, w), 0);
    struct keg_fh *r = tvol_open(&v, ino, O_RDONLY);
    assert_int_equal(keg_fs_read(v.fs, r, KEG_CHUNK_SIZE - 3000, got, sizeof(got)),
                     (ssize_t)sizeof(buf));
    assert_memory_equal(got, buf, sizeof(buf));
    keg_fs_release(v.fs, r);
    tvol_cleanup(&v);
}

/* The kernel cuts an O_APPEND write that crosses a page it has not cached into
 * two requests, and the release of the previous descriptor may come between
 * them (it is sent after close() returned).  That release must not commit the
 * first piece alone: another mount's append would land inside the record. */
static void test_release_leaves_other_handles(void **state)
{
    struct tvol v;
    struct keg_fs *fs2 = NULL;
    uint64_t ino = 0;
    uint8_t rec[REC], rec2[REC], got[3 * REC];
    int keep = 0;
    (void)state;

    fs2 = mount_two(&v);
    struct keg_fh *c = tvol_create(&v, KEG_ROOT_INO, "log", &ino);
    assert_int_equal(keg_fs_release(v.fs, c), 0);
    record(rec, 0, 0);
    record(rec2, 1, 0);

    /* record 0 of mount 1: open, append, close (the flush commits it) */
    struct keg_fh *a0 = tvol_open(&v, ino, O_WRONLY | O_APPEND);
    assert_int_equal(keg_fs_append(v.fs, a0, 0, rec, REC), REC);
    assert_int_equal(keg_fs_flush(v.fs, a0, 1), 0);
    /* record 1: its first 8 bytes arrive, then the release of record 0's handle */
    struct keg_fh *a1 = tvol_open(&v, ino, O_WRONLY | O_APPEND);
    record(rec, 0, 1);
    assert_int_equal(keg_fs_append(v.fs, a1, REC, rec, 8), 8);
    assert_int_equal(keg_fs_release(v.fs, a0), 0);
    /* mount 2 appends meanwhile */
    struct keg_fh *b = NULL;
    assert_int_equal(keg_fs_open(fs2, &tv_root, ino, O_WRONLY | O_APPEND, &b, &keep), 0);
    assert_int_equal(keg_fs_append(fs2, b, REC, rec2, REC), REC);
    assert_int_equal(keg_fs_flush(fs2, b, 1), 0);
    assert_int_equal(keg_fs_release(fs2, b), 0);
    /* the rest of record 1, then its close */
    assert_int_equal(keg_fs_append(v.fs, a1, REC + 8, rec + 8, REC - 8), REC - 8);
    assert_int_equal(keg_fs_flush(v.fs, a1, 1), 0);
    assert_int_equal(keg_fs_release(v.fs, a1), 0);

    struct keg_fh *r = tvol_open(&v, ino, O_RDONLY);
    assert_int_equal(keg_fs_read(v.fs, r, 0, got, sizeof(got)), 3 * REC);
    keg_fs_release(v.fs, r);
    record(rec, 0, 0);
    assert_memory_equal(got, rec, REC);          /* then mount 2's, then record 1 whole */
    assert_memory_equal(got + REC, rec2, REC);
    record(rec, 0, 1);
    assert_memory_equal(got + 2 * REC, rec, REC);

    /* a handle whose own writes were not flushed is committed by its release */
    struct keg_fh *w = tvol_open(&v, ino, O_WRONLY | O_APPEND);
    struct keg_fh *o = tvol_open(&v, ino, O_RDONLY);
    assert_int_equal(keg_fs_append(v.fs, w, 3 * REC, rec2, REC), REC);
    assert_int_equal(keg_fs_release(v.fs, w), 0);
    struct keg_attr at;
    assert_int_equal(keg_meta_getattr(fs2->meta, ino, &at), 0);
    assert_int_equal(at.size, 4 * REC);
    keg_fs_release(v.fs, o);
    keg_fs_free(fs2);
    tvol_cleanup(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_two_mounts),
        cmocka_unit_test(test_append_one_mount),
        cmocka_unit_test(test_release_leaves_other_handles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
