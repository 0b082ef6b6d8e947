/* dir.c -- streaming readdir over the engine's paged directory listing.
 *
 * DESIGN
 * Offsets are entry ordinals: "." is 0, ".." is 1, the k-th stored entry (in
 * the engine's name order) is k+2.  An open directory handle holds at most
 * one batch (FS_DIR_BATCH entries) of the listing and the position of the next
 * entry to deliver.  A call with that position resumes in the batch; the next
 * batch is read with after = the last name of the current one, so entries
 * added or removed meanwhile never make the stream skip or repeat a name that
 * exists throughout.  An entry refused by fill() stays the next one.  A call
 * with any other offset (seekdir/rewinddir) restarts from the beginning and
 * skips entries batch by batch -- memory stays bounded either way.
 *
 * Open directories are counted in fs->odir with the attributes last seen of
 * each (at opendir, and at every getattr/setattr of it through this mount).
 * Once rmdir or a replacing rename removed the engine's record, those stand
 * in for it until the last handle closes: fstat answers them with nlink 0,
 * fchmod/fchown/futimens change them in memory.  (The kernel refuses
 * readdir and creation in a removed directory itself.)  Its extended
 * attributes are gone with the record too: when rmdir or a replacing rename
 * through this mount removes a directory open here, its xattrs are read just
 * before (only when a directory open here had that parent, so rm -r costs
 * nothing more) and kept with the open directory, where the xattr calls read
 * and change them in memory (FS_ODIR_XBYTES at most, then ENOSPC).  A
 * directory removed by another mounter starts with none.
 */
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "fs_i.h"

#define FS_DIR_BATCH 512
#define FS_ODIR_XBYTES 65536    /* names + values of a removed directory's xattrs */

struct fs_dent {
    char           *name;
    struct keg_attr attr;       /* complete when the batch was read with plus */
};

struct keg_dh {
    pthread_mutex_t mu;         /* protects everything below */
    uint64_t        ino;        /* immutable; counted in fs->odir */
    uint64_t        pos;        /* offset of the next entry to deliver */
    struct fs_dent *ents;       /* current batch */
    size_t          n, idx;     /* batch size, next entry in it */
    int             eof;        /* no stored entries after this batch */
    int             plus;       /* the batch has full attributes */
    char           *after;      /* last name of the batch (next batch starts after it) */
};

static void dh_clear_batch(struct keg_dh *dh)
{
    for (size_t i = 0; i < dh->n; i++)
        keg_free(dh->ents[i].name);
    dh->n = 0;
    dh->idx = 0;
}

static void dh_reset(struct keg_dh *dh)
{
    dh_clear_batch(dh);
    keg_free(dh->after);
    dh->after = NULL;
    dh->eof = 0;
    dh->pos = 0;
}

struct batch_ctx {
    struct keg_fs     *fs;
    struct keg_dh     *dh;
    struct fs_xa_snap  xa;      /* taken before the engine call (xattr.c) */
    int                err;
};

static int batch_cb(void *arg, const struct keg_dirent *de)
{
    struct batch_ctx *bc = arg;
    struct keg_dh *dh = bc->dh;
    struct fs_dent *e;
    if (dh->n >= FS_DIR_BATCH)
        return 1;
    e = &dh->ents[dh->n];
    e->name = keg_strdup(de->name);
    if (!e->name) {
        bc->err = -ENOMEM;
        return 1;
    }
    if (de->attr) {
        e->attr = *de->attr;
        fs_xattr_learn(bc->fs, &bc->xa, de->ino, de->no_xattr);  /* spares ls -l its getxattrs */
    } else {
        memset(&e->attr, 0, sizeof(e->attr));
        e->attr.ino = de->ino;
        e->attr.mode = de->type;
    }
    dh->n++;
    return 0;
}

/* Replace the batch by the next one.  LOCKS: dh->mu held. */
static int dh_next_batch(struct keg_fs *fs, struct keg_dh *dh, int plus)
{
    struct batch_ctx bc = {.fs = fs, .dh = dh, .err = 0};
    int rc;
    char *last;

    dh_clear_batch(dh);
    fs_xattr_snap(&bc.xa);
    rc = keg_meta_readdir(fs->meta, dh->ino, dh->after, FS_DIR_BATCH, plus, batch_cb, &bc);
    if (rc >= 0 && bc.err < 0)
        rc = bc.err;
    if (rc < 0) {
        dh_clear_batch(dh);
        return rc;
    }
    dh->plus = plus;
    if (dh->n < FS_DIR_BATCH)
        dh->eof = 1;
    if (dh->n > 0) {
        last = keg_strdup(dh->ents[dh->n - 1].name);
        if (!last) {
            dh_clear_batch(dh);
            return -ENOMEM;
        }
        keg_free(dh->after);
        dh->after = last;
    }
    return 0;
}

