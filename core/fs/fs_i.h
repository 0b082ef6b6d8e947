/* fs_i.h -- private structures and cross-file functions of core/fs.
 *
 * DESIGN
 * core/fs is split by concern:
 *   fs.c     volume open/close, id allocation, background workers (heartbeat,
 *            stale-session cleanup, deleter), statfs, accessors
 *   inode.c  the in-memory table of inodes that have open handles here, the
 *            per-inode chunk-layout cache and the "last seen" table for keep_cache
 *   layout.c visible segments of a chunk from its slice list (pure)
 *   file.c   open/create/release, write buffer + commit, fallocate, copy_range,
 *            lseek, fsync, keg_fs_chunks
 *   read.c   read path and the decoded-block LRU cache (single-flight),
 *            sequential read-ahead and parallel block fetches
 *   pool.c   small thread pools with bounded queues (uploads, fetches)
 *   compact.c background compaction of fragmented chunks
 *   gc.c     kegfs gc / fsck / warmup (keg/admin.h)
 *   ns.c     namespace ops and the one ownership/permission function
 *   dir.c    readdir streaming
 *   lock.c   flock / POSIX locks
 *   xattr.c  extended attributes (with the security.capability negative cache)
 *
 * LOCK ORDER (outer first): fs->itab_mu is never held while taking an
 * inode's mu (inodes are found and referenced under itab_mu, which is then
 * dropped).  An inode's mu may be held while calling the engine and the
 * object store, and while taking fs->id_mu, fs->bg_mu, fs->up_mu,
 * fs->cmp_mu, a pool's mu or the block cache's mutex (all leaf locks: none of
 * them is held while taking another lock, and pool threads never take an
 * inode's mu, so a writer may wait for uploads while holding its inode).
 */
#ifndef KEG_FS_I_H
#define KEG_FS_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "keg/fs.h"

/*----------------------------------------------------------------------------
 * Thread pools (pool.c)
 *--------------------------------------------------------------------------*/

#define FS_POOL_MAX_THREADS 16

/* A job: embed as the FIRST member of the submitter's struct.  fn runs on a
 * pool thread (or inline) and must free the job. */
struct fs_job {
    struct fs_job *next;
    void (*fn)(struct fs_job *j);
};

struct fs_pool {
    pthread_mutex_t mu;         /* protects everything below */
    pthread_cond_t  cv;         /* a job was queued, or stopping */
    pthread_cond_t  room_cv;    /* a job left the queue */
    const char     *name;
    struct fs_job  *head, *tail;
    unsigned        queued, running, max_queue;
    unsigned        nthreads;
    int             stopping;
    pthread_t       thr[FS_POOL_MAX_THREADS];
};

/* Start nthreads threads (0: every job runs inline).  Returns 0 or -errno. */
int  fs_pool_start(struct fs_pool *p, const char *name, unsigned nthreads, unsigned max_queue);
/* Run what is queued, join the threads; later submits run inline. */
void fs_pool_stop(struct fs_pool *p);
void fs_pool_destroy(struct fs_pool *p);
/* Queue j.  wait != 0: wait for room (or run inline without threads), always
 * returns 0.  wait == 0: -EAGAIN when full or without threads (j not taken).
 * TAKES: j when 0 is returned. */
int  fs_pool_submit(struct fs_pool *p, struct fs_job *j, int wait);
unsigned fs_pool_queued(struct fs_pool *p);

/*----------------------------------------------------------------------------
 * Layout (layout.c)
 *--------------------------------------------------------------------------*/

/* One visible segment of a chunk: chunk bytes [pos, pos+len) come from slice
 * `id` (of total size `size`) starting at slice offset `soff`; id == 0 is a
 * hole (reads as zeros). */
struct fs_seg {
    uint32_t pos;
    uint32_t len;
    uint64_t id;
    uint32_t size;
    uint32_t soff;
};

/* The visible segments of chunk range [from, to) given the chunk's slice list
 * (oldest first; later slices shadow earlier ones).  The result covers
 * [from, to) exactly, in increasing position, adjacent holes merged, adjacent
 * pieces of one slice merged when contiguous in the slice.
 * OWNERSHIP: caller frees *out with keg_free() (NULL when from == to).
 * Returns 0 or -ENOMEM (*out = NULL, *nout = 0). */
int fs_layout(const struct keg_slice *sl, size_t n, uint32_t from, uint32_t to,
              struct fs_seg **out, size_t *nout);

/*----------------------------------------------------------------------------
 * Open inodes (inode.c)
 *--------------------------------------------------------------------------*/

/* The cached layout of one chunk (whole chunk, [0, KEG_CHUNK_SIZE)). */
struct fs_chunk {
    struct fs_chunk *next;      /* MRU first */
    uint32_t         indx;
    size_t           nseg;
    struct fs_seg   *seg;
};

