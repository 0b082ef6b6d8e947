/* test_wb.c -- the writeback layer: puts return before upload, staged objects survive a crash,
 * backpressure, failing uploads stay staged, drain timeouts, reads of staged objects, del,
 * sync bookkeeping, stats, and the stack order with cache and writeback. */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ssdf/ssd_format.h"
#include "ssdf/ssd_file.h"
#include "keg/log.h"
#include "keg/obj.h"
#include "keg/stack.h"
#include "stack_i.h"
/* raw byte i of test block id (make_block) */
#define TEST_BLOCK_BYTE(id, i) ((uint8_t)((id) * 13 + (i) * 5 + ((i) >> 8)))
#include "test_store_helpers.h"

static int64_t now_ms(void)
{
    return keg_mono_ns() / 1000000;
}

/*---------------------------------------------------------------------------
 * Fixtures
 *-------------------------------------------------------------------------*/

struct fx {
    char root[64];
    char cache[96];    /* <root>/cache/<vol> as given to the layer */
    char store[96];    /* bottom file store */
    char slot[128];    /* <cache>/staging/0 */
};

static int fx_setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    snprintf(fx->root, sizeof(fx->root), "/tmp/keg-wb-XXXXXX");
    if (!mkdtemp(fx->root))
        return -1;
    snprintf(fx->cache, sizeof(fx->cache), "%s/cache/vol1", fx->root);
    snprintf(fx->store, sizeof(fx->store), "%s/store", fx->root);
    snprintf(fx->slot, sizeof(fx->slot), "%s/staging/0", fx->cache);
    mkdir(fx->store, 0700);
    atomic_store(&cnt_put_delay_ms, 0);
    atomic_store(&cnt_put_err, 0);
    unsetenv("KEG_FAULTY");
    *state = fx;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *fx = *state;
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "%s/disk", fx->root);
    (void)umount2(cmd, MNT_DETACH);     /* test_disk_full_waits_for_upload's, if it failed */
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->root);
    assert_int_equal(system(cmd), 0);
    free(fx);
    atomic_store(&cnt_put_delay_ms, 0);
    atomic_store(&cnt_put_err, 0);
    return 0;
}

/* writeback(conf) -> counting -> bottom ("mem", or "file" in fx->store). */
static struct keg_obj *open_wb(struct fx *fx, const char *bottom, struct keg_wb_conf wc)
{
    struct keg_obj_conf oc = {.bucket = fx->store};
    struct keg_obj *o = NULL;
    wc.dir = fx->cache;
    assert_int_equal(keg_obj_open(bottom, &oc, NULL, &o), 0);
    assert_int_equal(keg_obj_open("counting", NULL, o, &o), 0);
    assert_int_equal(keg_wb_create(&wc, o, &o), 0);
    assert_string_equal(o->ops->name, "writeback");
    return o;
}

/* 1 if o holds block id with the right bytes. */
static int has_block(struct keg_obj *o, uint64_t id, uint32_t blen)
{
    size_t cap = KEG_BLOCK_HDR + blen;
    uint8_t *want = malloc(cap), *got = malloc(cap + 16);
    char key[128];
    size_t olen = make_block(id, blen, want, cap, key, sizeof(key));
    ssize_t n = keg_obj_get(o, key, 0, got, cap + 16);
    int ok = n == (ssize_t)olen && memcmp(got, want, olen) == 0;
    free(want);
    free(got);
    return ok;
}

/* Staged object files in dir (names not starting with '.'), and their bytes. */
static unsigned count_files(const char *dir, uint64_t *bytes, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    unsigned n = 0;
    if (bytes)
        *bytes = 0;
    if (!d)
        return 0;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (prefix ? strncmp(de->d_name, prefix, strlen(prefix)) != 0 : de->d_name[0] == '.')
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, 0) == 0 && S_ISREG(st.st_mode)) {
            n++;
            if (bytes)
                *bytes += (uint64_t)st.st_size;
        }
    }
    closedir(d);
    return n;
}

static struct keg_wb_stats wbst(struct keg_obj *o)
{
    struct keg_wb_stats st;
    assert_int_equal(keg_wb_stats(o, &st), 0);
    return st;
}

/*---------------------------------------------------------------------------
 * Tests
 *-------------------------------------------------------------------------*/

/* put returns at local-disk speed while each upload takes 300 ms; staged
 * objects read back before upload; drain uploads all; stats add up. */
static void test_put_returns_before_upload(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 2});
    struct keg_wb_stats st;
    uint64_t remaining = 99;
    int64_t t0;

    atomic_store(&cnt_put_delay_ms, 300);
    t0 = now_ms();
    for (uint64_t id = 1; id <= 6; id++)
        put_block(o, id, 5000);
    assert_true(now_ms() - t0 < 250);
    st = wbst(o);
    assert_int_equal(st.staged_objects, 6);
    assert_int_equal(st.unsynced_objects, 6);
    assert_int_equal(st.uploaded_objects, 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 0);
    /* reads of staged objects come from staging, not the store */
    for (uint64_t id = 1; id <= 6; id++)
        assert_true(has_block(o, id, 5000));
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 0);
    {
        uint64_t size = 0;
        char key[128];
        keg_block_key(key, sizeof(key), "vol1", 1, 0, 5000);
        assert_int_equal(keg_obj_head(o, key, &size), 0);
        assert_int_equal(size, KEG_BLOCK_HDR + 5000);
    }
    st = wbst(o);
    assert_true(st.uploading <= 2);                  /* a bounded pool */

    assert_int_equal(keg_wb_drain(o, 10000, &remaining), 0);
    assert_int_equal(remaining, 0);
    st = wbst(o);
    assert_int_equal(st.staged_objects, 0);
    assert_int_equal(st.staged_bytes, 0);
    assert_int_equal(st.uploading, 0);
    assert_int_equal(st.uploaded_objects, 6);
    assert_int_equal(st.uploaded_bytes, 6 * (KEG_BLOCK_HDR + 5000));
    assert_true(st.rate_bps > 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 6);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 0);
    atomic_store(&cnt_put_delay_ms, 0);
    for (uint64_t id = 1; id <= 6; id++)
        assert_true(has_block(o, id, 5000));     /* now from the store */
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 6);

    /* not a block: written through at once */
    assert_int_equal(keg_obj_put(o, "vol1/.kegfs-probe-x", "p", 1), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 7);
    keg_obj_close(o);
}

static struct keg_format vol_format(struct fx *fx)
{
    struct keg_format f;
    memset(&f, 0, sizeof(f));
    snprintf(f.name, sizeof(f.name), "vol1");
    snprintf(f.storage, sizeof(f.storage), "file");
    snprintf(f.bucket, sizeof(f.bucket), "%s", fx->store);
    return f;
}

/* A mounter that dies right after its puts returned (no close, no drain):
 * the next open finds the staged objects and uploads every one, including a
 * large one (written with O_DIRECT where the file system allows). */
