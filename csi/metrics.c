/* metrics.c -- `kegfs-csi --metrics HOST:PORT`: the driver's Prometheus endpoint.
 *
 * RPCs are counted by method and status code with a latency histogram per method
 * (server.c reports each finished call); the node service adds its publish records
 * (read from the state at scrape time) by the state the plugin last saw them in, the
 * mounters alive now, the mounters it re-established by cause and its recovery rounds.
 * Counters are relaxed atomics; the endpoint is keg_metrics_http.c.
 *
 * With the mounters' metrics on (ctx->mounter_metrics: every mounter serves /metrics
 * on a unix socket, mount_mgr.h), each scrape also fetches the /metrics of every live
 * mounter with a socket and appends them merged by family, each sample labelled
 * mounter="<16 hex digits of a hash of its target>" (scrape.c): the plugin's endpoint
 * is the one address Prometheus needs per node.  A mounter that does not answer within
 * CSI_SCRAPE_MOUNTER_MS is left out of that scrape and counted.
 *
 * LOCKS: cm_vol_lock protects cm_vols (the states of the records, by target).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "csi_i.h"
#include "keg/hash.h"
#include "keg/mem.h"
#include "keg/metrics.h"
#include "mount_mgr.h"
#include "scrape.h"
#include "state.h"
#define KEG_LOG_TAG "csi.metrics"
#include "keg/log.h"

#define CSI_NCODES 17

static const char *cm_names[CSI_METRICS_MAX_METHODS];
static size_t cm_nmethods;
static uint64_t cm_calls[CSI_METRICS_MAX_METHODS][CSI_NCODES];  /* atomic */
static struct keg_metrics_hist cm_lat[CSI_METRICS_MAX_METHODS];
static uint64_t cm_restarts[CSI_RESTART_NCAUSES];                /* atomic */
static uint64_t cm_rounds;                                       /* atomic */
static uint64_t cm_scrape_errors;                                /* atomic */
static struct keg_metrics_server *cm_server;

/* The state the plugin last saw each record in, by target. */
struct cm_vol {
    char *target;
    enum csi_vol_state state;
};
static pthread_mutex_t cm_vol_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cm_vol *cm_vols;             /* protected by cm_vol_lock */
static size_t cm_nvols, cm_capvols;        /* protected by cm_vol_lock */
static const char *const cm_vol_names[CSI_VOL_NSTATES] = {"live", "recovering", "failed"};

void csi_metrics_methods(const char *const *names, size_t n)
{
    cm_nmethods = n < CSI_METRICS_MAX_METHODS ? n : CSI_METRICS_MAX_METHODS;
    for (size_t i = 0; i < cm_nmethods; i++)
        cm_names[i] = names[i];
}

void csi_metrics_rpc(int method, int code, int64_t dur_us)
{
    if (method < 0 || (size_t)method >= cm_nmethods)
        return;
    if (code < 0 || code >= CSI_NCODES)
        code = 2;       /* UNKNOWN */
    __atomic_add_fetch(&cm_calls[method][code], 1, __ATOMIC_RELAXED);
    keg_metrics_observe(&cm_lat[method], dur_us > 0 ? (uint64_t)dur_us * 1000 : 0);
}

void csi_metrics_restart(enum csi_restart_cause cause)
{
    __atomic_add_fetch(&cm_restarts[cause], 1, __ATOMIC_RELAXED);
}

void csi_metrics_round(void)
{
    __atomic_add_fetch(&cm_rounds, 1, __ATOMIC_RELAXED);
}

void csi_metrics_volume(const char *target, enum csi_vol_state st)
{
    pthread_mutex_lock(&cm_vol_lock);
    for (size_t i = 0; i < cm_nvols; i++) {
        if (strcmp(cm_vols[i].target, target) == 0) {
            cm_vols[i].state = st;
            pthread_mutex_unlock(&cm_vol_lock);
            return;
        }
    }
    if (cm_nvols == cm_capvols) {
        size_t nc = cm_capvols ? cm_capvols * 2 : 16;
        struct cm_vol *nv = keg_realloc(cm_vols, nc * sizeof(*nv));
        if (!nv) {
            pthread_mutex_unlock(&cm_vol_lock);
            return;             /* the record counts as recovering: harmless */
        }
        cm_vols = nv;
        cm_capvols = nc;
    }
    cm_vols[cm_nvols].target = keg_strdup(target);
    if (cm_vols[cm_nvols].target) {
        cm_vols[cm_nvols].state = st;
        cm_nvols++;
    }
    pthread_mutex_unlock(&cm_vol_lock);
}