/* One block of a buffered slice: bytes [i*bs, i*bs + fill) of the slice. */
struct fs_wblock {
    uint8_t *p;                 /* NULL once handed to an upload (or before first write) */
    uint32_t cap;               /* allocated bytes of p (grows up to bs) */
    uint32_t big;               /* p is a whole-block buffer (fs_bigbuf_get) */
};

/* A slice being written: chunk bytes [pos, pos+len) of chunk indx, all written. */
struct fs_wslice {
    struct fs_wslice *next;     /* write order */
    uint64_t          id;
    uint32_t          indx;
    uint32_t          pos;
    uint32_t          len;
    uint32_t          nup;      /* blocks [0, nup) are uploaded or uploading (immutable) */
    uint32_t          nblk;     /* entries in blk (KEG_CHUNK_SIZE / bs) */
    struct fs_wblock *blk;
};

/* An inode with open handles (or a temporary reference) in this process.
 *
 * States: referenced (refs > 0) -> free (refs == 0, removed from the table).
 * Invariants:
 *  - refs counts handles (nopen of them) plus temporary references;
 *  - a writer (wfirst != NULL) exists only while refs > 0 (release commits);
 *  - chunks holds layouts of committed data only: it is dropped on every
 *    local commit/truncate/copy and on every open (close-to-open). */
struct fs_inode {
    struct fs_inode *hnext;     /* protected by fs->itab_mu */
    struct fs_inode *anext, *aprev;     /* fs->iall list; protected by fs->itab_mu */
    uint64_t         ino;       /* immutable */
    uint32_t         refs;      /* protected by fs->itab_mu */

    pthread_mutex_t  mu;        /* protects everything below */
    uint32_t         nopen;     /* open handles */
    int              unlinked;  /* lost its last link while open here: purge at last release */
    int              plocked;   /* a POSIX lock was set through this mount */
    int              attr_valid;
    uint32_t         mode;      /* as last seen (keg_fs_kill_priv), 0: not known */
    uint64_t         size;      /* committed size as last seen */
    int64_t          mtime;     /* committed mtime as last seen */
    uint32_t         mtimensec;
    uint32_t         nchunks;
    struct fs_chunk *chunks;

    /* writer */
    struct fs_wslice *wfirst, *wlast;
    uint32_t          nws;      /* buffered slices */
    uint64_t          wend;     /* highest buffered end (file offset), 0: none;
                                 * O_APPEND slices (indx KEG_INDX_APPEND, always
                                 * after the others) do not count */
    uint64_t          wappend;  /* bytes in buffered O_APPEND slices */
    uint64_t          wakoff;   /* the kernel's offset of the first of them */
    uint64_t          wgen;     /* bumped when buffered writes are dropped (committed
                                 * or discarded): getattr re-reads a racing answer */
    int64_t           wtime_ns; /* time of the last buffered write */
    int64_t           wcommit_ns; /* monotonic time of the last commit with data */
    uint64_t          wbytes;   /* bytes allocated for buffers (not those in upload) */
    int               werr;     /* deferred write error (reported by flush/fsync) */

    /* fsync: slices committed here since the last fsync, whose blocks it
     * makes durable (keg_obj_sync_keys) instead of syncing the whole store;
     * sync_mu (taken before mu, held across the sync) makes a second fsync
     * wait for the one that took the list */
    pthread_mutex_t   sync_mu;
    struct keg_del_slice *usync;
    uint32_t          nusync, cusync;
    int               usync_all; /* unknown blocks (list overflow, shared slices,
                                  * failed commit or sync): sync the whole store */

    /* upload pipeline: protected by fs->up_mu (NOT mu) */
    uint32_t          up_pending; /* uploads of this inode queued or running */
    int               up_err;     /* first failed upload since the last wait */
};


/* Find or create the entry of ino and take a reference.
 * OWNERSHIP: caller drops it with fs_inode_put().  NULL on ENOMEM. */
struct fs_inode *fs_inode_get(struct keg_fs *fs, uint64_t ino);
/* Take a reference if ino is in the table, else NULL. */
struct fs_inode *fs_inode_find(struct keg_fs *fs, uint64_t ino);
/* Drop a reference; the last one frees the entry.  LOCKS: not with ip->mu. */
void fs_inode_put(struct keg_fs *fs, struct fs_inode *ip);
/* Snapshot of the referenced inodes (each with a new reference).
 * OWNERSHIP: caller puts each and keg_free()s *out. */
int fs_inode_all(struct keg_fs *fs, struct fs_inode ***out, size_t *n);
/* The engine's open-inode hook (keg_meta_open_inodes_fn, arg = fs): the
 * numbers of the inodes in the table (open, being opened or briefly referenced). */
