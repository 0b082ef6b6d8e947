/* confine.c -- keep every path and mount option a CSI caller names inside the
 * places the node plugin was configured to own.
 *
 * DESIGN
 * The node plugin runs as root with the host's mount namespace, so a path in a
 * request is a path on the node.  Three rules:
 *   1. A target path must lie below the kubelet root (--kubelet-dir), and no
 *      component below that root may be a symbolic link: a pod's volume
 *      directory is never a link, and following one would mount (or create
 *      directories) wherever the link points.  The root itself is trusted
 *      configuration and may be a link (some distributions move
 *      /var/lib/kubelet); it is resolved once.
 *   2. Missing components are created one at a time relative to the already
 *      opened parent (mkdirat + openat with O_NOFOLLOW), so a link swapped in
 *      between the check and the creation is refused, not followed.
 *   3. Mount flags come from a whitelist: tuning options with plain values,
 *      the generic flags mount(8) passes, and `cache-dir`, whose value is
 *      confined like a target to --cache-root.  Options that name files the
 *      root mounter would write or read (log-file, ca-file, config) and
 *      unknown options are refused with INVALID_ARGUMENT.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csi_i.h"
#include "keg/mem.h"
#define KEG_LOG_TAG "csi.node"
#include "keg/log.h"

/* The part of path below root ("" for root itself), or NULL if path is not
 * root or below it.  Both are absolute; root has no trailing slash. */
static const char *confine_below(const char *root, const char *path)
{
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        n--;
    if (n == 1 && root[0] == '/')
        return path + 1;
    if (strncmp(root, path, n) != 0)
        return NULL;
    if (path[n] == '\0')
        return path + n;
    if (path[n] != '/')
        return NULL;
    return path + n + 1;
}

/* Walk rel below the open directory dfd one component at a time, refusing
 * links and non-directories; create missing components (mode) when create.
 * Returns 0, -ENOENT (a component is missing and !create), -ELOOP (a link),
 * -ENOTDIR, or another -errno.  Consumes dfd. */
static int confine_walk(int dfd, const char *rel, int create, mode_t mode)
{
    char comp[NAME_MAX + 1];
    int rc = 0;
    while (*rel) {
        size_t len = strcspn(rel, "/");
        if (len == 0) {
            rel++;
            continue;
        }
        if (len > NAME_MAX) {
            rc = -ENAMETOOLONG;
            break;
        }
        memcpy(comp, rel, len);
        comp[len] = '\0';
        rel += len;
        if (strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0) {
            rc = -EINVAL;
            break;
        }
        struct stat sb;
        int last = rel[strspn(rel, "/")] == '\0';
        if (fstatat(dfd, comp, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = -errno;
            if (rc == -ENOTCONN && last) {
                rc = 0;         /* the target is a dead FUSE mount: it exists, no link */
                break;
            }
            if (rc != -ENOENT)
                break;
            if (!create)
                break;
            if (mkdirat(dfd, comp, mode) < 0 && errno != EEXIST) {
                rc = -errno;
                break;
            }
            rc = 0;
        } else if (S_ISLNK(sb.st_mode)) {
            rc = -ELOOP;
            break;
        } else if (!S_ISDIR(sb.st_mode)) {
            rc = -ENOTDIR;
            break;
        }
        int nfd = openat(dfd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0) {
            rc = errno == ENOTDIR ? -ELOOP : -errno;    /* swapped for a link */
            break;
        }
        close(dfd);
        dfd = nfd;
    }
    close(dfd);
    return rc;
}

int csi_confine_dir(const char *root, const char *path, int create, mode_t mode,
                    const char *what, struct csi_status *st)
{
    if (csi_check_path(path, what, st) < 0)
        return -1;
    if (!root || !*root)
        root = "/";
    char real[PATH_MAX];
    const char *rel = confine_below(root, path);
    if (!rel && realpath(root, real))
        rel = confine_below(real, path);
    if (!rel)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s %s is not below %s", what, path, root);
    int dfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        int e = errno;
        return csi_fail(st, e == ENOENT ? CSI_FAILED_PRECONDITION : CSI_INTERNAL,
                        "cannot open %s: %s", root, strerror(e));
    }
    int rc = confine_walk(dfd, rel, create, mode);
    if (rc == 0 || rc == -ENOENT)
        return 0;
    if (rc == -ELOOP)
        return csi_fail(st, CSI_INVALID_ARGUMENT,
                        "%s %s passes through a symbolic link below %s", what, path, root);
    if (rc == -ENOTDIR)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s %s: a component is not a directory",
                        what, path);
    if (rc == -EINVAL || rc == -ENAMETOOLONG)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s %s is not a plain path", what, path);
    return csi_fail(st, CSI_INTERNAL, "cannot create %s %s: %s", what, path, strerror(-rc));
}

