/* ns.c -- namespace operations (thin wrappers over the engine) and the
 * ownership rules that POSIX leaves to the file system.
 *
 * DESIGN
 * Every namespace op is one engine call (plus id allocation from a batch).
 * What the engine does not enforce and the kernel may not either (it does
 * with default_permissions, but the CLI and other front ends do not go
 * through the kernel) is checked here: name and symlink-target lengths,
 * read-only mounts, and the chmod/chown/utimes ownership rules, which all
 * live in fs_check_setattr().  With a trash (trash_days > 0) unlink and
 * rename first ask trash.c, which may keep the file in /.trash.
 *
 * Directory attributes after a change: after a create, link, unlink, rmdir
 * or rename the kernel drops its cached attributes of the parent and asks
 * getattr on its next path walk.  The engine returns the parents' new
 * attributes with the change itself (keg_meta_parents), so they are kept in
 * a small table (fs->pa, direct-mapped by inode) and keg_fs_getattr_cached
 * answers that getattr without a round trip, while they are at most max_age
 * old (the mounter's attribute-cache timeout, capped at FS_PATTR_MAX_NS) and
 * nothing changed the directory through this mount since.  Soundness under
 * concurrency: a result is installed only by a change that overlapped no
 * other change of the same directory here (each change bumps the slot's
 * generation and is counted in busy for its whole duration) and no rename
 * (a rename may move or exchange directories, changing their ctime and
 * parent: it bumps pa_epoch, which invalidates every entry, and no change
 * overlapping it installs anything).  Attribute changes outside these ops
 * (setattr here, xattrs in xattr.c) are bracketed by fs_pattr_begin/end.
 * Changes by other mounters are seen after max_age at the latest, exactly as
 * with the kernel's own attribute cache.
 */
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "fs_i.h"

/*----------------------------------------------------------------------------
 * Directory-attribute cache
 *--------------------------------------------------------------------------*/

#define FS_PATTR_MAX_NS 1000000000LL    /* never older than 1 s */

static struct fs_pattr *pa_slot(struct keg_fs *fs, uint64_t ino)
{
    return &fs->pa[(ino * 0x9E3779B97F4A7C15ULL) % FS_PATTR_SLOTS];
}

/* A change of ino starts; global_ok = no rename overlaps it (so far). */
static void pa_begin_locked(struct keg_fs *fs, uint64_t ino, int global_ok,
                            struct fs_pattr_tok *t)
{
    struct fs_pattr *s = pa_slot(fs, ino);
    memset(t, 0, sizeof(*t));
    t->ino = ino;
    t->epoch = fs->pa_epoch;
    if (s->ino != ino && s->busy == 0) {
        s->ino = ino;
        s->valid = 0;
    }
    if (s->ino != ino) {
        /* the slot is busy with another directory: a change that cannot be
         * tracked per directory invalidates everything, as a rename does */
        t->global = 1;
        fs->pa_global++;
        fs->pa_epoch++;
        return;
    }
    t->tracked = 1;
    t->ok = global_ok && s->busy == 0;
    s->busy++;
    s->valid = 0;
    s->gen = ++fs->pa_gen;
    t->gen = s->gen;
}

void fs_pattr_begin(struct keg_fs *fs, uint64_t ino, struct fs_pattr_tok *t)
{
    pthread_mutex_lock(&fs->pa_mu);
    pa_begin_locked(fs, ino, fs->pa_global == 0, t);
    pthread_mutex_unlock(&fs->pa_mu);
}

/* The change ended; a = the directory's attributes right after it, or NULL. */
void fs_pattr_end(struct keg_fs *fs, const struct fs_pattr_tok *t, const struct keg_attr *a)
{
    if (!t->tracked && !t->global)
        return;
    pthread_mutex_lock(&fs->pa_mu);
    if (t->global) {
        fs->pa_global--;
        pthread_mutex_unlock(&fs->pa_mu);
        return;
    }
    struct fs_pattr *s = pa_slot(fs, t->ino);
    KEG_ASSERT(s->ino == t->ino && s->busy > 0);
    s->busy--;
    if (a && a->ino == t->ino && S_ISDIR(a->mode) && t->ok && s->gen == t->gen &&
        s->busy == 0 && fs->pa_epoch == t->epoch) {
        s->a = *a;
        s->valid = 1;
        s->epoch = t->epoch;
        s->at_ns = keg_mono_ns();
    }
    pthread_mutex_unlock(&fs->pa_mu);
}

