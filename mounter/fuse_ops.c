/* fuse_ops.c -- the FUSE low-level ops table of the mounter: thin handlers over core/fs.
 *
 * DESIGN
 * Every handler parses the request, calls one keg_fs_* function and replies
 * exactly once; core/fs returns -errno and the sign is flipped here, the one
 * place where FUSE and core meet (fuse_reply_err(req, -rc)).  FUSE inode
 * numbers ARE KegFS inode numbers (the root is 1 == FUSE_ROOT_ID).  fi->fh holds an id of the
 * handle table (mnt_handle.c), not a pointer, so that a worker restarted by the
 * supervisor can recognise -- and reopen -- the handles of the worker it replaced.
 * write, flush, fsync and release bracket their core call with the dirty record
 * (mnt_handle_write_begin/_end, mnt_handle_commit_begin/_end), so that a handle
 * whose uncommitted data died with a crashed worker fails with EIO afterwards.
 *
 * Kernel references (nlookup) are counted in fuse_inode.c: taken BEFORE the
 * reply that hands out an entry (a forget may race with our bookkeeping once
 * the kernel has the reply) and given back when the reply fails (the request
 * was interrupted, so the kernel never got the entry).  An open/create whose
 * reply fails releases its handle for the same reason: no release will come.
 *
 * Caller identity: fuse_req_ctx() gives uid/gid/pid/umask; supplementary
 * groups cost a read of /proc/<pid>/task/<tid>/status, so they are fetched
 * only where core/fs needs group membership (mnt_ctx): setattr and setting a
 * POSIX ACL (system.posix_acl_*).  Everything else, creation and open included,
 * goes without: the kernel checks access with default_permissions.
 */
#define FUSE_USE_VERSION 314

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#define KEG_LOG_TAG "fuse"
#include "keg/fs.h"
#include "keg/hash.h"
#include "keg/log.h"
#include "keg/mem.h"

#include "mnt_i.h"

_Static_assert(sizeof(fuse_ino_t) >= sizeof(uint64_t), "KegFS inode numbers are FUSE nodeids");

#define MNT_DBG(...) KEG_DEBUG(__VA_ARGS__)

/*----- helpers -----*/

static struct mnt_state *mnt(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* h, the handle a lookup found, or NULL after replying its error rc. */
static void *req_found(fuse_req_t req, int rc, void *h)
{
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return NULL;
    }
    return h;
}

/* The core file handle behind fi->fh (a previous worker's is reopened).  On
 * failure the error is replied and NULL returned. */
static struct keg_fh *req_fh(fuse_req_t req, fuse_ino_t ino, const struct fuse_file_info *fi)
{
    struct keg_fh *fh = NULL;
    int rc = mnt_handle_file(fi->fh, ino, &fh);
    return req_found(req, rc, fh);
}

/* req_fh for an operation that changes the file's data: a handle that lost
 * buffered data in a worker crash gets EIO (mnt_handle.c). */
static struct keg_fh *req_fh_w(fuse_req_t req, fuse_ino_t ino, const struct fuse_file_info *fi)
{
    struct keg_fh *fh = NULL;
    int rc = mnt_handle_file_w(fi->fh, ino, &fh);
    return req_found(req, rc, fh);
}

static struct keg_dh *req_dh(fuse_req_t req, fuse_ino_t ino, const struct fuse_file_info *fi)
{
    struct keg_dh *dh = NULL;
    int rc = mnt_handle_dir(fi->fh, ino, &dh);
    return req_found(req, rc, dh);
}

/* The caller's identity.  Supplementary groups cost a read of
 * /proc/PID/task/TID/status, so they are fetched only where core/fs needs
 * them: setattr (chmod's S_ISGID rule, chown to a group, utimes by a group
 * writer) and setxattr of a POSIX ACL (the S_ISGID rule of the mode it sets).
 * Everything else is checked by the kernel (default_permissions). */
static void mnt_ctx(fuse_req_t req, struct keg_ctx *c, int with_groups)
{
    const struct fuse_ctx *fc = fuse_req_ctx(req);
    c->uid = fc->uid;
    c->gid = fc->gid;
    c->pid = fc->pid;
    c->umask = fc->umask;
    c->ngroups = 0;
    if (with_groups) {
        gid_t g[KEG_CTX_MAX_GROUPS];
        int n = fuse_req_getgroups(req, KEG_CTX_MAX_GROUPS, g);
        if (n > KEG_CTX_MAX_GROUPS)
            n = KEG_CTX_MAX_GROUPS;
        for (int i = 0; i < n; i++)
            c->groups[i] = g[i];
        c->ngroups = n > 0 ? (uint32_t)n : 0;
    }
}

static void attr_to_stat(const struct keg_attr *a, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = a->ino;
    st->st_mode = a->mode;
    st->st_nlink = a->nlink;
    st->st_uid = a->uid;
    st->st_gid = a->gid;
    st->st_rdev = (dev_t)a->rdev;
    st->st_size = (off_t)a->size;
    st->st_blksize = 4096;
    /* data actually stored where the engine tracks it: holes do not count */
    uint64_t used = S_ISREG(a->mode) && a->alloc != KEG_ALLOC_UNKNOWN ? KEG_MIN(a->alloc, a->size)
                                                                      : a->size;
    st->st_blocks = (blkcnt_t)((used + 511) / 512);
    st->st_atim.tv_sec = a->atime;
    st->st_atim.tv_nsec = a->atimensec;
    st->st_mtim.tv_sec = a->mtime;
    st->st_mtim.tv_nsec = a->mtimensec;
    st->st_ctim.tv_sec = a->ctime;
    st->st_ctim.tv_nsec = a->ctimensec;
}

