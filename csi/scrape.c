/* scrape.c -- the mounters' /metrics, fetched over their unix sockets and merged into
 * the node plugin's own (see scrape.h).
 *
 * DESIGN
 * Fetching: one libcurl easy handle per mounter (CURLOPT_UNIX_SOCKET_PATH, GET
 * http://localhost/metrics), all in one multi handle, so N mounters cost the time of the
 * slowest, not the sum.  Each transfer has its own timeout and the loop a deadline: a
 * mounter that accepts and never answers (a stopped process, a worker stuck in its
 * file system) costs one timeout, and the plugin's scrape still answers.  The loop runs
 * in the scraping thread (libmicrohttpd's), so the plugin's endpoint serves one scrape
 * at a time; the deadline bounds that too.
 *
 * Merging: families are kept in the order first seen, each with its HELP, TYPE and a
 * buffer of sample lines.  A text is read line by line; "# HELP" / "# TYPE" select the
 * family the samples below belong to, and a sample is taken only if its name is that
 * family's (a histogram's _bucket, _sum and _count too) and its labels parse.  The
 * label mounter="<id>" goes first, so no sample is rewritten beyond that insertion and
 * a malformed line never reaches the output (Prometheus rejects a whole scrape for one
 * bad line).
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "keg/keg.h"
#include "keg/mem.h"
#include "keg/metrics.h"
#include "scrape.h"
#define KEG_LOG_TAG "csi.scrape"
#include "keg/log.h"

/*----------------------------------------------------------------------------
 * Growing buffers
 *--------------------------------------------------------------------------*/

struct sc_buf {
    char  *p;
    size_t len, cap;
};

/* Append n bytes.  Returns 0 or -ENOMEM (b unchanged). */
static int sc_put(struct sc_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (b->len + n + 1 > nc)
            nc *= 2;
        char *np = keg_realloc(b->p, nc);
        if (!np)
            return -ENOMEM;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static int sc_puts(struct sc_buf *b, const char *s)
{
    return sc_put(b, s, strlen(s));
}

/*----------------------------------------------------------------------------
 * Families
 *--------------------------------------------------------------------------*/

struct sc_family {
    char         *name;
    char         *type;   /* from the first # TYPE seen, NULL: none yet */
    char         *help;   /* from the first # HELP seen (escaped as received), or NULL */
    struct sc_buf samples;
};

struct csi_scrape {
    struct sc_family *fam;
    size_t n, cap;
};

int csi_scrape_new(struct csi_scrape **out)
{
    *out = keg_calloc(1, sizeof(**out));
    return *out ? 0 : -ENOMEM;
}

void csi_scrape_free(struct csi_scrape *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        keg_free(m->fam[i].name);
        keg_free(m->fam[i].type);
        keg_free(m->fam[i].help);
        keg_free(m->fam[i].samples.p);
    }
    keg_free(m->fam);
    keg_free(m);
}

/* The family called name (len bytes), added if new.  NULL on ENOMEM. */
static struct sc_family *sc_family(struct csi_scrape *m, const char *name, size_t len)
{
    for (size_t i = 0; i < m->n; i++)
        if (strlen(m->fam[i].name) == len && memcmp(m->fam[i].name, name, len) == 0)
            return &m->fam[i];
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        struct sc_family *nf = keg_realloc(m->fam, nc * sizeof(*nf));
        if (!nf)
            return NULL;
        m->fam = nf;
        m->cap = nc;
    }
    struct sc_family *f = &m->fam[m->n];
    memset(f, 0, sizeof(*f));
    f->name = keg_strndup(name, len);
    if (!f->name)
        return NULL;
    m->n++;
    return f;
}

static int sc_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static int sc_name_char(char c)
{
    return sc_name_start(c) || (c >= '0' && c <= '9');
}

/* Length of the metric name at s (0: none). */
static size_t sc_name_len(const char *s, const char *end)
{
    size_t n = 0;
    if (s >= end || !sc_name_start(*s))
        return 0;
    while (s + n < end && sc_name_char(s[n]))
        n++;
    return n;
}

/* Whether sample name (len) belongs to family f. */
static int sc_of_family(const struct sc_family *f, const char *name, size_t len)
{
    static const char *const suffix[] = {"_bucket", "_sum", "_count"};
    size_t fl = strlen(f->name);
    if (len == fl)
        return memcmp(name, f->name, fl) == 0;
    if (len < fl || memcmp(name, f->name, fl) != 0 || !f->type ||
        (strcmp(f->type, "histogram") != 0 && strcmp(f->type, "summary") != 0))
        return 0;
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++)
        if (len - fl == strlen(suffix[i]) && memcmp(name + fl, suffix[i], len - fl) == 0)
            return 1;
    return 0;
}

/* Check the label set at p ('{' ... '}') up to end.  *close gets the '}'.
 * Returns 1 if it parses and has no label called "mounter", else 0. */
