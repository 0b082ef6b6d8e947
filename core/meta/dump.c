/* dump.c -- `kegfs dump` / `kegfs load`: a volume's namespace as streamed JSON,
 * written and read through the keg_meta_ops vtable only (any engine).
 *
 * DESIGN
 * The document (docs/internals/DUMP.md) is one JSON object:
 *   {"kegfs_dump": 1, "format": {...}, "tree": [entry, ...],
 *    "counters": {...}, "totals": {...}}
 * "tree" is FLAT: one object per directory entry in depth-first pre-order,
 * each naming its parent directory's inode.  Nesting the tree in JSON would
 * tie the deepest directory to yajl_gen's fixed depth limit (YAJL_MAX_DEPTH
 * = 128 levels, i.e. about 60 directories); the flat list has a constant
 * JSON depth of 7 whatever the tree's depth.
 *
 * Dump walks the tree iteratively (an explicit stack of directory cursors,
 * each holding one readdir page), so memory is O(depth * page).  A
 * hard-linked inode is written in full at its first name and as
 * {"parent", "name", "link": ino} at the others (a set of the inodes already
 * written).  The id counters are read at the END (alloc_ids(1) probes them;
 * that one id is wasted) so they cover every id in the tree.
 *
 * Load parses with yajl callbacks (nothing but the current entry and the
 * stack of open directories is kept).  An entry is created (mknod with its
 * ORIGINAL inode number) as soon as its "attr" (and "symlink") arrived, then
 * its xattrs and chunks are applied, and its attributes are set last
 * (setattr with KEG_SET_CTIME).  A directory stays "open" on the directory
 * stack until an entry with another parent shows its subtree is complete;
 * only then are its attributes set, because every child created in it
 * touched its mtime/ctime.  Slice records: the first record naming a slice
 * id creates its reference record, later ones (copy_file_range sharing) add
 * references with KEG_WS_SHARE (a set of the slice ids seen).  Quotas are
 * off while loading (format_init with capacity = inodes = 0) and restored at
 * the end with format_init(force=1), after the counters were advanced with
 * alloc_ids.  A failed load destroys what it created (the target was empty).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yajl/yajl_gen.h>
#include <yajl/yajl_parse.h>

#define KEG_LOG_TAG "dump"
#include "keg/dump.h"
#include "keg/log.h"
#include "keg/mem.h"

#define DUMP_VERSION  1
#define DUMP_PAGE     128            /* readdir page per directory level */
#define DUMP_REPORT   1000           /* progress every this many entries */
#define LOAD_BUF      (64u << 10)    /* input read size */
#define LOAD_BATCH    512            /* slice records per write_slices call */

/*----------------------------------------------------------------------------
 * yajl memory through keg_malloc (allocation-failure tests see it)
 *--------------------------------------------------------------------------*/

static void *dj_malloc(void *ctx, size_t n)
{
    KEG_UNUSED(ctx);
    return keg_malloc(n);
}

static void *dj_realloc(void *ctx, void *p, size_t n)
{
    KEG_UNUSED(ctx);
    return keg_realloc(p, n);
}

static void dj_free(void *ctx, void *p)
{
    KEG_UNUSED(ctx);
    keg_free(p);
}

static yajl_alloc_funcs dj_alloc = {dj_malloc, dj_realloc, dj_free, NULL};

/*----------------------------------------------------------------------------
 * A set of uint64 (inode numbers, slice ids; 0 is never stored)
 *--------------------------------------------------------------------------*/

struct u64set {
    uint64_t *v;        /* open addressing, 0 = empty */
    size_t    cap;      /* power of two or 0 */
    size_t    n;
};

static size_t u64set_slot(const struct u64set *s, uint64_t x)
{
    size_t i = (size_t)((x * 0x9E3779B97F4A7C15ULL) >> 17) & (s->cap - 1);
    while (s->v[i] && s->v[i] != x)
        i = (i + 1) & (s->cap - 1);
    return i;
}

/* Returns 1 if added, 0 if already present, -ENOMEM. */
static int u64set_add(struct u64set *s, uint64_t x)
{
    KEG_ASSERT(x != 0);
    if ((s->n + 1) * 2 > s->cap) {
        struct u64set t = {.cap = s->cap ? s->cap * 2 : 1024};
        t.v = keg_calloc(t.cap, sizeof(uint64_t));
        if (!t.v)
            return -ENOMEM;
        for (size_t i = 0; i < s->cap; i++) {
            if (s->v[i]) {
                t.v[u64set_slot(&t, s->v[i])] = s->v[i];
                t.n++;
            }
        }
        keg_free(s->v);
        *s = t;
    }
    size_t i = u64set_slot(s, x);
    if (s->v[i])
        return 0;
    s->v[i] = x;
    s->n++;
    return 1;
}

static void u64set_free(struct u64set *s)
{
    keg_free(s->v);
    memset(s, 0, sizeof(*s));
}

/*----------------------------------------------------------------------------
 * Byte strings in JSON: UTF-8 check and base64
 *--------------------------------------------------------------------------*/

/* 1 if p[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF) without NUL bytes. */
static int utf8_valid(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k;
        uint32_t cp, min;
        if (c == 0)
            return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            k = 1, cp = c & 0x1F, min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2, cp = c & 0x0F, min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i <= k)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

static const char b64_alpha[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Standard base64 with padding.  OWNERSHIP: caller keg_free()s *out. */
static int b64_encode(const unsigned char *p, size_t n, char **out, size_t *outlen)
{
    size_t len = (n + 2) / 3 * 4;
    char *s = keg_malloc(len + 1);
    size_t o = 0;
    *out = NULL;
    if (!s)
        return -ENOMEM;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        s[o++] = b64_alpha[(v >> 18) & 63];
        s[o++] = b64_alpha[(v >> 12) & 63];
        s[o++] = i + 1 < n ? b64_alpha[(v >> 6) & 63] : '=';
        s[o++] = i + 2 < n ? b64_alpha[v & 63] : '=';
    }
    s[o] = '\0';
    *out = s;
    *outlen = o;
    return 0;
}

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict decoding (length a multiple of 4, padding only at the end) into a
 * new buffer with a NUL after the data.  OWNERSHIP: caller keg_free()s *out.
 * Returns 0, -EINVAL, -ENOMEM. */
static int b64_decode(const unsigned char *s, size_t n, unsigned char **out, size_t *outlen)
{
    unsigned char *d;
    size_t o = 0;
    *out = NULL;
    if (n % 4)
        return -EINVAL;
    d = keg_malloc(n / 4 * 3 + 1);
    if (!d)
        return -ENOMEM;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            if (s[i + j] == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
            } else if (pad) {
                v[j] = -1;      /* data after padding */
            } else {
                v[j] = b64_val(s[i + j]);
            }
            if (v[j] < 0) {
                keg_free(d);
                return -EINVAL;
            }
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        d[o++] = (unsigned char)(x >> 16);
        if (pad < 2)
            d[o++] = (unsigned char)(x >> 8);
        if (pad < 1)
            d[o++] = (unsigned char)x;
    }
    d[o] = '\0';
    *out = d;
    *outlen = o;
    return 0;
}

/*----------------------------------------------------------------------------
 * Generator helpers (yajl_gen writing to a FILE)
 *--------------------------------------------------------------------------*/

struct dgen {
    yajl_gen g;
    FILE    *out;
    int      werr;      /* a write to out failed */
};

static void dg_print(void *ctx, const char *s, size_t len)
{
    struct dgen *d = ctx;
    if (!d->werr && fwrite(s, 1, len, d->out) != len)
        d->werr = 1;
}

static int dg_rc(struct dgen *d, yajl_gen_status st)
{
    if (st == yajl_gen_status_ok)
        return d->werr ? -EIO : 0;
    KEG_ERR("dump: JSON generator error %d", (int)st);
    return -EIO;
}

static int dg_key(struct dgen *d, const char *k)
{
    return dg_rc(d, yajl_gen_string(d->g, (const unsigned char *)k, strlen(k)));
}

static int dg_str(struct dgen *d, const char *s, size_t n)
{
    return dg_rc(d, yajl_gen_string(d->g, (const unsigned char *)s, n));
}

static int dg_u64(struct dgen *d, uint64_t v)
{
    char num[24];
    int n = snprintf(num, sizeof(num), "%" PRIu64, v);
    return dg_rc(d, yajl_gen_number(d->g, num, (size_t)n));
}

static int dg_i64(struct dgen *d, int64_t v)
{
    char num[24];
    int n = snprintf(num, sizeof(num), "%" PRId64, v);
    return dg_rc(d, yajl_gen_number(d->g, num, (size_t)n));
}

static int dg_kv_u64(struct dgen *d, const char *k, uint64_t v)
{
    int rc = dg_key(d, k);
    return rc ? rc : dg_u64(d, v);
}

static int dg_kv_i64(struct dgen *d, const char *k, int64_t v)
{
    int rc = dg_key(d, k);
    return rc ? rc : dg_i64(d, v);
}

/* Base64 value under key k. */
static int dg_kv_b64(struct dgen *d, const char *k, const void *p, size_t n)
{
    char *s = NULL;
    size_t len = 0;
    int rc = dg_key(d, k);
    if (!rc)
        rc = b64_encode(p, n, &s, &len);
    if (!rc)
        rc = dg_str(d, s, len);
    keg_free(s);
    return rc;
}

