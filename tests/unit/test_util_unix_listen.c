/* test_util_unix_listen.c -- keg_unix_listen: a listening unix socket at a path with
 * the mode asked for; a file that is not a socket left alone; a stale socket file
 * replaced; a live one refused or replaced as asked; a path too long for sun_path. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "keg/unix_listen.h"

/* One directory for the run; each test works on the path sock in it. */
static char dir[64] = "/tmp/kegul.XXXXXX";
static char sock[128];

static int make_dir(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    snprintf(sock, sizeof(sock), "%s/s.sock", dir);
    return 0;
}

static int remove_dir(void **state)
{
    (void)state;
    return rmdir(dir);
}

/* Whatever a test left at sock goes (a file, a socket or an empty directory). */
static int clear_sock(void **state)
{
    (void)state;
    if (unlink(sock) < 0 && errno != ENOENT && rmdir(sock) < 0)
        return -1;
    return 0;
}

/* sa set to the unix address path (which fits). */
static void set_addr(struct sockaddr_un *sa, const char *path)
{
    size_t len = strlen(path);
    assert_true(len < sizeof(sa->sun_path));
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, path, len + 1);
}

/* A client connected to the socket at path, or -1. */
static int connect_to(const char *path)
{
    struct sockaddr_un sa;
    set_addr(&sa, path);
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        return -1;
    if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(c);
        return -1;
    }
    return c;
}

/* Whether a client connecting to path lands on the listening socket lfd. */
static int serves(int lfd, const char *path)
{
    int c = connect_to(path);
    if (c < 0)
        return 0;
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    int a = poll(&pfd, 1, 1000) == 1 ? accept4(lfd, NULL, NULL, SOCK_CLOEXEC) : -1;
    close(c);
    if (a < 0)
        return 0;
    close(a);
    return 1;
}

/* A socket file at path that nobody listens on: bound, then closed. */
static void make_stale(const char *path)
{
    struct sockaddr_un sa;
    set_addr(&sa, path);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(s >= 0);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(s);
}

