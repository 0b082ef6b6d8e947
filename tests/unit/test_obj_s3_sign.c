/* test_obj_s3_sign.c -- the SigV4 signer against AWS's published examples.
 *
 * Sources of the expected values:
 *  - Amazon S3 API Reference, "Authenticating Requests: Using the Authorization
 *    Header (AWS Signature Version 4)", section "Examples: Signature
 *    Calculations" (GET Object, PUT Object, GET Bucket Lifecycle, Get Bucket
 *    (List Objects)):
 *    https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
 *    (also https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-auth-using-authorization-header.html)
 *  - AWS General Reference, "Signature Version 4 test suite" (get-vanilla,
 *    get-vanilla-query-order-key-case, post-vanilla):
 *    https://docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "keg/mem.h"
#include "obj/s3_sign_i.h"

#define EX_AK "AKIAIOSFODNN7EXAMPLE"
#define EX_SK "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define EX_HOST "examplebucket.s3.amazonaws.com"
#define EX_DATE "20130524T000000Z"
#define EX_TIME ((time_t)1369353600)          /* 2013-05-24T00:00:00Z */

static char *encode(const char *s, int keep_slash)
{
    struct s3_str o = {0};
    s3_uri_encode(&o, s, strlen(s), keep_slash);
    assert_false(o.oom);
    return o.p ? o.p : keg_strdup("");
}

static char *canon_query(const struct s3_kv *kv, size_t n)
{
    struct s3_str o = {0};
    s3_canonical_query(&o, kv, n);
    assert_false(o.oom);
    return o.p ? o.p : keg_strdup("");
}

static void sign_example(const char *method, const char *uri, const char *query,
                         const struct s3_kv *hdrs, size_t n, const char *payload_hash,
                         const char *want_creq, const char *want_sts, const char *want_sig,
                         const char *want_signed)
{
    struct s3_signer s;
    struct s3_sign_result r;
    assert_int_equal(s3_signer_init(&s, EX_AK, EX_SK, NULL, "us-east-1", "s3"), 0);
    struct s3_sign_req req = {
        .method = method, .uri = uri, .query = query, .headers = hdrs, .nheaders = n,
        .payload_hash = payload_hash, .amz_date = EX_DATE,
    };
    assert_int_equal(s3_sign(&s, &req, &r), 0);
    assert_string_equal(r.canonical_request, want_creq);
    assert_string_equal(r.string_to_sign, want_sts);
    assert_string_equal(r.signature, want_sig);
    assert_string_equal(r.signed_headers, want_signed);
    char auth[512];
    snprintf(auth, sizeof(auth),
             "AWS4-HMAC-SHA256 Credential=" EX_AK "/20130524/us-east-1/s3/aws4_request, "
             "SignedHeaders=%s, Signature=%s", want_signed, want_sig);
    assert_string_equal(r.authorization, auth);
    s3_sign_result_free(&r);
    s3_signer_fini(&s);
}

/* Example: GET Object (the first 10 bytes of test.txt, Range header). */
static void test_aws_s3_get_object(void **state)
{
    (void)state;
    const struct s3_kv h[] = {
        { "Host", EX_HOST },
        { "Range", "bytes=0-9" },
        { "x-amz-content-sha256", S3_EMPTY_SHA256 },
        { "x-amz-date", EX_DATE },
    };
    sign_example("GET", "/test.txt", "", h, 4, S3_EMPTY_SHA256,
                 "GET\n/test.txt\n\n"
                 "host:examplebucket.s3.amazonaws.com\n"
                 "range:bytes=0-9\n"
                 "x-amz-content-sha256:" S3_EMPTY_SHA256 "\n"
                 "x-amz-date:20130524T000000Z\n\n"
                 "host;range;x-amz-content-sha256;x-amz-date\n" S3_EMPTY_SHA256,
                 "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                 "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
                 "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
                 "host;range;x-amz-content-sha256;x-amz-date");
}

