/* admin.h -- volume maintenance: garbage collection, consistency check, cache warm-up.
 *
 * DESIGN
 * These are the library halves of `kegfs gc`, `kegfs fsck` and `kegfs warmup`
 * (core/fs/gc.c).  They work on an open volume (keg_fs_new; tools open it with
 * no_session) and only through the engine and object-store interfaces, so
 * they run against every engine and store.
 *
 * Which files exist is found by walking the directory tree from the root
 * (readdir, engine-agnostic), hard links counted once by inode number.  Files
 * that are unlinked but still open on some mounter ("pending" inodes) are not
 * in the tree: their slices look unreferenced to gc (see keg_fs_gc).
 *
 * Long operations report progress through a keg_progress_fn (called from one
 * thread at a time, at most every ~1% and at the end).
 */
#ifndef KEG_ADMIN_H
#define KEG_ADMIN_H

#include <stdint.h>

struct keg_fs;

/* done of total units (total 0: not known yet); what names the phase
 * ("scanning files", "listing objects", "checking blocks", ...). */
typedef void keg_progress_fn(void *arg, uint64_t done, uint64_t total, const char *what);

/* One finding: kind is "leak", "missing", "corrupt", "deleted", "kept", "error";
 * key the object key (or NULL); detail a human-readable line (file paths that
 * reference the object, the error).  BORROWS: all strings (valid during the call). */
typedef void keg_admin_item_fn(void *arg, const char *kind, const char *key, const char *detail);

struct keg_gc_report {
    /* in (set by the caller; zero is fine) */
    unsigned           threads;        /* parallel deletes (0: 4) */
    keg_admin_item_fn *item;           /* called for every leak (and deletion failure) */
    void              *item_arg;
    /* out */
    uint64_t files;                    /* regular files scanned (hard links once) */
    uint64_t dirs;
    uint64_t slices;                   /* distinct slices referenced */
    uint64_t objects;                  /* objects listed under <vol>/chunks/ */
    uint64_t object_bytes;
    uint64_t referenced_objects;
    uint64_t queued_objects;           /* slices in the deletion queue: not leaks */
    uint64_t new_objects;              /* slice id too new to judge (live writers) */
    uint64_t leaked_objects;           /* unreferenced: leaks */
    uint64_t leaked_bytes;
    uint64_t foreign_objects;          /* keys under chunks/ that are no block key (ignored) */
    uint64_t deleted_objects;          /* leaks deleted (do_delete) */
    uint64_t kept_objects;             /* leaks not deleted: their block header does not
                                          name this volume (do_delete) */
    uint64_t errors;                   /* deletes that failed */
    uint64_t id_limit;                 /* slice ids >= this were not judged (0: none was) */
    uint64_t id_next;                  /* the slice counter: no id >= this was in use */
    int      live_mounters;            /* mounter sessions with a recent heartbeat,
                                          -1: the engine cannot tell (assumed live) */
};

/* While mounters are live, gc does not judge the newest ids: their writers
 * may still commit them. */
#define KEG_GC_ID_MARGIN 100000ULL

/* Find objects that no file references (leaks: uploads of commits that
 * failed or never happened, crashed mounters) and, with do_delete, delete them.
 * Objects of slices in the deletion queue are left to the deleter.  Slices
 * newer than the id limit are skipped: it is the engine's slice counter when
 * no mounter has a live session, else that counter minus a margin of 100000
 * ids (ids reserved by live mounters for uploads not yet committed).
 * Limitation: blocks of files unlinked but still open on a live mounter are
 * counted as leaks if their ids are old enough.
 * With do_delete, nothing is deleted unless the volume marker names this
 * volume (-EPERM, logged, otherwise), and a leak is deleted only if its block
 * header names this volume (else it is kept and reported).
 * Returns 0 or -errno (-ENOSYS: the store cannot list; -EPERM: marker). */
int keg_fs_gc(struct keg_fs *fs, int do_delete, struct keg_gc_report *r, keg_progress_fn *p,
              void *arg);

struct keg_fsck_report {
    /* in */
    unsigned           threads;        /* parallel checks (0: 8) */
    keg_admin_item_fn *item;           /* called for every problem */
    void              *item_arg;
    /* out */
    uint64_t files;
    uint64_t dirs;
    uint64_t slices;                   /* distinct slices referenced */
    uint64_t blocks;                   /* block objects checked */
    uint64_t missing;                  /* blocks that do not exist */
    uint64_t corrupt;                  /* blocks that exist but do not decode (deep) or are
                                          too short */
    uint64_t bad_refs;                 /* slice references inconsistent with the slice size */
    uint64_t errors;                   /* store errors other than missing (not judged) */
    uint64_t problem_files;            /* paths of files that use a missing/corrupt block
                                          (every hard link counts) */
};

/* Check that every block of every referenced slice exists (head); with deep,
 * get and decode (CRC32C) each one.  Each problem is reported (item) with the
 * paths of the files that reference it.
 * Returns 0 when consistent, 1 when problems were found, or -errno. */
int keg_fs_fsck(struct keg_fs *fs, int deep, struct keg_fsck_report *r, keg_progress_fn *p,
                void *arg);

/* Read every block of file ino (a directory: every file below it,
 * recursively) through the object stack, so that cache layers (SSD cache)
 * hold them; each block is verified.  Blocks are fetched by a few threads.
 * Returns 0, or the first error (-EIO: a block is missing or corrupt). */
int keg_fs_warmup(struct keg_fs *fs, uint64_t ino, keg_progress_fn *p, void *arg);

/*--- trash (core/fs/trash.c, docs/internals/TRASH.md) ---*/

/* With trash_days > 0, unlinked files wait in /.trash/<hour>/ as
 * "<parent ino>-<ino>-<name>" (hour "YYYY-MM-DD-HH", UTC). */
#define KEG_TRASH_DIR "/.trash"
#define KEG_TRASH_NOREPLACE (1u << 0)  /* restore: refuse when the name is taken */
#define KEG_TRASH_DRYRUN    (1u << 1)  /* restore: only say where it would go */

struct keg_trash_restored {
    uint64_t parent;                   /* directory the entry went back to */
    uint64_t ino;
    char     name[256];                /* name it got there */
    int      renamed;                  /* 1: the name was taken: "<name>.restored-<ino>" */
};

/* Move trash entry /.trash/hour/entry back to its original directory (by
 * inode number) under its original name.  When that name exists: with
 * KEG_TRASH_NOREPLACE -EEXIST, else the entry is restored as
 * "<name>.restored-<ino>" (-EEXIST if that exists too).  Attributes and data
 * are kept (ctime changes).  out is set on success (zeroed otherwise).
 * With KEG_TRASH_DRYRUN nothing changes: out says where the entry would go
 * (a front end can then rename it through a mount, which keeps the kernel's
 * name cache right).
 * Returns 0, -EINVAL (hour or entry is not a trash name), -ENOENT (no such
 * entry in the trash), -ESTALE (the original directory no longer exists),
 * -EEXIST, -EROFS, -errno. */
int keg_fs_trash_restore(struct keg_fs *fs, const char *hour, const char *entry, unsigned flags,
                         struct keg_trash_restored *out);

/* Delete the trash hour directories older than trash_days now (what the
 * mounter does every ~10 minutes).  *files = files deleted for good.
 * Returns 0 or -errno. */
int keg_fs_trash_expire(struct keg_fs *fs, uint64_t *files);

#endif
