/* controller.c -- the CSI Controller service: create, delete, expand and
 * validate KegFS volumes.
 *
 * DESIGN
 * A volume is a metadata namespace plus the objects under "<volume-id>/" in
 * the bucket named by the Secret.  CreateVolume derives the volume id from the
 * request name (csi_volume_id_from_name), so a retried call lands on the same
 * namespace: if it is already formatted with the same capacity the call is
 * idempotent, with another capacity it is ALREADY_EXISTS.  The namespace is:
 *   redis (and engines other than sqlite3): the Secret's URL with ?ns=<id>
 *   sqlite3:///dir/ : the database file /dir/<id>.db (single node only)
 * The reclaim policy (StorageClass parameter `reclaim`) is written next to the
 * data as the object "<id>/.csi/reclaim" before the namespace is formatted, so
 * DeleteVolume -- which gets only the id and the Secret -- finds it; a missing
 * marker means "delete".  CreateVolume first claims the prefix "<id>/" with the
 * volume marker "<id>/kegfs.volume" (its uuid), and fails if another volume
 * holds it.  DeleteVolume deletes only under a prefix whose marker names the
 * volume being deleted (no marker: only an empty prefix), the marker after
 * the other objects, and destroys the namespace last, so an interrupted
 * delete is retried in full.
 * volume_context carries the namespaced META_URL without its password; the
 * node takes the password from its node-publish Secret.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "csi_i.h"
#include "keg/hash.h"
#include "keg/mem.h"
#include "keg/meta.h"
#include "keg/obj.h"
#include "keg/stack.h"
#include "keg/url.h"
#include "keg/uuid.h"
#define KEG_LOG_TAG "csi.controller"
#include "keg/log.h"

#define CTL_RECLAIM_KEY ".csi/reclaim"

/* Settings from StorageClass parameters and the Secret's format-options. */
struct ctl_params {
    uint32_t block_size;        /* 0: engine default */
    char     compress[8];
    uint32_t trash_days;
    uint64_t inodes;
    char     region[64];
    int      retain;            /* reclaim=retain */
};

/*----------------------------------------------------------------------------
 * Volume ids and URLs
 *--------------------------------------------------------------------------*/

void csi_volume_id_from_name(const char *name, char buf[64])
{
    if (keg_format_check_name(name) == 0 && strlen(name) <= 63) {
        snprintf(buf, 64, "%s", name);
        return;
    }
    /* FNV-1a 64: stable across versions and machines (the id must never change). */
    uint64_t h = keg_fnv1a64_str(name);
    snprintf(buf, 64, "kegfs-%016" PRIx64, h);
}

static int ctl_is_sqlite(const char *url)
{
    return strncmp(url, "sqlite3://", 10) == 0 || strncmp(url, "sqlite://", 9) == 0;
}

int csi_volume_meta_url(const char *base, const char *id, char **out, const char **err)
{
    *out = NULL;
    *err = NULL;
    const char *q = strchr(base, '?');
    size_t blen = q ? (size_t)(q - base) : strlen(base);
    if (ctl_is_sqlite(base)) {
        if (blen == 0 || base[blen - 1] != '/') {
            *err = "a sqlite3 metaurl in the Secret must name a directory ending in '/' "
                   "(one database file per volume is created there), e.g. "
                   "sqlite3:///var/lib/kegfs/";
            return -EINVAL;
        }
        *out = keg_asprintf("%.*s%s.db%s", (int)blen, base, id, q ? q : "");
        return *out ? 0 : -ENOMEM;
    }
    /* Rebuild the query without any ns=, then add ns=<id>. */
    char *query = keg_strdup(q ? q + 1 : "");
    if (!query)
        return -ENOMEM;
    size_t o = 0;
    const char *p = q ? q + 1 : "";
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if (!(n >= 3 && strncmp(p, "ns=", 3) == 0) && n > 0) {
            if (o)
                query[o++] = '&';
            memcpy(query + o, p, n);
            o += n;
        }
        p += n + (amp ? 1 : 0);
    }
    query[o] = '\0';
    *out = keg_asprintf("%.*s?%s%sns=%s", (int)blen, base, query, o ? "&" : "", id);
    keg_free(query);
    return *out ? 0 : -ENOMEM;
}

