/* node.c -- the CSI Node service: publish a volume by starting a mounter at
 * the pod's target path, unpublish it, report its usage and condition, and
 * re-establish mounts whose mounter died.
 *
 * DESIGN
 * Each NodePublishVolume gets its own mounter (one FUSE mount per pod), so
 * one pod's mount options or a crash never affect another pod.  The publish
 * is recorded in the state file (state.c) with the path of its 0600 mounter
 * config, which holds the META_URL with its password and the object-store
 * keys; NodeUnpublishVolume removes both.  Recovery (at start and from the
 * watchdog every ctx->watchdog_ms) walks the records: a target whose mount is
 * dead (ENOTCONN) or missing gets the stale mount detached and a fresh
 * mounter started from the same config, so the pod sees its files again
 * without being restarted.
 *
 * Publish states of one target:
 *
 *   (none) --Publish--> LIVE --mounter dies--> DEAD --recover--> LIVE
 *      ^                  |                      |
 *      +---Unpublish------+----------------------+
 *
 * Invariants: a record exists for every target this plugin mounted and not
 * yet unpublished; its config file exists while the record does; calls on
 * the same volume id are serialised by the per-key try-lock (the watchdog
 * skips a volume that an RPC holds).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "csi_i.h"
#include "keg/hash.h"
#include "keg/mem.h"
#include "keg/mountinfo.h"
#include "mount_mgr.h"
#include "state.h"
#define KEG_LOG_TAG "csi.node"
#include "keg/log.h"

/*----------------------------------------------------------------------------
 * Helpers
 *--------------------------------------------------------------------------*/

static int node_is_sqlite_dir(const char *url)
{
    if (strncmp(url, "sqlite3://", 10) != 0 && strncmp(url, "sqlite://", 9) != 0)
        return 0;
    size_t n = strcspn(url, "?");
    return n > 0 && url[n - 1] == '/';
}

/* The raw user-info ("user:pass") of url, or NULL.  OWNERSHIP: keg_free(). */
static char *node_userinfo(const char *url, const char **auth_out, size_t *alen_out)
{
    const char *auth = strstr(url, "://");
    if (!auth)
        return NULL;
    auth += 3;
    size_t alen = strcspn(auth, "/?#");
    if (auth_out)
        *auth_out = auth;
    if (alen_out)
        *alen_out = alen;
    const char *at = memchr(auth, '@', alen);
    if (!at)
        return NULL;
    return keg_strndup(auth, (size_t)(at - auth));
}

/* The META_URL the mounter gets: the volume_context's namespaced URL with the
 * password of the Secret's URL put back, or the Secret's URL itself (static
 * provisioning).  *out NULL with st set on failure.  OWNERSHIP: keg_free(). */
static int node_meta_url(const Csi__V1__NodePublishVolumeRequest *req, char **out,
                         struct csi_status *st)
{
    const char *ctxurl = CSI_MAP_GET(req, volume_context, "metaurl");
    const char *securl = CSI_MAP_GET(req, secrets, "metaurl");
    *out = NULL;
    if (ctxurl && !*ctxurl)
        ctxurl = NULL;
    if (securl && !*securl)
        securl = NULL;
    if (!ctxurl && !securl)
        return csi_fail(st, CSI_INVALID_ARGUMENT,
                        "secret key 'metaurl' missing (set it in the node-publish Secret, or "
                        "volumeAttributes.metaurl for a static volume)");
    if (!ctxurl) {
        if (node_is_sqlite_dir(securl)) {
            const char *why = NULL;
            if (csi_volume_meta_url(securl, req->volume_id, out, &why) < 0)
                return csi_fail(st, CSI_INVALID_ARGUMENT, "%s", why ? why : "bad metaurl");
            return 0;
        }
        *out = keg_strdup(securl);
        return *out ? 0 : csi_fail(st, CSI_INTERNAL, "out of memory");
    }
    /* ctxurl has no password (CreateVolume strips it); take the Secret's. */
    char *sec_ui = securl ? node_userinfo(securl, NULL, NULL) : NULL;
    const char *auth = NULL;
    size_t alen = 0;
    char *ctx_ui = node_userinfo(ctxurl, &auth, &alen);
    if (!sec_ui || !strchr(sec_ui, ':') || (ctx_ui && strchr(ctx_ui, ':')) || !auth) {
        *out = keg_strdup(ctxurl);
    } else {
        size_t skip = ctx_ui ? strlen(ctx_ui) + 1 : 0;
        *out = keg_asprintf("%.*s%s@%s", (int)(auth - ctxurl), ctxurl, sec_ui, auth + skip);
    }
    keg_free(sec_ui);
    keg_free(ctx_ui);
    return *out ? 0 : csi_fail(st, CSI_INTERNAL, "out of memory");
}

