/* cmd_upgrade.c -- in-place upgrade of a running mounter to another kegfs binary,
 * with nothing unmounted: `kegfs upgrade MOUNTPOINT [--binary PATH]`.
 *
 * DESIGN
 * A supervised mount (mnt_super.c) is a supervisor that holds the mounted
 * /dev/fuse descriptor and a worker that serves it.  An upgrade replaces both
 * processes' code without closing that descriptor:
 *
 *   kegfs upgrade                 supervisor (pid S)               worker (pid W)
 *   -------------                 ------------------               --------------
 *   write <hash>.upgrade
 *   (id, binary), SIGUSR2 -> S -> read + remove the request
 *                                 run `BINARY --version` (must
 *                                 exit 0 in this environment)
 *                                 SIGUSR2 -> W -------------------> stop reading /dev/fuse
 *                                                                   (requests stay queued in
 *                                                                   the kernel), finish the
 *                                                                   requests in flight, flush
 *                                                                   every open file, commit,
 *                                                                   close the volume (staged
 *                                                                   objects stay in the staging
 *                                                                   dir), exit MNT_EXIT_UPGRADE
 *                                 memfd: fuse fd number, epoch,
 *                                 session, dirty record's fd,
 *                                 volume name, mount point, the
 *                                 saved FUSE_INIT bytes, the id
 *                                 clear FD_CLOEXEC on /dev/fuse
 *                                 execv(BINARY, same argv) with
 *                                 KEGFS_HANDOVER=<memfd>
 *                                 -- same pid S, new code --
 *                                 mnt_super_run resumes: no mount,
 *                                 no INIT read; FUSE_NOTIFY_RESEND
 *                                 fork worker epoch+1 -------------> adopts the kernel's open
 *                                 write <hash>.upgrade-result                handles (mnt_handle.c),
 *   wait for the result and                                          serves the queued requests
 *   for the new worker's stats
 *
 * exec() keeps descriptors without FD_CLOEXEC, so no SCM_RIGHTS is needed: the
 * descriptor never leaves the process.  A request the old worker read but did not
 * answer while it stopped (libfuse drops it) is queued again by FUSE_NOTIFY_RESEND
 * (Linux >= 6.9); requests are never carried out twice by a graceful stop, because
 * every request a worker thread started is answered before the worker exits.
 *
 * Failure handling: a binary that does not exist, is not executable or whose
 * `--version` fails is refused before anything stops (result "error", the mount
 * is untouched).  If execv() itself fails, the supervisor starts a worker of its
 * own binary on the same descriptor (result "error"; the mount keeps serving).  A
 * binary that execs but then cannot run (it crashes before resuming) takes the
 * mount down: that is what the --version check is for.
 *
 * What carries over besides the descriptor: the metadata session (so the locks
 * held through the old worker and files unlinked while open stay), and the
 * dirty record (mnt_handle.c), a memory file whose descriptor is passed like
 * /dev/fuse's.  The old worker commits every open file before it exits; a file
 * whose commit fails stays marked in the record, so the new worker fails its
 * old descriptors with EIO instead of taking them as clean.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "upgrade"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/retry.h"
#include "keg/spawn.h"

#include "mnt_i.h"

#define HANDOVER_ENV   "KEGFS_HANDOVER"
#define HANDOVER_MAGIC "kegfs-handover 1\n"

static char **saved_argv;
static char  *saved_cwd;    /* where the command line was given: its relative paths */

void mnt_upgrade_save_argv(int argc, char **argv)
{
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)))
        saved_cwd = keg_strdup(cwd);
    char **a = keg_calloc((size_t)argc + 1, sizeof(*a));
    if (!a)
        return;
    for (int i = 0; i < argc; i++) {
        a[i] = keg_strdup(argv[i]);
        if (!a[i])
            return;     /* leaked on purpose: process-lifetime copy */
    }
    saved_argv = a;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}


