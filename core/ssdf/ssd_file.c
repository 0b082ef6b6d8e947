/* ssd_file.c -- file I/O of cache and staging files (see ssd_file.h), shared by
 * core/cache/cache_ssd.c and core/wb/writeback.c; the pool of spare files also
 * serves the file object store (core/obj/obj_file.c).
 */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "ssd_format.h"
#include "ssd_file.h"
#include "keg/keg.h"
#include "keg/mem.h"

int keg_ssd_mkdirs(const char *path)
{
    char *p = keg_strdup(path);
    int rc = 0;

    if (!p)
        return -ENOMEM;
    for (char *s = strchr(p + 1, '/');; s = strchr(s + 1, '/')) {
        if (s)
            *s = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST) {
            rc = -errno;
            break;
        }
        if (!s)
            break;
        *s = '/';
    }
    keg_free(p);
    return rc;
}

int keg_ssd_file_write(int fd, int kind, const char *key, const void *obj, size_t len)
{
    uint8_t hdr[KEGC_HDR];
    struct iovec iov[3] = {{hdr, KEGC_HDR}, {(void *)key, strlen(key)}, {(void *)obj, len}};
    int i = 0;

    kegc_hdr_make(hdr, kind, key, obj, len);
    while (i < 3) {
        ssize_t n = writev(fd, iov + i, 3 - i);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        while (i < 3 && (size_t)n >= iov[i].iov_len) {
            n -= (ssize_t)iov[i].iov_len;
            i++;
        }
        if (i < 3) {
            iov[i].iov_base = (char *)iov[i].iov_base + n;
            iov[i].iov_len -= (size_t)n;
        }
    }
    return 0;
}

/*---------------------------------------------------------------------------
 * Direct writes
 *-------------------------------------------------------------------------*/

/* Alignment of the buffer, the offset and the length of a direct write: the
 * page size, which every block device's logical block size divides. */
#define SSD_DIO_ALIGN 4096u

struct dio_buf {
    uint8_t *p;                     /* SSD_DIO_ALIGN-aligned (keg_malloc_aligned) */
    size_t   cap;
};

struct keg_ssd_dio {
    pthread_mutex_t mu;
    size_t          max_image;      /* images larger than this go the buffered way */
    unsigned        nbufs;          /* most buffers allocated at once */
    unsigned        nalloc;         /* allocated now (idle or in use); protected by mu */
    unsigned        nidle;          /* protected by mu */
    struct dio_buf *idle;           /* [nbufs]; the first nidle are idle; protected by mu */
    int             refused;        /* direct I/O refused by the file system; atomic access */
};

int keg_ssd_dio_open(unsigned nbufs, size_t max_image, struct keg_ssd_dio **out)
{
    struct keg_ssd_dio *d = keg_calloc(1, sizeof(*d));

    *out = NULL;
    if (d)
        d->idle = keg_calloc(nbufs ? nbufs : 1, sizeof(*d->idle));
    if (!d || !d->idle) {
        keg_free(d);
        return -ENOMEM;
    }
    pthread_mutex_init(&d->mu, NULL);
    d->nbufs = nbufs;
    d->max_image = max_image;
    *out = d;
    return 0;
}

void keg_ssd_dio_close(struct keg_ssd_dio *d)
{
    if (!d)
        return;
    for (unsigned i = 0; i < d->nidle; i++)
        keg_free(d->idle[i].p);
    keg_free(d->idle);
    pthread_mutex_destroy(&d->mu);
    keg_free(d);
}

int keg_ssd_dio_refused(struct keg_ssd_dio *d)
{
    return d ? __atomic_load_n(&d->refused, __ATOMIC_RELAXED) : 0;
}

/* An idle buffer of at least size bytes (reallocated if smaller), or -EAGAIN
 * (all in use) / -ENOMEM. */
