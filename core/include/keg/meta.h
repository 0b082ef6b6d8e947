/* meta.h -- the metadata engine interface (struct keg_meta_ops) and its wrappers.
 *
 * DESIGN
 * A metadata engine stores the namespace (inodes, directory entries, symlink
 * targets, xattrs), the chunk -> slice lists of every file, counters, sessions,
 * locks and the deferred-deletion queue of one volume.  Engines are selected by
 * the META_URL scheme (sqlite3://, redis://, ...) through a registry
 * (keg_meta_register/keg_meta_find), and every engine passes the same contract
 * suite (tests/unit/test_meta_contract.c).
 *
 * Every mutating op is ATOMIC: it fully happens or not at all, also when other
 * mounters of the same volume mutate concurrently.  POSIX rules that need the
 * state being changed (EEXIST, ENOTEMPTY, setgid inheritance, rename replacing,
 * link counts, quota) are enforced inside the op, never by a separate read
 * first.  Permission checks (rwx, sticky bit) are done by the kernel
 * (default_permissions) and by core/fs, not by engines.
 *
 * Conventions for every op:
 *  - Returns 0 (or a count >= 0 where stated) or -errno.  Common errors:
 *    -ENOENT (no such inode/entry), -ENOTDIR, -EISDIR, -EEXIST, -ENOTEMPTY,
 *    -ENOSPC (capacity or inode quota, or the engine itself is full),
 *    -EIO (engine unreachable after bounded retries, or corrupt record),
 *    -ENOMEM.
 *  - Out-params are written only on success unless stated.
 *  - Thread-safety: every op may be called from many threads at once on one
 *    instance; the engine does its own locking / connection pooling.
 *  - Times are set by the engine from the mounter's clock (keg_now_ns()).
 *  - "touch parent" means parent mtime = ctime = now.
 *
 * The session: open() leaves the instance without a session; session_begin()
 * registers one and later ops that need one (locks, unlinked-but-open inodes)
 * use it implicitly.  Tools (format, status, info, dump) run without a session.
 */
#ifndef KEG_META_H
#define KEG_META_H

#include <errno.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include "keg/keg.h"
#include "keg/metrics.h"

/*----------------------------------------------------------------------------
 * Records
 *--------------------------------------------------------------------------*/

/* Attributes of one inode. */
struct keg_attr {
    uint64_t ino;
    uint32_t mode;          /* st_mode including S_IFMT type bits */
    uint32_t uid;
    uint32_t gid;
    uint32_t nlink;
    uint64_t size;          /* regular: bytes; symlink: target length; dir: 4096 */
    uint64_t rdev;          /* char/block devices */
    uint64_t parent;        /* directories: parent ino; others: 0 */
    int64_t  atime, mtime, ctime;            /* seconds since the epoch */
    uint32_t atimensec, mtimensec, ctimensec;
    /* Regular files: an upper bound of the data bytes stored (written and not
     * truncated away; holes and fallocated ranges are not counted; overwrites
     * may be counted twice), never above size: st_blocks.  Engines keep it in
     * write_slices/truncate; KEG_ALLOC_UNKNOWN where they do not (st_blocks
     * then follows size). */
    uint64_t alloc;
};
#define KEG_ALLOC_UNKNOWN UINT64_MAX

/* One slice reference inside a chunk: bytes [off, off+len) of slice `id`
 * (whose whole size is `size`) appear at position `pos` of the chunk.
 * id == 0 is a hole: the range reads as zeros.  Later entries in a chunk's
 * list shadow earlier ones where they overlap. */
struct keg_slice {
    uint64_t id;
    uint32_t size;          /* total bytes of the slice object set */
    uint32_t off;           /* offset into the slice */
    uint32_t len;           /* bytes used */
    uint32_t pos;           /* position within the chunk */
};

/* A slice reference addressed to a chunk of a file (for write_slices). */
struct keg_chunk_slice {
    uint32_t         indx;  /* chunk index = file offset / KEG_CHUNK_SIZE */
    struct keg_slice s;
};

/* A slice whose blocks must be deleted from the object store (the deletion
 * queue's entries; core/fs also lists the slices an fsync syncs this way). */
struct keg_del_slice {
    uint64_t id;
    uint32_t size;
};

