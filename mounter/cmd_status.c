/* cmd_status.c -- `kegfs status`: settings, sessions and usage of a volume,
 * plus the helpers the tools share (opening the engine, printing a format). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "status"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/meta.h"
#include "keg/obj.h"
#include "keg/url.h"

#include "mnt_i.h"

/*----- shared helpers -----*/

int mnt_url_with_password(const char *url, const char *pw, char **out)
{
    *out = NULL;
    const char *sep = strstr(url, "://");
    if (!sep) {
        mnt_error("META_URL has no scheme");
        return 1;
    }
    const char *auth = sep + 3;
    size_t alen = strcspn(auth, "/?");
    const char *at = memchr(auth, '@', alen);
    const char *user = at ? auth : "";
    size_t ulen = at ? (size_t)(at - auth) : 0;
    const char *host = at ? at + 1 : auth;
    char *enc = keg_malloc(strlen(pw) * 3 + 1);
    if (!enc)
        return 1;
    size_t e = 0;
    for (const unsigned char *c = (const unsigned char *)pw; *c; c++) {
        if (isalnum(*c) || *c == '-' || *c == '.' || *c == '_' || *c == '~') {
            enc[e++] = (char)*c;
        } else {
            static const char hex[] = "0123456789ABCDEF";
            enc[e++] = '%';
            enc[e++] = hex[*c >> 4];
            enc[e++] = hex[*c & 15];
        }
    }
    enc[e] = '\0';
    *out = keg_asprintf("%.*s%.*s:%s@%s", (int)(auth - url), url, (int)ulen, user, enc, host);
    memset(enc, 0, e);
    keg_free(enc);
    return *out ? 0 : 1;
}

int mnt_open_meta(const char *url, struct keg_meta **m)
{
    struct keg_url u;
    const char *why = NULL;
    char red[1024];
    char *with = NULL;
    *m = NULL;
    keg_url_redact(url, red, sizeof(red));
    int rc = keg_url_parse(url, &u, &why);
    if (rc) {
        mnt_error("invalid META_URL '%s': %s", red, why ? why : strerror(-rc));
        return rc;
    }
    /* META_PASSWORD (as JuiceFS): the password of a URL that has none, so that
     * it need not be on the command line.  (`kegfs mount` takes it earlier.) */
    const char *envpw = getenv("META_PASSWORD");
    if (envpw && *envpw && strcmp(u.scheme, "sqlite3") != 0 &&
        !(u.has_password && u.password[0])) {
        if (mnt_url_with_password(url, envpw, &with)) {
            keg_url_free(&u);
            return -ENOMEM;
        }
        url = with;
    }
    if (!keg_meta_find(u.scheme)) {
        mnt_error("unknown META_URL scheme '%s' in '%s' (this build supports:%s%s)",
                  u.scheme, red, keg_meta_find("sqlite3") ? " sqlite3://" : "",
                  keg_meta_find("redis") ? " redis://" : "");
        keg_url_free(&u);
        return -EINVAL;
    }
    keg_url_free(&u);
    rc = keg_meta_open(url, m);
    if (with) {
        memset(with, 0, strlen(with));
        keg_free(with);
    }
    if (rc) {
        mnt_error("cannot open the metadata engine at %s: %s", red, strerror(-rc));
        *m = NULL;
    }
    return rc;
}

/* "AKIA****" for an access key: enough to recognise it, not enough to use it. */
static void partial_secret(const char *s, char *buf, size_t size)
{
    size_t n = strlen(s);
    if (n == 0)
        snprintf(buf, size, "(none)");
    else if (n <= 8)
        snprintf(buf, size, "****");
    else
        snprintf(buf, size, "%.4s****", s);
}

void mnt_print_format(FILE *out, const struct keg_format *f)
{
    char ak[32];
    char sz[32];
    char created[64] = "";
    time_t t = (time_t)f->created;
    struct tm tm;
    if (localtime_r(&t, &tm))
        strftime(created, sizeof(created), "%Y-%m-%d %H:%M:%S %z", &tm);
    partial_secret(f->access_key, ak, sizeof(ak));
    fprintf(out, "  name:          %s\n", f->name);
    fprintf(out, "  uuid:          %s\n", f->uuid);
    fprintf(out, "  storage:       %s\n", f->storage);
    fprintf(out, "  bucket:        %s\n", f->bucket[0] ? f->bucket : "(none)");
    fprintf(out, "  access key:    %s\n", ak);
    fprintf(out, "  secret key:    %s\n", f->secret_key[0] ? "****" : "(none)");
    if (f->session_token[0])
        fprintf(out, "  session token: ****\n");
    fprintf(out, "  region:        %s\n", f->region[0] ? f->region : "(default)");
    fprintf(out, "  block size:    %s\n", mnt_fmt_size(f->block_size, sz, sizeof(sz)));
    fprintf(out, "  compress:      %s\n", f->compress);
    if (f->capacity)
        fprintf(out, "  capacity:      %s (%llu bytes)\n", mnt_fmt_size(f->capacity, sz,
                sizeof(sz)), (unsigned long long)f->capacity);
    else
        fprintf(out, "  capacity:      unlimited\n");
    if (f->inodes)
        fprintf(out, "  inodes:        %llu\n", (unsigned long long)f->inodes);
    else
        fprintf(out, "  inodes:        unlimited\n");
    fprintf(out, "  trash days:    %u\n", f->trash_days);
    fprintf(out, "  meta version:  %u\n", f->meta_version);
    if (f->block_version >= KEG_BLOCK_VERSION)
        fprintf(out, "  blocks:        version %u (bound to their key and volume)\n",
                f->block_version);
    else
        fprintf(out, "  blocks:        version 1 and 2 (formatted before block identities: "
                "version-1 blocks carry none)\n");
    fprintf(out, "  created:       %s\n", created);
}

