/* test_meta_redis.c -- Redis-engine specific tests (the shared semantics are in
 * test_meta_contract.c).
 *
 * URL errors that are caught before connecting and the unreachable-server
 * error always run.  Everything else needs a live redis-server: set env
 * KEG_TEST_REDIS_URL (e.g. redis://127.0.0.1:6390, started by
 * scripts/redis-server.sh); without it those tests are skipped.  The tests
 * change server settings (maxmemory, maxmemory-policy, requirepass) with
 * CONFIG SET and restore them, so use a throw-away server.
 * KEG_TEST_REDIS_INODES (default 100000) sets the size of the memory test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "keg/log.h"
#include "keg/mem.h"
#include "keg/meta.h"
#include "keg/url.h"
#include "meta/meta_redis_i.h"

/*----------------------------------------------------------------------------
 * Helpers
 *--------------------------------------------------------------------------*/

static char g_host[256];
static int g_port;
static int g_live;
static int g_seq;

/* Captured log lines (the sink is process-wide). */
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_log[16384];

static void capture_sink(void *arg, int level, const char *tag, const char *fmt, va_list ap)
{
    char line[1024];
    (void)arg;
    (void)level;
    vsnprintf(line, sizeof(line), fmt, ap);
    pthread_mutex_lock(&g_log_lock);
    size_t o = strlen(g_log);
    snprintf(g_log + o, sizeof(g_log) - o, "[%s] %s\n", tag, line);
    pthread_mutex_unlock(&g_log_lock);
}

static void log_reset(void)
{
    pthread_mutex_lock(&g_log_lock);
    g_log[0] = '\0';
    pthread_mutex_unlock(&g_log_lock);
}

static int log_has(const char *s)
{
    pthread_mutex_lock(&g_log_lock);
    int r = strstr(g_log, s) != NULL;
    pthread_mutex_unlock(&g_log_lock);
    return r;
}

static int log_count(const char *s)
{
    int n = 0;
    pthread_mutex_lock(&g_log_lock);
    for (const char *q = strstr(g_log, s); q; q = strstr(q + 1, s))
        n++;
    pthread_mutex_unlock(&g_log_lock);
    return n;
}

static void need_live(void)
{
    if (!g_live) {
        fprintf(stderr, "  (KEG_TEST_REDIS_URL unset: skipped)\n");
        skip();
    }
}

static void token(char *buf, size_t len)
{
    snprintf(buf, len, "tr%dx%d", (int)getpid(), ++g_seq);
}

static void url_for(char *buf, size_t len, int db, const char *ns)
{
    snprintf(buf, len, "redis://%s:%d/%d?ns=%s", g_host, g_port, db, ns);
}

/* An admin connection of the test itself. */
static redisContext *admin(void)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(g_host, g_port, tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    return c;
}

static void cmd_ok(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "redis: %s\n", r->str);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}

static void fill_format(struct keg_format *f)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "redis-test");
    snprintf(f->storage, sizeof(f->storage), "mem");
    snprintf(f->compress, sizeof(f->compress), "none");
    f->block_size = 4u << 20;
}

/* Opens and formats a fresh volume in db/ns. */
static struct keg_meta *open_vol(int db, const char *ns)
{
    char url[512];
    struct keg_meta *m = NULL;
    struct keg_format f;
    url_for(url, sizeof(url), db, ns);
    assert_int_equal(keg_meta_open(url, &m), 0);
    fill_format(&f);
    assert_int_equal(keg_meta_format_init(m, &f, 0755, 0, 0, 0), 0);
    return m;
}

static void close_vol(struct keg_meta *m)
{
    keg_meta_session_end(m);
    assert_int_equal(keg_meta_destroy(m), 0);
    keg_meta_close(m);
}

static uint64_t new_ino(struct keg_meta *m)
{
    uint64_t ino = 0;
    assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_INODE, 1, &ino), 0);
    return ino;
}

static int mkfile(struct keg_meta *m, uint64_t parent, const char *name, struct keg_attr *out)
{
    return keg_meta_mknod(m, parent, name, new_ino(m), S_IFREG | 0644, 0, 0, 0, NULL, out);
}

static uint64_t mkdir_(struct keg_meta *m, uint64_t parent, const char *name)
{
    struct keg_attr a;
    assert_int_equal(keg_meta_mknod(m, parent, name, new_ino(m), S_IFDIR | 0755, 0, 0, 0,
                                    NULL, &a), 0);
    return a.ino;
}

/* used_memory from INFO memory. */
static long long used_memory(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO memory");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    const char *s = strstr(r->str, "used_memory:");
    assert_non_null(s);
    long long v = strtoll(s + strlen("used_memory:"), NULL, 10);
    freeReplyObject(r);
    return v;
}

/*----------------------------------------------------------------------------
 * Tests without a server
 *--------------------------------------------------------------------------*/

static void test_url_errors(void **state)
{
    struct keg_meta *m = (struct keg_meta *)0x1;
    static const char *const bad[] = {
        "rediss://127.0.0.1:1/0",                        /* no TLS in this hiredis */
        "redis://127.0.0.1:1/notanumber",                /* db must be a number */
        "redis://127.0.0.1:1/0?ns=bad{ns}",              /* would break the hash tag */
        "redis://127.0.0.1:1/0?ns=",                     /* empty namespace */
        "redis://127.0.0.1:1/0?db=x",
        "redis:///0",                                    /* no host */
        "unix://relative.sock",                          /* socket path must be absolute */
        "redis+sentinel://127.0.0.1:1",                  /* no master name */
        "redis+sentinel://:pw@127.0.0.1:1,127.0.0.1:2/", /* no master name */
        "redis://127.0.0.1:1/7?nss=vol",                 /* misspelt ns: not the default ns */
        "redis://127.0.0.1:1/7?ns=vol&tiemout=5",        /* any unknown parameter */
        "redis://127.0.0.1:1/7?=vol",                    /* a parameter without a name */
        "unix:///tmp/x.sock?nss=vol",
        "redis+sentinel://127.0.0.1:1/mymaster?nss=vol",
        "redis://:@@127.0.0.1:1/6",                      /* which '@' ends the password? */
        NULL,
    };
    (void)state;
    for (int i = 0; bad[i]; i++) {
        log_reset();
        m = (struct keg_meta *)0x1;
        assert_int_equal(keg_meta_open(bad[i], &m), -EINVAL);
        assert_null(m);
    }
    log_reset();
    assert_int_equal(keg_meta_open("redis://127.0.0.1:1/7?nss=vol", &m), -EINVAL);
    assert_true(log_has("unknown parameter 'nss'"));
    log_reset();
    assert_int_equal(keg_meta_open("redis://:@@127.0.0.1:1/6", &m), -EINVAL);
    assert_true(log_has("%40"));
    log_reset();
    assert_int_equal(keg_meta_open("rediss://:pw@127.0.0.1:1/0", &m), -EINVAL);
    assert_true(log_has("rediss:// needs hiredis with TLS; use stunnel"));
    assert_false(log_has("pw@"));
    /* every scheme of the engine is registered */
    const struct keg_meta_ops *ops = keg_meta_find("redis");
    assert_non_null(ops);
    assert_ptr_equal(keg_meta_find("rediss"), ops);
    assert_ptr_equal(keg_meta_find("unix"), ops);
    assert_ptr_equal(keg_meta_find("redis+sentinel"), ops);
    assert_true(ops->caps & KEG_META_CAP_SHARED);
}

static void test_unreachable(void **state)
{
    struct keg_meta *m = (struct keg_meta *)0x1;
    (void)state;
    /* port 1 on loopback: nothing listens there */
    log_reset();
    int rc = keg_meta_open("redis://:topsecret@127.0.0.1:1/0?ns=x", &m);
    assert_true(rc == -ECONNREFUSED || rc == -EIO);
    assert_null(m);
    assert_true(log_has("127.0.0.1:1"));
    assert_false(log_has("topsecret"));
    log_reset();
    rc = keg_meta_open("unix:///nonexistent/redis.sock?ns=x", &m);
    assert_true(rc == -ECONNREFUSED || rc == -EIO || rc == -ENOENT);
    assert_true(log_has("/nonexistent/redis.sock"));
    log_reset();
    rc = keg_meta_open("redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster?ns=x", &m);
    assert_true(rc == -ECONNREFUSED || rc == -EIO);
    assert_true(log_has("mymaster"));
}

