/* keg_metrics.c -- Prometheus histograms and the text exposition format (version 0.0.4).
 * Histograms keep per-bucket (non-cumulative) counts and sum them at render time, so
 * observing is one atomic add per field.  The HTTP endpoint is keg_metrics_http.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keg/metrics.h"

const double keg_metrics_buckets[KEG_METRICS_NBUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

uint64_t keg_metrics_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void keg_metrics_observe(struct keg_metrics_hist *h, uint64_t ns)
{
    double s = (double)ns / 1e9;
    int i = 0;
    while (i < KEG_METRICS_NBUCKETS && s > keg_metrics_buckets[i])
        i++;
    if (i < KEG_METRICS_NBUCKETS)
        __atomic_add_fetch(&h->bucket[i], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->count, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->sum_ns, ns, __ATOMIC_RELAXED);
}

/*----- text format -----*/

void keg_metrics_family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void keg_metrics_sample(FILE *f, const char *name, const char *labels, double value)
{
    if (labels && *labels)
        fprintf(f, "%s{%s} %.10g\n", name, labels, value);
    else
        fprintf(f, "%s %.10g\n", name, value);
}

void keg_metrics_sample_u64(FILE *f, const char *name, const char *labels, uint64_t value)
{
    if (labels && *labels)
        fprintf(f, "%s{%s} %llu\n", name, labels, (unsigned long long)value);
    else
        fprintf(f, "%s %llu\n", name, (unsigned long long)value);
}

void keg_metrics_hist_samples(FILE *f, const char *name, const char *labels,
                              const struct keg_metrics_hist *h)
{
    const char *sep = labels && *labels ? "," : "";
    const char *lab = labels ? labels : "";
    uint64_t cum = 0;
    uint64_t count = __atomic_load_n(&h->count, __ATOMIC_RELAXED);
    for (int i = 0; i < KEG_METRICS_NBUCKETS; i++) {
        cum += __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED);
        if (cum > count)
            cum = count;        /* an observation between the two loads */
        fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, lab, sep, keg_metrics_buckets[i],
                (unsigned long long)cum);
    }
    fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, lab, sep, (unsigned long long)count);
    char n[160];
    snprintf(n, sizeof(n), "%s_sum", name);
    keg_metrics_sample(f, n, lab, (double)__atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED) / 1e9);
    snprintf(n, sizeof(n), "%s_count", name);
    keg_metrics_sample_u64(f, n, lab, count);
}

char *keg_metrics_escape(const char *s, char *out, size_t n)
{
    size_t o = 0;
    for (; s && *s && o + 3 < n; s++) {
        if (*s == '\\' || *s == '"') {
            out[o++] = '\\';
            out[o++] = *s;
        } else if (*s == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *s;
        }
    }
    if (n)
        out[o < n ? o : n - 1] = '\0';
    return out;
}

