/* cache_ssd.c -- the "cache_ssd" layer: a verified, byte-budgeted block cache in a local directory.
 *
 * DESIGN
 * Block objects ("<vol>/chunks/.../<id>_<indx>_<blen>") are kept one per file
 * under <dir>/blocks/<hh>/<escaped key>, where hh is the low byte of the
 * key's CRC32C in hex (256 directories).  The file format (header with the
 * key, the length and two CRC32Cs, then the object) is ssdf/ssd_format.h,
 * specified in docs/internals/SSD-FORMAT.md.  Other objects pass through.
 *
 *   get   indexed -> read the file, verify its CRCs and key -> serve the range.
 *         A get of the whole object (what the fs asks for) reads the header
 *         and key, then the object straight into the caller's buffer, and
 *         checks the object CRC there: no copy of the file in memory.
 *         A file that fails verification is deleted, logged and refetched; a
 *         vanished file (another mounter sharing the directory evicted it) is
 *         a miss.  Not indexed -> single-flight fill: the first thread fetches
 *         the WHOLE object from inner (size known from the key: at most
 *         48 + blen bytes), checks it decodes as the block of this key and
 *         volume (keg_block_decode_inplace, or keg_block_decode for a
 *         compressed block: identity and CRC32C), writes it
 *         (temp + rename, no fsync: a cache) and indexes it; threads that miss
 *         the same key meanwhile wait for that one fetch and copy from its
 *         buffer.  An object that does not decode is fetched once more, then
 *         served uncached (the reader's own decode turns it into EIO).
 *   put   write-through to inner, then cached (data just written reads back
 *         without a GET; with writeback above, uploads populate the cache).
 *   del   dropped from the index and the directory, then deleted in inner.
 *   head  answered from the index when cached.
 *
 * The index (hash + LRU list, in memory) is rebuilt at open by scanning the
 * directory: temp files left by a crash are removed, names that are not a
 * canonical escaped key are removed, the LRU order starts as the files'
 * access/modification time.  Eviction keeps the indexed bytes <= limit,
 * dropping least recently used files; an object larger than the limit is
 * not cached.
 *
 * The limit is the budget, lowered so that the cache leaves CS_KEEP_FREE of
 * its file system free (cs_limit_now, at every insert): the directory is often
 * on a disk shared with writeback staging and others, and clean cached blocks
 * are the one thing there that can always be dropped.  Writeback staging that
 * still finds the disk full asks the cache to make room
 * (keg_cache_ssd_make_room): staging comes before caching.
 *
 * Cache entry states:
 *   ABSENT   no index entry, no fill             (a file may exist only as a temp file)
 *   FILLING  a struct cs_fill for the key is on cs->fills
 *   CACHED   an index entry; its file exists unless removed behind our back
 * Invariants (under cs->mu):
 *   | cs->bytes == sum of fsize over indexed entries              |
 *   | cs->bytes <= cs->limit <= budget after every insert returns  |
 *   | at most one fill per key; a fill's data is read-only once done |
 *   | a fill is freed when refs drops to 0 (leader + waiters)      |
 *   | an entry is on the LRU list iff it is in the hash            |
 * LOCKS: one mutex cs->mu guards the index, the fills and the stats; file
 * I/O and inner calls are made without it.
 */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define KEG_LOG_TAG "cache_ssd"
#include "../ssdf/ssd_format.h"
#include "keg/hash.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "../ssdf/ssd_file.h"
#include "../stack_i.h"

/* no cache file is larger: header, longest key, largest encoded block */
#define CS_FILE_MAX ((uint64_t)KEGC_HDR + KEGC_KEY_MAX + KEG_BLOCK_HDR + KEG_BLOCK_SIZE_MAX + 1)

/* Spare files kept for reuse (ssdf/ssd_file.h), emptied, so they hold no bytes
 * outside the budget.  Files of any size: a whole-block file costs the same
 * inode allocation as a small one (measured: 8 % of the mounter's CPU in a
 * sequential write on ext4 without a journal), and emptying it frees its
 * blocks as an unlink would.  At most KEG_SSD_SPARE_MAX of them. */
#define CS_SPARE_FILE_MAX CS_FILE_MAX

/* Free space the cache leaves on its file system: a tenth of it, at least
 * 32 MiB (room for a few staged blocks) and at most 1 GiB. */
#define CS_KEEP_FREE_MIN  (32ULL << 20)
#define CS_KEEP_FREE_MAX  (1ULL << 30)

struct cs_ent {
    struct cs_ent *hnext;         /* hash chain */
    struct cs_ent *prev, *next;   /* LRU list, cs->lru.next is the most recent */
    uint64_t       fsize;         /* bytes of the cache file */
    uint64_t       olen;          /* bytes of the object */
    int64_t        when;          /* sort key at open (ns) */
    char           key[];
};

