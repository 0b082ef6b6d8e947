/* read.c -- the read path and the decoded-block memory cache.
 *
 * DESIGN
 * A read is cut at chunk boundaries.  For each chunk the cached layout
 * (inode.c: visible segments, loaded once per open) gives the segments that
 * overlap the range; holes are zero-filled and data segments are served from
 * the blocks of their slice.  A block is fetched whole (one GET of the encoded
 * object), verified and decoded (the CRC32C of the raw bytes is checked on
 * every fetch), and kept in an LRU cache of decoded blocks with a byte budget,
 * so 128 KiB sequential reads of a 4 MiB block cost one GET.  A block of codec
 * none is verified in place (keg_block_decode_inplace) and its entry keeps the
 * fetched buffer (base) with data pointing past the header: one allocation and
 * no copy; only compressed blocks are decoded into a second buffer.
 * Corruption, a missing object or any store failure becomes -EIO and an
 * ERROR log line naming the object key: never wrong bytes.  A store error is
 * final here: the object stack retried it within its deadline (obj_retry.c,
 * obj_s3.c).  A block failing verification is read again up to
 * FS_FETCH_CORRUPT_RETRIES times (a torn transfer); a missing object is not
 * retried here (see below).
 *
 * Read-ahead: every handle remembers where its next sequential read would
 * start.  A read that starts near there doubles the handle's window (1 block
 * up to FS_RA_MAX_BLOCKS); any other read resets it.  "Near" is 256 KiB for a
 * reader not yet sequential and the window's bytes for one that is: the
 * kernel's own read-ahead keeps several reads in flight, and the threads
 * answering them overtake each other by up to its window (4 MiB, set by
 * `kegfs mount --read-ahead`).  After a sequential read, the blocks of
 * [end, end + window * bs) that are not cached yet and were not requested
 * before are queued on the fetch pool (FS_FETCH_THREADS threads, bounded
 * queue; a full queue drops the request).
 * Drop-behind: a reader at full window also gives back the cached blocks
 * that lie wholly more than FS_DROP_BEHIND + one block behind the end of its
 * reads (a block still shown elsewhere in the range is kept; a referenced
 * one only goes to the LRU tail).  A file streamed once then holds about
 * FS_DROP_BEHIND + the window of cache instead of the whole read share, the
 * blocks other readers use stay cached, and the stream's fetches reuse the
 * buffers it freed.  Reading the file again is served by the kernel's page
 * cache (keep_cache) or fetched again from the store (or the disk cache).
 * A fetch job is just bc_get + bc_put: the block lands in this cache, and a
 * reader that arrives while it is LOADING waits for it (single-flight).
 * A read that needs several blocks queues all of them but the first on the
 * fetch pool and then copies in order, so the GETs run in parallel.
 * keg_fs_read_pin serves the common case without that copy: a committed
 * range inside one block of one slice is answered from the cache entry
 * itself, referenced (so never evicted or freed) until the FUSE reply has
 * copied it; it verifies nothing less, the entry was checked when fetched.
 *
 * A missing block usually means the reader's layout is stale (compaction or
 * another mounter replaced the chunk's slices and their blocks were deleted):
 * the read drops the inode's cached layouts and tries once more before it
 * reports -EIO.
 *
 * Cache entry states:
 *   LOADING  inserted by the first reader that missed; others wait on cv
 *   READY    data valid; on the LRU list; evictable when refs == 0
 *   FAILED   removed from the hash; waiters read err; freed at refs == 0
 * Invariants: an entry is in the hash iff LOADING or READY; in the LRU iff
 * READY; used = sum of len of READY entries; an entry is freed only when it
 * is out of the hash and refs == 0.
 *
 * Memory budget: the cache shares one budget (buffer_size) with the write
 * buffers (fs->wbytes, file.c).  Writers have priority: their bytes cannot
 * be evicted, so the read share is what they leave,
 *   limit = budget - wbytes, but at least budget / BC_FLOOR_DIV (the floor),
 * and at most the optional read cap (conf->block_cache_size, 0: none).
 * Unreferenced entries are evicted from the LRU tail while used > limit:
 * when an entry becomes READY or unreferenced, and from fs_bcache_trim(),
 * which the write path calls after wbytes grew (it returns at once, without
 * the lock, while used + wbytes <= budget).  The floor keeps a reader going
 * under heavy writing: with no cache at all, each 128 KiB read of a 4 MiB
 * block would fetch and decode the whole block again.  So the mounter's
 * block memory is bounded by budget + floor + referenced entries (blocks
 * being copied right now) + blocks being fetched + the fs's idle whole-block
 * buffers (fs_bigbuf_get, at most 4, shared with the writers): evicted
 * blocks' buffers go back there for the next fetches (a fresh one costs a
 * page clear per 4 KiB and, under virtualization, a first touch per page:
 * file.c), and the idle ones are freed while writers press the budget.
 * While the read share is down to the floor, read-ahead and parallel fetches
 * are not queued: they would only evict the blocks readers are about to copy.
 */
#include <fcntl.h>
#include <string.h>
#include <time.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/retry.h"
#include "fs_i.h"

#define BC_BUCKETS 8192
#define FS_READ_LOCAL_SEGS 32
#define FS_FETCH_THREADS 4
#define FS_FETCH_QUEUE   64     /* fetches waiting for a thread; more are dropped */
#define FS_RA_MAX_BLOCKS 8      /* largest read-ahead window */
#define FS_FETCH_MAX_JOBS 64    /* blocks queued by one read */
#define FS_FETCH_CORRUPT_RETRIES 2  /* re-reads of a block that failed verification */
#define BC_FLOOR_DIV 8          /* the read share never drops below budget / 8 */

