/* iomix.c -- random I/O over a small set of files, checked against an
 * in-memory model (`keg_iomix`).
 *
 * DESIGN
 * F files (DIR/iomix-0 ..), each up to --max-size bytes (default 2 MiB), each
 * with a model: its expected size and bytes.  Every op is drawn at random,
 * done on the mount and mirrored in the model; the size is compared after
 * every op and the whole of every file every --verify-every ops and at the end.
 * The op kinds, chosen with --ops (one letter each):
 *   w  buffered pwrite (random offset and length up to 64 KiB)
 *   r  buffered pread, compared with the model
 *   c  copy_file_range between two files or inside one (ranges never overlap)
 *   t  ftruncate (shrink or grow)
 *   s  fsync, or close and reopen (close-to-open), or both
 *   d  O_DIRECT pwrite and pread (4 KiB aligned offsets, lengths and buffers)
 *   a  write(2) through an O_APPEND descriptor (kept for a few ops)
 *   m  mmap: a shared mapping of a range inside the file, written or read,
 *      written ranges msync(MS_SYNC)ed before munmap
 * Small writes that are committed often (s) make many slices per chunk, so the
 * mounter's compaction runs while copies share the slices it replaces.
 * A copy_file_range must never fail with EAGAIN/EBUSY (or anything else) nor
 * come back short inside the source.  The first mismatch prints the op, the
 * offset, the expected and actual bytes, and the last ops.
 *
 * Usage: keg_iomix [-s SEED] [-n OPS] [-f FILES] [-z MAXSIZE_KIB] [-v N] [--ops LETTERS] DIR
 * Exit 0 = all verified, 1 = mismatch or I/O error, 2 = usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAXF 16
#define HIST 24
#define DIO_ALIGN 4096u

static uint64_t rs;

static uint64_t rnd_next(void)
{
    uint64_t z = (rs += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rnd(uint64_t n)
{
    return n ? rnd_next() % n : 0;
}

struct file {
    char           path[4096];
    int            fd;
    int            dfd;         /* O_DIRECT descriptor, -1 if unsupported */
    unsigned char *data;        /* model: max bytes */
    uint64_t       size;
};

static struct file files[MAXF];
static unsigned nfiles = 4;
static uint64_t max_size = 2u << 20;
static uint64_t opno;
static char hist[HIST][160];
static unsigned nhist;
static unsigned char *buf, *buf2;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hist[nhist % HIST], sizeof(hist[0]), fmt, ap);
    va_end(ap);
    nhist++;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "keg_iomix: op %" PRIu64 ": ", opno);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nlast ops:\n");
    unsigned from = nhist > HIST ? nhist - HIST : 0;
    for (unsigned i = from; i < nhist; i++)
        fprintf(stderr, "  %s\n", hist[i % HIST]);
    exit(1);
}

static unsigned char pattern(uint64_t op, uint64_t off)
{
    return (unsigned char)((op * 131 + off + (off >> 9)) % 251 + 1);
}

static void check(unsigned f, uint64_t off, const unsigned char *got, uint64_t len, const char *how)
{
    const unsigned char *want = files[f].data + off;
    if (memcmp(got, want, len) == 0)
        return;
    for (uint64_t i = 0; i < len; i++) {
        if (got[i] != want[i]) {
            die("%s of file %u: byte at %" PRIu64 " is 0x%02x, expected 0x%02x (read %" PRIu64
                "+%" PRIu64 ", size %" PRIu64 ")", how, f, off + i, got[i], want[i], off, len,
                files[f].size);
        }
    }
}

static void check_size(unsigned f)
{
    struct stat st;
    if (fstat(files[f].fd, &st) < 0)
        die("fstat file %u: %s", f, strerror(errno));
    if ((uint64_t)st.st_size != files[f].size)
        die("file %u: size %lld, expected %" PRIu64, f, (long long)st.st_size, files[f].size);
}

static void open_file(unsigned f)
{
    files[f].fd = open(files[f].path, O_RDWR | O_CREAT, 0644);
    if (files[f].fd < 0)
        die("open %s: %s", files[f].path, strerror(errno));
    files[f].dfd = open(files[f].path, O_RDWR | O_DIRECT);
    if (files[f].dfd < 0 && errno != EINVAL)
        die("open O_DIRECT %s: %s", files[f].path, strerror(errno));
}

static void close_file(unsigned f)
{
    if (close(files[f].fd) < 0)
        die("close file %u: %s", f, strerror(errno));
    if (files[f].dfd >= 0 && close(files[f].dfd) < 0)
        die("close O_DIRECT file %u: %s", f, strerror(errno));
}

