/* fs.h -- POSIX file-system semantics over a metadata engine and an object store.
 *
 * DESIGN
 * core/fs is what the FUSE mounter (and the CLI tools) call.  It has no FUSE
 * types: requests carry a struct keg_ctx (caller uid/gid/groups/pid) and inode
 * numbers (the root is KEG_ROOT_INO == FUSE_ROOT_ID).  Namespace ops are thin
 * calls into the engine (one engine op each); the data path is here:
 *
 *   write -> per-inode write buffer (slices of a chunk, cut into blocks)
 *         -> blocks encoded (CRC32C, codec) and put to the object store
 *         -> slice references committed to the engine on flush/fsync/release
 *   read  -> chunk slice list (engine) -> visible segments -> blocks
 *            (object store, CRC-verified) -> bytes; holes read as zeros
 *
 * Durability (docs/durability.md): when close() (flush) returns, the data is in
 * the object store and the slices are committed; fsync() additionally makes
 * both durable (object store sync + engine sync).
 *
 * An inode that loses its last link while open here stays readable and
 * writable through its open handles; it is purged at the last release.
 *
 * Every function returns 0 (or a count) or -errno, with the errno values
 * that the corresponding system call documents.
 */
#ifndef KEG_FS_H
#define KEG_FS_H

#include <stdint.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "keg/keg.h"
#include "keg/meta.h"
#include "keg/obj.h"

struct keg_fs;
struct keg_stack_conf;
struct keg_fh;      /* an open file */
struct keg_dh;      /* an open directory */

struct keg_fs_conf {
    const char *meta_url;          /* BORROWED during keg_fs_new */
    const char *mountpoint;        /* for the session record, may be NULL */
    int         read_only;
    int         no_session;        /* tools: no session, no background threads */
    uint64_t    buffer_size;       /* memory budget in bytes shared by the decoded-block
                                    * read cache and the write buffers; writers first
                                    * (default 300 MiB) */
    uint64_t    block_cache_size;  /* optional cap of the read cache's share of
                                    * buffer_size (0: none, the default) */
    unsigned    heartbeat_sec;     /* session heartbeat period (default 10) */
    unsigned    session_timeout;   /* a session older than this is stale (default 60) */
    /* Object-store credentials overriding the stored ones (e.g. from the
     * AWS_* environment).  NULL: use the volume's settings. */
    const char *access_key;
    const char *secret_key;
    const char *session_token;
    /* Object-stack options (SSD cache directory, writeback; keg/stack.h), or
     * NULL for none.  BORROWED during keg_fs_new.  The three credentials
     * above take precedence over its own when set. */
    const struct keg_stack_conf *stack;
    /* How long a read waits, re-reading the chunk's slice list with backoff,
     * for a block that is referenced but not in the object store yet (it may
     * be staged by a writeback mounter elsewhere).  0: fail at once with EIO
     * after one reload of the layout. */
    unsigned    missing_block_wait_ms;
    /* A session to take over instead of registering a new one (0: none): the one
     * of the mounter's previous worker, which crashed or handed over, so that the
     * locks and the unlinked-but-open files of the files still open in the kernel
     * survive.  When it no longer exists, a new one is registered (logged). */
    uint64_t    resume_session;
};

/* Open the volume at conf->meta_url: engine, format, object stack, session,
 * background workers.  -ENOENT if the volume is not formatted.
 * OWNERSHIP: close with keg_fs_free(), which flushes every open file, ends
 * the session and closes the stack. */
int  keg_fs_new(const struct keg_fs_conf *conf, struct keg_fs **out);
void keg_fs_free(struct keg_fs *fs);
/* The session id (0: none). */
uint64_t keg_fs_session(struct keg_fs *fs);
/* Make keg_fs_free leave the session registered, for the next worker to take
 * over (keg_fs_conf.resume_session): a handover. */
