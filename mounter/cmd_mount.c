/* cmd_mount.c -- `kegfs mount`: option parsing, pre-mount checks, daemonising and the FUSE session.
 *
 * DESIGN
 * Options come from three places, applied in this order (later wins):
 *   1. --config FILE (YAML mapping; keys are the long option names),
 *   2. the command line, in order; -o takes FUSE mount options and also any
 *      kegfs long option as key[=value] (attr_cache=2, read_only), which is
 *      how the CSI driver passes mountOptions.
 * Everything that can be checked before mounting is checked in the calling
 * process, so a bad META_URL, an unformatted volume or a bad mount point
 * fail with a clear message and nothing changed.
 *
 * Background mode (-d): the process forks; the child detaches (setsid, stdio
 * to /dev/null, logs to a file), opens the volume, mounts and reports over a
 * pipe: "OK" once fuse_session_mount() succeeded, or "ERR <message>".  The
 * parent returns 0 only when it got "OK" AND statfs(mountpoint) says FUSE.
 *
 * Supervisor (root, default; mnt_super.c): the process that was started opens
 * /dev/fuse, mounts, and runs run_session() in forked workers on that descriptor,
 * starting a new one when a worker crashes.  --no-supervisor (and non-root):
 * run_session() mounts through libfuse in this process.  `kegfs upgrade` makes the
 * worker hand over (handover_exit) and the supervisor exec another binary, which
 * re-enters here with KEGFS_HANDOVER set (resume_upgrade: no checks, no mount).
 *
 * While mounted, a state file (mnt_state_write) records pid (the supervisor's),
 * META_URL and drain timeout for `kegfs umount` (waits for the pid) and
 * `kegfs info` (opens the volume); the worker rewrites a stats file every
 * second (mnt_stats.c) for `kegfs stats`.
 * Exit: a signal (SIGTERM/SIGINT/SIGHUP) or an external unmount ends the loop;
 * then the unmount, the writeback drain (--drain-timeout), and keg_fs_free(),
 * which flushes every open file.
 */
#define _GNU_SOURCE         /* pipe2 */
#define FUSE_USE_VERSION 314

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <stddef.h>
#include <malloc.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml.h>

#define KEG_LOG_TAG "mount"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/meta.h"
#include "keg/metrics.h"
#include "keg/mountinfo.h"
#include "keg/stack.h"
#include "keg/url.h"

#include "mnt_i.h"

/* --read-ahead's default: a whole block per window, so a sequential reader
 * keeps several 1 MiB FUSE reads in flight (docs/benchmarks.md). */
#define MNT_READ_AHEAD_DEFAULT (4u << 20)
#define MNT_READ_AHEAD_MAX     (256u << 20)

/* --upload-delay when --writeback is given without it: rewrites and deletions
 * within a quarter of a second (compaction of small writes, temporary files)
 * cost no upload, and during a burst the uploads wait up to 1 s for a pause.
 * 1 s held a build's objects back 1.1 s after it ended and a git clone's
 * 6.6-7.1 s, against 0.3 s and 3.4-4.6 s, for no gain in the workloads'
 * own times (docs/benchmarks.md, "What bounds the rest"). */
#define MNT_UPLOAD_DELAY_DEFAULT 0.25

/* --idle-upload-workers when not given: once writes pause, what a burst left
 * staged goes up on 12 connections instead of 4 (a small-object store such as
 * Ceph's gateway takes more puts a second the more run at once), and 4 of the
 * S3 client's default 16 stay for reads and deletions (docs/benchmarks.md). */
#define MNT_IDLE_UPLOAD_WORKERS_DEFAULT 12

enum {
    OPT_ATTR_CACHE = 0x3001, OPT_ENTRY_CACHE, OPT_DIR_ENTRY_CACHE, OPT_READ_ONLY, OPT_BUFFER_SIZE,
    OPT_CACHE_SIZE, OPT_CONFIG, OPT_BACKGROUND, OPT_FUSE_OPTS, OPT_NO_ALLOW_OTHER,
    OPT_MEM_CACHE_SIZE, OPT_CACHE_DIR, OPT_WRITEBACK, OPT_UPLOAD_WORKERS, OPT_IDLE_UPLOAD_WORKERS, OPT_MAX_STAGING,
    OPT_DRAIN_TIMEOUT, OPT_SESSION_TIMEOUT, OPT_HEARTBEAT, OPT_NO_SUPERVISOR, OPT_MISSING_WAIT,
    OPT_INSECURE, OPT_CA_FILE, OPT_S3_CONCURRENCY, OPT_S3_RETRY_DEADLINE, OPT_UPLOAD_DELAY,
    OPT_META_PASSWORD_FILE,
    OPT_OVER_STALE,
    OPT_METRICS,
    OPT_READ_AHEAD,
};

struct mount_opts {
    int      background;
    double   attr_cache, entry_cache, dir_entry_cache;   /* seconds */
    int      read_only;
    uint64_t buffer_mib;       /* 0: core default */
    uint64_t mem_cache_mib;    /* cap of the read share, 0: none */
    uint64_t read_ahead;       /* kernel read-ahead of the mount, bytes; 0: the kernel's */
    char    *cache_dir;        /* SSD cache + staging directory; OWNERSHIP: keg_free */
    uint64_t cache_size;       /* SSD cache budget, bytes (0: stack default) */
    int      writeback;
    uint64_t upload_workers;   /* 0: stack default */
    uint64_t idle_upload_workers; /* 0: MNT_IDLE_UPLOAD_WORKERS_DEFAULT */
    uint64_t max_staging;      /* bytes, 0: stack default */
    double   drain_timeout;    /* seconds the unmount waits for staged uploads */
    double   upload_delay;     /* seconds a new staged object waits before upload;
                                * < 0: not given (MNT_UPLOAD_DELAY_DEFAULT with --writeback) */
    double   session_timeout;  /* seconds; 0: core default */
    double   missing_wait;     /* seconds a read waits for a block not uploaded yet */
    double   heartbeat;        /* seconds; 0: core default */
    int      no_supervisor;    /* one process: no restart of a crashed worker */
    int      over_stale;       /* mount on top of a dead FUSE mount at the mount point */
    int      insecure;         /* S3: no TLS verification */
    char    *ca_file;          /* S3: CA bundle (absolute after checks); OWNERSHIP: keg_free */
    char    *metrics;          /* Prometheus endpoint "HOST:PORT", NULL: off; OWNERSHIP: keg_free */
    uint64_t s3_concurrency;   /* S3 connection pool size, 0: store default */
    double   s3_retry_deadline; /* seconds one S3 request may retry, 0: store default */
    char    *kernel_opts;      /* FUSE mount options for the supervisor; OWNERSHIP: keg_free */
    int      no_allow_other;
    char    *fuse_opts;        /* comma-joined -o values; OWNERSHIP: keg_free */
    char    *kflags;           /* the kernel flags of -o in order (relatime,nodev, ...), for
                                * the supervisor's mount(2); OWNERSHIP: keg_free */
    int      remount;          /* -o remount: change the flags of a live mount */
    int      no_acl;           /* -o noacl: no POSIX ACL mode (setfacl: EOPNOTSUPP) */
    char    *log_file;         /* OWNERSHIP: keg_free */
    char    *config;           /* OWNERSHIP: keg_free */
    char    *meta_password_file; /* file holding the META_URL password; OWNERSHIP: keg_free */
    /* Config-file only (never on argv): the volume and credentials overriding the
     * stored ones.  OWNERSHIP: keg_free (secrets wiped first, free_secret). */
    char    *meta_url;
    char    *access_key;
    char    *secret_key;
    char    *session_token;
    int      config_secrets;   /* the config file holds a secret */
};

