/* meta_redis_conn_i.h -- internals of the Redis engine shared by its three files:
 * meta_redis.c (the keg_meta_ops), meta_redis_conn.c (connections, the pool and
 * commands with retries) and meta_redis_url.c (META_URL parsing).
 */
#ifndef KEG_META_REDIS_CONN_I_H
#define KEG_META_REDIS_CONN_I_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define MR_POOL_MAX      8
#define MR_CONNECT_MS    5000       /* connect timeout */
#define MR_COMMAND_MS    5000       /* per-command timeout */
#define MR_RETRY_MS      10000      /* total time spent retrying one call */
#define MR_ATTR_LEN      88         /* packed attribute record */
#define MR_ATTR_LEN_OLD  80         /* the same without alloc (older versions) */
#define MR_REC           24         /* packed slice record */
#define MR_DIRENT_LEN    10         /* packed directory entry value */
#define MR_READDIR_PAGE  512        /* entries per readdir script call */
#define MR_CLEAN_BATCH   100        /* locks / pending inodes per cleanup script call */
#define MR_MAXARGS       24
#define MR_NS_DEFAULT    "kegfs"
#define MR_NS_MAX        64
#define MR_SPIN_US       50         /* default busy-poll for a reply (spin=) */
#define MR_SPIN_MAX_US   10000      /* largest spin= accepted */
#define MR_DIRCACHE_MAX  10000000   /* largest dircache= accepted */
#define MR_SPIN_PROBE    16         /* every 16th reply is waited for the other way */
#define MR_PREFETCH_MIN  2          /* smallest inode batch a mknod reserves */
#define MR_PREFETCH_MAX  100000     /* largest inode batch a mknod reserves */

enum mr_kind { MR_TCP, MR_UNIX, MR_SENTINEL };

/* Kinds of repeated error lines, each logged at most once per MR_LOG_EVERY_NS. */
enum mr_lim { LIM_OOM, LIM_CMD_ERR, LIM_SCRIPT_ERR, LIM_N };
#define MR_LOG_EVERY_NS 1000000000LL

struct mr_ratelim {
    int64_t  last_ns;       /* monotonic time of the last line logged (0: never) */
    uint32_t suppressed;    /* lines dropped since */
};

/* The Lua scripts (meta_redis.c). */
enum mr_script {
    S_LOOKUP, S_MKNOD, S_LINK, S_UNLINK, S_RMDIR, S_RENAME, S_SETATTR, S_READDIR, S_READLINK,
    S_PURGE, S_WRITE, S_TRUNCATE, S_COMPACT, S_XGET, S_XSET, S_XLIST, S_XREMOVE, S_FLOCK,
    S_GETLK, S_SETLK, S_FORMAT, S_ALLOC, S_SESS_BEGIN, S_SESS_BEAT, S_SESS_LIST, S_SESS_CLEAN,
    S_DELQ_PEEK, S_NEXT_CHUNK, S_FLOCK_UN, S_SETLK_UN, S_NSCRIPTS
};

struct mr_priv {
    /* set by open, read-only afterwards */
    enum mr_kind kind;
    char   *host;                   /* TCP host (not for sentinel) */
    int     port;
    char   *sock;                   /* unix socket path */
    char   *user;                   /* AUTH user ("" = default) */
    char   *password;               /* AUTH password ("" = none); never logged */
    int     db;                     /* SELECT db */
    char   *prefix;                 /* "{NS}" */
    char  **sentinels;              /* "host:port" of each sentinel */
    int     nsentinels;
    char   *master;                 /* sentinel master name */
    int     spin_us;                /* busy-poll a reply this long before blocking (0: never) */
    int     spin_slots;             /* threads allowed to busy-poll at once */
    uint32_t names_cap;             /* dircache=: names cached at most (0: no name cache) */
    char   *src[S_NSCRIPTS];        /* text of each script (mr_build_scripts) */
    char    sha[S_NSCRIPTS][41];    /* SHA1 of each script (the server computes it) */
    int     inited;