void keg_fs_keep_session(struct keg_fs *fs);
/* Commit every open file and carry out the pending purges (unlinked files no
 * longer open) and block deletions now, instead of within the next second.
 * The mounter calls it at unmount before draining the writeback, so that the
 * blocks of files deleted just before are dropped, not uploaded. */
void keg_fs_settle(struct keg_fs *fs);

const struct keg_format *keg_fs_format(struct keg_fs *fs);
/* POSIX ACLs (off by default): on only where something enforces them -- the
 * mounter turns them on when the kernel grants FUSE's POSIX ACL mode, which then
 * checks permissions against the ACLs.  On: setting system.posix_acl_* keeps the
 * mode bits in sync, chmod updates the ACL, new nodes inherit default ACLs and
 * the umask (keg_ctx.umask) is applied here unless a default ACL replaces it.
 * Off: setting an ACL fails with EOPNOTSUPP.  keg_ctx.umask is applied to new
 * nodes either way (a caller that applied it already loses nothing). */
void keg_fs_set_acl(struct keg_fs *fs, int on);
struct keg_meta *keg_fs_meta(struct keg_fs *fs);
struct keg_obj  *keg_fs_obj(struct keg_fs *fs);

/* setattr: KEG_SET_* from meta.h plus: */
#define KEG_FS_SET_SIZE (1u << 16)     /* truncate to in->size */

/*--- namespace ---*/
int keg_fs_lookup(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                  struct keg_attr *out);
/* fh may be NULL; with a file open for writing the size includes buffered data. */
int keg_fs_getattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, struct keg_attr *out);
/* keg_fs_getattr for the kernel's getattr: a directory's attributes may come,
 * without asking the engine, from the result of this mount's last change of
 * it (create, link, unlink, rmdir, rename in it) if that is at most
 * max_age_ns old (at most 1 s is used; the mounter passes its attribute-cache
 * timeout, 0 = never) and nothing changed the directory through this mount
 * since.  Other mounters' changes show after max_age_ns at the latest, as with
 * the kernel's attribute cache. */
int keg_fs_getattr_cached(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino,
                          int64_t max_age_ns, struct keg_attr *out);
int keg_fs_setattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, unsigned set,
                   const struct keg_attr *in, struct keg_attr *out);
/* mode includes the S_IFMT type (regular, fifo, socket, char, block); c->umask
 * is applied here, or the directory's default ACL (keg_fs_set_acl).  */
int keg_fs_mknod(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                 uint32_t mode, uint64_t rdev, struct keg_attr *out);
int keg_fs_mkdir(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                 uint32_t mode, struct keg_attr *out);
int keg_fs_symlink(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                   const char *target, struct keg_attr *out);
int keg_fs_link(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, uint64_t newparent,
                const char *newname, struct keg_attr *out);
int keg_fs_unlink(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name);
int keg_fs_rmdir(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name);
/* flags: KEG_RENAME_NOREPLACE, KEG_RENAME_EXCHANGE (meta.h) and
 * KEG_FS_RENAME_WHITEOUT (the old name becomes a whiteout, not atomically);
 * all have the values of Linux's RENAME_*.  Others: -EINVAL. */
#define KEG_FS_RENAME_WHITEOUT (1u << 2)
int keg_fs_rename(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                  uint64_t newparent, const char *newname, unsigned flags);
/* Copies the target into buf (NUL-terminated if it fits); returns its length. */
ssize_t keg_fs_readlink(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, char *buf,
                        size_t size);

/*--- files ---*/
/* flags: open(2) flags.  *keep_cache = 1 when the file did not change since
 * this mount last saw it (the kernel may keep its page cache).  O_TRUNC is
 * applied here. */
int keg_fs_open(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, int flags,
                struct keg_fh **fh, int *keep_cache);
