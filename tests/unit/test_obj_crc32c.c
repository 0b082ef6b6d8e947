/* test_obj_crc32c.c -- CRC32C: known vectors, chaining, software vs hardware. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "keg/obj.h"
#include "obj/crc32c_i.h"

static void test_known_vectors(void **state)
{
    unsigned char zeros[32] = {0}, ones[32];
    unsigned char inc[32];
    memset(ones, 0xff, sizeof(ones));
    for (int i = 0; i < 32; i++)
        inc[i] = (unsigned char)i;
    (void)state;
    /* RFC 3720 appendix B.4 test vectors and the common "123456789" check value. */
    assert_int_equal(keg_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(keg_crc32c(0, zeros, 32), 0x8A9136AAu);
    assert_int_equal(keg_crc32c(0, ones, 32), 0x62A8AB43u);
    assert_int_equal(keg_crc32c(0, inc, 32), 0x46DD794Eu);
    assert_int_equal(keg_crc32c(0, "", 0), 0u);
    assert_int_equal(keg_crc32c(0, NULL, 0), 0u);
    assert_int_equal(keg_crc32c_sw(0, "123456789", 9), 0xE3069283u);
}

static void test_chaining(void **state)
{
    size_t n = 10000;
    unsigned char *buf = malloc(n);
    (void)state;
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 131 + (i >> 7));
    uint32_t whole = keg_crc32c(0, buf, n);
    /* Every split point in a window, and splits at odd alignments. */
    for (size_t cut = 0; cut <= 70; cut++) {
        uint32_t c = keg_crc32c(keg_crc32c(0, buf, cut), buf + cut, n - cut);
        assert_int_equal(c, whole);
    }
    uint32_t c = 0;
    for (size_t off = 0; off < n;) {
        size_t step = KEG_MIN((size_t)(off % 13 + 1), n - off);
        c = keg_crc32c(c, buf + off, step);
        off += step;
    }
    assert_int_equal(c, whole);
    free(buf);
}

static void test_sw_hw_agree(void **state)
{
    size_t n = 1 << 16;
    unsigned char *buf = malloc(n + 16);
    uint64_t x = 88172645463325252ull;
    (void)state;
    if (!keg_crc32c_hw_available()) {
        free(buf);
        skip();
    }
    assert_non_null(buf);
    for (size_t i = 0; i < n + 16; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    assert_int_equal(keg_crc32c_hw(0, "123456789", 9), 0xE3069283u);
    /* All misalignments and many lengths, including the head/tail paths. */
    for (size_t off = 0; off < 16; off++) {
        for (size_t len = 0; len < 300; len++)
            assert_int_equal(keg_crc32c_hw(0, buf + off, len), keg_crc32c_sw(0, buf + off, len));
        assert_int_equal(keg_crc32c_hw(0x12345678u, buf + off, n),
                         keg_crc32c_sw(0x12345678u, buf + off, n));
    }
    /* Lengths around the three-lane stripe (3 * 8 KiB) and several stripes,
     * from a nonzero starting value and split at odd places. */
    {
        static const size_t lens[] = { 24575, 24576, 24577, 49152 + 13, 65536 };
        for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
            size_t l = lens[k];
            uint32_t want = keg_crc32c_sw(0xdeadbeefu, buf + 3, l);
            assert_int_equal(keg_crc32c_hw(0xdeadbeefu, buf + 3, l), want);
            assert_int_equal(keg_crc32c_hw(keg_crc32c_hw(0xdeadbeefu, buf + 3, 1001),
                                           buf + 3 + 1001, l - 1001), want);
        }
    }
    /* The dispatched function agrees with both. */
    assert_int_equal(keg_crc32c(0, buf, n), keg_crc32c_sw(0, buf, n));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_vectors),
        cmocka_unit_test(test_chaining),
        cmocka_unit_test(test_sw_hw_agree),
    };
    return cmocka_run_group_tests_name("obj_crc32c", tests, NULL, NULL);
}