/* "<run_dir>/mounts/<hash><suffix>".  OWNERSHIP: keg_free(). */
static char *req_path(const char *abs_mp, const char *suffix)
{
    char h[17];
    mnt_path_hash(abs_mp, h);
    return keg_asprintf("%s/mounts/%s%s", mnt_run_dir(), h, suffix);
}

/* Write text to path atomically, mode 0600.  Returns 0 or -errno. */
static int write_file(const char *path, const char *text)
{
    char *tmp = keg_asprintf("%s.tmp.%ld", path, (long)getpid());
    int rc = 0;
    if (!tmp)
        return -ENOMEM;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        keg_free(tmp);
        return rc;
    }
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len)
        rc = -EIO;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc)
        unlink(tmp);
    keg_free(tmp);
    return rc;
}

/* Value of "key=" in the key=value lines of text, copied into out ("" if none). */
static void kv_get(const char *text, const char *key, char *out, size_t size)
{
    size_t kl = strlen(key);
    out[0] = '\0';
    for (const char *ln = text; ln && *ln;) {
        const char *nl = strchr(ln, '\n');
        size_t len = nl ? (size_t)(nl - ln) : strlen(ln);
        if (len > kl && strncmp(ln, key, kl) == 0 && ln[kl] == '=') {
            size_t vl = len - kl - 1;
            if (vl >= size)
                vl = size - 1;
            memcpy(out, ln + kl + 1, vl);
            out[vl] = '\0';
            return;
        }
        ln = nl ? nl + 1 : NULL;
    }
}

/*----------------------------------------------------------------------------
 * Worker side
 *--------------------------------------------------------------------------*/

static volatile sig_atomic_t worker_stop;
static struct fuse_session *volatile worker_se;
static struct keg_fs *volatile worker_fs;
static pthread_t worker_main_thread;

static void worker_on_usr2(int sig)
{
    int saved = errno;
    KEG_UNUSED(sig);
    worker_stop = 1;
    struct keg_fs *fs = worker_fs;
    if (fs)
        keg_fs_abandon_waits(fs);  /* a lock wait would hold the handover up forever */
    struct fuse_session *se = worker_se;
    if (se) {
        fuse_session_exit(se);
        /* the loop's main thread waits in sem_wait: wake it (no SA_RESTART) */
        if (!pthread_equal(pthread_self(), worker_main_thread))
            pthread_kill(worker_main_thread, SIGUSR2);
    }
    errno = saved;
}

void mnt_upgrade_worker_prearm(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = worker_on_usr2;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    worker_main_thread = pthread_self();
    sigaction(SIGUSR2, &sa, NULL);
}

void mnt_upgrade_worker_arm(struct fuse_session *se, struct keg_fs *fs)
{
    worker_main_thread = pthread_self();
    worker_fs = fs;
    worker_se = se;
    if (worker_stop) {
        keg_fs_abandon_waits(fs);
        fuse_session_exit(se);      /* asked before the session existed */
    }
}

void mnt_upgrade_worker_disarm(void)
{
    worker_se = NULL;
}

int mnt_upgrade_worker_requested(void)
{
    return worker_stop != 0;
}

/*----------------------------------------------------------------------------
 * Supervisor side
 *--------------------------------------------------------------------------*/

static volatile sig_atomic_t super_usr2;
static char up_binary[PATH_MAX];    /* accepted request: new binary */
static char up_id[64];              /* and its id */
static uint64_t up_t0;              /* when the worker was asked to stop */

static void super_on_usr2(int sig)
{
    KEG_UNUSED(sig);
    super_usr2 = 1;
}

void mnt_upgrade_super_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = super_on_usr2;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;            /* no SA_RESTART: waitpid returns EINTR */
    sigaction(SIGUSR2, &sa, NULL);
}

int mnt_upgrade_super_pending(void)
{
    return super_usr2 != 0;
}

