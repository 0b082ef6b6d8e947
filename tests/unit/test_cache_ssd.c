/* test_cache_ssd.c -- the SSD cache layer: hits after remount without the store, verification
 * and refetch, whole-object reads into the caller's buffer, eviction within the byte budget,
 * single-flight misses, pass-through, del; spare files and direct writes of large file images. */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ssdf/ssd_format.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/obj.h"
#include "keg/stack.h"
#include "stack_i.h"
/* raw byte i of test block id (make_block) */
#define TEST_BLOCK_BYTE(id, i) ((uint8_t)((id) * 31 + (i) * 7 + ((i) >> 9)))
#include "test_store_helpers.h"
#include "ssdf/ssd_file.h"

/*---------------------------------------------------------------------------
 * Fixtures
 *-------------------------------------------------------------------------*/

struct fx {
    char cache[96];    /* cache_dir/<vol> as passed to the layer */
    char root[64];     /* mkdtemp */
    char store[96];    /* bottom file store */
};

static void rm_rf(const char *path)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static int fx_setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    snprintf(fx->root, sizeof(fx->root), "/tmp/keg-cs-XXXXXX");
    if (!mkdtemp(fx->root))
        return -1;
    snprintf(fx->cache, sizeof(fx->cache), "%s/cache", fx->root);
    snprintf(fx->store, sizeof(fx->store), "%s/store", fx->root);
    mkdir(fx->store, 0700);
    atomic_store(&cnt_get_delay_ms, 0);
    *state = fx;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *fx = *state;
    rm_rf(fx->root);
    free(fx);
    return 0;
}

/* cache_ssd(budget) -> counting -> bottom ("mem" or "file" in fx->store). */
static struct keg_obj *open_cache(struct fx *fx, const char *bottom, uint64_t budget)
{
    struct keg_obj_conf oc = {.bucket = fx->store};
    struct keg_cache_ssd_conf cc = {.dir = fx->cache, .budget = budget};
    struct keg_obj *o = NULL;
    assert_int_equal(keg_obj_open(bottom, &oc, NULL, &o), 0);
    assert_int_equal(keg_obj_open("counting", NULL, o, &o), 0);
    assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
    assert_string_equal(o->ops->name, "cache_ssd");
    return o;
}

static void check_block(struct keg_obj *o, uint64_t id, uint32_t blen)
{
    size_t cap = KEG_BLOCK_HDR + blen;
    uint8_t *want = malloc(cap), *got = malloc(cap + 64);
    char key[128];
    size_t olen = make_block(id, blen, want, cap, key, sizeof(key));
    ssize_t n = keg_obj_get(o, key, 0, got, cap + 64);
    assert_int_equal(n, (ssize_t)olen);
    assert_memory_equal(got, want, olen);
    free(want);
    free(got);
}

/* Path of the cache file of key. */
static void cache_path(struct fx *fx, const char *key, char *path, size_t size)
{
    char name[KEGC_NAME_MAX + 1];
    assert_int_equal(kegc_escape(key, name), 0);
    snprintf(path, size, "%s/blocks/%02x/%s", fx->cache,
             keg_crc32c(0, key, strlen(key)) & 0xff, name);
}

/* Bytes of all regular files under dir (recursive), but for the pools of
 * one-byte spare files in a "spare" directory (test_spare_files checks them). */
static uint64_t du(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    uint64_t sum = 0;
    if (!d)
        return 0;
    while ((de = readdir(d)) != NULL) {
        char p[512];
        struct stat st;
        if (de->d_name[0] == '.' && (!de->d_name[1] || strcmp(de->d_name, "..") == 0))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (lstat(p, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && strcmp(de->d_name, "spare") != 0)
            sum += du(p);
        else if (S_ISREG(st.st_mode))
            sum += (uint64_t)st.st_size;
    }
    closedir(d);
    return sum;
}

/*---------------------------------------------------------------------------
 * Tests
 *-------------------------------------------------------------------------*/

/* Data written through the cache reads back without a GET, also after a
 * remount on top of an EMPTY store: every block comes from the SSD. */
static void test_hit_after_remount(void **state)
{
    struct fx *fx = *state;
    struct keg_cache_ssd_stats st;
    struct keg_obj *o = open_cache(fx, "mem", 64 << 20);

    for (uint64_t id = 1; id <= 10; id++)
        put_block(o, id, 4096 + (uint32_t)id * 100);
    for (uint64_t id = 1; id <= 10; id++)
        check_block(o, id, 4096 + (uint32_t)id * 100);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->puts), 10);
    keg_obj_close(o);

    o = open_cache(fx, "mem", 64 << 20);   /* a fresh, empty mem store below */
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 10);
    for (uint64_t id = 1; id <= 10; id++)
        check_block(o, id, 4096 + (uint32_t)id * 100);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 0);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.hits, 10);
    assert_int_equal(st.misses, 0);
    keg_obj_close(o);
}

/* A miss fetches once and caches; ranges are served from the cached copy. */
static void test_fill_and_range(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_cache(fx, "file", 64 << 20);
    struct keg_obj_conf oc = {.bucket = fx->store};
    struct keg_cache_ssd_stats st;
    struct keg_obj *b = NULL;
    uint8_t enc[KEG_BLOCK_HDR + 8192], got[64];
    char key[128];
    size_t olen = make_block(7, 8192, enc, sizeof(enc), key, sizeof(key));
    uint64_t size = 0;

    /* Put directly into the bottom store (another mounter wrote it). */
    assert_int_equal(keg_obj_open("file", &oc, NULL, &b), 0);
    assert_int_equal(keg_obj_put(b, key, enc, olen), 0);
    keg_obj_close(b);

    assert_int_equal(keg_obj_get(o, key, 100, got, 10), 10);
    assert_memory_equal(got, enc + 100, 10);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 1);
    assert_int_equal(keg_obj_get(o, key, olen - 5, got, 64), 5);
    assert_memory_equal(got, enc + olen - 5, 5);
    assert_int_equal(keg_obj_get(o, key, olen + 10, got, 64), 0);
    check_block(o, 7, 8192);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 1);
    assert_int_equal(keg_obj_head(o, key, &size), 0);
    assert_int_equal(size, olen);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.hits, 3);
    assert_int_equal(st.objects, 1);

    /* A missing block is -ENOENT and nothing is cached. */
    keg_block_key(key, sizeof(key), "vol1", 99, 0, 100);
    assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), -ENOENT);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 1);
    keg_obj_close(o);
}

/* A damaged cache file is detected, deleted, logged and refetched transparently. */
static void test_corrupt_refetch(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_cache(fx, "file", 64 << 20);
    struct keg_cache_ssd_stats st;
    char key[128], path[512];
    uint8_t enc[KEG_BLOCK_HDR + 4096];
    int fd;
    unsigned char c;

    put_block(o, 3, 4096);
    put_block(o, 4, 4096);
    make_block(3, 4096, enc, sizeof(enc), key, sizeof(key));
    cache_path(fx, key, path, sizeof(path));
    /* flip one byte of the object part */
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &c, 1, 2000), 1);
    c ^= 0x40;
    assert_int_equal(pwrite(fd, &c, 1, 2000), 1);
    close(fd);
    /* truncate the other one */
    make_block(4, 4096, enc, sizeof(enc), key, sizeof(key));
    cache_path(fx, key, path, sizeof(path));
    assert_int_equal(truncate(path, 100), 0);

    check_block(o, 3, 4096);
    check_block(o, 4, 4096);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 2);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.corrupt, 2);
    assert_int_equal(st.objects, 2);
    /* rewritten: the next reads are hits */
    check_block(o, 3, 4096);
    check_block(o, 4, 4096);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 2);

    /* Corruption after a remount (index rebuilt from the directory) too. */
    keg_obj_close(o);
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "XXXX", 4, 0), 4);   /* the header */
    close(fd);
    o = open_cache(fx, "file", 64 << 20);
    check_block(o, 4, 4096);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 1);
    keg_obj_close(o);
}