/* A directory entry as returned by readdir. */
struct keg_dirent {
    const char      *name;  /* BORROWS: valid only during the callback */
    uint64_t         ino;
    uint32_t         type;  /* S_IFMT bits of the child's mode */
    struct keg_attr *attr;  /* full attributes when readdir(plus=1), else NULL */
    int              no_xattr;  /* plus: 1 if the child had no extended attributes
                                 * when its attributes were read; 0: has some, or
                                 * the engine does not say */
};

/* A POSIX byte-range lock (end is inclusive; UINT64_MAX = to EOF). */
struct keg_plock {
    uint32_t type;          /* F_RDLCK, F_WRLCK, F_UNLCK */
    uint64_t start;
    uint64_t end;
    uint32_t pid;           /* for getlk reports */
};

/* One registered mounter. */
struct keg_session_info {
    uint64_t sid;
    int64_t  heartbeat;     /* seconds since the epoch of the last heartbeat */
    const char *info;       /* BORROWS: "host=... pid=... mountpoint=... version=..." */
};

/* Volume settings written at format time.  See docs/internals/META.md. */
struct keg_format {
    char     name[64];          /* volume name: [a-z0-9][a-z0-9-]{2,62} */
    char     uuid[40];
    char     storage[16];       /* "file", "s3", "mem" */
    char     bucket[1024];      /* directory or endpoint URL */
    char     access_key[256];   /* secret: never logged */
    char     secret_key[256];   /* secret: never logged */
    char     session_token[2048];
    char     region[64];
    char     compress[8];       /* "none", "lz4", "zstd" */
    uint32_t block_size;        /* bytes, power of two, 64 KiB .. 16 MiB */
    uint64_t capacity;          /* bytes; 0 = unlimited */
    uint64_t inodes;            /* inode quota; 0 = unlimited */
    uint32_t trash_days;        /* 0 = no trash */
    uint32_t meta_version;      /* schema version of the engine */
    int64_t  created;           /* seconds since the epoch */
    uint32_t block_version;     /* block header version the volume was made with: 2 binds
                                   each block to its key; 0 (formatted before): version-1
                                   blocks are read too (keg/obj.h) */
};

/* Encode / decode keg_format as "key=value\n" lines (values percent-escaped).
 * keg_format_encode: OWNERSHIP caller keg_free()s *out.  Returns 0 or -errno.
 * keg_format_decode: unknown keys are ignored; returns 0 or -EINVAL. */
int keg_format_encode(const struct keg_format *f, char **out);
int keg_format_decode(const char *text, struct keg_format *f);
/* 0 if name is a valid volume name, else -EINVAL. */
int keg_format_check_name(const char *name);

/*----------------------------------------------------------------------------
 * The ops vtable
 *--------------------------------------------------------------------------*/

struct keg_meta;
typedef int keg_meta_dirent_cb(void *arg, const struct keg_dirent *de);
typedef int keg_meta_session_cb(void *arg, const struct keg_session_info *s);

/* setattr mask bits */
#define KEG_SET_MODE       (1u << 0)
#define KEG_SET_UID        (1u << 1)
#define KEG_SET_GID        (1u << 2)
#define KEG_SET_ATIME      (1u << 3)   /* from in->atime/atimensec */
#define KEG_SET_MTIME      (1u << 4)
#define KEG_SET_ATIME_NOW  (1u << 5)
#define KEG_SET_MTIME_NOW  (1u << 6)
#define KEG_SET_CTIME      (1u << 7)   /* from in->ctime (used by load) */

/* rename flags (same values as Linux) */
#define KEG_RENAME_NOREPLACE (1u << 0)
#define KEG_RENAME_EXCHANGE  (1u << 1)

/* write_slices flags */
#define KEG_WS_SHARE   (1u << 0)   /* slices already exist: add references (copy_file_range) */
#define KEG_WS_NOMTIME (1u << 1)   /* do not touch mtime/ctime (fallocate KEEP_SIZE of nothing) */

/* write_slices: the chunk index of an O_APPEND slice, placed by the engine at
 * the file's end (see write_slices) */
#define KEG_INDX_APPEND UINT32_MAX

/* id kinds for alloc_ids */
#define KEG_ID_INODE 0
#define KEG_ID_SLICE 1

/* unlink/rename results: what happened to the inode that lost its last link */
struct keg_unlinked {
    uint64_t ino;           /* 0: no inode lost its last link */
    uint32_t mode;
    uint64_t size;
    uint32_t purged;        /* 1: ino was purged inside the op (not left pending) */
    uint32_t queued;        /* slices this op put in the deletion queue */
};

