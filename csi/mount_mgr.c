/* mount_mgr.c -- process mode: each publish runs `kegfs mount` as a child of
 * the node plugin.
 *
 * DESIGN
 * start() spawns, with posix_spawn (safe in a threaded process),
 *
 *     <mounter> mount --config <cfg> [--read-only] -o allow_other [-o <options>] <target>
 *
 * in the foreground (no -d): the plugin keeps the pid, the mounter's stdout
 * and stderr go to <state_dir>/logs/<hash>.log, and the mounter gets its own
 * session so that a signal to the plugin's process group does not reach it.
 * start() then polls every 50 ms until statfs(target) reports a FUSE file
 * system on a mount point (live), the child exits (failure: its last log lines
 * are returned), or CSI_MOUNT_TIMEOUT_MS passes (the child is stopped).
 * The META_URL (with its password) and the object-store keys are only in the
 * 0600 config file, never on argv or in the environment.
 *
 * stop() unmounts first (the FUSE daemon then exits by itself), lazily if the
 * mount is busy, then TERMs and finally KILLs the mounter if it is still there
 * -- only after checking /proc/<pid>/cmdline names the target, so a recycled
 * pid is never signalled.
 */
#define _GNU_SOURCE 1  /* posix_spawn_file_actions_addclosefrom_np, POSIX_SPAWN_SETSID */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

#include "csi_i.h"
#include "keg/hash.h"
#include "keg/mem.h"
#include "keg/spawn.h"
#include "keg/mountinfo.h"
#include "keg/retry.h"
#include "mount_mgr.h"
#include "state.h"
#define KEG_LOG_TAG "csi.mount"
#include "keg/log.h"


struct mm_proc {
    char *mounter;          /* path of the kegfs binary */
    char *log_dir;          /* <state_dir>/logs */
    char *metrics_dir;      /* <state_dir>/metrics, NULL when its sockets would not fit */
};

/*----------------------------------------------------------------------------
 * Helpers
 *--------------------------------------------------------------------------*/

/* Appends the end of the log file at path to err (capacity errlen), as one
 * line ('|' for each newline), trimmed to whole lines: at most sizeof(buf) - 1
 * bytes, and at most errlen - 200 (errlen / 2 for a small err). */
