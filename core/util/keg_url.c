/* keg_url.c -- META_URL / storage URL parsing and password redaction. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "keg/mem.h"
#include "keg/url.h"

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int keg_url_unescape(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r == '%') {
            int hi = hexval((unsigned char)r[1]);
            int lo = hi < 0 ? -1 : hexval((unsigned char)r[2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return -EINVAL;     /* %00 would silently cut the string */
            *w++ = (char)(hi * 16 + lo);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return 0;
}

void keg_url_free(struct keg_url *u)
{
    if (!u)
        return;
    keg_free(u->scheme);
    keg_free(u->user);
    keg_free(u->password);
    keg_free(u->host);
    keg_free(u->path);
    keg_free(u->query);
    memset(u, 0, sizeof(*u));
}

int keg_url_parse(const char *url, struct keg_url *out, const char **err)
{
    const char *why = NULL;
    memset(out, 0, sizeof(*out));
    if (!url || !*url) {
        why = "empty URL";
        goto bad;
    }
    const char *sep = strstr(url, "://");
    if (!sep || sep == url) {
        why = "missing scheme (expected scheme://...)";
        goto bad;
    }
    if (!isalpha((unsigned char)url[0])) {
        why = "scheme must start with a letter";
        goto bad;
    }
    for (const char *p = url; p < sep; p++) {
        if (!isalnum((unsigned char)*p) && *p != '+' && *p != '-' && *p != '.') {
            why = "invalid character in scheme";
            goto bad;
        }
    }
    out->scheme = keg_strndup(url, (size_t)(sep - url));
    const char *auth = sep + 3;
    size_t alen = strcspn(auth, "/?");
    const char *rest = auth + alen;

    /* userinfo: up to the '@' of the authority.  A second '@' is refused: which
     * one ends the password is a guess ("redis://:@@h" could be an empty password
     * and a typo), and a wrong guess sends a password to the wrong place. */
    const char *at = NULL;
    for (const char *p = auth; p < auth + alen; p++) {
        if (*p == '@' && at) {
            why = "more than one '@' before the host: write '@' in a user name or password "
                  "as %40";
            goto bad;
        }
        if (*p == '@')
            at = p;
    }
    const char *hostp = auth;
    if (at) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (colon) {
            out->user = keg_strndup(auth, (size_t)(colon - auth));
            out->password = keg_strndup(colon + 1, (size_t)(at - colon - 1));
            out->has_password = 1;
        } else {
            out->user = keg_strndup(auth, (size_t)(at - auth));
            out->password = keg_strdup("");
        }
        hostp = at + 1;
    } else {
        out->user = keg_strdup("");
        out->password = keg_strdup("");
    }
    size_t hlen = (size_t)(auth + alen - hostp);
    const char *portp = NULL;
    if (memchr(hostp, ',', hlen)) {
        out->host = keg_strndup(hostp, hlen);   /* host list: ports stay inside */
    } else if (hlen && hostp[0] == '[') {
        const char *rb = memchr(hostp, ']', hlen);
        if (!rb) {
            why = "unterminated [IPv6] host";
            goto bad;
        }
        out->host = keg_strndup(hostp + 1, (size_t)(rb - hostp - 1));
        if (rb + 1 < hostp + hlen) {
            if (rb[1] != ':') {
                why = "garbage after ]";
                goto bad;
            }
            portp = rb + 2;
        }
    } else {
        const char *colon = memchr(hostp, ':', hlen);
        if (colon) {
            out->host = keg_strndup(hostp, (size_t)(colon - hostp));
            portp = colon + 1;
        } else {
            out->host = keg_strndup(hostp, hlen);
        }
    }
    if (portp) {
        const char *pend = auth + alen;
        long port = 0;
        if (portp == pend) {
            why = "empty port";
            goto bad;
        }
        for (const char *p = portp; p < pend; p++) {
            if (!isdigit((unsigned char)*p)) {
                why = "port is not a number";
                goto bad;
            }
            port = port * 10 + (*p - '0');
            if (port > 65535) {
                why = "port out of range";
                goto bad;
            }
        }
        if (port == 0) {
            why = "port out of range";
            goto bad;
        }
        out->port = (int)port;
    }
    const char *q = strchr(rest, '?');
    if (q) {
        out->path = keg_strndup(rest, (size_t)(q - rest));
        out->query = keg_strdup(q + 1);
    } else {
        out->path = keg_strdup(rest);
        out->query = keg_strdup("");
    }
    if (!out->scheme || !out->user || !out->password || !out->host || !out->path || !out->query) {
        keg_url_free(out);
        if (err)
            *err = "out of memory";
        return -ENOMEM;
    }
    if (keg_url_unescape(out->user) || keg_url_unescape(out->password)) {
        why = "bad %-escape in user or password";
        goto bad;
    }
    if (err)
        *err = NULL;
    return 0;
bad:
    keg_url_free(out);
    if (err)
        *err = why;
    return -EINVAL;
}

static int secret_param(const char *name, size_t len)
{
    static const char *const words[] = {"pass", "secret", "token", "key", "signature", NULL};
    for (int i = 0; words[i]; i++) {
        size_t wl = strlen(words[i]);
        for (size_t j = 0; j + wl <= len; j++)
            if (strncasecmp(name + j, words[i], wl) == 0)
                return 1;
    }
    return 0;
}

char *keg_url_redact(const char *url, char *buf, size_t buflen)
{
    size_t o = 0;
#define PUT(c) do { if (o + 1 < buflen) buf[o++] = (c); } while (0)
    if (!buflen)
        return buf;
    if (!url) {
        buf[0] = '\0';
        return buf;
    }
    const char *sep = strstr(url, "://");
    const char *p = url;
    {
        /* without "://" the text may still be "user:pass@host...": treat it alike */
        if (sep) {
            for (; p < sep + 3; p++)
                PUT(*p);
        }
        /* The '@' may follow an unescaped '/' in a password: look up to the
         * query, not just to the end of the authority (over-redacting is safe). */
        size_t alen = strcspn(p, "?");
        const char *at = NULL;
        for (const char *x = p; x < p + alen; x++)
            if (*x == '@')
                at = x;
        if (at) {
            const char *colon = memchr(p, ':', (size_t)(at - p));
            if (colon) {
                for (; p <= colon; p++)
                    PUT(*p);
                for (const char *s = "****"; *s; s++)
                    PUT(*s);
                p = at;
            }
        }
    }
    /* copy the rest, blanking the values of secret-looking query parameters */
    const char *q = strchr(p, '?');
    for (; *p && (!q || p <= q); p++)
        PUT(*p);
    while (q && *p) {
        size_t plen = strcspn(p, "&");
        const char *eq = memchr(p, '=', plen);
        if (eq && secret_param(p, (size_t)(eq - p))) {
            for (; p <= eq; p++)
                PUT(*p);
            for (const char *s = "****"; *s; s++)
                PUT(*s);
            p = eq + 1 + strcspn(eq + 1, "&");
        } else {
            for (size_t i = 0; i < plen; i++)
                PUT(p[i]);
            p += plen;
        }
        if (*p == '&') {
            PUT('&');
            p++;
        }
    }
#undef PUT
    buf[o] = '\0';
    return buf;
}
