/* obj_metrics.c -- the "metrics" layer: passes every call to the store below and counts
 * it per verb (requests, errors, bytes, latency), for `kegfs mount --metrics`.
 *
 * DESIGN
 * core/stack.c puts it directly above the store (and above the fault injector, so
 * injected failures count as the store's), below the SSD cache and writeback: what it
 * counts is what really goes to the object store.  Counters are relaxed atomics; a
 * reader (keg_obj_metrics_stats) sees each one whole, not a consistent set.  A request
 * that the backend sends several times (S3's own retries, the retry layer's) counts
 * once as a request; the repeats count as its verb's retries: both retry loops note
 * each repeat in a per-thread counter (keg_obj_note_retry), and a request runs its
 * retries in the calling thread, so the difference across the call is its own.
 */
#include <errno.h>

#include "keg/obj_metrics.h"

static struct keg_obj_verb_stats *om_verb(struct keg_obj *o, enum keg_obj_verb v)
{
    return &((struct keg_obj_verb_stats *)o->priv)[v];
}

/* Where a request started: the clock and the thread's retry count. */
struct om_mark {
    uint64_t t0;
    uint64_t retries;
};

static struct om_mark om_begin(void)
{
    return (struct om_mark){keg_metrics_now_ns(), keg_obj_thread_retries()};
}

static void om_done(struct keg_obj *o, enum keg_obj_verb v, const struct om_mark *m,
                    int64_t rc, uint64_t bytes)
{
    struct keg_obj_verb_stats *s = om_verb(o, v);
    uint64_t retried = keg_obj_thread_retries() - m->retries;
    __atomic_add_fetch(&s->requests, 1, __ATOMIC_RELAXED);
    if (retried)
        __atomic_add_fetch(&s->retries, retried, __ATOMIC_RELAXED);
    /* a missing key is an answer, not a failure of the store */
    if (rc < 0 && rc != -ENOENT)
        __atomic_add_fetch(&s->errors, 1, __ATOMIC_RELAXED);
    else if (bytes)
        __atomic_add_fetch(&s->bytes, bytes, __ATOMIC_RELAXED);
    keg_metrics_observe(&s->latency, keg_metrics_now_ns() - m->t0);
}

static int om_open(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    (void)conf;
    return o->inner ? 0 : -EINVAL;
}

static void om_close(struct keg_obj *o)
{
    (void)o;
}

static ssize_t om_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len)
{
    struct om_mark m = om_begin();
    ssize_t n = keg_obj_get(o->inner, key, off, buf, len);
    om_done(o, KEG_OBJ_VERB_GET, &m, n, n > 0 ? (uint64_t)n : 0);
    return n;
}

static int om_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    struct om_mark m = om_begin();
    int rc = keg_obj_put(o->inner, key, buf, len);
    om_done(o, KEG_OBJ_VERB_PUT, &m, rc, len);
    return rc;
}

static int om_put_file(struct keg_obj *o, const char *key, const void *buf, size_t len,
                       keg_obj_take_fn *take, void *arg)
{
    struct om_mark m = om_begin();
    int rc = keg_obj_put_file(o->inner, key, buf, len, take, arg);
    om_done(o, KEG_OBJ_VERB_PUT, &m, rc, len);
    return rc;
}

static int om_del(struct keg_obj *o, const char *key)
{
    struct om_mark m = om_begin();
    int rc = keg_obj_del(o->inner, key);
    om_done(o, KEG_OBJ_VERB_DEL, &m, rc, 0);
    return rc;
}

static int om_del_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    struct om_mark m = om_begin();
    int rc = keg_obj_del_keys(o->inner, keys, n);
    om_done(o, KEG_OBJ_VERB_DEL, &m, rc, 0);
    return rc;
}

static int om_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    struct om_mark m = om_begin();
    int rc = keg_obj_head(o->inner, key, size);
    om_done(o, KEG_OBJ_VERB_HEAD, &m, rc, 0);
    return rc;
}

static int om_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg)
{
    struct om_mark m = om_begin();
    int rc = keg_obj_def_list(o, prefix, cb, arg);
    om_done(o, KEG_OBJ_VERB_LIST, &m, rc, 0);
    return rc;
}

const struct keg_obj_ops keg_obj_metrics_ops = {
    .name = "metrics",
    .version = 1,
    .caps = KEG_OBJ_CAP_RANGE_GET | KEG_OBJ_CAP_LIST,
    .priv_size = sizeof(struct keg_obj_verb_stats) * KEG_OBJ_VERB_N,
    .open = om_open,
    .close = om_close,
    .get = om_get,
    .put = om_put,
    .put_file = om_put_file,
    .del = om_del,
    .del_keys = om_del_keys,
    .head = om_head,
    .list = om_list,
    .sync = keg_obj_def_sync,
    .sync_keys = keg_obj_def_sync_keys,
};

const struct keg_obj_verb_stats *keg_obj_metrics_stats(struct keg_obj *top)
{
    for (struct keg_obj *o = top; o; o = o->inner)
        if (o->ops == &keg_obj_metrics_ops)
            return o->priv;
    return NULL;
}
