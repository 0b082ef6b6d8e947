/* syscalls.c -- POSIX exerciser for a mounted file system (`keg_syscalls DIR`).
 *
 * DESIGN
 * Each test is one function that runs in a fresh sub-directory DIR/<test>
 * (the process chdir()s there, so paths are short and relative).  Every check
 * prints one line:
 *
 *   PASS <test>: <what> [-> <expected errno>]
 *   FAIL <test>: <what>: expected <x>, got <y> (syscalls.c:<line>)
 *   SKIP <test>: <why>
 *
 * and the process exits 1 if any check failed.  The expectations are Linux's
 * own (ext4/tmpfs as root must pass everything); where KegFS differs from ext4
 * on purpose, the check is skipped with a note instead.  Permission checks run
 * in a forked child that switched to uid/gid 65534 (root only).
 *
 * Usage: keg_syscalls [-q] [-t TEST[,TEST...]] [-l] DIR
 *   -q  print only FAIL/SKIP lines and the summary
 *   -t  run only the named tests
 *   -l  list the tests
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define FUSE_SUPER_MAGIC 0x65735546
#define TMPFS_MAGIC_ 0x01021994
#define NOBODY 65534

static const char *g_test = "";   /* name of the running test */
static int g_quiet;
static int g_pass, g_fail, g_skip;
static long g_fstype;             /* statfs f_type of DIR */

/*------------------------------ reporting ------------------------------*/

