/* csi_i.h -- private declarations shared by the files of kegfs-csi.
 *
 * DESIGN
 * server.c owns every gRPC-core type; the handlers in identity.c,
 * controller.c and node.c are plain C over the protobuf-c messages, so the unit
 * tests call them directly.  A handler fills a caller-initialised response and
 * a struct csi_status (gRPC code + message); memory it hangs off the response
 * comes from the call's arena (csi_alloc/csi_strdup on the status) and is freed
 * with it after the reply is packed.  Every handler runs in the order
 * validate -> per-volume try-lock (ABORTED if busy) -> idempotency check ->
 * act -> persist state (STYLE.md §10).
 */
#ifndef KEG_CSI_I_H
#define KEG_CSI_I_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "csi.pb-c.h"
#include "keg/keg.h"

#define CSI_DRIVER_NAME   "csi.kegfs.io"
#define CSI_DEFAULT_CAPACITY (1ULL << 30)      /* CreateVolume without a capacity range */
#define CSI_STATE_DIR_DEFAULT "/var/lib/kegfs-csi"
#define CSI_KUBELET_DIR_DEFAULT "/var/lib/kubelet"
#define CSI_CACHE_ROOT_DEFAULT "/var/lib/kegfs/cache"
/* the type /proc/self/mountinfo shows for a kegfs mount (subtype=kegfs) */
#define CSI_FUSE_FSTYPE "fuse.kegfs"
#define CSI_MOUNT_TIMEOUT_MS 30000              /* NodePublish: wait for the FUSE mount */
/* an RPC waits this long for a volume the watchdog is re-mounting (one mount
 * timeout and the stop before it) before it answers ABORTED */
#define CSI_KEY_WAIT_MS (CSI_MOUNT_TIMEOUT_MS + 10000)

/* gRPC status codes (same numbers as grpc_status_code; handlers do not see gRPC). */
enum csi_code {
    CSI_OK = 0,
    CSI_CANCELLED = 1,
    CSI_UNKNOWN = 2,
    CSI_INVALID_ARGUMENT = 3,
    CSI_DEADLINE_EXCEEDED = 4,
    CSI_NOT_FOUND = 5,
    CSI_ALREADY_EXISTS = 6,
    CSI_PERMISSION_DENIED = 7,
    CSI_RESOURCE_EXHAUSTED = 8,
    CSI_FAILED_PRECONDITION = 9,
    CSI_ABORTED = 10,
    CSI_OUT_OF_RANGE = 11,
    CSI_UNIMPLEMENTED = 12,
    CSI_INTERNAL = 13,
    CSI_UNAVAILABLE = 14,
};

/*----------------------------------------------------------------------------
 * Status and the per-call arena
 *--------------------------------------------------------------------------*/

struct csi_arena_blk;

struct csi_status {
    int   code;                       /* enum csi_code */
    char  msg[512];                   /* never holds a secret */
    struct csi_arena_blk *arena;      /* response memory, freed by csi_status_clear() */
};

void csi_status_init(struct csi_status *st);
/* Frees the arena.  INVALIDATES every csi_alloc()ed pointer of st. */
void csi_status_clear(struct csi_status *st);
/* Set code and message; returns -1 when code != OK (for `return csi_fail(...)`). */
int  csi_fail(struct csi_status *st, int code, const char *fmt, ...) KEG_PRINTF(3, 4);
/* The code for a -errno from the core (STYLE.md §4.6): -EINVAL -> INVALID_ARGUMENT,
 * -ENOENT -> NOT_FOUND, -EEXIST -> ALREADY_EXISTS, -EBUSY -> ABORTED,
 * -ECONNREFUSED/-EIO/-ETIMEDOUT/-EHOSTUNREACH/-EAGAIN -> UNAVAILABLE, else INTERNAL. */
int  csi_code_from_errno(int rc);
const char *csi_code_name(int code);
/* Zeroed memory that lives until csi_status_clear(st).  NULL on ENOMEM. */
void *csi_alloc(struct csi_status *st, size_t n);
char *csi_strdup(struct csi_status *st, const char *s);

/*----------------------------------------------------------------------------
 * Map helpers (protobuf-c maps are arrays of entry structs)
 *--------------------------------------------------------------------------*/

/* All map entry types of csi.proto have this layout. */
typedef Csi__V1__CreateVolumeRequest__SecretsEntry csi_map_entry;

