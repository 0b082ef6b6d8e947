/* test_obj_s3_fake.c -- the S3 store against a scripted in-process HTTP server on
 * 127.0.0.1 (no external server): what goes on the wire (path encoding, signed
 * payload hash, no Expect), retries on 503/SlowDown and dropped connections, no
 * retry on 403, a server ignoring Range or sending more than asked, 416, PUT
 * bodies of every size arriving whole and as signed. */
#define _GNU_SOURCE   /* memmem, strcasestr */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "keg/keg.h"
#include "keg/log.h"
#include "keg/obj.h"
#include "obj/s3_sign_i.h"

/* What the server answers, per request number (0-based); past the end: the last. */
enum reply {
    R_OK_EMPTY,          /* 200, no body */
    R_SLOWDOWN,          /* 503 <Code>SlowDown</Code> */
    R_FORBIDDEN,         /* 403 SignatureDoesNotMatch */
    R_BODY_200,          /* 200 with the whole 100-byte object, Range ignored */
    R_BODY_206_LONG,     /* 206 but 100 bytes, more than asked */
    R_BODY_206,          /* a correct 206 for the Range asked */
    R_416,               /* 416 InvalidRange */
    R_CUT,               /* Content-Length 100, 50 bytes sent, connection closed */
    R_500,
    R_BIG,               /* 200 with 4 MiB, Range ignored */
    R_DEL_ERRORS,        /* 200 DeleteResult listing an <Error> */
    R_501,               /* 501 NotImplemented */
};

static struct {
    pthread_mutex_t lock;
    int             lfd;
    int             port;
    enum reply      script[16];
    int             nscript;
    int             nreq;                  /* requests seen */
    char            method[16], path[512];
    char            hdrs[4096];            /* headers of the last request */
    char            body_hash[S3_SHA256_HEX];
    char            trail[8192];           /* "METHOD PATH\n" of each request since script() */
    char            body[1 << 17];         /* the last request's body (NUL-terminated, cut) */
    size_t          body_len;              /* its Content-Length */
    int             stop;
} srv = { .lock = PTHREAD_MUTEX_INITIALIZER };

static unsigned char object[100];

static void send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static void reply_err(int fd, int status, const char *reason, const char *code)
{
    char body[256], head[256];
    int bn = snprintf(body, sizeof(body), "<?xml version=\"1.0\"?><Error><Code>%s</Code>"
                                          "<Message>scripted</Message></Error>", code);
    int hn = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Length: %d\r\n"
                                          "Content-Type: application/xml\r\n\r\n",
                      status, reason, bn);
    send_all(fd, head, (size_t)hn);
    send_all(fd, body, (size_t)bn);
}

