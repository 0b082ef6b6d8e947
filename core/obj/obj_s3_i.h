/* obj_s3_i.h -- private interface of the S3 object store: the pure helpers (no
 * network I/O) that obj_s3.c uses and unit tests (test_obj_s3_parse.c) and
 * bench/s3_bench.c reach: s3_util.c (endpoint URL, classification, backoff)
 * and s3_xml.c (S3's XML replies, with expat).  obj_s3.c itself exports only
 * its ops table. */
#ifndef KEG_OBJ_S3_I_H
#define KEG_OBJ_S3_I_H

#include <stddef.h>
#include <stdint.h>

#define S3_DEFAULT_REGION "us-east-1"

/* Where requests go, parsed from conf->bucket. */
struct s3_target {
    char *scheme;          /* "http" or "https" */
    char *host;            /* host[:port] sent in the Host header and URL */
    char *bucket;
    char *prefix;          /* "" or "dir/" (always ends in '/') */
    char *region;          /* from ?region= or NULL */
    int   virtual_host;    /* 1: bucket.host/key, 0: host/bucket/key */
};

/* Parse an endpoint URL (rules in docs/internals/S3.md):
 *   s3://bucket[/prefix]                     AWS, virtual-hosted, s3.<region>.amazonaws.com
 *   http(s)://host[:port]/bucket[/prefix]    path-style
 *   ...?style=virtual                        virtual-hosted: bucket.host[:port]
 *   ...?region=xx                            region (conf->region wins)
 * region is used only to build the AWS host for s3://.
 * Returns 0 or -EINVAL (*why says what is wrong).
 * OWNERSHIP: s3_target_free(). */
int  s3_target_parse(const char *url, const char *region, struct s3_target *t, const char **why);
void s3_target_free(struct s3_target *t);

/* One object of a ListObjectsV2 page. */
typedef int s3_list_item_fn(void *arg, const char *key, uint64_t size);

/* Parse a ListObjectsV2 result: calls fn for each <Contents> (<Key>, <Size>),
 * keys XML-unescaped (and URL-decoded when <EncodingType>url</EncodingType>).
 * *truncated and *next_token (OWNERSHIP: caller keg_free()s; NULL when absent)
 * are set on every path.  Returns 0, fn's non-zero value, -EIO (malformed) or -ENOMEM. */
int s3_parse_list(const char *xml, size_t len, s3_list_item_fn *fn, void *arg, int *truncated,
                  char **next_token);

/* Copy the text of the first <tag>...</tag> of an error body into out
 * (XML-unescaped, truncated to size).  Returns 1 if found, else 0 (out = ""). */
int s3_xml_text(const char *xml, size_t len, const char *tag, char *out, size_t size);

/* What to do after one attempt. */
enum s3_verdict {
    S3_OK,              /* 2xx (or an accepted status) */
    S3_RETRY,           /* transient: back off and try again */
    S3_FAIL,            /* permanent: return the mapped errno */
};

/* Classify an attempt: curl_code is the CURLcode (0 when a response came),
 * status the HTTP status, code the S3 error <Code> ("" if none).  *err is the
 * -errno to return if this is final (also when retries run out). */
enum s3_verdict s3_classify(int curl_code, long status, const char *code, int *err);

/* Full-jitter backoff: a delay in [0, min(cap, base * 2^attempt)] from rnd. */
uint64_t s3_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms, uint64_t rnd);

#endif
