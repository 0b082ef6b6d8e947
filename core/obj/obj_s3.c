/* obj_s3.c -- the S3 object store: libcurl + our own SigV4 signer (s3_sign.c).
 *
 * DESIGN
 * conf->bucket is an endpoint URL (rules in docs/internals/S3.md):
 *   s3://bucket[/prefix]                   AWS, virtual-hosted, https://bucket.s3.<region>.amazonaws.com
 *   http(s)://host[:port]/bucket[/prefix]  any S3 server, path-style
 *   ...?style=virtual                      the same URL sent virtual-hosted (bucket.host[:port])
 *   ...?region=<r>                         signing region when conf->region is unset
 * Object key k is stored at <prefix>k.
 *
 * Pool: conf->concurrency (16) CURL easy handles, created on first use and kept
 * for their keep-alive connections.  A caller takes a free handle (waiting on a
 * condvar when all are busy), runs one request with retries on it and gives it
 * back.  DNS and TLS sessions are shared between handles (CURLSH with locks).
 *
 * One request = sign (fresh x-amz-date per attempt) -> curl_easy_perform ->
 * classify (s3_classify) -> done, or back off with full jitter
 * (random in [0, min(10 s, 100 ms * 2^attempt)]) and retry while the deadline
 * (conf->retry_deadline_ms, 60 s) allows.  Retried: 5xx, 429, the codes SlowDown,
 * RequestTimeout, InternalError, ServiceUnavailable, Throttling, and curl
 * connect/timeout/send/recv/empty/partial errors.  Never retried: 400/403/404.
 *
 * Health (docs/s3.md, "When the store fails"): the first retried failure after a
 * success marks the store failing and logs one WARN line (at most one per
 * S3_WARN_EVERY_MS: a flapping store does not flood the log; a long outage
 * repeats it with its age); the next success logs the recovery (INFO) if the
 * failure was announced.  ops->health reports the requests retrying now, the
 * retries and the requests that ran out of retries, for `kegfs stats`.
 *
 * One deadline per read: when a GET runs out of retries, its key is remembered
 * (gone[]) until S3_GONE_MS passes or any request succeeds, and a GET of that
 * key meanwhile fails at once with -EHOSTDOWN.  The kernel reads a failed page
 * again right away (readahead, then the page itself): without this an
 * application would wait two deadlines for one EIO.
 *
 * Bodies: PUT reads the caller's buffer (READFUNCTION, hashed into
 * x-amz-content-sha256); GET writes into the caller's buffer directly and drops
 * anything beyond what was asked.  Error bodies (<Code>, <Message>) go to a small
 * per-request buffer, then to the log with status and key, and to last_error.
 * Credentials never reach the log.
 *
 * Deleting many keys (del_keys: the deletion queue, compaction) sends
 * DeleteObjects (POST ?delete, quiet mode) with up to S3_DEL_BATCH keys: one
 * request instead of one per block.  A batch whose answer lists any <Error>
 * is deleted again key by key; a server that refuses the request itself
 * (400/405/501) gets single DELETEs from then on.
 */
#define _GNU_SOURCE   /* memmem */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#define KEG_LOG_TAG "obj_s3"
#include "keg/hash.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/obj.h"
#include "keg/retry.h"
#include "keg/url.h"
#include "obj_s3_i.h"
#include "s3_sign_i.h"

#define S3_DEFAULT_CONCURRENCY 16
#define S3_MAX_CONCURRENCY     1024
#define S3_DEFAULT_DEADLINE_MS 60000
#define S3_BACKOFF_BASE_MS     100
#define S3_BACKOFF_CAP_MS      10000
#define S3_CONNECT_TIMEOUT_MS  10000
#define S3_LOW_SPEED_BYTES     1024     /* abort an attempt slower than 1 KiB/s ... */
#define S3_LOW_SPEED_SECS      30       /* ... for 30 s */
#define S3_MIN_ATTEMPT_MS      5000     /* an attempt may always take this long */
#define S3_ERRBODY_MAX         4096
#define S3_LIST_MAX_PAGES      1000000
#define S3_GET_EXCESS_MAX      (256u << 10)   /* unranged GET: abort after this much surplus */
#define S3_WARN_EVERY_MS       30000    /* at most one "failing" WARN per 30 s */
#define S3_GONE_MAX            64       /* GET keys remembered as just failed */
#define S3_GONE_MS             10000    /* ... for at most this long */

/*----------------------------------------------------------------------------
 * Instance
 *--------------------------------------------------------------------------*/

struct s3_conn {
    CURL           *h;
    struct s3_conn *next;             /* free list link, protected by obj_s3.lock */
};

struct obj_s3 {
    struct s3_target  t;
    struct s3_signer  signer;
    char             *base_url;       /* "scheme://host[:port]" */
    char             *base_path;      /* encoded "/bucket" or "" (virtual-hosted) */
    char             *ca_file;
    int               insecure;
    unsigned          concurrency;
    uint64_t          deadline_ms;

    CURLSH           *share;
    pthread_mutex_t   share_lock[CURL_LOCK_DATA_LAST];

