/* test_mnt_progress.c -- unit tests of the commands' progress bar (mounter/mnt_progress.c):
 * figures never go backwards while threads add concurrently or report out of order, a
 * phase ends at 100% with a newline, redraws are throttled by time, nothing at all is
 * drawn when the bar is off, and the summary line is printed in every case.  The bar is
 * rendered into a memory stream and parsed. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../mounter/mnt_util.c"
#include "../../mounter/mnt_progress.c"

/* The bar's output, parsed: one entry per line drawn. */
struct drawn {
    unsigned pct[100000];
    uint64_t done[100000];
    size_t   n;              /* lines with a percentage */
    size_t   lines;          /* all lines drawn (one "\r" each) */
};

static struct drawn D;

/* Split the output at "\r" and "\n" and read " NNN%  DONE/TOTAL" from each piece. */
static void parse(const char *buf)
{
    memset(&D, 0, sizeof(D));
    for (const char *c = buf; *c; c++)
        if (*c == '\r')
            D.lines++;
    const char *s = buf;
    while (*s) {
        size_t len = strcspn(s, "\r\n");
        char piece[512];
        snprintf(piece, sizeof(piece), "%.*s", (int)KEG_MIN(len, sizeof(piece) - 1), s);
        char *pc = strchr(piece, '%');
        if (pc && pc - piece >= 3 && D.n < 100000) {
            unsigned pct = 0;
            unsigned long long done = 0, total = 0;
            assert_int_equal(sscanf(pc - 3, "%3u%%  %llu/%llu", &pct, &done, &total), 3);
            D.pct[D.n] = pct;
            D.done[D.n] = done;
            D.n++;
        }
        s += len;
        if (*s)
            s++;
    }
}

static int has_control(const char *buf)
{
    for (const char *c = buf; *c; c++)
        if (*c == '\r' || *c == '\033')
            return 1;
    return 0;
}

/*----- several threads adding at once -----*/

#define NTHREADS 8
#define PER_THREAD 5000

static void *adder(void *arg)
{
    struct mnt_progress *p = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        mnt_progress_add(p, 1, 0);
        if (i % 64 == 0)
            sched_yield();
    }
    return NULL;
}

static void test_monotonic_threads(void **state)
{
    struct mnt_progress p;
    pthread_t th[NTHREADS];
    char *buf = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&buf, &size);
    (void)state;

    assert_non_null(out);
    mnt_progress_init(&p, out, MNT_PROGRESS_ON);
    p.interval_ns = 0;                      /* redraw whenever the lock is free */
    mnt_progress_start(&p, "checking blocks", NTHREADS * PER_THREAD, 0);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, adder, &p), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    mnt_progress_finish(&p);
    mnt_progress_destroy(&p);
    fclose(out);

    parse(buf);
    assert_true(D.n > 10);                  /* many intermediate lines were drawn */
    for (size_t i = 1; i < D.n; i++) {
        assert_true(D.pct[i] >= D.pct[i - 1]);
        assert_true(D.done[i] >= D.done[i - 1]);
    }
    assert_int_equal(D.pct[D.n - 1], 100);
    assert_int_equal(D.done[D.n - 1], NTHREADS * PER_THREAD);
    assert_int_equal(buf[size - 1], '\n');  /* the phase's line is ended */
    assert_non_null(strstr(buf, "checking blocks ["));
    free(buf);
}

/*----- core reports arriving out of order (keg_progress_fn) -----*/

static void test_out_of_order_reports(void **state)
{
    struct mnt_progress p;
    char *buf = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&buf, &size);
    (void)state;

    assert_non_null(out);
    mnt_progress_init(&p, out, MNT_PROGRESS_ON);
    p.interval_ns = 0;
    mnt_progress_fn(&p, 500, 0, "scanning files");
    mnt_progress_fn(&p, 0, 20016, "checking blocks");
    mnt_progress_fn(&p, 10600, 20016, "checking blocks");
    mnt_progress_fn(&p, 9401, 20016, "checking blocks");   /* a thread that lagged */
    mnt_progress_fn(&p, 20016, 20016, "checking blocks");
    mnt_progress_fn(&p, 18600, 20016, "checking blocks");  /* after the last one */
    mnt_progress_finish(&p);
    mnt_progress_destroy(&p);
    fclose(out);

    parse(buf);
    assert_true(D.n >= 3);
    for (size_t i = 1; i < D.n; i++)
        assert_true(D.done[i] >= D.done[i - 1]);
    assert_int_equal(D.pct[D.n - 1], 100);
    assert_int_equal(D.done[D.n - 1], 20016);
    assert_null(strstr(buf, " 46%"));
    assert_null(strstr(buf, " 92%"));
    assert_null(strstr(buf, " 93%"));
    /* the scan phase got its own line, ended before the check began */
    assert_non_null(strstr(buf, "scanning files  500"));
    assert_int_equal(buf[size - 1], '\n');
    free(buf);
}

