/* obj_file.c -- the "file" object store: objects are files under a local directory.
 *
 * DESIGN
 * Key "a/b/c" is the file <root>/a/b/c; parent directories are made on demand
 * (0755) and never removed (removing them would race with a concurrent put).
 * put writes <dir>/.tmp.<name>.XXXXXX and rename()s it over the target, so
 * readers see the old or the new object, never a partial one.  With
 * conf->fsync the temp file is fsync()ed before the rename and the directory
 * after it, so a put that returned survives a crash; without it, durability
 * comes from sync() (syncfs of the root's file system) or sync_keys; a put of
 * FILE_EARLY_WRITE bytes or more starts its disk write right away (no wait),
 * so that fsync finds little left to write.  A failed put removes
 * its temp file.  list walks the tree depth-first, ordering each directory's
 * entries as if directories had a trailing '/', which yields keys in byte
 * order without collecting them all; temp files are skipped.
 *
 * Keys are validated: no leading '/', no empty, "." or ".." component, no
 * component starting with ".tmp." (the temp-file namespace): -EINVAL.
 *
 * Spare files.  Deleting a block object (a key of keg_block_key_parse, a
 * regular file with one link) moves its file into a pool of spare files
 * under <root>/.tmp.spare (core/ssdf: at most KEG_SSD_SPARE_MAX, cut to one
 * byte, removed at close or by the next process after a crash), and a put
 * rewrites a spare where it lies in the pool and renames it to its key (no
 * temp name: one rename) instead of creating a file.  On ext4 without a journal,
 * creating a file skips every inode freed in the last seconds (minutes while
 * their inode table block is dirty), so a store that deletes as fast as it
 * writes -- compaction behind small rewrites -- spent more time allocating
 * inodes than writing data (docs/benchmarks.md).  Only blocks are recycled:
 * a reader that opened a block just before its deletion may read the bytes
 * of the spare's next object; every block carries its identity and CRC and
 * every reader verifies them and reads the key again, which is then gone
 * (core/fs/read.c, gc.c).  Any other object is unlinked, as is a block with
 * more than one link (an operator's hard-linked copy must not change).
 * Every spare operation that fails falls back to create or unlink.  With
 * conf->spare_fill (a mount's stack) the pool opens at the first put and its
 * filler keeps it stocked with new empty files while puts outrun deletions
 * (core/ssdf/ssd_file.h), so a stream of new objects allocates its inodes
 * off the writers' path; without it the pool opens at the first delete.
 */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEG_LOG_TAG "obj_file"
#include "keg/hash.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/obj.h"
#include "../ssdf/ssd_file.h"

#define FILE_TMP_PREFIX ".tmp."
#define FILE_SPARE_DIR  FILE_TMP_PREFIX "spare"   /* under the root: the pools */
/* A put of at least this many bytes starts its disk write at once (without
 * waiting for it): the fsync() of sync_keys, or the kernel's flush, then
 * finds most of a large sequential write on disk already. */
#define FILE_EARLY_WRITE (1u << 20)

/* Directories whose own entry (in their parent) is known durable: sync_keys
 * fsyncs an ancestor only for a child not in this set.  Open addressing;
 * emptied when three quarters full (which costs fsyncs, never durability). */
#define FILE_DSET_SLOTS 4096

struct file_store {
    char *root;      /* absolute, no trailing '/' (except "/" itself) */
    int   rootfd;    /* O_DIRECTORY fd of root, for syncfs */
    size_t lead;     /* bytes before the key in a path from file_path() */
    int   fsync;
    int   spare_fill;               /* conf->spare_fill */
    pthread_mutex_t dmu;            /* guards dset, dn, spare_tried */
    char  *dset[FILE_DSET_SLOTS];   /* absolute paths, NULL = free */
    size_t dn;
    /* opened at the first delete of a block (a store only read makes no
     * directory); NULL: none (not yet, or it could not be made) */
    struct keg_ssd_spare *_Atomic spare;
    int    spare_tried;
};