/* Ends the change of t->ino with what the engine op just recorded for it
 * (keg_meta_parents of this thread), when rc == 0. */
static void pa_end_op(struct keg_fs *fs, const struct fs_pattr_tok *t, int rc)
{
    struct keg_attr par[2];
    const struct keg_attr *a = NULL;
    int n = rc == 0 ? keg_meta_parents(par, 2) : 0;
    for (int i = 0; i < n && !a; i++)
        if (par[i].ino == t->ino)
            a = &par[i];
    fs_pattr_end(fs, t, a);
}

/* A rename starts: every cached entry becomes invalid (it may move or
 * exchange directories); its parents may be cached again at its end if it
 * overlapped no other change. */
static void pa_rename_begin(struct keg_fs *fs, uint64_t p1, uint64_t p2,
                            struct fs_pattr_tok *t1, struct fs_pattr_tok *t2)
{
    pthread_mutex_lock(&fs->pa_mu);
    int ok = fs->pa_global == 0;
    fs->pa_global++;
    fs->pa_epoch++;
    pa_begin_locked(fs, p1, ok, t1);
    if (p2 != p1)
        pa_begin_locked(fs, p2, ok, t2);
    else
        memset(t2, 0, sizeof(*t2));
    pthread_mutex_unlock(&fs->pa_mu);
}

static void pa_rename_end(struct keg_fs *fs, const struct fs_pattr_tok *t1,
                          const struct fs_pattr_tok *t2, int rc)
{
    pa_end_op(fs, t1, rc);
    pa_end_op(fs, t2, rc);
    pthread_mutex_lock(&fs->pa_mu);
    fs->pa_global--;
    pthread_mutex_unlock(&fs->pa_mu);
}

int fs_check_name(const char *name)
{
    /* the answers of path resolution, which differ from the metadata contract's:
     * an empty component is ENOENT, and an over-long one ENAMETOOLONG before
     * anything else; the rest is keg_meta_check_name's */
    if (!name || !name[0])
        return -ENOENT;
    if (strnlen(name, KEG_NAME_MAX + 1) > KEG_NAME_MAX)
        return -ENAMETOOLONG;
    return keg_meta_check_name(name);
}

/* May c write to a file with attributes a (by its mode bits)? */
static int may_write(const struct keg_ctx *c, const struct keg_attr *a)
{
    if (c->uid == 0)
        return 1;
    if (c->uid == a->uid)
        return (a->mode & S_IWUSR) != 0;
    if (keg_ctx_in_group(c, a->gid))
        return (a->mode & S_IWGRP) != 0;
    return (a->mode & S_IWOTH) != 0;
}

int fs_check_setattr(const struct keg_ctx *c, const struct keg_attr *cur, unsigned set,
                     const struct keg_attr *in, uint32_t *mode)
{
    int root = c->uid == 0;
    int owner = c->uid == cur->uid;

    *mode = cur->mode;
    if (set & KEG_SET_MODE) {
        uint32_t nm = (cur->mode & S_IFMT) | (in->mode & 07777);
        uint32_t gid = (set & KEG_SET_GID) ? in->gid : cur->gid;
        /* The kernel drops S_ISUID/S_ISGID on a write by a non-owner through a
         * mode change of the writer: allow exactly that (only clearing them). */
        int kill_only = (nm | S_ISUID | S_ISGID) == (cur->mode | S_ISUID | S_ISGID) &&
                        (nm & ~cur->mode) == 0 && nm != cur->mode;
        if (!root && !owner && !kill_only)
            return -EPERM;
        if ((nm & S_ISGID) && !root && !keg_ctx_in_group(c, gid))
            nm &= ~(uint32_t)S_ISGID;      /* silently, as Linux does */
        *mode = nm;
    }
    if (set & KEG_SET_UID) {
        if (!root && !(owner && in->uid == cur->uid))
            return -EPERM;
    }
    if (set & KEG_SET_GID) {
        if (!root && !(owner && (in->gid == cur->gid || keg_ctx_in_group(c, in->gid))))
            return -EPERM;
    }
    if (set & (KEG_SET_ATIME | KEG_SET_MTIME | KEG_SET_CTIME)) {
        if (!root && !owner)
            return -EPERM;
    } else if (set & (KEG_SET_ATIME_NOW | KEG_SET_MTIME_NOW)) {
        if (!root && !owner && !may_write(c, cur))
            return -EACCES;
    }
    return 0;
}

