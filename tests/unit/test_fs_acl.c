/* test_fs_acl.c -- POSIX ACLs in core/fs (acl.c): refused without enforcement, mode bits
 * following an access ACL (and the ACL following chmod), an ACL equal to mode bits not
 * stored, S_ISGID cleared for a caller outside the group, default ACL inheritance at
 * creation (umask ignored there, applied elsewhere), validation and ownership. */
#define _GNU_SOURCE 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_fs_helpers.h"
#include "fs/fs_i.h"
#include <time.h>

#define ACC "system.posix_acl_access"
#define DEF "system.posix_acl_default"

/* Builds an xattr ACL from (tag, perm, id) triples; returns its length. */
static size_t mkacl(unsigned char *buf, int n, const unsigned *t)
{
    buf[0] = 2;
    buf[1] = buf[2] = buf[3] = 0;
    for (int i = 0; i < n; i++) {
        unsigned char *q = buf + 4 + 8 * i;
        unsigned tag = t[3 * i], perm = t[3 * i + 1], id = t[3 * i + 2];
        q[0] = (unsigned char)tag;
        q[1] = (unsigned char)(tag >> 8);
        q[2] = (unsigned char)perm;
        q[3] = 0;
        q[4] = (unsigned char)id;
        q[5] = (unsigned char)(id >> 8);
        q[6] = (unsigned char)(id >> 16);
        q[7] = (unsigned char)(id >> 24);
    }
    return 4 + 8 * (size_t)n;
}

#define NOID 0xffffffffu
/* perm of the entry with tag (and id for named ones) in an xattr ACL, or -1 */
static int perm_of(const unsigned char *buf, ssize_t len, unsigned tag, unsigned id)
{
    for (ssize_t off = 4; off + 8 <= len; off += 8) {
        const unsigned char *q = buf + off;
        unsigned qid = q[4] | q[5] << 8 | q[6] << 16 | (unsigned)q[7] << 24;
        if ((unsigned)(q[0] | q[1] << 8) == tag && (tag != 2 && tag != 8 ? 1 : qid == id))
            return q[2];
    }
    return -1;
}

static void test_acl_off_refused(void **state)
{
    struct tvol v;
    struct keg_attr a;
    unsigned char acl[64];
    const unsigned t[] = {1, 6, NOID, 2, 0, 1000, 4, 6, NOID, 0x10, 6, NOID, 0x20, 6, NOID};
    struct keg_ctx um = {.uid = 0, .gid = 0, .umask = 022};
    (void)state;
    tvol_init(&v, 65536, "none");
    tvol_mount(&v);
    assert_int_equal(keg_fs_mknod(v.fs, &tv_root, KEG_ROOT_INO, "f", S_IFREG | 0666, 0, &a), 0);
    size_t n = mkacl(acl, 5, t);
    /* nothing would enforce it: never stored */
    assert_int_equal(keg_fs_setxattr(v.fs, &tv_root, a.ino, ACC, acl, n, 0), -EOPNOTSUPP);
    assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, a.ino, ACC, acl, sizeof(acl)), -ENODATA);
    /* the umask applies to new nodes */
    assert_int_equal(keg_fs_mknod(v.fs, &um, KEG_ROOT_INO, "g", S_IFREG | 0666, 0, &a), 0);
    assert_int_equal(a.mode & 07777, 0644);
    tvol_cleanup(&v);
}