static int file_valid_key(const char *key)
{
    const char *p = key;
    if (!key || !*key || *key == '/')
        return 0;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0)
            return 0;
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        if (n >= strlen(FILE_TMP_PREFIX) && strncmp(p, FILE_TMP_PREFIX, 5) == 0)
            return 0;
        if (!e)
            break;
        p = e + 1;
        if (!*p)
            return 0;   /* trailing '/' */
    }
    return 1;
}

static int file_errno_rc(int err)
{
    if (err == EDQUOT || err == ENOSPC)
        return -ENOSPC;
    return -err;
}

static size_t dset_slot(struct file_store *fs, const char *dir, int *found)
{
    size_t i = (size_t)(keg_fnv1a64_str(dir) % FILE_DSET_SLOTS);
    while (fs->dset[i] && strcmp(fs->dset[i], dir) != 0)
        i = (i + 1) % FILE_DSET_SLOTS;
    *found = fs->dset[i] != NULL;
    return i;
}

static void dset_clear(struct file_store *fs)
{
    for (size_t i = 0; i < FILE_DSET_SLOTS; i++) {
        keg_free(fs->dset[i]);
        fs->dset[i] = NULL;
    }
    fs->dn = 0;
}

/* 1 if dir's entry in its parent is known durable. */
static int dset_has(struct file_store *fs, const char *dir)
{
    int found;
    pthread_mutex_lock(&fs->dmu);
    dset_slot(fs, dir, &found);
    pthread_mutex_unlock(&fs->dmu);
    return found;
}

/* Records that dir's entry is durable (best effort: nothing on ENOMEM). */
static void dset_add(struct file_store *fs, const char *dir)
{
    int found;
    pthread_mutex_lock(&fs->dmu);
    if (fs->dn >= FILE_DSET_SLOTS / 4 * 3)
        dset_clear(fs);
    size_t i = dset_slot(fs, dir, &found);
    if (!found && (fs->dset[i] = keg_strdup(dir)) != NULL)
        fs->dn++;
    pthread_mutex_unlock(&fs->dmu);
}

static int file_open(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    struct file_store *fs = o->priv;
    const char *dir = conf->bucket;
    size_t n;
    int rc;

    fs->rootfd = -1;
    pthread_mutex_init(&fs->dmu, NULL);
    if (dir && strncmp(dir, "file://", 7) == 0)
        dir += 7;
    if (!dir || dir[0] != '/') {
        KEG_ERR("file store: directory \"%s\" must be an absolute path", dir ? dir : "");
        return -EINVAL;
    }
    n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    fs->root = keg_strndup(dir, n);
    if (!fs->root)
        return -ENOMEM;
    fs->rootfd = open(fs->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fs->rootfd < 0) {
        rc = -errno;
        if (rc == -ENOENT)
            KEG_ERR("file store: directory %s does not exist (create it first)", fs->root);
        else
            KEG_ERR("file store: cannot open directory %s: %s", fs->root, strerror(-rc));
        keg_free(fs->root);
        fs->root = NULL;
        return rc;
    }
    fs->lead = strcmp(fs->root, "/") == 0 ? 1 : n + 1;
    fs->fsync = conf->fsync;
    fs->spare_fill = conf->spare_fill;
    return 0;
}

static void file_close(struct keg_obj *o)
{
    struct file_store *fs = o->priv;
    keg_ssd_spare_close(fs->spare);
    if (fs->rootfd >= 0)
        close(fs->rootfd);
    keg_free(fs->root);
    dset_clear(fs);
    pthread_mutex_destroy(&fs->dmu);
}

/* OWNERSHIP: returns a new string, caller keg_free()s; NULL on ENOMEM. */
static char *file_path(struct file_store *fs, const char *key)
{
    return keg_asprintf("%s/%s", strcmp(fs->root, "/") == 0 ? "" : fs->root, key);
}

