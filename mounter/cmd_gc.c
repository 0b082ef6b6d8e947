/* cmd_gc.c -- `kegfs gc [--delete] [--threads N] META_URL`: find (and delete) objects that no
 * file references.  The work is keg_fs_gc (core/fs/gc.c); this file parses options, draws
 * the progress bar and prints the findings. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define KEG_LOG_TAG "gc"
#include "keg/admin.h"
#include "keg/fs.h"
#include "keg/log.h"

#include "cmd_admin_i.h"
#include "mnt_i.h"

#define GC_SHOW_MAX 100     /* findings printed one per line; the rest are counted */

enum { OPT_DELETE = 0x2001, OPT_THREADS };

/* Which slices gc judged, and why it left the others alone. */
static void print_judged(const struct keg_gc_report *r)
{
    char live[96];

    if (r->live_mounters == 0) {
        printf("judged: every slice (no mounter is live)");
        if (r->new_objects)
            printf("; the %llu objects too new to judge have slice ids at or above %llu, "
                   "the slice counter when gc started: they were written since",
                   (unsigned long long)r->new_objects, (unsigned long long)r->id_next);
        printf("\n");
        return;
    }
    if (r->live_mounters < 0)
        snprintf(live, sizeof(live), "the metadata engine cannot tell whether mounters are live");
    else
        snprintf(live, sizeof(live), "%d mounter%s live", r->live_mounters,
                 r->live_mounters == 1 ? " is" : "s are");
    if (r->id_limit == 0)
        printf("judged: no slice, because %s and every slice id so far is among the newest "
               "%llu, which a live mounter may still commit\n",
               live, (unsigned long long)KEG_GC_ID_MARGIN);
    else
        printf("judged: slices with ids below %llu; the newest %llu ids were left alone, "
               "because %s and may still commit them\n",
               (unsigned long long)r->id_limit, (unsigned long long)(r->id_next - r->id_limit),
               live);
    printf("to judge every slice, unmount the volume everywhere and run gc again\n");
}

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs gc [OPTIONS] META_URL\n"
        "\n"
        "Find objects under <volume>/chunks/ that no file references (leaks left by\n"
        "failed or interrupted writes, crashed mounters) and, with --delete, delete them.\n"
        "Objects waiting in the deletion queue are left to the mounters' deleter.  While\n"
        "mounters are live, slices newer than the last 100000 ids are not judged (their\n"
        "writers may still commit them); run gc with no mounter to judge everything.\n"
        "Files that are deleted but still open on a mounter are not visible to gc: do\n"
        "not use --delete while applications keep deleted files open.\n"
        "--delete needs the volume marker <volume>/kegfs.volume (written by 'kegfs\n"
        "format') to name this volume, and deletes an object only if its block header\n"
        "names this volume: nothing of another volume is ever deleted.\n"
        "\n"
        "Options:\n"
        "      --delete             delete the leaked objects (default: only report)\n"
        "      --threads N          parallel deletes (default 4, at most 64)\n"
        MNT_PROGRESS_HELP
        MNT_COMMON_HELP
        "\n"
        "Exit status: 0 done (leaks or not), 1 error, 2 usage error.\n");
}

struct gc_show {
    struct mnt_progress *bar;
    unsigned long   shown;
};

static void gc_item(void *arg, const char *kind, const char *key, const char *detail)
{
    struct gc_show *s = arg;
    if (strcmp(kind, "deleted") == 0)
        return;                     /* counted in the summary */
    if (s->shown++ >= GC_SHOW_MAX)
        return;
    mnt_progress_print(s->bar, stdout, "%s: %s%s%s\n", kind, key ? key : "",
                       detail && *detail ? "  " : "", detail ? detail : "");
}

int mnt_cmd_gc(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        MNT_PROGRESS_LONGOPT,
        {"delete", no_argument, NULL, OPT_DELETE},
        {"threads", required_argument, NULL, OPT_THREADS},
        {NULL, 0, NULL, 0},
    };
    struct mnt_cmdline cl = {
        .name = "gc", .shortopts = "vh", .longopts = longopts, .usage = usage,
        .usage_error = "gc needs exactly one META_URL (see 'kegfs gc --help')",
        .flag_opt = OPT_DELETE, .threads_opt = OPT_THREADS, .threads = 4,
    };
    struct keg_gc_report r;
    struct keg_fs *fs = NULL;
    struct mnt_progress bar;
    struct gc_show show = {.bar = &bar};
    int do_delete;
    int rc;

    rc = mnt_parse_cmdline(argc, argv, &cl);
    if (rc >= 0)
        return rc;
    do_delete = cl.flag;
    mnt_open_log_file();
    if (mnt_admin_open(cl.operand, !do_delete, NULL, &fs) != 0)
        return 1;

    memset(&r, 0, sizeof(r));
    r.threads = (unsigned)cl.threads;
    r.item = gc_item;
    r.item_arg = &show;
    mnt_progress_init(&bar, stderr, MNT_PROGRESS_AUTO);
    rc = keg_fs_gc(fs, do_delete, &r, mnt_progress_fn, &bar);
    mnt_progress_finish(&bar);
    mnt_progress_destroy(&bar);
    if (rc == -EPERM) {
        mnt_error("gc refused: the objects under %s/ cannot be proven to be this volume's "
                  "(see the error above); nothing was deleted", keg_fs_format(fs)->name);
        keg_fs_free(fs);
        return 1;
    }
    keg_fs_free(fs);
    if (rc < 0) {
        mnt_error("gc failed: %s", strerror(-rc));
        return 1;
    }
    if (show.shown > GC_SHOW_MAX)
        printf("... and %lu more\n", show.shown - GC_SHOW_MAX);
    printf("files: %llu, directories: %llu, slices referenced: %llu\n",
           (unsigned long long)r.files, (unsigned long long)r.dirs,
           (unsigned long long)r.slices);
    printf("objects: %llu (%llu bytes): %llu referenced, %llu queued for deletion, "
           "%llu too new to judge, %llu not block objects\n",
           (unsigned long long)r.objects, (unsigned long long)r.object_bytes,
           (unsigned long long)r.referenced_objects, (unsigned long long)r.queued_objects,
           (unsigned long long)r.new_objects, (unsigned long long)r.foreign_objects);
    print_judged(&r);
    printf("leaked: %llu objects, %llu bytes", (unsigned long long)r.leaked_objects,
           (unsigned long long)r.leaked_bytes);
    if (do_delete)
        printf("; deleted %llu, kept %llu (not this volume's blocks), failed %llu\n",
               (unsigned long long)r.deleted_objects, (unsigned long long)r.kept_objects,
               (unsigned long long)r.errors);
    else
        printf("%s\n", r.leaked_objects ? " (run with --delete to remove them)" : "");
    return r.errors ? 1 : 0;
}
