/* test_fs_trash.c -- the trash (core/fs/trash.c): unlink and rename-over keep
 * regular files in /.trash/<hour>/ as "<parent>-<ino>-<name>", hard links and
 * other types are deleted as before, moves into the trash are refused,
 * keg_fs_trash_restore brings files back (conflicts, vanished parents),
 * expiry by an injected clock deletes the data (the object store empties),
 * the expiry thread, concurrent first deletes, and trash_days = 0 keeping
 * the old behaviour. */
#define _GNU_SOURCE 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <time.h>

#include "test_fs_helpers.h"
#include "fs/fs_i.h"
#include "keg/admin.h"

#define T0    1700000000LL          /* 2023-11-14 22:13:20 UTC */
#define T0_HOUR "2023-11-14-22"
#define DAY   86400LL

/* A volume with trash_days = days, mounted with a session, trash clock T0. */
static void trash_vol(struct tvol *v, uint32_t days)
{
    struct keg_meta *m = NULL;
    struct keg_format f;

    tvol_init(v, 65536, "none");
    assert_int_equal(keg_meta_open(v->url, &m), 0);
    assert_int_equal(keg_meta_format_load(m, &f), 0);
    f.trash_days = days;
    assert_int_equal(keg_meta_format_init(m, &f, 0777, 0, 0, 1), 0);
    keg_meta_close(m);
    tvol_mount(v);
    assert_int_equal(keg_fs_format(v->fs)->trash_days, days);
    if (days)
        fs_trash_set_clock(v->fs, T0);
}

/* Create parent/name holding len bytes of pattern c; returns its ino. */
static uint64_t put_file(struct tvol *v, uint64_t parent, const char *name, char c, size_t len)
{
    uint64_t ino = 0;
    struct keg_fh *fh = tvol_create(v, parent, name, &ino);
    char *buf = keg_malloc(len ? len : 1);
    assert_non_null(buf);
    memset(buf, c, len);
    assert_int_equal(keg_fs_write(v->fs, fh, 0, buf, len), (ssize_t)len);
    assert_int_equal(keg_fs_release(v->fs, fh), 0);
    keg_free(buf);
    return ino;
}

/* File ino holds exactly len bytes of c. */
static void check_file(struct tvol *v, uint64_t ino, char c, size_t len)
{
    struct keg_fh *fh = tvol_open(v, ino, O_RDONLY);
    char *buf = keg_malloc(len + 16);
    assert_non_null(buf);
    assert_int_equal(keg_fs_read(v->fs, fh, 0, buf, len + 16), (ssize_t)len);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(buf[i], c);
    assert_int_equal(keg_fs_release(v->fs, fh), 0);
    keg_free(buf);
}

static uint64_t lookup_ino(struct tvol *v, uint64_t parent, const char *name)
{
    struct keg_attr a;
    assert_int_equal(keg_fs_lookup(v->fs, &tv_root, parent, name, &a), 0);
    return a.ino;
}

static uint64_t trash_ino(struct tvol *v)
{
    return lookup_ino(v, KEG_ROOT_INO, ".trash");
}

static uint64_t hour_ino(struct tvol *v, const char *hour)
{
    return lookup_ino(v, trash_ino(v), hour);
}

static void entry_of(char *buf, size_t n, uint64_t parent, uint64_t ino, const char *name)
{
    snprintf(buf, n, "%llu-%llu-%s", (unsigned long long)parent, (unsigned long long)ino, name);
}

static int count_cb(void *arg, const struct keg_dirent *de)
{
    (void)de;
    (*(int *)arg)++;
    return 0;
}

static int count_entries(struct tvol *v, uint64_t dir)
{
    int n = 0;
    assert_true(keg_meta_readdir(keg_fs_meta(v->fs), dir, NULL, 0, 0, count_cb, &n) >= 0);
    return n;
}

/* Run the deleter now: purge unlinked inodes, delete queued slices. */
static void drain(struct tvol *v)
{
    fs_drain_purge(v->fs);
    assert_true(fs_drain_delq(v->fs, 100) >= 0);
}

/* Drain until at most max objects are left (the deleter thread may hold an
 * inode being purged for a moment); returns the count. */
static long wait_objects(struct tvol *v, long max)
{
    long n = tvol_count_objects(v);
    for (int i = 0; i < 100 && n > max; i++) {
        drain(v);
        usleep(50000);
        n = tvol_count_objects(v);
    }
    return n;
}

