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
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

#include "csi_i.h"
#include "keg/mem.h"
#include "mount_mgr.h"
#define KEG_LOG_TAG "csi.mount"
#include "keg/log.h"

extern char **environ;

struct mm_proc {
    char *mounter;          /* path of the kegfs binary */
    char *log_dir;          /* <state_dir>/logs */
};

/*----------------------------------------------------------------------------
 * Helpers
 *--------------------------------------------------------------------------*/

static void mm_sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* 16 hex digits naming target (FNV-1a). */
static void mm_hash(const char *s, char out[17])
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* The last `max` bytes of the log file, trimmed to whole lines, into err. */
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

static int mm_check(struct csi_mount_mgr *mm, const char *target)
{
    struct statfs sfs;
    struct stat st, pst;
    KEG_UNUSED(mm);
    if (statfs(target, &sfs) < 0)
        return -errno;          /* -ENOTCONN: dead FUSE mount */
    if ((unsigned long)sfs.f_type != CSI_FUSE_SUPER_MAGIC)
        return -EINVAL;
    /* a FUSE file system, but is it mounted at target itself? */
    char parent[PATH_MAX];
    snprintf(parent, sizeof(parent), "%s/..", target);
    if (stat(target, &st) < 0)
        return -errno;
    if (stat(parent, &pst) < 0)
        return -errno;
    if (st.st_dev == pst.st_dev && st.st_ino != pst.st_ino)
        return -EINVAL;
    return 0;
}

/* 1 if /proc/<pid>/cmdline contains target as an argument. */
static int mm_pid_is_mounter(pid_t pid, const char *target)
{
    char path[64], buf[8192];
    snprintf(path, sizeof(path), "/proc/%ld/cmdline", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
        if (strcmp(buf + i, target) == 0)
            return 1;
    return 0;
}

/* Wait for pid to go away (reaping it if it is our child).  1 if gone. */
static int mm_wait_gone(pid_t pid, unsigned ms)
{
    for (unsigned waited = 0;; waited += 50) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD && kill(pid, 0) < 0 && errno == ESRCH))
            return 1;
        if (waited >= ms)
            return 0;
        mm_sleep_ms(50);
    }
}

static void mm_kill(pid_t pid, const char *target)
{
    if (pid <= 0 || !mm_pid_is_mounter(pid, target)) {
        if (pid > 0)
            waitpid(pid, NULL, WNOHANG);    /* a zombie has an empty cmdline */
        return;
    }
    kill(pid, SIGTERM);
    if (mm_wait_gone(pid, 5000))
        return;
    KEG_WARN("target=%s: mounter %ld ignored SIGTERM, killing it", target, (long)pid);
    kill(pid, SIGKILL);
    mm_wait_gone(pid, 2000);
}

/*----------------------------------------------------------------------------
 * Ops
 *--------------------------------------------------------------------------*/

static int mm_start(struct csi_mount_mgr *mm, const struct csi_mount_req *req, pid_t *pid,
                    char *err, size_t errlen)
{
    struct mm_proc *p = mm->priv;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    const char *argv[12];
    char hash[17], *logpath = NULL;
    int argc = 0, rc;
    pid_t child = 0;

    *pid = 0;
    err[0] = '\0';
    mm_hash(req->target, hash);
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
    argv[argc++] = req->target;
    argv[argc] = NULL;

    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);       /* the plugin blocks SIGTERM in threads */
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    rc = posix_spawn(&child, p->mounter, &fa, &attr, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the mounter %s: %s", p->mounter, strerror(rc));
        keg_free(logpath);
        return -rc;
    }
    KEG_INFO("volume_id=%s target=%s: mounter pid %ld started (log %s)", req->volume_id,
             req->target, (long)child, logpath);

    for (unsigned waited = 0;; waited += 50) {
        if (mm_check(mm, req->target) == 0) {
            *pid = child;
            keg_free(logpath);
            return 0;
        }
        int status = 0;
        pid_t r = waitpid(child, &status, WNOHANG);
        if (r == child || (r < 0 && errno == ECHILD)) {
            if (r == child && WIFEXITED(status))
                snprintf(err, errlen, "the mounter exited with status %d before the mount "
                         "was live", WEXITSTATUS(status));
            else if (r == child && WIFSIGNALED(status))
                snprintf(err, errlen, "the mounter was killed by signal %d before the mount "
                         "was live", WTERMSIG(status));
            else
                snprintf(err, errlen, "the mounter exited before the mount was live");
            mm_tail(logpath, err, errlen);
            keg_free(logpath);
            return -EIO;
        }
        if (waited >= CSI_MOUNT_TIMEOUT_MS) {
            snprintf(err, errlen, "the mount at %s was not live after %d s", req->target,
                     CSI_MOUNT_TIMEOUT_MS / 1000);
            mm_tail(logpath, err, errlen);
            umount2(req->target, MNT_DETACH);
            mm_kill(child, req->target);
            keg_free(logpath);
            return -ETIMEDOUT;
        }
        mm_sleep_ms(50);
    }
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
    KEG_UNUSED(mm);
    int rc = 0;
    if (umount2(target, 0) < 0) {
        int e = errno;
        if (e == EBUSY) {
            KEG_WARN("target=%s busy, detaching lazily", target);
            if (umount2(target, MNT_DETACH) < 0 && errno != EINVAL)
                rc = -errno;
        } else if (e != EINVAL && e != ENOENT) {
            /* ENOTCONN and friends: try the lazy form before giving up */
            if (umount2(target, MNT_DETACH) < 0 && errno != EINVAL)
                rc = -e;
        }
    }
    mm_kill(pid, target);
    return rc;
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
    *out = mm;
    return 0;
nomem:
    if (mm && !mm->priv)
        keg_free(p);
    mm_destroy(mm);
    return -ENOMEM;
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
