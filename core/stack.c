/* stack.c -- assembles the object-store stack of a volume, in this one place.
 *
 * DESIGN
 * The stack is
 *     [writeback] -> [cache_ssd] -> [metrics] -> [retry] -> [faulty] -> file | s3 | mem
 * metrics (with sc->metrics, `kegfs mount --metrics`) counts every request that
 * reaches the store (obj_metrics.c).
 * retry (obj_retry.c) retries transient errors within one deadline per request
 * (sc->retry_deadline_ms); it is added unless the store retries by itself
 * (KEG_OBJ_CAP_RETRIES: s3) and no faulty layer injects errors above it, or
 * sc->no_retries.  No layer above retries a request (docs/durability.md).
 * faulty is added only when the environment variable
 * KEG_FAULTY="seed=N,err=P,corrupt=P,delay=MS" is set (tests; every field
 * optional); cache_ssd when sc->cache_dir is set; writeback when
 * sc->writeback is set too.  Writeback sits ABOVE the cache so that staged
 * objects are not cached twice while staged, and every upload passes through
 * the cache (write-through), leaving the block cached once uploaded; reads of
 * a staged object are answered from staging.  faulty sits BELOW the cache,
 * so injected corruption is caught by the cache's verification on fill.
 * Both local layers keep their files in <cache_dir>/<volume uuid, or name>/
 * so a reformatted volume of the same name never sees stale blocks.
 * The S3 client settings of sc (insecure, ca_file, concurrency,
 * retry_deadline_ms) go to the bottom store (and retry_deadline_ms to retry); they are mount-time
 * options and never stored in the volume's format.
 * Each open TAKES the layer below, so a failure at any level has already
 * closed everything beneath it: unwinding is free.  See docs/internals/CACHE.md.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define KEG_LOG_TAG "stack"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/stack.h"
#include "stack_i.h"

#define STACK_CACHE_SIZE_DEFAULT (1ULL << 30)

/* NULL for an empty string: the format stores "not set" as "". */
static const char *stack_str(const char *s)
{
    return s && *s ? s : NULL;
}

/* Parses KEG_FAULTY into conf.  Returns 0 or -EINVAL (message logged). */
static int stack_parse_faulty(const char *spec, struct keg_obj_conf *conf)
{
    const char *p = spec;

    while (*p) {
        const char *eq = strchr(p, '=');
        const char *end = strchr(p, ',');
        char *stop = NULL;
        size_t klen;

        if (!end)
            end = p + strlen(p);
        if (!eq || eq > end)
            goto bad;
        klen = (size_t)(eq - p);
        errno = 0;
        if (klen == 4 && strncmp(p, "seed", 4) == 0) {
            conf->seed = strtoull(eq + 1, &stop, 0);
        } else if (klen == 3 && strncmp(p, "err", 3) == 0) {
            conf->err_prob = strtod(eq + 1, &stop);
            if (conf->err_prob < 0 || conf->err_prob > 1)
                goto bad;
        } else if (klen == 7 && strncmp(p, "corrupt", 7) == 0) {
            conf->corrupt_prob = strtod(eq + 1, &stop);
            if (conf->corrupt_prob < 0 || conf->corrupt_prob > 1)
                goto bad;
        } else if (klen == 5 && strncmp(p, "delay", 5) == 0) {
            unsigned long v = strtoul(eq + 1, &stop, 10);
            if (v > 600000)
                goto bad;
            conf->delay_ms = (unsigned)v;
        } else {
            goto bad;
        }
        if (errno || stop == eq + 1 || stop != end)
            goto bad;
        p = *end ? end + 1 : end;
    }
    return 0;
bad:
    KEG_ERR("KEG_FAULTY=\"%s\" is invalid: expected seed=N,err=P,corrupt=P,delay=MS "
            "(probabilities in [0,1])", spec);
    return -EINVAL;
}

