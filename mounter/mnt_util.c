/* mnt_util.c -- helpers of the kegfs CLI: messages, common options, number
 * parsing, mount-point paths and the per-mount state file.
 *
 * DESIGN
 * The state file "<run_dir>/mounts/<hash of mount point>" (mode 0600) is how
 * the other sub-commands find a running mounter: `kegfs umount` reads its pid
 * to wait for the mounter to exit (so that unmount means "data flushed"), and
 * `kegfs info` reads the META_URL of the volume behind a path.  The META_URL may
 * hold a password, hence 0600 and never a world-readable place.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEG_LOG_TAG "mnt"
#include "keg/hash.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/mountinfo.h"

#include "mnt_i.h"

/*----- messages and common options -----*/

static char last_error[1024];
int mnt_debug;
const char *mnt_log_file;
int mnt_no_progress;

void mnt_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    fputs("kegfs: ", stderr);
    keg_log_fputs_escaped(stderr, last_error);      /* names may hold control bytes */
    fputc('\n', stderr);
    fflush(stderr);
}

const char *mnt_last_error(void)
{
    return last_error;
}

void mnt_warn(const char *fmt, ...)
{
    va_list ap;
    char msg[2048];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fputs("kegfs: ", stderr);
    keg_log_fputs_escaped(stderr, msg);
    fputc('\n', stderr);
}

int mnt_common_opt(int opt, const char *arg)
{
    switch (opt) {
    case 'v':
        if (keg_log_level < LOG_INFO)
            keg_log_set_level(LOG_INFO);
        return 1;
    case MNT_OPT_DEBUG:
        mnt_debug = 1;
        keg_log_set_level(LOG_DEBUG);
        return 1;
    case MNT_OPT_QUIET:
        keg_log_set_level(LOG_ERR);
        return 1;
    case MNT_OPT_LOG_FILE:
        mnt_log_file = arg;
        return 1;
    case MNT_OPT_NO_PROGRESS:
        mnt_no_progress = 1;
        return 1;
    default:
        return 0;
    }
}

void mnt_open_log_file(void)
{
    if (mnt_log_file && keg_log_set_file(mnt_log_file) < 0)
        mnt_warn("cannot open --log-file %s", mnt_log_file);
}

int mnt_usage_error(const char *cmd, int argc, char **argv)
{
    /* getopt left the offending word just before optind (optopt: a short option) */
    const char *word = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    char shortopt[3] = { '-', (char)optopt, '\0' };
    if (optopt && optopt < 0x80)
        word = shortopt;
    mnt_error("%s%sunknown option or missing value: '%s'; see 'kegfs %s%s--help'",
              cmd ? cmd : "", cmd ? ": " : "", word, cmd ? cmd : "", cmd ? " " : "");
    return 2;
}

