/* mnt_handle.c -- the table of open file and directory handles behind fi->fh, and the
 * record of handles with uncommitted data that outlives a crashed worker.
 *
 * DESIGN
 * fi->fh is not a pointer: it is an id that this table maps to a core handle
 * (struct keg_fh / struct keg_dh) and the inode it was opened on.  An id is
 *
 *     bits 63..48  worker epoch (the supervisor's worker number, 1, 2, ...)
 *     bit  47      the kernel does direct I/O on it (MNT_HANDLE_DIRECT)
 *     bits 46..0   sequence number, never reused by the worker
 *
 * so an id handed out by a worker that crashed can never name a handle of the
 * worker that replaced it: it is simply unknown here.  The direct I/O bit is
 * in the id because the kernel decided it at the open and keeps it: a worker
 * that adopts the handle reads it from the id, as the one that opened it does.
 * The kernel keeps using such ids for the files that were open at the crash;
 * in a restarted worker an unknown id is adopted on first use: the inode is
 * reopened (as root, read-write unless the mount is read-only -- the kernel
 * checked access at the original open) and the new core handle is filed under
 * the OLD id, so later requests and the final release find it.  In a fresh
 * (never restarted) worker an unknown id is a bug: it is logged and the
 * request fails with EBADF.
 *
 * Table: a fixed array of hash buckets (chained), one mutex.  Entries are added
 * by open/create/opendir (or adoption) and removed by release/releasedir; the
 * kernel sends no request on a handle after its release, so a handle looked up
 * here stays valid for the request that looked it up.
 *
 * DIRTY RECORD (only under the supervisor)
 * Whatever a worker has buffered and not committed dies with it.  So that no
 * adopted handle ever reports success for such data, the supervisor maps a table
 * of slots (struct mnt_dirty_tab, MAP_SHARED|MAP_ANONYMOUS, created before the
 * first fork) that every worker inherits and that survives a worker's death.  A
 * slot holding a handle id means "this handle wrote data that may not be
 * committed".  A worker
 *   - fills a slot when a handle goes from clean to dirty: BEFORE its first
 *     write after a commit is buffered (so before that write is answered).  One
 *     slot store per handle per dirty period; later writes only bump counters
 *     of the inode (struct mnt_dino) under mu, which the handle lookup takes anyway;
 *   - empties the slots of every dirty handle of an inode after a flush, fsync
 *     or release of the inode (through any handle) succeeded, provided no write
 *     of the inode was in flight when that commit began and none began since
 *     (dino.started, dino.inflight): the commit then covered all their data;
 *   - empties a handle's slot when the handle is released.
 * Commits made inside core/fs on their own (a read, a full buffer, a chunk end)
 * do not empty slots: a handle stays dirty until the next successful explicit
 * commit.  That errs on the safe side: after a crash such a handle is treated as
 * having lost data although it had not.
 *
 * A restarted worker that adopts an id found in a slot (or any file handle of an
 * earlier worker when the record could not be kept: table full, no table) marks
 * the handle LOST: its writes, fallocate, copy_file_range into it, fsync and
 * flush (close) fail with EIO until it is released; reads work and return the
 * committed contents.  Refusing the later writes matters as much as failing the
 * fsync: committing them would make the lost range a hole that reads as zeros.
 * The slot stays filled until the release, so a second crash does not forget it.
 *
 * The record is a memory file (memfd) mapped shared, so that an in-place
 * upgrade passes it to the new binary with the /dev/fuse descriptor
 * (cmd_upgrade.c).  The worker that hands over commits every dirty file
 * (mnt_handle_commit_all) before it exits: only the handles of a file whose
 * commit failed, and the lost handles of an earlier crash, stay in the record,
 * and the new binary's worker treats them as after a crash.
 *
 * LOCK OWNERS.  The same record notes, before each byte-range lock request,
 * which owner locks through which handle (mnt_handle_lock_note), forgets the
 * owner when it flushes the inode (a process's close drops its POSIX locks
 * there) and forgets the handle's owners at its release.  A worker that
 * replaces another gets the release of the old handles, where the kernel names
 * no owner unless the description used flock; the owners still noted for such
 * a handle can only be the description's OFD owner, and are released
 * (mnt_handle_lock_release).  The count of notes in use is a hint that keeps
 * the common release (no locks) to one load; a new worker recounts it.
 *
 * UNLOCKS STILL TO DO.  An unlock that failed at a close is tried again by
 * core every second; the record keeps the list (mnt_handle_unlock_hook), so
 * that a worker that replaces this one queues the unfinished ones again
 * (mnt_handle_unlocks_adopt) instead of leaving the locks held until the end.
 *
 * Slot states: free (id 0) -> dirty (id, ino; this worker) -> free (commit or
 * release) | -> lost (the worker died; adopted by the next one) -> free (release).
 *
 * Invariants (protected by mu):
 *   - ids are unique in the table; an entry is in bucket (mix(id) % NBUCKETS)
 *   - e->d != NULL iff e is on e->d->dirty; then e->slot >= 0 or MNT_SLOT_OVERFLOW
 *   - e->lost implies e->d == NULL (a lost handle never writes again)
 *   - a dino exists while it has dirty handles, writes in flight or commit holds
 *   - dtab->overflow == number of dirty handles of the running worker with
 *     MNT_SLOT_OVERFLOW (plus those of a crashed worker until the next one starts)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEG_LOG_TAG "fuse"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/mem.h"

#include "mnt_i.h"

#define NBUCKETS 4096u
#define MNT_ID_DIRECT (1ULL << 47)      /* id bit: opened with direct I/O */
#define NDINO    256u

