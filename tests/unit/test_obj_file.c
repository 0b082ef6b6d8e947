/* test_obj_file.c -- "file" store specifics beyond the contract suite:
 * configuration errors, key validation, layout on disk, temp files, ENOSPC,
 * the spare files that deleted blocks become. */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include "keg/keg.h"
#include "keg/log.h"
#include "keg/obj.h"
#include "ssdf/ssd_file.h"

struct ffx {
    char dir[64];
    struct keg_obj *o;
};

/* fsync() of this program, the store's included: counted, then done. */
static int n_fsync;

int fsync(int fd)
{
    n_fsync++;
    return (int)syscall(SYS_fsync, fd);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    struct ffx *fx = calloc(1, sizeof(*fx));
    struct keg_obj_conf conf = {0};
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/keg-objfile-XXXXXX");
    if (!mkdtemp(fx->dir))
        return -1;
    conf.bucket = fx->dir;
    if (keg_obj_open("file", &conf, NULL, &fx->o) < 0)
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct ffx *fx = *state;
    keg_obj_close(fx->o);
    nftw(fx->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return 0;
}

static void test_open_errors(void **state)
{
    struct keg_obj_conf conf = {0};
    struct keg_obj *o = (void *)1;
    (void)state;
    conf.bucket = "relative/dir";
    assert_int_equal(keg_obj_open("file", &conf, NULL, &o), -EINVAL);
    assert_null(o);
    conf.bucket = NULL;
    assert_int_equal(keg_obj_open("file", &conf, NULL, &o), -EINVAL);
    conf.bucket = "/nonexistent/keg-test-dir";
    assert_int_equal(keg_obj_open("file", &conf, NULL, &o), -ENOENT);
    assert_null(o);
    conf.bucket = "/etc/hostname";
    assert_int_equal(keg_obj_open("file", &conf, NULL, &o), -ENOTDIR);
    /* file:// URL form and trailing slashes are accepted. */
    conf.bucket = "file:///tmp/";
    assert_int_equal(keg_obj_open("file", &conf, NULL, &o), 0);
    keg_obj_close(o);
}

static void test_bad_keys(void **state)
{
    struct ffx *fx = *state;
    static const char *bad[] = {"", "/abs", "..", "../x", "a/../b", "a/..", ".", "a/./b", "a//b",
                                "a/", ".tmp.x", "a/.tmp.y"};
    unsigned char buf[4];
    uint64_t size;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (keg_obj_put(fx->o, bad[i], "x", 1) != -EINVAL)
            fail_msg("put accepted \"%s\"", bad[i]);
        assert_int_equal(keg_obj_get(fx->o, bad[i], 0, buf, sizeof(buf)), -EINVAL);
        assert_int_equal(keg_obj_head(fx->o, bad[i], &size), -EINVAL);
        assert_int_equal(keg_obj_del(fx->o, bad[i]), -EINVAL);
    }
    /* Names that merely contain dots are fine. */
    assert_int_equal(keg_obj_put(fx->o, "a..b/.c/x.tmp.", "x", 1), 0);
    assert_int_equal(keg_obj_get(fx->o, "a..b/.c/x.tmp.", 0, buf, sizeof(buf)), 1);
}

static int count_cb(void *arg, const char *key, uint64_t size)
{
    (void)size;
    if (strstr(key, ".tmp."))
        return -EBADMSG;
    (*(int *)arg)++;
    return 0;
}

