/* s3_bench.c -- throughput of the S3 store (keg_obj "s3") against a plain libcurl
 * keep-alive loop signed with the same signer, on the same server in the same run.
 *
 *   eval "$(scripts/s3-server.sh env)"
 *   s3_bench [-t seconds-per-run] [-r rounds] [-s 4k,4m] [-j 1,16] [-R]
 *
 * For each object size and thread count it runs PUT then GET, alternating the
 * plain loop and keg_obj (rounds times each, best run kept), and prints ops/s,
 * MiB/s and keg/plain.  Both sides hash every PUT body into x-amz-content-sha256
 * and keep one connection per thread; keg GETs carry a Range header (as the
 * store always does), the plain loop's do not unless -R.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "keg/keg.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/obj.h"
#include "obj_s3_i.h"
#include "s3_sign_i.h"

#define MAX_THREADS 64

static const char *env_bucket, *env_ak, *env_sk;
static struct s3_target target;
static struct s3_signer signer;
static char *base_url;              /* scheme://host */
static char *bucket_path;           /* "/bucket" (path-style) or "" */
static int plain_range;             /* -R: plain GETs send Range like keg does */

static double now_s(void)
{
    return (double)keg_mono_ns() / 1e9;
}

/*----------------------------------------------------------------------------
 * The plain loop: one easy handle per thread, options set per request.
 *--------------------------------------------------------------------------*/

struct plain_io {
    const char *src;
    size_t      len, pos;
    char       *dst;
    size_t      cap, got;
};

static size_t plain_read(char *p, size_t sz, size_t n, void *arg)
{
    struct plain_io *io = arg;
    size_t k = KEG_MIN(sz * n, io->len - io->pos);
    memcpy(p, io->src + io->pos, k);
    io->pos += k;
    return k;
}

static size_t plain_write(char *p, size_t sz, size_t n, void *arg)
{
    struct plain_io *io = arg;
    size_t k = KEG_MIN(sz * n, io->cap - io->got);
    memcpy(io->dst + io->got, p, k);
    io->got += k;
    return sz * n;
}

static int plain_req(CURL *h, int put, const char *key, char *buf, size_t len)
{
    struct s3_str uri = {0};
    struct s3_hdr_lines hl;
    struct curl_slist *l = NULL;
    struct plain_io io = { .src = buf, .len = len, .dst = buf, .cap = len };
    char hash[S3_SHA256_HEX];
    int rc = -EIO;

    s3_str_adds(&uri, bucket_path);
    s3_str_addc(&uri, '/');
    s3_uri_encode(&uri, target.prefix, strlen(target.prefix), 1);
    s3_uri_encode(&uri, key, strlen(key), 1);
    if (put)
        s3_sha256_hex(buf, len, hash);
    char range[64];
    snprintf(range, sizeof(range), "bytes=0-%zu", len - 1);
    const struct s3_kv extra[] = { { "Range", range } };
    size_t nextra = !put && plain_range ? 1 : 0;
    if (s3_sign_headers(&signer, put ? "PUT" : "GET", target.host, uri.p, "", extra, nextra,
                        put ? hash : S3_EMPTY_SHA256, time(NULL), &hl) < 0)
        goto out;
    for (size_t i = 0; i < hl.n; i++)
        l = curl_slist_append(l, hl.line[i]);
    l = curl_slist_append(l, "Expect:");
    s3_hdr_lines_free(&hl);
    char *url = keg_asprintf("%s%s", base_url, uri.p);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_UPLOAD, put ? 1L : 0L);
    if (put) {
        curl_easy_setopt(h, CURLOPT_READFUNCTION, plain_read);
        curl_easy_setopt(h, CURLOPT_READDATA, &io);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
    } else {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, plain_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &io);
    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    keg_free(url);
    if (cc == CURLE_OK && (status == 200 || status == 206) && (put || io.got == len))
        rc = 0;
    else
        fprintf(stderr, "plain %s %s: curl %d, HTTP %ld\n", put ? "PUT" : "GET", key, cc, status);
out:
    curl_slist_free_all(l);
    s3_str_free(&uri);
    return rc;
}

/*----------------------------------------------------------------------------
 * Runner
 *--------------------------------------------------------------------------*/

