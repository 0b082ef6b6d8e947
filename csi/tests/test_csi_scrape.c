/* test_csi_scrape.c -- merging mounters' exposition texts family by family, and
 * fetching them over unix sockets with a bounded wait (scrape.c).  The "mounters" are
 * real /metrics endpoints (keg_metrics_http.c) on sockets in a temp dir; no FUSE, no
 * root, no network. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "keg/log.h"
#include "keg/metrics.h"
#include "scrape.h"

static char dir[64];

static char *render(const struct csi_scrape *m)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    csi_scrape_write(m, f);
    fclose(f);
    return buf;
}

/* noinline: inlined, GCC 12 takes the open_memstream buffer for a dangling local */
__attribute__((noinline)) static int count(const char *hay, const char *needle)
{
    int n = 0;
    size_t off = 0;
    for (;;) {
        const char *p = strstr(hay + off, needle);
        if (!p)
            return n;
        n++;
        off = (size_t)(p - hay) + 1;
    }
}

/*----- merging -----*/

static const char text_a[] =
    "# HELP kegfs_fuse_ops_total FUSE requests handled, by op\n"
    "# TYPE kegfs_fuse_ops_total counter\n"
    "kegfs_fuse_ops_total{volume=\"pvc-1\",op=\"write\"} 7\n"
    "kegfs_fuse_ops_total{volume=\"pvc-1\",op=\"read\"} 3\n"
    "# HELP kegfs_written_bytes_total bytes written\n"
    "# TYPE kegfs_written_bytes_total counter\n"
    "kegfs_written_bytes_total{volume=\"pvc-1\"} 1048576\n"
    "# TYPE kegfs_op_seconds histogram\n"
    "kegfs_op_seconds_bucket{volume=\"pvc-1\",le=\"+Inf\"} 2\n"
    "kegfs_op_seconds_sum{volume=\"pvc-1\"} 0.5\n"
    "kegfs_op_seconds_count{volume=\"pvc-1\"} 2\n"
    "# TYPE kegfs_up gauge\n"
    "kegfs_up 1\n";

static const char text_b[] =
    "# HELP kegfs_written_bytes_total bytes written\n"
    "# TYPE kegfs_written_bytes_total counter\n"
    "kegfs_written_bytes_total{volume=\"pvc-1\"} 5\n"
    "# HELP kegfs_fuse_ops_total FUSE requests handled, by op\n"
    "# TYPE kegfs_fuse_ops_total counter\n"
    "kegfs_fuse_ops_total{volume=\"pvc-1\",op=\"write\"} 1\n"
    "# a comment of no importance\n"
    "# TYPE kegfs_csi_rpc_total counter\n"            /* the plugin's own: dropped */
    "kegfs_csi_rpc_total{method=\"x\",code=\"OK\"} 9\n"
    "# TYPE kegfs_up counter\n"                       /* conflicts with a: dropped */
    "kegfs_up 1\n"
    "# TYPE kegfs_new gauge\n"
    "kegfs_new{volume=\"a\\\"b\"} 4\n"               /* an escaped quote is fine */
    "kegfs_other 1\n"                                /* not kegfs_new: dropped */
    "kegfs_new{volume=\"x\",mounter=\"evil\"} 1\n"   /* would collide: dropped */
    "kegfs_new{volume=\"x\"\n"                       /* malformed: dropped */
    "kegfs_new{volume=\"x\"}\n"                      /* no value: dropped */
    "kegfs_new{volume=\"x\"} 2 1700000000000\r\n";   /* timestamp, CRLF */

static void test_merge(void **state)
{
    (void)state;
    struct csi_scrape *m = NULL;
    assert_int_equal(csi_scrape_new(&m), 0);
    assert_int_equal(csi_scrape_add(m, "orphan 1\n", 9, "x"), 0);   /* no family above */
    assert_int_equal(csi_scrape_add(m, text_a, strlen(text_a), "aaaa"), 7);
    assert_int_equal(csi_scrape_add(m, text_b, strlen(text_b), "bbbb"), 4);
    char *t = render(m);

    /* each family once, in the order first seen, samples of both mounters together */
    const char *want =
        "# HELP kegfs_fuse_ops_total FUSE requests handled, by op\n"
        "# TYPE kegfs_fuse_ops_total counter\n"
        "kegfs_fuse_ops_total{mounter=\"aaaa\",volume=\"pvc-1\",op=\"write\"} 7\n"
        "kegfs_fuse_ops_total{mounter=\"aaaa\",volume=\"pvc-1\",op=\"read\"} 3\n"
        "kegfs_fuse_ops_total{mounter=\"bbbb\",volume=\"pvc-1\",op=\"write\"} 1\n"
        "# HELP kegfs_written_bytes_total bytes written\n"
        "# TYPE kegfs_written_bytes_total counter\n"
        "kegfs_written_bytes_total{mounter=\"aaaa\",volume=\"pvc-1\"} 1048576\n"
        "kegfs_written_bytes_total{mounter=\"bbbb\",volume=\"pvc-1\"} 5\n"
        "# TYPE kegfs_op_seconds histogram\n"
        "kegfs_op_seconds_bucket{mounter=\"aaaa\",volume=\"pvc-1\",le=\"+Inf\"} 2\n"
        "kegfs_op_seconds_sum{mounter=\"aaaa\",volume=\"pvc-1\"} 0.5\n"
        "kegfs_op_seconds_count{mounter=\"aaaa\",volume=\"pvc-1\"} 2\n"
        "# TYPE kegfs_up gauge\n"
        "kegfs_up{mounter=\"aaaa\"} 1\n"
        "# TYPE kegfs_new gauge\n"
        "kegfs_new{mounter=\"bbbb\",volume=\"a\\\"b\"} 4\n"
        "kegfs_new{mounter=\"bbbb\",volume=\"x\"} 2 1700000000000\n";
    assert_string_equal(t, want);
    assert_null(strstr(t, "kegfs_csi_"));
    assert_null(strstr(t, "evil"));
    free(t);    /* checksrc: ok -- open_memstream's buffer */
    csi_scrape_free(m);
}