int keg_fs_lookup(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                  struct keg_attr *out)
{
    int rc = fs_check_name(name);
    KEG_UNUSED(c);
    if (rc < 0)
        return rc;
    rc = keg_meta_lookup(fs->meta, parent, name, out);
    if (rc == 0 && fs_attr_token(fs, out->ino) != UINT64_MAX)
        return keg_fs_getattr(fs, c, out->ino, out);   /* open here: merge safely */
    return rc;
}

int keg_fs_getattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, struct keg_attr *out)
{
    int rc;
    KEG_UNUSED(c);
    rc = fs_getattr_merged(fs, ino, out);
    if (rc == 0 && S_ISDIR(out->mode))
        fs_odir_seen(fs, out);          /* dir.c: for fstat after its removal */
    else if (rc == -ENOENT)
        rc = fs_odir_dead(fs, ino, out);
    return rc;
}

int keg_fs_getattr_cached(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino,
                          int64_t max_age_ns, struct keg_attr *out)
{
    int hit = 0;
    if (max_age_ns > FS_PATTR_MAX_NS)
        max_age_ns = FS_PATTR_MAX_NS;
    if (max_age_ns > 0) {
        pthread_mutex_lock(&fs->pa_mu);
        const struct fs_pattr *s = pa_slot(fs, ino);
        if (s->ino == ino && s->valid && s->busy == 0 && s->epoch == fs->pa_epoch &&
            keg_mono_ns() - s->at_ns <= max_age_ns) {
            *out = s->a;
            hit = 1;
        }
        pthread_mutex_unlock(&fs->pa_mu);
    }
    if (!hit)
        return keg_fs_getattr(fs, c, ino, out);
    return 0;
}

static int do_truncate(struct keg_fs *fs, uint64_t ino, uint64_t size, struct keg_attr *out,
                       uint64_t *token)
{
    struct fs_inode *ip = fs_inode_find(fs, ino);
    int rc;
    *token = UINT64_MAX;                /* what fs_attr_token says of an inode not open here */
    if (!ip)
        return keg_meta_truncate(fs->meta, ino, size, out);
    pthread_mutex_lock(&ip->mu);
    rc = fs_commit_locked(fs, ip);
    if (rc == 0) {
        rc = keg_meta_truncate(fs->meta, ino, size, out);
        fs_inode_drop_chunks(ip);
        if (rc == 0)
            fs_inode_set_attr(ip, out);
    }
    *token = ip->wgen;                  /* the buffer state *out goes with */
    pthread_mutex_unlock(&ip->mu);
    fs_inode_put(fs, ip);
    return rc;
}

/* Commit the buffered writes of ino, if it is open here.  Returns 0 or -errno. */
static int commit_if_open(struct keg_fs *fs, uint64_t ino)
{
    struct fs_inode *ip = fs_inode_find(fs, ino);
    int rc;
    if (!ip)
        return 0;
    pthread_mutex_lock(&ip->mu);
    rc = fs_commit_locked(fs, ip);
    pthread_mutex_unlock(&ip->mu);
    fs_inode_put(fs, ip);
    return rc;
}

static int setattr_checked(struct keg_fs *fs, uint64_t ino, unsigned set, struct keg_attr cur,
                           uint64_t token, uint32_t mode, const struct keg_attr *in,
                           struct keg_attr *out);
static int setattr_rest(struct keg_fs *fs, uint64_t ino, unsigned rest, uint32_t mode,
                        const struct keg_attr *in, struct keg_attr *out);

/* Times that root sets: fs_check_setattr lets root set them whatever the
 * attributes are. */
#define FS_SET_TIMES (KEG_SET_ATIME | KEG_SET_MTIME | KEG_SET_ATIME_NOW | KEG_SET_MTIME_NOW)

static int setattr_any(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, unsigned set,
                       const struct keg_attr *in, struct keg_attr *out);

/* The mode a setattr left, for keg_fs_kill_priv of a file open here. */
static void note_mode(struct keg_fs *fs, uint64_t ino, uint32_t mode)
{
    struct fs_inode *ip = fs_inode_find(fs, ino);
    if (!ip)
        return;
    pthread_mutex_lock(&ip->mu);
    ip->mode = mode;
    pthread_mutex_unlock(&ip->mu);
    fs_inode_put(fs, ip);
}

int keg_fs_setattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, unsigned set,
                   const struct keg_attr *in, struct keg_attr *out)
{
    int rc = setattr_any(fs, c, ino, set, in, out);
    if (rc == 0 && (set & (KEG_SET_MODE | KEG_SET_UID | KEG_SET_GID)))
        note_mode(fs, ino, out->mode);
    return rc;
}

