/* metrics.h -- Prometheus metrics: latency histograms, the text exposition format, and
 * an HTTP endpoint (libmicrohttpd, on TCP or a unix socket) that renders them on each
 * scrape.
 *
 * A program keeps its own counters (atomics, or the stats structs of the layers it
 * already has) and installs one render callback; each GET /metrics calls it with a
 * stream and the callback writes families with keg_metrics_family() followed by
 * their samples.  Nothing is rendered between scrapes.
 */
#ifndef KEG_METRICS_H
#define KEG_METRICS_H

#include <stdint.h>
#include <stdio.h>

/* Latency buckets, seconds (upper bounds; +Inf is implied). */
#define KEG_METRICS_NBUCKETS 16
extern const double keg_metrics_buckets[KEG_METRICS_NBUCKETS];

/* A latency histogram; all fields atomic, zero-initialised is empty.
 * Thread-safe: keg_metrics_observe() from any thread, rendering at any time. */
struct keg_metrics_hist {
    uint64_t bucket[KEG_METRICS_NBUCKETS]; /* count of observations <= bound (not cumulative) */
    uint64_t count;
    uint64_t sum_ns;
};

/* Record one observation of ns nanoseconds. */
void keg_metrics_observe(struct keg_metrics_hist *h, uint64_t ns);

/* Monotonic clock in nanoseconds (for latency measurements). */
uint64_t keg_metrics_now_ns(void);

/* Write "# HELP name help" and "# TYPE name type" (type: counter, gauge, histogram). */
void keg_metrics_family(FILE *f, const char *name, const char *type, const char *help);

/* Write one sample "name{labels} value".  labels: "" or 'k="v",k2="v2"' (values
 * already escaped with keg_metrics_escape when they come from outside). */
void keg_metrics_sample(FILE *f, const char *name, const char *labels, double value);
void keg_metrics_sample_u64(FILE *f, const char *name, const char *labels, uint64_t value);

/* Write the _bucket/_sum/_count samples of h under name with labels. */
void keg_metrics_hist_samples(FILE *f, const char *name, const char *labels,
                              const struct keg_metrics_hist *h);

/* Copy s into out (size n) escaped for a label value (\\, \", \n).  Returns out. */
char *keg_metrics_escape(const char *s, char *out, size_t n);

/* The scrape callback: write every family to f.  Called from the server's thread. */
typedef void keg_metrics_render_fn(void *arg, FILE *f);

struct keg_metrics_server;

/* Longest unix socket path, with its NUL (sizeof(sockaddr_un.sun_path)). */
#define KEG_METRICS_UNIX_PATH_MAX 108

/* A parsed endpoint address: "HOST:PORT", "[V6]:PORT", ":PORT" (all addresses), or
 * "unix:/ABS/PATH" (an AF_UNIX stream socket). */
struct keg_metrics_addr {
    int  is_unix;                          /* 1: path is set, host and port are not */
    char host[256];                        /* "" for all addresses */
    char port[8];
    char path[KEG_METRICS_UNIX_PATH_MAX];  /* absolute socket path */
};

/* Parse addr into *out (cleared first).  *why (may be NULL) gets a static one-line
 * reason on failure.  Returns 0, -EINVAL (malformed; a relative or empty unix path),
 * or -ENAMETOOLONG (a unix path that does not fit a socket address). */
int keg_metrics_parse_addr(const char *addr, struct keg_metrics_addr *out, const char **why);

/* Serve GET /metrics on addr (keg_metrics_parse_addr; PORT 0 picks a free port) from
 * a thread of the server.  Any other path is 404, any other method 405.  *port_out
 * (may be NULL) gets the bound TCP port (0 for a unix socket).
 * A unix socket is created mode 0600 (umask around bind); a stale socket file at the
 * path (nothing accepts on it) is replaced, while a socket some process still serves
 * is left alone (-EADDRINUSE) and any other file is an error (-EEXIST).
 * keg_metrics_stop() unlinks it unless another server has replaced it since.
 * OWNERSHIP: stop and free with keg_metrics_stop().  Returns 0, -EINVAL or
 * -ENAMETOOLONG for a bad address, or -errno (-EADDRINUSE ...). */
int keg_metrics_start(const char *addr, keg_metrics_render_fn *render, void *arg,
                      struct keg_metrics_server **out, unsigned *port_out);
/* Stop serving (waits for a scrape in progress), unlink a unix socket this server
 * created, and free.  NULL is fine. */
void keg_metrics_stop(struct keg_metrics_server *s);

#endif