static void fill_entry(struct mnt_state *m, const struct keg_attr *a, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof(*e));
    e->ino = a->ino;
    /* the kernel made the root inode with generation 0; another value in an
     * entry for it (lookup of "..") would mark it stale */
    e->generation = a->ino == FUSE_ROOT_ID ? 0 : m->generation;
    attr_to_stat(a, &e->attr);
    e->attr_timeout = m->attr_timeout;
    e->entry_timeout = S_ISDIR(a->mode) ? m->dir_entry_timeout : m->entry_timeout;
}

/* Reply with an entry (or the error rc), counting the kernel reference. */
static void reply_entry(fuse_req_t req, int rc, const struct keg_attr *a)
{
    struct fuse_entry_param e;
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    fill_entry(mnt(req), a, &e);
    mnt_inode_ref(a->ino, 1);
    if (fuse_reply_entry(req, &e) != 0)
        mnt_inode_unref(a->ino, 1);
}

static void reply_attr(fuse_req_t req, int rc, const struct keg_attr *a)
{
    struct stat st;
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    attr_to_stat(a, &st);
    fuse_reply_attr(req, &st, mnt(req)->attr_timeout);
}

/* A per-thread reply buffer, so that 1 MiB reads do not mmap/munmap each time. */
static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;
struct mnt_tbuf {
    size_t cap;
    char   data[];
};

static void tbuf_free(void *p)
{
    keg_free(p);
}

static void tbuf_init(void)
{
    if (pthread_key_create(&buf_key, tbuf_free) != 0)
        KEG_PANIC("pthread_key_create failed");
}

/* OWNERSHIP: the buffer belongs to the calling thread; valid until its next call. */
static char *tbuf_get(size_t size)
{
    pthread_once(&buf_once, tbuf_init);
    struct mnt_tbuf *b = pthread_getspecific(buf_key);
    if (b && b->cap >= size)
        return b->data;
    size_t cap = size < 4096 ? 4096 : size;
    struct mnt_tbuf *nb = keg_malloc(sizeof(*nb) + cap);
    if (!nb)
        return NULL;
    nb->cap = cap;
    keg_free(b);
    pthread_setspecific(buf_key, nb);
    return nb->data;
}

/*----- session -----*/

static void mnt_init(void *userdata, struct fuse_conn_info *conn)
{
    /* EXPORT_SUPPORT: the kernel resolves a file handle whose inode it no longer
     * caches with lookup(ino, ".") and reconnects directories with lookup(ino, "..")
     * (mnt_lookup), so open_by_handle_at and NFS re-export work. */
    const unsigned want = FUSE_CAP_FLOCK_LOCKS | FUSE_CAP_POSIX_LOCKS | FUSE_CAP_READDIRPLUS |
                          FUSE_CAP_ASYNC_READ | FUSE_CAP_ATOMIC_O_TRUNC |
                          FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_AUTO_INVAL_DATA |
                          FUSE_CAP_EXPORT_SUPPORT;
    const unsigned never = FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_READDIRPLUS_AUTO |
                           FUSE_CAP_HANDLE_KILLPRIV | FUSE_CAP_SPLICE_READ |
                           FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
    /* POSIX ACLs: the kernel enforces them (and checks who may set one); core/fs
     * keeps mode and ACL in sync and applies default ACLs at creation, where the
     * umask must not apply: DONT_MASK hands it the unmasked mode and the umask.
     * Without both (old kernels), setting an ACL fails with EOPNOTSUPP. */
    const unsigned acl = FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
    struct mnt_state *m = userdata;
    conn->want |= want & conn->capable;
    conn->want &= ~never;
    if ((conn->capable & acl) == acl && !m->no_acl)
        conn->want |= acl;
    else
        conn->want &= ~acl;
    keg_fs_set_acl(m->fs, (conn->want & acl) == acl);
    m->resend = conn->proto_major > 7 || (conn->proto_major == 7 && conn->proto_minor >= 40);
    conn->max_write = 1u << 20;
    conn->max_background = 64;
    conn->congestion_threshold = 48;
    conn->time_gran = 1;
    KEG_INFO("FUSE protocol %u.%u, capable 0x%x, want 0x%x, max_write %u, POSIX ACLs %s",
             conn->proto_major, conn->proto_minor, conn->capable, conn->want, conn->max_write,
             (conn->want & acl) == acl ? "on" : m->no_acl ? "off (-o noacl)" :
             "off (the kernel cannot enforce them)");
    if ((want & ~conn->capable) != 0)
        KEG_WARN("kernel lacks FUSE capabilities 0x%x", want & ~conn->capable);
}

static void mnt_destroy(void *userdata)
{
    KEG_DEBUG("destroy");
}

/*----- namespace -----*/

uint32_t mnt_generation(const char *uuid)
{
    uint32_t h = keg_fnv1a32_str(uuid);
    return h ? h : 1;
}

/* lookup(ino, ".") and lookup(ino, "..") come only from the kernel's export
 * operations (a file handle whose inode is not cached, reconnecting a
 * directory): the kernel never sends them for path walks.  An inode that is
 * gone, or unlinked (only open handles keep it), is ENOENT: ESTALE to the caller. */
static int lookup_export(struct mnt_state *m, const struct keg_ctx *c, uint64_t ino, int dotdot,
                         struct keg_attr *a)
{
    int rc = keg_fs_getattr(m->fs, c, ino, a);
    if (rc == 0 && a->nlink == 0)
        rc = -ENOENT;
    if (rc == 0 && dotdot) {
        if (!S_ISDIR(a->mode))
            return -ENOTDIR;
        rc = keg_fs_getattr(m->fs, c, a->parent ? a->parent : FUSE_ROOT_ID, a);
    }
    return rc;
}

