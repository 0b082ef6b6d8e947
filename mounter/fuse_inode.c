/* fuse_inode.c -- nlookup accounting: how many references the kernel holds on each inode.
 *
 * DESIGN
 * The FUSE protocol hands the kernel one reference per successful
 * fuse_reply_entry / fuse_reply_create and per readdirplus entry (not "." and
 * ".."); the kernel gives them back with forget(ino, n).  core/fs decides when
 * an unlinked inode is purged (it tracks open handles itself), so this table is
 * the mounter's proof that the protocol is followed: a forget that would take a
 * count below zero means a reference was given without being counted (or twice
 * forgotten) and is a bug: keg_panic(), as passthrough_hp does.
 *
 * Except in a worker restarted by the supervisor (mnt_inode_tolerate_unknown):
 * the kernel still holds the references the crashed worker handed out, which
 * this fresh table never saw, so a forget may name an inode it does not know,
 * or more references than it counted.  There the count just drops to zero.
 *
 * Each entry also says whether the kernel may have put pages of the inode in
 * its page cache since the entry was made: a readable open, or a write through
 * the page cache (mnt_inode_mark_cached).  An entry lives exactly as long as
 * the kernel's inode holds references, and the kernel drops an inode's pages
 * when it forgets it, so a direct write to an inode without that mark has no
 * cached page to invalidate (mnt_write).
 *
 * Table: MNT_SHARDS shards, each a chained hash table with its own mutex, so
 * concurrent lookups of different inodes rarely contend.  An entry exists only
 * while its count is non-zero.
 *
 * Invariants:
 *   - every entry in a shard has count > 0            (removed when it drops to 0)
 *   - an entry for ino lives in shard (hash(ino) % MNT_SHARDS)
 *   - shard->n == number of entries in the shard      (protected by shard->lock)
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "keg/keg.h"
#include "keg/mem.h"

#include "mnt_i.h"

#define MNT_SHARDS 64

struct mnt_inode {
    uint64_t          ino;
    uint64_t          count;   /* kernel references; > 0 */
    int               cached;  /* the page cache may hold pages (mnt_inode_mark_cached) */
    struct mnt_inode *next;    /* bucket chain */
};

struct mnt_shard {
    pthread_mutex_t    lock;
    struct mnt_inode **buckets;   /* protected by lock */
    size_t             nbuckets;  /* protected by lock; power of two or 0 */
    size_t             n;         /* protected by lock */
};

static struct mnt_shard shards[MNT_SHARDS] = {
#define S PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0
    [0 ... MNT_SHARDS - 1] = {S},
#undef S
};

static int tolerant;   /* set once before the session runs (restarted worker) */