/* Comma-joined mount flags ("" if none), each one checked against the
 * whitelist (confine.c).  Returns NULL with st set on bad input. */
static char *node_options(struct csi_ctx *ctx, const Csi__V1__VolumeCapability *cap,
                          int *readonly, struct csi_status *st)
{
    size_t n = 1;
    const Csi__V1__VolumeCapability__MountVolume *mv = cap->mount;
    size_t nf = mv ? mv->n_mount_flags : 0;
    for (size_t i = 0; i < nf; i++)
        n += strlen(mv->mount_flags[i]) + 1;
    char *s = csi_alloc(st, n);
    if (!s) {
        csi_fail(st, CSI_INTERNAL, "out of memory");
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < nf; i++) {
        const char *f = mv->mount_flags[i];
        if (!*f)
            continue;
        for (const char *c = f; *c; c++) {
            if (*c <= ' ' || *c == 0x7f) {
                csi_fail(st, CSI_INVALID_ARGUMENT,
                         "mount flag %zu contains whitespace or a control character", i);
                return NULL;
            }
        }
        if (f[0] == '-') {
            csi_fail(st, CSI_INVALID_ARGUMENT, "mount flag %zu must not start with '-'", i);
            return NULL;
        }
        if (csi_confine_mount_flag(ctx, f, i, st) < 0)
            return NULL;
        if (strcmp(f, "ro") == 0) {
            *readonly = 1;
            continue;
        }
        if (strcmp(f, "rw") == 0)
            continue;
        if (o)
            s[o++] = ',';
        memcpy(s + o, f, strlen(f));
        o += strlen(f);
    }
    s[o] = '\0';
    return s;
}

static int node_need(struct csi_ctx *ctx, struct csi_status *st)
{
    if (!ctx->state || !ctx->mm)
        return csi_fail(st, CSI_UNIMPLEMENTED, "this plugin does not run the node service");
    return 0;
}

/*----------------------------------------------------------------------------
 * NodePublishVolume
 *--------------------------------------------------------------------------*/