/* OWNERSHIP: caller closes *out with keg_obj_close().  BORROWS: f, sc.
 * Returns 0 or -errno: -EINVAL (unknown storage, bad KEG_FAULTY), -ENOTSUP
 * (storage not compiled in), or what the store's open returns. */
int keg_stack_open(const struct keg_format *f, const struct keg_stack_conf *sc,
                   struct keg_obj **out)
{
    struct keg_obj_conf conf = {0};
    struct keg_obj_conf fconf = {0};
    struct keg_obj *bottom = NULL, *top = NULL;
    const char *faulty = getenv("KEG_FAULTY");
    const char *storage = f->storage;
    int known, rc;

    *out = NULL;
    if (sc && sc->cache_dir && *sc->cache_dir && sc->cache_dir[0] != '/') {
        KEG_ERR("volume %s: cache directory \"%s\" must be an absolute path", f->name,
                sc->cache_dir);
        return -EINVAL;
    }
    if (sc && sc->writeback && !(sc->cache_dir && *sc->cache_dir)) {
        KEG_ERR("volume %s: writeback needs a cache directory (--cache-dir)", f->name);
        return -EINVAL;
    }
    known = keg_obj_store_known(storage);
    if (known < 0) {
        char names[128];
        keg_obj_store_names(names, sizeof(names));
        KEG_ERR("volume %s: unknown storage \"%s\" (expected %s)", f->name, storage, names);
        return -EINVAL;
    }
    if (!known) {
        KEG_ERR("volume %s: storage \"%s\" is not compiled into this build", f->name, storage);
        return -ENOTSUP;
    }
    if (faulty && *faulty) {
        rc = stack_parse_faulty(faulty, &fconf);
        if (rc < 0)
            return rc;
    }

    conf.bucket = f->bucket;
    conf.access_key = stack_str(sc ? sc->access_key : NULL);
    conf.secret_key = stack_str(sc ? sc->secret_key : NULL);
    conf.session_token = stack_str(sc ? sc->session_token : NULL);
    if (!conf.access_key)
        conf.access_key = stack_str(f->access_key);
    if (!conf.secret_key)
        conf.secret_key = stack_str(f->secret_key);
    if (!conf.session_token)
        conf.session_token = stack_str(f->session_token);
    conf.region = stack_str(f->region);
    /* S3 client settings are mount-time options, not part of the format. */
    if (sc) {
        conf.insecure = sc->insecure;
        conf.ca_file = stack_str(sc->ca_file);
        conf.concurrency = sc->concurrency;
        conf.retry_deadline_ms = sc->retry_deadline_ms;
    }
    conf.spare_fill = 1;        /* the file store's pool, for a stream of new blocks */

    rc = keg_obj_open(storage, &conf, NULL, &bottom);
    if (rc < 0) {
        KEG_ERR("volume %s: cannot open %s storage: %s", f->name, storage, strerror(-rc));
        return rc;
    }
    top = bottom;
    if (faulty && *faulty) {
        rc = keg_obj_open("faulty", &fconf, top, &top);   /* TAKES top */
        if (rc < 0)
            return rc;
    }
    if ((top != bottom || !(bottom->ops->caps & KEG_OBJ_CAP_RETRIES)) &&
        !(sc && sc->no_retries)) {
        rc = keg_obj_open("retry", &conf, top, &top);     /* TAKES top */
        if (rc < 0)
            return rc;
    }
    if (sc && sc->metrics) {
        rc = keg_obj_open("metrics", &conf, top, &top);   /* TAKES top */
        if (rc < 0)
            return rc;
    }
    if (sc && sc->cache_dir && *sc->cache_dir) {
        struct keg_cache_ssd_conf cc = {0};
        struct keg_wb_conf wc = {0};
        struct keg_block_id vol = {0};
        char *dir = keg_asprintf("%s/%s", sc->cache_dir, f->uuid[0] ? f->uuid : f->name);

        if (!dir) {
            keg_obj_close(top);
            return -ENOMEM;
        }
        cc.dir = dir;
        cc.budget = sc->cache_size ? sc->cache_size : STACK_CACHE_SIZE_DEFAULT;
        (void)keg_block_vol_uuid(f->uuid, vol.vol);
        vol.v1_ok = f->block_version < KEG_BLOCK_VERSION;
        cc.vol = &vol;
        cc.spare_fill = 1;
        rc = keg_cache_ssd_create(&cc, top, &top);      /* TAKES top */
        if (rc == 0 && sc->writeback) {
            wc.dir = dir;
            wc.workers = sc->upload_workers;
            wc.idle_workers = sc->idle_upload_workers;
            wc.max_staging = sc->max_staging;
            wc.drain_ms = sc->drain_ms;
            wc.upload_delay_ms = sc->upload_delay_ms;
            wc.keys_write_once = 1;     /* core/fs writes each block key once */
            rc = keg_wb_create(&wc, top, &top);         /* TAKES top */
        }
        keg_free(dir);
        if (rc < 0)
            return rc;
    }
    *out = top;
    return 0;
}

