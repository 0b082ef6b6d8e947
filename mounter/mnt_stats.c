/* mnt_stats.c -- live figures of a running mounter: the stats file it rewrites every second,
 * its reader, and `kegfs stats MOUNTPOINT [--watch]`.
 *
 * DESIGN
 * The mounter (the FUSE worker process) runs one thread that, every second, takes
 * keg_stack_stats() of its object stack, keg_fs_mem_stats() (the --buffer-size
 * budget, read cache and write buffers) and its own counters (open files and
 * directories, how long the writeback has had work) and writes them as "key=value" lines to
 * "<run_dir>/mounts/<hash>.stats" (temp file + rename, so a reader never sees half
 * a file), next to the state file of the mount point (mnt_util.c).  The file holds no
 * secrets.  `kegfs stats` and `kegfs status` read it; `kegfs umount` reads it to say
 * why the mounter is still running (uploading staged objects).  The file is removed
 * when the mounter stops; a file whose pid is dead is stale and is removed by the
 * next mount (mnt_state_prune).
 *
 * The drain estimate (staged bytes / upload rate) is only as good as the rate, an
 * average over ~5 s that includes the idle time before the first upload of a busy
 * period: one small object uploaded after an idle spell gives a few B/s and an
 * estimate of weeks.  So the writer also publishes how long the writeback has had
 * work without a break (upload_busy_sec), and mnt_stats_drain() prints an estimate
 * only once that covers the rate's window or 1 MiB went through it, and caps it at
 * a day.
 *
 * The writer's state (one mounter per process):
 *   stopped --mnt_stats_start--> running --mnt_stats_stop--> stopped
 * protected by st_mu; `phase` ("serving", "draining") is published with the figures.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "stats"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/stack.h"

#include "mnt_i.h"

/*----- counters kept by the FUSE layer -----*/

static int64_t open_files_n;     /* atomic */
static int64_t open_dirs_n;      /* atomic */

void mnt_stats_open(int files, int dirs)
{
    __atomic_add_fetch(&open_files_n, files, __ATOMIC_RELAXED);
    __atomic_add_fetch(&open_dirs_n, dirs, __ATOMIC_RELAXED);
}

/*----- the file format: one table for writer and reader -----*/

#define F(name) {#name, offsetof(struct mnt_live, name)}
static const struct {
    const char *key;
    size_t      off;
} fields[] = {
    F(pid), F(time), F(started), F(has_cache), F(has_writeback), F(staged_bytes),
    F(staged_objects), F(unsynced_objects), F(uploading), F(failing_objects),
    F(uploaded_bytes), F(uploaded_objects), F(upload_errors), F(upload_rate_bps),
    F(waiting_puts), F(max_staging), F(cache_bytes), F(cache_objects), F(cache_budget),
    F(cache_hits), F(cache_misses), F(cache_shared), F(cache_corrupt), F(cache_evictions),
    F(open_files), F(open_dirs), F(restarts), F(mem_budget), F(mem_write_bytes),
    F(mem_read_bytes), F(mem_read_limit), F(mem_read_floor), F(mem_read_cap),
    F(mem_read_hits), F(mem_read_misses), F(mem_read_prefetched), F(mem_read_evicted),
    F(mem_read_dropped), F(oldest_staged_ms),
    F(upload_busy_sec), F(has_names), F(names_up), F(names_cached), F(names_answered),
    F(names_drops), F(has_store), F(store_failing_sec), F(store_retrying),
    F(store_retrying_puts), F(store_retries), F(store_failed),
};
#undef F
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static char *stats_path(const char *abs_mp)
{
    char h[17];
    mnt_path_hash(abs_mp, h);
    return keg_asprintf("%s/mounts/%s.stats", mnt_run_dir(), h);
}

/* Returns 0 or -errno. */
static int write_live(const char *path, const struct mnt_live *l)
{
    char *tmp = keg_asprintf("%s.tmp.%d", path, (int)getpid());
    int rc = 0;
    if (!tmp)
        return -ENOMEM;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;     /* buffered: one write(), not one per line */
    if (!f) {
        rc = -errno;
        if (fd >= 0)
            close(fd);
        goto out;
    }
    for (size_t i = 0; i < NFIELDS; i++) {
        uint64_t v;
        memcpy(&v, (const char *)l + fields[i].off, sizeof(v));
        fprintf(f, "%s=%llu\n", fields[i].key, (unsigned long long)v);
    }
    fprintf(f, "phase=%s\n", l->phase);
    if (ferror(f))
        rc = -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
out:
    if (rc)
        unlink(tmp);
    keg_free(tmp);
    return rc;
}

