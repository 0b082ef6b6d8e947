/* lockhold.c -- take, hold or query one file lock, for the mount cases that test locks
 * across mounters (`keg_lockhold`).
 *
 * Usage: keg_lockhold [-H SEC] [-W SEC] MODE FILE [START LEN]
 *
 *   MODE   flock-ex, flock-sh   flock(2) LOCK_EX / LOCK_SH, non-blocking
 *          wr, rd               fcntl(2) F_SETLK F_WRLCK / F_RDLCK on [START, START+LEN)
 *                               (LEN 0 = to EOF), non-blocking
 *          ofd-wr               the same with an OFD lock (F_OFD_SETLK F_WRLCK)
 *          getlk                fcntl(2) F_GETLK for a write lock on the range; prints
 *                               "unlocked" or "locked TYPE START LEN pid=PID"
 *   -W SEC blocking variant (LOCK_NB dropped / F_SETLKW), given up after SEC seconds
 *   -H SEC after taking the lock print "locked" and hold it SEC seconds (or until
 *          SIGTERM/SIGKILL) before exiting; without -H the process exits at once, which
 *          releases the lock
 *
 * The file is opened O_RDWR (O_RDONLY for rd / flock-sh / getlk) and created when missing.
 * Exit status: 0 lock taken (getlk: answered), 1 conflict (EAGAIN / EWOULDBLOCK / EACCES),
 * 2 usage or other error, 3 -W timeout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_alarm;

static void on_alarm(int sig)
{
    (void)sig;
    g_alarm = 1;
}

static int usage(void)
{
    fprintf(stderr, "usage: keg_lockhold [-H SEC] [-W SEC] flock-ex|flock-sh|wr|rd|ofd-wr|getlk FILE "
                    "[START LEN]\n");
    return 2;
}

static int parse_num(const char *s, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* Map the result of a lock call to the exit status; prints what happened. */
static int lock_result(int rc, int err, const char *what)
{
    if (rc == 0)
        return 0;
    if (err == EINTR && g_alarm) {
        printf("timeout %s\n", what);
        return 3;
    }
    if (err == EAGAIN || err == EWOULDBLOCK || err == EACCES) {
        printf("busy %s: %s\n", what, strerror(err));
        return 1;
    }
    printf("error %s: %s\n", what, strerror(err));
    return 2;
}

int main(int argc, char **argv)
{
    long long hold = -1, wait_sec = -1, start = 0, len = 0;
    int opt;

    while ((opt = getopt(argc, argv, "H:W:")) != -1) {
        switch (opt) {
        case 'H':
            if (parse_num(optarg, &hold))
                return usage();
            break;
        case 'W':
            if (parse_num(optarg, &wait_sec))
                return usage();
            break;
        default:
            return usage();
        }
    }
    if (argc - optind != 2 && argc - optind != 4)
        return usage();
    const char *mode = argv[optind];
    const char *path = argv[optind + 1];
    if (argc - optind == 4 &&
        (parse_num(argv[optind + 2], &start) || parse_num(argv[optind + 3], &len)))
        return usage();

    int is_flock = !strncmp(mode, "flock-", 6);
    int shared = !strcmp(mode, "flock-sh") || !strcmp(mode, "rd");
    int getlk = !strcmp(mode, "getlk");
    int ofd = !strcmp(mode, "ofd-wr");
    if (!is_flock && !getlk && !ofd && strcmp(mode, "wr") && strcmp(mode, "rd"))
        return usage();
    if (is_flock && strcmp(mode, "flock-ex") && strcmp(mode, "flock-sh"))
        return usage();

    int fd = open(path, ((shared || getlk) ? O_RDONLY : O_RDWR) | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        printf("error open %s: %s\n", path, strerror(errno));
        return 2;
    }

    if (wait_sec >= 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_alarm;   /* no SA_RESTART: the blocking call returns EINTR */
        sigaction(SIGALRM, &sa, NULL);
        alarm((unsigned)(wait_sec > 0 ? wait_sec : 1));
    }

    int rc;
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = shared ? F_RDLCK : F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)start;
    fl.l_len = (off_t)len;

    if (getlk) {
        if (fcntl(fd, F_GETLK, &fl) < 0) {
            printf("error F_GETLK: %s\n", strerror(errno));
            return 2;
        }
        if (fl.l_type == F_UNLCK)
            printf("unlocked\n");
        else
            printf("locked %s %lld %lld pid=%ld\n", fl.l_type == F_WRLCK ? "wr" : "rd",
                   (long long)fl.l_start, (long long)fl.l_len, (long)fl.l_pid);
        return 0;
    }
    if (is_flock) {
        int op = (shared ? LOCK_SH : LOCK_EX) | (wait_sec >= 0 ? 0 : LOCK_NB);
        rc = flock(fd, op);
    } else if (ofd) {
        rc = fcntl(fd, wait_sec >= 0 ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
    } else {
        rc = fcntl(fd, wait_sec >= 0 ? F_SETLKW : F_SETLK, &fl);
    }
    int st = lock_result(rc, errno, mode);
    alarm(0);
    if (st != 0)
        return st;
    printf("locked %s pid=%ld\n", mode, (long)getpid());
    fflush(stdout);
    if (hold > 0) {
        struct timespec ts = {.tv_sec = (time_t)hold, .tv_nsec = 0};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
    close(fd);
    return 0;
}
