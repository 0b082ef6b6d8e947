/* cmd_holder.c -- `kegfs holder`: the long-lived process that owns the mounters
 * of a node, so that restarting or upgrading the CSI node plugin never touches a
 * mount.  See docs/internals/MOUNT-HOLDER.md.
 *
 * DESIGN
 * The holder serves a unix stream socket (mode 0600) on a host path shared with
 * the node plugin.  One request per connection, text lines:
 *
 *     request:  VERB\n key=value\n ... \n          (blank line ends it)
 *     answer:   ok\n key=value\n ... \n   or   error ERRNO\n message=...\n \n
 *
 *   mount     volume_id, target, options, readonly, metrics (1: the mounter serves
 *             /metrics on a unix socket); the mounter config (META_URL and keys)
 *             comes as a descriptor (SCM_RIGHTS), never in the text.
 *             Idempotent: a live mounter at target for the same volume is the
 *             answer.  Answer: pid, metrics (its socket, or empty).
 *   unmount   target: unmount (lazily if busy), stop the mounter, forget it.
 *   list      every mount: "mount=<target>" followed by its volume_id, pid,
 *             state (live | starting | restarting), binary, restarts, metrics.
 *   upgrade   binary [, target]: `kegfs upgrade` each mounter (all, or target)
 *             not already running binary; new mounters use it from then on.
 *
 * Mounters are `<binary> mount --config <state>/mounts/<hash>.yaml --over-stale
 * -o allow_other [-o <options>] [--metrics unix:<state>/metrics/<hash>.sock] <target>`
 * children of the holder, each in its own session, stdout/stderr to
 * <state>/logs/<hash>.log, KEGFS_RUN_DIR=<state>/run.  The table of mounts is
 * persisted in <state>/holder.state (no secrets; the configs are 0600 files).
 * The metrics sockets are where the node plugin, which sees <state> at the same
 * path, fetches each mounter's /metrics.
 *
 * The monitor thread (every --check-ms) reaps exited mounters and restarts every
 * mount that is still wanted and whose mounter is gone: a fresh mounter mounts the
 * same target on top of the dead mount (`mount --over-stale`), so the new mount
 * also propagates into containers that bound target with HostToContainer (rslave)
 * propagation; unmount removes every layer.  It
 * never stats a target (a stat waits for the FUSE daemon); a mounter that is
 * alive is trusted: its supervisor restarts a crashed worker itself.  A target
 * whose parent directory is gone (the pod was deleted) is forgotten.
 *
 * At start the holder reads its table: mounters still running (they survive the
 * holder only if they were not in its container) are adopted by pid; the others
 * are restarted by the monitor.
 *
 * LOCKS: hold_mu protects the table (mounts, n_mounts, mounter_bin).  It is
 * never held while waiting for a mount to come up or for an upgrade; a mount
 * being started or upgraded is marked busy and skipped by the monitor.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "holder"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/metrics.h"
#include "keg/spawn.h"
#include "keg/unix_listen.h"

#include "mnt_i.h"


#define HOLD_MOUNT_WAIT_MS 30000
#define HOLD_MAX_REQ      (64 * 1024)

struct hmount {
    char    *volume_id, *target, *options, *config, *binary;
    char    *metrics;        /* its metrics socket, "" for none */
    int      readonly;
    pid_t    pid;            /* the mounter (supervisor); 0: not running */
    int      busy;           /* a request is starting or upgrading it */
    unsigned restarts;       /* by the monitor, since the mounter last ran 10 s */
    uint64_t next_try_ms;    /* restart backoff */
    uint64_t spawned_ms;     /* when the monitor last started it */
};

static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hmount *mounts;          /* protected by hold_mu */
static size_t n_mounts, cap_mounts;    /* protected by hold_mu */
static char *mounter_bin;              /* protected by hold_mu */
static char *state_dir, *state_file;
static char *cg_dir;                   /* cgroup for per-mounter limits, or NULL */
static int cg_v1;                      /* cg_dir is in a cgroup v1 memory hierarchy */
static uint64_t memory_max;
static unsigned check_ms = 200;
static volatile sig_atomic_t hold_stop;

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void msleep(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !hold_stop)
        ;
}

static void hm_clear(struct hmount *m)
{
    keg_free(m->volume_id);
    keg_free(m->target);
    keg_free(m->options);
    keg_free(m->config);
    keg_free(m->binary);
    keg_free(m->metrics);
    memset(m, 0, sizeof(*m));
}

/* LOCKS: hold_mu. */
static struct hmount *hm_find(const char *target)
{
    for (size_t i = 0; i < n_mounts; i++)
        if (strcmp(mounts[i].target, target) == 0)
            return &mounts[i];
    return NULL;
}

/* LOCKS: hold_mu.  TAKES m's fields.  Returns the entry or NULL (-ENOMEM). */
static struct hmount *hm_add(struct hmount *m)
{
    if (n_mounts == cap_mounts) {
        size_t nc = cap_mounts ? cap_mounts * 2 : 16;
        struct hmount *a = keg_realloc(mounts, nc * sizeof(*a));
        if (!a) {
            hm_clear(m);
            return NULL;
        }
        mounts = a;
        cap_mounts = nc;
    }
    mounts[n_mounts] = *m;
    memset(m, 0, sizeof(*m));
    return &mounts[n_mounts++];
}

/* LOCKS: hold_mu. */
static void hm_remove(struct hmount *m)
{
    size_t i = (size_t)(m - mounts);
    hm_clear(m);
    mounts[i] = mounts[--n_mounts];
}

/*----------------------------------------------------------------------------
 * The table file
 *--------------------------------------------------------------------------*/

