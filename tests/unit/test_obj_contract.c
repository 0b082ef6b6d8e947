/* test_obj_contract.c -- the one contract suite every object store must pass.
 *
 * Each store in `stores[]` runs every test in `contract[]`, each test on a
 * freshly opened instance and under its own key prefix (so a persistent
 * store such as S3 can be shared).  Adding a store is one line in stores[].
 * The "s3" line runs only when KEG_TEST_S3_BUCKET (endpoint URL incl. bucket,
 * e.g. http://127.0.0.1:7480/bucket), KEG_TEST_S3_ACCESS_KEY and
 * KEG_TEST_S3_SECRET_KEY are set and the build includes the s3 backend.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "keg/obj.h"

struct fixture;

struct store_desc {
    const char *label;
    int  (*open)(struct fixture *fx);      /* sets fx->o; 1 = not available (skip) */
    void (*cleanup)(struct fixture *fx);   /* after close; may be NULL */
};

struct fixture {
    const struct store_desc *sd;
    struct keg_obj *o;
    char dir[64];          /* file stores: the temp directory */
    char prefix[64];       /* every key of the test starts with this */
};

/*---------------------------------------------------------------------------
 * Stores under test
 *-------------------------------------------------------------------------*/

static int open_mem(struct fixture *fx)
{
    return keg_obj_open("mem", NULL, NULL, &fx->o);
}

static int open_file_common(struct fixture *fx, int dofsync)
{
    struct keg_obj_conf conf = {0};
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/keg-obj-test-XXXXXX");
    if (!mkdtemp(fx->dir))
        return -errno;
    conf.bucket = fx->dir;
    conf.fsync = dofsync;
    return keg_obj_open("file", &conf, NULL, &fx->o);
}

static int open_file(struct fixture *fx)
{
    return open_file_common(fx, 0);
}

static int open_file_fsync(struct fixture *fx)
{
    return open_file_common(fx, 1);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup_file(struct fixture *fx)
{
    if (fx->dir[0])
        nftw(fx->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int open_faulty_mem(struct fixture *fx)
{
    struct keg_obj_conf conf = {.seed = 1, .err_prob = 0, .corrupt_prob = 0};
    struct keg_obj *mem;
    int rc = keg_obj_open("mem", NULL, NULL, &mem);
    if (rc < 0)
        return rc;
    return keg_obj_open("faulty", &conf, mem, &fx->o);
}

static int open_s3(struct fixture *fx)
{
    struct keg_obj_conf conf = {0};
    conf.bucket = getenv("KEG_TEST_S3_BUCKET");
    conf.access_key = getenv("KEG_TEST_S3_ACCESS_KEY");
    conf.secret_key = getenv("KEG_TEST_S3_SECRET_KEY");
    conf.region = getenv("KEG_TEST_S3_REGION");
    if (!conf.bucket || !*conf.bucket || !keg_obj_find("s3"))
        return 1;
    return keg_obj_open("s3", &conf, NULL, &fx->o);
}

static int collect_del(void *arg, const char *key, uint64_t size)
{
    (void)size;
    return keg_obj_del(arg, key) < 0 ? -EIO : 0;
}

/* Shared, persistent bucket: remove what the test left under its prefix. */
static void cleanup_s3(struct fixture *fx)
{
    struct keg_obj *o = NULL;
    if (open_s3(fx) != 0)
        return;
    o = fx->o;
    keg_obj_list(o, fx->prefix, collect_del, o);
    keg_obj_close(o);
    fx->o = NULL;
}

static const struct store_desc stores[] = {
    {"mem", open_mem, NULL},
    {"file", open_file, cleanup_file},
    {"file(fsync)", open_file_fsync, cleanup_file},
    {"faulty(mem)", open_faulty_mem, NULL},
    {"s3", open_s3, cleanup_s3},
};

static int fx_setup(void **state)
{
    static atomic_int seq;
    const struct store_desc *sd = *state;
    struct fixture *fx = calloc(1, sizeof(*fx));
    int rc;

    assert_non_null(fx);
    fx->sd = sd;
    snprintf(fx->prefix, sizeof(fx->prefix), "ct-%d-%d/", (int)getpid(), atomic_fetch_add(&seq, 1));
    rc = sd->open(fx);
    if (rc != 0) {
        if (sd->cleanup)
            sd->cleanup(fx);
        free(fx);
        if (rc > 0)
            return -1;    /* not available: reported by main() before running */
        fail_msg("open %s: %s", sd->label, strerror(-rc));
    }
    *state = fx;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fixture *fx = *state;
    keg_obj_close(fx->o);
    fx->o = NULL;
    if (fx->sd->cleanup)
        fx->sd->cleanup(fx);
    free(fx);
    return 0;
}

/*---------------------------------------------------------------------------
 * Helpers
 *-------------------------------------------------------------------------*/

static const char *K(struct fixture *fx, const char *key)
{
    static __thread char buf[8][512];
    static __thread int slot;
    char *b = buf[slot++ & 7];
    snprintf(b, 512, "%s%s", fx->prefix, key);
    return b;
}

static void pattern(unsigned char *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)(x >> 16);
    }
}

static void put_pattern(struct fixture *fx, const char *key, size_t n, uint32_t seed)
{
    unsigned char *b = malloc(n ? n : 1);
    assert_non_null(b);
    pattern(b, n, seed);
    assert_int_equal(keg_obj_put(fx->o, key, b, n), 0);
    free(b);
}

/*---------------------------------------------------------------------------
 * The contract
 *-------------------------------------------------------------------------*/

static void t_put_get(void **state)
{
    struct fixture *fx = *state;
    unsigned char in[1000], out[2000];
    uint64_t size = 7;

    pattern(in, sizeof(in), 1);
    assert_int_equal(keg_obj_put(fx->o, K(fx, "obj1"), in, sizeof(in)), 0);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "obj1"), 0, out, sizeof(out)), 1000);
    assert_memory_equal(in, out, 1000);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "obj1"), 0, out, 1000), 1000);
    assert_memory_equal(in, out, 1000);
    assert_int_equal(keg_obj_head(fx->o, K(fx, "obj1"), &size), 0);
    assert_true(size == 1000);
    /* Keys that only share a prefix are distinct objects. */
    assert_int_equal(keg_obj_get(fx->o, K(fx, "obj"), 0, out, sizeof(out)), -ENOENT);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "obj10"), 0, out, sizeof(out)), -ENOENT);
}

