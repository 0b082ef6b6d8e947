/* cmd_format.c -- `kegfs format`: create a volume, or update the settings of one.
 *
 * DESIGN
 * Everything is checked before anything is written: the name, the block size,
 * the storage (a file bucket must be an existing absolute directory), then the
 * object stack is opened and probed with a put/get/delete of
 * "<name>/.kegfs-probe-<random>", then the key prefix "<name>/" is claimed
 * with the volume marker (claim_prefix: refused if another volume uses the
 * name on this bucket), and only then is the format written with
 * format_init().  An existing volume is refused unless --force; with --force
 * only the settings given on the command line change, and the ones that
 * object keys depend on (name, block size, compression) cannot.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEG_LOG_TAG "format"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/meta.h"
#include "keg/obj.h"
#include "keg/stack.h"
#include "keg/url.h"
#include "keg/uuid.h"

#include "mnt_i.h"

enum {
    OPT_STORAGE = 0x2001, OPT_BUCKET, OPT_ACCESS_KEY, OPT_SECRET_KEY, OPT_SECRET_KEY_FILE,
    OPT_REGION, OPT_BLOCK_SIZE, OPT_COMPRESS, OPT_CAPACITY, OPT_INODES, OPT_TRASH_DAYS,
    OPT_FORCE, OPT_INSECURE, OPT_CA_FILE, OPT_S3_CONCURRENCY, OPT_S3_RETRY_DEADLINE,
};

/* What the command line set (NULL / -1: not given). */
struct fmt_args {
    const char *storage, *bucket, *access_key, *secret_key, *secret_key_file, *region;
    const char *compress, *block_size_arg;
    uint64_t block_size, capacity, inodes, trash_days;
    int has_block_size, has_capacity, has_inodes, has_trash_days;
    int force;
    /* S3 client settings for the probe; not stored in the format */
    int insecure;
    const char *ca_file;
    uint64_t s3_concurrency;
    double s3_retry_deadline;
};

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: kegfs format [OPTIONS] META_URL NAME\n"
        "\n"
        "Create volume NAME in the metadata engine at META_URL (sqlite3:///path/meta.db,\n"
        "redis://[:password@]host:port/db) with its data in the given object storage.\n"
        "\n"
        "Options:\n"
        "      --storage TYPE         object storage: file (default), s3, mem\n"
        "      --bucket DIR_OR_URL    file: absolute existing directory; s3: endpoint URL\n"
        "                             with bucket (http://127.0.0.1:7480/mybucket)\n"
        "      --access-key KEY       s3 access key (default: $AWS_ACCESS_KEY_ID)\n"
        "      --secret-key SECRET    s3 secret key (default: $AWS_SECRET_ACCESS_KEY);\n"
        "                             prefer --secret-key-file or the environment\n"
        "      --secret-key-file F    read the s3 secret key from file F\n"
        "      --region REGION        s3 region (default: us-east-1)\n"
        "      --block-size SIZE      block size, power of two, 64K..16M (default 4M)\n"
        "      --compress ALGO        none (default), lz4, zstd\n"
        "      --capacity SIZE        space quota, e.g. 10G (default 0: unlimited)\n"
        "      --inodes N             inode quota (default 0: unlimited)\n"
        "      --trash-days N         keep deleted files N days (default 0: no trash)\n"
        "      --force                update the settings of an existing volume\n"
        "      --insecure             s3 over https: do NOT verify the certificate (testing)\n"
        "      --ca-file FILE         s3 over https: trust the CA certificates in FILE\n"
        "      --s3-concurrency N     s3 connection pool size (default 16)\n"
        "      --s3-retry-deadline SEC  time one s3 request may spend retrying (default 60)\n"
        "                             (these four apply to the storage check only and are\n"
        "                             not stored: give them to 'kegfs mount' too)\n"
        MNT_COMMON_HELP
        "\n"
        "The environment variable AWS_SESSION_TOKEN is stored as the s3 session token.\n"
        "Exit status: 0 formatted, 1 error, 2 usage error.\n");
}