/* Value of key in a map, or NULL.  BORROWS the map. */
const char *csi_map_get(csi_map_entry *const *map, size_t n, const char *key);
#define CSI_MAP_GET(msg, field, key) \
    csi_map_get((csi_map_entry *const *)(msg)->field, (msg)->n_##field, (key))
/* Append key=value to a response map (arena memory).  Returns 0 or -ENOMEM. */
int csi_map_put(struct csi_status *st, csi_map_entry ***map, size_t *n,
                const ProtobufCMessageDescriptor *entry_desc, const char *key, const char *val);

/*----------------------------------------------------------------------------
 * Request validation shared by controller and node
 *--------------------------------------------------------------------------*/

/* 0 if id is a usable volume id ([a-z0-9][a-z0-9-.]{0,127}, no "/" and no "..").
 * Otherwise sets st (INVALID_ARGUMENT naming `what`) and returns -1. */
int csi_check_volume_id(const char *id, const char *what, struct csi_status *st);
/* 0 if cap is a supported capability: mount access type and a known access
 * mode.  Block -> INVALID_ARGUMENT ("block access type is not supported"). */
int csi_check_capability(const Csi__V1__VolumeCapability *cap, struct csi_status *st);
/* 0 if path is absolute, has no ".." component and is shorter than PATH_MAX. */
int csi_check_path(const char *path, const char *what, struct csi_status *st);

/* confine.c.  Is path (what names it in messages) root or below it, with no
 * symbolic link below root?  With create, missing directories are made (mode)
 * one at a time without following links.  A NULL or empty root is "/".
 * Returns 0, or -1 with st set:
 * INVALID_ARGUMENT for a path outside root or through a link. */
int csi_confine_dir(const char *root, const char *path, int create, mode_t mode,
                    const char *what, struct csi_status *st);
/* Is mount flag idx ("name" or "name=value") one a publish may pass to the
 * mounter?  A cache-dir= value is confined to ctx->cache_root (and created).
 * Returns 0, or -1 with st set to INVALID_ARGUMENT naming what is allowed. */
struct csi_ctx;
int csi_confine_mount_flag(struct csi_ctx *ctx, const char *flag, size_t idx,
                           struct csi_status *st);

/*----------------------------------------------------------------------------
 * Driver context
 *--------------------------------------------------------------------------*/

#define CSI_MODE_CONTROLLER 0x1
#define CSI_MODE_NODE       0x2
#define CSI_MODE_ALL        (CSI_MODE_CONTROLLER | CSI_MODE_NODE)

struct keg_format;
struct keg_obj;
struct csi_state;
struct csi_mount_mgr;

/* Opens the object store of a formatted volume (default: keg_stack_open with
 * the Secret's access-key/secret-key overriding the stored ones).  Tests
 * install a fake.  OWNERSHIP: caller closes *out with keg_obj_close(). */
typedef int csi_open_store_fn(const struct keg_format *f, const char *access_key,
                              const char *secret_key, struct keg_obj **out);

/* One held key of the try-lock table. */
struct csi_key {
    char *key;                        /* a volume id (or name) */
    int   background;                 /* held by the watchdog, not by an RPC */
};

struct csi_ctx {
    const char *driver_name;          /* CSI_DRIVER_NAME */
    const char *node_id;
    const char *state_dir;
    const char *target_root;          /* node: targets must lie below it, <kubelet-dir>/pods
                                       * (NULL: "/") */
    const char *cache_root;           /* node: cache-dir= flags must lie below it (NULL: refused) */
    unsigned    mode;                 /* CSI_MODE_* */
    csi_open_store_fn *open_store;    /* controller: object store of a volume */
    struct csi_state *state;          /* node: recorded publishes (NULL in controller mode) */
    struct csi_mount_mgr *mm;         /* node: starts and stops mounters */
    int         ready;                /* Probe: 1 once recovery has run */
    int         mounter_metrics;      /* node: mounters serve /metrics on unix sockets
                                       * that --metrics aggregates (csi/scrape.c) */

    pthread_mutex_t lock;             /* protects busy[], nbusy, cap_busy, nwaiting */
    pthread_cond_t  key_cond;         /* with lock: broadcast when a key is released */
    struct csi_key *busy;             /* keys held by in-flight calls and the watchdog */
    size_t      nbusy, cap_busy;      /* protected by lock */
    unsigned    nwaiting;             /* RPCs waiting for a key the watchdog holds */
    unsigned    key_wait_ms;          /* how long they wait (default CSI_KEY_WAIT_MS) */

    pthread_t   watchdog;
    int         watchdog_started;
    volatile int stopping;            /* set once at shutdown */
    pthread_mutex_t wd_lock;          /* with wd_cond: wakes the watchdog early */
    pthread_cond_t  wd_cond;
    unsigned    watchdog_ms;          /* interval (default 2000) */
};

/* Initialise / tear down the shared parts (lock table).  Returns 0 or -errno. */
int  csi_ctx_init(struct csi_ctx *ctx);
void csi_ctx_destroy(struct csi_ctx *ctx);

/* Per-key try-lock of an RPC.  Another RPC holding key means the CO has two
 * calls in flight for one volume: -EBUSY at once (the handler answers ABORTED).
 * The watchdog holding key is no call of the CO: wait up to ctx->key_wait_ms
 * for it, then -EBUSY.  Returns 0, -EBUSY or -ENOMEM.
 * LOCKS: takes ctx->lock; may sleep on ctx->key_cond. */
int  csi_key_trylock(struct csi_ctx *ctx, const char *key);
/* The watchdog's try-lock: 0, or -EBUSY if an RPC holds key or waits for a key
 * the watchdog holds (RPCs go first); never waits.  -ENOMEM.
 * LOCKS: takes ctx->lock briefly. */
int  csi_key_trylock_background(struct csi_ctx *ctx, const char *key);
/* Release key (held by either kind) and wake the RPCs waiting for it. */
void csi_key_unlock(struct csi_ctx *ctx, const char *key);

/*----------------------------------------------------------------------------
 * Handlers (identity.c, controller.c, node.c).  Each returns 0 (st->code OK)
 * or -1 with st set.  Responses are initialised by the caller.
 *--------------------------------------------------------------------------*/

int csi_identity_get_plugin_info(struct csi_ctx *ctx, const Csi__V1__GetPluginInfoRequest *req,
                                 Csi__V1__GetPluginInfoResponse *out, struct csi_status *st);
int csi_identity_get_plugin_capabilities(struct csi_ctx *ctx,
                                         const Csi__V1__GetPluginCapabilitiesRequest *req,
                                         Csi__V1__GetPluginCapabilitiesResponse *out,
                                         struct csi_status *st);
int csi_identity_probe(struct csi_ctx *ctx, const Csi__V1__ProbeRequest *req,
                       Csi__V1__ProbeResponse *out, struct csi_status *st);

int csi_controller_create_volume(struct csi_ctx *ctx, const Csi__V1__CreateVolumeRequest *req,
                                 Csi__V1__CreateVolumeResponse *out, struct csi_status *st);
int csi_controller_delete_volume(struct csi_ctx *ctx, const Csi__V1__DeleteVolumeRequest *req,
                                 Csi__V1__DeleteVolumeResponse *out, struct csi_status *st);
int csi_controller_validate_volume_capabilities(
    struct csi_ctx *ctx, const Csi__V1__ValidateVolumeCapabilitiesRequest *req,
    Csi__V1__ValidateVolumeCapabilitiesResponse *out, struct csi_status *st);
int csi_controller_get_capabilities(struct csi_ctx *ctx,
                                    const Csi__V1__ControllerGetCapabilitiesRequest *req,
                                    Csi__V1__ControllerGetCapabilitiesResponse *out,
                                    struct csi_status *st);
int csi_controller_expand_volume(struct csi_ctx *ctx,
                                 const Csi__V1__ControllerExpandVolumeRequest *req,
                                 Csi__V1__ControllerExpandVolumeResponse *out,
                                 struct csi_status *st);

int csi_node_publish_volume(struct csi_ctx *ctx, const Csi__V1__NodePublishVolumeRequest *req,
                            Csi__V1__NodePublishVolumeResponse *out, struct csi_status *st);
int csi_node_unpublish_volume(struct csi_ctx *ctx, const Csi__V1__NodeUnpublishVolumeRequest *req,
                              Csi__V1__NodeUnpublishVolumeResponse *out, struct csi_status *st);
int csi_node_get_volume_stats(struct csi_ctx *ctx, const Csi__V1__NodeGetVolumeStatsRequest *req,
                              Csi__V1__NodeGetVolumeStatsResponse *out, struct csi_status *st);
int csi_node_get_capabilities(struct csi_ctx *ctx, const Csi__V1__NodeGetCapabilitiesRequest *req,
                              Csi__V1__NodeGetCapabilitiesResponse *out, struct csi_status *st);
int csi_node_get_info(struct csi_ctx *ctx, const Csi__V1__NodeGetInfoRequest *req,
                      Csi__V1__NodeGetInfoResponse *out, struct csi_status *st);

/*----------------------------------------------------------------------------
 * controller.c helpers (exported for the tests)
 *--------------------------------------------------------------------------*/

/* The volume id CreateVolume gives a request name: the name itself when it is
 * a valid volume name ([a-z0-9][a-z0-9-]{2,62}), else "kegfs-" + 16 hex
 * digits of a hash of the name.  buf must hold 64 bytes. */
void csi_volume_id_from_name(const char *name, char buf[64]);
/* The META_URL of volume id given the base URL of the Secret: redis (and other
 * engines): the query parameter ns=<id> added or replaced; sqlite3 with a path
 * ending in '/': "<dir>/<id>.db".  -EINVAL (with *err) for a sqlite3 URL that
 * names a file.  OWNERSHIP: caller keg_free()s *out. */
int csi_volume_meta_url(const char *base, const char *id, char **out, const char **err);

/*----------------------------------------------------------------------------
 * node.c: recovery and the watchdog
 *--------------------------------------------------------------------------*/

/* Re-establish every recorded publish whose mount is dead (stale FUSE mount
 * detached, fresh mounter on the same target).  Returns the number of mounts
 * restarted, or -errno. */
int  csi_node_recover(struct csi_ctx *ctx);
/* Start / stop the watchdog thread that runs csi_node_recover every
 * ctx->watchdog_ms.  Returns 0 or -errno. */
int  csi_node_watchdog_start(struct csi_ctx *ctx);
void csi_node_watchdog_stop(struct csi_ctx *ctx);

/*----------------------------------------------------------------------------
 * server.c
 *--------------------------------------------------------------------------*/

/* Log one line for a finished RPC: method, volume_id, target, duration,
 * status.  Only whitelisted scalar fields of req are printed: secrets maps,
 * volume_context and mount flags never are. */
void csi_log_request(const char *method, const ProtobufCMessage *req, int64_t dur_us,
                     const struct csi_status *st);
/* Format the same line into buf (for tests).  Returns buf. */
char *csi_format_request(char *buf, size_t len, const char *method, const ProtobufCMessage *req,
                         int64_t dur_us, const struct csi_status *st);

/* Serve on endpoint ("unix:///csi/csi.sock" or "unix:/path") until SIGTERM or
 * SIGINT.  nthreads workers.  Returns 0 or -errno. */
int csi_serve(struct csi_ctx *ctx, const char *endpoint, unsigned nthreads);

/* metrics.c: counters for `--metrics`.  csi_metrics_methods names the method
 * indexes csi_metrics_rpc() gets (server.c's table); the others are thread-safe. */
#define CSI_METRICS_MAX_METHODS 32
enum csi_restart_cause { CSI_RESTART_DEAD, CSI_RESTART_MISSING, CSI_RESTART_NCAUSES };
void csi_metrics_methods(const char *const *names, size_t n);
void csi_metrics_rpc(int method, int code, int64_t dur_us);
void csi_metrics_restart(enum csi_restart_cause cause);
void csi_metrics_round(void);
/* What the node plugin last saw of a publish record (kegfs_csi_volumes{state}):
 *   LIVE        published, and the last check found the mount serving
 *   RECOVERING  found dead or missing, a mounter is being started again (also a
 *               record not checked since this plugin started)
 *   FAILED      the last attempt to start its mounter again failed (retried every
 *               watchdog round) */
enum csi_vol_state { CSI_VOL_LIVE, CSI_VOL_RECOVERING, CSI_VOL_FAILED, CSI_VOL_NSTATES };
/* Note the state of the record of target; forget it once the record is gone.
 * Thread-safe.  BORROWS target. */
void csi_metrics_volume(const char *target, enum csi_vol_state st);
void csi_metrics_volume_forget(const char *target);
/* Serve the metrics at addr ("HOST:PORT").  Returns 0 or -errno. */
int  csi_metrics_start(struct csi_ctx *ctx, const char *addr);
void csi_metrics_stop(void);

/* The protobuf-c allocator over keg_malloc/keg_free. */
extern ProtobufCAllocator csi_pb_allocator;

#endif