/*----------------------------------------------------------------------------*/

static void test_trash_unlink(void **state)
{
    struct tvol v;
    struct keg_attr d, a, t, before;
    char ent[300];
    char longname[256];
    (void)state;

    trash_vol(&v, 1);
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, KEG_ROOT_INO, "d", 0755, &d), 0);
    uint64_t f = put_file(&v, d.ino, "f", 'a', 100000);
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, f, &before), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, d.ino, "f"), 0);
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, d.ino, "f", &a), -ENOENT);

    /* /.trash: 0555 root:root directory; the hour directory of the clock */
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, KEG_ROOT_INO, ".trash", &t), 0);
    assert_true(S_ISDIR(t.mode));
    assert_int_equal(t.mode & 07777, 0555);
    assert_int_equal(t.uid, 0);
    uint64_t h = hour_ino(&v, T0_HOUR);
    entry_of(ent, sizeof(ent), d.ino, f, "f");
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, h, ent, &a), 0);
    assert_int_equal(a.ino, f);
    assert_int_equal(a.nlink, 1);
    assert_int_equal(a.size, 100000);
    assert_true(a.ctime > before.ctime ||
                (a.ctime == before.ctime && a.ctimensec >= before.ctimensec));
    check_file(&v, f, 'a', 100000);

    /* an open file goes too and stays usable through its handle */
    uint64_t g = put_file(&v, d.ino, "g", 'b', 5000);
    struct keg_fh *fh = tvol_open(&v, g, O_RDWR);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, d.ino, "g"), 0);
    assert_int_equal(keg_fs_write(v.fs, fh, 5000, "bb", 2), 2);
    assert_int_equal(keg_fs_release(v.fs, fh), 0);
    entry_of(ent, sizeof(ent), d.ino, g, "g");
    assert_int_equal(lookup_ino(&v, h, ent), g);
    check_file(&v, g, 'b', 5002);

    /* a long name is cut so that the entry fits in 255 bytes */
    memset(longname, 'x', 255);
    longname[255] = '\0';
    uint64_t l = put_file(&v, KEG_ROOT_INO, longname, 'c', 10);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, longname), 0);
    entry_of(ent, sizeof(ent), KEG_ROOT_INO, l, longname);
    ent[255] = '\0';
    assert_int_equal(lookup_ino(&v, h, ent), l);

    /* a new hour gets a new directory */
    fs_trash_set_clock(v.fs, T0 + 3600);
    uint64_t k = put_file(&v, KEG_ROOT_INO, "k", 'k', 1);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "k"), 0);
    entry_of(ent, sizeof(ent), KEG_ROOT_INO, k, "k");
    assert_int_equal(lookup_ino(&v, hour_ino(&v, "2023-11-14-23"), ent), k);
    assert_int_equal(count_entries(&v, h), 3);

    /* deleting inside the trash deletes for good */
    long nobj = tvol_count_objects(&v);
    entry_of(ent, sizeof(ent), d.ino, f, "f");
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, h, ent), 0);
    assert_int_equal(count_entries(&v, h), 2);
    assert_int_equal(count_entries(&v, trash_ino(&v)), 2);
    assert_true(wait_objects(&v, nobj - 1) < nobj);
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, f, &a), -ENOENT);

    /* unlink of what is not there */
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, d.ino, "nope"), -ENOENT);
    tvol_cleanup(&v);
}

