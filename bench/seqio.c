/* seqio.c -- sequential write and read throughput of one file, with verified content.
 *
 *   seqio write FILE MIB [SEED]   create FILE, write MIB MiB in 1 MiB write()s, fsync, close
 *   seqio read  FILE MIB [SEED]   read FILE in 1 MiB read()s and check every byte
 *
 * The content is pseudo-random (incompressible) and a function of SEED and the MiB index,
 * so a read in another process checks what the write wrote without storing it.  One line
 * on stdout:
 *   write mib=M secs=S mib_s=R fsync_ms=F          (secs from open to the end of close)
 *   read  mib=M secs=S mib_s=R ok=1|0              (secs from after the drop, below)
 * Exit 0 on success, 1 on an I/O error or (read) any byte that differs.
 * read first drops FILE's own pages from the page cache (POSIX_FADV_DONTNEED; its secs
 * start after that), so on a FUSE mount every byte comes through the file system, from
 * whatever that keeps below (a passthrough's source file, KegFS's block cache or store).
 * bench/run.sh's seq workload runs both.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keg/mem.h"

#define SQ_MIB (1u << 20)

static double sq_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The content of MiB number idx: a fixed random pattern with idx and seed mixed into
 * every 8-byte word, so blocks differ from each other and from other runs. */
static void sq_fill(uint64_t *w, const uint64_t *pat, uint64_t idx, uint64_t seed)
{
    uint64_t k = (idx + 1) * 0x9E3779B97F4A7C15ull ^ seed;

    for (size_t i = 0; i < SQ_MIB / 8; i++)
        w[i] = pat[i] ^ k;
}

static void sq_pattern(uint64_t *pat)
{
    uint64_t x = 0x2545F4914F6CDD1Dull;

    for (size_t i = 0; i < SQ_MIB / 8; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pat[i] = x;
    }
}

static int sq_write(const char *path, long mib, uint64_t seed, uint64_t *pat, uint64_t *buf)
{
    double t0 = sq_now(), tf, t1;
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);

    if (fd < 0) {
        fprintf(stderr, "seqio: open %s: %s\n", path, strerror(errno));
        return 1;
    }
    for (long i = 0; i < mib; i++) {
        size_t done = 0;
        sq_fill(buf, pat, (uint64_t)i, seed);
        while (done < SQ_MIB) {
            ssize_t n = write(fd, (char *)buf + done, SQ_MIB - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                fprintf(stderr, "seqio: write %s at MiB %ld: %s\n", path, i,
                        n < 0 ? strerror(errno) : "short write");
                close(fd);
                return 1;
            }
            done += (size_t)n;
        }
    }
    tf = sq_now();
    if (fsync(fd) < 0) {
        fprintf(stderr, "seqio: fsync %s: %s\n", path, strerror(errno));
        close(fd);
        return 1;
    }
    tf = sq_now() - tf;
    if (close(fd) < 0) {
        fprintf(stderr, "seqio: close %s: %s\n", path, strerror(errno));
        return 1;
    }
    t1 = sq_now();
    printf("write mib=%ld secs=%.3f mib_s=%.1f fsync_ms=%.1f\n", mib, t1 - t0,
           (double)mib / (t1 - t0), tf * 1e3);
    return 0;
}

static int sq_read(const char *path, long mib, uint64_t seed, uint64_t *pat, uint64_t *buf,
                   uint64_t *want)
{
    int fd = open(path, O_RDONLY);
    long bad = -1;

    if (fd < 0) {
        fprintf(stderr, "seqio: open %s: %s\n", path, strerror(errno));
        return 1;
    }
    /* the file's own pages leave the page cache; on a FUSE mount the read
     * then goes through the file system, whatever it keeps below */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    double t0 = sq_now(), t1;
    for (long i = 0; i < mib; i++) {
        size_t done = 0;
        while (done < SQ_MIB) {
            ssize_t n = read(fd, (char *)buf + done, SQ_MIB - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                fprintf(stderr, "seqio: read %s at MiB %ld: %s\n", path, i,
                        n < 0 ? strerror(errno) : "unexpected end of file");
                close(fd);
                return 1;
            }
            done += (size_t)n;
        }
        sq_fill(want, pat, (uint64_t)i, seed);
        if (bad < 0 && memcmp(buf, want, SQ_MIB) != 0)
            bad = i;
    }
    close(fd);
    t1 = sq_now();
    printf("read mib=%ld secs=%.3f mib_s=%.1f ok=%d\n", mib, t1 - t0,
           (double)mib / (t1 - t0), bad < 0);
    if (bad >= 0)
        fprintf(stderr, "seqio: %s: MiB %ld differs from what was written\n", path, bad);
    return bad < 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    uint64_t *pat = NULL, *buf = NULL, *want = NULL;
    uint64_t seed = 1;
    char *end = NULL;
    long mib;
    int rc = 2;

    if (argc < 4 || argc > 5)
        goto usage;
    mib = strtol(argv[3], &end, 10);
    if (!end || *end || mib < 1)
        goto usage;
    if (argc == 5) {
        seed = strtoull(argv[4], &end, 0);
        if (!end || *end)
            goto usage;
    }
    pat = keg_malloc(SQ_MIB);
    buf = keg_malloc(SQ_MIB);
    want = keg_malloc(SQ_MIB);
    if (!pat || !buf || !want) {
        fprintf(stderr, "seqio: out of memory\n");
        rc = 1;
        goto out;
    }
    sq_pattern(pat);
    if (!strcmp(argv[1], "write"))
        rc = sq_write(argv[2], mib, seed, pat, buf);
    else if (!strcmp(argv[1], "read"))
        rc = sq_read(argv[2], mib, seed, pat, buf, want);
    else
        goto usage;
out:
    keg_free(pat);
    keg_free(buf);
    keg_free(want);
    return rc;
usage:
    fprintf(stderr, "usage: seqio write|read FILE MIB [SEED]\n");
    return 2;
}
