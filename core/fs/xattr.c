/* xattr.c -- extended attributes: pass-through to the engine with the Linux
 * limits, a negative cache for "security.capability" and the POSIX ACL names,
 * and the ACL names routed to acl.c.
 *
 * DESIGN
 * The kernel asks getxattr("security.capability") before every write (to
 * drop file capabilities), and with POSIX ACLs on it asks for
 * "system.posix_acl_access" when it checks a permission the mode bits alone
 * do not settle (again after every attribute refresh); creating a node reads
 * the directory's "system.posix_acl_default".  Files almost never have any of
 * them, and small-file workloads open, write and close a file per operation,
 * so the answer "absent" is remembered per (inode, name) for FS_CAP_TTL_NS in
 * a small direct-mapped table that outlives open handles.  setxattr/removexattr
 * through this mount forget the entry at once; one set by another mounter is
 * seen here within FS_CAP_TTL_NS (the kernel's own attribute cache is as
 * stale).  The table never answers "present": only absence is cached.
 *
 * A second kind of entry says "no extended attribute at all" for an inode:
 * readdir with attributes learns it for every entry at no extra round trip
 * (the engines report it beside the attributes), and a node created here
 * without ACLs starts so.  `ls -l` asks for "security.selinux" and
 * "system.posix_acl_access" of every file it lists; a fresh listing of
 * 10,000 files over Redis spent 1.4 s in those 20,000 calls.  Any name of such
 * an inode answers ENODATA until the entry expires or this mount sets an
 * xattr on it.
 *
 * An answer read from the engine may only be cached if no setxattr or
 * removexattr through this mount ran meanwhile (it would be lost): those
 * count themselves in flight (xa_busy) and bump xa_gen as they start; a
 * filler snapshots both before its engine call (fs_xattr_snap) and stores
 * the absence only if nothing was in flight then and xa_gen has not moved.
 *
 * A directory removed while open here has no engine record: the engine's
 * -ENOENT sends each call to the xattrs kept with the open directory (dir.c).
 */
#include <pthread.h>
#include <string.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "fs_i.h"

#define FS_XATTR_CAP "security.capability"
#define FS_CAP_SLOTS_LOG2 14
#define FS_CAP_SLOTS (1u << FS_CAP_SLOTS_LOG2)
#define FS_CAP_TTL_NS (1000LL * 1000000)
#define FS_XK_CAP 3                 /* kinds: 1, 2 the ACL names (fs_acl_name) */
#define FS_XK_ALL 4                 /* no xattr of any name */

struct cap_slot {
    const struct keg_fs *fs;    /* the volume instance (tests open several) */
    uint64_t ino;
    int      kind;              /* xname_kind() */
    int64_t  until;             /* keg_mono_ns() deadline of the "absent" answer */
};

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cap_slot cap_slots[FS_CAP_SLOTS];     /* protected by cap_lock */
static uint64_t xa_gen;             /* setxattr/removexattr started; under cap_lock */
static uint32_t xa_busy;            /* ... and not finished; under cap_lock */

/* 1..3 for the names whose absence is cached, else 0. */
static int xname_kind(const char *name)
{
    if (strcmp(name, FS_XATTR_CAP) == 0)
        return FS_XK_CAP;
    return fs_acl_name(name);
}

static struct cap_slot *cap_slot(const struct keg_fs *fs, uint64_t ino, int kind)
{
    uint64_t h = (ino ^ (uint64_t)(uintptr_t)fs ^ ((uint64_t)kind << 56)) *
                 0x9E3779B97F4A7C15ULL;
    return &cap_slots[h >> (64 - FS_CAP_SLOTS_LOG2)];
}

/* ino's entry of kind, or NULL if its slot holds another.  LOCKS: cap_lock held. */
static struct cap_slot *slot_find(const struct keg_fs *fs, uint64_t ino, int kind)
{
    struct cap_slot *sl = cap_slot(fs, ino, kind);
    return sl->fs == fs && sl->ino == ino && sl->kind == kind ? sl : NULL;
}

