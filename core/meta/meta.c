/* meta.c -- metadata engine registry, keg_meta_open/close and shared helpers.
 *
 * DESIGN
 * Engines are `struct keg_meta_ops` tables.  Built-in engines (sqlite3, and
 * redis when built with KEG_WITH_REDIS) are registered on first use of the
 * registry; others may be added with keg_meta_register().  The URL scheme
 * (the text before "://") picks the engine: its ops->name, or one of
 * ops->schemes.  keg_meta_open() allocates the instance and its zeroed private
 * area, keeps the URL and a redacted copy for logs, then calls ops->open.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "keg/mem.h"
#include "keg/meta.h"
#include "keg/url.h"
#define KEG_LOG_TAG "meta"
#include "keg/log.h"

#define META_MAX_ENGINES 16
#define META_SCHEME_MAX  32

extern const struct keg_meta_ops keg_meta_sqlite_ops;
#ifdef KEG_WITH_REDIS
extern const struct keg_meta_ops keg_meta_redis_ops;
#endif

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct keg_meta_ops *reg_ops[META_MAX_ENGINES];   /* protected by reg_lock */
static unsigned reg_n;                                          /* protected by reg_lock */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

/* LOCKS: takes reg_lock. */
static int meta_register_locked(const struct keg_meta_ops *ops)
{
    for (unsigned i = 0; i < reg_n; i++)
        if (reg_ops[i] == ops || strcmp(reg_ops[i]->name, ops->name) == 0)
            return -EEXIST;
    if (reg_n >= META_MAX_ENGINES)
        return -ENOSPC;
    reg_ops[reg_n++] = ops;
    return 0;
}

static void meta_register_builtins(void)
{
    pthread_mutex_lock(&reg_lock);
    meta_register_locked(&keg_meta_sqlite_ops);
#ifdef KEG_WITH_REDIS
    meta_register_locked(&keg_meta_redis_ops);
#endif
    pthread_mutex_unlock(&reg_lock);
}

