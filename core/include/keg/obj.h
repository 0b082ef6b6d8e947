/* obj.h -- the object store interface (struct keg_obj_ops), its wrappers and registry.
 *
 * DESIGN
 * An object store maps keys ("<volume>/chunks/...") to immutable byte strings.
 * Stores stack (curl connection filters / s3backer): a cache layer is a store
 * whose `inner` is the next layer down and whose unimplemented ops pass through
 * (keg_obj_def_*).  Backends: file (a local directory), s3, mem (tests) and
 * faulty (wraps any store and injects errors/latency/corruption by seed).
 * The stack is assembled in one place (core/stack.c).
 *
 * Every op may be called from many threads at once on one instance.
 * Returns 0 / a byte count >= 0, or -errno:
 *   -ENOENT     the key does not exist (get/head only; del never returns it)
 *   -EACCES     credentials rejected (403)          -- not retried
 *   -EINVAL     request rejected (400)              -- not retried
 *   -EAGAIN     throttled / 5xx after retries ran out
 *   -ETIMEDOUT  no answer within the deadline
 *   -EHOSTDOWN  get (s3): a get of this key ran out of retries moments ago and the
 *               store has not answered since; failed at once (not transient)
 *   -EIO        anything else (message in the log, never secrets)
 *   -ENOSPC     the store is full
 */
#ifndef KEG_OBJ_H
#define KEG_OBJ_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "keg/keg.h"

struct keg_obj;

/* Configuration for opening a store.  Strings are BORROWED during open(). */
struct keg_obj_conf {
    const char *bucket;          /* file: absolute directory; s3: endpoint URL incl. bucket */
    const char *access_key;      /* s3 */
    const char *secret_key;      /* s3 */
    const char *session_token;   /* s3, optional */
    const char *region;          /* s3, optional ("us-east-1") */
    const char *ca_file;         /* s3, optional CA bundle */
    int         insecure;        /* s3: skip TLS verification */
    unsigned    concurrency;     /* s3: connection pool size (default 16) */
    unsigned    retry_deadline_ms; /* s3, retry: total time one request may spend retrying
                                    * (default 60000) */
    int         fsync;           /* file: fsync each object before rename */
    int         spare_fill;      /* file: open the pool of spare files at the first put and
                                  * keep it stocked for a stream of new objects
                                  * (core/ssdf/ssd_file.h); 0: the pool holds only the
                                  * files of deleted objects */
    /* faulty: */
    uint64_t    seed;
    double      err_prob;        /* probability of a transient -EIO/-EAGAIN per op */
    double      corrupt_prob;    /* probability that a get flips a byte */
    unsigned    delay_ms;        /* added latency per op */
};

typedef int keg_obj_list_cb(void *arg, const char *key, uint64_t size);

#define KEG_OBJ_CAP_RANGE_GET (1u << 0)
#define KEG_OBJ_CAP_LIST      (1u << 1)
#define KEG_OBJ_CAP_DURABLE   (1u << 2)   /* a successful put is durable on return */
#define KEG_OBJ_CAP_RETRIES   (1u << 3)   /* retries transient errors inside each request
                                           * (s3); the stack adds no retry layer above it */

/* 1 if rc is an error that a later attempt of the same request may not get:
 * -EAGAIN, -ETIMEDOUT, -EIO, -ECONNRESET, -ECONNREFUSED, -EINTR (the retry
 * layer, obj_retry.c, retries these within its deadline). */
int keg_obj_transient(int rc);

/* Retries, counted per thread: a retry loop (obj_s3.c, obj_retry.c) calls
 * keg_obj_note_retry once for each attempt it repeats, in the thread that made
 * the request; keg_obj_thread_retries is the calling thread's count so far, so
 * a layer above learns a request's retries from the difference across it. */
void     keg_obj_note_retry(void);
uint64_t keg_obj_thread_retries(void);

/* put_file's callback: move the caller's file to dst.  Returns 0 or -errno
 * (then the file was not moved). */
typedef int keg_obj_take_fn(void *arg, const char *dst);

