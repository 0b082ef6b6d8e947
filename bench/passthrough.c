/* passthrough.c -- keg_passthrough: a minimal FUSE low-level passthrough of a local
 * directory, the reference every KegFS benchmark is compared against in the same run.
 *
 *   keg_passthrough [--debug] [-o FUSEOPTS] SOURCE_DIR MOUNTPOINT
 *
 * Runs in the foreground until unmounted or sent SIGTERM/SIGINT/SIGHUP.
 *
 * DESIGN
 * The kernel sees the same FUSE setup as a kegfs mount, so that a ratio between the two
 * measures the file system and not the plumbing: libfuse multi-threaded loop (clone_fd
 * off, up to 64 threads, 10 idle), max_write 1 MiB, default_permissions, allow_other as
 * root, 1 s attribute/entry timeouts, writeback cache, splice and readdirplus off, async
 * read, atomic O_TRUNC and parallel directory operations on.  kegfs buffers writes in its
 * own memory; this daemon forwards every request to the local file system at once.
 *
 * Inodes: each FUSE node id is the address of a struct pt_inode holding an O_PATH
 * descriptor of the underlying object; (st_dev, st_ino) pairs are kept in a hash so that
 * hard links and repeated lookups map to one node.  Operations on a node use its O_PATH
 * descriptor with *at() calls, or /proc/self/fd/N where Linux has no *at() form
 * (chmod, truncate, utimens, reopen).  The daemon acts with its own credentials (root):
 * default_permissions makes the kernel check access, which is all a benchmark needs.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 34

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "keg/mem.h"

#define PT_TIMEOUT  1.0
#define PT_HASH     4096u

struct pt_inode {
    int              fd;          /* O_PATH descriptor of the object */
    dev_t            dev;
    ino_t            ino;
    uint64_t         nlookup;     /* kernel references; freed at 0 (root never) */
    struct pt_inode *next;        /* hash chain */
};

struct pt_dir {
    DIR           *dp;
    off_t          offset;        /* position dp is at, as telldir reports it */
    struct dirent *entry;         /* read but not yet returned (buffer was full) */
};

static struct pt_inode  pt_root;
static struct pt_inode *pt_hash[PT_HASH];
static pthread_mutex_t  pt_lock = PTHREAD_MUTEX_INITIALIZER;
static int              pt_debug;

static struct pt_inode *pt_ino(fuse_ino_t ino)
{
    if (ino == FUSE_ROOT_ID)
        return &pt_root;
    return (struct pt_inode *)(uintptr_t)ino;
}

static int pt_fd(fuse_ino_t ino)
{
    return pt_ino(ino)->fd;
}

static unsigned pt_slot(dev_t dev, ino_t ino)
{
    return (unsigned)((ino * 0x9E3779B97F4A7C15ULL + dev) >> 20) % PT_HASH;
}

/* "/proc/self/fd/N" for an O_PATH descriptor, into buf (>= 32 bytes). */
static const char *pt_proc(char *buf, size_t len, int fd)
{
    snprintf(buf, len, "/proc/self/fd/%d", fd);
    return buf;
}

/* Finds or adds the node of (st->st_dev, st->st_ino), adding one lookup.  TAKES fd: it is
 * kept by a new node or closed when the node already exists.  LOCKS: pt_lock inside.
 * Returns the node or NULL (ENOMEM; fd closed). */
static struct pt_inode *pt_get(int fd, const struct stat *st)
{
    unsigned s = pt_slot(st->st_dev, st->st_ino);
    struct pt_inode *n;

    if (st->st_dev == pt_root.dev && st->st_ino == pt_root.ino) {
        close(fd);
        return &pt_root;
    }
    pthread_mutex_lock(&pt_lock);
    for (n = pt_hash[s]; n; n = n->next) {
        if (n->dev == st->st_dev && n->ino == st->st_ino)
            break;
    }
    if (n) {
        n->nlookup++;
        pthread_mutex_unlock(&pt_lock);
        close(fd);
        return n;
    }
    n = keg_calloc(1, sizeof(*n));
    if (!n) {
        pthread_mutex_unlock(&pt_lock);
        close(fd);
        return NULL;
    }
    n->fd = fd;
    n->dev = st->st_dev;
    n->ino = st->st_ino;
    n->nlookup = 1;
    n->next = pt_hash[s];
    pt_hash[s] = n;
    pthread_mutex_unlock(&pt_lock);
    return n;
}

