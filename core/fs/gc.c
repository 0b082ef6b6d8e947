/* gc.c -- kegfs gc / fsck / warmup: walk the namespace, compare with the object store.
 *
 * DESIGN
 * All three start from the same scan: a depth-first walk of the directory
 * tree from the root (engine readdir with attributes, 512 entries a page,
 * a stack of directories still to read), every regular file once (a set of
 * inode numbers de-duplicates hard links), and for each file every chunk's
 * slice list (read_chunk).  The result is the set of referenced slices
 * id -> size (an open-addressing hash table).
 *
 *   gc     lists "<vol>/chunks/" and sorts every block key into referenced /
 *          queued for deletion (delq) / too new / foreign / leaked; with
 *          do_delete, leaks are deleted by a few threads.  The id limit is
 *          the slice counter (one id taken with alloc_ids: harmless), minus
 *          a margin while mounters have live sessions, because a live writer
 *          uploads blocks before it commits their slice.  Nothing is deleted
 *          unless the volume marker (<vol>/kegfs.volume) names this volume,
 *          and each leak's block header must name this volume (a
 *          version-1 block: the volume must have them) or it is kept.
 *   fsck   checks every block of every referenced slice: head (exists), or
 *          with deep get + keg_block_decode (identity and CRC32C; a block
 *          of another key or volume is reported with what it holds).  Problems name the
 *          files: a second walk (only when something is wrong) finds every
 *          path whose chunks reference a bad slice.
 *   warmup collects the distinct blocks that the visible segments of the
 *          file(s) use and gets each whole object through the stack (which
 *          fills the SSD cache), verifying it decodes.
 * The parallel parts use a small parallel-for: N threads take item indices
 * from a shared counter; progress is reported under one mutex.
 *
 * Pending inodes (unlinked, still open on a mounter) are not reachable from
 * the root: gc may count their blocks as leaks (documented in admin.h and
 * docs/operations.md).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define KEG_LOG_TAG "gc"
#include "keg/admin.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "fs_i.h"

#define GC_PAGE         512
#define GC_ID_MARGIN    KEG_GC_ID_MARGIN   /* ids that live mounters may still commit */
#define GC_DELQ_MAX     (1u << 20)
#define GC_PATH_MAX     4096

/*----------------------------------------------------------------------------
 * A set of u64 keys with a small value (open addressing, linear probing)
 *--------------------------------------------------------------------------*/

struct u64map_ent {
    uint64_t key;               /* 0: empty (slice id 0 / inode 0 are never stored) */
    uint32_t val;
    uint32_t flags;
};

struct u64map {
    struct u64map_ent *e;
    size_t             cap;     /* power of two */
    size_t             n;
};

static size_t u64_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static struct u64map_ent *map_find(const struct u64map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    for (size_t i = u64_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->e[i].key == key)
            return &m->e[i];
        if (m->e[i].key == 0)
            return NULL;
    }
}