static void report(int ok, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void report(int ok, int line, const char *fmt, ...)
{
    va_list ap;

    if (ok) {
        g_pass++;
        if (g_quiet)
            return;
        printf("PASS %s: ", g_test);
    } else {
        g_fail++;
        printf("FAIL %s: ", g_test);
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok)
        printf(" (syscalls.c:%d)", line);
    putchar('\n');
    fflush(stdout);
}

static void skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void skip(const char *fmt, ...)
{
    va_list ap;

    g_skip++;
    printf("SKIP %s: ", g_test);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static const char *ename(int e)
{
    static const struct { int e; const char *n; } tab[] = {
        {0, "success"}, {EPERM, "EPERM"}, {ENOENT, "ENOENT"}, {EIO, "EIO"}, {EBADF, "EBADF"},
        {EAGAIN, "EAGAIN"}, {EACCES, "EACCES"}, {EEXIST, "EEXIST"}, {EXDEV, "EXDEV"},
        {ENOTDIR, "ENOTDIR"}, {EISDIR, "EISDIR"}, {EINVAL, "EINVAL"}, {EFBIG, "EFBIG"},
        {ENOSPC, "ENOSPC"}, {ERANGE, "ERANGE"}, {ENAMETOOLONG, "ENAMETOOLONG"},
        {ENOTEMPTY, "ENOTEMPTY"}, {ELOOP, "ELOOP"}, {ENODATA, "ENODATA"},
        {EOPNOTSUPP, "EOPNOTSUPP"}, {ENXIO, "ENXIO"}, {ENOSYS, "ENOSYS"}, {EROFS, "EROFS"},
        {EMLINK, "EMLINK"}, {ENOTSUP, "ENOTSUP"}, {EDEADLK, "EDEADLK"}, {EBUSY, "EBUSY"},
    };
    static char buf[32];

    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        if (tab[i].e == e)
            return tab[i].n;
    }
    snprintf(buf, sizeof(buf), "errno %d", e);
    return buf;
}

/* The call must succeed (return >= 0).  Evaluates to its result. */
/* (the statement expressions read errno after the call: argument evaluation
 * order is unspecified) */
#define OK(expr) ({ errno = 0; long r_ = (long)(expr); ok_impl(r_, errno, __LINE__, #expr); })
static long ok_impl(long rc, int err, int line, const char *what)
{
    if (rc < 0)
        report(0, line, "%s: expected success, got %s (%s)", what, ename(err), strerror(err));
    else
        report(1, line, "%s", what);
    return rc;
}

/* The call must fail with errno e (or e2, an accepted alternative). */
#define ERR(expr, e) \
    ({ errno = 0; long r_ = (long)(expr); err_impl(r_, errno, (e), (e), __LINE__, #expr); })
#define ERR2(expr, e, e2) \
    ({ errno = 0; long r_ = (long)(expr); err_impl(r_, errno, (e), (e2), __LINE__, #expr); })
static void err_impl(long rc, int err, int e, int e2, int line, const char *what)
{
    if (rc >= 0)
        report(0, line, "%s: expected %s, got success (%ld)", what, ename(e), rc);
    else if (err != e && err != e2)
        report(0, line, "%s: expected %s, got %s", what, ename(e), ename(err));
    else
        report(1, line, "%s -> %s", what, ename(err));
}

/* Integer equality. */
#define EQ(a, b) eq_impl((long long)(a), (long long)(b), __LINE__, #a " == " #b)
static int eq_impl(long long a, long long b, int line, const char *what)
{
    if (a != b)
        report(0, line, "%s: expected %lld, got %lld", what, b, a);
    else
        report(1, line, "%s", what);
    return a == b;
}

/* Boolean condition. */
#define TRUE(cond) true_impl(!!(cond), __LINE__, #cond)
static int true_impl(int c, int line, const char *what)
{
    report(c, line, "%s%s", what, c ? "" : ": condition is false");
    return c;
}

/*------------------------------ helpers ------------------------------*/

static int ts_cmp(struct timespec a, struct timespec b)
{
    if (a.tv_sec != b.tv_sec)
        return a.tv_sec < b.tv_sec ? -1 : 1;
    if (a.tv_nsec != b.tv_nsec)
        return a.tv_nsec < b.tv_nsec ? -1 : 1;
    return 0;
}

/* Let the coarse kernel clock tick so that timestamps can differ. */
static void tick(void)
{
    struct timespec t = {0, 20 * 1000 * 1000};
    nanosleep(&t, NULL);
}

static struct stat xstat(const char *p)
{
    struct stat st;

    memset(&st, 0, sizeof(st));
    if (lstat(p, &st) < 0)
        report(0, __LINE__, "lstat(%s): %s", p, strerror(errno));
    return st;
}

static int write_file(const char *p, const void *buf, size_t n, mode_t mode)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0)
        return -1;
    if (write(fd, buf, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    return close(fd);
}

/* Read exactly n bytes at off and compare them with want (NULL: zeros). */
static int pread_is(int fd, off_t off, const void *want, size_t n)
{
    char *buf = malloc(n ? n : 1);
    int same;
    ssize_t r;

    if (!buf)
        return 0;
    r = pread(fd, buf, n, off);
    if (r != (ssize_t)n) {
        free(buf);
        return 0;
    }
    if (want) {
        same = memcmp(buf, want, n) == 0;
    } else {
        same = 1;
        for (size_t i = 0; i < n; i++) {
            if (buf[i]) {
                same = 0;
                break;
            }
        }
    }
    free(buf);
    return same;
}

static int count_dir(const char *p)
{
    DIR *d = opendir(p);
    struct dirent *de;
    int n = 0;

    if (!d)
        return -1;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    }
    closedir(d);
    return n;
}

/* Run fn in a child with uid/gid 65534 and no supplementary groups; its checks
 * count towards ours (the child's failure count comes back as exit status). */
static void as_nobody(void (*fn)(void *), void *arg)
{
    pid_t pid;
    int st;

    fflush(stdout);
    pid = fork();
    if (pid < 0) {
        report(0, __LINE__, "fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        g_pass = g_fail = 0;
        if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
            setresuid(NOBODY, NOBODY, NOBODY) < 0) {
            printf("FAIL %s: cannot become uid %d: %s\n", g_test, NOBODY, strerror(errno));
            _exit(100);
        }
        fn(arg);
        fflush(stdout);
        _exit(g_fail > 99 ? 99 : g_fail);
    }
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st)) {
        report(0, __LINE__, "child as uid %d died abnormally", NOBODY);
        return;
    }
    /* the child printed its own PASS lines; count only failures here */
    g_fail += WEXITSTATUS(st);
}

/*------------------------------ tests ------------------------------*/

static void t_open(void)
{
    int fd;
    char buf[16];

    fd = OK(open("f", O_CREAT | O_EXCL | O_WRONLY, 0644));
    EQ(write(fd, "hello world", 11), 11);
    close(fd);
    ERR(open("f", O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
    ERR(open("missing/f", O_CREAT | O_WRONLY, 0644), ENOENT);
    ERR(open("nothere", O_RDONLY), ENOENT);
    ERR(open("f/x", O_CREAT | O_WRONLY, 0644), ENOTDIR);
    ERR(open("f", O_RDONLY | O_DIRECTORY), ENOTDIR);
    OK(mkdir("d", 0755));
    ERR(open("d", O_WRONLY), EISDIR);
    ERR(open("d", O_RDWR | O_CREAT, 0644), EISDIR);
    OK(symlink("dangling-target", "dl"));
    ERR(open("dl", O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);

    /* O_TRUNC empties the file and updates mtime */
    struct stat before = xstat("f");
    tick();
    fd = OK(open("f", O_WRONLY | O_TRUNC));
    close(fd);
    struct stat after = xstat("f");
    EQ(after.st_size, 0);
    TRUE(ts_cmp(after.st_mtim, before.st_mtim) > 0);
    TRUE(ts_cmp(after.st_ctim, before.st_ctim) > 0);

    /* O_APPEND: every write goes to the end, also through a second fd */
    OK(write_file("a", "0123", 4, 0644));
    int fa = OK(open("a", O_WRONLY | O_APPEND));
    int fb = OK(open("a", O_WRONLY));
    EQ(pwrite(fb, "ABCDEF", 6, 0), 6);             /* size now 6 */
    EQ(write(fa, "xy", 2), 2);                      /* lands at 6 */
    EQ(lseek(fa, 0, SEEK_CUR), 8);
    close(fa);
    close(fb);
    fd = OK(open("a", O_RDONLY));
    memset(buf, 0, sizeof(buf));
    EQ(read(fd, buf, sizeof(buf)), 8);
    TRUE(memcmp(buf, "ABCDEFxy", 8) == 0);
    ERR(write(fd, "z", 1), EBADF);
    close(fd);
    fd = OK(open("d", O_RDONLY | O_DIRECTORY));
    ERR(read(fd, buf, 1), EISDIR);
    close(fd);

    /* mode honours the umask (022) */
    fd = OK(open("m", O_CREAT | O_WRONLY, 0777));
    close(fd);
    EQ(xstat("m").st_mode & 07777, 0755);
}

static void t_rw(void)
{
    char big[100000], back[100000];
    int fd;

    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)(i * 7 + 3);
    fd = OK(open("f", O_CREAT | O_RDWR, 0644));
    EQ(write(fd, big, sizeof(big)), sizeof(big));
    EQ(lseek(fd, 0, SEEK_SET), 0);
    EQ(read(fd, back, sizeof(back)), sizeof(back));
    TRUE(memcmp(big, back, sizeof(big)) == 0);
    EQ(read(fd, back, 10), 0);                      /* EOF */
    /* overwrite in the middle */
    EQ(pwrite(fd, "XXXX", 4, 50000), 4);
    memcpy(big + 50000, "XXXX", 4);
    TRUE(pread_is(fd, 0, big, sizeof(big)));
    /* write past EOF leaves a hole of zeros */
    EQ(pwrite(fd, "END", 3, 200000), 3);
    EQ(xstat("f").st_size, 200003);
    TRUE(pread_is(fd, 100000, NULL, 100000));
    TRUE(pread_is(fd, 200000, "END", 3));
    /* short read at EOF */
    EQ(pread(fd, back, 100, 199990), 13);
    /* 64-bit offsets */
    const off_t far = 5LL << 30;
    EQ(pwrite(fd, "Z", 1, far), 1);
    EQ(xstat("f").st_size, far + 1);
    TRUE(pread_is(fd, far, "Z", 1));
    TRUE(pread_is(fd, far - 4096, NULL, 4096));
    close(fd);
    /* data is visible through a new open */
    fd = OK(open("f", O_RDONLY));
    TRUE(pread_is(fd, 0, big, sizeof(big)));
    close(fd);
}

static void t_truncate(void)
{
    int fd = OK(open("f", O_CREAT | O_RDWR, 0644));

    EQ(write(fd, "ABCDEFGHIJ", 10), 10);
    OK(ftruncate(fd, 4));
    EQ(xstat("f").st_size, 4);
    OK(ftruncate(fd, 20));                          /* must not resurrect EFGHIJ */
    EQ(xstat("f").st_size, 20);
    TRUE(pread_is(fd, 0, "ABCD", 4));
    TRUE(pread_is(fd, 4, NULL, 16));
    OK(truncate("f", 3 * 1024 * 1024));
    TRUE(pread_is(fd, 4, NULL, 3 * 1024 * 1024 - 4));
    OK(ftruncate(fd, 0));
    EQ(xstat("f").st_size, 0);
    ERR(ftruncate(fd, -1), EINVAL);
    close(fd);
    fd = OK(open("f", O_RDONLY));
    ERR(ftruncate(fd, 10), EINVAL);                 /* not open for writing */
    close(fd);
    OK(mkdir("d", 0755));
    ERR(truncate("d", 0), EISDIR);
    /* truncate updates mtime and ctime */
    struct stat a = xstat("f");
    tick();
    OK(truncate("f", 100));
    struct stat b = xstat("f");
    TRUE(ts_cmp(b.st_mtim, a.st_mtim) > 0);
    TRUE(ts_cmp(b.st_ctim, a.st_ctim) > 0);
}

static void t_stat(void)
{
    struct stat st, a, b;
    int fd;

    fd = OK(open("f", O_CREAT | O_WRONLY, 0640));
    OK(fstat(fd, &st));
    EQ(st.st_nlink, 1);
    EQ(st.st_size, 0);
    EQ(st.st_mode, S_IFREG | 0640);
    EQ(st.st_uid, geteuid());
    EQ(st.st_gid, getegid());
    TRUE(st.st_blksize > 0);
    TRUE(st.st_ino != 0);
    /* write changes mtime and ctime */
    a = xstat("f");
    tick();
    EQ(write(fd, "data", 4), 4);
    close(fd);
    b = xstat("f");
    EQ(b.st_size, 4);
    TRUE(ts_cmp(b.st_mtim, a.st_mtim) > 0);
    TRUE(ts_cmp(b.st_ctim, a.st_ctim) > 0);
    EQ(b.st_ino, a.st_ino);
    /* chmod changes ctime only */
    tick();
    OK(chmod("f", 0600));
    a = xstat("f");
    EQ(a.st_mode & 07777, 0600);
    TRUE(ts_cmp(a.st_ctim, b.st_ctim) > 0);
    EQ(ts_cmp(a.st_mtim, b.st_mtim), 0);
    /* chown to the same owner still changes ctime */
    tick();
    OK(chown("f", geteuid(), getegid()));
    b = xstat("f");
    TRUE(ts_cmp(b.st_ctim, a.st_ctim) > 0);
    if (geteuid() == 0) {
        OK(chown("f", 1234, 5678));
        b = xstat("f");
        EQ(b.st_uid, 1234);
        EQ(b.st_gid, 5678);
        OK(chown("f", -1, 42));
        EQ(xstat("f").st_uid, 1234);
        EQ(xstat("f").st_gid, 42);
        OK(lchown("f", 0, 0));
    }
    /* link changes ctime of the target */
    tick();
    a = xstat("f");
    OK(link("f", "f2"));
    b = xstat("f");
    EQ(b.st_nlink, 2);
    TRUE(ts_cmp(b.st_ctim, a.st_ctim) > 0);
    /* rename changes ctime (Linux and ext4 do) */
    tick();
    OK(rename("f2", "f3"));
    a = xstat("f3");
    TRUE(ts_cmp(a.st_ctim, b.st_ctim) > 0);
    /* directory: a new entry changes the parent's mtime and ctime */
    OK(mkdir("d", 0755));
    a = xstat("d");
    EQ(a.st_mode, S_IFDIR | 0755);
    tick();
    fd = OK(open("d/x", O_CREAT | O_WRONLY, 0644));
    close(fd);
    b = xstat("d");
    TRUE(ts_cmp(b.st_mtim, a.st_mtim) > 0);
    TRUE(ts_cmp(b.st_ctim, a.st_ctim) > 0);
    tick();
    OK(unlink("d/x"));
    a = xstat("d");
    TRUE(ts_cmp(a.st_mtim, b.st_mtim) > 0);
}

static void t_utimens(void)
{
    struct timespec ts[2];
    struct stat a, b, c;
    struct timespec now;
    int fd = OK(open("f", O_CREAT | O_WRONLY, 0644));

    close(fd);
    ts[0].tv_sec = 1000000000;
    ts[0].tv_nsec = 123456789;
    ts[1].tv_sec = 1100000000;
    ts[1].tv_nsec = 987654321;
    OK(utimensat(AT_FDCWD, "f", ts, 0));
    a = xstat("f");
    EQ(a.st_atim.tv_sec, 1000000000);
    EQ(a.st_atim.tv_nsec, 123456789);
    EQ(a.st_mtim.tv_sec, 1100000000);
    EQ(a.st_mtim.tv_nsec, 987654321);
    /* UTIME_OMIT leaves atime, UTIME_NOW sets mtime to now */
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_nsec = UTIME_NOW;
    clock_gettime(CLOCK_REALTIME, &now);
    OK(utimensat(AT_FDCWD, "f", ts, 0));
    b = xstat("f");
    EQ(b.st_atim.tv_sec, 1000000000);
    EQ(b.st_atim.tv_nsec, 123456789);
    TRUE(b.st_mtim.tv_sec >= now.tv_sec - 1 && b.st_mtim.tv_sec <= now.tv_sec + 2);
    /* UTIME_NOW for atime, UTIME_OMIT for mtime */
    ts[0].tv_nsec = UTIME_NOW;
    ts[1].tv_nsec = UTIME_OMIT;
    OK(utimensat(AT_FDCWD, "f", ts, 0));
    c = xstat("f");
    TRUE(c.st_atim.tv_sec >= now.tv_sec - 1 && c.st_atim.tv_sec <= now.tv_sec + 2);
    EQ(ts_cmp(c.st_mtim, b.st_mtim), 0);
    /* NULL = both now; times before 1970 are kept */
    OK(utimensat(AT_FDCWD, "f", NULL, 0));
    ts[0].tv_sec = -100;
    ts[0].tv_nsec = 0;
    ts[1].tv_sec = 0;
    ts[1].tv_nsec = 1;
    OK(utimensat(AT_FDCWD, "f", ts, 0));
    c = xstat("f");
    EQ(c.st_atim.tv_sec, -100);
    EQ(c.st_mtim.tv_nsec, 1);
    /* times set while written data may still be buffered survive the close:
     * tar does write(), futimens(fd, {UTIME_OMIT, mtime}), close() */
    fd = OK(open("g", O_CREAT | O_WRONLY, 0644));
    EQ(write(fd, "data", 4), 4);
    ts[0].tv_sec = 0;
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_sec = 978307200;
    ts[1].tv_nsec = 0;
    OK(futimens(fd, ts));
    OK(fchmod(fd, 0640));
    close(fd);
    EQ(xstat("g").st_mtim.tv_sec, 978307200);
    fd = OK(open("h", O_CREAT | O_WRONLY, 0644));
    EQ(write(fd, "data", 4), 4);
    OK(utimensat(AT_FDCWD, "h", ts, 0));
    close(fd);
    EQ(xstat("h").st_mtim.tv_sec, 978307200);
    /* on a symlink itself */
    OK(symlink("f", "l"));
    ts[0].tv_sec = 12345;
    ts[1].tv_sec = 23456;
    ts[0].tv_nsec = ts[1].tv_nsec = 0;
    OK(utimensat(AT_FDCWD, "l", ts, AT_SYMLINK_NOFOLLOW));
    EQ(xstat("l").st_mtim.tv_sec, 23456);
    EQ(xstat("f").st_mtim.tv_sec, 0);
}

static void t_mknod(void)
{
    struct stat st;

    OK(mkfifo("fifo", 0644));
    st = xstat("fifo");
    TRUE(S_ISFIFO(st.st_mode));
    EQ(st.st_mode & 07777, 0644);
    OK(mknod("sock", S_IFSOCK | 0600, 0));
    TRUE(S_ISSOCK(xstat("sock").st_mode));
    OK(mknod("reg", S_IFREG | 0600, 0));
    st = xstat("reg");
    TRUE(S_ISREG(st.st_mode));
    EQ(st.st_size, 0);
    ERR(mknod("reg", S_IFREG | 0600, 0), EEXIST);
    if (geteuid() != 0) {
        skip("device nodes need root");
        return;
    }
    OK(mknod("chr", S_IFCHR | 0644, makedev(1, 3)));
    st = xstat("chr");
    TRUE(S_ISCHR(st.st_mode));
    EQ(major(st.st_rdev), 1);
    EQ(minor(st.st_rdev), 3);
    OK(mknod("blk", S_IFBLK | 0644, makedev(259, 65537)));
    st = xstat("blk");
    TRUE(S_ISBLK(st.st_mode));
    EQ(major(st.st_rdev), 259);
    EQ(minor(st.st_rdev), 65537);

    /* a bound unix socket in the file system */
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "bound.sock");
    OK(bind(s, (struct sockaddr *)&sa, sizeof(sa)));
    TRUE(S_ISSOCK(xstat("bound.sock").st_mode));
    close(s);
    /* a fifo carries data between two opens */
    pid_t pid = fork();
    if (pid == 0) {
        int w = open("fifo", O_WRONLY);
        _exit(w >= 0 && write(w, "pipe", 4) == 4 ? 0 : 1);
    }
    char buf[8] = {0};
    int r = OK(open("fifo", O_RDONLY));
    EQ(read(r, buf, sizeof(buf)), 4);
    TRUE(memcmp(buf, "pipe", 4) == 0);
    close(r);
    waitpid(pid, NULL, 0);
}

static void t_dirs(void)
{
    struct stat a;
    int fd;

    a = xstat(".");
    OK(mkdir("d", 0755));
    EQ(xstat("d").st_nlink, 2);
    EQ(xstat(".").st_nlink, a.st_nlink + 1);
    ERR(mkdir("d", 0755), EEXIST);
    ERR(mkdir("nothere/d", 0755), ENOENT);
    fd = OK(open("f", O_CREAT | O_WRONLY, 0644));
    close(fd);
    ERR(mkdir("f", 0755), EEXIST);
    ERR(mkdir("f/d", 0755), ENOTDIR);
    OK(mkdir("d/sub", 0755));
    EQ(xstat("d").st_nlink, 3);
    ERR(rmdir("d"), ENOTEMPTY);
    ERR(rmdir("f"), ENOTDIR);
    ERR(rmdir("nothere"), ENOENT);
    ERR(rmdir("d/sub/."), EINVAL);
    ERR(unlink("d"), EISDIR);
    OK(rmdir("d/sub"));
    EQ(xstat("d").st_nlink, 2);
    OK(rmdir("d"));
    EQ(xstat(".").st_nlink, a.st_nlink);
    ERR(unlink("nothere"), ENOENT);
    OK(unlink("f"));
    ERR(unlink("f"), ENOENT);
    /* setgid bit of a new dir comes from the parent */
    OK(mkdir("g", 0755));
    OK(chmod("g", 02755));
    OK(mkdir("g/h", 0755));
    TRUE(xstat("g/h").st_mode & S_ISGID);
}

static void t_readdir(void)
{
    char name[NAME_MAX + 8];
    int fd, found_dot = 0, found_dotdot = 0, n = 0;
    DIR *d;
    struct dirent *de;

    OK(mkdir("d", 0755));
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof(name), "d/entry-%03d", i);
        fd = open(name, O_CREAT | O_WRONLY, 0644);
        if (fd >= 0)
            close(fd);
    }
    OK(mkdir("d/subdir", 0755));
    d = opendir("d");
    TRUE(d != NULL);
    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, "."))
            found_dot++;
        else if (!strcmp(de->d_name, ".."))
            found_dotdot++;
        else
            n++;
        if (!strcmp(de->d_name, "subdir") && de->d_type != DT_UNKNOWN)
            EQ(de->d_type, DT_DIR);
        if (!strcmp(de->d_name, "entry-042") && de->d_type != DT_UNKNOWN)
            EQ(de->d_type, DT_REG);
    }
    EQ(found_dot, 1);
    EQ(found_dotdot, 1);
    EQ(n, 101);

    /* telldir/seekdir: resume at a remembered position */
    char after[128][NAME_MAX + 1];
    int na = 0, nb = 0, same = 1;
    long pos = -1;

    rewinddir(d);
    for (int i = 0; i < 30; i++)
        readdir(d);
    pos = telldir(d);
    TRUE(pos != -1);
    while ((de = readdir(d)) != NULL && na < 128)
        snprintf(after[na++], sizeof(after[0]), "%s", de->d_name);
    seekdir(d, pos);
    while ((de = readdir(d)) != NULL) {
        if (nb >= na || strcmp(after[nb], de->d_name))
            same = 0;
        nb++;
    }
    EQ(nb, na);
    TRUE(same);
    EQ(na, 103 - 30);
    closedir(d);

    /* entries deleted while listing are not returned twice */
    d = opendir("d");
    int seen = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == 'e') {
            snprintf(name, sizeof(name), "d/%s", de->d_name);
            unlink(name);
            seen++;
        }
    }
    closedir(d);
    EQ(seen, 100);
    EQ(count_dir("d"), 1);
    EQ(count_dir("."), 1);
}

