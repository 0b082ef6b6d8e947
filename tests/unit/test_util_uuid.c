/* test_util_uuid.c -- keg_uuid_v4: form, version and variant, uniqueness. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "keg/uuid.h"

static void check_form(const char *u)
{
    assert_int_equal(strlen(u), 36);
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            assert_int_equal(u[i], '-');
        else
            assert_non_null(strchr("0123456789abcdef", u[i]));
    }
    assert_int_equal(u[14], '4');                        /* version 4 */
    assert_non_null(strchr("89ab", u[19]));              /* RFC 4122 variant */
}

static void test_uuid_form_and_unique(void **state)
{
    char a[KEG_UUID_STR_LEN], b[KEG_UUID_STR_LEN];
    (void)state;
    for (int i = 0; i < 100; i++) {
        keg_uuid_v4(a);
        keg_uuid_v4(b);
        check_form(a);
        check_form(b);
        assert_string_not_equal(a, b);
    }
}

/* Callers keep UUIDs in 40-byte fields (struct keg_format): it fits. */
static void test_uuid_into_format_field(void **state)
{
    char field[40];
    (void)state;
    memset(field, 'x', sizeof(field));
    keg_uuid_v4(field);
    check_form(field);
    assert_int_equal(field[36], '\0');
    assert_int_equal(field[37], 'x');
}

static void test_uuid_format(void **state)
{
    const uint8_t b[16] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                           0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10};
    char out[KEG_UUID_STR_LEN];
    (void)state;
    keg_uuid_format(b, out);
    assert_string_equal(out, "01234567-89ab-cdef-fedc-ba9876543210");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uuid_form_and_unique),
        cmocka_unit_test(test_uuid_into_format_field),
        cmocka_unit_test(test_uuid_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