static int parse_args(int argc, char **argv, struct fmt_args *a)
{
    static const struct option longopts[] = {
        {"storage", required_argument, NULL, OPT_STORAGE},
        {"bucket", required_argument, NULL, OPT_BUCKET},
        {"access-key", required_argument, NULL, OPT_ACCESS_KEY},
        {"secret-key", required_argument, NULL, OPT_SECRET_KEY},
        {"secret-key-file", required_argument, NULL, OPT_SECRET_KEY_FILE},
        {"region", required_argument, NULL, OPT_REGION},
        {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
        {"compress", required_argument, NULL, OPT_COMPRESS},
        {"capacity", required_argument, NULL, OPT_CAPACITY},
        {"inodes", required_argument, NULL, OPT_INODES},
        {"trash-days", required_argument, NULL, OPT_TRASH_DAYS},
        {"force", no_argument, NULL, OPT_FORCE},
        {"insecure", no_argument, NULL, OPT_INSECURE},
        {"ca-file", required_argument, NULL, OPT_CA_FILE},
        {"s3-concurrency", required_argument, NULL, OPT_S3_CONCURRENCY},
        {"s3-retry-deadline", required_argument, NULL, OPT_S3_RETRY_DEADLINE},
        MNT_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    int opt;
    memset(a, 0, sizeof(*a));
    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        if (mnt_common_opt(opt, optarg))
            continue;
        switch (opt) {
        case OPT_STORAGE: a->storage = optarg; break;
        case OPT_BUCKET: a->bucket = optarg; break;
        case OPT_ACCESS_KEY: a->access_key = optarg; break;
        case OPT_SECRET_KEY: a->secret_key = optarg; break;
        case OPT_SECRET_KEY_FILE: a->secret_key_file = optarg; break;
        case OPT_REGION: a->region = optarg; break;
        case OPT_COMPRESS: a->compress = optarg; break;
        case OPT_FORCE: a->force = 1; break;
        case OPT_INSECURE: a->insecure = 1; break;
        case OPT_CA_FILE: a->ca_file = optarg; break;
        case OPT_S3_CONCURRENCY:
            if (mnt_parse_u64(optarg, &a->s3_concurrency) || a->s3_concurrency < 1 ||
                a->s3_concurrency > 1024) {
                mnt_error("invalid --s3-concurrency '%s' (expected 1..1024)", optarg);
                return 2;
            }
            break;
        case OPT_S3_RETRY_DEADLINE:
            if (mnt_parse_seconds(optarg, &a->s3_retry_deadline) ||
                a->s3_retry_deadline < 0.001 || a->s3_retry_deadline > 86400) {
                mnt_error("invalid --s3-retry-deadline '%s' (expected seconds, e.g. 60)",
                          optarg);
                return 2;
            }
            break;
        case OPT_BLOCK_SIZE:
            a->has_block_size = 1;
            a->block_size_arg = optarg;
            if (mnt_parse_size(optarg, &a->block_size)) {
                mnt_error("invalid --block-size '%s' (expected e.g. 4M)", optarg);
                return 2;
            }
            break;
        case OPT_CAPACITY:
            a->has_capacity = 1;
            if (mnt_parse_size(optarg, &a->capacity)) {
                mnt_error("invalid --capacity '%s' (expected bytes or e.g. 10G)", optarg);
                return 2;
            }
            break;
        case OPT_INODES:
            a->has_inodes = 1;
            if (mnt_parse_u64(optarg, &a->inodes)) {
                mnt_error("invalid --inodes '%s' (expected a count)", optarg);
                return 2;
            }
            break;
        case OPT_TRASH_DAYS:
            a->has_trash_days = 1;
            if (mnt_parse_u64(optarg, &a->trash_days) || a->trash_days > 36500) {
                mnt_error("invalid --trash-days '%s' (expected 0..36500)", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return -1;
        default:
            return mnt_usage_error("format", argc, argv);
        }
    }
    return 0;
}

/* Copy src into a fixed-size format field; error if it does not fit. */
static int set_field(char *dst, size_t size, const char *src, const char *what)
{
    size_t n = strlen(src);
    if (n >= size) {
        mnt_error("%s is too long (at most %zu bytes)", what, size - 1);
        return -ENAMETOOLONG;
    }
    memcpy(dst, src, n + 1);
    return 0;
}

/* Where the credentials came from, for error messages ("check --secret-key"). */
static const char *ak_source = "--access-key or $AWS_ACCESS_KEY_ID";
static const char *sk_source = "--secret-key, --secret-key-file or $AWS_SECRET_ACCESS_KEY";

/* Apply the credentials from flags, files and the environment. */
static int apply_credentials(const struct fmt_args *a, struct keg_format *f)
{
    const char *ak = a->access_key ? a->access_key : getenv("AWS_ACCESS_KEY_ID");
    const char *tok = getenv("AWS_SESSION_TOKEN");
    char *sk_file = NULL;
    const char *sk = a->secret_key;
    int rc = 0;
    if (a->access_key)
        ak_source = "--access-key";
    else if (ak)
        ak_source = "$AWS_ACCESS_KEY_ID";
    if (a->secret_key)
        sk_source = "--secret-key";
    else if (a->secret_key_file)
        sk_source = "--secret-key-file";
    else if (getenv("AWS_SECRET_ACCESS_KEY"))
        sk_source = "$AWS_SECRET_ACCESS_KEY";
    if (!sk && a->secret_key_file) {
        rc = mnt_read_small_file(a->secret_key_file, &sk_file);
        if (rc) {
            mnt_error("cannot read --secret-key-file %s: %s", a->secret_key_file, strerror(-rc));
            return rc;
        }
        sk = sk_file;
    }
    if (!sk)
        sk = getenv("AWS_SECRET_ACCESS_KEY");
    if (ak)
        rc = set_field(f->access_key, sizeof(f->access_key), ak, "access key");
    if (!rc && sk)
        rc = set_field(f->secret_key, sizeof(f->secret_key), sk, "secret key");
    if (!rc && tok)
        rc = set_field(f->session_token, sizeof(f->session_token), tok, "AWS_SESSION_TOKEN");
    if (sk_file) {
        memset(sk_file, 0, strlen(sk_file));
        keg_free(sk_file);
    }
    return rc;
}

/* Merge the command line into f (a fresh volume when !exists). */
static int build_format(const struct fmt_args *a, const char *name, int exists,
                        struct keg_format *f)
{
    if (exists) {
        if (strcmp(f->name, name) != 0) {
            mnt_error("the volume here is named '%s'; a volume cannot be renamed", f->name);
            return -EINVAL;
        }
        if (a->has_block_size && a->block_size != f->block_size) {
            mnt_error("cannot change the block size of an existing volume (it is %u bytes)",
                      f->block_size);
            return -EINVAL;
        }
        if (a->compress && strcmp(a->compress, f->compress) != 0) {
            mnt_error("cannot change the compression of an existing volume (it is %s)",
                      f->compress);
            return -EINVAL;
        }
    } else {
        memset(f, 0, sizeof(*f));
        snprintf(f->name, sizeof(f->name), "%s", name);
        keg_uuid_v4(f->uuid);
        snprintf(f->storage, sizeof(f->storage), "file");
        snprintf(f->compress, sizeof(f->compress), "none");
        f->block_size = KEG_BLOCK_SIZE_DEFAULT;
        f->block_version = KEG_BLOCK_VERSION;
        f->created = (int64_t)time(NULL);
    }
    if (a->storage) {
        if (strcmp(a->storage, "file") && strcmp(a->storage, "s3") && strcmp(a->storage, "mem")) {
            mnt_error("unknown --storage '%s' (expected file, s3 or mem)", a->storage);
            return -EINVAL;
        }
        snprintf(f->storage, sizeof(f->storage), "%s", a->storage);
    }
    if (a->bucket && set_field(f->bucket, sizeof(f->bucket), a->bucket, "--bucket"))
        return -EINVAL;
    if (a->region && set_field(f->region, sizeof(f->region), a->region, "--region"))
        return -EINVAL;
    if (a->compress) {
        if (keg_codec_parse(a->compress) < 0) {
            mnt_error("unknown --compress '%s' (expected none, lz4 or zstd)", a->compress);
            return -EINVAL;
        }
        snprintf(f->compress, sizeof(f->compress), "%s", a->compress);
    }
    if (a->has_block_size) {
        uint64_t bs = a->block_size;
        if (bs < (64u << 10) || bs > KEG_BLOCK_SIZE_MAX || (bs & (bs - 1))) {
            mnt_error("invalid --block-size %s: must be a power of two from 64K to 16M",
                      a->block_size_arg);
            return -EINVAL;
        }
        f->block_size = (uint32_t)bs;
    }
    if (a->has_capacity)
        f->capacity = a->capacity;
    if (a->has_inodes)
        f->inodes = a->inodes;
    if (a->has_trash_days)
        f->trash_days = (uint32_t)a->trash_days;
    return apply_credentials(a, f);
}

static int check_storage(const struct keg_format *f)
{
    struct stat st;
    if (strcmp(f->storage, "mem") == 0)
        return 0;
    if (!f->bucket[0]) {
        mnt_error("--bucket is required for %s storage", f->storage);
        return -EINVAL;
    }
    if (strcmp(f->storage, "file") != 0)
        return 0;
    if (f->bucket[0] != '/') {
        mnt_error("--bucket %s must be an absolute path for file storage", f->bucket);
        return -EINVAL;
    }
    if (stat(f->bucket, &st) < 0) {
        int rc = -errno;
        mnt_error("storage directory %s: %s", f->bucket, strerror(-rc));
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        mnt_error("storage directory %s is not a directory", f->bucket);
        return -ENOTDIR;
    }
    return 0;
}

/* After a failed probe of an S3 bucket, say what to fix (the store's log line
 * above already gives S3's error code and message). */
static void explain_probe_error(const struct keg_format *f, int rc)
{
    if (strcmp(f->storage, "s3") != 0)
        return;
    switch (rc) {
    case -EACCES:
        mnt_error("S3 refused the credentials for %s (see the error above): check the secret "
                  "key (from %s) and the access key (from %s)", f->bucket, sk_source, ak_source);
        break;
    case -ENOENT:
        mnt_error("the bucket of %s does not exist: create it, or fix --bucket", f->bucket);
        break;
    case -ETIMEDOUT:
    case -EIO:
    case -EAGAIN:
    case -ECONNREFUSED:
        mnt_error("cannot reach the S3 endpoint of %s (see the error above): check --bucket "
                  "(host and port) and that the service is up", f->bucket);
        break;
    default:
        break;
    }
}

/* Opens the object stack of f for format's checks.  BORROWS: a (the S3 client
 * settings).  OWNERSHIP: caller closes *o (keg_obj_close).  Returns 0 or -errno. */
static int open_store(const struct fmt_args *a, const struct keg_format *f, struct keg_obj **o)
{
    struct keg_stack_conf sc = {0};
    sc.insecure = a->insecure;
    sc.ca_file = a->ca_file;
    sc.concurrency = (unsigned)a->s3_concurrency;
    /* an unreachable endpoint should not take the store's full 60 s retry
     * deadline: the probe gives up after 10 s unless --s3-retry-deadline says */
    sc.retry_deadline_ms = a->s3_retry_deadline > 0 ? (unsigned)(a->s3_retry_deadline * 1000.0)
                                                    : 10000;
    int rc = keg_stack_open(f, &sc, o);
    if (rc)
        mnt_error("cannot open %s storage %s: %s", f->storage, f->bucket, strerror(-rc));
    return rc;
}

/* Put, get and delete a probe object so that a bad bucket, bad credentials or
 * a read-only directory are reported now rather than on the first write.
 * BORROWS: o. */
static int probe_storage(struct keg_obj *o, const struct keg_format *f)
{
    unsigned char rnd[8] = {0};
    char key[160];
    char data[64];
    char back[64];
    int rc;

    if (getrandom(rnd, sizeof(rnd), 0) < 0)
        memset(rnd, 0x5a, sizeof(rnd));
    snprintf(key, sizeof(key), "%s/.kegfs-probe-%02x%02x%02x%02x%02x%02x%02x%02x", f->name,
             rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    int dlen = snprintf(data, sizeof(data), "kegfs storage probe %s", f->uuid);
    rc = keg_obj_put(o, key, data, (size_t)dlen);
    if (rc) {
        mnt_error("storage check failed: cannot write %s to %s storage %s: %s", key,
                  f->storage, f->bucket, strerror(-rc));
        explain_probe_error(f, rc);
        goto out;
    }
    ssize_t n = keg_obj_get(o, key, 0, back, sizeof(back));
    if (n < 0) {
        rc = (int)n;
        mnt_error("storage check failed: cannot read back %s from %s: %s", key, f->bucket,
                  strerror(-rc));
    } else if (n != dlen || memcmp(back, data, (size_t)dlen) != 0) {
        rc = -EIO;
        mnt_error("storage check failed: %s read back from %s differs from what was written",
                  key, f->bucket);
    }
    int drc = keg_obj_del(o, key);
    if (drc && !rc) {
        rc = drc;
        mnt_error("storage check failed: cannot delete %s from %s: %s", key, f->bucket,
                  strerror(-rc));
    }
out:
    return rc;
}

struct prefix_scan {
    const char *marker;         /* key of the marker (not counted) */
    char        first[256];     /* first other object found */
    int         found;
};

static int prefix_scan_cb(void *arg, const char *key, uint64_t size)
{
    struct prefix_scan *ps = arg;
    KEG_UNUSED(size);
    if (strcmp(key, ps->marker) == 0 || strstr(key, "/.kegfs-probe-"))
        return 0;
    snprintf(ps->first, sizeof(ps->first), "%s", key);
    ps->found = 1;
    return 1;
}

/* Claim the key prefix "<name>/" of the bucket for this volume (its UUID) with
 * the volume marker, so that no two volumes ever write the same keys.
 * A new volume needs a prefix that no volume uses: no marker and no objects
 * (objects without a marker: a volume formatted by an older kegfs).  An
 * existing volume (--force) keeps its marker, or gets one if it has none;
 * a marker of another volume is refused either way.  BORROWS: o. */
static int claim_prefix(struct keg_obj *o, const struct keg_format *f, int exists, int *created)
{
    char other[40], mkey[128];
    struct prefix_scan ps = {.marker = mkey};
    int rc;

    *created = 0;
    keg_volume_marker_key(mkey, sizeof(mkey), f->name);
    rc = keg_volume_marker_read(o, f->name, other);
    if (rc == -ENOENT && !exists) {
        char prefix[80];
        snprintf(prefix, sizeof(prefix), "%s/", f->name);
        rc = keg_obj_list(o, prefix, prefix_scan_cb, &ps);
        if (rc < 0 && rc != -ENOSYS && rc != 1) {
            mnt_error("cannot list %s in %s: %s", prefix, f->bucket, strerror(-rc));
            return rc;
        }
        if (ps.found) {
            mnt_error("the name '%s' is already used on %s: objects exist under %s (e.g. "
                      "%s) but no volume marker %s, so another volume (formatted by an older "
                      "kegfs) may use them; choose another name or another bucket (for that "
                      "volume, run 'kegfs format --force' with its own metadata URL)",
                      f->name, f->bucket, prefix, ps.first, mkey);
            return -EEXIST;
        }
        rc = -ENOENT;
    }
    if (rc == 0 || rc == -ENOENT) {
        int had = rc == 0;
        rc = keg_volume_marker_claim(o, f->name, f->uuid, other);
        *created = rc == 0 && !had;
    }
    if (rc == -EEXIST) {
        mnt_error("the name '%s' is already used on %s by another volume (uuid %s, marker "
                  "%s); this volume is %s.  Two volumes with one name on one bucket would "
                  "overwrite each other's data: choose another name or another bucket%s",
                  f->name, f->bucket, other, mkey, f->uuid,
                  exists ? " (--force never takes over another volume's objects)" : "");
        return -EEXIST;
    }
    if (rc == -EIO) {
        mnt_error("%s in %s is not a volume marker: refusing to use the name '%s' there",
                  mkey, f->bucket, f->name);
        return rc;
    }
    if (rc < 0)
        mnt_error("cannot write the volume marker %s to %s: %s", mkey, f->bucket,
                  strerror(-rc));
    return rc;
}

int mnt_cmd_format(int argc, char **argv)
{
    struct fmt_args a;
    struct keg_format f;
    struct keg_meta *m = NULL;
    struct keg_obj *o = NULL;
    char red[1024];
    int exists = 0, claimed = 0;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (argc - optind != 2) {
        mnt_error("format needs META_URL and NAME (see 'kegfs format --help')");
        return 2;
    }
    const char *url = argv[optind];
    const char *name = argv[optind + 1];
    if (mnt_log_file && keg_log_set_file(mnt_log_file) < 0)
        mnt_warn("cannot open --log-file %s", mnt_log_file);
    if (a.ca_file && access(a.ca_file, R_OK) < 0) {
        mnt_error("--ca-file %s: %s", a.ca_file, strerror(errno));
        return 1;
    }
    if (a.insecure)
        mnt_warn("--insecure: TLS certificates of the S3 endpoint are NOT verified; anyone on "
                 "the network path can read and change your data");
    keg_url_redact(url, red, sizeof(red));
    if (keg_format_check_name(name)) {
        mnt_error("invalid volume name '%s': use 3-63 characters a-z, 0-9 and '-', "
                  "starting with a letter or digit", name);
        return 2;
    }
    rc = mnt_open_meta(url, &m);
    if (rc)
        return 1;
    memset(&f, 0, sizeof(f));
    rc = keg_meta_format_load(m, &f);
    if (rc == 0) {
        exists = 1;
        if (!a.force) {
            mnt_error("volume %s already formatted at %s; use --force to update its settings",
                      f.name, red);
            rc = 1;
            goto out;
        }
    } else if (rc != -ENOENT) {
        mnt_error("cannot read the format at %s: %s", red, strerror(-rc));
        rc = 1;
        goto out;
    }
    rc = build_format(&a, name, exists, &f);
    if (!rc)
        rc = check_storage(&f);
    if (rc) {
        rc = rc == -EINVAL ? 2 : 1;     /* an invalid or missing option value: usage */
        goto out;
    }
    rc = open_store(&a, &f, &o);
    if (!rc)
        rc = probe_storage(o, &f);
    if (!rc)
        rc = claim_prefix(o, &f, exists, &claimed);
    if (rc) {
        rc = 1;
        goto out;
    }
    /* The root belongs to the user who formats and only they may write to it (a
     * 0777 root would let every local user write into a mount; chmod it to share). */
    rc = keg_meta_format_init(m, &f, 0755, geteuid(), getegid(), exists);
    if (rc) {
        mnt_error("cannot write the format at %s: %s", red, strerror(-rc));
        if (claimed && !exists) {
            /* the name must not stay claimed by a volume that does not exist */
            char mkey[128];
            keg_volume_marker_key(mkey, sizeof(mkey), f.name);
            (void)keg_obj_del(o, mkey);
        }
        rc = 1;
        goto out;
    }
    /* Show what the engine stored (meta_version etc.). */
    if (keg_meta_format_load(m, &f) != 0)
        mnt_warn("format written but could not be read back");
    printf("%s volume %s at %s\n", exists ? "Updated" : "Formatted", f.name, red);
    mnt_print_format(stdout, &f);
    rc = 0;
out:
    if (o)
        keg_obj_close(o);
    memset(&f, 0, sizeof(f));   /* secrets */
    keg_meta_close(m);
    return rc;
}
