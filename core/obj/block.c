/* block.c -- encoding of file data blocks as objects, their keys, and the volume marker.
 *
 * DESIGN
 * A block object is a 48-byte header followed by the payload (format drawn in
 * keg/obj.h and docs/internals/OBJSTORE.md).  The CRC32C covers the raw bytes,
 * so it checks the whole path: compression, transport, the store and any cache.
 * The header also carries the block's identity -- volume UUID, slice id,
 * block index, raw length -- under a CRC32C of its own, and every decode
 * compares it with the identity the reader expects: a valid block of another
 * key (a misdirected PUT, a store bug, a second volume writing the same
 * keys) is -EIO, never another file's bytes.  Version-1 blocks (16-byte
 * header, no identity) are read where the volume allows them (v1_ok).
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
#include "keg/uuid.h"

#define BLOCK_MAGIC   0x4247454bu   /* "KEGB" read as a little-endian u32 */
#define BLOCK_V1      1             /* 16-byte header, no identity (read only) */
#define BLOCK_V2      2             /* 48-byte header with the identity */
#define BLOCK_ZSTD_LEVEL 1          /* fast: blocks are compressed on the write path */

_Static_assert(KEG_BLOCK_HDR == 48 && KEG_BLOCK_HDR_V1 == 16, "header layout (obj.h)");

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