static void t_ranged(void **state)
{
    struct fixture *fx = *state;
    size_t n = 10000;
    unsigned char *in = malloc(n), *out = malloc(n);
    static const size_t ranges[][2] = {
        {0, 1}, {1, 1}, {4095, 2}, {5000, 4999}, {9999, 1}, {123, 4567}, {0, 9999}, {8191, 1809},
    };

    assert_non_null(in);
    assert_non_null(out);
    pattern(in, n, 2);
    assert_int_equal(keg_obj_put(fx->o, K(fx, "r"), in, n), 0);
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
        size_t off = ranges[i][0], len = ranges[i][1];
        memset(out, 0xee, n);
        assert_int_equal(keg_obj_get(fx->o, K(fx, "r"), off, out, len), (ssize_t)len);
        assert_memory_equal(out, in + off, len);
        assert_int_equal(out[len], 0xee);   /* nothing written past len */
    }
    assert_int_equal(keg_obj_get(fx->o, K(fx, "r"), 0, out, 0), 0);
    free(in);
    free(out);
}

static void t_past_end(void **state)
{
    struct fixture *fx = *state;
    unsigned char in[300], out[1000];

    pattern(in, sizeof(in), 3);
    assert_int_equal(keg_obj_put(fx->o, K(fx, "e"), in, sizeof(in)), 0);
    /* Short read only at the end. */
    assert_int_equal(keg_obj_get(fx->o, K(fx, "e"), 290, out, 100), 10);
    assert_memory_equal(out, in + 290, 10);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "e"), 0, out, sizeof(out)), 300);
    assert_memory_equal(out, in, 300);
    /* At and past the end: 0 bytes, not an error. */
    assert_int_equal(keg_obj_get(fx->o, K(fx, "e"), 300, out, 100), 0);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "e"), 5000, out, 100), 0);
}

static void t_missing(void **state)
{
    struct fixture *fx = *state;
    unsigned char out[16];
    uint64_t size = 99;

    assert_int_equal(keg_obj_get(fx->o, K(fx, "nope"), 0, out, sizeof(out)), -ENOENT);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "no/such/dir/key"), 0, out, sizeof(out)), -ENOENT);
    assert_int_equal(keg_obj_head(fx->o, K(fx, "nope"), &size), -ENOENT);
    assert_int_equal(keg_obj_head(fx->o, K(fx, "no/such/dir/key"), &size), -ENOENT);
}