/*----------------------------------------------------------------------------
 * Tests with a live server
 *--------------------------------------------------------------------------*/

/* db in the path, ns in the query, unix socket, password: each lands where named. */
static void test_url_forms(void **state)
{
    char ns[64], url[512];
    struct keg_meta *m;
    struct keg_format f;
    (void)state;
    need_live();
    redisContext *c = admin();

    /* /7 selects db 7; every key is prefixed with {ns} */
    token(ns, sizeof(ns));
    m = open_vol(7, ns);
    cmd_ok(c, "SELECT 7");
    redisReply *r = redisCommand(c, "EXISTS {%s}setting", ns);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    cmd_ok(c, "SELECT 0");
    r = redisCommand(c, "EXISTS {%s}setting", ns);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    close_vol(m);

    /* default namespace "kegfs" (db 9 so that nothing else is touched) */
    snprintf(url, sizeof(url), "redis://%s:%d/9", g_host, g_port);
    assert_int_equal(keg_meta_open(url, &m), 0);
    fill_format(&f);
    assert_int_equal(keg_meta_format_init(m, &f, 0755, 0, 0, 0), 0);
    cmd_ok(c, "SELECT 9");
    r = redisCommand(c, "EXISTS {kegfs}setting");
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    close_vol(m);

    /* unix socket with ?db=&ns= (if the server has one) */
    r = redisCommand(c, "CONFIG GET unixsocket");
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->len > 0) {
        token(ns, sizeof(ns));
        snprintf(url, sizeof(url), "unix://%s?db=4&ns=%s", r->element[1]->str, ns);
        assert_int_equal(keg_meta_open(url, &m), 0);
        assert_int_equal(keg_meta_format_init(m, &f, 0755, 0, 0, 0), 0);
        cmd_ok(c, "SELECT 4");
        redisReply *e = redisCommand(c, "EXISTS {%s}setting", ns);
        assert_int_equal(e->integer, 1);
        freeReplyObject(e);
        close_vol(m);
    }
    if (r)
        freeReplyObject(r);

    /* password: right one works, wrong one is -EACCES, neither is logged */
    cmd_ok(c, "CONFIG SET requirepass pw%d", (int)getpid());
    token(ns, sizeof(ns));
    snprintf(url, sizeof(url), "redis://:pw%d@%s:%d/0?ns=%s", (int)getpid(), g_host, g_port, ns);
    log_reset();
    assert_int_equal(keg_meta_open(url, &m), 0);
    assert_int_equal(keg_meta_format_init(m, &f, 0755, 0, 0, 0), 0);
    close_vol(m);
    snprintf(url, sizeof(url), "redis://:wrongpw@%s:%d/0?ns=%s", g_host, g_port, ns);
    assert_int_equal(keg_meta_open(url, &m), -EACCES);
    char pw[32];
    snprintf(pw, sizeof(pw), "pw%d", (int)getpid());
    assert_false(log_has(pw));
    assert_false(log_has("wrongpw"));
    cmd_ok(c, "CONFIG SET requirepass %s", "");
    redisFree(c);
}

/* spin= (busy-poll for a reply): accepted on every URL form, 0 turns it off,
 * a bad value is refused with a message naming the parameter; ops work with
 * and without it. */
static void test_url_spin(void **state)
{
    char ns[64], url[512];
    struct keg_meta *m = (struct keg_meta *)0x1;
    struct keg_attr a;
    (void)state;
    static const char *const bad[] = {
        "redis://127.0.0.1:1/0?spin=",
        "redis://127.0.0.1:1/0?spin=abc",
        "redis://127.0.0.1:1/0?spin=-1",
        "redis://127.0.0.1:1/0?ns=x&spin=10001",
        "redis://127.0.0.1:1/0?spin=5us",
        "unix:///tmp/x.sock?spin=1e3",
        "redis+sentinel://127.0.0.1:1/mymaster?spin=x",
        NULL,
    };
    for (int i = 0; bad[i]; i++) {
        log_reset();
        m = (struct keg_meta *)0x1;
        assert_int_equal(keg_meta_open(bad[i], &m), -EINVAL);
        assert_null(m);
        assert_true(log_has("spin must be a number of microseconds 0-10000"));
    }
    need_live();
    static const char *const good[] = {"0", "200", "50", NULL};
    for (int i = 0; good[i]; i++) {
        token(ns, sizeof(ns));
        snprintf(url, sizeof(url), "redis://%s:%d/0?ns=%s&spin=%s", g_host, g_port, ns,
                 good[i]);
        log_reset();
        keg_log_set_level(LOG_DEBUG);
        assert_int_equal(keg_meta_open(url, &m), 0);
        keg_log_set_level(LOG_INFO);
        char want[64];
        snprintf(want, sizeof(want), "reply busy-poll %s us", good[i]);
        assert_true(log_has(want));
        struct keg_format f;
        fill_format(&f);
        assert_int_equal(keg_meta_format_init(m, &f, 0755, 0, 0, 0), 0);
        /* enough round trips for both ways of waiting to be taken and timed */
        for (int k = 0; k < 40; k++) {
            char name[32];
            snprintf(name, sizeof(name), "f%d", k);
            assert_int_equal(mkfile(m, KEG_ROOT_INO, name, &a), 0);
            assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, name, &a), 0);
        }
        close_vol(m);
    }
    /* the default is 50 us */
    token(ns, sizeof(ns));
    url_for(url, sizeof(url), 0, ns);
    log_reset();
    keg_log_set_level(LOG_DEBUG);
    assert_int_equal(keg_meta_open(url, &m), 0);
    keg_log_set_level(LOG_INFO);
    assert_true(log_has("reply busy-poll 50 us"));
    keg_meta_close(m);
}

/*----------------------------------------------------------------------------
 * Directory name cache (meta_redis_names.c)
 *--------------------------------------------------------------------------*/

/* Opens a second instance of volume ns and begins a session on it. */
static struct keg_meta *open_session(const char *ns, const char *query)
{
    char url[512];
    struct keg_meta *m = NULL;
    uint64_t sid;
    url_for(url, sizeof(url), 0, ns);
    if (query) {
        size_t o = strlen(url);
        snprintf(url + o, sizeof(url) - o, "&%s", query);
    }
    assert_int_equal(keg_meta_open(url, &m), 0);
    assert_int_equal(keg_meta_session_begin(m, "names-test", &sid), 0);
    return m;
}

static void close_session(struct keg_meta *m)
{
    assert_int_equal(keg_meta_session_end(m), 0);
    keg_meta_close(m);
}

static struct keg_meta_name_cache names_stats(struct keg_meta *m)
{
    struct keg_meta_name_cache st;
    assert_int_equal(keg_meta_name_cache_stats(m, &st), 0);
    return st;
}

/* Waits (at most 5 s) until m's name cache is subscribed. */
static void names_wait_up(struct keg_meta *m)
{
    for (int i = 0; i < 500; i++) {
        if (names_stats(m).up)
            return;
        usleep(10000);
    }
    fail_msg("the name cache did not subscribe within 5 s");
}

static int lookup_rc(struct keg_meta *m, uint64_t dir, const char *name)
{
    struct keg_attr a;
    return keg_meta_lookup(m, dir, name, &a);
}

/* The other instance sees a change once its announcement has arrived:
 * returns how many extra tries that took (fails after 2 s). */
static int lookup_until(struct keg_meta *m, uint64_t dir, const char *name, int want)
{
    for (int i = 0; i < 2000; i++) {
        if (lookup_rc(m, dir, name) == want)
            return i;
        usleep(1000);
    }
    fail_msg("lookup of %s in %" PRIu64 " did not become %d within 2 s", name, dir, want);
    return -1;
}

/* Two sessions on one volume change three directories at random (create,
 * unlink, rename, link, exchange); after every op, the instance that did it
 * sees exactly the model at once, and the other one converges to it.  Both
 * answered lookups from their caches, so the cache was on trial. */
