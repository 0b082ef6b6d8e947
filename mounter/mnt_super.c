/* mnt_super.c -- the mount supervisor: owns /dev/fuse and the mount, and restarts a crashed
 * FUSE worker on the same descriptor, so a worker crash never shows up as ENOTCONN.
 *
 * DESIGN
 * `kegfs mount` (as root, unless --no-supervisor) is two processes:
 *
 *   supervisor (the pid in the state file, the pid kegfs-csi spawned)
 *     open /dev/fuse -> mount(2) "fd=N,rootmode=40000,user_id=0,group_id=0,..."
 *     read the kernel's FUSE_INIT request from N and keep its bytes
 *     fork worker; waitpid:
 *        worker exited (unmounted, signalled, failed) -> detach the mount if it
 *                                                         is still there; exit
 *        worker killed by a signal (crash)           -> FUSE_NOTIFY_RESEND, fork a
 *                                                         new worker on the same N
 *     SIGTERM/SIGINT/SIGHUP -> umount2(MNT_DETACH): the worker sees ENODEV and exits
 *   worker (fork, no exec; dies with the supervisor: PR_SET_PDEATHSIG)
 *     open the volume, fuse_session_new, fuse_session_mount(se, "/dev/fd/N")
 *     (libfuse 3 takes /dev/fd/N as an already mounted descriptor), feed the saved
 *     INIT through fuse_session_process_buf(), then the multi-threaded loop.
 *
 * The first worker's INIT reply is the one the kernel waits for.  A restarted
 * worker replies to an INIT the kernel answered long ago: the write fails with
 * ENOENT ("no such request"), which libfuse ignores silently (fuse_send_msg);
 * the session gets its negotiated parameters all the same, and they match the
 * first worker's (same code, same kernel).
 *
 * What a worker crash costs (docs/durability.md, "A crash of the FUSE worker";
 * docs/cli.md, "The supervisor"), in both modes, default and --writeback:
 *   - committed data is kept (with --writeback its staged blocks stay in the
 *     cache directory and the new worker uploads them);
 *   - data written and not committed (it lived in the worker's memory) is lost;
 *     a descriptor that wrote some of it is LOST from then on: its writes,
 *     fallocate, copy_file_range into it, fsync and close fail with EIO until
 *     its last close, its reads return the committed contents.  Every other
 *     open descriptor keeps working without an error.  The supervisor learns
 *     which ones from the dirty record: a table it maps shared before the first
 *     fork (mnt_dirty_create), which each worker fills before a descriptor's
 *     first uncommitted write and empties after a commit (mnt_handle.c).  After
 *     a crash it logs the lost handles at ERROR (mnt_dirty_report) and, before
 *     the new worker starts, makes the kernel drop the size and pages it caches
 *     of their inodes (FUSE_NOTIFY_INVAL_INODE): that size counted the lost
 *     bytes, and an O_APPEND write would land past the committed end;
 *   - requests the worker had read but not answered get no answer unless the
 *     kernel supports FUSE_NOTIFY_RESEND (Linux >= 6.9), which the supervisor
 *     sends before starting the new worker so that they are queued again (a
 *     resent request may have been carried out once already: e.g. a create then
 *     fails with EEXIST);
 *   - the new worker takes over the crashed worker's metadata session (its id is
 *     in the dirty record), so the locks held through it stay held.
 * Open files and kernel inode references carry over: see mnt_handle.c and
 * fuse_inode.c.
 *
 * More than MNT_SUPER_MAX_RESTARTS crashes within MNT_SUPER_WINDOW_SEC make the
 * supervisor give up: it detaches the mount and exits 1.  A later worker that
 * cannot open the volume (the engine or the store unreachable just then) exits
 * MNT_EXIT_REOPEN: the supervisor starts another after 1, 2, 4 ... 10 s, for up
 * to MNT_SUPER_REOPEN_SEC, while the kernel keeps the requests queued.
 *
 * In-place upgrade (cmd_upgrade.c has the protocol): SIGUSR2 to the supervisor with
 * a request file -> the worker hands over and exits MNT_EXIT_UPGRADE -> the
 * supervisor execs the new binary keeping the descriptor (super_handover); the new
 * image finds the handover record and skips the mount and the INIT read
 * (super_resume), then forks the next worker as after a crash, but with nothing lost.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "super"
#include "keg/log.h"
#include "keg/mem.h"

#include "mnt_i.h"

#define MNT_SUPER_MAX_RESTARTS 5
#define MNT_SUPER_WINDOW_SEC   60
#define MNT_SUPER_REOPEN_SEC   600    /* keep starting workers that cannot open the volume */
#define MNT_SUPER_REOPEN_PAUSE 10     /* at most this many seconds between two of them */
#define MNT_INIT_BUF           ((1u << 20) + (64u << 10))   /* >= any max_write + header */
#define MNT_FUSE_NOTIFY_RESEND 7                               /* linux/fuse.h, 7.40 */
#define MNT_FUSE_NOTIFY_INVAL_INODE 2                          /* linux/fuse.h */

