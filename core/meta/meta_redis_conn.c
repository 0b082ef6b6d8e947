/* meta_redis_conn.c -- the Redis engine's transport: dialling (TCP, unix socket,
 * through the sentinels), the pool of blocking hiredis contexts, and commands
 * with bounded retries and the busy-poll wait for replies.  The DESIGN of all
 * three is in meta_redis.c (Connections, Latency, Retries).
 *
 * LOCKS: p->lock protects the idle pool, the open-context count and the
 * current master address; it is never held across network I/O.
 */
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "keg/keg.h"
#include "keg/mem.h"
#include "keg/retry.h"
#include "meta_redis_conn_i.h"
#define KEG_LOG_TAG "meta_redis"
#include "keg/log.h"

void mr_addr(struct mr_priv *p, char *buf, size_t len)
{
    pthread_mutex_lock(&p->lock);
    snprintf(buf, len, "%s", p->addr);
    pthread_mutex_unlock(&p->lock);
}

/* Records the address being dialled; returns its generation, which changes
 * whenever the address does (a failover: the name cache drops its sets). */
static uint64_t mr_set_addr(struct mr_priv *p, const char *host, int port, const char *sock)
{
    char a[sizeof(p->addr)];
    if (sock)
        snprintf(a, sizeof(a), "unix:%s", sock);
    else if (strchr(host, ':'))
        snprintf(a, sizeof(a), "[%s]:%d", host, port);
    else
        snprintf(a, sizeof(a), "%s:%d", host, port);
    pthread_mutex_lock(&p->lock);
    if (strcmp(a, p->addr) != 0) {
        memcpy(p->addr, a, sizeof(a));
        __atomic_add_fetch(&p->addr_gen, 1, __ATOMIC_RELEASE);
    }
    uint64_t gen = p->addr_gen;
    pthread_mutex_unlock(&p->lock);
    return gen;
}

/* 1 when a line of kind k may be logged now (then *suppressed = lines dropped
 * since the previous one, which the line should mention), 0 to drop it.
 * LOCKS: takes p->lock. */
int mr_log_ok(struct mr_priv *p, enum mr_lim k, uint32_t *suppressed)
{
    int64_t now = keg_mono_ns();
    int ok = 0;
    pthread_mutex_lock(&p->lock);
    struct mr_ratelim *l = &p->lim[k];
    if (l->last_ns == 0 || now - l->last_ns >= MR_LOG_EVERY_NS) {
        *suppressed = l->suppressed;
        l->suppressed = 0;
        l->last_ns = now;
        ok = 1;
    } else {
        l->suppressed++;
    }
    pthread_mutex_unlock(&p->lock);
    return ok;
}