static void test_names_model(void **state)
{
    char ns[64];
    struct keg_attr a;
    struct keg_unlinked g;
    enum { NDIR = 3, NNAME = 16, OPS = 1500 };
    (void)state;
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *fmt = open_vol(0, ns);
    struct keg_meta *m[2] = {open_session(ns, NULL), open_session(ns, NULL)};
    names_wait_up(m[0]);
    names_wait_up(m[1]);
    uint64_t dirs[NDIR] = {KEG_ROOT_INO, mkdir_(m[0], KEG_ROOT_INO, "d1"),
                           mkdir_(m[1], KEG_ROOT_INO, "d2")};
    uint64_t ino[NDIR][NNAME] = {{0}};     /* 0: no such name */
    unsigned seed = 12345;
    int late = 0;
    for (int op = 0; op < OPS; op++) {
        int who = rand_r(&seed) % 2, kind = rand_r(&seed) % 5;
        int d = rand_r(&seed) % NDIR, k = rand_r(&seed) % NNAME;
        int d2 = rand_r(&seed) % NDIR, k2 = rand_r(&seed) % NNAME;
        char n1[16], n2[16];
        snprintf(n1, sizeof(n1), "n%d", k);
        snprintf(n2, sizeof(n2), "n%d", k2);
        struct keg_meta *e = m[who];
        int same = d == d2 && k == k2;
        switch (kind) {
        case 0:
            if (ino[d][k]) {
                assert_int_equal(mkfile(e, dirs[d], n1, &a), -EEXIST);
            } else {
                assert_int_equal(mkfile(e, dirs[d], n1, &a), 0);
                ino[d][k] = a.ino;
            }
            break;
        case 1:
            assert_int_equal(keg_meta_unlink(e, dirs[d], n1, &g),
                             ino[d][k] ? 0 : -ENOENT);
            ino[d][k] = 0;
            break;
        case 2:
            if (!ino[d][k] || same) {
                assert_int_equal(keg_meta_rename(e, dirs[d], n1, dirs[d2], n2, 0, &a, &g),
                                 ino[d][k] ? 0 : -ENOENT);
            } else {
                assert_int_equal(keg_meta_rename(e, dirs[d], n1, dirs[d2], n2, 0, &a, &g),
                                 0);
                /* two links of one file: rename does nothing (POSIX) */
                if (ino[d2][k2] != ino[d][k]) {
                    ino[d2][k2] = ino[d][k];
                    ino[d][k] = 0;
                }
            }
            break;
        case 3:
            if (!ino[d][k])
                break;
            assert_int_equal(keg_meta_link(e, ino[d][k], dirs[d2], n2, &a),
                             ino[d2][k2] ? -EEXIST : 0);
            if (!ino[d2][k2])
                ino[d2][k2] = ino[d][k];
            break;
        default:
            if (!ino[d][k] || !ino[d2][k2] || same)
                break;
            assert_int_equal(keg_meta_rename(e, dirs[d], n1, dirs[d2], n2,
                                             KEG_RENAME_EXCHANGE, &a, &g), 0);
            uint64_t t = ino[d][k];
            ino[d][k] = ino[d2][k2];
            ino[d2][k2] = t;
            break;
        }
        /* the instance that changed the names sees them at once */
        assert_int_equal(lookup_rc(e, dirs[d], n1), ino[d][k] ? 0 : -ENOENT);
        assert_int_equal(lookup_rc(e, dirs[d2], n2), ino[d2][k2] ? 0 : -ENOENT);
        /* and the other one once the announcement has arrived */
        late += lookup_until(m[!who], dirs[d], n1, ino[d][k] ? 0 : -ENOENT);
        late += lookup_until(m[!who], dirs[d2], n2, ino[d2][k2] ? 0 : -ENOENT);
        /* a name that is not there, where a create would look first */
        assert_int_equal(lookup_rc(e, dirs[d], "absent"), -ENOENT);
    }
    /* a final sweep: both agree with the model everywhere */
    for (int w = 0; w < 2; w++)
        for (int d = 0; d < NDIR; d++)
            for (int k = 0; k < NNAME; k++) {
                char n1[16];
                snprintf(n1, sizeof(n1), "n%d", k);
                assert_int_equal(lookup_rc(m[w], dirs[d], n1), ino[d][k] ? 0 : -ENOENT);
            }
    for (int w = 0; w < 2; w++) {
        struct keg_meta_name_cache st = names_stats(m[w]);
        fprintf(stderr, "  instance %d: %" PRIu64 " lookups answered from the cache, %" PRIu64
                " fills, %" PRIu64 " names held\n", w, st.answered, st.fills, st.names);
        assert_true(st.answered > OPS / 2);
        assert_true(st.fills >= NDIR);
        assert_int_equal(st.drops, 1);      /* only the one at subscription */
    }
    fprintf(stderr, "  the other instance needed %d extra tries in all\n", late);
    close_session(m[0]);
    close_session(m[1]);
    close_vol(fmt);
}

/* Kills the PID's pub/sub connections (the name caches' subscriptions). */
static void kill_subscriptions(redisContext *c)
{
    redisReply *r = redisCommand(c, "CLIENT KILL TYPE pubsub");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_true(r->integer >= 1);
    freeReplyObject(r);
}

/* A lost subscription drops the cached names at once: a name another
 * instance creates meanwhile is found; the cache comes back by itself. */
static void test_names_subscription_lost(void **state)
{
    char ns[64];
    struct keg_attr a;
    (void)state;
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *fmt = open_vol(0, ns);
    struct keg_meta *m = open_session(ns, NULL), *o = open_session(ns, NULL);
    redisContext *c = admin();
    names_wait_up(m);
    assert_int_equal(lookup_rc(m, KEG_ROOT_INO, "x"), -ENOENT);   /* fills the root */
    assert_int_equal(lookup_rc(m, KEG_ROOT_INO, "x"), -ENOENT);
    struct keg_meta_name_cache st = names_stats(m);
    assert_int_equal(st.fills, 1);
    assert_int_equal(st.answered, 1);
    for (int round = 0; round < 3; round++) {
        char name[16];
        snprintf(name, sizeof(name), "y%d", round);
        assert_int_equal(lookup_rc(m, KEG_ROOT_INO, name), -ENOENT);
        kill_subscriptions(c);
        /* announcements sent now reach nobody: o's create must still be seen */
        assert_int_equal(mkfile(o, KEG_ROOT_INO, name, &a), 0);
        assert_int_equal(lookup_rc(m, KEG_ROOT_INO, name), 0);
        assert_true(names_stats(m).drops >= (uint64_t)round + 2);
        names_wait_up(m);
        names_wait_up(o);
        /* cached again */
        uint64_t before = names_stats(m).answered;
        assert_int_equal(lookup_rc(m, KEG_ROOT_INO, "z"), -ENOENT);
        assert_int_equal(lookup_rc(m, KEG_ROOT_INO, "z"), -ENOENT);
        assert_true(names_stats(m).answered > before);
        assert_int_equal(lookup_rc(m, KEG_ROOT_INO, name), 0);
    }
    redisFree(c);
    close_session(m);
    close_session(o);
    close_vol(fmt);
}

/* dircache=: 0 turns the cache off, a directory with more names than the
 * limit is not cached, bad values are refused, and the names a fill brings
 * count against the limit. */
