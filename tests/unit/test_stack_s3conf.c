/* test_stack_s3conf.c -- the S3 client settings of struct keg_stack_conf (insecure, ca_file,
 * concurrency, retry_deadline_ms) reach the s3 store through keg_stack_open:
 *   - retry_deadline_ms: a request to a closed port gives up after the deadline;
 *   - concurrency: a tiny in-process HTTP server on 127.0.0.1 counts requests in flight;
 *   - insecure / ca_file: `openssl s_server -www` with a self-signed certificate on
 *     127.0.0.1 (skipped when the openssl binary is missing).
 * Everything listens on loopback only and is stopped by the test. */
#define _GNU_SOURCE 1
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "keg/log.h"
#include "keg/mem.h"
#include "keg/stack.h"

extern char **environ;

static void fmt_s3(struct keg_format *f, const char *url)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "vol1");
    snprintf(f->storage, sizeof(f->storage), "s3");
    snprintf(f->bucket, sizeof(f->bucket), "%s", url);
    snprintf(f->access_key, sizeof(f->access_key), "AKTEST");
    snprintf(f->secret_key, sizeof(f->secret_key), "secret-test");
}

/* A TCP port on 127.0.0.1 that nothing listens on (bound, then closed). */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static int64_t now_ms(void)
{
    return keg_mono_ns() / 1000000;
}

static int skip_without_s3(void)
{
    if (keg_obj_find("s3"))
        return 0;
    print_message("s3 store not compiled in\n");
    return 1;
}

/*--------------------------------------------------------------------------*/

static void test_retry_deadline(void **state)
{
    struct keg_format f;
    struct keg_stack_conf sc;
    struct keg_obj *o = NULL;
    char url[128];
    uint8_t buf[16];
    (void)state;
    if (skip_without_s3())
        skip();

    unsetenv("KEG_FAULTY");
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/bkt", free_port());
    fmt_s3(&f, url);
    memset(&sc, 0, sizeof(sc));
    sc.retry_deadline_ms = 300;
    sc.insecure = 1;                    /* accepted; nothing to verify here */
    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    int64_t t0 = now_ms();
    assert_int_equal(keg_obj_put(o, "k", "v", 1), -ETIMEDOUT);
    int64_t took = now_ms() - t0;
    print_message("put to a closed port failed after %lld ms\n", (long long)took);
    assert_true(took >= 250 && took < 2500);
    t0 = now_ms();
    assert_int_equal(keg_obj_get(o, "k", 0, buf, sizeof(buf)), -ETIMEDOUT);
    assert_true(now_ms() - t0 < 2500);
    keg_obj_close(o);

    /* a CA file that does not exist is refused at open */
    sc.ca_file = "/nonexistent/keg-ca.pem";
    o = (void *)1;
    assert_int_equal(keg_stack_open(&f, &sc, &o), -ENOENT);
    assert_null(o);
}

/*--- a minimal HTTP/1.1 server: 200 "hello" to every request, 40 ms each ---*/

#define HS_MAX_CONNS 64

struct hs {
    int          lfd;
    int          port;
    pthread_t    thr;
    pthread_t    conn_thr[HS_MAX_CONNS];
    atomic_int   nconn;             /* connections accepted */
    atomic_int   inflight;          /* requests being answered now */
    atomic_int   max_inflight;
    atomic_int   requests;
};

struct hs_conn {
    struct hs *hs;
    int        fd;
};

static void *hs_conn_run(void *arg)
{
    struct hs_conn *c = arg;
    struct hs *hs = c->hs;
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                               "Content-Type: application/octet-stream\r\n\r\nhello";
    char buf[8192];
    size_t used = 0;

    for (;;) {
        ssize_t n = recv(c->fd, buf + used, sizeof(buf) - 1 - used, 0);
        if (n <= 0)
            break;
        used += (size_t)n;
        buf[used] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (!end) {
            if (used >= sizeof(buf) - 1)
                break;
            continue;
        }
        /* GETs only: no body follows the head */
        int cur = atomic_fetch_add(&hs->inflight, 1) + 1;
        int max = atomic_load(&hs->max_inflight);
        while (cur > max && !atomic_compare_exchange_weak(&hs->max_inflight, &max, cur))
            ;
        atomic_fetch_add(&hs->requests, 1);
        struct timespec ts = {0, 40 * 1000000L};
        nanosleep(&ts, NULL);
        atomic_fetch_sub(&hs->inflight, 1);
        if (send(c->fd, resp, sizeof(resp) - 1, MSG_NOSIGNAL) < 0)
            break;
        size_t rest = used - (size_t)(end + 4 - buf);
        memmove(buf, end + 4, rest);
        used = rest;
    }
    close(c->fd);
    keg_free(c);
    return NULL;
}