static const struct option longopts[] = {
    {"background", optional_argument, NULL, OPT_BACKGROUND},
    {"options", required_argument, NULL, OPT_FUSE_OPTS},
    {"attr-cache", required_argument, NULL, OPT_ATTR_CACHE},
    {"entry-cache", required_argument, NULL, OPT_ENTRY_CACHE},
    {"dir-entry-cache", required_argument, NULL, OPT_DIR_ENTRY_CACHE},
    {"read-only", optional_argument, NULL, OPT_READ_ONLY},
    {"buffer-size", required_argument, NULL, OPT_BUFFER_SIZE},
    {"mem-cache-size", required_argument, NULL, OPT_MEM_CACHE_SIZE},
    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
    {"cache-size", required_argument, NULL, OPT_CACHE_SIZE},
    {"writeback", optional_argument, NULL, OPT_WRITEBACK},
    {"upload-workers", required_argument, NULL, OPT_UPLOAD_WORKERS},
    {"idle-upload-workers", required_argument, NULL, OPT_IDLE_UPLOAD_WORKERS},
    {"max-staging", required_argument, NULL, OPT_MAX_STAGING},
    {"drain-timeout", required_argument, NULL, OPT_DRAIN_TIMEOUT},
    {"upload-delay", required_argument, NULL, OPT_UPLOAD_DELAY},
    {"session-timeout", required_argument, NULL, OPT_SESSION_TIMEOUT},
    {"heartbeat", required_argument, NULL, OPT_HEARTBEAT},
    {"missing-block-wait", required_argument, NULL, OPT_MISSING_WAIT},
    {"no-supervisor", optional_argument, NULL, OPT_NO_SUPERVISOR},
    {"over-stale", optional_argument, NULL, OPT_OVER_STALE},
    {"insecure", optional_argument, NULL, OPT_INSECURE},
    {"ca-file", required_argument, NULL, OPT_CA_FILE},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"read-ahead", required_argument, NULL, OPT_READ_AHEAD},
    {"s3-concurrency", required_argument, NULL, OPT_S3_CONCURRENCY},
    {"s3-retry-deadline", required_argument, NULL, OPT_S3_RETRY_DEADLINE},
    {"no-allow-other", optional_argument, NULL, OPT_NO_ALLOW_OTHER},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"meta-password-file", required_argument, NULL, OPT_META_PASSWORD_FILE},
    MNT_COMMON_LONGOPTS,
    {NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs mount [OPTIONS] META_URL MOUNTPOINT\n"
        "       kegfs mount --config FILE [OPTIONS] MOUNTPOINT   (FILE has meta-url)\n"
        "\n"
        "Mount the volume at META_URL on the empty directory MOUNTPOINT.  Runs in the\n"
        "foreground (logging to stderr) unless -d is given.\n"
        "\n"
        "Options:\n"
        "  -d, --background         detach; return once the mount is live\n"
        "  -o OPT[,OPT...]          FUSE mount options (allow_other, ro, debug, ...),\n"
        "                           kernel flags (noatime, nodev, relatime, ...), kegfs\n"
        "                           options as name=value (attr_cache=2); mount(8) and\n"
        "                           fstab options (defaults, _netdev, x-*, ...) are ignored;\n"
        "                           -o remount,ro MOUNTPOINT changes a live mount's flags\n"
        "      --attr-cache SEC     kernel attribute cache timeout (default 1)\n"
        "      --entry-cache SEC    kernel file-name cache timeout, also for\n"
        "                           negative lookups (default 1)\n"
        "      --dir-entry-cache SEC kernel directory-name cache timeout (default 1)\n"
        "      --read-only          mount read-only\n"
        "      --buffer-size MiB    memory budget for read cache and write buffers (default 300)\n"
        "      --mem-cache-size MiB optional cap of the read cache's share of the budget\n"
        "                           (default: none; writes always come first)\n"
        "      --metrics HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics\n"
        "                           (off by default; e.g. 127.0.0.1:9567), or, with\n"
        "                           unix:/ABS/PATH, on a unix socket (mode 0600) at PATH\n"
        "      --read-ahead SIZE    kernel read-ahead of the mount (default 4M; 0 leaves the\n"
        "                           kernel's 128K: sequential reads come in 128 KiB requests)\n"
        "      --cache-dir DIR      local SSD cache of blocks (and writeback staging) in DIR\n"
        "      --cache-size SIZE    SSD cache budget, e.g. 10G (default 1G; needs --cache-dir)\n"
        "      --writeback          stage written blocks in --cache-dir, upload them in the\n"
        "                           background (close returns before the upload)\n"
        "      --upload-workers N   writeback upload threads (default 4)\n"
        "      --idle-upload-workers N  upload threads once writes pause for the upload\n"
        "                           delay (default 12, at least --upload-workers)\n"
        "      --max-staging SIZE   staged bytes before writes wait (default 1G)\n"
        "      --upload-delay SEC   upload a staged block no sooner than SEC after it was\n"
        "                           written (default 0.25), and during a burst of writes up to\n"
        "                           min(4 x SEC, 4 s) later; blocks deleted or rewritten by\n"
        "                           then are never uploaded (needs --writeback, at most 3600)\n"
        "      --drain-timeout SEC  at unmount, wait this long for staged uploads (default 30)\n"
        "      --session-timeout SEC a session silent this long is stale (default 60)\n"
        "      --heartbeat SEC      session heartbeat period (default 10)\n"
        "      --missing-block-wait SEC  a read of a block not uploaded yet (staged by a\n"
        "                           writeback mounter elsewhere) retries this long (default 10)\n"
        "      --no-supervisor      one process: a crash of the mounter leaves a dead mount\n"
        "      --over-stale         if MOUNTPOINT is a dead FUSE mount (ENOTCONN), mount on\n"
        "                           top of it (processes that see MOUNTPOINT through mount\n"
        "                           propagation get the new mount; needs the supervisor)\n"
        "                           (default as non-root; root mounts keep /dev/fuse in a\n"
        "                           supervisor that restarts a crashed worker)\n"
        "      --no-allow-other     drop an allow_other given with -o (allow_other lets\n"
        "                           every local user use the mount; off by default)\n"
        "      --insecure           s3 over https: do NOT verify the server's certificate\n"
        "                           (testing only; anyone on the path can read and alter data)\n"
        "      --ca-file FILE       s3 over https: trust the CA certificates in FILE (PEM)\n"
        "      --s3-concurrency N   s3 connection pool size (default 16)\n"
        "      --s3-retry-deadline SEC  time one object-store request may spend retrying\n"
        "                           throttling, 5xx and connection errors (default 60; every\n"
        "                           store, the end-to-end bounds in docs/durability.md)\n"
        "      --config FILE        YAML file of defaults (keys: long option names, and\n"
        "                           meta-url, access-key, secret-key, session-token)\n"
        "      --meta-password-file FILE  the META_URL's password is the first line of FILE\n"
        "                           (mode 0600 or stricter; also: environment META_PASSWORD)\n"
        MNT_COMMON_HELP
        "\n"
        "With -d the log goes to --log-file, default /var/log/kegfs/NAME-HASH.log\n"
        "(root) or $KEGFS_RUN_DIR/logs/ (others).\n"
        "Exit status: 0 mounted (and, in the foreground, cleanly unmounted later),\n"
        "1 error, 2 usage error.\n");
}

/*----- option handling -----*/

static int append_fuse_opts(struct mount_opts *o, const char *s)
{
    char *n = o->fuse_opts ? keg_asprintf("%s,%s", o->fuse_opts, s) : keg_strdup(s);
    if (!n)
        return -ENOMEM;
    keg_free(o->fuse_opts);
    o->fuse_opts = n;
    return 0;
}

static int parse_bool(const char *v, int *out)
{
    if (!v || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1")) {
        *out = 1;
        return 0;
    }
    if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off") || !strcmp(v, "0")) {
        *out = 0;
        return 0;
    }
    return -EINVAL;
}

/* How the value of an option is read into struct mount_opts. */
enum opt_kind {
    OK_BOOL,       /* int: true/yes/on/1 (or no value), false/no/off/0 */
    OK_SECONDS,    /* double: seconds (mnt_parse_seconds), within [min, max] */
    OK_COUNT,      /* uint64_t: a number (mnt_parse_u64), within [min, max] */
    OK_SIZE,       /* uint64_t: bytes with an optional unit (mnt_parse_size), within [min, max] */
    OK_PATH,       /* char *: a non-empty string; OWNERSHIP: keg_free */
    OK_STR,        /* char *: any string, also empty; OWNERSHIP: keg_free */
};

struct opt_rule {
    int           id;
    enum opt_kind kind;
    size_t        off;         /* of the field in struct mount_opts */
    double        min, max;    /* OK_SECONDS, OK_COUNT, OK_SIZE */
};

#define OPT_ANY -DBL_MAX, DBL_MAX
#define RULE(id, kind, field, range) {id, kind, offsetof(struct mount_opts, field), range}
#define RANGE(lo, hi) lo, hi

