/* test_obj_retry.c -- the retry layer (core/obj/obj_retry.c) over faulty over mem:
 * transient errors are retried until the request succeeds; a store that keeps failing
 * ends in the last error after one deadline (the last attempt at the deadline, not
 * minutes later); final errors and -ENOENT are returned at once. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "keg/keg.h"
#include "keg/log.h"
#include "keg/obj.h"

/* retry(deadline_ms) -> faulty(err) -> mem; *mem_out is the store below. */
static struct keg_obj *open_stack(double err, unsigned deadline_ms, struct keg_obj **mem_out)
{
    struct keg_obj_conf fc = {.seed = 5, .err_prob = err};
    struct keg_obj_conf rc = {.retry_deadline_ms = deadline_ms};
    struct keg_obj *mem = NULL, *o = NULL;

    assert_int_equal(keg_obj_open("mem", NULL, NULL, &mem), 0);
    if (mem_out)
        *mem_out = mem;
    assert_int_equal(keg_obj_open("faulty", &fc, mem, &o), 0);
    assert_int_equal(keg_obj_open("retry", &rc, o, &o), 0);
    return o;
}

/* err=0.3: every put, get, head and del of 60 keys succeeds. */
static void test_transient_errors_retried(void **state)
{
    struct keg_obj *o = open_stack(0.3, 10000, NULL);
    char buf[16];
    uint64_t size;
    (void)state;

    for (int i = 0; i < 60; i++) {
        char key[32], val[16];
        snprintf(key, sizeof(key), "k%d", i);
        snprintf(val, sizeof(val), "v%08d", i);
        assert_int_equal(keg_obj_put(o, key, val, 9), 0);
        assert_int_equal(keg_obj_get(o, key, 0, buf, sizeof(buf)), 9);
        assert_memory_equal(buf, val, 9);
        assert_int_equal(keg_obj_head(o, key, &size), 0);
        assert_int_equal(size, 9);
        assert_int_equal(keg_obj_del(o, key), 0);
    }
    keg_obj_close(o);
}

/* err=1: each request fails after about one deadline (300 ms), with the error
 * of the store; the next request gets its own deadline, except a get of a key
 * whose get ran out of retries less than a deadline ago: that one fails at once
 * (-EHOSTDOWN), so a read the kernel repeats costs one deadline, not two. */
static void test_deadline_bounds_a_request(void **state)
{
    struct keg_obj *o = open_stack(1.0, 300, NULL);
    char buf[16];
    (void)state;

    for (int i = 0; i < 2; i++) {
        const char *key = i ? "k2" : "k1";
        int64_t t0 = keg_mono_ns();
        ssize_t n = keg_obj_get(o, key, 0, buf, sizeof(buf));
        int64_t took = keg_mono_ns() - t0;
        print_message("get failed with %zd after %lld ms\n", n, (long long)(took / 1000000));
        assert_true(n == -EIO || n == -EAGAIN);
        assert_true(took >= 300000000 && took < 800000000);
    }
    int64_t t0 = keg_mono_ns();
    assert_int_equal(keg_obj_get(o, "k2", 0, buf, sizeof(buf)), -EHOSTDOWN);
    assert_true(keg_mono_ns() - t0 < 50000000);
    t0 = keg_mono_ns();
    int rc = keg_obj_put(o, "k", "x", 1);
    assert_true(rc == -EIO || rc == -EAGAIN);
    assert_true(keg_mono_ns() - t0 < 800000000);
    keg_obj_close(o);
}

/* Once the store answers again, the remembered keys are forgotten. */
static void test_gone_forgotten_on_success(void **state)
{
    struct keg_obj_conf fc = {.seed = 5, .err_prob = 1.0};
    struct keg_obj_conf rc = {.retry_deadline_ms = 100};
    struct keg_obj *mem = NULL, *f = NULL, *o = NULL;
    char buf[16];
    (void)state;

    assert_int_equal(keg_obj_open("mem", NULL, NULL, &mem), 0);
    assert_int_equal(keg_obj_put(mem, "k", "v", 1), 0);
    assert_int_equal(keg_obj_open("faulty", &fc, mem, &f), 0);
    assert_int_equal(keg_obj_open("retry", &rc, f, &o), 0);
    assert_true(keg_obj_get(o, "k", 0, buf, sizeof(buf)) < 0);
    assert_int_equal(keg_obj_get(o, "k", 0, buf, sizeof(buf)), -EHOSTDOWN);
    /* the faulty layer's probability is fixed at open: go around it */
    struct keg_obj *saved = o->inner;
    o->inner = mem;
    assert_int_equal(keg_obj_head(o, "other", &(uint64_t){0}), -ENOENT);   /* an answer */
    assert_int_equal(keg_obj_get(o, "k", 0, buf, sizeof(buf)), 1);
    o->inner = saved;
    keg_obj_close(o);
}

/* -ENOENT and other final errors are not retried: answered at once. */
static void test_final_errors_at_once(void **state)
{
    struct keg_obj *o = open_stack(0, 60000, NULL);
    char buf[16];
    uint64_t size;
    (void)state;

    int64_t t0 = keg_mono_ns();
    assert_int_equal(keg_obj_get(o, "missing", 0, buf, sizeof(buf)), -ENOENT);
    assert_int_equal(keg_obj_head(o, "missing", &size), -ENOENT);
    assert_true(keg_mono_ns() - t0 < 100000000);
    assert_false(keg_obj_transient(-ENOENT));
    assert_false(keg_obj_transient(-EACCES));
    assert_false(keg_obj_transient(-ENOSPC));
    assert_false(keg_obj_transient(-EHOSTDOWN));
    assert_true(keg_obj_transient(-ETIMEDOUT));
    assert_true(keg_obj_transient(-ECONNRESET));
    keg_obj_close(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transient_errors_retried),
        cmocka_unit_test(test_deadline_bounds_a_request),
        cmocka_unit_test(test_gone_forgotten_on_success),
        cmocka_unit_test(test_final_errors_at_once),
    };
    keg_log_set_level(LOG_CRIT);
    return cmocka_run_group_tests_name("obj_retry", tests, NULL, NULL);
}
