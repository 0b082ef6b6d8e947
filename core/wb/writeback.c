/* writeback.c -- the "writeback" layer: puts are staged on local disk and uploaded by workers.
 *
 * DESIGN
 * put of a block object writes it to <dir>/staging/<slot>/<escaped key> (same
 * file format as the SSD cache, ssdf/ssd_format.h, kind "staged"; temp +
 * rename, NOT fsync'ed), queues it and returns: once put returned, a crash of
 * the mounter cannot lose the object, because the file is on disk.  sync()
 * fsyncs every staged file not yet fsync'ed and the slot directory, then
 * syncs inner: after it returns, power loss cannot lose what was put before.
 * A pool of conf->workers threads uploads staged files to inner (reading and
 * verifying the file first).  An upload is one request to inner, which
 * retries transient errors within its own deadline (obj_retry.c, obj_s3.c);
 * an upload that failed anyway is PARKED and tried again later, for ever:
 * after conf->backoff_ms, doubling per failure of that object up to
 * conf->park_ms (jittered), and after park_ms at once on a permanent error
 * (-EACCES, -EPERM, -EINVAL, -EROFS, -ENAMETOOLONG, -ENOSYS, -ENOTSUP); drain,
 * close and the next open try parked objects at once.  No application waits
 * for an upload (fsync waits for the staging files only, see sync below), so
 * no deadline ends these retries; from an object's conf->retries-th failure
 * on, each failure is an ERROR line (docs/durability.md, "One retry policy").  A successful upload removes
 * the staging file; when the object had been fsync'ed and the bottom store
 * does not promise durable puts (KEG_OBJ_CAP_DURABLE: s3 does, file without
 * fsync does not), inner is synced first, so an fsync'ed object is always
 * durable somewhere.
 *
 * Objects that are not blocks (e.g. "<vol>/.kegfs-probe-*"), and objects
 * larger than max_staging, are written through synchronously.
 *
 * Backpressure: the staged bytes (plus bytes of puts being written) never
 * exceed max_staging, except that one object is always admitted into an
 * empty staging area.  A put that does not fit waits on a condition variable
 * for uploads to make room; if nothing is uploaded for park_ms + 1 s while
 * it waits (every staged object fails), it returns -EIO.
 *
 * Slots: <dir>/staging/<n>/ (n = 0..15), each with a ".lock" file held with
 * flock() while a mounter uses it, so several mounters of one volume on one
 * node can share a cache directory.  At open a mounter takes the first free
 * slot, moves into it the files of every other free slot (their mounter
 * died), removes temp files, and queues every staged file (crash recovery).
 *
 * States of a staged object (struct wb_ent):
 *   QUEUED     on wb->ready, waiting for a worker
 *   UPLOADING  a worker is putting it to inner (on no list)
 *   PARKED     on wb->parked: its upload failed; retried at retry_at
 *   (gone)     uploaded and its file removed, or deleted
 * Transitions:
 *   put           -> QUEUED (or, for a key already staged: gen++, a PARKED entry -> QUEUED)
 *   worker picks  QUEUED -> UPLOADING;   due PARKED -> QUEUED
 *   upload ok     UPLOADING -> gone, or -> QUEUED if gen changed meanwhile (re-put)
 *   upload fails  UPLOADING -> PARKED
 *   del           QUEUED/PARKED -> gone; UPLOADING: deleted = 1, del waits, worker -> gone
 * list merges the staged keys into inner's listing (byte order, no duplicates), so
 * every object whose put returned is listed.
 * Invariants (under wb->mu):
 *   | entry in hash                 <=> its staging file exists (or is being replaced by a put) |
 *   | QUEUED <=> on ready; PARKED <=> on parked; UPLOADING <=> on no list, counted in uploading  |
 *   | staged_bytes == sum of size over entries + bytes reserved by puts being written           |
 *   | unsynced == number of entries with synced == 0                                            |
 *   | synced == 1 => the file and its directory entry were fsync'ed after its last put          |
 *   | an UPLOADING entry is freed only by its worker                                            |
 * LOCKS: wb->mu guards everything above; file I/O and inner calls run without
 * it, except the unlink of an uploaded file (so a concurrent re-put of the
 * same key cannot be unlinked by mistake).
 */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "wb"
#include "../ssdf/ssd_file.h"
#include "../ssdf/ssd_format.h"
#include "../stack_i.h"
#include "keg/hash.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/metrics.h"
#include "keg/retry.h"

#define WB_ROOM_TRIES     4         /* cache evictions for one put that found the disk full */
#define WB_ROOM_WAITS     64        /* uploads it waits for when the cache has nothing left */
#define WB_SLOTS          16
#define WB_RATE_SLOTS     8
#define WB_RATE_WINDOW    5         /* seconds averaged by rate_bps */
#define WB_HOLD_MAX_NS (4 * 1000000000LL) /* longest extra hold in a burst of puts */
#define WB_QUIET_MIN_NS  250000000LL  /* no new object for this long (or the upload delay,
                                       * if longer): the idle workers join the uploads */
#define WB_IDLE_BUF_KEEP (1u << 20)   /* an idle worker frees a larger read buffer */
#define WB_DIRECT_WRITE (1u << 20) /* staged objects this large are written with O_DIRECT */
#define WB_DIO_BUFS     2          /* aligned buffers for those (ssd_file.c) */
#define WB_BYPASS_WARN_NS (30 * 1000000000LL) /* one "staging failed" or "upload failed"
                                                * WARN per 30 s */

enum wb_state { WB_QUEUED, WB_UPLOADING, WB_PARKED };

struct wb_ent {
    struct wb_ent *hnext;          /* hash chain */
    struct wb_ent *prev, *next;    /* on wb->ready or wb->parked */
    enum wb_state  state;
    int            synced;         /* file fsync'ed since the last put */
    int            deleted;        /* del() waits for the worker to drop it */
    unsigned       gen;            /* bumped by each put of the key */
    int            last_err;       /* last upload error (-errno), 0 if none */
    int64_t        retry_at;       /* PARKED: monotonic ns of the next attempt */
    unsigned       fails;          /* failed uploads in a row */
    int64_t        due;            /* QUEUED: not uploaded before (upload delay), ns */
    int            local_only;     /* put here and never handed to a worker: the store
                                    * cannot have it (with write-once keys) */
    int64_t        staged_ns;      /* monotonic ns since its bytes wait for an upload (the
                                    * put; recovered: the file's mtime; put again while
                                    * uploading: that put, once the upload ends) */
    int64_t        reput_ns;       /* put again while uploading: when; else 0 */
    size_t         hidx;           /* position in wb->age + 1; 0: not in it */
    uint64_t       size;           /* object bytes */
    char           key[];
};

struct wb {
    char           *dir;           /* our slot directory */
    int             dirfd;         /* O_DIRECTORY fd of dir */
    int             lockfd;        /* flock'ed <slot>/.lock */
    uint64_t        max_staging;
    unsigned        drain_ms, retries, backoff_ms, park_ms;
    int             inner_durable; /* bottom store has KEG_OBJ_CAP_DURABLE */
    struct keg_ssd_spare *spare;   /* spare files of the cache below (BORROWED), or NULL */
    struct keg_ssd_dio *dio;       /* buffers for direct writes of large objects, or NULL */
    int             dio_noted;     /* logged that direct I/O is refused; atomic access */
    unsigned        nworkers;      /* workers that upload at any time */
    unsigned        nidle;         /* all workers: nworkers and those that upload only
                                    * while the mount is quiet (wb_quiet_at) */
    pthread_t      *threads;       /* [nidle] */
    unsigned        nthreads;      /* started */
    struct keg_obj *o;

    pthread_mutex_t mu;
    pthread_cond_t  work_cv;       /* workers: work queued, or stop (monotonic clock) */
    pthread_cond_t  quiet_cv;      /* the same for the idle workers (monotonic clock) */
    unsigned        idle_asleep;   /* idle workers waiting with nothing queued; mu */
    unsigned        next_worker;   /* numbers the workers as they start; mu */
    pthread_cond_t  done_cv;       /* an upload finished / room freed (monotonic clock) */
    struct wb_ent **ht;            /* protected by mu */
    size_t          nbuckets;
    size_t          nents;         /* protected by mu */
    struct wb_ent   ready;         /* sentinel, FIFO; protected by mu */
    struct wb_ent   parked;        /* sentinel; protected by mu */
    uint64_t        staged_bytes;  /* protected by mu */
    uint64_t        unsynced;      /* protected by mu */
    uint64_t        uploading;     /* protected by mu */
    uint64_t        nparked;       /* protected by mu */
    uint64_t        reserving;     /* puts writing a staging file; protected by mu */
    uint64_t        waiting_puts;  /* protected by mu */
    uint64_t        uploaded_bytes, uploaded_objects, upload_errors; /* protected by mu */
    uint64_t        skipped_uploads; /* deleted before any upload; protected by mu */
    int64_t         rate_sec[WB_RATE_SLOTS];    /* protected by mu */
    uint64_t        rate_bytes[WB_RATE_SLOTS];  /* protected by mu */
    int             stop;          /* protected by mu */
    uint64_t        bypassed;      /* puts not staged for lack of disk space; protected by mu */
    int64_t         fail_warned;   /* keg_mono_ns of the last "upload failed" WARN; mu */
    uint64_t        fails_seen;    /* failed attempts since the last success; protected by mu */
    int             fails_said;    /* ... and a WARN told about them; protected by mu */
    int64_t         bypass_warned; /* keg_mono_ns of the last WARN about them; protected by mu */
    int64_t         delay_ns;      /* upload delay of a new object */
    int64_t         last_put_ns;   /* monotonic time of the last staged put; protected by mu */
    int             write_once;    /* conf->keys_write_once */
    unsigned        hurry;         /* drains/closes waiting: no delay; protected by mu */
    /* the entries not deleted, a binary min-heap on staged_ns, so that the age of
     * the oldest staged bytes (keg_wb_stats, once a second and at each scrape) is
     * its root instead of a walk of every entry under mu; age_lost: an entry could
     * not be added (no memory), so keg_wb_stats walks the entries again */
    struct wb_ent **age;           /* protected by mu */
    size_t          nage, capage;  /* protected by mu */
    int             age_lost;      /* protected by mu */
    struct keg_metrics_hist stage_lat; /* staged puts, entry to return (atomic) */
};