static void t_empty_object(void **state)
{
    struct fixture *fx = *state;
    unsigned char out[16];
    uint64_t size = 99;

    assert_int_equal(keg_obj_put(fx->o, K(fx, "empty"), "", 0), 0);
    assert_int_equal(keg_obj_head(fx->o, K(fx, "empty"), &size), 0);
    assert_true(size == 0);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "empty"), 0, out, sizeof(out)), 0);
}

struct flip_arg {
    struct fixture *fx;
    const unsigned char *a, *b;
    size_t alen, blen;
    int rounds;
    atomic_int done;
    atomic_int bad;
};

static void *flip_writer(void *p)
{
    struct flip_arg *fa = p;
    for (int i = 0; i < fa->rounds; i++) {
        int odd = i & 1;
        if (keg_obj_put(fa->fx->o, K(fa->fx, "flip"), odd ? fa->b : fa->a,
                        odd ? fa->blen : fa->alen) != 0)
            atomic_fetch_add(&fa->bad, 1);
    }
    atomic_store(&fa->done, 1);
    return NULL;
}

static void t_overwrite_atomic(void **state)
{
    struct fixture *fx = *state;
    size_t alen = 3000, blen = 70000;
    unsigned char *a = malloc(alen), *b = malloc(blen), *out = malloc(blen + 1);
    struct flip_arg fa = {.fx = fx, .alen = alen, .blen = blen};
    pthread_t th;
    int reads = 0;

    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(out);
    pattern(a, alen, 10);
    pattern(b, blen, 11);
    fa.a = a;
    fa.b = b;
    fa.rounds = strcmp(fx->sd->label, "s3") == 0 ? 40 : 400;

    /* Plain overwrite with a different size. */
    assert_int_equal(keg_obj_put(fx->o, K(fx, "flip"), b, blen), 0);
    assert_int_equal(keg_obj_put(fx->o, K(fx, "flip"), a, alen), 0);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "flip"), 0, out, blen + 1), (ssize_t)alen);
    assert_memory_equal(out, a, alen);

    /* Readers racing with overwrites see one whole version, never a mix. */
    assert_int_equal(pthread_create(&th, NULL, flip_writer, &fa), 0);
    while (!atomic_load(&fa.done) || reads < 10) {
        ssize_t n = keg_obj_get(fx->o, K(fx, "flip"), 0, out, blen + 1);
        if (n == (ssize_t)alen)
            assert_memory_equal(out, a, alen);
        else if (n == (ssize_t)blen)
            assert_memory_equal(out, b, blen);
        else
            fail_msg("torn read: %zd bytes", n);
        reads++;
    }
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&fa.bad), 0);
    free(a);
    free(b);
    free(out);
}

static void t_del(void **state)
{
    struct fixture *fx = *state;
    unsigned char out[16];
    uint64_t size;

    assert_int_equal(keg_obj_del(fx->o, K(fx, "d")), 0);
    assert_int_equal(keg_obj_del(fx->o, K(fx, "no/such/dir/d")), 0);
    assert_int_equal(keg_obj_put(fx->o, K(fx, "d"), "x", 1), 0);
    assert_int_equal(keg_obj_put(fx->o, K(fx, "d2"), "y", 1), 0);
    assert_int_equal(keg_obj_del(fx->o, K(fx, "d")), 0);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "d"), 0, out, sizeof(out)), -ENOENT);
    assert_int_equal(keg_obj_head(fx->o, K(fx, "d"), &size), -ENOENT);
    assert_int_equal(keg_obj_del(fx->o, K(fx, "d")), 0);
    /* The neighbour is untouched. */
    assert_int_equal(keg_obj_get(fx->o, K(fx, "d2"), 0, out, sizeof(out)), 1);
    assert_int_equal(out[0], 'y');
}

