/* mnt_progress.c -- the progress bar of every command that shows one (fsck, gc, warmup,
 * dump, load).
 *
 * One look everywhere:
 *   "LABEL [#########...........]  45%  9012/20016  1.2 GiB/2.6 GiB  41 MiB/s  0:31 ETA 0:38"
 * The counters are atomics that only grow (add, or set to a larger value), and a line is
 * rendered under one mutex from the counters as they are at that moment: whatever order
 * threads add in, the figures on screen never go backwards.  Redraws are throttled by time
 * (interval_ns, ~150 ms), not by calls, and the phase ends with its line redrawn at its
 * final figures and a newline.  On a stream that is not a terminal, with --no-progress or
 * --quiet, nothing is drawn at all (no control characters); the commands print their
 * one-line summary either way.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "keg/log.h"

#include "mnt_i.h"

#define PROGRESS_WIDTH    20                 /* characters of the bar itself */
#define PROGRESS_INTERVAL 150000000LL        /* ns between two redraws */

static int64_t progress_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void mnt_progress_init(struct mnt_progress *p, FILE *out, int mode)
{
    memset(p, 0, sizeof(*p));
    p->out = out;
    if (mode == MNT_PROGRESS_ON)
        p->bar = 1;
    else if (mode == MNT_PROGRESS_AUTO)
        p->bar = !mnt_no_progress && keg_log_level >= LOG_WARNING && isatty(fileno(out));
    p->interval_ns = PROGRESS_INTERVAL;
    pthread_mutex_init(&p->mu, NULL);
    p->t0_ns = progress_now();
    p->start_ns = p->t0_ns;
    atomic_init(&p->items, 0);
    atomic_init(&p->bytes, 0);
    atomic_init(&p->total_items, 0);
    atomic_init(&p->total_bytes, 0);
    atomic_init(&p->next_ns, 0);
}

void mnt_progress_destroy(struct mnt_progress *p)
{
    pthread_mutex_destroy(&p->mu);
}

/*----- rendering -----*/

static void fmt_duration(int64_t ns, char *buf, size_t size)
{
    uint64_t s = ns > 0 ? (uint64_t)(ns / 1000000000LL) : 0;
    if (s >= 3600)
        snprintf(buf, size, "%llu:%02u:%02u", (unsigned long long)(s / 3600),
                 (unsigned)(s / 60 % 60), (unsigned)(s % 60));
    else
        snprintf(buf, size, "%u:%02u", (unsigned)(s / 60), (unsigned)(s % 60));
}

/* Append to buf at *len (always NUL-terminated, truncated at size). */
static void put(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    va_list ap;
    if (*len >= size - 1)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len = KEG_MIN(*len + (size_t)n, size - 1);
}

/* The bar line (without "\r" and without the erase/newline), from the counters now.
 * Call with p->mu held. */