/* Flips one byte of the file at path at offset at. */
static void flip_byte(const char *path, off_t at)
{
    unsigned char c;
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &c, 1, at), 1);
    c ^= 0x40;
    assert_int_equal(pwrite(fd, &c, 1, at), 1);
    close(fd);
}

/* A get of the whole object (off 0, len >= object length: what the fs asks for)
 * is read straight into the caller's buffer: no allocation but the path, the
 * exact bytes, also for a 4 MiB block read in pieces; a partial range still
 * takes the copying path and gets exactly its bytes. */
static void test_whole_get_in_place(void **state)
{
    struct fx *fx = *state;
    const uint32_t blen = 4u << 20;
    size_t cap = KEG_BLOCK_HDR + blen;
    struct keg_obj *o = open_cache(fx, "mem", 64 << 20);
    struct keg_cache_ssd_stats st;
    uint8_t *want = malloc(cap), *got = malloc(cap + 64);
    char key[128];
    size_t olen = make_block(11, blen, want, cap, key, sizeof(key));

    put_block(o, 11, blen);
    /* exactly the object's length, then a larger buffer */
    memset(got, 0xEE, cap + 64);
    assert_int_equal(keg_obj_get(o, key, 0, got, olen), (ssize_t)olen);
    assert_memory_equal(got, want, olen);
    memset(got, 0xEE, cap + 64);
    assert_int_equal(keg_obj_get(o, key, 0, got, cap + 64), (ssize_t)olen);
    assert_memory_equal(got, want, olen);
    assert_int_equal(got[olen], 0xEE);             /* nothing past the object */
    /* The whole-object path allocates only the file's path: failing the
     * second allocation from here on does not turn the hit into a miss. */
    keg_mem_fail_at(2);
    memset(got, 0xEE, cap + 64);
    assert_int_equal(keg_obj_get(o, key, 0, got, cap), (ssize_t)olen);
    keg_mem_fail_at(0);
    assert_memory_equal(got, want, olen);
    /* partial ranges: one byte short, from offset 1, in the middle, past the end */
    memset(got, 0xEE, cap + 64);
    assert_int_equal(keg_obj_get(o, key, 0, got, olen - 1), (ssize_t)olen - 1);
    assert_memory_equal(got, want, olen - 1);
    assert_int_equal(got[olen - 1], 0xEE);
    assert_int_equal(keg_obj_get(o, key, 1, got, cap), (ssize_t)olen - 1);
    assert_memory_equal(got, want + 1, olen - 1);
    assert_int_equal(keg_obj_get(o, key, 3000000, got, 12345), 12345);
    assert_memory_equal(got, want + 3000000, 12345);
    assert_int_equal(keg_obj_get(o, key, olen, got, 10), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 0);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.hits, 7);
    assert_int_equal(st.misses, 0);
    assert_int_equal(st.corrupt, 0);
    keg_obj_close(o);
    free(want);
    free(got);
}

/* A cache file that fails verification on a whole-object get (bad bytes already
 * read into the caller's buffer) is deleted, counted and refetched: the caller
 * gets the store's bytes, or an error when the store has none -- never the bad
 * bytes with a success. */
static void test_whole_get_corrupt(void **state)
{
    struct fx *fx = *state;
    const uint32_t blen = 1u << 20;
    size_t cap = KEG_BLOCK_HDR + blen;
    struct keg_obj *o = open_cache(fx, "mem", 64 << 20);
    struct keg_cache_ssd_stats st;
    uint8_t *want = malloc(cap), *got = malloc(cap + 64);
    char key[128], path[512];
    size_t olen = make_block(12, blen, want, cap, key, sizeof(key));
    off_t obj_at = KEGC_HDR + (off_t)strlen(key);
    struct stat sb;

    put_block(o, 12, blen);
    cache_path(fx, key, path, sizeof(path));

    /* a byte in the last piece of the object */
    flip_byte(path, obj_at + (off_t)olen - 10);
    memset(got, 0xEE, cap + 64);
    assert_int_equal(keg_obj_get(o, key, 0, got, cap + 64), (ssize_t)olen);
    assert_memory_equal(got, want, olen);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 1);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.corrupt, 1);
    assert_int_equal(st.objects, 1);               /* cached again, good this time */
    assert_int_equal(keg_obj_get(o, key, 0, got, cap), (ssize_t)olen);
    assert_memory_equal(got, want, olen);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 1);

    /* the header (key length byte, covered by the header CRC) */
    flip_byte(path, 7);
    assert_int_equal(keg_obj_get(o, key, 0, got, cap), (ssize_t)olen);
    assert_memory_equal(got, want, olen);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 2);
    /* the key bytes */
    flip_byte(path, KEGC_HDR + 1);
    assert_int_equal(keg_obj_get(o, key, 0, got, cap), (ssize_t)olen);
    assert_memory_equal(got, want, olen);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 3);
    /* one byte appended: the size no longer matches the header */
    {
        int fd = open(path, O_WRONLY | O_APPEND);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "x", 1), 1);
        close(fd);
    }
    assert_int_equal(keg_obj_get(o, key, 0, got, cap), (ssize_t)olen);
    assert_memory_equal(got, want, olen);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 4);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.corrupt, 4);
    keg_obj_close(o);

    /* After a remount over an EMPTY store, a corrupt file cannot be refetched:
     * the get fails (-ENOENT from the store) instead of returning the bad bytes
     * it read into the buffer, and the file is gone. */
    o = open_cache(fx, "mem", 64 << 20);
    flip_byte(path, obj_at + 5);
    assert_int_equal(keg_obj_get(o, key, 0, got, cap), -ENOENT);
    assert_int_equal(stat(path, &sb), -1);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.corrupt, 1);
    assert_int_equal(st.objects, 0);
    keg_obj_close(o);
    free(want);
    free(got);
}

/* Writes path as a file of kind holding key and obj[0..len), plus extra bytes of 0x5A. */
static void write_kegc(const char *path, int kind, const char *key, const uint8_t *obj,
                       size_t len, size_t extra)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    uint8_t z[8];

    assert_true(fd >= 0 && extra <= sizeof(z));
    assert_int_equal(keg_ssd_file_write(fd, kind, key, obj, len), 0);
    memset(z, 0x5A, sizeof(z));
    if (extra)
        assert_int_equal(pwrite(fd, z, extra, (off_t)(KEGC_HDR + strlen(key) + len)),
                         (ssize_t)extra);
    close(fd);
}

/* A cache file holding a longer (valid) object than the index says: the
 * whole-object read finds it does not fit the buffer and the range path
 * serves the buffer's worth from it. */
