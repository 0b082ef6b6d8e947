/* fsops.c -- latency of single metadata operations through a mounted file system
 * (`fsops [-n N] [-p PREFIX] OP DIR`), for bench/redis_calls.sh.
 *
 * DESIGN
 * Each OP runs N iterations on names relative to an open directory fd (openat and
 * friends), so only the last path component is resolved and nothing but the operation
 * under test reaches the file system.  Every iteration is timed with CLOCK_MONOTONIC;
 * the result line gives the median, the 99th percentile, the mean and the total:
 *
 *   op=create n=2000 median_us=180.2 p99_us=410.7 mean_us=201.5 total_s=0.403012
 *
 * Ops (names are PREFIX + letter + index; a phase uses the names the previous one left):
 *   create  open(f<i>, O_CREAT|O_EXCL|O_WRONLY) + close      (lookup of a new name + create)
 *   rename  rename(f<i>, g<i>)
 *   stat    fstatat(g<i>)                                    (one path lookup + getattr)
 *   readdir one opendir + readdir of the whole directory (N names after create or rename),
 *           timed as one unit: n is the number of entries read, median_us = p99_us =
 *           mean_us the time per entry
 *   fstat   fstat() of one open file N times                 (getattr only)
 *   unlink  unlink(g<i>)
 *   pair    create t<i> + close + rename(t<i>, p<i>): the write-then-rename idiom, timed
 *           as one unit
 *   clean   unlink p<i> (untimed clean-up of `pair`)
 *   all     create, rename, stat, fstat, unlink, pair, clean
 * Exit status: 0 ok, 1 an operation failed (errno printed), 2 usage.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "keg/mem.h"

#define FSOPS_NAME_MAX 256

struct fsops_run {
    int         dfd;      /* the directory under test */
    long        n;        /* iterations */
    const char *prefix;   /* name prefix, so that runs do not collide */
    double     *us;       /* n samples, microseconds; OWNERSHIP: main, keg_free */
};

static double fsops_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void fsops_name(char *buf, const struct fsops_run *r, char kind, long i)
{
    snprintf(buf, FSOPS_NAME_MAX, "%s%c%06ld", r->prefix, kind, i);
}

static int fsops_cmp(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fsops_report(const char *op, struct fsops_run *r)
{
    double sum = 0;
    for (long i = 0; i < r->n; i++)
        sum += r->us[i];
    qsort(r->us, (size_t)r->n, sizeof(r->us[0]), fsops_cmp);
    long p99 = (r->n * 99 + 99) / 100 - 1;   /* nearest-rank */
    if (p99 >= r->n)
        p99 = r->n - 1;
    double median = (r->n % 2) ? r->us[r->n / 2]
                               : (r->us[r->n / 2 - 1] + r->us[r->n / 2]) / 2;
    printf("op=%s n=%ld median_us=%.1f p99_us=%.1f mean_us=%.1f total_s=%.6f\n", op, r->n,
           median, r->us[p99], sum / (double)r->n, sum / 1e6);
    fflush(stdout);
}

static int fsops_fail(const char *what, const char *name)
{
    fprintf(stderr, "fsops: %s %s: %s\n", what, name, strerror(errno));
    return 1;
}

static int fsops_create(struct fsops_run *r, char kind, long i, char *name)
{
    fsops_name(name, r, kind, i);
    int fd = openat(r->dfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0)
        return fsops_fail("create", name);
    if (close(fd) < 0)
        return fsops_fail("close", name);
    return 0;
}

static int fsops_rename(struct fsops_run *r, char from, char to, long i)
{
    char a[FSOPS_NAME_MAX], b[FSOPS_NAME_MAX];
    fsops_name(a, r, from, i);
    fsops_name(b, r, to, i);
    if (renameat(r->dfd, a, r->dfd, b) < 0)
        return fsops_fail("rename", a);
    return 0;
}

/* readdir: list the whole directory once through a fresh descriptor. */
static int fsops_readdir(struct fsops_run *r)
{
    double t0 = fsops_now_us();
    int fd = openat(r->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fsops_fail("open", ".");
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return fsops_fail("fdopendir", ".");
    }
    long n = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    }
    int err = errno;
    closedir(d);
    if (err) {
        errno = err;
        return fsops_fail("readdir", ".");
    }
    double us = fsops_now_us() - t0;
    double per = n ? us / (double)n : us;
    printf("op=readdir n=%ld median_us=%.1f p99_us=%.1f mean_us=%.1f total_s=%.6f\n", n, per,
           per, per, us / 1e6);
    fflush(stdout);
    return 0;
}