/* Every option with a value of its own; the others are in apply_special. */
static const struct opt_rule opt_rules[] = {
    RULE(OPT_BACKGROUND, OK_BOOL, background, OPT_ANY),
    RULE(OPT_READ_ONLY, OK_BOOL, read_only, OPT_ANY),
    RULE(OPT_NO_ALLOW_OTHER, OK_BOOL, no_allow_other, OPT_ANY),
    RULE(OPT_WRITEBACK, OK_BOOL, writeback, OPT_ANY),
    RULE(OPT_NO_SUPERVISOR, OK_BOOL, no_supervisor, OPT_ANY),
    RULE(OPT_OVER_STALE, OK_BOOL, over_stale, OPT_ANY),
    RULE(OPT_INSECURE, OK_BOOL, insecure, OPT_ANY),
    RULE(OPT_ATTR_CACHE, OK_SECONDS, attr_cache, OPT_ANY),
    RULE(OPT_ENTRY_CACHE, OK_SECONDS, entry_cache, OPT_ANY),
    RULE(OPT_DIR_ENTRY_CACHE, OK_SECONDS, dir_entry_cache, OPT_ANY),
    RULE(OPT_DRAIN_TIMEOUT, OK_SECONDS, drain_timeout, OPT_ANY),
    RULE(OPT_MISSING_WAIT, OK_SECONDS, missing_wait, OPT_ANY),
    RULE(OPT_UPLOAD_DELAY, OK_SECONDS, upload_delay, RANGE(-DBL_MAX, 3600)),
    RULE(OPT_SESSION_TIMEOUT, OK_SECONDS, session_timeout, RANGE(1, DBL_MAX)),
    RULE(OPT_HEARTBEAT, OK_SECONDS, heartbeat, RANGE(1, DBL_MAX)),
    RULE(OPT_S3_RETRY_DEADLINE, OK_SECONDS, s3_retry_deadline, RANGE(0.001, 86400)),
    RULE(OPT_BUFFER_SIZE, OK_COUNT, buffer_mib, RANGE(16, 1u << 20)),
    RULE(OPT_MEM_CACHE_SIZE, OK_COUNT, mem_cache_mib, OPT_ANY),
    RULE(OPT_UPLOAD_WORKERS, OK_COUNT, upload_workers, RANGE(1, 256)),
    RULE(OPT_IDLE_UPLOAD_WORKERS, OK_COUNT, idle_upload_workers, RANGE(1, 256)),
    RULE(OPT_S3_CONCURRENCY, OK_COUNT, s3_concurrency, RANGE(1, 1024)),
    RULE(OPT_CACHE_SIZE, OK_SIZE, cache_size, RANGE(1, DBL_MAX)),
    RULE(OPT_MAX_STAGING, OK_SIZE, max_staging, RANGE(1, DBL_MAX)),
    RULE(OPT_READ_AHEAD, OK_SIZE, read_ahead, RANGE(0, MNT_READ_AHEAD_MAX)),
    RULE(OPT_CA_FILE, OK_PATH, ca_file, OPT_ANY),
    RULE(OPT_METRICS, OK_PATH, metrics, OPT_ANY),
    RULE(OPT_CACHE_DIR, OK_PATH, cache_dir, OPT_ANY),
    RULE(OPT_META_PASSWORD_FILE, OK_PATH, meta_password_file, OPT_ANY),
    RULE(MNT_OPT_LOG_FILE, OK_STR, log_file, OPT_ANY),
    RULE(OPT_CONFIG, OK_STR, config, OPT_ANY),
};

/* -ERANGE if x is outside the rule's range, else rc. */
static int opt_in_range(const struct opt_rule *r, int rc, double x)
{
    return rc == 0 && (x < r->min || x > r->max) ? -ERANGE : rc;
}

/* Reads v into o as rule r says.  Returns 0 or -errno. */
static int apply_rule(struct mount_opts *o, const struct opt_rule *r, const char *v)
{
    void *field = (char *)o + r->off;
    char **str = field;
    int rc;

    switch (r->kind) {
    case OK_BOOL:
        return parse_bool(v, field);
    case OK_SECONDS:
        rc = mnt_parse_seconds(v, field);
        return opt_in_range(r, rc, *(double *)field);
    case OK_COUNT:
        rc = mnt_parse_u64(v, field);
        return opt_in_range(r, rc, (double)*(uint64_t *)field);
    case OK_SIZE:
        rc = mnt_parse_size(v, field);
        return opt_in_range(r, rc, (double)*(uint64_t *)field);
    case OK_PATH:
    case OK_STR:
        keg_free(*str);
        *str = v && (*v || r->kind == OK_STR) ? keg_strdup(v) : NULL;
        return *str ? 0 : -EINVAL;
    }
    return -EINVAL;
}

/* The options that do more than set a field.  Returns 0 or -errno. */
static int apply_special(struct mount_opts *o, int id, const char *v)
{
    int b = 0, rc;

    switch (id) {
    case OPT_FUSE_OPTS:
        return v ? append_fuse_opts(o, v) : -EINVAL;
    case 'v':
    case MNT_OPT_DEBUG:
    case MNT_OPT_QUIET:
        rc = parse_bool(v, &b);
        if (!rc && b)
            mnt_common_opt(id, NULL);
        return rc;
    default:
        return -EINVAL;
    }
}

/* Apply option `id` with value v (NULL for a flag given without value).
 * `src` names where it came from, for messages.  Returns 0 or 2 (usage). */
static int apply_opt(struct mount_opts *o, int id, const char *name, const char *v,
                     const char *src)
{
    const struct opt_rule *r = NULL;
    int rc;

    for (size_t i = 0; i < sizeof(opt_rules) / sizeof(opt_rules[0]) && !r; i++)
        if (opt_rules[i].id == id)
            r = &opt_rules[i];
    rc = r ? apply_rule(o, r, v) : apply_special(o, id, v);
    if (rc) {
        if (v)
            mnt_error("%s: invalid value '%s' for %s", src, v, name);
        else
            mnt_error("%s: %s needs a value", src, name);
        return 2;
    }
    return 0;
}

/* Long option by name; '_' and '-' are the same.  NULL if unknown. */
static const struct option *find_opt(const char *name, size_t len)
{
    for (const struct option *p = longopts; p->name; p++) {
        if (strlen(p->name) != len)
            continue;
        size_t i = 0;
        for (; i < len; i++) {
            char c = name[i] == '_' ? '-' : name[i];
            if (c != p->name[i])
                break;
        }
        if (i == len)
            return p;
    }
    return NULL;
}

/* Wipe and free a string that may hold a secret. */
static void free_secret(char *s)
{
    if (s)
        memset(s, 0, strlen(s));
    keg_free(s);
}

static int key_is(const char *key, const char *name)
{
    for (; *key && *name; key++, name++) {
        char c = *key == '_' ? '-' : *key;
        if (c != *name)
            return 0;
    }
    return *key == '\0' && *name == '\0';
}

/* The field of a config-only key (meta-url, access-key, secret-key,
 * session-token), or NULL. */
static char **config_only_key(struct mount_opts *o, const char *key)
{
    if (key_is(key, "meta-url"))
        return &o->meta_url;
    if (key_is(key, "access-key"))
        return &o->access_key;
    if (key_is(key, "secret-key"))
        return &o->secret_key;
    if (key_is(key, "session-token"))
        return &o->session_token;
    return NULL;
}

/* Returns 0 or 2 (usage). */
static int set_config_only(struct mount_opts *o, char **field, const char *key, const char *val,
                           const char *path)
{
    if (!val || !*val) {
        mnt_error("--config %s: '%s' needs a value", path, key);
        return 2;
    }
    free_secret(*field);
    *field = keg_strdup(val);
    if (!*field)
        return 1;
    if (field == &o->meta_url) {
        struct keg_url u;
        const char *err = NULL;
        if (keg_url_parse(val, &u, &err) == 0) {
            if (u.has_password)
                o->config_secrets = 1;
            keg_url_free(&u);
        }
    } else if (field != &o->access_key) {
        o->config_secrets = 1;
    }
    return 0;
}

/* YAML: a mapping of option name -> scalar (or a sequence of scalars, joined
 * with ',' -- handy for "options"). */