/*----- sessions -----*/

/* Value of key in "k1=v1 k2=v2 ..." into buf; a value runs up to the next
 * " word=" so that a mount point with spaces survives. */
static const char *info_get(const char *info, const char *key, char *buf, size_t size)
{
    size_t kl = strlen(key);
    const char *p = info;
    buf[0] = '\0';
    while (p && *p) {
        if ((p == info || p[-1] == ' ') && strncmp(p, key, kl) == 0 && p[kl] == '=') {
            const char *v = p + kl + 1;
            const char *e = v;
            while (*e) {
                if (*e == ' ') {
                    size_t w = strspn(e + 1, "abcdefghijklmnopqrstuvwxyz_");
                    if (w && e[1 + w] == '=')
                        break;
                }
                e++;
            }
            snprintf(buf, size, "%.*s", (int)(e - v), v);
            return buf;
        }
        p++;
    }
    snprintf(buf, size, "-");
    return buf;
}

struct sess_ctx {
    FILE *out;
    int   n;
    int   not_live;        /* sessions shown as dead or stale */
};

/* A session with no heartbeat for this long is shown as stale: the default
 * session timeout, and the window in which gc counts a mounter as live. */
#define STATUS_STALE_SEC 60

/* "live", "dead" (a mounter of this host whose process is gone) or "stale"
 * (no heartbeat for STATUS_STALE_SEC). */
static const char *session_state(const char *host, const char *pid, long age)
{
    char self[128] = "";
    uint64_t p = 0;
    if (gethostname(self, sizeof(self) - 1) != 0)
        self[0] = '\0';
    if (self[0] && strcmp(self, host) == 0 && mnt_parse_u64(pid, &p) == 0 && p > 0 &&
        p <= INT_MAX && kill((pid_t)p, 0) < 0 && errno == ESRCH)
        return "dead";
    return age > STATUS_STALE_SEC ? "stale" : "live";
}

static int print_session(void *arg, const struct keg_session_info *s)
{
    struct sess_ctx *sc = arg;
    char host[128], pid[32], mp[1024], ver[32];
    const char *info = s->info ? s->info : "";
    long age = (long)(time(NULL) - s->heartbeat);
    char hb[32];
    snprintf(hb, sizeof(hb), "%lds ago", age < 0 ? 0 : age);
    info_get(info, "host", host, sizeof(host));
    info_get(info, "pid", pid, sizeof(pid));
    const char *state = session_state(host, pid, age);
    if (sc->n == 0)
        fprintf(sc->out, "  %-6s %-20s %-8s %-10s %-6s %-8s %s\n", "SID", "HOST", "PID",
                "HEARTBEAT", "STATE", "VERSION", "MOUNTPOINT");
    fprintf(sc->out, "  %-6llu %-20s %-8s %-10s %-6s %-8s %s\n", (unsigned long long)s->sid,
            host, pid, hb, state, info_get(info, "version", ver, sizeof(ver)),
            info_get(info, "mountpoint", mp, sizeof(mp)));
    sc->n++;
    if (strcmp(state, "live") != 0)
        sc->not_live++;
    /* A mounter of this machine: its live figures, from its stats file. */
    char self[128] = "";
    struct mnt_live l;
    uint64_t p = 0;
    if (gethostname(self, sizeof(self) - 1) != 0)
        self[0] = '\0';
    if (strcmp(self, host) == 0 && mp[0] == '/' && mnt_parse_u64(pid, &p) == 0 &&
        mnt_stats_read(mp, &l) == 0 && l.pid == p)
        mnt_stats_print(sc->out, &l, "         ");
    return 0;
}

/* Mount points on this host whose live mounter serves the volume at url (the
 * same META_URL, passwords aside), as "PATH (pid N)", comma-separated, into buf.
 * Returns how many. */