static void write_result(const char *abs_mp, const char *id, const char *status,
                         const char *binary, pid_t worker, uint64_t ms, const char *msg)
{
    char *path = req_path(abs_mp, ".upgrade-result");
    char *text = keg_asprintf("id=%s\nstatus=%s\nbinary=%s\nworker=%ld\nhandover_ms=%llu\n"
                              "message=%s\n", id, status, binary, (long)worker,
                              (unsigned long long)ms, msg ? msg : "");
    if (path && text) {
        int rc = write_file(path, text);
        if (rc)
            KEG_WARN("cannot write %s: %s", path, strerror(-rc));
    }
    keg_free(path);
    keg_free(text);
}

/* Run `binary --version`; 0 if it exits 0 within 10 s, else -errno / -ENOEXEC. */
static int probe_binary(const char *binary, char *why, size_t whylen)
{
    struct stat st;
    why[0] = '\0';
    if (binary[0] != '/') {
        snprintf(why, whylen, "the binary must be an absolute path: %s", binary);
        return -EINVAL;
    }
    if (stat(binary, &st) < 0 || !S_ISREG(st.st_mode) || access(binary, X_OK) < 0) {
        snprintf(why, whylen, "%s is not an executable file", binary);
        return -ENOENT;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, whylen, "fork: %s", strerror(errno));
        return -errno;
    }
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
            dup2(nul, 2);
        }
        signal(SIGUSR2, SIG_DFL);
        execl(binary, binary, "--version", (char *)NULL);
        _exit(127);
    }
    int st2 = 0;
    for (unsigned waited = 0;; waited += 20) {
        pid_t r = waitpid(pid, &st2, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            snprintf(why, whylen, "waitpid: %s", strerror(errno));
            return -ECHILD;
        }
        if (waited >= 10000) {
            kill(pid, SIGKILL);
            waitpid(pid, &st2, 0);
            snprintf(why, whylen, "%s --version did not finish in 10 s", binary);
            return -ETIMEDOUT;
        }
        keg_sleep_ms(20);
    }
    if (!WIFEXITED(st2) || WEXITSTATUS(st2) != 0) {
        snprintf(why, whylen, "%s cannot run here (--version: %s %d; missing libraries?)",
                 binary, WIFEXITED(st2) ? "exit status" : "signal",
                 WIFEXITED(st2) ? WEXITSTATUS(st2) : WTERMSIG(st2));
        return -ENOEXEC;
    }
    return 0;
}

int mnt_upgrade_super_begin(const char *abs_mp, pid_t worker)
{
    char *path = req_path(abs_mp, ".upgrade");
    char *text = NULL;
    char why[PATH_MAX + 512];
    super_usr2 = 0;
    if (!path)
        return 0;
    int rc = mnt_read_small_file(path, &text);
    unlink(path);
    keg_free(path);
    if (rc) {
        KEG_WARN("SIGUSR2 without an upgrade request for %s: ignored", abs_mp);
        return 0;
    }
    kv_get(text, "id", up_id, sizeof(up_id));
    kv_get(text, "binary", up_binary, sizeof(up_binary));
    keg_free(text);
    if (!up_binary[0])
        (void)keg_self_exe(up_binary, sizeof(up_binary));   /* "" fails the probe below */
    rc = probe_binary(up_binary, why, sizeof(why));
    if (rc) {
        KEG_ERR("upgrade of %s refused: %s", abs_mp, why);
        write_result(abs_mp, up_id, "error", up_binary, worker, 0, why);
        up_binary[0] = '\0';
        return 0;
    }
    KEG_INFO("upgrade of %s to %s: asking worker %d to hand over", abs_mp, up_binary,
             (int)worker);
    up_t0 = now_ms();
    if (kill(worker, SIGUSR2) < 0) {
        snprintf(why, sizeof(why), "cannot signal the worker: %s", strerror(errno));
        write_result(abs_mp, up_id, "error", up_binary, worker, 0, why);
        up_binary[0] = '\0';
        return 0;
    }
    return 1;
}

