/* obj_mem.c -- the "mem" object store: a hash map in memory, for tests.
 *
 * DESIGN
 * One mutex guards the whole map.  put copies the data before taking the lock
 * and swaps the entry's buffer under it, so readers see the old or the new
 * object, never a mix.  list copies the matching keys under the lock and calls
 * the callback without it, so a callback may call back into the store (e.g.
 * delete what it is shown).  conf->bucket is ignored: every open is a new,
 * empty store.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KEG_LOG_TAG "obj_mem"
#include "keg/hash.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/obj.h"

struct mem_ent {
    struct mem_ent *next;      /* hash chain */
    char           *key;
    unsigned char  *data;      /* len bytes (NULL when len == 0) */
    size_t          len;
};

struct mem_store {
    pthread_mutex_t  lock;
    struct mem_ent **buckets;  /* protected by lock */
    size_t           nbuckets; /* power of two; protected by lock */
    size_t           count;    /* protected by lock */
};

#define MEM_INITIAL_BUCKETS 64

/* LOCKS: caller holds ms->lock. */
static struct mem_ent **mem_slot(struct mem_store *ms, const char *key)
{
    struct mem_ent **pp = &ms->buckets[keg_fnv1a64_str(key) & (ms->nbuckets - 1)];
    while (*pp && strcmp((*pp)->key, key) != 0)
        pp = &(*pp)->next;
    return pp;
}

/* LOCKS: caller holds ms->lock.  Growing is best effort (ENOMEM keeps the old table). */
static void mem_grow(struct mem_store *ms)
{
    size_t n = ms->nbuckets * 2;
    struct mem_ent **nb = keg_calloc(n, sizeof(*nb));
    if (!nb)
        return;
    for (size_t i = 0; i < ms->nbuckets; i++) {
        struct mem_ent *e = ms->buckets[i];
        while (e) {
            struct mem_ent *next = e->next;
            size_t j = keg_fnv1a64_str(e->key) & (n - 1);
            e->next = nb[j];
            nb[j] = e;
            e = next;
        }
    }
    keg_free(ms->buckets);
    ms->buckets = nb;
    ms->nbuckets = n;
}

static int mem_open(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    struct mem_store *ms = o->priv;
    KEG_UNUSED(conf);
    ms->buckets = keg_calloc(MEM_INITIAL_BUCKETS, sizeof(*ms->buckets));
    if (!ms->buckets)
        return -ENOMEM;
    ms->nbuckets = MEM_INITIAL_BUCKETS;
    pthread_mutex_init(&ms->lock, NULL);
    return 0;
}

static void mem_close(struct keg_obj *o)
{
    struct mem_store *ms = o->priv;
    for (size_t i = 0; i < ms->nbuckets; i++) {
        struct mem_ent *e = ms->buckets[i];
        while (e) {
            struct mem_ent *next = e->next;
            keg_free(e->key);
            keg_free(e->data);
            keg_free(e);
            e = next;
        }
    }
    keg_free(ms->buckets);
    pthread_mutex_destroy(&ms->lock);
}

static ssize_t mem_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len)
{
    struct mem_store *ms = o->priv;
    struct mem_ent *e;
    ssize_t n = -ENOENT;

    pthread_mutex_lock(&ms->lock);
    e = *mem_slot(ms, key);
    if (e) {
        size_t avail = off < e->len ? e->len - (size_t)off : 0;
        size_t cnt = KEG_MIN(avail, len);
        if (cnt)
            memcpy(buf, e->data + off, cnt);
        n = (ssize_t)cnt;
    }
    pthread_mutex_unlock(&ms->lock);
    return n;
}

