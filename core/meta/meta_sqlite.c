/* meta_sqlite.c -- the SQLite metadata engine (META_URL sqlite3:///abs/path.db).
 *
 * DESIGN
 * This engine is the reference implementation of the semantics in keg/meta.h;
 * docs/internals/META.md documents its schema and every decision the header
 * leaves open.  Every op is one SQLite transaction (BEGIN IMMEDIATE for
 * writes, a deferred BEGIN for reads) run by sq_txn(), which retries a
 * transaction that found the database locked (SQLITE_BUSY after the 5 s busy
 * timeout) SQ_RETRIES times and then fails with -EIO.  An op body (sq_fn)
 * therefore may run more than once: it writes results into its argument
 * struct and the public wrapper copies them out after the commit.
 *
 * Connections: a pool per instance.  A thread takes an idle connection (or
 * opens a new one, at most SQ_MAX_CONNS, else it waits for one), runs one
 * transaction and gives it back, so threads read concurrently (WAL mode); write transactions of one instance
 * are serialised by p->wlock first so that they queue on a mutex instead of
 * polling SQLite's file lock.  Each connection caches its prepared statements
 * keyed by the address of the (static) SQL text.  Connections open through
 * the kegfs-wal VFS (meta_sqlite_vfs.c), which writes a commit's WAL frames
 * with one write.
 *
 * The database file is created only by format_init: every other path opens
 * with SQLITE_OPEN_READWRITE, so status/info on a missing file report
 * -ENOENT ("not formatted") and leave nothing behind.  The file and its
 * -wal/-shm are mode 0600: the database holds the object store's secret key
 * (sq_secure_files).
 *
 * Checkpoints of the WAL run in a thread of their own, not inside the commit
 * that crossed SQLite's threshold ("checkpoints" below).
 *
 * LOCKS: p->lock protects the idle list; p->wlock is taken around every write
 * transaction (never while holding p->lock); p->ckpt_lock protects the
 * checkpointer's state and is taken inside p->wlock by the WAL hook.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "keg/mem.h"
#include "keg/meta.h"
#include "keg/retry.h"
#include "keg/url.h"
#include "meta_sqlite_vfs_i.h"
#define KEG_LOG_TAG "meta_sqlite"
#include "keg/log.h"

#define SQ_BUSY           (-100000)   /* internal: transaction must be retried */
#define SQ_RETRIES        3
#define SQ_BUSY_TIMEOUT   5000        /* ms */
#define SQ_SCHEMA_VERSION 1
#define SQ_REC            24          /* bytes of one packed slice record */
#define SQ_SLOTS          256         /* prepared-statement cache slots per connection */
#define SQ_MAX_LINKS      65000
#define SQ_MAX_CONNS      16          /* connections per instance (each has its own cache) */
#define SQ_CKPT_PAGES     1000        /* WAL pages after a commit that call for a checkpoint */
#define SQ_CKPT_HARD      16000       /* ...that make the committing thread do it itself */
#define SQ_CKPT_TAIL      64          /* pages a checkpoint may copy with the writers held */
#define SQ_CKPT_LAPS      8           /* checkpoints without them, at most, before that one */

#define I(x) ((int64_t)(x))

struct sq_slot {
    const char   *sql;      /* key: address of a static SQL string */
    sqlite3_stmt *st;
};

struct sq_conn {
    sqlite3        *db;
    struct sq_conn *next;   /* idle list link; protected by sq_priv.lock */
    struct sq_slot  slot[SQ_SLOTS];
    uint32_t        queued; /* slices put in the deletion queue (wraps; compare differences) */
};

struct sq_priv {
    char           *path;       /* database file */
    pthread_mutex_t lock;       /* protects idle, nconn */
    pthread_cond_t  freed;      /* a connection went back to idle */
    pthread_mutex_t wlock;      /* serialises this instance's write transactions */
    struct sq_conn *idle;       /* protected by lock */
    unsigned        nconn;      /* open connections (idle or in use); protected by lock */
    uint64_t        sid;        /* session id or 0; atomic access */
    int             secured;    /* file modes checked (sq_secure_files); atomic access */
    int             inited;
    /* the checkpointer (sq_ckpt_main): started by the first WAL that needs it */
    pthread_mutex_t ckpt_lock;  /* protects the ckpt_* fields below */
    pthread_cond_t  ckpt_cv;    /* ckpt_want or ckpt_stop was set */
    pthread_t       ckpt_thread;
    int             ckpt_started;   /* ckpt_thread runs (joined by sq_close) */
    int             ckpt_failed;    /* it could not start: commits checkpoint themselves */
    int             ckpt_want;      /* a commit left SQ_CKPT_PAGES or more in the WAL */
    int             ckpt_stop;
};

#define P(m) ((struct sq_priv *)(m)->priv)

static uint64_t sq_sid(struct keg_meta *m)
{
    return __atomic_load_n(&P(m)->sid, __ATOMIC_ACQUIRE);
}

/*----------------------------------------------------------------------------
 * Schema
 *--------------------------------------------------------------------------*/

static const char sq_schema[] =
    "CREATE TABLE IF NOT EXISTS setting(name TEXT PRIMARY KEY, value BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS counter(name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS inode(ino INTEGER PRIMARY KEY, mode INTEGER NOT NULL,"
    " uid INTEGER NOT NULL, gid INTEGER NOT NULL, nlink INTEGER NOT NULL,"
    " size INTEGER NOT NULL, rdev INTEGER NOT NULL, parent INTEGER NOT NULL,"
    " atime INTEGER NOT NULL, atimensec INTEGER NOT NULL, mtime INTEGER NOT NULL,"
    " mtimensec INTEGER NOT NULL, ctime INTEGER NOT NULL, ctimensec INTEGER NOT NULL,"
    " alloc INTEGER NOT NULL DEFAULT -1);"
    "CREATE TABLE IF NOT EXISTS dentry(parent INTEGER NOT NULL, name BLOB NOT NULL,"
    " ino INTEGER NOT NULL, type INTEGER NOT NULL, PRIMARY KEY(parent, name)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS symlink(ino INTEGER PRIMARY KEY, target BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS xattr(ino INTEGER NOT NULL, name BLOB NOT NULL,"
    " value BLOB NOT NULL, PRIMARY KEY(ino, name)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS chunk(ino INTEGER NOT NULL, indx INTEGER NOT NULL,"
    " slices BLOB NOT NULL, PRIMARY KEY(ino, indx)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS slice_ref(id INTEGER PRIMARY KEY, size INTEGER NOT NULL,"
    " refs INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS delslice(id INTEGER PRIMARY KEY, size INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS session(sid INTEGER PRIMARY KEY, heartbeat INTEGER NOT NULL,"
    " info TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS pending(sid INTEGER NOT NULL, ino INTEGER NOT NULL,"
    " PRIMARY KEY(sid, ino)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS pending_ino ON pending(ino);"
    "CREATE TABLE IF NOT EXISTS flock(ino INTEGER NOT NULL, sid INTEGER NOT NULL,"
    " owner INTEGER NOT NULL, type INTEGER NOT NULL, PRIMARY KEY(ino, sid, owner)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS plock(ino INTEGER NOT NULL, sid INTEGER NOT NULL,"
    " owner INTEGER NOT NULL, type INTEGER NOT NULL, start INTEGER NOT NULL,"
    " end INTEGER NOT NULL, pid INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS plock_ino ON plock(ino);"
    "CREATE INDEX IF NOT EXISTS plock_sid ON plock(sid);"
    "CREATE INDEX IF NOT EXISTS flock_sid ON flock(sid);";

static const char *const sq_tables[] = {
    "setting", "counter", "inode", "dentry", "symlink", "xattr", "chunk", "slice_ref",
    "delslice", "session", "pending", "flock", "plock", NULL
};

/*----------------------------------------------------------------------------
 * Connections, statements, errors
 *--------------------------------------------------------------------------*/

/* Maps an SQLite result code to -errno (or SQ_BUSY), logging unexpected ones. */
static int sq_rc(struct sq_conn *c, int rc, const char *what)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return 0;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return SQ_BUSY;
    case SQLITE_FULL:
        KEG_ERR("%s: database or disk is full", what);
        return -ENOSPC;
    case SQLITE_NOMEM:
        return -ENOMEM;
    default:
        KEG_ERR("%s: %s (sqlite error %d)", what, c ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc),
                rc);
        return -EIO;
    }
}

static void sq_conn_free(struct sq_conn *c)
{
    if (!c)
        return;
    for (int i = 0; i < SQ_SLOTS; i++)
        if (c->slot[i].st)
            sqlite3_finalize(c->slot[i].st);
    sqlite3_close(c->db);
    keg_free(c);
}

/* Tightens path to 0600 if group or others have any access (the database holds
 * the object store's secret key).  Returns 0, or -errno if it cannot be checked. */
static int sq_secure_one(const char *path, int fd)
{
    struct stat sb;
    int rc = fd >= 0 ? fstat(fd, &sb) : stat(path, &sb);
    if (rc != 0)
        return -errno;
    if (!(sb.st_mode & 077))
        return 0;
    rc = fd >= 0 ? fchmod(fd, sb.st_mode & 0700) : chmod(path, sb.st_mode & 0700);
    if (rc != 0) {
        rc = -errno;
        KEG_WARN("%s is readable by other users (mode %04o) and holds the volume's secrets; "
                 "cannot tighten it: %s", path, (unsigned)(sb.st_mode & 07777), strerror(-rc));
        return 0;
    }
    KEG_WARN("%s had mode %04o; tightened to %04o (it holds the volume's secrets)", path,
             (unsigned)(sb.st_mode & 07777), (unsigned)(sb.st_mode & 0700));
    return 0;
}

/* The database and its -wal/-shm files are owner-only.  With create, the file is
 * made here with mode 0600 before SQLite opens it, so it never exists with a
 * wider mode (SQLite gives -wal and -shm the mode of the database file).  An
 * existing file with a wider mode is tightened, with a WARN line.  Runs once per
 * instance; failure to check is not fatal (SQLite reports a missing file). */
static void sq_secure_files(struct sq_priv *p, int create)
{
    static const char *const sfx[] = { "-wal", "-shm", "-journal" };
    if (__atomic_load_n(&p->secured, __ATOMIC_ACQUIRE))
        return;
    if (create) {
        int fd = open(p->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            return;     /* sqlite3_open_v2 reports it */
        sq_secure_one(p->path, fd);
        close(fd);
    } else if (sq_secure_one(p->path, -1) != 0) {
        return;         /* missing: "not formatted", reported by the caller */
    }
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        char *f = keg_asprintf("%s%s", p->path, sfx[i]);
        if (!f)
            return;
        sq_secure_one(f, -1);
        keg_free(f);
    }
    __atomic_store_n(&p->secured, 1, __ATOMIC_RELEASE);
}

/* Databases formatted before inode.alloc existed get the column (-1: not
 * tracked) the first time a connection sees them.  Failures only leave it
 * for the next connection: no inode table yet (format creates it with the
 * column), or another connection adding it at the same moment. */
