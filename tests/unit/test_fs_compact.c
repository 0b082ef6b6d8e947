/* test_fs_compact.c -- background compaction, read-ahead / parallel fetches and the upload
 * pipeline of core/fs: content against a model, slice counts, object counts, memory bound,
 * failed uploads never committed.  SQLite engine + file store (faulty layer via KEG_FAULTY). */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <linux/falloc.h>

#define TV_RND_SEED 0x9E3779B97F4A7C15ULL
#include "test_fs_helpers.h"
#include "fs/fs_i.h"
#include "keg/stack.h"

/* no retry layer: the first failed put fails the flush */
static const struct keg_stack_conf nostack_retry = {.no_retries = 1};

#define BS (64u << 10)

struct slices {
    unsigned         n;
    struct keg_slice last;
};

static int count_cb(void *arg, uint32_t indx, const struct keg_slice *s)
{
    struct slices *c = arg;
    (void)indx;
    c->n++;
    c->last = *s;
    return 0;
}

/*--------------------------------------------------------------------------*/

#define CSPAN (1u << 20)

static void test_compact_random_writes(void **state)
{
    struct tvol v;
    uint64_t ino = 0;
    uint8_t *model = keg_calloc(1, CSPAN);
    uint8_t *buf = keg_malloc(CSPAN);
    uint64_t msize = 0;
    struct slices c = {0};
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "frag", &ino);
    /* 500 small random writes, each committed: compaction runs while writing */
    for (int i = 0; i < 530; i++) {
        uint32_t len = 1 + rnd(3000);
        uint32_t off = rnd(CSPAN - len);
        fill_random(buf, len);
        assert_int_equal(keg_fs_write(v.fs, fh, off, buf, len), (ssize_t)len);
        memcpy(model + off, buf, len);
        msize = KEG_MAX(msize, (uint64_t)off + len);
        if (i < 500)
            assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);   /* the last 30 commit together */
    }
    assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
    assert_int_equal(fs_compact_wait_idle(v.fs, 30000), 0);
    assert_true(v.fs->cmp_done > 0);
    /* the background policy leaves a bounded tail of unmerged slices */
    assert_int_equal(keg_fs_chunks(v.fs, ino, count_cb, &c), 0);
    assert_true(c.n >= 1 && c.n <= 501);
    /* content identical before the final merge too */
    assert_int_equal(keg_fs_read(v.fs, fh, 0, buf, CSPAN), (ssize_t)msize);
    assert_memory_equal(buf, model, msize);
    /* a direct compaction merges whatever is left */
    assert_int_equal(fs_compact_chunk(v.fs, ino, 0), 0);
    memset(&c, 0, sizeof(c));
    assert_int_equal(keg_fs_chunks(v.fs, ino, count_cb, &c), 0);
    assert_int_equal(c.n, 1);
    assert_int_not_equal(c.last.id, 0);
    /* holes before/after the data range stay uncovered */
    for (uint64_t p = 0; p < c.last.pos; p++)
        assert_int_equal(model[p], 0);
    assert_true((uint64_t)c.last.pos + c.last.len == msize);

    /* content identical, through this handle and after a remount */
    assert_int_equal(keg_fs_read(v.fs, fh, 0, buf, CSPAN), (ssize_t)msize);
    assert_memory_equal(buf, model, msize);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    /* the old slices' objects are deleted by the deleter */
    long want = (long)((c.last.size + BS - 1) / BS);
    assert_true(tvol_wait_objects(&v, want, 200));
    tvol_umount(&v);
    tvol_mount(&v);
    fh = tvol_open(&v, ino, O_RDONLY);
    memset(buf, 0xEE, CSPAN);
    assert_int_equal(keg_fs_read(v.fs, fh, 0, buf, CSPAN), (ssize_t)msize);
    assert_memory_equal(buf, model, msize);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
    keg_free(model);
    keg_free(buf);
}