static struct timeval mr_tv(int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

/*----------------------------------------------------------------------------
 * Dialling
 *--------------------------------------------------------------------------*/

/* -ECONNREFUSED for a refused connection, else -EIO. */
static int mr_dial_err(const redisContext *c)
{
    if (c->err == REDIS_ERR_IO && strstr(c->errstr, "refused"))
        return -ECONNREFUSED;
    return -EIO;
}

/* Connects to one server and authenticates.  *why gets a static-or-context
 * reason on failure (copied into whybuf).
 * OWNERSHIP: returns a context the caller frees with redisFree(), or NULL. */
static redisContext *mr_dial(const char *host, int port, const char *sock, const char *user,
                             const char *password, int *rc, char *whybuf, size_t whylen)
{
    redisContext *c = sock ? redisConnectUnixWithTimeout(sock, mr_tv(MR_CONNECT_MS))
                           : redisConnectWithTimeout(host, port, mr_tv(MR_CONNECT_MS));
    *rc = 0;
    if (!c) {
        *rc = -ENOMEM;
        snprintf(whybuf, whylen, "out of memory");
        return NULL;
    }
    if (c->err) {
        *rc = mr_dial_err(c);
        snprintf(whybuf, whylen, "%s", c->errstr);
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, mr_tv(MR_COMMAND_MS));
    if (!sock)
        redisEnableKeepAlive(c);
    if (password && *password) {
        redisReply *r = (user && *user) ? redisCommand(c, "AUTH %s %s", user, password)
                                        : redisCommand(c, "AUTH %s", password);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            /* the server's message never contains the password */
            snprintf(whybuf, whylen, "authentication failed: %s",
                     r ? r->str : c->errstr);
            *rc = r ? -EACCES : -EIO;
            if (r)
                freeReplyObject(r);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

/* Asks the sentinels for the master's address.  Returns 0 or -errno. */
static int mr_sentinel_master(struct mr_priv *p, char *host, size_t hlen, int *port,
                              char *why, size_t whylen)
{
    int rc = -EIO;
    pthread_mutex_lock(&p->lock);
    int first = p->good_sentinel;
    pthread_mutex_unlock(&p->lock);
    for (int k = 0; k < p->nsentinels; k++) {
        int i = (first + k) % p->nsentinels;
        char sh[256];
        int sport = 26379;
        const char *s = p->sentinels[i];
        const char *colon = strrchr(s, ':');
        size_t n = colon ? (size_t)(colon - s) : strlen(s);
        if (n >= sizeof(sh))
            continue;
        memcpy(sh, s, n);
        sh[n] = '\0';
        if (colon)
            sport = (int)strtol(colon + 1, NULL, 10);
        redisContext *c = mr_dial(sh, sport, NULL, NULL, NULL, &rc, why, whylen);
        if (!c) {
            KEG_WARN("sentinel %s: %s", s, why);
            continue;
        }
        if (p->password[0]) {
            /* sentinels may or may not require the password: try it */
            redisReply *a = redisCommand(c, "AUTH %s", p->password);
            if (a)
                freeReplyObject(a);
        }
        redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", p->master);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len < hlen) {
            snprintf(host, hlen, "%s", r->element[0]->str);
            *port = (int)strtol(r->element[1]->str ? r->element[1]->str : "0", NULL, 10);
            freeReplyObject(r);
            redisFree(c);
            pthread_mutex_lock(&p->lock);
            p->good_sentinel = i;
            pthread_mutex_unlock(&p->lock);
            return 0;
        }
        snprintf(why, whylen, "sentinel %s does not know master '%s'%s%s", s, p->master,
                 r && r->type == REDIS_REPLY_ERROR ? ": " : "",
                 r && r->type == REDIS_REPLY_ERROR ? r->str : "");
        KEG_WARN("%s", why);
        rc = -EIO;
        if (r)
            freeReplyObject(r);
        redisFree(c);
    }
    return rc;
}

/* Opens a new context to the (current) master, authenticated, db selected.
 * OWNERSHIP: *out is freed with redisFree().  Returns 0 or -errno. */
int mr_connect(struct mr_priv *p, redisContext **out, uint64_t *gen, char *why,
               size_t whylen)
{
    char host[256];
    int port = p->port, rc;
    *out = NULL;
    if (p->kind == MR_SENTINEL) {
        rc = mr_sentinel_master(p, host, sizeof(host), &port, why, whylen);
        if (rc)
            return rc;
    } else if (p->kind == MR_TCP) {
        snprintf(host, sizeof(host), "%s", p->host);
    }
    uint64_t g = mr_set_addr(p, host, port, p->kind == MR_UNIX ? p->sock : NULL);
    if (gen)
        *gen = g;
    redisContext *c = mr_dial(host, port, p->kind == MR_UNIX ? p->sock : NULL, p->user,
                              p->password, &rc, why, whylen);
    if (!c)
        return rc;
    if (p->db) {
        redisReply *r = redisCommand(c, "SELECT %d", p->db);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            snprintf(why, whylen, "SELECT %d failed: %s", p->db, r ? r->str : c->errstr);
            rc = r ? -EINVAL : -EIO;
            goto fail;
        }
        freeReplyObject(r);
    }
    /* "kegfs-NS" in CLIENT LIST shows which volume a connection serves */
    redisReply *nr = redisCommand(c, "CLIENT SETNAME kegfs-%b", p->prefix + 1,
                                  strlen(p->prefix) - 2);
    if (!nr) {
        snprintf(why, whylen, "%s", c->errstr);
        rc = -EIO;
        goto fail;
    }
    freeReplyObject(nr);
    if (p->kind == MR_SENTINEL) {
        redisReply *r = redisCommand(c, "ROLE");
        int master = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                     r->element[0]->type == REDIS_REPLY_STRING &&
                     strcmp(r->element[0]->str, "master") == 0;
        if (r)
            freeReplyObject(r);
        if (!master) {
            snprintf(why, whylen, "the server named by the sentinels is not a master (yet)");
            rc = -EAGAIN;
            redisFree(c);
            return rc;
        }
    }
    *out = c;
    return 0;
fail:
    redisFree(c);
    return rc;
}

/*----------------------------------------------------------------------------
 * Pool
 *--------------------------------------------------------------------------*/

/* 1 if an idle context still looks usable: nothing may be readable on it
 * (a server that closed it makes it readable with EOF). */
static int mr_alive(redisContext *c)
{
    if (c->err)
        return 0;
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    int n = poll(&pfd, 1, 0);
    return n == 0;
}

/* Takes a context from the pool or dials a new one.
 * OWNERSHIP: give it back with mr_put().  Returns 0 or -errno (*why set).
 * LOCKS: takes p->lock (not across dialling). */
int mr_get(struct mr_priv *p, redisContext **out, char *why, size_t whylen)
{
    redisContext *c = NULL;
    *out = NULL;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (p->nidle > 0) {
            c = p->idle[--p->nidle];
            if (mr_alive(c))
                break;
            redisFree(c);
            c = NULL;
            p->nopen--;
            continue;
        }
        if (p->nopen < MR_POOL_MAX) {
            p->nopen++;
            break;
        }
        pthread_cond_wait(&p->cond, &p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    if (c) {
        *out = c;
        return 0;
    }
    int rc = mr_connect(p, &c, NULL, why, whylen);
    if (rc) {
        pthread_mutex_lock(&p->lock);
        p->nopen--;
        pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->lock);
        return rc;
    }
    *out = c;
    return 0;
}

/* TAKES: c.  broken: the context failed and is closed instead of pooled. */
void mr_put(struct mr_priv *p, redisContext *c, int broken)
{
    if (broken || c->err) {
        redisFree(c);
        pthread_mutex_lock(&p->lock);
        p->nopen--;
    } else {
        pthread_mutex_lock(&p->lock);
        KEG_ASSERT(p->nidle < MR_POOL_MAX);
        p->idle[p->nidle++] = c;
    }
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/*----------------------------------------------------------------------------
 * Commands
 *--------------------------------------------------------------------------*/

/* Error replies after which the command certainly did not run. */
static int mr_err_transient(const redisReply *r)
{
    static const char *const pfx[] = {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "READONLY",
                                      "CLUSTERDOWN", NULL};
    for (int i = 0; pfx[i]; i++)
        if (strncmp(r->str, pfx[i], strlen(pfx[i])) == 0)
            return 1;
    return 0;
}

/* Busy-polls c's socket for up to p->spin_us microseconds, until the reply
 * (or EOF, or an error) is readable, so that the caller's read finds it at
 * once instead of sleeping in read() and paying the wake-up of an idle vCPU
 * (docs/redis.md, spin=).  It only peeks: whatever it sees is left for
 * redisGetReply, which keeps every timeout and error path of a plain read.
 * Between peeks it yields the CPU, so that a Redis server (or anything else)
 * waiting for this CPU runs at once.  Returns 1 if it spun, 0 if it could not
 * get one of the p->spin_slots spinner slots (then the caller just blocks). */
static int mr_spin(struct mr_priv *p, redisContext *c)
{
    if (__atomic_add_fetch(&p->spinners, 1, __ATOMIC_ACQ_REL) > p->spin_slots) {
        __atomic_sub_fetch(&p->spinners, 1, __ATOMIC_ACQ_REL);
        return 0;
    }
    int64_t end = keg_mono_ns() + (int64_t)p->spin_us * 1000;
    for (;;) {
        char b;
        ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            break;      /* data, EOF or an error: redisGetReply handles each */
        sched_yield();
        if (keg_mono_ns() >= end)
            break;
    }
    __atomic_sub_fetch(&p->spinners, 1, __ATOMIC_ACQ_REL);
    return 1;
}

/* Whether to spin for this reply.  Spinning wins when idle vCPUs halt (a
 * blocked reader pays the wake-up) and loses when the CPUs are busy anyway
 * (the spinner competes with the server for a CPU), so both ways are timed:
 * the way that had the lower average wait is used, and every MR_SPIN_PROBE-th
 * call tries the other one to keep its average current.  The averages are
 * updated without locks; a lost update only delays the choice. */
static int mr_spin_choose(struct mr_priv *p)
{
    if (p->spin_us <= 0)
        return 0;
    uint32_t n = __atomic_fetch_add(&p->spin_calls, 1, __ATOMIC_RELAXED);
    int64_t ws = __atomic_load_n(&p->wait_ns[1], __ATOMIC_RELAXED);
    int64_t wb = __atomic_load_n(&p->wait_ns[0], __ATOMIC_RELAXED);
    int spin = ws <= wb;
    return n % MR_SPIN_PROBE == 0 ? !spin : spin;
}

/* Adds one reply wait (ns, capped: a slow script says nothing about wake-ups)
 * to the average of its way (1: spun, 0: blocked). */
static void mr_spin_note(struct mr_priv *p, int spun, int64_t ns)
{
    int64_t cap = 1000000;
    int64_t old = __atomic_load_n(&p->wait_ns[spun], __ATOMIC_RELAXED);
    int64_t x = ns < cap ? ns : cap;
    __atomic_store_n(&p->wait_ns[spun], old + (x - old) / 8, __ATOMIC_RELAXED);
}

/* Sends one command and reads its reply.  *sent = 1 once the whole request
 * went out (from then on the server may have run it). */
static int mr_roundtrip(struct mr_priv *p, redisContext *c, int argc, const char **argv,
                        const size_t *lens, redisReply **out, int *sent, char *why,
                        size_t whylen)
{
    int done = 0;
    void *r = NULL;
    *sent = 0;
    *out = NULL;
    if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK) {
        snprintf(why, whylen, "%s", c->err ? c->errstr : "out of memory");
        return c->err ? -EIO : -ENOMEM;
    }
    while (!done) {
        if (redisBufferWrite(c, &done) != REDIS_OK) {
            snprintf(why, whylen, "send: %s", c->errstr);
            return -EIO;
        }
    }
    *sent = 1;
    int64_t t0 = 0;
    int spun = -1;
    if (mr_spin_choose(p)) {
        t0 = keg_mono_ns();
        spun = mr_spin(p, c);
    } else if (p->spin_us > 0) {
        t0 = keg_mono_ns();
        spun = 0;
    }
    if (redisGetReply(c, &r) != REDIS_OK || !r) {
        snprintf(why, whylen, "reply: %s", c->err ? c->errstr : "none");
        return -EIO;
    }
    if (spun >= 0)
        mr_spin_note(p, spun, keg_mono_ns() - t0);
    *out = r;
    return 0;
}

/* Runs one command with bounded retries (see DESIGN).  idem: may be repeated
 * when the reply was lost.  Error replies other than the transient ones are
 * returned to the caller as replies.
 * OWNERSHIP: caller frees *out with freeReplyObject().  Returns 0 or -errno. */
int mr_exec(struct mr_priv *p, int argc, const char **argv, const size_t *lens, int idem,
            const char *what, redisReply **out)
{
    int64_t deadline = keg_mono_ns() + (int64_t)MR_RETRY_MS * 1000000;
    int backoff = 10, rc;
    char why[256] = "";
    *out = NULL;
    for (;;) {
        redisContext *c;
        redisReply *r = NULL;
        int sent = 0;
        rc = mr_get(p, &c, why, sizeof(why));
        if (rc == 0) {
            rc = mr_roundtrip(p, c, argc, argv, lens, &r, &sent, why, sizeof(why));
            if (rc == 0 && r->type == REDIS_REPLY_ERROR && mr_err_transient(r)) {
                snprintf(why, sizeof(why), "%s", r->str);
                /* a replica after failover answers READONLY: re-ask the sentinels */
                mr_put(p, c, strncmp(r->str, "READONLY", 8) == 0);
                freeReplyObject(r);
                rc = -EAGAIN;
                sent = 0;
            } else if (rc == 0) {
                mr_put(p, c, 0);
                *out = r;
                return 0;
            } else {
                mr_put(p, c, 1);
                if (rc == -ENOMEM)
                    return rc;
                if (sent && !idem) {
                    char addr[300];
                    mr_addr(p, addr, sizeof(addr));
                    KEG_ERR("%s: redis %s: %s; not repeated (it may or may not have been "
                            "applied)", what, addr, why);
                    return -EIO;
                }
            }
        } else if (rc == -EACCES || rc == -EINVAL || rc == -ENOMEM) {
            char addr[300];
            mr_addr(p, addr, sizeof(addr));
            KEG_ERR("%s: redis %s: %s", what, addr, why);
            return rc;
        }
        if (keg_mono_ns() + (int64_t)backoff * 1000000 > deadline) {
            char addr[300];
            mr_addr(p, addr, sizeof(addr));
            KEG_ERR("%s: redis %s unavailable for %d s: %s", what, addr, MR_RETRY_MS / 1000,
                    why);
            return -EIO;
        }
        KEG_DEBUG("%s: %s; retrying in %d ms", what, why, backoff);
        keg_sleep_ms((uint64_t)backoff);
        backoff = (int)keg_backoff_ms(1, (uint64_t)backoff, 500);
    }
}
