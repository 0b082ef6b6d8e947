/* cmd_info.c -- `kegfs info`: inode, chunks, slices and block objects of files on a mounted volume.
 *
 * The volume behind a path is found through its mount: walk up from the path
 * to the KegFS mount point (fstype fuse.kegfs), read that mounter's state file
 * (mnt_state_read: its META_URL), and open the volume with no session.  FUSE
 * inode numbers are KegFS inode numbers, so st_ino is the inode to inspect.
 * Data still buffered in the mounter (not yet flushed by close/fsync) is not
 * visible here.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define KEG_LOG_TAG "info"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/obj.h"

#include "mnt_i.h"

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs info [OPTIONS] PATH...\n"
        "\n"
        "For each PATH on a mounted KegFS volume, show its inode and attributes and,\n"
        "for regular files, every chunk's slices (id, pos, off, len) and the object\n"
        "keys of the blocks they use.  The mount must have been made by 'kegfs mount'\n"
        "on this machine (its state file gives the volume's META_URL; needs the same\n"
        "privileges as the mounter to read it).\n"
        "\n"
        "Options:\n"
        MNT_COMMON_HELP
        "\n"
        "Exit status: 0 all shown, 1 some PATH failed, 2 usage error.\n");
}

/* The KegFS mount point containing abs.  OWNERSHIP: caller keg_free()s *out. */
static int find_mount(const char *abs, char **out)
{
    char fstype[64];
    char *p = keg_strdup(abs);
    *out = NULL;
    if (!p)
        return -ENOMEM;
    for (;;) {
        int rc = mnt_is_mountpoint(p, fstype, sizeof(fstype));
        if (rc > 0) {
            if (strcmp(fstype, "fuse.kegfs") != 0)
                break;
            *out = p;
            return 0;
        }
        if (rc < 0 || strcmp(p, "/") == 0)
            break;
        char *slash = strrchr(p, '/');
        if (slash == p)
            p[1] = '\0';
        else
            *slash = '\0';
    }
    keg_free(p);
    return -ENOENT;
}

struct info_ctx {
    const struct keg_format *f;
    uint32_t last_indx;
    int      any;
    uint64_t nslices, nobjects;
};

static int print_slice(void *arg, uint32_t indx, const struct keg_slice *s)
{
    struct info_ctx *ic = arg;
    char key[512];
    if (!ic->any || ic->last_indx != indx)
        printf("  chunk %u (file offset %llu):\n", indx,
               (unsigned long long)indx * KEG_CHUNK_SIZE);
    ic->any = 1;
    ic->last_indx = indx;
    ic->nslices++;
    if (s->id == 0) {
        printf("    hole pos=%u len=%u\n", s->pos, s->len);
        return 0;
    }
    printf("    slice id=%llu pos=%u off=%u len=%u size=%u\n", (unsigned long long)s->id,
           s->pos, s->off, s->len, s->size);
    uint32_t bs = ic->f->block_size ? ic->f->block_size : KEG_BLOCK_SIZE_DEFAULT;
    if (s->len == 0)
        return 0;
    uint32_t first = s->off / bs;
    uint32_t last = (s->off + s->len - 1) / bs;
    for (uint32_t b = first; b <= last; b++) {
        uint64_t start = (uint64_t)b * bs;
        uint32_t blen = (uint32_t)KEG_MIN((uint64_t)bs, (uint64_t)s->size - start);
        keg_block_key(key, sizeof(key), ic->f->name, s->id, b, blen);
        printf("      object %s\n", key);
        ic->nobjects++;
    }
    return 0;
}

static const char *type_name(mode_t m)
{
    if (S_ISREG(m)) return "regular file";
    if (S_ISDIR(m)) return "directory";
    if (S_ISLNK(m)) return "symbolic link";
    if (S_ISFIFO(m)) return "fifo";
    if (S_ISSOCK(m)) return "socket";
    if (S_ISCHR(m)) return "character device";
    if (S_ISBLK(m)) return "block device";
    return "unknown";
}