uint32_t fs_inode_list(void *arg, uint64_t *inos, uint32_t max);
/* Drop the cached chunk layouts.  LOCKS: ip->mu held. */
void fs_inode_drop_chunks(struct fs_inode *ip);
/* The cached layout of chunk indx, loaded from the engine on a miss.
 * The pointer is valid while ip->mu is held.  LOCKS: ip->mu held. */
int fs_inode_chunk(struct keg_fs *fs, struct fs_inode *ip, uint32_t indx, struct fs_chunk **out);
/* Record committed attributes seen for ip (size, mtime); a change drops the
 * chunk cache.  LOCKS: ip->mu held. */
void fs_inode_set_attr(struct fs_inode *ip, const struct keg_attr *a);
/* keep_cache bookkeeping: 1 if a was already seen unchanged; records a. */
int fs_seen_check(struct keg_fs *fs, const struct keg_attr *a);
void fs_seen_free(struct keg_fs *fs);
/* Token of ino's buffered-write state (fs_attr_token) and the fixup that
 * reports, by returning 1, that the state changed since the token was taken:
 * an engine answer read before a commit finished must not be merged with the
 * state after it (the size would go backwards).  The caller re-reads. */
uint64_t fs_attr_token(struct keg_fs *fs, uint64_t ino);
int  fs_attr_fixup_token(struct keg_fs *fs, struct keg_attr *a, uint64_t token);
/* The engine's attributes of ino merged with this mount's buffered writes
 * (size, mtime), re-read while a commit races the merge (a bounded number of
 * times).  Never a size older than this mount's acknowledged writes.
 * Returns 0 or -errno. */
int  fs_getattr_merged(struct keg_fs *fs, uint64_t ino, struct keg_attr *out);
/* Merge buffered writes into a, the engine's answer of a change of a->ino
 * (setattr, link) produced after token = fs_attr_token() was taken; if a
 * commit finished meanwhile, replace a by fs_getattr_merged() (a failing
 * re-read leaves the engine's answer: the change itself succeeded). */
void fs_attr_merge(struct keg_fs *fs, struct keg_attr *a, uint64_t token);

/*----------------------------------------------------------------------------
 * Block cache (read.c)
 *--------------------------------------------------------------------------*/

struct fs_bcache;
/* A cache sharing budget bytes with fs's write buffers (fs->wbytes; fs NULL:
 * none): it holds at most budget - wbytes, never less than budget / 8, and at
 * most cap bytes when cap != 0 (read.c DESIGN); its fetches use fs's
 * whole-block buffers (fs_bigbuf_get).  BORROWS: fs for the cache's life.
 * OWNERSHIP: fs_bcache_free(). */
int  fs_bcache_new(uint64_t budget, uint64_t cap, struct keg_fs *fs, struct fs_bcache **out);
void fs_bcache_free(struct fs_bcache *bc);
/* Evict unreferenced blocks until the read share fits next to the write
 * buffers.  Call after wbytes grew; costs two atomic loads while
 * used + wbytes <= budget.  LOCKS: takes the cache's lock only to evict. */
void fs_bcache_trim(struct fs_bcache *bc);
/* Bytes of decoded blocks held by the cache now. */
uint64_t fs_bcache_used(struct fs_bcache *bc);

/* Copy slice bytes [sa, sb) of slice (id, size) to dst through the block
 * cache.  quiet: a missing block is returned as -ENOENT without a log line
 * (the caller's view of the chunk may be stale); otherwise it is logged and
 * -EIO.  Returns 0 or -errno. */
int fs_read_slice(struct keg_fs *fs, uint64_t id, uint32_t size, uint32_t sa, uint32_t sb,
                  uint8_t *dst, int quiet);

/*----------------------------------------------------------------------------
 * Compaction (compact.c)
 *--------------------------------------------------------------------------*/

#define FS_COMPACT_THRESHOLD 20     /* slices in a chunk that trigger compaction */

struct fs_cmp_item;
/* Queue chunk indx of ino for compaction (deduplicated; dropped when the
 * queue is full or no worker runs).  LOCKS: takes fs->cmp_mu (leaf). */
void fs_compact_queue(struct keg_fs *fs, uint64_t ino, uint32_t indx);
/* The same from a commit that left nslices slices in the chunk: nothing
 * happens while the chunk is parked (compact.c: not worth merging before a
 * slice count above nslices).  LOCKS: takes fs->cmp_mu (leaf). */
void fs_compact_queue_n(struct keg_fs *fs, uint64_t ino, uint32_t indx, uint32_t nslices);
/* Compact chunk indx of ino now, in the caller, whatever it costs (the
 * background worker applies compact.c's policy first).  Returns 0 (compacted,
 * or nothing to do), -EAGAIN (the chunk changed meanwhile) or -errno. */
