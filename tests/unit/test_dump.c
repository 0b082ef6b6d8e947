/* test_dump.c -- kegfs dump/load (core/meta/dump.c) on the SQLite engine + file
 * store in mkdtemp directories: a namespace with every kind of inode, dumped,
 * loaded into a new database and dumped again (byte-identical), every file
 * read back through core/fs, counters after load, refusal of a non-empty
 * target, truncated / malformed / inconsistent dumps (error, target left
 * empty), non-UTF-8 names, a tree deeper than yajl's nesting limit. */
#define _GNU_SOURCE 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/sysmacros.h>

#include "keg/dump.h"
#include "keg/log.h"
#include "test_fs_helpers.h"

#define BS  (64u << 10)
#define MIB (1u << 20)

static const struct keg_ctx root_ctx = {.uid = 0, .gid = 0};

/* Non-UTF-8 byte strings: latin-1, invalid lead bytes, an encoded surrogate. */
static const char name_latin1[] = "caf\xe9";
static const char name_ff[] = "\xff\xfe\x80";
static const char name_surr[] = "s\xed\xa0\x80";
static const unsigned char xbin[] = {0, 1, 2, 0xff, 0, 0x80, '"', '\\'};

static uint64_t rs = 0x9E3779B97F4A7C15ULL;

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rs ^= rs << 13;
        rs ^= rs >> 7;
        rs ^= rs << 17;
        p[i] = (uint8_t)rs;
    }
}

/*----- building the source volume -----*/

static uint64_t mk_dir(struct tvol *v, uint64_t parent, const char *name, uint32_t mode)
{
    struct keg_attr a;
    assert_int_equal(keg_fs_mkdir(v->fs, &root_ctx, parent, name, mode, &a), 0);
    return a.ino;
}

static uint64_t mk_file(struct tvol *v, uint64_t parent, const char *name, uint64_t off,
                        const void *data, size_t n)
{
    uint64_t ino;
    struct keg_fh *fh = tvol_create(v, parent, name, &ino);
    if (n)
        assert_int_equal(keg_fs_write(v->fs, fh, off, data, n), (ssize_t)n);
    assert_int_equal(keg_fs_release(v->fs, fh), 0);
    return ino;
}

static void set_size(struct tvol *v, uint64_t ino, uint64_t size)
{
    struct keg_attr in, out;
    memset(&in, 0, sizeof(in));
    in.size = size;
    assert_int_equal(keg_fs_setattr(v->fs, &root_ctx, ino, KEG_FS_SET_SIZE, &in, &out), 0);
}

static void set_owner_times(struct tvol *v, uint64_t ino, uint32_t mode, uint32_t uid,
                            uint32_t gid, int64_t t)
{
    struct keg_attr in, out;
    memset(&in, 0, sizeof(in));
    in.mode = mode;
    in.uid = uid;
    in.gid = gid;
    in.atime = t;
    in.atimensec = 123;
    in.mtime = t + 1;
    in.mtimensec = 999999999;
    assert_int_equal(keg_fs_setattr(v->fs, &root_ctx, ino,
                                    KEG_SET_UID | KEG_SET_GID | KEG_SET_ATIME | KEG_SET_MTIME,
                                    &in, &out), 0);
    /* mode last: chown may clear set-id bits */
    assert_int_equal(keg_fs_setattr(v->fs, &root_ctx, ino, KEG_SET_MODE, &in, &out), 0);
}

