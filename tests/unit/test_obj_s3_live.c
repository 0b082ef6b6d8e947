/* test_obj_s3_live.c -- the S3 store against a real, signature-checking S3 server.
 *
 * Skipped (cmocka skip()) unless KEG_TEST_S3_BUCKET, KEG_TEST_S3_ACCESS_KEY and
 * KEG_TEST_S3_SECRET_KEY are set, e.g. by
 *     scripts/s3-server.sh start && eval "$(scripts/s3-server.sh env)"
 * The gateway kill-and-restart test also needs KEG_S3_DIR (printed by `env`) so it
 * can kill and restart radosgw through scripts/s3-server.sh.
 * Each run works under its own prefix (live-<pid>-<time>/) and deletes what it wrote.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "keg/keg.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/obj.h"

static const char *env_bucket, *env_ak, *env_sk;
static char base_url[512];            /* env bucket URL + "/live-<pid>-<t>" */

/*----------------------------------------------------------------------------
 * Log capture
 *--------------------------------------------------------------------------*/

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static char cap_buf[1 << 16];
static size_t cap_len;
static unsigned cap_retries;

static void cap_sink(void *arg, int level, const char *tag, const char *fmt, va_list ap)
{
    char line[1024];
    (void)arg;
    vsnprintf(line, sizeof(line), fmt, ap);
    pthread_mutex_lock(&cap_lock);
    if (strstr(line, "; retry "))
        cap_retries++;
    size_t n = strlen(line);
    if (cap_len + n + 2 < sizeof(cap_buf)) {
        memcpy(cap_buf + cap_len, line, n);
        cap_len += n;
        cap_buf[cap_len++] = '\n';
        cap_buf[cap_len] = '\0';
    }
    pthread_mutex_unlock(&cap_lock);
    if (level <= LOG_WARNING)
        fprintf(stderr, "[%s] %s\n", tag, line);
}

static void cap_reset(void)
{
    pthread_mutex_lock(&cap_lock);
    cap_len = 0;
    cap_buf[0] = '\0';
    cap_retries = 0;
    pthread_mutex_unlock(&cap_lock);
}

static int cap_has(const char *s)
{
    pthread_mutex_lock(&cap_lock);
    int r = strstr(cap_buf, s) != NULL;
    pthread_mutex_unlock(&cap_lock);
    return r;
}

/*----------------------------------------------------------------------------
 * Helpers
 *--------------------------------------------------------------------------*/

static int open_store(const char *url, const char *ak, const char *sk, unsigned conc,
                      unsigned deadline_ms, struct keg_obj **o)
{
    struct keg_obj_conf c = {
        .bucket = url, .access_key = ak, .secret_key = sk, .concurrency = conc,
        .retry_deadline_ms = deadline_ms,
    };
    return keg_obj_open("s3", &c, NULL, o);
}

static int setup(void **state)
{
    struct keg_obj *o = NULL;
    if (!env_bucket)
        return 0;
    if (open_store(base_url, env_ak, env_sk, 16, 0, &o) != 0)
        return -1;
    *state = o;
    return 0;
}

static int teardown(void **state)
{
    keg_obj_close(*state);
    return 0;
}

#define NEED_S3()                                  \
    do {                                           \
        if (!env_bucket) {                         \
            skip();                                \
        }                                          \
    } while (0)

static void fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    unsigned char *p = buf;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

static double now_s(void)
{
    return (double)keg_mono_ns() / 1e9;
}

/*----------------------------------------------------------------------------
 * Tests
 *--------------------------------------------------------------------------*/