/* Serve one connection until it closes.  Returns when the peer or a reply closes. */
static void serve_conn(int fd)
{
    char buf[65536];
    size_t have = 0;
    for (;;) {
        char *end;
        while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
            ssize_t r = recv(fd, buf + have, sizeof(buf) - have - 1, 0);
            if (r <= 0)
                return;
            have += (size_t)r;
        }
        size_t hlen = (size_t)(end - buf) + 4;
        buf[hlen - 1] = '\0';
        size_t clen = 0;
        const char *cl = strcasestr(buf, "\r\nContent-Length:");
        if (cl)
            clen = (size_t)strtoull(cl + 17, NULL, 10);
        static char body[1 << 20];
        size_t got = KEG_MIN(have - hlen, clen);
        memcpy(body, buf + hlen, got);
        size_t extra = have - hlen - got;
        memmove(buf, buf + hlen + got, extra);
        have = extra;
        while (got < clen) {
            ssize_t r = recv(fd, body + got, KEG_MIN(clen - got, sizeof(body) - got), 0);
            if (r <= 0)
                return;
            got += (size_t)r;
        }
        pthread_mutex_lock(&srv.lock);
        int n = srv.nreq++;
        sscanf(buf, "%15s %511s", srv.method, srv.path);
        size_t hcopy = KEG_MIN(hlen, sizeof(srv.hdrs) - 1);
        memcpy(srv.hdrs, buf, hcopy);
        srv.hdrs[hcopy] = '\0';
        s3_sha256_hex(body, clen, srv.body_hash);
        size_t tl = strlen(srv.trail);
        snprintf(srv.trail + tl, sizeof(srv.trail) - tl, "%s %s\n", srv.method, srv.path);
        size_t bcopy = KEG_MIN(clen, sizeof(srv.body) - 1);
        memcpy(srv.body, body, bcopy);
        srv.body[bcopy] = '\0';
        srv.body_len = clen;
        enum reply rp = srv.script[n < srv.nscript ? n : srv.nscript - 1];
        pthread_mutex_unlock(&srv.lock);

        char head[512];
        int hn;
        unsigned long a = 0, b = 0;
        const char *range = strcasestr(buf, "\r\nRange: bytes=");
        if (range)
            sscanf(range + 15, "%lu-%lu", &a, &b);
        switch (rp) {
        case R_OK_EMPTY:
            send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 38);
            break;
        case R_SLOWDOWN:
            reply_err(fd, 503, "Slow Down", "SlowDown");
            break;
        case R_FORBIDDEN:
            reply_err(fd, 403, "Forbidden", "SignatureDoesNotMatch");
            break;
        case R_500:
            reply_err(fd, 500, "Internal Server Error", "InternalError");
            break;
        case R_416:
            reply_err(fd, 416, "Requested Range Not Satisfiable", "InvalidRange");
            break;
        case R_BODY_200:
        case R_BODY_206_LONG:
            hn = snprintf(head, sizeof(head), "HTTP/1.1 %s\r\nContent-Length: 100\r\n\r\n",
                          rp == R_BODY_200 ? "200 OK" : "206 Partial Content");
            send_all(fd, head, (size_t)hn);
            send_all(fd, object, 100);
            break;
        case R_BODY_206:
            if (!range) {
                hn = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n",
                              sizeof(object));
                send_all(fd, head, (size_t)hn);
                send_all(fd, object, sizeof(object));
                break;
            }
            if (b >= sizeof(object))
                b = sizeof(object) - 1;
            hn = snprintf(head, sizeof(head), "HTTP/1.1 206 Partial Content\r\n"
                          "Content-Range: bytes %lu-%lu/100\r\nContent-Length: %lu\r\n\r\n",
                          a, b, b - a + 1);
            send_all(fd, head, (size_t)hn);
            send_all(fd, object + a, b - a + 1);
            break;
        case R_BIG: {
            static unsigned char big[4 << 20];
            memcpy(big, object, sizeof(object));
            hn = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n",
                          sizeof(big));
            send_all(fd, head, (size_t)hn);
            send_all(fd, big, sizeof(big));
            break;
        }
        case R_DEL_ERRORS: {
            const char *dr = "<?xml version=\"1.0\"?><DeleteResult><Error><Key>pre/x</Key>"
                            "<Code>AccessDenied</Code><Message>no</Message></Error>"
                            "</DeleteResult>";
            hn = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n",
                          strlen(dr));
            send_all(fd, head, (size_t)hn);
            send_all(fd, dr, strlen(dr));
            break;
        }
        case R_501:
            reply_err(fd, 501, "Not Implemented", "NotImplemented");
            break;
        case R_CUT:
            send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", 40);
            send_all(fd, object, 50);
            return;
        }
    }
}

static void *server_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(srv.lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        pthread_mutex_lock(&srv.lock);
        int stop = srv.stop;
        pthread_mutex_unlock(&srv.lock);
        if (stop) {
            close(fd);
            return NULL;
        }
        serve_conn(fd);     /* one connection at a time: enough for these tests */
        close(fd);
    }
}

