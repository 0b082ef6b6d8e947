/* common.c -- status codes, per-call arena, map and validation helpers, and the
 * per-key try-lock table shared by the CSI handlers.
 *
 * DESIGN
 * A response built by a handler points into memory that must outlive the
 * handler but not the call; it comes from an arena hung on the call's
 * struct csi_status and is freed in one go after the reply is packed.  The
 * try-lock table is a small array of keys (volume ids) held by in-flight
 * calls; a second call for a held key fails fast with ABORTED, as the CSI
 * specification asks for operations already in progress.  The node watchdog
 * takes the same keys while it checks and re-establishes mounts; that is not a
 * call of the CO, so an RPC that finds a key held by the watchdog waits for it
 * (bounded by one re-mount) instead of failing, and the watchdog skips a key
 * an RPC holds or waits for.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "csi_i.h"
#include "keg/mem.h"

/*----------------------------------------------------------------------------
 * Status and arena
 *--------------------------------------------------------------------------*/

struct csi_arena_blk {
    struct csi_arena_blk *next;
    max_align_t data[];               /* the allocation follows */
};

void csi_status_init(struct csi_status *st)
{
    st->code = CSI_OK;
    st->msg[0] = '\0';
    st->arena = NULL;
}

void csi_status_clear(struct csi_status *st)
{
    struct csi_arena_blk *b = st->arena;
    while (b) {
        struct csi_arena_blk *next = b->next;
        keg_free(b);
        b = next;
    }
    st->arena = NULL;
}

void *csi_alloc(struct csi_status *st, size_t n)
{
    struct csi_arena_blk *b = keg_calloc(1, sizeof(*b) + n);
    if (!b)
        return NULL;
    b->next = st->arena;
    st->arena = b;
    return b->data;
}

char *csi_strdup(struct csi_status *st, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = csi_alloc(st, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

int csi_fail(struct csi_status *st, int code, const char *fmt, ...)
{
    va_list ap;
    st->code = code;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof(st->msg), fmt, ap);
    va_end(ap);
    return code == CSI_OK ? 0 : -1;
}

int csi_code_from_errno(int rc)
{
    switch (rc) {
    case 0:
        return CSI_OK;
    case -EINVAL:
        return CSI_INVALID_ARGUMENT;
    case -ENOENT:
        return CSI_NOT_FOUND;
    case -EEXIST:
        return CSI_ALREADY_EXISTS;
    case -EBUSY:
        return CSI_ABORTED;
    case -EACCES:
    case -EPERM:
        return CSI_PERMISSION_DENIED;
    case -ENOSPC:
        return CSI_RESOURCE_EXHAUSTED;
    case -ECONNREFUSED:
    case -ECONNRESET:
    case -EHOSTUNREACH:
    case -ENETUNREACH:
    case -ETIMEDOUT:
    case -EAGAIN:
    case -EIO:
        return CSI_UNAVAILABLE;
    default:
        return CSI_INTERNAL;
    }
}

const char *csi_code_name(int code)
{
    static const char *const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
    };
    if (code < 0 || (size_t)code >= sizeof(names) / sizeof(names[0]))
        return "UNKNOWN";
    return names[code];
}

/*----------------------------------------------------------------------------
 * Maps
 *--------------------------------------------------------------------------*/

const char *csi_map_get(csi_map_entry *const *map, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (map[i] && map[i]->key && strcmp(map[i]->key, key) == 0)
            return map[i]->value;
    return NULL;
}

int csi_map_put(struct csi_status *st, csi_map_entry ***map, size_t *n,
                const ProtobufCMessageDescriptor *entry_desc, const char *key, const char *val)
{
    csi_map_entry **arr = csi_alloc(st, (*n + 1) * sizeof(*arr));
    csi_map_entry *e = csi_alloc(st, entry_desc->sizeof_message);
    if (!arr || !e)
        return -ENOMEM;
    entry_desc->message_init(&e->base);
    e->key = csi_strdup(st, key);
    e->value = csi_strdup(st, val);
    if (!e->key || !e->value)
        return -ENOMEM;
    if (*n)
        memcpy(arr, *map, *n * sizeof(*arr));
    arr[(*n)++] = e;
    *map = arr;
    return 0;
}

/*----------------------------------------------------------------------------
 * Validation
 *--------------------------------------------------------------------------*/

int csi_check_volume_id(const char *id, const char *what, struct csi_status *st)
{
    if (!id || !*id)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s is required", what);
    size_t n = strlen(id);
    if (n > 128)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s is longer than 128 bytes", what);
    if (strstr(id, "..") || strchr(id, '/'))
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s must not contain '/' or '..'", what);
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 (i > 0 && (c == '-' || c == '.' || c == '_'));
        if (!ok)
            return csi_fail(st, CSI_INVALID_ARGUMENT,
                            "%s has a character other than [a-z0-9-._] (or does not start "
                            "with [a-z0-9])", what);
    }
    return 0;
}

int csi_check_capability(const Csi__V1__VolumeCapability *cap, struct csi_status *st)
{
    if (!cap)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "volume capability is required");
    if (!cap->access_mode)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "volume capability has no access_mode");
    switch (cap->access_mode->mode) {
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER:
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY:
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY:
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_SINGLE_WRITER:
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER:
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER:
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER:
        break;
    default:
        return csi_fail(st, CSI_INVALID_ARGUMENT, "unknown access mode %d",
                        (int)cap->access_mode->mode);
    }
    switch (cap->access_type_case) {
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT:
        break;
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK:
        return csi_fail(st, CSI_INVALID_ARGUMENT,
                        "block access type is not supported (KegFS volumes are file systems: "
                        "use volumeMode: Filesystem)");
    default:
        return csi_fail(st, CSI_INVALID_ARGUMENT,
                        "volume capability has no access type (mount or block)");
    }
    const char *fs = cap->mount ? cap->mount->fs_type : NULL;
    if (fs && *fs && strcmp(fs, "kegfs") != 0 && strcmp(fs, "fuse.kegfs") != 0)
        return csi_fail(st, CSI_INVALID_ARGUMENT,
                        "fs_type '%.64s' is not supported (leave it empty or use 'kegfs')", fs);
    return 0;
}

