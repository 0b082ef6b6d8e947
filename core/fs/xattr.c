/* xattr.c -- extended attributes: pass-through to the engine with the Linux
 * limits, and a negative cache for "security.capability".
 *
 * DESIGN
 * The kernel asks getxattr("security.capability") before every write (to
 * drop file capabilities).  Files almost never have one, so the inode entry
 * of an open file remembers "absent" (ip->nocap) after the first -ENODATA;
 * setxattr/removexattr through this mount and every open reset it.
 */
#include <string.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "fs_i.h"

#define FS_XATTR_CAP "security.capability"

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

static void cap_forget(struct keg_fs *fs, uint64_t ino)
{
    struct fs_inode *ip = fs_inode_find(fs, ino);
    if (!ip)
        return;
    pthread_mutex_lock(&ip->mu);
    ip->nocap = 0;
    pthread_mutex_unlock(&ip->mu);
    fs_inode_put(fs, ip);
}

ssize_t keg_fs_getxattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino,
                        const char *name, void *buf, size_t size)
{
    struct fs_inode *ip = NULL;
    ssize_t n;
    int rc = check_xname(name);

    KEG_UNUSED(c);
    if (rc < 0)
        return rc;
    if (strcmp(name, FS_XATTR_CAP) == 0) {
        ip = fs_inode_find(fs, ino);
        if (ip) {
            int absent;
            pthread_mutex_lock(&ip->mu);
            absent = ip->nocap;
            pthread_mutex_unlock(&ip->mu);
            if (absent) {
                fs_inode_put(fs, ip);
                return -ENODATA;
            }
        }
    }
    if (size > KEG_XATTR_SIZE_MAX)
        size = KEG_XATTR_SIZE_MAX;
    n = KEG_META_CALL(fs->meta, getxattr, ino, name, buf, size);
    if (ip) {
        if (n == -ENODATA) {
            pthread_mutex_lock(&ip->mu);
            ip->nocap = 1;
            pthread_mutex_unlock(&ip->mu);
        }
        fs_inode_put(fs, ip);
    }
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
    rc = KEG_META_CALL(fs->meta, setxattr, ino, name, val, len, flags);
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
    rc = KEG_META_CALL(fs->meta, removexattr, ino, name);
    cap_forget(fs, ino);
    return rc;
}