/* The owner's open-inode hook (struct keg_meta.open_inodes): writes up to max
 * numbers of inodes open through this instance (or being opened) into inos and
 * returns how many there are (more than max: too many to list). */
typedef uint32_t keg_meta_open_inodes_fn(void *arg, uint64_t *inos, uint32_t max);
#define KEG_META_OPEN_MAX 64    /* more open inodes than this: no purging inside unlink */

/* engine capabilities */
#define KEG_META_CAP_TXN       (1u << 0)   /* ops are transactions */
#define KEG_META_CAP_SHARED    (1u << 1)   /* several mounters on several machines */

/* The directory name cache of a mounting session (Redis engine; see
 * docs/internals/meta-redis.md), for `kegfs stats`. */
struct keg_meta_name_cache {
    uint64_t answered;      /* lookups answered "no such name" without a request */
    uint64_t fills;         /* directories whose names were loaded */
    uint64_t drops;         /* times every cached name was dropped */
    uint64_t names;         /* names cached now */
    int      up;            /* subscribed: the cache is in use */
};

struct keg_meta_ops {
    const char *name;           /* "sqlite3", "redis", ... also the URL scheme */
    unsigned    version;        /* bump when appending ops */
    unsigned    caps;           /* KEG_META_CAP_* */
    size_t      priv_size;      /* bytes of private state, zeroed, at m->priv */
    const char *const *schemes; /* NULL-terminated URL schemes served (NULL: just name) */

    /* Connect to the engine named by url.  Must not create anything.
     * Returns 0, -EINVAL (malformed url; message logged), -EIO/-ECONNREFUSED
     * (unreachable: message names the address, never the password). */
    int  (*open)(struct keg_meta *m, const char *url);
    /* Must not fail; frees everything (ends no session: see session_end). */
    void (*close)(struct keg_meta *m);

    /* --- volume --- */
    /* Write the format and create the root directory (mode 0777 & ~umask as
     * given in root_mode, owner uid/gid of the caller).  -EEXIST if a volume is
     * already formatted here and !force; with force only the settings are
     * replaced (data is kept). */
    int  (*format_init)(struct keg_meta *m, const struct keg_format *f, uint32_t root_mode,
                        uint32_t uid, uint32_t gid, int force);
    /* -ENOENT: not formatted. */
    int  (*format_load)(struct keg_meta *m, struct keg_format *f);
    /* Remove every record of the volume (CSI DeleteVolume).  Object data is
     * the caller's job (list + delete).  Idempotent. */
    int  (*destroy)(struct keg_meta *m);
    /* Reserve n consecutive ids of kind KEG_ID_*; *first is the first one. */
    int  (*alloc_ids)(struct keg_meta *m, int kind, uint32_t n, uint64_t *first);
    /* Space and inodes in use (as charged by the ops below). */
    int  (*statfs)(struct keg_meta *m, uint64_t *used_bytes, uint64_t *used_inodes);

    /* --- sessions --- */
    int  (*session_begin)(struct keg_meta *m, const char *info, uint64_t *sid);
    int  (*session_heartbeat)(struct keg_meta *m);
    /* Release this session's locks and purge its unlinked-but-open inodes. */
    int  (*session_end)(struct keg_meta *m);
    int  (*session_list)(struct keg_meta *m, keg_meta_session_cb *cb, void *arg);
    /* For every session whose heartbeat is older than max_age seconds: release
     * its locks, purge its pending inodes, remove it.  *cleaned = sessions removed. */
    int  (*session_clean_stale)(struct keg_meta *m, int64_t max_age, uint32_t *cleaned);