int keg_fs_create(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                  uint32_t mode, int flags, struct keg_attr *out, struct keg_fh **fh);
uint64_t keg_fh_ino(const struct keg_fh *fh);
ssize_t keg_fs_read(struct keg_fs *fs, struct keg_fh *fh, uint64_t off, void *buf, size_t size);
/* keg_fs_read without the copy, for the common case: when [off, off + size)
 * lies inside one block of one slice, below the file's size, and the file
 * has no buffered writes, the verified block is pinned in the block cache
 * and *data points at the size bytes there (read-only; valid until
 * keg_fs_read_unpin(fs, *pin)).  Returns 1 (pinned), 0 (not that case, or
 * the block is missing: call keg_fs_read, which handles it) or -errno (as
 * keg_fs_read: -EIO for a corrupt or unreadable block). */
int keg_fs_read_pin(struct keg_fs *fs, struct keg_fh *fh, uint64_t off, size_t size,
                    const void **data, void **pin);
void keg_fs_read_unpin(struct keg_fs *fs, void *pin);
/* write(2) of size bytes on a descriptor opened with O_APPEND.  The bytes
 * are buffered like any write, but their position is chosen when they are
 * committed: the metadata engine puts them at the file's end as it is then
 * (write_slices, KEG_INDX_APPEND), so appends of several mounters never
 * overwrite each other.  koff is where the caller (the kernel) believes the
 * file ends; when the commit puts them elsewhere, the invalidation hook is
 * called for the inode (keg_fs_set_inval).  Returns size or -errno. */
ssize_t keg_fs_append(struct keg_fs *fs, struct keg_fh *fh, uint64_t koff, const void *buf,
                      size_t size);
/* Before a write through fh that the kernel sends without its page cache
 * (direct I/O), by caller c: what the kernel does itself before a write
 * through the page cache (file_remove_privs), since for a direct write it
 * leaves that to the file system.  Unless c is root, S_ISUID is cleared, and
 * S_ISGID when group-execute is set or c is not in the file's group.  Costs
 * nothing when the mode last seen here (the open, a commit, a setattr on this
 * mount) has neither bit.  Returns 0 or -errno. */
int keg_fs_kill_priv(struct keg_fs *fs, const struct keg_ctx *c, struct keg_fh *fh);
/* Nonzero when keg_fs_kill_priv may have work: the mode last seen has S_ISUID
 * or S_ISGID, or is not known (so the caller fetches c's groups only then). */
int keg_fs_fh_privs(struct keg_fh *fh);
/* The owner's hook for data it may cache (the kernel's page cache) that
 * changed behind its back: bytes [off, off+len) of ino (len 0: to the end,
 * and its size).  Called from any thread, also inside a request on ino and
 * with core locks held: it must not wait for file system requests (queue the
 * work).  fn NULL: none (the default).  Set before concurrent use. */
typedef void keg_fs_inval_fn(void *arg, uint64_t ino, uint64_t off, uint64_t len);
void keg_fs_set_inval(struct keg_fs *fs, keg_fs_inval_fn *fn, void *arg);
ssize_t keg_fs_write(struct keg_fs *fs, struct keg_fh *fh, uint64_t off, const void *buf,
                     size_t size);
/* close(2) of one descriptor: commits buffered data, drops the POSIX locks
 * of lock_owner.  Returns the deferred write error, if any. */
int keg_fs_flush(struct keg_fs *fs, struct keg_fh *fh, uint64_t lock_owner);
/* Commits the buffered data of fh's file, as keg_fs_flush, and touches no lock
 * (a worker handing over).  Returns the deferred write error, if any. */
int keg_fs_commit(struct keg_fs *fs, struct keg_fh *fh);
int keg_fs_fsync(struct keg_fs *fs, struct keg_fh *fh, int datasync);
/* Last close: commits, drops flock of the handle, frees fh (INVALIDATES fh). */
int keg_fs_release(struct keg_fs *fs, struct keg_fh *fh);
/* mode: 0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE|KEEP_SIZE, FALLOC_FL_ZERO_RANGE. */
int keg_fs_fallocate(struct keg_fs *fs, const struct keg_ctx *c, struct keg_fh *fh, int mode,
                     uint64_t off, uint64_t len);