static void test_put_get_head_del(void **state)
{
    NEED_S3();
    struct keg_obj *o = *state;
    size_t n = (1 << 20) + 333;
    char *a = keg_malloc(n), *b = keg_malloc(n + 100);
    uint64_t sz = 0;
    fill(a, n, 1);

    assert_int_equal(keg_obj_put(o, "basic/one", a, n), 0);
    assert_int_equal(keg_obj_head(o, "basic/one", &sz), 0);
    assert_int_equal(sz, n);
    assert_int_equal(keg_obj_get(o, "basic/one", 0, b, n), (ssize_t)n);
    assert_memory_equal(a, b, n);
    /* Asking for more than there is gives a short read. */
    assert_int_equal(keg_obj_get(o, "basic/one", 0, b, n + 100), (ssize_t)n);
    assert_memory_equal(a, b, n);
    /* Ranged reads. */
    assert_int_equal(keg_obj_get(o, "basic/one", 1000, b, 5000), 5000);
    assert_memory_equal(a + 1000, b, 5000);
    assert_int_equal(keg_obj_get(o, "basic/one", n - 10, b, 100), 10);
    assert_memory_equal(a + n - 10, b, 10);
    assert_int_equal(keg_obj_get(o, "basic/one", n, b, 100), 0);
    assert_int_equal(keg_obj_get(o, "basic/one", n + 5000, b, 100), 0);
    assert_int_equal(keg_obj_get(o, "basic/one", 7, b, 0), 0);
    /* Overwrite is whole-object. */
    assert_int_equal(keg_obj_put(o, "basic/one", "short", 5), 0);
    assert_int_equal(keg_obj_get(o, "basic/one", 0, b, n), 5);
    assert_memory_equal(b, "short", 5);
    /* Empty object. */
    assert_int_equal(keg_obj_put(o, "basic/empty", "", 0), 0);
    assert_int_equal(keg_obj_head(o, "basic/empty", &sz), 0);
    assert_int_equal(sz, 0);
    assert_int_equal(keg_obj_get(o, "basic/empty", 0, b, 10), 0);
    /* Missing keys. */
    assert_int_equal(keg_obj_get(o, "basic/missing", 0, b, 10), -ENOENT);
    assert_int_equal(keg_obj_get(o, "basic/missing", 0, b, 0), -ENOENT);
    assert_int_equal(keg_obj_head(o, "basic/missing", &sz), -ENOENT);
    /* Delete; deleting again is fine. */
    assert_int_equal(keg_obj_del(o, "basic/one"), 0);
    assert_int_equal(keg_obj_del(o, "basic/one"), 0);
    assert_int_equal(keg_obj_del(o, "basic/empty"), 0);
    assert_int_equal(keg_obj_get(o, "basic/one", 0, b, 10), -ENOENT);
    keg_free(a);
    keg_free(b);
}

struct collect {
    char   **keys;
    uint64_t *sizes;
    size_t   n, cap;
    int      stop_at;        /* return 42 at this count (0: never) */
};

static int collect_cb(void *arg, const char *key, uint64_t size)
{
    struct collect *c = arg;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->keys = keg_realloc(c->keys, c->cap * sizeof(*c->keys));
        c->sizes = keg_realloc(c->sizes, c->cap * sizeof(*c->sizes));
    }
    c->keys[c->n] = keg_strdup(key);
    c->sizes[c->n] = size;
    c->n++;
    return c->stop_at && (int)c->n == c->stop_at ? 42 : 0;
}

static void collect_free(struct collect *c)
{
    for (size_t i = 0; i < c->n; i++)
        keg_free(c->keys[i]);
    keg_free(c->keys);
    keg_free(c->sizes);
    memset(c, 0, sizeof(*c));
}