static void test_names_limits(void **state)
{
    char ns[64];
    struct keg_attr a;
    struct keg_meta *m = (struct keg_meta *)0x1;
    struct keg_meta_name_cache st;
    (void)state;
    static const char *const bad[] = {
        "redis://127.0.0.1:1/0?dircache=",
        "redis://127.0.0.1:1/0?dircache=x",
        "redis://127.0.0.1:1/0?dircache=-1",
        "redis://127.0.0.1:1/0?dircache=10000001",
        NULL,
    };
    for (int i = 0; bad[i]; i++) {
        log_reset();
        assert_int_equal(keg_meta_open(bad[i], &m), -EINVAL);
        assert_true(log_has("dircache must be a number of names"));
    }
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *fmt = open_vol(0, ns);
    uint64_t small = mkdir_(fmt, KEG_ROOT_INO, "small"), big = mkdir_(fmt, KEG_ROOT_INO, "big");
    for (int i = 0; i < 8; i++) {
        char name[16];
        snprintf(name, sizeof(name), "f%d", i);
        assert_int_equal(mkfile(fmt, big, name, &a), 0);
        if (i < 3)
            assert_int_equal(mkfile(fmt, small, name, &a), 0);
    }
    /* off: no cache at all, lookups still right */
    struct keg_meta *off = open_session(ns, "dircache=0");
    assert_int_equal(keg_meta_name_cache_stats(off, &st), -ENOENT);
    assert_int_equal(lookup_rc(off, small, "nope"), -ENOENT);
    assert_int_equal(lookup_rc(off, small, "f1"), 0);
    close_session(off);
    /* a limit of 5 names: "big" (8) is never cached, "small" (3) is */
    m = open_session(ns, "dircache=5");
    names_wait_up(m);
    for (int i = 0; i < 3; i++)
        assert_int_equal(lookup_rc(m, big, "nope"), -ENOENT);
    st = names_stats(m);
    assert_int_equal(st.answered, 0);
    assert_int_equal(st.fills, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(lookup_rc(m, small, "nope"), -ENOENT);
    assert_int_equal(lookup_rc(m, small, "f2"), 0);
    st = names_stats(m);
    assert_int_equal(st.fills, 1);
    assert_int_equal(st.answered, 2);
    assert_int_equal(st.names, 3);
    /* growing past the limit drops the set; lookups stay right */
    for (int i = 3; i < 7; i++) {
        char name[16];
        snprintf(name, sizeof(name), "f%d", i);
        assert_int_equal(mkfile(m, small, name, &a), 0);
        assert_int_equal(lookup_rc(m, small, name), 0);
    }
    assert_true(names_stats(m).names <= 5);
    assert_int_equal(lookup_rc(m, small, "f6"), 0);
    assert_int_equal(lookup_rc(m, small, "nope"), -ENOENT);
    close_session(m);
    close_vol(fmt);
}

/* EVALSHA calls the server has run since its stats were reset. */
static long long evalsha_calls(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    const char *s = strstr(r->str, "cmdstat_evalsha:calls=");
    long long n = s ? strtoll(s + strlen("cmdstat_evalsha:calls="), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

/* Inode numbers in batches: once a caller has taken a batch with alloc_ids,
 * the next mknod reserves the following batch in the same script call, and
 * the next alloc_ids of that size is served without a request.  Numbers stay
 * unique across two instances of one volume; one-at-a-time callers get no
 * reservation. */
static void test_ino_batch_in_mknod(void **state)
{
    char ns[64], url[512];
    struct keg_attr a;
    struct keg_meta *m2;
    enum { B = 10 };
    (void)state;
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *m = open_vol(0, ns);
    redisContext *c = admin();
    uint64_t first = 0, next = 0, other = 0;
    assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_INODE, B, &first), 0);
    assert_true(first > KEG_ROOT_INO);
    /* a second instance of the volume allocates too */
    url_for(url, sizeof(url), 0, ns);
    assert_int_equal(keg_meta_open(url, &m2), 0);
    uint64_t seen[4 * B];
    int nseen = 0;
    long long calls = evalsha_calls(c);
    for (int i = 0; i < B; i++) {
        char name[32];
        snprintf(name, sizeof(name), "f%d", i);
        assert_int_equal(keg_meta_mknod(m, KEG_ROOT_INO, name, first + i,
                                        S_IFREG | 0644, 0, 0, 0, NULL, &a), 0);
        seen[nseen++] = first + i;
    }
    assert_int_equal(keg_meta_alloc_ids(m2, KEG_ID_INODE, B, &other), 0);
    for (int i = 0; i < B; i++)
        seen[nseen++] = other + i;
    /* B mknods + the other instance's alloc_ids: nothing else */
    assert_int_equal(evalsha_calls(c) - calls, B + 1);
    calls = evalsha_calls(c);
    assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_INODE, B, &next), 0);
    assert_int_equal(evalsha_calls(c) - calls, 0);     /* reserved by the first mknod */
    for (int i = 0; i < B; i++)
        seen[nseen++] = next + i;
    for (int i = 0; i < nseen; i++)
        for (int j = i + 1; j < nseen; j++)
            assert_true(seen[i] != seen[j]);
    for (int i = 0; i < B; i++) {
        char name[32];
        snprintf(name, sizeof(name), "g%d", i);
        assert_int_equal(keg_meta_mknod(m, KEG_ROOT_INO, name, next + i, S_IFDIR | 0755,
                                        0, 0, 0, NULL, &a), 0);
        assert_int_equal(a.ino, next + i);
    }
    /* the other instance's numbers are free for it */
    assert_int_equal(keg_meta_mknod(m2, KEG_ROOT_INO, "o", other, S_IFREG | 0644, 0, 0,
                                    0, NULL, &a), 0);
    /* one at a time (a fresh instance): every alloc_ids is a request, and
     * numbers stay dense */
    keg_meta_close(m2);
    assert_int_equal(keg_meta_open(url, &m2), 0);
    uint64_t one = 0, two = 0;
    assert_int_equal(keg_meta_alloc_ids(m2, KEG_ID_INODE, 1, &one), 0);
    assert_int_equal(keg_meta_mknod(m2, KEG_ROOT_INO, "h", one, S_IFREG | 0644, 0, 0, 0,
                                    NULL, &a), 0);
    calls = evalsha_calls(c);
    assert_int_equal(keg_meta_alloc_ids(m2, KEG_ID_INODE, 1, &two), 0);
    assert_int_equal(evalsha_calls(c) - calls, 1);
    assert_int_equal(two, one + 1);
    keg_meta_close(m2);
    redisFree(c);
    close_vol(m);
}

/* SCRIPT FLUSH (what a restart or failover does to the script cache). */
static void test_noscript_reload(void **state)
{
    char ns[64];
    struct keg_attr a;
    (void)state;
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *m = open_vol(0, ns);
    redisContext *c = admin();
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "before", &a), 0);
    cmd_ok(c, "SCRIPT FLUSH");
    /* a mutation and a read-only script both reload and run exactly once */
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "after", &a), 0);
    assert_int_equal(a.nlink, 1);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "before", &a), 0);
    cmd_ok(c, "SCRIPT FLUSH");
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "after", &a), 0);
    struct keg_attr root;
    assert_int_equal(keg_meta_getattr(m, KEG_ROOT_INO, &root), 0);
    assert_int_equal(root.nlink, 2);
    redisFree(c);
    close_vol(m);
}

/* maxmemory reached (noeviction): mutations that add records -ENOSPC; reads,
 * cleanup, attribute changes, truncate, the heartbeat and unlocking work. */
