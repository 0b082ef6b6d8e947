/* url.h -- parsing and redaction of META_URL / storage URLs. */
#ifndef KEG_URL_H
#define KEG_URL_H

#include <stddef.h>

/* A parsed URL "scheme://[user[:password]@]host[:port][/path][?query]".
 * For "sqlite3:///abs/path.db" host is "" and path "/abs/path.db".
 * Fields are NUL-terminated copies; absent parts are "" (port 0). */
struct keg_url {
    char *scheme;
    char *user;
    char *password;
    char *host;        /* may be a comma-separated list (sentinel); IPv6 without [] */
    int   port;
    char *path;        /* starts with '/' when present */
    char *query;       /* without '?' */
    int   has_password;
};

/* Returns 0 or -EINVAL (malformed; *err points at a static reason).
 * OWNERSHIP: caller frees with keg_url_free(). */
int  keg_url_parse(const char *url, struct keg_url *out, const char **err);
void keg_url_free(struct keg_url *u);

/* Copy url into buf with any password replaced by "****" (also secret-looking
 * query parameters).  Always NUL-terminates; returns buf. */
char *keg_url_redact(const char *url, char *buf, size_t buflen);

/* Percent-decode s in place.  Returns 0 or -EINVAL. */
int keg_url_unescape(char *s);

#endif
