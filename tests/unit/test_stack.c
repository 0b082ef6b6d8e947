/* test_stack.c -- keg_stack_open: storage selection, credentials, KEG_FAULTY. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "keg/log.h"
#include "keg/obj_metrics.h"
#include "keg/stack.h"

static void fmt_init(struct keg_format *f, const char *storage, const char *bucket)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "vol1");
    snprintf(f->storage, sizeof(f->storage), "%s", storage);
    snprintf(f->bucket, sizeof(f->bucket), "%s", bucket);
}

static void test_mem_and_file(void **state)
{
    struct keg_format f;
    struct keg_obj *o = NULL;
    char dir[] = "/tmp/keg-stack-XXXXXX", path[128];
    unsigned char buf[8];
    (void)state;

    unsetenv("KEG_FAULTY");
    fmt_init(&f, "mem", "anything");
    assert_int_equal(keg_stack_open(&f, NULL, &o), 0);
    assert_string_equal(o->ops->name, "retry");     /* mem does not retry by itself */
    assert_string_equal(o->inner->ops->name, "mem");
    assert_null(o->inner->inner);
    keg_obj_close(o);

    assert_non_null(mkdtemp(dir));
    fmt_init(&f, "file", dir);
    assert_int_equal(keg_stack_open(&f, NULL, &o), 0);
    assert_string_equal(o->ops->name, "retry");
    assert_string_equal(o->inner->ops->name, "file");
    assert_int_equal(keg_obj_put(o, "vol1/x", "hello", 5), 0);
    assert_int_equal(keg_obj_get(o, "vol1/x", 0, buf, sizeof(buf)), 5);
    keg_obj_close(o);
    snprintf(path, sizeof(path), "%s/vol1/x", dir);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/vol1", dir);
    assert_int_equal(rmdir(path), 0);
    /* the pool of spare files opened at the first put; closing removed its files */
    snprintf(path, sizeof(path), "%s/.tmp.spare", dir);
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_errors(void **state)
{
    struct keg_format f;
    struct keg_obj *o = (void *)1;
    (void)state;
    unsetenv("KEG_FAULTY");
    fmt_init(&f, "ftp", "x");
    assert_int_equal(keg_stack_open(&f, NULL, &o), -EINVAL);
    assert_null(o);
    fmt_init(&f, "file", "/nonexistent/keg-stack");
    assert_int_equal(keg_stack_open(&f, NULL, &o), -ENOENT);
    assert_null(o);
    if (!keg_obj_find("s3")) {
        fmt_init(&f, "s3", "http://127.0.0.1:1/b");
        assert_int_equal(keg_stack_open(&f, NULL, &o), -ENOTSUP);
    }

    /* the stores come from obj.c's one table; layers are no stores */
    char names[64];
    assert_int_equal(keg_obj_store_known("file"), 1);
    assert_int_equal(keg_obj_store_known("mem"), 1);
    assert_int_equal(keg_obj_store_known("s3"), keg_obj_find("s3") != NULL);
    assert_int_equal(keg_obj_store_known("ftp"), -ENOENT);
    assert_int_equal(keg_obj_store_known("faulty"), -ENOENT);
    assert_int_equal(keg_obj_store_known("retry"), -ENOENT);
    keg_obj_store_names(names, sizeof(names));
    assert_string_equal(names, "file, s3 or mem");
    keg_obj_store_names(names, 7);
    assert_string_equal(names, "file, ");
}

static void test_faulty_env(void **state)
{
    struct keg_format f;
    struct keg_obj *o = NULL;
    static const char *bad[] = {"seed", "seed=x", "err=2", "corrupt=-1", "delay=1s", "bogus=1",
                                "err=0.5,,seed=1", "=1"};
    (void)state;

    struct keg_stack_conf sc = {.retry_deadline_ms = 200};
    fmt_init(&f, "mem", "b");
    setenv("KEG_FAULTY", "seed=5,err=1,corrupt=0,delay=0", 1);
    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    assert_string_equal(o->ops->name, "retry");     /* retries what faulty injects */
    assert_string_equal(o->inner->ops->name, "faulty");
    assert_string_equal(o->inner->inner->ops->name, "mem");
    int64_t t0 = keg_mono_ns();
    int rc = keg_obj_put(o, "k", "v", 1);
    assert_true(rc == -EIO || rc == -EAGAIN);
    assert_true(keg_mono_ns() - t0 >= 200000000);    /* after the retry deadline */
    keg_obj_close(o);

    sc.no_retries = 1;
    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    assert_string_equal(o->ops->name, "faulty");
    keg_obj_close(o);

    setenv("KEG_FAULTY", "err=0", 1);
    assert_int_equal(keg_stack_open(&f, NULL, &o), 0);
    assert_int_equal(keg_obj_put(o, "k", "v", 1), 0);
    keg_obj_close(o);

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("KEG_FAULTY", bad[i], 1);
        o = (void *)1;
        if (keg_stack_open(&f, NULL, &o) != -EINVAL)
            fail_msg("KEG_FAULTY=\"%s\" accepted", bad[i]);
        assert_null(o);
    }
    unsetenv("KEG_FAULTY");
}

