/* fs.c -- volume open/close, id allocation, background workers and statfs.
 *
 * DESIGN
 * keg_fs_new connects the engine, loads the format, opens the object stack
 * and (unless conf->no_session) registers a session and starts two threads:
 *   heartbeat  session_heartbeat every heartbeat_sec; session_clean_stale
 *              every max(2, session_timeout / 2) s, +-25 % jitter (so many
 *              mounters do not collide), the first time 1-2 s after mount:
 *              a killed mounter's locks and pending inodes are released at
 *              most ~1.9 x session_timeout after its last heartbeat.  Every
 *              mounter of a volume must use the same session timeout (a
 *              cleaner applies ITS timeout to every session); the timeout is
 *              in the session's info ("timeout=N") and a mount whose timeout
 *              differs from a live session's logs a warning.  While an unlock
 *              the engine failed is pending (lock.c), it is tried again every
 *              second here.
 *   deleter    purges inodes whose last link went while they were open here
 *              (at their last close) or that the engine left pending, and
 *              drains the engine's deletion queue: every block object of each
 *              queued slice is deleted, then the entry is acknowledged.  It
 *              runs every second, and when kicked (fs_kick_deleter): unlink and
 *              rename purge an inode that is not open here inside the engine
 *              op (the engine asks fs_inode_list, inode.c), and kick the
 *              deleter only when that op queued slices: unlinking an empty
 *              file costs one engine call.  A kick is served once kicks pause
 *              for FS_DEL_SETTLE_NS, and at the latest FS_DEL_HOLD_NS after the
 *              first: an `rm -rf` of many files then costs a peek and an ack
 *              per FS_DELQ_BATCH slices instead of per file, and the deleter
 *              does not compete with the unlinks for the engine's write lock.
 *              The compactor's kicks hold it FS_DEL_HOLD_CMP_NS at most: a
 *              rewrite loop gets the files of the slices it replaced back as
 *              spares within a fifth of a second, instead of making new files
 *              for a second (fs_i.h).
 *              Purges of inodes closed after their unlink go at once.
 *   pools      FS_UPLOAD_THREADS upload workers (file.c) and FS_FETCH_THREADS
 *              block fetchers for read-ahead and parallel reads (read.c)
 *   compactor  merges fragmented chunks into one slice (compact.c)
 *   trash      expires /.trash hour directories (trash.c, trash_days > 0)
 * Without a session (tools) none of them runs: pool jobs run inline and
 * nothing is compacted.
 * Inode numbers and slice ids are reserved from the engine in batches
 * (100 inodes, 1000 slices) under id_mu.
 * keg_fs_free commits every open file, stops the threads, purges what is
 * queued, drains a few deletion batches, ends the session and closes all.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/retry.h"
#include "keg/stack.h"
#include "fs_i.h"

#define FS_INO_BATCH   100
#define FS_SLICE_BATCH 1000
#define FS_DELQ_BATCH  256
#define FS_DEL_SETTLE_NS (100LL * 1000000)     /* kicks pause this long: drain */
#define FS_STALE_MIN_SEC    2u   /* shortest stale-session scan period */
#define FS_UPLOAD_THREADS 8
#define FS_UPLOAD_QUEUE   16     /* blocks waiting for an upload thread */

/*----------------------------------------------------------------------------
 * Ids
 *--------------------------------------------------------------------------*/

static int alloc_id(struct keg_fs *fs, int kind, uint64_t *next, uint64_t *end, uint32_t batch,
                    uint64_t *out)
{
    int rc = 0;
    *out = 0;
    pthread_mutex_lock(&fs->id_mu);
    if (*next >= *end) {
        uint64_t first = 0;
        rc = keg_meta_alloc_ids(fs->meta, kind, batch, &first);
        if (rc < 0)
            goto out;
        *next = first;
        *end = first + batch;
    }
    *out = (*next)++;
out:
    pthread_mutex_unlock(&fs->id_mu);
    return rc;
}

int fs_alloc_ino(struct keg_fs *fs, uint64_t *ino)
{
    return alloc_id(fs, KEG_ID_INODE, &fs->ino_next, &fs->ino_end, FS_INO_BATCH, ino);
}

int fs_alloc_slice(struct keg_fs *fs, uint64_t *id)
{
    return alloc_id(fs, KEG_ID_SLICE, &fs->sl_next, &fs->sl_end, FS_SLICE_BATCH, id);
}

/*----------------------------------------------------------------------------
 * Deletion
 *--------------------------------------------------------------------------*/

#define FS_KEY_MAX  256
#define FS_DEL_KEYS 4096    /* block keys per keg_obj_del_keys call */
#define FS_SYNC_KEYS 64     /* keys per keg_obj_sync_keys call */

typedef int fs_keys_op(struct keg_fs *fs, const char *const *keys, size_t n);