/* Drops nlookup references; frees the node at zero.  LOCKS: pt_lock inside. */
static void pt_put(struct pt_inode *n, uint64_t nlookup)
{
    struct pt_inode **pp;

    if (n == &pt_root)
        return;
    pthread_mutex_lock(&pt_lock);
    n->nlookup -= nlookup < n->nlookup ? nlookup : n->nlookup;
    if (n->nlookup) {
        pthread_mutex_unlock(&pt_lock);
        return;
    }
    for (pp = &pt_hash[pt_slot(n->dev, n->ino)]; *pp; pp = &(*pp)->next) {
        if (*pp == n) {
            *pp = n->next;
            break;
        }
    }
    pthread_mutex_unlock(&pt_lock);
    close(n->fd);
    keg_free(n);
}

/* Fills e for name in parent (adding a lookup).  Returns 0 or -errno. */
static int pt_entry(fuse_ino_t parent, const char *name, struct fuse_entry_param *e)
{
    struct pt_inode *n;
    int fd;

    memset(e, 0, sizeof(*e));
    e->attr_timeout = PT_TIMEOUT;
    e->entry_timeout = PT_TIMEOUT;
    fd = openat(pt_fd(parent), name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    n = pt_get(fd, &e->attr);
    if (!n)
        return -ENOMEM;
    e->ino = n == &pt_root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
    return 0;
}

static void pt_reply_entry(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    int rc = pt_entry(parent, name, &e);

    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_entry(req, &e);
}

/*----- session -----*/

static void pt_init(void *userdata, struct fuse_conn_info *conn)
{
    const unsigned want = FUSE_CAP_ASYNC_READ | FUSE_CAP_ATOMIC_O_TRUNC |
                          FUSE_CAP_PARALLEL_DIROPS;
    const unsigned never = FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_READDIRPLUS |
                           FUSE_CAP_READDIRPLUS_AUTO | FUSE_CAP_SPLICE_READ |
                           FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
                           FUSE_CAP_EXPORT_SUPPORT;

    (void)userdata;
    conn->want |= want & conn->capable;
    conn->want &= ~never;
    conn->max_write = 1u << 20;
    conn->max_background = 64;
    conn->congestion_threshold = 48;
    conn->time_gran = 1;
    if (pt_debug)
        fprintf(stderr, "keg_passthrough: FUSE %u.%u want 0x%x max_write %u\n",
                conn->proto_major, conn->proto_minor, conn->want, conn->max_write);
}

/*----- namespace -----*/

static void pt_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    pt_reply_entry(req, parent, name);
}

static void pt_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    pt_put(pt_ino(ino), nlookup);
    fuse_reply_none(req);
}

static void pt_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
    for (size_t i = 0; i < count; i++)
        pt_put(pt_ino(f[i].ino), f[i].nlookup);
    fuse_reply_none(req);
}

static void pt_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct stat st;

    (void)fi;
    if (fstatat(pt_fd(ino), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_attr(req, &st, PT_TIMEOUT);
}

static void pt_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
                       struct fuse_file_info *fi)
{
    int fd = pt_fd(ino);
    char path[64];
    int rc = 0;

    pt_proc(path, sizeof(path), fd);
    if (valid & FUSE_SET_ATTR_MODE) {
        rc = fi ? fchmod((int)fi->fh, attr->st_mode) : chmod(path, attr->st_mode);
        if (rc < 0)
            goto fail;
    }
    if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
        uid_t u = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
        gid_t g = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
        rc = fchownat(fd, "", u, g, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
        if (rc < 0)
            goto fail;
    }
    if (valid & FUSE_SET_ATTR_SIZE) {
        rc = fi ? ftruncate((int)fi->fh, attr->st_size) : truncate(path, attr->st_size);
        if (rc < 0)
            goto fail;
    }
    if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
        struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
        if (valid & FUSE_SET_ATTR_ATIME_NOW)
            tv[0].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_ATIME)
            tv[0] = attr->st_atim;
        if (valid & FUSE_SET_ATTR_MTIME_NOW)
            tv[1].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_MTIME)
            tv[1] = attr->st_mtim;
        rc = fi ? futimens((int)fi->fh, tv) : utimensat(AT_FDCWD, path, tv, 0);
        if (rc < 0)
            goto fail;
    }
    pt_getattr(req, ino, fi);
    return;
fail:
    fuse_reply_err(req, errno);
}

static void pt_readlink(fuse_req_t req, fuse_ino_t ino)
{
    char buf[PATH_MAX + 1];
    ssize_t n = readlinkat(pt_fd(ino), "", buf, sizeof(buf));

    if (n < 0)
        fuse_reply_err(req, errno);
    else if ((size_t)n >= sizeof(buf))
        fuse_reply_err(req, ENAMETOOLONG);
    else {
        buf[n] = '\0';
        fuse_reply_readlink(req, buf);
    }
}

static void pt_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
    if (mknodat(pt_fd(parent), name, mode, rdev) < 0)
        fuse_reply_err(req, errno);
    else
        pt_reply_entry(req, parent, name);
}

