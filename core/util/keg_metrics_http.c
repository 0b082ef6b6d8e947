/* keg_metrics_http.c -- the /metrics HTTP endpoint on libmicrohttpd.
 *
 * DESIGN
 * The server runs libmicrohttpd's own polling thread; each request to /metrics renders
 * the program's figures into a memory stream (open_memstream) handed to libmicrohttpd,
 * which frees it after sending.  Rendering reads atomics and stats snapshots only, so a
 * scrape never holds a lock of the file system while it writes to the socket.
 *
 * A "unix:/PATH" address is an AF_UNIX stream socket this file creates with
 * keg_unix_listen() (mode 0600; a stale socket file is replaced, one that another
 * process serves is refused) and hands to libmicrohttpd as its listen socket
 * (MHD_OPTION_LISTEN_SOCKET): the node plugin of the CSI driver scrapes its mounters
 * that way, without a TCP port per mount.  The socket file is the server's only while
 * its device and inode are the ones bound here: a later server (a restarted worker of
 * the same mount) replaces a stale file, and stopping the earlier one must not unlink
 * the newer socket.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "keg/mem.h"
#include "keg/metrics.h"
#include "keg/unix_listen.h"
#define KEG_LOG_TAG "metrics"
#include "keg/log.h"

struct keg_metrics_server {
    struct MHD_Daemon     *d;
    keg_metrics_render_fn *render;
    void                  *arg;
    char   path[KEG_METRICS_UNIX_PATH_MAX];  /* the unix socket bound here, "" for TCP */
    dev_t  dev;                               /* and its file, unlinked at stop while */
    ino_t  ino;                               /* it is still this one */
};

_Static_assert(KEG_METRICS_UNIX_PATH_MAX == sizeof(((struct sockaddr_un *)0)->sun_path),
               "KEG_METRICS_UNIX_PATH_MAX is the size of sun_path");