/* url without the password of its user-info.  OWNERSHIP: caller keg_free()s. */
static char *ctl_strip_password(const char *url)
{
    const char *auth = strstr(url, "://");
    if (!auth)
        return keg_strdup(url);
    auth += 3;
    size_t alen = strcspn(auth, "/?#");
    const char *at = memchr(auth, '@', alen);
    if (!at)
        return keg_strdup(url);
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    if (!colon)
        return keg_strdup(url);
    if (colon == auth)      /* ":password@host": drop the whole user-info */
        return keg_asprintf("%.*s%s", (int)(auth - url), url, at + 1);
    return keg_asprintf("%.*s%s", (int)(colon - url), url, at);
}

/*----------------------------------------------------------------------------
 * Parameters and secrets
 *--------------------------------------------------------------------------*/

static int ctl_parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (!s || !*s || *s == '-')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

/* "4M", "4MiB", "1024K", "4194304". */
static int ctl_parse_size(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (!s || !*s || *s == '-')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'B')
        end++;
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

/* Apply one setting (from parameters or format-options).  *known = 0 for a
 * key that is not ours.  Returns 0 or -1 with st set. */
static int ctl_apply_param(struct ctl_params *p, const char *key, const char *val, int *known,
                           struct csi_status *st)
{
    uint64_t v;
    *known = 1;
    if (strcmp(key, "block-size") == 0) {
        if (ctl_parse_size(val, &v) < 0 || v < (64u << 10) || v > KEG_BLOCK_SIZE_MAX ||
            (v & (v - 1)) != 0)
            return csi_fail(st, CSI_INVALID_ARGUMENT,
                            "block-size '%.32s' must be a power of two from 64K to 16M", val);
        p->block_size = (uint32_t)v;
    } else if (strcmp(key, "compress") == 0) {
        if (strcmp(val, "none") != 0 && strcmp(val, "lz4") != 0 && strcmp(val, "zstd") != 0)
            return csi_fail(st, CSI_INVALID_ARGUMENT,
                            "compress '%.32s' must be one of none, lz4, zstd", val);
        snprintf(p->compress, sizeof(p->compress), "%s", val);
    } else if (strcmp(key, "trash-days") == 0) {
        if (ctl_parse_u64(val, &v) < 0 || v > 3650)
            return csi_fail(st, CSI_INVALID_ARGUMENT,
                            "trash-days '%.32s' must be a number of days from 0 to 3650", val);
        p->trash_days = (uint32_t)v;
    } else if (strcmp(key, "reclaim") == 0) {
        if (strcmp(val, "delete") == 0)
            p->retain = 0;
        else if (strcmp(val, "retain") == 0)
            p->retain = 1;
        else
            return csi_fail(st, CSI_INVALID_ARGUMENT,
                            "reclaim '%.32s' must be 'delete' or 'retain'", val);
    } else if (strcmp(key, "inodes") == 0) {
        if (ctl_parse_u64(val, &v) < 0)
            return csi_fail(st, CSI_INVALID_ARGUMENT, "inodes '%.32s' must be a number", val);
        p->inodes = v;
    } else if (strcmp(key, "region") == 0) {
        if (strlen(val) >= sizeof(p->region))
            return csi_fail(st, CSI_INVALID_ARGUMENT, "region is too long");
        snprintf(p->region, sizeof(p->region), "%s", val);
    } else {
        *known = 0;
    }
    return 0;
}

static int ctl_parse_params(const Csi__V1__CreateVolumeRequest *req, struct ctl_params *p,
                            struct csi_status *st)
{
    int known;
    memset(p, 0, sizeof(*p));
    for (size_t i = 0; i < req->n_parameters; i++) {
        const char *k = req->parameters[i]->key;
        const char *v = req->parameters[i]->value ? req->parameters[i]->value : "";
        if (strncmp(k, "csi.storage.k8s.io/", 19) == 0)
            continue;       /* the sidecars' own keys */
        if (ctl_apply_param(p, k, v, &known, st) < 0)
            return -1;
        if (!known)
            return csi_fail(st, CSI_INVALID_ARGUMENT,
                            "unknown StorageClass parameter '%.64s' (known: block-size, "
                            "compress, trash-days, reclaim)", k);
    }
    /* format-options from the Secret: "key=value,key=value". */
    const char *fo = CSI_MAP_GET(req, secrets, "format-options");
    if (fo && *fo) {
        char *copy = keg_strdup(fo);
        if (!copy)
            return csi_fail(st, CSI_INTERNAL, "out of memory");
        char *save = NULL;
        int rc = 0;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(tok, '=');
            if (!eq) {
                rc = csi_fail(st, CSI_INVALID_ARGUMENT,
                              "secret key 'format-options': '%.64s' is not key=value", tok);
                break;
            }
            *eq = '\0';
            rc = ctl_apply_param(p, tok, eq + 1, &known, st);
            if (rc < 0)
                break;
            if (!known) {
                rc = csi_fail(st, CSI_INVALID_ARGUMENT,
                              "secret key 'format-options': unknown option '%.64s'", tok);
                break;
            }
        }
        keg_free(copy);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The value of a required secret, or NULL with st set (naming the key). */
static const char *ctl_secret(csi_map_entry *const *map, size_t n, const char *key,
                              struct csi_status *st)
{
    const char *v = csi_map_get(map, n, key);
    if (!v || !*v) {
        csi_fail(st, CSI_INVALID_ARGUMENT,
                 "secret key '%s' missing (set it in the Secret named by the StorageClass's "
                 "csi.storage.k8s.io/provisioner-secret-name)", key);
        return NULL;
    }
    return v;
}
#define CTL_SECRET(req, key, st) \
    ctl_secret((csi_map_entry *const *)(req)->secrets, (req)->n_secrets, (key), (st))
#define CTL_SECRET_OPT(req, key) CSI_MAP_GET(req, secrets, key)

static int ctl_copy(char *dst, size_t size, const char *src, const char *what,
                    struct csi_status *st)
{
    if (strlen(src) >= size)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "%s is longer than %zu bytes", what, size - 1);
    memcpy(dst, src, strlen(src) + 1);
    return 0;
}