    /* --- namespace --- */
    int  (*lookup)(struct keg_meta *m, uint64_t parent, const char *name, struct keg_attr *out);
    int  (*getattr)(struct keg_meta *m, uint64_t ino, struct keg_attr *out);
    /* Apply the KEG_SET_* fields of in; ctime = now on any change.  Does not
     * change size (see truncate).  Returns the new attributes. */
    int  (*setattr)(struct keg_meta *m, uint64_t ino, unsigned set, const struct keg_attr *in,
                    struct keg_attr *out);
    /* Create parent/name as inode `ino` (from alloc_ids) of type/mode `mode`
     * (umask already applied), owner uid/gid.  Directories get nlink 2 and raise
     * parent's nlink; symlinks store `target`.  If the parent has S_ISGID the
     * child's gid is the parent's, and a child directory inherits S_ISGID.
     * Touches parent.  -EEXIST, -ENOTDIR, -ENOENT (parent gone or unlinked),
     * -ENOSPC (inode quota). */
    int  (*mknod)(struct keg_meta *m, uint64_t parent, const char *name, uint64_t ino,
                  uint32_t mode, uint32_t uid, uint32_t gid, uint64_t rdev, const char *target,
                  struct keg_attr *out);
    /* New name newparent/newname for ino.  -EPERM for directories, -EEXIST,
     * -EMLINK past 65000 links.  ino's ctime and newparent's mtime/ctime = now. */
    int  (*link)(struct keg_meta *m, uint64_t ino, uint64_t newparent, const char *newname,
                 struct keg_attr *out);
    /* Remove a non-directory entry.  If that was the inode's last link, the
     * inode is kept as "pending" under this session and reported in *gone; the
     * caller purges it (purge) once no handle of it is open.  Without a session
     * the inode is purged at once.  With a session and m->open_inodes set, it
     * is purged inside the op unless the hook lists it (or lists more than
     * KEG_META_OPEN_MAX inodes): gone->purged = 1, and gone->queued counts the
     * slices that went to the deletion queue.  -EISDIR for directories. */
    int  (*unlink)(struct keg_meta *m, uint64_t parent, const char *name, struct keg_unlinked *gone);
    /* Remove an empty directory.  -ENOTEMPTY, -ENOTDIR, -EBUSY for the root. */
    int  (*rmdir)(struct keg_meta *m, uint64_t parent, const char *name);
    /* rename(2)/renameat2(2) semantics incl. KEG_RENAME_NOREPLACE/EXCHANGE:
     * replacing a file (its last link -> *gone as for unlink) or an empty
     * directory (-ENOTEMPTY otherwise); -EISDIR/-ENOTDIR for type mismatch;
     * -EINVAL when moving a directory into its own subtree; same-inode rename
     * is a successful no-op.  Fixes ".." link counts and parent pointers.
     * *moved gets the attributes of the moved inode. */
    int  (*rename)(struct keg_meta *m, uint64_t parent, const char *name, uint64_t newparent,
                   const char *newname, unsigned flags, struct keg_attr *moved,
                   struct keg_unlinked *gone);
    /* Entries of directory ino with name > after (byte order; after == NULL:
     * from the start), in increasing name order, at most max of them (max 0: all); "." and
     * ".." are not stored.  cb returning non-zero stops early (not an error).
     * Returns the number of entries delivered, or -errno.  -ENOTDIR. */
    int  (*readdir)(struct keg_meta *m, uint64_t ino, const char *after, uint32_t max, int plus,
                    keg_meta_dirent_cb *cb, void *arg);
    /* Copies the target (not NUL-terminated) into buf; returns its length. */
    ssize_t (*readlink)(struct keg_meta *m, uint64_t ino, char *buf, size_t size);
    /* Drop a pending (unlinked) inode: its slices lose a reference (slices
     * left with none go to the deletion queue) and its records go.  Idempotent.
     * Work is proportional to the chunks that exist, never to the size.  An
     * engine may bound the work of one call: the inode's records go at once
     * and the slices of a file with very many chunks reach the deletion queue
     * through later delq_peek calls (which then do a bounded batch each). */
    int  (*purge)(struct keg_meta *m, uint64_t ino);

