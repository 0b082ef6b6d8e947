/* test_obj_block.c -- block objects: codec round trips, corruption, in-place verification,
 * identity (another key or volume is -EIO), version-1 blocks, keys, the volume marker. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "keg/obj.h"

static const int codecs[] = {KEG_CODEC_NONE, KEG_CODEC_LZ4, KEG_CODEC_ZSTD};
static const char TEST_UUID[] = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0ff";

/* The identity the tests encode blocks for: slice 77, block 3, n bytes. */
static struct keg_block_id bid_of(size_t n)
{
    struct keg_block_id b = {.slice = 77, .indx = 3, .blen = (uint32_t)n};
    assert_int_equal(keg_block_vol_uuid(TEST_UUID, b.vol), 0);
    return b;
}

static struct keg_block_id bid_tmp[8];
static unsigned bid_next;
/* A pointer to bid_of(n) that stays valid for a few calls (for arguments). */
static const struct keg_block_id *bidp(size_t n)
{
    struct keg_block_id *b = &bid_tmp[bid_next++ % 8];
    *b = bid_of(n);
    return b;
}
static const size_t sizes[] = {0, 1, 4095, 4u << 20};

static void fill_random(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 32);
    }
}

/* Compressible: short words, repeated. */
static void fill_text(unsigned char *p, size_t n)
{
    static const char words[] = "kegfs stores file data in immutable blocks ";
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)words[(i + i / 1000) % (sizeof(words) - 1)];
}

static void encode_ok(int codec, const unsigned char *raw, size_t n, unsigned char **obj,
                      size_t *olen)
{
    size_t cap = keg_block_bound(codec, n);
    assert_true(cap >= KEG_BLOCK_HDR + n);
    *obj = malloc(cap);
    assert_non_null(*obj);
    assert_int_equal(keg_block_encode(codec, bidp(n), raw, n, *obj, cap, olen), 0);
    assert_true(*olen >= KEG_BLOCK_HDR && *olen <= cap);
}

static void roundtrip(int codec, const unsigned char *raw, size_t n, int expect_codec)
{
    unsigned char *obj, *out = malloc(n + 1);
    size_t olen;
    assert_non_null(out);
    encode_ok(codec, raw, n, &obj, &olen);
    assert_int_equal(obj[5], expect_codec);
    if (expect_codec == KEG_CODEC_NONE)
        assert_int_equal(olen, KEG_BLOCK_HDR + n);
    else
        assert_true(olen < KEG_BLOCK_HDR + n);
    assert_int_equal(keg_block_decode(obj, olen, bidp(n), out, n), (ssize_t)n);
    if (n)
        assert_memory_equal(out, raw, n);
    /* A larger output buffer is fine too. */
    assert_int_equal(keg_block_decode(obj, olen, bidp(n), out, n + 1), (ssize_t)n);
    free(obj);
    free(out);
}

static void test_roundtrip_all(void **state)
{
    unsigned char *rnd = malloc(4u << 20), *txt = malloc(4u << 20);
    (void)state;
    assert_non_null(rnd);
    assert_non_null(txt);
    fill_random(rnd, 4u << 20, 42);
    fill_text(txt, 4u << 20);
    for (size_t c = 0; c < sizeof(codecs) / sizeof(codecs[0]); c++) {
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            size_t n = sizes[s];
            /* Incompressible data is always stored as codec none. */
            roundtrip(codecs[c], rnd, n, KEG_CODEC_NONE);
            /* Text compresses once there is enough of it. */
            roundtrip(codecs[c], txt, n, n >= 4095 ? codecs[c] : KEG_CODEC_NONE);
        }
    }
    free(rnd);
    free(txt);
}