static void mm_tail(const char *path, char *err, size_t errlen)
{
    char buf[1024];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    size_t want = KEG_MIN(sizeof(buf) - 1, errlen > 200 ? errlen - 200 : errlen / 2);
    off_t from = end > (off_t)want ? end - (off_t)want : 0;
    ssize_t n = pread(fd, buf, want, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    char *start = buf;
    if (from > 0) {
        char *nl = strchr(buf, '\n');
        if (nl)
            start = nl + 1;
    }
    size_t o = strlen(err);
    snprintf(err + o, errlen - o, "; mounter log (%s): %s", path, start);
    /* one line in the gRPC message */
    for (char *p = err + o; *p; p++)
        if (*p == '\n')
            *p = '|';
}

/* The metrics socket of the mounter of target: "<dir>/metrics/<hash>.sock" into out
 * (KEG_METRICS_UNIX_PATH_MAX bytes), or "" when dir is NULL. */
static void mm_metrics_path(const char *metrics_dir, const char *target, char *out)
{
    char hash[17];
    out[0] = '\0';
    if (!metrics_dir)
        return;
    keg_fnv1a64_hex(target, hash);
    int n = snprintf(out, KEG_METRICS_UNIX_PATH_MAX, "%s/%s.sock", metrics_dir, hash);
    if (n < 0 || n >= KEG_METRICS_UNIX_PATH_MAX)
        out[0] = '\0';
}

/* Remove what a mounter that did not exit cleanly left at its metrics socket path. */
static void mm_unlink_socket(const char *path)
{
    struct stat st;
    if (path[0] && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
}

/* Create <state_dir>/metrics (0700) and return it, or NULL (logged) when it cannot be
 * made or a socket path below it would be longer than a socket address holds.
 * OWNERSHIP: keg_free(). */
static char *mm_metrics_dir(const char *state_dir)
{
    char *dir = keg_asprintf("%s/metrics", state_dir);
    if (!dir)
        return NULL;
    /* "/" + 16 hex digits + ".sock" and the NUL */
    if (strlen(dir) + 23 > KEG_METRICS_UNIX_PATH_MAX) {
        KEG_WARN("%s is too long for unix socket paths: mounters get no metrics socket "
                 "(kegfs-csi --metrics shows only its own metrics)", dir);
        keg_free(dir);
        return NULL;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        KEG_WARN("cannot create %s: %s: mounters get no metrics socket", dir, strerror(errno));
        keg_free(dir);
        return NULL;
    }
    return dir;
}

static int mm_check(struct csi_mount_mgr *mm, const char *target)
{
    KEG_UNUSED(mm);
    return keg_fuse_live(target);
}

/* Whether pid (of a child) went away, reaping it if it is our child. */
static int mm_pid_gone(void *arg)
{
    pid_t pid = *(pid_t *)arg;
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    return r == pid || (r < 0 && errno == ECHILD && kill(pid, 0) < 0 && errno == ESRCH);
}

static void mm_kill(pid_t pid, const char *target)
{
    if (pid <= 0 || !keg_pid_has_arg(pid, target)) {
        if (pid > 0)
            waitpid(pid, NULL, WNOHANG);    /* a zombie has an empty cmdline */
        return;
    }
    kill(pid, SIGTERM);
    if (keg_wait_gone(mm_pid_gone, &pid, 5000, 50))
        return;
    KEG_WARN("target=%s: mounter %ld ignored SIGTERM, killing it", target, (long)pid);
    kill(pid, SIGKILL);
    keg_wait_gone(mm_pid_gone, &pid, 2000, 50);
}

/*----------------------------------------------------------------------------
 * Ops
 *--------------------------------------------------------------------------*/

/* A mounter being started, and how it ended if it did. */
struct mm_child {
    pid_t pid;
    pid_t r;            /* waitpid's answer once it exited */
    int   status;
};

static int mm_child_exited(void *arg)
{
    struct mm_child *c = arg;
    c->status = 0;
    c->r = waitpid(c->pid, &c->status, WNOHANG);
    return c->r == c->pid || (c->r < 0 && errno == ECHILD);
}

/* Why the mounter c exited before its mount was live, into err. */
static void mm_exit_reason(const struct mm_child *c, char *err, size_t errlen)
{
    if (c->r == c->pid && WIFEXITED(c->status))
        snprintf(err, errlen, "the mounter exited with status %d before the mount "
                 "was live", WEXITSTATUS(c->status));
    else if (c->r == c->pid && WIFSIGNALED(c->status))
        snprintf(err, errlen, "the mounter was killed by signal %d before the mount "
                 "was live", WTERMSIG(c->status));
    else
        snprintf(err, errlen, "the mounter exited before the mount was live");
}

static int mm_start(struct csi_mount_mgr *mm, const struct csi_mount_req *req,
                    struct csi_mount_res *res, char *err, size_t errlen)
{
    struct mm_proc *p = mm->priv;
    const char *argv[16];
    char hash[17], *logpath = NULL, metrics[KEG_METRICS_UNIX_PATH_MAX + 5];
    int argc = 0, rc;
    pid_t child = 0;

    memset(res, 0, sizeof(*res));
    err[0] = '\0';
    keg_fnv1a64_hex(req->target, hash);   /* 16 hex digits naming target */
    logpath = keg_asprintf("%s/%s.log", p->log_dir, hash);
    if (!logpath)
        return -ENOMEM;

    argv[argc++] = p->mounter;
    argv[argc++] = "mount";
    argv[argc++] = "--config";
    argv[argc++] = req->config;
    if (req->readonly)
        argv[argc++] = "--read-only";
    /* Pods run as any uid, and kubelet and the container runtime look into the
     * target too: a CSI mount is allow_other (the CLI's default is not). */
    argv[argc++] = "-o";
    argv[argc++] = "allow_other";
    if (req->options && *req->options) {
        argv[argc++] = "-o";
        argv[argc++] = req->options;
    }
    if (req->metrics)
        mm_metrics_path(p->metrics_dir, req->target, res->metrics);
    if (res->metrics[0]) {
        snprintf(metrics, sizeof(metrics), "unix:%s", res->metrics);
        argv[argc++] = "--metrics";
        argv[argc++] = metrics;
    }
    argv[argc++] = req->target;
    argv[argc] = NULL;

    rc = -keg_spawn_logged(p->mounter, argv, logpath, &child);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the mounter %s: %s", p->mounter, strerror(rc));
        keg_free(logpath);
        return -rc;
    }
    KEG_INFO("volume_id=%s target=%s: mounter pid %ld started (log %s)", req->volume_id,
             req->target, (long)child, logpath);

    struct mm_child c = {.pid = child};
    rc = keg_fuse_wait_live(req->target, CSI_MOUNT_TIMEOUT_MS, 50, mm_child_exited, &c);
    if (rc == -EIO)
        mm_exit_reason(&c, err, errlen);
    else if (rc == -ETIMEDOUT)
        snprintf(err, errlen, "the mount at %s was not live after %d s", req->target,
                 CSI_MOUNT_TIMEOUT_MS / 1000);
    if (rc)
        mm_tail(logpath, err, errlen);
    if (rc == -ETIMEDOUT) {
        umount2(req->target, MNT_DETACH);
        mm_kill(child, req->target);
    }
    if (rc == 0)
        res->pid = child;
    else
        res->metrics[0] = '\0';
    keg_free(logpath);
    return rc;
}

static int mm_detach(struct csi_mount_mgr *mm, const char *target)
{
    KEG_UNUSED(mm);
    if (umount2(target, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
        return -errno;
    return 0;
}

static int mm_stop(struct csi_mount_mgr *mm, const char *target, pid_t pid)
{
    struct mm_proc *p = mm->priv;
    char sock[KEG_METRICS_UNIX_PATH_MAX];
    int rc = keg_umount_or_detach(target);
    if (rc == 1)
        KEG_WARN("target=%s busy or its mounter dead, detached lazily", target);
    if (rc == 1 || rc == -EINVAL || rc == -ENOENT)
        rc = 0;
    mm_kill(pid, target);
    mm_metrics_path(p->metrics_dir, target, sock);
    mm_unlink_socket(sock);
    return rc;
}

/* A mounter runs if its pid does and names the target (a zombie's cmdline is empty). */
static int mm_alive(struct csi_mount_mgr *mm, const struct csi_publish *recs, size_t n,
                    unsigned timeout_ms, unsigned char *alive)
{
    KEG_UNUSED(mm);
    KEG_UNUSED(timeout_ms);
    for (size_t i = 0; i < n; i++)
        alive[i] = recs[i].pid > 0 && keg_pid_has_arg(recs[i].pid, recs[i].target);
    return 0;
}

static void mm_reap(struct csi_mount_mgr *mm)
{
    KEG_UNUSED(mm);
    int status;
    pid_t r;
    while ((r = waitpid(-1, &status, WNOHANG)) > 0)
        KEG_INFO("mounter pid %ld exited (%s %d)", (long)r,
                 WIFEXITED(status) ? "status" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

static void mm_destroy(struct csi_mount_mgr *mm)
{
    if (!mm)
        return;
    struct mm_proc *p = mm->priv;
    if (p) {
        keg_free(p->mounter);
        keg_free(p->log_dir);
        keg_free(p->metrics_dir);
        keg_free(p);
    }
    keg_free(mm);
}

static const struct csi_mount_mgr_ops mm_process_ops = {
    .name = "process",
    .start = mm_start,
    .stop = mm_stop,
    .check = mm_check,
    .detach = mm_detach,
    .reap = mm_reap,
    .alive = mm_alive,
    .destroy = mm_destroy,
};

int csi_mount_mgr_process_create(const char *mounter, const char *state_dir,
                                 struct csi_mount_mgr **out)
{
    struct csi_mount_mgr *mm = keg_calloc(1, sizeof(*mm));
    struct mm_proc *p = keg_calloc(1, sizeof(*p));
    *out = NULL;
    if (!mm || !p)
        goto nomem;
    mm->ops = &mm_process_ops;
    mm->priv = p;
    p->mounter = keg_strdup(mounter);
    p->log_dir = keg_asprintf("%s/logs", state_dir);
    if (!p->mounter || !p->log_dir)
        goto nomem;
    if (mkdir(p->log_dir, 0700) < 0 && errno != EEXIST) {
        int rc = -errno;
        KEG_ERR("cannot create %s: %s", p->log_dir, strerror(-rc));
        mm_destroy(mm);
        return rc;
    }
    if (access(mounter, X_OK) < 0)
        KEG_WARN("mounter %s is not executable (%s): NodePublishVolume will fail", mounter,
                 strerror(errno));
    p->metrics_dir = mm_metrics_dir(state_dir);
    *out = mm;
    return 0;
nomem:
    if (mm && !mm->priv)
        keg_free(p);
    mm_destroy(mm);
    return -ENOMEM;
}

/*----------------------------------------------------------------------------
 * Holder mode: the mounters belong to `kegfs holder` (mounter/cmd_holder.c)
 *--------------------------------------------------------------------------*/

struct mm_holder {
    char *socket;           /* the holder's unix socket */
    char *mounter;          /* this plugin's kegfs */
    char *bin_dir;          /* where reconcile() puts a copy of it for the holder */
    int   upgrade;
};

int csi_holder_call(const char *socket_path, const char *req, int fd, unsigned timeout_s,
                    char **resp)
{
    struct sockaddr_un sa;
    int rc = 0;
    *resp = NULL;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(socket_path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", socket_path);
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        return -errno;
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        rc = -errno;
        close(c);
        return rc;
    }
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } cb;
    memset(&cb, 0, sizeof(cb));
    struct iovec iov = {.iov_base = (void *)req, .iov_len = strlen(req)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = cb.b;
        mh.msg_controllen = sizeof(cb.b);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    ssize_t n = sendmsg(c, &mh, MSG_NOSIGNAL);
    if (n != (ssize_t)strlen(req)) {   /* requests are small: one sendmsg */
        rc = n < 0 ? -errno : -EIO;
        close(c);
        return rc;
    }
    size_t cap = 4096, len = 0;
    char *buf = keg_malloc(cap);
    if (!buf) {
        close(c);
        return -ENOMEM;
    }
    for (;;) {
        if (len + 1 >= cap) {
            char *nb = keg_realloc(buf, cap * 2);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t k = read(c, buf + len, cap - 1 - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = errno == EAGAIN ? -ETIMEDOUT : -errno;
            break;
        }
        if (k == 0)
            break;
        len += (size_t)k;
    }
    close(c);
    buf[len] = '\0';
    if (rc == 0) {
        if (strncmp(buf, "ok\n", 3) == 0)
            rc = 0;
        else if (strncmp(buf, "error ", 6) == 0)
            rc = -(int)KEG_MAX(1, strtol(buf + 6, NULL, 10));
        else
            rc = -EPROTO;
    }
    *resp = buf;
    return rc;
}

/* Value of key in the answer (the first "key=" line), copied into out. */
static const char *hm_get(const char *resp, const char *key, char *out, size_t size)
{
    size_t kl = strlen(key);
    out[0] = '\0';
    for (const char *ln = resp; ln && *ln;) {
        const char *nl = strchr(ln, '\n');
        size_t len = nl ? (size_t)(nl - ln) : strlen(ln);
        if (len > kl && strncmp(ln, key, kl) == 0 && ln[kl] == '=') {
            size_t vl = KEG_MIN(len - kl - 1, size - 1);
            memcpy(out, ln + kl + 1, vl);
            out[vl] = '\0';
            return out;
        }
        ln = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static int mm_holder_start(struct csi_mount_mgr *mm, const struct csi_mount_req *req,
                           struct csi_mount_res *res, char *err, size_t errlen)
{
    struct mm_holder *h = mm->priv;
    char *resp = NULL, v[1024];
    int fd = -1;
    memset(res, 0, sizeof(*res));
    err[0] = '\0';
    if (req->config && req->config[0]) {
        fd = open(req->config, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            int rc = -errno;
            snprintf(err, errlen, "cannot open the mounter config %s: %s", req->config,
                     strerror(-rc));
            return rc;
        }
    }
    char *text = keg_asprintf("mount\nvolume_id=%s\ntarget=%s\noptions=%s\nreadonly=%d\n"
                              "metrics=%d\n\n", req->volume_id, req->target,
                              req->options ? req->options : "", req->readonly ? 1 : 0,
                              req->metrics ? 1 : 0);
    if (!text) {
        if (fd >= 0)
            close(fd);
        return -ENOMEM;
    }
    int rc = csi_holder_call(h->socket, text, fd, CSI_MOUNT_TIMEOUT_MS / 1000 + 15, &resp);
    keg_free(text);
    if (fd >= 0)
        close(fd);
    if (rc == 0) {
        res->pid = (pid_t)strtol(hm_get(resp, "pid", v, sizeof(v)) ? v : "0", NULL, 10);
        if (hm_get(resp, "metrics", v, sizeof(v)) && v[0] == '/' &&
            strlen(v) < sizeof(res->metrics))
            memcpy(res->metrics, v, strlen(v) + 1);
        KEG_INFO("volume_id=%s target=%s: holder mounter pid %ld%s", req->volume_id,
                 req->target, (long)res->pid, hm_get(resp, "existing", v, sizeof(v)) ?
                 " (already running)" : "");
    } else if (resp && hm_get(resp, "message", v, sizeof(v))) {
        snprintf(err, errlen, "mount holder: %s", v);
    } else {
        snprintf(err, errlen, "mount holder at %s: %s", h->socket, strerror(-rc));
    }
    keg_free(resp);
    if (rc == -ENOENT || rc == -EACCES)
        rc = -EIO;      /* the holder's socket is missing: not "mounter binary missing" */
    return rc;
}

static int mm_holder_stop(struct csi_mount_mgr *mm, const char *target, pid_t pid)
{
    struct mm_holder *h = mm->priv;
    char *resp = NULL, v[1024];
    KEG_UNUSED(pid);
    char *text = keg_asprintf("unmount\ntarget=%s\n\n", target);
    if (!text)
        return -ENOMEM;
    int rc = csi_holder_call(h->socket, text, -1, 30, &resp);
    keg_free(text);
    if (rc < 0)
        KEG_ERR("target=%s: the mount holder could not unmount it: %s", target,
                resp && hm_get(resp, "message", v, sizeof(v)) ? v : strerror(-rc));
    keg_free(resp);
    return rc;
}

/* Copy src to dir/kegfs-<hash of its bytes> (0755) unless there.  *out: the copy. */
static int mm_holder_copy_binary(const char *src, const char *dir, char **out)
{
    char buf[65536], hash[17];
    uint64_t hv = KEG_FNV1A64_INIT;
    int rc = 0;
    *out = NULL;
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : 0;
            break;
        }
        hv = keg_fnv1a64_update(hv, buf, (size_t)n);
    }
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)hv);
    char *dst = keg_asprintf("%s/kegfs-%s", dir, hash);
    char *tmp = keg_asprintf("%s/.kegfs-%s.%ld", dir, hash, (long)getpid());
    if (rc || !dst || !tmp) {
        rc = rc ? rc : -ENOMEM;
        goto out;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        rc = -errno;
        goto out;
    }
    if (access(dst, X_OK) == 0)
        goto done;
    int o = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (o < 0) {
        rc = -errno;
        goto out;
    }
    lseek(in, 0, SEEK_SET);
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : 0;
            break;
        }
        if (write(o, buf, (size_t)n) != n) {
            rc = -EIO;
            break;
        }
    }
    if (rc == 0 && (fsync(o) < 0 || fchmod(o, 0755) < 0))
        rc = -errno;
    close(o);
    if (rc == 0 && rename(tmp, dst) < 0)
        rc = -errno;
    if (rc)
        unlink(tmp);
done:
    if (rc == 0) {
        *out = dst;
        dst = NULL;
    }
out:
    close(in);
    keg_free(dst);
    keg_free(tmp);
    return rc;
}

static int mm_holder_reconcile(struct csi_mount_mgr *mm, struct csi_state *state)
{
    struct mm_holder *h = mm->priv;
    char *resp = NULL;
    char v[PATH_MAX], vol[256], pid[32], sock[KEG_METRICS_UNIX_PATH_MAX];
    unsigned held = 0, updated = 0, dropped = 0;
    int rc = csi_holder_call(h->socket, "list\n\n", -1, 30, &resp);
    if (rc < 0) {
        KEG_ERR("cannot list the mounts of the holder at %s: %s", h->socket, strerror(-rc));
        keg_free(resp);
        return rc;
    }
    /* "mount=T" starts each entry; its fields follow */
    for (char *ln = strstr(resp, "\nmount="); ln; ln = strstr(ln + 1, "\nmount=")) {
        char *end = strstr(ln + 1, "\nmount=");
        char save = 0;
        if (end) {
            save = *end;
            *end = '\0';
        }
        hm_get(ln + 1, "mount", v, sizeof(v));
        hm_get(ln + 1, "volume_id", vol, sizeof(vol));
        hm_get(ln + 1, "pid", pid, sizeof(pid));
        if (!hm_get(ln + 1, "metrics", sock, sizeof(sock)) || sock[0] != '/')
            sock[0] = '\0';
        held++;
        struct csi_publish rec;
        if (csi_state_find(state, v, &rec) == 0) {
            pid_t p = (pid_t)strtol(pid, NULL, 10);
            /* the holder names each mounter's metrics socket (none for mounters it
             * started before it gave them one) */
            if ((p && p != rec.pid) || strcmp(sock, rec.metrics) != 0) {
                char *m = keg_strdup(sock);
                if (m) {
                    keg_free(rec.metrics);
                    rec.metrics = m;
                    rec.pid = p ? p : rec.pid;
                    if (csi_state_put(state, &rec) == 0)
                        updated++;
                }
            }
            csi_publish_clear(&rec);
        } else {
            char parent[PATH_MAX];
            snprintf(parent, sizeof(parent), "%s", v);
            char *slash = strrchr(parent, '/');
            if (slash && slash != parent)
                *slash = '\0';
            if (access(parent, F_OK) < 0) {
                KEG_WARN("target=%s volume_id=%s: held but unrecorded, and its pod is gone: "
                         "unmounting", v, vol);
                mm_holder_stop(mm, v, 0);
                dropped++;
            } else {
                KEG_WARN("target=%s volume_id=%s: held but not recorded here (a publish cut "
                         "short); kubelet's retry or unpublish settles it", v, vol);
            }
        }
        if (end)
            *end = save;
    }
    keg_free(resp);
    KEG_INFO("mount holder %s: %u mount(s) held, %u record(s) updated, %u dropped",
             h->socket, held, updated, dropped);
    if (!h->upgrade)
        return 0;
    char *copy = NULL;
    rc = mm_holder_copy_binary(h->mounter, h->bin_dir, &copy);
    if (rc < 0) {
        KEG_ERR("cannot copy %s to %s for the holder: %s", h->mounter, h->bin_dir,
                strerror(-rc));
        return 0;       /* listed and settled; calling again would not copy better */
    }
    char *text = keg_asprintf("upgrade\nbinary=%s\n\n", copy);
    if (!text) {
        keg_free(copy);
        return -ENOMEM;
    }
    rc = csi_holder_call(h->socket, text, -1, 600, &resp);
    keg_free(text);
    char n[32], failed[32];
    if (rc == 0) {
        if (!hm_get(resp, "count", n, sizeof(n)) || !n[0])
            snprintf(n, sizeof(n), "0");
        if (!hm_get(resp, "failed", failed, sizeof(failed)) || !failed[0])
            snprintf(failed, sizeof(failed), "0");
        if (strcmp(failed, "0") != 0)
            KEG_ERR("mount holder: %s of %s mounter(s) could not be upgraded to %s (they run "
                    "their old binary; see the holder's log)", failed, n, copy);
        else
            KEG_INFO("mount holder: %s mounter(s) upgraded in place to %s", n, copy);
    } else {
        KEG_ERR("mount holder refused the upgrade to %s: %s", copy,
                resp && hm_get(resp, "message", v, sizeof(v)) ? v : strerror(-rc));
    }
    keg_free(resp);
    keg_free(copy);
    return 0;           /* a refused upgrade is logged above; retrying would not help */
}

/* The holder's list: a mounter is alive when the holder holds its target with a
 * running mounter (state live; pids are the holder's, maybe of another pid namespace). */
static int mm_holder_alive(struct csi_mount_mgr *mm, const struct csi_publish *recs, size_t n,
                           unsigned timeout_ms, unsigned char *alive)
{
    struct mm_holder *h = mm->priv;
    char *resp = NULL, target[PATH_MAX], state[32];
    memset(alive, 0, n);
    int rc = csi_holder_call(h->socket, "list\n\n", -1, KEG_MAX(1u, (timeout_ms + 999) / 1000),
                             &resp);
    if (rc < 0) {
        keg_free(resp);
        return rc;
    }
    for (char *ln = strstr(resp, "\nmount="); ln; ln = strstr(ln + 1, "\nmount=")) {
        char *end = strstr(ln + 1, "\nmount=");
        char save = 0;
        if (end) {
            save = *end;
            *end = '\0';
        }
        hm_get(ln + 1, "mount", target, sizeof(target));
        hm_get(ln + 1, "state", state, sizeof(state));
        for (size_t i = 0; i < n; i++)
            if (strcmp(recs[i].target, target) == 0 && strcmp(state, "live") == 0)
                alive[i] = 1;
        if (end)
            *end = save;
    }
    keg_free(resp);
    return 0;
}

static void mm_holder_destroy(struct csi_mount_mgr *mm)
{
    if (!mm)
        return;
    struct mm_holder *h = mm->priv;
    if (h) {
        keg_free(h->socket);
        keg_free(h->mounter);
        keg_free(h->bin_dir);
        keg_free(h);
    }
    keg_free(mm);
}

static const struct csi_mount_mgr_ops mm_holder_ops = {
    .name = "holder",
    .self_healing = 1,
    .start = mm_holder_start,
    .stop = mm_holder_stop,
    .check = mm_check,
    .detach = mm_detach,
    .reconcile = mm_holder_reconcile,
    .alive = mm_holder_alive,
    .destroy = mm_holder_destroy,
};

int csi_mount_mgr_holder_create(const char *socket_path, const char *mounter,
                                const char *bin_dir, int upgrade,
                                struct csi_mount_mgr **out)
{
    struct csi_mount_mgr *mm = keg_calloc(1, sizeof(*mm));
    struct mm_holder *h = keg_calloc(1, sizeof(*h));
    *out = NULL;
    if (!mm || !h) {
        keg_free(mm);
        keg_free(h);
        return -ENOMEM;
    }
    mm->ops = &mm_holder_ops;
    mm->priv = h;
    h->socket = keg_strdup(socket_path);
    h->mounter = keg_strdup(mounter);
    h->bin_dir = keg_strdup(bin_dir);
    h->upgrade = upgrade;
    if (!h->socket || !h->mounter || !h->bin_dir) {
        mm_holder_destroy(mm);
        return -ENOMEM;
    }
    *out = mm;
    return 0;
}

/*----------------------------------------------------------------------------
 * The mounter config file
 *--------------------------------------------------------------------------*/

static int cfg_write(void *data, unsigned char *buf, size_t size)
{
    return fwrite(buf, 1, size, (FILE *)data) == size;
}

static int cfg_scalar(yaml_emitter_t *em, const char *v, int quoted)
{
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)v, (int)strlen(v), 1, 1,
                                      quoted ? YAML_DOUBLE_QUOTED_SCALAR_STYLE
                                             : YAML_PLAIN_SCALAR_STYLE))
        return -ENOMEM;
    return yaml_emitter_emit(em, &ev) ? 0 : -EIO;
}