/* The mode bits the kernel drops before a write by c (should_remove_suid). */
static uint32_t privs_to_kill(const struct keg_ctx *c, const struct keg_attr *a)
{
    uint32_t kill = a->mode & S_ISUID;
    if ((a->mode & S_ISGID) && ((a->mode & S_IXGRP) || !keg_ctx_in_group(c, a->gid)))
        kill |= S_ISGID;
    return kill;
}

int keg_fs_fh_privs(struct keg_fh *fh)
{
    struct fs_inode *ip = fh->ip;
    uint32_t seen;
    pthread_mutex_lock(&ip->mu);
    seen = ip->mode;
    pthread_mutex_unlock(&ip->mu);
    return seen == 0 || (seen & (S_ISUID | S_ISGID));
}

int keg_fs_kill_priv(struct keg_fs *fs, const struct keg_ctx *c, struct keg_fh *fh)
{
    struct fs_inode *ip = fh->ip;
    struct keg_attr cur, in, out;
    uint32_t kill;
    int rc;

    if (c->uid == 0 || !keg_fs_fh_privs(fh))
        return 0;
    rc = keg_meta_getattr(fs->meta, ip->ino, &cur);
    if (rc < 0)
        return rc;
    kill = S_ISREG(cur.mode) ? privs_to_kill(c, &cur) : 0;
    if (!kill) {
        note_mode(fs, ip->ino, cur.mode);
        return 0;
    }
    memset(&in, 0, sizeof(in));
    in.mode = cur.mode & ~kill & 07777;
    return keg_fs_setattr(fs, c, ip->ino, KEG_SET_MODE, &in, &out);
}

static int setattr_any(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, unsigned set,
                       const struct keg_attr *in, struct keg_attr *out)
{
    struct keg_attr cur;
    struct fs_pattr_tok t;
    uint64_t token;
    uint32_t mode;
    int rc;

    if (fs->read_only)
        return -EROFS;
    token = fs_attr_token(fs, ino);
    if (c->uid == 0 && set && !(set & ~FS_SET_TIMES) && token != UINT64_MAX) {
        /* Root setting the times of a file open here (futimens before close:
         * tar, cp -p): no check can fail, and only regular files are open in
         * the inode table, so the engine is not read first.  A file removed
         * meanwhile takes the general path. */
        rc = setattr_rest(fs, ino, set, 0, in, out);
        if (rc != -ENOENT)
            return rc;
        token = fs_attr_token(fs, ino);
    }
    rc = keg_meta_getattr(fs->meta, ino, &cur);
    if (rc == -ENOENT)
        return fs_odir_setattr(fs, c, ino, set, in, out);  /* removed, still open here */
    if (rc < 0)
        return rc;
    rc = fs_check_setattr(c, &cur, set, in, &mode);
    if (rc < 0)
        return rc;
    if (!S_ISDIR(cur.mode))
        return setattr_checked(fs, ino, set, cur, token, mode, in, out);
    fs_pattr_begin(fs, ino, &t);        /* a directory's cached attributes change */
    rc = setattr_checked(fs, ino, set, cur, token, mode, in, out);
    fs_pattr_end(fs, &t, NULL);
    if (rc == 0)
        fs_odir_seen(fs, out);
    return rc;
}

/* setattr after the permission checks: cur = the attributes before (read after
 * token = fs_attr_token() was taken), mode = the mode fs_check_setattr allows.
 * *out is the engine's answer of the last change merged with this mount's
 * buffered writes; if a commit raced that answer, a fresh getattr instead. */
static int setattr_checked(struct keg_fs *fs, uint64_t ino, unsigned set, struct keg_attr cur,
                           uint64_t token, uint32_t mode, const struct keg_attr *in,
                           struct keg_attr *out)
{
    unsigned rest = set & ~KEG_FS_SET_SIZE;
    int rc;

    if (set & KEG_FS_SET_SIZE) {
        if (S_ISDIR(cur.mode))
            return -EISDIR;
        if (!S_ISREG(cur.mode))
            return -EINVAL;
        if (in->size > KEG_MAX_FILE_SIZE)
            return -EFBIG;
        rc = do_truncate(fs, ino, in->size, &cur, &token);
        if (rc < 0)
            return rc;
    }
    if (rest)
        return setattr_rest(fs, ino, rest, mode, in, out);
    *out = cur;
    fs_attr_merge(fs, out, token);
    return 0;
}