int keg_meta_register(const struct keg_meta_ops *ops)
{
    if (!ops || !ops->name || !*ops->name)
        return -EINVAL;
    pthread_once(&reg_once, meta_register_builtins);
    pthread_mutex_lock(&reg_lock);
    int rc = meta_register_locked(ops);
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

static int meta_serves(const struct keg_meta_ops *ops, const char *scheme)
{
    if (strcmp(ops->name, scheme) == 0)
        return 1;
    for (const char *const *s = ops->schemes; s && *s; s++)
        if (strcmp(*s, scheme) == 0)
            return 1;
    return 0;
}

const struct keg_meta_ops *keg_meta_find(const char *scheme)
{
    const struct keg_meta_ops *found = NULL;
    if (!scheme)
        return NULL;
    pthread_once(&reg_once, meta_register_builtins);
    pthread_mutex_lock(&reg_lock);
    for (unsigned i = 0; i < reg_n && !found; i++)
        if (meta_serves(reg_ops[i], scheme))
            found = reg_ops[i];
    pthread_mutex_unlock(&reg_lock);
    return found;
}

/* Names of the registered engines, ", "-separated, for error messages. */
static void meta_list_names(char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    pthread_mutex_lock(&reg_lock);
    for (unsigned i = 0; i < reg_n; i++) {
        const char *n = reg_ops[i]->name;
        size_t nl = strlen(n);
        if (o + nl + 3 >= len)
            break;
        if (o) {
            memcpy(buf + o, ", ", 2);
            o += 2;
        }
        memcpy(buf + o, n, nl);
        o += nl;
        buf[o] = '\0';
    }
    pthread_mutex_unlock(&reg_lock);
}

int keg_meta_open(const char *url, struct keg_meta **out)
{
    struct keg_meta *m = NULL;
    char scheme[META_SCHEME_MAX];
    int rc;

    *out = NULL;
    if (!url || !*url) {
        KEG_ERR("empty META_URL (expected e.g. sqlite3:///var/lib/kegfs/meta.db "
                "or redis://host:6379/1)");
        return -EINVAL;
    }
    const char *sep = strstr(url, "://");
    size_t slen = sep ? (size_t)(sep - url) : 0;
    if (!sep || slen == 0 || slen >= sizeof(scheme)) {
        KEG_ERR("META_URL has no scheme (expected e.g. sqlite3:///var/lib/kegfs/meta.db "
                "or redis://host:6379/1)");
        return -EINVAL;
    }
    memcpy(scheme, url, slen);
    scheme[slen] = '\0';
    for (size_t i = 0; i < slen; i++)
        if (scheme[i] >= 'A' && scheme[i] <= 'Z')
            scheme[i] = (char)(scheme[i] - 'A' + 'a');

    const struct keg_meta_ops *ops = keg_meta_find(scheme);
    if (!ops) {
        char names[256];
        meta_list_names(names, sizeof(names));
        /* the scheme is printed only if it looks harmless */
        int printable = 1;
        for (size_t i = 0; i < slen; i++)
            if (!((scheme[i] >= 'a' && scheme[i] <= 'z') || (scheme[i] >= '0' && scheme[i] <= '9') ||
                  scheme[i] == '+' || scheme[i] == '-' || scheme[i] == '.'))
                printable = 0;
        KEG_ERR("unknown metadata engine '%s' in META_URL (supported: %s)",
                printable ? scheme : "?", names);
        return -EINVAL;
    }

    m = keg_calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->ops = ops;
    m->url = keg_strdup(url);
    size_t rlen = strlen(url) * 2 + 64;   /* redaction may lengthen empty secrets */
    m->url_redacted = keg_malloc(rlen);
    if (ops->priv_size)
        m->priv = keg_calloc(1, ops->priv_size);
    m->stats = keg_calloc(KEG_META_OP_N, sizeof(*m->stats));
    if (!m->url || !m->url_redacted || (ops->priv_size && !m->priv) || !m->stats) {
        rc = -ENOMEM;
        goto fail;
    }
    keg_url_redact(url, m->url_redacted, rlen);
    rc = ops->open(m, url);
    KEG_ASSERT(rc <= 0 && rc >= -4095);
    if (rc < 0)
        goto fail;
    *out = m;
    return 0;
fail:
    keg_free(m->stats);
    keg_free(m->priv);
    keg_free(m->url_redacted);
    keg_free(m->url);
    keg_free(m);
    return rc;
}

void keg_meta_close(struct keg_meta *m)
{
    if (!m)
        return;
    if (m->ops->close)
        m->ops->close(m);
    keg_free(m->stats);
    keg_free(m->priv);
    keg_free(m->url_redacted);
    keg_free(m->url);
    keg_free(m);
}

void keg_attr_set_now(int64_t *sec, uint32_t *nsec)
{
    int64_t ns = keg_now_ns();
    *sec = ns / 1000000000LL;
    *nsec = (uint32_t)(ns % 1000000000LL);
}

int keg_meta_open_set(struct keg_meta *m, int has_session, uint64_t *set)
{
    if (!has_session || !m->open_inodes)
        return -1;
    uint32_t n = m->open_inodes(m->open_inodes_arg, set, KEG_META_OPEN_MAX);
    return n > KEG_META_OPEN_MAX ? -1 : (int)n;
}

/* The parent attributes recorded by the last namespace op of this thread. */
static __thread struct keg_attr tl_parents[2];
static __thread int tl_nparents;

void keg_meta_parents_begin(void)
{
    tl_nparents = 0;
}

void keg_meta_parents_add(const struct keg_attr *a)
{
    if (tl_nparents < 2)
        tl_parents[tl_nparents++] = *a;
}

int keg_meta_parents(struct keg_attr *out, int max)
{
    int n = KEG_MIN(tl_nparents, max);
    for (int i = 0; i < n; i++)
        out[i] = tl_parents[i];
    return n;
}