/* Every kind of inode and record a dump must carry. */
static void build_tree(struct tvol *v)
{
    struct keg_meta *m;
    struct keg_attr a;
    uint8_t *big = keg_malloc(3 * MIB);
    char name[32];
    uint64_t d, sub, g, ino, small, bigino, deep;

    tvol_mount(v);
    m = keg_fs_meta(v->fs);
    fill_random(big, 3 * MIB);
    d = mk_dir(v, KEG_ROOT_INO, "d", 0755);
    sub = mk_dir(v, d, "sub", 0700);
    small = mk_file(v, d, "small", 0, "hello, world\n", 13);
    bigino = mk_file(v, d, "big", 0, big, 3 * MIB);
    /* data in chunk 2 of a sparse 130 MiB file, and a sparse file without chunks */
    ino = mk_file(v, KEG_ROOT_INO, "sparse", 2 * KEG_CHUNK_SIZE + 5, big, 1000);
    set_size(v, ino, 130ull * MIB);
    ino = mk_file(v, KEG_ROOT_INO, "holes-only", 0, NULL, 0);
    set_size(v, ino, 77777);
    /* shrink (a hole record) then grow: 1000 bytes of data then zeros */
    ino = mk_file(v, KEG_ROOT_INO, "shrunk", 0, big, 200000);
    set_size(v, ino, 1000);
    set_size(v, ino, 5000);
    /* copy_range: slices shared between big and copy */
    {
        uint64_t cino;
        struct keg_fh *in = tvol_open(v, bigino, O_RDONLY);
        struct keg_fh *out = tvol_create(v, d, "copy", &cino);
        assert_int_equal(keg_fs_copy_range(v->fs, &root_ctx, in, MIB, out, 4096, MIB, 0),
                         (ssize_t)MIB);
        assert_int_equal(keg_fs_copy_range(v->fs, &root_ctx, in, 0, out, 2 * MIB, 4096, 0),
                         4096);
        assert_int_equal(keg_fs_release(v->fs, in), 0);
        assert_int_equal(keg_fs_release(v->fs, out), 0);
    }
    /* hard links in three directories */
    assert_int_equal(keg_fs_link(v->fs, &root_ctx, small, KEG_ROOT_INO, "hl1", &a), 0);
    assert_int_equal(keg_fs_link(v->fs, &root_ctx, small, sub, "hl2", &a), 0);
    assert_int_equal(keg_fs_link(v->fs, &root_ctx, bigino, sub, "big-link", &a), 0);
    /* symlinks, one with a non-UTF-8 target */
    assert_int_equal(keg_fs_symlink(v->fs, &root_ctx, KEG_ROOT_INO, "ln", "d/small", &a), 0);
    assert_int_equal(keg_fs_symlink(v->fs, &root_ctx, d, "lnbad", name_latin1, &a), 0);
    /* non-UTF-8 names */
    mk_file(v, KEG_ROOT_INO, name_latin1, 0, "latin", 5);
    ino = mk_dir(v, KEG_ROOT_INO, name_ff, 0750);
    mk_file(v, ino, name_surr, 0, "surrogate", 9);
    /* xattrs: text, binary, empty, a non-UTF-8 name; on a file, a dir, the root */
    assert_int_equal(keg_fs_setxattr(v->fs, &root_ctx, small, "user.text", "hello", 5, 0), 0);
    assert_int_equal(keg_fs_setxattr(v->fs, &root_ctx, small, "user.bin", xbin, sizeof(xbin),
                                     0), 0);
    assert_int_equal(keg_meta_setxattr(m, small, "user.\xe9t\xe9", "v", 1, 0), 0);
    assert_int_equal(keg_meta_setxattr(m, d, "user.empty", "", 0, 0), 0);
    assert_int_equal(keg_fs_setxattr(v->fs, &root_ctx, KEG_ROOT_INO, "user.root", "r", 1, 0),
                     0);
    /* special files */
    assert_int_equal(keg_fs_mknod(v->fs, &root_ctx, KEG_ROOT_INO, "fifo", S_IFIFO | 0644, 0,
                                  &a), 0);
    assert_int_equal(keg_fs_mknod(v->fs, &root_ctx, d, "null", S_IFCHR | 0666, makedev(1, 3),
                                  &a), 0);
    assert_int_equal(keg_fs_mknod(v->fs, &root_ctx, d, "blk", S_IFBLK | 0600, makedev(8, 1),
                                  &a), 0);
    assert_int_equal(keg_fs_mknod(v->fs, &root_ctx, sub, "sock", S_IFSOCK | 0755, 0, &a), 0);
    /* a setgid directory owned by another group: children inherit */
    g = mk_dir(v, KEG_ROOT_INO, "sgid", 0775);
    set_owner_times(v, g, 02775, 0, 100, 1000000000);
    mk_dir(v, g, "child", 0700);
    mk_file(v, g, "f", 0, "x", 1);
    /* owners, set-id bits and times */
    set_owner_times(v, small, 04755, 1234, 5678, 946684800);
    set_owner_times(v, d, 01777, 42, 43, 1234567890);
    /* 700 entries: several readdir pages, and the slice-id set grows */
    ino = mk_dir(v, KEG_ROOT_INO, "many", 0755);
    for (int i = 0; i < 700; i++) {
        snprintf(name, sizeof(name), "f%03d", i);
        mk_file(v, ino, name, 0, name, 4);
    }
    /* deeper than yajl's 128 nesting levels */
    deep = KEG_ROOT_INO;
    for (int i = 0; i < 150; i++)
        deep = mk_dir(v, deep, "n", 0755);
    mk_file(v, deep, "bottom", 0, "deep", 4);
    /* an unlinked inode is not dumped */
    ino = mk_file(v, KEG_ROOT_INO, "gone", 0, "bye", 3);
    assert_int_equal(keg_fs_unlink(v->fs, &root_ctx, KEG_ROOT_INO, "gone"), 0);
    tvol_umount(v);
    keg_free(big);
}