/* A model write: bytes [off, off+len) of f become src (the file may grow). */
static void model_write(unsigned f, uint64_t off, const unsigned char *src, uint64_t len)
{
    memmove(files[f].data + off, src, len);
    if (off + len > files[f].size)
        files[f].size = off + len;
}

static void model_truncate(unsigned f, uint64_t size)
{
    if (size < files[f].size)
        memset(files[f].data + size, 0, files[f].size - size);
    files[f].size = size;
}

static void read_all(unsigned f, int fd, const char *how)
{
    uint64_t done = 0;
    while (done < files[f].size) {
        ssize_t n = pread(fd, buf + done, files[f].size - done, (off_t)done);
        if (n < 0)
            die("%s of file %u at %" PRIu64 ": %s", how, f, done, strerror(errno));
        if (n == 0)
            die("%s of file %u: EOF at %" PRIu64 ", size %" PRIu64, how, f, done, files[f].size);
        done += (uint64_t)n;
    }
    check(f, 0, buf, files[f].size, how);
    check_size(f);
}

static void verify_all(void)
{
    for (unsigned f = 0; f < nfiles; f++)
        read_all(f, files[f].fd, "verify read");
}

/*------------------------------ ops ------------------------------*/

static void op_write(void)
{
    unsigned f = (unsigned)rnd(nfiles);
    uint64_t len = 1 + rnd(rnd(4) ? 4096 : 65536);
    uint64_t off = rnd(3) ? rnd(files[f].size + 8192) : files[f].size;
    if (off + len > max_size)
        off = max_size - len;
    for (uint64_t i = 0; i < len; i++)
        buf[i] = pattern(opno, off + i);
    note("%" PRIu64 " write f%u %" PRIu64 "+%" PRIu64, opno, f, off, len);
    ssize_t n = pwrite(files[f].fd, buf, len, (off_t)off);
    if (n != (ssize_t)len)
        die("pwrite file %u %" PRIu64 "+%" PRIu64 ": %zd %s", f, off, len, n, strerror(errno));
    model_write(f, off, buf, len);
}

/* An O_APPEND write through a descriptor of its own (kept for a few ops). */
static int afd[MAXF] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};

static void op_append(void)
{
    unsigned f = (unsigned)rnd(nfiles);
    uint64_t len = 1 + rnd(rnd(4) ? 4096 : 65536);
    if (files[f].size + len > max_size)
        return;
    if (afd[f] < 0) {
        afd[f] = open(files[f].path, O_WRONLY | O_APPEND);
        if (afd[f] < 0)
            die("open O_APPEND file %u: %s", f, strerror(errno));
    }
    for (uint64_t i = 0; i < len; i++)
        buf[i] = pattern(opno, files[f].size + i);
    note("%" PRIu64 " append f%u %" PRIu64 "+%" PRIu64, opno, f, files[f].size, len);
    ssize_t n = write(afd[f], buf, len);
    if (n != (ssize_t)len)
        die("O_APPEND write file %u +%" PRIu64 ": %zd %s", f, len, n, strerror(errno));
    model_write(f, files[f].size, buf, len);
    if (rnd(4) == 0) {
        if (close(afd[f]) < 0)
            die("close O_APPEND file %u: %s", f, strerror(errno));
        afd[f] = -1;
    }
}

static void op_read(void)
{
    unsigned f = (unsigned)rnd(nfiles);
    uint64_t off = rnd(files[f].size + 1);
    uint64_t len = 1 + rnd(131072);
    uint64_t want = off < files[f].size ? (off + len > files[f].size ? files[f].size - off : len)
                                        : 0;
    note("%" PRIu64 " read f%u %" PRIu64 "+%" PRIu64, opno, f, off, len);
    ssize_t n = pread(files[f].fd, buf, len, (off_t)off);
    if (n < 0 || (uint64_t)n != want)
        die("pread file %u %" PRIu64 "+%" PRIu64 ": got %zd (%s), expected %" PRIu64, f, off, len,
            n, n < 0 ? strerror(errno) : "short", want);
    check(f, off, buf, want, "read");
}