void mnt_inode_tolerate_unknown(int on)
{
    tolerant = on;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static struct mnt_shard *shard_of(uint64_t ino, uint64_t *h)
{
    *h = mix(ino);
    return &shards[*h % MNT_SHARDS];
}

/* LOCKS: s->lock held.  Returns 0 or -ENOMEM (table left as it was). */
static int shard_grow(struct mnt_shard *s)
{
    size_t nb = s->nbuckets ? s->nbuckets * 2 : 64;
    struct mnt_inode **b = keg_calloc(nb, sizeof(*b));
    if (!b)
        return -ENOMEM;
    for (size_t i = 0; i < s->nbuckets; i++) {
        struct mnt_inode *e = s->buckets[i];
        while (e) {
            struct mnt_inode *next = e->next;
            size_t j = (mix(e->ino) / MNT_SHARDS) & (nb - 1);
            e->next = b[j];
            b[j] = e;
            e = next;
        }
    }
    keg_free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
    return 0;
}

/* LOCKS: s->lock held. */
static struct mnt_inode **find_slot(struct mnt_shard *s, uint64_t ino, uint64_t h)
{
    if (!s->nbuckets)
        return NULL;
    struct mnt_inode **pp = &s->buckets[(h / MNT_SHARDS) & (s->nbuckets - 1)];
    while (*pp && (*pp)->ino != ino)
        pp = &(*pp)->next;
    return pp;
}

/* The entry of ino, or NULL.  LOCKS: s->lock held. */
static struct mnt_inode *find_ent(struct mnt_shard *s, uint64_t ino, uint64_t h)
{
    struct mnt_inode **pp = find_slot(s, ino, h);
    return pp ? *pp : NULL;
}

void mnt_inode_ref(uint64_t ino, uint64_t n)
{
    uint64_t h;
    struct mnt_shard *s = shard_of(ino, &h);
    if (n == 0)
        return;
    pthread_mutex_lock(&s->lock);
    struct mnt_inode **pp = find_slot(s, ino, h);
    if (pp && *pp) {
        (*pp)->count += n;
        pthread_mutex_unlock(&s->lock);
        return;
    }
    if (s->n >= s->nbuckets && shard_grow(s) != 0 && !s->nbuckets)
        KEG_PANIC("out of memory counting kernel references of inode %llu",
                  (unsigned long long)ino);
    struct mnt_inode *e = keg_malloc(sizeof(*e));
    if (!e)
        KEG_PANIC("out of memory counting kernel references of inode %llu",
                  (unsigned long long)ino);
    pp = find_slot(s, ino, h);
    e->ino = ino;
    e->count = n;
    e->cached = 0;
    e->next = *pp;
    *pp = e;
    s->n++;
    pthread_mutex_unlock(&s->lock);
}

uint64_t mnt_inode_unref(uint64_t ino, uint64_t n)
{
    uint64_t h;
    uint64_t left;
    struct mnt_shard *s = shard_of(ino, &h);
    pthread_mutex_lock(&s->lock);
    struct mnt_inode **pp = find_slot(s, ino, h);
    struct mnt_inode *e = pp ? *pp : NULL;
    uint64_t have = e ? e->count : 0;
    if (n > have && tolerant) {
        n = have;      /* references of the crashed worker: not ours to count */
    } else if (n > have) {
        pthread_mutex_unlock(&s->lock);
        KEG_PANIC("forget(ino=%llu, nlookup=%llu) but the kernel holds only %llu references",
                  (unsigned long long)ino, (unsigned long long)n, (unsigned long long)have);
    }
    if (!e) {   /* n == 0 == have, or an inode only the crashed worker knew */
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    e->count -= n;
    left = e->count;
    if (left == 0) {
        *pp = e->next;
        s->n--;
        keg_free(e);
    }
    pthread_mutex_unlock(&s->lock);
    return left;
}

uint64_t mnt_inode_count(uint64_t ino)
{
    uint64_t h;
    struct mnt_shard *s = shard_of(ino, &h);
    pthread_mutex_lock(&s->lock);
    struct mnt_inode *e = find_ent(s, ino, h);
    uint64_t c = e ? e->count : 0;
    pthread_mutex_unlock(&s->lock);
    return c;
}

void mnt_inode_mark_cached(uint64_t ino)
{
    uint64_t h;
    struct mnt_shard *s = shard_of(ino, &h);
    pthread_mutex_lock(&s->lock);
    struct mnt_inode *e = find_ent(s, ino, h);
    if (e)
        e->cached = 1;
    pthread_mutex_unlock(&s->lock);
}

int mnt_inode_may_cache(uint64_t ino)
{
    uint64_t h;
    struct mnt_shard *s = shard_of(ino, &h);
    if (tolerant)
        return 1;
    pthread_mutex_lock(&s->lock);
    struct mnt_inode *e = find_ent(s, ino, h);
    int c = !e || e->cached;
    pthread_mutex_unlock(&s->lock);
    return c;
}

uint64_t mnt_inode_live(void)
{
    uint64_t total = 0;
    for (int i = 0; i < MNT_SHARDS; i++) {
        pthread_mutex_lock(&shards[i].lock);
        total += shards[i].n;
        pthread_mutex_unlock(&shards[i].lock);
    }
    return total;
}

void mnt_inode_clear(void)
{
    for (int i = 0; i < MNT_SHARDS; i++) {
        struct mnt_shard *s = &shards[i];
        pthread_mutex_lock(&s->lock);
        for (size_t b = 0; b < s->nbuckets; b++) {
            struct mnt_inode *e = s->buckets[b];
            while (e) {
                struct mnt_inode *next = e->next;
                keg_free(e);
                e = next;
            }
        }
        keg_free(s->buckets);
        s->buckets = NULL;
        s->nbuckets = 0;
        s->n = 0;
        pthread_mutex_unlock(&s->lock);
    }
}