    pthread_mutex_t   lock;           /* LOCKS: the pool; never held across a request */
    pthread_cond_t    cond;           /* signalled when a handle is returned */
    struct s3_conn   *conns;          /* [concurrency] */
    struct s3_conn   *free_list;      /* protected by lock */
    unsigned          created;        /* protected by lock: conns[0..created) have a handle */

    pthread_mutex_t   err_lock;
    char              last_error[512]; /* protected by err_lock */
    atomic_ulong      retries;        /* attempts that were retried (stats) */
    atomic_int        no_multi_del;   /* the server refused DeleteObjects */
    atomic_ulong      retrying;       /* requests retrying now */
    atomic_ulong      retrying_puts;  /* ... of them PUTs */
    atomic_ulong      failed;         /* requests that ran out of retries */
    atomic_int        failing;        /* 1 while failing_since is set (fast path of s3_ok) */
    /* protected by err_lock: */
    uint64_t          failing_since;  /* mono ms of the first failure since a success, or 0 */
    uint64_t          last_warn;      /* mono ms of the last "failing" WARN, or 0 */
    int               announced;      /* this failure was logged: log the recovery */
    unsigned          ngone;          /* entries used in gone[] */
    struct {
        uint64_t      hash;           /* of the key */
        uint64_t      until;          /* mono ms */
    } gone[S3_GONE_MAX];
};

/*----------------------------------------------------------------------------
 * Process-wide state: curl_global_init, random numbers
 *--------------------------------------------------------------------------*/

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static uint64_t mono_ms(void)
{
    return (uint64_t)keg_mono_ns() / 1000000u;
}

/*----------------------------------------------------------------------------
 * Connection pool
 *--------------------------------------------------------------------------*/

static void share_lock_cb(CURL *h, curl_lock_data data, curl_lock_access acc, void *arg)
{
    struct obj_s3 *s = arg;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&s->share_lock[data]);
}

static void share_unlock_cb(CURL *h, curl_lock_data data, void *arg)
{
    struct obj_s3 *s = arg;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&s->share_lock[data]);
}

/* Take a handle, waiting while all are busy.  Returns NULL on ENOMEM.
 * LOCKS: takes s->lock (not held on return). */