static void test_oom_enospc(void **state)
{
    char ns[64];
    struct keg_attr a, f, h;
    struct keg_unlinked gone;
    uint64_t sid;
    (void)state;
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *m = open_vol(0, ns);
    assert_int_equal(keg_meta_session_begin(m, "oom-test", &sid), 0);
    redisContext *c = admin();
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "f", &f), 0);
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "h", &h), 0);
    uint64_t ino = new_ino(m);
    struct keg_plock wr = {.type = F_WRLCK, .start = 0, .end = 99, .pid = 7};
    assert_int_equal(keg_meta_setlk(m, h.ino, 1, &wr), 0);
    assert_int_equal(keg_meta_flock(m, h.ino, 1, F_WRLCK), 0);
    cmd_ok(c, "CONFIG SET maxmemory 1");
    /* taking a lock adds a record: refused */
    struct keg_plock more = {.type = F_WRLCK, .start = 200, .end = 299, .pid = 7};
    assert_int_equal(keg_meta_setlk(m, h.ino, 1, &more), -ENOSPC);
    assert_int_equal(keg_meta_flock(m, f.ino, 2, F_RDLCK), -ENOSPC);
    /* rewriting the attribute record in place, truncating, the heartbeat and
     * releasing locks work on a full server, as on a full local disk */
    struct keg_attr in = {.mode = 0600, .mtime = 1234};
    assert_int_equal(keg_meta_setattr(m, f.ino, KEG_SET_MODE | KEG_SET_MTIME, &in, &a), 0);
    assert_int_equal(a.mode & 07777, 0600);
    assert_int_equal(a.mtime, 1234);
    assert_int_equal(keg_meta_truncate(m, f.ino, 10000, &a), 0);
    assert_int_equal(a.size, 10000);
    assert_int_equal(keg_meta_truncate(m, f.ino, 0, &a), 0);
    assert_int_equal(a.size, 0);
    assert_int_equal(keg_meta_session_heartbeat(m), 0);
    struct keg_plock un = {.type = F_UNLCK, .start = 10, .end = 19};
    assert_int_equal(keg_meta_setlk(m, h.ino, 1, &un), 0);   /* splits the range */
    un.start = 0;
    un.end = UINT64_MAX;
    assert_int_equal(keg_meta_setlk(m, h.ino, 1, &un), 0);
    assert_int_equal(keg_meta_flock(m, h.ino, 1, F_UNLCK), 0);
    struct keg_plock probe = {.type = F_WRLCK, .start = 0, .end = UINT64_MAX};
    assert_int_equal(keg_meta_getlk(m, h.ino, 2, &probe), 0);
    assert_int_equal(probe.type, F_UNLCK);
    int rc = keg_meta_mknod(m, KEG_ROOT_INO, "g", ino, S_IFREG | 0644, 0, 0, 0, NULL, &a);
    assert_int_equal(rc, -ENOSPC);
    assert_int_equal(keg_meta_setxattr(m, a.ino, "user.x", "v", 1, 0), -ENOSPC);
    /* a burst of refused writes logs one line per second, not one per call */
    sleep(1);
    log_reset();
    for (int i = 0; i < 50; i++)
        assert_int_equal(keg_meta_setxattr(m, a.ino, "user.x", "v", 1, 0), -ENOSPC);
    assert_int_equal(log_count("out of memory"), 1);
    assert_true(log_has("similar lines suppressed)"));
    sleep(1);
    log_reset();
    assert_int_equal(keg_meta_setxattr(m, a.ino, "user.x", "v", 1, 0), -ENOSPC);
    assert_true(log_has("(49 similar lines suppressed)"));
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "f", &a), 0);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "g", &a), -ENOENT);
    assert_int_equal(keg_meta_getattr(m, KEG_ROOT_INO, &a), 0);
    /* deleting frees memory, so it is allowed */
    assert_int_equal(keg_meta_unlink(m, KEG_ROOT_INO, "f", &gone), 0);
    cmd_ok(c, "CONFIG SET maxmemory 1gb");
    assert_int_equal(keg_meta_mknod(m, KEG_ROOT_INO, "g", ino, S_IFREG | 0644, 0, 0, 0,
                                    NULL, &a), 0);
    /* the locks released while full are gone for other owners too */
    assert_int_equal(keg_meta_flock(m, h.ino, 2, F_WRLCK), 0);
    assert_int_equal(keg_meta_setlk(m, h.ino, 2, &wr), 0);
    redisFree(c);
    close_vol(m);
}

static void test_policy_warning(void **state)
{
    char ns[64], url[512], pol[64];
    struct keg_meta *m;
    (void)state;
    need_live();
    redisContext *c = admin();
    token(ns, sizeof(ns));
    url_for(url, sizeof(url), 0, ns);
    cmd_ok(c, "CONFIG SET maxmemory-policy allkeys-lru");
    log_reset();
    assert_int_equal(keg_meta_open(url, &m), 0);
    assert_true(log_has("WARNING"));
    assert_true(log_has("allkeys-lru"));
    assert_true(log_has("noeviction"));
    assert_int_equal(keg_meta_redis_policy(m, pol, sizeof(pol)), 0);
    assert_string_equal(pol, "allkeys-lru");
    cmd_ok(c, "CONFIG SET maxmemory-policy noeviction");
    assert_int_equal(keg_meta_redis_policy(m, pol, sizeof(pol)), 1);
    assert_string_equal(pol, "noeviction");
    keg_meta_close(m);
    log_reset();
    assert_int_equal(keg_meta_open(url, &m), 0);
    assert_false(log_has("WARNING"));
    keg_meta_close(m);
    redisFree(c);
}

/* Every key the engine writes carries the volume's hash tag. */
static void test_hash_tags(void **state)
{
    char ns[64];
    struct keg_attr a;
    uint64_t sid;
    (void)state;
    need_live();
    redisContext *c = admin();
    cmd_ok(c, "SELECT 11");
    cmd_ok(c, "FLUSHDB");
    token(ns, sizeof(ns));
    struct keg_meta *m = open_vol(11, ns);
    assert_int_equal(keg_meta_session_begin(m, "host=test", &sid), 0);
    uint64_t d = mkdir_(m, KEG_ROOT_INO, "dir");
    assert_int_equal(mkfile(m, d, "file", &a), 0);
    assert_int_equal(keg_meta_mknod(m, d, "sym", new_ino(m), S_IFLNK | 0777, 0, 0, 0,
                                    "file", NULL), 0);
    assert_int_equal(keg_meta_setxattr(m, a.ino, "user.k", "v", 1, 0), 0);
    uint64_t sl;
    assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_SLICE, 2, &sl), 0);
    struct keg_chunk_slice cs[2] = {
        {.indx = 0, .s = {.id = sl, .size = 4096, .off = 0, .len = 4096, .pos = 0}},
        {.indx = 1, .s = {.id = sl + 1, .size = 4096, .off = 0, .len = 4096, .pos = 0}},
    };
    assert_int_equal(keg_meta_write_slices(m, a.ino, 2, cs, KEG_CHUNK_SIZE + 4096, 0, NULL,
                                           NULL), 0);
    assert_int_equal(keg_meta_flock(m, a.ino, 7, F_WRLCK), 0);
    struct keg_plock lk = {.type = F_WRLCK, .start = 0, .end = UINT64_MAX, .pid = 1};
    assert_int_equal(keg_meta_setlk(m, a.ino, 7, &lk), 0);
    struct keg_unlinked gone;
    assert_int_equal(keg_meta_unlink(m, d, "file", &gone), 0);   /* pending + delq later */

    char prefix[80];
    snprintf(prefix, sizeof(prefix), "{%s}", ns);
    char cursor[32] = "0";
    int nkeys = 0;
    do {
        redisReply *r = redisCommand(c, "SCAN %s COUNT 1000", cursor);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const char *k = r->element[1]->element[i]->str;
            if (strncmp(k, prefix, strlen(prefix)) != 0)
                fprintf(stderr, "key without the hash tag: %s\n", k);
            assert_memory_equal(k, prefix, strlen(prefix));
            nkeys++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    assert_true(nkeys >= 12);
    /* one slot for the whole volume */
    redisReply *r = redisCommand(c, "CLUSTER KEYSLOT {%s}i1", ns);
    if (r && r->type == REDIS_REPLY_INTEGER) {
        redisReply *r2 = redisCommand(c, "CLUSTER KEYSLOT {%s}d12345", ns);
        assert_int_equal(r->integer, r2->integer);
        freeReplyObject(r2);
    }
    if (r)
        freeReplyObject(r);

    /* session end purges, destroy leaves nothing */
    assert_int_equal(keg_meta_session_end(m), 0);
    assert_int_equal(keg_meta_destroy(m), 0);
    r = redisCommand(c, "DBSIZE");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    keg_meta_close(m);
    redisFree(c);
}

/* The server drops every connection of the volume and forgets its scripts
 * (what a restart does): the next ops reconnect and work. */
static void test_connection_loss(void **state)
{
    char ns[64], name[80];
    struct keg_attr a;
    (void)state;
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *m = open_vol(0, ns);
    redisContext *c = admin();
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "a", &a), 0);
    snprintf(name, sizeof(name), "name=kegfs-%s ", ns);
    for (int round = 0; round < 3; round++) {
        redisReply *r = redisCommand(c, "CLIENT LIST");
        assert_non_null(r);
        int killed = 0;
        for (char *line = r->str; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            if (strstr(line, name)) {
                long long id = strtoll(line + 3, NULL, 10);   /* "id=N ..." */
                redisReply *k = redisCommand(c, "CLIENT KILL ID %lld", id);
                freeReplyObject(k);
                killed++;
            }
            line = nl ? nl + 1 : NULL;
        }
        freeReplyObject(r);
        assert_true(killed >= 1);
        cmd_ok(c, "SCRIPT FLUSH");
        char fname[16];
        snprintf(fname, sizeof(fname), "n%d", round);
        /* a non-idempotent mutation: must run exactly once */
        assert_int_equal(mkfile(m, KEG_ROOT_INO, fname, &a), 0);
        assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, fname, &a), 0);
        assert_int_equal(a.nlink, 1);
    }
    struct keg_attr root;
    assert_int_equal(keg_meta_getattr(m, KEG_ROOT_INO, &root), 0);
    redisFree(c);
    close_vol(m);
}