struct cs_fill {
    struct cs_fill *next;
    char           *key;
    int             done;         /* protected by cs->mu */
    int             cancelled;    /* del() ran: do not index the result */
    ssize_t         rc;           /* object length or -errno, valid once done */
    int             passthrough;  /* not a valid block: everyone reads inner directly */
    uint8_t        *data;         /* the object, read-only once done */
    unsigned        refs;         /* leader + waiters */
};

struct cache_ssd {
    char            *dir;         /* <conf dir>/blocks */
    uint64_t         budget;
    uint64_t         limit;       /* budget lowered to leave disk space free; protected by mu */
    pthread_mutex_t  mu;
    pthread_cond_t   fill_cv;     /* a fill finished */
    struct cs_ent  **ht;          /* protected by mu */
    size_t           nbuckets;    /* power of two */
    size_t           nents;       /* protected by mu */
    struct cs_ent    lru;         /* sentinel; protected by mu */
    uint64_t         bytes;       /* protected by mu */
    uint64_t         leaving;     /* bytes of other files on this disk about to go (the
                                   * staged objects being uploaded, keg_cache_ssd_leaving);
                                   * protected by mu */
    struct cs_fill  *fills;       /* protected by mu */
    struct keg_cache_ssd_stats st; /* protected by mu */
    struct keg_ssd_spare *spare;  /* emptied files for reuse (own lock) */
    struct keg_block_id vol;      /* conf->vol: the volume's part of block identities */
    int              has_vol;
};

/*---------------------------------------------------------------------------
 * Index
 *-------------------------------------------------------------------------*/

static size_t cs_hash(const char *key)
{
    uint64_t h = keg_fnv1a64_str(key);
    return (size_t)(h ^ (h >> 29));
}

/* LOCKS: caller holds cs->mu. */
static struct cs_ent *cs_find(struct cache_ssd *cs, const char *key)
{
    struct cs_ent *e = cs->ht[cs_hash(key) & (cs->nbuckets - 1)];
    while (e && strcmp(e->key, key) != 0)
        e = e->hnext;
    return e;
}

