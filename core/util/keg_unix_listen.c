/* keg_unix_listen.c -- create, bind and listen on a unix stream socket at a path:
 * the mount holder's request socket and the /metrics endpoint's unix sockets.
 *
 * DESIGN
 * A socket file outlives the process that bound it, so a restarted server finds
 * its predecessor's file at the path.  Only a socket file is ever unlinked here
 * (a regular file at the path is a mistake in the configuration, not ours to
 * remove); whether a socket is stale is asked by connecting to it, which only a
 * listening process accepts.  A caller that owns the path outright (the holder)
 * replaces even a live socket and skips that question.
 *
 * The mode is set by the umask at bind, so the file is never reachable with more
 * permissions than asked for, not even between bind and a chmod; the chmod after it
 * only mends a directory whose default ACL overrides the umask.  The umask is the
 * process's: for the length of one bind, files other threads create get at most
 * that mode too, never more than they asked for.
 *
 * Nothing is logged here: errors come back as distinct values and, in info, the
 * call that failed, for the caller's messages.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "keg/unix_listen.h"

/* Whether a process accepts connections on the socket at sa (a stale file refuses). */
static int unix_in_use(const struct sockaddr_un *sa)
{
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        return 0;
    int used = connect(c, (const struct sockaddr *)sa, sizeof(*sa)) == 0;
    close(c);
    return used;
}

int keg_unix_listen(const char *path, unsigned flags, mode_t mode,
                    struct keg_unix_listen_info *info)
{
    struct keg_unix_listen_info dummy;
    struct sockaddr_un sa;
    struct stat st;
    const char *failed = NULL;
    int rc;
    if (!info)
        info = &dummy;
    memset(info, 0, sizeof(*info));
    size_t len = strlen(path);
    if (!len)
        return -EINVAL;     /* an empty sun_path would bind an abstract address */
    if (len >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, len + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        info->failed = "socket";
        return -errno;
    }
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            rc = -EEXIST;
            goto fail;
        }
        if (!(flags & KEG_UNIX_LISTEN_REPLACE_LIVE) && unix_in_use(&sa)) {
            rc = -EADDRINUSE;
            goto fail;
        }
        if (unlink(path) < 0 && errno != ENOENT) {
            rc = -errno;
            failed = "unlink";
            goto fail;
        }
        info->replaced = 1;
    }
    mode_t um = umask(~mode & 0777);
    rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
    umask(um);
    if (rc < 0) {
        failed = "bind";
        goto fail;
    }
    if (listen(fd, 64) < 0) {
        rc = -errno;
        failed = "listen";
        goto fail;
    }
    if (lstat(path, &st) < 0) {
        rc = -errno;
        failed = "lstat";
        goto fail;
    }
    info->dev = st.st_dev;
    info->ino = st.st_ino;
    info->mode = st.st_mode & 07777;
    /* A default ACL on the directory takes the umask's place at bind. */
    if (info->mode != mode && chmod(path, mode) == 0)
        info->mode = mode;
    return fd;
fail:
    close(fd);
    info->failed = failed;
    return rc;
}
