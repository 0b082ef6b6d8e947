/* cmd_fsck.c -- `kegfs fsck [--deep] [--threads N] META_URL`: check that every block that a
 * file references exists (and with --deep, decodes with a valid CRC32C as the block of its
 * key in this volume).  The work is
 * keg_fs_fsck (core/fs/gc.c); this file parses options, draws the progress bar and prints
 * each problem with the files it affects. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define KEG_LOG_TAG "fsck"
#include "keg/admin.h"
#include "keg/fs.h"
#include "keg/log.h"

#include "cmd_admin_i.h"
#include "mnt_i.h"

enum { OPT_DEEP = 0x2101, OPT_THREADS };

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs fsck [OPTIONS] META_URL\n"
        "\n"
        "Walk every file of the volume and check that each block object its slices\n"
        "use exists in the object store (one HEAD per block).  With --deep every\n"
        "block is downloaded and verified (format, CRC32C, and that it is the block\n"
        "of its key in this volume: a block of another file or volume is corrupt,\n"
        "printed with what it holds).  Each missing or corrupt object is printed\n"
        "with the paths of the files that use it.\n"
        "\n"
        "Options:\n"
        "      --deep               download and verify every block\n"
        "      --threads N          parallel checks (default 8, at most 64)\n"
        MNT_PROGRESS_HELP
        MNT_COMMON_HELP
        "\n"
        "The last line is the verdict: 'volume is consistent' or 'problems found'.\n"
        "Exit status: 0 consistent, 1 problems found (or an error), 2 usage error.\n");
}

static void fsck_item(void *arg, const char *kind, const char *key, const char *detail)
{
    struct mnt_progress *p = arg;
    if (strcmp(kind, "file") == 0)
        mnt_progress_print(p, stdout, "  affected file: %s (%s)\n", key, detail);
    else
        mnt_progress_print(p, stdout, "%s: %s%s%s\n", kind, key ? key : "",
                           detail && *detail ? "  " : "", detail ? detail : "");
}

int mnt_cmd_fsck(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        MNT_PROGRESS_LONGOPT,
        {"deep", no_argument, NULL, OPT_DEEP},
        {"threads", required_argument, NULL, OPT_THREADS},
        {NULL, 0, NULL, 0},
    };
    struct mnt_cmdline cl = {
        .name = "fsck", .shortopts = "vh", .longopts = longopts, .usage = usage,
        .usage_error = "fsck needs exactly one META_URL (see 'kegfs fsck --help')",
        .flag_opt = OPT_DEEP, .threads_opt = OPT_THREADS, .threads = 8,
    };
    struct keg_fsck_report r;
    struct keg_fs *fs = NULL;
    struct mnt_progress bar;
    int deep;
    int rc;

    rc = mnt_parse_cmdline(argc, argv, &cl);
    if (rc >= 0)
        return rc;
    deep = cl.flag;
    mnt_open_log_file();
    if (mnt_admin_open(cl.operand, 1, NULL, &fs) != 0)
        return 1;

    memset(&r, 0, sizeof(r));
    r.threads = (unsigned)cl.threads;
    r.item = fsck_item;
    r.item_arg = &bar;
    mnt_progress_init(&bar, stderr, MNT_PROGRESS_AUTO);
    rc = keg_fs_fsck(fs, deep, &r, mnt_progress_fn, &bar);
    mnt_progress_finish(&bar);
    keg_fs_free(fs);
    if (rc < 0) {
        mnt_progress_destroy(&bar);
        mnt_error("fsck failed: %s", strerror(-rc));
        return 1;
    }
    printf("files: %llu, directories: %llu, slices: %llu, blocks checked: %llu%s\n",
           (unsigned long long)r.files, (unsigned long long)r.dirs,
           (unsigned long long)r.slices, (unsigned long long)r.blocks,
           deep ? " (downloaded and verified)" : "");
    printf("missing: %llu, corrupt: %llu, bad references: %llu, store errors: %llu, "
           "affected paths: %llu\n",
           (unsigned long long)r.missing, (unsigned long long)r.corrupt,
           (unsigned long long)r.bad_refs, (unsigned long long)r.errors,
           (unsigned long long)r.problem_files);
    if (rc == 0 && r.errors == 0) {
        printf("volume is consistent (checked in %.1f s)\n", mnt_progress_elapsed(&bar));
        mnt_progress_destroy(&bar);
        return 0;
    }
    printf("problems found (checked in %.1f s)\n", mnt_progress_elapsed(&bar));
    mnt_progress_destroy(&bar);
    return 1;
}