void mnt_upgrade_super_exec(const char *abs_mp, const char *volname, int fuse_fd,
                            const void *init, size_t init_len, unsigned epoch,
                            uint64_t session, int record_fd)
{
    char why[PATH_MAX + 512] = "";
    char binary[PATH_MAX];
    int mfd = -1;

    if (up_binary[0])
        snprintf(binary, sizeof(binary), "%s", up_binary);
    else
        snprintf(binary, sizeof(binary), "/proc/self/exe");   /* restart in place */
    if (!saved_argv) {
        snprintf(why, sizeof(why), "the command line was not saved");
        goto fail;
    }
    mfd = memfd_create("kegfs-handover", 0);           /* inherited by the new image */
    if (mfd < 0) {
        snprintf(why, sizeof(why), "memfd_create: %s", strerror(errno));
        goto fail;
    }
    char *hdr = keg_asprintf(HANDOVER_MAGIC "fuse_fd=%d\nepoch=%u\nsession=%llu\n"
                             "record_fd=%d\nid=%s\nbinary=%s\nt0=%llu\nvolname=%s\n"
                             "mountpoint=%s\ninit_len=%zu\n\n",
                             fuse_fd, epoch, (unsigned long long)session, record_fd, up_id,
                             binary, (unsigned long long)up_t0, volname ? volname : "",
                             abs_mp, init_len);
    if (!hdr) {
        snprintf(why, sizeof(why), "out of memory");
        goto fail;
    }
    size_t hl = strlen(hdr);
    int wok = write(mfd, hdr, hl) == (ssize_t)hl &&
              write(mfd, init, init_len) == (ssize_t)init_len;
    keg_free(hdr);
    if (!wok) {
        snprintf(why, sizeof(why), "cannot write the handover record");
        goto fail;
    }
    char env[32];
    snprintf(env, sizeof(env), "%d", mfd);
    if (fcntl(fuse_fd, F_SETFD, 0) < 0 || (record_fd >= 0 && fcntl(record_fd, F_SETFD, 0) < 0) ||
        setenv(HANDOVER_ENV, env, 1) < 0) {
        snprintf(why, sizeof(why), "cannot prepare the descriptor: %s", strerror(errno));
        goto fail;
    }
    KEG_INFO("executing %s for %s (fuse fd %d, worker epoch %u done)", binary, abs_mp,
             fuse_fd, epoch);
    fflush(NULL);           /* the log file is O_CLOEXEC: the new image reopens it */
    char *argv0 = saved_argv[0];
    saved_argv[0] = binary;
    /* The new image parses the same command line: relative paths in it (--cache-dir,
     * --log-file, --config ...) must mean what they meant, not names in / (where a
     * background mounter runs).  It goes back to / once it has parsed them. */
    int here = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (saved_cwd && chdir(saved_cwd) < 0)
        KEG_WARN("upgrade: cannot enter %s, where the mount command was given (%s): "
                 "relative paths of its command line resolve where the mounter runs",
                 saved_cwd, strerror(errno));
    execv(binary, saved_argv);
    int exec_errno = errno;
    saved_argv[0] = argv0;
    if (here >= 0 && fchdir(here) < 0)
        KEG_WARN("upgrade: cannot go back to the mounter's directory: %s", strerror(errno));
    if (here >= 0)
        close(here);
    snprintf(why, sizeof(why), "exec %s: %s", binary, strerror(exec_errno));
    unsetenv(HANDOVER_ENV);
fail:
    fcntl(fuse_fd, F_SETFD, FD_CLOEXEC);
    if (record_fd >= 0)
        fcntl(record_fd, F_SETFD, FD_CLOEXEC);
    if (mfd >= 0)
        close(mfd);
    KEG_ERR("upgrade of %s failed: %s; starting a worker of this binary again", abs_mp, why);
    write_result(abs_mp, up_id, "error", binary, 0, now_ms() - up_t0, why);
    up_binary[0] = '\0';
}

/*----- the resumed supervisor -----*/

