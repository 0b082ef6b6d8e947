/* test_meta_contract.c -- the metadata engine contract suite (keg/meta.h).
 *
 * Every engine must pass this file.  Each test gets a fresh, empty volume
 * from the printf format in env KEG_TEST_META_URL_FMT (one %s, replaced by a
 * unique lowercase token), e.g.
 *     KEG_TEST_META_URL_FMT='redis://127.0.0.1:6390/0?ns=%s' ./test_meta_contract
 * Default: sqlite3://<fresh temporary directory>/%s.db.
 * A test opens, format_init's, exercises and destroys its volume.  Semantics
 * that meta.h leaves open are pinned down here as documented in
 * docs/internals/META.md ("Decisions").
 */
#define _GNU_SOURCE 1   /* nftw */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "keg/log.h"
#include "keg/mem.h"
#include "keg/meta.h"

#define CHUNK KEG_CHUNK_SIZE

static char g_fmt[1024];
static char g_tmpdir[256];
static int g_seq;

struct t {
    struct keg_meta *m;
    struct keg_meta *m2;        /* second instance on the same volume, when opened */
    char url[1200];
};

static void make_url(char *buf, size_t len)
{
    char token[64];
    snprintf(token, sizeof(token), "kt%dx%d", (int)getpid(), ++g_seq);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(buf, len, g_fmt, token);
#pragma GCC diagnostic pop
}

static void fill_format(struct keg_format *f, uint64_t capacity, uint64_t inodes)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "contract-vol");
    snprintf(f->uuid, sizeof(f->uuid), "8a1e9a9c-2b55-4a4f-9f7e-2f0b1c2d3e4f");
    snprintf(f->storage, sizeof(f->storage), "file");
    snprintf(f->bucket, sizeof(f->bucket), "/var/lib/kegfs/objects dir%%=x");
    snprintf(f->access_key, sizeof(f->access_key), "AKIA\ttest\nkey");
    snprintf(f->secret_key, sizeof(f->secret_key), "s3cr3t=+/%%\xc3\xa9\x01");
    snprintf(f->session_token, sizeof(f->session_token), "tok en");
    snprintf(f->region, sizeof(f->region), "us-east-1");
    snprintf(f->compress, sizeof(f->compress), "lz4");
    f->block_size = 4u << 20;
    f->capacity = capacity;
    f->inodes = inodes;
    f->trash_days = 1;
    f->meta_version = 1;
    f->created = 1700000000;
}

static int setup_q(void **state, uint64_t capacity, uint64_t inodes)
{
    struct t *t = calloc(1, sizeof(*t));
    struct keg_format f;
    if (!t)
        return -1;
    make_url(t->url, sizeof(t->url));
    if (keg_meta_open(t->url, &t->m) != 0) {
        fprintf(stderr, "cannot open engine for %s\n", t->url);
        free(t);
        return -1;
    }
    fill_format(&f, capacity, inodes);
    if (keg_meta_format_init(t->m, &f, 0755, 0, 0, 0) != 0) {
        keg_meta_close(t->m);
        free(t);
        return -1;
    }
    *state = t;
    return 0;
}

static int setup(void **state)
{
    return setup_q(state, 0, 0);
}

static int setup_quota(void **state)
{
    return setup_q(state, 8192, 3);
}

static int teardown(void **state)
{
    struct t *t = *state;
    if (t->m2) {
        keg_meta_session_end(t->m2);
        keg_meta_close(t->m2);
    }
    keg_meta_session_end(t->m);
    assert_int_equal(keg_meta_destroy(t->m), 0);
    keg_meta_close(t->m);
    free(t);
    return 0;
}

static struct keg_meta *second(struct t *t)
{
    if (!t->m2)
        assert_int_equal(keg_meta_open(t->url, &t->m2), 0);
    return t->m2;
}

/*----------------------------------------------------------------------------
 * Helpers
 *--------------------------------------------------------------------------*/

static uint64_t new_ino(struct keg_meta *m)
{
    uint64_t ino = 0;
    assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_INODE, 1, &ino), 0);
    return ino;
}

static uint64_t new_slice(struct keg_meta *m)
{
    uint64_t id = 0;
    assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_SLICE, 1, &id), 0);
    return id;
}

static uint64_t mk(struct keg_meta *m, uint64_t parent, const char *name, uint32_t mode)
{
    struct keg_attr a;
    uint64_t ino = new_ino(m);
    assert_int_equal(keg_meta_mknod(m, parent, name, ino, mode, 1000, 1000, 0, NULL, &a), 0);
    assert_int_equal(a.ino, ino);
    return ino;
}

static uint64_t mkfile(struct keg_meta *m, uint64_t parent, const char *name)
{
    return mk(m, parent, name, S_IFREG | 0644);
}

static uint64_t mkdir_(struct keg_meta *m, uint64_t parent, const char *name)
{
    return mk(m, parent, name, S_IFDIR | 0755);
}

static struct keg_attr attr(struct keg_meta *m, uint64_t ino)
{
    struct keg_attr a;
    memset(&a, 0, sizeof(a));
    assert_int_equal(keg_meta_getattr(m, ino, &a), 0);
    return a;
}

static uint64_t lookup_ino(struct keg_meta *m, uint64_t parent, const char *name)
{
    struct keg_attr a;
    int rc = keg_meta_lookup(m, parent, name, &a);
    if (rc == -ENOENT)
        return 0;
    assert_int_equal(rc, 0);
    return a.ino;
}

static int64_t ns_of(int64_t s, uint32_t ns)
{
    return s * 1000000000LL + ns;
}

/* Writes one fresh slice of len bytes at file offset off. */
static uint64_t write_at(struct keg_meta *m, uint64_t ino, uint64_t off, uint32_t len)
{
    struct keg_chunk_slice cs = {
        .indx = (uint32_t)(off / CHUNK),
        .s = {.id = new_slice(m), .size = len, .off = 0, .len = len, .pos = (uint32_t)(off % CHUNK)},
    };
    struct keg_attr a;
    assert_int_equal(keg_meta_write_slices(m, ino, 1, &cs, off + len, 0, NULL, &a), 0);
    return cs.s.id;
}

/* Drains the deletion queue; returns how many entries it held, and whether id was one. */
static int delq_drain(struct keg_meta *m, uint64_t id, int *seen)
{
    struct keg_del_slice d[64];
    int total = 0;
    if (seen)
        *seen = 0;
    for (;;) {
        int n = keg_meta_delq_peek(m, d, 64);
        assert_true(n >= 0);
        if (n == 0)
            break;
        for (int i = 0; i < n; i++)
            if (seen && d[i].id == id)
                *seen = 1;
        assert_int_equal(keg_meta_delq_ack(m, d, (uint32_t)n), 0);
        total += n;
    }
    return total;
}

struct names {
    char names[64][300];
    struct keg_attr attrs[64];
    int no_xattr[64];
    int plus_seen;
    int n;
    int stop_after;             /* cb returns 1 on this call index (0: never) */
};

static int names_cb(void *arg, const struct keg_dirent *de)
{
    struct names *nm = arg;
    if (nm->stop_after && nm->n >= nm->stop_after)
        return 1;
    if (nm->n >= 64)
        return 1;
    snprintf(nm->names[nm->n], sizeof(nm->names[0]), "%s", de->name);
    nm->no_xattr[nm->n] = de->no_xattr;
    if (de->attr) {
        nm->attrs[nm->n] = *de->attr;
        nm->no_xattr[nm->n] = de->no_xattr;
        nm->plus_seen++;
        assert_int_equal(de->attr->ino, de->ino);
        assert_int_equal(de->attr->mode & S_IFMT, de->type);
    }
    nm->n++;
    return 0;
}

static int count_entries(struct keg_meta *m, uint64_t dir)
{
    struct names nm;
    int total = 0;
    char after[300] = "";
    for (;;) {
        memset(&nm, 0, sizeof(nm));
        int n = keg_meta_readdir(m, dir, total ? after : NULL, 50, 0, names_cb, &nm);
        assert_true(n >= 0);
        if (n == 0)
            break;
        total += n;
        snprintf(after, sizeof(after), "%s", nm.names[n - 1]);
    }
    return total;
}

/*----------------------------------------------------------------------------
 * Volume
 *--------------------------------------------------------------------------*/

static void test_format_roundtrip(void **state)
{
    struct t *t = *state;
    struct keg_format want, got;
    fill_format(&want, 0, 0);
    memset(&got, 0x5a, sizeof(got));
    assert_int_equal(keg_meta_format_load(t->m, &got), 0);
    assert_string_equal(got.name, want.name);
    assert_string_equal(got.uuid, want.uuid);
    assert_string_equal(got.storage, want.storage);
    assert_string_equal(got.bucket, want.bucket);
    assert_string_equal(got.access_key, want.access_key);
    assert_string_equal(got.secret_key, want.secret_key);
    assert_string_equal(got.session_token, want.session_token);
    assert_string_equal(got.region, want.region);
    assert_string_equal(got.compress, want.compress);
    assert_int_equal(got.block_size, want.block_size);
    assert_int_equal(got.capacity, want.capacity);
    assert_int_equal(got.inodes, want.inodes);
    assert_int_equal(got.trash_days, want.trash_days);
    assert_int_equal(got.meta_version, want.meta_version);
    assert_int_equal(got.created, want.created);

    /* formatted already: -EEXIST unless forced; force replaces settings only */
    uint64_t f1 = mkfile(t->m, KEG_ROOT_INO, "keep");
    assert_int_equal(keg_meta_format_init(t->m, &want, 0700, 5, 5, 0), -EEXIST);
    want.capacity = 1ULL << 40;
    snprintf(want.secret_key, sizeof(want.secret_key), "rotated");
    assert_int_equal(keg_meta_format_init(t->m, &want, 0700, 5, 5, 1), 0);
    assert_int_equal(keg_meta_format_load(t->m, &got), 0);
    assert_int_equal(got.capacity, 1ULL << 40);
    assert_string_equal(got.secret_key, "rotated");
    assert_int_equal(lookup_ino(t->m, KEG_ROOT_INO, "keep"), f1);
    struct keg_attr r = attr(t->m, KEG_ROOT_INO);
    assert_int_equal(r.mode, S_IFDIR | 0755);     /* root untouched by force */
    assert_int_equal(r.uid, 0);

    /* sync is optional; what was committed survives closing and reopening */
    int rc = keg_meta_sync(t->m);
    assert_true(rc == 0 || rc == -ENOSYS);
    keg_meta_close(t->m);
    t->m = NULL;
    assert_int_equal(keg_meta_open(t->url, &t->m), 0);
    assert_int_equal(lookup_ino(t->m, KEG_ROOT_INO, "keep"), f1);
    assert_int_equal(keg_meta_format_load(t->m, &got), 0);
    assert_string_equal(got.secret_key, "rotated");
    assert_int_equal(new_ino(t->m), f1 + 1);
}

static void test_format_missing(void **state)
{
    struct keg_meta *m;
    struct keg_format f;
    char url[1200];
    (void)state;
    make_url(url, sizeof(url));
    assert_int_equal(keg_meta_open(url, &m), 0);
    assert_int_equal(keg_meta_format_load(m, &f), -ENOENT);
    assert_int_equal(keg_meta_destroy(m), 0);          /* idempotent */
    if (strncmp(url, "sqlite3://", 10) == 0) {
        struct stat sb;
        assert_int_equal(stat(url + 10, &sb), -1);          /* nothing created */
    }
    fill_format(&f, 0, 0);
    assert_int_equal(keg_meta_format_init(m, &f, 0777, 0, 0, 0), 0);
    assert_int_equal(keg_meta_format_load(m, &f), 0);
    assert_int_equal(keg_meta_destroy(m), 0);
    assert_int_equal(keg_meta_format_load(m, &f), -ENOENT);
    assert_int_equal(keg_meta_destroy(m), 0);
    /* a destroyed volume can be formatted again, from scratch */
    assert_int_equal(keg_meta_format_init(m, &f, 0777, 0, 0, 0), 0);
    assert_int_equal(new_ino(m), 2);
    assert_int_equal(keg_meta_destroy(m), 0);
    keg_meta_close(m);
}

static char g_logbuf[4096];

static void capture_sink(void *arg, int level, const char *tag, const char *fmt, va_list ap)
{
    size_t o = strlen(g_logbuf);
    (void)arg;
    (void)level;
    (void)tag;
    if (o + 2 < sizeof(g_logbuf)) {
        vsnprintf(g_logbuf + o, sizeof(g_logbuf) - o - 1, fmt, ap);
        strcat(g_logbuf, "\n");
    }
}

static void test_open_errors(void **state)
{
    struct keg_meta *m = (struct keg_meta *)0x1;
    int level = keg_log_level;
    (void)state;
    g_logbuf[0] = '\0';
    keg_log_set_level(LOG_DEBUG);
    keg_log_set_sink(capture_sink, NULL);
    assert_int_equal(keg_meta_open("nosuch://x/y", &m), -EINVAL);
    assert_int_equal(keg_meta_open("sqlite3://user:topsecret@host/x.db", &m), -EINVAL);
    keg_log_set_sink(NULL, NULL);
    keg_log_set_level(level);
    assert_non_null(strstr(g_logbuf, "unknown metadata engine 'nosuch' in META_URL "
                                     "(supported: sqlite3"));
    assert_null(strstr(g_logbuf, "topsecret"));
    assert_null(m);
    assert_int_equal(keg_meta_open("no-scheme-here", &m), -EINVAL);
    assert_int_equal(keg_meta_open("", &m), -EINVAL);
    assert_non_null(keg_meta_find("sqlite3"));
    assert_null(keg_meta_find("nosuch"));
    /* sqlite3: the path must be absolute and name a file in an existing directory */
    assert_int_equal(keg_meta_open("sqlite3://relative/meta.db", &m), -EINVAL);
    assert_int_equal(keg_meta_open("sqlite3://", &m), -EINVAL);
    assert_int_equal(keg_meta_open("sqlite3:///", &m), -EINVAL);
    assert_int_equal(keg_meta_open("sqlite3:///tmp/", &m), -EINVAL);
    assert_int_equal(keg_meta_open("sqlite3:///nonexistent-keg-dir/meta.db", &m), -EIO);
    assert_null(m);
}

