/* meta_sqlite_vfs.c -- a VFS over the system's default one that writes the
 * frames of a WAL transaction to the log file with one write at its commit.
 *
 * DESIGN
 * SQLite appends a transaction's pages to the WAL as frames, each with two
 * writes: the 24-byte frame header, then the page (wal.c, walWriteOneFrame).
 * A metadata transaction touches three to five pages, so its commit costs
 * eight to ten pwrite calls, about a fifth of the engine's time per
 * transaction on a small VM, where each system call is dear.  This VFS
 * forwards every call to the default VFS, except that on a WAL file it
 * gathers contiguous frames in memory and writes them with one write when
 * the transaction's commit frame is complete.
 *
 * What a gathered frame may never do is be seen before it is written.
 * Other connections and processes see frames only through the WAL index,
 * which SQLite updates after writing the commit frame (the WAL file format:
 * a frame header's second field, "the size of the database in pages after
 * the commit", is non-zero only in a commit frame).  So:
 *
 *   - A 24-byte write that continues the file where this file's last write
 *     ended, with no frame half-gathered, is a frame header: gathered.  Its
 *     commit field is remembered.
 *   - The next write, of a page size (a power of two, 512..65536) right after
 *     it, completes the frame: gathered.  If the frame is a commit frame,
 *     everything gathered is written now, and the result of that write is the
 *     result of this call: SQLite does not publish the commit unless the
 *     frames are in the file (the page cache, as without this VFS).
 *   - At most 128 KiB are gathered (SQ_VFS_WRITE_MAX): a commit of more
 *     frames than that is written in several writes, the last one with the
 *     commit frame.
 *   - Anything else on a WAL file (another write, a read, sync, truncate,
 *     size, file control, close) first writes what is gathered, and fails
 *     with that write's error if it fails.
 *   - Frames written without a commit (a transaction that spills its cache,
 *     then rolls back) are written at the latest when the transaction drops
 *     its WAL locks: every shared-memory lock change first writes what this
 *     thread gathered.  A write transaction runs in one thread (the engine
 *     never hands a connection to another thread mid-transaction), so
 *     nothing gathered outlives the transaction that wrote it, and no later
 *     transaction of another connection can have its frames overwritten by
 *     stale ones.
 *
 * Anything that does not match the pattern goes straight to the default VFS,
 * as before; a failed gathered write is reported by the call that made it.
 * The files on disk are SQLite's own format: any SQLite (the sqlite3 shell,
 * another KegFS process with or without this VFS) opens them.
 *
 * LOCKS: none.  A file object is used by one thread at a time (SQLite's
 * connection rule with SQLITE_OPEN_NOMUTEX); sq_vfs_pending is per thread.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keg/mem.h"
#include "meta_sqlite_vfs_i.h"
#define KEG_LOG_TAG "meta_sqlite"
#include "keg/log.h"

#define SQ_VFS_FRAME_HDR 24         /* bytes of a WAL frame header */
#define SQ_VFS_PAGE_MAX  65536      /* SQLite's largest page size */
/* The most one write of the default VFS may carry: os_unix.c masks each
 * pwrite's length with 0x1ffff (SQLite itself never writes more at once), so
 * a longer write would come back short, as SQLITE_FULL. */
#define SQ_VFS_WRITE_MAX 0x1ffff

struct sq_vfs_file {
    sqlite3_file   base;        /* methods: sq_vfs_io */
    sqlite3_file  *real;        /* the default VFS's file, in the same allocation */
    int            wal;         /* a WAL file: gathers frames */
    unsigned char *buf;         /* gathered bytes, from file offset at */
    size_t         len, cap;
    sqlite3_int64  at;
    sqlite3_int64  end;         /* where this file's last write ended; -1: unknown */
    int            half;        /* buf ends with a frame header whose page is to come */
    int            commit;      /* ...and that header is a commit frame's */
};

static sqlite3_vfs sq_vfs;
static sqlite3_vfs *sq_vfs_root;
static int sq_vfs_rc;
static pthread_once_t sq_vfs_once = PTHREAD_ONCE_INIT;
static _Thread_local struct sq_vfs_file *sq_vfs_pending;   /* this thread's gathered file */
static unsigned long long sq_vfs_nwrites, sq_vfs_nflushes;

#define REAL(p) (((struct sq_vfs_file *)(p))->real)

static uint32_t sq_vfs_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Writes what f gathered.  Returns SQLITE_OK or the default VFS's error
 * (the bytes are dropped either way: SQLite fails the transaction). */
