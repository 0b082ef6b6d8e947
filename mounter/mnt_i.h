/* mnt_i.h -- private declarations shared by the files of the `kegfs` binary.
 *
 * The binary is a CLI (main.c dispatches to cmd_*.c) plus the FUSE low-level
 * mounter (cmd_mount.c sets up the session, fuse_ops.c holds the ops table,
 * fuse_inode.c counts kernel references).  Everything below core/ is reached
 * only through the public headers in core/include/keg/.
 */
#ifndef KEG_MNT_I_H
#define KEG_MNT_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "keg/keg.h"
#include "keg/mountinfo.h"

struct keg_fs;

/*--- sub-commands (each returns the process exit status) ---*/
int mnt_cmd_format(int argc, char **argv);
int mnt_cmd_mount(int argc, char **argv);
int mnt_cmd_umount(int argc, char **argv);
int mnt_cmd_status(int argc, char **argv);
int mnt_cmd_info(int argc, char **argv);
int mnt_cmd_stats(int argc, char **argv);
int mnt_cmd_upgrade(int argc, char **argv);    /* cmd_upgrade.c */
int mnt_cmd_holder(int argc, char **argv);     /* cmd_holder.c */
int mnt_cmd_bench(int argc, char **argv);      /* cmd_bench.c */

/*--- messages (mnt_util.c) ---*/
/* Print "kegfs: <msg>" to stderr and remember it (mnt_last_error) so that a
 * daemonised mounter can hand it to its parent. */
void mnt_error(const char *fmt, ...) KEG_PRINTF(1, 2);
const char *mnt_last_error(void);
/* "kegfs: <msg>" to stderr, not remembered. */
void mnt_warn(const char *fmt, ...) KEG_PRINTF(1, 2);

/* Options every sub-command accepts: -v/--verbose, --debug, --quiet,
 * --log-file F.  Returns 1 if `opt` was one of them (and applied it). */
#define MNT_OPT_DEBUG    0x1001
#define MNT_OPT_LOG_FILE 0x1002
#define MNT_OPT_QUIET    0x1003
#define MNT_COMMON_LONGOPTS \
    {"verbose", no_argument, NULL, 'v'}, \
    {"debug", no_argument, NULL, MNT_OPT_DEBUG}, \
    {"quiet", no_argument, NULL, MNT_OPT_QUIET}, \
    {"log-file", required_argument, NULL, MNT_OPT_LOG_FILE}, \
    {"help", no_argument, NULL, 'h'}
int mnt_common_opt(int opt, const char *arg);
extern int mnt_debug;               /* --debug given */
extern const char *mnt_log_file;    /* --log-file given (BORROWS argv) */
#define MNT_COMMON_HELP \
    "  -v, --verbose          log INFO messages\n" \
    "      --debug            log DEBUG messages (one line per FUSE request in mount)\n" \
    "      --quiet            log only errors\n" \
    "      --log-file FILE    also append log lines to FILE\n" \
    "  -h, --help             show this help\n"
/* Appends log lines to --log-file when one was given (a warning if it cannot be opened). */
void mnt_open_log_file(void);

/* The command line of a sub-command of the shape `kegfs CMD [OPTIONS] OPERAND`:
 * the common options, -h (usage to stdout), at most one boolean option and an
 * optional --threads N (1..64); anything else prints usage to stderr.  Fill the
 * inputs (threads = its default), call mnt_parse_cmdline, read the outputs. */
struct option;
struct mnt_cmdline {
    const char          *name;         /* the command, for messages ("gc") */
    const char          *shortopts;    /* for getopt_long: "vh", "fvh" ... */
    const struct option *longopts;     /* MNT_COMMON_LONGOPTS and the options below */
    void               (*usage)(FILE *out);
    const char          *usage_error;  /* printed when there is not exactly one operand */
    int                  flag_opt;     /* getopt value of the boolean option (0: none) */
    int                  threads_opt;  /* getopt value of --threads (0: none) */
    int                  flag;         /* out: 1 if flag_opt was given */
    uint64_t             threads;      /* in: default; out: --threads */
    const char          *operand;      /* out: BORROWS argv */
};
/* Print "kegfs: CMD: unknown option or missing value: 'WORD'; see 'kegfs CMD --help'"
 * for the option getopt_long just rejected (cmd NULL: the top level).  Returns 2. */
