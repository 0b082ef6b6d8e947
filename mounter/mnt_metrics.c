/* mnt_metrics.c -- `kegfs mount --metrics ADDR:PORT`: the mounter's Prometheus endpoint.
 *
 * DESIGN
 * FUSE operations are counted by a second lowlevel ops table whose entries wrap the
 * handlers of fuse_ops.c (mnt_metrics_ops): each wrapper notes the op in a thread-local,
 * calls the handler and records its latency (from the handler's entry to its return,
 * which includes the reply: the handlers reply before returning).  Errors and byte
 * counts come from the replies themselves: the link wraps fuse_reply_err, fuse_reply_buf
 * and fuse_reply_write (-Wl,--wrap, mounter/CMakeLists.txt), and while a wrapped handler
 * runs on this thread an error reply marks its op failed and a read's or write's reply
 * adds its bytes.  An op missing from the wrapper list below passes through uncounted.
 * Without --metrics the plain table is used and the reply wrappers only test a
 * thread-local.
 *
 * Everything else is read at scrape time from what the layers already keep: the metadata
 * engine's per-op counters (the keg_meta_<op> wrappers, core/meta/meta_call.c), the
 * object store's per-verb counters (obj_metrics.c), the SSD cache and writeback figures
 * (keg_stack_stats), the memory budget (keg_fs_mem_stats) and the background work
 * (keg_fs_bg_stats: compaction, deletion, the session heartbeat).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <string.h>

#define KEG_LOG_TAG "metrics"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/meta.h"
#include "keg/metrics.h"
#include "keg/obj_metrics.h"
#include "keg/stack.h"

#include "mnt_i.h"

enum mm_op {
    MM_LOOKUP, MM_GETATTR, MM_SETATTR, MM_READLINK, MM_MKNOD, MM_MKDIR, MM_UNLINK, MM_RMDIR,
    MM_SYMLINK, MM_RENAME, MM_LINK, MM_OPEN, MM_CREATE, MM_READ, MM_WRITE, MM_FLUSH,
    MM_RELEASE, MM_FSYNC, MM_FALLOCATE, MM_COPY_FILE_RANGE, MM_LSEEK, MM_OPENDIR, MM_READDIR,
    MM_READDIRPLUS, MM_RELEASEDIR, MM_FSYNCDIR, MM_STATFS, MM_SETXATTR, MM_GETXATTR,
    MM_LISTXATTR, MM_REMOVEXATTR, MM_GETLK, MM_SETLK, MM_FLOCK, MM_FORGET, MM_FORGET_MULTI,
    MM_NOPS,
};

static const char *const mm_names[MM_NOPS] = {
    "lookup", "getattr", "setattr", "readlink", "mknod", "mkdir", "unlink", "rmdir",
    "symlink", "rename", "link", "open", "create", "read", "write", "flush",
    "release", "fsync", "fallocate", "copy_file_range", "lseek", "opendir", "readdir",
    "readdirplus", "releasedir", "fsyncdir", "statfs", "setxattr", "getxattr",
    "listxattr", "removexattr", "getlk", "setlk", "flock", "forget", "forget_multi",
};

struct mm_op_stats {
    uint64_t ops;                     /* atomic */
    uint64_t errors;                  /* atomic */
    struct keg_metrics_hist latency;
};

static struct mm_op_stats mm_stats[MM_NOPS];
static uint64_t mm_bytes_read;        /* atomic */
static uint64_t mm_bytes_written;     /* atomic */
static const struct fuse_lowlevel_ops *mm_real;
static struct fuse_lowlevel_ops mm_table;

/* The op the wrapped handler on this thread is running (-1: none), and whether it
 * replied with an error. */
static __thread int mm_cur = -1;
static __thread int mm_failed;

/*----- the reply wrappers (linked in with -Wl,--wrap) -----*/

int __real_fuse_reply_err(fuse_req_t req, int err);
int __real_fuse_reply_buf(fuse_req_t req, const char *buf, size_t size);
int __real_fuse_reply_write(fuse_req_t req, size_t count);