static void test_layout_and_temp_files(void **state)
{
    struct ffx *fx = *state;
    char path[256];
    struct stat st;
    int seen = 0;

    assert_int_equal(keg_obj_put(fx->o, "v/chunks/0/0/5_0_3", "abc", 3), 0);
    snprintf(path, sizeof(path), "%s/v/chunks/0/0/5_0_3", fx->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode) && st.st_size == 3);
    snprintf(path, sizeof(path), "%s/v/chunks/0", fx->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    /* No temp file is left behind. */
    snprintf(path, sizeof(path), "%s/v/chunks/0/0", fx->dir);
    DIR *d = opendir(path);
    struct dirent *de;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL)
        assert_true(strncmp(de->d_name, ".tmp.", 5) != 0);
    closedir(d);
    /* A stray temp file (a crash mid-put) is invisible to list. */
    snprintf(path, sizeof(path), "%s/v/chunks/0/0/.tmp.5_0_4.AbCdEf", fx->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("partial", f);
    fclose(f);
    assert_int_equal(keg_obj_list(fx->o, "", count_cb, &seen), 0);
    assert_int_equal(seen, 1);
    assert_int_equal(keg_obj_get(fx->o, "v/chunks/0/0/5_0_4", 0, path, 8), -ENOENT);
}

static void test_list_skips_temp(void **state)
{
    struct ffx *fx = *state;
    char path[256];
    int n = 0;
    assert_int_equal(keg_obj_put(fx->o, "d/k1", "1", 1), 0);
    snprintf(path, sizeof(path), "%s/d/.tmp.k2.XyZ123", fx->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(keg_obj_list(fx->o, "", count_cb, &n), 0);
    assert_int_equal(n, 1);
    /* A directory where an object is expected reads as missing. */
    assert_int_equal(keg_obj_put(fx->o, "dir/sub/x", "1", 1), 0);
    unsigned char buf[4];
    uint64_t size;
    assert_int_equal(keg_obj_get(fx->o, "dir/sub", 0, buf, sizeof(buf)), -ENOENT);
    assert_int_equal(keg_obj_head(fx->o, "dir/sub", &size), -ENOENT);
    assert_int_equal(keg_obj_del(fx->o, "dir/sub"), 0);
    assert_int_equal(keg_obj_get(fx->o, "dir/sub/x", 0, buf, sizeof(buf)), 1);
}

/* ENOSPC: needs a tiny tmpfs, so root (and permission to mount); skipped otherwise. */
/* sync_keys fsyncs the named objects (and their directories); a key that
 * is gone or invalid is skipped; the objects read back unchanged. */
static void test_sync_keys(void **state)
{
    struct ffx *fx = *state;
    const char *keys[] = {"v/chunks/0/1/1_0_3", "v/chunks/0/1/2_0_3", "v/gone", "../bad"};
    unsigned char buf[4];

    assert_int_equal(keg_obj_put(fx->o, keys[0], "abc", 3), 0);
    assert_int_equal(keg_obj_put(fx->o, keys[1], "def", 3), 0);
    assert_int_equal(keg_obj_sync_keys(fx->o, keys, 4), 0);
    assert_int_equal(keg_obj_sync_keys(fx->o, keys, 0), 0);
    assert_int_equal(keg_obj_get(fx->o, keys[0], 0, buf, sizeof(buf)), 3);
    assert_memory_equal(buf, "abc", 3);
    assert_int_equal(keg_obj_get(fx->o, keys[1], 0, buf, sizeof(buf)), 3);
    assert_memory_equal(buf, "def", 3);
}

/* The directory chain above a key is fsync'ed once: afterwards a key costs its
 * file and its directory, and a new directory costs itself and its parent. */
static void test_sync_keys_chain_once(void **state)
{
    struct ffx *fx = *state;
    const char *k1 = "w/chunks/0/1/1_0_3", *k2 = "w/chunks/0/1/2_0_3", *k3 = "w/chunks/0/2/3_0_3";

    assert_int_equal(keg_obj_put(fx->o, k1, "abc", 3), 0);
    assert_int_equal(keg_obj_put(fx->o, k2, "def", 3), 0);
    assert_int_equal(keg_obj_put(fx->o, k3, "ghi", 3), 0);
    n_fsync = 0;
    assert_int_equal(keg_obj_sync_keys(fx->o, &k1, 1), 0);
    /* the file, w/chunks/0/1, then the entries of 1 in 0, 0 in chunks, chunks in w, w in root */
    assert_int_equal(n_fsync, 6);
    n_fsync = 0;
    assert_int_equal(keg_obj_sync_keys(fx->o, &k2, 1), 0);
    assert_int_equal(n_fsync, 2);
    n_fsync = 0;
    assert_int_equal(keg_obj_sync_keys(fx->o, &k3, 1), 0);
    assert_int_equal(n_fsync, 3);       /* the file, w/chunks/0/2, w/chunks/0 */
    n_fsync = 0;
    assert_int_equal(keg_obj_sync_keys(fx->o, &k1, 1), 0);
    assert_int_equal(n_fsync, 2);
}

/* Makes the directory template dir and mounts a 1 MiB tmpfs on it: 0, or -1
 * when that cannot be done (not root, no permission to mount): skip. */
static int tiny_tmpfs(char *dir)
{
    if (geteuid() != 0 || !mkdtemp(dir))
        return -1;
    if (mount("kegtest", dir, "tmpfs", 0, "size=1m") < 0) {
        rmdir(dir);
        return -1;
    }
    return 0;
}

static void test_enospc(void **state)
{
    char dir[64] = "/tmp/keg-objfull-XXXXXX";
    struct keg_obj_conf conf = {0};
    struct keg_obj *o = NULL;
    unsigned char *big = calloc(1, 2u << 20);
    int n = 0;
    (void)state;

    assert_non_null(big);
    if (tiny_tmpfs(dir) < 0) {
        free(big);
        skip();
    }
    conf.bucket = dir;
    assert_int_equal(keg_obj_open("file", &conf, NULL, &o), 0);
    assert_int_equal(keg_obj_put(o, "a/small", "x", 1), 0);
    assert_int_equal(keg_obj_put(o, "a/big", big, 2u << 20), -ENOSPC);
    /* The failed put left no temp file and no object. */
    assert_int_equal(keg_obj_list(o, "", count_cb, &n), 0);
    assert_int_equal(n, 1);
    char path[128];
    snprintf(path, sizeof(path), "%s/a", dir);
    DIR *d = opendir(path);
    struct dirent *de;
    int entries = 0;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL)
        entries += de->d_name[0] != '.';
    closedir(d);
    assert_int_equal(entries, 1);
    /* Space is usable again afterwards. */
    assert_int_equal(keg_obj_put(o, "a/after", big, 100000), 0);
    keg_obj_close(o);
    umount2(dir, MNT_DETACH);
    rmdir(dir);
    free(big);
}