/*---------------------------------------------------------------------------
 * Small helpers
 *-------------------------------------------------------------------------*/

/* The age heap (wb->age).  LOCKS: caller holds wb->mu for all of these. */
static void age_put(struct wb *wb, size_t i, struct wb_ent *e)
{
    wb->age[i] = e;
    e->hidx = i + 1;
}

static void age_up(struct wb *wb, size_t i)
{
    struct wb_ent *e = wb->age[i];
    while (i > 0 && wb->age[(i - 1) / 2]->staged_ns > e->staged_ns) {
        age_put(wb, i, wb->age[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    age_put(wb, i, e);
}

static void age_down(struct wb *wb, size_t i)
{
    struct wb_ent *e = wb->age[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= wb->nage)
            break;
        if (c + 1 < wb->nage && wb->age[c + 1]->staged_ns < wb->age[c]->staged_ns)
            c++;
        if (wb->age[c]->staged_ns >= e->staged_ns)
            break;
        age_put(wb, i, wb->age[c]);
        i = c;
    }
    age_put(wb, i, e);
}

/* Takes e out of the heap (no-op when it is not in it). */
static void wb_age_drop(struct wb *wb, struct wb_ent *e)
{
    size_t i = e->hidx;
    if (!i)
        return;
    i--;
    e->hidx = 0;
    struct wb_ent *last = wb->age[--wb->nage];
    if (i == wb->nage)
        return;
    age_put(wb, i, last);
    age_up(wb, i);
    age_down(wb, last->hidx - 1);
}

/* Sets e's staged_ns and puts it in the heap or moves it there. */
static void wb_age_set(struct wb *wb, struct wb_ent *e, int64_t ns)
{
    e->staged_ns = ns;
    if (e->hidx) {
        age_up(wb, e->hidx - 1);
        age_down(wb, e->hidx - 1);
        return;
    }
    if (wb->nage == wb->capage) {
        size_t nc = wb->capage ? wb->capage * 2 : 256;
        struct wb_ent **na = keg_realloc(wb->age, nc * sizeof(*na));
        if (!na) {
            wb->age_lost = 1;
            return;
        }
        wb->age = na;
        wb->capage = nc;
    }
    age_put(wb, wb->nage++, e);
    age_up(wb, wb->nage - 1);
}

static size_t wb_hash(const char *key)
{
    uint64_t h = keg_fnv1a64_str(key);
    return (size_t)(h ^ (h >> 29));
}

static void wb_deadline(struct timespec *ts, int64_t mono_ns)
{
    ts->tv_sec = (time_t)(mono_ns / 1000000000LL);
    ts->tv_nsec = (long)(mono_ns % 1000000000LL);
}

static int wb_permanent(int rc)
{
    return rc == -EACCES || rc == -EPERM || rc == -EINVAL || rc == -EROFS ||
           rc == -ENAMETOOLONG || rc == -ENOSYS || rc == -ENOTSUP;
}

/* LOCKS: caller holds wb->mu. */
static struct wb_ent *wb_find(struct wb *wb, const char *key)
{
    struct wb_ent *e = wb->ht[wb_hash(key) & (wb->nbuckets - 1)];
    while (e && strcmp(e->key, key) != 0)
        e = e->hnext;
    return e;
}

static void list_del(struct wb_ent *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = NULL;
}

static void list_add_tail(struct wb_ent *head, struct wb_ent *e)
{
    e->prev = head->prev;
    e->next = head;
    head->prev->next = e;
    head->prev = e;
}

/* LOCKS: caller holds wb->mu. */
static void wb_hash_add(struct wb *wb, struct wb_ent *e)
{
    if (wb->nents >= wb->nbuckets) {
        size_t nb = wb->nbuckets * 2;
        struct wb_ent **ht = keg_calloc(nb, sizeof(*ht));
        if (ht) {
            for (size_t i = 0; i < wb->nbuckets; i++) {
                struct wb_ent *x = wb->ht[i];
                while (x) {
                    struct wb_ent *n = x->hnext;
                    size_t b = wb_hash(x->key) & (nb - 1);
                    x->hnext = ht[b];
                    ht[b] = x;
                    x = n;
                }
            }
            keg_free(wb->ht);
            wb->ht = ht;
            wb->nbuckets = nb;
        }
    }
    size_t b = wb_hash(e->key) & (wb->nbuckets - 1);
    e->hnext = wb->ht[b];
    wb->ht[b] = e;
    wb->nents++;
}

/* Removes e from the hash and its list and accounts for it; the caller
 * frees it.  LOCKS: caller holds wb->mu. */
static void wb_forget(struct wb *wb, struct wb_ent *e)
{
    struct wb_ent **pp = &wb->ht[wb_hash(e->key) & (wb->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    wb->nents--;
    wb_age_drop(wb, e);
    if (e->state == WB_QUEUED)
        list_del(e);
    else if (e->state == WB_PARKED) {
        list_del(e);
        wb->nparked--;
    }
    wb->staged_bytes -= e->size;
    if (!e->synced)
        wb->unsynced--;
    pthread_cond_broadcast(&wb->done_cv);
}

/* OWNERSHIP: new entry (keg_free), NULL on ENOMEM. */
static struct wb_ent *wb_ent_new(const char *key, uint64_t size)
{
    size_t kl = strlen(key);
    struct wb_ent *e = keg_calloc(1, sizeof(*e) + kl + 1);
    if (!e)
        return NULL;
    memcpy(e->key, key, kl + 1);
    e->size = size;
    return e;
}

/* LOCKS: caller holds wb->mu. */
static void wb_rate_add(struct wb *wb, uint64_t bytes)
{
    int64_t s = keg_mono_ns() / 1000000000LL;
    unsigned i = (unsigned)(s % WB_RATE_SLOTS);
    if (wb->rate_sec[i] != s) {
        wb->rate_sec[i] = s;
        wb->rate_bytes[i] = 0;
    }
    wb->rate_bytes[i] += bytes;
}

/* LOCKS: caller holds wb->mu. */
static uint64_t wb_rate(struct wb *wb)
{
    int64_t s = keg_mono_ns() / 1000000000LL;
    uint64_t sum = 0;
    for (unsigned i = 0; i < WB_RATE_SLOTS; i++) {
        if (wb->rate_sec[i] > s - WB_RATE_WINDOW && wb->rate_sec[i] <= s)
            sum += wb->rate_bytes[i];
    }
    return sum / WB_RATE_WINDOW;
}

/* Wakes every worker, the idle ones too (stop, hurry, puts waiting for room).
 * LOCKS: caller holds wb->mu. */
static void wb_wake_all(struct wb *wb)
{
    pthread_cond_broadcast(&wb->work_cv);
    pthread_cond_broadcast(&wb->quiet_cv);
}

/* Makes every PARKED entry due now (drain, close).  LOCKS: caller holds wb->mu. */
static void wb_kick_parked(struct wb *wb)
{
    for (struct wb_ent *e = wb->parked.next; e != &wb->parked; e = e->next)
        e->retry_at = 0;
    wb_wake_all(wb);
}

/*---------------------------------------------------------------------------
 * Staging files
 *-------------------------------------------------------------------------*/

/* Writes the image of a staged object into fd (open for writing at offset 0;
 * a reused spare is cut to the image).  Returns 0 or -errno (-ENOSPC for a
 * full disk or quota). */
static int wb_write_image(struct wb *wb, int fd, const char *key, const void *obj, size_t len)
{
    int rc;

    /* A large object goes to the disk now, with O_DIRECT: no page cache pages
     * to fill (the slow part of a large write here), and a later fsync() finds
     * little left to write.  Small ones go through the page cache: most are
     * replaced within the upload delay, and one synchronous disk request per
     * small file would cost more than it saves.  Where direct I/O is refused,
     * a large object is written buffered and its writeback started at once. */
    rc = len >= WB_DIRECT_WRITE
             ? keg_ssd_file_write_direct(wb->dio, fd, KEGC_KIND_STAGED, key, obj, len)
             : -EAGAIN;
    if (rc == -EAGAIN) {
        if (keg_ssd_dio_refused(wb->dio) &&
            !__atomic_exchange_n(&wb->dio_noted, 1, __ATOMIC_RELAXED))
            KEG_INFO("%s refuses direct I/O: large blocks are staged through the page cache",
                     wb->dir);
        rc = keg_ssd_file_write(fd, KEGC_KIND_STAGED, key, obj, len);
        if (rc == 0)
            rc = keg_ssd_file_fit(fd, KEGC_HDR + strlen(key) + (uint64_t)len);
        if (rc == 0 && len >= WB_DIRECT_WRITE)
            (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    }
    return rc == -EDQUOT ? -ENOSPC : rc;
}

/* A staging file written through a spare file (keg_ssd_spare_put). */
struct wb_image {
    struct wb  *wb;
    const char *key;
    const void *obj;
    size_t      len;
};

static int wb_image_fill(void *arg, int fd)
{
    struct wb_image *im = arg;
    return wb_write_image(im->wb, fd, im->key, im->obj, im->len);
}

/* Writes the staging file of key, no fsync: a spare file of the cache below,
 * written where it lies in its pool and renamed to name, when there is one;
 * else a temp file renamed to name.  BORROWS: everything.  Returns 0 or -errno. */
static int wb_stage_file(struct wb *wb, const char *key, const char *name, const void *obj,
                         size_t len)
{
    struct wb_image im = {wb, key, obj, len};
    char tmp[KEGC_NAME_MAX + 32];
    int fd, rc;

    rc = wb->spare ? keg_ssd_spare_put(wb->spare, wb->dirfd, name, 0, wb_image_fill, NULL, &im)
                   : -ENOENT;
    if (rc != -ENOENT)          /* written through a spare, or failed writing it */
        return rc;
    snprintf(tmp, sizeof(tmp), KEGC_TMP_PREFIX "%s.XXXXXX", name);
    /* mkostempat does not exist: make the name relative to the slot by hand. */
    for (int attempt = 0;; attempt++) {
        static const char az[] = "abcdefghijklmnopqrstuvwxyz0123456789";
        uint64_t r = (uint64_t)keg_mono_ns() ^ ((uint64_t)(uintptr_t)&tmp << 7) ^
                     ((uint64_t)attempt * 0x9e3779b97f4a7c15ull);
        char *x = tmp + strlen(tmp) - 6;
        for (int i = 0; i < 6; i++, r /= 36)
            x[i] = az[r % 36];
        fd = openat(wb->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST || attempt > 100)
            break;
    }
    if (fd < 0)
        return errno == EDQUOT ? -ENOSPC : -errno;
    rc = wb_write_image(wb, fd, key, obj, len);
    return keg_ssd_file_publish(wb->dirfd, fd, tmp, name, rc);
}

/* Reads and verifies the staging file of key.
 * OWNERSHIP: *file is keg_malloc'ed (caller frees); *obj and *olen point into it.
 * Returns 0, -ENOENT (gone: uploaded or deleted), -EIO (corrupt) or -errno. */
static int wb_read_staged(struct wb *wb, const char *key, const char *name, uint8_t **file,
                          const uint8_t **obj, uint64_t *olen)
{
    uint64_t max = KEG_MAX((uint64_t)KEGC_HDR + KEGC_KEY_MAX + wb->max_staging + 1,
                           (uint64_t)KEGC_HDR + KEGC_KEY_MAX + KEG_BLOCK_HDR + KEG_BLOCK_SIZE_MAX);
    uint8_t *buf;
    size_t flen;
    int rc;

    *file = NULL;
    *obj = NULL;
    *olen = 0;
    rc = keg_ssd_file_read(wb->dirfd, name, max, &buf, &flen);
    if (rc < 0)
        return rc;
    rc = kegc_check(buf, flen, KEGC_KIND_STAGED, key, obj, olen);
    if (rc < 0) {
        keg_free(buf);
        return rc;
    }
    *file = buf;
    return 0;
}

/* Removes the staging file name of an object of size bytes: into the cache's
 * pool of spare files when there is one (SSD-FORMAT.md §1: no inode freed and
 * allocated again per block; most staged blocks of small rewrites are deleted
 * before their upload), else unlinked.  Returns 0 or -errno (-ENOENT: none). */
static int wb_remove_file(struct wb *wb, const char *name, uint64_t size)
{
    return keg_ssd_spare_retire(wb->spare, wb->dirfd, name, KEGC_HDR + KEGC_KEY_MAX + size);
}

/* Moves a corrupt staged file aside as ".bad.<name>" (kept for inspection). */
static void wb_quarantine(struct wb *wb, const char *key, const char *name)
{
    char bad[KEGC_NAME_MAX + 8];
    snprintf(bad, sizeof(bad), KEGC_BAD_PREFIX "%s", name);
    KEG_ERR("staged object %s is corrupt (%s/%s): it was lost before upload; moved to %s",
            key, wb->dir, name, bad);
    if (renameat(wb->dirfd, name, wb->dirfd, bad) < 0)
        unlinkat(wb->dirfd, name, 0);
}

/*---------------------------------------------------------------------------
 * Upload workers
 *-------------------------------------------------------------------------*/

/* A worker's read buffer for staged objects, kept between uploads. */
struct wb_buf {
    uint8_t *p;
    size_t   cap;
};

/* Objects up to this size are read into the worker's buffer. */
#define WB_BUF_MAX ((uint64_t)KEG_BLOCK_HDR + KEG_BLOCK_SIZE_MAX + 64)

static int wb_buf_grow(struct wb_buf *b, uint64_t size)
{
    uint8_t *np = keg_realloc(b->p, (size_t)size);
    if (!np)
        return -ENOMEM;
    b->p = np;
    b->cap = (size_t)size;
    return 0;
}

/* take() of keg_obj_put_file: hands the staging file of an entry being
 * uploaded to the layer below (the SSD cache adopts it instead of writing a
 * copy), unless the key was put again or deleted meanwhile.  Under wb->mu, like
 * the unlink of an uploaded file, so a concurrent re-put is never moved away. */
struct wb_take {
    struct wb     *wb;
    struct wb_ent *e;
    unsigned       gen;             /* e->gen when its upload started */
    const char    *name;            /* staging file name */
};

static int wb_take(void *arg, const char *dst)
{
    struct wb_take *t = arg;
    int rc = 0;

    pthread_mutex_lock(&t->wb->mu);
    if (t->e->gen != t->gen || t->e->deleted)
        rc = -ESTALE;
    else if (t->e->synced && !t->wb->inner_durable)
        rc = -EAGAIN;       /* fsync'ed meanwhile: keep it until inner is synced */
    else if (renameat(t->wb->dirfd, t->name, AT_FDCWD, dst) < 0)
        rc = -errno;
    pthread_mutex_unlock(&t->wb->mu);
    return rc;
}

/* Counts a failed upload attempt of key (its attempt-th in a row).  Failed
 * attempts are a WARN, at most one per WB_BYPASS_WARN_NS, and the next
 * success after one says so: an outage the retries survive must not go
 * unnoticed, nor flood the log.  LOCKS: takes wb->mu. */
static void wb_upload_failed(struct wb *wb, const char *key, int rc, unsigned attempt)
{
    int64_t now = keg_mono_ns();
    uint64_t fails;
    int warn;

    pthread_mutex_lock(&wb->mu);
    wb->upload_errors++;
    wb->fails_seen++;
    warn = !wb->fail_warned || now - wb->fail_warned >= WB_BYPASS_WARN_NS;
    if (warn) {
        wb->fail_warned = now;
        wb->fails_said = 1;
    }
    fails = wb->fails_seen;
    pthread_mutex_unlock(&wb->mu);
    if (warn)
        KEG_WARN("upload of %s failed: %s (attempt %u; %llu failed attempts since the "
                 "last success)%s", key, strerror(-rc), attempt, (unsigned long long)fails,
                 wb_permanent(rc) ? "" : "; retrying");
}

/* Uploads one staged object: one request to inner.  With may_take the
 * layer below may take the staging file over (*taken = 1: it is gone).
 * Returns 0, -ENOENT (its file is gone), -EBADMSG (corrupt, quarantined) or the last -errno. */
static int wb_upload(struct wb *wb, struct wb_ent *e, unsigned gen, uint64_t size,
                     struct wb_buf *wbuf, int may_take, int *taken)
{
    const char *key = e->key;
    char name[KEGC_NAME_MAX + 1];
    struct wb_take t = {wb, e, gen, name};
    uint8_t *file = NULL;
    const uint8_t *obj;
    uint64_t olen;
    int rc;

    *taken = 0;
    if (kegc_escape(key, name) < 0)
        return -ENAMETOOLONG;
    /* Into the worker's own buffer (no fresh 4 MiB mapping per upload); a file
     * that grew since the entry's size was read goes the allocating way. */
    rc = -EMSGSIZE;
    if (size <= WB_BUF_MAX && (wbuf->cap >= size || wb_buf_grow(wbuf, size) == 0)) {
        rc = keg_ssd_file_read_obj(wb->dirfd, name, KEGC_KIND_STAGED, key, wbuf->p, wbuf->cap,
                                   &olen);
        obj = wbuf->p;
    }
    if (rc == -EMSGSIZE)
        rc = wb_read_staged(wb, key, name, &file, &obj, &olen);
    if (rc == -EIO) {
        wb_quarantine(wb, key, name);
        return -EBADMSG;
    }
    if (rc < 0)
        return rc;
    rc = may_take ? keg_obj_put_file(wb->o->inner, key, obj, (size_t)olen, wb_take, &t)
                  : keg_obj_put(wb->o->inner, key, obj, (size_t)olen);
    if (rc >= 0) {
        *taken = rc == 1;
        rc = 0;
        pthread_mutex_lock(&wb->mu);
        uint64_t fails = wb->fails_seen;
        int said = wb->fails_said;
        wb->fails_seen = 0;
        wb->fails_said = 0;
        pthread_mutex_unlock(&wb->mu);
        if (fails && said)
            KEG_INFO("uploads to the store work again (%llu failed attempts before)",
                     (unsigned long long)fails);
    } else {
        wb_upload_failed(wb, key, rc, e->fails + 1);
    }
    keg_free(file);
    return rc;
}

/* When e may be uploaded (monotonic ns), apart from drains and puts waiting
 * for room.  With an upload delay D, an object waits D after its put, and
 * while puts keep coming (the last one less than D ago) it waits for them to
 * pause, but no longer than min(4 D, 4 s) past its own D, and not once the
 * staging area is half full: the uploads, and the object store's work for
 * them, keep out of the way of a burst of writes, as the kernel's background
 * writeback of dirty pages does.  LOCKS: caller holds wb->mu. */
static int64_t wb_due(const struct wb *wb, const struct wb_ent *e)
{
    int64_t quiet, hold;

    if (!wb->delay_ns || e->due == 0)
        return e->due;
    if (wb->staged_bytes * 2 >= wb->max_staging)
        return e->due;
    quiet = wb->last_put_ns + wb->delay_ns;
    hold = e->due + KEG_MIN(4 * wb->delay_ns, WB_HOLD_MAX_NS);
    return KEG_MAX(e->due, KEG_MIN(quiet, hold));
}

/* When the mount is quiet: no new object was put for the upload delay, and
 * at least WB_QUIET_MIN_NS.  From then on the idle workers upload too, so the
 * backlog a burst left drains on more connections, while during the burst
 * the uploads and the store's work for them keep to nworkers and leave the
 * CPUs to the writes (docs/internals/WRITEBACK.md).  LOCKS: caller holds wb->mu. */
static int64_t wb_quiet_at(const struct wb *wb)
{
    return wb->last_put_ns + KEG_MAX(wb->delay_ns, WB_QUIET_MIN_NS);
}

/* Picks the next entry to upload (making due parked entries QUEUED first),
 * or NULL after waiting when there is none.  An idle worker (idle) takes one
 * only once the mount is quiet, or when uploads are urgent (drain, close, puts
 * waiting for room), and waits on its own condition variable, so that it
 * never takes the wake-up of a put meant for the others.
 * LOCKS: caller holds wb->mu. */
static struct wb_ent *wb_pick(struct wb *wb, int idle)
{
    int64_t now = keg_mono_ns(), next = INT64_MAX;
    pthread_cond_t *cv = idle ? &wb->quiet_cv : &wb->work_cv;
    struct timespec ts;

    for (struct wb_ent *e = wb->parked.next; e != &wb->parked;) {
        struct wb_ent *n = e->next;
        if (e->retry_at <= now) {
            list_del(e);
            wb->nparked--;
            e->state = WB_QUEUED;
            list_add_tail(&wb->ready, e);
        } else if (e->retry_at < next) {
            next = e->retry_at;
        }
        e = n;
    }
    if (wb->ready.next != &wb->ready) {
        struct wb_ent *e = wb->ready.next;
        /* FIFO by first put, so the head is due first.  Puts waiting for
         * room, drains and close do not wait for the delay. */
        int urgent = wb->hurry || wb->waiting_puts;
        int64_t calm = idle ? wb_quiet_at(wb) : 0;
        int64_t go = KEG_MAX(wb_due(wb, e), calm);
        if (go <= now || urgent) {
            list_del(e);
            e->state = WB_UPLOADING;
            e->local_only = 0;
            wb->uploading++;
            /* A put wakes one worker, and only when it changes what they wait
             * for (wb_put): the others may sleep untimed.  Pass the wake-up on
             * while the next entry may go too, so that a backlog is uploaded
             * by every worker, not by the one that was awake. */
            if (wb->ready.next != &wb->ready &&
                (urgent || KEG_MAX(wb_due(wb, wb->ready.next), calm) <= now))
                pthread_cond_signal(cv);
            return e;
        }
        next = KEG_MIN(next, go);
    }
    if (next == INT64_MAX) {
        wb->idle_asleep += idle;
        pthread_cond_wait(cv, &wb->mu);
        wb->idle_asleep -= idle;
    } else {
        wb_deadline(&ts, next);
        pthread_cond_timedwait(cv, &wb->mu, &ts);
    }
    return NULL;
}

/* e's upload failed with rc: PARKED until its next attempt, after a backoff
 * that doubles with each failure in a row (jittered: [d/2, d]), park_ms after
 * a permanent error.  LOCKS: caller holds wb->mu. */
static void wb_park(struct wb *wb, struct wb_ent *e, int rc)
{
    uint64_t ms = wb->park_ms;

    e->fails++;
    if (!wb_permanent(rc)) {
        ms = keg_backoff_ms(e->fails - 1, wb->backoff_ms, wb->park_ms);
        ms = ms / 2 + keg_rand64() % (ms / 2 + 1);
    }
    e->state = WB_PARKED;
    e->last_err = rc;
    e->retry_at = keg_mono_ns() + (int64_t)ms * 1000000LL;
    list_add_tail(&wb->parked, e);
    wb->nparked++;
    if (!wb->stop && (wb_permanent(rc) || e->fails >= wb->retries))
        KEG_ERR("upload of %s FAILED: %s%s (%u attempts); it stays staged in %s and is "
                "retried in %.1f s", e->key, strerror(-rc),
                wb_permanent(rc) ? " (permanent)" : "", e->fails, wb->dir, (double)ms / 1000);
}

/* LOCKS: takes wb->mu (dropped around the upload). */
static void *wb_worker(void *arg)
{
    struct wb *wb = arg;
    struct wb_buf wbuf = {NULL, 0};
    int idle;

    keg_thread_name("keg-wb-upload");
    pthread_mutex_lock(&wb->mu);
    idle = wb->next_worker++ >= wb->nworkers;
    while (!wb->stop) {
        struct wb_ent *e = wb_pick(wb, idle);
        unsigned gen;
        uint64_t size;
        int may_take, taken, rc;

        if (!e)
            continue;
        gen = e->gen;
        size = e->size;
        /* An fsync'ed object must stay in its fsync'ed staging file until a
         * store that is not durable by itself has been synced: no hand-over. */
        may_take = wb->inner_durable || !e->synced;
        pthread_mutex_unlock(&wb->mu);
        /* e stays valid: an UPLOADING entry is freed only here.  Its file is
         * about to leave the disk (adopted by the cache below, or removed): the
         * cache counts it as free, so that many uploads ending at once do not
         * each find the disk full of the others' files. */
        keg_cache_ssd_leaving(wb->o->inner, (int64_t)size);
        rc = wb_upload(wb, e, gen, size, &wbuf, may_take, &taken);
        if (idle && wbuf.cap > WB_IDLE_BUF_KEEP) {
            /* the idle workers keep no block-sized buffer between drains */
            keg_free(wbuf.p);
            wbuf = (struct wb_buf){NULL, 0};
        }
        if (rc == 0 && !wb->inner_durable) {
            int synced;
            pthread_mutex_lock(&wb->mu);
            synced = e->synced;
            pthread_mutex_unlock(&wb->mu);
            if (synced)
                rc = keg_obj_sync(wb->o->inner);
        }
        pthread_mutex_lock(&wb->mu);
        wb->uploading--;
        if (e->deleted || rc == -ENOENT || rc == -EBADMSG) {
            /* deleted meanwhile, or its file is gone / quarantined: nothing to upload */
            if (e->deleted) {
                char name[KEGC_NAME_MAX + 1];
                if (kegc_escape(e->key, name) == 0)
                    wb_remove_file(wb, name, e->size);
            }
            wb_forget(wb, e);
            keg_free(e);
        } else if (rc == 0 && e->gen != gen) {
            e->state = WB_QUEUED;          /* put again while uploading: upload the new file */
            if (e->reput_ns)
                wb_age_set(wb, e, e->reput_ns);
            e->reput_ns = 0;
            list_add_tail(&wb->ready, e);
        } else if (rc == 0) {
            char name[KEGC_NAME_MAX + 1];
            int urc = !taken && kegc_escape(e->key, name) == 0
                          ? wb_remove_file(wb, name, e->size) : 0;
            if (urc < 0 && urc != -ENOENT)
                KEG_WARN("removing uploaded staging file %s/%s: %s", wb->dir, name,
                         strerror(-urc));
            wb->uploaded_bytes += e->size;
            wb->uploaded_objects++;
            wb_rate_add(wb, e->size);
            wb_forget(wb, e);
            keg_free(e);
        } else {
            wb_park(wb, e, rc);
        }
        pthread_cond_broadcast(&wb->done_cv);
        /* outside wb->mu: the two layers' locks are never nested */
        pthread_mutex_unlock(&wb->mu);
        keg_cache_ssd_leaving(wb->o->inner, -(int64_t)size);
        pthread_mutex_lock(&wb->mu);
    }
    pthread_mutex_unlock(&wb->mu);
    keg_free(wbuf.p);
    return NULL;
}

/*---------------------------------------------------------------------------
 * Ops
 *-------------------------------------------------------------------------*/

/* Waits for room for len bytes and reserves it.  Returns 0 or -EIO (nothing
 * can be uploaded).  LOCKS: caller holds wb->mu. */
static int wb_reserve(struct wb *wb, const char *key, size_t len)
{
    int64_t limit = (int64_t)(wb->park_ms + 1000) * 1000000LL;
    int64_t deadline = keg_mono_ns() + limit;
    uint64_t seen = wb->uploaded_objects;
    struct timespec ts;

    while (wb->staged_bytes > 0 && wb->staged_bytes + len > wb->max_staging) {
        if (wb->uploaded_objects != seen) {
            seen = wb->uploaded_objects;
            deadline = keg_mono_ns() + limit;
        }
        if (keg_mono_ns() >= deadline) {
            KEG_ERR("put %s: the staging area %s is full (%llu of %llu bytes) and nothing "
                    "could be uploaded for %u s; failing the write", key, wb->dir,
                    (unsigned long long)wb->staged_bytes, (unsigned long long)wb->max_staging,
                    (unsigned)(limit / 1000000000LL));
            return -EIO;
        }
        wb->waiting_puts++;
        wb_wake_all(wb);                           /* delayed objects may go now */
        wb_deadline(&ts, KEG_MIN(deadline, keg_mono_ns() + 1000000000LL));
        pthread_cond_timedwait(&wb->done_cv, &wb->mu, &ts);
        wb->waiting_puts--;
    }
    wb->staged_bytes += len;
    wb->reserving++;
    return 0;
}

/* Staging found the disk full and the cache below had nothing to drop: makes
 * the staged objects due at once and waits until one of them is uploaded (its
 * file goes to the cache or away), for as long as a put waits for room in
 * wb_reserve.  Returns 1 when one was, 0 when none is queued or uploading, or
 * none finished in time.  LOCKS: takes wb->mu. */
static int wb_await_upload(struct wb *wb)
{
    int64_t deadline = keg_mono_ns() + (int64_t)(wb->park_ms + 1000) * 1000000LL;
    uint64_t seen;
    struct timespec ts;
    int done = 0;

    pthread_mutex_lock(&wb->mu);
    seen = wb->uploaded_objects;
    while (!done && (wb->ready.next != &wb->ready || wb->uploading) &&
           keg_mono_ns() < deadline) {
        wb->waiting_puts++;
        wb_wake_all(wb);
        wb_deadline(&ts, KEG_MIN(deadline, keg_mono_ns() + 1000000000LL));
        pthread_cond_timedwait(&wb->done_cv, &wb->mu, &ts);
        wb->waiting_puts--;
        done = wb->uploaded_objects != seen;
    }
    pthread_mutex_unlock(&wb->mu);
    return done;
}

static int wb_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    struct wb *wb = o->priv;
    char name[KEGC_NAME_MAX + 1];
    struct wb_ent *e, *ne;
    uint32_t blen;
    int64_t t0;
    int wake, rc;

    if (!kegc_is_block(key, &blen) || kegc_escape(key, name) < 0 || len > wb->max_staging)
        return keg_obj_put(o->inner, key, buf, len);
    t0 = keg_mono_ns();
    ne = wb_ent_new(key, len);
    if (!ne)
        return -ENOMEM;
    pthread_mutex_lock(&wb->mu);
    rc = wb_reserve(wb, key, len);
    e = rc == 0 ? wb_find(wb, key) : NULL;
    if (e)
        e->gen++;   /* before the file is replaced: an upload in flight must not unlink it */
    pthread_mutex_unlock(&wb->mu);
    if (rc < 0) {
        keg_free(ne);
        return rc;
    }

    rc = wb_stage_file(wb, key, name, buf, len);
    /* Staging comes before caching: drop clean cached blocks (twice the room
     * this object needs: the next puts come soon) and try again.  Puts of
     * other threads may take the room first: again, while blocks are freed.
     * When the cache has nothing left, the disk is full of staged objects
     * (a burst staged faster than the uploads): wait for one to be uploaded,
     * which hands its file to the cache, and drop that. */
    for (int tries = 0, waits = 0; rc == -ENOSPC && tries < WB_ROOM_TRIES;) {
        uint64_t need = 2 * (KEGC_HDR + strlen(key) + (uint64_t)len);
        uint64_t freed = keg_cache_ssd_make_room(o->inner, need);
        if (freed) {
            tries++;
            KEG_DEBUG("staging %s: disk full, %llu bytes of cached blocks dropped", key,
                      (unsigned long long)freed);
        } else if (waits++ >= WB_ROOM_WAITS || !wb_await_upload(wb)) {
            break;
        }
        rc = wb_stage_file(wb, key, name, buf, len);
    }

    pthread_mutex_lock(&wb->mu);
    wb->reserving--;
    if (rc < 0) {
        int64_t now = keg_mono_ns();
        int warn = !wb->bypass_warned || now - wb->bypass_warned >= WB_BYPASS_WARN_NS;
        wb->staged_bytes -= len;
        wb->bypassed++;
        if (warn)
            wb->bypass_warned = now;
        uint64_t bypassed = wb->bypassed;
        pthread_cond_broadcast(&wb->done_cv);
        pthread_mutex_unlock(&wb->mu);
        keg_free(ne);
        /* At most one line per WB_BYPASS_WARN_NS: a full disk would log one per block. */
        if (warn)
            KEG_WARN("staging %s in %s failed (%s): uploading it directly, not through "
                     "writeback (%llu objects so far)", key, wb->dir, strerror(-rc),
                     (unsigned long long)bypassed);
        return keg_obj_put(o->inner, key, buf, len);
    }
    /* The workers sleep until the head of the FIFO is due.  A new entry
     * behind others is due no sooner, so waking them for it is a wasted
     * context switch per put; wake them when the list was empty, when
     * uploads go at once (no delay, or the staging area half full: wb_due)
     * or when a parked entry comes back. */
    wake = wb->ready.next == &wb->ready || !wb->delay_ns ||
           wb->staged_bytes * 2 >= wb->max_staging;
    e = wb_find(wb, key);
    if (e) {
        /* Same key again (a retried write): the new file replaced the old one. */
        wb->staged_bytes -= e->size;
        e->size = len;
        e->gen++;
        if (e->state == WB_UPLOADING)
            e->reput_ns = keg_mono_ns();    /* the bytes of this put wait from now */
        if (e->synced) {
            e->synced = 0;
            wb->unsynced++;
        }
        if (e->state == WB_PARKED) {
            list_del(e);
            wb->nparked--;
            e->state = WB_QUEUED;
            list_add_tail(&wb->ready, e);
            wake = 1;
        }
        keg_free(ne);
    } else {
        e = ne;
        e->state = WB_QUEUED;
        wb->last_put_ns = keg_mono_ns();
        e->due = wb->delay_ns ? wb->last_put_ns + wb->delay_ns : 0;
        e->local_only = 1;
        wb_hash_add(wb, e);
        wb_age_set(wb, e, wb->last_put_ns);
        list_add_tail(&wb->ready, e);
        wb->unsynced++;
    }
    if (wake)
        pthread_cond_signal(&wb->work_cv);
    if (wb->idle_asleep)
        pthread_cond_signal(&wb->quiet_cv);   /* it waits for the quiet from now on */
    pthread_mutex_unlock(&wb->mu);
    keg_metrics_observe(&wb->stage_lat, (uint64_t)(keg_mono_ns() - t0));
    return 0;
}

static ssize_t wb_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len)
{
    struct wb *wb = o->priv;
    char name[KEGC_NAME_MAX + 1];
    const uint8_t *obj;
    uint8_t *file = NULL;
    struct wb_ent *e;
    uint64_t size = 0, olen;
    ssize_t n;
    int rc;

    if (kegc_escape(key, name) < 0)
        return keg_obj_get(o->inner, key, off, buf, len);
    pthread_mutex_lock(&wb->mu);
    e = wb_find(wb, key);
    if (e)
        size = e->size;
    pthread_mutex_unlock(&wb->mu);
    if (!e)
        return keg_obj_get(o->inner, key, off, buf, len);

    /* A get of the whole object (the fs reads whole blocks) is read straight
     * into buf and verified there, as the SSD cache does: no copy of the file
     * allocated (fresh pages per 4 MiB block), no second copy out of it.
     * Larger than buf after all (put again meanwhile): the range path. */
    rc = -EMSGSIZE;
    if (off == 0 && len >= size) {
        rc = keg_ssd_file_read_obj(wb->dirfd, name, KEGC_KIND_STAGED, key, buf, len, &olen);
        if (rc == 0)
            return (ssize_t)olen;
    }
    if (rc == -EMSGSIZE) {
        rc = wb_read_staged(wb, key, name, &file, &obj, &olen);
        if (rc == 0) {
            n = keg_ssd_copy_range(obj, olen, off, buf, len);
            keg_free(file);
            return n;
        }
    }
    if (rc == -EIO && faccessat(wb->dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
        errno == ENOENT)
        rc = -ENOENT;   /* uploaded and handed to the cache while we read it */
    if (rc == -EIO)
        KEG_ERR("staged object %s/%s is corrupt; trying the store", wb->dir, name);
    /* -ENOENT: the uploader just finished and removed it; it is in inner now. */
    n = keg_obj_get(o->inner, key, off, buf, len);
    if (n == -ENOENT && rc == -EIO)
        n = -EIO;
    return n;
}

/* Drops key's staged copy (waiting for an upload under way).  Returns 1 when
 * the key is not in the store below: a write-once key put here and deleted
 * before any upload attempt (nor in the cache below, which only keeps
 * uploaded objects).
 * A write-once key's file is removed after wb->mu is dropped: nothing can put
 * that key again, and writers waiting for the lock (a close's inline put)
 * should not wait for the rename and truncate of every deleted block.  Other
 * keys may be put again at once, so theirs is removed under the lock. */
static int wb_del_local(struct wb *wb, const char *key)
{
    char name[KEGC_NAME_MAX + 1];
    struct wb_ent *e;
    int never_uploaded = 0;
    uint64_t size = 0;
    int remove_later = 0;

    if (kegc_escape(key, name) == 0) {
        pthread_mutex_lock(&wb->mu);
        e = wb_find(wb, key);
        if (e && e->state == WB_UPLOADING) {
            e->deleted = 1;
            wb_age_drop(wb, e);         /* its bytes no longer wait */
            while (wb_find(wb, key) == e)
                pthread_cond_wait(&wb->done_cv, &wb->mu);
        } else if (e) {
            never_uploaded = wb->write_once && e->local_only;
            size = e->size;
            remove_later = wb->write_once;
            if (!remove_later)
                wb_remove_file(wb, name, size);
            wb_forget(wb, e);
            keg_free(e);
            if (never_uploaded)
                wb->skipped_uploads++;
        }
        pthread_mutex_unlock(&wb->mu);
        if (remove_later)
            wb_remove_file(wb, name, size);
    }
    return never_uploaded;
}

static int wb_del(struct keg_obj *o, const char *key)
{
    return wb_del_local(o->priv, key) ? 0 : keg_obj_del(o->inner, key);
}

static int wb_del_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    const char **below = keg_malloc(n * sizeof(*below));
    size_t m = 0;
    if (!below)
        return keg_obj_del_each(o, keys, n);
    for (size_t i = 0; i < n; i++)
        if (!wb_del_local(o->priv, keys[i]))
            below[m++] = keys[i];
    int rc = keg_obj_del_keys(o->inner, below, m);
    keg_free(below);
    return rc;
}

static int wb_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    struct wb *wb = o->priv;
    struct wb_ent *e;

    *size = 0;
    pthread_mutex_lock(&wb->mu);
    e = wb_find(wb, key);
    if (e)
        *size = e->size;
    pthread_mutex_unlock(&wb->mu);
    return e ? 0 : keg_obj_head(o->inner, key, size);
}

/*---------------------------------------------------------------------------
 * list: inner's keys merged with the staged ones, in byte order
 *-------------------------------------------------------------------------*/

struct wb_lkey {
    char    *key;
    uint64_t size;
};

struct wb_merge {
    struct wb_lkey  *v;          /* staged keys with the prefix, sorted */
    size_t           n, i;
    keg_obj_list_cb *cb;
    void            *arg;
};

static int wb_lkey_cmp(const void *a, const void *b)
{
    return strcmp(((const struct wb_lkey *)a)->key, ((const struct wb_lkey *)b)->key);
}

/* Emits the staged keys sorting before key (all when key is NULL), skipping one equal to it. */
static int wb_merge_upto(struct wb_merge *m, const char *key)
{
    while (m->i < m->n) {
        int c = key ? strcmp(m->v[m->i].key, key) : -1;
        int rc;
        if (c > 0)
            break;
        if (c < 0) {
            rc = m->cb(m->arg, m->v[m->i].key, m->v[m->i].size);
            if (rc)
                return rc;
        }
        m->i++;
    }
    return 0;
}

static int wb_merge_cb(void *arg, const char *key, uint64_t size)
{
    struct wb_merge *m = arg;
    int rc = wb_merge_upto(m, key);
    return rc ? rc : m->cb(m->arg, key, size);
}

/* LOCKS: takes wb->mu to copy the staged keys; callbacks run without it. */
static int wb_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg)
{
    struct wb *wb = o->priv;
    struct wb_merge m = {.cb = cb, .arg = arg};
    size_t plen = prefix ? strlen(prefix) : 0, cap;
    int rc = 0;

    pthread_mutex_lock(&wb->mu);
    cap = wb->nents;
    m.v = cap ? keg_calloc(cap, sizeof(*m.v)) : NULL;
    if (cap && !m.v)
        rc = -ENOMEM;
    for (size_t b = 0; m.v && b < wb->nbuckets && rc == 0; b++) {
        for (struct wb_ent *e = wb->ht[b]; e && rc == 0; e = e->hnext) {
            if (plen && strncmp(e->key, prefix, plen) != 0)
                continue;
            m.v[m.n].key = keg_strdup(e->key);
            m.v[m.n].size = e->size;
            if (!m.v[m.n].key)
                rc = -ENOMEM;
            else
                m.n++;
        }
    }
    pthread_mutex_unlock(&wb->mu);
    if (rc == 0) {
        if (m.n)
            qsort(m.v, m.n, sizeof(*m.v), wb_lkey_cmp);
        rc = keg_obj_list(o->inner, prefix, wb_merge_cb, &m);
        if (rc == 0)
            rc = wb_merge_upto(&m, NULL);
    }
    for (size_t i = 0; i < m.n; i++)
        keg_free(m.v[i].key);
    keg_free(m.v);
    return rc;
}

#define WB_SYNC_BATCH 64         /* staged files fsync'ed together */

struct wb_syncing {
    char    *key;
    unsigned gen;
};

#define WB_SYNC_THREADS 4        /* fsyncs of a batch run on this many threads */

struct wb_fsync_part {
    const int *fds;
    size_t     n;
    int        rc;
};

static void wb_fsync_part_run(struct wb_fsync_part *p)
{
    for (size_t k = 0; k < p->n; k++) {
        if (p->fds[k] >= 0 && fsync(p->fds[k]) < 0 && p->rc == 0)
            p->rc = -errno;
    }
}

/* A helper thread of wb_fsync_fds (only those are named: the caller's part
 * runs under the caller's own name, the compactor's or a FUSE handler's). */
static void *wb_fsync_thread(void *arg)
{
    keg_thread_name("keg-wb-fsync");
    wb_fsync_part_run(arg);
    return NULL;
}

/* fsyncs fds[0..n) (-1 entries skipped) on up to WB_SYNC_THREADS threads: on
 * a filesystem without a journal every fsync ends with a flush of the device's
 * write cache (~1 ms here), and flushes issued together are merged by the
 * block layer, while one fsync after the other pays one flush per file.
 * Returns 0 or the first -errno. */
static int wb_fsync_fds(const int *fds, size_t n)
{
    struct wb_fsync_part part[WB_SYNC_THREADS];
    pthread_t thr[WB_SYNC_THREADS];
    int started[WB_SYNC_THREADS] = {0};
    size_t nparts = n >= 8 ? WB_SYNC_THREADS : 1;
    size_t per = (n + nparts - 1) / nparts;
    int rc = 0;

    for (size_t t = 0; t < nparts; t++) {
        size_t lo = KEG_MIN(t * per, n);
        part[t] = (struct wb_fsync_part){fds + lo, KEG_MIN(per, n - lo), 0};
    }
    for (size_t t = 1; t < nparts; t++)
        started[t] = pthread_create(&thr[t], NULL, wb_fsync_thread, &part[t]) == 0;
    wb_fsync_part_run(&part[0]);
    for (size_t t = 1; t < nparts; t++) {
        if (started[t])
            pthread_join(thr[t], NULL);
        else
            wb_fsync_part_run(&part[t]);    /* no thread: here */
    }
    for (size_t t = 0; t < nparts && rc == 0; t++)
        rc = part[t].rc;
    return rc;
}

/* Adds e to v (capacity cap) if it is not synced.  LOCKS: wb->mu held. */
static int wb_sync_add(struct wb_syncing *v, size_t *n, size_t cap, const struct wb_ent *e)
{
    if (!e || e->synced || *n == cap)
        return 0;
    v[*n].key = keg_strdup(e->key);
    v[*n].gen = e->gen;
    if (!v[*n].key)
        return -ENOMEM;
    (*n)++;
    return 0;
}

/* fsyncs the unsynced staged files of keys[0..nkeys) (keys NULL: of every
 * staged object) and the slot directory, then syncs the same keys (or all)
 * in inner.  LOCKS: takes wb->mu (not held during I/O). */
static int wb_sync_set(struct keg_obj *o, const char *const *keys, size_t nkeys)
{
    struct wb *wb = o->priv;
    struct wb_syncing *v = NULL;
    size_t n = 0, cap;
    int rc = 0;

    pthread_mutex_lock(&wb->mu);
    cap = keys ? KEG_MIN(nkeys, (size_t)wb->unsynced) : (size_t)wb->unsynced;
    if (cap) {
        v = keg_calloc(cap, sizeof(*v));
        if (!v)
            rc = -ENOMEM;
    }
    for (size_t i = 0; v && keys && i < nkeys && rc == 0; i++)
        rc = wb_sync_add(v, &n, cap, wb_find(wb, keys[i]));
    for (size_t b = 0; v && !keys && b < wb->nbuckets && rc == 0; b++) {
        for (struct wb_ent *e = wb->ht[b]; e && rc == 0; e = e->hnext)
            rc = wb_sync_add(v, &n, cap, e);
    }
    pthread_mutex_unlock(&wb->mu);

    /* In batches: start the writeback of every file of the batch, then wait
     * for each.  One fsync after the other would write one file at a time
     * (a 1 GiB write is 256 staged blocks); started together, the disk gets
     * them as one stream. */
    for (size_t i = 0; i < n && rc == 0; i += WB_SYNC_BATCH) {
        size_t m = KEG_MIN(n - i, (size_t)WB_SYNC_BATCH);
        int fds[WB_SYNC_BATCH];
        for (size_t k = 0; k < m; k++) {
            char name[KEGC_NAME_MAX + 1];
            fds[k] = -1;
            if (kegc_escape(v[i + k].key, name) < 0)
                continue;
            fds[k] = openat(wb->dirfd, name, O_RDONLY | O_CLOEXEC);
            if (fds[k] < 0 && errno != ENOENT && rc == 0)
                rc = -errno;     /* ENOENT: uploaded or deleted meanwhile */
            if (fds[k] >= 0)
                (void)sync_file_range(fds[k], 0, 0, SYNC_FILE_RANGE_WRITE);
        }
        if (rc == 0)
            rc = wb_fsync_fds(fds, m);
        for (size_t k = 0; k < m; k++) {
            if (fds[k] >= 0)
                close(fds[k]);
        }
    }
    if (rc == 0 && n && fsync(wb->dirfd) < 0)
        rc = -errno;
    if (rc < 0) {
        KEG_ERR("sync of the staging area %s failed: %s", wb->dir, strerror(-rc));
        rc = rc == -ENOMEM ? rc : -EIO;
    }

    pthread_mutex_lock(&wb->mu);
    for (size_t i = 0; i < n; i++) {
        struct wb_ent *e = rc == 0 ? wb_find(wb, v[i].key) : NULL;
        if (e && e->gen == v[i].gen && !e->synced) {
            e->synced = 1;
            wb->unsynced--;
        }
        keg_free(v[i].key);
    }
    pthread_mutex_unlock(&wb->mu);
    keg_free(v);
    if (rc < 0)
        return rc;
    return keys ? keg_obj_sync_keys(o->inner, keys, nkeys) : keg_obj_sync(o->inner);
}

static int wb_sync(struct keg_obj *o)
{
    return wb_sync_set(o, NULL, 0);
}

static int wb_sync_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    return wb_sync_set(o, keys, n);
}

