/* file.c -- open files: open/create/release, the write buffer and its commit,
 * flush/fsync, fallocate, copy_file_range, SEEK_DATA/SEEK_HOLE, chunk listing.
 *
 * DESIGN
 * Every inode open here has one writer, shared by all its handles in this
 * process and protected by the inode's mu.  The writer is a list of buffered
 * slices in write order (struct fs_wslice): each covers chunk bytes
 * [pos, pos+len) of one chunk, all of them written.  A write is cut at 64 MiB
 * chunk boundaries; each piece goes into the newest buffered slice of that
 * chunk that it touches or overlaps, provided the piece starts inside or at
 * the end of that slice, the bytes it overwrites are in blocks not uploaded
 * yet, and no newer buffered slice overlaps the piece (it would shadow the new
 * bytes).  Otherwise a new slice (new id) starts at the piece.
 *
 * Block i of a slice covers slice bytes [i*bs, (i+1)*bs).  A full block is
 * handed to the upload pipeline once a later write to the slice starts past
 * it; the rest, including the partial last block, at commit.  The pipeline
 * (fs->up_pool, FS_UPLOAD_THREADS workers, a bounded queue) encodes, CRCs and
 * puts blocks while the writer goes on; a block handed over is immutable
 * (blocks [0, nup) are never written again) and its buffer belongs to the job.
 * Per inode, up_pending counts its blocks in the pipeline and up_err keeps the
 * first failure; a commit queues the remaining blocks but the last, puts that
 * one itself (no hand-off for a small file's only block), waits for
 * up_pending == 0 and commits nothing if any put failed.  Memory: the bytes
 * of buffers still in the pipeline stay in fs->wbytes until their upload
 * ends, and a writer that finds fs->wbytes over buffer_size waits for uploads
 * in flight first (backpressure), then commits its own inode as before.  A
 * full queue makes the submitter wait too.
 *
 * Commit points: flush (close), fsync, release, read of the inode, truncate,
 * fallocate, copy_range, lseek, and implicitly when the buffered bytes of all
 * files exceed buffer_size, a slice reaches the end of its chunk, or an inode
 * holds FS_MAX_WSLICES slices.  A commit uploads the remaining blocks, then
 * makes ONE write_slices call with all buffered slices in write order and
 * min_size = the highest written end.  If an upload fails, nothing is
 * committed (no slice ever references a missing block) and the blocks that
 * were uploaded are deleted again; the error is kept in ip->werr when the
 * commit was implicit and returned by the next flush/fsync (kernel writeback
 * semantics).  -ENOSPC/-EDQUOT are also returned by the following writes.
 * A block put is one request to the object stack, which retries transient
 * errors within its own deadline (obj_retry.c, obj_s3.c); what fails there
 * is final here (-EIO for a transient error, fs_io_error), and once one
 * upload of an inode failed, its queued uploads fail at once instead of each
 * waiting out the store's deadline (docs/durability.md, "One retry policy").
 *
 * Writer states per block: buffering (i >= nup) -> uploading (in a job) ->
 * uploaded; per slice: buffering -> committed (freed).
 * Invariants: blk[i].p != NULL iff i >= nup and i*bs < len; ip->wend >= every
 * buffered slice end (as a file offset); fs->wbytes = sum of blk caps plus
 * the caps of jobs in the pipeline; a writer is freed only with up_pending == 0.
 */
#define _GNU_SOURCE 1   /* SEEK_DATA, SEEK_HOLE */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/retry.h"
#include "fs_i.h"

#define FS_MAX_WSLICES 1000
#define FS_MAX_FILE_SIZE KEG_MAX_FILE_SIZE
/* copy_file_range: plans tried before the bytes are copied instead (the
 * source's slices keep being replaced), and the fallback's buffer */
#define FS_COPY_RETRIES 10
#define FS_COPY_BUF     (1u << 20)
#define FS_USYNC_MAX 4096     /* slices an fsync syncs one by one; more: the whole store */
/* A sequential writer commits a full chunk's slice at most this often: a
 * commit waits for the inode's block puts in flight, so committing every
 * 64 MiB stalled the writer 16 times per GiB.  Other mounters see a growing
 * file's new size at least this often (and at close, fsync, flush). */
#define FS_COMMIT_INTERVAL_NS 1000000000LL

/*----------------------------------------------------------------------------
 * Buffered slices
 *--------------------------------------------------------------------------*/

/* A write whose first piece in a block is at least this long (or half a
 * block) gets a whole block buffer at once (sequential writers) instead of
 * a growing one; blocks at least as long are encoded into one too. */
#define FS_BIGBUF_MIN_WRITE (128u << 10)

/* A writer's whole-block buffer keeps FS_WB_HEAD bytes of room in front of
 * the data (b->p = buffer + FS_WB_HEAD): an uncompressed block is then sealed
 * where it lies (keg_block_seal writes the header into the room) and put
 * without being copied into an encoding buffer.  fs->bigbuf_size is at least
 * keg_block_bound(KEG_CODEC_NONE, bs) = FS_WB_HEAD + bs. */
#define FS_WB_HEAD KEG_BLOCK_HDR

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23      /* Linux 5.14; older kernels: EINVAL, ignored */
#endif

uint8_t *fs_bigbuf_get(struct keg_fs *fs)
{
    uint8_t *p = NULL;

    pthread_mutex_lock(&fs->bigbuf_mu);
    if (fs->nbigbuf > 0)
        p = fs->bigbuf[--fs->nbigbuf];
    pthread_mutex_unlock(&fs->bigbuf_mu);
    if (p)
        return p;
    /* A fresh buffer is mapped but has no pages yet.  Filling it page by
     * page would fault once per 4 KiB, and under virtualization each first
     * touch of a user page is a trip to the hypervisor: a 4 MiB fill into a
     * fresh buffer ran at 0.7 GB/s against 10 GB/s into a used one.  So the
     * whole 2 MiB pages inside it ask for transparent huge pages (one fault
     * and one mapping each; ignored where THP is off) and the buffer is
     * populated in one call. */
    size_t hp = (size_t)2 << 20;
    int huge = fs->bigbuf_size >= hp;
    p = huge ? keg_malloc_aligned(hp, fs->bigbuf_size) : keg_malloc(fs->bigbuf_size);
    if (p) {
        long pg = sysconf(_SC_PAGESIZE);
        uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
        uintptr_t e = ((uintptr_t)p + fs->bigbuf_size) & ~((uintptr_t)pg - 1);
        if (huge)
            (void)madvise(p, fs->bigbuf_size & ~(hp - 1), MADV_HUGEPAGE);
        if (pg > 0 && e > a)
            (void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
    }
    return p;
}

void fs_bigbuf_put(struct keg_fs *fs, uint8_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&fs->bigbuf_mu);
    if (fs->nbigbuf < sizeof(fs->bigbuf) / sizeof(fs->bigbuf[0])) {
        fs->bigbuf[fs->nbigbuf++] = p;
        p = NULL;
    }
    pthread_mutex_unlock(&fs->bigbuf_mu);
    keg_free(p);
}

void fs_bigbuf_drop(struct keg_fs *fs)
{
    pthread_mutex_lock(&fs->bigbuf_mu);
    while (fs->nbigbuf > 0)
        keg_free(fs->bigbuf[--fs->nbigbuf]);
    pthread_mutex_unlock(&fs->bigbuf_mu);
}