/*----- throttling -----*/

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_throttle(void **state)
{
    struct mnt_progress p;
    char *buf = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&buf, &size);
    (void)state;

    assert_non_null(out);
    mnt_progress_init(&p, out, MNT_PROGRESS_ON);
    double t0 = now_s();
    mnt_progress_start(&p, "warming", 20000, 20000ull * 4096);
    for (int i = 0; i < 20000; i++)
        mnt_progress_add(&p, 1, 4096);
    double el = now_s() - t0;
    mnt_progress_finish(&p);
    uint64_t redraws = p.redraws;
    mnt_progress_destroy(&p);
    fclose(out);

    parse(buf);
    /* one line per interval (150 ms) at most, plus the final one */
    assert_true(D.lines <= 2 + (size_t)(el / 0.15));
    assert_int_equal(D.lines, redraws);
    assert_int_equal(D.pct[D.n - 1], 100);
    assert_non_null(strstr(buf, "20000/20000"));
    assert_non_null(strstr(buf, "78.12 MiB/78.12 MiB"));
    free(buf);

    /* a slower producer: ~1 s of adds gives a handful of lines, not one per add */
    out = open_memstream(&buf, &size);
    assert_non_null(out);
    mnt_progress_init(&p, out, MNT_PROGRESS_ON);
    t0 = now_s();
    mnt_progress_start(&p, "warming", 2000, 0);
    for (int i = 0; i < 2000; i++) {
        mnt_progress_add(&p, 1, 0);
        usleep(500);
    }
    el = now_s() - t0;
    mnt_progress_finish(&p);
    mnt_progress_destroy(&p);
    fclose(out);
    parse(buf);
    assert_true(D.lines >= 2);
    assert_true(D.lines <= 2 + (size_t)(el / 0.15));
    assert_int_equal(D.pct[D.n - 1], 100);
    free(buf);
}

/*----- off: no bar, no control characters; the summary always -----*/

static void test_off_and_summary(void **state)
{
    struct mnt_progress p;
    char *bbuf = NULL, *sbuf = NULL;
    size_t bsize = 0, ssize = 0;
    FILE *bar = open_memstream(&bbuf, &bsize);
    FILE *sum = open_memstream(&sbuf, &ssize);
    (void)state;

    assert_non_null(bar);
    assert_non_null(sum);
    /* AUTO on a stream that is not a terminal */
    mnt_progress_init(&p, bar, MNT_PROGRESS_AUTO);
    assert_int_equal(p.bar, 0);
    p.interval_ns = 0;
    mnt_progress_start(&p, "warming", 100, 0);
    for (int i = 0; i < 100; i++)
        mnt_progress_add(&p, 1, 10);
    mnt_progress_print(&p, sum, "missing: %s\n", "chunks/0/1/1_0_4096");
    mnt_progress_clear(&p);
    mnt_progress_fn(&p, 5, 10, "checking blocks");
    mnt_progress_summary(&p, sum, "warmed %d files, %s", 100, "1000 B");
    mnt_progress_destroy(&p);
    fclose(bar);
    fclose(sum);
    assert_int_equal(bsize, 0);
    assert_false(has_control(sbuf));
    assert_non_null(strstr(sbuf, "missing: chunks/0/1/1_0_4096\n"));
    assert_non_null(strstr(sbuf, "warmed 100 files, 1000 B in "));
    assert_int_equal(sbuf[ssize - 1], '\n');
    assert_non_null(strstr(sbuf, " s\n"));
    free(bbuf);
    free(sbuf);

    /* --no-progress turns a terminal's bar off too; OFF draws nothing */
    mnt_no_progress = 1;
    bar = open_memstream(&bbuf, &bsize);
    mnt_progress_init(&p, bar, MNT_PROGRESS_AUTO);
    assert_int_equal(p.bar, 0);
    mnt_progress_destroy(&p);
    mnt_no_progress = 0;
    mnt_progress_init(&p, bar, MNT_PROGRESS_OFF);
    mnt_progress_start(&p, "x", 1, 0);
    mnt_progress_add(&p, 1, 0);
    mnt_progress_finish(&p);
    mnt_progress_destroy(&p);
    fclose(bar);
    assert_int_equal(bsize, 0);
    free(bbuf);

    /* on: the summary follows the finished bar, on its own line */
    bar = open_memstream(&bbuf, &bsize);
    mnt_progress_init(&p, bar, MNT_PROGRESS_ON);
    mnt_progress_start(&p, "warming", 3, 0);
    mnt_progress_add(&p, 3, 0);
    mnt_progress_summary(&p, bar, "warmed %d files", 3);
    mnt_progress_destroy(&p);
    fclose(bar);
    parse(bbuf);
    assert_int_equal(D.pct[D.n - 1], 100);
    char *nl = strstr(bbuf, "\nwarmed 3 files in ");
    assert_non_null(nl);
    assert_non_null(strstr(nl, " s\n"));
    free(bbuf);
}

/*----- a message in the middle of a bar -----*/

static void test_print_erases_bar(void **state)
{
    struct mnt_progress p;
    char *buf = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&buf, &size);
    (void)state;

    mnt_progress_init(&p, out, MNT_PROGRESS_ON);
    p.interval_ns = 0;
    mnt_progress_start(&p, "checking blocks", 10, 0);
    mnt_progress_add(&p, 4, 0);
    assert_int_equal(p.drawn, 1);
    mnt_progress_print(&p, out, "missing: %s\n", "k");
    assert_int_equal(p.drawn, 0);
    mnt_progress_add(&p, 6, 0);
    mnt_progress_finish(&p);
    mnt_progress_destroy(&p);
    fclose(out);
    /* erased, the message on a clean line, then the bar again */
    assert_non_null(strstr(buf, "\r\033[Kmissing: k\n\rchecking blocks ["));
    parse(buf);
    assert_int_equal(D.pct[D.n - 1], 100);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_monotonic_threads),
        cmocka_unit_test(test_out_of_order_reports),
        cmocka_unit_test(test_throttle),
        cmocka_unit_test(test_off_and_summary),
        cmocka_unit_test(test_print_erases_bar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
