/* keg_metrics_http.c -- the /metrics HTTP endpoint on libmicrohttpd.
 *
 * DESIGN
 * The server runs libmicrohttpd's own polling thread; each request to /metrics renders
 * the program's figures into a memory stream (open_memstream) handed to libmicrohttpd,
 * which frees it after sending.  Rendering reads atomics and stats snapshots only, so a
 * scrape never holds a lock of the file system while it writes to the socket.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "keg/mem.h"
#include "keg/metrics.h"
#define KEG_LOG_TAG "metrics"
#include "keg/log.h"

struct keg_metrics_server {
    struct MHD_Daemon     *d;
    keg_metrics_render_fn *render;
    void                  *arg;
};

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

/* Split "HOST:PORT" / "[V6]:PORT" / ":PORT" into host (NULL: any) and port. */
static int metrics_split(const char *addr, char *host, size_t hn, char *port, size_t pn)
{
    const char *colon;
    if (!addr || !*addr)
        return -EINVAL;
    if (addr[0] == '[') {
        const char *end = strchr(addr, ']');
        if (!end || end[1] != ':' || (size_t)(end - addr - 1) >= hn)
            return -EINVAL;
        memcpy(host, addr + 1, (size_t)(end - addr - 1));
        host[end - addr - 1] = '\0';
        colon = end + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || (size_t)(colon - addr) >= hn)
            return -EINVAL;
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = '\0';
    }
    if (!colon[1] || strlen(colon + 1) >= pn || strspn(colon + 1, "0123456789") !=
                                                     strlen(colon + 1))
        return -EINVAL;
    if (strtoul(colon + 1, NULL, 10) > 65535)
        return -EINVAL;
    snprintf(port, pn, "%s", colon + 1);
    return 0;
}

int keg_metrics_start(const char *addr, keg_metrics_render_fn *render, void *arg,
                      struct keg_metrics_server **out, unsigned *port_out)
{
    char host[256], port[8];
    struct addrinfo hints, *ai = NULL;
    *out = NULL;
    if (port_out)
        *port_out = 0;
    if (metrics_split(addr, host, sizeof(host), port, sizeof(port)) < 0)
        return -EINVAL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int g = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (g != 0 || !ai) {
        KEG_ERR("--metrics %s: cannot resolve '%s': %s", addr, host, gai_strerror(g));
        return -EINVAL;
    }
    struct keg_metrics_server *s = keg_calloc(1, sizeof(*s));
    if (!s) {
        freeaddrinfo(ai);
        return -ENOMEM;
    }
    s->render = render;
    s->arg = arg;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, metrics_handler, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_LIMIT, 16u,
                            MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        int rc = errno ? -errno : -EADDRINUSE;
        KEG_ERR("--metrics %s: cannot listen: %s", addr, strerror(-rc));
        keg_free(s);
        return rc;
    }
    if (port_out) {
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
    MHD_stop_daemon(s->d);
    keg_free(s);
}