/* Frees an encoding buffer, keeping a whole-block one for reuse. */
static void wbuf_release(struct keg_fs *fs, uint8_t *p, uint32_t big)
{
    if (big)
        fs_bigbuf_put(fs, p);
    else
        keg_free(p);
}

/* Frees a write-block buffer (b->p, FS_WB_HEAD past a whole-block buffer). */
static void wbuf_free(struct keg_fs *fs, uint8_t *p, uint32_t big)
{
    wbuf_release(fs, big ? p - FS_WB_HEAD : p, big);
}

static int ws_new(struct keg_fs *fs, uint32_t indx, uint32_t pos, struct fs_wslice **out)
{
    struct fs_wslice *ws;
    int rc;

    *out = NULL;
    ws = keg_calloc(1, sizeof(*ws));
    if (!ws)
        return -ENOMEM;
    ws->nblk = (uint32_t)(KEG_CHUNK_SIZE / fs->bs);
    ws->blk = keg_calloc(ws->nblk, sizeof(*ws->blk));
    if (!ws->blk) {
        keg_free(ws);
        return -ENOMEM;
    }
    rc = fs_alloc_slice(fs, &ws->id);
    if (rc < 0) {
        keg_free(ws->blk);
        keg_free(ws);
        return rc;
    }
    ws->indx = indx;
    ws->pos = pos;
    *out = ws;
    return 0;
}

static void ws_free(struct keg_fs *fs, struct fs_inode *ip, struct fs_wslice *ws)
{
    for (uint32_t i = 0; i < ws->nblk; i++) {
        if (ws->blk[i].p) {
            atomic_fetch_sub(&fs->wbytes, ws->blk[i].cap);
            ip->wbytes -= ws->blk[i].cap;
            wbuf_free(fs, ws->blk[i].p, ws->blk[i].big);
        }
    }
    keg_free(ws->blk);
    keg_free(ws);
}

/* Copy n bytes to slice offset soff (soff <= len, blocks not uploaded). */
static int ws_put(struct keg_fs *fs, struct fs_inode *ip, struct fs_wslice *ws, uint32_t soff,
                  const uint8_t *src, uint32_t n)
{
    uint32_t bs = fs->bs;
    uint32_t done = 0;

    KEG_ASSERT(soff <= ws->len && soff / bs >= ws->nup);
    while (done < n) {
        uint32_t o = soff + done;
        uint32_t i = o / bs;
        uint32_t bo = o % bs;
        uint32_t l = KEG_MIN(n - done, bs - bo);
        struct fs_wblock *b = &ws->blk[i];
        if (b->cap == 0 && l >= KEG_MIN(FS_BIGBUF_MIN_WRITE, bs / 2) &&
            fs->bigbuf_size >= (size_t)bs + FS_WB_HEAD) {
            uint8_t *np = fs_bigbuf_get(fs);
            if (!np)
                return -ENOMEM;
            atomic_fetch_add(&fs->wbytes, bs);
            ip->wbytes += bs;
            fs_bcache_trim(fs->bc);     /* the read cache makes room (one budget) */
            b->p = np + FS_WB_HEAD;
            b->cap = bs;
            b->big = 1;
        }
        if (b->cap < bo + l) {
            uint32_t ncap = b->cap ? b->cap : 16384;
            while (ncap < bo + l)
                ncap *= 2;
            ncap = KEG_MIN(ncap, bs);
            uint8_t *np = keg_realloc(b->p, ncap);
            if (!np)
                return -ENOMEM;
            atomic_fetch_add(&fs->wbytes, ncap - b->cap);
            ip->wbytes += ncap - b->cap;
            fs_bcache_trim(fs->bc);     /* the read cache makes room (one budget) */
            b->p = np;
            b->cap = ncap;
        }
        memcpy(b->p + bo, src + done, l);
        done += l;
    }
    if (soff + n > ws->len)
        ws->len = soff + n;
    return 0;
}

/*----------------------------------------------------------------------------
 * Block uploads
 *--------------------------------------------------------------------------*/

int fs_io_error(int rc)
{
    return keg_obj_transient(rc) ? -EIO : rc;
}

/* BORROWS: raw.  Returns 0 or -errno (logged); transient errors that outlast
 * the store's retries become -EIO.  With head, raw has FS_WB_HEAD bytes of room in
 * front that an uncompressed block's header is written into. */
int fs_put_block(struct keg_fs *fs, uint64_t id, uint32_t indx, uint8_t *raw, uint32_t blen,
                 int head)
{
    char key[256];
    size_t cap = keg_block_bound(fs->codec, blen);
    size_t olen = 0;
    int64_t t0 = keg_mono_ns();
    uint8_t *enc = NULL;
    uint32_t big = 0;
    int inplace = head && fs->codec == KEG_CODEC_NONE;
    struct keg_block_id bid = fs_block_id(fs, id, indx, blen);
    int rc = 0;

    if (inplace) {
        enc = raw - FS_WB_HEAD;                 /* sealed in place, no copy */
        olen = keg_block_seal(enc, &bid);
    } else {
        big = cap <= fs->bigbuf_size && blen >= KEG_MIN(FS_BIGBUF_MIN_WRITE, fs->bs / 2);
        enc = big ? fs_bigbuf_get(fs) : keg_malloc(cap);
        if (!enc)
            return -ENOMEM;
        rc = keg_block_encode(fs->codec, &bid, raw, blen, enc, cap, &olen);
        if (rc < 0)
            goto out;
    }
    keg_block_key(key, sizeof(key), fs->fmt.name, id, indx, blen);
    rc = keg_obj_put(fs->obj, key, enc, olen);
    if (rc < 0) {
        KEG_ERR("upload of %s failed: %s (after %lld ms)", key, strerror(-rc),
                (long long)((keg_mono_ns() - t0) / 1000000));
        rc = fs_io_error(rc);
    }
out:
    if (!inplace)                               /* else: the caller's buffer */
        wbuf_release(fs, enc, big);
    return rc;
}

/*----------------------------------------------------------------------------
 * Upload pipeline
 *--------------------------------------------------------------------------*/

/* One block on its way to the store.  The job owns the buffer. */
struct fs_upjob {
    struct fs_job    job;       /* MUST be first */
    struct keg_fs   *fs;
    struct fs_inode *ip;        /* kept alive: its writer waits for up_pending == 0 */
    uint64_t         id;
    uint32_t         indx;
    uint32_t         blen;
    uint32_t         cap;       /* bytes charged to fs->wbytes */
    uint32_t         big;       /* p is a whole-block buffer */
    uint8_t         *p;
};

static void up_run(struct fs_job *j)
{
    struct fs_upjob *u = (struct fs_upjob *)j;
    struct keg_fs *fs = u->fs;
    int rc;

    /* An upload of this inode failed already: its commit fails whatever
     * happens here, so do not make it wait for one more store deadline. */
    pthread_mutex_lock(&fs->up_mu);
    rc = u->ip->up_err;
    pthread_mutex_unlock(&fs->up_mu);
    if (rc == 0)
        rc = fs_put_block(fs, u->id, u->indx, u->p, u->blen, u->big);
    wbuf_free(fs, u->p, u->big);
    pthread_mutex_lock(&fs->up_mu);
    if (rc < 0 && u->ip->up_err == 0)
        u->ip->up_err = rc;
    KEG_ASSERT(u->ip->up_pending > 0 && fs->up_inflight > 0);
    u->ip->up_pending--;
    fs->up_inflight--;
    atomic_fetch_sub(&fs->wbytes, u->cap);
    pthread_cond_broadcast(&fs->up_cv);
    pthread_mutex_unlock(&fs->up_mu);
    keg_free(u);
}

