/* meta_redis_names.c -- the Redis engine's cache of directory names: a lookup
 * of a name that does not exist is answered without a round trip.
 *
 * WHY
 * Creating a file costs two round trips: the kernel first looks the new name
 * up (the answer is "no such name"), then creates it.  Renaming onto a new
 * name costs the same lookup before the rename.  Answering those lookups
 * here halves the round trips of a create and of a create+rename.
 *
 * DESIGN
 * For a directory of at most MR_NAMES_DIR_MAX names, the lookup script that
 * finds a name absent also sends the directory's names along (in the lookup's
 * own round trip; mr_names_lookup/mr_names_fill_end).  From then on every name that
 * any mounter adds to that directory is learnt from the volume's channel:
 * the scripts that add a directory entry (dset in meta_redis_lua_i.h: mknod,
 * link, rename) PUBLISH "DIR/NAME" on "{NS}n" inside the same atomic script.
 *
 * Invariant: a cached set is a SUPERSET of the directory's names.  Removals
 * are never applied (a removed name only costs a round trip when looked up);
 * additions are applied as they are announced, and this mounter's own
 * additions also before they are sent (mr_names_add).  So a name outside the
 * set does not exist, and the lookup can say so.  An addition that cannot be
 * recorded (out of memory, the directory grew past MR_NAMES_DIR_MAX) drops
 * the directory's set instead.
 *
 * The sets are trusted only while the subscription is known to be whole:
 *   - one connection, dialled like the pool's (through the sentinels), is
 *     subscribed to the channel; when it breaks, every set is dropped and
 *     nothing is cached until it is subscribed again;
 *   - it is PINGed every second; no answer for NC_DEAD_NS: dropped as dead;
 *   - when the engine dials a different server address (a failover), the
 *     address generation changes and everything is dropped;
 *   - a directory's fill is started only while subscribed, and a drop
 *     discards fills under way; names announced while a fill is under way
 *     are kept and united with it (NC_FILLING).
 * Before a lookup trusts a set it reads whatever has arrived on the
 * subscription (one poll()).  What remains is the time an announcement takes
 * from the server to this host: a name another mounter created is seen here
 * once its announcement has arrived.  The kernel's negative entry cache
 * (--entry-cache, 1 s by default) already allows a longer window; with
 * dircache=0 in the URL every lookup asks the server.
 *
 * LOCKS: nc->mu protects everything below it in struct mr_names, including
 * the subscription context: the thread and lookups read it under the lock.
 * Only the thread dials, frees or replaces the context.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "keg/hash.h"
#include "keg/keg.h"
#include "keg/mem.h"
#include "meta_redis_names_i.h"
#define KEG_LOG_TAG "meta_redis"
#include "keg/log.h"

#define NC_PING_NS      (1000LL * 1000000)  /* a PING on the subscription every second */
#define NC_DEAD_NS      (3000LL * 1000000)  /* no reply for this long: the subscription is dead */
#define NC_POLL_MS      250                 /* the thread's longest sleep */
#define NC_RETRY_MS_MAX 1000                /* longest pause between subscribe attempts */
#define NC_DRAIN_MAX    64                  /* socket reads per drain */

enum nc_state { NC_FILLING, NC_VALID };

struct nc_name {
    struct nc_name *hnext;      /* hash chain */
    struct nc_name *dnext;      /* the directory's names */
    uint64_t        dir;
    uint32_t        hash;
    uint32_t        len;
    char            name[];
};

struct nc_dir {
    struct nc_dir  *hnext;      /* hash chain */
    struct nc_dir  *prev, *next;    /* LRU list, most recently used first */
    uint64_t        ino;
    uint64_t        ticket;     /* the fill under way (NC_FILLING) */
    enum nc_state   state;
    uint32_t        n;
    struct nc_name *names;
};

struct mr_names {
    /* set at creation, read-only afterwards */
    size_t            cap;
    uint32_t          dir_max;
    char             *channel;
    mr_names_dial_fn *dial;
    void             *dial_arg;
    const uint64_t   *addr_gen;
    pthread_t         thread;
    int               efd;          /* wakes the thread */
    int               stop;         /* atomic */

    pthread_mutex_t   mu;
    redisContext     *sub;          /* the subscription (NULL: none) */
    int               up;           /* subscribed, sets may be trusted */
    uint64_t          sub_gen;      /* *addr_gen of the subscription's address */
    int64_t           last_pong_ns; /* last reply of any kind on the subscription */
    int64_t           last_ping_ns;
    uint64_t          next_ticket;
    struct nc_dir   **dtab;
    size_t            dbuckets, ndirs;
    struct nc_name  **ntab;
    size_t            nbuckets, nnames;
    struct nc_dir    *lru_head, *lru_tail;
    struct keg_meta_name_cache st;
};