static void mnt_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct mnt_state *m = mnt(req);
    struct keg_ctx c;
    struct keg_attr a;
    MNT_DBG("lookup(parent=%" PRIu64 ", name=%s)", (uint64_t)parent, name);
    mnt_ctx(req, &c, 0);
    if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) {
        reply_entry(req, lookup_export(m, &c, parent, name[1] == '.', &a), &a);
        return;
    }
    int rc = keg_fs_lookup(m->fs, &c, parent, name, &a);
    if (rc == -ENOENT && m->entry_timeout > 0) {
        /* A negative entry: the kernel caches "no such name" for entry_timeout. */
        struct fuse_entry_param e;
        memset(&e, 0, sizeof(e));
        e.ino = 0;
        e.entry_timeout = m->entry_timeout;
        fuse_reply_entry(req, &e);
        return;
    }
    reply_entry(req, rc, &a);
}

static void mnt_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    MNT_DBG("forget(ino=%" PRIu64 ", nlookup=%" PRIu64 ")", (uint64_t)ino, nlookup);
    mnt_inode_unref(ino, nlookup);
    fuse_reply_none(req);
}

static void mnt_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    MNT_DBG("forget_multi(count=%zu)", count);
    for (size_t i = 0; i < count; i++)
        mnt_inode_unref(forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void mnt_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct keg_ctx c;
    struct keg_attr a;
    MNT_DBG("getattr(ino=%" PRIu64 ")", (uint64_t)ino);
    mnt_ctx(req, &c, 0);
    /* after a create/rename/unlink here the kernel asks for the parent's
     * attributes again: core/fs may have them from that op (at most the
     * attribute-cache timeout old, and only if nothing changed it since) */
    int64_t max_age_ns = (int64_t)(mnt(req)->attr_timeout * 1e9);
    reply_attr(req, keg_fs_getattr_cached(mnt(req)->fs, &c, ino, max_age_ns, &a), &a);
}

/* FUSE_SET_ATTR_* -> KEG_SET_* / KEG_FS_SET_SIZE with the values in `in`. */
static unsigned map_setattr(const struct stat *st, int to_set, struct keg_attr *in)
{
    unsigned set = 0;
    memset(in, 0, sizeof(*in));
    if (to_set & FUSE_SET_ATTR_MODE) {
        set |= KEG_SET_MODE;
        in->mode = st->st_mode;
    }
    if (to_set & FUSE_SET_ATTR_UID) {
        set |= KEG_SET_UID;
        in->uid = st->st_uid;
    }
    if (to_set & FUSE_SET_ATTR_GID) {
        set |= KEG_SET_GID;
        in->gid = st->st_gid;
    }
    if (to_set & FUSE_SET_ATTR_SIZE) {
        set |= KEG_FS_SET_SIZE;
        in->size = (uint64_t)st->st_size;
    }
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
        set |= KEG_SET_ATIME_NOW;
    } else if (to_set & FUSE_SET_ATTR_ATIME) {
        set |= KEG_SET_ATIME;
        in->atime = st->st_atim.tv_sec;
        in->atimensec = (uint32_t)st->st_atim.tv_nsec;
    }
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
        set |= KEG_SET_MTIME_NOW;
    } else if (to_set & FUSE_SET_ATTR_MTIME) {
        set |= KEG_SET_MTIME;
        in->mtime = st->st_mtim.tv_sec;
        in->mtimensec = (uint32_t)st->st_mtim.tv_nsec;
    }
    if (to_set & FUSE_SET_ATTR_CTIME) {
        set |= KEG_SET_CTIME;
        in->ctime = st->st_ctim.tv_sec;
        in->ctimensec = (uint32_t)st->st_ctim.tv_nsec;
    }
    return set;
}

static void mnt_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                        struct fuse_file_info *fi)
{
    struct keg_ctx c;
    struct keg_attr in, out;
    unsigned set = map_setattr(attr, to_set, &in);
    MNT_DBG("setattr(ino=%" PRIu64 ", to_set=0x%x, set=0x%x)", (uint64_t)ino, to_set, set);
    mnt_ctx(req, &c, 1);
    reply_attr(req, keg_fs_setattr(mnt(req)->fs, &c, ino, set, &in, &out), &out);
}

static void mnt_readlink(fuse_req_t req, fuse_ino_t ino)
{
    struct keg_ctx c;
    char buf[KEG_SYMLINK_MAX + 1];
    MNT_DBG("readlink(ino=%" PRIu64 ")", (uint64_t)ino);
    mnt_ctx(req, &c, 0);
    ssize_t n = keg_fs_readlink(mnt(req)->fs, &c, ino, buf, sizeof(buf));
    if (n < 0) {
        fuse_reply_err(req, (int)-n);
        return;
    }
    if ((size_t)n >= sizeof(buf)) {
        fuse_reply_err(req, ENAMETOOLONG);
        return;
    }
    buf[n] = '\0';
    fuse_reply_readlink(req, buf);
}

static void mnt_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      dev_t rdev)
{
    struct keg_ctx c;
    struct keg_attr a;
    MNT_DBG("mknod(parent=%" PRIu64 ", name=%s, mode=0%o, rdev=%" PRIu64 ")", (uint64_t)parent,
            name, (unsigned)mode, (uint64_t)rdev);
    mnt_ctx(req, &c, 0);
    reply_entry(req, keg_fs_mknod(mnt(req)->fs, &c, parent, name, mode, rdev, &a), &a);
}