static struct s3_conn *pool_get(struct obj_s3 *s)
{
    struct s3_conn *c = NULL;
    pthread_mutex_lock(&s->lock);
    while (!s->free_list && s->created == s->concurrency)
        pthread_cond_wait(&s->cond, &s->lock);
    if (s->free_list) {
        c = s->free_list;
        s->free_list = c->next;
    } else {
        CURL *h = curl_easy_init();
        if (h) {
            c = &s->conns[s->created++];
            c->h = h;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return c;
}

/* LOCKS: takes s->lock. */
static void pool_put(struct obj_s3 *s, struct s3_conn *c)
{
    pthread_mutex_lock(&s->lock);
    c->next = s->free_list;
    s->free_list = c;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/*----------------------------------------------------------------------------
 * One request
 *--------------------------------------------------------------------------*/

struct s3_req {
    const char          *op;          /* for messages: "GET", "PUT", "LIST" ... */
    const char          *method;
    const char          *key;         /* object key without the store prefix (messages) */
    const char          *uri;         /* canonical = wire path */
    const char          *query;       /* canonical = wire query, "" for none */
    const struct s3_kv  *extra;       /* signed extra headers (Range) */
    size_t               nextra;
    /* upload */
    const char          *body;
    size_t               body_len;
    size_t               body_pos;
    const char          *payload_hash;
    int                  upload;
    int                  head;
    /* download into a fixed buffer (GET) or a growable one (LIST) */
    char                *out;
    size_t               out_cap;
    size_t               out_len;
    uint64_t             skip;        /* bytes to drop when a ranged GET gets 200 */
    uint64_t             range_off;
    int                  ranged;
    uint64_t             excess;      /* bytes received beyond out_cap */
    int                  cut_short;   /* we aborted a body we had enough of */
    struct s3_str       *grow;
    /* per attempt */
    CURL                *h;
    long                 status;      /* 0 until the first body byte (callback) */
    char                 errbody[S3_ERRBODY_MAX];
    size_t               errlen;
    int                  ok_404;      /* 404 is a success (DELETE) */
    int                  ok_412;      /* 412 is an answer (conditional PUT): see status */
    int                  ok_416;      /* 416 is a success (GET past the end) */
    uint64_t             length;      /* HEAD: Content-Length */
};

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct s3_req *r = arg;
    size_t n = size * nmemb;
    if (!r->status) {
        curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
        if (r->status == 200 && r->ranged)
            r->skip = r->range_off;   /* the server ignored Range: drop the head */
    }
    if (r->status < 200 || r->status >= 300) {
        size_t room = sizeof(r->errbody) - 1 - r->errlen;
        size_t k = KEG_MIN(room, n);
        memcpy(r->errbody + r->errlen, ptr, k);
        r->errlen += k;
        r->errbody[r->errlen] = '\0';
        return n;
    }
    if (r->grow) {
        s3_str_add(r->grow, ptr, n);
        return r->grow->oom ? 0 : n;
    }
    size_t off = 0;
    if (r->skip) {
        size_t d = (size_t)KEG_MIN((uint64_t)n, r->skip);
        r->skip -= d;
        off = d;
    }
    /* Whatever goes beyond the caller's buffer is dropped, never written. */
    size_t k = KEG_MIN(n - off, r->out_cap - r->out_len);
    if (k) {
        memcpy(r->out + r->out_len, ptr + off, k);
        r->out_len += k;
    }
    r->excess += n - off - k;
    if (r->out && r->excess > S3_GET_EXCESS_MAX && r->out_len == r->out_cap) {
        /* An unranged GET of an object much larger than asked for: stop
         * downloading (costs the connection, saves the bandwidth). */
        r->cut_short = 1;
        return 0;
    }
    return n;
}

static size_t read_cb(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct s3_req *r = arg;
    size_t n = KEG_MIN(size * nmemb, r->body_len - r->body_pos);
    memcpy(ptr, r->body + r->body_pos, n);
    r->body_pos += n;
    return n;
}

static int seek_cb(void *arg, curl_off_t off, int origin)
{
    struct s3_req *r = arg;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->body_len)
        return CURL_SEEKFUNC_FAIL;
    r->body_pos = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

static void set_last_error(struct obj_s3 *s, const char *msg)
{
    size_t n = KEG_MIN(strlen(msg), sizeof(s->last_error) - 1);
    pthread_mutex_lock(&s->err_lock);
    memcpy(s->last_error, msg, n);
    s->last_error[n] = '\0';
    pthread_mutex_unlock(&s->err_lock);
}

/* Set up r->h for one attempt.  *hdrs receives the header list to free. */
static int setup_attempt(struct obj_s3 *s, struct s3_req *r, uint64_t remain_ms,
                         struct curl_slist **hdrs, char **url)
{
    struct s3_hdr_lines hl;
    CURL *h = r->h;
    int rc;

    *hdrs = NULL;
    *url = NULL;
    rc = s3_sign_headers(&s->signer, r->method, s->t.host, r->uri, r->query, r->extra,
                         r->nextra, r->payload_hash, time(NULL), &hl);
    if (rc < 0)
        return rc;
    struct curl_slist *l = NULL;
    for (size_t i = 0; i < hl.n; i++) {
        struct curl_slist *nl = curl_slist_append(l, hl.line[i]);
        if (!nl)
            goto nomem;
        l = nl;
    }
    /* No "Expect: 100-continue" round trip; no default Accept. */
    const char *more[] = { "Expect:", "Accept:" };
    for (size_t i = 0; i < 2; i++) {
        struct curl_slist *nl = curl_slist_append(l, more[i]);
        if (!nl)
            goto nomem;
        l = nl;
    }
    s3_hdr_lines_free(&hl);
    *url = keg_asprintf("%s%s%s%s", s->base_url, r->uri, *r->query ? "?" : "", r->query);
    if (!*url) {
        curl_slist_free_all(l);
        return -ENOMEM;
    }
    *hdrs = l;

    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, *url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_SHARE, s->share);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)S3_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, (long)S3_LOW_SPEED_BYTES);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)S3_LOW_SPEED_SECS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)KEG_MAX(remain_ms, S3_MIN_ATTEMPT_MS));
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (s->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (s->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, s->ca_file);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    if (r->upload) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        if (strcmp(r->method, "PUT") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);     /* POST ?delete */
        curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, r);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, seek_cb);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
    } else if (r->head) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    }
    return 0;

nomem:
    curl_slist_free_all(l);
    s3_hdr_lines_free(&hl);
    return -ENOMEM;
}

/*----------------------------------------------------------------------------
 * Health: failure and recovery of the store, keys of GETs that just failed
 *--------------------------------------------------------------------------*/

/* A retryable failure (line says what) of a request.  LOCKS: takes err_lock. */
static void s3_failing(struct obj_s3 *s, const char *line)
{
    uint64_t now = mono_ms();
    pthread_mutex_lock(&s->err_lock);
    if (!s->failing_since) {
        s->failing_since = now;
        s->announced = 0;
        atomic_store(&s->failing, 1);
    }
    if (!s->last_warn || now - s->last_warn >= S3_WARN_EVERY_MS) {
        uint64_t age = now - s->failing_since;
        s->last_warn = now;
        s->announced = 1;
        if (age < 1000)
            KEG_WARN("S3 store %s%s is failing: %s; each request is retried for up to %"
                     PRIu64 " s", s->base_url, s->base_path, line, s->deadline_ms / 1000);
        else
            KEG_WARN("S3 store %s%s still failing after %" PRIu64 " s (%lu requests "
                     "retrying, %lu ran out of retries): %s", s->base_url, s->base_path,
                     age / 1000, (unsigned long)atomic_load(&s->retrying),
                     (unsigned long)atomic_load(&s->failed), line);
    }
    pthread_mutex_unlock(&s->err_lock);
}