#define CRASH_BIG_LEN ((2u << 20) + 5)
static void test_crash_recovery(void **state)
{
    struct fx *fx = *state;
    struct keg_format f = vol_format(fx);
    char cdir[128], tmp[256];
    struct keg_stack_conf sc = {.cache_dir = cdir, .writeback = 1, .upload_workers = 2};
    struct keg_stack_stats st;
    struct keg_obj *o = NULL, *b = NULL;
    struct keg_obj_conf oc = {.bucket = fx->store};
    uint64_t remaining = 1;
    pid_t pid;
    int status, fd;

    snprintf(cdir, sizeof(cdir), "%s/cache", fx->root);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* the mounter: a store so slow nothing gets uploaded, then a crash */
        setenv("KEG_FAULTY", "delay=20000", 1);
        if (keg_stack_open(&f, &sc, &o) < 0)
            _exit(2);
        for (uint64_t id = 1; id <= 20; id++) {
            uint8_t enc[KEG_BLOCK_HDR + 3000];
            char key[128];
            size_t olen = make_block(id, 3000, enc, sizeof(enc), key, sizeof(key));
            if (keg_obj_put(o, key, enc, olen) < 0)
                _exit(3);
        }
        {
            uint8_t *enc = malloc(KEG_BLOCK_HDR + CRASH_BIG_LEN);
            char key[128];
            size_t olen = enc ? make_block(21, CRASH_BIG_LEN, enc, KEG_BLOCK_HDR + CRASH_BIG_LEN,
                                           key, sizeof(key)) : 0;
            if (!enc || keg_obj_put(o, key, enc, olen) < 0)
                _exit(4);
        }
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 21);
    /* and a write torn by the crash */
    snprintf(tmp, sizeof(tmp), "%s/.tmp.vol1%%2Fchunks%%2F0%%2F0%%2F99_0_3000.Ab12Cd", fx->slot);
    fd = open(tmp, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "KEGC", 4), 4);
    close(fd);

    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    assert_string_equal(o->ops->name, "writeback");
    assert_string_equal(o->inner->ops->name, "cache_ssd");
    assert_string_equal(o->inner->inner->ops->name, "retry");
    assert_string_equal(o->inner->inner->inner->ops->name, "file");
    assert_int_equal(count_files(fx->slot, NULL, ".tmp."), 0);
    assert_int_equal(keg_stack_drain(o, 10000, &remaining), 0);
    assert_int_equal(remaining, 0);
    assert_int_equal(keg_stack_stats(o, &st), 0);
    assert_int_equal(st.has_writeback, 1);
    assert_int_equal(st.uploaded_objects, 21);
    assert_int_equal(st.staged_objects, 0);
    assert_int_equal(st.cache_objects, 21);       /* uploads populated the cache */
    keg_obj_close(o);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 0);

    assert_int_equal(keg_obj_open("file", &oc, NULL, &b), 0);
    for (uint64_t id = 1; id <= 20; id++)
        assert_true(has_block(b, id, 3000));
    assert_true(has_block(b, 21, CRASH_BIG_LEN));
    keg_obj_close(b);
}

/* close() drains for drain_ms only, reports, and leaves the rest staged for
 * the next open; objects kept failing are reported as such. */
static void test_close_leaves_staged(void **state)
{
    struct fx *fx = *state;
    struct keg_wb_conf wc = {.workers = 1, .drain_ms = 50, .retries = 2, .backoff_ms = 10};
    struct keg_obj *o = open_wb(fx, "file", wc);
    struct keg_obj_conf oc = {.bucket = fx->store};
    struct keg_obj *b = NULL;
    struct keg_wb_stats st;

    atomic_store(&cnt_put_err, -EIO);
    for (uint64_t id = 1; id <= 5; id++)
        put_block(o, id, 2000);
    keg_obj_close(o);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 5);

    atomic_store(&cnt_put_err, 0);
    o = open_wb(fx, "file", (struct keg_wb_conf){0});
    /* one snapshot: the uploaders run, and two reads could count an object
     * as staged and then as uploaded */
    st = wbst(o);
    assert_int_equal(st.staged_objects + st.uploaded_objects, 5);
    assert_int_equal(keg_wb_drain(o, 10000, NULL), 0);
    keg_obj_close(o);
    assert_int_equal(keg_obj_open("file", &oc, NULL, &b), 0);
    for (uint64_t id = 1; id <= 5; id++)
        assert_true(has_block(b, id, 2000));
    keg_obj_close(b);
}

/* The age of the oldest staged bytes (kegfs_writeback_oldest_staged_seconds): it grows
 * while an object waits, is the older one's of two, counts from the files' mtime for
 * objects recovered from an earlier run, and is 0 once everything is uploaded. */
static void test_oldest_staged_age(void **state)
{
    struct fx *fx = *state;
    struct keg_wb_conf wc = {.workers = 1, .drain_ms = 50, .retries = 2, .backoff_ms = 10};
    struct keg_obj *o = open_wb(fx, "file", wc);
    struct keg_wb_stats st;

    assert_int_equal(wbst(o).oldest_ms, 0);
    atomic_store(&cnt_put_err, -EIO);           /* nothing gets uploaded */
    put_block(o, 1, 2000);
    ms_sleep(300);
    put_block(o, 2, 2000);
    st = wbst(o);
    assert_int_equal(st.staged_objects, 2);
    assert_true(st.oldest_ms >= 300 && st.oldest_ms < 10000);
    keg_obj_close(o);                           /* both stay staged */
    assert_int_equal(count_files(fx->slot, NULL, NULL), 2);

    /* the files were staged an hour ago, as far as their mtime says */
    DIR *d = opendir(fx->slot);
    struct dirent *de;
    struct timespec ts[2];
    assert_non_null(d);
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= 3600;
    ts[1] = ts[0];
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            assert_int_equal(utimensat(dirfd(d), de->d_name, ts, 0), 0);
    closedir(d);
    o = open_wb(fx, "file", wc);
    st = wbst(o);
    assert_int_equal(st.staged_objects, 2);
    assert_true(st.oldest_ms >= 3599000 && st.oldest_ms < 3660000);

    atomic_store(&cnt_put_err, 0);
    assert_int_equal(keg_wb_drain(o, 10000, NULL), 0);
    st = wbst(o);
    assert_int_equal(st.staged_objects, 0);
    assert_int_equal(st.oldest_ms, 0);
    keg_obj_close(o);
}

/* The key of block id (100 bytes) and its staging file's path in fx->slot. */
static void block_key_path(struct fx *fx, uint64_t id, char *key, size_t ksize, char *path,
                           size_t psize)
{
    uint8_t enc[KEG_BLOCK_HDR + 100];
    char name[KEGC_NAME_MAX + 1];
    make_block(id, 100, enc, sizeof(enc), key, ksize);
    assert_int_equal(kegc_escape(key, name), 0);
    snprintf(path, psize, "%s/%s", fx->slot, name);
}

/* The oldest staged age stays right while objects of unrelated ages come and go (the
 * layer keeps them in a heap by age): 40 objects recovered with mtimes 1 to 40 minutes
 * old, in an order unrelated to their keys, then deleted in another order; after each
 * delete the age is the oldest remaining object's. */
static void test_oldest_staged_many(void **state)
{
    enum { N = 40 };
    struct fx *fx = *state;
    struct keg_wb_conf wc = {.workers = 1, .drain_ms = 50, .retries = 2, .backoff_ms = 10};
    struct keg_obj *o = open_wb(fx, "file", wc);
    struct keg_wb_stats st;
    unsigned age_min[N];
    int gone[N] = {0};
    char key[128], path[512];

    atomic_store(&cnt_put_err, -EIO);           /* nothing gets uploaded */
    for (uint64_t id = 1; id <= N; id++)
        put_block(o, id, 100);
    keg_obj_close(o);
    assert_int_equal(count_files(fx->slot, NULL, NULL), N);
    for (unsigned i = 0; i < N; i++) {
        struct timespec ts[2];
        age_min[i] = 1 + (i * 17) % N;          /* 17 and 40 are coprime: 1..40, shuffled */
        block_key_path(fx, i + 1, key, sizeof(key), path, sizeof(path));
        clock_gettime(CLOCK_REALTIME, &ts[0]);
        ts[0].tv_sec -= (time_t)age_min[i] * 60;
        ts[1] = ts[0];
        assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
    }
    o = open_wb(fx, "file", wc);
    for (unsigned k = 0; k < N; k++) {
        unsigned want = 0, i = (k * 23) % N;    /* 23 and 40 are coprime: every one once */
        for (unsigned j = 0; j < N; j++)
            if (!gone[j] && age_min[j] > want)
                want = age_min[j];
        st = wbst(o);
        assert_int_equal(st.staged_objects, N - k);
        assert_true(st.oldest_ms >= want * 60000ull && st.oldest_ms < want * 60000ull + 30000);
        block_key_path(fx, i + 1, key, sizeof(key), path, sizeof(path));
        assert_int_equal(keg_obj_del(o, key), 0);
        gone[i] = 1;
    }
    st = wbst(o);
    assert_int_equal(st.staged_objects, 0);
    assert_int_equal(st.oldest_ms, 0);
    keg_obj_close(o);
}