static void test_alloc_ids(void **state)
{
    struct t *t = *state;
    uint64_t a, b;
    assert_int_equal(keg_meta_alloc_ids(t->m, KEG_ID_INODE, 10, &a), 0);
    assert_int_equal(a, 2);
    assert_int_equal(keg_meta_alloc_ids(t->m, KEG_ID_INODE, 1, &b), 0);
    assert_int_equal(b, 12);
    assert_int_equal(keg_meta_alloc_ids(t->m, KEG_ID_SLICE, 5, &a), 0);
    assert_int_equal(a, 1);
    assert_int_equal(keg_meta_alloc_ids(t->m, KEG_ID_SLICE, 1, &a), 0);
    assert_int_equal(a, 6);
    assert_int_equal(keg_meta_alloc_ids(t->m, 7, 1, &a), -EINVAL);
    assert_int_equal(keg_meta_alloc_ids(t->m, KEG_ID_SLICE, 0, &a), -EINVAL);
    /* a second instance sees the same counters */
    assert_int_equal(keg_meta_alloc_ids(second(t), KEG_ID_SLICE, 1, &a), 0);
    assert_int_equal(a, 7);
}

/*----------------------------------------------------------------------------
 * Namespace
 *--------------------------------------------------------------------------*/

static void test_root_lookup_getattr(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    a = attr(t->m, KEG_ROOT_INO);
    assert_int_equal(a.ino, KEG_ROOT_INO);
    assert_int_equal(a.mode, S_IFDIR | 0755);
    assert_int_equal(a.nlink, 2);
    assert_int_equal(a.parent, KEG_ROOT_INO);
    assert_int_equal(a.uid, 0);
    assert_int_equal(a.size, 4096);
    assert_int_equal(keg_meta_getattr(t->m, 999, &a), -ENOENT);
    assert_int_equal(keg_meta_lookup(t->m, KEG_ROOT_INO, "nope", &a), -ENOENT);
    assert_int_equal(keg_meta_lookup(t->m, 999, "nope", &a), -ENOENT);
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    assert_int_equal(keg_meta_lookup(t->m, f, "x", &a), -ENOTDIR);
    assert_int_equal(keg_meta_lookup(t->m, KEG_ROOT_INO, "f", &a), 0);
    assert_int_equal(a.ino, f);
    assert_int_equal(a.mode, S_IFREG | 0644);
    assert_int_equal(a.uid, 1000);
    assert_int_equal(a.nlink, 1);
    assert_int_equal(a.parent, 0);
    assert_int_equal(a.size, 0);
}

static void test_mknod_types(void **state)
{
    struct t *t = *state;
    struct keg_attr a, p0, p1;
    char buf[64];
    p0 = attr(t->m, KEG_ROOT_INO);
    int64_t t0 = keg_now_ns();

    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "d");
    a = attr(t->m, d);
    assert_int_equal(a.mode, S_IFDIR | 0755);
    assert_int_equal(a.nlink, 2);
    assert_int_equal(a.parent, KEG_ROOT_INO);
    assert_int_equal(a.size, 4096);
    assert_true(ns_of(a.ctime, a.ctimensec) >= t0);
    p1 = attr(t->m, KEG_ROOT_INO);
    assert_int_equal(p1.nlink, p0.nlink + 1);
    assert_true(ns_of(p1.mtime, p1.mtimensec) >= t0);
    assert_true(ns_of(p1.ctime, p1.ctimensec) >= t0);

    uint64_t ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, d, "ln", ino, S_IFLNK | 0777, 7, 8, 0,
                                    "../target/path", &a), 0);
    assert_int_equal(a.size, strlen("../target/path"));
    assert_int_equal(a.mode, S_IFLNK | 0777);
    assert_int_equal(a.uid, 7);
    assert_int_equal(a.gid, 8);
    assert_int_equal(keg_meta_readlink(t->m, ino, buf, sizeof(buf)), 14);
    assert_memory_equal(buf, "../target/path", 14);
    assert_int_equal(keg_meta_readlink(t->m, ino, buf, 0), 14);
    assert_int_equal(keg_meta_readlink(t->m, ino, buf, 4), -ERANGE);

    ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, d, "chr", ino, S_IFCHR | 0600, 0, 0,
                                    (uint64_t)makedev(1, 3), NULL, &a), 0);
    assert_int_equal(attr(t->m, ino).rdev, makedev(1, 3));
    assert_int_equal(attr(t->m, ino).mode, S_IFCHR | 0600);
    assert_int_equal(keg_meta_readlink(t->m, ino, buf, sizeof(buf)), -EINVAL);
    uint64_t fifo = mk(t->m, d, "fifo", S_IFIFO | 0644);
    uint64_t sock = mk(t->m, d, "sock", S_IFSOCK | 0644);
    uint64_t blk = mk(t->m, d, "blk", S_IFBLK | 0644);
    assert_int_equal(attr(t->m, fifo).mode & S_IFMT, S_IFIFO);
    assert_int_equal(attr(t->m, sock).mode & S_IFMT, S_IFSOCK);
    assert_int_equal(attr(t->m, blk).mode & S_IFMT, S_IFBLK);
    assert_int_equal(attr(t->m, d).nlink, 2);       /* non-dirs do not raise nlink */

    /* errors */
    uint64_t f = mkfile(t->m, d, "file");
    ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, d, "file", ino, S_IFREG | 0644, 0, 0, 0, NULL, &a),
                     -EEXIST);
    assert_int_equal(keg_meta_mknod(t->m, d, "chr", ino, S_IFDIR | 0755, 0, 0, 0, NULL, &a),
                     -EEXIST);
    assert_int_equal(keg_meta_mknod(t->m, f, "x", ino, S_IFREG | 0644, 0, 0, 0, NULL, &a),
                     -ENOTDIR);
    assert_int_equal(keg_meta_mknod(t->m, 12345, "x", ino, S_IFREG | 0644, 0, 0, 0, NULL,
                                    &a), -ENOENT);
    /* the failed creates left nothing behind */
    assert_int_equal(keg_meta_getattr(t->m, ino, &a), -ENOENT);
    assert_int_equal(keg_meta_mknod(t->m, d, "x", ino, S_IFREG | 0644, 0, 0, 0, NULL, &a),
                     0);
}

static void test_setgid_inherit(void **state)
{
    struct t *t = *state;
    struct keg_attr a, in;
    uint64_t g = mkdir_(t->m, KEG_ROOT_INO, "g");
    memset(&in, 0, sizeof(in));
    in.mode = 02775;
    in.gid = 50;
    assert_int_equal(keg_meta_setattr(t->m, g, KEG_SET_MODE | KEG_SET_GID, &in, &a), 0);
    assert_int_equal(a.mode, S_IFDIR | 02775);
    assert_int_equal(a.gid, 50);

    uint64_t ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, g, "f", ino, S_IFREG | 0644, 10, 10, 0, NULL, &a),
                     0);
    assert_int_equal(a.gid, 50);
    assert_int_equal(a.mode, S_IFREG | 0644);    /* files do not get S_ISGID */
    ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, g, "sub", ino, S_IFDIR | 0755, 10, 10, 0, NULL,
                                    &a), 0);
    assert_int_equal(a.gid, 50);
    assert_int_equal(a.mode, S_IFDIR | 02755);
    assert_int_equal(attr(t->m, ino).mode, S_IFDIR | 02755);
    /* without S_ISGID the caller's gid is kept */
    ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, KEG_ROOT_INO, "plain", ino, S_IFDIR | 0755, 10, 10,
                                    0, NULL, &a), 0);
    assert_int_equal(a.gid, 10);
    assert_int_equal(a.mode, S_IFDIR | 0755);
}

static void test_setattr(void **state)
{
    struct t *t = *state;
    struct keg_attr a, in;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    struct keg_attr before = attr(t->m, f);
    memset(&in, 0, sizeof(in));
    in.mode = S_IFDIR | 04711;      /* type bits in `in` are ignored */
    in.uid = 5;
    in.gid = 6;
    in.atime = 1000;
    in.atimensec = 7;
    in.mtime = 2000;
    in.mtimensec = 8;
    in.size = 12345;                /* setattr never changes size */
    int64_t t0 = keg_now_ns();
    assert_int_equal(keg_meta_setattr(t->m, f, KEG_SET_MODE | KEG_SET_UID | KEG_SET_GID |
                                      KEG_SET_ATIME | KEG_SET_MTIME, &in, &a), 0);
    assert_int_equal(a.mode, S_IFREG | 04711);
    assert_int_equal(a.uid, 5);
    assert_int_equal(a.gid, 6);
    assert_int_equal(a.atime, 1000);
    assert_int_equal(a.atimensec, 7);
    assert_int_equal(a.mtime, 2000);
    assert_int_equal(a.mtimensec, 8);
    assert_int_equal(a.size, 0);
    assert_true(ns_of(a.ctime, a.ctimensec) >= t0);
    a = attr(t->m, f);
    assert_int_equal(a.mode, S_IFREG | 04711);
    assert_int_equal(a.mtime, 2000);
    assert_int_equal(a.nlink, before.nlink);

    assert_int_equal(keg_meta_setattr(t->m, f, KEG_SET_ATIME_NOW | KEG_SET_MTIME_NOW, &in,
                                      &a), 0);
    assert_true(ns_of(a.atime, a.atimensec) >= t0);
    assert_true(ns_of(a.mtime, a.mtimensec) >= t0);
    in.ctime = 42;
    in.ctimensec = 1;
    assert_int_equal(keg_meta_setattr(t->m, f, KEG_SET_CTIME, &in, &a), 0);
    assert_int_equal(a.ctime, 42);
    assert_int_equal(a.ctimensec, 1);
    /* no fields: attributes unchanged */
    assert_int_equal(keg_meta_setattr(t->m, f, 0, &in, &a), 0);
    assert_int_equal(a.ctime, 42);
    assert_int_equal(keg_meta_setattr(t->m, 999, KEG_SET_UID, &in, &a), -ENOENT);
}

static void test_link(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "d");
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    int64_t t0 = keg_now_ns();
    assert_int_equal(keg_meta_link(t->m, f, d, "f2", &a), 0);
    assert_int_equal(a.ino, f);
    assert_int_equal(a.nlink, 2);
    assert_true(ns_of(a.ctime, a.ctimensec) >= t0);
    struct keg_attr da = attr(t->m, d);
    assert_true(ns_of(da.mtime, da.mtimensec) >= t0);
    assert_int_equal(da.nlink, 2);
    assert_int_equal(lookup_ino(t->m, d, "f2"), f);
    assert_int_equal(keg_meta_link(t->m, f, d, "f2", &a), -EEXIST);
    assert_int_equal(keg_meta_link(t->m, d, KEG_ROOT_INO, "d2", &a), -EPERM);
    assert_int_equal(keg_meta_link(t->m, 999, KEG_ROOT_INO, "x", &a), -ENOENT);
    assert_int_equal(keg_meta_link(t->m, f, f, "x", &a), -ENOTDIR);
    assert_int_equal(keg_meta_link(t->m, f, 999, "x", &a), -ENOENT);
    assert_int_equal(attr(t->m, f).nlink, 2);
    /* unlinking one name keeps the inode */
    struct keg_unlinked g;
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f", &g), 0);
    assert_int_equal(g.ino, 0);
    assert_int_equal(attr(t->m, f).nlink, 1);
    assert_int_equal(lookup_ino(t->m, d, "f2"), f);
}

static void test_link_max(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    char name[32];
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "links");
    uint64_t f = mkfile(t->m, d, "l0");
    for (uint32_t i = 1; i < 65000; i++) {
        snprintf(name, sizeof(name), "l%u", i);
        int rc = keg_meta_link(t->m, f, d, name, &a);
        if (rc != 0)
            fail_msg("link #%u: %d", i, rc);
    }
    assert_int_equal(attr(t->m, f).nlink, 65000);
    assert_int_equal(keg_meta_link(t->m, f, d, "one-too-many", &a), -EMLINK);
    assert_int_equal(keg_meta_lookup(t->m, d, "one-too-many", &a), -ENOENT);
}

static void test_unlink_pending_purge(void **state)
{
    struct t *t = *state;
    struct keg_unlinked g;
    struct keg_attr a;
    uint64_t sid = 0, used_b, used_i, used_i0;
    int seen;
    assert_int_equal(keg_meta_session_begin(t->m, "host=test pid=1", &sid), 0);
    assert_true(sid > 0);
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    uint64_t s1 = write_at(t->m, f, 0, 5000);
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i0), 0);
    assert_int_equal(used_b, 8192);
    int64_t t0 = keg_now_ns();
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f", &g), 0);
    assert_int_equal(g.ino, f);
    assert_int_equal(g.mode, S_IFREG | 0644);
    assert_int_equal(g.size, 5000);
    assert_int_equal(lookup_ino(t->m, KEG_ROOT_INO, "f"), 0);
    /* pending: still readable by handle, still charged */
    a = attr(t->m, f);
    assert_int_equal(a.nlink, 0);
    assert_true(ns_of(a.ctime, a.ctimensec) >= t0);
    struct keg_attr r = attr(t->m, KEG_ROOT_INO);
    assert_true(ns_of(r.mtime, r.mtimensec) >= t0);
    struct keg_slice *sl = NULL;
    size_t n = 0;
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, 1);
    keg_free(sl);
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i), 0);
    assert_int_equal(used_i, used_i0);
    assert_int_equal(used_b, 8192);
    assert_int_equal(delq_drain(t->m, s1, &seen), 0);
    /* a pending inode cannot get a new name */
    assert_int_equal(keg_meta_link(t->m, f, KEG_ROOT_INO, "again", &a), -ENOENT);

    assert_int_equal(keg_meta_purge(t->m, f), 0);
    assert_int_equal(keg_meta_getattr(t->m, f, &a), -ENOENT);
    assert_int_equal(keg_meta_purge(t->m, f), 0);     /* idempotent */
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i), 0);
    assert_int_equal(used_i, used_i0 - 1);
    assert_int_equal(used_b, 0);
    assert_int_equal(delq_drain(t->m, s1, &seen), 1);
    assert_true(seen);
    /* purge of a linked inode does nothing */
    uint64_t f2 = mkfile(t->m, KEG_ROOT_INO, "f2");
    assert_int_equal(keg_meta_purge(t->m, f2), 0);
    assert_int_equal(attr(t->m, f2).nlink, 1);
    /* session_end purges what is still pending */
    uint64_t s2 = write_at(t->m, f2, 0, 10);
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f2", &g), 0);
    assert_int_equal(g.ino, f2);
    assert_int_equal(keg_meta_session_end(t->m), 0);
    assert_int_equal(keg_meta_getattr(t->m, f2, &a), -ENOENT);
    assert_int_equal(delq_drain(t->m, s2, &seen), 1);
    assert_true(seen);
}