int __wrap_fuse_reply_err(fuse_req_t req, int err);
int __wrap_fuse_reply_buf(fuse_req_t req, const char *buf, size_t size);
int __wrap_fuse_reply_write(fuse_req_t req, size_t count);

int __wrap_fuse_reply_err(fuse_req_t req, int err)
{
    if (err && mm_cur >= 0)
        mm_failed = 1;
    return __real_fuse_reply_err(req, err);
}

int __wrap_fuse_reply_buf(fuse_req_t req, const char *buf, size_t size)
{
    if (mm_cur == MM_READ)
        __atomic_add_fetch(&mm_bytes_read, size, __ATOMIC_RELAXED);
    return __real_fuse_reply_buf(req, buf, size);
}

int __wrap_fuse_reply_write(fuse_req_t req, size_t count)
{
    if (mm_cur == MM_WRITE || mm_cur == MM_COPY_FILE_RANGE)
        __atomic_add_fetch(&mm_bytes_written, count, __ATOMIC_RELAXED);
    return __real_fuse_reply_write(req, count);
}

/*----- the handler wrappers -----*/

static uint64_t mm_enter(int op)
{
    mm_cur = op;
    mm_failed = 0;
    return keg_metrics_now_ns();
}

static void mm_leave(int op, uint64_t t0)
{
    struct mm_op_stats *s = &mm_stats[op];
    __atomic_add_fetch(&s->ops, 1, __ATOMIC_RELAXED);
    if (mm_failed)
        __atomic_add_fetch(&s->errors, 1, __ATOMIC_RELAXED);
    keg_metrics_observe(&s->latency, keg_metrics_now_ns() - t0);
    mm_cur = -1;
}

#define MM_WRAP(op, OP, params, args)                 \
    static void mm_w_##op params                      \
    {                                                 \
        uint64_t t0 = mm_enter(OP);                   \
        mm_real->op args;                             \
        mm_leave(OP, t0);                             \
    }

typedef struct fuse_file_info ffi;
MM_WRAP(lookup, MM_LOOKUP, (fuse_req_t r, fuse_ino_t p, const char *n), (r, p, n))
MM_WRAP(getattr, MM_GETATTR, (fuse_req_t r, fuse_ino_t i, ffi *fi), (r, i, fi))
MM_WRAP(setattr, MM_SETATTR, (fuse_req_t r, fuse_ino_t i, struct stat *a, int s, ffi *fi),
        (r, i, a, s, fi))
MM_WRAP(readlink, MM_READLINK, (fuse_req_t r, fuse_ino_t i), (r, i))
MM_WRAP(mknod, MM_MKNOD, (fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, dev_t d),
        (r, p, n, m, d))
MM_WRAP(mkdir, MM_MKDIR, (fuse_req_t r, fuse_ino_t p, const char *n, mode_t m), (r, p, n, m))
MM_WRAP(unlink, MM_UNLINK, (fuse_req_t r, fuse_ino_t p, const char *n), (r, p, n))
MM_WRAP(rmdir, MM_RMDIR, (fuse_req_t r, fuse_ino_t p, const char *n), (r, p, n))
MM_WRAP(symlink, MM_SYMLINK, (fuse_req_t r, const char *l, fuse_ino_t p, const char *n),
        (r, l, p, n))
MM_WRAP(rename, MM_RENAME,
        (fuse_req_t r, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn,
         unsigned int f), (r, p, n, np, nn, f))
MM_WRAP(link, MM_LINK, (fuse_req_t r, fuse_ino_t i, fuse_ino_t np, const char *nn),
        (r, i, np, nn))
MM_WRAP(open, MM_OPEN, (fuse_req_t r, fuse_ino_t i, ffi *fi), (r, i, fi))
MM_WRAP(create, MM_CREATE, (fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, ffi *fi),
        (r, p, n, m, fi))