struct bp_mon {
    struct keg_obj *o;
    const char     *slot;
    uint64_t        max;
    atomic_int      stop;
    uint64_t        peak_staged, peak_disk, saw_waiting;
};

static void *bp_monitor(void *p)
{
    struct bp_mon *m = p;
    while (!atomic_load(&m->stop)) {
        struct keg_wb_stats st;
        uint64_t disk = 0;
        keg_wb_stats(m->o, &st);
        count_files(m->slot, &disk, NULL);
        m->peak_staged = KEG_MAX(m->peak_staged, st.staged_bytes);
        m->peak_disk = KEG_MAX(m->peak_disk, disk);
        if (st.waiting_puts)
            m->saw_waiting = 1;
        ms_sleep(2);
    }
    return NULL;
}

/* With max_staging = 3 objects and a slow store, puts block; staged bytes
 * and staged files on disk never exceed the bound; the stage latency holds
 * each staged put with its wait. */
static void test_backpressure(void **state)
{
    struct fx *fx = *state;
    const uint32_t blen = 64 << 10;
    const uint64_t obj = KEG_BLOCK_HDR + blen;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1,
                                                                .max_staging = 3 * obj});
    struct bp_mon m = {.o = o, .slot = fx->slot, .max = 3 * obj};
    pthread_t th;
    int64_t t0;

    atomic_store(&cnt_put_delay_ms, 50);
    assert_int_equal(pthread_create(&th, NULL, bp_monitor, &m), 0);
    t0 = now_ms();
    for (uint64_t id = 1; id <= 12; id++)
        put_block(o, id, blen);
    /* 12 objects, 3 fit: at least 9 uploads of 50 ms had to finish first */
    assert_true(now_ms() - t0 >= 9 * 50 - 20);
    assert_int_equal(keg_wb_drain(o, 10000, NULL), 0);
    atomic_store(&m.stop, 1);
    pthread_join(th, NULL);
    assert_true(m.saw_waiting);
    assert_true(m.peak_staged <= 3 * obj);
    /* files carry a header and the key; temp files are not counted by count_files */
    assert_true(m.peak_disk <= 3 * (obj + KEGC_HDR + 64));
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 12);
    assert_int_equal(wbst(o).uploaded_objects, 12);
    /* the stage latency has every staged put, the waits for room included */
    const struct keg_metrics_hist *h = wbst(o).stage_latency;
    assert_non_null(h);
    assert_int_equal(h->count, 12);
    assert_true(h->sum_ns >= (uint64_t)(9 * 50 - 20) * 1000000);
    /* a put written through to the store (not a block) is not staged: not counted */
    assert_int_equal(keg_obj_put(o, "vol/.kegfs-probe-1", "abc", 3), 0);
    assert_int_equal(h->count, 12);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 13);
    struct keg_wb_stats not_wb;
    assert_int_equal(keg_wb_stats(o->inner, &not_wb), -EINVAL);
    assert_null(not_wb.stage_latency);
    atomic_store(&cnt_put_delay_ms, 0);
    for (uint64_t id = 1; id <= 12; id++)
        assert_true(has_block(o, id, blen));
    keg_obj_close(o);
}

/* A permanent store error: the objects stay staged (readable), are reported
 * as failing, drain says -EIO with the count, and they go up once the store
 * works again. */
static void test_permanent_failure(void **state)
{
    struct fx *fx = *state;
    struct keg_wb_conf wc = {.workers = 2, .park_ms = 200, .retries = 3, .backoff_ms = 10};
    struct keg_obj *o = open_wb(fx, "mem", wc);
    struct keg_wb_stats st;
    uint64_t remaining = 0;
    int64_t t0 = now_ms();

    atomic_store(&cnt_put_err, -EACCES);
    put_block(o, 1, 1000);
    put_block(o, 2, 1000);
    do {
        ms_sleep(5);
        st = wbst(o);
    } while (st.parked < 2 && now_ms() - t0 < 5000);
    assert_int_equal(st.parked, 2);
    assert_int_equal(st.staged_objects, 2);
    assert_int_equal(st.upload_errors, 2);          /* permanent: no retries */
    assert_int_equal(st.uploaded_objects, 0);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 2);
    assert_true(has_block(o, 1, 1000));
    assert_true(has_block(o, 2, 1000));
    assert_int_equal(keg_wb_drain(o, 2000, &remaining), -EIO);
    assert_int_equal(remaining, 2);

    /* a transient error is retried `retries` times before parking */
    atomic_store(&cnt_put_err, -EAGAIN);
    put_block(o, 3, 1000);
    t0 = now_ms();
    do {
        ms_sleep(5);
        st = wbst(o);
    } while (st.parked < 3 && now_ms() - t0 < 5000);
    assert_true(st.upload_errors >= 2 + 3);

    atomic_store(&cnt_put_err, 0);
    assert_int_equal(keg_wb_drain(o, 5000, &remaining), 0);
    assert_int_equal(remaining, 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 3);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 0);
    keg_obj_close(o);
}

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static char cap_log[8192];

static void cap_sink(void *arg, int level, const char *tag, const char *fmt, va_list ap)
{
    char line[512];
    (void)arg;
    vsnprintf(line, sizeof(line), fmt, ap);
    pthread_mutex_lock(&cap_lock);
    size_t o = strlen(cap_log);
    snprintf(cap_log + o, sizeof(cap_log) - o, "%s [%s] %s\n",
             level == LOG_WARNING ? "WARN" : level == LOG_INFO ? "INFO" : "OTHER", tag, line);
    pthread_mutex_unlock(&cap_lock);
}

static int cap_count(const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&cap_lock);
    for (const char *q = strstr(cap_log, needle); q; q = strstr(q + 1, needle))
        n++;
    pthread_mutex_unlock(&cap_lock);
    return n;
}

/* Uploads that fail and then succeed on a retry (an outage the retries
 * survive) are not silent: one WARN for the failures (not one per attempt),
 * one INFO when uploads work again. */
static void test_transient_failure_logged(void **state)
{
    struct fx *fx = *state;
    struct keg_wb_conf wc = {.workers = 1, .retries = 50, .backoff_ms = 20};
    struct keg_obj *o = open_wb(fx, "mem", wc);
    uint64_t remaining = 0;
    int64_t t0 = now_ms();

    cap_log[0] = '\0';
    keg_log_set_sink(cap_sink, NULL);
    keg_log_set_level(LOG_INFO);
    atomic_store(&cnt_put_err, -EAGAIN);
    put_block(o, 1, 1000);
    put_block(o, 2, 1000);
    while (wbst(o).upload_errors < 4 && now_ms() - t0 < 5000)
        ms_sleep(5);
    assert_true(wbst(o).upload_errors >= 4);
    atomic_store(&cnt_put_err, 0);
    assert_int_equal(keg_wb_drain(o, 5000, &remaining), 0);
    assert_int_equal(remaining, 0);
    assert_int_equal(cap_count("WARN [wb] upload of "), 1);
    assert_int_equal(cap_count("Resource temporarily unavailable (attempt 1; 1 failed "
                               "attempts since the last success); retrying"), 1);
    assert_int_equal(cap_count("INFO [wb] uploads to the store work again"), 1);
    /* the next failure within 30 s is counted, not logged again */
    atomic_store(&cnt_put_err, -EAGAIN);
    put_block(o, 3, 1000);
    uint64_t e0 = wbst(o).upload_errors;
    t0 = now_ms();
    while (wbst(o).upload_errors < e0 + 2 && now_ms() - t0 < 5000)
        ms_sleep(5);
    atomic_store(&cnt_put_err, 0);
    assert_int_equal(keg_wb_drain(o, 5000, &remaining), 0);
    assert_int_equal(cap_count("WARN [wb] upload of "), 1);
    assert_int_equal(cap_count("work again"), 1);
    keg_log_set_level(getenv("KEG_TEST_LOG") ? LOG_DEBUG : LOG_CRIT);
    keg_log_set_sink(NULL, NULL);
    keg_obj_close(o);
}