/*----------------------------------------------------------------------------
 * Engine access
 *--------------------------------------------------------------------------*/

static int ctl_open_store(struct csi_ctx *ctx, const struct keg_format *f, const char *ak,
                          const char *sk, struct keg_obj **out)
{
    if (ctx->open_store)
        return ctx->open_store(f, ak, sk, out);
    struct keg_stack_conf sc = { .access_key = ak, .secret_key = sk, .session_token = NULL };
    return keg_stack_open(f, &sc, out);
}

/* Open the metadata namespace of volume id.  On failure st is set and -1 returned;
 * *url_out (may be NULL) gets the URL (OWNERSHIP: caller keg_free()s). */
static int ctl_open_meta(const char *base, const char *id, struct keg_meta **m, char **url_out,
                         struct csi_status *st)
{
    char *url = NULL;
    const char *why = NULL;
    char red[512];
    *m = NULL;
    if (url_out)
        *url_out = NULL;
    int rc = csi_volume_meta_url(base, id, &url, &why);
    if (rc < 0)
        return csi_fail(st, csi_code_from_errno(rc), "%s", why ? why : "out of memory");
    if (ctl_is_sqlite(url)) {
        /* the directory of the per-volume database files */
        struct keg_url u;
        const char *perr = NULL;
        if (keg_url_parse(url, &u, &perr) == 0) {
            char *slash = strrchr(u.path, '/');
            int e = 0;
            if (slash && slash != u.path) {
                *slash = '\0';
                if (mkdir(u.path, 0700) < 0 && errno != EEXIST)
                    e = errno;
            }
            if (e) {
                csi_fail(st, CSI_UNAVAILABLE, "cannot create the directory %s of the "
                         "volume's database: %s", u.path, strerror(e));
                keg_url_free(&u);
                keg_free(url);
                return -1;
            }
            keg_url_free(&u);
        }
    }
    rc = keg_meta_open(url, m);
    if (rc < 0) {
        keg_url_redact(url, red, sizeof(red));
        keg_free(url);
        if (rc == -EINVAL)
            return csi_fail(st, CSI_INVALID_ARGUMENT,
                            "secret key 'metaurl' is not a usable META_URL (%s): %s", red,
                            strerror(-rc));
        return csi_fail(st, CSI_UNAVAILABLE, "cannot reach the metadata engine at %s: %s",
                        red, strerror(-rc));
    }
    if (url_out)
        *url_out = url;
    else
        keg_free(url);
    return 0;
}

/* Fill the response volume.  Returns 0 or -1 (st set). */
static int ctl_fill_volume(Csi__V1__CreateVolumeResponse *out, const char *id, uint64_t cap,
                           const char *url, struct csi_status *st)
{
    Csi__V1__Volume *v = csi_alloc(st, sizeof(*v));
    char *clean = ctl_strip_password(url);
    if (!v || !clean) {
        keg_free(clean);
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    }
    csi__v1__volume__init(v);
    v->volume_id = csi_strdup(st, id);
    v->capacity_bytes = (int64_t)cap;
    int rc = csi_map_put(st, (csi_map_entry ***)&v->volume_context, &v->n_volume_context,
                         &csi__v1__volume__volume_context_entry__descriptor, "metaurl", clean);
    keg_free(clean);
    if (rc < 0 || !v->volume_id)
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    out->volume = v;
    return 0;
}