/* A byte string: "k": "text" when it is valid UTF-8, else "k_b64": "base64". */
static int dg_kv_bytes(struct dgen *d, const char *k, const void *p, size_t n)
{
    char kb[32];
    int rc;
    if (utf8_valid(p, n)) {
        rc = dg_key(d, k);
        return rc ? rc : dg_str(d, p, n);
    }
    snprintf(kb, sizeof(kb), "%s_b64", k);
    return dg_kv_b64(d, kb, p, n);
}

/*----------------------------------------------------------------------------
 * Dump
 *--------------------------------------------------------------------------*/

struct dpage_ent {
    char           *name;   /* OWNERSHIP: the page */
    struct keg_attr a;
    int             has_attr;
};

/* One directory being listed. */
struct dlevel {
    uint64_t          ino;
    struct dpage_ent *ent;  /* current page (DUMP_PAGE slots) */
    uint32_t          n, pos;
    int               eof;  /* the page in ent is the directory's last */
    int               cb_err;   /* -errno from dpage_cb */
};

struct dumper {
    struct keg_meta      *m;
    struct dgen           d;
    keg_dump_progress_fn *progress;
    void                 *arg;
    uint64_t              total;        /* for progress */
    struct keg_dump_stats st;
    struct u64set         linked;       /* hard-linked inodes already written */
    uint64_t              max_ino, max_slice;
    char                 *buf;          /* scratch: xattr names/values, symlink target */
    size_t                bufcap;
};

static void dpage_clear(struct dlevel *l)
{
    for (uint32_t i = 0; i < l->n; i++)
        keg_free(l->ent[i].name);
    l->n = l->pos = 0;
}

static int dpage_cb(void *arg, const struct keg_dirent *de)
{
    struct dlevel *l = arg;
    struct dpage_ent *e;
    if (l->n >= DUMP_PAGE)
        return 1;
    e = &l->ent[l->n];
    e->name = keg_strdup(de->name);
    if (!e->name) {
        l->cb_err = -ENOMEM;
        return 1;
    }
    memset(&e->a, 0, sizeof(e->a));
    e->a.ino = de->ino;
    e->a.mode = de->type;
    e->has_attr = de->attr != NULL;
    if (de->attr)
        e->a = *de->attr;
    l->n++;
    return 0;
}

/* Reads the next page of l (after the last name of the current one). */
static int dpage_next(struct dumper *dp, struct dlevel *l)
{
    char *after = NULL;
    int rc;
    if (l->n) {
        after = l->ent[l->n - 1].name;
        l->ent[l->n - 1].name = NULL;
    }
    dpage_clear(l);
    l->cb_err = 0;
    rc = keg_meta_readdir(dp->m, l->ino, after, DUMP_PAGE, 1, dpage_cb, l);
    keg_free(after);
    if (rc >= 0 && l->cb_err)
        rc = l->cb_err;
    if (rc < 0) {
        KEG_ERR("dump: readdir of directory %" PRIu64 " failed: %s", l->ino, strerror(-rc));
        return rc;
    }
    l->eof = l->n < DUMP_PAGE;
    for (uint32_t i = 0; i < l->n; i++) {
        if (!l->ent[i].has_attr) {
            rc = keg_meta_getattr(dp->m, l->ent[i].a.ino, &l->ent[i].a);
            if (rc < 0) {
                KEG_ERR("dump: getattr of inode %" PRIu64 " failed: %s", l->ent[i].a.ino,
                        strerror(-rc));
                return rc;
            }
        }
    }
    return 0;
}

static int dump_grow(struct dumper *dp, size_t n)
{
    if (n <= dp->bufcap)
        return 0;
    char *b = keg_realloc(dp->buf, n);
    if (!b)
        return -ENOMEM;
    dp->buf = b;
    dp->bufcap = n;
    return 0;
}

static int dump_attr(struct dumper *dp, const struct keg_attr *a)
{
    struct dgen *d = &dp->d;
    int rc = dg_key(d, "attr");
    rc = rc ? rc : dg_rc(d, yajl_gen_map_open(d->g));
    rc = rc ? rc : dg_kv_u64(d, "ino", a->ino);
    rc = rc ? rc : dg_kv_u64(d, "mode", a->mode);
    rc = rc ? rc : dg_kv_u64(d, "uid", a->uid);
    rc = rc ? rc : dg_kv_u64(d, "gid", a->gid);
    rc = rc ? rc : dg_kv_u64(d, "nlink", a->nlink);
    rc = rc ? rc : dg_kv_u64(d, "size", a->size);
    rc = rc ? rc : dg_kv_u64(d, "rdev", a->rdev);
    rc = rc ? rc : dg_kv_i64(d, "atime", a->atime);
    rc = rc ? rc : dg_kv_u64(d, "atimensec", a->atimensec);
    rc = rc ? rc : dg_kv_i64(d, "mtime", a->mtime);
    rc = rc ? rc : dg_kv_u64(d, "mtimensec", a->mtimensec);
    rc = rc ? rc : dg_kv_i64(d, "ctime", a->ctime);
    rc = rc ? rc : dg_kv_u64(d, "ctimensec", a->ctimensec);
    return rc ? rc : dg_rc(d, yajl_gen_map_close(d->g));
}

static int dump_symlink(struct dumper *dp, uint64_t ino)
{
    int rc = dump_grow(dp, KEG_SYMLINK_MAX + 1);
    ssize_t n;
    if (rc)
        return rc;
    n = keg_meta_readlink(dp->m, ino, dp->buf, KEG_SYMLINK_MAX + 1);
    if (n < 0) {
        KEG_ERR("dump: readlink of inode %" PRIu64 " failed: %s", ino, strerror((int)-n));
        return (int)n;
    }
    return dg_kv_bytes(&dp->d, "symlink", dp->buf, (size_t)n);
}

/* Fetches xattr `name` of ino into a new buffer.  OWNERSHIP: caller keg_free()s *val. */
static int dump_getxattr(struct dumper *dp, uint64_t ino, const char *name, char **val,
                         size_t *len)
{
    *val = NULL;
    for (int tries = 0; tries < 5; tries++) {
        ssize_t n = keg_meta_getxattr(dp->m, ino, name, NULL, 0);
        if (n < 0)
            return (int)n;
        char *v = keg_malloc((size_t)n + 1);
        if (!v)
            return -ENOMEM;
        ssize_t got = keg_meta_getxattr(dp->m, ino, name, v, (size_t)n + 1);
        if (got >= 0) {
            *val = v;
            *len = (size_t)got;
            return 0;
        }
        keg_free(v);
        if (got != -ERANGE)
            return (int)got;
    }
    return -EAGAIN;
}

static int dump_xattrs(struct dumper *dp, uint64_t ino)
{
    struct dgen *d = &dp->d;
    ssize_t n = 0;
    int rc;
    for (int tries = 0; tries < 5; tries++) {
        n = keg_meta_listxattr(dp->m, ino, NULL, 0);
        if (n <= 0)
            break;
        rc = dump_grow(dp, (size_t)n + 1);
        if (rc)
            return rc;
        n = keg_meta_listxattr(dp->m, ino, dp->buf, (size_t)n + 1);
        if (n != -ERANGE)
            break;
    }
    if (n == -ENOSYS || n == 0)
        return 0;
    if (n < 0) {
        KEG_ERR("dump: listxattr of inode %" PRIu64 " failed: %s", ino, strerror((int)-n));
        return (int)n;
    }
    /* the names stay in a private copy: dump_getxattr does not use dp->buf */
    char *names = keg_malloc((size_t)n + 1);
    if (!names)
        return -ENOMEM;
    memcpy(names, dp->buf, (size_t)n);
    names[n] = '\0';
    rc = dg_key(d, "xattrs");
    rc = rc ? rc : dg_rc(d, yajl_gen_array_open(d->g));
    for (ssize_t o = 0; !rc && o < n; o += (ssize_t)strlen(names + o) + 1) {
        const char *name = names + o;
        char *val = NULL;
        size_t vlen = 0;
        if (!*name)
            continue;
        rc = dump_getxattr(dp, ino, name, &val, &vlen);
        if (rc == -ENODATA) {   /* removed meanwhile */
            rc = 0;
            continue;
        }
        if (rc) {
            KEG_ERR("dump: getxattr of inode %" PRIu64 " failed: %s", ino, strerror(-rc));
            break;
        }
        rc = dg_rc(d, yajl_gen_map_open(d->g));
        rc = rc ? rc : dg_kv_bytes(d, "name", name, strlen(name));
        rc = rc ? rc : dg_kv_b64(d, "value", val, vlen);
        rc = rc ? rc : dg_rc(d, yajl_gen_map_close(d->g));
        keg_free(val);
        dp->st.xattrs++;
    }
    keg_free(names);
    return rc ? rc : dg_rc(d, yajl_gen_array_close(d->g));
}

/* Chunks 0 .. ceil(size / KEG_CHUNK_SIZE) - 1: truncate drops every chunk
 * past the end, so none can exist beyond. */