static void test_unlink_no_session(void **state)
{
    struct t *t = *state;
    struct keg_unlinked g;
    struct keg_attr a;
    int seen;
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "d");
    uint64_t f = mkfile(t->m, d, "f");
    uint64_t s1 = write_at(t->m, f, 0, 100);
    uint64_t s2 = write_at(t->m, f, CHUNK + 5, 100);
    assert_int_equal(keg_meta_unlink(t->m, d, "f", &g), 0);
    assert_int_equal(g.ino, f);                  /* reported, and already purged */
    assert_int_equal(keg_meta_getattr(t->m, f, &a), -ENOENT);
    assert_int_equal(delq_drain(t->m, s1, &seen), 2);
    assert_int_equal(keg_meta_purge(t->m, f), 0);
    (void)s2;
    /* errors */
    assert_int_equal(keg_meta_unlink(t->m, d, "f", &g), -ENOENT);
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "d", &g), -EISDIR);
    assert_int_equal(keg_meta_unlink(t->m, 999, "x", &g), -ENOENT);
    uint64_t f2 = mkfile(t->m, d, "f2");
    assert_int_equal(keg_meta_unlink(t->m, f2, "x", &g), -ENOTDIR);
    /* symlinks and other non-regular inodes are purged at once even with a session */
    uint64_t sid;
    assert_int_equal(keg_meta_session_begin(t->m, "x", &sid), 0);
    uint64_t ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, d, "ln", ino, S_IFLNK | 0777, 0, 0, 0, "t", &a), 0);
    assert_int_equal(keg_meta_unlink(t->m, d, "ln", &g), 0);
    assert_int_equal(g.ino, ino);
    assert_int_equal(keg_meta_getattr(t->m, ino, &a), -ENOENT);
}

/* The owner's open-inode hook of test_unlink_inline_purge. */
struct open_set {
    uint64_t inos[4];
    uint32_t n;
};

static uint32_t open_set_cb(void *arg, uint64_t *inos, uint32_t max)
{
    struct open_set *o = arg;
    for (uint32_t i = 0; i < o->n && i < max && i < 4; i++)
        inos[i] = o->inos[i];
    return o->n;
}

/* With the open-inode hook, unlink and rename purge what is not open inside
 * the op and count the slices they queued; what is open stays pending. */
static void test_unlink_inline_purge(void **state)
{
    struct t *t = *state;
    struct keg_unlinked g;
    struct keg_attr a;
    struct open_set os = {.n = 0};
    uint64_t sid;
    int seen;
    assert_int_equal(keg_meta_session_begin(t->m, "x", &sid), 0);
    t->m->open_inodes = open_set_cb;
    t->m->open_inodes_arg = &os;
    uint64_t f1 = mkfile(t->m, KEG_ROOT_INO, "f1");
    uint64_t s1 = write_at(t->m, f1, 0, 100);
    write_at(t->m, f1, CHUNK, 100);
    uint64_t f2 = mkfile(t->m, KEG_ROOT_INO, "f2");
    write_at(t->m, f2, 0, 100);
    uint64_t f3 = mkfile(t->m, KEG_ROOT_INO, "f3");
    os.inos[0] = f2;
    os.n = 1;
    /* not open: purged inside unlink */
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f1", &g), 0);
    assert_int_equal(g.ino, f1);
    assert_int_equal(g.purged, 1);
    assert_int_equal(g.queued, 2);
    assert_int_equal(keg_meta_getattr(t->m, f1, &a), -ENOENT);
    assert_int_equal(delq_drain(t->m, s1, &seen), 2);
    assert_true(seen);
    /* open: pending, nothing queued */
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f2", &g), 0);
    assert_int_equal(g.ino, f2);
    assert_int_equal(g.purged, 0);
    assert_int_equal(g.queued, 0);
    assert_int_equal(keg_meta_getattr(t->m, f2, &a), 0);
    assert_int_equal(a.nlink, 0);
    assert_int_equal(keg_meta_purge(t->m, f2), 0);
    assert_int_equal(delq_drain(t->m, 0, NULL), 1);
    /* an empty file: purged, nothing queued */
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f3", &g), 0);
    assert_int_equal(g.ino, f3);
    assert_int_equal(g.purged, 1);
    assert_int_equal(g.queued, 0);
    /* rename over a file that is not open: purged inside rename */
    uint64_t f4 = mkfile(t->m, KEG_ROOT_INO, "f4");
    write_at(t->m, f4, 0, 10);
    mkfile(t->m, KEG_ROOT_INO, "f5");
    assert_int_equal(keg_meta_rename(t->m, KEG_ROOT_INO, "f5", KEG_ROOT_INO, "f4", 0, &a,
                                     &g), 0);
    assert_int_equal(g.ino, f4);
    assert_int_equal(g.purged, 1);
    assert_int_equal(g.queued, 1);
    assert_int_equal(keg_meta_getattr(t->m, f4, &a), -ENOENT);
    /* too many open inodes to list: pending, as without the hook */
    uint64_t f6 = mkfile(t->m, KEG_ROOT_INO, "f6");
    os.n = KEG_META_OPEN_MAX + 1;
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f6", &g), 0);
    assert_int_equal(g.ino, f6);
    assert_int_equal(g.purged, 0);
    assert_int_equal(keg_meta_getattr(t->m, f6, &a), 0);
    t->m->open_inodes = NULL;
}

/* The parents recorded by the last namespace op equal a getattr right after. */
static void check_parents(struct keg_meta *m, int n, uint64_t p1, uint64_t p2)
{
    struct keg_attr got[2];
    uint64_t want[2] = {p1, p2};
    assert_int_equal(keg_meta_parents(got, 2), n);
    for (int i = 0; i < n; i++) {
        struct keg_attr a = attr(m, want[i]);
        assert_int_equal(got[i].ino, want[i]);
        assert_int_equal(got[i].mode, a.mode);
        assert_int_equal(got[i].uid, a.uid);
        assert_int_equal(got[i].gid, a.gid);
        assert_int_equal(got[i].nlink, a.nlink);
        assert_int_equal(got[i].size, a.size);
        assert_int_equal(got[i].parent, a.parent);
        assert_int_equal(got[i].atime, a.atime);
        assert_int_equal(got[i].atimensec, a.atimensec);
        assert_int_equal(ns_of(got[i].mtime, got[i].mtimensec), ns_of(a.mtime, a.mtimensec));
        assert_int_equal(ns_of(got[i].ctime, got[i].ctimensec), ns_of(a.ctime, a.ctimensec));
    }
}

/* mknod/link/unlink/rmdir/rename report the parents' new attributes
 * (keg_meta_parents), identical to what getattr returns afterwards. */
static void test_parent_attrs(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    struct keg_unlinked g;
    uint64_t d1 = mkdir_(t->m, KEG_ROOT_INO, "d1");
    check_parents(t->m, 1, KEG_ROOT_INO, 0);
    uint64_t d2 = mkdir_(t->m, KEG_ROOT_INO, "d2");
    uint64_t f = mkfile(t->m, d1, "f");
    check_parents(t->m, 1, d1, 0);
    assert_int_equal(keg_meta_link(t->m, f, d2, "hard", &a), 0);
    check_parents(t->m, 1, d2, 0);
    assert_int_equal(keg_meta_unlink(t->m, d2, "hard", &g), 0);
    check_parents(t->m, 1, d2, 0);
    /* rename in one directory, across directories, of a directory, exchange, replace */
    assert_int_equal(keg_meta_rename(t->m, d1, "f", d1, "f2", 0, &a, &g), 0);
    check_parents(t->m, 1, d1, 0);
    assert_int_equal(keg_meta_rename(t->m, d1, "f2", d2, "f", 0, &a, &g), 0);
    check_parents(t->m, 2, d1, d2);
    mkdir_(t->m, d1, "sub");
    assert_int_equal(keg_meta_rename(t->m, d1, "sub", d2, "sub", 0, &a, &g), 0);
    check_parents(t->m, 2, d1, d2);
    assert_int_equal(attr(t->m, d2).nlink, 3);
    mkfile(t->m, d1, "x");
    assert_int_equal(keg_meta_rename(t->m, d1, "x", d2, "sub", KEG_RENAME_EXCHANGE, &a,
                                     &g), 0);
    check_parents(t->m, 2, d1, d2);
    mkfile(t->m, d1, "y");
    assert_int_equal(keg_meta_rename(t->m, d1, "y", d2, "f", 0, &a, &g), 0);
    check_parents(t->m, 2, d1, d2);
    assert_int_equal(keg_meta_rmdir(t->m, d1, "x"), 0);
    check_parents(t->m, 1, d1, 0);
    assert_int_equal(attr(t->m, d1).nlink, 2);
    /* symlink */
    uint64_t ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, d2, "ln", ino, S_IFLNK | 0777, 0, 0, 0, "t", &a),
                     0);
    check_parents(t->m, 1, d2, 0);
    /* a failed op and a same-inode rename record nothing */
    assert_int_equal(keg_meta_rmdir(t->m, d2, "nope"), -ENOENT);
    check_parents(t->m, 0, 0, 0);
    assert_int_equal(keg_meta_link(t->m, ino, d2, "ln2", &a), 0);
    assert_int_equal(keg_meta_rename(t->m, d2, "ln", d2, "ln2", 0, &a, &g), 0);
    check_parents(t->m, 0, 0, 0);
    assert_int_equal(keg_meta_mknod(t->m, d2, "ln", new_ino(t->m), S_IFREG | 0644, 0, 0, 0,
                                    NULL, &a), -EEXIST);
    check_parents(t->m, 0, 0, 0);
}

static void test_rmdir(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    uint64_t used_b, used_i0, used_i;
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "d");
    uint64_t sub = mkdir_(t->m, d, "sub");
    mkfile(t->m, d, "f");
    assert_int_equal(attr(t->m, d).nlink, 3);
    assert_int_equal(attr(t->m, KEG_ROOT_INO).nlink, 3);
    assert_int_equal(keg_meta_rmdir(t->m, KEG_ROOT_INO, "d"), -ENOTEMPTY);
    assert_int_equal(keg_meta_rmdir(t->m, d, "f"), -ENOTDIR);
    assert_int_equal(keg_meta_rmdir(t->m, d, "nope"), -ENOENT);
    assert_int_equal(keg_meta_rmdir(t->m, 999, "nope"), -ENOENT);
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i0), 0);
    int64_t t0 = keg_now_ns();
    assert_int_equal(keg_meta_rmdir(t->m, d, "sub"), 0);
    assert_int_equal(keg_meta_getattr(t->m, sub, &a), -ENOENT);
    a = attr(t->m, d);
    assert_int_equal(a.nlink, 2);
    assert_true(ns_of(a.mtime, a.mtimensec) >= t0);
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i), 0);
    assert_int_equal(used_i, used_i0 - 1);
    struct keg_unlinked g;
    assert_int_equal(keg_meta_unlink(t->m, d, "f", &g), 0);
    assert_int_equal(keg_meta_rmdir(t->m, KEG_ROOT_INO, "d"), 0);
    assert_int_equal(attr(t->m, KEG_ROOT_INO).nlink, 2);
    /* a removed directory cannot get children */
    uint64_t ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, d, "x", ino, S_IFREG | 0644, 0, 0, 0, NULL, &a),
                     -ENOENT);
}

/*----------------------------------------------------------------------------
 * Rename
 *--------------------------------------------------------------------------*/

static void test_rename_basic(void **state)
{
    struct t *t = *state;
    struct keg_attr mv;
    struct keg_unlinked g;
    uint64_t a = mkdir_(t->m, KEG_ROOT_INO, "a");
    uint64_t b = mkdir_(t->m, KEG_ROOT_INO, "b");
    uint64_t f = mkfile(t->m, a, "f");
    int64_t t0 = keg_now_ns();
    /* same directory */
    assert_int_equal(keg_meta_rename(t->m, a, "f", a, "g", 0, &mv, &g), 0);
    assert_int_equal(mv.ino, f);
    assert_int_equal(g.ino, 0);
    assert_true(ns_of(mv.ctime, mv.ctimensec) >= t0);
    assert_int_equal(lookup_ino(t->m, a, "f"), 0);
    assert_int_equal(lookup_ino(t->m, a, "g"), f);
    assert_int_equal(attr(t->m, a).nlink, 2);
    /* across directories: both parents touched */
    t0 = keg_now_ns();
    assert_int_equal(keg_meta_rename(t->m, a, "g", b, "h", 0, &mv, &g), 0);
    assert_int_equal(lookup_ino(t->m, b, "h"), f);
    struct keg_attr aa = attr(t->m, a), ba = attr(t->m, b);
    assert_true(ns_of(aa.mtime, aa.mtimensec) >= t0);
    assert_true(ns_of(aa.ctime, aa.ctimensec) >= t0);
    assert_true(ns_of(ba.mtime, ba.mtimensec) >= t0);
    assert_true(ns_of(ba.ctime, ba.ctimensec) >= t0);
    assert_true(ns_of(attr(t->m, f).ctime, attr(t->m, f).ctimensec) >= t0);
    assert_int_equal(attr(t->m, f).parent, 0);
    /* errors */
    assert_int_equal(keg_meta_rename(t->m, a, "nope", b, "x", 0, &mv, &g), -ENOENT);
    assert_int_equal(keg_meta_rename(t->m, 999, "x", b, "x", 0, &mv, &g), -ENOENT);
    assert_int_equal(keg_meta_rename(t->m, b, "h", 999, "x", 0, &mv, &g), -ENOENT);
    assert_int_equal(keg_meta_rename(t->m, b, "h", f, "x", 0, &mv, &g), -ENOTDIR);
    assert_int_equal(keg_meta_rename(t->m, b, "h", a, "x",
                                     KEG_RENAME_NOREPLACE | KEG_RENAME_EXCHANGE, &mv, &g), -EINVAL);
    assert_int_equal(lookup_ino(t->m, b, "h"), f);
}