int fs_up_wait(struct keg_fs *fs, struct fs_inode *ip)
{
    int rc;
    pthread_mutex_lock(&fs->up_mu);
    while (ip->up_pending > 0)
        pthread_cond_wait(&fs->up_cv, &fs->up_mu);
    rc = ip->up_err;
    ip->up_err = 0;
    pthread_mutex_unlock(&fs->up_mu);
    return rc;
}

/* Backpressure: while the buffered + uploading bytes of all files exceed the
 * budget and uploads are in flight, wait for them.  LOCKS: may hold ip->mu. */
static void up_throttle(struct keg_fs *fs)
{
    if (atomic_load(&fs->wbytes) <= fs->buffer_size)
        return;
    pthread_mutex_lock(&fs->up_mu);
    while (atomic_load(&fs->wbytes) > fs->buffer_size && fs->up_inflight > 0)
        pthread_cond_wait(&fs->up_cv, &fs->up_mu);
    pthread_mutex_unlock(&fs->up_mu);
}

/* Put block i of ws (length blen) in this thread.  Like a job, it consumes
 * the buffer whatever the outcome (the caller counts the block in nup, so a
 * dropped writer deletes it).  Returns 0 or -errno. */
static int ws_upload_here(struct keg_fs *fs, struct fs_inode *ip, struct fs_wslice *ws,
                          uint32_t i, uint32_t blen)
{
    struct fs_wblock *b = &ws->blk[i];
    int rc = fs_put_block(fs, ws->id, i, b->p, blen, b->big);

    atomic_fetch_sub(&fs->wbytes, b->cap);
    ip->wbytes -= b->cap;
    wbuf_free(fs, b->p, b->big);
    b->p = NULL;
    b->cap = 0;
    b->big = 0;
    return rc;
}

/* Hand block i of ws (length blen) to the upload pool; its buffer goes with
 * it.  Falls back to an upload in this thread when no job can be allocated.
 * Errors of queued uploads surface in fs_up_wait. */
static int ws_upload(struct keg_fs *fs, struct fs_inode *ip, struct fs_wslice *ws, uint32_t i,
                     uint32_t blen)
{
    struct fs_upjob *u = keg_calloc(1, sizeof(*u));
    struct fs_wblock *b = &ws->blk[i];

    if (!u)
        return ws_upload_here(fs, ip, ws, i, blen);
    u->job.fn = up_run;
    u->fs = fs;
    u->ip = ip;
    u->id = ws->id;
    u->indx = i;
    u->blen = blen;
    u->cap = b->cap;
    u->big = b->big;
    u->p = b->p;
    ip->wbytes -= b->cap;       /* still in fs->wbytes until the upload ends */
    b->p = NULL;
    b->cap = 0;
    b->big = 0;
    pthread_mutex_lock(&fs->up_mu);
    ip->up_pending++;
    fs->up_inflight++;
    pthread_mutex_unlock(&fs->up_mu);
    fs_pool_submit(&fs->up_pool, &u->job, 1);
    return 0;
}

/* Upload the full blocks of ws that end at or before slice offset upto. */
static int ws_upload_full(struct keg_fs *fs, struct fs_inode *ip, struct fs_wslice *ws,
                          uint32_t upto)
{
    while ((uint64_t)(ws->nup + 1) * fs->bs <= KEG_MIN(upto, ws->len)) {
        int rc = ws_upload(fs, ip, ws, ws->nup, fs->bs);
        if (rc < 0)
            return rc;
        ws->nup++;
    }
    return 0;
}

/* Deletion of the uploaded blocks of a dropped slice, in the background: the
 * failed commit that drops it returns without waiting for the store again
 * (a store that just failed the upload fails the delete for a deadline too). */
struct fs_deljob {
    struct fs_job   job;        /* MUST be first */
    struct keg_fs  *fs;
    uint64_t        id;
    uint32_t        size;
};

static void del_run(struct fs_job *j)
{
    struct fs_deljob *d = (struct fs_deljob *)j;
    fs_delete_slice(d->fs, d->id, d->size);     /* a failure is logged; gc finds the rest */
    keg_free(d);
}

static void writer_delete_later(struct keg_fs *fs, uint64_t id, uint32_t size)
{
    struct fs_deljob *d = keg_calloc(1, sizeof(*d));

    if (d) {
        d->job.fn = del_run;
        d->fs = fs;
        d->id = id;
        d->size = size;
        if (fs_pool_submit(&fs->up_pool, &d->job, 0) == 0)
            return;
        keg_free(d);
    }
    fs_delete_slice(fs, id, size);
}

void fs_writer_drop(struct keg_fs *fs, struct fs_inode *ip, int delete_uploaded)
{
    struct fs_wslice *ws = ip->wfirst;
    /* no put may land after the deletes below */
    fs_up_wait(fs, ip);
    while (ws) {
        struct fs_wslice *next = ws->next;
        if (delete_uploaded && ws->nup > 0)
            writer_delete_later(fs, ws->id,
                                (uint32_t)KEG_MIN((uint64_t)ws->nup * fs->bs, ws->len));
        ws_free(fs, ip, ws);
        ws = next;
    }
    ip->wfirst = ip->wlast = NULL;
    ip->nws = 0;
    ip->wend = 0;
    ip->wappend = 0;
    ip->wgen++;
}

/* Remember the committed slices from ws on for the next fsync (ws NULL: a
 * failed commit, which may still have committed: sync everything then).
 * LOCKS: ip->mu held. */
static void usync_note(struct fs_inode *ip, const struct fs_wslice *ws)
{
    if (!ws)
        ip->usync_all = 1;
    for (; ws && !ip->usync_all; ws = ws->next) {
        if (ip->nusync == ip->cusync) {
            uint32_t ncap = ip->cusync ? ip->cusync * 2 : 8;
            struct keg_del_slice *nv = ncap <= FS_USYNC_MAX
                                     ? keg_realloc(ip->usync, ncap * sizeof(*nv)) : NULL;
            if (!nv) {
                ip->usync_all = 1;      /* too many (or no memory): sync the store */
                break;
            }
            ip->usync = nv;
            ip->cusync = ncap;
        }
        ip->usync[ip->nusync++] = (struct keg_del_slice){ws->id, ws->len};
    }
    if (ip->usync_all) {
        keg_free(ip->usync);
        ip->usync = NULL;
        ip->nusync = ip->cusync = 0;
    }
}