/* The open volume, reused while consecutive paths are on the same mount. */
struct vol_cache {
    char          *mp;
    struct keg_fs *fs;
};

static int open_volume(struct vol_cache *vc, const char *mp)
{
    struct keg_fs_conf conf;
    char *url = NULL;
    char h[17];
    if (vc->mp && strcmp(vc->mp, mp) == 0)
        return 0;
    if (vc->fs)
        keg_fs_free(vc->fs);
    keg_free(vc->mp);
    vc->fs = NULL;
    vc->mp = NULL;
    int rc = mnt_state_read(mp, NULL, &url);
    if (rc) {
        mnt_path_hash(mp, h);
        mnt_error("cannot read the state of the mount at %s (%s/mounts/%s): %s", mp,
                  mnt_run_dir(), h, strerror(-rc));
        return rc;
    }
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = url;
    conf.no_session = 1;
    conf.read_only = 1;
    rc = keg_fs_new(&conf, &vc->fs);
    keg_free(url);
    if (rc) {
        mnt_error("cannot open the volume mounted at %s: %s", mp, strerror(-rc));
        vc->fs = NULL;
        return rc;
    }
    vc->mp = keg_strdup(mp);
    return 0;
}

static int info_one(struct vol_cache *vc, const char *path)
{
    struct stat st;
    char *abs = NULL;
    char *mp = NULL;
    char sz[32];
    int rc;
    if (lstat(path, &st) < 0) {
        rc = -errno;
        mnt_error("%s: %s", path, strerror(-rc));
        return rc;
    }
    rc = mnt_abspath(path, &abs);
    if (!rc)
        rc = find_mount(abs, &mp);
    if (rc) {
        mnt_error("%s is not on a KegFS mount", path);
        goto out;
    }
    rc = open_volume(vc, mp);
    if (rc)
        goto out;
    const struct keg_format *f = keg_fs_format(vc->fs);
    printf("%s:\n", path);
    printf("  volume: %s (mounted at %s)\n", f->name, mp);
    printf("  inode:  %llu\n", (unsigned long long)st.st_ino);
    printf("  type:   %s, mode %04o, uid %u, gid %u, nlink %lu\n", type_name(st.st_mode),
           (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)st.st_gid,
           (unsigned long)st.st_nlink);
    printf("  size:   %llu (%s)\n", (unsigned long long)st.st_size,
           mnt_fmt_size((uint64_t)st.st_size, sz, sizeof(sz)));
    if (!S_ISREG(st.st_mode))
        goto out;
    struct info_ctx ic = {.f = f};
    rc = keg_fs_chunks(vc->fs, st.st_ino, print_slice, &ic);
    if (rc < 0) {
        mnt_error("%s: cannot read its chunks: %s", path, strerror(-rc));
        goto out;
    }
    if (!ic.any)
        printf("  (no chunks)\n");
    printf("  slices: %llu, objects: %llu\n", (unsigned long long)ic.nslices,
           (unsigned long long)ic.nobjects);
    rc = 0;
out:
    keg_free(abs);
    keg_free(mp);
    return rc;
}

int mnt_cmd_info(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct vol_cache vc = {0};
    int opt;
    int status = 0;
    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        if (opt == 'h') {
            usage(stdout);
            return 0;
        }
        return mnt_usage_error("info", argc, argv);
    }
    if (optind >= argc) {
        mnt_error("info needs at least one PATH (see 'kegfs info --help')");
        return 2;
    }
    if (mnt_log_file && keg_log_set_file(mnt_log_file) < 0)
        mnt_warn("cannot open --log-file %s", mnt_log_file);
    for (int i = optind; i < argc; i++) {
        if (info_one(&vc, argv[i]) != 0)
            status = 1;
    }
    if (vc.fs)
        keg_fs_free(vc.fs);
    keg_free(vc.mp);
    return status;
}