static void test_compact_holes(void **state)
{
    struct tvol v;
    uint64_t ino = 0;
    struct keg_attr in, out;
    struct slices c = {0};
    static uint8_t got[300000];
    static uint8_t zero[300000];
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "holes", &ino);
    memset(&in, 0, sizeof(in));
    in.size = 300000;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_FS_SET_SIZE, &in, &out), 0);
    for (int i = 0; i < 25; i++)
        assert_int_equal(keg_fs_fallocate(v.fs, &tv_root, fh,
                                          FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                          (uint64_t)i * 10000, 5000), 0);
    /* a read finds the fragmented chunk and queues it */
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), (ssize_t)sizeof(got));
    assert_int_equal(fs_compact_wait_idle(v.fs, 30000), 0);
    assert_int_equal(keg_fs_chunks(v.fs, ino, count_cb, &c), 0);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.last.id, 0);                   /* all holes: one hole */
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), (ssize_t)sizeof(got));
    assert_memory_equal(got, zero, sizeof(got));
    assert_int_equal(tvol_count_objects(&v), 0);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

/* Direct compaction: a merged chunk is left alone, an emptied one is a no-op. */
static void test_compact_direct(void **state)
{
    struct tvol v;
    uint64_t ino = 0;
    uint8_t d[1000];
    struct keg_attr in, out;
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "stale", &ino);
    memset(d, 9, sizeof(d));
    for (int i = 0; i < 10; i++) {
        assert_int_equal(keg_fs_write(v.fs, fh, (uint64_t)i * 3000, d, sizeof(d)), 1000);
        assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
    }
    /* the second call sees a 1-entry list: nothing to do */
    assert_int_equal(fs_compact_chunk(v.fs, ino, 0), 0);
    assert_int_equal(fs_compact_chunk(v.fs, ino, 0), 0);
    memset(&in, 0, sizeof(in));
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_FS_SET_SIZE, &in, &out), 0);
    assert_int_equal(fs_compact_chunk(v.fs, ino, 0), 0);   /* empty chunk: nothing to do */
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    assert_true(tvol_wait_objects(&v, 0, 200));
    tvol_cleanup(&v);
}

/* Writes, commits and truncates race with the compactor: the content always
 * matches the model, and once everything settled the store holds exactly the
 * blocks of the referenced slices (aborted compactions cleaned up after
 * themselves, replaced slices were deleted). */
struct distinct {
    uint64_t ids[4096];
    uint32_t sizes[4096];
    unsigned n;
};

static int distinct_cb(void *arg, uint32_t indx, const struct keg_slice *s)
{
    struct distinct *d = arg;
    (void)indx;
    if (s->id == 0)
        return 0;
    for (unsigned i = 0; i < d->n; i++) {
        if (d->ids[i] == s->id)
            return 0;
    }
    assert_true(d->n < 4096);
    d->ids[d->n] = s->id;
    d->sizes[d->n] = s->size;
    d->n++;
    return 0;
}