static void sq_migrate_alloc(struct sq_conn *c)
{
    if (sqlite3_exec(c->db, "SELECT alloc FROM inode LIMIT 0", NULL, NULL, NULL) == SQLITE_OK)
        return;
    if (strstr(sqlite3_errmsg(c->db), "no such column") == NULL)
        return;
    int rc = sqlite3_exec(c->db, "ALTER TABLE inode ADD COLUMN alloc INTEGER NOT NULL DEFAULT -1",
                          NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        KEG_INFO("sqlite3 database: added inode.alloc (allocated bytes, for st_blocks)");
    else
        KEG_DEBUG("adding inode.alloc: %s", sqlite3_errmsg(c->db));
}

static int sq_wal_hook(void *arg, sqlite3 *db, const char *name, int pages);

/* OWNERSHIP: *out is returned with sq_conn_put(). */
static int sq_conn_open(struct sq_priv *p, int create, struct sq_conn **out)
{
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
    struct sq_conn *c = keg_calloc(1, sizeof(*c));
    int rc;

    *out = NULL;
    if (!c)
        return -ENOMEM;
    sq_secure_files(p, create);
    rc = sqlite3_open_v2(p->path, &c->db, flags, sq_vfs_name());
    if (rc != SQLITE_OK) {
        if (rc == SQLITE_CANTOPEN && !create) {
            KEG_DEBUG("%s: no such database (not formatted)", p->path);
            rc = -ENOENT;
        } else {
            KEG_ERR("cannot open sqlite3 database %s: %s", p->path,
                    c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
            rc = rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
        }
        goto fail;
    }
    sqlite3_busy_timeout(c->db, SQ_BUSY_TIMEOUT);
    sqlite3_extended_result_codes(c->db, 1);
    for (int tries = 0;; tries++) {
        rc = sqlite3_exec(c->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                          NULL, NULL, NULL);
        if ((rc & 0xff) != SQLITE_BUSY || tries >= SQ_RETRIES)
            break;
    }
    if (rc != SQLITE_OK) {
        KEG_ERR("cannot use sqlite3 database %s: %s", p->path, sqlite3_errmsg(c->db));
        rc = (rc & 0xff) == SQLITE_BUSY ? -EIO : sq_rc(c, rc, p->path);
        if (rc == 0 || rc == SQ_BUSY)
            rc = -EIO;
        goto fail;
    }
    sq_migrate_alloc(c);
    sqlite3_wal_hook(c->db, sq_wal_hook, p);   /* replaces SQLite's auto-checkpoint */
    *out = c;
    return 0;
fail:
    sq_conn_free(c);
    return rc;
}

/* An idle connection, a new one, or (at SQ_MAX_CONNS) the next one given back.
 * LOCKS: takes p->lock. */
static int sq_conn_get(struct sq_priv *p, int create, struct sq_conn **out)
{
    pthread_mutex_lock(&p->lock);
    while (!p->idle && p->nconn >= SQ_MAX_CONNS)
        pthread_cond_wait(&p->freed, &p->lock);
    struct sq_conn *c = p->idle;
    if (c)
        p->idle = c->next;
    else
        p->nconn++;     /* reserve the slot before opening outside the lock */
    pthread_mutex_unlock(&p->lock);
    if (c) {
        c->next = NULL;
        *out = c;
        return 0;
    }
    int rc = sq_conn_open(p, create, out);
    if (rc) {
        pthread_mutex_lock(&p->lock);
        p->nconn--;
        pthread_cond_signal(&p->freed);
        pthread_mutex_unlock(&p->lock);
    }
    return rc;
}

static void sq_conn_put(struct sq_priv *p, struct sq_conn *c)
{
    pthread_mutex_lock(&p->lock);
    c->next = p->idle;
    p->idle = c;
    pthread_cond_signal(&p->freed);
    pthread_mutex_unlock(&p->lock);
}

/*----- checkpoints -----
 *
 * In WAL mode a commit appends pages to the log, and a checkpoint copies them
 * back into the database file (with synchronous=NORMAL, one fsync of the log
 * before and one of the database after: the only ones this engine makes
 * outside sq_sync).  SQLite's own auto-checkpoint runs it inside the commit
 * that left 1000 pages or more in the log, that is in the FUSE request of
 * whichever op made that commit, every few hundred transactions, while the
 * other writers of the instance wait on p->wlock.  Instead every connection's
 * WAL hook (sq_wal_hook) hands it to one thread per instance, started by the
 * first log that needs it, which runs a PASSIVE checkpoint on a connection of
 * its own: readers and writers go on meanwhile (SQLite's WAL design).  The
 * log is restarted from its beginning by the first commit after a complete
 * checkpoint, so the pages committed during that checkpoint are copied by
 * further ones, the last with the instance's writers held (sq_ckpt_round).
 * If that thread cannot start, or lags so far that the log holds
 * SQ_CKPT_HARD pages, the committing thread checkpoints itself, as SQLite
 * would (under p->wlock, which the caller of the commit holds).  A checkpoint
 * that fails (a full disk) loses nothing: the commits are in the log, which
 * goes on growing until one succeeds.
 *
 * LOCKS: ckpt_lock is taken inside p->wlock (the hook runs in a commit), and
 * the checkpointer takes p->wlock without holding ckpt_lock.
 */

/* A PASSIVE checkpoint of db: as much as no reader still needs.  *logged:
 * the pages in the log when it started, *copied: how many of them are in the
 * database file now (both 0 when another checkpoint was running). */
static int sq_checkpoint(sqlite3 *db, const char *who, int *logged, int *copied)
{
    int rc = sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, logged, copied);
    if (rc == SQLITE_OK) {
        KEG_DEBUG("%s checkpoint: %d of %d WAL pages copied", who, *copied, *logged);
        return 0;
    }
    *logged = *copied = 0;
    if ((rc & 0xff) == SQLITE_BUSY)
        return 0;       /* another connection or process is checkpointing */
    return rc;
}

/* The checkpointer's round.  Commits go on during a checkpoint, and the log
 * is restarted only by a commit that finds every page copied: so laps copy
 * what came during the lap before, while that shrinks and is more than
 * SQ_CKPT_TAIL pages, and a last one copies the rest with this instance's
 * writers held (when commits come faster than a lap copies them, that is
 * the third lap: the writers then wait about as long as in SQLite's own). */
static int sq_ckpt_round(struct sq_priv *p, sqlite3 *db)
{
    int logged, copied, before = -1, fresh_before = INT_MAX;
    for (int lap = 0; lap < SQ_CKPT_LAPS; lap++) {
        int rc = sq_checkpoint(db, "background", &logged, &copied);
        if (rc)
            return rc;
        if (before >= 0) {
            int fresh = logged - before;    /* committed during the lap before */
            if (fresh <= SQ_CKPT_TAIL || fresh >= fresh_before)
                break;                      /* (< 0: the log was restarted) */
            fresh_before = fresh;
        }
        before = logged;
    }
    pthread_mutex_lock(&p->wlock);
    int rc = sq_checkpoint(db, "last", &logged, &copied);
    pthread_mutex_unlock(&p->wlock);
    return rc;
}

static void *sq_ckpt_main(void *arg)
{
    struct sq_priv *p = arg;
    struct sq_conn *c = NULL;
    int failing = 0;
    keg_thread_name("keg-sqlite-ckpt");
    pthread_mutex_lock(&p->ckpt_lock);
    for (;;) {
        while (!p->ckpt_want && !p->ckpt_stop)
            pthread_cond_wait(&p->ckpt_cv, &p->ckpt_lock);
        if (p->ckpt_stop)
            break;
        pthread_mutex_unlock(&p->ckpt_lock);
        int rc = c ? 0 : sq_conn_open(p, 0, &c);
        if (rc == 0)
            rc = sq_ckpt_round(p, c->db);
        if (rc != 0 && !failing)
            KEG_WARN("cannot checkpoint the WAL of %s: %s (the commits stay in the log)",
                     p->path, c ? sqlite3_errmsg(c->db) : strerror(-rc));
        else if (rc == 0 && failing)
            KEG_INFO("checkpoints of %s work again", p->path);
        failing = rc != 0;
        pthread_mutex_lock(&p->ckpt_lock);
        /* requests that came during this checkpoint are answered by it; a
         * commit that still leaves SQ_CKPT_PAGES asks again */
        p->ckpt_want = 0;
    }
    pthread_mutex_unlock(&p->ckpt_lock);
    sq_conn_free(c);
    return NULL;
}

/* sqlite3_wal_hook: called after each commit with the pages now in the log. */
static int sq_wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    struct sq_priv *p = arg;
    KEG_UNUSED(name);
    if (pages < SQ_CKPT_PAGES)
        return SQLITE_OK;
    int self = pages >= SQ_CKPT_HARD;
    pthread_mutex_lock(&p->ckpt_lock);
    if (!p->ckpt_started && !p->ckpt_failed) {
        int rc = pthread_create(&p->ckpt_thread, NULL, sq_ckpt_main, p);
        if (rc == 0) {
            p->ckpt_started = 1;
        } else {
            p->ckpt_failed = 1;
            KEG_WARN("cannot start the checkpoint thread: %s; commits checkpoint the WAL "
                     "themselves", strerror(rc));
        }
    }
    if (p->ckpt_started && !p->ckpt_want) {
        p->ckpt_want = 1;
        pthread_cond_signal(&p->ckpt_cv);
    }
    if (!p->ckpt_started)
        self = 1;
    pthread_mutex_unlock(&p->ckpt_lock);
    int logged, copied;
    if (self && sq_checkpoint(db, "inline", &logged, &copied) != 0)
        KEG_DEBUG("inline checkpoint of %s: %s", p->path, sqlite3_errmsg(db));
    return SQLITE_OK;   /* the commit happened either way */
}

/* A cached, reset statement for sql (a static string), or NULL (logged). */
static sqlite3_stmt *sq_prep(struct sq_conn *c, const char *sql)
{
    size_t h = ((uintptr_t)sql >> 3) % SQ_SLOTS;
    for (size_t i = 0; i < SQ_SLOTS; i++) {
        struct sq_slot *s = &c->slot[(h + i) % SQ_SLOTS];
        if (s->sql == sql) {
            sqlite3_reset(s->st);
            sqlite3_clear_bindings(s->st);
            return s->st;
        }
        if (!s->sql) {
            sqlite3_stmt *st = NULL;
            int rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
            if (rc != SQLITE_OK) {
                KEG_ERR("prepare failed: %s (is the volume formatted?)", sqlite3_errmsg(c->db));
                return NULL;
            }
            s->sql = sql;
            s->st = st;
            return st;
        }
    }
    KEG_PANIC("meta_sqlite: statement cache full");
}

static void sq_reset_all(struct sq_conn *c)
{
    for (int i = 0; i < SQ_SLOTS; i++)
        if (c->slot[i].st && sqlite3_stmt_busy(c->slot[i].st))
            sqlite3_reset(c->slot[i].st);
}

/* Binds args by spec: 'i' int64_t, 'b' (const void *, size_t) blob, 't' const char * text. */
static int sq_bindv(struct sq_conn *c, sqlite3_stmt *st, const char *spec, va_list ap)
{
    int rc = SQLITE_OK;
    for (int i = 0; spec[i] && rc == SQLITE_OK; i++) {
        switch (spec[i]) {
        case 'i':
            rc = sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
            break;
        case 'b': {
            const void *b = va_arg(ap, const void *);
            size_t len = va_arg(ap, size_t);
            rc = sqlite3_bind_blob(st, i + 1, len ? b : "", (int)len, SQLITE_STATIC);
            break;
        }
        case 't':
            rc = sqlite3_bind_text(st, i + 1, va_arg(ap, const char *), -1, SQLITE_STATIC);
            break;
        default:
            KEG_PANIC("bad bind spec %c", spec[i]);
        }
    }
    return rc == SQLITE_OK ? 0 : sq_rc(c, rc, "bind");
}

/* Next row of a query: 1, 0 (done) or -errno/SQ_BUSY. */
static int sq_next(struct sq_conn *c, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return sq_rc(c, rc, "query");
}

/* Prepare + bind + first step.  Returns 1 (positioned on a row), 0 (no row) or
 * -errno/SQ_BUSY.  *out is the statement (valid until the next sq_prep of sql). */
static int sq_query(struct sq_conn *c, sqlite3_stmt **out, const char *sql, const char *spec, ...)
{
    va_list ap;
    sqlite3_stmt *st = sq_prep(c, sql);
    *out = st;
    if (!st)
        return -EIO;
    va_start(ap, spec);
    int rc = sq_bindv(c, st, spec, ap);
    va_end(ap);
    if (rc)
        return rc;
    return sq_next(c, st);
}

/* Collects column 0 (an integer) of every row of a query that sq_query just
 * started (rc is its result) into *out, keg_malloc'ed, its length in *n.
 * Returns 0 or -errno/SQ_BUSY (then *out is freed and NULL). */
static int sq_collect_u64(struct sq_conn *c, sqlite3_stmt *st, int rc, uint64_t **out,
                          size_t *n)
{
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    while (rc == 1) {
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            uint64_t *t = keg_realloc(*out, ncap * sizeof(*t));
            if (!t) {
                rc = -ENOMEM;
                break;
            }
            *out = t;
            cap = ncap;
        }
        (*out)[(*n)++] = (uint64_t)sqlite3_column_int64(st, 0);
        rc = sq_next(c, st);
    }
    if (rc < 0) {
        keg_free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc < 0 ? rc : 0;
}

/* Runs a statement to completion.  Returns the number of changed rows or -errno. */
static int sq_exec(struct sq_conn *c, const char *sql, const char *spec, ...)
{
    va_list ap;
    sqlite3_stmt *st = sq_prep(c, sql);
    if (!st)
        return -EIO;
    va_start(ap, spec);
    int rc = sq_bindv(c, st, spec, ap);
    va_end(ap);
    if (rc)
        return rc;
    do {
        rc = sqlite3_step(st);
    } while (rc == SQLITE_ROW);
    if (rc != SQLITE_DONE)
        return sq_rc(c, rc, "exec");
    rc = sqlite3_changes(c->db);
    sqlite3_reset(st);
    return rc;
}

typedef int sq_fn(struct keg_meta *m, struct sq_conn *c, void *arg);

/* Column 0 of the row st is on, copied into buf (size 0: only its length).
 * Returns its length (statement reset) or -ERANGE (longer than size). */
static int sq_copy_blob(sqlite3_stmt *st, void *buf, size_t size)
{
    int len = sqlite3_column_bytes(st, 0);
    if (size && (size_t)len > size)
        return -ERANGE;
    if (size && len)
        memcpy(buf, sqlite3_column_blob(st, 0), (size_t)len);
    sqlite3_reset(st);
    return len;
}

#define SQ_READ   0
#define SQ_WRITE  1
#define SQ_CREATE 2

/* Transaction control, run through the statement cache (sq_ctl): sqlite3_exec
 * parsed the text again for every transaction (its prepare was 2 % of the
 * mounter's samples in a small-file create). */
static const char sq_begin_w[] = "BEGIN IMMEDIATE";
static const char sq_begin_r[] = "BEGIN";
static const char sq_commit[] = "COMMIT";
static const char sq_rollback[] = "ROLLBACK";

/* Steps one of the statements above to its end.  Returns SQLITE_OK or the
 * SQLite result code of the failure. */
static int sq_ctl(struct sq_conn *c, const char *sql)
{
    sqlite3_stmt *st = sq_prep(c, sql);
    if (!st)
        return SQLITE_ERROR;
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Runs fn in one transaction, retrying when the database stays locked.
 * Returns fn's result (>= 0 after a successful commit) or -errno. */
static int sq_txn(struct keg_meta *m, int how, sq_fn *fn, void *arg)
{
    struct sq_priv *p = P(m);
    struct sq_conn *c;
    int write = how & (SQ_WRITE | SQ_CREATE);
    int rc = sq_conn_get(p, how & SQ_CREATE, &c);
    if (rc)
        return rc;
    for (int attempt = 0;; attempt++) {
        if (write)
            pthread_mutex_lock(&p->wlock);
        rc = sq_ctl(c, write ? sq_begin_w : sq_begin_r);
        if (rc != SQLITE_OK) {
            rc = sq_rc(c, rc, "begin");
        } else {
            rc = fn(m, c, arg);
            sq_reset_all(c);
            if (rc >= 0) {
                int r2 = sq_ctl(c, sq_commit);
                if (r2 != SQLITE_OK)
                    rc = sq_rc(c, r2, "commit");
            }
            if (rc < 0 && !sqlite3_get_autocommit(c->db))
                sq_ctl(c, sq_rollback);
        }
        if (write)
            pthread_mutex_unlock(&p->wlock);
        if (rc != SQ_BUSY || attempt >= SQ_RETRIES)
            break;
        keg_sleep_ms(10u << attempt);
    }
    if (rc == SQ_BUSY) {
        KEG_ERR("sqlite3 database %s stays locked by another process; giving up", p->path);
        rc = -EIO;
    }
    sq_conn_put(p, c);
    return rc;
}

/*----------------------------------------------------------------------------
 * Records: inodes, counters, settings, slices
 *--------------------------------------------------------------------------*/

/* alloc: keg_attr.alloc, -1 = not tracked (KEG_ALLOC_UNKNOWN: rows written
 * before the column existed, or by a kegfs that does not know it) */
#define SQ_ICOLS "ino,mode,uid,gid,nlink,size,rdev,parent,atime,atimensec,mtime,mtimensec," \
                 "ctime,ctimensec,alloc"
#define SQ_ICOLS_I "i.ino,i.mode,i.uid,i.gid,i.nlink,i.size,i.rdev,i.parent,i.atime," \
                   "i.atimensec,i.mtime,i.mtimensec,i.ctime,i.ctimensec,i.alloc"
#define SQ_ICOLS_N 15   /* columns of SQ_ICOLS_I */

static void sq_col_attr(sqlite3_stmt *st, int b, struct keg_attr *a)
{
    a->ino = (uint64_t)sqlite3_column_int64(st, b + 0);
    a->mode = (uint32_t)sqlite3_column_int64(st, b + 1);
    a->uid = (uint32_t)sqlite3_column_int64(st, b + 2);
    a->gid = (uint32_t)sqlite3_column_int64(st, b + 3);
    a->nlink = (uint32_t)sqlite3_column_int64(st, b + 4);
    a->size = (uint64_t)sqlite3_column_int64(st, b + 5);
    a->rdev = (uint64_t)sqlite3_column_int64(st, b + 6);
    a->parent = (uint64_t)sqlite3_column_int64(st, b + 7);
    a->atime = sqlite3_column_int64(st, b + 8);
    a->atimensec = (uint32_t)sqlite3_column_int64(st, b + 9);
    a->mtime = sqlite3_column_int64(st, b + 10);
    a->mtimensec = (uint32_t)sqlite3_column_int64(st, b + 11);
    a->ctime = sqlite3_column_int64(st, b + 12);
    a->ctimensec = (uint32_t)sqlite3_column_int64(st, b + 13);
    int64_t al = sqlite3_column_int64(st, b + 14);
    a->alloc = al < 0 ? KEG_ALLOC_UNKNOWN : (uint64_t)al;
}

/* 0, -ENOENT or -errno. */
static int sq_get_inode(struct sq_conn *c, uint64_t ino, struct keg_attr *a)
{
    static const char sql[] = "SELECT " SQ_ICOLS " FROM inode WHERE ino=?";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, sql, "i", I(ino));
    if (rc == 1) {
        sq_col_attr(st, 0, a);
        sqlite3_reset(st);
        return 0;
    }
    return rc == 0 ? -ENOENT : rc;
}

