/* smallfile.c -- ZeroFS's four small-file workloads, single thread, against a directory.
 *
 *   smallfile [-n N] [-w LIST] [-s SEED] DIR
 *
 * Workloads (LIST: comma-separated names, default all four, run in this order):
 *   create   N files of 4 KiB: open(O_CREAT|O_TRUNC|O_WRONLY), write 4 KiB, close
 *   randmod  4 KiB writes at random 4 KiB-aligned offsets of one 40 KiB file (made first,
 *            not timed): open(O_WRONLY), lseek, write 4 KiB, close
 *   append   4 KiB appends to one file: open(O_WRONLY|O_APPEND), write 4 KiB, close
 *   empty    N empty files: open(O_CREAT|O_TRUNC|O_WRONLY), close
 * Each workload works in DIR/<name>/ (created; it must not exist).  Every operation is
 * timed from open to close; after the N operations one sync() is made.  Output, one line
 * per workload (the only lines on stdout):
 *   <name> n=N ok=OK secs=S ops_s=R median_us=M p99_us=P sync_ms=Y
 * secs is the wall time of the N operations plus the final sync(); ops_s = N / secs.
 * An operation is OK when open, write and close all succeeded with the full length.
 * Errors go to stderr (the first 5 per workload).  Exit 0 when every op succeeded, 1 else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "keg/mem.h"

#define SF_BLOCK 4096
#define SF_RANDMOD_FILE (40 * 1024)

struct sf_run {
    const char *name;
    long        n;
    long        ok;
    int         errors;    /* reported so far */
    uint64_t   *lat_ns;    /* n entries */
};

static uint64_t sf_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t sf_rng = 88172645463325252ull;

static uint64_t sf_rand(void)
{
    sf_rng ^= sf_rng << 13;
    sf_rng ^= sf_rng >> 7;
    sf_rng ^= sf_rng << 17;
    return sf_rng;
}

static void sf_err(struct sf_run *r, long i, const char *what, const char *path)
{
    if (r->errors++ < 5)
        fprintf(stderr, "smallfile: %s op %ld: %s %s: %s\n", r->name, i, what, path,
                strerror(errno));
}

/* One op: open path with flags, optionally lseek to off (>= 0) and write len bytes, close.
 * Returns 1 when every step succeeded. */
static int sf_op(struct sf_run *r, long i, const char *path, int flags, off_t off,
                 const char *buf, size_t len)
{
    int fd = open(path, flags, 0644);
    int ok = 1;

    if (fd < 0) {
        sf_err(r, i, "open", path);
        return 0;
    }
    if (off >= 0 && lseek(fd, off, SEEK_SET) != off) {
        sf_err(r, i, "lseek", path);
        ok = 0;
    }
    if (ok && len) {
        ssize_t n = write(fd, buf, len);
        if (n != (ssize_t)len) {
            if (n >= 0)
                errno = EIO;
            sf_err(r, i, "write", path);
            ok = 0;
        }
    }
    if (close(fd) < 0) {
        sf_err(r, i, "close", path);
        ok = 0;
    }
    return ok;
}