static void t_rename(void)
{
    struct stat a;
    int fd;

    OK(write_file("f1", "one", 3, 0644));
    OK(write_file("f2", "two", 3, 0644));
    a = xstat("f1");
    /* file over file: target replaced, inode kept */
    OK(rename("f1", "f2"));
    ERR(access("f1", F_OK), ENOENT);
    EQ(xstat("f2").st_ino, a.st_ino);
    EQ(xstat("f2").st_size, 3);
    /* rename over a file that is open: the old one stays readable */
    OK(write_file("f3", "three", 5, 0644));
    fd = OK(open("f2", O_RDONLY));
    OK(rename("f3", "f2"));
    TRUE(pread_is(fd, 0, "one", 3));
    close(fd);
    /* dirs */
    OK(mkdir("d1", 0755));
    OK(mkdir("d2", 0755));
    OK(mkdir("d3", 0755));
    OK(write_file("d3/x", "x", 1, 0644));
    OK(mkdir("d1/sub", 0755));
    OK(rename("d1", "d2"));                         /* over empty dir */
    ERR(access("d1", F_OK), ENOENT);
    TRUE(S_ISDIR(xstat("d2/sub").st_mode));
    ERR2(rename("d2", "d3"), ENOTEMPTY, EEXIST);    /* over non-empty dir */
    ERR(rename("f2", "d3"), EISDIR);                /* file over dir */
    ERR(rename("d2", "f2"), ENOTDIR);               /* dir over file */
    ERR(rename("d2", "d2/sub/inside"), EINVAL);     /* into its own subtree */
    ERR(rename("nothere", "x"), ENOENT);
    ERR(rename("f2", "nothere/x"), ENOENT);
    /* moving a dir to another parent fixes both parents' nlink and ".." */
    struct stat p2 = xstat("d2"), p3 = xstat("d3");
    OK(rename("d2/sub", "d3/sub"));
    EQ(xstat("d2").st_nlink, p2.st_nlink - 1);
    EQ(xstat("d3").st_nlink, p3.st_nlink + 1);
    EQ(xstat("d3/sub/..").st_ino, p3.st_ino);
    /* hard links to the same inode: rename is a no-op */
    OK(link("f2", "f2link"));
    OK(rename("f2", "f2link"));
    EQ(access("f2", F_OK), 0);
    EQ(xstat("f2").st_nlink, 2);
    OK(unlink("f2link"));

    /* renameat2 */
    OK(write_file("n1", "n1", 2, 0644));
    OK(write_file("n2", "n2", 2, 0644));
    ERR(renameat2(AT_FDCWD, "n1", AT_FDCWD, "n2", RENAME_NOREPLACE), EEXIST);
    EQ(xstat("n1").st_size, 2);
    OK(renameat2(AT_FDCWD, "n1", AT_FDCWD, "n3", RENAME_NOREPLACE));
    ERR(access("n1", F_OK), ENOENT);
    /* exchange file <-> dir, across directories */
    struct stat f = xstat("n3"), d = xstat("d3");
    OK(renameat2(AT_FDCWD, "n3", AT_FDCWD, "d3", RENAME_EXCHANGE));
    EQ(xstat("n3").st_ino, d.st_ino);
    TRUE(S_ISDIR(xstat("n3").st_mode));
    EQ(xstat("d3").st_ino, f.st_ino);
    TRUE(S_ISREG(xstat("d3").st_mode));
    TRUE(S_ISDIR(xstat("n3/sub").st_mode));
    OK(mkdir("e", 0755));
    ERR(renameat2(AT_FDCWD, "d3", AT_FDCWD, "e/nothing", RENAME_EXCHANGE), ENOENT);
    OK(renameat2(AT_FDCWD, "n3", AT_FDCWD, "e", RENAME_EXCHANGE));
    EQ(xstat("e").st_ino, d.st_ino);
    EQ(xstat("e/sub/..").st_ino, d.st_ino);
    ERR(renameat2(AT_FDCWD, "n2", AT_FDCWD, "nope", RENAME_EXCHANGE), ENOENT);
    ERR(renameat2(AT_FDCWD, "n2", AT_FDCWD, "n3", RENAME_NOREPLACE | RENAME_EXCHANGE), EINVAL);
    /* the renamed file's content is intact */
    fd = OK(open("d3", O_RDONLY));
    TRUE(pread_is(fd, 0, "n1", 2));
    close(fd);
}

