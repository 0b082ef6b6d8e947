/* test_fs_budget.c -- one memory budget (buffer_size) for the decoded-block read cache
 * and the write buffers (core/fs/read.c DESIGN): reads fill the cache up to the budget;
 * buffered writes shrink it so that cache + write bytes stay within the budget (the read
 * share never below its floor, budget / 8); the optional read cap (block_cache_size)
 * bounds the read share; every byte read back is right.
 * SQLite engine + file store in a temporary directory, mounted without a session, so
 * there are no fetch or upload threads and the figures are exact when a call returns. */
#define _GNU_SOURCE 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define TV_RND_SEED 0x9E3779B97F4A7C15ULL
#include "test_fs_helpers.h"
#include "fs/fs_i.h"

#define BS        (64u << 10)
#define BUDGET    (4ull << 20)
#define FLOOR     (BUDGET / 8)
#define NREAD     16
#define READ_LEN  (8 * BS)              /* 16 x 512 KiB = twice the budget */
#define WRITE_LEN (60u << 10)           /* under a block: stays buffered until commit */

struct rfiles {
    uint64_t ino[NREAD];
    uint8_t *data[NREAD];
};

static void mount_budget(struct tvol *v, uint64_t cap)
{
    struct keg_fs_conf conf;
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v->url;
    conf.mountpoint = "/test";
    conf.no_session = 1;
    conf.buffer_size = BUDGET;
    conf.block_cache_size = cap;
    assert_int_equal(keg_fs_new(&conf, &v->fs), 0);
}

static uint64_t used(struct tvol *v)
{
    return fs_bcache_used(v->fs->bc);
}

static uint64_t wbytes(struct tvol *v)
{
    return atomic_load(&v->fs->wbytes);
}

/* NREAD committed files of READ_LEN random bytes. */
static void make_files(struct tvol *v, struct rfiles *f)
{
    for (int i = 0; i < NREAD; i++) {
        char name[32];
        snprintf(name, sizeof(name), "r%02d", i);
        f->data[i] = keg_malloc(READ_LEN);
        assert_non_null(f->data[i]);
        fill_random(f->data[i], READ_LEN);
        struct keg_fh *fh = tvol_create(v, KEG_ROOT_INO, name, &f->ino[i]);
        assert_int_equal(keg_fs_write(v->fs, fh, 0, f->data[i], READ_LEN), (ssize_t)READ_LEN);
        assert_int_equal(keg_fs_flush(v->fs, fh, 1), 0);
        assert_int_equal(keg_fs_release(v->fs, fh), 0);
    }
    assert_int_equal(wbytes(v), 0);
}

static void free_files(struct rfiles *f)
{
    for (int i = 0; i < NREAD; i++)
        keg_free(f->data[i]);
}

/* Read file i in 128 KiB reads and compare; after every read the read share is
 * within max_used. */
static void read_check(struct tvol *v, const struct rfiles *f, int i, uint64_t max_used)
{
    static uint8_t got[128 << 10];
    struct keg_fh *fh = tvol_open(v, f->ino[i], O_RDONLY);
    for (uint64_t off = 0; off < READ_LEN; off += sizeof(got)) {
        assert_int_equal(keg_fs_read(v->fs, fh, off, got, sizeof(got)), (ssize_t)sizeof(got));
        assert_memory_equal(got, f->data[i] + off, sizeof(got));
        assert_true(used(v) <= max_used);
    }
    assert_int_equal(keg_fs_release(v->fs, fh), 0);
}

/* Read every file; the cache fills up to the budget and no further. */
static void read_all(struct tvol *v, const struct rfiles *f, uint64_t max_used)
{
    for (int i = 0; i < NREAD; i++)
        read_check(v, f, i, max_used);
}

/* Buffered writers: n new files with WRITE_LEN bytes each, left open and not
 * committed (each holds one block buffer in fs->wbytes). */
struct writers {
    int            n;
    uint64_t       ino[64];
    struct keg_fh *fh[64];
    uint8_t        data[64][WRITE_LEN];
};

static void write_more(struct tvol *v, struct writers *w, int n)
{
    for (int k = 0; k < n; k++) {
        char name[32];
        int i = w->n++;
        assert_true(i < 64);
        snprintf(name, sizeof(name), "w%02d", i);
        fill_random(w->data[i], WRITE_LEN);
        w->fh[i] = tvol_create(v, KEG_ROOT_INO, name, &w->ino[i]);
        assert_int_equal(keg_fs_write(v->fs, w->fh[i], 0, w->data[i], WRITE_LEN),
                         (ssize_t)WRITE_LEN);
    }
}