/* A drain that runs out of time says -ETIMEDOUT and how much is left. */
static void test_drain_timeout(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1});
    uint64_t remaining = 0;

    atomic_store(&cnt_put_delay_ms, 300);
    for (uint64_t id = 1; id <= 4; id++)
        put_block(o, id, 100);
    assert_int_equal(keg_wb_drain(o, 100, &remaining), -ETIMEDOUT);
    assert_true(remaining >= 3 && remaining <= 4);
    assert_int_equal(keg_stack_drain(o, 100, &remaining), -ETIMEDOUT);
    assert_true(remaining >= 2);
    atomic_store(&cnt_put_delay_ms, 0);
    assert_int_equal(keg_stack_drain(o, 5000, &remaining), 0);
    assert_int_equal(remaining, 0);
    keg_obj_close(o);
}

/* del of a queued object removes it from staging and it is never uploaded;
 * del of an object being uploaded waits and then deletes it in the store. */
static void test_del_staged(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1});
    uint8_t buf[64];
    char k1[128], k2[128];

    atomic_store(&cnt_put_delay_ms, 300);
    put_block(o, 1, 100);
    put_block(o, 2, 100);
    keg_block_key(k1, sizeof(k1), "vol1", 1, 0, 100);
    keg_block_key(k2, sizeof(k2), "vol1", 2, 0, 100);
    ms_sleep(50);                       /* 1 is uploading, 2 queued */
    assert_int_equal(wbst(o).uploading, 1);
    assert_int_equal(keg_obj_del(o, k2), 0);
    assert_int_equal(wbst(o).staged_objects, 1);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 1);
    assert_int_equal(keg_obj_del(o, k1), 0);   /* waits for the upload */
    assert_int_equal(wbst(o).staged_objects, 0);
    assert_int_equal(wbst(o).staged_bytes, 0);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 0);
    atomic_store(&cnt_put_delay_ms, 0);
    assert_int_equal(keg_wb_drain(o, 2000, NULL), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 1);
    assert_int_equal(keg_obj_get(o, k1, 0, buf, sizeof(buf)), -ENOENT);
    assert_int_equal(keg_obj_get(o, k2, 0, buf, sizeof(buf)), -ENOENT);
    keg_obj_close(o);
}

/* del_keys: staged copies are dropped here, and only the keys that may be in
 * the store below go down, in one call (a write-once key never uploaded does
 * not). */
static void test_del_keys_batch(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1,
                                                                .upload_delay_ms = 60000,
                                                                .keys_write_once = 1});
    char k[5][128];
    const char *keys[5];
    uint8_t buf[64];

    for (int i = 0; i < 5; i++) {
        keg_block_key(k[i], sizeof(k[i]), "vol1", (uint64_t)i + 1, 0, 100);
        keys[i] = k[i];
    }
    put_block(o, 1, 100);
    put_block(o, 2, 100);
    assert_int_equal(keg_wb_drain(o, 2000, NULL), 0);     /* 1 and 2 are uploaded */
    put_block(o, 3, 100);
    put_block(o, 4, 100);                                 /* 3 and 4 stay local */
    assert_int_equal(wbst(o).staged_objects, 2);
    assert_int_equal(keg_obj_del_keys(o, keys, 5), 0);    /* 5 never existed */
    assert_int_equal(atomic_load(&cnt_of(o)->del_calls), 1);
    assert_int_equal(atomic_load(&cnt_of(o)->dels), 3);   /* 1, 2 and 5 */
    assert_int_equal(wbst(o).staged_objects, 0);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(keg_obj_get(o, keys[i], 0, buf, sizeof(buf)), -ENOENT);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 2);
    keg_obj_close(o);
}

/* sync() fsyncs what is staged and records it; a re-put makes it unsynced again. */
static void test_sync_bookkeeping(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1});

    atomic_store(&cnt_put_delay_ms, 400);
    put_block(o, 1, 100);
    put_block(o, 2, 100);
    put_block(o, 3, 100);
    assert_int_equal(wbst(o).unsynced_objects, 3);
    assert_int_equal(keg_obj_sync(o), 0);
    assert_int_equal(wbst(o).unsynced_objects, 0);
    put_block(o, 3, 100);               /* same key again */
    put_block(o, 4, 100);
    assert_int_equal(wbst(o).unsynced_objects, 2);
    assert_int_equal(wbst(o).staged_objects, 4);
    assert_int_equal(keg_obj_sync(o), 0);
    assert_int_equal(wbst(o).unsynced_objects, 0);
    atomic_store(&cnt_put_delay_ms, 0);
    assert_int_equal(keg_wb_drain(o, 5000, NULL), 0);
    for (uint64_t id = 1; id <= 4; id++)
        assert_true(has_block(o, id, 100));
    keg_obj_close(o);
}

/* A sync of 8 or more staged files fsyncs them on helper threads; the caller
 * (the compactor, a FUSE handler) keeps its own thread name. */
static void test_sync_keeps_caller_name(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1});
    char name[16];

    atomic_store(&cnt_put_delay_ms, 400);
    for (uint64_t id = 1; id <= 12; id++)
        put_block(o, id, 100);
    assert_int_equal(wbst(o).unsynced_objects, 12);
    assert_int_equal(pthread_setname_np(pthread_self(), "tst-caller"), 0);
    assert_int_equal(keg_obj_sync(o), 0);
    assert_int_equal(wbst(o).unsynced_objects, 0);
    assert_int_equal(pthread_getname_np(pthread_self(), name, sizeof(name)), 0);
    assert_string_equal(name, "tst-caller");
    atomic_store(&cnt_put_delay_ms, 0);
    keg_obj_close(o);
}

/* A corrupt staged file found at open is quarantined, never uploaded. */
static void test_corrupt_staged_quarantined(void **state)
{
    struct fx *fx = *state;
    struct keg_wb_conf wc = {.workers = 1, .drain_ms = 1, .retries = 100, .backoff_ms = 1000};
    struct keg_obj *o = open_wb(fx, "mem", wc);
    char path[512], name[KEGC_NAME_MAX + 1], key[128];
    int fd;

    /* the store fails: the worker sits in its retry backoff, close interrupts it */
    atomic_store(&cnt_put_err, -EIO);
    put_block(o, 1, 500);
    put_block(o, 2, 500);
    keg_obj_close(o);
    atomic_store(&cnt_put_err, 0);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 2);
    keg_block_key(key, sizeof(key), "vol1", 2, 0, 500);
    assert_int_equal(kegc_escape(key, name), 0);
    snprintf(path, sizeof(path), "%s/%s", fx->slot, name);
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "\xff", 1, 300), 1);
    close(fd);

    o = open_wb(fx, "mem", (struct keg_wb_conf){0});
    assert_int_equal(keg_wb_drain(o, 5000, NULL), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 1);   /* only the intact one */
    assert_true(has_block(o, 1, 500));
    assert_int_equal(count_files(fx->slot, NULL, NULL), 0);
    assert_int_equal(count_files(fx->slot, NULL, ".bad."), 1);
    keg_obj_close(o);
}

/* Reads of staged objects: a whole-object get (read straight into the
 * caller's buffer) and a range both return the put's bytes without asking
 * the store; a staged file with a flipped byte is never served, by either
 * (-EIO when the store does not have the object either). */