int fs_commit_locked(struct keg_fs *fs, struct fs_inode *ip)
{
    struct keg_chunk_slice *cs = NULL;
    struct keg_attr attr;
    struct fs_wslice *ws;
    size_t n = 0;
    int rc = 0;

    uint32_t nslices = 0;

    if (!ip->wfirst)
        return 0;
    /* the remaining blocks go to the pool too (in parallel), except the very
     * last one, which this thread puts itself rather than wait idle (a close
     * of a small file then needs no thread hand-off and no wake-up); then
     * wait for every upload of this inode: nothing is committed unless all
     * landed */
    for (ws = ip->wfirst; ws && rc == 0; ws = ws->next) {
        uint32_t nb = (ws->len + fs->bs - 1) / fs->bs;
        while (ws->nup < nb) {
            uint32_t blen = fs_block_len(fs->bs, ws->len, ws->nup);
            if (!ws->next && ws->nup + 1 == nb) {
                rc = ws_upload_here(fs, ip, ws, ws->nup, blen);
                ws->nup++;
                break;
            }
            rc = ws_upload(fs, ip, ws, ws->nup, blen);
            if (rc < 0)
                break;
            ws->nup++;
        }
    }
    {
        int urc = fs_up_wait(fs, ip);
        if (rc == 0)
            rc = urc;
    }
    if (rc < 0) {
        fs_writer_drop(fs, ip, 1);
        return rc;
    }
    cs = keg_malloc(ip->nws * sizeof(*cs));
    if (!cs) {
        fs_writer_drop(fs, ip, 1);
        return -ENOMEM;
    }
    for (ws = ip->wfirst; ws; ws = ws->next) {
        cs[n].indx = ws->indx;
        cs[n].s.id = ws->id;
        cs[n].s.size = ws->len;
        cs[n].s.off = 0;
        cs[n].s.len = ws->len;
        cs[n].s.pos = ws->pos;
        n++;
    }
    rc = keg_meta_write_slices(fs->meta, ip->ino, n, cs, ip->wend, 0, &nslices, &attr);
    if (rc == 0 && nslices > FS_COMPACT_THRESHOLD) {
        for (size_t k = 0; k < n; k++) {
            if (cs[k].indx != KEG_INDX_APPEND && (k == 0 || cs[k].indx != cs[k - 1].indx))
                fs_compact_queue_n(fs, ip->ino, cs[k].indx, nslices);
        }
    }
    if (rc == 0 && ip->wappend > 0) {
        /* the engine put the appends at the end: [attr.size - wappend, attr.size) */
        uint64_t base = attr.size - ip->wappend;
        if (nslices > FS_COMPACT_THRESHOLD) {
            for (uint64_t c = base / KEG_CHUNK_SIZE; c <= (attr.size - 1) / KEG_CHUNK_SIZE; c++)
                fs_compact_queue_n(fs, ip->ino, (uint32_t)c, nslices);
        }
        if (base != ip->wakoff && fs->inval_fn) {
            /* another mounter appended first: the kernel cached these
             * bytes (and the size) at wakoff */
            KEG_DEBUG("inode %llu: appends placed at %llu, not %llu", (unsigned long long)ip->ino,
                      (unsigned long long)base, (unsigned long long)ip->wakoff);
            fs->inval_fn(fs->inval_arg, ip->ino, 0, 0);
        }
    }
    keg_free(cs);
    /* The blocks stay in the store even on failure: an engine error may
     * still have committed the slices, and a leak is safer than a dangling
     * reference (kegfs gc reclaims leaks). */
    usync_note(ip, rc == 0 ? ip->wfirst : NULL);
    ip->wcommit_ns = keg_mono_ns();
    fs_writer_drop(fs, ip, 0);
    fs_inode_drop_chunks(ip);
    if (rc < 0) {
        KEG_ERR("commit of %zu slice(s) of inode %llu failed: %s", n,
                (unsigned long long)ip->ino, strerror(-rc));
        return rc;
    }
    fs_inode_set_attr(ip, &attr);
    return 0;
}

int fs_flush_inode(struct keg_fs *fs, struct fs_inode *ip, int report)
{
    int rc;
    pthread_mutex_lock(&ip->mu);
    rc = fs_commit_locked(fs, ip);
    if (report) {
        if (rc == 0)
            rc = ip->werr;
        ip->werr = 0;
    } else if (rc < 0) {
        ip->werr = rc;
    }
    pthread_mutex_unlock(&ip->mu);
    return rc;
}

/* Implicit commit: errors are deferred. */
static void commit_deferred(struct keg_fs *fs, struct fs_inode *ip)
{
    int rc = fs_commit_locked(fs, ip);
    if (rc < 0)
        ip->werr = rc;
}

/*----------------------------------------------------------------------------
 * Write
 *--------------------------------------------------------------------------*/

/* The buffered slice that may take chunk bytes [cpos, cpos+n), or NULL. */
static struct fs_wslice *ws_find(struct keg_fs *fs, struct fs_inode *ip, uint32_t indx,
                                 uint32_t cpos, uint32_t n)
{
    struct fs_wslice *cand = NULL;
    uint64_t wb = cpos;
    uint64_t we = (uint64_t)cpos + n;
    for (struct fs_wslice *ws = ip->wfirst; ws; ws = ws->next) {
        uint64_t sb = ws->pos;
        uint64_t se = (uint64_t)ws->pos + ws->len;
        int overlaps;
        int takes;
        if (ws->indx != indx)
            continue;
        overlaps = wb < se && sb < we;
        takes = wb >= sb && wb <= se && (wb - sb) >= (uint64_t)ws->nup * fs->bs;
        if (overlaps)
            cand = takes ? ws : NULL;   /* a newer overlapping slice shadows older ones */
        else if (takes)
            cand = ws;                  /* appends right at its end */
    }
    return cand;
}

/* A new slice of chunk indx at pos, appended to ip's writer.  LOCKS: ip->mu held. */
static int ws_add(struct keg_fs *fs, struct fs_inode *ip, uint32_t indx, uint32_t pos,
                  struct fs_wslice **out)
{
    int rc = ws_new(fs, indx, pos, out);
    if (rc < 0)
        return rc;
    if (ip->wlast)
        ip->wlast->next = *out;
    else
        ip->wfirst = *out;
    ip->wlast = *out;
    ip->nws++;
    return 0;
}

/* After a piece went into ws: upload the blocks that end at or before slice
 * offset upto (complete: the writes have moved past them), and commit when the
 * slice fills its chunk (not more often than FS_COMMIT_INTERVAL_NS), the inode
 * has too many slices or the buffers are over budget.  LOCKS: ip->mu held. */
static int piece_done(struct keg_fs *fs, struct fs_inode *ip, struct fs_wslice *ws,
                      uint32_t upto)
{
    int rc = ws_upload_full(fs, ip, ws, upto);
    if (rc < 0)
        return rc;
    if (((uint64_t)ws->pos + ws->len >= KEG_CHUNK_SIZE &&
         keg_mono_ns() - ip->wcommit_ns >= FS_COMMIT_INTERVAL_NS) ||
        ip->nws >= FS_MAX_WSLICES || atomic_load(&fs->wbytes) > fs->buffer_size)
        commit_deferred(fs, ip);
    return 0;
}

static int write_piece(struct keg_fs *fs, struct fs_inode *ip, uint32_t indx, uint32_t cpos,
                       const uint8_t *src, uint32_t n)
{
    struct fs_wslice *ws = ws_find(fs, ip, indx, cpos, n);
    int rc;
    if (!ws) {
        rc = ws_add(fs, ip, indx, cpos, &ws);
        if (rc < 0)
            return rc;
    }
    rc = ws_put(fs, ip, ws, cpos - ws->pos, src, n);
    if (rc < 0)
        return rc;
    uint64_t end = (uint64_t)indx * KEG_CHUNK_SIZE + ws->pos + ws->len;
    if (end > ip->wend)
        ip->wend = end;
    return piece_done(fs, ip, ws, cpos - ws->pos);
}

/* Buffer one piece of an O_APPEND write: at the end of the newest buffered
 * slice when that is an append slice with room, else in a new one.  Append
 * slices are written in order and never rewritten, so every block before the
 * end is complete.  LOCKS: ip->mu held. */
