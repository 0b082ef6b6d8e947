/* cmd_dump.c -- `kegfs dump` and `kegfs load`: a volume's namespace as JSON,
 * to move a volume between metadata engines without touching object data.
 *
 * The work is done by keg_meta_dump/keg_meta_load (core/meta/dump.c); this
 * file parses the command line, opens the engine and the files, draws a
 * progress bar when stderr is a terminal and prints a summary.  A dump to a
 * FILE is written to "FILE.partial" and renamed at the end, so FILE never
 * holds half a dump.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEG_LOG_TAG "dump"
#include "keg/dump.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/meta.h"

#include "mnt_i.h"

int cmd_dump(int argc, char **argv);
int cmd_load(int argc, char **argv);

enum { OPT_KEEP_SECRET = 0x2101, OPT_PRETTY, OPT_KEEP_PARTIAL };

/*----- progress (mnt_progress.c) -----*/

/* dump: entries of about total (the inode count, may be exceeded on a live volume) */
static void dump_cb(void *arg, const struct keg_dump_stats *st, uint64_t done, uint64_t total)
{
    struct mnt_progress *p = arg;
    KEG_UNUSED(st);
    mnt_progress_total(p, total, 0);
    mnt_progress_set(p, done, 0);
}

/* load: bytes of the input parsed of total (0: a pipe), entries loaded */
static void load_cb(void *arg, const struct keg_dump_stats *st, uint64_t done, uint64_t total)
{
    struct mnt_progress *p = arg;
    mnt_progress_total(p, 0, total);
    mnt_progress_set(p, st->entries, done);
}

static void print_stats(const char *verb, const struct keg_dump_stats *st)
{
    char sz[32];
    fprintf(stderr, "kegfs: %s %llu entries: %llu directories, %llu files (%s), %llu symlinks, "
            "%llu other, %llu hard links, %llu xattrs, %llu slice records\n", verb,
            (unsigned long long)st->entries, (unsigned long long)st->dirs,
            (unsigned long long)st->files, mnt_fmt_size(st->bytes, sz, sizeof(sz)),
            (unsigned long long)st->symlinks, (unsigned long long)st->others,
            (unsigned long long)st->links, (unsigned long long)st->xattrs,
            (unsigned long long)st->slices);
}

/*----- dump -----*/

static void dump_usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs dump [OPTIONS] META_URL [FILE|-]\n"
        "\n"
        "Write the whole namespace of the volume at META_URL (settings, directories,\n"
        "files, attributes, xattrs, symlinks, hard links, chunk and slice lists, id\n"
        "counters) as one JSON document to FILE, or to standard output if FILE is '-'\n"
        "or missing.  Object data is not read or copied: 'kegfs load' recreates the\n"
        "volume in another (empty) metadata engine over the same object storage.\n"
        "Dump an unmounted volume: files changed during the dump may be inconsistent.\n"
        "\n"
        "Options:\n"
        "      --keep-secret-key      also write the storage credentials (access key,\n"
        "                             secret key, session token); FILE gets mode 0600.\n"
        "                             Without it they are left blank in the dump\n"
        "      --pretty               indent the JSON\n"
        MNT_PROGRESS_HELP
        MNT_COMMON_HELP
        "\n"
        "The format is described in docs/internals/DUMP.md.\n"
        "Exit status: 0 dumped, 1 error, 2 usage error.\n");
}

static int count_session(void *arg, const struct keg_session_info *s)
{
    KEG_UNUSED(s);
    (*(int *)arg)++;
    return 0;
}

