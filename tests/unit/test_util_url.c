/* test_util_url.c -- keg_url_parse / keg_url_redact / keg_url_unescape. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "keg/url.h"

static void test_parse_sqlite(void **state)
{
    struct keg_url u;
    const char *err = "x";
    (void)state;
    assert_int_equal(keg_url_parse("sqlite3:///var/lib/kegfs/meta.db", &u, &err), 0);
    assert_null(err);
    assert_string_equal(u.scheme, "sqlite3");
    assert_string_equal(u.host, "");
    assert_string_equal(u.path, "/var/lib/kegfs/meta.db");
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "");
    assert_string_equal(u.query, "");
    assert_int_equal(u.port, 0);
    assert_int_equal(u.has_password, 0);
    keg_url_free(&u);
    /* a relative path shows up as a host: the engine rejects it */
    assert_int_equal(keg_url_parse("sqlite3://rel/meta.db", &u, &err), 0);
    assert_string_equal(u.host, "rel");
    assert_string_equal(u.path, "/meta.db");
    keg_url_free(&u);
    /* '@' in a path is not userinfo */
    assert_int_equal(keg_url_parse("sqlite3:///tmp/a@b.db", &u, &err), 0);
    assert_string_equal(u.path, "/tmp/a@b.db");
    assert_string_equal(u.user, "");
    keg_url_free(&u);
}

static void test_parse_redis(void **state)
{
    struct keg_url u;
    const char *err;
    (void)state;
    assert_int_equal(keg_url_parse("redis://:pass@host:6379/2", &u, &err), 0);
    assert_string_equal(u.scheme, "redis");
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "pass");
    assert_int_equal(u.has_password, 1);
    assert_string_equal(u.host, "host");
    assert_int_equal(u.port, 6379);
    assert_string_equal(u.path, "/2");
    keg_url_free(&u);

    assert_int_equal(keg_url_parse("redis://user:p%40ss@[::1]:7000/0?ns=vol1&x=y", &u, &err), 0);
    assert_string_equal(u.user, "user");
    assert_string_equal(u.password, "p@ss");
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 7000);
    assert_string_equal(u.path, "/0");
    assert_string_equal(u.query, "ns=vol1&x=y");
    keg_url_free(&u);

    /* '@' in a password is written %40; an unescaped second '@' is refused */
    assert_int_equal(keg_url_parse("rediss://u:a%40b@h/1", &u, &err), 0);
    assert_string_equal(u.password, "a@b");
    assert_string_equal(u.host, "h");
    assert_int_equal(u.port, 0);
    keg_url_free(&u);
    assert_int_equal(keg_url_parse("rediss://u:a@b@h/1", &u, &err), -EINVAL);
    assert_non_null(strstr(err, "%40"));
    assert_int_equal(keg_url_parse("redis://:@@host/6", &u, &err), -EINVAL);
    assert_int_equal(keg_url_parse("redis://@@host/6", &u, &err), -EINVAL);
    /* an '@' after the authority (in the path or query) is not userinfo */
    assert_int_equal(keg_url_parse("redis://:pw@h/1?ns=a@b", &u, &err), 0);
    assert_string_equal(u.password, "pw");
    assert_string_equal(u.host, "h");
    keg_url_free(&u);

    /* user without password */
    assert_int_equal(keg_url_parse("redis://alice@h:1/", &u, &err), 0);
    assert_string_equal(u.user, "alice");
    assert_int_equal(u.has_password, 0);
    assert_string_equal(u.path, "/");
    keg_url_free(&u);

    /* IPv6 without port, no path */
    assert_int_equal(keg_url_parse("redis://[fe80::1]", &u, &err), 0);
    assert_string_equal(u.host, "fe80::1");
    assert_int_equal(u.port, 0);
    assert_string_equal(u.path, "");
    keg_url_free(&u);

    /* unix socket style */
    assert_int_equal(keg_url_parse("unix:///run/redis.sock?db=3", &u, &err), 0);
    assert_string_equal(u.path, "/run/redis.sock");
    assert_string_equal(u.query, "db=3");
    keg_url_free(&u);
}

static void test_parse_sentinel(void **state)
{
    struct keg_url u;
    const char *err;
    (void)state;
    assert_int_equal(keg_url_parse("redis+sentinel://:pw@h1:26379,h2:26380,h3/mymaster/1", &u,
                                   &err), 0);
    assert_string_equal(u.scheme, "redis+sentinel");
    assert_string_equal(u.password, "pw");
    assert_string_equal(u.host, "h1:26379,h2:26380,h3");
    assert_int_equal(u.port, 0);
    assert_string_equal(u.path, "/mymaster/1");
    keg_url_free(&u);
    /* IPv6 entries inside a list are kept verbatim */
    assert_int_equal(keg_url_parse("redis+sentinel://[::1]:26379,[::2]:26379/m", &u, &err), 0);
    assert_string_equal(u.host, "[::1]:26379,[::2]:26379");
    keg_url_free(&u);
}

