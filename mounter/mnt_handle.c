/* mnt_handle.c -- the table of open file and directory handles behind fi->fh.
 *
 * DESIGN
 * fi->fh is not a pointer: it is an id that this table maps to a core handle
 * (struct keg_fh / struct keg_dh) and the inode it was opened on.  An id is
 *
 *     bits 63..48  worker epoch (the supervisor's worker number, 1, 2, ...)
 *     bits 47..0   sequence number, never reused by the worker
 *
 * so an id handed out by a worker that crashed can never name a handle of the
 * worker that replaced it: it is simply unknown here.  The kernel keeps using
 * such ids for the files that were open at the crash; in a restarted worker an
 * unknown id is adopted on first use: the inode is reopened (as root, read-write
 * unless the mount is read-only -- the kernel checked access at the original
 * open) and the new core handle is filed under the OLD id, so later requests and
 * the final release find it.  Whatever the crashed worker had buffered and not
 * committed is lost, as after any crash.  In a fresh (never restarted) worker an
 * unknown id is a bug: it is logged and the request fails with EBADF.
 *
 * Table: a fixed array of hash buckets (chained), one mutex.  Entries are added
 * by open/create/opendir (or adoption) and removed by release/releasedir; the
 * kernel sends no request on a handle after its release, so a handle looked up
 * here stays valid for the request that looked it up.
 *
 * Invariants (protected by mu):
 *   - ids are unique in the table; an entry is in bucket (mix(id) % NBUCKETS)
 *   - n_files / n_dirs count the entries of each kind
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#define KEG_LOG_TAG "fuse"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/mem.h"

#include "mnt_i.h"

#define NBUCKETS 4096u

struct hent {
    uint64_t     id;
    uint64_t     ino;
    int          dir;      /* 1: struct keg_dh, 0: struct keg_fh */
    void        *h;
    struct hent *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct hent *buckets[NBUCKETS];   /* protected by mu */
static uint64_t next_seq = 1;             /* protected by mu */
static uint64_t epoch;                    /* set once, before the session runs */
static int restarted;                     /* handles of an earlier worker may come */
static struct keg_fs *hfs;
static int hfs_read_only;

void mnt_handle_setup(struct keg_fs *fs, unsigned worker_epoch, int is_restart, int read_only)
{
    hfs = fs;
    hfs_read_only = read_only;
    epoch = (uint64_t)(worker_epoch & 0xffffu);
    restarted = is_restart;
}

static unsigned bucket_of(uint64_t id)
{
    uint64_t x = id * 0x9e3779b97f4a7c15ULL;
    return (unsigned)(x >> 40) % NBUCKETS;
}

/* LOCKS: mu held. */
static struct hent **find(uint64_t id)
{
    struct hent **pp = &buckets[bucket_of(id)];
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->next;
    return pp;
}

/* File e under id (id 0: a fresh one).  Returns the id, or 0 on -ENOMEM.
 * If id is already present (two threads adopted it at once), *winner gets the
 * existing entry's handle and e is not filed. */
static uint64_t insert(uint64_t id, uint64_t ino, int dir, void *h, void **winner)
{
    struct hent *e = keg_malloc(sizeof(*e));
    *winner = NULL;
    if (!e)
        return 0;
    pthread_mutex_lock(&mu);
    if (id == 0) {
        id = (epoch << 48) | (next_seq++ & 0xffffffffffffULL);
    } else {
        struct hent *old = *find(id);
        if (old) {
            *winner = old->h;
            pthread_mutex_unlock(&mu);
            keg_free(e);
            return id;
        }
    }
    e->id = id;
    e->ino = ino;
    e->dir = dir;
    e->h = h;
    unsigned b = bucket_of(id);
    e->next = buckets[b];
    buckets[b] = e;
    pthread_mutex_unlock(&mu);
    mnt_stats_open(dir ? 0 : 1, dir ? 1 : 0);
    return id;
}

uint64_t mnt_handle_new(int dir, void *h, uint64_t ino)
{
    void *winner;
    return insert(0, ino, dir, h, &winner);
}

/* The handle of id, or NULL. */
static void *lookup(uint64_t id, int dir)
{
    void *h = NULL;
    pthread_mutex_lock(&mu);
    struct hent *e = *find(id);
    if (e && e->dir == dir)
        h = e->h;
    pthread_mutex_unlock(&mu);
    return h;
}

/* Reopen ino for an id of an earlier worker.  Returns 0 or -errno. */
static int adopt(uint64_t id, uint64_t ino, int dir, void **out)
{
    struct keg_ctx c;
    void *h = NULL;
    void *winner = NULL;
    int rc;
    memset(&c, 0, sizeof(c));   /* root: the kernel checked access at the original open */
    if (dir) {
        struct keg_dh *dh = NULL;
        rc = keg_fs_opendir(hfs, &c, ino, &dh);
        h = dh;
    } else {
        struct keg_fh *fh = NULL;
        int keep = 0;
        rc = keg_fs_open(hfs, &c, ino, hfs_read_only ? O_RDONLY : O_RDWR, &fh, &keep);
        if (rc == -EROFS || rc == -EACCES || rc == -EPERM || rc == -ETXTBSY)
            rc = keg_fs_open(hfs, &c, ino, O_RDONLY, &fh, &keep);
        h = fh;
    }
    if (rc < 0) {
        KEG_WARN("cannot reopen inode %" PRIu64 " for handle %" PRIx64 " of the previous "
                 "worker: %s", ino, id, strerror(-rc));
        return rc;
    }
    if (insert(id, ino, dir, h, &winner) == 0) {
        if (dir)
            keg_fs_releasedir(hfs, h);
        else
            keg_fs_release(hfs, h);
        return -ENOMEM;
    }
    if (winner) {      /* another thread adopted it first: use theirs */
        if (dir)
            keg_fs_releasedir(hfs, h);
        else
            keg_fs_release(hfs, h);
        h = winner;
    } else {
        KEG_INFO("reopened inode %" PRIu64 " for %s handle %" PRIx64 " of the previous worker",
                 ino, dir ? "directory" : "file", id);
    }
    *out = h;
    return 0;
}

static int get(uint64_t id, uint64_t ino, int dir, void **out)
{
    *out = lookup(id, dir);
    if (*out)
        return 0;
    if (restarted && (id >> 48) != epoch)
        return adopt(id, ino, dir, out);
    KEG_ERR("unknown %s handle %" PRIx64 " for inode %" PRIu64,
            dir ? "directory" : "file", id, ino);
    return -EBADF;
}

int mnt_handle_file(uint64_t id, uint64_t ino, struct keg_fh **fh)
{
    void *h = NULL;
    int rc = get(id, ino, 0, &h);
    *fh = h;
    return rc;
}

int mnt_handle_dir(uint64_t id, uint64_t ino, struct keg_dh **dh)
{
    void *h = NULL;
    int rc = get(id, ino, 1, &h);
    *dh = h;
    return rc;
}

void *mnt_handle_remove(uint64_t id, int dir)
{
    void *h = NULL;
    pthread_mutex_lock(&mu);
    struct hent **pp = find(id);
    struct hent *e = *pp;
    if (e && e->dir == dir) {
        *pp = e->next;
        h = e->h;
        keg_free(e);
    }
    pthread_mutex_unlock(&mu);
    if (h)
        mnt_stats_open(dir ? 0 : -1, dir ? -1 : 0);
    else if (!restarted)
        KEG_ERR("release of unknown %s handle %" PRIx64, dir ? "directory" : "file", id);
    return h;
}