static void put_le64(unsigned char *p, uint64_t v)
{
    put_le32(p, (uint32_t)v);
    put_le32(p + 4, (uint32_t)(v >> 32));
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

static uint64_t get_le64(const unsigned char *p)
{
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
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

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int keg_block_vol_uuid(const char *uuid, uint8_t out[16])
{
    const char *p = uuid ? uuid : "";
    size_t n = 0;

    for (size_t i = 0; p[i] && n < 16; i++) {
        int hi, lo;
        if ((i == 8 || i == 13 || i == 18 || i == 23) && p[i] == '-')
            continue;
        hi = hexval(p[i]);
        lo = hi < 0 || !p[i + 1] ? -1 : hexval(p[i + 1]);
        if (lo < 0)
            break;
        out[n++] = (uint8_t)(hi << 4 | lo);
        i++;
    }
    if (n == 16 && strlen(p) == 36)
        return 0;
    /* not a UUID: four chained CRC32Cs of the string, one per 4 bytes */
    uint32_t c = 0;
    for (int k = 0; k < 4; k++) {
        c = keg_crc32c(c ^ (uint32_t)(0x9e3779b9u * (unsigned)(k + 1)), p, strlen(p));
        put_le32(out + 4 * k, c);
    }
    return 1;
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

static void block_hdr_put(unsigned char *o, int codec, const struct keg_block_id *bid,
                          uint32_t crc)
{
    put_le32(o, BLOCK_MAGIC);
    o[4] = BLOCK_V2;
    o[5] = (unsigned char)codec;
    put_le16(o + 6, KEG_BLOCK_HDR);
    put_le32(o + 8, bid->blen);
    put_le32(o + 12, crc);
    memcpy(o + 16, bid->vol, 16);
    put_le64(o + 32, bid->slice);
    put_le32(o + 40, bid->indx);
    put_le32(o + 44, keg_crc32c(0, o, 44));
}

/* Returns 0, or -EINVAL (unknown codec, raw_len over 4 GiB or not bid->blen,
 * out_cap too small). */
int keg_block_encode(int codec, const struct keg_block_id *bid, const void *raw, size_t raw_len,
                     void *out, size_t out_cap, size_t *out_len)
{
    unsigned char *o = out;
    size_t plen = 0;

    *out_len = 0;
    if (codec != KEG_CODEC_NONE && codec != KEG_CODEC_LZ4 && codec != KEG_CODEC_ZSTD)
        return -EINVAL;
    if (!bid || raw_len != bid->blen || out_cap < KEG_BLOCK_HDR + raw_len)
        return -EINVAL;
    if (codec != KEG_CODEC_NONE && raw_len > 0)
        plen = block_compress(codec, raw, raw_len, o + KEG_BLOCK_HDR, raw_len - 1);
    if (plen == 0) {
        codec = KEG_CODEC_NONE;
        plen = raw_len;
        if (raw_len)
            memcpy(o + KEG_BLOCK_HDR, raw, raw_len);
    }
    block_hdr_put(o, codec, bid, keg_crc32c(0, raw, raw_len));
    *out_len = KEG_BLOCK_HDR + plen;
    return 0;
}

size_t keg_block_seal(void *obj, const struct keg_block_id *bid)
{
    unsigned char *o = obj;

    block_hdr_put(o, KEG_CODEC_NONE, bid, keg_crc32c(0, o + KEG_BLOCK_HDR, bid->blen));
    return KEG_BLOCK_HDR + bid->blen;
}

/* What is wrong with a header (for keg_block_why). */
enum hdr_fault {
    HDR_OK = 0,
    HDR_SHORT,          /* shorter than its header */
    HDR_MAGIC,          /* not a block */
    HDR_VERSION,        /* unknown version or header length */
    HDR_DAMAGED,        /* header CRC mismatch, reserved bits set */
    HDR_V1,             /* version 1 where the volume requires version 2 */
    HDR_IDENTITY,       /* sound, written for another identity */
};

/* Checks the header of obj[0..obj_len) (only its header bytes need be there)
 * against bid (NULL: any identity).  On success sets the codec, the raw
 * length, its CRC32C and the header length. */
static enum hdr_fault block_hdr_check(const void *obj, size_t obj_len,
                                      const struct keg_block_id *bid, int *codec,
                                      uint32_t *raw_len, uint32_t *crc, size_t *hlen)
{
    const unsigned char *h = obj;

    *codec = -1;
    *raw_len = 0;
    *crc = 0;
    *hlen = 0;
    if (!obj || obj_len < KEG_BLOCK_HDR_V1)
        return HDR_SHORT;
    if (get_le32(h) != BLOCK_MAGIC)
        return HDR_MAGIC;
    if (h[4] == BLOCK_V1) {
        if (get_le16(h + 6) != 0)
            return HDR_DAMAGED;
        if (bid && !bid->v1_ok)
            return HDR_V1;
        if (bid && get_le32(h + 8) != bid->blen)
            return HDR_IDENTITY;
        *hlen = KEG_BLOCK_HDR_V1;
    } else if (h[4] == BLOCK_V2) {
        if (get_le16(h + 6) != KEG_BLOCK_HDR)
            return HDR_VERSION;
        if (obj_len < KEG_BLOCK_HDR)
            return HDR_SHORT;
        if (keg_crc32c(0, h, 44) != get_le32(h + 44))
            return HDR_DAMAGED;
        if (bid && (memcmp(h + 16, bid->vol, 16) != 0 || get_le64(h + 32) != bid->slice ||
                    get_le32(h + 40) != bid->indx || get_le32(h + 8) != bid->blen))
            return HDR_IDENTITY;
        *hlen = KEG_BLOCK_HDR;
    } else {
        return HDR_VERSION;
    }
    *codec = h[5];
    *raw_len = get_le32(h + 8);
    *crc = get_le32(h + 12);
    return HDR_OK;
}

size_t keg_block_hdr_len(const void *obj)
{
    return ((const unsigned char *)obj)[4] == BLOCK_V1 ? KEG_BLOCK_HDR_V1 : KEG_BLOCK_HDR;
}

int keg_block_check_header(const void *obj, size_t len, const struct keg_block_id *bid)
{
    uint32_t raw_len, crc;
    size_t hlen;
    int codec;

    if (block_hdr_check(obj, len, bid, &codec, &raw_len, &crc, &hlen) != HDR_OK)
        return -EIO;
    return hlen == KEG_BLOCK_HDR_V1 ? 1 : 0;
}

int keg_block_header_volume(const void *obj, size_t len, uint8_t vol[16])
{
    const unsigned char *h = obj;
    uint32_t raw_len, crc;
    size_t hlen;
    int codec;

    memset(vol, 0, 16);
    if (block_hdr_check(obj, len, NULL, &codec, &raw_len, &crc, &hlen) != HDR_OK)
        return -EIO;
    if (hlen == KEG_BLOCK_HDR_V1)
        return 1;
    memcpy(vol, h + 16, 16);
    return 0;
}

/* Returns the raw length, or -EIO for any inconsistency. */
ssize_t keg_block_decode(const void *obj, size_t obj_len, const struct keg_block_id *bid,
                         void *raw, size_t raw_cap)
{
    const unsigned char *payload;
    size_t plen, hlen;
    uint32_t raw_len, crc;
    int codec;

    if (block_hdr_check(obj, obj_len, bid, &codec, &raw_len, &crc, &hlen) != HDR_OK ||
        raw_len > raw_cap)
        return -EIO;
    payload = (const unsigned char *)obj + hlen;
    plen = obj_len - hlen;

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
ssize_t keg_block_decode_inplace(const void *obj, size_t obj_len,
                                 const struct keg_block_id *bid, size_t raw_cap)
{
    uint32_t raw_len, crc;
    size_t hlen;
    int codec;

    if (block_hdr_check(obj, obj_len, bid, &codec, &raw_len, &crc, &hlen) != HDR_OK ||
        raw_len > raw_cap)
        return -EIO;
    if (codec == KEG_CODEC_LZ4 || codec == KEG_CODEC_ZSTD)
        return -ENOTSUP;
    if (codec != KEG_CODEC_NONE || obj_len - hlen != raw_len)
        return -EIO;
    if (keg_crc32c(0, (const unsigned char *)obj + hlen, raw_len) != crc)
        return -EIO;
    return (ssize_t)raw_len;
}

const char *keg_block_why(const void *obj, size_t obj_len, const struct keg_block_id *bid,
                          char *buf, size_t size)
{
    const unsigned char *h = obj;
    uint32_t raw_len, crc;
    size_t hlen;
    int codec;
    char u[37];

    switch (block_hdr_check(obj, obj_len, bid, &codec, &raw_len, &crc, &hlen)) {
    case HDR_SHORT:
        snprintf(buf, size, "truncated: %zu bytes, shorter than a block header", obj_len);
        break;
    case HDR_MAGIC:
        snprintf(buf, size, "not a block object (bad magic)");
        break;
    case HDR_VERSION:
        snprintf(buf, size, "unknown block version %u", (unsigned)h[4]);
        break;
    case HDR_DAMAGED:
        snprintf(buf, size, "block header damaged (header checksum mismatch)");
        break;
    case HDR_V1:
        snprintf(buf, size, "a version-1 block without identity, on a volume that "
                 "requires version 2 (written for another volume or key)");
        break;
    case HDR_IDENTITY:
        if (h[4] == BLOCK_V1) {
            snprintf(buf, size, "a version-1 block of %" PRIu32 " bytes where %" PRIu32
                     " were expected (written for another key)", get_le32(h + 8),
                     bid ? bid->blen : 0);
            break;
        }
        keg_uuid_format(h + 16, u);
        snprintf(buf, size, "identity mismatch: the object holds block %" PRIu64 "_%" PRIu32
                 "_%" PRIu32 " of volume %s%s", get_le64(h + 32), get_le32(h + 40),
                 get_le32(h + 8), u,
                 bid && memcmp(h + 16, bid->vol, 16) != 0 ? " (another volume)"
                                                          : " (another key of this volume)");
        break;
    case HDR_OK:
    default:
        snprintf(buf, size, "data checksum mismatch or undecodable payload (codec %d)", codec);
        break;
    }
    return buf;
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

/*----------------------------------------------------------------------------
 * The volume marker
 *--------------------------------------------------------------------------*/

#define MARKER_MAX 512

/* Parses a marker's text: *uuid (capacity 40) from its "uuid=" line.
 * Returns 0 or -EIO (not a marker). */
static int marker_parse(const char *text, char uuid[40])
{
    const char *p = text;

    uuid[0] = '\0';
    if (strncmp(p, "kegfs-volume 1\n", 15) != 0)
        return -EIO;
    while (*p) {
        size_t ll = strcspn(p, "\n");
        if (ll > 5 && ll < 5 + 40 && strncmp(p, "uuid=", 5) == 0) {
            memcpy(uuid, p + 5, ll - 5);
            uuid[ll - 5] = '\0';
            return 0;
        }
        p += ll;
        if (*p == '\n')
            p++;
    }
    return -EIO;
}

int keg_volume_marker_key(char *buf, size_t size, const char *name)
{
    return snprintf(buf, size, "%s/" KEG_VOLUME_MARKER, name);
}

int keg_volume_marker_read(struct keg_obj *o, const char *name, char uuid[40])
{
    char key[128], text[MARKER_MAX + 1];
    ssize_t n;

    uuid[0] = '\0';
    keg_volume_marker_key(key, sizeof(key), name);
    n = keg_obj_get(o, key, 0, text, MARKER_MAX);
    if (n < 0)
        return (int)n;
    text[n] = '\0';
    if (strlen(text) != (size_t)n)
        return -EIO;
    return marker_parse(text, uuid);
}

int keg_volume_marker_claim(struct keg_obj *o, const char *name, const char *uuid,
                            char other[40])
{
    char key[128], text[MARKER_MAX];
    int rc, len;

    other[0] = '\0';
    rc = keg_volume_marker_read(o, name, other);
    if (rc == 0)
        goto compare;
    if (rc != -ENOENT)
        return rc;
    keg_volume_marker_key(key, sizeof(key), name);
    len = snprintf(text, sizeof(text), "kegfs-volume 1\nname=%s\nuuid=%s\n", name, uuid);
    if (len < 0 || (size_t)len >= sizeof(text))
        return -EINVAL;
    rc = keg_obj_put_new(o, key, text, (size_t)len);
    if (rc == -ENOSYS)
        rc = keg_obj_put(o, key, text, (size_t)len);   /* no conditional put: best effort */
    if (rc < 0 && rc != -EEXIST)
        return rc;
    /* read back: on a store that ignores If-None-Match the last writer won,
     * and after -EEXIST (or a retried PUT) the marker says whose it is */
    rc = keg_volume_marker_read(o, name, other);
    if (rc < 0)
        return rc;
compare:
    if (strcmp(other, uuid) != 0)
        return -EEXIST;
    other[0] = '\0';
    return 0;
}

int keg_volume_marker_check(struct keg_obj *o, const char *name, const char *uuid,
                            char other[40])
{
    int rc = keg_volume_marker_read(o, name, other);

    if (rc < 0)
        return rc;
    if (strcmp(other, uuid) != 0)
        return -EEXIST;
    other[0] = '\0';
    return 0;
}
