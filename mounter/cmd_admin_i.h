/* cmd_admin_i.h -- the maintenance sub-commands (gc, fsck, warmup) and their shared helpers
 * (cmd_admin.c): opening a volume as a tool, the terminal progress bar, finding the volume
 * behind a mounted path. */
#ifndef KEG_CMD_ADMIN_I_H
#define KEG_CMD_ADMIN_I_H

#include <stdint.h>

struct keg_fs;
struct keg_stack_conf;

/*--- sub-commands (each returns the process exit status) ---*/
int mnt_cmd_gc(int argc, char **argv);
int mnt_cmd_fsck(int argc, char **argv);
int mnt_cmd_warmup(int argc, char **argv);

/* Open the volume at url as a tool (no session, no background threads),
 * credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN.
 * sc may be NULL.  Errors are printed (URL redacted).
 * OWNERSHIP: caller closes *fs with keg_fs_free().  Returns 0 or -errno. */
int mnt_admin_open(const char *url, int read_only, const struct keg_stack_conf *sc,
                   struct keg_fs **fs);

/* A progress bar on stderr when it is a terminal:
 *   "\r<what> [#####     ] 45% 12345/27000"   (total known)
 *   "\r<what>: 12345"                         (total not known yet)
 * Use mnt_bar_progress as the keg_progress_fn with a struct mnt_bar as arg,
 * and mnt_bar_end once done (ends the line). */
struct mnt_bar {
    int      tty;               /* stderr is a terminal (else nothing is drawn) */
    int      drawn;             /* a line is on screen without its newline */
};
void mnt_bar_init(struct mnt_bar *b);
void mnt_bar_progress(void *arg, uint64_t done, uint64_t total, const char *what);
void mnt_bar_end(struct mnt_bar *b);

/* The KegFS mount point containing the absolute path abs, and its META_URL
 * (from the mounter's state file).  Errors are printed.
 * OWNERSHIP: caller keg_free()s *mp and *url.  Returns 0 or -errno. */
int mnt_admin_find_volume(const char *abs, char **mp, char **url);

#endif
