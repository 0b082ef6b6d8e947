/* metrics.c -- `kegfs-csi --metrics HOST:PORT`: the driver's Prometheus endpoint.
 *
 * RPCs are counted by method and status code with a latency histogram per method
 * (server.c reports each finished call); the node service adds its publish records
 * (read from the state at scrape time), the mounters it re-established by cause and its
 * recovery rounds.  Counters are relaxed atomics; the endpoint is keg_metrics_http.c.
 */
#include <string.h>

#include "csi_i.h"
#include "keg/metrics.h"
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
static struct keg_metrics_server *cm_server;

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
    size_t n = 0;
    if (csi_state_snapshot(ctx->state, &recs, &n) == 0) {
        keg_metrics_family(f, "kegfs_csi_published_targets", "gauge",
                           "targets this node plugin has published (one mounter each)");
        keg_metrics_sample_u64(f, "kegfs_csi_published_targets", "", n);
        csi_publish_free_array(recs, n);
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
