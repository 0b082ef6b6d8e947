/* acl.c -- POSIX ACLs: the file system's side of FUSE's POSIX ACL mode.
 *
 * DESIGN
 * With FUSE_CAP_POSIX_ACL the kernel enforces ACLs itself (it reads
 * "system.posix_acl_access" through getxattr and caches it per inode) and
 * checks who may set one; the file system keeps the rest of POSIX.1e:
 *   - setting an access ACL sets the mode bits from it (owner = USER_OBJ,
 *     group = MASK, or GROUP_OBJ without a mask, other = OTHER) and clears
 *     S_ISGID when the caller is neither in the file's group nor root; an
 *     ACL equivalent to mode bits alone is not stored (the xattr is removed);
 *   - chmod rewrites the ACL's USER_OBJ, MASK (or GROUP_OBJ) and OTHER;
 *   - a new node in a directory with a default ACL gets the default as its
 *     access ACL masked by the requested mode (and a directory also as its
 *     default), and the umask is NOT applied; without one the umask is
 *     applied here (the mounter asks the kernel not to: FUSE_CAP_DONT_MASK).
 * The ACL stays an ordinary xattr in the engine (both engines, dump/load).
 * Without the kernel's ACL mode (fs->acl == 0) nothing would enforce an ACL,
 * so setting one is refused with EOPNOTSUPP.
 *
 * A node is created first and its ACLs stored after (two engine ops): until
 * the ACLs are stored its group bits are the mask AND the group entry, so a
 * crash between leaves a file no more open than its ACL would make it.
 *
 * The xattr format (little endian): u32 version 2, then entries
 * { u16 tag, u16 perm, u32 id }.
 */
#include <string.h>
#include <sys/stat.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "fs_i.h"

#define ACL_VERSION    2
#define ACL_USER_OBJ   0x01
#define ACL_USER       0x02
#define ACL_GROUP_OBJ  0x04
#define ACL_GROUP      0x08
#define ACL_MASK       0x10
#define ACL_OTHER      0x20
#define ACL_UNDEF_ID   0xffffffffu
#define ACL_MAX        512             /* entries; the kernel sends at most a page */

struct acl_ent {
    uint16_t tag, perm;
    uint32_t id;
};

struct acl {
    uint32_t       n;
    struct acl_ent e[ACL_MAX];
};

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t get_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void put_le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

/* Parse and validate.  Returns 0 or -EINVAL. */
static int acl_parse(const void *buf, size_t len, struct acl *a)
{
    const unsigned char *p = buf;
    unsigned seen = 0;
    int named = 0;
    if (len < 4 || (len - 4) % 8 != 0 || (len - 4) / 8 > ACL_MAX || get_le32(p) != ACL_VERSION)
        return -EINVAL;
    a->n = (uint32_t)((len - 4) / 8);
    for (uint32_t i = 0; i < a->n; i++) {
        const unsigned char *q = p + 4 + 8 * i;
        struct acl_ent *e = &a->e[i];
        e->tag = get_le16(q);
        e->perm = get_le16(q + 2);
        e->id = get_le32(q + 4);
        if (e->perm & ~7u)
            return -EINVAL;
        switch (e->tag) {
        case ACL_USER_OBJ:
        case ACL_GROUP_OBJ:
        case ACL_MASK:
        case ACL_OTHER:
            if (seen & e->tag)
                return -EINVAL;
            seen |= e->tag;
            break;
        case ACL_USER:
        case ACL_GROUP:
            named = 1;
            break;
        default:
            return -EINVAL;
        }
    }
    if ((seen & (ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_OTHER)) !=
        (ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_OTHER))
        return -EINVAL;
    if (named && !(seen & ACL_MASK))
        return -EINVAL;
    return 0;
}

/* Encode into buf (4 + 8 * n bytes).  Returns the length. */
static size_t acl_encode(const struct acl *a, unsigned char *buf)
{
    put_le32(buf, ACL_VERSION);
    for (uint32_t i = 0; i < a->n; i++) {
        unsigned char *q = buf + 4 + 8 * i;
        put_le16(q, a->e[i].tag);
        put_le16(q + 2, a->e[i].perm);
        put_le32(q + 4, a->e[i].id);
    }
    return 4 + 8 * (size_t)a->n;
}

