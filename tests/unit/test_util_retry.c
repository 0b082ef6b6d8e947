/* test_util_retry.c -- keg_backoff_ms, keg_sleep_ns/ms, keg_rand64. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "keg/keg.h"
#include "keg/retry.h"

static void test_backoff_doubles_and_caps(void **state)
{
    (void)state;
    assert_int_equal(keg_backoff_ms(0, 100, 10000), 100);
    assert_int_equal(keg_backoff_ms(1, 100, 10000), 200);
    assert_int_equal(keg_backoff_ms(6, 100, 10000), 6400);
    assert_int_equal(keg_backoff_ms(7, 100, 10000), 10000);     /* 12800 capped */
    assert_int_equal(keg_backoff_ms(63, 100, 10000), 10000);
    assert_int_equal(keg_backoff_ms(64, 100, 10000), 10000);    /* no undefined shift */
    assert_int_equal(keg_backoff_ms(1000, 1, UINT64_MAX), UINT64_MAX);
    /* one doubling step, as the writeback and Redis loops use it */
    assert_int_equal(keg_backoff_ms(1, 400, 500), 500);
    assert_int_equal(keg_backoff_ms(1, 200, 500), 400);
    /* a base above the cap is capped */
    assert_int_equal(keg_backoff_ms(0, 600, 500), 500);
}

static int64_t elapsed_ms(int64_t since)
{
    return (keg_mono_ns() - since) / 1000000;
}

static void test_sleep_lasts(void **state)
{
    (void)state;
    int64_t t = keg_mono_ns();
    keg_sleep_ms(30);
    assert_true(elapsed_ms(t) >= 30);
    t = keg_mono_ns();
    keg_sleep_ns(20 * 1000000LL);
    assert_true(elapsed_ms(t) >= 20);
    t = keg_mono_ns();
    keg_sleep_ns(0);
    keg_sleep_ns(-5);
    keg_sleep_ms(0);
    assert_true(elapsed_ms(t) < 20);
}

static void on_usr1(int sig)
{
    (void)sig;
}

static void *send_usr1(void *arg)
{
    keg_sleep_ms(20);
    pthread_kill(*(pthread_t *)arg, SIGUSR1);
    return NULL;
}

/* A signal with a handler does not cut the sleep short. */
static void test_sleep_survives_signal(void **state)
{
    (void)state;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    assert_int_equal(sigaction(SIGUSR1, &sa, NULL), 0);
    pthread_t self = pthread_self(), th;
    int64_t t = keg_mono_ns();
    assert_int_equal(pthread_create(&th, NULL, send_usr1, &self), 0);
    keg_sleep_ms(120);
    assert_true(elapsed_ms(t) >= 120);
    pthread_join(th, NULL);
}

static void test_rand_varies(void **state)
{
    (void)state;
    uint64_t a = keg_rand64(), b = keg_rand64(), c = keg_rand64();
    assert_true(a != b || b != c);
    /* low bits vary too (the jitter takes them modulo small numbers) */
    unsigned seen = 0;
    for (int i = 0; i < 256; i++)
        seen |= 1u << (keg_rand64() % 8);
    assert_int_equal(seen, 0xffu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backoff_doubles_and_caps),
        cmocka_unit_test(test_sleep_lasts),
        cmocka_unit_test(test_sleep_survives_signal),
        cmocka_unit_test(test_rand_varies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