/* Restart and skip to offset off.  LOCKS: dh->mu held. */
static int dh_seek(struct keg_fs *fs, struct keg_dh *dh, uint64_t off, int plus)
{
    int rc;
    dh_reset(dh);
    if (off <= 2) {
        dh->pos = off;
        return 0;
    }
    dh->pos = 2;
    while (dh->pos < off) {
        uint64_t want = off - dh->pos;
        rc = dh_next_batch(fs, dh, plus);
        if (rc < 0)
            return rc;
        if (want < dh->n) {
            dh->idx = (size_t)want;
            dh->pos = off;
            break;
        }
        dh->idx = dh->n;
        dh->pos += dh->n;
        if (dh->eof)
            break;      /* offset past the end: nothing more to deliver */
    }
    return 0;
}

/*----------------------------------------------------------------------------
 * Open directories
 *--------------------------------------------------------------------------*/

static struct fs_odir **odir_bucket(struct keg_fs *fs, uint64_t ino)
{
    _Static_assert(FS_ODIR_BUCKETS == 64, "the hash takes the top 6 bits");
    return &fs->odir[(ino * 0x9E3779B97F4A7C15ULL) >> 58];
}

static struct fs_odir **odir_slot(struct keg_fs *fs, uint64_t ino)
{
    struct fs_odir **pp = odir_bucket(fs, ino);
    while (*pp && (*pp)->a.ino != ino)
        pp = &(*pp)->next;
    return pp;
}

static void oxattr_free(struct fs_oxattr *x)
{
    while (x) {
        struct fs_oxattr *n = x->next;
        keg_free(x);
        x = n;
    }
}

static int odir_open(struct keg_fs *fs, const struct keg_attr *a)
{
    struct fs_odir *o;
    int rc = 0;
    pthread_mutex_lock(&fs->odir_mu);
    o = *odir_slot(fs, a->ino);
    if (o) {
        o->nopen++;
        o->a = *a;
    } else {
        o = keg_calloc(1, sizeof(*o));
        if (o) {
            struct fs_odir **pp = odir_bucket(fs, a->ino);
            o->nopen = 1;
            o->a = *a;
            o->next = *pp;
            *pp = o;
        } else {
            rc = -ENOMEM;
        }
    }
    pthread_mutex_unlock(&fs->odir_mu);
    return rc;
}

static void odir_close(struct keg_fs *fs, uint64_t ino)
{
    struct fs_odir *o = NULL;
    pthread_mutex_lock(&fs->odir_mu);
    struct fs_odir **pp = odir_slot(fs, ino);
    KEG_ASSERT(*pp != NULL);
    if (*pp && --(*pp)->nopen == 0) {
        o = *pp;
        *pp = o->next;
    }
    pthread_mutex_unlock(&fs->odir_mu);
    if (o)
        oxattr_free(o->xa);
    keg_free(o);
}

void fs_odir_seen(struct keg_fs *fs, const struct keg_attr *a)
{
    pthread_mutex_lock(&fs->odir_mu);
    struct fs_odir *o = *odir_slot(fs, a->ino);
    if (o)
        o->a = *a;
    pthread_mutex_unlock(&fs->odir_mu);
}

int fs_odir_dead(struct keg_fs *fs, uint64_t ino, struct keg_attr *out)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&fs->odir_mu);
    struct fs_odir *o = *odir_slot(fs, ino);
    if (o) {
        o->a.nlink = 0;
        *out = o->a;
        rc = 0;
    }
    pthread_mutex_unlock(&fs->odir_mu);
    return rc;
}