static size_t render(struct mnt_progress *p, int64_t now, char *buf, size_t size)
{
    uint64_t items = atomic_load(&p->items);
    uint64_t bytes = atomic_load(&p->bytes);
    uint64_t ti = atomic_load(&p->total_items);
    uint64_t tb = atomic_load(&p->total_bytes);
    uint64_t done = tb ? bytes : items;
    uint64_t total = tb ? tb : ti;
    int64_t el = now - p->start_ns;
    double secs = (double)el / 1e9;
    char a[32], b[32], t[32];
    size_t len = 0;

    buf[0] = '\0';
    put(buf, size, &len, "%s", p->label);
    if (total) {
        uint64_t d = KEG_MIN(done, total);
        unsigned pct = (unsigned)((double)d * 100.0 / (double)total);
        unsigned fill = (unsigned)((double)d * PROGRESS_WIDTH / (double)total);
        char bar[PROGRESS_WIDTH + 1];
        for (unsigned i = 0; i < PROGRESS_WIDTH; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[PROGRESS_WIDTH] = '\0';
        put(buf, size, &len, " [%s] %3u%%", bar, pct);
    }
    if (ti)
        put(buf, size, &len, "  %llu/%llu", (unsigned long long)items, (unsigned long long)ti);
    else
        put(buf, size, &len, "  %llu", (unsigned long long)items);
    if (tb)
        put(buf, size, &len, "  %s/%s", mnt_fmt_size(bytes, a, sizeof(a)),
            mnt_fmt_size(tb, b, sizeof(b)));
    else if (bytes)
        put(buf, size, &len, "  %s", mnt_fmt_size(bytes, a, sizeof(a)));
    if (secs >= 0.1) {
        if (bytes)
            put(buf, size, &len, "  %s/s", mnt_fmt_size((uint64_t)((double)bytes / secs), a,
                                                       sizeof(a)));
        else
            put(buf, size, &len, "  %.0f/s", (double)items / secs);
    }
    fmt_duration(el, t, sizeof(t));
    put(buf, size, &len, "  %s", t);
    if (total && done > 0 && done < total && secs >= 1) {
        fmt_duration((int64_t)((double)el * (double)(total - done) / (double)done), t,
                     sizeof(t));
        put(buf, size, &len, " ETA %s", t);
    }
    return len;
}

/* Draw the line now (p->mu held); end: finish it with a newline. */
static void draw(struct mnt_progress *p, int64_t now, int end)
{
    char line[256];
    render(p, now, line, sizeof(line));
    fprintf(p->out, "\r%s\033[K%s", line, end ? "\n" : "");
    fflush(p->out);
    p->redraws++;
    p->drawn = !end;
    atomic_store(&p->next_ns, now + p->interval_ns);
}

/* Redraw when the interval has passed; never waits for another thread's redraw. */
static void maybe_draw(struct mnt_progress *p)
{
    if (!p->bar)
        return;
    int64_t now = progress_now();
    if (now < atomic_load(&p->next_ns))
        return;
    if (pthread_mutex_trylock(&p->mu) != 0)
        return;
    now = progress_now();
    if (p->started && now >= atomic_load(&p->next_ns))
        draw(p, now, 0);
    pthread_mutex_unlock(&p->mu);
}

/*----- phases and counters -----*/

static void finish_locked(struct mnt_progress *p)
{
    if (p->bar && p->started)
        draw(p, progress_now(), 1);
    p->started = 0;
    p->drawn = 0;
}

static void start_locked(struct mnt_progress *p, const char *label, uint64_t total_items,
                         uint64_t total_bytes)
{
    finish_locked(p);
    snprintf(p->label, sizeof(p->label), "%s", label);
    atomic_store(&p->items, 0);
    atomic_store(&p->bytes, 0);
    atomic_store(&p->total_items, total_items);
    atomic_store(&p->total_bytes, total_bytes);
    p->start_ns = progress_now();
    p->started = 1;
    /* the first line after one interval: a phase that ends at once is drawn once, at its end */
    atomic_store(&p->next_ns, p->start_ns + p->interval_ns);
}

void mnt_progress_start(struct mnt_progress *p, const char *label, uint64_t total_items,
                        uint64_t total_bytes)
{
    pthread_mutex_lock(&p->mu);
    start_locked(p, label, total_items, total_bytes);
    pthread_mutex_unlock(&p->mu);
}

void mnt_progress_total(struct mnt_progress *p, uint64_t total_items, uint64_t total_bytes)
{
    atomic_store(&p->total_items, total_items);
    atomic_store(&p->total_bytes, total_bytes);
}

void mnt_progress_add(struct mnt_progress *p, uint64_t n_items, uint64_t n_bytes)
{
    if (n_items)
        atomic_fetch_add(&p->items, n_items);
    if (n_bytes)
        atomic_fetch_add(&p->bytes, n_bytes);
    maybe_draw(p);
}

static void atomic_max(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load(a);
    while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
        ;
}

void mnt_progress_set(struct mnt_progress *p, uint64_t done_items, uint64_t done_bytes)
{
    atomic_max(&p->items, done_items);
    atomic_max(&p->bytes, done_bytes);
    maybe_draw(p);
}

void mnt_progress_finish(struct mnt_progress *p)
{
    pthread_mutex_lock(&p->mu);
    finish_locked(p);
    pthread_mutex_unlock(&p->mu);
}

void mnt_progress_print(struct mnt_progress *p, FILE *f, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&p->mu);
    if (p->drawn) {
        fputs("\r\033[K", p->out);
        fflush(p->out);
        p->drawn = 0;
        atomic_store(&p->next_ns, 0);      /* the bar comes back with the next count */
    }
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fflush(f);
    pthread_mutex_unlock(&p->mu);
}

void mnt_progress_clear(struct mnt_progress *p)
{
    pthread_mutex_lock(&p->mu);
    if (p->drawn) {
        fputs("\r\033[K", p->out);
        fflush(p->out);
        p->drawn = 0;
        atomic_store(&p->next_ns, 0);
    }
    pthread_mutex_unlock(&p->mu);
}

void mnt_progress_summary(struct mnt_progress *p, FILE *f, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&p->mu);
    finish_locked(p);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fprintf(f, " in %.1f s\n", (double)(progress_now() - p->t0_ns) / 1e9);
    fflush(f);
    pthread_mutex_unlock(&p->mu);
}

double mnt_progress_elapsed(const struct mnt_progress *p)
{
    return (double)(progress_now() - p->t0_ns) / 1e9;
}

void mnt_progress_fn(void *arg, uint64_t done, uint64_t total, const char *what)
{
    struct mnt_progress *p = arg;
    pthread_mutex_lock(&p->mu);
    if (!p->started || strncmp(p->label, what, sizeof(p->label) - 1) != 0)
        start_locked(p, what, total, 0);
    else if (total != atomic_load(&p->total_items))
        atomic_store(&p->total_items, total);
    pthread_mutex_unlock(&p->mu);
    mnt_progress_set(p, done, 0);
}
