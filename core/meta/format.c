/* format.c -- text encoding of struct keg_format and volume-name validation.
 *
 * DESIGN
 * The format is stored by every engine as one text value of "key=value\n"
 * lines, in a fixed key order.  Values are percent-escaped: every byte outside
 * the printable ASCII range, and '%', '=', space and the line breaks, become
 * "%XX", so that any byte sequence (secrets included) round-trips.  Decoding
 * starts from an all-zero struct, ignores unknown keys (forward compatibility)
 * and rejects malformed lines, bad escapes, NUL bytes, numbers that do not
 * parse and values that do not fit their field with -EINVAL.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "keg/mem.h"
#include "keg/meta.h"

enum fmt_kind { FMT_STR, FMT_U32, FMT_U64, FMT_I64 };

struct fmt_field {
    const char   *key;
    enum fmt_kind kind;
    size_t        off;
    size_t        size;     /* FMT_STR: capacity of the char array */
};

#define FSTR(k) { #k, FMT_STR, offsetof(struct keg_format, k), sizeof(((struct keg_format *)0)->k) }
#define FNUM(k, t) { #k, t, offsetof(struct keg_format, k), 0 }

static const struct fmt_field fmt_fields[] = {
    FSTR(name), FSTR(uuid), FSTR(storage), FSTR(bucket), FSTR(access_key), FSTR(secret_key),
    FSTR(session_token), FSTR(region), FSTR(compress),
    FNUM(block_size, FMT_U32), FNUM(capacity, FMT_U64), FNUM(inodes, FMT_U64),
    FNUM(trash_days, FMT_U32), FNUM(meta_version, FMT_U32), FNUM(created, FMT_I64),
    FNUM(block_version, FMT_U32),
};
#define FMT_NFIELDS (sizeof(fmt_fields) / sizeof(fmt_fields[0]))

static int fmt_plain(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '%' && c != '=';
}

/* Appends s (at most max bytes, stopping at NUL) escaped.  Returns new length. */
static size_t fmt_escape(char *dst, size_t o, const char *s, size_t max)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (fmt_plain(c)) {
            dst[o++] = (char)c;
        } else {
            dst[o++] = '%';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 15];
        }
    }
    return o;
}

int keg_format_encode(const struct keg_format *f, char **out)
{
    size_t cap = 1;
    *out = NULL;
    for (size_t i = 0; i < FMT_NFIELDS; i++)
        cap += strlen(fmt_fields[i].key) + 2 + (fmt_fields[i].kind == FMT_STR ?
                                                 fmt_fields[i].size * 3 : 24);
    char *buf = keg_malloc(cap);
    if (!buf)
        return -ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < FMT_NFIELDS; i++) {
        const struct fmt_field *fd = &fmt_fields[i];
        const char *p = (const char *)f + fd->off;
        size_t kl = strlen(fd->key);
        memcpy(buf + o, fd->key, kl);
        o += kl;
        buf[o++] = '=';
        int n = 0;
        switch (fd->kind) {
        case FMT_STR:
            o = fmt_escape(buf, o, p, fd->size);
            break;
        case FMT_U32: {
            uint32_t v;
            memcpy(&v, p, sizeof(v));
            n = snprintf(buf + o, 24, "%" PRIu32, v);
            break;
        }
        case FMT_U64: {
            uint64_t v;
            memcpy(&v, p, sizeof(v));
            n = snprintf(buf + o, 24, "%" PRIu64, v);
            break;
        }
        case FMT_I64: {
            int64_t v;
            memcpy(&v, p, sizeof(v));
            n = snprintf(buf + o, 24, "%" PRId64, v);
            break;
        }
        }
        o += (size_t)n;
        buf[o++] = '\n';
    }
    KEG_ASSERT(o < cap);
    buf[o] = '\0';
    *out = buf;
    return 0;
}

static int fmt_hex(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes [v, v+len) into dst (capacity cap incl. NUL).  -EINVAL if it does not fit. */
static int fmt_unescape(const char *v, size_t len, char *dst, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)v[i];
        if (c == '%') {
            if (i + 2 >= len)
                return -EINVAL;
            int hi = fmt_hex((unsigned char)v[i + 1]);
            int lo = fmt_hex((unsigned char)v[i + 2]);
            if (hi < 0 || lo < 0)
                return -EINVAL;
            c = hi * 16 + lo;
            i += 2;
            if (c == 0)
                return -EINVAL;
        }
        if (o + 1 >= cap)
            return -EINVAL;
        dst[o++] = (char)c;
    }
    dst[o] = '\0';
    return 0;
}

static int fmt_number(const char *v, size_t len, int is_signed, uint64_t max, uint64_t *out)
{
    size_t i = 0;
    int neg = 0;
    uint64_t x = 0;
    if (is_signed && len > 0 && v[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == len)
        return -EINVAL;
    if (neg)
        max++;      /* INT64_MIN */
    for (; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -EINVAL;
        uint64_t d = (uint64_t)(v[i] - '0');
        if (x > (max - d) / 10)
            return -EINVAL;
        x = x * 10 + d;
    }
    *out = neg ? (uint64_t)0 - x : x;
    return 0;
}

int keg_format_decode(const char *text, struct keg_format *f)
{
    struct keg_format tmp;
    memset(&tmp, 0, sizeof(tmp));
    if (!text)
        return -EINVAL;
    const char *p = text;
    while (*p) {
        size_t ll = strcspn(p, "\n");
        const char *line = p;
        p += ll;
        if (*p == '\n')
            p++;
        if (ll && line[ll - 1] == '\r')
            ll--;
        if (ll == 0)
            continue;
        const char *eq = memchr(line, '=', ll);
        if (!eq || eq == line)
            return -EINVAL;
        size_t kl = (size_t)(eq - line);
        const char *v = eq + 1;
        size_t vl = ll - kl - 1;
        for (size_t i = 0; i < ll; i++)
            if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
                return -EINVAL;
        const struct fmt_field *fd = NULL;
        for (size_t i = 0; i < FMT_NFIELDS && !fd; i++)
            if (strlen(fmt_fields[i].key) == kl && memcmp(fmt_fields[i].key, line, kl) == 0)
                fd = &fmt_fields[i];
        if (!fd)
            continue;   /* written by a newer version: ignore */
        char *dst = (char *)&tmp + fd->off;
        uint64_t x = 0;
        int rc = 0;
        switch (fd->kind) {
        case FMT_STR:
            rc = fmt_unescape(v, vl, dst, fd->size);
            break;
        case FMT_U32:
            rc = fmt_number(v, vl, 0, UINT32_MAX, &x);
            if (rc == 0) {
                uint32_t u = (uint32_t)x;
                memcpy(dst, &u, sizeof(u));
            }
            break;
        case FMT_U64:
            rc = fmt_number(v, vl, 0, UINT64_MAX, &x);
            if (rc == 0)
                memcpy(dst, &x, sizeof(x));
            break;
        case FMT_I64:
            rc = fmt_number(v, vl, 1, (uint64_t)INT64_MAX, &x);
            if (rc == 0) {
                int64_t s = (int64_t)x;
                memcpy(dst, &s, sizeof(s));
            }
            break;
        }
        if (rc)
            return -EINVAL;
    }
    *f = tmp;
    return 0;
}

int keg_format_check_name(const char *name)
{
    if (!name)
        return -EINVAL;
    size_t len = strlen(name);
    if (len < 3 || len > 63)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (i > 0 && c == '-');
        if (!ok)
            return -EINVAL;
    }
    return 0;
}