enum { BC_LOADING, BC_READY, BC_FAILED };

struct bc_ent {
    struct bc_ent *hnext;
    struct bc_ent *lprev, *lnext;   /* LRU, MRU at head */
    uint64_t       id;
    uint32_t       indx;
    uint32_t       len;
    int            state;
    int            err;
    uint32_t       refs;
    int            hashed;
    uint8_t       *base;            /* the allocation (bc_buf_release) */
    size_t         base_size;       /* its bytes */
    uint8_t       *data;            /* the len raw bytes, inside base */
};

struct fs_bcache {
    pthread_mutex_t mu;             /* protects everything but used's unlocked reads */
    pthread_cond_t  cv;             /* LOADING -> READY/FAILED */
    uint64_t        budget;         /* shared with the write buffers */
    uint64_t        cap;            /* optional cap of the read share, 0: none */
    uint64_t        floor;          /* the read share never drops below this */
    const _Atomic uint64_t *wbytes; /* buffered write bytes (fs->wbytes) or NULL */
    _Atomic uint64_t used;          /* written under mu; read anywhere */
    struct bc_ent   lru;            /* sentinel */
    struct bc_ent  *h[BC_BUCKETS];
    struct keg_fs  *fs;             /* its whole-block buffers (fs_bigbuf_get), or NULL */
    /* what happened to block lookups and entries (keg_fs_mem_stats); written
     * under mu, read anywhere */
    _Atomic uint64_t hits;          /* a read found the block cached or being fetched */
    _Atomic uint64_t misses;        /* a read fetched the block */
    _Atomic uint64_t prefetched;    /* read-ahead fetched a block before any read */
    _Atomic uint64_t evicted;       /* entries freed for room (LRU tail) */
    _Atomic uint64_t dropped;       /* entries a sequential reader had finished */
};

int fs_bcache_new(uint64_t budget, uint64_t cap, struct keg_fs *fs, struct fs_bcache **out)
{
    struct fs_bcache *bc = keg_calloc(1, sizeof(*bc));
    *out = NULL;
    if (!bc)
        return -ENOMEM;
    pthread_mutex_init(&bc->mu, NULL);
    pthread_cond_init(&bc->cv, NULL);
    bc->budget = budget;
    bc->cap = cap;
    bc->floor = budget / BC_FLOOR_DIV;
    if (cap && cap < bc->floor)
        bc->floor = cap;
    bc->wbytes = fs ? &fs->wbytes : NULL;
    bc->fs = fs;
    atomic_init(&bc->used, 0);
    atomic_init(&bc->hits, 0);
    atomic_init(&bc->misses, 0);
    atomic_init(&bc->prefetched, 0);
    atomic_init(&bc->evicted, 0);
    atomic_init(&bc->dropped, 0);
    bc->lru.lnext = bc->lru.lprev = &bc->lru;
    *out = bc;
    return 0;
}

void fs_bcache_free(struct fs_bcache *bc)
{
    if (!bc)
        return;
    for (size_t i = 0; i < BC_BUCKETS; i++) {
        struct bc_ent *e = bc->h[i];
        while (e) {
            struct bc_ent *next = e->hnext;
            keg_free(e->base);
            keg_free(e);
            e = next;
        }
    }
    pthread_mutex_destroy(&bc->mu);
    pthread_cond_destroy(&bc->cv);
    keg_free(bc);
}

uint64_t fs_bcache_used(struct fs_bcache *bc)
{
    return atomic_load_explicit(&bc->used, memory_order_relaxed);
}

static uint64_t bc_wbytes(const struct fs_bcache *bc)
{
    return bc->wbytes ? atomic_load_explicit(bc->wbytes, memory_order_relaxed) : 0;
}

/* The bytes the read share may hold now (see DESIGN). */
static uint64_t bc_limit(const struct fs_bcache *bc)
{
    uint64_t w = bc_wbytes(bc);
    uint64_t limit = w < bc->budget ? bc->budget - w : 0;
    if (limit < bc->floor)
        limit = bc->floor;
    if (bc->cap && limit > bc->cap)
        limit = bc->cap;
    return limit;
}

int keg_fs_mem_stats(struct keg_fs *fs, struct keg_fs_mem_stats *st)
{
    struct fs_bcache *bc = fs->bc;
    memset(st, 0, sizeof(*st));
    st->budget = fs->buffer_size;
    st->write_bytes = atomic_load_explicit(&fs->wbytes, memory_order_relaxed);
    if (bc) {
        st->read_bytes = fs_bcache_used(bc);
        st->read_limit = bc_limit(bc);
        st->read_floor = bc->floor;
        st->read_cap = bc->cap;
        st->read_hits = atomic_load_explicit(&bc->hits, memory_order_relaxed);
        st->read_misses = atomic_load_explicit(&bc->misses, memory_order_relaxed);
        st->read_prefetched = atomic_load_explicit(&bc->prefetched, memory_order_relaxed);
        st->read_evicted = atomic_load_explicit(&bc->evicted, memory_order_relaxed);
        st->read_dropped = atomic_load_explicit(&bc->dropped, memory_order_relaxed);
    }
    return 0;
}

/* 1 while writers hold all of the budget but the floor. */
static int bc_pressed(const struct fs_bcache *bc)
{
    return bc_wbytes(bc) + bc->floor >= bc->budget;
}

/* A buffer of size bytes for a fetch.  A whole encoded block (the size of
 * the fs's whole-block buffers) takes an idle one: a fresh allocation of a
 * block is a fresh mmap (the mounter lowers the mmap threshold to bound its
 * RSS), so every fetch into it would pay a page fault and a page clear per
 * 4 KiB.  OWNERSHIP: caller releases it with bc_buf_release (or keg_free).
 * LOCKS: may take fs->bigbuf_mu. */