static void test_header_layout(void **state)
{
    unsigned char obj[KEG_BLOCK_HDR + 9];
    size_t olen;
    (void)state;
    static const unsigned char uuid[16] = {0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x49, 0x78,
                                           0x86, 0x95, 0xa4, 0xb3, 0xc2, 0xd1, 0xe0, 0xff};
    const struct keg_block_id *b = bidp(9);
    assert_int_equal(keg_block_encode(KEG_CODEC_ZSTD, b, "123456789", 9, obj, sizeof(obj), &olen),
                     0);
    assert_int_equal(olen, KEG_BLOCK_HDR + 9);
    assert_memory_equal(obj, "KEGB", 4);
    assert_int_equal(obj[4], 2);
    assert_int_equal(obj[5], KEG_CODEC_NONE);     /* 9 bytes do not compress */
    assert_int_equal(obj[6] | obj[7] << 8, 48);
    assert_int_equal(obj[8] | obj[9] << 8 | obj[10] << 16 | (uint32_t)obj[11] << 24, 9);
    assert_int_equal(obj[12] | obj[13] << 8 | obj[14] << 16 | (uint32_t)obj[15] << 24,
                     0xE3069283u);
    assert_memory_equal(obj + 16, uuid, 16);
    assert_memory_equal(obj + 32, "\x4d\0\0\0\0\0\0\0", 8);      /* slice 77 */
    assert_memory_equal(obj + 40, "\x03\0\0\0", 4);                 /* block 3 */
    assert_int_equal(obj[44] | obj[45] << 8 | obj[46] << 16 | (uint32_t)obj[47] << 24,
                     keg_crc32c(0, obj, 44));
    assert_memory_equal(obj + KEG_BLOCK_HDR, "123456789", 9);
    assert_int_equal(keg_block_hdr_len(obj), 48);
}

static void test_encode_errors(void **state)
{
    unsigned char obj[64];
    size_t olen = 123;
    (void)state;
    assert_int_equal(keg_block_encode(7, bidp(3), "abc", 3, obj, sizeof(obj), &olen), -EINVAL);
    assert_int_equal(olen, 0);
    assert_int_equal(keg_block_encode(KEG_CODEC_NONE, bidp(3), "abc", 3, obj, KEG_BLOCK_HDR + 2,
                                      &olen), -EINVAL);
    /* the raw length must be the identity's, and there must be one */
    assert_int_equal(keg_block_encode(KEG_CODEC_NONE, bidp(4), "abc", 3, obj, sizeof(obj),
                                      &olen), -EINVAL);
    assert_int_equal(keg_block_encode(KEG_CODEC_NONE, NULL, "abc", 3, obj, sizeof(obj), &olen),
                     -EINVAL);
    assert_int_equal(keg_codec_parse("none"), KEG_CODEC_NONE);
    assert_int_equal(keg_codec_parse("lz4"), KEG_CODEC_LZ4);
    assert_int_equal(keg_codec_parse("zstd"), KEG_CODEC_ZSTD);
    assert_int_equal(keg_codec_parse("gzip"), -EINVAL);
    assert_int_equal(keg_codec_parse(""), -EINVAL);
    assert_int_equal(keg_codec_parse(NULL), -EINVAL);
}

/* A damaged object must decode to -EIO, or (compressed codecs only: a flip in
 * a bit the decoder ignores) to exactly the original bytes -- never to wrong
 * bytes.  Returns 1 if it decoded (a neutral change). */
static int damaged(const unsigned char *obj, size_t olen, const unsigned char *raw, size_t n,
                   unsigned char *out, int strict)
{
    ssize_t r = keg_block_decode(obj, olen, bidp(n), out, n + 64);
    if (r == -EIO)
        return 0;
    if (strict)
        fail_msg("damaged codec-none block decoded (%zd)", r);
    assert_int_equal(r, (ssize_t)n);
    assert_memory_equal(out, raw, n);
    return 1;
}