static struct acl_ent *acl_find(struct acl *a, uint16_t tag)
{
    for (uint32_t i = 0; i < a->n; i++)
        if (a->e[i].tag == tag)
            return &a->e[i];
    return NULL;
}

/* The permission bits (0777) the ACL gives; returns 1 if the ACL says no more
 * than those bits (no named entry, no mask), else 0. */
static int acl_mode(struct acl *a, uint32_t *bits)
{
    struct acl_ent *m = acl_find(a, ACL_MASK);
    *bits = (uint32_t)acl_find(a, ACL_USER_OBJ)->perm << 6 |
            (uint32_t)(m ? m->perm : acl_find(a, ACL_GROUP_OBJ)->perm) << 3 |
            acl_find(a, ACL_OTHER)->perm;
    return a->n == 3;
}

/* Read xattr name of ino as an ACL.  Returns 1 (found), 0 (none), -errno. */
static int acl_read(struct keg_fs *fs, uint64_t ino, const char *name, struct acl *a)
{
    unsigned char buf[4 + 8 * ACL_MAX];
    ssize_t n = fs_xattr_get_raw(fs, ino, name, buf, sizeof(buf));
    if (n == -ENODATA)
        return 0;
    if (n < 0)
        return (int)n;
    if (acl_parse(buf, (size_t)n, a) < 0) {
        KEG_ERR("inode %llu: %s is not a valid ACL (%zd bytes)", (unsigned long long)ino, name,
                n);
        return -EIO;
    }
    return 1;
}

static int acl_write(struct keg_fs *fs, uint64_t ino, const char *name, const struct acl *a)
{
    unsigned char buf[4 + 8 * ACL_MAX];
    size_t len = acl_encode(a, buf);
    return keg_meta_setxattr(fs->meta, ino, name, buf, len, 0);
}

/* Set the mode bits of ino (type and other bits kept from cur). */
static int set_mode(struct keg_fs *fs, uint64_t ino, uint32_t mode)
{
    struct keg_attr in, out;
    memset(&in, 0, sizeof(in));
    in.mode = mode;
    return keg_meta_setattr(fs->meta, ino, KEG_SET_MODE, &in, &out);
}

/*----- setxattr / removexattr of the ACL names -----*/

int fs_acl_name(const char *name)
{
    if (strcmp(name, KEG_ACL_ACCESS) == 0)
        return 1;
    if (strcmp(name, KEG_ACL_DEFAULT) == 0)
        return 2;
    return 0;
}

int fs_acl_set(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, const char *name,
               const void *val, size_t len, int flags)
{
    struct acl a;
    struct keg_attr cur;
    int rc;
    if (!fs->acl)
        return -EOPNOTSUPP;
    rc = acl_parse(val, len, &a);
    if (rc < 0)
        return rc;
    rc = keg_meta_getattr(fs->meta, ino, &cur);
    if (rc < 0)
        return rc;
    if (c->uid != 0 && c->uid != cur.uid)
        return -EPERM;
    if (fs_acl_name(name) == 2) {
        if (!S_ISDIR(cur.mode))
            return -EACCES;
        return keg_meta_setxattr(fs->meta, ino, name, val, len, flags);
    }
    if (S_ISLNK(cur.mode))
        return -EOPNOTSUPP;
    uint32_t bits;
    int equiv = acl_mode(&a, &bits);
    uint32_t mode = (cur.mode & ~0777u) | bits;
    if ((mode & S_ISGID) && c->uid != 0 && !keg_ctx_in_group(c, cur.gid))
        mode &= ~(uint32_t)S_ISGID;
    if (equiv) {
        rc = keg_meta_removexattr(fs->meta, ino, name);
        if (rc == -ENODATA)
            rc = 0;
    } else {
        rc = keg_meta_setxattr(fs->meta, ino, name, val, len, flags);
    }
    if (rc == 0 && mode != cur.mode)
        rc = set_mode(fs, ino, mode);
    return rc;
}

