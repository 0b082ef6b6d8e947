/* test_obj_faulty.c -- the faulty layer: determinism, error and corruption injection. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "keg/log.h"
#include "keg/obj.h"

static struct keg_obj *open_faulty(uint64_t seed, double err, double corrupt, unsigned delay)
{
    struct keg_obj_conf conf = {.seed = seed, .err_prob = err, .corrupt_prob = corrupt,
                                .delay_ms = delay};
    struct keg_obj *mem = NULL, *o = NULL;
    assert_int_equal(keg_obj_open("mem", NULL, NULL, &mem), 0);
    assert_int_equal(keg_obj_open("faulty", &conf, mem, &o), 0);
    return o;
}

/* Runs a fixed mix of ops and records each result. */
static void run_ops(struct keg_obj *o, int *res, int n)
{
    unsigned char buf[64];
    uint64_t size;
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i % 10);
        switch (i % 4) {
        case 0: res[i] = keg_obj_put(o, key, "0123456789", 10); break;
        case 1: res[i] = (int)keg_obj_get(o, key, 0, buf, sizeof(buf)); break;
        case 2: res[i] = keg_obj_head(o, key, &size); break;
        default: res[i] = keg_obj_del(o, key); break;
        }
    }
}

static void test_same_seed_same_faults(void **state)
{
    enum { N = 400 };
    int a[N], b[N], c[N];
    int fails = 0, oks = 0, eio = 0, eagain = 0;
    (void)state;

    struct keg_obj *o = open_faulty(42, 0.3, 0, 0);
    run_ops(o, a, N);
    keg_obj_close(o);
    o = open_faulty(42, 0.3, 0, 0);
    run_ops(o, b, N);
    keg_obj_close(o);
    assert_memory_equal(a, b, sizeof(a));
    for (int i = 0; i < N; i++) {
        if (a[i] == -EIO)
            eio++;
        else if (a[i] == -EAGAIN)
            eagain++;
        else
            oks++;
        fails += a[i] == -EIO || a[i] == -EAGAIN;
    }
    /* About 30% injected, both kinds present. */
    assert_true(fails > N / 6 && fails < N / 2);
    assert_true(eio > 0 && eagain > 0 && oks > 0);

    o = open_faulty(43, 0.3, 0, 0);
    run_ops(o, c, N);
    keg_obj_close(o);
    assert_true(memcmp(a, c, sizeof(a)) != 0);
}

static void test_err_prob_one(void **state)
{
    struct keg_obj *o = open_faulty(7, 1.0, 0, 0);
    unsigned char buf[16];
    uint64_t size = 5;
    (void)state;

    /* Seed the inner store directly so get/head would otherwise succeed. */
    assert_int_equal(keg_obj_put(o->inner, "k", "abc", 3), 0);
    for (int i = 0; i < 100; i++) {
        int r = keg_obj_put(o, "k", "xyz", 3);
        assert_true(r == -EIO || r == -EAGAIN);
        ssize_t g = keg_obj_get(o, "k", 0, buf, sizeof(buf));
        assert_true(g == -EIO || g == -EAGAIN);
        r = keg_obj_head(o, "k", &size);
        assert_true(r == -EIO || r == -EAGAIN);
        assert_true(size == 0);
        r = keg_obj_del(o, "k");
        assert_true(r == -EIO || r == -EAGAIN);
    }
    /* Nothing reached the inner store. */
    assert_int_equal(keg_obj_get(o->inner, "k", 0, buf, sizeof(buf)), 3);
    assert_memory_equal(buf, "abc", 3);
    keg_obj_close(o);
}

static void test_corruption_detected(void **state)
{
    struct keg_obj *o = open_faulty(9, 0, 1.0, 0);
    size_t n = 8192, olen;
    unsigned char *raw = malloc(n), *obj = malloc(KEG_BLOCK_HDR + n);
    unsigned char *got = malloc(KEG_BLOCK_HDR + n), *out = malloc(n);
    struct keg_block_id bid = {.slice = 1, .indx = 0, .blen = 8192};
    (void)state;

    assert_non_null(raw);
    assert_non_null(obj);
    assert_non_null(got);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++)
        raw[i] = (unsigned char)(i * 7 + (i >> 5));
    assert_int_equal(keg_block_encode(KEG_CODEC_NONE, &bid, raw, n, obj, KEG_BLOCK_HDR + n,
                                      &olen), 0);
    assert_int_equal(keg_obj_put(o, "blk", obj, olen), 0);
    for (int i = 0; i < 50; i++) {
        ssize_t g = keg_obj_get(o, "blk", 0, got, olen);
        assert_int_equal(g, (ssize_t)olen);
        assert_true(memcmp(got, obj, olen) != 0);
        assert_int_equal(keg_block_decode(got, olen, &bid, out, n), -EIO);
    }
    /* The stored object itself is intact. */
    assert_int_equal(keg_obj_get(o->inner, "blk", 0, got, olen), (ssize_t)olen);
    assert_int_equal(keg_block_decode(got, olen, &bid, out, n), (ssize_t)n);
    assert_memory_equal(out, raw, n);
    keg_obj_close(o);
    free(raw);
    free(obj);
    free(got);
    free(out);
}

static void test_delay(void **state)
{
    struct keg_obj *o = open_faulty(1, 0, 0, 20);
    uint64_t size;
    (void)state;
    int64_t t0 = keg_mono_ns();
    assert_int_equal(keg_obj_put(o, "k", "a", 1), 0);
    assert_int_equal(keg_obj_head(o, "k", &size), 0);
    assert_true(keg_mono_ns() - t0 >= 40 * 1000000LL);
    keg_obj_close(o);
}

static void test_open_errors(void **state)
{
    struct keg_obj_conf conf = {.err_prob = 1.5};
    struct keg_obj *mem, *o = (void *)1;
    (void)state;
    /* No inner store. */
    assert_int_equal(keg_obj_open("faulty", &conf, NULL, &o), -EINVAL);
    assert_null(o);
    /* Bad probability: inner is TAKEN and closed (ASan would report a leak otherwise). */
    assert_int_equal(keg_obj_open("mem", NULL, NULL, &mem), 0);
    assert_int_equal(keg_obj_open("faulty", &conf, mem, &o), -EINVAL);
    assert_null(o);
    /* Unknown store name, also TAKES inner. */
    assert_int_equal(keg_obj_open("mem", NULL, NULL, &mem), 0);
    assert_int_equal(keg_obj_open("nosuch", NULL, mem, &o), -EINVAL);
    assert_null(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_same_faults),
        cmocka_unit_test(test_err_prob_one),
        cmocka_unit_test(test_corruption_detected),
        cmocka_unit_test(test_delay),
        cmocka_unit_test(test_open_errors),
    };
    keg_log_set_level(LOG_WARNING);
    return cmocka_run_group_tests_name("obj_faulty", tests, NULL, NULL);
}