int csi_node_publish_volume(struct csi_ctx *ctx, const Csi__V1__NodePublishVolumeRequest *req,
                            Csi__V1__NodePublishVolumeResponse *out, struct csi_status *st)
{
    struct csi_publish rec, old;
    char *url = NULL, *config = NULL, hash[17], err[1024];
    int readonly, rc, had = 0, config_new = 0;
    struct csi_mount_res res;
    KEG_UNUSED(out);

    memset(&res, 0, sizeof(res));
    /* validate */
    if (node_need(ctx, st) < 0)
        return -1;
    if (csi_check_volume_id(req->volume_id, "volume_id", st) < 0 ||
        csi_confine_dir(ctx->target_root, req->target_path, 0, 0, "target_path", st) < 0)
        return -1;
    if (!req->volume_capability)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "volume_capability is required");
    if (csi_check_capability(req->volume_capability, st) < 0)
        return -1;
    Csi__V1__VolumeCapability__AccessMode__Mode mode = req->volume_capability->access_mode->mode;
    readonly = req->readonly ||
               mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY ||
               mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY;
    char *options = node_options(ctx, req->volume_capability, &readonly, st);
    if (!options)
        return -1;
    if (node_meta_url(req, &url, st) < 0)
        return -1;

    /* lock */
    if (csi_key_trylock(ctx, req->volume_id) < 0) {
        memset(url, 0, strlen(url));
        keg_free(url);
        return csi_fail(st, CSI_ABORTED, "an operation on volume %s is already in progress",
                        req->volume_id);
    }

    /* idempotency */
    memset(&rec, 0, sizeof(rec));
    memset(&old, 0, sizeof(old));
    if (csi_state_find(ctx->state, req->target_path, &old) == 0) {
        had = 1;
        if (strcmp(old.volume_id, req->volume_id) != 0) {
            csi_fail(st, CSI_ALREADY_EXISTS, "target %s already has volume %s published",
                     req->target_path, old.volume_id);
            goto out;
        }
        if (old.readonly != readonly || strcmp(old.options, options) != 0) {
            csi_fail(st, CSI_ALREADY_EXISTS,
                     "volume %s is already published at %s with different readonly/mount "
                     "flags", req->volume_id, req->target_path);
            goto out;
        }
        if (ctx->mm->ops->check(ctx->mm, req->target_path) == 0) {
            csi_metrics_volume(req->target_path, CSI_VOL_LIVE);
            goto out;                               /* already published: OK */
        }
        KEG_WARN("volume_id=%s target=%s: recorded mount is not live, mounting again",
                 req->volume_id, req->target_path);
        ctx->mm->ops->stop(ctx->mm, req->target_path, old.pid);
    } else if (ctx->mm->ops->check(ctx->mm, req->target_path) == 0) {
        csi_fail(st, CSI_FAILED_PRECONDITION,
                 "a FUSE file system this plugin did not record is mounted at %s; unmount it "
                 "first", req->target_path);
        goto out;
    }

    /* act */
    if (csi_confine_dir(ctx->target_root, req->target_path, 1, 0750, "target_path", st) < 0)
        goto out;
    keg_fnv1a64_hex(req->target_path, hash);   /* names the config file */
    config = keg_asprintf("%s/mounts/%s.yaml", ctx->state_dir, hash);
    char *mdir = keg_asprintf("%s/mounts", ctx->state_dir);
    if (!config || !mdir) {
        keg_free(mdir);
        csi_fail(st, CSI_INTERNAL, "out of memory");
        goto out;
    }
    if (mkdir(mdir, 0700) < 0 && errno != EEXIST) {
        csi_fail(st, CSI_INTERNAL, "cannot create %s: %s", mdir, strerror(errno));
        keg_free(mdir);
        goto out;
    }
    keg_free(mdir);
    rc = csi_mount_write_config(config, url, CSI_MAP_GET(req, secrets, "access-key"),
                                CSI_MAP_GET(req, secrets, "secret-key"));
    if (rc < 0) {
        csi_fail(st, CSI_INTERNAL, "cannot write the mounter config %s: %s", config,
                 strerror(-rc));
        goto out;
    }
    config_new = 1;
    struct csi_mount_req mr = {
        .volume_id = req->volume_id, .target = req->target_path, .config = config,
        .options = options, .readonly = readonly, .metrics = ctx->mounter_metrics,
    };
    rc = ctx->mm->ops->start(ctx->mm, &mr, &res, err, sizeof(err));
    if (rc < 0) {
        csi_fail(st, rc == -ENOENT || rc == -EACCES ? CSI_FAILED_PRECONDITION : CSI_INTERNAL,
                 "mounting volume %s at %s failed: %s", req->volume_id, req->target_path, err);
        goto out;
    }

    /* persist */
    rec.volume_id = req->volume_id;
    rec.target = req->target_path;
    rec.readonly = readonly;
    rec.options = options;
    rec.config = config;
    rec.pid = res.pid;
    rec.metrics = res.metrics;
    rc = csi_state_put(ctx->state, &rec);
    memset(&rec, 0, sizeof(rec));
    if (rc < 0) {
        ctx->mm->ops->stop(ctx->mm, req->target_path, res.pid);
        csi_fail(st, CSI_INTERNAL, "cannot record the publish in %s: %s", ctx->state_dir,
                 strerror(-rc));
        goto out;
    }
    config_new = 0;
    csi_metrics_volume(req->target_path, CSI_VOL_LIVE);
    KEG_INFO("volume_id=%s target=%s published (readonly=%d, mounter pid %ld)",
             req->volume_id, req->target_path, readonly, (long)res.pid);