int cmd_dump(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        {"keep-secret-key", no_argument, NULL, OPT_KEEP_SECRET},
        {"pretty", no_argument, NULL, OPT_PRETTY},
        MNT_PROGRESS_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    struct mnt_progress bar;
    struct keg_dump_stats st;
    struct keg_meta *m = NULL;
    struct keg_format f;
    unsigned flags = 0;
    int opt, fd = -1, nsess = 0, rc, status = 1;
    char *tmp = NULL;
    FILE *out = NULL;

    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            dump_usage(stdout);
            return 0;
        case OPT_KEEP_SECRET:
            flags |= KEG_DUMP_KEEP_SECRETS;
            break;
        case OPT_PRETTY:
            flags |= KEG_DUMP_PRETTY;
            break;
        default:
            return mnt_usage_error("dump", argc, argv);
        }
    }
    if (optind >= argc || argc - optind > 2) {
        mnt_error("dump needs META_URL and at most one FILE (see 'kegfs dump --help')");
        return 2;
    }
    const char *url = argv[optind];
    const char *file = optind + 1 < argc ? argv[optind + 1] : "-";
    int to_stdout = strcmp(file, "-") == 0;

    if (mnt_open_meta(url, &m))
        return 1;
    rc = keg_meta_format_load(m, &f);
    if (rc) {
        if (rc == -ENOENT)
            mnt_error("%s holds no volume (not formatted)", m->url_redacted);
        else
            mnt_error("cannot read the volume at %s: %s", m->url_redacted, strerror(-rc));
        goto out;
    }
    if (!(flags & KEG_DUMP_KEEP_SECRETS) && (f.access_key[0] || f.secret_key[0] ||
                                             f.session_token[0]))
        mnt_warn("the storage credentials of volume %s are not written (use "
                 "--keep-secret-key to include them); after 'kegfs load' set them again with "
                 "'kegfs format --force --access-key ... --secret-key ... META_URL %s'",
                 f.name, f.name);
    memset(&f, 0, sizeof(f));
    if (keg_meta_session_list(m, count_session, &nsess) == 0 && nsess > 0)
        mnt_warn("the volume has %d active session(s) (mounted?): files changed during the "
                 "dump may be dumped inconsistently; unmount it first for an exact copy",
                 nsess);

    if (to_stdout) {
        out = stdout;
    } else {
        tmp = keg_asprintf("%s.partial", file);
        if (!tmp) {
            mnt_error("out of memory");
            goto out;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                  (flags & KEG_DUMP_KEEP_SECRETS) ? 0600 : 0644);
        if (fd < 0) {
            mnt_error("cannot create %s: %s", tmp, strerror(errno));
            goto out;
        }
        out = fdopen(fd, "w");
        if (!out) {
            mnt_error("cannot open %s: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            goto out;
        }
    }
    mnt_progress_init(&bar, stderr, MNT_PROGRESS_AUTO);
    mnt_progress_start(&bar, "dumping", 0, 0);
    rc = keg_meta_dump(m, out, flags, dump_cb, &bar, &st);
    if (!rc)                /* the total was the inode count: an estimate */
        mnt_progress_total(&bar, st.entries, 0);
    mnt_progress_finish(&bar);
    mnt_progress_destroy(&bar);
    if (!to_stdout) {
        if (fsync(fileno(out)) != 0 && !rc)
            rc = -errno;
        if (fclose(out) != 0 && !rc)
            rc = -EIO;
        out = NULL;
        if (!rc && rename(tmp, file) != 0) {
            rc = -errno;
            mnt_error("cannot rename %s to %s: %s", tmp, file, strerror(-rc));
        }
        if (rc)
            unlink(tmp);
    }
    if (rc) {
        mnt_error("dump of %s failed: %s", m->url_redacted, strerror(-rc));
        goto out;
    }
    print_stats("dumped", &st);
    status = 0;
out:
    keg_free(tmp);
    if (m)
        keg_meta_close(m);
    return status;
}

/*----- load -----*/

static void load_usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs load [OPTIONS] META_URL [FILE|-]\n"
        "\n"
        "Recreate the volume dumped by 'kegfs dump' in FILE (or standard input if FILE\n"
        "is '-' or missing) in the metadata engine at META_URL, which must not hold a\n"
        "volume yet.  Inode numbers, slice ids, attributes and times are kept, so the\n"
        "loaded volume reads the same object data.  The dump's totals are checked; on\n"
        "any error the partially loaded volume is removed again.\n"
        "\n"
        "Options:\n"
        "      --keep-partial         on error keep what was loaded (for debugging only:\n"
        "                             such a volume is incomplete and must not be mounted)\n"
        MNT_PROGRESS_HELP
        MNT_COMMON_HELP
        "\n"
        "Exit status: 0 loaded, 1 error, 2 usage error.\n");
}

int cmd_load(int argc, char **argv)
{
    static const struct option longopts[] = {
        MNT_COMMON_LONGOPTS,
        {"keep-partial", no_argument, NULL, OPT_KEEP_PARTIAL},
        MNT_PROGRESS_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    struct mnt_progress bar;
    struct keg_dump_stats st;
    struct keg_meta *m = NULL;
    unsigned flags = 0;
    int opt, rc, status = 1, nosecret = 0;
    FILE *in = NULL;

    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            load_usage(stdout);
            return 0;
        case OPT_KEEP_PARTIAL:
            flags |= KEG_LOAD_KEEP_PARTIAL;
            break;
        default:
            return mnt_usage_error("load", argc, argv);
        }
    }
    if (optind >= argc || argc - optind > 2) {
        mnt_error("load needs META_URL and at most one FILE (see 'kegfs load --help')");
        return 2;
    }
    const char *url = argv[optind];
    const char *file = optind + 1 < argc ? argv[optind + 1] : "-";

    if (strcmp(file, "-") == 0) {
        in = stdin;
    } else {
        in = fopen(file, "re");
        if (!in) {
            mnt_error("cannot open %s: %s", file, strerror(errno));
            return 1;
        }
    }
    if (mnt_open_meta(url, &m))
        goto out;
    mnt_progress_init(&bar, stderr, MNT_PROGRESS_AUTO);
    mnt_progress_start(&bar, "loading", 0, 0);
    rc = keg_meta_load(m, in, flags, load_cb, &bar, &st, &nosecret);
    mnt_progress_finish(&bar);
    mnt_progress_destroy(&bar);
    if (rc) {
        mnt_error("load into %s failed: %s%s", m->url_redacted, strerror(-rc),
                  rc == -EEXIST ? " (the target already holds a volume)" : "");
        goto out;
    }
    print_stats("loaded", &st);
    if (nosecret)
        mnt_warn("the dump held no storage credentials: set them with 'kegfs format --force "
                 "--access-key ... --secret-key ... META_URL NAME' before mounting");
    status = 0;
out:
    if (in && in != stdin)
        fclose(in);
    if (m)
        keg_meta_close(m);
    return status;
}