static uint8_t *bc_buf_take(struct fs_bcache *bc, size_t size)
{
    if (bc->fs && size == bc->fs->bigbuf_size)
        return fs_bigbuf_get(bc->fs);
    return keg_malloc(size);
}

/* Frees buf (size bytes), or gives a whole-block buffer back to the fs's idle
 * ones unless writers hold the budget (bc_pressed).  TAKES: buf (NULL is a
 * no-op).  LOCKS: caller holds bc->mu; may take fs->bigbuf_mu. */
static void bc_buf_release_locked(struct fs_bcache *bc, uint8_t *buf, size_t size)
{
    if (bc->fs && size == bc->fs->bigbuf_size && !bc_pressed(bc))
        fs_bigbuf_put(bc->fs, buf);
    else
        keg_free(buf);
}

/* bc_buf_release_locked without the lock held.  LOCKS: takes bc->mu. */
static void bc_buf_release(struct fs_bcache *bc, uint8_t *buf, size_t size)
{
    if (!buf)
        return;
    pthread_mutex_lock(&bc->mu);
    bc_buf_release_locked(bc, buf, size);
    pthread_mutex_unlock(&bc->mu);
}

static size_t bc_hash(uint64_t id, uint32_t indx)
{
    uint64_t x = (id * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)indx * 0xC2B2AE3D27D4EB4FULL);
    return (size_t)(x >> 32) % BC_BUCKETS;
}

static void lru_unlink(struct bc_ent *e)
{
    e->lprev->lnext = e->lnext;
    e->lnext->lprev = e->lprev;
    e->lprev = e->lnext = NULL;
}

/* Link e into the LRU after prev (&bc->lru: the MRU head). */
static void lru_link(struct bc_ent *prev, struct bc_ent *e)
{
    e->lnext = prev->lnext;
    e->lprev = prev;
    prev->lnext->lprev = e;
    prev->lnext = e;
}

static void lru_push(struct fs_bcache *bc, struct bc_ent *e)
{
    lru_link(&bc->lru, e);
}