static pthread_t srv_thread;

static int group_setup(void **state)
{
    (void)state;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t sl = sizeof(sa);
    for (size_t i = 0; i < sizeof(object); i++)
        object[i] = (unsigned char)(i * 7 + 3);
    srv.lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (srv.lfd < 0 || bind(srv.lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(srv.lfd, 16) < 0 || getsockname(srv.lfd, (struct sockaddr *)&sa, &sl) < 0)
        return -1;
    srv.port = ntohs(sa.sin_port);
    keg_log_set_level(LOG_CRIT);     /* the scripted failures would fill the output */
    return pthread_create(&srv_thread, NULL, server_main, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    pthread_mutex_lock(&srv.lock);
    srv.stop = 1;
    pthread_mutex_unlock(&srv.lock);
    /* wake accept() */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)srv.port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    close(fd);
    pthread_join(srv_thread, NULL);
    close(srv.lfd);
    return 0;
}

static void script(int n, ...)
{
    va_list ap;
    pthread_mutex_lock(&srv.lock);
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        srv.script[i] = (enum reply)va_arg(ap, int);
    va_end(ap);
    srv.nscript = n;
    srv.nreq = 0;
    srv.trail[0] = '\0';
    pthread_mutex_unlock(&srv.lock);
}

static int nreq(void)
{
    pthread_mutex_lock(&srv.lock);
    int n = srv.nreq;
    pthread_mutex_unlock(&srv.lock);
    return n;
}

static struct keg_obj *open_fake(unsigned deadline_ms)
{
    char url[128];
    struct keg_obj *o = NULL;
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/bkt/pre", srv.port);
    struct keg_obj_conf c = { .bucket = url, .access_key = "AK", .secret_key = "SK",
                              .concurrency = 2, .retry_deadline_ms = deadline_ms };
    assert_int_equal(keg_obj_open("s3", &c, NULL, &o), 0);
    return o;
}

/* The last request was a PUT of body[0..len): whole, and signed with its hash. */
static void assert_put_received(const char *body, size_t len)
{
    char want[S3_SHA256_HEX], hdr[128];

    s3_sha256_hex(body, len, want);
    assert_string_equal(srv.method, "PUT");
    assert_int_equal(srv.body_len, len);
    assert_string_equal(srv.body_hash, want);
    snprintf(hdr, sizeof(hdr), "x-amz-content-sha256: %s", want);
    assert_non_null(strstr(srv.hdrs, hdr));
}

static void test_put_wire_format(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(2000);
    const char *body = "hello, wire";
    script(1, R_OK_EMPTY);
    assert_int_equal(keg_obj_put(o, "dir/a b+c~", body, strlen(body)), 0);
    assert_int_equal(nreq(), 1);
    assert_put_received(body, strlen(body));
    assert_string_equal(srv.path, "/bkt/pre/dir/a%20b%2Bc~");
    assert_non_null(strstr(srv.hdrs, "Authorization: AWS4-HMAC-SHA256 Credential=AK/"));
    assert_non_null(strstr(srv.hdrs, "/us-east-1/s3/aws4_request, SignedHeaders="
                                      "host;x-amz-content-sha256;x-amz-date, Signature="));
    assert_null(strcasestr(srv.hdrs, "Expect:"));
    keg_obj_close(o);
}

/* Bodies from none to past curl's 64 KiB upload buffer arrive whole and as signed, also
 * when the PUT is retried. */
static void test_put_body_sizes(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(2000);
    static char body[100000];
    const size_t sizes[] = { 0, 1, 65535, 65536, 65537, 100000 };

    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (char)(i * 13 + 7);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        script(1, R_OK_EMPTY);
        assert_int_equal(keg_obj_put(o, "k", body, sizes[i]), 0);
        assert_int_equal(nreq(), 1);
        assert_put_received(body, sizes[i]);
        assert_null(strcasestr(srv.hdrs, "Expect:"));
        assert_null(strcasestr(srv.hdrs, "Content-Type:"));
    }
    /* a retried small PUT sends its body again */
    script(2, R_500, R_OK_EMPTY);
    assert_int_equal(keg_obj_put(o, "k", body, 5000), 0);
    assert_int_equal(nreq(), 2);
    assert_put_received(body, 5000);
    keg_obj_close(o);
}

