/* stack.h -- assembles the object-store stack of a volume in one place.
 *
 *   [writeback] -> [cache_ssd] -> [metrics] -> [retry] -> [faulty (tests, KEG_FAULTY env)]
 *       -> file | s3 | mem
 *
 * cache_ssd is present when conf->cache_dir is set, writeback when
 * conf->writeback is also set (see docs/internals/CACHE.md, WRITEBACK.md).
 */
#ifndef KEG_STACK_H
#define KEG_STACK_H

#include "keg/meta.h"
#include "keg/metrics.h"
#include "keg/obj.h"

struct keg_stack_conf {
    const char *access_key;       /* overrides of the stored credentials, or NULL */
    const char *secret_key;
    const char *session_token;

    /* Local SSD cache and writeback.  All zero: neither (objects go straight to the store). */
    const char *cache_dir;        /* absolute directory for the SSD cache and the staging area;
                                     NULL or "": no cache_ssd, no writeback */
    uint64_t    cache_size;       /* SSD cache budget in bytes (0: 1 GiB) */
    int         writeback;        /* stage puts under cache_dir, upload in the background
                                     (needs cache_dir) */
    unsigned    upload_workers;   /* writeback upload threads (0: 4) */
    unsigned    idle_upload_workers; /* writeback upload threads once writes pause for the
                                     upload delay (0, or fewer than upload_workers: those) */
    uint64_t    max_staging;      /* writeback: staged bytes before puts block (0: 1 GiB) */
    unsigned    drain_ms;         /* writeback: close waits this long for uploads (0: 30000) */
    unsigned    upload_delay_ms;  /* writeback: upload a new object no sooner (0: at once) */
    int         metrics;          /* count requests to the store (obj_metrics.c) */

    /* S3 client settings (mount-time only, never stored in the format; ignored
     * by the other stores).  All zero: the store's defaults, TLS verified. */
    int         insecure;         /* skip TLS certificate and host verification */
    const char *ca_file;          /* CA bundle for TLS verification, or NULL/"": system */
    unsigned    concurrency;      /* connection pool size (0: 16) */
    unsigned    retry_deadline_ms; /* total time one request may spend retrying (0: 60000);
                                      s3 and the retry layer of the other stores */
    int         no_retries;       /* tests: no retry layer (the first error is final) */
};

/* What the cache and writeback layers hold and have done (zero when absent). */
struct keg_stack_stats {
    int      has_cache;           /* 1 if the stack has a cache_ssd layer */
    int      has_writeback;       /* 1 if the stack has a writeback layer */
    /* writeback */
    uint64_t staged_bytes;        /* object bytes staged on local disk, not yet uploaded */
    uint64_t staged_objects;
    uint64_t unsynced_objects;    /* staged and not yet fsync'ed (lost on power loss) */
    uint64_t uploading;           /* uploads in flight */
    uint64_t failing_objects;     /* staged objects whose last upload failed (retried later) */
    uint64_t uploaded_bytes;      /* total since the stack was opened */
    uint64_t uploaded_objects;
    uint64_t upload_errors;       /* failed upload attempts */
    uint64_t upload_rate_bps;     /* bytes/s averaged over the last ~5 s */
    uint64_t waiting_puts;        /* writes blocked right now because staging is full */
    uint64_t max_staging;         /* the bound, bytes */
    uint64_t oldest_staged_ms;    /* how long the oldest staged bytes have waited (0: none) */
    const struct keg_metrics_hist *stage_latency; /* staging one object on local disk, a
                                   * wait for room included (lives as long as the stack) */
    /* SSD cache */
    uint64_t cache_bytes;
    uint64_t cache_objects;
    uint64_t cache_budget;
    uint64_t cache_hits;
    uint64_t cache_misses;        /* fetches from the store (concurrent misses share one) */
    uint64_t cache_shared;        /* misses that waited for another reader's fetch */
    uint64_t cache_corrupt;       /* cache files that failed verification (refetched) */
    uint64_t cache_evictions;
    /* the remote store (its ops->health; has_store_health 0: a local store) */
    int      has_store_health;
    uint64_t store_failing_ms;    /* requests failing for this long, 0: the store answers */
    uint64_t store_retrying;      /* requests retrying right now */
    uint64_t store_retrying_puts; /* ... of them uploads */
    uint64_t store_retries;       /* retried attempts, since open */
    uint64_t store_failed;        /* requests that ran out of retries, since open */
};

/* Open the stack for volume f.  Unwinds everything on failure.
 * KEG_FAULTY="seed=N,err=P,corrupt=P,delay=MS" (tests) wraps the bottom store.
 * OWNERSHIP: caller closes with keg_obj_close().  Returns 0 or -errno. */
int keg_stack_open(const struct keg_format *f, const struct keg_stack_conf *sc,
                   struct keg_obj **out);

/* Fills *st from the layers of the stack whose top is top (zeroed first).
 * BORROWS: top.  Returns 0. */
int keg_stack_stats(struct keg_obj *top, struct keg_stack_stats *st);

/* Waits until the writeback layer has uploaded everything staged, or timeout_ms
 * passed.  Objects whose upload failed are retried now.  *remaining (may be NULL)
 * = objects still staged.  Without writeback: returns 0 at once.
 * Returns 0, -ETIMEDOUT (time ran out with uploads still progressing) or -EIO
 * (what is left fails to upload; details in the log). */
int keg_stack_drain(struct keg_obj *top, unsigned timeout_ms, uint64_t *remaining);

/* How long closing the stack waits for uploads (the conf's drain_ms), changed
 * for a close that must be quick (an in-place upgrade: what is staged stays in
 * the staging directory for the next mount).  0: no wait, and staged objects are
 * not hurried (uploads in flight finish).  No-op without writeback. */
void keg_stack_set_drain(struct keg_obj *top, unsigned drain_ms);

#endif