/*----------------------------------------------------------------------------
 * Sets (nc->mu held)
 *--------------------------------------------------------------------------*/

static uint32_t nc_hash(uint64_t dir, const char *s, size_t len)
{
    uint64_t h = keg_fnv1a64_update(KEG_FNV1A64_INIT ^ (dir * 0x9E3779B97F4A7C15ULL), s, len);
    return (uint32_t)(h ^ (h >> 32));
}

static size_t nc_dslot(const struct mr_names *nc, uint64_t ino)
{
    return (size_t)((ino * 0x9E3779B97F4A7C15ULL) >> 32) & (nc->dbuckets - 1);
}

static struct nc_dir *nc_dir_find(struct mr_names *nc, uint64_t ino)
{
    for (struct nc_dir *d = nc->dtab[nc_dslot(nc, ino)]; d; d = d->hnext)
        if (d->ino == ino)
            return d;
    return NULL;
}

static void nc_lru_unlink(struct mr_names *nc, struct nc_dir *d)
{
    if (d->prev)
        d->prev->next = d->next;
    else
        nc->lru_head = d->next;
    if (d->next)
        d->next->prev = d->prev;
    else
        nc->lru_tail = d->prev;
    d->prev = d->next = NULL;
}

static void nc_lru_front(struct mr_names *nc, struct nc_dir *d)
{
    if (nc->lru_head == d)
        return;
    if (d->prev || d->next || nc->lru_tail == d)
        nc_lru_unlink(nc, d);
    d->next = nc->lru_head;
    if (nc->lru_head)
        nc->lru_head->prev = d;
    nc->lru_head = d;
    if (!nc->lru_tail)
        nc->lru_tail = d;
}

/* Doubles a power-of-two table of chains; on no memory the old one stays. */
static void nc_grow_dirs(struct mr_names *nc)
{
    size_t nb = nc->dbuckets * 2;
    struct nc_dir **t = keg_calloc(nb, sizeof(*t));
    if (!t)
        return;
    struct nc_dir **old = nc->dtab;
    size_t ob = nc->dbuckets;
    nc->dtab = t;
    nc->dbuckets = nb;
    for (size_t i = 0; i < ob; i++) {
        for (struct nc_dir *d = old[i], *nx; d; d = nx) {
            nx = d->hnext;
            size_t s = nc_dslot(nc, d->ino);
            d->hnext = t[s];
            t[s] = d;
        }
    }
    keg_free(old);
}

static void nc_grow_names(struct mr_names *nc)
{
    size_t nb = nc->nbuckets * 2;
    struct nc_name **t = keg_calloc(nb, sizeof(*t));
    if (!t)
        return;
    struct nc_name **old = nc->ntab;
    size_t ob = nc->nbuckets;
    nc->ntab = t;
    nc->nbuckets = nb;
    for (size_t i = 0; i < ob; i++) {
        for (struct nc_name *e = old[i], *nx; e; e = nx) {
            nx = e->hnext;
            e->hnext = t[e->hash & (nb - 1)];
            t[e->hash & (nb - 1)] = e;
        }
    }
    keg_free(old);
}

static struct nc_dir *nc_dir_new(struct mr_names *nc, uint64_t ino)
{
    struct nc_dir *d = keg_calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->ino = ino;
    size_t s = nc_dslot(nc, ino);
    d->hnext = nc->dtab[s];
    nc->dtab[s] = d;
    nc_lru_front(nc, d);
    if (++nc->ndirs > nc->dbuckets)
        nc_grow_dirs(nc);
    return d;
}

static void nc_dir_free(struct mr_names *nc, struct nc_dir *d)
{
    for (struct nc_name *e = d->names, *nx; e; e = nx) {
        nx = e->dnext;
        struct nc_name **pp = &nc->ntab[e->hash & (nc->nbuckets - 1)];
        while (*pp != e)
            pp = &(*pp)->hnext;
        *pp = e->hnext;
        keg_free(e);
        nc->nnames--;
    }
    struct nc_dir **pp = &nc->dtab[nc_dslot(nc, d->ino)];
    while (*pp != d)
        pp = &(*pp)->hnext;
    *pp = d->hnext;
    nc_lru_unlink(nc, d);
    nc->ndirs--;
    keg_free(d);
}