static void test_retry_then_ok(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(10000);
    script(3, R_SLOWDOWN, R_500, R_OK_EMPTY);
    assert_int_equal(keg_obj_put(o, "k", "x", 1), 0);
    assert_int_equal(nreq(), 3);
    /* A body cut short (curl: partial file) is retried too. */
    unsigned char buf[100];
    script(2, R_CUT, R_BODY_206);
    assert_int_equal(keg_obj_get(o, "k", 0, buf, 100), 100);
    assert_memory_equal(buf, object, 100);
    assert_int_equal(nreq(), 2);
    keg_obj_close(o);
}

static void test_no_retry_on_403(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(10000);
    script(1, R_FORBIDDEN);
    assert_int_equal(keg_obj_put(o, "k", "x", 1), -EACCES);
    assert_int_equal(nreq(), 1);
    keg_obj_close(o);
}

static void test_retries_run_out(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(600);
    script(1, R_SLOWDOWN);
    int64_t t0 = keg_mono_ns();
    assert_int_equal(keg_obj_put(o, "k", "x", 1), -EAGAIN);
    int64_t ms = (keg_mono_ns() - t0) / 1000000;
    assert_true(ms >= 550 && ms < 2000);
    assert_true(nreq() >= 2);
    keg_obj_close(o);
}

/*--- health: failure and recovery logged once, counted; one deadline per GET ---*/

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static char cap_log[16384];

static void cap_sink(void *arg, int level, const char *tag, const char *fmt, va_list ap)
{
    char line[1024];
    (void)arg;
    vsnprintf(line, sizeof(line), fmt, ap);
    pthread_mutex_lock(&cap_lock);
    size_t o = strlen(cap_log);
    snprintf(cap_log + o, sizeof(cap_log) - o, "%s [%s] %s\n",
             level == LOG_ERR ? "ERROR" : level == LOG_WARNING ? "WARN" :
             level == LOG_INFO ? "INFO" : "DEBUG", tag, line);
    pthread_mutex_unlock(&cap_lock);
}

static void cap_start(void)
{
    cap_log[0] = '\0';
    keg_log_set_sink(cap_sink, NULL);
    keg_log_set_level(LOG_INFO);
}

static void cap_stop(void)
{
    keg_log_set_level(LOG_CRIT);
    keg_log_set_sink(NULL, NULL);
}

static int lines_with(const char *needle)
{
    int n = 0;
    for (const char *q = strstr(cap_log, needle); q; q = strstr(q + 1, needle))
        n++;
    return n;
}

static struct keg_obj_health health(struct keg_obj *o)
{
    struct keg_obj_health h;
    assert_non_null(o->ops->health);
    assert_int_equal(o->ops->health(o, &h), 0);
    return h;
}

/* An outage the requests survive: one WARN when it starts (not one per retry),
 * one INFO when the store answers again, counters for `kegfs stats`. */
