/* meta_call.c -- the checked calls of the metadata engines: keg_meta_<op>().
 *
 * DESIGN
 * Every call from core/fs, the tools and the CSI driver into an engine goes
 * through one function here (SQLite sqlite3OsRead, Redis connWrite, our
 * keg_obj_get).  In order, each one:
 *   1. validates what every engine would refuse alike (names, modes, symlink
 *      targets, rename flags, xattr names; see keg/meta.h), so that engines
 *      hold no copy of these rules;
 *   2. calls the engine, or returns -ENOSYS for an op it leaves NULL;
 *   3. checks the return contract with KEG_ASSERT: -errno within
 *      [-4095, -1], counts no larger than asked, out-params set on success;
 *   4. counts the request and its latency in m->stats (relaxed atomics; a
 *      reader sees each field whole, not a consistent set).
 * Validation failures and missing ops are not counted: no request was made.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "keg/meta.h"

static const char *const mc_names[KEG_META_OP_N] = {
    [KEG_META_OP_FORMAT_INIT] = "format_init",
    [KEG_META_OP_FORMAT_LOAD] = "format_load",
    [KEG_META_OP_DESTROY] = "destroy",
    [KEG_META_OP_ALLOC_IDS] = "alloc_ids",
    [KEG_META_OP_STATFS] = "statfs",
    [KEG_META_OP_SESSION_BEGIN] = "session_begin",
    [KEG_META_OP_SESSION_HEARTBEAT] = "session_heartbeat",
    [KEG_META_OP_SESSION_RESUME] = "session_resume",
    [KEG_META_OP_SESSION_END] = "session_end",
    [KEG_META_OP_SESSION_LIST] = "session_list",
    [KEG_META_OP_SESSION_CLEAN_STALE] = "session_clean_stale",
    [KEG_META_OP_LOOKUP] = "lookup",
    [KEG_META_OP_GETATTR] = "getattr",
    [KEG_META_OP_SETATTR] = "setattr",
    [KEG_META_OP_MKNOD] = "mknod",
    [KEG_META_OP_LINK] = "link",
    [KEG_META_OP_UNLINK] = "unlink",
    [KEG_META_OP_RMDIR] = "rmdir",
    [KEG_META_OP_RENAME] = "rename",
    [KEG_META_OP_READDIR] = "readdir",
    [KEG_META_OP_READLINK] = "readlink",
    [KEG_META_OP_PURGE] = "purge",
    [KEG_META_OP_READ_CHUNK] = "read_chunk",
    [KEG_META_OP_WRITE_SLICES] = "write_slices",
    [KEG_META_OP_TRUNCATE] = "truncate",
    [KEG_META_OP_COMPACT_CHUNK] = "compact_chunk",
    [KEG_META_OP_DELQ_PEEK] = "delq_peek",
    [KEG_META_OP_DELQ_ACK] = "delq_ack",
    [KEG_META_OP_GETXATTR] = "getxattr",
    [KEG_META_OP_SETXATTR] = "setxattr",
    [KEG_META_OP_LISTXATTR] = "listxattr",
    [KEG_META_OP_REMOVEXATTR] = "removexattr",
    [KEG_META_OP_FLOCK] = "flock",
    [KEG_META_OP_GETLK] = "getlk",
    [KEG_META_OP_SETLK] = "setlk",
    [KEG_META_OP_SYNC] = "sync",
    [KEG_META_OP_NEXT_CHUNK] = "next_chunk",
    [KEG_META_OP_NAME_CACHE_STATS] = "name_cache_stats",
};

const char *keg_meta_op_name(enum keg_meta_op op)
{
    return (unsigned)op < KEG_META_OP_N ? mc_names[op] : "?";
}

const struct keg_meta_op_stats *keg_meta_stats(const struct keg_meta *m)
{
    return m->stats;
}

int keg_meta_is_failure(int64_t rc)
{
    switch (-rc) {
    case EIO: case ENOMEM: case ETIMEDOUT: case ECONNREFUSED: case ECONNRESET:
    case ENOTCONN: case EPIPE: case EHOSTUNREACH: case EPROTO: case EBADMSG: case EROFS:
        return 1;
    default:
        return 0;
    }
}

/*----------------------------------------------------------------------------
 * Validation
 *--------------------------------------------------------------------------*/

int keg_meta_check_name(const char *name)
{
    if (!name || !name[0] || strchr(name, '/'))
        return -EINVAL;
    if (strlen(name) > KEG_NAME_MAX)
        return -ENAMETOOLONG;
    return 0;
}