static int append_piece(struct keg_fs *fs, struct fs_inode *ip, const uint8_t *src, uint32_t n)
{
    struct fs_wslice *ws = ip->wlast;
    int rc;
    if (!ws || ws->indx != KEG_INDX_APPEND || ws->len + (uint64_t)n > KEG_CHUNK_SIZE) {
        rc = ws_add(fs, ip, KEG_INDX_APPEND, 0, &ws);
        if (rc < 0)
            return rc;
    }
    rc = ws_put(fs, ip, ws, ws->len, src, n);
    if (rc < 0)
        return rc;
    ip->wappend += n;
    return piece_done(fs, ip, ws, ws->len);
}

/* Buffers size bytes of src as pieces: at file offset off, or with append at
 * the end (koff: where the kernel thinks that is), each piece within one chunk
 * (append: one append slice).  A failed piece drops the whole buffer (it holds
 * part of this write) and is kept in ip->werr; a full volume found meanwhile
 * (ip->werr -ENOSPC/-EDQUOT) ends the write.  Returns 0 or -errno.
 * LOCKS: ip->mu held. */
static int write_pieces(struct keg_fs *fs, struct fs_inode *ip, int append, uint64_t off,
                        const uint8_t *src, size_t size)
{
    size_t done = 0;

    while (done < size) {
        uint64_t p = off + done;
        uint32_t cpos = append ? 0 : (uint32_t)(p % KEG_CHUNK_SIZE);
        uint32_t n = (uint32_t)KEG_MIN((uint64_t)(size - done), KEG_CHUNK_SIZE - cpos);
        int rc;

        if (append && ip->wappend == 0)     /* (also after a commit inside this write) */
            ip->wakoff = p;
        up_throttle(fs);
        rc = append ? append_piece(fs, ip, src + done, n)
                    : write_piece(fs, ip, (uint32_t)(p / KEG_CHUNK_SIZE), cpos, src + done, n);
        if (rc < 0) {
            KEG_ERR("%s inode %llu failed: %s", append ? "append to" : "write to",
                    (unsigned long long)ip->ino, strerror(-rc));
            fs_writer_drop(fs, ip, 1);
            ip->werr = rc;
            return rc;
        }
        done += n;
        ip->wtime_ns = keg_now_ns();
        if (ip->werr == -ENOSPC || ip->werr == -EDQUOT)
            return ip->werr;
    }
    return 0;
}

/* Buffer size bytes at file offset off.  LOCKS: takes ip->mu. */
static ssize_t write_at(struct keg_fs *fs, struct fs_inode *ip, uint64_t off, const void *buf,
                        size_t size)
{
    int rc = 0;

    if (off >= FS_MAX_FILE_SIZE)
        return -EFBIG;
    if (size > FS_MAX_FILE_SIZE - off)
        size = (size_t)(FS_MAX_FILE_SIZE - off);    /* short write up to the limit */
    pthread_mutex_lock(&ip->mu);
    if (ip->wappend > 0)
        commit_deferred(fs, ip);    /* appends are placed after every other slice */
    if (ip->werr == -ENOSPC || ip->werr == -EDQUOT) {
        rc = ip->werr;
        goto out;
    }
    rc = write_pieces(fs, ip, 0, off, buf, size);
out:
    pthread_mutex_unlock(&ip->mu);
    return rc < 0 ? rc : (ssize_t)size;
}

ssize_t keg_fs_append(struct keg_fs *fs, struct keg_fh *fh, uint64_t koff, const void *buf,
                      size_t size)
{
    struct fs_inode *ip = fh->ip;
    int rc = 0;

    if (fs->read_only)
        return -EROFS;
    if ((fh->flags & O_ACCMODE) == O_RDONLY)
        return -EBADF;
    if (size == 0)
        return 0;
    pthread_mutex_lock(&ip->mu);
    if ((ip->attr_valid ? ip->size : koff) + ip->wappend + size > FS_MAX_FILE_SIZE) {
        rc = -EFBIG;
        goto out;
    }
    if (ip->werr == -ENOSPC || ip->werr == -EDQUOT) {
        rc = ip->werr;
        goto out;
    }
    if (ip->wappend > 0 && koff != ip->wakoff + ip->wappend)
        ip->wakoff = UINT64_MAX;    /* the kernel's idea moved: invalidate after the commit */
    atomic_store(&fh->wrote, 1);
    rc = write_pieces(fs, ip, 1, koff, buf, size);
out:
    pthread_mutex_unlock(&ip->mu);
    return rc < 0 ? rc : (ssize_t)size;
}

void keg_fs_set_inval(struct keg_fs *fs, keg_fs_inval_fn *fn, void *arg)
{
    fs->inval_fn = fn;
    fs->inval_arg = arg;
}

ssize_t keg_fs_write(struct keg_fs *fs, struct keg_fh *fh, uint64_t off, const void *buf,
                     size_t size)
{
    if (fs->read_only)
        return -EROFS;
    if ((fh->flags & O_ACCMODE) == O_RDONLY)
        return -EBADF;
    if (size == 0)
        return 0;
    atomic_store(&fh->wrote, 1);
    return write_at(fs, fh->ip, off, buf, size);
}

/*----------------------------------------------------------------------------
 * Open / create / flush / release
 *--------------------------------------------------------------------------*/

static int fh_new(struct keg_fs *fs, const struct keg_attr *a, int flags, struct keg_fh **out)
{
    struct keg_fh *fh = keg_calloc(1, sizeof(*fh));
    *out = NULL;
    if (!fh)
        return -ENOMEM;
    fh->ip = fs_inode_get(fs, a->ino);
    if (!fh->ip) {
        keg_free(fh);
        return -ENOMEM;
    }
    pthread_mutex_init(&fh->ra_mu, NULL);
    fh->flags = flags;
    *out = fh;
    return 0;
}

int keg_fs_open(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, int flags,
                struct keg_fh **fhp, int *keep_cache)
{
    struct keg_attr a;
    struct keg_fh *fh = NULL;
    struct fs_inode *ip;
    int wr = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
    int rc;

    KEG_UNUSED(c);
    uint64_t tok;
    int dirty;

    *fhp = NULL;
    *keep_cache = 0;
    if (fs->read_only && wr)
        return -EROFS;
    tok = fs_attr_token(fs, ino);       /* before the engine read: see keep_cache below */
    rc = keg_meta_getattr(fs->meta, ino, &a);
    if (rc < 0)
        return rc;
    if (S_ISDIR(a.mode))
        return -EISDIR;
    rc = fh_new(fs, &a, flags, &fh);
    if (rc < 0)
        return rc;
    ip = fh->ip;
    pthread_mutex_lock(&ip->mu);
    ip->nopen++;
    fs_inode_drop_chunks(ip);           /* close-to-open: re-read slice lists */
    if ((flags & O_TRUNC) && S_ISREG(a.mode)) {
        rc = fs_commit_locked(fs, ip);
        if (rc == 0)
            rc = keg_meta_truncate(fs->meta, ino, 0, &a);
        if (rc < 0) {
            ip->nopen--;
            pthread_mutex_unlock(&ip->mu);
            fs_inode_put(fs, ip);
            pthread_mutex_destroy(&fh->ra_mu);
            keg_free(fh);
            return rc;
        }
    }
    fs_inode_set_attr(ip, &a);
    /* Buffered writes here (e.g. O_DIRECT ones, which bypassed the page cache)
     * or a commit that finished after the engine read: the attributes do not
     * describe what the kernel may have cached, so it must drop its pages. */
    dirty = ip->wfirst != NULL || (tok != UINT64_MAX && tok != ip->wgen);
    pthread_mutex_unlock(&ip->mu);
    *keep_cache = fs_seen_check(fs, &a) && !(flags & O_TRUNC) && !dirty;
    *fhp = fh;
    return 0;
}

