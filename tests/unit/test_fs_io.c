/* test_fs_io.c -- the core/fs data path against an in-memory model: random
 * writes/reads/truncates through two handles, chunk boundaries, unlink while
 * open, copy_range sharing, fallocate, SEEK_DATA/SEEK_HOLE, corruption -> EIO,
 * reads pinned in the block cache (keg_fs_read_pin),
 * deferred write errors, keep_cache, remount.  SQLite engine + file store. */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <time.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <linux/falloc.h>

#define TV_RND_SEED 0x243F6A8885A308D3ULL
#include "test_fs_helpers.h"
#include "keg/stack.h"

#define BS (64u << 10)
#define CHUNK KEG_CHUNK_SIZE

static void write_all(struct tvol *v, struct keg_fh *fh, uint64_t off, const void *buf, size_t n)
{
    assert_int_equal(keg_fs_write(v->fs, fh, off, buf, n), (ssize_t)n);
}

/* Reads [off, off + n) both ways: pinned in the block cache when that applies
 * (keg_fs_read_pin), and copied (keg_fs_read). */
static void expect_read(struct tvol *v, struct keg_fh *fh, uint64_t off, const uint8_t *want,
                        size_t n)
{
    const void *data;
    void *pin;
    int rc = keg_fs_read_pin(v->fs, fh, off, n, &data, &pin);
    assert_true(rc == 0 || rc == 1);
    if (rc == 1) {
        assert_memory_equal(data, want, n);
        keg_fs_read_unpin(v->fs, pin);
    }
    uint8_t *got = keg_malloc(n + 1);
    assert_non_null(got);
    assert_int_equal(keg_fs_read(v->fs, fh, off, got, n), (ssize_t)n);
    assert_memory_equal(got, want, n);
    keg_free(got);
}

static void expect_zeros(struct tvol *v, struct keg_fh *fh, uint64_t off, size_t n)
{
    uint8_t *z = keg_calloc(1, n);
    expect_read(v, fh, off, z, n);
    keg_free(z);
}

static uint64_t fsize(struct tvol *v, uint64_t ino)
{
    struct keg_attr a;
    assert_int_equal(keg_fs_getattr(v->fs, &tv_root, ino, &a), 0);
    return a.size;
}

/*--------------------------------------------------------------------------*/

#define MAXF (3u << 20)

static void random_model_run(const char *compress, uint64_t buffer_size, int ops)
{
    struct tvol v;
    uint8_t *model = keg_calloc(1, MAXF);
    uint8_t *buf = keg_malloc(MAXF);
    uint64_t msize = 0;
    uint64_t ino = 0;
    uint64_t last_end = 0;
    struct keg_fh *fh[2];

    tvol_init(&v, BS, compress);
    assert_int_equal(tvol_mount_conf(&v, 0, 0, buffer_size), 0);
    fh[0] = tvol_create(&v, KEG_ROOT_INO, "f", &ino);
    fh[1] = tvol_open(&v, ino, O_RDWR);

    for (int op = 0; op < ops; op++) {
        uint32_t r = rnd(100);
        struct keg_fh *h = fh[rnd(2)];
        if (r < 50) {
            uint64_t off;
            uint32_t len = rnd(4) == 0 ? 1 + rnd(100) : 1 + rnd(200000);
            if (rnd(3) == 0 && last_end + len <= MAXF)
                off = last_end;                     /* sequential append pattern */
            else
                off = rnd(MAXF - len);
            fill_random(buf, len);
            write_all(&v, h, off, buf, len);
            memcpy(model + off, buf, len);
            if (off + len > msize)
                msize = off + len;
            last_end = off + len;
        } else if (r < 75) {
            uint64_t off = rnd((uint32_t)msize + 1000);
            uint32_t len = rnd(300000);
            size_t want = off < msize ? (size_t)KEG_MIN((uint64_t)len, msize - off) : 0;
            assert_int_equal(fsize(&v, ino), msize);
            assert_int_equal(keg_fs_read(v.fs, h, off, buf, len), (ssize_t)want);
            assert_memory_equal(buf, model + off, want);
        } else if (r < 80) {
            struct keg_attr in, out;
            uint64_t ns = rnd(MAXF);
            memset(&in, 0, sizeof(in));
            in.size = ns;
            assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_FS_SET_SIZE, &in, &out), 0);
            assert_int_equal(out.size, ns);
            if (ns < msize)
                memset(model + ns, 0, msize - ns);
            msize = ns;
        } else if (r < 92) {
            assert_int_equal(keg_fs_flush(v.fs, h, 1), 0);
        } else {
            int k = rnd(2);
            assert_int_equal(keg_fs_release(v.fs, fh[k]), 0);
            fh[k] = tvol_open(&v, ino, O_RDWR);
        }
    }
    assert_int_equal(keg_fs_release(v.fs, fh[0]), 0);
    assert_int_equal(keg_fs_release(v.fs, fh[1]), 0);
    tvol_umount(&v);

    /* remount: everything committed at close is there */
    tvol_mount(&v);
    fh[0] = tvol_open(&v, ino, O_RDONLY);
    assert_int_equal(fsize(&v, ino), msize);
    if (msize > 0)
        expect_read(&v, fh[0], 0, model, msize);
    assert_int_equal(keg_fs_release(v.fs, fh[0]), 0);
    tvol_cleanup(&v);
    keg_free(model);
    keg_free(buf);
}