/*----- chmod -----*/

int fs_acl_chmod(struct keg_fs *fs, uint64_t ino, uint32_t mode)
{
    struct acl a;
    if (!fs->acl || S_ISLNK(mode))
        return 0;
    int rc = acl_read(fs, ino, KEG_ACL_ACCESS, &a);
    if (rc <= 0)
        return rc;
    struct acl_ent *m = acl_find(&a, ACL_MASK);
    acl_find(&a, ACL_USER_OBJ)->perm = (uint16_t)((mode >> 6) & 7);
    (m ? m : acl_find(&a, ACL_GROUP_OBJ))->perm = (uint16_t)((mode >> 3) & 7);
    acl_find(&a, ACL_OTHER)->perm = (uint16_t)(mode & 7);
    return acl_write(fs, ino, KEG_ACL_ACCESS, &a);
}

/*----- inheritance at creation -----*/

int fs_acl_create_mode(struct keg_fs *fs, const struct keg_ctx *c, uint64_t parent,
                       uint32_t *mode, struct fs_acl_new *nw)
{
    memset(nw, 0, sizeof(*nw));
    if (S_ISLNK(*mode))
        return 0;
    if (!fs->acl) {
        *mode &= ~(c->umask & 0777u);
        return 0;
    }
    struct acl *d = keg_malloc(sizeof(*d));
    if (!d)
        return -ENOMEM;
    int rc = acl_read(fs, parent, KEG_ACL_DEFAULT, d);
    if (rc <= 0) {
        keg_free(d);
        if (rc == 0)
            *mode &= ~(c->umask & 0777u);
        return rc;
    }
    nw->def = d;
    /* the access ACL: the default masked by the requested mode (umask ignored) */
    struct acl *a = keg_malloc(sizeof(*a));
    if (!a) {
        fs_acl_new_free(nw);
        return -ENOMEM;
    }
    *a = *d;
    struct acl_ent *m = acl_find(a, ACL_MASK);
    struct acl_ent *uo = acl_find(a, ACL_USER_OBJ);
    struct acl_ent *go = acl_find(a, ACL_GROUP_OBJ);
    struct acl_ent *ot = acl_find(a, ACL_OTHER);
    uo->perm &= (uint16_t)((*mode >> 6) & 7);
    (m ? m : go)->perm &= (uint16_t)((*mode >> 3) & 7);
    ot->perm &= (uint16_t)(*mode & 7);
    uint32_t bits;
    int equiv = acl_mode(a, &bits);
    *mode = (*mode & ~0777u) | bits;
    if (equiv) {
        keg_free(a);
        a = NULL;
    } else {
        /* until the ACL is stored, the owning group gets no more than it will */
        nw->final_mode = *mode;
        *mode &= ~(uint32_t)(((~(uint32_t)go->perm) & 7) << 3);
    }
    nw->access = a;
    if (!S_ISDIR(*mode)) {
        keg_free(nw->def);
        nw->def = NULL;
    }
    return 0;
}

int fs_acl_create_finish(struct keg_fs *fs, uint64_t ino, const struct fs_acl_new *nw)
{
    int rc = 0;
    if (nw->def)
        rc = acl_write(fs, ino, KEG_ACL_DEFAULT, nw->def);
    if (rc == 0 && nw->access) {
        rc = acl_write(fs, ino, KEG_ACL_ACCESS, nw->access);
        if (rc == 0)
            rc = set_mode(fs, ino, nw->final_mode);
    }
    if (rc < 0)
        KEG_ERR("inode %llu: cannot store the ACLs inherited from its directory: %s",
                (unsigned long long)ino, strerror(-rc));
    return rc;
}

void fs_acl_new_free(struct fs_acl_new *nw)
{
    keg_free(nw->access);
    keg_free(nw->def);
    nw->access = nw->def = NULL;
}