MM_WRAP(read, MM_READ, (fuse_req_t r, fuse_ino_t i, size_t s, off_t o, ffi *fi),
        (r, i, s, o, fi))
MM_WRAP(write, MM_WRITE,
        (fuse_req_t r, fuse_ino_t i, const char *b, size_t s, off_t o, ffi *fi),
        (r, i, b, s, o, fi))
MM_WRAP(flush, MM_FLUSH, (fuse_req_t r, fuse_ino_t i, ffi *fi), (r, i, fi))
MM_WRAP(release, MM_RELEASE, (fuse_req_t r, fuse_ino_t i, ffi *fi), (r, i, fi))
MM_WRAP(fsync, MM_FSYNC, (fuse_req_t r, fuse_ino_t i, int d, ffi *fi), (r, i, d, fi))
MM_WRAP(fallocate, MM_FALLOCATE,
        (fuse_req_t r, fuse_ino_t i, int m, off_t o, off_t l, ffi *fi), (r, i, m, o, l, fi))
MM_WRAP(copy_file_range, MM_COPY_FILE_RANGE,
        (fuse_req_t r, fuse_ino_t ii, off_t oi, ffi *fii, fuse_ino_t io, off_t oo, ffi *fio,
         size_t l, int f), (r, ii, oi, fii, io, oo, fio, l, f))
MM_WRAP(lseek, MM_LSEEK, (fuse_req_t r, fuse_ino_t i, off_t o, int w, ffi *fi),
        (r, i, o, w, fi))
MM_WRAP(opendir, MM_OPENDIR, (fuse_req_t r, fuse_ino_t i, ffi *fi), (r, i, fi))
MM_WRAP(readdir, MM_READDIR, (fuse_req_t r, fuse_ino_t i, size_t s, off_t o, ffi *fi),
        (r, i, s, o, fi))
MM_WRAP(readdirplus, MM_READDIRPLUS, (fuse_req_t r, fuse_ino_t i, size_t s, off_t o, ffi *fi),
        (r, i, s, o, fi))
MM_WRAP(releasedir, MM_RELEASEDIR, (fuse_req_t r, fuse_ino_t i, ffi *fi), (r, i, fi))
MM_WRAP(fsyncdir, MM_FSYNCDIR, (fuse_req_t r, fuse_ino_t i, int d, ffi *fi), (r, i, d, fi))
MM_WRAP(statfs, MM_STATFS, (fuse_req_t r, fuse_ino_t i), (r, i))
MM_WRAP(setxattr, MM_SETXATTR,
        (fuse_req_t r, fuse_ino_t i, const char *n, const char *v, size_t s, int f),
        (r, i, n, v, s, f))
MM_WRAP(getxattr, MM_GETXATTR, (fuse_req_t r, fuse_ino_t i, const char *n, size_t s),
        (r, i, n, s))
MM_WRAP(listxattr, MM_LISTXATTR, (fuse_req_t r, fuse_ino_t i, size_t s), (r, i, s))
MM_WRAP(removexattr, MM_REMOVEXATTR, (fuse_req_t r, fuse_ino_t i, const char *n), (r, i, n))
MM_WRAP(getlk, MM_GETLK, (fuse_req_t r, fuse_ino_t i, ffi *fi, struct flock *l), (r, i, fi, l))
MM_WRAP(setlk, MM_SETLK, (fuse_req_t r, fuse_ino_t i, ffi *fi, struct flock *l, int s),
        (r, i, fi, l, s))
MM_WRAP(flock, MM_FLOCK, (fuse_req_t r, fuse_ino_t i, ffi *fi, int o), (r, i, fi, o))
MM_WRAP(forget, MM_FORGET, (fuse_req_t r, fuse_ino_t i, uint64_t n), (r, i, n))
MM_WRAP(forget_multi, MM_FORGET_MULTI, (fuse_req_t r, size_t c, struct fuse_forget_data *f),
        (r, c, f))

#define MM_SET(op) \
    if (real->op) \
        mm_table.op = mm_w_##op

