/* trash.c -- the trash: files unlinked on a volume with trash_days > 0 wait
 * in /.trash/<hour>/ until they expire, and can be restored.
 *
 * DESIGN (docs/internals/TRASH.md)
 * Everything here uses the ordinary engine ops (lookup, getattr, mknod,
 * rename, readdir, unlink, rmdir), so the trash works on every engine.
 *
 *   /.trash                 S_IFDIR 0555 root:root, made on first use
 *   /.trash/YYYY-MM-DD-HH   one per hour (UTC) in which files were deleted
 *   /.trash/<hour>/<parent ino>-<ino>-<name>   the deleted file itself
 *
 * unlink of a regular file with one link (one extra engine call: a lookup)
 * renames it into the current hour directory instead; other types and files
 * with more links are unlinked as before.  A rename that replaces such a file
 * moves the victim to the trash first, then renames (two engine ops, not
 * atomic).  Inside the trash everything is deleted for real.  Moving
 * anything into the trash, or moving /.trash and its hour directories, is
 * refused with EPERM, so whether a directory is "inside the trash" (/.trash
 * itself or an hour directory) never changes: that verdict is cached per
 * directory inode, keeping unlink at one extra call.
 *
 * The expiry thread (mounters with a session) deletes hour directories whose
 * whole hour is older than trash_days: every entry is unlinked for real (its
 * data goes to the deletion queue as usual), then the directory is removed.
 * It runs a few seconds after start and then every ~10 minutes (jittered);
 * $KEG_TRASH_INTERVAL (seconds) and $KEG_TRASH_NOW (the clock, seconds since
 * the epoch) exist for tests.
 *
 * LOCKS: t->mu protects the cached directory inodes and the test clock; it is
 * never held across an engine call.  t->thr_mu protects the thread state.
 * The verdict cache is lock-free (atomic slots).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "trash"
#include "keg/admin.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "fs_i.h"

#define TRASH_NAME      ".trash"
#define TRASH_HOUR_LEN  13                      /* "YYYY-MM-DD-HH" */
#define TRASH_DIR_MODE  (S_IFDIR | 0555)
#define TRASH_VCACHE    4096                    /* verdict cache slots */
#define TRASH_INSIDE    (1ULL << 63)            /* verdict bit of a slot */
#define TRASH_PERIOD_SEC 600                    /* expiry period (jittered +-20%) */
#define TRASH_BATCH     256                     /* readdir batch */
#define TRASH_MAX_DEPTH 64                      /* directories nested in an hour dir */

struct fs_trash {
    pthread_mutex_t mu;                         /* protects the fields up to clock */
    uint64_t        trash_ino;                  /* /.trash, 0: not known */
    char            hour[TRASH_HOUR_LEN + 1];   /* cached hour directory name */
    uint64_t        hour_ino;                   /* its inode, 0: not known */
    int64_t         clock;                      /* test clock, 0: real */
    int             warned;                     /* "/.trash is not a directory" logged */

    /* directory ino -> inside-the-trash verdict: ino | TRASH_INSIDE, 0 empty */
    _Atomic uint64_t verdict[TRASH_VCACHE];

    pthread_mutex_t thr_mu;                     /* protects the fields below */
    pthread_cond_t  thr_cv;                     /* stop requested */
    int             stopping;
    int             running;                    /* thr exists */
    pthread_t       thr;
};

/*----------------------------------------------------------------------------
 * State and clock
 *--------------------------------------------------------------------------*/

/* The trash state of fs, allocated on first use.  NULL on ENOMEM. */
static struct fs_trash *trash_get(struct keg_fs *fs)
{
    struct fs_trash *t = atomic_load(&fs->trash);
    struct fs_trash *expected = NULL;
    pthread_condattr_t ca;