static void test_get_staged_verified(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1,
                                                                 .upload_delay_ms = 60000});
    uint8_t a[KEG_BLOCK_HDR + 3000], b[KEG_BLOCK_HDR + 3000], got[KEG_BLOCK_HDR + 3100];
    char ka[128], kb[128], name[KEGC_NAME_MAX + 1], path[400];
    size_t la = make_block(31, 3000, a, sizeof(a), ka, sizeof(ka));
    size_t lb = make_block(32, 3000, b, sizeof(b), kb, sizeof(kb));
    int fd;

    assert_int_equal(keg_obj_put(o, ka, a, la), 0);
    assert_int_equal(keg_obj_put(o, kb, b, lb), 0);
    memset(got, 0, sizeof(got));
    assert_int_equal(keg_obj_get(o, ka, 0, got, sizeof(got)), (ssize_t)la);
    assert_memory_equal(got, a, la);
    assert_int_equal(keg_obj_get(o, ka, 0, got, la), (ssize_t)la);      /* exactly its size */
    assert_memory_equal(got, a, la);
    assert_int_equal(keg_obj_get(o, ka, 100, got, 50), 50);             /* a range */
    assert_memory_equal(got, a + 100, 50);
    assert_int_equal(keg_obj_get(o, ka, 0, got, 10), 10);               /* a head */
    assert_memory_equal(got, a, 10);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 0);

    /* flip one byte of b's staged file, in the object's bytes */
    assert_int_equal(kegc_escape(kb, name), 0);
    snprintf(path, sizeof(path), "%s/%s", fx->slot, name);
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "\xff", 1, (off_t)(KEGC_HDR + strlen(kb) + 2000)), 1);
    close(fd);
    assert_int_equal(keg_obj_get(o, kb, 0, got, sizeof(got)), -EIO);
    assert_int_equal(keg_obj_get(o, kb, 1990, got, 20), -EIO);
    keg_obj_close(o);
}

/* Stack assembly: zero conf = plain store; writeback needs a cache dir;
 * the order is writeback -> cache_ssd -> retry -> faulty -> store. */
static void test_stack_order(void **state)
{
    struct fx *fx = *state;
    struct keg_format f = vol_format(fx);
    char cdir[128];
    struct keg_stack_conf sc = {0};
    struct keg_stack_stats st;
    struct keg_obj *o = NULL;

    snprintf(cdir, sizeof(cdir), "%s/cache", fx->root);
    sc.writeback = 1;
    o = (void *)1;
    assert_int_equal(keg_stack_open(&f, &sc, &o), -EINVAL);
    assert_null(o);

    sc.cache_dir = cdir;
    sc.max_staging = 12345;
    setenv("KEG_FAULTY", "seed=3", 1);
    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    unsetenv("KEG_FAULTY");
    assert_string_equal(o->ops->name, "writeback");
    assert_string_equal(o->inner->ops->name, "cache_ssd");
    assert_string_equal(o->inner->inner->ops->name, "retry");
    assert_string_equal(o->inner->inner->inner->ops->name, "faulty");
    assert_string_equal(o->inner->inner->inner->inner->ops->name, "file");
    assert_int_equal(keg_stack_stats(o, &st), 0);
    assert_int_equal(st.has_writeback, 1);
    assert_int_equal(st.has_cache, 1);
    assert_int_equal(st.max_staging, 12345);
    assert_int_equal(st.cache_budget, 1ULL << 30);

    /* a second mounter of the volume on this node gets its own staging slot */
    {
        struct keg_obj *o2 = NULL;
        char slot1[160];
        struct stat sb;
        assert_int_equal(keg_stack_open(&f, &sc, &o2), 0);
        snprintf(slot1, sizeof(slot1), "%s/vol1/staging/1/.lock", cdir);
        assert_int_equal(stat(slot1, &sb), 0);
        keg_obj_close(o2);
    }
    keg_obj_close(o);
}

struct lst {
    char     keys[16][128];
    unsigned n;
    unsigned stop_at;
};

static int lst_cb(void *arg, const char *key, uint64_t size)
{
    struct lst *l = arg;
    (void)size;
    if (l->n == 16)
        return -ENOSPC;
    snprintf(l->keys[l->n++], sizeof(l->keys[0]), "%s", key);
    return l->stop_at && l->n == l->stop_at ? 77 : 0;
}

/* list shows staged and uploaded objects together, in byte order, once each. */
static void test_list_merges_staged(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1});
    struct lst l = {0};
    char key[128];

    put_block(o->inner, 2, 100);        /* already in the store */
    put_block(o->inner, 4, 100);
    atomic_store(&cnt_put_delay_ms, 300);
    put_block(o, 1, 100);
    put_block(o, 3, 100);
    put_block(o, 4, 100);               /* staged and in the store */
    put_block(o, 5, 100);
    assert_int_equal(keg_obj_list(o, "vol1/", lst_cb, &l), 0);
    assert_int_equal(l.n, 5);
    for (unsigned i = 0; i < 5; i++) {
        keg_block_key(key, sizeof(key), "vol1", i + 1, 0, 100);
        assert_string_equal(l.keys[i], key);
    }
    memset(&l, 0, sizeof(l));
    l.stop_at = 3;
    assert_int_equal(keg_obj_list(o, "vol1/", lst_cb, &l), 77);
    assert_int_equal(l.n, 3);
    memset(&l, 0, sizeof(l));
    assert_int_equal(keg_obj_list(o, "other/", lst_cb, &l), 0);
    assert_int_equal(l.n, 0);
    atomic_store(&cnt_put_delay_ms, 0);
    assert_int_equal(keg_wb_drain(o, 5000, NULL), 0);
    memset(&l, 0, sizeof(l));
    assert_int_equal(keg_obj_list(o, "vol1/", lst_cb, &l), 0);
    assert_int_equal(l.n, 5);
    keg_obj_close(o);
}

struct st_arg {
    struct keg_obj *o;
    unsigned        t;
    uint8_t         live[64];   /* per id: 1 = put and not deleted */
    int             ok;
};

#define ST_IDS 40

static void *stress_thread(void *p)
{
    struct st_arg *a = p;
    uint64_t r = 0x9e3779b97f4a7c15ull * (a->t + 1);
    a->ok = 1;
    for (unsigned i = 0; i < ST_IDS; i++) {
        uint64_t id = 1000 * (a->t + 1) + i;
        uint8_t enc[KEG_BLOCK_HDR + 4000];
        char key[128];
        size_t olen = make_block(id, 4000, enc, sizeof(enc), key, sizeof(key));
        int rc;
        if (keg_obj_put(a->o, key, enc, olen) != 0) {
            a->ok = 0;
            return NULL;
        }
        a->live[i] = 1;
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        /* read back a random earlier one (retrying injected store errors) */
        {
            unsigned j = (unsigned)(r % (i + 1));
            if (a->live[j]) {
                int tries = 0;
                while (!has_block(a->o, 1000 * (a->t + 1) + j, 4000) && ++tries < 50)
                    ;
                if (tries == 50)
                    a->ok = 0;
            }
        }
        if (r % 4 == 0) {        /* delete this one again, sometimes while it uploads */
            do
                rc = keg_obj_del(a->o, key);
            while (rc == -EIO || rc == -EAGAIN);
            if (rc != 0)
                a->ok = 0;
            a->live[i] = 0;
        }
    }
    return NULL;
}

/* Four writers with puts, reads and deletes over a flaky, slow store and a
 * small staging bound: afterwards the store holds exactly the live blocks. */
static void test_stress_model(void **state)
{
    struct fx *fx = *state;
    struct keg_obj_conf fc = {.seed = 7, .err_prob = 0.2, .delay_ms = 2};
    struct keg_wb_conf wc = {.dir = fx->cache, .workers = 3,
                             .max_staging = 8 * (KEG_BLOCK_HDR + 4000), .retries = 50,
                             .backoff_ms = 1};
    struct keg_obj *mem = NULL, *o = NULL;
    struct st_arg args[4];
    pthread_t th[4];

    assert_int_equal(keg_obj_open("mem", NULL, NULL, &mem), 0);
    assert_int_equal(keg_obj_open("faulty", &fc, mem, &o), 0);
    assert_int_equal(keg_wb_create(&wc, o, &o), 0);
    for (unsigned t = 0; t < 4; t++) {
        memset(&args[t], 0, sizeof(args[t]));
        args[t].o = o;
        args[t].t = t;
        assert_int_equal(pthread_create(&th[t], NULL, stress_thread, &args[t]), 0);
    }
    for (unsigned t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        assert_true(args[t].ok);
    }
    assert_int_equal(keg_wb_drain(o, 30000, NULL), 0);
    assert_int_equal(wbst(o).staged_bytes, 0);
    assert_int_equal(count_files(fx->slot, NULL, NULL), 0);
    for (unsigned t = 0; t < 4; t++) {
        for (unsigned i = 0; i < ST_IDS; i++) {
            uint64_t id = 1000 * (t + 1) + i;
            char key[128];
            uint8_t buf[8];
            if (args[t].live[i]) {
                assert_true(has_block(mem, id, 4000));
            } else {
                keg_block_key(key, sizeof(key), "vol1", id, 0, 4000);
                assert_int_equal(keg_obj_get(mem, key, 0, buf, sizeof(buf)), -ENOENT);
            }
        }
    }
    keg_obj_close(o);
}