/* A request got an answer: the store works.  LOCKS: takes err_lock. */
static void s3_ok(struct obj_s3 *s)
{
    if (!atomic_load(&s->failing))
        return;
    uint64_t now = mono_ms();
    pthread_mutex_lock(&s->err_lock);
    if (s->failing_since) {
        if (s->announced)
            KEG_INFO("S3 store %s%s recovered after %.1f s (%lu requests retrying, %lu ran "
                     "out of retries meanwhile)", s->base_url, s->base_path,
                     (double)(now - s->failing_since) / 1000.0,
                     (unsigned long)atomic_load(&s->retrying),
                     (unsigned long)atomic_load(&s->failed));
        s->failing_since = 0;
        s->announced = 0;
        s->ngone = 0;
        atomic_store(&s->failing, 0);
    }
    pthread_mutex_unlock(&s->err_lock);
}

/* Remember that a GET of key ran out of retries.  LOCKS: takes err_lock. */
static void s3_gone_add(struct obj_s3 *s, const char *key)
{
    uint64_t now = mono_ms(), h = keg_fnv1a64_str(key);
    pthread_mutex_lock(&s->err_lock);
    if (s->failing_since) {     /* else a success came in between */
        /* the same key or an expired entry, else a new one, else the oldest */
        unsigned slot = s->ngone;
        for (unsigned i = 0; i < s->ngone && slot == s->ngone; i++)
            if (s->gone[i].hash == h || s->gone[i].until <= now)
                slot = i;
        if (slot == S3_GONE_MAX) {
            slot = 0;
            for (unsigned i = 1; i < s->ngone; i++)
                if (s->gone[i].until < s->gone[slot].until)
                    slot = i;
        } else if (slot == s->ngone) {
            s->ngone++;
        }
        s->gone[slot].hash = h;
        s->gone[slot].until = now + KEG_MIN(s->deadline_ms, (uint64_t)S3_GONE_MS);
    }
    pthread_mutex_unlock(&s->err_lock);
}

/* 1 if a GET of key ran out of retries moments ago, with no success since. */
static int s3_gone(struct obj_s3 *s, const char *key)
{
    int hit = 0;
    if (!atomic_load(&s->failing))
        return 0;
    uint64_t now = mono_ms(), h = keg_fnv1a64_str(key);
    pthread_mutex_lock(&s->err_lock);
    for (unsigned i = 0; i < s->ngone; i++)
        if (s->gone[i].hash == h && s->gone[i].until > now)
            hit = 1;
    pthread_mutex_unlock(&s->err_lock);
    return hit;
}

static int obj_s3_health(struct keg_obj *o, struct keg_obj_health *h)
{
    struct obj_s3 *s = o->priv;
    uint64_t now = mono_ms();
    memset(h, 0, sizeof(*h));
    pthread_mutex_lock(&s->err_lock);
    if (s->failing_since)
        h->failing_ms = KEG_MAX(now - s->failing_since, (uint64_t)1);
    pthread_mutex_unlock(&s->err_lock);
    h->retrying = atomic_load(&s->retrying);
    h->retrying_puts = atomic_load(&s->retrying_puts);
    h->retries = atomic_load(&s->retries);
    h->failed = atomic_load(&s->failed);
    return 0;
}

/*----------------------------------------------------------------------------
 * Requests
 *--------------------------------------------------------------------------*/

/* Run r with retries.  Returns 0 (r->status says which 2xx/accepted status)
 * or the mapped -errno.  LOCKS: takes and returns one pool handle. */
