/* cmd_bench.c -- `kegfs bench [OPTIONS] PATH`: a quick self-check of the speed of a mount
 * (or of any directory), run by a user on their own volume.
 *
 * In a new directory PATH/.kegfs-bench-XXXXXX (removed at the end, also after an error or
 * an interrupt), one after the other:
 *   big write   one file of --size bytes written in 1 MiB write()s, fsync, close
 *   big read    the same file read back in 1 MiB read()s after posix_fadvise(DONTNEED) of
 *               this file (its pages leave the kernel page cache: the read reaches the
 *               file system), every byte checked
 *   small write --files files of --small-size bytes: open(O_CREAT|O_EXCL), write, close
 *   small read  each of them: open, read, check, close
 *   stat        fstatat of each of them
 *   unlink      unlink of each of them
 * The content is pseudo-random (incompressible) and a function of the position, so a read
 * checks what was written without keeping a copy.  A table on stdout gives per test the
 * size, the operations, the seconds and the rate (MiB/s, files/s or ops/s); a progress bar
 * (mnt_progress) runs on stderr when it is a terminal.  Any error (open, short write, I/O
 * error, wrong data) stops the run with its message and exit status 1.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "bench"
#include "keg/log.h"
#include "keg/mem.h"

#include "mnt_i.h"

enum { OPT_SIZE = 0x2301, OPT_FILES, OPT_SMALL_SIZE };

#define BENCH_BLOCK   (1u << 20)
#define BENCH_NAME_MAX 64

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs bench [OPTIONS] PATH\n"
        "\n"
        "Measure a mount (or any directory) from the application's side: in a new\n"
        "directory PATH/.kegfs-bench-XXXXXX, write one big file in 1 MiB blocks (fsync\n"
        "included), read it back after dropping its cached pages, then create, read,\n"
        "stat and unlink many small files.  Every byte read is checked.  Everything\n"
        "created is removed at the end.\n"
        "\n"
        "Options:\n"
        "      --size SIZE          size of the big file (default 256M)\n"
        "      --files N            number of small files (default 1000)\n"
        "      --small-size SIZE    size of each small file (default 4K; 0: empty files)\n"
        MNT_PROGRESS_HELP
        MNT_COMMON_HELP
        "\n"
        "Output (standard output): one table row per test,\n"
        "  TEST  SIZE  OPS  SECONDS  RATE UNIT\n"
        "with UNIT MiB/s (big file), files/s or ops/s.\n"
        "Exit status: 0 every test passed, 1 an error (the message names the file and\n"
        "the call), 2 usage error.\n");
}

static volatile sig_atomic_t bench_stop;

static void bench_on_signal(int sig)
{
    KEG_UNUSED(sig);
    bench_stop = 1;
}

static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Fill buf (len bytes, a multiple of 8) with the content at byte offset off of file id. */
static void bench_fill(uint64_t *buf, size_t len, uint64_t id, uint64_t off)
{
    for (size_t i = 0; i < len / 8; i++) {
        uint64_t x = (id + 1) * 0x9e3779b97f4a7c15ull ^ (off / 8 + i) * 0xbf58476d1ce4e5b9ull;
        x ^= x >> 31;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 29;
        buf[i] = x;
    }
}

struct bench_row {
    const char *test;
    char        size[48];
    uint64_t    ops;
    double      secs;
    double      rate;
    const char *unit;
};

struct bench {
    const char         *dir;        /* the work directory */
    int                 dfd;
    struct mnt_progress bar;
    uint64_t            size;       /* big file bytes */
    uint64_t            files;      /* small files */
    uint64_t            small;      /* bytes per small file */
    uint64_t           *buf;        /* BENCH_BLOCK bytes */
    uint64_t           *want;       /* BENCH_BLOCK bytes */
    struct bench_row    rows[6];
    int                 nrows;
    int                 big_made;
    uint64_t            small_made; /* small files that exist */
};

static int bench_fail(struct bench *b, const char *call, const char *name, int err)
{
    mnt_progress_clear(&b->bar);
    if (err)
        mnt_error("bench: %s %s/%s: %s", call, b->dir, name, strerror(err));
    else
        mnt_error("bench: %s %s/%s", call, b->dir, name);
    return 1;
}