static void mnt_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    struct keg_ctx c;
    struct keg_attr a;
    MNT_DBG("mkdir(parent=%" PRIu64 ", name=%s, mode=0%o)", (uint64_t)parent, name,
            (unsigned)mode);
    mnt_ctx(req, &c, 0);
    reply_entry(req, keg_fs_mkdir(mnt(req)->fs, &c, parent, name, mode, &a), &a);
}

static void mnt_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct keg_ctx c;
    MNT_DBG("unlink(parent=%" PRIu64 ", name=%s)", (uint64_t)parent, name);
    mnt_ctx(req, &c, 0);
    fuse_reply_err(req, -keg_fs_unlink(mnt(req)->fs, &c, parent, name));
}

static void mnt_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct keg_ctx c;
    MNT_DBG("rmdir(parent=%" PRIu64 ", name=%s)", (uint64_t)parent, name);
    mnt_ctx(req, &c, 0);
    fuse_reply_err(req, -keg_fs_rmdir(mnt(req)->fs, &c, parent, name));
}

static void mnt_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    struct keg_ctx c;
    struct keg_attr a;
    MNT_DBG("symlink(parent=%" PRIu64 ", name=%s, target=%s)", (uint64_t)parent, name, link);
    mnt_ctx(req, &c, 0);
    reply_entry(req, keg_fs_symlink(mnt(req)->fs, &c, parent, name, link, &a), &a);
}

static void mnt_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                       const char *newname, unsigned int flags)
{
    struct keg_ctx c;
    MNT_DBG("rename(parent=%" PRIu64 ", name=%s, newparent=%" PRIu64 ", newname=%s, flags=%u)",
            (uint64_t)parent, name, (uint64_t)newparent, newname, flags);
    mnt_ctx(req, &c, 0);
    /* RENAME_NOREPLACE / _EXCHANGE / _WHITEOUT have the Linux values in
     * KEG_RENAME_* and KEG_FS_RENAME_WHITEOUT; core/fs refuses others (-EINVAL). */
    fuse_reply_err(req, -keg_fs_rename(mnt(req)->fs, &c, parent, name, newparent, newname, flags));
}

static void mnt_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    struct keg_ctx c;
    struct keg_attr a;
    MNT_DBG("link(ino=%" PRIu64 ", newparent=%" PRIu64 ", newname=%s)", (uint64_t)ino,
            (uint64_t)newparent, newname);
    mnt_ctx(req, &c, 0);
    reply_entry(req, keg_fs_link(mnt(req)->fs, &c, ino, newparent, newname, &a), &a);
}

/*----- files -----*/

/* A write-only O_APPEND description (a logger's: `>>`, fopen "a") gets direct
 * I/O.  Through the page cache, the kernel cuts a write that begins inside a
 * page it has not cached into two requests, that page and the rest, and a
 * commit that falls between them (a read of the file or a close of another
 * descriptor on this mount: neither waits for the write) would place the
 * first piece alone at the file's end, where another mounter's append could
 * follow it before the rest.  A direct write of up to max_write bytes (less a
 * page when the caller's buffer is not page-aligned) arrives as one request.
 * Such a description can neither read nor be mapped, so nothing is lost in
 * cached reads; read-write O_APPEND descriptions keep the page cache. */
static int direct_append(int flags)
{
    return (flags & O_ACCMODE) == O_WRONLY && (flags & O_APPEND);
}

/* A description through which the kernel may read pages into its page cache
 * (reads, read-ahead, mmap) as soon as the open is replied to.  A write-only
 * one without O_APPEND puts pages there only with its writes, which mnt_write
 * sees first (mnt_inode_mark_cached). */
static int cache_reader(int flags)
{
    return (flags & O_ACCMODE) != O_WRONLY;
}

static void mnt_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mnt_state *m = mnt(req);
    struct keg_ctx c;
    struct keg_fh *fh = NULL;
    int keep = 0;
    MNT_DBG("open(ino=%" PRIu64 ", flags=0%o)", (uint64_t)ino, (unsigned)fi->flags);
    mnt_ctx(req, &c, 0);
    int rc = keg_fs_open(m->fs, &c, ino, fi->flags, &fh, &keep);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    fi->direct_io = direct_append(fi->flags);
    fi->fh = mnt_handle_new(fi->direct_io ? MNT_HANDLE_DIRECT : 0, fh, ino);
    if (!fi->fh) {
        keg_fs_release(m->fs, fh);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    fi->keep_cache = keep ? 1 : 0;
    if (cache_reader(fi->flags))
        mnt_inode_mark_cached(ino);
    if (fuse_reply_open(req, fi) != 0)    /* interrupted: no release will come */
        keg_fs_release(m->fs, mnt_handle_remove(fi->fh, 0));
}