    /* --- data --- */
    /* The slice list of chunk indx of ino, oldest first.  An absent chunk is
     * an empty list (*n = 0, *out = NULL).
     * OWNERSHIP: caller frees *out with keg_free(). */
    int  (*read_chunk)(struct keg_meta *m, uint64_t ino, uint32_t indx, struct keg_slice **out,
                       size_t *n);
    /* Append n slice references (in order) to their chunks and set
     * size = max(size, min_size).  Charges capacity for the growth (-ENOSPC).
     * mtime = ctime = now unless KEG_WS_NOMTIME.  With KEG_WS_SHARE each
     * non-hole slice gains a reference, and -EAGAIN is returned if one of them
     * no longer exists.  *nslices (may be NULL) = longest resulting list, to
     * trigger compaction.  -EISDIR, -EPERM for non-regular files.
     * Appends: entries with indx == KEG_INDX_APPEND (pos 0, len <= KEG_CHUNK_SIZE)
     * must follow all others (else -EINVAL: keg_meta_write_slices checks the
     * list before the engine sees it).  Inside the same atomic op, after
     * the other entries are added and size = max(size, min_size), each is
     * placed at the file's end as it is then -- split at chunk boundaries into
     * references of consecutive ranges of its slice -- and the size grows by
     * its len.  So appends of several mounters never overwrite each other:
     * out->size - (sum of their lens) is where the first one landed. */
    int  (*write_slices)(struct keg_meta *m, uint64_t ino, size_t n,
                         const struct keg_chunk_slice *cs, uint64_t min_size, unsigned flags,
                         uint32_t *nslices, struct keg_attr *out);
    /* Set the size.  Shrinking drops whole chunks past the end (their slices
     * lose a reference) and covers the tail of the last chunk with a hole, so
     * that growing later reads zeros.  mtime = ctime = now.  -ENOSPC on growth
     * past capacity. */
    int  (*truncate)(struct keg_meta *m, uint64_t ino, uint64_t size, struct keg_attr *out);
    /* Replace entries keep..nold-1 of chunk indx by `repl` (one slice),
     * provided the first nold entries are still exactly old[0..nold) (else
     * -EAGAIN: someone rewrote the chunk).  Entries 0..keep-1 stay, and so
     * do entries appended after old.  The replaced slices lose a reference.
     * keep < nold.  Used by compaction. */
    int  (*compact_chunk)(struct keg_meta *m, uint64_t ino, uint32_t indx,
                          const struct keg_slice *old, size_t nold, size_t keep,
                          const struct keg_slice *repl);
    /* Up to max slices whose blocks can be deleted.  Returns the count.
     * The entries stay queued until delq_ack(). */
    int  (*delq_peek)(struct keg_meta *m, struct keg_del_slice *out, uint32_t max);
    int  (*delq_ack)(struct keg_meta *m, const struct keg_del_slice *done, uint32_t n);

    /* --- extended attributes --- */
    /* Returns the value length; with size == 0 only the length.  -ENODATA,
     * -ERANGE (buf too small). */
    ssize_t (*getxattr)(struct keg_meta *m, uint64_t ino, const char *name, void *buf, size_t size);
    /* flags: XATTR_CREATE (-EEXIST) / XATTR_REPLACE (-ENODATA).  ctime = now. */
    int  (*setxattr)(struct keg_meta *m, uint64_t ino, const char *name, const void *val,
                     size_t len, int flags);
    /* NUL-separated names; returns total length; size == 0: length only; -ERANGE. */
    ssize_t (*listxattr)(struct keg_meta *m, uint64_t ino, char *buf, size_t size);
    int  (*removexattr)(struct keg_meta *m, uint64_t ino, const char *name); /* -ENODATA */

    /* --- locks (owned by this session + owner) --- */
    /* flock: type F_RDLCK/F_WRLCK/F_UNLCK.  -EAGAIN on conflict (caller waits). */
    int  (*flock)(struct keg_meta *m, uint64_t ino, uint64_t owner, uint32_t type);
    /* First lock of another owner conflicting with *lk; lk->type = F_UNLCK if none. */
    int  (*getlk)(struct keg_meta *m, uint64_t ino, uint64_t owner, struct keg_plock *lk);
    /* Set or clear (F_UNLCK) a byte-range lock, merging/splitting this owner's
     * ranges as POSIX requires.  -EAGAIN on conflict. */
    int  (*setlk)(struct keg_meta *m, uint64_t ino, uint64_t owner, const struct keg_plock *lk);

    /* Make committed metadata durable (fsync of the engine's log), optional. */
    int  (*sync)(struct keg_meta *m);

    /* The smallest index >= from of a chunk of ino that has a slice list (it
     * may hold only holes): *indx is set and 0 returned; -ENOENT if there is
     * none.  Lets SEEK_DATA skip the empty chunks of a huge sparse file.
     * Optional (NULL, or -ENOSYS: callers look at every chunk index). */
    int  (*next_chunk)(struct keg_meta *m, uint64_t ino, uint32_t from, uint32_t *indx);

    /* The counters of a mounting session's directory name cache, for `kegfs
     * stats`.  Optional (NULL or -errno: the engine has none, or not now). */
    int  (*name_cache_stats)(struct keg_meta *m, struct keg_meta_name_cache *st);