static void test_failure_logged_and_counted(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(10000);
    cap_start();
    struct keg_obj_health h = health(o);
    assert_int_equal(h.failing_ms, 0);
    assert_int_equal(h.retries, 0);
    script(5, R_500, R_SLOWDOWN, R_500, R_500, R_OK_EMPTY);
    uint64_t r0 = keg_obj_thread_retries();
    assert_int_equal(keg_obj_put(o, "k", "x", 1), 0);
    assert_int_equal(nreq(), 5);
    /* each repeat is also noted for the calling thread (the metrics layer's count) */
    assert_int_equal(keg_obj_thread_retries() - r0, 4);
    assert_int_equal(lines_with("WARN [obj_s3] S3 store http://127.0.0.1:"), 1);
    assert_int_equal(lines_with("/bkt is failing: PUT k: HTTP 500"), 1);
    assert_int_equal(lines_with("INFO [obj_s3] S3 store http://127.0.0.1:"), 1);
    assert_int_equal(lines_with("/bkt recovered after"), 1);
    h = health(o);
    assert_int_equal(h.failing_ms, 0);
    assert_int_equal(h.retrying, 0);
    assert_int_equal(h.retries, 4);
    assert_int_equal(h.failed, 0);

    /* a second failure within 30 s is counted, not logged again */
    cap_log[0] = '\0';
    script(2, R_500, R_OK_EMPTY);
    assert_int_equal(keg_obj_put(o, "k2", "x", 1), 0);
    assert_int_equal(lines_with("is failing"), 0);
    assert_int_equal(lines_with("recovered"), 0);
    assert_int_equal(health(o).retries, 5);

    /* a request that runs out of retries: counted as failed; the store stays failing */
    cap_stop();
    keg_obj_close(o);
    o = open_fake(400);
    cap_start();
    script(1, R_500);
    assert_int_equal(keg_obj_put(o, "k3", "x", 1), -EAGAIN);
    h = health(o);
    assert_true(h.failing_ms > 0);
    assert_int_equal(h.failed, 1);
    assert_int_equal(h.retrying, 0);
    assert_int_equal(lines_with("is failing"), 1);
    assert_int_equal(lines_with("ERROR [obj_s3] PUT k3: HTTP 500"), 1);
    /* a success: the store works again */
    script(1, R_OK_EMPTY);
    assert_int_equal(keg_obj_put(o, "k3", "x", 1), 0);
    assert_int_equal(health(o).failing_ms, 0);
    assert_int_equal(lines_with("recovered"), 1);
    cap_stop();
    keg_obj_close(o);
}

struct bg_put {
    struct keg_obj *o;
    int             rc;
};

static void *bg_put_main(void *arg)
{
    struct bg_put *b = arg;
    b->rc = keg_obj_put(b->o, "slow", "x", 1);
    return NULL;
}

/* While a put is being retried, health says so (the stats' "failing" uploads). */
static void test_retrying_gauge(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(1500);
    struct bg_put b = { .o = o, .rc = 1 };
    pthread_t t;
    script(1, R_SLOWDOWN);
    assert_int_equal(pthread_create(&t, NULL, bg_put_main, &b), 0);
    struct keg_obj_health h = { 0 };
    for (int i = 0; i < 200 && h.retrying_puts == 0; i++) {
        usleep(5000);
        h = health(o);
    }
    assert_int_equal(h.retrying, 1);
    assert_int_equal(h.retrying_puts, 1);
    assert_true(h.failing_ms > 0);
    pthread_join(t, NULL);
    assert_int_equal(b.rc, -EAGAIN);
    h = health(o);
    assert_int_equal(h.retrying, 0);
    assert_int_equal(h.retrying_puts, 0);
    assert_int_equal(h.failed, 1);
    keg_obj_close(o);
}

/* The kernel reads a page whose read failed again at once: that second GET of
 * the same key fails at once (-EHOSTDOWN, no request), so the application waits
 * one deadline, not two.  Other keys still get their own deadline, and once the
 * store answers the key is read again. */