static void *hs_accept_run(void *arg)
{
    struct hs *hs = arg;
    for (;;) {
        int fd = accept(hs->lfd, NULL, NULL);
        if (fd < 0)
            break;      /* shut down */
        int i = atomic_load(&hs->nconn);
        struct hs_conn *c = keg_calloc(1, sizeof(*c));
        if (i >= HS_MAX_CONNS || !c) {
            keg_free(c);
            close(fd);
            continue;
        }
        c->hs = hs;
        c->fd = fd;
        if (pthread_create(&hs->conn_thr[i], NULL, hs_conn_run, c) != 0) {
            keg_free(c);
            close(fd);
            continue;
        }
        atomic_store(&hs->nconn, i + 1);
    }
    return NULL;
}

static void hs_start(struct hs *hs)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    memset(hs, 0, sizeof(*hs));
    hs->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(hs->lfd >= 0);
    assert_int_equal(bind(hs->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(hs->lfd, 64), 0);
    assert_int_equal(getsockname(hs->lfd, (struct sockaddr *)&a, &len), 0);
    hs->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&hs->thr, NULL, hs_accept_run, hs), 0);
}

/* Call after every client connection is closed (the store was closed). */
static void hs_stop(struct hs *hs)
{
    shutdown(hs->lfd, SHUT_RDWR);
    close(hs->lfd);
    pthread_join(hs->thr, NULL);
    for (int i = 0; i < atomic_load(&hs->nconn); i++)
        pthread_join(hs->conn_thr[i], NULL);
}

struct getter {
    struct keg_obj *o;
    int             fails;
};

static void *getter_run(void *arg)
{
    struct getter *g = arg;
    uint8_t buf[16];
    for (int i = 0; i < 4; i++) {
        if (keg_obj_get(g->o, "k", 0, buf, sizeof(buf)) != 5 || memcmp(buf, "hello", 5) != 0)
            g->fails++;
    }
    return NULL;
}

/* 8 threads x 4 GETs through the store; returns the most requests the
 * server saw at once, *conns = connections it accepted. */