/* Every single-byte flip, every truncation and bad header field. */
static void corrupt_all(int codec, const unsigned char *raw, size_t n, int expect_codec)
{
    unsigned char *obj, *bad, *out = malloc(n + 64);
    size_t olen;
    assert_non_null(out);
    encode_ok(codec, raw, n, &obj, &olen);
    assert_int_equal(obj[5], expect_codec);
    bad = malloc(olen + 1);
    assert_non_null(bad);

    /* Byte flips (every byte for small objects, a stride for large ones); the
     * header and, for codec none, every byte must be caught. */
    int strict = expect_codec == KEG_CODEC_NONE;
    size_t stride = olen > 4096 ? olen / 997 : 1, tried = 0, neutral = 0;
    for (size_t i = 0; i < olen; i += stride) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(bad, obj, olen);
            bad[i] ^= (unsigned char)(1u << bit);
            neutral += (size_t)damaged(bad, olen, raw, n, out, strict || i < KEG_BLOCK_HDR);
            tried++;
        }
    }
    assert_true(neutral * 20 <= tried);
    /* Truncation at every length (stride for large) and one extra byte. */
    for (size_t l = 0; l < olen; l += stride)
        assert_int_equal(keg_block_decode(obj, l, bidp(n), out, n + 64), -EIO);
    memcpy(bad, obj, olen);
    bad[olen] = 0;
    damaged(bad, olen + 1, raw, n, out, strict);
    /* Output buffer too small. */
    if (n)
        assert_int_equal(keg_block_decode(obj, olen, bidp(n), out, n - 1), -EIO);
    /* Unknown codec, version, reserved bits. */
    memcpy(bad, obj, olen);
    bad[5] = 3;
    assert_int_equal(keg_block_decode(bad, olen, bidp(n), out, n + 64), -EIO);
    memcpy(bad, obj, olen);
    bad[4] = 3;
    assert_int_equal(keg_block_decode(bad, olen, bidp(n), out, n + 64), -EIO);
    memcpy(bad, obj, olen);
    bad[7] = 1;
    assert_int_equal(keg_block_decode(bad, olen, bidp(n), out, n + 64), -EIO);
    /* A raw length that lies (larger and smaller) with a consistent-looking rest. */
    memcpy(bad, obj, olen);
    bad[8] = (unsigned char)(bad[8] + 1);
    assert_int_equal(keg_block_decode(bad, olen, bidp(n), out, n + 64), -EIO);
    memcpy(bad, obj, olen);
    bad[11] = 0xff;
    assert_int_equal(keg_block_decode(bad, olen, bidp(n), out, n + 64), -EIO);
    free(bad);
    free(obj);
    free(out);
}

static void test_corruption(void **state)
{
    size_t n = 64 << 10;
    unsigned char *rnd = malloc(n), *txt = malloc(n);
    (void)state;
    assert_non_null(rnd);
    assert_non_null(txt);
    fill_random(rnd, n, 7);
    fill_text(txt, n);
    corrupt_all(KEG_CODEC_NONE, rnd, 1000, KEG_CODEC_NONE);
    corrupt_all(KEG_CODEC_NONE, rnd, 1, KEG_CODEC_NONE);
    corrupt_all(KEG_CODEC_LZ4, txt, 5000, KEG_CODEC_LZ4);
    corrupt_all(KEG_CODEC_ZSTD, txt, 5000, KEG_CODEC_ZSTD);
    corrupt_all(KEG_CODEC_LZ4, txt, n, KEG_CODEC_LZ4);
    corrupt_all(KEG_CODEC_ZSTD, txt, n, KEG_CODEC_ZSTD);
    /* Swapping the codec byte of a compressed block. */
    {
        unsigned char *obj, out[5000];
        size_t olen;
        encode_ok(KEG_CODEC_LZ4, txt, 5000, &obj, &olen);
        obj[5] = KEG_CODEC_ZSTD;
        assert_int_equal(keg_block_decode(obj, olen, bidp(5000), out, sizeof(out)), -EIO);
        obj[5] = KEG_CODEC_NONE;
        assert_int_equal(keg_block_decode(obj, olen, bidp(5000), out, sizeof(out)), -EIO);
        free(obj);
    }
    /* Garbage and empty inputs. */
    {
        unsigned char out[16];
        assert_int_equal(keg_block_decode(NULL, 0, bidp(16), out, sizeof(out)), -EIO);
        assert_int_equal(keg_block_decode("", 0, bidp(16), out, sizeof(out)), -EIO);
        assert_int_equal(keg_block_decode(rnd, 4096, bidp(16), out, sizeof(out)), -EIO);
        assert_int_equal(keg_block_decode(rnd, 4096, NULL, out, sizeof(out)), -EIO);
    }
    /* An empty block claiming a compressed codec is invalid. */
    {
        unsigned char obj[KEG_BLOCK_HDR], out[1];
        size_t olen;
        assert_int_equal(keg_block_encode(KEG_CODEC_NONE, bidp(0), "", 0, obj, sizeof(obj),
                                          &olen), 0);
        assert_int_equal(keg_block_decode(obj, olen, bidp(0), out, 0), 0);
        obj[5] = KEG_CODEC_LZ4;
        assert_int_equal(keg_block_decode(obj, olen, bidp(0), out, sizeof(out)), -EIO);
    }
    free(rnd);
    free(txt);
}

