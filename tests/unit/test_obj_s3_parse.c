/* test_obj_s3_parse.c -- pure helpers of the S3 store: endpoint URL and addressing,
 * ListObjectsV2 and error XML, retry classification, backoff. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "keg/mem.h"
#include "obj/obj_s3_i.h"

/*----------------------------------------------------------------------------
 * Endpoint URLs
 *--------------------------------------------------------------------------*/

static void expect_target(const char *url, const char *region, const char *scheme,
                          const char *host, const char *bucket, const char *prefix, int virt)
{
    struct s3_target t;
    const char *why = NULL;
    int rc = s3_target_parse(url, region, &t, &why);
    if (rc != 0)
        fail_msg("%s: %s", url, why ? why : "?");
    assert_string_equal(t.scheme, scheme);
    assert_string_equal(t.host, host);
    assert_string_equal(t.bucket, bucket);
    assert_string_equal(t.prefix, prefix);
    assert_int_equal(t.virtual_host, virt);
    s3_target_free(&t);
}

static void expect_bad_target(const char *url, const char *why_part)
{
    struct s3_target t;
    const char *why = NULL;
    assert_int_equal(s3_target_parse(url, NULL, &t, &why), -EINVAL);
    assert_non_null(why);
    if (why_part && !strstr(why, why_part))
        fail_msg("%s: reason \"%s\" lacks \"%s\"", url, why, why_part);
    assert_null(t.host);
}

static void test_target_parse(void **state)
{
    (void)state;
    expect_target("http://127.0.0.1:7480/kegtest", NULL, "http", "127.0.0.1:7480", "kegtest",
                  "", 0);
    expect_target("http://127.0.0.1:7480/kegtest/", NULL, "http", "127.0.0.1:7480", "kegtest",
                  "", 0);
    expect_target("https://minio.local/b/vol/a/", NULL, "https", "minio.local", "b", "vol/a/", 0);
    expect_target("http://[::1]:9000/b/p", NULL, "http", "[::1]:9000", "b", "p/", 0);
    expect_target("http://localhost:9000/my_Bucket", NULL, "http", "localhost:9000", "my_Bucket",
                  "", 0);
    /* Forced virtual-hosted: the bucket moves into the host. */
    expect_target("http://localhost:9000/bkt/pre?style=virtual", NULL, "http",
                  "bkt.localhost:9000", "bkt", "pre/", 1);
    /* AWS. */
    expect_target("s3://my-bucket", NULL, "https", "my-bucket.s3.us-east-1.amazonaws.com",
                  "my-bucket", "", 1);
    expect_target("s3://my-bucket/some/prefix", "eu-west-1", "https",
                  "my-bucket.s3.eu-west-1.amazonaws.com", "my-bucket", "some/prefix/", 1);
    expect_target("s3://my-bucket?region=ap-south-1", NULL, "https",
                  "my-bucket.s3.ap-south-1.amazonaws.com", "my-bucket", "", 1);
    expect_target("s3://Dotted_Bucket?style=path", NULL, "https", "s3.us-east-1.amazonaws.com",
                  "Dotted_Bucket", "", 0);
    /* The prefix is percent-decoded (it is re-encoded on the wire). */
    expect_target("http://h/b/a%20b", NULL, "http", "h", "b", "a b/", 0);

    expect_bad_target("", NULL);
    expect_bad_target("ftp://h/b", "scheme");
    expect_bad_target("http://h", "no bucket");
    expect_bad_target("http://h/", "no bucket");
    expect_bad_target("http://h/b?style=sideways", "style");
    expect_bad_target("http://h/b?color=red", "unknown URL option");
    expect_bad_target("http://h/b?region=", "empty region");
    expect_bad_target("http://h/UPPER?style=virtual", "DNS");
    expect_bad_target("s3://ab", "DNS");
    expect_bad_target("s3://bucket:99", "port");
    expect_bad_target("http://h/b%zz", "escape");
    expect_bad_target("http://h/b*c", "bucket");
}

/*----------------------------------------------------------------------------
 * XML
 *--------------------------------------------------------------------------*/

struct got {
    char     keys[8][128];
    uint64_t sizes[8];
    int      n;
    int      stop_at;
};