/* redis+sentinel:// through a sentinel this test starts (the first sentinel
 * of the URL is dead, so the engine must go on to the next). */
static void test_sentinel(void **state)
{
    char dir[] = "/tmp/keg-sentinel-XXXXXX", conf[128], cmd[512], ns[64], url[512];
    struct keg_attr a;
    struct keg_meta *m;
    int sport = g_port + 20000;
    (void)state;
    need_live();
    if (access("/usr/bin/redis-server", X_OK) != 0)
        skip();
    struct timeval tv0 = {1, 0};
    redisContext *busy = redisConnectWithTimeout("127.0.0.1", sport, tv0);
    int in_use = busy && !busy->err;
    if (busy)
        redisFree(busy);
    if (in_use) {
        fprintf(stderr, "  (port %d is in use: skipped)\n", sport);
        skip();
    }
    assert_non_null(mkdtemp(dir));
    snprintf(conf, sizeof(conf), "%s/sentinel.conf", dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "port %d\nbind 127.0.0.1\ndaemonize yes\npidfile %s/s.pid\nlogfile %s/s.log\n"
            "dir %s\nsentinel monitor kegmaster %s %d 1\n", sport, dir, dir, dir, g_host, g_port);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "/usr/bin/redis-server %s --sentinel", conf);
    assert_int_equal(system(cmd), 0);
    redisContext *s = NULL;
    for (int i = 0; i < 50; i++) {
        struct timeval tv = {1, 0};
        s = redisConnectWithTimeout("127.0.0.1", sport, tv);
        if (s && !s->err)
            break;
        if (s)
            redisFree(s);
        s = NULL;
        usleep(100000);
    }
    assert_non_null(s);

    token(ns, sizeof(ns));
    snprintf(url, sizeof(url), "redis+sentinel://127.0.0.1:1,127.0.0.1:%d/kegmaster/3?ns=%s",
             sport, ns);
    assert_int_equal(keg_meta_open(url, &m), 0);
    struct keg_format fm;
    fill_format(&fm);
    assert_int_equal(keg_meta_format_init(m, &fm, 0755, 0, 0, 0), 0);
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "x", &a), 0);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "x", &a), 0);
    close_vol(m);

    /* a master the sentinels do not know */
    snprintf(url, sizeof(url), "redis+sentinel://127.0.0.1:%d/nosuchmaster?ns=%s", sport, ns);
    log_reset();
    m = (struct keg_meta *)0x1;
    assert_true(keg_meta_open(url, &m) < 0);
    assert_null(m);
    assert_true(log_has("nosuchmaster"));

    redisReply *r = redisCommand(s, "SHUTDOWN NOSAVE");
    if (r)
        freeReplyObject(r);
    redisFree(s);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static int atoi_port(const char *s)
{
    return s ? (int)strtol(s, NULL, 10) : 0;
}

/* Start a throw-away redis-server (or sentinel, with extra "--sentinel") from
 * the config text cfg in dir/name.conf, and wait until it answers on port. */
static redisContext *spawn_redis(const char *dir, const char *name, int port, const char *cfg,
                                 const char *extra)
{
    char conf[256], cmd[512];
    snprintf(conf, sizeof(conf), "%s/%s.conf", dir, name);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "port %d\nbind 127.0.0.1\ndaemonize yes\npidfile %s/%s.pid\nlogfile %s/%s.log\n"
            "dir %s\nsave \"\"\nappendonly no\n%s", port, dir, name, dir, name, dir, cfg);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "/usr/bin/redis-server %s %s", conf, extra);
    assert_int_equal(system(cmd), 0);
    for (int i = 0; i < 100; i++) {
        struct timeval tv = {1, 0};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err)
            return c;
        if (c)
            redisFree(c);
        usleep(100000);
    }
    fail_msg("%s on port %d did not start", name, port);
    return NULL;
}

/* A replication offset from INFO replication (field e.g. "master_repl_offset:"). */
static long long repl_offset(redisContext *c, const char *field)
{
    redisReply *r = redisCommand(c, "INFO replication");
    assert_non_null(r);
    const char *f = r->type == REDIS_REPLY_STRING ? strstr(r->str, field) : NULL;
    long long v = f ? strtoll(f + strlen(field), NULL, 10) : -1;
    freeReplyObject(r);
    return v;
}

/* Sentinel failover: the master changes (SENTINEL FAILOVER) while a client is
 * open; the engine finds the new master through the sentinels and goes on, and
 * what was written before is there.  Uses its own master, replica and
 * sentinel so that the shared test server keeps its role. */
static void test_sentinel_failover(void **state)
{
    char dir[] = "/tmp/keg-failover-XXXXXX", cfg[256], ns[64], url[512], cmd[300];
    int mport = g_port + 20101, rport = g_port + 20102, sport = g_port + 20103;
    struct keg_attr a;
    struct keg_meta *m;
    (void)state;
    need_live();
    if (access("/usr/bin/redis-server", X_OK) != 0)
        skip();
    assert_non_null(mkdtemp(dir));
    /* no diskless-sync delay (default 5 s, as long as the WAIT below) */
    redisContext *mc = spawn_redis(dir, "master", mport, "repl-diskless-sync-delay 0\n", "");
    snprintf(cfg, sizeof(cfg), "replicaof 127.0.0.1 %d\nrepl-diskless-sync-delay 0\n", mport);
    redisContext *rc = spawn_redis(dir, "replica", rport, cfg, "");
    snprintf(cfg, sizeof(cfg),
             "sentinel monitor kfo 127.0.0.1 %d 1\nsentinel down-after-milliseconds kfo 1000\n"
             "sentinel failover-timeout kfo 5000\n", mport);
    redisContext *sc = spawn_redis(dir, "sentinel", sport, cfg, "--sentinel");

    token(ns, sizeof(ns));
    snprintf(url, sizeof(url), "redis+sentinel://127.0.0.1:%d/kfo/0?ns=%s", sport, ns);
    assert_int_equal(keg_meta_open(url, &m), 0);
    struct keg_format fm;
    fill_format(&fm);
    assert_int_equal(keg_meta_format_init(m, &fm, 0755, 0, 0, 0), 0);
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "before", &a), 0);
    /* a second instance with a session caches the root's names */
    struct keg_meta *o = NULL;
    uint64_t sid;
    assert_int_equal(keg_meta_open(url, &o), 0);
    assert_int_equal(keg_meta_session_begin(o, "failover", &sid), 0);
    names_wait_up(o);
    assert_int_equal(lookup_rc(o, KEG_ROOT_INO, "after"), -ENOENT);
    assert_int_equal(lookup_rc(o, KEG_ROOT_INO, "after"), -ENOENT);
    assert_int_equal(names_stats(o).answered, 1);
    uint64_t drops = names_stats(o).drops;
    /* wait until the replica has everything, and the sentinel knows the replica */
    /* (WAIT would only cover this connection's own writes, and it made none:
     * compare replication offsets instead) */
    long long want = repl_offset(mc, "master_repl_offset:");
    int synced = 0;
    for (int i = 0; i < 100 && !synced; i++) {
        synced = repl_offset(rc, "slave_repl_offset:") >= want;
        if (!synced)
            usleep(50000);
    }
    assert_true(synced);
    redisReply *r;
    int known = 0;
    for (int i = 0; i < 100 && !known; i++) {
        r = redisCommand(sc, "SENTINEL REPLICAS kfo");
        known = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0;
        if (r)
            freeReplyObject(r);
        if (!known)
            usleep(100000);
    }
    assert_true(known);

    /* until the sentinel has the replica's INFO it answers -NOGOODSLAVE */
    int started = 0;
    for (int i = 0; i < 150 && !started; i++) {
        r = redisCommand(sc, "SENTINEL FAILOVER kfo");
        assert_non_null(r);
        started = r->type != REDIS_REPLY_ERROR;
        freeReplyObject(r);
        if (!started)
            usleep(100000);
    }
    assert_true(started);
    int promoted = 0;
    for (int i = 0; i < 150 && !promoted; i++) {
        r = redisCommand(sc, "SENTINEL GET-MASTER-ADDR-BY-NAME kfo");
        promoted = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                   atoi_port(r->element[1]->str) == rport;
        if (r)
            freeReplyObject(r);
        if (!promoted)
            usleep(100000);
    }
    assert_true(promoted);
    /* wait until the old master is a replica in sync with the new one: a write
     * that reached it before would be lost in its resync, and it answers from
     * an empty dataset while it loads (Sentinel's own windows, not under test) */
    int demoted = 0;
    for (int i = 0; i < 150 && !demoted; i++) {
        struct timeval tv = {1, 0};
        redisContext *oc = redisConnectWithTimeout("127.0.0.1", mport, tv);
        r = oc && !oc->err ? redisCommand(oc, "ROLE") : NULL;
        demoted = r && r->type == REDIS_REPLY_ARRAY && r->elements > 3 &&
                  strcmp(r->element[0]->str, "slave") == 0 &&
                  r->element[3]->type == REDIS_REPLY_STRING &&
                  strcmp(r->element[3]->str, "connected") == 0;
        if (r)
            freeReplyObject(r);
        if (oc)
            redisFree(oc);
        if (!demoted)
            usleep(100000);
    }
    assert_true(demoted);
    /* the old master is demoted: writes there fail with READONLY; the engine
     * must ask the sentinels again and reach the new master (bounded retries) */
    int ok = -1;
    for (int i = 0; i < 100 && ok != 0; i++) {
        ok = mkfile(m, KEG_ROOT_INO, "after", &a);
        if (ok != 0)
            usleep(100000);
    }
    assert_int_equal(ok, 0);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "before", &a), 0);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "after", &a), 0);
    /* o writes: it follows the failover to the new master, which drops its
     * cached names (announced on a server it no longer uses); "after" is
     * found at once, and the cache works again on the new master */
    ok = -1;
    for (int i = 0; i < 100 && ok != 0; i++) {
        ok = mkfile(o, KEG_ROOT_INO, "o-after", &a);
        if (ok != 0)
            usleep(100000);
    }
    assert_int_equal(ok, 0);
    assert_int_equal(lookup_rc(o, KEG_ROOT_INO, "after"), 0);
    /* the new address makes the sets untrusted at once; the subscriber thread
     * drops them and subscribes to the new master within its next wake-up */
    for (int i = 0; i < 300 && names_stats(o).drops <= drops; i++)
        usleep(10000);
    assert_true(names_stats(o).drops > drops);
    names_wait_up(o);
    assert_int_equal(lookup_rc(o, KEG_ROOT_INO, "nope"), -ENOENT);
    uint64_t before = names_stats(o).answered;
    assert_int_equal(lookup_rc(o, KEG_ROOT_INO, "nope"), -ENOENT);
    assert_true(names_stats(o).answered > before);
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "late", &a), 0);
    lookup_until(o, KEG_ROOT_INO, "late", 0);
    close_session(o);
    close_vol(m);

    /* the failover killed the clients of the old master: stop each server
     * through its pid file */
    redisFree(sc);
    redisFree(rc);
    redisFree(mc);
    snprintf(cmd, sizeof(cmd), "for p in %s/*.pid; do kill \"$(cat \"$p\")\"; done; "
             "sleep 0.5; rm -rf %s", dir, dir);
    assert_int_equal(system(cmd), 0);
}