/* In-place verification (keg_block_decode_inplace) of a damaged codec-none
 * object: -EIO, or -ENOTSUP when the flip turned the codec byte into a
 * compressed codec -- and then the decoder the caller falls back to fails. */
static void inplace_bad(const unsigned char *obj, size_t olen, size_t n, size_t raw_cap)
{
    ssize_t r = keg_block_decode_inplace(obj, olen, bidp(n), raw_cap);
    if (r == -ENOTSUP) {
        unsigned char *out = malloc(raw_cap + 1);
        assert_non_null(out);
        assert_int_equal(keg_block_decode(obj, olen, bidp(n), out, raw_cap), -EIO);
        free(out);
        return;
    }
    assert_int_equal(r, -EIO);
}

static void test_decode_inplace(void **state)
{
    unsigned char *rnd = malloc(4u << 20), *txt = malloc(4u << 20);
    (void)state;
    assert_non_null(rnd);
    assert_non_null(txt);
    fill_random(rnd, 4u << 20, 9);
    fill_text(txt, 4u << 20);

    /* Good codec-none blocks: the raw length, the payload is the data. */
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s], olen;
        unsigned char *obj;
        encode_ok(KEG_CODEC_NONE, rnd, n, &obj, &olen);
        assert_int_equal(keg_block_decode_inplace(obj, olen, bidp(n), n), (ssize_t)n);
        assert_int_equal(keg_block_decode_inplace(obj, olen, bidp(n), n + 1), (ssize_t)n);
        if (n) {
            assert_memory_equal(obj + KEG_BLOCK_HDR, rnd, n);
            assert_int_equal(keg_block_decode_inplace(obj, olen, bidp(n), n - 1), -EIO);
        }
        free(obj);
    }

    /* Bad CRC: every bit flip of a small block (every 3rd bit), every
     * truncation, one extra byte. */
    {
        size_t n = 1000, olen;
        unsigned char *obj, *bad;
        encode_ok(KEG_CODEC_NONE, rnd, n, &obj, &olen);
        bad = malloc(olen + 1);
        assert_non_null(bad);
        for (size_t i = 0; i < olen; i++) {
            for (int bit = 0; bit < 8; bit += 3) {
                memcpy(bad, obj, olen);
                bad[i] ^= (unsigned char)(1u << bit);
                inplace_bad(bad, olen, n, n + 64);
            }
        }
        for (size_t l = 0; l < olen; l++)
            assert_int_equal(keg_block_decode_inplace(obj, l, bidp(n), n + 64), -EIO);
        memcpy(bad, obj, olen);
        bad[olen] = 0;
        assert_int_equal(keg_block_decode_inplace(bad, olen + 1, bidp(n), n + 64), -EIO);

        /* Bad header: magic, version, reserved, unknown codec, lying length. */
        static const struct { size_t at; unsigned char v; } hdr_bad[] = {
            {0, 'X'}, {4, 3}, {4, 1}, {6, 1}, {7, 1}, {5, 3}, {5, 0xff}, {8, 0xe9}, {9, 0x04},
            {11, 0xff}, {16, 0}, {32, 0}, {40, 0}, {44, 0},
        };
        for (size_t k = 0; k < sizeof(hdr_bad) / sizeof(hdr_bad[0]); k++) {
            memcpy(bad, obj, olen);
            bad[hdr_bad[k].at] = hdr_bad[k].v;
            assert_int_equal(keg_block_decode_inplace(bad, olen, bidp(n), n + 64), -EIO);
        }
        /* the CRC field itself */
        memcpy(bad, obj, olen);
        bad[12] ^= 1;
        assert_int_equal(keg_block_decode_inplace(bad, olen, bidp(n), n + 64), -EIO);
        free(bad);
        free(obj);
    }

    /* Compressed blocks are refused (-ENOTSUP) once their header is sound, and
     * still decode with keg_block_decode; a bad header is -EIO as before. */
    for (int c = KEG_CODEC_LZ4; c <= KEG_CODEC_ZSTD; c++) {
        size_t n = 64 << 10, olen;
        unsigned char *obj, *out = malloc(n);
        assert_non_null(out);
        encode_ok(c, txt, n, &obj, &olen);
        assert_int_equal(obj[5], c);
        assert_int_equal(keg_block_decode_inplace(obj, olen, bidp(n), n), -ENOTSUP);
        assert_int_equal(keg_block_decode(obj, olen, bidp(n), out, n), (ssize_t)n);
        assert_memory_equal(out, txt, n);
        assert_int_equal(keg_block_decode_inplace(obj, olen, bidp(n), n - 1), -EIO);
        obj[0] ^= 1;
        assert_int_equal(keg_block_decode_inplace(obj, olen, bidp(n), n), -EIO);
        /* a compressed block relabelled as codec none fails the length or CRC */
        obj[0] ^= 1;
        obj[5] = KEG_CODEC_NONE;
        assert_int_equal(keg_block_decode_inplace(obj, olen, bidp(n), n), -EIO);
        free(obj);
        free(out);
    }

    /* Garbage and empty inputs. */
    assert_int_equal(keg_block_decode_inplace(NULL, 0, bidp(16), 16), -EIO);
    assert_int_equal(keg_block_decode_inplace("", 0, bidp(16), 16), -EIO);
    assert_int_equal(keg_block_decode_inplace(rnd, 4096, bidp(16), 1u << 30), -EIO);
    assert_int_equal(keg_block_decode_inplace(rnd, 4096, NULL, 1u << 30), -EIO);
    free(rnd);
    free(txt);
}