/* Close every writer (commits), then check what each file holds. */
static void close_writers(struct tvol *v, struct writers *w)
{
    static uint8_t got[WRITE_LEN + 1];
    for (int i = 0; i < w->n; i++) {
        assert_int_equal(keg_fs_flush(v->fs, w->fh[i], 1), 0);
        assert_int_equal(keg_fs_release(v->fs, w->fh[i]), 0);
    }
    assert_int_equal(wbytes(v), 0);
    for (int i = 0; i < w->n; i++) {
        struct keg_fh *fh = tvol_open(v, w->ino[i], O_RDONLY);
        assert_int_equal(keg_fs_read(v->fs, fh, 0, got, sizeof(got)), (ssize_t)WRITE_LEN);
        assert_memory_equal(got, w->data[i], WRITE_LEN);
        assert_int_equal(keg_fs_release(v->fs, fh), 0);
    }
}

/*--------------------------------------------------------------------------*/

/* Reads take the whole budget while nothing is written; buffered writes
 * shrink the read share so that reads + writes stay within the budget. */
static void test_writes_shrink_read_cache(void **state)
{
    struct tvol v;
    struct rfiles f;
    struct writers *w = keg_calloc(1, sizeof(*w));
    (void)state;

    assert_non_null(w);
    tvol_init(&v, BS, "none");
    mount_budget(&v, 0);
    make_files(&v, &f);
    assert_int_equal(used(&v), 0);     /* uploads do not fill the read cache */

    /* nothing written: the read cache uses the budget, and not more */
    read_all(&v, &f, BUDGET);
    assert_true(used(&v) > BUDGET - 2 * BS);

    /* 24 buffered writers of one 64 KiB block each: 1.5 MiB of write bytes */
    write_more(&v, w, 24);
    assert_int_equal(wbytes(&v), 24ull * BS);
    assert_true(used(&v) + wbytes(&v) <= BUDGET);
    /* reading on keeps within budget - write bytes, and the data is right */
    read_all(&v, &f, BUDGET - wbytes(&v));
    assert_true(used(&v) + wbytes(&v) <= BUDGET);
    assert_true(used(&v) > BUDGET - wbytes(&v) - 2 * BS);

    /* writers take nearly all of it: the read share shrinks to its floor */
    write_more(&v, w, 36);
    assert_int_equal(wbytes(&v), 60ull * BS);
    assert_true(used(&v) <= FLOOR);
    read_all(&v, &f, FLOOR);
    assert_true(used(&v) > FLOOR - 2 * BS);

    /* the writers commit: the read share grows back to the whole budget */
    close_writers(&v, w);
    read_all(&v, &f, BUDGET);
    assert_true(used(&v) > BUDGET - 2 * BS);

    free_files(&f);
    keg_free(w);
    tvol_cleanup(&v);
}

/* The optional read cap bounds the read share even when nothing is written,
 * and writes still shrink it below the cap. */
static void test_read_cap(void **state)
{
    const uint64_t cap = 1ull << 20;
    struct tvol v;
    struct rfiles f;
    struct writers *w = keg_calloc(1, sizeof(*w));
    (void)state;

    assert_non_null(w);
    tvol_init(&v, BS, "none");
    mount_budget(&v, cap);
    make_files(&v, &f);

    read_all(&v, &f, cap);
    assert_true(used(&v) > cap - 2 * BS);

    /* 3.25 MiB written: 0.75 MiB left for reads, under the cap */
    write_more(&v, w, 52);
    assert_true(used(&v) + wbytes(&v) <= BUDGET);
    read_all(&v, &f, BUDGET - wbytes(&v));

    close_writers(&v, w);
    read_all(&v, &f, cap);

    free_files(&f);
    keg_free(w);
    tvol_cleanup(&v);
}

/* A read cap under the floor wins: the user asked for less. */
static void test_small_cap(void **state)
{
    const uint64_t cap = 2 * BS;
    struct tvol v;
    struct rfiles f;
    (void)state;

    tvol_init(&v, BS, "none");
    mount_budget(&v, cap);
    make_files(&v, &f);
    read_all(&v, &f, cap);
    free_files(&f);
    tvol_cleanup(&v);
}