const struct fuse_lowlevel_ops *mnt_metrics_ops(const struct fuse_lowlevel_ops *real)
{
    mm_real = real;
    mm_table = *real;       /* ops not wrapped below pass through uncounted */
    MM_SET(lookup); MM_SET(getattr); MM_SET(setattr); MM_SET(readlink); MM_SET(mknod);
    MM_SET(mkdir); MM_SET(unlink); MM_SET(rmdir); MM_SET(symlink); MM_SET(rename);
    MM_SET(link); MM_SET(open); MM_SET(create); MM_SET(read); MM_SET(write); MM_SET(flush);
    MM_SET(release); MM_SET(fsync); MM_SET(fallocate); MM_SET(copy_file_range);
    MM_SET(lseek); MM_SET(opendir); MM_SET(readdir); MM_SET(readdirplus);
    MM_SET(releasedir); MM_SET(fsyncdir); MM_SET(statfs); MM_SET(setxattr);
    MM_SET(getxattr); MM_SET(listxattr); MM_SET(removexattr); MM_SET(getlk); MM_SET(setlk);
    MM_SET(flock); MM_SET(forget); MM_SET(forget_multi);
    return &mm_table;
}

/*----- rendering -----*/

struct mm_ctx {
    struct keg_fs *fs;
    char           volume[160];       /* escaped label value */
};

static struct mm_ctx mm_ctx;
static struct keg_metrics_server *mm_server;

static void mm_u64(FILE *f, const char *name, const char *type, const char *help,
                   const char *vol, uint64_t v)
{
    char lab[200];
    snprintf(lab, sizeof(lab), "volume=\"%s\"", vol);
    keg_metrics_family(f, name, type, help);
    keg_metrics_sample_u64(f, name, lab, v);
}

static void mm_render_fuse(FILE *f, const char *vol)
{
    char lab[256];
    keg_metrics_family(f, "kegfs_fuse_ops_total", "counter", "FUSE requests handled, by op");
    for (int i = 0; i < MM_NOPS; i++) {
        snprintf(lab, sizeof(lab), "volume=\"%s\",op=\"%s\"", vol, mm_names[i]);
        keg_metrics_sample_u64(f, "kegfs_fuse_ops_total", lab,
                               __atomic_load_n(&mm_stats[i].ops, __ATOMIC_RELAXED));
    }
    keg_metrics_family(f, "kegfs_fuse_errors_total", "counter",
                       "FUSE requests answered with an error, by op");
    for (int i = 0; i < MM_NOPS; i++) {
        snprintf(lab, sizeof(lab), "volume=\"%s\",op=\"%s\"", vol, mm_names[i]);
        keg_metrics_sample_u64(f, "kegfs_fuse_errors_total", lab,
                               __atomic_load_n(&mm_stats[i].errors, __ATOMIC_RELAXED));
    }
    keg_metrics_family(f, "kegfs_fuse_op_duration_seconds", "histogram",
                       "time from a FUSE request's handler entry to its reply, by op");
    for (int i = 0; i < MM_NOPS; i++) {
        if (!__atomic_load_n(&mm_stats[i].latency.count, __ATOMIC_RELAXED))
            continue;
        snprintf(lab, sizeof(lab), "volume=\"%s\",op=\"%s\"", vol, mm_names[i]);
        keg_metrics_hist_samples(f, "kegfs_fuse_op_duration_seconds", lab,
                                 &mm_stats[i].latency);
    }
    mm_u64(f, "kegfs_read_bytes_total", "counter", "bytes returned to read requests", vol,
           __atomic_load_n(&mm_bytes_read, __ATOMIC_RELAXED));
    mm_u64(f, "kegfs_written_bytes_total", "counter",
           "bytes accepted by write and copy_file_range requests", vol,
           __atomic_load_n(&mm_bytes_written, __ATOMIC_RELAXED));
}

