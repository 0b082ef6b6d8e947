/* obj_retry.c -- the "retry" layer: retries transient errors of a store that
 * does not retry by itself, within one deadline per request.
 *
 * DESIGN
 * The object-store layer owns retries (docs/durability.md, "One retry
 * policy"): the S3 client retries inside each request (obj_s3.c, up to its
 * deadline); for every other store core/stack.c puts this layer right above
 * the store (above the faulty layer when there is one), so the layers above
 * (writeback, core/fs) see one answer per request and never retry themselves.
 *
 * A get/put/put_file/del/del_keys/head that fails with a transient error
 * (keg_obj_transient) is tried again after a backoff with jitter: attempt n
 * sleeps a random time in [d/2, d], d = min(RETRY_CAP_MS, RETRY_BASE_MS * 2^n).
 * No attempt starts once conf->retry_deadline_ms (0: 60 s) has passed since
 * the first; the last one is made at the deadline rather than given up early.
 * Each of these ops is idempotent (a put of the same bytes, a delete), and a
 * failed put_file has not handed its file over, so repeating one is safe.
 * Not retried: list (its callback may have seen part of the keys), put_new
 * (a put that landed but lost its answer would turn into -EEXIST), sync.
 *
 * One deadline per read, as in obj_s3.c: the kernel asks again at once for a
 * page whose read failed, so a get that ran out of retries remembers its key
 * (gone[], RETRY_GONE_MAX keys) for min(deadline, RETRY_GONE_MS) or until any
 * request succeeds; a get of that key meanwhile fails at once (-EHOSTDOWN).
 * LOCKS: lock guards gone[] and ngone; failing is read without it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define KEG_LOG_TAG "obj_retry"
#include "keg/hash.h"
#include "keg/log.h"
#include "keg/obj.h"
#include "keg/retry.h"

#define RETRY_DEFAULT_DEADLINE_MS 60000
#define RETRY_BASE_MS 20
#define RETRY_CAP_MS  2000
#define RETRY_GONE_MAX 16
#define RETRY_GONE_MS  10000

struct oretry {
    int64_t         deadline_ns;      /* per request */
    pthread_mutex_t lock;
    atomic_int      failing;          /* ngone > 0 */
    unsigned        ngone;            /* protected by lock */
    struct {
        uint64_t hash;                /* keg_fnv1a64_str of the key */
        int64_t  until;               /* keg_mono_ns */
    } gone[RETRY_GONE_MAX];           /* protected by lock */
};

/* A get of key ran out of retries: remember it (the oldest entry makes room). */
static void retry_gone_add(struct oretry *r, const char *key)
{
    int64_t now = keg_mono_ns();
    unsigned slot = 0;

    pthread_mutex_lock(&r->lock);
    if (r->ngone < RETRY_GONE_MAX) {
        slot = r->ngone++;
    } else {
        for (unsigned i = 1; i < RETRY_GONE_MAX; i++)
            if (r->gone[i].until < r->gone[slot].until)
                slot = i;
    }
    r->gone[slot].hash = keg_fnv1a64_str(key);
    r->gone[slot].until = now + KEG_MIN(r->deadline_ns, (int64_t)RETRY_GONE_MS * 1000000);
    atomic_store(&r->failing, 1);
    pthread_mutex_unlock(&r->lock);
}

/* 1 if a get of key ran out of retries moments ago and nothing succeeded since. */
static int retry_gone(struct oretry *r, const char *key)
{
    int64_t now = keg_mono_ns();
    uint64_t h;
    int hit = 0;

    if (!atomic_load(&r->failing))
        return 0;
    h = keg_fnv1a64_str(key);
    pthread_mutex_lock(&r->lock);
    for (unsigned i = 0; i < r->ngone; i++)
        if (r->gone[i].hash == h && r->gone[i].until > now)
            hit = 1;
    pthread_mutex_unlock(&r->lock);
    return hit;
}

/* Any answer of the store: forget the keys that ran out of retries. */
static void retry_answered(struct oretry *r)
{
    if (!atomic_load(&r->failing))
        return;
    pthread_mutex_lock(&r->lock);
    r->ngone = 0;
    atomic_store(&r->failing, 0);
    pthread_mutex_unlock(&r->lock);
}

struct attempt {
    int64_t  start_ns;
    unsigned n;               /* attempts failed so far */
};

int keg_obj_transient(int rc)
{
    switch (rc) {
    case -EAGAIN:
    case -ETIMEDOUT:
    case -EIO:
    case -ECONNRESET:
    case -ECONNREFUSED:
    case -EINTR:
        return 1;
    default:
        return 0;
    }
}