/*----------------------------------------------------------------------------
 * Mount flags
 *--------------------------------------------------------------------------*/

/* kegfs tuning options a StorageClass or PV may set (value: [A-Za-z0-9._-]). */
static const char *const confine_tuning[] = {
    "attr-cache", "entry-cache", "dir-entry-cache", "buffer-size", "mem-cache-size",
    "cache-size", "writeback", "upload-workers", "idle-upload-workers", "max-staging",
    "drain-timeout", "upload-delay", "session-timeout", "heartbeat", "missing-block-wait",
    "s3-concurrency", "s3-retry-deadline", "read-ahead", "read-only", NULL,
};

/* Generic flags mount(8) and kubelet pass; no value. */
static const char *const confine_generic[] = {
    "rw", "ro", "defaults", "relatime", "noatime", "strictatime", "nodiratime", "lazytime",
    "dev", "nodev", "suid", "nosuid", "exec", "noexec", "sync", "async", "_netdev",
    "allow_other", "default_permissions", NULL,
};

static int confine_in(const char *const *list, const char *name, size_t len)
{
    for (size_t i = 0; list[i]; i++)
        if (strlen(list[i]) == len && strncmp(list[i], name, len) == 0)
            return 1;
    return 0;
}

int csi_confine_mount_flag(struct csi_ctx *ctx, const char *flag, size_t idx,
                           struct csi_status *st)
{
    size_t len = strcspn(flag, "=");
    const char *val = flag[len] ? flag + len + 1 : NULL;
    if (confine_in(confine_generic, flag, len)) {
        if (val)
            return csi_fail(st, CSI_INVALID_ARGUMENT, "mount flag %zu (%.*s) takes no value",
                            idx, (int)len, flag);
        return 0;
    }
    if (confine_in(confine_tuning, flag, len)) {
        for (const char *c = val ? val : ""; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-'))
                return csi_fail(st, CSI_INVALID_ARGUMENT,
                                "mount flag %zu (%.*s): the value may only hold letters, "
                                "digits, '.', '_' and '-'", idx, (int)len, flag);
        return 0;
    }
    if (len == 9 && strncmp(flag, "cache-dir", 9) == 0) {
        if (!val || !*val)
            return csi_fail(st, CSI_INVALID_ARGUMENT, "mount flag %zu: cache-dir needs a value",
                            idx);
        if (!ctx->cache_root || !*ctx->cache_root)
            return csi_fail(st, CSI_INVALID_ARGUMENT,
                            "mount flag %zu: cache-dir is not allowed (the plugin has no "
                            "--cache-root)", idx);
        /* created here, inside the root, so the root mounter never creates a
         * directory anywhere else */
        return csi_confine_dir(ctx->cache_root, val, 1, 0700, "cache-dir", st) < 0 ? -1 : 0;
    }
    return csi_fail(st, CSI_INVALID_ARGUMENT,
                    "mount flag %zu (%.*s) is not allowed; allowed: the generic flags (ro, rw, "
                    "noatime, relatime, nodev, nosuid, noexec, ...), cache-dir=DIR below %s, and "
                    "the tuning options attr-cache, entry-cache, dir-entry-cache, buffer-size, "
                    "mem-cache-size, cache-size, writeback, upload-workers, idle-upload-workers, "
                    "max-staging, drain-timeout, upload-delay, session-timeout, heartbeat, "
                    "missing-block-wait, s3-concurrency, s3-retry-deadline, read-ahead, read-only",
                    idx, (int)len, flag, ctx->cache_root ? ctx->cache_root : "--cache-root");
}