/* Example: PUT Object (test$file.text, "Welcome to Amazon S3.", storage class). */
static void test_aws_s3_put_object(void **state)
{
    (void)state;
    char body_hash[S3_SHA256_HEX];
    const char *body = "Welcome to Amazon S3.";
    s3_sha256_hex(body, strlen(body), body_hash);
    assert_string_equal(body_hash,
                        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
    char *uri = encode("/test$file.text", 1);
    assert_string_equal(uri, "/test%24file.text");
    const struct s3_kv h[] = {
        { "Host", EX_HOST },
        { "Date", "Fri, 24 May 2013 00:00:00 GMT" },
        { "x-amz-date", EX_DATE },
        { "x-amz-storage-class", "REDUCED_REDUNDANCY" },
        { "x-amz-content-sha256", body_hash },
    };
    sign_example("PUT", uri, "", h, 5, body_hash,
                 "PUT\n/test%24file.text\n\n"
                 "date:Fri, 24 May 2013 00:00:00 GMT\n"
                 "host:examplebucket.s3.amazonaws.com\n"
                 "x-amz-content-sha256:"
                 "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
                 "x-amz-date:20130524T000000Z\n"
                 "x-amz-storage-class:REDUCED_REDUNDANCY\n\n"
                 "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
                 "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
                 "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                 "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d",
                 "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
                 "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
    keg_free(uri);
}

/* Example: GET Bucket Lifecycle (a sub-resource without value: "lifecycle="). */
static void test_aws_s3_get_lifecycle(void **state)
{
    (void)state;
    const struct s3_kv q[] = { { "lifecycle", NULL } };
    char *query = canon_query(q, 1);
    assert_string_equal(query, "lifecycle=");
    const struct s3_kv h[] = {
        { "Host", EX_HOST },
        { "x-amz-date", EX_DATE },
        { "x-amz-content-sha256", S3_EMPTY_SHA256 },
    };
    sign_example("GET", "/", query, h, 3, S3_EMPTY_SHA256,
                 "GET\n/\nlifecycle=\n"
                 "host:examplebucket.s3.amazonaws.com\n"
                 "x-amz-content-sha256:" S3_EMPTY_SHA256 "\n"
                 "x-amz-date:20130524T000000Z\n\n"
                 "host;x-amz-content-sha256;x-amz-date\n" S3_EMPTY_SHA256,
                 "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                 "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca",
                 "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
                 "host;x-amz-content-sha256;x-amz-date");
    keg_free(query);
}

/* Example: Get Bucket (List Objects), ?max-keys=2&prefix=J given out of order. */
static void test_aws_s3_list_objects(void **state)
{
    (void)state;
    const struct s3_kv q[] = { { "prefix", "J" }, { "max-keys", "2" } };
    char *query = canon_query(q, 2);
    assert_string_equal(query, "max-keys=2&prefix=J");
    const struct s3_kv h[] = {
        { "x-amz-date", EX_DATE },
        { "x-amz-content-sha256", S3_EMPTY_SHA256 },
        { "host", EX_HOST },
    };
    sign_example("GET", "/", query, h, 3, S3_EMPTY_SHA256,
                 "GET\n/\nmax-keys=2&prefix=J\n"
                 "host:examplebucket.s3.amazonaws.com\n"
                 "x-amz-content-sha256:" S3_EMPTY_SHA256 "\n"
                 "x-amz-date:20130524T000000Z\n\n"
                 "host;x-amz-content-sha256;x-amz-date\n" S3_EMPTY_SHA256,
                 "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                 "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7",
                 "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
                 "host;x-amz-content-sha256;x-amz-date");
    keg_free(query);
}

/* The request-level helper reproduces the GET Object example from a time_t. */
static void test_sign_headers_get_object(void **state)
{
    (void)state;
    struct s3_signer s;
    struct s3_hdr_lines hl;
    const struct s3_kv extra[] = { { "Range", "bytes=0-9" } };
    assert_int_equal(s3_signer_init(&s, EX_AK, EX_SK, NULL, "us-east-1", "s3"), 0);
    assert_int_equal(s3_sign_headers(&s, "GET", EX_HOST, "/test.txt", "", extra, 1,
                                     S3_EMPTY_SHA256, EX_TIME, &hl), 0);
    assert_string_equal(hl.signature,
                        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    assert_int_equal(hl.n, 5);
    assert_string_equal(hl.line[0], "Host: " EX_HOST);
    assert_string_equal(hl.line[1], "x-amz-date: " EX_DATE);
    assert_string_equal(hl.line[2], "x-amz-content-sha256: " S3_EMPTY_SHA256);
    assert_string_equal(hl.line[3], "Range: bytes=0-9");
    assert_non_null(strstr(hl.line[4], "Authorization: AWS4-HMAC-SHA256 Credential=" EX_AK
                                       "/20130524/us-east-1/s3/aws4_request, SignedHeaders="
                                       "host;range;x-amz-content-sha256;x-amz-date, Signature="
                                       "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd9103"));
    s3_hdr_lines_free(&hl);

    /* A second sign on another day re-derives the cached key (not the stale one). */
    assert_int_equal(s3_sign_headers(&s, "GET", EX_HOST, "/test.txt", "", extra, 1,
                                     S3_EMPTY_SHA256, EX_TIME + 86400, &hl), 0);
    assert_string_not_equal(hl.signature,
                            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    assert_string_equal(hl.line[1], "x-amz-date: 20130525T000000Z");
    char day2[S3_SHA256_HEX];
    memcpy(day2, hl.signature, sizeof(day2));
    s3_hdr_lines_free(&hl);
    assert_int_equal(s3_sign_headers(&s, "GET", EX_HOST, "/test.txt", "", extra, 1,
                                     S3_EMPTY_SHA256, EX_TIME, &hl), 0);
    assert_string_equal(hl.signature,
                        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    s3_hdr_lines_free(&hl);
    s3_signer_fini(&s);

    /* A fresh signer agrees with the day-2 signature of the cached one. */
    assert_int_equal(s3_signer_init(&s, EX_AK, EX_SK, NULL, "us-east-1", "s3"), 0);
    assert_int_equal(s3_sign_headers(&s, "GET", EX_HOST, "/test.txt", "", extra, 1,
                                     S3_EMPTY_SHA256, EX_TIME + 86400, &hl), 0);
    assert_string_equal(hl.signature, day2);
    s3_hdr_lines_free(&hl);
    s3_signer_fini(&s);
}

/* A session token is sent and signed as x-amz-security-token. */
static void test_sign_headers_session_token(void **state)
{
    (void)state;
    struct s3_signer s;
    struct s3_hdr_lines hl;
    assert_int_equal(s3_signer_init(&s, EX_AK, EX_SK, "TOKEN/+=", "us-east-1", "s3"), 0);
    assert_int_equal(s3_sign_headers(&s, "GET", EX_HOST, "/", "", NULL, 0, S3_EMPTY_SHA256,
                                     EX_TIME, &hl), 0);
    assert_int_equal(hl.n, 5);
    assert_string_equal(hl.line[3], "x-amz-security-token: TOKEN/+=");
    assert_non_null(strstr(hl.line[4], "SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
                                       "x-amz-security-token, "));
    s3_hdr_lines_free(&hl);
    s3_signer_fini(&s);
}

/* The generic SigV4 test suite (service "service", 2015-08-30T12:36:00Z). */
static void suite_sign(const char *method, const char *query, const char *want_creq_hash,
                       const char *want_sig)
{
    struct s3_signer s;
    struct s3_sign_result r;
    char h[S3_SHA256_HEX];
    assert_int_equal(s3_signer_init(&s, "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                                    NULL, "us-east-1", "service"), 0);
    const struct s3_kv hd[] = {
        { "Host", "example.amazonaws.com" },
        { "X-Amz-Date", "20150830T123600Z" },
    };
    struct s3_sign_req req = {
        .method = method, .uri = "/", .query = query, .headers = hd, .nheaders = 2,
        .payload_hash = S3_EMPTY_SHA256, .amz_date = "20150830T123600Z",
    };
    assert_int_equal(s3_sign(&s, &req, &r), 0);
    if (want_creq_hash) {
        s3_sha256_hex(r.canonical_request, strlen(r.canonical_request), h);
        assert_string_equal(h, want_creq_hash);
    }
    assert_string_equal(r.signature, want_sig);
    assert_non_null(strstr(r.authorization,
                           "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                           "SignedHeaders=host;x-amz-date, "));
    s3_sign_result_free(&r);
    s3_signer_fini(&s);
}

static void test_aws_suite_vanilla(void **state)
{
    (void)state;
    suite_sign("GET", "", "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
               "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
    suite_sign("POST", "", NULL,
               "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
    const struct s3_kv q[] = { { "Param2", "value2" }, { "Param1", "value1" } };
    char *query = canon_query(q, 2);
    assert_string_equal(query, "Param1=value1&Param2=value2");
    suite_sign("GET", query, NULL,
               "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
    keg_free(query);
}

/*----------------------------------------------------------------------------
 * Encoding edge cases
 *--------------------------------------------------------------------------*/

static void expect_enc(const char *in, int keep_slash, const char *want)
{
    char *o = encode(in, keep_slash);
    assert_string_equal(o, want);
    keg_free(o);
}

static void test_uri_encode(void **state)
{
    (void)state;
    expect_enc("", 1, "");
    expect_enc("AZaz09-._~", 0, "AZaz09-._~");
    expect_enc("a b", 1, "a%20b");
    expect_enc("/dir/sub dir/f+1=2&x", 1, "/dir/sub%20dir/f%2B1%3D2%26x");
    expect_enc("/dir/file", 0, "%2Fdir%2Ffile");
    expect_enc("caf\xc3\xa9", 1, "caf%C3%A9");
    expect_enc("\xe2\x82\xac*?#%", 1, "%E2%82%AC%2A%3F%23%25");
    expect_enc("~user:1,2;@!$'()", 1, "~user%3A1%2C2%3B%40%21%24%27%28%29");
    expect_enc("\x01\x7f\xff", 0, "%01%7F%FF");
    /* Already-encoded input is encoded again (S3 keys are raw; no double-decode). */
    expect_enc("a%20b", 1, "a%2520b");
}

static void test_canonical_query(void **state)
{
    (void)state;
    char *q;
    q = canon_query(NULL, 0);
    assert_string_equal(q, "");
    keg_free(q);

    /* Sorted by encoded name, then by encoded value (byte order: "10" < "2"). */
    const struct s3_kv a[] = { { "k", "2" }, { "k", "10" }, { "b", "x y" }, { "a~", "/" } };
    q = canon_query(a, 4);
    assert_string_equal(q, "a~=%2F&b=x%20y&k=10&k=2");
    keg_free(q);

    /* '=' and '&' inside names and values are encoded, not separators. */
    const struct s3_kv b[] = { { "prefix", "a=b&c" }, { "continuation-token", "1/+==" },
                               { "list-type", "2" }, { "a b", "" } };
    q = canon_query(b, 4);
    assert_string_equal(q, "a%20b=&continuation-token=1%2F%2B%3D%3D&list-type=2&"
                           "prefix=a%3Db%26c");
    keg_free(q);

    /* Sorting happens on the encoded form: "%" (0x25) sorts before "A" and "_". */
    const struct s3_kv c[] = { { "_", "1" }, { "A", "1" }, { "\xc3\xa9", "1" }, { " ", "1" } };
    q = canon_query(c, 4);
    assert_string_equal(q, "%20=1&%C3%A9=1&A=1&_=1");
    keg_free(q);
}

static void test_canonical_headers(void **state)
{
    (void)state;
    struct s3_signer s;
    struct s3_sign_result r;
    assert_int_equal(s3_signer_init(&s, EX_AK, EX_SK, NULL, "us-east-1", "s3"), 0);
    const struct s3_kv h[] = {
        { "X-Amz-Meta-B", "  two   words\there  " },
        { "HOST", EX_HOST },
        { "x-amz-meta-a", "1" },
        { "X-AMZ-META-A", "2" },
        { "x-amz-date", EX_DATE },
    };
    struct s3_sign_req req = {
        .method = "GET", .uri = "/", .query = "", .headers = h, .nheaders = 5,
        .payload_hash = S3_UNSIGNED_PAYLOAD, .amz_date = EX_DATE,
    };
    assert_int_equal(s3_sign(&s, &req, &r), 0);
    assert_string_equal(r.canonical_request,
                        "GET\n/\n\n"
                        "host:" EX_HOST "\n"
                        "x-amz-date:" EX_DATE "\n"
                        "x-amz-meta-a:1,2\n"
                        "x-amz-meta-b:two words here\n\n"
                        "host;x-amz-date;x-amz-meta-a;x-amz-meta-b\nUNSIGNED-PAYLOAD");
    assert_string_equal(r.signed_headers, "host;x-amz-date;x-amz-meta-a;x-amz-meta-b");
    s3_sign_result_free(&r);

    /* Bad input is refused, and the result is left empty. */
    req.amz_date = "2013-05-24";
    assert_int_equal(s3_sign(&s, &req, &r), -EINVAL);
    assert_null(r.authorization);
    req.amz_date = EX_DATE;
    req.uri = "test.txt";
    assert_int_equal(s3_sign(&s, &req, &r), -EINVAL);
    s3_signer_fini(&s);

    assert_int_equal(s3_signer_init(&s, EX_AK, "", NULL, "us-east-1", "s3"), -EINVAL);
    s3_signer_fini(&s);
    assert_int_equal(s3_signer_init(&s, NULL, EX_SK, NULL, "us-east-1", "s3"), -EINVAL);
    s3_signer_fini(&s);
}

static void test_amz_date_and_hash(void **state)
{
    (void)state;
    char d[S3_AMZ_DATE], h[S3_SHA256_HEX];
    s3_amz_date(EX_TIME, d);
    assert_string_equal(d, EX_DATE);
    s3_amz_date(0, d);
    assert_string_equal(d, "19700101T000000Z");
    s3_sha256_hex("", 0, h);
    assert_string_equal(h, S3_EMPTY_SHA256);
    s3_sha256_hex(NULL, 0, h);
    assert_string_equal(h, S3_EMPTY_SHA256);
}

/* Every allocation failure is reported as -ENOMEM and leaks nothing (ASan). */
static void test_sign_alloc_failures(void **state)
{
    (void)state;
    struct s3_signer s;
    assert_int_equal(s3_signer_init(&s, EX_AK, EX_SK, "tok", "us-east-1", "s3"), 0);
    const struct s3_kv extra[] = { { "Range", "bytes=0-9" } };
    int ok = 0;
    for (long n = 1; n < 200 && !ok; n++) {
        struct s3_hdr_lines hl;
        keg_mem_fail_at(n);
        int rc = s3_sign_headers(&s, "GET", EX_HOST, "/k", "", extra, 1, S3_EMPTY_SHA256,
                                 EX_TIME, &hl);
        keg_mem_fail_at(0);
        if (rc == 0) {
            ok = 1;
            s3_hdr_lines_free(&hl);
        } else {
            assert_int_equal(rc, -ENOMEM);
            assert_int_equal(hl.n, 0);
        }
    }
    assert_true(ok);
    s3_signer_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aws_s3_get_object),
        cmocka_unit_test(test_aws_s3_put_object),
        cmocka_unit_test(test_aws_s3_get_lifecycle),
        cmocka_unit_test(test_aws_s3_list_objects),
        cmocka_unit_test(test_sign_headers_get_object),
        cmocka_unit_test(test_sign_headers_session_token),
        cmocka_unit_test(test_aws_suite_vanilla),
        cmocka_unit_test(test_uri_encode),
        cmocka_unit_test(test_canonical_query),
        cmocka_unit_test(test_canonical_headers),
        cmocka_unit_test(test_amz_date_and_hash),
        cmocka_unit_test(test_sign_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