static ssize_t file_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len)
{
    struct file_store *fs = o->priv;
    struct stat st;
    size_t done = 0;
    ssize_t rc;
    char *path;
    int fd;

    if (!file_valid_key(key))
        return -EINVAL;
    path = file_path(fs, key);
    if (!path)
        return -ENOMEM;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = (errno == ENOTDIR) ? -ENOENT : -errno;
        goto out;
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -ENOENT;
        goto out;
    }
    while (done < len && off + done < (uint64_t)st.st_size) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            KEG_ERR("read %s: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    rc = (ssize_t)done;
out:
    if (fd >= 0)
        close(fd);
    keg_free(path);
    return rc;
}

/* fsync() the directory that holds path (path is restored before return). */
static int file_fsync_parent(char *path)
{
    char *slash = strrchr(path, '/');
    int dfd, rc = 0;

    *slash = '\0';
    dfd = open(slash == path ? "/" : path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    *slash = '/';
    if (dfd < 0)
        return file_errno_rc(errno);
    if (fsync(dfd) < 0)
        rc = file_errno_rc(errno);
    close(dfd);
    return rc;
}

/* mkdir -p for the parent directories of path (a file path under fs->root).
 * With fs->fsync, the parent of each new directory is fsync()ed.
 * Returns 0 or -errno. */
static int file_mkdirs(struct file_store *fs, char *path)
{
    char *last = strrchr(path, '/');

    for (char *p = strchr(path + fs->lead, '/'); p && p <= last; p = strchr(p + 1, '/')) {
        int r, err;
        *p = '\0';
        r = mkdir(path, 0755);
        err = errno;
        *p = '/';
        if (r < 0 && err != EEXIST)
            return file_errno_rc(err);
        if (r == 0 && fs->fsync) {
            *p = '\0';
            r = file_fsync_parent(path);
            *p = '/';
            if (r < 0)
                return r;
        }
    }
    return 0;
}

static int file_write_all(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, (const char *)buf + done, len - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return file_errno_rc(errno);
        }
        done += (size_t)n;
    }
    return 0;
}

/* Starts the disk write of a large put (a hint: errors come from the fsync),
 * or with fs->fsync makes it durable.  Returns 0 or -errno. */
static int file_put_flush(const struct file_store *fs, int fd, size_t len)
{
    if (fs->fsync)
        return fsync(fd) < 0 ? file_errno_rc(errno) : 0;
    if (len >= FILE_EARLY_WRITE)
        (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    return 0;
}

static struct keg_ssd_spare *file_spare(struct file_store *fs);

/* A put through a spare file (keg_ssd_spare_put): what it writes, and where. */
struct file_spare_put {
    struct file_store *fs;
    char              *path;
    const void        *buf;
    size_t             len;
};

static int file_spare_fill(void *arg, int fd)
{
    struct file_spare_put *p = arg;
    int rc = file_write_all(fd, p->buf, p->len);
    if (rc == 0)
        rc = keg_ssd_file_fit(fd, p->len);  /* a spare holds one byte */
    return rc == 0 ? file_put_flush(p->fs, fd, p->len) : rc;
}

static int file_spare_mkparent(void *arg)
{
    struct file_spare_put *p = arg;
    return file_mkdirs(p->fs, p->path);     /* a new key directory */
}

/* put, or with excl put_new: the temp file is link()ed to the key, which
 * fails with EEXIST if the key exists, instead of rename()d over it. */
static int file_store_put(struct keg_obj *o, const char *key, const void *buf, size_t len,
                          int excl)
{
    struct file_store *fs = o->priv;
    char *path = NULL, *tmp = NULL, *slash;
    int fd = -1, rc;

    if (!file_valid_key(key))
        return -EINVAL;
    path = file_path(fs, key);
    if (!path) {
        rc = -ENOMEM;
        goto out;
    }
    /* through a spare file (one rename, no temp name) when there is one; a
     * spare that fails falls back to a new file */
    {
        struct file_spare_put sp = {fs, path, buf, len};
        struct keg_ssd_spare *pool = fs->spare_fill ? file_spare(fs) : fs->spare;
        rc = pool ? keg_ssd_spare_put(pool, AT_FDCWD, path, excl, file_spare_fill,
                                      file_spare_mkparent, &sp)
                  : -ENOENT;
    }
    if (rc == -EEXIST)
        goto out;
    if (rc == 0)
        goto placed;
    slash = strrchr(path, '/');
    tmp = keg_asprintf("%.*s/" FILE_TMP_PREFIX "%s.XXXXXX", (int)(slash - path), path, slash + 1);
    if (!tmp) {
        rc = -ENOMEM;
        goto out;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        rc = file_mkdirs(fs, path);
        if (rc < 0)
            goto fail_log;
        /* mkostemp replaced the X's; restore the template. */
        memcpy(tmp + strlen(tmp) - 6, "XXXXXX", 6);
        fd = mkostemp(tmp, O_CLOEXEC);
    }
    if (fd < 0) {
        rc = file_errno_rc(errno);
        goto fail_log;
    }
    rc = file_write_all(fd, buf, len);
    if (rc == 0)
        rc = file_put_flush(fs, fd, len);
    if (close(fd) < 0 && rc == 0)
        rc = file_errno_rc(errno);
    fd = -1;
    if (rc == 0 && excl) {
        if (link(tmp, path) < 0)
            rc = errno == EEXIST ? -EEXIST : file_errno_rc(errno);
        unlink(tmp);
        if (rc == -EEXIST)
            goto out;
    } else if (rc == 0 && rename(tmp, path) < 0) {
        rc = file_errno_rc(errno);
    }
    if (rc < 0) {
        unlink(tmp);
        goto fail_log;
    }
placed:
    if (fs->fsync) {
        rc = file_fsync_parent(path);
        if (rc < 0)
            goto fail_log;
    }
    goto out;

fail_log:
    if (rc == -ENOSPC)
        KEG_ERR("put %s: no space left in %s", key, fs->root);
    else
        KEG_ERR("put %s: %s", key, strerror(-rc));
out:
    keg_free(tmp);
    keg_free(path);
    return rc;
}

static int file_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    return file_store_put(o, key, buf, len, 0);
}