static int load_config(struct mount_opts *o, const char *path)
{
    FILE *f = fopen(path, "re");
    yaml_parser_t p;
    yaml_event_t ev;
    char *key = NULL;
    char *seq = NULL;     /* value being accumulated from a sequence */
    int depth = 0;        /* mapping depth */
    int in_seq = 0;
    int rc = 0;
    int done = 0;
    if (!f) {
        mnt_error("cannot read --config %s: %s", path, strerror(errno));
        return 2;
    }
    yaml_parser_initialize(&p);
    yaml_parser_set_input_file(&p, f);
    while (!done && rc == 0) {
        if (!yaml_parser_parse(&p, &ev)) {
            mnt_error("--config %s: line %zu: %s", path, p.problem_mark.line + 1,
                      p.problem ? p.problem : "YAML syntax error");
            rc = 2;
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_MAPPING_START_EVENT:
            if (++depth > 1) {
                mnt_error("--config %s: line %zu: nested mappings are not allowed", path,
                          ev.start_mark.line + 1);
                rc = 2;
            }
            break;
        case YAML_MAPPING_END_EVENT:
            depth--;
            break;
        case YAML_SEQUENCE_START_EVENT:
            if (!key || in_seq) {
                mnt_error("--config %s: line %zu: unexpected list", path,
                          ev.start_mark.line + 1);
                rc = 2;
            }
            in_seq = 1;
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_SCALAR_EVENT: {
            const char *val = NULL;
            if (ev.type == YAML_SCALAR_EVENT) {
                val = (const char *)ev.data.scalar.value;
                if (depth != 1) {
                    mnt_error("--config %s: the file must be a mapping of option: value", path);
                    rc = 2;
                    break;
                }
                if (!key) {
                    key = keg_strdup(val);
                    break;
                }
                if (in_seq) {
                    char *n = seq ? keg_asprintf("%s,%s", seq, val) : keg_strdup(val);
                    keg_free(seq);
                    seq = n;
                    break;
                }
            } else {
                in_seq = 0;
                val = seq ? seq : "";
            }
            char **secret = config_only_key(o, key);
            const struct option *opt = secret ? NULL : find_opt(key, strlen(key));
            if (secret) {
                rc = set_config_only(o, secret, key, val, path);
            } else if (!opt || opt->val == OPT_CONFIG || opt->val == 'h') {
                mnt_error("--config %s: unknown option '%s'", path, key);
                rc = 2;
            } else {
                rc = apply_opt(o, opt->val, opt->name, val, path);
            }
            keg_free(key);
            key = NULL;
            keg_free(seq);
            seq = NULL;
            break;
        }
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    struct stat st;
    if (rc == 0 && o->config_secrets && fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        mnt_warn("warning: --config %s holds secrets but is readable by group or others "
                 "(mode %04o); chmod 600 it", path, (unsigned)(st.st_mode & 07777));
    fclose(f);
    keg_free(key);
    keg_free(seq);
    return rc;
}

/* Pending command-line options, applied after the config file. */
struct pending {
    int         id;
    const char *name;
    const char *val;    /* BORROWS argv */
};

static int parse_cmdline(int argc, char **argv, struct mount_opts *o)
{
    struct pending *pend = keg_calloc((size_t)argc + 1, sizeof(*pend));
    size_t n = 0;
    int opt;
    int idx;
    int rc = 0;
    if (!pend)
        return 1;
    while ((opt = getopt_long(argc, argv, "do:vh", longopts, &idx)) != -1) {
        const char *name = NULL;
        switch (opt) {
        case 'd': opt = OPT_BACKGROUND; name = "-d"; break;
        case 'o': opt = OPT_FUSE_OPTS; name = "-o"; break;
        case 'v': name = "-v"; break;
        case 'h':
            usage(stdout);
            rc = -1;
            goto out;
        case '?':
            rc = mnt_usage_error("mount", argc, argv);
            goto out;
        default:
            break;
        }
        if (!name) {
            for (const struct option *p = longopts; p->name; p++)
                if (p->val == opt)
                    name = p->name;
        }
        if (opt == OPT_CONFIG) {
            rc = apply_opt(o, opt, "--config", optarg, "command line");
            if (rc)
                goto out;
            continue;
        }
        pend[n].id = opt;
        pend[n].name = name;
        pend[n].val = optarg;
        n++;
    }
    if (o->config) {
        rc = load_config(o, o->config);
        if (rc)
            goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = apply_opt(o, pend[i].id, pend[i].name, pend[i].val, "command line");
out:
    keg_free(pend);
    return rc;
}

/*----- -o handling with fuse_opt -----*/

enum { KEY_NONEMPTY, KEY_RO, KEY_ALLOW_OTHER, KEY_ACL, KEY_NOACL };

static const struct fuse_opt mnt_fuse_opt_spec[] = {
    FUSE_OPT_KEY("nonempty", KEY_NONEMPTY),
    FUSE_OPT_KEY("ro", KEY_RO),
    FUSE_OPT_KEY("allow_other", KEY_ALLOW_OTHER),
    FUSE_OPT_KEY("acl", KEY_ACL),
    FUSE_OPT_KEY("noacl", KEY_NOACL),
    FUSE_OPT_END,
};

struct fopt_ctx {
    struct mount_opts *o;
    int                allow_other;
    int                failed;
};

static int fuse_opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct fopt_ctx *fc = data;
    switch (key) {
    case KEY_NONEMPTY:
        mnt_error("-o nonempty is not supported: the mount point must be empty");
        fc->failed = 1;
        return -1;
    case KEY_RO:
        fc->o->read_only = 1;
        return 0;      /* added back below, once */
    case KEY_ALLOW_OTHER:
        fc->allow_other = 1;
        return 0;
    case KEY_ACL:
    case KEY_NOACL:
        fc->o->no_acl = key == KEY_NOACL;
        return 0;
    case FUSE_OPT_KEY_OPT: {
        /* A generic option of mount(8) / fstab (mnt_mopts.c)? */
        int libfuse = 0;
        switch (mnt_mopt_kind(arg, &libfuse)) {
        case MNT_MOPT_FLAG:
            if (strcmp(arg, "rw") == 0)
                return 0;    /* the default; mount(8) passes it (not over --read-only) */
            /* Every flag goes to the supervisor's mount(2) in the order given
             * (relatime,noatime: noatime); libfuse's mount gets those it knows. */
            char *n = fc->o->kflags ? keg_asprintf("%s,%s", fc->o->kflags, arg)
                                    : keg_strdup(arg);
            if (!n) {
                fc->failed = 1;
                return -1;
            }
            keg_free(fc->o->kflags);
            fc->o->kflags = n;
            return libfuse ? 1 : 0;
        case MNT_MOPT_IGNORED:
            return 0;
        case MNT_MOPT_REMOUNT:
            fc->o->remount = 1;
            return 0;
        default:
            break;
        }
        /* A kegfs option given as -o name[=value]? */
        size_t len = strcspn(arg, "=");
        const struct option *opt = find_opt(arg, len);
        if (!opt)
            return 1;  /* libfuse's: keep */
        if (opt->val == OPT_CONFIG || opt->val == OPT_FUSE_OPTS || opt->val == OPT_BACKGROUND ||
            opt->val == 'h') {
            mnt_error("-o %s is not allowed", arg);
            fc->failed = 1;
            return -1;
        }
        if (apply_opt(fc->o, opt->val, opt->name, arg[len] ? arg + len + 1 : NULL, "-o")) {
            fc->failed = 1;
            return -1;
        }
        return 0;
    }
    default:
        return 1;
    }
}

/* 1 if the comma-separated list opts holds the option name. */
static int has_opt(const char *opts, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = opts; p && *p; p += strcspn(p, ","), p += *p == ',') {
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
    }
    return 0;
}

/* Build the libfuse arguments: our defaults, then the user's -o options
 * (kegfs ones taken out).  OWNERSHIP: caller fuse_opt_free_args(out). */
static int build_fuse_args(struct mount_opts *o, const char *volname, struct fuse_args *out)
{
    struct fuse_args in = FUSE_ARGS_INIT(0, NULL);
    struct fopt_ctx fc = {.o = o};
    int rc = 0;
    *out = (struct fuse_args)FUSE_ARGS_INIT(0, NULL);
    if (fuse_opt_add_arg(&in, "kegfs") != 0)
        return 1;
    keg_free(o->kflags);    /* rebuilt by fuse_opt_proc */
    o->kflags = NULL;
    if (o->fuse_opts && (fuse_opt_add_arg(&in, "-o") || fuse_opt_add_arg(&in, o->fuse_opts))) {
        rc = 1;
        goto out;
    }
    if (fuse_opt_parse(&in, &fc, mnt_fuse_opt_spec, fuse_opt_proc) != 0) {
        if (!fc.failed)
            mnt_error("invalid -o options '%s'", o->fuse_opts ? o->fuse_opts : "");
        rc = 2;
        goto out;
    }
    char *defaults = keg_asprintf("fsname=kegfs:%s,subtype=kegfs,default_permissions%s%s",
                                  volname,
                                  (fc.allow_other && !o->no_allow_other) ?
                                  ",allow_other" : "", o->read_only ? ",ro" : "");
    if (!defaults || fuse_opt_add_arg(&in, "-o") || fuse_opt_add_arg(&in, defaults))
        rc = 1;
    keg_free(defaults);
    if (!rc) {
        *out = in;
        return 0;
    }
out:
    fuse_opt_free_args(&in);
    return rc;
}

/*----- the META_URL password: never on argv -----*/

/* The password of META_URL may come from --meta-password-file (first line of a
 * file that only its owner can read) or the environment variable META_PASSWORD
 * (as JuiceFS), so that it never appears on the command line.  A password that
 * was given in the URL on the command line is scrubbed from argv right after
 * parsing, before the supervisor and the workers are forked (they share the
 * argv bytes, which `ps` and /proc/PID/cmdline show). */

/* The first line of path, or an error printed.  Refused if group or others may
 * read the file.  OWNERSHIP: caller frees *out with free_secret().  Returns 0 or 1. */
static int read_password_file(const char *path, char **out)
{
    char buf[1024];
    struct stat st;
    ssize_t n;
    int rc = 1;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        mnt_error("--meta-password-file %s: %s", path, strerror(errno));
        return 1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        mnt_error("--meta-password-file %s: not a regular file", path);
        goto out;
    }
    if (st.st_mode & 077) {
        mnt_error("--meta-password-file %s is readable by group or others (mode %04o); "
                  "chmod 600 it", path, (unsigned)(st.st_mode & 07777));
        goto out;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    if (n < 0) {
        mnt_error("--meta-password-file %s: %s", path, strerror(errno));
        goto out;
    }
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    if (!buf[0]) {
        mnt_error("--meta-password-file %s: no password on its first line", path);
        goto out;
    }
    *out = keg_strdup(buf);
    rc = *out ? 0 : 1;
out:
    memset(buf, 0, sizeof(buf));
    close(fd);
    return rc;
}

/* Overwrites a password in the argv string arg with its redacted form (same
 * length or shorter, NUL-padded), so /proc/PID/cmdline no longer holds it. */
static void scrub_arg(char *arg)
{
    struct keg_url u;
    const char *err;
    if (keg_url_parse(arg, &u, &err) != 0)
        return;
    int has = u.has_password && u.password[0];
    keg_url_free(&u);
    if (!has)
        return;
    size_t len = strlen(arg);
    char red[4096];
    keg_url_redact(arg, red, sizeof(red));
    if (strlen(red) <= len) {
        memset(arg, 0, len);
        memcpy(arg, red, strlen(red));
        return;
    }
    /* a password shorter than "****": blank its bytes where they are */
    char *auth = strstr(arg, "://") + 3;
    char *at = memchr(auth, '@', strcspn(auth, "/?"));
    char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
    for (char *c = colon ? colon + 1 : at; c && c < at; c++)
        *c = '*';
}

/* The META_URL to use: url (TAKES: scrubbed from argv when from_argv), with the
 * password from --meta-password-file or META_PASSWORD put in.  The environment
 * variable's value is wiped in place and removed.  OWNERSHIP: caller frees
 * *out with free_secret().  Returns 0, 1 or 2 (usage; error printed). */
static int resolve_meta_url(struct mount_opts *o, char *url, int from_argv, char **out)
{
    char *pw = NULL;
    const char *src = NULL;
    struct keg_url u;
    const char *err = NULL;
    int rc = 0;
    *out = keg_strdup(url);
    if (from_argv)
        scrub_arg(url);
    char *env = getenv("META_PASSWORD");
    char *envpw = env && *env ? keg_strdup(env) : NULL;
    if (env) {
        memset(env, 0, strlen(env));
        unsetenv("META_PASSWORD");
    }
    if (!*out)
        goto fail;
    if (o->meta_password_file) {
        if (read_password_file(o->meta_password_file, &pw))
            goto fail;
        src = "--meta-password-file";
    } else if (envpw) {
        pw = envpw;
        envpw = NULL;
        src = "META_PASSWORD";
    }
    if (!pw)
        goto done;
    if (keg_url_parse(*out, &u, &err) != 0)
        goto done;          /* check_volume() reports the malformed URL */
    int has = u.has_password && u.password[0];
    int redis = strcmp(u.scheme, "sqlite3") != 0;
    keg_url_free(&u);
    if (!redis) {
        mnt_error("%s: a sqlite3:// volume has no password", src);
        rc = 2;
        goto fail;
    }
    if (has) {
        mnt_error("%s gives a password, and META_URL has one too; give it once", src);
        rc = 2;
        goto fail;
    }
    char *with = NULL;
    if (mnt_url_with_password(*out, pw, &with))
        goto fail;
    free_secret(*out);
    *out = with;
done:
    free_secret(pw);
    free_secret(envpw);
    return 0;
fail:
    free_secret(pw);
    free_secret(envpw);
    free_secret(*out);
    *out = NULL;
    return rc ? rc : 1;
}

/*----- pre-mount checks -----*/

/* Cache/writeback options that need each other; the cache directory and the
 * CA file made absolute (a background mounter runs in /), the CA file checked
 * readable, --insecure warned about.  Returns 0, 1 or 2 (usage). */
/* A relative path option made absolute: a background mounter runs in /, and an
 * upgraded one parses its command line again.  Returns 0 or 1 (said why). */
static int abspath_opt(const char *name, char **path)
{
    char *abs;
    int rc = mnt_abspath_cwd(*path, &abs);
    if (rc < 0) {
        mnt_error("%s %s: cannot resolve a relative path: %s", name, *path, strerror(-rc));
        return 1;
    }
    keg_free(*path);
    *path = abs;
    return 0;
}

static int check_cache_opts(struct mount_opts *o)
{
    if (o->session_timeout && o->heartbeat && o->session_timeout <= o->heartbeat) {
        mnt_error("--session-timeout (%.0f s) must be longer than --heartbeat (%.0f s)",
                  o->session_timeout, o->heartbeat);
        return 2;
    }
    if (o->ca_file) {
        char *abs = NULL;
        int err = access(o->ca_file, R_OK) < 0 ? -errno : mnt_abspath(o->ca_file, &abs);
        if (err) {
            mnt_error("--ca-file %s: %s", o->ca_file, strerror(-err));
            return 1;
        }
        keg_free(o->ca_file);
        o->ca_file = abs;       /* a background mounter runs in / */
    }
    if (o->read_ahead && o->read_ahead < 4096) {
        mnt_error("--read-ahead %llu: give 0 (the kernel's default) or at least 4K",
                  (unsigned long long)o->read_ahead);
        return 2;
    }
    if (o->insecure)
        mnt_warn("--insecure: TLS certificates of the S3 endpoint are NOT verified; anyone "
                 "on the network path can read and change your data");
    if (!o->cache_dir) {
        const char *need = o->writeback ? "--writeback" : o->cache_size ? "--cache-size" :
                           o->max_staging ? "--max-staging" :
                           o->upload_workers ? "--upload-workers" :
                           o->idle_upload_workers ? "--idle-upload-workers" :
                           o->upload_delay > 0 ? "--upload-delay" : NULL;
        if (need) {
            mnt_error("%s needs --cache-dir", need);
            return 2;
        }
        return 0;
    }
    if (!o->writeback && (o->max_staging || o->upload_workers || o->idle_upload_workers ||
                          o->upload_delay > 0)) {
        mnt_error("%s needs --writeback", o->max_staging ? "--max-staging" :
                  o->upload_workers ? "--upload-workers" :
                  o->idle_upload_workers ? "--idle-upload-workers" : "--upload-delay");
        return 2;
    }
    return abspath_opt("--cache-dir", &o->cache_dir);
}

static int check_mountpoint(const char *mp, char **abs)
{
    struct stat st;
    char fstype[64];
    *abs = NULL;
    if (stat(mp, &st) < 0) {
        int e = errno;
        if (e == ENOENT)
            mnt_error("mount point %s does not exist", mp);
        else if (e == ENOTCONN)
            mnt_error("mount point %s is a dead FUSE mount; run 'kegfs umount %s' first", mp,
                      mp);
        else
            mnt_error("mount point %s: %s", mp, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        mnt_error("mount point %s is not a directory", mp);
        return -ENOTDIR;
    }
    int rc = mnt_abspath(mp, abs);
    if (rc) {
        mnt_error("mount point %s: %s", mp, strerror(-rc));
        return rc;
    }
    rc = mnt_is_mountpoint(*abs, fstype, sizeof(fstype));
    if (rc > 0) {
        mnt_error("%s is already a mount point (%s); unmount it first", *abs, fstype);
        return -EBUSY;
    }
    DIR *d = opendir(*abs);
    if (!d) {
        rc = -errno;
        mnt_error("mount point %s: %s", *abs, strerror(-rc));
        return rc;
    }
    struct dirent *de;
    rc = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            mnt_error("mount point %s is not empty", *abs);
            rc = -ENOTEMPTY;
            break;
        }
    }
    closedir(d);
    return rc;
}

/* --over-stale: mp is a dead FUSE mount (mounted on top of) or an ordinary
 * mount point (checked as usual). */
static int check_stale_mountpoint(const char *mp, char **abs)
{
    struct stat st;
    *abs = NULL;
    if (stat(mp, &st) == 0 || errno != ENOTCONN)
        return check_mountpoint(mp, abs);
    int rc = mnt_abspath(mp, abs);
    if (rc) {
        mnt_error("mount point %s: %s", mp, strerror(-rc));
        return rc;
    }
    KEG_INFO("%s is a dead FUSE mount: mounting on top of it", *abs);
    return 0;
}

/* Volume name, or an error printed.  Opens and closes the engine (no threads
 * are left behind: safe before fork()). */
static int check_volume(const char *url, char *name, size_t size)
{
    struct keg_meta *m = NULL;
    struct keg_format f;
    char red[1024];
    keg_url_redact(url, red, sizeof(red));
    int rc = mnt_open_meta(url, &m);
    if (rc)
        return rc;
    memset(&f, 0, sizeof(f));
    rc = keg_meta_format_load(m, &f);
    if (rc == -ENOENT)
        mnt_error("no volume is formatted at %s (run 'kegfs format' first)", red);
    else if (rc)
        mnt_error("cannot read the format at %s: %s", red, strerror(-rc));
    else
        snprintf(name, size, "%s", f.name);
    memset(&f, 0, sizeof(f));
    keg_meta_close(m);
    return rc;
}

/*----- libfuse log routing -----*/

static char fuse_last_error[512];

/* libfuse sometimes logs one line in several calls (no trailing newline):
 * pieces are collected per thread until the newline. */
static __thread char fuse_partial[1024];

static void fuse_log_to_keg(enum fuse_log_level level, const char *fmt, va_list ap)
{
    size_t used = strlen(fuse_partial);
    if ((int)level > keg_log_level && level > FUSE_LOG_ERR)
        return;
    vsnprintf(fuse_partial + used, sizeof(fuse_partial) - used, fmt, ap);
    size_t n = strlen(fuse_partial);
    if (n && fuse_partial[n - 1] != '\n' && n < sizeof(fuse_partial) - 1)
        return;
    while (n && fuse_partial[n - 1] == '\n')
        fuse_partial[--n] = '\0';
    if (level <= FUSE_LOG_ERR) {
        size_t k = KEG_MIN(n, sizeof(fuse_last_error) - 1);
        memcpy(fuse_last_error, fuse_partial, k);
        fuse_last_error[k] = '\0';
    }
    keg_log_msg((int)level, "libfuse", "%s", fuse_partial);
    fuse_partial[0] = '\0';
}

/*----- running the session -----*/

/* --drain-timeout in ms (the stack takes 0 as its 30 s default, so 0 s is 1 ms). */
static unsigned drain_ms(const struct mount_opts *o)
{
    double ms = o->drain_timeout * 1000.0;
    if (ms < 1)
        return 1;
    return ms > 4e9 ? 4000000000u : (unsigned)ms;
}

/* Unmount with writeback: give staged objects --drain-timeout to reach the store,
 * and say plainly what is left (it stays staged and is uploaded at the next mount
 * with the same --cache-dir). */
static void drain_staged(const struct mount_opts *o, struct keg_fs *fs)
{
    struct keg_stack_stats st;
    uint64_t left = 0;
    if (!o->writeback)
        return;
    keg_stack_stats(keg_fs_obj(fs), &st);
    if (st.staged_objects)
        KEG_INFO("uploading %llu staged objects (%llu bytes) before exiting, for up to %.0f s",
                 (unsigned long long)st.staged_objects, (unsigned long long)st.staged_bytes,
                 o->drain_timeout);
    int rc = keg_stack_drain(keg_fs_obj(fs), drain_ms(o), &left);
    if (rc == 0)
        return;
    KEG_WARN("%llu objects remain staged under %s (%s); they will be uploaded at the next "
             "mount with --cache-dir %s", (unsigned long long)left, o->cache_dir,
             rc == -ETIMEDOUT ? "the drain timeout passed" : "their upload fails",
             o->cache_dir);
    mnt_warn("%llu objects remain staged under %s; they will be uploaded at the next mount "
             "with --cache-dir %s", (unsigned long long)left, o->cache_dir, o->cache_dir);
}

static struct mnt_state state;   /* userdata of the session; lives for the process */

static void notify(int fd, const char *msg)
{
    if (fd < 0)
        return;
    size_t len = strlen(msg);
    while (len) {
        ssize_t w = write(fd, msg, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        msg += w;
        len -= (size_t)w;
    }
    close(fd);
}

static void notify_error(int fd)
{
    char buf[1200];
    snprintf(buf, sizeof(buf), "ERR %s", mnt_last_error());
    notify(fd, buf);
}

/* The worker was asked to hand over (kegfs upgrade): every request it started
 * is answered; commit what is buffered and close the volume without waiting for
 * uploads (staged objects stay in the staging directory for the next worker) and
 * without ending the session (the next worker takes it over).
 * TAKES se, fs, cfg, args.  Returns MNT_EXIT_UPGRADE. */
static int handover_exit(struct mount_opts *o, struct fuse_session *se, struct keg_fs *fs,
                         struct fuse_loop_config *cfg, struct fuse_args *args)
{
    KEG_UNUSED(o);
    KEG_INFO("handing over: committing open files");
    fuse_remove_signal_handlers(se);
    mnt_stats_phase("handover");
    keg_stack_set_drain(keg_fs_obj(fs), 0);
    mnt_stats_stop();
    keg_fs_keep_session(fs);    /* the next worker takes it over */
    /* commit file by file first: what fails stays in the dirty record, and the
     * next worker fails those descriptors with EIO instead of taking them as clean */
    unsigned lost = mnt_handle_commit_all();
    keg_fs_free(fs);      /* flushes and commits open files */
    mnt_inode_clear();
    if (cfg)
        fuse_loop_cfg_destroy(cfg);
    fuse_session_destroy(se);   /* closes this process's copy of the descriptor */
    fuse_opt_free_args(args);
    if (lost)
        KEG_ERR("handed over with the data of %u open file%s not committed", lost,
                lost == 1 ? "" : "s");
    else
        KEG_INFO("handed over");
    return MNT_EXIT_UPGRADE;
}

/* Open the volume, mount, serve until unmounted or signalled.  notify_fd: the
 * pipe to a waiting parent (-d), or -1.  w: the supervisor's mounted descriptor
 * and FUSE_INIT (this process is a worker), or NULL (mount here, no supervisor).
 * Returns the exit status. */
static int run_session(struct mount_opts *o, const char *url, const char *abs_mp,
                       const char *volname, int notify_fd, const struct mnt_worker *w)
{
    struct keg_fs_conf conf;
    struct keg_fs *fs = NULL;
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    struct fuse_session *se = NULL;
    struct fuse_loop_config *cfg = NULL;
    char red[1024];
    int status = 1;
    int rc;

    keg_url_redact(url, red, sizeof(red));
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = url;
    conf.mountpoint = abs_mp;
    conf.read_only = o->read_only;
    conf.buffer_size = o->buffer_mib << 20;
    conf.block_cache_size = o->mem_cache_mib << 20;
    conf.session_timeout = (unsigned)o->session_timeout;
    conf.missing_block_wait_ms = (unsigned)(o->missing_wait * 1000.0);
    conf.heartbeat_sec = (unsigned)o->heartbeat;
    struct keg_stack_conf sc;
    memset(&sc, 0, sizeof(sc));
    sc.cache_dir = o->cache_dir;
    sc.cache_size = o->cache_size;
    sc.writeback = o->writeback;
    sc.upload_workers = (unsigned)o->upload_workers;
    sc.idle_upload_workers = (unsigned)(o->idle_upload_workers ? o->idle_upload_workers
                                                               : MNT_IDLE_UPLOAD_WORKERS_DEFAULT);
    sc.max_staging = o->max_staging;
    sc.drain_ms = drain_ms(o);
    sc.upload_delay_ms = (unsigned)((o->upload_delay < 0 ? MNT_UPLOAD_DELAY_DEFAULT
                                                          : o->upload_delay) * 1000 + 0.5);
    sc.insecure = o->insecure;
    sc.ca_file = o->ca_file;
    sc.metrics = o->metrics != NULL;
    sc.concurrency = (unsigned)o->s3_concurrency;
    sc.retry_deadline_ms = (unsigned)(o->s3_retry_deadline * 1000.0);
    conf.stack = &sc;
    conf.access_key = o->access_key ? o->access_key : getenv("AWS_ACCESS_KEY_ID");
    conf.secret_key = o->secret_key ? o->secret_key : getenv("AWS_SECRET_ACCESS_KEY");
    conf.session_token = o->session_token ? o->session_token : getenv("AWS_SESSION_TOKEN");
    /* a later worker keeps the session: the locks and unlinked-but-open files of the
     * descriptors the kernel keeps open across the crash or upgrade */
    conf.resume_session = w ? w->session : 0;
    rc = keg_fs_new(&conf, &fs);
    if (rc) {
        mnt_error("cannot open volume %s at %s: %s", volname, red, strerror(-rc));
        if (w && w->epoch > 1)
            status = MNT_EXIT_REOPEN;    /* the mount lives on: the supervisor tries again */
        goto fail;
    }
    if (w) {
        mnt_handle_set_session(keg_fs_session(fs));
        /* failed unlocks: kept in the record, and those of the previous worker queued */
        keg_fs_set_unlock_hook(fs, mnt_handle_unlock_hook, NULL);
        if (w->epoch > 1)
            mnt_handle_unlocks_adopt(fs, w->session && keg_fs_session(fs) == w->session);
    }
    state.fs = fs;
    state.attr_timeout = o->attr_cache;
    state.entry_timeout = o->entry_cache;
    state.dir_entry_timeout = o->dir_entry_cache;
    state.read_only = o->read_only;
    state.generation = mnt_generation(keg_fs_format(fs)->uuid);
    state.no_acl = o->no_acl;

    if (build_fuse_args(o, volname, &args) != 0)
        goto fail;
    se = fuse_session_new(&args, o->metrics ? mnt_metrics_ops(mnt_fuse_ops()) : mnt_fuse_ops(),
                          sizeof(struct fuse_lowlevel_ops), &state);
    if (!se) {
        mnt_error("cannot create the FUSE session%s%s", fuse_last_error[0] ? ": " : "",
                  fuse_last_error);
        goto fail;
    }
    if (fuse_set_signal_handlers(se) != 0) {
        mnt_error("cannot install signal handlers");
        goto fail;
    }
    mnt_handle_setup(fs, w ? w->epoch : 1, w && w->epoch > 1, o->read_only);
    mnt_inode_tolerate_unknown(w && w->epoch > 1);
    if (w) {
        char dev[32];
        snprintf(dev, sizeof(dev), "/dev/fd/%d", w->fuse_fd);
        rc = fuse_session_mount(se, dev);
    } else {
        rc = fuse_session_mount(se, abs_mp);
    }
    if (rc != 0) {
        mnt_error("cannot mount at %s%s%s", abs_mp, fuse_last_error[0] ? ": " : "",
                  fuse_last_error);
        fuse_remove_signal_handlers(se);
        goto fail;
    }
    if (w) {
        /* The kernel's INIT, read by the supervisor.  A restarted worker's reply
         * goes to a request the kernel no longer waits for (ENOENT, ignored). */
        struct fuse_buf fb;
        memset(&fb, 0, sizeof(fb));
        fb.mem = keg_malloc(w->init_len);
        if (!fb.mem) {
            mnt_error("out of memory");
            fuse_remove_signal_handlers(se);
            goto fail;
        }
        memcpy(fb.mem, w->init, w->init_len);
        fb.size = w->init_len;
        fuse_session_process_buf(se, &fb);
        keg_free(fb.mem);
        if (w->handover)
            KEG_INFO("worker %u took over %s from the previous worker (upgrade)", w->epoch,
                     abs_mp);
        else if (w->epoch > 1)
            KEG_WARN("worker %u serving %s again after a crash of the previous worker "
                     "(its uncommitted writes are lost)", w->epoch, abs_mp);
        mnt_upgrade_worker_arm(se, fs);
    } else {
        mnt_state_prune();
        rc = mnt_state_write(abs_mp, getpid(), url,
                             o->writeback ? (unsigned)(o->drain_timeout + 0.999) : 0);
        if (rc)
            KEG_WARN("cannot write the state file in %s: %s ('kegfs umount' will not wait, "
                     "'kegfs info' will not work)", mnt_run_dir(), strerror(-rc));
    }
    if (o->read_ahead) {
        /* each worker sets it again: cheap, and a handover may change it */
        rc = mnt_set_read_ahead(abs_mp, o->read_ahead);
        if (rc)
            KEG_WARN("cannot set the kernel read-ahead of %s to %llu KiB: %s (sequential "
                     "reads come in the kernel's default requests, usually 128 KiB)", abs_mp,
                     (unsigned long long)(o->read_ahead >> 10), strerror(-rc));
    }
    rc = mnt_stats_start(abs_mp, fs, w ? w->epoch - 1 : 0);
    if (rc)
        KEG_WARN("cannot start the stats thread: %s", strerror(-rc));
    if (o->metrics) {
        rc = mnt_metrics_start(o->metrics, volname, fs);
        if (rc)
            KEG_ERR("--metrics %s: the metrics endpoint is off: %s", o->metrics,
                    strerror(-rc));
    }
    KEG_INFO("mounted volume %s (%s) at %s, pid %d", volname, red, abs_mp, (int)getpid());
    notify(notify_fd, "OK");
    notify_fd = -1;

    mnt_inval_start(se, fs);
    cfg = fuse_loop_cfg_create();
    if (cfg) {
        fuse_loop_cfg_set_clone_fd(cfg, 0);
        fuse_loop_cfg_set_idle_threads(cfg, 10);
        fuse_loop_cfg_set_max_threads(cfg, 64);
    }
    rc = fuse_session_loop_mt(se, cfg);
    mnt_upgrade_worker_disarm();
    if (w && rc >= 0 && mnt_upgrade_worker_requested())
        return handover_exit(o, se, fs, cfg, &args);
    /* libfuse returns the number of the signal that ended the loop (> 0),
     * 0 after an external unmount, or -errno on failure. */
    status = rc < 0 ? 1 : 0;
    if (rc < 0)
        KEG_ERR("FUSE session failed: %s", strerror(-rc));
    else if (rc > 0)
        KEG_INFO("signal %d: unmounting", rc);
    KEG_INFO("unmounting %s", abs_mp);
    fuse_remove_signal_handlers(se);
    if (w && rc > 0)
        kill(getppid(), SIGTERM);    /* the supervisor owns the mount: it detaches it */
    fuse_session_unmount(se);       /* (a no-op on a /dev/fd/N session) */
    mnt_stats_phase("draining");
    mnt_inval_stop();
    keg_fs_settle(fs);    /* files deleted just before: drop their blocks, do not upload them */
    drain_staged(o, fs);
    mnt_stats_stop();
    mnt_metrics_stop();
    keg_fs_free(fs);      /* flushes open files, ends the session */
    fs = NULL;
    if (!w)
        mnt_state_remove(abs_mp, getpid());  /* else the supervisor's */
    KEG_INFO("volume %s unmounted from %s (%llu inodes still referenced by the kernel)",
             volname, abs_mp, (unsigned long long)mnt_inode_live());
    mnt_inode_clear();
    goto out;
fail:
    notify_error(notify_fd);
out:
    if (cfg)
        fuse_loop_cfg_destroy(cfg);
    if (se)
        fuse_session_destroy(se);
    fuse_opt_free_args(&args);
    if (fs)
        keg_fs_free(fs);
    return status;
}

/*----- supervisor or single process -----*/

struct worker_arg {
    struct mount_opts *o;
    const char        *url, *abs_mp, *volname;
};

static int worker_main(void *arg, const struct mnt_worker *w, int notify_fd)
{
    struct worker_arg *a = arg;
    return run_session(a->o, a->url, a->abs_mp, a->volname, notify_fd, w);
}

/* The FUSE mount options of args ("-o" values), comma-joined.
 * OWNERSHIP: caller keg_free()s the result; NULL when out of memory. */
static char *mount_opts_of(const struct fuse_args *args)
{
    char *all = keg_strdup("");
    for (int i = 1; all && i < args->argc; i++) {
        const char *v = NULL;
        if (strcmp(args->argv[i], "-o") == 0 && i + 1 < args->argc)
            v = args->argv[++i];
        else if (strncmp(args->argv[i], "-o", 2) == 0)
            v = args->argv[i] + 2;
        if (!v)
            continue;
        char *n = all[0] ? keg_asprintf("%s,%s", all, v) : keg_strdup(v);
        keg_free(all);
        all = n;
    }
    return all;
}

/* Serve the mount: through the supervisor (root), or in this process. */
static int serve(struct mount_opts *o, const char *url, const char *abs_mp, const char *volname,
                 int notify_fd)
{
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    if (!o->no_supervisor && geteuid() != 0) {
        KEG_INFO("not root: no supervisor (a crash of this mounter leaves a dead mount)");
        o->no_supervisor = 1;
    }
    if (o->no_supervisor) {
        if (o->kflags)
            KEG_DEBUG("without the supervisor libfuse mounts: of -o %s only the flags it "
                      "knows apply", o->kflags);
        return run_session(o, url, abs_mp, volname, notify_fd, NULL);
    }
    if (build_fuse_args(o, volname, &args) != 0) {
        notify_error(notify_fd);
        return 1;
    }
    o->kernel_opts = mount_opts_of(&args);
    fuse_opt_free_args(&args);
    if (o->kernel_opts && o->kflags) {
        char *k = keg_asprintf("%s,%s", o->kernel_opts, o->kflags);
        keg_free(o->kernel_opts);
        o->kernel_opts = k;
    }
    if (!o->kernel_opts) {
        mnt_error("out of memory");
        notify_error(notify_fd);
        return 1;
    }
    struct worker_arg wa = {.o = o, .url = url, .abs_mp = abs_mp, .volname = volname};
    struct mnt_super_conf sc = {
        .abs_mp = abs_mp,
        .fuse_opts = o->kernel_opts,
        .meta_url = url,
        .volname = volname,
        .drain_timeout = o->writeback ? (unsigned)(o->drain_timeout + 0.999) : 0,
        .worker = worker_main,
        .arg = &wa,
    };
    return mnt_super_run(&sc, notify_fd);
}

/* Default log file of a background mounter. */
static char *default_log_file(const char *volname, const char *abs_mp)
{
    char h[17];
    char *dir;
    mnt_path_hash(abs_mp, h);
    if (geteuid() == 0) {
        dir = keg_strdup("/var/log/kegfs");
    } else {
        if (mkdir(mnt_run_dir(), 0700) < 0 && errno != EEXIST)
            return NULL;
        dir = keg_asprintf("%s/logs", mnt_run_dir());
    }
    if (!dir)
        return NULL;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        keg_free(dir);
        return NULL;
    }
    char *p = keg_asprintf("%s/%s-%.8s.log", dir, volname, h);
    keg_free(dir);
    return p;
}

/* Parent side of -d: wait for "OK"/"ERR msg" and verify the mount. */
static int wait_child(pid_t pid, int fd, const char *abs_mp, const char *volname,
                      const char *log_file)
{
    char buf[1400];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == sizeof(buf) - 1)
            break;
    }
    close(fd);
    buf[n] = '\0';
    if (strncmp(buf, "OK", 2) != 0) {
        int st = 0;
        if (strncmp(buf, "ERR ", 4) == 0) {
            mnt_error("%s (log: %s)", buf + 4, log_file);
        } else if (waitpid(pid, &st, 0) == pid && WIFSIGNALED(st)) {
            mnt_error("the mounter was killed by signal %d before the mount was ready "
                      "(log: %s)", WTERMSIG(st), log_file);
        } else {
            mnt_error("the mounter exited before the mount was ready (log: %s)", log_file);
        }
        return 1;
    }
    struct statfs sfs;
    if (statfs(abs_mp, &sfs) < 0 || sfs.f_type != KEG_FUSE_SUPER_MAGIC) {
        mnt_error("the mounter reported success but %s is not a FUSE mount (log: %s)", abs_mp,
                  log_file);
        return 1;
    }
    printf("kegfs: volume %s mounted at %s (pid %d, log %s)\n", volname, abs_mp, (int)pid,
           log_file);
    return 0;
}