static void lru_unlink(struct cs_ent *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_push_front(struct cache_ssd *cs, struct cs_ent *e)
{
    e->next = cs->lru.next;
    e->prev = &cs->lru;
    cs->lru.next->prev = e;
    cs->lru.next = e;
}

/* Doubles the table when it is full; a failed allocation just keeps chains longer.
 * LOCKS: caller holds cs->mu. */
static void cs_grow(struct cache_ssd *cs)
{
    size_t nb = cs->nbuckets * 2;
    struct cs_ent **ht;

    if (cs->nents < cs->nbuckets)
        return;
    ht = keg_calloc(nb, sizeof(*ht));
    if (!ht)
        return;
    for (size_t i = 0; i < cs->nbuckets; i++) {
        struct cs_ent *e = cs->ht[i];
        while (e) {
            struct cs_ent *n = e->hnext;
            size_t b = cs_hash(e->key) & (nb - 1);
            e->hnext = ht[b];
            ht[b] = e;
            e = n;
        }
    }
    keg_free(cs->ht);
    cs->ht = ht;
    cs->nbuckets = nb;
}

/* Removes e from hash and LRU (caller frees it).  LOCKS: caller holds cs->mu. */
static void cs_remove(struct cache_ssd *cs, struct cs_ent *e)
{
    struct cs_ent **pp = &cs->ht[cs_hash(e->key) & (cs->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(e);
    cs->nents--;
    cs->bytes -= e->fsize;
}

/* Inserts e (TAKES e), replacing an entry of the same key (freed).
 * LOCKS: caller holds cs->mu. */
static void cs_insert(struct cache_ssd *cs, struct cs_ent *e)
{
    struct cs_ent *old = cs_find(cs, e->key);
    size_t b;

    if (old) {
        cs_remove(cs, old);
        keg_free(old);
    }
    cs_grow(cs);
    b = cs_hash(e->key) & (cs->nbuckets - 1);
    e->hnext = cs->ht[b];
    cs->ht[b] = e;
    lru_push_front(cs, e);
    cs->nents++;
    cs->bytes += e->fsize;
}

/* OWNERSHIP: returns a new entry (keg_free), NULL on ENOMEM. */
static struct cs_ent *cs_ent_new(const char *key, uint64_t fsize, uint64_t olen)
{
    size_t kl = strlen(key);
    struct cs_ent *e = keg_calloc(1, sizeof(*e) + kl + 1);
    if (!e)
        return NULL;
    memcpy(e->key, key, kl + 1);
    e->fsize = fsize;
    e->olen = olen;
    return e;
}

/* Detaches least recently used entries until bytes <= limit.
 * OWNERSHIP: returns them chained through hnext; caller unlinks their files
 * (cs_drop_victims) without the lock.  LOCKS: caller holds cs->mu. */
static struct cs_ent *cs_evict_locked(struct cache_ssd *cs)
{
    struct cs_ent *victims = NULL;
    while (cs->bytes > cs->limit && cs->lru.prev != &cs->lru) {
        struct cs_ent *e = cs->lru.prev;
        cs_remove(cs, e);
        e->hnext = victims;
        victims = e;
        cs->st.evictions++;
    }
    return victims;
}

/* Recomputes cs->limit: the budget, or less so that CS_KEEP_FREE of the file
 * system stays free (the cache's own files count as free: they can go, and so
 * do the staged objects being uploaded, which are adopted or removed next: a
 * backlog uploaded at once must not make every adoption look like a full disk).
 * Returns the new limit.  LOCKS: takes cs->mu. */
static uint64_t cs_limit_now(struct cache_ssd *cs)
{
    struct statvfs sv;
    uint64_t lim = cs->budget;
    int known = statvfs(cs->dir, &sv) == 0 && sv.f_frsize > 0;
    pthread_mutex_lock(&cs->mu);
    if (known) {
        uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
        uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
        uint64_t keep = KEG_MIN(KEG_MAX(total / 10, CS_KEEP_FREE_MIN), CS_KEEP_FREE_MAX);
        uint64_t room = cs->bytes + avail + cs->leaving; /* what it could hold at most */
        lim = KEG_MIN(lim, room > keep ? room - keep : 0);
    }
    cs->limit = lim;
    pthread_mutex_unlock(&cs->mu);
    return lim;
}

/*---------------------------------------------------------------------------
 * Files
 *-------------------------------------------------------------------------*/

/* OWNERSHIP: returns "<dir>/<hh>/<prefix><name><suffix>" (keg_free), NULL on ENOMEM. */
static char *cs_path2(struct cache_ssd *cs, const char *key, const char *prefix,
                      const char *name, const char *suffix)
{
    unsigned hh = keg_crc32c(0, key, strlen(key)) & 0xff;
    return keg_asprintf("%s/%02x/%s%s%s", cs->dir, hh, prefix, name, suffix);
}

/* OWNERSHIP: returns "<dir>/<hh>/<prefix><name>" (keg_free), NULL on ENOMEM. */
static char *cs_path(struct cache_ssd *cs, const char *key, const char *prefix, const char *name)
{
    return cs_path2(cs, key, prefix, name, "");
}

static void cs_drop_victims(struct cache_ssd *cs, struct cs_ent *v)
{
    while (v) {
        struct cs_ent *n = v->hnext;
        char name[KEGC_NAME_MAX + 1];
        if (kegc_escape(v->key, name) == 0) {
            char *path = cs_path(cs, v->key, "", name);
            int rc = path ? keg_ssd_spare_retire(cs->spare, AT_FDCWD, path, v->fsize) : 0;
            if (rc < 0 && rc != -ENOENT)
                KEG_WARN("evicting %s: %s", path, strerror(-rc));
            keg_free(path);
        }
        keg_free(v);
        v = n;
    }
}

/* Indexes e (unless NULL) and evicts down to the limit; the victims' files go
 * after the lock is dropped.  OWNERSHIP: takes e.  LOCKS: takes cs->mu. */
static void cs_insert_evict(struct cache_ssd *cs, struct cs_ent *e)
{
    struct cs_ent *victims;

    pthread_mutex_lock(&cs->mu);
    if (e)
        cs_insert(cs, e);
    victims = cs_evict_locked(cs);
    pthread_mutex_unlock(&cs->mu);
    cs_drop_victims(cs, victims);
}

/* Makes the directory path is in (a new <hh> directory); path is cut at its
 * last '/' meanwhile and restored.  Returns 0 or -errno. */
static int cs_mkparent(char *path)
{
    char *slash = strrchr(path, '/');
    *slash = '\0';
    int rc = keg_ssd_mkdirs(path);
    *slash = '/';
    return rc;
}

/* A cache file written through a spare file (keg_ssd_spare_put). */
struct cs_spare_put {
    const char    *key;
    char          *path;
    const uint8_t *obj;
    size_t         len;
    uint64_t       fsize;
};

static int cs_spare_fill(void *arg, int fd)
{
    struct cs_spare_put *p = arg;
    int rc = keg_ssd_file_write(fd, KEGC_KIND_CACHE, p->key, p->obj, p->len);
    return rc == 0 ? keg_ssd_file_fit(fd, p->fsize) : rc;
}

static int cs_spare_mkparent(void *arg)
{
    struct cs_spare_put *p = arg;
    return cs_mkparent(p->path);
}

/* Writes the cache file of key (temp + rename; no fsync) and indexes it.
 * Best effort: failures are logged and leave the object uncached.
 * BORROWS: key, name, obj.  LOCKS: takes cs->mu. */
static void cs_store(struct cache_ssd *cs, struct cs_fill *f, const char *key, const char *name,
                     const uint8_t *obj, size_t len)
{
    uint64_t fsize = KEGC_HDR + strlen(key) + len;
    char *path = NULL, *tmp = NULL;
    struct cs_ent *e = NULL, *victims = NULL;
    int fd = -1, rc = 0;

    if (fsize > cs_limit_now(cs)) {
        cs_insert_evict(cs, NULL);      /* no room: the cache yields what it must */
        return;
    }
    path = cs_path(cs, key, "", name);
    tmp = cs_path2(cs, key, KEGC_TMP_PREFIX, name, ".XXXXXX");
    e = cs_ent_new(key, fsize, len);
    if (!path || !tmp || !e) {
        rc = -ENOMEM;
        goto out;
    }
    {
        struct cs_spare_put sp = {key, path, obj, len, fsize};
        if (keg_ssd_spare_put(cs->spare, AT_FDCWD, path, 0, cs_spare_fill, cs_spare_mkparent,
                              &sp) == 0)
            goto stored;        /* a spare file, written and renamed to path */
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        rc = cs_mkparent(tmp);
        if (rc < 0)
            goto out;
        memcpy(tmp + strlen(tmp) - 6, "XXXXXX", 6);
        fd = mkostemp(tmp, O_CLOEXEC);
    }
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    rc = keg_ssd_file_write(fd, KEGC_KIND_CACHE, key, obj, len);
    rc = keg_ssd_file_publish(AT_FDCWD, fd, tmp, path, rc);
    if (rc < 0)
        goto out;
stored:
    pthread_mutex_lock(&cs->mu);
    if (f && f->cancelled) {
        pthread_mutex_unlock(&cs->mu);
        keg_ssd_spare_retire(cs->spare, AT_FDCWD, path, fsize);
        goto out;
    }
    cs_insert(cs, e);
    e = NULL;
    victims = cs_evict_locked(cs);
    pthread_mutex_unlock(&cs->mu);
    cs_drop_victims(cs, victims);
out:
    if (rc < 0)
        KEG_WARN("cannot cache %s in %s: %s", key, cs->dir, strerror(-rc));
    keg_free(e);
    keg_free(tmp);
    keg_free(path);
}

/* Fills of key in progress must not index what they fetched (it is stale).
 * LOCKS: caller holds cs->mu. */
static void cs_cancel_fills(struct cache_ssd *cs, const char *key)
{
    for (struct cs_fill *f = cs->fills; f; f = f->next) {
        if (strcmp(f->key, key) == 0)
            f->cancelled = 1;
    }
}

/* Drops the index entry of key (if any) and, when unlink_file, its file.
 * LOCKS: takes cs->mu. */
static void cs_forget(struct cache_ssd *cs, const char *key, const char *name, int unlink_file)
{
    struct cs_ent *e;
    uint64_t fsize = UINT64_MAX;    /* not indexed: unknown size, never pooled */

    pthread_mutex_lock(&cs->mu);
    e = cs_find(cs, key);
    if (e) {
        cs_remove(cs, e);
        fsize = e->fsize;
    }
    cs_cancel_fills(cs, key);
    pthread_mutex_unlock(&cs->mu);
    keg_free(e);
    if (unlink_file) {
        char *path = cs_path(cs, key, "", name);
        int rc = path ? keg_ssd_spare_retire(cs->spare, AT_FDCWD, path, fsize) : 0;
        if (rc < 0 && rc != -ENOENT)
            KEG_WARN("removing %s: %s", path, strerror(-rc));
        keg_free(path);
    }
}

/*---------------------------------------------------------------------------
 * get
 *-------------------------------------------------------------------------*/

/* Serves [off, off+len) from the cache file.  olen is the object length the
 * index holds.  A get of the whole object (the fs reads whole blocks) is read
 * straight into buf and verified there; a partial range reads the whole file
 * into memory, verifies it and copies the range.  Returns bytes, or -ENOENT
 * (no file: a miss), -EIO (failed verification: caller deletes and refetches;
 * buf may then hold bad bytes, which the refetch overwrites before any
 * success is returned), or another -errno (treated as a miss). */
static ssize_t cs_read_hit(struct cache_ssd *cs, const char *key, const char *name, uint64_t olen,
                           uint64_t off, void *buf, size_t len)
{
    uint8_t *f = NULL;
    const uint8_t *obj;
    size_t flen;
    ssize_t rc;
    char *path = cs_path(cs, key, "", name);

    if (!path)
        return -ENOMEM;
    if (off == 0 && len >= olen) {
        uint64_t got;
        rc = keg_ssd_file_read_obj(AT_FDCWD, path, KEGC_KIND_CACHED_ANY, key, buf, len, &got);
        if (rc == 0) {
            rc = (ssize_t)got;
            goto out;
        }
        if (rc != -EMSGSIZE)    /* larger than the index says: the range path below */
            goto bad;
    }
    /* a file larger than any cache file can be is -EIO: corrupt, deleted by the caller */
    rc = keg_ssd_file_read(AT_FDCWD, path, CS_FILE_MAX, &f, &flen);
    if (rc == 0) {
        rc = kegc_check(f, flen, KEGC_KIND_CACHED_ANY, key, &obj, &olen);
        if (rc == 0)
            rc = keg_ssd_copy_range(obj, olen, off, buf, len);
    }
bad:
    if (rc == -EIO)
        KEG_ERR("cached block %s (%s) is corrupt: deleted, fetching it again", key, path);
out:
    keg_free(f);
    keg_free(path);
    return rc;
}

/* Fetches the whole block from inner and checks that it decodes.
 * OWNERSHIP: *data is keg_malloc'ed (caller frees), also when *valid is 0.
 * *valid: 1 = a good block (cache it), 0 = serve it but do not cache it,
 * -1 = longer than any block of this key (read inner per request).
 * Returns the object length or -errno from inner. */
static ssize_t cs_fetch(struct keg_obj *o, const char *key, uint32_t blen, uint8_t **data,
                        int *valid)
{
    const struct cache_ssd *cs = o->priv;
    size_t cap = KEG_BLOCK_HDR + (size_t)blen + 1;
    uint8_t *buf = keg_malloc(cap), *raw = NULL;    /* raw: compressed blocks only */
    struct keg_block_id bid = cs->vol;
    ssize_t n = -ENOMEM;

    if (keg_block_key_parse(key, &bid.slice, &bid.indx, &bid.blen) < 0)
        bid.blen = blen;        /* not reached: kegc_is_block() parsed it */

    *data = NULL;
    *valid = 0;
    if (!buf)
        goto out;
    for (int attempt = 0; attempt < 2; attempt++) {
        ssize_t d;
        n = keg_obj_get(o->inner, key, 0, buf, cap);
        if (n < 0)
            goto out;
        if ((size_t)n == cap) {
            *valid = -1;
            goto out;
        }
        d = keg_block_decode_inplace(buf, (size_t)n, cs->has_vol ? &bid : NULL, blen);
        if (d == -ENOTSUP) {
            if (!raw)
                raw = keg_malloc(blen ? blen : 1);
            if (!raw) {
                n = -ENOMEM;
                goto out;
            }
            d = keg_block_decode(buf, (size_t)n, cs->has_vol ? &bid : NULL, raw, blen);
        }
        if (d == (ssize_t)blen) {
            *valid = 1;
            break;
        }
        KEG_WARN("block %s from the store fails verification%s", key,
                 attempt ? ": serving it uncached" : ": fetching it again");
    }
    *data = buf;
    buf = NULL;
out:
    keg_free(buf);
    keg_free(raw);
    return n;
}

/* LOCKS: caller holds cs->mu.  Frees f when the last reference goes. */
static void cs_fill_unref(struct cs_fill *f)
{
    if (--f->refs == 0) {
        keg_free(f->data);
        keg_free(f->key);
        keg_free(f);
    }
}

static ssize_t cs_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len)
{
    struct cache_ssd *cs = o->priv;
    char name[KEGC_NAME_MAX + 1];
    struct cs_fill *f;
    uint32_t blen;
    ssize_t rc;
    int valid = 0;

    if (!kegc_is_block(key, &blen) || kegc_escape(key, name) < 0)
        return keg_obj_get(o->inner, key, off, buf, len);

    pthread_mutex_lock(&cs->mu);
    if (cs_find(cs, key)) {
        struct cs_ent *e = cs_find(cs, key);
        uint64_t olen = e->olen;
        lru_unlink(e);
        lru_push_front(cs, e);
        pthread_mutex_unlock(&cs->mu);
        rc = cs_read_hit(cs, key, name, olen, off, buf, len);
        if (rc >= 0) {
            pthread_mutex_lock(&cs->mu);
            cs->st.hits++;
            pthread_mutex_unlock(&cs->mu);
            return rc;
        }
        pthread_mutex_lock(&cs->mu);
        if (rc == -EIO)
            cs->st.corrupt++;
        pthread_mutex_unlock(&cs->mu);
        cs_forget(cs, key, name, rc == -EIO);
        pthread_mutex_lock(&cs->mu);
    }

    for (f = cs->fills; f; f = f->next) {
        if (strcmp(f->key, key) == 0)
            break;
    }
    if (f) {
        /* Someone is fetching it: wait for that one GET. */
        f->refs++;
        cs->st.shared++;
        while (!f->done)
            pthread_cond_wait(&cs->fill_cv, &cs->mu);
        pthread_mutex_unlock(&cs->mu);
        goto serve;
    }
    f = keg_calloc(1, sizeof(*f));
    if (f)
        f->key = keg_strdup(key);
    if (!f || !f->key) {
        pthread_mutex_unlock(&cs->mu);
        if (f)
            keg_free(f);
        return -ENOMEM;
    }
    f->refs = 1;
    f->next = cs->fills;
    cs->fills = f;
    cs->st.misses++;
    pthread_mutex_unlock(&cs->mu);

    rc = cs_fetch(o, key, blen, &f->data, &valid);
    if (rc >= 0 && valid == 1)
        cs_store(cs, f, key, name, f->data, (size_t)rc);

    pthread_mutex_lock(&cs->mu);
    for (struct cs_fill **pp = &cs->fills; *pp; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    }
    f->rc = rc;
    f->passthrough = valid < 0;
    f->done = 1;
    pthread_cond_broadcast(&cs->fill_cv);
    pthread_mutex_unlock(&cs->mu);

serve:
    /* f->data is read-only now and kept alive by our reference. */
    if (f->passthrough)
        rc = keg_obj_get(o->inner, key, off, buf, len);
    else if (f->rc < 0)
        rc = f->rc;
    else
        rc = keg_ssd_copy_range(f->data, (uint64_t)f->rc, off, buf, len);
    pthread_mutex_lock(&cs->mu);
    cs_fill_unref(f);
    pthread_mutex_unlock(&cs->mu);
    return rc;
}

/*---------------------------------------------------------------------------
 * put, del, head
 *-------------------------------------------------------------------------*/

/* Takes over the caller's SSD file of key (an uploaded staging file) as the
 * cache file: take() renames it into place as it is (its header keeps kind 2,
 * which the cache's readers accept: SSD-FORMAT.md §1), then it is indexed.
 * One rename and no copy, no header rewrite: every object a writeback mount
 * uploads passes here.  Returns 1 if the file was taken, 0 if take() failed
 * (the file is still the caller's).  BORROWS: everything.  LOCKS: takes cs->mu. */
static int cs_adopt(struct cache_ssd *cs, const char *key, const char *name, uint64_t olen,
                    keg_obj_take_fn *take, void *arg)
{
    size_t klen = strlen(key);
    uint64_t fsize = KEGC_HDR + klen + olen;
    char *path = NULL;
    struct cs_ent *e = NULL;
    int rc;

    /* The file is on this disk already (a staging file): adopting it costs no
     * space, but a limit below it means the disk is short: leave it alone. */
    if (fsize > cs_limit_now(cs))
        return 0;
    path = cs_path(cs, key, "", name);
    e = cs_ent_new(key, fsize, olen);
    if (!path || !e) {
        rc = -ENOMEM;
        goto out;
    }
    rc = take(arg, path);
    if (rc == -ENOENT) {
        rc = cs_mkparent(path);
        if (rc == 0)
            rc = take(arg, path);
    }
    if (rc < 0)
        goto out;
    cs_insert_evict(cs, e);
    e = NULL;
out:
    keg_free(e);
    keg_free(path);
    return rc == 0;
}

/* put(), and put_file() whose caller holds the object in an SSD file: the
 * cache adopts that file (take != NULL) instead of writing its own copy (see
 * keg_obj_ops.put_file).  Returns 1 if the file was taken, 0, or -errno. */
static int cs_put_file(struct keg_obj *o, const char *key, const void *buf, size_t len,
                       keg_obj_take_fn *take, void *arg)
{
    struct cache_ssd *cs = o->priv;
    char name[KEGC_NAME_MAX + 1];
    uint32_t blen;
    int rc = keg_obj_put(o->inner, key, buf, len);

    if (rc < 0 || !kegc_is_block(key, &blen) || kegc_escape(key, name) < 0)
        return rc;
    pthread_mutex_lock(&cs->mu);
    cs_cancel_fills(cs, key);     /* a fill of the previous object must not cache it */
    pthread_mutex_unlock(&cs->mu);
    if (len > KEG_BLOCK_HDR + (size_t)blen)
        return 0;
    if (take && cs_adopt(cs, key, name, len, take, arg))
        return 1;
    cs_store(cs, NULL, key, name, buf, len);
    return 0;
}

static int cs_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    int rc = cs_put_file(o, key, buf, len, NULL, NULL);
    return rc < 0 ? rc : 0;
}

static void cs_del_local(struct cache_ssd *cs, const char *key)
{
    char name[KEGC_NAME_MAX + 1];
    uint32_t blen;

    if (kegc_is_block(key, &blen) && kegc_escape(key, name) == 0)
        cs_forget(cs, key, name, 1);
}

static int cs_del(struct keg_obj *o, const char *key)
{
    cs_del_local(o->priv, key);
    return keg_obj_del(o->inner, key);
}

static int cs_del_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cs_del_local(o->priv, keys[i]);
    return keg_obj_del_keys(o->inner, keys, n);
}