static enum MHD_Result metrics_reply(struct MHD_Connection *c, unsigned status,
                                     const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result metrics_handler(void *cls, struct MHD_Connection *c, const char *url,
                                       const char *method, const char *version,
                                       const char *upload, size_t *upload_size, void **ctx)
{
    struct keg_metrics_server *s = cls;
    (void)version;
    (void)upload;
    (void)ctx;
    if (*upload_size)
        return MHD_NO;          /* no request body expected */
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return metrics_reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    if (strcmp(url, "/metrics") != 0)
        return metrics_reply(c, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n");

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return metrics_reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    s->render(s->arg, f);
    fclose(f);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(buf);      /* checksrc: ok -- open_memstream's buffer */
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/*----------------------------------------------------------------------------
 * Addresses
 *--------------------------------------------------------------------------*/

static int metrics_bad(const char **why, const char *reason, int rc)
{
    if (why)
        *why = reason;
    return rc;
}

int keg_metrics_parse_addr(const char *addr, struct keg_metrics_addr *out, const char **why)
{
    const char *colon;
    memset(out, 0, sizeof(*out));
    if (why)
        *why = NULL;
    if (!addr || !*addr)
        return metrics_bad(why, "empty address (HOST:PORT or unix:/PATH)", -EINVAL);
    if (strncmp(addr, "unix:", 5) == 0) {
        const char *path = addr + 5;
        if (path[0] != '/')
            return metrics_bad(why, "a unix socket path must be absolute (unix:/PATH)",
                               -EINVAL);
        if (strlen(path) >= sizeof(out->path))
            return metrics_bad(why, "the unix socket path is longer than 107 bytes",
                               -ENAMETOOLONG);
        if (path[strlen(path) - 1] == '/')
            return metrics_bad(why, "the unix socket path names a directory", -EINVAL);
        out->is_unix = 1;
        memcpy(out->path, path, strlen(path) + 1);
        return 0;
    }
    if (addr[0] == '[') {
        const char *end = strchr(addr, ']');
        if (!end || end[1] != ':' || (size_t)(end - addr - 1) >= sizeof(out->host))
            return metrics_bad(why, "expected [V6]:PORT", -EINVAL);
        memcpy(out->host, addr + 1, (size_t)(end - addr - 1));
        out->host[end - addr - 1] = '\0';
        colon = end + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || (size_t)(colon - addr) >= sizeof(out->host))
            return metrics_bad(why, "expected HOST:PORT, :PORT or unix:/PATH", -EINVAL);
        memcpy(out->host, addr, (size_t)(colon - addr));
        out->host[colon - addr] = '\0';
    }
    size_t pl = strlen(colon + 1);
    if (!pl || pl >= sizeof(out->port) || strspn(colon + 1, "0123456789") != pl ||
        strtoul(colon + 1, NULL, 10) > 65535)
        return metrics_bad(why, "the port must be a number 0..65535", -EINVAL);
    memcpy(out->port, colon + 1, pl + 1);
    return 0;
}

/*----------------------------------------------------------------------------
 * Listening
 *--------------------------------------------------------------------------*/

/* Create, bind (0600) and listen on the unix socket of a.  *fd_out gets it and s->path,
 * s->dev, s->ino name its file.  Returns 0 or -errno (message logged). */
static int metrics_listen_unix(const struct keg_metrics_addr *a, struct keg_metrics_server *s,
                               int *fd_out)
{
    struct keg_unix_listen_info ul;
    *fd_out = -1;
    int fd = keg_unix_listen(a->path, 0, 0600, &ul);
    if (ul.replaced)
        KEG_INFO("--metrics unix:%s: replaced a stale socket", a->path);
    if (fd < 0) {
        if (fd == -EEXIST && !ul.failed)
            KEG_ERR("--metrics unix:%s: the path exists and is not a socket", a->path);
        else if (fd == -EADDRINUSE && !ul.failed)
            KEG_ERR("--metrics unix:%s: another process serves this socket", a->path);
        else if (ul.failed && !strcmp(ul.failed, "unlink"))
            KEG_ERR("--metrics unix:%s: cannot remove the stale socket: %s", a->path,
                    strerror(-fd));
        else
            KEG_ERR("--metrics unix:%s: cannot listen: %s", a->path, strerror(-fd));
        return fd;
    }
    if (ul.mode != 0600)
        KEG_WARN("--metrics unix:%s: mode %o, and chmod 0600 failed", a->path,
                 (unsigned)ul.mode);
    memcpy(s->path, a->path, strlen(a->path) + 1);
    s->dev = ul.dev;
    s->ino = ul.ino;
    *fd_out = fd;
    return 0;
}

/* Unlink the socket file of s if it is still the one bound by s. */
static void metrics_unlink_own(const struct keg_metrics_server *s)
{
    struct stat st;
    if (!s->path[0] || lstat(s->path, &st) < 0)
        return;
    if (S_ISSOCK(st.st_mode) && st.st_dev == s->dev && st.st_ino == s->ino)
        unlink(s->path);
}

int keg_metrics_start(const char *addr, keg_metrics_render_fn *render, void *arg,
                      struct keg_metrics_server **out, unsigned *port_out)
{
    struct keg_metrics_addr a;
    struct addrinfo hints, *ai = NULL;
    const char *why = NULL;
    int lfd = -1, rc;
    *out = NULL;
    if (port_out)
        *port_out = 0;
    rc = keg_metrics_parse_addr(addr, &a, &why);
    if (rc < 0) {
        KEG_ERR("--metrics %s: %s", addr ? addr : "", why);
        return rc;
    }
    if (!a.is_unix) {
        memset(&hints, 0, sizeof(hints));
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE;
        int g = getaddrinfo(a.host[0] ? a.host : NULL, a.port, &hints, &ai);
        if (g != 0 || !ai) {
            KEG_ERR("--metrics %s: cannot resolve '%s': %s", addr, a.host, gai_strerror(g));
            return -EINVAL;
        }
    }
    struct keg_metrics_server *s = keg_calloc(1, sizeof(*s));
    if (!s) {
        if (ai)
            freeaddrinfo(ai);
        return -ENOMEM;
    }
    s->render = render;
    s->arg = arg;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (a.is_unix) {
        rc = metrics_listen_unix(&a, s, &lfd);
        if (rc < 0) {
            keg_free(s);
            return rc;
        }
        /* libmicrohttpd owns a copy: whether a failed start closes the socket it was
         * given is not documented, so this file never closes that copy itself (at
         * worst a failed start leaks one descriptor, never closes a reused one). */
        int mfd = fcntl(lfd, F_DUPFD_CLOEXEC, 0);
        if (mfd >= 0)
            s->d = MHD_start_daemon(flags, 0, NULL, NULL, metrics_handler, s,
                                    MHD_OPTION_LISTEN_SOCKET, mfd,
                                    MHD_OPTION_CONNECTION_LIMIT, 16u,
                                    MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                    MHD_OPTION_END);
        else
            errno = EMFILE;
    } else {
        if (ai->ai_family == AF_INET6)
            flags |= MHD_USE_IPv6;
        s->d = MHD_start_daemon(flags, 0, NULL, NULL, metrics_handler, s,
                                MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                MHD_OPTION_CONNECTION_LIMIT, 16u,
                                MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                MHD_OPTION_END);
        freeaddrinfo(ai);
    }
    if (!s->d) {
        rc = errno ? -errno : -EADDRINUSE;
        KEG_ERR("--metrics %s: cannot listen: %s", addr, strerror(-rc));
        if (lfd >= 0) {
            metrics_unlink_own(s);
            close(lfd);
        }
        keg_free(s);
        return rc;
    }
    if (lfd >= 0)
        close(lfd);         /* the daemon's copy listens on */
    if (port_out && !a.is_unix) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
        *port_out = di ? di->port : 0;
    }
    *out = s;
    return 0;
}

void keg_metrics_stop(struct keg_metrics_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->d);      /* closes the listen socket, also one handed to it */
    metrics_unlink_own(s);
    keg_free(s);
}