/* LOCKS: hold_mu.  Text: "mounter=PATH", then per mount a "mount=TARGET" line
 * followed by its fields.  Written to a temp file, fsynced, renamed. */
static void hm_save(void)
{
    char *tmp = keg_asprintf("%s.tmp", state_file);
    if (!tmp)
        return;
    FILE *fp = fopen(tmp, "we");
    if (!fp) {
        KEG_ERR("cannot write %s: %s", tmp, strerror(errno));
        keg_free(tmp);
        return;
    }
    fprintf(fp, "mounter=%s\n", mounter_bin);
    for (size_t i = 0; i < n_mounts; i++) {
        const struct hmount *m = &mounts[i];
        fprintf(fp, "mount=%s\nvolume_id=%s\noptions=%s\nreadonly=%d\nconfig=%s\nbinary=%s\n"
                "pid=%ld\nmetrics=%s\n", m->target, m->volume_id, m->options, m->readonly,
                m->config, m->binary, (long)m->pid, m->metrics);
    }
    int ok = fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    if (fclose(fp) != 0)
        ok = 0;
    if (!ok || rename(tmp, state_file) < 0) {
        KEG_ERR("cannot write %s: %s", state_file, strerror(errno));
        unlink(tmp);
    }
    keg_free(tmp);
}

static int hm_set(char **dst, const char *v)
{
    keg_free(*dst);
    *dst = keg_strdup(v);
    return *dst ? 0 : -ENOMEM;
}

/* 1 if pid runs a mounter of target (its command line names target). */
static int pid_is_mounter(pid_t pid, const char *target)
{
    return keg_pid_has_arg(pid, target);
}

static void hm_load(void)
{
    char *text = NULL;
    if (mnt_read_small_file(state_file, &text) != 0)
        return;
    struct hmount cur;
    memset(&cur, 0, sizeof(cur));
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save);; ln = strtok_r(NULL, "\n", &save)) {
        if (!ln || strncmp(ln, "mount=", 6) == 0) {
            if (cur.target) {
                if (!cur.volume_id)
                    cur.volume_id = keg_strdup("");
                if (!cur.options)
                    cur.options = keg_strdup("");
                if (!cur.config)
                    cur.config = keg_strdup("");
                if (!cur.binary)
                    cur.binary = keg_strdup(mounter_bin);
                if (!cur.metrics)
                    cur.metrics = keg_strdup("");   /* a table of an older holder */
                if (!pid_is_mounter(cur.pid, cur.target))
                    cur.pid = 0;      /* gone with the previous holder: the monitor restarts it */
                KEG_INFO("target=%s volume_id=%s: %s", cur.target, cur.volume_id,
                         cur.pid ? "mounter still running, adopted" : "to be remounted");
                hm_add(&cur);
            }
            if (!ln)
                break;
            hm_set(&cur.target, ln + 6);
            continue;
        }
        char *eq = strchr(ln, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *v = eq + 1;
        if (strcmp(ln, "mounter") == 0 && !cur.target && access(v, X_OK) == 0)
            hm_set(&mounter_bin, v);
        else if (!cur.target)
            continue;
        else if (strcmp(ln, "volume_id") == 0)
            hm_set(&cur.volume_id, v);
        else if (strcmp(ln, "options") == 0)
            hm_set(&cur.options, v);
        else if (strcmp(ln, "config") == 0)
            hm_set(&cur.config, v);
        else if (strcmp(ln, "binary") == 0)
            hm_set(&cur.binary, v);
        else if (strcmp(ln, "metrics") == 0)
            hm_set(&cur.metrics, v);
        else if (strcmp(ln, "readonly") == 0)
            cur.readonly = strtol(v, NULL, 10) != 0;
        else if (strcmp(ln, "pid") == 0)
            cur.pid = (pid_t)strtol(v, NULL, 10);
    }
    keg_free(text);
}

/*----------------------------------------------------------------------------
 * Mounters
 *--------------------------------------------------------------------------*/

static int write_small(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, text, strlen(text));
    int rc = n == (ssize_t)strlen(text) ? 0 : -errno;
    close(fd);
    return rc;
}

/* Per-mounter cgroup with memory.max (v2) or memory.limit_in_bytes (v1), best
 * effort. */
static void cg_place(pid_t pid, const char *target)
{
    char h[17], num[32];
    if (!cg_dir || !memory_max)
        return;
    mnt_path_hash(target, h);
    char *dir = keg_asprintf("%s/mnt-%s", cg_dir, h);
    char *mm = keg_asprintf("%s/mnt-%s/%s", cg_dir, h,
                            cg_v1 ? "memory.limit_in_bytes" : "memory.max");
    char *procs = keg_asprintf("%s/mnt-%s/cgroup.procs", cg_dir, h);
    if (dir && mm && procs) {
        snprintf(num, sizeof(num), "%llu", (unsigned long long)memory_max);
        snprintf(h, sizeof(h), "%ld", (long)pid);
        if ((mkdir(dir, 0755) < 0 && errno != EEXIST) || write_small(mm, num) < 0 ||
            write_small(procs, h) < 0)
            KEG_WARN("target=%s: no cgroup memory limit for the mounter: %s", target,
                     strerror(errno));
    }
    keg_free(dir);
    keg_free(mm);
    keg_free(procs);
}

/* Remove the cgroup of target's mounter once it has exited: up to 2 s while
 * its last process (a worker leaving after its supervisor) is still in it. */