static void op_copy(void)
{
    unsigned a = (unsigned)rnd(nfiles);
    unsigned b = (unsigned)rnd(nfiles);
    if (files[a].size == 0)
        return;
    uint64_t in = rnd(files[a].size);
    uint64_t len = 1 + rnd(rnd(2) ? files[a].size - in : 262144);
    uint64_t out = rnd(3) ? rnd(files[b].size + 1) : rnd(max_size - len);
    if (out + len > max_size)
        len = max_size - out;
    if (len == 0)
        return;
    if (a == b && in < out + len && out < in + len)
        return;     /* overlapping ranges of one file: EINVAL by definition */
    note("%" PRIu64 " copy f%u %" PRIu64 " -> f%u %" PRIu64 " +%" PRIu64, opno, a, in, b, out, len);
    /* often in pieces: a burst of copies right after the commit that queued
     * a compaction of the source meets the compaction's swap.  Each piece is
     * modelled on its own: a copy inside one file may grow the source. */
    uint64_t piece = rnd(2) ? len : 4096 * (1 + rnd(16));
    uint64_t done = 0;
    while (done < len) {
        uint64_t l = len - done < piece ? len - done : piece;
        uint64_t pi = in + done;
        uint64_t want = pi >= files[a].size ? 0 : pi + l > files[a].size ? files[a].size - pi : l;
        loff_t oi = (loff_t)pi;
        loff_t oo = (loff_t)(out + done);
        ssize_t n = copy_file_range(files[a].fd, &oi, files[b].fd, &oo, (size_t)l, 0);
        if (n < 0)
            die("copy_file_range f%u %" PRIu64 " -> f%u %" PRIu64 " +%" PRIu64 ": %s", a, pi, b,
                out + done, l, strerror(errno));
        if ((uint64_t)n != want)
            die("copy_file_range f%u %" PRIu64 " -> f%u %" PRIu64 " +%" PRIu64 ": %zd bytes, "
                "expected %" PRIu64, a, pi, b, out + done, l, n, want);
        if (want == 0)
            break;
        memcpy(buf2, files[a].data + pi, want);
        model_write(b, out + done, buf2, want);
        done += want;
        if (want < l)
            break;
    }
}

static void op_truncate(void)
{
    unsigned f = (unsigned)rnd(nfiles);
    uint64_t size = rnd(2) ? rnd(files[f].size + 1) : rnd(max_size + 1);
    note("%" PRIu64 " truncate f%u %" PRIu64, opno, f, size);
    if (ftruncate(files[f].fd, (off_t)size) < 0)
        die("ftruncate file %u to %" PRIu64 ": %s", f, size, strerror(errno));
    model_truncate(f, size);
}

static void op_sync(void)
{
    unsigned f = (unsigned)rnd(nfiles);
    /* mostly close/reopen (a commit); fsync costs a sync of the store */
    unsigned how = rnd(4) ? 1 : (unsigned)rnd(3);
    note("%" PRIu64 " %s f%u", opno, how == 0 ? "fsync" : how == 1 ? "reopen" : "fsync+reopen", f);
    if (how != 1 && fsync(files[f].fd) < 0)
        die("fsync file %u: %s", f, strerror(errno));
    if (how != 0) {
        close_file(f);
        open_file(f);
    }
}

static void op_direct(void)
{
    unsigned f = (unsigned)rnd(nfiles);
    if (files[f].dfd < 0)
        return;
    uint64_t len = DIO_ALIGN * (1 + rnd(16));
    uint64_t off = DIO_ALIGN * rnd((files[f].size + 8192) / DIO_ALIGN + 1);
    if (off + len > max_size)
        off = (max_size - len) / DIO_ALIGN * DIO_ALIGN;
    if (rnd(2)) {
        for (uint64_t i = 0; i < len; i++)
            buf[i] = pattern(opno, off + i);
        note("%" PRIu64 " dwrite f%u %" PRIu64 "+%" PRIu64, opno, f, off, len);
        ssize_t n = pwrite(files[f].dfd, buf, len, (off_t)off);
        if (n != (ssize_t)len)
            die("O_DIRECT pwrite file %u %" PRIu64 "+%" PRIu64 ": %zd %s", f, off, len, n,
                strerror(errno));
        model_write(f, off, buf, len);
    } else {
        uint64_t want = off < files[f].size ? (off + len > files[f].size ? files[f].size - off
                                                                          : len) : 0;
        note("%" PRIu64 " dread f%u %" PRIu64 "+%" PRIu64, opno, f, off, len);
        ssize_t n = pread(files[f].dfd, buf, len, (off_t)off);
        if (n < 0 || (uint64_t)n != want)
            die("O_DIRECT pread file %u %" PRIu64 "+%" PRIu64 ": got %zd (%s), expected %" PRIu64,
                f, off, len, n, n < 0 ? strerror(errno) : "short", want);
        check(f, off, buf, want, "O_DIRECT read");
    }
}