static int dump_chunks(struct dumper *dp, const struct keg_attr *a)
{
    struct dgen *d = &dp->d;
    uint64_t nchunks = (a->size + KEG_CHUNK_SIZE - 1) / KEG_CHUNK_SIZE;
    int opened = 0;
    int rc = 0;
    for (uint64_t i = 0; i < nchunks && !rc; i++) {
        struct keg_slice *s = NULL;
        size_t n = 0;
        uint32_t next = 0;
        /* skip the empty indices of a sparse file when the engine can */
        int nrc = keg_meta_next_chunk(dp->m, a->ino, (uint32_t)i, &next);
        if (nrc == -ENOENT)
            break;
        if (nrc == 0 && next > i)
            i = next;
        if (i >= nchunks)
            break;
        rc = keg_meta_read_chunk(dp->m, a->ino, (uint32_t)i, &s, &n);
        if (rc) {
            KEG_ERR("dump: reading chunk %" PRIu64 " of inode %" PRIu64 " failed: %s", i,
                    a->ino, strerror(-rc));
            break;
        }
        if (n && !opened) {
            rc = dg_key(d, "chunks");
            rc = rc ? rc : dg_rc(d, yajl_gen_array_open(d->g));
            opened = 1;
        }
        if (n) {
            rc = rc ? rc : dg_rc(d, yajl_gen_map_open(d->g));
            rc = rc ? rc : dg_kv_u64(d, "indx", i);
            rc = rc ? rc : dg_key(d, "slices");
            rc = rc ? rc : dg_rc(d, yajl_gen_array_open(d->g));
            for (size_t j = 0; j < n && !rc; j++) {
                rc = dg_rc(d, yajl_gen_array_open(d->g));
                rc = rc ? rc : dg_u64(d, s[j].id);
                rc = rc ? rc : dg_u64(d, s[j].size);
                rc = rc ? rc : dg_u64(d, s[j].off);
                rc = rc ? rc : dg_u64(d, s[j].len);
                rc = rc ? rc : dg_u64(d, s[j].pos);
                rc = rc ? rc : dg_rc(d, yajl_gen_array_close(d->g));
                dp->max_slice = KEG_MAX(dp->max_slice, s[j].id);
            }
            dp->st.slices += n;
            rc = rc ? rc : dg_rc(d, yajl_gen_array_close(d->g));
            rc = rc ? rc : dg_rc(d, yajl_gen_map_close(d->g));
        }
        keg_free(s);
    }
    if (!rc && opened)
        rc = dg_rc(d, yajl_gen_array_close(d->g));
    return rc;
}

static void dump_report(struct dumper *dp, int force)
{
    if (dp->progress && (force || dp->st.entries % DUMP_REPORT == 0))
        dp->progress(dp->arg, &dp->st, dp->st.entries, dp->total);
}

/* One tree record.  parent == 0 for the root (no "parent", no "name"). */
static int dump_entry(struct dumper *dp, uint64_t parent, const char *name,
                      const struct keg_attr *a)
{
    struct dgen *d = &dp->d;
    int rc = dg_rc(d, yajl_gen_map_open(d->g));
    if (!rc && parent) {
        rc = dg_kv_u64(d, "parent", parent);
        rc = rc ? rc : dg_kv_bytes(d, "name", name, strlen(name));
    }
    if (rc)
        return rc;
    dp->st.entries++;
    dp->max_ino = KEG_MAX(dp->max_ino, a->ino);
    if (!S_ISDIR(a->mode) && a->nlink > 1) {
        rc = u64set_add(&dp->linked, a->ino);
        if (rc < 0)
            return rc;
        if (rc == 0) {          /* already written at another name */
            dp->st.links++;
            rc = dg_kv_u64(d, "link", a->ino);
            goto close;
        }
    }
    rc = dump_attr(dp, a);
    if (!rc && S_ISLNK(a->mode))
        rc = dump_symlink(dp, a->ino);
    if (!rc)
        rc = dump_xattrs(dp, a->ino);
    if (!rc && S_ISREG(a->mode))
        rc = dump_chunks(dp, a);
    if (rc)
        return rc;
    switch (a->mode & S_IFMT) {
    case S_IFDIR: dp->st.dirs++; break;
    case S_IFREG: dp->st.files++; dp->st.bytes += a->size; break;
    case S_IFLNK: dp->st.symlinks++; break;
    default: dp->st.others++; break;
    }
close:
    rc = rc ? rc : dg_rc(d, yajl_gen_map_close(d->g));
    if (!rc)
        dump_report(dp, 0);
    return rc;
}

static void dlevels_free(struct dlevel *lv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dpage_clear(&lv[i]);
        keg_free(lv[i].ent);
    }
    keg_free(lv);
}

/* Depth-first pre-order walk with an explicit stack of directory cursors. */
static int dump_tree(struct dumper *dp)
{
    struct dlevel *lv = NULL;
    size_t nlv = 0, cap = 0;
    struct keg_attr root;
    int rc = keg_meta_getattr(dp->m, KEG_ROOT_INO, &root);
    if (rc) {
        KEG_ERR("dump: the root directory cannot be read: %s", strerror(-rc));
        return rc;
    }
    rc = dg_key(&dp->d, "tree");
    rc = rc ? rc : dg_rc(&dp->d, yajl_gen_array_open(dp->d.g));
    rc = rc ? rc : dump_entry(dp, 0, NULL, &root);
    uint64_t next = KEG_ROOT_INO;   /* directory to push, 0 = none */
    while (!rc) {
        if (next) {
            if (nlv == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct dlevel *t = keg_realloc(lv, ncap * sizeof(*lv));
                if (!t) {
                    rc = -ENOMEM;
                    break;
                }
                lv = t;
                cap = ncap;
            }
            memset(&lv[nlv], 0, sizeof(lv[nlv]));
            lv[nlv].ino = next;
            lv[nlv].ent = keg_calloc(DUMP_PAGE, sizeof(struct dpage_ent));
            if (!lv[nlv].ent) {
                rc = -ENOMEM;
                break;
            }
            nlv++;
            next = 0;
            rc = dpage_next(dp, &lv[nlv - 1]);
            continue;
        }
        if (nlv == 0)
            break;
        struct dlevel *l = &lv[nlv - 1];
        if (l->pos == l->n) {
            if (l->eof) {
                dpage_clear(l);
                keg_free(l->ent);
                nlv--;
            } else {
                rc = dpage_next(dp, l);
            }
            continue;
        }
        struct dpage_ent *e = &l->ent[l->pos++];
        rc = dump_entry(dp, l->ino, e->name, &e->a);
        if (!rc && S_ISDIR(e->a.mode))
            next = e->a.ino;
    }
    dlevels_free(lv, nlv);
    return rc ? rc : dg_rc(&dp->d, yajl_gen_array_close(dp->d.g));
}

static int dump_format(struct dumper *dp, unsigned flags)
{
    struct dgen *d = &dp->d;
    struct keg_format f;
    int keep = (flags & KEG_DUMP_KEEP_SECRETS) != 0;
    int rc = keg_meta_format_load(dp->m, &f);
    if (rc) {
        if (rc == -ENOENT)
            KEG_ERR("dump: %s holds no volume (not formatted)", dp->m->url_redacted);
        else
            KEG_ERR("dump: cannot read the volume format: %s", strerror(-rc));
        return rc;
    }
    if (!keep) {
        memset(f.access_key, 0, sizeof(f.access_key));
        memset(f.secret_key, 0, sizeof(f.secret_key));
        memset(f.session_token, 0, sizeof(f.session_token));
    }
    rc = dg_key(d, "format");
    rc = rc ? rc : dg_rc(d, yajl_gen_map_open(d->g));
    rc = rc ? rc : dg_kv_bytes(d, "name", f.name, strlen(f.name));
    rc = rc ? rc : dg_kv_bytes(d, "uuid", f.uuid, strlen(f.uuid));
    rc = rc ? rc : dg_kv_bytes(d, "storage", f.storage, strlen(f.storage));
    rc = rc ? rc : dg_kv_bytes(d, "bucket", f.bucket, strlen(f.bucket));
    rc = rc ? rc : dg_kv_bytes(d, "access_key", f.access_key, strlen(f.access_key));
    rc = rc ? rc : dg_kv_bytes(d, "secret_key", f.secret_key, strlen(f.secret_key));
    rc = rc ? rc : dg_kv_bytes(d, "session_token", f.session_token, strlen(f.session_token));
    rc = rc ? rc : dg_key(d, "secrets_omitted");
    rc = rc ? rc : dg_rc(d, yajl_gen_bool(d->g, !keep));
    rc = rc ? rc : dg_kv_bytes(d, "region", f.region, strlen(f.region));
    rc = rc ? rc : dg_kv_bytes(d, "compress", f.compress, strlen(f.compress));
    rc = rc ? rc : dg_kv_u64(d, "block_size", f.block_size);
    rc = rc ? rc : dg_kv_u64(d, "capacity", f.capacity);
    rc = rc ? rc : dg_kv_u64(d, "inodes", f.inodes);
    rc = rc ? rc : dg_kv_u64(d, "trash_days", f.trash_days);
    rc = rc ? rc : dg_kv_u64(d, "meta_version", f.meta_version);
    rc = rc ? rc : dg_kv_i64(d, "created", f.created);
    rc = rc ? rc : dg_kv_u64(d, "block_version", f.block_version);
    memset(&f, 0, sizeof(f));   /* secrets do not linger on the stack */
    return rc ? rc : dg_rc(d, yajl_gen_map_close(d->g));
}

static int dump_totals(struct dgen *d, const char *key, const struct keg_dump_stats *st)
{
    int rc = dg_key(d, key);
    rc = rc ? rc : dg_rc(d, yajl_gen_map_open(d->g));
    rc = rc ? rc : dg_kv_u64(d, "entries", st->entries);
    rc = rc ? rc : dg_kv_u64(d, "dirs", st->dirs);
    rc = rc ? rc : dg_kv_u64(d, "files", st->files);
    rc = rc ? rc : dg_kv_u64(d, "symlinks", st->symlinks);
    rc = rc ? rc : dg_kv_u64(d, "others", st->others);
    rc = rc ? rc : dg_kv_u64(d, "links", st->links);
    rc = rc ? rc : dg_kv_u64(d, "xattrs", st->xattrs);
    rc = rc ? rc : dg_kv_u64(d, "bytes", st->bytes);
    rc = rc ? rc : dg_kv_u64(d, "slices", st->slices);
    return rc ? rc : dg_rc(d, yajl_gen_map_close(d->g));
}