/*----- helpers -----*/

struct vol2 {
    char dir[128];
    char url[192];
};

static void vol2_init(struct vol2 *w)
{
    snprintf(w->dir, sizeof(w->dir), "/tmp/kegfs-dump-test-XXXXXX");
    assert_non_null(mkdtemp(w->dir));
    snprintf(w->url, sizeof(w->url), "sqlite3://%s/meta.db", w->dir);
}

static void vol2_cleanup(struct vol2 *w)
{
    nftw(w->dir, tvol_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* Dumps url into a new buffer.  OWNERSHIP: caller free()s *out. */
static int dump_url(const char *url, unsigned flags, char **out, size_t *len,
                    struct keg_dump_stats *st)
{
    struct keg_meta *m = NULL;
    FILE *f;
    int rc;
    *out = NULL;
    *len = 0;
    assert_int_equal(keg_meta_open(url, &m), 0);
    f = open_memstream(out, len);
    assert_non_null(f);
    rc = keg_meta_dump(m, f, flags, NULL, NULL, st);
    fclose(f);
    keg_meta_close(m);
    return rc;
}

static int load_buf(const char *url, const char *buf, size_t len, unsigned flags,
                    struct keg_dump_stats *st)
{
    struct keg_meta *m = NULL;
    FILE *f;
    int rc;
    assert_int_equal(keg_meta_open(url, &m), 0);
    f = fmemopen((void *)buf, len ? len : 1, "r");
    assert_non_null(f);
    if (!len)
        fgetc(f);   /* an empty input */
    rc = keg_meta_load(m, f, flags, NULL, NULL, st, NULL);
    fclose(f);
    keg_meta_close(m);
    return rc;
}

static int formatted(const char *url)
{
    struct keg_meta *m = NULL;
    struct keg_format f;
    assert_int_equal(keg_meta_open(url, &m), 0);
    int rc = keg_meta_format_load(m, &f);
    keg_meta_close(m);
    assert_true(rc == 0 || rc == -ENOENT);
    return rc == 0;
}

static uint64_t json_u64(const char *json, const char *key)
{
    char k[64];
    snprintf(k, sizeof(k), "\"%s\":", key);
    const char *p = strstr(json, k);
    assert_non_null(p);
    return strtoull(p + strlen(k), NULL, 10);
}

/*----- comparing two volumes -----*/

struct names {
    char   **v;
    uint64_t *ino;
    size_t   n;
};

static int names_cb(void *arg, const struct keg_dirent *de)
{
    struct names *nm = arg;
    nm->v = realloc(nm->v, (nm->n + 1) * sizeof(char *));
    nm->ino = realloc(nm->ino, (nm->n + 1) * sizeof(uint64_t));
    nm->v[nm->n] = strdup(de->name);
    nm->ino[nm->n] = de->ino;
    nm->n++;
    return 0;
}

static void names_free(struct names *nm)
{
    for (size_t i = 0; i < nm->n; i++)
        free(nm->v[i]);
    free(nm->v);
    free(nm->ino);
}

static void compare_content(struct keg_fs *fa, struct keg_fs *fb, uint64_t ino, uint64_t size)
{
    struct keg_fh *ha = NULL, *hb = NULL;
    int keep;
    size_t bufsz = 4 * MIB;
    char *ba = malloc(bufsz), *bb = malloc(bufsz);
    assert_int_equal(keg_fs_open(fa, &root_ctx, ino, O_RDONLY, &ha, &keep), 0);
    assert_int_equal(keg_fs_open(fb, &root_ctx, ino, O_RDONLY, &hb, &keep), 0);
    for (uint64_t off = 0; off < size + 1; off += bufsz) {
        ssize_t na = keg_fs_read(fa, ha, off, ba, bufsz);
        ssize_t nb = keg_fs_read(fb, hb, off, bb, bufsz);
        assert_true(na >= 0);
        assert_int_equal(na, nb);
        assert_memory_equal(ba, bb, (size_t)na);
    }
    keg_fs_release(fa, ha);
    keg_fs_release(fb, hb);
    free(ba);
    free(bb);
}

static void compare_xattrs(struct keg_meta *ma, struct keg_meta *mb, uint64_t ino)
{
    char la[4096], lb[4096], va[512], vb[512];
    ssize_t na = keg_meta_listxattr(ma, ino, la, sizeof(la));
    ssize_t nb = keg_meta_listxattr(mb, ino, lb, sizeof(lb));
    assert_true(na >= 0);
    assert_int_equal(na, nb);
    assert_memory_equal(la, lb, (size_t)na);
    for (ssize_t o = 0; o < na; o += (ssize_t)strlen(la + o) + 1) {
        ssize_t xa = keg_meta_getxattr(ma, ino, la + o, va, sizeof(va));
        ssize_t xb = keg_meta_getxattr(mb, ino, la + o, vb, sizeof(vb));
        assert_true(xa >= 0);
        assert_int_equal(xa, xb);
        assert_memory_equal(va, vb, (size_t)xa);
    }
}

static void compare_attr(const struct keg_attr *x, const struct keg_attr *y)
{
    assert_int_equal(x->ino, y->ino);
    assert_int_equal(x->mode, y->mode);
    assert_int_equal(x->uid, y->uid);
    assert_int_equal(x->gid, y->gid);
    assert_int_equal(x->nlink, y->nlink);
    assert_int_equal(x->size, y->size);
    assert_int_equal(x->rdev, y->rdev);
    assert_int_equal(x->parent, y->parent);
    assert_int_equal(x->atime, y->atime);
    assert_int_equal(x->atimensec, y->atimensec);
    assert_int_equal(x->mtime, y->mtime);
    assert_int_equal(x->mtimensec, y->mtimensec);
    assert_int_equal(x->ctime, y->ctime);
    assert_int_equal(x->ctimensec, y->ctimensec);
}

/* Walks both volumes: same names, inode numbers, attributes, xattrs, targets,
 * chunk lists and file content.  Returns the number of entries. */
static uint64_t compare_tree(struct keg_fs *fa, struct keg_fs *fb, uint64_t dir)
{
    struct keg_meta *ma = keg_fs_meta(fa), *mb = keg_fs_meta(fb);
    struct names na = {0}, nb = {0};
    struct keg_attr x, y;
    uint64_t count = 1;
    assert_true(keg_meta_readdir(ma, dir, NULL, 0, 0, names_cb, &na) >= 0);
    assert_true(keg_meta_readdir(mb, dir, NULL, 0, 0, names_cb, &nb) >= 0);
    assert_int_equal(na.n, nb.n);
    for (size_t i = 0; i < na.n; i++) {
        assert_string_equal(na.v[i], nb.v[i]);
        assert_int_equal(na.ino[i], nb.ino[i]);
        assert_int_equal(keg_meta_getattr(ma, na.ino[i], &x), 0);
        assert_int_equal(keg_meta_getattr(mb, na.ino[i], &y), 0);
        compare_attr(&x, &y);
        compare_xattrs(ma, mb, x.ino);
        if (S_ISDIR(x.mode)) {
            count += compare_tree(fa, fb, x.ino);
            continue;
        }
        count++;
        if (S_ISLNK(x.mode)) {
            char ta[4096], tb[4096];
            ssize_t la = keg_meta_readlink(ma, x.ino, ta, sizeof(ta));
            ssize_t lb = keg_meta_readlink(mb, x.ino, tb, sizeof(tb));
            assert_true(la > 0);
            assert_int_equal(la, lb);
            assert_memory_equal(ta, tb, (size_t)la);
        }
        if (S_ISREG(x.mode)) {
            for (uint32_t c = 0; c * KEG_CHUNK_SIZE < x.size; c++) {
                struct keg_slice *sa = NULL, *sb = NULL;
                size_t ca = 0, cb = 0;
                assert_int_equal(keg_meta_read_chunk(ma, x.ino, c, &sa, &ca), 0);
                assert_int_equal(keg_meta_read_chunk(mb, x.ino, c, &sb, &cb), 0);
                assert_int_equal(ca, cb);
                if (ca)
                    assert_memory_equal(sa, sb, ca * sizeof(*sa));
                keg_free(sa);
                keg_free(sb);
            }
            compare_content(fa, fb, x.ino, x.size);
        }
    }
    names_free(&na);
    names_free(&nb);
    return count;
}

/*----- tests -----*/

static void test_roundtrip(void **state)
{
    struct tvol v;
    struct vol2 w;
    struct keg_dump_stats s1, s2, sl;
    char *j1 = NULL, *j2 = NULL;
    size_t l1 = 0, l2 = 0;
    struct keg_fs *fb = NULL;
    struct keg_fs_conf conf;
    struct keg_attr ra, rb;
    (void)state;

    tvol_init(&v, BS, "none");
    build_tree(&v);
    vol2_init(&w);

    assert_int_equal(dump_url(v.url, 0, &j1, &l1, &s1), 0);
    assert_true(l1 > 0);
    /* root, d, sub, name_ff, sgid, sgid/child, many, 150 deep */
    assert_int_equal(s1.dirs, 1 + 2 + 1 + 2 + 1 + 150);
    assert_int_equal(s1.links, 3);
    assert_int_equal(s1.symlinks, 2);
    assert_int_equal(s1.others, 4);
    assert_int_equal(s1.xattrs, 5);
    assert_true(s1.slices >= 8);
    /* byte strings that are not UTF-8 went to *_b64 keys; the JSON is UTF-8 */
    assert_non_null(strstr(j1, "\"name_b64\":\"Y2Fm6Q==\""));       /* caf\xe9 */
    assert_non_null(strstr(j1, "\"symlink_b64\":\"Y2Fm6Q==\""));
    assert_non_null(strstr(j1, "\"name\":\"user.text\""));
    assert_null(strstr(j1, "\"gone\""));
    assert_non_null(strstr(j1, "\"secrets_omitted\":true"));

    assert_int_equal(load_buf(w.url, j1, l1, 0, &sl), 0);
    assert_memory_equal(&sl, &s1, sizeof(sl));

    /* dump again: the same bytes */
    assert_int_equal(dump_url(w.url, 0, &j2, &l2, &s2), 0);
    assert_int_equal(l1, l2);
    assert_memory_equal(j1, j2, l1);

    /* every inode, attribute, xattr, chunk list and byte is the same */
    tvol_mount_conf(&v, 1, 1, 0);
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = w.url;
    conf.no_session = 1;
    conf.read_only = 1;
    assert_int_equal(keg_fs_new(&conf, &fb), 0);
    assert_int_equal(keg_meta_getattr(keg_fs_meta(v.fs), KEG_ROOT_INO, &ra), 0);
    assert_int_equal(keg_meta_getattr(keg_fs_meta(fb), KEG_ROOT_INO, &rb), 0);
    compare_attr(&ra, &rb);
    compare_xattrs(keg_fs_meta(v.fs), keg_fs_meta(fb), KEG_ROOT_INO);
    assert_int_equal(compare_tree(v.fs, fb, KEG_ROOT_INO), s1.entries);   /* names */
    /* used space and inodes are recharged */
    {
        uint64_t ua, ia, ub, ib;
        assert_int_equal(keg_meta_statfs(keg_fs_meta(v.fs), &ua, &ia), 0);
        assert_int_equal(keg_meta_statfs(keg_fs_meta(fb), &ub, &ib), 0);
        assert_int_equal(ua, ub);
        assert_int_equal(ia, ib);
    }
    keg_fs_free(fb);
    tvol_umount(&v);

    /* ids handed out after the load are above every dumped one (the second
     * dump above probed, and so used, one of each) */
    {
        struct keg_meta *m = NULL;
        uint64_t first;
        assert_int_equal(keg_meta_open(w.url, &m), 0);
        assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_INODE, 1, &first), 0);
        assert_int_equal(first, json_u64(j1, "next_inode") + 1);
        assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_SLICE, 1, &first), 0);
        assert_int_equal(first, json_u64(j1, "next_slice") + 1);
        keg_meta_close(m);
    }
    free(j1);
    free(j2);
    vol2_cleanup(&w);
    tvol_cleanup(&v);
}

