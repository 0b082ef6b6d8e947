/* dump.h -- dump a volume's whole namespace as JSON, and load such a dump into
 * an empty metadata engine (`kegfs dump` / `kegfs load`).
 *
 * Both directions use only the keg_meta_ops vtable, so a volume moves between
 * any two engines (sqlite3 -> redis -> sqlite3) without touching object data:
 * the dump keeps the volume's name, uuid, inode numbers and slice ids, which is
 * all that the object keys depend on.  The JSON format is specified in
 * docs/internals/DUMP.md.  Input and output are streamed (yajl): memory does
 * not grow with the size of the tree, only with its depth, the number of
 * hard-linked inodes (dump) and the number of distinct slices (load).
 */
#ifndef KEG_DUMP_H
#define KEG_DUMP_H

#include <stdint.h>
#include <stdio.h>

#include "keg/meta.h"

/* What was dumped or loaded.  Also written at the end of a dump ("totals")
 * and checked by load. */
struct keg_dump_stats {
    uint64_t entries;       /* directory entries incl. the root and hard links */
    uint64_t dirs;          /* directories incl. the root */
    uint64_t files;         /* regular files (inodes, not links) */
    uint64_t symlinks;
    uint64_t others;        /* fifos, sockets, character and block devices */
    uint64_t links;         /* extra names of hard-linked inodes */
    uint64_t xattrs;        /* extended attributes (name/value pairs) */
    uint64_t bytes;         /* sum of the sizes of the regular files */
    uint64_t slices;        /* slice records of every chunk (holes included) */
};

/* Progress: dump calls it with done = entries dumped, total = the volume's
 * inode count + 1 (statfs; may be exceeded on a live volume); load with
 * done = input bytes parsed and total = the input's size (0 if unknown, e.g.
 * a pipe).  Called at most every 1000 entries / 64 KiB and once at the end. */
typedef void keg_dump_progress_fn(void *arg, const struct keg_dump_stats *st, uint64_t done,
                                  uint64_t total);

/* keg_meta_dump flags */
#define KEG_DUMP_KEEP_SECRETS (1u << 0)  /* write access_key/secret_key/session_token */
#define KEG_DUMP_PRETTY       (1u << 1)  /* indented JSON */

/* keg_meta_load flags */
#define KEG_LOAD_KEEP_PARTIAL (1u << 0)  /* on failure keep what was loaded (debugging) */

/* Write the volume in m as one JSON document to out.  Needs no session; the
 * volume should not be mounted (a live volume gives an inconsistent dump, but
 * never a wrong one for the files that did not change).  Unlinked-but-open
 * inodes, sessions, locks and the deletion queue are not dumped.  st (may be
 * NULL) gets the totals.  Without KEG_DUMP_KEEP_SECRETS the storage
 * credentials are written blank and "secrets_omitted": true says so.
 * BORROWS: m, out (not closed; flushed).
 * Returns 0, -ENOENT (not formatted), -EIO (write error on out), or the
 * engine's -errno; the cause is logged. */
int keg_meta_dump(struct keg_meta *m, FILE *out, unsigned flags, keg_dump_progress_fn *progress,
                  void *arg, struct keg_dump_stats *st);

/* Read one dump from in and recreate it in m, which must hold no volume:
 * format_init(force=0) with the dumped format, every inode under its original
 * number, attributes (times included), xattrs, symlink targets, chunks and
 * slice references, then the id counters (alloc_ids afterwards hands out ids
 * above every dumped one).  The totals at the end of the dump are checked.
 * On any failure the partially loaded volume is destroyed again (unless
 * KEG_LOAD_KEEP_PARTIAL), so the target is left empty.  st (may be NULL) gets
 * what was loaded.  *secrets_omitted (may be NULL) = 1 if the dump held no
 * storage credentials.
 * BORROWS: m, in.
 * Returns 0, -EEXIST (m already holds a volume: nothing is changed),
 * -EINVAL (malformed, truncated or inconsistent JSON; message names the
 * input offset), -EIO (read error), or the engine's -errno. */
int keg_meta_load(struct keg_meta *m, FILE *in, unsigned flags, keg_dump_progress_fn *progress,
                  void *arg, struct keg_dump_stats *st, int *secrets_omitted);

#endif
