/* test_fs_helpers.h -- a throw-away volume (SQLite engine + file store in a
 * mkdtemp directory) for the core/fs unit tests. */
#ifndef TEST_FS_HELPERS_H
#define TEST_FS_HELPERS_H

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "keg/fs.h"
#include "keg/mem.h"
#include "keg/meta.h"

struct tvol {
    char           dir[128];
    char           objdir[160];
    char           url[192];
    struct keg_fs *fs;
};

static const struct keg_ctx tv_root = {.uid = 0, .gid = 0};

static inline void tvol_init(struct tvol *v, uint32_t bs, const char *compress)
{
    struct keg_meta *m = NULL;
    struct keg_format f;

    memset(v, 0, sizeof(*v));
    snprintf(v->dir, sizeof(v->dir), "/tmp/kegfs-fs-test-XXXXXX");
    assert_non_null(mkdtemp(v->dir));
    snprintf(v->objdir, sizeof(v->objdir), "%s/objs", v->dir);
    assert_int_equal(mkdir(v->objdir, 0755), 0);
    snprintf(v->url, sizeof(v->url), "sqlite3://%s/meta.db", v->dir);
    assert_int_equal(keg_meta_open(v->url, &m), 0);
    memset(&f, 0, sizeof(f));
    snprintf(f.name, sizeof(f.name), "testvol");
    snprintf(f.uuid, sizeof(f.uuid), "00000000-0000-0000-0000-000000000001");
    snprintf(f.storage, sizeof(f.storage), "file");
    snprintf(f.bucket, sizeof(f.bucket), "%s", v->objdir);
    snprintf(f.compress, sizeof(f.compress), "%s", compress);
    f.block_size = bs;
    assert_int_equal(keg_meta_format_init(m, &f, 0777, 0, 0, 0), 0);
    keg_meta_close(m);
}

static inline int tvol_mount_conf(struct tvol *v, int no_session, int read_only,
                                  uint64_t buffer_size)
{
    struct keg_fs_conf conf;
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v->url;
    conf.mountpoint = "/test";
    conf.no_session = no_session;
    conf.read_only = read_only;
    conf.buffer_size = buffer_size;
    conf.heartbeat_sec = 1;
    return keg_fs_new(&conf, &v->fs);
}

static inline void tvol_mount(struct tvol *v)
{
    assert_int_equal(tvol_mount_conf(v, 0, 0, 0), 0);
}

/* How many requests of one engine op (KEG_META_OP_*) the volume's engine answered. */
static inline uint64_t tvol_meta_requests(struct tvol *v, int op)
{
    return __atomic_load_n(&keg_meta_stats(keg_fs_meta(v->fs))[op].requests, __ATOMIC_RELAXED);
}

static inline void tvol_umount(struct tvol *v)
{
    keg_fs_free(v->fs);
    v->fs = NULL;
}

static inline int tvol_rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static inline void tvol_cleanup(struct tvol *v)
{
    if (v->fs)
        tvol_umount(v);
    nftw(v->dir, tvol_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static long tvol_nobj;
static char tvol_first_obj[512];

static inline int tvol_count_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    /* not temp files, nor the spare files under <objdir>/.tmp.spare (obj_file.c) */
    if (flag == FTW_F && !strstr(path, "/.tmp.")) {
        if (tvol_nobj == 0)
            snprintf(tvol_first_obj, sizeof(tvol_first_obj), "%s", path);
        tvol_nobj++;
    }
    return 0;
}

/* Number of objects in the store (the first one's path in tvol_first_obj). */
static inline long tvol_count_objects(struct tvol *v)
{
    tvol_nobj = 0;
    tvol_first_obj[0] = '\0';
    nftw(v->objdir, tvol_count_cb, 16, FTW_PHYS);
    return tvol_nobj;
}

/* Polls (every 50 ms, at most tries times) until the store holds want objects.
 * Returns 1 once it does, 0 if it never did. */
static inline int tvol_wait_objects(struct tvol *v, long want, int tries)
{
    for (int i = 0; i < tries; i++) {
        if (tvol_count_objects(v) == want)
            return 1;
        usleep(50000);
    }
    return 0;
}

/* Create parent/name and open it read-write. */
static inline struct keg_fh *tvol_create(struct tvol *v, uint64_t parent, const char *name,
                                  uint64_t *ino)
{
    struct keg_attr a;
    struct keg_fh *fh = NULL;
    assert_int_equal(keg_fs_create(v->fs, &tv_root, parent, name, 0644, O_RDWR, &a, &fh), 0);
    assert_non_null(fh);
    if (ino)
        *ino = a.ino;
    return fh;
}

static inline struct keg_fh *tvol_open(struct tvol *v, uint64_t ino, int flags)
{
    struct keg_fh *fh = NULL;
    int keep = 0;
    assert_int_equal(keg_fs_open(v->fs, &tv_root, ino, flags, &fh, &keep), 0);
    return fh;
}

#ifdef TV_RND_SEED
/* Reproducible pseudo-random data: xorshift64 seeded with TV_RND_SEED, which a
 * test that wants rnd/fill_random defines before including this header. */
static uint64_t tv_rs = TV_RND_SEED;

/* A number in [0, n), 0 when n is 0. */
static inline uint32_t rnd(uint32_t n)
{
    tv_rs ^= tv_rs << 13;
    tv_rs ^= tv_rs >> 7;
    tv_rs ^= tv_rs << 17;
    return n ? (uint32_t)(tv_rs % n) : 0;
}

static inline void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd(256);
}
#endif

#endif