out:
    if (config_new && !had)
        unlink(config);
    csi_publish_clear(&old);
    if (url) {
        memset(url, 0, strlen(url));
        keg_free(url);
    }
    keg_free(config);
    csi_key_unlock(ctx, req->volume_id);
    return st->code == CSI_OK ? 0 : -1;
}

/*----------------------------------------------------------------------------
 * NodeUnpublishVolume
 *--------------------------------------------------------------------------*/

int csi_node_unpublish_volume(struct csi_ctx *ctx, const Csi__V1__NodeUnpublishVolumeRequest *req,
                              Csi__V1__NodeUnpublishVolumeResponse *out, struct csi_status *st)
{
    struct csi_publish rec;
    int rc, found;
    KEG_UNUSED(out);

    if (node_need(ctx, st) < 0)
        return -1;
    if (csi_check_volume_id(req->volume_id, "volume_id", st) < 0 ||
        csi_check_path(req->target_path, "target_path", st) < 0)
        return -1;
    if (csi_key_trylock(ctx, req->volume_id) < 0)
        return csi_fail(st, CSI_ABORTED, "an operation on volume %s is already in progress",
                        req->volume_id);

    found = csi_state_find(ctx->state, req->target_path, &rec) == 0;
    if (!found) {
        /* Never published here (or already unpublished): touch nothing.  Whatever
         * is mounted at the path, and the directory itself, belong to someone
         * else. */
        KEG_INFO("volume_id=%s target=%s: not published by this plugin, nothing to do",
                 req->volume_id, req->target_path);
        goto out;
    }
    if (strcmp(rec.volume_id, req->volume_id) != 0) {
        csi_fail(st, CSI_NOT_FOUND, "target %s has volume %s published, not %s",
                 req->target_path, rec.volume_id, req->volume_id);
        goto out;
    }
    /* Only ever unmount our own FUSE mount: something mounted over it by
     * another party stays, and the call fails until that is gone. */
    char fstype[64];
    if (keg_mountinfo_find(req->target_path, fstype, sizeof(fstype)) > 0 &&
        strcmp(fstype, CSI_FUSE_FSTYPE) != 0) {
        csi_fail(st, CSI_FAILED_PRECONDITION,
                 "%s is mounted at %s over the volume; unmount it first", fstype,
                 req->target_path);
        goto out;
    }
    rc = ctx->mm->ops->stop(ctx->mm, req->target_path, rec.pid);
    if (rc < 0) {
        csi_fail(st, CSI_INTERNAL, "unmounting %s: %s", req->target_path, strerror(-rc));
        goto out;
    }
    if (rec.config[0])
        unlink(rec.config);
    rc = csi_state_remove(ctx->state, req->target_path);
    if (rc < 0) {
        csi_fail(st, CSI_INTERNAL, "cannot update the state in %s: %s", ctx->state_dir,
                 strerror(-rc));
        goto out;
    }
    csi_metrics_volume_forget(req->target_path);
    if (rmdir(req->target_path) < 0 && errno != ENOENT) {
        if (errno == ENOTEMPTY || errno == EEXIST)
            KEG_WARN("volume_id=%s target=%s: not removed, it is not empty (files written "
                     "while the volume was not mounted?)", req->volume_id, req->target_path);
        else if (errno != EBUSY)
            KEG_WARN("volume_id=%s target=%s: rmdir: %s", req->volume_id, req->target_path,
                     strerror(errno));
    }
    KEG_INFO("volume_id=%s target=%s unpublished", req->volume_id, req->target_path);
out:
    if (found)
        csi_publish_clear(&rec);
    csi_key_unlock(ctx, req->volume_id);
    return st->code == CSI_OK ? 0 : -1;
}

/*----------------------------------------------------------------------------
 * NodeGetVolumeStats, NodeGetInfo, NodeGetCapabilities
 *--------------------------------------------------------------------------*/

static Csi__V1__VolumeUsage *node_usage(struct csi_status *st, Csi__V1__VolumeUsage__Unit unit,
                                        uint64_t total, uint64_t avail, uint64_t used)
{
    Csi__V1__VolumeUsage *u = csi_alloc(st, sizeof(*u));
    if (!u)
        return NULL;
    csi__v1__volume_usage__init(u);
    u->unit = unit;
    u->total = (int64_t)total;
    u->available = (int64_t)avail;
    u->used = (int64_t)used;
    return u;
}