static void test_compact_races(void **state)
{
    struct tvol v;
    uint64_t ino = 0;
    uint8_t *model = keg_calloc(1, CSPAN);
    uint8_t *buf = keg_malloc(CSPAN);
    uint64_t msize = 0;
    static struct distinct d;
    (void)state;

    tvol_init(&v, BS, "none");
    setenv("KEG_FAULTY", "seed=3,delay=2", 1);     /* slow compactions: truncates land inside */
    tvol_mount(&v);
    unsetenv("KEG_FAULTY");
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "race", &ino);
    for (int i = 0; i < 630; i++) {
        if (i % 20 == 19) {
            struct keg_attr in, out;
            uint64_t ns = i % 60 == 59 ? 0 : rnd(CSPAN);  /* 0: the chunk goes away */
            memset(&in, 0, sizeof(in));
            in.size = ns;
            assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_FS_SET_SIZE, &in, &out), 0);
            if (ns < msize)
                memset(model + ns, 0, msize - ns);
            msize = ns;
            continue;
        }
        uint32_t len = 1 + rnd(5000);
        uint32_t off = rnd(CSPAN - len);
        fill_random(buf, len);
        assert_int_equal(keg_fs_write(v.fs, fh, off, buf, len), (ssize_t)len);
        memcpy(model + off, buf, len);
        msize = KEG_MAX(msize, (uint64_t)off + len);
        assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
        if (i % 25 == 0) {
            assert_int_equal(keg_fs_read(v.fs, fh, 0, buf, CSPAN), (ssize_t)msize);
            assert_memory_equal(buf, model, msize);
        }
    }
    assert_int_equal(fs_compact_wait_idle(v.fs, 30000), 0);
    assert_int_equal(fs_compact_chunk(v.fs, ino, 0), 0);  /* whatever is left: one last pass */
    assert_int_equal(keg_fs_read(v.fs, fh, 0, buf, CSPAN), (ssize_t)msize);
    assert_memory_equal(buf, model, msize);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    memset(&d, 0, sizeof(d));
    assert_int_equal(keg_fs_chunks(v.fs, ino, distinct_cb, &d), 0);
    long want = 0;
    for (unsigned i = 0; i < d.n; i++)
        want += (long)((d.sizes[i] + BS - 1) / BS);
    print_message("%u slice(s) left, %llu compactions, %llu abandoned (chunk changed)\n",
                  d.n, (unsigned long long)v.fs->cmp_done, (unsigned long long)v.fs->cmp_again);
    assert_true(d.n <= 2);
    assert_true(tvol_wait_objects(&v, want, 200));
    tvol_cleanup(&v);
    keg_free(model);
    keg_free(buf);
}

/* 4 KiB appends, each committed (open-append-close loops): compaction keeps
 * the slice list bounded but rewrites only a constant factor of the bytes
 * appended, not the whole file every ~20 appends (which was quadratic:
 * ~25x here, ~50x at 8 MiB). */
static void test_compact_appends_linear(void **state)
{
    struct tvol v;
    uint64_t ino = 0;
    const int n = 1000;
    const uint32_t len = 4096;
    uint8_t *model = keg_malloc((size_t)n * len);
    uint8_t *buf = keg_malloc((size_t)n * len);
    struct slices c = {0};
    uint64_t total = (uint64_t)n * len;
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "log", &ino);
    fill_random(model, (size_t)n * len);
    for (int i = 0; i < n; i++) {
        assert_int_equal(keg_fs_write(v.fs, fh, (uint64_t)i * len, model + (size_t)i * len,
                                      len), (ssize_t)len);
        assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
        if (i % 100 == 0)
            assert_int_equal(fs_compact_wait_idle(v.fs, 30000), 0);   /* no backlog */
    }
    assert_int_equal(fs_compact_wait_idle(v.fs, 30000), 0);
    assert_int_equal(keg_fs_chunks(v.fs, ino, count_cb, &c), 0);
    print_message("%u slices left, %llu compactions, %llu deferred, %llu KiB rewritten for "
                  "%llu KiB appended\n", c.n, (unsigned long long)v.fs->cmp_done,
                  (unsigned long long)v.fs->cmp_deferred,
                  (unsigned long long)(v.fs->cmp_bytes >> 10),
                  (unsigned long long)(total >> 10));
    assert_true(v.fs->cmp_done >= 3);
    assert_true(v.fs->cmp_bytes <= 4 * total);
    /* tiered merges: a few tiers plus the appends since the last merge (the
     * whole-list policy left one slice per deferred commit: 150 here) */
    assert_true(c.n <= 32);
    assert_int_equal(keg_fs_read(v.fs, fh, 0, buf, total), (ssize_t)total);
    assert_memory_equal(buf, model, total);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    tvol_umount(&v);
    tvol_mount(&v);
    fh = tvol_open(&v, ino, O_RDONLY);
    memset(buf, 0xEE, total);
    assert_int_equal(keg_fs_read(v.fs, fh, 0, buf, total), (ssize_t)total);
    assert_memory_equal(buf, model, total);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
    keg_free(model);
    keg_free(buf);
}