static void hash_unlink(struct fs_bcache *bc, struct bc_ent *e)
{
    struct bc_ent **pp = &bc->h[bc_hash(e->id, e->indx)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    e->hashed = 0;
}

/* The entry of block indx of slice id, or NULL.  LOCKS: bc->mu held. */
static struct bc_ent *bc_lookup(struct fs_bcache *bc, uint64_t id, uint32_t indx)
{
    struct bc_ent *e = bc->h[bc_hash(id, indx)];
    while (e && (e->id != id || e->indx != indx))
        e = e->hnext;
    return e;
}

/* Remove the unreferenced READY entry e and free it (its buffer may go back
 * to the idle whole-block buffers).  LOCKS: bc->mu held. */
static void bc_free_ready(struct fs_bcache *bc, struct bc_ent *e)
{
    lru_unlink(e);
    hash_unlink(bc, e);
    atomic_fetch_sub_explicit(&bc->used, e->len, memory_order_relaxed);
    bc_buf_release_locked(bc, e->base, e->base_size);
    keg_free(e);
}

/* Evict unreferenced entries from the LRU tail until the read share is
 * within bc_limit().  LOCKS: bc->mu held. */
static void bc_evict(struct fs_bcache *bc)
{
    uint64_t limit = bc_limit(bc);
    struct bc_ent *e = bc->lru.lprev;

    if (bc->fs && bc_pressed(bc))
        fs_bigbuf_drop(bc->fs);     /* writers need the memory more */
    while (atomic_load_explicit(&bc->used, memory_order_relaxed) > limit && e != &bc->lru) {
        struct bc_ent *prev = e->lprev;
        if (e->refs == 0) {
            bc_free_ready(bc, e);
            atomic_fetch_add_explicit(&bc->evicted, 1, memory_order_relaxed);
        }
        e = prev;
    }
}

void fs_bcache_trim(struct fs_bcache *bc)
{
    /* the common case, unlocked: reads and writes fit in the budget */
    if (fs_bcache_used(bc) + bc_wbytes(bc) <= bc->budget)
        return;
    pthread_mutex_lock(&bc->mu);
    bc_evict(bc);
    pthread_mutex_unlock(&bc->mu);
}

static void bc_put(struct fs_bcache *bc, struct bc_ent *e)
{
    pthread_mutex_lock(&bc->mu);
    KEG_ASSERT(e->refs > 0);
    e->refs--;
    if (e->refs == 0 && !e->hashed) {
        bc_buf_release_locked(bc, e->base, e->base_size);
        keg_free(e);
    } else if (e->refs == 0) {
        bc_evict(bc);
    }
    pthread_mutex_unlock(&bc->mu);
}

/* Fetch, verify and decode block indx (blen bytes) of slice id.  A block of
 * codec none (the default) is verified where it was fetched and kept there:
 * its raw bytes are the payload, keg_block_hdr_len() bytes into the buffer.  A
 * compressed one is decoded into a second buffer and the fetched one freed.
 * OWNERSHIP: *base (*base_size bytes) is the caller's (bc_buf_release);
 * *data points at the blen raw bytes inside it.  NULL and 0 on failure. */
static int block_fetch(struct keg_fs *fs, uint64_t id, uint32_t indx, uint32_t blen,
                       uint8_t **base, size_t *base_size, uint8_t **data)
{
    char key[256];
    size_t cap = keg_block_bound(KEG_CODEC_NONE, blen);
    uint8_t *enc = NULL;
    uint8_t *raw = NULL;        /* decoded copy, compressed blocks only */
    int64_t t0 = keg_mono_ns();
    unsigned bad = 0;           /* reads that failed verification */
    int decoded = 0;            /* the good read was decoded into raw */
    struct keg_block_id bid = fs_block_id(fs, id, indx, blen);
    size_t olen = 0;
    ssize_t n;
    int rc = 0;

    *base = NULL;
    *base_size = 0;
    *data = NULL;
    cap = KEG_MAX(cap, keg_block_bound(KEG_CODEC_LZ4, blen));
    cap = KEG_MAX(cap, keg_block_bound(KEG_CODEC_ZSTD, blen));
    keg_block_key(key, sizeof(key), fs->fmt.name, id, indx, blen);
    enc = bc_buf_take(fs->bc, cap);
    if (!enc) {
        rc = -ENOMEM;
        goto out;
    }
    for (;;) {
        n = keg_obj_get(fs->obj, key, 0, enc, cap);
        if (n == -ENOENT) {
            rc = -ENOENT;       /* logged by the reader if its layout is current */
            goto out;
        }
        if (n < 0) {
            /* the store retried what was worth retrying (obj_retry.c, obj_s3.c) */
            KEG_ERR("reading block %s failed: %s (after %lld ms)", key, strerror((int)-n),
                    (long long)((keg_mono_ns() - t0) / 1000000));
            rc = -EIO;          /* any failure of a read is EIO (never ENOENT etc.) */
            goto out;
        }
        olen = (size_t)n;
        n = keg_block_decode_inplace(enc, olen, &bid, blen);
        decoded = n == -ENOTSUP;
        if (decoded) {
            if (!raw)
                raw = keg_malloc(blen ? blen : 1);
            if (!raw) {
                rc = -ENOMEM;
                goto out;
            }
            n = keg_block_decode(enc, olen, &bid, raw, blen);
        }
        if (n == (ssize_t)blen)
            break;
        /* A torn or damaged transfer reads differently next time; a block
         * damaged at rest does not: a few tries, then EIO. */
        if (++bad > FS_FETCH_CORRUPT_RETRIES) {
            char why[160];
            KEG_ERR("block %s is corrupt (%s; %u reads)", key,
                    keg_block_why(enc, olen, &bid, why, sizeof(why)), bad);
            rc = -EIO;
            goto out;
        }
        KEG_WARN("block %s failed verification (read %u); reading it again", key, bad);
    }
    if (decoded) {
        *base = *data = raw;
        *base_size = blen ? blen : 1;
        raw = NULL;
    } else {
        *base = enc;
        *base_size = cap;
        *data = enc + keg_block_hdr_len(enc);
        enc = NULL;
    }
out:
    bc_buf_release(fs->bc, enc, cap);
    keg_free(raw);
    return rc;
}

/* A referenced READY entry for the block, fetching it on a miss (one fetch
 * per block however many readers miss at once).  prefetch: if the block is
 * cached or being fetched, return -EEXIST at once (no reference, no wait).
 * OWNERSHIP: caller drops *out with bc_put(). */
static int bc_get_mode(struct keg_fs *fs, uint64_t id, uint32_t indx, uint32_t blen,
                       int prefetch, struct bc_ent **out)
{
    struct fs_bcache *bc = fs->bc;
    struct bc_ent *e;
    uint8_t *base = NULL, *data = NULL;
    size_t base_size = 0;
    int rc;

    *out = NULL;
    pthread_mutex_lock(&bc->mu);
    e = bc_lookup(bc, id, indx);
    if (e && prefetch) {
        /* cached or being fetched: a prefetch never waits */
        pthread_mutex_unlock(&bc->mu);
        return -EEXIST;
    }
    if (e) {
        atomic_fetch_add_explicit(&bc->hits, 1, memory_order_relaxed);
        e->refs++;
        while (e->state == BC_LOADING)
            pthread_cond_wait(&bc->cv, &bc->mu);
        if (e->state == BC_FAILED) {
            rc = e->err;
            pthread_mutex_unlock(&bc->mu);
            bc_put(bc, e);
            return rc;
        }
        if (e->len != blen) {
            /* the same block referenced with another length: corrupt metadata */
            uint32_t have = e->len;
            pthread_mutex_unlock(&bc->mu);
            bc_put(bc, e);
            KEG_ERR("slice %llu block %u: length %u does not match cached %u",
                    (unsigned long long)id, indx, blen, have);
            return -EIO;
        }
        lru_unlink(e);
        lru_push(bc, e);
        pthread_mutex_unlock(&bc->mu);
        *out = e;
        return 0;
    }
    e = keg_calloc(1, sizeof(*e));
    if (!e) {
        pthread_mutex_unlock(&bc->mu);
        return -ENOMEM;
    }
    atomic_fetch_add_explicit(prefetch ? &bc->prefetched : &bc->misses, 1, memory_order_relaxed);
    e->id = id;
    e->indx = indx;
    e->len = blen;
    e->state = BC_LOADING;
    e->refs = 1;
    e->hashed = 1;
    struct bc_ent **head = &bc->h[bc_hash(id, indx)];
    e->hnext = *head;
    *head = e;
    pthread_mutex_unlock(&bc->mu);

    rc = block_fetch(fs, id, indx, blen, &base, &base_size, &data);

    pthread_mutex_lock(&bc->mu);
    if (rc == 0) {
        e->base = base;
        e->base_size = base_size;
        e->data = data;
        e->state = BC_READY;
        atomic_fetch_add_explicit(&bc->used, blen, memory_order_relaxed);
        lru_push(bc, e);
        bc_evict(bc);
    } else {
        e->state = BC_FAILED;
        e->err = rc;
        hash_unlink(bc, e);
    }
    pthread_cond_broadcast(&bc->cv);
    pthread_mutex_unlock(&bc->mu);
    if (rc < 0) {
        bc_put(bc, e);
        return rc;
    }
    *out = e;
    return 0;
}

static int bc_get(struct keg_fs *fs, uint64_t id, uint32_t indx, uint32_t blen,
                  struct bc_ent **out)
{
    return bc_get_mode(fs, id, indx, blen, 0, out);
}

/* 1 if block indx of slice id is in the cache (READY or LOADING). */
static int bc_has(struct fs_bcache *bc, uint64_t id, uint32_t indx)
{
    struct bc_ent *e;
    pthread_mutex_lock(&bc->mu);
    e = bc_lookup(bc, id, indx);
    pthread_mutex_unlock(&bc->mu);
    return e != NULL;
}

int fs_read_slice(struct keg_fs *fs, uint64_t id, uint32_t size, uint32_t sa, uint32_t sb,
                  uint8_t *dst, int quiet)
{
    uint32_t bs = fs->bs;
    if ((uint64_t)sb > (uint64_t)size) {
        KEG_ERR("slice %llu: reference past its size %u", (unsigned long long)id, size);
        return -EIO;
    }
    for (uint32_t i = sa / bs; (uint64_t)i * bs < sb; i++) {
        uint64_t b0 = (uint64_t)i * bs;
        uint32_t blen = fs_block_len(bs, size, i);
        uint32_t from = (uint32_t)(KEG_MAX((uint64_t)sa, b0) - b0);
        uint32_t to = (uint32_t)(KEG_MIN((uint64_t)sb, b0 + blen) - b0);
        struct bc_ent *e = NULL;
        int rc = bc_get(fs, id, i, blen, &e);
        if (rc == -ENOENT && !quiet) {
            char key[256];
            keg_block_key(key, sizeof(key), fs->fmt.name, id, i, blen);
            KEG_ERR("block %s is missing from the object store", key);
            rc = -EIO;
        }
        if (rc < 0)
            return rc;
        memcpy(dst, e->data + from, to - from);
        dst += to - from;
        bc_put(fs->bc, e);
    }
    return 0;
}

/*----------------------------------------------------------------------------
 * Fetch pool: read-ahead and parallel block fetches
 *--------------------------------------------------------------------------*/

struct fs_fetchjob {
    struct fs_job  job;         /* MUST be first */
    struct keg_fs *fs;
    uint64_t       id;
    uint32_t       indx;
    uint32_t       blen;
};

static void fetch_run(struct fs_job *j)
{
    struct fs_fetchjob *f = (struct fs_fetchjob *)j;
    struct bc_ent *e = NULL;
    /* errors are not reported: the reader fetches (and logs) itself */
    if (bc_get_mode(f->fs, f->id, f->indx, f->blen, 1, &e) == 0)
        bc_put(f->fs->bc, e);
    keg_free(f);
}

int fs_fetch_start(struct keg_fs *fs)
{
    fs_pool_stop(&fs->fetch_pool);
    fs_pool_destroy(&fs->fetch_pool);
    return fs_pool_start(&fs->fetch_pool, "fetch", FS_FETCH_THREADS, FS_FETCH_QUEUE);
}

void fs_fetch_stop(struct keg_fs *fs)
{
    fs_pool_stop(&fs->fetch_pool);
}

/* Queue a fetch of one block unless cached.  Returns 0, or -EAGAIN when the
 * pool is full or has no threads, or the read share is down to its floor
 * (then the caller stops queueing). */
static int fetch_one(struct keg_fs *fs, uint64_t id, uint32_t indx, uint32_t blen)
{
    struct fs_fetchjob *f;
    if (bc_pressed(fs->bc))
        return -EAGAIN;         /* writers leave the cache its floor only */
    if (bc_has(fs->bc, id, indx))
        return 0;
    f = keg_calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->job.fn = fetch_run;
    f->fs = fs;
    f->id = id;
    f->indx = indx;
    f->blen = blen;
    if (fs_pool_submit(&fs->fetch_pool, &f->job, 0) < 0) {
        keg_free(f);
        return -EAGAIN;
    }
    return 0;
}

/* The slice bytes [*sa, *sb) that data segment s shows in chunk range
 * [cfrom, cto): 1, or 0 for a hole, no overlap, or a reference past the
 * slice's end (corrupt: the read reports it). */
static int seg_slice_range(const struct fs_seg *s, uint32_t cfrom, uint32_t cto, uint32_t *sa,
                           uint32_t *sb)
{
    uint32_t a = KEG_MAX(s->pos, cfrom);
    uint32_t b = (uint32_t)KEG_MIN((uint64_t)s->pos + s->len, (uint64_t)cto);
    if (s->id == 0 || a >= b)
        return 0;
    *sa = s->soff + (a - s->pos);
    *sb = s->soff + (b - s->pos);
    return *sb <= s->size;
}

/* Queue fetches for the blocks behind chunk bytes [cfrom, cto) given the
 * segments segs (which cover at least that range); the first `skip` blocks
 * are left to the caller.  *budget limits the jobs queued.  Returns 0 or
 * -EAGAIN (pool full: stop). */
static int fetch_segs(struct keg_fs *fs, const struct fs_seg *segs, size_t n, uint32_t cfrom,
                      uint32_t cto, unsigned *skip, unsigned *budget)
{
    uint32_t bs = fs->bs;
    for (size_t k = 0; k < n; k++) {
        const struct fs_seg *s = &segs[k];
        uint32_t sa, sb;
        if (!seg_slice_range(s, cfrom, cto, &sa, &sb))
            continue;
        for (uint32_t i = sa / bs; (uint64_t)i * bs < sb; i++) {
            if (*skip > 0) {
                (*skip)--;
                continue;
            }
            if (*budget == 0)
                return -EAGAIN;
            (*budget)--;
            if (fetch_one(fs, s->id, i, fs_block_len(bs, s->size, i)) == -EAGAIN)
                return -EAGAIN;
        }
    }
    return 0;
}

/* Segments of chunk indx overlapping [cfrom, cto) (copied out under ip->mu).
 * OWNERSHIP: if *segs != local the caller keg_free()s it. */
static int chunk_segs(struct keg_fs *fs, struct fs_inode *ip, uint32_t indx, uint32_t cfrom,
                      uint32_t cto, struct fs_seg *local, struct fs_seg **segs, size_t *n)
{
    struct fs_chunk *ch = NULL;
    size_t lo = 0;
    size_t hi;
    size_t k;
    int rc;

    *segs = local;
    *n = 0;
    pthread_mutex_lock(&ip->mu);
    rc = fs_inode_chunk(fs, ip, indx, &ch);
    if (rc < 0)
        goto out;
    hi = ch->nseg;
    while (lo < hi) {       /* first segment ending after cfrom */
        size_t mid = (lo + hi) / 2;
        if ((uint64_t)ch->seg[mid].pos + ch->seg[mid].len <= cfrom)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (k = lo; k < ch->nseg && ch->seg[k].pos < cto; k++)
        ;
    if (k - lo > FS_READ_LOCAL_SEGS) {
        *segs = keg_malloc((k - lo) * sizeof(**segs));
        if (!*segs) {
            *segs = local;
            rc = -ENOMEM;
            goto out;
        }
    }
    memcpy(*segs, ch->seg + lo, (k - lo) * sizeof(**segs));
    *n = k - lo;
out:
    pthread_mutex_unlock(&ip->mu);
    return rc;
}

ssize_t fs_read_range(struct keg_fs *fs, struct fs_inode *ip, uint64_t off, void *buf,
                      size_t size)
{
    uint8_t *out = buf;
    uint64_t fsize;
    size_t done = 0;
    unsigned attempt = 0;       /* reloads after a missing block */
    int64_t deadline = 0;       /* monotonic ns: stop waiting for missing blocks */
    int rc = 0;

    pthread_mutex_lock(&ip->mu);
    fsize = ip->size;
    pthread_mutex_unlock(&ip->mu);
    if (off + size > fsize) {
        /* near EOF: the file may have grown elsewhere; refresh once */
        struct keg_attr a;
        rc = keg_meta_getattr(fs->meta, ip->ino, &a);
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&ip->mu);
        fs_inode_set_attr(ip, &a);
        pthread_mutex_unlock(&ip->mu);
        fsize = a.size;
    }
    if (off >= fsize)
        return 0;
    size = (size_t)KEG_MIN((uint64_t)size, fsize - off);

    while (done < size) {
        uint64_t p = off + done;
        uint32_t indx = (uint32_t)(p / KEG_CHUNK_SIZE);
        uint64_t base = (uint64_t)indx * KEG_CHUNK_SIZE;
        uint32_t cfrom = (uint32_t)(p - base);
        uint32_t cto = (uint32_t)KEG_MIN((uint64_t)KEG_CHUNK_SIZE, cfrom + (uint64_t)(size - done));
        struct fs_seg local[FS_READ_LOCAL_SEGS];
        struct fs_seg *segs = NULL;
        unsigned skip = 1;
        unsigned budget = FS_FETCH_MAX_JOBS;
        size_t n = 0;
        /* the last try reports a missing block (EIO, logged with its key) */
        int last = attempt > 0 && (!deadline || keg_mono_ns() >= deadline);

        rc = chunk_segs(fs, ip, indx, cfrom, cto, local, &segs, &n);
        if (rc < 0)
            return rc;
        /* several blocks: fetch all but the first in parallel */
        fetch_segs(fs, segs, n, cfrom, cto, &skip, &budget);
        for (size_t k = 0; k < n && rc == 0; k++) {
            const struct fs_seg *s = &segs[k];
            uint32_t a = KEG_MAX(s->pos, cfrom);
            uint32_t b = (uint32_t)KEG_MIN((uint64_t)s->pos + s->len, (uint64_t)cto);
            uint8_t *dst = out + (base + a - off);
            if (s->id == 0)
                memset(dst, 0, b - a);
            else
                rc = fs_read_slice(fs, s->id, s->size, s->soff + (a - s->pos),
                                   s->soff + (b - s->pos), dst, !last);
        }
        if (segs != local)
            keg_free(segs);
        if (rc == -ENOENT && !last) {
            /* A referenced block is missing.  First: the layout may be stale
             * (compacted or rewritten elsewhere): reload at once.  Then, when
             * configured, wait with backoff: a writeback mounter elsewhere
             * commits slices whose blocks are still in its staging area. */
            if (attempt == 0) {
                KEG_DEBUG("inode %llu: block missing, reloading chunk %u",
                          (unsigned long long)ip->ino, indx);
                if (fs->missing_wait_ms)
                    deadline = keg_mono_ns() + (int64_t)fs->missing_wait_ms * 1000000;
            } else {
                int64_t left = deadline - keg_mono_ns();
                int64_t nap = (int64_t)100000000 << KEG_MIN(attempt - 1, 4u);  /* 0.1..1.6 s */
                if (attempt == 1)
                    KEG_WARN("inode %llu: a block of chunk %u is not in the object store yet "
                             "(staged on another mounter?); waiting up to %u ms",
                             (unsigned long long)ip->ino, indx, fs->missing_wait_ms);
                nap = KEG_MIN(nap, KEG_MAX(left, (int64_t)0));
                keg_sleep_ns(nap);
            }
            pthread_mutex_lock(&ip->mu);
            fs_inode_drop_chunks(ip);
            pthread_mutex_unlock(&ip->mu);
            attempt++;
            rc = 0;
            continue;
        }
        if (rc < 0)
            return rc;
        done += cto - cfrom;
    }
    return (ssize_t)size;
}

/* Calls fn(fs, segs, n, cfrom, cto, arg) for each chunk of file range
 * [from, to) with the chunk's segments overlapping [cfrom, cto), in file
 * order, until fn returns < 0 (or the layout cannot be loaded). */
typedef int (*chunk_fn)(struct keg_fs *fs, const struct fs_seg *segs, size_t n, uint32_t cfrom,
                        uint32_t cto, void *arg);

static void each_chunk(struct keg_fs *fs, struct fs_inode *ip, uint64_t from, uint64_t to,
                       chunk_fn fn, void *arg)
{
    while (from < to) {
        uint32_t indx = (uint32_t)(from / KEG_CHUNK_SIZE);
        uint64_t base = (uint64_t)indx * KEG_CHUNK_SIZE;
        uint32_t cfrom = (uint32_t)(from - base);
        uint32_t cto = (uint32_t)KEG_MIN((uint64_t)KEG_CHUNK_SIZE, to - base);
        struct fs_seg local[FS_READ_LOCAL_SEGS];
        struct fs_seg *segs = NULL;
        size_t n = 0;
        int rc = chunk_segs(fs, ip, indx, cfrom, cto, local, &segs, &n);
        if (rc == 0)
            rc = fn(fs, segs, n, cfrom, cto, arg);
        if (segs != local)
            keg_free(segs);
        if (rc < 0)
            return;
        from = base + cto;
    }
}

static int prefetch_segs(struct keg_fs *fs, const struct fs_seg *segs, size_t n, uint32_t cfrom,
                         uint32_t cto, void *budget)
{
    unsigned skip = 0;
    return fetch_segs(fs, segs, n, cfrom, cto, &skip, budget);
}

/* Queue fetches of the blocks of file range [from, to) (clipped to the size). */
static void prefetch_range(struct keg_fs *fs, struct fs_inode *ip, uint64_t from, uint64_t to)
{
    unsigned budget = 2 * FS_RA_MAX_BLOCKS;
    uint64_t fsize;

    pthread_mutex_lock(&ip->mu);
    fsize = ip->size;
    pthread_mutex_unlock(&ip->mu);
    each_chunk(fs, ip, from, KEG_MIN(to, fsize), prefetch_segs, &budget);
}

/* Drop-behind: give back the cache entry of block indx of slice id, which
 * a sequential reader has finished.  An unreferenced READY entry is freed at
 * once (its buffer goes back to the fs's idle whole-block buffers, for the
 * reader's next fetch); a referenced one (another reader is copying it) is
 * only moved to the LRU tail, to be evicted first.  LOCKS: takes bc->mu. */
static void bc_drop(struct fs_bcache *bc, uint64_t id, uint32_t indx)
{
    struct bc_ent *e;
    pthread_mutex_lock(&bc->mu);
    e = bc_lookup(bc, id, indx);
    if (e && e->state == BC_READY && e->refs == 0) {
        bc_free_ready(bc, e);
        atomic_fetch_add_explicit(&bc->dropped, 1, memory_order_relaxed);
    } else if (e && e->state == BC_READY) {
        lru_unlink(e);
        lru_link(bc->lru.lprev, e);     /* the tail: evicted first */
    }
    pthread_mutex_unlock(&bc->mu);
}

/* Drop the cached blocks whose visible bytes all lie in chunk range
 * [cfrom, cto) (segs cover it): a block that also shows bytes outside it is
 * kept.  A chunk_fn. */
static int drop_segs(struct keg_fs *fs, const struct fs_seg *segs, size_t n, uint32_t cfrom,
                     uint32_t cto, void *arg)
{
    uint32_t bs = fs->bs;
    (void)arg;
    for (size_t k = 0; k < n; k++) {
        const struct fs_seg *s = &segs[k];
        uint32_t sa, sb;
        if (!seg_slice_range(s, cfrom, cto, &sa, &sb))
            continue;
        for (uint32_t i = sa / bs; (uint64_t)i * bs < sb; i++) {
            uint64_t b0 = (uint64_t)i * bs;
            uint64_t va = KEG_MAX(b0, (uint64_t)s->soff);
            uint64_t vb = KEG_MIN(b0 + fs_block_len(bs, s->size, i), (uint64_t)s->soff + s->len);
            if (va >= sa && vb <= sb)
                bc_drop(fs->bc, s->id, i);
        }
    }
    return 0;
}

/* Sequential detection per handle; issues read-ahead after a read of
 * [off, off+n).  Reads arriving a little out of order (the kernel sends
 * several at once) still count as sequential.  A steady sequential reader
 * (full window) also drops the blocks it finished, more than
 * FS_DROP_BEHIND bytes and its current block behind it (see DESIGN). */
static void readahead(struct keg_fs *fs, struct keg_fh *fh, uint64_t off, size_t n)
{
    uint64_t slack;
    uint64_t from = 0;
    uint64_t to = 0;
    uint64_t dfrom = 0;
    uint64_t dto = 0;

    pthread_mutex_lock(&fh->ra_mu);
    /* The kernel's own read-ahead keeps several FUSE reads in flight, and
     * the threads answering them overtake each other by up to its window (4
     * MiB by default).  A random reader must not look sequential, so the
     * tolerance is small until the reader was sequential, then grows with
     * the window. */
    slack = KEG_MAX((uint64_t)256 << 10, (uint64_t)fh->ra_win * fs->bs);
    if (off + slack >= fh->ra_next && off <= fh->ra_next + slack) {
        fh->ra_win = fh->ra_win ? KEG_MIN(fh->ra_win * 2, FS_RA_MAX_BLOCKS) : 1;
    } else {
        fh->ra_win = 0;
        fh->ra_upto = 0;
        fh->ra_dropped = off - off % fs->bs;
    }
    if (off + n > fh->ra_next || fh->ra_win == 0)
        fh->ra_next = off + n;
    if (fh->ra_win > 0) {
        /* whole blocks, each requested once */
        from = KEG_MAX(fh->ra_upto, fh->ra_next);
        to = (fh->ra_next / fs->bs + fh->ra_win) * (uint64_t)fs->bs;
        if (to > from)
            fh->ra_upto = to;
    }
    if (fh->ra_win == FS_RA_MAX_BLOCKS && fh->ra_next > FS_DROP_BEHIND + fs->bs) {
        /* at most span per call: a reader moves by one request (1 MiB, or
         * the window when it skips ahead) */
        uint64_t span = KEG_MAX((uint64_t)FS_DROP_BEHIND, FS_RA_MAX_BLOCKS * (uint64_t)fs->bs);
        dto = fh->ra_next - FS_DROP_BEHIND - fs->bs;
        dto -= dto % fs->bs;
        dfrom = KEG_MAX(fh->ra_dropped, dto > span ? dto - span : 0);
        if (dto > fh->ra_dropped)
            fh->ra_dropped = dto;
    }
    pthread_mutex_unlock(&fh->ra_mu);
    if (dto > dfrom)
        each_chunk(fs, fh->ip, dfrom, dto, drop_segs, NULL);    /* first: its buffers serve the fetches */
    if (to > from)
        prefetch_range(fs, fh->ip, from, to);
}

ssize_t keg_fs_read(struct keg_fs *fs, struct keg_fh *fh, uint64_t off, void *buf, size_t size)
{
    struct fs_inode *ip = fh->ip;
    ssize_t n;
    int dirty;

    if (size == 0)
        return 0;
    pthread_mutex_lock(&ip->mu);
    dirty = ip->wfirst != NULL;
    pthread_mutex_unlock(&ip->mu);
    if (dirty)
        fs_flush_inode(fs, ip, 0);      /* errors stay deferred for flush/fsync */
    n = fs_read_range(fs, ip, off, buf, size);
    /* A short read tells the kernel where the file ends.  If another thread
     * buffered a write past that point meanwhile, commit it and read again,
     * so that the kernel does not shrink the file it just extended. */
    for (int tries = 0; n >= 0 && (size_t)n < size && tries < 3; tries++) {
        pthread_mutex_lock(&ip->mu);
        dirty = ip->wfirst != NULL && (ip->wend > off + (uint64_t)n || ip->wappend > 0);
        pthread_mutex_unlock(&ip->mu);
        if (!dirty)
            break;
        fs_flush_inode(fs, ip, 0);
        n = fs_read_range(fs, ip, off, buf, size);
    }
    if (n > 0)
        readahead(fs, fh, off, (size_t)n);
    return n;
}

int keg_fs_read_pin(struct keg_fs *fs, struct keg_fh *fh, uint64_t off, size_t size,
                    const void **data, void **pin)
{
    struct fs_inode *ip = fh->ip;
    struct fs_seg local[FS_READ_LOCAL_SEGS];
    struct fs_seg *segs = NULL;
    struct bc_ent *e = NULL;
    size_t n = 0;
    int dirty, rc;
    uint64_t fsize;

    *data = NULL;
    *pin = NULL;
    if (size == 0 || size > fs->bs)
        return 0;
    pthread_mutex_lock(&ip->mu);
    dirty = ip->wfirst != NULL;
    fsize = ip->size;
    pthread_mutex_unlock(&ip->mu);
    /* buffered writes, or a read reaching the (cached) end: keg_fs_read
     * commits, refreshes the size and answers short reads */
    if (dirty || off + size > fsize)
        return 0;
    uint32_t indx = (uint32_t)(off / KEG_CHUNK_SIZE);
    uint32_t cfrom = (uint32_t)(off - (uint64_t)indx * KEG_CHUNK_SIZE);
    if ((uint64_t)cfrom + size > KEG_CHUNK_SIZE)
        return 0;
    uint32_t cto = cfrom + (uint32_t)size;
    rc = chunk_segs(fs, ip, indx, cfrom, cto, local, &segs, &n);
    if (rc < 0)
        return rc;
    rc = 0;
    if (n == 1 && segs[0].id != 0 && segs[0].pos <= cfrom &&
        (uint64_t)segs[0].pos + segs[0].len >= cto) {
        const struct fs_seg *sg = &segs[0];
        uint32_t a = sg->soff + (cfrom - sg->pos);      /* in the slice */
        uint32_t i = a / fs->bs;
        uint64_t b0 = (uint64_t)i * fs->bs;
        uint32_t blen = fs_block_len(fs->bs, sg->size, i);
        /* one block of the slice holds all of it */
        if ((uint64_t)a + size <= b0 + blen && (uint64_t)a + size <= sg->size) {
            rc = bc_get(fs, sg->id, i, blen, &e);
            if (rc == -ENOENT)
                rc = 0;     /* keg_fs_read reloads the layout, waits, reports */
            else if (rc == 0) {
                *data = e->data + (a - b0);
                *pin = e;
                rc = 1;
            }
        }
    }
    if (segs != local)
        keg_free(segs);
    if (rc == 1)
        readahead(fs, fh, off, size);
    return rc;
}

void keg_fs_read_unpin(struct keg_fs *fs, void *pin)
{
    if (pin)
        bc_put(fs->bc, pin);
}