/*----------------------------------------------------------------------------
 * CreateVolume
 *--------------------------------------------------------------------------*/

static int ctl_capacity(const Csi__V1__CapacityRange *r, uint64_t *cap, struct csi_status *st)
{
    int64_t req = r ? r->required_bytes : 0;
    int64_t lim = r ? r->limit_bytes : 0;
    if (req < 0 || lim < 0)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "capacity_range must not be negative");
    if (lim && req > lim)
        return csi_fail(st, CSI_OUT_OF_RANGE,
                        "capacity_range: required_bytes %" PRId64 " > limit_bytes %" PRId64,
                        req, lim);
    if (req)
        *cap = (uint64_t)req;
    else if (lim)
        *cap = (uint64_t)lim < CSI_DEFAULT_CAPACITY ? (uint64_t)lim : CSI_DEFAULT_CAPACITY;
    else
        *cap = CSI_DEFAULT_CAPACITY;
    return 0;
}

/* A same-name volume exists as *f: OK (idempotent) only with the same capacity. */
static int ctl_existing(const struct keg_format *f, const char *name, uint64_t cap,
                        struct csi_status *st)
{
    if (f->capacity != cap)
        return csi_fail(st, CSI_ALREADY_EXISTS,
                        "volume '%.64s' (name '%.128s') already exists with capacity %" PRIu64
                        " bytes, not the requested %" PRIu64,
                        f->name, name, f->capacity, cap);
    return 0;
}