/* LOCKS: cap_lock held. */
static int slot_absent(const struct keg_fs *fs, uint64_t ino, int kind, int64_t now)
{
    struct cap_slot *sl = slot_find(fs, ino, kind);
    return sl && now < sl->until;
}

/* LOCKS: cap_lock held. */
static void slot_set(const struct keg_fs *fs, uint64_t ino, int kind)
{
    struct cap_slot *sl = cap_slot(fs, ino, kind);
    sl->fs = fs;
    sl->ino = ino;
    sl->kind = kind;
    sl->until = keg_mono_ns() + FS_CAP_TTL_NS;
}

/* LOCKS: cap_lock held. */
static void slot_clear(const struct keg_fs *fs, uint64_t ino, int kind)
{
    struct cap_slot *sl = slot_find(fs, ino, kind);
    if (sl)
        sl->until = 0;
}

/* 1 if name (of kind, 0: not a cached name) of ino is known absent. */
static int cap_known_absent(const struct keg_fs *fs, uint64_t ino, int kind)
{
    int64_t now = keg_mono_ns();
    pthread_mutex_lock(&cap_lock);
    int absent = (kind && slot_absent(fs, ino, kind, now)) || slot_absent(fs, ino, FS_XK_ALL, now);
    pthread_mutex_unlock(&cap_lock);
    return absent;
}

void fs_xattr_snap(struct fs_xa_snap *s)
{
    pthread_mutex_lock(&cap_lock);
    s->gen = xa_gen;
    s->busy = xa_busy;
    pthread_mutex_unlock(&cap_lock);
}

/* Remember that kind of ino is absent, as an engine call made after snapshot
 * s said, unless an xattr change through this mount may have overtaken it. */
static void cap_set_absent(const struct keg_fs *fs, const struct fs_xa_snap *s, uint64_t ino,
                           int kind)
{
    pthread_mutex_lock(&cap_lock);
    if (s->busy == 0 && s->gen == xa_gen)
        slot_set(fs, ino, kind);
    pthread_mutex_unlock(&cap_lock);
}

void fs_xattr_learn(const struct keg_fs *fs, const struct fs_xa_snap *s, uint64_t ino, int none)
{
    if (none) {
        cap_set_absent(fs, s, ino, FS_XK_ALL);
        return;
    }
    pthread_mutex_lock(&cap_lock);
    slot_clear(fs, ino, FS_XK_ALL);
    pthread_mutex_unlock(&cap_lock);
}

/* A setxattr/removexattr starts: no absence read from the engine before it
 * ends is stored (see DESIGN). */
static void change_begin(void)
{
    pthread_mutex_lock(&cap_lock);
    xa_gen++;
    xa_busy++;
    pthread_mutex_unlock(&cap_lock);
}

/* ... and ends: forget the absences it may have made wrong. */
static void change_end(struct keg_fs *fs, uint64_t ino, int kind)
{
    pthread_mutex_lock(&cap_lock);
    if (kind)
        slot_clear(fs, ino, kind);
    slot_clear(fs, ino, FS_XK_ALL);
    xa_busy--;
    pthread_mutex_unlock(&cap_lock);
}

void fs_xattr_forget_fs(const struct keg_fs *fs)
{
    /* a later volume instance may get the same address and the same inode numbers */
    pthread_mutex_lock(&cap_lock);
    for (size_t i = 0; i < FS_CAP_SLOTS; i++)
        if (cap_slots[i].fs == fs)
            memset(&cap_slots[i], 0, sizeof(cap_slots[i]));
    pthread_mutex_unlock(&cap_lock);
}