/*---------------------------------------------------------------------------
 * Drain, stats
 *-------------------------------------------------------------------------*/

/* 1 if a PARKED object failed with a transient error (it is retried after its
 * backoff, so a drain waits for it).  LOCKS: caller holds wb->mu. */
static int wb_parked_transient(const struct wb *wb)
{
    for (const struct wb_ent *e = wb->parked.next; e != &wb->parked; e = e->next)
        if (e->retry_at == 0 || !wb_permanent(e->last_err))
            return 1;
    return 0;
}

/* Waits until nothing is QUEUED, UPLOADING, being written or PARKED after a
 * transient error (those are retried meanwhile, with their backoff), or until
 * deadline (monotonic ns).  LOCKS: caller holds wb->mu. */
static void wb_wait_idle(struct wb *wb, int64_t deadline)
{
    struct timespec ts;
    wb_deadline(&ts, deadline);
    wb_kick_parked(wb);
    wb->hurry++;                    /* queued objects go now, whatever their delay */
    wb_wake_all(wb);
    while ((wb->ready.next != &wb->ready || wb->uploading || wb->reserving ||
            wb_parked_transient(wb)) &&
           keg_mono_ns() < deadline)
        pthread_cond_timedwait(&wb->done_cv, &wb->mu, &ts);
    wb->hurry--;
}