static int cs_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    struct cache_ssd *cs = o->priv;
    struct cs_ent *e;

    *size = 0;
    pthread_mutex_lock(&cs->mu);
    e = cs_find(cs, key);
    if (e)
        *size = e->olen;
    pthread_mutex_unlock(&cs->mu);
    return e ? 0 : keg_obj_head(o->inner, key, size);
}

/*---------------------------------------------------------------------------
 * open: rebuild the index from the directory
 *-------------------------------------------------------------------------*/

static int cs_ent_cmp(const void *a, const void *b)
{
    const struct cs_ent *x = *(const struct cs_ent *const *)a;
    const struct cs_ent *y = *(const struct cs_ent *const *)b;
    return x->when < y->when ? -1 : x->when > y->when;
}

static int64_t ts_ns(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

/* Scans one <hh> directory into the array *ents (grown as needed).
 * Returns 0 or -ENOMEM; unreadable entries are skipped. */
static int cs_scan_dir(struct cache_ssd *cs, const char *hh, struct cs_ent ***ents, size_t *n,
                       size_t *cap, unsigned *removed)
{
    char *path = keg_asprintf("%s/%s", cs->dir, hh);
    DIR *d = path ? opendir(path) : NULL;
    struct dirent *de;
    int rc = 0;

    if (!path)
        return -ENOMEM;
    if (!d) {
        keg_free(path);
        return 0;
    }
    while ((de = readdir(d)) != NULL) {
        char key[KEGC_NAME_MAX + 1];
        struct stat st;
        struct cs_ent *e;
        char hx[3];

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (kegc_unescape(de->d_name, key) < 0)
            key[0] = '\0';
        snprintf(hx, sizeof(hx), "%02x", keg_crc32c(0, key, strlen(key)) & 0xff);
        if (!key[0] || strcmp(hx, hh) != 0 || (uint64_t)st.st_size < KEGC_HDR + strlen(key)) {
            /* a temp file of a crashed write, or something that is not ours to index */
            if (unlinkat(dirfd(d), de->d_name, 0) == 0)
                (*removed)++;
            continue;
        }
        e = cs_ent_new(key, (uint64_t)st.st_size, (uint64_t)st.st_size - KEGC_HDR - strlen(key));
        if (!e) {
            rc = -ENOMEM;
            break;
        }
        e->when = KEG_MAX(ts_ns(&st.st_atim), ts_ns(&st.st_mtim));
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            struct cs_ent **ne = keg_realloc(*ents, nc * sizeof(*ne));
            if (!ne) {
                keg_free(e);
                rc = -ENOMEM;
                break;
            }
            *ents = ne;
            *cap = nc;
        }
        (*ents)[(*n)++] = e;
    }
    closedir(d);
    keg_free(path);
    return rc;
}