/* Keys that need encoding in the path, the query (prefix) and the XML listing. */
static void test_odd_keys(void **state)
{
    NEED_S3();
    struct keg_obj *o = *state;
    static const char *keys[] = {
        "odd/a b", "odd/tilde~x", "odd/eq=amp&plus+pct%20", "odd/caf\xc3\xa9",
        "odd/lt<gt>quot\"apos'", "odd/dir/./x", "odd/star*colon:semi;comma,",
    };
    size_t nk = sizeof(keys) / sizeof(keys[0]);
    char buf[64];
    for (size_t i = 0; i < nk; i++) {
        assert_int_equal(keg_obj_put(o, keys[i], keys[i], strlen(keys[i])), 0);
        assert_int_equal(keg_obj_get(o, keys[i], 0, buf, sizeof(buf)), (ssize_t)strlen(keys[i]));
        assert_memory_equal(buf, keys[i], strlen(keys[i]));
    }
    struct collect c = {0};
    assert_int_equal(keg_obj_list(o, "odd/", collect_cb, &c), 0);
    assert_int_equal(c.n, nk);
    for (size_t i = 0; i < c.n; i++) {
        int found = 0;
        for (size_t k = 0; k < nk; k++)
            found |= strcmp(c.keys[i], keys[k]) == 0 && c.sizes[i] == strlen(keys[k]);
        assert_true(found);
        if (i)
            assert_true(strcmp(c.keys[i - 1], c.keys[i]) < 0);
    }
    collect_free(&c);
    /* A prefix with characters that need encoding. */
    assert_int_equal(keg_obj_list(o, "odd/eq=amp&", collect_cb, &c), 0);
    assert_int_equal(c.n, 1);
    assert_string_equal(c.keys[0], "odd/eq=amp&plus+pct%20");
    collect_free(&c);
    for (size_t i = 0; i < nk; i++)
        assert_int_equal(keg_obj_del(o, keys[i]), 0);
}

struct put_job {
    struct keg_obj *o;
    const char     *fmt;
    int             from, to, step;
    size_t          size;
    int             rc;
    int             done;
};

static void *put_worker(void *arg)
{
    struct put_job *j = arg;
    char key[128];
    char *buf = keg_malloc(j->size ? j->size : 1);
    for (int i = j->from; i < j->to; i += j->step) {
        snprintf(key, sizeof(key), j->fmt, i);
        fill(buf, j->size, (uint64_t)i);
        int rc = keg_obj_put(j->o, key, buf, j->size);
        if (rc) {
            j->rc = rc;
            break;
        }
        j->done++;
    }
    keg_free(buf);
    return NULL;
}

static void *del_worker(void *arg)
{
    struct put_job *j = arg;
    char key[128];
    for (int i = j->from; i < j->to; i += j->step) {
        snprintf(key, sizeof(key), j->fmt, i);
        int rc = keg_obj_del(j->o, key);
        if (rc && !j->rc)
            j->rc = rc;
    }
    return NULL;
}

static void run_jobs(struct keg_obj *o, void *(*fn)(void *), const char *fmt, int n, size_t size,
                     int nthreads)
{
    pthread_t th[32];
    struct put_job jobs[32];
    for (int t = 0; t < nthreads; t++) {
        jobs[t] = (struct put_job){ o, fmt, t, n, nthreads, size, 0, 0 };
        pthread_create(&th[t], NULL, fn, &jobs[t]);
    }
    for (int t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(jobs[t].rc, 0);
    }
}

/* ListObjectsV2 pages at 1000 keys: 1100 keys need two pages. */
static void test_list_paging(void **state)
{
    NEED_S3();
    struct keg_obj *o = *state;
    run_jobs(o, put_worker, "page/k%05d", 1100, 3, 16);
    struct collect c = {0};
    assert_int_equal(keg_obj_list(o, "page/", collect_cb, &c), 0);
    assert_int_equal(c.n, 1100);
    for (size_t i = 0; i < c.n; i++) {
        char want[32];
        snprintf(want, sizeof(want), "page/k%05zu", i);
        assert_string_equal(c.keys[i], want);
        assert_int_equal(c.sizes[i], 3);
    }
    collect_free(&c);
    /* A sub-prefix, and the callback stopping the walk (across the page boundary). */
    assert_int_equal(keg_obj_list(o, "page/k010", collect_cb, &c), 0);
    assert_int_equal(c.n, 100);
    assert_string_equal(c.keys[0], "page/k01000");
    collect_free(&c);
    c.stop_at = 1050;
    assert_int_equal(keg_obj_list(o, "page/", collect_cb, &c), 42);
    assert_int_equal(c.n, 1050);
    collect_free(&c);
    assert_int_equal(keg_obj_list(o, "page/none", collect_cb, &c), 0);
    assert_int_equal(c.n, 0);
    run_jobs(o, del_worker, "page/k%05d", 1100, 0, 16);
    assert_int_equal(keg_obj_list(o, "page/", collect_cb, &c), 0);
    assert_int_equal(c.n, 0);
}