static int dio_get(struct keg_ssd_dio *d, size_t size, struct dio_buf *b)
{
    pthread_mutex_lock(&d->mu);
    if (d->nidle > 0) {
        *b = d->idle[--d->nidle];
    } else if (d->nalloc < d->nbufs) {
        d->nalloc++;
        b->p = NULL;
        b->cap = 0;
    } else {
        pthread_mutex_unlock(&d->mu);
        return -EAGAIN;
    }
    pthread_mutex_unlock(&d->mu);
    if (b->cap < size) {
        keg_free(b->p);
        b->cap = 0;
        b->p = keg_malloc_aligned(SSD_DIO_ALIGN, size);
        if (!b->p) {
            pthread_mutex_lock(&d->mu);
            d->nalloc--;
            pthread_mutex_unlock(&d->mu);
            return -ENOMEM;
        }
        b->cap = size;
    }
    return 0;
}

static void dio_put(struct keg_ssd_dio *d, const struct dio_buf *b)
{
    pthread_mutex_lock(&d->mu);
    d->idle[d->nidle++] = *b;
    pthread_mutex_unlock(&d->mu);
}

int keg_ssd_file_write_direct(struct keg_ssd_dio *d, int fd, int kind, const char *key,
                              const void *obj, size_t len)
{
    size_t klen = strlen(key);
    size_t flen = KEGC_HDR + klen + len;
    size_t alen = (flen + SSD_DIO_ALIGN - 1) & ~(size_t)(SSD_DIO_ALIGN - 1);
    struct dio_buf b;
    size_t done = 0;
    int fl, rc;

    if (!d || keg_ssd_dio_refused(d) || alen > d->max_image || dio_get(d, alen, &b) < 0)
        return -EAGAIN;
    kegc_hdr_make(b.p, kind, key, obj, len);
    memcpy(b.p + KEGC_HDR, key, klen);
    memcpy(b.p + KEGC_HDR + klen, obj, len);
    memset(b.p + flen, 0, alen - flen);
    fl = fcntl(fd, F_GETFL);
    if (fl < 0) {
        rc = -errno;
    } else if (fcntl(fd, F_SETFL, fl | O_DIRECT) < 0) {
        rc = errno == EINVAL ? -EAGAIN : -errno;     /* EINVAL: no direct I/O here */
    } else {
        rc = 0;
        while (done < alen) {
            ssize_t n = pwrite(fd, b.p + done, alen - done, (off_t)done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                /* EINVAL: the file system wants a larger alignment */
                rc = n == 0 ? -EIO : errno == EINVAL ? -EAGAIN : -errno;
                break;
            }
            done += (size_t)n;
        }
        if (fcntl(fd, F_SETFL, fl) < 0 && rc == 0)
            rc = -errno;
    }
    dio_put(d, &b);
    if (rc == -EAGAIN) {
        __atomic_store_n(&d->refused, 1, __ATOMIC_RELAXED);
        return rc;
    }
    if (rc == 0 && ftruncate(fd, (off_t)flen) < 0)
        rc = -errno;
    return rc;
}

int keg_ssd_file_publish(int dirfd, int fd, const char *tmp, const char *name, int rc)
{
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
        rc = -errno;
    if (rc < 0)
        unlinkat(dirfd, tmp, 0);
    return rc;
}

int keg_ssd_file_read(int dirfd, const char *path, uint64_t max, uint8_t **out, size_t *len)
{
    struct stat st;
    uint8_t *buf = NULL;
    size_t done = 0;
    int fd, rc = 0;

    *out = NULL;
    *len = 0;
    fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto out;
    }
    if ((uint64_t)st.st_size > max) {
        rc = -EIO;
        goto out;
    }
    buf = keg_malloc(st.st_size ? (size_t)st.st_size : 1);
    if (!buf) {
        rc = -ENOMEM;
        goto out;
    }
    while (done < (size_t)st.st_size) {
        ssize_t n = pread(fd, buf + done, (size_t)st.st_size - done, (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            goto out;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *out = buf;
    *len = done;
    buf = NULL;
out:
    keg_free(buf);
    close(fd);
    return rc;
}

/* Bytes of the object read (and added to its CRC) per pread: small enough to
 * stay in L2 between the copy from the page cache and the CRC pass. */
#define SSD_READ_PIECE (256u << 10)

/* pread of exactly len bytes at off.  Returns 0, -EIO (end of file first) or -errno. */
static int ssd_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        done += (size_t)n;
    }
    return 0;
}