static int sc_labels_ok(const char *p, const char *end, const char **close)
{
    p++;                                    /* '{' */
    while (p < end && *p != '}') {
        const char *ln = p;
        if (!sc_name_start(*p) || *p == ':')
            return 0;
        while (p < end && sc_name_char(*p) && *p != ':')
            p++;
        if ((size_t)(p - ln) == 7 && memcmp(ln, "mounter", 7) == 0)
            return 0;
        if (p + 1 >= end || p[0] != '=' || p[1] != '"')
            return 0;
        p += 2;
        while (p < end && *p != '"') {
            if (*p == '\\') {
                if (p + 1 >= end || (p[1] != '\\' && p[1] != '"' && p[1] != 'n'))
                    return 0;
                p++;
            }
            p++;
        }
        if (p >= end)
            return 0;
        p++;                                /* closing '"' */
        if (p < end && *p == ',')
            p++;
        else if (p < end && *p != '}')
            return 0;
    }
    if (p >= end)
        return 0;
    *close = p;
    return 1;
}

/* The value part " VALUE[ TIMESTAMP]": printable, non-empty. */
static int sc_value_ok(const char *p, const char *end)
{
    if (p >= end || *p != ' ' || p + 1 >= end)
        return 0;
    for (const char *q = p + 1; q < end; q++)
        if ((unsigned char)*q < ' ' || *q == 0x7f || *q == '{' || *q == '}')
            return 0;
    return 1;
}

/* Append the sample line [s, end) of family f with mounter="idlab" put first.
 * Returns 1 taken, 0 dropped (malformed), -ENOMEM. */
static int sc_sample(struct sc_family *f, const char *s, const char *end, size_t nlen,
                     const char *idlab)
{
    const char *p = s + nlen, *close = NULL, *inner = NULL;
    if (p < end && *p == '{') {
        if (!sc_labels_ok(p, end, &close))
            return 0;
        inner = p + 1;
        p = close + 1;
    }
    if (!sc_value_ok(p, end))
        return 0;
    struct sc_buf *b = &f->samples;
    size_t old = b->len;
    int rc = sc_put(b, s, nlen);
    if (!rc)
        rc = sc_puts(b, "{mounter=\"");
    if (!rc)
        rc = sc_puts(b, idlab);
    if (!rc)
        rc = sc_puts(b, "\"");
    if (!rc && inner && inner < close) {
        rc = sc_puts(b, ",");
        if (!rc)
            rc = sc_put(b, inner, (size_t)(close - inner));
    }
    if (!rc)
        rc = sc_puts(b, "}");
    if (!rc)
        rc = sc_put(b, p, (size_t)(end - p));
    if (!rc)
        rc = sc_puts(b, "\n");
    if (rc) {
        b->len = old;           /* no half line */
        if (b->p)
            b->p[old] = '\0';
        return rc;
    }
    return 1;
}

/* "# HELP name text" / "# TYPE name type": the family it names, into *cur (NULL for
 * one of the plugin's own), and whether this text's samples of it are taken.
 * Returns 0 or -ENOMEM. */
static int sc_comment(struct csi_scrape *m, const char *s, const char *end,
                      struct sc_family **cur, int *take)
{
    int is_type = end - s > 7 && memcmp(s, "# TYPE ", 7) == 0;
    int is_help = end - s > 7 && memcmp(s, "# HELP ", 7) == 0;
    if (!is_type && !is_help)
        return 0;                           /* another comment: nothing changes */
    const char *name = s + 7;
    size_t nlen = sc_name_len(name, end);
    const char *rest = name + nlen;
    *cur = NULL;
    *take = 0;
    if (!nlen || (rest < end && *rest != ' '))
        return 0;                           /* malformed: its samples are dropped */
    if (nlen >= 10 && memcmp(name, "kegfs_csi_", 10) == 0)
        return 0;
    struct sc_family *f = sc_family(m, name, nlen);
    if (!f)
        return -ENOMEM;
    const char *arg = rest < end ? rest + 1 : end;
    *cur = f;
    *take = 1;
    if (is_help) {
        if (!f->help) {
            f->help = keg_strndup(arg, (size_t)(end - arg));
            if (!f->help)
                return -ENOMEM;
        }
        return 0;
    }
    size_t tl = (size_t)(end - arg);
    if (!f->type) {
        static const char *const types[] = {"counter", "gauge", "histogram", "summary",
                                            "untyped"};
        int known = 0;
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
            known |= tl == strlen(types[i]) && memcmp(arg, types[i], tl) == 0;
        if (!known) {
            *take = 0;
            return 0;
        }
        f->type = keg_strndup(arg, tl);
        return f->type ? 0 : -ENOMEM;
    }
    if (strlen(f->type) != tl || memcmp(f->type, arg, tl) != 0)
        *take = 0;                          /* another mounter says otherwise: skip */
    return 0;
}

