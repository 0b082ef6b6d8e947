/* meta_redis_url.c -- the Redis engine's META_URL: redis://, unix:// and
 * redis+sentinel:// URLs and their query parameters, parsed into struct mr_priv.
 *
 * Every error is logged with the redacted URL (never the password) and returned
 * as -EINVAL (-ENOMEM when out of memory).  What a parse left in p is freed by
 * mr_free_conf(), also after a failure.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "keg/mem.h"
#include "keg/url.h"
#include "meta_redis_conn_i.h"
#include "meta_redis_names_i.h"
#define KEG_LOG_TAG "meta_redis"
#include "keg/log.h"

static int mr_ns_valid(const char *ns)
{
    size_t n = strlen(ns);
    if (n == 0 || n > MR_NS_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = ns[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':'))
            return 0;
    }
    return 1;
}

static int mr_parse_db(const char *s, int *db)
{
    char *end;
    if (!*s)
        return -EINVAL;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > 1000000)
        return -EINVAL;
    *db = (int)v;
    return 0;
}

static int mr_parse_spin(const char *s, int *us)
{
    char *end;
    if (!*s)
        return -EINVAL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < 0 || v > MR_SPIN_MAX_US)
        return -EINVAL;
    *us = (int)v;
    return 0;
}

static int mr_parse_dircache(const char *val, uint32_t *cap)
{
    char *end;
    errno = 0;
    long long v = *val ? strtoll(val, &end, 10) : -1;
    if (!*val || *end || errno || v < 0 || v > MR_DIRCACHE_MAX)
        return -EINVAL;
    *cap = (uint32_t)v;
    return 0;
}

/* ns=NAME: *ns replaced by the unescaped name.  Returns 0, -EINVAL (logged), -ENOMEM. */
static int mr_query_ns(const char *val, const char *red, char **ns)
{
    keg_free(*ns);
    *ns = keg_strdup(val);
    if (!*ns)
        return -ENOMEM;
    if (keg_url_unescape(*ns) || !mr_ns_valid(*ns)) {
        KEG_ERR("META_URL %s: ns must be 1-%d characters of [A-Za-z0-9._:-]", red, MR_NS_MAX);
        return -EINVAL;
    }
    return 0;
}

/* One query parameter key[=val] (has_eq: an '=' was there).  An unknown
 * parameter is an error.  Returns 0, -EINVAL (logged), -ENOMEM. */
static int mr_query_param(struct mr_priv *p, const char *key, const char *val, int has_eq,
                          const char *red, char **ns)
{
    if (strcmp(key, "ns") == 0)
        return mr_query_ns(val, red, ns);
    if (strcmp(key, "db") == 0) {
        if (mr_parse_db(val, &p->db) == 0)
            return 0;
        KEG_ERR("META_URL %s: db must be a number", red);
    } else if (strcmp(key, "spin") == 0) {
        if (mr_parse_spin(val, &p->spin_us) == 0)
            return 0;
        KEG_ERR("META_URL %s: spin must be a number of microseconds 0-%d "
                "(how long to busy-poll for a reply; 0: never)", red, MR_SPIN_MAX_US);
    } else if (strcmp(key, "dircache") == 0) {
        if (mr_parse_dircache(val, &p->names_cap) == 0)
            return 0;
        KEG_ERR("META_URL %s: dircache must be a number of names 0-%d "
                "(names of directories cached to answer lookups; 0: none)", red,
                MR_DIRCACHE_MAX);
    } else if (*key) {
        /* Refused, not ignored: a misspelt ns= would otherwise format or mount
         * the default namespace, which may be another volume. */
        KEG_ERR("META_URL %s: unknown parameter '%s' (known: ns, db, spin, dircache)", red,
                key);
    } else if (has_eq) {
        KEG_ERR("META_URL %s: a parameter without a name ('=%s')", red, val);
    } else {
        return 0;       /* an empty parameter ("a&&b") */
    }
    return -EINVAL;
}

/* Parses the query string (ns=, db=, spin=, dircache=).  An unknown parameter is an
 * error (-EINVAL, logged). */
static int mr_parse_query(struct mr_priv *p, const char *query, const char *red, char **ns)
{
    char *q = keg_strdup(query);
    int rc = 0;
    if (!q)
        return -ENOMEM;
    for (char *s = q; s && *s && rc == 0;) {
        char *amp = strchr(s, '&');
        if (amp)
            *amp = '\0';
        char *eq = strchr(s, '=');
        const char *val = eq ? eq + 1 : "";
        if (eq)
            *eq = '\0';
        rc = mr_query_param(p, s, val, eq != NULL, red, ns);
        s = amp ? amp + 1 : NULL;
    }
    keg_free(q);
    return rc;
}

/* redis://[[user]:password@]host[:port][/db] */
static int mr_url_tcp(struct mr_priv *p, const struct keg_url *u, const char *red)
{
    p->kind = MR_TCP;
    if (!u->host[0] || strchr(u->host, ',')) {
        KEG_ERR("META_URL %s: expected redis://[[user]:password@]host[:port][/db][?ns=NAME]",
                red);
        return -EINVAL;
    }
    p->host = keg_strdup(u->host);
    p->port = u->port ? u->port : 6379;
    return 0;
}

/* unix:///path/to/redis.sock: the path is the socket's, so *path (the db) is "". */
static int mr_url_unix(struct mr_priv *p, const struct keg_url *u, const char *red,
                       const char **path)
{
    p->kind = MR_UNIX;
    if (u->host[0] || u->path[0] != '/' || u->path[1] == '\0') {
        KEG_ERR("META_URL %s: expected unix:///path/to/redis.sock[?db=N&ns=NAME]", red);
        return -EINVAL;
    }
    p->sock = keg_strdup(u->path);
    if (p->sock && keg_url_unescape(p->sock)) {
        KEG_ERR("META_URL %s: bad %%-escape in the socket path", red);
        return -EINVAL;
    }
    *path = "";
    return 0;
}