int csi_node_get_volume_stats(struct csi_ctx *ctx, const Csi__V1__NodeGetVolumeStatsRequest *req,
                              Csi__V1__NodeGetVolumeStatsResponse *out, struct csi_status *st)
{
    struct csi_publish rec;
    struct stat sb;

    if (node_need(ctx, st) < 0)
        return -1;
    if (csi_check_volume_id(req->volume_id, "volume_id", st) < 0)
        return -1;
    if (!req->volume_path || !*req->volume_path)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "volume_path is required");
    /* Any other path that is not where the volume is published -- relative,
     * with "..", missing -- is a volume not found there (CSI spec). */
    if (csi_state_find(ctx->state, req->volume_path, &rec) < 0)
        return csi_fail(st, CSI_NOT_FOUND, "volume %s is not published at %s", req->volume_id,
                        req->volume_path);
    int match = strcmp(rec.volume_id, req->volume_id) == 0;
    csi_publish_clear(&rec);
    if (!match)
        return csi_fail(st, CSI_NOT_FOUND, "volume %s is not published at %s", req->volume_id,
                        req->volume_path);
    if (lstat(req->volume_path, &sb) < 0 && errno == ENOENT)
        return csi_fail(st, CSI_NOT_FOUND, "volume_path %s does not exist", req->volume_path);

    Csi__V1__VolumeCondition *cond = csi_alloc(st, sizeof(*cond));
    if (!cond)
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    csi__v1__volume_condition__init(cond);
    out->volume_condition = cond;

    int rc = ctx->mm->ops->check(ctx->mm, req->volume_path);
    if (rc < 0) {
        cond->abnormal = 1;
        cond->message = csi_strdup(st, rc == -ENOTCONN
            ? "the FUSE mount is dead (its mounter exited); the driver is re-mounting it"
            : "nothing is mounted at the volume path; the driver is re-mounting it");
        pthread_mutex_lock(&ctx->wd_lock);
        pthread_cond_signal(&ctx->wd_cond);            /* recover now, not in 2 s */
        pthread_mutex_unlock(&ctx->wd_lock);
        return 0;
    }
    struct statvfs sv;
    if (statvfs(req->volume_path, &sv) < 0) {
        cond->abnormal = 1;
        cond->message = csi_strdup(st, "statvfs of the volume path failed");
        return 0;
    }
    uint64_t fr = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
    uint64_t tb = (uint64_t)sv.f_blocks * fr, fb = (uint64_t)sv.f_bfree * fr;
    uint64_t ab = (uint64_t)sv.f_bavail * fr;
    Csi__V1__VolumeUsage **u = csi_alloc(st, 2 * sizeof(*u));
    if (!u)
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    u[0] = node_usage(st, CSI__V1__VOLUME_USAGE__UNIT__BYTES, tb, ab, tb - fb);
    u[1] = node_usage(st, CSI__V1__VOLUME_USAGE__UNIT__INODES, sv.f_files, sv.f_favail,
                      sv.f_files - sv.f_ffree);
    if (!u[0] || !u[1])
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    out->usage = u;
    out->n_usage = 2;
    cond->abnormal = 0;
    cond->message = csi_strdup(st, "mounted");
    return 0;
}

int csi_node_get_info(struct csi_ctx *ctx, const Csi__V1__NodeGetInfoRequest *req,
                      Csi__V1__NodeGetInfoResponse *out, struct csi_status *st)
{
    KEG_UNUSED(req);
    out->node_id = csi_strdup(st, ctx->node_id ? ctx->node_id : "");
    return out->node_id ? 0 : csi_fail(st, CSI_INTERNAL, "out of memory");
}