int csi_scrape_add(struct csi_scrape *m, const char *text, size_t len, const char *id)
{
    char idlab[64];
    struct sc_family *cur = NULL;
    int take = 0, taken = 0;
    const char *p = text, *end = text + len;
    keg_metrics_escape(id, idlab, sizeof(idlab));
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (le > p && le[-1] == '\r')
            le--;
        if (le > p && *p == '#') {
            if (sc_comment(m, p, le, &cur, &take) < 0)
                return -ENOMEM;
        } else if (le > p && cur && take) {
            size_t nlen = sc_name_len(p, le);
            if (nlen && sc_of_family(cur, p, nlen)) {
                int rc = sc_sample(cur, p, le, nlen, idlab);
                if (rc < 0)
                    return rc;
                taken += rc;
            }
        }
        p = nl ? nl + 1 : end;
    }
    return taken;
}

void csi_scrape_write(const struct csi_scrape *m, FILE *f)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct sc_family *fm = &m->fam[i];
        if (!fm->type && !fm->samples.len)
            continue;
        if (fm->help)
            fprintf(f, "# HELP %s %s\n", fm->name, fm->help);
        fprintf(f, "# TYPE %s %s\n", fm->name, fm->type ? fm->type : "untyped");
        if (fm->samples.len)
            fwrite(fm->samples.p, 1, fm->samples.len, f);
    }
}

/*----------------------------------------------------------------------------
 * Fetching
 *--------------------------------------------------------------------------*/

struct sc_xfer {
    CURL         *h;
    struct sc_buf body;
    int           too_big;
    int           done;        /* libcurl finished it ... */
    CURLcode      result;      /* ... with this */
};

static size_t sc_write_cb(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct sc_xfer *x = arg;
    size_t n = size * nmemb;
    if (x->body.len + n > CSI_SCRAPE_MAX_BYTES) {
        x->too_big = 1;
        return 0;               /* aborts the transfer */
    }
    return sc_put(&x->body, ptr, n) == 0 ? n : 0;
}

int csi_scrape_fetch(struct csi_scrape *m, const struct csi_scrape_src *src, size_t n,
                     unsigned timeout_ms, unsigned deadline_ms, size_t *failed)
{
    int rc = 0;
    *failed = n;
    if (!n)
        return 0;
    struct sc_xfer *x = keg_calloc(n, sizeof(*x));
    CURLM *mh = curl_multi_init();
    if (!x || !mh) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        CURL *h = curl_easy_init();
        if (!h) {
            rc = -EIO;
            goto out;
        }
        x[i].h = h;
        if (curl_easy_setopt(h, CURLOPT_URL, "http://localhost/metrics") != CURLE_OK ||
            curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, src[i].socket) != CURLE_OK ||
            curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
            curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms) != CURLE_OK ||
            curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms) != CURLE_OK ||
            curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sc_write_cb) != CURLE_OK ||
            curl_easy_setopt(h, CURLOPT_WRITEDATA, &x[i]) != CURLE_OK ||
            curl_easy_setopt(h, CURLOPT_PRIVATE, &x[i]) != CURLE_OK ||
            curl_multi_add_handle(mh, h) != CURLM_OK) {
            rc = -EIO;
            goto out;
        }
    }
    uint64_t deadline = (uint64_t)keg_mono_ns() / 1000000u + deadline_ms;
    int running = 1;
    while (running) {
        if (curl_multi_perform(mh, &running) != CURLM_OK)
            break;
        uint64_t now = (uint64_t)keg_mono_ns() / 1000000u;
        if (!running || now >= deadline)
            break;
        curl_multi_poll(mh, NULL, 0, (int)KEG_MIN(deadline - now, 100u), NULL);
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(mh, &left)) != NULL) {
        struct sc_xfer *t = NULL;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        if (t) {
            t->done = 1;
            t->result = msg->data.result;
        }
    }
    *failed = 0;
    for (size_t i = 0; i < n; i++) {
        long code = 0;
        if (x[i].done && x[i].result == CURLE_OK)
            curl_easy_getinfo(x[i].h, CURLINFO_RESPONSE_CODE, &code);
        if (code != 200 || x[i].too_big) {
            (*failed)++;
            KEG_DEBUG("mounter %s (%s): no metrics: %s", src[i].id, src[i].socket,
                      !x[i].done ? "deadline passed" : x[i].too_big ? "answer too long" :
                      x[i].result != CURLE_OK ? curl_easy_strerror(x[i].result) :
                      "not a 200 answer");
            continue;
        }
        if (csi_scrape_add(m, x[i].body.p ? x[i].body.p : "", x[i].body.len, src[i].id) < 0) {
            rc = -ENOMEM;
            (*failed)++;
        }
    }
out:
    if (rc && rc != -ENOMEM)
        *failed = n;
    for (size_t i = 0; x && i < n; i++) {
        if (x[i].h) {
            if (mh)
                curl_multi_remove_handle(mh, x[i].h);
            curl_easy_cleanup(x[i].h);
        }
        keg_free(x[i].body.p);
    }
    if (mh)
        curl_multi_cleanup(mh);
    keg_free(x);
    return rc;
}
