/* ssd_file.h -- the ssdf layer: file I/O of the one-object-per-file format shared by the
 * SSD cache (core/cache/cache_ssd.c) and the writeback staging area (core/wb/writeback.c);
 * neither includes the other's headers.  The pool of spare files (below) also serves
 * the file object store (core/obj/obj_file.c); this file is built into keg_obj.
 *
 * The format itself (header, escaping of names) is ssd_format.h; this is the
 * I/O around it: mkdir -p, writing a file image, publishing a temp file by rename,
 * reading a whole file back and serving a byte range of an object.
 */
#ifndef KEG_SSD_FILE_H
#define KEG_SSD_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdir -p of path (absolute), mode 0700.  Returns 0 or -errno. */
int keg_ssd_mkdirs(const char *path);

/* Writes the whole file image of key (24-byte header of kind, the key, then
 * obj[0..len)) to fd at its current offset.  BORROWS: everything.
 * Returns 0 or -errno of the failed writev (not mapped). */
int keg_ssd_file_write(int fd, int kind, const char *key, const void *obj, size_t len);

/* Direct writes: a large file image is written with O_DIRECT from one of a few
 * page-aligned buffers kept for that, instead of through the page cache.  The
 * object is copied once into the buffer (user memory, reused), and the device
 * reads it from there; the buffered way copies it into page cache pages, newly
 * allocated for every file, which is the slow part of writing large files on
 * machines where fresh memory is costly (measured: docs/benchmarks.md).
 * The pool holds at most nbufs buffers, allocated on first use, each kept at
 * the size of the largest image it has held (at most max_image bytes).
 * LOCKS: the pool's own mutex, never held during I/O. */
struct keg_ssd_dio;

/* OWNERSHIP: caller closes it.  Returns 0 or -ENOMEM. */
int  keg_ssd_dio_open(unsigned nbufs, size_t max_image, struct keg_ssd_dio **out);
/* Frees the pool and its buffers (none may be in use).  NULL is a no-op. */
void keg_ssd_dio_close(struct keg_ssd_dio *d);
/* Writes the whole file image of key (as keg_ssd_file_write) to fd at offset 0
 * with O_DIRECT, then cuts the file to the image's length (fd may be a reused
 * spare, longer than the image).  The file's page cache is not used: the bytes
 * are on the device (not flushed from its cache: fsync for that) on return.
 * fd's status flags are as before on return.
 * Returns 0; -EAGAIN when the caller must write it the buffered way instead:
 * d is NULL, every buffer is busy, the image is larger than max_image, or
 * this file system refused direct I/O (then every later call returns -EAGAIN
 * at once; the file's offset is unchanged, its bytes may be any); or -errno of
 * the failed write or ftruncate. */
int  keg_ssd_file_write_direct(struct keg_ssd_dio *d, int fd, int kind, const char *key,
                               const void *obj, size_t len);
/* 1 once direct writes were refused on this pool's file system (tests, logs). */
int  keg_ssd_dio_refused(struct keg_ssd_dio *d);

/* Finishes a temp file: closes fd, then, if rc is 0, renames tmp to name (both
 * relative to dirfd, which may be AT_FDCWD); if anything failed, unlinks tmp.
 * rc is the result of writing the file so far.  Returns 0 or the first -errno. */
int keg_ssd_file_publish(int dirfd, int fd, const char *tmp, const char *name, int rc);

/* Reads the whole file path (relative to dirfd, which may be AT_FDCWD).
 * OWNERSHIP: *out is keg_malloc'ed (caller frees); NULL and 0 on failure.
 * Returns 0, -EIO (the file is larger than max bytes) or -errno (-ENOENT: no file). */
int keg_ssd_file_read(int dirfd, const char *path, uint64_t max, uint8_t **out, size_t *len);

/* Reads the object of the file path (relative to dirfd, which may be AT_FDCWD)
 * straight into buf (capacity cap): the header, the key and the object's first
 * piece in one read, the header verified (as kegc_check: magic, version, kind
 * -- KEGC_KIND_CACHED_ANY takes 1 or 2 --, key, header CRC, length against the
 * file size), then the rest of the object in pieces, each added to the object
 * CRC32C while still in the CPU cache.  No copy of the file is allocated.
 * *olen is the object length on success, else 0.
 * Returns 0; -EMSGSIZE: the header is sound but the object is longer than cap;
 * -EIO: corrupt, truncated, another key or kind; -ENOENT: no file; or -errno.
 * On any error buf may hold any bytes: the caller must not serve them. */
int keg_ssd_file_read_obj(int dirfd, const char *path, int kind, const char *key, void *buf,
                          size_t cap, uint64_t *olen);

/* Copies [off, off+len) of the object obj[0..olen) into buf.  Returns the bytes copied
 * (0 at or past the end). */
ssize_t keg_ssd_copy_range(const uint8_t *obj, uint64_t olen, uint64_t off, void *buf,
                           size_t len);

