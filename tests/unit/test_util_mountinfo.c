/* test_util_mountinfo.c -- keg_mountinfo_find() and keg_mountinfo_dev(): what is
 * mounted at a path;
 * keg_fuse_live, keg_fuse_wait_live and keg_umount_or_detach.
 * The source is compiled in so its static unescape helper is reachable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../core/util/keg_mountinfo.c"

#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

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

/* the device is the mount's st_dev, in mountinfo's "maj:min" form */
static void test_dev(void **state)
{
    (void)state;
    char dev[32], want[32];
    struct stat st;
    assert_int_equal(stat("/proc", &st), 0);
    snprintf(want, sizeof(want), "%u:%u", major(st.st_dev), minor(st.st_dev));
    assert_int_equal(keg_mountinfo_dev("/proc", dev, sizeof(dev)), 1);
    assert_string_equal(dev, want);
    assert_int_equal(keg_mountinfo_dev("/proc/self", dev, sizeof(dev)), 0);
    assert_string_equal(dev, "");
    char small[2];
    assert_int_equal(keg_mountinfo_dev("/proc", small, sizeof(small)), 1);
    assert_int_equal(strlen(small), 1);
}

static void test_unescape(void **state)
{
    (void)state;
    char s[] = "/mnt/with\\040space\\011tab\\134end\\9";
    mountinfo_unescape(s);
    assert_string_equal(s, "/mnt/with space\ttab\\end\\9");
}

static void test_fuse_live(void **state)
{
    (void)state;
    assert_int_equal(keg_fuse_live("/"), -EINVAL);
    assert_int_equal(keg_fuse_live("/proc"), -EINVAL);
    assert_int_equal(keg_fuse_live("/nonexistent/keg-test"), -ENOENT);
}

static int calls;

static int gone_after_3(void *arg)
{
    (void)arg;
    return ++calls >= 3;
}

static void test_fuse_wait_live(void **state)
{
    (void)state;
    /* the mounter goes away: -EIO once gone() says so, polled between */
    calls = 0;
    assert_int_equal(keg_fuse_wait_live("/proc", 10000, 1, gone_after_3, NULL), -EIO);
    assert_int_equal(calls, 3);
    /* nothing comes live: -ETIMEDOUT after the timeout, not before */
    int64_t t0 = keg_mono_ns();
    assert_int_equal(keg_fuse_wait_live("/proc", 100, 10, NULL, NULL), -ETIMEDOUT);
    int64_t ms = (keg_mono_ns() - t0) / 1000000;
    assert_true(ms >= 100);
    assert_true(ms < 5000);
}

static void test_umount_or_detach(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();     /* mounting a tmpfs needs root */
    char dir[] = "/tmp/test_util_mountinfo.XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(keg_umount_or_detach(dir), -EINVAL);      /* not a mount */
    assert_int_equal(mount("tmpfs", dir, "tmpfs", 0, "size=1m"), 0);
    assert_int_equal(keg_mountinfo_find(dir, NULL, 0), 1);
    assert_int_equal(keg_umount_or_detach(dir), 0);            /* plain unmount */
    assert_int_equal(keg_mountinfo_find(dir, NULL, 0), 0);
    /* busy (a file open in it): detached lazily */
    assert_int_equal(mount("tmpfs", dir, "tmpfs", 0, "size=1m"), 0);
    char file[64];
    snprintf(file, sizeof(file), "%s/f", dir);
    int fd = open(file, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(keg_umount_or_detach(dir), 1);
    assert_int_equal(keg_mountinfo_find(dir, NULL, 0), 0);
    close(fd);
    assert_int_equal(keg_umount_or_detach("/nonexistent/keg-test"), -ENOENT);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_dev),
        cmocka_unit_test(test_unescape),
        cmocka_unit_test(test_fuse_live),
        cmocka_unit_test(test_fuse_wait_live),
        cmocka_unit_test(test_umount_or_detach),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
