/* s3_sign.c -- AWS Signature Version 4 (header authentication) for the S3 store.
 *
 * DESIGN
 * Pure functions over OpenSSL's SHA-256/HMAC, no network.  The steps are those of
 * the S3 API reference ("Authenticating Requests: Using the Authorization Header"):
 *
 *   canonical request = method \n uri \n query \n headers \n\n signed-headers \n payload-hash
 *   string to sign    = "AWS4-HMAC-SHA256" \n amz-date \n scope \n hex(sha256(canonical request))
 *   scope             = yyyymmdd/region/service/aws4_request
 *   signing key       = HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date), region), service), "aws4_request")
 *   signature         = hex(HMAC(signing key, string to sign))
 *
 * The signing key changes once a day; it is cached per signer (date, region and
 * service are fixed per signer apart from the date) under a mutex, so signing is
 * two SHA-256s of short strings plus one HMAC on the hot path.
 * Paths are encoded once per segment (S3 does not double-encode, unlike the
 * other AWS services), and the same encoded path and query go on the wire, so
 * what is signed is what is sent.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "keg/mem.h"
#include "s3_sign_i.h"

/*----------------------------------------------------------------------------
 * Growable string
 *--------------------------------------------------------------------------*/

static int str_reserve(struct s3_str *s, size_t extra)
{
    if (s->oom)
        return -1;
    if (s->len + extra + 1 <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : 128;
    while (cap < s->len + extra + 1)
        cap *= 2;
    char *p = keg_realloc(s->p, cap);
    if (!p) {
        s->oom = 1;
        return -1;
    }
    s->p = p;
    s->cap = cap;
    return 0;
}

void s3_str_add(struct s3_str *s, const char *p, size_t n)
{
    if (str_reserve(s, n) < 0)
        return;
    memcpy(s->p + s->len, p, n);
    s->len += n;
    s->p[s->len] = '\0';
}

void s3_str_adds(struct s3_str *s, const char *p)
{
    s3_str_add(s, p, strlen(p));
}

void s3_str_addc(struct s3_str *s, char c)
{
    s3_str_add(s, &c, 1);
}

void s3_str_addf(struct s3_str *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        s->oom = 1;
        return;
    }
    if (str_reserve(s, (size_t)n) < 0)
        return;
    va_start(ap, fmt);
    vsnprintf(s->p + s->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    s->len += (size_t)n;
}

void s3_str_free(struct s3_str *s)
{
    keg_free(s->p);
    memset(s, 0, sizeof(*s));
}

/*----------------------------------------------------------------------------
 * Encoding and hashing
 *--------------------------------------------------------------------------*/

static const char hexdig_upper[] = "0123456789ABCDEF";
static const char hexdig_lower[] = "0123456789abcdef";

static int is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

void s3_uri_encode(struct s3_str *out, const char *s, size_t n, int keep_slash)
{
    if (str_reserve(out, n * 3) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (is_unreserved(c) || (keep_slash && c == '/')) {
            out->p[out->len++] = (char)c;
        } else {
            out->p[out->len++] = '%';
            out->p[out->len++] = hexdig_upper[c >> 4];
            out->p[out->len++] = hexdig_upper[c & 15];
        }
    }
    out->p[out->len] = '\0';
}

struct enc_param {
    char *name;
    char *value;
};

static int enc_param_cmp(const void *a, const void *b)
{
    const struct enc_param *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static char *encode_dup(const char *s)
{
    struct s3_str e = {0};
    s3_uri_encode(&e, s, strlen(s), 0);
    if (e.oom) {
        s3_str_free(&e);
        return NULL;
    }
    if (!e.p)
        return keg_strdup("");
    return e.p;
}

void s3_canonical_query(struct s3_str *out, const struct s3_kv *params, size_t n)
{
    if (n == 0) {
        s3_str_add(out, "", 0);
        return;
    }
    struct enc_param *ep = keg_calloc(n, sizeof(*ep));
    if (!ep) {
        out->oom = 1;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        ep[i].name = encode_dup(params[i].name);
        ep[i].value = encode_dup(params[i].value ? params[i].value : "");
        if (!ep[i].name || !ep[i].value)
            out->oom = 1;
    }
    if (!out->oom) {
        /* Sorting the encoded forms is what AWS specifies: by code point of the
         * encoded name, then of the encoded value. */
        qsort(ep, n, sizeof(*ep), enc_param_cmp);
        for (size_t i = 0; i < n; i++) {
            if (i)
                s3_str_addc(out, '&');
            s3_str_adds(out, ep[i].name);
            s3_str_addc(out, '=');
            s3_str_adds(out, ep[i].value);
        }
    }
    for (size_t i = 0; i < n; i++) {
        keg_free(ep[i].name);
        keg_free(ep[i].value);
    }
    keg_free(ep);
}

static void to_hex(const unsigned char *in, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexdig_lower[in[i] >> 4];
        out[2 * i + 1] = hexdig_lower[in[i] & 15];
    }
    out[2 * n] = '\0';
}

void s3_sha256_hex(const void *buf, size_t len, char out[S3_SHA256_HEX])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(buf ? buf : (const void *)"", len, md);
    to_hex(md, sizeof(md), out);
}