/* Writes of 128 KiB and more take whole-block buffers, which are reused: at
 * most 4 stay idle, nothing stays charged to the budget after the commit, and
 * every byte reads back (with lz4 too, whose encoded bound is larger). */
static void test_block_buffers_reused(void **state)
{
    const char *codecs[2] = {"none", "lz4"};
    const uint32_t len = 32 * BS;
    uint8_t *data = keg_malloc(len), *got = keg_malloc(len);
    (void)state;

    assert_non_null(data);
    assert_non_null(got);
    for (int c = 0; c < 2; c++) {
        struct tvol v;
        tvol_init(&v, BS, codecs[c]);
        mount_budget(&v, 0);
        assert_int_equal(v.fs->nbigbuf, 0);
        for (int k = 0; k < 3; k++) {
            char name[16];
            uint64_t ino;
            struct keg_fh *fh;
            snprintf(name, sizeof(name), "big%d", k);
            fill_random(data, len);
            fh = tvol_create(&v, KEG_ROOT_INO, name, &ino);
            for (uint32_t off = 0; off < len; off += 128u << 10)
                assert_int_equal(keg_fs_write(v.fs, fh, off, data + off, 128u << 10),
                                 (ssize_t)(128u << 10));
            assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
            assert_int_equal(keg_fs_release(v.fs, fh), 0);
            assert_int_equal(wbytes(&v), 0);
            assert_true(v.fs->nbigbuf >= 1 && v.fs->nbigbuf <= 4);
            fh = tvol_open(&v, ino, O_RDONLY);
            assert_int_equal(keg_fs_read(v.fs, fh, 0, got, len), (ssize_t)len);
            assert_memory_equal(got, data, len);
            assert_int_equal(keg_fs_release(v.fs, fh), 0);
        }
        tvol_cleanup(&v);
    }
    keg_free(data);
    keg_free(got);
}

/* The read cache's counters (keg_fs_mem_stats, exported as metrics): a block is a
 * miss once, a hit after; reading twice the budget evicts. */
static void test_cache_counters(void **state)
{
    struct rfiles f;
    struct tvol v;
    struct keg_fs_mem_stats m;
    (void)state;

    tvol_init(&v, BS, "none");
    mount_budget(&v, 0);
    make_files(&v, &f);
    keg_fs_mem_stats(v.fs, &m);
    assert_int_equal(m.read_hits + m.read_misses + m.read_prefetched, 0);
    assert_int_equal(m.read_evicted + m.read_dropped, 0);

    /* one file, 128 KiB reads of 64 KiB blocks: each read looks up two blocks */
    read_check(&v, &f, 0, BUDGET);
    keg_fs_mem_stats(v.fs, &m);
    assert_int_equal(m.read_hits + m.read_misses, READ_LEN / BS);
    assert_int_equal(m.read_misses + m.read_prefetched, READ_LEN / BS);
    uint64_t fetched = m.read_misses + m.read_prefetched;

    /* again: everything is cached, every lookup is a hit */
    uint64_t hits = m.read_hits;
    read_check(&v, &f, 0, BUDGET);
    keg_fs_mem_stats(v.fs, &m);
    assert_int_equal(m.read_hits - hits, READ_LEN / BS);
    assert_int_equal(m.read_misses + m.read_prefetched, fetched);
    assert_int_equal(m.read_evicted, 0);

    /* all 16 files: twice the budget, so the oldest blocks make room */
    read_all(&v, &f, BUDGET);
    keg_fs_mem_stats(v.fs, &m);
    assert_true(m.read_evicted >= (NREAD * READ_LEN - BUDGET) / BS);
    assert_int_equal(m.read_misses + m.read_prefetched, (uint64_t)NREAD * READ_LEN / BS);

    free_files(&f);
    tvol_cleanup(&v);
}

/* Drop-behind (core/fs/read.c): a steady sequential reader gives back the
 * blocks it finished, so reading a file much larger than FS_DROP_BEHIND holds
 * about FS_DROP_BEHIND of cache, not the file; a reader in random order keeps
 * what it read (up to the budget); a pinned block that the reader passes stays
 * valid; a second reader behind the first reads right (it fetches again). */