int keg_fs_create(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                  uint32_t mode, int flags, struct keg_attr *out, struct keg_fh **fhp)
{
    struct keg_fh *fh = NULL;
    int keep = 0;
    int rc;

    *fhp = NULL;
    rc = keg_fs_mknod(fs, c, parent, name, S_IFREG | (mode & 07777), 0, out);
    if (rc == -EEXIST && !(flags & O_EXCL)) {
        /* lost a race with another creator: open the existing file */
        rc = keg_fs_lookup(fs, c, parent, name, out);
        if (rc < 0)
            return rc;
        if (!S_ISREG(out->mode))
            return S_ISDIR(out->mode) ? -EISDIR : -EEXIST;
        rc = keg_fs_open(fs, c, out->ino, flags, fhp, &keep);
        if (rc == 0)
            rc = keg_meta_getattr(fs->meta, out->ino, out);
        return rc;
    }
    if (rc < 0)
        return rc;
    rc = fh_new(fs, out, flags, &fh);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&fh->ip->mu);
    fh->ip->nopen++;
    fs_inode_drop_chunks(fh->ip);
    fs_inode_set_attr(fh->ip, out);
    pthread_mutex_unlock(&fh->ip->mu);
    fs_seen_check(fs, out);
    *fhp = fh;
    return 0;
}

uint64_t keg_fh_ino(const struct keg_fh *fh)
{
    return fh->ip->ino;
}

int keg_fs_flush(struct keg_fs *fs, struct keg_fh *fh, uint64_t lock_owner)
{
    struct fs_inode *ip = fh->ip;
    int rc;

    atomic_store(&fh->wrote, 0);        /* before the commit: a later write sets it again */
    rc = fs_flush_inode(fs, ip, 1);

    fs_locks_flush(fs, fh, lock_owner);     /* lock.c */
    return rc;
}

int keg_fs_commit(struct keg_fs *fs, struct keg_fh *fh)
{
    atomic_store(&fh->wrote, 0);
    return fs_flush_inode(fs, fh->ip, 1);
}

/* Makes the blocks committed for ip durable: those of the slices noted since
 * the last fsync (keg_obj_sync_keys), or the whole store when that list is
 * incomplete or an inode with unsynced slices was freed meanwhile. */
static int fsync_blocks(struct keg_fs *fs, struct fs_inode *ip)
{
    uint64_t lost;
    struct keg_del_slice *v;
    uint32_t n;
    int all, rc;

    pthread_mutex_lock(&ip->sync_mu);
    lost = atomic_load(&fs->usync_lost);
    pthread_mutex_lock(&ip->mu);
    v = ip->usync;
    n = ip->nusync;
    all = ip->usync_all;
    ip->usync = NULL;
    ip->nusync = ip->cusync = 0;
    ip->usync_all = 0;
    pthread_mutex_unlock(&ip->mu);
    if (all || lost) {
        rc = keg_obj_sync(fs->obj);
        if (rc == 0 && lost) {
            /* those freed before this sync are covered; a concurrent fsync
             * may have taken some of them off already */
            uint64_t cur = atomic_load(&fs->usync_lost);
            while (!atomic_compare_exchange_weak(&fs->usync_lost, &cur,
                                                 cur >= lost ? cur - lost : 0))
                ;
        }
    } else {
        rc = fs_sync_slices(fs, v, n);
    }
    keg_free(v);
    if (rc < 0) {
        pthread_mutex_lock(&ip->mu);
        usync_note(ip, NULL);           /* the next fsync tries everything again */
        pthread_mutex_unlock(&ip->mu);
    }
    pthread_mutex_unlock(&ip->sync_mu);
    return rc;
}

int keg_fs_fsync(struct keg_fs *fs, struct keg_fh *fh, int datasync)
{
    int rc;
    KEG_UNUSED(datasync);
    atomic_store(&fh->wrote, 0);
    rc = fs_flush_inode(fs, fh->ip, 1);
    if (rc < 0)
        return rc;
    rc = fsync_blocks(fs, fh->ip);
    if (rc < 0) {
        KEG_ERR("fsync: object store sync failed: %s", strerror(-rc));
        return rc;
    }
    rc = keg_meta_sync(fs->meta);
    if (rc == -ENOSYS)
        rc = 0;
    if (rc < 0)
        KEG_ERR("fsync: metadata sync failed: %s", strerror(-rc));
    return rc;
}

/* An inode with nlink 0 is not marked for purging at its last release here: it
 * may be pending in another mounter's session too, which still reads it.  What
 * the previous worker left pending in this session goes when the session ends. */
void keg_fs_fh_adopted(struct keg_fs *fs, struct keg_fh *fh)
{
    struct fs_inode *ip = fh->ip;
    KEG_UNUSED(fs);
    fh->adopted = 1;
    pthread_mutex_lock(&ip->mu);
    ip->plocked = 1;        /* the previous worker's owners may hold locks on it (lock.c) */
    pthread_mutex_unlock(&ip->mu);
}

int keg_fs_release(struct keg_fs *fs, struct keg_fh *fh)
{
    struct fs_inode *ip = fh->ip;
    int purge = 0, last, rc = 0;

    /* The kernel sends a release after the last close's flush, and on its
     * own time: it may come while another handle of the inode is in the
     * middle of a write that the kernel cut into several requests (an
     * O_APPEND write crossing a page it has not cached arrives as two).
     * Committing that handle's first piece alone would let another mounter's
     * append land inside the record.  So a release commits only what was
     * buffered through this handle since its last flush (mmap write-back),
     * or everything when it is the inode's last handle. */
    pthread_mutex_lock(&ip->mu);
    last = ip->nopen == 1;
    pthread_mutex_unlock(&ip->mu);
    if (atomic_load(&fh->wrote) || last)
        rc = fs_flush_inode(fs, ip, 1);

    if (rc < 0)
        KEG_ERR("release of inode %llu: buffered data lost: %s", (unsigned long long)ip->ino,
                strerror(-rc));
    fs_locks_release(fs, fh);               /* lock.c: flock and OFD locks */
    pthread_mutex_lock(&ip->mu);
    KEG_ASSERT(ip->nopen > 0);
    ip->nopen--;
    if (ip->nopen == 0 && ip->unlinked) {
        ip->unlinked = 0;
        purge = 1;
    }
    pthread_mutex_unlock(&ip->mu);
    if (purge) {
        int prc = keg_meta_purge(fs->meta, ip->ino);
        if (prc < 0 && prc != -ENOENT)
            KEG_WARN("purge of unlinked inode %llu: %s", (unsigned long long)ip->ino,
                     strerror(-prc));
        fs_kick_deleter(fs, FS_DEL_HOLD_NS);   /* let the deleter drain the queue */
    }
    fs_inode_put(fs, ip);
    pthread_mutex_destroy(&fh->ra_mu);
    keg_free(fh);
    return rc;
}

/*----------------------------------------------------------------------------
 * fallocate
 *--------------------------------------------------------------------------*/

/* Hole slices over file range [off, end), split at chunk boundaries.
 * OWNERSHIP: caller keg_free()s *out. */
