/* obj_faulty.c -- the "faulty" layer: wraps any store and injects errors,
 * corruption and latency, deterministically from a seed (tests only).
 *
 * DESIGN
 * Each instance has its own splitmix64 generator behind a mutex, seeded from
 * conf->seed, so one thread issuing the same ops sees the same faults every
 * run (s3backer test_io random_errors, littlefs emubd).  Per op:
 *   delay_ms      sleep before the op (every op, list and sync included)
 *   err_prob      get/put/del/head fail with -EIO or -EAGAIN (a coin picks
 *                 which) WITHOUT calling the inner store
 *   corrupt_prob  after a successful non-empty get, one byte of the caller's
 *                 buffer is flipped (the stored object is untouched)
 * list and sync pass through unchanged apart from the delay.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#define KEG_LOG_TAG "obj_faulty"
#include "keg/log.h"
#include "keg/obj.h"
#include "keg/retry.h"

struct faulty {
    pthread_mutex_t lock;
    uint64_t        state;        /* splitmix64 state; protected by lock */
    double          err_prob;
    double          corrupt_prob;
    unsigned        delay_ms;
};

/* LOCKS: caller holds f->lock. */
static uint64_t faulty_next(struct faulty *f)
{
    uint64_t z = (f->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). LOCKS: caller holds f->lock. */
static double faulty_unit(struct faulty *f)
{
    return (double)(faulty_next(f) >> 11) * 0x1.0p-53;
}

static void faulty_delay(struct faulty *f)
{
    if (f->delay_ms)
        keg_sleep_ms(f->delay_ms);
}

/* Delay, then decide whether this op fails.  Returns 0 or the injected -errno. */
static int faulty_enter(struct faulty *f, const char *op, const char *key)
{
    int rc = 0;
    faulty_delay(f);
    if (f->err_prob <= 0)
        return 0;
    pthread_mutex_lock(&f->lock);
    if (faulty_unit(f) < f->err_prob)
        rc = (faulty_next(f) & 1) ? -EAGAIN : -EIO;
    pthread_mutex_unlock(&f->lock);
    if (rc)
        KEG_DEBUG("injected %s on %s %s", rc == -EIO ? "EIO" : "EAGAIN", op, key);
    return rc;
}

static int faulty_open(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    struct faulty *f = o->priv;
    if (!o->inner) {
        KEG_ERR("the faulty layer needs a store below it");
        return -EINVAL;
    }
    if (conf->err_prob < 0 || conf->err_prob > 1 || conf->corrupt_prob < 0 ||
        conf->corrupt_prob > 1) {
        KEG_ERR("fault probabilities must be in [0, 1] (err=%g corrupt=%g)", conf->err_prob,
                conf->corrupt_prob);
        return -EINVAL;
    }
    pthread_mutex_init(&f->lock, NULL);
    f->state = conf->seed;
    f->err_prob = conf->err_prob;
    f->corrupt_prob = conf->corrupt_prob;
    f->delay_ms = conf->delay_ms;
    KEG_INFO("fault injection on: seed=%llu err=%g corrupt=%g delay=%ums",
             (unsigned long long)conf->seed, f->err_prob, f->corrupt_prob, f->delay_ms);
    return 0;
}

static void faulty_close(struct keg_obj *o)
{
    struct faulty *f = o->priv;
    pthread_mutex_destroy(&f->lock);
}

static ssize_t faulty_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len)
{
    struct faulty *f = o->priv;
    ssize_t n;
    int rc = faulty_enter(f, "get", key);
    if (rc)
        return rc;
    n = keg_obj_get(o->inner, key, off, buf, len);
    if (n > 0 && f->corrupt_prob > 0) {
        size_t pos = 0;
        int flip = 0;
        pthread_mutex_lock(&f->lock);
        if (faulty_unit(f) < f->corrupt_prob) {
            flip = 1;
            pos = (size_t)(faulty_next(f) % (uint64_t)n);
        }
        pthread_mutex_unlock(&f->lock);
        if (flip) {
            ((unsigned char *)buf)[pos] ^= 0x5a;
            KEG_DEBUG("corrupted byte %zu of get %s", pos, key);
        }
    }
    return n;
}

static int faulty_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    int rc = faulty_enter(o->priv, "put", key);
    return rc ? rc : keg_obj_put(o->inner, key, buf, len);
}

static int faulty_del(struct keg_obj *o, const char *key)
{
    int rc = faulty_enter(o->priv, "del", key);
    return rc ? rc : keg_obj_del(o->inner, key);
}

static int faulty_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    int rc;
    *size = 0;
    rc = faulty_enter(o->priv, "head", key);
    return rc ? rc : keg_obj_head(o->inner, key, size);
}

static int faulty_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg)
{
    faulty_delay(o->priv);
    return keg_obj_def_list(o, prefix, cb, arg);
}

static int faulty_sync(struct keg_obj *o)
{
    faulty_delay(o->priv);
    return keg_obj_def_sync(o);
}

const struct keg_obj_ops keg_obj_faulty_ops = {
    .name = "faulty",
    .version = 1,
    .caps = KEG_OBJ_CAP_RANGE_GET | KEG_OBJ_CAP_LIST,
    .priv_size = sizeof(struct faulty),
    .open = faulty_open,
    .close = faulty_close,
    .get = faulty_get,
    .put = faulty_put,
    .del = faulty_del,
    .head = faulty_head,
    .list = faulty_list,
    .sync = faulty_sync,
};