static int sq_put_inode(struct sq_conn *c, const struct keg_attr *a)
{
    static const char sql[] = "INSERT OR REPLACE INTO inode(" SQ_ICOLS ")"
                              " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
    int64_t al = !S_ISREG(a->mode) || a->alloc == KEG_ALLOC_UNKNOWN ? -1 : (int64_t)a->alloc;
    int rc = sq_exec(c, sql, "iiiiiiiiiiiiiii", I(a->ino), I(a->mode), I(a->uid), I(a->gid),
                     I(a->nlink), I(a->size), I(a->rdev), I(a->parent), I(a->atime),
                     I(a->atimensec), I(a->mtime), I(a->mtimensec), I(a->ctime),
                     I(a->ctimensec), I(al));
    return rc < 0 ? rc : 0;
}

static void sq_now(struct keg_attr *a, int mtime, int ctime)
{
    int64_t s;
    uint32_t ns;
    keg_attr_set_now(&s, &ns);
    if (mtime) {
        a->mtime = s;
        a->mtimensec = ns;
    }
    if (ctime) {
        a->ctime = s;
        a->ctimensec = ns;
    }
}

/* The value of counter name from the row of st, where rc is what sq_query returned;
 * *val (may be NULL) is set on success.  Returns 0, -EIO (no such counter) or rc. */
static int sq_counter_row(sqlite3_stmt *st, int rc, const char *name, int64_t *val)
{
    if (rc == 1) {
        if (val)
            *val = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        return 0;
    }
    if (rc == 0) {
        KEG_ERR("counter %s is missing: database not formatted or damaged", name);
        return -EIO;
    }
    return rc;
}

/* Adds delta to counter name; *val (may be NULL) gets the new value. */
static int sq_counter_add(struct sq_conn *c, const char *name, int64_t delta, int64_t *val)
{
    static const char sql[] = "UPDATE counter SET value=value+? WHERE name=? RETURNING value";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, sql, "it", delta, name);
    return sq_counter_row(st, rc, name, val);
}

static int sq_counter_get(struct sq_conn *c, const char *name, int64_t *val)
{
    static const char sql[] = "SELECT value FROM counter WHERE name=?";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, sql, "t", name);
    return sq_counter_row(st, rc, name, val);
}

/* Integer setting (0 if absent). */
static int sq_setting_u64(struct sq_conn *c, const char *name, uint64_t *val)
{
    static const char sql[] = "SELECT value FROM setting WHERE name=?";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, sql, "t", name);
    *val = 0;
    if (rc == 1) {
        *val = (uint64_t)sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        return 0;
    }
    return rc;
}

/* Charge dspace bytes and dinodes inodes.  Growth past the format's
 * capacity / inode quota is -ENOSPC; shrinking always succeeds. */
static int sq_charge(struct sq_conn *c, int64_t dspace, int64_t dinodes)
{
    int rc;
    if (dspace > 0) {
        uint64_t cap;
        int64_t used;
        rc = sq_setting_u64(c, "capacity", &cap);
        if (!rc)
            rc = sq_counter_get(c, "used_space", &used);
        if (rc)
            return rc;
        if (cap && (uint64_t)used + (uint64_t)dspace > cap)
            return -ENOSPC;
    }
    if (dinodes > 0) {
        uint64_t quota;
        int64_t used;
        rc = sq_setting_u64(c, "inodes", &quota);
        if (!rc)
            rc = sq_counter_get(c, "used_inodes", &used);
        if (rc)
            return rc;
        if (quota && (uint64_t)used + (uint64_t)dinodes > quota)
            return -ENOSPC;
    }
    if (dspace) {
        rc = sq_counter_add(c, "used_space", dspace, NULL);
        if (rc)
            return rc;
    }
    if (dinodes) {
        rc = sq_counter_add(c, "used_inodes", dinodes, NULL);
        if (rc)
            return rc;
    }
    return 0;
}

static int64_t sq_file_charge(const struct keg_attr *a)
{
    return S_ISREG(a->mode) ? (int64_t)keg_meta_charge(a->size) : 0;
}

static void sq_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t sq_get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Packed record: id u64, size u32, off u32, len u32, pos u32, little-endian. */
static void sq_pack(unsigned char *p, const struct keg_slice *s)
{
    sq_put32(p, (uint32_t)s->id);
    sq_put32(p + 4, (uint32_t)(s->id >> 32));
    sq_put32(p + 8, s->size);
    sq_put32(p + 12, s->off);
    sq_put32(p + 16, s->len);
    sq_put32(p + 20, s->pos);
}

static void sq_unpack(const unsigned char *p, struct keg_slice *s)
{
    s->id = (uint64_t)sq_get32(p) | (uint64_t)sq_get32(p + 4) << 32;
    s->size = sq_get32(p + 8);
    s->off = sq_get32(p + 12);
    s->len = sq_get32(p + 16);
    s->pos = sq_get32(p + 20);
}

/* A new reference to slice id (created with refs 1 if unknown). */
static int sq_ref_new(struct sq_conn *c, uint64_t id, uint32_t size)
{
    static const char sql[] = "INSERT INTO slice_ref(id,size,refs) VALUES(?,?,1)"
                              " ON CONFLICT(id) DO UPDATE SET refs=refs+1";
    int rc = sq_exec(c, sql, "ii", I(id), I(size));
    return rc < 0 ? rc : 0;
}

/* One more reference to an existing slice; -EAGAIN if it is gone. */
static int sq_ref_share(struct sq_conn *c, uint64_t id)
{
    static const char sql[] = "UPDATE slice_ref SET refs=refs+1 WHERE id=?";
    int rc = sq_exec(c, sql, "i", I(id));
    if (rc < 0)
        return rc;
    return rc == 0 ? -EAGAIN : 0;
}

/* Drops one reference; a slice left without any goes to the deletion queue. */
static int sq_unref(struct sq_conn *c, uint64_t id)
{
    static const char upd[] = "UPDATE slice_ref SET refs=refs-1 WHERE id=? RETURNING refs, size";
    static const char del[] = "DELETE FROM slice_ref WHERE id=?";
    static const char enq[] = "INSERT OR IGNORE INTO delslice(id,size) VALUES(?,?)";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, upd, "i", I(id));
    if (rc <= 0) {
        if (rc == 0)
            KEG_WARN("slice %" PRIu64 " has no reference record (leak found by fsck)", id);
        return rc;
    }
    int64_t refs = sqlite3_column_int64(st, 0);
    int64_t size = sqlite3_column_int64(st, 1);
    sqlite3_reset(st);
    if (refs > 0)
        return 0;
    rc = sq_exec(c, del, "i", I(id));
    if (rc >= 0)
        rc = sq_exec(c, enq, "ii", I(id), size);
    if (rc >= 0)
        c->queued++;
    return rc < 0 ? rc : 0;
}

static int sq_unref_blob(struct sq_conn *c, const unsigned char *b, size_t len)
{
    for (size_t o = 0; o + SQ_REC <= len; o += SQ_REC) {
        struct keg_slice s;
        sq_unpack(b + o, &s);
        if (s.id) {
            int rc = sq_unref(c, s.id);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* Drops the chunks of ino with indx >= first; their slices lose a reference. */
static int sq_drop_chunks(struct sq_conn *c, uint64_t ino, uint64_t first)
{
    static const char sel[] = "SELECT slices FROM chunk WHERE ino=? AND indx>=?";
    static const char del[] = "DELETE FROM chunk WHERE ino=? AND indx>=?";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, sel, "ii", I(ino), I(first));
    while (rc == 1) {
        rc = sq_unref_blob(c, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
        if (rc)
            return rc;
        rc = sq_next(c, st);
    }
    if (rc < 0)
        return rc;
    rc = sq_exec(c, del, "ii", I(ino), I(first));
    return rc < 0 ? rc : 0;
}

/* Deletes an inode that has no name left (and its data, xattrs, locks). */
static int sq_purge_inode(struct sq_conn *c, const struct keg_attr *a)
{
    static const char d1[] = "DELETE FROM xattr WHERE ino=?";
    static const char d2[] = "DELETE FROM symlink WHERE ino=?";
    static const char d3[] = "DELETE FROM pending WHERE ino=?";
    static const char d4[] = "DELETE FROM flock WHERE ino=?";
    static const char d5[] = "DELETE FROM plock WHERE ino=?";
    static const char d6[] = "DELETE FROM inode WHERE ino=?";
    static const char *const dels[] = {d1, d2, d3, d4, d5, d6};
    int rc = sq_drop_chunks(c, a->ino, 0);
    for (size_t i = 0; !rc && i < sizeof(dels) / sizeof(dels[0]); i++) {
        rc = sq_exec(c, dels[i], "i", I(a->ino));
        rc = rc < 0 ? rc : 0;
    }
    if (!rc)
        rc = sq_charge(c, -sq_file_charge(a), -1);
    return rc;
}

/* ino lost its last link: keep it pending under the session (regular files,
 * which may still be open: listed in open[0..nopen), or nopen < 0 = unknown)
 * or purge it now. */
static int sq_lost_last_link(struct keg_meta *m, struct sq_conn *c, struct keg_attr *a,
                             int nopen, const uint64_t *open, struct keg_unlinked *gone)
{
    static const char ins[] = "INSERT OR IGNORE INTO pending(sid,ino) VALUES(?,?)";
    uint64_t sid = sq_sid(m);
    int rc, is_open = nopen < 0;
    for (int i = 0; i < nopen && !is_open; i++)
        is_open = open[i] == a->ino;
    gone->ino = a->ino;
    gone->mode = a->mode;
    gone->size = a->size;
    if (S_ISREG(a->mode) && sid && is_open) {
        a->nlink = 0;
        rc = sq_put_inode(c, a);
        if (!rc)
            rc = sq_exec(c, ins, "ii", I(sid), I(a->ino));
        return rc < 0 ? rc : 0;
    }
    uint32_t q0 = c->queued;
    rc = sq_purge_inode(c, a);
    gone->purged = 1;
    gone->queued = c->queued - q0;
    return rc;
}

/*----------------------------------------------------------------------------
 * Name checks and directory entries
 *--------------------------------------------------------------------------*/

/* The directory parent: 0, -ENOENT, -ENOTDIR. */
static int sq_get_dir(struct sq_conn *c, uint64_t ino, struct keg_attr *a)
{
    int rc = sq_get_inode(c, ino, a);
    if (rc)
        return rc;
    return S_ISDIR(a->mode) ? 0 : -ENOTDIR;
}

/* Entry parent/name: 1 with *ino and *type set, 0 if absent, or -errno. */
static int sq_get_entry(struct sq_conn *c, uint64_t parent, const char *name, uint64_t *ino,
                        uint32_t *type)
{
    static const char sql[] = "SELECT ino, type FROM dentry WHERE parent=? AND name=?";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, sql, "ib", I(parent), name, strlen(name));
    if (rc == 1) {
        *ino = (uint64_t)sqlite3_column_int64(st, 0);
        *type = (uint32_t)sqlite3_column_int64(st, 1);
        sqlite3_reset(st);
    }
    return rc;
}

static int sq_put_entry(struct sq_conn *c, uint64_t parent, const char *name, uint64_t ino,
                        uint32_t type)
{
    static const char sql[] = "INSERT OR REPLACE INTO dentry(parent,name,ino,type) VALUES(?,?,?,?)";
    int rc = sq_exec(c, sql, "ibii", I(parent), name, strlen(name), I(ino), I(type & S_IFMT));
    return rc < 0 ? rc : 0;
}

static int sq_del_entry(struct sq_conn *c, uint64_t parent, const char *name)
{
    static const char sql[] = "DELETE FROM dentry WHERE parent=? AND name=?";
    int rc = sq_exec(c, sql, "ib", I(parent), name, strlen(name));
    return rc < 0 ? rc : 0;
}

/* 1 if directory ino has entries, 0 if empty. */
static int sq_dir_has_entries(struct sq_conn *c, uint64_t ino)
{
    static const char sql[] = "SELECT 1 FROM dentry WHERE parent=? LIMIT 1";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, sql, "i", I(ino));
    if (rc == 1)
        sqlite3_reset(st);
    return rc;
}

/* Looks up parent/name with its attributes.  0, -ENOENT, -ENOTDIR. */
static int sq_lookup_attr(struct sq_conn *c, uint64_t parent, const char *name,
                          struct keg_attr *a)
{
    static const char sql[] = "SELECT " SQ_ICOLS_I " FROM dentry d JOIN inode i ON i.ino=d.ino"
                              " WHERE d.parent=? AND d.name=?";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, sql, "ib", I(parent), name, strlen(name));
    if (rc == 1) {
        sq_col_attr(st, 0, a);
        sqlite3_reset(st);
        return 0;
    }
    if (rc < 0)
        return rc;
    struct keg_attr pa;
    rc = sq_get_dir(c, parent, &pa);
    return rc ? rc : -ENOENT;
}

