/* test_util_spawn.c -- keg_spawn_logged, keg_pid_has_arg, keg_wait_gone and
 * keg_self_exe: the pieces the mount holder and the CSI node plugin use to
 * start a mounter and to wait for it to go away. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "keg/keg.h"
#include "keg/spawn.h"

/* Whether the child pid has exited (reaped here). */
static int child_gone(void *arg)
{
    pid_t pid = *(pid_t *)arg;
    return waitpid(pid, NULL, WNOHANG) == pid;
}

static void test_pid_has_arg_and_wait(void **state)
{
    (void)state;
    char log[] = "/tmp/test_util_spawn.XXXXXX";
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    const char *argv[] = {"/bin/sh", "-c", "sleep 30; exit 0", "sh", "/mnt/keg-target", NULL};
    pid_t pid = 0;
    assert_int_equal(keg_spawn_logged("/bin/sh", argv, log, &pid), 0);
    assert_true(pid > 0);
    /* the parent runs on while the child's exec is still setting up its
     * arguments: give it a moment */
    for (int i = 0; i < 200 && !keg_pid_has_arg(pid, "/mnt/keg-target"); i++)
        usleep(10000);
    assert_int_equal(keg_pid_has_arg(pid, "/mnt/keg-target"), 1);
    assert_int_equal(keg_pid_has_arg(pid, "/mnt/keg"), 0);     /* whole arguments only */
    assert_int_equal(keg_pid_has_arg(0, "/mnt/keg-target"), 0);
    /* still running: a short wait times out, after its timeout */
    int64_t t0 = keg_mono_ns();
    assert_int_equal(keg_wait_gone(child_gone, &pid, 100, 10), 0);
    assert_true((keg_mono_ns() - t0) / 1000000 >= 100);
    kill(pid, SIGTERM);
    assert_int_equal(keg_wait_gone(child_gone, &pid, 10000, 10), 1);
    assert_int_equal(keg_pid_has_arg(pid, "/mnt/keg-target"), 0);     /* reaped */
    unlink(log);
}

/* keg_self_exe names this test binary, and refuses a buffer it does not fit. */
static void test_self_exe(void **state)
{
    (void)state;
    char buf[4096], tiny[4];
    assert_int_equal(keg_self_exe(buf, sizeof(buf)), 0);
    assert_true(buf[0] == '/');
    const char *base = strrchr(buf, '/') + 1;
    assert_string_equal(base, "test_util_spawn");
    assert_int_equal(access(buf, X_OK), 0);
    assert_int_equal(keg_self_exe(tiny, sizeof(tiny)), -ENAMETOOLONG);
    assert_string_equal(tiny, "");
    assert_int_equal(keg_self_exe(tiny, 0), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pid_has_arg_and_wait),
        cmocka_unit_test(test_self_exe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
