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

#endif