/* keg_block_seal makes, in place, the very object keg_block_encode(NONE) makes. */
static void test_seal_inplace(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        unsigned char *raw = malloc(n + 1), *obj, *buf = malloc(KEG_BLOCK_HDR + n + 1);
        size_t olen;
        assert_non_null(raw);
        assert_non_null(buf);
        fill_random(raw, n, 7 + n);
        encode_ok(KEG_CODEC_NONE, raw, n, &obj, &olen);
        memset(buf, 0xa5, KEG_BLOCK_HDR);               /* the room holds garbage */
        memcpy(buf + KEG_BLOCK_HDR, raw, n);
        assert_int_equal(keg_block_seal(buf, bidp(n)), olen);
        assert_memory_equal(buf, obj, olen);
        assert_int_equal(keg_block_decode_inplace(buf, olen, bidp(n), n), (ssize_t)n);
        free(obj);
        free(buf);
        free(raw);
    }
}

static void test_keys(void **state)
{
    char buf[256];
    uint64_t id;
    uint32_t indx, blen;
    (void)state;

    assert_int_equal(keg_block_key(buf, sizeof(buf), "vol1", 1234567890ull, 3, 4194304),
                     (int)strlen("vol1/chunks/1234/1234567/1234567890_3_4194304"));
    assert_string_equal(buf, "vol1/chunks/1234/1234567/1234567890_3_4194304");
    keg_block_key(buf, sizeof(buf), "v", 5, 0, 1);
    assert_string_equal(buf, "v/chunks/0/0/5_0_1");
    /* Truncation returns the full length, like snprintf. */
    assert_int_equal(keg_block_key(buf, 4, "v", 5, 0, 1), (int)strlen("v/chunks/0/0/5_0_1"));

    assert_int_equal(keg_block_key_parse("vol1/chunks/1234/1234567/1234567890_3_4194304", &id,
                                         &indx, &blen), 0);
    assert_true(id == 1234567890ull);
    assert_int_equal(indx, 3);
    assert_int_equal(blen, 4194304);
    assert_int_equal(keg_block_key_parse("1234/1234567/1234567890_3_4194304", &id, &indx, &blen),
                     0);
    assert_true(id == 1234567890ull);
    assert_int_equal(keg_block_key_parse("18446744073709551615_4294967295_4294967295", &id,
                                         &indx, &blen), 0);
    assert_true(id == UINT64_MAX);
    assert_int_equal(indx, UINT32_MAX);
    assert_int_equal(blen, UINT32_MAX);

    /* Round trip over a spread of ids. */
    for (uint64_t i = 0; i < 64; i++) {
        uint64_t want = i * 999999937ull + i;
        keg_block_key(buf, sizeof(buf), "vv", want, (uint32_t)i, (uint32_t)(i * 7));
        assert_int_equal(keg_block_key_parse(buf, &id, &indx, &blen), 0);
        assert_true(id == want);
        assert_int_equal(indx, i);
        assert_int_equal(blen, i * 7);
    }

    static const char *bad[] = {
        "", "v/chunks/0/0/5_0", "v/chunks/0/0/5_0_1_2", "v/chunks/0/0/5__1", "v/chunks/0/0/_0_1",
        "v/chunks/0/0/5_0_1x", "v/chunks/0/0/-5_0_1", "v/chunks/0/0/+5_0_1",
        "v/chunks/0/0/05_0_1", "v/chunks/0/0/5_4294967296_1", "v/chunks/0/0/5_0_4294967296",
        "18446744073709551616_0_1", "v/chunks/0/1/5_0_1", "v/chunks/1/0/5_0_1",
        "v/chunks/0/0/", "0/5_0_1", "v/chunks/0/0/5 _0_1", "v/chunks/0/0/5_0_ 1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        id = 9;
        indx = 9;
        blen = 9;
        if (keg_block_key_parse(bad[i], &id, &indx, &blen) != -EINVAL)
            fail_msg("accepted bad key \"%s\"", bad[i]);
        assert_true(id == 0 && indx == 0 && blen == 0);
    }
    assert_int_equal(keg_block_key_parse(NULL, &id, &indx, &blen), -EINVAL);
}

