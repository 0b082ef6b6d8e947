/* lock.c -- flock and POSIX byte-range locks (stored in the engine, so they
 * are cluster-wide).
 *
 * DESIGN
 * The engine answers -EAGAIN on a conflict, and -ENOSPC when it is full: a
 * new lock is then -ENOLCK (fcntl(2), flock(2): no room for lock records);
 * unlocking works on a full engine.  A blocking request polls the
 * engine with a backoff of 1, 2, 4 ... 100 ms until it is granted, the
 * request is interrupted (keg_fs_interrupt with its lock owner: the FUSE
 * INTERRUPT of that request) or the volume is closing (-EINTR in both cases).
 * Waiters sleep on fs->bg_cv so that an interrupt wakes them at once.  A worker
 * that hands over (keg_fs_abandon_waits, from a signal handler) only sets a
 * flag, seen at the next poll: the wait ends with -ERESTART and the mounter
 * leaves the request to the next worker.
 *
 * Who releases what.  The kernel names a byte-range lock's owner with a
 * 64-bit id: for a POSIX (F_SETLK) lock the id of the process's file table,
 * for an OFD (F_OFD_SETLK) lock the id of the open file description itself.
 * It never sends an unlock when a description goes away (the kernel keeps no
 * record of locks a FUSE file system holds), so:
 *  - close(2) of any descriptor sends FLUSH with the closing file table's id:
 *    that owner's POSIX locks on the inode go (fs_locks_flush);
 *  - the last close of the description sends RELEASE (a moment after close
 *    returns: the kernel queues it).  Every owner that set a lock through the
 *    handle and has not flushed it since can only be the description itself,
 *    so its locks go then (fs_locks_release): that is what releases OFD locks.
 *    An OFD owner id never equals a file table's, so FLUSH never drops them.
 *  - a mounter that ends or dies loses all its locks with its session
 *    (session_end, or session_clean_stale of another mounter).  A worker that
 *    replaces a crashed one, or takes over in an upgrade, keeps the session
 *    and so the locks; it does not know their owners, so a handle it reopens
 *    for the old worker's (keg_fs_fh_adopted) makes every flush of the inode
 *    release the closing owner's locks, and its release drops the owner the
 *    kernel names when the description used flock (its flock and OFD locks).
 *    For a description that never used flock the mounter knows the owners
 *    from its own record (mnt_handle.c) and releases each with
 *    keg_fs_release_unknown.
 *
 * An unlock the engine fails (unreachable past its retries, an I/O error) at a
 * flush or a release has nobody to report to -- the kernel ignores the errors
 * of both -- and the lock would stay held, every waiter blocked, for the life
 * of the session.  So it is kept in fs->unlocks and tried again every second by
 * the heartbeat thread until it succeeds (or the inode is gone, and its locks
 * with it).  A retried unlock must never drop a lock taken after it: any lock
 * request of the same owner on the same inode first does that owner's pending
 * unlock, and fails with its error if it still fails; fs->unlock_mu, held
 * across those engine calls, keeps a retry and such a request in order.  The
 * mounter hears of each kept unlock and of its end (keg_fs_set_unlock_hook)
 * and keeps the list where the worker that replaces this one finds it, which
 * queues them again (keg_fs_unlock_later).  A volume that keeps its session
 * for the next worker (a handover) does not report the ones it drops at the
 * end as done.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "fs_i.h"

#define FS_LOCK_WAIT_MIN_NS 1000000LL
#define FS_LOCK_WAIT_MAX_NS 100000000LL

struct fs_waiter {
    struct fs_waiter *next;     /* protected by fs->bg_mu */
    uint64_t          owner;
    int               interrupted;
};

void fs_waiters_wake_all(struct keg_fs *fs)
{
    pthread_mutex_lock(&fs->bg_mu);
    for (struct fs_waiter *w = fs->waiters; w; w = w->next)
        w->interrupted = 1;
    pthread_cond_broadcast(&fs->bg_cv);
    pthread_mutex_unlock(&fs->bg_mu);
}