static void test_acl_mode_sync(void **state)
{
    struct tvol v;
    struct keg_attr a, in, out;
    unsigned char acl[128], got[128];
    struct keg_ctx owner = {.uid = 1000, .gid = 1000};
    struct keg_ctx other = {.uid = 2000, .gid = 2000};
    (void)state;
    tvol_init(&v, 65536, "none");
    tvol_mount(&v);
    keg_fs_set_acl(v.fs, 1);
    assert_int_equal(keg_fs_mknod(v.fs, &owner, KEG_ROOT_INO, "f", S_IFREG | 0666, 0, &a), 0);
    uint64_t ino = a.ino;

    /* u::rw- u:65534:--- g::rw- m::r-- o::r--: mode 0644 (group bits = mask) */
    const unsigned t1[] = {1, 6, NOID, 2, 0, 65534, 4, 6, NOID, 0x10, 4, NOID, 0x20, 4, NOID};
    size_t n = mkacl(acl, 5, t1);
    assert_int_equal(keg_fs_setxattr(v.fs, &other, ino, ACC, acl, n, 0), -EPERM);
    assert_int_equal(keg_fs_setxattr(v.fs, &owner, ino, ACC, acl, n, 0), 0);
    assert_int_equal(keg_fs_getattr(v.fs, &owner, ino, &a), 0);
    assert_int_equal(a.mode & 07777, 0644);
    ssize_t gl = keg_fs_getxattr(v.fs, &owner, ino, ACC, got, sizeof(got));
    assert_int_equal(gl, (ssize_t)n);
    assert_memory_equal(got, acl, n);

    /* chmod rewrites USER_OBJ, MASK, OTHER (GROUP_OBJ and named entries stay) */
    memset(&in, 0, sizeof(in));
    in.mode = 0750;
    assert_int_equal(keg_fs_setattr(v.fs, &owner, ino, KEG_SET_MODE, &in, &out), 0);
    gl = keg_fs_getxattr(v.fs, &owner, ino, ACC, got, sizeof(got));
    assert_int_equal(perm_of(got, gl, 1, 0), 7);
    assert_int_equal(perm_of(got, gl, 0x10, 0), 5);
    assert_int_equal(perm_of(got, gl, 4, 0), 6);
    assert_int_equal(perm_of(got, gl, 0x20, 0), 0);
    assert_int_equal(perm_of(got, gl, 2, 65534), 0);

    /* an ACL equal to mode bits: mode set, xattr removed */
    const unsigned t2[] = {1, 7, NOID, 4, 5, NOID, 0x20, 1, NOID};
    n = mkacl(acl, 3, t2);
    assert_int_equal(keg_fs_setxattr(v.fs, &owner, ino, ACC, acl, n, 0), 0);
    assert_int_equal(keg_fs_getattr(v.fs, &owner, ino, &a), 0);
    assert_int_equal(a.mode & 07777, 0751);
    assert_int_equal(keg_fs_getxattr(v.fs, &owner, ino, ACC, got, sizeof(got)), -ENODATA);

    /* invalid: named entry without mask, bad version, bad perm */
    const unsigned t3[] = {1, 6, NOID, 2, 0, 5, 4, 6, NOID, 0x20, 4, NOID};
    n = mkacl(acl, 4, t3);
    assert_int_equal(keg_fs_setxattr(v.fs, &owner, ino, ACC, acl, n, 0), -EINVAL);
    n = mkacl(acl, 3, t2);
    acl[0] = 1;
    assert_int_equal(keg_fs_setxattr(v.fs, &owner, ino, ACC, acl, n, 0), -EINVAL);
    /* a default ACL only on directories */
    n = mkacl(acl, 3, t2);
    assert_int_equal(keg_fs_setxattr(v.fs, &owner, ino, DEF, acl, n, 0), -EACCES);

    /* S_ISGID: cleared when the owner setting an access ACL is not in the group */
    memset(&in, 0, sizeof(in));
    in.gid = 3000;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_SET_GID, &in, &out), 0);
    in.mode = 02775;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_SET_MODE, &in, &out), 0);
    assert_int_equal(out.mode & 07777, 02775);
    n = mkacl(acl, 5, t1);
    assert_int_equal(keg_fs_setxattr(v.fs, &owner, ino, ACC, acl, n, 0), 0);
    assert_int_equal(keg_fs_getattr(v.fs, &owner, ino, &a), 0);
    assert_int_equal(a.mode & 07777, 0644);
    /* ... and kept for a member of the group */
    in.mode = 02775;
    assert_int_equal(keg_fs_setattr(v.fs, &tv_root, ino, KEG_SET_MODE, &in, &out), 0);
    struct keg_ctx member = {.uid = 1000, .gid = 1000, .ngroups = 1, .groups = {3000}};
    assert_int_equal(keg_fs_setxattr(v.fs, &member, ino, ACC, acl, n, 0), 0);
    assert_int_equal(keg_fs_getattr(v.fs, &owner, ino, &a), 0);
    assert_int_equal(a.mode & 07777, 02644);
    tvol_cleanup(&v);
}

