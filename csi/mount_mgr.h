/* mount_mgr.h -- how the node plugin starts and stops mounters.
 *
 * DESIGN
 * The mount mode is a choice behind this table (STYLE.md §10):
 *  - process mode (mount_mgr.c, the only one so far): `kegfs mount` runs as a
 *    child of the node plugin, so restarting the plugin container kills the
 *    mounts; the plugin's recovery re-establishes them from the state file.
 *  - mount-pod mode (later): one pod per mounter, surviving plugin upgrades.
 * Secrets never pass through this interface: the node handler writes them into
 * a 0600 config file (csi_mount_write_config) and hands over its path.
 */
#ifndef KEG_CSI_MOUNT_MGR_H
#define KEG_CSI_MOUNT_MGR_H

#include <stddef.h>
#include <sys/types.h>

struct csi_mount_req {
    const char *volume_id;
    const char *target;        /* absolute; exists */
    const char *config;        /* 0600 YAML with meta-url and credentials */
    const char *options;       /* comma-joined mount options, "" for none */
    int         readonly;
};

struct csi_mount_mgr;

struct csi_mount_mgr_ops {
    const char *name;          /* "process", "fake" */
    /* Start a mounter for req and wait until the mount at req->target is live.
     * *pid = the mounter's pid.  On failure err gets a one-paragraph reason
     * (for a mounter that died: its last log lines).  Returns 0, -ETIMEDOUT
     * (not live in time; the mounter was stopped), -EIO (mounter exited),
     * or -errno (spawn failed).  Thread-safe. */
    int  (*start)(struct csi_mount_mgr *mm, const struct csi_mount_req *req, pid_t *pid,
                  char *err, size_t errlen);
    /* Unmount target (lazily when busy) and stop mounter pid (0: unknown).
     * Nothing mounted and no such process is success.  Returns 0 or -errno. */
    int  (*stop)(struct csi_mount_mgr *mm, const char *target, pid_t pid);
    /* 0 if a live KegFS mount is at target, -ENOTCONN if the mount is dead
     * (mounter gone), -EINVAL if nothing is mounted there, -ENOENT if target
     * does not exist, or another -errno. */
    int  (*check)(struct csi_mount_mgr *mm, const char *target);
    /* Detach a dead mount at target (umount2 MNT_DETACH).  Returns 0 or -errno. */
    int  (*detach)(struct csi_mount_mgr *mm, const char *target);
    /* Collect exited mounters (no zombies).  Optional. */
    void (*reap)(struct csi_mount_mgr *mm);
    void (*destroy)(struct csi_mount_mgr *mm);
};

struct csi_mount_mgr {
    const struct csi_mount_mgr_ops *ops;   /* MUST be first */
    void *priv;
};

/* Process mode: mounter is the `kegfs` binary, logs go to <state_dir>/logs/.
 * OWNERSHIP: caller frees with mm->ops->destroy(mm).  Returns 0 or -errno. */
int csi_mount_mgr_process_create(const char *mounter, const char *state_dir,
                                 struct csi_mount_mgr **out);

/* Write the mounter config file `path` (mode 0600, atomically) with keys
 * meta-url, and access-key / secret-key when given (NULL: left out).
 * Values are YAML-quoted by libyaml's emitter.  Returns 0 or -errno. */
int csi_mount_write_config(const char *path, const char *meta_url, const char *access_key,
                           const char *secret_key);

/* statfs magic of FUSE mounts */
#define CSI_FUSE_SUPER_MAGIC 0x65735546

#endif