/* The store contract through writeback -> cache_ssd -> mem: missing keys,
 * overwrite (last put wins, staged and uploaded), del of a missing key, head. */
static void test_contract_through_stack(void **state)
{
    struct fx *fx = *state;
    struct keg_cache_ssd_conf cc = {.dir = fx->cache, .budget = 1 << 20};
    struct keg_wb_conf wc = {.dir = fx->cache, .workers = 2};
    struct keg_obj *o = NULL;
    uint8_t a[KEG_BLOCK_HDR + 300], b[KEG_BLOCK_HDR + 300], got[KEG_BLOCK_HDR + 400];
    char key[128];
    size_t la = make_block(1, 300, a, sizeof(a), key, sizeof(key));
    size_t lb = make_block(2, 300, b, sizeof(b), key, sizeof(key));
    uint64_t size = 1;

    keg_block_key(key, sizeof(key), "vol1", 9, 0, 300);
    assert_int_equal(keg_obj_open("mem", NULL, NULL, &o), 0);
    assert_int_equal(keg_obj_open("counting", NULL, o, &o), 0);
    assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
    assert_int_equal(keg_wb_create(&wc, o, &o), 0);

    assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), -ENOENT);
    assert_int_equal(keg_obj_head(o, key, &size), -ENOENT);
    assert_int_equal(size, 0);
    assert_int_equal(keg_obj_del(o, key), 0);

    atomic_store(&cnt_put_delay_ms, 200);
    assert_int_equal(keg_obj_put(o, key, a, la), 0);
    assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), (ssize_t)la);
    assert_memory_equal(got, a, la);
    assert_int_equal(keg_obj_put(o, key, b, lb), 0);     /* staged over staged */
    assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), (ssize_t)lb);
    assert_memory_equal(got, b, lb);
    assert_int_equal(keg_wb_drain(o, 5000, NULL), 0);
    assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), (ssize_t)lb);
    assert_memory_equal(got, b, lb);                      /* from the cache */
    assert_int_equal(keg_obj_put(o, key, a, la), 0);     /* staged over uploaded */
    assert_int_equal(keg_wb_drain(o, 5000, NULL), 0);
    assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), (ssize_t)la);
    assert_memory_equal(got, a, la);
    assert_int_equal(keg_obj_get(o->inner->inner, key, 0, got, sizeof(got)), (ssize_t)la);
    assert_memory_equal(got, a, la);                      /* and in the store */
    assert_int_equal(keg_obj_head(o, key, &size), 0);
    assert_int_equal(size, la);
    assert_int_equal(keg_obj_del(o, key), 0);
    assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), -ENOENT);
    atomic_store(&cnt_put_delay_ms, 0);
    keg_obj_close(o);
}

/* Inode of the file at path, 0 if there is none. */
static ino_t file_ino(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* After an upload through writeback -> cache_ssd, the cache adopts the staging
 * file (same inode, rewritten as a cache file) instead of writing a copy; an
 * fsync'ed object over a store that is not durable by itself is copied, so its
 * fsync'ed staging file stays until the store was synced.  Both read back from
 * the cache without a GET, also after the stack is reopened (index rebuilt). */
static void test_cache_adopts_staged_file(void **state)
{
    struct fx *fx = *state;
    struct keg_cache_ssd_conf cc = {.dir = fx->cache, .budget = 1 << 20};
    struct keg_wb_conf wc = {.dir = fx->cache, .workers = 1};
    struct keg_obj_conf oc = {.bucket = fx->store};
    uint8_t a[KEG_BLOCK_HDR + 3000], b[KEG_BLOCK_HDR + 3000], got[KEG_BLOCK_HDR + 3100];
    char ka[128], kb[128], name[KEGC_NAME_MAX + 1], spath[2][400], cpath[2][400];
    size_t la = make_block(21, 3000, a, sizeof(a), ka, sizeof(ka));
    size_t lb = make_block(22, 3000, b, sizeof(b), kb, sizeof(kb));
    const char *keys[2] = {ka, kb};
    ino_t staged[2];
    struct keg_obj *o = NULL;
    struct keg_cache_ssd_stats cst;

    for (int i = 0; i < 2; i++) {
        assert_int_equal(kegc_escape(keys[i], name), 0);
        snprintf(spath[i], sizeof(spath[i]), "%s/%s", fx->slot, name);
        snprintf(cpath[i], sizeof(cpath[i]), "%s/blocks/%02x/%s", fx->cache,
                 (unsigned)(keg_crc32c(0, keys[i], strlen(keys[i])) & 0xff), name);
    }
    for (int round = 0; round < 2; round++) {
        assert_int_equal(keg_obj_open("file", &oc, NULL, &o), 0);
        assert_int_equal(keg_obj_open("counting", NULL, o, &o), 0);
        assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
        assert_int_equal(keg_wb_create(&wc, o, &o), 0);
        if (round == 0) {
            atomic_store(&cnt_put_delay_ms, 100);       /* both stay staged a while */
            assert_int_equal(keg_obj_put(o, ka, a, la), 0);
            staged[0] = file_ino(spath[0]);
            assert_int_equal(keg_obj_put(o, kb, b, lb), 0);
            assert_int_equal(keg_obj_sync(o), 0);       /* b (and a) fsync'ed */
            staged[1] = file_ino(spath[1]);
            assert_true(staged[0] != 0 && staged[1] != 0);
            atomic_store(&cnt_put_delay_ms, 0);
            assert_int_equal(keg_wb_drain(o, 10000, NULL), 0);
            assert_int_equal(count_files(fx->slot, NULL, NULL), 0);
            assert_int_equal(file_ino(spath[0]), 0);
            assert_int_equal(file_ino(spath[1]), 0);
            assert_true(file_ino(cpath[0]) != 0);
            assert_true(file_ino(cpath[1]) != 0);
            assert_true(file_ino(cpath[1]) != staged[1]);   /* fsync'ed: copied */
        }
        assert_int_equal(keg_obj_get(o, ka, 0, got, sizeof(got)), (ssize_t)la);
        assert_memory_equal(got, a, la);
        assert_int_equal(keg_obj_get(o, kb, 0, got, sizeof(got)), (ssize_t)lb);
        assert_memory_equal(got, b, lb);
        assert_int_equal(atomic_load(&cnt_of(o)->gets), 0);     /* both from the cache */
        assert_int_equal(keg_cache_ssd_stats(o->inner, &cst), 0);
        assert_int_equal(cst.objects, 2);
        keg_obj_close(o);
    }
}

/* A staged object deleted before its upload leaves its file, emptied, to the
 * cache's pool of spare files, and the next staged object reuses that inode
 * (no inode freed and allocated again per short-lived block). */
static void test_deleted_staging_file_spared(void **state)
{
    struct fx *fx = *state;
    struct keg_cache_ssd_conf cc = {.dir = fx->cache, .budget = 1 << 20};
    struct keg_wb_conf wc = {.dir = fx->cache, .workers = 1, .upload_delay_ms = 60000};
    struct keg_obj_conf oc = {.bucket = fx->store};
    uint8_t a[KEG_BLOCK_HDR + 3000], b[KEG_BLOCK_HDR + 3000];
    char ka[128], kb[128], name[KEGC_NAME_MAX + 1], pa[400], pb[400];
    size_t la = make_block(41, 3000, a, sizeof(a), ka, sizeof(ka));
    size_t lb = make_block(42, 3000, b, sizeof(b), kb, sizeof(kb));
    struct keg_obj *o = NULL;
    struct keg_ssd_spare *sp;
    unsigned n0;
    ino_t ia;

    assert_int_equal(kegc_escape(ka, name), 0);
    snprintf(pa, sizeof(pa), "%s/%s", fx->slot, name);
    assert_int_equal(kegc_escape(kb, name), 0);
    snprintf(pb, sizeof(pb), "%s/%s", fx->slot, name);
    assert_int_equal(keg_obj_open("file", &oc, NULL, &o), 0);
    assert_int_equal(keg_obj_open("counting", NULL, o, &o), 0);
    assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
    assert_int_equal(keg_wb_create(&wc, o, &o), 0);
    sp = keg_cache_ssd_spare(o->inner);
    assert_non_null(sp);
    assert_int_equal(keg_obj_put(o, ka, a, la), 0);
    ia = file_ino(pa);
    assert_true(ia != 0);
    n0 = keg_ssd_spare_count(sp);
    assert_int_equal(keg_obj_del(o, ka), 0);
    assert_int_equal(file_ino(pa), 0);
    assert_int_equal(keg_ssd_spare_count(sp), n0 + 1);
    assert_int_equal(keg_obj_put(o, kb, b, lb), 0);
    assert_int_equal(file_ino(pb), ia);                     /* the same inode */
    assert_int_equal(keg_ssd_spare_count(sp), n0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 0);     /* nothing uploaded */
    keg_obj_close(o);
}

/* An unsynced staged object is handed to the cache: the cache file is the
 * staging file's inode, and it verifies as a cache file. */
static void test_cache_adopts_unsynced(void **state)
{
    struct fx *fx = *state;
    struct keg_cache_ssd_conf cc = {.dir = fx->cache, .budget = 1 << 20};
    struct keg_wb_conf wc = {.dir = fx->cache, .workers = 1};
    struct keg_obj_conf oc = {.bucket = fx->store};
    uint8_t a[KEG_BLOCK_HDR + 5000], got[KEG_BLOCK_HDR + 5100];
    char ka[128], name[KEGC_NAME_MAX + 1], spath[400], cpath[400];
    size_t la = make_block(31, 5000, a, sizeof(a), ka, sizeof(ka));
    struct keg_obj *o = NULL;
    ino_t staged;
    uint8_t *file;
    size_t flen;
    const uint8_t *obj;
    uint64_t olen;
    FILE *f;

    assert_int_equal(kegc_escape(ka, name), 0);
    snprintf(spath, sizeof(spath), "%s/%s", fx->slot, name);
    snprintf(cpath, sizeof(cpath), "%s/blocks/%02x/%s", fx->cache,
             (unsigned)(keg_crc32c(0, ka, strlen(ka)) & 0xff), name);
    assert_int_equal(keg_obj_open("file", &oc, NULL, &o), 0);
    assert_int_equal(keg_obj_open("counting", NULL, o, &o), 0);
    assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
    assert_int_equal(keg_wb_create(&wc, o, &o), 0);
    atomic_store(&cnt_put_delay_ms, 100);
    assert_int_equal(keg_obj_put(o, ka, a, la), 0);
    staged = file_ino(spath);
    assert_true(staged != 0);
    atomic_store(&cnt_put_delay_ms, 0);
    assert_int_equal(keg_wb_drain(o, 10000, NULL), 0);
    assert_int_equal(file_ino(spath), 0);
    assert_int_equal(file_ino(cpath), staged);             /* taken, not copied */
    file = malloc(KEGC_HDR + 200 + la);
    f = fopen(cpath, "rb");
    assert_non_null(f);
    flen = fread(file, 1, KEGC_HDR + 200 + la, f);
    fclose(f);
    /* as it was staged: kind 2, which the cache's readers take */
    assert_true(flen > KEGC_HDR);
    assert_int_equal(file[5], KEGC_KIND_STAGED);
    assert_int_equal(kegc_check(file, flen, KEGC_KIND_CACHED_ANY, ka, &obj, &olen), 0);
    assert_int_equal(olen, la);
    assert_memory_equal(obj, a, la);
    free(file);
    assert_int_equal(keg_obj_get(o, ka, 0, got, sizeof(got)), (ssize_t)la);
    assert_memory_equal(got, a, la);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 0);
    keg_obj_close(o);

    /* a new cache over the same directory indexes it and serves it, whole and
     * in part, without asking the store */
    o = NULL;
    assert_int_equal(keg_obj_open("file", &oc, NULL, &o), 0);
    assert_int_equal(keg_obj_open("counting", NULL, o, &o), 0);
    assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
    memset(got, 0, sizeof(got));
    assert_int_equal(keg_obj_get(o, ka, 0, got, sizeof(got)), (ssize_t)la);
    assert_memory_equal(got, a, la);
    assert_int_equal(keg_obj_get(o, ka, 100, got, 50), 50);
    assert_memory_equal(got, a + 100, 50);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 0);
    assert_int_equal(file_ino(cpath), staged);
    keg_obj_close(o);
}

