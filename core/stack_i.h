/* stack_i.h -- private: the SSD cache and writeback layers, as assembled by core/stack.c.
 *
 * Each layer is a file with a *_conf, a *_stats and a *_create(conf, inner)
 * (STYLE.md §3).  They are not in the by-name registry because they need
 * more configuration than struct keg_obj_conf carries.  Tests include this
 * header to build stacks with their own inner stores.
 */
#ifndef KEG_STACK_I_H
#define KEG_STACK_I_H

#include "keg/metrics.h"
#include "keg/obj.h"

/*----------------------------------------------------------------------------
 * SSD cache (core/cache/cache_ssd.c), ops name "cache_ssd"
 *--------------------------------------------------------------------------*/

struct keg_cache_ssd_conf {
    const char *dir;          /* <cache_dir>/<volume uuid or name>; created if missing */
    uint64_t    budget;       /* bytes of cache files kept (> 0) */
    const struct keg_block_id *vol; /* the volume's part of block identities (vol, v1_ok):
                                       a fetched block of another identity is not cached;
                                       NULL: blocks are checked without identity */
    int         spare_fill;   /* keep the pool of spare files stocked for a stream of new
                                 cache and staging files (core/ssdf/ssd_file.h) */
};

struct keg_cache_ssd_stats {
    uint64_t bytes;           /* bytes of cache files indexed */
    uint64_t objects;
    uint64_t budget;          /* bytes it may hold now: the configured budget, or less to
                               * leave free space on the disk (cache_ssd.c) */
    uint64_t hits;            /* gets served from a verified cache file */
    uint64_t misses;          /* gets that fetched from the inner store (one per single-flight) */
    uint64_t shared;          /* gets that waited for another thread's fetch */
    uint64_t corrupt;         /* cache files that failed verification (deleted, refetched) */
    uint64_t evictions;
};

/* Opens the SSD cache layer over inner.
 * TAKES: inner (closed here on failure, or with *out).  BORROWS: conf.
 * OWNERSHIP: caller closes *out with keg_obj_close().
 * Returns 0 or -errno (-EINVAL bad conf, what mkdir/open of the directory returns). */
int keg_cache_ssd_create(const struct keg_cache_ssd_conf *conf, struct keg_obj *inner,
                         struct keg_obj **out);
/* Fills *st (zeroed when o is not a cache_ssd layer).  Returns 0 or -EINVAL. */
int keg_cache_ssd_stats(struct keg_obj *o, struct keg_cache_ssd_stats *st);
extern const struct keg_obj_ops keg_cache_ssd_ops;
/* Drops least recently used cached blocks until at least need bytes of cache
 * files are gone (or the cache is empty), for writeback staging that found the
 * disk full: staging comes before caching.  Returns the bytes freed (0 if o is
 * not a cache layer).  LOCKS: takes the cache's lock. */
uint64_t keg_cache_ssd_make_room(struct keg_obj *o, uint64_t need);
/* Tells the cache layer o that delta more (or, negative, fewer) bytes of other
 * files on its disk are about to go: writeback's staged objects while they are
 * uploaded, each adopted by the cache or removed next.  Its limit counts them
 * as free space.  No-op if o is not a cache layer.  LOCKS: takes the cache's lock. */
void keg_cache_ssd_leaving(struct keg_obj *o, int64_t delta);
/* The cache layer's pool of spare files (core/ssdf/ssd_file.h), NULL if o
 * is not a cache layer or has none.  BORROWED: lives as long as o. */
struct keg_ssd_spare *keg_cache_ssd_spare(struct keg_obj *o);

/*----------------------------------------------------------------------------
 * Writeback (core/wb/writeback.c), ops name "writeback"
 *--------------------------------------------------------------------------*/

struct keg_wb_conf {
    const char *dir;          /* <cache_dir>/<volume uuid or name>; staging/<slot>/ below it */
    unsigned    workers;      /* upload threads (0: 4) */
    unsigned    idle_workers; /* upload threads once no new object was put for the upload
                               * delay (and at least 0.25 s): what a burst of writes left
                               * staged drains on this many (0, or less than workers:
                               * workers) */
    uint64_t    max_staging;  /* staged object bytes before put blocks (0: 1 GiB) */
    unsigned    drain_ms;     /* close() waits this long for uploads (0: 30000) */
    unsigned    retries;      /* failed uploads of an object in a row before each further
                               * one is an ERROR line (0: 6); uploads are retried for ever */
    unsigned    backoff_ms;   /* wait after an object's first failed upload, doubled per
                               * failure in a row up to park_ms (0: 100) */
    unsigned    park_ms;      /* longest wait between attempts, and the wait after a
                               * permanent error (0: 60000) */
    unsigned    upload_delay_ms; /* a new object is uploaded no sooner than this (0: at once);
                                  * ignored while puts wait for room and during drain/close */
    int         keys_write_once; /* every key is put once (block keys of core/fs): a key
                                  * deleted before any upload attempt needs no store del */
};

struct keg_wb_stats {
    uint64_t staged_bytes;    /* object bytes in staging (incl. uploading, parked) */
    uint64_t staged_objects;
    uint64_t unsynced_objects; /* staged but not yet fsync'ed */
    uint64_t uploading;       /* uploads in flight */
    uint64_t parked;          /* objects whose upload failed; retried later */
    uint64_t uploaded_bytes;  /* total since open */
    uint64_t uploaded_objects;
    uint64_t upload_errors;   /* failed upload attempts (transient and permanent) */
    uint64_t rate_bps;        /* upload rate, bytes/s, decaying average over ~5 s */
    uint64_t waiting_puts;    /* puts blocked by max_staging right now */
    uint64_t max_staging;
    uint64_t skipped_uploads; /* objects deleted while staged, never uploaded (since open) */
    uint64_t oldest_ms;       /* how long the oldest staged bytes have waited for their
                               * upload (0: nothing staged) */
    const struct keg_metrics_hist *stage_latency; /* how long the puts staged here took,
                               * from the call (a wait for room included) to the return;
                               * write-through puts are not in it.  Lives as long as the
                               * layer; updated atomically */
};

/* Opens the writeback layer over inner: recovers what is staged and starts
 * the upload workers.
 * TAKES: inner.  BORROWS: conf.  OWNERSHIP: caller closes *out with keg_obj_close(),
 * which drains for conf->drain_ms and leaves the rest staged.
 * Returns 0 or -errno (-EINVAL bad conf, -EBUSY every staging slot in use, ...). */
int keg_wb_create(const struct keg_wb_conf *conf, struct keg_obj *inner, struct keg_obj **out);
/* Fills *st (zeroed when o is not a writeback layer).  Returns 0 or -EINVAL. */
int keg_wb_stats(struct keg_obj *o, struct keg_wb_stats *st);
/* Waits until nothing is staged, or timeout_ms.  Parked objects are retried now.
 * *remaining (may be NULL) = objects still staged.
 * Returns 0, -ETIMEDOUT (time ran out), or -EIO (what is left only fails to upload). */
int keg_wb_drain(struct keg_obj *o, unsigned timeout_ms, uint64_t *remaining);
/* Sets the drain time of close(); 0: close does not wait for, nor hurry, uploads
 * (those in flight finish; the rest stays staged). */
void keg_wb_set_drain(struct keg_obj *o, unsigned drain_ms);
extern const struct keg_obj_ops keg_wb_ops;

#endif