/* Files (not directories) under dir, recursively; *bytes = their total size. */
static long spare_bytes;
static long spare_files;
static int spare_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (flag == FTW_F) {
        spare_files++;
        spare_bytes += (long)st->st_size;
    }
    return 0;
}

static long count_spares(const char *dir, long *bytes)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/.tmp.spare", dir);
    spare_files = spare_bytes = 0;
    nftw(path, spare_cb, 16, FTW_PHYS);
    if (bytes)
        *bytes = spare_bytes;
    return spare_files;
}

static ino_t ino_of(const char *dir, const char *key)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, key);
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* A block of slice id, 3000 bytes of fill, encoded as the data path does. */
static size_t make_block(uint64_t id, int fill, struct keg_block_id *bid, char *key, size_t ksize,
                         unsigned char *obj, size_t cap)
{
    unsigned char raw[3000];
    size_t len = 0;
    memset(raw, fill, sizeof(raw));
    memset(bid, 0, sizeof(*bid));
    keg_block_vol_uuid("vol-spare-test", bid->vol);
    bid->slice = id;
    bid->indx = 0;
    bid->blen = sizeof(raw);
    keg_block_key(key, ksize, "vol", id, 0, sizeof(raw));
    assert_int_equal(keg_block_encode(KEG_CODEC_NONE, bid, raw, sizeof(raw), obj, cap, &len), 0);
    return len;
}