/* The next id alloc_ids would hand out, at least above every id seen.
 * Probing wastes one id of the dumped volume (harmless). */
static int dump_counter(struct dumper *dp, int kind, uint64_t seen_max, uint64_t *next)
{
    uint64_t first = 0;
    int rc = keg_meta_alloc_ids(dp->m, kind, 1, &first);
    if (rc) {
        KEG_ERR("dump: cannot read the %s counter: %s", kind == KEG_ID_INODE ? "inode" : "slice",
                strerror(-rc));
        return rc;
    }
    *next = KEG_MAX(first, seen_max + 1);
    return 0;
}

int keg_meta_dump(struct keg_meta *m, FILE *out, unsigned flags, keg_dump_progress_fn *progress,
                  void *arg, struct keg_dump_stats *st)
{
    struct dumper dp;
    uint64_t used_bytes = 0, used_inodes = 0, ni = 0, ns = 0;
    int rc;

    memset(&dp, 0, sizeof(dp));
    if (st)
        memset(st, 0, sizeof(*st));
    dp.m = m;
    dp.progress = progress;
    dp.arg = arg;
    dp.d.out = out;
    dp.d.g = yajl_gen_alloc(&dj_alloc);
    if (!dp.d.g)
        return -ENOMEM;
    yajl_gen_config(dp.d.g, yajl_gen_print_callback, dg_print, &dp.d);
    if (flags & KEG_DUMP_PRETTY)
        yajl_gen_config(dp.d.g, yajl_gen_beautify, 1);
    if (keg_meta_statfs(m, &used_bytes, &used_inodes) == 0)
        dp.total = used_inodes + 1;

    rc = dg_rc(&dp.d, yajl_gen_map_open(dp.d.g));
    rc = rc ? rc : dg_kv_u64(&dp.d, "kegfs_dump", DUMP_VERSION);
    rc = rc ? rc : dump_format(&dp, flags);
    rc = rc ? rc : dump_tree(&dp);
    rc = rc ? rc : dump_counter(&dp, KEG_ID_INODE, dp.max_ino, &ni);
    rc = rc ? rc : dump_counter(&dp, KEG_ID_SLICE, dp.max_slice, &ns);
    if (!rc) {
        rc = dg_key(&dp.d, "counters");
        rc = rc ? rc : dg_rc(&dp.d, yajl_gen_map_open(dp.d.g));
        rc = rc ? rc : dg_kv_u64(&dp.d, "next_inode", ni);
        rc = rc ? rc : dg_kv_u64(&dp.d, "next_slice", ns);
        rc = rc ? rc : dg_rc(&dp.d, yajl_gen_map_close(dp.d.g));
    }
    rc = rc ? rc : dump_totals(&dp.d, "totals", &dp.st);
    rc = rc ? rc : dg_rc(&dp.d, yajl_gen_map_close(dp.d.g));
    if (!rc)
        dg_print(&dp.d, "\n", 1);
    if (fflush(out) != 0 || ferror(out))
        dp.d.werr = 1;
    if (!rc && dp.d.werr)
        rc = -EIO;
    if (rc == -EIO && dp.d.werr)
        KEG_ERR("dump: writing the output failed");
    if (!rc)
        dump_report(&dp, 1);
    if (st)
        *st = dp.st;
    yajl_gen_free(dp.d.g);
    u64set_free(&dp.linked);
    keg_free(dp.buf);
    return rc;
}

/*----------------------------------------------------------------------------
 * Load: field tables
 *--------------------------------------------------------------------------*/

enum { F_STR, F_U32, F_U64, F_I64 };

struct lfield {
    const char *key;
    int         type;
    size_t      off;
    size_t      size;       /* F_STR: buffer size incl. the NUL */
    int         required;
};

#define FSTR(k, req) {#k, F_STR, offsetof(struct keg_format, k), \
                      sizeof(((struct keg_format *)0)->k), req}
#define FNUM(k, t) {#k, t, offsetof(struct keg_format, k), 0, 1}
static const struct lfield fmt_fields[] = {
    FSTR(name, 1), FSTR(uuid, 1), FSTR(storage, 1), FSTR(bucket, 1),
    FSTR(access_key, 0), FSTR(secret_key, 0), FSTR(session_token, 0),
    FSTR(region, 1), FSTR(compress, 1),
    FNUM(block_size, F_U32), FNUM(capacity, F_U64), FNUM(inodes, F_U64),
    FNUM(trash_days, F_U32), FNUM(meta_version, F_U32), FNUM(created, F_I64),
    /* optional: dumps of volumes made before block identities have none (0) */
    {"block_version", F_U32, offsetof(struct keg_format, block_version), 0, 0},
    {NULL, 0, 0, 0, 0},
};

#define ANUM(k, t) {#k, t, offsetof(struct keg_attr, k), 0, 1}
static const struct lfield attr_fields[] = {
    ANUM(ino, F_U64), ANUM(mode, F_U32), ANUM(uid, F_U32), ANUM(gid, F_U32),
    ANUM(nlink, F_U32), ANUM(size, F_U64), ANUM(rdev, F_U64),
    ANUM(atime, F_I64), ANUM(atimensec, F_U32), ANUM(mtime, F_I64), ANUM(mtimensec, F_U32),
    ANUM(ctime, F_I64), ANUM(ctimensec, F_U32),
    {NULL, 0, 0, 0, 0},
};

#define TNUM(k) {#k, F_U64, offsetof(struct keg_dump_stats, k), 0, 1}
static const struct lfield total_fields[] = {
    TNUM(entries), TNUM(dirs), TNUM(files), TNUM(symlinks), TNUM(others), TNUM(links),
    TNUM(xattrs), TNUM(bytes), TNUM(slices),
    {NULL, 0, 0, 0, 0},
};

static unsigned lfield_all(const struct lfield *t)
{
    unsigned bits = 0;
    for (unsigned i = 0; t[i].key; i++)
        if (t[i].required)
            bits |= 1u << i;
    return bits;
}

static int lfield_find(const struct lfield *t, const char *key, int *b64)
{
    size_t kl = strlen(key);
    *b64 = 0;
    for (int i = 0; t[i].key; i++) {
        size_t fl = strlen(t[i].key);
        if (strcmp(t[i].key, key) == 0)
            return i;
        if (t[i].type == F_STR && kl == fl + 4 && strncmp(key, t[i].key, fl) == 0 &&
            strcmp(key + fl, "_b64") == 0) {
            *b64 = 1;
            return i;
        }
    }
    return -1;
}

/* Strict JSON integer -> u64/i64 (no fraction, no exponent, no leading '+'). */
static int parse_num(const char *s, size_t n, int type, void *dst)
{
    int neg = n > 0 && s[0] == '-';
    uint64_t v = 0, max;
    size_t i = neg ? 1 : 0;
    if (i == n)
        return -EINVAL;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
            return -ERANGE;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    switch (type) {
    case F_U32:
        if (neg || v > UINT32_MAX)
            return -ERANGE;
        *(uint32_t *)dst = (uint32_t)v;
        return 0;
    case F_U64:
        if (neg)
            return -ERANGE;
        *(uint64_t *)dst = v;
        return 0;
    case F_I64:
        max = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        if (v > max)
            return -ERANGE;
        *(int64_t *)dst = neg ? (int64_t)(0 - v) : (int64_t)v;
        return 0;
    default:
        return -EINVAL;
    }
}

/*----------------------------------------------------------------------------
 * Load: state
 *--------------------------------------------------------------------------*/

enum lkind {
    LK_TOP, LK_FORMAT, LK_TREE, LK_ENTRY, LK_ATTR, LK_XATTRS, LK_XATTR, LK_CHUNKS, LK_CHUNK,
    LK_SLICES, LK_SLICE, LK_COUNTERS, LK_TOTALS,
};

#define LDEPTH 8            /* deepest JSON nesting of a valid dump: 7 */
#define LKEY   24           /* longest key we know, plus room */

/* The tree entry being read. */
struct lentry {
    uint64_t        parent;
    int             has_parent;
    char            name[KEG_NAME_MAX + 1];
    int             has_name;
    struct keg_attr a;
    unsigned        attr_bits;
    char           *target;         /* OWNERSHIP: the loader */
    uint64_t        link;
    int             has_link;
    int             created;
    int             wrote_chunks;
};

/* A directory whose subtree is still being loaded (its attrs are set at pop). */
struct ldir {
    struct keg_attr a;
};

struct loader {
    struct keg_meta      *m;
    unsigned              flags;
    keg_dump_progress_fn *progress;
    void                 *arg;
    uint64_t              fed, total;   /* input bytes parsed before the current buffer */
    yajl_handle           h;

    int   depth;                        /* JSON containers open */
    int   kind[LDEPTH];
    char  key[LDEPTH][LKEY];            /* last key of a map level ("" = none/unknown) */

    int   err;                          /* -errno that stopped the parse */
    char  msg[512];

    int   seen_version, format_done, tree_started, tree_done, counters_done, totals_done;
    int   done;
    struct keg_format f;
    unsigned fmt_bits;
    int   secrets_omitted;
    int   formatted;                    /* we ran format_init: destroy on failure */

    struct lentry e;
    struct ldir  *dirs;
    size_t        ndirs, capdirs;

    char           xname[KEG_NAME_MAX + 1];
    int            has_xname;
    unsigned char *xval;                /* OWNERSHIP: the loader */
    size_t         xlen;
    int            has_xval;