int  fs_compact_chunk(struct keg_fs *fs, uint64_t ino, uint32_t indx);
/* Wait until the compaction queue is empty and idle (tests, unmount), at most
 * timeout_ms.  Returns 0 or -ETIMEDOUT. */
int  fs_compact_wait_idle(struct keg_fs *fs, unsigned timeout_ms);
int  fs_compact_start(struct keg_fs *fs);
void fs_compact_stop(struct keg_fs *fs);

/*----------------------------------------------------------------------------
 * The volume
 *--------------------------------------------------------------------------*/

#define FS_ITAB_BUCKETS 4096
#define FS_SEEN_BUCKETS 4096
#define FS_SEEN_MAX     100000

struct fs_seen {
    struct fs_seen *next;
    uint64_t        ino;
    uint64_t        size;
    int64_t         mtime;
    uint32_t        mtimensec;
};

struct fs_waiter;

/* One extended attribute of a removed open directory (dir.c). */
struct fs_oxattr {
    struct fs_oxattr *next;
    size_t            vlen;     /* value bytes, after the name's NUL */
    char              data[];   /* name, NUL, value */
};

/* A directory with open handles here (dir.c). */
#define FS_ODIR_BUCKETS 64
struct fs_odir {
    struct fs_odir   *next;     /* protected by fs->odir_mu, as all fields */
    uint32_t          nopen;    /* open handles */
    struct keg_attr   a;        /* attributes as last seen here */
    struct fs_oxattr *xa;       /* the xattrs once the engine's record is gone */
    size_t            xbytes;   /* names and values in xa */
};

/* One slot of the directory-attribute cache (ns.c). */
#define FS_PATTR_SLOTS 64
struct fs_pattr {
    uint64_t        ino;        /* 0: empty */
    uint64_t        gen;        /* bumped by every change of ino through this mount */
    uint64_t        epoch;      /* fs->pa_epoch when installed */
    uint32_t        busy;       /* changes of ino in flight */
    int             valid;
    int64_t         at_ns;      /* keg_mono_ns() when installed */
    struct keg_attr a;
};

struct keg_fs {
    struct keg_meta  *meta;
    struct keg_obj   *obj;
    struct keg_format fmt;
    /* Quotas can be raised while mounted (kegfs format --force, CSI expand):
     * statfs re-reads them at most every FS_QUOTA_REFRESH_NS.  Accessed with
     * __atomic builtins (no lock). */
    uint64_t          quota_bytes;      /* 0: unlimited */
    uint64_t          quota_inodes;     /* 0: unlimited */
    int64_t           quota_read_ns;    /* keg_mono_ns() of the last read */
    int               codec;        /* codec for new blocks */
    uint32_t          bs;           /* block size */
    struct keg_block_id blk_id;     /* the volume's part of every block identity (vol, v1_ok) */
    int               read_only;
    int               acl;          /* POSIX ACLs enforced by the kernel (keg_fs_set_acl) */
    int               has_session;
    int               keep_session; /* keg_fs_free does not end it (handover) */
    uint64_t          sid;
    uint64_t          buffer_size;
    unsigned          heartbeat_sec;
    unsigned          session_timeout;
    unsigned          missing_wait_ms;  /* conf->missing_block_wait_ms */

    /* attributes of directories as the last namespace change here left them,
     * for the kernel's getattr that follows it (ns.c) */
    pthread_mutex_t   pa_mu;        /* protects the fields below */
    uint64_t          pa_gen;       /* last generation handed out */
    uint64_t          pa_epoch;     /* bumped by every rename: invalidates all */
    uint32_t          pa_global;    /* changes in flight that invalidate every entry
                                       (renames; changes whose slot was busy) */
    struct fs_pattr   pa[FS_PATTR_SLOTS];

    /* directories open here, with their last attributes: what fstat of an
     * open directory reports once it was removed (dir.c) */
    pthread_mutex_t   odir_mu;      /* protects odir (a leaf lock) */
    struct fs_odir   *odir[FS_ODIR_BUCKETS];

    pthread_mutex_t   id_mu;        /* protects the id batches */
    uint64_t          ino_next, ino_end;
    uint64_t          sl_next, sl_end;

    pthread_mutex_t   itab_mu;      /* protects itab, iall, hnext, anext, refs, seen */
    struct fs_inode  *itab[FS_ITAB_BUCKETS];
    struct fs_inode  *iall;         /* every inode of itab, for walks that would visit each bucket */
    struct fs_seen   *seen[FS_SEEN_BUCKETS];
    size_t            nseen;

    _Atomic uint64_t  wbytes;       /* buffered write bytes, all inodes */
    _Atomic uint64_t  usync_lost;   /* inodes freed with unsynced slices: the next
                                     * fsync syncs the whole store */
    struct fs_bcache *bc;