static int cs_rebuild(struct cache_ssd *cs)
{
    struct cs_ent **ents = NULL;
    size_t n = 0, cap = 0;
    unsigned removed = 0;
    int rc = 0;

    for (unsigned i = 0; i < 256 && rc == 0; i++) {
        char hh[3];
        snprintf(hh, sizeof(hh), "%02x", i);
        rc = cs_scan_dir(cs, hh, &ents, &n, &cap, &removed);
    }
    if (rc == 0 && n)
        qsort(ents, n, sizeof(*ents), cs_ent_cmp);
    pthread_mutex_lock(&cs->mu);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0)
            cs_insert(cs, ents[i]);    /* oldest first: the newest ends at the front */
        else
            keg_free(ents[i]);
    }
    pthread_mutex_unlock(&cs->mu);
    cs_limit_now(cs);
    cs_insert_evict(cs, NULL);
    keg_free(ents);
    if (rc == 0)
        KEG_INFO("cache %s: %zu objects, %llu bytes (budget %llu, %llu with the disk's free "
                 "space)%s", cs->dir, cs->nents, (unsigned long long)cs->bytes,
                 (unsigned long long)cs->budget, (unsigned long long)cs->limit,
                 removed ? "; removed leftover temp files" : "");
    return rc;
}

static void cs_free_all(struct cache_ssd *cs)
{
    for (struct cs_ent *e = cs->lru.next; e && e != &cs->lru;) {
        struct cs_ent *n = e->next;
        keg_free(e);
        e = n;
    }
    keg_free(cs->ht);
    keg_free(cs->dir);
    keg_ssd_spare_close(cs->spare);
}