static void mm_render_store(FILE *f, const char *vol)
{
    static const char *const verbs[KEG_OBJ_VERB_N] = { "get", "put", "delete", "head", "list" };
    const struct keg_obj_verb_stats *v = keg_obj_metrics_stats(keg_fs_obj(mm_ctx.fs));
    char lab[256];
    if (!v)
        return;
    keg_metrics_family(f, "kegfs_object_requests_total", "counter",
                       "requests that reached the object store, by verb");
    for (int i = 0; i < KEG_OBJ_VERB_N; i++) {
        snprintf(lab, sizeof(lab), "volume=\"%s\",verb=\"%s\"", vol, verbs[i]);
        keg_metrics_sample_u64(f, "kegfs_object_requests_total", lab,
                               __atomic_load_n(&v[i].requests, __ATOMIC_RELAXED));
    }
    keg_metrics_family(f, "kegfs_object_errors_total", "counter",
                       "object store requests that failed (a missing key aside), by verb");
    for (int i = 0; i < KEG_OBJ_VERB_N; i++) {
        snprintf(lab, sizeof(lab), "volume=\"%s\",verb=\"%s\"", vol, verbs[i]);
        keg_metrics_sample_u64(f, "kegfs_object_errors_total", lab,
                               __atomic_load_n(&v[i].errors, __ATOMIC_RELAXED));
    }
    keg_metrics_family(f, "kegfs_object_bytes_total", "counter",
                       "payload bytes of successful object gets and puts");
    for (int i = 0; i < 2; i++) {
        snprintf(lab, sizeof(lab), "volume=\"%s\",verb=\"%s\"", vol, verbs[i]);
        keg_metrics_sample_u64(f, "kegfs_object_bytes_total", lab,
                               __atomic_load_n(&v[i].bytes, __ATOMIC_RELAXED));
    }
    keg_metrics_family(f, "kegfs_object_retries_total", "counter",
                       "requests sent to the object store again after a transient failure, "
                       "by verb");
    for (int i = 0; i < KEG_OBJ_VERB_N; i++) {
        snprintf(lab, sizeof(lab), "volume=\"%s\",verb=\"%s\"", vol, verbs[i]);
        keg_metrics_sample_u64(f, "kegfs_object_retries_total", lab,
                               __atomic_load_n(&v[i].retries, __ATOMIC_RELAXED));
    }
    keg_metrics_family(f, "kegfs_object_request_duration_seconds", "histogram",
                       "object store request latency, by verb");
    for (int i = 0; i < KEG_OBJ_VERB_N; i++) {
        if (!__atomic_load_n(&v[i].latency.count, __ATOMIC_RELAXED))
            continue;
        snprintf(lab, sizeof(lab), "volume=\"%s\",verb=\"%s\"", vol, verbs[i]);
        keg_metrics_hist_samples(f, "kegfs_object_request_duration_seconds", lab,
                                 &v[i].latency);
    }
}

