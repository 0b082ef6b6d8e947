/* test_util_mountinfo.c -- keg_mountinfo_find(): what is mounted at a path.
 * The source is compiled in so its static unescape helper is reachable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../core/util/keg_mountinfo.c"

static void test_find(void **state)
{
    (void)state;
    char fstype[64];
    assert_int_equal(keg_mountinfo_find("/", fstype, sizeof(fstype)), 1);
    assert_true(fstype[0] != '\0');
    assert_int_equal(keg_mountinfo_find("/proc", fstype, sizeof(fstype)), 1);
    assert_string_equal(fstype, "proc");
    assert_int_equal(keg_mountinfo_find("/proc/self", fstype, sizeof(fstype)), 0);
    assert_string_equal(fstype, "");
    assert_int_equal(keg_mountinfo_find("/proc/self", NULL, 0), 0);
    /* a short buffer is cut, still terminated */
    char small[3];
    assert_int_equal(keg_mountinfo_find("/proc", small, sizeof(small)), 1);
    assert_string_equal(small, "pr");
}

static void test_unescape(void **state)
{
    (void)state;
    char s[] = "/mnt/with\\040space\\011tab\\134end\\9";
    mountinfo_unescape(s);
    assert_string_equal(s, "/mnt/with space\ttab\\end\\9");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_unescape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