static void test_spare_files(void **state)
{
    struct ffx *fx = *state;
    unsigned char a[4096], b[4096], got[4096], raw[3000];
    struct keg_block_id ida, idb;
    char ka[128], kb[128], kc[128], path[256], link2[256];
    size_t la = make_block(1001, 'a', &ida, ka, sizeof(ka), a, sizeof(a));
    size_t lb = make_block(1002, 'b', &idb, kb, sizeof(kb), b, sizeof(b));
    struct keg_block_id idc;
    long bytes = 0;
    int n = 0;

    /* A store only read makes no pool. */
    assert_int_equal(keg_obj_put(fx->o, ka, a, la), 0);
    assert_int_equal(keg_obj_get(fx->o, ka, 0, got, sizeof(got)), (ssize_t)la);
    snprintf(path, sizeof(path), "%s/.tmp.spare", fx->dir);
    assert_int_equal(access(path, F_OK), -1);

    /* A deleted block becomes a spare of one byte; its key is gone. */
    ino_t ia = ino_of(fx->dir, ka);
    assert_true(ia != 0);
    snprintf(path, sizeof(path), "%s/%s", fx->dir, ka);
    int stale = open(path, O_RDONLY);                   /* a reader that opened it before */
    assert_true(stale >= 0);
    assert_int_equal(keg_obj_del(fx->o, ka), 0);
    assert_int_equal(keg_obj_get(fx->o, ka, 0, got, sizeof(got)), -ENOENT);
    assert_int_equal(count_spares(fx->dir, &bytes), 1);
    assert_int_equal(bytes, 1);

    /* The next put rewrites that file: same inode, exactly the new bytes. */
    assert_int_equal(keg_obj_put(fx->o, kb, b, lb), 0);
    assert_int_equal(count_spares(fx->dir, NULL), 0);
    assert_true(ino_of(fx->dir, kb) == ia);
    assert_int_equal(keg_obj_get(fx->o, kb, 0, got, sizeof(got)), (ssize_t)lb);
    assert_memory_equal(got, b, lb);
    assert_int_equal(keg_block_decode(got, lb, &idb, raw, sizeof(raw)), (ssize_t)sizeof(raw));

    /* The stale reader now reads another block: the identity check refuses
     * it, and the key it reads again is gone (what core/fs/read.c does). */
    ssize_t sn = pread(stale, got, sizeof(got), 0);
    close(stale);
    assert_int_equal(sn, (ssize_t)lb);
    assert_int_equal(keg_block_decode(got, (size_t)sn, &ida, raw, sizeof(raw)), -EIO);
    assert_int_equal(keg_obj_get(fx->o, ka, 0, got, sizeof(got)), -ENOENT);

    /* A longer spare is cut to the new object's length. */
    unsigned char big[9000];
    memset(big, 'z', sizeof(big));
    keg_block_key(kc, sizeof(kc), "vol", 1003, 0, sizeof(big));
    assert_int_equal(keg_obj_put(fx->o, kc, big, sizeof(big)), 0);
    assert_int_equal(keg_obj_del(fx->o, kc), 0);
    assert_int_equal(count_spares(fx->dir, &bytes), 1);
    size_t lc = make_block(1004, 'c', &idc, kc, sizeof(kc), a, sizeof(a));
    assert_int_equal(keg_obj_put_new(fx->o, kc, a, lc), 0);     /* put_new takes one too */
    assert_int_equal(count_spares(fx->dir, NULL), 0);
    assert_int_equal(keg_obj_head(fx->o, kc, &(uint64_t){0}), 0);
    assert_int_equal(keg_obj_get(fx->o, kc, 0, got, sizeof(got)), (ssize_t)lc);
    assert_memory_equal(got, a, lc);

    /* Not recycled: an object that is not a block, and a block with a
     * second link (an operator's hard-linked copy keeps its bytes). */
    assert_int_equal(keg_obj_put(fx->o, "vol/other", "text", 4), 0);
    assert_int_equal(keg_obj_del(fx->o, "vol/other"), 0);
    assert_int_equal(count_spares(fx->dir, NULL), 0);
    snprintf(path, sizeof(path), "%s/%s", fx->dir, kb);
    snprintf(link2, sizeof(link2), "%s/copy", fx->dir);
    assert_int_equal(link(path, link2), 0);
    assert_int_equal(keg_obj_del(fx->o, kb), 0);
    assert_int_equal(count_spares(fx->dir, NULL), 0);
    int fd = open(link2, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, got, sizeof(got), 0), (ssize_t)lb);
    assert_memory_equal(got, b, lb);
    close(fd);
    unlink(link2);

    /* list never shows spares; closing the store removes its pool. */
    assert_int_equal(keg_obj_del(fx->o, kc), 0);
    assert_int_equal(count_spares(fx->dir, NULL), 1);
    assert_int_equal(keg_obj_list(fx->o, "", count_cb, &n), 0);
    assert_int_equal(n, 0);
    keg_obj_close(fx->o);
    fx->o = NULL;
    assert_int_equal(count_spares(fx->dir, NULL), 0);
    struct keg_obj_conf conf = {.bucket = fx->dir};
    assert_int_equal(keg_obj_open("file", &conf, NULL, &fx->o), 0);
}