/*----- kernel mount options -----*/

struct kmount {
    unsigned long flags;
    char          data[1024];
    char          source[256];
    char          type[64];
};

/* Append ",opt" to k->data.  Returns 0 or -ENAMETOOLONG. */
static int add_data(struct kmount *k, const char *opt)
{
    size_t used = strlen(k->data);
    int n = snprintf(k->data + used, sizeof(k->data) - used, ",%s", opt);
    return n < 0 || (size_t)n >= sizeof(k->data) - used ? -ENAMETOOLONG : 0;
}

/* Map the comma-separated FUSE mount options (what libfuse's mount would pass)
 * to mount(2) flags and data.  Options for libfuse's session (debug, ...) are
 * not the kernel's and are skipped.  Returns 0 or -errno (message printed). */
static int kernel_opts(const char *opts, int fd, struct kmount *k)
{
    char *copy = keg_strdup(opts ? opts : "");
    char *save = NULL;
    int rc = 0;
    if (!copy)
        return -ENOMEM;
    memset(k, 0, sizeof(*k));
    k->flags = MS_NOSUID | MS_NODEV;
    snprintf(k->data, sizeof(k->data), "fd=%d,rootmode=40000,user_id=%u,group_id=%u", fd,
             (unsigned)getuid(), (unsigned)getgid());
    snprintf(k->source, sizeof(k->source), "kegfs");
    snprintf(k->type, sizeof(k->type), "fuse");
    for (char *o = strtok_r(copy, ",", &save); o && rc == 0; o = strtok_r(NULL, ",", &save)) {
        if (mnt_mopt_apply(o, &k->flags))    /* ro, nodev, relatime, ... (mnt_mopts.c) */
            continue;
        if (!strcmp(o, "allow_other") || !strcmp(o, "default_permissions") ||
            !strncmp(o, "max_read=", 9) || !strncmp(o, "context=", 8) ||
            !strncmp(o, "fscontext=", 10) || !strncmp(o, "defcontext=", 11) ||
            !strncmp(o, "rootcontext=", 12))
            rc = add_data(k, o);
        else if (!strncmp(o, "fsname=", 7))
            snprintf(k->source, sizeof(k->source), "%s", o + 7);
        else if (!strncmp(o, "subtype=", 8))
            snprintf(k->type, sizeof(k->type), "fuse.%s", o + 8);
        else if (!strcmp(o, "auto_unmount") || !strcmp(o, "blkdev") ||
                 !strncmp(o, "blksize=", 8))
            mnt_warn("warning: -o %s is ignored by the supervisor (try --no-supervisor)", o);
        /* anything else is a libfuse session option (debug, ...) */
    }
    if (rc)
        mnt_error("FUSE mount options too long: %s", opts);
    keg_free(copy);
    return rc;
}

/*----- signals -----*/

static volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
    stop_sig = sig;
}

static void set_handlers(int on)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on ? on_stop : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;            /* no SA_RESTART: waitpid returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* Detach the mount if it is still ours: fd is our /dev/fuse descriptor.
 * Once our mount is gone (unmounted from outside), the kernel has aborted its
 * connection and fd polls POLLERR: whatever is mounted at abs_mp now is a newer
 * mount at the same path (a quick remount while we drained) and is left alone. */
