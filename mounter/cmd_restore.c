/* cmd_restore.c -- `kegfs restore [--no-rename] PATH...`: move files from a mounted volume's
 * /.trash back to where they were deleted.
 *
 * PATH is a trash entry (MOUNT/.trash/YYYY-MM-DD-HH/PARENT-INO-NAME) or a whole hour
 * directory (MOUNT/.trash/YYYY-MM-DD-HH).  The original directory is known only by its
 * inode number, so the volume behind the mount is opened here (META_URL from the mounter's
 * state file, no session): keg_fs_trash_restore (dry run) says where each entry goes, the
 * directory's path is found by walking its parent pointers up to the root, and the entry is
 * renamed through the mount (renameat2 RENAME_NOREPLACE), so the kernel's name cache is
 * right at once.  If the path cannot be found, the engine renames it (then the kernel may
 * show the old names for up to --entry-cache seconds).
 */
#define _GNU_SOURCE 1       /* renameat2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define KEG_LOG_TAG "restore"
#include "keg/admin.h"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/mem.h"

#include "cmd_admin_i.h"
#include "mnt_i.h"

int cmd_restore(int argc, char **argv);

enum { OPT_NO_RENAME = 0x2301, OPT_PUT_BACK };

#define RESTORE_MAX_DEPTH 256

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs restore [OPTIONS] PATH...\n"
        "\n"
        "Move deleted files from the trash of a mounted KegFS volume (formatted with\n"
        "--trash-days N) back to the directory they were deleted from, under their\n"
        "original name.  PATH is an entry MOUNT/.trash/YYYY-MM-DD-HH/PARENT-INO-NAME or a\n"
        "whole hour directory MOUNT/.trash/YYYY-MM-DD-HH.  When the name is taken, the\n"
        "file comes back as NAME.restored-INO.  When its directory no longer exists,\n"
        "the entry stays in the trash (move it out by hand with mv).\n"
        "\n"
        "Options:\n"
        "      --no-rename          when the name is taken, leave the entry in the trash\n"
        "      --put-back           accepted for JuiceFS compatibility (always the case)\n"
        MNT_COMMON_HELP
        "\n"
        "Exit status: 0 all restored, 1 some entry was not restored, 2 usage error.\n");
}

/*----- paths of directories, from their inode numbers -----*/

struct find_name {
    uint64_t ino;
    char    *name;          /* OWNERSHIP: keg_strdup'ed when found */
};