static void test_trash_not_kept(void **state)
{
    struct tvol v;
    struct keg_attr d, a;
    char ent[300];
    (void)state;

    trash_vol(&v, 2);
    uint64_t f = put_file(&v, KEG_ROOT_INO, "f", 'a', 1000);
    assert_int_equal(keg_fs_link(v.fs, &tv_root, f, KEG_ROOT_INO, "f2", &a), 0);
    assert_int_equal(a.nlink, 2);
    /* a file with two links just loses one */
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "f"), 0);
    assert_int_equal(keg_fs_getattr(v.fs, &tv_root, f, &a), 0);
    assert_int_equal(a.nlink, 1);
    /* /.trash is made when the first file goes there */
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, KEG_ROOT_INO, ".trash", &a), -ENOENT);
    /* its last link goes to the trash under that name */
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "f2"), 0);
    uint64_t tr = trash_ino(&v);
    entry_of(ent, sizeof(ent), KEG_ROOT_INO, f, "f2");
    assert_int_equal(lookup_ino(&v, hour_ino(&v, T0_HOUR), ent), f);

    /* symlinks, special files and directories are removed normally */
    assert_int_equal(keg_fs_symlink(v.fs, &tv_root, KEG_ROOT_INO, "s", "target", &a), 0);
    assert_int_equal(keg_fs_mknod(v.fs, &tv_root, KEG_ROOT_INO, "p", S_IFIFO | 0644, 0, &a), 0);
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, KEG_ROOT_INO, "d", 0755, &d), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "s"), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "p"), 0);
    assert_int_equal(keg_fs_rmdir(v.fs, &tv_root, KEG_ROOT_INO, "d"), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "d"), -ENOENT);
    assert_int_equal(count_entries(&v, hour_ino(&v, T0_HOUR)), 1);
    assert_int_equal(count_entries(&v, KEG_ROOT_INO), 1);      /* .trash */

    /* nothing moves into the trash; /.trash and its hours stay put */
    uint64_t g = put_file(&v, KEG_ROOT_INO, "g", 'g', 10);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "g", tr, "g", 0), -EPERM);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "g", hour_ino(&v, T0_HOUR),
                                   "g", 0), -EPERM);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, ".trash", KEG_ROOT_INO, "t", 0),
                     -EPERM);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "g", KEG_ROOT_INO, ".trash",
                                   KEG_RENAME_EXCHANGE), -EPERM);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, tr, T0_HOUR, KEG_ROOT_INO, "h", 0), -EPERM);
    assert_int_equal(lookup_ino(&v, KEG_ROOT_INO, "g"), g);
    /* moving an entry out of the trash by hand is fine (a manual restore) */
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, hour_ino(&v, T0_HOUR), ent, KEG_ROOT_INO,
                                   "back", 0), 0);
    check_file(&v, lookup_ino(&v, KEG_ROOT_INO, "back"), 'a', 1000);
    tvol_cleanup(&v);
}

static void test_trash_rename_over(void **state)
{
    struct tvol v;
    struct keg_attr a, d;
    char ent[300];
    (void)state;

    trash_vol(&v, 1);
    uint64_t fa = put_file(&v, KEG_ROOT_INO, "a", 'A', 3000);
    uint64_t fb = put_file(&v, KEG_ROOT_INO, "b", 'B', 7000);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "a", KEG_ROOT_INO, "b", 0), 0);
    assert_int_equal(lookup_ino(&v, KEG_ROOT_INO, "b"), fa);
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, KEG_ROOT_INO, "a", &a), -ENOENT);
    uint64_t h = hour_ino(&v, T0_HOUR);
    entry_of(ent, sizeof(ent), KEG_ROOT_INO, fb, "b");
    assert_int_equal(lookup_ino(&v, h, ent), fb);
    check_file(&v, fb, 'B', 7000);
    check_file(&v, fa, 'A', 3000);

    /* no victim: same name, NOREPLACE, EXCHANGE, no target */
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "b", KEG_ROOT_INO, "b", 0), 0);
    uint64_t fc = put_file(&v, KEG_ROOT_INO, "c", 'C', 10);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "c", KEG_ROOT_INO, "b",
                                   KEG_RENAME_NOREPLACE), -EEXIST);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "c", KEG_ROOT_INO, "b",
                                   KEG_RENAME_EXCHANGE), 0);
    assert_int_equal(lookup_ino(&v, KEG_ROOT_INO, "b"), fc);
    assert_int_equal(lookup_ino(&v, KEG_ROOT_INO, "c"), fa);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "c", KEG_ROOT_INO, "e", 0), 0);
    assert_int_equal(count_entries(&v, h), 1);

    /* a failing rename keeps its target where it is */
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, KEG_ROOT_INO, "dir", 0755, &d), 0);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "dir", KEG_ROOT_INO, "b", 0),
                     -ENOTDIR);
    assert_int_equal(lookup_ino(&v, KEG_ROOT_INO, "b"), fc);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "missing", KEG_ROOT_INO, "b", 0),
                     -ENOENT);
    assert_int_equal(lookup_ino(&v, KEG_ROOT_INO, "b"), fc);
    /* a hard link of the source as target: a no-op */
    assert_int_equal(keg_fs_link(v.fs, &tv_root, fc, KEG_ROOT_INO, "b2", &a), 0);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "b", KEG_ROOT_INO, "b2", 0), 0);
    assert_int_equal(count_entries(&v, h), 1);
    tvol_cleanup(&v);
}