static int sq_vfs_flush(struct sq_vfs_file *f)
{
    if (sq_vfs_pending == f)
        sq_vfs_pending = NULL;
    if (!f->len)
        return SQLITE_OK;
    int rc = f->real->pMethods->xWrite(f->real, f->buf, (int)f->len, f->at);
    __atomic_add_fetch(&sq_vfs_nflushes, 1, __ATOMIC_RELAXED);
    f->len = 0;
    f->half = 0;
    if (rc != SQLITE_OK)
        f->end = -1;
    return rc;
}

/* Appends n bytes written at off to what f gathered: 0, or -ENOMEM. */
static int sq_vfs_gather(struct sq_vfs_file *f, const void *data, int n, sqlite3_int64 off)
{
    if (f->len + (size_t)n > f->cap) {
        size_t cap = f->cap ? f->cap : 64u << 10;
        while (cap < f->len + (size_t)n)
            cap *= 2;
        unsigned char *nb = keg_realloc(f->buf, cap);
        if (!nb)
            return -ENOMEM;
        f->buf = nb;
        f->cap = cap;
    }
    if (!f->len)
        f->at = off;
    memcpy(f->buf + f->len, data, (size_t)n);
    f->len += (size_t)n;
    f->end = off + n;
    sq_vfs_pending = f;
    return 0;
}

static int sq_vfs_page_size(int n)
{
    return n >= 512 && n <= SQ_VFS_PAGE_MAX && (n & (n - 1)) == 0;
}

static int sq_vfs_write(sqlite3_file *p, const void *data, int n, sqlite3_int64 off)
{
    struct sq_vfs_file *f = (struct sq_vfs_file *)p;
    int rc;
    if (!f->wal)
        return f->real->pMethods->xWrite(f->real, data, n, off);
    __atomic_add_fetch(&sq_vfs_nwrites, 1, __ATOMIC_RELAXED);
    if (off == f->end && f->end >= 0) {
        if (n == SQ_VFS_FRAME_HDR && !f->half) {
            if (f->len + SQ_VFS_FRAME_HDR + SQ_VFS_PAGE_MAX > SQ_VFS_WRITE_MAX &&
                (rc = sq_vfs_flush(f)) != SQLITE_OK)
                return rc;
            if (sq_vfs_gather(f, data, n, off) == 0) {
                f->half = 1;
                f->commit = sq_vfs_be32((const unsigned char *)data + 4) != 0;
                return SQLITE_OK;
            }
        } else if (f->half && sq_vfs_page_size(n) && sq_vfs_gather(f, data, n, off) == 0) {
            f->half = 0;
            return f->commit ? sq_vfs_flush(f) : SQLITE_OK;
        }
        /* out of memory: written as it comes */
    }
    rc = sq_vfs_flush(f);
    if (rc != SQLITE_OK)
        return rc;
    rc = f->real->pMethods->xWrite(f->real, data, n, off);
    f->end = rc == SQLITE_OK ? off + n : -1;
    return rc;
}

static int sq_vfs_close(sqlite3_file *p)
{
    struct sq_vfs_file *f = (struct sq_vfs_file *)p;
    if (f->len)     /* frames of a transaction that never committed */
        KEG_DEBUG("closing a WAL file with %zu uncommitted bytes gathered; dropped", f->len);
    if (sq_vfs_pending == f)
        sq_vfs_pending = NULL;
    int rc = f->real->pMethods->xClose(f->real);
    keg_free(f->buf);
    f->buf = NULL;
    f->len = f->cap = 0;
    return rc;
}

static int sq_vfs_read(sqlite3_file *p, void *buf, int n, sqlite3_int64 off)
{
    int rc = sq_vfs_flush((struct sq_vfs_file *)p);
    return rc != SQLITE_OK ? rc : REAL(p)->pMethods->xRead(REAL(p), buf, n, off);
}

static int sq_vfs_truncate(sqlite3_file *p, sqlite3_int64 size)
{
    struct sq_vfs_file *f = (struct sq_vfs_file *)p;
    int rc = sq_vfs_flush(f);
    f->end = -1;
    return rc != SQLITE_OK ? rc : f->real->pMethods->xTruncate(f->real, size);
}

static int sq_vfs_sync(sqlite3_file *p, int flags)
{
    int rc = sq_vfs_flush((struct sq_vfs_file *)p);
    return rc != SQLITE_OK ? rc : REAL(p)->pMethods->xSync(REAL(p), flags);
}