static void mm_render_layers(FILE *f, const char *vol)
{
    struct keg_stack_stats s;
    struct keg_fs_mem_stats m;
    keg_stack_stats(keg_fs_obj(mm_ctx.fs), &s);
    if (s.has_cache) {
        mm_u64(f, "kegfs_cache_hits_total", "counter", "SSD cache hits", vol, s.cache_hits);
        mm_u64(f, "kegfs_cache_misses_total", "counter",
               "SSD cache misses (fetches from the object store)", vol, s.cache_misses);
        mm_u64(f, "kegfs_cache_evictions_total", "counter", "SSD cache evictions", vol,
               s.cache_evictions);
        mm_u64(f, "kegfs_cache_corrupt_total", "counter",
               "SSD cache files that failed verification (refetched)", vol, s.cache_corrupt);
        mm_u64(f, "kegfs_cache_bytes", "gauge", "bytes held by the SSD cache", vol,
               s.cache_bytes);
        mm_u64(f, "kegfs_cache_budget_bytes", "gauge", "the SSD cache budget", vol,
               s.cache_budget);
    }
    if (s.has_writeback) {
        mm_u64(f, "kegfs_writeback_staged_bytes", "gauge",
               "bytes staged on local disk, not yet uploaded", vol, s.staged_bytes);
        mm_u64(f, "kegfs_writeback_staged_objects", "gauge",
               "objects staged on local disk, not yet uploaded", vol, s.staged_objects);
        mm_u64(f, "kegfs_writeback_failing_objects", "gauge",
               "staged objects whose last upload failed (retried)", vol, s.failing_objects);
        mm_u64(f, "kegfs_writeback_uploaded_bytes_total", "counter",
               "bytes uploaded by the writeback", vol, s.uploaded_bytes);
        mm_u64(f, "kegfs_writeback_upload_errors_total", "counter",
               "failed upload attempts", vol, s.upload_errors);
        mm_u64(f, "kegfs_writeback_upload_rate_bytes", "gauge",
               "upload rate over the last ~5 s, bytes per second", vol, s.upload_rate_bps);
        keg_metrics_family(f, "kegfs_writeback_oldest_staged_seconds", "gauge",
                           "how long the oldest staged bytes have waited for their upload "
                           "(0: nothing staged)");
        char lab[200];
        snprintf(lab, sizeof(lab), "volume=\"%s\"", vol);
        keg_metrics_sample(f, "kegfs_writeback_oldest_staged_seconds", lab,
                           (double)s.oldest_staged_ms / 1000.0);
        mm_u64(f, "kegfs_writeback_waiting_writes", "gauge",
               "writes blocked because staging is full", vol, s.waiting_puts);
        keg_metrics_family(f, "kegfs_writeback_stage_duration_seconds", "histogram",
                           "time to stage one object on local disk (a wait for room "
                           "included)");
        keg_metrics_hist_samples(f, "kegfs_writeback_stage_duration_seconds", lab,
                                 s.stage_latency);
    }
    keg_fs_mem_stats(mm_ctx.fs, &m);
    mm_u64(f, "kegfs_memory_budget_bytes", "gauge", "the --buffer-size budget", vol, m.budget);
    mm_u64(f, "kegfs_memory_write_buffer_bytes", "gauge", "bytes held by write buffers", vol,
           m.write_bytes);
    mm_u64(f, "kegfs_memory_read_cache_bytes", "gauge",
           "bytes held by the memory read cache", vol, m.read_bytes);
    mm_u64(f, "kegfs_memory_cache_hits_total", "counter",
           "block lookups the memory read cache answered (cached or already being fetched)",
           vol, m.read_hits);
    mm_u64(f, "kegfs_memory_cache_misses_total", "counter",
           "block lookups that fetched the block (from the SSD cache or the object store)", vol,
           m.read_misses);
    mm_u64(f, "kegfs_memory_cache_prefetched_total", "counter",
           "blocks read ahead into the memory read cache before a read asked for them", vol,
           m.read_prefetched);
    mm_u64(f, "kegfs_memory_cache_evictions_total", "counter",
           "blocks the memory read cache freed to make room", vol, m.read_evicted);
    mm_u64(f, "kegfs_memory_cache_dropped_total", "counter",
           "blocks freed behind sequential readers that had finished them", vol,
           m.read_dropped);
}