int mnt_usage_error(const char *cmd, int argc, char **argv);
/* Returns -1 when the command is to run, else its exit status (0 after -h, 2 usage error). */
int mnt_parse_cmdline(int argc, char **argv, struct mnt_cmdline *c);

/*--- parsing helpers (mnt_util.c) ---*/
/* "10G", "4M", "512K", "1T", "123" (bytes), optional "i"/"iB"/"B" after the
 * suffix; binary multiples.  Returns 0 or -EINVAL / -ERANGE. */
int mnt_parse_size(const char *s, uint64_t *out);
/* Unsigned decimal.  Returns 0 or -EINVAL / -ERANGE. */
int mnt_parse_u64(const char *s, uint64_t *out);
/* Non-negative decimal seconds ("1", "0.5").  Returns 0 or -EINVAL. */
int mnt_parse_seconds(const char *s, double *out);

/*--- mount points and the state directory (mnt_util.c) ---*/
/* Absolute, symlink-free path of p; a dead FUSE mount (ENOTCONN) at the last
 * component is tolerated.  OWNERSHIP: caller keg_free()s *out.  Returns 0 or -errno. */
int mnt_abspath(const char *p, char **out);
/* p made absolute against the current directory, without resolving links or
 * requiring it to exist (for files a daemon creates after chdir("/")).
 * Returns 0 or -errno; *out: OWNERSHIP keg_free. */
int mnt_abspath_cwd(const char *p, char **out);
/* 1 if abs is a mount point, 0 if not, -errno: see keg_mountinfo_find(). */
static inline int mnt_is_mountpoint(const char *abs, char *fstype, size_t fstype_size)
{
    return keg_mountinfo_find(abs, fstype, fstype_size);
}
/* 16 hex digits naming a mount point in the state directory. */
void mnt_path_hash(const char *abs, char out[17]);
/* The state directory: $KEGFS_RUN_DIR, else /run/kegfs (root) or
 * /tmp/kegfs-<uid>.  Returns a static string. */
const char *mnt_run_dir(void);
/* State file of a mounted mount point: "<run_dir>/mounts/<hash>", mode 0600,
 * lines "pid=", "mountpoint=", "meta_url=" (the META_URL holds secrets),
 * "drain_timeout=" (seconds the mounter may spend uploading staged objects at
 * exit).  mnt_state_write creates the directories.  Returns 0 or -errno. */
int mnt_state_write(const char *abs_mp, pid_t pid, const char *meta_url,
                    unsigned drain_timeout);
/* drain_timeout= of the state file, or 0.  */
unsigned mnt_state_drain_timeout(const char *abs_mp);
/* Removes the state file of abs_mp if owner wrote it (owner 0: whoever did):
 * a mounter that outlived its mount must not remove the file of the next
 * mount at the same path. */
void mnt_state_remove(const char *abs_mp, pid_t owner);
/* Pid on the first line ("pid=N") of a state or stats file, or 0. */
pid_t mnt_state_file_pid(const char *path);
/* Remove the state files of mounters that no longer run (killed, crashed). */
void mnt_state_prune(void);
/* OWNERSHIP: caller keg_free()s *meta_url (may be NULL if not wanted).
 * Returns 0, -ENOENT (no state file), -errno. */
int mnt_state_read(const char *abs_mp, pid_t *pid, char **meta_url);

/* Read a whole small file into a NUL-terminated string, trailing newlines
 * stripped.  OWNERSHIP: caller keg_free()s *out.  Returns 0 or -errno. */
int mnt_read_small_file(const char *path, char **out);

/* Sets the kernel read-ahead of the FUSE mount at abs_mp (/sys/class/bdi/
 * MAJ:MIN/read_ahead_kb of the device mountinfo gives) to bytes, rounded down
 * to KiB.  Sends no FUSE request, so it works before the session loop runs.
 * Returns 0, -ENOENT (nothing mounted at abs_mp) or -errno. */
int mnt_set_read_ahead(const char *abs_mp, uint64_t bytes);

/* Print size as "4 MiB" style into buf. */
const char *mnt_fmt_size(uint64_t v, char *buf, size_t size);

