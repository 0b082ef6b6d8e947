/* ssd_file_i.h -- private: file I/O of the one-object-per-file format shared by the SSD cache
 * (core/cache/cache_ssd.c) and the writeback staging area (core/wb/writeback.c).
 *
 * The format itself (header, escaping of names) is cache_ssd_format.h; this is the
 * I/O around it: mkdir -p, writing a file image, publishing a temp file by rename,
 * reading a whole file back and serving a byte range of an object.
 */
#ifndef KEG_SSD_FILE_I_H
#define KEG_SSD_FILE_I_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdir -p of path (absolute), mode 0700.  Returns 0 or -errno. */
int keg_ssd_mkdirs(const char *path);

/* Writes the whole file image of key (24-byte header of kind, the key, then
 * obj[0..len)) to fd at its current offset.  BORROWS: everything.
 * Returns 0 or -errno of the failed writev (not mapped). */
int keg_ssd_file_write(int fd, int kind, const char *key, const void *obj, size_t len);

/* Finishes a temp file: closes fd, then, if rc is 0, renames tmp to name (both
 * relative to dirfd, which may be AT_FDCWD); if anything failed, unlinks tmp.
 * rc is the result of writing the file so far.  Returns 0 or the first -errno. */
int keg_ssd_file_publish(int dirfd, int fd, const char *tmp, const char *name, int rc);

/* Reads the whole file path (relative to dirfd, which may be AT_FDCWD).
 * OWNERSHIP: *out is keg_malloc'ed (caller frees); NULL and 0 on failure.
 * Returns 0, -EIO (the file is larger than max bytes) or -errno (-ENOENT: no file). */
int keg_ssd_file_read(int dirfd, const char *path, uint64_t max, uint8_t **out, size_t *len);

/* Copies [off, off+len) of the object obj[0..olen) into buf.  Returns the bytes copied
 * (0 at or past the end). */
ssize_t keg_ssd_copy_range(const uint8_t *obj, uint64_t olen, uint64_t off, void *buf,
                           size_t len);

#endif