static int s3_do(struct obj_s3 *s, struct s3_req *r)
{
    uint64_t start = mono_ms(), deadline = start + s->deadline_ms;
    int is_get = strcmp(r->op, "GET") == 0 && r->key;
    int is_put = strcmp(r->op, "PUT") == 0;
    int retrying = 0;           /* counted in s->retrying */
    struct s3_conn *c;
    int rc = 0;
    unsigned attempt;

    if (is_get && s3_gone(s, r->key)) {
        KEG_DEBUG("GET %s: ran out of retries moments ago; failing at once", r->key);
        return -EHOSTDOWN;
    }
    c = pool_get(s);
    if (!c)
        return -ENOMEM;
    r->h = c->h;
    for (attempt = 0;; attempt++) {
        struct curl_slist *hdrs = NULL;
        char *url = NULL;
        char code[64], msg[256], line[512];
        uint64_t now = mono_ms();
        int err = 0;

        r->status = 0;
        r->errlen = 0;
        r->errbody[0] = '\0';
        r->out_len = 0;
        r->skip = 0;
        r->excess = 0;
        r->cut_short = 0;
        r->body_pos = 0;
        if (r->grow)
            r->grow->len = 0;
        rc = setup_attempt(s, r, deadline > now ? deadline - now : 0, &hdrs, &url);
        if (rc < 0)
            break;
        CURLcode cc = curl_easy_perform(r->h);
        long status = 0;
        curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &status);
        if (cc == CURLE_OK && r->head) {
            curl_off_t cl = -1;
            curl_easy_getinfo(r->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
            r->length = cl > 0 ? (uint64_t)cl : 0;
        }
        curl_slist_free_all(hdrs);
        keg_free(url);
        r->status = status;
        if (cc == CURLE_WRITE_ERROR && r->grow && r->grow->oom) {
            rc = -ENOMEM;
            break;
        }
        if (cc == CURLE_WRITE_ERROR && r->cut_short) {
            rc = 0;
            break;
        }
        s3_xml_text(r->errbody, r->errlen, "Code", code, sizeof(code));
        s3_xml_text(r->errbody, r->errlen, "Message", msg, sizeof(msg));

        if (cc == CURLE_OK && ((r->ok_404 && status == 404 && strcmp(code, "NoSuchBucket") != 0) ||
                               (r->ok_416 && status == 416) ||
                               (r->ok_412 && status == 412))) {
            s3_ok(s);
            rc = 0;
            break;
        }
        enum s3_verdict v = s3_classify((int)cc, status, code, &err);
        if (v == S3_OK) {
            s3_ok(s);
            rc = 0;
            break;
        }
        if (cc != CURLE_OK)
            snprintf(line, sizeof(line), "%s %s: %s", r->op, r->key ? r->key : "",
                     curl_easy_strerror(cc));
        else if (r->head && !*code)
            snprintf(line, sizeof(line), "%s %s: HTTP %ld", r->op, r->key ? r->key : "", status);
        else
            snprintf(line, sizeof(line), "%s %s: HTTP %ld %s%s%s", r->op, r->key ? r->key : "",
                     status, *code ? code : "(no error code)", *msg ? ": " : "", msg);
        if (v == S3_FAIL) {
            rc = err;
            if (cc == CURLE_OK)
                s3_ok(s);       /* it answered (403, 404, ...): the store is up */
            set_last_error(s, line);
            if (strcmp(code, "NoSuchBucket") == 0)
                KEG_ERR("%s (bucket \"%s\" does not exist at %s)", line, s->t.bucket,
                        s->t.host);
            else if (err == -ENOENT)
                KEG_DEBUG("%s", line);                  /* a missing key is routine */
            else if (status == 403)
                KEG_ERR("%s (check the access key and secret for bucket \"%s\")", line,
                        s->t.bucket);
            else
                KEG_ERR("%s", line);
            break;
        }
        s3_failing(s, line);
        now = mono_ms();
        uint64_t delay = s3_backoff_ms(attempt, S3_BACKOFF_BASE_MS, S3_BACKOFF_CAP_MS, keg_rand64());
        /* The last attempt is made at the deadline rather than given up early. */
        if (now < deadline && now + delay > deadline)
            delay = deadline - now;
        if (now >= deadline) {
            rc = err;
            char fin[640];
            snprintf(fin, sizeof(fin), "%s (gave up after %u attempts in %" PRIu64 " ms)", line,
                     attempt + 1, now - start);
            set_last_error(s, fin);
            KEG_ERR("%s", fin);
            atomic_fetch_add(&s->failed, 1);
            if (is_get)
                s3_gone_add(s, r->key);
            break;
        }
        if (!retrying) {
            retrying = 1;
            atomic_fetch_add(&s->retrying, 1);
            if (is_put)
                atomic_fetch_add(&s->retrying_puts, 1);
        }
        atomic_fetch_add(&s->retries, 1);
        keg_obj_note_retry();
        KEG_DEBUG("%s; retry %u in %" PRIu64 " ms", line, attempt + 1, delay);
        keg_sleep_ms(delay);
    }
    if (retrying) {
        atomic_fetch_sub(&s->retrying, 1);
        if (is_put)
            atomic_fetch_sub(&s->retrying_puts, 1);
    }
    r->h = NULL;
    pool_put(s, c);
    return rc;
}

/* The wire path of key: base_path + "/" + encode(prefix + key).
 * OWNERSHIP: caller keg_free()s.  NULL on ENOMEM. */
static char *object_uri(struct obj_s3 *s, const char *key)
{
    struct s3_str u = {0};
    s3_str_adds(&u, s->base_path);
    s3_str_addc(&u, '/');
    s3_uri_encode(&u, s->t.prefix, strlen(s->t.prefix), 1);
    s3_uri_encode(&u, key, strlen(key), 1);
    if (u.oom) {
        s3_str_free(&u);
        return NULL;
    }
    return u.p;
}

static int check_key(const char *key)
{
    if (!key || !*key) {
        KEG_ERR("empty object key");
        return -EINVAL;
    }
    return 0;
}

/*----------------------------------------------------------------------------
 * Ops
 *--------------------------------------------------------------------------*/

static int obj_s3_head(struct keg_obj *o, const char *key, uint64_t *size);

static void obj_s3_close(struct keg_obj *o)
{
    struct obj_s3 *s = o->priv;
    if (s->conns) {
        for (unsigned i = 0; i < s->created; i++)
            curl_easy_cleanup(s->conns[i].h);
        keg_free(s->conns);
    }
    if (s->share)
        curl_share_cleanup(s->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&s->share_lock[i]);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->err_lock);
    if (atomic_load(&s->retries))
        KEG_DEBUG("closing %s/%s: %lu retried attempts", s->t.host, s->t.bucket,
                  (unsigned long)atomic_load(&s->retries));
    s3_signer_fini(&s->signer);
    s3_target_free(&s->t);
    keg_free(s->base_url);
    keg_free(s->base_path);
    keg_free(s->ca_file);
    memset(s, 0, sizeof(*s));
}