    uint32_t                indx;
    int                     has_indx;
    struct keg_chunk_slice *batch;      /* LOAD_BATCH records */
    size_t                  nbatch;
    uint64_t                sv[5];
    int                     nsv;

    struct u64set  slices;              /* slice ids with a reference record */
    uint64_t       next_inode, next_slice, max_ino, max_slice;
    unsigned       counter_bits;
    struct keg_dump_stats st, want;
    unsigned       want_bits;
};

static int lfail(struct loader *L, int rc, const char *fmt, ...) KEG_PRINTF(3, 4);
/* Records the first error; returns 0 so that callbacks can `return lfail(...)`. */
static int lfail(struct loader *L, int rc, const char *fmt, ...)
{
    if (!L->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(L->msg, sizeof(L->msg), fmt, ap);
        va_end(ap);
        L->err = rc;
    }
    return 0;
}

/* Entry name for messages (a non-UTF-8 name is shown with escapes). */
static const char *lname(const struct loader *L, char *buf, size_t size)
{
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)L->e.name;
    if (!L->e.has_name)
        return L->e.has_parent ? "(no name)" : "(root)";
    for (; *p && o + 5 < size; p++) {
        if (*p >= 0x20 && *p < 0x7f)
            buf[o++] = (char)*p;
        else
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", *p);
    }
    buf[o] = '\0';
    return buf;
}

/*----------------------------------------------------------------------------
 * Load: applying records to the engine
 *--------------------------------------------------------------------------*/

#define SET_ALL (KEG_SET_MODE | KEG_SET_UID | KEG_SET_GID | KEG_SET_ATIME | KEG_SET_MTIME | \
                 KEG_SET_CTIME)

static void load_report(struct loader *L, int force)
{
    if (L->progress && (force || L->st.entries % DUMP_REPORT == 0))
        L->progress(L->arg, &L->st, L->fed + (L->h ? yajl_get_bytes_consumed(L->h) : 0),
                    L->total);
}

/* Sets the attributes of a directory whose subtree is complete. */
static int ldir_close(struct loader *L)
{
    struct keg_attr *a = &L->dirs[L->ndirs - 1].a;
    struct keg_attr out;
    int rc = keg_meta_setattr(L->m, a->ino, SET_ALL, a, &out);
    if (rc)
        return lfail(L, rc, "setting the attributes of directory inode %" PRIu64 " failed: %s",
                     a->ino, strerror(-rc));
    if (out.nlink != a->nlink)
        return lfail(L, -EINVAL, "directory inode %" PRIu64 " has %" PRIu32 " links after "
                     "loading its subtree, the dump says %" PRIu32 " (inconsistent dump)",
                     a->ino, out.nlink, a->nlink);
    L->ndirs--;
    return 1;
}

/* Closes directories until `parent` is the innermost open one. */
static int lresolve_parent(struct loader *L)
{
    char nb[64];
    while (L->ndirs && L->dirs[L->ndirs - 1].a.ino != L->e.parent) {
        if (!ldir_close(L))
            return 0;
    }
    if (!L->ndirs)
        return lfail(L, -EINVAL, "entry '%s': parent inode %" PRIu64 " is not a directory "
                     "being loaded (the tree must be in depth-first order)",
                     lname(L, nb, sizeof(nb)), L->e.parent);
    return 1;
}

/* mknod of the current entry (once its attr and symlink target are known). */
static int lcreate(struct loader *L)
{
    struct lentry *e = &L->e;
    struct keg_attr out;
    char nb[64];
    int rc;
    if (e->created)
        return 1;
    if (e->has_link)
        return lfail(L, -EINVAL, "hard-link entry '%s' may only have parent, name and link",
                     lname(L, nb, sizeof(nb)));
    if (e->attr_bits != lfield_all(attr_fields))
        return lfail(L, -EINVAL, "entry '%s' lacks a complete \"attr\" before its other fields",
                     lname(L, nb, sizeof(nb)));
    if (!e->has_parent) {
        if (L->st.entries || L->ndirs)
            return lfail(L, -EINVAL, "entry without \"parent\" that is not the first (root)");
        if (e->a.ino != KEG_ROOT_INO || !S_ISDIR(e->a.mode) || e->has_name)
            return lfail(L, -EINVAL, "the first tree entry must be the root directory "
                         "(inode 1, no name)");
        e->created = 1;
        return 1;
    }
    if (!e->has_name)
        return lfail(L, -EINVAL, "entry with parent %" PRIu64 " has no name", e->parent);
    if (!lresolve_parent(L))
        return 0;
    if (S_ISLNK(e->a.mode) && !e->target)
        return lfail(L, -EINVAL, "symlink '%s' has no \"symlink\" target before its other "
                     "fields", lname(L, nb, sizeof(nb)));
    if (!S_ISLNK(e->a.mode) && e->target)
        return lfail(L, -EINVAL, "entry '%s' has a symlink target but is not a symlink",
                     lname(L, nb, sizeof(nb)));
    if (e->a.ino <= KEG_ROOT_INO)
        return lfail(L, -EINVAL, "entry '%s' has the invalid inode number %" PRIu64,
                     lname(L, nb, sizeof(nb)), e->a.ino);
    rc = keg_meta_mknod(L->m, e->parent, e->name, e->a.ino, e->a.mode, e->a.uid, e->a.gid,
                        e->a.rdev, e->target, &out);
    if (rc)
        return lfail(L, rc == -EEXIST ? -EINVAL : rc, "creating '%s' (inode %" PRIu64
                     ", mode 0%o) in directory %" PRIu64
                     " failed: %s%s", lname(L, nb, sizeof(nb)), e->a.ino, (unsigned)e->a.mode,
                     e->parent, strerror(-rc),
                     rc == -EIO ? " (is the inode number used twice in the dump?)" :
                     rc == -EEXIST ? " (the name appears twice in the dump)" : "");
    e->created = 1;
    L->max_ino = KEG_MAX(L->max_ino, e->a.ino);
    return 1;
}

/* A name of an inode already loaded. */
static int llink(struct loader *L)
{
    struct lentry *e = &L->e;
    struct keg_attr a0, out;
    char nb[64];
    int rc;
    if (!e->has_parent || !e->has_name || e->attr_bits || e->target)
        return lfail(L, -EINVAL, "hard-link entry '%s' needs parent and name, and nothing but "
                     "link", lname(L, nb, sizeof(nb)));
    if (!lresolve_parent(L))
        return 0;
    rc = keg_meta_getattr(L->m, e->link, &a0);
    if (rc)
        return lfail(L, rc == -ENOENT ? -EINVAL : rc, "hard link '%s' names inode %" PRIu64
                     " which %s", lname(L, nb, sizeof(nb)), e->link,
                     rc == -ENOENT ? "was not loaded before it" : strerror(-rc));
    rc = keg_meta_link(L->m, e->link, e->parent, e->name, &out);
    if (!rc)    /* link set ctime = now: put back the dumped one */
        rc = keg_meta_setattr(L->m, e->link, SET_ALL, &a0, &out);
    if (rc)
        return lfail(L, rc, "hard link '%s' to inode %" PRIu64 " failed: %s",
                     lname(L, nb, sizeof(nb)), e->link, strerror(-rc));
    L->st.links++;
    return 1;
}

/* Appends the batched slice records to the current file, in order, split in
 * runs of new records (the first naming their id) and shared ones. */
static int lflush_slices(struct loader *L)
{
    unsigned char share[LOAD_BATCH];
    size_t i = 0;
    for (size_t j = 0; j < L->nbatch; j++) {
        uint64_t id = L->batch[j].s.id;
        if (!id) {      /* holes have no references: join the run before them */
            share[j] = j ? share[j - 1] : 0;
            continue;
        }
        int rc = u64set_add(&L->slices, id);
        if (rc < 0)
            return lfail(L, rc, "out of memory");
        share[j] = rc == 0;
        L->max_slice = KEG_MAX(L->max_slice, id);
    }
    while (i < L->nbatch) {
        size_t j = i + 1;
        while (j < L->nbatch && share[j] == share[i])
            j++;
        struct keg_attr out;
        int rc = keg_meta_write_slices(L->m, L->e.a.ino, j - i, L->batch + i, L->e.a.size,
                                       share[i] ? KEG_WS_SHARE : 0u, NULL, &out);
        if (rc) {
            char nb[64];
            return lfail(L, rc, "writing %zu slice records of '%s' (inode %" PRIu64 ") failed: "
                         "%s%s", j - i, lname(L, nb, sizeof(nb)), L->e.a.ino, strerror(-rc),
                         rc == -EAGAIN ? " (a shared slice is missing)" :
                         rc == -EINVAL ? " (invalid slice record)" : "");
        }
        i = j;
    }
    L->nbatch = 0;
    L->e.wrote_chunks = 1;
    return 1;
}

