/* test_meta_format.c -- keg_format_encode/decode and keg_format_check_name. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "keg/mem.h"
#include "keg/meta.h"

static void fill_weird(struct keg_format *f)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "vol-1");
    snprintf(f->uuid, sizeof(f->uuid), "00000000-0000-4000-8000-000000000001");
    snprintf(f->storage, sizeof(f->storage), "s3");
    snprintf(f->bucket, sizeof(f->bucket), "https://s3.example.com/b?x=1&y=%%41 z");
    /* every byte 1..255 in the secret key, plus separators */
    for (int i = 1; i < 256; i++)
        f->secret_key[i - 1] = (char)i;
    snprintf(f->access_key, sizeof(f->access_key), "key=with=equals\nand\r\nnewlines%%");
    memset(f->session_token, 'T', sizeof(f->session_token) - 1);   /* full length */
    snprintf(f->region, sizeof(f->region), " leading and trailing ");
    snprintf(f->compress, sizeof(f->compress), "zstd");
    f->block_size = 16u << 20;
    f->capacity = UINT64_MAX;
    f->inodes = 123456789012ULL;
    f->trash_days = UINT32_MAX;
    f->meta_version = 3;
    f->created = INT64_MIN;
    f->block_version = 2;
}

static void assert_same(const struct keg_format *a, const struct keg_format *b)
{
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->uuid, b->uuid);
    assert_string_equal(a->storage, b->storage);
    assert_string_equal(a->bucket, b->bucket);
    assert_string_equal(a->access_key, b->access_key);
    assert_memory_equal(a->secret_key, b->secret_key, sizeof(a->secret_key));
    assert_string_equal(a->session_token, b->session_token);
    assert_string_equal(a->region, b->region);
    assert_string_equal(a->compress, b->compress);
    assert_int_equal(a->block_size, b->block_size);
    assert_int_equal(a->capacity, b->capacity);
    assert_int_equal(a->inodes, b->inodes);
    assert_int_equal(a->trash_days, b->trash_days);
    assert_int_equal(a->meta_version, b->meta_version);
    assert_int_equal(a->created, b->created);
    assert_int_equal(a->block_version, b->block_version);
}

static void test_roundtrip(void **state)
{
    struct keg_format f, g;
    char *text = NULL;
    (void)state;
    fill_weird(&f);
    assert_int_equal(keg_format_encode(&f, &text), 0);
    assert_non_null(text);
    /* one key=value per line, nothing unescaped that could break a line */
    int lines = 0;
    for (const char *p = text; *p; p++) {
        assert_true((unsigned char)*p >= 0x20 || *p == '\n');
        assert_true((unsigned char)*p < 0x7f);
        lines += *p == '\n';
    }
    assert_int_equal(lines, 16);
    assert_non_null(strstr(text, "name=vol-1\n"));
    assert_non_null(strstr(text, "capacity=18446744073709551615\n"));
    assert_non_null(strstr(text, "created=-9223372036854775808\n"));
    memset(&g, 0x5a, sizeof(g));
    assert_int_equal(keg_format_decode(text, &g), 0);
    assert_same(&f, &g);
    keg_free(text);

    /* all-empty struct */
    memset(&f, 0, sizeof(f));
    assert_int_equal(keg_format_encode(&f, &text), 0);
    assert_int_equal(keg_format_decode(text, &g), 0);
    assert_same(&f, &g);
    keg_free(text);
}

static void test_decode_lenient(void **state)
{
    struct keg_format g;
    (void)state;
    /* unknown keys ignored, missing keys zero, CRLF and blank lines accepted,
     * escapes in either case */
    assert_int_equal(keg_format_decode("future_key=whatever\r\n\nname=abc\r\n"
                                       "region=a%2fb%2Fc\nblock_size=65536", &g), 0);
    assert_string_equal(g.name, "abc");
    assert_string_equal(g.region, "a/b/c");
    assert_int_equal(g.block_size, 65536);
    assert_int_equal(g.capacity, 0);
    assert_string_equal(g.bucket, "");
    assert_int_equal(keg_format_decode("", &g), 0);
    assert_string_equal(g.name, "");
    /* empty values */
    assert_int_equal(keg_format_decode("name=\ncapacity=5\n", &g), 0);
    assert_string_equal(g.name, "");
    assert_int_equal(g.capacity, 5);
}

static void test_decode_malformed(void **state)
{
    struct keg_format g;
    char longname[200];
    (void)state;
    static const char *const bad[] = {
        "no equals sign\n", "=value\n", "name=a%zz\n", "name=a%4\n", "name=a%\n",
        "name=a%00b\n", "capacity=abc\n", "capacity=\n", "capacity=-1\n", "capacity=1x\n",
        "capacity=18446744073709551616\n", "block_size=4294967296\n",
        "created=9223372036854775808\n", "created=-9223372036854775809\n", "created=-\n",
        "name=tab\there\n", NULL,
    };
    for (int i = 0; bad[i]; i++) {
        snprintf(g.name, sizeof(g.name), "untouched");
        if (keg_format_decode(bad[i], &g) != -EINVAL)
            fail_msg("accepted malformed '%s'", bad[i]);
        assert_string_equal(g.name, "untouched");     /* unchanged on failure */
    }
    /* a value longer than its field */
    memset(longname, 'a', sizeof(longname));
    memcpy(longname, "name=", 5);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(keg_format_decode(longname, &g), -EINVAL);
    assert_int_equal(keg_format_decode(NULL, &g), -EINVAL);
    /* the largest values that fit are fine */
    assert_int_equal(keg_format_decode("created=-9223372036854775808\n"
                                       "capacity=18446744073709551615\n", &g), 0);
    assert_int_equal(g.created, INT64_MIN);
}

static void test_check_name(void **state)
{
    (void)state;
    char n63[64], n64[65];
    memset(n63, 'a', 63);
    n63[62] = '-';
    n63[63] = '\0';
    memset(n64, 'b', 64);
    n64[64] = '\0';
    const char *const good[] = {"abc", "a-b", "vol-1", "0ab", "a--", "123", n63, NULL};
    const char *const bad[] = {"", "ab", "-ab", "Abc", "ab_c", "ab.c", "ab c", "\xc3\xa4" "bc",
                               n64, NULL};
    for (int i = 0; good[i]; i++)
        if (keg_format_check_name(good[i]) != 0)
            fail_msg("rejected good name '%s'", good[i]);
    for (int i = 0; bad[i]; i++)
        if (keg_format_check_name(bad[i]) != -EINVAL)
            fail_msg("accepted bad name '%s'", bad[i]);
    assert_int_equal(strlen(good[6]), 63);
    assert_int_equal(strlen(bad[8]), 64);
    assert_int_equal(keg_format_check_name(NULL), -EINVAL);
}

static void test_encode_enomem(void **state)
{
    struct keg_format f;
    char *text = (char *)1;
    (void)state;
    memset(&f, 0, sizeof(f));
    keg_mem_fail_at(1);
    assert_int_equal(keg_format_encode(&f, &text), -ENOMEM);
    assert_null(text);
    keg_mem_fail_at(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_decode_lenient),
        cmocka_unit_test(test_decode_malformed),
        cmocka_unit_test(test_check_name),
        cmocka_unit_test(test_encode_enomem),
    };
    return cmocka_run_group_tests_name("meta_format", tests, NULL, NULL);
}