static void cg_release(const char *target)
{
    char h[17];
    if (!cg_dir || !memory_max)
        return;
    mnt_path_hash(target, h);
    char *dir = keg_asprintf("%s/mnt-%s", cg_dir, h);
    int rc = -1;
    for (int i = 0; dir && i < 40 && (rc = rmdir(dir)) < 0 && errno == EBUSY; i++)
        msleep(50);
    if (dir && rc < 0 && errno != ENOENT)
        KEG_WARN("target=%s: cannot remove the mounter's cgroup %s: %s", target, dir,
                 strerror(errno));
    keg_free(dir);
}

/* The metrics socket of the mounter of target, "<state>/metrics/<hash>.sock", into out
 * (KEG_METRICS_UNIX_PATH_MAX bytes); "" (logged) when it does not fit a socket address. */
static void metrics_path(const char *target, char *out)
{
    char h[17];
    mnt_path_hash(target, h);
    int n = snprintf(out, KEG_METRICS_UNIX_PATH_MAX, "%s/metrics/%s.sock", state_dir, h);
    if (n < 0 || n >= KEG_METRICS_UNIX_PATH_MAX) {
        KEG_WARN("target=%s: %s/metrics is too long for a unix socket path: no metrics "
                 "socket", target, state_dir);
        out[0] = '\0';
    }
}