/* Calls op on the block keys of slices v[0..n), at most max keys per call.
 * all: go on after a failed call; else stop there.  Returns 0 or the first
 * -errno. */
static int fs_slices_keys(struct keg_fs *fs, const struct keg_del_slice *v, size_t n,
                          size_t max, fs_keys_op *op, int all)
{
    size_t nk = 0, k = 0;
    int first = 0;
    for (size_t j = 0; j < n; j++)
        nk += (size_t)(((uint64_t)v[j].size + fs->bs - 1) / fs->bs);
    nk = KEG_MIN(nk, max);
    if (nk == 0)
        return 0;
    char (*buf)[FS_KEY_MAX] = keg_malloc(nk * sizeof(*buf));
    const char **keys = keg_malloc(nk * sizeof(*keys));
    if (!buf || !keys) {
        keg_free(keys);
        keg_free(buf);
        return -ENOMEM;
    }
    for (size_t j = 0; j < n && (all || !first); j++) {
        uint32_t nblk = (uint32_t)(((uint64_t)v[j].size + fs->bs - 1) / fs->bs);
        for (uint32_t i = 0; i < nblk && (all || !first); i++) {
            keg_block_key(buf[k], FS_KEY_MAX, fs->fmt.name, v[j].id, i,
                          fs_block_len(fs->bs, v[j].size, i));
            keys[k] = buf[k];
            if (++k == nk) {
                int rc = op(fs, keys, k);
                first = first ? first : rc;
                k = 0;
            }
        }
    }
    if (k > 0 && (all || !first)) {
        int rc = op(fs, keys, k);
        first = first ? first : rc;
    }
    keg_free(keys);
    keg_free(buf);
    return first;
}

static int fs_del_keys(struct keg_fs *fs, const char *const *keys, size_t k)
{
    int rc = keg_obj_del_keys(fs->obj, keys, k);
    if (rc < 0)
        KEG_WARN("delete %zu blocks (first %s): %s", k, keys[0], strerror(-rc));
    return rc;
}

static int fs_sync_keys(struct keg_fs *fs, const char *const *keys, size_t k)
{
    return keg_obj_sync_keys(fs->obj, keys, k);
}

/* Deletes the blocks of n slices, up to FS_DEL_KEYS keys per keg_obj_del_keys
 * (which S3 sends as one request per 1000).  Returns 0 when all are gone,
 * else the first -errno (the rest is still attempted). */
static int fs_delete_slices(struct keg_fs *fs, const struct keg_del_slice *v, size_t n)
{
    return fs_slices_keys(fs, v, n, FS_DEL_KEYS, fs_del_keys, 1);
}

int fs_delete_slice(struct keg_fs *fs, uint64_t id, uint32_t size)
{
    struct keg_del_slice one = {.id = id, .size = size};
    return fs_delete_slices(fs, &one, 1);
}

int fs_sync_slices(struct keg_fs *fs, const struct keg_del_slice *v, size_t n)
{
    return fs_slices_keys(fs, v, n, FS_SYNC_KEYS, fs_sync_keys, 0);
}

int fs_drain_delq(struct keg_fs *fs, int max_batches)
{
    struct keg_del_slice batch[FS_DELQ_BATCH];
    struct keg_del_slice done[FS_DELQ_BATCH];
    int total = 0;

    for (int b = 0; b < max_batches; b++) {
        int n = keg_meta_delq_peek(fs->meta, batch, FS_DELQ_BATCH);
        uint32_t nd = 0;
        if (n < 0)
            return n == -ENOSYS ? total : n;
        if (n == 0)
            break;
        if (fs_delete_slices(fs, batch, (size_t)n) == 0) {
            memcpy(done, batch, (size_t)n * sizeof(*batch));
            nd = (uint32_t)n;
        } else {
            /* find out which slices are gone: one at a time */
            for (int i = 0; i < n; i++)
                if (fs_delete_slice(fs, batch[i].id, batch[i].size) == 0)
                    done[nd++] = batch[i];
        }
        if (nd > 0) {
            int rc = keg_meta_delq_ack(fs->meta, done, nd);
            if (rc < 0)
                return rc;
        }
        total += (int)nd;
        __atomic_add_fetch(&fs->del_slices, nd, __ATOMIC_RELAXED);
        if (nd < (uint32_t)n || n < FS_DELQ_BATCH)
            break;          /* failures: try again next round; or queue drained */
    }
    return total;
}

static int purge_one(struct keg_fs *fs, uint64_t ino)
{
    int rc = keg_meta_purge(fs->meta, ino);
    if (rc < 0 && rc != -ENOENT) {
        KEG_WARN("purge inode %llu: %s", (unsigned long long)ino, strerror(-rc));
        return rc;
    }
    return 0;
}