static void test_pretty_and_secrets(void **state)
{
    struct tvol v;
    struct vol2 w;
    struct keg_meta *m = NULL;
    struct keg_format f;
    char *j = NULL, *j2 = NULL;
    size_t l = 0, l2 = 0;
    (void)state;

    tvol_init(&v, BS, "none");
    /* credentials in the format */
    assert_int_equal(keg_meta_open(v.url, &m), 0);
    assert_int_equal(keg_meta_format_load(m, &f), 0);
    snprintf(f.access_key, sizeof(f.access_key), "AKIAEXAMPLE");
    snprintf(f.secret_key, sizeof(f.secret_key), "s3cr3t/with\"quote");
    f.capacity = 1ull << 40;
    f.inodes = 1000;
    assert_int_equal(keg_meta_format_init(m, &f, 0755, 0, 0, 1), 0);
    keg_meta_close(m);

    assert_int_equal(dump_url(v.url, 0, &j, &l, NULL), 0);
    assert_null(strstr(j, "s3cr3t"));
    assert_null(strstr(j, "AKIAEXAMPLE"));
    free(j);

    assert_int_equal(dump_url(v.url, KEG_DUMP_KEEP_SECRETS | KEG_DUMP_PRETTY, &j, &l, NULL), 0);
    assert_non_null(strstr(j, "s3cr3t/with\\\"quote"));
    assert_non_null(strchr(j, '\n'));
    vol2_init(&w);
    assert_int_equal(load_buf(w.url, j, l, 0, NULL), 0);
    assert_int_equal(keg_meta_open(w.url, &m), 0);
    assert_int_equal(keg_meta_format_load(m, &f), 0);
    assert_string_equal(f.secret_key, "s3cr3t/with\"quote");
    assert_string_equal(f.access_key, "AKIAEXAMPLE");
    assert_int_equal(f.capacity, 1ull << 40);       /* quotas restored */
    assert_int_equal(f.inodes, 1000);
    keg_meta_close(m);
    assert_int_equal(dump_url(w.url, KEG_DUMP_KEEP_SECRETS | KEG_DUMP_PRETTY, &j2, &l2, NULL),
                     0);
    assert_int_equal(l, l2);
    assert_memory_equal(j, j2, l);
    free(j);
    free(j2);
    vol2_cleanup(&w);
    tvol_cleanup(&v);
}