static void test_rename_dirs(void **state)
{
    struct t *t = *state;
    struct keg_attr mv;
    struct keg_unlinked g;
    uint64_t a = mkdir_(t->m, KEG_ROOT_INO, "a");
    uint64_t b = mkdir_(t->m, KEG_ROOT_INO, "b");
    uint64_t d = mkdir_(t->m, a, "d");
    uint64_t dd = mkdir_(t->m, d, "dd");
    assert_int_equal(attr(t->m, a).nlink, 3);
    assert_int_equal(attr(t->m, KEG_ROOT_INO).nlink, 4);
    /* move a dir across parents: ".." counts and parent pointer follow */
    assert_int_equal(keg_meta_rename(t->m, a, "d", b, "d", 0, &mv, &g), 0);
    assert_int_equal(mv.ino, d);
    assert_int_equal(mv.parent, b);
    assert_int_equal(attr(t->m, d).parent, b);
    assert_int_equal(attr(t->m, a).nlink, 2);
    assert_int_equal(attr(t->m, b).nlink, 3);
    assert_int_equal(attr(t->m, d).nlink, 3);
    assert_int_equal(attr(t->m, dd).parent, d);
    /* rename within one dir keeps counts */
    assert_int_equal(keg_meta_rename(t->m, b, "d", b, "e", 0, &mv, &g), 0);
    assert_int_equal(attr(t->m, b).nlink, 3);
    assert_int_equal(attr(t->m, d).parent, b);
    /* into itself or its own subtree: -EINVAL */
    assert_int_equal(keg_meta_rename(t->m, b, "e", d, "x", 0, &mv, &g), -EINVAL);
    assert_int_equal(keg_meta_rename(t->m, b, "e", dd, "x", 0, &mv, &g), -EINVAL);
    assert_int_equal(keg_meta_rename(t->m, KEG_ROOT_INO, "b", dd, "x", 0, &mv, &g), -EINVAL);
    /* dir over file -> ENOTDIR; file over dir -> EISDIR */
    uint64_t f = mkfile(t->m, a, "f");
    assert_int_equal(keg_meta_rename(t->m, b, "e", a, "f", 0, &mv, &g), -ENOTDIR);
    assert_int_equal(keg_meta_rename(t->m, a, "f", b, "e", 0, &mv, &g), -EISDIR);
    /* dir over non-empty dir -> ENOTEMPTY */
    uint64_t full = mkdir_(t->m, a, "full");
    mkfile(t->m, full, "x");
    assert_int_equal(keg_meta_rename(t->m, b, "e", a, "full", 0, &mv, &g), -ENOTEMPTY);
    /* dir over empty dir across parents: replaced dir is gone, counts right */
    uint64_t empty = mkdir_(t->m, a, "empty");
    assert_int_equal(attr(t->m, a).nlink, 4);
    assert_int_equal(keg_meta_rename(t->m, b, "e", a, "empty", 0, &mv, &g), 0);
    assert_int_equal(g.ino, empty);
    assert_true(S_ISDIR(g.mode));
    assert_int_equal(keg_meta_getattr(t->m, empty, &mv), -ENOENT);
    assert_int_equal(attr(t->m, a).nlink, 4);    /* lost "empty", gained d */
    assert_int_equal(attr(t->m, b).nlink, 2);
    assert_int_equal(attr(t->m, d).parent, a);
    assert_int_equal(lookup_ino(t->m, a, "empty"), d);
    /* dir over empty dir in the same parent */
    uint64_t e2 = mkdir_(t->m, a, "e2");
    assert_int_equal(attr(t->m, a).nlink, 5);
    assert_int_equal(keg_meta_rename(t->m, a, "e2", a, "empty", 0, &mv, &g), -ENOTEMPTY);
    assert_int_equal(keg_meta_rename(t->m, a, "empty", a, "e2", 0, &mv, &g), 0);
    assert_int_equal(g.ino, e2);
    assert_int_equal(attr(t->m, a).nlink, 4);
    assert_int_equal(attr(t->m, d).parent, a);
    (void)f;
}

static void test_rename_replace_file(void **state)
{
    struct t *t = *state;
    struct keg_attr mv, a;
    struct keg_unlinked g;
    uint64_t sid;
    int seen;
    assert_int_equal(keg_meta_session_begin(t->m, "x", &sid), 0);
    uint64_t f1 = mkfile(t->m, KEG_ROOT_INO, "f1");
    uint64_t f2 = mkfile(t->m, KEG_ROOT_INO, "f2");
    uint64_t s2 = write_at(t->m, f2, 0, 100);
    /* NOREPLACE -> EEXIST, nothing changed */
    assert_int_equal(keg_meta_rename(t->m, KEG_ROOT_INO, "f1", KEG_ROOT_INO, "f2",
                                     KEG_RENAME_NOREPLACE, &mv, &g), -EEXIST);
    assert_int_equal(lookup_ino(t->m, KEG_ROOT_INO, "f2"), f2);
    /* NOREPLACE to a free name works */
    assert_int_equal(keg_meta_rename(t->m, KEG_ROOT_INO, "f1", KEG_ROOT_INO, "f3",
                                     KEG_RENAME_NOREPLACE, &mv, &g), 0);
    /* replacing the last link of f2: pending under the session */
    int64_t t0 = keg_now_ns();
    assert_int_equal(keg_meta_rename(t->m, KEG_ROOT_INO, "f3", KEG_ROOT_INO, "f2", 0, &mv,
                                     &g), 0);
    assert_int_equal(mv.ino, f1);
    assert_int_equal(g.ino, f2);
    assert_int_equal(g.size, 100);
    a = attr(t->m, f2);
    assert_int_equal(a.nlink, 0);
    assert_true(ns_of(a.ctime, a.ctimensec) >= t0);
    assert_int_equal(lookup_ino(t->m, KEG_ROOT_INO, "f2"), f1);
    assert_int_equal(lookup_ino(t->m, KEG_ROOT_INO, "f3"), 0);
    assert_int_equal(keg_meta_purge(t->m, f2), 0);
    assert_int_equal(delq_drain(t->m, s2, &seen), 1);
    assert_true(seen);
    /* replacing a name of a file with more links: just one link less */
    uint64_t h = mkfile(t->m, KEG_ROOT_INO, "h");
    assert_int_equal(keg_meta_link(t->m, h, KEG_ROOT_INO, "h2", &a), 0);
    assert_int_equal(keg_meta_rename(t->m, KEG_ROOT_INO, "f2", KEG_ROOT_INO, "h", 0, &mv, &g),
                     0);
    assert_int_equal(g.ino, 0);
    assert_int_equal(attr(t->m, h).nlink, 1);
    /* two hard links of one inode: successful no-op, both names stay */
    assert_int_equal(keg_meta_link(t->m, f1, KEG_ROOT_INO, "f1b", &a), 0);
    assert_int_equal(keg_meta_rename(t->m, KEG_ROOT_INO, "h", KEG_ROOT_INO, "f1b", 0, &mv,
                                     &g), 0);
    assert_int_equal(g.ino, 0);
    assert_int_equal(lookup_ino(t->m, KEG_ROOT_INO, "h"), f1);
    assert_int_equal(lookup_ino(t->m, KEG_ROOT_INO, "f1b"), f1);
    assert_int_equal(attr(t->m, f1).nlink, 2);
    /* same name onto itself */
    assert_int_equal(keg_meta_rename(t->m, KEG_ROOT_INO, "h", KEG_ROOT_INO, "h", 0, &mv, &g),
                     0);
    assert_int_equal(lookup_ino(t->m, KEG_ROOT_INO, "h"), f1);
    /* NOREPLACE onto another link of the same inode is still EEXIST (as Linux) */
    assert_int_equal(keg_meta_rename(t->m, KEG_ROOT_INO, "h", KEG_ROOT_INO, "f1b",
                                     KEG_RENAME_NOREPLACE, &mv, &g), -EEXIST);
}

static void test_rename_exchange(void **state)
{
    struct t *t = *state;
    struct keg_attr mv;
    struct keg_unlinked g;
    uint64_t a = mkdir_(t->m, KEG_ROOT_INO, "a");
    uint64_t b = mkdir_(t->m, KEG_ROOT_INO, "b");
    uint64_t f = mkfile(t->m, a, "f");
    uint64_t d = mkdir_(t->m, b, "d");
    uint64_t dd = mkdir_(t->m, d, "dd");
    assert_int_equal(attr(t->m, a).nlink, 2);
    assert_int_equal(attr(t->m, b).nlink, 3);
    /* missing target */
    assert_int_equal(keg_meta_rename(t->m, a, "f", b, "none", KEG_RENAME_EXCHANGE, &mv, &g),
                     -ENOENT);
    /* file <-> dir across parents */
    int64_t t0 = keg_now_ns();
    assert_int_equal(keg_meta_rename(t->m, a, "f", b, "d", KEG_RENAME_EXCHANGE, &mv, &g), 0);
    assert_int_equal(g.ino, 0);
    assert_int_equal(mv.ino, f);
    assert_int_equal(lookup_ino(t->m, a, "f"), d);
    assert_int_equal(lookup_ino(t->m, b, "d"), f);
    assert_int_equal(attr(t->m, d).parent, a);
    assert_int_equal(attr(t->m, a).nlink, 3);
    assert_int_equal(attr(t->m, b).nlink, 2);
    struct keg_attr da = attr(t->m, d), fa = attr(t->m, f);
    assert_true(ns_of(da.ctime, da.ctimensec) >= t0);
    assert_true(ns_of(fa.ctime, fa.ctimensec) >= t0);
    struct names nm;
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, a, NULL, 0, 1, names_cb, &nm), 1);
    assert_string_equal(nm.names[0], "f");
    assert_int_equal(nm.attrs[0].ino, d);      /* entry type follows the inode */
    /* file <-> file in one dir */
    uint64_t x = mkfile(t->m, b, "x");
    assert_int_equal(keg_meta_rename(t->m, b, "x", b, "d", KEG_RENAME_EXCHANGE, &mv, &g), 0);
    assert_int_equal(lookup_ino(t->m, b, "x"), f);
    assert_int_equal(lookup_ino(t->m, b, "d"), x);
    assert_int_equal(attr(t->m, b).nlink, 2);
    /* dir <-> dir across parents: counts unchanged, pointers swapped */
    uint64_t e = mkdir_(t->m, b, "e");
    assert_int_equal(keg_meta_rename(t->m, a, "f", b, "e", KEG_RENAME_EXCHANGE, &mv, &g), 0);
    assert_int_equal(attr(t->m, d).parent, b);
    assert_int_equal(attr(t->m, e).parent, a);
    assert_int_equal(attr(t->m, a).nlink, 3);
    assert_int_equal(attr(t->m, b).nlink, 3);
    /* exchanging a dir with something inside it: -EINVAL */
    uint64_t in = mkfile(t->m, dd, "in");
    assert_int_equal(keg_meta_rename(t->m, b, "e", dd, "in", KEG_RENAME_EXCHANGE, &mv, &g),
                     -EINVAL);
    assert_int_equal(keg_meta_rename(t->m, dd, "in", b, "e", KEG_RENAME_EXCHANGE, &mv, &g),
                     -EINVAL);
    assert_int_equal(lookup_ino(t->m, dd, "in"), in);
    /* exchanging with itself (hard link) is a no-op */
    assert_int_equal(keg_meta_link(t->m, in, dd, "in2", &mv), 0);
    assert_int_equal(keg_meta_rename(t->m, dd, "in", dd, "in2", KEG_RENAME_EXCHANGE, &mv,
                                     &g), 0);
    assert_int_equal(lookup_ino(t->m, dd, "in2"), in);
}

/*----------------------------------------------------------------------------
 * readdir, readlink
 *--------------------------------------------------------------------------*/

static void test_readdir(void **state)
{
    struct t *t = *state;
    struct names nm;
    /* byte order, not locale order: "B" < "a" < "a\xff" < "\xc3\xa9" */
    const char *in[] = {"\xc3\xa9t\xc3\xa9", "a", "B", "a\xff", "zz", "a b", "a-", "0"};
    const char *sorted[] = {"0", "B", "a", "a b", "a-", "a\xff", "zz", "\xc3\xa9t\xc3\xa9"};
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "d");
    for (int i = 0; i < 8; i++)
        mk(t->m, d, in[i], i == 2 ? (S_IFDIR | 0700) : (S_IFREG | 0600));
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, NULL, 100, 0, names_cb, &nm), 8);
    for (int i = 0; i < 8; i++)
        assert_string_equal(nm.names[i], sorted[i]);
    assert_int_equal(nm.plus_seen, 0);
    /* paging */
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, NULL, 3, 0, names_cb, &nm), 3);
    assert_string_equal(nm.names[2], "a");
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, "a", 3, 0, names_cb, &nm), 3);
    assert_string_equal(nm.names[0], "a b");
    assert_string_equal(nm.names[2], "a\xff");
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, "a\xff", 3, 0, names_cb, &nm), 2);
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, "\xc3\xa9t\xc3\xa9", 3, 0, names_cb, &nm), 0);
    /* `after` need not exist */
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, "a0", 100, 0, names_cb, &nm), 3);
    assert_string_equal(nm.names[0], "a\xff");
    /* plus: attributes */
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, NULL, 0, 1, names_cb, &nm), 8);
    assert_int_equal(nm.plus_seen, 8);
    assert_int_equal(nm.attrs[1].mode, S_IFDIR | 0700);     /* "B" */
    assert_int_equal(nm.attrs[1].nlink, 2);
    assert_int_equal(nm.attrs[0].mode, S_IFREG | 0600);
    /* plus: which entries have no xattr at all (none has yet; then "a" and
     * "B" get one, and "a" loses it again) */
    for (int i = 0; i < 8; i++)
        assert_int_equal(nm.no_xattr[i], 1);
    uint64_t xa = lookup_ino(t->m, d, "a"), xb = lookup_ino(t->m, d, "B");
    assert_int_equal(keg_meta_setxattr(t->m, xa, "user.k", "v", 1, 0), 0);
    assert_int_equal(keg_meta_setxattr(t->m, xb, "system.posix_acl_default", "\2\0\0\0", 4, 0),
                     0);
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, NULL, 0, 1, names_cb, &nm), 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(nm.no_xattr[i], i != 1 && i != 2);    /* "B", "a" */
    assert_int_equal(keg_meta_removexattr(t->m, xa, "user.k"), 0);
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, NULL, 0, 1, names_cb, &nm), 8);
    assert_int_equal(nm.no_xattr[2], 1);
    assert_int_equal(nm.no_xattr[1], 0);
    /* without plus, nothing is claimed */
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, d, NULL, 0, 0, names_cb, &nm), 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(nm.no_xattr[i], 0);
    /* early stop: the refused entry is not counted */
    memset(&nm, 0, sizeof(nm));
    nm.stop_after = 2;
    assert_int_equal(keg_meta_readdir(t->m, d, NULL, 0, 0, names_cb, &nm), 2);
    assert_int_equal(nm.n, 2);
    /* empty dir, errors */
    uint64_t e = mkdir_(t->m, KEG_ROOT_INO, "e");
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, e, NULL, 10, 1, names_cb, &nm), 0);
    uint64_t f = lookup_ino(t->m, d, "a");
    assert_int_equal(keg_meta_readdir(t->m, f, NULL, 10, 0, names_cb, &nm), -ENOTDIR);
    assert_int_equal(keg_meta_readdir(t->m, 999, NULL, 10, 0, names_cb, &nm), -ENOENT);
}

