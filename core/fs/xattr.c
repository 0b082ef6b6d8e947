/* xattr.c -- extended attributes: pass-through to the engine with the Linux
 * limits, and a negative cache for "security.capability".
 *
 * DESIGN
 * The kernel asks getxattr("security.capability") before every write (to
 * drop file capabilities).  Files almost never have one, and small-file
 * workloads open, write and close a file per operation, so the answer
 * "absent" is remembered per inode for FS_CAP_TTL_NS in a small
 * direct-mapped table that outlives open handles.  setxattr/removexattr
 * through this mount forget the inode at once; a capability set by another
 * mounter is seen here within FS_CAP_TTL_NS (the kernel's own attribute cache
 * is as stale).  The table never answers "present": only absence is cached.
 */
#include <pthread.h>
#include <string.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "fs_i.h"

#define FS_XATTR_CAP "security.capability"
#define FS_CAP_SLOTS 4096
#define FS_CAP_TTL_NS (1000LL * 1000000)

struct cap_slot {
    const struct keg_fs *fs;    /* the volume instance (tests open several) */
    uint64_t ino;
    int64_t  until;             /* keg_mono_ns() deadline of the "absent" answer */
};

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cap_slot cap_slots[FS_CAP_SLOTS];     /* protected by cap_lock */

static struct cap_slot *cap_slot(const struct keg_fs *fs, uint64_t ino)
{
    uint64_t h = (ino ^ (uint64_t)(uintptr_t)fs) * 0x9E3779B97F4A7C15ULL;
    return &cap_slots[h >> 52];     /* top 12 bits: FS_CAP_SLOTS == 4096 */
}

static int cap_known_absent(const struct keg_fs *fs, uint64_t ino)
{
    int absent;
    pthread_mutex_lock(&cap_lock);
    struct cap_slot *sl = cap_slot(fs, ino);
    absent = sl->fs == fs && sl->ino == ino && keg_mono_ns() < sl->until;
    pthread_mutex_unlock(&cap_lock);
    return absent;
}

static void cap_set_absent(const struct keg_fs *fs, uint64_t ino)
{
    pthread_mutex_lock(&cap_lock);
    struct cap_slot *sl = cap_slot(fs, ino);
    sl->fs = fs;
    sl->ino = ino;
    sl->until = keg_mono_ns() + FS_CAP_TTL_NS;
    pthread_mutex_unlock(&cap_lock);
}

static void cap_forget(struct keg_fs *fs, uint64_t ino)
{
    pthread_mutex_lock(&cap_lock);
    struct cap_slot *sl = cap_slot(fs, ino);
    if (sl->fs == fs && sl->ino == ino)
        sl->until = 0;
    pthread_mutex_unlock(&cap_lock);
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
    int is_cap;
    ssize_t n;
    int rc = check_xname(name);

    KEG_UNUSED(c);
    if (rc < 0)
        return rc;
    is_cap = strcmp(name, FS_XATTR_CAP) == 0;
    if (is_cap && cap_known_absent(fs, ino))
        return -ENODATA;
    if (size > KEG_XATTR_SIZE_MAX)
        size = KEG_XATTR_SIZE_MAX;
    n = KEG_META_CALL(fs->meta, getxattr, ino, name, buf, size);
    if (is_cap && n == -ENODATA)
        cap_set_absent(fs, ino);
    return n;
}

int keg_fs_setxattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, const char *name,
                    const void *val, size_t len, int flags)
{
    int rc = check_xname(name);
    KEG_UNUSED(c);
    if (rc < 0)
        return rc;
    if (len > KEG_XATTR_SIZE_MAX)
        return -E2BIG;
    if (fs->read_only)
        return -EROFS;
    struct fs_pattr_tok t;
    fs_pattr_begin(fs, ino, &t);        /* ctime of a directory may be cached (ns.c) */
    rc = KEG_META_CALL(fs->meta, setxattr, ino, name, val, len, flags);
    fs_pattr_end(fs, &t, NULL);
    cap_forget(fs, ino);
    return rc;
}

ssize_t keg_fs_listxattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, char *buf,
                         size_t size)
{
    KEG_UNUSED(c);
    return KEG_META_CALL(fs->meta, listxattr, ino, buf, size);
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
    fs_pattr_begin(fs, ino, &t);
    rc = KEG_META_CALL(fs->meta, removexattr, ino, name);
    fs_pattr_end(fs, &t, NULL);
    cap_forget(fs, ino);
    return rc;
}