    if (t)
        return t;
    t = keg_calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->thr_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* waits use fs_deadline() */
    pthread_cond_init(&t->thr_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!atomic_compare_exchange_strong(&fs->trash, &expected, t)) {
        pthread_mutex_destroy(&t->mu);
        pthread_mutex_destroy(&t->thr_mu);
        pthread_cond_destroy(&t->thr_cv);
        keg_free(t);
        return expected;
    }
    return t;
}

/* A positive decimal from the environment, or 0. */
static int64_t env_int(const char *name)
{
    const char *s = getenv(name);
    char *end = NULL;
    long long v;
    if (!s || !*s)
        return 0;
    v = strtoll(s, &end, 10);
    if (*end != '\0' || v <= 0)
        return 0;
    return v;
}

static int64_t trash_now(struct fs_trash *t)
{
    int64_t now;
    pthread_mutex_lock(&t->mu);
    now = t->clock;
    pthread_mutex_unlock(&t->mu);
    if (now == 0)
        now = env_int("KEG_TRASH_NOW");
    if (now == 0)
        now = (int64_t)time(NULL);
    return now;
}

void fs_trash_set_clock(struct keg_fs *fs, int64_t now)
{
    struct fs_trash *t = trash_get(fs);
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->clock = now;
    pthread_mutex_unlock(&t->mu);
}

/* "YYYY-MM-DD-HH" (UTC) of time now. */
static void hour_name(int64_t now, char out[TRASH_HOUR_LEN + 1])
{
    struct tm tm;
    time_t tt = (time_t)now;
    gmtime_r(&tt, &tm);
    snprintf(out, TRASH_HOUR_LEN + 1, "%04u-%02u-%02u-%02u",
             (unsigned)(tm.tm_year + 1900) % 10000u, (unsigned)(tm.tm_mon + 1) % 100u,
             (unsigned)tm.tm_mday % 100u, (unsigned)tm.tm_hour % 100u);
}

/* The start of hour directory `name` in seconds since the epoch.
 * Returns 0 or -EINVAL (not an hour name). */
static int hour_parse(const char *name, int64_t *start)
{
    static const char pat[] = "dddd-dd-dd-dd";
    struct tm tm;
    int v[4] = {0, 0, 0, 0};
    int k = 0;

    *start = 0;
    if (strlen(name) != TRASH_HOUR_LEN)
        return -EINVAL;
    for (size_t i = 0; i < TRASH_HOUR_LEN; i++) {
        if (pat[i] == '-') {
            if (name[i] != '-')
                return -EINVAL;
            k++;
        } else if (name[i] < '0' || name[i] > '9') {
            return -EINVAL;
        } else {
            v[k] = v[k] * 10 + (name[i] - '0');
        }
    }
    if (v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > 31 || v[3] > 23)
        return -EINVAL;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = v[0] - 1900;
    tm.tm_mon = v[1] - 1;
    tm.tm_mday = v[2];
    tm.tm_hour = v[3];
    *start = (int64_t)timegm(&tm);
    return 0;
}

/* Forget the cached directories (one was removed or replaced). */
static void trash_invalidate(struct fs_trash *t)
{
    pthread_mutex_lock(&t->mu);
    t->trash_ino = 0;
    t->hour_ino = 0;
    t->hour[0] = '\0';
    pthread_mutex_unlock(&t->mu);
}

/*----------------------------------------------------------------------------
 * Directories
 *--------------------------------------------------------------------------*/

/* The directory parent/name, created (0555 root:root) if missing and create
 * is set.  Returns 0, -ENOENT, -ENOTDIR (name is not a directory), -errno. */
static int get_dir(struct keg_fs *fs, uint64_t parent, const char *name, int create,
                   uint64_t *out)
{
    struct keg_attr a;
    uint64_t ino = 0;
    int rc;

    *out = 0;
    rc = keg_meta_lookup(fs->meta, parent, name, &a);
    if (rc == -ENOENT && create) {
        rc = fs_alloc_ino(fs, &ino);
        if (rc < 0)
            return rc;
        rc = keg_meta_mknod(fs->meta, parent, name, ino, TRASH_DIR_MODE, 0, 0, 0, NULL,
                            &a);
        if (rc == -EEXIST)          /* another mounter made it meanwhile */
            rc = keg_meta_lookup(fs->meta, parent, name, &a);
    }
    if (rc < 0)
        return rc;
    if (!S_ISDIR(a.mode))
        return -ENOTDIR;
    *out = a.ino;
    return 0;
}

