/* obj.c -- object store registry, instance lifecycle and pass-through ops.
 *
 * DESIGN
 * Backends are found by name in a small table (SQLite sqlite3_vfs_register/find).
 * The built-in backends are registered once, lazily, on the first lookup; which
 * ones exist is decided by the build (KEG_WITH_S3 is defined only when obj_s3.c
 * is compiled in).  An instance is one allocation: struct keg_obj followed by
 * ops->priv_size zeroed bytes that o->priv points to.  Layers own the store
 * below them (o->inner): closing the top closes the stack.
 */
#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdio.h>
#include <string.h>

#define KEG_LOG_TAG "obj"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/obj.h"

extern const struct keg_obj_ops keg_obj_file_ops;
extern const struct keg_obj_ops keg_obj_mem_ops;
extern const struct keg_obj_ops keg_obj_faulty_ops;
extern const struct keg_obj_ops keg_obj_metrics_ops;
extern const struct keg_obj_ops keg_obj_retry_ops;
#ifdef KEG_WITH_S3
extern const struct keg_obj_ops keg_obj_s3_ops;
#endif

#define OBJ_REGISTRY_MAX 32

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct keg_obj_ops *registry[OBJ_REGISTRY_MAX];   /* protected by registry_lock */
static size_t registry_len;                                    /* protected by registry_lock */
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

/* LOCKS: caller holds registry_lock. */
static const struct keg_obj_ops *find_locked(const char *name)
{
    for (size_t i = 0; i < registry_len; i++) {
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    }
    return NULL;
}

/* LOCKS: takes registry_lock. */
static int register_one(const struct keg_obj_ops *ops)
{
    int rc = 0;
    pthread_mutex_lock(&registry_lock);
    if (find_locked(ops->name))
        rc = -EEXIST;
    else if (registry_len == OBJ_REGISTRY_MAX)
        rc = -ENOSPC;
    else
        registry[registry_len++] = ops;
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

#ifdef KEG_WITH_S3
#define OBJ_S3_OPS (&keg_obj_s3_ops)
#else
#define OBJ_S3_OPS NULL
#endif

/* The stores a volume's format can name, in one table: a new store is its
 * file plus one line here.  ops NULL: known, but not compiled into this build. */
static const struct obj_store {
    const char               *name;
    const struct keg_obj_ops *ops;
} obj_stores[] = {
    {"file", &keg_obj_file_ops},
    {"s3", OBJ_S3_OPS},
    {"mem", &keg_obj_mem_ops},
};

/* The layers core/stack.c stacks by name. */
static const struct keg_obj_ops *const obj_layers[] = {
    &keg_obj_faulty_ops,
    &keg_obj_metrics_ops,
    &keg_obj_retry_ops,
};

static _Thread_local uint64_t obj_thread_retries;

void keg_obj_note_retry(void)
{
    obj_thread_retries++;
}

uint64_t keg_obj_thread_retries(void)
{
    return obj_thread_retries;
}

static void register_builtins(void)
{
    for (size_t i = 0; i < sizeof(obj_stores) / sizeof(obj_stores[0]); i++)
        if (obj_stores[i].ops)
            register_one(obj_stores[i].ops);
    for (size_t i = 0; i < sizeof(obj_layers) / sizeof(obj_layers[0]); i++)
        register_one(obj_layers[i]);
}

int keg_obj_store_known(const char *name)
{
    for (size_t i = 0; i < sizeof(obj_stores) / sizeof(obj_stores[0]); i++)
        if (strcmp(obj_stores[i].name, name) == 0)
            return obj_stores[i].ops != NULL;
    return -ENOENT;
}

void keg_obj_store_names(char *buf, size_t size)
{
    size_t n = sizeof(obj_stores) / sizeof(obj_stores[0]), len = 0;

    if (size)
        buf[0] = '\0';
    for (size_t i = 0; i < n && len < size; i++) {
        int w = snprintf(buf + len, size - len, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ",
                         obj_stores[i].name);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* Returns 0, -EINVAL (incomplete ops), -EEXIST (name taken) or -ENOSPC (table full). */
int keg_obj_register(const struct keg_obj_ops *ops)
{
    if (!ops || !ops->name || !ops->open || !ops->close || !ops->get || !ops->put || !ops->del)
        return -EINVAL;
    pthread_once(&builtin_once, register_builtins);
    return register_one(ops);
}

const struct keg_obj_ops *keg_obj_find(const char *name)
{
    const struct keg_obj_ops *ops;
    if (!name)
        return NULL;
    pthread_once(&builtin_once, register_builtins);
    pthread_mutex_lock(&registry_lock);
    ops = find_locked(name);
    pthread_mutex_unlock(&registry_lock);
    return ops;
}

/* The private area starts at the first max-aligned offset after the struct. */
#define OBJ_PRIV_OFF \
    ((sizeof(struct keg_obj) + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1))

/* TAKES: inner (closed here on failure, or later by keg_obj_close of the result).
 * OWNERSHIP: *out is closed with keg_obj_close().
 * conf may be NULL (all defaults).
 * Returns 0, -EINVAL (unknown store name), -ENOMEM or what the backend's open returns. */
int keg_obj_open(const char *name, const struct keg_obj_conf *conf, struct keg_obj *inner,
                 struct keg_obj **out)
{
    static const struct keg_obj_conf zero_conf;
    const struct keg_obj_ops *ops = keg_obj_find(name);
    struct keg_obj *o = NULL;
    int rc;

    *out = NULL;
    if (!conf)
        conf = &zero_conf;
    if (!ops) {
        KEG_ERR("unknown object store \"%s\" (this build has file, mem, faulty%s)",
                name ? name : "(null)", keg_obj_find("s3") ? ", s3" : "");
        rc = -EINVAL;
        goto fail;
    }
    o = keg_calloc(1, OBJ_PRIV_OFF + ops->priv_size);
    if (!o) {
        rc = -ENOMEM;
        goto fail;
    }
    o->ops = ops;
    o->inner = inner;
    o->priv = ops->priv_size ? (char *)o + OBJ_PRIV_OFF : NULL;
    rc = ops->open(o, conf);
    if (rc < 0)
        goto fail;
    *out = o;
    return 0;

fail:
    keg_free(o);
    if (inner)
        keg_obj_close(inner);
    return rc;
}

/* Closes o and every layer below it.  NULL is a no-op. */
void keg_obj_close(struct keg_obj *o)
{
    while (o) {
        struct keg_obj *inner = o->inner;
        o->ops->close(o);
        keg_free(o);
        o = inner;
    }
}

ssize_t keg_obj_def_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len)
{
    return keg_obj_get(o->inner, key, off, buf, len);
}

int keg_obj_def_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    return keg_obj_put(o->inner, key, buf, len);
}

int keg_obj_def_del(struct keg_obj *o, const char *key)
{
    return keg_obj_del(o->inner, key);
}

int keg_obj_del_each(struct keg_obj *o, const char *const *keys, size_t n)
{
    int first = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = keg_obj_del(o, keys[i]);
        if (rc < 0 && !first)
            first = rc;
    }
    return first;
}

int keg_obj_def_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    return keg_obj_head(o->inner, key, size);
}

int keg_obj_def_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg)
{
    return keg_obj_list(o->inner, prefix, cb, arg);
}

int keg_obj_def_sync(struct keg_obj *o)
{
    return keg_obj_sync(o->inner);
}

int keg_obj_def_sync_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    return keg_obj_sync_keys(o->inner, keys, n);
}