/* Remove the metrics socket file a mounter of m left (it did not exit cleanly). */
static void unlink_metrics(const char *path)
{
    struct stat st;
    if (path && path[0] && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
}

/* Start the mounter of m.  LOCKS: hold_mu (short: a posix_spawn).  Returns 0 or -errno. */
static int hm_spawn(struct hmount *m)
{
    const char *argv[16];
    char h[17], metrics[KEG_METRICS_UNIX_PATH_MAX + 5];
    int argc = 0;
    mnt_path_hash(m->target, h);
    char *log = keg_asprintf("%s/logs/%s.log", state_dir, h);
    if (!log)
        return -ENOMEM;
    argv[argc++] = m->binary;
    argv[argc++] = "mount";
    argv[argc++] = "--config";
    argv[argc++] = m->config;
    argv[argc++] = "--over-stale";
    if (m->readonly)
        argv[argc++] = "--read-only";
    /* Pods run as any uid and gid (kubelet and the runtime look into the target
     * too): every mount of the holder is allow_other, as in process mode. */
    argv[argc++] = "-o";
    argv[argc++] = "allow_other";
    if (m->options && *m->options) {
        argv[argc++] = "-o";
        argv[argc++] = m->options;
    }
    if (m->metrics && m->metrics[0]) {
        snprintf(metrics, sizeof(metrics), "unix:%s", m->metrics);
        argv[argc++] = "--metrics";
        argv[argc++] = metrics;
    }
    argv[argc++] = m->target;
    argv[argc] = NULL;
    pid_t pid = 0;
    int rc = -keg_spawn_logged(m->binary, argv, log, &pid);
    if (rc) {
        KEG_ERR("target=%s: cannot start %s: %s", m->target, m->binary, strerror(rc));
        keg_free(log);
        return -rc;
    }
    m->pid = pid;
    cg_place(pid, m->target);
    KEG_INFO("target=%s volume_id=%s: mounter pid %ld started (%s, log %s)", m->target,
             m->volume_id, (long)pid, m->binary, log);
    keg_free(log);
    return 0;
}

/* Unmount every FUSE mount stacked at target (a restarted mounter mounts on top
 * of the dead one), lazily when busy.  Returns 0 or -errno. */
static int unmount_all(const char *target)
{
    char fstype[64];
    for (int i = 0; i < 64; i++) {
        if (mnt_is_mountpoint(target, fstype, sizeof(fstype)) <= 0 ||
            strncmp(fstype, "fuse", 4) != 0)
            return 0;
        int rc = keg_umount_or_detach(target);
        if (rc == -EINVAL || rc == -ENOENT)
            return 0;
        if (rc < 0)
            return rc;
    }
    return -EBUSY;
}

/* A mounter the holder started or adopted, and the target it mounts. */
struct hproc {
    pid_t       pid;
    const char *target;
};

/* Whether the mounter went away (the monitor reaps it). */
static int hproc_gone(void *arg)
{
    const struct hproc *p = arg;
    return !pid_is_mounter(p->pid, p->target);
}

/* Whether the mounter is no longer the one held for its target: it exited
 * (the monitor cleared its pid) or the mount was forgotten. */
static int hproc_replaced(void *arg)
{
    const struct hproc *p = arg;
    pthread_mutex_lock(&hold_mu);
    struct hmount *m = hm_find(p->target);
    int gone = !m || m->pid != p->pid;
    pthread_mutex_unlock(&hold_mu);
    return gone;
}

/* Stop pid (a mounter of target): TERM, then KILL after 5 s.  The monitor reaps. */
static void stop_pid(pid_t pid, const char *target)
{
    struct hproc p = {.pid = pid, .target = target};
    if (!pid_is_mounter(pid, target))
        return;
    kill(pid, SIGTERM);
    if (keg_wait_gone(hproc_gone, &p, 5000, 50))
        return;
    KEG_WARN("target=%s: mounter %ld ignored SIGTERM, killing it", target, (long)pid);
    kill(pid, SIGKILL);
}

/*----------------------------------------------------------------------------
 * Requests
 *--------------------------------------------------------------------------*/

struct hreq {
    char verb[32];
    char *text;      /* the key=value lines */
    int   fd;        /* a descriptor that came with it, or -1 */
};

static const char *rq_get(const struct hreq *r, const char *key, char *buf, size_t size)
{
    size_t kl = strlen(key);
    buf[0] = '\0';
    for (const char *ln = r->text; ln && *ln;) {
        const char *nl = strchr(ln, '\n');
        size_t len = nl ? (size_t)(nl - ln) : strlen(ln);
        if (len > kl && strncmp(ln, key, kl) == 0 && ln[kl] == '=') {
            size_t vl = KEG_MIN(len - kl - 1, size - 1);
            memcpy(buf, ln + kl + 1, vl);
            buf[vl] = '\0';
            return buf;
        }
        ln = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static void reply(int c, const char *text)
{
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = send(c, text + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        off += (size_t)n;
    }
}

static void reply_err(int c, int err, const char *fmt, ...) KEG_PRINTF(3, 4);
static void reply_err(int c, int err, const char *fmt, ...)
{
    char msg[900], out[1000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    snprintf(out, sizeof(out), "error %d\nmessage=%s\n\n", err, msg);
    reply(c, out);
}

/* Copy the config from fd into path (0600).  Returns 0 or -errno. */
static int copy_config(int fd, const char *path)
{
    char buf[8192];
    char *tmp = keg_asprintf("%s.tmp", path);
    if (!tmp)
        return -ENOMEM;
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = 0;
    if (out < 0) {
        rc = -errno;
        keg_free(tmp);
        return rc;
    }
    lseek(fd, 0, SEEK_SET);
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        if (write(out, buf, (size_t)n) != n) {
            rc = -EIO;
            break;
        }
    }
    memset(buf, 0, sizeof(buf));
    if (rc == 0 && fsync(out) < 0)
        rc = -errno;
    close(out);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc)
        unlink(tmp);
    keg_free(tmp);
    return rc;
}

static int valid_path(const char *p)
{
    return p[0] == '/' && !strstr(p, "/../") && !strchr(p, '\n') && strlen(p) < PATH_MAX - 8;
}

static void do_mount(int c, const struct hreq *r)
{
    char vol[256], target[PATH_MAX], opts[2048], ro[8], h[17], met[8];
    char sock[KEG_METRICS_UNIX_PATH_MAX];
    if (!rq_get(r, "volume_id", vol, sizeof(vol)) || !vol[0] ||
        !rq_get(r, "target", target, sizeof(target)) || !valid_path(target)) {
        reply_err(c, EINVAL, "mount needs volume_id and an absolute target");
        return;
    }
    if (!rq_get(r, "options", opts, sizeof(opts)))
        opts[0] = '\0';
    int readonly = rq_get(r, "readonly", ro, sizeof(ro)) && strcmp(ro, "1") == 0;
    sock[0] = '\0';
    if (rq_get(r, "metrics", met, sizeof(met)) && strcmp(met, "1") == 0)
        metrics_path(target, sock);

    pthread_mutex_lock(&hold_mu);
    struct hmount *m = hm_find(target);
    if (m && m->busy) {
        pthread_mutex_unlock(&hold_mu);
        reply_err(c, EBUSY, "target %s is being mounted or upgraded", target);
        return;
    }
    if (m && strcmp(m->volume_id, vol) != 0) {
        pthread_mutex_unlock(&hold_mu);
        reply_err(c, EEXIST, "target %s holds volume %s", target, m->volume_id);
        return;
    }
    if (m && m->pid && pid_is_mounter(m->pid, target) && m->readonly == readonly &&
        strcmp(m->options, opts) == 0) {
        /* a running mounter keeps the metrics socket it has (or has none) */
        char out[128 + KEG_METRICS_UNIX_PATH_MAX];
        snprintf(out, sizeof(out), "ok\npid=%ld\nexisting=1\nmetrics=%s\n\n", (long)m->pid,
                 m->metrics);
        pthread_mutex_unlock(&hold_mu);
        reply(c, out);
        return;
    }
    if (r->fd < 0 && !(m && m->config[0] && access(m->config, R_OK) == 0)) {
        pthread_mutex_unlock(&hold_mu);
        reply_err(c, EINVAL, "mount needs the mounter config as a descriptor");
        return;
    }
    pid_t old = 0;
    if (!m) {
        struct hmount nm;
        memset(&nm, 0, sizeof(nm));
        mnt_path_hash(target, h);
        nm.volume_id = keg_strdup(vol);
        nm.target = keg_strdup(target);
        nm.options = keg_strdup(opts);
        nm.binary = keg_strdup(mounter_bin);
        nm.config = keg_asprintf("%s/mounts/%s.yaml", state_dir, h);
        nm.metrics = keg_strdup(sock);
        nm.readonly = readonly;
        if (!nm.volume_id || !nm.target || !nm.options || !nm.binary || !nm.config ||
            !nm.metrics) {
            hm_clear(&nm);
            pthread_mutex_unlock(&hold_mu);
            reply_err(c, ENOMEM, "out of memory");
            return;
        }
        m = hm_add(&nm);
    } else {
        old = m->pid;
        m->pid = 0;
        m->readonly = readonly;
        hm_set(&m->options, opts);
        hm_set(&m->metrics, sock);
    }
    if (!m) {
        pthread_mutex_unlock(&hold_mu);
        reply_err(c, ENOMEM, "out of memory");
        return;
    }
    m->busy = 1;
    char *config = keg_strdup(m->config);
    pthread_mutex_unlock(&hold_mu);

    int rc = 0;
    if (old)
        stop_pid(old, target);   /* a dead mount left at target is mounted over */
    if (r->fd >= 0)
        rc = config ? copy_config(r->fd, config) : -ENOMEM;
    keg_free(config);
    pthread_mutex_lock(&hold_mu);
    m = hm_find(target);
    if (rc == 0 && m)
        rc = hm_spawn(m);
    pid_t pid = m ? m->pid : 0;
    snprintf(sock, sizeof(sock), "%s", m && m->metrics ? m->metrics : "");
    if (m)
        hm_save();
    pthread_mutex_unlock(&hold_mu);
    if (rc) {
        reply_err(c, -rc, "cannot start the mounter for %s: %s", target, strerror(-rc));
        goto unbusy;
    }
    /* wait until live, or the mounter is gone (the monitor reaps it) */
    struct hproc p = {.pid = pid, .target = target};
    rc = keg_fuse_wait_live(target, HOLD_MOUNT_WAIT_MS, 20, hproc_replaced, &p);
    if (rc == 0) {
        char out[128 + KEG_METRICS_UNIX_PATH_MAX];
        snprintf(out, sizeof(out), "ok\npid=%ld\nmetrics=%s\n\n", (long)pid, sock);
        reply(c, out);
        goto unbusy;
    }
    reply_err(c, -rc, "the mounter for %s %s; see %s/logs/", target,
              rc == -EIO ? "exited before the mount was live" : "was not live in 30 s",
              state_dir);
    if (rc != -EIO)
        stop_pid(pid, target);
    pthread_mutex_lock(&hold_mu);
    m = hm_find(target);
    if (m) {
        unlink(m->config);
        unlink_metrics(m->metrics);
        hm_remove(m);
        hm_save();
    }
    pthread_mutex_unlock(&hold_mu);
    return;
unbusy:
    pthread_mutex_lock(&hold_mu);
    m = hm_find(target);
    if (m)
        m->busy = 0;
    pthread_mutex_unlock(&hold_mu);
}

static void do_unmount(int c, const struct hreq *r)
{
    char target[PATH_MAX];
    if (!rq_get(r, "target", target, sizeof(target)) || !valid_path(target)) {
        reply_err(c, EINVAL, "unmount needs an absolute target");
        return;
    }
    pthread_mutex_lock(&hold_mu);
    struct hmount *m = hm_find(target);
    pid_t pid = 0;
    char *config = NULL, *metrics = NULL;
    if (m) {
        pid = m->pid;
        config = m->config;
        m->config = NULL;
        metrics = m->metrics;
        m->metrics = NULL;
        hm_remove(m);         /* the monitor must not restart it */
        hm_save();
    }
    pthread_mutex_unlock(&hold_mu);
    int rc = unmount_all(target);
    if (pid)
        stop_pid(pid, target);
    cg_release(target);
    if (config) {
        unlink(config);
        keg_free(config);
    }
    unlink_metrics(metrics);
    keg_free(metrics);
    if (rc) {
        reply_err(c, -rc, "unmounting %s: %s", target, strerror(-rc));
        return;
    }
    KEG_INFO("target=%s: unmounted%s", target, m ? "" : " (was not held)");
    reply(c, "ok\n\n");
}

static void do_list(int c)
{
    pthread_mutex_lock(&hold_mu);
    size_t cap = 64 + n_mounts * (PATH_MAX + 512 + KEG_METRICS_UNIX_PATH_MAX) +
                 strlen(mounter_bin);
    char *out = keg_malloc(cap);
    if (!out) {
        pthread_mutex_unlock(&hold_mu);
        reply_err(c, ENOMEM, "out of memory");
        return;
    }
    size_t o = (size_t)snprintf(out, cap, "ok\nmounter=%s\ncount=%zu\n", mounter_bin, n_mounts);
    for (size_t i = 0; i < n_mounts && o < cap; i++) {
        const struct hmount *m = &mounts[i];
        o += (size_t)snprintf(out + o, cap - o,
                              "mount=%s\nvolume_id=%s\npid=%ld\nstate=%s\nbinary=%s\n"
                              "restarts=%u\nreadonly=%d\noptions=%s\nmetrics=%s\n",
                              m->target, m->volume_id, (long)m->pid,
                              m->busy ? "starting" : m->pid ? "live" : "restarting", m->binary,
                              m->restarts, m->readonly, m->options, m->metrics);
    }
    pthread_mutex_unlock(&hold_mu);
    if (o < cap)
        snprintf(out + o, cap - o, "\n");
    reply(c, out);
    keg_free(out);
}

/* Remove the binaries in <state>/bin that neither new mounts nor any mounter
 * use (node plugins leave one per image).  LOCKS: hold_mu. */
static void prune_bins(void)
{
    char *dir = keg_asprintf("%s/bin", state_dir);
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "kegfs-", 6) != 0)
            continue;
        char *p = keg_asprintf("%s/%s", dir, de->d_name);
        int used = !p || strcmp(p, mounter_bin) == 0;
        for (size_t i = 0; p && !used && i < n_mounts; i++)
            used = strcmp(p, mounts[i].binary) == 0;
        if (!used && unlink(p) == 0)
            KEG_INFO("removed %s (no mounter uses it)", p);
        keg_free(p);
    }
    if (d)
        closedir(d);
    keg_free(dir);
}