/* The pool takes a burst of deletions as the deleter makes them (a second's
 * worth at a time under steady small-file churn: about 2,000 blocks here), and
 * the puts that follow allocate no inode; past KEG_SSD_SPARE_MAX (4,096) it
 * unlinks. */
#define BURST     3000
#define POOL_MAX  KEG_SSD_SPARE_MAX
static void test_spare_burst(void **state)
{
    struct ffx *fx = *state;
    unsigned char obj[4096];
    struct keg_block_id bid;
    char key[128];
    static ino_t before[BURST];
    size_t len;
    int fresh = 0;

    for (int i = 0; i < BURST; i++) {
        len = make_block(10000 + (uint64_t)i, 'p', &bid, key, sizeof(key), obj, sizeof(obj));
        assert_int_equal(keg_obj_put(fx->o, key, obj, len), 0);
        before[i] = ino_of(fx->dir, key);
    }
    for (int i = 0; i < BURST; i++) {
        keg_block_key(key, sizeof(key), "vol", 10000 + (uint64_t)i, 0, 3000);
        assert_int_equal(keg_obj_del(fx->o, key), 0);
    }
    assert_int_equal(count_spares(fx->dir, NULL), BURST);
    for (int i = 0; i < BURST; i++) {
        ino_t now;
        int found = 0;
        len = make_block(20000 + (uint64_t)i, 'q', &bid, key, sizeof(key), obj, sizeof(obj));
        assert_int_equal(keg_obj_put(fx->o, key, obj, len), 0);
        now = ino_of(fx->dir, key);
        for (int k = 0; k < BURST && !found; k++)
            found = before[k] == now;
        /* a former block's inode, the first put into each of the three new
         * key directories (vol/chunks/0/20 .. 22) too: it makes the directory
         * and then places the spare it wrote */
        if (!found)
            fresh++;
    }
    assert_int_equal(fresh, 0);
    assert_int_equal(count_spares(fx->dir, NULL), 0);

    /* more deletions than the pool holds: the rest are unlinked */
    for (int i = BURST; i < POOL_MAX + 10; i++) {
        len = make_block(20000 + (uint64_t)i, 'r', &bid, key, sizeof(key), obj, sizeof(obj));
        assert_int_equal(keg_obj_put(fx->o, key, obj, len), 0);
    }
    for (int i = 0; i < POOL_MAX + 10; i++) {
        keg_block_key(key, sizeof(key), "vol", 20000 + (uint64_t)i, 0, 3000);
        assert_int_equal(keg_obj_del(fx->o, key), 0);
        assert_int_equal(keg_obj_head(fx->o, key, &(uint64_t){0}), -ENOENT);
    }
    assert_int_equal(count_spares(fx->dir, NULL), POOL_MAX);
}

