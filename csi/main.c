/* main.c -- kegfs-csi: command-line flags, then serve the CSI socket. */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "csi_i.h"
#include "keg/mem.h"
#include "keg/spawn.h"
#include "mount_mgr.h"
#include "state.h"
#define KEG_LOG_TAG "csi"
#include "keg/log.h"

static void usage(FILE *fp)
{
    fprintf(fp,
        "usage: kegfs-csi --endpoint unix:///csi/csi.sock --nodeid NODE [options]\n"
        "\n"
        "The KegFS CSI driver (" CSI_DRIVER_NAME ").\n"
        "\n"
        "  --endpoint EP        unix socket to serve (also $CSI_ENDPOINT)\n"
        "  --nodeid NODE        this node's name (also $NODE_ID / $KUBE_NODE_NAME)\n"
        "  --mode MODE          controller | node | all (default all)\n"
        "  --state-dir DIR      node state: publish records, mounter configs, logs\n"
        "                       (default " CSI_STATE_DIR_DEFAULT ")\n"
        "  --kubelet-dir DIR    the kubelet's root: target paths must lie below DIR/pods,\n"
        "                       with no symbolic link below it (default "
        CSI_KUBELET_DIR_DEFAULT ")\n"
        "  --cache-root DIR     mount flag cache-dir= must lie below DIR; \"\" refuses\n"
        "                       the flag (default " CSI_CACHE_ROOT_DEFAULT ")\n"
        "  --mounter PATH       the kegfs binary (default: kegfs next to this binary,\n"
        "                       else /usr/local/bin/kegfs)\n"
        "  --mount-mode MODE    process (mounters are children of this plugin) or\n"
        "                       holder (mounters belong to `kegfs holder`; default process)\n"
        "  --holder-socket PATH the holder's socket (default /var/lib/kegfs/holder.sock)\n"
        "  --holder-upgrade B   holder mode: at start, run every mounter on this plugin's\n"
        "                       kegfs (copied next to the socket, in bin/), upgrading in\n"
        "                       place (true or false; default true)\n"
        "  --metrics HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics; a\n"
        "                       node plugin also gives each mounter a metrics socket and\n"
        "                       includes every mounter's metrics in its own\n"
        "  --workers N          gRPC worker threads (default 8)\n"
        "  --watchdog-ms MS     how often dead mounts are re-established (default 2000)\n"
        "  -v, --verbose        log at debug level\n"
        "  --version            print the version\n"
        "  -h, --help           this help\n");
}

/* The kegfs binary: next to this executable, else /usr/local/bin/kegfs.
 * OWNERSHIP: caller keg_free()s. */
static char *default_mounter(void)
{
    char self[4096];
    if (keg_self_exe(self, sizeof(self)) == 0) {
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            char *p = keg_asprintf("%s/kegfs", self);
            if (p && access(p, X_OK) == 0)
                return p;
            keg_free(p);
            /* build tree: csi/kegfs-csi and mounter/kegfs */
            p = keg_asprintf("%s/../mounter/kegfs", self);
            if (p && access(p, X_OK) == 0)
                return p;
            keg_free(p);
        }
    }
    return keg_strdup("/usr/local/bin/kegfs");
}