static void test_io_random_model(void **state)
{
    (void)state;
    random_model_run("none", 0, 600);
}

static void test_io_random_small_buffer(void **state)
{
    (void)state;
    /* implicit commits all the time */
    random_model_run("none", 100000, 300);
}

static void test_io_random_zstd(void **state)
{
    (void)state;
    random_model_run("zstd", 0, 200);
}

/*--------------------------------------------------------------------------*/

struct chunk_seen {
    int      indx_seen[4];
    unsigned n;
};

static int chunk_cb(void *arg, uint32_t indx, const struct keg_slice *s)
{
    struct chunk_seen *cs = arg;
    (void)s;
    if (indx < 4)
        cs->indx_seen[indx]++;
    cs->n++;
    return 0;
}

static void test_io_chunk_boundary(void **state)
{
    struct tvol v;
    uint64_t ino;
    size_t n = 300000;
    uint64_t off = CHUNK - 100000;
    uint8_t *data = keg_malloc(n);
    struct chunk_seen cs = {{0}, 0};
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "big", &ino);
    fill_random(data, n);
    write_all(&v, fh, off, data, n);            /* one write across the boundary */
    assert_int_equal(fsize(&v, ino), off + n);  /* buffered size is visible */
    expect_read(&v, fh, off, data, n);
    expect_zeros(&v, fh, 0, 4096);
    expect_zeros(&v, fh, off - 5000, 5000);
    /* a second write ending exactly at the chunk end */
    write_all(&v, fh, CHUNK - 1000, data, 1000);
    memcpy(data + 99000, data, 1000);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    assert_int_equal(keg_fs_chunks(v.fs, ino, chunk_cb, &cs), 0);
    assert_true(cs.indx_seen[0] > 0);
    assert_true(cs.indx_seen[1] > 0);

    tvol_umount(&v);
    tvol_mount(&v);
    fh = tvol_open(&v, ino, O_RDONLY);
    expect_read(&v, fh, off, data, n);
    /* 128 KiB sequential reads across the boundary */
    for (size_t p = 0; p < n; p += 131072) {
        size_t l = KEG_MIN((size_t)131072, n - p);
        expect_read(&v, fh, off + p, data + p, l);
    }
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
    keg_free(data);
}

/* keg_fs_read_pin: only a committed range inside one block of one slice,
 * below the size, is pinned; everything else is left to keg_fs_read. */
