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

#endif