static int nc_has(struct mr_names *nc, uint64_t dir, const char *name, size_t len,
                  uint32_t h)
{
    for (struct nc_name *e = nc->ntab[h & (nc->nbuckets - 1)]; e; e = e->hnext)
        if (e->hash == h && e->dir == dir && e->len == len && memcmp(e->name, name, len) == 0)
            return 1;
    return 0;
}

/* Evicts least recently used complete sets while more than cap names are held. */
static void nc_trim(struct mr_names *nc)
{
    for (struct nc_dir *d = nc->lru_tail, *pv; d && nc->nnames > nc->cap; d = pv) {
        pv = d->prev;
        if (d->state == NC_VALID)
            nc_dir_free(nc, d);
    }
}

/* Adds name to d's set.  Returns 0, or -1 when the set could not take it and
 * was dropped instead (d is freed then). */
static int nc_add(struct mr_names *nc, struct nc_dir *d, const char *name, size_t len)
{
    uint32_t h = nc_hash(d->ino, name, len);
    if (nc_has(nc, d->ino, name, len, h))
        return 0;
    struct nc_name *e = d->n < nc->dir_max ? keg_malloc(sizeof(*e) + len) : NULL;
    if (!e) {
        nc_dir_free(nc, d);
        return -1;
    }
    e->dir = d->ino;
    e->hash = h;
    e->len = (uint32_t)len;
    memcpy(e->name, name, len);
    e->hnext = nc->ntab[h & (nc->nbuckets - 1)];
    nc->ntab[h & (nc->nbuckets - 1)] = e;
    e->dnext = d->names;
    d->names = e;
    d->n++;
    if (++nc->nnames > nc->nbuckets)
        nc_grow_names(nc);
    return 0;
}

static void nc_drop_all(struct mr_names *nc)
{
    while (nc->lru_head)
        nc_dir_free(nc, nc->lru_head);
    nc->st.drops++;
}

/* The subscription can no longer be trusted: drop every set; the thread
 * closes the connection and subscribes again. */
static void nc_broken(struct mr_names *nc, const char *why)
{
    if (!nc->up)
        return;
    nc->up = 0;
    nc_drop_all(nc);
    KEG_INFO("directory name cache: subscription to %s lost (%s); cached names dropped",
             nc->channel, why);
    uint64_t one = 1;
    if (write(nc->efd, &one, sizeof(one)) < 0) {
        /* the thread also wakes within NC_POLL_MS */
    }
}

/*----------------------------------------------------------------------------
 * Subscription (nc->mu held, except nc_subscribe)
 *--------------------------------------------------------------------------*/

/* One reply read from the subscription: a message "DIR/NAME", a pong. */
static void nc_reply(struct mr_names *nc, const redisReply *r)
{
    nc->last_pong_ns = keg_mono_ns();
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(r->element[0]->str, "message") != 0 || r->elements < 3 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return;
    const char *s = r->element[2]->str;
    size_t n = r->element[2]->len;
    const char *slash = memchr(s, '/', n);
    if (!slash || slash == s)
        return;
    uint64_t dir = 0;
    for (const char *q = s; q < slash; q++) {
        if (*q < '0' || *q > '9')
            return;
        dir = dir * 10 + (uint64_t)(*q - '0');
    }
    struct nc_dir *d = nc_dir_find(nc, dir);
    size_t len = n - (size_t)(slash + 1 - s);
    if (d && len > 0)
        nc_add(nc, d, slash + 1, len);
}

/* Applies everything that has arrived on the subscription. */
static void nc_drain(struct mr_names *nc)
{
    redisContext *c = nc->sub;
    for (int i = 0; i < NC_DRAIN_MAX && nc->up; i++) {
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) != 1)
            break;
        if (redisBufferRead(c) != REDIS_OK) {
            nc_broken(nc, c->errstr[0] ? c->errstr : "connection closed");
            return;
        }
        for (;;) {
            void *r = NULL;
            if (redisGetReplyFromReader(c, &r) != REDIS_OK) {
                nc_broken(nc, c->errstr[0] ? c->errstr : "protocol error");
                return;
            }
            if (!r)
                break;
            nc_reply(nc, r);
            freeReplyObject(r);
        }
    }
}

/* Whether the sets may be trusted now (reads what has arrived first). */
static int nc_usable(struct mr_names *nc)
{
    if (!nc->up)
        return 0;
    nc_drain(nc);
    if (!nc->up)
        return 0;
    if (__atomic_load_n(nc->addr_gen, __ATOMIC_ACQUIRE) != nc->sub_gen)
        return 0;
    return keg_mono_ns() - nc->last_pong_ns < NC_DEAD_NS;
}