static int find_name_fill(void *arg, const char *name, const struct keg_attr *attr,
                          uint64_t next_off)
{
    struct find_name *fn = arg;
    KEG_UNUSED(next_off);
    if (attr->ino != fn->ino || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    fn->name = keg_strdup(name);
    return 1;
}

/* The name of directory ino in its parent dir.  OWNERSHIP: keg_free(*out). */
static int dir_name(struct keg_fs *fs, uint64_t parent, uint64_t ino, char **out)
{
    static const struct keg_ctx root = {.uid = 0, .gid = 0};
    struct find_name fn = {.ino = ino, .name = NULL};
    struct keg_dh *dh = NULL;
    int rc;

    *out = NULL;
    rc = keg_fs_opendir(fs, &root, parent, &dh);
    if (rc < 0)
        return rc;
    rc = keg_fs_readdir(fs, &root, dh, 0, 0, find_name_fill, &fn);
    keg_fs_releasedir(fs, dh);
    if (rc < 0)
        return rc;
    if (!fn.name)
        return -ENOENT;
    *out = fn.name;
    return 0;
}

/* "/a/b" of directory ino relative to the volume root ("" for the root).
 * OWNERSHIP: keg_free(*out).  Returns 0 or -errno. */
static int dir_path(struct keg_fs *fs, uint64_t ino, char **out)
{
    static const struct keg_ctx root = {.uid = 0, .gid = 0};
    char *path = keg_strdup("");
    int rc = 0;

    *out = NULL;
    if (!path)
        return -ENOMEM;
    for (int depth = 0; ino != KEG_ROOT_INO; depth++) {
        struct keg_attr a;
        char *name = NULL;
        char *np = NULL;
        if (depth > RESTORE_MAX_DEPTH) {
            rc = -ELOOP;
            break;
        }
        rc = keg_fs_getattr(fs, &root, ino, &a);
        if (rc == 0)
            rc = dir_name(fs, a.parent, ino, &name);
        if (rc == 0) {
            np = keg_asprintf("/%s%s", name, path);
            if (!np)
                rc = -ENOMEM;
        }
        keg_free(name);
        if (rc < 0)
            break;
        keg_free(path);
        path = np;
        ino = a.parent;
    }
    if (rc < 0) {
        keg_free(path);
        return rc;
    }
    *out = path;
    return 0;
}

/*----- restoring -----*/

struct restore_ctx {
    const char    *mp;          /* mount point */
    struct keg_fs *fs;
    unsigned       flags;       /* KEG_TRASH_* */
    unsigned       restored, failed;
};

/* Rename the entry through the mount (so that the kernel's name cache sees it at once).
 * Returns 0, -EEXIST, or another -errno (then the caller renames through the engine). */
static int rename_via_mount(struct restore_ctx *c, const char *hour, const char *entry,
                            const char *dir, const char *name, int renamed)
{
    const char *mp = strcmp(c->mp, "/") == 0 ? "" : c->mp;
    char *src = keg_asprintf("%s%s/%s/%s", mp, KEG_TRASH_DIR, hour, entry);
    char *dst = keg_asprintf("%s%s/%s", mp, dir, name);
    int rc = -ENOMEM;

    if (src && dst) {
        rc = renameat2(AT_FDCWD, src, AT_FDCWD, dst, RENAME_NOREPLACE) == 0 ? 0 : -errno;
        if (rc == 0)
            printf("restored .trash/%s/%s to %s%s\n", hour, entry, dst,
                   renamed ? " (name was taken)" : "");
    }
    keg_free(src);
    keg_free(dst);
    return rc;
}

static void restore_error(struct restore_ctx *c, const char *hour, const char *entry, int rc)
{
    c->failed++;
    switch (rc) {
    case -EINVAL:
        mnt_error("%s/.trash/%s/%s is not a trash entry (PARENT-INO-NAME)", c->mp, hour, entry);
        break;
    case -ESTALE:
        mnt_error("%s/.trash/%s/%s: the directory it was deleted from no longer exists; "
                  "left in the trash", c->mp, hour, entry);
        break;
    case -EEXIST:
        mnt_error("%s/.trash/%s/%s: its name is taken in its directory; left in the trash%s",
                  c->mp, hour, entry, (c->flags & KEG_TRASH_NOREPLACE) ? " (--no-rename)" : "");
        break;
    default:
        mnt_error("%s/.trash/%s/%s: %s", c->mp, hour, entry, strerror(-rc));
    }
}

/* Find where the entry goes (a dry run through the engine), then rename it through the
 * mount; through the engine when the directory's path cannot be found or the mount
 * refuses. */
static int restore_entry(struct restore_ctx *c, const char *hour, const char *entry)
{
    struct keg_trash_restored r;
    char *dir = NULL;
    int rc = keg_fs_trash_restore(c->fs, hour, entry, c->flags | KEG_TRASH_DRYRUN, &r);

    if (rc < 0) {
        restore_error(c, hour, entry, rc);
        return rc;
    }
    if (dir_path(c->fs, r.parent, &dir) == 0) {
        rc = rename_via_mount(c, hour, entry, dir, r.name, r.renamed);
        if (rc == 0 || rc == -EEXIST) {
            keg_free(dir);
            if (rc < 0)
                restore_error(c, hour, entry, rc);
            else
                c->restored++;
            return rc;
        }
        KEG_INFO("rename through the mount failed (%s); renaming through the engine",
                 strerror(-rc));
    }
    keg_free(dir);
    rc = keg_fs_trash_restore(c->fs, hour, entry, c->flags, &r);
    if (rc < 0) {
        restore_error(c, hour, entry, rc);
        return rc;
    }
    c->restored++;
    printf("restored .trash/%s/%s to directory inode %llu as %s%s\n", hour, entry,
           (unsigned long long)r.parent, r.name, r.renamed ? " (name was taken)" : "");
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every entry of hour directory abs (read through the mount). */
static int restore_hour(struct restore_ctx *c, const char *abs, const char *hour)
{
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    DIR *d = opendir(abs);

    if (!d) {
        rc = -errno;
        mnt_error("%s: %s", abs, strerror(-rc));
        c->failed++;
        return rc;
    }
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nn = keg_realloc(names, ncap * sizeof(*nn));
            if (!nn) {
                rc = -ENOMEM;
                break;
            }
            names = nn;
            cap = ncap;
        }
        names[n] = keg_strdup(de->d_name);
        if (!names[n]) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == 0) {
        if (n == 0)
            printf("%s: empty\n", abs);
        qsort(names, n, sizeof(*names), cmp_str);
        for (size_t i = 0; i < n; i++) {
            int r = restore_entry(c, hour, names[i]);
            if (r < 0 && rc == 0)
                rc = r;
        }
    } else {
        mnt_error("%s: %s", abs, strerror(-rc));
        c->failed++;
    }
    for (size_t i = 0; i < n; i++)
        keg_free(names[i]);
    keg_free(names);
    return rc;
}

/* The absolute path of p.  An entry that went to the trash a moment ago may be hidden by
 * the kernel's negative name cache (--entry-cache): then its directory is resolved and the
 * name appended (the engine knows the entry).  OWNERSHIP: keg_free(*out). */