int keg_ssd_file_read_obj(int dirfd, const char *path, int kind, const char *key, void *buf,
                          size_t cap, uint64_t *olen)
{
    uint8_t h[KEGC_HDR + KEGC_KEY_MAX];
    size_t klen = strlen(key), hlen = KEGC_HDR + klen;
    size_t first = (size_t)KEG_MIN((uint64_t)cap, (uint64_t)SSD_READ_PIECE);
    struct iovec iov[2] = {{h, hlen}, {buf, first}};
    struct stat st;
    uint64_t len, at, in_buf;
    ssize_t got;
    uint32_t crc;
    int fd, rc;

    *olen = 0;
    if (klen == 0 || klen > KEGC_KEY_MAX)
        return -EINVAL;
    fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    /* The header, the key and the object's first piece in one read.  A read
     * that ended where the header says the object does has seen the file's
     * end: no fstat() is needed for its size.  Most objects are small, and
     * this is two system calls of five for each. */
    do
        got = preadv(fd, iov, 2, 0);
    while (got < 0 && errno == EINTR);
    if (got < 0) {
        rc = -errno;
        goto out;
    }
    if ((size_t)got < hlen) {
        rc = ssd_pread_full(fd, h + got, hlen - (size_t)got, (uint64_t)got);
        if (rc < 0)
            goto out;
        got = (ssize_t)hlen;
    }
    rc = -EIO;
    if (kegc_get32(h) != KEGC_MAGIC || h[4] != KEGC_VERSION || !kegc_kind_ok(kind, h[5]))
        goto out;
    if (((size_t)h[6] | (size_t)h[7] << 8) != klen || memcmp(h + KEGC_HDR, key, klen) != 0)
        goto out;
    if (keg_crc32c(keg_crc32c(0, h, 20), key, klen) != kegc_get32(h + 20))
        goto out;
    len = (uint64_t)kegc_get32(h + 8) | (uint64_t)kegc_get32(h + 12) << 32;
    in_buf = (uint64_t)got - hlen;          /* object bytes read into buf */
    if (in_buf == first || in_buf != len) {
        /* The read filled what it asked for, or ended elsewhere: the file's
         * size decides (exactly the header, the key and the object). */
        if (fstat(fd, &st) < 0) {
            rc = -errno;
            goto out;
        }
        if ((uint64_t)st.st_size < hlen || len != (uint64_t)st.st_size - hlen)
            goto out;
    }
    if (len > cap) {
        rc = -EMSGSIZE;
        goto out;
    }
    if (in_buf > len)
        in_buf = len;           /* it shrank after the read: the CRC decides */
    /* (no posix_fadvise(WILLNEED) first: the kernel's own read-ahead of the
     * sequential preads was faster, measured on the mount) */
    crc = keg_crc32c(0, buf, (size_t)in_buf);
    for (at = in_buf; at < len; at += SSD_READ_PIECE) {
        size_t n = (size_t)KEG_MIN((uint64_t)SSD_READ_PIECE, len - at);
        rc = ssd_pread_full(fd, (uint8_t *)buf + at, n, hlen + at);
        if (rc < 0)
            goto out;
        crc = keg_crc32c(crc, (uint8_t *)buf + at, n);
    }
    rc = crc == kegc_get32(h + 16) ? 0 : -EIO;
    if (rc == 0)
        *olen = len;
out:
    close(fd);
    return rc;
}