/* The first layer with these ops at or below top, or NULL. */
static struct keg_obj *stack_find(struct keg_obj *top, const struct keg_obj_ops *ops)
{
    for (struct keg_obj *o = top; o; o = o->inner) {
        if (o->ops == ops)
            return o;
    }
    return NULL;
}

/* BORROWS: top.  Returns 0. */
int keg_stack_stats(struct keg_obj *top, struct keg_stack_stats *st)
{
    struct keg_obj *wb = stack_find(top, &keg_wb_ops);
    struct keg_obj *cs = stack_find(top, &keg_cache_ssd_ops);

    memset(st, 0, sizeof(*st));
    if (wb) {
        struct keg_wb_stats w;
        keg_wb_stats(wb, &w);
        st->has_writeback = 1;
        st->staged_bytes = w.staged_bytes;
        st->staged_objects = w.staged_objects;
        st->unsynced_objects = w.unsynced_objects;
        st->uploading = w.uploading;
        st->failing_objects = w.parked;
        st->uploaded_bytes = w.uploaded_bytes;
        st->uploaded_objects = w.uploaded_objects;
        st->upload_errors = w.upload_errors;
        st->upload_rate_bps = w.rate_bps;
        st->waiting_puts = w.waiting_puts;
        st->max_staging = w.max_staging;
        st->oldest_staged_ms = w.oldest_ms;
        st->stage_latency = w.stage_latency;
    }
    if (cs) {
        struct keg_cache_ssd_stats c;
        keg_cache_ssd_stats(cs, &c);
        st->has_cache = 1;
        st->cache_bytes = c.bytes;
        st->cache_objects = c.objects;
        st->cache_budget = c.budget;
        st->cache_hits = c.hits;
        st->cache_misses = c.misses;
        st->cache_shared = c.shared;
        st->cache_corrupt = c.corrupt;
        st->cache_evictions = c.evictions;
    }
    for (struct keg_obj *o = top; o; o = o->inner) {
        struct keg_obj_health h;
        if (!o->ops->health)
            continue;
        o->ops->health(o, &h);
        st->has_store_health = 1;
        st->store_failing_ms = h.failing_ms;
        st->store_retrying = h.retrying;
        st->store_retrying_puts = h.retrying_puts;
        st->store_retries = h.retries;
        st->store_failed = h.failed;
        break;
    }
    return 0;
}

/* BORROWS: top.  Returns 0, -ETIMEDOUT or -EIO (see stack.h). */
int keg_stack_drain(struct keg_obj *top, unsigned timeout_ms, uint64_t *remaining)
{
    struct keg_obj *wb = stack_find(top, &keg_wb_ops);

    if (remaining)
        *remaining = 0;
    if (!wb)
        return 0;
    return keg_wb_drain(wb, timeout_ms, remaining);
}

void keg_stack_set_drain(struct keg_obj *top, unsigned drain_ms)
{
    struct keg_obj *wb = stack_find(top, &keg_wb_ops);
    if (wb)
        keg_wb_set_drain(wb, drain_ms);
}