static void test_trash_restore(void **state)
{
    struct tvol v;
    struct keg_attr d, a, in, before;
    struct keg_trash_restored r;
    char ent[300], ent2[300], want[300];
    (void)state;

    trash_vol(&v, 1);
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, KEG_ROOT_INO, "d", 0755, &d), 0);
    uint64_t f = put_file(&v, d.ino, "f", 'r', 200000);
    memset(&in, 0, sizeof(in));
    in.mode = 0604;
    in.uid = 1234;
    in.gid = 99;
    in.mtime = 1000000;
    in.mtimensec = 5;
    assert_int_equal(keg_fs_setxattr(v.fs, &tv_root, f, "user.k", "v", 1, 0), 0);
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, f,
                                    KEG_SET_MODE | KEG_SET_UID | KEG_SET_GID | KEG_SET_MTIME,
                                    &in, &before), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, d.ino, "f"), 0);
    entry_of(ent, sizeof(ent), d.ino, f, "f");

    /* a dry run says where it would go and changes nothing */
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, ent, KEG_TRASH_DRYRUN, &r), 0);
    assert_int_equal(r.parent, d.ino);
    assert_string_equal(r.name, "f");
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, d.ino, "f", &a), -ENOENT);
    assert_int_equal(lookup_ino(&v, hour_ino(&v, T0_HOUR), ent), f);

    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, ent, 0, &r), 0);
    assert_int_equal(r.parent, d.ino);
    assert_int_equal(r.ino, f);
    assert_string_equal(r.name, "f");
    assert_int_equal(r.renamed, 0);
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, d.ino, "f", &a), 0);
    assert_int_equal(a.ino, f);
    assert_int_equal(a.mode, S_IFREG | 0604);
    assert_int_equal(a.uid, 1234);
    assert_int_equal(a.gid, 99);
    assert_int_equal(a.mtime, 1000000);
    assert_int_equal(a.mtimensec, 5);
    assert_int_equal(a.size, 200000);
    char xv[8];
    assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, f, "user.k", xv, sizeof(xv)), 1);
    check_file(&v, f, 'r', 200000);
    assert_int_equal(count_entries(&v, hour_ino(&v, T0_HOUR)), 0);
    /* restoring it again: no longer in the trash */
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, ent, 0, &r), -ENOENT);

    /* the name is taken: "<name>.restored-<ino>", or refused */
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, d.ino, "f"), 0);
    uint64_t f2 = put_file(&v, d.ino, "f", 'n', 10);
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, ent, KEG_TRASH_NOREPLACE, &r), -EEXIST);
    assert_int_equal(r.ino, 0);
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, ent,
                                          KEG_TRASH_DRYRUN | KEG_TRASH_NOREPLACE, &r), -EEXIST);
    snprintf(want, sizeof(want), "f.restored-%llu", (unsigned long long)f);
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, ent, KEG_TRASH_DRYRUN, &r), 0);
    assert_string_equal(r.name, want);
    assert_int_equal(r.renamed, 1);
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, ent, 0, &r), 0);
    assert_string_equal(r.name, want);
    assert_int_equal(r.renamed, 1);
    assert_int_equal(lookup_ino(&v, d.ino, want), f);
    assert_int_equal(lookup_ino(&v, d.ino, "f"), f2);
    check_file(&v, f, 'r', 200000);

    /* the original directory is gone: the entry stays in the trash */
    uint64_t g = put_file(&v, d.ino, "g", 'g', 10);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, d.ino, "g"), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, d.ino, "f"), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, d.ino, want), 0);
    assert_int_equal(keg_fs_rmdir(v.fs, &tv_root, KEG_ROOT_INO, "d"), 0);
    entry_of(ent2, sizeof(ent2), d.ino, g, "g");
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, ent2, 0, &r), -ESTALE);
    assert_int_equal(lookup_ino(&v, hour_ino(&v, T0_HOUR), ent2), g);

    /* names that are no trash names, entries and hours that do not exist */
    assert_int_equal(keg_fs_trash_restore(v.fs, "2023-11-14", ent2, 0, &r), -EINVAL);
    assert_int_equal(keg_fs_trash_restore(v.fs, "2023-13-14-22", ent2, 0, &r), -EINVAL);
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, "g", 0, &r), -EINVAL);
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, "1-x-g", 0, &r), -EINVAL);
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, "1-2-", 0, &r), -EINVAL);
    assert_int_equal(keg_fs_trash_restore(v.fs, T0_HOUR, "1-2-nothing", 0, &r), -ENOENT);
    assert_int_equal(keg_fs_trash_restore(v.fs, "2020-01-01-00", ent2, 0, &r), -ENOENT);
    tvol_cleanup(&v);
}