int keg_wb_drain(struct keg_obj *o, unsigned timeout_ms, uint64_t *remaining)
{
    struct wb *wb;
    int rc = 0;

    if (remaining)
        *remaining = 0;
    if (!o || o->ops != &keg_wb_ops)
        return -EINVAL;
    wb = o->priv;
    pthread_mutex_lock(&wb->mu);
    wb_wait_idle(wb, keg_mono_ns() + (int64_t)timeout_ms * 1000000LL);
    if (wb->nents) {
        rc = (wb->nents == wb->nparked && !wb->uploading) ? -EIO : -ETIMEDOUT;
    }
    if (remaining)
        *remaining = wb->nents;
    pthread_mutex_unlock(&wb->mu);
    return rc;
}

void keg_wb_set_drain(struct keg_obj *o, unsigned drain_ms)
{
    struct wb *wb;
    if (!o || o->ops != &keg_wb_ops)
        return;
    wb = o->priv;
    pthread_mutex_lock(&wb->mu);
    wb->drain_ms = drain_ms;        /* 0: close neither waits nor hurries uploads */
    pthread_mutex_unlock(&wb->mu);
}

int keg_wb_stats(struct keg_obj *o, struct keg_wb_stats *st)
{
    struct wb *wb;

    memset(st, 0, sizeof(*st));
    if (!o || o->ops != &keg_wb_ops)
        return -EINVAL;
    wb = o->priv;
    pthread_mutex_lock(&wb->mu);
    st->staged_bytes = wb->staged_bytes;
    st->staged_objects = wb->nents;
    st->unsynced_objects = wb->unsynced;
    st->uploading = wb->uploading;
    st->parked = wb->nparked;
    st->uploaded_bytes = wb->uploaded_bytes;
    st->uploaded_objects = wb->uploaded_objects;
    st->upload_errors = wb->upload_errors;
    st->rate_bps = wb_rate(wb);
    st->waiting_puts = wb->waiting_puts;
    st->max_staging = wb->max_staging;
    st->skipped_uploads = wb->skipped_uploads;
    st->stage_latency = &wb->stage_lat;
    /* the oldest bytes waiting: the heap's root, or a walk of the entries when the
     * heap missed one (the ready FIFO is not in staging order once entries park) */
    int64_t oldest = 0;
    if (!wb->age_lost) {
        if (wb->nage)
            oldest = wb->age[0]->staged_ns;
    } else {
        for (size_t b = 0; b < wb->nbuckets; b++)
            for (struct wb_ent *e = wb->ht[b]; e; e = e->hnext)
                if (!e->deleted && (!oldest || e->staged_ns < oldest))
                    oldest = e->staged_ns;
    }
    pthread_mutex_unlock(&wb->mu);
    if (oldest) {
        int64_t age = keg_mono_ns() - oldest;
        st->oldest_ms = age > 0 ? (uint64_t)age / 1000000 : 0;
    }
    return 0;
}