int fs_odir_setattr(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, unsigned set,
                    const struct keg_attr *in, struct keg_attr *out)
{
    int64_t now = keg_now_ns();
    uint32_t mode;
    int rc = -ENOENT;

    pthread_mutex_lock(&fs->odir_mu);
    struct fs_odir *o = *odir_slot(fs, ino);
    if (!o)
        goto out;
    o->a.nlink = 0;
    if (set & KEG_FS_SET_SIZE) {
        rc = -EISDIR;
        goto out;
    }
    rc = fs_check_setattr(c, &o->a, set, in, &mode);
    if (rc < 0)
        goto out;
    o->a.mode = mode;
    if (set & KEG_SET_UID)
        o->a.uid = in->uid;
    if (set & KEG_SET_GID)
        o->a.gid = in->gid;
    if (set & KEG_SET_ATIME) {
        o->a.atime = in->atime;
        o->a.atimensec = in->atimensec;
    } else if (set & KEG_SET_ATIME_NOW) {
        o->a.atime = now / 1000000000;
        o->a.atimensec = (uint32_t)(now % 1000000000);
    }
    if (set & KEG_SET_MTIME) {
        o->a.mtime = in->mtime;
        o->a.mtimensec = in->mtimensec;
    } else if (set & KEG_SET_MTIME_NOW) {
        o->a.mtime = now / 1000000000;
        o->a.mtimensec = (uint32_t)(now % 1000000000);
    }
    if (set & KEG_SET_CTIME) {
        o->a.ctime = in->ctime;
        o->a.ctimensec = in->ctimensec;
    } else if (set) {
        o->a.ctime = now / 1000000000;
        o->a.ctimensec = (uint32_t)(now % 1000000000);
    }
    *out = o->a;
out:
    pthread_mutex_unlock(&fs->odir_mu);
    return rc;
}

void fs_odir_free(struct keg_fs *fs)
{
    for (size_t h = 0; h < FS_ODIR_BUCKETS; h++) {
        while (fs->odir[h]) {
            struct fs_odir *o = fs->odir[h];
            fs->odir[h] = o->next;
            oxattr_free(o->xa);
            keg_free(o);
        }
    }
}

/*----------------------------------------------------------------------------
 * Extended attributes of removed open directories
 *--------------------------------------------------------------------------*/

static struct fs_oxattr *oxattr_new(const char *name, const void *val, size_t len)
{
    size_t nl = strlen(name) + 1;
    struct fs_oxattr *x = keg_malloc(sizeof(*x) + nl + len);
    if (!x)
        return NULL;
    x->next = NULL;
    x->vlen = len;
    memcpy(x->data, name, nl);
    if (len)
        memcpy(x->data + nl, val, len);
    return x;
}

static size_t oxattr_bytes(const struct fs_oxattr *x)
{
    return strlen(x->data) + 1 + x->vlen;
}

static struct fs_oxattr **oxattr_find(struct fs_odir *o, const char *name)
{
    struct fs_oxattr **pp = &o->xa;
    while (*pp && strcmp((*pp)->data, name) != 0)
        pp = &(*pp)->next;
    return pp;
}

/* Whether a directory open here was last seen in parent. */
static int odir_child_open(struct keg_fs *fs, uint64_t parent)
{
    int found = 0;
    pthread_mutex_lock(&fs->odir_mu);
    for (size_t h = 0; h < FS_ODIR_BUCKETS && !found; h++)
        for (struct fs_odir *o = fs->odir[h]; o && !found; o = o->next)
            found = o->a.parent == parent && o->a.ino != parent;
    pthread_mutex_unlock(&fs->odir_mu);
    return found;
}

/* Reads every xattr of ino into a list.  OWNERSHIP: caller frees *out with
 * oxattr_free.  Returns 0 or -errno (then *out = NULL). */
static int oxattr_read(struct keg_fs *fs, uint64_t ino, struct fs_oxattr **out)
{
    struct fs_oxattr *head = NULL, **tail = &head;
    char *names = NULL, *val = NULL;
    ssize_t n;
    int rc = 0;
    *out = NULL;
    n = keg_meta_listxattr(fs->meta, ino, NULL, 0);
    if (n <= 0)
        return (int)n;
    names = keg_malloc((size_t)n + 1);
    val = keg_malloc(KEG_XATTR_SIZE_MAX);
    if (!names || !val) {
        rc = -ENOMEM;
        goto out;
    }
    n = keg_meta_listxattr(fs->meta, ino, names, (size_t)n);
    if (n < 0) {
        rc = (int)n;
        goto out;
    }
    names[n] = '\0';
    for (char *p = names; p < names + n; p += strlen(p) + 1) {
        ssize_t vl = keg_meta_getxattr(fs->meta, ino, p, val, KEG_XATTR_SIZE_MAX);
        if (vl == -ENODATA)
            continue;               /* removed meanwhile */
        if (vl < 0) {
            rc = (int)vl;
            goto out;
        }
        struct fs_oxattr *x = oxattr_new(p, val, (size_t)vl);
        if (!x) {
            rc = -ENOMEM;
            goto out;
        }
        *tail = x;
        tail = &x->next;
    }
out:
    keg_free(names);
    keg_free(val);
    if (rc < 0)
        oxattr_free(head);
    else
        *out = head;
    return rc;
}