/* How a remote store is doing (ops->health). */
struct keg_obj_health {
    uint64_t failing_ms;      /* how long requests have been failing without a success
                               * (0: the store answers) */
    uint64_t retrying;        /* requests retrying right now */
    uint64_t retrying_puts;   /* ... of them, puts (uploads) */
    uint64_t retries;         /* attempts that were retried, since open */
    uint64_t failed;          /* requests that ran out of retries, since open */
};

struct keg_obj_ops {
    const char *name;            /* "file", "s3", "mem", "faulty", "cache_mem", ... */
    unsigned    version;
    unsigned    caps;            /* KEG_OBJ_CAP_* */
    size_t      priv_size;       /* zeroed bytes at o->priv */

    /* Open with conf.  For layers, o->inner is set before open().
     * Returns 0 or -errno (message logged). */
    int     (*open)(struct keg_obj *o, const struct keg_obj_conf *conf);
    /* Must not fail; frees everything private (not o->inner). */
    void    (*close)(struct keg_obj *o);
    /* Read [off, off+len) of key into buf.  Returns bytes read (< len only at
     * the end of the object), -ENOENT if the key does not exist. */
    ssize_t (*get)(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len);
    /* Store the whole object (atomically: readers see old or new, never part). */
    int     (*put)(struct keg_obj *o, const char *key, const void *buf, size_t len);
    /* Delete; a missing key is success. */
    int     (*del)(struct keg_obj *o, const char *key);
    /* Delete these n keys; missing keys are success.  Returns 0 when every key
     * is gone, else -errno: some may be gone, and deleting them again is safe.
     * Optional (NULL: del of each key, keg_obj_del_each). */
    int     (*del_keys)(struct keg_obj *o, const char *const *keys, size_t n);
    /* Size of key, -ENOENT. */
    int     (*head)(struct keg_obj *o, const char *key, uint64_t *size);
    /* Every key starting with prefix, in byte order; cb returning non-zero
     * stops (returned).  Optional (NULL: -ENOSYS). */
    int     (*list)(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg);
    /* Make every put that returned durable (file: syncfs).  Optional. */
    int     (*sync)(struct keg_obj *o);
    /* Make the puts of these n keys that returned durable (an fsync of one
     * file, or compaction's new blocks, need no more).  A key that is gone is
     * not an error.  Optional (NULL: sync, which does more). */
    int     (*sync_keys)(struct keg_obj *o, const char *const *keys, size_t n);
    /* put() from a caller that also holds the object in a local file in the
     * SSD-file format (core/ssdf/ssd_format.h).  After the object is
     * stored, a layer that keeps local copies may call take(arg, dst) to have
     * that file moved (rename, same filesystem) to dst and adopt it instead of
     * writing a copy of its own.  Returns 1 if the file was taken, 0 if it was
     * not (still the caller's), -errno if the put failed.  Optional (NULL: put). */
    int     (*put_file)(struct keg_obj *o, const char *key, const void *buf, size_t len,
                        keg_obj_take_fn *take, void *arg);
    /* Fills *h: failures and retries of a remote store.  Optional (NULL: a local
     * store or a layer; keg_stack_stats asks the layers below).  Returns 0. */
    int     (*health)(struct keg_obj *o, struct keg_obj_health *h);
    /* Store the object only if key does not exist yet, atomically (S3
     * If-None-Match: *, file: link(2) of the written temp file): -EEXIST if it
     * does.  For small objects that claim a name (the volume marker), never
     * for blocks.  Optional: a layer without it passes the call to the layer
     * below (keg_obj_put_new); a bottom store without it is -ENOSYS. */
    int     (*put_new)(struct keg_obj *o, const char *key, const void *buf, size_t len);
};

struct keg_obj {
    const struct keg_obj_ops *ops;   /* MUST be first */
    struct keg_obj           *inner; /* next layer down, or NULL */
    void                     *priv;  /* ops->priv_size bytes, owned by the core */
};