static struct {
    int      loaded;          /* 1: parsed, 0: not yet, -1: no handover */
    int      fuse_fd;
    unsigned epoch;
    uint64_t session;         /* the workers' metadata session (0: none) */
    int      record_fd;       /* the memfd of the dirty record (mnt_handle.c), or -1 */
    uint64_t t0;
    char     id[64];
    char     binary[PATH_MAX];
    char     volname[256];
    char     mountpoint[PATH_MAX];
    void    *init;
    size_t   init_len;
} ho;

/* Parse the handover record once.  Returns 1 (present), 0 (none), -errno. */
static int handover_load(void)
{
    if (ho.loaded)
        return ho.loaded > 0 ? 1 : 0;
    const char *env = getenv(HANDOVER_ENV);
    if (!env) {
        ho.loaded = -1;
        return 0;
    }
    int mfd = (int)strtol(env, NULL, 10);
    unsetenv(HANDOVER_ENV);
    struct stat st;
    if (mfd < 3 || fstat(mfd, &st) < 0 || st.st_size <= 0 || st.st_size > (16 << 20)) {
        mnt_error("%s does not name a handover record", HANDOVER_ENV);
        ho.loaded = -1;
        return -EINVAL;
    }
    char *buf = keg_malloc((size_t)st.st_size + 1);
    if (!buf)
        return -ENOMEM;
    ssize_t n = pread(mfd, buf, (size_t)st.st_size, 0);
    close(mfd);
    if (n != st.st_size || strncmp(buf, HANDOVER_MAGIC, strlen(HANDOVER_MAGIC)) != 0) {
        keg_free(buf);
        mnt_error("the handover record is unreadable");
        ho.loaded = -1;
        return -EINVAL;
    }
    buf[n] = '\0';
    char *end = strstr(buf, "\n\n");
    char v[PATH_MAX];
    if (!end) {
        keg_free(buf);
        ho.loaded = -1;
        return -EINVAL;
    }
    *end = '\0';
    kv_get(buf, "fuse_fd", v, sizeof(v));
    ho.fuse_fd = (int)strtol(v, NULL, 10);
    kv_get(buf, "epoch", v, sizeof(v));
    ho.epoch = (unsigned)strtoul(v, NULL, 10);
    kv_get(buf, "t0", v, sizeof(v));
    ho.t0 = strtoull(v, NULL, 10);
    kv_get(buf, "session", v, sizeof(v));      /* absent in records of older binaries */
    ho.session = strtoull(v, NULL, 10);
    kv_get(buf, "record_fd", v, sizeof(v));    /* absent in records of older binaries */
    ho.record_fd = v[0] ? (int)strtol(v, NULL, 10) : -1;
    if (ho.record_fd < 3 || ho.record_fd == ho.fuse_fd || fcntl(ho.record_fd, F_GETFD) < 0)
        ho.record_fd = -1;      /* not inherited after all: start a new record */
    kv_get(buf, "init_len", v, sizeof(v));
    ho.init_len = strtoull(v, NULL, 10);
    kv_get(buf, "id", ho.id, sizeof(ho.id));
    kv_get(buf, "binary", ho.binary, sizeof(ho.binary));
    kv_get(buf, "volname", ho.volname, sizeof(ho.volname));
    kv_get(buf, "mountpoint", ho.mountpoint, sizeof(ho.mountpoint));
    size_t off = (size_t)(end + 2 - buf);
    if (ho.fuse_fd < 0 || fcntl(ho.fuse_fd, F_GETFD) < 0 || ho.init_len == 0 ||
        off + ho.init_len != (size_t)n || !ho.mountpoint[0]) {
        keg_free(buf);
        mnt_error("the handover record is inconsistent");
        ho.loaded = -1;
        return -EINVAL;
    }
    ho.init = keg_malloc(ho.init_len);
    if (!ho.init) {
        keg_free(buf);
        return -ENOMEM;
    }
    memcpy(ho.init, buf + off, ho.init_len);
    keg_free(buf);
    fcntl(ho.fuse_fd, F_SETFD, FD_CLOEXEC);
    ho.loaded = 1;
    return 1;
}