static int sq_vfs_size(sqlite3_file *p, sqlite3_int64 *size)
{
    int rc = sq_vfs_flush((struct sq_vfs_file *)p);
    return rc != SQLITE_OK ? rc : REAL(p)->pMethods->xFileSize(REAL(p), size);
}

static int sq_vfs_fcntl(sqlite3_file *p, int op, void *arg)
{
    int rc = sq_vfs_flush((struct sq_vfs_file *)p);
    return rc != SQLITE_OK ? rc : REAL(p)->pMethods->xFileControl(REAL(p), op, arg);
}

static int sq_vfs_lock(sqlite3_file *p, int l)
{
    return REAL(p)->pMethods->xLock(REAL(p), l);
}

static int sq_vfs_unlock(sqlite3_file *p, int l)
{
    return REAL(p)->pMethods->xUnlock(REAL(p), l);
}

static int sq_vfs_reserved(sqlite3_file *p, int *out)
{
    return REAL(p)->pMethods->xCheckReservedLock(REAL(p), out);
}

static int sq_vfs_sector(sqlite3_file *p)
{
    return REAL(p)->pMethods->xSectorSize(REAL(p));
}

static int sq_vfs_devchar(sqlite3_file *p)
{
    return REAL(p)->pMethods->xDeviceCharacteristics(REAL(p));
}

/* The shared-memory calls come on the database file; what this thread
 * gathered on its WAL file is written before any WAL lock changes. */
static int sq_vfs_shm_lock(sqlite3_file *p, int ofst, int n, int flags)
{
    if (sq_vfs_pending) {
        int rc = sq_vfs_flush(sq_vfs_pending);
        if (rc != SQLITE_OK)
            KEG_WARN("writing uncommitted WAL frames failed (sqlite3 code %d); they are not needed",
                     rc);
    }
    return REAL(p)->pMethods->xShmLock(REAL(p), ofst, n, flags);
}

static int sq_vfs_shm_map(sqlite3_file *p, int pg, int size, int extend, void volatile **out)
{
    return REAL(p)->pMethods->xShmMap(REAL(p), pg, size, extend, out);
}

static void sq_vfs_shm_barrier(sqlite3_file *p)
{
    REAL(p)->pMethods->xShmBarrier(REAL(p));
}

static int sq_vfs_shm_unmap(sqlite3_file *p, int del)
{
    return REAL(p)->pMethods->xShmUnmap(REAL(p), del);
}

static int sq_vfs_fetch(sqlite3_file *p, sqlite3_int64 off, int n, void **out)
{
    return REAL(p)->pMethods->xFetch(REAL(p), off, n, out);
}

static int sq_vfs_unfetch(sqlite3_file *p, sqlite3_int64 off, void *page)
{
    return REAL(p)->pMethods->xUnfetch(REAL(p), off, page);
}

static const sqlite3_io_methods sq_vfs_io = {
    .iVersion = 3,
    .xClose = sq_vfs_close,
    .xRead = sq_vfs_read,
    .xWrite = sq_vfs_write,
    .xTruncate = sq_vfs_truncate,
    .xSync = sq_vfs_sync,
    .xFileSize = sq_vfs_size,
    .xLock = sq_vfs_lock,
    .xUnlock = sq_vfs_unlock,
    .xCheckReservedLock = sq_vfs_reserved,
    .xFileControl = sq_vfs_fcntl,
    .xSectorSize = sq_vfs_sector,
    .xDeviceCharacteristics = sq_vfs_devchar,
    .xShmMap = sq_vfs_shm_map,
    .xShmLock = sq_vfs_shm_lock,
    .xShmBarrier = sq_vfs_shm_barrier,
    .xShmUnmap = sq_vfs_shm_unmap,
    .xFetch = sq_vfs_fetch,
    .xUnfetch = sq_vfs_unfetch,
};

static int sq_vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *p, int flags,
                       int *out_flags)
{
    struct sq_vfs_file *f = (struct sq_vfs_file *)p;
    (void)vfs;
    memset(f, 0, sizeof(*f));
    f->real = (sqlite3_file *)(f + 1);
    int rc = sq_vfs_root->xOpen(sq_vfs_root, name, f->real, flags, out_flags);
    /* SQLite closes a file whose xOpen left methods set, even on failure */
    if (!f->real->pMethods)
        return rc;
    /* every method is forwarded: the default VFS's files are version 3 */
    if (f->real->pMethods->iVersion < 3) {
        f->real->pMethods->xClose(f->real);
        return SQLITE_CANTOPEN;
    }
    f->wal = (flags & SQLITE_OPEN_WAL) != 0;
    f->end = f->wal ? 0 : -1;
    p->pMethods = &sq_vfs_io;
    return rc;
}

