/* test_util_metrics_http.c -- the /metrics endpoint (keg_metrics_http.c): address parsing
 * and serving over a unix socket (0600, a stale file replaced, a live one left alone,
 * unlinked at stop only while it is still this server's). */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "keg/metrics.h"

/*----- address parsing -----*/

static void test_parse_tcp(void **state)
{
    (void)state;
    struct keg_metrics_addr a;
    const char *why = NULL;
    assert_int_equal(keg_metrics_parse_addr("127.0.0.1:9567", &a, &why), 0);
    assert_false(a.is_unix);
    assert_string_equal(a.host, "127.0.0.1");
    assert_string_equal(a.port, "9567");
    assert_int_equal(keg_metrics_parse_addr(":0", &a, NULL), 0);
    assert_string_equal(a.host, "");
    assert_string_equal(a.port, "0");
    assert_int_equal(keg_metrics_parse_addr("[::1]:80", &a, NULL), 0);
    assert_string_equal(a.host, "::1");
    assert_string_equal(a.port, "80");
    /* "localhost:x" and friends */
    assert_int_equal(keg_metrics_parse_addr("localhost", &a, &why), -EINVAL);
    assert_non_null(why);
    assert_int_equal(keg_metrics_parse_addr("h:", &a, NULL), -EINVAL);
    assert_int_equal(keg_metrics_parse_addr("h:65536", &a, NULL), -EINVAL);
    assert_int_equal(keg_metrics_parse_addr("h:12a", &a, NULL), -EINVAL);
    assert_int_equal(keg_metrics_parse_addr("[::1]80", &a, NULL), -EINVAL);
    assert_int_equal(keg_metrics_parse_addr("", &a, NULL), -EINVAL);
    assert_int_equal(keg_metrics_parse_addr(NULL, &a, NULL), -EINVAL);
}

static void test_parse_unix(void **state)
{
    (void)state;
    struct keg_metrics_addr a;
    const char *why = NULL;
    char buf[300], path[200];

    assert_int_equal(keg_metrics_parse_addr("unix:/run/kegfs/m.sock", &a, &why), 0);
    assert_true(a.is_unix);
    assert_string_equal(a.path, "/run/kegfs/m.sock");
    assert_string_equal(a.host, "");

    why = NULL;
    assert_int_equal(keg_metrics_parse_addr("unix:m.sock", &a, &why), -EINVAL);
    assert_non_null(strstr(why, "absolute"));
    assert_false(a.is_unix);
    assert_int_equal(keg_metrics_parse_addr("unix:./m.sock", &a, NULL), -EINVAL);
    assert_int_equal(keg_metrics_parse_addr("unix:", &a, NULL), -EINVAL);
    assert_int_equal(keg_metrics_parse_addr("unix:/run/kegfs/", &a, NULL), -EINVAL);

    /* 107 bytes fit sun_path with its NUL, 108 do not */
    memset(path, 'a', sizeof(path));
    path[0] = '/';
    path[107] = '\0';
    snprintf(buf, sizeof(buf), "unix:%s", path);
    assert_int_equal(keg_metrics_parse_addr(buf, &a, NULL), 0);
    assert_int_equal(strlen(a.path), 107);
    path[107] = 'a';
    path[108] = '\0';
    snprintf(buf, sizeof(buf), "unix:%s", path);
    why = NULL;
    assert_int_equal(keg_metrics_parse_addr(buf, &a, &why), -ENAMETOOLONG);
    assert_non_null(strstr(why, "longer"));
}

/*----- serving on a unix socket -----*/

struct srv_dir {
    char dir[64];
    char sock[128];
    char addr[160];
};

static int setup_dir(void **state)
{
    struct srv_dir *d = calloc(1, sizeof(*d));
    if (!d)
        return -1;
    snprintf(d->dir, sizeof(d->dir), "/tmp/kegmh.XXXXXX");
    if (!mkdtemp(d->dir)) {
        free(d);
        return -1;
    }
    snprintf(d->sock, sizeof(d->sock), "%s/m.sock", d->dir);
    snprintf(d->addr, sizeof(d->addr), "unix:%s", d->sock);
    *state = d;
    return 0;
}

static int teardown_dir(void **state)
{
    struct srv_dir *d = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
    if (system(cmd) != 0)
        return -1;
    free(d);
    return 0;
}

static void render_one(void *arg, FILE *f)
{
    keg_metrics_family(f, "kegfs_test_total", "counter", "a test counter");
    keg_metrics_sample_u64(f, "kegfs_test_total", "", (uint64_t)(uintptr_t)arg);
}

/* The whole answer to "GET path" over the unix socket at sock, or NULL.
 * OWNERSHIP: caller free()s. */