/*---------------------------------------------------------------------------
 * Open: slots, recovery, workers; close
 *-------------------------------------------------------------------------*/

static void wb_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Moves every staged file of the free slot dir `from` into ours.  Returns the count. */
static unsigned wb_adopt(struct wb *wb, int fromfd)
{
    DIR *d = fdopendir(dup(fromfd));
    struct dirent *de;
    unsigned n = 0;

    if (!d)
        return 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') {
            if (strncmp(de->d_name, KEGC_TMP_PREFIX, strlen(KEGC_TMP_PREFIX)) == 0)
                unlinkat(fromfd, de->d_name, 0);
            continue;
        }
        if (renameat(fromfd, de->d_name, wb->dirfd, de->d_name) == 0)
            n++;
    }
    closedir(d);
    if (n)
        fsync(wb->dirfd);
    return n;
}

/* Takes the first free staging slot below base and adopts the files of the
 * other free slots.  Returns 0, -EBUSY (all slots in use) or -errno. */
static int wb_take_slot(struct wb *wb, const char *base)
{
    unsigned adopted = 0;
    int rc = 0;

    for (unsigned i = 0; i < WB_SLOTS && rc == 0; i++) {
        char *slot = keg_asprintf("%s/%u", base, i);
        int dfd = -1, lfd = -1;

        if (!slot)
            return -ENOMEM;
        if (mkdir(slot, 0700) == 0)
            wb_fsync_dir(base);
        dfd = open(slot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0)
            lfd = openat(dfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (lfd < 0) {
            rc = -errno;
            KEG_ERR("staging slot %s cannot be opened: %s", slot, strerror(-rc));
        } else if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
            if (errno != EWOULDBLOCK)
                rc = -errno;
        } else if (wb->dirfd < 0) {
            wb->dir = slot;
            wb->dirfd = dfd;
            wb->lockfd = lfd;
            slot = NULL;
            dfd = lfd = -1;
        } else {
            adopted += wb_adopt(wb, dfd);
        }
        if (lfd >= 0)
            close(lfd);
        if (dfd >= 0)
            close(dfd);
        keg_free(slot);
    }
    if (rc == 0 && wb->dirfd < 0) {
        KEG_ERR("all %d staging slots in %s are in use by other mounters", WB_SLOTS, base);
        rc = -EBUSY;
    }
    if (rc == 0 && adopted)
        KEG_WARN("took over %u staged objects left by a mounter that stopped", adopted);
    return rc;
}