/*----- the shared record -----*/

#define MNT_DIRTY_SLOTS   16384u
#define MNT_DIRTY_MAGIC   0x6b444952u   /* "kDIR" */
#define MNT_SLOT_NONE     (-1)
#define MNT_SLOT_OVERFLOW (-2)
#define MNT_OWNER_SLOTS   1024u
#define MNT_UNLOCK_SLOTS  256u
#define MNT_UNLOCK_POSIX  1u
#define MNT_UNLOCK_FLOCK  2u

/* Fields are read and written with __atomic builtins: a worker writes, the
 * supervisor and later workers read after it died. */
struct mnt_dirty_slot {
    uint64_t id;      /* handle id, 0: free */
    uint64_t ino;     /* its inode (for the log) */
};

/* A lock note, in use while key != 0.  In own[]: a lock owner that set a
 * byte-range lock through file handle `key` and has not flushed since (at the
 * handle's release it can only be the open file description's own OFD owner,
 * which the kernel does not name then).  In unl[]: an unlock that failed at a
 * close and is being tried again (core/fs/lock.c), key MNT_UNLOCK_POSIX or
 * MNT_UNLOCK_FLOCK. */
struct mnt_note {
    uint64_t key;
    uint64_t ino;
    uint64_t owner;
};

struct mnt_dirty_tab {
    uint32_t              magic;
    uint32_t              nslots;
    uint64_t              overflow;     /* dirty handles that found no free slot */
    uint64_t              lost_below;   /* file handles of epochs below this are lost */
    uint64_t              session;      /* the workers' metadata session (atomic) */
    uint64_t              nowners;      /* owner slots in use (a hint: recounted at start) */
    struct mnt_dirty_slot slot[MNT_DIRTY_SLOTS];
    struct mnt_note       own[MNT_OWNER_SLOTS];
    struct mnt_note       unl[MNT_UNLOCK_SLOTS];
};

static int record_fd = -1;   /* the memfd behind the supervisor's table, or -1 */

static int record_valid(const struct mnt_dirty_tab *t)
{
    return t->magic == MNT_DIRTY_MAGIC && t->nslots == MNT_DIRTY_SLOTS;
}

struct mnt_dirty_tab *mnt_dirty_create(void)
{
    struct mnt_dirty_tab *t;
    int fd = memfd_create("kegfs-record", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)sizeof(*t)) < 0) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0) {
        t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    } else {        /* no memfd: the table works, but cannot follow an upgrade */
        KEG_WARN("cannot create the record of uncommitted writes as a memory file (%s): "
                 "an in-place upgrade will not carry it to the new binary", strerror(errno));
        t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    }
    if (t == MAP_FAILED) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        errno = e;
        return NULL;
    }
    t->magic = MNT_DIRTY_MAGIC;
    t->nslots = MNT_DIRTY_SLOTS;
    record_fd = fd;
    return t;
}