/*----------------------------------------------------------------------------
 * open / close / volume
 *--------------------------------------------------------------------------*/

static int sq_open(struct keg_meta *m, const char *url)
{
    struct sq_priv *p = P(m);
    struct keg_url u;
    const char *why = NULL;
    int rc = keg_url_parse(url, &u, &why);
    if (rc) {
        KEG_ERR("malformed META_URL %s: %s", m->url_redacted, why ? why : "?");
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    if (strcmp(u.scheme, "sqlite3") != 0) {
        KEG_ERR("META_URL %s is not a sqlite3:// URL", m->url_redacted);
        rc = -EINVAL;
        goto out;
    }
    if (u.host[0]) {
        KEG_ERR("META_URL %s: the sqlite3 database path must be absolute, written "
                "sqlite3:///abs/path.db (three slashes)", m->url_redacted);
        rc = -EINVAL;
        goto out;
    }
    if (u.path[0] != '/' || u.path[1] == '\0' || u.path[strlen(u.path) - 1] == '/') {
        KEG_ERR("META_URL %s names no database file (expected sqlite3:///abs/path.db)",
                m->url_redacted);
        rc = -EINVAL;
        goto out;
    }
    p->path = keg_strdup(u.path);
    if (!p->path) {
        rc = -ENOMEM;
        goto out;
    }
    if (keg_url_unescape(p->path) || !p->path[0]) {
        KEG_ERR("META_URL %s: bad %%-escape in the database path", m->url_redacted);
        rc = -EINVAL;
        goto out;
    }
    /* The directory must exist (the file itself is created by format). */
    char *slash = strrchr(p->path, '/');
    struct stat sb;
    *slash = '\0';
    rc = stat(p->path[0] ? p->path : "/", &sb);
    if (rc != 0 || !S_ISDIR(sb.st_mode)) {
        KEG_ERR("directory %s of the sqlite3 database does not exist",
                p->path[0] ? p->path : "/");
        *slash = '/';
        rc = -EIO;
        goto out;
    }
    *slash = '/';
    if (!sqlite3_threadsafe()) {
        KEG_ERR("libsqlite3 was built without thread support");
        rc = -EIO;
        goto out;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->freed, NULL);
    pthread_mutex_init(&p->wlock, NULL);
    pthread_mutex_init(&p->ckpt_lock, NULL);
    pthread_cond_init(&p->ckpt_cv, NULL);
    p->inited = 1;
    rc = 0;
out:
    if (rc) {
        keg_free(p->path);
        p->path = NULL;
    }
    keg_url_free(&u);
    return rc;
}

static void sq_close(struct keg_meta *m)
{
    struct sq_priv *p = P(m);
    if (!p->inited)
        return;
    pthread_mutex_lock(&p->ckpt_lock);
    p->ckpt_stop = 1;
    pthread_cond_signal(&p->ckpt_cv);
    int started = p->ckpt_started;
    pthread_mutex_unlock(&p->ckpt_lock);
    if (started)
        pthread_join(p->ckpt_thread, NULL);
    while (p->idle) {
        struct sq_conn *c = p->idle;
        p->idle = c->next;
        sq_conn_free(c);
        p->nconn--;
    }
    KEG_ASSERT(p->nconn == 0);      /* no op may run during close */
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->freed);
    pthread_mutex_destroy(&p->wlock);
    pthread_mutex_destroy(&p->ckpt_lock);
    pthread_cond_destroy(&p->ckpt_cv);
    keg_free(p->path);
    p->path = NULL;
    p->inited = 0;
}

struct sq_format_arg {
    const struct keg_format *f;
    struct keg_format       *out;
    uint32_t root_mode, uid, gid;
    int force;
    const char *text;
};

static int sq_format_exists(struct sq_conn *c)
{
    static const char t[] = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='setting'";
    static const char f[] = "SELECT 1 FROM setting WHERE name='format'";
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, t, "");
    if (rc == 1) {
        sqlite3_reset(st);
        rc = sq_query(c, &st, f, "");
        if (rc == 1)
            sqlite3_reset(st);
    }
    return rc;
}

static int sq_format_init_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char set[] = "INSERT OR REPLACE INTO setting(name,value) VALUES(?,?)";
    static const char cnt[] = "INSERT OR REPLACE INTO counter(name,value) VALUES(?,?)";
    struct sq_format_arg *a = arg;
    int rc = sqlite3_exec(c->db, sq_schema, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return sq_rc(c, rc, "create schema");
    rc = sq_format_exists(c);
    if (rc < 0)
        return rc;
    int exists = rc;
    if (exists && !a->force)
        return -EEXIST;
    rc = sq_exec(c, set, "tb", "format", a->text, strlen(a->text));
    if (rc >= 0)
        rc = sq_exec(c, set, "ti", "capacity", I(a->f->capacity));
    if (rc >= 0)
        rc = sq_exec(c, set, "ti", "inodes", I(a->f->inodes));
    if (rc >= 0)
        rc = sq_exec(c, set, "ti", "schema_version", I(SQ_SCHEMA_VERSION));
    if (rc < 0 || exists)
        return rc < 0 ? rc : 0;
    static const struct { const char *name; int64_t v; } counters[] = {
        {"next_inode", 2}, {"next_slice", 1}, {"next_session", 1},
        {"used_space", 0}, {"used_inodes", 0},
    };
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]) && rc >= 0; i++)
        rc = sq_exec(c, cnt, "ti", counters[i].name, counters[i].v);
    if (rc < 0)
        return rc;
    struct keg_attr root;
    memset(&root, 0, sizeof(root));
    root.ino = KEG_ROOT_INO;
    root.mode = S_IFDIR | (a->root_mode & 07777);
    root.uid = a->uid;
    root.gid = a->gid;
    root.nlink = 2;
    root.size = 4096;
    root.parent = KEG_ROOT_INO;
    sq_now(&root, 1, 1);
    root.atime = root.mtime;
    root.atimensec = root.mtimensec;
    return sq_put_inode(c, &root);
}

static int sq_format_init(struct keg_meta *m, const struct keg_format *f, uint32_t root_mode,
                          uint32_t uid, uint32_t gid, int force)
{
    struct sq_format_arg a = {.f = f, .root_mode = root_mode, .uid = uid, .gid = gid,
                              .force = force};
    char *text = NULL;
    int rc = keg_format_encode(f, &text);
    if (rc)
        return rc;
    a.text = text;
    rc = sq_txn(m, SQ_CREATE, sq_format_init_fn, &a);
    keg_free(text);
    return rc;
}

static int sq_format_load_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sql[] = "SELECT value FROM setting WHERE name='format'";
    struct sq_format_arg *a = arg;
    sqlite3_stmt *st;
    int rc = sq_format_exists(c);
    if (rc <= 0)
        return rc < 0 ? rc : -ENOENT;
    rc = sq_query(c, &st, sql, "");
    if (rc <= 0)
        return rc < 0 ? rc : -ENOENT;
    size_t len = (size_t)sqlite3_column_bytes(st, 0);
    char *text = keg_malloc(len + 1);
    if (!text)
        return -ENOMEM;
    if (len)
        memcpy(text, sqlite3_column_blob(st, 0), len);
    text[len] = '\0';
    sqlite3_reset(st);
    rc = keg_format_decode(text, a->out);
    keg_free(text);
    if (rc) {
        KEG_ERR("%s: the stored volume format is damaged", m->url_redacted);
        return -EIO;
    }
    return 0;
}

static int sq_format_load(struct keg_meta *m, struct keg_format *f)
{
    struct keg_format tmp;
    struct sq_format_arg a = {.out = &tmp};
    int rc = sq_txn(m, SQ_READ, sq_format_load_fn, &a);
    if (rc == 0)
        *f = tmp;
    return rc;
}

static int sq_destroy_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    char sql[64];
    for (int i = 0; sq_tables[i]; i++) {
        snprintf(sql, sizeof(sql), "DROP TABLE IF EXISTS %s", sq_tables[i]);
        int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            return sq_rc(c, rc, "destroy");
    }
    return 0;
}

static int sq_destroy(struct keg_meta *m)
{
    struct sq_priv *p = P(m);
    int rc = sq_txn(m, SQ_WRITE, sq_destroy_fn, NULL);
    if (rc == -ENOENT)
        return 0;   /* no database: nothing to destroy */
    if (rc)
        return rc;
    /* Give the space back; harmless if another connection is busy. */
    struct sq_conn *c;
    if (sq_conn_get(p, 0, &c) == 0) {
        pthread_mutex_lock(&p->wlock);
        sqlite3_exec(c->db, "VACUUM", NULL, NULL, NULL);
        sqlite3_exec(c->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
        pthread_mutex_unlock(&p->wlock);
        sq_conn_put(p, c);
    }
    KEG_INFO("destroyed the metadata in %s", m->url_redacted);
    return 0;
}

struct sq_ids_arg {
    int kind;
    uint32_t n;
    uint64_t first;
    uint64_t used_bytes, used_inodes;
};

static int sq_alloc_ids_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ids_arg *a = arg;
    int64_t v;
    int rc = sq_counter_add(c, a->kind == KEG_ID_INODE ? "next_inode" : "next_slice",
                            I(a->n), &v);
    if (rc)
        return rc;
    a->first = (uint64_t)v - a->n;
    return 0;
}

static int sq_alloc_ids(struct keg_meta *m, int kind, uint32_t n, uint64_t *first)
{
    struct sq_ids_arg a = {.kind = kind, .n = n};
    if ((kind != KEG_ID_INODE && kind != KEG_ID_SLICE) || n == 0)
        return -EINVAL;
    int rc = sq_txn(m, SQ_WRITE, sq_alloc_ids_fn, &a);
    if (rc == 0)
        *first = a.first;
    return rc;
}

static int sq_statfs_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ids_arg *a = arg;
    int64_t s, i;
    int rc = sq_counter_get(c, "used_space", &s);
    if (!rc)
        rc = sq_counter_get(c, "used_inodes", &i);
    if (rc)
        return rc;
    a->used_bytes = s < 0 ? 0 : (uint64_t)s;
    a->used_inodes = i < 0 ? 0 : (uint64_t)i;
    return 0;
}

static int sq_statfs(struct keg_meta *m, uint64_t *used_bytes, uint64_t *used_inodes)
{
    struct sq_ids_arg a = {0};
    int rc = sq_txn(m, SQ_READ, sq_statfs_fn, &a);
    if (rc == 0) {
        *used_bytes = a.used_bytes;
        *used_inodes = a.used_inodes;
    }
    return rc;
}

/*----------------------------------------------------------------------------
 * Sessions
 *--------------------------------------------------------------------------*/

struct sq_sess_arg {
    const char *info;
    uint64_t sid;
    int64_t max_age;
    uint32_t cleaned;
    struct keg_session_info *list;
    size_t n;
};

static int64_t sq_now_sec(void)
{
    return keg_now_ns() / 1000000000LL;
}

static int sq_session_begin_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char ins[] = "INSERT INTO session(sid,heartbeat,info) VALUES(?,?,?)";
    struct sq_sess_arg *a = arg;
    int64_t v;
    int rc = sq_counter_add(c, "next_session", 1, &v);
    if (rc)
        return rc;
    a->sid = (uint64_t)v - 1;
    rc = sq_exec(c, ins, "iit", I(a->sid), sq_now_sec(), a->info ? a->info : "");
    return rc < 0 ? rc : 0;
}

static int sq_session_begin(struct keg_meta *m, const char *info, uint64_t *sid)
{
    struct sq_sess_arg a = {.info = info};
    if (sq_sid(m))
        return -EEXIST;
    int rc = sq_txn(m, SQ_WRITE, sq_session_begin_fn, &a);
    if (rc == 0) {
        __atomic_store_n(&P(m)->sid, a.sid, __ATOMIC_RELEASE);
        *sid = a.sid;
    }
    return rc;
}

/* The session's heartbeat now; with a->info (a takeover), its info too. */
static int sq_session_heartbeat_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char upd[] = "UPDATE session SET heartbeat=? WHERE sid=?";
    static const char upd_info[] = "UPDATE session SET heartbeat=?, info=? WHERE sid=?";
    struct sq_sess_arg *a = arg;
    int rc = a->info ? sq_exec(c, upd_info, "iti", sq_now_sec(), a->info, I(a->sid))
                     : sq_exec(c, upd, "ii", sq_now_sec(), I(a->sid));
    if (rc < 0)
        return rc;
    return rc == 0 ? -ENOENT : 0;
}

static int sq_session_resume(struct keg_meta *m, uint64_t sid, const char *info)
{
    struct sq_sess_arg a = {.sid = sid, .info = info ? info : ""};
    if (sq_sid(m))
        return -EEXIST;
    int rc = sq_txn(m, SQ_WRITE, sq_session_heartbeat_fn, &a);
    if (rc == 0)
        __atomic_store_n(&P(m)->sid, sid, __ATOMIC_RELEASE);
    return rc;
}

static int sq_session_heartbeat(struct keg_meta *m)
{
    struct sq_sess_arg a = {.sid = sq_sid(m)};
    if (!a.sid)
        return -EINVAL;
    int rc = sq_txn(m, SQ_WRITE, sq_session_heartbeat_fn, &a);
    if (rc == -ENOENT)
        KEG_WARN("session %" PRIu64 " was removed by another client (stale heartbeat?)", a.sid);
    return rc;
}

