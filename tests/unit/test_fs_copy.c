/* test_fs_copy.c -- copy_file_range (keg_fs_copy_range) against a source whose
 * slices are replaced while it copies: the engine refusing the shared
 * references (-EAGAIN) is retried, a source that keeps changing is copied byte
 * by byte, and no EAGAIN/EBUSY ever reaches the caller.  SQLite engine + file
 * store; the engine's write_slices is wrapped to inject -EAGAIN. */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define TV_RND_SEED 0x2545F4914F6CDD1DULL
#include "test_fs_helpers.h"
#include "fs/fs_i.h"

#define BS   (64u << 10)
#define SPAN (512u << 10)

/*----- an engine whose shared write_slices fails with -EAGAIN n times -----*/

static const struct keg_meta_ops *real_ops;
static struct keg_meta_ops eagain_ops;
static int eagain_left;         /* injections still to make (-1: always) */
static int eagain_made;         /* injections made */

static int eagain_write_slices(struct keg_meta *m, uint64_t ino, size_t n,
                               const struct keg_chunk_slice *cs, uint64_t min_size,
                               unsigned flags, uint32_t *nslices, struct keg_attr *out)
{
    if ((flags & KEG_WS_SHARE) && eagain_left != 0) {
        if (eagain_left > 0)
            eagain_left--;
        eagain_made++;
        return -EAGAIN;         /* as the engines do: nothing changed */
    }
    return real_ops->write_slices(m, ino, n, cs, min_size, flags, nslices, out);
}

static void eagain_install(struct tvol *v, int times)
{
    real_ops = v->fs->meta->ops;
    eagain_ops = *real_ops;
    eagain_ops.write_slices = eagain_write_slices;
    eagain_left = times;
    eagain_made = 0;
    v->fs->meta->ops = &eagain_ops;
}

static void eagain_remove(struct tvol *v)
{
    v->fs->meta->ops = real_ops;
}

struct count {
    unsigned n;
};

static int count_cb(void *arg, uint32_t indx, const struct keg_slice *s)
{
    struct count *c = arg;
    (void)indx;
    (void)s;
    c->n++;
    return 0;
}

/* A source file of SPAN random bytes (returned in model), written in pieces. */
static struct keg_fh *make_source(struct tvol *v, uint64_t *ino, uint8_t *model)
{
    struct keg_fh *fh = tvol_create(v, KEG_ROOT_INO, "src", ino);
    fill_random(model, SPAN);
    for (uint32_t off = 0; off < SPAN; off += 64u << 10) {
        assert_int_equal(keg_fs_write(v->fs, fh, off, model + off, 64u << 10), 64 << 10);
        assert_int_equal(keg_fs_flush(v->fs, fh, 1), 0);
    }
    return fh;
}

/*--------------------------------------------------------------------------*/

/* A few refusals: the copy plans again and shares the slices. */
static void test_copy_retries_eagain(void **state)
{
    struct tvol v;
    uint64_t sino = 0;
    uint64_t dino = 0;
    uint8_t *model = keg_malloc(SPAN);
    uint8_t *buf = keg_malloc(SPAN + 8192);
    struct count c = {0};
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *src = make_source(&v, &sino, model);
    struct keg_fh *dst = tvol_create(&v, KEG_ROOT_INO, "dst", &dino);

    eagain_install(&v, 4);
    assert_int_equal(keg_fs_copy_range(v.fs, &tv_root, src, 1000, dst, 4096, 300000, 0), 300000);
    eagain_remove(&v);
    assert_int_equal(eagain_made, 4);
    /* shared, not copied: the destination references the source's slices */
    assert_int_equal(tvol_count_objects(&v), SPAN / BS);
    assert_int_equal(keg_fs_chunks(v.fs, dino, count_cb, &c), 0);
    assert_true(c.n >= 1);
    assert_int_equal(keg_fs_read(v.fs, dst, 0, buf, SPAN), 4096 + 300000);
    for (int i = 0; i < 4096; i++)
        assert_int_equal(buf[i], 0);
    assert_memory_equal(buf + 4096, model + 1000, 300000);

    keg_fs_release(v.fs, src);
    keg_fs_release(v.fs, dst);
    tvol_cleanup(&v);
    keg_free(model);
    keg_free(buf);
}