void s3_amz_date(time_t t, char out[S3_AMZ_DATE])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, S3_AMZ_DATE, "%Y%m%dT%H%M%SZ", &tm);
}

static int hmac256(const void *key, size_t klen, const void *msg, size_t mlen,
                   unsigned char out[32])
{
    unsigned int olen = 0;
    if (!HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &olen) || olen != 32)
        return -EIO;
    return 0;
}

/*----------------------------------------------------------------------------
 * Signer
 *--------------------------------------------------------------------------*/

void s3_signer_fini(struct s3_signer *s)
{
    if (!s->access_key && !s->secret_key && !s->region)
        return;
    keg_free(s->access_key);
    if (s->secret_key) {
        OPENSSL_cleanse(s->secret_key, strlen(s->secret_key));
        keg_free(s->secret_key);
    }
    keg_free(s->session_token);
    keg_free(s->region);
    keg_free(s->service);
    OPENSSL_cleanse(s->key, sizeof(s->key));
    pthread_mutex_destroy(&s->lock);
    memset(s, 0, sizeof(*s));
}

int s3_signer_init(struct s3_signer *s, const char *access_key, const char *secret_key,
                   const char *session_token, const char *region, const char *service)
{
    memset(s, 0, sizeof(*s));
    if (!access_key || !*access_key || !secret_key || !*secret_key || !region || !*region ||
        !service || !*service)
        return -EINVAL;
    if (pthread_mutex_init(&s->lock, NULL) != 0)
        return -ENOMEM;
    s->access_key = keg_strdup(access_key);
    s->secret_key = keg_strdup(secret_key);
    s->region = keg_strdup(region);
    s->service = keg_strdup(service);
    if (session_token && *session_token)
        s->session_token = keg_strdup(session_token);
    if (!s->access_key || !s->secret_key || !s->region || !s->service ||
        (session_token && *session_token && !s->session_token)) {
        s3_signer_fini(s);
        return -ENOMEM;
    }
    return 0;
}

/* Copy the signing key for date (yyyymmdd) into key, deriving it on a miss.
 * LOCKS: takes s->lock. */
static int signing_key(struct s3_signer *s, const char *date, unsigned char key[32])
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (strcmp(s->key_date, date) != 0) {
        struct s3_str k = {0};
        unsigned char a[32], b[32];
        s3_str_adds(&k, "AWS4");
        s3_str_adds(&k, s->secret_key);
        if (k.oom) {
            rc = -ENOMEM;
        } else if (hmac256(k.p, k.len, date, 8, a) < 0 ||
                   hmac256(a, 32, s->region, strlen(s->region), b) < 0 ||
                   hmac256(b, 32, s->service, strlen(s->service), a) < 0 ||
                   hmac256(a, 32, "aws4_request", 12, s->key) < 0) {
            rc = -EIO;
            s->key_date[0] = '\0';
        } else {
            memcpy(s->key_date, date, 8);
            s->key_date[8] = '\0';
        }
        if (k.p)
            OPENSSL_cleanse(k.p, k.len);
        s3_str_free(&k);
        OPENSSL_cleanse(a, sizeof(a));
        OPENSSL_cleanse(b, sizeof(b));
    }
    if (rc == 0)
        memcpy(key, s->key, 32);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* A header prepared for canonicalisation: lower-case name, trimmed value. */