/*--------------------------------------------------------------------------*/

/* Sequential reads with a 30 ms store latency: read-ahead and parallel fetches
 * make them much faster than one GET after another. */
static void test_readahead_parallel(void **state)
{
    struct tvol v;
    uint64_t ino = 0;
    const size_t n = 32 * BS;
    uint8_t *data = keg_malloc(n);
    uint8_t *got = keg_malloc(n);
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "seq", &ino);
    fill_random(data, n);
    assert_int_equal(keg_fs_write(v.fs, fh, 0, data, n), (ssize_t)n);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_umount(&v);

    setenv("KEG_FAULTY", "seed=1,delay=30", 1);
    tvol_mount(&v);
    unsetenv("KEG_FAULTY");
    fh = tvol_open(&v, ino, O_RDONLY);
    /* 16 blocks one 16 KiB read after another: one GET each would take >= 480 ms */
    int64_t t0 = keg_mono_ns();
    for (size_t p = 0; p < n / 2; p += 16384)
        assert_int_equal(keg_fs_read(v.fs, fh, p, got + p, 16384), 16384);
    int64_t seq_ms = (keg_mono_ns() - t0) / 1000000;
    assert_memory_equal(got, data, n / 2);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    /* one large read of 16 uncached blocks: fetched in parallel */
    fh = tvol_open(&v, ino, O_RDONLY);
    t0 = keg_mono_ns();
    assert_int_equal(keg_fs_read(v.fs, fh, n / 2, got + n / 2, n / 2), (ssize_t)(n / 2));
    int64_t big_ms = (keg_mono_ns() - t0) / 1000000;
    assert_memory_equal(got, data, n);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    print_message("sequential 16 blocks: %lld ms, one read of 16 blocks: %lld ms "
                  "(480 ms without overlap)\n", (long long)seq_ms, (long long)big_ms);
    assert_true(seq_ms < 360);
    assert_true(big_ms < 360);
    tvol_cleanup(&v);
    keg_free(data);
    keg_free(got);
}

/*--------------------------------------------------------------------------*/

struct peak {
    struct keg_fs   *fs;
    volatile int     stop;
    uint64_t         max;
};

static void *peak_main(void *arg)
{
    struct peak *pk = arg;
    while (!pk->stop) {
        uint64_t w = atomic_load(&pk->fs->wbytes);
        if (w > pk->max)
            pk->max = w;
        usleep(200);
    }
    return NULL;
}

/* Uploads run behind the writer, and the buffered + uploading bytes stay
 * within buffer_size (plus one write and one block of slack). */
static void test_upload_pipeline_bounded(void **state)
{
    struct tvol v;
    uint64_t ino = 0;
    const size_t n = 8u << 20;
    const size_t wsz = 128u << 10;
    const uint64_t budget = 512u << 10;
    uint8_t *data = keg_malloc(n);
    uint8_t *got = keg_malloc(n);
    struct peak pk = {0};
    pthread_t thr;
    (void)state;

    tvol_init(&v, BS, "none");
    setenv("KEG_FAULTY", "seed=2,delay=2", 1);
    assert_int_equal(tvol_mount_conf(&v, 0, 0, budget), 0);
    unsetenv("KEG_FAULTY");
    pk.fs = v.fs;
    assert_int_equal(pthread_create(&thr, NULL, peak_main, &pk), 0);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "big", &ino);
    fill_random(data, n);
    for (size_t p = 0; p < n; p += wsz)
        assert_int_equal(keg_fs_write(v.fs, fh, p, data + p, wsz), (ssize_t)wsz);
    assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
    pk.stop = 1;
    pthread_join(thr, NULL);
    print_message("peak buffered+uploading bytes: %llu (budget %llu)\n",
                  (unsigned long long)pk.max, (unsigned long long)budget);
    assert_true(pk.max <= budget + 2 * wsz + BS);
    assert_int_equal(atomic_load(&v.fs->wbytes), 0);
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, n), (ssize_t)n);
    assert_memory_equal(got, data, n);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
    keg_free(data);
    keg_free(got);
}