static char *http_get(const char *sock, const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        return NULL;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(c);
        return NULL;
    }
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
    if (write(c, req, (size_t)n) != n) {
        close(c);
        return NULL;
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        ssize_t k = read(c, buf + len, cap - 1 - len);
        if (k <= 0)
            break;
        len += (size_t)k;
        if (len + 1 >= cap)
            break;
    }
    close(c);
    buf[len] = '\0';
    return buf;
}

/* Bind a unix socket at path; listening or (listen == 0) left stale once closed. */
static int bind_at(const char *path, int listening)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    if (listening) {
        assert_int_equal(listen(fd, 4), 0);
        return fd;
    }
    close(fd);
    return -1;
}

static void test_serve_unix(void **state)
{
    struct srv_dir *d = *state;
    struct keg_metrics_server *s = NULL;
    unsigned port = 99;
    struct stat st;

    mode_t um = umask(0);           /* the socket is 0600 whatever the umask */
    int rc = keg_metrics_start(d->addr, render_one, (void *)(uintptr_t)42, &s, &port);
    umask(um);
    assert_int_equal(rc, 0);
    assert_non_null(s);
    assert_int_equal(port, 0);
    assert_int_equal(lstat(d->sock, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);

    char *t = http_get(d->sock, "/metrics");
    assert_non_null(t);
    assert_non_null(strstr(t, "HTTP/1.0 200") ? strstr(t, "HTTP/1.0 200")
                                              : strstr(t, "HTTP/1.1 200"));
    assert_non_null(strstr(t, "# TYPE kegfs_test_total counter\n"));
    assert_non_null(strstr(t, "\nkegfs_test_total 42\n"));
    free(t);
    t = http_get(d->sock, "/other");
    assert_non_null(t);
    assert_non_null(strstr(t, " 404 "));
    free(t);

    keg_metrics_stop(s);
    assert_int_equal(lstat(d->sock, &st), -1);    /* unlinked at stop */
    assert_int_equal(errno, ENOENT);
}

static void test_stale_and_live(void **state)
{
    struct srv_dir *d = *state;
    struct keg_metrics_server *s = NULL;
    struct stat st;

    /* a stale socket (nobody listens) is replaced */
    bind_at(d->sock, 0);
    assert_int_equal(keg_metrics_start(d->addr, render_one, NULL, &s, NULL), 0);
    char *t = http_get(d->sock, "/metrics");
    assert_non_null(t);
    assert_non_null(strstr(t, "\nkegfs_test_total 0\n"));
    free(t);
    keg_metrics_stop(s);
    s = NULL;

    /* a socket another process serves is left alone */
    int live = bind_at(d->sock, 1);
    assert_int_equal(keg_metrics_start(d->addr, render_one, NULL, &s, NULL), -EADDRINUSE);
    assert_null(s);
    assert_int_equal(lstat(d->sock, &st), 0);
    close(live);
    unlink(d->sock);

    /* anything but a socket is an error, and stays */
    FILE *f = fopen(d->sock, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(keg_metrics_start(d->addr, render_one, NULL, &s, NULL), -EEXIST);
    assert_null(s);
    assert_int_equal(lstat(d->sock, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    unlink(d->sock);

    /* a relative path is refused before anything is created */
    assert_int_equal(keg_metrics_start("unix:rel.sock", render_one, NULL, &s, NULL), -EINVAL);
    assert_null(s);
    assert_int_equal(access("rel.sock", F_OK), -1);
}

static void test_stop_keeps_newer(void **state)
{
    struct srv_dir *d = *state;
    struct keg_metrics_server *a = NULL, *b = NULL;
    struct stat st;

    /* a takes the path, then b (a restarted worker) replaces the file while a
     * still runs: a's stop must not unlink b's socket */
    assert_int_equal(keg_metrics_start(d->addr, render_one, (void *)1, &a, NULL), 0);
    unlink(d->sock);
    assert_int_equal(keg_metrics_start(d->addr, render_one, (void *)2, &b, NULL), 0);
    keg_metrics_stop(a);
    assert_int_equal(lstat(d->sock, &st), 0);
    char *t = http_get(d->sock, "/metrics");
    assert_non_null(t);
    assert_non_null(strstr(t, "\nkegfs_test_total 2\n"));
    free(t);
    keg_metrics_stop(b);
    assert_int_equal(lstat(d->sock, &st), -1);
}

static void test_serve_tcp(void **state)
{
    (void)state;
    struct keg_metrics_server *s = NULL;
    unsigned port = 0;
    assert_int_equal(keg_metrics_start("127.0.0.1:0", render_one, NULL, &s, &port), 0);
    assert_true(port > 0);
    keg_metrics_stop(s);
    assert_int_equal(keg_metrics_start("127.0.0.1:99999", render_one, NULL, &s, NULL),
                     -EINVAL);
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_tcp),
        cmocka_unit_test(test_parse_unix),
        cmocka_unit_test_setup_teardown(test_serve_unix, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_stale_and_live, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_stop_keeps_newer, setup_dir, teardown_dir),
        cmocka_unit_test(test_serve_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