int mnt_parse_cmdline(int argc, char **argv, struct mnt_cmdline *c)
{
    int opt;

    c->flag = 0;
    c->operand = NULL;
    while ((opt = getopt_long(argc, argv, c->shortopts, c->longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        if (opt == 'h') {
            c->usage(stdout);
            return 0;
        } else if (c->flag_opt && opt == c->flag_opt) {
            c->flag = 1;
        } else if (c->threads_opt && opt == c->threads_opt) {
            if (mnt_parse_u64(optarg, &c->threads) != 0 || c->threads == 0 || c->threads > 64) {
                mnt_error("--threads: '%s' is not a number from 1 to 64", optarg);
                return 2;
            }
        } else {
            return mnt_usage_error(c->name, argc, argv);
        }
    }
    if (optind != argc - 1) {
        mnt_error("%s", c->usage_error);
        return 2;
    }
    c->operand = argv[optind];
    return -1;
}

/*----- numbers -----*/

int mnt_parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    *out = 0;
    if (!s || !isdigit((unsigned char)s[0]))
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    if (*end)
        return -EINVAL;
    *out = v;
    return 0;
}

int mnt_parse_size(const char *s, uint64_t *out)
{
    char *end = NULL;
    unsigned shift = 0;
    *out = 0;
    if (!s || !isdigit((unsigned char)s[0]))
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    case 'P': shift = 50; end++; break;
    case 'B': case '\0': break;
    default: return -EINVAL;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return -EINVAL;
    if (shift && v > (UINT64_MAX >> shift))
        return -ERANGE;
    *out = (uint64_t)v << shift;
    return 0;
}

int mnt_parse_seconds(const char *s, double *out)
{
    char *end = NULL;
    *out = 0;
    if (!s || !(isdigit((unsigned char)s[0]) || s[0] == '.'))
        return -EINVAL;
    double v = strtod(s, &end);
    if (*end || v < 0 || v > 86400.0 * 365)
        return -EINVAL;
    *out = v;
    return 0;
}

const char *mnt_fmt_size(uint64_t v, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    double d = (double)v;
    while (d >= 1024 && u < 6) {
        d /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu B", (unsigned long long)v);
    else
        snprintf(buf, size, "%.4g %s", d, units[u]);
    return buf;
}

/*----- paths -----*/

int mnt_abspath_cwd(const char *p, char **out)
{
    char cwd[PATH_MAX];
    *out = NULL;
    if (!p || !*p)
        return -EINVAL;
    if (p[0] == '/')
        *out = keg_strdup(p);
    else if (!getcwd(cwd, sizeof(cwd)))
        return -errno;
    else
        *out = keg_asprintf("%s/%s", cwd, p);
    return *out ? 0 : -ENOMEM;
}

int mnt_abspath(const char *p, char **out)
{
    char buf[PATH_MAX];
    *out = NULL;
    if (!p || !*p)
        return -EINVAL;
    if (realpath(p, buf)) {
        *out = keg_strdup(buf);
        return *out ? 0 : -ENOMEM;
    }
    int rc = -errno;
    if (rc != -ENOTCONN && rc != -EIO)
        return rc;
    /* A dead FUSE mount: resolve the parent, keep the last name as given. */
    char *copy = keg_strdup(p);
    if (!copy)
        return -ENOMEM;
    size_t len = strlen(copy);
    while (len > 1 && copy[len - 1] == '/')
        copy[--len] = '\0';
    char *slash = strrchr(copy, '/');
    const char *parent = ".";
    const char *base = copy;
    if (slash == copy) {
        parent = "/";
        base = copy + 1;
    } else if (slash) {
        *slash = '\0';
        parent = copy;
        base = slash + 1;
    }
    if (!realpath(parent, buf)) {
        rc = -errno;
        keg_free(copy);
        return rc;
    }
    *out = keg_asprintf("%s/%s", strcmp(buf, "/") == 0 ? "" : buf, base);
    keg_free(copy);
    return *out ? 0 : -ENOMEM;
}


void mnt_path_hash(const char *abs, char out[17])
{
    keg_fnv1a64_hex(abs, out);
}

const char *mnt_run_dir(void)
{
    static char dir[256];
    const char *env = getenv("KEGFS_RUN_DIR");
    if (env && *env)
        snprintf(dir, sizeof(dir), "%s", env);
    else if (geteuid() == 0)
        snprintf(dir, sizeof(dir), "/run/kegfs");
    else
        snprintf(dir, sizeof(dir), "/tmp/kegfs-%u", (unsigned)geteuid());
    return dir;
}

static char *state_path(const char *abs_mp)
{
    char h[17];
    mnt_path_hash(abs_mp, h);
    return keg_asprintf("%s/mounts/%s", mnt_run_dir(), h);
}

pid_t mnt_state_file_pid(const char *path)
{
    char *text = NULL;
    uint64_t v = 0;
    if (mnt_read_small_file(path, &text) != 0)
        return 0;
    if (strncmp(text, "pid=", 4) == 0) {
        size_t n = strcspn(text + 4, "\n");
        text[4 + n] = '\0';
        if (mnt_parse_u64(text + 4, &v) != 0)
            v = 0;
    }
    keg_free(text);
    return (pid_t)v;
}

void mnt_state_prune(void)
{
    char *dir = keg_asprintf("%s/mounts", mnt_run_dir());
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *de;
    if (!d) {
        keg_free(dir);
        return;
    }
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.')
            continue;
        if (len == 22 && strcmp(de->d_name + 16, ".stats") == 0) {
            /* stats of a dead mounter: its pid is the first line too */
            char *sp = keg_asprintf("%s/%s", dir, de->d_name);
            pid_t spid = sp ? mnt_state_file_pid(sp) : 0;
            if (sp && spid > 0 && kill(spid, 0) < 0 && errno == ESRCH)
                unlink(sp);
            keg_free(sp);
            continue;
        }
        if (len != 16)
            continue;
        char *path = keg_asprintf("%s/%s", dir, de->d_name);
        if (!path)
            break;
        pid_t pid = mnt_state_file_pid(path);
        if (pid > 0 && kill(pid, 0) < 0 && errno == ESRCH) {
            KEG_DEBUG("removing the state file of dead mounter %d: %s", (int)pid, path);
            unlink(path);
        }
        keg_free(path);
    }
    closedir(d);
    keg_free(dir);
}

int mnt_state_write(const char *abs_mp, pid_t pid, const char *meta_url, unsigned drain_timeout)
{
    char *dir = keg_asprintf("%s/mounts", mnt_run_dir());
    char *path = state_path(abs_mp);
    char *tmp = path ? keg_asprintf("%s.tmp.%d", path, (int)getpid()) : NULL;
    int rc = 0;
    int fd = -1;
    if (!dir || !path || !tmp) {
        rc = -ENOMEM;
        goto out;
    }
    if (mkdir(mnt_run_dir(), 0700) < 0 && errno != EEXIST) {
        rc = -errno;
        goto out;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        rc = -errno;
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    if (dprintf(fd, "pid=%d\nmountpoint=%s\nmeta_url=%s\ndrain_timeout=%u\n", (int)pid, abs_mp,
                meta_url, drain_timeout) < 0 ||
        fsync(fd) < 0) {
        rc = -errno;
        goto out;
    }
    if (rename(tmp, path) < 0)
        rc = -errno;
out:
    if (fd >= 0)
        close(fd);
    if (rc && tmp)
        unlink(tmp);
    keg_free(dir);
    keg_free(path);
    keg_free(tmp);
    return rc;
}

unsigned mnt_state_drain_timeout(const char *abs_mp)
{
    char *path = state_path(abs_mp);
    char *text = NULL;
    uint64_t v = 0;
    if (path && mnt_read_small_file(path, &text) == 0) {
        const char *p = strstr(text, "\ndrain_timeout=");
        if (p) {
            p += strlen("\ndrain_timeout=");
            char num[24];
            size_t n = strcspn(p, "\n");
            if (n < sizeof(num)) {
                memcpy(num, p, n);
                num[n] = '\0';
                if (mnt_parse_u64(num, &v) != 0 || v > 86400)
                    v = 0;
            }
        }
    }
    if (text)
        memset(text, 0, strlen(text));   /* it holds the META_URL */
    keg_free(text);
    keg_free(path);
    return (unsigned)v;
}

void mnt_state_remove(const char *abs_mp, pid_t owner)
{
    char *path = state_path(abs_mp);
    if (path && (owner == 0 || mnt_state_file_pid(path) == owner))
        unlink(path);
    keg_free(path);
}

int mnt_set_read_ahead(const char *abs_mp, uint64_t bytes)
{
    char dev[32], path[96];
    int rc = keg_mountinfo_dev(abs_mp, dev, sizeof(dev));
    if (rc < 0)
        return rc;
    if (rc == 0)
        return -ENOENT;
    if (dev[strspn(dev, "0123456789:")] != '\0')
        return -EINVAL;      /* not a device number: never build a path from it */
    snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char val[32];
    int n = snprintf(val, sizeof(val), "%llu\n", (unsigned long long)(bytes >> 10));
    rc = write(fd, val, (size_t)n) == n ? 0 : -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    return rc;
}

int mnt_read_small_file(const char *path, char **out)
{
    char buf[8192];
    size_t n = 0;
    int rc = 0;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n == sizeof(buf) - 1) {
            rc = -EFBIG;
            break;
        }
    }
    close(fd);
    if (rc)
        return rc;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    *out = keg_strdup(buf);
    return *out ? 0 : -ENOMEM;
}

int mnt_state_read(const char *abs_mp, pid_t *pid, char **meta_url)
{
    char *path = state_path(abs_mp);
    char *text = NULL;
    int rc;
    if (pid)
        *pid = 0;
    if (meta_url)
        *meta_url = NULL;
    if (!path)
        return -ENOMEM;
    rc = mnt_read_small_file(path, &text);
    keg_free(path);
    if (rc)
        return rc;
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (strncmp(ln, "pid=", 4) == 0 && pid) {
            uint64_t v = 0;
            if (mnt_parse_u64(ln + 4, &v) == 0)
                *pid = (pid_t)v;
        } else if (strncmp(ln, "meta_url=", 9) == 0 && meta_url) {
            keg_free(*meta_url);
            *meta_url = keg_strdup(ln + 9);
        }
    }
    keg_free(text);
    if (meta_url && !*meta_url)
        return -EINVAL;
    return 0;
}