/* The engine refuses every time: the bytes are copied instead, never EBUSY. */
static void test_copy_falls_back_to_bytes(void **state)
{
    struct tvol v;
    uint64_t sino = 0;
    uint64_t dino = 0;
    uint8_t *model = keg_malloc(SPAN);
    uint8_t *buf = keg_malloc(SPAN + 8192);
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *src = make_source(&v, &sino, model);
    struct keg_fh *dst = tvol_create(&v, KEG_ROOT_INO, "dst", &dino);
    /* the destination has data before and after the copied range */
    memset(buf, 0xAB, 8192);
    assert_int_equal(keg_fs_write(v.fs, dst, 0, buf, 8192), 8192);
    assert_int_equal(keg_fs_write(v.fs, dst, 200000, buf, 8192), 8192);

    eagain_install(&v, -1);
    assert_int_equal(keg_fs_copy_range(v.fs, &tv_root, src, 7, dst, 100, 150000, 0), 150000);
    /* past the source's end: a short copy, as copy_file_range(2) */
    assert_int_equal(keg_fs_copy_range(v.fs, &tv_root, src, SPAN - 1000, dst, 300000, 5000, 0),
                     1000);
    eagain_remove(&v);
    assert_true(eagain_made >= 2);
    assert_int_equal(keg_fs_flush(v.fs, dst, 1), 0);
    assert_int_equal(keg_fs_read(v.fs, dst, 0, buf, SPAN), 301000);
    for (int i = 0; i < 100; i++)
        assert_int_equal(buf[i], 0xAB);
    assert_memory_equal(buf + 100, model + 7, 150000);
    for (int i = 150100; i < 200000; i++)
        assert_int_equal(buf[i], 0);
    for (int i = 200000; i < 208192; i++)
        assert_int_equal(buf[i], 0xAB);
    assert_memory_equal(buf + 300000, model + SPAN - 1000, 1000);

    /* and the same after a remount (committed, not just buffered) */
    keg_fs_release(v.fs, src);
    keg_fs_release(v.fs, dst);
    tvol_umount(&v);
    tvol_mount(&v);
    dst = tvol_open(&v, dino, O_RDONLY);
    memset(buf, 0, SPAN);
    assert_int_equal(keg_fs_read(v.fs, dst, 0, buf, SPAN), 301000);
    assert_memory_equal(buf + 100, model + 7, 150000);
    assert_memory_equal(buf + 300000, model + SPAN - 1000, 1000);
    keg_fs_release(v.fs, dst);
    tvol_cleanup(&v);
    keg_free(model);
    keg_free(buf);
}

/*----- a real race: the source's slices are replaced while copies run -----*/

struct churn {
    struct tvol     *v;
    struct keg_fh   *fh;
    uint64_t         ino;
    const uint8_t   *model;
    atomic_int       stop;
    unsigned         rounds;
    int              err;       /* first failure (asserted by the main thread) */
};

/* Rewrites random pieces of the source with the bytes it already holds (the
 * content never changes, its slices do) and compacts the chunk now and then:
 * the slices a copy planned with keep disappearing. */
static void *churn_run(void *arg)
{
    struct churn *ch = arg;
    uint64_t rs = 0x9E3779B97F4A7C15ULL;
    while (!atomic_load(&ch->stop)) {
        for (int k = 0; k < 8; k++) {
            rs ^= rs << 13;
            rs ^= rs >> 7;
            rs ^= rs << 17;
            uint32_t len = 1 + (uint32_t)(rs % 20000);
            uint32_t off = (uint32_t)((rs >> 20) % (SPAN - len));
            if (keg_fs_write(ch->v->fs, ch->fh, off, ch->model + off, len) != (ssize_t)len ||
                keg_fs_flush(ch->v->fs, ch->fh, 1) != 0) {
                ch->err = -EIO;
                return NULL;
            }
        }
        int rc = fs_compact_chunk(ch->v->fs, ch->ino, 0);
        if (rc != 0 && rc != -EAGAIN) {
            ch->err = rc;
            return NULL;
        }
        ch->rounds++;
    }
    return NULL;
}

static void test_copy_races_compaction(void **state)
{
    struct tvol v;
    uint64_t sino = 0;
    uint8_t *model = keg_malloc(SPAN);
    uint8_t *buf = keg_malloc(SPAN);
    struct churn ch = {0};
    pthread_t thr;
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    ch.fh = make_source(&v, &sino, model);
    ch.v = &v;
    ch.ino = sino;
    ch.model = model;
    struct keg_fh *src = tvol_open(&v, sino, O_RDONLY);
    assert_int_equal(pthread_create(&thr, NULL, churn_run, &ch), 0);
    for (int i = 0; i < 150; i++) {
        char name[32];
        uint64_t dino = 0;
        uint32_t len = 1 + rnd(SPAN - 1);
        uint32_t from = rnd(SPAN - len);
        uint32_t to = rnd(SPAN);
        snprintf(name, sizeof(name), "dst%d", i);
        struct keg_fh *dst = tvol_create(&v, KEG_ROOT_INO, name, &dino);
        ssize_t n = keg_fs_copy_range(v.fs, &tv_root, src, from, dst, to, len, 0);
        assert_int_equal(n, (ssize_t)len);
        assert_int_equal(keg_fs_read(v.fs, dst, to, buf, len), (ssize_t)len);
        assert_memory_equal(buf, model + from, len);
        assert_int_equal(keg_fs_release(v.fs, dst), 0);
        assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, name), 0);
    }
    atomic_store(&ch.stop, 1);
    pthread_join(thr, NULL);
    assert_int_equal(ch.err, 0);
    assert_true(ch.rounds > 0);
    keg_fs_release(v.fs, src);
    keg_fs_release(v.fs, ch.fh);
    tvol_cleanup(&v);
    keg_free(model);
    keg_free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_retries_eagain),
        cmocka_unit_test(test_copy_falls_back_to_bytes),
        cmocka_unit_test(test_copy_races_compaction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