int mnt_upgrade_resuming(const char **abs_mp, const char **volname)
{
    int rc = handover_load();
    if (rc <= 0)
        return rc;
    *abs_mp = ho.mountpoint;
    *volname = ho.volname;
    return 1;
}

int mnt_upgrade_resume(int *fuse_fd, void **init, size_t *init_len, unsigned *epoch,
                       uint64_t *session, int *record_fd)
{
    int rc = handover_load();
    if (rc <= 0)
        return rc;
    *fuse_fd = ho.fuse_fd;
    *init = ho.init;            /* TAKES: the caller keg_free()s it */
    *init_len = ho.init_len;
    *epoch = ho.epoch;
    *session = ho.session;
    *record_fd = ho.record_fd;
    ho.init = NULL;
    KEG_INFO("resumed %s in %s (fuse fd %d) after worker epoch %u", ho.mountpoint, ho.binary,
             ho.fuse_fd, ho.epoch);
    return 1;
}

void mnt_upgrade_super_started(const char *abs_mp, pid_t worker)
{
    if (ho.loaded <= 0 || !ho.id[0])
        return;
    uint64_t ms = ho.t0 ? now_ms() - ho.t0 : 0;
    write_result(abs_mp, ho.id, "ok", ho.binary, worker, ms, NULL);
    ho.id[0] = '\0';
}

/*----------------------------------------------------------------------------
 * The client: kegfs upgrade
 *--------------------------------------------------------------------------*/

int mnt_upgrade_request(const char *abs_mp, const char *binary, unsigned timeout_ms,
                        char *msg, size_t msglen, pid_t *new_worker)
{
    pid_t super = 0;
    char id[64], v[256];
    char *reqp = NULL, *resp = NULL, *text = NULL;
    int rc;

    msg[0] = '\0';
    if (new_worker)
        *new_worker = 0;
    rc = mnt_state_read(abs_mp, &super, NULL);
    if (rc || super <= 0 || kill(super, 0) < 0) {
        snprintf(msg, msglen, "no running mounter found for %s (state dir %s)", abs_mp,
                 mnt_run_dir());
        return -ENOENT;
    }
    struct mnt_live old;
    if (mnt_stats_read(abs_mp, &old) != 0 || old.pid == 0 || old.pid == (uint64_t)super) {
        snprintf(msg, msglen, "%s is not served by a supervised mounter (started with "
                 "--no-supervisor or not as root?), or it is still starting", abs_mp);
        return -EOPNOTSUPP;
    }
    snprintf(id, sizeof(id), "%ld-%llu", (long)getpid(), (unsigned long long)now_ms());
    reqp = req_path(abs_mp, ".upgrade");
    resp = req_path(abs_mp, ".upgrade-result");
    text = keg_asprintf("id=%s\nbinary=%s\n", id, binary ? binary : "");
    if (!reqp || !resp || !text) {
        rc = -ENOMEM;
        goto out;
    }
    unlink(resp);
    rc = write_file(reqp, text);
    if (rc) {
        snprintf(msg, msglen, "cannot write %s: %s", reqp, strerror(-rc));
        goto out;
    }
    if (kill(super, SIGUSR2) < 0) {
        rc = -errno;
        snprintf(msg, msglen, "cannot signal the supervisor %ld: %s", (long)super,
                 strerror(-rc));
        unlink(reqp);
        goto out;
    }
    uint64_t t0 = now_ms();
    for (;;) {
        char *res = NULL;
        if (mnt_read_small_file(resp, &res) == 0) {
            kv_get(res, "id", v, sizeof(v));
            if (strcmp(v, id) == 0) {
                unlink(resp);       /* read: nobody else waits for it */
                char status[16], ms[32], worker[32], bin[PATH_MAX], m[400];
                kv_get(res, "status", status, sizeof(status));
                kv_get(res, "handover_ms", ms, sizeof(ms));
                kv_get(res, "worker", worker, sizeof(worker));
                kv_get(res, "binary", bin, sizeof(bin));
                kv_get(res, "message", m, sizeof(m));
                keg_free(res);
                if (strcmp(status, "ok") != 0) {
                    snprintf(msg, msglen, "%s", m[0] ? m : "the supervisor refused");
                    rc = -EIO;
                    goto out;
                }
                pid_t w = (pid_t)strtol(worker, NULL, 10);
                if (new_worker)
                    *new_worker = w;
                /* the new worker is serving once its stats file is there */
                struct mnt_live l;
                while (now_ms() - t0 < timeout_ms &&
                       !(mnt_stats_read(abs_mp, &l) == 0 && l.pid == (uint64_t)w))
                    keg_sleep_ms(10);
                snprintf(msg, msglen, "%s now runs %s (supervisor %ld, worker %s, handover "
                         "%s ms)", abs_mp, bin, (long)super, worker, ms);
                rc = 0;
                goto out;
            }
            keg_free(res);
        }
        if (kill(super, 0) < 0) {
            snprintf(msg, msglen, "the supervisor %ld exited during the upgrade",
                     (long)super);
            rc = -ESRCH;
            goto out;
        }
        if (now_ms() - t0 > timeout_ms) {
            snprintf(msg, msglen, "no answer from the supervisor %ld within %u s",
                     (long)super, timeout_ms / 1000);
            rc = -ETIMEDOUT;
            goto out;
        }
        keg_sleep_ms(10);
    }
out:
    keg_free(reqp);
    keg_free(resp);
    keg_free(text);
    return rc;
}