static void mnt_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                       struct fuse_file_info *fi)
{
    struct mnt_state *m = mnt(req);
    struct keg_ctx c;
    struct keg_attr a;
    struct keg_fh *fh = NULL;
    struct fuse_entry_param e;
    MNT_DBG("create(parent=%" PRIu64 ", name=%s, mode=0%o, flags=0%o)", (uint64_t)parent, name,
            (unsigned)mode, (unsigned)fi->flags);
    mnt_ctx(req, &c, 0);
    int rc = keg_fs_create(m->fs, &c, parent, name, mode, fi->flags, &a, &fh);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    fi->direct_io = direct_append(fi->flags);
    fi->fh = mnt_handle_new(fi->direct_io ? MNT_HANDLE_DIRECT : 0, fh, a.ino);
    if (!fi->fh) {
        keg_fs_release(m->fs, fh);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    fi->keep_cache = 0;
    fill_entry(m, &a, &e);
    mnt_inode_ref(a.ino, 1);
    if (cache_reader(fi->flags))
        mnt_inode_mark_cached(a.ino);
    if (fuse_reply_create(req, &e, fi) != 0) {
        mnt_inode_unref(a.ino, 1);
        keg_fs_release(m->fs, mnt_handle_remove(fi->fh, 0));
    }
}

static void mnt_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    MNT_DBG("read(ino=%" PRIu64 ", size=%zu, off=%lld)", (uint64_t)ino, size, (long long)off);
    struct keg_fh *fh = req_fh(req, ino, fi);
    if (!fh)
        return;
    /* most sequential reads lie inside one cached block: reply from it */
    struct keg_fs *fs = mnt(req)->fs;       /* req is gone once replied to */
    const void *data;
    void *pin;
    int rc = keg_fs_read_pin(fs, fh, (uint64_t)off, size, &data, &pin);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    if (rc > 0) {
        fuse_reply_buf(req, data, size);    /* copies the bytes before it returns */
        keg_fs_read_unpin(fs, pin);
        return;
    }
    char *buf = tbuf_get(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    ssize_t n = keg_fs_read(fs, fh, (uint64_t)off, buf, size);
    if (n < 0)
        fuse_reply_err(req, (int)-n);
    else
        fuse_reply_buf(req, buf, (size_t)n);
}

#ifndef O_DIRECT
#define O_DIRECT __O_DIRECT     /* glibc names it so without _GNU_SOURCE */
#endif

static void mnt_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                      struct fuse_file_info *fi)
{
    struct mnt_dtok t;
    struct keg_fh *fh = NULL;
    MNT_DBG("write(ino=%" PRIu64 ", size=%zu, off=%lld)", (uint64_t)ino, size, (long long)off);
    int direct = mnt_handle_direct(fi->fh) && !fi->writepage;
    int killed = 0;     /* the mode changed behind the kernel's cached one */
    if (!direct && !cache_reader(fi->flags))
        mnt_inode_mark_cached(ino);     /* its pages are in the page cache already */
    int rc = mnt_handle_write_begin(fi->fh, ino, &fh, &t);   /* marks the handle dirty */
    if (rc == 0 && direct && fuse_req_ctx(req)->uid != 0 && keg_fs_fh_privs(fh)) {
        /* the kernel drops S_ISUID/S_ISGID before a write through its page
         * cache, and leaves that to us for a direct one */
        struct keg_ctx c;
        mnt_ctx(req, &c, 1);
        rc = keg_fs_kill_priv(mnt(req)->fs, &c, fh);
        killed = 1;
    }
    if (rc < 0) {
        mnt_handle_write_end(&t);
        fuse_reply_err(req, -rc);
        return;
    }
    /* O_APPEND: core/fs places the bytes at the end when it commits them (the
     * kernel's off may be stale: another mount appended).  Not for the
     * write-back of mmap'ed pages, which have their place. */
    int append = (fi->flags & O_APPEND) && !fi->writepage;
    ssize_t n = append ? keg_fs_append(mnt(req)->fs, fh, (uint64_t)off, buf, size)
                       : keg_fs_write(mnt(req)->fs, fh, (uint64_t)off, buf, size);
    mnt_handle_write_end(&t);
    /* A direct write (O_DIRECT, or a description opened with direct I/O)
     * does not go through the page cache, and the kernel does not drop pages
     * that buffered readers fetched meanwhile (nor after an asynchronous
     * one): drop them before write() returns.  This request holds no page
     * lock of the file (a buffered one would).  Not when the kernel cannot
     * hold a page of the inode (mnt_inode_may_cache: a log file only ever
     * opened write-only, then appended to): the invalidation drops the
     * attributes too, which cost the next open a GETATTR.  Asked after the
     * write: a reader whose open, or a buffered write whose request, came
     * before it has marked the inode by then, and one that comes later sees
     * this write.  The kernel updates the size and times of a direct write
     * itself; a mode we changed (killed) it must read again. */
    if (n > 0 && ((fi->flags & O_DIRECT) || direct) && !fi->writepage &&
        (killed || mnt_inode_may_cache(ino)))
        mnt_inval_range(ino, append ? 0 : (uint64_t)off, append ? 0 : (uint64_t)n);
    if (n < 0)
        fuse_reply_err(req, (int)-n);
    else
        fuse_reply_write(req, (size_t)n);
}

static void mnt_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    MNT_DBG("flush(ino=%" PRIu64 ", owner=%" PRIx64 ")", (uint64_t)ino, fi->lock_owner);
    struct mnt_dtok t;
    struct keg_fh *fh = req_fh(req, ino, fi);
    if (!fh)
        return;
    mnt_handle_commit_begin(fi->fh, ino, &t);   /* EIO if the handle lost data in a crash */
    int rc = keg_fs_flush(mnt(req)->fs, fh, fi->lock_owner);
    mnt_handle_lock_flushed(ino, fi->lock_owner);
    fuse_reply_err(req, -mnt_handle_commit_end(&t, rc));
}

/* An owner noted through a previous worker's handle, at that handle's release. */
static void release_noted_owner(void *arg, uint64_t ino, uint64_t owner)
{
    keg_fs_release_unknown(arg, ino, owner);
}

