/* block.c -- encoding of file data blocks as objects, and their keys.
 *
 * DESIGN
 * A block object is a 16-byte header followed by the payload (format drawn in
 * keg/obj.h and docs/internals/OBJSTORE.md).  The CRC32C covers the raw bytes,
 * so it checks the whole path: compression, transport, the store and any cache.
 * Compression is attempted into a buffer one byte smaller than the raw data:
 * if it does not shrink the data, the block is stored as codec none.  So an
 * encoded block is never larger than KEG_BLOCK_HDR + raw length, whatever the codec.
 * Decoding trusts nothing in the object: every length is checked before use and
 * the decompressors are given exact output capacities.  A block of codec none
 * (incompressible data, or compression off) can be verified in place
 * (keg_block_decode_inplace): its payload is the raw data, so the reader keeps
 * the fetched buffer instead of copying it.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <lz4.h>
#include <zstd.h>

#include "keg/obj.h"

#define BLOCK_MAGIC   0x4247454bu   /* "KEGB" read as a little-endian u32 */
#define BLOCK_VERSION 1
#define BLOCK_ZSTD_LEVEL 1          /* fast: blocks are compressed on the write path */

static void put_le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static uint16_t get_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

int keg_codec_parse(const char *name)
{
    if (!name)
        return -EINVAL;
    if (strcmp(name, "none") == 0)
        return KEG_CODEC_NONE;
    if (strcmp(name, "lz4") == 0)
        return KEG_CODEC_LZ4;
    if (strcmp(name, "zstd") == 0)
        return KEG_CODEC_ZSTD;
    return -EINVAL;
}

size_t keg_block_bound(int codec, size_t raw_len)
{
    KEG_UNUSED(codec);
    return KEG_BLOCK_HDR + raw_len;
}

/* Compress into dst (capacity cap).  Returns the compressed size, or 0 if the
 * data did not fit (did not shrink). */
static size_t block_compress(int codec, const void *raw, size_t raw_len, void *dst, size_t cap)
{
    if (cap == 0)
        return 0;
    if (codec == KEG_CODEC_LZ4) {
        if (raw_len > LZ4_MAX_INPUT_SIZE)
            return 0;
        int n = LZ4_compress_default(raw, dst, (int)raw_len, (int)KEG_MIN(cap, (size_t)INT32_MAX));
        return n > 0 ? (size_t)n : 0;
    }
    if (codec == KEG_CODEC_ZSTD) {
        size_t n = ZSTD_compress(dst, cap, raw, raw_len, BLOCK_ZSTD_LEVEL);
        return ZSTD_isError(n) ? 0 : n;
    }
    return 0;
}

static void block_hdr_put(unsigned char *o, int codec, size_t raw_len, uint32_t crc)
{
    put_le32(o, BLOCK_MAGIC);
    o[4] = BLOCK_VERSION;
    o[5] = (unsigned char)codec;
    put_le16(o + 6, 0);
    put_le32(o + 8, (uint32_t)raw_len);
    put_le32(o + 12, crc);
}

/* Returns 0, or -EINVAL (unknown codec, raw_len over 4 GiB, out_cap too small). */
int keg_block_encode(int codec, const void *raw, size_t raw_len, void *out, size_t out_cap,
                     size_t *out_len)
{
    unsigned char *o = out;
    size_t plen = 0;

    *out_len = 0;
    if (codec != KEG_CODEC_NONE && codec != KEG_CODEC_LZ4 && codec != KEG_CODEC_ZSTD)
        return -EINVAL;
    if (raw_len > UINT32_MAX || out_cap < KEG_BLOCK_HDR + raw_len)
        return -EINVAL;
    if (codec != KEG_CODEC_NONE && raw_len > 0)
        plen = block_compress(codec, raw, raw_len, o + KEG_BLOCK_HDR, raw_len - 1);
    if (plen == 0) {
        codec = KEG_CODEC_NONE;
        plen = raw_len;
        if (raw_len)
            memcpy(o + KEG_BLOCK_HDR, raw, raw_len);
    }
    block_hdr_put(o, codec, raw_len, keg_crc32c(0, raw, raw_len));
    *out_len = KEG_BLOCK_HDR + plen;
    return 0;
}

size_t keg_block_seal(void *obj, size_t raw_len)
{
    unsigned char *o = obj;

    if (raw_len > UINT32_MAX)
        return 0;
    block_hdr_put(o, KEG_CODEC_NONE, raw_len, keg_crc32c(0, o + KEG_BLOCK_HDR, raw_len));
    return KEG_BLOCK_HDR + raw_len;
}

/* Checks the header of obj[0..obj_len) against raw_cap.  On success sets the
 * codec byte, the raw length and its CRC32C.  Returns 0 or -EIO. */
static int block_hdr_check(const void *obj, size_t obj_len, size_t raw_cap, int *codec,
                           uint32_t *raw_len, uint32_t *crc)
{
    const unsigned char *h = obj;

    *codec = -1;
    *raw_len = 0;
    *crc = 0;
    if (!obj || obj_len < KEG_BLOCK_HDR)
        return -EIO;
    if (get_le32(h) != BLOCK_MAGIC || h[4] != BLOCK_VERSION || get_le16(h + 6) != 0)
        return -EIO;
    if (get_le32(h + 8) > raw_cap)
        return -EIO;
    *codec = h[5];
    *raw_len = get_le32(h + 8);
    *crc = get_le32(h + 12);
    return 0;
}

