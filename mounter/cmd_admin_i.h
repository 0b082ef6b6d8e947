/* cmd_admin_i.h -- the maintenance sub-commands (gc, fsck, warmup) and their shared helpers
 * (cmd_admin.c): opening a volume as a tool, finding the volume behind a mounted path
 * (the progress bar is mnt_progress.c). */
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

/* The KegFS mount point containing the absolute path abs, and its META_URL
 * (from the mounter's state file).  Errors are printed.
 * OWNERSHIP: caller keg_free()s *mp and *url.  Returns 0 or -errno. */
int mnt_admin_find_volume(const char *abs, char **mp, char **url);

#endif