static void t_link(void)
{
    int fd;

    OK(write_file("f", "abc", 3, 0644));
    OK(link("f", "g"));
    OK(link("f", "h"));
    EQ(xstat("f").st_nlink, 3);
    EQ(xstat("g").st_ino, xstat("f").st_ino);
    OK(unlink("f"));
    EQ(xstat("g").st_nlink, 2);
    fd = OK(open("h", O_RDONLY));
    TRUE(pread_is(fd, 0, "abc", 3));
    close(fd);
    ERR(link("g", "h"), EEXIST);
    ERR(link("nothere", "x"), ENOENT);
    OK(mkdir("d", 0755));
    ERR(link("d", "dlink"), EPERM);
    /* writing through one name is visible through the other */
    fd = OK(open("g", O_WRONLY | O_APPEND));
    EQ(write(fd, "def", 3), 3);
    close(fd);
    EQ(xstat("h").st_size, 6);
    OK(link("g", "d/inner"));
    OK(unlink("g"));
    OK(unlink("h"));
    EQ(xstat("d/inner").st_nlink, 1);
    /* linking a symlink links the symlink itself */
    OK(symlink("d/inner", "sl"));
    OK(link("sl", "sl2"));
    TRUE(S_ISLNK(xstat("sl2").st_mode));
    EQ(xstat("sl").st_nlink, 2);
}

static void t_symlink(void)
{
    char buf[PATH_MAX + 1];
    char *target = malloc(PATH_MAX + 1);
    struct stat st;
    int fd;

    OK(write_file("f", "abc", 3, 0644));
    OK(symlink("f", "l"));
    st = xstat("l");
    TRUE(S_ISLNK(st.st_mode));
    EQ(st.st_size, 1);
    EQ(readlink("l", buf, sizeof(buf)), 1);
    fd = OK(open("l", O_RDONLY));
    TRUE(pread_is(fd, 0, "abc", 3));
    close(fd);
    ERR(open("l", O_RDONLY | O_NOFOLLOW), ELOOP);
    ERR(readlink("f", buf, sizeof(buf)), EINVAL);
    ERR(symlink("x", "l"), EEXIST);
    /* dangling */
    OK(symlink("/nonexistent/for/sure", "dang"));
    ERR(stat("dang", &st), ENOENT);
    EQ(readlink("dang", buf, sizeof(buf)), strlen("/nonexistent/for/sure"));
    /* readlink truncates silently to the buffer */
    EQ(readlink("dang", buf, 4), 4);
    TRUE(memcmp(buf, "/non", 4) == 0);
    /* a long target: PATH_MAX - 1 bytes */
    for (int i = 0; i < PATH_MAX - 1; i++)
        target[i] = (i % 100 == 99) ? '/' : 'a' + i % 26;
    target[PATH_MAX - 1] = 0;
    OK(symlink(target, "long"));
    memset(buf, 0, sizeof(buf));
    EQ(readlink("long", buf, sizeof(buf)), PATH_MAX - 1);
    TRUE(memcmp(buf, target, PATH_MAX - 1) == 0);
    EQ(xstat("long").st_size, PATH_MAX - 1);
    /* loops */
    OK(symlink("loop2", "loop1"));
    OK(symlink("loop1", "loop2"));
    ERR(open("loop1", O_RDONLY), ELOOP);
    /* relative target through a dir */
    OK(mkdir("d", 0755));
    OK(symlink("../f", "d/up"));
    fd = OK(open("d/up", O_RDONLY));
    close(fd);
    free(target);
}

static void t_names(void)
{
    char n255[256], n256[257], path[600];
    int fd;

    memset(n255, 'x', 255);
    n255[255] = 0;
    memset(n256, 'y', 256);
    n256[256] = 0;
    fd = OK(open(n255, O_CREAT | O_WRONLY, 0644));
    close(fd);
    EQ(access(n255, F_OK), 0);
    ERR(open(n256, O_CREAT | O_WRONLY, 0644), ENAMETOOLONG);
    ERR(mkdir(n256, 0755), ENAMETOOLONG);
    ERR(symlink("t", n256), ENAMETOOLONG);
    ERR(rename(n255, n256), ENAMETOOLONG);
    ERR(link(n255, n256), ENAMETOOLONG);
    ERR(stat(n256, &(struct stat){0}), ENAMETOOLONG);
    OK(mkdir("d", 0755));
    snprintf(path, sizeof(path), "d/%s", n255);
    OK(rename(n255, path));
    EQ(count_dir("d"), 1);
    /* names with odd bytes */
    const char *odd[] = {"sp ace", "new\nline", "tab\t", "\xc3\xa9t\xc3\xa9", "-dash",
                         "..dots", "a:b;c", "\x01\x7f"};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        fd = open(odd[i], O_CREAT | O_WRONLY, 0644);
        TRUE(fd >= 0);
        if (fd >= 0)
            close(fd);
        TRUE(access(odd[i], F_OK) == 0);
    }
    EQ(count_dir("."), 1 + (int)(sizeof(odd) / sizeof(odd[0])));
}

static void t_xattr(void)
{
    char buf[256];
    ssize_t n;
    char big[4000];

    OK(write_file("f", "x", 1, 0644));
    if (setxattr("f", "user.probe", "v", 1, 0) < 0 && (errno == ENOTSUP || errno == EOPNOTSUPP)) {
        skip("user xattrs not supported here");
        return;
    }
    OK(removexattr("f", "user.probe"));
    OK(setxattr("f", "user.a", "hello", 5, 0));
    OK(setxattr("f", "user.empty", "", 0, 0));
    EQ(getxattr("f", "user.a", NULL, 0), 5);        /* size query */
    memset(buf, 0, sizeof(buf));
    EQ(getxattr("f", "user.a", buf, sizeof(buf)), 5);
    TRUE(memcmp(buf, "hello", 5) == 0);
    EQ(getxattr("f", "user.empty", buf, sizeof(buf)), 0);
    ERR(getxattr("f", "user.a", buf, 2), ERANGE);
    ERR(getxattr("f", "user.none", buf, sizeof(buf)), ENODATA);
    ERR(setxattr("f", "user.a", "x", 1, XATTR_CREATE), EEXIST);
    ERR(setxattr("f", "user.b", "x", 1, XATTR_REPLACE), ENODATA);
    OK(setxattr("f", "user.a", "bye", 3, XATTR_REPLACE));
    EQ(getxattr("f", "user.a", buf, sizeof(buf)), 3);
    TRUE(memcmp(buf, "bye", 3) == 0);
    /* list: "user.a\0user.empty\0" in any order */
    n = listxattr("f", NULL, 0);
    EQ(n, (long)(sizeof("user.a") + sizeof("user.empty")));
    n = listxattr("f", buf, sizeof(buf));
    EQ(n, (long)(sizeof("user.a") + sizeof("user.empty")));
    int has_a = 0, has_e = 0;
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1) {
        has_a |= !strcmp(buf + i, "user.a");
        has_e |= !strcmp(buf + i, "user.empty");
    }
    TRUE(has_a && has_e);
    ERR(listxattr("f", buf, 3), ERANGE);
    OK(removexattr("f", "user.a"));
    ERR(removexattr("f", "user.a"), ENODATA);
    ERR(getxattr("f", "user.a", buf, sizeof(buf)), ENODATA);
    /* binary values, larger values */
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)i;
    OK(setxattr("f", "user.big", big, sizeof(big), 0));
    char *back = malloc(sizeof(big));
    EQ(getxattr("f", "user.big", back, sizeof(big)), sizeof(big));
    TRUE(memcmp(back, big, sizeof(big)) == 0);
    free(back);
    /* on a directory, and on a symlink (user.* not allowed there) */
    OK(mkdir("d", 0755));
    OK(setxattr("d", "user.dir", "1", 1, 0));
    EQ(getxattr("d", "user.dir", buf, sizeof(buf)), 1);
    OK(symlink("f", "l"));
    ERR(lsetxattr("l", "user.x", "1", 1, 0), EPERM);
    /* xattrs follow the inode through rename and link */
    OK(rename("f", "g"));
    EQ(getxattr("g", "user.empty", buf, sizeof(buf)), 0);
    OK(link("g", "h"));
    EQ(getxattr("h", "user.big", NULL, 0), sizeof(big));
    /* setxattr changes ctime */
    struct stat a = xstat("g");
    tick();
    OK(setxattr("g", "user.c", "c", 1, 0));
    TRUE(ts_cmp(xstat("g").st_ctim, a.st_ctim) > 0);
}