uint64_t fs_odir_snap_xattrs(struct keg_fs *fs, uint64_t parent, const char *name)
{
    struct keg_attr a;
    struct fs_oxattr *xa;
    if (!odir_child_open(fs, parent))
        return 0;
    if (keg_meta_lookup(fs->meta, parent, name, &a) != 0 || !S_ISDIR(a.mode))
        return 0;
    pthread_mutex_lock(&fs->odir_mu);
    int open_here = *odir_slot(fs, a.ino) != NULL;
    pthread_mutex_unlock(&fs->odir_mu);
    if (!open_here)
        return 0;
    int rc = oxattr_read(fs, a.ino, &xa);
    if (rc < 0) {
        KEG_WARN("directory %" PRIu64 " open while removed: its xattrs could not be read (%s); "
                 "its descriptors will show none", a.ino, strerror(-rc));
        return 0;
    }
    size_t bytes = 0;
    for (struct fs_oxattr *x = xa; x; x = x->next)
        bytes += oxattr_bytes(x);
    pthread_mutex_lock(&fs->odir_mu);
    struct fs_odir *o = *odir_slot(fs, a.ino);
    if (o) {
        oxattr_free(o->xa);
        o->xa = xa;
        o->xbytes = bytes;
        xa = NULL;
    }
    pthread_mutex_unlock(&fs->odir_mu);
    oxattr_free(xa);
    return a.ino;
}

void fs_odir_snap_end(struct keg_fs *fs, uint64_t ino, int removed)
{
    struct fs_oxattr *xa = NULL;
    if (!ino || removed)
        return;
    pthread_mutex_lock(&fs->odir_mu);   /* still alive: the engine answers */
    struct fs_odir *o = *odir_slot(fs, ino);
    if (o) {
        xa = o->xa;
        o->xa = NULL;
        o->xbytes = 0;
    }
    pthread_mutex_unlock(&fs->odir_mu);
    oxattr_free(xa);
}

ssize_t fs_odir_getxattr(struct keg_fs *fs, uint64_t ino, const char *name, void *buf,
                         size_t size)
{
    ssize_t rc = -ENOENT;
    pthread_mutex_lock(&fs->odir_mu);
    struct fs_odir *o = *odir_slot(fs, ino);
    if (o) {
        struct fs_oxattr *x = *oxattr_find(o, name);
        if (!x)
            rc = -ENODATA;
        else if (size == 0)
            rc = (ssize_t)x->vlen;
        else if (size < x->vlen)
            rc = -ERANGE;
        else {
            memcpy(buf, x->data + strlen(x->data) + 1, x->vlen);
            rc = (ssize_t)x->vlen;
        }
    }
    pthread_mutex_unlock(&fs->odir_mu);
    return rc;
}

ssize_t fs_odir_listxattr(struct keg_fs *fs, uint64_t ino, char *buf, size_t size)
{
    ssize_t rc = -ENOENT;
    pthread_mutex_lock(&fs->odir_mu);
    struct fs_odir *o = *odir_slot(fs, ino);
    if (o) {
        size_t need = 0;
        for (struct fs_oxattr *x = o->xa; x; x = x->next)
            need += strlen(x->data) + 1;
        rc = (ssize_t)need;
        if (size && size < need) {
            rc = -ERANGE;
        } else if (size) {
            char *p = buf;
            for (struct fs_oxattr *x = o->xa; x; x = x->next) {
                size_t l = strlen(x->data) + 1;
                memcpy(p, x->data, l);
                p += l;
            }
        }
    }
    pthread_mutex_unlock(&fs->odir_mu);
    return rc;
}