static void pt_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    if (mkdirat(pt_fd(parent), name, mode) < 0)
        fuse_reply_err(req, errno);
    else
        pt_reply_entry(req, parent, name);
}

static void pt_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    if (symlinkat(link, pt_fd(parent), name) < 0)
        fuse_reply_err(req, errno);
    else
        pt_reply_entry(req, parent, name);
}

static void pt_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    char path[64];

    pt_proc(path, sizeof(path), pt_fd(ino));
    if (linkat(AT_FDCWD, path, pt_fd(newparent), newname, AT_SYMLINK_FOLLOW) < 0)
        fuse_reply_err(req, errno);
    else
        pt_reply_entry(req, newparent, newname);
}

static void pt_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fuse_reply_err(req, unlinkat(pt_fd(parent), name, 0) < 0 ? errno : 0);
}

static void pt_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fuse_reply_err(req, unlinkat(pt_fd(parent), name, AT_REMOVEDIR) < 0 ? errno : 0);
}

static void pt_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    int rc = renameat2(pt_fd(parent), name, pt_fd(newparent), newname, flags);

    fuse_reply_err(req, rc < 0 ? errno : 0);
}

static void pt_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct statvfs sv;

    if (fstatvfs(pt_fd(ino), &sv) < 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_statfs(req, &sv);
}

/*----- files -----*/

static void pt_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    char path[64];
    int fd;

    pt_proc(path, sizeof(path), pt_fd(ino));
    fd = open(path, (fi->flags & ~O_NOFOLLOW) | O_CLOEXEC);
    if (fd < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    fi->fh = (uint64_t)fd;
    fi->keep_cache = 0;
    fi->direct_io = 0;
    if (fuse_reply_open(req, fi) == -ENOENT)
        close(fd);   /* the request was interrupted: no release will come */
}

static void pt_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    struct fuse_entry_param e;
    int fd, rc;

    fd = openat(pt_fd(parent), name, (fi->flags | O_CREAT) & ~O_NOFOLLOW, mode);
    if (fd < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    rc = pt_entry(parent, name, &e);
    if (rc) {
        close(fd);
        fuse_reply_err(req, -rc);
        return;
    }
    fi->fh = (uint64_t)fd;
    fi->keep_cache = 0;
    fi->direct_io = 0;
    if (fuse_reply_create(req, &e, fi) == -ENOENT) {
        close(fd);
        pt_put(pt_ino(e.ino), 1);
    }
}

static void pt_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);

    (void)ino;
    bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    bv.buf[0].fd = (int)fi->fh;
    bv.buf[0].pos = off;
    fuse_reply_data(req, &bv, FUSE_BUF_NO_SPLICE);
}

static void pt_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    size_t done = 0;

    (void)ino;
    while (done < size) {
        ssize_t n = pwrite((int)fi->fh, buf + done, size - done, off + (off_t)done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (done)
                break;
            fuse_reply_err(req, errno);
            return;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    fuse_reply_write(req, done);
}

static void pt_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    int fd = dup((int)fi->fh);

    (void)ino;
    /* closing a duplicate releases POSIX locks and reports close errors, like close(2) */
    fuse_reply_err(req, fd < 0 ? errno : (close(fd) < 0 ? errno : 0));
}

static void pt_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    close((int)fi->fh);
    fuse_reply_err(req, 0);
}

static void pt_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    int rc;

    (void)ino;
    rc = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
    fuse_reply_err(req, rc < 0 ? errno : 0);
}

static void pt_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi)
{
    (void)ino;
    fuse_reply_err(req, fallocate((int)fi->fh, mode, off, len) < 0 ? errno : 0);
}

static void pt_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
    (void)ino;
    fuse_reply_err(req, flock((int)fi->fh, op) < 0 ? errno : 0);
}

/*----- directories -----*/

static void pt_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pt_dir *d = keg_calloc(1, sizeof(*d));
    int fd;

    if (!d) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    fd = openat(pt_fd(ino), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        goto fail;
    d->dp = fdopendir(fd);
    if (!d->dp) {
        int err = errno;
        close(fd);
        errno = err;
        goto fail;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    if (fuse_reply_open(req, fi) == -ENOENT) {
        closedir(d->dp);
        keg_free(d);
    }
    return;
fail:
    fuse_reply_err(req, errno);
    keg_free(d);
}

static void pt_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    struct pt_dir *d = (struct pt_dir *)(uintptr_t)fi->fh;
    char *buf = keg_malloc(size);
    size_t used = 0;

    (void)ino;
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (off != d->offset) {
        seekdir(d->dp, off);
        d->entry = NULL;
        d->offset = off;
    }
    for (;;) {
        struct stat st;
        size_t n;

        if (!d->entry) {
            errno = 0;
            d->entry = readdir(d->dp);
            if (!d->entry) {
                if (errno && !used) {
                    int err = errno;
                    keg_free(buf);
                    fuse_reply_err(req, err);
                    return;
                }
                break;
            }
        }
        memset(&st, 0, sizeof(st));
        st.st_ino = d->entry->d_ino;
        st.st_mode = (mode_t)d->entry->d_type << 12;
        n = fuse_add_direntry(req, buf + used, size - used, d->entry->d_name, &st,
                              d->entry->d_off);
        if (n > size - used)
            break;
        used += n;
        d->offset = d->entry->d_off;
        d->entry = NULL;
    }
    fuse_reply_buf(req, buf, used);
    keg_free(buf);
}