static void test_refuse_nonempty(void **state)
{
    struct tvol v, t;
    char *j = NULL;
    size_t l = 0;
    struct keg_meta *m = NULL;
    struct keg_attr a;
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    mk_file(&v, KEG_ROOT_INO, "a", 0, "a", 1);
    tvol_umount(&v);
    assert_int_equal(dump_url(v.url, 0, &j, &l, NULL), 0);

    /* a target that holds a volume (with a file) is refused and left alone */
    tvol_init(&t, BS, "none");
    tvol_mount(&t);
    mk_file(&t, KEG_ROOT_INO, "keep", 0, "k", 1);
    tvol_umount(&t);
    assert_int_equal(load_buf(t.url, j, l, 0, NULL), -EEXIST);
    assert_int_equal(keg_meta_open(t.url, &m), 0);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "keep", &a), 0);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "a", &a), -ENOENT);
    keg_meta_close(m);
    /* loading twice into the same engine: the second is refused */
    struct vol2 w;
    vol2_init(&w);
    assert_int_equal(load_buf(w.url, j, l, 0, NULL), 0);
    assert_int_equal(load_buf(w.url, j, l, 0, NULL), -EEXIST);
    assert_true(formatted(w.url));
    free(j);
    vol2_cleanup(&w);
    tvol_cleanup(&t);
    tvol_cleanup(&v);
}