static int obj_s3_open(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    struct obj_s3 *s = o->priv;
    const char *why = NULL;
    struct keg_url u;
    char red[512];
    int rc, have_url = 0;

    memset(s, 0, sizeof(*s));
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&s->share_lock[i], NULL);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    pthread_mutex_init(&s->err_lock, NULL);

    if (!conf->bucket || !*conf->bucket) {
        KEG_ERR("S3 endpoint URL missing (expected http(s)://host[:port]/bucket or "
                "s3://bucket)");
        rc = -EINVAL;
        goto fail;
    }
    keg_url_redact(conf->bucket, red, sizeof(red));
    rc = s3_target_parse(conf->bucket, conf->region, &s->t, &why);
    if (rc < 0) {
        if (rc == -EINVAL)
            KEG_ERR("bad S3 URL \"%s\": %s", red, why);
        goto fail;
    }
    /* Credentials: conf first, else the URL's user:password. */
    memset(&u, 0, sizeof(u));
    if (keg_url_parse(conf->bucket, &u, &why) == 0)
        have_url = 1;
    const char *ak = conf->access_key && *conf->access_key ? conf->access_key
                     : have_url && *u.user ? u.user : NULL;
    const char *sk = conf->secret_key && *conf->secret_key ? conf->secret_key
                     : have_url && *u.password ? u.password : NULL;
    const char *region = conf->region && *conf->region ? conf->region
                         : s->t.region ? s->t.region : S3_DEFAULT_REGION;
    if (!ak || !sk) {
        KEG_ERR("S3 %s missing for %s", !ak ? "access key" : "secret key", red);
        rc = -EINVAL;
    } else {
        rc = s3_signer_init(&s->signer, ak, sk, conf->session_token, region, "s3");
    }
    if (have_url)
        keg_url_free(&u);
    if (rc < 0)
        goto fail;

    s->base_url = keg_asprintf("%s://%s", s->t.scheme, s->t.host);
    if (s->t.virtual_host) {
        s->base_path = keg_strdup("");
    } else {
        struct s3_str bp = {0};
        s3_str_addc(&bp, '/');
        s3_uri_encode(&bp, s->t.bucket, strlen(s->t.bucket), 0);
        s->base_path = bp.oom ? NULL : bp.p;
        if (bp.oom)
            s3_str_free(&bp);
    }
    if (conf->ca_file && *conf->ca_file) {
        if (access(conf->ca_file, R_OK) != 0) {
            rc = -errno;
            KEG_ERR("S3 CA file %s: %s", conf->ca_file, strerror(-rc));
            goto fail;
        }
        s->ca_file = keg_strdup(conf->ca_file);
        if (!s->ca_file) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    if (!s->base_url || !s->base_path) {
        rc = -ENOMEM;
        goto fail;
    }
    s->insecure = conf->insecure;
    s->concurrency = conf->concurrency ? conf->concurrency : S3_DEFAULT_CONCURRENCY;
    if (s->concurrency > S3_MAX_CONCURRENCY)
        s->concurrency = S3_MAX_CONCURRENCY;
    s->deadline_ms = conf->retry_deadline_ms ? conf->retry_deadline_ms : S3_DEFAULT_DEADLINE_MS;

    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) {
        KEG_ERR("curl_global_init: %s", curl_easy_strerror(curl_init_rc));
        rc = -EIO;
        goto fail;
    }
    s->conns = keg_calloc(s->concurrency, sizeof(*s->conns));
    s->share = curl_share_init();
    if (!s->conns || !s->share) {
        rc = -ENOMEM;
        goto fail;
    }
    curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, share_lock_cb);
    curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, share_unlock_cb);
    curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
    curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    if (s->insecure && strcmp(s->t.scheme, "https") == 0)
        KEG_WARN("TLS certificate verification is OFF for %s", s->t.host);
    KEG_INFO("S3 store %s://%s bucket \"%s\" prefix \"%s\" (%s-style, region %s, %u connections)",
             s->t.scheme, s->t.host, s->t.bucket, s->t.prefix,
             s->t.virtual_host ? "virtual-hosted" : "path", region, s->concurrency);
    return 0;

fail:
    obj_s3_close(o);
    return rc;
}

/* One request on one object: checks the key, fills r's key, uri and (empty)
 * query, and runs it.  Returns what s3_do returns, or the key's error. */
static int s3_do_object(struct obj_s3 *s, const char *key, struct s3_req *r)
{
    int rc = check_key(key);
    if (rc < 0)
        return rc;
    char *uri = object_uri(s, key);
    if (!uri)
        return -ENOMEM;
    r->key = key;
    r->uri = uri;
    r->query = "";
    rc = s3_do(s, r);
    keg_free(uri);
    return rc;
}