/* After a failed attempt: 1 (slept the backoff; try again) or 0 (rc is final). */
static int retry_again(struct oretry *r, struct attempt *a, int rc, const char *op,
                       const char *key)
{
    int64_t now = keg_mono_ns();
    int64_t end = a->start_ns + r->deadline_ns;
    int64_t delay_ms;

    a->n++;
    if (!keg_obj_transient(rc))
        retry_answered(r);
    if (!keg_obj_transient(rc) || now >= end) {
        if (a->n > 1)
            KEG_WARN("%s %s failed: %s (gave up after %u attempts in %lld ms)", op, key,
                     strerror(-rc), a->n, (long long)((now - a->start_ns) / 1000000));
        return 0;
    }
    delay_ms = (int64_t)keg_backoff_ms(a->n - 1, RETRY_BASE_MS, RETRY_CAP_MS);
    delay_ms = delay_ms / 2 + (int64_t)(keg_rand64() % (uint64_t)(delay_ms / 2 + 1));
    if (a->n == 1)
        KEG_WARN("%s %s failed: %s; retrying for up to %lld ms", op, key, strerror(-rc),
                 (long long)(r->deadline_ns / 1000000));
    else
        KEG_DEBUG("%s %s failed: %s; retry %u in %lld ms", op, key, strerror(-rc), a->n,
                  (long long)delay_ms);
    keg_sleep_ns(KEG_MIN(delay_ms * 1000000, end - now));
    keg_obj_note_retry();
    return 1;
}

static int oretry_open(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    struct oretry *r = o->priv;
    unsigned ms = conf->retry_deadline_ms ? conf->retry_deadline_ms : RETRY_DEFAULT_DEADLINE_MS;

    if (!o->inner) {
        KEG_ERR("the retry layer needs a store below it");
        return -EINVAL;
    }
    r->deadline_ns = (int64_t)ms * 1000000;
    pthread_mutex_init(&r->lock, NULL);
    return 0;
}

static void oretry_close(struct keg_obj *o)
{
    struct oretry *r = o->priv;
    pthread_mutex_destroy(&r->lock);
}

static ssize_t oretry_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len)
{
    struct oretry *r = o->priv;
    struct attempt a = {keg_mono_ns(), 0};
    ssize_t n;

    if (retry_gone(r, key))
        return -EHOSTDOWN;
    do
        n = keg_obj_get(o->inner, key, off, buf, len);
    while (n < 0 && retry_again(r, &a, (int)n, "get", key));
    if (n >= 0 || n == -ENOENT)
        retry_answered(r);
    else if (keg_obj_transient((int)n))
        retry_gone_add(r, key);
    return n;
}

static int oretry_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    struct attempt a = {keg_mono_ns(), 0};
    int rc;

    do
        rc = keg_obj_put(o->inner, key, buf, len);
    while (rc < 0 && retry_again(o->priv, &a, rc, "put", key));
    if (rc >= 0)
        retry_answered(o->priv);
    return rc;
}

static int oretry_put_file(struct keg_obj *o, const char *key, const void *buf, size_t len,
                           keg_obj_take_fn *take, void *arg)
{
    struct attempt a = {keg_mono_ns(), 0};
    int rc;

    do
        rc = keg_obj_put_file(o->inner, key, buf, len, take, arg);
    while (rc < 0 && retry_again(o->priv, &a, rc, "put", key));
    if (rc >= 0)
        retry_answered(o->priv);
    return rc;
}

static int oretry_del(struct keg_obj *o, const char *key)
{
    struct attempt a = {keg_mono_ns(), 0};
    int rc;

    do
        rc = keg_obj_del(o->inner, key);
    while (rc < 0 && retry_again(o->priv, &a, rc, "delete", key));
    if (rc >= 0)
        retry_answered(o->priv);
    return rc;
}

static int oretry_del_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    struct attempt a = {keg_mono_ns(), 0};
    int rc;

    do
        rc = keg_obj_del_keys(o->inner, keys, n);
    while (rc < 0 && retry_again(o->priv, &a, rc, "delete of many keys from", keys[0]));
    if (rc >= 0)
        retry_answered(o->priv);
    return rc;
}

static int oretry_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    struct attempt a = {keg_mono_ns(), 0};
    int rc;

    do
        rc = keg_obj_head(o->inner, key, size);
    while (rc < 0 && retry_again(o->priv, &a, rc, "head", key));
    if (rc >= 0)
        retry_answered(o->priv);
    return rc;
}

const struct keg_obj_ops keg_obj_retry_ops = {
    .name = "retry",
    .version = 1,
    .caps = KEG_OBJ_CAP_RANGE_GET | KEG_OBJ_CAP_LIST,
    .priv_size = sizeof(struct oretry),
    .open = oretry_open,
    .close = oretry_close,
    .get = oretry_get,
    .put = oretry_put,
    .put_file = oretry_put_file,
    .del = oretry_del,
    .del_keys = oretry_del_keys,
    .head = oretry_head,
    .list = keg_obj_def_list,
    .sync = keg_obj_def_sync,
    .sync_keys = keg_obj_def_sync_keys,
};