static int mem_store(struct keg_obj *o, const char *key, const void *buf, size_t len, int excl)
{
    struct mem_store *ms = o->priv;
    struct mem_ent *e, **pp;
    unsigned char *data = NULL;
    char *kcopy = NULL;

    if (len) {
        data = keg_malloc(len);
        if (!data)
            return -ENOMEM;
        memcpy(data, buf, len);
    }
    pthread_mutex_lock(&ms->lock);
    pp = mem_slot(ms, key);
    e = *pp;
    if (e && excl) {
        pthread_mutex_unlock(&ms->lock);
        keg_free(data);
        return -EEXIST;
    }
    if (e) {
        unsigned char *old = e->data;
        e->data = data;
        e->len = len;
        pthread_mutex_unlock(&ms->lock);
        keg_free(old);
        return 0;
    }
    e = keg_calloc(1, sizeof(*e));
    kcopy = keg_strdup(key);
    if (!e || !kcopy) {
        pthread_mutex_unlock(&ms->lock);
        keg_free(e);
        keg_free(kcopy);
        keg_free(data);
        return -ENOMEM;
    }
    e->key = kcopy;
    e->data = data;
    e->len = len;
    *pp = e;
    ms->count++;
    if (ms->count > ms->nbuckets * 2)
        mem_grow(ms);
    pthread_mutex_unlock(&ms->lock);
    return 0;
}

static int mem_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    return mem_store(o, key, buf, len, 0);
}

static int mem_put_new(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    return mem_store(o, key, buf, len, 1);
}

static int mem_del(struct keg_obj *o, const char *key)
{
    struct mem_store *ms = o->priv;
    struct mem_ent *e, **pp;

    pthread_mutex_lock(&ms->lock);
    pp = mem_slot(ms, key);
    e = *pp;
    if (e) {
        *pp = e->next;
        ms->count--;
    }
    pthread_mutex_unlock(&ms->lock);
    if (e) {
        keg_free(e->key);
        keg_free(e->data);
        keg_free(e);
    }
    return 0;
}

static int mem_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    struct mem_store *ms = o->priv;
    struct mem_ent *e;
    int rc = -ENOENT;

    *size = 0;
    pthread_mutex_lock(&ms->lock);
    e = *mem_slot(ms, key);
    if (e) {
        *size = e->len;
        rc = 0;
    }
    pthread_mutex_unlock(&ms->lock);
    return rc;
}

struct mem_item {
    char    *key;
    uint64_t size;
};

static int mem_item_cmp(const void *a, const void *b)
{
    const struct mem_item *x = a, *y = b;
    return strcmp(x->key, y->key);
}

static int mem_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg)
{
    struct mem_store *ms = o->priv;
    struct mem_item *items = NULL;
    size_t n = 0, plen = prefix ? strlen(prefix) : 0;
    int rc = 0;

    pthread_mutex_lock(&ms->lock);
    items = keg_calloc(ms->count ? ms->count : 1, sizeof(*items));
    if (!items) {
        pthread_mutex_unlock(&ms->lock);
        return -ENOMEM;
    }
    for (size_t i = 0; i < ms->nbuckets && rc == 0; i++) {
        for (struct mem_ent *e = ms->buckets[i]; e; e = e->next) {
            if (plen && strncmp(e->key, prefix, plen) != 0)
                continue;
            items[n].key = keg_strdup(e->key);
            if (!items[n].key) {
                rc = -ENOMEM;
                break;
            }
            items[n].size = e->len;
            n++;
        }
    }
    pthread_mutex_unlock(&ms->lock);

    if (rc == 0) {
        qsort(items, n, sizeof(*items), mem_item_cmp);
        for (size_t i = 0; i < n && rc == 0; i++)
            rc = cb(arg, items[i].key, items[i].size);
    }
    for (size_t i = 0; i < n; i++)
        keg_free(items[i].key);
    keg_free(items);
    return rc;
}

const struct keg_obj_ops keg_obj_mem_ops = {
    .name = "mem",
    .version = 1,
    .caps = KEG_OBJ_CAP_RANGE_GET | KEG_OBJ_CAP_LIST,
    .priv_size = sizeof(struct mem_store),
    .open = mem_open,
    .close = mem_close,
    .get = mem_get,
    .put = mem_put,
    .put_new = mem_put_new,
    .del = mem_del,
    .head = mem_head,
    .list = mem_list,
};