static void test_whole_get_larger_than_index(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_cache(fx, "mem", 64 << 20);
    uint8_t enc[KEG_BLOCK_HDR + 1000], big[KEG_BLOCK_HDR + 1200], got[KEG_BLOCK_HDR + 1200];
    char key[128], path[512];
    size_t olen = make_block(13, 1000, enc, sizeof(enc), key, sizeof(key));

    put_block(o, 13, 1000);
    cache_path(fx, key, path, sizeof(path));
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 13);
    write_kegc(path, KEGC_KIND_CACHE, key, big, sizeof(big), 0);
    assert_int_equal(keg_obj_get(o, key, 0, got, olen + 50), (ssize_t)olen + 50);
    assert_memory_equal(got, big, olen + 50);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 0);
    keg_obj_close(o);
}

/* keg_ssd_file_read_obj on its own: results and errors. */
static void test_file_read_obj(void **state)
{
    struct fx *fx = *state;
    char path[160];
    uint8_t obj[3000], got[3000];
    uint64_t olen = 1;

    for (size_t i = 0; i < sizeof(obj); i++)
        obj[i] = (uint8_t)(i * 7 + 1);
    mkdir(fx->cache, 0700);
    snprintf(path, sizeof(path), "%s/f", fx->cache);
    write_kegc(path, KEGC_KIND_STAGED, "a/key", obj, sizeof(obj), 0);
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "a/key", got,
                                           sizeof(got), &olen), 0);
    assert_int_equal(olen, sizeof(obj));
    assert_memory_equal(got, obj, sizeof(obj));
    /* a buffer of exactly the object (the first read fills it: the size comes
     * from fstat), then one byte too small: -EMSGSIZE */
    memset(got, 0, sizeof(got));
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "a/key", got,
                                           sizeof(obj), &olen), 0);
    assert_int_equal(olen, sizeof(obj));
    assert_memory_equal(got, obj, sizeof(obj));
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "a/key", got,
                                           sizeof(got) - 1, &olen), -EMSGSIZE);
    assert_int_equal(olen, 0);
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "a/key", got,
                                           0, &olen), -EMSGSIZE);
    /* a cache reader takes kind 1 or 2, a staging reader only 2 */
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_CACHED_ANY, "a/key", got,
                                           sizeof(got), &olen), 0);
    assert_int_equal(olen, sizeof(obj));
    /* another kind, another key (same length), no file */
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_CACHE, "a/key", got,
                                           sizeof(got), &olen), -EIO);
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "a/kez", got,
                                           sizeof(got), &olen), -EIO);
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, "/nonexistent/x", KEGC_KIND_STAGED, "a/key",
                                           got, sizeof(got), &olen), -ENOENT);
    /* a damaged object byte, then a short file */
    flip_byte(path, KEGC_HDR + 5 + 2999);
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "a/key", got,
                                           sizeof(got), &olen), -EIO);
    assert_int_equal(olen, 0);
    assert_int_equal(truncate(path, KEGC_HDR + 3), 0);
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "a/key", got,
                                           sizeof(got), &olen), -EIO);
}

/* The file's size decides however the reads end: a file one byte longer or
 * shorter than its header says is corrupt, with the object inside the first
 * read or past it; an object of several read pieces (256 KiB each) arrives whole
 * and a bad byte in a later piece is caught; a cache reader takes kind 1 and 2
 * only. */
static void test_file_read_obj_sizes(void **state)
{
    struct fx *fx = *state;
    static const size_t lens[] = {0, 1, 4096, (256u << 10) - 1, 256u << 10, (256u << 10) + 1,
                                  (600u << 10) + 7};
    size_t big = (600u << 10) + 8;
    uint8_t *obj = malloc(big), *got = malloc(big + 16);
    char path[160];
    uint64_t olen;

    assert_non_null(obj);
    assert_non_null(got);
    for (size_t i = 0; i < big; i++)
        obj[i] = (uint8_t)(i * 13 + 7);
    mkdir(fx->cache, 0700);
    snprintf(path, sizeof(path), "%s/f", fx->cache);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t len = lens[i];
        size_t caps[] = {len, len + 1, big + 16};
        for (size_t c = 0; c < 3; c++) {
            write_kegc(path, KEGC_KIND_STAGED, "k/1", obj, len, 0);
            memset(got, 0, big + 16);
            olen = 99;
            assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "k/1", got,
                                                   caps[c], &olen), 0);
            assert_int_equal(olen, len);
            assert_memory_equal(got, obj, len);
            /* one byte more than the header says, then one byte less */
            write_kegc(path, KEGC_KIND_STAGED, "k/1", obj, len, 1);
            assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "k/1",
                                                   got, caps[c], &olen), -EIO);
            assert_int_equal(olen, 0);
            if (len > 0) {
                write_kegc(path, KEGC_KIND_STAGED, "k/1", obj, len, 0);
                assert_int_equal(truncate(path, (off_t)(KEGC_HDR + 3 + len - 1)), 0);
                assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "k/1",
                                                       got, caps[c], &olen), -EIO);
                /* a bad last byte */
                write_kegc(path, KEGC_KIND_STAGED, "k/1", obj, len, 0);
                flip_byte(path, (off_t)(KEGC_HDR + 3 + len - 1));
                assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "k/1",
                                                       got, caps[c], &olen), -EIO);
            }
        }
    }
    /* kinds: 1 and 2 for a cache reader, never 3; each exact kind only itself */
    for (int kind = 1; kind <= 3; kind++) {
        write_kegc(path, kind, "k/1", obj, 4096, 0);
        assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_CACHED_ANY, "k/1", got,
                                               big, &olen), kind <= 2 ? 0 : -EIO);
        assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_CACHE, "k/1", got,
                                               big, &olen), kind == 1 ? 0 : -EIO);
        assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, "k/1", got,
                                               big, &olen), kind == 2 ? 0 : -EIO);
    }
    free(obj);
    free(got);
}

/* Reads back the staged file at path: exactly len bytes of obj under key, file size exact. */
static void check_staged_file(const char *path, const char *key, const uint8_t *obj, size_t len)
{
    struct stat st;
    uint8_t *got = malloc(len + 1);
    uint64_t olen = 0;

    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, KEGC_HDR + strlen(key) + len);
    assert_int_equal(keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_STAGED, key, got, len + 1,
                                           &olen), 0);
    assert_int_equal(olen, len);
    assert_memory_equal(got, obj, len);
    free(got);
}

/* Direct writes of large file images: the image lands whole and exact (also over a
 * longer reused file), the fd keeps its flags, and every case the caller must write
 * the buffered way says -EAGAIN: no pool, an image over the pool's limit, all
 * buffers busy, a file that refuses O_DIRECT (a memfd; afterwards the pool refuses
 * at once).  Real errors are not -EAGAIN. */