/*----------------------------------------------------------------------------
 * Data
 *--------------------------------------------------------------------------*/

static void test_write_read_chunks(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    struct keg_slice *sl = NULL;
    size_t n = 99;
    uint32_t ns = 0;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, 0);
    assert_null(sl);
    uint64_t id1 = new_slice(t->m), id2 = new_slice(t->m), id3 = new_slice(t->m);
    struct keg_chunk_slice cs[3] = {
        {.indx = 0, .s = {.id = id1, .size = 1000, .off = 0, .len = 1000, .pos = 0}},
        {.indx = 0, .s = {.id = id2, .size = 500, .off = 100, .len = 400, .pos = 200}},
        {.indx = 2, .s = {.id = id3, .size = 10, .off = 0, .len = 10, .pos = 7}},
    };
    int64_t t0 = keg_now_ns();
    assert_int_equal(keg_meta_write_slices(t->m, f, 3, cs, 2 * CHUNK + 17, 0, &ns, &a), 0);
    assert_int_equal(ns, 2);
    assert_int_equal(a.size, 2 * CHUNK + 17);
    assert_true(ns_of(a.mtime, a.mtimensec) >= t0);
    assert_int_equal(attr(t->m, f).size, 2 * CHUNK + 17);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(sl[0].id, id1);
    assert_int_equal(sl[0].size, 1000);
    assert_int_equal(sl[1].id, id2);
    assert_int_equal(sl[1].size, 500);
    assert_int_equal(sl[1].off, 100);
    assert_int_equal(sl[1].len, 400);
    assert_int_equal(sl[1].pos, 200);
    keg_free(sl);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 1, &sl, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 2, &sl, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sl[0].pos, 7);
    keg_free(sl);
    /* min_size below the size does not shrink; hole slices are stored */
    struct keg_chunk_slice hole = {.indx = 0, .s = {.id = 0, .size = 50, .off = 0, .len = 50,
                                                    .pos = 10}};
    assert_int_equal(keg_meta_write_slices(t->m, f, 1, &hole, 5, 0, &ns, &a), 0);
    assert_int_equal(ns, 3);
    assert_int_equal(a.size, 2 * CHUNK + 17);
    /* NOMTIME */
    struct keg_attr in = {0};
    in.mtime = 77;
    assert_int_equal(keg_meta_setattr(t->m, f, KEG_SET_MTIME, &in, &a), 0);
    assert_int_equal(keg_meta_write_slices(t->m, f, 1, &hole, 0, KEG_WS_NOMTIME, NULL, &a), 0);
    assert_int_equal(a.mtime, 77);
    assert_int_equal(attr(t->m, f).mtime, 77);
    /* errors */
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "d");
    uint64_t ln = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, KEG_ROOT_INO, "ln", ln, S_IFLNK | 0777, 0, 0, 0,
                                    "f", &a), 0);
    assert_int_equal(keg_meta_write_slices(t->m, d, 1, &hole, 0, 0, NULL, &a), -EISDIR);
    assert_int_equal(keg_meta_write_slices(t->m, ln, 1, &hole, 0, 0, NULL, &a), -EPERM);
    assert_int_equal(keg_meta_write_slices(t->m, 999, 1, &hole, 0, 0, NULL, &a), -ENOENT);
}

static void test_write_share(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    struct keg_unlinked g;
    int seen;
    uint64_t f1 = mkfile(t->m, KEG_ROOT_INO, "f1");
    uint64_t f2 = mkfile(t->m, KEG_ROOT_INO, "f2");
    uint64_t id = write_at(t->m, f1, 0, 4096);
    struct keg_chunk_slice cs = {.indx = 1, .s = {.id = id, .size = 4096, .off = 96, .len = 4000,
                                                  .pos = 0}};
    assert_int_equal(keg_meta_write_slices(t->m, f2, 1, &cs, CHUNK + 4000, KEG_WS_SHARE,
                                           NULL, &a), 0);
    assert_int_equal(a.size, CHUNK + 4000);
    /* the shared slice survives the first file */
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f1", &g), 0);
    assert_int_equal(delq_drain(t->m, id, &seen), 0);
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f2", &g), 0);
    assert_int_equal(delq_drain(t->m, id, &seen), 1);
    assert_true(seen);
    /* sharing a slice that no longer exists: -EAGAIN, nothing written */
    uint64_t f3 = mkfile(t->m, KEG_ROOT_INO, "f3");
    struct keg_chunk_slice two[2] = {
        {.indx = 0, .s = {.id = 0, .size = 10, .off = 0, .len = 10, .pos = 0}},
        {.indx = 0, .s = {.id = id, .size = 4096, .off = 0, .len = 10, .pos = 0}},
    };
    assert_int_equal(keg_meta_write_slices(t->m, f3, 2, two, 10, KEG_WS_SHARE, NULL, &a),
                     -EAGAIN);
    struct keg_slice *sl;
    size_t n = 7;
    assert_int_equal(keg_meta_read_chunk(t->m, f3, 0, &sl, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(attr(t->m, f3).size, 0);
}

/* An O_APPEND slice of len bytes (placed by the engine). */
static struct keg_chunk_slice app_slice(struct keg_meta *m, uint32_t len)
{
    struct keg_chunk_slice cs = {
        .indx = KEG_INDX_APPEND,
        .s = {.id = new_slice(m), .size = len, .off = 0, .len = len, .pos = 0},
    };
    return cs;
}

static void test_write_append(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    struct keg_slice *sl = NULL;
    size_t n = 0;
    int seen;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");

    /* an append lands at the end, whatever min_size says */
    write_at(t->m, f, 0, 1000);
    struct keg_chunk_slice x = app_slice(t->m, 300);
    assert_int_equal(keg_meta_write_slices(t->m, f, 1, &x, 0, 0, NULL, &a), 0);
    assert_int_equal(a.size, 1300);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(sl[1].id, x.s.id);
    assert_int_equal(sl[1].pos, 1000);
    assert_int_equal(sl[1].off, 0);
    assert_int_equal(sl[1].len, 300);
    keg_free(sl);

    /* positioned slices first (and min_size), then the appends in order */
    struct keg_chunk_slice mix[3] = {
        {.indx = 0, .s = {.id = new_slice(t->m), .size = 100, .off = 0, .len = 100, .pos = 5000}},
        app_slice(t->m, 50),
        app_slice(t->m, 70),
    };
    assert_int_equal(keg_meta_write_slices(t->m, f, 3, mix, 5100, 0, NULL, &a), 0);
    assert_int_equal(a.size, 5220);
    assert_int_equal(attr(t->m, f).size, 5220);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, 5);
    assert_int_equal(sl[2].pos, 5000);
    assert_int_equal(sl[3].id, mix[1].s.id);
    assert_int_equal(sl[3].pos, 5100);
    assert_int_equal(sl[4].id, mix[2].s.id);
    assert_int_equal(sl[4].pos, 5150);
    keg_free(sl);

    /* across a chunk boundary: two references to consecutive ranges of one slice */
    assert_int_equal(keg_meta_truncate(t->m, f, CHUNK - 100, &a), 0);
    struct keg_chunk_slice y = app_slice(t->m, 300);
    assert_int_equal(keg_meta_write_slices(t->m, f, 1, &y, 0, 0, NULL, &a), 0);
    assert_int_equal(a.size, CHUNK + 200);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(sl[n - 1].id, y.s.id);
    assert_int_equal(sl[n - 1].pos, CHUNK - 100);
    assert_int_equal(sl[n - 1].off, 0);
    assert_int_equal(sl[n - 1].len, 100);
    assert_int_equal(sl[n - 1].size, 300);
    keg_free(sl);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 1, &sl, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sl[0].id, y.s.id);
    assert_int_equal(sl[0].pos, 0);
    assert_int_equal(sl[0].off, 100);
    assert_int_equal(sl[0].len, 200);
    keg_free(sl);
    /* both references count: the slice is queued for deletion once, when both go */
    assert_int_equal(keg_meta_truncate(t->m, f, CHUNK, &a), 0);
    delq_drain(t->m, y.s.id, &seen);
    assert_false(seen);
    assert_int_equal(keg_meta_truncate(t->m, f, 0, &a), 0);
    delq_drain(t->m, y.s.id, &seen);
    assert_true(seen);

    /* bad input: an append before a positioned slice, an append with a position */
    struct keg_chunk_slice bad[2] = {
        app_slice(t->m, 10),
        {.indx = 0, .s = {.id = new_slice(t->m), .size = 10, .off = 0, .len = 10, .pos = 0}},
    };
    assert_int_equal(keg_meta_write_slices(t->m, f, 2, bad, 10, 0, NULL, &a), -EINVAL);
    bad[0].s.pos = 5;
    assert_int_equal(keg_meta_write_slices(t->m, f, 1, bad, 0, 0, NULL, &a), -EINVAL);
    assert_int_equal(attr(t->m, f).size, 0);
}

#define AP_THREADS 4
#define AP_EACH    100

struct ap_arg {
    struct keg_meta *m;
    uint64_t ino;
    uint64_t ids[AP_EACH];
    int errors;
};

static void *ap_run(void *arg)
{
    struct ap_arg *p = arg;
    for (int i = 0; i < AP_EACH; i++) {
        struct keg_attr a;
        struct keg_chunk_slice cs = {.indx = KEG_INDX_APPEND};
        if (keg_meta_alloc_ids(p->m, KEG_ID_SLICE, 1, &cs.s.id) != 0) {
            p->errors++;
            continue;
        }
        cs.s.size = cs.s.len = 10 + (uint32_t)(i % 7);
        if (keg_meta_write_slices(p->m, p->ino, 1, &cs, 0, 0, NULL, &a) != 0)
            p->errors++;
        p->ids[i] = cs.s.id;
    }
    return NULL;
}

/* Appends of several instances at once: every one lands, none overlaps. */
static void test_write_append_concurrent(void **state)
{
    struct t *t = *state;
    struct keg_meta *m2 = second(t);
    struct ap_arg aa[AP_THREADS];
    pthread_t th[AP_THREADS];
    struct keg_slice *sl = NULL;
    size_t n = 0;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "log");
    uint64_t total = 0;

    for (int i = 0; i < AP_THREADS; i++) {
        memset(&aa[i], 0, sizeof(aa[i]));
        aa[i].m = i % 2 ? m2 : t->m;
        aa[i].ino = f;
        assert_int_equal(pthread_create(&th[i], NULL, ap_run, &aa[i]), 0);
    }
    for (int i = 0; i < AP_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(aa[i].errors, 0);
    }
    for (int i = 0; i < AP_EACH; i++)
        total += 10 + (uint64_t)(i % 7);
    total *= AP_THREADS;
    assert_int_equal(attr(m2, f).size, total);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, AP_THREADS * AP_EACH);
    /* in list order, each starts where the previous ended: no gap, no overlap */
    uint64_t end = 0;
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(sl[k].pos, end);
        assert_int_equal(sl[k].off, 0);
        end += sl[k].len;
        int found = 0;
        for (int i = 0; i < AP_THREADS && !found; i++)
            for (int j = 0; j < AP_EACH && !found; j++)
                found = aa[i].ids[j] == sl[k].id;
        assert_true(found);
    }
    assert_int_equal(end, total);
    keg_free(sl);
}

static void test_truncate(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    struct keg_slice *sl;
    size_t n;
    int seen;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    uint64_t s0 = write_at(t->m, f, 0, 1000);
    uint64_t s1 = write_at(t->m, f, CHUNK, 1000);
    uint64_t s2 = write_at(t->m, f, 2 * CHUNK + 10, 1000);
    assert_int_equal(attr(t->m, f).size, 2 * CHUNK + 1010);
    /* shrink into chunk 1: chunk 2 dropped, hole over the tail of chunk 1 */
    int64_t t0 = keg_now_ns();
    assert_int_equal(keg_meta_truncate(t->m, f, CHUNK + 100, &a), 0);
    assert_int_equal(a.size, CHUNK + 100);
    assert_true(ns_of(a.mtime, a.mtimensec) >= t0);
    assert_true(ns_of(a.ctime, a.ctimensec) >= t0);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 2, &sl, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(delq_drain(t->m, s2, &seen), 1);
    assert_true(seen);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 1, &sl, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(sl[0].id, s1);
    assert_int_equal(sl[1].id, 0);
    assert_int_equal(sl[1].pos, 100);
    assert_int_equal(sl[1].len, CHUNK - 100);
    assert_int_equal(sl[1].off, 0);
    assert_int_equal(sl[1].size, CHUNK - 100);
    keg_free(sl);
    /* grow: size only, no slices */
    assert_int_equal(keg_meta_truncate(t->m, f, 3 * CHUNK, &a), 0);
    assert_int_equal(a.size, 3 * CHUNK);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 1, &sl, &n), 0);
    assert_int_equal(n, 2);
    keg_free(sl);
    /* shrink to a chunk boundary: whole chunk 1 dropped, no hole in chunk 0 */
    assert_int_equal(keg_meta_truncate(t->m, f, CHUNK, &a), 0);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 1, &sl, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, 1);
    keg_free(sl);
    assert_int_equal(delq_drain(t->m, s1, &seen), 1);
    assert_true(seen);
    /* shrink to 0: everything goes */
    assert_int_equal(keg_meta_truncate(t->m, f, 0, &a), 0);
    assert_int_equal(a.size, 0);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(delq_drain(t->m, s0, &seen), 1);
    assert_true(seen);
    uint64_t used_b, used_i;
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i), 0);
    assert_int_equal(used_b, 0);
    /* errors */
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "d");
    assert_int_equal(keg_meta_truncate(t->m, d, 0, &a), -EISDIR);
    assert_int_equal(keg_meta_truncate(t->m, 999, 0, &a), -ENOENT);
}

/* Truncating and deleting a huge sparse file costs work in proportion to the
 * chunks that exist, never to the size (10^15 bytes = 15 million chunk indices). */
/* keg_attr.alloc: an upper bound of the data stored that counts no holes
 * (SQLite keeps it; an engine may answer KEG_ALLOC_UNKNOWN instead). */
