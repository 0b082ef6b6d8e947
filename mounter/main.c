/* main.c -- entry point of the `kegfs` binary: global options and sub-command dispatch.
 *
 * Global options (-v/--verbose, --debug, --quiet, --log-file FILE) may come
 * before the sub-command; every sub-command accepts them too.  Exit status:
 * 0 success, 1 failure, 2 usage error.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define KEG_LOG_TAG "mnt"
#include "keg/log.h"

#include "mnt_i.h"
#include "cmd_admin_i.h"

int cmd_dump(int argc, char **argv);   /* cmd_dump.c */
int cmd_load(int argc, char **argv);
int cmd_restore(int argc, char **argv);   /* cmd_restore.c */

struct mnt_cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct mnt_cmd cmds[] = {
    {"format", mnt_cmd_format, "create a volume (or update its settings)"},
    {"mount", mnt_cmd_mount, "mount a volume with FUSE"},
    {"umount", mnt_cmd_umount, "unmount a volume and wait for the mounter to finish"},
    {"status", mnt_cmd_status, "show a volume's settings, sessions and usage"},
    {"info", mnt_cmd_info, "show the inode, chunks, slices and objects of files"},
    {"stats", mnt_cmd_stats, "show live figures of a running mounter (writeback, cache)"},
    {"gc", mnt_cmd_gc, "find (and delete) objects that no file references"},
    {"fsck", mnt_cmd_fsck, "check that every referenced block exists (--deep: is intact)"},
    {"warmup", mnt_cmd_warmup, "fetch the blocks of files ahead of use"},
    {"bench", mnt_cmd_bench, "measure a mount: big file write/read, small files, stat"},
    {"dump", cmd_dump, "write a volume's namespace as JSON"},
    {"load", cmd_load, "recreate a dumped volume in an empty engine"},
    {"restore", cmd_restore, "move deleted files from the trash back to their directory"},
    {"upgrade", mnt_cmd_upgrade, "switch a running mount to another kegfs binary in place"},
    {"holder", mnt_cmd_holder, "keep mounters alive for the CSI node plugin (socket server)"},
    {NULL, NULL, NULL},
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: kegfs [GLOBAL OPTIONS] COMMAND [OPTIONS] ARGS...\n"
            "\n"
            "KegFS %s: a POSIX file system over a metadata engine and an object store.\n"
            "\n"
            "Commands:\n", KEG_VERSION);
    for (const struct mnt_cmd *c = cmds; c->name; c++)
        fprintf(out, "  %-8s %s\n", c->name, c->summary);
    fprintf(out,
            "\n"
            "Global options:\n"
            MNT_COMMON_HELP
            "  -V, --version          print the version and exit\n"
            "\n"
            "Run 'kegfs COMMAND --help' for the options of a command.\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int opt;

    keg_log_set_level(LOG_WARNING);
    mnt_upgrade_save_argv(argc, argv);    /* before getopt permutes it */
    /* Installed as mount.kegfs / mount.fuse.kegfs: the mount(8) helper. */
    const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (strcmp(base, "mount.kegfs") == 0 || strcmp(base, "mount.fuse.kegfs") == 0)
        return mnt_mount_helper(argc, argv);
    opterr = 0;     /* every command reports a bad option itself, in one line */
    /* "+": stop at the first non-option (the sub-command). */
    while ((opt = getopt_long(argc, argv, "+vhV", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("kegfs version %s\n", KEG_VERSION);
            return 0;
        default:
            return mnt_usage_error(NULL, argc, argv);
        }
    }
    if (optind >= argc) {
        mnt_error("no command given; see 'kegfs --help'");
        return 2;
    }
    const char *name = argv[optind];
    if (strcmp(name, "version") == 0) {
        printf("kegfs version %s\n", KEG_VERSION);
        return 0;
    }
    if (strcmp(name, "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (const struct mnt_cmd *c = cmds; c->name; c++) {
        if (strcmp(c->name, name) == 0) {
            int sub_argc = argc - optind;
            char **sub_argv = argv + optind;
            optind = 0;   /* re-initialise getopt for the sub-command */
            return c->fn(sub_argc, sub_argv);
        }
    }
    mnt_error("unknown command '%s' (see 'kegfs --help')", name);
    return 2;
}