static void test_get_one_deadline(void **state)
{
    (void)state;
    unsigned char buf[100];
    struct keg_obj *o = open_fake(500);
    script(1, R_500);
    int64_t t0 = keg_mono_ns();
    assert_int_equal(keg_obj_get(o, "blk", 0, buf, 100), -EAGAIN);
    int64_t ms = (keg_mono_ns() - t0) / 1000000;
    assert_true(ms >= 450 && ms < 3000);
    int n = nreq();
    assert_true(n >= 2);
    t0 = keg_mono_ns();
    assert_int_equal(keg_obj_get(o, "blk", 0, buf, 100), -EHOSTDOWN);
    assert_int_equal(keg_obj_get(o, "blk", 10, buf, 10), -EHOSTDOWN);
    ms = (keg_mono_ns() - t0) / 1000000;
    assert_true(ms < 100);
    assert_int_equal(nreq(), n);                 /* nothing sent */
    /* another key: its own deadline */
    assert_int_equal(keg_obj_get(o, "blk2", 0, buf, 100), -EAGAIN);
    assert_true(nreq() > n);
    /* the store answers a put: the failed key is read again */
    script(1, R_OK_EMPTY);
    assert_int_equal(keg_obj_put(o, "other", "x", 1), 0);
    script(1, R_BODY_206);
    assert_int_equal(keg_obj_get(o, "blk", 30, buf, 40), 40);
    assert_memory_equal(buf, object + 30, 40);
    keg_obj_close(o);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *q = strstr(hay, needle); q; q = strstr(q + 1, needle))
        n++;
    return n;
}

/* del_keys: one DeleteObjects request (POST ?delete, quiet, keys under the
 * prefix and XML-escaped, Content-MD5 of the body signed) per 1000 keys. */
static void test_del_keys_wire(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(2000);
    const char *keys[] = {"a", "dir/b<&>\"'", "c"};
    script(1, R_OK_EMPTY);
    assert_int_equal(keg_obj_del_keys(o, keys, 3), 0);
    assert_int_equal(nreq(), 1);
    assert_string_equal(srv.method, "POST");
    assert_string_equal(srv.path, "/bkt/?delete=");
    assert_non_null(strstr(srv.body, "<Delete><Quiet>true</Quiet><Object><Key>pre/a</Key>"
                                     "</Object><Object><Key>pre/dir/b&lt;&amp;&gt;&quot;"
                                     "&apos;</Key></Object><Object><Key>pre/c</Key></Object>"
                                     "</Delete>"));
    unsigned char md5[16];
    unsigned int ml = 0;
    char b64[32], hdr[64];
    assert_true(EVP_Digest(srv.body, strlen(srv.body), md5, &ml, EVP_md5(), NULL));
    EVP_EncodeBlock((unsigned char *)b64, md5, 16);
    snprintf(hdr, sizeof(hdr), "Content-MD5: %s", b64);
    assert_non_null(strstr(srv.hdrs, hdr));
    assert_non_null(strstr(srv.hdrs, "SignedHeaders=content-md5;content-type;host;"));
    /* 2,500 keys: requests of 1000, 1000 and 500 */
    static char kbuf[2500][16];
    static const char *many[2500];
    for (int i = 0; i < 2500; i++) {
        snprintf(kbuf[i], sizeof(kbuf[i]), "k%d", i);
        many[i] = kbuf[i];
    }
    script(1, R_OK_EMPTY);
    assert_int_equal(keg_obj_del_keys(o, many, 2500), 0);
    assert_int_equal(nreq(), 3);
    assert_int_equal(count_of(srv.trail, "POST /bkt/?delete="), 3);
    assert_int_equal(count_of(srv.body, "<Object>"), 500);
    /* one key: a plain DELETE */
    script(1, R_OK_EMPTY);
    assert_int_equal(keg_obj_del_keys(o, keys, 1), 0);
    assert_string_equal(srv.trail, "DELETE /bkt/pre/a\n");
    keg_obj_close(o);
}

/* An answer listing errors: those keys are deleted one by one.  A server that
 * refuses DeleteObjects gets single DELETEs, also for later calls. */