static void test_direct_write(void **state)
{
    struct fx *fx = *state;
    const char *key = "vol/chunks/0/1/77_0_1048699";
    size_t len = (1u << 20) + 123;
    uint8_t *obj = malloc(len), *junk = malloc(3u << 20);
    struct keg_ssd_dio *d = NULL, *small = NULL;
    char path[160];
    int fd, fl, mfd;

    for (size_t i = 0; i < len; i++)
        obj[i] = (uint8_t)(i * 13 + (i >> 11));
    memset(junk, 0xAA, 3u << 20);
    mkdir(fx->cache, 0700);
    snprintf(path, sizeof(path), "%s/direct", fx->cache);
    assert_int_equal(keg_ssd_dio_open(1, 8u << 20, &d), 0);

    /* a longer file in the way (a reused spare): cut to the image */
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, junk, 3u << 20), 3 << 20);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    fl = fcntl(fd, F_GETFL);
    int rc = keg_ssd_file_write_direct(d, fd, KEGC_KIND_STAGED, key, obj, len);
    if (rc == -EAGAIN) {
        /* this test directory's file system has no direct I/O: the fallback
         * contract holds (refused from now on), the image is not checked */
        print_message("direct I/O refused under %s: only the fallback is checked\n",
                      fx->cache);
        assert_true(keg_ssd_dio_refused(d));
    } else {
        assert_int_equal(rc, 0);
        assert_false(keg_ssd_dio_refused(d));
        assert_int_equal(fcntl(fd, F_GETFL), fl);        /* O_DIRECT cleared again */
        assert_int_equal(lseek(fd, 0, SEEK_CUR), 0);     /* offset untouched */
        check_staged_file(path, key, obj, len);
        /* the buffer is reused for a second, smaller image of another key */
        assert_int_equal(keg_ssd_file_write_direct(d, fd, KEGC_KIND_STAGED, "k2", obj, 5000), 0);
        check_staged_file(path, "k2", obj, 5000);
    }
    close(fd);

    /* an image over the pool's limit: -EAGAIN, the file untouched, not "refused" */
    assert_int_equal(keg_ssd_dio_open(1, 4096, &small), 0);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "xyz", 3), 3);
    assert_int_equal(keg_ssd_file_write_direct(small, fd, KEGC_KIND_STAGED, key, obj, len),
                     -EAGAIN);
    assert_false(keg_ssd_dio_refused(small));
    assert_int_equal(lseek(fd, 0, SEEK_END), 3);
    /* every buffer busy (a pool of none) */
    keg_ssd_dio_close(small);
    assert_int_equal(keg_ssd_dio_open(0, 8u << 20, &small), 0);
    assert_int_equal(keg_ssd_file_write_direct(small, fd, KEGC_KIND_STAGED, key, obj, len),
                     -EAGAIN);
    assert_false(keg_ssd_dio_refused(small));
    keg_ssd_dio_close(small);
    assert_int_equal(keg_ssd_dio_open(1, 4096, &small), 0);
    /* no pool at all */
    assert_int_equal(keg_ssd_file_write_direct(NULL, fd, KEGC_KIND_STAGED, key, obj, len),
                     -EAGAIN);
    close(fd);
    /* a bad fd is an error of its own, not a reason to fall back */
    if (!keg_ssd_dio_refused(d))
        assert_int_equal(keg_ssd_file_write_direct(d, -1, KEGC_KIND_STAGED, key, obj, len),
                         -EBADF);

    /* a file that refuses O_DIRECT (memfd): -EAGAIN, the buffered write then works,
     * and the pool refuses from now on without trying */
    mfd = memfd_create("keg-direct", 0);
    assert_true(mfd >= 0);
    assert_int_equal(keg_ssd_file_write_direct(small, mfd, KEGC_KIND_STAGED, "k", obj, 100),
                     -EAGAIN);
    assert_true(keg_ssd_dio_refused(small));
    assert_int_equal(keg_ssd_file_write(mfd, KEGC_KIND_STAGED, "k", obj, 100), 0);
    assert_int_equal(lseek(mfd, 0, SEEK_END), KEGC_HDR + 1 + 100);
    close(mfd);
    fd = open(path, O_RDWR | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(keg_ssd_file_write_direct(small, fd, KEGC_KIND_STAGED, "k", obj, 100),
                     -EAGAIN);
    assert_int_equal(lseek(fd, 0, SEEK_END), 0);
    close(fd);

    keg_ssd_dio_close(d);
    keg_ssd_dio_close(small);
    keg_ssd_dio_close(NULL);
    free(obj);
    free(junk);
}

/* A block that is corrupt in the store is fetched again, then served but never cached. */
static void test_store_corruption_not_cached(void **state)
{
    struct fx *fx = *state;
    struct keg_obj_conf fc = {.seed = 1, .corrupt_prob = 1.0};
    struct keg_cache_ssd_conf cc = {.dir = fx->cache, .budget = 1 << 20};
    struct keg_cache_ssd_stats st;
    struct keg_obj *o = NULL, *m = NULL;
    uint8_t enc[KEG_BLOCK_HDR + 1000], got[KEG_BLOCK_HDR + 1000], raw[1000];
    char key[128];
    size_t olen = make_block(5, 1000, enc, sizeof(enc), key, sizeof(key));

    assert_int_equal(keg_obj_open("mem", NULL, NULL, &m), 0);
    assert_int_equal(keg_obj_put(m, key, enc, olen), 0);
    assert_int_equal(keg_obj_open("counting", NULL, m, &o), 0);
    assert_int_equal(keg_obj_open("faulty", &fc, o, &o), 0);
    assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
    assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), (ssize_t)olen);
    assert_int_equal(keg_block_decode(got, olen, NULL, raw, sizeof(raw)), -EIO);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 2);    /* fetched twice */
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 0);
    assert_int_equal(du(fx->cache), 0);
    keg_obj_close(o);
}

/* With the volume's identity, a valid block of another key or volume under a key is
 * served but never cached; the block of this key and volume is. */
static void test_foreign_block_not_cached(void **state)
{
    struct fx *fx = *state;
    struct keg_block_id vol = {0};
    struct keg_cache_ssd_conf cc = {.dir = fx->cache, .budget = 1 << 20, .vol = &vol};
    struct keg_cache_ssd_stats st;
    struct keg_obj *o = NULL, *m = NULL;
    uint8_t raw[1000], enc[KEG_BLOCK_HDR + 1000], got[KEG_BLOCK_HDR + 1000];
    char key[128];
    size_t olen;

    assert_int_equal(keg_block_vol_uuid("12345678-9abc-4def-8123-456789abcdef", vol.vol), 0);
    memset(raw, 0x3c, sizeof(raw));
    keg_block_key(key, sizeof(key), "vol1", 7, 0, sizeof(raw));
    assert_int_equal(keg_obj_open("mem", NULL, NULL, &m), 0);
    assert_int_equal(keg_obj_open("counting", NULL, m, &o), 0);
    assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
    for (int k = 0; k < 3; k++) {
        struct keg_block_id bid = vol;
        bid.slice = 7;
        bid.blen = sizeof(raw);
        if (k == 0)
            bid.slice = 8;                      /* another slice of this volume */
        else if (k == 1)
            bid.vol[3] ^= 1;                    /* the same key of another volume */
        assert_int_equal(keg_block_encode(KEG_CODEC_NONE, &bid, raw, sizeof(raw), enc,
                                          sizeof(enc), &olen), 0);
        assert_int_equal(keg_obj_put(m, key, enc, olen), 0);
        assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), (ssize_t)olen);
        assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
        assert_int_equal(st.objects, k < 2 ? 0 : 1);
        bid = vol;
        bid.slice = 7;
        bid.blen = sizeof(raw);
        assert_int_equal(keg_block_decode(got, olen, &bid, raw, sizeof(raw)),
                         k < 2 ? -EIO : (ssize_t)sizeof(raw));
    }
    assert_true(du(fx->cache) > 0);
    keg_obj_close(o);
}