static int trash_abspath(const char *p, char **out)
{
    char *copy, *dir = NULL;
    const char *base;
    int rc = mnt_abspath(p, out);

    if (rc != -ENOENT)
        return rc;
    copy = keg_strdup(p);
    if (!copy)
        return -ENOMEM;
    while (strlen(copy) > 1 && copy[strlen(copy) - 1] == '/')
        copy[strlen(copy) - 1] = '\0';
    char *slash = strrchr(copy, '/');
    if (slash) {
        *slash = '\0';
        base = slash + 1;
        rc = mnt_abspath(slash == copy ? "/" : copy, &dir);
    } else {
        base = copy;
        rc = mnt_abspath(".", &dir);
    }
    if (rc == 0 && (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0))
        rc = -ENOENT;
    if (rc == 0) {
        *out = keg_asprintf("%s/%s", strcmp(dir, "/") == 0 ? "" : dir, base);
        if (!*out)
            rc = -ENOMEM;
    }
    keg_free(dir);
    keg_free(copy);
    return rc;
}

/* The volume behind the mount point, reused while paths stay on it. */
struct restore_vol {
    char          *mp;
    struct keg_fs *fs;
};

static int restore_path(struct restore_vol *vol, unsigned flags, const char *path,
                        unsigned *failed)
{
    struct restore_ctx c;
    char *abs = NULL, *mp = NULL, *url = NULL;
    char *hour = NULL;
    const char *rel, *entry = NULL;
    int rc;

    rc = trash_abspath(path, &abs);
    if (rc < 0) {
        mnt_error("%s: %s", path, strerror(-rc));
        goto out;
    }
    rc = mnt_admin_find_volume(abs, &mp, &url);
    if (rc < 0)
        goto out;
    rel = abs + (strcmp(mp, "/") == 0 ? 0 : strlen(mp));
    if (strncmp(rel, KEG_TRASH_DIR "/", strlen(KEG_TRASH_DIR) + 1) != 0) {
        mnt_error("%s is not in the trash of the volume mounted at %s (expected %s%s/HOUR or "
                  "%s%s/HOUR/ENTRY)", path, mp, mp, KEG_TRASH_DIR, mp, KEG_TRASH_DIR);
        rc = -EINVAL;
        goto out;
    }
    rel += strlen(KEG_TRASH_DIR) + 1;
    hour = keg_strdup(rel);
    if (!hour) {
        rc = -ENOMEM;
        goto out;
    }
    char *slash = strchr(hour, '/');
    if (slash) {
        *slash = '\0';
        entry = slash + 1;
        if (strchr(entry, '/')) {
            mnt_error("%s: only entries directly in an hour directory can be restored", path);
            rc = -EINVAL;
            goto out;
        }
    }
    if (!vol->mp || strcmp(vol->mp, mp) != 0) {
        if (vol->fs)
            keg_fs_free(vol->fs);
        keg_free(vol->mp);
        vol->fs = NULL;
        vol->mp = NULL;
        rc = mnt_admin_open(url, 0, NULL, &vol->fs);
        if (rc < 0)
            goto out;
        vol->mp = mp;
        mp = NULL;
    }
    memset(&c, 0, sizeof(c));
    c.mp = vol->mp;
    c.fs = vol->fs;
    c.flags = flags;
    if (entry)
        rc = restore_entry(&c, hour, entry);
    else
        rc = restore_hour(&c, abs, hour);
    *failed += c.failed;
out:
    if (rc < 0 && *failed == 0)
        *failed = 1;
    keg_free(hour);
    keg_free(abs);
    keg_free(mp);
    keg_free(url);
    return rc;
}

int cmd_restore(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        {"no-rename", no_argument, NULL, OPT_NO_RENAME},
        {"put-back", no_argument, NULL, OPT_PUT_BACK},
        {NULL, 0, NULL, 0},
    };
    struct restore_vol vol = {0};
    unsigned flags = 0;
    unsigned failed = 0;
    int opt;

    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            usage(stdout);
            return 0;
        case OPT_NO_RENAME:
            flags |= KEG_TRASH_NOREPLACE;
            break;
        case OPT_PUT_BACK:
            break;
        default:
            return mnt_usage_error("restore", argc, argv);
        }
    }
    if (optind >= argc) {
        mnt_error("restore needs at least one PATH in a volume's .trash (see 'kegfs restore "
                  "--help')");
        return 2;
    }
    if (mnt_log_file && keg_log_set_file(mnt_log_file) < 0)
        mnt_warn("cannot open --log-file %s", mnt_log_file);
    for (int i = optind; i < argc; i++) {
        unsigned f = 0;
        restore_path(&vol, flags, argv[i], &f);
        failed += f;
    }
    if (vol.fs)
        keg_fs_free(vol.fs);
    keg_free(vol.mp);
    return failed ? 1 : 0;
}