/* Run one op over all iterations; untimed ops return without a report line. */
static int fsops_op(struct fsops_run *r, const char *op)
{
    char name[FSOPS_NAME_MAX];
    struct stat st;
    int fd = -1;

    if (!strcmp(op, "readdir"))
        return fsops_readdir(r);

    if (!strcmp(op, "fstat")) {
        fsops_name(name, r, 'g', 0);
        fd = openat(r->dfd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return fsops_fail("open", name);
    }
    for (long i = 0; i < r->n; i++) {
        int rc = 0;
        double t0 = fsops_now_us();
        if (!strcmp(op, "create")) {
            rc = fsops_create(r, 'f', i, name);
        } else if (!strcmp(op, "rename")) {
            rc = fsops_rename(r, 'f', 'g', i);
        } else if (!strcmp(op, "stat")) {
            fsops_name(name, r, 'g', i);
            if (fstatat(r->dfd, name, &st, 0) < 0)
                rc = fsops_fail("stat", name);
        } else if (!strcmp(op, "fstat")) {
            if (fstat(fd, &st) < 0)
                rc = fsops_fail("fstat", name);
        } else if (!strcmp(op, "unlink")) {
            fsops_name(name, r, 'g', i);
            if (unlinkat(r->dfd, name, 0) < 0)
                rc = fsops_fail("unlink", name);
        } else if (!strcmp(op, "pair")) {
            rc = fsops_create(r, 't', i, name);
            if (!rc)
                rc = fsops_rename(r, 't', 'p', i);
        } else if (!strcmp(op, "clean")) {
            fsops_name(name, r, 'p', i);
            if (unlinkat(r->dfd, name, 0) < 0)
                rc = fsops_fail("unlink", name);
        } else {
            fprintf(stderr, "fsops: unknown op '%s'\n", op);
            return 2;
        }
        if (rc) {
            if (fd >= 0)
                close(fd);
            return rc;
        }
        r->us[i] = fsops_now_us() - t0;
    }
    if (fd >= 0)
        close(fd);
    if (strcmp(op, "clean"))
        fsops_report(op, r);
    return 0;
}

static int fsops_usage(void)
{
    fprintf(stderr, "usage: fsops [-n N] [-p PREFIX] "
                    "create|rename|stat|fstat|readdir|unlink|pair|clean|all DIR\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct fsops_run r = {.dfd = -1, .n = 1000, .prefix = "", .us = NULL};
    int opt;
    int rc = 0;

    while ((opt = getopt(argc, argv, "n:p:")) != -1) {
        char *end = NULL;
        switch (opt) {
        case 'n':
            errno = 0;
            r.n = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || r.n < 1 || r.n > 10000000)
                return fsops_usage();
            break;
        case 'p':
            if (strlen(optarg) > 200)
                return fsops_usage();
            r.prefix = optarg;
            break;
        default:
            return fsops_usage();
        }
    }
    if (argc - optind != 2)
        return fsops_usage();
    const char *op = argv[optind];
    const char *dir = argv[optind + 1];

    r.dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (r.dfd < 0)
        return fsops_fail("open", dir) + 1;
    r.us = keg_calloc((size_t)r.n, sizeof(r.us[0]));
    if (!r.us) {
        fprintf(stderr, "fsops: out of memory for %ld samples\n", r.n);
        close(r.dfd);
        return 2;
    }
    if (!strcmp(op, "all")) {
        static const char *const all[] = {"create", "rename", "stat", "fstat",
                                          "unlink", "pair",   "clean"};
        for (size_t k = 0; k < sizeof(all) / sizeof(all[0]) && !rc; k++)
            rc = fsops_op(&r, all[k]);
    } else {
        rc = fsops_op(&r, op);
    }
    keg_free(r.us);
    close(r.dfd);
    return rc;
}