    pthread_mutex_t   bg_mu;        /* protects the fields below */
    pthread_cond_t    bg_cv;
    int               stopping;
    uint64_t         *purge;        /* inodes to purge (unlinked, not open here) */
    size_t            npurge, cpurge;
    struct fs_waiter *waiters;      /* blocking lock waits (lock.c) */
    int               abandon;      /* lock waits end with -ERESTART (atomic; lock.c) */
    keg_fs_unlock_fn *unlock_hook;  /* told of kept and finished unlocks (lock.c) */
    void             *unlock_hook_arg;
    pthread_mutex_t   unlock_mu;    /* protects unlocks; held across their engine calls */
    struct fs_unlock *unlocks;      /* unlocks the engine failed, retried (lock.c) */
    uint32_t          nunlocks;     /* their number (atomic: read without unlock_mu) */
    int               threads;      /* background threads running */
    pthread_t         hb_thr, del_thr;
    int64_t           hb_last_ns;   /* keg_mono_ns() of the last successful heartbeat or of
                                     * session_begin (atomic) */
    uint64_t          del_slices;   /* slices deleted by fs_drain_delq (atomic) */
    int64_t           del_last_kick; /* keg_mono_ns() of the last fs_kick_deleter since
                                     * the deleter's last round; 0: none */
    int64_t           del_by;       /* the earliest kick + hold of those kicks; 0: none */
    pthread_mutex_t   del_mu;       /* one drainer of purges and deletions at a time */

    /* upload pipeline (file.c) */
    struct fs_pool    up_pool;
    pthread_mutex_t   up_mu;        /* protects up_inflight and every inode's up_* */
    pthread_cond_t    up_cv;        /* an upload finished */
    uint32_t          up_inflight;  /* uploads queued or running, all inodes */

    /* whole-block buffers kept for reuse by writers, encoding and block
     * fetches (file.c fs_bigbuf_get, read.c bc_buf_take) */
    pthread_mutex_t   bigbuf_mu;    /* protects the two fields below */
    uint8_t          *bigbuf[4];
    unsigned          nbigbuf;
    size_t            bigbuf_size;  /* largest encoded block of bs bytes; 0 until known */

    /* block fetches: read-ahead and parallel reads (read.c) */
    struct fs_pool    fetch_pool;

    /* compaction (compact.c) */
    pthread_mutex_t   cmp_mu;       /* protects the fields below */
    pthread_cond_t    cmp_cv;
    struct fs_cmp_item *cmp_head;   /* queued chunks, FIFO */
    struct fs_cmp_item *cmp_cur;    /* the chunk being compacted, or NULL */
    unsigned          cmp_n;        /* queued + running */
    int               cmp_stopping;
    int               cmp_running;  /* worker thread exists */
    uint64_t          cmp_done;     /* chunks compacted (stats, tests) */
    uint64_t          cmp_again;    /* compactions abandoned because the chunk changed */
    uint64_t          cmp_deferred; /* chunks parked: not worth merging yet */
    uint64_t          cmp_bytes;    /* bytes written by compactions */
    struct fs_cmp_item *cmp_parked; /* chunks not worth merging yet, oldest first */
    unsigned          cmp_nparked;
    pthread_t         cmp_thr;

    /* the owner's cache invalidation hook (keg_fs_set_inval) */
    keg_fs_inval_fn  *inval_fn;
    void             *inval_arg;

    /* trash (trash.c): allocated on first use when the volume has trash_days */
    _Atomic(struct fs_trash *) trash;
};

/* fs.c */
/* *ts = now + ns on CLOCK_MONOTONIC (the clock of fs->bg_cv). */
void fs_deadline(struct timespec *ts, int64_t ns);
int  fs_alloc_ino(struct keg_fs *fs, uint64_t *ino);
int  fs_alloc_slice(struct keg_fs *fs, uint64_t *id);
/* Queue an unlinked inode for purging (or purge now without a session). */
void fs_queue_purge(struct keg_fs *fs, uint64_t ino);
/* Tell the deleter that the engine's deletion queue has new entries; it serves
 * a burst of kicks once they pause, and at the latest by the earliest kick
 * time + hold_ns among them: FS_DEL_HOLD_NS for removals (an `rm -rf` is
 * served in batches), FS_DEL_HOLD_CMP_NS for compaction (the writes that
 * caused it need the files of the slices it replaced again, from the spare
 * pools; with writeback, a block deleted before its upload delay ends is
 * never uploaded). */