    /* Take over session sid, registered earlier by another instance (a mounter's
     * previous worker) and not ended: later ops use it as their own, its locks and
     * unlinked-but-open inodes stay; its info becomes info and its heartbeat now.
     * -ENOENT when it no longer exists (ended, or cleaned up as stale), -EEXIST
     * when this instance has a session already. */
    int  (*session_resume)(struct keg_meta *m, uint64_t sid, const char *info);
};

struct keg_meta {
    const struct keg_meta_ops *ops;     /* MUST be first */
    void                      *priv;    /* ops->priv_size bytes, owned by the core */
    char                      *url;     /* as given (contains secrets: never log it) */
    char                      *url_redacted;  /* for logs and status */
    /* Optional (NULL after keg_meta_open): set by the owner before concurrent
     * use; see keg_meta_open_inodes_fn and unlink.  Engines call it through
     * keg_meta_open_set(). */
    keg_meta_open_inodes_fn   *open_inodes;
    void                      *open_inodes_arg;
    /* requests per op, counted by the keg_meta_<op>() wrappers */
    struct keg_meta_op_stats  *stats;   /* KEG_META_OP_N entries, owned by the core */
};

/*----------------------------------------------------------------------------
 * Registry and open/close
 *--------------------------------------------------------------------------*/

/* Register an engine (at most 16).  Built-in engines are registered by
 * keg_meta_find on first use. */
int keg_meta_register(const struct keg_meta_ops *ops);
/* The engine serving this URL scheme, or NULL. */
const struct keg_meta_ops *keg_meta_find(const char *scheme);

/* Open the engine for url.  -EINVAL with a clear log line for an unknown scheme
 * or malformed url.  OWNERSHIP: caller closes with keg_meta_close(). */
int  keg_meta_open(const char *url, struct keg_meta **out);
void keg_meta_close(struct keg_meta *m);

/*----------------------------------------------------------------------------
 * Checked calls (core/meta/meta_call.c)
 *
 * The rest of the code calls keg_meta_<op>(m, ...), never m->ops->op: each
 * wrapper validates its input once for every engine, calls the engine (an op
 * the engine leaves NULL returns -ENOSYS), checks the engine's return contract
 * with KEG_ASSERT (-errno in [-4095, -1] only, counts within what was asked,
 * out-params set on success) and counts the request (keg_meta_op_stats).
 *
 * Validation, done before the engine is called:
 *  - names (lookup, mknod, link, unlink, rmdir, rename): keg_meta_check_name();
 *    ops that add or remove a name also refuse "." and ".." (-EINVAL);
 *  - mknod: the mode's type is one of S_IFREG/DIR/LNK/CHR/BLK/FIFO/SOCK and ino
 *    is above the root (-EINVAL); a symlink's target passes
 *    keg_meta_check_target();
 *  - rename: flags are a valid KEG_RENAME_* combination (-EINVAL);
 *  - xattr names (getxattr, setxattr, removexattr): non-empty (-EINVAL), at most
 *    KEG_XATTR_NAME_MAX bytes (-ERANGE); setxattr: a value of at most
 *    KEG_XATTR_SIZE_MAX bytes (-E2BIG), flags XATTR_CREATE or XATTR_REPLACE or
 *    neither (-EINVAL).
 * mknod, link, unlink, rmdir and rename start the keg_meta_parents() record
 * also when validation fails (it then holds nothing).
 *--------------------------------------------------------------------------*/

/* 0 if name can be a directory entry: -EINVAL (NULL, empty, or contains '/'),
 * -ENAMETOOLONG (more than KEG_NAME_MAX bytes), in that order.  (core/fs answers
 * an empty name with -ENOENT first, as path resolution does.) */
int keg_meta_check_name(const char *name);
/* 0 if target can be a symlink's target: -EINVAL (NULL or empty),
 * -ENAMETOOLONG (more than KEG_SYMLINK_MAX bytes). */
int keg_meta_check_target(const char *target);