struct canon_hdr {
    char  *name;
    char  *value;
    size_t order;      /* input position: keeps duplicates in sending order */
};

static int canon_hdr_cmp(const void *a, const void *b)
{
    const struct canon_hdr *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Trim leading/trailing blanks and squeeze inner runs of blanks to one space. */
static char *trim_value(const char *v)
{
    size_t n = strlen(v);
    char *o = keg_malloc(n + 1);
    if (!o)
        return NULL;
    size_t w = 0;
    int pending_space = 0;
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        if (c == ' ' || c == '\t') {
            pending_space = w > 0;
            continue;
        }
        if (pending_space)
            o[w++] = ' ';
        pending_space = 0;
        o[w++] = c;
    }
    o[w] = '\0';
    return o;
}

void s3_sign_result_free(struct s3_sign_result *res)
{
    keg_free(res->canonical_request);
    keg_free(res->string_to_sign);
    keg_free(res->signed_headers);
    keg_free(res->authorization);
    memset(res, 0, sizeof(*res));
}

static int valid_amz_date(const char *d)
{
    if (!d || strlen(d) != 16 || d[8] != 'T' || d[15] != 'Z')
        return 0;
    for (int i = 0; i < 15; i++) {
        if (i != 8 && !isdigit((unsigned char)d[i]))
            return 0;
    }
    return 1;
}

int s3_sign(struct s3_signer *s, const struct s3_sign_req *req, struct s3_sign_result *res)
{
    struct canon_hdr *hs = NULL;
    struct s3_str creq = {0}, sts = {0}, sh = {0}, auth = {0};
    unsigned char key[32], sig[32];
    char hash[S3_SHA256_HEX], date[9];
    int rc = 0;

    memset(res, 0, sizeof(*res));
    if (!req->method || !req->uri || req->uri[0] != '/' || !req->payload_hash ||
        !valid_amz_date(req->amz_date) || req->nheaders == 0)
        return -EINVAL;
    memcpy(date, req->amz_date, 8);
    date[8] = '\0';

    hs = keg_calloc(req->nheaders, sizeof(*hs));
    if (!hs)
        return -ENOMEM;
    for (size_t i = 0; i < req->nheaders; i++) {
        const char *n = req->headers[i].name;
        if (!n || !*n) {
            rc = -EINVAL;
            goto out;
        }
        hs[i].name = keg_strdup(n);
        hs[i].value = trim_value(req->headers[i].value ? req->headers[i].value : "");
        hs[i].order = i;
        if (!hs[i].name || !hs[i].value) {
            rc = -ENOMEM;
            goto out;
        }
        for (char *p = hs[i].name; *p; p++)
            *p = (char)tolower((unsigned char)*p);
    }
    qsort(hs, req->nheaders, sizeof(*hs), canon_hdr_cmp);

    /* Canonical request. */
    s3_str_adds(&creq, req->method);
    s3_str_addc(&creq, '\n');
    s3_str_adds(&creq, req->uri);
    s3_str_addc(&creq, '\n');
    s3_str_adds(&creq, req->query ? req->query : "");
    s3_str_addc(&creq, '\n');
    for (size_t i = 0; i < req->nheaders; i++) {
        /* Repeated names are one line with the values comma-joined. */
        if (i > 0 && strcmp(hs[i].name, hs[i - 1].name) == 0 && !creq.oom) {
            creq.len--;                     /* drop the previous '\n' */
            s3_str_addc(&creq, ',');
        } else {
            s3_str_adds(&creq, hs[i].name);
            s3_str_addc(&creq, ':');
            if (sh.len)
                s3_str_addc(&sh, ';');
            s3_str_adds(&sh, hs[i].name);
        }
        s3_str_adds(&creq, hs[i].value);
        s3_str_addc(&creq, '\n');
    }
    s3_str_addc(&creq, '\n');
    s3_str_adds(&creq, sh.p ? sh.p : "");
    s3_str_addc(&creq, '\n');
    s3_str_adds(&creq, req->payload_hash);
    if (creq.oom || sh.oom) {
        rc = -ENOMEM;
        goto out;
    }

    /* String to sign. */
    s3_sha256_hex(creq.p, creq.len, hash);
    s3_str_addf(&sts, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s", req->amz_date, date,
                s->region, s->service, hash);
    if (sts.oom) {
        rc = -ENOMEM;
        goto out;
    }

    rc = signing_key(s, date, key);
    if (rc < 0)
        goto out;
    rc = hmac256(key, sizeof(key), sts.p, sts.len, sig);
    OPENSSL_cleanse(key, sizeof(key));
    if (rc < 0)
        goto out;
    to_hex(sig, sizeof(sig), res->signature);

    s3_str_addf(&auth, "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, "
                "SignedHeaders=%s, Signature=%s", s->access_key, date, s->region, s->service,
                sh.p, res->signature);
    if (auth.oom) {
        rc = -ENOMEM;
        goto out;
    }
    res->canonical_request = creq.p;
    res->string_to_sign = sts.p;
    res->signed_headers = sh.p;
    res->authorization = auth.p;
    memset(&creq, 0, sizeof(creq));
    memset(&sts, 0, sizeof(sts));
    memset(&sh, 0, sizeof(sh));
    memset(&auth, 0, sizeof(auth));

out:
    if (hs) {
        for (size_t i = 0; i < req->nheaders; i++) {
            keg_free(hs[i].name);
            keg_free(hs[i].value);
        }
        keg_free(hs);
    }
    s3_str_free(&creq);
    s3_str_free(&sts);
    s3_str_free(&sh);
    s3_str_free(&auth);
    if (rc < 0)
        memset(res, 0, sizeof(*res));
    return rc;
}