int mnt_stats_read(const char *abs_mp, struct mnt_live *l)
{
    char *path = stats_path(abs_mp);
    char *text = NULL;
    char *save = NULL;
    memset(l, 0, sizeof(*l));
    if (!path)
        return -ENOMEM;
    int rc = mnt_read_small_file(path, &text);
    keg_free(path);
    if (rc)
        return rc;
    for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(ln, '=');
        if (!eq)
            continue;
        *eq = '\0';
        if (strcmp(ln, "phase") == 0) {
            snprintf(l->phase, sizeof(l->phase), "%s", eq + 1);
            continue;
        }
        for (size_t i = 0; i < NFIELDS; i++) {
            uint64_t v = 0;
            if (strcmp(ln, fields[i].key) == 0 && mnt_parse_u64(eq + 1, &v) == 0)
                memcpy((char *)l + fields[i].off, &v, sizeof(v));
        }
    }
    keg_free(text);
    return l->pid ? 0 : -EINVAL;
}

static void mnt_stats_remove_path(const char *path, pid_t owner)
{
    if (owner == 0 || mnt_state_file_pid(path) == owner)
        unlink(path);
}

void mnt_stats_remove(const char *abs_mp, pid_t owner)
{
    char *path = stats_path(abs_mp);
    if (path)
        mnt_stats_remove_path(path, owner);
    keg_free(path);
}

/*----- the writer thread -----*/

static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t st_cv = PTHREAD_COND_INITIALIZER;
static struct {
    int            running;     /* protected by st_mu */
    int            stop;        /* protected by st_mu */
    char           phase[16];   /* protected by st_mu */
    struct keg_fs *fs;
    char          *path;        /* OWNERSHIP: keg_free at stop */
    uint64_t       started;     /* unix seconds */
    uint64_t       restarts;    /* workers restarted by the supervisor before this one */
    int64_t        busy_since;  /* CLOCK_MONOTONIC s + 1 when the writeback got work, 0: idle
                                   (stats thread only) */
    pthread_t      thread;
} w;

static int64_t mono_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec;
}

static void collect(struct mnt_live *l)
{
    struct keg_stack_stats s;
    keg_stack_stats(keg_fs_obj(w.fs), &s);
    memset(l, 0, sizeof(*l));
    l->pid = (uint64_t)getpid();
    l->time = (uint64_t)time(NULL);
    l->started = w.started;
    l->restarts = w.restarts;
    l->has_cache = (uint64_t)s.has_cache;
    l->has_writeback = (uint64_t)s.has_writeback;
    l->staged_bytes = s.staged_bytes;
    l->staged_objects = s.staged_objects;
    l->unsynced_objects = s.unsynced_objects;
    l->uploading = s.uploading;
    /* failing: parked after failed attempts, or being retried by the store now */
    l->failing_objects = s.failing_objects + s.store_retrying_puts;
    l->has_store = (uint64_t)s.has_store_health;
    l->store_failing_sec = (s.store_failing_ms + 999) / 1000;
    l->store_retrying = s.store_retrying;
    l->store_retrying_puts = s.store_retrying_puts;
    l->store_retries = s.store_retries;
    l->store_failed = s.store_failed;
    l->uploaded_bytes = s.uploaded_bytes;
    l->uploaded_objects = s.uploaded_objects;
    l->upload_errors = s.upload_errors;
    l->upload_rate_bps = s.upload_rate_bps;
    l->waiting_puts = s.waiting_puts;
    l->max_staging = s.max_staging;
    l->oldest_staged_ms = s.oldest_staged_ms;
    l->cache_bytes = s.cache_bytes;
    l->cache_objects = s.cache_objects;
    l->cache_budget = s.cache_budget;
    l->cache_hits = s.cache_hits;
    l->cache_misses = s.cache_misses;
    l->cache_shared = s.cache_shared;
    l->cache_corrupt = s.cache_corrupt;
    l->cache_evictions = s.cache_evictions;
    if (s.staged_objects == 0 && s.uploading == 0) {
        w.busy_since = 0;
    } else {
        int64_t now = mono_sec();
        if (w.busy_since == 0)
            w.busy_since = now + 1;
        l->upload_busy_sec = (uint64_t)(now + 1 - w.busy_since);
    }
    struct keg_fs_mem_stats m;
    keg_fs_mem_stats(w.fs, &m);
    l->mem_budget = m.budget;
    l->mem_write_bytes = m.write_bytes;
    l->mem_read_bytes = m.read_bytes;
    l->mem_read_limit = m.read_limit;
    l->mem_read_floor = m.read_floor;
    l->mem_read_cap = m.read_cap;
    l->mem_read_hits = m.read_hits;
    l->mem_read_misses = m.read_misses;
    l->mem_read_prefetched = m.read_prefetched;
    l->mem_read_evicted = m.read_evicted;
    l->mem_read_dropped = m.read_dropped;
    struct keg_meta_name_cache nc;
    if (keg_meta_name_cache_stats(keg_fs_meta(w.fs), &nc) == 0) {
        l->has_names = 1;
        l->names_up = (uint64_t)nc.up;
        l->names_cached = nc.names;
        l->names_answered = nc.answered;
        l->names_drops = nc.drops;
    }
    int64_t f = __atomic_load_n(&open_files_n, __ATOMIC_RELAXED);
    int64_t d = __atomic_load_n(&open_dirs_n, __ATOMIC_RELAXED);
    l->open_files = f > 0 ? (uint64_t)f : 0;
    l->open_dirs = d > 0 ? (uint64_t)d : 0;
}