/* A chunk written past EOF (fallocate KEEP_SIZE) is still dropped by truncate
 * and purge: its slice reaches the deletion queue and no key is left. */
static void test_chunk_past_eof(void **state)
{
    char ns[64];
    struct keg_attr a;
    struct keg_unlinked gone;
    struct keg_del_slice del[8];
    (void)state;
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *m = open_vol(0, ns);
    redisContext *c = admin();
    uint64_t sl;
    assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_SLICE, 2, &sl), 0);
    for (int round = 0; round < 2; round++) {
        char name[8];
        snprintf(name, sizeof(name), "f%d", round);
        assert_int_equal(mkfile(m, KEG_ROOT_INO, name, &a), 0);
        assert_int_equal(keg_meta_truncate(m, a.ino, 100, &a), 0);
        struct keg_chunk_slice cs = {.indx = 3, .s = {.id = sl + (uint64_t)round, .size = 4096,
                                                      .len = 4096}};
        assert_int_equal(keg_meta_write_slices(m, a.ino, 1, &cs, 0, KEG_WS_NOMTIME, NULL,
                                               &a), 0);
        assert_int_equal(a.size, 100);
        if (round == 0)
            assert_int_equal(keg_meta_truncate(m, a.ino, 50, &a), 0);
        else
            assert_int_equal(keg_meta_unlink(m, KEG_ROOT_INO, name, &gone), 0);
        redisReply *r = redisCommand(c, "EXISTS {%s}c%" PRIu64 "_3", ns, a.ino);
        assert_int_equal(r->integer, 0);
        freeReplyObject(r);
        assert_int_equal(keg_meta_delq_peek(m, del, 8), round + 1);
        assert_int_equal(del[round].id, sl + (uint64_t)round);
    }
    redisFree(c);
    close_vol(m);
}

/* An inode written by an older version has no chunk index ({NS}C<ino>) but a
 * "chunks" high-water mark in its record: truncate and purge index its chunks
 * from that mark first, so none of its slices is forgotten. */
static void test_legacy_chunk_mark(void **state)
{
    char ns[64];
    struct keg_attr a;
    struct keg_unlinked gone;
    struct keg_del_slice del[8];
    (void)state;
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *m = open_vol(0, ns);
    redisContext *c = admin();
    uint64_t sl;
    assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_SLICE, 3, &sl), 0);
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "old", &a), 0);
    uint64_t ino = a.ino;
    for (uint32_t i = 0; i < 3; i++) {
        struct keg_chunk_slice cs = {.indx = i * 2, .s = {.id = sl + i, .size = 10, .len = 10}};
        assert_int_equal(keg_meta_write_slices(m, ino, 1, &cs, (uint64_t)i * 2 * KEG_CHUNK_SIZE
                                               + 10, 0, NULL, &a), 0);
    }
    /* make it look like an old record: no index, chunks = 5 at offset 76 */
    cmd_ok(c, "DEL {%s}C%" PRIu64, ns, ino);
    cmd_ok(c, "SETRANGE {%s}i%" PRIu64 " 76 %b", ns, ino, "\x05\0\0\0", (size_t)4);
    assert_int_equal(keg_meta_truncate(m, ino, KEG_CHUNK_SIZE, &a), 0);
    assert_int_equal(keg_meta_delq_peek(m, del, 8), 2);
    assert_int_equal(keg_meta_delq_ack(m, del, 2), 0);
    redisReply *r = redisCommand(c, "GETRANGE {%s}i%" PRIu64 " 76 79", ns, ino);
    assert_int_equal(r->len, 4);
    assert_memory_equal(r->str, "\0\0\0\0", 4);
    freeReplyObject(r);
    assert_int_equal(keg_meta_unlink(m, KEG_ROOT_INO, "old", &gone), 0);
    assert_int_equal(keg_meta_delq_peek(m, del, 8), 1);
    assert_int_equal(del[0].id, sl);
    r = redisCommand(c, "EXISTS {%s}C%" PRIu64 " {%s}c%" PRIu64 "_0", ns, ino, ns, ino);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    redisFree(c);
    close_vol(m);
}

/* An attribute record written by an older version is 80 bytes, without alloc:
 * it still decodes (alloc unknown: st_blocks follows the size), every script
 * reads it, and the next write of the inode stores the 88-byte form with
 * alloc = size (an upper bound) from which truncate and writes go on. */