#define FS_DEL_HOLD_NS     (1000LL * 1000000)
#define FS_DEL_HOLD_CMP_NS (200LL * 1000000)
void fs_kick_deleter(struct keg_fs *fs, int64_t hold_ns);
/* Handle an unlink/rename result: mark the inode or queue it for purging. */
void fs_handle_gone(struct keg_fs *fs, const struct keg_unlinked *gone);
/* Delete every block object of a slice.  Returns 0 or the first error. */
int  fs_delete_slice(struct keg_fs *fs, uint64_t id, uint32_t size);
/* Make the blocks of n slices durable in the object stack (keg_obj_sync_keys).
 * Returns 0 or -errno. */
int  fs_sync_slices(struct keg_fs *fs, const struct keg_del_slice *v, size_t n);
/* Drain the deletion queue once (up to max batches).  Returns entries done or -errno. */
int  fs_drain_delq(struct keg_fs *fs, int max_batches);
/* Purge queued inodes that are not open here. */
void fs_drain_purge(struct keg_fs *fs);

/* file.c */
/* Upload and commit the buffered data of ip.  LOCKS: ip->mu held. */
int  fs_commit_locked(struct keg_fs *fs, struct fs_inode *ip);
/* Commit ip's buffered data; returns the commit error or the deferred one
 * (which is then cleared) when report != 0.  LOCKS: takes ip->mu. */
int  fs_flush_inode(struct keg_fs *fs, struct fs_inode *ip, int report);
/* Drop buffered data without committing (waits for its uploads first).
 * LOCKS: ip->mu held. */
void fs_writer_drop(struct keg_fs *fs, struct fs_inode *ip, int delete_uploaded);
/* Encode and put one block of file data (compaction uses it too).  head:
 * raw is a writer's whole-block buffer, with room for the block header in
 * front of it (an uncompressed block is put without a copy; the room is
 * overwritten).  BORROWS: raw.  Returns 0 or -errno (logged). */
int  fs_put_block(struct keg_fs *fs, uint64_t id, uint32_t indx, uint8_t *raw, uint32_t blen,
                  int head);
/* Wait for ip's uploads; returns (and clears) the first upload error.
 * LOCKS: takes fs->up_mu; may be called with ip->mu held. */
int  fs_up_wait(struct keg_fs *fs, struct fs_inode *ip);
/* Whole-block buffers (fs->bigbuf_size bytes), reused instead of being
 * mapped, faulted in, zeroed and unmapped for every block (at most 4 idle).
 * OWNERSHIP: caller returns it with fs_bigbuf_put.  LOCKS: fs->bigbuf_mu. */
uint8_t *fs_bigbuf_get(struct keg_fs *fs);
void     fs_bigbuf_put(struct keg_fs *fs, uint8_t *p);
/* Frees the idle buffers (teardown). */
void     fs_bigbuf_drop(struct keg_fs *fs);

/* What a failed block put or get of the store returns to the application:
 * -EIO for an error the store's retries did not outlast (keg_obj_transient),
 * the error itself otherwise (-ENOSPC, -EACCES, ...). */
int  fs_io_error(int rc);

/* read.c */
ssize_t fs_read_range(struct keg_fs *fs, struct fs_inode *ip, uint64_t off, void *buf,
                      size_t size);
/* Start/stop the fetch pool. */
int  fs_fetch_start(struct keg_fs *fs);
void fs_fetch_stop(struct keg_fs *fs);

/* ns.c */
/* The ownership rules of chmod/chown/utimes that POSIX leaves to the file
 * system.  May clear S_ISGID in *mode.  Returns 0, -EPERM or -EACCES. */
int fs_check_setattr(const struct keg_ctx *c, const struct keg_attr *cur, unsigned set,
                     const struct keg_attr *in, uint32_t *mode);
/* A name from a caller of keg_fs_*: -ENOENT (empty), -ENAMETOOLONG, -EINVAL ('/'),
 * checked before any work is done (an inode number spent, the trash consulted). */
int fs_check_name(const char *name);
/* Directory-attribute cache (ns.c): every change of a directory's attributes
 * through this mount that does not go through ns.c's namespace ops is
 * bracketed by fs_pattr_begin/fs_pattr_end, so that no stale copy of them is
 * served.  LOCKS: both take fs->pa_mu. */
struct fs_pattr_tok {
    uint64_t ino, gen, epoch;
    int      tracked;       /* counted in the directory's slot */
    int      global;        /* counted in pa_global instead */
    int      ok;            /* overlapped nothing so far: may install its result */
};
void fs_pattr_begin(struct keg_fs *fs, uint64_t ino, struct fs_pattr_tok *t);
void fs_pattr_end(struct keg_fs *fs, const struct fs_pattr_tok *t, const struct keg_attr *a);

/* fs.c: -ENOSPC if need bytes exceed the volume's free space as statfs
 * reports it (capacity quota, and the file store's disk).  Returns 0 or -errno. */