static void t_flock(void)
{
    int a, b;

    OK(write_file("f", "x", 1, 0644));
    a = OK(open("f", O_RDWR));
    b = OK(open("f", O_RDWR));                      /* a second open file description */
    OK(flock(a, LOCK_EX | LOCK_NB));
    ERR(flock(b, LOCK_EX | LOCK_NB), EWOULDBLOCK);
    ERR(flock(b, LOCK_SH | LOCK_NB), EWOULDBLOCK);
    OK(flock(a, LOCK_UN));
    OK(flock(b, LOCK_SH | LOCK_NB));
    OK(flock(a, LOCK_SH | LOCK_NB));                /* shared + shared */
    ERR(flock(a, LOCK_EX | LOCK_NB), EWOULDBLOCK);  /* upgrade blocked by b */
    close(b);                                       /* close releases b's lock */
    /* FUSE sends RELEASE (which drops b's flock) asynchronously after close()
     * returns (docs/posix.md, FUSE limitations): allow it up to 5 s. */
    for (int i = 0; i < 500 && flock(a, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK; i++)
        usleep(10000);
    OK(flock(a, LOCK_EX | LOCK_NB));
    /* a forked child shares a's description and therefore the lock */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int c = open("f", O_RDWR);
        int r1 = flock(a, LOCK_EX | LOCK_NB);       /* same description: ok */
        int r2 = flock(c, LOCK_EX | LOCK_NB);       /* new description: blocked */
        _exit(r1 == 0 && r2 < 0 && errno == EWOULDBLOCK ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(a);
    b = OK(open("f", O_RDWR));
    OK(flock(b, LOCK_EX | LOCK_NB));                /* released by the last close */
    close(b);
}

/* In a child: try F_SETLK / F_GETLK on fd, write the results to a pipe. */
struct lk_res {
    int setlk_rc, setlk_errno;
    short getlk_type;
    pid_t getlk_pid;
    off_t getlk_start, getlk_len;
};

static struct lk_res lk_child(int fd, short type, off_t start, off_t len)
{
    struct lk_res res;
    int p[2];

    memset(&res, 0, sizeof(res));
    if (pipe(p) < 0)
        return res;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
        struct lk_res r;
        memset(&r, 0, sizeof(r));
        r.setlk_rc = fcntl(fd, F_GETLK, &fl);
        r.getlk_type = fl.l_type;
        r.getlk_pid = fl.l_pid;
        r.getlk_start = fl.l_start;
        r.getlk_len = fl.l_len;
        fl = (struct flock){.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
        r.setlk_rc = fcntl(fd, F_SETLK, &fl);
        r.setlk_errno = r.setlk_rc < 0 ? errno : 0;
        if (write(p[1], &r, sizeof(r)) != sizeof(r))
            _exit(1);
        _exit(0);
    }
    close(p[1]);
    if (read(p[0], &res, sizeof(res)) != sizeof(res))
        res.setlk_rc = -2;
    close(p[0]);
    waitpid(pid, NULL, 0);
    return res;
}

static void t_posix_locks(void)
{
    struct flock fl;
    struct lk_res r;
    int fd;

    OK(write_file("f", "0123456789", 10, 0644));
    fd = OK(open("f", O_RDWR));
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 100};
    OK(fcntl(fd, F_SETLK, &fl));
    fl = (struct flock){.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 200, .l_len = 100};
    OK(fcntl(fd, F_SETLK, &fl));

    r = lk_child(fd, F_WRLCK, 50, 10);              /* inside our write lock */
    EQ(r.setlk_rc, -1);
    TRUE(r.setlk_errno == EAGAIN || r.setlk_errno == EACCES);
    EQ(r.getlk_type, F_WRLCK);
    EQ(r.getlk_pid, getpid());
    EQ(r.getlk_start, 0);
    EQ(r.getlk_len, 100);
    r = lk_child(fd, F_WRLCK, 100, 100);            /* the gap [100,200) is free */
    EQ(r.setlk_rc, 0);
    EQ(r.getlk_type, F_UNLCK);
    r = lk_child(fd, F_RDLCK, 250, 10);             /* shared with our read lock */
    EQ(r.setlk_rc, 0);
    r = lk_child(fd, F_WRLCK, 250, 10);             /* but not exclusive */
    EQ(r.setlk_rc, -1);
    EQ(r.getlk_type, F_RDLCK);
    EQ(r.getlk_pid, getpid());
    /* our own F_GETLK never reports our own locks */
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    OK(fcntl(fd, F_GETLK, &fl));
    EQ(fl.l_type, F_UNLCK);
    /* unlocking the middle splits the range */
    fl = (struct flock){.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 40, .l_len = 20};
    OK(fcntl(fd, F_SETLK, &fl));
    r = lk_child(fd, F_WRLCK, 45, 5);
    EQ(r.setlk_rc, 0);
    r = lk_child(fd, F_WRLCK, 30, 20);
    EQ(r.setlk_rc, -1);
    /* closing ANY fd of the file drops the process's locks (POSIX) */
    int other = OK(open("f", O_RDONLY));
    close(other);
    r = lk_child(fd, F_WRLCK, 0, 0);
    EQ(r.setlk_rc, 0);
    EQ(r.getlk_type, F_UNLCK);
    /* whole-file lock to EOF and beyond (l_len = 0) */
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 0};
    OK(fcntl(fd, F_SETLK, &fl));
    r = lk_child(fd, F_RDLCK, 1000000, 1);
    EQ(r.setlk_rc, -1);
    EQ(r.getlk_len, 0);
    r = lk_child(fd, F_RDLCK, 0, 5);
    EQ(r.setlk_rc, 0);
    close(fd);
    /* OFD locks conflict between two descriptions in one process */
    int a = OK(open("f", O_RDWR)), b = OK(open("f", O_RDWR));
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    OK(fcntl(a, F_OFD_SETLK, &fl));
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
    ERR(fcntl(b, F_OFD_SETLK, &fl), EAGAIN);
    close(a);
    close(b);
}

static void on_alarm(int sig)
{
    (void)sig;
}

/* F_OFD_SETLK on fd, retried for up to 5 s while it fails with EAGAIN: FUSE
 * sends the RELEASE that drops a closed description's OFD locks a moment
 * after close() returns (docs/posix.md).  Returns fcntl's result. */
static int ofd_setlk_retry(int fd, short type)
{
    struct flock fl;
    int rc = -1;

    for (int i = 0; i < 500; i++) {
        fl = (struct flock){.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        rc = fcntl(fd, F_OFD_SETLK, &fl);
        if (rc == 0 || errno != EAGAIN)
            break;
        usleep(10000);
    }
    return rc;
}

/* OFD locks live as long as their open file description: not dropped by
 * closing a duplicate descriptor or by another close of the process, dropped
 * by the last close and when the holder exits. */
static void t_ofd_locks(void)
{
    struct flock fl;
    int a, b, c, st;
    pid_t pid;

    OK(write_file("f", "0123456789", 10, 0644));
    a = OK(open("f", O_RDWR));
    b = OK(open("f", O_RDWR));
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    OK(fcntl(a, F_OFD_SETLK, &fl));
    fl = (struct flock){.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    ERR(fcntl(b, F_OFD_SETLK, &fl), EAGAIN);
    /* closing a duplicate or another description of the same process keeps it */
    c = OK(dup(a));
    close(c);
    c = OK(open("f", O_RDONLY));
    close(c);
    usleep(100000);
    ERR(fcntl(b, F_OFD_SETLK, &fl), EAGAIN);
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    OK(fcntl(b, F_OFD_GETLK, &fl));
    EQ(fl.l_type, F_WRLCK);
    /* the last close of the description releases it */
    close(a);
    EQ(ofd_setlk_retry(b, F_WRLCK), 0);
    close(b);

    /* a process that takes an OFD lock and exits without closing */
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        int fd = open("f", O_RDWR);
        struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        _exit(fd >= 0 && fcntl(fd, F_OFD_SETLK, &l) == 0 ? 0 : 1);
    }
    waitpid(pid, &st, 0);
    TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    a = OK(open("f", O_RDWR));
    EQ(ofd_setlk_retry(a, F_WRLCK), 0);
    close(a);

    /* F_OFD_SETLKW waits for a holder that exits, and does not hang */
    int p[2];
    OK(pipe(p));
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        int fd = open("f", O_RDWR);
        struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        char ch = fcntl(fd, F_OFD_SETLK, &l) == 0 ? 'y' : 'n';
        if (write(p[1], &ch, 1) != 1)
            _exit(1);
        usleep(300000);
        _exit(0);                                   /* exits holding the lock */
    }
    close(p[1]);
    char ch = 0;
    EQ(read(p[0], &ch, 1), 1);
    close(p[0]);
    EQ(ch, 'y');
    a = OK(open("f", O_RDWR));
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    ERR(fcntl(a, F_OFD_SETLK, &fl), EAGAIN);
    struct sigaction sa = {.sa_handler = on_alarm}, old;
    sigaction(SIGALRM, &sa, &old);                  /* no SA_RESTART: a hang ends in EINTR */
    alarm(10);
    OK(fcntl(a, F_OFD_SETLKW, &fl));
    alarm(0);
    sigaction(SIGALRM, &old, NULL);
    waitpid(pid, &st, 0);
    close(a);
    /* and a POSIX lock of this process is still released by any close */
    a = OK(open("f", O_RDWR));
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    OK(fcntl(a, F_SETLK, &fl));
    b = OK(open("f", O_RDWR));
    OK(fcntl(b, F_OFD_GETLK, &fl));
    EQ(fl.l_type, F_WRLCK);
    c = OK(open("f", O_RDONLY));
    close(c);
    fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    OK(fcntl(b, F_OFD_SETLK, &fl));
    close(a);
    close(b);
}

/* The xattr calls on the descriptor of a removed directory: the xattr it
 * had (name, value) is still there, others can be set and removed (as on
 * ext4).  Skipped where user xattrs are not supported (xattr_ok 0). */
static void removed_dir_xattrs(int fd, const char *name, const char *value, int xattr_ok)
{
    char buf[256];
    ssize_t n;
    size_t vl = strlen(value);
    if (!xattr_ok)
        return;
    memset(buf, 0, sizeof(buf));
    EQ(fgetxattr(fd, name, buf, sizeof(buf)), (long)vl);
    TRUE(memcmp(buf, value, vl) == 0);
    ERR(fgetxattr(fd, "user.none", buf, sizeof(buf)), ENODATA);
    n = flistxattr(fd, NULL, 0);
    EQ(n, (long)strlen(name) + 1);
    n = flistxattr(fd, buf, sizeof(buf));
    EQ(n, (long)strlen(name) + 1);
    TRUE(n > 0 && strcmp(buf, name) == 0);
    OK(fsetxattr(fd, "user.after", "later", 5, 0));
    ERR(fsetxattr(fd, "user.after", "x", 1, XATTR_CREATE), EEXIST);
    ERR(fsetxattr(fd, "user.nope", "x", 1, XATTR_REPLACE), ENODATA);
    EQ(fgetxattr(fd, "user.after", NULL, 0), 5);
    EQ(fgetxattr(fd, "user.after", buf, sizeof(buf)), 5);
    TRUE(memcmp(buf, "later", 5) == 0);
    ERR(fgetxattr(fd, "user.after", buf, 2), ERANGE);
    EQ(flistxattr(fd, NULL, 0), (long)(strlen(name) + 1 + sizeof("user.after")));
    OK(fremovexattr(fd, "user.after"));
    ERR(fremovexattr(fd, "user.after"), ENODATA);
    ERR(fgetxattr(fd, "user.after", buf, sizeof(buf)), ENODATA);
    OK(fremovexattr(fd, name));
    EQ(flistxattr(fd, buf, sizeof(buf)), 0);
}