struct mnt_dirty_tab *mnt_dirty_attach(int fd)
{
    struct mnt_dirty_tab *t;
    struct stat st = {0};
    if (fstat(fd, &st) < 0 || st.st_size != (off_t)sizeof(*t)) {
        KEG_WARN("the previous binary's record of uncommitted writes has another layout "
                 "(%lld bytes): starting a new one", (long long)st.st_size);
        close(fd);
        return NULL;
    }
    t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (t == MAP_FAILED || !record_valid(t)) {
        KEG_WARN("cannot use the previous binary's record of uncommitted writes (%s): "
                 "starting a new one", t == MAP_FAILED ? strerror(errno) : "unknown layout");
        if (t != MAP_FAILED)
            munmap(t, sizeof(*t));
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    record_fd = fd;
    return t;
}

int mnt_dirty_fd(const struct mnt_dirty_tab *t)
{
    return t ? record_fd : -1;
}

void mnt_dirty_free(struct mnt_dirty_tab *t)
{
    if (t)
        munmap(t, sizeof(*t));
    if (t && record_fd >= 0) {
        close(record_fd);
        record_fd = -1;
    }
}

unsigned mnt_dirty_report(const struct mnt_dirty_tab *t, int pid, const char *how)
{
    char inos[160];
    size_t used = 0;
    unsigned n = 0;

    inos[0] = '\0';
    if (!t)
        return 0;
    for (unsigned i = 0; i < t->nslots; i++) {
        if (__atomic_load_n(&t->slot[i].id, __ATOMIC_ACQUIRE) == 0)
            continue;
        if (n < 8 && used < sizeof(inos)) {
            int k = snprintf(inos + used, sizeof(inos) - used, "%s%" PRIu64, n ? " " : "",
                             t->slot[i].ino);
            if (k > 0)
                used += (size_t)k;
        }
        n++;
    }
    uint64_t over = __atomic_load_n(&t->overflow, __ATOMIC_ACQUIRE);
    if (over)
        KEG_ERR("worker %d %s uncommitted data of %" PRIu64 " open files it could "
                "not record: every file open through it is treated as having lost data "
                "(writes, fsync and close through it fail with EIO)", pid, how, over);
    if (n)
        KEG_ERR("worker %d %s uncommitted data in %u open file handle%s (inode%s %s%s): "
                "that data is lost; writes, fsync and close through %s fail with EIO",
                pid, how, n, n == 1 ? "" : "s", n == 1 ? "" : "s", inos, n > 8 ? " ..." : "",
                n == 1 ? "it" : "them");
    return n;
}

void mnt_dirty_foreach(const struct mnt_dirty_tab *t, mnt_dirty_fn *fn, void *arg)
{
    if (!t)
        return;
    for (unsigned i = 0; i < t->nslots; i++) {
        uint64_t id = __atomic_load_n(&t->slot[i].id, __ATOMIC_ACQUIRE);
        if (id)
            fn(arg, id, __atomic_load_n(&t->slot[i].ino, __ATOMIC_RELAXED));
    }
}

/*----- the handle table -----*/

struct mnt_dino;

struct hent {
    uint64_t     id;
    uint64_t     ino;
    int          dir;      /* 1: struct keg_dh, 0: struct keg_fh */
    int          lost;     /* adopted with data lost in a crash: writes/syncs fail */
    int          slot;     /* dtab slot, MNT_SLOT_NONE or MNT_SLOT_OVERFLOW */
    void        *h;
    struct mnt_dino *d;        /* non-NULL while dirty */
    struct hent *dnext;    /* next dirty handle of d */
    struct hent *next;
};

/* Write bookkeeping of one inode (only with a dirty record). */
struct mnt_dino {
    uint64_t     ino;
    uint64_t     started;   /* writes begun while this record exists */
    unsigned     inflight;  /* writes begun and not ended */
    unsigned     holds;     /* commits between mnt_handle_commit_begin and _end */
    struct hent *dirty;     /* its dirty handles */
    struct mnt_dino *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct hent *buckets[NBUCKETS];   /* protected by mu */
static struct mnt_dino *dinos[NDINO];        /* protected by mu */
static uint64_t next_seq = 1;             /* protected by mu */
static uint64_t epoch;                    /* set once, before the session runs */
static int restarted;                     /* handles of an earlier worker may come */
static struct keg_fs *hfs;
static int hfs_read_only;
static struct mnt_dirty_tab *dtab;        /* set once, before the session; NULL: none */
static int have_dtab;                     /* this worker runs under a supervisor */

uint64_t mnt_dirty_session(const struct mnt_dirty_tab *t)
{
    return t ? __atomic_load_n(&t->session, __ATOMIC_ACQUIRE) : 0;
}

void mnt_dirty_set_session(struct mnt_dirty_tab *t, uint64_t sid)
{
    if (t)
        __atomic_store_n(&t->session, sid, __ATOMIC_RELEASE);
}

void mnt_handle_set_session(uint64_t sid)
{
    mnt_dirty_set_session(dtab, sid);
}

void mnt_handle_use_dirty(struct mnt_dirty_tab *t)
{
    dtab = t;
    have_dtab = 1;
}

void mnt_handle_setup(struct keg_fs *fs, unsigned worker_epoch, int is_restart, int read_only)
{
    hfs = fs;
    hfs_read_only = read_only;
    epoch = (uint64_t)(worker_epoch & 0xffffu);
    restarted = is_restart;
    if (dtab && is_restart) {        /* the previous worker may have died mid-update */
        uint64_t n = 0;
        for (unsigned k = 0; k < MNT_OWNER_SLOTS; k++)
            n += __atomic_load_n(&dtab->own[k].key, __ATOMIC_ACQUIRE) != 0;
        __atomic_store_n(&dtab->nowners, n, __ATOMIC_RELEASE);
    }
    if (dtab && is_restart && __atomic_load_n(&dtab->overflow, __ATOMIC_ACQUIRE) > 0) {
        /* the dead worker had dirty handles it could not record: all are suspect */
        __atomic_store_n(&dtab->lost_below, epoch, __ATOMIC_RELEASE);
        __atomic_store_n(&dtab->overflow, 0, __ATOMIC_RELEASE);
    }
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

/*----- slots (LOCKS: mu held; only the running worker writes them) -----*/

static int slot_take(uint64_t id, uint64_t ino)
{
    unsigned start = bucket_of(id) % MNT_DIRTY_SLOTS;
    for (unsigned i = 0; i < MNT_DIRTY_SLOTS; i++) {
        unsigned k = (start + i) % MNT_DIRTY_SLOTS;
        struct mnt_dirty_slot *s = &dtab->slot[k];
        if (__atomic_load_n(&s->id, __ATOMIC_RELAXED) == 0) {
            __atomic_store_n(&s->ino, ino, __ATOMIC_RELAXED);
            __atomic_store_n(&s->id, id, __ATOMIC_RELEASE);
            return (int)k;
        }
    }
    __atomic_add_fetch(&dtab->overflow, 1, __ATOMIC_RELEASE);
    return MNT_SLOT_OVERFLOW;
}

static void slot_free(int k)
{
    if (k >= 0)
        __atomic_store_n(&dtab->slot[k].id, 0, __ATOMIC_RELEASE);
    else if (k == MNT_SLOT_OVERFLOW)
        __atomic_sub_fetch(&dtab->overflow, 1, __ATOMIC_RELEASE);
}

/* The slot holding id (slots are freed anywhere, so a miss scans them all). */
static int slot_find(uint64_t id)
{
    unsigned start = bucket_of(id) % MNT_DIRTY_SLOTS;
    for (unsigned i = 0; i < MNT_DIRTY_SLOTS; i++) {
        unsigned k = (start + i) % MNT_DIRTY_SLOTS;
        if (__atomic_load_n(&dtab->slot[k].id, __ATOMIC_ACQUIRE) == id)
            return (int)k;
    }
    return MNT_SLOT_NONE;
}

/*----- per-inode write bookkeeping (LOCKS: mu held) -----*/

static struct mnt_dino **dino_find(uint64_t ino)
{
    struct mnt_dino **pp = &dinos[bucket_of(ino) % NDINO];
    while (*pp && (*pp)->ino != ino)
        pp = &(*pp)->next;
    return pp;
}

static struct mnt_dino *dino_get(uint64_t ino)
{
    struct mnt_dino **pp = dino_find(ino);
    if (*pp)
        return *pp;
    struct mnt_dino *d = keg_calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->ino = ino;
    *pp = d;
    return d;
}

static void dino_maybe_free(struct mnt_dino *d)
{
    if (d->dirty || d->inflight || d->holds)
        return;
    struct mnt_dino **pp = dino_find(d->ino);
    KEG_ASSERT(*pp == d);
    *pp = d->next;
    keg_free(d);
}

static void dirty_unlink(struct hent *e)
{
    struct mnt_dino *d = e->d;
    struct hent **pp = &d->dirty;
    while (*pp != e)
        pp = &(*pp)->dnext;
    *pp = e->dnext;
    e->dnext = NULL;
    e->d = NULL;
    slot_free(e->slot);
    e->slot = MNT_SLOT_NONE;
    dino_maybe_free(d);
}

/*----- entries -----*/

/* File e under id (id 0: a fresh one).  Returns the id, or 0 on -ENOMEM.
 * If id is already present (two threads adopted it at once), *winner gets the
 * existing entry's handle and e is not filed.  An adopted file handle (id != 0)
 * is marked lost if the dirty record says so; *lost tells. */
static uint64_t insert(uint64_t id, uint64_t ino, int dir, void *h, void **winner, int *lost)
{
    uint64_t direct = (dir & MNT_HANDLE_DIRECT) ? MNT_ID_DIRECT : 0;
    dir &= 1;
    struct hent *e = keg_calloc(1, sizeof(*e));
    *winner = NULL;
    *lost = 0;
    if (!e)
        return 0;
    e->slot = MNT_SLOT_NONE;
    pthread_mutex_lock(&mu);
    if (id == 0) {
        id = (epoch << 48) | direct | (next_seq++ & (MNT_ID_DIRECT - 1));
    } else {
        struct hent *old = *find(id);
        if (old) {
            *winner = old->h;
            *lost = old->lost;
            pthread_mutex_unlock(&mu);
            keg_free(e);
            return id;
        }
        if (!dir && dtab) {
            e->slot = slot_find(id);
            e->lost = e->slot != MNT_SLOT_NONE ||
                      (id >> 48) < __atomic_load_n(&dtab->lost_below, __ATOMIC_ACQUIRE);
        } else if (!dir && have_dtab) {
            e->lost = 1;       /* no record (it could not be created): assume the worst */
        }
        *lost = e->lost;
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
    int lost;
    return insert(0, ino, dir, h, &winner, &lost);
}

int mnt_handle_direct(uint64_t id)
{
    return (id & MNT_ID_DIRECT) != 0;
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
    int lost = 0;
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
        if (rc == 0)
            keg_fs_fh_adopted(hfs, fh);     /* its locks are not known here */
        h = fh;
    }
    if (rc < 0) {
        KEG_WARN("cannot reopen inode %" PRIu64 " for handle %" PRIx64 " of the previous "
                 "worker: %s", ino, id, strerror(-rc));
        return rc;
    }
    if (insert(id, ino, dir, h, &winner, &lost) == 0) {
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
    } else if (lost) {
        KEG_WARN("reopened inode %" PRIu64 " for file handle %" PRIx64 " of the previous "
                 "worker, which had data written through it and not committed: that data "
                 "is lost; writes, fsync and close through this handle fail with EIO",
                 ino, id);
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

int mnt_handle_file_w(uint64_t id, uint64_t ino, struct keg_fh **fh)
{
    void *h = NULL;
    int rc = get(id, ino, 0, &h);
    *fh = NULL;
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&mu);
    struct hent *e = *find(id);
    int lost = e && e->lost;
    pthread_mutex_unlock(&mu);
    if (lost)
        return -EIO;
    *fh = h;
    return 0;
}

int mnt_handle_dir(uint64_t id, uint64_t ino, struct keg_dh **dh)
{
    void *h = NULL;
    int rc = get(id, ino, 1, &h);
    *dh = h;
    return rc;
}

/*----- dirty tracking -----*/

int mnt_handle_write_begin(uint64_t id, uint64_t ino, struct keg_fh **fh, struct mnt_dtok *t)
{
    memset(t, 0, sizeof(*t));
    *fh = NULL;
    for (int pass = 0; pass < 2; pass++) {
        pthread_mutex_lock(&mu);
        struct hent *e = *find(id);
        if (e && !e->dir) {
            int rc = 0;
            if (e->lost) {
                rc = -EIO;
            } else if (dtab) {
                struct mnt_dino *d = e->d ? e->d : dino_get(e->ino);
                if (!d) {
                    rc = -ENOMEM;
                } else {
                    d->started++;
                    d->inflight++;
                    if (!e->d) {      /* clean -> dirty: record it before the write */
                        e->slot = slot_take(e->id, e->ino);
                        e->d = d;
                        e->dnext = d->dirty;
                        d->dirty = e;
                    }
                    t->d = d;
                }
            }
            if (rc == 0)
                *fh = e->h;
            pthread_mutex_unlock(&mu);
            return rc;
        }
        pthread_mutex_unlock(&mu);
        if (pass == 0) {
            void *h = NULL;
            int rc = get(id, ino, 0, &h);     /* adopts an earlier worker's id */
            if (rc < 0)
                return rc;
        }
    }
    return -EBADF;       /* released while we wrote: the kernel does not do that */
}

void mnt_handle_write_end(struct mnt_dtok *t)
{
    struct mnt_dino *d = t->d;
    if (!d)
        return;
    pthread_mutex_lock(&mu);
    KEG_ASSERT(d->inflight > 0);
    d->inflight--;
    dino_maybe_free(d);
    pthread_mutex_unlock(&mu);
    t->d = NULL;
}

void mnt_handle_commit_begin(uint64_t id, uint64_t ino, struct mnt_dtok *t)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_lock(&mu);
    if (id) {
        struct hent *e = *find(id);
        t->lost = e && !e->dir && e->lost;
    }
    if (dtab) {
        struct mnt_dino *d = *dino_find(ino);
        if (d) {
            d->holds++;
            t->d = d;
            t->started = d->started;
            t->all_in = d->inflight == 0;
        }
    }
    pthread_mutex_unlock(&mu);
}

int mnt_handle_commit_end(struct mnt_dtok *t, int rc)
{
    struct mnt_dino *d = t->d;
    if (d) {
        pthread_mutex_lock(&mu);
        if (rc == 0 && t->all_in && d->started == t->started) {
            while (d->dirty) {          /* the commit covered every write of the inode */
                struct hent *e = d->dirty;
                d->dirty = e->dnext;
                e->dnext = NULL;
                e->d = NULL;
                slot_free(e->slot);
                e->slot = MNT_SLOT_NONE;
            }
        }
        KEG_ASSERT(d->holds > 0);
        d->holds--;
        dino_maybe_free(d);
        pthread_mutex_unlock(&mu);
        t->d = NULL;
    }
    return t->lost ? -EIO : rc;
}

/*----- lock notes: owners per handle, unlocks still to do -----*/

/* Writers of dtab->own and dtab->unl (not mu: a lock request does not hold up
 * the handle lookups of reads and writes).  Core calls mnt_handle_unlock_hook
 * under its own unlock lock, so nmu is never held across a call into core. */
static pthread_mutex_t nmu = PTHREAD_MUTEX_INITIALIZER;
_Static_assert(MNT_OWNER_SLOTS == 1024u && MNT_UNLOCK_SLOTS == 256u,
               "the WARN lines of the full tables name these sizes");

/* (key, ino, owner) in v[0..n): its entry, or NULL with *spare the first free
 * entry (NULL: none).  LOCKS: nmu held. */
static struct mnt_note *note_find(struct mnt_note *v, unsigned n, uint64_t key, uint64_t ino,
                                  uint64_t owner, struct mnt_note **spare)
{
    *spare = NULL;
    for (unsigned k = 0; k < n; k++) {
        uint64_t kk = __atomic_load_n(&v[k].key, __ATOMIC_RELAXED);
        if (kk == key && v[k].ino == ino && v[k].owner == owner)
            return &v[k];
        if (kk == 0 && !*spare)
            *spare = &v[k];
    }
    return NULL;
}

/* Add (key, ino, owner) to v[0..n) unless it is there.  Returns 1 (added), 0
 * (there already) or -1 (full: logged once per table).  LOCKS: nmu held. */
static int note_add(struct mnt_note *v, unsigned n, uint64_t key, uint64_t ino,
                    uint64_t owner, int *warned, const char *full)
{
    struct mnt_note *e;
    if (note_find(v, n, key, ino, owner, &e))
        return 0;
    if (!e) {
        if (!*warned)
            KEG_WARN("%s", full);
        *warned = 1;
        return -1;
    }
    __atomic_store_n(&e->ino, ino, __ATOMIC_RELAXED);
    __atomic_store_n(&e->owner, owner, __ATOMIC_RELAXED);
    __atomic_store_n(&e->key, key, __ATOMIC_RELEASE);
    return 1;
}

/* LOCKS: nmu held. */
static void owner_free(struct mnt_note *o)
{
    __atomic_store_n(&o->key, 0, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&dtab->nowners, 1, __ATOMIC_RELEASE);
}

void mnt_handle_lock_note(uint64_t id, uint64_t ino, uint64_t owner)
{
    static int warned;                  /* protected by nmu */
    if (!dtab)
        return;
    pthread_mutex_lock(&nmu);
    if (note_add(dtab->own, MNT_OWNER_SLOTS, id, ino, owner, &warned,
                 "more than 1024 lock owners hold byte-range locks through open files: "
                 "the OFD locks of the others stay held until the mount ends if this "
                 "worker is replaced (crash or upgrade) before they are released") > 0)
        __atomic_add_fetch(&dtab->nowners, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&nmu);
}

void mnt_handle_lock_flushed(uint64_t ino, uint64_t owner)
{
    if (!dtab || !__atomic_load_n(&dtab->nowners, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&nmu);
    for (unsigned k = 0; k < MNT_OWNER_SLOTS; k++) {
        struct mnt_note *o = &dtab->own[k];
        if (__atomic_load_n(&o->key, __ATOMIC_RELAXED) && o->ino == ino && o->owner == owner)
            owner_free(o);
    }
    pthread_mutex_unlock(&nmu);
}

void mnt_handle_lock_release(uint64_t id, mnt_owner_fn *fn, void *arg)
{
    enum { BATCH = 16 };
    uint64_t ino[BATCH], owner[BATCH];
    unsigned n;
    int earlier = restarted && (id >> 48) != epoch;

    if (!dtab)
        return;
    do {
        n = 0;
        if (!__atomic_load_n(&dtab->nowners, __ATOMIC_ACQUIRE))
            break;
        pthread_mutex_lock(&nmu);
        for (unsigned k = 0; k < MNT_OWNER_SLOTS && n < BATCH; k++) {
            struct mnt_note *o = &dtab->own[k];
            if (__atomic_load_n(&o->key, __ATOMIC_ACQUIRE) != id)
                continue;
            ino[n] = o->ino;
            owner[n] = o->owner;
            n++;
            owner_free(o);
        }
        pthread_mutex_unlock(&nmu);
        for (unsigned i = 0; earlier && fn && i < n; i++)
            fn(arg, ino[i], owner[i]);
    } while (n == BATCH);
}

void mnt_handle_unlock_hook(void *arg, uint64_t ino, uint64_t owner, int is_flock, int kept)
{
    static int warned;            /* protected by nmu */
    uint64_t key = is_flock ? MNT_UNLOCK_FLOCK : MNT_UNLOCK_POSIX;
    struct mnt_note *e, *spare;
    KEG_UNUSED(arg);
    if (!dtab)
        return;
    pthread_mutex_lock(&nmu);
    if (kept)
        note_add(dtab->unl, MNT_UNLOCK_SLOTS, key, ino, owner, &warned,
                 "more than 256 lock releases wait for the metadata engine: if this worker "
                 "is replaced (crash or upgrade) before they are done, the others stay "
                 "held until the mount ends");
    else if ((e = note_find(dtab->unl, MNT_UNLOCK_SLOTS, key, ino, owner, &spare)) != NULL)
        __atomic_store_n(&e->key, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&nmu);
}

unsigned mnt_handle_unlocks_adopt(struct keg_fs *fs, int same_session)
{
    struct mnt_note v[MNT_UNLOCK_SLOTS];
    unsigned n = 0, queued = 0;
    if (!dtab)
        return 0;
    /* copied first: nmu is not held across the call into core (see nmu) */
    pthread_mutex_lock(&nmu);
    for (unsigned k = 0; k < MNT_UNLOCK_SLOTS; k++) {
        struct mnt_note *u = &dtab->unl[k];
        if (!__atomic_load_n(&u->key, __ATOMIC_ACQUIRE))
            continue;
        if (same_session)
            v[n++] = *u;
        else                        /* another session's locks went, or go, with it */
            __atomic_store_n(&u->key, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&nmu);
    for (unsigned i = 0; i < n; i++) {
        if (keg_fs_unlock_later(fs, v[i].ino, v[i].owner, v[i].key == MNT_UNLOCK_FLOCK) == 0)
            queued++;
        else
            KEG_ERR("no memory to queue the release of a lock on inode %" PRIu64 ": held "
                    "until the mount ends", v[i].ino);
    }
    if (queued)
        KEG_INFO("%u lock release%s of the previous worker still to do: trying again every "
                 "second", queued, queued == 1 ? "" : "s");
    return queued;
}

#define MNT_COMMIT_THREADS 8        /* besides the caller */

struct commit_pick {
    uint64_t       id, ino;
    struct keg_fh *fh;
};

struct commit_run {
    struct commit_pick *v;
    size_t              n;
    size_t              next;      /* atomic: the next pick to commit */
    unsigned            failed;    /* atomic */
};

static void *commit_thread(void *arg)
{
    struct commit_run *r = arg;
    for (;;) {
        size_t i = __atomic_fetch_add(&r->next, 1, __ATOMIC_RELAXED);
        if (i >= r->n)
            return NULL;
        struct mnt_dtok t;
        mnt_handle_commit_begin(r->v[i].id, r->v[i].ino, &t);
        int rc = mnt_handle_commit_end(&t, keg_fs_commit(hfs, r->v[i].fh));
        if (rc < 0) {
            KEG_ERR("handing over: cannot commit inode %" PRIu64 ": %s (the data written "
                    "through its open descriptors since their last commit is lost: they "
                    "fail with EIO under the next worker)", r->v[i].ino, strerror(-rc));
            __atomic_add_fetch(&r->failed, 1, __ATOMIC_RELAXED);
        }
    }
}

unsigned mnt_handle_commit_all(void)
{
    struct commit_pick *v = NULL;
    size_t n = 0;
    unsigned failed = 0;

    if (!dtab)
        return 0;
    pthread_mutex_lock(&mu);
    for (int pass = 0; pass < 2; pass++) {      /* count, then fill */
        size_t k = 0;
        for (unsigned b = 0; b < NDINO; b++) {
            for (struct mnt_dino *d = dinos[b]; d; d = d->next) {
                if (!d->dirty)
                    continue;
                if (v)
                    v[k] = (struct commit_pick){d->dirty->id, d->ino, d->dirty->h};
                k++;
            }
        }
        n = k;
        if (pass == 0 && (n == 0 || !(v = keg_calloc(n, sizeof(*v)))))
            break;
    }
    pthread_mutex_unlock(&mu);
    if (n && !v) {
        KEG_ERR("handing over: no memory to commit %zu files one by one: the next worker "
                "treats their descriptors as having lost data", n);
        return (unsigned)n;
    }
    /* several at once: with the store failing, each commit can take a whole
     * retry deadline, and the mount is stalled until the last one ends */
    struct commit_run run = {.v = v, .n = n};
    pthread_t th[MNT_COMMIT_THREADS];
    unsigned nth = 0;
    while (nth < MNT_COMMIT_THREADS && nth + 1 < n &&
           pthread_create(&th[nth], NULL, commit_thread, &run) == 0)
        nth++;
    commit_thread(&run);
    for (unsigned i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    failed = __atomic_load_n(&run.failed, __ATOMIC_RELAXED);
    keg_free(v);
    return failed;
}

void *mnt_handle_remove(uint64_t id, int dir)
{
    void *h = NULL;
    int found = 0;
    pthread_mutex_lock(&mu);
    struct hent **pp = find(id);
    struct hent *e = *pp;
    if (e && e->dir == dir) {
        found = 1;
        *pp = e->next;
        h = e->h;
        if (e->d)
            dirty_unlink(e);
        else if (dtab)
            slot_free(e->slot);          /* a lost handle's slot ends here */
        keg_free(e);
    } else if (!e && !dir && restarted && dtab && (id >> 48) != epoch) {
        int k = slot_find(id);          /* released without ever being used again */
        if (k >= 0)
            slot_free(k);
    }
    pthread_mutex_unlock(&mu);
    if (found)
        mnt_stats_open(dir ? 0 : -1, dir ? -1 : 0);
    else if (!restarted)
        KEG_ERR("release of unknown %s handle %" PRIx64, dir ? "directory" : "file", id);
    return h;
}
