/* meta_redis.c -- the Redis metadata engine (META_URL redis://, unix://,
 * redis+sentinel://), built on hiredis.
 *
 * DESIGN
 * Every key of a volume starts with the hash tag "{NS}" (NS = ?ns=, default
 * "kegfs"), so Redis Cluster keeps a volume on one slot and one volume is one
 * SCAN MATCH "{NS}*" away from being listed or destroyed.  The schema is in
 * docs/internals/meta-redis.md.
 *
 * Round trips: every mutation is ONE EVALSHA of a Lua script from
 * meta_redis_lua_i.h (Lua scripts run atomically, so an op fully happens or
 * not at all, also against other mounters).  Reads that need more than one
 * key (lookup, readdir with its attributes, xattrs) are read-only scripts,
 * also one round trip; getattr, read_chunk, statfs and delq_ack are plain
 * single commands (delq_peek is a script: it also reclaims a bounded batch of
 * the chunks of huge purged files).  Scripts are loaded with SCRIPT LOAD at open and
 * reloaded when a server answers NOSCRIPT (restart, SCRIPT FLUSH, failover),
 * after which the call is repeated once: NOSCRIPT means the script did not run.
 * Each script carries only the Lua helpers it uses (mr_build_scripts).  Inode
 * numbers: once a caller takes them in batches, the mknod script reserves the
 * next batch in the same call, so creating files needs no alloc_ids request.
 *
 * Lookups of names that do not exist: a mounting session keeps a cache of
 * directory names, a superset of each cached directory's entries kept current
 * by the "{NS}n" announcements that dset publishes (meta_redis_names.c), and
 * answers those lookups (the first half of every create) without a request.
 *
 * Connections (meta_redis_conn.c; META_URL parsing: meta_redis_url.c): a pool
 * of at most MR_POOL_MAX blocking hiredis contexts
 * (mutex + condvar), each with a connect and a command timeout.  A context
 * that failed is freed; the next user dials a new one (through the sentinels
 * for redis+sentinel://, which is how a failover is followed).  Before an idle
 * context is reused it is polled: a server that closed it (restart, timeout)
 * left it readable, and it is replaced without sending anything.
 *
 * Latency: once a request is written, the thread busy-polls the socket for
 * up to spin= microseconds (default MR_SPIN_US) before it blocks in read():
 * on a VM whose idle vCPUs halt, waking a thread blocked in read() costs more
 * than the whole loopback round trip (docs/redis.md).  At most ncpu/2 threads
 * (at least 1) spin at once; the rest block at once.  Both ways of waiting are
 * timed and the faster is used (on busy CPUs a spinner only competes with the
 * server), each 16th reply is waited for the other way (mr_spin_choose).
 *
 * Retries (bounded by MR_RETRY_MS in total, with exponential backoff) happen
 * only when the command certainly did not run: connecting failed, writing the
 * request failed, or the server answered LOADING / BUSY / MASTERDOWN /
 * TRYAGAIN / READONLY / NOSCRIPT.  When the request was sent but the reply was
 * lost, read-only commands and idempotent scripts are repeated; any other
 * mutation fails with -EIO (it ran completely or not at all -- Lua scripts
 * are atomic -- but blindly repeating it could apply it twice).
 *
 * Out of memory: scripts that add records carry no "allow-oom" flag, so a
 * server at maxmemory (policy noeviction) refuses them BEFORE they run with
 * -OOM, which becomes -ENOSPC; read-only scripts keep working.  Scripts that
 * free memory or only rewrite records in place are allowed, as a full disk
 * allows them on a local file system: unlink, rmdir, removexattr, purge,
 * session cleanup, delq_peek; setattr and truncate (the attribute record is
 * rewritten at its size; a shrink appends at most one 24-byte hole record);
 * the session heartbeat (a refused heartbeat would let other mounters clean
 * up this live session after the timeout: its locks released, its open
 * unlinked files purged); and flock/setlk with F_UNLCK (S_FLOCK_UN,
 * S_SETLK_UN: a refused unlock would leave the lock held, and every waiter
 * blocked, until the session ends).
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
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "keg/mem.h"
#include "keg/meta.h"
#include "keg/retry.h"
#include "keg/url.h"
#include "meta_redis_conn_i.h"
#include "meta_redis_i.h"
#include "meta_redis_lua_i.h"
#include "meta_redis_names_i.h"
#define KEG_LOG_TAG "meta_redis"
#include "keg/log.h"

/* The Lua scripts return these errno values as plain numbers. */
_Static_assert(EPERM == 1 && ENOENT == 2 && EIO == 5 && EAGAIN == 11 && EBUSY == 16 &&
               EEXIST == 17 && ENOTDIR == 20 && EISDIR == 21 && EINVAL == 22 &&
               ENOSPC == 28 && EMLINK == 31 && ENOTEMPTY == 39 && ENODATA == 61,
               "Lua scripts hard-code Linux errno values");
_Static_assert(F_RDLCK == 0 && F_WRLCK == 1 && F_UNLCK == 2, "Lua scripts hard-code lock types");


/*----------------------------------------------------------------------------
 * Scripts
 *--------------------------------------------------------------------------*/


struct mr_script_def {
    const char *name;
    const char *head;   /* shebang line: MR_LUA_RO / RW / FREE */
    const char *body;   /* the helpers it uses are prepended by mr_build_scripts */
    int         idem;   /* safe to repeat when the reply was lost */
};

#define RO(body)   MR_LUA_RO, body
#define RW(body)   MR_LUA_RW, body
#define FREE(body) MR_LUA_FREE, body

static const char *const mr_pieces[] = {MR_LUA_PRELUDE_PIECES};
#define MR_NPIECES  (sizeof(mr_pieces) / sizeof(mr_pieces[0]))
#define MR_PIECE_NAMES 8    /* most names one piece defines */

static const struct mr_script_def mr_scripts[S_NSCRIPTS] = {
    [S_LOOKUP]     = {"lookup", RO(MR_LUA_LOOKUP), 1},
    [S_MKNOD]      = {"mknod", RW(MR_LUA_MKNOD), 0},
    [S_LINK]       = {"link", RW(MR_LUA_LINK), 0},
    [S_UNLINK]     = {"unlink", FREE(MR_LUA_UNLINK), 0},
    [S_RMDIR]      = {"rmdir", FREE(MR_LUA_RMDIR), 0},
    [S_RENAME]     = {"rename", RW(MR_LUA_RENAME), 0},
    [S_SETATTR]    = {"setattr", FREE(MR_LUA_SETATTR), 1},
    [S_READDIR]    = {"readdir", RO(MR_LUA_READDIR), 1},
    [S_READLINK]   = {"readlink", RO(MR_LUA_READLINK), 1},
    [S_PURGE]      = {"purge", FREE(MR_LUA_PURGE), 1},
    [S_WRITE]      = {"write_slices", RW(MR_LUA_WRITE), 0},
    [S_TRUNCATE]   = {"truncate", FREE(MR_LUA_TRUNCATE), 1},
    [S_COMPACT]    = {"compact_chunk", RW(MR_LUA_COMPACT), 0},
    [S_XGET]       = {"getxattr", RO(MR_LUA_XGET), 1},
    [S_XSET]       = {"setxattr", RW(MR_LUA_XSET), 0},
    [S_XLIST]      = {"listxattr", RO(MR_LUA_XLIST), 1},
    [S_XREMOVE]    = {"removexattr", FREE(MR_LUA_XREMOVE), 0},
    [S_FLOCK]      = {"flock", RW(MR_LUA_FLOCK), 1},
    [S_GETLK]      = {"getlk", RO(MR_LUA_GETLK), 1},
    [S_SETLK]      = {"setlk", RW(MR_LUA_SETLK), 1},
    [S_FORMAT]     = {"format_init", RW(MR_LUA_FORMAT), 0},
    [S_ALLOC]      = {"alloc_ids", RW(MR_LUA_ALLOC), 1},
    [S_SESS_BEGIN] = {"session_begin", RW(MR_LUA_SESS_BEGIN), 0},
    [S_SESS_BEAT]  = {"session_heartbeat", FREE(MR_LUA_SESS_BEAT), 1},
    [S_SESS_LIST]  = {"session_list", RO(MR_LUA_SESS_LIST), 1},
    [S_SESS_CLEAN] = {"session_cleanup", FREE(MR_LUA_SESS_CLEAN), 1},
    [S_DELQ_PEEK]  = {"delq_peek", FREE(MR_LUA_DELQ_PEEK), 1},
    [S_NEXT_CHUNK] = {"next_chunk", RO(MR_LUA_NEXT_CHUNK), 1},
    /* the same scripts for F_UNLCK only: releasing a lock must work on a full server */
    [S_FLOCK_UN]   = {"flock_unlock", FREE(MR_LUA_FLOCK), 1},
    [S_SETLK_UN]   = {"setlk_unlock", FREE(MR_LUA_SETLK), 1},
};


/*----------------------------------------------------------------------------
 * A volume whose keys vanished
 *
 * A Redis restarted without persistence (or flushed, or the namespace deleted
 * under a mount) answers every op of a mounted volume with "no such inode":
 * applications would see ENOENT everywhere, even for the mount point.  Once an
 * instance has read the volume's format key (vol_seen), a sign of such a loss
 * -- a script reloaded after NOSCRIPT (the server restarted), the session gone
 * at a heartbeat, an op answered ENOENT -- makes it check that the key still
 * exists (at most once per MR_GONE_CHECK_NS, except after NOSCRIPT).  If it
 * does not, the volume is gone: one ERROR line, and every op fails with -EIO
 * (not -ENOENT) until a check finds the key again.
 *--------------------------------------------------------------------------*/

