/* keg_mountinfo.c -- find the mount at a path in /proc/self/mountinfo. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "keg/keg.h"
#include "keg/mountinfo.h"
#include "keg/retry.h"

/* Undo the octal escapes (\040 for a space) of /proc/self/mountinfo in place. */
static void mountinfo_unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/* The top mount at abs: its file system type and its device ("maj:min"),
 * each cut to its size and "" when abs is not a mount point (either may be
 * NULL).  Returns 1, 0 or -errno as keg_mountinfo_find. */
static int mountinfo_scan(const char *abs, char *fstype, size_t fstype_size, char *dev,
                          size_t dev_size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char *line = NULL;
    size_t cap = 0;
    int found = 0;
    if (!f)
        return -errno;
    if (fstype && fstype_size)
        fstype[0] = '\0';
    if (dev && dev_size)
        dev[0] = '\0';
    while (getline(&line, &cap, f) > 0) {
        /* id parent maj:min root mountpoint options [optional...] - fstype source super */
        char *save = NULL;
        char *fld[5] = {0};
        char *tok = strtok_r(line, " ", &save);
        for (int i = 0; i < 5 && tok; i++) {
            fld[i] = tok;
            tok = i < 4 ? strtok_r(NULL, " ", &save) : tok;
        }
        if (!fld[4])
            continue;
        mountinfo_unescape(fld[4]);
        if (strcmp(fld[4], abs) != 0)
            continue;
        found = 1;   /* keep going: the last matching line is the top mount */
        if (dev && dev_size)
            snprintf(dev, dev_size, "%s", fld[2]);
        if (fstype && fstype_size) {
            char *rest = save ? strstr(save, " - ") : NULL;
            if (rest) {
                rest += 3;
                size_t n = strcspn(rest, " ");
                if (n >= fstype_size)
                    n = fstype_size - 1;
                memcpy(fstype, rest, n);
                fstype[n] = '\0';
            }
        }
    }
    free(line);     /* checksrc: ok -- getline's buffer */
    fclose(f);
    return found;
}

int keg_mountinfo_find(const char *abs, char *fstype, size_t fstype_size)
{
    return mountinfo_scan(abs, fstype, fstype_size, NULL, 0);
}

int keg_mountinfo_dev(const char *abs, char *dev, size_t dev_size)
{
    return mountinfo_scan(abs, NULL, 0, dev, dev_size);
}

int keg_fuse_live(const char *target)
{
    struct statfs sfs;
    struct stat st, pst;
    char parent[PATH_MAX + 4];
    if (statfs(target, &sfs) < 0)
        return -errno;          /* -ENOTCONN: dead FUSE mount */
    if ((unsigned long)sfs.f_type != KEG_FUSE_SUPER_MAGIC)
        return -EINVAL;
    /* a FUSE file system, but is it mounted at target itself? */
    snprintf(parent, sizeof(parent), "%s/..", target);
    if (stat(target, &st) < 0 || stat(parent, &pst) < 0)
        return -errno;
    if (st.st_dev == pst.st_dev && st.st_ino != pst.st_ino)
        return -EINVAL;
    return 0;
}

int keg_fuse_wait_live(const char *target, unsigned timeout_ms, unsigned poll_ms,
                       int (*gone)(void *arg), void *arg)
{
    int64_t t0 = keg_mono_ns();
    for (;;) {
        if (keg_fuse_live(target) == 0)
            return 0;
        if (gone && gone(arg))
            return -EIO;
        if (keg_mono_ns() - t0 >= (int64_t)timeout_ms * 1000000)
            return -ETIMEDOUT;
        keg_sleep_ms(poll_ms);
    }
}

int keg_umount_or_detach(const char *target)
{
    if (umount2(target, 0) == 0)
        return 0;
    int e = errno;
    if (e == EINVAL || e == ENOENT)
        return -e;
    if (umount2(target, MNT_DETACH) < 0 && errno != EINVAL)
        return -e;
    return 1;
}