/* The kinds of request counted per instance (names: keg_meta_op_name). */
enum keg_meta_op {
    KEG_META_OP_FORMAT_INIT, KEG_META_OP_FORMAT_LOAD, KEG_META_OP_DESTROY,
    KEG_META_OP_ALLOC_IDS, KEG_META_OP_STATFS, KEG_META_OP_SESSION_BEGIN,
    KEG_META_OP_SESSION_HEARTBEAT, KEG_META_OP_SESSION_END, KEG_META_OP_SESSION_LIST,
    KEG_META_OP_SESSION_CLEAN_STALE, KEG_META_OP_LOOKUP, KEG_META_OP_GETATTR,
    KEG_META_OP_SETATTR, KEG_META_OP_MKNOD, KEG_META_OP_LINK, KEG_META_OP_UNLINK,
    KEG_META_OP_RMDIR, KEG_META_OP_RENAME, KEG_META_OP_READDIR, KEG_META_OP_READLINK,
    KEG_META_OP_PURGE, KEG_META_OP_READ_CHUNK, KEG_META_OP_WRITE_SLICES,
    KEG_META_OP_TRUNCATE, KEG_META_OP_COMPACT_CHUNK, KEG_META_OP_DELQ_PEEK,
    KEG_META_OP_DELQ_ACK, KEG_META_OP_GETXATTR, KEG_META_OP_SETXATTR,
    KEG_META_OP_LISTXATTR, KEG_META_OP_REMOVEXATTR, KEG_META_OP_FLOCK, KEG_META_OP_GETLK,
    KEG_META_OP_SETLK, KEG_META_OP_SYNC, KEG_META_OP_NEXT_CHUNK,
    KEG_META_OP_NAME_CACHE_STATS, KEG_META_OP_SESSION_RESUME,
    KEG_META_OP_N,
};

/* "lookup", "write_slices", ... (the field name in keg_meta_ops). */
const char *keg_meta_op_name(enum keg_meta_op op);

/* What the wrappers counted of the requests that reached the engine (calls
 * refused by validation and ops the engine lacks are not counted).  All
 * fields atomic. */
struct keg_meta_op_stats {
    uint64_t requests;                  /* calls answered by the engine */
    uint64_t errors;                    /* of them, failures of the engine itself:
                                         * keg_meta_is_failure() (-EIO, ...), not
                                         * answers such as -ENOENT or -EEXIST */
    struct keg_metrics_hist latency;    /* engine latency of those calls */
};

/* 1 if rc is a failure of the engine (unreachable, corrupt record, out of
 * memory: -EIO, -ENOMEM, -ETIMEDOUT, -ECONNREFUSED, -ECONNRESET, -ENOTCONN,
 * -EPIPE, -EHOSTUNREACH, -EPROTO, -EBADMSG, -EROFS), 0 for success and for the
 * answers the contract lists (-ENOENT, -EEXIST, -EAGAIN, -ENOSPC, ...). */
int keg_meta_is_failure(int64_t rc);

/* The KEG_META_OP_N counters of m.  BORROWS: m; valid until keg_meta_close. */
const struct keg_meta_op_stats *keg_meta_stats(const struct keg_meta *m);

int keg_meta_format_init(struct keg_meta *m, const struct keg_format *f, uint32_t root_mode,
                         uint32_t uid, uint32_t gid, int force);
int keg_meta_format_load(struct keg_meta *m, struct keg_format *f);
int keg_meta_destroy(struct keg_meta *m);
int keg_meta_alloc_ids(struct keg_meta *m, int kind, uint32_t n, uint64_t *first);
int keg_meta_statfs(struct keg_meta *m, uint64_t *used_bytes, uint64_t *used_inodes);
int keg_meta_session_begin(struct keg_meta *m, const char *info, uint64_t *sid);
int keg_meta_session_heartbeat(struct keg_meta *m);
int keg_meta_session_resume(struct keg_meta *m, uint64_t sid, const char *info);
int keg_meta_session_end(struct keg_meta *m);
int keg_meta_session_list(struct keg_meta *m, keg_meta_session_cb *cb, void *arg);
int keg_meta_session_clean_stale(struct keg_meta *m, int64_t max_age, uint32_t *cleaned);
int keg_meta_lookup(struct keg_meta *m, uint64_t parent, const char *name, struct keg_attr *out);
int keg_meta_getattr(struct keg_meta *m, uint64_t ino, struct keg_attr *out);
int keg_meta_setattr(struct keg_meta *m, uint64_t ino, unsigned set, const struct keg_attr *in,
                     struct keg_attr *out);
int keg_meta_mknod(struct keg_meta *m, uint64_t parent, const char *name, uint64_t ino,
                   uint32_t mode, uint32_t uid, uint32_t gid, uint64_t rdev, const char *target,
                   struct keg_attr *out);
int keg_meta_link(struct keg_meta *m, uint64_t ino, uint64_t newparent, const char *newname,
                  struct keg_attr *out);
