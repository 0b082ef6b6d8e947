/* ssd_format.h -- the on-disk format of SSD cache files and staged (writeback) files
 * (the ssdf layer, used by core/cache and core/wb).
 *
 * DESIGN
 * Both the SSD cache (core/cache/cache_ssd.c) and the writeback staging area
 * (core/wb/writeback.c) keep one object per file, in the same format, so that
 * one reader verifies both.  Specified in docs/internals/SSD-FORMAT.md.
 *
 *     0      4  magic "KEGC" (u32 0x4347454b, little-endian)
 *     4      1  version (1)
 *     5      1  kind (1 = cached object, 2 = staged object; an uploaded staged
 *                file adopted by the cache keeps kind 2)
 *     6      2  key length K (u16, 1..1024)
 *     8      8  object length N (u64)
 *    16      4  CRC32C of the N object bytes
 *    20      4  CRC32C of bytes 0..19 followed by the K key bytes
 *    24      K  key (no NUL)
 *    24+K    N  object bytes (exactly what the store holds)
 *
 * A file whose size is not 24 + K + N, or whose CRCs do not match, is corrupt.
 *
 * File names: the key with every byte outside [A-Za-z0-9_.-] (and a leading
 * '.') written as %XX (upper-case hex).  Names starting with '.' are never
 * objects: ".tmp.<name>.XXXXXX" is a file being written (removed at open),
 * ".bad.<name>" a quarantined corrupt staged file, ".lock" a lock file.
 */
#ifndef KEG_SSD_FORMAT_H
#define KEG_SSD_FORMAT_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "keg/obj.h"

#define KEGC_MAGIC     0x4347454bu
#define KEGC_VERSION   1
#define KEGC_KIND_CACHE  1
#define KEGC_KIND_STAGED 2
/* What a reader of the cache directory asks for (never written): kind 1, or
 * kind 2, a staged file the cache adopted as it was after its upload. */
#define KEGC_KIND_CACHED_ANY 0
#define KEGC_HDR       24
#define KEGC_KEY_MAX   1024
#define KEGC_NAME_MAX  255          /* longest escaped file name */
#define KEGC_TMP_PREFIX ".tmp."
#define KEGC_BAD_PREFIX ".bad."

static inline void kegc_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t kegc_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether a file of kind got is what a reader asking for kind want accepts. */
static inline int kegc_kind_ok(int want, int got)
{
    if (want == KEGC_KIND_CACHED_ANY)
        return got == KEGC_KIND_CACHE || got == KEGC_KIND_STAGED;
    return got == want;
}

/* Fills the 24-byte header for key and the object obj[0..len). */
static inline void kegc_hdr_make(uint8_t hdr[KEGC_HDR], int kind, const char *key,
                                 const void *obj, uint64_t len)
{
    size_t klen = strlen(key);
    uint32_t hcrc;

    kegc_put32(hdr, KEGC_MAGIC);
    hdr[4] = KEGC_VERSION;
    hdr[5] = (uint8_t)kind;
    hdr[6] = (uint8_t)klen;
    hdr[7] = (uint8_t)(klen >> 8);
    kegc_put32(hdr + 8, (uint32_t)len);
    kegc_put32(hdr + 12, (uint32_t)(len >> 32));
    kegc_put32(hdr + 16, keg_crc32c(0, obj, (size_t)len));
    hcrc = keg_crc32c(0, hdr, 20);
    kegc_put32(hdr + 20, keg_crc32c(hcrc, key, klen));
}

/* Verifies a whole file image f[0..flen) of the given kind holding key.
 * On success *obj and *olen point at the object bytes inside f.
 * Returns 0 or -EIO (corrupt, truncated, or a different key). */
static inline int kegc_check(const uint8_t *f, size_t flen, int kind, const char *key,
                             const uint8_t **obj, uint64_t *olen)
{
    size_t klen = strlen(key);
    uint64_t len;
    uint32_t hcrc;

    *obj = NULL;
    *olen = 0;
    if (flen < KEGC_HDR || kegc_get32(f) != KEGC_MAGIC || f[4] != KEGC_VERSION ||
        !kegc_kind_ok(kind, f[5]))
        return -EIO;
    if ((size_t)(f[6] | f[7] << 8) != klen || memcmp(f + KEGC_HDR, key, klen) != 0)
        return -EIO;
    hcrc = keg_crc32c(0, f, 20);
    if (keg_crc32c(hcrc, key, klen) != kegc_get32(f + 20))
        return -EIO;
    len = (uint64_t)kegc_get32(f + 8) | (uint64_t)kegc_get32(f + 12) << 32;
    if (len != flen - KEGC_HDR - klen || flen < KEGC_HDR + klen)
        return -EIO;
    if (keg_crc32c(0, f + KEGC_HDR + klen, (size_t)len) != kegc_get32(f + 16))
        return -EIO;
    *obj = f + KEGC_HDR + klen;
    *olen = len;
    return 0;
}

static inline int kegc_plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
}

/* Escapes key into name (capacity KEGC_NAME_MAX + 1).
 * Returns 0, or -ENAMETOOLONG (the key cannot be kept in a file: pass it through). */
static inline int kegc_escape(const char *key, char *name)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    if (!*key || strlen(key) > KEGC_KEY_MAX)
        return -ENAMETOOLONG;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (kegc_plain(*p) && !(p == (const unsigned char *)key && *p == '.')) {
            if (n + 1 > KEGC_NAME_MAX)
                return -ENAMETOOLONG;
            name[n++] = (char)*p;
        } else {
            if (n + 3 > KEGC_NAME_MAX)
                return -ENAMETOOLONG;
            name[n++] = '%';
            name[n++] = hex[*p >> 4];
            name[n++] = hex[*p & 15];
        }
    }
    name[n] = '\0';
    return 0;
}

static inline int kegc_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reverses kegc_escape: key has capacity KEGC_NAME_MAX + 1.
 * Returns 0, or -EINVAL if name is not a name kegc_escape makes. */
static inline int kegc_unescape(const char *name, char *key)
{
    size_t n = 0;
    char again[KEGC_NAME_MAX + 1];

    for (const char *p = name; *p; p++) {
        if (*p == '%') {
            int h = kegc_hexval(p[1]), l = h < 0 ? -1 : kegc_hexval(p[2]);
            if (h < 0 || l < 0 || (h == 0 && l == 0))
                return -EINVAL;
            key[n++] = (char)(h << 4 | l);
            p += 2;
        } else {
            key[n++] = *p;
        }
        if (n > KEGC_NAME_MAX)
            return -EINVAL;
    }
    key[n] = '\0';
    /* Only the canonical spelling is accepted, so one key has one file. */
    if (kegc_escape(key, again) < 0 || strcmp(again, name) != 0)
        return -EINVAL;
    return 0;
}

/* 1 if key names a KegFS block object ("<vol>/chunks/.../<id>_<indx>_<blen>"):
 * only those are cached and staged; *blen is its raw length. */
static inline int kegc_is_block(const char *key, uint32_t *blen)
{
    uint64_t id;
    uint32_t indx;

    *blen = 0;
    if (!strstr(key, "/chunks/"))
        return 0;
    if (keg_block_key_parse(key, &id, &indx, blen) < 0)
        return 0;
    return *blen <= KEG_BLOCK_SIZE_MAX;
}

#endif