/* Registry: backends by name ("file", "s3", "mem", "faulty", "metrics", "retry"). */
int keg_obj_register(const struct keg_obj_ops *ops);
const struct keg_obj_ops *keg_obj_find(const char *name);
/* Whether name is a store a volume may use (its format's storage): 1 compiled
 * in, 0 known but not compiled into this build, -ENOENT unknown. */
int keg_obj_store_known(const char *name);
/* The names of those stores for a message ("file, s3 or mem"), truncated to size. */
void keg_obj_store_names(char *buf, size_t size);

/* Open the store `name` with conf, on top of inner (NULL for a bottom store;
 * TAKES inner: it is closed with the new store, and on failure).
 * OWNERSHIP: caller closes with keg_obj_close(), which closes the whole stack. */
int  keg_obj_open(const char *name, const struct keg_obj_conf *conf, struct keg_obj *inner,
                  struct keg_obj **out);
void keg_obj_close(struct keg_obj *o);

/* Pass-through defaults for layers (call o->inner). */
ssize_t keg_obj_def_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len);
int     keg_obj_def_put(struct keg_obj *o, const char *key, const void *buf, size_t len);
int     keg_obj_def_del(struct keg_obj *o, const char *key);
int     keg_obj_def_head(struct keg_obj *o, const char *key, uint64_t *size);
int     keg_obj_def_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg);
int     keg_obj_def_sync(struct keg_obj *o);
int     keg_obj_def_sync_keys(struct keg_obj *o, const char *const *keys, size_t n);

/* Checked wrappers: the rest of the code calls these, never o->ops->x. */
static inline ssize_t keg_obj_get(struct keg_obj *o, const char *key, uint64_t off, void *buf,
                                  size_t len)
{
    ssize_t n = o->ops->get(o, key, off, buf, len);
    KEG_ASSERT(n < 0 ? n >= -4095 : (size_t)n <= len);
    return n;
}
static inline int keg_obj_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    int rc = o->ops->put(o, key, buf, len);
    KEG_ASSERT(rc <= 0 && rc >= -4095);
    return rc;
}
static inline int keg_obj_put_file(struct keg_obj *o, const char *key, const void *buf,
                                   size_t len, keg_obj_take_fn *take, void *arg)
{
    int rc = o->ops->put_file ? o->ops->put_file(o, key, buf, len, take, arg)
                              : o->ops->put(o, key, buf, len);
    KEG_ASSERT(rc <= 1 && rc >= -4095);
    return rc;
}
static inline int keg_obj_del(struct keg_obj *o, const char *key)
{
    int rc = o->ops->del(o, key);
    KEG_ASSERT(rc <= 0 && rc != -ENOENT);
    return rc;
}
/* put_new of the first layer from o down that has it: layers keep no copy of
 * the objects it is for.  Returns 0, -EEXIST, -ENOSYS (no layer has it), -errno. */
static inline int keg_obj_put_new(struct keg_obj *o, const char *key, const void *buf,
                                  size_t len)
{
    while (!o->ops->put_new && o->inner)
        o = o->inner;
    int rc = o->ops->put_new ? o->ops->put_new(o, key, buf, len) : -ENOSYS;
    KEG_ASSERT(rc <= 0 && rc >= -4095);
    return rc;
}
/* del of each key, on to the end; returns the first error. */
int keg_obj_del_each(struct keg_obj *o, const char *const *keys, size_t n);
static inline int keg_obj_del_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    if (n == 0)
        return 0;
    int rc = o->ops->del_keys ? o->ops->del_keys(o, keys, n) : keg_obj_del_each(o, keys, n);
    KEG_ASSERT(rc <= 0 && rc != -ENOENT);
    return rc;
}
static inline int keg_obj_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    return o->ops->head ? o->ops->head(o, key, size) : -ENOSYS;
}
static inline int keg_obj_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb,
                               void *arg)
{
    return o->ops->list ? o->ops->list(o, prefix, cb, arg) : -ENOSYS;
}
static inline int keg_obj_sync(struct keg_obj *o)
{
    return o->ops->sync ? o->ops->sync(o) : 0;
}
static inline int keg_obj_sync_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    if (n == 0)
        return 0;
    return o->ops->sync_keys ? o->ops->sync_keys(o, keys, n) : keg_obj_sync(o);
}