static void test_alloc_bytes(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    int tracked = strncmp(t->url, "sqlite3://", 10) == 0 || strncmp(t->url, "redis://", 8) == 0;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");

    a = attr(t->m, f);
    if (a.alloc == KEG_ALLOC_UNKNOWN) {
        assert_false(tracked);
        return;
    }
    assert_int_equal(a.alloc, 0);
    assert_int_equal(keg_meta_truncate(t->m, f, 1600 * 1024, &a), 0);
    assert_int_equal(a.alloc, 0);                   /* all hole */
    write_at(t->m, f, 800 * 1024, 50 * 1024);
    a = attr(t->m, f);
    assert_int_equal(a.size, 1600 * 1024);
    assert_int_equal(a.alloc, 50 * 1024);
    /* a hole slice (fallocate, punch) adds nothing */
    struct keg_chunk_slice hole = {.indx = 0, .s = {.id = 0, .size = 4096, .len = 4096}};
    assert_int_equal(keg_meta_write_slices(t->m, f, 1, &hole, 0, 0, NULL, &a), 0);
    assert_int_equal(a.alloc, 50 * 1024);
    /* a second chunk, then truncating below: never above the size */
    write_at(t->m, f, CHUNK + 10, 1000);
    assert_int_equal(attr(t->m, f).alloc, 50 * 1024 + 1000);
    assert_int_equal(keg_meta_truncate(t->m, f, 4096, &a), 0);
    assert_true(a.alloc <= 4096);
    /* other kinds of inode report nothing tracked */
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "d");
    assert_int_equal(attr(t->m, d).alloc, KEG_ALLOC_UNKNOWN);
}

static void test_truncate_huge_sparse(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    struct keg_unlinked g;
    struct keg_slice *sl;
    size_t n;
    int seen;
    int64_t t0 = keg_now_ns();
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "huge");
    uint64_t s0 = write_at(t->m, f, 0, 1000);
    uint64_t s1 = write_at(t->m, f, 100000000000000ull, 1000);    /* 10^14 */
    assert_int_equal(keg_meta_truncate(t->m, f, 1000000000000000ull, &a), 0);
    assert_int_equal(a.size, 1000000000000000ull);
    assert_int_equal(keg_meta_truncate(t->m, f, 1, &a), 0);
    assert_int_equal(a.size, 1);
    assert_int_equal(keg_meta_read_chunk(t->m, f, (uint32_t)(100000000000000ull / CHUNK),
                                         &sl, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(delq_drain(t->m, s1, &seen), 1);
    assert_true(seen);
    /* grow again, then delete: purge must not walk the size either */
    assert_int_equal(keg_meta_truncate(t->m, f, 1000000000000000ull, &a), 0);
    assert_int_equal(keg_meta_session_begin(t->m, "host=t pid=1", &(uint64_t){0}), 0);
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "huge", &g), 0);
    assert_int_equal(g.ino, f);
    assert_int_equal(keg_meta_purge(t->m, f), 0);
    assert_int_equal(delq_drain(t->m, s0, &seen), 1);
    assert_true(seen);
    uint64_t used_b, used_i;
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i), 0);
    assert_int_equal(used_b, 0);
    /* milliseconds in practice; before the fix this took minutes on Redis */
    assert_true(keg_now_ns() - t0 < 1000000000LL);
}

/* next_chunk finds the chunks that exist, skipping empty indices (SEEK_DATA on
 * huge sparse files), and follows truncation. */
static void test_next_chunk(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    uint32_t ix = 0;
    if (!t->m->ops->next_chunk)
        skip();
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "sparse");
    write_at(t->m, f, 0, 100);
    write_at(t->m, f, 5 * CHUNK + 7, 100);
    write_at(t->m, f, 1000000 * CHUNK, 100);
    assert_int_equal(keg_meta_next_chunk(t->m, f, 0, &ix), 0);
    assert_int_equal(ix, 0);
    assert_int_equal(keg_meta_next_chunk(t->m, f, 1, &ix), 0);
    assert_int_equal(ix, 5);
    assert_int_equal(keg_meta_next_chunk(t->m, f, 6, &ix), 0);
    assert_int_equal(ix, 1000000);
    assert_int_equal(keg_meta_next_chunk(t->m, f, 1000001, &ix), -ENOENT);
    assert_int_equal(keg_meta_truncate(t->m, f, 6 * CHUNK, &a), 0);
    assert_int_equal(keg_meta_next_chunk(t->m, f, 6, &ix), -ENOENT);
    assert_int_equal(keg_meta_next_chunk(t->m, 999999, 0, &ix), -ENOENT);
}

/* A file with many real chunks: after purge every slice reaches the deletion
 * queue (an engine may move them there in bounded steps driven by delq_peek). */
static void test_purge_many_chunks(void **state)
{
    struct t *t = *state;
    enum { NCH = 3000 };
    struct keg_chunk_slice *cs = calloc(NCH, sizeof(*cs));
    struct keg_attr a;
    struct keg_unlinked g;
    uint64_t first = 0;
    assert_non_null(cs);
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "many");
    assert_int_equal(keg_meta_alloc_ids(t->m, KEG_ID_SLICE, NCH, &first), 0);
    for (uint32_t i = 0; i < NCH; i++) {
        cs[i].indx = i * 7;
        cs[i].s = (struct keg_slice){.id = first + i, .size = 10, .off = 0, .len = 10, .pos = 0};
    }
    assert_int_equal(keg_meta_write_slices(t->m, f, NCH, cs,
                                           (uint64_t)(NCH - 1) * 7 * CHUNK + 10, 0, NULL, &a), 0);
    free(cs);
    /* truncate drops the chunks past the new end */
    assert_int_equal(keg_meta_truncate(t->m, f, (uint64_t)1500 * 7 * CHUNK, &a), 0);
    assert_int_equal(delq_drain(t->m, 0, NULL), NCH - 1500);
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "many", &g), 0);
    assert_int_equal(g.ino, f);
    assert_int_equal(keg_meta_getattr(t->m, f, &a), -ENOENT);
    assert_int_equal(delq_drain(t->m, 0, NULL), 1500);
    assert_int_equal(delq_drain(t->m, 0, NULL), 0);
}

static void test_compact(void **state)
{
    struct t *t = *state;
    struct keg_slice *sl;
    size_t n;
    int seen;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    uint64_t s1 = write_at(t->m, f, 0, 100);
    uint64_t s2 = write_at(t->m, f, 50, 100);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, 2);
    uint64_t s3 = write_at(t->m, f, 300, 10);     /* appended after the snapshot */
    struct keg_slice repl = {.id = new_slice(t->m), .size = 150, .off = 0, .len = 150, .pos = 0};
    /* stale view: -EAGAIN, nothing changes */
    struct keg_slice bad[2] = {sl[0], sl[1]};
    bad[1].len = 99;
    assert_int_equal(keg_meta_compact_chunk(t->m, f, 0, bad, 2, 0, &repl), -EAGAIN);
    assert_int_equal(keg_meta_compact_chunk(t->m, f, 1, sl, 2, 0, &repl), -EAGAIN);
    struct keg_slice *cur;
    size_t cn;
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &cur, &cn), 0);
    assert_int_equal(cn, 3);
    keg_free(cur);
    /* success: the first two replaced, the newer one kept after */
    assert_int_equal(keg_meta_compact_chunk(t->m, f, 0, sl, 2, 0, &repl), 0);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &cur, &cn), 0);
    assert_int_equal(cn, 2);
    assert_int_equal(cur[0].id, repl.id);
    assert_int_equal(cur[0].len, 150);
    assert_int_equal(cur[1].id, s3);
    keg_free(cur);
    int total = delq_drain(t->m, s1, &seen);
    assert_int_equal(total, 2);
    assert_true(seen);
    /* the same old list again is stale now */
    assert_int_equal(keg_meta_compact_chunk(t->m, f, 0, sl, 2, 0, &repl), -EAGAIN);
    keg_free(sl);
    (void)s2;
    /* the replacement is referenced: deleting the file queues it */
    struct keg_unlinked g;
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f", &g), 0);
    assert_int_equal(delq_drain(t->m, repl.id, &seen), 2);
    assert_true(seen);
}

/* A compaction that keeps the first slices and replaces only those after them. */
static void test_compact_keep(void **state)
{
    struct t *t = *state;
    struct keg_slice *sl, *cur;
    size_t n, cn;
    int seen;
    struct keg_unlinked g;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    uint64_t s0 = write_at(t->m, f, 0, 100);
    uint64_t s1 = write_at(t->m, f, 100, 50);
    uint64_t s2 = write_at(t->m, f, 150, 50);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, 3);
    uint64_t s3 = write_at(t->m, f, 200, 10);     /* appended after the snapshot */
    struct keg_slice repl = {.id = new_slice(t->m), .size = 100, .off = 0, .len = 100, .pos = 100};
    assert_int_equal(keg_meta_compact_chunk(t->m, f, 0, sl, 3, 3, &repl), -EINVAL);
    struct keg_slice bad[3] = {sl[0], sl[1], sl[2]};
    bad[0].len = 99;                              /* a kept slice must match too */
    assert_int_equal(keg_meta_compact_chunk(t->m, f, 0, bad, 3, 1, &repl), -EAGAIN);
    assert_int_equal(keg_meta_compact_chunk(t->m, f, 0, sl, 3, 1, &repl), 0);
    keg_free(sl);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &cur, &cn), 0);
    assert_int_equal(cn, 3);
    assert_int_equal(cur[0].id, s0);
    assert_int_equal(cur[0].len, 100);
    assert_int_equal(cur[1].id, repl.id);
    assert_int_equal(cur[1].pos, 100);
    assert_int_equal(cur[1].len, 100);
    assert_int_equal(cur[2].id, s3);
    keg_free(cur);
    /* only the replaced slices lost their reference */
    assert_int_equal(delq_drain(t->m, s1, &seen), 2);
    assert_true(seen);
    (void)s2;
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f", &g), 0);
    assert_int_equal(delq_drain(t->m, s0, &seen), 3);
    assert_true(seen);
}

/* Reference counts across a compaction and a purge of long slice lists: over
 * a thousand slices in one compaction, and one slice listed twice in a chunk
 * and shared with another file. */
static void test_compact_refs(void **state)
{
    struct t *t = *state;
    struct keg_attr a;
    struct keg_unlinked g;
    struct keg_slice *sl;
    size_t n;
    int seen;
    const int many = 1100;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    uint64_t f2 = mkfile(t->m, KEG_ROOT_INO, "f2");
    uint64_t shared = write_at(t->m, f, 0, 4096);
    struct keg_chunk_slice twice[2] = {
        {.indx = 0, .s = {.id = shared, .size = 4096, .off = 0, .len = 4096, .pos = 0}},
        {.indx = 0, .s = {.id = shared, .size = 4096, .off = 0, .len = 4096, .pos = 8192}},
    };
    assert_int_equal(keg_meta_write_slices(t->m, f2, 2, twice, 12288, KEG_WS_SHARE, NULL,
                                           &a), 0);
    for (int i = 0; i < many; i++)
        write_at(t->m, f, 4096 + (uint64_t)(i % 16) * 512, 512);
    assert_int_equal(keg_meta_read_chunk(t->m, f, 0, &sl, &n), 0);
    assert_int_equal(n, (size_t)many + 1);
    struct keg_slice repl = {.id = new_slice(t->m), .size = 12288, .off = 0, .len = 12288,
                             .pos = 0};
    assert_int_equal(keg_meta_compact_chunk(t->m, f, 0, sl, n, 0, &repl), 0);
    keg_free(sl);
    /* every written slice is gone but the shared one, still listed twice in f2 */
    assert_int_equal(delq_drain(t->m, shared, &seen), many);
    assert_false(seen);
    /* f2's purge drops both of its references at once */
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f2", &g), 0);
    assert_int_equal(delq_drain(t->m, shared, &seen), 1);
    assert_true(seen);
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f", &g), 0);
    assert_int_equal(delq_drain(t->m, repl.id, &seen), 1);
    assert_true(seen);
}

static void test_delq(void **state)
{
    struct t *t = *state;
    struct keg_del_slice d[8];
    struct keg_unlinked g;
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    uint64_t ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = write_at(t->m, f, (uint64_t)i * 1000, 1000 + (uint32_t)i);
    assert_int_equal(keg_meta_delq_peek(t->m, d, 8), 0);
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f", &g), 0);
    assert_int_equal(keg_meta_delq_peek(t->m, d, 3), 3);
    /* peek does not consume */
    assert_int_equal(keg_meta_delq_peek(t->m, d, 8), 5);
    int found = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++)
            if (d[j].id == ids[i] && d[j].size == 1000 + (uint32_t)i)
                found++;
    assert_int_equal(found, 5);
    assert_int_equal(keg_meta_delq_ack(t->m, d, 2), 0);
    assert_int_equal(keg_meta_delq_peek(t->m, d, 8), 3);
    assert_int_equal(keg_meta_delq_ack(t->m, d, 3), 0);
    assert_int_equal(keg_meta_delq_peek(t->m, d, 8), 0);
    assert_int_equal(keg_meta_delq_ack(t->m, d, 3), 0);     /* acking twice is fine */
}

static void test_quota(void **state)
{
    struct t *t = *state;       /* capacity 8192 bytes, 3 inodes */
    struct keg_attr a;
    uint64_t used_b, used_i;
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i), 0);
    assert_int_equal(used_b, 0);
    assert_int_equal(used_i, 0);
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "d");
    write_at(t->m, f, 0, 5000);
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i), 0);
    assert_int_equal(used_b, 8192);
    assert_int_equal(used_i, 2);
    /* growth past capacity */
    struct keg_chunk_slice cs = {.indx = 0, .s = {.id = new_slice(t->m), .size = 4000, .off = 0,
                                                  .len = 4000, .pos = 5000}};
    assert_int_equal(keg_meta_write_slices(t->m, f, 1, &cs, 9000, 0, NULL, &a), -ENOSPC);
    assert_int_equal(attr(t->m, f).size, 5000);
    assert_int_equal(keg_meta_write_slices(t->m, f, 1, &cs, 8192, 0, NULL, &a), 0);
    assert_int_equal(keg_meta_truncate(t->m, f, 8193, &a), -ENOSPC);
    assert_int_equal(keg_meta_truncate(t->m, f, 4096, &a), 0);
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i), 0);
    assert_int_equal(used_b, 4096);
    /* inodes: the third fits, the fourth does not */
    mk(t->m, d, "fifo", S_IFIFO | 0644);
    uint64_t ino = new_ino(t->m);
    assert_int_equal(keg_meta_mknod(t->m, d, "x", ino, S_IFREG | 0644, 0, 0, 0, NULL, &a),
                     -ENOSPC);
    assert_int_equal(keg_meta_lookup(t->m, d, "x", &a), -ENOENT);
    struct keg_unlinked g;
    assert_int_equal(keg_meta_unlink(t->m, d, "fifo", &g), 0);
    assert_int_equal(keg_meta_mknod(t->m, d, "x", ino, S_IFREG | 0644, 0, 0, 0, NULL, &a), 0);
    /* raising the quota with a forced format lifts the limit */
    struct keg_format fm;
    assert_int_equal(keg_meta_format_load(t->m, &fm), 0);
    fm.capacity = 0;
    fm.inodes = 0;
    assert_int_equal(keg_meta_format_init(t->m, &fm, 0755, 0, 0, 1), 0);
    assert_int_equal(keg_meta_truncate(t->m, f, 1ULL << 40, &a), 0);
    mkfile(t->m, d, "y");
    assert_int_equal(keg_meta_statfs(t->m, &used_b, &used_i), 0);
    assert_int_equal(used_b, 1ULL << 40);
    assert_int_equal(used_i, 4);
}