static void mnt_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    MNT_DBG("release(ino=%" PRIu64 ")", (uint64_t)ino);
    struct mnt_dtok t;
    struct keg_fh *fh = mnt_handle_remove(fi->fh, 0);
    mnt_handle_commit_begin(0, ino, &t);
    /* a description that used flock: the kernel names its lock owner, which a
     * handle of a previous worker (adopted, or never used here) does not know */
    if (fi->flock_release && fh)
        keg_fs_release_owner(mnt(req)->fs, fh, fi->lock_owner);
    else if (fi->flock_release)
        keg_fs_release_unknown(mnt(req)->fs, ino, fi->lock_owner);
    /* and the OFD owners noted for it (mnt_handle.c), which the kernel does not name */
    mnt_handle_lock_release(fi->fh, release_noted_owner, mnt(req)->fs);
    int rc = fh ? keg_fs_release(mnt(req)->fs, fh) : 0;   /* unknown: never used here */
    rc = mnt_handle_commit_end(&t, rc);
    if (rc < 0)
        KEG_WARN("release of inode %" PRIu64 ": %s", (uint64_t)ino, strerror(-rc));
    fuse_reply_err(req, -rc);
}

static void mnt_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    MNT_DBG("fsync(ino=%" PRIu64 ", datasync=%d)", (uint64_t)ino, datasync);
    struct mnt_dtok t;
    struct keg_fh *fh = req_fh(req, ino, fi);
    if (!fh)
        return;
    mnt_handle_commit_begin(fi->fh, ino, &t);   /* EIO if the handle lost data in a crash */
    int rc = keg_fs_fsync(mnt(req)->fs, fh, datasync);
    fuse_reply_err(req, -mnt_handle_commit_end(&t, rc));
}

static void mnt_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                          struct fuse_file_info *fi)
{
    struct keg_ctx c;
    MNT_DBG("fallocate(ino=%" PRIu64 ", mode=0x%x, off=%lld, len=%lld)", (uint64_t)ino, mode,
            (long long)off, (long long)len);
    if (off < 0 || len <= 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    struct keg_fh *fh = req_fh_w(req, ino, fi);
    if (!fh)
        return;
    mnt_ctx(req, &c, 0);
    fuse_reply_err(req, -keg_fs_fallocate(mnt(req)->fs, &c, fh, mode, (uint64_t)off,
                                          (uint64_t)len));
}

static void mnt_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
                                struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
                                struct fuse_file_info *fi_out, size_t len, int flags)
{
    struct keg_ctx c;
    MNT_DBG("copy_file_range(in=%" PRIu64 "@%lld, out=%" PRIu64 "@%lld, len=%zu)",
            (uint64_t)ino_in, (long long)off_in, (uint64_t)ino_out, (long long)off_out, len);
    struct keg_fh *in = req_fh(req, ino_in, fi_in);
    if (!in)
        return;
    struct keg_fh *out = req_fh_w(req, ino_out, fi_out);
    if (!out)
        return;
    mnt_ctx(req, &c, 0);
    ssize_t n = keg_fs_copy_range(mnt(req)->fs, &c, in, (uint64_t)off_in, out,
                                  (uint64_t)off_out, len, flags);
    if (n < 0)
        fuse_reply_err(req, (int)-n);
    else
        fuse_reply_write(req, (size_t)n);
}

static void mnt_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                      struct fuse_file_info *fi)
{
    MNT_DBG("lseek(ino=%" PRIu64 ", off=%lld, whence=%d)", (uint64_t)ino, (long long)off,
            whence);
    struct keg_fh *fh = req_fh(req, ino, fi);
    if (!fh)
        return;
    int64_t r = keg_fs_lseek(mnt(req)->fs, fh, (uint64_t)off, whence);
    if (r < 0)
        fuse_reply_err(req, (int)-r);
    else
        fuse_reply_lseek(req, (off_t)r);
}

/*----- directories -----*/

static void mnt_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mnt_state *m = mnt(req);
    struct keg_ctx c;
    struct keg_dh *dh = NULL;
    MNT_DBG("opendir(ino=%" PRIu64 ")", (uint64_t)ino);
    mnt_ctx(req, &c, 0);
    int rc = keg_fs_opendir(m->fs, &c, ino, &dh);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    fi->fh = mnt_handle_new(1, dh, ino);
    if (!fi->fh) {
        keg_fs_releasedir(m->fs, dh);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (fuse_reply_open(req, fi) != 0)
        keg_fs_releasedir(m->fs, mnt_handle_remove(fi->fh, 1));
}

/* State of one readdir(plus) reply being filled. */
struct dir_fill {
    fuse_req_t  req;
    char       *buf;
    size_t      size;      /* bytes the kernel asked for */
    size_t      pos;       /* bytes used */
    int         plus;
    uint64_t   *refs;      /* inodes given a kernel reference in this reply */
    size_t      nrefs, caprefs;
};

