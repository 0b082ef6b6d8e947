/* inode.c -- the in-memory table of open inodes, their chunk-layout cache and
 * the "last seen" attributes that decide keep_cache.
 *
 * DESIGN
 * Only inodes with open handles (or a short temporary reference) are in the
 * table; the entry is freed with its last reference.  An entry carries the
 * shared write buffer of the inode (file.c), its cached chunk layouts (so a
 * sequential read does not ask the engine for the slice list on every
 * 128 KiB), and small flags (unlinked-while-open).
 *
 * The seen table survives closes: it remembers (size, mtime) of files when
 * this mount last had them open, so that keg_fs_open can tell the kernel to
 * keep its page cache only when the file did not change.  It is bounded
 * (FS_SEEN_MAX entries; when full it is cleared, which only costs cache hits).
 *
 * Attributes reported for an inode with buffered writes here are the engine's
 * merged with the buffer (size, mtime).  The merge must not mix an engine
 * answer read before a commit with the buffer state after it (the size would
 * go backwards): every caller takes fs_attr_token() before the engine call
 * and merges with fs_attr_merge(), which re-reads when the token changed.
 */
#include <string.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "fs_i.h"

#define FS_MAX_CACHED_CHUNKS 64
#define FS_ATTR_TRIES        8      /* re-reads of fs_getattr_merged racing commits */

static size_t ino_hash(uint64_t ino)
{
    ino *= 0x9E3779B97F4A7C15ULL;
    return (size_t)(ino >> 40) % FS_ITAB_BUCKETS;
}

static void inode_free(struct keg_fs *fs, struct fs_inode *ip)
{
    KEG_ASSERT(ip->wfirst == NULL);
    /* a later open + fsync of this file must still find these blocks */
    if (ip->nusync > 0 || ip->usync_all)
        atomic_fetch_add(&fs->usync_lost, 1);
    keg_free(ip->usync);
    fs_inode_drop_chunks(ip);
    pthread_mutex_destroy(&ip->mu);
    pthread_mutex_destroy(&ip->sync_mu);
    keg_free(ip);
}

struct fs_inode *fs_inode_find(struct keg_fs *fs, uint64_t ino)
{
    struct fs_inode *ip;
    pthread_mutex_lock(&fs->itab_mu);
    for (ip = fs->itab[ino_hash(ino)]; ip; ip = ip->hnext) {
        if (ip->ino == ino) {
            ip->refs++;
            break;
        }
    }
    pthread_mutex_unlock(&fs->itab_mu);
    return ip;
}

struct fs_inode *fs_inode_get(struct keg_fs *fs, uint64_t ino)
{
    struct fs_inode *ip = fs_inode_find(fs, ino);
    struct fs_inode *nip;
    if (ip)
        return ip;
    nip = keg_calloc(1, sizeof(*nip));
    if (!nip)
        return NULL;
    nip->ino = ino;
    pthread_mutex_init(&nip->mu, NULL);
    pthread_mutex_init(&nip->sync_mu, NULL);
    pthread_mutex_lock(&fs->itab_mu);
    size_t h = ino_hash(ino);
    for (ip = fs->itab[h]; ip; ip = ip->hnext) {
        if (ip->ino == ino) {
            ip->refs++;
            break;
        }
    }
    if (!ip) {
        ip = nip;
        nip = NULL;
        ip->refs = 1;
        ip->hnext = fs->itab[h];
        fs->itab[h] = ip;
        ip->anext = fs->iall;
        if (ip->anext)
            ip->anext->aprev = ip;
        fs->iall = ip;
    }
    pthread_mutex_unlock(&fs->itab_mu);
    if (nip) {
        pthread_mutex_destroy(&nip->mu);
        pthread_mutex_destroy(&nip->sync_mu);
        keg_free(nip);
    }
    return ip;
}

void fs_inode_put(struct keg_fs *fs, struct fs_inode *ip)
{
    int last = 0;
    pthread_mutex_lock(&fs->itab_mu);
    KEG_ASSERT(ip->refs > 0);
    if (--ip->refs == 0) {
        struct fs_inode **pp = &fs->itab[ino_hash(ip->ino)];
        while (*pp != ip)
            pp = &(*pp)->hnext;
        *pp = ip->hnext;
        if (ip->aprev)
            ip->aprev->anext = ip->anext;
        else
            fs->iall = ip->anext;
        if (ip->anext)
            ip->anext->aprev = ip->aprev;
        last = 1;
    }
    pthread_mutex_unlock(&fs->itab_mu);
    if (last)
        inode_free(fs, ip);
}