static void test_io_read_pin(void **state)
{
    struct tvol v;
    uint64_t ino;
    size_t n = 3 * BS + 1000;
    uint8_t *data = keg_malloc(n);
    const void *p;
    void *pin;
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "f", &ino);
    fill_random(data, n);
    write_all(&v, fh, 0, data, n);
    /* buffered, not committed: not pinned */
    assert_int_equal(keg_fs_read_pin(v.fs, fh, 0, 4096, &p, &pin), 0);
    assert_null(pin);
    assert_int_equal(keg_fs_flush(v.fs, fh, 0), 0);
    /* inside block 1 */
    assert_int_equal(keg_fs_read_pin(v.fs, fh, BS + 10, BS - 10, &p, &pin), 1);
    assert_memory_equal(p, data + BS + 10, BS - 10);
    /* a second pin of the same block while the first is held */
    const void *p2;
    void *pin2;
    assert_int_equal(keg_fs_read_pin(v.fs, fh, BS, 100, &p2, &pin2), 1);
    assert_memory_equal(p2, data + BS, 100);
    keg_fs_read_unpin(v.fs, pin2);
    keg_fs_read_unpin(v.fs, pin);
    /* across a block boundary, past the end, empty: not pinned */
    assert_int_equal(keg_fs_read_pin(v.fs, fh, BS - 1, 2, &p, &pin), 0);
    assert_int_equal(keg_fs_read_pin(v.fs, fh, n - 10, 11, &p, &pin), 0);
    assert_int_equal(keg_fs_read_pin(v.fs, fh, 0, 0, &p, &pin), 0);
    /* the last, short block up to the end */
    assert_int_equal(keg_fs_read_pin(v.fs, fh, 3 * BS, 1000, &p, &pin), 1);
    assert_memory_equal(p, data + 3 * BS, 1000);
    keg_fs_read_unpin(v.fs, pin);
    /* a hole (extended by truncate) is not pinned; a rewrite shows at once */
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    struct keg_attr a;
    memset(&a, 0, sizeof(a));
    a.size = 8 * BS;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_FS_SET_SIZE, &a, &a), 0);
    fh = tvol_open(&v, ino, O_RDWR);
    assert_int_equal(keg_fs_read_pin(v.fs, fh, 5 * BS, 100, &p, &pin), 0);
    expect_zeros(&v, fh, 5 * BS, 100);
    write_all(&v, fh, 20, "rewritten", 9);
    memcpy(data + 20, "rewritten", 9);
    assert_int_equal(keg_fs_read_pin(v.fs, fh, 0, 100, &p, &pin), 0);    /* dirty */
    assert_int_equal(keg_fs_flush(v.fs, fh, 0), 0);
    expect_read(&v, fh, 0, data, 100);
    /* two slices in the range (the rewrite over the first write): not pinned */
    assert_int_equal(keg_fs_read_pin(v.fs, fh, 0, 100, &p, &pin), 0);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
    keg_free(data);
}

/*--------------------------------------------------------------------------*/

