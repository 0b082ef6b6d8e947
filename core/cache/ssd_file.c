/* ssd_file.c -- file I/O of cache and staging files (see ssd_file_i.h), shared by
 * core/cache/cache_ssd.c and core/wb/writeback.c.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cache_ssd_format.h"
#include "ssd_file_i.h"
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