/* Spare files: files cut to one byte, kept for reuse, so that writing a cache or
 * staging file renames a spare instead of allocating a new inode and removing
 * one deletes nothing.  On filesystems that scan for reusable inodes (ext4
 * without a journal skips every inode freed in the last seconds) creating
 * files under churn costs more than the data they hold.
 *
 * A pool is a directory <parent>/<pid>.<n> holding files cut to one byte
 * (ssd_file.c: why not zero), named by a
 * counter, flock()ed while its process uses it; a pool whose lock is free
 * belongs to a dead process and is removed by the next keg_ssd_spare_open()
 * on the same parent.
 *
 * A process that writes new files faster than it retires old ones (creating
 * files, copying a tree in) finds the pool empty, and each of its writes
 * allocates an inode in the writer's thread: on ext4 that is most of the
 * cost of a small file's put.  In a pool that allows it
 * (keg_ssd_spare_autofill), once 64 claims have found the pool empty, a
 * thread of the pool (keg-spare-fill) keeps it stocked: whenever a claim
 * leaves fewer than 64 files it makes new empty ones until there are 256
 * (or the pool's bound), so the inodes are allocated beside the writers
 * instead of in their way.  It makes none while deletions feed the pool
 * (a file retired in the last 3 s): under churn the deleter's rounds bring
 * the spares, and new files would only push retired ones out of a full
 * pool.  A tool's few writes never start it; the thread ends with the pool.
 * LOCKS: each pool has its own mutex; file operations run outside it. */
struct keg_ssd_spare;

/* The size of the pools the file object store and the cache directory open
 * (one byte each: 16 MiB of disk at most).  Under a steady stream of
 * deletions the deleter drains the engine's deletion queue about once a
 * second (core/fs/fs.c), so a pool must hold a second's worth: a small-file
 * rewrite loop makes about 2,000 here.  With 1,024 the pools overflowed at
 * every drain (the rest unlinked) and ran dry before the next (new files
 * created): over 4,000 randmod and 4,000 append operations, 4,384 object puts
 * (4,202 staging files with writeback) created a file and 2,454 (3,123)
 * retired files were unlinked. */
#define KEG_SSD_SPARE_MAX 4096

/* Opens a pool of at most max files, taking files of at most max_file bytes
 * (larger ones are unlinked: their blocks cost more than their inode), under
 * parent (created), removing the pools of dead processes there.
 * OWNERSHIP: caller closes it.  Returns 0 or -errno. */
int  keg_ssd_spare_open(const char *parent, unsigned max, uint64_t max_file,
                        struct keg_ssd_spare **out);
/* Removes the pool's files and directory.  NULL is a no-op. */
void keg_ssd_spare_close(struct keg_ssd_spare *sp);
/* Retires the file at path (relative to dirfd), size bytes: moved into the
 * pool and cut to one byte, or unlinked when the pool is full or NULL, the file is
 * larger than max_file, the move fails, or the file has another link (that
 * name keeps its bytes).  A reader that still has the file
 * open sees it shrink (or, once reused, change), as the format's CRCs catch.
 * Returns 0, or -errno of the unlink (-ENOENT: there was no file). */
int  keg_ssd_spare_retire(struct keg_ssd_spare *sp, int dirfd, const char *path, uint64_t size);
/* Claims a pooled file to write where it lies, in the pool: returns an fd open
 * for writing at offset 0 and sets *id, or -ENOENT (pool empty or NULL) or
 * -errno.  The caller writes the new image, calls keg_ssd_file_fit(), closes
 * the fd and then moves the file under its name with keg_ssd_spare_place(), or
 * gives it up with keg_ssd_spare_drop().  Until then it counts against the
 * pool's bound; a crash leaves it in the pool's directory, which the next
 * keg_ssd_spare_open() on the same parent removes, never half written under a
 * cache, staging or object name.  One rename moves it there: no temp name. */
int  keg_ssd_spare_claim(struct keg_ssd_spare *sp, uint64_t *id);
/* Moves the claimed file id to dst (relative to dirfd): renamed over dst, or
 * with excl linked to it (-EEXIST if dst exists) and its pool name removed.
 * Returns 0 or -errno.  After -ENOENT (dst's directory does not exist) the
 * claim stands: the caller may create the directory and place it again, or
 * drop it; after any other error the file is gone. */
int  keg_ssd_spare_place(struct keg_ssd_spare *sp, uint64_t id, int dirfd, const char *dst,
                         int excl);
/* Removes a claimed file that will not be placed (its write failed). */
void keg_ssd_spare_drop(struct keg_ssd_spare *sp, uint64_t id);
/* The whole of the above for one new file dst (relative to dirfd): claims a
 * spare, fill(arg, fd) writes it (and cuts it to length; the fd is closed
 * here), and places it (excl: linked).  When dst's directory does not exist,
 * mkparent(arg) makes it and the place is tried once more (NULL: not).
 * Returns 0, -ENOENT (no spare to use, or dst's directory still missing), -EEXIST
 * (excl) or fill's or the place's -errno; on any error the spare is gone and
 * the caller may write a new file instead. */
int  keg_ssd_spare_put(struct keg_ssd_spare *sp, int dirfd, const char *dst, int excl,
                       int (*fill)(void *arg, int fd), int (*mkparent)(void *arg), void *arg);
/* Cuts a reused file to the len bytes just written (no-op if it is not longer).
 * Returns 0 or -errno. */
int  keg_ssd_file_fit(int fd, uint64_t len);
/* Files in the pool now (for tests and stats). */
unsigned keg_ssd_spare_count(struct keg_ssd_spare *sp);
/* Lets the pool start its filler (see above) once claims keep finding it
 * empty.  NULL is a no-op. */
void keg_ssd_spare_autofill(struct keg_ssd_spare *sp);

#endif