/* The end of a tree entry. */
static int lentry_end(struct loader *L)
{
    struct lentry *e = &L->e;
    struct keg_attr out;
    char nb[64];
    int rc;
    if (e->has_link) {
        if (!llink(L))
            return 0;
        L->st.entries++;
        goto done;
    }
    if (!lcreate(L))
        return 0;
    if (S_ISDIR(e->a.mode)) {   /* attrs when its subtree is complete */
        if (L->ndirs == L->capdirs) {
            size_t ncap = L->capdirs ? L->capdirs * 2 : 16;
            struct ldir *t = keg_realloc(L->dirs, ncap * sizeof(*t));
            if (!t)
                return lfail(L, -ENOMEM, "out of memory");
            L->dirs = t;
            L->capdirs = ncap;
        }
        L->dirs[L->ndirs++].a = e->a;
        L->st.dirs++;
        L->st.entries++;
        goto done;
    }
    if (S_ISREG(e->a.mode) && !e->wrote_chunks && e->a.size) {
        rc = keg_meta_truncate(L->m, e->a.ino, e->a.size, &out);
        if (rc)
            return lfail(L, rc, "setting the size of '%s' (inode %" PRIu64 ") failed: %s",
                         lname(L, nb, sizeof(nb)), e->a.ino, strerror(-rc));
    }
    rc = keg_meta_setattr(L->m, e->a.ino, SET_ALL, &e->a, &out);
    if (rc)
        return lfail(L, rc, "setting the attributes of '%s' (inode %" PRIu64 ") failed: %s",
                     lname(L, nb, sizeof(nb)), e->a.ino, strerror(-rc));
    if (out.size != e->a.size)
        return lfail(L, -EINVAL, "'%s' (inode %" PRIu64 ") has size %" PRIu64 " after loading "
                     "its chunks, the dump says %" PRIu64 " (inconsistent dump)",
                     lname(L, nb, sizeof(nb)), e->a.ino, out.size, e->a.size);
    switch (e->a.mode & S_IFMT) {
    case S_IFREG: L->st.files++; L->st.bytes += e->a.size; break;
    case S_IFLNK: L->st.symlinks++; break;
    default: L->st.others++; break;
    }
    L->st.entries++;
done:
    keg_free(e->target);
    memset(e, 0, sizeof(*e));
    load_report(L, 0);
    return 1;
}

static int lxattr_end(struct loader *L)
{
    char nb[64];
    int rc;
    if (!L->has_xname || !L->has_xval)
        return lfail(L, -EINVAL, "an xattr of '%s' lacks its name or value",
                     lname(L, nb, sizeof(nb)));
    rc = keg_meta_setxattr(L->m, L->e.a.ino, L->xname, L->xval, L->xlen, 0);
    if (rc)
        return lfail(L, rc, "setting xattr '%s' of '%s' failed: %s", L->xname,
                     lname(L, nb, sizeof(nb)), strerror(-rc));
    keg_free(L->xval);
    L->xval = NULL;
    L->has_xname = L->has_xval = 0;
    L->st.xattrs++;
    return 1;
}

static int lslice_end(struct loader *L)
{
    struct keg_chunk_slice *cs;
    if (L->nsv != 5)
        return lfail(L, -EINVAL, "a slice record needs 5 numbers [id, size, off, len, pos]");
    if (!L->has_indx)
        return lfail(L, -EINVAL, "a chunk's \"indx\" must come before its \"slices\"");
    if (L->sv[1] > UINT32_MAX || L->sv[2] > UINT32_MAX || L->sv[3] > UINT32_MAX ||
        L->sv[4] > UINT32_MAX)
        return lfail(L, -EINVAL, "a slice record has a field above 2^32-1");
    cs = &L->batch[L->nbatch++];
    cs->indx = L->indx;
    cs->s.id = L->sv[0];
    cs->s.size = (uint32_t)L->sv[1];
    cs->s.off = (uint32_t)L->sv[2];
    cs->s.len = (uint32_t)L->sv[3];
    cs->s.pos = (uint32_t)L->sv[4];
    L->st.slices++;
    if (L->nbatch == LOAD_BATCH)
        return lflush_slices(L);
    return 1;
}

static int lformat_end(struct loader *L)
{
    unsigned need = lfield_all(fmt_fields);
    struct keg_format f;
    int rc;
    if ((L->fmt_bits & need) != need)
        return lfail(L, -EINVAL, "\"format\" lacks a field (name, uuid, storage, bucket, region,"
                     " compress, block_size, capacity, inodes, trash_days, meta_version, created"
                     " are all required)");
    f = L->f;
    f.capacity = 0;     /* quotas are restored after the load */
    f.inodes = 0;
    rc = keg_meta_format_init(L->m, &f, 0755, 0, 0, 0);
    memset(&f, 0, sizeof(f));
    if (rc == -EEXIST) {
        struct keg_format old;
        const char *name = "?";
        if (keg_meta_format_load(L->m, &old) == 0)
            name = old.name;
        rc = lfail(L, -EEXIST, "%s already holds a volume ('%s'); load only writes into an "
                   "empty metadata engine", L->m->url_redacted, name);
        memset(&old, 0, sizeof(old));
        return rc;
    }
    if (rc)
        return lfail(L, rc, "creating volume '%s' in %s failed: %s", L->f.name,
                     L->m->url_redacted, strerror(-rc));
    L->formatted = 1;
    L->format_done = 1;
    return 1;
}

/* Advances counter `kind` of a freshly formatted engine (next id `start`,
 * META.md) so that the next id handed out is `next`. */
static int ladvance(struct loader *L, int kind, uint64_t start, uint64_t next)
{
    while (next > start) {
        uint64_t first = 0;
        uint32_t n = (uint32_t)KEG_MIN(next - start, (uint64_t)1 << 30);
        int rc = keg_meta_alloc_ids(L->m, kind, n, &first);
        if (rc)
            return lfail(L, rc, "advancing the %s counter failed: %s",
                         kind == KEG_ID_INODE ? "inode" : "slice", strerror(-rc));
        start = first + n;
    }
    return 1;
}

static int ltop_end(struct loader *L)
{
    unsigned need = lfield_all(total_fields);
    int rc;
    if (!L->seen_version || !L->format_done || !L->tree_done || L->counter_bits != 3 ||
        L->want_bits != need)
        return lfail(L, -EINVAL, "the dump lacks %s", !L->seen_version ? "\"kegfs_dump\"" :
                     !L->format_done ? "\"format\"" : !L->tree_done ? "\"tree\"" :
                     L->counter_bits != 3 ? "complete \"counters\"" : "complete \"totals\"");
    for (int i = 0; total_fields[i].key; i++) {
        uint64_t w = *(const uint64_t *)((const char *)&L->want + total_fields[i].off);
        uint64_t g = *(const uint64_t *)((const char *)&L->st + total_fields[i].off);
        if (w != g)
            return lfail(L, -EINVAL, "totals do not match: the dump says %s = %" PRIu64
                         ", its tree holds %" PRIu64 " (truncated or edited dump?)",
                         total_fields[i].key, w, g);
    }
    if (!ladvance(L, KEG_ID_INODE, KEG_ROOT_INO + 1, KEG_MAX(L->next_inode, L->max_ino + 1)) ||
        !ladvance(L, KEG_ID_SLICE, 1, KEG_MAX(L->next_slice, L->max_slice + 1)))
        return 0;
    rc = keg_meta_format_init(L->m, &L->f, 0755, 0, 0, 1);
    if (rc)
        return lfail(L, rc, "restoring the volume settings (quotas) failed: %s", strerror(-rc));
    rc = keg_meta_sync(L->m);
    if (rc && rc != -ENOSYS)
        return lfail(L, rc, "syncing the metadata engine failed: %s", strerror(-rc));
    L->done = 1;
    return 1;
}

/*----------------------------------------------------------------------------
 * Load: yajl callbacks
 *--------------------------------------------------------------------------*/

enum { V_NULL, V_BOOL, V_NUM, V_STR, V_MAP, V_ARR };

static const char *const vnames[] = {"null", "a boolean", "a number", "a string", "an object",
                                     "an array"};

static int lpush(struct loader *L, int kind)
{
    if (L->depth >= LDEPTH)
        return lfail(L, -EINVAL, "JSON nested deeper than a dump can be");
    L->kind[L->depth] = kind;
    L->key[L->depth][0] = '\0';
    L->depth++;
    return 1;
}

static int lunexpected(struct loader *L, int v)
{
    const char *key = L->depth ? L->key[L->depth - 1] : "";
    if (*key)
        return lfail(L, -EINVAL, "unexpected %s for \"%s\"", vnames[v], key);
    return lfail(L, -EINVAL, "unexpected %s", vnames[v]);
}

/* A string value decoded from text or base64 (b64). */
static int lbytes(struct loader *L, int b64, const unsigned char *s, size_t n,
                  unsigned char **out, size_t *outlen)
{
    int rc;
    if (b64) {
        rc = b64_decode(s, n, out, outlen);
        if (rc)
            return lfail(L, rc, rc == -ENOMEM ? "out of memory" : "invalid base64 for \"%s\"",
                         L->key[L->depth - 1]);
        return 1;
    }
    *out = keg_malloc(n + 1);
    if (!*out)
        return lfail(L, -ENOMEM, "out of memory");
    memcpy(*out, s, n);
    (*out)[n] = '\0';
    *outlen = n;
    return 1;
}

/* A byte string into a fixed buffer (names): no NUL, at most size-1 bytes. */
static int lname_value(struct loader *L, int b64, const unsigned char *s, size_t n, char *dst,
                       size_t size, int nonempty)
{
    unsigned char *v = NULL;
    size_t len = 0;
    if (!lbytes(L, b64, s, n, &v, &len))
        return 0;
    if (memchr(v, 0, len) || len >= size || (nonempty && len == 0)) {
        keg_free(v);
        return lfail(L, -EINVAL, "\"%s\" is %s", L->key[L->depth - 1],
                     len >= size ? "too long" : len == 0 ? "empty" : "not a C string (NUL byte)");
    }
    memcpy(dst, v, len + 1);
    keg_free(v);
    return 1;
}