static void test_io_unlink_while_open(void **state)
{
    struct tvol v;
    uint64_t ino;
    uint8_t data[300000];
    struct keg_attr a;
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "u", &ino);
    fill_random(data, sizeof(data));
    write_all(&v, fh, 0, data, 200000);
    assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
    assert_true(tvol_count_objects(&v) > 0);

    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "u"), 0);
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, KEG_ROOT_INO, "u", &a), -ENOENT);
    /* still readable and writable through the handle */
    write_all(&v, fh, 200000, data + 200000, 100000);
    expect_read(&v, fh, 0, data, sizeof(data));
    assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
    expect_read(&v, fh, 0, data, sizeof(data));
    assert_true(tvol_count_objects(&v) > 0);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    /* purged at the last release; the deleter removes every block */
    assert_true(tvol_wait_objects(&v, 0, 100));

    /* unlink of a file that is not open: purged by the background worker */
    fh = tvol_create(&v, KEG_ROOT_INO, "w", &ino);
    write_all(&v, fh, 0, data, 150000);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    assert_true(tvol_count_objects(&v) > 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "w"), 0);
    assert_true(tvol_wait_objects(&v, 0, 100));

    /* rename over an open file: the replaced inode lives until release */
    struct keg_fh *fa = tvol_create(&v, KEG_ROOT_INO, "a", NULL);
    struct keg_fh *fb = tvol_create(&v, KEG_ROOT_INO, "b", NULL);
    write_all(&v, fa, 0, data, 1000);
    write_all(&v, fb, 0, data + 1000, 1000);
    assert_int_equal(keg_fs_flush(v.fs, fb, 1), 0);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "a", KEG_ROOT_INO, "b", 0), 0);
    expect_read(&v, fb, 0, data + 1000, 1000);
    assert_int_equal(keg_fs_release(v.fs, fb), 0);
    assert_int_equal(keg_fs_release(v.fs, fa), 0);
    tvol_cleanup(&v);
}

/* A file of more blocks than one deletion call takes (4096 block keys): the
 * deletion queue deletes every block, the last partial group included. */
static void test_io_delete_many_blocks(void **state)
{
    struct tvol v;
    enum { NBLK = 4096 + 1000 };
    uint8_t *data = malloc((size_t)NBLK * 4096);
    (void)state;
    assert_non_null(data);
    tvol_init(&v, 4096, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "big", NULL);
    fill_random(data, (size_t)NBLK * 4096);
    write_all(&v, fh, 0, data, (size_t)NBLK * 4096);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    fh = tvol_create(&v, KEG_ROOT_INO, "small", NULL);
    write_all(&v, fh, 0, data, 100);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    assert_true(tvol_count_objects(&v) >= NBLK + 1);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "big"), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "small"), 0);
    assert_true(tvol_wait_objects(&v, 0, 400));
    tvol_cleanup(&v);
    free(data);
}

/*--------------------------------------------------------------------------*/

static void test_io_copy_range(void **state)
{
    struct tvol v;
    uint64_t ia, ib;
    static uint8_t a[300000];
    static uint8_t want[300000];
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fa = tvol_create(&v, KEG_ROOT_INO, "src", &ia);
    fill_random(a, sizeof(a));
    memset(a + 150000, 0, 50000);                      /* a hole */
    write_all(&v, fa, 0, a, 150000);
    write_all(&v, fa, 200000, a + 200000, 100000);
    assert_int_equal(keg_fs_flush(v.fs, fa, 1), 0);
    long before = tvol_count_objects(&v);

    struct keg_fh *fb = tvol_create(&v, KEG_ROOT_INO, "dst", &ib);
    write_all(&v, fb, 0, a, 3000);                     /* buffered dst data is flushed first */
    assert_int_equal(keg_fs_copy_range(v.fs, &tv_root, fa, 1000, fb, 5000, 250000, 0), 250000);
    memset(want, 0, sizeof(want));
    memcpy(want, a, 3000);
    memcpy(want + 5000, a + 1000, 250000);
    assert_int_equal(fsize(&v, ib), 255000);
    expect_read(&v, fb, 0, want, 255000);

    /* destination crossing a chunk boundary; source clipped at its EOF */
    assert_int_equal(keg_fs_copy_range(v.fs, &tv_root, fa, 250000, fb, CHUNK - 30000, 100000, 0),
                     50000);
    expect_read(&v, fb, CHUNK - 30000, a + 250000, 50000);
    assert_int_equal(keg_fs_copy_range(v.fs, &tv_root, fa, 400000, fb, 0, 10, 0), 0);
    assert_int_equal(keg_fs_copy_range(v.fs, &tv_root, fa, 0, fb, 0, 10, 1), -EINVAL);
    assert_int_equal(keg_fs_copy_range(v.fs, &tv_root, fa, 0, fa, 100, 1000, 0), -EINVAL);

    /* no data was copied: no new objects (the 3000 bytes of dst are one) */
    assert_int_equal(tvol_count_objects(&v), before + 1);

    /* the source goes away: the shared slices stay referenced by dst */
    assert_int_equal(keg_fs_release(v.fs, fa), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "src"), 0);
    usleep(1500000);
    assert_int_equal(keg_fs_release(v.fs, fb), 0);
    tvol_umount(&v);
    tvol_mount(&v);
    fb = tvol_open(&v, ib, O_RDONLY);
    expect_read(&v, fb, 0, want, 255000);
    expect_read(&v, fb, CHUNK - 30000, a + 250000, 50000);
    assert_int_equal(keg_fs_release(v.fs, fb), 0);
    tvol_cleanup(&v);
}