#define MR_GONE_CHECK_NS 1000000000LL

static int mr_gone(struct mr_priv *p)
{
    return __atomic_load_n(&p->gone, __ATOMIC_ACQUIRE);
}

/* Checks that the format key exists (force: even if checked less than
 * MR_GONE_CHECK_NS ago).  Returns 1 if the volume is gone, else 0. */
static int mr_volume_check(struct mr_priv *p, int force, const char *why)
{
    int64_t now = keg_mono_ns();
    int64_t last = __atomic_load_n(&p->gone_checked, __ATOMIC_ACQUIRE);
    if (!__atomic_load_n(&p->vol_seen, __ATOMIC_ACQUIRE))
        return 0;
    if (!force && now - last < MR_GONE_CHECK_NS)
        return mr_gone(p);
    if (!__atomic_compare_exchange_n(&p->gone_checked, &last, now, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) && !force)
        return mr_gone(p);      /* another thread is checking */
    char key[128];
    size_t kl = (size_t)snprintf(key, sizeof(key), "%ssetting", p->prefix);
    const char *argv[] = {"EXISTS", key};
    size_t lens[] = {6, kl};
    redisReply *r = NULL;
    if (mr_exec(p, 2, argv, lens, 1, "volume_check", &r) != 0)
        return mr_gone(p);      /* unreachable: not a verdict */
    int exists = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    int known = r->type == REDIS_REPLY_INTEGER;
    freeReplyObject(r);
    if (!known)
        return mr_gone(p);
    int was = __atomic_exchange_n(&p->gone, !exists, __ATOMIC_ACQ_REL);
    char addr[sizeof(p->addr)];
    mr_addr(p, addr, sizeof(addr));
    if (!exists && !was)
        KEG_ERR("the volume's metadata is gone from redis %s: its format key %ssetting does "
                "not exist any more (seen after: %s). Redis was restarted without persistence "
                "(no AOF/RDB), flushed, or the namespace was deleted; every operation fails "
                "with EIO until it is restored. Unmount; see docs/redis.md", addr,
                p->prefix, why);
    else if (exists && was)
        KEG_WARN("the volume's metadata at redis %s is back; operations resume", addr);
    return !exists;
}

/* printf-style command (read-only or idempotent ones only). */
static int mr_cmd(struct mr_priv *p, const char *what, redisReply **out, int argc,
                  const char **argv, const size_t *lens)
{
    *out = NULL;
    if (mr_gone(p) && mr_volume_check(p, 0, what))
        return -EIO;
    int rc = mr_exec(p, argc, argv, lens, 1, what, out);
    if (rc)
        return rc;
    if ((*out)->type == REDIS_REPLY_ERROR) {
        if (strncmp((*out)->str, "OOM", 3) == 0) {
            rc = -ENOSPC;
        } else {
            uint32_t sup;
            if (mr_log_ok(p, LIM_CMD_ERR, &sup))
                KEG_ERR("%s: redis error: %s (%" PRIu32 " similar lines suppressed)", what,
                        (*out)->str, sup);
            rc = -EIO;
        }
        freeReplyObject(*out);
        *out = NULL;
    }
    return rc;
}

/* Argument list builder. */
struct mr_args {
    int         n;
    const char *v[MR_MAXARGS];
    size_t      len[MR_MAXARGS];
    char        num[MR_MAXARGS][24];
};

static void mr_arg_bin(struct mr_args *a, const void *p, size_t len)
{
    KEG_ASSERT(a->n < MR_MAXARGS);
    a->v[a->n] = p;
    a->len[a->n] = len;
    a->n++;
}

static void mr_arg_str(struct mr_args *a, const char *s)
{
    mr_arg_bin(a, s, strlen(s));
}

static void mr_arg_u64(struct mr_args *a, uint64_t x)
{
    KEG_ASSERT(a->n < MR_MAXARGS);
    snprintf(a->num[a->n], sizeof(a->num[0]), "%" PRIu64, x);
    mr_arg_str(a, a->num[a->n]);
}

static void mr_arg_i64(struct mr_args *a, int64_t x)
{
    KEG_ASSERT(a->n < MR_MAXARGS);
    snprintf(a->num[a->n], sizeof(a->num[0]), "%" PRId64, x);
    mr_arg_str(a, a->num[a->n]);
}

static void mr_arg_hex(struct mr_args *a, uint64_t x, int width)
{
    KEG_ASSERT(a->n < MR_MAXARGS);
    snprintf(a->num[a->n], sizeof(a->num[0]), "%0*" PRIx64, width, x);
    mr_arg_str(a, a->num[a->n]);
}

/*----------------------------------------------------------------------------
 * Script text
 *--------------------------------------------------------------------------*/

static int mr_ident_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* 1 if Lua source src uses the name w (wlen bytes) as a whole word outside
 * string literals and comments. */
static int mr_lua_uses(const char *src, const char *w, size_t wlen)
{
    const char *s = src;
    while (*s) {
        if (*s == '\'' || *s == '"') {
            char q = *s++;
            while (*s && *s != q) {
                if (*s == '\\' && s[1])
                    s++;
                s++;
            }
            if (*s)
                s++;
        } else if (s[0] == '-' && s[1] == '-') {
            s += strcspn(s, "\n");
        } else if (mr_ident_char(*s)) {
            const char *b = s;
            while (mr_ident_char(*s))
                s++;
            if ((size_t)(s - b) == wlen && memcmp(b, w, wlen) == 0)
                return 1;
        } else {
            s++;
        }
    }
    return 0;
}

/* The names a prelude piece defines: "local function NAME" or
 * "local A, B = ...".  Returns how many (at most max). */
static int mr_piece_names(const char *piece, const char **names, size_t *lens, int max)
{
    const char *s = piece;
    int n = 0;
    KEG_ASSERT(strncmp(s, "local ", 6) == 0);
    s += 6;
    if (strncmp(s, "function ", 9) == 0) {
        s += 9;
        names[0] = s;
        while (mr_ident_char(*s))
            s++;
        lens[0] = (size_t)(s - names[0]);
        return 1;
    }
    while (n < max && *s && *s != '=' && *s != '\n') {
        while (*s == ' ' || *s == ',')
            s++;
        if (!mr_ident_char(*s))
            break;
        names[n] = s;
        while (mr_ident_char(*s))
            s++;
        lens[n] = (size_t)(s - names[n]);
        n++;
        while (*s == ' ')
            s++;
    }
    KEG_ASSERT(n > 0 && *s == '=');
    return n;
}

/* 1 if piece k is needed by body or by a piece below k that is needed. */
static int mr_piece_needed(size_t k, const char *body, const unsigned char *need)
{
    const char *names[MR_PIECE_NAMES];
    size_t lens[MR_PIECE_NAMES];
    int n = mr_piece_names(mr_pieces[k], names, lens, MR_PIECE_NAMES);
    for (int i = 0; i < n; i++) {
        if (mr_lua_uses(body, names[i], lens[i]))
            return 1;
        for (size_t j = k + 1; j < MR_NPIECES; j++)
            if (need[j] && mr_lua_uses(mr_pieces[j], names[i], lens[i]))
                return 1;
    }
    return 0;
}

/* Builds p->src[]: each script is its header, the prelude pieces it uses
 * (directly or through other pieces) in prelude order, and its body.  The
 * text depends only on the scripts of this version, so every mounter loads
 * the same SHA1.  OWNERSHIP: p->src[] is freed by mr_free_scripts.
 * Returns 0 or -ENOMEM. */
static int mr_build_scripts(struct mr_priv *p)
{
    for (int id = 0; id < S_NSCRIPTS; id++) {
        const struct mr_script_def *d = &mr_scripts[id];
        unsigned char need[MR_NPIECES];
        size_t len = strlen(d->head) + strlen(d->body) + 1;
        memset(need, 0, sizeof(need));
        /* a piece only uses pieces above it: one pass from the bottom up */
        for (size_t k = MR_NPIECES; k-- > 0;) {
            need[k] = (unsigned char)mr_piece_needed(k, d->body, need);
            if (need[k])
                len += strlen(mr_pieces[k]);
        }
        char *t = keg_malloc(len);
        if (!t)
            return -ENOMEM;
        size_t o = 0, l = strlen(d->head);
        memcpy(t, d->head, l);
        o += l;
        for (size_t k = 0; k < MR_NPIECES; k++) {
            if (!need[k])
                continue;
            l = strlen(mr_pieces[k]);
            memcpy(t + o, mr_pieces[k], l);
            o += l;
        }
        l = strlen(d->body);
        memcpy(t + o, d->body, l + 1);
        p->src[id] = t;
    }
    return 0;
}

static void mr_free_scripts(struct mr_priv *p)
{
    for (int id = 0; id < S_NSCRIPTS; id++) {
        keg_free(p->src[id]);
        p->src[id] = NULL;
    }
}