void csi_metrics_volume_forget(const char *target)
{
    pthread_mutex_lock(&cm_vol_lock);
    for (size_t i = 0; i < cm_nvols; i++) {
        if (strcmp(cm_vols[i].target, target) == 0) {
            keg_free(cm_vols[i].target);
            cm_vols[i] = cm_vols[--cm_nvols];
            break;
        }
    }
    pthread_mutex_unlock(&cm_vol_lock);
}

/* Records by state: a record not noted since this plugin started is recovering. */
static void cm_volumes_by_state(const struct csi_publish *recs, size_t n,
                                uint64_t count[CSI_VOL_NSTATES])
{
    memset(count, 0, CSI_VOL_NSTATES * sizeof(count[0]));
    pthread_mutex_lock(&cm_vol_lock);
    for (size_t r = 0; r < n; r++) {
        enum csi_vol_state st = CSI_VOL_RECOVERING;
        for (size_t i = 0; i < cm_nvols; i++)
            if (strcmp(cm_vols[i].target, recs[r].target) == 0)
                st = cm_vols[i].state;
        count[st]++;
    }
    pthread_mutex_unlock(&cm_vol_lock);
}

/* Fetch the /metrics of the mounters of recs that have a socket and are alive (alive
 * NULL: not known, try all) into *out.  Returns how many were asked. */
static size_t cm_fetch_mounters(const struct csi_publish *recs, size_t n,
                                const unsigned char *alive, struct csi_scrape **out)
{
    struct csi_scrape_src *src = keg_calloc(n ? n : 1, sizeof(*src));
    char (*ids)[17] = keg_calloc(n ? n : 1, sizeof(*ids));
    size_t k = 0, failed = 0;
    *out = NULL;
    if (!src || !ids || csi_scrape_new(out) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (!recs[i].metrics || !recs[i].metrics[0] || (alive && !alive[i]))
            continue;
        keg_fnv1a64_hex(recs[i].target, ids[k]);   /* never the target itself */
        src[k].socket = recs[i].metrics;
        src[k].id = ids[k];
        k++;
    }
    if (csi_scrape_fetch(*out, src, k, CSI_SCRAPE_MOUNTER_MS, CSI_SCRAPE_TOTAL_MS,
                         &failed) < 0)
        KEG_WARN("cannot fetch the mounters' metrics (out of memory or libcurl unusable)");
    __atomic_add_fetch(&cm_scrape_errors, failed, __ATOMIC_RELAXED);
out:
    keg_free(src);
    keg_free(ids);
    return k;
}