/*--------------------------------------------------------------------------*/

static void test_io_fallocate(void **state)
{
    struct tvol v;
    uint64_t ino;
    static uint8_t want[400000];
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "fa", &ino);
    memset(want, 0xAA, 100000);
    write_all(&v, fh, 0, want, 100000);

    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh, 0, 0, 200000), 0);
    assert_int_equal(fsize(&v, ino), 200000);
    expect_read(&v, fh, 0, want, 200000);

    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh, FALLOC_FL_KEEP_SIZE, 0, 500000), 0);
    assert_int_equal(fsize(&v, ino), 200000);

    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh,
                                      FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1000, 2000), 0);
    memset(want + 1000, 0, 2000);
    assert_int_equal(fsize(&v, ino), 200000);
    expect_read(&v, fh, 0, want, 200000);

    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh, FALLOC_FL_ZERO_RANGE, 50000, 10000), 0);
    memset(want + 50000, 0, 10000);
    assert_int_equal(fsize(&v, ino), 200000);
    expect_read(&v, fh, 0, want, 200000);

    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh, FALLOC_FL_ZERO_RANGE, 190000, 60000), 0);
    assert_int_equal(fsize(&v, ino), 250000);
    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh,
                                      FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 240000, 160000),
                     0);
    assert_int_equal(fsize(&v, ino), 250000);
    expect_read(&v, fh, 0, want, 250000);

    /* punch past EOF changes nothing */
    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh,
                                      FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 300000, 100), 0);
    assert_int_equal(fsize(&v, ino), 250000);

    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh, FALLOC_FL_PUNCH_HOLE, 0, 10),
                     -EOPNOTSUPP);
    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh, FALLOC_FL_COLLAPSE_RANGE, 0, 65536),
                     -EOPNOTSUPP);
    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh, 0, 0, 0), -EINVAL);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

static void test_io_seek_data_hole(void **state)
{
    struct tvol v;
    uint64_t ino;
    uint8_t d[1000];
    (void)state;

    memset(d, 7, sizeof(d));
    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "sp", &ino);
    write_all(&v, fh, 0, d, 1000);
    write_all(&v, fh, 200000, d, 1000);
    write_all(&v, fh, CHUNK + 5000, d, 1000);     /* data in the second chunk */

    assert_int_equal(keg_fs_lseek(v.fs, fh, 0, SEEK_DATA), 0);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 0, SEEK_HOLE), 1000);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 500, SEEK_HOLE), 1000);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 1000, SEEK_DATA), 200000);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 200500, SEEK_DATA), 200500);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 200000, SEEK_HOLE), 201000);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 201000, SEEK_DATA), CHUNK + 5000);
    assert_int_equal(keg_fs_lseek(v.fs, fh, CHUNK + 5000, SEEK_HOLE), CHUNK + 6000);
    assert_int_equal(keg_fs_lseek(v.fs, fh, CHUNK + 6000, SEEK_DATA), -ENXIO);
    assert_int_equal(keg_fs_lseek(v.fs, fh, CHUNK + 7000, SEEK_HOLE), -ENXIO);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 0, SEEK_END), -EINVAL);

    assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh,
                                      FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 100), 0);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 0, SEEK_HOLE), 100);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 100, SEEK_DATA), 200);
    /* a file that ends in data: the hole is at EOF */
    struct keg_attr in, out;
    memset(&in, 0, sizeof(in));
    in.size = 200500;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_FS_SET_SIZE, &in, &out), 0);
    assert_int_equal(keg_fs_lseek(v.fs, fh, 200000, SEEK_HOLE), 200500);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