int csi_controller_create_volume(struct csi_ctx *ctx, const Csi__V1__CreateVolumeRequest *req,
                                 Csi__V1__CreateVolumeResponse *out, struct csi_status *st)
{
    struct ctl_params p;
    struct keg_format f, old;
    struct keg_meta *m = NULL;
    struct keg_obj *o = NULL;
    char id[64], *url = NULL;
    uint64_t cap = 0;
    int locked = 0, claimed = 0, rc;

    /* validate */
    if (!req->name || !*req->name)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "name is required");
    if (strlen(req->name) > 128)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "name is longer than 128 bytes");
    if (req->n_volume_capabilities == 0)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "volume_capabilities are required");
    for (size_t i = 0; i < req->n_volume_capabilities; i++)
        if (csi_check_capability(req->volume_capabilities[i], st) < 0)
            return -1;
    if (req->volume_content_source)
        return csi_fail(st, CSI_INVALID_ARGUMENT,
                        "volume_content_source is not supported (no snapshots or clones)");
    if (ctl_capacity(req->capacity_range, &cap, st) < 0)
        return -1;
    if (ctl_parse_params(req, &p, st) < 0)
        return -1;
    const char *base = CTL_SECRET(req, "metaurl", st);
    if (!base)
        return -1;
    const char *storage = CTL_SECRET(req, "storage", st);
    if (!storage)
        return -1;
    const char *bucket = CTL_SECRET(req, "bucket", st);
    if (!bucket)
        return -1;
    const char *ak = CTL_SECRET_OPT(req, "access-key");
    const char *sk = CTL_SECRET_OPT(req, "secret-key");
    csi_volume_id_from_name(req->name, id);

    /* lock */
    if (csi_key_trylock(ctx, id) < 0)
        return csi_fail(st, CSI_ABORTED, "an operation on volume %s is already in progress",
                        id);
    locked = 1;

    /* idempotency */
    if (ctl_open_meta(base, id, &m, &url, st) < 0)
        goto out;
    rc = keg_meta_format_load(m, &old);
    if (rc == 0) {
        if (ctl_existing(&old, req->name, cap, st) == 0)
            ctl_fill_volume(out, id, old.capacity, url, st);
        goto out;
    }
    if (rc != -ENOENT) {
        csi_fail(st, csi_code_from_errno(rc), "reading the format of volume %s: %s", id,
                 strerror(-rc));
        goto out;
    }

    /* act: object store first (fails early on bad credentials), then format */
    memset(&f, 0, sizeof(f));
    if (ctl_copy(f.name, sizeof(f.name), id, "volume id", st) < 0 ||
        ctl_copy(f.storage, sizeof(f.storage), storage, "secret key 'storage'", st) < 0 ||
        ctl_copy(f.bucket, sizeof(f.bucket), bucket, "secret key 'bucket'", st) < 0 ||
        ctl_copy(f.access_key, sizeof(f.access_key), ak ? ak : "", "access-key", st) < 0 ||
        ctl_copy(f.secret_key, sizeof(f.secret_key), sk ? sk : "", "secret-key", st) < 0)
        goto out;
    keg_uuid_v4(f.uuid);
    snprintf(f.region, sizeof(f.region), "%s", p.region);
    snprintf(f.compress, sizeof(f.compress), "%s", p.compress[0] ? p.compress : "none");
    f.block_size = p.block_size ? p.block_size : KEG_BLOCK_SIZE_DEFAULT;
    f.capacity = cap;
    f.inodes = p.inodes;
    f.trash_days = p.trash_days;
    f.created = (int64_t)time(NULL);

    rc = ctl_open_store(ctx, &f, ak, sk, &o);
    if (rc < 0) {
        csi_fail(st, rc == -EINVAL ? CSI_INVALID_ARGUMENT : CSI_UNAVAILABLE,
                 "cannot open the object store (storage '%.16s'): %s; check the Secret's "
                 "storage, bucket, access-key and secret-key", storage, strerror(-rc));
        goto out;
    }
    /* claim the prefix <id>/ for this volume's uuid before writing under it */
    char other[40];
    f.block_version = KEG_BLOCK_VERSION;
    rc = keg_volume_marker_claim(o, id, f.uuid, other);
    if (rc == -EEXIST || rc == -EIO) {
        csi_fail(st, CSI_FAILED_PRECONDITION,
                 "the name %s is already used in the bucket by another volume (marker "
                 "%s/" KEG_VOLUME_MARKER " names %s): use another bucket or metaurl namespace",
                 id, id, rc == -EIO ? "no volume" : other);
        goto out;
    }
    if (rc < 0) {
        csi_fail(st, CSI_UNAVAILABLE, "cannot write the volume marker of %s: %s", id,
                 strerror(-rc));
        goto out;
    }
    claimed = 1;
    char key[128];
    snprintf(key, sizeof(key), "%s/" CTL_RECLAIM_KEY, id);
    const char *pol = p.retain ? "retain" : "delete";
    rc = keg_obj_put(o, key, pol, strlen(pol));
    if (rc < 0) {
        csi_fail(st, csi_code_from_errno(rc) == CSI_INTERNAL ? CSI_UNAVAILABLE
                                                             : csi_code_from_errno(rc),
                 "cannot write to the object store (bucket from the Secret): %s",
                 strerror(-rc));
        goto out;
    }
    rc = keg_meta_format_init(m, &f, 0777, 0, 0, 0);
    if (rc == -EEXIST) {
        /* formatted concurrently by another controller replica */
        rc = keg_meta_format_load(m, &old);
        if (rc == 0) {
            if (ctl_existing(&old, req->name, cap, st) == 0)
                ctl_fill_volume(out, id, old.capacity, url, st);
            goto out;
        }
    }
    if (rc < 0) {
        csi_fail(st, csi_code_from_errno(rc), "formatting volume %s: %s", id, strerror(-rc));
        goto out;
    }
    claimed = 0;
    KEG_INFO("volume_id=%s name=%s created: capacity=%" PRIu64 " block_size=%u compress=%s "
             "reclaim=%s", id, req->name, cap, f.block_size, f.compress, pol);
    ctl_fill_volume(out, id, cap, url, st);

out:
    if (claimed && st->code != CSI_OK) {
        /* the name must not stay claimed by a volume that was not made */
        char mkey[128];
        keg_volume_marker_key(mkey, sizeof(mkey), id);
        (void)keg_obj_del(o, mkey);
    }
    if (o)
        keg_obj_close(o);
    if (m)
        keg_meta_close(m);
    keg_free(url);
    memset(&f, 0, sizeof(f));   /* credentials */
    if (locked)
        csi_key_unlock(ctx, id);
    return st->code == CSI_OK ? 0 : -1;
}

/*----------------------------------------------------------------------------
 * DeleteVolume
 *--------------------------------------------------------------------------*/

struct ctl_keys {
    char  **v;
    size_t  n, cap;
};

static int ctl_collect(void *arg, const char *key, uint64_t size)
{
    struct ctl_keys *k = arg;
    KEG_UNUSED(size);
    if (k->n == k->cap) {
        size_t ncap = k->cap ? k->cap * 2 : 256;
        char **nv = keg_realloc(k->v, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        k->v = nv;
        k->cap = ncap;
    }
    k->v[k->n] = keg_strdup(key);
    if (!k->v[k->n])
        return -ENOMEM;
    k->n++;
    return 0;
}

static void ctl_keys_free(struct ctl_keys *k)
{
    for (size_t i = 0; i < k->n; i++)
        keg_free(k->v[i]);
    keg_free(k->v);
    memset(k, 0, sizeof(*k));
}

/* Remove the files of a sqlite3 volume database (url names /dir/<id>.db). */
static void ctl_unlink_sqlite(const char *url)
{
    struct keg_url u;
    const char *err = NULL;
    if (keg_url_parse(url, &u, &err) < 0)
        return;
    static const char *const sfx[] = { "", "-wal", "-shm", "-journal" };
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        char *p = keg_asprintf("%s%s", u.path, sfx[i]);
        if (p)
            unlink(p);
        keg_free(p);
    }
    keg_url_free(&u);
}