int keg_meta_unlink(struct keg_meta *m, uint64_t parent, const char *name,
                    struct keg_unlinked *gone);
int keg_meta_rmdir(struct keg_meta *m, uint64_t parent, const char *name);
int keg_meta_rename(struct keg_meta *m, uint64_t parent, const char *name, uint64_t newparent,
                    const char *newname, unsigned flags, struct keg_attr *moved,
                    struct keg_unlinked *gone);
int keg_meta_readdir(struct keg_meta *m, uint64_t ino, const char *after, uint32_t max, int plus,
                     keg_meta_dirent_cb *cb, void *arg);
ssize_t keg_meta_readlink(struct keg_meta *m, uint64_t ino, char *buf, size_t size);
int keg_meta_purge(struct keg_meta *m, uint64_t ino);
int keg_meta_read_chunk(struct keg_meta *m, uint64_t ino, uint32_t indx, struct keg_slice **out,
                        size_t *n);
int keg_meta_write_slices(struct keg_meta *m, uint64_t ino, size_t n,
                          const struct keg_chunk_slice *cs, uint64_t min_size, unsigned flags,
                          uint32_t *nslices, struct keg_attr *out);
int keg_meta_truncate(struct keg_meta *m, uint64_t ino, uint64_t size, struct keg_attr *out);
int keg_meta_compact_chunk(struct keg_meta *m, uint64_t ino, uint32_t indx,
                           const struct keg_slice *old, size_t nold, size_t keep,
                           const struct keg_slice *repl);
int keg_meta_delq_peek(struct keg_meta *m, struct keg_del_slice *out, uint32_t max);
int keg_meta_delq_ack(struct keg_meta *m, const struct keg_del_slice *done, uint32_t n);
ssize_t keg_meta_getxattr(struct keg_meta *m, uint64_t ino, const char *name, void *buf,
                          size_t size);
int keg_meta_setxattr(struct keg_meta *m, uint64_t ino, const char *name, const void *val,
                      size_t len, int flags);
ssize_t keg_meta_listxattr(struct keg_meta *m, uint64_t ino, char *buf, size_t size);
int keg_meta_removexattr(struct keg_meta *m, uint64_t ino, const char *name);
int keg_meta_flock(struct keg_meta *m, uint64_t ino, uint64_t owner, uint32_t type);
int keg_meta_getlk(struct keg_meta *m, uint64_t ino, uint64_t owner, struct keg_plock *lk);
int keg_meta_setlk(struct keg_meta *m, uint64_t ino, uint64_t owner, const struct keg_plock *lk);
int keg_meta_sync(struct keg_meta *m);
int keg_meta_next_chunk(struct keg_meta *m, uint64_t ino, uint32_t from, uint32_t *indx);
int keg_meta_name_cache_stats(struct keg_meta *m, struct keg_meta_name_cache *st);

/* Parent attributes after a namespace op.  mknod, link, unlink, rmdir and
 * rename record, in the CALLING THREAD, the attributes that the directories
 * they changed have right after the op -- exactly what a getattr following
 * the op returns, from the same atomic op (no extra round trip): the parent
 * (link: newparent; rename: the source parent, then the target parent when it
 * differs).  keg_meta_parents() copies up to max of them to out and returns
 * how many the last such op of this thread recorded: 0 after a failed op, a
 * same-inode rename, or an engine that records nothing (then the caller must
 * ask getattr).  Engines call keg_meta_parents_begin() at the start of each
 * of those ops and keg_meta_parents_add() once it has succeeded. */
int  keg_meta_parents(struct keg_attr *out, int max);
void keg_meta_parents_begin(void);
void keg_meta_parents_add(const struct keg_attr *a);

/* Helpers shared by engines (core/meta/meta.c). */
/* The owner's open-inode set for unlink/rename: fills set[0..KEG_META_OPEN_MAX)
 * and returns the count, or -1 when inline purging is off (no hook, no session
 * given (has_session == 0), or more than KEG_META_OPEN_MAX inodes open). */
int keg_meta_open_set(struct keg_meta *m, int has_session, uint64_t *set);
/* Fill ts fields now. */
void keg_attr_set_now(int64_t *sec, uint32_t *nsec);
/* Bytes charged for a file of this size (4 KiB rounding). */
static inline uint64_t keg_meta_charge(uint64_t size)
{
    return (size + 4095) & ~(uint64_t)4095;
}

#endif