static int local_mounters(const char *url, char *buf, size_t size)
{
    char want[1024], have[1024];
    char *dir = keg_asprintf("%s/mounts", mnt_run_dir());
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *de;
    int n = 0;
    buf[0] = '\0';
    keg_url_redact(url, want, sizeof(want));
    while (d && (de = readdir(d)) != NULL) {
        if (strlen(de->d_name) != 16)
            continue;           /* state files only (not .stats, temp files) */
        char *path = keg_asprintf("%s/%s", dir, de->d_name);
        char *text = NULL, *save = NULL, *mp = NULL, *murl = NULL;
        uint64_t pid = 0;
        if (!path || mnt_read_small_file(path, &text) != 0) {
            keg_free(path);
            continue;
        }
        for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
            if (strncmp(ln, "pid=", 4) == 0)
                mnt_parse_u64(ln + 4, &pid);
            else if (strncmp(ln, "mountpoint=", 11) == 0)
                mp = ln + 11;
            else if (strncmp(ln, "meta_url=", 9) == 0)
                murl = ln + 9;
        }
        if (murl && mp && pid > 0 && kill((pid_t)pid, 0) == 0 &&
            strcmp(keg_url_redact(murl, have, sizeof(have)), want) == 0) {
            size_t o = strlen(buf);
            snprintf(buf + o, size - o, "%s%s (pid %llu)", n ? ", " : "", mp,
                     (unsigned long long)pid);
            n++;
        }
        memset(text, 0, strlen(text));      /* it held the META_URL */
        keg_free(text);
        keg_free(path);
    }
    if (d)
        closedir(d);
    keg_free(dir);
    return n;
}

/*----- the command -----*/

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs status [OPTIONS] META_URL\n"
        "\n"
        "Show the settings (secrets redacted), the active sessions (mounters) and the\n"
        "space and inode usage of the volume at META_URL.\n"
        "\n"
        "Options:\n"
        MNT_COMMON_HELP
        "\n"
        "Exit status: 0 shown, 1 error (e.g. not formatted), 2 usage error.\n");
}

int mnt_cmd_status(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct keg_meta *m = NULL;
    struct keg_format f;
    char red[1024];
    char a[32], b[32];
    int opt;
    int rc;
    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        if (opt == 'h') {
            usage(stdout);
            return 0;
        }
        return mnt_usage_error("status", argc, argv);
    }
    if (argc - optind != 1) {
        mnt_error("status needs META_URL (see 'kegfs status --help')");
        return 2;
    }
    const char *url = argv[optind];
    keg_url_redact(url, red, sizeof(red));
    if (mnt_log_file && keg_log_set_file(mnt_log_file) < 0)
        mnt_warn("cannot open --log-file %s", mnt_log_file);
    if (mnt_open_meta(url, &m))
        return 1;
    memset(&f, 0, sizeof(f));
    rc = keg_meta_format_load(m, &f);
    if (rc == -ENOENT) {
        char mounts[1024];
        if (local_mounters(url, mounts, sizeof(mounts)) > 0)
            mnt_error("the volume's metadata is GONE from %s: no format there, but it is "
                      "mounted on this host at %s. The metadata engine lost its data (e.g. "
                      "Redis restarted without persistence, or flushed); the mount returns "
                      "EIO. Restore the engine's data from a backup, or unmount", red, mounts);
        else
            mnt_error("no volume is formatted at %s (run 'kegfs format' first)", red);
        rc = 1;
        goto out;
    } else if (rc) {
        mnt_error("cannot read the format at %s: %s", red, strerror(-rc));
        rc = 1;
        goto out;
    }
    printf("Volume %s at %s\n", f.name, red);
    mnt_print_format(stdout, &f);

    printf("Sessions:\n");
    struct sess_ctx sc = {.out = stdout, .n = 0};
    rc = keg_meta_session_list(m, print_session, &sc);
    if (rc < 0)
        printf("  (cannot list sessions: %s)\n", strerror(-rc));
    else if (sc.n == 0)
        printf("  (none)\n");
    if (sc.not_live)
        printf("  dead: the mounter's process on this host is gone; stale: no heartbeat for "
               "over %d s.\n  A live mounter removes such a session once its session timeout "
               "has passed, and frees what it held.\n", STATUS_STALE_SEC);

    uint64_t used_bytes = 0, used_inodes = 0;
    rc = keg_meta_statfs(m, &used_bytes, &used_inodes);
    printf("Usage:\n");
    if (rc < 0) {
        printf("  (cannot read usage: %s)\n", strerror(-rc));
    } else {
        if (f.capacity)
            printf("  space:  %s of %s (%.1f%%)\n", mnt_fmt_size(used_bytes, a, sizeof(a)),
                   mnt_fmt_size(f.capacity, b, sizeof(b)),
                   100.0 * (double)used_bytes / (double)f.capacity);
        else
            printf("  space:  %s (no quota)\n", mnt_fmt_size(used_bytes, a, sizeof(a)));
        if (f.inodes)
            printf("  inodes: %llu of %llu (%.1f%%)\n", (unsigned long long)used_inodes,
                   (unsigned long long)f.inodes,
                   100.0 * (double)used_inodes / (double)f.inodes);
        else
            printf("  inodes: %llu (no quota)\n", (unsigned long long)used_inodes);
    }
    rc = 0;
out:
    memset(&f, 0, sizeof(f));
    keg_meta_close(m);
    return rc;
}