/* Releases sid's locks, purges its pending inodes and removes it. */
static int sq_session_drop(struct sq_conn *c, uint64_t sid)
{
    static const char sel[] = "SELECT ino FROM pending WHERE sid=?";
    static const char d1[] = "DELETE FROM flock WHERE sid=?";
    static const char d2[] = "DELETE FROM plock WHERE sid=?";
    static const char d3[] = "DELETE FROM pending WHERE sid=?";
    static const char d4[] = "DELETE FROM session WHERE sid=?";
    sqlite3_stmt *st;
    uint64_t *inos;
    size_t n;
    int rc = sq_query(c, &st, sel, "i", I(sid));
    rc = sq_collect_u64(c, st, rc, &inos, &n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct keg_attr a;
        rc = sq_get_inode(c, inos[i], &a);
        if (rc == -ENOENT) {
            rc = 0;
            continue;
        }
        if (rc == 0 && a.nlink == 0)
            rc = sq_purge_inode(c, &a);
    }
    keg_free(inos);
    const char *const dels[] = {d1, d2, d3, d4};
    for (size_t i = 0; rc == 0 && i < 4; i++) {
        rc = sq_exec(c, dels[i], "i", I(sid));
        rc = rc < 0 ? rc : 0;
    }
    return rc;
}

static int sq_session_end_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_sess_arg *a = arg;
    return sq_session_drop(c, a->sid);
}

static int sq_session_end(struct keg_meta *m)
{
    struct sq_sess_arg a = {.sid = sq_sid(m)};
    if (!a.sid)
        return 0;
    int rc = sq_txn(m, SQ_WRITE, sq_session_end_fn, &a);
    if (rc == 0)
        __atomic_store_n(&P(m)->sid, 0, __ATOMIC_RELEASE);
    return rc;
}

static void sq_sess_list_free(struct sq_sess_arg *a)
{
    for (size_t i = 0; i < a->n; i++)
        keg_free((char *)a->list[i].info);
    keg_free(a->list);
    a->list = NULL;
    a->n = 0;
}

static int sq_session_list_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT sid, heartbeat, info FROM session ORDER BY sid";
    struct sq_sess_arg *a = arg;
    sqlite3_stmt *st;
    size_t cap = 0;
    sq_sess_list_free(a);
    int rc = sq_query(c, &st, sel, "");
    while (rc == 1) {
        if (a->n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct keg_session_info *t = keg_realloc(a->list, ncap * sizeof(*t));
            if (!t)
                return -ENOMEM;
            a->list = t;
            cap = ncap;
        }
        struct keg_session_info *s = &a->list[a->n];
        s->sid = (uint64_t)sqlite3_column_int64(st, 0);
        s->heartbeat = sqlite3_column_int64(st, 1);
        const char *info = (const char *)sqlite3_column_text(st, 2);
        s->info = keg_strdup(info ? info : "");
        if (!s->info)
            return -ENOMEM;
        a->n++;
        rc = sq_next(c, st);
    }
    return rc;
}

static int sq_session_list(struct keg_meta *m, keg_meta_session_cb *cb, void *arg)
{
    struct sq_sess_arg a = {0};
    int rc = sq_txn(m, SQ_READ, sq_session_list_fn, &a);
    for (size_t i = 0; rc == 0 && i < a.n; i++)
        if (cb(arg, &a.list[i]))
            break;
    sq_sess_list_free(&a);
    return rc;
}

static int sq_session_clean_stale_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT sid FROM session WHERE heartbeat<=? AND sid<>? ORDER BY sid";
    struct sq_sess_arg *a = arg;
    sqlite3_stmt *st;
    uint64_t *sids;
    size_t n;
    a->cleaned = 0;
    int rc = sq_query(c, &st, sel, "ii", sq_now_sec() - a->max_age, I(sq_sid(m)));
    rc = sq_collect_u64(c, st, rc, &sids, &n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        KEG_INFO("cleaning up stale session %" PRIu64, sids[i]);
        rc = sq_session_drop(c, sids[i]);
        if (rc == 0)
            a->cleaned++;
    }
    keg_free(sids);
    return rc;
}

static int sq_session_clean_stale(struct keg_meta *m, int64_t max_age, uint32_t *cleaned)
{
    struct sq_sess_arg a = {.max_age = max_age < 0 ? 0 : max_age};
    int rc = sq_txn(m, SQ_WRITE, sq_session_clean_stale_fn, &a);
    if (rc == 0)
        *cleaned = a.cleaned;
    return rc;
}

/*----------------------------------------------------------------------------
 * Namespace
 *--------------------------------------------------------------------------*/

struct sq_ns_arg {
    uint64_t parent, ino, newparent;
    const char *name, *newname, *target;
    uint32_t mode, uid, gid;
    uint64_t rdev;
    unsigned set, flags;
    const struct keg_attr *in;
    struct keg_attr out;
    struct keg_unlinked gone;
    int nopen;                          /* unlink/rename: open-inode set, -1: none */
    uint64_t open[KEG_META_OPEN_MAX];
    struct keg_attr par[2];             /* namespace ops: the changed parents, as stored */
    int npar;
};

/* Records the parents a successful namespace op changed (keg_meta_parents). */
static void sq_note_parents(const struct sq_ns_arg *a)
{
    for (int i = 0; i < a->npar; i++)
        keg_meta_parents_add(&a->par[i]);
}

/* Runs the namespace op fn in a write transaction; once it committed, records
 * the parents it changed. */
static int sq_ns_txn(struct keg_meta *m, sq_fn *fn, struct sq_ns_arg *a)
{
    keg_meta_parents_begin();
    int rc = sq_txn(m, SQ_WRITE, fn, a);
    if (rc == 0)
        sq_note_parents(a);
    return rc;
}

static int sq_lookup_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ns_arg *a = arg;
    return sq_lookup_attr(c, a->parent, a->name, &a->out);
}

static int sq_lookup(struct keg_meta *m, uint64_t parent, const char *name, struct keg_attr *out)
{
    struct sq_ns_arg a = {.parent = parent, .name = name};
    int rc = sq_txn(m, SQ_READ, sq_lookup_fn, &a);
    if (rc == 0)
        *out = a.out;
    return rc;
}

static int sq_getattr_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ns_arg *a = arg;
    return sq_get_inode(c, a->ino, &a->out);
}

static int sq_getattr(struct keg_meta *m, uint64_t ino, struct keg_attr *out)
{
    struct sq_ns_arg a = {.ino = ino};
    int rc = sq_txn(m, SQ_READ, sq_getattr_fn, &a);
    if (rc == 0)
        *out = a.out;
    return rc;
}

static int sq_setattr_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ns_arg *a = arg;
    struct keg_attr *x = &a->out;
    const struct keg_attr *in = a->in;
    int64_t s;
    uint32_t ns;
    int rc = sq_get_inode(c, a->ino, x);
    if (rc || !a->set)
        return rc;
    keg_attr_set_now(&s, &ns);
    if (a->set & KEG_SET_MODE)
        x->mode = (x->mode & S_IFMT) | (in->mode & 07777);
    if (a->set & KEG_SET_UID)
        x->uid = in->uid;
    if (a->set & KEG_SET_GID)
        x->gid = in->gid;
    if (a->set & KEG_SET_ATIME) {
        x->atime = in->atime;
        x->atimensec = in->atimensec;
    }
    if (a->set & KEG_SET_MTIME) {
        x->mtime = in->mtime;
        x->mtimensec = in->mtimensec;
    }
    if (a->set & KEG_SET_ATIME_NOW) {
        x->atime = s;
        x->atimensec = ns;
    }
    if (a->set & KEG_SET_MTIME_NOW) {
        x->mtime = s;
        x->mtimensec = ns;
    }
    if (a->set & KEG_SET_CTIME) {
        x->ctime = in->ctime;
        x->ctimensec = in->ctimensec;
    } else {
        x->ctime = s;
        x->ctimensec = ns;
    }
    return sq_put_inode(c, x);
}

static int sq_setattr(struct keg_meta *m, uint64_t ino, unsigned set, const struct keg_attr *in,
                      struct keg_attr *out)
{
    struct sq_ns_arg a = {.ino = ino, .set = set, .in = in};
    int rc = sq_txn(m, set ? SQ_WRITE : SQ_READ, sq_setattr_fn, &a);
    if (rc == 0)
        *out = a.out;
    return rc;
}

static int sq_mknod_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char lnk[] = "INSERT OR REPLACE INTO symlink(ino,target) VALUES(?,?)";
    struct sq_ns_arg *a = arg;
    struct keg_attr pa, x;
    uint64_t eino;
    uint32_t etype;
    int rc = sq_get_dir(c, a->parent, &pa);
    if (rc)
        return rc;
    rc = sq_get_entry(c, a->parent, a->name, &eino, &etype);
    if (rc)
        return rc < 0 ? rc : -EEXIST;
    rc = sq_get_inode(c, a->ino, &x);
    if (rc != -ENOENT) {
        if (rc == 0) {
            KEG_ERR("mknod: inode %" PRIu64 " already exists (inode counter damaged?)", a->ino);
            rc = -EIO;
        }
        return rc;
    }
    rc = sq_charge(c, 0, 1);
    if (rc)
        return rc;
    memset(&x, 0, sizeof(x));
    x.ino = a->ino;
    x.mode = a->mode;
    x.uid = a->uid;
    x.gid = a->gid;
    x.rdev = a->rdev;
    if (pa.mode & S_ISGID) {
        x.gid = pa.gid;
        if (S_ISDIR(x.mode))
            x.mode |= S_ISGID;
    }
    if (S_ISDIR(x.mode)) {
        x.nlink = 2;
        x.size = 4096;
        x.parent = a->parent;
        pa.nlink++;
    } else {
        x.nlink = 1;
    }
    if (S_ISLNK(x.mode))
        x.size = strlen(a->target);
    sq_now(&x, 1, 1);
    x.atime = x.mtime;
    x.atimensec = x.mtimensec;
    rc = sq_put_inode(c, &x);
    if (!rc)
        rc = sq_put_entry(c, a->parent, a->name, x.ino, x.mode);
    if (!rc && S_ISLNK(x.mode)) {
        rc = sq_exec(c, lnk, "ib", I(x.ino), a->target, strlen(a->target));
        rc = rc < 0 ? rc : 0;
    }
    if (rc)
        return rc;
    sq_now(&pa, 1, 1);
    rc = sq_put_inode(c, &pa);
    if (!rc) {
        a->out = x;
        a->par[0] = pa;
        a->npar = 1;
    }
    return rc;
}

static int sq_mknod(struct keg_meta *m, uint64_t parent, const char *name, uint64_t ino,
                    uint32_t mode, uint32_t uid, uint32_t gid, uint64_t rdev, const char *target,
                    struct keg_attr *out)
{
    struct sq_ns_arg a = {.parent = parent, .name = name, .ino = ino, .mode = mode, .uid = uid,
                          .gid = gid, .rdev = rdev, .target = target};
    /* name, type, symlink target and ino > root: checked by keg_meta_mknod */
    int rc = sq_ns_txn(m, sq_mknod_fn, &a);
    if (rc == 0)
        *out = a.out;
    return rc;
}

static int sq_link_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ns_arg *a = arg;
    struct keg_attr x, pa;
    uint64_t eino;
    uint32_t etype;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc;
    rc = sq_get_dir(c, a->newparent, &pa);
    if (rc)
        return rc;
    rc = sq_get_entry(c, a->newparent, a->newname, &eino, &etype);
    if (rc)
        return rc < 0 ? rc : -EEXIST;
    if (S_ISDIR(x.mode))
        return -EPERM;
    if (x.nlink == 0)
        return -ENOENT;
    if (x.nlink >= SQ_MAX_LINKS)
        return -EMLINK;
    x.nlink++;
    sq_now(&x, 0, 1);
    sq_now(&pa, 1, 1);
    rc = sq_put_entry(c, a->newparent, a->newname, x.ino, x.mode);
    if (!rc)
        rc = sq_put_inode(c, &x);
    if (!rc)
        rc = sq_put_inode(c, &pa);
    if (!rc) {
        a->out = x;
        a->par[0] = pa;
        a->npar = 1;
    }
    return rc;
}

static int sq_link(struct keg_meta *m, uint64_t ino, uint64_t newparent, const char *newname,
                   struct keg_attr *out)
{
    struct sq_ns_arg a = {.ino = ino, .newparent = newparent, .newname = newname};
    int rc = sq_ns_txn(m, sq_link_fn, &a);
    if (rc == 0)
        *out = a.out;
    return rc;
}

static int sq_unlink_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ns_arg *a = arg;
    struct keg_attr x, pa;
    memset(&a->gone, 0, sizeof(a->gone));
    a->npar = 0;
    int rc = sq_lookup_attr(c, a->parent, a->name, &x);
    if (rc)
        return rc;
    if (S_ISDIR(x.mode))
        return -EISDIR;
    rc = sq_get_inode(c, a->parent, &pa);
    if (rc)
        return rc;
    rc = sq_del_entry(c, a->parent, a->name);
    if (rc)
        return rc;
    sq_now(&pa, 1, 1);
    rc = sq_put_inode(c, &pa);
    if (rc)
        return rc;
    a->par[0] = pa;
    a->npar = 1;
    x.nlink = x.nlink ? x.nlink - 1 : 0;
    sq_now(&x, 0, 1);
    if (x.nlink == 0)
        return sq_lost_last_link(m, c, &x, a->nopen, a->open, &a->gone);
    return sq_put_inode(c, &x);
}

static int sq_unlink(struct keg_meta *m, uint64_t parent, const char *name,
                     struct keg_unlinked *gone)
{
    struct sq_ns_arg a = {.parent = parent, .name = name};
    a.nopen = keg_meta_open_set(m, sq_sid(m) != 0, a.open);
    int rc = sq_ns_txn(m, sq_unlink_fn, &a);
    if (rc == 0 && gone)
        *gone = a.gone;
    return rc;
}

static int sq_rmdir_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ns_arg *a = arg;
    struct keg_attr x, pa;
    int rc = sq_lookup_attr(c, a->parent, a->name, &x);
    if (rc)
        return rc;
    if (!S_ISDIR(x.mode))
        return -ENOTDIR;
    if (x.ino == KEG_ROOT_INO)
        return -EBUSY;
    rc = sq_dir_has_entries(c, x.ino);
    if (rc)
        return rc < 0 ? rc : -ENOTEMPTY;
    rc = sq_get_inode(c, a->parent, &pa);
    if (rc)
        return rc;
    rc = sq_del_entry(c, a->parent, a->name);
    if (!rc)
        rc = sq_purge_inode(c, &x);
    if (rc)
        return rc;
    if (pa.nlink > 2)
        pa.nlink--;
    sq_now(&pa, 1, 1);
    a->par[0] = pa;
    a->npar = 1;
    return sq_put_inode(c, &pa);
}

