/* keg.h -- common definitions shared by every KegFS module. */
#ifndef KEG_KEG_H
#define KEG_KEG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KEG_VERSION "0.1.0"

#define KEG_ROOT_INO   1ULL                 /* FUSE_ROOT_ID: the volume's root directory */
#define KEG_CHUNK_SIZE (64ULL << 20)        /* a file is a sequence of 64 MiB chunks */
/* Largest file size, 8 PiB - 1 (2^53 - 1): every engine keeps sizes and
 * offsets exactly (the Redis engine's Lua numbers are IEEE doubles).  Writes,
 * truncate, fallocate and copy_file_range past it fail with EFBIG; a write
 * that crosses it is cut short at it (docs/posix.md). */
#define KEG_MAX_FILE_SIZE ((1ULL << 53) - 1)
#define KEG_BLOCK_SIZE_DEFAULT (4U << 20)   /* default block size (fixed at format) */
#define KEG_BLOCK_SIZE_MAX     (16U << 20)
#define KEG_NAME_MAX   255                  /* longest directory entry name, in bytes */
#define KEG_SYMLINK_MAX 4095                /* longest symlink target, in bytes */
#define KEG_XATTR_NAME_MAX 255
#define KEG_XATTR_SIZE_MAX 65536

#define KEG_UNUSED(x) ((void)(x))
#define KEG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KEG_MAX(a, b) ((a) > (b) ? (a) : (b))

#if defined(__GNUC__)
#define KEG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define KEG_NORETURN __attribute__((noreturn))
#else
#define KEG_PRINTF(f, a)
#define KEG_NORETURN
#endif

/* Invariant checks (not for input validation).  Compiled out with KEG_NO_ASSERT. */
KEG_NORETURN void keg_panic(const char *file, int line, const char *fmt, ...) KEG_PRINTF(3, 4);
#ifdef KEG_NO_ASSERT
#define KEG_ASSERT(x) ((void)0)
#else
#define KEG_ASSERT(x) ((x) ? (void)0 : keg_panic(__FILE__, __LINE__, "assertion failed: %s", #x))
#endif
#define KEG_PANIC(...) keg_panic(__FILE__, __LINE__, __VA_ARGS__)

/* Wall-clock time helpers. */
int64_t keg_now_ns(void);        /* CLOCK_REALTIME in nanoseconds */
int64_t keg_mono_ns(void);       /* CLOCK_MONOTONIC in nanoseconds */

/* Names the calling thread (the first 15 bytes of name), as `top -H`, `ps -L`,
 * perf and /proc/PID/task/TID/comm show it.  Background threads are "keg-...". */
void keg_thread_name(const char *name);

/* Caller identity of a file-system request (from the FUSE request, or the CLI). */
#define KEG_CTX_MAX_GROUPS 64
struct keg_ctx {
    uint32_t uid;
    uint32_t gid;
    pid_t    pid;
    uint32_t ngroups;                       /* supplementary groups in groups[] */
    uint32_t groups[KEG_CTX_MAX_GROUPS];
    uint32_t umask;                         /* process umask when known, else 0 */
};

/* 1 if ctx is root, or gid is ctx's primary or a supplementary group. */
int keg_ctx_in_group(const struct keg_ctx *ctx, uint32_t gid);

#endif