/* A full disk with a spare in the pool: a put that does not fit in the spare
 * fails with -ENOSPC, the spare is dropped and nothing is left under the key's
 * directory; a block that fits is stored.  Needs a tiny tmpfs (root). */
static void test_spare_enospc(void **state)
{
    char dir[64] = "/tmp/keg-objspare-XXXXXX", key[64], path[128];
    struct keg_obj_conf conf = {0};
    struct keg_obj *o = NULL;
    unsigned char blk[4096], *big = calloc(1, 64 << 10);
    struct keg_block_id bid;
    char bkey[128];
    size_t blen;
    int i, entries = 0;
    (void)state;

    assert_non_null(big);
    if (tiny_tmpfs(dir) < 0) {
        free(big);
        skip();
    }
    conf.bucket = dir;
    assert_int_equal(keg_obj_open("file", &conf, NULL, &o), 0);
    for (i = 0; i < 1000; i++) {            /* fill the disk with 4 KiB objects */
        snprintf(key, sizeof(key), "fill/%d", i);
        if (keg_obj_put(o, key, big, 4096) == -ENOSPC)
            break;
    }
    assert_true(i > 0 && i < 1000);
    snprintf(key, sizeof(key), "fill/%d", i - 1);
    assert_int_equal(keg_obj_del(o, key), 0);  /* room for one block, which becomes a spare */
    blen = make_block(77, 's', &bid, bkey, sizeof(bkey), blk, sizeof(blk));
    assert_int_equal(keg_obj_put(o, bkey, blk, blen), 0);
    assert_int_equal(keg_obj_del(o, bkey), 0);
    assert_int_equal(count_spares(dir, NULL), 1);
    /* does not fit: -ENOSPC, the spare dropped, no file under a/ */
    assert_int_equal(keg_obj_put(o, "a/big", big, 64 << 10), -ENOSPC);
    assert_int_equal(count_spares(dir, NULL), 0);
    snprintf(path, sizeof(path), "%s/a", dir);
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL)
            entries += de->d_name[0] != '.';
        closedir(d);
    }
    assert_int_equal(entries, 0);
    assert_int_equal(keg_obj_head(o, "a/big", &(uint64_t){0}), -ENOENT);
    /* the page the spare held is free again: a block fits */
    assert_int_equal(keg_obj_put(o, bkey, blk, blen), 0);
    unsigned char got[4096];
    assert_int_equal(keg_obj_get(o, bkey, 0, got, sizeof(got)), (ssize_t)blen);
    assert_memory_equal(got, blk, blen);
    keg_obj_close(o);
    umount2(dir, MNT_DETACH);
    rmdir(dir);
    free(big);
}

/* With spare_fill the pool opens at the first put and, once puts keep finding
 * it empty (a stream of new objects, nothing deleted), its filler keeps it
 * stocked with empty files that the next puts take: their objects are exact,
 * and closing the store stops the filler and removes every spare.  Without
 * spare_fill (the other tests) the same puts leave no spare at all. */