/* A directory removed (rmdir, or replaced by rename) while open keeps its
 * identity until the last close: fstat, fchmod, futimens and the xattr calls
 * work on the descriptor; it lists nothing and refuses new entries (ENOENT). */
static void t_open_dirs(void)
{
    struct stat st, st2;
    int fd, fd2, cwd, xattr_ok;

    OK(mkdir("d", 0755));
    xattr_ok = setxattr("d", "user.kept", "v1", 2, 0) == 0;
    if (!xattr_ok)
        TRUE(errno == ENOTSUP || errno == EOPNOTSUPP);
    fd = OK(open("d", O_RDONLY | O_DIRECTORY));
    OK(fstat(fd, &st));
    OK(rmdir("d"));
    removed_dir_xattrs(fd, "user.kept", "v1", xattr_ok);
    OK(fstat(fd, &st2));
    EQ(st2.st_ino, st.st_ino);
    TRUE(S_ISDIR(st2.st_mode));
    EQ(st2.st_nlink, 0);
    OK(fchmod(fd, 0700));
    OK(fstat(fd, &st2));
    EQ(st2.st_mode & 07777, 0700);
    struct timespec ts[2] = {{1000000000, 0}, {1000000000, 500}};
    OK(futimens(fd, ts));
    OK(fstat(fd, &st2));
    EQ(st2.st_mtim.tv_sec, 1000000000);
    ERR(openat(fd, "x", O_CREAT | O_WRONLY, 0644), ENOENT);
    ERR(mkdirat(fd, "x", 0755), ENOENT);
    fd2 = OK(dup(fd));
    DIR *dp = fdopendir(fd2);
    TRUE(dp != NULL);
    if (dp) {
        errno = 0;
        struct dirent *de = readdir(dp);           /* no entries, not even "." */
        TRUE(de == NULL);
        TRUE(errno == 0 || errno == ENOENT);
        closedir(dp);
    }
    /* the current directory removed under a process */
    cwd = OK(open(".", O_RDONLY | O_DIRECTORY));
    OK(fchdir(fd));
    OK(stat(".", &st2));
    EQ(st2.st_ino, st.st_ino);
    OK(fchdir(cwd));
    close(cwd);
    close(fd);

    /* a directory replaced by rename */
    OK(mkdir("a", 0755));
    OK(mkdir("b", 0751));
    if (xattr_ok)
        OK(setxattr("b", "user.old-b", "bb", 2, 0));
    fd = OK(open("b", O_RDONLY | O_DIRECTORY));
    OK(fstat(fd, &st));
    OK(rename("a", "b"));
    OK(fstat(fd, &st2));
    EQ(st2.st_ino, st.st_ino);
    EQ(st2.st_mode & 07777, 0751);
    EQ(st2.st_nlink, 0);
    TRUE(xstat("b").st_ino != st.st_ino);
    removed_dir_xattrs(fd, "user.old-b", "bb", xattr_ok);
    if (xattr_ok)           /* the new b has none of them */
        EQ(listxattr("b", NULL, 0), 0);
    close(fd);
    /* a live directory open here: rmdir refused, its xattrs stay in the engine */
    fd = OK(open("b", O_RDONLY | O_DIRECTORY));
    if (xattr_ok) {
        OK(mkdir("b/x", 0755));
        OK(setxattr("b", "user.live", "1", 1, 0));
        ERR(rmdir("b"), ENOTEMPTY);
        OK(fsetxattr(fd, "user.live", "2", 1, 0));
        char v = 0;
        EQ(getxattr("b", "user.live", &v, 1), 1);
        EQ(v, '2');
        OK(removexattr("b", "user.live"));
        OK(rmdir("b/x"));
    }
    close(fd);
    /* the same with renameat2(RENAME_NOREPLACE) refused: nothing changes */
    fd = OK(open("b", O_RDONLY | O_DIRECTORY));
    OK(mkdir("c", 0755));
    ERR(renameat2(AT_FDCWD, "c", AT_FDCWD, "b", RENAME_NOREPLACE), EEXIST);
    OK(fstat(fd, &st2));
    TRUE(st2.st_nlink >= 2);
    close(fd);
    OK(rmdir("b"));
    OK(rmdir("c"));
}

static void t_fallocate(void)
{
    char buf[8192];
    int fd;
    struct stat st;

    memset(buf, 'A', sizeof(buf));
    fd = OK(open("f", O_CREAT | O_RDWR, 0644));
    OK(fallocate(fd, 0, 0, 100000));
    EQ(xstat("f").st_size, 100000);
    TRUE(pread_is(fd, 0, NULL, 100000));
    OK(fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 300000));
    EQ(xstat("f").st_size, 100000);
    /* allocating inside the file keeps the data */
    EQ(pwrite(fd, buf, sizeof(buf), 0), sizeof(buf));
    OK(fallocate(fd, 0, 0, 50000));
    TRUE(pread_is(fd, 0, buf, sizeof(buf)));
    /* punch a hole in the middle of the data */
    OK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1000, 3000));
    TRUE(pread_is(fd, 0, buf, 1000));
    TRUE(pread_is(fd, 1000, NULL, 3000));
    TRUE(pread_is(fd, 4000, buf, sizeof(buf) - 4000));
    EQ(xstat("f").st_size, 100000);
    ERR(fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 10), EOPNOTSUPP);   /* needs KEEP_SIZE */
    /* zero range */
    if (g_fstype == TMPFS_MAGIC_) {
        skip("tmpfs has no FALLOC_FL_ZERO_RANGE");
    } else {
        OK(fallocate(fd, FALLOC_FL_ZERO_RANGE, 6000, 1000));
        TRUE(pread_is(fd, 4000, buf, 2000));
        TRUE(pread_is(fd, 6000, NULL, 1000));
        TRUE(pread_is(fd, 7000, buf, sizeof(buf) - 7000));
        OK(fallocate(fd, FALLOC_FL_ZERO_RANGE, 90000, 20000));   /* grows the file */
        EQ(xstat("f").st_size, 110000);
    }
    ERR(fallocate(fd, 0, 0, 0), EINVAL);
    ERR(fallocate(fd, 0, -1, 10), EINVAL);
    close(fd);
    fd = OK(open("f", O_RDONLY));
    ERR(fallocate(fd, 0, 0, 10), EBADF);
    OK(fstat(fd, &st));
    close(fd);
}

static void t_seek_data(void)
{
    char buf[4096];
    off_t h, d;
    const off_t mib = 1 << 20;
    int fd;

    memset(buf, 'D', sizeof(buf));
    fd = OK(open("sparse", O_CREAT | O_RDWR, 0644));
    EQ(pwrite(fd, buf, sizeof(buf), 0), sizeof(buf));
    EQ(pwrite(fd, buf, sizeof(buf), mib), sizeof(buf));
    OK(fsync(fd));
    EQ(lseek(fd, 0, SEEK_DATA), 0);
    h = lseek(fd, 0, SEEK_HOLE);
    TRUE(h >= 4096 && h < mib);
    if (h >= 4096 && h < mib) {
        d = lseek(fd, h, SEEK_DATA);
        TRUE(d > 4096 && d <= mib);
        TRUE(pread_is(fd, h, NULL, d - h));
    }
    h = lseek(fd, mib, SEEK_HOLE);
    EQ(h, mib + 4096);                              /* the implicit hole at EOF */
    ERR(lseek(fd, mib + 4096, SEEK_DATA), ENXIO);   /* at EOF */
    ERR(lseek(fd, mib + 100000, SEEK_DATA), ENXIO); /* past EOF */
    ERR(lseek(fd, mib + 100000, SEEK_HOLE), ENXIO);
    EQ(lseek(fd, 100, SEEK_DATA), 100);
    close(fd);
    /* a file that is one hole */
    fd = OK(open("empty", O_CREAT | O_RDWR, 0644));
    OK(ftruncate(fd, 10 * mib));
    ERR(lseek(fd, 0, SEEK_DATA), ENXIO);
    EQ(lseek(fd, 0, SEEK_HOLE), 0);
    close(fd);
}

static void t_copy_range(void)
{
    const size_t n = 3 * 1024 * 1024 + 123;
    char *buf = malloc(n);
    int in, out;
    loff_t off_in = 0, off_out = 0;
    size_t done = 0;

    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(i ^ (i >> 11));
    OK(write_file("src", buf, n, 0644));
    in = OK(open("src", O_RDONLY));
    out = OK(open("dst", O_CREAT | O_WRONLY, 0644));
    while (done < n) {
        ssize_t r = copy_file_range(in, &off_in, out, &off_out, n - done, 0);
        if (r <= 0) {
            report(0, __LINE__, "copy_file_range at %zu: %s", done,
                   r < 0 ? strerror(errno) : "returned 0");
            break;
        }
        done += (size_t)r;
    }
    EQ(done, n);
    close(out);
    out = OK(open("dst", O_RDONLY));
    EQ(xstat("dst").st_size, (long)n);
    TRUE(pread_is(out, 0, buf, n));
    close(out);
    /* copy into the middle of an existing file */
    out = OK(open("dst", O_WRONLY));
    off_in = 10;
    off_out = 1000;
    EQ(copy_file_range(in, &off_in, out, &off_out, 50, 0), 50);
    close(out);
    out = OK(open("dst", O_RDONLY));
    TRUE(pread_is(out, 1000, buf + 10, 50));
    TRUE(pread_is(out, 0, buf, 1000));
    close(out);
    close(in);
    free(buf);
}

