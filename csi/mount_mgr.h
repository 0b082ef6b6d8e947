/* mount_mgr.h -- how the node plugin starts and stops mounters.
 *
 * DESIGN
 * The mount mode is a choice behind this table (STYLE.md §10):
 *  - process mode (mount_mgr.c): `kegfs mount` runs as a child of the node
 *    plugin, so restarting the plugin container kills the mounts; the plugin's
 *    recovery re-establishes them from the state file.  For single-host use
 *    and the CSI socket tests.
 *  - holder mode (mount_mgr.c): the mounters are children of `kegfs holder`,
 *    a separate long-lived process (its own DaemonSet), asked over a unix
 *    socket; restarting or upgrading the plugin never touches a mount
 *    (docs/internals/MOUNT-HOLDER.md).
 * Secrets never pass through this interface: the node handler writes them into
 * a 0600 config file (csi_mount_write_config) and hands over its path.
 * With req->metrics each mounter also gets `--metrics unix:<dir>/metrics/<hash>.sock`
 * (<hash>: 16 hex digits of a hash of the target, like its config and log file), so
 * the node plugin's /metrics can include every mounter's (csi/scrape.c).
 */
#ifndef KEG_CSI_MOUNT_MGR_H
#define KEG_CSI_MOUNT_MGR_H

#include <stddef.h>
#include <sys/types.h>

#include "keg/metrics.h"

struct csi_mount_req {
    const char *volume_id;
    const char *target;        /* absolute; exists */
    const char *config;        /* 0600 YAML with meta-url and credentials */
    const char *options;       /* comma-joined mount options, "" for none */
    int         readonly;
    int         metrics;       /* 1: the mounter serves /metrics on a unix socket */
};

/* What start() reports of the mounter it started (or found running). */
struct csi_mount_res {
    pid_t pid;                                  /* the mounter, 0 if unknown */
    /* its metrics socket, named by the mounters' owner (the plugin's state dir, or the
     * holder's, which both see at the same path): "<dir>/metrics/<hash of target>.sock";
     * "" when it serves none */
    char  metrics[KEG_METRICS_UNIX_PATH_MAX];
};

struct csi_mount_mgr;
struct csi_state;
struct csi_publish;

struct csi_mount_mgr_ops {
    const char *name;          /* "process", "holder", "fake" */
    /* 1: the mounters' owner re-establishes dead mounts itself (holder mode);
     * the plugin's recovery then only asks start() (idempotent there) and never
     * detaches or stops first. */
    int         self_healing;
    /* Start a mounter for req and wait until the mount at req->target is live.
     * *res (always set) = the mounter's pid and metrics socket.  On failure err gets
     * a one-paragraph reason (for a mounter that died: its last log lines).  Returns
     * 0, -ETIMEDOUT (not live in time; the mounter was stopped), -EIO (mounter
     * exited), or -errno (spawn failed).  Thread-safe. */
    int  (*start)(struct csi_mount_mgr *mm, const struct csi_mount_req *req,
                  struct csi_mount_res *res, char *err, size_t errlen);
    /* Unmount target (lazily when busy) and stop mounter pid (0: unknown); its
     * metrics socket file goes too.  Nothing mounted and no such process is
     * success.  Returns 0 or -errno. */
    int  (*stop)(struct csi_mount_mgr *mm, const char *target, pid_t pid);
    /* 0 if a live KegFS mount is at target, -ENOTCONN if the mount is dead
     * (mounter gone), -EINVAL if nothing is mounted there, -ENOENT if target
     * does not exist, or another -errno. */
    int  (*check)(struct csi_mount_mgr *mm, const char *target);
    /* Detach a dead mount at target (umount2 MNT_DETACH).  Returns 0 or -errno. */
    int  (*detach)(struct csi_mount_mgr *mm, const char *target);
    /* Collect exited mounters (no zombies).  Optional. */
    void (*reap)(struct csi_mount_mgr *mm);
    /* At plugin start, before the first recovery: make the state agree with
     * the mounters that exist (holder mode: record the holder's pids, unmount
     * what the holder keeps for pods that are gone, upgrade mounters to this
     * plugin's kegfs).  Optional.  Returns 0 once done (a refused upgrade is
     * logged, not retried), or -errno when the mounters could not be listed
     * (the holder not answering yet): the watchdog then calls it again every
     * round until it returns 0. */
    int  (*reconcile)(struct csi_mount_mgr *mm, struct csi_state *state);
    /* For the metrics: alive[i] = 1 if the mounter of recs[i] runs now, else 0.
     * Never looks at the targets (a scrape must not wait for a hung mount).
     * Optional.  Returns 0, or -errno when it cannot tell (the holder did not
     * answer within timeout_ms). */
    int  (*alive)(struct csi_mount_mgr *mm, const struct csi_publish *recs, size_t n,
                  unsigned timeout_ms, unsigned char *alive);
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

/* Holder mode: requests go to the `kegfs holder` socket.  mounter: this
 * plugin's kegfs; with upgrade set, reconcile() copies it to <bin_dir> (a host
 * path the holder sees at the same path) and asks the holder to run every
 * mounter on that copy (an in-place upgrade, nothing unmounted).
 * OWNERSHIP: caller frees with mm->ops->destroy(mm).  Returns 0 or -errno. */
int csi_mount_mgr_holder_create(const char *socket_path, const char *mounter,
                                const char *bin_dir, int upgrade,
                                struct csi_mount_mgr **out);

/* One request to the holder at socket_path: req is "VERB\nkey=value\n...\n\n",
 * fd (or -1) goes along as SCM_RIGHTS.  *resp gets the whole answer.
 * OWNERSHIP: caller keg_free()s *resp.  Returns 0 when the holder answered "ok",
 * the holder's -errno (message in *resp) or -errno of the socket. */
int csi_holder_call(const char *socket_path, const char *req, int fd, unsigned timeout_s,
                    char **resp);

/* Write the mounter config file `path` (mode 0600, atomically) with keys
 * meta-url, and access-key / secret-key when given (NULL: left out).
 * Values are YAML-quoted by libyaml's emitter.  Returns 0 or -errno. */
int csi_mount_write_config(const char *path, const char *meta_url, const char *access_key,
                           const char *secret_key);

#endif