int main(int argc, char **argv)
{
    enum { O_ENDPOINT = 0x100, O_NODEID, O_MODE, O_STATE, O_MOUNTER, O_WORKERS, O_WD, O_VERSION,
           O_KUBELET, O_CACHE_ROOT, O_MMODE, O_HSOCK, O_HUPG, O_METRICS };
    static const struct option longopts[] = {
        { "endpoint", required_argument, NULL, O_ENDPOINT },
        { "nodeid", required_argument, NULL, O_NODEID },
        { "node-id", required_argument, NULL, O_NODEID },
        { "mode", required_argument, NULL, O_MODE },
        { "state-dir", required_argument, NULL, O_STATE },
        { "mounter", required_argument, NULL, O_MOUNTER },
        { "kubelet-dir", required_argument, NULL, O_KUBELET },
        { "cache-root", required_argument, NULL, O_CACHE_ROOT },
        { "metrics", required_argument, NULL, O_METRICS },
        { "workers", required_argument, NULL, O_WORKERS },
        { "mount-mode", required_argument, NULL, O_MMODE },
        { "holder-socket", required_argument, NULL, O_HSOCK },
        { "holder-upgrade", required_argument, NULL, O_HUPG },
        { "watchdog-ms", required_argument, NULL, O_WD },
        { "verbose", no_argument, NULL, 'v' },
        { "version", no_argument, NULL, O_VERSION },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct csi_ctx ctx;
    const char *endpoint = getenv("CSI_ENDPOINT");
    const char *node_id = getenv("NODE_ID");
    const char *state_dir = CSI_STATE_DIR_DEFAULT;
    const char *kubelet_dir = CSI_KUBELET_DIR_DEFAULT;
    const char *cache_root = CSI_CACHE_ROOT_DEFAULT;
    const char *metrics = NULL;
    char *mounter = NULL, *target_root = NULL;
    unsigned long workers = 8, wd_ms = 2000;
    const char *holder_socket = "/var/lib/kegfs/holder.sock";
    int holder_mode = 0, holder_upgrade = 1;
    int opt, rc;
    char *end;

    memset(&ctx, 0, sizeof(ctx));
    ctx.mode = CSI_MODE_ALL;
    if (!node_id)
        node_id = getenv("KUBE_NODE_NAME");
    keg_log_set_level(LOG_INFO);

    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        switch (opt) {
        case O_ENDPOINT:
            endpoint = optarg;
            break;
        case O_NODEID:
            node_id = optarg;
            break;
        case O_MODE:
            if (strcmp(optarg, "controller") == 0)
                ctx.mode = CSI_MODE_CONTROLLER;
            else if (strcmp(optarg, "node") == 0)
                ctx.mode = CSI_MODE_NODE;
            else if (strcmp(optarg, "all") == 0)
                ctx.mode = CSI_MODE_ALL;
            else {
                fprintf(stderr, "kegfs-csi: --mode must be controller, node or all\n");
                return 2;
            }
            break;
        case O_STATE:
            state_dir = optarg;
            break;
        case O_KUBELET:
            kubelet_dir = optarg;
            break;
        case O_CACHE_ROOT:
            cache_root = optarg;
            break;
        case O_METRICS:
            metrics = optarg;
            break;
        case O_MOUNTER:
            keg_free(mounter);
            mounter = keg_strdup(optarg);
            break;
        case O_MMODE:
            if (strcmp(optarg, "process") == 0 || strcmp(optarg, "holder") == 0) {
                holder_mode = optarg[0] == 'h';
            } else {
                fprintf(stderr, "kegfs-csi: --mount-mode must be process or holder\n");
                return 2;
            }
            break;
        case O_HSOCK:
            holder_socket = optarg;
            break;
        case O_HUPG:
            if (strcmp(optarg, "true") != 0 && strcmp(optarg, "false") != 0) {
                fprintf(stderr, "kegfs-csi: --holder-upgrade must be true or false\n");
                return 2;
            }
            holder_upgrade = optarg[0] == 't';
            break;
        case O_WORKERS:
            workers = strtoul(optarg, &end, 10);
            if (*end || workers == 0 || workers > 64) {
                fprintf(stderr, "kegfs-csi: --workers must be 1..64\n");
                return 2;
            }
            break;
        case O_WD:
            wd_ms = strtoul(optarg, &end, 10);
            if (*end || wd_ms < 100) {
                fprintf(stderr, "kegfs-csi: --watchdog-ms must be >= 100\n");
                return 2;
            }
            break;
        case 'v':
            keg_log_set_level(LOG_DEBUG);
            break;
        case O_VERSION:
            printf("kegfs-csi %s (%s)\n", KEG_VERSION, CSI_DRIVER_NAME);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || !endpoint || !*endpoint) {
        fprintf(stderr, "kegfs-csi: --endpoint is required (e.g. unix:///csi/csi.sock)\n");
        usage(stderr);
        return 2;
    }
    if ((ctx.mode & CSI_MODE_NODE) && (!node_id || !*node_id)) {
        fprintf(stderr, "kegfs-csi: --nodeid is required for the node service\n");
        return 2;
    }
    if (!mounter)
        mounter = default_mounter();

    /* SIGTERM/SIGINT are taken by sigtimedwait in csi_serve; block them (and
     * SIGPIPE) before any thread starts so no worker is interrupted. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    ctx.node_id = node_id;
    ctx.state_dir = state_dir;
    target_root = keg_asprintf("%s/pods", kubelet_dir);
    if (!target_root) {
        rc = -ENOMEM;
        goto out;
    }
    ctx.target_root = target_root;
    ctx.cache_root = *cache_root ? cache_root : NULL;
    ctx.watchdog_ms = (unsigned)wd_ms;
    csi_ctx_init(&ctx);
    /* --metrics on a node plugin: every mounter gets a metrics socket and the plugin's
     * endpoint includes theirs (libcurl's global state set up here, before any thread) */
    if (metrics && (ctx.mode & CSI_MODE_NODE)) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK)
            ctx.mounter_metrics = 1;
        else
            KEG_WARN("libcurl did not initialise: the mounters' metrics are left out");
    }

    if (ctx.mode & CSI_MODE_NODE) {
        rc = csi_state_open(state_dir, &ctx.state);
        if (rc < 0) {
            fprintf(stderr, "kegfs-csi: cannot open the state directory %s: %s\n", state_dir,
                    strerror(-rc));
            goto out;
        }
        if (holder_mode) {
            char *bin_dir = keg_asprintf("%.*s/bin",
                                         (int)(strrchr(holder_socket, '/') ?
                                               strrchr(holder_socket, '/') - holder_socket : 1),
                                         holder_socket);
            rc = bin_dir ? csi_mount_mgr_holder_create(holder_socket, mounter, bin_dir,
                                                       holder_upgrade, &ctx.mm)
                         : -ENOMEM;
            keg_free(bin_dir);
        } else {
            rc = csi_mount_mgr_process_create(mounter, state_dir, &ctx.mm);
        }
        if (rc < 0)
            goto out;
        /* first recovery pass runs in the watchdog, which then sets ctx.ready */
        rc = csi_node_watchdog_start(&ctx);
        if (rc < 0)
            goto out;
    } else {
        ctx.ready = 1;
    }
    if (metrics) {
        rc = csi_metrics_start(&ctx, metrics);
        if (rc < 0) {
            fprintf(stderr, "kegfs-csi: --metrics %s: %s\n", metrics, strerror(-rc));
            goto out;
        }
    }
    KEG_INFO("mounter %s, state dir %s, mount mode %s", mounter, state_dir,
             ctx.mm ? ctx.mm->ops->name : "none");
    rc = csi_serve(&ctx, endpoint, (unsigned)workers);

out:
    csi_metrics_stop();
    csi_node_watchdog_stop(&ctx);
    if (ctx.mm)
        ctx.mm->ops->destroy(ctx.mm);
    csi_state_close(ctx.state);
    csi_ctx_destroy(&ctx);
    keg_free(mounter);
    keg_free(target_root);
    return rc < 0 ? 1 : 0;
}