/* Shares slices: no data is copied.  Returns bytes copied. */
ssize_t keg_fs_copy_range(struct keg_fs *fs, const struct keg_ctx *c, struct keg_fh *in,
                          uint64_t off_in, struct keg_fh *out, uint64_t off_out, size_t len,
                          int flags);
/* SEEK_DATA / SEEK_HOLE (others: -EINVAL).  Returns the offset, -ENXIO. */
int64_t keg_fs_lseek(struct keg_fs *fs, struct keg_fh *fh, uint64_t off, int whence);

/*--- directories ---*/
int keg_fs_opendir(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, struct keg_dh **dh);
/* Deliver entries starting at offset off ("." is 0, ".." is 1, then stored
 * entries).  fill() is called per entry with the offset of the NEXT entry;
 * when it returns non-zero the entry was not taken and readdir returns 0;
 * the next call with that entry's offset resumes there without re-reading
 * the directory.  With plus, attr is complete (fill takes a kernel reference
 * for every entry it accepts, except "." and ".."); otherwise only ino and mode
 * are set.  Never holds more than one batch (512 entries) in memory. */
typedef int keg_fs_fill_fn(void *arg, const char *name, const struct keg_attr *attr,
                           uint64_t next_off);
int keg_fs_readdir(struct keg_fs *fs, const struct keg_ctx *c, struct keg_dh *dh, uint64_t off,
                   int plus, keg_fs_fill_fn *fill, void *arg);
int keg_fs_releasedir(struct keg_fs *fs, struct keg_dh *dh);   /* INVALIDATES dh */

/*--- other ---*/
int keg_fs_statfs(struct keg_fs *fs, struct statvfs *st);
ssize_t keg_fs_getxattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino,
                        const char *name, void *buf, size_t size);
int keg_fs_setxattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, const char *name,
                    const void *val, size_t len, int flags);
ssize_t keg_fs_listxattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, char *buf,
                         size_t size);
int keg_fs_removexattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino,
                       const char *name);
/* POSIX locks.  setlk with wait=1 blocks (polling the engine) until granted
 * or interrupted (-EINTR via keg_fs_interrupt). */
int keg_fs_getlk(struct keg_fs *fs, struct keg_fh *fh, uint64_t owner, struct keg_plock *lk);
int keg_fs_setlk(struct keg_fs *fs, struct keg_fh *fh, uint64_t owner,
                 const struct keg_plock *lk, int wait);
/* op: LOCK_SH, LOCK_EX, LOCK_UN, optionally | LOCK_NB. */
int keg_fs_flock(struct keg_fs *fs, struct keg_fh *fh, uint64_t owner, int op);
/* Handles of a previous worker (the mounter's, over the same FUSE connection and
 * session).  fh reopens such a handle: the locks set through it are not known
 * here, so every close of its inode releases the closing owner's byte-range
 * locks, and keg_fs_release_owner applies.  An inode the previous worker left
 * unlinked but open stays pending until the session ends.  */
void keg_fs_fh_adopted(struct keg_fs *fs, struct keg_fh *fh);
/* The kernel's release of a description that used flock names its lock owner
 * (also the owner of its OFD locks): for an adopted fh, those locks go at
 * keg_fs_release.  No effect on other handles (they know their owners). */
void keg_fs_release_owner(struct keg_fs *fs, struct keg_fh *fh, uint64_t owner);
/* The release of a previous worker's handle never used here: drops the flock and
 * byte-range locks of owner on ino. */
void keg_fs_release_unknown(struct keg_fs *fs, uint64_t ino, uint64_t owner);
/* Unlocks that failed at a close (the engine away) are kept and tried again
 * every second (lock.c).  fn(arg, ino, owner, is_flock, kept) is told when one
 * is kept (kept = 1) and when it is done, or dropped with the session (kept =
 * 0), so that a mounter can hand the unfinished ones to the worker that
 * replaces it, which queues them with keg_fs_unlock_later.  fn runs under a
 * lock of fs and must not call into fs.  Set before concurrent use. */