static void t_unlinked_open(void)
{
    struct stat st;
    char buf[100];
    int fd, fd2;

    fd = OK(open("f", O_CREAT | O_RDWR, 0644));
    EQ(write(fd, "before", 6), 6);
    fd2 = OK(open("f", O_RDONLY));
    OK(unlink("f"));
    ERR(access("f", F_OK), ENOENT);
    OK(fstat(fd, &st));
    EQ(st.st_nlink, 0);
    EQ(write(fd, " after", 6), 6);
    EQ(pread(fd2, buf, sizeof(buf), 0), 12);
    TRUE(memcmp(buf, "before after", 12) == 0);
    OK(ftruncate(fd, 3));
    OK(fstat(fd2, &st));
    EQ(st.st_size, 3);
    OK(fchmod(fd, 0600));
    OK(fsync(fd));
    close(fd);
    EQ(pread(fd2, buf, sizeof(buf), 0), 3);         /* still open through fd2 */
    close(fd2);
    /* a new file with the same name is a different, empty file */
    fd = OK(open("f", O_CREAT | O_RDWR, 0644));
    OK(fstat(fd, &st));
    EQ(st.st_size, 0);
    close(fd);
    /* an unlinked directory that is still a cwd */
    OK(mkdir("d", 0755));
    int dfd = OK(open("d", O_RDONLY | O_DIRECTORY));
    OK(rmdir("d"));
    ERR(openat(dfd, "new", O_CREAT | O_WRONLY, 0644), ENOENT);
    close(dfd);
}

static void t_mmap(void)
{
    const size_t n = 3 * 4096 + 100;
    int fd = OK(open("f", O_CREAT | O_RDWR, 0644));
    char *p;

    OK(ftruncate(fd, n));
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    TRUE(p != MAP_FAILED);
    if (p == MAP_FAILED) {
        close(fd);
        return;
    }
    memset(p, 'M', n);
    memcpy(p + 5000, "mapped", 6);
    OK(msync(p, n, MS_SYNC));
    OK(munmap(p, n));
    close(fd);
    fd = OK(open("f", O_RDONLY));
    TRUE(pread_is(fd, 5000, "mapped", 6));
    TRUE(pread_is(fd, n - 1, "M", 1));
    /* a read-only private map sees the data written by write() */
    p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    TRUE(p != MAP_FAILED && memcmp(p + 5000, "mapped", 6) == 0);
    if (p != MAP_FAILED)
        munmap(p, n);
    close(fd);
}

static void t_statfs(void)
{
    struct statfs sf;
    struct statvfs sv;

    OK(statfs(".", &sf));
    TRUE(sf.f_bsize > 0);
    TRUE(sf.f_blocks > 0);
    TRUE(sf.f_bfree <= sf.f_blocks);
    TRUE(sf.f_bavail <= sf.f_bfree);
    TRUE(sf.f_ffree <= sf.f_files);
    EQ(sf.f_namelen, 255);
    OK(statvfs(".", &sv));
    TRUE(sv.f_frsize > 0);
    EQ(sv.f_namemax, 255);
    /* writing data lowers the free space (or leaves it unchanged for tiny
     * writes; never raises it).  On a file store the free space follows the
     * store's disk, which other processes on the machine also fill and empty:
     * measure around a write a few times, one clean measurement is enough. */
    char *buf = calloc(1, 8 << 20);
    memset(buf, 'q', 8 << 20);
    int lowered = 0;
    for (int i = 0; i < 5 && !lowered; i++) {
        struct statfs s1, s2;
        char name[16];
        snprintf(name, sizeof(name), "f%d", i);
        OK(statfs(".", &s1));
        OK(write_file(name, buf, 8 << 20, 0644));
        sync();
        OK(statfs(".", &s2));
        lowered = s2.f_bfree * s2.f_bsize <= s1.f_bfree * s1.f_bsize &&
                  s2.f_ffree <= s1.f_ffree;
    }
    free(buf);
    TRUE(lowered);
}

/* Data a file system may still buffer (written, not yet closed or fsync'ed) must
 * interact correctly with namespace and size changes made through other paths. */
static void t_buffered(void)
{
    char a[8192], buf[64];
    struct stat st;
    int fd, fd2;

    memset(a, 'A', sizeof(a));
    /* truncate by path while another fd holds unflushed writes */
    fd = OK(open("a", O_CREAT | O_RDWR, 0644));
    EQ(write(fd, a, 100), 100);
    OK(truncate("a", 0));
    EQ(xstat("a").st_size, 0);
    close(fd);
    EQ(xstat("a").st_size, 0);
    /* ftruncate through a second fd between two writes of the first */
    fd = OK(open("b", O_CREAT | O_RDWR, 0644));
    EQ(write(fd, a, sizeof(a)), sizeof(a));
    fd2 = OK(open("b", O_RDWR));
    OK(ftruncate(fd2, 10));
    close(fd2);
    EQ(pwrite(fd, "B", 1, 20), 1);
    close(fd);
    EQ(xstat("b").st_size, 21);
    fd = OK(open("b", O_RDONLY));
    TRUE(pread_is(fd, 0, a, 10));
    TRUE(pread_is(fd, 10, NULL, 10));
    TRUE(pread_is(fd, 20, "B", 1));
    close(fd);
    /* rename another file over one with unflushed writes */
    OK(write_file("d", "new", 3, 0644));
    fd = OK(open("c", O_CREAT | O_RDWR, 0644));
    EQ(write(fd, "old-data", 8), 8);
    OK(rename("d", "c"));
    close(fd);
    fd = OK(open("c", O_RDONLY));
    EQ(read(fd, buf, sizeof(buf)), 3);
    TRUE(memcmp(buf, "new", 3) == 0);
    close(fd);
    /* unlink with unflushed writes: nothing comes back at close */
    fd = OK(open("e", O_CREAT | O_RDWR, 0644));
    EQ(write(fd, a, sizeof(a)), sizeof(a));
    OK(unlink("e"));
    close(fd);
    ERR(access("e", F_OK), ENOENT);
    EQ(count_dir("."), 3);                          /* a b c */
    /* a second open sees the first one's unflushed data and size */
    fd = OK(open("f", O_CREAT | O_RDWR, 0644));
    EQ(pwrite(fd, a, 5000, 3000), 5000);
    fd2 = OK(open("f", O_RDONLY));
    OK(fstat(fd2, &st));
    EQ(st.st_size, 8000);
    TRUE(pread_is(fd2, 0, NULL, 3000));
    TRUE(pread_is(fd2, 3000, a, 5000));
    close(fd2);
    /* and so does a hard link's name */
    OK(link("f", "g"));
    EQ(pwrite(fd, "LINK", 4, 0), 4);
    fd2 = OK(open("g", O_RDONLY));
    TRUE(pread_is(fd2, 0, "LINK", 4));
    close(fd2);
    /* chmod through the fd, then more writes: mode and data both stay */
    OK(fchmod(fd, 0600));
    EQ(pwrite(fd, "MORE", 4, 8000), 4);
    close(fd);
    EQ(xstat("f").st_mode & 07777, 0600);
    EQ(xstat("f").st_size, 8004);
    /* st_blocks covers the data of a dense file (du, cp --sparse rely on it) */
    char *big = calloc(1, 1 << 20);
    memset(big, 'x', 1 << 20);
    OK(write_file("dense", big, 1 << 20, 0644));
    free(big);
    st = xstat("dense");
    TRUE((long long)st.st_blocks * 512 >= (1 << 20));
    /* readdir's d_ino is the inode number stat reports */
    DIR *d = opendir(".");
    struct dirent *de;
    int checked = 0;
    while (d && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, "dense")) {
            EQ(de->d_ino, st.st_ino);
            checked = 1;
        }
    }
    if (d)
        closedir(d);
    TRUE(checked);
}

/* renameat2(RENAME_WHITEOUT) (root: needs CAP_MKNOD): the file moves, the
 * old name becomes a whiteout (character device 0/0). */
static void t_whiteout(void)
{
    struct stat st, st2;

    if (getuid() != 0) {
        skip("needs root (CAP_MKNOD)");
        return;
    }
    OK(write_file("a", "data", 4, 0644));
    st = xstat("a");
    OK(renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_WHITEOUT));
    st2 = xstat("b");
    EQ(st2.st_ino, st.st_ino);
    EQ(st2.st_size, 4);
    st2 = xstat("a");
    TRUE(S_ISCHR(st2.st_mode));
    EQ(st2.st_rdev, makedev(0, 0));
    EQ(st2.st_mode & 07777, 0);
    /* over an existing target, and with RENAME_NOREPLACE */
    OK(write_file("c", "x", 1, 0644));
    OK(renameat2(AT_FDCWD, "b", AT_FDCWD, "c", RENAME_WHITEOUT));
    EQ(xstat("c").st_size, 4);
    TRUE(S_ISCHR(xstat("b").st_mode));
    ERR(renameat2(AT_FDCWD, "c", AT_FDCWD, "a", RENAME_WHITEOUT | RENAME_NOREPLACE), EEXIST);
    EQ(xstat("c").st_size, 4);
    OK(mkdir("d", 0755));
    OK(renameat2(AT_FDCWD, "c", AT_FDCWD, "d/e", RENAME_WHITEOUT | RENAME_NOREPLACE));
    TRUE(S_ISCHR(xstat("c").st_mode));
    EQ(xstat("d/e").st_size, 4);
    /* not with RENAME_EXCHANGE */
    ERR(renameat2(AT_FDCWD, "d/e", AT_FDCWD, "a", RENAME_WHITEOUT | RENAME_EXCHANGE), EINVAL);
    /* a directory moves the same way */
    OK(mkdir("dir", 0755));
    OK(renameat2(AT_FDCWD, "dir", AT_FDCWD, "dir2", RENAME_WHITEOUT));
    TRUE(S_ISDIR(xstat("dir2").st_mode));
    TRUE(S_ISCHR(xstat("dir").st_mode));
}

static void t_tmpfile(void)
{
    char path[64];
    int fd = open(".", O_TMPFILE | O_RDWR, 0600);

    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        skip("O_TMPFILE not supported here (%s)%s", strerror(errno),
             g_fstype == FUSE_SUPER_MAGIC ? "; FUSE needs a tmpfile handler (kernel 6.x)" : "");
        return;
    }
    TRUE(fd >= 0);
    if (fd < 0)
        return;
    EQ(write(fd, "tmp", 3), 3);
    EQ(count_dir("."), 0);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    OK(linkat(AT_FDCWD, path, AT_FDCWD, "named", AT_SYMLINK_FOLLOW));
    close(fd);
    EQ(xstat("named").st_size, 3);
    EQ(xstat("named").st_nlink, 1);
}