/* The cache never holds more than its budget; recently used blocks stay. */
static void test_eviction_budget(void **state)
{
    struct fx *fx = *state;
    const uint32_t blen = 10000;
    const uint64_t fsize = KEGC_HDR + KEG_BLOCK_HDR + blen + 30;   /* ~ one file */
    const uint64_t budget = 5 * fsize;
    struct keg_cache_ssd_stats st;
    struct keg_obj *o = open_cache(fx, "file", budget);
    int gets;

    for (uint64_t id = 1; id <= 20; id++) {
        put_block(o, id, blen);
        check_block(o, 1, blen);            /* keep block 1 hot */
        assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
        assert_true(st.bytes <= budget);
        assert_true(du(fx->cache) <= budget);
    }
    assert_int_equal(st.objects, 5);
    assert_true(st.evictions >= 15);
    gets = atomic_load(&cnt_of(o)->gets);
    check_block(o, 1, blen);                /* still cached */
    check_block(o, 20, blen);               /* the newest too */
    assert_int_equal(atomic_load(&cnt_of(o)->gets), gets);
    check_block(o, 2, blen);                /* long evicted: fetched */
    assert_int_equal(atomic_load(&cnt_of(o)->gets), gets + 1);
    keg_obj_close(o);

    /* A smaller budget at the next open evicts down to it. */
    o = open_cache(fx, "file", 2 * fsize);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_true(st.bytes <= 2 * fsize);
    assert_true(du(fx->cache) <= 2 * fsize);
    /* An object larger than the whole budget is served, never cached. */
    check_block(o, 3, blen);
    keg_obj_close(o);
    o = open_cache(fx, "file", 1000);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 0);
    check_block(o, 9, blen);
    check_block(o, 9, blen);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 2);
    assert_int_equal(du(fx->cache), 0);
    keg_obj_close(o);
}

/* Writeback staging that found the disk full asks the cache for room: least
 * recently used blocks go, at least the bytes asked for, and the cache stays
 * usable (it fills again from the store). */
static void test_make_room(void **state)
{
    struct fx *fx = *state;
    const uint32_t blen = 10000;
    struct keg_cache_ssd_stats st;
    struct keg_obj *o = open_cache(fx, "file", 1 << 20);

    for (uint64_t id = 1; id <= 6; id++)
        put_block(o, id, blen);
    check_block(o, 1, blen);                /* 1 is the most recent now */
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 6);
    uint64_t before = st.bytes, du0 = du(fx->cache);
    uint64_t one = before / 6;
    uint64_t freed = keg_cache_ssd_make_room(o, 2 * one + 1);   /* needs three files */
    assert_int_equal(freed, 3 * one);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 3);
    assert_int_equal(st.bytes, before - freed);
    assert_int_equal(st.evictions, 3);
    assert_true(du(fx->cache) <= du0 - freed);
    int gets = atomic_load(&cnt_of(o)->gets);
    check_block(o, 1, blen);                /* the most recent stayed */
    assert_int_equal(atomic_load(&cnt_of(o)->gets), gets);
    check_block(o, 2, blen);                /* the oldest went: fetched, cached again */
    assert_int_equal(atomic_load(&cnt_of(o)->gets), gets + 1);
    check_block(o, 2, blen);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), gets + 1);
    /* more than the cache holds: everything goes; not a cache layer: 0 */
    assert_true(keg_cache_ssd_make_room(o, 1ULL << 40) > 0);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 0);
    assert_int_equal(keg_cache_ssd_make_room(o->inner, 100), 0);
    keg_obj_close(o);
}

/* The staged objects being uploaded (keg_cache_ssd_leaving) count as free
 * space: on a 40 MiB disk whose free space is short of the 32 MiB the cache
 * leaves free, a block is not cached, unless the files filling the disk are
 * about to go; once they are no longer counted, the cache yields again.
 * Needs a tmpfs (root). */
static void test_leaving_counts_as_free(void **state)
{
    struct fx *fx = *state;
    struct keg_cache_ssd_stats st;
    char disk[80], filler[128];
    struct keg_obj *o;
    int fd;

    snprintf(disk, sizeof(disk), "%.64s/disk", fx->root);
    assert_int_equal(mkdir(disk, 0700), 0);
    if (mount("kegfs-test-cs", disk, "tmpfs", 0, "size=40m") < 0) {
        fprintf(stderr, "SKIP: cannot mount a tmpfs at %s: %s\n", disk, strerror(errno));
        skip();
    }
    snprintf(fx->cache, sizeof(fx->cache), "%.80s/cache", disk);
    o = open_cache(fx, "file", 1 << 30);
    snprintf(filler, sizeof(filler), "%s/staged", disk);   /* 30 MiB of "staged" files */
    fd = open(filler, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(posix_fallocate(fd, 0, 30 << 20), 0);
    close(fd);
    put_block(o, 1, 100000);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 0);                        /* 10 MiB free: not cached */
    keg_cache_ssd_leaving(o, 30 << 20);
    put_block(o, 2, 100000);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 1);                        /* they are about to go */
    keg_cache_ssd_leaving(o, -(30 << 20));
    put_block(o, 3, 100000);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 0);                        /* they stay: the cache yields */
    keg_cache_ssd_leaving(o->inner, 1);                     /* not a cache layer: no-op */
    check_block(o, 2, 100000);
    keg_obj_close(o);
    assert_int_equal(umount2(disk, MNT_DETACH), 0);
}

struct sf_arg {
    struct keg_obj    *o;
    pthread_barrier_t *bar;
    int                ok;
};

static void *sf_thread(void *p)
{
    struct sf_arg *a = p;
    uint8_t want[KEG_BLOCK_HDR + 65536], got[KEG_BLOCK_HDR + 65536];
    char key[128];
    size_t olen = make_block(42, 65536, want, sizeof(want), key, sizeof(key));
    pthread_barrier_wait(a->bar);
    a->ok = keg_obj_get(a->o, key, 0, got, sizeof(got)) == (ssize_t)olen &&
            memcmp(got, want, olen) == 0;
    return NULL;
}

/* 16 threads missing the same block cause exactly one GET. */
static void test_single_flight(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_cache(fx, "file", 64 << 20);
    struct keg_obj_conf oc = {.bucket = fx->store};
    struct keg_cache_ssd_stats st;
    struct sf_arg args[16];
    pthread_t th[16];
    pthread_barrier_t bar;
    struct keg_obj *b = NULL;

    assert_int_equal(keg_obj_open("file", &oc, NULL, &b), 0);
    put_block(b, 42, 65536);
    keg_obj_close(b);

    atomic_store(&cnt_get_delay_ms, 300);
    pthread_barrier_init(&bar, NULL, 16);
    for (int i = 0; i < 16; i++) {
        args[i] = (struct sf_arg){.o = o, .bar = &bar};
        assert_int_equal(pthread_create(&th[i], NULL, sf_thread, &args[i]), 0);
    }
    for (int i = 0; i < 16; i++) {
        pthread_join(th[i], NULL);
        assert_true(args[i].ok);
    }
    pthread_barrier_destroy(&bar);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 1);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.shared + st.hits, 15);
    keg_obj_close(o);
}