void fs_queue_purge(struct keg_fs *fs, uint64_t ino)
{
    int now = 0;
    pthread_mutex_lock(&fs->bg_mu);
    if (!fs->threads) {
        now = 1;
    } else {
        if (fs->npurge == fs->cpurge) {
            size_t ncap = fs->cpurge ? fs->cpurge * 2 : 16;
            uint64_t *nv = keg_realloc(fs->purge, ncap * sizeof(*nv));
            if (!nv) {
                now = 1;
                goto out;
            }
            fs->purge = nv;
            fs->cpurge = ncap;
        }
        fs->purge[fs->npurge++] = ino;
        pthread_cond_broadcast(&fs->bg_cv);
    }
out:
    pthread_mutex_unlock(&fs->bg_mu);
    if (now)
        purge_one(fs, ino);
}

/* 1 when inode ino is open here: it is marked unlinked, and its last release
 * purges it; 0 when it is not open (the caller purges it). */
static int open_marks_unlinked(struct keg_fs *fs, uint64_t ino)
{
    struct fs_inode *ip = fs_inode_find(fs, ino);
    int open = 0;
    if (ip) {
        pthread_mutex_lock(&ip->mu);
        open = ip->nopen > 0;
        if (open)
            ip->unlinked = 1;
        pthread_mutex_unlock(&ip->mu);
        fs_inode_put(fs, ip);
    }
    return open;
}

void fs_handle_gone(struct keg_fs *fs, const struct keg_unlinked *gone)
{
    if (gone->ino == 0)
        return;
    if (gone->purged) {
        /* purged inside the op (it was not open here): only the deletion
         * queue may have work, and only when this op queued something */
        if (gone->queued > 0 && fs->has_session)
            fs_kick_deleter(fs, FS_DEL_HOLD_NS);
        return;
    }
    if (!open_marks_unlinked(fs, gone->ino) && fs->has_session)
        fs_queue_purge(fs, gone->ino);
}

void fs_drain_purge(struct keg_fs *fs)
{
    for (;;) {
        uint64_t ino;

        pthread_mutex_lock(&fs->bg_mu);
        if (fs->npurge == 0) {
            pthread_mutex_unlock(&fs->bg_mu);
            return;
        }
        ino = fs->purge[--fs->npurge];
        pthread_mutex_unlock(&fs->bg_mu);

        /* opened again meanwhile (by inode number): purge at its last release */
        if (!open_marks_unlinked(fs, ino))
            purge_one(fs, ino);
    }
}

/*----------------------------------------------------------------------------
 * Background threads
 *--------------------------------------------------------------------------*/

void fs_deadline(struct timespec *ts, int64_t ns)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    int64_t t = (int64_t)ts->tv_nsec + ns;
    ts->tv_sec += (time_t)(t / 1000000000);
    ts->tv_nsec = (long)(t % 1000000000);
}

/* Nanoseconds until the next stale-session scan: the period is half the
 * session timeout (at least FS_STALE_MIN_SEC), with +-25 % jitter; the first
 * scan comes 1-2 s after mount. */
static int64_t stale_delay_ns(const struct keg_fs *fs, unsigned *seed, int first)
{
    int64_t period_ms = (int64_t)KEG_MAX(FS_STALE_MIN_SEC, fs->session_timeout / 2) * 1000;
    if (first)
        return (1000 + rand_r(seed) % 1000) * 1000000LL;
    return (period_ms * 3 / 4 + rand_r(seed) % (period_ms / 2)) * 1000000LL;
}

