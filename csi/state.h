/* state.h -- the node plugin's persisted record of every NodePublishVolume.
 *
 * One YAML file, <state_dir>/state.yaml, rewritten whole by write-to-temp +
 * fsync + rename on every change, so a crash leaves the old or the new file,
 * never a torn one.  It holds no secrets: those live in each publish's mounter
 * config file (mode 0600), whose path is recorded here.
 */
#ifndef KEG_CSI_STATE_H
#define KEG_CSI_STATE_H

#include <stddef.h>
#include <sys/types.h>

/* One published volume at one target path. */
struct csi_publish {
    char *volume_id;
    char *target;         /* absolute target path: the key of a record */
    int   readonly;
    char *options;        /* comma-joined mount flags, "" if none */
    char *config;         /* mounter config file (0600, holds the secrets) */
    pid_t pid;            /* mounter pid, 0 if unknown */
    char *metrics;        /* the mounter's metrics socket (absolute), "" for none */
};

struct csi_state;

/* Load (or start empty) the state in dir, creating dir (0700) if needed.
 * -EINVAL if the file exists but cannot be parsed (message logged).
 * OWNERSHIP: caller frees with csi_state_close().  Returns 0 or -errno. */
int  csi_state_open(const char *dir, struct csi_state **out);
void csi_state_close(struct csi_state *s);

/* Copy of the record for target.  -ENOENT if none.
 * OWNERSHIP: caller frees out's fields with csi_publish_clear(). */
int  csi_state_find(struct csi_state *s, const char *target, struct csi_publish *out);
/* Insert p, replacing the record of the same target, and persist.
 * BORROWS p.  Returns 0 or -errno (the in-memory state is unchanged then). */
int  csi_state_put(struct csi_state *s, const struct csi_publish *p);
/* Remove the record of target (missing: success) and persist. */
int  csi_state_remove(struct csi_state *s, const char *target);
/* Copies of every record.  OWNERSHIP: caller frees with csi_publish_free_array(). */
int  csi_state_snapshot(struct csi_state *s, struct csi_publish **out, size_t *n);

void csi_publish_clear(struct csi_publish *p);
void csi_publish_free_array(struct csi_publish *a, size_t n);
/* Deep copy.  Returns 0 or -ENOMEM (dst cleared). */
int  csi_publish_copy(struct csi_publish *dst, const struct csi_publish *src);

#endif