static void mm_render_meta(FILE *f, const char *vol)
{
    const struct keg_meta_op_stats *st = keg_meta_stats(keg_fs_meta(mm_ctx.fs));
    char lab[256];
    if (!st)
        return;
    keg_metrics_family(f, "kegfs_meta_requests_total", "counter",
                       "requests answered by the metadata engine, by op");
    for (int i = 0; i < KEG_META_OP_N; i++) {
        snprintf(lab, sizeof(lab), "volume=\"%s\",op=\"%s\"", vol, keg_meta_op_name(i));
        keg_metrics_sample_u64(f, "kegfs_meta_requests_total", lab,
                               __atomic_load_n(&st[i].requests, __ATOMIC_RELAXED));
    }
    keg_metrics_family(f, "kegfs_meta_errors_total", "counter",
                       "metadata requests that failed in the engine (unreachable, corrupt, "
                       "out of memory; not answers such as ENOENT), by op");
    for (int i = 0; i < KEG_META_OP_N; i++) {
        snprintf(lab, sizeof(lab), "volume=\"%s\",op=\"%s\"", vol, keg_meta_op_name(i));
        keg_metrics_sample_u64(f, "kegfs_meta_errors_total", lab,
                               __atomic_load_n(&st[i].errors, __ATOMIC_RELAXED));
    }
    keg_metrics_family(f, "kegfs_meta_request_duration_seconds", "histogram",
                       "metadata engine request latency, by op");
    for (int i = 0; i < KEG_META_OP_N; i++) {
        if (!__atomic_load_n(&st[i].latency.count, __ATOMIC_RELAXED))
            continue;
        snprintf(lab, sizeof(lab), "volume=\"%s\",op=\"%s\"", vol, keg_meta_op_name(i));
        keg_metrics_hist_samples(f, "kegfs_meta_request_duration_seconds", lab,
                                 &st[i].latency);
    }
}

static void mm_render_bg(FILE *f, const char *vol)
{
    struct keg_fs_bg_stats b;
    char lab[200];
    keg_fs_bg_stats(mm_ctx.fs, &b);
    mm_u64(f, "kegfs_compaction_queue_chunks", "gauge",
           "chunks queued for compaction or being compacted", vol, b.compact_queued);
    mm_u64(f, "kegfs_compaction_parked_chunks", "gauge",
           "fragmented chunks parked until they are worth merging", vol, b.compact_parked);
    mm_u64(f, "kegfs_compactions_total", "counter", "chunks compacted", vol, b.compact_done);
    mm_u64(f, "kegfs_compactions_abandoned_total", "counter",
           "compactions abandoned because the chunk changed meanwhile", vol,
           b.compact_abandoned);
    mm_u64(f, "kegfs_compaction_written_bytes_total", "counter",
           "bytes written by compactions", vol, b.compact_bytes);
    mm_u64(f, "kegfs_deletion_queue_inodes", "gauge",
           "unlinked inodes waiting to be purged by this mount", vol, b.purge_queued);
    mm_u64(f, "kegfs_deleted_slices_total", "counter",
           "slices of the volume's deletion queue whose objects this mount deleted", vol,
           b.deleted_slices);
    mm_u64(f, "kegfs_lock_releases_pending", "gauge",
           "lock releases the metadata engine failed, tried again every second", vol,
           b.unlocks_pending);
    if (b.has_session) {
        snprintf(lab, sizeof(lab), "volume=\"%s\"", vol);
        keg_metrics_family(f, "kegfs_session_heartbeat_age_seconds", "gauge",
                           "time since the session's last successful heartbeat");
        keg_metrics_sample(f, "kegfs_session_heartbeat_age_seconds", lab,
                           (double)b.heartbeat_age_ns / 1e9);
    }
}

static void mm_render(void *arg, FILE *f)
{
    struct mm_ctx *c = arg;
    mm_render_fuse(f, c->volume);
    mm_render_meta(f, c->volume);
    mm_render_store(f, c->volume);
    mm_render_layers(f, c->volume);
    mm_render_bg(f, c->volume);
}

int mnt_metrics_start(const char *addr, const char *volume, struct keg_fs *fs)
{
    unsigned port = 0;
    mm_ctx.fs = fs;
    keg_metrics_escape(volume, mm_ctx.volume, sizeof(mm_ctx.volume));
    int rc = keg_metrics_start(addr, mm_render, &mm_ctx, &mm_server, &port);
    if (rc == 0 && strncmp(addr, "unix:", 5) == 0)
        KEG_INFO("metrics on the unix socket %s (GET /metrics)", addr + 5);
    else if (rc == 0)
        KEG_INFO("metrics on http://%s/metrics (port %u)", addr, port);
    return rc;
}

void mnt_metrics_stop(void)
{
    keg_metrics_stop(mm_server);
    mm_server = NULL;
}
