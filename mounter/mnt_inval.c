/* mnt_inval.c -- the kernel's page cache told about data that changed behind it.
 *
 * DESIGN
 * core/fs asks, through its invalidation hook (keg_fs_set_inval), for cached
 * pages and attributes of an inode to be dropped -- an O_APPEND write whose
 * bytes the engine placed elsewhere than the kernel assumed.  The hook may run
 * inside any request, also one for which the kernel holds page locks (a read,
 * a buffered write), and fuse_lowlevel_notify_inval_inode waits for those
 * locks: so the hook only queues the inode, and one thread sends the
 * notifications.  The write handler invalidates the range of an O_DIRECT write
 * itself (mnt_inval_range), before it replies: no page of the file is locked
 * by that request, and a buffered reader that fetched the old bytes while the
 * direct write was on its way loses them before write() returns.
 *
 * The queue holds up to MNT_INVAL_MAX inodes, deduplicated (a request drops
 * everything cached of its inode).  A request that finds it full is dropped
 * with a WARN: the inode's next open still drops its pages, since keep_cache
 * is only granted when size and mtime did not change.
 */
#define FUSE_USE_VERSION 314

#include <errno.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <string.h>

#define KEG_LOG_TAG "fuse"
#include "keg/fs.h"
#include "keg/log.h"

#include "mnt_i.h"

#define MNT_INVAL_MAX 256

static struct {
    pthread_mutex_t      mu;        /* protects everything below */
    pthread_cond_t       cv;
    struct fuse_session *se;
    struct keg_fs       *fs;
    uint64_t             q[MNT_INVAL_MAX];  /* inodes to invalidate, FIFO */
    unsigned             head, n;
    int                  running, stopping;
    pthread_t            thr;
} iv = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void inval_send(struct fuse_session *se, uint64_t ino, off_t off, off_t len)
{
    int rc = fuse_lowlevel_notify_inval_inode(se, (fuse_ino_t)ino, off, len);
    /* -ENOENT: the kernel has no such inode cached (nothing to drop) */
    if (rc < 0 && rc != -ENOENT && rc != -ENOTCONN && rc != -ENODEV)
        KEG_WARN("invalidating the kernel's cache of inode %llu: %s",
                 (unsigned long long)ino, strerror(-rc));
}

static void *inval_run(void *arg)
{
    (void)arg;
    keg_thread_name("keg-inval");
    pthread_mutex_lock(&iv.mu);
    for (;;) {
        while (iv.n == 0 && !iv.stopping)
            pthread_cond_wait(&iv.cv, &iv.mu);
        if (iv.n == 0)
            break;
        uint64_t ino = iv.q[iv.head];
        iv.head = (iv.head + 1) % MNT_INVAL_MAX;
        iv.n--;
        struct fuse_session *se = iv.se;
        pthread_mutex_unlock(&iv.mu);
        inval_send(se, ino, 0, 0);
        pthread_mutex_lock(&iv.mu);
    }
    pthread_mutex_unlock(&iv.mu);
    return NULL;
}

/* keg_fs_inval_fn: queue the inode (all of it: pages and attributes). */
static void inval_hook(void *arg, uint64_t ino, uint64_t off, uint64_t len)
{
    (void)arg;
    (void)off;
    (void)len;
    pthread_mutex_lock(&iv.mu);
    if (iv.running && !iv.stopping) {
        int queued = 0;
        for (unsigned i = 0; i < iv.n && !queued; i++)
            queued = iv.q[(iv.head + i) % MNT_INVAL_MAX] == ino;
        if (!queued && iv.n < MNT_INVAL_MAX) {
            iv.q[(iv.head + iv.n) % MNT_INVAL_MAX] = ino;
            iv.n++;
        } else if (!queued) {
            KEG_WARN("kernel cache invalidation queue full: inode %llu may show stale pages "
                     "until its next open", (unsigned long long)ino);
        }
        pthread_cond_signal(&iv.cv);
    }
    pthread_mutex_unlock(&iv.mu);
}

int mnt_inval_start(struct fuse_session *se, struct keg_fs *fs)
{
    int rc;
    pthread_mutex_lock(&iv.mu);
    iv.se = se;
    iv.fs = fs;
    iv.head = iv.n = 0;
    iv.stopping = 0;
    rc = -pthread_create(&iv.thr, NULL, inval_run, NULL);
    iv.running = rc == 0;
    pthread_mutex_unlock(&iv.mu);
    if (rc == 0)
        keg_fs_set_inval(fs, inval_hook, NULL);
    else
        KEG_WARN("cannot start the cache invalidation thread: %s", strerror(-rc));
    return rc;
}

void mnt_inval_stop(void)
{
    pthread_mutex_lock(&iv.mu);
    if (!iv.running) {
        pthread_mutex_unlock(&iv.mu);
        return;
    }
    iv.stopping = 1;
    pthread_cond_signal(&iv.cv);
    pthread_mutex_unlock(&iv.mu);
    pthread_join(iv.thr, NULL);
    keg_fs_set_inval(iv.fs, NULL, NULL);
    pthread_mutex_lock(&iv.mu);
    iv.running = 0;
    pthread_mutex_unlock(&iv.mu);
}

void mnt_inval_range(uint64_t ino, uint64_t off, uint64_t len)
{
    struct fuse_session *se;
    pthread_mutex_lock(&iv.mu);
    se = iv.running ? iv.se : NULL;
    pthread_mutex_unlock(&iv.mu);
    if (se)
        inval_send(se, ino, (off_t)off, (off_t)len);
}
