/* cmd_warmup.c -- `kegfs warmup [--cache-dir DIR [--cache-size SIZE]] PATH...`: fetch every
 * block of files (directories recursively) of a mounted volume ahead of use.
 *
 * With --cache-dir, the volume behind the mount (META_URL from the mounter's state file, as
 * for `kegfs info`) is opened here with an SSD cache in DIR, and keg_fs_warmup reads every
 * block through that stack: the blocks land in DIR, verified.  A mounter using the same
 * cache directory finds them after its next start (its index of the directory is built when
 * it opens the cache).  Without --cache-dir the files are read through the mount itself,
 * which fills the running mounter's own caches (memory block cache, SSD cache if it has
 * one) and the kernel page cache.
 */
#define _GNU_SOURCE 1       /* O_NOATIME */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEG_LOG_TAG "warmup"
#include "keg/admin.h"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/stack.h"

#include "cmd_admin_i.h"
#include "mnt_i.h"

enum { OPT_CACHE_DIR = 0x2201, OPT_CACHE_SIZE };

#define WARM_BUF (1u << 20)

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs warmup [OPTIONS] PATH...\n"
        "\n"
        "Fetch every block of the files at PATH (directories: every file below them)\n"
        "on a mounted KegFS volume, so that later reads hit a cache.\n"
        "\n"
        "Without --cache-dir the files are read through the mount: the mounter's own\n"
        "caches fill.  With --cache-dir DIR the volume is opened here (META_URL from the\n"
        "mounter's state file) with an SSD cache in DIR and every block is fetched,\n"
        "verified and stored there; a mounter using DIR sees them after its next start.\n"
        "\n"
        "Options:\n"
        "      --cache-dir DIR      fill the SSD cache in DIR (absolute path)\n"
        "      --cache-size SIZE    its budget, e.g. 10G (default 1G)\n"
        MNT_COMMON_HELP
        "\n"
        "Exit status: 0 all warmed, 1 some PATH failed (missing or corrupt blocks are\n"
        "named in the log), 2 usage error.\n");
}

/*----- through the mount -----*/

struct walk_files {
    char   **path;
    size_t   n, cap;
    uint64_t bytes;
    int      err;
};

static struct walk_files *walk_acc;    /* nftw has no user argument */

static int collect_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    struct walk_files *w = walk_acc;
    KEG_UNUSED(ftw);
    if (flag != FTW_F || !S_ISREG(sb->st_mode))
        return 0;
    if (w->n == w->cap) {
        size_t ncap = w->cap ? w->cap * 2 : 64;
        char **nv = keg_realloc(w->path, ncap * sizeof(*nv));
        if (!nv) {
            w->err = -ENOMEM;
            return 1;
        }
        w->path = nv;
        w->cap = ncap;
    }
    w->path[w->n] = keg_strdup(path);
    if (!w->path[w->n]) {
        w->err = -ENOMEM;
        return 1;
    }
    w->n++;
    w->bytes += (uint64_t)sb->st_size;
    return 0;
}

static int warm_through_mount(const char *path, struct mnt_bar *bar)
{
    struct walk_files w = {0};
    uint64_t done = 0;
    char *buf = NULL;
    int status = 0;

    walk_acc = &w;
    if (nftw(path, collect_cb, 16, FTW_PHYS | FTW_MOUNT) != 0 && w.err == 0)
        w.err = -errno;
    walk_acc = NULL;
    if (w.err) {
        mnt_error("%s: %s", path, strerror(-w.err));
        status = 1;
        goto out;
    }
    buf = keg_malloc(WARM_BUF);
    if (!buf) {
        status = 1;
        goto out;
    }
    for (size_t i = 0; i < w.n; i++) {
        int fd = open(w.path[i], O_RDONLY | O_NOATIME);
        if (fd < 0)
            fd = open(w.path[i], O_RDONLY);
        if (fd < 0) {
            mnt_error("%s: %s", w.path[i], strerror(errno));
            status = 1;
            continue;
        }
        for (;;) {
            ssize_t n = read(fd, buf, WARM_BUF);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                mnt_bar_end(bar);
                mnt_error("%s: %s", w.path[i], strerror(errno));
                status = 1;
                break;
            }
            if (n == 0)
                break;
            done += (uint64_t)n;
            mnt_bar_progress(bar, KEG_MIN(done, w.bytes), w.bytes, "reading bytes");
        }
        close(fd);
    }