/* Objects that are not blocks pass through; del removes the cached copy. */
static void test_passthrough_and_del(void **state)
{
    struct fx *fx = *state;
    struct keg_obj *o = open_cache(fx, "mem", 64 << 20);
    struct keg_cache_ssd_stats st;
    uint8_t got[64];
    char key[128], path[512];
    struct stat sb;

    assert_int_equal(keg_obj_put(o, "vol1/.kegfs-probe-1", "probe", 5), 0);
    assert_int_equal(keg_obj_get(o, "vol1/.kegfs-probe-1", 0, got, sizeof(got)), 5);
    assert_int_equal(keg_obj_get(o, "vol1/.kegfs-probe-1", 0, got, sizeof(got)), 5);
    assert_int_equal(atomic_load(&cnt_of(o)->gets), 2);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 0);
    assert_int_equal(keg_obj_del(o, "vol1/.kegfs-probe-1"), 0);

    put_block(o, 8, 500);
    keg_block_key(key, sizeof(key), "vol1", 8, 0, 500);
    cache_path(fx, key, path, sizeof(path));
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(keg_obj_del(o, key), 0);
    assert_int_equal(stat(path, &sb), -1);
    assert_int_equal(keg_obj_get(o, key, 0, got, sizeof(got)), -ENOENT);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 0);
    assert_int_equal(st.bytes, 0);

    /* del_keys: cached copies go, and the keys go down in one call */
    char k2[2][128];
    const char *keys[2] = {k2[0], k2[1]};
    put_block(o, 9, 500);
    put_block(o, 10, 700);
    keg_block_key(k2[0], sizeof(k2[0]), "vol1", 9, 0, 500);
    keg_block_key(k2[1], sizeof(k2[1]), "vol1", 10, 0, 700);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 2);
    int calls = atomic_load(&cnt_of(o)->del_calls);
    assert_int_equal(keg_obj_del_keys(o, keys, 2), 0);
    assert_int_equal(atomic_load(&cnt_of(o)->del_calls), calls + 1);
    for (int i = 0; i < 2; i++) {
        cache_path(fx, keys[i], path, sizeof(path));
        assert_int_equal(stat(path, &sb), -1);
        assert_int_equal(keg_obj_get(o, keys[i], 0, got, sizeof(got)), -ENOENT);
    }
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 0);
    keg_obj_close(o);
}

/* Temp files of a crashed write and foreign files are removed at open. */
static void test_open_cleans_up(void **state)
{
    struct fx *fx = *state;
    struct keg_cache_ssd_stats st;
    struct keg_obj *o = open_cache(fx, "mem", 64 << 20);
    char p1[512], p2[512], p3[512], key[128];
    struct stat sb;
    int fd;

    put_block(o, 11, 300);
    keg_obj_close(o);
    keg_block_key(key, sizeof(key), "vol1", 11, 0, 300);
    snprintf(p1, sizeof(p1), "%s/blocks/00/.tmp.vol1%%2Fchunks%%2F0.abcdef", fx->cache);
    snprintf(p2, sizeof(p2), "%s/blocks/00/not%%2xvalid", fx->cache);
    snprintf(p3 + 256, 256, "%s/blocks/00", fx->cache);
    mkdir(p3 + 256, 0700);
    fd = open(p1, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "half", 4), 4);
    close(fd);
    fd = open(p2, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);

    cache_path(fx, key, p3, sizeof(p3));
    o = open_cache(fx, "mem", 64 << 20);
    assert_int_equal(stat(p1, &sb), -1);
    assert_int_equal(stat(p2, &sb), -1);
    assert_int_equal(stat(p3, &sb), 0);
    assert_int_equal(keg_cache_ssd_stats(o, &st), 0);
    assert_int_equal(st.objects, 1);
    assert_int_equal(st.bytes, (uint64_t)sb.st_size);
    check_block(o, 11, 300);
    keg_obj_close(o);
}

/* Key escaping is reversible and canonical. */
static void test_escape(void **state)
{
    char name[KEGC_NAME_MAX + 1], key[KEGC_NAME_MAX + 1], long_key[400];
    (void)state;
    assert_int_equal(kegc_escape("vol1/chunks/0/1/1234_0_4096", name), 0);
    assert_string_equal(name, "vol1%2Fchunks%2F0%2F1%2F1234_0_4096");
    assert_int_equal(kegc_unescape(name, key), 0);
    assert_string_equal(key, "vol1/chunks/0/1/1234_0_4096");
    assert_int_equal(kegc_escape(".x%", name), 0);
    assert_string_equal(name, "%2Ex%25");
    assert_int_equal(kegc_unescape(name, key), 0);
    assert_string_equal(key, ".x%");
    assert_int_equal(kegc_unescape("%2ex", key), -EINVAL);    /* not canonical */
    assert_int_equal(kegc_unescape("a%2", key), -EINVAL);
    assert_int_equal(kegc_unescape("%41", key), -EINVAL);     /* 'A' needs no escape */
    memset(long_key, '/', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
    assert_int_equal(kegc_escape(long_key, name), -ENAMETOOLONG);
}

/* Through keg_stack_open: zero conf keeps the plain store; cache_dir adds cache_ssd. */
static void test_stack_cache(void **state)
{
    struct fx *fx = *state;
    struct keg_stack_conf sc = {0};
    struct keg_stack_stats st;
    struct keg_format f;
    struct keg_obj *o = NULL;
    char dir[128];

    memset(&f, 0, sizeof(f));
    snprintf(f.name, sizeof(f.name), "vol1");
    snprintf(f.uuid, sizeof(f.uuid), "0b7c2e1a-uuid");
    snprintf(f.storage, sizeof(f.storage), "file");
    snprintf(f.bucket, sizeof(f.bucket), "%s", fx->store);
    unsetenv("KEG_FAULTY");

    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    assert_string_equal(o->ops->name, "retry");
    assert_string_equal(o->inner->ops->name, "file");
    assert_int_equal(keg_stack_stats(o, &st), 0);
    assert_int_equal(st.has_cache, 0);
    assert_int_equal(keg_stack_drain(o, 10, NULL), 0);
    keg_obj_close(o);

    snprintf(dir, sizeof(dir), "%s/c", fx->root);
    sc.cache_dir = dir;
    sc.cache_size = 1 << 20;
    setenv("KEG_FAULTY", "seed=1", 1);
    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    unsetenv("KEG_FAULTY");
    assert_string_equal(o->ops->name, "cache_ssd");
    assert_string_equal(o->inner->ops->name, "retry");
    assert_string_equal(o->inner->inner->ops->name, "faulty");
    assert_string_equal(o->inner->inner->inner->ops->name, "file");
    put_block(o, 1, 1000);
    check_block(o, 1, 1000);
    assert_int_equal(keg_stack_stats(o, &st), 0);
    assert_int_equal(st.has_cache, 1);
    assert_int_equal(st.cache_objects, 1);
    assert_int_equal(st.cache_hits, 1);
    assert_int_equal(st.cache_budget, 1 << 20);
    keg_obj_close(o);
    /* kept per volume uuid */
    snprintf(dir, sizeof(dir), "%s/c/0b7c2e1a-uuid/blocks", fx->root);
    assert_true(du(dir) > 1000);

    sc.cache_dir = "relative/dir";
    o = (void *)1;
    assert_int_equal(keg_stack_open(&f, &sc, &o), -EINVAL);
    assert_null(o);
}

/* Inode of the cache file of test block id, 0 if it has none. */
static ino_t cache_ino(struct fx *fx, uint64_t id, uint32_t blen)
{
    uint8_t *enc = malloc(KEG_BLOCK_HDR + blen);
    char key[128], name[KEGC_NAME_MAX + 1], path[512];
    struct stat st;

    make_block(id, blen, enc, KEG_BLOCK_HDR + blen, key, sizeof(key));
    free(enc);
    assert_int_equal(kegc_escape(key, name), 0);
    snprintf(path, sizeof(path), "%s/blocks/%02x/%s", fx->cache,
             (unsigned)(keg_crc32c(0, key, strlen(key)) & 0xff), name);
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* Regular files directly in dir (not recursive); *over1 (if not NULL) counts
 * those longer than one byte. */
static unsigned nfiles_sized(const char *dir, unsigned *over1)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    unsigned n = 0;
    if (over1)
        *over1 = 0;
    if (!d)
        return 0;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (de->d_type != DT_REG)
            continue;
        n++;
        if (over1 && (fstatat(dirfd(d), de->d_name, &st, 0) < 0 || st.st_size != 1))
            (*over1)++;
    }
    closedir(d);
    return n;
}