static int daemonize_and_run(struct mount_opts *o, const char *url, const char *abs_mp,
                             const char *volname)
{
    char *log_file = o->log_file ? keg_strdup(o->log_file) : default_log_file(volname, abs_mp);
    int pfd[2];
    int status = 1;
    if (!log_file) {
        mnt_error("cannot create a log directory; give --log-file");
        return 1;
    }
    if (keg_log_set_file(log_file) < 0) {   /* checked here so the error reaches the user */
        mnt_error("cannot open log file %s: %s", log_file, strerror(errno));
        goto out;
    }
    keg_log_set_file(NULL);
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        mnt_error("pipe: %s", strerror(errno));
        goto out;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        mnt_error("fork: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        goto out;
    }
    if (pid > 0) {
        close(pfd[1]);
        status = wait_child(pid, pfd[0], abs_mp, volname, log_file);
        goto out;
    }
    /* child */
    close(pfd[0]);
    setsid();
    if (chdir("/") < 0)
        KEG_WARN("chdir /: %s", strerror(errno));
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (nul >= 0) {
        dup2(nul, STDIN_FILENO);
        dup2(nul, STDOUT_FILENO);
        dup2(nul, STDERR_FILENO);
        if (nul > STDERR_FILENO)
            close(nul);
    }
    keg_log_set_file(log_file);
    status = serve(o, url, abs_mp, volname, pfd[1]);
    keg_log_set_file(NULL);
    keg_free(log_file);
    _exit(status);
out:
    keg_free(log_file);
    return status;
}