/* The inode of /.trash.  Returns 0, -ENOENT (none and !create), -ENOTDIR
 * (/.trash is something else: logged once), -errno. */
static int trash_dir(struct keg_fs *fs, struct fs_trash *t, int create, uint64_t *out)
{
    uint64_t ino;
    int rc;

    pthread_mutex_lock(&t->mu);
    ino = t->trash_ino;
    pthread_mutex_unlock(&t->mu);
    if (ino) {
        *out = ino;
        return 0;
    }
    rc = get_dir(fs, KEG_ROOT_INO, TRASH_NAME, create, out);
    pthread_mutex_lock(&t->mu);
    if (rc == 0) {
        t->trash_ino = *out;
    } else if (rc == -ENOTDIR && !t->warned) {
        t->warned = 1;
        KEG_WARN("/%s exists and is not a directory: deleted files are not kept", TRASH_NAME);
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* The hour directory of now, created if missing. */
static int hour_dir(struct keg_fs *fs, struct fs_trash *t, uint64_t *out)
{
    char hour[TRASH_HOUR_LEN + 1];
    uint64_t tino = 0;
    uint64_t ino = 0;
    int rc;

    *out = 0;
    hour_name(trash_now(t), hour);
    pthread_mutex_lock(&t->mu);
    if (t->hour_ino && strcmp(t->hour, hour) == 0)
        ino = t->hour_ino;
    pthread_mutex_unlock(&t->mu);
    if (ino) {
        *out = ino;
        return 0;
    }
    rc = trash_dir(fs, t, 1, &tino);
    if (rc < 0)
        return rc;
    rc = get_dir(fs, tino, hour, 1, &ino);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&t->mu);
    memcpy(t->hour, hour, sizeof(hour));
    t->hour_ino = ino;
    pthread_mutex_unlock(&t->mu);
    *out = ino;
    return 0;
}

/* 1 if directory dir is /.trash or one of its hour directories, 0 if not,
 * or -errno.  One getattr the first time a directory is asked about. */
static int trash_inside(struct keg_fs *fs, struct fs_trash *t, uint64_t dir)
{
    struct keg_attr a;
    _Atomic uint64_t *slot;
    uint64_t tino = 0;
    uint64_t v;
    int inside;
    int rc;

    if (dir == KEG_ROOT_INO)
        return 0;
    /* made here, before the first file goes to it, so that it is cached */
    rc = trash_dir(fs, t, 1, &tino);
    if (rc == -ENOTDIR || rc == -ENOSPC)
        return 0;               /* no trash: nothing is inside it */
    if (rc < 0)
        return rc;
    if (dir == tino)
        return 1;
    slot = &t->verdict[dir % TRASH_VCACHE];
    v = atomic_load(slot);
    if ((v & ~TRASH_INSIDE) == dir)
        return (v & TRASH_INSIDE) != 0;
    rc = keg_meta_getattr(fs->meta, dir, &a);
    if (rc < 0)
        return rc;
    inside = S_ISDIR(a.mode) && a.parent == tino;
    atomic_store(slot, dir | (inside ? TRASH_INSIDE : 0));
    return inside;
}

/*----------------------------------------------------------------------------
 * Moving into the trash
 *--------------------------------------------------------------------------*/

/* "<parent>-<ino>-<name>", the name cut so that the whole is <= 255 bytes. */
static void entry_name(char out[KEG_NAME_MAX + 1], uint64_t parent, uint64_t ino,
                       const char *name)
{
    int n = snprintf(out, KEG_NAME_MAX + 1, "%llu-%llu-", (unsigned long long)parent,
                     (unsigned long long)ino);
    size_t room = KEG_NAME_MAX - (size_t)n;
    size_t len = strnlen(name, room);
    memcpy(out + n, name, len);
    out[(size_t)n + len] = '\0';
}

/* Where a file went: hour directory and entry name. */
struct trash_spot {
    uint64_t hour_ino;
    char     name[KEG_NAME_MAX + 1];
};

/* Rename parent/name (inode ino) into the current hour directory.
 * Returns 0 (moved: *spot says where), FS_TRASH_PASS (cannot keep it: delete
 * normally), or -errno (-ENOENT: parent/name is gone). */
static int trash_move(struct keg_fs *fs, struct fs_trash *t, uint64_t parent, const char *name,
                      uint64_t ino, struct trash_spot *spot)
{
    struct keg_unlinked gone;
    struct keg_attr moved;
    int rc = -ENOENT;

    entry_name(spot->name, parent, ino, name);
    for (int attempt = 0; attempt < 2; attempt++) {
        rc = hour_dir(fs, t, &spot->hour_ino);
        if (rc == -ENOTDIR)
            return FS_TRASH_PASS;
        if (rc == -ENOSPC) {
            KEG_WARN("no inode left for a trash directory: %s deleted for good", name);
            return FS_TRASH_PASS;
        }
        if (rc < 0)
            return rc;
        memset(&gone, 0, sizeof(gone));
        rc = keg_meta_rename(fs->meta, parent, name, spot->hour_ino, spot->name,
                             KEG_RENAME_NOREPLACE, &moved, &gone);
        if (rc == 0) {
            fs_handle_gone(fs, &gone);
            KEG_DEBUG("moved %llu/%s to the trash as %s", (unsigned long long)parent, name,
                      spot->name);
            return 0;
        }
        if (rc == -EEXIST)
            return FS_TRASH_PASS;       /* the same entry is there already */
        if (rc != -ENOENT)
            return rc;
        /* the hour directory was expired or removed, or the file is gone */
        trash_invalidate(t);
    }
    return rc;
}

int fs_trash_unlink(struct keg_fs *fs, uint64_t parent, const char *name)
{
    struct fs_trash *t = trash_get(fs);
    struct trash_spot spot;
    struct keg_attr a;
    int rc;

    if (!t)
        return -ENOMEM;
    rc = keg_meta_lookup(fs->meta, parent, name, &a);
    if (rc < 0)
        return rc;
    if (!S_ISREG(a.mode) || a.nlink != 1)
        return FS_TRASH_PASS;
    rc = trash_inside(fs, t, parent);
    if (rc < 0)
        return rc;
    if (rc == 1)
        return FS_TRASH_PASS;           /* deleting inside the trash: for good */
    return trash_move(fs, t, parent, name, a.ino, &spot);
}

/* Is parent/name /.trash itself? */
static int is_trash_root(uint64_t parent, const char *name)
{
    return parent == KEG_ROOT_INO && strcmp(name, TRASH_NAME) == 0;
}

int fs_trash_rename(struct keg_fs *fs, uint64_t parent, const char *name, uint64_t newparent,
                    const char *newname, unsigned flags)
{
    struct fs_trash *t = trash_get(fs);
    struct keg_unlinked gone;
    struct keg_attr victim, src, moved;
    struct trash_spot spot;
    uint64_t tino = 0;
    int in_old, in_new;
    int rc;

    if (!t)
        return -ENOMEM;
    if (is_trash_root(parent, name) || is_trash_root(newparent, newname))
        return -EPERM;
    rc = trash_dir(fs, t, 1, &tino);
    if (rc < 0 && rc != -ENOTDIR && rc != -ENOSPC)
        return rc;
    if (rc == 0 && (parent == tino || newparent == tino))
        return -EPERM;                  /* hour directories stay where they are */
    in_old = trash_inside(fs, t, parent);
    if (in_old < 0)
        return in_old;
    in_new = trash_inside(fs, t, newparent);
    if (in_new < 0)
        return in_new;
    if (in_new && !in_old)
        return -EPERM;                  /* nothing moves into the trash but deleted files */
    if (flags != 0 || in_new)
        return FS_TRASH_PASS;           /* no victim, or a victim inside the trash */

    rc = keg_meta_lookup(fs->meta, newparent, newname, &victim);
    if (rc < 0 || !S_ISREG(victim.mode) || victim.nlink != 1)
        return FS_TRASH_PASS;           /* the engine reports errors as before */
    if (parent == newparent && strcmp(name, newname) == 0)
        return FS_TRASH_PASS;
    rc = keg_meta_lookup(fs->meta, parent, name, &src);
    if (rc < 0 || src.ino == victim.ino || S_ISDIR(src.mode))
        return FS_TRASH_PASS;           /* fails (ENOTDIR) or is a no-op: nothing to keep */

    rc = trash_move(fs, t, newparent, newname, victim.ino, &spot);
    if (rc == FS_TRASH_PASS || rc == -ENOENT)
        return FS_TRASH_PASS;           /* the victim vanished: plain rename */
    if (rc < 0)
        return rc;
    /* The window: newname is absent until this rename is done. */
    memset(&gone, 0, sizeof(gone));
    rc = keg_meta_rename(fs->meta, parent, name, newparent, newname, 0, &moved, &gone);
    if (rc == 0) {
        fs_handle_gone(fs, &gone);
        return 0;
    }
    {
        struct keg_unlinked g2;
        struct keg_attr m2;
        int rc2;
        memset(&g2, 0, sizeof(g2));
        rc2 = keg_meta_rename(fs->meta, spot.hour_ino, spot.name, newparent, newname,
                              KEG_RENAME_NOREPLACE, &m2, &g2);
        if (rc2 < 0)
            KEG_WARN("rename onto %llu/%s failed (%s) after its old file went to the trash; "
                     "that file stays there as %s (%s)", (unsigned long long)newparent,
                     newname, strerror(-rc), spot.name, strerror(-rc2));
    }
    return rc;
}

/*----------------------------------------------------------------------------
 * Expiry
 *--------------------------------------------------------------------------*/

struct name_batch {
    char    **names;
    uint32_t *types;
    uint32_t  n;
};

static int collect_cb(void *arg, const struct keg_dirent *de)
{
    struct name_batch *b = arg;
    char *s = keg_strdup(de->name);
    if (!s)
        return 1;               /* stop: the caller sees fewer entries */
    b->names[b->n] = s;
    b->types[b->n] = de->type;
    b->n++;
    return 0;
}

static void batch_clear(struct name_batch *b)
{
    for (uint32_t i = 0; i < b->n; i++)
        keg_free(b->names[i]);
    b->n = 0;
}

/* Up to TRASH_BATCH entries of dir after `after` (NULL: from the start).
 * Returns the count or -errno. */
static int list_batch(struct keg_fs *fs, uint64_t dir, const char *after, struct name_batch *b)
{
    int rc;
    batch_clear(b);
    rc = keg_meta_readdir(fs->meta, dir, after, TRASH_BATCH, 0, collect_cb, b);
    if (rc < 0)
        return rc;
    return (int)b->n;
}

static int batch_alloc(struct name_batch *b)
{
    memset(b, 0, sizeof(*b));
    b->names = keg_calloc(TRASH_BATCH, sizeof(*b->names));
    b->types = keg_calloc(TRASH_BATCH, sizeof(*b->types));
    if (!b->names || !b->types) {
        keg_free(b->names);
        keg_free(b->types);
        return -ENOMEM;
    }
    return 0;
}

static void batch_free(struct name_batch *b)
{
    batch_clear(b);
    keg_free(b->names);
    keg_free(b->types);
}

/* Delete everything below directory dir for good.  *files counts the
 * non-directories removed.  Returns 0 or the first error (going on past it). */
static int remove_tree(struct keg_fs *fs, uint64_t dir, int depth, uint64_t *files)
{
    struct name_batch b;
    char *after = NULL;
    int first = 0;
    int rc;

    if (depth > TRASH_MAX_DEPTH)
        return -ELOOP;
    rc = batch_alloc(&b);
    if (rc < 0)
        return rc;
    for (;;) {
        int n = list_batch(fs, dir, after, &b);
        if (n < 0) {
            first = first ? first : n;
            break;
        }
        if (n == 0)
            break;
        for (int i = 0; i < n; i++) {
            const char *nm = b.names[i];
            if (b.types[i] == S_IFDIR) {
                struct keg_attr a;
                rc = keg_meta_lookup(fs->meta, dir, nm, &a);
                if (rc == 0)
                    rc = remove_tree(fs, a.ino, depth + 1, files);
                if (rc == 0)
                    rc = keg_meta_rmdir(fs->meta, dir, nm);
            } else {
                struct keg_unlinked gone;
                memset(&gone, 0, sizeof(gone));
                rc = keg_meta_unlink(fs->meta, dir, nm, &gone);
                if (rc == 0) {
                    fs_handle_gone(fs, &gone);
                    (*files)++;
                }
            }
            if (rc < 0 && rc != -ENOENT && first == 0) {
                KEG_WARN("expiring trash entry %s: %s", nm, strerror(-rc));
                first = rc;
            }
        }
        keg_free(after);
        after = keg_strdup(b.names[n - 1]);
        if (!after) {
            first = first ? first : -ENOMEM;
            break;
        }
    }
    keg_free(after);
    batch_free(&b);
    return first;
}

int fs_trash_expire(struct keg_fs *fs, uint64_t *files)
{
    struct fs_trash *t;
    struct name_batch b;
    char *after = NULL;
    uint64_t tino = 0;
    int64_t now, keep;
    int first = 0;
    int rc;

    *files = 0;
    if (fs->fmt.trash_days == 0 || fs->read_only)
        return 0;
    t = trash_get(fs);
    if (!t)
        return -ENOMEM;
    now = trash_now(t);
    keep = (int64_t)fs->fmt.trash_days * 86400;
    rc = trash_dir(fs, t, 0, &tino);
    if (rc == -ENOENT || rc == -ENOTDIR)
        return 0;
    if (rc < 0)
        return rc;
    rc = batch_alloc(&b);
    if (rc < 0)
        return rc;
    for (;;) {
        int n = list_batch(fs, tino, after, &b);
        if (n < 0) {
            first = n;
            break;
        }
        if (n == 0)
            break;
        for (int i = 0; i < n; i++) {
            const char *nm = b.names[i];
            struct keg_attr a;
            uint64_t nfiles = 0;
            int64_t start;
            /* expired when every file in it was deleted at least trash_days ago */
            if (b.types[i] != S_IFDIR || hour_parse(nm, &start) < 0 ||
                start + 3600 + keep > now)
                continue;
            rc = keg_meta_lookup(fs->meta, tino, nm, &a);
            if (rc == 0)
                rc = remove_tree(fs, a.ino, 0, &nfiles);
            if (rc == 0)
                rc = keg_meta_rmdir(fs->meta, tino, nm);
            *files += nfiles;
            trash_invalidate(t);
            if (rc == 0 || rc == -ENOENT)
                KEG_INFO("trash %s expired: %llu files deleted", nm,
                         (unsigned long long)nfiles);
            else if (rc == -ENOTEMPTY)
                KEG_DEBUG("trash %s got new entries while expiring: next round", nm);
            else if (first == 0)
                first = rc;
        }
        keg_free(after);
        after = keg_strdup(b.names[n - 1]);
        if (!after) {
            first = first ? first : -ENOMEM;
            break;
        }
    }
    keg_free(after);
    batch_free(&b);
    return first;
}

int keg_fs_trash_expire(struct keg_fs *fs, uint64_t *files)
{
    *files = 0;
    if (fs->read_only)
        return -EROFS;
    return fs_trash_expire(fs, files);
}

static void *trash_main(void *arg)
{
    struct keg_fs *fs = arg;
    struct fs_trash *t = atomic_load(&fs->trash);
    unsigned seed = (unsigned)(keg_mono_ns() ^ (int64_t)getpid());
    int64_t period_ms = env_int("KEG_TRASH_INTERVAL") * 1000;
    int64_t wait_ms;
    keg_thread_name("keg-trash");

    if (period_ms <= 0)
        period_ms = TRASH_PERIOD_SEC * 1000LL;
    /* the first run soon after start, but not with every mounter at once */
    wait_ms = 1000 + rand_r(&seed) % (KEG_MIN(period_ms, 9000LL));
    pthread_mutex_lock(&t->thr_mu);
    while (!t->stopping) {
        struct timespec ts;
        uint64_t files = 0;
        int rc;
        fs_deadline(&ts, wait_ms * 1000000LL);
        while (!t->stopping && pthread_cond_timedwait(&t->thr_cv, &t->thr_mu, &ts) == 0)
            ;
        if (t->stopping)
            break;
        pthread_mutex_unlock(&t->thr_mu);
        rc = fs_trash_expire(fs, &files);
        if (rc < 0)
            KEG_WARN("trash expiry: %s", strerror(-rc));
        pthread_mutex_lock(&t->thr_mu);
        wait_ms = period_ms * 4 / 5 + rand_r(&seed) % (period_ms * 2 / 5 + 1);
    }
    pthread_mutex_unlock(&t->thr_mu);
    return NULL;
}

int fs_trash_start(struct keg_fs *fs)
{
    struct fs_trash *t;
    int rc;

    if (fs->fmt.trash_days == 0 || fs->read_only)
        return 0;
    t = trash_get(fs);
    if (!t)
        return -ENOMEM;
    pthread_mutex_lock(&t->thr_mu);
    rc = 0;
    if (!t->running) {
        t->stopping = 0;
        rc = -pthread_create(&t->thr, NULL, trash_main, fs);
        if (rc == 0)
            t->running = 1;
    }
    pthread_mutex_unlock(&t->thr_mu);
    return rc;
}

void fs_trash_stop(struct keg_fs *fs)
{
    struct fs_trash *t = atomic_load(&fs->trash);
    int running;

    if (!t)
        return;
    pthread_mutex_lock(&t->thr_mu);
    running = t->running;
    t->stopping = 1;
    pthread_cond_broadcast(&t->thr_cv);
    pthread_mutex_unlock(&t->thr_mu);
    if (!running)
        return;
    pthread_join(t->thr, NULL);
    pthread_mutex_lock(&t->thr_mu);
    t->running = 0;
    pthread_mutex_unlock(&t->thr_mu);
}

void fs_trash_free(struct keg_fs *fs)
{
    struct fs_trash *t = atomic_exchange(&fs->trash, NULL);
    if (!t)
        return;
    KEG_ASSERT(!t->running);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->thr_mu);
    pthread_cond_destroy(&t->thr_cv);
    keg_free(t);
}