int csi_node_get_capabilities(struct csi_ctx *ctx, const Csi__V1__NodeGetCapabilitiesRequest *req,
                              Csi__V1__NodeGetCapabilitiesResponse *out, struct csi_status *st)
{
    static const Csi__V1__NodeServiceCapability__RPC__Type types[] = {
        CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS,
        CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_CONDITION,
        CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER,
    };
    const size_t n = sizeof(types) / sizeof(types[0]);
    KEG_UNUSED(ctx);
    KEG_UNUSED(req);
    Csi__V1__NodeServiceCapability **caps = csi_alloc(st, n * sizeof(*caps));
    if (!caps)
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        Csi__V1__NodeServiceCapability *c = csi_alloc(st, sizeof(*c));
        Csi__V1__NodeServiceCapability__RPC *r = csi_alloc(st, sizeof(*r));
        if (!c || !r)
            return csi_fail(st, CSI_INTERNAL, "out of memory");
        csi__v1__node_service_capability__init(c);
        csi__v1__node_service_capability__rpc__init(r);
        r->type = types[i];
        c->type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
        c->rpc = r;
        caps[i] = c;
    }
    out->capabilities = caps;
    out->n_capabilities = n;
    return 0;
}

/*----------------------------------------------------------------------------
 * Recovery and the watchdog
 *--------------------------------------------------------------------------*/

/* Bring one record's mount back.  1 if a mounter was started, 0 if the mount
 * was fine or the record was dropped, -errno on failure.
 * LOCKS: caller holds the try-lock of rec->volume_id. */
static int node_recover_one(struct csi_ctx *ctx, const struct csi_publish *rec)
{
    char err[1024];
    struct csi_mount_res res;
    int rc = ctx->mm->ops->check(ctx->mm, rec->target);
    if (rc == 0) {
        csi_metrics_volume(rec->target, CSI_VOL_LIVE);
        return 0;
    }
    if (rc == -ENOENT) {
        /* target gone: if its parent went too, the pod is gone: forget it */
        char parent[PATH_MAX];
        snprintf(parent, sizeof(parent), "%s", rec->target);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent)
            *slash = '\0';
        if (access(parent, F_OK) < 0) {
            KEG_WARN("volume_id=%s target=%s: target and its parent are gone, dropping the "
                     "record", rec->volume_id, rec->target);
            ctx->mm->ops->stop(ctx->mm, rec->target, rec->pid);
            if (rec->config[0])
                unlink(rec->config);
            csi_state_remove(ctx->state, rec->target);
            csi_metrics_volume_forget(rec->target);
            return 0;
        }
    }
    KEG_WARN("volume_id=%s target=%s: mount is %s, re-establishing it", rec->volume_id,
             rec->target, rc == -ENOTCONN ? "dead (ENOTCONN)" : "not there");
    csi_metrics_restart(rc == -ENOTCONN ? CSI_RESTART_DEAD : CSI_RESTART_MISSING);
    csi_metrics_volume(rec->target, CSI_VOL_RECOVERING);
    if (!ctx->mm->ops->self_healing) {
        ctx->mm->ops->detach(ctx->mm, rec->target);
        ctx->mm->ops->stop(ctx->mm, rec->target, rec->pid);
    }
    if (!rec->config[0] || access(rec->config, R_OK) < 0) {
        KEG_ERR("volume_id=%s target=%s: mounter config %s is missing; cannot re-mount "
                "(unpublish and publish again)", rec->volume_id, rec->target, rec->config);
        csi_metrics_volume(rec->target, CSI_VOL_FAILED);
        return -ENOENT;
    }
    /* the same confinement as at publish: a link swapped in below the kubelet
     * directory since then is refused, not followed */
    struct csi_status cst;
    csi_status_init(&cst);
    rc = csi_confine_dir(ctx->target_root, rec->target, 1, 0750, "target", &cst);
    if (rc < 0) {
        KEG_ERR("volume_id=%s target=%s: not re-mounted: %s", rec->volume_id, rec->target,
                cst.msg);
        csi_status_clear(&cst);
        csi_metrics_volume(rec->target, CSI_VOL_FAILED);
        return -EINVAL;
    }
    csi_status_clear(&cst);
    struct csi_mount_req mr = {
        .volume_id = rec->volume_id, .target = rec->target, .config = rec->config,
        .options = rec->options, .readonly = rec->readonly, .metrics = ctx->mounter_metrics,
    };
    rc = ctx->mm->ops->start(ctx->mm, &mr, &res, err, sizeof(err));
    if (rc < 0) {
        KEG_ERR("volume_id=%s target=%s: re-mount failed: %s", rec->volume_id, rec->target,
                err);
        /* busy: the holder is mounting it itself right now */
        csi_metrics_volume(rec->target, rc == -EBUSY ? CSI_VOL_RECOVERING : CSI_VOL_FAILED);
        return rc;
    }
    struct csi_publish upd = *rec;
    upd.pid = res.pid;
    upd.metrics = res.metrics;
    rc = csi_state_put(ctx->state, &upd);
    if (rc < 0)
        KEG_ERR("volume_id=%s target=%s: re-mounted but the state was not updated: %s",
                rec->volume_id, rec->target, strerror(-rc));
    csi_metrics_volume(rec->target, CSI_VOL_LIVE);
    KEG_INFO("volume_id=%s target=%s: re-mounted (mounter pid %ld)", rec->volume_id,
             rec->target, (long)res.pid);
    return 1;
}

