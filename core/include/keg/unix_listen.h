/* unix_listen.h -- a listening unix stream socket at a path of the file system. */
#ifndef KEG_UNIX_LISTEN_H
#define KEG_UNIX_LISTEN_H

#include <sys/types.h>

/* keg_unix_listen() flags. */
#define KEG_UNIX_LISTEN_REPLACE_LIVE 1   /* unlink a socket a live process still serves */

/* What keg_unix_listen() reports besides its result. */
struct keg_unix_listen_info {
    dev_t       dev;        /* on success: the socket file bound, from lstat */
    ino_t       ino;        /*   after listen (a later owner of the path has */
    mode_t      mode;       /*   another inode), and its mode bits (07777): the mode
                             *   asked for unless a chmod to it failed */
    int         replaced;   /* an existing socket file was unlinked first */
    const char *failed;     /* on error: the call that failed ("socket", "unlink",
                             * "bind", "listen", "lstat"), or NULL for a refusal
                             * of keg_unix_listen's own (see there) */
};

/* Creates an AF_UNIX stream socket (close-on-exec) bound to path and listening
 * (backlog 64).  The file is created under a umask that leaves it at most mode
 * (0600, 0700).  A socket file already at path is unlinked first when nothing
 * accepts connections on it (a stale one), and also when a live process serves
 * it if flags has KEG_UNIX_LISTEN_REPLACE_LIVE; any other file is left alone.
 * The bound file is lstat'ed after listen (a failure fails the call) and chmod'ed to
 * mode if it differs (a default ACL of the directory overrides the umask).  info may
 * be NULL.
 * Returns the listening descriptor, or -errno, with info->failed NULL for:
 *   -EEXIST        path exists and is not a socket (it is untouched)
 *   -EADDRINUSE    a live process serves the socket at path (not replacing)
 *   -ENAMETOOLONG  path does not fit sockaddr_un.sun_path
 *   -EINVAL        path is empty
 * Logs nothing: the caller says what the socket is for. */
int keg_unix_listen(const char *path, unsigned flags, mode_t mode,
                    struct keg_unix_listen_info *info);

#endif