/* With uploads failing at random, a flush either commits all of its data or
 * none of it: the result always matches the model of successful flushes. */
static void test_upload_failures_commit_nothing(void **state)
{
    struct tvol v;
    uint64_t ino = 0;
    const size_t piece = 300000;
    const int rounds = 16;
    uint8_t *model = keg_calloc(1, piece * rounds);
    uint8_t *buf = keg_malloc(piece * rounds);
    uint64_t msize = 0;
    int failed = 0;
    (void)state;

    tvol_init(&v, BS, "none");
    setenv("KEG_FAULTY", "seed=7,err=0.08", 1);
    /* no retries of transient errors: the first failed put fails the flush */
    struct keg_fs_conf conf;
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v.url;
    conf.heartbeat_sec = 1;
    conf.stack = &nostack_retry;
    assert_int_equal(keg_fs_new(&conf, &v.fs), 0);
    unsetenv("KEG_FAULTY");
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "flaky", &ino);
    for (int r = 0; r < rounds; r++) {
        fill_random(buf, piece);
        assert_int_equal(keg_fs_write(v.fs, fh, (uint64_t)r * piece, buf, piece),
                         (ssize_t)piece);
        if (keg_fs_flush(v.fs, fh, 1) == 0) {
            memcpy(model + (size_t)r * piece, buf, piece);
            msize = (uint64_t)(r + 1) * piece;
        } else {
            failed++;
        }
    }
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_umount(&v);
    print_message("%d of %d flushes failed\n", failed, rounds);
    assert_true(failed > 0 && failed < rounds);

    tvol_mount(&v);
    fh = tvol_open(&v, ino, O_RDONLY);
    struct keg_attr a;
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, ino, &a), 0);
    assert_int_equal(a.size, msize);
    assert_int_equal(keg_fs_read(v.fs, fh, 0, buf, piece * rounds), (ssize_t)msize);
    assert_memory_equal(buf, model, msize);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
    keg_free(model);
    keg_free(buf);
}

/* Small files whose only block the committing thread puts itself: a failed
 * put commits nothing and leaves no object behind; the others read back. */
static void test_inline_put_failures(void **state)
{
    struct tvol v;
    const int nfiles = 60;
    uint64_t inos[60];
    int ok[60];
    uint8_t data[4096];
    uint8_t got[4096];
    int failed = 0;
    (void)state;

    tvol_init(&v, BS, "none");
    setenv("KEG_FAULTY", "seed=11,err=0.3", 1);
    struct keg_fs_conf conf;
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v.url;
    conf.heartbeat_sec = 1;
    conf.stack = &nostack_retry;
    assert_int_equal(keg_fs_new(&conf, &v.fs), 0);
    unsetenv("KEG_FAULTY");
    for (int i = 0; i < nfiles; i++) {
        char name[32];
        snprintf(name, sizeof(name), "small%d", i);
        struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, name, &inos[i]);
        memset(data, i + 1, sizeof(data));
        assert_int_equal(keg_fs_write(v.fs, fh, 0, data, sizeof(data)), (ssize_t)sizeof(data));
        ok[i] = keg_fs_flush(v.fs, fh, 1) == 0;
        failed += !ok[i];
        assert_int_equal(keg_fs_release(v.fs, fh), 0);
    }
    print_message("%d of %d small-file flushes failed\n", failed, nfiles);
    assert_true(failed > 0 && failed < nfiles);
    tvol_umount(&v);
    assert_true(tvol_wait_objects(&v, nfiles - failed, 200));

    tvol_mount(&v);
    for (int i = 0; i < nfiles; i++) {
        struct keg_attr a;
        assert_int_equal(keg_fs_getattr(v.fs, &tv_root, inos[i], &a), 0);
        assert_int_equal(a.size, ok[i] ? sizeof(data) : 0);
        if (!ok[i])
            continue;
        struct keg_fh *fh = tvol_open(&v, inos[i], O_RDONLY);
        memset(data, i + 1, sizeof(data));
        assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), (ssize_t)sizeof(got));
        assert_memory_equal(got, data, sizeof(got));
        assert_int_equal(keg_fs_release(v.fs, fh), 0);
    }
    tvol_cleanup(&v);
}