typedef void keg_fs_unlock_fn(void *arg, uint64_t ino, uint64_t owner, int is_flock, int kept);
void keg_fs_set_unlock_hook(struct keg_fs *fs, keg_fs_unlock_fn *fn, void *arg);
/* Queue an unlock (is_flock: owner's flock, else all its byte-range locks on
 * ino) that a previous worker kept: tried with the others within a second.
 * Returns 0 or -ENOMEM. */
int keg_fs_unlock_later(struct keg_fs *fs, uint64_t ino, uint64_t owner, int is_flock);
/* Interrupt the blocking setlk/flock waits of lock owner `owner` (FUSE
 * INTERRUPT): they return -EINTR.  No effect if none is waiting. */
void keg_fs_interrupt(struct keg_fs *fs, uint64_t owner);
/* The worker is handing over (async-signal-safe: one atomic store): blocking
 * setlk/flock waits stop within their poll interval (at most 0.1 s) and
 * return -ERESTART, so that the request can be left unanswered for the next
 * worker, to which the kernel resends it.  Waits begun later return -ERESTART
 * after their first conflicting try. */
void keg_fs_abandon_waits(struct keg_fs *fs);

/* Memory of the mount's data path (`kegfs stats`): one budget, buffer_size,
 * shared by the write buffers (first) and the decoded-block read cache. */
struct keg_fs_mem_stats {
    uint64_t budget;        /* keg_fs_conf.buffer_size */
    uint64_t write_bytes;   /* write buffers, including those being uploaded */
    uint64_t read_bytes;    /* decoded blocks held by the read cache */
    uint64_t read_limit;    /* what the read cache may hold now: budget - write_bytes,
                             * at least read_floor, at most read_cap */
    uint64_t read_floor;    /* the read cache's share never drops below this */
    uint64_t read_cap;      /* optional cap of the read share (block_cache_size; 0: none) */
    /* counters since the mount (block lookups of reads, compaction and copies) */
    uint64_t read_hits;     /* the block was cached, or already being fetched */
    uint64_t read_misses;   /* the block was fetched from the object store stack */
    uint64_t read_prefetched; /* read-ahead fetched the block before a read asked */
    uint64_t read_evicted;  /* blocks freed to make room (least recently used first) */
    uint64_t read_dropped;  /* blocks a sequential reader had finished (drop-behind) */
};
/* A snapshot (the figures move independently).  Returns 0. */
int keg_fs_mem_stats(struct keg_fs *fs, struct keg_fs_mem_stats *st);

/* The mount's background work (`kegfs mount --metrics`). */
struct keg_fs_bg_stats {
    uint64_t compact_queued;    /* chunks queued for compaction or being compacted */
    uint64_t compact_parked;    /* chunks parked: not worth merging yet */
    uint64_t compact_done;      /* chunks compacted since open */
    uint64_t compact_abandoned; /* compactions abandoned because the chunk changed */
    uint64_t compact_bytes;     /* bytes written by compactions */
    uint64_t purge_queued;      /* unlinked inodes waiting to be purged here */
    uint64_t deleted_slices;    /* slices of the deletion queue whose objects this mount
                                 * deleted */
    int      has_session;       /* 0: no session (read-only tools): no heartbeat */
    int64_t  heartbeat_age_ns;  /* since the session's last successful heartbeat (or its
                                 * start) */
    uint64_t unlocks_pending;   /* lock releases the engine failed, tried again each second */
};
/* A snapshot (the figures move independently).  Returns 0. */
int keg_fs_bg_stats(struct keg_fs *fs, struct keg_fs_bg_stats *st);

/* Inspection for `kegfs info`: calls cb for every slice reference of every
 * chunk of ino (after flushing buffered data of this mount). */
typedef int keg_fs_info_cb(void *arg, uint32_t indx, const struct keg_slice *s);
int keg_fs_chunks(struct keg_fs *fs, uint64_t ino, keg_fs_info_cb *cb, void *arg);

#endif