/* Insert key (val on first insert).  *out the entry; *isnew 1 if inserted. */
static int map_put(struct u64map *m, uint64_t key, uint32_t val, struct u64map_ent **out,
                   int *isnew)
{
    *out = NULL;
    *isnew = 0;
    if ((m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        struct u64map_ent *ne = keg_calloc(ncap, sizeof(*ne));
        if (!ne)
            return -ENOMEM;
        for (size_t i = 0; i < m->cap; i++) {
            if (m->e[i].key == 0)
                continue;
            size_t j = u64_hash(m->e[i].key) & (ncap - 1);
            while (ne[j].key != 0)
                j = (j + 1) & (ncap - 1);
            ne[j] = m->e[i];
        }
        keg_free(m->e);
        m->e = ne;
        m->cap = ncap;
    }
    size_t i = u64_hash(key) & (m->cap - 1);
    while (m->e[i].key != 0 && m->e[i].key != key)
        i = (i + 1) & (m->cap - 1);
    if (m->e[i].key == 0) {
        m->e[i].key = key;
        m->e[i].val = val;
        m->n++;
        *isnew = 1;
    }
    *out = &m->e[i];
    return 0;
}

static void map_free(struct u64map *m)
{
    keg_free(m->e);
    memset(m, 0, sizeof(*m));
}

/*----------------------------------------------------------------------------
 * Progress
 *--------------------------------------------------------------------------*/

struct prog {
    keg_progress_fn *fn;
    void            *arg;
    pthread_mutex_t  mu;
    uint64_t         last;
};

static void prog_init(struct prog *pg, keg_progress_fn *fn, void *arg)
{
    memset(pg, 0, sizeof(*pg));
    pg->fn = fn;
    pg->arg = arg;
    pthread_mutex_init(&pg->mu, NULL);
}

static void prog_destroy(struct prog *pg)
{
    pthread_mutex_destroy(&pg->mu);
}

/* Report done/total at most every ~1% (always at the end). */
static void prog_step(struct prog *pg, uint64_t done, uint64_t total, const char *what)
{
    if (!pg || !pg->fn)
        return;
    pthread_mutex_lock(&pg->mu);
    uint64_t step = total >= 100 ? total / 100 : total == 0 ? 1000 : 1;
    if ((total && done == total) || done < pg->last || done >= pg->last + step ||
        (done == 0 && total > 0)) {
        pg->last = done;
        pg->fn(pg->arg, done, total, what);
    }
    pthread_mutex_unlock(&pg->mu);
}

/*----------------------------------------------------------------------------
 * Parallel for
 *--------------------------------------------------------------------------*/

typedef void pfor_fn(void *arg, size_t i, void *scratch);

struct pfor {
    pfor_fn         *fn;
    void            *arg;
    size_t           n;
    size_t           scratch;      /* bytes of per-thread scratch memory */
    _Atomic size_t   next;
    _Atomic size_t   done;
    struct prog     *pg;
    const char      *what;
};

static void *pfor_main(void *arg)
{
    struct pfor *pf = arg;
    keg_thread_name("keg-scan");
    void *scratch = pf->scratch ? keg_malloc(pf->scratch) : NULL;
    for (;;) {
        size_t i = atomic_fetch_add(&pf->next, 1);
        if (i >= pf->n)
            break;
        pf->fn(pf->arg, i, scratch);
        size_t d = atomic_fetch_add(&pf->done, 1) + 1;
        prog_step(pf->pg, d, pf->n, pf->what);
    }
    keg_free(scratch);
    return NULL;
}

/* Run fn(arg, i) for i in [0, n) on nthreads threads (fewer if they cannot be
 * started; at least the caller's). */
static void pfor_run(pfor_fn *fn, void *arg, size_t n, unsigned nthreads, size_t scratch,
                     struct prog *pg, const char *what)
{
    pthread_t thr[64];
    unsigned started = 0;
    struct pfor pf = {.fn = fn, .arg = arg, .n = n, .scratch = scratch, .pg = pg, .what = what};

    atomic_init(&pf.next, 0);
    atomic_init(&pf.done, 0);
    if (nthreads > 64)
        nthreads = 64;
    prog_step(pg, 0, n, what);
    for (unsigned t = 1; t < nthreads && (size_t)t < n; t++) {
        if (pthread_create(&thr[started], NULL, pfor_main, &pf) != 0)
            break;
        started++;
    }
    pfor_main(&pf);
    for (unsigned t = 0; t < started; t++)
        pthread_join(thr[t], NULL);
}

/*----------------------------------------------------------------------------
 * The namespace walk
 *--------------------------------------------------------------------------*/

/* Called for every regular file (first link met) with its path. */
typedef int walk_file_fn(void *arg, uint64_t ino, uint64_t size, const char *path);

struct walk_ent {
    char    *name;
    uint64_t ino;
    uint32_t type;
    uint64_t size;
};

struct walk_page {
    struct walk_ent e[GC_PAGE];
    size_t          n;
    int             err;
};

static int walk_page_cb(void *arg, const struct keg_dirent *de)
{
    struct walk_page *pg = arg;
    struct walk_ent *we = &pg->e[pg->n];
    we->name = keg_strdup(de->name);
    if (!we->name) {
        pg->err = -ENOMEM;
        return 1;
    }
    we->ino = de->ino;
    we->type = de->type;
    we->size = de->attr ? de->attr->size : 0;
    pg->n++;
    return pg->n >= GC_PAGE;
}

struct walk_dir {
    uint64_t ino;
    char    *path;
};

struct walk {
    struct keg_fs *fs;
    struct u64map  seen;        /* inodes of files already visited */
    int            all_links;   /* call the file callback for every hard link */
    uint64_t       files, dirs;
    struct prog   *pg;
    const char    *what;
};

/* Depth-first walk from dir `root` (path `rpath`).  The file callback runs
 * for each regular file once.  Returns 0 or the first error. */
static int walk_tree(struct walk *w, uint64_t root, const char *rpath, walk_file_fn *fn,
                     void *arg)
{
    struct walk_dir *stack = NULL;
    size_t n = 0, cap = 0;
    struct walk_page *page = keg_malloc(sizeof(*page));
    int rc = 0;

    if (!page)
        return -ENOMEM;
    stack = keg_malloc(16 * sizeof(*stack));
    if (!stack) {
        keg_free(page);
        return -ENOMEM;
    }
    cap = 16;
    stack[0].ino = root;
    stack[0].path = keg_strdup(rpath);
    n = stack[0].path ? 1 : 0;
    if (!n)
        rc = -ENOMEM;
    while (n > 0 && rc == 0) {
        struct walk_dir d = stack[--n];
        char *after = NULL;
        w->dirs++;
        prog_step(w->pg, w->files + w->dirs, 0, w->what);
        for (;;) {
            page->n = 0;
            page->err = 0;
            int got = keg_meta_readdir(w->fs->meta, d.ino, after, GC_PAGE, 1,
                                       walk_page_cb, page);
            if (got < 0 && got != -ENOENT && got != -ENOTDIR)
                rc = got;
            if (page->err < 0)
                rc = page->err;
            for (size_t i = 0; i < page->n; i++) {
                struct walk_ent *we = &page->e[i];
                char *path = NULL;
                if (rc == 0) {
                    path = keg_asprintf("%s%s%s", d.path, strcmp(d.path, "/") ? "/" : "",
                                        we->name);
                    if (!path)
                        rc = -ENOMEM;
                }
                if (rc == 0 && S_ISDIR(we->type)) {
                    if (n == cap) {
                        struct walk_dir *ns = keg_realloc(stack, cap * 2 * sizeof(*ns));
                        if (!ns) {
                            rc = -ENOMEM;
                        } else {
                            stack = ns;
                            cap *= 2;
                        }
                    }
                    if (rc == 0) {
                        stack[n].ino = we->ino;
                        stack[n].path = path;
                        n++;
                        path = NULL;
                    }
                } else if (rc == 0 && S_ISREG(we->type)) {
                    struct u64map_ent *me;
                    int isnew = 0;
                    rc = map_put(&w->seen, we->ino, 0, &me, &isnew);
                    if (rc == 0 && isnew)
                        w->files++;
                    if (rc == 0 && (isnew || w->all_links))
                        rc = fn(arg, we->ino, we->size, path);
                }
                keg_free(path);
            }
            keg_free(after);
            after = NULL;
            if (rc < 0 || page->n < GC_PAGE || got <= 0)
                break;
            after = keg_strdup(page->e[page->n - 1].name);
            for (size_t i = 0; i < page->n; i++)
                keg_free(page->e[i].name);
            page->n = 0;
            if (!after) {
                rc = -ENOMEM;
                break;
            }
        }
        for (size_t i = 0; i < page->n; i++)
            keg_free(page->e[i].name);
        keg_free(after);
        keg_free(d.path);
    }
    while (n > 0)
        keg_free(stack[--n].path);
    keg_free(stack);
    keg_free(page);
    return rc;
}

/* Calls cb for every slice reference of every chunk of a file of this size. */
typedef int slice_fn(void *arg, uint32_t indx, const struct keg_slice *s);

static int file_slices(struct keg_fs *fs, uint64_t ino, uint64_t size, slice_fn *cb, void *arg)
{
    uint64_t nchunks = (size + KEG_CHUNK_SIZE - 1) / KEG_CHUNK_SIZE;
    for (uint64_t i = 0; i < nchunks; i++) {
        struct keg_slice *sl = NULL;
        size_t n = 0;
        int rc = keg_meta_read_chunk(fs->meta, ino, (uint32_t)i, &sl, &n);
        if (rc == -ENOENT)
            return 0;                   /* deleted while we walked */
        if (rc < 0)
            return rc;
        for (size_t k = 0; k < n && rc == 0; k++)
            rc = cb(arg, (uint32_t)i, &sl[k]);
        keg_free(sl);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/*----------------------------------------------------------------------------
 * Referenced slices
 *--------------------------------------------------------------------------*/

#define REF_BAD 1u      /* a reference does not fit the slice's size */

struct refs {
    struct keg_fs *fs;
    struct u64map  slices;      /* id -> size, flags */
    uint64_t       bad_refs;
    uint64_t       max_id;
};

static int refs_slice(void *arg, uint32_t indx, const struct keg_slice *s)
{
    struct refs *r = arg;
    struct u64map_ent *me;
    int isnew = 0;
    int rc;
    KEG_UNUSED(indx);
    if (s->id == 0)
        return 0;
    rc = map_put(&r->slices, s->id, s->size, &me, &isnew);
    if (rc < 0)
        return rc;
    if ((uint64_t)s->off + s->len > s->size || me->val != s->size) {
        if (!(me->flags & REF_BAD))
            r->bad_refs++;
        me->flags |= REF_BAD;
    }
    if (s->id > r->max_id)
        r->max_id = s->id;
    return 0;
}

static int refs_file(void *arg, uint64_t ino, uint64_t size, const char *path)
{
    struct refs *r = arg;
    KEG_UNUSED(path);
    return file_slices(r->fs, ino, size, refs_slice, r);
}

static int collect_refs(struct keg_fs *fs, struct refs *r, struct walk *w)
{
    memset(r, 0, sizeof(*r));
    r->fs = fs;
    return walk_tree(w, KEG_ROOT_INO, "/", refs_file, r);
}

/*----------------------------------------------------------------------------
 * gc
 *--------------------------------------------------------------------------*/

struct gc_obj {
    char    *key;
    uint64_t size;
};

struct gc_ctx {
    struct keg_fs        *fs;
    struct keg_gc_report *r;
    struct refs          *refs;
    struct u64map         delq;
    uint64_t              id_limit;
    struct gc_obj        *leaks;
    size_t                nleaks, cleaks;
    struct prog          *pg;
    int                   err;
    pthread_mutex_t       mu;     /* report counters during parallel deletes */
};

static void gc_item(struct gc_ctx *g, const char *kind, const char *key, const char *detail)
{
    if (g->r->item)
        g->r->item(g->r->item_arg, kind, key, detail);
}

static int gc_list_cb(void *arg, const char *key, uint64_t size)
{
    struct gc_ctx *g = arg;
    struct keg_gc_report *r = g->r;
    uint64_t id = 0;
    uint32_t indx = 0, blen = 0;

    r->objects++;
    r->object_bytes += size;
    prog_step(g->pg, r->objects, 0, "listing objects");
    if (keg_block_key_parse(key, &id, &indx, &blen) < 0 || id == 0) {
        r->foreign_objects++;
        return 0;
    }
    const struct u64map_ent *me = map_find(&g->refs->slices, id);
    if (me) {
        uint32_t nblk = (uint32_t)(((uint64_t)me->val + g->fs->bs - 1) / g->fs->bs);
        if (indx < nblk && blen == fs_block_len(g->fs->bs, me->val, indx)) {
            r->referenced_objects++;
            return 0;
        }
        /* an object of a referenced id that no reference can read: a leak */
    } else if (map_find(&g->delq, id)) {
        r->queued_objects++;
        return 0;
    } else if (id >= g->id_limit) {
        r->new_objects++;
        return 0;
    }
    r->leaked_objects++;
    r->leaked_bytes += size;
    char detail[128];
    snprintf(detail, sizeof(detail), "slice %llu is not referenced (%llu bytes)",
             (unsigned long long)id, (unsigned long long)size);
    gc_item(g, "leak", key, detail);
    if (g->nleaks == g->cleaks) {
        size_t ncap = g->cleaks ? g->cleaks * 2 : 256;
        struct gc_obj *nv = keg_realloc(g->leaks, ncap * sizeof(*nv));
        if (!nv) {
            g->err = -ENOMEM;
            return 1;
        }
        g->leaks = nv;
        g->cleaks = ncap;
    }
    g->leaks[g->nleaks].key = keg_strdup(key);
    if (!g->leaks[g->nleaks].key) {
        g->err = -ENOMEM;
        return 1;
    }
    g->leaks[g->nleaks].size = size;
    g->nleaks++;
    return 0;
}

/* 0 if the object under key is a block of this volume (its header names
 * this volume's UUID; a version-1 block: the volume has them), else 1 (keep
 * it: why says what it is) or -errno.  Only the header is read.  A block of
 * this volume under another key of it is this volume's to delete. */
static int gc_owned(struct gc_ctx *g, const char *key, char *why, size_t size)
{
    struct keg_fs *fs = g->fs;
    struct keg_block_id bid = fs->blk_id;
    unsigned char hdr[KEG_BLOCK_HDR];
    uint8_t vol[16];
    ssize_t n;
    int rc;

    if (keg_block_key_parse(key, &bid.slice, &bid.indx, &bid.blen) < 0) {
        snprintf(why, size, "not a block key");
        return 1;
    }
    n = keg_obj_get(fs->obj, key, 0, hdr, sizeof(hdr));
    if (n < 0)
        return (int)n;
    rc = keg_block_header_volume(hdr, (size_t)n, vol);
    if ((rc == 0 && memcmp(vol, bid.vol, 16) == 0) || (rc == 1 && bid.v1_ok))
        return 0;
    if (rc == 1)
        snprintf(why, size, "a version-1 block (no identity) on a volume that has none");
    else
        keg_block_why(hdr, (size_t)n, &bid, why, size);
    return 1;
}

static void gc_delete_one(void *arg, size_t i, void *scratch)
{
    struct gc_ctx *g = arg;
    char why[192] = "";
    int rc = gc_owned(g, g->leaks[i].key, why, sizeof(why));
    int kept = rc == 1;
    KEG_UNUSED(scratch);
    if (rc == -ENOENT)
        rc = 0;                         /* gone meanwhile: nothing to delete */
    else if (rc == 0)
        rc = keg_obj_del(g->fs->obj, g->leaks[i].key);
    pthread_mutex_lock(&g->mu);
    if (kept) {
        g->r->kept_objects++;
        KEG_WARN("gc: %s kept: it is not this volume's block (%s)", g->leaks[i].key, why);
        gc_item(g, "kept", g->leaks[i].key, why);
    } else if (rc < 0) {
        g->r->errors++;
        gc_item(g, "error", g->leaks[i].key, strerror(-rc));
    } else {
        g->r->deleted_objects++;
        gc_item(g, "deleted", g->leaks[i].key, "");
    }
    pthread_mutex_unlock(&g->mu);
}

struct live_sessions {
    int64_t  now;
    int64_t  max_age;
    unsigned live;
};

static int live_cb(void *arg, const struct keg_session_info *s)
{
    struct live_sessions *ls = arg;
    if (ls->now - s->heartbeat <= ls->max_age)
        ls->live++;
    return 0;
}

/* The first slice id that gc must not judge (*limit), the slice counter
 * (*next) and the number of live mounters (*live, -1 if unknown). */
static int gc_id_limit(struct keg_fs *fs, uint64_t *limit, uint64_t *next_out, int *live)
{
    struct live_sessions ls = {.now = keg_now_ns() / 1000000000, .max_age = 60};
    uint64_t next = 0;
    int rc;

    *limit = 0;
    /* one id: the counter as of now (every id a mounter holds is below it) */
    rc = keg_meta_alloc_ids(fs->meta, KEG_ID_SLICE, 1, &next);
    if (rc < 0)
        return rc;
    rc = keg_meta_session_list(fs->meta, live_cb, &ls);
    if (rc < 0 && rc != -ENOSYS)
        return rc;
    *next_out = next;
    *live = rc == -ENOSYS ? -1 : (int)ls.live;
    if (rc == -ENOSYS)
        ls.live = 1;                    /* unknown: assume live mounters */
    if (ls.live == 0)
        *limit = next;
    else
        *limit = next > GC_ID_MARGIN ? next - GC_ID_MARGIN : 0;
    return 0;
}

/* gc deletes only under a prefix whose marker names this volume.
 * Returns 0, or -EPERM (logged) when do_delete and the marker is missing or
 * names another volume (a report only warns), or -errno of the store. */
static int gc_check_marker(struct keg_fs *fs, int do_delete)
{
    char other[40], mkey[128];
    int rc = keg_volume_marker_check(fs->obj, fs->fmt.name, fs->fmt.uuid, other);

    keg_volume_marker_key(mkey, sizeof(mkey), fs->fmt.name);
    if (rc == -EEXIST || rc == -EIO) {
        KEG_ERR("the objects under %s/ belong to another volume (marker %s names %s, this "
                "volume is %s): two volumes share the name on this bucket; %s",
                fs->fmt.name, mkey, rc == -EIO ? "no volume" : other, fs->fmt.uuid,
                do_delete ? "gc deletes nothing" : "this report is not about this volume");
        return do_delete ? -EPERM : 0;
    }
    if (rc == -ENOENT) {
        if (!do_delete) {
            KEG_WARN("no volume marker %s: run 'kegfs format --force META_URL %s' once to "
                     "claim the prefix before gc --delete", mkey, fs->fmt.name);
            return 0;
        }
        KEG_ERR("no volume marker %s: gc cannot prove that the objects under %s/ are this "
                "volume's, and deletes nothing; run 'kegfs format --force META_URL %s' once "
                "to claim the prefix (it refuses if another volume uses it)", mkey,
                fs->fmt.name, fs->fmt.name);
        return -EPERM;
    }
    if (rc < 0)
        KEG_ERR("reading the volume marker %s failed: %s", mkey, strerror(-rc));
    return rc;
}

int keg_fs_gc(struct keg_fs *fs, int do_delete, struct keg_gc_report *r, keg_progress_fn *p,
              void *arg)
{
    struct gc_ctx g;
    struct refs refs;
    struct walk w;
    struct prog pg;
    struct keg_del_slice *dq = NULL;
    char prefix[128];
    int rc;

    memset(&g, 0, sizeof(g));
    memset(&w, 0, sizeof(w));
    memset(&refs, 0, sizeof(refs));
    memset((char *)r + offsetof(struct keg_gc_report, files), 0,
           sizeof(*r) - offsetof(struct keg_gc_report, files));
    prog_init(&pg, p, arg);
    pthread_mutex_init(&g.mu, NULL);
    g.fs = fs;
    g.r = r;
    g.refs = &refs;
    g.pg = &pg;

    /* the limit first: everything committed later has a higher id */
    rc = gc_id_limit(fs, &g.id_limit, &r->id_next, &r->live_mounters);
    if (rc < 0) {
        KEG_ERR("cannot read the slice counter: %s", strerror(-rc));
        goto out;
    }
    r->id_limit = g.id_limit;
    w.fs = fs;
    w.pg = &pg;
    w.what = "scanning files";
    rc = collect_refs(fs, &refs, &w);
    if (rc < 0) {
        KEG_ERR("scanning the namespace failed: %s", strerror(-rc));
        goto out;
    }
    r->files = w.files;
    r->dirs = w.dirs;
    r->slices = refs.slices.n;

    dq = keg_malloc(GC_DELQ_MAX * sizeof(*dq));
    if (!dq) {
        rc = -ENOMEM;
        goto out;
    }
    rc = keg_meta_delq_peek(fs->meta, dq, GC_DELQ_MAX);
    if (rc == -ENOSYS)
        rc = 0;
    if (rc < 0) {
        KEG_ERR("reading the deletion queue failed: %s", strerror(-rc));
        goto out;
    }
    for (int i = 0; i < rc; i++) {
        struct u64map_ent *me;
        int isnew;
        int mrc = map_put(&g.delq, dq[i].id, dq[i].size, &me, &isnew);
        if (mrc < 0) {
            rc = mrc;
            goto out;
        }
    }

    rc = gc_check_marker(fs, do_delete);
    if (rc < 0)
        goto out;
    snprintf(prefix, sizeof(prefix), "%s/chunks/", fs->fmt.name);
    rc = keg_obj_list(fs->obj, prefix, gc_list_cb, &g);
    if (rc == -ENOSYS) {
        KEG_ERR("the object store (%s) cannot list objects: gc is not possible",
                fs->fmt.storage);
        goto out;
    }
    if (g.err < 0)
        rc = g.err;
    if (rc < 0) {
        KEG_ERR("listing %s failed: %s", prefix, strerror(-rc));
        goto out;
    }
    prog_step(&pg, r->objects, r->objects, "listing objects");
    if (do_delete && g.nleaks > 0)
        pfor_run(gc_delete_one, &g, g.nleaks, r->threads ? r->threads : 4, 0, &pg,
                 "deleting leaks");
    rc = 0;
out:
    for (size_t i = 0; i < g.nleaks; i++)
        keg_free(g.leaks[i].key);
    keg_free(g.leaks);
    keg_free(dq);
    map_free(&g.delq);
    map_free(&refs.slices);
    map_free(&w.seen);
    pthread_mutex_destroy(&g.mu);
    prog_destroy(&pg);
    return rc;
}

/*----------------------------------------------------------------------------
 * fsck
 *--------------------------------------------------------------------------*/

#define SL_MISSING 2u
#define SL_CORRUPT 4u
#define SL_NAMED   8u           /* a block reported with its reason already (fsck_one) */

struct fsck_blk {
    uint64_t id;
    uint32_t indx;
    uint32_t blen;
    uint32_t slot;              /* index into the slice table */
    uint32_t bad;               /* SL_MISSING / SL_CORRUPT, SL_NAMED (fsck) */
};

struct fsck_ctx {
    struct keg_fs          *fs;
    struct keg_fsck_report *r;
    struct refs            *refs;
    struct fsck_blk        *blk;
    int                     deep;
    pthread_mutex_t         mu;
};

static void fsck_item(struct fsck_ctx *f, const char *kind, const char *key, const char *detail)
{
    if (f->r->item)
        f->r->item(f->r->item_arg, kind, key, detail);
}

static void fsck_one(void *arg, size_t i, void *scratch)
{
    struct fsck_ctx *f = arg;
    struct fsck_blk *b = &f->blk[i];
    struct keg_fs *fs = f->fs;
    char key[256];
    uint64_t osize = 0;
    char why[160] = "";
    int problem = 0;
    int rc;

    keg_block_key(key, sizeof(key), fs->fmt.name, b->id, b->indx, b->blen);
    if (f->deep) {
        size_t cap = keg_block_bound(KEG_CODEC_ZSTD, fs->bs);
        cap = KEG_MAX(cap, keg_block_bound(KEG_CODEC_LZ4, fs->bs));
        cap = KEG_MAX(cap, keg_block_bound(KEG_CODEC_NONE, fs->bs));
        uint8_t *enc = scratch;
        uint8_t *raw = enc + cap;
        struct keg_block_id bid = fs_block_id(fs, b->id, b->indx, b->blen);
        ssize_t n = scratch ? keg_obj_get(fs->obj, key, 0, enc, cap) : -ENOMEM;
        /* a block deleted while it was read (its file reused by the file
         * store, obj_file.c) reads as another block: read the key again */
        for (int again = 1; n >= 0 && again >= 0; again--) {
            if (keg_block_decode(enc, (size_t)n, &bid, raw, fs->bs) == (ssize_t)b->blen)
                break;
            if (again)
                n = keg_obj_get(fs->obj, key, 0, enc, cap);
            else {
                problem = SL_CORRUPT;
                keg_block_why(enc, (size_t)n, &bid, why, sizeof(why));
            }
        }
        rc = n < 0 ? (int)n : 0;
    } else {
        rc = keg_obj_head(fs->obj, key, &osize);
        if (rc == 0 && osize < (fs->blk_id.v1_ok ? KEG_BLOCK_HDR_V1 : KEG_BLOCK_HDR))
            problem = SL_CORRUPT;
    }
    if (rc == -ENOENT)
        problem = SL_MISSING;
    pthread_mutex_lock(&f->mu);
    if (problem) {
        b->bad = (uint32_t)problem;
        f->refs->slices.e[b->slot].flags |= (uint32_t)problem;
        if (problem == SL_MISSING)
            f->r->missing++;
        else
            f->r->corrupt++;
        if (why[0]) {
            b->bad |= SL_NAMED;         /* reported here, with the reason */
            fsck_item(f, "corrupt", key, why);
        }
    } else if (rc < 0) {
        f->r->errors++;
        fsck_item(f, "error", key, strerror(-rc));
    }
    pthread_mutex_unlock(&f->mu);
}

struct fsck_paths {
    struct fsck_ctx *f;
    const char      *path;
    int              hit;
};

static int fsck_path_slice(void *arg, uint32_t indx, const struct keg_slice *s)
{
    struct fsck_paths *fp = arg;
    const struct u64map_ent *me;
    KEG_UNUSED(indx);
    if (s->id == 0)
        return 0;
    me = map_find(&fp->f->refs->slices, s->id);
    if (me && (me->flags & (SL_MISSING | SL_CORRUPT | REF_BAD)))
        fp->hit = 1;
    return 0;
}

/* Second walk: report the files that use a bad slice. */
static int fsck_path_file(void *arg, uint64_t ino, uint64_t size, const char *path)
{
    struct fsck_paths fp = {.f = arg, .path = path};
    int rc = file_slices(fp.f->fs, ino, size, fsck_path_slice, &fp);
    if (rc == 0 && fp.hit) {
        char detail[64];
        snprintf(detail, sizeof(detail), "inode %llu", (unsigned long long)ino);
        fp.f->r->problem_files++;
        fsck_item(fp.f, "file", path, detail);
    }
    return rc;
}

int keg_fs_fsck(struct keg_fs *fs, int deep, struct keg_fsck_report *r, keg_progress_fn *p,
                void *arg)
{
    struct fsck_ctx f;
    struct refs refs;
    struct walk w;
    struct prog pg;
    size_t nblk = 0;
    int rc;

    memset(&f, 0, sizeof(f));
    memset(&w, 0, sizeof(w));
    memset((char *)r + offsetof(struct keg_fsck_report, files), 0,
           sizeof(*r) - offsetof(struct keg_fsck_report, files));
    prog_init(&pg, p, arg);
    pthread_mutex_init(&f.mu, NULL);
    w.fs = fs;
    w.pg = &pg;
    w.what = "scanning files";
    rc = collect_refs(fs, &refs, &w);
    if (rc < 0) {
        KEG_ERR("scanning the namespace failed: %s", strerror(-rc));
        goto out;
    }
    r->files = w.files;
    r->dirs = w.dirs;
    r->slices = refs.slices.n;
    r->bad_refs = refs.bad_refs;

    for (size_t i = 0; i < refs.slices.cap; i++) {
        if (refs.slices.e[i].key)
            nblk += ((uint64_t)refs.slices.e[i].val + fs->bs - 1) / fs->bs;
    }
    f.blk = keg_malloc((nblk ? nblk : 1) * sizeof(*f.blk));
    if (!f.blk) {
        rc = -ENOMEM;
        goto out;
    }
    nblk = 0;
    for (size_t i = 0; i < refs.slices.cap; i++) {
        const struct u64map_ent *me = &refs.slices.e[i];
        if (!me->key)
            continue;
        uint32_t nb = (uint32_t)(((uint64_t)me->val + fs->bs - 1) / fs->bs);
        for (uint32_t b = 0; b < nb; b++) {
            f.blk[nblk].id = me->key;
            f.blk[nblk].indx = b;
            f.blk[nblk].blen = fs_block_len(fs->bs, me->val, b);
            f.blk[nblk].slot = (uint32_t)i;
            f.blk[nblk].bad = 0;
            nblk++;
        }
    }
    f.fs = fs;
    f.r = r;
    f.refs = &refs;
    f.deep = deep;
    size_t scratch = 0;
    if (deep) {
        scratch = KEG_MAX(keg_block_bound(KEG_CODEC_ZSTD, fs->bs),
                          keg_block_bound(KEG_CODEC_LZ4, fs->bs));
        scratch = KEG_MAX(scratch, keg_block_bound(KEG_CODEC_NONE, fs->bs)) + fs->bs;
    }
    pfor_run(fsck_one, &f, nblk, r->threads ? r->threads : 8, scratch, &pg,
             deep ? "verifying blocks" : "checking blocks");
    r->blocks = nblk;

    /* name each bad object, then the files that use them */
    for (size_t i = 0; i < refs.slices.cap; i++) {
        const struct u64map_ent *me = &refs.slices.e[i];
        if (!me->key || !(me->flags & (SL_MISSING | SL_CORRUPT | REF_BAD)))
            continue;
        char detail[160];
        if (me->flags & REF_BAD) {
            snprintf(detail, sizeof(detail),
                     "slice %llu is referenced beyond its size or with different sizes",
                     (unsigned long long)me->key);
            fsck_item(&f, "bad-ref", NULL, detail);
        }
    }
    for (size_t i = 0; i < nblk; i++) {
        char key[256];
        if (!f.blk[i].bad || (f.blk[i].bad & SL_NAMED))
            continue;
        keg_block_key(key, sizeof(key), fs->fmt.name, f.blk[i].id, f.blk[i].indx,
                      f.blk[i].blen);
        if (f.blk[i].bad == SL_MISSING)
            fsck_item(&f, "missing", key, "block object does not exist");
        else
            fsck_item(&f, "corrupt", key, deep ? "block does not decode (checksum)"
                                               : "block object is too short");
    }
    if (r->missing || r->corrupt || r->bad_refs) {
        struct walk w2;
        memset(&w2, 0, sizeof(w2));
        w2.fs = fs;
        w2.all_links = 1;               /* every path of a hard-linked file */
        w2.what = "naming files";
        rc = walk_tree(&w2, KEG_ROOT_INO, "/", fsck_path_file, &f);
        map_free(&w2.seen);
        if (rc < 0)
            goto out;
    }
    rc = (r->missing || r->corrupt || r->bad_refs) ? 1 : 0;
out:
    keg_free(f.blk);
    map_free(&refs.slices);
    map_free(&w.seen);
    pthread_mutex_destroy(&f.mu);
    prog_destroy(&pg);
    return rc;
}

/*----------------------------------------------------------------------------
 * warmup
 *--------------------------------------------------------------------------*/

struct warm_ctx {
    struct keg_fs   *fs;
    struct fsck_blk *blk;       /* blocks to fetch (duplicates removed before) */
    size_t           n, cap;
    _Atomic int      err;
};

static int warm_add(struct warm_ctx *wc, uint64_t id, uint32_t indx, uint32_t blen)
{
    if (wc->n > 0 && wc->blk[wc->n - 1].id == id && wc->blk[wc->n - 1].indx == indx)
        return 0;               /* the common duplicate: neighbouring segments */
    if (wc->n == wc->cap) {
        size_t ncap = wc->cap ? wc->cap * 2 : 256;
        struct fsck_blk *nv = keg_realloc(wc->blk, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        wc->blk = nv;
        wc->cap = ncap;
    }
    memset(&wc->blk[wc->n], 0, sizeof(wc->blk[wc->n]));
    wc->blk[wc->n].id = id;
    wc->blk[wc->n].indx = indx;
    wc->blk[wc->n].blen = blen;
    wc->n++;
    return 0;
}

static int blk_cmp(const void *a, const void *b)
{
    const struct fsck_blk *x = a;
    const struct fsck_blk *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->indx < y->indx ? -1 : x->indx > y->indx;
}

/* Sort and drop duplicates (shared slices, hard links counted once anyway). */
static void warm_unique(struct warm_ctx *wc)
{
    size_t w = 0;
    if (wc->n == 0)
        return;
    qsort(wc->blk, wc->n, sizeof(*wc->blk), blk_cmp);
    for (size_t i = 1; i < wc->n; i++) {
        if (blk_cmp(&wc->blk[i], &wc->blk[w]) != 0)
            wc->blk[++w] = wc->blk[i];
    }
    wc->n = w + 1;
}

/* The blocks that the visible data of a file uses. */
static int warm_file(void *arg, uint64_t ino, uint64_t size, const char *path)
{
    struct warm_ctx *wc = arg;
    struct keg_fs *fs = wc->fs;
    uint64_t nchunks = (size + KEG_CHUNK_SIZE - 1) / KEG_CHUNK_SIZE;
    KEG_UNUSED(path);
    for (uint64_t c = 0; c < nchunks; c++) {
        struct keg_slice *sl = NULL;
        struct fs_seg *seg = NULL;
        size_t n = 0, nseg = 0;
        uint64_t base = c * KEG_CHUNK_SIZE;
        uint32_t to = (uint32_t)KEG_MIN(KEG_CHUNK_SIZE, size - base);
        int rc = keg_meta_read_chunk(fs->meta, ino, (uint32_t)c, &sl, &n);
        if (rc == -ENOENT)
            return 0;
        if (rc == 0)
            rc = fs_layout(sl, n, 0, to, &seg, &nseg);
        keg_free(sl);
        for (size_t k = 0; k < nseg && rc == 0; k++) {
            const struct fs_seg *s = &seg[k];
            if (s->id == 0 || (uint64_t)s->soff + s->len > s->size)
                continue;
            for (uint32_t b = s->soff / fs->bs; (uint64_t)b * fs->bs < (uint64_t)s->soff + s->len;
                 b++)
                rc = warm_add(wc, s->id, b, fs_block_len(fs->bs, s->size, b));
        }
        keg_free(seg);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void warm_one(void *arg, size_t i, void *scratch)
{
    struct warm_ctx *wc = arg;
    struct keg_fs *fs = wc->fs;
    struct fsck_blk *b = &wc->blk[i];
    size_t cap = keg_block_bound(KEG_CODEC_ZSTD, fs->bs);
    struct keg_block_id bid = fs_block_id(fs, b->id, b->indx, b->blen);
    char key[256];
    int rc = 0;

    cap = KEG_MAX(cap, keg_block_bound(KEG_CODEC_LZ4, fs->bs));
    cap = KEG_MAX(cap, keg_block_bound(KEG_CODEC_NONE, fs->bs));
    keg_block_key(key, sizeof(key), fs->fmt.name, b->id, b->indx, b->blen);
    ssize_t n = scratch ? keg_obj_get(fs->obj, key, 0, scratch, cap) : -ENOMEM;
    if (n == -ENOENT) {
        KEG_ERR("warmup: block %s is missing from the object store", key);
        rc = -EIO;
    } else if (n < 0) {
        KEG_ERR("warmup: reading block %s failed: %s", key, strerror((int)-n));
        rc = (int)n;
    } else if (keg_block_decode(scratch, (size_t)n, &bid, (uint8_t *)scratch + cap, fs->bs) !=
               (ssize_t)b->blen) {
        char why[160];
        KEG_ERR("warmup: block %s is corrupt (%s)", key,
                keg_block_why(scratch, (size_t)n, &bid, why, sizeof(why)));
        rc = -EIO;
    }
    if (rc < 0) {
        int zero = 0;
        atomic_compare_exchange_strong(&wc->err, &zero, rc);
    }
}

int keg_fs_warmup(struct keg_fs *fs, uint64_t ino, keg_progress_fn *p, void *arg)
{
    struct warm_ctx wc;
    struct keg_attr a;
    struct walk w;
    struct prog pg;
    int rc;

    memset(&wc, 0, sizeof(wc));
    memset(&w, 0, sizeof(w));
    wc.fs = fs;
    atomic_init(&wc.err, 0);
    prog_init(&pg, p, arg);
    rc = keg_meta_getattr(fs->meta, ino, &a);
    if (rc < 0)
        goto out;
    if (S_ISDIR(a.mode)) {
        w.fs = fs;
        w.pg = &pg;
        w.what = "scanning files";
        rc = walk_tree(&w, ino, "", warm_file, &wc);
    } else if (S_ISREG(a.mode)) {
        rc = warm_file(&wc, ino, a.size, "");
    }
    if (rc < 0)
        goto out;
    warm_unique(&wc);
    size_t scratch = KEG_MAX(keg_block_bound(KEG_CODEC_ZSTD, fs->bs),
                             keg_block_bound(KEG_CODEC_LZ4, fs->bs));
    scratch = KEG_MAX(scratch, keg_block_bound(KEG_CODEC_NONE, fs->bs)) + fs->bs;
    pfor_run(warm_one, &wc, wc.n, 4, scratch, &pg, "warming blocks");
    rc = atomic_load(&wc.err);
out:
    keg_free(wc.blk);
    map_free(&w.seen);
    prog_destroy(&pg);
    return rc;
}