static void test_truncated_and_malformed(void **state)
{
    struct tvol v;
    char *j = NULL;
    size_t l = 0;
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    uint64_t d = mk_dir(&v, KEG_ROOT_INO, "d", 0755);
    for (int i = 0; i < 20; i++) {
        char name[16];
        snprintf(name, sizeof(name), "f%d", i);
        mk_file(&v, d, name, 0, name, strlen(name));
    }
    tvol_umount(&v);
    assert_int_equal(dump_url(v.url, 0, &j, &l, NULL), 0);

    /* every cut: an error, and the target is empty again */
    size_t cuts[] = {0, 1, 10, l / 4, l / 2, l - 40, l - 3, l - 2};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        struct vol2 w;
        vol2_init(&w);
        assert_int_equal(load_buf(w.url, j, cuts[i], 0, NULL), -EINVAL);
        assert_false(formatted(w.url));
        vol2_cleanup(&w);
    }
    /* --keep-partial keeps the partial volume */
    {
        struct vol2 w;
        vol2_init(&w);
        assert_int_equal(load_buf(w.url, j, l / 2, KEG_LOAD_KEEP_PARTIAL, NULL), -EINVAL);
        assert_true(formatted(w.url));
        vol2_cleanup(&w);
    }
    /* edited documents */
    struct {
        const char *from, *to;
    } edits[] = {
        {"\"files\":20", "\"files\":21"},           /* totals disagree */
        {"\"kegfs_dump\":1", "\"kegfs_dump\":2"},   /* unknown version */
        {"\"mode\":", "\"mood\":"},                  /* unknown key */
        {"\"tree\":[", "\"tree\":[3,"},             /* wrong type */
        {"\"parent\":1,", "\"parent\":99,"},        /* parent not open */
        {"\"uid\":0", "\"uid\":-1"},                /* out of range */
        {"\"uid\":0", "\"uid\":0.5"},               /* not an integer */
        {"\"f1\"", "\"f\\u0000\""},                 /* NUL in a name */
        {"\"f1\"", "\"f2\""},                       /* the name twice */
        {"{\"kegfs_dump\"", "[{\"kegfs_dump\""},    /* not an object */
        {"}\n", "}{}\n"},                           /* trailing garbage */
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        const char *p = strstr(j, edits[i].from);
        assert_non_null(p);
        size_t fl = strlen(edits[i].from), tl = strlen(edits[i].to);
        size_t pre = (size_t)(p - j);
        char *e = malloc(l + tl + 1);
        memcpy(e, j, pre);
        memcpy(e + pre, edits[i].to, tl);
        memcpy(e + pre + tl, p + fl, l - pre - fl);
        struct vol2 w;
        vol2_init(&w);
        assert_int_equal(load_buf(w.url, e, l - fl + tl, 0, NULL), -EINVAL);
        assert_false(formatted(w.url));
        vol2_cleanup(&w);
        free(e);
    }
    free(j);
    tvol_cleanup(&v);
}

