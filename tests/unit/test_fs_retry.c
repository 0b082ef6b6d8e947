/* test_fs_retry.c -- block uploads and fetches against transient object-store errors,
 * retried by the object stack's retry layer (core/obj/obj_retry.c) and by nothing above
 * it: with errors injected by the faulty layer (KEG_FAULTY) every file still writes and
 * reads back exactly; when every op fails, flush and read end in EIO within one retry
 * deadline (no hang, no nesting); a store that flips bytes yields the right bytes or
 * EIO, never wrong bytes.
 * SQLite engine + file store in a temporary directory. */
#define _GNU_SOURCE 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#define TV_RND_SEED 0x2545F4914F6CDD1DULL
#include "test_fs_helpers.h"
#include "fs/fs_i.h"
#include "keg/log.h"
#include "keg/stack.h"

#define BS      (64u << 10)
#define NFILES  200
#define MAXLEN  (3 * BS + 1000)     /* up to four blocks per file */

/* Mount v with KEG_FAULTY=faulty (NULL: none) and the retry deadline (ms, 0: default). */
static void mount_with(struct tvol *v, const char *faulty, unsigned deadline_ms)
{
    struct keg_fs_conf conf;
    struct keg_stack_conf sc;

    memset(&conf, 0, sizeof(conf));
    memset(&sc, 0, sizeof(sc));
    sc.retry_deadline_ms = deadline_ms;
    conf.meta_url = v->url;
    conf.mountpoint = "/test";
    conf.heartbeat_sec = 1;
    conf.stack = &sc;
    if (faulty)
        setenv("KEG_FAULTY", faulty, 1);
    int rc = keg_fs_new(&conf, &v->fs);
    unsetenv("KEG_FAULTY");
    assert_int_equal(rc, 0);
}

struct files {
    uint64_t ino[NFILES];
    uint32_t len[NFILES];
    uint8_t *data[NFILES];
};

/* Write NFILES files of random sizes and contents; every write, flush and
 * release must succeed. */
static void write_files(struct tvol *v, struct files *f)
{
    for (int i = 0; i < NFILES; i++) {
        char name[32];
        snprintf(name, sizeof(name), "f%03d", i);
        f->len[i] = 1 + rnd(MAXLEN);
        f->data[i] = keg_malloc(f->len[i]);
        assert_non_null(f->data[i]);
        fill_random(f->data[i], f->len[i]);
        struct keg_fh *fh = tvol_create(v, KEG_ROOT_INO, name, &f->ino[i]);
        assert_int_equal(keg_fs_write(v->fs, fh, 0, f->data[i], f->len[i]), (ssize_t)f->len[i]);
        assert_int_equal(keg_fs_flush(v->fs, fh, 1), 0);
        assert_int_equal(keg_fs_release(v->fs, fh), 0);
    }
}

static void free_files(struct files *f)
{
    for (int i = 0; i < NFILES; i++)
        keg_free(f->data[i]);
}

/* Read file i whole.  Returns what keg_fs_read returned; got holds the bytes. */
static ssize_t read_file(struct tvol *v, const struct files *f, int i, uint8_t *got)
{
    struct keg_fh *fh = tvol_open(v, f->ino[i], O_RDONLY);
    ssize_t n = keg_fs_read(v->fs, fh, 0, got, MAXLEN);
    assert_int_equal(keg_fs_release(v->fs, fh), 0);
    return n;
}

/*--------------------------------------------------------------------------*/

static void test_transient_classes(void **state)
{
    static const int transient[] = {-EAGAIN, -ETIMEDOUT, -EIO, -ECONNRESET, -ECONNREFUSED};
    static const int final[] = {-EACCES, -EINVAL, -ENOENT, -ENOSPC, -EFBIG, -EDQUOT, -ENOMEM};
    (void)state;

    for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++) {
        assert_true(keg_obj_transient(transient[i]));
        assert_int_equal(fs_io_error(transient[i]), -EIO);
    }
    for (size_t i = 0; i < sizeof(final) / sizeof(final[0]); i++) {
        assert_false(keg_obj_transient(final[i]));
        assert_int_equal(fs_io_error(final[i]), final[i]);
    }
}

/* err=0.2: every fifth op fails; all 200 files write and read back exactly,
 * in this mount and after a remount (reads from the store). */