static int mr_load_script(struct mr_priv *p, int id)
{
    const char *argv[] = {"SCRIPT", "LOAD", p->src[id]};
    size_t lens[] = {6, 4, strlen(p->src[id])};
    redisReply *r;
    int rc = mr_cmd(p, "SCRIPT LOAD", &r, 3, argv, lens);
    if (rc)
        return rc;
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        KEG_ERR("SCRIPT LOAD %s: unexpected reply", mr_scripts[id].name);
        freeReplyObject(r);
        return -EIO;
    }
    /* sha[] is written only at open (single-threaded); later reloads just check it */
    if (p->sha[id][0]) {
        rc = memcmp(p->sha[id], r->str, 40) == 0 ? 0 : -EIO;
        if (rc)
            KEG_ERR("SCRIPT LOAD %s: the server computed a different SHA1", mr_scripts[id].name);
    } else {
        memcpy(p->sha[id], r->str, 40);
        p->sha[id][40] = '\0';
    }
    freeReplyObject(r);
    return rc;
}

/* Runs script id with args after the common ones (see meta_redis_lua_i.h).
 * On success *out is the script's array reply with element[0] == 0.
 * OWNERSHIP: caller frees *out with freeReplyObject().
 * Returns 0 or -errno (the script's errno, -ENOSPC for OOM, -EIO). */
static int mr_eval(struct mr_priv *p, int id, const struct mr_args *args, redisReply **out)
{
    const char *argv[MR_MAXARGS + 8];
    size_t lens[MR_MAXARGS + 8];
    char now_s[24], now_ns[24], sid[24];
    int64_t now = keg_now_ns();
    int argc = 0, rc;

    *out = NULL;
    snprintf(now_s, sizeof(now_s), "%" PRId64, (int64_t)(now / 1000000000LL));
    snprintf(now_ns, sizeof(now_ns), "%" PRId64, (int64_t)(now % 1000000000LL));
    snprintf(sid, sizeof(sid), "%" PRIu64, mr_sid(p));
    argv[argc++] = "EVALSHA";
    argv[argc++] = p->sha[id];
    argv[argc++] = "1";
    argv[argc++] = p->prefix;
    argv[argc++] = now_s;
    argv[argc++] = now_ns;
    argv[argc++] = sid;
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    for (int i = 0; args && i < args->n; i++) {
        argv[argc] = args->v[i];
        lens[argc++] = args->len[i];
    }
    if (mr_gone(p) && mr_volume_check(p, 0, mr_scripts[id].name))
        return -EIO;
    for (int tries = 0;; tries++) {
        redisReply *r;
        rc = mr_exec(p, argc, argv, lens, mr_scripts[id].idem, mr_scripts[id].name, &r);
        if (rc)
            return rc;
        if (r->type == REDIS_REPLY_ERROR) {
            if (strncmp(r->str, "NOSCRIPT", 8) == 0 && tries == 0) {
                freeReplyObject(r);
                KEG_INFO("reloading Lua scripts (server restarted or scripts flushed)");
                rc = mr_load_script(p, id);
                if (rc)
                    return rc;
                if (mr_volume_check(p, 1, "the redis server restarted"))
                    return -EIO;
                continue;
            }
            uint32_t sup;
            if (strncmp(r->str, "OOM", 3) == 0) {
                if (mr_log_ok(p, LIM_OOM, &sup))
                    KEG_WARN("%s: redis is out of memory (maxmemory reached): %s (%" PRIu32
                             " similar lines suppressed)",
                             mr_scripts[id].name, r->str, sup);
                rc = -ENOSPC;
            } else {
                if (mr_log_ok(p, LIM_SCRIPT_ERR, &sup))
                    KEG_ERR("%s: redis script error: %s (%" PRIu32 " similar lines suppressed)",
                            mr_scripts[id].name, r->str, sup);
                rc = -EIO;
            }
            freeReplyObject(r);
            return rc;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
            r->element[0]->type != REDIS_REPLY_INTEGER) {
            KEG_ERR("%s: unexpected reply type %d from redis", mr_scripts[id].name, r->type);
            freeReplyObject(r);
            return -EIO;
        }
        long long st = r->element[0]->integer;
        if (st != 0) {
            if (st == EIO && r->elements > 1 && r->element[1]->type == REDIS_REPLY_STRING)
                KEG_ERR("%s: %s (run fsck)", mr_scripts[id].name, r->element[1]->str);
            freeReplyObject(r);
            if (st == ENOENT && mr_volume_check(p, 0, mr_scripts[id].name))
                return -EIO;    /* not "no such file": the whole volume is gone */
            return (st > 0 && st < 4096) ? -(int)st : -EIO;
        }
        *out = r;
        return 0;
    }
}

/*----------------------------------------------------------------------------
 * Records
 *--------------------------------------------------------------------------*/

static uint32_t mr_get32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t mr_get64(const unsigned char *b)
{
    return (uint64_t)mr_get32(b) | (uint64_t)mr_get32(b + 4) << 32;
}

static void mr_put32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static void mr_put64(unsigned char *b, uint64_t v)
{
    mr_put32(b, (uint32_t)v);
    mr_put32(b + 4, (uint32_t)(v >> 32));
}

/* Decodes a packed attribute record (layout in meta_redis_lua_i.h). */
static int mr_attr_decode(uint64_t ino, const redisReply *e, struct keg_attr *a)
{
    if (!e || e->type != REDIS_REPLY_STRING ||
        (e->len != MR_ATTR_LEN && e->len != MR_ATTR_LEN_OLD)) {
        KEG_ERR("inode %" PRIu64 ": damaged attribute record (run fsck)", ino);
        return -EIO;
    }
    const unsigned char *b = (const unsigned char *)e->str;
    memset(a, 0, sizeof(*a));
    a->ino = ino;
    a->mode = mr_get32(b);
    a->uid = mr_get32(b + 4);
    a->gid = mr_get32(b + 8);
    a->nlink = mr_get32(b + 12);
    a->size = mr_get64(b + 16);
    a->rdev = mr_get64(b + 24);
    a->parent = mr_get64(b + 32);
    a->atime = (int64_t)mr_get64(b + 40);
    a->mtime = (int64_t)mr_get64(b + 48);
    a->ctime = (int64_t)mr_get64(b + 56);
    a->atimensec = mr_get32(b + 64);
    a->mtimensec = mr_get32(b + 68);
    a->ctimensec = mr_get32(b + 72);
    /* an older version's record has no alloc: st_blocks follows the size until
     * the inode's record is next written (then alloc = size, an upper bound) */
    a->alloc = KEG_ALLOC_UNKNOWN;
    if (e->len == MR_ATTR_LEN && S_ISREG(a->mode))
        a->alloc = KEG_MIN(mr_get64(b + 80), a->size);
    return 0;
}

static void mr_slice_pack(unsigned char *b, const struct keg_slice *s)
{
    mr_put64(b, s->id);
    mr_put32(b + 8, s->size);
    mr_put32(b + 12, s->off);
    mr_put32(b + 16, s->len);
    mr_put32(b + 20, s->pos);
}

static void mr_slice_unpack(const unsigned char *b, struct keg_slice *s)
{
    s->id = mr_get64(b);
    s->size = mr_get32(b + 8);
    s->off = mr_get32(b + 12);
    s->len = mr_get32(b + 16);
    s->pos = mr_get32(b + 20);
}

/* Key "{NS}<tag><ino>[_<indx>]" into buf. */
static size_t mr_key(const struct mr_priv *p, char *buf, size_t len, char tag, uint64_t ino,
                     int64_t indx)
{
    int n = indx >= 0 ? snprintf(buf, len, "%s%c%" PRIu64 "_%" PRId64, p->prefix, tag, ino, indx)
                      : snprintf(buf, len, "%s%c%" PRIu64, p->prefix, tag, ino);
    return n < 0 ? 0 : KEG_MIN((size_t)n, len - 1);
}

/* Inode numbers and slice ids must stay exact as Lua doubles. */
#define MR_ID_MAX (1ULL << 53)

/*----------------------------------------------------------------------------
 * Open, close
 *--------------------------------------------------------------------------*/

/* Reads maxmemory-policy through CONFIG GET, or INFO memory when CONFIG is
 * renamed away (managed services). */
static int mr_policy(struct mr_priv *p, char *buf, size_t len)
{
    redisReply *r;
    const char *cargv[] = {"CONFIG", "GET", "maxmemory-policy"};
    size_t clens[] = {6, 3, 16};
    buf[0] = '\0';
    int rc = mr_exec(p, 3, cargv, clens, 1, "CONFIG GET", &r);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING) {
        snprintf(buf, len, "%s", r->element[1]->str);
        freeReplyObject(r);
        return strcmp(buf, "noeviction") == 0;
    }
    freeReplyObject(r);
    const char *iargv[] = {"INFO", "memory"};
    size_t ilens[] = {4, 6};
    rc = mr_exec(p, 2, iargv, ilens, 1, "INFO memory", &r);
    if (rc)
        return rc;
    rc = -ENOTSUP;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        const char *s = strstr(r->str, "maxmemory_policy:");
        if (s) {
            s += strlen("maxmemory_policy:");
            size_t n = strcspn(s, "\r\n");
            snprintf(buf, len, "%.*s", (int)n, s);
            rc = strcmp(buf, "noeviction") == 0;
        }
    }
    freeReplyObject(r);
    return rc;
}

int keg_meta_redis_policy(struct keg_meta *m, char *buf, size_t len)
{
    if (!m || m->ops != &keg_meta_redis_ops || !PRIV(m)->inited) {
        if (len)
            buf[0] = '\0';
        return -EINVAL;
    }
    return mr_policy(PRIV(m), buf, len);
}