/*--- permission checks as uid 65534 ---*/

static void nobody_checks(void *arg)
{
    char buf[8];
    int fd;
    (void)arg;

    /* 0600 file of root */
    ERR(open("secret", O_RDONLY), EACCES);
    ERR(open("secret", O_WRONLY), EACCES);
    ERR(truncate("secret", 0), EACCES);
    /* 0644 file of root: read yes, write no */
    fd = OK(open("public", O_RDONLY));
    EQ(read(fd, buf, sizeof(buf)), 3);
    close(fd);
    ERR(open("public", O_WRONLY), EACCES);
    ERR(chmod("public", 0777), EPERM);
    ERR(chown("public", NOBODY, NOBODY), EPERM);
    ERR(utimensat(AT_FDCWD, "public", NULL, 0), EACCES);
    ERR(setxattr("public", "user.x", "1", 1, 0), EACCES);
    /* directory permissions */
    ERR(open("closed/x", O_CREAT | O_WRONLY, 0644), EACCES);
    ERR(mkdir("closed/y", 0755), EACCES);
    ERR(unlink("public"), EACCES);                  /* the test dir is root's 0755 */
    ERR(rename("public", "tmp/public"), EACCES);
    ERR(opendir("noread") ? 0 : -1, EACCES);
    EQ(access("noread/inside", F_OK), 0);           /* x without r: lookup works */
    ERR(access("nosearch/inside", F_OK), EACCES);   /* r without x: lookup fails */
    /* sticky 1777 dir: may create, may not delete root's file */
    fd = OK(open("tmp/mine", O_CREAT | O_WRONLY, 0644));
    close(fd);
    EQ(xstat("tmp/mine").st_uid, NOBODY);
    EQ(xstat("tmp/mine").st_gid, NOBODY);
    OK(mkdir("tmp/mydir", 0755));
    ERR2(unlink("tmp/roots"), EPERM, EACCES);
    ERR2(rename("tmp/roots", "tmp/stolen"), EPERM, EACCES);
    ERR2(rename("tmp/mine", "tmp/roots"), EPERM, EACCES);
    OK(rename("tmp/mine", "tmp/mine2"));
    OK(unlink("tmp/mine2"));
    /* setgid dir: new files get the dir's group, new dirs keep S_ISGID */
    fd = OK(open("sgid/file", O_CREAT | O_WRONLY, 0644));
    close(fd);
    EQ(xstat("sgid/file").st_gid, 4242);
    OK(mkdir("sgid/sub", 0755));
    EQ(xstat("sgid/sub").st_gid, 4242);
    TRUE(xstat("sgid/sub").st_mode & S_ISGID);
    /* chown of one's own file to another user */
    ERR(chown("tmp/mydir", 0, -1), EPERM);
    ERR(chown("tmp/mydir", -1, 0), EPERM);          /* not a member of group 0 */
    OK(chown("tmp/mydir", -1, NOBODY));             /* own group: ok */
    /* chmod of one's own file; setting S_ISGID for a foreign group drops it */
    OK(chmod("sgid/file", 02755));
    EQ(xstat("sgid/file").st_mode & 07777, 0755);
    /* write clears S_ISUID of the own file */
    fd = OK(open("tmp/suid", O_CREAT | O_WRONLY, 0755));
    close(fd);
    OK(chmod("tmp/suid", 04755));
    EQ(xstat("tmp/suid").st_mode & 07777, 04755);
    fd = OK(open("tmp/suid", O_WRONLY));
    EQ(write(fd, "x", 1), 1);
    close(fd);
    EQ(xstat("tmp/suid").st_mode & 07777, 0755);
    /* a writable file of root that is setuid: writing clears the bit too */
    fd = OK(open("rootsuid", O_WRONLY));
    EQ(write(fd, "x", 1), 1);
    close(fd);
    EQ(xstat("rootsuid").st_mode & S_ISUID, 0);
    /* the same through a write-only O_APPEND descriptor, which the mounter
     * opens with direct I/O (the kernel then leaves the clearing to it) */
    OK(chmod("tmp/suid", 06775));
    fd = OK(open("tmp/suid", O_WRONLY | O_APPEND));
    EQ(write(fd, "x", 1), 1);
    close(fd);
    EQ(xstat("tmp/suid").st_mode & 07777, 0775);
    OK(chmod("tmp/suid", 02745));       /* S_ISGID without group-execute, own group: kept */
    fd = OK(open("tmp/suid", O_WRONLY | O_APPEND));
    EQ(write(fd, "x", 1), 1);
    close(fd);
    EQ(xstat("tmp/suid").st_mode & 07777, 02745);
    fd = OK(open("rootsuid2", O_WRONLY | O_APPEND));
    EQ(write(fd, "x", 1), 1);
    close(fd);
    EQ(xstat("rootsuid2").st_mode & 07777, 0777);
    /* utimensat(NULL) needs write access only; explicit times need ownership */
    OK(utimensat(AT_FDCWD, "rootsuid", NULL, 0));
    struct timespec ts[2] = {{1, 0}, {1, 0}};
    ERR(utimensat(AT_FDCWD, "rootsuid", ts, 0), EPERM);
    /* device nodes need CAP_MKNOD */
    ERR(mknod("tmp/dev", S_IFCHR | 0600, makedev(1, 3)), EPERM);
}

static void t_perms(void)
{
    int fd;

    if (geteuid() != 0) {
        skip("needs root (switches to uid %d)", NOBODY);
        return;
    }
    OK(write_file("secret", "top", 3, 0600));
    OK(write_file("public", "pub", 3, 0644));
    OK(mkdir("closed", 0755));
    OK(mkdir("noread", 0711));
    OK(write_file("noread/inside", "", 0, 0644));
    OK(mkdir("nosearch", 0744));
    OK(write_file("nosearch/inside", "", 0, 0644));
    OK(mkdir("tmp", 0777));
    OK(chmod("tmp", 01777));
    OK(write_file("tmp/roots", "root", 4, 0666));
    OK(mkdir("sgid", 0777));
    OK(chown("sgid", 0, 4242));
    OK(chmod("sgid", 02777));
    OK(write_file("rootsuid", "", 0, 0666));
    OK(chmod("rootsuid", 04777));
    OK(write_file("rootsuid2", "", 0, 0666));
    OK(chmod("rootsuid2", 06777));
    as_nobody(nobody_checks, NULL);
    /* root bypasses the mode bits */
    fd = OK(open("tmp/roots", O_RDONLY));
    close(fd);
    EQ(xstat("tmp/roots").st_size, 4);
    /* root may delete in a sticky dir */
    OK(unlink("tmp/roots"));
}

/*------------------------------ driver ------------------------------*/

struct test {
    const char *name;
    void (*fn)(void);
};

static const struct test g_tests[] = {
    {"open", t_open},           {"rw", t_rw},
    {"truncate", t_truncate},   {"stat", t_stat},
    {"utimens", t_utimens},     {"mknod", t_mknod},
    {"dirs", t_dirs},           {"readdir", t_readdir},
    {"rename", t_rename},       {"link", t_link},
    {"symlink", t_symlink},     {"names", t_names},
    {"xattr", t_xattr},         {"flock", t_flock},
    {"posix_locks", t_posix_locks}, {"ofd_locks", t_ofd_locks},
    {"open_dirs", t_open_dirs},
    {"fallocate", t_fallocate},
    {"seek_data", t_seek_data}, {"copy_range", t_copy_range},
    {"unlinked_open", t_unlinked_open}, {"mmap", t_mmap},
    {"statfs", t_statfs},       {"buffered", t_buffered},
    {"tmpfile", t_tmpfile},     {"whiteout", t_whiteout},     {"perms", t_perms},
};

static int selected(const char *list, const char *name)
{
    size_t n = strlen(name);

    if (!list)
        return 1;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n))
            return 1;
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: keg_syscalls [-q] [-l] [-t TEST[,TEST...]] DIR\n");
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    const char *dir;
    struct statfs sf;
    int opt, root_fd;
    size_t ntests = sizeof(g_tests) / sizeof(g_tests[0]);

    while ((opt = getopt(argc, argv, "qlt:h")) != -1) {
        switch (opt) {
        case 'q':
            g_quiet = 1;
            break;
        case 't':
            only = optarg;
            break;
        case 'l':
            for (size_t i = 0; i < ntests; i++)
                printf("%s\n", g_tests[i].name);
            return 0;
        default:
            usage();
            return 2;
        }
    }
    if (optind != argc - 1) {
        usage();
        return 2;
    }
    dir = argv[optind];
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    umask(022);
    if (statfs(dir, &sf) < 0) {
        fprintf(stderr, "keg_syscalls: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    g_fstype = (long)sf.f_type;
    root_fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (root_fd < 0) {
        fprintf(stderr, "keg_syscalls: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    printf("keg_syscalls on %s (f_type 0x%lx%s), uid %d\n", dir, g_fstype,
           g_fstype == FUSE_SUPER_MAGIC ? ", FUSE" : "", (int)geteuid());
    for (size_t i = 0; i < ntests; i++) {
        char sub[64];
        if (!selected(only, g_tests[i].name))
            continue;
        g_test = g_tests[i].name;
        snprintf(sub, sizeof(sub), "t_%s.%d", g_tests[i].name, (int)getpid());
        if (mkdirat(root_fd, sub, 0755) < 0 || fchdir(root_fd) < 0 || chdir(sub) < 0) {
            report(0, __LINE__, "cannot set up %s/%s: %s", dir, sub, strerror(errno));
            continue;
        }
        int before = g_fail;
        g_tests[i].fn();
        if (!g_quiet || g_fail != before)
            printf("---- %s: %s\n", g_test, g_fail == before ? "ok" : "FAILED");
    }
    printf("keg_syscalls: %d passed, %d failed, %d skipped\n", g_pass, g_fail, g_skip);
    close(root_fd);
    return g_fail ? 1 : 0;
}