/* del_keys through DeleteObjects on a real server: 1,100 keys (two requests),
 * odd characters, and keys that do not exist are all fine; nothing is left. */
static void test_del_keys(void **state)
{
    NEED_S3();
    struct keg_obj *o = *state;
    enum { N = 1100, MISSING = 5 };
    static char kbuf[N + MISSING + 1][48];
    static const char *keys[N + MISSING + 1];
    run_jobs(o, put_worker, "dk/k%05d", N, 7, 16);
    for (int i = 0; i < N + MISSING; i++) {
        snprintf(kbuf[i], sizeof(kbuf[i]), i < N ? "dk/k%05d" : "dk/missing%d", i);
        keys[i] = kbuf[i];
    }
    const char *odd = "dk/lt<gt>amp&quot\"apos' sp";
    assert_int_equal(keg_obj_put(o, odd, "x", 1), 0);
    keys[N + MISSING] = odd;
    struct collect c = {0};
    assert_int_equal(keg_obj_list(o, "dk/", collect_cb, &c), 0);
    assert_int_equal(c.n, N + 1);
    collect_free(&c);
    cap_reset();
    assert_int_equal(keg_obj_del_keys(o, keys, N + MISSING + 1), 0);
    /* the server took DeleteObjects itself: no key was deleted one by one */
    assert_false(cap_has("one by one"));
    assert_int_equal(keg_obj_list(o, "dk/", collect_cb, &c), 0);
    assert_int_equal(c.n, 0);
    uint64_t sz;
    assert_int_equal(keg_obj_head(o, odd, &sz), -ENOENT);
    /* again: everything is missing now, still success */
    assert_int_equal(keg_obj_del_keys(o, keys, N + MISSING + 1), 0);
}

static void test_wrong_secret(void **state)
{
    NEED_S3();
    struct keg_obj *o = NULL;
    char buf[8];
    uint64_t sz;
    assert_int_equal(open_store(base_url, env_ak, "not-the-secret", 2, 0, &o), 0);
    cap_reset();
    assert_int_equal(keg_obj_put(o, "auth/x", "x", 1), -EACCES);
    assert_true(cap_has("SignatureDoesNotMatch"));
    assert_false(cap_has("not-the-secret"));
    assert_int_equal(keg_obj_get(o, "auth/x", 0, buf, sizeof(buf)), -EACCES);
    assert_int_equal(keg_obj_head(o, "auth/x", &sz), -EACCES);
    assert_int_equal(keg_obj_del(o, "auth/x"), -EACCES);
    keg_obj_close(o);
}

static void test_wrong_access_key(void **state)
{
    NEED_S3();
    struct keg_obj *o = NULL;
    assert_int_equal(open_store(base_url, "KEGNOSUCHKEY0000", env_sk, 2, 0, &o), 0);
    cap_reset();
    assert_int_equal(keg_obj_put(o, "auth/x", "x", 1), -EACCES);
    assert_true(cap_has("InvalidAccessKeyId"));
    keg_obj_close(o);
}

static void test_missing_bucket(void **state)
{
    NEED_S3();
    struct keg_obj *o = NULL;
    char url[600], buf[8];
    /* Same endpoint, another bucket name. */
    snprintf(url, sizeof(url), "%s", env_bucket);
    char *slash = strrchr(url, '/');
    assert_non_null(slash);
    snprintf(slash, sizeof(url) - (size_t)(slash - url), "/keg-no-such-bucket-%d", getpid());
    assert_int_equal(open_store(url, env_ak, env_sk, 2, 0, &o), 0);
    cap_reset();
    assert_int_equal(keg_obj_get(o, "x", 0, buf, sizeof(buf)), -ENOENT);
    assert_true(cap_has("NoSuchBucket"));
    assert_int_equal(keg_obj_put(o, "x", "x", 1), -ENOENT);
    assert_int_equal(keg_obj_del(o, "x"), -EIO);
    struct collect c = {0};
    assert_int_equal(keg_obj_list(o, "", collect_cb, &c), -ENOENT);
    keg_obj_close(o);
}