static int sq_rmdir(struct keg_meta *m, uint64_t parent, const char *name)
{
    struct sq_ns_arg a = {.parent = parent, .name = name};
    return sq_ns_txn(m, sq_rmdir_fn, &a);
}

/* 1 if dir `anc` is dir `ino` or one of its ancestors (walking parent pointers). */
static int sq_is_ancestor(struct sq_conn *c, uint64_t anc, uint64_t ino)
{
    for (int depth = 0; depth < 100000; depth++) {
        if (ino == anc)
            return 1;
        if (ino == KEG_ROOT_INO)
            return 0;
        struct keg_attr x;
        int rc = sq_get_inode(c, ino, &x);
        if (rc)
            return rc == -ENOENT ? 0 : rc;
        ino = x.parent;
    }
    KEG_ERR("directory parent chain too long or looping (run fsck)");
    return -EIO;
}

/* Moves directory d (an entry of op) under np: fixes its parent pointer and
 * both parents' link counts (attrs given by the caller, written by it). */
static void sq_move_dir(struct keg_attr *d, struct keg_attr *op, struct keg_attr *np)
{
    d->parent = np->ino;
    if (op->nlink > 2)
        op->nlink--;
    np->nlink++;
}

/* The records one rename works on, through the steps of sq_rename_fn. */
struct sq_rn {
    struct keg_attr op;         /* the source parent */
    struct keg_attr npa;        /* the target parent, when it is another directory */
    struct keg_attr *np;        /* the target parent: &npa, or &op (one record) */
    struct keg_attr src;        /* the inode moved */
    struct keg_attr dst;        /* the inode at the target name (have_dst) */
    int same_dir;
    int have_dst;
};

/* Step 1: both parents, the source and what the target name holds. */
static int sq_rn_load(struct sq_conn *c, const struct sq_ns_arg *a, struct sq_rn *r)
{
    uint64_t dino = 0;
    uint32_t dtype = 0;
    r->same_dir = a->parent == a->newparent;
    r->np = r->same_dir ? &r->op : &r->npa;
    int rc = sq_get_dir(c, a->parent, &r->op);
    if (rc)
        return rc;
    if (!r->same_dir) {
        rc = sq_get_dir(c, a->newparent, &r->npa);
        if (rc)
            return rc;
    }
    rc = sq_lookup_attr(c, a->parent, a->name, &r->src);
    if (rc)
        return rc;
    rc = sq_get_entry(c, a->newparent, a->newname, &dino, &dtype);
    if (rc < 0)
        return rc;
    r->have_dst = rc == 1;
    if (r->have_dst) {
        rc = sq_get_inode(c, dino, &r->dst);
        if (rc)
            return rc == -ENOENT ? -EIO : rc;
    }
    return 0;
}

/* Step 2: what the flags allow, and no directory moved inside itself.
 * Returns 0, 1 (source and target are one inode: nothing to do) or -errno. */
static int sq_rn_check(struct sq_conn *c, const struct sq_ns_arg *a, const struct sq_rn *r)
{
    int rc;
    if (a->flags & KEG_RENAME_EXCHANGE) {
        if (!r->have_dst)
            return -ENOENT;
    } else if (r->have_dst && (a->flags & KEG_RENAME_NOREPLACE)) {
        return -EEXIST;
    }
    if (r->have_dst && r->dst.ino == r->src.ino)
        return 1;       /* hard links of one inode, or the same name */
    if (S_ISDIR(r->src.mode) && !r->same_dir) {
        rc = sq_is_ancestor(c, r->src.ino, a->newparent);
        if (rc)
            return rc < 0 ? rc : -EINVAL;
    }
    if ((a->flags & KEG_RENAME_EXCHANGE) && S_ISDIR(r->dst.mode) && !r->same_dir) {
        rc = sq_is_ancestor(c, r->dst.ino, a->parent);
        if (rc)
            return rc < 0 ? rc : -EINVAL;
    }
    return 0;
}

/* Step 3 (RENAME_EXCHANGE): the two names swap inodes. */
static int sq_rn_exchange(struct sq_conn *c, const struct sq_ns_arg *a, struct sq_rn *r)
{
    int rc = sq_put_entry(c, a->parent, a->name, r->dst.ino, r->dst.mode);
    if (!rc)
        rc = sq_put_entry(c, a->newparent, a->newname, r->src.ino, r->src.mode);
    if (rc)
        return rc;
    if (!r->same_dir) {
        if (S_ISDIR(r->src.mode))
            sq_move_dir(&r->src, &r->op, r->np);
        if (S_ISDIR(r->dst.mode))
            sq_move_dir(&r->dst, r->np, &r->op);
    }
    sq_now(&r->dst, 0, 1);
    return sq_put_inode(c, &r->dst);
}

/* May src replace dst?  -ENOTDIR, -EISDIR (types differ), -ENOTEMPTY. */
static int sq_rn_may_replace(struct sq_conn *c, const struct sq_rn *r)
{
    if (S_ISDIR(r->src.mode) && !S_ISDIR(r->dst.mode))
        return -ENOTDIR;
    if (!S_ISDIR(r->src.mode) && S_ISDIR(r->dst.mode))
        return -EISDIR;
    if (S_ISDIR(r->dst.mode)) {
        int rc = sq_dir_has_entries(c, r->dst.ino);
        if (rc)
            return rc < 0 ? rc : -ENOTEMPTY;
    }
    return 0;
}

/* The replaced inode loses the target name: an (empty) directory goes at once,
 * a file loses a link (its last: as for unlink, into a->gone). */
static int sq_rn_drop_dst(struct keg_meta *m, struct sq_conn *c, struct sq_ns_arg *a,
                          struct sq_rn *r)
{
    struct keg_attr *dst = &r->dst;
    if (S_ISDIR(dst->mode)) {
        if (r->np->nlink > 2)
            r->np->nlink--;
        a->gone.ino = dst->ino;
        a->gone.mode = dst->mode;
        a->gone.size = dst->size;
        a->gone.purged = 1;
        return sq_purge_inode(c, dst);
    }
    dst->nlink = dst->nlink ? dst->nlink - 1 : 0;
    sq_now(dst, 0, 1);
    if (dst->nlink == 0)
        return sq_lost_last_link(m, c, dst, a->nopen, a->open, &a->gone);
    return sq_put_inode(c, dst);
}

/* Step 3 (move, maybe replacing): the name moves, what it replaces is dropped. */
static int sq_rn_move(struct keg_meta *m, struct sq_conn *c, struct sq_ns_arg *a,
                      struct sq_rn *r)
{
    int rc = r->have_dst ? sq_rn_may_replace(c, r) : 0;
    if (rc)
        return rc;
    rc = sq_del_entry(c, a->parent, a->name);
    if (!rc)
        rc = sq_put_entry(c, a->newparent, a->newname, r->src.ino, r->src.mode);
    if (!rc && r->have_dst)
        rc = sq_rn_drop_dst(m, c, a, r);
    if (rc)
        return rc;
    if (S_ISDIR(r->src.mode) && !r->same_dir)
        sq_move_dir(&r->src, &r->op, r->np);
    return 0;
}

/* Step 4: the moved inode and the parents are written (times: now), and the
 * parents' new attributes noted for keg_meta_parents. */
static int sq_rn_store(struct sq_conn *c, struct sq_ns_arg *a, struct sq_rn *r)
{
    sq_now(&r->src, 0, 1);
    int rc = sq_put_inode(c, &r->src);
    sq_now(&r->op, 1, 1);
    if (!rc)
        rc = sq_put_inode(c, &r->op);
    if (!rc && !r->same_dir) {
        sq_now(r->np, 1, 1);
        rc = sq_put_inode(c, r->np);
    }
    if (!rc) {
        a->out = r->src;
        a->par[0] = r->op;
        a->par[1] = *r->np;
        a->npar = r->same_dir ? 1 : 2;
    }
    return rc;
}

static int sq_rename_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ns_arg *a = arg;
    struct sq_rn r;
    memset(&a->gone, 0, sizeof(a->gone));
    memset(&r, 0, sizeof(r));
    a->npar = 0;
    int rc = sq_rn_load(c, a, &r);
    if (!rc)
        rc = sq_rn_check(c, a, &r);
    if (rc == 1) {
        a->out = r.src;     /* one inode under both names: nothing to do */
        return 0;
    }
    if (!rc)
        rc = (a->flags & KEG_RENAME_EXCHANGE) ? sq_rn_exchange(c, a, &r) : sq_rn_move(m, c, a, &r);
    if (!rc)
        rc = sq_rn_store(c, a, &r);
    return rc;
}

static int sq_rename(struct keg_meta *m, uint64_t parent, const char *name, uint64_t newparent,
                     const char *newname, unsigned flags, struct keg_attr *moved,
                     struct keg_unlinked *gone)
{
    struct sq_ns_arg a = {.parent = parent, .name = name, .newparent = newparent,
                          .newname = newname, .flags = flags};
    a.nopen = keg_meta_open_set(m, sq_sid(m) != 0, a.open);
    int rc = sq_ns_txn(m, sq_rename_fn, &a);
    if (rc == 0 && moved)
        *moved = a.out;
    if (rc == 0 && gone)
        *gone = a.gone;
    return rc;
}

struct sq_dirent_buf {
    char *name;
    uint64_t ino;
    uint32_t type;
    struct keg_attr attr;
    int no_xattr;
};

struct sq_readdir_arg {
    uint64_t ino;
    const char *after;
    uint32_t max;
    int plus;
    struct sq_dirent_buf *ents;
    size_t n;
};

static void sq_readdir_free(struct sq_readdir_arg *a)
{
    for (size_t i = 0; i < a->n; i++)
        keg_free(a->ents[i].name);
    keg_free(a->ents);
    a->ents = NULL;
    a->n = 0;
}

static int sq_readdir_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT d.name, d.ino, d.type FROM dentry d"
                              " WHERE d.parent=? AND d.name>? ORDER BY d.name LIMIT ?";
    static const char selp[] = "SELECT d.name, d.ino, d.type, " SQ_ICOLS_I ","
                               " EXISTS(SELECT 1 FROM xattr x WHERE x.ino=d.ino) FROM dentry d"
                               " JOIN inode i ON i.ino=d.ino"
                               " WHERE d.parent=? AND d.name>? ORDER BY d.name LIMIT ?";
    struct sq_readdir_arg *a = arg;
    struct keg_attr da;
    sqlite3_stmt *st;
    size_t cap = 0;
    sq_readdir_free(a);
    int rc = sq_get_dir(c, a->ino, &da);
    if (rc)
        return rc;
    const char *after = a->after ? a->after : "";
    int64_t limit = a->max ? (int64_t)a->max : -1;
    rc = sq_query(c, &st, a->plus ? selp : sel, "ibi", I(a->ino), after, strlen(after), limit);
    while (rc == 1) {
        if (a->n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            struct sq_dirent_buf *t = keg_realloc(a->ents, ncap * sizeof(*t));
            if (!t)
                return -ENOMEM;
            a->ents = t;
            cap = ncap;
        }
        struct sq_dirent_buf *e = &a->ents[a->n];
        size_t nl = (size_t)sqlite3_column_bytes(st, 0);
        e->name = keg_strndup(nl ? sqlite3_column_blob(st, 0) : "", nl);
        if (!e->name)
            return -ENOMEM;
        e->ino = (uint64_t)sqlite3_column_int64(st, 1);
        e->type = (uint32_t)sqlite3_column_int64(st, 2);
        e->no_xattr = 0;
        if (a->plus) {
            sq_col_attr(st, 3, &e->attr);
            e->no_xattr = sqlite3_column_int(st, 3 + SQ_ICOLS_N) == 0;
        }
        a->n++;
        rc = sq_next(c, st);
    }
    return rc;
}

static int sq_readdir(struct keg_meta *m, uint64_t ino, const char *after, uint32_t max, int plus,
                      keg_meta_dirent_cb *cb, void *arg)
{
    struct sq_readdir_arg a = {.ino = ino, .after = after, .max = max, .plus = plus};
    int rc = sq_txn(m, SQ_READ, sq_readdir_fn, &a);
    int delivered = 0;
    for (size_t i = 0; rc == 0 && i < a.n; i++) {
        struct keg_dirent de = {.name = a.ents[i].name, .ino = a.ents[i].ino,
                                .type = a.ents[i].type, .attr = plus ? &a.ents[i].attr : NULL,
                                .no_xattr = plus && a.ents[i].no_xattr};
        if (cb(arg, &de))
            break;
        delivered++;
    }
    sq_readdir_free(&a);
    return rc < 0 ? rc : delivered;
}

struct sq_buf_arg {
    uint64_t ino;
    const char *name;
    void *buf;
    size_t size;
    const void *val;
    size_t len;
    int flags;
};

static int sq_readlink_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT target FROM symlink WHERE ino=?";
    struct sq_buf_arg *a = arg;
    struct keg_attr x;
    sqlite3_stmt *st;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc;
    if (!S_ISLNK(x.mode))
        return -EINVAL;
    rc = sq_query(c, &st, sel, "i", I(a->ino));
    if (rc <= 0)
        return rc < 0 ? rc : -EIO;
    return sq_copy_blob(st, a->buf, a->size);
}

static ssize_t sq_readlink(struct keg_meta *m, uint64_t ino, char *buf, size_t size)
{
    struct sq_buf_arg a = {.ino = ino, .buf = buf, .size = size};
    return sq_txn(m, SQ_READ, sq_readlink_fn, &a);
}

static int sq_purge_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_ns_arg *a = arg;
    struct keg_attr x;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc == -ENOENT ? 0 : rc;
    if (x.nlink > 0)
        return 0;   /* linked again (or never unlinked): nothing to purge */
    return sq_purge_inode(c, &x);
}

static int sq_purge(struct keg_meta *m, uint64_t ino)
{
    struct sq_ns_arg a = {.ino = ino};
    return sq_txn(m, SQ_WRITE, sq_purge_fn, &a);
}

/*----------------------------------------------------------------------------
 * Data
 *--------------------------------------------------------------------------*/

struct sq_data_arg {
    uint64_t ino;
    uint32_t indx;
    struct keg_slice *slices;
    size_t n;
    const struct keg_chunk_slice *cs;
    uint64_t size;
    unsigned flags;
    uint32_t nslices;
    const struct keg_slice *old;
    size_t keep;                        /* compact: old[0..keep) stay */
    const struct keg_slice *repl;
    struct keg_attr out;
    struct keg_del_slice *dels;
    const struct keg_del_slice *done;
    uint32_t max;
};