static int is_dot(const char *name)
{
    return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

static int dir_fill(void *arg, const char *name, const struct keg_attr *a, uint64_t next_off)
{
    struct dir_fill *d = arg;
    size_t rem = d->size - d->pos;
    size_t n;
    if (!d->plus) {
        struct stat st;
        memset(&st, 0, sizeof(st));
        st.st_ino = a->ino;
        st.st_mode = a->mode;
        n = fuse_add_direntry(d->req, d->buf + d->pos, rem, name, &st, (off_t)next_off);
        if (n > rem)
            return 1;
        d->pos += n;
        return 0;
    }
    int dot = is_dot(name);
    struct fuse_entry_param e;
    fill_entry(mnt(d->req), a, &e);
    if (dot)
        e.ino = 0;   /* no entry for "." and "..": only the dirent, no reference */
    if (!dot && d->nrefs == d->caprefs) {
        size_t cap = d->caprefs ? d->caprefs * 2 : 64;
        uint64_t *r = keg_realloc(d->refs, cap * sizeof(*r));
        if (!r)
            return 1;   /* not taken: the kernel asks again from here */
        d->refs = r;
        d->caprefs = cap;
    }
    n = fuse_add_direntry_plus(d->req, d->buf + d->pos, rem, name, &e, (off_t)next_off);
    if (n > rem)
        return 1;
    d->pos += n;
    if (!dot) {
        mnt_inode_ref(a->ino, 1);
        d->refs[d->nrefs++] = a->ino;
    }
    return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi, int plus)
{
    struct keg_ctx c;
    struct dir_fill d = {.req = req, .size = size, .plus = plus};
    MNT_DBG("readdir%s(ino=%" PRIu64 ", size=%zu, off=%lld)", plus ? "plus" : "", (uint64_t)ino,
            size, (long long)off);
    struct keg_dh *dh = req_dh(req, ino, fi);
    if (!dh)
        return;
    d.buf = keg_malloc(size ? size : 1);
    if (!d.buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    mnt_ctx(req, &c, 0);
    int rc = keg_fs_readdir(mnt(req)->fs, &c, dh, (uint64_t)off, plus, dir_fill, &d);
    if (rc < 0 && d.pos == 0) {
        fuse_reply_err(req, -rc);
    } else if (fuse_reply_buf(req, d.buf, d.pos) != 0) {
        for (size_t i = 0; i < d.nrefs; i++)   /* the kernel never saw these entries */
            mnt_inode_unref(d.refs[i], 1);
    }
    keg_free(d.refs);
    keg_free(d.buf);
}

static void mnt_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 0);
}

static void mnt_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                            struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 1);
}

static void mnt_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    MNT_DBG("releasedir(ino=%" PRIu64 ")", (uint64_t)ino);
    struct keg_dh *dh = mnt_handle_remove(fi->fh, 1);
    fuse_reply_err(req, dh ? -keg_fs_releasedir(mnt(req)->fs, dh) : 0);
}

static void mnt_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    struct keg_meta *meta = keg_fs_meta(mnt(req)->fs);
    MNT_DBG("fsyncdir(ino=%" PRIu64 ", datasync=%d)", (uint64_t)ino, datasync);
    int rc = keg_meta_sync(meta);
    fuse_reply_err(req, rc == -ENOSYS ? 0 : -rc);
}

/*----- other -----*/

static void mnt_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct statvfs st;
    MNT_DBG("statfs(ino=%" PRIu64 ")", (uint64_t)ino);
    memset(&st, 0, sizeof(st));
    int rc = keg_fs_statfs(mnt(req)->fs, &st);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_statfs(req, &st);
}

static void mnt_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                         size_t size, int flags)
{
    struct keg_ctx c;
    MNT_DBG("setxattr(ino=%" PRIu64 ", name=%s, size=%zu, flags=%d)", (uint64_t)ino, name, size,
            flags);
    /* an access ACL clears S_ISGID unless the caller is in the file's group */
    mnt_ctx(req, &c, strncmp(name, "system.posix_acl_", 17) == 0);
    fuse_reply_err(req, -keg_fs_setxattr(mnt(req)->fs, &c, ino, name, value, size, flags));
}

/* Reply to a getxattr/listxattr: size 0 asks only for the length. */
static void reply_xattr(fuse_req_t req, ssize_t n, const char *buf, size_t size)
{
    if (n < 0)
        fuse_reply_err(req, (int)-n);
    else if (size == 0)
        fuse_reply_xattr(req, (size_t)n);
    else
        fuse_reply_buf(req, buf, (size_t)n);
}

static void mnt_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    struct keg_ctx c;
    char *buf = NULL;
    MNT_DBG("getxattr(ino=%" PRIu64 ", name=%s, size=%zu)", (uint64_t)ino, name, size);
    if (size) {
        buf = tbuf_get(size);
        if (!buf) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
    }
    mnt_ctx(req, &c, 0);
    reply_xattr(req, keg_fs_getxattr(mnt(req)->fs, &c, ino, name, buf, size), buf, size);
}

static void mnt_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct keg_ctx c;
    char *buf = NULL;
    MNT_DBG("listxattr(ino=%" PRIu64 ", size=%zu)", (uint64_t)ino, size);
    if (size) {
        buf = tbuf_get(size);
        if (!buf) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
    }
    mnt_ctx(req, &c, 0);
    reply_xattr(req, keg_fs_listxattr(mnt(req)->fs, &c, ino, buf, size), buf, size);
}

static void mnt_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    struct keg_ctx c;
    MNT_DBG("removexattr(ino=%" PRIu64 ", name=%s)", (uint64_t)ino, name);
    mnt_ctx(req, &c, 0);
    fuse_reply_err(req, -keg_fs_removexattr(mnt(req)->fs, &c, ino, name));
}

/* struct flock (l_len 0 = to EOF) <-> struct keg_plock (end inclusive). */
static void flock_to_plock(const struct flock *l, struct keg_plock *p)
{
    memset(p, 0, sizeof(*p));
    p->type = (uint32_t)l->l_type;
    p->pid = (uint32_t)l->l_pid;
    if (l->l_len > 0) {
        p->start = (uint64_t)l->l_start;
        p->end = (uint64_t)l->l_start + (uint64_t)l->l_len - 1;
    } else if (l->l_len == 0) {
        p->start = (uint64_t)l->l_start;
        p->end = UINT64_MAX;
    } else {
        p->start = (uint64_t)(l->l_start + l->l_len);
        p->end = (uint64_t)l->l_start - 1;
    }
}