/*----------------------------------------------------------------------------
 * Request headers
 *--------------------------------------------------------------------------*/

void s3_hdr_lines_free(struct s3_hdr_lines *h)
{
    for (size_t i = 0; i < h->n; i++)
        keg_free(h->line[i]);
    memset(h, 0, sizeof(*h));
}

int s3_sign_headers(struct s3_signer *s, const char *method, const char *host, const char *uri,
                    const char *query, const struct s3_kv *extra, size_t nextra,
                    const char *payload_hash, time_t now, struct s3_hdr_lines *out)
{
    struct s3_kv hv[S3_HDR_LINES_MAX];
    struct s3_sign_result res;
    char date[S3_AMZ_DATE];
    size_t n = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    if (nextra + 5 > S3_HDR_LINES_MAX)
        return -EINVAL;
    s3_amz_date(now, date);
    hv[n++] = (struct s3_kv){ "Host", host };
    hv[n++] = (struct s3_kv){ "x-amz-date", date };
    hv[n++] = (struct s3_kv){ "x-amz-content-sha256", payload_hash };
    if (s->session_token)
        hv[n++] = (struct s3_kv){ "x-amz-security-token", s->session_token };
    for (size_t i = 0; i < nextra; i++)
        hv[n++] = extra[i];

    struct s3_sign_req req = {
        .method = method, .uri = uri, .query = query, .headers = hv, .nheaders = n,
        .payload_hash = payload_hash, .amz_date = date,
    };
    rc = s3_sign(s, &req, &res);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        out->line[out->n] = keg_asprintf("%s: %s", hv[i].name, hv[i].value ? hv[i].value : "");
        if (!out->line[out->n])
            goto nomem;
        out->n++;
    }
    out->line[out->n] = keg_asprintf("Authorization: %s", res.authorization);
    if (!out->line[out->n])
        goto nomem;
    out->n++;
    memcpy(out->signature, res.signature, sizeof(out->signature));
    s3_sign_result_free(&res);
    return 0;

nomem:
    s3_sign_result_free(&res);
    s3_hdr_lines_free(out);
    return -ENOMEM;
}