/*----- fetching -----*/

static void render_mounter(void *arg, FILE *f)
{
    keg_metrics_family(f, "kegfs_written_bytes_total", "counter", "bytes written");
    keg_metrics_sample_u64(f, "kegfs_written_bytes_total", "volume=\"pvc-1\"",
                           (uint64_t)(uintptr_t)arg);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A socket that accepts connections (the kernel's backlog) and never answers: a
 * mounter that is stopped or stuck. */
static int hung_socket(const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    assert_true(strlen(path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 8), 0);
    return fd;
}

static void test_fetch(void **state)
{
    (void)state;
    char s1[128], s2[128], hung[128], gone[128], a1[140], a2[140];
    struct keg_metrics_server *m1 = NULL, *m2 = NULL;
    snprintf(s1, sizeof(s1), "%s/1.sock", dir);
    snprintf(s2, sizeof(s2), "%s/2.sock", dir);
    snprintf(hung, sizeof(hung), "%s/hung.sock", dir);
    snprintf(gone, sizeof(gone), "%s/gone.sock", dir);
    snprintf(a1, sizeof(a1), "unix:%s", s1);
    snprintf(a2, sizeof(a2), "unix:%s", s2);
    assert_int_equal(keg_metrics_start(a1, render_mounter, (void *)11, &m1, NULL), 0);
    assert_int_equal(keg_metrics_start(a2, render_mounter, (void *)22, &m2, NULL), 0);
    int hfd = hung_socket(hung);

    struct csi_scrape_src src[] = {
        {.socket = s1, .id = "1111"}, {.socket = hung, .id = "hhhh"},
        {.socket = gone, .id = "gggg"}, {.socket = s2, .id = "2222"},
    };
    struct csi_scrape *m = NULL;
    size_t failed = 99;
    assert_int_equal(csi_scrape_new(&m), 0);
    double t0 = now_s();
    assert_int_equal(csi_scrape_fetch(m, src, 4, 300, 600, &failed), 0);
    double took = now_s() - t0;
    assert_int_equal(failed, 2);                    /* the hung and the missing one */
    assert_true(took >= 0.25 && took < 1.5);       /* one timeout, not one per mounter */
    char *t = render(m);
    assert_int_equal(count(t, "# TYPE kegfs_written_bytes_total counter\n"), 1);
    assert_non_null(strstr(t, "kegfs_written_bytes_total{mounter=\"1111\",volume=\"pvc-1\"} 11\n"));
    assert_non_null(strstr(t, "kegfs_written_bytes_total{mounter=\"2222\",volume=\"pvc-1\"} 22\n"));
    assert_null(strstr(t, "hhhh"));
    free(t);    /* checksrc: ok -- open_memstream's buffer */
    csi_scrape_free(m);

    /* the deadline bounds the whole fetch even when one transfer's timeout is longer */
    assert_int_equal(csi_scrape_new(&m), 0);
    t0 = now_s();
    assert_int_equal(csi_scrape_fetch(m, &src[1], 1, 5000, 400, &failed), 0);
    took = now_s() - t0;
    assert_int_equal(failed, 1);
    assert_true(took < 1.0);
    csi_scrape_free(m);

    /* nothing to fetch */
    assert_int_equal(csi_scrape_new(&m), 0);
    assert_int_equal(csi_scrape_fetch(m, src, 0, 300, 600, &failed), 0);
    assert_int_equal(failed, 0);
    csi_scrape_free(m);

    close(hfd);
    keg_metrics_stop(m1);
    keg_metrics_stop(m2);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_csi_scrape.XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge),
        cmocka_unit_test_setup_teardown(test_fetch, setup, teardown),
    };
    keg_log_set_level(LOG_WARNING);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