static void test_transient_errors_invisible(void **state)
{
    struct tvol v;
    struct files *f = keg_calloc(1, sizeof(*f));
    uint8_t *got = keg_malloc(MAXLEN);
    (void)state;

    tvol_init(&v, BS, "none");
    mount_with(&v, "seed=11,err=0.2", 0);
    write_files(&v, f);
    for (int i = 0; i < NFILES; i++) {
        assert_int_equal(read_file(&v, f, i, got), (ssize_t)f->len[i]);
        assert_memory_equal(got, f->data[i], f->len[i]);
    }
    tvol_umount(&v);
    mount_with(&v, "seed=12,err=0.2", 0);
    for (int i = 0; i < NFILES; i++) {
        assert_int_equal(read_file(&v, f, i, got), (ssize_t)f->len[i]);
        assert_memory_equal(got, f->data[i], f->len[i]);
    }
    tvol_cleanup(&v);
    free_files(f);
    keg_free(f);
    keg_free(got);
}

/* err=1: every op fails.  flush returns EIO once the retries are over, after
 * one deadline (the upload of a three-block file: the blocks' puts run in
 * parallel and the queued ones fail at once after the first failure, so it is
 * not three deadlines); nothing is committed.  A read of data written before
 * fails with EIO the same way. */
static void test_permanent_errors_eio(void **state)
{
    struct tvol v;
    uint64_t ino = 0, ino2 = 0;
    uint8_t d[3 * BS];
    uint8_t got[sizeof(d)];
    struct keg_attr a;
    (void)state;

    fill_random(d, sizeof(d));
    tvol_init(&v, BS, "none");
    mount_with(&v, NULL, 0);
    struct keg_fh *fh = tvol_create(&v, KEG_ROOT_INO, "good", &ino2);
    assert_int_equal(keg_fs_write(v.fs, fh, 0, d, sizeof(d)), (ssize_t)sizeof(d));
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_umount(&v);

    mount_with(&v, "seed=3,err=1", 400);
    fh = tvol_create(&v, KEG_ROOT_INO, "bad", &ino);
    assert_int_equal(keg_fs_write(v.fs, fh, 0, d, sizeof(d)), (ssize_t)sizeof(d));
    int64_t t0 = keg_mono_ns();
    assert_int_equal(keg_fs_flush(v.fs, fh, 1), -EIO);
    int64_t took = keg_mono_ns() - t0;
    print_message("flush failed after %lld ms\n", (long long)(took / 1000000));
    assert_true(took >= 350000000 && took < 1100000000LL);   /* one 400 ms deadline */
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, ino, &a), 0);
    assert_int_equal(a.size, 0);                       /* nothing committed */
    assert_int_equal(keg_fs_release(v.fs, fh), 0);

    fh = tvol_open(&v, ino2, O_RDONLY);
    t0 = keg_mono_ns();
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), -EIO);
    took = keg_mono_ns() - t0;
    print_message("read failed after %lld ms\n", (long long)(took / 1000000));
    assert_true(took >= 350000000 && took < 1000000000LL);   /* one 400 ms deadline */
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_umount(&v);

    /* the store is fine again: the old file is intact */
    mount_with(&v, NULL, 0);
    fh = tvol_open(&v, ino2, O_RDONLY);
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), (ssize_t)sizeof(got));
    assert_memory_equal(got, d, sizeof(d));
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

/* corrupt=0.3 (and err=0.1): a read returns the right bytes or EIO, never
 * wrong bytes; re-reading a torn block makes most reads succeed. */
static void test_corrupt_reads_never_wrong(void **state)
{
    struct tvol v;
    struct files *f = keg_calloc(1, sizeof(*f));
    uint8_t *got = keg_malloc(MAXLEN);
    int ok = 0, eio = 0;
    (void)state;

    tvol_init(&v, BS, "none");
    mount_with(&v, NULL, 0);
    write_files(&v, f);
    tvol_umount(&v);

    mount_with(&v, "seed=21,corrupt=0.3,err=0.1", 0);
    for (int i = 0; i < NFILES; i++) {
        ssize_t n = read_file(&v, f, i, got);
        if (n == -EIO) {
            eio++;
            continue;
        }
        assert_int_equal(n, (ssize_t)f->len[i]);
        assert_memory_equal(got, f->data[i], f->len[i]);
        ok++;
    }
    print_message("%d reads correct, %d EIO\n", ok, eio);
    assert_true(ok >= NFILES * 8 / 10);
    tvol_cleanup(&v);
    free_files(f);
    keg_free(f);
    keg_free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transient_classes),
        cmocka_unit_test(test_transient_errors_invisible),
        cmocka_unit_test(test_permanent_errors_eio),
        cmocka_unit_test(test_corrupt_reads_never_wrong),
    };
    keg_log_set_level(LOG_CRIT);
    return cmocka_run_group_tests_name("fs_retry", tests, NULL, NULL);
}