static void do_upgrade(int c, const struct hreq *r)
{
    char binary[PATH_MAX], only[PATH_MAX], why[512];
    if (!rq_get(r, "binary", binary, sizeof(binary)) || !valid_path(binary) ||
        access(binary, X_OK) < 0) {
        reply_err(c, EINVAL, "upgrade needs binary, an absolute path to an executable");
        return;
    }
    int one = rq_get(r, "target", only, sizeof(only)) != NULL && only[0];
    pthread_mutex_lock(&hold_mu);
    if (!one)
        hm_set(&mounter_bin, binary);     /* new mounts use it from now on */
    size_t n = 0;
    char **targets = keg_calloc(n_mounts + 1, sizeof(*targets));
    for (size_t i = 0; targets && i < n_mounts; i++) {
        struct hmount *m = &mounts[i];
        if ((one && strcmp(m->target, only) != 0) || strcmp(m->binary, binary) == 0 ||
            m->busy || !m->pid)
            continue;
        m->busy = 1;
        targets[n++] = keg_strdup(m->target);
    }
    hm_save();
    pthread_mutex_unlock(&hold_mu);
    size_t cap = 64 + n * (PATH_MAX + 600);
    char *out = keg_malloc(cap);
    size_t o = out ? (size_t)snprintf(out, cap, "ok\nbinary=%s\ncount=%zu\n", binary, n) : 0;
    unsigned failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (!targets[i])
            continue;
        int rc = mnt_upgrade_request(targets[i], binary, 60000, why, sizeof(why), NULL);
        pthread_mutex_lock(&hold_mu);
        struct hmount *m = hm_find(targets[i]);
        if (m) {
            if (rc == 0)
                hm_set(&m->binary, binary);
            m->busy = 0;
        }
        hm_save();
        pthread_mutex_unlock(&hold_mu);
        if (rc)
            failed++;
        KEG_INFO("upgrade %s: %s", rc ? "failed" : "done", why);
        if (out && o < cap)
            o += (size_t)snprintf(out + o, cap - o, "mount=%s\nresult=%s\nmessage=%s\n",
                                  targets[i], rc ? "error" : "ok", why);
        keg_free(targets[i]);
    }
    keg_free(targets);
    pthread_mutex_lock(&hold_mu);
    prune_bins();
    pthread_mutex_unlock(&hold_mu);
    if (out && o < cap)
        snprintf(out + o, cap - o, "failed=%u\n\n", failed);
    if (out)
        reply(c, out);
    else
        reply_err(c, ENOMEM, "out of memory");
    keg_free(out);
}