static int file_put_new(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    return file_store_put(o, key, buf, len, 1);
}

/* The pool of spare files, opened on first use; NULL if it cannot be. */
static struct keg_ssd_spare *file_spare(struct file_store *fs)
{
    struct keg_ssd_spare *sp = fs->spare;
    if (sp)
        return sp;
    pthread_mutex_lock(&fs->dmu);
    if (!fs->spare_tried) {
        char *dir = file_path(fs, FILE_SPARE_DIR);
        int rc = dir ? keg_ssd_spare_open(dir, KEG_SSD_SPARE_MAX, UINT64_MAX, &sp) : -ENOMEM;
        if (rc < 0)
            KEG_INFO("no spare files under %s: %s (objects are created and unlinked)",
                     fs->root, strerror(-rc));
        else if (fs->spare_fill)
            keg_ssd_spare_autofill(sp);
        keg_free(dir);
        fs->spare = sp;
        fs->spare_tried = 1;
    }
    sp = fs->spare;
    pthread_mutex_unlock(&fs->dmu);
    return sp;
}

static int file_del(struct keg_obj *o, const char *key)
{
    struct file_store *fs = o->priv;
    uint64_t id;
    uint32_t indx, blen;
    struct stat st;
    char *path;
    int rc = 0;

    if (!file_valid_key(key))
        return -EINVAL;
    path = file_path(fs, key);
    if (!path)
        return -ENOMEM;
    if (keg_block_key_parse(key, &id, &indx, &blen) == 0 &&
        lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && file_spare(fs)) {
        rc = keg_ssd_spare_retire(fs->spare, AT_FDCWD, path, (uint64_t)st.st_size);
        if (rc < 0 && rc != -ENOENT && rc != -ENOTDIR && rc != -EISDIR)
            KEG_ERR("delete %s: %s", path, strerror(-rc));
        else
            rc = 0;
    } else if (unlink(path) < 0 && errno != ENOENT && errno != ENOTDIR && errno != EISDIR) {
        rc = -errno;
        KEG_ERR("delete %s: %s", path, strerror(errno));
    }
    keg_free(path);
    return rc;
}