int csi_controller_delete_volume(struct csi_ctx *ctx, const Csi__V1__DeleteVolumeRequest *req,
                                 Csi__V1__DeleteVolumeResponse *out, struct csi_status *st)
{
    struct keg_meta *m = NULL;
    struct keg_obj *o = NULL;
    struct keg_format f;
    struct ctl_keys keys = { 0 };
    char *url = NULL;
    int rc;
    KEG_UNUSED(out);

    if (csi_check_volume_id(req->volume_id, "volume_id", st) < 0)
        return -1;
    const char *base = CTL_SECRET(req, "metaurl", st);
    if (!base)
        return -1;
    if (csi_key_trylock(ctx, req->volume_id) < 0)
        return csi_fail(st, CSI_ABORTED, "an operation on volume %s is already in progress",
                        req->volume_id);

    if (ctl_open_meta(base, req->volume_id, &m, &url, st) < 0) {
        /* a sqlite3 volume whose database is gone: nothing left to delete */
        goto out;
    }
    rc = keg_meta_format_load(m, &f);
    if (rc == -ENOENT) {
        KEG_INFO("volume_id=%s: not found, nothing to delete", req->volume_id);
        if (ctl_is_sqlite(url)) {
            keg_meta_close(m);
            m = NULL;
            ctl_unlink_sqlite(url);
        }
        goto out;
    }
    if (rc < 0) {
        csi_fail(st, csi_code_from_errno(rc), "reading the format of volume %s: %s",
                 req->volume_id, strerror(-rc));
        goto out;
    }
    rc = ctl_open_store(ctx, &f, CTL_SECRET_OPT(req, "access-key"),
                        CTL_SECRET_OPT(req, "secret-key"), &o);
    if (rc < 0) {
        csi_fail(st, CSI_UNAVAILABLE, "cannot open the object store of volume %s: %s",
                 req->volume_id, strerror(-rc));
        goto out;
    }
    char key[160], pol[16] = "";
    snprintf(key, sizeof(key), "%s/" CTL_RECLAIM_KEY, req->volume_id);
    ssize_t n = keg_obj_get(o, key, 0, pol, sizeof(pol) - 1);
    if (n >= 0)
        pol[n] = '\0';
    if (n >= 0 && strcmp(pol, "retain") == 0) {
        KEG_INFO("volume_id=%s: reclaim=retain, namespace and objects kept", req->volume_id);
        goto out;
    }
    char prefix[80], other[40], mkey[128];
    snprintf(prefix, sizeof(prefix), "%s/", req->volume_id);
    keg_volume_marker_key(mkey, sizeof(mkey), req->volume_id);
    rc = keg_volume_marker_check(o, req->volume_id, f.uuid, other);
    if (rc == -EEXIST || rc == -EIO) {
        csi_fail(st, CSI_FAILED_PRECONDITION,
                 "the objects under %s belong to another volume (marker %s names %s, this "
                 "volume is %s): nothing deleted", prefix, mkey,
                 rc == -EIO ? "no volume" : other, f.uuid);
        goto out;
    }
    if (rc < 0 && rc != -ENOENT) {
        csi_fail(st, CSI_UNAVAILABLE, "reading the volume marker %s: %s", mkey, strerror(-rc));
        goto out;
    }
    int marked = rc == 0;
    rc = keg_obj_list(o, prefix, ctl_collect, &keys);
    if (rc < 0) {
        csi_fail(st, csi_code_from_errno(rc) == CSI_INTERNAL ? CSI_UNAVAILABLE
                                                             : csi_code_from_errno(rc),
                 "listing the objects of volume %s: %s", req->volume_id, strerror(-rc));
        goto out;
    }
    if (!marked && keys.n > 0) {
        /* no marker: nothing proves the objects are this volume's */
        csi_fail(st, CSI_FAILED_PRECONDITION,
                 "volume %s has no volume marker %s, so its %zu objects cannot be proven to "
                 "be its own: nothing deleted (run 'kegfs format --force' on the volume's "
                 "metaurl to claim the prefix, then delete again)", req->volume_id, mkey,
                 keys.n);
        goto out;
    }
    for (size_t i = 0; i < keys.n; i++) {
        if (strcmp(keys.v[i], mkey) == 0)
            continue;                   /* last: a retried delete still proves ownership */
        rc = keg_obj_del(o, keys.v[i]);
        if (rc < 0) {
            csi_fail(st, CSI_UNAVAILABLE, "deleting object %s of volume %s: %s", keys.v[i],
                     req->volume_id, strerror(-rc));
            goto out;
        }
    }
    if (marked) {
        rc = keg_obj_del(o, mkey);
        if (rc < 0) {
            csi_fail(st, CSI_UNAVAILABLE, "deleting object %s of volume %s: %s", mkey,
                     req->volume_id, strerror(-rc));
            goto out;
        }
    }
    rc = keg_meta_destroy(m);
    if (rc < 0) {
        csi_fail(st, csi_code_from_errno(rc), "destroying the namespace of volume %s: %s",
                 req->volume_id, strerror(-rc));
        goto out;
    }
    if (ctl_is_sqlite(url)) {
        keg_meta_close(m);
        m = NULL;
        ctl_unlink_sqlite(url);
    }
    KEG_INFO("volume_id=%s deleted: %zu objects removed", req->volume_id, keys.n);

out:
    ctl_keys_free(&keys);
    if (o)
        keg_obj_close(o);
    if (m)
        keg_meta_close(m);
    keg_free(url);
    csi_key_unlock(ctx, req->volume_id);
    return st->code == CSI_OK ? 0 : -1;
}

