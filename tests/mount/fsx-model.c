/* fsx-model.c -- random file I/O checked against an in-memory model (`keg_fsmodel`).
 *
 * DESIGN
 * Single-file mode (like fsx): N random operations on one file -- writes at
 * random offsets (biased towards 64 MiB chunk and 4 MiB block boundaries and
 * towards EOF), truncate down/up, punched holes, reads of random ranges,
 * close/reopen (close-to-open), fsync -- each mirrored in a sparse model of
 * the expected content (64 KiB pages allocated on first write; a missing page
 * is zeros).  After every op the size is compared; every --verify-every ops
 * the whole file is read back from a fresh descriptor.  The file may grow to
 * --max-size (default 160 MiB) while only a few MiB are ever written, so
 * chunk boundaries are crossed without moving much data.  The first mismatch
 * prints the op, the offset, expected and actual bytes, and the last ops.
 *
 * Threads mode (--threads T): T threads, each with its own descriptor, write
 * interleaved stripes of one shared file (stripe i belongs to thread
 * i % T; stripes are not block-aligned, so neighbouring threads share blocks)
 * in random order, some with fsync; then the file is verified.
 *
 * Usage: keg_fsmodel [-s SEED] [-n OPS] [-m MAXSIZE_MIB] [-v N] [--threads T] FILE
 * Exit 0 = all verified, 1 = mismatch or I/O error, 2 = usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MIB ((uint64_t)1024 * 1024)
#define PAGE ((uint64_t)64 * 1024)
#define HIST 32

/*------------------------------ random ------------------------------*/

/* splitmix64: small, seedable, the same sequence everywhere */
static uint64_t rnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rnd_below(uint64_t *s, uint64_t n)
{
    return n ? rnd_next(s) % n : 0;
}

/* The byte a write of op `op` puts at file offset off: recognisable per op. */
static unsigned char pattern(uint64_t op, uint64_t off)
{
    return (unsigned char)((op * 131 + off + (off >> 8)) % 251 + 1);
}

/*------------------------------ model ------------------------------*/

struct model {
    unsigned char **pages;   /* npages entries, NULL = zeros */
    uint64_t npages;
    uint64_t size;           /* expected file size */
};

static int model_init(struct model *m, uint64_t max)
{
    m->npages = (max + PAGE - 1) / PAGE + 1;
    m->pages = calloc(m->npages, sizeof(*m->pages));
    m->size = 0;
    return m->pages ? 0 : -1;
}

/* Set [off, off+len) to data (NULL: zeros). */
static void model_put(struct model *m, uint64_t off, const unsigned char *data, uint64_t len)
{
    while (len) {
        uint64_t pg = off / PAGE, in = off % PAGE, n = PAGE - in;
        if (n > len)
            n = len;
        if (!m->pages[pg] && data) {
            m->pages[pg] = calloc(1, PAGE);
            if (!m->pages[pg]) {
                fprintf(stderr, "keg_fsmodel: out of memory\n");
                exit(1);
            }
        }
        if (m->pages[pg]) {
            if (data)
                memcpy(m->pages[pg] + in, data, n);
            else
                memset(m->pages[pg] + in, 0, n);
        }
        off += n;
        len -= n;
        if (data)
            data += n;
    }
}

static unsigned char model_byte(const struct model *m, uint64_t off)
{
    const unsigned char *p = m->pages[off / PAGE];
    return p ? p[off % PAGE] : 0;
}

static void model_free(struct model *m)
{
    for (uint64_t i = 0; i < m->npages; i++)
        free(m->pages[i]);
    free(m->pages);
    m->pages = NULL;
}

static void model_truncate(struct model *m, uint64_t size)
{
    if (size < m->size)
        model_put(m, size, NULL, m->size - size);
    m->size = size;
}

/*------------------------------ single-file mode ------------------------------*/

struct run {
    const char *path;
    uint64_t seed;
    uint64_t rs;             /* random state */
    uint64_t nops;
    uint64_t max;            /* largest file size */
    uint64_t verify_every;
    int fd;
    int punch_ok;            /* fallocate(PUNCH_HOLE) supported */
    struct model m;
    char hist[HIST][128];    /* last ops, for the failure report */
    uint64_t op;
    unsigned char *buf;      /* scratch, MAXLEN */
    unsigned char *rbuf;
};