struct run {
    int              keg;          /* 1: keg_obj, 0: plain */
    int              put;
    size_t           size;
    int              nkeys;        /* keys per thread (cycled) */
    int              threads;
    double           secs;
    struct keg_obj  *o;
    pthread_barrier_t barrier;
    atomic_int       failed;
};

struct worker {
    struct run *r;
    int         id;
    uint64_t    ops;
    pthread_t   th;
};

static void key_of(char *k, size_t n, const struct run *r, int id, int i)
{
    snprintf(k, n, "bench-%s/%zu/t%02d/k%03d", r->keg ? "keg" : "plain", r->size, id,
             i % r->nkeys);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->r;
    char key[128];
    char *buf = keg_malloc(r->size);
    CURL *h = r->keg ? NULL : curl_easy_init();
    memset(buf, 'a' + w->id, r->size);

    /* Untimed: make the GET keys exist and warm the connection. */
    if (!r->put) {
        for (int i = 0; i < r->nkeys; i++) {
            key_of(key, sizeof(key), r, w->id, i);
            int rc = r->keg ? keg_obj_put(r->o, key, buf, r->size)
                            : plain_req(h, 1, key, buf, r->size);
            if (rc)
                atomic_store(&r->failed, 1);
        }
    } else {
        key_of(key, sizeof(key), r, w->id, 0);
        if ((r->keg ? keg_obj_put(r->o, key, buf, r->size) : plain_req(h, 1, key, buf, r->size)))
            atomic_store(&r->failed, 1);
    }
    pthread_barrier_wait(&r->barrier);
    double end = now_s() + r->secs;
    for (int i = 0; now_s() < end && !atomic_load(&r->failed); i++) {
        key_of(key, sizeof(key), r, w->id, i);
        int rc;
        if (r->keg && r->put)
            rc = keg_obj_put(r->o, key, buf, r->size);
        else if (r->keg)
            rc = keg_obj_get(r->o, key, 0, buf, r->size) == (ssize_t)r->size ? 0 : -EIO;
        else
            rc = plain_req(h, r->put, key, buf, r->size);
        if (rc) {
            atomic_store(&r->failed, 1);
            break;
        }
        w->ops++;
    }
    if (h)
        curl_easy_cleanup(h);
    keg_free(buf);
    return NULL;
}

/* Returns ops/s, or -1 on failure. */
static double run_once(int keg, int put, size_t size, int threads, double secs)
{
    struct run r = { .keg = keg, .put = put, .size = size, .threads = threads, .secs = secs,
                     .nkeys = size > (1 << 20) ? 4 : 32 };
    struct worker w[MAX_THREADS];
    if (keg) {
        struct keg_obj_conf c = { .bucket = env_bucket, .access_key = env_ak,
                                  .secret_key = env_sk, .concurrency = (unsigned)threads };
        if (keg_obj_open("s3", &c, NULL, &r.o) != 0)
            return -1;
    }
    pthread_barrier_init(&r.barrier, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){ .r = &r, .id = i };
        pthread_create(&w[i].th, NULL, worker_main, &w[i]);
    }
    pthread_barrier_wait(&r.barrier);
    double t0 = now_s();
    uint64_t ops = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].th, NULL);
        ops += w[i].ops;
    }
    double dt = now_s() - t0;
    pthread_barrier_destroy(&r.barrier);
    if (!put) {
        /* Untimed: remove this run's objects (the plain loop's through a keg store). */
        struct keg_obj *d = r.o;
        struct keg_obj_conf c = { .bucket = env_bucket, .access_key = env_ak,
                                  .secret_key = env_sk };
        if (d || keg_obj_open("s3", &c, NULL, &d) == 0) {
            char key[128];
            for (int t = 0; t < threads; t++) {
                for (int i = 0; i < r.nkeys; i++) {
                    key_of(key, sizeof(key), &r, t, i);
                    keg_obj_del(d, key);
                }
            }
            if (d != r.o)
                keg_obj_close(d);
        }
    }
    keg_obj_close(r.o);
    return atomic_load(&r.failed) ? -1 : (double)ops / dt;
}

static int parse_list(const char *s, long *out, int max, int sizes)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0)
            return -1;
        if (sizes && (*end == 'k' || *end == 'K'))
            v <<= 10, end++;
        else if (sizes && (*end == 'm' || *end == 'M'))
            v <<= 20, end++;
        out[n++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return n;
}

