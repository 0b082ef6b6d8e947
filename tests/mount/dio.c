/* dio.c -- direct writes against buffered readers (`keg_dio`).
 *
 * Each round rewrites FILE (SIZE KiB) with O_DIRECT -- asynchronous direct I/O
 * (io_submit, DEPTH requests of 128 KiB in flight) or plain pwrite -- while
 * READERS processes keep reading it through the page cache (open, buffered
 * reads of random ranges, close).  Once the write has completed and the file
 * is closed, the readers stop, and buffered reads -- through a descriptor
 * opened before the write, whose pages held the old bytes, and through a fresh
 * one -- must return the new bytes of every page; the O_DIRECT re-read too.  The round's
 * pattern differs from the last one, so a stale page shows.
 *
 * Usage: keg_dio [-r ROUNDS] [-p READERS] [-z SIZE_KIB] [-s] [-k] FILE
 *   -s: pwrite, not aio; -k: each reader keeps one descriptor (no reopen)
 * Exit 0 = every round read back new bytes, 1 = stale or wrong bytes / error, 2 = usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PIECE (128u << 10)
#define DEPTH 8

static unsigned char pat(unsigned round, uint64_t off)
{
    return (unsigned char)((round * 97 + off / 4096 * 13 + off % 4096) % 251 + 1);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("keg_dio: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static int keep_open;   /* -k: readers keep one descriptor */

static void reader(const char *path, uint64_t size, unsigned seed)
{
    unsigned char *b = malloc(PIECE);
    uint64_t s = seed * 2654435761u + 1;
    int fd = -1;
    if (!b)
        _exit(1);
    for (;;) {
        if (fd < 0)
            fd = open(path, O_RDONLY);
        if (fd < 0)
            _exit(1);
        for (int k = 0; k < 16; k++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            uint64_t off = (s >> 20) % size;
            if (pread(fd, b, PIECE, (off_t)off) < 0)
                _exit(1);
        }
        if (!keep_open) {
            close(fd);
            fd = -1;
        }
    }
}

static void write_aio(int fd, const unsigned char *buf, uint64_t size)
{
    aio_context_t ctx = 0;
    struct iocb cbs[DEPTH];
    struct io_event ev[DEPTH];
    uint64_t next = 0;
    unsigned inflight = 0;

    if (syscall(SYS_io_setup, DEPTH, &ctx) < 0)
        die("io_setup: %s", strerror(errno));
    while (next < size || inflight > 0) {
        while (next < size && inflight < DEPTH) {
            struct iocb *cb = &cbs[(next / PIECE) % DEPTH];
            struct iocb *list[1] = {cb};
            memset(cb, 0, sizeof(*cb));
            cb->aio_fildes = (uint32_t)fd;
            cb->aio_lio_opcode = IOCB_CMD_PWRITE;
            cb->aio_buf = (uint64_t)(uintptr_t)(buf + next);
            cb->aio_nbytes = PIECE;
            cb->aio_offset = (int64_t)next;
            if (syscall(SYS_io_submit, ctx, 1, list) != 1)
                die("io_submit at %llu: %s", (unsigned long long)next, strerror(errno));
            next += PIECE;
            inflight++;
        }
        long n = syscall(SYS_io_getevents, ctx, 1, DEPTH, ev, NULL);
        if (n < 0 && errno != EINTR)
            die("io_getevents: %s", strerror(errno));
        for (long i = 0; i < n; i++) {
            if (ev[i].res != (int64_t)PIECE)
                die("asynchronous direct write: result %lld", (long long)ev[i].res);
            inflight--;
        }
    }
    syscall(SYS_io_destroy, ctx);
}

/* Reads the whole file through fd (or a fresh descriptor when fd < 0) and
 * compares it with want. */