static void test_drop_behind(void **state)
{
    const uint32_t len = 3 * FS_DROP_BEHIND;    /* 24 MiB: 384 blocks */
    const uint32_t rd = 128u << 10;
    const uint64_t bound = FS_DROP_BEHIND + 3 * BS;
    uint8_t *data = keg_malloc(len);
    static uint8_t got[128u << 10];
    struct keg_fs_conf conf;
    struct tvol v;
    uint64_t ino;
    (void)state;

    assert_non_null(data);
    tvol_init(&v, BS, "none");
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v.url;
    conf.mountpoint = "/test";
    conf.no_session = 1;
    conf.buffer_size = 64ull << 20;     /* room for the whole file */
    assert_int_equal(keg_fs_new(&conf, &v.fs), 0);
    fill_random(data, len);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "big", &ino);
    for (uint32_t off = 0; off < len; off += rd)
        assert_int_equal(keg_fs_write(v.fs, fh, off, data + off, rd), (ssize_t)rd);
    assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    /* sequential, with block 0 pinned from the start */
    const void *p0;
    void *pin0;
    fh = tvol_open(&v, ino, O_RDONLY);
    assert_int_equal(keg_fs_read_pin(v.fs, fh, 0, 100, &p0, &pin0), 1);
    uint64_t peak = 0;
    for (uint32_t off = 0; off < len; off += rd) {
        assert_int_equal(keg_fs_read(v.fs, fh, off, got, rd), (ssize_t)rd);
        assert_memory_equal(got, data + off, rd);
        peak = KEG_MAX(peak, used(&v));
        assert_true(used(&v) <= bound + BS);    /* + the pinned block */
    }
    assert_true(peak > FS_DROP_BEHIND / 2);    /* it did cache what it read */
    struct keg_fs_mem_stats ms;
    keg_fs_mem_stats(v.fs, &ms);
    /* each of the 384 blocks fetched once (read or read ahead), the finished ones
     * dropped behind the reader, none evicted for room (the budget holds the file) */
    assert_int_equal(ms.read_misses + ms.read_prefetched, len / BS);
    assert_true(ms.read_dropped >= (len - bound - BS) / BS);
    assert_int_equal(ms.read_evicted, 0);
    assert_memory_equal(p0, data, 100);
    keg_fs_read_unpin(v.fs, pin0);
    /* a second handle reading behind a first one, interleaved */
    struct keg_fh *fh2 = tvol_open(&v, ino, O_RDONLY);
    uint64_t lag = FS_DROP_BEHIND + 4 * BS;
    for (uint64_t off = 0; off < len + lag; off += rd) {
        if (off < len) {
            assert_int_equal(keg_fs_read(v.fs, fh, off, got, rd), (ssize_t)rd);
            assert_memory_equal(got, data + off, rd);
        }
        if (off >= lag) {
            assert_int_equal(keg_fs_read(v.fs, fh2, off - lag, got, rd), (ssize_t)rd);
            assert_memory_equal(got, data + off - lag, rd);
        }
    }
    assert_int_equal(keg_fs_release(v.fs, fh2), 0);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    /* random order (every other 128 KiB, backwards): nothing is dropped */
    fh = tvol_open(&v, ino, O_RDONLY);
    uint64_t before = used(&v);
    for (uint32_t off = len - 2 * rd;; off -= 2 * rd) {
        assert_int_equal(keg_fs_read(v.fs, fh, off, got, rd), (ssize_t)rd);
        assert_memory_equal(got, data + off, rd);
        if (off == 0)
            break;
    }
    assert_true(used(&v) >= len / 2 && used(&v) >= before);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    /* 1 MiB reads (what the kernel sends with its 4 MiB read-ahead), 16
     * blocks each, on a fresh mount: the bound holds as well */
    const uint32_t big = 1u << 20;
    uint8_t *bgot = keg_malloc(big);
    assert_non_null(bgot);
    keg_fs_free(v.fs);
    assert_int_equal(keg_fs_new(&conf, &v.fs), 0);
    fh = tvol_open(&v, ino, O_RDONLY);
    for (uint32_t off = 0; off < len; off += big) {
        assert_int_equal(keg_fs_read(v.fs, fh, off, bgot, big), (ssize_t)big);
        assert_memory_equal(bgot, data + off, big);
        assert_true(used(&v) <= bound + big);
    }
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    keg_free(bgot);
    tvol_cleanup(&v);
    keg_free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_shrink_read_cache),
        cmocka_unit_test(test_read_cap),
        cmocka_unit_test(test_small_cap),
        cmocka_unit_test(test_block_buffers_reused),
        cmocka_unit_test(test_drop_behind),
        cmocka_unit_test(test_cache_counters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