    pthread_mutex_t lock;
    pthread_cond_t  cond;           /* a context was returned or closed */
    redisContext   *idle[MR_POOL_MAX];  /* protected by lock */
    int             nidle;          /* protected by lock */
    int             nopen;          /* contexts alive incl. those in use; protected by lock */
    char            addr[300];      /* address last dialled, for logs; protected by lock */
    uint64_t        addr_gen;       /* bumped when addr changes; written under lock, atomic */
    struct mr_names *names;         /* directory name cache of a session (NULL: none) */
    int             good_sentinel;  /* index of the sentinel that answered last; protected by lock */
    uint64_t        sid;            /* session id or 0; atomic access */
    int             spinners;       /* threads busy-polling now; atomic access */
    uint32_t        spin_calls;     /* replies waited for; atomic access */
    int64_t         wait_ns[2];     /* average reply wait [0] blocking, [1] spinning; atomic */
    uint64_t        pre_first;      /* inode numbers reserved by a mknod, not handed out yet: */
    uint32_t        pre_n;          /*   pre_first .. +pre_n; protected by lock */
    uint32_t        ino_batch;      /* size of the last inode alloc_ids (0: none yet); lock */
    int             pre_busy;       /* a mknod is reserving the next batch; lock */
    struct mr_ratelim lim[LIM_N];   /* protected by lock */
    int             vol_seen;       /* the format key was read: the volume exists; atomic */
    int             gone;           /* ... and its format key vanished since; atomic */
    int64_t         gone_checked;   /* keg_mono_ns of the last check of it; atomic */
};

#define PRIV(m) ((struct mr_priv *)(m)->priv)

static inline uint64_t mr_sid(struct mr_priv *p)
{
    return __atomic_load_n(&p->sid, __ATOMIC_ACQUIRE);
}

/*----- meta_redis_conn.c -----*/

/* Copies the address last dialled (for logs) into buf.  LOCKS: takes p->lock. */
void mr_addr(struct mr_priv *p, char *buf, size_t len);
/* 1 when a line of kind k may be logged now (then *suppressed = lines dropped
 * since the previous one, which the line should mention), 0 to drop it.
 * LOCKS: takes p->lock. */
int mr_log_ok(struct mr_priv *p, enum mr_lim k, uint32_t *suppressed);
/* A new connection to the current master (through the sentinels for
 * redis+sentinel://), authenticated, with the db selected; *gen = the address
 * generation (it changes on failover); *why says what failed.
 * OWNERSHIP: *out is freed with redisFree().  Returns 0 or -errno. */
int mr_connect(struct mr_priv *p, redisContext **out, uint64_t *gen, char *why, size_t whylen);
/* A pooled context, dialled if none is idle (at most MR_POOL_MAX open).
 * OWNERSHIP: give it back with mr_put().  Returns 0 or -errno (*why set).
 * LOCKS: takes p->lock (not across dialling). */
int mr_get(struct mr_priv *p, redisContext **out, char *why, size_t whylen);
/* Returns c to the pool, or frees it when broken.  LOCKS: takes p->lock. */
void mr_put(struct mr_priv *p, redisContext *c, int broken);
/* Runs one command with bounded retries (see meta_redis.c DESIGN).  idem: may be
 * repeated when the reply was lost.  Error replies other than the transient ones
 * are returned to the caller as replies.
 * OWNERSHIP: caller frees *out with freeReplyObject().  Returns 0 or -errno. */
int mr_exec(struct mr_priv *p, int argc, const char **argv, const size_t *lens, int idem,
            const char *what, redisReply **out);

/*----- meta_redis_url.c -----*/

/* Fills p's connection settings (kind, address, credentials, db, sentinels,
 * prefix, spin_us, names_cap) from url; red is the redacted url for messages.
 * Returns 0, -EINVAL (logged) or -ENOMEM; free p's settings with mr_free_conf()
 * also after a failure. */
int mr_parse_url(struct mr_priv *p, const char *url, const char *red);
/* Frees (and wipes the password of) what mr_parse_url left in p. */
void mr_free_conf(struct mr_priv *p);

#endif