static void mr_close(struct keg_meta *m)
{
    struct mr_priv *p = PRIV(m);
    if (!p->inited)
        return;
    mr_names_free(p->names);
    p->names = NULL;
    pthread_mutex_lock(&p->lock);
    KEG_ASSERT(p->nidle == p->nopen);   /* no op may still be running */
    while (p->nidle > 0)
        redisFree(p->idle[--p->nidle]);
    p->nopen = 0;
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    mr_free_conf(p);
    mr_free_scripts(p);
    p->inited = 0;
}

static int mr_open(struct keg_meta *m, const char *url)
{
    struct mr_priv *p = PRIV(m);
    char redbuf[512];
    const char *red = m->url_redacted ? m->url_redacted
                                      : keg_url_redact(url, redbuf, sizeof(redbuf));
    char why[256] = "", addr[300];
    redisContext *c;
    int rc = mr_parse_url(p, url, red);
    if (rc) {
        mr_free_conf(p);
        return rc;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    p->spin_slots = ncpu >= 4 ? (int)KEG_MIN(ncpu / 2, 1024) : 1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->inited = 1;
    rc = mr_build_scripts(p);
    if (rc)
        goto fail;

    /* One attempt: an unreachable server at open is reported at once. */
    rc = mr_get(p, &c, why, sizeof(why));
    if (rc) {
        mr_addr(p, addr, sizeof(addr));
        if (p->kind == MR_SENTINEL && !addr[0])
            KEG_ERR("cannot reach redis master '%s' through the sentinels of %s: %s",
                    p->master, red, why);
        else
            KEG_ERR("cannot reach redis at %s (%s): %s", addr, red, why);
        goto fail;
    }
    mr_put(p, c, 0);
    for (int i = 0; i < S_NSCRIPTS; i++) {
        rc = mr_load_script(p, i);
        if (rc)
            goto fail;
    }
    char pol[64];
    rc = mr_policy(p, pol, sizeof(pol));
    if (rc == 0) {
        KEG_WARN("WARNING: redis %s has maxmemory-policy '%s': Redis may EVICT filesystem "
                 "metadata when it fills up and corrupt the volume.  Set "
                 "maxmemory-policy noeviction (see docs/redis.md).", red, pol);
    } else if (rc < 0) {
        KEG_WARN("cannot read maxmemory-policy of redis %s; make sure it is noeviction", red);
    }
    mr_addr(p, addr, sizeof(addr));
    KEG_DEBUG("connected to redis %s (%s), namespace %s, reply busy-poll %d us "
              "(at most %d threads)", addr, red, p->prefix, p->spin_us, p->spin_slots);
    return 0;
fail:
    mr_close(m);
    return rc < 0 ? rc : -EIO;
}

/*----------------------------------------------------------------------------
 * Volume
 *--------------------------------------------------------------------------*/

static int mr_format_init(struct keg_meta *m, const struct keg_format *f, uint32_t root_mode,
                          uint32_t uid, uint32_t gid, int force)
{
    struct mr_args a = {0};
    redisReply *r;
    char *text = NULL;
    int rc = keg_format_encode(f, &text);
    if (rc)
        return rc;
    mr_arg_str(&a, text);
    mr_arg_u64(&a, root_mode);
    mr_arg_u64(&a, uid);
    mr_arg_u64(&a, gid);
    mr_arg_str(&a, force ? "1" : "0");
    mr_arg_u64(&a, f->capacity);
    mr_arg_u64(&a, f->inodes);
    rc = mr_eval(PRIV(m), S_FORMAT, &a, &r);
    keg_free(text);
    if (rc == 0)
        freeReplyObject(r);
    return rc;
}

static int mr_format_load(struct keg_meta *m, struct keg_format *f)
{
    struct mr_priv *p = PRIV(m);
    char key[128];
    size_t kl = (size_t)snprintf(key, sizeof(key), "%ssetting", p->prefix);
    const char *argv[] = {"GET", key};
    size_t lens[] = {3, kl};
    redisReply *r;
    struct keg_format tmp;
    int rc = mr_cmd(p, "format_load", &r, 2, argv, lens);
    if (rc)
        return rc;
    if (r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return -ENOENT;
    }
    rc = keg_format_decode(r->str, &tmp);
    freeReplyObject(r);
    if (rc) {
        KEG_ERR("%s: the stored volume format is damaged", m->url_redacted);
        return -EIO;
    }
    *f = tmp;
    __atomic_store_n(&p->vol_seen, 1, __ATOMIC_RELEASE);
    return 0;
}

/* Deletes every key of the namespace: SCAN MATCH "{NS}*" + UNLINK in batches.
 * Idempotent (a repeated SCAN after a lost reply just finds fewer keys). */
static int mr_destroy(struct keg_meta *m)
{
    struct mr_priv *p = PRIV(m);
    char pattern[MR_NS_MAX + 8];
    char cursor[32] = "0";
    uint64_t total = 0;
    snprintf(pattern, sizeof(pattern), "%s*", p->prefix);
    __atomic_store_n(&p->vol_seen, 0, __ATOMIC_RELEASE);   /* its keys go on purpose */
    __atomic_store_n(&p->gone, 0, __ATOMIC_RELEASE);
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        size_t lens[] = {4, strlen(cursor), 5, strlen(pattern), 5, 4};
        redisReply *r;
        int rc = mr_cmd(p, "destroy", &r, 6, argv, lens);
        if (rc)
            return rc;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            return -EIO;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        if (keys->elements > 0) {
            const char **argv2 = keg_malloc((keys->elements + 1) * sizeof(char *));
            size_t *lens2 = keg_malloc((keys->elements + 1) * sizeof(size_t));
            if (!argv2 || !lens2) {
                keg_free(argv2);
                keg_free(lens2);
                freeReplyObject(r);
                return -ENOMEM;
            }
            argv2[0] = "UNLINK";
            lens2[0] = 6;
            for (size_t i = 0; i < keys->elements; i++) {
                argv2[i + 1] = keys->element[i]->str;
                lens2[i + 1] = keys->element[i]->len;
            }
            redisReply *d;
            rc = mr_exec(p, (int)keys->elements + 1, argv2, lens2, 1, "destroy", &d);
            keg_free(argv2);
            keg_free(lens2);
            if (rc == 0) {
                if (d->type == REDIS_REPLY_ERROR) {
                    KEG_ERR("destroy: redis error: %s", d->str);
                    rc = -EIO;
                }
                freeReplyObject(d);
            }
            if (rc) {
                freeReplyObject(r);
                return rc;
            }
            total += keys->elements;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    KEG_INFO("destroyed %" PRIu64 " keys of namespace %s in %s", total, p->prefix,
             m->url_redacted);
    return 0;
}

static int mr_alloc_ids(struct keg_meta *m, int kind, uint32_t n, uint64_t *first)
{
    struct mr_priv *p = PRIV(m);
    struct mr_args a = {0};
    redisReply *r;
    *first = 0;
    if ((kind != KEG_ID_INODE && kind != KEG_ID_SLICE) || n == 0)
        return -EINVAL;
    if (kind == KEG_ID_INODE) {
        /* served from the batch that a mknod reserved, else asked for; either
         * way the next mknods reserve a batch of this size again.  Callers
         * taking one number at a time get none reserved: numbers reserved
         * ahead are lost at close, and they would lose one per close. */
        int hit = 0;
        pthread_mutex_lock(&p->lock);
        p->ino_batch = n >= MR_PREFETCH_MIN ? KEG_MIN(n, MR_PREFETCH_MAX) : 0;
        if (p->pre_n >= n) {
            *first = p->pre_first;
            p->pre_first += n;
            p->pre_n -= n;
            hit = 1;
        } else {
            p->pre_n = 0;   /* too small for this caller: skipped */
        }
        pthread_mutex_unlock(&p->lock);
        if (hit)
            return 0;
    }
    mr_arg_str(&a, kind == KEG_ID_INODE ? "0" : "1");
    mr_arg_u64(&a, n);
    int rc = mr_eval(p, S_ALLOC, &a, &r);
    if (rc)
        return rc;
    if (r->elements < 2 || r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->integer <= 0 || (uint64_t)r->element[1]->integer + n > MR_ID_MAX) {
        KEG_ERR("alloc_ids: id counter out of range");
        rc = -EIO;
    } else {
        *first = (uint64_t)r->element[1]->integer;
    }
    freeReplyObject(r);
    return rc;
}

static int mr_statfs(struct keg_meta *m, uint64_t *used_bytes, uint64_t *used_inodes)
{
    struct mr_priv *p = PRIV(m);
    char key[128];
    size_t kl = (size_t)snprintf(key, sizeof(key), "%scounter", p->prefix);
    const char *argv[] = {"HMGET", key, "usedSpace", "usedInodes"};
    size_t lens[] = {5, kl, 9, 10};
    redisReply *r;
    int rc = mr_cmd(p, "statfs", &r, 4, argv, lens);
    if (rc)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        return -EIO;
    }
    long long v[2] = {0, 0};
    for (int i = 0; i < 2; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING)
            v[i] = strtoll(r->element[i]->str, NULL, 10);
    freeReplyObject(r);
    *used_bytes = v[0] < 0 ? 0 : (uint64_t)v[0];
    *used_inodes = v[1] < 0 ? 0 : (uint64_t)v[1];
    return 0;
}

/*----------------------------------------------------------------------------
 * Sessions
 *--------------------------------------------------------------------------*/

static int mr_names_dial(void *arg, redisContext **out, uint64_t *gen, char *why,
                         size_t whylen)
{
    return mr_connect(arg, out, gen, why, whylen);
}

/* A mounting session gets the directory name cache (meta_redis_names.c)
 * unless dircache=0; without it every lookup asks the server. */
static void mr_names_start(struct mr_priv *p)
{
    char chan[MR_NS_MAX + 8];
    if (p->names_cap == 0 || p->names)
        return;
    snprintf(chan, sizeof(chan), "%sn", p->prefix);
    p->names = mr_names_new(p->names_cap, chan, mr_names_dial, p, &p->addr_gen);
    if (!p->names)
        KEG_WARN("directory name cache not started (out of memory or threads); every "
                 "lookup asks redis");
}

/* The name_cache_stats op: *st zeroed when there is no name cache, and then
 * -ENOENT (no session, or dircache=0). */
static int mr_name_cache_stats(struct keg_meta *m, struct keg_meta_name_cache *st)
{
    mr_names_get_stats(PRIV(m)->names, st);
    return PRIV(m)->names ? 0 : -ENOENT;
}

static int mr_session_begin(struct keg_meta *m, const char *info, uint64_t *sid)
{
    struct mr_priv *p = PRIV(m);
    struct mr_args a = {0};
    redisReply *r;
    if (mr_sid(p))
        return -EEXIST;
    mr_arg_str(&a, info ? info : "");
    int rc = mr_eval(p, S_SESS_BEGIN, &a, &r);
    if (rc)
        return rc;
    if (r->elements < 2 || r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->integer <= 0) {
        rc = -EIO;
    } else {
        uint64_t s = (uint64_t)r->element[1]->integer;
        __atomic_store_n(&p->sid, s, __ATOMIC_RELEASE);
        *sid = s;
    }
    freeReplyObject(r);
    if (rc == 0)
        mr_names_start(p);
    return rc;
}

static int mr_session_resume(struct keg_meta *m, uint64_t sid, const char *info)
{
    struct mr_priv *p = PRIV(m);
    struct mr_args a = {0};
    redisReply *r;
    if (mr_sid(p))
        return -EEXIST;
    /* the scripts read the session id from p->sid: set it for this call */
    __atomic_store_n(&p->sid, sid, __ATOMIC_RELEASE);
    mr_arg_str(&a, info ? info : "");
    int rc = mr_eval(p, S_SESS_BEAT, &a, &r);      /* the heartbeat, with the new info */
    if (rc) {
        __atomic_store_n(&p->sid, 0, __ATOMIC_RELEASE);
        return rc;
    }
    freeReplyObject(r);
    mr_names_start(p);
    return 0;
}

static int mr_session_heartbeat(struct keg_meta *m)
{
    struct mr_priv *p = PRIV(m);
    redisReply *r;
    uint64_t sid = mr_sid(p);
    if (!sid)
        return -EINVAL;
    int rc = mr_eval(p, S_SESS_BEAT, NULL, &r);
    if (rc == 0)
        freeReplyObject(r);
    else if (rc == -ENOENT)
        KEG_WARN("session %" PRIu64 " was removed by another client (stale heartbeat?)", sid);
    /* mr_eval found the volume gone (logged there) */
    return rc;
}

/* Releases sid's locks, purges its pending inodes and removes it, in bounded
 * script calls (each does at most MR_CLEAN_BATCH items). */
static int mr_session_drop(struct mr_priv *p, uint64_t sid)
{
    for (;;) {
        struct mr_args a = {0};
        redisReply *r;
        mr_arg_u64(&a, sid);
        mr_arg_u64(&a, MR_CLEAN_BATCH);
        int rc = mr_eval(p, S_SESS_CLEAN, &a, &r);
        if (rc)
            return rc;
        int done = r->elements > 1 && r->element[1]->type == REDIS_REPLY_INTEGER &&
                   r->element[1]->integer == 1;
        freeReplyObject(r);
        if (done)
            return 0;
    }
}

static int mr_session_end(struct keg_meta *m)
{
    struct mr_priv *p = PRIV(m);
    uint64_t sid = mr_sid(p);
    if (!sid)
        return 0;
    mr_names_free(p->names);
    p->names = NULL;
    int rc = mr_session_drop(p, sid);
    if (rc == 0)
        __atomic_store_n(&p->sid, 0, __ATOMIC_RELEASE);
    return rc;
}

static int mr_session_list(struct keg_meta *m, keg_meta_session_cb *cb, void *arg)
{
    redisReply *r;
    int rc = mr_eval(PRIV(m), S_SESS_LIST, NULL, &r);
    if (rc)
        return rc;
    for (size_t i = 1; i + 3 <= r->elements; i += 3) {
        const redisReply *sid = r->element[i], *hb = r->element[i + 1], *info = r->element[i + 2];
        if (sid->type != REDIS_REPLY_STRING || hb->type != REDIS_REPLY_STRING ||
            info->type != REDIS_REPLY_STRING)
            continue;
        struct keg_session_info s = {.sid = strtoull(sid->str, NULL, 10),
                                     .heartbeat = (int64_t)strtod(hb->str, NULL),
                                     .info = info->str};
        if (cb(arg, &s))
            break;
    }
    freeReplyObject(r);
    return 0;
}

static int mr_session_clean_stale(struct keg_meta *m, int64_t max_age, uint32_t *cleaned)
{
    struct mr_priv *p = PRIV(m);
    char key[128], maxs[32];
    size_t kl = (size_t)snprintf(key, sizeof(key), "%ssessions", p->prefix);
    int64_t limit = keg_now_ns() / 1000000000LL - (max_age < 0 ? 0 : max_age);
    snprintf(maxs, sizeof(maxs), "%" PRId64, limit);
    const char *argv[] = {"ZRANGEBYSCORE", key, "-inf", maxs};
    size_t lens[] = {13, kl, 4, strlen(maxs)};
    redisReply *r;
    uint32_t n = 0;
    int rc = mr_cmd(p, "session_clean_stale", &r, 4, argv, lens);
    if (rc)
        return rc;
    uint64_t self = mr_sid(p);
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_STRING)
            continue;
        uint64_t sid = strtoull(r->element[i]->str, NULL, 10);
        if (sid == self || sid == 0)
            continue;
        KEG_INFO("cleaning up stale session %" PRIu64, sid);
        rc = mr_session_drop(p, sid);
        if (rc)
            break;
        n++;
    }
    freeReplyObject(r);
    if (rc == 0)
        *cleaned = n;
    return rc;
}