static void mnt_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
                      struct flock *lock)
{
    struct keg_plock p;
    MNT_DBG("getlk(ino=%" PRIu64 ", owner=%" PRIx64 ", type=%d)", (uint64_t)ino, fi->lock_owner,
            lock->l_type);
    struct keg_fh *fh = req_fh(req, ino, fi);
    if (!fh)
        return;
    flock_to_plock(lock, &p);
    int rc = keg_fs_getlk(mnt(req)->fs, fh, fi->lock_owner, &p);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    lock->l_type = (short)p.type;
    lock->l_whence = SEEK_SET;
    lock->l_start = (off_t)p.start;
    lock->l_len = p.end == UINT64_MAX ? 0 : (off_t)(p.end - p.start + 1);
    lock->l_pid = (pid_t)p.pid;
    fuse_reply_lock(req, lock);
}

/* The answer to a lock request.  A wait the worker gave up because it hands over
 * (-ERESTART) is not answered: the kernel keeps the request and resends it to the
 * next worker, where the wait goes on.  A kernel that cannot resend gets EINTR,
 * which the C library's callers retry (or see, as after a signal). */
static void reply_lock(fuse_req_t req, int rc)
{
    if (rc == -ERESTART && mnt(req)->resend) {
        MNT_DBG("lock wait left to the next worker");
        fuse_reply_none(req);       /* frees the request, sends nothing */
        return;
    }
    fuse_reply_err(req, rc == -ERESTART ? EINTR : -rc);
}

/* A blocking lock wait that a FUSE INTERRUPT (signal in the caller) cancels. */
struct lock_wait {
    struct keg_fs *fs;
    uint64_t       owner;
};

static void lock_interrupted(fuse_req_t req, void *data)
{
    struct lock_wait *w = data;
    KEG_DEBUG("interrupt of lock wait, owner %" PRIx64, w->owner);
    keg_fs_interrupt(w->fs, w->owner);
}

static void mnt_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
                      struct flock *lock, int sleep)
{
    struct keg_plock p;
    struct lock_wait w = {.fs = mnt(req)->fs, .owner = fi->lock_owner};
    MNT_DBG("setlk(ino=%" PRIu64 ", owner=%" PRIx64 ", type=%d, sleep=%d)", (uint64_t)ino,
            fi->lock_owner, lock->l_type, sleep);
    struct keg_fh *fh = req_fh(req, ino, fi);
    if (!fh)
        return;
    flock_to_plock(lock, &p);
    if (p.type != F_UNLCK)          /* noted before the lock exists (see mnt_release) */
        mnt_handle_lock_note(fi->fh, ino, fi->lock_owner);
    if (sleep) {
        fuse_req_interrupt_func(req, lock_interrupted, &w);
        if (fuse_req_interrupted(req)) {   /* before the wait began: would be lost */
            fuse_req_interrupt_func(req, NULL, NULL);
            fuse_reply_err(req, EINTR);
            return;
        }
    }
    int rc = keg_fs_setlk(w.fs, fh, fi->lock_owner, &p, sleep);
    if (sleep)
        fuse_req_interrupt_func(req, NULL, NULL);   /* w dies with this frame */
    reply_lock(req, rc);
}

static void mnt_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
    struct lock_wait w = {.fs = mnt(req)->fs, .owner = fi->lock_owner};
    int sleep = !(op & LOCK_NB) && !(op & LOCK_UN);
    MNT_DBG("flock(ino=%" PRIu64 ", owner=%" PRIx64 ", op=%d)", (uint64_t)ino, fi->lock_owner,
            op);
    struct keg_fh *fh = req_fh(req, ino, fi);
    if (!fh)
        return;
    if (sleep) {
        fuse_req_interrupt_func(req, lock_interrupted, &w);
        if (fuse_req_interrupted(req)) {
            fuse_req_interrupt_func(req, NULL, NULL);
            fuse_reply_err(req, EINTR);
            return;
        }
    }
    int rc = keg_fs_flock(w.fs, fh, fi->lock_owner, op);
    if (sleep)
        fuse_req_interrupt_func(req, NULL, NULL);
    reply_lock(req, rc);
}

static const struct fuse_lowlevel_ops mnt_ops = {
    .init = mnt_init,
    .destroy = mnt_destroy,
    .lookup = mnt_lookup,
    .forget = mnt_forget,
    .forget_multi = mnt_forget_multi,
    .getattr = mnt_getattr,
    .setattr = mnt_setattr,
    .readlink = mnt_readlink,
    .mknod = mnt_mknod,
    .mkdir = mnt_mkdir,
    .unlink = mnt_unlink,
    .rmdir = mnt_rmdir,
    .symlink = mnt_symlink,
    .rename = mnt_rename,
    .link = mnt_link,
    .open = mnt_open,
    .create = mnt_create,
    .read = mnt_read,
    .write = mnt_write,
    .flush = mnt_flush,
    .release = mnt_release,
    .fsync = mnt_fsync,
    .fallocate = mnt_fallocate,
    .copy_file_range = mnt_copy_file_range,
    .lseek = mnt_lseek,
    .opendir = mnt_opendir,
    .readdir = mnt_readdir,
    .readdirplus = mnt_readdirplus,
    .releasedir = mnt_releasedir,
    .fsyncdir = mnt_fsyncdir,
    .statfs = mnt_statfs,
    .setxattr = mnt_setxattr,
    .getxattr = mnt_getxattr,
    .listxattr = mnt_listxattr,
    .removexattr = mnt_removexattr,
    .getlk = mnt_getlk,
    .setlk = mnt_setlk,
    .flock = mnt_flock,
};

const struct fuse_lowlevel_ops *mnt_fuse_ops(void)
{
    return &mnt_ops;
}