/* Evicted and deleted files go to the pool of spare files, cut to one byte
 * (the budget holds on disk; not zero: ssd_file.c); new cache files reuse them (no new inode); the
 * pool's directory goes at close; a dead process's pool is removed at open. */
static void test_spare_files(void **state)
{
    struct fx *fx = *state;
    const uint32_t blen = 3000;
    const uint64_t fsize = KEGC_HDR + KEG_BLOCK_HDR + blen + 30;
    const uint64_t budget = 4 * fsize;
    char spare[160], dead[200], deadf[220], key[128];
    uint8_t enc[KEG_BLOCK_HDR + 3000];
    struct keg_ssd_spare *sp;
    struct keg_obj *o;
    unsigned pooled;
    ino_t inos[5];
    struct stat st;
    DIR *d;
    struct dirent *de;
    int fd;

    /* a pool left by a process that died: unlocked, not ".new" */
    snprintf(spare, sizeof(spare), "%s/spare", fx->cache);
    snprintf(dead, sizeof(dead), "%s/999999.0", spare);
    snprintf(deadf, sizeof(deadf), "%s/7", dead);
    assert_int_equal(keg_ssd_mkdirs(dead), 0);
    fd = open(deadf, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);

    o = open_cache(fx, "file", budget);
    assert_int_equal(stat(dead, &st), -1);                 /* swept */
    sp = keg_cache_ssd_spare(o);
    assert_non_null(sp);
    assert_null(keg_cache_ssd_spare(o->inner));            /* not a cache layer */
    for (uint64_t id = 1; id <= 12; id++) {
        put_block(o, id, blen);
        if (id <= 5)
            inos[id - 1] = cache_ino(fx, id, blen);
        assert_true(du(fx->cache) <= budget);
    }
    /* 8 evictions, but blocks 6..12 live in the inodes of evicted ones: the
     * only new inodes were those of blocks 1..5 */
    for (uint64_t id = 6; id <= 12; id++) {
        ino_t ino = cache_ino(fx, id, blen);
        int known = 0;
        if (id <= 8)
            continue;                                      /* evicted by now */
        for (int i = 0; i < 5; i++)
            known |= ino == inos[i];
        assert_true(ino != 0 && known);
    }
    pooled = keg_ssd_spare_count(sp);
    assert_true(pooled <= 1);
    for (uint64_t id = 9; id <= 12; id++)
        check_block(o, id, blen);
    /* a delete pools the file; the next store takes a spare */
    make_block(12, blen, enc, sizeof(enc), key, sizeof(key));
    assert_int_equal(keg_obj_del(o, key), 0);
    assert_int_equal(keg_ssd_spare_count(sp), pooled + 1);
    put_block(o, 13, blen);
    assert_int_equal(keg_ssd_spare_count(sp), pooled);
    check_block(o, 13, blen);
    assert_true(du(fx->cache) <= budget);
    /* one live pool directory holding the pooled files */
    d = opendir(spare);
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        char p[600];
        if (de->d_name[0] == '.')
            continue;
        unsigned over1;
        snprintf(p, sizeof(p), "%s/%s", spare, de->d_name);
        assert_int_equal(nfiles_sized(p, &over1), pooled);
        assert_int_equal(over1, 0);
    }
    closedir(d);
    keg_obj_close(o);
    d = opendir(spare);
    assert_non_null(d);
    while ((de = readdir(d)) != NULL)
        assert_true(de->d_name[0] == '.');                 /* nothing left */
    closedir(d);

    /* reopened: the blocks that were cached are still served, unchanged */
    o = open_cache(fx, "file", budget);
    check_block(o, 13, blen);
    check_block(o, 11, blen);
    keg_obj_close(o);
}

/* A burst of deletions (the deleter retires about a second's worth at once:
 * some 2,000 blocks of small rewrites) is pooled whole, up to KEG_SSD_SPARE_MAX
 * (4,096) files, and the stores that follow take those files. */
static void test_spare_burst(void **state)
{
    struct fx *fx = *state;
    const uint32_t blen = 100;
    const unsigned burst = 3000, max = KEG_SSD_SPARE_MAX;
    uint8_t enc[KEG_BLOCK_HDR + 100];
    char key[128];
    struct keg_ssd_spare *sp;
    struct keg_obj *o = open_cache(fx, "mem", 1ULL << 30);

    sp = keg_cache_ssd_spare(o);
    assert_non_null(sp);
    for (uint64_t id = 1; id <= max + 10; id++)
        put_block(o, id, blen);
    for (uint64_t id = 1; id <= burst; id++) {
        make_block(id, blen, enc, sizeof(enc), key, sizeof(key));
        assert_int_equal(keg_obj_del(o, key), 0);
    }
    assert_int_equal(keg_ssd_spare_count(sp), burst);
    for (uint64_t id = 1; id <= burst; id++)
        put_block(o, 100000 + id, blen);
    assert_int_equal(keg_ssd_spare_count(sp), 0);      /* every store took a spare */
    check_block(o, 100000 + burst, blen);
    for (uint64_t id = burst + 1; id <= max + 10; id++) {
        make_block(id, blen, enc, sizeof(enc), key, sizeof(key));
        assert_int_equal(keg_obj_del(o, key), 0);
    }
    for (uint64_t id = 1; id <= burst; id++) {
        make_block(100000 + id, blen, enc, sizeof(enc), key, sizeof(key));
        assert_int_equal(keg_obj_del(o, key), 0);
    }
    assert_int_equal(keg_ssd_spare_count(sp), max);    /* the rest were unlinked */
    keg_obj_close(o);
}