/*--- the progress bar of fsck, gc, warmup, dump and load (mnt_progress.c) ---*/
/* One line on stderr, the same look for every command:
 *   "LABEL [#####...............]  25%  5004/20016  1.2 GiB/4.8 GiB  41 MiB/s  0:31 ETA 1:33"
 * (no bar/percentage while no total is known; bytes only when counted).  Counters are
 * atomics that only grow, and a line shows them as they are when drawn, under one mutex:
 * the figures never go backwards whatever order threads add in.  Redrawn at most every
 * interval_ns (~150 ms) and once at the end of a phase (its final figures and a newline).
 * Nothing at all is written when the stream is not a terminal, with --no-progress or with
 * --quiet: callers print their one-line summary in every case. */
#define MNT_OPT_NO_PROGRESS 0x1004
#define MNT_PROGRESS_LONGOPT {"no-progress", no_argument, NULL, MNT_OPT_NO_PROGRESS}
#define MNT_PROGRESS_HELP \
    "      --no-progress      no progress bar (default: shown when stderr is a terminal)\n"
extern int mnt_no_progress;        /* --no-progress given */
enum { MNT_PROGRESS_AUTO, MNT_PROGRESS_OFF, MNT_PROGRESS_ON };
struct mnt_progress {
    FILE            *out;           /* where the bar goes (stderr) */
    int              bar;           /* draw at all */
    int64_t          interval_ns;   /* least time between two redraws */
    pthread_mutex_t  mu;            /* serializes drawing, phase changes, mnt_progress_print */
    char             label[64];     /* of the current phase */
    int              started;       /* a phase is under way */
    int              drawn;         /* a line is on screen without its newline */
    uint64_t         redraws;       /* lines drawn so far */
    int64_t          t0_ns, start_ns;   /* CLOCK_MONOTONIC of init, of the phase start */
    _Atomic uint64_t items, bytes;      /* done in this phase */
    _Atomic uint64_t total_items, total_bytes;  /* 0: not known */
    _Atomic int64_t  next_ns;       /* no redraw before */
};
/* mode: MNT_PROGRESS_AUTO (a bar when out is a terminal, neither --no-progress nor
 * --quiet), _OFF or _ON.  mnt_progress_destroy when done. */
void mnt_progress_init(struct mnt_progress *p, FILE *out, int mode);
void mnt_progress_destroy(struct mnt_progress *p);
/* A new phase (the previous one is finished first); totals 0 when not known. */
void mnt_progress_start(struct mnt_progress *p, const char *label, uint64_t total_items,
                        uint64_t total_bytes);
