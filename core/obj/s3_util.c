/* s3_util.c -- the S3 client's pure helpers (obj_s3_i.h): endpoint URL and
 * addressing, classification of an attempt for retries, backoff.  No network
 * I/O; unit-tested by test_obj_s3_parse.c.  The XML replies are read in
 * s3_xml.c. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "keg/mem.h"
#include "keg/retry.h"
#include "keg/url.h"
#include "obj_s3_i.h"

void s3_target_free(struct s3_target *t)
{
    keg_free(t->scheme);
    keg_free(t->host);
    keg_free(t->bucket);
    keg_free(t->prefix);
    keg_free(t->region);
    memset(t, 0, sizeof(*t));
}

static int dns_bucket_ok(const char *b)
{
    size_t n = strlen(b);
    if (n < 3 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return 0;
    }
    return b[0] != '-' && b[0] != '.' && b[n - 1] != '-' && b[n - 1] != '.';
}

static int path_bucket_ok(const char *b)
{
    if (!*b || strlen(b) > 255)
        return 0;
    for (const char *p = b; *p; p++) {
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_')
            return 0;
    }
    return 1;
}

/* Parse "k=v&k=v" options of the endpoint URL into t. */
static int parse_url_options(const char *query, struct s3_target *t, int *style_set,
                             const char **why)
{
    char *q = keg_strdup(query);
    int rc = 0;
    if (!q)
        return -ENOMEM;
    char *next = q;
    while (next) {
        char *kv = next;
        char *amp = strchr(kv, '&');
        next = amp ? amp + 1 : NULL;
        if (amp)
            *amp = '\0';
        char *eq = strchr(kv, '=');
        const char *v = eq ? eq + 1 : "";
        if (eq)
            *eq = '\0';
        if (strcmp(kv, "style") == 0) {
            if (strcmp(v, "virtual") == 0) {
                t->virtual_host = 1;
            } else if (strcmp(v, "path") == 0) {
                t->virtual_host = 0;
            } else {
                *why = "style must be \"path\" or \"virtual\"";
                rc = -EINVAL;
                break;
            }
            *style_set = 1;
        } else if (strcmp(kv, "region") == 0) {
            if (!*v) {
                *why = "empty region";
                rc = -EINVAL;
                break;
            }
            keg_free(t->region);
            t->region = keg_strdup(v);
            if (!t->region) {
                rc = -ENOMEM;
                break;
            }
        } else if (*kv) {
            *why = "unknown URL option (known: style=path|virtual, region=...)";
            rc = -EINVAL;
            break;
        }
    }
    keg_free(q);
    return rc;
}