out:
    for (size_t i = 0; i < w.n; i++)
        keg_free(w.path[i]);
    keg_free(w.path);
    keg_free(buf);
    return status;
}

/*----- into an SSD cache -----*/

/* The open volume, reused while consecutive paths are on the same mount. */
struct vol_cache {
    char          *mp;
    struct keg_fs *fs;
};

static int warm_into_cache(struct vol_cache *vc, const char *path, const struct stat *st,
                           const struct keg_stack_conf *sc, struct mnt_bar *bar)
{
    char *abs = NULL;
    char *mp = NULL;
    char *url = NULL;
    int rc = mnt_abspath(path, &abs);

    if (rc) {
        mnt_error("%s: %s", path, strerror(-rc));
        return 1;
    }
    rc = mnt_admin_find_volume(abs, &mp, &url);
    if (rc)
        goto out;
    if (!vc->mp || strcmp(vc->mp, mp) != 0) {
        if (vc->fs)
            keg_fs_free(vc->fs);
        keg_free(vc->mp);
        vc->fs = NULL;
        vc->mp = NULL;
        rc = mnt_admin_open(url, 1, sc, &vc->fs);
        if (rc)
            goto out;
        vc->mp = mp;
        mp = NULL;
    }
    rc = keg_fs_warmup(vc->fs, st->st_ino, mnt_bar_progress, bar);
    mnt_bar_end(bar);
    if (rc < 0)
        mnt_error("%s: warmup failed: %s", path, strerror(-rc));
out:
    keg_free(abs);
    keg_free(mp);
    keg_free(url);
    return rc ? 1 : 0;
}

int mnt_cmd_warmup(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
        {"cache-size", required_argument, NULL, OPT_CACHE_SIZE},
        {NULL, 0, NULL, 0},
    };
    struct keg_stack_conf sc;
    struct vol_cache vc = {0};
    struct mnt_bar bar;
    int status = 0;
    int opt;

    memset(&sc, 0, sizeof(sc));
    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            usage(stdout);
            return 0;
        case OPT_CACHE_DIR:
            if (optarg[0] != '/') {
                mnt_error("--cache-dir must be an absolute path, not '%s'", optarg);
                return 2;
            }
            sc.cache_dir = optarg;
            break;
        case OPT_CACHE_SIZE:
            if (mnt_parse_size(optarg, &sc.cache_size) != 0 || sc.cache_size == 0) {
                mnt_error("--cache-size: '%s' is not a size (e.g. 512M, 10G)", optarg);
                return 2;
            }
            break;
        default:
            return mnt_usage_error("warmup", argc, argv);
        }
    }
    if (optind >= argc) {
        mnt_error("warmup needs at least one PATH (see 'kegfs warmup --help')");
        return 2;
    }
    if (sc.cache_size && !sc.cache_dir) {
        mnt_error("--cache-size needs --cache-dir");
        return 2;
    }
    mnt_open_log_file();
    mnt_bar_init(&bar);
    for (int i = optind; i < argc; i++) {
        struct stat st;
        char *abs = NULL;
        char *mp = NULL;
        char *url = NULL;
        if (lstat(argv[i], &st) < 0) {
            mnt_error("%s: %s", argv[i], strerror(errno));
            status = 1;
            continue;
        }
        if (sc.cache_dir) {
            if (warm_into_cache(&vc, argv[i], &st, &sc, &bar) != 0)
                status = 1;
            continue;
        }
        /* through the mount: still only for paths on a KegFS mount */
        if (mnt_abspath(argv[i], &abs) != 0 || mnt_admin_find_volume(abs, &mp, &url) != 0) {
            status = 1;
        } else if (warm_through_mount(argv[i], &bar) != 0) {
            status = 1;
        }
        mnt_bar_end(&bar);
        keg_free(abs);
        keg_free(mp);
        keg_free(url);
    }
    if (vc.fs)
        keg_fs_free(vc.fs);
    keg_free(vc.mp);
    return status;
}
