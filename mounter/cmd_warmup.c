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
        MNT_PROGRESS_HELP
        MNT_COMMON_HELP
        "\n"
        "A summary line 'warmed N files, SIZE in S s' ends the output (on standard output).\n"
        "Exit status: 0 all warmed, 1 some PATH failed (missing or corrupt blocks are\n"
        "named in the log), 2 usage error.\n");
}

/*----- through the mount -----*/

struct walk_files {
    char   **path;
    size_t   n, cap;
    uint64_t bytes;
    int      count_only;            /* only n and bytes, no paths kept */
    int      err;
};

static struct walk_files *walk_acc;    /* nftw has no user argument */

static int collect_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    struct walk_files *w = walk_acc;
    KEG_UNUSED(ftw);
    if (flag != FTW_F || !S_ISREG(sb->st_mode))
        return 0;
    if (w->count_only) {
        w->n++;
        w->bytes += (uint64_t)sb->st_size;
        return 0;
    }
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

/* What the summary counts. */
struct warm_sum {
    uint64_t files, bytes;
};

static int warm_through_mount(const char *path, struct mnt_progress *bar, struct warm_sum *sum)
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
    mnt_progress_start(bar, "warming", w.n, w.bytes);
    for (size_t i = 0; i < w.n; i++) {
        int fd = open(w.path[i], O_RDONLY | O_NOATIME);
        int ok = 1;
        if (fd < 0)
            fd = open(w.path[i], O_RDONLY);
        if (fd < 0) {
            mnt_progress_clear(bar);
            mnt_error("%s: %s", w.path[i], strerror(errno));
            status = 1;
            continue;
        }
        for (;;) {
            ssize_t n = read(fd, buf, WARM_BUF);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                mnt_progress_clear(bar);
                mnt_error("%s: %s", w.path[i], strerror(errno));
                status = 1;
                ok = 0;
                break;
            }
            if (n == 0)
                break;
            /* a file that grew since the walk: the bar stays within its total */
            uint64_t add = KEG_MIN((uint64_t)n, w.bytes - KEG_MIN(done, w.bytes));
            done += (uint64_t)n;
            sum->bytes += (uint64_t)n;
            mnt_progress_add(bar, 0, add);
        }
        close(fd);
        if (ok)
            sum->files++;
        mnt_progress_add(bar, 1, 0);
    }
    if (status == 0)        /* files that shrank since the walk: all done is 100% */
        mnt_progress_total(bar, w.n, KEG_MIN(done, w.bytes));
    mnt_progress_finish(bar);
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
                           const struct keg_stack_conf *sc, struct mnt_progress *bar,
                           struct warm_sum *sum)
{
    struct walk_files w = {.count_only = 1};
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
    /* the files and bytes for the summary (metadata only, through the mount) */
    if (S_ISREG(st->st_mode)) {
        w.n = 1;
        w.bytes = (uint64_t)st->st_size;
    } else {
        walk_acc = &w;
        nftw(path, collect_cb, 16, FTW_PHYS | FTW_MOUNT);
        walk_acc = NULL;
    }
    rc = keg_fs_warmup(vc->fs, st->st_ino, mnt_progress_fn, bar);
    mnt_progress_finish(bar);
    if (rc < 0) {
        mnt_error("%s: warmup failed: %s", path, strerror(-rc));
    } else {
        sum->files += w.n;
        sum->bytes += w.bytes;
    }
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
        MNT_PROGRESS_LONGOPT,
        {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
        {"cache-size", required_argument, NULL, OPT_CACHE_SIZE},
        {NULL, 0, NULL, 0},
    };
    struct keg_stack_conf sc;
    struct vol_cache vc = {0};
    struct mnt_progress bar;
    struct warm_sum sum = {0};
    char sz[32];
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
    mnt_progress_init(&bar, stderr, MNT_PROGRESS_AUTO);
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
            if (warm_into_cache(&vc, argv[i], &st, &sc, &bar, &sum) != 0)
                status = 1;
            continue;
        }
        /* through the mount: still only for paths on a KegFS mount */
        if (mnt_abspath(argv[i], &abs) != 0 || mnt_admin_find_volume(abs, &mp, &url) != 0) {
            status = 1;
        } else if (warm_through_mount(argv[i], &bar, &sum) != 0) {
            status = 1;
        }
        keg_free(abs);
        keg_free(mp);
        keg_free(url);
    }
    if (vc.fs)
        keg_fs_free(vc.fs);
    keg_free(vc.mp);
    mnt_progress_summary(&bar, stdout, "warmed %llu files, %s%s%s",
                         (unsigned long long)sum.files, mnt_fmt_size(sum.bytes, sz, sizeof(sz)),
                         sc.cache_dir ? " into " : "", sc.cache_dir ? sc.cache_dir : "");
    if (status)
        printf("some paths were not warmed (see the errors above)\n");
    mnt_progress_destroy(&bar);
    return status;
}