/* A volume over writeback (uploads held back a minute), for the durability
 * tests below: what is staged and what is fsync'ed is visible in the stats. */
static void wb_mount(struct tvol *v, struct keg_stack_conf *sc, char *cache, size_t csize)
{
    struct keg_fs_conf conf;

    snprintf(cache, csize, "%s/cache", v->dir);
    memset(sc, 0, sizeof(*sc));
    sc->cache_dir = cache;
    sc->writeback = 1;
    sc->upload_delay_ms = 60000;
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v->url;
    conf.heartbeat_sec = 1;
    conf.stack = sc;
    assert_int_equal(keg_fs_new(&conf, &v->fs), 0);
}

static uint64_t unsynced(struct tvol *v)
{
    struct keg_stack_stats st;
    assert_int_equal(keg_stack_stats(keg_fs_obj(v->fs), &st), 0);
    return st.unsynced_objects;
}

/* fsync makes durable the blocks of the file it is called on, not every
 * staged block of the volume; a file whose inode left the table with unsynced
 * blocks is still covered by a later fsync (then of the whole store). */
static void test_fsync_syncs_its_file(void **state)
{
    struct tvol v;
    struct keg_stack_conf sc;
    char cache[200];
    uint8_t data[3 * BS];
    uint64_t ia, ib, ic;
    (void)state;

    tvol_init(&v, BS, "none");
    wb_mount(&v, &sc, cache, sizeof(cache));
    memset(data, 7, sizeof(data));
    struct keg_fh *a = tvol_create(&v, KEG_ROOT_INO, "a", &ia);
    struct keg_fh *b = tvol_create(&v, KEG_ROOT_INO, "b", &ib);
    assert_int_equal(keg_fs_write(v.fs, a, 0, data, 2 * BS), (ssize_t)(2 * BS));
    assert_int_equal(keg_fs_write(v.fs, b, 0, data, 3 * BS), (ssize_t)(3 * BS));
    assert_int_equal(keg_fs_flush(v.fs, a, 1), 0);
    assert_int_equal(keg_fs_flush(v.fs, b, 1), 0);
    assert_int_equal(unsynced(&v), 5);
    assert_int_equal(keg_fs_fsync(v.fs, a, 0), 0);
    assert_int_equal(unsynced(&v), 3);                      /* b's three blocks */
    assert_int_equal(keg_fs_fsync(v.fs, b, 1), 0);
    assert_int_equal(unsynced(&v), 0);

    /* c is written, committed and closed (its inode leaves the table), then
     * fsync'ed through a new handle: its block must be covered */
    struct keg_fh *c = tvol_create(&v, KEG_ROOT_INO, "c", &ic);
    assert_int_equal(keg_fs_write(v.fs, c, 0, data, BS), (ssize_t)BS);
    assert_int_equal(keg_fs_release(v.fs, c), 0);
    assert_int_equal(unsynced(&v), 1);
    c = tvol_open(&v, ic, O_RDONLY);
    assert_int_equal(keg_fs_fsync(v.fs, c, 0), 0);
    assert_int_equal(unsynced(&v), 0);
    assert_int_equal(keg_fs_release(v.fs, c), 0);
    assert_int_equal(keg_fs_release(v.fs, a), 0);
    assert_int_equal(keg_fs_release(v.fs, b), 0);
    tvol_cleanup(&v);
}

