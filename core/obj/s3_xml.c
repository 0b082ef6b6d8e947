/* s3_xml.c -- S3's XML replies, read with expat (obj_s3_i.h): a ListObjectsV2 page and
 * the text of one element (error <Code>/<Message>, an <UploadId>).
 *
 * DESIGN
 * One expat parser per reply, without namespace processing (S3 puts its
 * xmlns on the root element; element names are matched as written) and with
 * the keg allocator, so the allocation-failure tests reach it.  Text of the
 * elements of interest is collected into a growable buffer (character data
 * arrives in pieces); expat has already decoded entities and character
 * references into UTF-8 and rejects a malformed reply as a whole.
 * A list page's items are kept until the end of the document, because
 * <EncodingType> (how the keys are encoded) may follow <Contents>; then the
 * callback sees them in order.
 */
#include <ctype.h>
#include <errno.h>
#include <expat.h>
#include <stdio.h>
#include <string.h>

#include "keg/mem.h"
#include "keg/url.h"
#include "obj_s3_i.h"

static const XML_Memory_Handling_Suite xml_mem = {keg_malloc, keg_realloc, keg_free};

/* A growable NUL-terminated byte string. */
struct xbuf {
    char  *p;
    size_t len, cap;
    int    oom;
};

static void xbuf_add(struct xbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = keg_realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Parses len bytes of xml with the handlers set on p.  Returns 1 if the whole
 * document is well-formed, 0 if not, -1 if a handler stopped the parser. */
static int xml_run(XML_Parser p, const char *xml, size_t len)
{
    if (len > (size_t)INT32_MAX)
        return 0;
    if (XML_Parse(p, xml, (int)len, 1) == XML_STATUS_OK)
        return 1;
    return XML_GetErrorCode(p) == XML_ERROR_ABORTED ? -1 : 0;
}

/*----------------------------------------------------------------------------
 * The text of the first element named tag
 *--------------------------------------------------------------------------*/

struct text_ctx {
    XML_Parser  p;
    const char *tag;
    int         in;          /* inside the element */
    int         found;
    struct xbuf text;
};

static void text_start(void *arg, const XML_Char *name, const XML_Char **attrs)
{
    struct text_ctx *c = arg;
    (void)attrs;
    if (!c->found && !c->in && strcmp(name, c->tag) == 0)
        c->in = 1;
}

static void text_end(void *arg, const XML_Char *name)
{
    struct text_ctx *c = arg;
    if (c->in && strcmp(name, c->tag) == 0) {
        c->in = 0;
        c->found = 1;
        XML_StopParser(c->p, XML_FALSE);    /* the rest of the reply does not matter */
    }
}

static void text_chars(void *arg, const XML_Char *s, int n)
{
    struct text_ctx *c = arg;
    if (c->in && n > 0)
        xbuf_add(&c->text, s, (size_t)n);
}

int s3_xml_text(const char *xml, size_t len, const char *tag, char *out, size_t size)
{
    struct text_ctx c = {.tag = tag};

    if (size)
        out[0] = '\0';
    if (!xml || !size || !len)
        return 0;
    c.p = XML_ParserCreate_MM(NULL, &xml_mem, NULL);
    if (!c.p)
        return 0;
    XML_SetUserData(c.p, &c);
    XML_SetElementHandler(c.p, text_start, text_end);
    XML_SetCharacterDataHandler(c.p, text_chars);
    (void)xml_run(c.p, xml, len);           /* a reply broken after the element is fine */
    XML_ParserFree(c.p);
    if (c.found && !c.text.oom)
        snprintf(out, size, "%s", c.text.p ? c.text.p : "");
    keg_free(c.text.p);
    return c.found && !c.text.oom;
}

/*----------------------------------------------------------------------------
 * ListObjectsV2
 *--------------------------------------------------------------------------*/

enum list_field { LF_NONE, LF_ENCODING, LF_TRUNCATED, LF_TOKEN, LF_KEY, LF_SIZE };

struct list_item {
    char    *key;
    uint64_t size;
};

struct list_ctx {
    XML_Parser        p;
    int               depth;       /* of the element being read, root = 1 */
    int               root_ok;     /* the root is <ListBucketResult> */
    int               bad;         /* -EIO or -ENOMEM once something is wrong */
    enum list_field   field;       /* text being collected */
    struct xbuf       text;
    int               urlenc, truncated;
    char             *token;
    int               in_contents;        /* inside a <Contents> under the root */
    int               has_key, has_size;  /* in the current <Contents> */
    struct list_item  cur;
    struct list_item *items;
    size_t            n, cap;
};

static void list_fail(struct list_ctx *c, int rc)
{
    if (!c->bad)
        c->bad = rc;
    XML_StopParser(c->p, XML_FALSE);
}

static enum list_field list_field_of(const struct list_ctx *c, const char *name)
{
    if (c->depth == 2) {
        if (strcmp(name, "EncodingType") == 0)
            return LF_ENCODING;
        if (strcmp(name, "IsTruncated") == 0)
            return LF_TRUNCATED;
        if (strcmp(name, "NextContinuationToken") == 0)
            return LF_TOKEN;
    } else if (c->depth == 3 && c->in_contents) {
        if (strcmp(name, "Key") == 0)
            return LF_KEY;
        if (strcmp(name, "Size") == 0)
            return LF_SIZE;
    }
    return LF_NONE;
}

static void list_start(void *arg, const XML_Char *name, const XML_Char **attrs)
{
    struct list_ctx *c = arg;
    (void)attrs;
    c->depth++;
    if (c->depth == 1) {
        c->root_ok = strcmp(name, "ListBucketResult") == 0;
        if (!c->root_ok)
            list_fail(c, -EIO);
        return;
    }
    if (c->depth == 2) {
        c->in_contents = strcmp(name, "Contents") == 0;
        c->has_key = c->has_size = 0;
        keg_free(c->cur.key);
        c->cur.key = NULL;
        c->cur.size = 0;
    }
    c->field = list_field_of(c, name);
    c->text.len = 0;
}

/* 0, or -EIO if s is not a decimal number of at most 20 digits that fits. */
static int list_size(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 20)
        return -EIO;
    for (size_t i = 0; i < n; i++) {
        unsigned d;
        if (!isdigit((unsigned char)s[i]))
            return -EIO;
        d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EIO;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* End of a <Contents>: keep its item. */
static void list_keep(struct list_ctx *c)
{
    if (!c->has_key || !c->has_size) {
        list_fail(c, -EIO);
        return;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct list_item *v = keg_realloc(c->items, cap * sizeof(*v));
        if (!v) {
            list_fail(c, -ENOMEM);
            return;
        }
        c->items = v;
        c->cap = cap;
    }
    c->items[c->n++] = c->cur;
    c->cur.key = NULL;
}

static void list_end(void *arg, const XML_Char *name)
{
    struct list_ctx *c = arg;
    const char *t = c->text.p ? c->text.p : "";

    if (c->text.oom) {
        list_fail(c, -ENOMEM);
        return;
    }
    switch (c->field) {
    case LF_ENCODING:
        c->urlenc = strcmp(t, "url") == 0;
        break;
    case LF_TRUNCATED:
        c->truncated = strcmp(t, "true") == 0;
        break;
    case LF_TOKEN:
        keg_free(c->token);
        c->token = keg_strdup(t);
        if (!c->token)
            list_fail(c, -ENOMEM);
        break;
    case LF_KEY:
        keg_free(c->cur.key);
        c->cur.key = keg_strdup(t);
        if (!c->cur.key)
            list_fail(c, -ENOMEM);
        c->has_key = 1;
        break;
    case LF_SIZE:
        if (list_size(t, c->text.len, &c->cur.size) < 0)
            list_fail(c, -EIO);
        c->has_size = 1;
        break;
    case LF_NONE:
        if (c->depth == 2 && c->in_contents) {
            list_keep(c);
            c->in_contents = 0;
        }
        break;
    }
    c->field = LF_NONE;
    c->text.len = 0;
    c->depth--;
}

static void list_chars(void *arg, const XML_Char *s, int n)
{
    struct list_ctx *c = arg;
    if (c->field != LF_NONE && n > 0)
        xbuf_add(&c->text, s, (size_t)n);
}

/* ListObjectsV2 with encoding-type=url encodes keys like form values. */
static int url_decode_inplace(char *s)
{
    for (char *p = s; *p; p++) {
        if (*p == '+')
            *p = ' ';
    }
    return keg_url_unescape(s) < 0 ? -EIO : 0;
}

static void list_ctx_free(struct list_ctx *c)
{
    for (size_t i = 0; i < c->n; i++)
        keg_free(c->items[i].key);
    keg_free(c->items);
    keg_free(c->cur.key);
    keg_free(c->text.p);
    keg_free(c->token);
}

/* Parses the page into c.  Returns 0, -EIO or -ENOMEM. */
static int list_parse(struct list_ctx *c, const char *xml, size_t len)
{
    int ok;

    c->p = XML_ParserCreate_MM(NULL, &xml_mem, NULL);
    if (!c->p)
        return -ENOMEM;
    XML_SetUserData(c->p, c);
    XML_SetElementHandler(c->p, list_start, list_end);
    XML_SetCharacterDataHandler(c->p, list_chars);
    ok = xml_run(c->p, xml, len);
    if (ok == 0 && XML_GetErrorCode(c->p) == XML_ERROR_NO_MEMORY)
        c->bad = -ENOMEM;
    XML_ParserFree(c->p);
    if (c->bad)
        return c->bad;
    if (ok != 1 || !c->root_ok)
        return -EIO;
    if (c->truncated && !c->token)
        return -EIO;              /* would page for ever */
    return 0;
}

int s3_parse_list(const char *xml, size_t len, s3_list_item_fn *fn, void *arg, int *truncated,
                  char **next_token)
{
    struct list_ctx c;
    int rc;

    memset(&c, 0, sizeof(c));
    *truncated = 0;
    *next_token = NULL;
    rc = xml && len ? list_parse(&c, xml, len) : -EIO;
    for (size_t i = 0; rc == 0 && i < c.n; i++) {
        if (c.urlenc && url_decode_inplace(c.items[i].key) < 0)
            rc = -EIO;
        else
            rc = fn(arg, c.items[i].key, c.items[i].size);
    }
    if (rc == 0) {
        *truncated = c.truncated;
        *next_token = c.token;
        c.token = NULL;
    }
    list_ctx_free(&c);
    return rc;
}
