/* mountinfo.h -- what is mounted at a path, from /proc/self/mountinfo. */
#ifndef KEG_MOUNTINFO_H
#define KEG_MOUNTINFO_H

#include <stddef.h>

/* statfs(2) f_type of a FUSE mount (Linux's FUSE_SUPER_MAGIC). */
#define KEG_FUSE_SUPER_MAGIC 0x65735546

/* Is abs (an absolute, normalised path) a mount point?  When fstype is not
 * NULL it receives the file system type of the top mount there ("fuse.kegfs",
 * "tmpfs", ...; "" when abs is not a mount point), cut to fstype_size.
 * Returns 1 (a mount point), 0 (not one), or -errno if mountinfo cannot be read. */
int keg_mountinfo_find(const char *abs, char *fstype, size_t fstype_size);

/* The device of the top mount at abs, as mountinfo writes it ("0:52"; the
 * name of its backing device in /sys/class/bdi for FUSE), cut to dev_size.
 * Returns 1, 0 (dev is "") or -errno as keg_mountinfo_find. */
int keg_mountinfo_dev(const char *abs, char *dev, size_t dev_size);

/* Is a FUSE file system mounted at target itself (not only at a directory
 * above it)?  Returns 0 if so, else -errno: -EINVAL when not, -ENOTCONN (from
 * statfs) for a dead FUSE mount. */
int keg_fuse_live(const char *target);

/* Waits for a mounter just started for target: polls every poll_ms until
 * keg_fuse_live(target) is 0 (returns 0), gone(arg) is nonzero -- the mounter
 * went away (returns -EIO) -- or timeout_ms have passed (returns -ETIMEDOUT).
 * gone may be NULL. */
int keg_fuse_wait_live(const char *target, unsigned timeout_ms, unsigned poll_ms,
                       int (*gone)(void *arg), void *arg);

/* Unmounts the top mount at target, lazily (MNT_DETACH) when the plain form
 * fails (EBUSY, or ENOTCONN and the like from a dead FUSE daemon).  Returns 0
 * when it was unmounted, 1 when it was detached lazily, -EINVAL or -ENOENT
 * when nothing is mounted at target, or the plain form's -errno when the lazy
 * form failed too. */
int keg_umount_or_detach(const char *target);

#endif