/*--------------------------------------------------------------------------*/

static void test_io_corrupt_block_eio(void **state)
{
    struct tvol v;
    uint64_t ino;
    static uint8_t data[100000];
    uint8_t got[100000];
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "c", &ino);
    fill_random(data, sizeof(data));
    write_all(&v, fh, 0, data, sizeof(data));
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_umount(&v);

    assert_int_equal(tvol_count_objects(&v), 2);      /* 64 KiB + 34464 bytes */
    FILE *f = fopen(tvol_first_obj, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 100, SEEK_SET), 0);
    int ch = fgetc(f);
    assert_int_equal(fseek(f, 100, SEEK_SET), 0);
    fputc(ch ^ 0x5A, f);
    fclose(f);

    tvol_mount(&v);
    fh = tvol_open(&v, ino, O_RDONLY);
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), -EIO);
    /* a missing block is EIO too */
    assert_int_equal(unlink(tvol_first_obj), 0);
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), -EIO);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

/* A block that is referenced but not in the store yet (staged by a writeback
 * mounter elsewhere) is waited for, within missing_block_wait_ms. */
struct restore_arg {
    char from[512];
    char to[512];
};

static void *restore_later(void *p)
{
    struct restore_arg *a = p;
    struct timespec ts = {0, 400000000};
    nanosleep(&ts, NULL);
    if (rename(a->from, a->to) != 0)
        fprintf(stderr, "restore_later: rename failed\n");
    return NULL;
}

static void test_io_missing_block_wait(void **state)
{
    struct tvol v;
    struct keg_fs_conf conf;
    struct restore_arg ra;
    pthread_t th;
    uint64_t ino;
    static uint8_t data[100000];
    static uint8_t got[100000];
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "w", &ino);
    fill_random(data, sizeof(data));
    write_all(&v, fh, 0, data, sizeof(data));
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_umount(&v);

    assert_int_equal(tvol_count_objects(&v), 2);
    snprintf(ra.to, sizeof(ra.to), "%s", tvol_first_obj);
    snprintf(ra.from, sizeof(ra.from), "%s/away", v.dir);
    assert_int_equal(rename(ra.to, ra.from), 0);

    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v.url;
    conf.heartbeat_sec = 1;
    conf.missing_block_wait_ms = 5000;
    assert_int_equal(keg_fs_new(&conf, &v.fs), 0);
    fh = tvol_open(&v, ino, O_RDONLY);
    assert_int_equal(pthread_create(&th, NULL, restore_later, &ra), 0);
    int64_t t0 = keg_mono_ns();
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), (ssize_t)sizeof(got));
    int64_t waited = keg_mono_ns() - t0;
    pthread_join(th, NULL);
    assert_memory_equal(got, data, sizeof(data));
    assert_true(waited >= 300000000);            /* it did wait for the block */
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_umount(&v);

    /* a block that never arrives: EIO once the wait is over */
    assert_int_equal(rename(ra.to, ra.from), 0);
    conf.missing_block_wait_ms = 700;
    assert_int_equal(keg_fs_new(&conf, &v.fs), 0);
    fh = tvol_open(&v, ino, O_RDONLY);
    t0 = keg_mono_ns();
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), -EIO);
    waited = keg_mono_ns() - t0;
    assert_true(waited >= 600000000 && waited < 5000000000LL);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

