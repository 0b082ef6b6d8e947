/* compact.c -- background compaction: a fragmented chunk becomes one slice.
 *
 * DESIGN
 * Many small writes leave a chunk with a long slice list: every read then
 * computes the layout over all of them and touches many small blocks.  When a
 * commit reports (write_slices' *nslices) or a read finds (fs_inode_chunk) a
 * chunk with more than FS_COMPACT_THRESHOLD slices, the chunk is queued here.
 * One worker thread compacts queued chunks one at a time (so at most one
 * compaction per inode, and per volume, in this process):
 *
 *   1. read_chunk: the slice list L as it is now (n entries);
 *   2. fs_layout(L): the visible segments; data spans [lo, hi) of the chunk;
 *   3. a new slice id; its blocks are the visible bytes of [lo, hi), read
 *      through the block cache (CRC-verified) one block at a time, interior
 *      holes as zeros, and put to the store (memory: one block);
 *   4. compact_chunk(ino, indx, L, n, repl = {id, pos lo, len hi - lo}): the
 *      engine replaces exactly those n entries, keeping any appended since;
 *      the old slices lose a reference, and those left with none go to the
 *      deletion queue, whose blocks the deleter removes.
 *
 * Policy (step 2b, background compactions only; fs_compact_chunk always
 * merges the whole list).  First the newest tier (tier_split): walking back
 * from the newest slice, an older one joins while it is no longer than all
 * those after it together.  If that tier has two or more slices, does not
 * reach the first one, holds no hole and its span [lo, hi) is at most
 * FS_CMP_AMP x its bytes, only the tier is merged: the new slice holds the
 * visible bytes of [lo, hi) and replaces the tier's entries, the slices
 * before it stay (compact_chunk's keep).  An append loop then rewrites each
 * byte about once per tier it climbs, like a binary counter, and no merge
 * rewrites the big slices of earlier merges: before, every merge rewrote
 * the whole file from offset 0, a burst of megabytes (and a Redis script
 * over hundreds of slices) that stalled the appends behind it.
 * Otherwise the merge rewrites the whole visible range [lo, hi) of the list.
 * So that this stays
 * amortised O(1) per byte written (appends would otherwise rewrite the chunk
 * from offset 0 every FS_COMPACT_THRESHOLD commits: quadratic), a chunk is
 * merged only when hi - lo <= FS_CMP_AMP x the bytes of the slices after the
 * first one (the bytes written since the last merge), or when it holds more
 * than FS_CMP_MAX_SLICES slices (bounds the list; the rewrite is at most a
 * chunk).  Each merge then costs at most FS_CMP_AMP times the bytes written
 * since the previous one.  A chunk that does not qualify is parked with the
 * slice count at which it may (estimated from the average slice length):
 * commits reporting fewer slices do not queue it again (fs_compact_queue_n),
 * so an append loop costs no read_chunk per commit.
 *
 * Ranges outside [lo, hi) are holes before and after (nothing covers them);
 * a chunk that is all holes is replaced by one hole covering the chunk.
 * If the chunk changed under us (-EAGAIN from the engine, or a block of an old
 * slice is gone because the chunk was rewritten and deleted) the new slice's
 * blocks are deleted and the chunk is retried later (at most
 * FS_CMP_MAX_ATTEMPTS times, with a growing delay).  Any other engine error
 * leaves the new blocks in place (the engine may have committed; kegfs gc
 * reclaims a leak, a dangling reference would lose data).
 *
 * Writers are never blocked: compaction holds no inode lock while it reads
 * and uploads; its only effect on this process is to drop the inode's cached
 * layouts after a successful replace (readers that still hold an old layout
 * meet a missing block, reload and retry: read.c).
 *
 * Queue: FIFO of at most FS_CMP_QUEUE_MAX chunks, deduplicated by (ino, indx);
 * a chunk queued while it is being compacted is compacted again afterwards.
 * Items: QUEUED (on cmp_head, maybe with a not-before time) -> RUNNING
 * (cmp_cur) -> freed, or back to QUEUED (retry / queued again meanwhile).
 * Invariant: cmp_n == length of cmp_head + (cmp_cur != NULL).
 */
#include <errno.h>
#include <string.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "fs_i.h"

#define FS_CMP_QUEUE_MAX    64
#define FS_CMP_MAX_ATTEMPTS 5
#define FS_CMP_RETRY_NS     (500LL * 1000000)
#define FS_CMP_AMP          4       /* a merge rewrites <= this x the bytes written since */
#define FS_CMP_MAX_SLICES   500     /* more slices than this: merged whatever it costs */
#define FS_CMP_PARK_MAX     64      /* parked chunks remembered (oldest forgotten) */
#define FS_CMP_DEFERRED     1       /* compact_one: not worth merging yet */