/*----------------------------------------------------------------------------
 * Namespace
 *--------------------------------------------------------------------------*/

/* Decodes the attr in element i of a script reply. */
static int mr_reply_attr(const redisReply *r, size_t i, uint64_t ino, struct keg_attr *out)
{
    if (r->elements <= i)
        return -EIO;
    return mr_attr_decode(ino, r->element[i], out);
}

/* Runs script id with args and decodes the attributes of ino at reply element 1.
 * *out (may be NULL) is set only on success.  Returns 0 or -errno. */
static int mr_eval_attr(struct keg_meta *m, int id, const struct mr_args *args, uint64_t ino,
                        struct keg_attr *out)
{
    struct keg_attr tmp;
    redisReply *r;
    int rc = mr_eval(PRIV(m), id, args, &r);
    if (rc)
        return rc;
    rc = mr_reply_attr(r, 1, ino, &tmp);
    freeReplyObject(r);
    if (rc == 0 && out)
        *out = tmp;
    return rc;
}

/* Records the parent attributes at reply elements i.. (directories pino[0..n))
 * for keg_meta_parents(); a missing or damaged element ends the list. */
static void mr_note_parents(const redisReply *r, size_t i, const uint64_t *pino, int n)
{
    for (int k = 0; k < n; k++) {
        struct keg_attr pa;
        if (r->elements <= i + (size_t)k || mr_attr_decode(pino[k], r->element[i + k], &pa))
            return;
        keg_meta_parents_add(&pa);
    }
}

/* mr_eval_attr for mknod and link: the new attributes of directory pino
 * follow at reply element 2.  *more (if not NULL) = the integer at element 3,
 * 0 if there is none (also on failure). */
static int mr_eval_attr_parent(struct keg_meta *m, int id, const struct mr_args *args,
                               uint64_t ino, uint64_t pino, struct keg_attr *out,
                               long long *more)
{
    struct keg_attr tmp;
    redisReply *r;
    if (more)
        *more = 0;
    int rc = mr_eval(PRIV(m), id, args, &r);
    if (rc)
        return rc;
    rc = mr_reply_attr(r, 1, ino, &tmp);
    if (rc == 0) {
        mr_note_parents(r, 2, &pino, 1);
        if (out)
            *out = tmp;
        if (more && r->elements > 3 && r->element[3]->type == REDIS_REPLY_INTEGER)
            *more = r->element[3]->integer;
    }
    freeReplyObject(r);
    return rc;
}

/* The string at reply element 1 copied into buf (size 0: only its length).
 * TAKES: r (freed).  Returns its length, -ERANGE (longer than size) or -EIO (no string). */