/* A valid block of another key or volume never decodes as this one: each
 * field of the identity, every codec, both decoders, the header check, and
 * the reason given for the log. */
static void test_identity(void **state)
{
    size_t n = 5000;
    unsigned char *txt = malloc(n), *out = malloc(n + 64);
    char why[200];
    (void)state;
    assert_non_null(txt);
    assert_non_null(out);
    fill_text(txt, n);
    for (size_t c = 0; c < sizeof(codecs) / sizeof(codecs[0]); c++) {
        unsigned char *obj;
        size_t olen;
        encode_ok(codecs[c], txt, n, &obj, &olen);
        struct keg_block_id good = bid_of(n);
        assert_int_equal(keg_block_decode(obj, olen, &good, out, n), (ssize_t)n);
        assert_int_equal(keg_block_decode(obj, olen, NULL, out, n), (ssize_t)n);
        assert_int_equal(keg_block_check_header(obj, KEG_BLOCK_HDR, &good), 0);
        uint8_t vol[16];
        assert_int_equal(keg_block_header_volume(obj, KEG_BLOCK_HDR, vol), 0);
        assert_memory_equal(vol, good.vol, 16);
        assert_int_equal(keg_block_header_volume(obj, KEG_BLOCK_HDR - 1, vol), -EIO);
        for (int field = 0; field < 5; field++) {
            struct keg_block_id other = good;
            switch (field) {
            case 0: other.vol[15] ^= 1; break;              /* another volume */
            case 1: other.vol[0] ^= 0x80; break;
            case 2: other.slice++; break;                   /* another slice */
            case 3: other.indx = 0; break;                  /* another block of the slice */
            case 4: other.blen = (uint32_t)n - 1; break;    /* another length */
            }
            assert_int_equal(keg_block_decode(obj, olen, &other, out, n + 64), -EIO);
            ssize_t r = keg_block_decode_inplace(obj, olen, &other, n + 64);
            assert_int_equal(r, -EIO);
            assert_int_equal(keg_block_check_header(obj, olen, &other), -EIO);
            /* legacy reading allowed or not, a version-2 identity must match */
            other.v1_ok = 1;
            assert_int_equal(keg_block_decode(obj, olen, &other, out, n + 64), -EIO);
            keg_block_why(obj, olen, &other, why, sizeof(why));
            assert_non_null(strstr(why, "identity mismatch"));
            assert_non_null(strstr(why, "77_3_5000"));
            assert_non_null(strstr(why, TEST_UUID));
            assert_non_null(strstr(why, field < 2 ? "another volume" : "another key"));
        }
        free(obj);
    }
    /* the reason for other failures */
    {
        unsigned char *obj;
        size_t olen;
        encode_ok(KEG_CODEC_NONE, txt, n, &obj, &olen);
        obj[KEG_BLOCK_HDR + 10] ^= 1;
        keg_block_why(obj, olen, bidp(n), why, sizeof(why));
        assert_non_null(strstr(why, "checksum"));
        obj[20] ^= 1;
        keg_block_why(obj, olen, bidp(n), why, sizeof(why));
        assert_non_null(strstr(why, "header damaged"));
        keg_block_why(obj, 10, bidp(n), why, sizeof(why));
        assert_non_null(strstr(why, "truncated"));
        obj[0] = 'X';
        keg_block_why(obj, olen, bidp(n), why, sizeof(why));
        assert_non_null(strstr(why, "not a block"));
        free(obj);
    }
    free(txt);
    free(out);
}