/* put_new: creates a missing key only; a second one is -EEXIST and changes nothing. */
static void t_put_new(void **state)
{
    struct fixture *fx = *state;
    unsigned char out[16];

    assert_int_equal(keg_obj_put_new(fx->o, K(fx, "n/new"), "first", 5), 0);
    assert_int_equal(keg_obj_put_new(fx->o, K(fx, "n/new"), "second", 6), -EEXIST);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "n/new"), 0, out, sizeof(out)), 5);
    assert_memory_equal(out, "first", 5);
    assert_int_equal(keg_obj_del(fx->o, K(fx, "n/new")), 0);
    assert_int_equal(keg_obj_put_new(fx->o, K(fx, "n/new"), "third", 5), 0);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "n/new"), 0, out, sizeof(out)), 5);
    assert_memory_equal(out, "third", 5);
}

static void t_head(void **state)
{
    struct fixture *fx = *state;
    static const size_t sizes[] = {1, 17, 4096, 100000};
    uint64_t size;

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "h/%zu", sizes[i]);
        put_pattern(fx, K(fx, name), sizes[i], (uint32_t)i);
        size = 0;
        assert_int_equal(keg_obj_head(fx->o, K(fx, name), &size), 0);
        assert_true(size == sizes[i]);
    }
    put_pattern(fx, K(fx, "h/1"), 5, 0);    /* overwrite changes the size */
    assert_int_equal(keg_obj_head(fx->o, K(fx, "h/1"), &size), 0);
    assert_true(size == 5);
}

struct keylist {
    char   **keys;
    uint64_t *sizes;
    size_t   n, cap;
    size_t   stop_after;   /* 0: never stop */
};

static int keylist_cb(void *arg, const char *key, uint64_t size)
{
    struct keylist *kl = arg;
    if (kl->n == kl->cap) {
        kl->cap = kl->cap ? kl->cap * 2 : 64;
        kl->keys = realloc(kl->keys, kl->cap * sizeof(*kl->keys));
        kl->sizes = realloc(kl->sizes, kl->cap * sizeof(*kl->sizes));
        if (!kl->keys || !kl->sizes)
            return -ENOMEM;
    }
    kl->keys[kl->n] = strdup(key);
    kl->sizes[kl->n] = size;
    kl->n++;
    if (kl->stop_after && kl->n == kl->stop_after)
        return 7;
    return 0;
}