int  fs_space_check(struct keg_fs *fs, uint64_t need);

/* dir.c: open directories.  An open directory removed by rmdir or replaced
 * by rename has no engine record left, but its descriptors live on (fstat,
 * fchmod, futimens ...) until the last close, as on a local file system: the
 * attributes last seen here stand in for the record, with nlink 0.
 * fs_odir_seen: a directory's fresh attributes (no-op unless open here).
 * fs_odir_dead: *out = those of ino if it is open here, else -ENOENT.
 * fs_odir_setattr: setattr of such a removed directory (in memory only). */
void fs_odir_seen(struct keg_fs *fs, const struct keg_attr *a);
int  fs_odir_dead(struct keg_fs *fs, uint64_t ino, struct keg_attr *out);
int  fs_odir_setattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, unsigned set,
                     const struct keg_attr *in, struct keg_attr *out);
void fs_odir_free(struct keg_fs *fs);
/* Extended attributes of such a removed directory.  Its xattrs are read
 * just before rmdir or a replacing rename through this mount removes it
 * while it is open here (fs_odir_snap_xattrs returns that directory's ino, 0
 * if none; fs_odir_snap_end drops them again unless it was removed), and kept
 * in memory, where the calls below read
 * and change them until the last close.  A directory removed by another
 * mounter starts with none.  Each returns -ENOENT unless ino is open here,
 * else what getxattr/listxattr/setxattr/removexattr return. */
uint64_t fs_odir_snap_xattrs(struct keg_fs *fs, uint64_t parent, const char *name);
void    fs_odir_snap_end(struct keg_fs *fs, uint64_t ino, int removed);
ssize_t fs_odir_getxattr(struct keg_fs *fs, uint64_t ino, const char *name, void *buf,
                         size_t size);
ssize_t fs_odir_listxattr(struct keg_fs *fs, uint64_t ino, char *buf, size_t size);
int     fs_odir_setxattr(struct keg_fs *fs, uint64_t ino, const char *name, const void *val,
                         size_t len, int flags);
int     fs_odir_removexattr(struct keg_fs *fs, uint64_t ino, const char *name);

/* lock.c */
void fs_waiters_wake_all(struct keg_fs *fs);
/* close(2) of one descriptor of fh by lock_owner: drops that owner's POSIX
 * locks on the inode (if any were set through this mount). */
void fs_locks_flush(struct keg_fs *fs, struct keg_fh *fh, uint64_t lock_owner);
/* Last close of fh (the open file description): drops its flock and the
 * byte-range locks still held by owners that set them through fh -- its
 * OFD locks (a POSIX owner's locks went at that owner's flush).  Frees the
 * owner list. */
void fs_locks_release(struct keg_fs *fs, struct keg_fh *fh);
/* Try the unlocks that failed again (the heartbeat thread, every second while
 * there are any). */
void fs_unlocks_retry(struct keg_fs *fs);
/* Forget the unlocks still failing (keg_fs_free: ending the session drops
 * every lock of the session). */
void fs_unlocks_free(struct keg_fs *fs);

/* trash.c (docs/internals/TRASH.md); only called when fs->fmt.trash_days > 0,
 * except start/stop/free, which do nothing without a trash. */
struct fs_trash;
#define FS_TRASH_PASS 1         /* not handled: do the plain unlink/rename */
/* unlink(2) of a regular file with one link: move it to the trash.
 * Returns 0 (moved), FS_TRASH_PASS or -errno. */
int  fs_trash_unlink(struct keg_fs *fs, uint64_t parent, const char *name);
/* rename(2): refuses moves into the trash (-EPERM); a replaced regular file
 * with one link goes to the trash first, then the rename is done here.
 * Returns 0 (done), FS_TRASH_PASS or -errno. */
int  fs_trash_rename(struct keg_fs *fs, uint64_t parent, const char *name, uint64_t newparent,
                     const char *newname, unsigned flags);
/* The expiry thread (with a session only); stop is idempotent. */
int  fs_trash_start(struct keg_fs *fs);
void fs_trash_stop(struct keg_fs *fs);
void fs_trash_free(struct keg_fs *fs);
/* Remove the hour directories that are past trash_days now.  *files = files
 * deleted.  Returns 0 or -errno. */
int  fs_trash_expire(struct keg_fs *fs, uint64_t *files);
/* Tests: the trash clock (seconds since the epoch); 0 = real time (or
 * $KEG_TRASH_NOW). */
void fs_trash_set_clock(struct keg_fs *fs, int64_t now);