static void detach(const char *abs_mp, int fd)
{
    char fstype[64];
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    if (fd >= 0 && poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLERR | POLLNVAL))) {
        KEG_DEBUG("%s: our FUSE connection is gone, nothing to detach", abs_mp);
        return;
    }
    if (mnt_is_mountpoint(abs_mp, fstype, sizeof(fstype)) > 0 &&
        strncmp(fstype, "fuse.", 5) == 0 && umount2(abs_mp, MNT_DETACH) < 0)
        KEG_WARN("cannot detach %s: %s", abs_mp, strerror(errno));
}

/* Ask the kernel to queue again the requests a dead worker had read
 * (Linux >= 6.9; older kernels refuse it and those requests stay unanswered). */
static void resend_pending(int fd)
{
    struct {
        uint32_t len;
        int32_t  error;
        uint64_t unique;
    } hdr = {sizeof(hdr), MNT_FUSE_NOTIFY_RESEND, 0};
    if (write(fd, &hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr))
        KEG_INFO("asked the kernel to resend the requests the crashed worker had read");
    else
        KEG_WARN("the kernel does not resend requests of the crashed worker (%s): processes "
                 "waiting on them hang until interrupted", strerror(errno));
}

/* Make the kernel forget what it caches of an inode whose written data died
 * with the worker: its size (which counted that data; an O_APPEND write would
 * go past the committed end and leave a hole of zeros) and its page cache (the
 * lost bytes).  The next stat or lseek(SEEK_END) asks the new worker. */