static void keylist_free(struct keylist *kl)
{
    for (size_t i = 0; i < kl->n; i++)
        free(kl->keys[i]);
    free(kl->keys);
    free(kl->sizes);
    memset(kl, 0, sizeof(*kl));
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* List prefix (relative to the fixture's prefix) and compare with want[] (any order). */
static void expect_list(struct fixture *fx, const char *prefix, const char **want, size_t nwant)
{
    struct keylist kl = {0};
    const char **sorted = calloc(nwant + 1, sizeof(*sorted));
    assert_non_null(sorted);
    for (size_t i = 0; i < nwant; i++)
        sorted[i] = want[i];
    qsort(sorted, nwant, sizeof(*sorted), str_cmp);
    assert_int_equal(keg_obj_list(fx->o, K(fx, prefix), keylist_cb, &kl), 0);
    if (kl.n != nwant)
        fail_msg("list \"%s\": %zu keys, want %zu", prefix, kl.n, nwant);
    for (size_t i = 0; i < nwant; i++) {
        assert_string_equal(kl.keys[i], K(fx, sorted[i]));
        assert_true(kl.sizes[i] == strlen(sorted[i]));   /* content = relative key */
    }
    keylist_free(&kl);
    free(sorted);
}

static void t_list(void **state)
{
    struct fixture *fx = *state;
    /* '-' (0x2d) < '.' < '/' (0x2f) < '0': byte order across directory levels. */
    static const char *keys[] = {"a-c", "a/b", "a/c/d", "a.x", "a0", "ab", "b", "Z", "a/c/e-",
                                 "a/c/e/f"};
    const size_t n = sizeof(keys) / sizeof(keys[0]);
    struct keylist kl = {0};

    for (size_t i = 0; i < n; i++)
        assert_int_equal(keg_obj_put(fx->o, K(fx, keys[i]), keys[i], strlen(keys[i])), 0);
    expect_list(fx, "", keys, n);
    {
        const char *w[] = {"a/b", "a/c/d", "a/c/e-", "a/c/e/f"};
        expect_list(fx, "a/", w, 4);
    }
    {
        const char *w[] = {"a-c", "a/b", "a/c/d", "a.x", "a0", "ab", "a/c/e-", "a/c/e/f"};
        expect_list(fx, "a", w, 8);
    }
    {
        const char *w[] = {"a/c/d", "a/c/e-", "a/c/e/f"};
        expect_list(fx, "a/c", w, 3);
    }
    {
        const char *w[] = {"a/c/e-", "a/c/e/f"};
        expect_list(fx, "a/c/e", w, 2);
    }
    {
        const char *w[] = {"b"};
        expect_list(fx, "b", w, 1);
    }
    expect_list(fx, "zz", NULL, 0);
    expect_list(fx, "a/q", NULL, 0);

    /* A callback's non-zero result stops the walk and is returned. */
    kl.stop_after = 3;
    assert_int_equal(keg_obj_list(fx->o, fx->prefix, keylist_cb, &kl), 7);
    assert_int_equal(kl.n, 3);
    keylist_free(&kl);

    /* Deleted keys disappear. */
    assert_int_equal(keg_obj_del(fx->o, K(fx, "a/b")), 0);
    {
        const char *w[] = {"a/c/d", "a/c/e-", "a/c/e/f"};
        expect_list(fx, "a/", w, 3);
    }
}

static void t_list_many(void **state)
{
    struct fixture *fx = *state;
    const size_t n = 2000;
    struct keylist kl = {0};
    char vol[80], key[256], prefix[96];

    snprintf(vol, sizeof(vol), "%svol", fx->prefix);
    for (size_t i = 0; i < n; i++) {
        keg_block_key(key, sizeof(key), vol, (uint64_t)i * 7919, (uint32_t)(i % 3), 8);
        assert_int_equal(keg_obj_put(fx->o, key, "01234567", 8), 0);
    }
    snprintf(prefix, sizeof(prefix), "%s/chunks/", vol);
    assert_int_equal(keg_obj_list(fx->o, prefix, keylist_cb, &kl), 0);
    assert_int_equal(kl.n, n);
    for (size_t i = 0; i < kl.n; i++) {
        uint64_t id;
        uint32_t indx, blen;
        if (i > 0 && strcmp(kl.keys[i - 1], kl.keys[i]) >= 0)
            fail_msg("list out of order: \"%s\" then \"%s\"", kl.keys[i - 1], kl.keys[i]);
        assert_int_equal(keg_block_key_parse(kl.keys[i], &id, &indx, &blen), 0);
        assert_true(id % 7919 == 0 && id / 7919 < n);
        assert_int_equal(indx, (id / 7919) % 3);
        assert_true(kl.sizes[i] == 8);
    }
    keylist_free(&kl);
    /* A narrower prefix: ids 1000000..1999999 live under "<vol>/chunks/1/". */
    snprintf(prefix, sizeof(prefix), "%s/chunks/1/", vol);
    assert_int_equal(keg_obj_list(fx->o, prefix, keylist_cb, &kl), 0);
    size_t want = 0;
    for (size_t i = 0; i < n; i++)
        want += ((uint64_t)i * 7919) / 1000000 == 1;
    assert_int_equal(kl.n, want);
    keylist_free(&kl);
}

#define CONC_THREADS 8
#define CONC_KEYS    40

struct conc_arg {
    struct fixture *fx;
    int t;
    int errors;
};

static size_t conc_size(int t, int i)
{
    return 100 + (size_t)((t * 7919 + i * 104729) % 20000);
}

static int conc_check(struct fixture *fx, int t, int i, unsigned char *buf, unsigned char *want,
                      int missing_ok)
{
    char name[64];
    size_t n = conc_size(t, i);
    snprintf(name, sizeof(name), "c/%d/%d", t, i);
    ssize_t r = keg_obj_get(fx->o, K(fx, name), 0, buf, 20100);
    if (r == -ENOENT && missing_ok)
        return 0;
    pattern(want, n, (uint32_t)(t * 1000 + i));
    return (r == (ssize_t)n && memcmp(buf, want, n) == 0) ? 0 : 1;
}

static void *conc_worker(void *p)
{
    struct conc_arg *ca = p;
    unsigned char *buf = malloc(20100), *want = malloc(20100);
    char name[64];

    if (!buf || !want) {
        ca->errors++;
        goto out;
    }
    for (int i = 0; i < CONC_KEYS; i++) {
        size_t n = conc_size(ca->t, i);
        snprintf(name, sizeof(name), "c/%d/%d", ca->t, i);
        pattern(want, n, (uint32_t)(ca->t * 1000 + i));
        if (keg_obj_put(ca->fx->o, K(ca->fx, name), want, n) != 0)
            ca->errors++;
        /* Someone else's keys: absent or complete. */
        ca->errors += conc_check(ca->fx, (ca->t + 1) % CONC_THREADS, i, buf, want, 1);
    }
    for (int i = 0; i < CONC_KEYS; i++)
        ca->errors += conc_check(ca->fx, ca->t, i, buf, want, 0);
out:
    free(buf);
    free(want);
    return NULL;
}

static void t_concurrent(void **state)
{
    struct fixture *fx = *state;
    struct conc_arg ca[CONC_THREADS];
    pthread_t th[CONC_THREADS];
    struct keylist kl = {0};
    unsigned char *buf = malloc(20100), *want = malloc(20100);

    assert_non_null(buf);
    assert_non_null(want);
    for (int t = 0; t < CONC_THREADS; t++) {
        ca[t] = (struct conc_arg){.fx = fx, .t = t};
        assert_int_equal(pthread_create(&th[t], NULL, conc_worker, &ca[t]), 0);
    }
    for (int t = 0; t < CONC_THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(ca[t].errors, 0);
    }
    for (int t = 0; t < CONC_THREADS; t++)
        for (int i = 0; i < CONC_KEYS; i++)
            assert_int_equal(conc_check(fx, t, i, buf, want, 0), 0);
    assert_int_equal(keg_obj_list(fx->o, K(fx, "c/"), keylist_cb, &kl), 0);
    assert_int_equal(kl.n, CONC_THREADS * CONC_KEYS);
    keylist_free(&kl);
    free(buf);
    free(want);
}

static void t_large(void **state)
{
    struct fixture *fx = *state;
    size_t n = 4u << 20;
    unsigned char *in = malloc(n), *out = malloc(n + 4096);
    uint64_t size;

    assert_non_null(in);
    assert_non_null(out);
    pattern(in, n, 99);
    assert_int_equal(keg_obj_put(fx->o, K(fx, "big"), in, n), 0);
    assert_int_equal(keg_obj_head(fx->o, K(fx, "big"), &size), 0);
    assert_true(size == n);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "big"), 0, out, n + 4096), (ssize_t)n);
    assert_memory_equal(in, out, n);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "big"), n - 1000, out, 4096), 1000);
    assert_memory_equal(in + n - 1000, out, 1000);
    assert_int_equal(keg_obj_get(fx->o, K(fx, "big"), 1u << 20, out, 1u << 20),
                     (ssize_t)(1u << 20));
    assert_memory_equal(in + (1u << 20), out, 1u << 20);
    free(in);
    free(out);
}

