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
 * With -b the readers follow the writer instead: each round every reader
 * opens the file and reads it from the start in order, never past the bytes
 * whose direct writes have completed (the writer publishes that point in
 * shared memory), and checks each piece it reads.  Their sequential reads make
 * the kernel read ahead into the range still being written, as in the
 * classic "direct write must invalidate read-ahead pages" test, so a page
 * fetched before its direct write and not dropped after shows old bytes.
 *
 * Usage: keg_dio [-r ROUNDS] [-t SECONDS] [-p READERS] [-z SIZE_KIB] [-c PIECE_BYTES]
 *               [-s] [-k] [-b] FILE
 *   -c: bytes per direct write (default 128 KiB; a multiple of 512, so pieces need
 *   not cover whole pages); -s: pwrite, not aio; -k: each reader keeps one
 *   descriptor (no reopen);
 *   -b: readers read behind the writer (above); -t: run rounds for SECONDS
 *   (at least -r rounds)
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
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static unsigned piece_bytes = 128u << 10;     /* -c */
#define PIECE ((uint64_t)piece_bytes)
#define DEPTH 8
#define KEG_DIO_STEP (16u << 10)    /* -b: bytes per read of the readers */

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

/* -b: what the writer and the readers behind it share (MAP_SHARED) */
struct shared {
    volatile unsigned round;    /* round being written (0: none yet) */
    volatile uint64_t done;     /* bytes from 0 whose direct writes completed */
    volatile unsigned stop;     /* readers exit */
    uint64_t          checked;  /* bytes the readers checked while the writes ran */
    volatile unsigned fin[64];  /* per reader: the last round it read to the end */
};
static struct shared *sh;

static void publish_done(uint64_t done)
{
    if (sh)
        __atomic_store_n(&sh->done, done, __ATOMIC_RELEASE);
}

/* Waits a little without holding a CPU (2-core machines: the writer and the
 * mounter must run). */