/* With an upload delay, a new object stays staged for that long; one deleted
 * before is never uploaded; drain and puts waiting for room do not wait for
 * the delay. */
static void test_upload_delay(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 2,
                                                                 .upload_delay_ms = 1500});
    uint8_t enc[KEG_BLOCK_HDR + 3000];
    char key[128];
    int64_t t0;

    for (uint64_t id = 1; id <= 4; id++)
        put_block(o, id, 3000);
    ms_sleep(300);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 0);    /* none uploaded yet */
    assert_int_equal(wbst(o).staged_objects, 4);
    make_block(2, 3000, enc, sizeof(enc), key, sizeof(key));
    assert_int_equal(keg_obj_del(o, key), 0);                /* gone before its upload */
    assert_false(has_block(o, 2, 3000));
    assert_int_equal(atomic_load(&cnt_of(o)->dels), 1);     /* keys may be re-put: del sent */
    ms_sleep(1600);                                          /* past the delay */
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 3);
    assert_int_equal(wbst(o).staged_objects, 0);
    assert_true(has_block(o, 1, 3000) && has_block(o, 3, 3000) && has_block(o, 4, 3000));

    /* a drain uploads at once */
    put_block(o, 5, 3000);
    t0 = now_ms();
    assert_int_equal(keg_wb_drain(o, 10000, NULL), 0);
    assert_true(now_ms() - t0 < 1000);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 4);
    keg_obj_close(o);

    /* write-once keys (core/fs blocks): a key deleted before any upload attempt
     * costs the store nothing; one deleted after its upload is deleted there */
    o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1, .upload_delay_ms = 60000,
                                                  .keys_write_once = 1});
    put_block(o, 20, 3000);
    put_block(o, 21, 3000);
    make_block(20, 3000, enc, sizeof(enc), key, sizeof(key));
    assert_int_equal(keg_obj_del(o, key), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->dels), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 0);
    assert_int_equal(wbst(o).skipped_uploads, 1);
    assert_int_equal(keg_wb_drain(o, 10000, NULL), 0);      /* 21 uploaded */
    make_block(21, 3000, enc, sizeof(enc), key, sizeof(key));
    assert_int_equal(keg_obj_del(o, key), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->dels), 1);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 1);
    assert_false(has_block(o, 20, 3000));
    assert_false(has_block(o, 21, 3000));
    keg_obj_close(o);

    /* a put that waits for room makes delayed objects go */
    o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1, .upload_delay_ms = 60000,
                                                  .max_staging = 2 * (KEG_BLOCK_HDR + 3000)});
    t0 = now_ms();
    for (uint64_t id = 10; id <= 15; id++)
        put_block(o, id, 3000);
    assert_true(now_ms() - t0 < 5000);
    assert_true(atomic_load(&cnt_of(o)->puts) >= 4);
    keg_obj_close(o);
}

/* While puts keep coming, due objects wait for them to pause (one delay of
 * quiet), for at most 5 delays after their put; then they go. */