static void op_mmap(void)
{
    unsigned f = (unsigned)rnd(nfiles);
    long pg = sysconf(_SC_PAGESIZE);
    if (files[f].size == 0)
        return;
    uint64_t off = rnd(files[f].size);
    uint64_t len = 1 + rnd(files[f].size - off < 65536 ? files[f].size - off : 65536);
    uint64_t moff = off / (uint64_t)pg * (uint64_t)pg;
    uint64_t mlen = off + len - moff;
    int wr = (int)rnd(2);
    unsigned char *p = mmap(NULL, mlen, PROT_READ | (wr ? PROT_WRITE : 0), MAP_SHARED,
                            files[f].fd, (off_t)moff);
    if (p == MAP_FAILED)
        die("mmap file %u %" PRIu64 "+%" PRIu64 ": %s", f, moff, mlen, strerror(errno));
    if (wr) {
        note("%" PRIu64 " mwrite f%u %" PRIu64 "+%" PRIu64, opno, f, off, len);
        for (uint64_t i = 0; i < len; i++)
            buf[i] = pattern(opno, off + i);
        memcpy(p + (off - moff), buf, len);
        if (msync(p, mlen, MS_SYNC) < 0)
            die("msync file %u: %s", f, strerror(errno));
        model_write(f, off, buf, len);
    } else {
        note("%" PRIu64 " mread f%u %" PRIu64 "+%" PRIu64, opno, f, off, len);
        memcpy(buf, p + (off - moff), len);
        check(f, off, buf, len, "mmap read");
    }
    if (munmap(p, mlen) < 0)
        die("munmap file %u: %s", f, strerror(errno));
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"ops", required_argument, NULL, 'o'}, {0, 0, 0, 0}};
    uint64_t seed = 1;
    uint64_t nops = 3000;
    uint64_t verify_every = 500;
    const char *ops = "wwwwrccttsss";
    int c;

    while ((c = getopt_long(argc, argv, "s:n:f:z:v:", lo, NULL)) != -1) {
        switch (c) {
        case 's': seed = strtoull(optarg, NULL, 0); break;
        case 'n': nops = strtoull(optarg, NULL, 0); break;
        case 'f': nfiles = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'z': max_size = strtoull(optarg, NULL, 0) * 1024; break;
        case 'v': verify_every = strtoull(optarg, NULL, 0); break;
        case 'o': ops = optarg; break;
        default:
            fprintf(stderr, "usage: keg_iomix [-s SEED] [-n OPS] [-f FILES] [-z MAXSIZE_KIB] "
                            "[-v N] [--ops LETTERS] DIR\n");
            return 2;
        }
    }
    if (optind + 1 != argc || nfiles == 0 || nfiles > MAXF || max_size < 262144 || !*ops ||
        strspn(ops, "wrctsdma") != strlen(ops)) {
        fprintf(stderr, "keg_iomix: bad arguments (1..%d files, max size >= 256 KiB, ops from "
                        "'wrctsdma')\n", MAXF);
        return 2;
    }
    rs = seed;
    if (posix_memalign((void **)&buf, DIO_ALIGN, max_size) != 0 ||
        posix_memalign((void **)&buf2, DIO_ALIGN, max_size) != 0) {
        fprintf(stderr, "keg_iomix: out of memory\n");
        return 1;
    }
    for (unsigned f = 0; f < nfiles; f++) {
        snprintf(files[f].path, sizeof(files[f].path), "%s/iomix-%u", argv[optind], f);
        files[f].data = calloc(1, max_size);
        if (!files[f].data) {
            fprintf(stderr, "keg_iomix: out of memory\n");
            return 1;
        }
        unlink(files[f].path);
        open_file(f);
    }
    size_t nkinds = strlen(ops);
    for (opno = 1; opno <= nops; opno++) {
        switch (ops[rnd(nkinds)]) {
        case 'w': op_write(); break;
        case 'a': op_append(); break;
        case 'r': op_read(); break;
        case 'c': op_copy(); break;
        case 't': op_truncate(); break;
        case 's': op_sync(); break;
        case 'd': op_direct(); break;
        case 'm': op_mmap(); break;
        }
        for (unsigned f = 0; f < nfiles; f++)
            check_size(f);
        if (verify_every && opno % verify_every == 0)
            verify_all();
    }
    opno = nops;
    for (unsigned f = 0; f < nfiles; f++)
        if (afd[f] >= 0 && close(afd[f]) < 0)
            die("close O_APPEND file %u: %s", f, strerror(errno));
    verify_all();
    for (unsigned f = 0; f < nfiles; f++) {
        close_file(f);
        open_file(f);
        read_all(f, files[f].fd, "read after reopen");
        if (files[f].dfd >= 0)
            read_all(f, files[f].dfd, "O_DIRECT read after reopen");
        close_file(f);
    }
    printf("keg_iomix: seed %" PRIu64 ": %" PRIu64 " ops on %u files verified\n", seed, nops,
           nfiles);
    return 0;
}