int csi_check_path(const char *path, const char *what, struct csi_status *st)
{
    if (!path || !*path)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s is required", what);
    if (path[0] != '/')
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s must be an absolute path", what);
    if (strlen(path) >= PATH_MAX)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s is too long", what);
    for (const char *p = path; (p = strstr(p, "..")) != NULL; p += 2) {
        int start = p == path || p[-1] == '/';
        int end = p[2] == '\0' || p[2] == '/';
        if (start && end)
            return csi_fail(st, CSI_INVALID_ARGUMENT, "%s must not contain '..'", what);
    }
    return 0;
}

/*----------------------------------------------------------------------------
 * Context and the try-lock table
 *--------------------------------------------------------------------------*/

int csi_ctx_init(struct csi_ctx *ctx)
{
    pthread_condattr_t ca;
    if (!ctx->driver_name)
        ctx->driver_name = CSI_DRIVER_NAME;
    if (!ctx->watchdog_ms)
        ctx->watchdog_ms = 2000;
    if (!ctx->key_wait_ms)
        ctx->key_wait_ms = CSI_KEY_WAIT_MS;
    ctx->busy = NULL;
    ctx->nbusy = ctx->cap_busy = 0;
    ctx->nwaiting = 0;
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ctx->key_cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&ctx->wd_lock, NULL);
    pthread_cond_init(&ctx->wd_cond, NULL);
    return 0;
}

void csi_ctx_destroy(struct csi_ctx *ctx)
{
    for (size_t i = 0; i < ctx->nbusy; i++)
        keg_free(ctx->busy[i].key);
    keg_free(ctx->busy);
    ctx->busy = NULL;
    ctx->nbusy = ctx->cap_busy = 0;
    pthread_mutex_destroy(&ctx->lock);
    pthread_cond_destroy(&ctx->key_cond);
    pthread_mutex_destroy(&ctx->wd_lock);
    pthread_cond_destroy(&ctx->wd_cond);
}

/* The entry holding key, or NULL.  LOCKS: caller holds ctx->lock. */
static struct csi_key *key_find(struct csi_ctx *ctx, const char *key)
{
    for (size_t i = 0; i < ctx->nbusy; i++)
        if (strcmp(ctx->busy[i].key, key) == 0)
            return &ctx->busy[i];
    return NULL;
}

/* Add key to the table.  Returns 0 or -ENOMEM.  LOCKS: caller holds ctx->lock. */
static int key_add(struct csi_ctx *ctx, const char *key, int background)
{
    if (ctx->nbusy == ctx->cap_busy) {
        size_t ncap = ctx->cap_busy ? ctx->cap_busy * 2 : 16;
        struct csi_key *nb = keg_realloc(ctx->busy, ncap * sizeof(*nb));
        if (!nb)
            return -ENOMEM;
        ctx->busy = nb;
        ctx->cap_busy = ncap;
    }
    char *k = keg_strdup(key);
    if (!k)
        return -ENOMEM;
    ctx->busy[ctx->nbusy].key = k;
    ctx->busy[ctx->nbusy].background = background;
    ctx->nbusy++;
    return 0;
}

int csi_key_trylock(struct csi_ctx *ctx, const char *key)
{
    struct timespec until;
    struct csi_key *held;
    int rc = 0, waiting = 0;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ctx->key_wait_ms / 1000;
    until.tv_nsec += (long)(ctx->key_wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&ctx->lock);
    for (;;) {
        held = key_find(ctx, key);
        if (!held)
            break;
        if (!held->background) {
            rc = -EBUSY;              /* another call of the CO */
            goto out;
        }
        if (!waiting) {
            waiting = 1;
            ctx->nwaiting++;
        }
        if (pthread_cond_timedwait(&ctx->key_cond, &ctx->lock, &until) == ETIMEDOUT &&
            key_find(ctx, key)) {
            rc = -EBUSY;              /* the watchdog's re-mount outlasted the wait */
            goto out;
        }
    }
    rc = key_add(ctx, key, 0);
out:
    if (waiting)
        ctx->nwaiting--;
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

int csi_key_trylock_background(struct csi_ctx *ctx, const char *key)
{
    int rc;
    pthread_mutex_lock(&ctx->lock);
    if (ctx->nwaiting > 0 || key_find(ctx, key))
        rc = -EBUSY;
    else
        rc = key_add(ctx, key, 1);
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

void csi_key_unlock(struct csi_ctx *ctx, const char *key)
{
    pthread_mutex_lock(&ctx->lock);
    struct csi_key *held = key_find(ctx, key);
    if (held) {
        keg_free(held->key);
        *held = ctx->busy[--ctx->nbusy];
        pthread_cond_broadcast(&ctx->key_cond);
    }
    pthread_mutex_unlock(&ctx->lock);
}

/*----------------------------------------------------------------------------
 * protobuf-c allocator
 *--------------------------------------------------------------------------*/

static void *csi_pb_alloc(void *data, size_t size)
{
    KEG_UNUSED(data);
    return keg_malloc(size ? size : 1);
}

static void csi_pb_free(void *data, void *p)
{
    KEG_UNUSED(data);
    keg_free(p);
}

ProtobufCAllocator csi_pb_allocator = {
    .alloc = csi_pb_alloc,
    .free = csi_pb_free,
    .allocator_data = NULL,
};