/*----------------------------------------------------------------------------
 * Restore
 *--------------------------------------------------------------------------*/

/* Split "<parent>-<ino>-<name>".  Returns 0 or -EINVAL. */
static int entry_parse(const char *entry, uint64_t *parent, uint64_t *ino, const char **name)
{
    uint64_t v[2] = {0, 0};
    const char *p = entry;

    for (int k = 0; k < 2; k++) {
        const char *s = p;
        while (*p >= '0' && *p <= '9') {
            if (v[k] > (UINT64_MAX - 9) / 10)
                return -EINVAL;
            v[k] = v[k] * 10 + (uint64_t)(*p - '0');
            p++;
        }
        if (p == s || *p != '-' || v[k] == 0)
            return -EINVAL;
        p++;
    }
    if (!*p)
        return -EINVAL;
    *parent = v[0];
    *ino = v[1];
    *name = p;
    return 0;
}

/* Rename hour/entry to pino/name unless that exists (-EEXIST); with
 * KEG_TRASH_DRYRUN only check.  Returns 0 or -errno. */
static int restore_move(struct keg_fs *fs, uint64_t hino, const char *entry, uint64_t pino,
                        const char *name, unsigned flags)
{
    struct keg_unlinked gone;
    struct keg_attr a;
    int rc;

    if (flags & KEG_TRASH_DRYRUN) {
        rc = keg_meta_lookup(fs->meta, pino, name, &a);
        return rc == 0 ? -EEXIST : rc == -ENOENT ? 0 : rc;
    }
    memset(&gone, 0, sizeof(gone));
    rc = keg_meta_rename(fs->meta, hino, entry, pino, name, KEG_RENAME_NOREPLACE, &a,
                         &gone);
    if (rc == 0)
        fs_handle_gone(fs, &gone);      /* nothing: NOREPLACE replaces nothing */
    return rc;
}