static ssize_t obj_s3_get(struct keg_obj *o, const char *key, uint64_t off, void *buf,
                          size_t len)
{
    struct obj_s3 *s = o->priv;
    char range[64];
    if (len == 0) {
        uint64_t sz;
        int rc = obj_s3_head(o, key, &sz);
        return rc < 0 ? rc : 0;
    }
    /* A read from offset 0 is sent without Range: radosgw serves ranged GETs of
     * small objects ~20% slower, and whole-block reads are the common case.  A
     * much larger object is cut off after S3_GET_EXCESS_MAX surplus bytes. */
    snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
    const struct s3_kv extra[] = { { "Range", range } };
    struct s3_req r = {
        .op = "GET", .method = "GET",
        .extra = extra, .nextra = off ? 1 : 0, .payload_hash = S3_EMPTY_SHA256,
        .out = buf, .out_cap = len, .ranged = off != 0, .range_off = off, .ok_416 = 1,
    };
    int rc = s3_do_object(s, key, &r);
    if (rc < 0)
        return rc;
    if (r.status == 416)
        return 0;                       /* the range starts at or past the end */
    return (ssize_t)r.out_len;
}

static int obj_s3_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    struct obj_s3 *s = o->priv;
    char hash[S3_SHA256_HEX];
    s3_sha256_hex(buf, len, hash);
    struct s3_req r = {
        .op = "PUT", .method = "PUT",
        .body = buf ? buf : "", .body_len = len, .payload_hash = hash, .upload = 1,
    };
    return s3_do_object(s, key, &r);
}

/* PUT with If-None-Match: * (a 412 answer: the key exists). */
static int obj_s3_put_new(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    struct obj_s3 *s = o->priv;
    char hash[S3_SHA256_HEX];
    s3_sha256_hex(buf, len, hash);
    const struct s3_kv extra[] = { { "If-None-Match", "*" } };
    struct s3_req r = {
        .op = "PUT", .method = "PUT",
        .extra = extra, .nextra = 1,
        .body = buf ? buf : "", .body_len = len, .payload_hash = hash, .upload = 1,
        .ok_412 = 1,
    };
    int rc = s3_do_object(s, key, &r);
    if (rc == 0 && r.status == 412)
        rc = -EEXIST;
    return rc;
}

static int obj_s3_del(struct keg_obj *o, const char *key)
{
    struct obj_s3 *s = o->priv;
    struct s3_req r = {
        .op = "DELETE", .method = "DELETE", .payload_hash = S3_EMPTY_SHA256, .ok_404 = 1,
    };
    int rc = s3_do_object(s, key, &r);
    /* A missing bucket is a configuration error, and del never returns -ENOENT. */
    return rc == -ENOENT ? -EIO : rc;
}

#define S3_DEL_BATCH 1000   /* keys per DeleteObjects request (the S3 limit) */

static void xml_add_escaped(struct s3_str *b, const char *p)
{
    for (; *p; p++) {
        switch (*p) {
        case '&':  s3_str_adds(b, "&amp;"); break;
        case '<':  s3_str_adds(b, "&lt;"); break;
        case '>':  s3_str_adds(b, "&gt;"); break;
        case '"':  s3_str_adds(b, "&quot;"); break;
        case '\'': s3_str_adds(b, "&apos;"); break;
        default:   s3_str_addc(b, *p); break;
        }
    }
}

/* One DeleteObjects request for n <= S3_DEL_BATCH keys.  Returns 0 when the
 * server reported every key deleted, 1 when the keys must be deleted one by
 * one (the answer lists errors, or the server refuses the request), or -errno. */
static int s3_del_batch(struct obj_s3 *s, const char *const *keys, size_t n)
{
    struct s3_str xml = {0}, resp = {0};
    unsigned char md5[EVP_MAX_MD_SIZE];
    unsigned int md5len = 0;
    char md5b64[32], hash[S3_SHA256_HEX];
    char *uri = NULL;
    int rc;

    s3_str_adds(&xml, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
                      "<Delete><Quiet>true</Quiet>");
    for (size_t i = 0; i < n; i++) {
        s3_str_adds(&xml, "<Object><Key>");
        xml_add_escaped(&xml, s->t.prefix);
        xml_add_escaped(&xml, keys[i]);
        s3_str_adds(&xml, "</Key></Object>");
    }
    s3_str_adds(&xml, "</Delete>");
    uri = keg_asprintf("%s/", s->base_path);
    if (xml.oom || !uri) {
        rc = -ENOMEM;
        goto out;
    }
    /* Content-MD5 is required by S3 for this request */
    if (!EVP_Digest(xml.p, xml.len, md5, &md5len, EVP_md5(), NULL) || md5len != 16) {
        rc = -EIO;
        goto out;
    }
    EVP_EncodeBlock((unsigned char *)md5b64, md5, 16);
    s3_sha256_hex(xml.p, xml.len, hash);
    const struct s3_kv extra[] = { { "Content-MD5", md5b64 },
                                   { "Content-Type", "application/xml" } };
    struct s3_req r = {
        .op = "DELETE-OBJECTS", .method = "POST", .key = keys[0], .uri = uri,
        .query = "delete=", .extra = extra, .nextra = 2, .body = xml.p, .body_len = xml.len,
        .payload_hash = hash, .upload = 1, .grow = &resp,
    };
    rc = s3_do(s, &r);
    if (rc == 0 && resp.p && strstr(resp.p, "<Error>")) {
        char code[64];
        s3_xml_text(resp.p, resp.len, "Code", code, sizeof(code));
        KEG_WARN("DELETE-OBJECTS of %zu keys: the server reported errors (first: %s); "
                 "deleting them one by one", n, *code ? code : "?");
        rc = 1;
    } else if (rc < 0 && (r.status == 400 || r.status == 405 || r.status == 501)) {
        KEG_WARN("DELETE-OBJECTS refused (HTTP %ld): deleting keys one by one from now on",
                 r.status);
        atomic_store(&s->no_multi_del, 1);
        rc = 1;
    }
out:
    s3_str_free(&xml);
    s3_str_free(&resp);
    keg_free(uri);
    return rc;
}