static void t_sync(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(keg_obj_put(fx->o, K(fx, "s"), "sync", 4), 0);
    assert_int_equal(keg_obj_sync(fx->o), 0);
}

#define CT(f) {#f, f, fx_setup, fx_teardown, NULL}
static const struct CMUnitTest contract[] = {
    CT(t_put_get), CT(t_ranged), CT(t_past_end), CT(t_missing), CT(t_empty_object),
    CT(t_overwrite_atomic), CT(t_del), CT(t_put_new), CT(t_head), CT(t_list), CT(t_list_many),
    CT(t_concurrent), CT(t_large), CT(t_sync),
};
#define NCONTRACT (sizeof(contract) / sizeof(contract[0]))

int main(void)
{
    int failed = 0;
    for (size_t s = 0; s < sizeof(stores) / sizeof(stores[0]); s++) {
        struct CMUnitTest tests[NCONTRACT];
        char group[64];
        if (strcmp(stores[s].label, "s3") == 0 &&
            (!getenv("KEG_TEST_S3_BUCKET") || !keg_obj_find("s3"))) {
            printf("[ SKIPPED  ] store s3 (set KEG_TEST_S3_BUCKET, KEG_TEST_S3_ACCESS_KEY, "
                   "KEG_TEST_S3_SECRET_KEY in an s3-enabled build)\n");
            continue;
        }
        memcpy(tests, contract, sizeof(tests));
        for (size_t i = 0; i < NCONTRACT; i++)
            tests[i].initial_state = (void *)&stores[s];
        snprintf(group, sizeof(group), "obj_contract[%s]", stores[s].label);
        failed += _cmocka_run_group_tests(group, tests, NCONTRACT, NULL, NULL);
    }
    return failed;
}