static void test_acl_inherit(void **state)
{
    struct tvol v;
    struct keg_attr d, a;
    unsigned char acl[128], got[128];
    struct keg_ctx c = {.uid = 1000, .gid = 1000, .umask = 077};
    (void)state;
    tvol_init(&v, 65536, "none");
    tvol_mount(&v);
    keg_fs_set_acl(v.fs, 1);
    assert_int_equal(keg_fs_mkdir(v.fs, &c, KEG_ROOT_INO, "d", 0777, &d), 0);
    assert_int_equal(d.mode & 07777, 0700);          /* umask without a default ACL */
    /* default: u::rwx u:65534:rwx g::r-x m::rwx o::--- */
    const unsigned t[] = {1, 7, NOID, 2, 7, 65534, 4, 5, NOID, 0x10, 7, NOID, 0x20, 0, NOID};
    size_t n = mkacl(acl, 5, t);
    assert_int_equal(keg_fs_setxattr(v.fs, &c, d.ino, DEF, acl, n, 0), 0);

    /* a file created 0666: the umask is ignored, the ACL is the default masked by the mode */
    assert_int_equal(keg_fs_mknod(v.fs, &c, d.ino, "f", S_IFREG | 0666, 0, &a), 0);
    assert_int_equal(a.mode & 07777, 0660);
    ssize_t gl = keg_fs_getxattr(v.fs, &c, a.ino, ACC, got, sizeof(got));
    assert_true(gl == (ssize_t)n);
    assert_int_equal(perm_of(got, gl, 1, 0), 6);
    assert_int_equal(perm_of(got, gl, 2, 65534), 7);
    assert_int_equal(perm_of(got, gl, 4, 0), 5);
    assert_int_equal(perm_of(got, gl, 0x10, 0), 6);
    assert_int_equal(perm_of(got, gl, 0x20, 0), 0);
    assert_int_equal(keg_fs_getxattr(v.fs, &c, a.ino, DEF, got, sizeof(got)), -ENODATA);

    /* a directory gets it as access and default ACL */
    assert_int_equal(keg_fs_mkdir(v.fs, &c, d.ino, "sub", 0777, &a), 0);
    assert_int_equal(a.mode & 07777, 0770);
    assert_int_equal(keg_fs_getxattr(v.fs, &c, a.ino, DEF, got, sizeof(got)), (ssize_t)n);
    assert_memory_equal(got, acl, n);
    gl = keg_fs_getxattr(v.fs, &c, a.ino, ACC, got, sizeof(got));
    assert_int_equal(perm_of(got, gl, 0x10, 0), 7);

    /* a symlink gets no ACL; a default equal to mode bits gives mode bits only */
    assert_int_equal(keg_fs_symlink(v.fs, &c, d.ino, "l", "f", &a), 0);
    assert_int_equal(a.mode & 07777, 0777);
    const unsigned t2[] = {1, 7, NOID, 4, 5, NOID, 0x20, 5, NOID};
    n = mkacl(acl, 3, t2);
    assert_int_equal(keg_fs_setxattr(v.fs, &c, d.ino, DEF, acl, n, 0), 0);
    assert_int_equal(keg_fs_mknod(v.fs, &c, d.ino, "g", S_IFREG | 0666, 0, &a), 0);
    assert_int_equal(a.mode & 07777, 0644);
    assert_int_equal(keg_fs_getxattr(v.fs, &c, a.ino, ACC, got, sizeof(got)), -ENODATA);
    tvol_cleanup(&v);
}

/*--------------------------------------------------------------------------*/

struct xnames {
    int      n;
    char     name[16][8];
    uint64_t ino[16];
};

static int xnames_fill(void *arg, const char *name, const struct keg_attr *attr, uint64_t next)
{
    struct xnames *x = arg;
    (void)next;
    if (name[0] == '.' || x->n >= 16)
        return 0;
    snprintf(x->name[x->n], sizeof(x->name[0]), "%s", name);
    x->ino[x->n++] = attr->ino;
    return 0;
}

static void xlist(struct tvol *v, uint64_t dir, struct xnames *x)
{
    struct keg_dh *dh;
    memset(x, 0, sizeof(*x));
    assert_int_equal(keg_fs_opendir(v->fs, &tv_root, dir, &dh), 0);
    assert_int_equal(keg_fs_readdir(v->fs, &tv_root, dh, 0, 1, xnames_fill, x), 0);
    assert_int_equal(keg_fs_releasedir(v->fs, dh), 0);
}