static int cs_open_op(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    KEG_UNUSED(o);
    KEG_UNUSED(conf);
    KEG_ERR("the cache_ssd layer is opened with keg_cache_ssd_create()");
    return -EINVAL;
}

static void cs_close(struct keg_obj *o)
{
    struct cache_ssd *cs = o->priv;
    if (!cs)
        return;
    KEG_ASSERT(cs->fills == NULL);
    cs_free_all(cs);
    pthread_cond_destroy(&cs->fill_cv);
    pthread_mutex_destroy(&cs->mu);
    keg_free(cs);
    o->priv = NULL;
}

int keg_cache_ssd_create(const struct keg_cache_ssd_conf *conf, struct keg_obj *inner,
                         struct keg_obj **out)
{
    struct keg_obj *o = NULL;
    struct cache_ssd *cs = NULL;
    int rc;

    *out = NULL;
    if (!inner || !conf || !conf->dir || conf->dir[0] != '/' || conf->budget == 0) {
        KEG_ERR("cache: needs an absolute cache directory, a size > 0 and a store below it");
        rc = -EINVAL;
        goto fail1;
    }
    o = keg_calloc(1, sizeof(*o));
    cs = keg_calloc(1, sizeof(*cs));
    if (!o || !cs) {
        rc = -ENOMEM;
        goto fail2;
    }
    cs->dir = keg_asprintf("%s/blocks", conf->dir);
    cs->nbuckets = 1024;
    cs->ht = keg_calloc(cs->nbuckets, sizeof(*cs->ht));
    if (!cs->dir || !cs->ht) {
        rc = -ENOMEM;
        goto fail3;
    }
    cs->budget = conf->budget;
    cs->limit = conf->budget;
    if (conf->vol) {
        cs->vol = *conf->vol;
        cs->has_vol = 1;
    }
    cs->lru.next = cs->lru.prev = &cs->lru;
    rc = keg_ssd_mkdirs(cs->dir);
    if (rc < 0) {
        KEG_ERR("cache directory %s cannot be created: %s", cs->dir, strerror(-rc));
        goto fail3;
    }
    {
        char *sdir = keg_asprintf("%s/spare", conf->dir);
        rc = sdir ? keg_ssd_spare_open(sdir, KEG_SSD_SPARE_MAX, CS_SPARE_FILE_MAX, &cs->spare)
                  : -ENOMEM;
        if (rc < 0)     /* only an optimisation: go on without */
            KEG_WARN("cache directory %s: no pool of spare files: %s", sdir ? sdir : conf->dir,
                     strerror(-rc));
        else if (conf->spare_fill)
            keg_ssd_spare_autofill(cs->spare);
        keg_free(sdir);
    }
    pthread_mutex_init(&cs->mu, NULL);
    pthread_cond_init(&cs->fill_cv, NULL);
    rc = cs_rebuild(cs);
    if (rc < 0) {
        KEG_ERR("cache directory %s cannot be indexed: %s", cs->dir, strerror(-rc));
        goto fail4;
    }
    o->ops = &keg_cache_ssd_ops;
    o->inner = inner;
    o->priv = cs;
    *out = o;
    return 0;

fail4:
    pthread_cond_destroy(&cs->fill_cv);
    pthread_mutex_destroy(&cs->mu);
fail3:
    cs_free_all(cs);
fail2:
    keg_free(cs);
    keg_free(o);
fail1:
    keg_obj_close(inner);
    return rc;
}