static int bench_interrupted(struct bench *b)
{
    if (!bench_stop)
        return 0;
    mnt_progress_clear(&b->bar);
    mnt_error("bench: interrupted; removing %s", b->dir);
    return 1;
}

static void bench_row(struct bench *b, const char *test, const char *size, uint64_t ops,
                      double secs, double rate, const char *unit)
{
    struct bench_row *r = &b->rows[b->nrows++];
    r->test = test;
    snprintf(r->size, sizeof(r->size), "%s", size);
    r->ops = ops;
    r->secs = secs;
    r->rate = rate;
    r->unit = unit;
}

/* Write the whole buffer (a FUSE write may be short). */
static int bench_write_all(int fd, const void *p, size_t len)
{
    const char *c = p;
    while (len > 0) {
        ssize_t n = write(fd, c, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        if (n == 0)
            return EIO;
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read exactly len bytes; *got is what was read before EOF. */
static int bench_read_all(int fd, void *p, size_t len, size_t *got)
{
    char *c = p;
    *got = 0;
    while (*got < len) {
        ssize_t n = read(fd, c + *got, len - *got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        if (n == 0)
            break;
        *got += (size_t)n;
    }
    return 0;
}

static int bench_big(struct bench *b)
{
    char sz[32];
    uint64_t blocks = (b->size + BENCH_BLOCK - 1) / BENCH_BLOCK;
    const char *name = "big";

    mnt_fmt_size(b->size, sz, sizeof(sz));
    mnt_progress_start(&b->bar, "big file write", blocks, b->size);
    double t0 = bench_now();
    int fd = openat(b->dfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0)
        return bench_fail(b, "create", name, errno);
    b->big_made = 1;
    for (uint64_t i = 0; i < blocks; i++) {
        size_t len = (size_t)KEG_MIN((uint64_t)BENCH_BLOCK, b->size - i * BENCH_BLOCK);
        bench_fill(b->buf, BENCH_BLOCK, 0, i * BENCH_BLOCK);
        int err = bench_write_all(fd, b->buf, len);
        if (err) {
            close(fd);
            return bench_fail(b, "write", name, err);
        }
        mnt_progress_add(&b->bar, 1, len);
        if (bench_interrupted(b)) {
            close(fd);
            return 1;
        }
    }
    if (fsync(fd) < 0) {
        int err = errno;
        close(fd);
        return bench_fail(b, "fsync", name, err);
    }
    if (close(fd) < 0)
        return bench_fail(b, "close", name, errno);
    double secs = bench_now() - t0;
    mnt_progress_finish(&b->bar);
    bench_row(b, "big file write (fsync)", sz, blocks, secs,
              (double)b->size / (1 << 20) / (secs > 0 ? secs : 1e-9), "MiB/s");

    mnt_progress_start(&b->bar, "big file read", blocks, b->size);
    t0 = bench_now();
    fd = openat(b->dfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bench_fail(b, "open", name, errno);
    /* This file's pages leave the page cache: the reads below reach the file system. */
    int prc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (prc) {
        close(fd);
        return bench_fail(b, "posix_fadvise(DONTNEED)", name, prc);
    }
    for (uint64_t i = 0; i < blocks; i++) {
        size_t len = (size_t)KEG_MIN((uint64_t)BENCH_BLOCK, b->size - i * BENCH_BLOCK);
        size_t got;
        int err = bench_read_all(fd, b->buf, len, &got);
        if (err) {
            close(fd);
            return bench_fail(b, "read", name, err);
        }
        if (got != len) {
            close(fd);
            mnt_progress_clear(&b->bar);
            mnt_error("bench: read %s/%s: the file ends at %llu bytes, %llu were written",
                      b->dir, name, (unsigned long long)(i * BENCH_BLOCK + got),
                      (unsigned long long)b->size);
            return 1;
        }
        bench_fill(b->want, BENCH_BLOCK, 0, i * BENCH_BLOCK);
        if (memcmp(b->buf, b->want, len) != 0) {
            size_t k = 0;
            const unsigned char *x = (const unsigned char *)b->buf;
            const unsigned char *y = (const unsigned char *)b->want;
            while (k < len && x[k] == y[k])
                k++;
            close(fd);
            mnt_progress_clear(&b->bar);
            mnt_error("bench: read %s/%s: wrong data at byte %llu (not what was written)",
                      b->dir, name, (unsigned long long)(i * BENCH_BLOCK + k));
            return 1;
        }
        mnt_progress_add(&b->bar, 1, len);
        if (bench_interrupted(b)) {
            close(fd);
            return 1;
        }
    }
    close(fd);
    secs = bench_now() - t0;
    mnt_progress_finish(&b->bar);
    bench_row(b, "big file read (uncached)", sz, blocks, secs,
              (double)b->size / (1 << 20) / (secs > 0 ? secs : 1e-9), "MiB/s");
    if (unlinkat(b->dfd, name, 0) < 0)
        return bench_fail(b, "unlink", name, errno);
    b->big_made = 0;
    return 0;
}

static void bench_small_name(char *buf, uint64_t i)
{
    snprintf(buf, BENCH_NAME_MAX, "s%06llu", (unsigned long long)i);
}

/* One small-file phase: 0 write, 1 read, 2 stat, 3 unlink. */
static int bench_small(struct bench *b, int phase)
{
    static const char *const labels[] = {"small file write", "small file read", "stat",
                                         "unlink"};
    static const char *const tests[] = {"small files create+write", "small files read",
                                        "stat", "small files unlink"};
    char name[BENCH_NAME_MAX];
    char sz[32], size[48];
    size_t len = (size_t)b->small;

    mnt_progress_start(&b->bar, labels[phase], b->files, phase < 2 ? b->files * b->small : 0);
    double t0 = bench_now();
    for (uint64_t i = 0; i < b->files; i++) {
        bench_small_name(name, i);
        if (phase == 0) {
            int fd = openat(b->dfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
            if (fd < 0)
                return bench_fail(b, "create", name, errno);
            b->small_made = i + 1;
            bench_fill(b->buf, (len + 7) & ~(size_t)7, i + 1, 0);
            int err = len ? bench_write_all(fd, b->buf, len) : 0;
            if (err) {
                close(fd);
                return bench_fail(b, "write", name, err);
            }
            if (close(fd) < 0)
                return bench_fail(b, "close", name, errno);
        } else if (phase == 1) {
            int fd = openat(b->dfd, name, O_RDONLY | O_CLOEXEC);
            size_t got;
            if (fd < 0)
                return bench_fail(b, "open", name, errno);
            /* one byte more than written: the file must end there */
            int err = bench_read_all(fd, b->buf, len + 1, &got);
            close(fd);
            if (err)
                return bench_fail(b, "read", name, err);
            bench_fill(b->want, (len + 7) & ~(size_t)7, i + 1, 0);
            if (got != len || memcmp(b->buf, b->want, len) != 0)
                return bench_fail(b, "read: not the bytes written to", name, 0);
        } else if (phase == 2) {
            struct stat st;
            if (fstatat(b->dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return bench_fail(b, "stat", name, errno);
            if ((uint64_t)st.st_size != b->small)
                return bench_fail(b, "stat: wrong size of", name, 0);
        } else {
            if (unlinkat(b->dfd, name, 0) < 0)
                return bench_fail(b, "unlink", name, errno);
        }
        mnt_progress_add(&b->bar, 1, phase < 2 ? len : 0);
        if (bench_interrupted(b))
            return 1;
    }
    double secs = bench_now() - t0;
    if (phase == 3)
        b->small_made = 0;
    mnt_progress_finish(&b->bar);
    mnt_fmt_size(b->small, sz, sizeof(sz));
    if (phase < 2)
        snprintf(size, sizeof(size), "%llu x %s", (unsigned long long)b->files, sz);
    else
        snprintf(size, sizeof(size), "-");
    bench_row(b, tests[phase], size, b->files, secs,
              (double)b->files / (secs > 0 ? secs : 1e-9), phase < 2 ? "files/s" : "ops/s");
    return 0;
}

/* Remove what this run made (after an error too); 1 if something stayed. */
static int bench_cleanup(struct bench *b)
{
    char name[BENCH_NAME_MAX];
    int left = 0;

    if (b->big_made && unlinkat(b->dfd, "big", 0) < 0 && errno != ENOENT)
        left = 1;
    for (uint64_t i = 0; i < b->small_made; i++) {
        bench_small_name(name, i);
        if (unlinkat(b->dfd, name, 0) < 0 && errno != ENOENT)
            left = 1;
    }
    close(b->dfd);
    if (rmdir(b->dir) < 0) {
        mnt_error("bench: cannot remove %s: %s", b->dir, strerror(errno));
        return 1;
    }
    return left;
}

int mnt_cmd_bench(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        MNT_PROGRESS_LONGOPT,
        {"size", required_argument, NULL, OPT_SIZE},
        {"files", required_argument, NULL, OPT_FILES},
        {"small-size", required_argument, NULL, OPT_SMALL_SIZE},
        {NULL, 0, NULL, 0},
    };
    struct bench b;
    struct stat st;
    char *end;
    int opt;

    memset(&b, 0, sizeof(b));
    b.size = 256ull << 20;
    b.files = 1000;
    b.small = 4096;
    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            usage(stdout);
            return 0;
        case OPT_SIZE:
            if (mnt_parse_size(optarg, &b.size) != 0 || b.size == 0) {
                mnt_error("--size: '%s' is not a size (e.g. 64M, 1G)", optarg);
                return 2;
            }
            break;
        case OPT_FILES:
            errno = 0;
            b.files = strtoull(optarg, &end, 10);
            if (errno || *end || optarg[0] == '-' || b.files == 0 || b.files > 1000000) {
                mnt_error("--files: '%s' is not a number from 1 to 1000000", optarg);
                return 2;
            }
            break;
        case OPT_SMALL_SIZE:
            if (mnt_parse_size(optarg, &b.small) != 0 || b.small > BENCH_BLOCK - 8) {
                mnt_error("--small-size: '%s' is not a size below 1M (e.g. 4K)", optarg);
                return 2;
            }
            break;
        default:
            return mnt_usage_error("bench", argc, argv);
        }
    }
    if (optind != argc - 1) {
        mnt_error("bench needs exactly one PATH, a directory (see 'kegfs bench --help')");
        return 2;
    }
    const char *path = argv[optind];
    mnt_open_log_file();
    if (stat(path, &st) < 0) {
        mnt_error("bench: %s: %s", path, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        mnt_error("bench: %s is not a directory", path);
        return 1;
    }
    char *dir = keg_asprintf("%s/.kegfs-bench-XXXXXX", path);
    if (!dir || !mkdtemp(dir)) {
        mnt_error("bench: cannot create a directory in %s: %s", path, strerror(errno));
        keg_free(dir);
        return 1;
    }
    b.dir = dir;
    b.dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    b.buf = keg_malloc(BENCH_BLOCK);
    b.want = keg_malloc(BENCH_BLOCK);
    if (b.dfd < 0 || !b.buf || !b.want) {
        mnt_error("bench: %s: %s", dir, b.dfd < 0 ? strerror(errno) : "out of memory");
        if (b.dfd >= 0)
            close(b.dfd);
        rmdir(dir);
        keg_free(b.buf);
        keg_free(b.want);
        keg_free(dir);
        return 1;
    }

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = bench_on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    mnt_progress_init(&b.bar, stderr, MNT_PROGRESS_AUTO);
    int status = bench_big(&b);
    for (int phase = 0; phase < 4 && !status; phase++)
        status = bench_small(&b, phase);
    mnt_progress_clear(&b.bar);
    if (bench_cleanup(&b))
        status = 1;

    printf("%-26s %16s %8s %9s %12s\n", "test", "size", "ops", "seconds", "rate");
    for (int i = 0; i < b.nrows; i++) {
        const struct bench_row *r = &b.rows[i];
        printf("%-26s %16s %8llu %9.3f %12.1f %s\n", r->test, r->size,
               (unsigned long long)r->ops, r->secs, r->rate, r->unit);
    }
    mnt_progress_summary(&b.bar, stdout, "bench of %s: %s", path,
                         status ? "FAILED (see the error above)" : "all tests passed");
    mnt_progress_destroy(&b.bar);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    keg_free(b.buf);
    keg_free(b.want);
    keg_free(dir);
    return status;
}