/*----------------------------------------------------------------------------
 * Blocks: the encoding of file data in objects (core/obj/block.c)
 *
 * A block object is a 48-byte header followed by the payload (version 2):
 *   0  u32 magic "KEGB" (0x4247454b little-endian)
 *   4  u8  version (2)
 *   5  u8  codec (0 none, 1 lz4, 2 zstd)
 *   6  u16 header length (48)
 *   8  u32 raw length (bytes of file data: the key's <blen>)
 *  12  u32 CRC32C of the raw bytes
 *  16  16  volume UUID                    \  the block's identity: what key
 *  32  u64 slice id                        >  it was written for (with the
 *  40  u32 block index                    /   raw length)
 *  44  u32 CRC32C of header bytes 0..43
 *  48  payload (raw bytes, or compressed)
 * All integers little-endian.  A reader names the identity it expects
 * (struct keg_block_id) and any difference is -EIO, like a CRC mismatch: a
 * valid block of another key, file or volume is never returned as this one.
 * Version 1 (written before identities: a 16-byte header, bytes 0..15 as
 * above with u16 reserved = 0 at 6) is still read, but only on volumes whose
 * format has block_version < 2 (v1_ok).  See docs/internals/OBJSTORE.md.
 *--------------------------------------------------------------------------*/

#define KEG_BLOCK_HDR    48     /* header of the blocks written (version 2) */
#define KEG_BLOCK_HDR_V1 16     /* header of version-1 blocks (read only) */
#define KEG_BLOCK_VERSION 2     /* keg_format.block_version of new volumes */
#define KEG_CODEC_NONE 0
#define KEG_CODEC_LZ4  1
#define KEG_CODEC_ZSTD 2

/* The identity a block is bound to: the key it is stored under, in its volume. */
struct keg_block_id {
    uint8_t  vol[16];           /* volume UUID (keg_block_vol_uuid) */
    uint64_t slice;             /* slice id */
    uint32_t indx;              /* block index in the slice */
    uint32_t blen;              /* raw length */
    int      v1_ok;             /* also accept version-1 blocks (no identity): volumes
                                   formatted before block_version 2 */
};

uint32_t keg_crc32c(uint32_t crc, const void *buf, size_t len);
/* "none"/"lz4"/"zstd" -> KEG_CODEC_*, or -EINVAL. */
int keg_codec_parse(const char *name);
/* The 16 bytes of a volume's UUID string ("8-4-4-4-12" hex digits).  A string
 * that is not a UUID (volumes made by hand, tests) is hashed into 16 bytes,
 * so every string has one stable value.  Returns 0, or 1 if it was hashed. */
int keg_block_vol_uuid(const char *uuid, uint8_t out[16]);
/* Largest encoded size for raw_len bytes with codec. */
size_t keg_block_bound(int codec, size_t raw_len);
/* Encode raw (raw_len == bid->blen bytes) for identity bid into out
 * (capacity keg_block_bound()).  *out_len = object size.
 * Returns 0 or -EINVAL (codec, length, capacity). */
int keg_block_encode(int codec, const struct keg_block_id *bid, const void *raw, size_t raw_len,
                     void *out, size_t out_cap, size_t *out_len);
/* Seal an uncompressed block in place: obj holds KEG_BLOCK_HDR bytes of room
 * followed by bid->blen raw bytes; the header is written into the room.  The
 * result is what keg_block_encode(KEG_CODEC_NONE) makes, without a copy.
 * Returns the object size. */
size_t keg_block_seal(void *obj, const struct keg_block_id *bid);
/* Verify and decode an object into raw (capacity raw_cap >= raw length).
 * bid: the identity expected (NULL: any identity, integrity only -- tools).
 * Returns the raw length, or -EIO (bad magic, CRC mismatch, truncated,
 * undecodable, another identity, a version-1 block where !bid->v1_ok: the
 * caller logs the key, keg_block_why() says what is wrong). */
