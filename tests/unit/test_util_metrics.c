/* test_util_metrics.c -- histograms and the Prometheus text format (keg_metrics.c). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "keg/metrics.h"

static char *render_hist(const struct keg_metrics_hist *h, const char *labels)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    keg_metrics_family(f, "x_seconds", "histogram", "help text");
    keg_metrics_hist_samples(f, "x_seconds", labels, h);
    fclose(f);
    return buf;
}

static void test_hist(void **state)
{
    (void)state;
    struct keg_metrics_hist h;
    memset(&h, 0, sizeof(h));
    keg_metrics_observe(&h, 50000);            /* 50 us: first bucket (0.0001) */
    keg_metrics_observe(&h, 100000);           /* exactly 0.0001: first bucket (le) */
    keg_metrics_observe(&h, 3000000);          /* 3 ms: le=0.005 */
    keg_metrics_observe(&h, 60ull * 1000000000); /* 60 s: only +Inf */
    assert_int_equal(h.count, 4);
    assert_int_equal(h.sum_ns, 50000 + 100000 + 3000000 + 60ull * 1000000000);

    char *t = render_hist(&h, "op=\"read\"");
    assert_non_null(strstr(t, "# HELP x_seconds help text\n# TYPE x_seconds histogram\n"));
    assert_non_null(strstr(t, "x_seconds_bucket{op=\"read\",le=\"0.0001\"} 2\n"));
    assert_non_null(strstr(t, "x_seconds_bucket{op=\"read\",le=\"0.0025\"} 2\n"));
    assert_non_null(strstr(t, "x_seconds_bucket{op=\"read\",le=\"0.005\"} 3\n"));
    assert_non_null(strstr(t, "x_seconds_bucket{op=\"read\",le=\"10\"} 3\n"));   /* cumulative */
    assert_non_null(strstr(t, "x_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n"));
    assert_non_null(strstr(t, "x_seconds_count{op=\"read\"} 4\n"));
    assert_non_null(strstr(t, "x_seconds_sum{op=\"read\"} 60.00315\n"));
    free(t);        /* open_memstream's buffer */

    /* without labels */
    t = render_hist(&h, "");
    assert_non_null(strstr(t, "x_seconds_bucket{le=\"+Inf\"} 4\n"));
    assert_non_null(strstr(t, "x_seconds_count 4\n"));
    free(t);
}

static void test_samples_and_escape(void **state)
{
    (void)state;
    char *buf = NULL, esc[32];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    keg_metrics_sample_u64(f, "a_total", "", 18446744073709551615ull);
    keg_metrics_sample(f, "b", "k=\"v\"", 0.5);
    fclose(f);
    assert_string_equal(buf, "a_total 18446744073709551615\nb{k=\"v\"} 0.5\n");
    free(buf);

    assert_string_equal(keg_metrics_escape("a\"b\\c\nd", esc, sizeof(esc)), "a\\\"b\\\\c\\nd");
    /* cut to the buffer, still terminated, never half an escape */
    assert_string_equal(keg_metrics_escape("abcdefgh", esc, 5), "ab");
    assert_true(strlen(keg_metrics_escape("\"\"\"\"", esc, 6)) <= 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist),
        cmocka_unit_test(test_samples_and_escape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