static void *stats_main(void *arg)
{
    struct mnt_live l;
    int warned = 0;
    KEG_UNUSED(arg);
    keg_thread_name("keg-stats");
    pthread_mutex_lock(&st_mu);
    while (!w.stop) {
        pthread_mutex_unlock(&st_mu);
        collect(&l);
        pthread_mutex_lock(&st_mu);
        snprintf(l.phase, sizeof(l.phase), "%s", w.phase);
        pthread_mutex_unlock(&st_mu);
        /* A mounter still draining after its mount went away leaves the file
         * to a newer mount at the same path (one that names another, live pid);
         * a serving mounter always writes it. */
        int rc = 0;
        pid_t owner = strcmp(l.phase, "draining") == 0 ? mnt_state_file_pid(w.path) : 0;
        if (owner <= 0 || owner == getpid() || (kill(owner, 0) < 0 && errno == ESRCH))
            rc = write_live(w.path, &l);
        if (rc && !warned) {
            KEG_WARN("cannot write the stats file %s: %s ('kegfs stats' will not work)",
                     w.path, strerror(-rc));
            warned = 1;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_mutex_lock(&st_mu);
        if (!w.stop)
            pthread_cond_timedwait(&st_cv, &st_mu, &ts);
    }
    pthread_mutex_unlock(&st_mu);
    return NULL;
}

int mnt_stats_start(const char *abs_mp, struct keg_fs *fs, uint64_t restarts)
{
    int rc;
    pthread_mutex_lock(&st_mu);
    KEG_ASSERT(!w.running);
    w.fs = fs;
    w.stop = 0;
    w.started = (uint64_t)time(NULL);
    w.restarts = restarts;
    w.busy_since = 0;
    snprintf(w.phase, sizeof(w.phase), "serving");
    w.path = stats_path(abs_mp);
    if (!w.path) {
        pthread_mutex_unlock(&st_mu);
        return -ENOMEM;
    }
    rc = -pthread_create(&w.thread, NULL, stats_main, NULL);
    if (rc == 0)
        w.running = 1;
    else {
        keg_free(w.path);
        w.path = NULL;
    }
    pthread_mutex_unlock(&st_mu);
    return rc;
}

void mnt_stats_phase(const char *phase)
{
    pthread_mutex_lock(&st_mu);
    snprintf(w.phase, sizeof(w.phase), "%s", phase);
    pthread_cond_signal(&st_cv);     /* publish at once */
    pthread_mutex_unlock(&st_mu);
}

void mnt_stats_stop(void)
{
    pthread_mutex_lock(&st_mu);
    if (!w.running) {
        pthread_mutex_unlock(&st_mu);
        return;
    }
    w.stop = 1;
    pthread_cond_signal(&st_cv);
    pthread_mutex_unlock(&st_mu);
    pthread_join(w.thread, NULL);
    mnt_stats_remove_path(w.path, getpid());
    keg_free(w.path);
    w.path = NULL;
    w.running = 0;
}

/*----- printing -----*/

static const char *ratio(uint64_t a, uint64_t b, char *buf, size_t size)
{
    if (a + b == 0)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.1f%%", 100.0 * (double)a / (double)(a + b));
    return buf;
}

const char *mnt_stats_drain(const struct mnt_live *l, char *buf, size_t size)
{
    uint64_t window_bytes = l->upload_rate_bps * MNT_RATE_WINDOW_SEC;
    if (l->staged_bytes == 0) {
        buf[0] = '\0';
    } else if (l->upload_busy_sec < MNT_RATE_WINDOW_SEC && window_bytes < MNT_RATE_MIN_BYTES) {
        /* the rate's window still holds idle time before the uploads began */
        snprintf(buf, size, "drain time: unknown (rate not measured yet)");
    } else if (l->upload_rate_bps == 0) {
        snprintf(buf, size, "drain time: unknown (no upload finished in the last ~%us)",
                 (unsigned)MNT_RATE_WINDOW_SEC);
    } else {
        uint64_t sec = l->staged_bytes / l->upload_rate_bps +
                       (l->staged_bytes % l->upload_rate_bps != 0);
        if (sec > MNT_DRAIN_MAX_SEC)
            snprintf(buf, size, "drains in more than a day");
        else
            snprintf(buf, size, "drains in ~%llus", (unsigned long long)sec);
    }
    return buf;
}

void mnt_stats_print(FILE *out, const struct mnt_live *l, const char *in)
{
    char a[32], b[32], c[64];
    time_t now = time(NULL);
    long age = (long)(now - (time_t)l->time);
    fprintf(out, "%smounter:   pid %llu, %s, up %llus, updated %lds ago%s", in,
            (unsigned long long)l->pid, l->phase[0] ? l->phase : "?",
            (unsigned long long)(l->time - l->started), age < 0 ? 0 : age,
            age > 5 ? " (STALE: the mounter is not updating it)" : "");
    if (l->restarts)
        fprintf(out, ", worker restarted %llu times", (unsigned long long)l->restarts);
    fputc('\n', out);
    fprintf(out, "%sopen:      %llu files, %llu directories\n", in,
            (unsigned long long)l->open_files, (unsigned long long)l->open_dirs);
    if (l->has_writeback) {
        fprintf(out, "%sstaged:    %s in %llu objects (max %s), %llu not yet fsync'ed, "
                "%llu writes waiting", in, mnt_fmt_size(l->staged_bytes, a, sizeof(a)),
                (unsigned long long)l->staged_objects, mnt_fmt_size(l->max_staging, b, sizeof(b)),
                (unsigned long long)l->unsynced_objects, (unsigned long long)l->waiting_puts);
        if (l->staged_objects && l->oldest_staged_ms)
            fprintf(out, "; the oldest waits for %.1fs", (double)l->oldest_staged_ms / 1000.0);
        fputc('\n', out);
        fprintf(out, "%suploads:   %llu in flight, %llu failing, %s/s; %s in %llu objects "
                "uploaded, %llu errors", in, (unsigned long long)l->uploading,
                (unsigned long long)l->failing_objects,
                mnt_fmt_size(l->upload_rate_bps, a, sizeof(a)),
                mnt_fmt_size(l->uploaded_bytes, b, sizeof(b)),
                (unsigned long long)l->uploaded_objects, (unsigned long long)l->upload_errors);
        if (l->staged_bytes)
            fprintf(out, "; %s", mnt_stats_drain(l, c, sizeof(c)));
        fputc('\n', out);
    } else {
        fprintf(out, "%swriteback: off\n", in);
    }
    if (l->has_store) {
        if (l->store_failing_sec)
            fprintf(out, "%sstore:     FAILING for %llus: %llu requests retrying (%llu uploads)",
                    in, (unsigned long long)l->store_failing_sec,
                    (unsigned long long)l->store_retrying,
                    (unsigned long long)l->store_retrying_puts);
        else
            fprintf(out, "%sstore:     ok", in);
        fprintf(out, "; %llu retries, %llu requests ran out of retries\n",
                (unsigned long long)l->store_retries, (unsigned long long)l->store_failed);
    }
    if (l->mem_budget) {
        fprintf(out, "%smemory:    budget %s; read cache %s", in,
                mnt_fmt_size(l->mem_budget, a, sizeof(a)),
                mnt_fmt_size(l->mem_read_bytes, b, sizeof(b)));
        fprintf(out, " (may hold %s now, floor %s", mnt_fmt_size(l->mem_read_limit, a, sizeof(a)),
                mnt_fmt_size(l->mem_read_floor, b, sizeof(b)));
        if (l->mem_read_cap)
            fprintf(out, ", cap %s", mnt_fmt_size(l->mem_read_cap, a, sizeof(a)));
        fprintf(out, "); write buffers %s\n", mnt_fmt_size(l->mem_write_bytes, a, sizeof(a)));
        if (l->mem_read_hits + l->mem_read_misses + l->mem_read_prefetched +
            l->mem_read_evicted + l->mem_read_dropped)  /* 0: no reads yet, or an older mounter */
            fprintf(out, "%s           read cache: %llu hits, %llu misses (%s hit), "
                    "%llu read ahead, %llu evicted, %llu dropped behind readers\n", in,
                    (unsigned long long)l->mem_read_hits, (unsigned long long)l->mem_read_misses,
                    ratio(l->mem_read_hits, l->mem_read_misses, c, sizeof(c)),
                    (unsigned long long)l->mem_read_prefetched,
                    (unsigned long long)l->mem_read_evicted,
                    (unsigned long long)l->mem_read_dropped);
    }
    if (l->has_cache) {
        fprintf(out, "%scache:     %s of %s in %llu objects; %llu hits, %llu misses (%s hit), "
                "%llu shared, %llu corrupt, %llu evicted\n", in,
                mnt_fmt_size(l->cache_bytes, a, sizeof(a)),
                mnt_fmt_size(l->cache_budget, b, sizeof(b)),
                (unsigned long long)l->cache_objects, (unsigned long long)l->cache_hits,
                (unsigned long long)l->cache_misses, ratio(l->cache_hits, l->cache_misses, c,
                                                           sizeof(c)),
                (unsigned long long)l->cache_shared, (unsigned long long)l->cache_corrupt,
                (unsigned long long)l->cache_evictions);
    } else {
        fprintf(out, "%scache:     no SSD cache\n", in);
    }
    if (l->has_names)
        fprintf(out, "%snames:     directory name cache %s; %llu names cached, %llu lookups "
                "answered without a request, %llu drops\n", in,
                l->names_up ? "up" : "down (not subscribed)",
                (unsigned long long)l->names_cached, (unsigned long long)l->names_answered,
                (unsigned long long)l->names_drops);
}

/*----- kegfs stats -----*/

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs stats [OPTIONS] MOUNTPOINT\n"
        "\n"
        "Show the live figures of the mounter serving MOUNTPOINT: open files, writeback\n"
        "(staged bytes and objects, uploads in flight, upload rate, drain estimate), the\n"
        "memory budget (--buffer-size: read cache and write buffers) and the SSD cache\n"
        "(bytes, hits, misses).  The mounter updates them every second.\n"
        "\n"
        "Options:\n"
        "  -w, --watch              refresh every second until interrupted\n"
        MNT_COMMON_HELP
        "\n"
        "Exit status: 0 shown, 1 not a running KegFS mounter, 2 usage error.\n");
}