static void pt_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pt_dir *d = (struct pt_dir *)(uintptr_t)fi->fh;

    (void)ino;
    closedir(d->dp);
    keg_free(d);
    fuse_reply_err(req, 0);
}

static void pt_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                        struct fuse_file_info *fi)
{
    struct pt_dir *d = (struct pt_dir *)(uintptr_t)fi->fh;
    int fd = dirfd(d->dp);
    int rc;

    (void)ino;
    rc = datasync ? fdatasync(fd) : fsync(fd);
    fuse_reply_err(req, rc < 0 ? errno : 0);
}

static const struct fuse_lowlevel_ops pt_ops = {
    .init = pt_init,
    .lookup = pt_lookup,
    .forget = pt_forget,
    .forget_multi = pt_forget_multi,
    .getattr = pt_getattr,
    .setattr = pt_setattr,
    .readlink = pt_readlink,
    .mknod = pt_mknod,
    .mkdir = pt_mkdir,
    .symlink = pt_symlink,
    .link = pt_link,
    .unlink = pt_unlink,
    .rmdir = pt_rmdir,
    .rename = pt_rename,
    .statfs = pt_statfs,
    .open = pt_open,
    .create = pt_create,
    .read = pt_read,
    .write = pt_write,
    .flush = pt_flush,
    .release = pt_release,
    .fsync = pt_fsync,
    .fallocate = pt_fallocate,
    .flock = pt_flock,
    .opendir = pt_opendir,
    .readdir = pt_readdir,
    .releasedir = pt_releasedir,
    .fsyncdir = pt_fsyncdir,
};

static int usage(void)
{
    fprintf(stderr, "usage: keg_passthrough [--debug] [-o FUSEOPTS] SOURCE_DIR MOUNTPOINT\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    struct fuse_session *se = NULL;
    struct fuse_loop_config *cfg = NULL;
    const char *src = NULL, *mnt = NULL, *extra = NULL;
    char opts[512];
    struct stat st;
    int rc = 1;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--debug")) {
            pt_debug = 1;
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            extra = argv[++i];
        } else if (argv[i][0] == '-') {
            return usage();
        } else if (!src) {
            src = argv[i];
        } else if (!mnt) {
            mnt = argv[i];
        } else {
            return usage();
        }
    }
    if (!src || !mnt)
        return usage();
    pt_root.fd = open(src, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (pt_root.fd < 0 || fstat(pt_root.fd, &st) < 0) {
        fprintf(stderr, "keg_passthrough: %s: %s\n", src, strerror(errno));
        return 1;
    }
    pt_root.dev = st.st_dev;
    pt_root.ino = st.st_ino;
    pt_root.nlookup = 2;
    snprintf(opts, sizeof(opts), "fsname=keg_passthrough,subtype=keg_passthrough,"
             "default_permissions%s%s%s", geteuid() == 0 ? ",allow_other" : "",
             extra ? "," : "", extra ? extra : "");
    if (fuse_opt_add_arg(&args, "keg_passthrough") || fuse_opt_add_arg(&args, "-o") ||
        fuse_opt_add_arg(&args, opts) || (pt_debug && fuse_opt_add_arg(&args, "-d")))
        goto out;
    se = fuse_session_new(&args, &pt_ops, sizeof(pt_ops), NULL);
    if (!se)
        goto out;
    if (fuse_set_signal_handlers(se) != 0)
        goto out;
    if (fuse_session_mount(se, mnt) != 0)
        goto out_signals;
    cfg = fuse_loop_cfg_create();
    if (!cfg)
        goto out_unmount;
    fuse_loop_cfg_set_clone_fd(cfg, 0);
    fuse_loop_cfg_set_idle_threads(cfg, 10);
    fuse_loop_cfg_set_max_threads(cfg, 64);
    rc = fuse_session_loop_mt(se, cfg) < 0 ? 1 : 0;
    fuse_loop_cfg_destroy(cfg);
out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out:
    if (se)
        fuse_session_destroy(se);
    fuse_opt_free_args(&args);
    close(pt_root.fd);
    return rc;
}