int fs_odir_setxattr(struct keg_fs *fs, uint64_t ino, const char *name, const void *val,
                     size_t len, int flags)
{
    struct fs_oxattr *nx = oxattr_new(name, val, len), *old = NULL;
    int rc = -ENOENT;
    if (!nx)
        return -ENOMEM;
    pthread_mutex_lock(&fs->odir_mu);
    struct fs_odir *o = *odir_slot(fs, ino);
    if (o) {
        struct fs_oxattr **pp = oxattr_find(o, name);
        size_t drop = *pp ? oxattr_bytes(*pp) : 0;
        if (*pp && (flags & XATTR_CREATE))
            rc = -EEXIST;
        else if (!*pp && (flags & XATTR_REPLACE))
            rc = -ENODATA;
        else if (o->xbytes - drop + oxattr_bytes(nx) > FS_ODIR_XBYTES)
            rc = -ENOSPC;
        else {
            old = *pp;
            nx->next = old ? old->next : NULL;
            *pp = nx;
            o->xbytes = o->xbytes - drop + oxattr_bytes(nx);
            nx = NULL;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&fs->odir_mu);
    keg_free(old);
    keg_free(nx);
    return rc;
}

int fs_odir_removexattr(struct keg_fs *fs, uint64_t ino, const char *name)
{
    struct fs_oxattr *old = NULL;
    int rc = -ENOENT;
    pthread_mutex_lock(&fs->odir_mu);
    struct fs_odir *o = *odir_slot(fs, ino);
    if (o) {
        struct fs_oxattr **pp = oxattr_find(o, name);
        rc = -ENODATA;
        if (*pp) {
            old = *pp;
            *pp = old->next;
            o->xbytes -= oxattr_bytes(old);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&fs->odir_mu);
    keg_free(old);
    return rc;
}

int keg_fs_opendir(struct keg_fs *fs, const struct keg_ctx *c, uint64_t ino, struct keg_dh **out)
{
    struct keg_attr a;
    struct keg_dh *dh;
    int rc;

    KEG_UNUSED(c);
    *out = NULL;
    rc = keg_meta_getattr(fs->meta, ino, &a);
    if (rc < 0)
        return rc;
    if (!S_ISDIR(a.mode))
        return -ENOTDIR;
    dh = keg_calloc(1, sizeof(*dh));
    if (!dh)
        return -ENOMEM;
    dh->ents = keg_calloc(FS_DIR_BATCH, sizeof(*dh->ents));
    if (!dh->ents) {
        keg_free(dh);
        return -ENOMEM;
    }
    rc = odir_open(fs, &a);
    if (rc < 0) {
        keg_free(dh->ents);
        keg_free(dh);
        return rc;
    }
    pthread_mutex_init(&dh->mu, NULL);
    dh->ino = ino;
    *out = dh;
    return 0;
}

int keg_fs_releasedir(struct keg_fs *fs, struct keg_dh *dh)
{
    if (!dh)
        return 0;
    odir_close(fs, dh->ino);
    dh_reset(dh);
    keg_free(dh->ents);
    pthread_mutex_destroy(&dh->mu);
    keg_free(dh);
    return 0;
}

/* Attributes of "." (which == 0) or ".." (which == 1). */
static int dot_attr(struct keg_fs *fs, struct keg_dh *dh, int which, struct keg_attr *out)
{
    struct keg_attr a;
    int rc = keg_meta_getattr(fs->meta, dh->ino, &a);
    if (rc < 0)
        return rc;
    if (which == 1 && a.parent != 0 && a.parent != a.ino) {
        rc = keg_meta_getattr(fs->meta, a.parent, out);
        if (rc == -ENOENT) {
            /* parent vanished (directory being moved or removed): report the pointer */
            memset(out, 0, sizeof(*out));
            out->ino = a.parent;
            out->mode = S_IFDIR;
            return 0;
        }
        return rc;
    }
    *out = a;
    return 0;
}

int keg_fs_readdir(struct keg_fs *fs, const struct keg_ctx *c, struct keg_dh *dh, uint64_t off,
                   int plus, keg_fs_fill_fn *fill, void *arg)
{
    struct keg_attr a;
    int rc = 0;

    KEG_UNUSED(c);
    pthread_mutex_lock(&dh->mu);
    if (off != dh->pos) {
        rc = dh_seek(fs, dh, off, plus);
        if (rc < 0)
            goto out;
    }
    while (dh->pos < 2) {
        rc = dot_attr(fs, dh, (int)dh->pos, &a);
        if (rc < 0)
            goto out;
        if (fill(arg, dh->pos == 0 ? "." : "..", &a, dh->pos + 1) != 0)
            goto out;
        dh->pos++;
    }
    for (;;) {
        struct fs_dent *e;
        if (dh->idx == dh->n) {
            if (dh->eof)
                break;
            rc = dh_next_batch(fs, dh, plus);
            if (rc < 0)
                goto out;
            if (dh->n == 0)
                break;
        }
        e = &dh->ents[dh->idx];
        a = e->attr;
        /* Re-read when the batch has no attributes (the kernel switched modes)
         * or the inode is open here: its buffered writes are merged only with
         * an engine answer read after the merge's token (a batch read may
         * predate a commit of them, and the size would go backwards). */
        if (plus && (!dh->plus || fs_attr_token(fs, e->attr.ino) != UINT64_MAX)) {
            rc = fs_getattr_merged(fs, e->attr.ino, &a);
            if (rc == -ENOENT) {            /* removed meanwhile: skip it */
                dh->idx++;
                dh->pos++;
                rc = 0;
                continue;
            }
            if (rc < 0)
                goto out;
        }
        if (fill(arg, e->name, &a, dh->pos + 1) != 0)
            break;
        dh->idx++;
        dh->pos++;
    }
out:
    pthread_mutex_unlock(&dh->mu);
    return rc;
}