static void test_unreachable(void **state)
{
    NEED_S3();
    struct keg_obj *o = NULL;
    char buf[8];
    assert_int_equal(open_store("http://127.0.0.1:1/bucket", "ak", "sk", 2, 1500, &o), 0);
    double t0 = now_s();
    int rc = keg_obj_put(o, "x", "x", 1);
    double dt = now_s() - t0;
    assert_true(rc == -ETIMEDOUT || rc == -EIO);
    assert_true(dt < 1.5 + 1.0);
    ssize_t n = keg_obj_get(o, "x", 0, buf, sizeof(buf));
    assert_true(n == -ETIMEDOUT || n == -EIO);
    keg_obj_close(o);
}

struct rw_job {
    struct keg_obj *o;
    int             id;
    int             rc;
};

static void *rw_worker(void *arg)
{
    struct rw_job *j = arg;
    char key[64];
    size_t n = 16 * 1024 + (size_t)j->id * 7;
    char *a = keg_malloc(n), *b = keg_malloc(n);
    for (int i = 0; i < 40 && !j->rc; i++) {
        snprintf(key, sizeof(key), "conc/t%02d-%03d", j->id, i);
        fill(a, n, (uint64_t)(j->id * 1000 + i));
        int rc = keg_obj_put(j->o, key, a, n);
        ssize_t got = rc ? rc : keg_obj_get(j->o, key, 0, b, n);
        if (got != (ssize_t)n || memcmp(a, b, n) != 0)
            j->rc = got < 0 ? (int)got : -EIO;
        else
            j->rc = keg_obj_del(j->o, key);
    }
    keg_free(a);
    keg_free(b);
    return NULL;
}

/* 16 threads over a pool of 4 handles (callers wait) and of 16. */
static void test_concurrency(void **state)
{
    NEED_S3();
    unsigned pools[] = { 4, 16 };
    for (size_t p = 0; p < 2; p++) {
        struct keg_obj *o = NULL;
        pthread_t th[16];
        struct rw_job jobs[16];
        assert_int_equal(open_store(base_url, env_ak, env_sk, pools[p], 0, &o), 0);
        for (int t = 0; t < 16; t++) {
            jobs[t] = (struct rw_job){ o, t, 0 };
            pthread_create(&th[t], NULL, rw_worker, &jobs[t]);
        }
        for (int t = 0; t < 16; t++) {
            pthread_join(th[t], NULL);
            assert_int_equal(jobs[t].rc, 0);
        }
        keg_obj_close(o);
    }
}

/* Kill radosgw under a 16-thread put loop, restart it, and every put still succeeds. */
static void test_gateway_restart(void **state)
{
    NEED_S3();
    const char *dir = getenv("KEG_S3_DIR");
    if (!dir || !*dir) {
        fprintf(stderr, "KEG_S3_DIR unset: skipping the gateway restart test\n");
        skip();
    }
    char script[1024], cmd[2048];
    snprintf(script, sizeof(script), "%s", __FILE__);
    char *t = strstr(script, "tests/unit/");
    assert_non_null(t);
    snprintf(t, sizeof(script) - (size_t)(t - script), "scripts/s3-server.sh");
    if (access(script, X_OK) != 0)
        skip();

    struct keg_obj *o = NULL;
    assert_int_equal(open_store(base_url, env_ak, env_sk, 16, 60000, &o), 0);
    int saved_level = keg_log_level;
    keg_log_set_level(LOG_DEBUG);
    cap_reset();

    enum { N = 1600, SIZE = 64 * 1024, TH = 16 };
    pthread_t th[TH];
    struct put_job jobs[TH];
    for (int i = 0; i < TH; i++) {
        jobs[i] = (struct put_job){ o, "restart/k%05d", i, N, TH, SIZE, 0, 0 };
        pthread_create(&th[i], NULL, put_worker, &jobs[i]);
    }
    usleep(300 * 1000);
    snprintf(cmd, sizeof(cmd), "'%s' kill-gw '%s'", script, dir);
    assert_int_equal(system(cmd), 0);
    double t0 = now_s();
    sleep(2);
    snprintf(cmd, sizeof(cmd), "'%s' start-gw '%s' >/dev/null", script, dir);
    assert_int_equal(system(cmd), 0);
    fprintf(stderr, "gateway was down for %.1f s\n", now_s() - t0);
    int done = 0;
    for (int i = 0; i < TH; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].rc, 0);
        done += jobs[i].done;
    }
    keg_log_set_level(saved_level);
    assert_int_equal(done, N);
    pthread_mutex_lock(&cap_lock);
    unsigned retries = cap_retries;
    pthread_mutex_unlock(&cap_lock);
    fprintf(stderr, "%d puts, %u retried attempts\n", done, retries);
    assert_true(retries > 0);

    /* Everything reads back as written. */
    char *a = keg_malloc(SIZE), *b = keg_malloc(SIZE);
    char key[64];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "restart/k%05d", i);
        fill(a, SIZE, (uint64_t)i);
        assert_int_equal(keg_obj_get(o, key, 0, b, SIZE), SIZE);
        assert_memory_equal(a, b, SIZE);
    }
    keg_free(a);
    keg_free(b);
    run_jobs(o, del_worker, "restart/k%05d", N, 0, 16);
    keg_obj_close(o);
}