/* --metrics: a malformed address, or a unix socket path that is relative or too long,
 * is a usage error before anything is mounted.  Returns 0 or 2. */
static int check_metrics_opt(const struct mount_opts *o)
{
    struct keg_metrics_addr a;
    const char *why = NULL;
    if (!o->metrics || keg_metrics_parse_addr(o->metrics, &a, &why) == 0)
        return 0;
    mnt_error("--metrics %s: %s", o->metrics, why);
    return 2;
}

/* Started by an upgrading supervisor (cmd_upgrade.c): the mount exists and is
 * ours, so none of the pre-mount checks apply (and nothing may touch the mount
 * point: no worker answers until we start one).  Returns the exit status, or -1
 * when this is an ordinary mount. */
static int resume_upgrade(struct mount_opts *o, const char *url)
{
    const char *abs_mp = NULL, *volname = NULL;
    int rc = mnt_upgrade_resuming(&abs_mp, &volname);
    if (rc == 0)
        return -1;
    if (rc < 0)
        return 1;
    /* the command line is parsed, in the directory it was given in (cmd_upgrade.c) */
    if (o->background && chdir("/") < 0)
        KEG_WARN("chdir /: %s", strerror(errno));
    char *log_file = o->log_file ? keg_strdup(o->log_file)
                                 : o->background ? default_log_file(volname, abs_mp) : NULL;
    if (log_file && keg_log_set_file(log_file) < 0)
        KEG_WARN("cannot open log file %s: %s", log_file, strerror(errno));
    rc = serve(o, url, abs_mp, volname, -1);
    keg_log_set_file(NULL);
    keg_free(log_file);
    return rc;
}