static void upgrade_usage(FILE *out)
{
    fprintf(out,
            "Usage: kegfs upgrade [OPTIONS] MOUNTPOINT\n"
            "\n"
            "Replace the running mounter of MOUNTPOINT by another kegfs binary without\n"
            "unmounting: the worker stops taking requests and commits what it buffered,\n"
            "the supervisor executes the new binary on the same /dev/fuse descriptor and\n"
            "starts a worker of it, which takes over the open files.\n"
            "\n"
            "Options:\n"
            "      --binary PATH      the new kegfs (absolute; default: this kegfs)\n"
            "      --timeout SEC      give up waiting after SEC seconds (default 60)\n"
            MNT_COMMON_HELP);
}

int mnt_cmd_upgrade(int argc, char **argv)
{
    enum { OPT_BINARY = 0x2001, OPT_TIMEOUT };
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        {"binary", required_argument, NULL, OPT_BINARY},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {NULL, 0, NULL, 0},
    };
    const char *binary = NULL;
    double timeout = 60;
    char self[PATH_MAX], msg[1024];
    char *abs = NULL;
    int opt;

    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        switch (opt) {
        case OPT_BINARY:
            binary = optarg;
            break;
        case OPT_TIMEOUT:
            if (mnt_parse_seconds(optarg, &timeout) < 0 || timeout < 1) {
                mnt_error("--timeout must be at least 1 second");
                return 2;
            }
            break;
        case 'h':
            upgrade_usage(stdout);
            return 0;
        default:
            upgrade_usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 1) {
        mnt_error("upgrade needs one MOUNTPOINT (see 'kegfs upgrade --help')");
        return 2;
    }
    if (!binary) {
        if (keg_self_exe(self, sizeof(self)) < 0) {
            mnt_error("cannot find this binary; give --binary");
            return 1;
        }
        binary = self;
    }
    int rc = mnt_abspath(argv[optind], &abs);
    if (rc) {
        mnt_error("%s: %s", argv[optind], strerror(-rc));
        return 1;
    }
    rc = mnt_upgrade_request(abs, binary, (unsigned)(timeout * 1000), msg, sizeof(msg), NULL);
    keg_free(abs);
    if (rc) {
        mnt_error("upgrade failed: %s", msg);
        return 1;
    }
    printf("kegfs: %s\n", msg);
    return 0;
}