/* Stores a numeric field of table t into base. */
static int lfield_num(struct loader *L, const struct lfield *t, void *base, unsigned *bits,
                      const char *key, const unsigned char *s, size_t n)
{
    int b64;
    int i = lfield_find(t, key, &b64);
    if (i < 0 || t[i].type == F_STR)
        return lfail(L, -EINVAL, "unknown or non-numeric field \"%s\"", key);
    int rc = parse_num((const char *)s, n, t[i].type, (char *)base + t[i].off);
    if (rc)
        return lfail(L, -EINVAL, "\"%s\" is not an integer in range (%.*s)", key,
                     (int)KEG_MIN(n, 40), (const char *)s);
    *bits |= 1u << i;
    return 1;
}

/* Whether key is `base` or `base`_b64 (then *b64 = 1). */
static int lkey_is(const char *key, const char *base, int *b64)
{
    size_t bl = strlen(base);
    if (strncmp(key, base, bl) != 0)
        return 0;
    *b64 = strcmp(key + bl, "_b64") == 0;
    return key[bl] == '\0' || *b64;
}

/* The value at depth 0: the dump's one top-level object. */
static int lv_root(struct loader *L, int v)
{
    if (v != V_MAP)
        return lfail(L, -EINVAL, "a dump is a JSON object");
    if (L->done || L->seen_version)
        return lfail(L, -EINVAL, "more than one JSON value in the input");
    return lpush(L, LK_TOP);
}

/* "kegfs_dump": the format version, which must come first. */
static int lv_version(struct loader *L, const unsigned char *s, size_t n)
{
    uint64_t ver = 0;
    if (parse_num((const char *)s, n, F_U64, &ver) || ver != DUMP_VERSION)
        return lfail(L, -EINVAL, "unsupported dump version %.*s (this kegfs reads "
                     "version %d)", (int)KEG_MIN(n, 20), (const char *)s, DUMP_VERSION);
    L->seen_version = 1;
    return 1;
}

/* A member of the top-level object: the version, then its sections. */
static int lv_top(struct loader *L, const char *key, int v, const unsigned char *s, size_t n)
{
    if (strcmp(key, "kegfs_dump") == 0 && v == V_NUM)
        return lv_version(L, s, n);
    if (!L->seen_version)
        return lfail(L, -EINVAL, "not a kegfs dump (it must start with \"kegfs_dump\")");
    if (strcmp(key, "format") == 0 && v == V_MAP && !L->format_done && !L->fmt_bits)
        return lpush(L, LK_FORMAT);
    if (strcmp(key, "tree") == 0 && v == V_ARR) {
        if (!L->format_done || L->tree_started)
            return lfail(L, -EINVAL, "\"tree\" must come once, after \"format\"");
        L->tree_started = 1;
        return lpush(L, LK_TREE);
    }
    if (strcmp(key, "counters") == 0 && v == V_MAP && !L->counters_done)
        return lpush(L, LK_COUNTERS);
    if (strcmp(key, "totals") == 0 && v == V_MAP && !L->totals_done)
        return lpush(L, LK_TOTALS);
    return lunexpected(L, v);
}

/* A field of "format". */
static int lv_format(struct loader *L, const char *key, int v, const unsigned char *s,
                     size_t n, int bval)
{
    int b64;
    int i = lfield_find(fmt_fields, key, &b64);
    if (strcmp(key, "secrets_omitted") == 0 && v == V_BOOL) {
        L->secrets_omitted = bval;
        return 1;
    }
    if (i >= 0 && fmt_fields[i].type == F_STR && v == V_STR) {
        if (!lname_value(L, b64, s, n, (char *)&L->f + fmt_fields[i].off,
                         fmt_fields[i].size, 0))
            return 0;
        L->fmt_bits |= 1u << i;
        return 1;
    }
    if (i >= 0 && v == V_NUM)
        return lfield_num(L, fmt_fields, &L->f, &L->fmt_bits, key, s, n);
    return lunexpected(L, v);
}

/* The start of one record of a list (tree, xattrs, chunks, slices):
 * resets that record's state. */
static int lv_record(struct loader *L, int kind, int v)
{
    switch (kind) {
    case LK_TREE:
        if (v != V_MAP)
            return lunexpected(L, v);
        memset(&L->e, 0, sizeof(L->e));
        return lpush(L, LK_ENTRY);
    case LK_XATTRS:
        if (v != V_MAP)
            return lunexpected(L, v);
        L->has_xname = L->has_xval = 0;
        return lpush(L, LK_XATTR);
    case LK_CHUNKS:
        if (v != V_MAP)
            return lunexpected(L, v);
        L->has_indx = 0;
        return lpush(L, LK_CHUNK);
    default:    /* LK_SLICES */
        if (v != V_ARR)
            return lunexpected(L, v);
        L->nsv = 0;
        return lpush(L, LK_SLICE);
    }
}

/* An entry's "parent" or "link": an inode number given once. */
static int lentry_ino(struct loader *L, const char *key, const unsigned char *s, size_t n,
                      uint64_t *ino, int *has)
{
    if (parse_num((const char *)s, n, F_U64, ino) || *has)
        return lfail(L, -EINVAL, "bad or repeated \"%s\"", key);
    *has = 1;
    return 1;
}

/* An entry's "name" (or "name_b64"). */
static int lentry_name(struct loader *L, int b64, const unsigned char *s, size_t n)
{
    if (L->e.has_name || L->e.created)
        return lfail(L, -EINVAL, "\"name\" repeated or after the entry's other fields");
    if (!lname_value(L, b64, s, n, L->e.name, sizeof(L->e.name), 1))
        return 0;
    L->e.has_name = 1;
    return 1;
}

/* An entry's "symlink" (or "symlink_b64") target. */
static int lentry_symlink(struct loader *L, int b64, const unsigned char *s, size_t n)
{
    char nb[64];
    char *t;
    if (L->e.target || L->e.created)
        return lfail(L, -EINVAL, "\"symlink\" of '%s' repeated or after its xattrs",
                     lname(L, nb, sizeof(nb)));
    t = keg_malloc(KEG_SYMLINK_MAX + 1);
    if (!t)
        return lfail(L, -ENOMEM, "out of memory");
    L->e.target = t;
    return lname_value(L, b64, s, n, t, KEG_SYMLINK_MAX + 1, 1);
}

/* An entry's "chunks": the entry is created first, and must be a file. */
static int lentry_chunks(struct loader *L)
{
    char nb[64];
    if (!lcreate(L))
        return 0;
    if (!S_ISREG(L->e.a.mode))
        return lfail(L, -EINVAL, "'%s' has chunks but is not a regular file",
                     lname(L, nb, sizeof(nb)));
    return lpush(L, LK_CHUNKS);
}

/* A field of a tree entry. */
static int lv_entry(struct loader *L, const char *key, int v, const unsigned char *s, size_t n)
{
    int b64 = 0;
    if (strcmp(key, "parent") == 0 && v == V_NUM)
        return lentry_ino(L, key, s, n, &L->e.parent, &L->e.has_parent);
    if (lkey_is(key, "name", &b64) && v == V_STR)
        return lentry_name(L, b64, s, n);
    if (strcmp(key, "link") == 0 && v == V_NUM)
        return lentry_ino(L, key, s, n, &L->e.link, &L->e.has_link);
    if (strcmp(key, "attr") == 0 && v == V_MAP && !L->e.attr_bits && !L->e.created)
        return lpush(L, LK_ATTR);
    if (lkey_is(key, "symlink", &b64) && v == V_STR)
        return lentry_symlink(L, b64, s, n);
    if (strcmp(key, "xattrs") == 0 && v == V_ARR)
        return lcreate(L) && lpush(L, LK_XATTRS);
    if (strcmp(key, "chunks") == 0 && v == V_ARR)
        return lentry_chunks(L);
    return lunexpected(L, v);
}

/* A field of an xattr record: its name once, its base64 value once. */
static int lv_xattr(struct loader *L, const char *key, int v, const unsigned char *s, size_t n)
{
    int b64 = 0;
    if (lkey_is(key, "name", &b64) && v == V_STR && !L->has_xname) {
        L->has_xname = 1;
        return lname_value(L, b64, s, n, L->xname, sizeof(L->xname), 1);
    }
    if (strcmp(key, "value") == 0 && v == V_STR && !L->has_xval) {
        L->has_xval = 1;
        return lbytes(L, 1, s, n, &L->xval, &L->xlen);
    }
    return lunexpected(L, v);
}

/* A field of a chunk record: "indx" (before "slices"), then "slices". */
static int lv_chunk(struct loader *L, const char *key, int v, const unsigned char *s, size_t n)
{
    char nb[64];
    if (strcmp(key, "indx") == 0 && v == V_NUM && !L->has_indx) {
        if (parse_num((const char *)s, n, F_U32, &L->indx))
            return lfail(L, -EINVAL, "bad chunk \"indx\"");
        if ((uint64_t)L->indx * KEG_CHUNK_SIZE >= L->e.a.size)
            return lfail(L, -EINVAL, "chunk %" PRIu32 " of '%s' lies past its size",
                         L->indx, lname(L, nb, sizeof(nb)));
        L->has_indx = 1;
        return 1;
    }
    if (strcmp(key, "slices") == 0 && v == V_ARR)
        return lpush(L, LK_SLICES);
    return lunexpected(L, v);
}

/* One number of a slice record [id, size, off, len, pos]. */
static int lv_slice(struct loader *L, int v, const unsigned char *s, size_t n)
{
    if (v != V_NUM || L->nsv >= 5)
        return lfail(L, -EINVAL, "a slice record is [id, size, off, len, pos]");
    if (parse_num((const char *)s, n, F_U64, &L->sv[L->nsv]))
        return lfail(L, -EINVAL, "a slice record holds a bad number");
    L->nsv++;
    return 1;
}