/* handle */
struct keg_fh {
    struct fs_inode *ip;
    int              flags;         /* open(2) flags */
    int              flocked;       /* a flock is held under flock_owner */
    uint64_t         flock_owner;
    int              adopted;       /* reopened for a previous worker's handle */
    /* data was buffered through this handle since its last flush, commit or
     * fsync began: its release must commit it (file.c) */
    atomic_int       wrote;
    /* lock.c: owners that set byte-range locks through this handle and have
     * not closed it since (protected by ip->mu): the OFD locks of the open
     * file description, released at the last close */
    uint64_t        *lk_owners;
    uint32_t         nlk_owners, clk_owners;

    /* sequential read detection (read.c) */
    pthread_mutex_t  ra_mu;         /* protects the fields below */
    uint64_t         ra_next;       /* where the next sequential read starts */
    uint64_t         ra_upto;       /* read-ahead was issued up to here */
    uint32_t         ra_win;        /* window in blocks (0: not sequential) */
    uint64_t         ra_dropped;    /* cached blocks below here were dropped */
};
/* A steady sequential reader drops the cached blocks that lie wholly more
 * than this and one block behind the end of its reads (read.c). */
#define FS_DROP_BEHIND (8u << 20)

static inline uint32_t fs_block_len(uint32_t bs, uint32_t size, uint32_t i)
{
    uint64_t start = (uint64_t)i * bs;
    return (uint32_t)KEG_MIN((uint64_t)bs, size - start);
}

/* The identity of block indx (blen bytes) of slice id, for keg_block_*. */
static inline struct keg_block_id fs_block_id(const struct keg_fs *fs, uint64_t id,
                                              uint32_t indx, uint32_t blen)
{
    struct keg_block_id b = fs->blk_id;
    b.slice = id;
    b.indx = indx;
    b.blen = blen;
    return b;
}

/*----- POSIX ACLs (acl.c) -----*/
#define KEG_ACL_ACCESS  "system.posix_acl_access"
#define KEG_ACL_DEFAULT "system.posix_acl_default"
/* 1 for KEG_ACL_ACCESS, 2 for KEG_ACL_DEFAULT, else 0. */
int fs_acl_name(const char *name);
/* setxattr of an ACL name: validates, stores (an access ACL equivalent to mode
 * bits is removed instead), sets the mode bits from an access ACL.  Returns 0,
 * -EOPNOTSUPP (ACLs not enforced), -EINVAL, -EPERM (not owner or root),
 * -EACCES (default ACL on a non-directory), -errno. */
int fs_acl_set(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, const char *name,
               const void *val, size_t len, int flags);
/* After a mode change of ino to mode: rewrite its access ACL, if any.  Returns 0 or -errno. */
int fs_acl_chmod(struct keg_fs *fs, uint64_t ino, uint32_t mode);
/* ACLs a new node gets from its directory's default ACL. */
struct fs_acl_new {
    struct acl *access;         /* NULL: none; OWNERSHIP: fs_acl_new_free */
    struct acl *def;            /* directories: the default ACL; NULL: none */
    uint32_t    final_mode;     /* mode once access is stored */
};
/* Before creating a node of mode (type included) in parent: applies the umask,
 * or the parent's default ACL (*mode becomes the mode to create with).
 * OWNERSHIP: caller calls fs_acl_new_free(nw) (also on failure).  Returns 0 or -errno. */
int fs_acl_create_mode(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent,
                       uint32_t *mode, struct fs_acl_new *nw);
/* After the node ino was created: store nw's ACLs.  Returns 0 or -errno (logged). */
int fs_acl_create_finish(struct keg_fs *fs, uint64_t ino, const struct fs_acl_new *nw);
void fs_acl_new_free(struct fs_acl_new *nw);
/* getxattr through the negative cache of xattr.c (absence of
 * security.capability and of the ACLs is remembered briefly).  Returns the size or -errno. */
ssize_t fs_xattr_get_raw(struct keg_fs *fs, uint64_t ino, const char *name, void *buf,
                         size_t size);
/* A node ino was just created (with an access / default ACL or not): its
 * capability and missing ACLs are known absent, no engine call needed. */
void fs_xattr_new_inode(struct keg_fs *fs, uint64_t ino, int has_access, int has_default);
/* Taken before an engine call whose "no xattr" answers are to be cached
 * (xattr.c DESIGN). */
struct fs_xa_snap {
    uint64_t gen;
    uint32_t busy;
};
void fs_xattr_snap(struct fs_xa_snap *s);
/* The engine said, after snapshot s, whether ino has no xattr at all (none):
 * remember it briefly, unless an xattr change through this mount may have
 * overtaken it; otherwise forget an older "none". */
void fs_xattr_learn(const struct keg_fs *fs, const struct fs_xa_snap *s, uint64_t ino, int none);
/* The volume instance fs goes away: forget its cached absences.  LOCKS: takes the cache lock. */
void fs_xattr_forget_fs(const struct keg_fs *fs);

#endif