struct fs_cmp_item {
    struct fs_cmp_item *next;
    uint64_t            ino;
    uint32_t            indx;
    unsigned            attempts;   /* failed with -EAGAIN so far */
    int                 again;      /* queued again while running */
    int64_t             not_before; /* keg_mono_ns() */
    uint32_t            min_n;      /* parked: queue again at this many slices */
};

/*----------------------------------------------------------------------------
 * One compaction
 *--------------------------------------------------------------------------*/

/* Fill raw with the visible chunk bytes [from, from + len) given segs. */
static int fill_range(struct keg_fs *fs, const struct fs_seg *segs, size_t nseg, uint32_t from,
                      uint32_t len, uint8_t *raw)
{
    uint64_t to = (uint64_t)from + len;
    for (size_t k = 0; k < nseg; k++) {
        const struct fs_seg *s = &segs[k];
        uint64_t a = KEG_MAX((uint64_t)s->pos, (uint64_t)from);
        uint64_t b = KEG_MIN((uint64_t)s->pos + s->len, to);
        int rc;
        if (a >= b)
            continue;
        if (s->id == 0) {
            memset(raw + (a - from), 0, (size_t)(b - a));
            continue;
        }
        rc = fs_read_slice(fs, s->id, s->size, s->soff + (uint32_t)(a - s->pos),
                           s->soff + (uint32_t)(b - s->pos), raw + (a - from), 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Build the replacement slice for the visible data [lo, hi).  On failure the
 * blocks put so far are deleted.  Returns 0 or -errno (-ENOENT: a block of an
 * old slice is gone). */
static int write_repl(struct keg_fs *fs, const struct fs_seg *segs, size_t nseg, uint32_t lo,
                      uint32_t hi, uint64_t id)
{
    uint32_t size = hi - lo;
    uint32_t nblk = (uint32_t)(((uint64_t)size + fs->bs - 1) / fs->bs);
    uint8_t *raw = keg_malloc(KEG_MIN(size, fs->bs));
    int rc = 0;

    if (!raw)
        return -ENOMEM;
    for (uint32_t i = 0; i < nblk; i++) {
        uint32_t blen = fs_block_len(fs->bs, size, i);
        rc = fill_range(fs, segs, nseg, lo + i * fs->bs, blen, raw);
        if (rc == 0)
            rc = fs_put_block(fs, id, i, raw, blen, 0);
        if (rc < 0) {
            fs_delete_slice(fs, id, (uint32_t)KEG_MIN((uint64_t)(i + 1) * fs->bs, size));
            break;
        }
    }
    keg_free(raw);
    return rc;
}

/* The policy (DESIGN): 0 if the chunk should be merged now, else
 * FS_CMP_DEFERRED and *min_n = the slice count at which to look again.
 * cost = bytes a merge would write; sl[0] is the result of the last merge (or
 * the oldest write), the others were written since. */
static int worth_merging(const struct keg_slice *sl, size_t n, uint64_t cost, uint32_t *min_n)
{
    uint64_t fresh = 0;
    uint64_t avg;
    uint64_t extra;

    *min_n = 0;
    if (n > FS_CMP_MAX_SLICES)
        return 0;
    for (size_t k = 1; k < n; k++)
        fresh += sl[k].len;
    if (cost <= FS_CMP_AMP * fresh)
        return 0;
    /* each further slice of the average length adds >= AMP * avg - avg to
     * the budget when it appends, AMP * avg when it overwrites: look again
     * once the cheaper case could have closed the gap */
    avg = KEG_MAX(fresh / (n - 1), (uint64_t)1);
    extra = (cost - FS_CMP_AMP * fresh) / (FS_CMP_AMP * avg) + 1;
    *min_n = (uint32_t)KEG_MIN((uint64_t)n + extra, (uint64_t)FS_CMP_MAX_SLICES + 1);
    return FS_CMP_DEFERRED;
}

/* The tiered merge (DESIGN): walking back from the newest slice, an older
 * one joins while it is no longer than all those after it together.  Returns
 * how many slices stay in front, and sets the tier's span [*lo, *hi); 0 (lo,
 * hi untouched) when there is no tier worth merging on its own: fewer than
 * two slices, all of them, a hole among them, or a span over FS_CMP_AMP x
 * their bytes. */
static size_t tier_split(const struct keg_slice *sl, size_t n, uint32_t *lo, uint32_t *hi)
{
    uint64_t tail = 0;
    uint32_t a = UINT32_MAX;
    uint32_t b = 0;
    size_t j = n;

    while (j > 0 && (j == n || sl[j - 1].len <= tail)) {
        const struct keg_slice *s = &sl[j - 1];
        if (s->id == 0)
            return 0;
        tail += s->len;
        a = KEG_MIN(a, s->pos);
        b = KEG_MAX(b, s->pos + s->len);
        j--;
    }
    if (j == 0 || n - j < 2 || (uint64_t)(b - a) > FS_CMP_AMP * tail)
        return 0;
    *lo = a;
    *hi = b;
    return j;
}

/* One compaction (DESIGN).  force: merge whatever it costs.  Returns 0
 * (merged, or nothing to do), FS_CMP_DEFERRED (*min_n set), -EAGAIN or
 * -errno. */
static int compact_one(struct keg_fs *fs, uint64_t ino, uint32_t indx, int force,
                       uint32_t *min_n)
{
    struct keg_slice *sl = NULL;
    struct fs_seg *segs = NULL;
    struct keg_slice repl;
    size_t n = 0;
    size_t nseg = 0;
    size_t keep = 0;
    uint32_t lo = 0;
    uint32_t hi = 0;
    int have_data = 0;
    int rc;

    *min_n = 0;
    rc = keg_meta_read_chunk(fs->meta, ino, indx, &sl, &n);
    if (rc < 0)
        goto out;
    if (n <= 1)
        goto out;                       /* nothing to merge */
    rc = fs_layout(sl, n, 0, (uint32_t)KEG_CHUNK_SIZE, &segs, &nseg);
    if (rc < 0)
        goto out;
    for (size_t k = 0; k < nseg; k++) {
        if (segs[k].id == 0)
            continue;
        if (!have_data)
            lo = segs[k].pos;
        hi = segs[k].pos + segs[k].len;
        have_data = 1;
    }
    if (!force)
        keep = tier_split(sl, n, &lo, &hi);     /* > 0: merge the newest tier only */
    if (keep > 0) {
        have_data = 1;
    } else if (!force && worth_merging(sl, n, have_data ? hi - lo : 0, min_n) != 0) {
        KEG_DEBUG("inode %llu chunk %u: %zu slices, merging [%u, %u) not worth it yet "
                  "(again at %u slices)", (unsigned long long)ino, indx, n, lo, hi, *min_n);
        rc = FS_CMP_DEFERRED;
        goto out;
    }
    memset(&repl, 0, sizeof(repl));
    if (have_data) {
        rc = fs_alloc_slice(fs, &repl.id);
        if (rc < 0)
            goto out;
        repl.size = hi - lo;
        repl.len = hi - lo;
        repl.pos = lo;
        rc = write_repl(fs, segs, nseg, lo, hi, repl.id);
        if (rc == -ENOENT) {
            rc = -EAGAIN;               /* an old slice went away: the chunk changed */
            goto out;
        }
        if (rc < 0)
            goto out;
        /* The old slices may be durable (fsync'ed, or uploaded): the new one
         * must be before it replaces them, or a power loss after the commit
         * (and the deletion of the old blocks) could lose fsync'ed data. */
        {
            struct keg_del_slice r = {repl.id, repl.size};
            rc = fs_sync_slices(fs, &r, 1);
        }
        if (rc < 0) {
            KEG_WARN("compaction of inode %llu chunk %u: syncing the new slice failed: %s",
                     (unsigned long long)ino, indx, strerror(-rc));
            fs_delete_slice(fs, repl.id, repl.size);
            goto out;
        }
    } else {
        repl.size = (uint32_t)KEG_CHUNK_SIZE;   /* all holes: one hole */
        repl.len = (uint32_t)KEG_CHUNK_SIZE;
    }
    rc = keg_meta_compact_chunk(fs->meta, ino, indx, sl, n, keep, &repl);
    if (rc == -EAGAIN || rc == -ENOENT) {
        /* rewritten or deleted meanwhile: the new slice is not referenced */
        if (repl.id)
            fs_delete_slice(fs, repl.id, repl.size);
        rc = -EAGAIN;
        goto out;
    }
    if (rc < 0) {
        KEG_WARN("compaction of inode %llu chunk %u failed: %s", (unsigned long long)ino,
                 indx, strerror(-rc));
        goto out;
    }
    KEG_DEBUG("inode %llu chunk %u: %zu slices compacted into slice %llu [%u, %u), "
              "%zu kept before it", (unsigned long long)ino, indx, n - keep,
              (unsigned long long)repl.id, lo, hi, keep);
    pthread_mutex_lock(&fs->cmp_mu);
    fs->cmp_bytes += have_data ? hi - lo : 0;
    pthread_mutex_unlock(&fs->cmp_mu);
    {
        struct fs_inode *ip = fs_inode_find(fs, ino);
        if (ip) {
            pthread_mutex_lock(&ip->mu);
            fs_inode_drop_chunks(ip);
            pthread_mutex_unlock(&ip->mu);
            fs_inode_put(fs, ip);
        }
    }
    fs_kick_deleter(fs, FS_DEL_HOLD_CMP_NS); /* the deleter: old slices are queued */
out:
    keg_free(sl);
    keg_free(segs);
    return rc;
}

int fs_compact_chunk(struct keg_fs *fs, uint64_t ino, uint32_t indx)
{
    uint32_t min_n;
    return compact_one(fs, ino, indx, 1, &min_n);
}

/*----------------------------------------------------------------------------
 * Queue and worker
 *--------------------------------------------------------------------------*/

/* Remember that chunk it is not worth merging before it->min_n slices; the
 * oldest parked chunk is forgotten when FS_CMP_PARK_MAX are.  TAKES: it.
 * LOCKS: cmp_mu held. */
static void cmp_park(struct keg_fs *fs, struct fs_cmp_item *it)
{
    struct fs_cmp_item **pp = &fs->cmp_parked;
    if (fs->cmp_nparked >= FS_CMP_PARK_MAX) {
        struct fs_cmp_item *old = fs->cmp_parked;
        fs->cmp_parked = old->next;
        fs->cmp_nparked--;
        keg_free(old);
    }
    while (*pp)
        pp = &(*pp)->next;
    it->next = NULL;
    *pp = it;
    fs->cmp_nparked++;
}

/* LOCKS: fs->cmp_mu held. */
static void cmp_append(struct keg_fs *fs, struct fs_cmp_item *it)
{
    struct fs_cmp_item **pp = &fs->cmp_head;
    while (*pp)
        pp = &(*pp)->next;
    it->next = NULL;
    *pp = it;
    pthread_cond_broadcast(&fs->cmp_cv);
}

void fs_compact_queue(struct keg_fs *fs, uint64_t ino, uint32_t indx)
{
    fs_compact_queue_n(fs, ino, indx, UINT32_MAX);
}

void fs_compact_queue_n(struct keg_fs *fs, uint64_t ino, uint32_t indx, uint32_t nslices)
{
    struct fs_cmp_item *it;

    pthread_mutex_lock(&fs->cmp_mu);
    if (!fs->cmp_running || fs->cmp_stopping)
        goto out;
    for (struct fs_cmp_item **pp = &fs->cmp_parked; *pp; pp = &(*pp)->next) {
        it = *pp;
        if (it->ino != ino || it->indx != indx)
            continue;
        if (nslices < it->min_n)
            goto out;                   /* not worth looking at yet */
        *pp = it->next;                 /* unpark: queued below */
        fs->cmp_nparked--;
        keg_free(it);
        break;
    }
    it = fs->cmp_cur;
    if (it && it->ino == ino && it->indx == indx) {
        it->again = 1;
        goto out;
    }
    for (it = fs->cmp_head; it; it = it->next) {
        if (it->ino == ino && it->indx == indx)
            goto out;
    }
    if (fs->cmp_n >= FS_CMP_QUEUE_MAX) {
        KEG_DEBUG("compaction queue full: inode %llu chunk %u not queued",
                  (unsigned long long)ino, indx);
        goto out;
    }
    it = keg_calloc(1, sizeof(*it));
    if (!it)
        goto out;
    it->ino = ino;
    it->indx = indx;
    fs->cmp_n++;
    cmp_append(fs, it);
out:
    pthread_mutex_unlock(&fs->cmp_mu);
}

/* The first item that may run now, unlinked; else NULL and *wait_ns = time
 * until the earliest one (or -1 if the queue is empty).  LOCKS: cmp_mu held. */
static struct fs_cmp_item *cmp_take(struct keg_fs *fs, int64_t *wait_ns)
{
    int64_t now = keg_mono_ns();
    int64_t best = -1;
    for (struct fs_cmp_item **pp = &fs->cmp_head; *pp; pp = &(*pp)->next) {
        struct fs_cmp_item *it = *pp;
        if (it->not_before <= now) {
            *pp = it->next;
            it->next = NULL;
            return it;
        }
        if (best < 0 || it->not_before - now < best)
            best = it->not_before - now;
    }
    *wait_ns = best;
    return NULL;
}

static void *cmp_main(void *arg)
{
    struct keg_fs *fs = arg;
    keg_thread_name("keg-compact");

    pthread_mutex_lock(&fs->cmp_mu);
    while (!fs->cmp_stopping) {
        int64_t wait_ns = -1;
        struct fs_cmp_item *it = cmp_take(fs, &wait_ns);
        struct timespec ts;
        uint32_t min_n = 0;
        int rc;

        if (!it) {
            fs_deadline(&ts, wait_ns >= 0 ? wait_ns : 1000000000LL);
            pthread_cond_timedwait(&fs->cmp_cv, &fs->cmp_mu, &ts);
            continue;
        }
        fs->cmp_cur = it;
        pthread_mutex_unlock(&fs->cmp_mu);
        rc = compact_one(fs, it->ino, it->indx, 0, &min_n);
        pthread_mutex_lock(&fs->cmp_mu);
        fs->cmp_cur = NULL;
        if (rc == 0)
            fs->cmp_done++;
        else if (rc == -EAGAIN)
            fs->cmp_again++;
        if (rc == FS_CMP_DEFERRED) {
            /* queued again meanwhile: by a commit below min_n (or a read),
             * which changes nothing the estimate did not foresee */
            fs->cmp_deferred++;
            fs->cmp_n--;
            it->again = 0;
            it->attempts = 0;
            it->not_before = 0;
            it->min_n = min_n;
            if (!fs->cmp_stopping)
                cmp_park(fs, it);
            else
                keg_free(it);
        } else if (rc == -EAGAIN && ++it->attempts < FS_CMP_MAX_ATTEMPTS && !fs->cmp_stopping) {
            it->not_before = keg_mono_ns() + FS_CMP_RETRY_NS * it->attempts;
            cmp_append(fs, it);
        } else if (it->again && !fs->cmp_stopping) {
            it->again = 0;
            it->attempts = 0;
            it->not_before = 0;
            cmp_append(fs, it);
        } else {
            if (rc == -EAGAIN)
                KEG_DEBUG("inode %llu chunk %u keeps changing: compaction given up",
                          (unsigned long long)it->ino, it->indx);
            fs->cmp_n--;
            keg_free(it);
        }
        pthread_cond_broadcast(&fs->cmp_cv);
    }
    pthread_mutex_unlock(&fs->cmp_mu);
    return NULL;
}

int fs_compact_start(struct keg_fs *fs)
{
    int rc;
    pthread_mutex_lock(&fs->cmp_mu);
    fs->cmp_stopping = 0;
    rc = -pthread_create(&fs->cmp_thr, NULL, cmp_main, fs);
    if (rc == 0)
        fs->cmp_running = 1;
    pthread_mutex_unlock(&fs->cmp_mu);
    return rc;
}

void fs_compact_stop(struct keg_fs *fs)
{
    int running;
    pthread_mutex_lock(&fs->cmp_mu);
    running = fs->cmp_running;
    fs->cmp_stopping = 1;
    pthread_cond_broadcast(&fs->cmp_cv);
    pthread_mutex_unlock(&fs->cmp_mu);
    if (running)
        pthread_join(fs->cmp_thr, NULL);
    pthread_mutex_lock(&fs->cmp_mu);
    fs->cmp_running = 0;
    while (fs->cmp_head) {
        struct fs_cmp_item *it = fs->cmp_head;
        fs->cmp_head = it->next;
        keg_free(it);
    }
    fs->cmp_n = 0;
    while (fs->cmp_parked) {
        struct fs_cmp_item *it = fs->cmp_parked;
        fs->cmp_parked = it->next;
        keg_free(it);
    }
    fs->cmp_nparked = 0;
    pthread_mutex_unlock(&fs->cmp_mu);
}

int fs_compact_wait_idle(struct keg_fs *fs, unsigned timeout_ms)
{
    int64_t end = keg_mono_ns() + (int64_t)timeout_ms * 1000000;
    int rc = 0;
    pthread_mutex_lock(&fs->cmp_mu);
    while (fs->cmp_n > 0) {
        struct timespec ts;
        int64_t left = end - keg_mono_ns();
        if (left <= 0) {
            rc = -ETIMEDOUT;
            break;
        }
        fs_deadline(&ts, KEG_MIN(left, 100000000LL));
        pthread_cond_timedwait(&fs->cmp_cv, &fs->cmp_mu, &ts);
    }
    pthread_mutex_unlock(&fs->cmp_mu);
    return rc;
}