static void test_fresh_path(void **state)
{
    (void)state;
    struct keg_unix_listen_info ul;
    struct stat st;
    mode_t um = umask(022);

    int fd = keg_unix_listen(sock, 0, 0600, &ul);
    assert_true(fd >= 0);
    assert_int_equal(umask(022), 022);        /* the process's umask is back */
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    int acc = 0;
    socklen_t al = sizeof(acc);
    assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al), 0);
    assert_int_equal(acc, 1);
    assert_int_equal(lstat(sock, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(ul.mode, 0600);
    assert_true(ul.dev == st.st_dev && ul.ino == st.st_ino);
    assert_int_equal(ul.replaced, 0);
    assert_null(ul.failed);
    assert_true(serves(fd, sock));
    close(fd);
    unlink(sock);

    /* the holder's mode, and no info asked for */
    fd = keg_unix_listen(sock, KEG_UNIX_LISTEN_REPLACE_LIVE, 0700, NULL);
    assert_true(fd >= 0);
    assert_int_equal(lstat(sock, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_true(serves(fd, sock));
    close(fd);
    umask(um);
}

static void test_not_a_socket(void **state)
{
    (void)state;
    struct keg_unix_listen_info ul;
    struct stat before, after;
    char buf[16];
    int f = open(sock, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    assert_true(f >= 0);
    assert_int_equal(write(f, "precious", 8), 8);
    close(f);
    assert_int_equal(lstat(sock, &before), 0);

    for (unsigned flags = 0; flags <= KEG_UNIX_LISTEN_REPLACE_LIVE; flags++) {
        ul.failed = "unset";
        assert_int_equal(keg_unix_listen(sock, flags, 0600, &ul), -EEXIST);
        assert_null(ul.failed);
        assert_int_equal(ul.replaced, 0);
        assert_int_equal(keg_unix_listen(sock, flags, 0600, NULL), -EEXIST);
    }
    assert_int_equal(lstat(sock, &after), 0);
    assert_true(S_ISREG(after.st_mode));
    assert_true(after.st_ino == before.st_ino);
    assert_int_equal(after.st_mode & 07777, 0640);
    f = open(sock, O_RDONLY | O_CLOEXEC);
    assert_true(f >= 0);
    assert_int_equal(read(f, buf, sizeof(buf)), 8);
    assert_memory_equal(buf, "precious", 8);
    close(f);

    /* a directory is not a socket either */
    unlink(sock);
    assert_int_equal(mkdir(sock, 0700), 0);
    assert_int_equal(keg_unix_listen(sock, 0, 0600, NULL), -EEXIST);
    assert_int_equal(lstat(sock, &after), 0);
    assert_true(S_ISDIR(after.st_mode));
}

static void test_stale_replaced(void **state)
{
    (void)state;
    struct keg_unix_listen_info ul;
    struct stat old, st;
    for (unsigned flags = 0; flags <= KEG_UNIX_LISTEN_REPLACE_LIVE; flags++) {
        make_stale(sock);
        assert_int_equal(lstat(sock, &old), 0);
        assert_true(connect_to(sock) < 0);      /* stale indeed */
        int fd = keg_unix_listen(sock, flags, 0600, &ul);
        assert_true(fd >= 0);
        assert_int_equal(ul.replaced, 1);
        assert_int_equal(lstat(sock, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_true(ul.ino == st.st_ino);
        assert_true(serves(fd, sock));
        close(fd);
        unlink(sock);
    }
}

static void test_live(void **state)
{
    (void)state;
    struct keg_unix_listen_info ul;
    struct stat st;
    int live = keg_unix_listen(sock, 0, 0600, &ul);
    assert_true(live >= 0);
    ino_t live_ino = ul.ino;

    /* refused: the live server keeps its file and its clients */
    ul.failed = "unset";
    assert_int_equal(keg_unix_listen(sock, 0, 0600, &ul), -EADDRINUSE);
    assert_null(ul.failed);
    assert_int_equal(ul.replaced, 0);
    assert_int_equal(lstat(sock, &st), 0);
    assert_true(st.st_ino == live_ino);
    /* the probe's connection is queued on the live socket: drain it */
    struct pollfd pfd = {.fd = live, .events = POLLIN};
    if (poll(&pfd, 1, 0) == 1) {
        int a = accept4(live, NULL, NULL, SOCK_CLOEXEC);
        if (a >= 0)
            close(a);
    }
    assert_true(serves(live, sock));

    /* replaced: the path now leads to the new socket */
    int fd = keg_unix_listen(sock, KEG_UNIX_LISTEN_REPLACE_LIVE, 0700, &ul);
    assert_true(fd >= 0);
    assert_int_equal(ul.replaced, 1);
    assert_true(ul.ino != live_ino);
    assert_int_equal(ul.mode, 0700);
    assert_int_equal(lstat(sock, &st), 0);
    assert_true(st.st_ino == ul.ino);
    assert_true(serves(fd, sock));
    assert_false(serves(live, sock));
    close(fd);
    close(live);
}

static void test_bad_path(void **state)
{
    (void)state;
    struct keg_unix_listen_info ul;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    struct stat st;

    /* sizeof(sun_path) bytes leave no room for the NUL */
    int n = snprintf(path, sizeof(path), "%s/", dir);
    memset(path + n, 'a', sizeof(path) - 1 - (size_t)n);
    path[sizeof(path) - 1] = '\0';
    assert_int_equal(strlen(path), sizeof(((struct sockaddr_un *)0)->sun_path));
    ul.failed = "unset";
    assert_int_equal(keg_unix_listen(path, 0, 0600, &ul), -ENAMETOOLONG);
    assert_null(ul.failed);
    assert_int_equal(keg_unix_listen(path, KEG_UNIX_LISTEN_REPLACE_LIVE, 0700, NULL),
                     -ENAMETOOLONG);
    assert_int_equal(lstat(path, &st), -1);

    /* one byte less fits */
    path[sizeof(path) - 2] = '\0';
    int fd = keg_unix_listen(path, 0, 0600, NULL);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);

    assert_int_equal(keg_unix_listen("", 0, 0600, &ul), -EINVAL);
    assert_null(ul.failed);

    /* a failing system call is named */
    snprintf(path, sizeof(path), "%s/no/such/dir.sock", dir);
    assert_int_equal(keg_unix_listen(path, 0, 0600, &ul), -ENOENT);
    assert_string_equal(ul.failed, "bind");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fresh_path, clear_sock),
        cmocka_unit_test_teardown(test_not_a_socket, clear_sock),
        cmocka_unit_test_teardown(test_stale_replaced, clear_sock),
        cmocka_unit_test_teardown(test_live, clear_sock),
        cmocka_unit_test_teardown(test_bad_path, clear_sock),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
