/* mnt_mopts.c -- the generic mount options of mount(8) and /etc/fstab, and the mount helper
 * (`mount.kegfs`, `mount.fuse.kegfs`).
 *
 * DESIGN
 * mount(8) hands a file system's helper every option of the fstab line or of
 * `mount -o`: kernel flags (ro, noatime, nodev, relatime, ...), options meant
 * for mount(8) itself or for systemd (defaults, _netdev, noauto, nofail, x-*,
 * comment=...), and remount.  libfuse 3.14's option parser knows only some of
 * the kernel flags and rejects the rest ("fuse: unknown option(s)"), so every
 * generic option is classified here first:
 *   - a kernel flag: applied to the mount(2) flags (by the supervisor, or by
 *     libfuse for the flags it knows when it mounts without supervisor);
 *   - an option that means nothing to a FUSE mount: accepted and ignored;
 *   - remount: the options change the flags of the live mount (mnt_mopt_remount).
 *
 * The helper runs `kegfs mount -d -o OPTS SPEC DIR`, so mount(8) returns once
 * the mount is live, exactly like the command does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#define KEG_LOG_TAG "mount"
#include "keg/log.h"
#include "keg/mem.h"

#include "mnt_i.h"

static const struct {
    const char   *name;
    unsigned long set, clear;
    int           libfuse;    /* libfuse 3.14's mount option parser accepts it */
} flagmap[] = {
    {"ro", MS_RDONLY, 0, 1},             {"rw", 0, MS_RDONLY, 1},
    {"nosuid", MS_NOSUID, 0, 1},         {"suid", 0, MS_NOSUID, 1},
    {"nodev", MS_NODEV, 0, 1},           {"dev", 0, MS_NODEV, 1},
    {"noexec", MS_NOEXEC, 0, 1},         {"exec", 0, MS_NOEXEC, 1},
    {"sync", MS_SYNCHRONOUS, 0, 1},      {"async", 0, MS_SYNCHRONOUS, 1},
    {"dirsync", MS_DIRSYNC, 0, 1},
    {"noatime", MS_NOATIME, MS_RELATIME | MS_STRICTATIME, 1},
    {"atime", 0, MS_NOATIME, 1},
    {"nodiratime", MS_NODIRATIME, 0, 0}, {"diratime", 0, MS_NODIRATIME, 0},
    {"relatime", MS_RELATIME, MS_NOATIME | MS_STRICTATIME, 0},
    {"norelatime", 0, MS_RELATIME, 0},
    {"strictatime", MS_STRICTATIME, MS_NOATIME | MS_RELATIME, 0},
    {"nostrictatime", 0, MS_STRICTATIME, 0},
    {"lazytime", MS_LAZYTIME, 0, 0},     {"nolazytime", 0, MS_LAZYTIME, 0},
};

/* Options that mean nothing to a FUSE mount (mount(8), fstab, systemd, or
 * flags of other file systems); a trailing '*' matches any suffix. */
static const char *const ignored[] = {
    "defaults", "_netdev", "auto", "noauto", "user", "nouser", "users", "owner", "group",
    "nofail", "x-*", "comment=*", "silent", "loud", "mand", "nomand", "iversion",
    "noiversion", "user=*", "helper=*", "nosymfollow",
};

int mnt_mopt_kind(const char *opt, int *libfuse)
{
    if (libfuse)
        *libfuse = 0;
    for (size_t i = 0; i < sizeof(flagmap) / sizeof(flagmap[0]); i++) {
        if (strcmp(opt, flagmap[i].name) == 0) {
            if (libfuse)
                *libfuse = flagmap[i].libfuse;
            return MNT_MOPT_FLAG;
        }
    }
    if (strcmp(opt, "remount") == 0)
        return MNT_MOPT_REMOUNT;
    for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++) {
        size_t n = strlen(ignored[i]);
        if (ignored[i][n - 1] == '*' ? strncmp(opt, ignored[i], n - 1) == 0
                                     : strcmp(opt, ignored[i]) == 0)
            return MNT_MOPT_IGNORED;
    }
    return MNT_MOPT_NONE;
}

int mnt_mopt_apply(const char *opt, unsigned long *flags)
{
    for (size_t i = 0; i < sizeof(flagmap) / sizeof(flagmap[0]); i++) {
        if (strcmp(opt, flagmap[i].name) == 0) {
            *flags = (*flags & ~flagmap[i].clear) | flagmap[i].set;
            return 1;
        }
    }
    return 0;
}