static int run_getters(unsigned concurrency, int *conns)
{
    struct hs hs;
    struct keg_format f;
    struct keg_stack_conf sc;
    struct getter g[8];
    pthread_t t[8];
    char url[128];

    hs_start(&hs);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/bkt", hs.port);
    fmt_s3(&f, url);
    memset(&sc, 0, sizeof(sc));
    sc.concurrency = concurrency;
    sc.retry_deadline_ms = 5000;
    struct keg_obj *o = NULL;
    assert_int_equal(keg_stack_open(&f, &sc, &o), 0);
    for (int i = 0; i < 8; i++) {
        g[i].o = o;
        g[i].fails = 0;
        assert_int_equal(pthread_create(&t[i], NULL, getter_run, &g[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(g[i].fails, 0);
    }
    keg_obj_close(o);
    hs_stop(&hs);
    assert_int_equal(atomic_load(&hs.requests), 32);
    *conns = atomic_load(&hs.nconn);
    return atomic_load(&hs.max_inflight);
}

static void test_concurrency(void **state)
{
    int conns = 0;
    (void)state;
    if (skip_without_s3())
        skip();
    unsetenv("KEG_FAULTY");

    int max = run_getters(2, &conns);
    print_message("concurrency 2: at most %d requests at once, %d connections\n", max, conns);
    assert_true(max >= 1 && max <= 2);
    assert_true(conns <= 2);

    max = run_getters(0, &conns);       /* default: 16, more than the 8 threads */
    print_message("default concurrency: at most %d requests at once, %d connections\n", max,
                  conns);
    assert_true(max > 2);
}

/*--- TLS: openssl s_server -www with a self-signed certificate ---*/

struct tls {
    char  dir[64];
    char  cert[96];
    pid_t pid;
    int   port;
};

static int have_openssl(void)
{
    return system("openssl version >/dev/null 2>&1") == 0;
}

/* Waits until 127.0.0.1:port accepts a connection.  Returns 0 or -1. */
static int wait_port(int port)
{
    for (int i = 0; i < 100; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
        close(fd);
        if (rc == 0)
            return 0;
        usleep(50000);
    }
    return -1;
}

static void tls_start(struct tls *t)
{
    char cmd[512], key[96], accept_arg[64];
    memset(t, 0, sizeof(*t));
    snprintf(t->dir, sizeof(t->dir), "/tmp/keg-s3tls-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->cert, sizeof(t->cert), "%s/cert.pem", t->dir);
    snprintf(key, sizeof(key), "%s/key.pem", t->dir);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s -out %s -days 2 "
             "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
             key, t->cert);
    assert_int_equal(system(cmd), 0);
    t->port = free_port();
    snprintf(accept_arg, sizeof(accept_arg), "127.0.0.1:%d", t->port);
    char *argv[] = {"openssl", "s_server", "-quiet", "-www", "-accept", accept_arg,
                    "-cert", t->cert, "-key", key, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    assert_int_equal(posix_spawnp(&t->pid, "openssl", &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    if (wait_port(t->port) != 0) {
        kill(t->pid, SIGTERM);
        waitpid(t->pid, NULL, 0);
        fail_msg("openssl s_server did not start on port %d", t->port);
    }
}

static void tls_stop(struct tls *t)
{
    char path[128];
    kill(t->pid, SIGTERM);
    waitpid(t->pid, NULL, 0);
    snprintf(path, sizeof(path), "%s/key.pem", t->dir);
    unlink(path);
    unlink(t->cert);
    rmdir(t->dir);
}

/* GET through a fresh stack with sc.  Returns what keg_obj_get returned. */
static ssize_t tls_get(const struct tls *t, const struct keg_stack_conf *sc)
{
    struct keg_format f;
    struct keg_obj *o = NULL;
    char url[128];
    char buf[64];
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/bkt", t->port);
    fmt_s3(&f, url);
    assert_int_equal(keg_stack_open(&f, sc, &o), 0);
    ssize_t n = keg_obj_get(o, "k", 0, buf, sizeof(buf));
    keg_obj_close(o);
    return n;
}

static void test_tls_verification(void **state)
{
    struct tls t;
    struct keg_stack_conf sc;
    (void)state;
    if (skip_without_s3())
        skip();
    if (!have_openssl()) {
        print_message("no openssl binary: TLS part skipped\n");
        skip();
    }
    unsetenv("KEG_FAULTY");
    tls_start(&t);

    /* default: the self-signed certificate is rejected, at once (not retried) */
    memset(&sc, 0, sizeof(sc));
    sc.retry_deadline_ms = 3000;
    int64_t t0 = now_ms();
    ssize_t n = tls_get(&t, &sc);
    print_message("verified GET: %zd after %lld ms\n", n, (long long)(now_ms() - t0));
    assert_int_equal(n, -EIO);
    assert_true(now_ms() - t0 < 2500);

    /* --insecure: accepted (s_server answers any GET with its status page) */
    sc.insecure = 1;
    n = tls_get(&t, &sc);
    assert_true(n > 0);

    /* --ca-file with the server's certificate: verified and accepted */
    sc.insecure = 0;
    sc.ca_file = t.cert;
    n = tls_get(&t, &sc);
    assert_true(n > 0);

    tls_stop(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_deadline),
        cmocka_unit_test(test_concurrency),
        cmocka_unit_test(test_tls_verification),
    };
    keg_log_set_level(LOG_CRIT);
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("stack_s3conf", tests, NULL, NULL);
}