int keg_fs_trash_restore(struct keg_fs *fs, const char *hour, const char *entry, unsigned flags,
                         struct keg_trash_restored *out)
{
    struct fs_trash *t;
    struct keg_attr a, p;
    char alt[KEG_NAME_MAX + 1];
    const char *name = NULL;
    uint64_t pino = 0, ino = 0, tino = 0, hino = 0;
    int64_t start;
    int rc;

    memset(out, 0, sizeof(*out));
    if (fs->read_only)
        return -EROFS;
    if (!hour || !entry || hour_parse(hour, &start) < 0 || fs_check_name(entry) < 0 ||
        entry_parse(entry, &pino, &ino, &name) < 0)
        return -EINVAL;
    t = trash_get(fs);
    if (!t)
        return -ENOMEM;
    rc = trash_dir(fs, t, 0, &tino);
    if (rc == 0)
        rc = get_dir(fs, tino, hour, 0, &hino);
    if (rc == -ENOTDIR)
        rc = -ENOENT;
    if (rc < 0)
        return rc;
    rc = keg_meta_lookup(fs->meta, hino, entry, &a);
    if (rc < 0)
        return rc;
    if (a.ino != ino)
        KEG_WARN("trash entry %s/%s is inode %llu, not the one its name says", hour, entry,
                 (unsigned long long)a.ino);
    rc = keg_meta_getattr(fs->meta, pino, &p);
    if (rc == -ENOENT || (rc == 0 && !S_ISDIR(p.mode)))
        return -ESTALE;
    if (rc < 0)
        return rc;
    rc = trash_inside(fs, t, pino);
    if (rc != 0)
        return rc < 0 ? rc : -ESTALE;
    snprintf(alt, sizeof(alt), "%s", name);
    rc = restore_move(fs, hino, entry, pino, alt, flags);
    if (rc == -EEXIST && !(flags & KEG_TRASH_NOREPLACE)) {
        char suffix[48];
        int ns = snprintf(suffix, sizeof(suffix), ".restored-%llu", (unsigned long long)a.ino);
        size_t keep = KEG_MIN(strlen(name), (size_t)(KEG_NAME_MAX - ns));
        memcpy(alt, name, keep);
        memcpy(alt + keep, suffix, (size_t)ns + 1);
        out->renamed = 1;
        rc = restore_move(fs, hino, entry, pino, alt, flags);
    }
    if (rc < 0) {
        memset(out, 0, sizeof(*out));
        return rc;
    }
    out->parent = pino;
    out->ino = a.ino;
    snprintf(out->name, sizeof(out->name), "%s", alt);
    if (!(flags & KEG_TRASH_DRYRUN))
        KEG_INFO("restored trash entry %s/%s to %llu/%s", hour, entry,
                 (unsigned long long)pino, alt);
    return 0;
}
