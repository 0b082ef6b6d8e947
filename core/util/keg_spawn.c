/* keg_spawn.c -- start a detached helper process (a mounter) with a log file. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "keg/keg.h"
#include "keg/retry.h"
#include "keg/spawn.h"

extern char **environ;

int keg_spawn_logged(const char *path, const char *const argv[], const char *logpath,
                     pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, all;
    *pid = 0;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawn(pid, path, &fa, &attr, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0)
        *pid = 0;
    return -rc;
}

int keg_pid_has_arg(pid_t pid, const char *arg)
{
    char path[64], buf[8192];
    if (pid <= 0)
        return 0;
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
        if (strcmp(buf + i, arg) == 0)
            return 1;
    return 0;
}

int keg_wait_gone(int (*gone)(void *arg), void *arg, unsigned timeout_ms, unsigned poll_ms)
{
    int64_t t0 = keg_mono_ns();
    for (;;) {
        if (gone(arg))
            return 1;
        if (keg_mono_ns() - t0 >= (int64_t)timeout_ms * 1000000)
            return 0;
        keg_sleep_ms(poll_ms);
    }
}

int keg_self_exe(char *buf, size_t size)
{
    if (!size)
        return -EINVAL;
    buf[0] = '\0';
    ssize_t n = readlink("/proc/self/exe", buf, size);
    if (n < 0)
        return -errno;
    if ((size_t)n >= size) {
        buf[0] = '\0';
        return -ENAMETOOLONG;
    }
    buf[n] = '\0';
    return 0;
}