void keg_fs_abandon_waits(struct keg_fs *fs)
{
    __atomic_store_n(&fs->abandon, 1, __ATOMIC_RELEASE);
}

void keg_fs_interrupt(struct keg_fs *fs, uint64_t owner)
{
    pthread_mutex_lock(&fs->bg_mu);
    for (struct fs_waiter *w = fs->waiters; w; w = w->next) {
        if (w->owner == owner)
            w->interrupted = 1;
    }
    pthread_cond_broadcast(&fs->bg_cv);
    pthread_mutex_unlock(&fs->bg_mu);
}

struct lock_req {
    int                     is_flock;
    uint64_t                ino;
    uint64_t                owner;
    uint32_t                type;   /* flock */
    const struct keg_plock *lk;     /* setlk */
};

static int lock_try(struct keg_fs *fs, const struct lock_req *r)
{
    int rc;
    if (r->is_flock)
        rc = keg_meta_flock(fs->meta, r->ino, r->owner, r->type);
    else
        rc = keg_meta_setlk(fs->meta, r->ino, r->owner, r->lk);
    return rc == -ENOSPC ? -ENOLCK : rc;
}

/* Try r until granted, interrupted (-EINTR), the volume closes (-EINTR) or the
 * worker hands over (-ERESTART: the caller leaves the request unanswered, and the
 * kernel resends it to the next worker, where the wait goes on). */
static int lock_wait(struct keg_fs *fs, const struct lock_req *r)
{
    struct fs_waiter w = {.owner = r->owner};
    int64_t delay = FS_LOCK_WAIT_MIN_NS;
    int rc;

    pthread_mutex_lock(&fs->bg_mu);
    w.next = fs->waiters;
    fs->waiters = &w;
    pthread_mutex_unlock(&fs->bg_mu);
    for (;;) {
        struct timespec ts;
        rc = lock_try(fs, r);
        if (rc != -EAGAIN)
            break;
        if (__atomic_load_n(&fs->abandon, __ATOMIC_ACQUIRE)) {
            rc = -ERESTART;
            break;
        }
        pthread_mutex_lock(&fs->bg_mu);
        if (!w.interrupted && !fs->stopping) {
            fs_deadline(&ts, delay);
            pthread_cond_timedwait(&fs->bg_cv, &fs->bg_mu, &ts);
        }
        if (w.interrupted || fs->stopping) {
            pthread_mutex_unlock(&fs->bg_mu);
            rc = -EINTR;
            break;
        }
        pthread_mutex_unlock(&fs->bg_mu);
        delay = KEG_MIN(delay * 2, FS_LOCK_WAIT_MAX_NS);
    }
    pthread_mutex_lock(&fs->bg_mu);
    struct fs_waiter **pp = &fs->waiters;
    while (*pp != &w)
        pp = &(*pp)->next;
    *pp = w.next;
    pthread_mutex_unlock(&fs->bg_mu);
    return rc;
}

/* Remember that owner set a lock through fh (released at fh's last close
 * unless the owner flushes fh first).  Returns 0 or -ENOMEM. */
static int owner_note(struct keg_fh *fh, uint64_t owner)
{
    struct fs_inode *ip = fh->ip;
    int rc = 0;

    pthread_mutex_lock(&ip->mu);
    ip->plocked = 1;                    /* from now on close() releases locks */
    for (uint32_t i = 0; i < fh->nlk_owners; i++) {
        if (fh->lk_owners[i] == owner)
            goto out;
    }
    if (fh->nlk_owners == fh->clk_owners) {
        uint32_t ncap = fh->clk_owners ? fh->clk_owners * 2 : 2;
        uint64_t *v = keg_realloc(fh->lk_owners, ncap * sizeof(*v));
        if (!v) {
            rc = -ENOMEM;
            goto out;
        }
        fh->lk_owners = v;
        fh->clk_owners = ncap;
    }
    fh->lk_owners[fh->nlk_owners++] = owner;
out:
    pthread_mutex_unlock(&ip->mu);
    return rc;
}

