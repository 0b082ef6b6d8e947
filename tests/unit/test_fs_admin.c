/* test_fs_admin.c -- keg_fs_gc, keg_fs_fsck and keg_fs_warmup (keg/admin.h): injected leaks,
 * deleted and corrupted blocks are found exactly and named with their files; gc --delete
 * removes leaks and nothing referenced; the id safety limit with a live session; warmup fills
 * an SSD cache over the mem store. */
#define _GNU_SOURCE 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_fs_helpers.h"
#include "keg/admin.h"
#include "keg/stack.h"

#define BS (64u << 10)

struct items {
    int  n[7];                  /* leak, missing, corrupt, file, deleted, kept, other */
    char keys[16][256];
    int  nkeys;
    char files[8][256];
    int  nfiles;
};

static void item_cb(void *arg, const char *kind, const char *key, const char *detail)
{
    struct items *it = arg;
    static const char *kinds[] = {"leak", "missing", "corrupt", "file", "deleted", "kept"};
    int k = 6;
    (void)detail;
    for (int i = 0; i < 6; i++) {
        if (strcmp(kind, kinds[i]) == 0)
            k = i;
    }
    it->n[k]++;
    if (k == 3 && it->nfiles < 8)
        snprintf(it->files[it->nfiles++], sizeof(it->files[0]), "%s", key);
    else if (key && it->nkeys < 16)
        snprintf(it->keys[it->nkeys++], sizeof(it->keys[0]), "%s", key);
}

static int has_key(const struct items *it, const char *key)
{
    for (int i = 0; i < it->nkeys; i++) {
        if (strcmp(it->keys[i], key) == 0)
            return 1;
    }
    return 0;
}

static int has_file(const struct items *it, const char *path)
{
    for (int i = 0; i < it->nfiles; i++) {
        if (strcmp(it->files[i], path) == 0)
            return 1;
    }
    return 0;
}

static unsigned nprog;
static void prog_cb(void *arg, uint64_t done, uint64_t total, const char *what)
{
    (void)arg;
    (void)what;
    assert_true(total == 0 || done <= total);
    nprog++;
}

static void put_file(struct tvol *v, uint64_t parent, const char *name, size_t n, uint8_t seed,
                     uint64_t *ino)
{
    uint8_t *d = keg_malloc(n);
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)(i * 7 + seed);
    struct keg_fh *fh = tvol_create(v, parent, name, ino);
    assert_int_equal(keg_fs_write(v->fs, fh, 0, d, n), (ssize_t)n);
    assert_int_equal(keg_fs_release(v->fs, fh), 0);
    keg_free(d);
}

struct first_slice {
    uint64_t id;
    uint32_t size;
};

static int first_cb(void *arg, uint32_t indx, const struct keg_slice *s)
{
    struct first_slice *fs = arg;
    (void)indx;
    if (fs->id == 0 && s->id != 0) {
        fs->id = s->id;
        fs->size = s->size;
    }
    return 0;
}

/* Put a valid block object of slice id (never referenced). */
static void inject(struct tvol *v, uint64_t id, char *key, size_t ksize)
{
    uint8_t raw[1000];
    uint8_t enc[2000];
    size_t olen = 0;
    struct keg_block_id bid = {.slice = id, .indx = 0, .blen = sizeof(raw)};
    (void)keg_block_vol_uuid(keg_fs_format(v->fs)->uuid, bid.vol);
    memset(raw, 0x42, sizeof(raw));
    assert_int_equal(keg_block_encode(KEG_CODEC_NONE, &bid, raw, sizeof(raw), enc, sizeof(enc),
                                      &olen), 0);
    keg_block_key(key, ksize, "testvol", id, 0, sizeof(raw));
    assert_int_equal(keg_obj_put(keg_fs_obj(v->fs), key, enc, olen), 0);
}

/* Put a valid block of slice hdr_id of volume uuid under the key of slice id. */
static void inject_as(struct tvol *v, uint64_t id, const char *uuid, uint64_t hdr_id, char *key,
                      size_t ksize)
{
    uint8_t raw[1000];
    uint8_t enc[2000];
    size_t olen = 0;
    struct keg_block_id bid = {.slice = hdr_id, .indx = 0, .blen = sizeof(raw)};
    (void)keg_block_vol_uuid(uuid, bid.vol);
    memset(raw, 0x43, sizeof(raw));
    assert_int_equal(keg_block_encode(KEG_CODEC_NONE, &bid, raw, sizeof(raw), enc, sizeof(enc),
                                      &olen), 0);
    keg_block_key(key, ksize, "testvol", id, 0, sizeof(raw));
    assert_int_equal(keg_obj_put(keg_fs_obj(v->fs), key, enc, olen), 0);
}