static ssize_t mr_reply_copy(redisReply *r, void *buf, size_t size)
{
    const redisReply *v = r->elements > 1 ? r->element[1] : NULL;
    ssize_t len;
    if (!v || v->type != REDIS_REPLY_STRING) {
        len = -EIO;
    } else if (size && v->len > size) {
        len = -ERANGE;
    } else {
        len = (ssize_t)v->len;
        if (size && v->len)
            memcpy(buf, v->str, v->len);
    }
    freeReplyObject(r);
    return len;
}

static int mr_lookup(struct keg_meta *m, uint64_t parent, const char *name, struct keg_attr *out)
{
    struct mr_args a = {0};
    redisReply *r;
    int rc;
    struct mr_priv *p = PRIV(m);
    uint64_t ticket;
    uint32_t want;
    if (mr_names_lookup(p->names, parent, name, &ticket, &want))
        return -ENOENT;
    mr_arg_u64(&a, parent);
    mr_arg_str(&a, name);
    mr_arg_u64(&a, want);
    rc = mr_eval(p, S_LOOKUP, &a, &r);
    if (rc) {
        mr_names_fill_end(p->names, parent, ticket, NULL);
        return rc;
    }
    /* the inode number is not in the record: the script returns it (0: no
     * such name, and the directory's names follow) */
    struct keg_attr tmp;
    rc = -EIO;
    if (r->elements > 3 && r->element[2]->type == REDIS_REPLY_INTEGER &&
        r->element[2]->integer == 0 && r->element[3]->type == REDIS_REPLY_ARRAY) {
        mr_names_fill_end(p->names, parent, ticket, r->element[3]);
        ticket = 0;
        rc = -ENOENT;
    } else if (r->elements > 2 && r->element[2]->type == REDIS_REPLY_INTEGER) {
        rc = mr_reply_attr(r, 1, (uint64_t)r->element[2]->integer, &tmp);
    }
    mr_names_fill_end(p->names, parent, ticket, NULL);
    freeReplyObject(r);
    if (rc)
        return rc;
    *out = tmp;
    return 0;
}

static int mr_getattr(struct keg_meta *m, uint64_t ino, struct keg_attr *out)
{
    struct mr_priv *p = PRIV(m);
    char key[128];
    size_t kl = mr_key(p, key, sizeof(key), 'i', ino, -1);
    const char *argv[] = {"GET", key};
    size_t lens[] = {3, kl};
    redisReply *r;
    struct keg_attr tmp;
    int rc = mr_cmd(p, "getattr", &r, 2, argv, lens);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_NIL)
        rc = -ENOENT;
    else
        rc = mr_attr_decode(ino, r, &tmp);
    freeReplyObject(r);
    /* a missing inode may be the whole volume gone (at most one check a second) */
    if (rc == -ENOENT && mr_volume_check(p, 0, "getattr"))
        rc = -EIO;
    if (rc == 0)
        *out = tmp;
    return rc;
}

static int mr_setattr(struct keg_meta *m, uint64_t ino, unsigned set, const struct keg_attr *in,
                      struct keg_attr *out)
{
    struct mr_args a = {0};
    struct keg_attr zero;
    memset(&zero, 0, sizeof(zero));
    if (!in)
        in = &zero;
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, set & 0xff);
    mr_arg_u64(&a, in->mode);
    mr_arg_u64(&a, in->uid);
    mr_arg_u64(&a, in->gid);
    mr_arg_i64(&a, in->atime);
    mr_arg_u64(&a, in->atimensec);
    mr_arg_i64(&a, in->mtime);
    mr_arg_u64(&a, in->mtimensec);
    mr_arg_i64(&a, in->ctime);
    mr_arg_u64(&a, in->ctimensec);
    return mr_eval_attr(m, S_SETATTR, &a, ino, out);
}

static int mr_mknod(struct keg_meta *m, uint64_t parent, const char *name, uint64_t ino,
                    uint32_t mode, uint32_t uid, uint32_t gid, uint64_t rdev, const char *target,
                    struct keg_attr *out)
{
    struct mr_args a = {0};
    keg_meta_parents_begin();
    int rc;
    /* name, type, symlink target and ino > root: checked by keg_meta_mknod */
    if (!S_ISLNK(mode))
        target = "";
    if (ino >= MR_ID_MAX)
        return -EINVAL;
    mr_arg_u64(&a, parent);
    mr_arg_str(&a, name);
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, mode);
    mr_arg_u64(&a, uid);
    mr_arg_u64(&a, gid);
    mr_arg_u64(&a, rdev);
    mr_arg_str(&a, target);
    /* the next batch of inode numbers rides along (see mr_alloc_ids) */
    struct mr_priv *p = PRIV(m);
    uint32_t want = 0;
    pthread_mutex_lock(&p->lock);
    if (p->ino_batch && p->pre_n == 0 && !p->pre_busy) {
        want = p->ino_batch;
        p->pre_busy = 1;
    }
    pthread_mutex_unlock(&p->lock);
    mr_arg_u64(&a, want);
    mr_names_add(p->names, parent, name);
    long long first = 0;
    rc = mr_eval_attr_parent(m, S_MKNOD, &a, ino, parent, out, want ? &first : NULL);
    if (want) {
        pthread_mutex_lock(&p->lock);
        p->pre_busy = 0;
        if (first > (long long)KEG_ROOT_INO && (uint64_t)first + want <= MR_ID_MAX) {
            p->pre_first = (uint64_t)first;
            p->pre_n = want;
        }
        pthread_mutex_unlock(&p->lock);
    }
    return rc;
}

static int mr_link(struct keg_meta *m, uint64_t ino, uint64_t newparent, const char *newname,
                   struct keg_attr *out)
{
    struct mr_args a = {0};
    keg_meta_parents_begin();
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, newparent);
    mr_arg_str(&a, newname);
    mr_names_add(PRIV(m)->names, newparent, newname);
    return mr_eval_attr_parent(m, S_LINK, &a, ino, newparent, out, NULL);
}

/* Reads {gone_ino, gone_mode, gone_size, gone_purged, queued} from elements i..i+4. */
static void mr_reply_gone(const redisReply *r, size_t i, struct keg_unlinked *gone)
{
    memset(gone, 0, sizeof(*gone));
    if (r->elements < i + 5)
        return;
    for (size_t k = i; k < i + 5; k++)
        if (r->element[k]->type != REDIS_REPLY_INTEGER)
            return;
    gone->ino = (uint64_t)r->element[i]->integer;
    gone->mode = (uint32_t)r->element[i + 1]->integer;
    gone->size = (uint64_t)r->element[i + 2]->integer;
    gone->purged = (uint32_t)r->element[i + 3]->integer;
    gone->queued = (uint32_t)r->element[i + 4]->integer;
}

/* The open-inode set argument of the unlink and rename scripts: ",ino,ino,"
 * or "-" when the inode that loses its last link must stay pending (no hook,
 * no session, too many open).  buf holds KEG_META_OPEN_MAX numbers. */
static const char *mr_open_arg(struct keg_meta *m, char *buf, size_t len)
{
    uint64_t set[KEG_META_OPEN_MAX];
    int n = keg_meta_open_set(m, mr_sid(PRIV(m)) != 0, set);
    size_t o = 1;
    if (n < 0)
        return "-";
    buf[0] = ',';
    buf[1] = '\0';
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%" PRIu64 ",", set[i]);
    return o < len ? buf : "-";
}

static int mr_unlink(struct keg_meta *m, uint64_t parent, const char *name,
                     struct keg_unlinked *gone)
{
    struct mr_args a = {0};
    redisReply *r;
    keg_meta_parents_begin();
    int rc;
    char openset[KEG_META_OPEN_MAX * 21 + 2];
    mr_arg_u64(&a, parent);
    mr_arg_str(&a, name);
    mr_arg_str(&a, mr_open_arg(m, openset, sizeof(openset)));
    rc = mr_eval(PRIV(m), S_UNLINK, &a, &r);
    if (rc)
        return rc;
    if (gone)
        mr_reply_gone(r, 1, gone);
    mr_note_parents(r, 6, &parent, 1);
    freeReplyObject(r);
    return 0;
}

static int mr_rmdir(struct keg_meta *m, uint64_t parent, const char *name)
{
    struct mr_args a = {0};
    redisReply *r;
    keg_meta_parents_begin();
    int rc;
    mr_arg_u64(&a, parent);
    mr_arg_str(&a, name);
    rc = mr_eval(PRIV(m), S_RMDIR, &a, &r);
    if (rc)
        return rc;
    mr_note_parents(r, 1, &parent, 1);
    freeReplyObject(r);
    return 0;
}

static int mr_rename(struct keg_meta *m, uint64_t parent, const char *name, uint64_t newparent,
                     const char *newname, unsigned flags, struct keg_attr *moved,
                     struct keg_unlinked *gone)
{
    struct mr_args a = {0};
    struct keg_attr tmp;
    redisReply *r;
    keg_meta_parents_begin();
    int rc;
    mr_arg_u64(&a, parent);
    mr_arg_str(&a, name);
    mr_arg_u64(&a, newparent);
    mr_arg_str(&a, newname);
    char openset[KEG_META_OPEN_MAX * 21 + 2];
    mr_arg_u64(&a, flags);
    mr_arg_str(&a, mr_open_arg(m, openset, sizeof(openset)));
    mr_names_add(PRIV(m)->names, newparent, newname);
    if (flags & KEG_RENAME_EXCHANGE)
        mr_names_add(PRIV(m)->names, parent, name);
    rc = mr_eval(PRIV(m), S_RENAME, &a, &r);
    if (rc)
        return rc;
    rc = -EIO;
    if (r->elements > 2 && r->element[2]->type == REDIS_REPLY_INTEGER)
        rc = mr_reply_attr(r, 1, (uint64_t)r->element[2]->integer, &tmp);
    if (rc == 0) {
        uint64_t pinos[2] = {parent, newparent};
        if (moved)
            *moved = tmp;
        if (gone)
            mr_reply_gone(r, 3, gone);
        mr_note_parents(r, 8, pinos, parent == newparent ? 1 : 2);
    }
    freeReplyObject(r);
    return rc;
}