static void test_parse_errors(void **state)
{
    struct keg_url u;
    const char *err;
    (void)state;
    static const char *const bad[] = {
        "", "localhost:6379", "://host", "1redis://h", "re dis://h", "redis://h:", "redis://h:abc",
        "redis://h:0", "redis://h:65536", "redis://h:99999999999999999999", "redis://[::1",
        "redis://[::1]x", "redis://:p%zz@h", "redis://:p%4@h", "redis://:p%00x@h", NULL,
    };
    for (int i = 0; bad[i]; i++) {
        err = NULL;
        memset(&u, 0x5a, sizeof(u));
        if (keg_url_parse(bad[i], &u, &err) != -EINVAL)
            fail_msg("accepted bad url '%s'", bad[i]);
        assert_non_null(err);
        assert_null(u.scheme);          /* nothing to free on failure */
    }
    assert_int_equal(keg_url_parse(NULL, &u, &err), -EINVAL);
    assert_int_equal(keg_url_parse("redis://h:65535", &u, NULL), 0);
    assert_int_equal(u.port, 65535);
    keg_url_free(&u);
    keg_url_free(NULL);
}

static void test_redact(void **state)
{
    char buf[256];
    (void)state;
    assert_string_equal(keg_url_redact("redis://:secret@h:6379/1", buf, sizeof(buf)),
                        "redis://:****@h:6379/1");
    assert_string_equal(keg_url_redact("redis://user:p%40ss@[::1]:7000/0", buf, sizeof(buf)),
                        "redis://user:****@[::1]:7000/0");
    assert_string_equal(keg_url_redact("rediss://u:a@b@h/1", buf, sizeof(buf)),
                        "rediss://u:****@h/1");
    /* an unescaped '/' in the password does not leak it */
    keg_url_redact("redis://:pa/ss@h/1", buf, sizeof(buf));
    assert_null(strstr(buf, "pa/ss"));
    assert_null(strstr(buf, "ss@"));
    /* no password: unchanged */
    assert_string_equal(keg_url_redact("redis://alice@h/1?ns=x", buf, sizeof(buf)),
                        "redis://alice@h/1?ns=x");
    assert_string_equal(keg_url_redact("sqlite3:///tmp/a@b.db", buf, sizeof(buf)),
                        "sqlite3:///tmp/a@b.db");
    /* secret-looking query parameters */
    assert_string_equal(keg_url_redact("s3://h/b?access_key=AK&secret_key=SK&region=r"
                                       "&sentinel_password=x&X-Amz-Signature=sig&token=t",
                                       buf, sizeof(buf)),
                        "s3://h/b?access_key=****&secret_key=****&region=r"
                        "&sentinel_password=****&X-Amz-Signature=****&token=****");
    assert_string_equal(keg_url_redact("redis://:pw@h1:1,h2:2/m?sentinel_password=zz&db=1",
                                       buf, sizeof(buf)),
                        "redis://:****@h1:1,h2:2/m?sentinel_password=****&db=1");
    /* missing scheme still hides the password */
    keg_url_redact("user:hunter2@host/0", buf, sizeof(buf));
    assert_null(strstr(buf, "hunter2"));
    /* truncation always terminates and never shows the secret */
    char small[12];
    keg_url_redact("redis://:topsecret@h/1", small, sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_null(strstr(small, "topsecret"));
    assert_string_equal(keg_url_redact(NULL, buf, sizeof(buf)), "");
    assert_ptr_equal(keg_url_redact("x", buf, 0), buf);
}

static void test_unescape(void **state)
{
    char s1[] = "a%20b%2Fc%2fd";
    char s2[] = "bad%g1";
    char s3[] = "trail%";
    char s4[] = "nul%00";
    char s5[] = "";
    (void)state;
    assert_int_equal(keg_url_unescape(s1), 0);
    assert_string_equal(s1, "a b/c/d");
    assert_int_equal(keg_url_unescape(s2), -EINVAL);
    assert_int_equal(keg_url_unescape(s3), -EINVAL);
    assert_int_equal(keg_url_unescape(s4), -EINVAL);
    assert_int_equal(keg_url_unescape(s5), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_sqlite),
        cmocka_unit_test(test_parse_redis),
        cmocka_unit_test(test_parse_sentinel),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_unescape),
    };
    return cmocka_run_group_tests_name("util_url", tests, NULL, NULL);
}