static void test_trash_expire(void **state)
{
    struct tvol v;
    struct keg_attr d;
    struct statvfs st;
    uint64_t files = 0;
    (void)state;

    trash_vol(&v, 3);
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, KEG_ROOT_INO, "d", 0755, &d), 0);
    for (int i = 0; i < 10; i++) {
        char name[16];
        snprintf(name, sizeof(name), "f%d", i);
        put_file(&v, i % 2 ? d.ino : KEG_ROOT_INO, name, (char)('a' + i), 150000);
    }
    long nobj = tvol_count_objects(&v);
    assert_true(nobj >= 30);        /* 3 blocks of 64 KiB each */
    /* delete everything: the data stays in the trash */
    for (int i = 0; i < 10; i++) {
        char name[16];
        snprintf(name, sizeof(name), "f%d", i);
        assert_int_equal(keg_fs_unlink(v.fs, &tv_root, i % 2 ? d.ino : KEG_ROOT_INO, name), 0);
    }
    assert_int_equal(keg_fs_rmdir(v.fs, &tv_root, KEG_ROOT_INO, "d"), 0);
    drain(&v);
    assert_int_equal(tvol_count_objects(&v), nobj);

    /* not yet: the hour ends 3 days after its end */
    assert_int_equal(fs_trash_expire(v.fs, &files), 0);
    assert_int_equal(files, 0);
    fs_trash_set_clock(v.fs, T0 + 3 * DAY);
    assert_int_equal(fs_trash_expire(v.fs, &files), 0);
    assert_int_equal(files, 0);
    assert_int_equal(count_entries(&v, hour_ino(&v, T0_HOUR)), 10);

    /* a later hour is kept while the old one expires; junk in /.trash is left alone */
    fs_trash_set_clock(v.fs, T0 + 2 * DAY);
    uint64_t k = put_file(&v, KEG_ROOT_INO, "k", 'k', 100);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "k"), 0);
    struct keg_attr junk;
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, trash_ino(&v), "not-an-hour", 0755, &junk), 0);
    fs_trash_set_clock(v.fs, T0 - (T0 % 3600) + 3600 + 3 * DAY);
    assert_int_equal(keg_fs_trash_expire(v.fs, &files), 0);
    assert_int_equal(files, 10);
    struct keg_attr a;
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, trash_ino(&v), T0_HOUR, &a), -ENOENT);
    assert_int_equal(count_entries(&v, trash_ino(&v)), 2);
    assert_true(wait_objects(&v, 1) <= 1);     /* just k's block */
    check_file(&v, k, 'k', 100);

    /* and k's hour later: nothing left but /.trash and the junk directory */
    fs_trash_set_clock(v.fs, T0 + 6 * DAY);
    assert_int_equal(fs_trash_expire(v.fs, &files), 0);
    assert_int_equal(files, 1);
    assert_int_equal(wait_objects(&v, 0), 0);
    assert_int_equal(keg_fs_statfs(v.fs, &st), 0);
    assert_int_equal(st.f_files - st.f_ffree, 2);
    assert_int_equal(st.f_blocks - st.f_bfree, 0);
    /* deleting after an expiry makes a new hour directory */
    uint64_t m = put_file(&v, KEG_ROOT_INO, "m", 'm', 10);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "m"), 0);
    char hour[32], ent[300];
    time_t tt = (time_t)(T0 + 6 * DAY);
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(hour, sizeof(hour), "%Y-%m-%d-%H", &tm);
    entry_of(ent, sizeof(ent), KEG_ROOT_INO, m, "m");
    assert_int_equal(lookup_ino(&v, hour_ino(&v, hour), ent), m);
    tvol_cleanup(&v);
}