int csi_node_recover(struct csi_ctx *ctx)
{
    struct csi_publish *recs = NULL;
    size_t n = 0;
    int restarted = 0;
    if (!ctx->state || !ctx->mm)
        return 0;
    int rc = csi_state_snapshot(ctx->state, &recs, &n);
    if (rc < 0)
        return rc;
    csi_metrics_round();
    for (size_t i = 0; i < n && !ctx->stopping; i++) {
        if (csi_key_trylock_background(ctx, recs[i].volume_id) < 0)
            continue;       /* an RPC is working on (or waiting for) a volume */
        /* the record may have changed (unpublished) since the snapshot */
        struct csi_publish cur;
        if (csi_state_find(ctx->state, recs[i].target, &cur) == 0) {
            if (node_recover_one(ctx, &cur) > 0)
                restarted++;
            csi_publish_clear(&cur);
        }
        csi_key_unlock(ctx, recs[i].volume_id);
    }
    csi_publish_free_array(recs, n);
    return restarted;
}

static void *node_watchdog(void *arg)
{
    struct csi_ctx *ctx = arg;
    keg_thread_name("csi-watchdog");
    /* holder mode: a holder that does not answer yet (started after the plugin)
     * is asked again every round, so its pids get recorded and its mounters
     * upgraded to this plugin's kegfs once it is up */
    int reconciled = !ctx->mm->ops->reconcile ||
                     ctx->mm->ops->reconcile(ctx->mm, ctx->state) == 0;
    /* first pass at once: re-establish what died while the plugin was down */
    int n = csi_node_recover(ctx);
    if (n > 0)
        KEG_INFO("recovery: %d mount(s) re-established", n);
    ctx->ready = 1;
    pthread_mutex_lock(&ctx->wd_lock);
    while (!ctx->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ctx->watchdog_ms / 1000;
        ts.tv_nsec += (long)(ctx->watchdog_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&ctx->wd_cond, &ctx->wd_lock, &ts);
        if (ctx->stopping)
            break;
        pthread_mutex_unlock(&ctx->wd_lock);
        if (ctx->mm->ops->reap)
            ctx->mm->ops->reap(ctx->mm);
        if (!reconciled && ctx->mm->ops->reconcile(ctx->mm, ctx->state) == 0) {
            reconciled = 1;
            KEG_INFO("mount holder answered: state reconciled");
        }
        csi_node_recover(ctx);
        pthread_mutex_lock(&ctx->wd_lock);
    }
    pthread_mutex_unlock(&ctx->wd_lock);
    return NULL;
}

int csi_node_watchdog_start(struct csi_ctx *ctx)
{
    int rc = pthread_create(&ctx->watchdog, NULL, node_watchdog, ctx);
    if (rc != 0)
        return -rc;
    ctx->watchdog_started = 1;
    return 0;
}

void csi_node_watchdog_stop(struct csi_ctx *ctx)
{
    if (!ctx->watchdog_started)
        return;
    pthread_mutex_lock(&ctx->wd_lock);
    ctx->stopping = 1;
    pthread_cond_broadcast(&ctx->wd_cond);
    pthread_mutex_unlock(&ctx->wd_lock);
    pthread_join(ctx->watchdog, NULL);
    ctx->watchdog_started = 0;
}
