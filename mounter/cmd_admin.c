/* cmd_admin.c -- helpers shared by `kegfs gc`, `fsck` and `warmup`: opening a volume as a
 * tool and the volume behind a mounted path. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEG_LOG_TAG "admin"
#include "keg/fs.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/meta.h"
#include "keg/url.h"

#include "cmd_admin_i.h"
#include "mnt_i.h"

int mnt_admin_open(const char *url, int read_only, const struct keg_stack_conf *sc,
                   struct keg_fs **fs)
{
    struct keg_fs_conf conf;
    struct keg_meta *m = NULL;
    char red[1024];
    int rc;

    *fs = NULL;
    /* clear messages for a bad URL / unreachable engine first */
    rc = mnt_open_meta(url, &m);
    if (rc)
        return rc;
    keg_meta_close(m);
    memset(&conf, 0, sizeof(conf));
    conf.meta_url = url;
    conf.no_session = 1;
    conf.read_only = read_only;
    conf.access_key = getenv("AWS_ACCESS_KEY_ID");
    conf.secret_key = getenv("AWS_SECRET_ACCESS_KEY");
    conf.session_token = getenv("AWS_SESSION_TOKEN");
    conf.stack = sc;
    rc = keg_fs_new(&conf, fs);
    if (rc) {
        keg_url_redact(url, red, sizeof(red));
        if (rc == -ENOENT)
            mnt_error("no volume is formatted at %s (run 'kegfs format' first)", red);
        else
            mnt_error("cannot open the volume at %s: %s", red, strerror(-rc));
        *fs = NULL;
    }
    return rc;
}

/*----- the volume behind a path -----*/

int mnt_admin_find_volume(const char *abs, char **mp, char **url)
{
    char fstype[64];
    char h[17];
    char *p = keg_strdup(abs);
    int rc = -ENOENT;

    *mp = NULL;
    *url = NULL;
    if (!p)
        return -ENOMEM;
    for (;;) {
        int mrc = mnt_is_mountpoint(p, fstype, sizeof(fstype));
        if (mrc > 0) {
            if (strcmp(fstype, "fuse.kegfs") == 0)
                rc = 0;
            break;
        }
        if (mrc < 0 || strcmp(p, "/") == 0)
            break;
        char *slash = strrchr(p, '/');
        if (slash == p)
            p[1] = '\0';
        else
            *slash = '\0';
    }
    if (rc) {
        mnt_error("%s is not on a KegFS mount", abs);
        keg_free(p);
        return rc;
    }
    rc = mnt_state_read(p, NULL, url);
    if (rc) {
        mnt_path_hash(p, h);
        mnt_error("cannot read the state of the mount at %s (%s/mounts/%s): %s", p,
                  mnt_run_dir(), h, strerror(-rc));
        keg_free(p);
        *url = NULL;
        return rc;
    }
    *mp = p;
    return 0;
}