static int sq_read_chunk_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT slices FROM chunk WHERE ino=? AND indx=?";
    struct sq_data_arg *a = arg;
    sqlite3_stmt *st;
    keg_free(a->slices);
    a->slices = NULL;
    a->n = 0;
    int rc = sq_query(c, &st, sel, "ii", I(a->ino), I(a->indx));
    if (rc <= 0)
        return rc;
    size_t len = (size_t)sqlite3_column_bytes(st, 0);
    const unsigned char *b = sqlite3_column_blob(st, 0);
    if (len % SQ_REC) {
        KEG_ERR("chunk %" PRIu64 ":%" PRIu32 " has a damaged slice list", a->ino, a->indx);
        return -EIO;
    }
    if (len == 0)
        return 0;
    a->slices = keg_malloc(len / SQ_REC * sizeof(*a->slices));
    if (!a->slices)
        return -ENOMEM;
    for (size_t i = 0; i < len / SQ_REC; i++)
        sq_unpack(b + i * SQ_REC, &a->slices[i]);
    a->n = len / SQ_REC;
    sqlite3_reset(st);
    return 0;
}

struct sq_next_arg {
    uint64_t ino;
    uint32_t from;
    uint32_t indx;   /* out */
};

static int sq_next_chunk_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] =
        "SELECT indx FROM chunk WHERE ino=? AND indx>=? ORDER BY indx LIMIT 1";
    struct sq_next_arg *a = arg;
    sqlite3_stmt *st;
    KEG_UNUSED(m);
    int rc = sq_query(c, &st, sel, "ii", I(a->ino), I(a->from));
    if (rc < 0)
        return rc;
    if (rc == 0)
        return -ENOENT;
    a->indx = (uint32_t)sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return 0;
}

static int sq_next_chunk(struct keg_meta *m, uint64_t ino, uint32_t from, uint32_t *indx)
{
    struct sq_next_arg a = {.ino = ino, .from = from};
    int rc = sq_txn(m, SQ_READ, sq_next_chunk_fn, &a);
    if (rc == 0)
        *indx = a.indx;
    return rc;
}

static int sq_read_chunk(struct keg_meta *m, uint64_t ino, uint32_t indx, struct keg_slice **out,
                         size_t *n)
{
    struct sq_data_arg a = {.ino = ino, .indx = indx};
    int rc = sq_txn(m, SQ_READ, sq_read_chunk_fn, &a);
    if (rc) {
        keg_free(a.slices);
        return rc;
    }
    *out = a.slices;
    *n = a.n;
    return 0;
}

/* Appends one record to chunk (ino, indx); *count = records now in it.
 * || yields TEXT (and length() of TEXT stops at a NUL byte): cast back to BLOB. */
static int sq_chunk_append(struct sq_conn *c, uint64_t ino, uint32_t indx,
                           const struct keg_slice *s, uint32_t *count)
{
    static const char sql[] = "INSERT INTO chunk(ino,indx,slices) VALUES(?,?,?)"
                              " ON CONFLICT(ino,indx) DO UPDATE"
                              " SET slices=CAST(slices||excluded.slices AS BLOB)"
                              " RETURNING length(slices)";
    unsigned char rec[SQ_REC];
    sqlite3_stmt *st;
    sq_pack(rec, s);
    int rc = sq_query(c, &st, sql, "iib", I(ino), I(indx), (const void *)rec, (size_t)SQ_REC);
    if (rc <= 0)
        return rc < 0 ? rc : -EIO;
    *count = (uint32_t)(sqlite3_column_int64(st, 0) / SQ_REC);
    sqlite3_reset(st);
    return 0;
}

/* The inode of a regular file: -EISDIR for directories, -EPERM for others. */
static int sq_get_reg(struct sq_conn *c, uint64_t ino, struct keg_attr *x)
{
    int rc = sq_get_inode(c, ino, x);
    if (rc)
        return rc;
    if (S_ISDIR(x->mode))
        return -EISDIR;
    return S_ISREG(x->mode) ? 0 : -EPERM;
}

/* One slice reference of write_slices: a new or shared reference to its
 * slice (holes have none), then the record appended to its chunk. */
static int sq_write_one(struct sq_conn *c, struct sq_data_arg *a, uint32_t indx,
                        const struct keg_slice *s)
{
    uint32_t cnt;
    int rc;
    if (s->id) {
        rc = (a->flags & KEG_WS_SHARE) ? sq_ref_share(c, s->id) : sq_ref_new(c, s->id, s->size);
        if (rc)
            return rc;
    }
    rc = sq_chunk_append(c, a->ino, indx, s, &cnt);
    if (rc)
        return rc;
    a->nslices = KEG_MAX(a->nslices, cnt);
    if (s->id && a->out.alloc != KEG_ALLOC_UNKNOWN)
        a->out.alloc += s->len;
    return 0;
}

static int sq_write_slices_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_data_arg *a = arg;
    struct keg_attr *x = &a->out;
    uint64_t size;
    int rc = sq_get_reg(c, a->ino, x);
    if (rc)
        return rc;
    a->nslices = 0;
    size = KEG_MAX(x->size, a->size);
    for (size_t i = 0; i < a->n; i++) {
        const struct keg_chunk_slice *cs = &a->cs[i];
        if (cs->indx != KEG_INDX_APPEND) {
            rc = sq_write_one(c, a, cs->indx, &cs->s);
            if (rc)
                return rc;
            continue;
        }
        /* O_APPEND: at the end as it is now, split at chunk boundaries */
        for (uint32_t done = 0; done < cs->s.len;) {
            uint32_t cpos = (uint32_t)(size % KEG_CHUNK_SIZE);
            uint32_t l = (uint32_t)KEG_MIN((uint64_t)(cs->s.len - done), KEG_CHUNK_SIZE - cpos);
            struct keg_slice s = cs->s;
            s.off += done;
            s.len = l;
            s.pos = cpos;
            rc = sq_write_one(c, a, (uint32_t)(size / KEG_CHUNK_SIZE), &s);
            if (rc)
                return rc;
            done += l;
            size += l;
        }
    }
    if (size > x->size) {
        rc = sq_charge(c, (int64_t)keg_meta_charge(size) - (int64_t)keg_meta_charge(x->size), 0);
        if (rc)
            return rc;
        x->size = size;
    }
    if (x->alloc != KEG_ALLOC_UNKNOWN && x->alloc > x->size)
        x->alloc = x->size;             /* nothing is stored past EOF */
    if (!(a->flags & KEG_WS_NOMTIME))
        sq_now(x, 1, 1);
    return sq_put_inode(c, x);
}

static int sq_write_slices(struct keg_meta *m, uint64_t ino, size_t n,
                           const struct keg_chunk_slice *cs, uint64_t min_size, unsigned flags,
                           uint32_t *nslices, struct keg_attr *out)
{
    /* the slice list is checked by keg_meta_write_slices */
    struct sq_data_arg a = {.ino = ino, .n = n, .cs = cs, .size = min_size, .flags = flags};
    int rc = sq_txn(m, SQ_WRITE, sq_write_slices_fn, &a);
    if (rc == 0) {
        if (nslices)
            *nslices = a.nslices;
        if (out)
            *out = a.out;
    }
    return rc;
}

static int sq_truncate_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT 1 FROM chunk WHERE ino=? AND indx=?";
    struct sq_data_arg *a = arg;
    struct keg_attr *x = &a->out;
    int rc = sq_get_reg(c, a->ino, x);
    if (rc)
        return rc;
    int64_t delta = (int64_t)keg_meta_charge(a->size) - (int64_t)keg_meta_charge(x->size);
    if (a->size < x->size) {
        uint64_t keep = (a->size + KEG_CHUNK_SIZE - 1) / KEG_CHUNK_SIZE;
        rc = sq_drop_chunks(c, a->ino, keep);
        if (rc)
            return rc;
        uint32_t pos = (uint32_t)(a->size % KEG_CHUNK_SIZE);
        if (pos) {
            uint32_t last = (uint32_t)(a->size / KEG_CHUNK_SIZE);
            sqlite3_stmt *st;
            rc = sq_query(c, &st, sel, "ii", I(a->ino), I(last));
            if (rc < 0)
                return rc;
            if (rc == 1) {
                sqlite3_reset(st);
                uint32_t hl = (uint32_t)(KEG_CHUNK_SIZE - pos), cnt;
                struct keg_slice hole = {.id = 0, .size = hl, .off = 0, .len = hl, .pos = pos};
                rc = sq_chunk_append(c, a->ino, last, &hole, &cnt);
                if (rc)
                    return rc;
            }
        }
    }
    rc = sq_charge(c, delta, 0);
    if (rc)
        return rc;
    x->size = a->size;
    if (x->alloc != KEG_ALLOC_UNKNOWN && x->alloc > x->size)
        x->alloc = x->size;
    sq_now(x, 1, 1);
    return sq_put_inode(c, x);
}

static int sq_truncate(struct keg_meta *m, uint64_t ino, uint64_t size, struct keg_attr *out)
{
    struct sq_data_arg a = {.ino = ino, .size = size};
    int rc = sq_txn(m, SQ_WRITE, sq_truncate_fn, &a);
    if (rc == 0 && out)
        *out = a.out;
    return rc;
}

static int sq_compact_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT slices FROM chunk WHERE ino=? AND indx=?";
    static const char upd[] = "UPDATE chunk SET slices=? WHERE ino=? AND indx=?";
    struct sq_data_arg *a = arg;
    sqlite3_stmt *st;
    int rc = sq_query(c, &st, sel, "ii", I(a->ino), I(a->indx));
    if (rc <= 0)
        return rc < 0 ? rc : -EAGAIN;
    size_t len = (size_t)sqlite3_column_bytes(st, 0);
    const unsigned char *b = sqlite3_column_blob(st, 0);
    if (len % SQ_REC || len / SQ_REC < a->n) {
        sqlite3_reset(st);
        return len % SQ_REC ? -EIO : -EAGAIN;
    }
    for (size_t i = 0; i < a->n; i++) {
        struct keg_slice s;
        sq_unpack(b + i * SQ_REC, &s);
        const struct keg_slice *o = &a->old[i];
        if (s.id != o->id || s.size != o->size || s.off != o->off || s.len != o->len ||
            s.pos != o->pos) {
            sqlite3_reset(st);
            return -EAGAIN;
        }
    }
    size_t rest = len - a->n * SQ_REC;
    size_t kept = a->keep * SQ_REC;
    unsigned char *nb = keg_malloc(kept + SQ_REC + rest);
    if (!nb)
        return -ENOMEM;
    memcpy(nb, b, kept);
    sq_pack(nb + kept, a->repl);
    if (rest)
        memcpy(nb + kept + SQ_REC, b + a->n * SQ_REC, rest);
    sqlite3_reset(st);
    rc = sq_exec(c, upd, "bii", (const void *)nb, kept + SQ_REC + rest, I(a->ino), I(a->indx));
    keg_free(nb);
    if (rc < 0)
        return rc;
    if (a->repl->id) {
        rc = sq_ref_new(c, a->repl->id, a->repl->size);
        if (rc)
            return rc;
    }
    for (size_t i = a->keep; i < a->n; i++) {
        if (a->old[i].id) {
            rc = sq_unref(c, a->old[i].id);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int sq_compact_chunk(struct keg_meta *m, uint64_t ino, uint32_t indx,
                            const struct keg_slice *old, size_t nold, size_t keep,
                            const struct keg_slice *repl)
{
    struct sq_data_arg a = {.ino = ino, .indx = indx, .old = old, .n = nold, .keep = keep,
                            .repl = repl};
    if (nold == 0 || keep >= nold || !repl)
        return -EINVAL;
    return sq_txn(m, SQ_WRITE, sq_compact_fn, &a);
}

static int sq_delq_peek_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT id, size FROM delslice ORDER BY id LIMIT ?";
    struct sq_data_arg *a = arg;
    sqlite3_stmt *st;
    int n = 0;
    int rc = sq_query(c, &st, sel, "i", I(a->max));
    while (rc == 1) {
        a->dels[n].id = (uint64_t)sqlite3_column_int64(st, 0);
        a->dels[n].size = (uint32_t)sqlite3_column_int64(st, 1);
        n++;
        rc = sq_next(c, st);
    }
    return rc < 0 ? rc : n;
}

static int sq_delq_peek(struct keg_meta *m, struct keg_del_slice *out, uint32_t max)
{
    struct sq_data_arg a = {.max = max};
    if (max == 0)
        return 0;
    a.dels = keg_malloc(max * sizeof(*a.dels));
    if (!a.dels)
        return -ENOMEM;
    int rc = sq_txn(m, SQ_READ, sq_delq_peek_fn, &a);
    if (rc > 0)
        memcpy(out, a.dels, (size_t)rc * sizeof(*out));
    keg_free(a.dels);
    return rc;
}

static int sq_delq_ack_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char del[] = "DELETE FROM delslice WHERE id=?";
    struct sq_data_arg *a = arg;
    for (uint32_t i = 0; i < a->max; i++) {
        int rc = sq_exec(c, del, "i", I(a->done[i].id));
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int sq_delq_ack(struct keg_meta *m, const struct keg_del_slice *done, uint32_t n)
{
    struct sq_data_arg a = {.done = done, .max = n};
    if (n == 0)
        return 0;
    return sq_txn(m, SQ_WRITE, sq_delq_ack_fn, &a);
}

/*----------------------------------------------------------------------------
 * Extended attributes
 *--------------------------------------------------------------------------*/

static int sq_getxattr_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT value FROM xattr WHERE ino=? AND name=?";
    struct sq_buf_arg *a = arg;
    struct keg_attr x;
    sqlite3_stmt *st;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc;
    rc = sq_query(c, &st, sel, "ib", I(a->ino), a->name, strlen(a->name));
    if (rc <= 0)
        return rc < 0 ? rc : -ENODATA;
    return sq_copy_blob(st, a->buf, a->size);
}

static ssize_t sq_getxattr(struct keg_meta *m, uint64_t ino, const char *name, void *buf,
                           size_t size)
{
    struct sq_buf_arg a = {.ino = ino, .name = name, .buf = buf, .size = size};
    return sq_txn(m, SQ_READ, sq_getxattr_fn, &a);
}

static int sq_setxattr_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT 1 FROM xattr WHERE ino=? AND name=?";
    static const char ins[] = "INSERT OR REPLACE INTO xattr(ino,name,value) VALUES(?,?,?)";
    struct sq_buf_arg *a = arg;
    struct keg_attr x;
    sqlite3_stmt *st;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc;
    rc = sq_query(c, &st, sel, "ib", I(a->ino), a->name, strlen(a->name));
    if (rc < 0)
        return rc;
    if (rc == 1)
        sqlite3_reset(st);
    if (rc == 1 && (a->flags & XATTR_CREATE))
        return -EEXIST;
    if (rc == 0 && (a->flags & XATTR_REPLACE))
        return -ENODATA;
    rc = sq_exec(c, ins, "ibb", I(a->ino), a->name, strlen(a->name), a->val, a->len);
    if (rc < 0)
        return rc;
    sq_now(&x, 0, 1);
    return sq_put_inode(c, &x);
}