static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void behind_reader(const char *path, uint64_t size, unsigned id)
{
    unsigned char *b = malloc(KEG_DIO_STEP);
    unsigned seen = 0;
    int fd = -1;
    prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive a writer that died */
    if (!b || getppid() == 1)
        _exit(1);
    while (!sh->stop) {
        unsigned r = __atomic_load_n(&sh->round, __ATOMIC_ACQUIRE);
        if (r == seen) {
            pause_us(200);
            continue;
        }
        seen = r;
        if (fd < 0 || !keep_open) {
            if (fd >= 0)
                close(fd);
            fd = open(path, O_RDONLY);
            if (fd < 0)
                _exit(1);
        }
        /* pieces of 16 KiB: the kernel's read-ahead runs well past each */
        for (uint64_t off = 0; off < size && !sh->stop;) {
            uint64_t len = size - off < KEG_DIO_STEP ? size - off : KEG_DIO_STEP;
            while (__atomic_load_n(&sh->done, __ATOMIC_ACQUIRE) < off + len) {
                if (sh->stop || __atomic_load_n(&sh->round, __ATOMIC_ACQUIRE) != r)
                    goto next;
                pause_us(50);
            }
            ssize_t n = pread(fd, b, len, (off_t)off);
            if (n != (ssize_t)len)
                _exit(1);
            for (uint64_t i = 0; i < len; i++) {
                if (b[i] != pat(r, off + i)) {
                    fprintf(stderr, "keg_dio: round %u: reader %u read old bytes at %llu "
                            "behind the completed direct writes (0x%02x, expected 0x%02x)\n",
                            r, id, (unsigned long long)(off + i), b[i], pat(r, off + i));
                    _exit(3);
                }
            }
            off += len;
            if (__atomic_load_n(&sh->done, __ATOMIC_ACQUIRE) < size)
                __atomic_add_fetch(&sh->checked, len, __ATOMIC_RELAXED);
        }
        __atomic_store_n(&sh->fin[id], r, __ATOMIC_RELEASE);   /* the writer waits for it */
next:;
    }
    _exit(0);
}

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
    uint64_t next = 0, done = 0;
    unsigned inflight = 0;
    unsigned char busy[DEPTH] = {0};
    unsigned char *fin = calloc(size / PIECE + 1, 1);     /* pieces completed */
    if (!fin)
        die("out of memory");

    if (syscall(SYS_io_setup, DEPTH, &ctx) < 0)
        die("io_setup: %s", strerror(errno));
    while (next < size || inflight > 0) {
        while (next < size && inflight < DEPTH) {
            unsigned slot = 0;
            while (busy[slot])          /* completions come in any order */
                slot++;
            struct iocb *cb = &cbs[slot];
            struct iocb *list[1] = {cb};
            busy[slot] = 1;
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
            const struct iocb *cb = (const struct iocb *)(uintptr_t)ev[i].obj;
            fin[(uint64_t)cb->aio_offset / PIECE] = 1;
            busy[cb - cbs] = 0;
            inflight--;
        }
        while (done < size && fin[done / PIECE])
            done += PIECE;
        publish_done(done);
    }
    free(fin);
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
    unsigned rounds = 6, readers = 3, seconds = 0;
    uint64_t size = 8u << 20;
    int sync_write = 0, behind = 0;
    int c;
    while ((c = getopt(argc, argv, "r:t:p:z:c:skb")) != -1) {
        switch (c) {
        case 'c': piece_bytes = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'k': keep_open = 1; break;
        case 'b': behind = 1; break;
        case 't': seconds = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'r': rounds = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'p': readers = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'z': size = strtoull(optarg, NULL, 0) * 1024; break;
        case 's': sync_write = 1; break;
        default:
            fprintf(stderr, "usage: keg_dio [-r ROUNDS] [-t SECONDS] [-p READERS] [-z SIZE_KIB] "
                    "[-c PIECE_BYTES] [-s] [-k] [-b] FILE\n");
            return 2;
        }
    }
    if (optind + 1 != argc || size == 0 || piece_bytes < 512 || piece_bytes % 512 ||
        piece_bytes > (8u << 20) || size % PIECE || readers > 64) {
        fprintf(stderr, "keg_dio: bad arguments (PIECE a multiple of 512 up to 8 MiB, SIZE a "
                "multiple of PIECE, <= 64 readers)\n");
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
    pid_t bpids[64];
    if (behind) {
        sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (sh == MAP_FAILED)
            die("mmap: %s", strerror(errno));
        memset((void *)sh, 0, sizeof(*sh));
        for (unsigned k = 0; k < readers; k++) {
            bpids[k] = fork();
            if (bpids[k] < 0)
                die("fork: %s", strerror(errno));
            if (bpids[k] == 0)
                behind_reader(path, size, k);
        }
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned r;
    for (r = 1;; r++) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (r > rounds && now.tv_sec - t0.tv_sec >= (time_t)seconds)
            break;
        pid_t pids[64];
        unsigned nrand = behind ? 0 : readers;
        for (unsigned k = 0; k < nrand; k++) {
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
        if (!behind)
            nanosleep(&ts, NULL);       /* the readers fill the page cache */
        for (uint64_t i = 0; i < size; i++)
            buf[i] = pat(r, i);
        fd = open(path, O_WRONLY | O_DIRECT);
        if (fd < 0)
            die("open O_DIRECT %s: %s", path, strerror(errno));
        if (behind) {           /* the readers start from 0 of this round */
            __atomic_store_n(&sh->done, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&sh->round, r, __ATOMIC_RELEASE);
        }
        if (sync_write) {
            for (uint64_t off = 0; off < size; off += PIECE) {
                if (pwrite(fd, buf + off, PIECE, (off_t)off) != (ssize_t)PIECE)
                    die("O_DIRECT pwrite at %llu: %s", (unsigned long long)off, strerror(errno));
                publish_done(off + PIECE);
            }
        } else {
            write_aio(fd, buf, size);
        }
        if (close(fd) < 0)
            die("close after the direct write: %s", strerror(errno));
        nanosleep(&ts, NULL);           /* readers keep going after the close */
        for (unsigned k = 0; k < nrand; k++) {
            int st;
            kill(pids[k], SIGKILL);
            waitpid(pids[k], &st, 0);
        }
        /* the next round rewrites the file: wait until every reader read this one */
        for (unsigned k = 0; behind && k < readers; k++) {
            struct timespec w0, w;
            clock_gettime(CLOCK_MONOTONIC, &w0);
            while (__atomic_load_n(&sh->fin[k], __ATOMIC_ACQUIRE) != r) {
                int st;
                if (waitpid(bpids[k], &st, WNOHANG) == bpids[k])
                    die("round %u: a reader behind the writer failed (exit %d)", r,
                        WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
                clock_gettime(CLOCK_MONOTONIC, &w);
                if (w.tv_sec - w0.tv_sec > 60)
                    die("round %u: reader %u did not finish reading in 60 s (it finished round "
                        "%u; %llu bytes written)", r, k, sh->fin[k],
                        (unsigned long long)sh->done);
                pause_us(1000);
            }
        }
        check_all(path, keep, 0, buf, size, got, r, "buffered (descriptor kept open)");
        close(keep);
        check_all(path, -1, 0, buf, size, got, r, "buffered");
        check_all(path, -1, O_DIRECT, buf, size, got, r, "O_DIRECT");
    }
    rounds = r - 1;
    if (behind) {
        sh->stop = 1;
        for (unsigned k = 0; k < readers; k++) {
            int st;
            waitpid(bpids[k], &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                die("a reader behind the writer failed (exit %d)",
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        }
    }
    printf("keg_dio: %u rounds of %s direct writes under %u buffered readers%s: new bytes "
           "every time\n", rounds, sync_write ? "synchronous" : "asynchronous", readers,
           behind ? " behind the writer" : "");
    if (behind)
        printf("keg_dio: the readers checked %llu KiB while writes were in flight\n",
               (unsigned long long)(sh->checked >> 10));
    return 0;
}