/* The mounter's expiry thread, driven by $KEG_TRASH_INTERVAL / $KEG_TRASH_NOW. */
static void test_trash_thread(void **state)
{
    struct tvol v;
    struct keg_attr a;
    char now[32];
    (void)state;

    /* the environment is set before any thread runs (setenv is not thread-safe) */
    snprintf(now, sizeof(now), "%lld", (long long)(T0 + 3 * DAY));
    setenv("KEG_TRASH_NOW", now, 1);
    setenv("KEG_TRASH_INTERVAL", "1", 1);
    trash_vol(&v, 1);                       /* test clock T0 overrides the environment */
    put_file(&v, KEG_ROOT_INO, "f", 'f', 100000);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "f"), 0);
    assert_true(tvol_count_objects(&v) > 0);
    fs_trash_set_clock(v.fs, 0);            /* from now on $KEG_TRASH_NOW */
    int gone = 0;
    for (int i = 0; i < 200 && !gone; i++) {
        usleep(100000);
        gone = keg_fs_lookup(v.fs, &tv_root, trash_ino(&v), T0_HOUR, &a) == -ENOENT &&
               tvol_count_objects(&v) == 0;
    }
    assert_true(gone);
    unsetenv("KEG_TRASH_NOW");
    unsetenv("KEG_TRASH_INTERVAL");
    tvol_cleanup(&v);
}

struct unlinker {
    struct tvol *v;
    int          first, n;
};

static void *unlink_main(void *arg)
{
    struct unlinker *u = arg;
    for (int i = u->first; i < u->first + u->n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "c%d", i);
        if (keg_fs_unlink(u->v->fs, &tv_root, KEG_ROOT_INO, name) != 0)
            return (void *)1;
    }
    return NULL;
}

/* Threads deleting at once on a fresh volume race to make /.trash and the hour. */
static void test_trash_concurrent(void **state)
{
    struct tvol v;
    struct keg_attr a;
    pthread_t thr[4];
    struct unlinker u[4];
    (void)state;

    trash_vol(&v, 1);
    for (int i = 0; i < 200; i++) {
        char name[16];
        snprintf(name, sizeof(name), "c%d", i);
        assert_int_equal(keg_fs_mknod(v.fs, &tv_root, KEG_ROOT_INO, name, S_IFREG | 0644, 0,
                                      &a), 0);
    }
    for (int t = 0; t < 4; t++) {
        u[t].v = &v;
        u[t].first = t * 50;
        u[t].n = 50;
        assert_int_equal(pthread_create(&thr[t], NULL, unlink_main, &u[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        void *res = (void *)1;
        pthread_join(thr[t], &res);
        assert_null(res);
    }
    assert_int_equal(count_entries(&v, KEG_ROOT_INO), 1);
    assert_int_equal(count_entries(&v, trash_ino(&v)), 1);
    assert_int_equal(count_entries(&v, hour_ino(&v, T0_HOUR)), 200);
    tvol_cleanup(&v);
}

/* trash_days = 0: no /.trash, deletes free the data as before. */
static void test_trash_off(void **state)
{
    struct tvol v;
    struct keg_attr a;
    uint64_t files = 7;
    (void)state;

    trash_vol(&v, 0);
    put_file(&v, KEG_ROOT_INO, "a", 'a', 100000);
    put_file(&v, KEG_ROOT_INO, "b", 'b', 100000);
    assert_true(tvol_count_objects(&v) > 0);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, "a", KEG_ROOT_INO, "b", 0), 0);
    assert_int_equal(keg_fs_unlink(v.fs, &tv_root, KEG_ROOT_INO, "b"), 0);
    assert_int_equal(keg_fs_lookup(v.fs, &tv_root, KEG_ROOT_INO, ".trash", &a), -ENOENT);
    assert_int_equal(count_entries(&v, KEG_ROOT_INO), 0);
    assert_int_equal(wait_objects(&v, 0), 0);
    assert_int_equal(keg_fs_trash_expire(v.fs, &files), 0);
    assert_int_equal(files, 0);
    /* a user's own .trash directory is an ordinary directory then */
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, KEG_ROOT_INO, ".trash", 0755, &a), 0);
    assert_int_equal(keg_fs_rename(v.fs, &tv_root, KEG_ROOT_INO, ".trash", KEG_ROOT_INO, "t", 0),
                     0);
    tvol_cleanup(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trash_unlink),
        cmocka_unit_test(test_trash_not_kept),
        cmocka_unit_test(test_trash_rename_over),
        cmocka_unit_test(test_trash_restore),
        cmocka_unit_test(test_trash_expire),
        cmocka_unit_test(test_trash_thread),
        cmocka_unit_test(test_trash_concurrent),
        cmocka_unit_test(test_trash_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