void mnt_progress_total(struct mnt_progress *p, uint64_t total_items, uint64_t total_bytes);
/* Thread-safe: count n_items and n_bytes more done; redraws when the interval passed. */
void mnt_progress_add(struct mnt_progress *p, uint64_t n_items, uint64_t n_bytes);
/* Thread-safe: done is at least done_items / done_bytes (smaller values are ignored). */
void mnt_progress_set(struct mnt_progress *p, uint64_t done_items, uint64_t done_bytes);
/* End the phase: its line redrawn with the final figures, then a newline. */
void mnt_progress_finish(struct mnt_progress *p);
/* Print a message to f with the bar line erased first (it comes back with the next count). */
void mnt_progress_print(struct mnt_progress *p, FILE *f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Erase the bar line before writing something else to the terminal (it comes back with
 * the next count). */
void mnt_progress_clear(struct mnt_progress *p);
/* Finish the phase, then print the one-line summary "<fmt...> in S.S s\n" to f (S: the
 * seconds since mnt_progress_init), bar or no bar. */
void mnt_progress_summary(struct mnt_progress *p, FILE *f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Seconds since mnt_progress_init. */
double mnt_progress_elapsed(const struct mnt_progress *p);
/* A keg_progress_fn (arg: a struct mnt_progress): a new `what` starts a new phase. */
void mnt_progress_fn(void *arg, uint64_t done, uint64_t total, const char *what);

/*--- live figures of a running mounter (mnt_stats.c) ---*/
/* The stats file "<run_dir>/mounts/<hash>.stats": key=value lines, one per field. */
struct mnt_live {
    uint64_t pid, time, started;          /* time: unix seconds of this snapshot */
    uint64_t has_cache, has_writeback;
    uint64_t staged_bytes, staged_objects, unsynced_objects, uploading, failing_objects;
    uint64_t uploaded_bytes, uploaded_objects, upload_errors, upload_rate_bps;
    uint64_t waiting_puts, max_staging;
    uint64_t oldest_staged_ms;            /* the oldest staged bytes' wait (0: none, or an
                                           * older mounter) */
    uint64_t cache_bytes, cache_objects, cache_budget, cache_hits, cache_misses;
    uint64_t cache_shared, cache_corrupt, cache_evictions;
    uint64_t open_files, open_dirs;       /* handles the kernel holds (this worker's) */
    uint64_t restarts;                    /* crashed workers the supervisor replaced */
    /* memory (keg_fs_mem_stats; mem_budget 0: a mounter that does not report it) */
    uint64_t mem_budget, mem_write_bytes, mem_read_bytes, mem_read_limit, mem_read_floor;
    uint64_t mem_read_cap;
    uint64_t mem_read_hits, mem_read_misses, mem_read_prefetched, mem_read_evicted;
    uint64_t mem_read_dropped;
    /* seconds the writeback has had work (staged or uploading objects) without a
     * break, as the stats thread saw it; 0: idle */
    uint64_t upload_busy_sec;
    /* the Redis directory name cache (the engine's name_cache_stats; has_names 0: none) */
    uint64_t has_names, names_up, names_cached, names_answered, names_drops;
    /* the remote store (keg_stack_stats; has_store 0: a local store, or an older mounter) */
    uint64_t has_store, store_failing_sec, store_retrying, store_retrying_puts;
    uint64_t store_retries, store_failed;
    char     phase[16];                   /* "serving", "draining" */
};
/* Start the thread that rewrites the stats file every second.  BORROWS fs (until
 * mnt_stats_stop).  Returns 0 or -errno. */
int  mnt_stats_start(const char *abs_mp, struct keg_fs *fs, uint64_t restarts);

/* mnt_metrics.c: the FUSE ops table with counting wrappers around real's handlers
 * (real must outlive the session).  Returns a table owned by mnt_metrics.c. */
struct fuse_lowlevel_ops;
const struct fuse_lowlevel_ops *mnt_metrics_ops(const struct fuse_lowlevel_ops *real);
/* Serve the mounter's metrics at addr for volume (label) of fs.  Returns 0 or -errno. */
int  mnt_metrics_start(const char *addr, const char *volume, struct keg_fs *fs);
/* Stop serving (no-op when not started). */
void mnt_metrics_stop(void);
void mnt_stats_phase(const char *phase);
/* Stop the thread, remove the file. */
void mnt_stats_stop(void);
/* Returns 0, -ENOENT (no running mounter), -errno. */
int  mnt_stats_read(const char *abs_mp, struct mnt_live *l);
/* Removes the stats file of abs_mp if owner (a worker's pid; 0: any) wrote it. */
void mnt_stats_remove(const char *abs_mp, pid_t owner);
/* The drain estimate of l's uploads, into buf: "drains in ~Ns", "drains in more
 * than a day", or "drain time: unknown (...)" while the rate means nothing yet
 * (its ~MNT_RATE_WINDOW_SEC window still holds idle time from before the
 * uploads began, unless MNT_RATE_MIN_BYTES went through it) or is 0; "" when
 * nothing is staged.  Returns buf. */
#define MNT_RATE_WINDOW_SEC 5          /* upload_rate_bps averages ~5 s (keg/stack.h) */
#define MNT_RATE_MIN_BYTES  (1u << 20)
#define MNT_DRAIN_MAX_SEC   86400
const char *mnt_stats_drain(const struct mnt_live *l, char *buf, size_t size);
/* Lines "<indent>key: ..." describing l. */
void mnt_stats_print(FILE *out, const struct mnt_live *l, const char *indent);
/* The FUSE layer counts open handles: +1/-1. */
void mnt_stats_open(int files, int dirs);

/*--- tools shared by format/status/info (cmd_status.c) ---*/
struct keg_meta;
struct keg_format;
/* Open the engine at url with clear messages for an unknown scheme, a
 * malformed URL or an unreachable engine (printed; the URL redacted).  A
 * password in the environment variable META_PASSWORD is used when url has none.
 * OWNERSHIP: caller closes *m with keg_meta_close().  Returns 0 or -errno. */
int  mnt_open_meta(const char *url, struct keg_meta **m);
/* url with the password pw put in (percent-encoded), keeping the user name; for
 * META_PASSWORD and --meta-password-file.  OWNERSHIP: caller wipes and frees *out
 * with keg_free().  Returns 0 or 1 (error printed). */
int  mnt_url_with_password(const char *url, const char *pw, char **out);
/* Print the settings of f, secrets shown as "****". */
void mnt_print_format(FILE *out, const struct keg_format *f);

/*--- nlookup accounting (fuse_inode.c) ---*/
/* Kernel references per inode: +n for each reply that hands the kernel an
 * entry, -n in forget.  A count going negative is a bug: keg_panic().
 * LOCKS: a per-shard mutex inside; callable from any thread. */
void     mnt_inode_ref(uint64_t ino, uint64_t n);
/* Returns the count left. */
uint64_t mnt_inode_unref(uint64_t ino, uint64_t n);
uint64_t mnt_inode_count(uint64_t ino);
/* The kernel's page cache may hold pages of ino from now until the kernel
 * forgets the inode: a readable description of it is being opened (call after
 * the reference of the reply that hands the kernel the inode was counted and
 * before the open is replied to), or a write came through the page cache. */
void     mnt_inode_mark_cached(uint64_t ino);
/* 0 only when the kernel cannot hold a page of ino: since the kernel got the
 * inode, it was neither opened readable nor written through the page cache
 * (only written with direct I/O, e.g. a write-only O_APPEND log).  1 for an inode
 * not counted here, and always in a restarted worker (mnt_inode_tolerate_unknown),
 * which never saw the opens of the one before. */
int      mnt_inode_may_cache(uint64_t ino);
/* Number of inodes with a non-zero count. */
uint64_t mnt_inode_live(void);
/* Drop every count (after the session ended).  Not thread-safe against ref/unref. */
void     mnt_inode_clear(void);
/* In a worker restarted by the supervisor: a forget of more references than
 * counted (the crashed worker's) drops the count to 0 instead of panicking.
 * Call before the session runs. */
void     mnt_inode_tolerate_unknown(int on);

/*--- open handles behind fi->fh (mnt_handle.c) ---*/
struct keg_fh;
struct keg_dh;
/* Call before the session runs.  worker_epoch: 1 for the first worker, +1 per
 * restart (tags the ids); is_restart: ids of earlier workers may come and are
 * reopened on demand.  BORROWS fs for the life of the session. */
void     mnt_handle_setup(struct keg_fs *fs, unsigned worker_epoch, int is_restart,
                          int read_only);
/* File h (struct keg_fh * or, with dir 1, struct keg_dh *) of inode ino; dir
 * MNT_HANDLE_DIRECT: a file handle the kernel does direct I/O on, which the id
 * records for as long as the kernel uses it (mnt_handle_direct, also in a
 * worker that adopts it).  Returns its id (never 0), or 0 when out of memory. */
#define MNT_HANDLE_DIRECT 2
uint64_t mnt_handle_new(int dir, void *h, uint64_t ino);
int      mnt_handle_direct(uint64_t id);
/* The handle of id; in a restarted worker an unknown id of an earlier worker is
 * reopened on ino.  Returns 0, -EBADF (unknown id), -errno of the reopen. */
int      mnt_handle_file(uint64_t id, uint64_t ino, struct keg_fh **fh);
int      mnt_handle_dir(uint64_t id, uint64_t ino, struct keg_dh **dh);
/* As mnt_handle_file, for an operation that changes the file's data (fallocate,
 * copy_file_range into it): -EIO if the handle lost data in a worker crash. */
int      mnt_handle_file_w(uint64_t id, uint64_t ino, struct keg_fh **fh);
/* Remove id; returns its handle (caller releases it), or NULL if unknown.  Its
 * entry in the dirty record (below) goes with it. */
void    *mnt_handle_remove(uint64_t id, int dir);

/* Dirty record (mnt_handle.c, DESIGN): which handles hold data that is not
 * committed, kept where a crash of the worker cannot take it.  Without a
 * supervisor there is none and these calls only look handles up. */
struct mnt_dino;
struct mnt_dtok {                 /* one write or one commit in progress */
    struct mnt_dino *d;           /* the inode's bookkeeping, or NULL */
    uint64_t     started;         /* commit: writes begun before it */
    int          all_in;          /* commit: no write was in flight at its start */
    int          lost;            /* commit: the handle lost data in a crash */
};
/* Around keg_fs_write through id: marks the handle dirty (in the shared record,
 * before the data is buffered) unless it is already.  Returns 0 (then call
 * mnt_handle_write_end(t) after the write), -EIO if the handle lost data in a
 * crash, -EBADF/-errno as mnt_handle_file. */
int      mnt_handle_write_begin(uint64_t id, uint64_t ino, struct keg_fh **fh,
                                struct mnt_dtok *t);
void     mnt_handle_write_end(struct mnt_dtok *t);
/* Around a commit of inode ino (keg_fs_flush/fsync/release; id: the handle it
 * goes through, 0 for none).  commit_end returns rc, or -EIO when the handle
 * lost data in a crash; with rc == 0 and no write of the inode in flight or
 * begun since commit_begin, every dirty handle of the inode becomes clean. */
void     mnt_handle_commit_begin(uint64_t id, uint64_t ino, struct mnt_dtok *t);
int      mnt_handle_commit_end(struct mnt_dtok *t, int rc);
/* The lock owners that set byte-range locks through a file handle, noted in the
 * shared record so that a later worker (crash, upgrade) can release a handle's
 * OFD locks at its last close, where the kernel does not name their owner.
 * lock_note: before a lock request of owner through handle id on ino (a full
 * record only logs a WARN).  lock_flushed: owner closed a descriptor of ino
 * (FLUSH), which drops its byte-range locks there.  lock_release: the handle's
 * last close (RELEASE): forgets its owners, calling fn(arg, ino, owner) for
 * each first when the handle is an earlier worker's (core does not know its
 * owners then). */
typedef void mnt_owner_fn(void *arg, uint64_t ino, uint64_t owner);
void     mnt_handle_lock_note(uint64_t id, uint64_t ino, uint64_t owner);
void     mnt_handle_lock_flushed(uint64_t ino, uint64_t owner);
void     mnt_handle_lock_release(uint64_t id, mnt_owner_fn *fn, void *arg);
/* Unlocks that failed at a close and that core tries again (keg_fs_unlock_fn):
 * mnt_handle_unlock_hook keeps them in the shared record (256 of them; more
 * log a WARN), and a later worker queues the record's with
 * mnt_handle_unlocks_adopt -- or forgets them if it did not take the previous
 * worker's session over (same_session 0).  Returns how many it queued. */
void     mnt_handle_unlock_hook(void *arg, uint64_t ino, uint64_t owner, int is_flock, int kept);
unsigned mnt_handle_unlocks_adopt(struct keg_fs *fs, int same_session);
/* A worker handing over, with no request running: commits every file with dirty
 * handles (several at once) and makes those handles clean; a file whose commit fails keeps its
 * handles in the shared record, so that the next worker refuses them (EIO).
 * Returns the number of files that failed. */
unsigned mnt_handle_commit_all(void);

/* The supervisor's side of the dirty record.  mnt_dirty_create maps it shared
 * (inherited by every forked worker) from a memory file, whose descriptor
 * (mnt_dirty_fd, close-on-exec; -1 when the table had to be anonymous) an
 * upgrade passes to the new binary, which maps the same table again with
 * mnt_dirty_attach (TAKES fd; NULL, with a WARN, if it has another layout).
 * NULL if that fails.  A worker calls mnt_handle_use_dirty(t) -- t may be
 * NULL: then every adopted file handle counts as lost -- before
 * mnt_handle_setup.  After a worker died or handed over, mnt_dirty_report logs
 * (ERROR) the handles whose data it lost ("worker PID <how> uncommitted data
 * ..."); returns their number. */
struct mnt_dirty_tab;
struct mnt_dirty_tab *mnt_dirty_create(void);
struct mnt_dirty_tab *mnt_dirty_attach(int fd);
int      mnt_dirty_fd(const struct mnt_dirty_tab *t);
void     mnt_dirty_free(struct mnt_dirty_tab *t);
void     mnt_handle_use_dirty(struct mnt_dirty_tab *t);
unsigned mnt_dirty_report(const struct mnt_dirty_tab *t, int pid, const char *how);
/* Calls fn for every handle in the record (id, inode).  For the supervisor,
 * between workers. */
typedef void mnt_dirty_fn(void *arg, uint64_t id, uint64_t ino);
void     mnt_dirty_foreach(const struct mnt_dirty_tab *t, mnt_dirty_fn *fn, void *arg);
/* The metadata session of the mount's workers, kept in the table so that the
 * next worker takes it over (0: none yet, or no table).  The worker sets it
 * (mnt_handle_set_session) once it has one; the supervisor reads it. */
uint64_t mnt_dirty_session(const struct mnt_dirty_tab *t);
void     mnt_dirty_set_session(struct mnt_dirty_tab *t, uint64_t sid);
void     mnt_handle_set_session(uint64_t sid);

/*--- the mount supervisor (mnt_super.c) ---*/
/* What a worker gets from its supervisor. */
struct mnt_worker {
    int         fuse_fd;     /* the mounted /dev/fuse descriptor */
    const void *init;        /* the kernel's FUSE_INIT request, as read from it */
    size_t      init_len;
    unsigned    epoch;       /* 1 for the first worker, +1 per restart */
    int         handover;    /* 1: the previous worker handed over (upgrade), not crashed */
    uint64_t    session;     /* the previous worker's metadata session, to take over (0: none) */
};
/* Runs the FUSE session on w (in the forked worker).  notify_fd: the pipe to a
 * waiting `mount -d` parent (first worker only), or -1.  Returns the exit status. */
typedef int mnt_worker_fn(void *arg, const struct mnt_worker *w, int notify_fd);
struct mnt_super_conf {
    const char    *abs_mp;
    const char    *fuse_opts;       /* comma-separated FUSE mount options (ro, allow_other, ...) */
    const char    *meta_url;        /* for the state file */
    const char    *volname;         /* for an upgrade's handover record */
    unsigned       drain_timeout;   /* for the state file */
    mnt_worker_fn *worker;
    void          *arg;
};
/* Open /dev/fuse, mount, fork workers until one exits (see mnt_super.c).  Errors
 * before the first worker are printed and sent to notify_fd ("ERR ...").
 * Returns the exit status (the last worker's). */
int mnt_super_run(const struct mnt_super_conf *sc, int notify_fd);

/*--- generic mount options and the mount(8) helper (mnt_mopts.c) ---*/
#define MNT_MOPT_NONE     0   /* not a generic option (a libfuse or kegfs one) */
#define MNT_MOPT_FLAG     1   /* a kernel mount flag: ro, nodev, relatime, ... */
#define MNT_MOPT_IGNORED  2   /* means nothing to a FUSE mount: defaults, _netdev, x-* ... */
#define MNT_MOPT_REMOUNT  3
/* Kind of the single option opt.  *libfuse (may be NULL) is set to 1 for a
 * kernel flag that libfuse 3.14's own option parser accepts. */
int mnt_mopt_kind(const char *opt, int *libfuse);
/* If opt is a kernel flag, apply it to the MS_* bits in *flags and return 1; else 0. */
int mnt_mopt_apply(const char *opt, unsigned long *flags);
/* Change the flags of the live kegfs mount abs_mp by the kernel flags in the
 * comma-separated opts (the others are ignored), starting from its current
 * flags.  Returns 0 or -errno (message printed). */
int mnt_mopt_remount(const char *abs_mp, const char *opts);
/* main() of `mount.kegfs` / `mount.fuse.kegfs` (argv[0] picks it).  Returns the
 * exit status mount(8) expects (0, 1 usage, 32 mount failure). */
int mnt_mount_helper(int argc, char **argv);
/*--- in-place upgrade (cmd_upgrade.c) ---*/
/* A worker's exit status meaning "stopped for a handover": every request it
 * started is answered, open files are flushed and committed, the volume is
 * closed; the supervisor may exec another binary on the same descriptor. */
#define MNT_EXIT_UPGRADE 99
/* A worker's exit status meaning "a later worker (after a crash or a handover)
 * could not open the volume" (the engine or the store unreachable): the mount is
 * still live, so the supervisor starts another one after a pause. */
#define MNT_EXIT_REOPEN  98
struct fuse_session;
/* main(): keep a copy of the command line for the re-exec. */
void mnt_upgrade_save_argv(int argc, char **argv);
/* Worker: prearm right after fork (SIGUSR2 = hand over), arm once the session
 * has processed FUSE_INIT (SIGUSR2 then ends the session loop), disarm after it. */
void mnt_upgrade_worker_prearm(void);
struct keg_fs;
void mnt_upgrade_worker_arm(struct fuse_session *se, struct keg_fs *fs);
void mnt_upgrade_worker_disarm(void);
int  mnt_upgrade_worker_requested(void);
/* Supervisor: SIGUSR2 = an upgrade request file is waiting. */
void mnt_upgrade_super_signals(void);
int  mnt_upgrade_super_pending(void);
/* Read the request, check the binary runs, signal the worker.  1 if the worker
 * was asked to hand over, 0 if not (the refusal is written as the result). */
int  mnt_upgrade_super_begin(const char *abs_mp, pid_t worker);
/* The worker handed over: exec the new binary keeping fuse_fd.  Returns only
 * when that failed (the result says so); the caller starts a worker again. */
void mnt_upgrade_super_exec(const char *abs_mp, const char *volname, int fuse_fd,
                            const void *init, size_t init_len, unsigned epoch,
                            uint64_t session, int record_fd);
/* In a process started by mnt_upgrade_super_exec: 1 with the mount point and
 * volume name of the handover (static strings), 0 in any other process, -errno
 * for a broken record. */
int  mnt_upgrade_resuming(const char **abs_mp, const char **volname);
/* 1 with the descriptor, the INIT bytes (TAKES: caller keg_free()s), the last
 * worker's epoch and session and the dirty record's memfd (-1: none; TAKES),
 * 0 if this process is not resuming, -errno. */
int  mnt_upgrade_resume(int *fuse_fd, void **init, size_t *init_len, unsigned *epoch,
                        uint64_t *session, int *record_fd);
/* The resumed supervisor started its first worker: write the "ok" result. */
void mnt_upgrade_super_started(const char *abs_mp, pid_t worker);
/* Ask the supervisor of abs_mp to upgrade to binary (NULL: its own) and wait up
 * to timeout_ms until a worker of the new binary serves.  msg gets a one-line
 * report or the reason.  Returns 0 or -errno. */
int  mnt_upgrade_request(const char *abs_mp, const char *binary, unsigned timeout_ms,
                         char *msg, size_t msglen, pid_t *new_worker);

/*--- FUSE side (fuse_ops.c) ---*/
/* mnt_inval.c: the kernel's page cache invalidated for core/fs (its
 * invalidation hook, sent by one thread) and for O_DIRECT writes (at once).
 * start: also installs the hook on fs; stop: before the session and fs go. */
struct fuse_session;
int  mnt_inval_start(struct fuse_session *se, struct keg_fs *fs);
void mnt_inval_stop(void);
/* Drop the kernel's cached pages of ino in [off, off+len) and its attributes,
 * now.  Only where the calling request holds no page lock of ino. */
void mnt_inval_range(uint64_t ino, uint64_t off, uint64_t len);

struct mnt_state {
    struct keg_fs *fs;
    double attr_timeout;        /* seconds the kernel keeps attributes */
    double entry_timeout;       /* seconds the kernel keeps a file name (and negatives) */
    double dir_entry_timeout;   /* seconds the kernel keeps a directory name */
    int    read_only;
    int    allow_other;         /* informational */
    uint32_t generation;        /* of every inode: mnt_generation() of the volume */
    int    no_acl;              /* -o noacl: do not ask for FUSE's POSIX ACL mode */
    int    resend;              /* the kernel resends unanswered requests to the next
                                 * worker (FUSE_NOTIFY_RESEND, protocol 7.40) */
};
/* The inode generation of volume uuid (never 0): FUSE file handles (nodeid,
 * generation) stay valid across remounts of one volume, and a handle of another
 * volume's file fails with ESTALE.  Inode numbers are never reused in a volume. */
uint32_t mnt_generation(const char *uuid);
struct fuse_lowlevel_ops;
const struct fuse_lowlevel_ops *mnt_fuse_ops(void);

#endif