struct fsync_arg {
    struct tvol    *v;
    struct keg_fh  *fh;
    pthread_barrier_t *bar;
    int             bad;        /* fsync returned while blocks were unsynced */
};

static void *fsync_thread(void *p)
{
    struct fsync_arg *a = p;
    for (int r = 0; r < 30; r++) {
        pthread_barrier_wait(a->bar);       /* the main thread wrote and committed */
        if (keg_fs_fsync(a->v->fs, a->fh, 0) != 0 || unsynced(a->v) != 0)
            a->bad++;
        pthread_barrier_wait(a->bar);
    }
    return NULL;
}

/* Two fsyncs of one file at the same time: neither returns before the
 * file's blocks are durable (the second waits for the one that took the
 * list of slices). */
static void test_concurrent_fsync(void **state)
{
    struct tvol v;
    struct keg_stack_conf sc;
    char cache[200];
    uint8_t data[2 * BS];
    uint64_t ino;
    pthread_barrier_t bar;
    pthread_t t[2];
    struct fsync_arg a[2];
    (void)state;

    tvol_init(&v, BS, "none");
    wb_mount(&v, &sc, cache, sizeof(cache));
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "f", &ino);
    pthread_barrier_init(&bar, NULL, 3);
    for (int i = 0; i < 2; i++) {
        a[i] = (struct fsync_arg){&v, fh, &bar, 0};
        assert_int_equal(pthread_create(&t[i], NULL, fsync_thread, &a[i]), 0);
    }
    for (int r = 0; r < 30; r++) {
        memset(data, r, sizeof(data));
        /* one slice per chunk: no compaction writes blocks meanwhile */
        assert_int_equal(keg_fs_write(v.fs, fh, (uint64_t)r * KEG_CHUNK_SIZE, data,
                                      sizeof(data)), (ssize_t)sizeof(data));
        assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].bad, 0);
    }
    pthread_barrier_destroy(&bar);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

/* Compaction makes its new slice durable before it replaces the old ones:
 * fsync'ed data must not come to rest in blocks that a power loss takes. */
static void test_compaction_output_durable(void **state)
{
    struct tvol v;
    struct keg_stack_conf sc;
    char cache[200];
    uint8_t data[1000];
    uint64_t ino;
    struct slices c = {0};
    (void)state;

    tvol_init(&v, BS, "none");
    wb_mount(&v, &sc, cache, sizeof(cache));
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "log", &ino);
    for (int i = 0; i < 10; i++) {
        memset(data, 'a' + i, sizeof(data));
        assert_int_equal(keg_fs_write(v.fs, fh, (uint64_t)i * sizeof(data), data,
                                      sizeof(data)), (ssize_t)sizeof(data));
        assert_int_equal(keg_fs_flush(v.fs, fh, 1), 0);
    }
    assert_int_equal(keg_fs_fsync(v.fs, fh, 0), 0);         /* all ten durable */
    assert_int_equal(unsynced(&v), 0);
    assert_int_equal(fs_compact_chunk(v.fs, ino, 0), 0);
    assert_int_equal(keg_fs_chunks(v.fs, ino, count_cb, &c), 0);
    assert_int_equal(c.n, 1);
    assert_int_equal(unsynced(&v), 0);                      /* the merged block too */
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compact_random_writes),
        cmocka_unit_test(test_compact_holes),
        cmocka_unit_test(test_compact_direct),
        cmocka_unit_test(test_compact_races),
        cmocka_unit_test(test_compact_appends_linear),
        cmocka_unit_test(test_readahead_parallel),
        cmocka_unit_test(test_upload_pipeline_bounded),
        cmocka_unit_test(test_upload_failures_commit_nothing),
        cmocka_unit_test(test_inline_put_failures),
        cmocka_unit_test(test_fsync_syncs_its_file),
        cmocka_unit_test(test_concurrent_fsync),
        cmocka_unit_test(test_compaction_output_durable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