static void test_legacy_attr_record(void **state)
{
    char ns[64];
    struct keg_attr a;
    (void)state;
    need_live();
    token(ns, sizeof(ns));
    struct keg_meta *m = open_vol(0, ns);
    redisContext *c = admin();
    uint64_t sl;
    assert_int_equal(keg_meta_alloc_ids(m, KEG_ID_SLICE, 2, &sl), 0);
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "old", &a), 0);
    uint64_t ino = a.ino;
    struct keg_chunk_slice cs = {.indx = 0, .s = {.id = sl, .size = 1000, .len = 1000}};
    assert_int_equal(keg_meta_write_slices(m, ino, 1, &cs, 100000, 0, NULL, &a), 0);
    assert_int_equal(a.size, 100000);
    assert_int_equal(a.alloc, 1000);
    redisReply *r = redisCommand(c, "STRLEN {%s}i%" PRIu64, ns, ino);
    assert_int_equal(r->integer, 88);
    freeReplyObject(r);
    /* cut it to the old 80-byte form */
    r = redisCommand(c, "GETRANGE {%s}i%" PRIu64 " 0 79", ns, ino);
    assert_int_equal(r->len, 80);
    cmd_ok(c, "SET {%s}i%" PRIu64 " %b", ns, ino, r->str, (size_t)r->len);
    freeReplyObject(r);
    assert_int_equal(keg_meta_getattr(m, ino, &a), 0);
    assert_int_equal(a.size, 100000);
    assert_int_equal(a.alloc, KEG_ALLOC_UNKNOWN);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "old", &a), 0);
    assert_int_equal(a.alloc, KEG_ALLOC_UNKNOWN);
    /* truncate rewrites it: alloc = the size it had, clamped to the new one */
    assert_int_equal(keg_meta_truncate(m, ino, 60000, &a), 0);
    assert_int_equal(a.alloc, 60000);
    r = redisCommand(c, "STRLEN {%s}i%" PRIu64, ns, ino);
    assert_int_equal(r->integer, 88);
    freeReplyObject(r);
    cs.s.id = sl + 1;
    cs.s.pos = 70000;
    assert_int_equal(keg_meta_write_slices(m, ino, 1, &cs, 71000, 0, NULL, &a), 0);
    assert_int_equal(a.size, 71000);
    assert_int_equal(a.alloc, 61000);
    assert_int_equal(keg_meta_getattr(m, ino, &a), 0);
    assert_int_equal(a.alloc, 61000);
    /* a volume whose format predates alloc (no attrAlloc): records stay 80
     * bytes, so an older mounter of the same volume can still read them */
    cmd_ok(c, "HDEL {%s}counter attrAlloc", ns);
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "new", &a), 0);
    r = redisCommand(c, "STRLEN {%s}i%" PRIu64, ns, a.ino);
    assert_int_equal(r->integer, 80);
    freeReplyObject(r);
    assert_int_equal(a.alloc, KEG_ALLOC_UNKNOWN);
    assert_int_equal(keg_meta_write_slices(m, a.ino, 1, &cs, 71000, 0, NULL, &a), 0);
    r = redisCommand(c, "STRLEN {%s}i%" PRIu64, ns, a.ino);
    assert_int_equal(r->integer, 80);
    freeReplyObject(r);
    assert_int_equal(a.alloc, KEG_ALLOC_UNKNOWN);
    redisFree(c);
    close_vol(m);
}

/* A real restart (opt-in with KEG_TEST_REDIS_RESTART=1: it disturbs every
 * client of the server): the server saves, stops, and comes back 1 s later
 * from the same config file.  An op issued while it is down waits
 * (bounded retry) and succeeds exactly once. */
static void *restart_thread(void *arg)
{
    const char *conf = arg;
    char cmd[1200];
    redisContext *c = admin();
    redisReply *r = redisCommand(c, "SHUTDOWN SAVE");
    if (r)
        freeReplyObject(r);
    redisFree(c);
    sleep(1);
    snprintf(cmd, sizeof(cmd), "/usr/bin/redis-server %s", conf);
    if (system(cmd) != 0)
        fprintf(stderr, "restart failed: %s\n", cmd);
    return NULL;
}

static void test_real_restart(void **state)
{
    char ns[64], conf[1024];
    struct keg_attr a;
    pthread_t th;
    (void)state;
    need_live();
    const char *e = getenv("KEG_TEST_REDIS_RESTART");
    if (!e || strcmp(e, "1") != 0) {
        fprintf(stderr, "  (set KEG_TEST_REDIS_RESTART=1 to restart the server: skipped)\n");
        skip();
    }
    redisContext *c = admin();
    redisReply *r = redisCommand(c, "INFO server");
    const char *cf = r ? strstr(r->str, "config_file:") : NULL;
    assert_non_null(cf);
    cf += strlen("config_file:");
    snprintf(conf, sizeof(conf), "%.*s", (int)strcspn(cf, "\r\n"), cf);
    freeReplyObject(r);
    redisFree(c);
    assert_true(conf[0] == '/');

    token(ns, sizeof(ns));
    struct keg_meta *m = open_vol(0, ns);
    assert_int_equal(mkfile(m, KEG_ROOT_INO, "before", &a), 0);
    uint64_t ino = new_ino(m);
    assert_int_equal(pthread_create(&th, NULL, restart_thread, conf), 0);
    usleep(300000);   /* the server is saving or down now */
    int64_t t0 = keg_mono_ns();
    int rc = keg_meta_mknod(m, KEG_ROOT_INO, "during", ino, S_IFREG | 0644, 0, 0, 0, NULL,
                            &a);
    double waited = (double)(keg_mono_ns() - t0) / 1e9;
    pthread_join(th, NULL);
    printf("  mknod during the restart: %d after %.2f s\n", rc, waited);
    assert_int_equal(rc, 0);
    assert_true(waited < 11.0);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "before", &a), 0);
    assert_int_equal(keg_meta_lookup(m, KEG_ROOT_INO, "during", &a), 0);
    assert_int_equal(a.ino, ino);
    close_vol(m);
}

/* Memory per inode: INFO used_memory before/after creating N files in
 * directories of 1000 entries. */
static void test_memory_per_inode(void **state)
{
    char ns[64], name[32];
    struct keg_attr a;
    (void)state;
    need_live();
    const char *e = getenv("KEG_TEST_REDIS_INODES");
    long n = e ? strtol(e, NULL, 10) : 100000;
    if (n < 1000)
        n = 1000;
    token(ns, sizeof(ns));
    redisContext *c = admin();
    struct keg_meta *m = open_vol(0, ns);
    long long before = used_memory(c);
    int64_t t0 = keg_mono_ns();
    uint64_t d = 0;
    for (long i = 0; i < n; i++) {
        if (i % 1000 == 0) {
            snprintf(name, sizeof(name), "d%ld", i / 1000);
            d = mkdir_(m, KEG_ROOT_INO, name);
        }
        snprintf(name, sizeof(name), "file-%07ld.txt", i);
        assert_int_equal(mkfile(m, d, name, &a), 0);
    }
    int64_t t1 = keg_mono_ns();
    long long after = used_memory(c);
    printf("  redis memory: %lld bytes for %ld files in %ld dirs = %.0f bytes per file "
           "(incl. its entry); %.0f creates/s (alloc_ids + mknod, 2 round trips each)\n",
           after - before, n, n / 1000, (double)(after - before) / (double)n,
           (double)n / ((double)(t1 - t0) / 1e9));
    assert_true(after > before);
    close_vol(m);
    redisFree(c);
}

/*----------------------------------------------------------------------------
 * main
 *--------------------------------------------------------------------------*/

int main(void)
{
    const char *url = getenv("KEG_TEST_REDIS_URL");
    if (url && *url) {
        struct keg_url u;
        const char *why;
        if (keg_url_parse(url, &u, &why) != 0 || strcmp(u.scheme, "redis") != 0) {
            fprintf(stderr, "KEG_TEST_REDIS_URL must be redis://host:port\n");
            return 1;
        }
        snprintf(g_host, sizeof(g_host), "%s", u.host);
        g_port = u.port ? u.port : 6379;
        keg_url_free(&u);
        g_live = 1;
    }
    keg_log_set_sink(capture_sink, NULL);
    keg_log_set_level(LOG_INFO);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_errors),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_url_forms),
        cmocka_unit_test(test_url_spin),
        cmocka_unit_test(test_ino_batch_in_mknod),
        cmocka_unit_test(test_names_model),
        cmocka_unit_test(test_names_subscription_lost),
        cmocka_unit_test(test_names_limits),
        cmocka_unit_test(test_noscript_reload),
        cmocka_unit_test(test_oom_enospc),
        cmocka_unit_test(test_policy_warning),
        cmocka_unit_test(test_hash_tags),
        cmocka_unit_test(test_connection_loss),
        cmocka_unit_test(test_sentinel),
        cmocka_unit_test(test_sentinel_failover),
        cmocka_unit_test(test_chunk_past_eof),
        cmocka_unit_test(test_legacy_chunk_mark),
        cmocka_unit_test(test_legacy_attr_record),
        cmocka_unit_test(test_real_restart),
        cmocka_unit_test(test_memory_per_inode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