static void cm_render(void *arg, FILE *f)
{
    struct csi_ctx *ctx = arg;
    char lab[256];
    keg_metrics_family(f, "kegfs_csi_rpc_total", "counter", "CSI calls, by method and code");
    for (size_t m = 0; m < cm_nmethods; m++)
        for (int c = 0; c < CSI_NCODES; c++) {
            uint64_t v = __atomic_load_n(&cm_calls[m][c], __ATOMIC_RELAXED);
            if (!v)
                continue;
            snprintf(lab, sizeof(lab), "method=\"%s\",code=\"%s\"", cm_names[m],
                     csi_code_name(c));
            keg_metrics_sample_u64(f, "kegfs_csi_rpc_total", lab, v);
        }
    keg_metrics_family(f, "kegfs_csi_rpc_duration_seconds", "histogram",
                       "CSI call latency, by method");
    for (size_t m = 0; m < cm_nmethods; m++) {
        if (!__atomic_load_n(&cm_lat[m].count, __ATOMIC_RELAXED))
            continue;
        snprintf(lab, sizeof(lab), "method=\"%s\"", cm_names[m]);
        keg_metrics_hist_samples(f, "kegfs_csi_rpc_duration_seconds", lab, &cm_lat[m]);
    }
    if (!ctx->state)
        return;
    struct csi_publish *recs = NULL;
    struct csi_scrape *mounters = NULL;
    unsigned char *alive = NULL;
    size_t n = 0, asked = 0;
    uint64_t t1 = 0;
    if (csi_state_snapshot(ctx->state, &recs, &n) == 0) {
        alive = keg_calloc(n ? n : 1, 1);
        if (alive && (!ctx->mm || !ctx->mm->ops->alive ||
                      ctx->mm->ops->alive(ctx->mm, recs, n, CSI_SCRAPE_MOUNTER_MS, alive) < 0)) {
            keg_free(alive);
            alive = NULL;       /* not known */
        }
        if (ctx->mounter_metrics) {
            t1 = keg_metrics_now_ns();
            asked = cm_fetch_mounters(recs, n, alive, &mounters);
            t1 = keg_metrics_now_ns() - t1;
        }
        uint64_t by_state[CSI_VOL_NSTATES];
        cm_volumes_by_state(recs, n, by_state);
        keg_metrics_family(f, "kegfs_csi_published_targets", "gauge",
                           "targets this node plugin has published (one mounter each)");
        keg_metrics_sample_u64(f, "kegfs_csi_published_targets", "", n);
        keg_metrics_family(f, "kegfs_csi_volumes", "gauge",
                           "publish records by the state the node plugin last saw them in");
        for (int st = 0; st < CSI_VOL_NSTATES; st++) {
            snprintf(lab, sizeof(lab), "state=\"%s\"", cm_vol_names[st]);
            keg_metrics_sample_u64(f, "kegfs_csi_volumes", lab, by_state[st]);
        }
        if (alive) {
            uint64_t live = 0;
            for (size_t i = 0; i < n; i++)
                live += alive[i];
            keg_metrics_family(f, "kegfs_csi_live_mounters", "gauge",
                               "mounter processes of this node plugin's publishes running now");
            keg_metrics_sample_u64(f, "kegfs_csi_live_mounters", "", live);
        }
        csi_publish_free_array(recs, n);
        keg_free(alive);
    }
    keg_metrics_family(f, "kegfs_csi_mounter_restarts_total", "counter",
                       "mounts re-established by the node plugin, by cause");
    keg_metrics_sample_u64(f, "kegfs_csi_mounter_restarts_total", "cause=\"dead\"",
                           __atomic_load_n(&cm_restarts[CSI_RESTART_DEAD], __ATOMIC_RELAXED));
    keg_metrics_sample_u64(f, "kegfs_csi_mounter_restarts_total", "cause=\"missing\"",
                           __atomic_load_n(&cm_restarts[CSI_RESTART_MISSING],
                                           __ATOMIC_RELAXED));
    keg_metrics_family(f, "kegfs_csi_recovery_rounds_total", "counter",
                       "passes of the recovery watchdog over the publish records");
    keg_metrics_sample_u64(f, "kegfs_csi_recovery_rounds_total", "",
                           __atomic_load_n(&cm_rounds, __ATOMIC_RELAXED));
    if (!ctx->mounter_metrics) {
        csi_scrape_free(mounters);
        return;
    }
    keg_metrics_family(f, "kegfs_csi_mounter_scrape_errors_total", "counter",
                       "mounters whose /metrics did not answer a scrape in time (left out "
                       "of that scrape)");
    keg_metrics_sample_u64(f, "kegfs_csi_mounter_scrape_errors_total", "",
                           __atomic_load_n(&cm_scrape_errors, __ATOMIC_RELAXED));
    keg_metrics_family(f, "kegfs_csi_mounters_scraped", "gauge",
                       "mounters whose /metrics this scrape asked for");
    keg_metrics_sample_u64(f, "kegfs_csi_mounters_scraped", "", asked);
    keg_metrics_family(f, "kegfs_csi_mounter_scrape_duration_seconds", "gauge",
                       "time this scrape spent fetching the mounters' /metrics");
    keg_metrics_sample(f, "kegfs_csi_mounter_scrape_duration_seconds", "",
                       (double)t1 / 1e9);
    if (mounters)
        csi_scrape_write(mounters, f);
    csi_scrape_free(mounters);
}

int csi_metrics_start(struct csi_ctx *ctx, const char *addr)
{
    unsigned port = 0;
    int rc = keg_metrics_start(addr, cm_render, ctx, &cm_server, &port);
    if (rc == 0)
        KEG_INFO("metrics on http://%s/metrics (port %u)", addr, port);
    return rc;
}

void csi_metrics_stop(void)
{
    keg_metrics_stop(cm_server);
    cm_server = NULL;
}