/* A version-1 block (16-byte header, no identity) made from a version-2 one. */
static size_t make_v1(const unsigned char *v2, size_t v2len, unsigned char *v1)
{
    memcpy(v1, v2, 16);
    v1[4] = 1;
    v1[6] = 0;
    v1[7] = 0;
    memcpy(v1 + 16, v2 + KEG_BLOCK_HDR, v2len - KEG_BLOCK_HDR);
    return v2len - KEG_BLOCK_HDR + 16;
}

/* Volumes formatted before identities: their version-1 blocks read where the
 * volume allows them (v1_ok), with the length still bound, and nowhere else. */
static void test_v1_blocks(void **state)
{
    size_t n = 5000;
    unsigned char *txt = malloc(n), *out = malloc(n + 64);
    char why[200];
    (void)state;
    assert_non_null(txt);
    assert_non_null(out);
    fill_text(txt, n);
    for (size_t c = 0; c < sizeof(codecs) / sizeof(codecs[0]); c++) {
        unsigned char *obj, *v1;
        size_t olen, v1len;
        encode_ok(codecs[c], txt, n, &obj, &olen);
        v1 = malloc(olen);
        assert_non_null(v1);
        v1len = make_v1(obj, olen, v1);
        struct keg_block_id legacy = bid_of(n), strict = bid_of(n);
        legacy.v1_ok = 1;
        memset(out, 0, n);
        assert_int_equal(keg_block_decode(v1, v1len, &legacy, out, n), (ssize_t)n);
        assert_memory_equal(out, txt, n);
        assert_int_equal(keg_block_decode(v1, v1len, NULL, out, n), (ssize_t)n);
        if (codecs[c] == KEG_CODEC_NONE) {
            assert_int_equal(keg_block_decode_inplace(v1, v1len, &legacy, n), (ssize_t)n);
            assert_int_equal(keg_block_hdr_len(v1), 16);
            assert_memory_equal(v1 + keg_block_hdr_len(v1), txt, n);
        } else {
            assert_int_equal(keg_block_decode_inplace(v1, v1len, &legacy, n), -ENOTSUP);
        }
        assert_int_equal(keg_block_check_header(v1, 16, &legacy), 1);
        uint8_t vol[16];
        assert_int_equal(keg_block_header_volume(v1, 16, vol), 1);
        /* a volume made with identities refuses them */
        assert_int_equal(keg_block_decode(v1, v1len, &strict, out, n), -EIO);
        assert_int_equal(keg_block_decode_inplace(v1, v1len, &strict, n), -EIO);
        assert_int_equal(keg_block_check_header(v1, v1len, &strict), -EIO);
        keg_block_why(v1, v1len, &strict, why, sizeof(why));
        assert_non_null(strstr(why, "version-1"));
        /* the length in the key still binds */
        legacy.blen = (uint32_t)n + 1;
        assert_int_equal(keg_block_decode(v1, v1len, &legacy, out, n + 64), -EIO);
        /* damage is still caught */
        legacy.blen = (uint32_t)n;
        v1[16 + v1len / 2 - 8] ^= 0x10;
        assert_int_equal(keg_block_decode(v1, v1len, &legacy, out, n + 64), -EIO);
        free(v1);
        free(obj);
    }
    free(txt);
    free(out);
}