struct fs_unlock {
    struct fs_unlock *next;     /* protected by fs->unlock_mu */
    uint64_t          ino;
    uint64_t          owner;
    int               is_flock; /* 1: the owner's flock, 0: all its byte-range locks */
};

static const char *lock_kind(int is_flock)
{
    return is_flock ? "flock" : "byte-range locks";
}

/* Take *pp out of fs->unlocks (fs->unlock_mu held) and free it.  done: it is
 * done, or dropped with the session; 0: a worker handing over leaves it to the
 * next one (the hook's record keeps it). */
static void unlock_forget(struct keg_fs *fs, struct fs_unlock **pp, int done)
{
    struct fs_unlock *u = *pp;
    *pp = u->next;
    if (done && fs->unlock_hook)
        fs->unlock_hook(fs->unlock_hook_arg, u->ino, u->owner, u->is_flock, 0);
    keg_free(u);
    __atomic_sub_fetch(&fs->nunlocks, 1, __ATOMIC_RELAXED);
}

/* The entry of (ino, owner, is_flock) in fs->unlocks, a new one, or NULL
 * (no memory).  *added: it is new.  LOCKS: fs->unlock_mu held. */
static struct fs_unlock *unlock_entry(struct keg_fs *fs, uint64_t ino, uint64_t owner,
                                      int is_flock, int *added)
{
    struct fs_unlock *u;
    *added = 0;
    for (u = fs->unlocks; u; u = u->next) {
        if (u->ino == ino && u->owner == owner && u->is_flock == is_flock)
            return u;
    }
    u = keg_calloc(1, sizeof(*u));
    if (!u)
        return NULL;
    u->ino = ino;
    u->owner = owner;
    u->is_flock = is_flock;
    u->next = fs->unlocks;
    fs->unlocks = u;
    __atomic_add_fetch(&fs->nunlocks, 1, __ATOMIC_RELAXED);
    *added = 1;
    return u;
}

/* Wake the heartbeat thread, which runs the retries. */
static void unlock_wake(struct keg_fs *fs)
{
    pthread_mutex_lock(&fs->bg_mu);
    pthread_cond_broadcast(&fs->bg_cv);
    pthread_mutex_unlock(&fs->bg_mu);
}

void keg_fs_set_unlock_hook(struct keg_fs *fs, keg_fs_unlock_fn *fn, void *arg)
{
    pthread_mutex_lock(&fs->unlock_mu);
    fs->unlock_hook = fn;
    fs->unlock_hook_arg = arg;
    pthread_mutex_unlock(&fs->unlock_mu);
}

int keg_fs_unlock_later(struct keg_fs *fs, uint64_t ino, uint64_t owner, int is_flock)
{
    int added;
    pthread_mutex_lock(&fs->unlock_mu);
    struct fs_unlock *u = unlock_entry(fs, ino, owner, is_flock != 0, &added);
    pthread_mutex_unlock(&fs->unlock_mu);
    if (!u)
        return -ENOMEM;
    unlock_wake(fs);
    return 0;
}

/* Drop owner's flock, or every byte-range lock of owner, on ino.  0 when done
 * (also when the inode is gone: its locks went with it), else -errno. */
static int unlock_all(struct keg_fs *fs, int is_flock, uint64_t ino, uint64_t owner)
{
    int rc;
    if (is_flock) {
        rc = keg_meta_flock(fs->meta, ino, owner, F_UNLCK);
    } else {
        struct keg_plock lk = {.type = F_UNLCK, .start = 0, .end = UINT64_MAX, .pid = 0};
        rc = keg_meta_setlk(fs->meta, ino, owner, &lk);
    }
    return rc == -ENOENT || rc == -ENOSYS ? 0 : rc;
}