int mnt_cmd_stats(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"watch", no_argument, NULL, 'w'},
        MNT_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct mnt_cmdline cl = {
        .name = "stats", .shortopts = "wvh", .longopts = longopts, .usage = usage,
        .usage_error = "stats needs MOUNTPOINT (see 'kegfs stats --help')",
        .flag_opt = 'w',
    };
    struct mnt_live l;
    char *abs = NULL;
    int watch;
    int rc;
    rc = mnt_parse_cmdline(argc, argv, &cl);
    if (rc >= 0)
        return rc;
    watch = cl.flag;
    rc = mnt_abspath(cl.operand, &abs);
    if (rc) {
        mnt_error("%s: %s", cl.operand, strerror(-rc));
        return 1;
    }
    for (int n = 0;; n++) {
        rc = mnt_stats_read(abs, &l);
        if (rc) {
            if (n > 0 && watch) {
                printf("\nthe mounter of %s has exited\n", abs);
                rc = 0;
            } else if (rc == -ENOENT) {
                mnt_error("no running KegFS mounter serves %s (no stats file in %s/mounts)",
                          abs, mnt_run_dir());
                rc = 1;
            } else {
                mnt_error("cannot read the stats of %s: %s", abs, strerror(-rc));
                rc = 1;
            }
            break;
        }
        if (watch)
            printf("\033[H\033[2J");
        printf("%s:\n", abs);
        mnt_stats_print(stdout, &l, "  ");
        fflush(stdout);
        if (!watch)
            break;
        sleep(1);
    }
    keg_free(abs);
    return rc;
}