uint64_t keg_cache_ssd_make_room(struct keg_obj *o, uint64_t need)
{
    struct cs_ent *victims = NULL;
    uint64_t freed = 0;
    if (!o || o->ops != &keg_cache_ssd_ops)
        return 0;
    struct cache_ssd *cs = o->priv;
    pthread_mutex_lock(&cs->mu);
    while (freed < need && cs->lru.prev != &cs->lru) {
        struct cs_ent *e = cs->lru.prev;
        freed += e->fsize;
        cs_remove(cs, e);
        e->hnext = victims;
        victims = e;
        cs->st.evictions++;
    }
    cs->limit = KEG_MIN(cs->limit, cs->bytes);      /* until the next cs_limit_now */
    pthread_mutex_unlock(&cs->mu);
    cs_drop_victims(cs, victims);
    return freed;
}

void keg_cache_ssd_leaving(struct keg_obj *o, int64_t delta)
{
    if (!o || o->ops != &keg_cache_ssd_ops)
        return;
    struct cache_ssd *cs = o->priv;
    pthread_mutex_lock(&cs->mu);
    cs->leaving = (uint64_t)((int64_t)cs->leaving + delta);
    pthread_mutex_unlock(&cs->mu);
}

struct keg_ssd_spare *keg_cache_ssd_spare(struct keg_obj *o)
{
    if (!o || o->ops != &keg_cache_ssd_ops)
        return NULL;
    return ((struct cache_ssd *)o->priv)->spare;
}

int keg_cache_ssd_stats(struct keg_obj *o, struct keg_cache_ssd_stats *st)
{
    struct cache_ssd *cs;

    memset(st, 0, sizeof(*st));
    if (!o || o->ops != &keg_cache_ssd_ops)
        return -EINVAL;
    cs = o->priv;
    pthread_mutex_lock(&cs->mu);
    *st = cs->st;
    st->bytes = cs->bytes;
    st->objects = cs->nents;
    st->budget = cs->limit;
    pthread_mutex_unlock(&cs->mu);
    return 0;
}

const struct keg_obj_ops keg_cache_ssd_ops = {
    .name = "cache_ssd",
    .version = 1,
    .caps = KEG_OBJ_CAP_RANGE_GET | KEG_OBJ_CAP_LIST,
    .priv_size = 0,    /* allocated by keg_cache_ssd_create */
    .open = cs_open_op,
    .close = cs_close,
    .get = cs_get,
    .put = cs_put,
    .del = cs_del,
    .del_keys = cs_del_keys,
    .head = cs_head,
    .list = keg_obj_def_list,
    .sync = keg_obj_def_sync,
    .sync_keys = keg_obj_def_sync_keys,
    .put_file = cs_put_file,
};