static int hole_slices(uint64_t off, uint64_t end, struct keg_chunk_slice **out, size_t *n)
{
    size_t cnt = 0;
    size_t max = (size_t)((end - off) / KEG_CHUNK_SIZE + 2);
    struct keg_chunk_slice *cs;

    *out = NULL;
    *n = 0;
    cs = keg_calloc(max, sizeof(*cs));
    if (!cs)
        return -ENOMEM;
    for (uint64_t p = off; p < end;) {
        uint32_t cpos = (uint32_t)(p % KEG_CHUNK_SIZE);
        uint32_t l = (uint32_t)KEG_MIN(end - p, KEG_CHUNK_SIZE - cpos);
        KEG_ASSERT(cnt < max);
        cs[cnt].indx = (uint32_t)(p / KEG_CHUNK_SIZE);
        cs[cnt].s.id = 0;
        cs[cnt].s.size = l;
        cs[cnt].s.off = 0;
        cs[cnt].s.len = l;
        cs[cnt].s.pos = cpos;
        cnt++;
        p += l;
    }
    *out = cs;
    *n = cnt;
    return 0;
}

int keg_fs_fallocate(struct keg_fs *fs, const struct keg_ctx *c, struct keg_fh *fh, int mode,
                     uint64_t off, uint64_t len)
{
    struct fs_inode *ip = fh->ip;
    struct keg_chunk_slice *cs = NULL;
    struct keg_attr a;
    size_t n = 0;
    uint64_t end;
    int keep = (mode & FALLOC_FL_KEEP_SIZE) != 0;
    int rc;

    KEG_UNUSED(c);
    if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))
        return -EOPNOTSUPP;
    if ((mode & FALLOC_FL_PUNCH_HOLE) && (!keep || (mode & FALLOC_FL_ZERO_RANGE)))
        return -EOPNOTSUPP;
    if (len == 0)
        return -EINVAL;
    if (fs->read_only)
        return -EROFS;
    if ((fh->flags & O_ACCMODE) == O_RDONLY)
        return -EBADF;
    if (off >= FS_MAX_FILE_SIZE || len > FS_MAX_FILE_SIZE - off)
        return -EFBIG;
    end = off + len;

    pthread_mutex_lock(&ip->mu);
    rc = fs_commit_locked(fs, ip);
    if (rc < 0)
        goto out;
    rc = keg_meta_getattr(fs->meta, ip->ino, &a);
    if (rc < 0)
        goto out;
    if ((mode & ~FALLOC_FL_KEEP_SIZE) == 0 && end > KEG_MAX(off, a.size)) {
        /* what the request adds past EOF must fit (fs.c; holes inside the
         * file are not counted: KegFS reserves no space for them) */
        rc = fs_space_check(fs, end - KEG_MAX(off, a.size));
        if (rc < 0)
            goto out;
    }
    if (mode == 0) {
        if (end > a.size)
            rc = keg_meta_truncate(fs->meta, ip->ino, end, &a);
    } else if (mode == FALLOC_FL_KEEP_SIZE) {
        rc = 0;
    } else {
        if (keep)
            end = KEG_MIN(end, a.size);
        if (off < end) {
            rc = hole_slices(off, end, &cs, &n);
            if (rc == 0)
                rc = keg_meta_write_slices(fs->meta, ip->ino, n, cs, keep ? 0 : end, 0,
                                           NULL, &a);
        } else if (!keep && off + len > a.size) {
            rc = keg_meta_truncate(fs->meta, ip->ino, off + len, &a);
        }
    }
    fs_inode_drop_chunks(ip);
    if (rc == 0)
        fs_inode_set_attr(ip, &a);
out:
    pthread_mutex_unlock(&ip->mu);
    keg_free(cs);
    return rc;
}

/*----------------------------------------------------------------------------
 * copy_file_range
 *--------------------------------------------------------------------------*/

struct cs_vec {
    struct keg_chunk_slice *v;
    size_t n, cap;
};