/* Queues every staged file of our slot; removes temp files.  Returns 0 or -errno. */
/* The monotonic ns of wall-clock time t (a staged file's mtime), never later than now. */
static int64_t wb_mono_of(const struct timespec *t)
{
    struct timespec real;
    int64_t now = keg_mono_ns();
    clock_gettime(CLOCK_REALTIME, &real);
    int64_t age = (real.tv_sec - t->tv_sec) * 1000000000LL + (real.tv_nsec - t->tv_nsec);
    return age > 0 ? now - age : now;
}

static int wb_recover(struct wb *wb)
{
    DIR *d = fdopendir(dup(wb->dirfd));
    struct dirent *de;
    int rc = 0;

    if (!d)
        return -errno;
    while ((de = readdir(d)) != NULL) {
        char key[KEGC_NAME_MAX + 1];
        struct stat st;
        struct wb_ent *e;

        if (de->d_name[0] == '.') {
            if (strncmp(de->d_name, KEGC_TMP_PREFIX, strlen(KEGC_TMP_PREFIX)) == 0)
                unlinkat(wb->dirfd, de->d_name, 0);
            continue;
        }
        if (fstatat(wb->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (kegc_unescape(de->d_name, key) < 0 ||
            (uint64_t)st.st_size < KEGC_HDR + strlen(key)) {
            KEG_WARN("ignoring %s/%s: not a staged object", wb->dir, de->d_name);
            continue;
        }
        e = wb_ent_new(key, (uint64_t)st.st_size - KEGC_HDR - strlen(key));
        if (!e) {
            rc = -ENOMEM;
            break;
        }
        e->state = WB_QUEUED;
        wb_hash_add(wb, e);
        wb_age_set(wb, e, wb_mono_of(&st.st_mtim));
        list_add_tail(&wb->ready, e);
        wb->staged_bytes += e->size;
        wb->unsynced++;
    }
    closedir(d);
    if (wb->nents)
        KEG_WARN("%zu staged objects (%llu bytes) in %s were not uploaded before the last "
                 "stop: uploading them now", wb->nents, (unsigned long long)wb->staged_bytes,
                 wb->dir);
    return rc;
}

static void wb_free_all(struct wb *wb)
{
    for (size_t b = 0; wb->ht && b < wb->nbuckets; b++) {
        struct wb_ent *e = wb->ht[b];
        while (e) {
            struct wb_ent *n = e->hnext;
            keg_free(e);
            e = n;
        }
    }
    keg_free(wb->ht);
    keg_free(wb->age);
    keg_free(wb->threads);
    keg_ssd_dio_close(wb->dio);
    if (wb->dirfd >= 0)
        close(wb->dirfd);
    if (wb->lockfd >= 0)
        close(wb->lockfd);   /* releases the slot */
    keg_free(wb->dir);
}

/* Stops the workers (after they finish the upload in hand).  LOCKS: takes wb->mu. */
static void wb_stop_workers(struct wb *wb)
{
    pthread_mutex_lock(&wb->mu);
    wb->stop = 1;
    wb_wake_all(wb);
    pthread_mutex_unlock(&wb->mu);
    for (unsigned i = 0; i < wb->nthreads; i++)
        pthread_join(wb->threads[i], NULL);
    wb->nthreads = 0;
}

static void wb_close(struct keg_obj *o)
{
    struct wb *wb = o->priv;

    if (!wb)
        return;
    pthread_mutex_lock(&wb->mu);
    if (wb->nents && wb->drain_ms) {
        KEG_INFO("draining %zu staged objects (%llu bytes) for up to %u ms", wb->nents,
                 (unsigned long long)wb->staged_bytes, wb->drain_ms);
        wb_wait_idle(wb, keg_mono_ns() + (int64_t)wb->drain_ms * 1000000LL);
    }
    pthread_mutex_unlock(&wb->mu);
    wb_stop_workers(wb);
    if (wb->nents)
        KEG_WARN("%zu objects (%llu bytes; %llu failing) are still staged in %s: they are "
                 "uploaded at the next mount", wb->nents, (unsigned long long)wb->staged_bytes,
                 (unsigned long long)wb->nparked, wb->dir);
    wb_free_all(wb);
    pthread_cond_destroy(&wb->work_cv);
    pthread_cond_destroy(&wb->quiet_cv);
    pthread_cond_destroy(&wb->done_cv);
    pthread_mutex_destroy(&wb->mu);
    keg_free(wb);
    o->priv = NULL;
}

static int wb_open_op(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    KEG_UNUSED(o);
    KEG_UNUSED(conf);
    KEG_ERR("the writeback layer is opened with keg_wb_create()");
    return -EINVAL;
}

/* 1 if the bottom of the stack below o promises durable puts. */
static int wb_bottom_durable(struct keg_obj *o)
{
    while (o->inner)
        o = o->inner;
    return (o->ops->caps & KEG_OBJ_CAP_DURABLE) != 0;
}

int keg_wb_create(const struct keg_wb_conf *conf, struct keg_obj *inner, struct keg_obj **out)
{
    struct keg_obj *o = NULL;
    struct wb *wb = NULL;
    pthread_condattr_t ca;
    char *base = NULL;
    int rc;

    *out = NULL;
    if (!inner || !conf || !conf->dir || conf->dir[0] != '/') {
        KEG_ERR("writeback: needs an absolute cache directory and a store below it");
        rc = -EINVAL;
        goto fail1;
    }
    o = keg_calloc(1, sizeof(*o));
    wb = keg_calloc(1, sizeof(*wb));
    base = keg_asprintf("%s/staging", conf->dir);
    if (!o || !wb || !base) {
        rc = -ENOMEM;
        goto fail2;
    }
    wb->dirfd = wb->lockfd = -1;
    wb->o = o;
    wb->nworkers = conf->workers ? conf->workers : 4;
    wb->nidle = KEG_MAX(wb->nworkers, conf->idle_workers);
    wb->max_staging = conf->max_staging ? conf->max_staging : (1ULL << 30);
    wb->drain_ms = conf->drain_ms ? conf->drain_ms : 30000;
    wb->retries = conf->retries ? conf->retries : 6;
    wb->backoff_ms = conf->backoff_ms ? conf->backoff_ms : 100;
    wb->park_ms = conf->park_ms ? conf->park_ms : 60000;
    wb->delay_ns = (int64_t)conf->upload_delay_ms * 1000000LL;
    wb->write_once = conf->keys_write_once;
    wb->inner_durable = wb_bottom_durable(inner);
    wb->spare = keg_cache_ssd_spare(inner);
    /* (without the pool, large objects are written buffered: nothing fails) */
    (void)keg_ssd_dio_open(WB_DIO_BUFS, KEGC_HDR + KEGC_KEY_MAX + KEG_BLOCK_HDR +
                                            KEG_BLOCK_SIZE_MAX + 4096, &wb->dio);
    wb->nbuckets = 256;
    wb->ht = keg_calloc(wb->nbuckets, sizeof(*wb->ht));
    wb->threads = keg_calloc(wb->nidle, sizeof(*wb->threads));
    wb->ready.next = wb->ready.prev = &wb->ready;
    wb->parked.next = wb->parked.prev = &wb->parked;
    if (!wb->ht || !wb->threads) {
        rc = -ENOMEM;
        goto fail3;
    }
    rc = keg_ssd_mkdirs(base);
    if (rc < 0) {
        KEG_ERR("staging directory %s cannot be created: %s", base, strerror(-rc));
        goto fail3;
    }
    /* make the new directories themselves durable (fsync of each parent) */
    wb_fsync_dir(base);
    wb_fsync_dir(conf->dir);
    {
        char *parent = keg_strdup(conf->dir);
        char *slash = parent ? strrchr(parent, '/') : NULL;
        if (slash && slash != parent) {
            *slash = '\0';
            wb_fsync_dir(parent);
        }
        keg_free(parent);
    }
    rc = wb_take_slot(wb, base);
    if (rc < 0)
        goto fail3;
    rc = wb_recover(wb);
    if (rc < 0) {
        KEG_ERR("staging directory %s cannot be read: %s", wb->dir, strerror(-rc));
        goto fail3;
    }
    pthread_mutex_init(&wb->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wb->work_cv, &ca);
    pthread_cond_init(&wb->quiet_cv, &ca);
    pthread_cond_init(&wb->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    o->ops = &keg_wb_ops;
    o->inner = inner;
    o->priv = wb;
    for (unsigned i = 0; i < wb->nidle; i++) {
        rc = -pthread_create(&wb->threads[i], NULL, wb_worker, wb);
        if (rc < 0) {
            KEG_ERR("cannot start upload worker %u: %s", i, strerror(-rc));
            goto fail4;
        }
        wb->nthreads++;
    }
    KEG_INFO("writeback on: staging in %s, %u upload workers (%u once writes pause), at "
             "most %llu bytes staged", wb->dir, wb->nworkers, wb->nidle,
             (unsigned long long)wb->max_staging);
    keg_free(base);
    *out = o;
    return 0;

fail4:
    wb_stop_workers(wb);
    pthread_cond_destroy(&wb->work_cv);
    pthread_cond_destroy(&wb->quiet_cv);
    pthread_cond_destroy(&wb->done_cv);
    pthread_mutex_destroy(&wb->mu);
fail3:
    wb_free_all(wb);
fail2:
    keg_free(base);
    keg_free(wb);
    keg_free(o);
fail1:
    keg_obj_close(inner);
    return rc;
}

const struct keg_obj_ops keg_wb_ops = {
    .name = "writeback",
    .version = 1,
    .caps = KEG_OBJ_CAP_RANGE_GET | KEG_OBJ_CAP_LIST,
    .priv_size = 0,    /* allocated by keg_wb_create */
    .open = wb_open_op,
    .close = wb_close,
    .get = wb_get,
    .put = wb_put,
    .del = wb_del,
    .del_keys = wb_del_keys,
    .head = wb_head,
    .list = wb_list,
    .sync = wb_sync,
    .sync_keys = wb_sync_keys,
};