static void test_del_keys_fallback(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(2000);
    const char *keys[] = {"x", "y"};
    script(2, R_DEL_ERRORS, R_OK_EMPTY);
    assert_int_equal(keg_obj_del_keys(o, keys, 2), 0);
    assert_string_equal(srv.trail, "POST /bkt/?delete=\nDELETE /bkt/pre/x\nDELETE /bkt/pre/y\n");
    script(2, R_501, R_OK_EMPTY);
    assert_int_equal(keg_obj_del_keys(o, keys, 2), 0);
    assert_string_equal(srv.trail, "POST /bkt/?delete=\nDELETE /bkt/pre/x\nDELETE /bkt/pre/y\n");
    script(1, R_OK_EMPTY);
    assert_int_equal(keg_obj_del_keys(o, keys, 2), 0);
    assert_string_equal(srv.trail, "DELETE /bkt/pre/x\nDELETE /bkt/pre/y\n");
    /* a permanent failure of the request is returned, nothing is acknowledged */
    keg_obj_close(o);
    o = open_fake(2000);
    script(1, R_FORBIDDEN);
    assert_int_equal(keg_obj_del_keys(o, keys, 2), -EACCES);
    assert_int_equal(nreq(), 1);
    keg_obj_close(o);
}

static void test_get_guards(void **state)
{
    (void)state;
    struct keg_obj *o = open_fake(2000);
    unsigned char buf[200];

    /* The server ignores Range and sends the whole object with 200. */
    script(1, R_BODY_200);
    memset(buf, 0xEE, sizeof(buf));
    assert_int_equal(keg_obj_get(o, "k", 10, buf, 20), 20);
    assert_memory_equal(buf, object + 10, 20);
    assert_int_equal(buf[20], 0xEE);                   /* nothing past what was asked */
    assert_non_null(strstr(srv.hdrs, "Range: bytes=10-29"));
    /* ... starting near the end: a short read. */
    assert_int_equal(keg_obj_get(o, "k", 90, buf, 50), 10);
    assert_memory_equal(buf, object + 90, 10);

    /* From offset 0 no Range is sent; a whole object larger than asked is cut off
     * early (not downloaded to the end), and the next request still works. */
    script(2, R_BIG, R_BODY_206);
    memset(buf, 0xEE, sizeof(buf));
    assert_int_equal(keg_obj_get(o, "k", 0, buf, 10), 10);
    assert_memory_equal(buf, object, 10);
    assert_int_equal(buf[10], 0xEE);
    assert_null(strcasestr(srv.hdrs, "Range:"));
    assert_int_equal(keg_obj_get(o, "k", 30, buf, 40), 40);
    assert_memory_equal(buf, object + 30, 40);
    assert_int_equal(nreq(), 2);

    /* A 206 with more bytes than asked: the rest is dropped, never written. */
    script(1, R_BODY_206_LONG);
    memset(buf, 0xEE, sizeof(buf));
    assert_int_equal(keg_obj_get(o, "k", 0, buf, 5), 5);
    assert_memory_equal(buf, object, 5);
    assert_int_equal(buf[5], 0xEE);

    /* 416: the range starts past the end -> 0 bytes. */
    script(1, R_416);
    assert_int_equal(keg_obj_get(o, "k", 500, buf, 10), 0);

    /* A correct 206. */
    script(1, R_BODY_206);
    assert_int_equal(keg_obj_get(o, "k", 30, buf, 40), 40);
    assert_memory_equal(buf, object + 30, 40);
    keg_obj_close(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_wire_format),
        cmocka_unit_test(test_put_body_sizes),
        cmocka_unit_test(test_retry_then_ok),
        cmocka_unit_test(test_no_retry_on_403),
        cmocka_unit_test(test_retries_run_out),
        cmocka_unit_test(test_failure_logged_and_counted),
        cmocka_unit_test(test_retrying_gauge),
        cmocka_unit_test(test_get_one_deadline),
        cmocka_unit_test(test_get_guards),
        cmocka_unit_test(test_del_keys_wire),
        cmocka_unit_test(test_del_keys_fallback),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