/* With spare_fill (a mount's stack), a stream of new cache files that finds
 * the pool empty starts its filler, which stocks it with 256 empty files that
 * the next stores take; every block reads back right; closing removes them. */
static void test_spare_fill(void **state)
{
    struct fx *fx = *state;
    struct keg_obj_conf oc = {.bucket = fx->store};
    struct keg_cache_ssd_conf cc = {.dir = fx->cache, .budget = 1ULL << 30, .spare_fill = 1};
    struct keg_obj *o = NULL;
    struct keg_ssd_spare *sp;
    unsigned n = 0;

    assert_int_equal(keg_obj_open("mem", &oc, NULL, &o), 0);
    assert_int_equal(keg_cache_ssd_create(&cc, o, &o), 0);
    sp = keg_cache_ssd_spare(o);
    assert_non_null(sp);
    for (uint64_t id = 1; id <= 100; id++)
        put_block(o, id, 100);
    for (int t = 0; t < 500 && (n = keg_ssd_spare_count(sp)) < 256; t++)
        usleep(10000);
    assert_int_equal(n, 256);
    for (uint64_t id = 101; id <= 150; id++)
        put_block(o, id, 100);
    assert_int_equal(keg_ssd_spare_count(sp), 206);     /* 50 taken, none unlinked */
    for (uint64_t id = 1; id <= 150; id++)
        check_block(o, id, 100);
    keg_obj_close(o);
}

/* The pool alone: bounded, larger files unlinked, claim fails on an empty pool,
 * a claimed file is opened for writing where it lies and fits the new length,
 * place renames it over its name (or links it, failing on an existing name),
 * a claim placed into a missing directory stands, a dropped one is gone, and a
 * file with a second link is not pooled. */
static void test_spare_pool_bounds(void **state)
{
    struct fx *fx = *state;
    char dir[160], f[200], g[200];
    struct keg_ssd_spare *sp = NULL;
    struct stat st;
    uint64_t id, id2;
    int fd;

    snprintf(dir, sizeof(dir), "%s/p", fx->root);
    assert_int_equal(keg_ssd_spare_open(dir, 2, 100, &sp), 0);
    assert_int_equal(keg_ssd_spare_claim(sp, &id), -ENOENT);
    for (int i = 0; i < 4; i++) {
        snprintf(f, sizeof(f), "%s/f%d", fx->root, i);
        fd = open(f, O_WRONLY | O_CREAT, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "0123456789", 10), 10);
        close(fd);
        assert_int_equal(keg_ssd_spare_retire(sp, AT_FDCWD, f, i == 0 ? 1000 : 10), 0);
        assert_int_equal(stat(f, &st), -1);                /* moved or unlinked */
    }
    assert_int_equal(keg_ssd_spare_count(sp), 2);          /* f0 too big, f3 over max */
    assert_int_equal(keg_ssd_spare_retire(sp, AT_FDCWD, f, 10), -ENOENT);
    snprintf(g, sizeof(g), "%s/g", fx->root);
    assert_int_equal(mknod(g, S_IFREG | 0600, 0), 0);       /* an old object to replace */
    fd = keg_ssd_spare_claim(sp, &id);
    assert_true(fd >= 0);
    assert_int_equal(keg_ssd_spare_count(sp), 1);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, 1);                       /* cut when pooled */
    assert_int_equal(write(fd, "abcdef", 6), 6);
    assert_int_equal(keg_ssd_file_fit(fd, 4), 0);
    close(fd);
    /* a directory that does not exist: the claim stands */
    assert_int_equal(keg_ssd_spare_place(sp, id, AT_FDCWD, "/nonexistent/x", 0), -ENOENT);
    assert_int_equal(keg_ssd_spare_place(sp, id, AT_FDCWD, g, 0), 0);   /* over g */
    assert_int_equal(stat(g, &st), 0);
    assert_int_equal(st.st_size, 4);
    /* with excl the name must be new; a refused link leaves nothing behind */
    fd = keg_ssd_spare_claim(sp, &id2);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(keg_ssd_spare_count(sp), 0);
    assert_int_equal(keg_ssd_spare_place(sp, id2, AT_FDCWD, g, 1), -EEXIST);
    assert_int_equal(stat(g, &st), 0);
    assert_int_equal(st.st_size, 4);                       /* g unchanged */
    /* both claims are over: the pool takes two files again, then drop */
    for (int i = 0; i < 2; i++) {
        snprintf(f, sizeof(f), "%s/again%d", fx->root, i);
        fd = open(f, O_WRONLY | O_CREAT, 0600);
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(keg_ssd_spare_retire(sp, AT_FDCWD, f, 0), 0);
    }
    assert_int_equal(keg_ssd_spare_count(sp), 2);
    fd = keg_ssd_spare_claim(sp, &id);
    assert_true(fd >= 0);
    close(fd);
    keg_ssd_spare_drop(sp, id);
    assert_int_equal(keg_ssd_spare_count(sp), 1);
    {
        /* the pool's directory holds exactly the pooled file: placed, refused
         * and dropped claims left no file behind */
        char pooldir[480];
        DIR *d;
        struct dirent *de;
        int files = 0, pools = 0;
        d = opendir(dir);
        assert_non_null(d);
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            pools++;
            snprintf(pooldir, sizeof(pooldir), "%s/%s", dir, de->d_name);
        }
        closedir(d);
        assert_int_equal(pools, 1);
        d = opendir(pooldir);
        assert_non_null(d);
        while ((de = readdir(d)) != NULL)
            files += de->d_name[0] != '.';
        closedir(d);
        assert_int_equal(files, 1);
    }

    /* a file with a second link is unlinked, not pooled: that name keeps its bytes */
    char h[200];
    snprintf(f, sizeof(f), "%s/linked", fx->root);
    snprintf(h, sizeof(h), "%s/linked-copy", fx->root);
    fd = open(f, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "0123456789", 10), 10);
    close(fd);
    assert_int_equal(link(f, h), 0);
    assert_int_equal(keg_ssd_spare_retire(sp, AT_FDCWD, f, 10), 0);
    assert_int_equal(stat(f, &st), -1);
    assert_int_equal(keg_ssd_spare_count(sp), 1);          /* not pooled */
    assert_int_equal(stat(h, &st), 0);
    assert_int_equal(st.st_size, 10);
    assert_int_equal(st.st_nlink, 1);
    unlink(h);
    keg_ssd_spare_close(sp);
    keg_ssd_spare_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test_setup_teardown(test_hit_after_remount, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fill_and_range, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_refetch, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_whole_get_in_place, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_whole_get_corrupt, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_whole_get_larger_than_index, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_file_read_obj, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_file_read_obj_sizes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_direct_write, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_store_corruption_not_cached, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_foreign_block_not_cached, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_eviction_budget, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_make_room, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_leaving_counts_as_free, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_spare_files, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_spare_pool_bounds, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_spare_burst, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_spare_fill, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_single_flight, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_passthrough_and_del, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_open_cleans_up, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_stack_cache, fx_setup, fx_teardown),
    };
    keg_log_set_level(getenv("KEG_TEST_LOG") ? LOG_DEBUG : LOG_CRIT);
    assert_int_equal(keg_obj_register(&cnt_ops), 0);
    return cmocka_run_group_tests_name("cache_ssd", tests, NULL, NULL);
}