uint32_t fs_inode_list(void *arg, uint64_t *inos, uint32_t max)
{
    struct keg_fs *fs = arg;
    uint32_t cnt = 0;
    pthread_mutex_lock(&fs->itab_mu);
    for (struct fs_inode *ip = fs->iall; ip; ip = ip->anext) {
        if (cnt < max)
            inos[cnt] = ip->ino;
        cnt++;
    }
    pthread_mutex_unlock(&fs->itab_mu);
    return cnt;
}

int fs_inode_all(struct keg_fs *fs, struct fs_inode ***out, size_t *n)
{
    struct fs_inode **v = NULL;
    size_t cnt = 0;
    size_t cap = 0;
    int rc = 0;

    pthread_mutex_lock(&fs->itab_mu);
    for (struct fs_inode *ip = fs->iall; ip; ip = ip->anext) {
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct fs_inode **nv = keg_realloc(v, ncap * sizeof(*nv));
            if (!nv) {
                rc = -ENOMEM;
                goto out;
            }
            v = nv;
            cap = ncap;
        }
        ip->refs++;
        v[cnt++] = ip;
    }
out:
    pthread_mutex_unlock(&fs->itab_mu);
    if (rc < 0) {
        for (size_t i = 0; i < cnt; i++)
            fs_inode_put(fs, v[i]);
        keg_free(v);
        v = NULL;
        cnt = 0;
    }
    *out = v;
    *n = cnt;
    return rc;
}

/*----------------------------------------------------------------------------
 * Chunk layout cache
 *--------------------------------------------------------------------------*/

void fs_inode_drop_chunks(struct fs_inode *ip)
{
    struct fs_chunk *c = ip->chunks;
    while (c) {
        struct fs_chunk *next = c->next;
        keg_free(c->seg);
        keg_free(c);
        c = next;
    }
    ip->chunks = NULL;
    ip->nchunks = 0;
}

int fs_inode_chunk(struct keg_fs *fs, struct fs_inode *ip, uint32_t indx, struct fs_chunk **out)
{
    struct fs_chunk **pp = &ip->chunks;
    struct fs_chunk *c;
    struct keg_slice *sl = NULL;
    size_t n = 0;
    int rc;

    *out = NULL;
    for (c = ip->chunks; c; pp = &c->next, c = c->next) {
        if (c->indx == indx) {
            *pp = c->next;      /* move to front */
            c->next = ip->chunks;
            ip->chunks = c;
            *out = c;
            return 0;
        }
    }
    rc = keg_meta_read_chunk(fs->meta, ip->ino, indx, &sl, &n);
    if (rc < 0)
        return rc;
    c = keg_calloc(1, sizeof(*c));
    if (!c) {
        keg_free(sl);
        return -ENOMEM;
    }
    c->indx = indx;
    rc = fs_layout(sl, n, 0, (uint32_t)KEG_CHUNK_SIZE, &c->seg, &c->nseg);
    keg_free(sl);
    if (n > FS_COMPACT_THRESHOLD)
        fs_compact_queue(fs, ip->ino, indx);    /* fragmented: merge in the background */
    if (rc < 0) {
        keg_free(c);
        return rc;
    }
    if (ip->nchunks >= FS_MAX_CACHED_CHUNKS) {
        /* evict the least recently used (the tail) */
        struct fs_chunk **tp = &ip->chunks;
        while ((*tp)->next)
            tp = &(*tp)->next;
        keg_free((*tp)->seg);
        keg_free(*tp);
        *tp = NULL;
        ip->nchunks--;
    }
    c->next = ip->chunks;
    ip->chunks = c;
    ip->nchunks++;
    *out = c;
    return 0;
}