/* Pages through the entries with one script call per MR_READDIR_PAGE names. */
static int mr_readdir(struct keg_meta *m, uint64_t ino, const char *after, uint32_t max, int plus,
                      keg_meta_dirent_cb *cb, void *arg)
{
    struct mr_priv *p = PRIV(m);
    char *cursor = NULL;
    int delivered = 0, rc = 0, stop = 0;
    size_t step = plus ? 4 : 2;     /* name, dirent[, attr, has xattrs] */
    if (after && *after) {
        cursor = keg_strdup(after);
        if (!cursor)
            return -ENOMEM;
    }
    while (!stop) {
        struct mr_args a = {0};
        redisReply *r;
        uint32_t page = MR_READDIR_PAGE;
        if (max && max - (uint32_t)delivered < page)
            page = max - (uint32_t)delivered;
        mr_arg_u64(&a, ino);
        mr_arg_str(&a, cursor ? "1" : "0");
        mr_arg_str(&a, cursor ? cursor : "");
        mr_arg_u64(&a, page);
        mr_arg_str(&a, plus ? "1" : "0");
        rc = mr_eval(p, S_READDIR, &a, &r);
        if (rc)
            break;
        if (r->elements < 3 || r->element[1]->type != REDIS_REPLY_INTEGER ||
            r->element[2]->type != REDIS_REPLY_STRING) {
            freeReplyObject(r);
            rc = -EIO;
            break;
        }
        long long scanned = r->element[1]->integer;
        size_t n = (r->elements - 3) / step;
        for (size_t i = 0; i < n; i++) {
            const redisReply *nm = r->element[3 + i * step], *dv = r->element[4 + i * step];
            struct keg_attr at;
            if (nm->type != REDIS_REPLY_STRING || dv->type != REDIS_REPLY_STRING ||
                dv->len != MR_DIRENT_LEN) {
                KEG_ERR("directory %" PRIu64 ": damaged entry (run fsck)", ino);
                rc = -EIO;
                stop = 1;
                break;
            }
            const unsigned char *b = (const unsigned char *)dv->str;
            struct keg_dirent de = {.name = nm->str, .ino = mr_get64(b),
                                    .type = (uint32_t)b[8] | (uint32_t)b[9] << 8, .attr = NULL};
            if (plus) {
                const redisReply *xv = r->element[6 + i * step];
                rc = mr_attr_decode(de.ino, r->element[5 + i * step], &at);
                if (rc == 0 && xv->type != REDIS_REPLY_INTEGER)
                    rc = -EIO;
                if (rc) {
                    stop = 1;
                    break;
                }
                de.attr = &at;
                de.no_xattr = xv->integer == 0;
            }
            if (cb(arg, &de)) {
                stop = 1;
                break;
            }
            delivered++;
        }
        if (!stop && scanned > 0) {
            keg_free(cursor);
            cursor = keg_strdup(r->element[2]->str);
            if (!cursor) {
                rc = -ENOMEM;
                stop = 1;
            }
        }
        if (scanned < (long long)page || (max && (uint32_t)delivered >= max))
            stop = 1;
        freeReplyObject(r);
    }
    keg_free(cursor);
    return rc < 0 ? rc : delivered;
}

static ssize_t mr_readlink(struct keg_meta *m, uint64_t ino, char *buf, size_t size)
{
    struct mr_args a = {0};
    redisReply *r;
    mr_arg_u64(&a, ino);
    int rc = mr_eval(PRIV(m), S_READLINK, &a, &r);
    if (rc)
        return rc;
    return mr_reply_copy(r, buf, size);
}

static int mr_next_chunk(struct keg_meta *m, uint64_t ino, uint32_t from, uint32_t *indx)
{
    struct mr_args a = {0};
    redisReply *r;
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, from);
    int rc = mr_eval(PRIV(m), S_NEXT_CHUNK, &a, &r);
    if (rc)
        return rc;
    if (r->elements < 2 || r->element[1]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return -EIO;
    }
    *indx = (uint32_t)r->element[1]->integer;
    freeReplyObject(r);
    return 0;
}

static int mr_purge(struct keg_meta *m, uint64_t ino)
{
    struct mr_args a = {0};
    redisReply *r;
    mr_arg_u64(&a, ino);
    int rc = mr_eval(PRIV(m), S_PURGE, &a, &r);
    if (rc == 0)
        freeReplyObject(r);
    return rc;
}

/*----------------------------------------------------------------------------
 * Data
 *--------------------------------------------------------------------------*/

static int mr_read_chunk(struct keg_meta *m, uint64_t ino, uint32_t indx, struct keg_slice **out,
                         size_t *n)
{
    struct mr_priv *p = PRIV(m);
    char key[128];
    size_t kl = mr_key(p, key, sizeof(key), 'c', ino, indx);
    const char *argv[] = {"GET", key};
    size_t lens[] = {3, kl};
    redisReply *r;
    int rc = mr_cmd(p, "read_chunk", &r, 2, argv, lens);
    if (rc)
        return rc;
    struct keg_slice *s = NULL;
    size_t cnt = 0;
    if (r->type == REDIS_REPLY_STRING && r->len > 0) {
        if (r->len % MR_REC) {
            KEG_ERR("chunk %" PRIu64 ":%" PRIu32 " has a damaged slice list", ino, indx);
            freeReplyObject(r);
            return -EIO;
        }
        cnt = r->len / MR_REC;
        s = keg_malloc(cnt * sizeof(*s));
        if (!s) {
            freeReplyObject(r);
            return -ENOMEM;
        }
        for (size_t i = 0; i < cnt; i++)
            mr_slice_unpack((const unsigned char *)r->str + i * MR_REC, &s[i]);
    } else if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return -EIO;
    }
    freeReplyObject(r);
    *out = s;
    *n = cnt;
    return 0;
}

static int mr_write_slices(struct keg_meta *m, uint64_t ino, size_t n,
                           const struct keg_chunk_slice *cs, uint64_t min_size, unsigned flags,
                           uint32_t *nslices, struct keg_attr *out)
{
    struct mr_args a = {0};
    struct keg_attr tmp;
    redisReply *r;
    /* the slice list is checked by keg_meta_write_slices; ids must fit Lua's numbers */
    for (size_t i = 0; i < n; i++) {
        if (cs[i].s.id >= MR_ID_MAX)
            return -EINVAL;
    }
    if (min_size >= MR_ID_MAX)
        return -EFBIG;
    unsigned char *recs = keg_malloc(n ? n * (MR_REC + 4) : 1);
    if (!recs)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        mr_put32(recs + i * (MR_REC + 4), cs[i].indx);
        mr_slice_pack(recs + i * (MR_REC + 4) + 4, &cs[i].s);
    }
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, min_size);
    mr_arg_u64(&a, flags & (KEG_WS_SHARE | KEG_WS_NOMTIME));
    mr_arg_bin(&a, recs, n * (MR_REC + 4));
    int rc = mr_eval(PRIV(m), S_WRITE, &a, &r);
    keg_free(recs);
    if (rc)
        return rc;
    rc = mr_reply_attr(r, 1, ino, &tmp);
    if (rc == 0) {
        if (nslices)
            *nslices = (r->elements > 2 && r->element[2]->type == REDIS_REPLY_INTEGER)
                           ? (uint32_t)r->element[2]->integer : 0;
        if (out)
            *out = tmp;
    }
    freeReplyObject(r);
    return rc;
}

static int mr_truncate(struct keg_meta *m, uint64_t ino, uint64_t size, struct keg_attr *out)
{
    struct mr_args a = {0};
    if (size >= MR_ID_MAX)
        return -EFBIG;
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, size);
    return mr_eval_attr(m, S_TRUNCATE, &a, ino, out);
}

static int mr_compact_chunk(struct keg_meta *m, uint64_t ino, uint32_t indx,
                            const struct keg_slice *old, size_t nold, size_t keep,
                            const struct keg_slice *repl)
{
    struct mr_args a = {0};
    unsigned char rb[MR_REC];
    redisReply *r;
    if (nold == 0 || keep >= nold || !repl || !old)
        return -EINVAL;
    unsigned char *ob = keg_malloc(nold * MR_REC);
    if (!ob)
        return -ENOMEM;
    for (size_t i = 0; i < nold; i++)
        mr_slice_pack(ob + i * MR_REC, &old[i]);
    mr_slice_pack(rb, repl);
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, indx);
    mr_arg_bin(&a, ob, nold * MR_REC);
    mr_arg_bin(&a, rb, MR_REC);
    mr_arg_u64(&a, keep);
    int rc = mr_eval(PRIV(m), S_COMPACT, &a, &r);
    keg_free(ob);
    if (rc == 0)
        freeReplyObject(r);
    return rc;
}