static void test_vol_uuid(void **state)
{
    uint8_t a[16], b[16];
    (void)state;
    assert_int_equal(keg_block_vol_uuid("00112233-4455-6677-8899-aabbccddeeff", a), 0);
    for (int i = 0; i < 16; i++)
        assert_int_equal(a[i], (uint8_t)(i * 0x11));
    assert_int_equal(keg_block_vol_uuid("00112233-4455-6677-8899-AABBCCDDEEFF", b), 0);
    assert_memory_equal(a, b, 16);
    /* not a UUID: hashed, stable, distinct */
    assert_int_equal(keg_block_vol_uuid("u1", a), 1);
    assert_int_equal(keg_block_vol_uuid("u1", b), 1);
    assert_memory_equal(a, b, 16);
    assert_int_equal(keg_block_vol_uuid("u2", b), 1);
    assert_true(memcmp(a, b, 16) != 0);
    assert_int_equal(keg_block_vol_uuid("00112233-4455-6677-8899-aabbccddeef", b), 1);
    assert_int_equal(keg_block_vol_uuid("", b), 1);
    assert_int_equal(keg_block_vol_uuid(NULL, b), 1);
}

/* The volume marker: one volume claims a prefix; another is refused. */
static void test_volume_marker(void **state)
{
    static const char ua[] = "aaaaaaaa-0000-4000-8000-000000000001";
    static const char ub[] = "bbbbbbbb-0000-4000-8000-000000000002";
    struct keg_obj *o = NULL;
    char other[40], uuid[40];
    (void)state;
    assert_int_equal(keg_obj_open("mem", NULL, NULL, &o), 0);
    assert_int_equal(keg_volume_marker_read(o, "vol", uuid), -ENOENT);
    assert_int_equal(keg_volume_marker_check(o, "vol", ua, other), -ENOENT);
    assert_int_equal(keg_volume_marker_claim(o, "vol", ua, other), 0);
    assert_int_equal(keg_volume_marker_read(o, "vol", uuid), 0);
    assert_string_equal(uuid, ua);
    assert_int_equal(keg_volume_marker_claim(o, "vol", ua, other), 0);      /* idempotent */
    assert_int_equal(keg_volume_marker_check(o, "vol", ua, other), 0);
    assert_int_equal(keg_volume_marker_claim(o, "vol", ub, other), -EEXIST);
    assert_string_equal(other, ua);
    assert_int_equal(keg_volume_marker_check(o, "vol", ub, other), -EEXIST);
    assert_string_equal(other, ua);
    assert_int_equal(keg_volume_marker_read(o, "vol", uuid), 0);
    assert_string_equal(uuid, ua);                                           /* unchanged */
    /* another name is another prefix */
    assert_int_equal(keg_volume_marker_claim(o, "vol2", ub, other), 0);
    /* put_new itself */
    assert_int_equal(keg_obj_put_new(o, "vol/x", "1", 1), 0);
    assert_int_equal(keg_obj_put_new(o, "vol/x", "2", 1), -EEXIST);
    /* an object there that is not a marker */
    assert_int_equal(keg_obj_put(o, "bad/" KEG_VOLUME_MARKER, "hello", 5), 0);
    assert_int_equal(keg_volume_marker_claim(o, "bad", ua, other), -EIO);
    assert_int_equal(keg_volume_marker_check(o, "bad", ua, other), -EIO);
    keg_obj_close(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all),
        cmocka_unit_test(test_header_layout),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_decode_inplace),
        cmocka_unit_test(test_seal_inplace),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_v1_blocks),
        cmocka_unit_test(test_vol_uuid),
        cmocka_unit_test(test_volume_marker),
    };
    return cmocka_run_group_tests_name("obj_block", tests, NULL, NULL);
}