/*----------------------------------------------------------------------------
 * Extended attributes
 *--------------------------------------------------------------------------*/

static void test_xattr(void **state)
{
    struct t *t = *state;
    char buf[128];
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    const char bin[] = {'v', 0, 1, (char)0xff};
    assert_int_equal(keg_meta_getxattr(t->m, f, "user.a", buf, sizeof(buf)), -ENODATA);
    assert_int_equal(keg_meta_listxattr(t->m, f, buf, sizeof(buf)), 0);
    int64_t t0 = keg_now_ns();
    assert_int_equal(keg_meta_setxattr(t->m, f, "user.a", bin, sizeof(bin), 0), 0);
    struct keg_attr a = attr(t->m, f);
    assert_true(ns_of(a.ctime, a.ctimensec) >= t0);
    assert_int_equal(keg_meta_getxattr(t->m, f, "user.a", buf, sizeof(buf)), 4);
    assert_memory_equal(buf, bin, 4);
    assert_int_equal(keg_meta_getxattr(t->m, f, "user.a", buf, 0), 4);
    assert_int_equal(keg_meta_getxattr(t->m, f, "user.a", buf, 3), -ERANGE);
    assert_int_equal(keg_meta_setxattr(t->m, f, "user.a", "x", 1, XATTR_CREATE), -EEXIST);
    assert_int_equal(keg_meta_setxattr(t->m, f, "user.b", "x", 1, XATTR_REPLACE), -ENODATA);
    assert_int_equal(keg_meta_setxattr(t->m, f, "user.a", "xyz", 3, XATTR_REPLACE), 0);
    assert_int_equal(keg_meta_getxattr(t->m, f, "user.a", buf, sizeof(buf)), 3);
    assert_memory_equal(buf, "xyz", 3);
    assert_int_equal(keg_meta_setxattr(t->m, f, "security.c", "", 0, XATTR_CREATE), 0);
    assert_int_equal(keg_meta_getxattr(t->m, f, "security.c", buf, sizeof(buf)), 0);
    assert_int_equal(keg_meta_setxattr(t->m, f, "trusted.b", "1", 1, 0), 0);
    /* list: NUL-separated, sorted by name */
    const char want[] = "security.c\0trusted.b\0user.a";
    assert_int_equal(keg_meta_listxattr(t->m, f, buf, 0), sizeof(want));
    assert_int_equal(keg_meta_listxattr(t->m, f, buf, sizeof(want) - 1), -ERANGE);
    assert_int_equal(keg_meta_listxattr(t->m, f, buf, sizeof(buf)), sizeof(want));
    assert_memory_equal(buf, want, sizeof(want));
    /* remove */
    assert_int_equal(keg_meta_removexattr(t->m, f, "user.a"), 0);
    assert_int_equal(keg_meta_removexattr(t->m, f, "user.a"), -ENODATA);
    assert_int_equal(keg_meta_getxattr(t->m, f, "user.a", buf, sizeof(buf)), -ENODATA);
    assert_int_equal(keg_meta_listxattr(t->m, f, buf, sizeof(buf)),
                     sizeof("security.c\0trusted.b"));
    /* missing inode, xattrs on directories */
    assert_int_equal(keg_meta_getxattr(t->m, 999, "user.a", buf, sizeof(buf)), -ENOENT);
    assert_int_equal(keg_meta_setxattr(t->m, 999, "user.a", "x", 1, 0), -ENOENT);
    assert_int_equal(keg_meta_listxattr(t->m, 999, buf, sizeof(buf)), -ENOENT);
    assert_int_equal(keg_meta_removexattr(t->m, 999, "user.a"), -ENOENT);
    assert_int_equal(keg_meta_setxattr(t->m, KEG_ROOT_INO, "user.d", "dir", 3, 0), 0);
    assert_int_equal(keg_meta_getxattr(t->m, KEG_ROOT_INO, "user.d", buf, sizeof(buf)), 3);
    /* xattrs die with the inode */
    struct keg_unlinked g;
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f", &g), 0);
    assert_int_equal(keg_meta_getxattr(t->m, f, "trusted.b", buf, sizeof(buf)), -ENOENT);
}

/*----------------------------------------------------------------------------
 * Locks and sessions
 *--------------------------------------------------------------------------*/

static void test_flock(void **state)
{
    struct t *t = *state;
    struct keg_meta *m2 = second(t);
    uint64_t s1, s2;
    assert_int_equal(keg_meta_session_begin(t->m, "one", &s1), 0);
    assert_int_equal(keg_meta_session_begin(m2, "two", &s2), 0);
    assert_true(s1 != s2);
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    /* shared locks coexist */
    assert_int_equal(keg_meta_flock(t->m, f, 1, F_RDLCK), 0);
    assert_int_equal(keg_meta_flock(m2, f, 1, F_RDLCK), 0);     /* same owner id, other session */
    assert_int_equal(keg_meta_flock(t->m, f, 2, F_RDLCK), 0);
    /* exclusive conflicts with any other holder */
    assert_int_equal(keg_meta_flock(m2, f, 1, F_WRLCK), -EAGAIN);
    assert_int_equal(keg_meta_flock(t->m, f, 2, F_UNLCK), 0);
    assert_int_equal(keg_meta_flock(t->m, f, 1, F_UNLCK), 0);
    assert_int_equal(keg_meta_flock(m2, f, 1, F_WRLCK), 0);       /* upgrade */
    assert_int_equal(keg_meta_flock(t->m, f, 1, F_RDLCK), -EAGAIN);
    assert_int_equal(keg_meta_flock(t->m, f, 1, F_WRLCK), -EAGAIN);
    assert_int_equal(keg_meta_flock(m2, f, 1, F_WRLCK), 0);       /* re-lock is fine */
    assert_int_equal(keg_meta_flock(m2, f, 1, F_RDLCK), 0);       /* downgrade */
    assert_int_equal(keg_meta_flock(t->m, f, 1, F_RDLCK), 0);
    assert_int_equal(keg_meta_flock(t->m, f, 1, F_WRLCK), -EAGAIN);
    assert_int_equal(keg_meta_flock(t->m, f, 1, 99), -EINVAL);
    assert_int_equal(keg_meta_flock(t->m, 999, 1, F_RDLCK), -ENOENT);
    /* unlocking what is not held is fine */
    assert_int_equal(keg_meta_flock(t->m, f, 77, F_UNLCK), 0);
    /* session_end releases the session's locks */
    assert_int_equal(keg_meta_session_end(m2), 0);
    assert_int_equal(keg_meta_flock(t->m, f, 1, F_WRLCK), 0);
}

/* A later instance takes over a session that was not ended (a mounter's next
 * worker): its locks and pending inodes stay, as its own; ending it then releases
 * and purges them.  A session that was ended cannot be taken over. */
static void test_session_resume(void **state)
{
    struct t *t = *state;
    struct keg_meta *m2 = second(t);
    struct keg_meta *m3 = NULL;
    struct keg_attr a;
    struct keg_unlinked g;
    uint64_t s1, s2;
    assert_int_equal(keg_meta_session_begin(t->m, "worker 1", &s1), 0);
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
    uint64_t h = mkfile(t->m, KEG_ROOT_INO, "h");
    assert_int_equal(keg_meta_flock(t->m, h, 7, F_WRLCK), 0);
    assert_int_equal(keg_meta_unlink(t->m, KEG_ROOT_INO, "f", &g), 0);
    assert_int_equal(g.purged, 0);              /* pending in session 1 */
    /* the first instance stops without ending the session; a new one takes it over */
    assert_int_equal(keg_meta_open(t->url, &m3), 0);
    assert_int_equal(keg_meta_session_resume(m3, s1 + 1000, "worker 2"), -ENOENT);
    assert_int_equal(keg_meta_session_resume(m3, s1, "worker 2"), 0);
    assert_int_equal(keg_meta_session_resume(m3, s1, "again"), -EEXIST);
    assert_int_equal(keg_meta_session_heartbeat(m3), 0);
    assert_int_equal(keg_meta_session_begin(m2, "other", &s2), 0);
    assert_int_equal(keg_meta_flock(m2, h, 7, F_WRLCK), -EAGAIN);      /* still held */
    assert_int_equal(keg_meta_flock(m3, h, 7, F_WRLCK), 0);            /* and its own */
    assert_int_equal(keg_meta_getattr(m2, f, &a), 0);
    assert_int_equal(a.nlink, 0);
    /* the session's end (the last worker's unmount) releases and purges */
    assert_int_equal(keg_meta_session_end(m3), 0);
    assert_int_equal(keg_meta_flock(m2, h, 8, F_WRLCK), 0);
    assert_int_equal(keg_meta_getattr(m2, f, &a), -ENOENT);
    assert_int_equal(keg_meta_session_resume(m3, s1, "late"), -ENOENT);
    keg_meta_close(m3);
}

static void test_plock(void **state)
{
    struct t *t = *state;
    struct keg_meta *m2 = second(t);
    uint64_t s1, s2;
    struct keg_plock lk;
    assert_int_equal(keg_meta_session_begin(t->m, "one", &s1), 0);
    assert_int_equal(keg_meta_session_begin(m2, "two", &s2), 0);
    uint64_t f = mkfile(t->m, KEG_ROOT_INO, "f");
#define SET(m, own, ty, s, e) \
    (lk = (struct keg_plock){.type = (ty), .start = (s), .end = (e), .pid = 100 + (own)}, \
     keg_meta_setlk((m), f, (own), &lk))
#define GET(m, own, ty, s, e) \
    (lk = (struct keg_plock){.type = (ty), .start = (s), .end = (e), .pid = 1}, \
     keg_meta_getlk((m), f, (own), &lk))

    /* owner 1 (instance 1) write-locks [0,99] and [100,199]: merged into [0,199] */
    assert_int_equal(SET(t->m, 1, F_WRLCK, 0, 99), 0);
    assert_int_equal(SET(t->m, 1, F_WRLCK, 100, 199), 0);
    assert_int_equal(GET(m2, 1, F_RDLCK, 150, 150), 0);
    assert_int_equal(lk.type, F_WRLCK);
    assert_int_equal(lk.start, 0);
    assert_int_equal(lk.end, 199);
    assert_int_equal(lk.pid, 101);
    /* own locks never conflict with themselves */
    assert_int_equal(GET(t->m, 1, F_WRLCK, 0, 500), 0);
    assert_int_equal(lk.type, F_UNLCK);
    /* split: unlock the middle [50,149] -> [0,49] and [150,199] */
    assert_int_equal(SET(t->m, 1, F_UNLCK, 50, 149), 0);
    assert_int_equal(GET(m2, 1, F_WRLCK, 50, 149), 0);
    assert_int_equal(lk.type, F_UNLCK);
    assert_int_equal(GET(m2, 1, F_WRLCK, 60, 400), 0);
    assert_int_equal(lk.type, F_WRLCK);
    assert_int_equal(lk.start, 150);
    assert_int_equal(lk.end, 199);
    assert_int_equal(GET(m2, 1, F_WRLCK, 0, UINT64_MAX), 0);
    assert_int_equal(lk.start, 0);          /* the first (lowest) conflicting range */
    assert_int_equal(lk.end, 49);
    /* conflicts between sessions */
    assert_int_equal(SET(m2, 1, F_RDLCK, 40, 60), -EAGAIN);
    assert_int_equal(SET(m2, 1, F_RDLCK, 50, 149), 0);
    /* read locks of different owners coexist; a write over them conflicts */
    assert_int_equal(SET(t->m, 2, F_RDLCK, 100, 120), 0);
    assert_int_equal(SET(t->m, 2, F_WRLCK, 100, 120), -EAGAIN);
    assert_int_equal(GET(t->m, 2, F_WRLCK, 100, 120), 0);
    assert_int_equal(lk.type, F_RDLCK);
    assert_int_equal(lk.start, 50);
    assert_int_equal(lk.end, 149);
    assert_int_equal(lk.pid, 101);
    /* type change inside an own range splits it: RD [50,149] -> RD[50,89] WR[90,99] RD[100,149]? */
    assert_int_equal(SET(m2, 1, F_WRLCK, 90, 99), 0);
    assert_int_equal(GET(t->m, 3, F_RDLCK, 85, 95), 0);
    assert_int_equal(lk.type, F_WRLCK);
    assert_int_equal(lk.start, 90);
    assert_int_equal(lk.end, 99);
    assert_int_equal(GET(t->m, 3, F_WRLCK, 140, 149), 0);
    assert_int_equal(lk.type, F_RDLCK);
    assert_int_equal(lk.start, 100);
    assert_int_equal(lk.end, 149);
    assert_int_equal(GET(t->m, 3, F_WRLCK, 45, 52), 0);
    assert_int_equal(lk.type, F_WRLCK);     /* [0,49] of owner 1 starts lower than [50,89] */
    assert_int_equal(lk.start, 0);
    /* to EOF */
    assert_int_equal(SET(t->m, 5, F_WRLCK, 1000, UINT64_MAX), 0);
    assert_int_equal(GET(m2, 9, F_RDLCK, UINT64_MAX, UINT64_MAX), 0);
    assert_int_equal(lk.start, 1000);
    assert_int_equal(lk.end, UINT64_MAX);
    assert_int_equal(SET(t->m, 5, F_UNLCK, 0, UINT64_MAX), 0);
    assert_int_equal(GET(m2, 9, F_WRLCK, 1000, UINT64_MAX), 0);
    assert_int_equal(lk.type, F_UNLCK);
    /* invalid */
    assert_int_equal(SET(t->m, 1, F_WRLCK, 10, 5), -EINVAL);
    assert_int_equal(GET(t->m, 1, F_UNLCK, 0, 5), -EINVAL);
    /* session_end releases */
    assert_int_equal(keg_meta_session_end(m2), 0);
    assert_int_equal(SET(t->m, 2, F_WRLCK, 50, 149), 0);           /* session 2's range is free */
    assert_int_equal(SET(t->m, 2, F_WRLCK, 0, 60), -EAGAIN);       /* owner 1 still has [0,49] */
    assert_int_equal(SET(t->m, 1, F_UNLCK, 0, UINT64_MAX), 0);
    assert_int_equal(SET(t->m, 2, F_UNLCK, 0, UINT64_MAX), 0);
    assert_int_equal(SET(t->m, 2, F_WRLCK, 0, UINT64_MAX), 0);
#undef SET
#undef GET
}