/* One script: it first reclaims a bounded batch of the chunks that purge left
 * behind for huge files (see MR_LUA_DELQ_PEEK), then reads the queue. */
static int mr_delq_peek(struct keg_meta *m, struct keg_del_slice *out, uint32_t max)
{
    struct mr_args a = {0};
    if (max == 0)
        return 0;
    mr_arg_u64(&a, max);
    redisReply *r;
    int rc = mr_eval(PRIV(m), S_DELQ_PEEK, &a, &r);
    if (rc)
        return rc;
    int n = 0;
    for (size_t i = 1; i < r->elements && n < (int)max; i++) {
        const redisReply *e = r->element[i];
        char *us;
        if (e->type != REDIS_REPLY_STRING)
            continue;
        unsigned long long id = strtoull(e->str, &us, 10);
        if (*us != '_')
            continue;
        out[n].id = id;
        out[n].size = (uint32_t)strtoul(us + 1, NULL, 10);
        n++;
    }
    freeReplyObject(r);
    return n;
}

/* One ZREM of "id_size" members: atomic and idempotent. */
static int mr_delq_ack(struct keg_meta *m, const struct keg_del_slice *done, uint32_t n)
{
    struct mr_priv *p = PRIV(m);
    char key[128];
    if (n == 0)
        return 0;
    size_t kl = (size_t)snprintf(key, sizeof(key), "%sdelq", p->prefix);
    const char **argv = keg_malloc((n + 2) * sizeof(char *));
    size_t *lens = keg_malloc((n + 2) * sizeof(size_t));
    char *mem = keg_malloc((size_t)n * 40);
    int rc = -ENOMEM;
    if (!argv || !lens || !mem)
        goto out;
    argv[0] = "ZREM";
    lens[0] = 4;
    argv[1] = key;
    lens[1] = kl;
    for (uint32_t i = 0; i < n; i++) {
        char *s = mem + (size_t)i * 40;
        int l = snprintf(s, 40, "%" PRIu64 "_%" PRIu32, done[i].id, done[i].size);
        argv[i + 2] = s;
        lens[i + 2] = (size_t)l;
    }
    redisReply *r;
    rc = mr_cmd(p, "delq_ack", &r, (int)n + 2, argv, lens);
    if (rc == 0)
        freeReplyObject(r);
out:
    keg_free(argv);
    keg_free(lens);
    keg_free(mem);
    return rc;
}

/*----------------------------------------------------------------------------
 * Extended attributes
 *--------------------------------------------------------------------------*/

static ssize_t mr_getxattr(struct keg_meta *m, uint64_t ino, const char *name, void *buf,
                           size_t size)
{
    struct mr_args a = {0};
    redisReply *r;
    int rc;
    mr_arg_u64(&a, ino);
    mr_arg_str(&a, name);
    rc = mr_eval(PRIV(m), S_XGET, &a, &r);
    if (rc)
        return rc;
    return mr_reply_copy(r, buf, size);
}

static int mr_setxattr(struct keg_meta *m, uint64_t ino, const char *name, const void *val,
                       size_t len, int flags)
{
    struct mr_args a = {0};
    redisReply *r;
    int rc;
    /* name, size and flags: checked by keg_meta_setxattr */
    mr_arg_u64(&a, ino);
    mr_arg_str(&a, name);
    mr_arg_bin(&a, len ? val : "", len);
    mr_arg_u64(&a, (uint64_t)flags);
    rc = mr_eval(PRIV(m), S_XSET, &a, &r);
    if (rc == 0)
        freeReplyObject(r);
    return rc;
}

static ssize_t mr_listxattr(struct keg_meta *m, uint64_t ino, char *buf, size_t size)
{
    struct mr_args a = {0};
    redisReply *r;
    mr_arg_u64(&a, ino);
    int rc = mr_eval(PRIV(m), S_XLIST, &a, &r);
    if (rc)
        return rc;
    size_t total = 0;
    ssize_t res = 0;
    for (size_t i = 1; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING)
            continue;
        if (size) {
            if (total + e->len + 1 > size) {
                res = -ERANGE;
                break;
            }
            memcpy(buf + total, e->str, e->len);
            buf[total + e->len] = '\0';
        }
        total += e->len + 1;
    }
    freeReplyObject(r);
    return res < 0 ? res : (ssize_t)total;
}

static int mr_removexattr(struct keg_meta *m, uint64_t ino, const char *name)
{
    struct mr_args a = {0};
    redisReply *r;
    int rc;
    mr_arg_u64(&a, ino);
    mr_arg_str(&a, name);
    rc = mr_eval(PRIV(m), S_XREMOVE, &a, &r);
    if (rc == 0)
        freeReplyObject(r);
    return rc;
}

/*----------------------------------------------------------------------------
 * Locks
 *--------------------------------------------------------------------------*/

static int mr_flock(struct keg_meta *m, uint64_t ino, uint64_t owner, uint32_t type)
{
    struct mr_args a = {0};
    redisReply *r;
    if (type != F_RDLCK && type != F_WRLCK && type != F_UNLCK)
        return -EINVAL;
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, owner);
    mr_arg_u64(&a, type);
    int rc = mr_eval(PRIV(m), type == F_UNLCK ? S_FLOCK_UN : S_FLOCK, &a, &r);
    if (rc == 0)
        freeReplyObject(r);
    return rc;
}

static int mr_getlk(struct keg_meta *m, uint64_t ino, uint64_t owner, struct keg_plock *lk)
{
    struct mr_args a = {0};
    redisReply *r;
    if ((lk->type != F_RDLCK && lk->type != F_WRLCK) || lk->start > lk->end)
        return -EINVAL;
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, owner);
    mr_arg_u64(&a, lk->type);
    mr_arg_hex(&a, lk->start, 16);
    mr_arg_hex(&a, lk->end, 16);
    int rc = mr_eval(PRIV(m), S_GETLK, &a, &r);
    if (rc)
        return rc;
    if (r->elements >= 2 && r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[1]->str[0] == 'U') {
        lk->type = F_UNLCK;
    } else if (r->elements >= 5) {
        lk->type = r->element[1]->str[0] == 'W' ? F_WRLCK : F_RDLCK;
        lk->start = strtoull(r->element[2]->str, NULL, 16);
        lk->end = strtoull(r->element[3]->str, NULL, 16);
        lk->pid = (uint32_t)strtoul(r->element[4]->str, NULL, 16);
    } else {
        rc = -EIO;
    }
    freeReplyObject(r);
    return rc;
}

static int mr_setlk(struct keg_meta *m, uint64_t ino, uint64_t owner, const struct keg_plock *lk)
{
    struct mr_args a = {0};
    redisReply *r;
    if ((lk->type != F_RDLCK && lk->type != F_WRLCK && lk->type != F_UNLCK) ||
        lk->start > lk->end)
        return -EINVAL;
    mr_arg_u64(&a, ino);
    mr_arg_u64(&a, owner);
    mr_arg_u64(&a, lk->type);
    mr_arg_hex(&a, lk->start, 16);
    mr_arg_hex(&a, lk->end, 16);
    mr_arg_hex(&a, lk->pid, 8);
    int rc = mr_eval(PRIV(m), lk->type == F_UNLCK ? S_SETLK_UN : S_SETLK, &a, &r);
    if (rc == 0)
        freeReplyObject(r);
    return rc;
}

/* Durability is the server's setting (appendfsync); nothing to do per client. */
static int mr_sync(struct keg_meta *m)
{
    return 0;
}

static const char *const mr_schemes[] = {"redis", "rediss", "unix", "redis+sentinel", NULL};

const struct keg_meta_ops keg_meta_redis_ops = {
    .name = "redis",
    .version = 1,
    .caps = KEG_META_CAP_TXN | KEG_META_CAP_SHARED,
    .priv_size = sizeof(struct mr_priv),
    .schemes = mr_schemes,
    .open = mr_open,
    .close = mr_close,
    .format_init = mr_format_init,
    .format_load = mr_format_load,
    .destroy = mr_destroy,
    .alloc_ids = mr_alloc_ids,
    .statfs = mr_statfs,
    .session_begin = mr_session_begin,
    .session_heartbeat = mr_session_heartbeat,
    .session_resume = mr_session_resume,
    .session_end = mr_session_end,
    .session_list = mr_session_list,
    .session_clean_stale = mr_session_clean_stale,
    .lookup = mr_lookup,
    .getattr = mr_getattr,
    .setattr = mr_setattr,
    .mknod = mr_mknod,
    .link = mr_link,
    .unlink = mr_unlink,
    .rmdir = mr_rmdir,
    .rename = mr_rename,
    .readdir = mr_readdir,
    .readlink = mr_readlink,
    .purge = mr_purge,
    .read_chunk = mr_read_chunk,
    .write_slices = mr_write_slices,
    .truncate = mr_truncate,
    .compact_chunk = mr_compact_chunk,
    .delq_peek = mr_delq_peek,
    .delq_ack = mr_delq_ack,
    .getxattr = mr_getxattr,
    .setxattr = mr_setxattr,
    .listxattr = mr_listxattr,
    .removexattr = mr_removexattr,
    .flock = mr_flock,
    .getlk = mr_getlk,
    .setlk = mr_setlk,
    .sync = mr_sync,
    .next_chunk = mr_next_chunk,
    .name_cache_stats = mr_name_cache_stats,
};