#define MAXLEN (1024 * 1024)

static void hist(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void hist(struct run *r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r->hist[r->op % HIST], sizeof(r->hist[0]), fmt, ap);
    va_end(ap);
}

static void fail(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

static void fail(struct run *r, const char *fmt, ...)
{
    va_list ap;

    printf("keg_fsmodel: FAIL at op %" PRIu64 " (seed %" PRIu64 "): ", r->op, r->seed);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\nlast ops:\n");
    for (uint64_t i = r->op >= HIST ? r->op - HIST + 1 : 0; i <= r->op; i++)
        printf("  %6" PRIu64 " %s\n", i, r->hist[i % HIST]);
    printf("reproduce: keg_fsmodel -s %" PRIu64 " -n %" PRIu64 " -m %" PRIu64 " FILE\n", r->seed,
           r->nops, r->max / MIB);
    fflush(stdout);
    exit(1);
}

/* An offset: near a 64 MiB chunk boundary, a 4 MiB block boundary, EOF, or anywhere. */
static uint64_t pick_off(struct run *r)
{
    uint64_t k = rnd_below(&r->rs, 10), base;
    int64_t jitter = (int64_t)rnd_below(&r->rs, 2 * 70000) - 70000;

    if (k < 3)
        base = (1 + rnd_below(&r->rs, r->max / (64 * MIB))) * 64 * MIB;
    else if (k < 5)
        base = rnd_below(&r->rs, r->max / (4 * MIB) + 1) * 4 * MIB;
    else if (k < 7)
        base = r->m.size;
    else
        return rnd_below(&r->rs, r->max);
    if (jitter < 0 && (uint64_t)-jitter > base)
        return 0;
    base += (uint64_t)jitter;
    return base >= r->max ? r->max - 1 : base;
}

static uint64_t pick_len(struct run *r)
{
    uint64_t k = rnd_below(&r->rs, 10);

    if (k < 5)
        return 1 + rnd_below(&r->rs, 4096);
    if (k < 9)
        return 1 + rnd_below(&r->rs, 128 * 1024);
    return 1 + rnd_below(&r->rs, MAXLEN);
}

static void check_size(struct run *r, const char *when)
{
    struct stat st;

    if (fstat(r->fd, &st) < 0)
        fail(r, "fstat %s: %s", when, strerror(errno));
    if ((uint64_t)st.st_size != r->m.size)
        fail(r, "size after %s: expected %" PRIu64 ", got %lld", when, r->m.size,
             (long long)st.st_size);
}

/* Compare [off, off+len) of fd with the model. */
static void verify_range(struct run *r, int fd, uint64_t off, uint64_t len, const char *what)
{
    while (len) {
        uint64_t n = len > MAXLEN ? MAXLEN : len;
        ssize_t got = pread(fd, r->rbuf, n, (off_t)off);
        if (got < 0)
            fail(r, "%s: pread(%" PRIu64 ", %" PRIu64 "): %s", what, off, n, strerror(errno));
        if ((uint64_t)got != n)
            fail(r, "%s: short pread at %" PRIu64 ": wanted %" PRIu64 ", got %zd", what, off, n,
                 got);
        for (uint64_t i = 0; i < n; i++) {
            unsigned char want = model_byte(&r->m, off + i);
            if (r->rbuf[i] != want) {
                uint64_t j = i;
                while (j < n && r->rbuf[j] != model_byte(&r->m, off + j))
                    j++;
                fail(r, "%s: data mismatch at offset %" PRIu64 " (chunk %" PRIu64 " +%" PRIu64
                     "): expected 0x%02x, got 0x%02x; %" PRIu64 " bytes differ from there",
                     what, off + i, (off + i) / (64 * MIB), (off + i) % (64 * MIB), want,
                     r->rbuf[i], j - i);
            }
        }
        off += n;
        len -= n;
    }
}

static void reopen(struct run *r)
{
    if (close(r->fd) < 0)
        fail(r, "close: %s", strerror(errno));
    r->fd = open(r->path, O_RDWR);
    if (r->fd < 0)
        fail(r, "reopen: %s", strerror(errno));
}

static void verify_all(struct run *r)
{
    int fd = open(r->path, O_RDONLY);
    char tail;

    if (fd < 0)
        fail(r, "open for verify: %s", strerror(errno));
    verify_range(r, fd, 0, r->m.size, "full verify");
    if (pread(fd, &tail, 1, (off_t)r->m.size) != 0)
        fail(r, "full verify: data after EOF %" PRIu64, r->m.size);
    close(fd);
}

static void op_write(struct run *r)
{
    uint64_t off = pick_off(r), len = pick_len(r);
    ssize_t n;

    if (off + len > r->max)
        len = r->max - off;
    if (!len)
        len = 1, off = r->max - 1;
    for (uint64_t i = 0; i < len; i++)
        r->buf[i] = pattern(r->op, off + i);
    hist(r, "write off=%" PRIu64 " len=%" PRIu64 " (size %" PRIu64 ")", off, len, r->m.size);
    n = pwrite(r->fd, r->buf, len, (off_t)off);
    if (n < 0)
        fail(r, "pwrite(%" PRIu64 ", %" PRIu64 "): %s", off, len, strerror(errno));
    if ((uint64_t)n != len)
        fail(r, "short pwrite: %zd of %" PRIu64, n, len);
    model_put(&r->m, off, r->buf, len);
    if (off + len > r->m.size)
        r->m.size = off + len;
    check_size(r, "write");
}

static void op_truncate(struct run *r)
{
    uint64_t size;

    if (rnd_below(&r->rs, 2))
        size = rnd_below(&r->rs, r->m.size + 1);         /* down */
    else
        size = pick_off(r);                             /* anywhere, often up */
    hist(r, "truncate %" PRIu64 " -> %" PRIu64, r->m.size, size);
    if (ftruncate(r->fd, (off_t)size) < 0)
        fail(r, "ftruncate(%" PRIu64 "): %s", size, strerror(errno));
    model_truncate(&r->m, size);
    check_size(r, "truncate");
}

static void op_punch(struct run *r)
{
    uint64_t off, len;

    if (!r->punch_ok || !r->m.size) {
        hist(r, "punch skipped");
        return;
    }
    off = rnd_below(&r->rs, r->m.size);
    len = pick_len(r);
    hist(r, "punch off=%" PRIu64 " len=%" PRIu64 " (size %" PRIu64 ")", off, len, r->m.size);
    if (fallocate(r->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) < 0) {
        if (errno == EOPNOTSUPP && r->op < 50) {
            printf("keg_fsmodel: fallocate(PUNCH_HOLE) not supported; no punch ops\n");
            r->punch_ok = 0;
            return;
        }
        fail(r, "fallocate(PUNCH_HOLE, %" PRIu64 ", %" PRIu64 "): %s", off, len, strerror(errno));
    }
    if (off + len > r->m.size)
        len = r->m.size - off;
    model_put(&r->m, off, NULL, len);
    check_size(r, "punch");
}

static void op_read(struct run *r)
{
    uint64_t off, len;

    if (!r->m.size) {
        hist(r, "read skipped (empty)");
        return;
    }
    off = rnd_below(&r->rs, 3) ? pick_off(r) : rnd_below(&r->rs, r->m.size);
    if (off >= r->m.size)
        off = rnd_below(&r->rs, r->m.size);
    len = pick_len(r);
    if (off + len > r->m.size)
        len = r->m.size - off;
    hist(r, "read off=%" PRIu64 " len=%" PRIu64, off, len);
    verify_range(r, r->fd, off, len, "read");
}

static int run_single(struct run *r)
{
    r->buf = malloc(MAXLEN);
    r->rbuf = malloc(MAXLEN);
    if (!r->buf || !r->rbuf || model_init(&r->m, r->max) < 0) {
        fprintf(stderr, "keg_fsmodel: out of memory\n");
        return 1;
    }
    r->fd = open(r->path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (r->fd < 0) {
        fprintf(stderr, "keg_fsmodel: %s: %s\n", r->path, strerror(errno));
        return 1;
    }
    r->punch_ok = 1;
    for (r->op = 1; r->op <= r->nops; r->op++) {
        uint64_t k = rnd_below(&r->rs, 100);
        if (k < 45) {
            op_write(r);
        } else if (k < 55) {
            op_truncate(r);
        } else if (k < 63) {
            op_punch(r);
        } else if (k < 88) {
            op_read(r);
        } else if (k < 95) {
            hist(r, "close+reopen");
            reopen(r);
            check_size(r, "reopen");
        } else {
            hist(r, "fsync");
            if (fsync(r->fd) < 0)
                fail(r, "fsync: %s", strerror(errno));
        }
        if (r->op % r->verify_every == 0) {
            verify_all(r);
        }
    }
    r->op--;
    reopen(r);
    verify_all(r);
    close(r->fd);
    printf("keg_fsmodel: seed %" PRIu64 ": %" PRIu64 " ops verified, final size %" PRIu64 "\n",
           r->seed, r->nops, r->m.size);
    model_free(&r->m);
    free(r->buf);
    free(r->rbuf);
    return 0;
}

/*------------------------------ threads mode ------------------------------*/

struct tharg {
    const char *path;
    int id, nthreads;
    uint64_t seed, base, stripe, nstripes;
    int failed;
    char msg[200];
};

static unsigned char th_pattern(uint64_t off)
{
    return pattern(off / 4093, off);
}

static void *th_main(void *p)
{
    struct tharg *a = p;
    uint64_t rs = a->seed * 1000 + (uint64_t)a->id;
    uint64_t mine = (a->nstripes - (uint64_t)a->id + (uint64_t)a->nthreads - 1) /
                    (uint64_t)a->nthreads;
    uint64_t *order = malloc(mine * sizeof(*order));
    unsigned char *buf = malloc(a->stripe);
    int fd = open(a->path, O_WRONLY);

    if (!order || !buf || fd < 0) {
        snprintf(a->msg, sizeof(a->msg), "thread %d: open/alloc: %s", a->id, strerror(errno));
        a->failed = 1;
        goto out;
    }
    for (uint64_t i = 0; i < mine; i++)
        order[i] = (uint64_t)a->id + i * (uint64_t)a->nthreads;
    for (uint64_t i = mine; i > 1; i--) {                 /* shuffle */
        uint64_t j = rnd_below(&rs, i), t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    for (uint64_t i = 0; i < mine; i++) {
        uint64_t off = a->base + order[i] * a->stripe;
        for (uint64_t k = 0; k < a->stripe; k++)
            buf[k] = th_pattern(off + k);
        if (pwrite(fd, buf, a->stripe, (off_t)off) != (ssize_t)a->stripe) {
            snprintf(a->msg, sizeof(a->msg), "thread %d: pwrite at %" PRIu64 ": %s", a->id, off,
                     strerror(errno));
            a->failed = 1;
            goto out;
        }
        if (rnd_below(&rs, 16) == 0 && fsync(fd) < 0) {
            snprintf(a->msg, sizeof(a->msg), "thread %d: fsync: %s", a->id, strerror(errno));
            a->failed = 1;
            goto out;
        }
    }
    if (close(fd) < 0) {
        snprintf(a->msg, sizeof(a->msg), "thread %d: close: %s", a->id, strerror(errno));
        a->failed = 1;
    }
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    free(order);
    free(buf);
    return NULL;
}

static int run_threads(const char *path, int nthreads, uint64_t seed, uint64_t per_thread)
{
    const uint64_t stripe = 48 * 1024 + 512;             /* not block-aligned */
    const uint64_t base = 62 * MIB;                      /* crosses the 64 MiB boundary */
    uint64_t nstripes = per_thread * (uint64_t)nthreads / stripe;
    uint64_t end = base + nstripes * stripe;
    struct tharg *args = calloc((size_t)nthreads, sizeof(*args));
    pthread_t *tids = calloc((size_t)nthreads, sizeof(*tids));
    unsigned char *buf = malloc(MAXLEN);
    int fd, rc = 0;

    if (!args || !tids || !buf)
        return 1;
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "keg_fsmodel: %s: %s\n", path, strerror(errno));
        return 1;
    }
    close(fd);
    for (int i = 0; i < nthreads; i++) {
        args[i] = (struct tharg){.path = path, .id = i, .nthreads = nthreads, .seed = seed,
                                 .base = base, .stripe = stripe, .nstripes = nstripes};
        if (pthread_create(&tids[i], NULL, th_main, &args[i]) != 0) {
            fprintf(stderr, "keg_fsmodel: pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(tids[i], NULL);
        if (args[i].failed) {
            printf("keg_fsmodel: FAIL %s\n", args[i].msg);
            rc = 1;
        }
    }
    if (rc)
        goto out;
    fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        printf("keg_fsmodel: FAIL reopen: %s\n", strerror(errno));
        rc = 1;
        goto out;
    }
    if ((uint64_t)st.st_size != end) {
        printf("keg_fsmodel: FAIL size %lld, expected %" PRIu64 "\n", (long long)st.st_size, end);
        rc = 1;
    }
    for (uint64_t off = 0; off < end && !rc; off += MAXLEN) {
        uint64_t n = end - off > MAXLEN ? MAXLEN : end - off;
        if (pread(fd, buf, n, (off_t)off) != (ssize_t)n) {
            printf("keg_fsmodel: FAIL pread at %" PRIu64 ": %s\n", off, strerror(errno));
            rc = 1;
            break;
        }
        for (uint64_t i = 0; i < n; i++) {
            uint64_t o = off + i;
            unsigned char want = o < base ? 0 : th_pattern(o);
            if (buf[i] != want) {
                uint64_t stripe_no = (o - base) / stripe;
                printf("keg_fsmodel: FAIL at offset %" PRIu64 " (stripe %" PRIu64
                       ", thread %" PRIu64 "): expected 0x%02x, got 0x%02x\n",
                       o, stripe_no, stripe_no % (uint64_t)nthreads, want, buf[i]);
                rc = 1;
                break;
            }
        }
    }
    close(fd);
    if (!rc)
        printf("keg_fsmodel: %d threads, %" PRIu64 " stripes of %" PRIu64
               " bytes, seed %" PRIu64 ": verified\n",
               nthreads, nstripes, stripe, seed);
out:
    free(args);
    free(tids);
    free(buf);
    return rc;
}

/*------------------------------ main ------------------------------*/

static void usage(void)
{
    fprintf(stderr, "usage: keg_fsmodel [-s SEED] [-n OPS] [-m MAXSIZE_MIB] [-v VERIFY_EVERY]\n"
                    "                   [--threads T [--per-thread MIB]] FILE\n");
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"threads", required_argument, NULL, 'T'},
        {"per-thread", required_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct run r;
    int opt, threads = 0;
    uint64_t per_thread = 4;
    char *end;

    memset(&r, 0, sizeof(r));
    r.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    r.nops = 3000;
    r.max = 160 * MIB;
    r.verify_every = 500;
    while ((opt = getopt_long(argc, argv, "s:n:m:v:h", lopts, NULL)) != -1) {
        errno = 0;
        switch (opt) {
        case 's':
            r.seed = strtoull(optarg, &end, 10);
            break;
        case 'n':
            r.nops = strtoull(optarg, &end, 10);
            break;
        case 'm':
            r.max = strtoull(optarg, &end, 10) * MIB;
            break;
        case 'v':
            r.verify_every = strtoull(optarg, &end, 10);
            break;
        case 'T':
            threads = (int)strtol(optarg, &end, 10);
            break;
        case 'P':
            per_thread = strtoull(optarg, &end, 10);
            break;
        default:
            usage();
            return 2;
        }
        if (errno || *end) {
            usage();
            return 2;
        }
    }
    if (optind != argc - 1 || r.max < MIB || !r.verify_every || threads < 0 || threads > 256) {
        usage();
        return 2;
    }
    r.path = argv[optind];
    r.rs = r.seed;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (threads)
        return run_threads(r.path, threads, r.seed, per_thread * MIB);
    printf("keg_fsmodel: seed %" PRIu64 ", %" PRIu64 " ops, max size %" PRIu64 " MiB, file %s\n",
           r.seed, r.nops, r.max / MIB, r.path);
    return run_single(&r);
}