static void check_all(const char *path, int fd, int flags, const unsigned char *want,
                      uint64_t size, unsigned char *got, unsigned round, const char *how)
{
    int own = fd < 0;
    uint64_t done = 0;
    if (own)
        fd = open(path, O_RDONLY | flags);
    if (fd < 0)
        die("open %s: %s", path, strerror(errno));
    while (done < size) {
        ssize_t n = pread(fd, got + done, size - done, (off_t)done);
        if (n <= 0)
            die("%s read at %llu: %s", how, (unsigned long long)done,
                n < 0 ? strerror(errno) : "EOF");
        done += (uint64_t)n;
    }
    if (own)
        close(fd);
    for (uint64_t i = 0; i < size; i++) {
        if (got[i] != want[i]) {
            uint64_t j = i;
            while (j < size && got[j] != want[j])
                j++;
            die("round %u: %s read after the direct write returned old bytes at %llu..%llu "
                "(0x%02x, expected 0x%02x)", round, how, (unsigned long long)i,
                (unsigned long long)j, got[i], want[i]);
        }
    }
}

int main(int argc, char **argv)
{
    unsigned rounds = 6, readers = 3;
    uint64_t size = 8u << 20;
    int sync_write = 0;
    int c;
    while ((c = getopt(argc, argv, "r:p:z:sk")) != -1) {
        switch (c) {
        case 'k': keep_open = 1; break;
        case 'r': rounds = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'p': readers = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'z': size = strtoull(optarg, NULL, 0) * 1024; break;
        case 's': sync_write = 1; break;
        default:
            fprintf(stderr, "usage: keg_dio [-r ROUNDS] [-p READERS] [-z SIZE_KIB] [-s] [-k] FILE\n");
            return 2;
        }
    }
    if (optind + 1 != argc || size == 0 || size % PIECE || readers > 64) {
        fprintf(stderr, "keg_dio: bad arguments (SIZE a multiple of 128 KiB, <= 64 readers)\n");
        return 2;
    }
    const char *path = argv[optind];
    unsigned char *buf, *got;
    if (posix_memalign((void **)&buf, 4096, size) || posix_memalign((void **)&got, 4096, size))
        die("out of memory");
    /* round 0: the old bytes, written buffered */
    for (uint64_t i = 0; i < size; i++)
        buf[i] = pat(0, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || pwrite(fd, buf, size, 0) != (ssize_t)size || close(fd) < 0)
        die("initial write of %s: %s", path, strerror(errno));
    for (unsigned r = 1; r <= rounds; r++) {
        pid_t pids[64];
        for (unsigned k = 0; k < readers; k++) {
            pids[k] = fork();
            if (pids[k] < 0)
                die("fork: %s", strerror(errno));
            if (pids[k] == 0)
                reader(path, size, r * 64 + k);
        }
        /* a reader that keeps its descriptor: its page cache is full of old bytes */
        int keep = open(path, O_RDONLY);
        if (keep < 0)
            die("open %s: %s", path, strerror(errno));
        check_all(path, keep, 0, buf, size, got, r, "buffered (before)");
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);           /* the readers fill the page cache */
        for (uint64_t i = 0; i < size; i++)
            buf[i] = pat(r, i);
        fd = open(path, O_WRONLY | O_DIRECT);
        if (fd < 0)
            die("open O_DIRECT %s: %s", path, strerror(errno));
        if (sync_write) {
            for (uint64_t off = 0; off < size; off += PIECE)
                if (pwrite(fd, buf + off, PIECE, (off_t)off) != (ssize_t)PIECE)
                    die("O_DIRECT pwrite at %llu: %s", (unsigned long long)off, strerror(errno));
        } else {
            write_aio(fd, buf, size);
        }
        if (close(fd) < 0)
            die("close after the direct write: %s", strerror(errno));
        nanosleep(&ts, NULL);           /* readers keep going after the close */
        for (unsigned k = 0; k < readers; k++) {
            int st;
            kill(pids[k], SIGKILL);
            waitpid(pids[k], &st, 0);
        }
        check_all(path, keep, 0, buf, size, got, r, "buffered (descriptor kept open)");
        close(keep);
        check_all(path, -1, 0, buf, size, got, r, "buffered");
        check_all(path, -1, O_DIRECT, buf, size, got, r, "O_DIRECT");
    }
    printf("keg_dio: %u rounds of %s direct writes under %u buffered readers: new bytes every "
           "time\n", rounds, sync_write ? "synchronous" : "asynchronous", readers);
    return 0;
}