int main(int argc, char **argv)
{
    double secs = 3;
    int rounds = 2, opt;
    long sizes[8] = { 4 << 10, 4 << 20 }, thr[8] = { 1, 16 };
    int nsizes = 2, nthr = 2;
    const char *why = NULL;

    while ((opt = getopt(argc, argv, "t:r:s:j:R")) != -1) {
        switch (opt) {
        case 't': secs = strtod(optarg, NULL); break;
        case 'r': rounds = (int)strtol(optarg, NULL, 10); break;
        case 's': nsizes = parse_list(optarg, sizes, 8, 1); break;
        case 'j': nthr = parse_list(optarg, thr, 8, 0); break;
        case 'R': plain_range = 1; break;
        default:
            fprintf(stderr, "usage: %s [-t secs] [-r rounds] [-s 4k,4m] [-j 1,16] [-R]\n", argv[0]);
            return 2;
        }
    }
    if (secs <= 0 || rounds < 1 || nsizes < 1 || nthr < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    for (int i = 0; i < nthr; i++) {
        if (thr[i] > MAX_THREADS) {
            fprintf(stderr, "at most %d threads\n", MAX_THREADS);
            return 2;
        }
    }
    env_bucket = getenv("KEG_TEST_S3_BUCKET");
    env_ak = getenv("KEG_TEST_S3_ACCESS_KEY");
    env_sk = getenv("KEG_TEST_S3_SECRET_KEY");
    if (!env_bucket || !env_ak || !env_sk) {
        fprintf(stderr, "set KEG_TEST_S3_BUCKET, KEG_TEST_S3_ACCESS_KEY, KEG_TEST_S3_SECRET_KEY "
                        "(eval \"$(scripts/s3-server.sh env)\")\n");
        return 77;
    }
    keg_log_set_level(LOG_WARNING);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (s3_target_parse(env_bucket, NULL, &target, &why) < 0) {
        fprintf(stderr, "bad KEG_TEST_S3_BUCKET: %s\n", why);
        return 2;
    }
    s3_signer_init(&signer, env_ak, env_sk, NULL, target.region ? target.region : "us-east-1",
                   "s3");
    base_url = keg_asprintf("%s://%s", target.scheme, target.host);
    struct s3_str bp = {0};
    if (!target.virtual_host) {
        s3_str_addc(&bp, '/');
        s3_uri_encode(&bp, target.bucket, strlen(target.bucket), 0);
    }
    bucket_path = bp.p ? bp.p : keg_strdup("");

    printf("%-4s %8s %4s | %10s %10s | %10s %10s | %6s\n", "op", "size", "thr", "plain op/s",
           "plain MiB/s", "keg op/s", "keg MiB/s", "keg/plain");
    int bad = 0;
    for (int si = 0; si < nsizes; si++) {
        for (int ti = 0; ti < nthr; ti++) {
            for (int put = 1; put >= 0; put--) {
                double best[2] = { 0, 0 };
                for (int round = 0; round < rounds; round++) {
                    for (int keg = 0; keg < 2; keg++) {
                        double v = run_once(keg, put, (size_t)sizes[si], (int)thr[ti], secs);
                        if (v < 0) {
                            fprintf(stderr, "%s run failed\n", keg ? "keg" : "plain");
                            bad = 1;
                        }
                        if (v > best[keg])
                            best[keg] = v;
                    }
                }
                double mib = (double)sizes[si] / (1 << 20);
                char sz[32];
                if (sizes[si] >= (1 << 20) && sizes[si] % (1 << 20) == 0)
                    snprintf(sz, sizeof(sz), "%ldMiB", sizes[si] >> 20);
                else if (sizes[si] >= 1024 && sizes[si] % 1024 == 0)
                    snprintf(sz, sizeof(sz), "%ldKiB", sizes[si] >> 10);
                else
                    snprintf(sz, sizeof(sz), "%ldB", sizes[si]);
                printf("%-4s %8s %4ld | %10.1f %10.1f | %10.1f %10.1f | %5.1f%%\n",
                       put ? "PUT" : "GET", sz, thr[ti], best[0], best[0] * mib, best[1],
                       best[1] * mib, best[0] > 0 ? 100.0 * best[1] / best[0] : 0.0);
                fflush(stdout);
            }
        }
    }
    s3_signer_fini(&signer);
    s3_target_free(&target);
    keg_free(base_url);
    keg_free(bucket_path);
    curl_global_cleanup();
    return bad;
}