/* Dials and subscribes (without nc->mu), then publishes the connection. */
static int nc_subscribe(struct mr_names *nc)
{
    char why[256] = "";
    redisContext *c = NULL;
    uint64_t gen = 0;
    int rc = nc->dial(nc->dial_arg, &c, &gen, why, sizeof(why));
    if (rc) {
        KEG_DEBUG("directory name cache: cannot subscribe yet: %s", why);
        return rc;
    }
    redisReply *r = redisCommand(c, "SUBSCRIBE %s", nc->channel);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
             r->element[0]->type == REDIS_REPLY_STRING &&
             strcmp(r->element[0]->str, "subscribe") == 0;
    if (!ok) {
        KEG_WARN("directory name cache: SUBSCRIBE %s failed: %s", nc->channel,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        if (r)
            freeReplyObject(r);
        redisFree(c);
        return -EIO;
    }
    freeReplyObject(r);
    pthread_mutex_lock(&nc->mu);
    nc_drop_all(nc);        /* nothing cached from before may be trusted */
    nc->sub = c;
    nc->up = 1;
    nc->sub_gen = gen;
    nc->last_pong_ns = nc->last_ping_ns = keg_mono_ns();
    pthread_mutex_unlock(&nc->mu);
    KEG_DEBUG("directory name cache: subscribed to %s", nc->channel);
    return 0;
}

/* Sleeps up to ms, or until woken. */
static void nc_pause(struct mr_names *nc, int ms)
{
    struct pollfd pfd = {.fd = nc->efd, .events = POLLIN};
    if (poll(&pfd, 1, ms) == 1) {
        uint64_t v;
        if (read(nc->efd, &v, sizeof(v)) < 0) {
            /* nothing to clear */
        }
    }
}

static void *nc_main(void *arg)
{
    struct mr_names *nc = arg;
    int backoff = 50;
    keg_thread_name("keg-names");
    while (!__atomic_load_n(&nc->stop, __ATOMIC_ACQUIRE)) {
        if (!nc->sub) {
            if (nc_subscribe(nc)) {
                nc_pause(nc, backoff);
                backoff = KEG_MIN(backoff * 2, NC_RETRY_MS_MAX);
                continue;
            }
            backoff = 50;
        }
        struct pollfd pfd[2] = {{.fd = nc->sub->fd, .events = POLLIN},
                                {.fd = nc->efd, .events = POLLIN}};
        if (poll(pfd, 2, NC_POLL_MS) > 0 && pfd[1].revents) {
            uint64_t v;
            if (read(nc->efd, &v, sizeof(v)) < 0) {
                /* nothing to clear */
            }
        }
        pthread_mutex_lock(&nc->mu);
        if (nc->up)
            nc_drain(nc);
        if (nc->up) {
            int64_t now = keg_mono_ns();
            if (__atomic_load_n(nc->addr_gen, __ATOMIC_ACQUIRE) != nc->sub_gen) {
                nc_broken(nc, "the server's address changed");
            } else if (now - nc->last_pong_ns >= NC_DEAD_NS) {
                nc_broken(nc, "no reply to PING");
            } else if (now - nc->last_ping_ns >= NC_PING_NS) {
                int done = 0;
                nc->last_ping_ns = now;
                if (redisAppendCommand(nc->sub, "PING") != REDIS_OK) {
                    nc_broken(nc, "out of memory");
                } else {
                    while (!done && nc->up)
                        if (redisBufferWrite(nc->sub, &done) != REDIS_OK)
                            nc_broken(nc, nc->sub->errstr);
                }
            }
        }
        if (!nc->up) {
            redisFree(nc->sub);
            nc->sub = NULL;
        }
        pthread_mutex_unlock(&nc->mu);
    }
    return NULL;
}

/*----------------------------------------------------------------------------
 * Interface
 *--------------------------------------------------------------------------*/

struct mr_names *mr_names_new(size_t cap, const char *channel, mr_names_dial_fn *dial,
                              void *arg, const uint64_t *addr_gen)
{
    struct mr_names *nc = keg_calloc(1, sizeof(*nc));
    if (!nc)
        return NULL;
    nc->cap = cap;
    nc->dir_max = (uint32_t)KEG_MIN(cap, (size_t)MR_NAMES_DIR_MAX);
    nc->dial = dial;
    nc->dial_arg = arg;
    nc->addr_gen = addr_gen;
    nc->efd = -1;
    nc->dbuckets = 64;
    nc->nbuckets = 1024;
    nc->channel = keg_strdup(channel);
    nc->dtab = keg_calloc(nc->dbuckets, sizeof(*nc->dtab));
    nc->ntab = keg_calloc(nc->nbuckets, sizeof(*nc->ntab));
    nc->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!nc->channel || !nc->dtab || !nc->ntab || nc->efd < 0)
        goto fail;
    pthread_mutex_init(&nc->mu, NULL);
    if (pthread_create(&nc->thread, NULL, nc_main, nc) != 0) {
        pthread_mutex_destroy(&nc->mu);
        goto fail;
    }
    return nc;
fail:
    if (nc->efd >= 0)
        close(nc->efd);
    keg_free(nc->channel);
    keg_free(nc->dtab);
    keg_free(nc->ntab);
    keg_free(nc);
    return NULL;
}