static int got_cb(void *arg, const char *key, uint64_t size)
{
    struct got *g = arg;
    if (g->n >= 8)
        return -1;
    snprintf(g->keys[g->n], sizeof(g->keys[0]), "%s", key);
    g->sizes[g->n] = size;
    g->n++;
    return g->stop_at && g->n == g->stop_at ? 7 : 0;
}

static const char page1[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
    "<Name>b</Name><Prefix>p/</Prefix><KeyCount>3</KeyCount><MaxKeys>3</MaxKeys>"
    "<IsTruncated>true</IsTruncated>"
    "<Contents><Key>p/a&amp;b &lt;c&gt; &quot;&apos;</Key><LastModified>2026-01-01T00:00:00Z"
    "</LastModified><ETag>&quot;abc&quot;</ETag><Size>12</Size>"
    "<StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key>p/caf&#233;&#x20AC;</Key><Size>0</Size></Contents>"
    "<Contents><Size>18446744073709551615</Size><Key>p/z</Key></Contents>"
    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=&amp;x"
    "</NextContinuationToken></ListBucketResult>";

static void test_parse_list(void **state)
{
    (void)state;
    struct got g = {0};
    int trunc = -1;
    char *tok = (char *)1;
    assert_int_equal(s3_parse_list(page1, strlen(page1), got_cb, &g, &trunc, &tok), 0);
    assert_int_equal(g.n, 3);
    assert_string_equal(g.keys[0], "p/a&b <c> \"'");
    assert_int_equal(g.sizes[0], 12);
    assert_string_equal(g.keys[1], "p/caf\xc3\xa9\xe2\x82\xac");
    assert_int_equal(g.sizes[1], 0);
    assert_string_equal(g.keys[2], "p/z");
    assert_int_equal(g.sizes[2], UINT64_MAX);
    assert_int_equal(trunc, 1);
    assert_string_equal(tok, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=&x");
    keg_free(tok);

    /* Last page, url-encoded keys. */
    static const char page2[] =
        "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
        "<Contents><Key>p/a%20b%2Bc+d%26</Key><Size>5</Size></Contents></ListBucketResult>";
    memset(&g, 0, sizeof(g));
    assert_int_equal(s3_parse_list(page2, strlen(page2), got_cb, &g, &trunc, &tok), 0);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.keys[0], "p/a b+c d&");
    assert_int_equal(trunc, 0);
    assert_null(tok);

    /* Empty result. */
    static const char empty[] = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                                "<KeyCount>0</KeyCount></ListBucketResult>";
    memset(&g, 0, sizeof(g));
    assert_int_equal(s3_parse_list(empty, strlen(empty), got_cb, &g, &trunc, &tok), 0);
    assert_int_equal(g.n, 0);

    /* The callback stops the walk; its value comes back, the token is dropped. */
    memset(&g, 0, sizeof(g));
    g.stop_at = 2;
    assert_int_equal(s3_parse_list(page1, strlen(page1), got_cb, &g, &trunc, &tok), 7);
    assert_int_equal(g.n, 2);
    assert_null(tok);
    assert_int_equal(trunc, 0);
}

static void expect_list_eio(const char *xml)
{
    struct got g = {0};
    int trunc = -1;
    char *tok = (char *)1;
    assert_int_equal(s3_parse_list(xml, strlen(xml), got_cb, &g, &trunc, &tok), -EIO);
    assert_null(tok);
    assert_int_equal(trunc, 0);
}

static void test_parse_list_malformed(void **state)
{
    (void)state;
    expect_list_eio("");
    expect_list_eio("<Error><Code>AccessDenied</Code></Error>");
    expect_list_eio("<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>");
    expect_list_eio("<ListBucketResult><Contents><Key>a</Key><Size>1x</Size></Contents>"
                    "</ListBucketResult>");
    expect_list_eio("<ListBucketResult><Contents><Key>a&bogus;</Key><Size>1</Size></Contents>"
                    "</ListBucketResult>");
    expect_list_eio("<ListBucketResult><Contents><Key>a&#0;</Key><Size>1</Size></Contents>"
                    "</ListBucketResult>");
    expect_list_eio("<ListBucketResult><Contents><Key>a</Key><Size>123456789012345678901</Size>"
                    "</Contents></ListBucketResult>");
    /* Truncated without a token would page forever. */
    expect_list_eio("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>");
    /* Bad %-escape with encoding-type=url. */
    expect_list_eio("<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>%zz</Key>"
                    "<Size>1</Size></Contents></ListBucketResult>");
}

static void test_error_xml(void **state)
{
    (void)state;
    static const char err[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch</Code>"
        "<Message>The request signature we calculated does not match &amp; so on</Message>"
        "<RequestId>tx1</RequestId></Error>";
    char code[32], msg[128], small[8];
    assert_int_equal(s3_xml_text(err, strlen(err), "Code", code, sizeof(code)), 1);
    assert_string_equal(code, "SignatureDoesNotMatch");
    assert_int_equal(s3_xml_text(err, strlen(err), "Message", msg, sizeof(msg)), 1);
    assert_string_equal(msg, "The request signature we calculated does not match & so on");
    assert_int_equal(s3_xml_text(err, strlen(err), "Code", small, sizeof(small)), 1);
    assert_string_equal(small, "Signatu");
    assert_int_equal(s3_xml_text(err, strlen(err), "Resource", code, sizeof(code)), 0);
    assert_string_equal(code, "");
    assert_int_equal(s3_xml_text("", 0, "Code", code, sizeof(code)), 0);
    assert_int_equal(s3_xml_text(NULL, 0, "Code", code, sizeof(code)), 0);
    /* Not NUL-terminated input is bounded by len. */
    assert_int_equal(s3_xml_text("<Code>Abc</Code>", 10, "Code", code, sizeof(code)), 0);
}

/* Replies as S3 servers send them (AWS layout, RGW's whitespace and namespace): a
 * continued ListObjectsV2 page with CommonPrefixes and an Owner, the multipart
 * initiate and complete answers, a DeleteObjects answer with an error, and an error
 * reply that is not XML at all (a proxy's HTML page). */
static void test_real_replies(void **state)
{
    (void)state;
    static const char cont[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n"
        "  <Name>kegtest</Name>\n  <Prefix>vol/</Prefix>\n"
        "  <ContinuationToken>AAA=</ContinuationToken>\n"
        "  <NextContinuationToken>1/Z+&amp;=</NextContinuationToken>\n"
        "  <KeyCount>2</KeyCount>\n  <MaxKeys>2</MaxKeys>\n  <Delimiter>/</Delimiter>\n"
        "  <IsTruncated>true</IsTruncated>\n"
        "  <Contents>\n    <Key>vol/chunks/0/0/1_0_4096</Key>\n"
        "    <LastModified>2026-12-01T10:00:00.000Z</LastModified>\n"
        "    <ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag>\n"
        "    <Size>4096</Size>\n"
        "    <Owner><ID>keg</ID><DisplayName>Key &lt;one&gt;</DisplayName></Owner>\n"
        "    <StorageClass>STANDARD</StorageClass>\n  </Contents>\n"
        "  <Contents><Key>vol/x &amp; y\xc3\xa9</Key><Size>7</Size></Contents>\n"
        "  <CommonPrefixes><Prefix>vol/dir/</Prefix></CommonPrefixes>\n"
        "</ListBucketResult>\n";
    struct got g = {0};
    int trunc = 0;
    char *tok = NULL;
    assert_int_equal(s3_parse_list(cont, strlen(cont), got_cb, &g, &trunc, &tok), 0);
    assert_int_equal(g.n, 2);                   /* the common prefix is no key */
    assert_string_equal(g.keys[0], "vol/chunks/0/0/1_0_4096");
    assert_int_equal(g.sizes[0], 4096);
    assert_string_equal(g.keys[1], "vol/x & y\xc3\xa9");
    assert_int_equal(g.sizes[1], 7);
    assert_int_equal(trunc, 1);
    assert_string_equal(tok, "1/Z+&=");         /* the next token, not this page's */
    keg_free(tok);

    /* a Key outside <Contents> is not an item */
    static const char stray[] = "<ListBucketResult><Key>k</Key><IsTruncated>false</IsTruncated>"
                                "</ListBucketResult>";
    memset(&g, 0, sizeof(g));
    assert_int_equal(s3_parse_list(stray, strlen(stray), got_cb, &g, &trunc, &tok), 0);
    assert_int_equal(g.n, 0);
    /* cut off in the middle: malformed, nothing listed */
    memset(&g, 0, sizeof(g));
    assert_int_equal(s3_parse_list(cont, strlen(cont) - 40, got_cb, &g, &trunc, &tok), -EIO);
    assert_int_equal(g.n, 0);
    assert_null(tok);

    char text[128];
    static const char init[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Bucket>kegtest</Bucket><Key>vol/big&amp;1</Key>"
        "<UploadId>2~iCw_lDY8VoRKLoVPYwr9aYtbcnGkv6C</UploadId>"
        "</InitiateMultipartUploadResult>";
    assert_int_equal(s3_xml_text(init, strlen(init), "UploadId", text, sizeof(text)), 1);
    assert_string_equal(text, "2~iCw_lDY8VoRKLoVPYwr9aYtbcnGkv6C");
    assert_int_equal(s3_xml_text(init, strlen(init), "Key", text, sizeof(text)), 1);
    assert_string_equal(text, "vol/big&1");
    static const char complete[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<CompleteMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Location>http://127.0.0.1:7480/kegtest/vol/big</Location><Bucket>kegtest</Bucket>"
        "<Key>vol/big</Key><ETag>&quot;3858f62230ac3c915f300c664312c11f-2&quot;</ETag>"
        "</CompleteMultipartUploadResult>";
    assert_int_equal(s3_xml_text(complete, strlen(complete), "ETag", text, sizeof(text)), 1);
    assert_string_equal(text, "\"3858f62230ac3c915f300c664312c11f-2\"");
    /* a 200 answer to a complete that failed after all carries an <Error> */
    static const char late[] = "<Error><Code>InternalError</Code><Message>try again</Message>"
                               "</Error>";
    assert_int_equal(s3_xml_text(late, strlen(late), "Code", text, sizeof(text)), 1);
    assert_string_equal(text, "InternalError");

    static const char del[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Error><Key>vol/a</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        "</DeleteResult>";
    assert_int_equal(s3_xml_text(del, strlen(del), "Code", text, sizeof(text)), 1);
    assert_string_equal(text, "AccessDenied");
    static const char quiet_ok[] = "<DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                                   "</DeleteResult>";
    assert_int_equal(s3_xml_text(quiet_ok, strlen(quiet_ok), "Code", text, sizeof(text)), 0);

    static const char html[] = "<html><body><h1>502 Bad Gateway</h1><hr><center>nginx</center>"
                               "</body></html>";
    assert_int_equal(s3_xml_text(html, strlen(html), "Code", text, sizeof(text)), 0);
    assert_string_equal(text, "");
    assert_int_equal(s3_xml_text("Service Unavailable", 19, "Code", text, sizeof(text)), 0);
}

/*----------------------------------------------------------------------------
 * Retry classification and backoff
 *--------------------------------------------------------------------------*/

static void expect_class(int cc, long status, const char *code, enum s3_verdict v, int err)
{
    int e = 12345;
    enum s3_verdict got = s3_classify(cc, status, code, &e);
    if (got != v || e != err)
        fail_msg("curl %d status %ld code %s: verdict %d err %d, want %d %d", cc, status,
                 code ? code : "-", got, e, v, err);
}

static void test_classify(void **state)
{
    (void)state;
    expect_class(CURLE_OK, 200, "", S3_OK, 0);
    expect_class(CURLE_OK, 204, "", S3_OK, 0);
    expect_class(CURLE_OK, 206, "", S3_OK, 0);
    /* Never retried. */
    expect_class(CURLE_OK, 404, "NoSuchKey", S3_FAIL, -ENOENT);
    expect_class(CURLE_OK, 404, "NoSuchBucket", S3_FAIL, -ENOENT);
    expect_class(CURLE_OK, 404, "", S3_FAIL, -ENOENT);
    expect_class(CURLE_OK, 403, "SignatureDoesNotMatch", S3_FAIL, -EACCES);
    expect_class(CURLE_OK, 403, "InvalidAccessKeyId", S3_FAIL, -EACCES);
    expect_class(CURLE_OK, 403, "AccessDenied", S3_FAIL, -EACCES);
    expect_class(CURLE_OK, 400, "InvalidArgument", S3_FAIL, -EINVAL);
    expect_class(CURLE_OK, 400, "", S3_FAIL, -EINVAL);
    expect_class(CURLE_OK, 403, "QuotaExceeded", S3_FAIL, -ENOSPC);
    expect_class(CURLE_OK, 507, "", S3_FAIL, -ENOSPC);
    expect_class(CURLE_OK, 400, "EntityTooLarge", S3_FAIL, -EFBIG);
    expect_class(CURLE_OK, 301, "PermanentRedirect", S3_FAIL, -EIO);
    expect_class(CURLE_OK, 409, "BucketNotEmpty", S3_FAIL, -EIO);
    expect_class(CURLE_OK, 412, "PreconditionFailed", S3_FAIL, -EIO);
    expect_class(CURLE_OK, 501, "NotImplemented", S3_FAIL, -EOPNOTSUPP);
    expect_class(CURLE_OK, 501, "", S3_FAIL, -EOPNOTSUPP);
    /* Retried. */
    expect_class(CURLE_OK, 500, "InternalError", S3_RETRY, -EAGAIN);
    expect_class(CURLE_OK, 502, "", S3_RETRY, -EAGAIN);
    expect_class(CURLE_OK, 503, "SlowDown", S3_RETRY, -EAGAIN);
    expect_class(CURLE_OK, 429, "", S3_RETRY, -EAGAIN);
    expect_class(CURLE_OK, 400, "RequestTimeout", S3_RETRY, -ETIMEDOUT);
    expect_class(CURLE_OK, 200, "SlowDown", S3_OK, 0);    /* a 2xx is a 2xx */
    expect_class(CURLE_COULDNT_CONNECT, 0, "", S3_RETRY, -ETIMEDOUT);
    expect_class(CURLE_OPERATION_TIMEDOUT, 0, "", S3_RETRY, -ETIMEDOUT);
    expect_class(CURLE_SEND_ERROR, 0, "", S3_RETRY, -ETIMEDOUT);
    expect_class(CURLE_RECV_ERROR, 0, "", S3_RETRY, -ETIMEDOUT);
    expect_class(CURLE_GOT_NOTHING, 0, "", S3_RETRY, -ETIMEDOUT);
    expect_class(CURLE_PARTIAL_FILE, 200, "", S3_RETRY, -ETIMEDOUT);
    /* Local or configuration failures are not retried. */
    expect_class(CURLE_COULDNT_RESOLVE_HOST, 0, "", S3_FAIL, -EIO);
    expect_class(CURLE_PEER_FAILED_VERIFICATION, 0, "", S3_FAIL, -EIO);
    expect_class(CURLE_WRITE_ERROR, 200, "", S3_FAIL, -EIO);
}

static void test_backoff(void **state)
{
    (void)state;
    /* Full jitter: uniform in [0, min(cap, base * 2^attempt)]. */
    assert_int_equal(s3_backoff_ms(0, 100, 10000, 0), 0);
    assert_int_equal(s3_backoff_ms(0, 100, 10000, 100), 100);
    assert_int_equal(s3_backoff_ms(0, 100, 10000, 101), 0);
    assert_int_equal(s3_backoff_ms(3, 100, 10000, 800), 800);
    assert_int_equal(s3_backoff_ms(3, 100, 10000, 801), 0);
    assert_int_equal(s3_backoff_ms(7, 100, 10000, 10000), 10000);   /* 12800 capped */
    assert_int_equal(s3_backoff_ms(7, 100, 10000, 10001), 0);
    assert_int_equal(s3_backoff_ms(63, 100, 10000, UINT64_MAX), UINT64_MAX % 10001);
    assert_int_equal(s3_backoff_ms(200, 100, 10000, 12345), 12345 % 10001);
    uint64_t max = 0;
    for (uint64_t r = 0; r < 100000; r += 7) {
        uint64_t d = s3_backoff_ms(5, 100, 10000, r * 2654435761u);
        assert_true(d <= 3200);
        max = d > max ? d : max;
    }
    assert_true(max > 3000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target_parse),
        cmocka_unit_test(test_parse_list),
        cmocka_unit_test(test_parse_list_malformed),
        cmocka_unit_test(test_error_xml),
        cmocka_unit_test(test_real_replies),
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_backoff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
