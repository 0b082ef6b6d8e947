/* cmd_umount.c -- `kegfs umount`: unmount a KegFS mount and wait until its mounter has exited.
 *
 * Waiting for the mounter matters: it flushes open files and ends its session
 * after the kernel lets go, so "umount returned" means "data is in the object
 * store".  The mounter is found through its state file (mnt_state_read) or,
 * failing that, by scanning /proc for a `kegfs mount ... MOUNTPOINT` process.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "umount"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/retry.h"

#include "mnt_i.h"

#define MNT_UMOUNT_WAIT_SEC 30

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs umount [OPTIONS] MOUNTPOINT\n"
        "\n"
        "Unmount the KegFS mount at MOUNTPOINT and wait until its mounter process has\n"
        "flushed its data and exited: up to 30 s, or 2 x --drain-timeout + 15 s for a\n"
        "--writeback mounter (progress of its uploads is reported every 5 s).\n"
        "\n"
        "Options:\n"
        "  -f, --force              detach even if busy (lazy unmount, MNT_DETACH); the\n"
        "                           mounter exits once the last open file is closed\n"
        MNT_COMMON_HELP
        "\n"
        "Exit status: 0 unmounted, 1 error (not mounted, busy, mounter did not exit),\n"
        "2 usage error.\n");
}

/* 1 if /proc/<pid>/cmdline is a `kegfs mount` whose last argument is abs_mp
 * (or an absolute path that resolves to it), else 0.  With abs_mp NULL: any
 * `kegfs mount`.  The program may be a copy named kegfs-SOMETHING (`kegfs
 * upgrade --binary`, the CSI holder's versioned binaries).  A relative last
 * argument never matches: it was relative to the directory the mount command
 * was given in, which is not known here (a background mounter runs in /). */
static int is_mounter(pid_t pid, const char *abs_mp)
{
    char path[64];
    char buf[8192];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    if (n == 0)
        return 0;
    buf[n] = '\0';
    const char *args[256];
    int na = 0;
    for (size_t i = 0; i < n && na < 256; i += strlen(buf + i) + 1)
        args[na++] = buf + i;
    if (na < 3)
        return 0;
    const char *base = strrchr(args[0], '/');
    base = base ? base + 1 : args[0];
    if (strcmp(base, "kegfs") != 0 && strncmp(base, "kegfs-", 6) != 0)
        return 0;
    int has_mount = 0;
    for (int i = 1; i < na - 1; i++)
        if (strcmp(args[i], "mount") == 0)
            has_mount = 1;
    if (!has_mount)
        return 0;
    if (!abs_mp)
        return 1;
    const char *last = args[na - 1];
    if (strcmp(last, abs_mp) == 0)
        return 1;
    char rp[PATH_MAX];
    return last[0] == '/' && realpath(last, rp) && strcmp(rp, abs_mp) == 0;
}

static pid_t scan_proc(const char *abs_mp)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    pid_t found = 0;
    if (!d)
        return 0;
    while ((de = readdir(d)) != NULL) {
        uint64_t v;
        if (mnt_parse_u64(de->d_name, &v) != 0 || (pid_t)v == getpid())
            continue;
        if (is_mounter((pid_t)v, abs_mp)) {
            found = (pid_t)v;
            break;
        }
    }
    closedir(d);
    return found;
}

static pid_t find_mounter(const char *abs_mp)
{
    pid_t pid = 0;
    if (mnt_state_read(abs_mp, &pid, NULL) == 0 && pid > 0 && is_mounter(pid, NULL))
        return pid;
    return scan_proc(abs_mp);
}

/* `fusermount3 -u [-z] path` for users who may not call umount2(). */
static int run_fusermount(const char *abs_mp, int force)
{
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        if (force)
            execlp("fusermount3", "fusermount3", "-u", "-z", "--", abs_mp, (char *)NULL);
        else
            execlp("fusermount3", "fusermount3", "-u", "--", abs_mp, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR)
            return -errno;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 127 ? -ENOENT : -EIO;
}

/* While waiting: every 5 s, say what a draining mounter still has to upload. */
static void report_drain(const char *abs_mp, pid_t pid)
{
    struct mnt_live l;
    char a[32];
    if (mnt_stats_read(abs_mp, &l) != 0 || l.pid == 0)
        return;
    if (l.staged_objects == 0 && strcmp(l.phase, "draining") != 0)
        return;
    mnt_warn("waiting for the mounter (pid %d) to upload %llu staged objects (%s, %llu in "
             "flight, %llu failing)...", (int)pid, (unsigned long long)l.staged_objects,
             mnt_fmt_size(l.staged_bytes, a, sizeof(a)), (unsigned long long)l.uploading,
             (unsigned long long)l.failing_objects);
}