static int file_head(struct keg_obj *o, const char *key, uint64_t *size)
{
    struct file_store *fs = o->priv;
    struct stat st;
    char *path;
    int rc = 0;

    *size = 0;
    if (!file_valid_key(key))
        return -EINVAL;
    path = file_path(fs, key);
    if (!path)
        return -ENOMEM;
    if (stat(path, &st) < 0)
        rc = (errno == ENOTDIR) ? -ENOENT : -errno;
    else if (!S_ISREG(st.st_mode))
        rc = -ENOENT;
    else
        *size = (uint64_t)st.st_size;
    keg_free(path);
    return rc;
}

/*---------------------------------------------------------------------------
 * list
 *-------------------------------------------------------------------------*/

struct file_dent {
    char    *name;
    int      is_dir;
    uint64_t size;
};

/* Byte order of the keys below: a directory "d" sorts as "d/". */
static int file_dent_cmp(const void *a, const void *b)
{
    const struct file_dent *x = a, *y = b;
    const unsigned char *p = (const unsigned char *)x->name, *q = (const unsigned char *)y->name;
    while (*p && *p == *q) {
        p++;
        q++;
    }
    int cp = *p ? *p : (x->is_dir ? '/' : 0);
    int cq = *q ? *q : (y->is_dir ? '/' : 0);
    if (cp != cq)
        return cp - cq;
    /* Same up to the end of one; a directory "d" vs a file "d/..." cannot both exist. */
    return (int)strlen((const char *)p) - (int)strlen((const char *)q);
}

struct file_walk {
    const char      *prefix;
    size_t           plen;
    keg_obj_list_cb *cb;
    void            *arg;
    char            *key;      /* relative path of the current directory + '/' */
    size_t           klen;
    size_t           kcap;
};

/* Appends s to w->key.  Returns 0 or -ENOMEM. */
static int walk_push(struct file_walk *w, const char *s, int slash)
{
    size_t n = strlen(s);
    if (w->klen + n + 2 > w->kcap) {
        size_t cap = (w->klen + n + 2) * 2;
        char *k = keg_realloc(w->key, cap);
        if (!k)
            return -ENOMEM;
        w->key = k;
        w->kcap = cap;
    }
    memcpy(w->key + w->klen, s, n);
    w->klen += n;
    if (slash)
        w->key[w->klen++] = '/';
    w->key[w->klen] = '\0';
    return 0;
}

/* 1 if the key (or subtree) w->key can contain keys starting with prefix. */
static int walk_compatible(const struct file_walk *w)
{
    return strncmp(w->key, w->prefix, KEG_MIN(w->klen, w->plen)) == 0;
}

/* Walks the directory dfd (TAKES dfd: closed here). */
static int file_walk_dir(struct file_walk *w, int dfd)
{
    struct file_dent *ents = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    DIR *d = fdopendir(dfd);

    if (!d) {
        rc = -errno;
        close(dfd);
        return rc;
    }
    while ((errno = 0, de = readdir(d)) != NULL) {
        struct stat st;
        int is_dir;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            strncmp(de->d_name, FILE_TMP_PREFIX, strlen(FILE_TMP_PREFIX)) == 0)
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;   /* raced with a delete */
        if (S_ISDIR(st.st_mode))
            is_dir = 1;
        else if (S_ISREG(st.st_mode))
            is_dir = 0;
        else
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 32;
            struct file_dent *ne = keg_realloc(ents, ncap * sizeof(*ents));
            if (!ne) {
                rc = -ENOMEM;
                goto out;
            }
            ents = ne;
            cap = ncap;
        }
        ents[n].name = keg_strdup(de->d_name);
        if (!ents[n].name) {
            rc = -ENOMEM;
            goto out;
        }
        ents[n].is_dir = is_dir;
        ents[n].size = (uint64_t)st.st_size;
        n++;
    }
    if (errno) {
        rc = -errno;
        goto out;
    }
    if (n)
        qsort(ents, n, sizeof(*ents), file_dent_cmp);

    for (size_t i = 0; i < n && rc == 0; i++) {
        size_t save = w->klen;
        rc = walk_push(w, ents[i].name, ents[i].is_dir);
        if (rc < 0)
            break;
        if (ents[i].is_dir) {
            if (walk_compatible(w)) {
                int sub = openat(dirfd(d), ents[i].name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (sub >= 0)
                    rc = file_walk_dir(w, sub);
                else if (errno != ENOENT)
                    rc = -errno;
            }
        } else if (w->klen >= w->plen && walk_compatible(w)) {
            rc = w->cb(w->arg, w->key, ents[i].size);
        }
        w->klen = save;
        w->key[save] = '\0';
    }
out:
    for (size_t i = 0; i < n; i++)
        keg_free(ents[i].name);
    keg_free(ents);
    closedir(d);
    return rc;
}