static void test_admin_gc_fsck(void **state)
{
    struct tvol v;
    struct keg_attr a;
    uint64_t f1, f2, f3, dir, sub;
    char leak1[256], leak2[256], leak_new[256], key[256];
    struct keg_gc_report gr;
    struct keg_fsck_report fr;
    struct items it;
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, KEG_ROOT_INO, "d", 0755, &a), 0);
    dir = a.ino;
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, dir, "sub", 0755, &a), 0);
    sub = a.ino;
    put_file(&v, KEG_ROOT_INO, "one", 200000, 1, &f1);        /* 4 blocks */
    put_file(&v, dir, "two", 70000, 2, &f2);                  /* 2 blocks */
    put_file(&v, sub, "three", 1000, 3, &f3);                 /* 1 block */
    assert_int_equal(keg_fs_link(v.fs, &tv_root, f2, sub, "two-link", &a), 0);
    long nobj = tvol_count_objects(&v);
    assert_int_equal(nobj, 7);

    struct first_slice s1 = {0}, s2 = {0};
    assert_int_equal(keg_fs_chunks(v.fs, f1, first_cb, &s1), 0);
    assert_int_equal(keg_fs_chunks(v.fs, f2, first_cb, &s2), 0);

    /* with a live session, small unreferenced ids are not judged */
    inject(&v, s1.id + 300, leak1, sizeof(leak1));
    memset(&gr, 0, sizeof(gr));
    assert_int_equal(keg_fs_gc(v.fs, 0, &gr, NULL, NULL), 0);
    assert_int_equal(gr.leaked_objects, 0);
    assert_int_equal(gr.new_objects, 1);
    assert_int_equal(gr.live_mounters, 1);
    assert_true(gr.id_limit < gr.id_next);
    assert_true(gr.id_limit == 0 || gr.id_next - gr.id_limit == KEG_GC_ID_MARGIN);
    tvol_umount(&v);

    /* tool mode: no session is live, everything below the counter is judged */
    assert_int_equal(tvol_mount_conf(&v, 1, 0, 0), 0);
    inject(&v, s1.id + 301, leak2, sizeof(leak2));
    inject(&v, 50000000, leak_new, sizeof(leak_new));        /* above the counter */

    memset(&fr, 0, sizeof(fr));
    memset(&it, 0, sizeof(it));
    fr.item = item_cb;
    fr.item_arg = &it;
    nprog = 0;
    assert_int_equal(keg_fs_fsck(v.fs, 1, &fr, prog_cb, NULL), 0);
    assert_true(nprog > 0);
    assert_int_equal(fr.files, 3);                             /* the hard link once */
    assert_int_equal(fr.dirs, 3);
    assert_int_equal(fr.blocks, 7);
    assert_int_equal(fr.missing + fr.corrupt + fr.bad_refs + fr.errors, 0);

    memset(&gr, 0, sizeof(gr));
    memset(&it, 0, sizeof(it));
    gr.item = item_cb;
    gr.item_arg = &it;
    assert_int_equal(keg_fs_gc(v.fs, 0, &gr, prog_cb, NULL), 0);
    assert_int_equal(gr.objects, 10);
    assert_int_equal(gr.referenced_objects, 7);
    assert_int_equal(gr.leaked_objects, 2);
    assert_int_equal(gr.new_objects, 1);                       /* above the counter */
    assert_int_equal(gr.live_mounters, 0);
    assert_true(gr.id_limit == gr.id_next && gr.id_next > s1.id + 301);
    assert_int_equal(it.n[0], 2);
    assert_true(has_key(&it, leak1) && has_key(&it, leak2));
    assert_int_equal(tvol_count_objects(&v), 10);              /* report only */

    /* delete a referenced block of "two" and corrupt one of "one" */
    char path[512];
    keg_block_key(key, sizeof(key), "testvol", s2.id, 1, 70000 - BS);
    snprintf(path, sizeof(path), "%s/%s", v.objdir, key);
    assert_int_equal(unlink(path), 0);
    char ckey[256];
    keg_block_key(ckey, sizeof(ckey), "testvol", s1.id, 2, BS);
    snprintf(path, sizeof(path), "%s/%s", v.objdir, ckey);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 1000, SEEK_SET), 0);
    int ch = fgetc(f);
    assert_int_equal(fseek(f, 1000, SEEK_SET), 0);
    fputc(ch ^ 0x11, f);
    fclose(f);

    /* shallow: the missing block only */
    memset(&fr, 0, sizeof(fr));
    memset(&it, 0, sizeof(it));
    fr.item = item_cb;
    fr.item_arg = &it;
    assert_int_equal(keg_fs_fsck(v.fs, 0, &fr, NULL, NULL), 1);
    assert_int_equal(fr.missing, 1);
    assert_int_equal(fr.corrupt, 0);
    assert_true(has_key(&it, key));
    assert_int_equal(fr.problem_files, 2);                      /* both links of "two" */
    assert_true(has_file(&it, "/d/two") && has_file(&it, "/d/sub/two-link"));

    /* deep: the corrupt one too, with its file */
    memset(&fr, 0, sizeof(fr));
    memset(&it, 0, sizeof(it));
    fr.item = item_cb;
    fr.item_arg = &it;
    fr.threads = 3;
    assert_int_equal(keg_fs_fsck(v.fs, 1, &fr, NULL, NULL), 1);
    assert_int_equal(fr.missing, 1);
    assert_int_equal(fr.corrupt, 1);
    assert_true(has_key(&it, key) && has_key(&it, ckey));
    assert_int_equal(fr.problem_files, 3);
    assert_true(has_file(&it, "/one"));

    /* gc --delete deletes nothing without a volume marker naming this volume */
    struct keg_obj *o = keg_fs_obj(v.fs);
    char other[40];
    memset(&gr, 0, sizeof(gr));
    assert_int_equal(keg_fs_gc(v.fs, 1, &gr, NULL, NULL), -EPERM);
    assert_int_equal(gr.deleted_objects, 0);
    assert_int_equal(tvol_count_objects(&v), 10 - 1);
    assert_int_equal(keg_volume_marker_claim(o, "testvol", "11111111-2222-4333-8444-555555555555",
                                             other), 0);
    memset(&gr, 0, sizeof(gr));
    assert_int_equal(keg_fs_gc(v.fs, 1, &gr, NULL, NULL), -EPERM);  /* another volume's */
    assert_int_equal(gr.deleted_objects, 0);
    assert_int_equal(tvol_count_objects(&v), 10 - 1 + 1);
    char mkey[128];
    keg_volume_marker_key(mkey, sizeof(mkey), "testvol");
    assert_int_equal(keg_obj_del(o, mkey), 0);
    assert_int_equal(keg_volume_marker_claim(o, "testvol", keg_fs_format(v.fs)->uuid, other), 0);

    /* a leak whose header names another volume is kept; one of this volume
     * written for another of its keys is deleted */
    char foreign[256], misplaced[256];
    inject_as(&v, s1.id + 302, "11111111-2222-4333-8444-555555555555", s1.id + 302, foreign,
              sizeof(foreign));
    inject_as(&v, s1.id + 303, keg_fs_format(v.fs)->uuid, s1.id + 304, misplaced,
              sizeof(misplaced));

    /* gc --delete removes exactly the three leaks of this volume */
    memset(&gr, 0, sizeof(gr));
    memset(&it, 0, sizeof(it));
    gr.item = item_cb;
    gr.item_arg = &it;
    gr.threads = 2;
    assert_int_equal(keg_fs_gc(v.fs, 1, &gr, prog_cb, NULL), 0);
    assert_int_equal(gr.leaked_objects, 4);
    assert_int_equal(gr.deleted_objects, 3);
    assert_int_equal(gr.kept_objects, 1);
    assert_int_equal(gr.errors, 0);
    assert_true(has_key(&it, foreign) && has_key(&it, misplaced));
    assert_int_equal(it.n[5], 1);
    /* 6 referenced + the new one + the kept one + the marker */
    assert_int_equal(tvol_count_objects(&v), 10 - 1 - 2 + 1 + 1);
    assert_int_equal(keg_obj_del(o, foreign), 0);
    memset(&gr, 0, sizeof(gr));
    assert_int_equal(keg_fs_gc(v.fs, 0, &gr, NULL, NULL), 0);
    assert_int_equal(gr.leaked_objects, 0);
    assert_int_equal(gr.referenced_objects, 6);

    /* the untouched file still reads back */
    struct keg_fh *fh = tvol_open(&v, f3, O_RDONLY);
    uint8_t got[1000];
    assert_int_equal(keg_fs_read(v.fs, fh, 0, got, sizeof(got)), 1000);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(got[i], (uint8_t)(i * 7 + 3));
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    tvol_cleanup(&v);
}