ssize_t keg_ssd_copy_range(const uint8_t *obj, uint64_t olen, uint64_t off, void *buf,
                           size_t len)
{
    size_t n;

    if (off >= olen)
        return 0;
    n = (size_t)KEG_MIN((uint64_t)len, olen - off);
    memcpy(buf, obj + off, n);
    return (ssize_t)n;
}

/*---------------------------------------------------------------------------
 * Spare files
 *-------------------------------------------------------------------------*/

#define SPARE_NEW_SUFFIX ".new"     /* a pool directory not locked yet */
#define SPARE_STALE_NEW_S 60        /* an unlocked ".new" older than this is a leftover */
/* The filler (spare_fill_main): started once SPARE_FILL_MISSES claims found
 * the pool empty; woken when a claim leaves fewer than SPARE_FILL_LOW files;
 * makes new empty files until the pool holds SPARE_FILL_HIGH. */
#define SPARE_FILL_MISSES 64
#define SPARE_FILL_LOW    64
#define SPARE_FILL_HIGH   256
/* ...but not while deletions feed the pool: for this long after a file was
 * retired into it, the filler makes nothing (the deleter's next round brings
 * spares; new files would only push retired ones out of a full pool). */
#define SPARE_FILL_QUIET_NS (3LL * 1000000000)

struct spare_file {
    uint64_t id;                    /* file name: the id in decimal */
};

struct keg_ssd_spare {
    char             *dir;          /* <parent>/<pid>.<n> */
    int               dirfd;        /* O_DIRECTORY, flock()ed */
    unsigned          max;
    uint64_t          max_file;
    pthread_mutex_t   mu;
    struct spare_file *files;       /* stack of pooled files; protected by mu */
    unsigned          n;            /* protected by mu */
    unsigned          busy;         /* retires between reserve and push; protected by mu */
    uint64_t          next;         /* protected by mu */
    /* the filler; all protected by mu */
    int               fill_ok;      /* keg_ssd_spare_autofill() was called */
    unsigned          misses;       /* claims that found the pool empty, until it starts */
    int64_t           last_retire;  /* keg_mono_ns() of the last file retired into the pool */
    int               fill_state;   /* SPARE_FILL_OFF, _RUNNING, _STOP, _FAILED */
    pthread_t         filler;
    pthread_cond_t    fill_cv;      /* wakes the filler: the pool is low, or stop */
};

enum { SPARE_FILL_OFF, SPARE_FILL_RUNNING, SPARE_FILL_STOP, SPARE_FILL_FAILED };

/* A stream over the directory open as fd (which stays open), or NULL.
 * OWNERSHIP: caller closedir()s it. */
static DIR *spare_opendir(int fd)
{
    int dup_fd = dup(fd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;

    if (!d && dup_fd >= 0)
        close(dup_fd);
    return d;
}

/* Removes every file in the open directory dfd (not recursive). */
static void spare_empty_dir(int dfd)
{
    DIR *d = spare_opendir(dfd);
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            unlinkat(dfd, de->d_name, 0);
    }
    closedir(d);
}

/* Removes the pools under parent whose lock is free (their process is gone). */
static void spare_sweep(int pfd)
{
    DIR *d = spare_opendir(pfd);
    struct dirent *de;
    time_t now = time(NULL);

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        struct stat st;
        int dfd;

        if (de->d_name[0] == '.')
            continue;
        dfd = openat(pfd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (dfd < 0)
            continue;
        /* A ".new" directory is being set up by a live process until it is
         * locked and renamed: only an old one is a leftover. */
        if (len > strlen(SPARE_NEW_SUFFIX) &&
            strcmp(de->d_name + len - strlen(SPARE_NEW_SUFFIX), SPARE_NEW_SUFFIX) == 0 &&
            (fstat(dfd, &st) < 0 || now - st.st_mtime < SPARE_STALE_NEW_S)) {
            close(dfd);
            continue;
        }
        if (flock(dfd, LOCK_EX | LOCK_NB) == 0) {
            spare_empty_dir(dfd);
            unlinkat(pfd, de->d_name, AT_REMOVEDIR);
        }
        close(dfd);
    }
    closedir(d);
}