void mr_names_free(struct mr_names *nc)
{
    if (!nc)
        return;
    uint64_t one = 1;
    __atomic_store_n(&nc->stop, 1, __ATOMIC_RELEASE);
    if (write(nc->efd, &one, sizeof(one)) < 0) {
        /* the thread also wakes within NC_POLL_MS */
    }
    pthread_join(nc->thread, NULL);
    pthread_mutex_lock(&nc->mu);
    while (nc->lru_head)
        nc_dir_free(nc, nc->lru_head);
    if (nc->sub)
        redisFree(nc->sub);
    pthread_mutex_unlock(&nc->mu);
    pthread_mutex_destroy(&nc->mu);
    close(nc->efd);
    keg_free(nc->channel);
    keg_free(nc->dtab);
    keg_free(nc->ntab);
    keg_free(nc);
}

int mr_names_lookup(struct mr_names *nc, uint64_t dir, const char *name, uint64_t *ticket,
                    uint32_t *want)
{
    int absent = 0;
    *ticket = 0;
    *want = 0;
    if (!nc)
        return 0;
    size_t len = strlen(name);
    pthread_mutex_lock(&nc->mu);
    if (nc_usable(nc)) {
        struct nc_dir *d = nc_dir_find(nc, dir);
        if (d && d->state == NC_VALID && !nc_has(nc, dir, name, len, nc_hash(dir, name, len))) {
            absent = 1;
            nc->st.answered++;
            nc_lru_front(nc, d);
        } else if (!d && (d = nc_dir_new(nc, dir)) != NULL) {
            d->state = NC_FILLING;
            d->ticket = ++nc->next_ticket;
            *ticket = d->ticket;
            *want = nc->dir_max;
        }
    }
    pthread_mutex_unlock(&nc->mu);
    return absent;
}

void mr_names_fill_end(struct mr_names *nc, uint64_t dir, uint64_t ticket,
                       const redisReply *names)
{
    if (!nc || !ticket)
        return;
    pthread_mutex_lock(&nc->mu);
    struct nc_dir *d = nc_dir_find(nc, dir);
    /* a drop since the fill began freed d (tickets are never reused) */
    if (d && d->state == NC_FILLING && d->ticket == ticket) {
        if (!names || names->type != REDIS_REPLY_ARRAY || !nc->up) {
            nc_dir_free(nc, d);
        } else {
            int ok = 1;
            for (size_t i = 0; ok && i < names->elements; i++) {
                const redisReply *e = names->element[i];
                if (e->type != REDIS_REPLY_STRING || e->len == 0) {
                    nc_dir_free(nc, d);
                    ok = 0;
                } else if (nc_add(nc, d, e->str, e->len)) {
                    ok = 0;
                }
            }
            if (ok) {
                d->state = NC_VALID;
                nc->st.fills++;
                nc_lru_front(nc, d);
                nc_trim(nc);
            }
        }
    }
    pthread_mutex_unlock(&nc->mu);
}

void mr_names_add(struct mr_names *nc, uint64_t dir, const char *name)
{
    if (!nc)
        return;
    pthread_mutex_lock(&nc->mu);
    struct nc_dir *d = nc_dir_find(nc, dir);
    if (d)
        nc_add(nc, d, name, strlen(name));
    pthread_mutex_unlock(&nc->mu);
}

void mr_names_get_stats(struct mr_names *nc, struct keg_meta_name_cache *st)
{
    memset(st, 0, sizeof(*st));
    if (!nc)
        return;
    pthread_mutex_lock(&nc->mu);
    *st = nc->st;
    st->names = nc->nnames;
    st->up = nc_usable(nc);
    pthread_mutex_unlock(&nc->mu);
}