static int csv_push(struct cs_vec *cv, uint32_t indx, const struct keg_slice *s)
{
    if (cv->n == cv->cap) {
        size_t ncap = cv->cap ? cv->cap * 2 : 64;
        struct keg_chunk_slice *nv = keg_realloc(cv->v, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        cv->v = nv;
        cv->cap = ncap;
    }
    cv->v[cv->n].indx = indx;
    cv->v[cv->n].s = *s;
    cv->n++;
    return 0;
}

/* The slice references that place src bytes [off_in, off_in+len) at off_out. */
static int copy_plan(struct keg_fs *fs, uint64_t src, uint64_t off_in, uint64_t off_out,
                     uint64_t len, struct cs_vec *cv)
{
    int rc = 0;
    cv->n = 0;
    for (uint64_t p = off_in; p < off_in + len;) {
        uint32_t indx = (uint32_t)(p / KEG_CHUNK_SIZE);
        uint32_t cfrom = (uint32_t)(p % KEG_CHUNK_SIZE);
        uint32_t cto = (uint32_t)KEG_MIN(KEG_CHUNK_SIZE, cfrom + (off_in + len - p));
        struct keg_slice *sl = NULL;
        struct fs_seg *seg = NULL;
        size_t nsl = 0;
        size_t nseg = 0;

        rc = keg_meta_read_chunk(fs->meta, src, indx, &sl, &nsl);
        if (rc < 0)
            return rc;
        rc = fs_layout(sl, nsl, cfrom, cto, &seg, &nseg);
        keg_free(sl);
        if (rc < 0)
            return rc;
        for (size_t k = 0; k < nseg && rc == 0; k++) {
            uint64_t sp = (uint64_t)indx * KEG_CHUNK_SIZE + seg[k].pos;
            uint64_t q = off_out + (sp - off_in);
            uint32_t used = 0;
            while (used < seg[k].len) {
                uint32_t qpos = (uint32_t)(q % KEG_CHUNK_SIZE);
                uint32_t l = (uint32_t)KEG_MIN((uint64_t)(seg[k].len - used),
                                               KEG_CHUNK_SIZE - qpos);
                struct keg_slice s;
                if (seg[k].id) {
                    s.id = seg[k].id;
                    s.size = seg[k].size;
                    s.off = seg[k].soff + used;
                } else {
                    s.id = 0;
                    s.size = l;
                    s.off = 0;
                }
                s.len = l;
                s.pos = qpos;
                rc = csv_push(cv, (uint32_t)(q / KEG_CHUNK_SIZE), &s);
                if (rc < 0)
                    break;
                used += l;
                q += l;
            }
        }
        keg_free(seg);
        if (rc < 0)
            return rc;
        p += cto - cfrom;
    }
    return 0;
}

/* Sleep before re-planning a copy whose source changed: 1, 2, 4 .. 64 ms,
 * each a random time in [d/2, d] so that racing copies spread out. */
static void copy_backoff(unsigned attempt)
{
    int64_t ms = (int64_t)keg_backoff_ms(attempt, 1, 64);
    keg_sleep_ns(ms * 500000 + (int64_t)(keg_rand64() % (uint64_t)(ms * 500000 + 1)));
}

/* The fallback of a copy that could not share the source's slices: the bytes
 * are read and written through dst's buffer like write(2) would.  src bytes
 * [off_in, off_in+n) are committed and do not overlap the destination range.
 * Returns the bytes copied (short at the source's current end) or -errno.
 * LOCKS: neither src->mu nor dst->mu may be held. */
static ssize_t copy_bytes(struct keg_fs *fs, struct fs_inode *src, uint64_t off_in,
                          struct fs_inode *dst, uint64_t off_out, uint64_t n)
{
    size_t cap = (size_t)KEG_MIN(n, (uint64_t)FS_COPY_BUF);
    uint8_t *buf = keg_malloc(cap);
    uint64_t done = 0;
    ssize_t rc = 0;

    if (!buf)
        return -ENOMEM;
    while (done < n) {
        size_t l = (size_t)KEG_MIN(n - done, (uint64_t)cap);
        rc = fs_read_range(fs, src, off_in + done, buf, l);
        if (rc <= 0)
            break;
        l = (size_t)rc;
        rc = write_at(fs, dst, off_out + done, buf, l);
        if (rc < 0)
            break;
        done += l;
    }
    keg_free(buf);
    if (rc < 0 && done == 0)
        return rc;
    return (ssize_t)done;
}

ssize_t keg_fs_copy_range(struct keg_fs *fs, const struct keg_ctx *c, struct keg_fh *in,
                          uint64_t off_in, struct keg_fh *out, uint64_t off_out, size_t len,
                          int flags)
{
    struct fs_inode *src = in->ip;
    struct fs_inode *dst = out->ip;
    struct cs_vec cv = {0};
    struct keg_attr a;
    uint64_t n;
    int rc;

    KEG_UNUSED(c);
    if (flags != 0)
        return -EINVAL;
    if (fs->read_only)
        return -EROFS;
    if ((out->flags & O_ACCMODE) == O_RDONLY || (in->flags & O_ACCMODE) == O_WRONLY)
        return -EBADF;
    if (len == 0)
        return 0;
    if (off_out >= FS_MAX_FILE_SIZE || len > FS_MAX_FILE_SIZE - off_out)
        return -EFBIG;
    if (src == dst && off_in < off_out + len && off_out < off_in + len)
        return -EINVAL;
    rc = fs_flush_inode(fs, src, 0);
    if (rc == 0 && dst != src)
        rc = fs_flush_inode(fs, dst, 0);
    if (rc < 0)
        return rc;
    rc = keg_meta_getattr(fs->meta, src->ino, &a);
    if (rc < 0)
        return rc;
    if (!S_ISREG(a.mode))
        return -EINVAL;
    if (off_in >= a.size)
        return 0;
    n = KEG_MIN((uint64_t)len, a.size - off_in);

    /* The plan names the source's slices as read_chunk saw them; compaction
     * (here or on another mounter) or a truncate may drop one of them before
     * write_slices adds the references, which the engine then refuses with
     * -EAGAIN and changes nothing.  Plan again from the new slice lists, with
     * a short backoff; a source that keeps changing is copied byte by byte. */
    pthread_mutex_lock(&dst->mu);
    rc = fs_commit_locked(fs, dst);     /* a write may have raced in */
    for (unsigned attempt = 0; rc == 0; attempt++) {
        rc = copy_plan(fs, src->ino, off_in, off_out, n, &cv);
        if (rc < 0)
            break;
        rc = keg_meta_write_slices(fs->meta, dst->ino, cv.n, cv.v, off_out + n,
                                   KEG_WS_SHARE, NULL, &a);
        if (rc != -EAGAIN || attempt + 1 >= FS_COPY_RETRIES)
            break;
        KEG_DEBUG("copy_range: source of inode %llu changed, retrying",
                  (unsigned long long)src->ino);
        copy_backoff(attempt);
        rc = 0;
    }
    fs_inode_drop_chunks(dst);
    if (rc == 0)
        fs_inode_set_attr(dst, &a);
    if (rc != -EAGAIN)
        usync_note(dst, NULL);          /* shares the source's blocks: sync them all */
    pthread_mutex_unlock(&dst->mu);
    keg_free(cv.v);
    if (rc == -EAGAIN) {
        KEG_DEBUG("copy_range: source of inode %llu kept changing, copying the bytes",
                  (unsigned long long)src->ino);
        return copy_bytes(fs, src, off_in, dst, off_out, n);
    }
    return rc < 0 ? rc : (ssize_t)n;
}

/*----------------------------------------------------------------------------
 * lseek SEEK_DATA / SEEK_HOLE
 *--------------------------------------------------------------------------*/

int64_t keg_fs_lseek(struct keg_fs *fs, struct keg_fh *fh, uint64_t off, int whence)
{
    struct fs_inode *ip = fh->ip;
    struct keg_attr a;
    int want_data;
    int rc;

    if (whence == SEEK_DATA)
        want_data = 1;
    else if (whence == SEEK_HOLE)
        want_data = 0;
    else
        return -EINVAL;
    rc = fs_flush_inode(fs, ip, 0);
    if (rc < 0)
        return rc;
    rc = keg_meta_getattr(fs->meta, ip->ino, &a);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&ip->mu);
    fs_inode_set_attr(ip, &a);
    pthread_mutex_unlock(&ip->mu);
    if (off >= a.size)
        return -ENXIO;

    for (uint64_t p = off; p < a.size;) {
        uint32_t indx = (uint32_t)(p / KEG_CHUNK_SIZE);
        uint64_t base = (uint64_t)indx * KEG_CHUNK_SIZE;
        uint32_t cpos = (uint32_t)(p - base);
        struct fs_chunk *ch = NULL;
        int64_t found = -1;

        pthread_mutex_lock(&ip->mu);
        rc = fs_inode_chunk(fs, ip, indx, &ch);
        if (rc == 0) {
            for (size_t k = 0; k < ch->nseg; k++) {
                const struct fs_seg *s = &ch->seg[k];
                if ((uint64_t)s->pos + s->len <= cpos)
                    continue;
                uint64_t at = base + KEG_MAX(s->pos, cpos);
                if (at >= a.size)
                    break;
                if ((s->id != 0) == want_data) {
                    found = (int64_t)at;
                    break;
                }
            }
        }
        pthread_mutex_unlock(&ip->mu);
        if (rc < 0)
            return rc;
        if (found >= 0)
            return found;
        p = base + KEG_CHUNK_SIZE;
        if (want_data && p < a.size) {
            /* skip the chunks that hold nothing (a huge sparse file) */
            uint32_t next = 0;
            rc = keg_meta_next_chunk(fs->meta, ip->ino, indx + 1, &next);
            if (rc == -ENOENT)
                return -ENXIO;
            if (rc == 0 && next > indx + 1)
                p = (uint64_t)next * KEG_CHUNK_SIZE;
            else if (rc < 0 && rc != -ENOSYS)
                return rc;
        }
    }
    return want_data ? -ENXIO : (int64_t)a.size;
}

/*----------------------------------------------------------------------------
 * Inspection
 *--------------------------------------------------------------------------*/

int keg_fs_chunks(struct keg_fs *fs, uint64_t ino, keg_fs_info_cb *cb, void *arg)
{
    struct fs_inode *ip = fs_inode_find(fs, ino);
    struct keg_attr a;
    int rc = 0;

    if (ip) {
        rc = fs_flush_inode(fs, ip, 0);
        fs_inode_put(fs, ip);
        if (rc < 0)
            return rc;
    }
    rc = keg_meta_getattr(fs->meta, ino, &a);
    if (rc < 0)
        return rc;
    if (!S_ISREG(a.mode))
        return 0;
    uint64_t nchunks = (a.size + KEG_CHUNK_SIZE - 1) / KEG_CHUNK_SIZE;
    for (uint64_t i = 0; i < nchunks; i++) {
        struct keg_slice *sl = NULL;
        size_t n = 0;
        rc = keg_meta_read_chunk(fs->meta, ino, (uint32_t)i, &sl, &n);
        if (rc < 0)
            return rc;
        for (size_t k = 0; k < n && rc == 0; k++)
            rc = cb(arg, (uint32_t)i, &sl[k]);
        keg_free(sl);
        if (rc != 0)
            return rc < 0 ? rc : 0;
    }
    return 0;
}