/* xattr.c: readdir with attributes learns which entries have no xattr at
 * all, and their getxattrs (ls -l asks two per file) are answered without
 * the engine; another mount's setxattr shows once the entry expires; this
 * mount's own setxattr shows at once, also when it overtook a readdir. */
static void test_xattr_absence_from_readdir(void **state)
{
    struct tvol v, other;
    struct keg_attr a;
    char val[16];
    struct xnames x;
    const struct timespec ttl = {1, 100 * 1000 * 1000};
    (void)state;
    tvol_init(&v, 65536, "none");
    tvol_mount(&v);
    other = v;      /* a second mount of the same volume */
    assert_int_equal(tvol_mount_conf(&other, 1, 0, 0), 0);
    assert_int_equal(keg_fs_mkdir(v.fs, &tv_root, KEG_ROOT_INO, "d", 0755, &a), 0);
    uint64_t d = a.ino;
    for (int i = 0; i < 8; i++) {
        char name[8];
        snprintf(name, sizeof(name), "f%d", i);
        assert_int_equal(keg_fs_mknod(other.fs, &tv_root, d, name, S_IFREG | 0644, 0, &a), 0);
    }
    xlist(&v, d, &x);
    assert_int_equal(x.n, 8);
    assert_int_equal(keg_fs_setxattr(other.fs, &tv_root, x.ino[3], "user.k", "v3", 2, 0), 0);
    /* f3 got an xattr before this listing: only f3 goes to the engine */
    xlist(&v, d, &x);
    uint64_t g0 = tvol_meta_requests(&v, KEG_META_OP_GETXATTR);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, x.ino[i], "security.selinux", val,
                                         sizeof(val)), -ENODATA);
        assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, x.ino[i], "system.posix_acl_access",
                                         val, sizeof(val)), -ENODATA);
    }
    assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, x.ino[3], "user.k", val, sizeof(val)), 2);
    assert_memory_equal(val, "v3", 2);
    /* f3: selinux, the ACL, user.k */
    assert_int_equal(tvol_meta_requests(&v, KEG_META_OP_GETXATTR) - g0, 3);
    /* another mount sets one: seen here once the entry expired */
    assert_int_equal(keg_fs_setxattr(other.fs, &tv_root, x.ino[5], "user.k", "v5", 2, 0), 0);
    nanosleep(&ttl, NULL);
    assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, x.ino[5], "user.k", val, sizeof(val)), 2);
    assert_memory_equal(val, "v5", 2);
    /* this mount sets one: seen at once */
    xlist(&v, d, &x);
    assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, x.ino[6], "user.k", val, sizeof(val)),
                     -ENODATA);
    assert_int_equal(keg_fs_setxattr(v.fs, &tv_root, x.ino[6], "user.k", "v6", 2, 0), 0);
    assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, x.ino[6], "user.k", val, sizeof(val)), 2);
    /* ... also when its change overtook an engine answer read before it */
    struct fs_xa_snap s;
    fs_xattr_snap(&s);
    assert_int_equal(keg_fs_setxattr(v.fs, &tv_root, x.ino[7], "user.k", "v7", 2, 0), 0);
    fs_xattr_learn(v.fs, &s, x.ino[7], 1);              /* the stale answer arrives */
    assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, x.ino[7], "user.k", val, sizeof(val)), 2);
    assert_int_equal(keg_fs_removexattr(v.fs, &tv_root, x.ino[7], "user.k"), 0);
    assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, x.ino[7], "user.k", val, sizeof(val)),
                     -ENODATA);
    /* a node created here without ACLs has none: no engine call */
    g0 = tvol_meta_requests(&v, KEG_META_OP_GETXATTR);
    assert_int_equal(keg_fs_mknod(v.fs, &tv_root, d, "new", S_IFREG | 0644, 0, &a), 0);
    assert_int_equal(keg_fs_getxattr(v.fs, &tv_root, a.ino, "security.selinux", val,
                                     sizeof(val)), -ENODATA);
    assert_int_equal(tvol_meta_requests(&v, KEG_META_OP_GETXATTR), g0);
    keg_fs_free(other.fs);
    tvol_cleanup(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acl_off_refused),
        cmocka_unit_test(test_acl_mode_sync),
        cmocka_unit_test(test_acl_inherit),
        cmocka_unit_test(test_xattr_absence_from_readdir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