void fs_inode_set_attr(struct fs_inode *ip, const struct keg_attr *a)
{
    if (ip->attr_valid &&
        (ip->size != a->size || ip->mtime != a->mtime || ip->mtimensec != a->mtimensec))
        fs_inode_drop_chunks(ip);
    ip->mode = a->mode;
    ip->size = a->size;
    ip->mtime = a->mtime;
    ip->mtimensec = a->mtimensec;
    ip->attr_valid = 1;
}

/*----------------------------------------------------------------------------
 * Seen table (keep_cache)
 *--------------------------------------------------------------------------*/

static size_t seen_hash(uint64_t ino)
{
    ino *= 0x9E3779B97F4A7C15ULL;
    return (size_t)(ino >> 40) % FS_SEEN_BUCKETS;
}

void fs_seen_free(struct keg_fs *fs)
{
    for (size_t h = 0; h < FS_SEEN_BUCKETS; h++) {
        struct fs_seen *s = fs->seen[h];
        while (s) {
            struct fs_seen *next = s->next;
            keg_free(s);
            s = next;
        }
        fs->seen[h] = NULL;
    }
    fs->nseen = 0;
}

int fs_seen_check(struct keg_fs *fs, const struct keg_attr *a)
{
    int same = 0;
    struct fs_seen *s;
    pthread_mutex_lock(&fs->itab_mu);
    size_t h = seen_hash(a->ino);
    for (s = fs->seen[h]; s; s = s->next) {
        if (s->ino == a->ino)
            break;
    }
    if (s) {
        same = s->size == a->size && s->mtime == a->mtime && s->mtimensec == a->mtimensec;
    } else {
        if (fs->nseen >= FS_SEEN_MAX)
            fs_seen_free(fs);
        s = keg_calloc(1, sizeof(*s));
        if (s) {
            s->ino = a->ino;
            s->next = fs->seen[h];
            fs->seen[h] = s;
            fs->nseen++;
        }
    }
    if (s) {
        s->size = a->size;
        s->mtime = a->mtime;
        s->mtimensec = a->mtimensec;
    }
    pthread_mutex_unlock(&fs->itab_mu);
    return same;
}

uint64_t fs_attr_token(struct keg_fs *fs, uint64_t ino)
{
    struct fs_inode *ip = fs_inode_find(fs, ino);
    uint64_t t;
    if (!ip)
        return UINT64_MAX;
    pthread_mutex_lock(&ip->mu);
    t = ip->wgen;
    pthread_mutex_unlock(&ip->mu);
    fs_inode_put(fs, ip);
    return t;
}

int fs_attr_fixup_token(struct keg_fs *fs, struct keg_attr *a, uint64_t token)
{
    struct fs_inode *ip = fs_inode_find(fs, a->ino);
    int changed;
    if (!ip)
        return token != UINT64_MAX;
    pthread_mutex_lock(&ip->mu);
    changed = ip->wgen != token;
    if (!changed && ip->wfirst) {
        if (ip->wend > a->size)
            a->size = ip->wend;
        a->size += ip->wappend;     /* buffered appends go at the end */
        a->alloc = KEG_ALLOC_UNKNOWN;   /* buffered data: st_blocks follows size */
        a->mtime = ip->wtime_ns / 1000000000;
        a->mtimensec = (uint32_t)(ip->wtime_ns % 1000000000);
        a->ctime = a->mtime;
        a->ctimensec = a->mtimensec;
    }
    pthread_mutex_unlock(&ip->mu);
    fs_inode_put(fs, ip);
    return changed;
}

int fs_getattr_merged(struct keg_fs *fs, uint64_t ino, struct keg_attr *out)
{
    int rc;
    /* A commit finishing between the engine read and the merge of this
     * mount's buffered writes would make the size go backwards (the kernel
     * then shrinks the file under an mmap: SIGBUS): re-read in that case. */
    for (int tries = 0;; tries++) {
        uint64_t token = fs_attr_token(fs, ino);
        rc = keg_meta_getattr(fs->meta, ino, out);
        if (rc < 0 || !fs_attr_fixup_token(fs, out, token) || tries == FS_ATTR_TRIES)
            return rc;
    }
}

void fs_attr_merge(struct keg_fs *fs, struct keg_attr *a, uint64_t token)
{
    struct keg_attr re;
    if (fs_attr_fixup_token(fs, a, token) && fs_getattr_merged(fs, a->ino, &re) == 0)
        *a = re;
}