/*--------------------------------------------------------------------------*/

/* Reads file ino whole (n bytes); returns what keg_fs_read returned. */
static ssize_t read_all(struct tvol *v, uint64_t ino, uint8_t *buf, size_t n)
{
    struct keg_fh *fh = tvol_open(v, ino, O_RDONLY);
    ssize_t r = keg_fs_read(v->fs, fh, 0, buf, n);
    assert_int_equal(keg_fs_release(v->fs, fh), 0);
    return r;
}

static void set_block_version(struct tvol *v, uint32_t bv)
{
    struct keg_meta *m = NULL;
    struct keg_format f;
    assert_int_equal(keg_meta_open(v->url, &m), 0);
    assert_int_equal(keg_meta_format_load(m, &f), 0);
    f.block_version = bv;
    assert_int_equal(keg_meta_format_init(m, &f, 0777, 0, 0, 1), 0);
    keg_meta_close(m);
}

static void file_slurp(const char *path, uint8_t **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    *len = (size_t)ftell(f);
    rewind(f);
    *data = keg_malloc(*len);
    assert_int_equal(fread(*data, 1, *len, f), *len);
    fclose(f);
}

static void file_spit(const char *path, const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* Blocks in the file system: a version-1 block (written before identities) reads on a
 * volume formatted before them and is EIO on one formatted with them; a valid block of
 * another file under a file's key is EIO for reads and corrupt for fsck --deep. */
static void test_admin_block_identity(void **state)
{
    struct tvol v;
    uint64_t f1, f2;
    uint8_t got[3000];
    char key1[256], key2[256], path1[512], path2[512];
    struct keg_fsck_report fr;
    struct items it;
    uint8_t *obj, *obj2;
    size_t olen, olen2;
    (void)state;

    tvol_init(&v, BS, "none");
    tvol_mount(&v);
    put_file(&v, KEG_ROOT_INO, "one", 3000, 5, &f1);
    put_file(&v, KEG_ROOT_INO, "two", 3000, 6, &f2);
    struct first_slice s1 = {0}, s2 = {0};
    assert_int_equal(keg_fs_chunks(v.fs, f1, first_cb, &s1), 0);
    assert_int_equal(keg_fs_chunks(v.fs, f2, first_cb, &s2), 0);
    tvol_umount(&v);
    keg_block_key(key1, sizeof(key1), "testvol", s1.id, 0, 3000);
    keg_block_key(key2, sizeof(key2), "testvol", s2.id, 0, 3000);
    snprintf(path1, sizeof(path1), "%s/%s", v.objdir, key1);
    snprintf(path2, sizeof(path2), "%s/%s", v.objdir, key2);

    /* "one" rewritten as the version-1 block an older kegfs wrote */
    file_slurp(path1, &obj, &olen);
    assert_int_equal(olen, KEG_BLOCK_HDR + 3000);
    assert_int_equal(obj[4], 2);
    obj[4] = 1;
    obj[6] = 0;
    obj[7] = 0;
    memmove(obj + KEG_BLOCK_HDR_V1, obj + KEG_BLOCK_HDR, 3000);
    file_spit(path1, obj, KEG_BLOCK_HDR_V1 + 3000);

    /* a volume formatted before identities (block_version 0) reads it, fsck agrees */
    assert_int_equal(tvol_mount_conf(&v, 1, 0, 0), 0);
    memset(got, 0, sizeof(got));
    assert_int_equal(read_all(&v, f1, got, sizeof(got)), 3000);
    for (int i = 0; i < 3000; i++)
        assert_int_equal(got[i], (uint8_t)(i * 7 + 5));
    memset(&fr, 0, sizeof(fr));
    assert_int_equal(keg_fs_fsck(v.fs, 1, &fr, NULL, NULL), 0);
    assert_int_equal(fr.corrupt, 0);
    tvol_umount(&v);

    /* a volume formatted with identities refuses it */
    set_block_version(&v, KEG_BLOCK_VERSION);
    assert_int_equal(tvol_mount_conf(&v, 1, 0, 0), 0);
    assert_int_equal(read_all(&v, f1, got, sizeof(got)), -EIO);
    assert_int_equal(read_all(&v, f2, got, sizeof(got)), 3000);
    memset(&fr, 0, sizeof(fr));
    memset(&it, 0, sizeof(it));
    fr.item = item_cb;
    fr.item_arg = &it;
    assert_int_equal(keg_fs_fsck(v.fs, 1, &fr, NULL, NULL), 1);
    assert_int_equal(fr.corrupt, 1);
    assert_true(has_key(&it, key1) && has_file(&it, "/one"));
    tvol_umount(&v);

    /* "two"'s valid block stored under the key of "one": EIO, never two's bytes */
    file_slurp(path2, &obj2, &olen2);
    file_spit(path1, obj2, olen2);
    for (int bv = 0; bv <= KEG_BLOCK_VERSION; bv += KEG_BLOCK_VERSION) {
        set_block_version(&v, (uint32_t)bv);
        assert_int_equal(tvol_mount_conf(&v, 1, 0, 0), 0);
        memset(got, 0, sizeof(got));
        assert_int_equal(read_all(&v, f1, got, sizeof(got)), -EIO);
        assert_int_equal(read_all(&v, f2, got, sizeof(got)), 3000);
        assert_int_equal(got[0], 6);
        memset(&fr, 0, sizeof(fr));
        memset(&it, 0, sizeof(it));
        fr.item = item_cb;
        fr.item_arg = &it;
        assert_int_equal(keg_fs_fsck(v.fs, 1, &fr, NULL, NULL), 1);
        assert_int_equal(fr.corrupt, 1);
        assert_true(has_key(&it, key1) && has_file(&it, "/one") && !has_file(&it, "/two"));
        tvol_umount(&v);
    }
    keg_free(obj);
    keg_free(obj2);
    tvol_cleanup(&v);
}

/*--------------------------------------------------------------------------*/

static void test_admin_warmup_mem(void **state)
{
    struct tvol v;
    struct keg_meta *m = NULL;
    struct keg_format fmt;
    struct keg_fs_conf conf;
    struct keg_stack_conf sc;
    struct keg_stack_stats st;
    struct keg_attr a;
    char cache[192];
    char cmd[512];
    uint64_t f1, f2, dir;
    (void)state;

    /* a volume on the mem store (one process: the same fs instance throughout) */
    tvol_init(&v, BS, "none");
    assert_int_equal(keg_meta_open(v.url, &m), 0);
    assert_int_equal(keg_meta_format_load(m, &fmt), 0);
    snprintf(fmt.storage, sizeof(fmt.storage), "mem");
    assert_int_equal(keg_meta_format_init(m, &fmt, 0777, 0, 0, 1), 0);
    keg_meta_close(m);
    snprintf(cache, sizeof(cache), "%s/cache", v.dir);
    memset(&sc, 0, sizeof(sc));
    sc.cache_dir = cache;
    sc.cache_size = 64u << 20;
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = v.url;
    conf.stack = &sc;
    assert_int_equal(keg_fs_new(&conf, &v.fs), 0);

    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, KEG_ROOT_INO, "w", 0755, &a), 0);
    dir = a.ino;
    put_file(&v, dir, "a", 3 * BS + 10, 5, &f1);                /* 4 blocks */
    put_file(&v, KEG_ROOT_INO, "b", 5000, 6, &f2);              /* 1 block */

    /* empty the SSD cache behind the layer's back: its entries become misses */
    snprintf(cmd, sizeof(cmd), "find %s -type f -delete", cache);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(keg_stack_stats(keg_fs_obj(v.fs), &st), 0);
    assert_int_equal(st.has_cache, 1);
    uint64_t miss0 = st.cache_misses;

    nprog = 0;
    assert_int_equal(keg_fs_warmup(v.fs, KEG_ROOT_INO, prog_cb, NULL), 0);
    assert_true(nprog > 0);
    assert_int_equal(keg_stack_stats(keg_fs_obj(v.fs), &st), 0);
    assert_int_equal(st.cache_misses - miss0, 5);              /* every block fetched once */
    assert_int_equal(st.cache_objects, 5);

    /* warm again, one file: everything is a hit now */
    uint64_t hits0 = st.cache_hits;
    assert_int_equal(keg_fs_warmup(v.fs, f1, NULL, NULL), 0);
    assert_int_equal(keg_stack_stats(keg_fs_obj(v.fs), &st), 0);
    assert_int_equal(st.cache_misses - miss0, 5);
    assert_int_equal(st.cache_hits - hits0, 4);
    assert_int_equal(keg_fs_warmup(v.fs, 999999, NULL, NULL), -ENOENT);
    tvol_cleanup(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admin_gc_fsck),
        cmocka_unit_test(test_admin_warmup_mem),
        cmocka_unit_test(test_admin_block_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