int keg_meta_check_target(const char *target)
{
    if (!target || !target[0])
        return -EINVAL;
    if (strlen(target) > KEG_SYMLINK_MAX)
        return -ENAMETOOLONG;
    return 0;
}

/* A name that an op adds or removes: also not "." or "..". */
static int mc_check_entry(const char *name)
{
    int rc = keg_meta_check_name(name);
    if (rc == 0 && name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
        rc = -EINVAL;
    return rc;
}

static int mc_check_xname(const char *name)
{
    if (!name || !name[0])
        return -EINVAL;
    return strnlen(name, KEG_XATTR_NAME_MAX + 1) > KEG_XATTR_NAME_MAX ? -ERANGE : 0;
}

static int mc_check_node(uint64_t ino, uint32_t mode, const char *target)
{
    switch (mode & S_IFMT) {
    case S_IFREG: case S_IFDIR: case S_IFCHR: case S_IFBLK: case S_IFIFO: case S_IFSOCK:
        break;
    case S_IFLNK: {
        int rc = keg_meta_check_target(target);
        if (rc)
            return rc;
        break;
    }
    default:
        return -EINVAL;
    }
    return ino <= KEG_ROOT_INO ? -EINVAL : 0;
}

static int mc_check_rename_flags(unsigned flags)
{
    if (flags & ~(KEG_RENAME_NOREPLACE | KEG_RENAME_EXCHANGE))
        return -EINVAL;
    if ((flags & KEG_RENAME_NOREPLACE) && (flags & KEG_RENAME_EXCHANGE))
        return -EINVAL;
    return 0;
}

/*----------------------------------------------------------------------------
 * Counting and the return contract
 *--------------------------------------------------------------------------*/

static uint64_t mc_begin(void)
{
    return keg_metrics_now_ns();
}

/* Count a request of kind op that started at t0 and returned rc; returns rc. */
static int64_t mc_end(struct keg_meta *m, enum keg_meta_op op, uint64_t t0, int64_t rc)
{
    KEG_ASSERT(rc >= -4095);
    if (m->stats) {
        struct keg_meta_op_stats *s = &m->stats[op];
        __atomic_add_fetch(&s->requests, 1, __ATOMIC_RELAXED);
        if (keg_meta_is_failure(rc))
            __atomic_add_fetch(&s->errors, 1, __ATOMIC_RELAXED);
        keg_metrics_observe(&s->latency, keg_metrics_now_ns() - t0);
    }
    return rc;
}

/* An op that returns 0 or -errno. */
static int mc_status(struct keg_meta *m, enum keg_meta_op op, uint64_t t0, int rc)
{
    KEG_ASSERT(rc <= 0);
    return (int)mc_end(m, op, t0, rc);
}

/*----------------------------------------------------------------------------
 * Volume and sessions
 *--------------------------------------------------------------------------*/

int keg_meta_format_init(struct keg_meta *m, const struct keg_format *f, uint32_t root_mode,
                         uint32_t uid, uint32_t gid, int force)
{
    if (!m->ops->format_init)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->format_init(m, f, root_mode, uid, gid, force);
    return mc_status(m, KEG_META_OP_FORMAT_INIT, t0, rc);
}

int keg_meta_format_load(struct keg_meta *m, struct keg_format *f)
{
    if (!m->ops->format_load)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->format_load(m, f);
    return mc_status(m, KEG_META_OP_FORMAT_LOAD, t0, rc);
}

int keg_meta_destroy(struct keg_meta *m)
{
    if (!m->ops->destroy)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->destroy(m);
    return mc_status(m, KEG_META_OP_DESTROY, t0, rc);
}

int keg_meta_alloc_ids(struct keg_meta *m, int kind, uint32_t n, uint64_t *first)
{
    if (!m->ops->alloc_ids)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->alloc_ids(m, kind, n, first);
    KEG_ASSERT(rc < 0 || *first != 0);
    return mc_status(m, KEG_META_OP_ALLOC_IDS, t0, rc);
}

int keg_meta_statfs(struct keg_meta *m, uint64_t *used_bytes, uint64_t *used_inodes)
{
    if (!m->ops->statfs)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->statfs(m, used_bytes, used_inodes);
    return mc_status(m, KEG_META_OP_STATFS, t0, rc);
}

int keg_meta_session_begin(struct keg_meta *m, const char *info, uint64_t *sid)
{
    if (!m->ops->session_begin)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->session_begin(m, info, sid);
    KEG_ASSERT(rc < 0 || *sid != 0);
    return mc_status(m, KEG_META_OP_SESSION_BEGIN, t0, rc);
}

int keg_meta_session_resume(struct keg_meta *m, uint64_t sid, const char *info)
{
    if (!m->ops->session_resume)
        return -ENOSYS;
    if (sid == 0)
        return -EINVAL;
    uint64_t t0 = mc_begin();
    int rc = m->ops->session_resume(m, sid, info);
    return mc_status(m, KEG_META_OP_SESSION_RESUME, t0, rc);
}

int keg_meta_session_heartbeat(struct keg_meta *m)
{
    if (!m->ops->session_heartbeat)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->session_heartbeat(m);
    return mc_status(m, KEG_META_OP_SESSION_HEARTBEAT, t0, rc);
}

int keg_meta_session_end(struct keg_meta *m)
{
    if (!m->ops->session_end)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->session_end(m);
    return mc_status(m, KEG_META_OP_SESSION_END, t0, rc);
}

int keg_meta_session_list(struct keg_meta *m, keg_meta_session_cb *cb, void *arg)
{
    if (!m->ops->session_list)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->session_list(m, cb, arg);
    return (int)mc_end(m, KEG_META_OP_SESSION_LIST, t0, rc);  /* a callback's stop value */
}

int keg_meta_session_clean_stale(struct keg_meta *m, int64_t max_age, uint32_t *cleaned)
{
    if (!m->ops->session_clean_stale)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->session_clean_stale(m, max_age, cleaned);
    return mc_status(m, KEG_META_OP_SESSION_CLEAN_STALE, t0, rc);
}

/*----------------------------------------------------------------------------
 * Namespace
 *--------------------------------------------------------------------------*/

int keg_meta_lookup(struct keg_meta *m, uint64_t parent, const char *name, struct keg_attr *out)
{
    int rc = keg_meta_check_name(name);
    if (rc)
        return rc;
    if (!m->ops->lookup)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    rc = m->ops->lookup(m, parent, name, out);
    KEG_ASSERT(rc < 0 || !out || out->ino != 0);
    return mc_status(m, KEG_META_OP_LOOKUP, t0, rc);
}

int keg_meta_getattr(struct keg_meta *m, uint64_t ino, struct keg_attr *out)
{
    if (!m->ops->getattr)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->getattr(m, ino, out);
    KEG_ASSERT(rc < 0 || !out || out->ino == ino);
    return mc_status(m, KEG_META_OP_GETATTR, t0, rc);
}

int keg_meta_setattr(struct keg_meta *m, uint64_t ino, unsigned set, const struct keg_attr *in,
                     struct keg_attr *out)
{
    if (!m->ops->setattr)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->setattr(m, ino, set, in, out);
    KEG_ASSERT(rc < 0 || !out || out->ino == ino);
    return mc_status(m, KEG_META_OP_SETATTR, t0, rc);
}

int keg_meta_mknod(struct keg_meta *m, uint64_t parent, const char *name, uint64_t ino,
                   uint32_t mode, uint32_t uid, uint32_t gid, uint64_t rdev, const char *target,
                   struct keg_attr *out)
{
    keg_meta_parents_begin();
    int rc = mc_check_entry(name);
    if (rc == 0)
        rc = mc_check_node(ino, mode, target);
    if (rc)
        return rc;
    if (!m->ops->mknod)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    rc = m->ops->mknod(m, parent, name, ino, mode, uid, gid, rdev, target, out);
    KEG_ASSERT(rc < 0 || !out || out->ino == ino);
    return mc_status(m, KEG_META_OP_MKNOD, t0, rc);
}

int keg_meta_link(struct keg_meta *m, uint64_t ino, uint64_t newparent, const char *newname,
                  struct keg_attr *out)
{
    keg_meta_parents_begin();
    int rc = mc_check_entry(newname);
    if (rc)
        return rc;
    if (!m->ops->link)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    rc = m->ops->link(m, ino, newparent, newname, out);
    KEG_ASSERT(rc < 0 || !out || out->ino == ino);
    return mc_status(m, KEG_META_OP_LINK, t0, rc);
}

int keg_meta_unlink(struct keg_meta *m, uint64_t parent, const char *name,
                    struct keg_unlinked *gone)
{
    keg_meta_parents_begin();
    int rc = mc_check_entry(name);
    if (rc)
        return rc;
    if (!m->ops->unlink)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    rc = m->ops->unlink(m, parent, name, gone);
    return mc_status(m, KEG_META_OP_UNLINK, t0, rc);
}

int keg_meta_rmdir(struct keg_meta *m, uint64_t parent, const char *name)
{
    keg_meta_parents_begin();
    int rc = mc_check_entry(name);
    if (rc)
        return rc;
    if (!m->ops->rmdir)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    rc = m->ops->rmdir(m, parent, name);
    return mc_status(m, KEG_META_OP_RMDIR, t0, rc);
}

int keg_meta_rename(struct keg_meta *m, uint64_t parent, const char *name, uint64_t newparent,
                    const char *newname, unsigned flags, struct keg_attr *moved,
                    struct keg_unlinked *gone)
{
    keg_meta_parents_begin();
    int rc = mc_check_entry(name);
    if (rc == 0)
        rc = mc_check_entry(newname);
    if (rc == 0)
        rc = mc_check_rename_flags(flags);
    if (rc)
        return rc;
    if (!m->ops->rename)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    rc = m->ops->rename(m, parent, name, newparent, newname, flags, moved, gone);
    return mc_status(m, KEG_META_OP_RENAME, t0, rc);
}

int keg_meta_readdir(struct keg_meta *m, uint64_t ino, const char *after, uint32_t max, int plus,
                     keg_meta_dirent_cb *cb, void *arg)
{
    if (!m->ops->readdir)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->readdir(m, ino, after, max, plus, cb, arg);
    KEG_ASSERT(rc < 0 || max == 0 || (uint32_t)rc <= max);     /* max 0: no limit */
    return (int)mc_end(m, KEG_META_OP_READDIR, t0, rc);
}

ssize_t keg_meta_readlink(struct keg_meta *m, uint64_t ino, char *buf, size_t size)
{
    if (!m->ops->readlink)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    ssize_t n = m->ops->readlink(m, ino, buf, size);
    return (ssize_t)mc_end(m, KEG_META_OP_READLINK, t0, n);
}

int keg_meta_purge(struct keg_meta *m, uint64_t ino)
{
    if (!m->ops->purge)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->purge(m, ino);
    return mc_status(m, KEG_META_OP_PURGE, t0, rc);
}

/*----------------------------------------------------------------------------
 * Data
 *--------------------------------------------------------------------------*/

int keg_meta_read_chunk(struct keg_meta *m, uint64_t ino, uint32_t indx, struct keg_slice **out,
                        size_t *n)
{
    if (!m->ops->read_chunk)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->read_chunk(m, ino, indx, out, n);
    KEG_ASSERT(rc < 0 || *n == 0 || *out != NULL);
    return mc_status(m, KEG_META_OP_READ_CHUNK, t0, rc);
}

/* The slice list write_slices accepts (keg_meta_ops.write_slices): ranges
 * inside their chunk and their slice, appends last and at pos 0. */
static int mc_slices_valid(size_t n, const struct keg_chunk_slice *cs)
{
    int appends = 0;
    for (size_t i = 0; i < n; i++) {
        const struct keg_slice *s = &cs[i].s;
        if (cs[i].indx == KEG_INDX_APPEND)
            appends = 1;
        else if (appends)
            return 0;
        if ((uint64_t)s->pos + s->len > KEG_CHUNK_SIZE || s->len == 0 ||
            (s->id && (uint64_t)s->off + s->len > s->size) ||
            (cs[i].indx == KEG_INDX_APPEND && s->pos != 0))
            return 0;
    }
    return 1;
}

int keg_meta_write_slices(struct keg_meta *m, uint64_t ino, size_t n,
                          const struct keg_chunk_slice *cs, uint64_t min_size, unsigned flags,
                          uint32_t *nslices, struct keg_attr *out)
{
    if (!m->ops->write_slices)
        return -ENOSYS;
    if (!mc_slices_valid(n, cs))
        return -EINVAL;
    uint64_t t0 = mc_begin();
    int rc = m->ops->write_slices(m, ino, n, cs, min_size, flags, nslices, out);
    KEG_ASSERT(rc < 0 || !out || out->ino == ino);
    return mc_status(m, KEG_META_OP_WRITE_SLICES, t0, rc);
}

int keg_meta_truncate(struct keg_meta *m, uint64_t ino, uint64_t size, struct keg_attr *out)
{
    if (!m->ops->truncate)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->truncate(m, ino, size, out);
    KEG_ASSERT(rc < 0 || !out || (out->ino == ino && out->size == size));
    return mc_status(m, KEG_META_OP_TRUNCATE, t0, rc);
}

int keg_meta_compact_chunk(struct keg_meta *m, uint64_t ino, uint32_t indx,
                           const struct keg_slice *old, size_t nold, size_t keep,
                           const struct keg_slice *repl)
{
    if (!m->ops->compact_chunk)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->compact_chunk(m, ino, indx, old, nold, keep, repl);
    return mc_status(m, KEG_META_OP_COMPACT_CHUNK, t0, rc);
}

int keg_meta_delq_peek(struct keg_meta *m, struct keg_del_slice *out, uint32_t max)
{
    if (!m->ops->delq_peek)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->delq_peek(m, out, max);
    KEG_ASSERT(rc < 0 || (uint32_t)rc <= max);
    return (int)mc_end(m, KEG_META_OP_DELQ_PEEK, t0, rc);
}

int keg_meta_delq_ack(struct keg_meta *m, const struct keg_del_slice *done, uint32_t n)
{
    if (!m->ops->delq_ack)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->delq_ack(m, done, n);
    return mc_status(m, KEG_META_OP_DELQ_ACK, t0, rc);
}

/*----------------------------------------------------------------------------
 * Extended attributes
 *--------------------------------------------------------------------------*/

ssize_t keg_meta_getxattr(struct keg_meta *m, uint64_t ino, const char *name, void *buf,
                          size_t size)
{
    int rc = mc_check_xname(name);
    if (rc)
        return rc;
    if (!m->ops->getxattr)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    ssize_t n = m->ops->getxattr(m, ino, name, buf, size);
    KEG_ASSERT(n < 0 || size == 0 || (size_t)n <= size);
    return (ssize_t)mc_end(m, KEG_META_OP_GETXATTR, t0, n);
}

int keg_meta_setxattr(struct keg_meta *m, uint64_t ino, const char *name, const void *val,
                      size_t len, int flags)
{
    int rc = mc_check_xname(name);
    if (rc == 0 && len > KEG_XATTR_SIZE_MAX)
        rc = -E2BIG;
    if (rc == 0 && ((flags & ~(XATTR_CREATE | XATTR_REPLACE)) ||
                    ((flags & XATTR_CREATE) && (flags & XATTR_REPLACE))))
        rc = -EINVAL;
    if (rc)
        return rc;
    if (!m->ops->setxattr)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    rc = m->ops->setxattr(m, ino, name, val, len, flags);
    return mc_status(m, KEG_META_OP_SETXATTR, t0, rc);
}

ssize_t keg_meta_listxattr(struct keg_meta *m, uint64_t ino, char *buf, size_t size)
{
    if (!m->ops->listxattr)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    ssize_t n = m->ops->listxattr(m, ino, buf, size);
    KEG_ASSERT(n < 0 || size == 0 || (size_t)n <= size);
    return (ssize_t)mc_end(m, KEG_META_OP_LISTXATTR, t0, n);
}

int keg_meta_removexattr(struct keg_meta *m, uint64_t ino, const char *name)
{
    int rc = mc_check_xname(name);
    if (rc)
        return rc;
    if (!m->ops->removexattr)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    rc = m->ops->removexattr(m, ino, name);
    return mc_status(m, KEG_META_OP_REMOVEXATTR, t0, rc);
}

/*----------------------------------------------------------------------------
 * Locks, sync and the optional ops
 *--------------------------------------------------------------------------*/

int keg_meta_flock(struct keg_meta *m, uint64_t ino, uint64_t owner, uint32_t type)
{
    if (!m->ops->flock)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->flock(m, ino, owner, type);
    return mc_status(m, KEG_META_OP_FLOCK, t0, rc);
}

int keg_meta_getlk(struct keg_meta *m, uint64_t ino, uint64_t owner, struct keg_plock *lk)
{
    if (!m->ops->getlk)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->getlk(m, ino, owner, lk);
    return mc_status(m, KEG_META_OP_GETLK, t0, rc);
}

int keg_meta_setlk(struct keg_meta *m, uint64_t ino, uint64_t owner, const struct keg_plock *lk)
{
    if (!m->ops->setlk)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->setlk(m, ino, owner, lk);
    return mc_status(m, KEG_META_OP_SETLK, t0, rc);
}

int keg_meta_sync(struct keg_meta *m)
{
    if (!m->ops->sync)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->sync(m);
    return mc_status(m, KEG_META_OP_SYNC, t0, rc);
}

int keg_meta_next_chunk(struct keg_meta *m, uint64_t ino, uint32_t from, uint32_t *indx)
{
    if (!m->ops->next_chunk)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->next_chunk(m, ino, from, indx);
    KEG_ASSERT(rc < 0 || *indx >= from);
    return mc_status(m, KEG_META_OP_NEXT_CHUNK, t0, rc);
}

int keg_meta_name_cache_stats(struct keg_meta *m, struct keg_meta_name_cache *st)
{
    if (!m->ops->name_cache_stats)
        return -ENOSYS;
    uint64_t t0 = mc_begin();
    int rc = m->ops->name_cache_stats(m, st);
    return mc_status(m, KEG_META_OP_NAME_CACHE_STATS, t0, rc);
}