int mnt_mopt_remount(const char *abs_mp, const char *opts)
{
    static const struct {
        unsigned long st, ms;
    } stmap[] = {
        {ST_RDONLY, MS_RDONLY},       {ST_NOSUID, MS_NOSUID},     {ST_NODEV, MS_NODEV},
        {ST_NOEXEC, MS_NOEXEC},       {ST_SYNCHRONOUS, MS_SYNCHRONOUS},
        {ST_NOATIME, MS_NOATIME},     {ST_NODIRATIME, MS_NODIRATIME},
        {ST_RELATIME, MS_RELATIME},
    };
    char fstype[64];
    struct statvfs sv;
    unsigned long flags = 0;
    int rc = mnt_is_mountpoint(abs_mp, fstype, sizeof(fstype));
    if (rc <= 0 || strcmp(fstype, "fuse.kegfs") != 0) {
        mnt_error("remount: %s is not a kegfs mount", abs_mp);
        return -EINVAL;
    }
    /* A remount sets all flags of the mount: start from the current ones so
     * that `-o remount,ro` keeps nosuid, nodev, noatime ... */
    if (statvfs(abs_mp, &sv) < 0) {
        rc = -errno;
        mnt_error("remount: %s: %s", abs_mp, strerror(-rc));
        return rc;
    }
    for (size_t i = 0; i < sizeof(stmap) / sizeof(stmap[0]); i++)
        if (sv.f_flag & stmap[i].st)
            flags |= stmap[i].ms;
    char *copy = keg_strdup(opts ? opts : "");
    char *save = NULL;
    if (!copy)
        return -ENOMEM;
    for (char *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
        if (mnt_mopt_apply(o, &flags))
            continue;
        /* mount(8) repeats the superblock's options (user_id=0, allow_other ...) */
        if (mnt_mopt_kind(o, NULL) == MNT_MOPT_NONE)
            KEG_DEBUG("remount of %s: option '%s' cannot change on a live mount; ignored",
                     abs_mp, o);
    }
    keg_free(copy);
    if (mount(NULL, abs_mp, NULL, MS_REMOUNT | flags, NULL) < 0) {
        rc = -errno;
        mnt_error("remount of %s: %s%s", abs_mp, strerror(-rc),
                  rc == -EBUSY ? " (files are open for writing)" : "");
        return rc;
    }
    KEG_INFO("remounted %s (%s)", abs_mp, flags & MS_RDONLY ? "read-only" : "read-write");
    return 0;
}

/*----- the mount(8) helper -----*/

static void helper_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "Usage: %s META_URL MOUNTPOINT [-sfnv] [-o OPTIONS] [-t TYPE]\n"
            "\n"
            "The mount(8) helper of KegFS: `mount -t kegfs META_URL MOUNTPOINT` and /etc/fstab\n"
            "lines of type kegfs (or fuse.kegfs) run it.  It runs\n"
            "`kegfs mount -d -o OPTIONS META_URL MOUNTPOINT` and returns once the mount is live;\n"
            "-o remount,... changes the flags of a live mount (ro, rw, nosuid, noatime, ...).\n"
            "OPTIONS: kernel flags, options of mount(8) and fstab (ignored), and every\n"
            "`kegfs mount` option as name=value (see 'kegfs mount --help').\n",
            prog);
}

int mnt_mount_helper(int argc, char **argv)
{
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    const char *pos[2] = {NULL, NULL};
    const char *opts = NULL;
    int npos = 0, verbose = 0, fake = 0;

    /* mount(8) calls: helper SPEC DIR [-sfnv] [-N NS] [-o OPTS] [-t TYPE]; the
     * options may also come first. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            helper_usage(stdout, prog);
            return 0;
        }
        if ((strcmp(a, "-o") == 0 || strcmp(a, "-t") == 0 || strcmp(a, "-N") == 0) &&
            i + 1 < argc) {
            if (a[1] == 'o')
                opts = argv[i + 1];
            else if (a[1] == 'N') {
                mnt_error("%s: -N (another mount namespace) is not supported", prog);
                return 32;
            }
            i++;
            continue;
        }
        if (a[0] == '-' && a[1] && a[1] != '-') {
            for (const char *c = a + 1; *c; c++) {
                if (*c == 'v')
                    verbose = 1;
                else if (*c == 'f')
                    fake = 1;
                else if (*c != 's' && *c != 'n' && *c != 'r' && *c != 'w') {
                    mnt_error("%s: unknown option -%c", prog, *c);
                    helper_usage(stderr, prog);
                    return 1;
                }
            }
            continue;
        }
        if (npos == 2) {
            helper_usage(stderr, prog);
            return 1;
        }
        pos[npos++] = a;
    }
    if (npos != 2) {
        helper_usage(stderr, prog);
        return 1;
    }
    /* mount.fuse's "kegfs#META_URL" form */
    if (strncmp(pos[0], "kegfs#", 6) == 0)
        pos[0] += 6;
    if (fake)
        return 0;
    if (!verbose)
        keg_log_set_level(LOG_NOTICE);   /* mount(8) is silent on success */
    /* config=FILE becomes --config FILE (not allowed in -o of `kegfs mount`: it
     * is read before the options); with it, a SPEC that is no URL (e.g. "kegfs")
     * leaves META_URL to the file's meta-url. */
    char *rest = keg_strdup(opts ? opts : "");
    char *config = NULL;
    char *save = NULL;
    char *sub[12];
    int n = 0;
    int rc = 1;
    if (!rest) {
        mnt_error("out of memory");
        return 32;
    }
    char *kept = keg_strdup("");
    for (char *o = strtok_r(rest, ",", &save); o && kept; o = strtok_r(NULL, ",", &save)) {
        if (strncmp(o, "config=", 7) == 0) {
            config = o + 7;
            continue;
        }
        char *k = kept[0] ? keg_asprintf("%s,%s", kept, o) : keg_strdup(o);
        keg_free(kept);
        kept = k;
    }
    if (!kept) {
        mnt_error("out of memory");
        rc = 32;
        goto out;
    }
    sub[n++] = "mount";
    sub[n++] = "-d";
    if (verbose)
        sub[n++] = "-v";
    if (config) {
        sub[n++] = "--config";
        sub[n++] = config;
    }
    if (kept[0]) {
        sub[n++] = "-o";
        sub[n++] = kept;
    }
    if (!config || strstr(pos[0], "://"))
        sub[n++] = (char *)pos[0];
    sub[n++] = (char *)pos[1];
    sub[n] = NULL;
    optind = 0;
    rc = mnt_cmd_mount(n, sub);
    /* mount(8) reads helper status 32 as "mount failure", 1 as bad usage */
    rc = rc == 0 ? 0 : rc == 2 ? 1 : 32;
out:
    keg_free(kept);
    keg_free(rest);
    return rc;
}