static void test_upload_hold(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 2,
                                                                 .upload_delay_ms = 500});
    int64_t t0 = now_ms();
    uint64_t id = 100;
    long first_up = -1;

    /* a put every 50 ms for 3.5 s: nothing goes in the first 1.2 s (past the
     * first object's delay), something goes before the end (its 2.5 s hold) */
    while (now_ms() - t0 < 3500) {
        put_block(o, id++, 3000);
        if (now_ms() - t0 < 1200)
            assert_int_equal(atomic_load(&cnt_of(o)->puts), 0);
        if (first_up < 0 && atomic_load(&cnt_of(o)->puts) > 0)
            first_up = (long)(now_ms() - t0);
        ms_sleep(50);
    }
    assert_true(first_up >= 1200);
    assert_true(atomic_load(&cnt_of(o)->puts) > 0);
    /* the puts paused: everything goes without a drain */
    for (int i = 0; i < 100 && wbst(o).staged_objects > 0; i++)
        ms_sleep(100);
    assert_int_equal(wbst(o).staged_objects, 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), (int)(id - 100));
    keg_obj_close(o);
}

/* A backlog of due objects is uploaded by every worker at once, not by the one
 * a put woke: puts wake one worker, and only when the list was empty. */
static void test_upload_workers_share_backlog(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 4,
                                                                 .upload_delay_ms = 200});

    atomic_store(&cnt_put_delay_ms, 100);
    for (uint64_t id = 1; id <= 16; id++)
        put_block(o, id, 3000);
    for (int i = 0; i < 100 && wbst(o).staged_objects > 0; i++)
        ms_sleep(100);
    assert_int_equal(wbst(o).staged_objects, 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 16);
    assert_int_equal(atomic_load(&cnt_of(o)->puts_max), 4);

    /* and after a hold: due objects held by a burst go on every worker too */
    atomic_store(&cnt_of(o)->puts_max, 0);
    for (uint64_t id = 101; id <= 116; id++) {
        put_block(o, id, 3000);
        ms_sleep(20);
    }
    for (int i = 0; i < 100 && wbst(o).staged_objects > 0; i++)
        ms_sleep(100);
    assert_int_equal(wbst(o).staged_objects, 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 32);
    assert_int_equal(atomic_load(&cnt_of(o)->puts_max), 4);
    atomic_store(&cnt_put_delay_ms, 0);
    keg_obj_close(o);
}

/* The idle workers: during a burst of new objects the uploads keep to
 * `workers`; once no new object came for the quiet time (the upload delay,
 * here 300 ms) the idle workers take the backlog the burst left too.  A burst
 * of 2.5 s, a new object every 10 ms, while each upload takes 50 ms. */
static void test_idle_workers_join_when_quiet(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 2,
                                                                 .idle_workers = 6,
                                                                 .upload_delay_ms = 300});
    uint64_t n = 0, during;

    atomic_store(&cnt_put_delay_ms, 50);
    for (int64_t end = keg_mono_ns() + 2500000000LL; keg_mono_ns() < end;) {
        put_block(o, ++n, 3000);
        ms_sleep(10);
    }
    during = atomic_load(&cnt_of(o)->puts);
    assert_true(during > 0);                                    /* the hold ended */
    assert_int_equal(atomic_load(&cnt_of(o)->puts_max), 2);     /* and only 2 went */
    assert_true(wbst(o).staged_objects >= 12);                  /* a backlog is left */
    for (int i = 0; i < 200 && wbst(o).staged_objects > 0; i++)
        ms_sleep(50);
    assert_int_equal(wbst(o).staged_objects, 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), n);
    assert_int_equal(atomic_load(&cnt_of(o)->puts_max), 6);
    atomic_store(&cnt_put_delay_ms, 0);
    keg_obj_close(o);
}

/* A drain does not wait for the quiet time: the idle workers upload at once. */
static void test_idle_workers_drain(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_wb(fx, "mem", (struct keg_wb_conf){.workers = 1,
                                                                 .idle_workers = 4,
                                                                 .upload_delay_ms = 60000});
    uint64_t remaining = 1;

    atomic_store(&cnt_put_delay_ms, 100);
    for (uint64_t id = 1; id <= 12; id++)
        put_block(o, id, 3000);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 0);        /* the delay holds them */
    assert_int_equal(keg_wb_drain(o, 20000, &remaining), 0);
    assert_int_equal(remaining, 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 12);
    assert_int_equal(atomic_load(&cnt_of(o)->puts_max), 4);
    atomic_store(&cnt_put_delay_ms, 0);
    keg_obj_close(o);
}

/* Staging comes first on a small disk: a burst that fills the disk with staged
 * objects before any is uploaded (a long upload delay, slow uploads, an empty
 * cache below) waits for uploads to make room instead of writing through.  On
 * a 4 MiB tmpfs, 16 puts of 512 KiB: every one is staged, none bypasses. */
static void test_disk_full_waits_for_upload(void **state)
{
    struct fx *fx = *state;
    char disk[96], vol[112];
    struct keg_cache_ssd_conf cc = {.budget = 1 << 30};
    struct keg_wb_conf wc = {.workers = 1, .upload_delay_ms = 60000};
    struct keg_obj_conf oc = {.bucket = fx->store};
    struct keg_obj *o = NULL;
    struct keg_wb_stats st;
    const uint64_t n = 16;
    const uint32_t blen = 512 << 10;
    uint64_t remaining = 1;

    snprintf(disk, sizeof(disk), "%s/disk", fx->root);
    assert_int_equal(mkdir(disk, 0700), 0);
    if (mount("kegfs-test-wb", disk, "tmpfs", 0, "size=4m") < 0) {
        fprintf(stderr, "SKIP: cannot mount a tmpfs at %s: %s\n", disk, strerror(errno));
        skip();
    }
    snprintf(vol, sizeof(vol), "%s/vol1", disk);
    cc.dir = wc.dir = vol;
    cap_log[0] = '\0';
    keg_log_set_sink(cap_sink, NULL);
    keg_log_set_level(LOG_INFO);
    assert_int_equal(keg_obj_open("file", &oc, NULL, &o), 0);
    assert_int_equal(keg_obj_open("counting", NULL, o, &o), 0);
    assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
    assert_int_equal(keg_wb_create(&wc, o, &o), 0);
    atomic_store(&cnt_put_delay_ms, 100);
    for (uint64_t id = 1; id <= n; id++)
        put_block(o, id, blen);
    st = wbst(o);
    /* every put was staged: either still there or uploaded by the workers */
    assert_int_equal(st.staged_objects + st.uploaded_objects, n);
    assert_true(st.uploaded_objects > 0);
    assert_int_equal(cap_count("uploading it directly"), 0);
    atomic_store(&cnt_put_delay_ms, 0);
    assert_int_equal(keg_wb_drain(o, 20000, &remaining), 0);
    assert_int_equal(remaining, 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), n);
    for (uint64_t id = 1; id <= n; id++)
        assert_true(has_block(o, id, blen));
    keg_log_set_level(getenv("KEG_TEST_LOG") ? LOG_DEBUG : LOG_CRIT);
    keg_log_set_sink(NULL, NULL);
    keg_obj_close(o);
    assert_int_equal(umount(disk), 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_put_returns_before_upload),
        T(test_upload_delay),
        T(test_upload_hold),
        T(test_upload_workers_share_backlog),
        T(test_idle_workers_join_when_quiet),
        T(test_idle_workers_drain),
        T(test_cache_adopts_staged_file),
        T(test_disk_full_waits_for_upload),
        T(test_cache_adopts_unsynced),
        T(test_deleted_staging_file_spared),
        T(test_crash_recovery),
        T(test_close_leaves_staged),
        T(test_oldest_staged_age),
        T(test_oldest_staged_many),
        T(test_backpressure),
        T(test_permanent_failure),
        T(test_transient_failure_logged),
        T(test_drain_timeout),
        T(test_del_staged),
        T(test_del_keys_batch),
        T(test_sync_bookkeeping),
        T(test_sync_keeps_caller_name),
        T(test_corrupt_staged_quarantined),
        T(test_get_staged_verified),
        T(test_stack_order),
        T(test_list_merges_staged),
        T(test_stress_model),
        T(test_contract_through_stack),
    };
    keg_log_set_level(getenv("KEG_TEST_LOG") ? LOG_DEBUG : LOG_CRIT);
    assert_int_equal(keg_obj_register(&cnt_ops), 0);
    return cmocka_run_group_tests_name("wb", tests, NULL, NULL);
}