/* The changes other than the size (rest), allowed: mode = the mode to set with
 * KEG_SET_MODE.  *out as setattr_checked's. */
static int setattr_rest(struct keg_fs *fs, uint64_t ino, unsigned rest, uint32_t mode,
                        const struct keg_attr *in, struct keg_attr *out)
{
    struct keg_attr nin;
    uint64_t token;
    /* Buffered data is committed first: its commit sets mtime to "now" and
     * would otherwise overwrite an explicit time (write, futimens, close). */
    int rc = commit_if_open(fs, ino);
    if (rc < 0)
        return rc;
    nin = *in;
    nin.mode = mode;
    if (rest & KEG_SET_MODE) {
        /* the ACL follows chmod (acl.c); first, since the kernel checks
         * permissions against the ACL when there is one */
        rc = fs_acl_chmod(fs, ino, mode);
        if (rc < 0)
            return rc;
    }
    token = fs_attr_token(fs, ino);
    rc = keg_meta_setattr(fs->meta, ino, rest, &nin, out);
    if (rc < 0)
        return rc;
    fs_attr_merge(fs, out, token);
    return 0;
}

static int make_node(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent,
                     const char *name, uint32_t mode, uint64_t rdev, const char *target,
                     struct keg_attr *out)
{
    uint64_t ino = 0;
    int rc;
    if (fs->read_only)
        return -EROFS;
    rc = fs_check_name(name);
    if (rc < 0)
        return rc;
    struct fs_acl_new acl;
    rc = fs_acl_create_mode(fs, c, parent, &mode, &acl);    /* umask or default ACL */
    if (rc == 0)
        rc = fs_alloc_ino(fs, &ino);
    if (rc < 0) {
        fs_acl_new_free(&acl);
        return rc;
    }
    struct fs_pattr_tok t;
    fs_pattr_begin(fs, parent, &t);
    rc = keg_meta_mknod(fs->meta, parent, name, ino, mode, c->uid, c->gid, rdev, target,
                        out);
    pa_end_op(fs, &t, rc);
    if (rc == 0)
        fs_xattr_new_inode(fs, ino, acl.access != NULL, acl.def != NULL);
    if (rc == 0 && (acl.access || acl.def)) {
        rc = fs_acl_create_finish(fs, ino, &acl);
        if (rc == 0)
            rc = keg_meta_getattr(fs->meta, ino, out);
    }
    fs_acl_new_free(&acl);
    return rc;
}

int keg_fs_mknod(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                 uint32_t mode, uint64_t rdev, struct keg_attr *out)
{
    uint32_t type = mode & S_IFMT;
    if (type == 0)
        type = S_IFREG;
    if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK && type != S_IFCHR &&
        type != S_IFBLK)
        return -EINVAL;
    if (type != S_IFCHR && type != S_IFBLK)
        rdev = 0;
    return make_node(fs, c, parent, name, type | (mode & 07777), rdev, NULL, out);
}

int keg_fs_mkdir(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                 uint32_t mode, struct keg_attr *out)
{
    return make_node(fs, c, parent, name, S_IFDIR | (mode & 07777), 0, NULL, out);
}

int keg_fs_symlink(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                   const char *target, struct keg_attr *out)
{
    if (!target || !target[0])
        return -ENOENT;
    if (strnlen(target, KEG_SYMLINK_MAX + 1) > KEG_SYMLINK_MAX)
        return -ENAMETOOLONG;
    return make_node(fs, c, parent, name, S_IFLNK | 0777, 0, target, out);
}

int keg_fs_link(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, uint64_t newparent,
                const char *newname, struct keg_attr *out)
{
    int rc;
    KEG_UNUSED(c);
    if (fs->read_only)
        return -EROFS;
    rc = fs_check_name(newname);
    if (rc < 0)
        return rc;
    struct fs_pattr_tok t;
    uint64_t token = fs_attr_token(fs, ino);
    fs_pattr_begin(fs, newparent, &t);
    rc = keg_meta_link(fs->meta, ino, newparent, newname, out);
    pa_end_op(fs, &t, rc);
    if (rc == 0)
        fs_attr_merge(fs, out, token);
    return rc;
}