/* A flush or a release drops owner's locks on ino; when the engine fails, the
 * unlock is kept and tried again (see the top of this file). */
static void unlock_or_keep(struct keg_fs *fs, int is_flock, uint64_t ino, uint64_t owner)
{
    int rc = unlock_all(fs, is_flock, ino, owner);
    if (rc == 0)
        return;
    int added;
    pthread_mutex_lock(&fs->unlock_mu);
    struct fs_unlock *u = unlock_entry(fs, ino, owner, is_flock, &added);
    if (u && added && fs->unlock_hook)
        fs->unlock_hook(fs->unlock_hook_arg, ino, owner, is_flock, 1);
    pthread_mutex_unlock(&fs->unlock_mu);
    if (u) {
        KEG_WARN("releasing the %s of inode %llu failed (%s): trying again every second",
                 lock_kind(is_flock), (unsigned long long)ino, strerror(-rc));
        unlock_wake(fs);
    } else {
        KEG_ERR("releasing the %s of inode %llu failed (%s), and there is no memory to "
                "try again: held until this mount ends", lock_kind(is_flock),
                (unsigned long long)ino, strerror(-rc));
    }
}

/* Before a lock request of owner on ino: its pending unlocks of ino (both
 * kinds: an owner id names one file table or description), done now.  Returns
 * 0, or the error of one that still fails (kept for the next retry). */
static int unlock_pending_first(struct keg_fs *fs, uint64_t ino, uint64_t owner)
{
    int rc = 0;
    if (!__atomic_load_n(&fs->nunlocks, __ATOMIC_RELAXED))
        return 0;
    pthread_mutex_lock(&fs->unlock_mu);
    for (struct fs_unlock **pp = &fs->unlocks; *pp;) {
        struct fs_unlock *u = *pp;
        if (u->ino != ino || u->owner != owner) {
            pp = &u->next;
            continue;
        }
        int r = unlock_all(fs, u->is_flock, ino, owner);
        if (r < 0) {
            rc = r;
            pp = &u->next;
            continue;
        }
        unlock_forget(fs, pp, 1);
    }
    pthread_mutex_unlock(&fs->unlock_mu);
    return rc;
}

/* Stops at the first failure: the engine is likely still away, and each try can
 * take its whole retry window, which would hold up the session heartbeat.  The
 * one that failed goes to the end, so one that keeps failing blocks no other. */
void fs_unlocks_retry(struct keg_fs *fs)
{
    pthread_mutex_lock(&fs->unlock_mu);
    for (struct fs_unlock **pp = &fs->unlocks; *pp;) {
        struct fs_unlock *u = *pp;
        if (unlock_all(fs, u->is_flock, u->ino, u->owner) < 0) {
            if (u->next) {
                *pp = u->next;
                while (*pp)
                    pp = &(*pp)->next;
                *pp = u;
                u->next = NULL;
            }
            break;
        }
        KEG_INFO("released the %s of inode %llu (an earlier try had failed)",
                 lock_kind(u->is_flock), (unsigned long long)u->ino);
        unlock_forget(fs, pp, 1);
    }
    pthread_mutex_unlock(&fs->unlock_mu);
}

void fs_unlocks_free(struct keg_fs *fs)
{
    pthread_mutex_lock(&fs->unlock_mu);
    while (fs->unlocks)     /* kept for the next worker when the session is */
        unlock_forget(fs, &fs->unlocks, !fs->keep_session);
    pthread_mutex_unlock(&fs->unlock_mu);
}

void fs_locks_flush(struct keg_fs *fs, struct keg_fh *fh, uint64_t lock_owner)
{
    struct fs_inode *ip = fh->ip;
    int plocked;

    pthread_mutex_lock(&ip->mu);
    plocked = ip->plocked;
    for (uint32_t i = 0; i < fh->nlk_owners; i++) {
        if (fh->lk_owners[i] == lock_owner) {
            fh->lk_owners[i] = fh->lk_owners[--fh->nlk_owners];
            break;
        }
    }
    pthread_mutex_unlock(&ip->mu);
    if (plocked)
        unlock_or_keep(fs, 0, ip->ino, lock_owner);
}