static int sf_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Runs workload r->name in dir; prints its line.  Returns 0 or -1 (setup failed). */
static int sf_workload(struct sf_run *r, const char *dir, char *buf)
{
    char sub[4096], path[4200];
    uint64_t t0, t1, ts;
    int kind;

    if (!strcmp(r->name, "create"))
        kind = 0;
    else if (!strcmp(r->name, "randmod"))
        kind = 1;
    else if (!strcmp(r->name, "append"))
        kind = 2;
    else if (!strcmp(r->name, "empty"))
        kind = 3;
    else {
        fprintf(stderr, "smallfile: unknown workload '%s' (create, randmod, append, empty)\n",
                r->name);
        return -1;
    }
    snprintf(sub, sizeof(sub), "%s/%s", dir, r->name);
    if (mkdir(sub, 0755) < 0) {
        fprintf(stderr, "smallfile: mkdir %s: %s\n", sub, strerror(errno));
        return -1;
    }
    if (kind == 1 || kind == 2) {
        snprintf(path, sizeof(path), "%s/file", sub);
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (fd < 0) {
            fprintf(stderr, "smallfile: create %s: %s\n", path, strerror(errno));
            return -1;
        }
        for (int i = 0; kind == 1 && i < SF_RANDMOD_FILE / SF_BLOCK; i++) {
            if (write(fd, buf, SF_BLOCK) != SF_BLOCK) {
                fprintf(stderr, "smallfile: write %s: %s\n", path, strerror(errno));
                close(fd);
                return -1;
            }
        }
        if (close(fd) < 0) {
            fprintf(stderr, "smallfile: close %s: %s\n", path, strerror(errno));
            return -1;
        }
        sync();
    }
    t0 = sf_now();
    for (long i = 0; i < r->n; i++) {
        uint64_t a = sf_now();
        int ok;

        buf[0] = (char)i;   /* every write differs a little */
        switch (kind) {
        case 0:
            snprintf(path, sizeof(path), "%s/f%06ld", sub, i);
            ok = sf_op(r, i, path, O_CREAT | O_TRUNC | O_WRONLY, -1, buf, SF_BLOCK);
            break;
        case 1:
            ok = sf_op(r, i, path, O_WRONLY,
                       (off_t)(sf_rand() % (SF_RANDMOD_FILE / SF_BLOCK)) * SF_BLOCK,
                       buf, SF_BLOCK);
            break;
        case 2:
            ok = sf_op(r, i, path, O_WRONLY | O_APPEND, -1, buf, SF_BLOCK);
            break;
        default:
            snprintf(path, sizeof(path), "%s/e%06ld", sub, i);
            ok = sf_op(r, i, path, O_CREAT | O_TRUNC | O_WRONLY, -1, buf, 0);
            break;
        }
        r->lat_ns[i] = sf_now() - a;
        r->ok += ok;
    }
    ts = sf_now();
    sync();
    t1 = sf_now();

    qsort(r->lat_ns, (size_t)r->n, sizeof(uint64_t), sf_cmp);
    double secs = (double)(t1 - t0) / 1e9;
    size_t p99 = (size_t)((double)r->n * 0.99);
    if (p99 >= (size_t)r->n)
        p99 = (size_t)r->n - 1;
    printf("%s n=%ld ok=%ld secs=%.3f ops_s=%.0f median_us=%.0f p99_us=%.0f sync_ms=%.1f\n",
           r->name, r->n, r->ok, secs, (double)r->n / secs,
           (double)r->lat_ns[r->n / 2] / 1e3, (double)r->lat_ns[p99] / 1e3,
           (double)(t1 - ts) / 1e6);
    fflush(stdout);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: smallfile [-n N] [-w create,randmod,append,empty] [-s SEED] DIR\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *list = "create,randmod,append,empty";
    long n = 2000;
    char *names = NULL, *save = NULL, *tok;
    char *buf = NULL;
    uint64_t *lat = NULL;
    int opt, rc = 0;

    while ((opt = getopt(argc, argv, "n:w:s:h")) != -1) {
        char *end = NULL;
        switch (opt) {
        case 'n':
            n = strtol(optarg, &end, 10);
            if (!end || *end || n < 1 || n > 100000000)
                return usage();
            break;
        case 'w':
            list = optarg;
            break;
        case 's':
            sf_rng = strtoull(optarg, &end, 0) | 1;
            break;
        default:
            return usage();
        }
    }
    if (optind + 1 != argc)
        return usage();
    names = keg_strdup(list);
    buf = keg_malloc(SF_BLOCK);
    lat = keg_calloc((size_t)n, sizeof(*lat));
    if (!names || !buf || !lat) {
        fprintf(stderr, "smallfile: out of memory\n");
        rc = 1;
        goto out;
    }
    for (int i = 0; i < SF_BLOCK; i++)
        buf[i] = (char)sf_rand();
    for (tok = strtok_r(names, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        struct sf_run r = {.name = tok, .n = n, .lat_ns = lat};
        if (sf_workload(&r, argv[optind], buf) < 0) {
            rc = 1;
            break;
        }
        if (r.ok != r.n)
            rc = 1;
    }
out:
    keg_free(names);
    keg_free(buf);
    keg_free(lat);
    return rc;
}