/* The example document of docs/internals/DUMP.md loads. */
static void test_doc_example(void **state)
{
    static const char doc[] =
        "{\"kegfs_dump\":1,\n"
        " \"format\":{\"name\":\"vol1\",\"uuid\":\"0b0e1a2c-4b7e-4a8e-9c53-1d2e3f405162\","
        "\"storage\":\"file\",\"bucket\":\"/srv/kegfs/objects\",\"access_key\":\"\","
        "\"secret_key\":\"\",\"session_token\":\"\",\"secrets_omitted\":true,"
        "\"region\":\"\",\"compress\":\"none\",\"block_size\":4194304,\"capacity\":0,"
        "\"inodes\":0,\"trash_days\":0,\"meta_version\":1,\"created\":1700000000},\n"
        " \"tree\":[\n"
        "  {\"attr\":{\"ino\":1,\"mode\":16877,\"uid\":0,\"gid\":0,\"nlink\":3,\"size\":4096,"
        "\"rdev\":0,\"atime\":1700000000,\"atimensec\":0,\"mtime\":1700000100,\"mtimensec\":5,"
        "\"ctime\":1700000100,\"ctimensec\":5}},\n"
        "  {\"parent\":1,\"name\":\"docs\",\"attr\":{\"ino\":2,\"mode\":16877,\"uid\":1000,"
        "\"gid\":1000,\"nlink\":2,\"size\":4096,\"rdev\":0,\"atime\":1700000000,\"atimensec\":0,"
        "\"mtime\":1700000050,\"mtimensec\":0,\"ctime\":1700000050,\"ctimensec\":0}},\n"
        "  {\"parent\":2,\"name\":\"a.txt\",\"attr\":{\"ino\":3,\"mode\":33188,\"uid\":1000,"
        "\"gid\":1000,\"nlink\":2,\"size\":6,\"rdev\":0,\"atime\":1700000000,\"atimensec\":0,"
        "\"mtime\":1700000010,\"mtimensec\":0,\"ctime\":1700000010,\"ctimensec\":0},"
        "\"xattrs\":[{\"name\":\"user.tag\",\"value\":\"AAH/\"}],"
        "\"chunks\":[{\"indx\":0,\"slices\":[[1,6,0,6,0]]}]},\n"
        "  {\"parent\":2,\"name_b64\":\"Y2Fm6Q==\",\"link\":3},\n"
        "  {\"parent\":1,\"name\":\"ln\",\"attr\":{\"ino\":4,\"mode\":41471,\"uid\":0,\"gid\":0,"
        "\"nlink\":1,\"size\":10,\"rdev\":0,\"atime\":1700000000,\"atimensec\":0,"
        "\"mtime\":1700000000,\"mtimensec\":0,\"ctime\":1700000000,\"ctimensec\":0},"
        "\"symlink\":\"docs/a.txt\"}\n"
        " ],\n"
        " \"counters\":{\"next_inode\":5,\"next_slice\":2},\n"
        " \"totals\":{\"entries\":5,\"dirs\":2,\"files\":1,\"symlinks\":1,\"others\":0,"
        "\"links\":1,\"xattrs\":1,\"bytes\":6,\"slices\":1}}\n";
    struct vol2 w;
    struct keg_meta *m = NULL;
    struct keg_attr a;
    char val[8];
    (void)state;

    vol2_init(&w);
    assert_int_equal(load_buf(w.url, doc, sizeof(doc) - 1, 0, NULL), 0);
    assert_int_equal(keg_meta_open(w.url, &m), 0);
    assert_int_equal(keg_meta_lookup(m, 2, name_latin1, &a), 0);
    assert_int_equal(a.ino, 3);
    assert_int_equal(a.nlink, 2);
    assert_int_equal(a.mtime, 1700000010);
    assert_int_equal(keg_meta_getxattr(m, 3, "user.tag", val, sizeof(val)), 3);
    assert_memory_equal(val, "\x00\x01\xff", 3);
    assert_int_equal(keg_meta_getattr(m, 1, &a), 0);
    assert_int_equal(a.nlink, 3);
    assert_int_equal(a.mtime, 1700000100);
    assert_int_equal(a.mtimensec, 5);
    keg_meta_close(m);
    vol2_cleanup(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_pretty_and_secrets),
        cmocka_unit_test(test_refuse_nonempty),
        cmocka_unit_test(test_truncated_and_malformed),
        cmocka_unit_test(test_doc_example),
    };
    if (!getenv("KEG_TEST_VERBOSE"))
        keg_log_set_level(LOG_CRIT);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