/* Read one request (and a descriptor) from c.  Returns 0 or -errno. */
static int read_req(int c, struct hreq *r)
{
    char *buf = keg_malloc(HOLD_MAX_REQ + 1);
    size_t n = 0;
    r->fd = -1;
    r->text = NULL;
    if (!buf)
        return -ENOMEM;
    for (;;) {
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(int))];
        } cb;
        struct iovec iov = {.iov_base = buf + n, .iov_len = HOLD_MAX_REQ - n};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
                            .msg_controllen = sizeof(cb.b)};
        ssize_t k = recvmsg(c, &mh, MSG_CMSG_CLOEXEC);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && r->fd < 0)
                memcpy(&r->fd, CMSG_DATA(cm), sizeof(int));
        n += (size_t)k;
        buf[n] = '\0';
        if (strstr(buf, "\n\n") || n == HOLD_MAX_REQ)
            break;
    }
    buf[n] = '\0';
    char *nl = strchr(buf, '\n');
    if (!nl || !strstr(buf, "\n\n")) {
        keg_free(buf);
        return -EINVAL;
    }
    *nl = '\0';
    snprintf(r->verb, sizeof(r->verb), "%s", buf);
    memmove(buf, nl + 1, strlen(nl + 1) + 1);
    r->text = buf;
    return 0;
}

static void *serve_conn(void *arg)
{
    int c = (int)(intptr_t)arg;
    struct hreq r;
    struct timeval tv = {.tv_sec = 10};
    keg_thread_name("keg-holder-req");
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (read_req(c, &r) < 0) {
        reply_err(c, EINVAL, "malformed request");
        close(c);
        return NULL;
    }
    KEG_DEBUG("request %s", r.verb);
    if (strcmp(r.verb, "mount") == 0)
        do_mount(c, &r);
    else if (strcmp(r.verb, "unmount") == 0)
        do_unmount(c, &r);
    else if (strcmp(r.verb, "list") == 0)
        do_list(c);
    else if (strcmp(r.verb, "upgrade") == 0)
        do_upgrade(c, &r);
    else
        reply_err(c, EOPNOTSUPP, "unknown request '%s'", r.verb);
    if (r.fd >= 0)
        close(r.fd);
    keg_free(r.text);
    close(c);
    return NULL;
}

/*----------------------------------------------------------------------------
 * The monitor
 *--------------------------------------------------------------------------*/

static void monitor_once(void)
{
    int st;
    pid_t r;
    while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
        pthread_mutex_lock(&hold_mu);
        for (size_t i = 0; i < n_mounts; i++) {
            if (mounts[i].pid == r) {
                mounts[i].pid = 0;
                KEG_WARN("target=%s: mounter %ld %s %d", mounts[i].target, (long)r,
                         WIFEXITED(st) ? "exited with status" : "was killed by signal",
                         WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            }
        }
        pthread_mutex_unlock(&hold_mu);
    }
    pthread_mutex_lock(&hold_mu);
    uint64_t now = mono_ms();
    for (size_t i = 0; i < n_mounts; i++) {
        struct hmount *m = &mounts[i];
        if (m->busy)
            continue;
        if (m->pid && !pid_is_mounter(m->pid, m->target))
            m->pid = 0;                         /* an adopted mounter that went away */
        /* the backoff is for mounters that keep failing: one that ran 10 s
         * after its restart starts the count again */
        if (m->pid && m->restarts && now - m->spawned_ms > 10000)
            m->restarts = 0;
        if (m->pid || now < m->next_try_ms)
            continue;
        char parent[PATH_MAX];
        snprintf(parent, sizeof(parent), "%s", m->target);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent)
            *slash = '\0';
        if (access(parent, F_OK) < 0) {
            KEG_WARN("target=%s: the pod directory is gone, forgetting the mount", m->target);
            unmount_all(m->target);
            unlink(m->config);
            unlink_metrics(m->metrics);
            hm_remove(m);
            hm_save();
            i--;
            continue;
        }
        /* Mount on top of the dead mount (--over-stale), not after detaching it:
         * a container that bound target with HostToContainer (rslave) propagation
         * holds a copy of the dead mount; a detach would not reach that copy, a
         * mount on top of it does.  Unmount removes every layer. */
        KEG_WARN("target=%s volume_id=%s: mounter gone, mounting again on top of the dead "
                 "mount", m->target, m->volume_id);
        m->restarts++;
        m->next_try_ms = now + (m->restarts > 5 ? 5000 : 500);
        m->spawned_ms = now;
        if (hm_spawn(m) == 0)
            hm_save();
    }
    pthread_mutex_unlock(&hold_mu);
}

