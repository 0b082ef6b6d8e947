/* spawn.h -- start a detached helper process with its output in a log file. */
#ifndef KEG_SPAWN_H
#define KEG_SPAWN_H

#include <sys/types.h>

/* posix_spawn path with argv in a new session: stdin /dev/null, stdout and stderr
 * appended to logpath (created 0600), no other descriptor inherited, every signal
 * unblocked and at its default action (the caller's threads may block some).
 * *pid gets the child (0 on failure).  Returns 0 or -errno. */
int keg_spawn_logged(const char *path, const char *const argv[], const char *logpath,
                     pid_t *pid);

/* 1 if process pid runs with arg as one of its arguments (from
 * /proc/<pid>/cmdline; a mounter names its target), else 0: a recycled pid
 * or a zombie (empty cmdline) is not signalled by mistake. */
int keg_pid_has_arg(pid_t pid, const char *arg);

/* Polls every poll_ms until gone(arg) is nonzero (returns 1) or timeout_ms
 * have passed (returns 0): waiting for a stopped process to go away. */
int keg_wait_gone(int (*gone)(void *arg), void *arg, unsigned timeout_ms, unsigned poll_ms);

/* The path of this process's executable (/proc/self/exe) into buf.  Returns 0,
 * or -errno (-ENAMETOOLONG when it does not fit), with buf "" on error. */
int keg_self_exe(char *buf, size_t size);

#endif