struct sess_seen {
    uint64_t sids[8];
    char info[8][64];
    int64_t hb[8];
    int n;
};

static int sess_cb(void *arg, const struct keg_session_info *s)
{
    struct sess_seen *ss = arg;
    if (ss->n < 8) {
        ss->sids[ss->n] = s->sid;
        ss->hb[ss->n] = s->heartbeat;
        snprintf(ss->info[ss->n], sizeof(ss->info[0]), "%s", s->info);
        ss->n++;
    }
    return 0;
}

static void test_sessions(void **state)
{
    struct t *t = *state;
    struct keg_meta *m2 = second(t);
    struct sess_seen ss;
    uint64_t s1, s2;
    uint32_t cleaned = 99;
    struct keg_unlinked g;
    struct keg_attr a;
    int seen;
    memset(&ss, 0, sizeof(ss));
    assert_int_equal(keg_meta_session_list(t->m, sess_cb, &ss), 0);
    assert_int_equal(ss.n, 0);
    assert_int_equal(keg_meta_session_heartbeat(t->m), -EINVAL);   /* none begun */
    int64_t now = keg_now_ns() / 1000000000LL;
    assert_int_equal(keg_meta_session_begin(t->m, "host=a pid=1", &s1), 0);
    assert_int_equal(keg_meta_session_begin(t->m, "again", &s2), -EEXIST);
    assert_int_equal(keg_meta_session_begin(m2, "host=b pid=2", &s2), 0);
    memset(&ss, 0, sizeof(ss));
    assert_int_equal(keg_meta_session_list(t->m, sess_cb, &ss), 0);
    assert_int_equal(ss.n, 2);
    assert_int_equal(ss.sids[0], s1);
    assert_string_equal(ss.info[0], "host=a pid=1");
    assert_int_equal(ss.sids[1], s2);
    assert_string_equal(ss.info[1], "host=b pid=2");
    assert_true(ss.hb[0] >= now && ss.hb[0] <= now + 5);
    assert_int_equal(keg_meta_session_heartbeat(t->m), 0);

    /* session 2 holds locks and a pending inode */
    uint64_t f = mkfile(m2, KEG_ROOT_INO, "f");
    uint64_t sl = write_at(m2, f, 0, 10);
    struct keg_plock lk = {.type = F_WRLCK, .start = 0, .end = 10, .pid = 9};
    assert_int_equal(keg_meta_setlk(m2, f, 1, &lk), 0);
    assert_int_equal(keg_meta_flock(m2, f, 1, F_WRLCK), 0);
    assert_int_equal(keg_meta_unlink(m2, KEG_ROOT_INO, "f", &g), 0);
    assert_int_equal(g.ino, f);
    uint64_t f2 = mkfile(t->m, KEG_ROOT_INO, "f2");
    assert_int_equal(keg_meta_flock(m2, f2, 1, F_WRLCK), 0);
    assert_int_equal(keg_meta_flock(t->m, f2, 1, F_RDLCK), -EAGAIN);

    /* max_age 0: every other session is stale; the caller's own never is */
    assert_int_equal(keg_meta_session_clean_stale(t->m, 0, &cleaned), 0);
    assert_int_equal(cleaned, 1);
    memset(&ss, 0, sizeof(ss));
    assert_int_equal(keg_meta_session_list(t->m, sess_cb, &ss), 0);
    assert_int_equal(ss.n, 1);
    assert_int_equal(ss.sids[0], s1);
    assert_int_equal(keg_meta_getattr(t->m, f, &a), -ENOENT);     /* purged */
    assert_int_equal(delq_drain(t->m, sl, &seen), 1);
    assert_true(seen);
    assert_int_equal(keg_meta_flock(t->m, f2, 1, F_WRLCK), 0);    /* released */
    /* the cleaned session notices on its next heartbeat */
    assert_int_equal(keg_meta_session_heartbeat(m2), -ENOENT);
    /* a fresh session is not stale for a generous max_age */
    assert_int_equal(keg_meta_session_clean_stale(second(t), 3600, &cleaned), 0);
    assert_int_equal(cleaned, 0);
}

/*----------------------------------------------------------------------------
 * Concurrency
 *--------------------------------------------------------------------------*/

#define CT_THREADS 8
#define CT_FILES   200

struct ct_arg {
    struct keg_meta *m;
    uint64_t dir;
    int id;
    int errors;
};

static void *ct_create(void *p)
{
    struct ct_arg *a = p;
    char name[32];
    for (int i = 0; i < CT_FILES; i++) {
        struct keg_attr at;
        uint64_t ino;
        if (keg_meta_alloc_ids(a->m, KEG_ID_INODE, 1, &ino) != 0) {
            a->errors++;
            continue;
        }
        snprintf(name, sizeof(name), "t%d-%03d", a->id, i);
        if (keg_meta_mknod(a->m, a->dir, name, ino, S_IFREG | 0644, 0, 0, 0, NULL, &at))
            a->errors++;
        if (i % 50 == 0 && keg_meta_getattr(a->m, a->dir, &at))
            a->errors++;
    }
    return NULL;
}

static void *ct_read(void *p)
{
    struct ct_arg *a = p;
    struct names nm;
    for (int i = 0; i < 100; i++) {
        struct keg_attr at;
        if (keg_meta_getattr(a->m, a->dir, &at) != 0)
            a->errors++;
        memset(&nm, 0, sizeof(nm));
        if (keg_meta_readdir(a->m, a->dir, NULL, 10, 1, names_cb, &nm) != 10)
            a->errors++;
    }
    return NULL;
}

struct rn_arg {
    struct keg_meta *m;
    uint64_t a, b;
    int dir;            /* 0: move a->b, 1: move b->a */
    int errors;
};

static void *ct_rename(void *p)
{
    struct rn_arg *r = p;
    char name[16];
    struct keg_attr mv;
    struct keg_unlinked g;
    uint64_t from = r->dir ? r->b : r->a, to = r->dir ? r->a : r->b;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 20; i++) {
            snprintf(name, sizeof(name), "%c%02d", i % 2 ? 'f' : 'd', i);
            int rc = keg_meta_rename(r->m, from, name, to, name, 0, &mv, &g);
            if (rc != 0 && rc != -ENOENT)
                r->errors++;
        }
        uint64_t t = from;
        from = to;
        to = t;
    }
    return NULL;
}

static void test_concurrency(void **state)
{
    struct t *t = *state;
    struct keg_meta *m2 = second(t);
    pthread_t th[CT_THREADS];
    struct ct_arg ca[CT_THREADS];
    uint64_t d = mkdir_(t->m, KEG_ROOT_INO, "many");
    for (int i = 0; i < CT_THREADS; i++) {
        ca[i] = (struct ct_arg){.m = t->m, .dir = d, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, ct_create, &ca[i]), 0);
    }
    for (int i = 0; i < CT_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(ca[i].errors, 0);
    }
    assert_int_equal(count_entries(t->m, d), CT_THREADS * CT_FILES);
    assert_int_equal(count_entries(m2, d), CT_THREADS * CT_FILES);
    assert_int_equal(attr(t->m, d).nlink, 2);
    uint64_t used_b, used_i;
    assert_int_equal(keg_meta_statfs(m2, &used_b, &used_i), 0);
    assert_int_equal(used_i, CT_THREADS * CT_FILES + 1);

    /* more reader threads than an engine may have connections */
    pthread_t rd[24];
    struct ct_arg ra_[24];
    for (int i = 0; i < 24; i++) {
        ra_[i] = (struct ct_arg){.m = i % 2 ? m2 : t->m, .dir = d, .id = i};
        assert_int_equal(pthread_create(&rd[i], NULL, ct_read, &ra_[i]), 0);
    }
    for (int i = 0; i < 24; i++) {
        pthread_join(rd[i], NULL);
        assert_int_equal(ra_[i].errors, 0);
    }

    /* two instances race renames of files and dirs between a and b */
    uint64_t a = mkdir_(t->m, KEG_ROOT_INO, "a");
    uint64_t b = mkdir_(t->m, KEG_ROOT_INO, "b");
    char name[16];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "%c%02d", i % 2 ? 'f' : 'd', i);
        if (i % 2)
            mkfile(t->m, a, name);
        else
            mkdir_(t->m, a, name);
    }
    struct rn_arg ra[4] = {
        {.m = t->m, .a = a, .b = b, .dir = 0}, {.m = m2, .a = a, .b = b, .dir = 1},
        {.m = t->m, .a = a, .b = b, .dir = 1}, {.m = m2, .a = a, .b = b, .dir = 0},
    };
    pthread_t rt[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&rt[i], NULL, ct_rename, &ra[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(rt[i], NULL);
        assert_int_equal(ra[i].errors, 0);
    }
    int na = count_entries(t->m, a), nb = count_entries(t->m, b);
    assert_int_equal(na + nb, 20);
    uint32_t dirs_a = 0, dirs_b = 0;
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "%c%02d", i % 2 ? 'f' : 'd', i);
        uint64_t ia = lookup_ino(t->m, a, name), ib = lookup_ino(t->m, b, name);
        assert_true((ia != 0) != (ib != 0));        /* exactly one name */
        struct keg_attr x = attr(m2, ia ? ia : ib);
        if (i % 2) {
            assert_int_equal(x.nlink, 1);
        } else {
            assert_int_equal(x.nlink, 2);
            assert_int_equal(x.parent, ia ? a : b);
            if (ia)
                dirs_a++;
            else
                dirs_b++;
        }
    }
    assert_int_equal(attr(m2, a).nlink, 2 + dirs_a);
    assert_int_equal(attr(m2, b).nlink, 2 + dirs_b);
}

/* Failing the Nth allocation makes ops fail cleanly (no crash, no leak under
 * ASan) and leaves the volume usable. */
static void test_alloc_failures(void **state)
{
    struct t *t = *state;
    struct names nm;
    struct sess_seen ss;
    struct keg_format f;
    struct keg_slice *sl;
    struct keg_del_slice d[4];
    size_t n;
    uint64_t sid;
    uint64_t dir = mkdir_(t->m, KEG_ROOT_INO, "d");
    uint64_t f1 = mkfile(t->m, dir, "f1");
    mkfile(t->m, dir, "f2");
    write_at(t->m, f1, 0, 100);
    assert_int_equal(keg_meta_session_begin(t->m, "x", &sid), 0);
    for (long i = 1; i <= 12; i++) {
        keg_mem_fail_at(i);
        memset(&nm, 0, sizeof(nm));
        int rc = keg_meta_readdir(t->m, dir, NULL, 0, 1, names_cb, &nm);
        assert_true(rc == 2 || rc < 0);
        keg_mem_fail_at(i);
        memset(&ss, 0, sizeof(ss));
        rc = keg_meta_session_list(t->m, sess_cb, &ss);
        assert_true(rc <= 0);
        keg_mem_fail_at(i);
        sl = NULL;
        rc = keg_meta_read_chunk(t->m, f1, 0, &sl, &n);
        assert_true(rc <= 0);
        if (rc == 0)
            keg_free(sl);
        keg_mem_fail_at(i);
        rc = keg_meta_format_load(t->m, &f);
        assert_true(rc <= 0);
        keg_mem_fail_at(i);
        rc = keg_meta_delq_peek(t->m, d, 4);
        assert_true(rc <= 0);
        keg_mem_fail_at(0);
    }
    keg_mem_fail_at(0);
    memset(&nm, 0, sizeof(nm));
    assert_int_equal(keg_meta_readdir(t->m, dir, NULL, 0, 1, names_cb, &nm), 2);
    assert_int_equal(keg_meta_format_load(t->m, &f), 0);
}

/*----------------------------------------------------------------------------
 * main
 *--------------------------------------------------------------------------*/

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(void)
{
    const char *env = getenv("KEG_TEST_META_URL_FMT");
    if (env && *env) {
        snprintf(g_fmt, sizeof(g_fmt), "%s", env);
    } else {
        snprintf(g_tmpdir, sizeof(g_tmpdir), "/tmp/keg-meta-contract-XXXXXX");
        if (!mkdtemp(g_tmpdir)) {
            perror("mkdtemp");
            return 1;
        }
        snprintf(g_fmt, sizeof(g_fmt), "sqlite3://%s/%%s.db", g_tmpdir);
    }
    if (!getenv("KEG_TEST_VERBOSE"))
        keg_log_set_level(LOG_ERR - 1);   /* expected errors stay quiet */
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_format_missing),
        T(test_format_roundtrip),
        T(test_alloc_ids),
        T(test_root_lookup_getattr),
        T(test_mknod_types),
        T(test_setgid_inherit),
        T(test_setattr),
        T(test_link),
        T(test_link_max),
        T(test_unlink_pending_purge),
        T(test_unlink_no_session),
        T(test_unlink_inline_purge),
        T(test_parent_attrs),
        T(test_rmdir),
        T(test_rename_basic),
        T(test_rename_dirs),
        T(test_rename_replace_file),
        T(test_rename_exchange),
        T(test_readdir),
        T(test_write_read_chunks),
        T(test_write_share),
        T(test_write_append),
        T(test_write_append_concurrent),
        T(test_truncate),
        T(test_alloc_bytes),
        T(test_truncate_huge_sparse),
        T(test_next_chunk),
        T(test_purge_many_chunks),
        T(test_compact),
        T(test_compact_refs),
        T(test_compact_keep),
        T(test_delq),
        cmocka_unit_test_setup_teardown(test_quota, setup_quota, teardown),
        T(test_xattr),
        T(test_flock),
        T(test_session_resume),
        T(test_plock),
        T(test_sessions),
        T(test_concurrency),
        T(test_alloc_failures),
    };
#undef T
    int rc = cmocka_run_group_tests_name("meta_contract", tests, NULL, NULL);
    if (g_tmpdir[0])
        nftw(g_tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