/* A field of "counters": "next_inode" and "next_slice". */
static int lv_counters(struct loader *L, const char *key, int v, const unsigned char *s,
                       size_t n)
{
    uint64_t *dst;
    if (v == V_NUM && strcmp(key, "next_inode") == 0) {
        L->counter_bits |= 1;
        dst = &L->next_inode;
    } else if (v == V_NUM && strcmp(key, "next_slice") == 0) {
        L->counter_bits |= 2;
        dst = &L->next_slice;
    } else {
        return lunexpected(L, v);
    }
    if (parse_num((const char *)s, n, F_U64, dst))
        return lfail(L, -EINVAL, "bad \"%s\"", key);
    return 1;
}

/* A numeric-only object (an entry's "attr", "totals") read through table t. */
static int lv_numbers(struct loader *L, const struct lfield *t, void *base, unsigned *bits,
                      const char *key, int v, const unsigned char *s, size_t n)
{
    if (v != V_NUM)
        return lunexpected(L, v);
    return lfield_num(L, t, base, bits, key, s, n);
}

/* A value (scalar, or the start of a container) at the current position:
 * handed to the step for the container it is in. */
static int lvalue(struct loader *L, int v, const unsigned char *s, size_t n, int bval)
{
    if (L->err)
        return 0;
    if (L->depth == 0)
        return lv_root(L, v);
    int kind = L->kind[L->depth - 1];
    const char *key = L->key[L->depth - 1];
    switch (kind) {
    case LK_TOP:      return lv_top(L, key, v, s, n);
    case LK_FORMAT:   return lv_format(L, key, v, s, n, bval);
    case LK_TREE:
    case LK_XATTRS:
    case LK_CHUNKS:
    case LK_SLICES:   return lv_record(L, kind, v);
    case LK_ENTRY:    return lv_entry(L, key, v, s, n);
    case LK_ATTR:     return lv_numbers(L, attr_fields, &L->e.a, &L->e.attr_bits, key, v, s, n);
    case LK_XATTR:    return lv_xattr(L, key, v, s, n);
    case LK_CHUNK:    return lv_chunk(L, key, v, s, n);
    case LK_SLICE:    return lv_slice(L, v, s, n);
    case LK_COUNTERS: return lv_counters(L, key, v, s, n);
    case LK_TOTALS:   return lv_numbers(L, total_fields, &L->want, &L->want_bits, key, v, s, n);
    default:          return lfail(L, -EINVAL, "internal parser state %d", kind);
    }
}

static int lcb_null(void *ctx)
{
    return lvalue(ctx, V_NULL, NULL, 0, 0);
}

static int lcb_bool(void *ctx, int b)
{
    return lvalue(ctx, V_BOOL, NULL, 0, b);
}

static int lcb_number(void *ctx, const char *s, size_t n)
{
    return lvalue(ctx, V_NUM, (const unsigned char *)s, n, 0);
}

static int lcb_string(void *ctx, const unsigned char *s, size_t n)
{
    return lvalue(ctx, V_STR, s, n, 0);
}

static int lcb_start_map(void *ctx)
{
    return lvalue(ctx, V_MAP, NULL, 0, 0);
}

static int lcb_start_array(void *ctx)
{
    return lvalue(ctx, V_ARR, NULL, 0, 0);
}

static int lcb_map_key(void *ctx, const unsigned char *k, size_t n)
{
    struct loader *L = ctx;
    if (L->err)
        return 0;
    if (n >= LKEY || memchr(k, 0, n))
        return lfail(L, -EINVAL, "unknown key \"%.*s\"", (int)KEG_MIN(n, 40), (const char *)k);
    memcpy(L->key[L->depth - 1], k, n);
    L->key[L->depth - 1][n] = '\0';
    return 1;
}

/* The end of a container: what it completes. */
static int lcb_end(void *ctx)
{
    struct loader *L = ctx;
    int kind;
    if (L->err)
        return 0;
    kind = L->kind[--L->depth];
    switch (kind) {
    case LK_TOP:
        return ltop_end(L);
    case LK_FORMAT:
        return lformat_end(L);
    case LK_TREE:
        while (L->ndirs) {
            if (!ldir_close(L))
                return 0;
        }
        if (L->st.entries == 0)
            return lfail(L, -EINVAL, "the tree is empty (it needs at least the root)");
        L->tree_done = 1;
        return 1;
    case LK_ENTRY:
        return lentry_end(L);
    case LK_XATTR:
        return lxattr_end(L);
    case LK_SLICE:
        return lslice_end(L);
    case LK_CHUNK:
        return L->nbatch ? lflush_slices(L) : 1;
    case LK_COUNTERS:
        L->counters_done = 1;
        return 1;
    case LK_TOTALS:
        L->totals_done = 1;
        return 1;
    default:
        return 1;
    }
}

static const yajl_callbacks lcbs = {
    .yajl_null = lcb_null,
    .yajl_boolean = lcb_bool,
    .yajl_number = lcb_number,
    .yajl_string = lcb_string,
    .yajl_start_map = lcb_start_map,
    .yajl_map_key = lcb_map_key,
    .yajl_end_map = lcb_end,
    .yajl_start_array = lcb_start_array,
    .yajl_end_array = lcb_end,
};

/*----------------------------------------------------------------------------
 * Load: driver
 *--------------------------------------------------------------------------*/

/* The parse error as text.  OWNERSHIP: none (writes into L->msg). */
static void lyajl_error(struct loader *L, const unsigned char *buf, size_t len)
{
    unsigned char *e = yajl_get_error(L->h, 0, buf, len);
    char t[200];
    size_t n;
    snprintf(t, sizeof(t), "%s", e ? (const char *)e : "parse error");
    n = strlen(t);
    while (n && (t[n - 1] == '\n' || t[n - 1] == ' '))
        t[--n] = '\0';
    if (e)
        yajl_free_error(L->h, e);
    lfail(L, -EINVAL, "malformed JSON: %s", t);
}

int keg_meta_load(struct keg_meta *m, FILE *in, unsigned flags, keg_dump_progress_fn *progress,
                  void *arg, struct keg_dump_stats *st, int *secrets_omitted)
{
    struct loader L;
    unsigned char *buf = NULL;
    yajl_status ys = yajl_status_ok;
    uint64_t errpos = 0;
    struct stat sb;
    int rc = 0;

    memset(&L, 0, sizeof(L));
    if (st)
        memset(st, 0, sizeof(*st));
    if (secrets_omitted)
        *secrets_omitted = 0;
    L.m = m;
    L.flags = flags;
    L.progress = progress;
    L.arg = arg;
    if (fstat(fileno(in), &sb) == 0 && S_ISREG(sb.st_mode))
        L.total = (uint64_t)sb.st_size;
    buf = keg_malloc(LOAD_BUF);
    L.batch = keg_malloc(LOAD_BATCH * sizeof(*L.batch));
    L.h = yajl_alloc(&lcbs, &dj_alloc, &L);
    if (!buf || !L.batch || !L.h) {
        rc = -ENOMEM;
        goto out;
    }
    for (;;) {
        size_t n = fread(buf, 1, LOAD_BUF, in);
        if (n) {
            ys = yajl_parse(L.h, buf, n);
            if (ys != yajl_status_ok) {
                errpos = L.fed + yajl_get_bytes_consumed(L.h);
                if (ys == yajl_status_error)
                    lyajl_error(&L, buf, n);
                break;
            }
            L.fed += n;
            if (L.progress)
                L.progress(L.arg, &L.st, L.fed, L.total);
        }
        if (n < LOAD_BUF) {
            if (ferror(in)) {
                lfail(&L, -EIO, "reading the input failed");
                errpos = L.fed;
                ys = yajl_status_error;
            }
            break;
        }
    }
    if (ys == yajl_status_ok) {
        ys = yajl_complete_parse(L.h);
        errpos = L.fed;
        if (ys == yajl_status_error)
            lfail(&L, -EINVAL, "the input ends in the middle of the JSON document (truncated?)");
    }
    if (!L.err && !L.done)
        lfail(&L, -EINVAL, "the input ends before the dump does (truncated?)");
    rc = L.err;
    if (rc) {
        KEG_ERR("load: %s (at byte %" PRIu64 " of the input)", L.msg, errpos);
        if (L.formatted && !(flags & KEG_LOAD_KEEP_PARTIAL)) {
            int drc = keg_meta_destroy(m);
            if (drc)
                KEG_ERR("load: removing the partially loaded volume from %s failed (%s): "
                        "remove it before using the target", m->url_redacted, strerror(-drc));
            else
                KEG_INFO("load: removed the partially loaded volume from %s", m->url_redacted);
        } else if (L.formatted) {
            KEG_WARN("load: the partially loaded volume is kept in %s (--keep-partial); it is "
                     "incomplete: do not mount it", m->url_redacted);
        }
    } else if (L.progress) {
        L.progress(L.arg, &L.st, L.fed, L.total);
    }
    if (secrets_omitted && !rc)
        *secrets_omitted = L.secrets_omitted && !L.f.secret_key[0] && !L.f.access_key[0] &&
                           strcmp(L.f.storage, "file") != 0 && strcmp(L.f.storage, "mem") != 0;
out:
    if (st)
        *st = L.st;
    if (L.h)
        yajl_free(L.h);
    keg_free(L.e.target);
    keg_free(L.xval);
    keg_free(L.dirs);
    keg_free(L.batch);
    keg_free(buf);
    u64set_free(&L.slices);
    memset(&L.f, 0, sizeof(L.f));
    return rc;
}