int mnt_cmd_mount(int argc, char **argv)
{
    struct mount_opts o;
    char volname[64] = "";
    char *abs_mp = NULL;
    char *url = NULL;       /* META_URL with its password; OWNERSHIP: free_secret */
    int rc;

    /* Block buffers are 64 KiB .. 16 MiB.  glibc raises its mmap threshold
     * each time a large mmap()ed buffer is freed (up to 32 MiB), after which
     * block buffers come from the arenas and freed ones stay resident: the
     * mounter's RSS would drift far above --buffer-size.  A fixed threshold
     * keeps every block buffer mmap()ed, so freeing it returns the memory; a
     * small arena count bounds per-thread fragmentation.  Fixing the mmap
     * threshold also fixes glibc's trim threshold, at 128 KiB by default: an
     * arena whose free top reached it was shrunk at once (madvise or brk) and
     * grown again by the next request, two to three system calls, page faults
     * and TLB flushes per file operation (strace: 2,000 unlinks made 4,350
     * madvise calls).  A 2 MiB threshold keeps at most that much free memory
     * per arena and takes the churn out (docs/benchmarks.md, "The allocator";
     * tests/mount/cases/alloc_churn.sh). */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 2 * 1024 * 1024);
    mallopt(M_ARENA_MAX, 4);

    memset(&o, 0, sizeof(o));
    o.attr_cache = o.entry_cache = o.dir_entry_cache = 1.0;
    o.drain_timeout = 30.0;
    o.upload_delay = -1;
    o.missing_wait = 10.0;
    o.read_ahead = MNT_READ_AHEAD_DEFAULT;
    if (keg_log_level == LOG_WARNING)
        keg_log_set_level(LOG_INFO);
    rc = parse_cmdline(argc, argv, &o);
    if (rc) {
        rc = rc < 0 ? 0 : rc;
        goto out;
    }
    if (mnt_log_file && !o.log_file)
        o.log_file = keg_strdup(mnt_log_file);
    if (has_opt(o.fuse_opts, "remount")) {
        /* mount(8) gives SPEC DIR (SPEC is the fsname, kegfs:VOLUME); we need DIR */
        if (argc - optind < 1 || argc - optind > 2) {
            mnt_error("-o remount needs the MOUNTPOINT (see 'kegfs mount --help')");
            rc = 2;
            goto out;
        }
        rc = mnt_abspath(argv[argc - 1], &abs_mp);
        if (rc == 0)
            rc = mnt_mopt_remount(abs_mp, o.fuse_opts);
        else
            mnt_error("%s: %s", argv[argc - 1], strerror(-rc));
        rc = rc ? 1 : 0;
        goto out;
    }
    rc = check_metrics_opt(&o);
    if (!rc)
        rc = check_cache_opts(&o);
    if (!rc && o.log_file)
        rc = abspath_opt("--log-file", &o.log_file);
    if (rc)
        goto out;
    const char *mp;
    if (argc - optind == 2) {
        rc = resolve_meta_url(&o, argv[optind], 1, &url);
        mp = argv[optind + 1];
    } else if (argc - optind == 1 && o.meta_url) {
        rc = resolve_meta_url(&o, o.meta_url, 0, &url);
        mp = argv[optind];
    } else {
        mnt_error("mount needs META_URL and MOUNTPOINT, or MOUNTPOINT alone with meta-url in "
                  "--config (see 'kegfs mount --help')");
        rc = 2;
        goto out;
    }
    if (rc)
        goto out;
    fuse_set_log_func(fuse_log_to_keg);
    signal(SIGPIPE, SIG_IGN);
    rc = resume_upgrade(&o, url);
    if (rc >= 0)
        goto out;

    /* Check what can be checked before anything changes. */
    struct fuse_args probe;
    if (build_fuse_args(&o, "probe", &probe) != 0) {
        rc = 2;
        goto out;
    }
    /* fuse_session_new() validates libfuse's options without touching /dev/fuse. */
    struct fuse_session *pse = fuse_session_new(&probe, mnt_fuse_ops(),
                                                sizeof(struct fuse_lowlevel_ops), NULL);
    fuse_opt_free_args(&probe);
    if (!pse) {
        mnt_error("invalid -o options '%s'%s%s", o.fuse_opts ? o.fuse_opts : "",
                  fuse_last_error[0] ? ": " : "", fuse_last_error);
        rc = 2;
        goto out;
    }
    fuse_session_destroy(pse);
    fuse_last_error[0] = '\0';
    if (check_volume(url, volname, sizeof(volname)) != 0 ||
        (o.over_stale ? check_stale_mountpoint(mp, &abs_mp) : check_mountpoint(mp, &abs_mp)) != 0) {
        rc = 1;
        goto out;
    }
    if (o.background) {
        rc = daemonize_and_run(&o, url, abs_mp, volname);
    } else {
        if (o.log_file && keg_log_set_file(o.log_file) < 0) {
            mnt_error("cannot open log file %s: %s", o.log_file, strerror(errno));
            rc = 1;
            goto out;
        }
        rc = serve(&o, url, abs_mp, volname, -1);
        keg_log_set_file(NULL);
    }
out:
    free_secret(url);
    keg_free(abs_mp);
    keg_free(o.meta_password_file);
    keg_free(o.fuse_opts);
    keg_free(o.kflags);
    keg_free(o.log_file);
    keg_free(o.config);
    keg_free(o.cache_dir);
    keg_free(o.ca_file);
    keg_free(o.metrics);
    keg_free(o.kernel_opts);
    free_secret(o.meta_url);
    free_secret(o.access_key);
    free_secret(o.secret_key);
    free_secret(o.session_token);
    return rc;
}