static void *monitor(void *arg)
{
    KEG_UNUSED(arg);
    keg_thread_name("keg-holder-mon");
    while (!hold_stop) {
        monitor_once();
        msleep(check_ms);
    }
    return NULL;
}

/*----------------------------------------------------------------------------
 * Setup
 *--------------------------------------------------------------------------*/

/* cgroup v1 (a hybrid or v1 host): the memory hierarchy at
 * /sys/fs/cgroup/memory.  Children of this process's memory cgroup get the
 * limits; v1 has no "no internal processes" rule, so the holder stays where it
 * is.  In a container the hierarchy's root is the container's own cgroup (runc
 * bind-mounts it there) while /proc/self/cgroup names the host path: the
 * host path below the mount is used where it exists, else the mount itself.
 * Best effort: leaves cg_dir NULL on failure. */
static void cg_setup_v1(void)
{
    char *text = NULL, *own = NULL;
    struct statfs sfs;
    if (statfs("/sys/fs/cgroup/memory", &sfs) < 0 || (unsigned long)sfs.f_type != 0x27e0ebUL) {
        KEG_WARN("no per-mounter cgroups: neither a cgroup v2 hierarchy at /sys/fs/cgroup nor "
                 "a v1 memory hierarchy at /sys/fs/cgroup/memory; mounters are bounded by "
                 "--buffer-size only");
        return;
    }
    if (mnt_read_small_file("/proc/self/cgroup", &text) != 0)
        goto out;
    /* "N:memory:/path" (the controller list may name several) */
    const char *path = NULL;
    char *s1 = NULL, *s2 = NULL;
    for (char *ln = strtok_r(text, "\n", &s1); ln; ln = strtok_r(NULL, "\n", &s1)) {
        char *c1 = strchr(ln, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        for (char *t = strtok_r(c1 + 1, ",", &s2); t; t = strtok_r(NULL, ",", &s2))
            if (strcmp(t, "memory") == 0)
                path = c2 + 1;
        if (path)
            break;
    }
    struct stat st;
    if (path && strcmp(path, "/") != 0) {
        own = keg_asprintf("/sys/fs/cgroup/memory%s", path);
        if (own && (stat(own, &st) < 0 || !S_ISDIR(st.st_mode))) {
            keg_free(own);
            own = NULL;
        }
    }
    if (!own)
        own = keg_strdup("/sys/fs/cgroup/memory");
    if (own && access(own, W_OK) == 0) {
        cg_dir = keg_strdup(own);
        cg_v1 = 1;
        KEG_INFO("per-mounter memory limit %llu bytes in cgroup v1 memory cgroups under %s",
                 (unsigned long long)memory_max, own);
    } else {
        KEG_WARN("no per-mounter cgroups: %s is not writable; mounters are bounded by "
                 "--buffer-size only", own ? own : "the memory cgroup");
    }
out:
    keg_free(own);
    keg_free(text);
}

/* Move this process into a leaf cgroup and enable the memory controller for
 * per-mounter children (cgroup v2; v1: cg_setup_v1).  Best effort: leaves
 * cg_dir NULL on failure. */
static void cg_setup(void)
{
    char *text = NULL, *own = NULL;
    struct statfs sfs;
    if (!memory_max)
        return;
    if (statfs("/sys/fs/cgroup", &sfs) < 0 || (unsigned long)sfs.f_type != 0x63677270UL) {
        cg_setup_v1();
        return;
    }
    if (mnt_read_small_file("/proc/self/cgroup", &text) != 0)
        goto out;
    char *p = strstr(text, "0::");
    if (!p)
        goto out;
    p += 3;
    char *nl = strchr(p, '\n');
    if (nl)
        *nl = '\0';
    own = keg_asprintf("/sys/fs/cgroup%s", strcmp(p, "/") == 0 ? "" : p);
    char *leaf = own ? keg_asprintf("%s/holder", own) : NULL;
    char *procs = leaf ? keg_asprintf("%s/cgroup.procs", leaf) : NULL;
    char *ctl = own ? keg_asprintf("%s/cgroup.subtree_control", own) : NULL;
    char pid[32];
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    if (leaf && procs && ctl && (mkdir(leaf, 0755) == 0 || errno == EEXIST) &&
        write_small(procs, pid) == 0 && write_small(ctl, "+memory") == 0) {
        cg_dir = keg_strdup(own);
        KEG_INFO("per-mounter memory limit %llu bytes in cgroups under %s",
                 (unsigned long long)memory_max, own);
    } else {
        KEG_WARN("no per-mounter cgroups (%s): mounters are bounded by --buffer-size only",
                 strerror(errno));
    }
    keg_free(leaf);
    keg_free(procs);
    keg_free(ctl);
out:
    keg_free(own);
    keg_free(text);
}

static void on_stop(int sig)
{
    KEG_UNUSED(sig);
    hold_stop = 1;
}

static void holder_usage(FILE *out)
{
    fprintf(out,
            "Usage: kegfs holder [OPTIONS]\n"
            "\n"
            "Keep the mounters of a node alive outside the CSI node plugin: serve mount,\n"
            "unmount, list and upgrade requests on a unix socket, restart a mounter that\n"
            "dies, and upgrade mounters in place.  Runs until SIGTERM; mounters keep\n"
            "running when it exits.\n"
            "\n"
            "Options:\n"
            "      --socket PATH       socket to serve (default /var/lib/kegfs/holder.sock)\n"
            "      --state-dir DIR     table, mounter configs, logs, run dir\n"
            "                          (default /var/lib/kegfs)\n"
            "      --mounter PATH      kegfs binary for mounters (default: this one)\n"
            "      --memory-max SIZE   memory limit of each mounter: a cgroup of its own (v2\n"
            "                          memory.max or v1 memory.limit_in_bytes; default: none)\n"
            "      --check-ms MS       how often dead mounters are found (default 200)\n"
            MNT_COMMON_HELP);
}

int mnt_cmd_holder(int argc, char **argv)
{
    enum { OPT_SOCKET = 0x2101, OPT_STATE, OPT_MOUNTER, OPT_MEM, OPT_CHECK };
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"state-dir", required_argument, NULL, OPT_STATE},
        {"mounter", required_argument, NULL, OPT_MOUNTER},
        {"memory-max", required_argument, NULL, OPT_MEM},
        {"check-ms", required_argument, NULL, OPT_CHECK},
        {NULL, 0, NULL, 0},
    };
    const char *sock = NULL, *sdir = "/var/lib/kegfs", *mbin = NULL;
    char self[PATH_MAX];
    uint64_t u;
    int opt;

    if (keg_log_level == LOG_WARNING)
        keg_log_set_level(LOG_INFO);
    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        switch (opt) {
        case OPT_SOCKET:
            sock = optarg;
            break;
        case OPT_STATE:
            sdir = optarg;
            break;
        case OPT_MOUNTER:
            mbin = optarg;
            break;
        case OPT_MEM:
            if (mnt_parse_size(optarg, &memory_max) < 0) {
                mnt_error("--memory-max: bad size '%s'", optarg);
                return 2;
            }
            break;
        case OPT_CHECK:
            if (mnt_parse_u64(optarg, &u) < 0 || u < 20 || u > 60000) {
                mnt_error("--check-ms must be 20..60000");
                return 2;
            }
            check_ms = (unsigned)u;
            break;
        case 'h':
            holder_usage(stdout);
            return 0;
        default:
            holder_usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        holder_usage(stderr);
        return 2;
    }
    if (!mbin) {
        if (keg_self_exe(self, sizeof(self)) < 0) {
            mnt_error("cannot find this binary; give --mounter");
            return 1;
        }
        mbin = self;
    }
    mnt_open_log_file();
    state_dir = keg_strdup(sdir);
    state_file = keg_asprintf("%s/holder.state", sdir);
    mounter_bin = keg_strdup(mbin);
    char *run = keg_asprintf("%s/run", sdir);
    char *mdir = keg_asprintf("%s/mounts", sdir);
    char *ldir = keg_asprintf("%s/logs", sdir);
    char *xdir = keg_asprintf("%s/metrics", sdir);
    char *sockp = sock ? keg_strdup(sock) : keg_asprintf("%s/holder.sock", sdir);
    if (!state_dir || !state_file || !mounter_bin || !run || !mdir || !ldir || !xdir ||
        !sockp) {
        mnt_error("out of memory");
        return 1;
    }
    mkdir(sdir, 0711);
    mkdir(mdir, 0700);
    mkdir(ldir, 0700);
    mkdir(xdir, 0700);
    mkdir(run, 0700);
    if (!getenv("KEGFS_RUN_DIR"))
        setenv("KEGFS_RUN_DIR", run, 1);   /* mounters and upgrades agree on it */
    cg_setup();
    hm_load();

    int ls = keg_unix_listen(sockp, KEG_UNIX_LISTEN_REPLACE_LIVE, 0600, NULL);
    if (ls == -EEXIST) {
        mnt_error("%s exists and is not a socket", sockp);
        return 1;
    }
    if (ls == -ENAMETOOLONG || ls == -EINVAL) {
        mnt_error("cannot create the socket %s: %s", sockp, strerror(-ls));
        return 1;
    }
    if (ls < 0) {
        mnt_error("cannot listen on %s: %s", sockp, strerror(-ls));
        return 1;
    }
    struct sigaction sig;
    memset(&sig, 0, sizeof(sig));
    sig.sa_handler = on_stop;
    sigemptyset(&sig.sa_mask);
    sigaction(SIGTERM, &sig, NULL);
    sigaction(SIGINT, &sig, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_t mon;
    if (pthread_create(&mon, NULL, monitor, NULL) != 0) {
        mnt_error("cannot start the monitor thread");
        return 1;
    }
    KEG_INFO("holding mounts: socket %s, state %s, mounter %s, %zu mount(s) in the table",
             sockp, state_file, mounter_bin, n_mounts);
    while (!hold_stop) {
        struct pollfd pfd = {.fd = ls, .events = POLLIN};
        if (poll(&pfd, 1, 500) <= 0)
            continue;
        int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, serve_conn, (void *)(intptr_t)c) != 0) {
            reply_err(c, EAGAIN, "too many requests");
            close(c);
        }
        pthread_attr_destroy(&at);
    }
    KEG_INFO("stopping; the mounters keep running");
    pthread_join(mon, NULL);
    close(ls);
    unlink(sockp);
    keg_free(run);
    keg_free(mdir);
    keg_free(ldir);
    keg_free(xdir);
    keg_free(sockp);
    return 0;
}