static void test_io_deferred_write_error(void **state)
{
    struct tvol v;
    uint64_t ino;
    uint8_t d[5000];
    (void)state;

    memset(d, 1, sizeof(d));
    tvol_init(&v, BS, "none");
    setenv("KEG_FAULTY", "seed=1,err=1", 1);
    struct keg_fs_conf conf;
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v.url;
    conf.heartbeat_sec = 1;
    struct keg_stack_conf sc = {.retry_deadline_ms = 300};   /* every op fails: keep retries short */
    conf.stack = &sc;
    assert_int_equal(keg_fs_new(&conf, &v.fs), 0);
    unsetenv("KEG_FAULTY");
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "e", &ino);
    write_all(&v, fh, 0, d, sizeof(d));               /* buffered: succeeds */
    assert_int_equal(fsize(&v, ino), sizeof(d));
    int64_t t0 = keg_mono_ns();
    int rc = keg_fs_flush(v.fs, fh, 1);                /* upload fails, after the retries */
    int64_t took = keg_mono_ns() - t0;
    assert_int_equal(rc, -EIO);
    assert_true(took >= 250000000 && took < 3000000000LL);
    assert_int_equal(fsize(&v, ino), 0);               /* nothing committed */
    assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);    /* reported once */

    /* an implicit commit's error is returned by the next flush */
    write_all(&v, fh, 0, d, sizeof(d));
    uint8_t got[10];
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), 0);  /* read commits: fails */
    assert_true(keg_fs_flush(v.fs, fh, 1) < 0);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

static void test_io_keep_cache_and_trunc(void **state)
{
    struct tvol v;
    uint64_t ino;
    uint8_t d[3000];
    struct keg_fh *fh = NULL, *w;
    int keep = -1;
    (void)state;

    memset(d, 3, sizeof(d));
    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    w = tvol_create(&v, KEG_ROOT_INO, "k", &ino);
    write_all(&v, w, 0, d, sizeof(d));
    assert_int_equal(keg_fs_release(v.fs, w), 0);

    assert_int_equal(keg_fs_open(v.fs, &tv_root, ino, O_RDONLY, &fh, &keep), 0);
    assert_int_equal(keep, 0);          /* changed since the create */
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    assert_int_equal(keg_fs_open(v.fs, &tv_root, ino, O_RDONLY, &fh, &keep), 0);
    assert_int_equal(keep, 1);          /* unchanged */
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    w = tvol_open(&v, ino, O_WRONLY);
    write_all(&v, w, 10, d, 10);
    assert_int_equal(keg_fs_release(v.fs, w), 0);
    assert_int_equal(keg_fs_open(v.fs, &tv_root, ino, O_RDONLY, &fh, &keep), 0);
    assert_int_equal(keep, 0);          /* written */
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    /* O_TRUNC */
    assert_int_equal(keg_fs_open(v.fs, &tv_root, ino, O_WRONLY | O_TRUNC, &fh, &keep), 0);
    assert_int_equal(keep, 0);
    assert_int_equal(fsize(&v, ino), 0);
    uint8_t got[10];
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), 0);
    assert_int_equal(keg_fs_write(v.fs, fh, 0, d, 10), 10);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    assert_int_equal(fsize(&v, ino), 10);
    tvol_cleanup(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_io_random_model),
        cmocka_unit_test(test_io_random_small_buffer),
        cmocka_unit_test(test_io_random_zstd),
        cmocka_unit_test(test_io_chunk_boundary),
        cmocka_unit_test(test_io_read_pin),
        cmocka_unit_test(test_io_unlink_while_open),
        cmocka_unit_test(test_io_delete_many_blocks),
        cmocka_unit_test(test_io_copy_range),
        cmocka_unit_test(test_io_fallocate),
        cmocka_unit_test(test_io_seek_data_hole),
        cmocka_unit_test(test_io_corrupt_block_eio),
        cmocka_unit_test(test_io_missing_block_wait),
        cmocka_unit_test(test_io_deferred_write_error),
        cmocka_unit_test(test_io_keep_cache_and_trunc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