static void inval_lost(void *arg, uint64_t id, uint64_t ino)
{
    int fd = *(const int *)arg;
    struct {
        uint32_t len;
        int32_t  error;
        uint64_t unique;
        uint64_t ino;
        int64_t  off;
        int64_t  len_;
    } msg = {sizeof(msg), MNT_FUSE_NOTIFY_INVAL_INODE, 0, ino, 0, 0};
    (void)id;
    if (write(fd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
        KEG_DEBUG("cannot invalidate inode %llu: %s", (unsigned long long)ino, strerror(errno));
}

/* After a worker died or handed over: log the handles whose data it lost and make
 * the kernel drop what it caches of their inodes. */
static void report_lost(const struct mnt_dirty_tab *dirty, pid_t pid, const char *how, int fd)
{
    if (mnt_dirty_report(dirty, (int)pid, how) > 0)
        mnt_dirty_foreach(dirty, inval_lost, &fd);
}

/*----- in-place upgrade (cmd_upgrade.c has the protocol) -----*/

/* This process was exec'ed by an upgrading supervisor: take its descriptor and
 * INIT bytes.  Returns 1 (resumed), 0 (a fresh mount), or -errno. */
static int super_resume(int *fd, char **init, struct mnt_worker *w, unsigned *first_epoch,
                        int *record_fd)
{
    void *buf = NULL;
    size_t len = 0;
    unsigned epoch = 0;
    int rc = mnt_upgrade_resume(fd, &buf, &len, &epoch, &w->session, record_fd);
    if (rc <= 0)
        return rc;
    *init = buf;
    w->init_len = len;
    w->handover = 1;
    *first_epoch = epoch + 1;
    resend_pending(*fd);    /* a request the old worker read while it stopped */
    return 1;
}

/* The worker stopped for a handover: exec the new binary on fd, passing it the
 * dirty record (whatever the worker could not commit stays marked there, and
 * so do the handles an earlier crash left without their data).  On return
 * (exec failed) the loop starts a worker of this binary; the handover flag
 * makes it adopt the open handles like any later worker. */
static void super_handover(const struct mnt_super_conf *sc, int fd, struct mnt_worker *w,
                           const struct mnt_dirty_tab *dirty)
{
    mnt_upgrade_super_exec(sc->abs_mp, sc->volname, fd, w->init, w->init_len, w->epoch,
                           w->session, mnt_dirty_fd(dirty));
    w->handover = 1;
    resend_pending(fd);
}

/*----- the supervisor -----*/

int mnt_super_run(const struct mnt_super_conf *sc, int notify_fd)
{
    struct kmount k;
    struct mnt_worker w;
    char *init = NULL;
    int fd = -1;
    int status = 1;
    int mounted = 0;
    time_t crashes[MNT_SUPER_MAX_RESTARTS + 1];
    unsigned ncrash = 0;
    pid_t last_worker = 0;
    struct mnt_dirty_tab *dirty = NULL;
    unsigned first_epoch = 1;
    int record_fd = -1;
    time_t reopen_since = 0;      /* workers have failed to open the volume since then */
    unsigned reopen_pause = 1;

    memset(&w, 0, sizeof(w));
    if (super_resume(&fd, &init, &w, &first_epoch, &record_fd) > 0) {
        mounted = 1;        /* by the binary we replaced; not re-read: no INIT comes */
        goto resumed;
    }
    fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        mnt_error("cannot open /dev/fuse: %s", strerror(errno));
        goto fail;
    }
    if (kernel_opts(sc->fuse_opts, fd, &k) != 0)
        goto fail;
    if (mount(k.source, sc->abs_mp, k.type, k.flags, k.data) < 0) {
        int e = errno;
        mnt_error("cannot mount at %s: %s%s", sc->abs_mp, strerror(e),
                  e == EPERM ? " (the supervisor needs root; try --no-supervisor)" : "");
        goto fail;
    }
    mounted = 1;
    KEG_DEBUG("mount(%s, %s, %s, 0x%lx, %s)", k.source, sc->abs_mp, k.type, k.flags, k.data);
    init = keg_malloc(MNT_INIT_BUF);
    if (!init) {
        mnt_error("out of memory");
        goto fail;
    }
    for (;;) {
        ssize_t n = read(fd, init, MNT_INIT_BUF);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            mnt_error("no FUSE_INIT from the kernel on %s: %s", sc->abs_mp,
                      n < 0 ? strerror(errno) : "end of file");
            goto fail;
        }
        w.init_len = (size_t)n;
        break;
    }
resumed:
    w.init = init;
    w.fuse_fd = fd;
    mnt_state_prune();
    int rc = mnt_state_write(sc->abs_mp, getpid(), sc->meta_url, sc->drain_timeout);
    if (rc)
        KEG_WARN("cannot write the state file in %s: %s ('kegfs umount' will not wait, "
                 "'kegfs info' will not work)", mnt_run_dir(), strerror(-rc));
    dirty = record_fd >= 0 ? mnt_dirty_attach(record_fd) : NULL;
    if (!dirty)
        dirty = mnt_dirty_create();
    if (dirty && !mnt_dirty_session(dirty))
        mnt_dirty_set_session(dirty, w.session);    /* from the handover record, or 0 */
    if (!dirty)
        KEG_WARN("cannot map the record of uncommitted writes (%s): after a worker crash "
                 "every file open at the time fails writes, fsync and close with EIO",
                 strerror(errno));
    set_handlers(1);
    mnt_upgrade_super_signals();
    pid_t super = getpid();
    for (w.epoch = first_epoch;; w.epoch++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            mnt_error("fork: %s", strerror(errno));
            detach(sc->abs_mp, fd);
            status = 1;
            break;
        }
        if (pid == 0) {
            set_handlers(0);
            mnt_upgrade_worker_prearm();
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != super)
                _exit(1);
            mnt_handle_use_dirty(dirty);
            _exit(sc->worker(sc->arg, &w, notify_fd));
        }
        if (notify_fd >= 0) {     /* only the first worker reports to a -d parent */
            close(notify_fd);
            notify_fd = -1;
        }
        KEG_INFO("worker %u started, pid %d", w.epoch, (int)pid);
        last_worker = pid;
        if (w.handover)
            mnt_upgrade_super_started(sc->abs_mp, pid);
        int st = 0;
        int detached = 0;
        for (;;) {
            if (stop_sig && !detached) {
                KEG_INFO("signal %d: unmounting %s", (int)stop_sig, sc->abs_mp);
                detach(sc->abs_mp, fd);
                detached = 1;
            }
            if (mnt_upgrade_super_pending() && !detached)
                mnt_upgrade_super_begin(sc->abs_mp, pid);
            pid_t r = waitpid(pid, &st, 0);
            if (r == pid)
                break;
            if (r < 0 && errno != EINTR) {
                KEG_ERR("waitpid: %s", strerror(errno));
                st = 1 << 8;
                break;
            }
        }
        /* the next worker, of this binary or another, takes the session over */
        if (dirty && mnt_dirty_session(dirty))
            w.session = mnt_dirty_session(dirty);
        if (WIFEXITED(st) && WEXITSTATUS(st) == MNT_EXIT_UPGRADE && !stop_sig) {
            report_lost(dirty, pid, "handed over with", fd);
            super_handover(sc, fd, &w, dirty);      /* returns only when the exec failed */
            continue;
        }
        if (WIFEXITED(st) && WEXITSTATUS(st) == MNT_EXIT_REOPEN && !stop_sig) {
            time_t now = time(NULL);
            if (!reopen_since)
                reopen_since = now;
            if (now - reopen_since < MNT_SUPER_REOPEN_SEC) {
                KEG_ERR("worker %d could not open the volume; starting another in %u s "
                        "(requests on %s wait meanwhile; giving up %d s after the first "
                        "failure)", (int)pid, reopen_pause, sc->abs_mp, MNT_SUPER_REOPEN_SEC);
                for (unsigned i = 0; i < reopen_pause && !stop_sig; i++)
                    sleep(1);
                reopen_pause = KEG_MIN(reopen_pause * 2, (unsigned)MNT_SUPER_REOPEN_PAUSE);
                if (!stop_sig)
                    continue;   /* same flags: a handover stays a handover */
            }
        }
        reopen_since = 0;
        reopen_pause = 1;
        w.handover = 0;
        if (WIFEXITED(st)) {
            status = WEXITSTATUS(st);
            KEG_INFO("worker %d exited with status %d", (int)pid, status);
            detach(sc->abs_mp, fd);      /* after a signal the worker leaves the mount to us */
            break;
        }
        int sig = WTERMSIG(st);
        if (stop_sig) {
            KEG_ERR("worker %d was killed by signal %d while unmounting", (int)pid, sig);
            detach(sc->abs_mp, fd);
            status = 1;
            break;
        }
        time_t now = time(NULL);
        crashes[ncrash % (MNT_SUPER_MAX_RESTARTS + 1)] = now;
        ncrash++;
        if (ncrash > MNT_SUPER_MAX_RESTARTS &&
            now - crashes[ncrash % (MNT_SUPER_MAX_RESTARTS + 1)] < MNT_SUPER_WINDOW_SEC) {
            KEG_ERR("worker %d was killed by signal %d; %d crashes within %d s: giving up, "
                    "detaching %s", (int)pid, sig, MNT_SUPER_MAX_RESTARTS + 1,
                    MNT_SUPER_WINDOW_SEC, sc->abs_mp);
            detach(sc->abs_mp, fd);
            status = 1;
            break;
        }
        KEG_ERR("worker %d was killed by signal %d%s; starting a new worker on the same "
                "FUSE connection", (int)pid, sig, WCOREDUMP(st) ? " (core dumped)" : "");
        report_lost(dirty, pid, "died with", fd);
        resend_pending(fd);
    }
    set_handlers(0);
    mnt_stats_remove(sc->abs_mp, last_worker);
    mnt_state_remove(sc->abs_mp, getpid());
    close(fd);
    keg_free(init);
    mnt_dirty_free(dirty);
    return status;
fail:
    if (mounted)
        umount2(sc->abs_mp, MNT_DETACH);
    if (fd >= 0)
        close(fd);
    keg_free(init);
    if (notify_fd >= 0) {
        char buf[1200];
        snprintf(buf, sizeof(buf), "ERR %s", mnt_last_error());
        if (write(notify_fd, buf, strlen(buf)) < 0)
            KEG_DEBUG("notify: %s", strerror(errno));
        close(notify_fd);
    }
    return 1;
}
