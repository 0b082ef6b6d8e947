/* test_util_hash.c -- keg_fnv1a64* / keg_fnv1a32_str against the published
 * FNV-1a vectors: the values name files and CSI volume ids, so they must
 * never change. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "keg/hash.h"

static void test_fnv1a64_vectors(void **state)
{
    (void)state;
    assert_true(keg_fnv1a64_str("") == 0xcbf29ce484222325ULL);
    assert_true(keg_fnv1a64_str("a") == 0xaf63dc4c8601ec8cULL);
    assert_true(keg_fnv1a64_str("foobar") == 0x85944171f73967e8ULL);
    assert_true(keg_fnv1a64("foobar", 6) == 0x85944171f73967e8ULL);
    /* bytes after a NUL count when a length is given */
    assert_true(keg_fnv1a64("a\0b", 3) != keg_fnv1a64_str("a"));
}

static void test_fnv1a64_update_chains(void **state)
{
    (void)state;
    uint64_t h = keg_fnv1a64_update(KEG_FNV1A64_INIT, "foo", 3);
    h = keg_fnv1a64_update(h, "bar", 3);
    assert_true(h == 0x85944171f73967e8ULL);
    assert_true(keg_fnv1a64_update(h, "", 0) == h);
}

static void test_fnv1a64_hex(void **state)
{
    char out[17];
    (void)state;
    memset(out, 'x', sizeof(out));
    keg_fnv1a64_hex("/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv/mount", out);
    assert_string_equal(out, "75f04d07abcd3c5b");
    keg_fnv1a64_hex("", out);
    assert_string_equal(out, "cbf29ce484222325");
}

static void test_fnv1a32_vectors(void **state)
{
    (void)state;
    assert_int_equal(keg_fnv1a32_str(""), 0x811c9dc5u);
    assert_int_equal(keg_fnv1a32_str(NULL), 0x811c9dc5u);
    assert_int_equal(keg_fnv1a32_str("a"), 0xe40c292cu);
    assert_int_equal(keg_fnv1a32_str("foobar"), 0xbf9cf968u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv1a64_vectors),
        cmocka_unit_test(test_fnv1a64_update_chains),
        cmocka_unit_test(test_fnv1a64_hex),
        cmocka_unit_test(test_fnv1a32_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