static void test_spare_fill(void **state)
{
    struct ffx *fx = *state;
    struct keg_obj_conf conf = {0};
    unsigned char obj[4096], got[4096];
    struct keg_block_id bid;
    char key[128];
    size_t len;
    long spares = 0;
    int i;

    keg_obj_close(fx->o);
    conf.bucket = fx->dir;
    conf.spare_fill = 1;
    assert_int_equal(keg_obj_open("file", &conf, NULL, &fx->o), 0);

    /* the first puts find the pool empty and make their own files */
    for (i = 0; i < 100; i++) {
        len = make_block(30000 + (uint64_t)i, 'f', &bid, key, sizeof(key), obj, sizeof(obj));
        assert_int_equal(keg_obj_put(fx->o, key, obj, len), 0);
    }
    /* the filler stocks the pool (up to 256 files) within a few seconds */
    for (int t = 0; t < 500 && (spares = count_spares(fx->dir, NULL)) < 256; t++)
        usleep(10000);
    assert_int_equal(spares, 256);

    /* the next puts take those files: exactly their bytes under their keys */
    for (; i < 150; i++) {
        len = make_block(30000 + (uint64_t)i, 'g', &bid, key, sizeof(key), obj, sizeof(obj));
        assert_int_equal(keg_obj_put(fx->o, key, obj, len), 0);
        assert_int_equal(keg_obj_get(fx->o, key, 0, got, sizeof(got)), (ssize_t)len);
        assert_memory_equal(got, obj, len);
    }
    spares = count_spares(fx->dir, NULL);
    assert_true(spares >= 200 && spares <= 256);    /* 50 taken; the filler tops up below 64 */

    /* a deletion feeds the pool: for 3 s the filler makes nothing, even when puts
     * leave the pool low; then it stocks it again */
    keg_block_key(key, sizeof(key), "vol", 30149, 0, 3000);
    assert_int_equal(keg_obj_del(fx->o, key), 0);
    int64_t t0 = keg_mono_ns();
    for (i = 0; count_spares(fx->dir, NULL) > 10; i++) {
        len = make_block(31000 + (uint64_t)i, 'd', &bid, key, sizeof(key), obj, sizeof(obj));
        assert_int_equal(keg_obj_put(fx->o, key, obj, len), 0);
    }
    usleep(200000);
    if (keg_mono_ns() - t0 < 2500000000LL)         /* (a slow machine may take longer) */
        assert_true(count_spares(fx->dir, NULL) <= 10);
    usleep(3000000);
    len = make_block(31999, 'd', &bid, key, sizeof(key), obj, sizeof(obj));
    assert_int_equal(keg_obj_put(fx->o, key, obj, len), 0);     /* a claim wakes it */
    for (int t = 0; t < 500 && (spares = count_spares(fx->dir, NULL)) < 256; t++)
        usleep(10000);
    assert_int_equal(spares, 256);
    for (int k = 0; k < 149; k++) {
        uint64_t size = 0;
        keg_block_key(key, sizeof(key), "vol", 30000 + (uint64_t)k, 0, 3000);
        assert_int_equal(keg_obj_head(fx->o, key, &size), 0);
        assert_true(size > 3000);
    }

    /* closing stops the filler and removes the pool */
    keg_obj_close(fx->o);
    fx->o = NULL;
    assert_int_equal(count_spares(fx->dir, NULL), 0);

    /* the default: the same puts on another store leave no spare */
    conf.spare_fill = 0;
    assert_int_equal(keg_obj_open("file", &conf, NULL, &fx->o), 0);
    for (i = 0; i < 100; i++) {
        len = make_block(40000 + (uint64_t)i, 'h', &bid, key, sizeof(key), obj, sizeof(obj));
        assert_int_equal(keg_obj_put(fx->o, key, obj, len), 0);
    }
    usleep(100000);
    assert_int_equal(count_spares(fx->dir, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test_setup_teardown(test_bad_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layout_and_temp_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_skips_temp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_keys_chain_once, setup, teardown),
        cmocka_unit_test(test_enospc),
        cmocka_unit_test_setup_teardown(test_spare_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spare_burst, setup, teardown),
        cmocka_unit_test(test_spare_enospc),
        cmocka_unit_test_setup_teardown(test_spare_fill, setup, teardown),
    };
    keg_log_set_level(LOG_CRIT);
    return cmocka_run_group_tests_name("obj_file", tests, NULL, NULL);
}