/*----------------------------------------------------------------------------
 * ControllerExpandVolume
 *--------------------------------------------------------------------------*/

int csi_controller_expand_volume(struct csi_ctx *ctx,
                                 const Csi__V1__ControllerExpandVolumeRequest *req,
                                 Csi__V1__ControllerExpandVolumeResponse *out,
                                 struct csi_status *st)
{
    struct keg_meta *m = NULL;
    struct keg_format f;
    int rc;

    if (csi_check_volume_id(req->volume_id, "volume_id", st) < 0)
        return -1;
    if (!req->capacity_range)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "capacity_range is required");
    int64_t want = req->capacity_range->required_bytes ? req->capacity_range->required_bytes
                                                       : req->capacity_range->limit_bytes;
    if (want <= 0)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "capacity_range must ask for a size > 0");
    if (req->capacity_range->limit_bytes &&
        req->capacity_range->required_bytes > req->capacity_range->limit_bytes)
        return csi_fail(st, CSI_OUT_OF_RANGE, "capacity_range: required_bytes > limit_bytes");
    if (req->volume_capability && csi_check_capability(req->volume_capability, st) < 0)
        return -1;
    const char *base = CTL_SECRET(req, "metaurl", st);
    if (!base)
        return -1;
    if (csi_key_trylock(ctx, req->volume_id) < 0)
        return csi_fail(st, CSI_ABORTED, "an operation on volume %s is already in progress",
                        req->volume_id);

    if (ctl_open_meta(base, req->volume_id, &m, NULL, st) < 0)
        goto out;
    rc = keg_meta_format_load(m, &f);
    if (rc < 0) {
        csi_fail(st, csi_code_from_errno(rc),
                 rc == -ENOENT ? "volume %s does not exist" : "reading volume %s: %s",
                 req->volume_id, strerror(-rc));
        goto out;
    }
    if (f.capacity != 0 && f.capacity >= (uint64_t)want) {
        out->capacity_bytes = (int64_t)f.capacity;      /* never shrinks: idempotent */
        goto out;
    }
    uint64_t old = f.capacity;
    f.capacity = (uint64_t)want;
    rc = keg_meta_format_init(m, &f, 0777, 0, 0, 1);
    if (rc < 0) {
        csi_fail(st, csi_code_from_errno(rc), "raising the quota of volume %s: %s",
                 req->volume_id, strerror(-rc));
        goto out;
    }
    KEG_INFO("volume_id=%s expanded: %" PRIu64 " -> %" PRIu64 " bytes", req->volume_id, old,
             f.capacity);
    out->capacity_bytes = want;
    out->node_expansion_required = 0;

out:
    memset(&f, 0, sizeof(f));
    if (m)
        keg_meta_close(m);
    csi_key_unlock(ctx, req->volume_id);
    return st->code == CSI_OK ? 0 : -1;
}