static void *hb_main(void *arg)
{
    struct keg_fs *fs = arg;
    unsigned seed = (unsigned)(keg_mono_ns() ^ (int64_t)getpid());
    keg_thread_name("keg-heartbeat");
    int64_t hb_period = (int64_t)fs->heartbeat_sec * 1000000000LL;
    int64_t next_hb = keg_mono_ns() + hb_period;
    int64_t next_stale = keg_mono_ns() + stale_delay_ns(fs, &seed, 1);
    int64_t next_unlock = INT64_MAX;    /* failed unlocks are tried again each second */

    pthread_mutex_lock(&fs->bg_mu);
    while (!fs->stopping) {
        struct timespec ts;
        int64_t now = keg_mono_ns();
        if (next_unlock == INT64_MAX && __atomic_load_n(&fs->nunlocks, __ATOMIC_RELAXED))
            next_unlock = now + 1000000000LL;
        int64_t wait = KEG_MIN(KEG_MIN(next_hb, next_stale), next_unlock) - now;
        if (wait > 0) {
            fs_deadline(&ts, wait);
            pthread_cond_timedwait(&fs->bg_cv, &fs->bg_mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&fs->bg_mu);
        if (now >= next_hb) {
            int rc = keg_meta_session_heartbeat(fs->meta);
            if (rc < 0)
                KEG_WARN("session heartbeat: %s", strerror(-rc));
            else
                __atomic_store_n(&fs->hb_last_ns, keg_mono_ns(), __ATOMIC_RELAXED);
            next_hb = now + hb_period;
        }
        if (now >= next_stale) {
            uint32_t cleaned = 0;
            int rc = keg_meta_session_clean_stale(fs->meta, (int64_t)fs->session_timeout,
                                                  &cleaned);
            if (rc < 0 && rc != -ENOSYS)
                KEG_WARN("stale session cleanup: %s", strerror(-rc));
            else if (cleaned > 0)
                KEG_INFO("cleaned %u stale session(s)", cleaned);
            next_stale = now + stale_delay_ns(fs, &seed, 0);
        }
        if (now >= next_unlock) {
            fs_unlocks_retry(fs);
            next_unlock = INT64_MAX;
        }
        pthread_mutex_lock(&fs->bg_mu);
    }
    pthread_mutex_unlock(&fs->bg_mu);
    return NULL;
}

/* Only a kick that makes the deadline earlier (the first of a burst, or a
 * compaction's during a removal) wakes the deleter: a later one moves the due
 * time (del_due) later, never earlier, and the deleter recomputes it when its
 * wait ends.  Waking it (and the other bg_cv sleepers) on every unlink of an
 * `rm -rf` cost a futex wake and two context switches per file. */
void fs_kick_deleter(struct keg_fs *fs, int64_t hold_ns)
{
    int64_t now = keg_mono_ns();
    pthread_mutex_lock(&fs->bg_mu);
    fs->del_last_kick = now;
    if (!fs->del_by || now + hold_ns < fs->del_by) {
        fs->del_by = now + hold_ns;
        pthread_cond_broadcast(&fs->bg_cv);
    }
    pthread_mutex_unlock(&fs->bg_mu);
}

/* When the deleter serves the kicks so far (monotonic ns), or 0 when none is
 * pending.  LOCKS: caller holds fs->bg_mu. */
static int64_t del_due(const struct keg_fs *fs)
{
    if (!fs->del_by)
        return 0;
    return KEG_MIN(fs->del_last_kick + FS_DEL_SETTLE_NS, fs->del_by);
}

static void *del_main(void *arg)
{
    struct keg_fs *fs = arg;
    int64_t next = 0;       /* the next round by the clock */
    keg_thread_name("keg-deleter");
    pthread_mutex_lock(&fs->bg_mu);
    while (!fs->stopping) {
        struct timespec ts;
        int more;
        int64_t now = keg_mono_ns(), due = del_due(fs);
        /* a pending kick waits for its burst; purges and a full batch do not */
        if (now < next && fs->npurge == 0 && (!due || now < due)) {
            int64_t until = due ? KEG_MIN(due, next) : next;
            fs_deadline(&ts, until - now);
            pthread_cond_timedwait(&fs->bg_cv, &fs->bg_mu, &ts);
            continue;
        }
        fs->del_by = fs->del_last_kick = 0;
        pthread_mutex_unlock(&fs->bg_mu);
        pthread_mutex_lock(&fs->del_mu);
        fs_drain_purge(fs);
        more = fs_drain_delq(fs, 1) == FS_DELQ_BATCH;
        pthread_mutex_unlock(&fs->del_mu);
        pthread_mutex_lock(&fs->bg_mu);
        next = more ? 0 : keg_mono_ns() + 1000000000LL;
    }
    pthread_mutex_unlock(&fs->bg_mu);
    return NULL;
}

/* Stop the pools and the compactor (idempotent; later pool jobs run inline). */
static void stop_workers(struct keg_fs *fs)
{
    fs_compact_stop(fs);
    fs_trash_stop(fs);
    fs_pool_stop(&fs->up_pool);
    fs_fetch_stop(fs);
}

static int start_threads(struct keg_fs *fs)
{
    int rc;

    fs_pool_stop(&fs->up_pool);          /* replace the inline pool by workers */
    fs_pool_destroy(&fs->up_pool);
    rc = fs_pool_start(&fs->up_pool, "upload", FS_UPLOAD_THREADS, FS_UPLOAD_QUEUE);
    if (rc == 0)
        rc = fs_fetch_start(fs);
    if (rc == 0)
        rc = fs_compact_start(fs);
    if (rc == 0)
        rc = fs_trash_start(fs);        /* trash expiry (trash.c) */
    if (rc < 0)
        goto fail;
    rc = -pthread_create(&fs->hb_thr, NULL, hb_main, fs);
    if (rc < 0)
        goto fail;
    rc = -pthread_create(&fs->del_thr, NULL, del_main, fs);
    if (rc < 0) {
        pthread_mutex_lock(&fs->bg_mu);
        fs->stopping = 1;
        pthread_cond_broadcast(&fs->bg_cv);
        pthread_mutex_unlock(&fs->bg_mu);
        pthread_join(fs->hb_thr, NULL);
        fs->stopping = 0;
        goto fail;
    }
    fs->threads = 1;
    return 0;
fail:
    stop_workers(fs);
    return rc;
}

static void stop_threads(struct keg_fs *fs)
{
    int running;
    pthread_mutex_lock(&fs->bg_mu);
    fs->stopping = 1;
    running = fs->threads;
    pthread_cond_broadcast(&fs->bg_cv);
    pthread_mutex_unlock(&fs->bg_mu);
    fs_waiters_wake_all(fs);
    stop_workers(fs);
    if (running) {
        pthread_join(fs->hb_thr, NULL);
        pthread_join(fs->del_thr, NULL);
        pthread_mutex_lock(&fs->bg_mu);
        fs->threads = 0;
        pthread_mutex_unlock(&fs->bg_mu);
    }
}

/*----------------------------------------------------------------------------
 * Open / close
 *--------------------------------------------------------------------------*/

static void fs_init_locks(struct keg_fs *fs)
{
    pthread_condattr_t ca;
    pthread_mutex_init(&fs->id_mu, NULL);
    pthread_mutex_init(&fs->pa_mu, NULL);
    pthread_mutex_init(&fs->odir_mu, NULL);
    pthread_mutex_init(&fs->itab_mu, NULL);
    pthread_mutex_init(&fs->bg_mu, NULL);
    pthread_mutex_init(&fs->unlock_mu, NULL);
    pthread_mutex_init(&fs->del_mu, NULL);
    pthread_mutex_init(&fs->up_mu, NULL);
    pthread_mutex_init(&fs->cmp_mu, NULL);
    pthread_mutex_init(&fs->bigbuf_mu, NULL);
    pthread_cond_init(&fs->up_cv, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* all waits use fs_deadline() */
    pthread_cond_init(&fs->bg_cv, &ca);
    pthread_cond_init(&fs->cmp_cv, &ca);
    pthread_condattr_destroy(&ca);
    /* inline pools until start_threads replaces them by workers */
    fs_pool_start(&fs->up_pool, "upload", 0, 1);
    fs_pool_start(&fs->fetch_pool, "fetch", 0, 1);
}

static void fs_destroy_locks(struct keg_fs *fs)
{
    pthread_mutex_destroy(&fs->id_mu);
    pthread_mutex_destroy(&fs->pa_mu);
    fs_odir_free(fs);
    pthread_mutex_destroy(&fs->odir_mu);
    pthread_mutex_destroy(&fs->itab_mu);
    pthread_mutex_destroy(&fs->bg_mu);
    pthread_mutex_destroy(&fs->unlock_mu);
    pthread_mutex_destroy(&fs->del_mu);
    pthread_cond_destroy(&fs->bg_cv);
    pthread_mutex_destroy(&fs->up_mu);
    pthread_cond_destroy(&fs->up_cv);
    pthread_mutex_destroy(&fs->cmp_mu);
    pthread_cond_destroy(&fs->cmp_cv);
    fs_pool_destroy(&fs->up_pool);
    fs_pool_destroy(&fs->fetch_pool);
    fs_bigbuf_drop(fs);
    pthread_mutex_destroy(&fs->bigbuf_mu);
    fs_trash_free(fs);
}

/* session_list callback: warns about a live session whose recorded timeout
 * differs from ours (cleaners apply their own timeout to every session). */
static int check_timeout_cb(void *arg, const struct keg_session_info *s)
{
    const struct keg_fs *fs = arg;
    const char *t = s->info ? strstr(s->info, " timeout=") : NULL;
    if (!t)
        return 0;
    unsigned long other = strtoul(t + 9, NULL, 10);
    if (other && other != fs->session_timeout) {
        KEG_WARN("session %llu (%s) uses a session timeout of %lu s, this mount %u s: every "
                 "mounter of a volume should use the same --session-timeout, or the shorter "
                 "one may clean up a live session of the other",
                 (unsigned long long)s->sid, s->info, other, fs->session_timeout);
        return 1;
    }
    return 0;
}

/* Take over session sid of the worker this one replaces.  A failure other than
 * -ENOENT (the session is gone) is tried again for up to the session timeout:
 * registering a new session instead would release the locks that processes hold
 * through the mount, and purge its unlinked open files, while the old session
 * still exists (an engine restarting, a database locked for a while).  After
 * the session timeout another mounter may have ended it as stale anyway.
 * Returns 0 or the last error. */
static int session_take_over(struct keg_fs *fs, uint64_t sid, const char *info)
{
    int64_t until = keg_mono_ns() + (int64_t)fs->session_timeout * 1000000000LL;
    unsigned delay = 500;
    for (int tries = 0;; tries++) {
        int rc = keg_meta_session_resume(fs->meta, sid, info);
        if (rc == 0 || rc == -ENOENT || keg_mono_ns() >= until)
            return rc;
        if (tries == 0)
            KEG_WARN("cannot take over session %llu of the previous worker yet (%s): trying "
                     "again for up to %u s", (unsigned long long)sid, strerror(-rc),
                     fs->session_timeout);
        keg_sleep_ms(delay);
        delay = KEG_MIN(delay * 2, 5000u);
    }
}

int keg_fs_new(const struct keg_fs_conf *conf, struct keg_fs **out)
{
    struct keg_fs *fs;
    struct keg_stack_conf sc;
    char info[1024];
    char host[256];
    uint64_t sid = 0;
    int rc;

    *out = NULL;
    fs = keg_calloc(1, sizeof(*fs));
    if (!fs)
        return -ENOMEM;
    fs_init_locks(fs);
    fs->read_only = conf->read_only;
    fs->buffer_size = conf->buffer_size ? conf->buffer_size : (300ULL << 20);
    fs->heartbeat_sec = conf->heartbeat_sec ? conf->heartbeat_sec : 10;
    fs->session_timeout = conf->session_timeout ? conf->session_timeout : 60;
    fs->missing_wait_ms = conf->missing_block_wait_ms;

    rc = keg_meta_open(conf->meta_url, &fs->meta);
    if (rc < 0)
        goto fail1;
    rc = keg_meta_format_load(fs->meta, &fs->fmt);
    if (rc == -ENOENT) {
        KEG_ERR("volume not formatted: run kegfs format (metadata %s)", fs->meta->url_redacted);
        goto fail2;
    }
    if (rc < 0) {
        KEG_ERR("cannot load the volume format from %s: %s", fs->meta->url_redacted,
                strerror(-rc));
        goto fail2;
    }
    fs->quota_bytes = fs->fmt.capacity;
    fs->quota_inodes = fs->fmt.inodes;
    fs->quota_read_ns = keg_mono_ns();
    fs->bs = fs->fmt.block_size ? fs->fmt.block_size : KEG_BLOCK_SIZE_DEFAULT;
    if (fs->bs < 4096 || fs->bs > KEG_BLOCK_SIZE_MAX || (fs->bs & (fs->bs - 1)) != 0) {
        KEG_ERR("volume %s has an invalid block size %u", fs->fmt.name, fs->bs);
        rc = -EINVAL;
        goto fail2;
    }
    fs->codec = keg_codec_parse(fs->fmt.compress[0] ? fs->fmt.compress : "none");
    memset(&fs->blk_id, 0, sizeof(fs->blk_id));
    (void)keg_block_vol_uuid(fs->fmt.uuid, fs->blk_id.vol);
    fs->blk_id.v1_ok = fs->fmt.block_version < KEG_BLOCK_VERSION;
    if (fs->codec < 0) {
        KEG_ERR("volume %s: unknown compression '%s'", fs->fmt.name, fs->fmt.compress);
        rc = -EINVAL;
        goto fail2;
    }
    /* whole-block buffers fit a block encoded with any codec: the size of a
     * fetch (read.c block_fetch), at least bs for the writers */
    fs->bigbuf_size = KEG_MAX(keg_block_bound(KEG_CODEC_NONE, fs->bs),
                              KEG_MAX(keg_block_bound(KEG_CODEC_LZ4, fs->bs),
                                      keg_block_bound(KEG_CODEC_ZSTD, fs->bs)));
    /* one budget for the read cache and the write buffers (read.c DESIGN) */
    rc = fs_bcache_new(fs->buffer_size, conf->block_cache_size, fs, &fs->bc);
    if (rc < 0)
        goto fail2;

    memset(&sc, 0, sizeof(sc));
    if (conf->stack)
        sc = *conf->stack;
    if (conf->access_key)
        sc.access_key = conf->access_key;
    if (conf->secret_key)
        sc.secret_key = conf->secret_key;
    if (conf->session_token)
        sc.session_token = conf->session_token;
    rc = keg_stack_open(&fs->fmt, &sc, &fs->obj);
    if (rc < 0) {
        KEG_ERR("cannot open the object store of volume %s (%s): %s", fs->fmt.name,
                fs->fmt.storage, strerror(-rc));
        goto fail3;
    }

    if (!conf->no_session) {
        if (gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "unknown");
        host[sizeof(host) - 1] = '\0';
        snprintf(info, sizeof(info), "host=%s pid=%d mountpoint=%s version=%s timeout=%u", host,
                 (int)getpid(), conf->mountpoint ? conf->mountpoint : "", KEG_VERSION,
                 fs->session_timeout);
        keg_meta_session_list(fs->meta, check_timeout_cb, fs);
        rc = -ENOENT;
        if (conf->resume_session) {
            rc = session_take_over(fs, conf->resume_session, info);
            if (rc == 0) {
                sid = conf->resume_session;
                KEG_INFO("took over session %llu of the previous worker",
                         (unsigned long long)sid);
            } else {
                KEG_WARN("cannot take over session %llu of the previous worker (%s): the "
                         "locks it held are released and its unlinked files that were "
                         "still open are gone; registering a new session",
                         (unsigned long long)conf->resume_session, strerror(-rc));
            }
        }
        if (rc < 0)
            rc = keg_meta_session_begin(fs->meta, info, &sid);
        if (rc < 0) {
            KEG_ERR("cannot register a session with %s: %s", fs->meta->url_redacted,
                    strerror(-rc));
            goto fail4;
        }
        fs->has_session = 1;
        fs->sid = sid;
        __atomic_store_n(&fs->hb_last_ns, keg_mono_ns(), __ATOMIC_RELAXED);
        /* unlink/rename purge inside the op what is not open here (ns.c) */
        fs->meta->open_inodes = fs_inode_list;
        fs->meta->open_inodes_arg = fs;
        rc = start_threads(fs);
        if (rc < 0) {
            KEG_ERR("cannot start background threads: %s", strerror(-rc));
            goto fail5;
        }
        KEG_INFO("volume %s opened (session %llu, block size %u, compress %s)", fs->fmt.name,
                 (unsigned long long)sid, fs->bs, fs->fmt.compress);
    }
    *out = fs;
    return 0;

fail5:
    keg_meta_session_end(fs->meta);
fail4:
    keg_obj_close(fs->obj);
fail3:
    fs_bcache_free(fs->bc);
fail2:
    keg_meta_close(fs->meta);
fail1:
    fs_destroy_locks(fs);
    keg_free(fs);
    return rc;
}

/* Commit every open file (handles still open are leaked by the caller). */
static void flush_all(struct keg_fs *fs)
{
    struct fs_inode **all = NULL;
    size_t n = 0;

    if (fs_inode_all(fs, &all, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        int rc = fs_flush_inode(fs, all[i], 1);
        if (rc < 0)
            KEG_ERR("unmount: committing inode %llu failed: %s",
                    (unsigned long long)all[i]->ino, strerror(-rc));
        fs_inode_put(fs, all[i]);
    }
    keg_free(all);
}

/* Purge the queued inodes and drain up to batches of the deletion queue
 * (bounded: the queue is the whole volume's), as one drainer (del_mu). */
static void run_deletions(struct keg_fs *fs, int batches)
{
    pthread_mutex_lock(&fs->del_mu);
    fs_drain_purge(fs);
    if (!fs->read_only)
        fs_drain_delq(fs, batches);
    pthread_mutex_unlock(&fs->del_mu);
}

void keg_fs_settle(struct keg_fs *fs)
{
    flush_all(fs);
    run_deletions(fs, 16);
}

void keg_fs_free(struct keg_fs *fs)
{
    if (!fs)
        return;
    flush_all(fs);
    stop_threads(fs);
    run_deletions(fs, 4);
    fs_unlocks_free(fs);       /* session_end drops the session's locks */
    if (fs->has_session && fs->keep_session) {
        KEG_INFO("session %llu left for the next worker", (unsigned long long)fs->sid);
    } else if (fs->has_session) {
        int rc = keg_meta_session_end(fs->meta);
        if (rc < 0)
            KEG_WARN("session end: %s", strerror(-rc));
    }
    /* free entries of handles that were never released */
    for (size_t h = 0; h < FS_ITAB_BUCKETS; h++) {
        struct fs_inode *ip = fs->itab[h];
        while (ip) {
            struct fs_inode *next = ip->hnext;
            fs_writer_drop(fs, ip, 0);
            fs_inode_drop_chunks(ip);
            keg_free(ip->usync);
            pthread_mutex_destroy(&ip->mu);
            pthread_mutex_destroy(&ip->sync_mu);
            keg_free(ip);
            ip = next;
        }
        fs->itab[h] = NULL;
    }
    fs->iall = NULL;
    fs_seen_free(fs);
    fs_xattr_forget_fs(fs);
    keg_obj_close(fs->obj);
    fs_bcache_free(fs->bc);
    keg_meta_close(fs->meta);
    keg_free(fs->purge);
    fs_destroy_locks(fs);
    keg_free(fs);
}

const struct keg_format *keg_fs_format(struct keg_fs *fs)
{
    return &fs->fmt;
}

int keg_fs_bg_stats(struct keg_fs *fs, struct keg_fs_bg_stats *st)
{
    memset(st, 0, sizeof(*st));
    pthread_mutex_lock(&fs->cmp_mu);
    st->compact_queued = fs->cmp_n;
    st->compact_parked = fs->cmp_nparked;
    st->compact_done = fs->cmp_done;
    st->compact_abandoned = fs->cmp_again;
    st->compact_bytes = fs->cmp_bytes;
    pthread_mutex_unlock(&fs->cmp_mu);
    pthread_mutex_lock(&fs->bg_mu);
    st->purge_queued = fs->npurge;
    pthread_mutex_unlock(&fs->bg_mu);
    st->deleted_slices = __atomic_load_n(&fs->del_slices, __ATOMIC_RELAXED);
    st->unlocks_pending = __atomic_load_n(&fs->nunlocks, __ATOMIC_RELAXED);
    st->has_session = fs->has_session;
    if (st->has_session)
        st->heartbeat_age_ns = keg_mono_ns() - __atomic_load_n(&fs->hb_last_ns, __ATOMIC_RELAXED);
    return 0;
}

uint64_t keg_fs_session(struct keg_fs *fs)
{
    return fs->has_session ? fs->sid : 0;
}

void keg_fs_keep_session(struct keg_fs *fs)
{
    fs->keep_session = 1;
}

struct keg_meta *keg_fs_meta(struct keg_fs *fs)
{
    return fs->meta;
}

struct keg_obj *keg_fs_obj(struct keg_fs *fs)
{
    return fs->obj;
}

/*----------------------------------------------------------------------------
 * statfs
 *--------------------------------------------------------------------------*/

#define FS_QUOTA_REFRESH_NS (5LL * 1000000000)

/* Re-read the volume's quotas (raised by `kegfs format --force` or a CSI
 * expansion while mounted) when the copy is older than FS_QUOTA_REFRESH_NS.
 * The engines enforce the stored quotas themselves; this only keeps statfs
 * (df) current.  A failed read keeps the old values. */
static void fs_refresh_quota(struct keg_fs *fs)
{
    int64_t now = keg_mono_ns();
    int64_t last = __atomic_load_n(&fs->quota_read_ns, __ATOMIC_RELAXED);
    struct keg_format f;

    if (last && now - last < FS_QUOTA_REFRESH_NS)
        return;
    __atomic_store_n(&fs->quota_read_ns, now, __ATOMIC_RELAXED);
    if (keg_meta_format_load(fs->meta, &f) < 0)
        return;
    __atomic_store_n(&fs->quota_bytes, f.capacity, __ATOMIC_RELAXED);
    __atomic_store_n(&fs->quota_inodes, f.inodes, __ATOMIC_RELAXED);
}

#define FS_UNLIMITED_BYTES (1ULL << 50)     /* statfs of an unlimited volume on S3 */
#define FS_UNLIMITED_FILES 10000000000ULL

/* Space of the volume: *used (bytes charged in the engine), *total and
 * *avail.  The free space is the smaller of what the capacity quota leaves
 * and, on a file store, what the store's file system has available (its
 * statvfs f_bavail); total is then used + avail, or the quota.  An unlimited
 * volume on S3 reports FS_UNLIMITED_BYTES.  Returns 0 or -errno. */
static int fs_space(struct keg_fs *fs, uint64_t *used, uint64_t *iused, uint64_t *total,
                    uint64_t *avail)
{
    uint64_t cap;
    int rc;

    *used = *iused = *total = *avail = 0;
    rc = keg_meta_statfs(fs->meta, used, iused);
    if (rc < 0)
        return rc;
    fs_refresh_quota(fs);
    cap = __atomic_load_n(&fs->quota_bytes, __ATOMIC_RELAXED);
    *avail = cap ? (*used < cap ? cap - *used : 0) : UINT64_MAX;
    if (strcmp(fs->fmt.storage, "file") == 0) {
        struct statvfs sv;
        if (statvfs(fs->fmt.bucket, &sv) == 0) {
            uint64_t disk = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
            *avail = KEG_MIN(*avail, disk);
        }
    }
    if (cap) {
        *total = cap;
    } else if (*avail == UINT64_MAX) {
        *total = KEG_MAX(FS_UNLIMITED_BYTES, *used);
        *avail = *total - *used;
    } else {
        *total = *used + *avail;
    }
    return 0;
}

int fs_space_check(struct keg_fs *fs, uint64_t need)
{
    uint64_t used, iused, total, avail;
    int rc;

    if (need == 0)
        return 0;
    rc = fs_space(fs, &used, &iused, &total, &avail);
    if (rc < 0)
        return rc;
    return need > avail ? -ENOSPC : 0;
}

int keg_fs_statfs(struct keg_fs *fs, struct statvfs *st)
{
    uint64_t used, iused, total, avail;
    uint64_t files;
    int rc;

    memset(st, 0, sizeof(*st));
    rc = fs_space(fs, &used, &iused, &total, &avail);
    if (rc < 0)
        return rc;
    files = __atomic_load_n(&fs->quota_inodes, __ATOMIC_RELAXED);
    files = files ? files : FS_UNLIMITED_FILES;
    st->f_bsize = 4096;
    st->f_frsize = 4096;
    st->f_blocks = total / 4096;
    st->f_bfree = avail / 4096;
    st->f_bavail = st->f_bfree;
    st->f_files = files;
    st->f_ffree = iused < files ? files - iused : 0;
    st->f_favail = st->f_ffree;
    st->f_namemax = KEG_NAME_MAX;
    st->f_fsid = 0;
    st->f_flag = fs->read_only ? ST_RDONLY : 0;
    return 0;
}