int keg_fs_unlink(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name)
{
    struct keg_unlinked gone;
    int rc;
    KEG_UNUSED(c);
    if (fs->read_only)
        return -EROFS;
    rc = fs_check_name(name);
    if (rc < 0)
        return rc;
    struct fs_pattr_tok t;
    fs_pattr_begin(fs, parent, &t);
    if (fs->fmt.trash_days > 0) {
        rc = fs_trash_unlink(fs, parent, name);     /* trash.c */
        if (rc != FS_TRASH_PASS) {
            fs_pattr_end(fs, &t, NULL);
            return rc;
        }
    }
    memset(&gone, 0, sizeof(gone));
    rc = keg_meta_unlink(fs->meta, parent, name, &gone);
    pa_end_op(fs, &t, rc);
    if (rc == 0)
        fs_handle_gone(fs, &gone);
    return rc;
}

int keg_fs_rmdir(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name)
{
    int rc;
    KEG_UNUSED(c);
    if (fs->read_only)
        return -EROFS;
    rc = fs_check_name(name);
    if (rc < 0)
        return rc;
    uint64_t snap = fs_odir_snap_xattrs(fs, parent, name);    /* open here? (dir.c) */
    struct fs_pattr_tok t;
    fs_pattr_begin(fs, parent, &t);
    rc = keg_meta_rmdir(fs->meta, parent, name);
    pa_end_op(fs, &t, rc);
    fs_odir_snap_end(fs, snap, rc == 0);
    return rc;
}

int keg_fs_rename(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent, const char *name,
                  uint64_t newparent, const char *newname, unsigned flags)
{
    struct keg_unlinked gone;
    struct keg_attr moved;
    int whiteout = (flags & KEG_FS_RENAME_WHITEOUT) != 0;
    int rc;
    flags &= ~KEG_FS_RENAME_WHITEOUT;
    if (flags & ~(KEG_RENAME_NOREPLACE | KEG_RENAME_EXCHANGE))
        return -EINVAL;
    if ((flags & KEG_RENAME_NOREPLACE) && (flags & KEG_RENAME_EXCHANGE))
        return -EINVAL;
    if (whiteout && (flags & KEG_RENAME_EXCHANGE))
        return -EINVAL;
    if (fs->read_only)
        return -EROFS;
    rc = fs_check_name(name);
    if (rc == 0)
        rc = fs_check_name(newname);
    if (rc < 0)
        return rc;
    struct fs_pattr_tok t1, t2;
    pa_rename_begin(fs, parent, newparent, &t1, &t2);
    if (fs->fmt.trash_days > 0) {
        rc = fs_trash_rename(fs, parent, name, newparent, newname, flags);     /* trash.c */
        if (rc != FS_TRASH_PASS) {
            pa_rename_end(fs, &t1, &t2, -EAGAIN);   /* nothing to install */
            return rc;
        }
    }
    /* a directory replaced at newname, open here, keeps its xattrs (dir.c) */
    uint64_t snap = (flags & (KEG_RENAME_NOREPLACE | KEG_RENAME_EXCHANGE)) ? 0 :
                    fs_odir_snap_xattrs(fs, newparent, newname);
    memset(&gone, 0, sizeof(gone));
    rc = keg_meta_rename(fs->meta, parent, name, newparent, newname, flags, &moved, &gone);
    pa_rename_end(fs, &t1, &t2, rc);
    fs_odir_snap_end(fs, snap, rc == 0 && gone.ino == snap);
    if (rc == 0)
        fs_handle_gone(fs, &gone);
    if (rc == 0 && whiteout) {
        /* RENAME_WHITEOUT: a whiteout (char device 0/0, mode 0) takes the old
         * name.  Not atomic with the rename: another mount may see the old
         * name free for a moment, and a name created there meanwhile makes
         * this fail (docs/posix.md). */
        struct keg_attr wa;
        rc = make_node(fs, c, parent, name, S_IFCHR, 0, NULL, &wa);
        if (rc < 0)
            KEG_WARN("rename with whiteout: the whiteout of %s was not created: %s", name,
                     strerror(-rc));
    }
    return rc;
}

ssize_t keg_fs_readlink(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, char *buf,
                        size_t size)
{
    char tmp[KEG_SYMLINK_MAX + 1];
    ssize_t n;
    KEG_UNUSED(c);
    n = keg_meta_readlink(fs->meta, ino, tmp, sizeof(tmp));
    if (n < 0)
        return n;
    if ((size_t)n > KEG_SYMLINK_MAX)
        return -EIO;
    memcpy(buf, tmp, KEG_MIN((size_t)n, size));
    if ((size_t)n < size)
        buf[n] = '\0';
    return n;
}