/*----------------------------------------------------------------------------
 * ValidateVolumeCapabilities, ControllerGetCapabilities
 *--------------------------------------------------------------------------*/

int csi_controller_validate_volume_capabilities(
    struct csi_ctx *ctx, const Csi__V1__ValidateVolumeCapabilitiesRequest *req,
    Csi__V1__ValidateVolumeCapabilitiesResponse *out, struct csi_status *st)
{
    struct keg_meta *m = NULL;
    struct keg_format f;
    KEG_UNUSED(ctx);

    if (csi_check_volume_id(req->volume_id, "volume_id", st) < 0)
        return -1;
    if (req->n_volume_capabilities == 0)
        return csi_fail(st, CSI_INVALID_ARGUMENT, "volume_capabilities are required");
    for (size_t i = 0; i < req->n_volume_capabilities; i++)
        if (!req->volume_capabilities[i] || !req->volume_capabilities[i]->access_mode ||
            req->volume_capabilities[i]->access_type_case ==
                CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE__NOT_SET)
            return csi_fail(st, CSI_INVALID_ARGUMENT,
                            "volume capability %zu needs an access mode and an access type", i);

    /* The volume must exist: find it with the Secret (or the context's URL). */
    const char *base = CSI_MAP_GET(req, secrets, "metaurl");
    int from_ctx = 0;
    if (!base || !*base) {
        base = CSI_MAP_GET(req, volume_context, "metaurl");
        from_ctx = 1;
    }
    if (!base || !*base)
        return csi_fail(st, CSI_INVALID_ARGUMENT,
                        "secret key 'metaurl' missing (needed to look the volume up)");
    if (from_ctx) {
        /* already the namespaced URL of this volume */
        int rc = keg_meta_open(base, &m);
        if (rc < 0)
            return csi_fail(st, CSI_UNAVAILABLE, "cannot reach the metadata engine: %s",
                            strerror(-rc));
    } else if (ctl_open_meta(base, req->volume_id, &m, NULL, st) < 0) {
        return -1;
    }
    int rc = keg_meta_format_load(m, &f);
    memset(&f, 0, sizeof(f));
    keg_meta_close(m);
    if (rc == -ENOENT)
        return csi_fail(st, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
    if (rc < 0)
        return csi_fail(st, csi_code_from_errno(rc), "reading volume %s: %s", req->volume_id,
                        strerror(-rc));

    for (size_t i = 0; i < req->n_volume_capabilities; i++) {
        struct csi_status tmp;
        csi_status_init(&tmp);
        if (csi_check_capability(req->volume_capabilities[i], &tmp) < 0) {
            out->message = csi_strdup(st, tmp.msg);
            return 0;       /* not confirmed, with the reason */
        }
    }
    Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed *c = csi_alloc(st, sizeof(*c));
    if (!c)
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    csi__v1__validate_volume_capabilities_response__confirmed__init(c);
    /* BORROWS the request's messages: the reply is packed before the request is freed. */
    c->n_volume_capabilities = req->n_volume_capabilities;
    c->volume_capabilities = req->volume_capabilities;
    c->n_volume_context = req->n_volume_context;
    c->volume_context = (Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__VolumeContextEntry **)
        req->volume_context;
    c->n_parameters = req->n_parameters;
    c->parameters = (Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__ParametersEntry **)
        req->parameters;
    out->confirmed = c;
    return 0;
}

int csi_controller_get_capabilities(struct csi_ctx *ctx,
                                    const Csi__V1__ControllerGetCapabilitiesRequest *req,
                                    Csi__V1__ControllerGetCapabilitiesResponse *out,
                                    struct csi_status *st)
{
    static const Csi__V1__ControllerServiceCapability__RPC__Type types[] = {
        CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME,
        CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
    };
    const size_t n = sizeof(types) / sizeof(types[0]);
    KEG_UNUSED(ctx);
    KEG_UNUSED(req);
    Csi__V1__ControllerServiceCapability **caps = csi_alloc(st, n * sizeof(*caps));
    if (!caps)
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        Csi__V1__ControllerServiceCapability *c = csi_alloc(st, sizeof(*c));
        Csi__V1__ControllerServiceCapability__RPC *r = csi_alloc(st, sizeof(*r));
        if (!c || !r)
            return csi_fail(st, CSI_INTERNAL, "out of memory");
        csi__v1__controller_service_capability__init(c);
        csi__v1__controller_service_capability__rpc__init(r);
        r->type = types[i];
        c->type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
        c->rpc = r;
        caps[i] = c;
    }
    out->capabilities = caps;
    out->n_capabilities = n;
    return 0;
}