void fs_locks_release(struct keg_fs *fs, struct keg_fh *fh)
{
    struct fs_inode *ip = fh->ip;

    if (fh->flocked) {
        unlock_or_keep(fs, 1, ip->ino, fh->flock_owner);
        fh->flocked = 0;
    }
    /* the handle is going: nobody else adds owners now */
    for (uint32_t i = 0; i < fh->nlk_owners; i++)
        unlock_or_keep(fs, 0, ip->ino, fh->lk_owners[i]);
    keg_free(fh->lk_owners);
    fh->lk_owners = NULL;
    fh->nlk_owners = fh->clk_owners = 0;
}

void keg_fs_release_owner(struct keg_fs *fs, struct keg_fh *fh, uint64_t owner)
{
    KEG_UNUSED(fs);
    if (!fh->adopted)
        return;
    fh->flocked = 1;
    fh->flock_owner = owner;
    if (owner_note(fh, owner) < 0)
        KEG_WARN("no memory to note lock owner %llx of inode %llu: its OFD locks stay "
                 "held until the session ends", (unsigned long long)owner,
                 (unsigned long long)fh->ip->ino);
}

void keg_fs_release_unknown(struct keg_fs *fs, uint64_t ino, uint64_t owner)
{
    unlock_or_keep(fs, 1, ino, owner);
    unlock_or_keep(fs, 0, ino, owner);
}

int keg_fs_getlk(struct keg_fs *fs, struct keg_fh *fh, uint64_t owner, struct keg_plock *lk)
{
    if (lk->type != F_RDLCK && lk->type != F_WRLCK)
        return -EINVAL;
    if (lk->start > lk->end)
        return -EINVAL;
    return keg_meta_getlk(fs->meta, fh->ip->ino, owner, lk);
}

int keg_fs_setlk(struct keg_fs *fs, struct keg_fh *fh, uint64_t owner,
                 const struct keg_plock *lk, int wait)
{
    struct lock_req r = {.is_flock = 0, .ino = fh->ip->ino, .owner = owner, .lk = lk};
    int rc;

    if (lk->type != F_RDLCK && lk->type != F_WRLCK && lk->type != F_UNLCK)
        return -EINVAL;
    if (lk->start > lk->end)
        return -EINVAL;
    if (lk->type != F_UNLCK) {
        /* noted before the lock exists, so a racing close cannot miss it */
        rc = owner_note(fh, owner);
        if (rc < 0)
            return rc;
    }
    rc = unlock_pending_first(fs, r.ino, owner);
    if (rc < 0)
        return rc;
    rc = lock_try(fs, &r);
    if (rc == -EAGAIN && wait && lk->type != F_UNLCK)
        rc = lock_wait(fs, &r);
    return rc;
}

int keg_fs_flock(struct keg_fs *fs, struct keg_fh *fh, uint64_t owner, int op)
{
    struct lock_req r = {.is_flock = 1, .ino = fh->ip->ino, .owner = owner};
    int nb = (op & LOCK_NB) != 0;
    int rc;

    switch (op & ~LOCK_NB) {
    case LOCK_SH:
        r.type = F_RDLCK;
        break;
    case LOCK_EX:
        r.type = F_WRLCK;
        break;
    case LOCK_UN:
        r.type = F_UNLCK;
        break;
    default:
        return -EINVAL;
    }
    rc = unlock_pending_first(fs, r.ino, owner);
    if (rc < 0)
        return rc;
    rc = lock_try(fs, &r);
    if (rc == -EAGAIN) {
        if (nb)
            return -EWOULDBLOCK;
        rc = lock_wait(fs, &r);
    }
    if (rc == 0) {
        fh->flocked = r.type != F_UNLCK;
        fh->flock_owner = owner;
    }
    return rc;
}