/* 1 while deletions feed the pool (see SPARE_FILL_QUIET_NS).  LOCKS: sp->mu held. */
static int spare_fed(const struct keg_ssd_spare *sp)
{
    return sp->last_retire && keg_mono_ns() - sp->last_retire < SPARE_FILL_QUIET_NS;
}

/* The filler: while the pool holds fewer than SPARE_FILL_HIGH files (and
 * room) and no deletion fed it lately, makes a new empty one and pools it,
 * then sleeps until a claim finds fewer than SPARE_FILL_LOW.  A file it
 * cannot make ends its round (the disk may be full: the writers' own creates
 * report that).  An empty file, never cut, is as good a spare as a file cut
 * to one byte: ext4 flushes at close only a file that was truncated to zero. */
static void *spare_fill_main(void *arg)
{
    struct keg_ssd_spare *sp = arg;
    char name[24];

    keg_thread_name("keg-spare-fill");
    pthread_mutex_lock(&sp->mu);
    while (sp->fill_state == SPARE_FILL_RUNNING) {
        unsigned want = KEG_MIN(SPARE_FILL_HIGH, sp->max);
        if (sp->n + sp->busy >= want || spare_fed(sp)) {
            pthread_cond_wait(&sp->fill_cv, &sp->mu);
            continue;
        }
        uint64_t id = sp->next++;
        sp->busy++;
        pthread_mutex_unlock(&sp->mu);
        snprintf(name, sizeof(name), "%llu", (unsigned long long)id);
        int fd = openat(sp->dirfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW,
                        0600);
        if (fd >= 0)
            close(fd);
        pthread_mutex_lock(&sp->mu);
        sp->busy--;
        if (fd < 0) {
            /* until the next claim that finds the pool low */
            if (sp->fill_state == SPARE_FILL_RUNNING)
                pthread_cond_wait(&sp->fill_cv, &sp->mu);
            continue;
        }
        sp->files[sp->n++] = (struct spare_file){id};
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

/* A claim found the pool low: wake the filler, or start it once
 * SPARE_FILL_MISSES claims found the pool empty (a process that keeps making
 * new files; a tool's few writes never start it).  LOCKS: caller holds sp->mu. */
static void spare_fill_wake(struct keg_ssd_spare *sp)
{
    if (spare_fed(sp))
        return;
    if (sp->fill_state == SPARE_FILL_RUNNING) {
        pthread_cond_signal(&sp->fill_cv);
        return;
    }
    if (!sp->fill_ok || sp->fill_state != SPARE_FILL_OFF || sp->n > 0 ||
        ++sp->misses < SPARE_FILL_MISSES)
        return;
    sp->fill_state = SPARE_FILL_RUNNING;
    if (pthread_create(&sp->filler, NULL, spare_fill_main, sp) != 0)
        sp->fill_state = SPARE_FILL_FAILED;     /* spares come from retirements only */
}

int keg_ssd_spare_open(const char *parent, unsigned max, uint64_t max_file,
                       struct keg_ssd_spare **out)
{
    struct keg_ssd_spare *sp = NULL;
    char name[64], tmp[80];
    int pfd = -1, rc;

    *out = NULL;
    rc = keg_ssd_mkdirs(parent);
    if (rc < 0)
        return rc;
    pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return -errno;
    spare_sweep(pfd);
    sp = keg_calloc(1, sizeof(*sp));
    if (sp)
        sp->files = keg_calloc(max ? max : 1, sizeof(*sp->files));
    if (!sp || !sp->files) {
        rc = -ENOMEM;
        goto fail;
    }
    sp->dirfd = -1;
    for (unsigned n = 0;; n++) {
        snprintf(name, sizeof(name), "%ld.%u", (long)getpid(), n);
        snprintf(tmp, sizeof(tmp), "%s" SPARE_NEW_SUFFIX, name);
        if (mkdirat(pfd, tmp, 0700) == 0)
            break;
        if (errno != EEXIST || n > 1000) {
            rc = -errno;
            goto fail;
        }
    }
    sp->dirfd = openat(pfd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (sp->dirfd < 0 || flock(sp->dirfd, LOCK_EX | LOCK_NB) < 0 ||
        renameat2(pfd, tmp, pfd, name, RENAME_NOREPLACE) < 0) {
        rc = -errno;
        unlinkat(pfd, tmp, AT_REMOVEDIR);
        goto fail;
    }
    sp->dir = keg_asprintf("%s/%s", parent, name);
    if (!sp->dir) {
        rc = -ENOMEM;
        unlinkat(pfd, name, AT_REMOVEDIR);
        goto fail;
    }
    sp->max = max;
    sp->max_file = max_file;
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->fill_cv, NULL);
    close(pfd);
    *out = sp;
    return 0;
fail:
    if (sp) {
        if (sp->dirfd >= 0)
            close(sp->dirfd);
        keg_free(sp->files);
        keg_free(sp);
    }
    close(pfd);
    return rc;
}

void keg_ssd_spare_close(struct keg_ssd_spare *sp)
{
    int joined;

    if (!sp)
        return;
    pthread_mutex_lock(&sp->mu);
    joined = sp->fill_state == SPARE_FILL_RUNNING;
    if (joined)
        sp->fill_state = SPARE_FILL_STOP;
    pthread_cond_signal(&sp->fill_cv);
    pthread_mutex_unlock(&sp->mu);
    if (joined)
        pthread_join(sp->filler, NULL);
    pthread_cond_destroy(&sp->fill_cv);
    spare_empty_dir(sp->dirfd);
    rmdir(sp->dir);
    close(sp->dirfd);
    pthread_mutex_destroy(&sp->mu);
    keg_free(sp->files);
    keg_free(sp->dir);
    keg_free(sp);
}

int keg_ssd_spare_retire(struct keg_ssd_spare *sp, int dirfd, const char *path, uint64_t size)
{
    char name[24];
    uint64_t id = 0;
    int pooled = 0;

    if (sp && size <= sp->max_file) {
        pthread_mutex_lock(&sp->mu);
        if (sp->n + sp->busy < sp->max) {
            id = sp->next++;
            sp->busy++;
            pooled = 1;
        }
        pthread_mutex_unlock(&sp->mu);
    }
    if (pooled) {
        snprintf(name, sizeof(name), "%llu", (unsigned long long)id);
        pooled = renameat(dirfd, path, sp->dirfd, name) == 0;
        if (pooled) {
            /* cut after the move, so a crash never leaves an empty file
             * under a cache or staging name; to one byte, not zero: ext4
             * (auto_da_alloc) starts writeback at the close of a file that
             * was truncated to zero, so every staging or cache file made
             * from this spare would submit its data to the disk at close */
            char *pp = keg_asprintf("%s/%s", sp->dir, name);
            struct stat st;
            /* a file with another name (a hard link made before the move)
             * keeps its bytes for that name: not pooled */
            if (!pp || lstat(pp, &st) < 0 || st.st_nlink != 1 || truncate(pp, 1) < 0) {
                unlinkat(sp->dirfd, name, 0);
                pooled = 0;
                size = UINT64_MAX;  /* gone already */
            }
            keg_free(pp);
        }
        pthread_mutex_lock(&sp->mu);
        sp->busy--;
        if (pooled) {
            sp->files[sp->n++] = (struct spare_file){id};
            sp->last_retire = keg_mono_ns();
        }
        pthread_mutex_unlock(&sp->mu);
        if (pooled || size == UINT64_MAX)
            return 0;
    }
    return unlinkat(dirfd, path, 0) == 0 ? 0 : -errno;
}

int keg_ssd_spare_claim(struct keg_ssd_spare *sp, uint64_t *id)
{
    char name[24];
    int fd;

    if (!sp)
        return -ENOENT;
    pthread_mutex_lock(&sp->mu);
    if (sp->n < SPARE_FILL_LOW)
        spare_fill_wake(sp);
    if (sp->n == 0) {
        pthread_mutex_unlock(&sp->mu);
        return -ENOENT;
    }
    *id = sp->files[--sp->n].id;
    sp->busy++;                 /* its slot stays reserved until it is placed or dropped */
    pthread_mutex_unlock(&sp->mu);
    snprintf(name, sizeof(name), "%llu", (unsigned long long)*id);
    fd = openat(sp->dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int err = errno;
        keg_ssd_spare_drop(sp, *id);
        return err == ENOENT ? -EIO : -err;
    }
    return fd;
}

int keg_ssd_spare_place(struct keg_ssd_spare *sp, uint64_t id, int dirfd, const char *dst,
                        int excl)
{
    char name[24];
    int rc = 0;

    snprintf(name, sizeof(name), "%llu", (unsigned long long)id);
    if (excl ? linkat(sp->dirfd, name, dirfd, dst, 0) < 0
             : renameat(sp->dirfd, name, dirfd, dst) < 0)
        rc = -errno;
    /* dst's directory does not exist, but the file does: the claim stands */
    if (rc == -ENOENT && faccessat(sp->dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
        return rc;
    if (excl || rc < 0)
        unlinkat(sp->dirfd, name, 0);
    pthread_mutex_lock(&sp->mu);
    sp->busy--;
    pthread_mutex_unlock(&sp->mu);
    return rc == -ENOENT ? -EIO : rc;
}

void keg_ssd_spare_drop(struct keg_ssd_spare *sp, uint64_t id)
{
    char name[24];

    snprintf(name, sizeof(name), "%llu", (unsigned long long)id);
    unlinkat(sp->dirfd, name, 0);
    pthread_mutex_lock(&sp->mu);
    sp->busy--;
    pthread_mutex_unlock(&sp->mu);
}

int keg_ssd_spare_put(struct keg_ssd_spare *sp, int dirfd, const char *dst, int excl,
                      int (*fill)(void *arg, int fd), int (*mkparent)(void *arg), void *arg)
{
    uint64_t id;
    int fd = keg_ssd_spare_claim(sp, &id), rc;

    if (fd < 0)
        return -ENOENT;                         /* none to use */
    rc = fill(arg, fd);
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc < 0) {
        keg_ssd_spare_drop(sp, id);
        return rc;
    }
    rc = keg_ssd_spare_place(sp, id, dirfd, dst, excl);
    if (rc == -ENOENT && mkparent && mkparent(arg) == 0)
        rc = keg_ssd_spare_place(sp, id, dirfd, dst, excl);
    if (rc == -ENOENT)                          /* the claim stood: give it up */
        keg_ssd_spare_drop(sp, id);
    return rc;
}

void keg_ssd_spare_autofill(struct keg_ssd_spare *sp)
{
    if (!sp)
        return;
    pthread_mutex_lock(&sp->mu);
    sp->fill_ok = 1;
    pthread_mutex_unlock(&sp->mu);
}

unsigned keg_ssd_spare_count(struct keg_ssd_spare *sp)
{
    unsigned n;
    if (!sp)
        return 0;
    pthread_mutex_lock(&sp->mu);
    n = sp->n;
    pthread_mutex_unlock(&sp->mu);
    return n;
}

int keg_ssd_file_fit(int fd, uint64_t len)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if ((uint64_t)st.st_size > len && ftruncate(fd, (off_t)len) < 0)
        return -errno;
    return 0;
}