/* With sc.metrics the metrics layer sits right above the store (and its retry
 * layer) and counts the requests that reach it, per verb: requests, failures (not a
 * missing key), bytes, and the repeats of a request after transient failures. */
static void test_metrics_layer(void **state)
{
    struct keg_format f;
    struct keg_stack_conf sc;
    struct keg_obj *o = NULL;
    unsigned char buf[8];
    uint64_t size;
    (void)state;

    unsetenv("KEG_FAULTY");
    memset(&sc, 0, sizeof(sc));
    sc.metrics = 1;
    fmt_init(&f, "mem", "anything");
    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    assert_string_equal(o->ops->name, "metrics");
    assert_string_equal(o->inner->ops->name, "retry");
    assert_string_equal(o->inner->inner->ops->name, "mem");
    assert_int_equal(keg_obj_put(o, "vol1/x", "hello", 5), 0);
    assert_int_equal(keg_obj_get(o, "vol1/x", 0, buf, sizeof(buf)), 5);
    assert_int_equal(keg_obj_get(o, "vol1/none", 0, buf, sizeof(buf)), -ENOENT);
    assert_int_equal(keg_obj_head(o, "vol1/x", &size), 0);
    assert_int_equal(keg_obj_del(o, "vol1/x"), 0);
    const struct keg_obj_verb_stats *v = keg_obj_metrics_stats(o);
    assert_non_null(v);
    assert_int_equal(v[KEG_OBJ_VERB_PUT].requests, 1);
    assert_int_equal(v[KEG_OBJ_VERB_PUT].bytes, 5);
    assert_int_equal(v[KEG_OBJ_VERB_GET].requests, 2);
    assert_int_equal(v[KEG_OBJ_VERB_GET].errors, 0);         /* -ENOENT is an answer */
    assert_int_equal(v[KEG_OBJ_VERB_GET].bytes, 5);
    assert_int_equal(v[KEG_OBJ_VERB_GET].latency.count, 2);
    assert_int_equal(v[KEG_OBJ_VERB_HEAD].requests, 1);
    assert_int_equal(v[KEG_OBJ_VERB_DEL].requests, 1);
    for (int i = 0; i < KEG_OBJ_VERB_N; i++)
        assert_int_equal(v[i].retries, 0);
    keg_obj_close(o);

    /* injected failures below it count as the store's */
    setenv("KEG_FAULTY", "seed=1,err=1", 1);
    sc.retry_deadline_ms = 100;
    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    assert_string_equal(o->inner->ops->name, "retry");
    assert_string_equal(o->inner->inner->ops->name, "faulty");
    uint64_t r0 = keg_obj_thread_retries();
    assert_true(keg_obj_put(o, "vol1/y", "x", 1) < 0);
    v = keg_obj_metrics_stats(o);
    assert_int_equal(v[KEG_OBJ_VERB_PUT].requests, 1);
    assert_int_equal(v[KEG_OBJ_VERB_PUT].errors, 1);
    assert_int_equal(v[KEG_OBJ_VERB_PUT].bytes, 0);
    /* the retry layer tried again until its deadline: every repeat is counted */
    assert_true(v[KEG_OBJ_VERB_PUT].retries >= 2);
    assert_int_equal(v[KEG_OBJ_VERB_PUT].retries, keg_obj_thread_retries() - r0);
    assert_int_equal(v[KEG_OBJ_VERB_GET].retries, 0);
    keg_obj_close(o);

    /* a store failing half the time: requests succeed after some repeats, which
     * are counted by verb; a request is still one request */
    setenv("KEG_FAULTY", "seed=3,err=0.5", 1);
    sc.retry_deadline_ms = 10000;
    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    r0 = keg_obj_thread_retries();
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "vol1/k%d", i);
        assert_int_equal(keg_obj_put(o, key, "abc", 3), 0);
        assert_int_equal(keg_obj_get(o, key, 0, buf, sizeof(buf)), 3);
    }
    v = keg_obj_metrics_stats(o);
    assert_int_equal(v[KEG_OBJ_VERB_PUT].requests, 20);
    assert_int_equal(v[KEG_OBJ_VERB_GET].requests, 20);
    assert_int_equal(v[KEG_OBJ_VERB_PUT].errors + v[KEG_OBJ_VERB_GET].errors, 0);
    assert_true(v[KEG_OBJ_VERB_PUT].retries > 0);
    assert_true(v[KEG_OBJ_VERB_GET].retries > 0);
    assert_int_equal(v[KEG_OBJ_VERB_PUT].retries + v[KEG_OBJ_VERB_GET].retries,
                     keg_obj_thread_retries() - r0);
    keg_obj_close(o);
    unsetenv("KEG_FAULTY");

    /* off by default */
    fmt_init(&f, "mem", "anything");
    assert_int_equal(keg_stack_open(&f, NULL, &o), 0);
    assert_null(keg_obj_metrics_stats(o));
    keg_obj_close(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mem_and_file),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_faulty_env),
        cmocka_unit_test(test_metrics_layer),
    };
    keg_log_set_level(LOG_CRIT);
    return cmocka_run_group_tests_name("stack", tests, NULL, NULL);
}