int s3_target_parse(const char *url, const char *region, struct s3_target *t, const char **why)
{
    struct keg_url u;
    const char *uwhy = NULL;
    int style_set = 0, rc;
    char *path = NULL;

    memset(t, 0, sizeof(*t));
    *why = NULL;
    rc = keg_url_parse(url, &u, &uwhy);
    if (rc < 0) {
        *why = uwhy ? uwhy : "malformed URL";
        return -EINVAL;
    }
    rc = -EINVAL;
    int aws = strcmp(u.scheme, "s3") == 0;
    if (!aws && strcmp(u.scheme, "http") != 0 && strcmp(u.scheme, "https") != 0) {
        *why = "scheme must be s3://, http:// or https://";
        goto fail;
    }
    if (!*u.host) {
        *why = "no host in URL";
        goto fail;
    }
    if (*u.query) {
        rc = parse_url_options(u.query, t, &style_set, why);
        if (rc < 0)
            goto fail;
        rc = -EINVAL;
    }
    /* path without leading/trailing slashes */
    const char *p = u.path;
    while (*p == '/')
        p++;
    path = keg_strdup(p);
    if (!path) {
        rc = -ENOMEM;
        goto fail;
    }
    size_t pl = strlen(path);
    while (pl && path[pl - 1] == '/')
        path[--pl] = '\0';
    if (keg_url_unescape(path) < 0) {
        *why = "bad %-escape in path";
        goto fail;
    }

    const char *prefix;
    if (aws) {
        if (u.port) {
            *why = "s3://bucket takes no port (use http(s)://host:port/bucket)";
            goto fail;
        }
        t->bucket = keg_strdup(u.host);
        prefix = path;
        if (!style_set)
            t->virtual_host = 1;
        const char *r = region && *region ? region : t->region ? t->region : S3_DEFAULT_REGION;
        t->host = keg_asprintf("s3.%s.amazonaws.com", r);
        t->scheme = keg_strdup("https");
    } else {
        char *slash = strchr(path, '/');
        if (slash)
            *slash = '\0';
        t->bucket = keg_strdup(path);
        prefix = slash ? slash + 1 : "";
        int v6 = strchr(u.host, ':') != NULL;
        if (u.port)
            t->host = keg_asprintf(v6 ? "[%s]:%d" : "%s:%d", u.host, u.port);
        else
            t->host = keg_asprintf(v6 ? "[%s]" : "%s", u.host);
        t->scheme = keg_strdup(u.scheme);
    }
    if (!t->bucket || !t->host || !t->scheme) {
        rc = -ENOMEM;
        goto fail;
    }
    if (!*t->bucket) {
        *why = "no bucket in URL (expected http(s)://host[:port]/bucket[/prefix] or s3://bucket)";
        goto fail;
    }
    if (t->virtual_host ? !dns_bucket_ok(t->bucket) : !path_bucket_ok(t->bucket)) {
        *why = t->virtual_host ? "bucket name is not DNS-compatible (needed for virtual-hosted "
                                 "addressing: 3-63 of a-z 0-9 . -)"
                               : "invalid bucket name";
        goto fail;
    }
    if (t->virtual_host) {
        char *h = keg_asprintf("%s.%s", t->bucket, t->host);
        if (!h) {
            rc = -ENOMEM;
            goto fail;
        }
        keg_free(t->host);
        t->host = h;
    }
    t->prefix = *prefix ? keg_asprintf("%s/", prefix) : keg_strdup("");
    if (!t->prefix) {
        rc = -ENOMEM;
        goto fail;
    }
    keg_free(path);
    keg_url_free(&u);
    return 0;

fail:
    keg_free(path);
    keg_url_free(&u);
    s3_target_free(t);
    return rc;
}

static int code_is(const char *code, const char *what)
{
    return code && strcmp(code, what) == 0;
}

enum s3_verdict s3_classify(int curl_code, long status, const char *code, int *err)
{
    *err = 0;
    switch ((CURLcode)curl_code) {
    case CURLE_OK:
        break;
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        /* no (complete) answer: retried until the deadline, then "timed out" */
        *err = -ETIMEDOUT;
        return S3_RETRY;
    default:
        *err = -EIO;
        return S3_FAIL;
    }
    if (status >= 200 && status < 300)
        return S3_OK;
    /* Codes first: S3 sends RequestTimeout as a 400 and SlowDown as a 503. */
    if (code_is(code, "SlowDown") || code_is(code, "Throttling") ||
        code_is(code, "ServiceUnavailable") || code_is(code, "InternalError")) {
        *err = -EAGAIN;
        return S3_RETRY;
    }
    if (code_is(code, "RequestTimeout")) {
        *err = -ETIMEDOUT;
        return S3_RETRY;
    }
    if (code_is(code, "QuotaExceeded") || code_is(code, "InsufficientStorage") ||
        code_is(code, "EntityTooLarge") || status == 507) {
        *err = code_is(code, "EntityTooLarge") ? -EFBIG : -ENOSPC;
        return S3_FAIL;
    }
    if (status == 501 || code_is(code, "NotImplemented")) {
        *err = -EOPNOTSUPP;         /* the server lacks the feature: no retry helps */
        return S3_FAIL;
    }
    if (status == 429 || status >= 500) {
        *err = -EAGAIN;
        return S3_RETRY;
    }
    if (status == 404)
        *err = -ENOENT;
    else if (status == 403 || status == 401)
        *err = -EACCES;
    else if (status == 400)
        *err = -EINVAL;
    else
        *err = -EIO;
    return S3_FAIL;
}

uint64_t s3_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms, uint64_t rnd)
{
    return rnd % (keg_backoff_ms(attempt, base_ms, cap_ms) + 1);
}