ssize_t keg_block_decode(const void *obj, size_t obj_len, const struct keg_block_id *bid,
                         void *raw, size_t raw_cap);
/* Verify an object of codec none where it lies: the raw bytes are the payload,
 * at obj + keg_block_hdr_len(obj) (no second buffer, no copy).  Same checks as
 * keg_block_decode (header, identity, length <= raw_cap, CRC32C of the raw bytes).
 * Returns the raw length, -EIO, or -ENOTSUP for a sound header of a compressed
 * codec (lz4, zstd: decode it with keg_block_decode into another buffer). */
ssize_t keg_block_decode_inplace(const void *obj, size_t obj_len,
                                 const struct keg_block_id *bid, size_t raw_cap);
/* Header length of a block that passed keg_block_decode_inplace (16 or 48). */
size_t keg_block_hdr_len(const void *obj);
/* Checks only the header in obj[0..len) (len >= KEG_BLOCK_HDR, or the whole
 * object if shorter): what gc reads before it deletes an object.
 * Returns 0 (a version-2 header of exactly identity bid), 1 (a sound
 * version-1 header: it carries no identity), or -EIO (anything else). */
int keg_block_check_header(const void *obj, size_t len, const struct keg_block_id *bid);
/* The volume UUID in a sound header in obj[0..len) (what gc reads before it
 * deletes an object).  Returns 0 (version 2: vol set), 1 (a version-1
 * header: no identity), or -EIO (not a sound block header). */
int keg_block_header_volume(const void *obj, size_t len, uint8_t vol[16]);
/* Why obj fails keg_block_decode for bid, in words, into buf (size bytes):
 * e.g. "written for block 12_0_4096 of volume <uuid>".  Returns buf. */
const char *keg_block_why(const void *obj, size_t obj_len, const struct keg_block_id *bid,
                          char *buf, size_t size);

/* Object key of block `indx` (of length blen) of slice id in volume vol:
 * "<vol>/chunks/<id/1e6>/<id/1e3>/<id>_<indx>_<blen>".  Returns snprintf's. */
int keg_block_key(char *buf, size_t size, const char *vol, uint64_t id, uint32_t indx,
                  uint32_t blen);
/* Parse a key made by keg_block_key (after the "<vol>/chunks/" prefix
 * is stripped or not).  Returns 0 or -EINVAL. */
int keg_block_key_parse(const char *key, uint64_t *id, uint32_t *indx, uint32_t *blen);

/*----------------------------------------------------------------------------
 * The volume marker (core/obj/block.c): the object "<name>/kegfs.volume"
 * claims the key prefix "<name>/" of a bucket for one volume, named by its
 * UUID.  Text: "kegfs-volume 1\nname=<name>\nuuid=<uuid>\n".  format
 * creates it (put_new), and nothing deletes objects under a prefix whose
 * marker names another volume (gc, CSI DeleteVolume).
 *--------------------------------------------------------------------------*/

#define KEG_VOLUME_MARKER "kegfs.volume"

/* The marker's key for volume name.  Returns snprintf's. */
int keg_volume_marker_key(char *buf, size_t size, const char *name);
/* The UUID the marker of volume name holds, into uuid (capacity 40, "" on error).
 * Returns 0, -ENOENT (no marker), -EIO (not a marker), or -errno of the store. */
int keg_volume_marker_read(struct keg_obj *o, const char *name, char uuid[40]);
/* Claims prefix "<name>/" for uuid: creates the marker (If-None-Match) unless
 * it exists.  Returns 0 (created, or it names uuid already), -EEXIST (it
 * names another volume: other = its UUID), -EIO (an object that is not a
 * marker is there), -errno. */
int keg_volume_marker_claim(struct keg_obj *o, const char *name, const char *uuid,
                            char other[40]);
/* Returns 0 if the marker names uuid, -EEXIST (another: other = its UUID),
 * -ENOENT (no marker), -EIO, -errno. */
int keg_volume_marker_check(struct keg_obj *o, const char *name, const char *uuid,
                            char other[40]);

#endif