/* The sentinels "h1:p1,h2:p2" (a single host has its port split off by the URL
 * parser) into p->sentinels.  Returns 0 or -ENOMEM. */
static int mr_url_sentinels(struct mr_priv *p, const struct keg_url *u)
{
    char *hosts = u->port ? keg_asprintf("%s:%d", u->host, u->port) : keg_strdup(u->host);
    if (!hosts)
        return -ENOMEM;
    int n = 1;
    for (const char *c = hosts; *c; c++)
        n += *c == ',';
    p->sentinels = keg_calloc((size_t)n, sizeof(char *));
    for (char *s = hosts; p->sentinels && s;) {
        char *comma = strchr(s, ',');
        if (comma)
            *comma = '\0';
        if (*s)
            p->sentinels[p->nsentinels++] = keg_strdup(s);
        s = comma ? comma + 1 : NULL;
    }
    keg_free(hosts);
    if (!p->sentinels)
        return -ENOMEM;
    for (int i = 0; i < p->nsentinels; i++)
        if (!p->sentinels[i])
            return -ENOMEM;
    return 0;
}

/* redis+sentinel://[:password@]host1:26379,host2:26379/mastername[/db]: *path is
 * what follows the master name. */
static int mr_url_sentinel(struct mr_priv *p, const struct keg_url *u, const char *red,
                           const char **path)
{
    p->kind = MR_SENTINEL;
    if (!u->host[0]) {
        KEG_ERR("META_URL %s: expected redis+sentinel://[:password@]host1:26379,"
                "host2:26379/mastername[/db][?ns=NAME]", red);
        return -EINVAL;
    }
    int rc = mr_url_sentinels(p, u);
    if (rc)
        return rc;
    /* path: /mastername[/db] */
    const char *mn = u->path[0] == '/' ? u->path + 1 : u->path;
    const char *sl = strchr(mn, '/');
    size_t mlen = sl ? (size_t)(sl - mn) : strlen(mn);
    if (mlen == 0 || p->nsentinels == 0) {
        KEG_ERR("META_URL %s: the sentinel URL names no master "
                "(redis+sentinel://host1:26379,host2:26379/mastername)", red);
        return -EINVAL;
    }
    p->master = keg_strndup(mn, mlen);
    *path = sl ? sl : "";
    p->port = 0;
    return 0;
}

/* The address part, by scheme; *path is what is left of the path (the db). */
static int mr_url_address(struct mr_priv *p, const struct keg_url *u, const char *red,
                          const char **path)
{
    *path = u->path;
    if (strcmp(u->scheme, "rediss") == 0) {
        KEG_ERR("META_URL %s: rediss:// needs hiredis with TLS; use stunnel (redis:// to a "
                "local stunnel that wraps the TLS connection)", red);
        return -EINVAL;
    }
    if (strcmp(u->scheme, "redis") == 0)
        return mr_url_tcp(p, u, red);
    if (strcmp(u->scheme, "unix") == 0)
        return mr_url_unix(p, u, red, path);
    if (strcmp(u->scheme, "redis+sentinel") == 0)
        return mr_url_sentinel(p, u, red, path);
    KEG_ERR("META_URL %s: not a redis URL", red);
    return -EINVAL;
}

/* Credentials, then the path "", "/" or "/db". */
static int mr_url_auth_db(struct mr_priv *p, const struct keg_url *u, const char *path,
                          const char *red)
{
    p->user = keg_strdup(u->user);
    p->password = keg_strdup(u->password);
    if ((p->kind == MR_TCP && !p->host) || (p->kind == MR_UNIX && !p->sock) ||
        (p->kind == MR_SENTINEL && !p->master) || !p->user || !p->password)
        return -ENOMEM;
    if (path[0] == '/' && path[1] && mr_parse_db(path + 1, &p->db)) {
        KEG_ERR("META_URL %s: the path must be a database number (/0 .. /15)", red);
        return -EINVAL;
    }
    return 0;
}

int mr_parse_url(struct mr_priv *p, const char *url, const char *red)
{
    struct keg_url u;
    const char *why = NULL;
    const char *path;
    char *ns = NULL;
    int rc = keg_url_parse(url, &u, &why);
    if (rc) {
        KEG_ERR("malformed META_URL %s: %s", red, why ? why : "?");
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    rc = mr_url_address(p, &u, red, &path);
    if (rc == 0)
        rc = mr_url_auth_db(p, &u, path, red);
    if (rc)
        goto out;
    p->spin_us = MR_SPIN_US;
    p->names_cap = MR_NAMES_DEFAULT;
    rc = mr_parse_query(p, u.query, red, &ns);
    if (rc)
        goto out;
    p->prefix = keg_asprintf("{%s}", ns ? ns : MR_NS_DEFAULT);
    if (!p->prefix)
        rc = -ENOMEM;
out:
    keg_free(ns);
    keg_url_free(&u);
    return rc;
}

void mr_free_conf(struct mr_priv *p)
{
    keg_free(p->host);
    keg_free(p->sock);
    keg_free(p->user);
    if (p->password)
        memset(p->password, 0, strlen(p->password));
    keg_free(p->password);
    keg_free(p->prefix);
    for (int i = 0; i < p->nsentinels; i++)
        keg_free(p->sentinels[i]);
    keg_free(p->sentinels);
    keg_free(p->master);
    p->host = p->sock = p->user = p->password = p->prefix = p->master = NULL;
    p->sentinels = NULL;
    p->nsentinels = 0;
}