static void test_open_validation(void **state)
{
    /* No network: runs even without a server. */
    struct keg_obj *o = NULL;
    cap_reset();
    assert_int_equal(open_store("http://127.0.0.1:7480/b", "ak", NULL, 0, 0, &o), -EINVAL);
    assert_true(cap_has("S3 secret key missing"));
    assert_null(o);
    assert_int_equal(open_store("http://127.0.0.1:7480/b", NULL, "sk", 0, 0, &o), -EINVAL);
    assert_true(cap_has("S3 access key missing"));
    assert_int_equal(open_store("http://127.0.0.1:7480/", "ak", "sk", 0, 0, &o), -EINVAL);
    assert_int_equal(open_store("ftp://h/b", "ak", "sk", 0, 0, &o), -EINVAL);
    assert_int_equal(open_store("http://h/b?style=bogus", "ak", "sk", 0, 0, &o), -EINVAL);
    assert_int_equal(open_store("http://h/Bad_Name?style=virtual", "ak", "sk", 0, 0, &o),
                     -EINVAL);
    cap_reset();
    assert_int_equal(open_store("http://ak:SECRETPW@127.0.0.1:1/b/p", NULL, NULL, 0, 0, &o), 0);
    assert_false(cap_has("SECRETPW"));
    keg_obj_close(o);
    assert_int_equal(open_store("s3://my-bucket/some/prefix", "ak", "sk", 0, 0, &o), 0);
    assert_true(cap_has("my-bucket.s3.us-east-1.amazonaws.com"));
    keg_obj_close(o);
}

int main(void)
{
    env_bucket = getenv("KEG_TEST_S3_BUCKET");
    env_ak = getenv("KEG_TEST_S3_ACCESS_KEY");
    env_sk = getenv("KEG_TEST_S3_SECRET_KEY");
    if (!env_bucket || !*env_bucket || !env_ak || !env_sk) {
        env_bucket = NULL;
        fprintf(stderr, "KEG_TEST_S3_BUCKET/ACCESS_KEY/SECRET_KEY unset: live S3 tests skipped "
                        "(scripts/s3-server.sh start && eval \"$(scripts/s3-server.sh env)\")\n");
    } else {
        snprintf(base_url, sizeof(base_url), "%s/live-%d-%ld", env_bucket, (int)getpid(),
                 (long)time(NULL));
    }
    keg_log_set_sink(cap_sink, NULL);
    keg_log_set_level(LOG_INFO);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_validation),
        cmocka_unit_test_setup_teardown(test_put_get_head_del, setup, teardown),
        cmocka_unit_test_setup_teardown(test_odd_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_paging, setup, teardown),
        cmocka_unit_test_setup_teardown(test_del_keys, setup, teardown),
        cmocka_unit_test(test_wrong_secret),
        cmocka_unit_test(test_wrong_access_key),
        cmocka_unit_test(test_missing_bucket),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_concurrency),
        cmocka_unit_test(test_gateway_restart),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    keg_log_set_sink(NULL, NULL);
    return rc;
}