/* The VFS's own methods are the default VFS's, called with that VFS. */
#define ROOT sq_vfs_root
static int sq_vfs_delete(sqlite3_vfs *v, const char *name, int sync)
{
    (void)v;
    return ROOT->xDelete(ROOT, name, sync);
}

static int sq_vfs_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
    (void)v;
    return ROOT->xAccess(ROOT, name, flags, out);
}

static int sq_vfs_fullpath(sqlite3_vfs *v, const char *name, int n, char *out)
{
    (void)v;
    return ROOT->xFullPathname(ROOT, name, n, out);
}

static void *sq_vfs_dlopen(sqlite3_vfs *v, const char *name)
{
    (void)v;
    return ROOT->xDlOpen(ROOT, name);
}

static void sq_vfs_dlerror(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    ROOT->xDlError(ROOT, n, out);
}

static void (*sq_vfs_dlsym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
    (void)v;
    return ROOT->xDlSym(ROOT, h, sym);
}

static void sq_vfs_dlclose(sqlite3_vfs *v, void *h)
{
    (void)v;
    ROOT->xDlClose(ROOT, h);
}

static int sq_vfs_random(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return ROOT->xRandomness(ROOT, n, out);
}

static int sq_vfs_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return ROOT->xSleep(ROOT, us);
}

static int sq_vfs_time(sqlite3_vfs *v, double *out)
{
    (void)v;
    return ROOT->xCurrentTime(ROOT, out);
}

static int sq_vfs_lasterr(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return ROOT->xGetLastError ? ROOT->xGetLastError(ROOT, n, out) : 0;
}

static int sq_vfs_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    (void)v;
    return ROOT->xCurrentTimeInt64(ROOT, out);
}
#undef ROOT

static void sq_vfs_init(void)
{
    const char *env = getenv("KEGFS_SQLITE_VFS");
    if (env && strcmp(env, "default") == 0) {
        KEG_INFO("KEGFS_SQLITE_VFS=default: SQLite's default VFS, WAL frames not gathered");
        sq_vfs_rc = -ENOENT;
        return;
    }
    sq_vfs_root = sqlite3_vfs_find(NULL);
    if (!sq_vfs_root) {
        sq_vfs_rc = -EIO;
        return;
    }
    if (sq_vfs_root->iVersion < 2) {
        KEG_WARN("SQLite's default VFS is too old for %s; using it as it is", SQ_VFS_NAME);
        sq_vfs_rc = -EIO;
        return;
    }
    sq_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(struct sq_vfs_file) + sq_vfs_root->szOsFile,
        .mxPathname = sq_vfs_root->mxPathname,
        .zName = SQ_VFS_NAME,
        .xOpen = sq_vfs_open,
        .xDelete = sq_vfs_delete,
        .xAccess = sq_vfs_access,
        .xFullPathname = sq_vfs_fullpath,
        .xDlOpen = sq_vfs_dlopen,
        .xDlError = sq_vfs_dlerror,
        .xDlSym = sq_vfs_dlsym,
        .xDlClose = sq_vfs_dlclose,
        .xRandomness = sq_vfs_random,
        .xSleep = sq_vfs_sleep,
        .xCurrentTime = sq_vfs_time,
        .xGetLastError = sq_vfs_lasterr,
        .xCurrentTimeInt64 = sq_vfs_time64,
    };
    int rc = sqlite3_vfs_register(&sq_vfs, 0);
    if (rc != SQLITE_OK) {
        KEG_WARN("cannot register the %s VFS (%s); using SQLite's default", SQ_VFS_NAME,
                 sqlite3_errstr(rc));
        sq_vfs_rc = rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
    }
}

const char *sq_vfs_name(void)
{
    pthread_once(&sq_vfs_once, sq_vfs_init);
    return sq_vfs_rc ? NULL : SQ_VFS_NAME;
}

void sq_vfs_stats(struct sq_vfs_stats *out)
{
    out->wal_writes = __atomic_load_n(&sq_vfs_nwrites, __ATOMIC_RELAXED);
    out->wal_flushes = __atomic_load_n(&sq_vfs_nflushes, __ATOMIC_RELAXED);
}