static int obj_s3_del_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    struct obj_s3 *s = o->priv;
    int first = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = check_key(keys[i]);
        if (rc < 0)
            return rc;
    }
    for (size_t at = 0; at < n; at += S3_DEL_BATCH) {
        size_t m = KEG_MIN(n - at, (size_t)S3_DEL_BATCH);
        int rc = (m == 1 || atomic_load(&s->no_multi_del)) ? 1 : s3_del_batch(s, keys + at, m);
        if (rc == 1)
            rc = keg_obj_del_each(o, keys + at, m);
        if (rc < 0 && !first)
            first = rc;
    }
    return first;
}

static int obj_s3_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    struct obj_s3 *s = o->priv;
    *size = 0;
    struct s3_req r = {
        .op = "HEAD", .method = "HEAD", .payload_hash = S3_EMPTY_SHA256, .head = 1,
    };
    int rc = s3_do_object(s, key, &r);
    if (rc == 0)
        *size = r.length;
    return rc;
}

struct list_ctx {
    size_t           strip;         /* length of the store prefix to remove */
    keg_obj_list_cb *cb;
    void            *arg;
};

static int list_item(void *arg, const char *key, uint64_t size)
{
    struct list_ctx *lc = arg;
    if (strlen(key) < lc->strip)
        return -EIO;                    /* not under our prefix: server bug */
    return lc->cb(lc->arg, key + lc->strip, size);
}

static int obj_s3_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg)
{
    struct obj_s3 *s = o->priv;
    struct s3_str body = {0};
    char *token = NULL, *full = NULL, *uri = NULL;
    struct list_ctx lc = { strlen(s->t.prefix), cb, arg };
    int rc = 0;

    full = keg_asprintf("%s%s", s->t.prefix, prefix ? prefix : "");
    uri = keg_asprintf("%s/", s->base_path);
    if (!full || !uri) {
        rc = -ENOMEM;
        goto out;
    }
    for (unsigned page = 0; page < S3_LIST_MAX_PAGES; page++) {
        struct s3_kv q[4];
        size_t nq = 0;
        struct s3_str query = {0};
        q[nq++] = (struct s3_kv){ "list-type", "2" };
        q[nq++] = (struct s3_kv){ "encoding-type", "url" };
        if (*full)
            q[nq++] = (struct s3_kv){ "prefix", full };
        if (token)
            q[nq++] = (struct s3_kv){ "continuation-token", token };
        s3_canonical_query(&query, q, nq);
        if (query.oom) {
            s3_str_free(&query);
            rc = -ENOMEM;
            goto out;
        }
        struct s3_req r = {
            .op = "LIST", .method = "GET", .key = prefix ? prefix : "", .uri = uri,
            .query = query.p, .payload_hash = S3_EMPTY_SHA256, .grow = &body,
        };
        rc = s3_do(s, &r);
        s3_str_free(&query);
        if (rc < 0)
            goto out;
        int truncated = 0;
        keg_free(token);
        token = NULL;
        rc = s3_parse_list(body.p, body.len, list_item, &lc, &truncated, &token);
        if (rc == -EIO && !token)
            KEG_ERR("LIST %s: malformed ListObjectsV2 response (%zu bytes)",
                    prefix ? prefix : "", body.len);
        if (rc != 0 || !truncated)
            goto out;
    }
    KEG_ERR("LIST %s: too many pages", prefix ? prefix : "");
    rc = -EIO;
out:
    keg_free(token);
    keg_free(full);
    keg_free(uri);
    s3_str_free(&body);
    return rc;
}

const struct keg_obj_ops keg_obj_s3_ops = {
    .name = "s3",
    .version = 1,
    .caps = KEG_OBJ_CAP_RANGE_GET | KEG_OBJ_CAP_LIST | KEG_OBJ_CAP_DURABLE |
            KEG_OBJ_CAP_RETRIES,
    .priv_size = sizeof(struct obj_s3),
    .open = obj_s3_open,
    .close = obj_s3_close,
    .get = obj_s3_get,
    .put = obj_s3_put,
    .put_new = obj_s3_put_new,
    .del = obj_s3_del,
    .del_keys = obj_s3_del_keys,
    .head = obj_s3_head,
    .list = obj_s3_list,
    .health = obj_s3_health,
};
