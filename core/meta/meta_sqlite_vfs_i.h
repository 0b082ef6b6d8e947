/* meta_sqlite_vfs_i.h -- the SQLite engine's VFS (meta_sqlite_vfs.c): the
 * system's default VFS with the frames of one WAL commit written to the log
 * file in one write instead of two per page.  Internal to the SQLite engine
 * and its tests. */
#ifndef KEG_META_SQLITE_VFS_I_H
#define KEG_META_SQLITE_VFS_I_H

#define SQ_VFS_NAME "kegfs-wal"

/* The VFS for sqlite3_open_v2: SQ_VFS_NAME, registered on the first call, or
 * NULL (SQLite's default) when the environment says KEGFS_SQLITE_VFS=default
 * or SQLite refused the registration (logged once). */
const char *sq_vfs_name(void);

/* Counters since the process started (tests): writes SQLite asked of a WAL
 * file, and writes that reached the system.  Read without a lock. */
struct sq_vfs_stats {
    unsigned long long wal_writes;
    unsigned long long wal_flushes;
};
void sq_vfs_stats(struct sq_vfs_stats *out);

#endif