static int wait_exit(pid_t pid, int seconds, const char *abs_mp)
{
    int64_t start = keg_mono_ns();
    int64_t deadline = start + (int64_t)seconds * 1000000000LL;
    int64_t next_report = start + 2000000000LL;
    while (keg_mono_ns() < deadline) {
        if (abs_mp && keg_mono_ns() >= next_report) {
            report_drain(abs_mp, pid);
            next_report = keg_mono_ns() + 5000000000LL;
        }
        if (kill(pid, 0) < 0 && errno == ESRCH)
            return 0;
        /* a zombie child of someone else still answers kill(): check its state */
        char path[64];
        char *st = NULL;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        if (mnt_read_small_file(path, &st) == 0) {
            const char *rp = strrchr(st, ')');
            int zombie = rp && rp[1] == ' ' && rp[2] == 'Z';
            keg_free(st);
            if (zombie)
                return 0;
        }
        keg_sleep_ms(50);
    }
    return -ETIMEDOUT;
}

int mnt_cmd_umount(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"force", no_argument, NULL, 'f'},
        MNT_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct mnt_cmdline cl = {
        .name = "umount", .shortopts = "fvh", .longopts = longopts, .usage = usage,
        .usage_error = "umount needs MOUNTPOINT (see 'kegfs umount --help')",
        .flag_opt = 'f',
    };
    char *abs = NULL;
    char fstype[64];
    int force;
    int rc;
    rc = mnt_parse_cmdline(argc, argv, &cl);
    if (rc >= 0)
        return rc;
    force = cl.flag;
    const char *mp = cl.operand;
    rc = mnt_abspath(mp, &abs);
    if (rc) {
        mnt_error("%s: %s", mp, strerror(-rc));
        return 1;
    }
    rc = mnt_is_mountpoint(abs, fstype, sizeof(fstype));
    if (rc <= 0) {
        if (rc < 0)
            mnt_error("cannot read the mount table: %s", strerror(-rc));
        else
            mnt_error("%s is not mounted", abs);
        rc = 1;
        goto out;
    }
    if (strcmp(fstype, "fuse.kegfs") != 0) {
        mnt_error("%s is not a KegFS mount (it is %s)", abs, fstype);
        rc = 1;
        goto out;
    }
    pid_t pid = find_mounter(abs);
    /* A writeback mounter may spend its drain timeout uploading, twice (the
     * explicit drain, then the writeback layer's own at close). */
    int wait_sec = MNT_UMOUNT_WAIT_SEC;
    unsigned drain = mnt_state_drain_timeout(abs);
    if (drain && (int)(2 * drain + 15) > wait_sec)
        wait_sec = (int)(2 * drain + 15);
    if (umount2(abs, force ? MNT_DETACH : 0) < 0) {
        int e = errno;
        if (e == EBUSY) {
            mnt_error("%s is busy (open files or a working directory inside); close them or "
                      "use --force to detach", abs);
            rc = 1;
            goto out;
        }
        if (e != EPERM && e != EACCES) {
            mnt_error("cannot unmount %s: %s", abs, strerror(e));
            rc = 1;
            goto out;
        }
        rc = run_fusermount(abs, force);
        if (rc) {
            mnt_error("cannot unmount %s: %s%s", abs, strerror(e),
                      rc == -ENOENT ? " (and fusermount3 is not installed)" :
                      " (fusermount3 failed too)");
            rc = 1;
            goto out;
        }
    }
    rc = 0;
    if (pid > 0 && wait_exit(pid, wait_sec, abs) != 0) {
        if (force) {
            mnt_warn("%s detached; the mounter (pid %d) finishes once its last open file is "
                     "closed", abs, (int)pid);
        } else {
            struct mnt_live l;
            if (mnt_stats_read(abs, &l) == 0 && l.staged_objects)
                mnt_error("%s unmounted, but its mounter (pid %d) is still running after %d s, "
                          "with %llu objects staged for upload", abs, (int)pid, wait_sec,
                          (unsigned long long)l.staged_objects);
            else
                mnt_error("%s unmounted, but its mounter (pid %d) is still running after %d s "
                          "(still flushing data?)", abs, (int)pid, wait_sec);
            rc = 1;
        }
    } else if (pid <= 0) {
        KEG_INFO("no mounter process found for %s; not waiting", abs);
    }
out:
    keg_free(abs);
    return rc;
}