static int file_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg)
{
    struct file_store *fs = o->priv;
    struct file_walk w = {
        .prefix = prefix ? prefix : "",
        .plen = prefix ? strlen(prefix) : 0,
        .cb = cb,
        .arg = arg,
    };
    int rc, dfd;

    rc = walk_push(&w, "", 0);
    if (rc < 0)
        return rc;
    dfd = openat(fs->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        rc = -errno;
    else
        rc = file_walk_dir(&w, dfd);
    keg_free(w.key);
    return rc;
}

static int file_sync(struct keg_obj *o)
{
    struct file_store *fs = o->priv;
    if (syncfs(fs->rootfd) < 0) {
        int rc = file_errno_rc(errno);
        KEG_ERR("syncfs %s: %s", fs->root, strerror(-rc));
        return rc;
    }
    return 0;
}

/* fsyncs the files of keys and their directories (once per run of keys in one
 * directory), then up the chain to the root each directory whose own entry is
 * not known durable: a directory made for a new key is durable too, and a
 * chain fsync'ed once is not fsync'ed again by this process (directories are
 * never removed, so an entry once durable stays). */
static int file_sync_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    struct file_store *fs = o->priv;
    char *done_dir = NULL;      /* the last directory whose chain was fsync'ed */
    int rc = 0;

    if (fs->fsync)
        return 0;               /* every put was fsync'ed already */
    for (size_t i = 0; i < n && rc == 0; i++) {
        char *path, *slash;
        int fd;
        if (!file_valid_key(keys[i]))
            continue;
        path = file_path(fs, keys[i]);
        if (!path) {
            rc = -ENOMEM;
            break;
        }
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            if (errno != ENOENT)
                rc = file_errno_rc(errno);
        } else {
            if (fsync(fd) < 0)
                rc = file_errno_rc(errno);
            close(fd);
        }
        slash = strrchr(path, '/');
        *slash = '\0';
        if (rc == 0 && fd >= 0 && (!done_dir || strcmp(done_dir, path) != 0)) {
            keg_free(done_dir);
            done_dir = keg_strdup(path);
            *slash = '/';
            /* the key's directory (its new entry), then each ancestor of a
             * directory whose entry is not known durable, up to the root */
            rc = file_fsync_parent(path);
            *strrchr(path, '/') = '\0';
            while (rc == 0 && strlen(path) > strlen(fs->root) && !dset_has(fs, path)) {
                rc = file_fsync_parent(path);
                if (rc == 0)
                    dset_add(fs, path);
                *strrchr(path, '/') = '\0';
            }
        }
        keg_free(path);
    }
    keg_free(done_dir);
    if (rc < 0)
        KEG_ERR("fsync of objects under %s: %s", fs->root, strerror(-rc));
    return rc;
}

const struct keg_obj_ops keg_obj_file_ops = {
    .name = "file",
    .version = 1,
    .caps = KEG_OBJ_CAP_RANGE_GET | KEG_OBJ_CAP_LIST,
    .priv_size = sizeof(struct file_store),
    .open = file_open,
    .close = file_close,
    .get = file_get,
    .put = file_put,
    .put_new = file_put_new,
    .del = file_del,
    .head = file_head,
    .list = file_list,
    .sync = file_sync,
    .sync_keys = file_sync_keys,
};