static int sq_setxattr(struct keg_meta *m, uint64_t ino, const char *name, const void *val,
                       size_t len, int flags)
{
    struct sq_buf_arg a = {.ino = ino, .name = name, .val = val, .len = len, .flags = flags};
    /* name, size and flags: checked by keg_meta_setxattr */
    return sq_txn(m, SQ_WRITE, sq_setxattr_fn, &a);
}

static int sq_listxattr_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT name FROM xattr WHERE ino=? ORDER BY name";
    struct sq_buf_arg *a = arg;
    struct keg_attr x;
    sqlite3_stmt *st;
    size_t total = 0;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc;
    rc = sq_query(c, &st, sel, "i", I(a->ino));
    while (rc == 1) {
        size_t nl = (size_t)sqlite3_column_bytes(st, 0);
        if (a->size) {
            if (total + nl + 1 > a->size) {
                sqlite3_reset(st);
                return -ERANGE;
            }
            memcpy((char *)a->buf + total, sqlite3_column_blob(st, 0), nl);
            ((char *)a->buf)[total + nl] = '\0';
        }
        total += nl + 1;
        rc = sq_next(c, st);
    }
    return rc < 0 ? rc : (int)total;
}

static ssize_t sq_listxattr(struct keg_meta *m, uint64_t ino, char *buf, size_t size)
{
    struct sq_buf_arg a = {.ino = ino, .buf = buf, .size = size};
    return sq_txn(m, SQ_READ, sq_listxattr_fn, &a);
}

static int sq_removexattr_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char del[] = "DELETE FROM xattr WHERE ino=? AND name=?";
    struct sq_buf_arg *a = arg;
    struct keg_attr x;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc;
    rc = sq_exec(c, del, "ib", I(a->ino), a->name, strlen(a->name));
    if (rc <= 0)
        return rc < 0 ? rc : -ENODATA;
    sq_now(&x, 0, 1);
    return sq_put_inode(c, &x);
}

static int sq_removexattr(struct keg_meta *m, uint64_t ino, const char *name)
{
    struct sq_buf_arg a = {.ino = ino, .name = name};
    return sq_txn(m, SQ_WRITE, sq_removexattr_fn, &a);
}

/*----------------------------------------------------------------------------
 * Locks
 *--------------------------------------------------------------------------*/

struct sq_lock_arg {
    uint64_t ino, owner, sid;
    uint32_t type;
    struct keg_plock lk;
};

static int sq_flock_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT type FROM flock WHERE ino=? AND NOT (sid=? AND owner=?)";
    static const char del[] = "DELETE FROM flock WHERE ino=? AND sid=? AND owner=?";
    static const char ins[] = "INSERT OR REPLACE INTO flock(ino,sid,owner,type) VALUES(?,?,?,?)";
    struct sq_lock_arg *a = arg;
    struct keg_attr x;
    sqlite3_stmt *st;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc;
    if (a->type == F_UNLCK) {
        rc = sq_exec(c, del, "iii", I(a->ino), I(a->sid), I(a->owner));
        return rc < 0 ? rc : 0;
    }
    rc = sq_query(c, &st, sel, "iii", I(a->ino), I(a->sid), I(a->owner));
    while (rc == 1) {
        uint32_t t = (uint32_t)sqlite3_column_int64(st, 0);
        if (a->type == F_WRLCK || t == F_WRLCK) {
            sqlite3_reset(st);
            return -EAGAIN;
        }
        rc = sq_next(c, st);
    }
    if (rc < 0)
        return rc;
    rc = sq_exec(c, ins, "iiii", I(a->ino), I(a->sid), I(a->owner), I(a->type));
    return rc < 0 ? rc : 0;
}

static int sq_flock(struct keg_meta *m, uint64_t ino, uint64_t owner, uint32_t type)
{
    struct sq_lock_arg a = {.ino = ino, .owner = owner, .type = type, .sid = sq_sid(m)};
    if (type != F_RDLCK && type != F_WRLCK && type != F_UNLCK)
        return -EINVAL;
    return sq_txn(m, SQ_WRITE, sq_flock_fn, &a);
}

struct sq_range {
    uint32_t type;
    uint64_t start, end;
    uint32_t pid;
};

static int sq_overlap(uint64_t s1, uint64_t e1, uint64_t s2, uint64_t e2)
{
    return s1 <= e2 && s2 <= e1;
}

/* Finds the first (lowest start) lock of another (sid, owner) on ino that
 * conflicts with lk.  1 with *hit set, 0 if none, or -errno. */
static int sq_plock_conflict(struct sq_conn *c, const struct sq_lock_arg *a,
                             const struct keg_plock *lk, struct keg_plock *hit)
{
    static const char sel[] = "SELECT type, start, end, pid FROM plock"
                              " WHERE ino=? AND NOT (sid=? AND owner=?)";
    sqlite3_stmt *st;
    int found = 0;
    int rc = sq_query(c, &st, sel, "iii", I(a->ino), I(a->sid), I(a->owner));
    while (rc == 1) {
        struct keg_plock o = {
            .type = (uint32_t)sqlite3_column_int64(st, 0),
            .start = (uint64_t)sqlite3_column_int64(st, 1),
            .end = (uint64_t)sqlite3_column_int64(st, 2),
            .pid = (uint32_t)sqlite3_column_int64(st, 3),
        };
        if (sq_overlap(o.start, o.end, lk->start, lk->end) &&
            (o.type == F_WRLCK || lk->type == F_WRLCK) && (!found || o.start < hit->start)) {
            *hit = o;
            found = 1;
        }
        rc = sq_next(c, st);
    }
    return rc < 0 ? rc : found;
}

static int sq_getlk_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    struct sq_lock_arg *a = arg;
    struct keg_plock hit;
    struct keg_attr x;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc;
    rc = sq_plock_conflict(c, a, &a->lk, &hit);
    if (rc < 0)
        return rc;
    if (rc == 1)
        a->lk = hit;
    else
        a->lk.type = F_UNLCK;
    return 0;
}

static int sq_getlk(struct keg_meta *m, uint64_t ino, uint64_t owner, struct keg_plock *lk)
{
    struct sq_lock_arg a = {.ino = ino, .owner = owner, .sid = sq_sid(m), .lk = *lk};
    if ((lk->type != F_RDLCK && lk->type != F_WRLCK) || lk->start > lk->end)
        return -EINVAL;
    int rc = sq_txn(m, SQ_READ, sq_getlk_fn, &a);
    if (rc == 0)
        *lk = a.lk;
    return rc;
}

static int sq_setlk_fn(struct keg_meta *m, struct sq_conn *c, void *arg)
{
    static const char sel[] = "SELECT type, start, end, pid FROM plock"
                              " WHERE ino=? AND sid=? AND owner=? ORDER BY start";
    static const char del[] = "DELETE FROM plock WHERE ino=? AND sid=? AND owner=?";
    static const char ins[] = "INSERT INTO plock(ino,sid,owner,type,start,end,pid)"
                              " VALUES(?,?,?,?,?,?,?)";
    struct sq_lock_arg *a = arg;
    const struct keg_plock *lk = &a->lk;
    struct keg_plock hit;
    struct keg_attr x;
    struct sq_range *r = NULL;
    size_t n = 0, cap = 0;
    sqlite3_stmt *st;
    int rc = sq_get_inode(c, a->ino, &x);
    if (rc)
        return rc;
    if (lk->type != F_UNLCK) {
        rc = sq_plock_conflict(c, a, lk, &hit);
        if (rc)
            return rc < 0 ? rc : -EAGAIN;
    }
    /* Rebuild this owner's ranges: cut [start, end] out of them ... */
    rc = sq_query(c, &st, sel, "iii", I(a->ino), I(a->sid), I(a->owner));
    while (rc == 1) {
        if (n + 3 > cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct sq_range *t = keg_realloc(r, ncap * sizeof(*t));
            if (!t) {
                rc = -ENOMEM;
                goto out;
            }
            r = t;
            cap = ncap;
        }
        struct sq_range o = {
            .type = (uint32_t)sqlite3_column_int64(st, 0),
            .start = (uint64_t)sqlite3_column_int64(st, 1),
            .end = (uint64_t)sqlite3_column_int64(st, 2),
            .pid = (uint32_t)sqlite3_column_int64(st, 3),
        };
        if (!sq_overlap(o.start, o.end, lk->start, lk->end)) {
            r[n++] = o;
        } else {
            if (o.start < lk->start) {
                r[n] = o;
                r[n++].end = lk->start - 1;
            }
            if (o.end > lk->end) {
                r[n] = o;
                r[n++].start = lk->end + 1;
            }
        }
        rc = sq_next(c, st);
    }
    if (rc < 0)
        goto out;
    /* ... then add the new range, merging same-type neighbours it touches. */
    if (lk->type != F_UNLCK) {
        struct sq_range nr = {.type = lk->type, .start = lk->start, .end = lk->end,
                              .pid = lk->pid};
        size_t w = 0;
        for (size_t i = 0; i < n; i++) {
            int touches = (r[i].end != UINT64_MAX && r[i].end + 1 == nr.start) ||
                          (nr.end != UINT64_MAX && nr.end + 1 == r[i].start);
            if (r[i].type == nr.type && touches) {
                nr.start = KEG_MIN(nr.start, r[i].start);
                nr.end = KEG_MAX(nr.end, r[i].end);
            } else {
                r[w++] = r[i];
            }
        }
        n = w;
        if (n == cap) {
            struct sq_range *t = keg_realloc(r, (cap + 1) * sizeof(*t));
            if (!t) {
                rc = -ENOMEM;
                goto out;
            }
            r = t;
        }
        r[n++] = nr;
    }
    rc = sq_exec(c, del, "iii", I(a->ino), I(a->sid), I(a->owner));
    for (size_t i = 0; rc >= 0 && i < n; i++)
        rc = sq_exec(c, ins, "iiiiiii", I(a->ino), I(a->sid), I(a->owner), I(r[i].type),
                     I(r[i].start), I(r[i].end), I(r[i].pid));
    rc = rc < 0 ? rc : 0;
out:
    keg_free(r);
    return rc;
}

static int sq_setlk(struct keg_meta *m, uint64_t ino, uint64_t owner, const struct keg_plock *lk)
{
    struct sq_lock_arg a = {.ino = ino, .owner = owner, .sid = sq_sid(m), .lk = *lk};
    if ((lk->type != F_RDLCK && lk->type != F_WRLCK && lk->type != F_UNLCK) ||
        lk->start > lk->end)
        return -EINVAL;
    return sq_txn(m, SQ_WRITE, sq_setlk_fn, &a);
}

/*----------------------------------------------------------------------------
 * Durability
 *--------------------------------------------------------------------------*/

/* Checkpoints what it can, then fsyncs the WAL: every transaction committed
 * before the call survives a power loss afterwards (synchronous=NORMAL alone
 * only protects against process crashes). */
static int sq_sync(struct keg_meta *m)
{
    struct sq_priv *p = P(m);
    struct sq_conn *c;
    int rc = sq_conn_get(p, 0, &c);
    if (rc)
        return rc;
    rc = sqlite3_exec(c->db, "PRAGMA wal_checkpoint(PASSIVE)", NULL, NULL, NULL);
    rc = (rc & 0xff) == SQLITE_BUSY ? 0 : sq_rc(c, rc, "checkpoint");
    sq_conn_put(p, c);
    if (rc)
        return rc;
    char *wal = keg_asprintf("%s-wal", p->path);
    if (!wal)
        return -ENOMEM;
    int fd = open(wal, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (fsync(fd) != 0) {
            rc = -errno;
            KEG_ERR("fsync %s: %s", wal, strerror(-rc));
        }
        close(fd);
    }
    keg_free(wal);
    return rc;
}

const struct keg_meta_ops keg_meta_sqlite_ops = {
    .name = "sqlite3",
    .version = 1,
    .caps = KEG_META_CAP_TXN,
    .priv_size = sizeof(struct sq_priv),
    .schemes = NULL,
    .open = sq_open,
    .close = sq_close,
    .format_init = sq_format_init,
    .format_load = sq_format_load,
    .destroy = sq_destroy,
    .alloc_ids = sq_alloc_ids,
    .statfs = sq_statfs,
    .session_begin = sq_session_begin,
    .session_resume = sq_session_resume,
    .session_heartbeat = sq_session_heartbeat,
    .session_end = sq_session_end,
    .session_list = sq_session_list,
    .session_clean_stale = sq_session_clean_stale,
    .lookup = sq_lookup,
    .getattr = sq_getattr,
    .setattr = sq_setattr,
    .mknod = sq_mknod,
    .link = sq_link,
    .unlink = sq_unlink,
    .rmdir = sq_rmdir,
    .rename = sq_rename,
    .readdir = sq_readdir,
    .readlink = sq_readlink,
    .purge = sq_purge,
    .read_chunk = sq_read_chunk,
    .write_slices = sq_write_slices,
    .truncate = sq_truncate,
    .compact_chunk = sq_compact_chunk,
    .delq_peek = sq_delq_peek,
    .delq_ack = sq_delq_ack,
    .getxattr = sq_getxattr,
    .setxattr = sq_setxattr,
    .listxattr = sq_listxattr,
    .removexattr = sq_removexattr,
    .flock = sq_flock,
    .getlk = sq_getlk,
    .setlk = sq_setlk,
    .sync = sq_sync,
    .next_chunk = sq_next_chunk,
};