int csi_mount_write_config(const char *path, const char *meta_url, const char *access_key,
                           const char *secret_key)
{
    yaml_emitter_t em;
    yaml_event_t ev;
    char *tmp = keg_asprintf("%s.tmp", path);
    int rc = -EIO, fd;
    FILE *fp = NULL;

    if (!tmp)
        return -ENOMEM;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        keg_free(tmp);
        return rc;
    }
    fchmod(fd, 0600);
    fp = fdopen(fd, "w");
    if (!fp) {
        rc = -errno;
        close(fd);
        goto out;
    }
    if (!yaml_emitter_initialize(&em)) {
        rc = -ENOMEM;
        goto out;
    }
    yaml_emitter_set_output(&em, cfg_write, fp);
    if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) ||
        !yaml_emitter_emit(&em, &ev) ||
        !yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) ||
        !yaml_emitter_emit(&em, &ev) ||
        !yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) ||
        !yaml_emitter_emit(&em, &ev))
        goto emit_out;
    if (cfg_scalar(&em, "meta-url", 0) < 0 || cfg_scalar(&em, meta_url, 1) < 0)
        goto emit_out;
    if (access_key && *access_key &&
        (cfg_scalar(&em, "access-key", 0) < 0 || cfg_scalar(&em, access_key, 1) < 0))
        goto emit_out;
    if (secret_key && *secret_key &&
        (cfg_scalar(&em, "secret-key", 0) < 0 || cfg_scalar(&em, secret_key, 1) < 0))
        goto emit_out;
    if (!yaml_mapping_end_event_initialize(&ev) || !yaml_emitter_emit(&em, &ev) ||
        !yaml_document_end_event_initialize(&ev, 1) || !yaml_emitter_emit(&em, &ev) ||
        !yaml_stream_end_event_initialize(&ev) || !yaml_emitter_emit(&em, &ev) ||
        !yaml_emitter_flush(&em))
        goto emit_out;
    rc = 0;
emit_out:
    yaml_emitter_delete(&em);
out:
    if (fp) {
        if (rc == 0 && (fflush(fp) != 0 || fsync(fileno(fp)) != 0))
            rc = -errno;
        if (fclose(fp) != 0 && rc == 0)
            rc = -errno;
    }
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
    keg_free(tmp);
    return rc;
}