ssize_t fs_xattr_get_raw(struct keg_fs *fs, uint64_t ino, const char *name, void *buf,
                         size_t size)
{
    int kind = xname_kind(name);
    struct fs_xa_snap s;
    if (cap_known_absent(fs, ino, kind))
        return -ENODATA;
    fs_xattr_snap(&s);
    ssize_t n = keg_meta_getxattr(fs->meta, ino, name, buf, size);
    if (n == -ENOENT)
        return fs_odir_getxattr(fs, ino, name, buf, size);    /* removed, open here */
    if (kind && n == -ENODATA)
        cap_set_absent(fs, &s, ino, kind);
    return n;
}

static int check_xname(const char *name)
{
    size_t len;
    if (!name)
        return -EINVAL;
    len = strnlen(name, KEG_XATTR_NAME_MAX + 1);
    if (len == 0 || len > KEG_XATTR_NAME_MAX)
        return -ERANGE;
    return 0;
}

ssize_t keg_fs_getxattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino,
                        const char *name, void *buf, size_t size)
{
    int rc = check_xname(name);

    KEG_UNUSED(c);
    if (rc < 0)
        return rc;
    if (size > KEG_XATTR_SIZE_MAX)
        size = KEG_XATTR_SIZE_MAX;
    return fs_xattr_get_raw(fs, ino, name, buf, size);
}

int keg_fs_setxattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, const char *name,
                    const void *val, size_t len, int flags)
{
    int rc = check_xname(name);
    if (rc < 0)
        return rc;
    if (len > KEG_XATTR_SIZE_MAX)
        return -E2BIG;
    if (fs->read_only)
        return -EROFS;
    struct fs_pattr_tok t;
    int kind = xname_kind(name);
    change_begin();
    fs_pattr_begin(fs, ino, &t);        /* ctime of a directory may be cached (ns.c) */
    if (fs_acl_name(name))
        rc = fs_acl_set(fs, c, ino, name, val, len, flags);    /* also the mode (acl.c) */
    else
        rc = keg_meta_setxattr(fs->meta, ino, name, val, len, flags);
    if (rc == -ENOENT)
        rc = fs_odir_setxattr(fs, ino, name, val, len, flags);  /* removed, open here */
    fs_pattr_end(fs, &t, NULL);
    change_end(fs, ino, kind);
    return rc;
}

ssize_t keg_fs_listxattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, char *buf,
                         size_t size)
{
    KEG_UNUSED(c);
    ssize_t n = keg_meta_listxattr(fs->meta, ino, buf, size);
    if (n == -ENOENT)
        n = fs_odir_listxattr(fs, ino, buf, size);      /* removed, open here */
    return n;
}

int keg_fs_removexattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino,
                       const char *name)
{
    int rc = check_xname(name);
    KEG_UNUSED(c);
    if (rc < 0)
        return rc;
    if (fs->read_only)
        return -EROFS;
    struct fs_pattr_tok t;
    int kind = xname_kind(name);
    change_begin();
    fs_pattr_begin(fs, ino, &t);
    rc = keg_meta_removexattr(fs->meta, ino, name);
    if (rc == -ENOENT)
        rc = fs_odir_removexattr(fs, ino, name);            /* removed, open here */
    fs_pattr_end(fs, &t, NULL);
    change_end(fs, ino, kind);
    return rc;
}

void fs_xattr_new_inode(struct keg_fs *fs, uint64_t ino, int has_access, int has_default)
{
    /* nobody else knows the new inode number yet: no snapshot needed */
    pthread_mutex_lock(&cap_lock);
    slot_set(fs, ino, FS_XK_CAP);
    if (!has_access)
        slot_set(fs, ino, 1);
    if (!has_default)
        slot_set(fs, ino, 2);
    if (!has_access && !has_default)
        slot_set(fs, ino, FS_XK_ALL);
    pthread_mutex_unlock(&cap_lock);
}

void keg_fs_set_acl(struct keg_fs *fs, int on)
{
    fs->acl = on ? 1 : 0;
}
