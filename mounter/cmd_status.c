/* cmd_status.c -- `kegfs status`: settings, sessions and usage of a volume,
 * plus the helpers the tools share (opening the engine, printing a format). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
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

int mnt_open_meta(const char *url, struct keg_meta **m)
{
    struct keg_url u;
    const char *why = NULL;
    char red[1024];
    *m = NULL;
    keg_url_redact(url, red, sizeof(red));
    int rc = keg_url_parse(url, &u, &why);
    if (rc) {
        mnt_error("invalid META_URL '%s': %s", red, why ? why : strerror(-rc));
        return rc;
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
};

static int print_session(void *arg, const struct keg_session_info *s)
{
    struct sess_ctx *sc = arg;
    char host[128], pid[32], mp[1024], ver[32];
    const char *info = s->info ? s->info : "";
    long age = (long)(time(NULL) - s->heartbeat);
    char hb[32];
    snprintf(hb, sizeof(hb), "%lds ago", age < 0 ? 0 : age);
    if (sc->n == 0)
        fprintf(sc->out, "  %-6s %-20s %-8s %-10s %-8s %s\n", "SID", "HOST", "PID",
                "HEARTBEAT", "VERSION", "MOUNTPOINT");
    fprintf(sc->out, "  %-6llu %-20s %-8s %-10s %-8s %s\n", (unsigned long long)s->sid,
            info_get(info, "host", host, sizeof(host)), info_get(info, "pid", pid, sizeof(pid)),
            hb, info_get(info, "version", ver, sizeof(ver)),
            info_get(info, "mountpoint", mp, sizeof(mp)));
    sc->n++;
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
        usage(stderr);
        return 2;
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
    rc = KEG_META_CALL(m, format_load, &f);
    if (rc == -ENOENT) {
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
    rc = KEG_META_CALL(m, session_list, print_session, &sc);
    if (rc < 0)
        printf("  (cannot list sessions: %s)\n", strerror(-rc));
    else if (sc.n == 0)
        printf("  (none)\n");

    uint64_t used_bytes = 0, used_inodes = 0;
    rc = KEG_META_CALL(m, statfs, &used_bytes, &used_inodes);
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