/* Returns the raw length, or -EIO for any inconsistency. */
ssize_t keg_block_decode(const void *obj, size_t obj_len, void *raw, size_t raw_cap)
{
    const unsigned char *payload;
    size_t plen;
    uint32_t raw_len, crc;
    int codec;

    if (block_hdr_check(obj, obj_len, raw_cap, &codec, &raw_len, &crc) < 0)
        return -EIO;
    payload = (const unsigned char *)obj + KEG_BLOCK_HDR;
    plen = obj_len - KEG_BLOCK_HDR;

    switch (codec) {
    case KEG_CODEC_NONE:
        if (plen != raw_len)
            return -EIO;
        if (raw_len)
            memcpy(raw, payload, raw_len);
        break;
    case KEG_CODEC_LZ4: {
        int n;
        if (raw_len == 0 || plen == 0 || plen > INT32_MAX || raw_len > INT32_MAX)
            return -EIO;
        n = LZ4_decompress_safe((const char *)payload, raw, (int)plen, (int)raw_len);
        if (n < 0 || (uint32_t)n != raw_len)
            return -EIO;
        break;
    }
    case KEG_CODEC_ZSTD: {
        size_t n;
        unsigned long long fsz;
        if (raw_len == 0 || plen == 0)
            return -EIO;
        /* The frame must declare exactly raw_len (our encoder always writes it). */
        fsz = ZSTD_getFrameContentSize(payload, plen);
        if (fsz != raw_len)
            return -EIO;
        n = ZSTD_decompress(raw, raw_len, payload, plen);
        if (ZSTD_isError(n) || n != raw_len)
            return -EIO;
        break;
    }
    default:
        return -EIO;
    }
    if (keg_crc32c(0, raw, raw_len) != crc)
        return -EIO;
    return (ssize_t)raw_len;
}

/* Codec none: the payload is the raw data, so it is verified where it lies
 * (same checks as keg_block_decode, no copy).  A compressed codec is -ENOTSUP
 * once the header is otherwise sound: the caller decodes into another buffer. */
ssize_t keg_block_decode_inplace(const void *obj, size_t obj_len, size_t raw_cap)
{
    uint32_t raw_len, crc;
    int codec;

    if (block_hdr_check(obj, obj_len, raw_cap, &codec, &raw_len, &crc) < 0)
        return -EIO;
    if (codec == KEG_CODEC_LZ4 || codec == KEG_CODEC_ZSTD)
        return -ENOTSUP;
    if (codec != KEG_CODEC_NONE || obj_len - KEG_BLOCK_HDR != raw_len)
        return -EIO;
    if (keg_crc32c(0, (const unsigned char *)obj + KEG_BLOCK_HDR, raw_len) != crc)
        return -EIO;
    return (ssize_t)raw_len;
}

int keg_block_key(char *buf, size_t size, const char *vol, uint64_t id, uint32_t indx,
                  uint32_t blen)
{
    return snprintf(buf, size, "%s/chunks/%" PRIu64 "/%" PRIu64 "/%" PRIu64 "_%" PRIu32
                    "_%" PRIu32, vol, id / 1000000, id / 1000, id, indx, blen);
}

/* Strict decimal: digits only, no sign, no leading zero (except "0" itself),
 * no overflow past max.  *end is set past the digits.  Returns 0 or -EINVAL. */
static int parse_dec(const char *s, uint64_t max, uint64_t *v, const char **end)
{
    uint64_t x = 0;
    const char *p = s;

    *v = 0;
    *end = s;
    if (*p < '0' || *p > '9')
        return -EINVAL;
    if (*p == '0' && p[1] >= '0' && p[1] <= '9')
        return -EINVAL;
    while (*p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (x > (max - d) / 10)
            return -EINVAL;
        x = x * 10 + d;
        p++;
    }
    *v = x;
    *end = p;
    return 0;
}

/* Accepts "<id>_<indx>_<blen>", "<a>/<b>/<id>_<indx>_<blen>" and any longer
 * path ending so; when the two directory levels are present they must be
 * id/1e6 and id/1e3.  Returns 0 or -EINVAL (outputs zeroed). */
int keg_block_key_parse(const char *key, uint64_t *id, uint32_t *indx, uint32_t *blen)
{
    const char *base, *p, *slash;
    uint64_t vid, vi, vl, d;

    *id = 0;
    *indx = 0;
    *blen = 0;
    if (!key)
        return -EINVAL;
    slash = strrchr(key, '/');
    base = slash ? slash + 1 : key;
    if (parse_dec(base, UINT64_MAX, &vid, &p) < 0 || *p != '_')
        return -EINVAL;
    if (parse_dec(p + 1, UINT32_MAX, &vi, &p) < 0 || *p != '_')
        return -EINVAL;
    if (parse_dec(p + 1, UINT32_MAX, &vl, &p) < 0 || *p != '\0')
        return -EINVAL;
    if (slash) {
        /* key = ".../<id/1e6>/<id/1e3>/<base>": walk back over the two levels. */
        const char *b_end = slash, *b = slash;
        while (b > key && b[-1] != '/')
            b--;
        if (b == key)
            return -EINVAL;
        const char *a_end = b - 1, *a = a_end;
        while (a > key && a[-1] != '/')
            a--;
        if (parse_dec(b, UINT64_MAX, &d, &p) < 0 || p != b_end || d != vid / 1000)
            return -EINVAL;
        if (parse_dec(a, UINT64_MAX, &d, &p) < 0 || p != a_end || d != vid / 1000000)
            return -EINVAL;
    }
    *id = vid;
    *indx = (uint32_t)vi;
    *blen = (uint32_t)vl;
    return 0;
}
