/* s3_sign_i.h -- private interface of the AWS Signature Version 4 signer (s3_sign.c).
 *
 * Everything here is free of network I/O.  The signer follows the S3 flavour of
 * SigV4: each path segment is URI-encoded once (S3 does not double-encode), the
 * query string is sorted by encoded name then encoded value, header names are
 * lower-cased and values trimmed, and the body is hashed into
 * x-amz-content-sha256 (or "UNSIGNED-PAYLOAD").
 */
#ifndef KEG_S3_SIGN_I_H
#define KEG_S3_SIGN_I_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define S3_SHA256_HEX 65                 /* 64 hex digits + NUL */
#define S3_AMZ_DATE   17                 /* "YYYYMMDDTHHMMSSZ" + NUL */
#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define S3_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

/*---------------------------------------------------------------------------
 * Growable string.  On allocation failure `oom` is set and later appends are
 * no-ops, so a builder checks once at the end.
 *-------------------------------------------------------------------------*/
struct s3_str {
    char  *p;        /* NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
    int    oom;      /* an append failed: contents are incomplete */
};

void s3_str_add(struct s3_str *s, const char *p, size_t n);
void s3_str_adds(struct s3_str *s, const char *p);
void s3_str_addc(struct s3_str *s, char c);
void s3_str_addf(struct s3_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* OWNERSHIP: frees s->p and zeroes s. */
void s3_str_free(struct s3_str *s);

/* A name/value pair: a header or a query parameter (raw, not encoded). */
struct s3_kv {
    const char *name;
    const char *value;   /* NULL is treated as "" */
};

/*---------------------------------------------------------------------------
 * Encoding and hashing
 *-------------------------------------------------------------------------*/

/* Append the AWS URI encoding of s[0..n): unreserved A-Z a-z 0-9 - . _ ~ pass,
 * every other byte becomes %XX (upper-case hex).  keep_slash leaves '/' as is
 * (object key paths). */
void s3_uri_encode(struct s3_str *out, const char *s, size_t n, int keep_slash);
/* Append the canonical query string of params: each name and value encoded,
 * sorted by encoded name then encoded value, joined "n=v&n=v" (a parameter
 * without value gives "n=").  The same string is sent on the wire. */
void s3_canonical_query(struct s3_str *out, const struct s3_kv *params, size_t n);
/* Hex SHA-256 of buf. */
void s3_sha256_hex(const void *buf, size_t len, char out[S3_SHA256_HEX]);
/* "YYYYMMDDTHHMMSSZ" of t (UTC). */
void s3_amz_date(time_t t, char out[S3_AMZ_DATE]);

/*---------------------------------------------------------------------------
 * Signer
 *-------------------------------------------------------------------------*/

struct s3_signer {
    char *access_key;
    char *secret_key;          /* never logged */
    char *session_token;       /* NULL when not set */
    char *region;
    char *service;
    pthread_mutex_t lock;      /* protects the cached signing key */
    char key_date[9];          /* protected by lock: date of key[] ("" = none) */
    unsigned char key[32];     /* protected by lock: kSigning for key_date/region/service */
};

/* Copies the strings.  session_token may be NULL or "".
 * Returns 0, -EINVAL (missing access/secret/region/service) or -ENOMEM.
 * OWNERSHIP: release with s3_signer_fini() (also safe after a failed init). */
int  s3_signer_init(struct s3_signer *s, const char *access_key, const char *secret_key,
                    const char *session_token, const char *region, const char *service);
void s3_signer_fini(struct s3_signer *s);

/* One request to sign. */
struct s3_sign_req {
    const char *method;              /* "GET", "PUT", ... */
    const char *uri;                 /* canonical (already encoded) path, "/" at least */
    const char *query;               /* canonical query (s3_canonical_query), "" or NULL */
    const struct s3_kv *headers;     /* every header to sign, including host and
                                      * x-amz-date (names in any case, values raw) */
    size_t      nheaders;
    const char *payload_hash;        /* hex SHA-256 of the body or UNSIGNED-PAYLOAD */
    const char *amz_date;            /* "YYYYMMDDTHHMMSSZ", same as the x-amz-date header */
};

/* What signing produced.  OWNERSHIP: free with s3_sign_result_free(). */
struct s3_sign_result {
    char *canonical_request;
    char *string_to_sign;
    char *signed_headers;            /* "host;x-amz-date;..." */
    char *authorization;             /* value of the Authorization header */
    char  signature[S3_SHA256_HEX];
};

/* Sign req.  Thread-safe (the signing key cache is locked).
 * Returns 0, -EINVAL (malformed date/headers) or -ENOMEM; *res is zeroed on failure. */
int  s3_sign(struct s3_signer *s, const struct s3_sign_req *req, struct s3_sign_result *res);
void s3_sign_result_free(struct s3_sign_result *res);

/* Headers of one signed request, "Name: value" lines ready to send. */
#define S3_HDR_LINES_MAX 16
struct s3_hdr_lines {
    char  *line[S3_HDR_LINES_MAX];
    size_t n;
    char   signature[S3_SHA256_HEX];
};

/* Build and sign the headers of a request at time now: Host, x-amz-date,
 * x-amz-content-sha256, x-amz-security-token (when the signer has a session
 * token), then extra (e.g. Range, Content-MD5; all signed), then Authorization.
 * uri and query are the canonical (= wire) forms.
 * Returns 0, -EINVAL (too many headers, bad input) or -ENOMEM.
 * OWNERSHIP: s3_hdr_lines_free(out); out is empty on failure. */
int  s3_sign_headers(struct s3_signer *s, const char *method, const char *host, const char *uri,
                     const char *query, const struct s3_kv *extra, size_t nextra,
                     const char *payload_hash, time_t now, struct s3_hdr_lines *out);
void s3_hdr_lines_free(struct s3_hdr_lines *h);

#endif
