/* test_csi_node.c -- Node handlers, the state file and recovery, with a fake
 * mount manager that records calls (no FUSE, no root, no gRPC). */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "csi_fakes.h"
#include "csi_i.h"
#include "keg/hash.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "keg/metrics.h"
#include "keg/retry.h"
#include "state.h"

static struct csi_ctx ctx;
static char dir[256];          /* temp dir: state/ and pods/ */
static char state_dir[300];
static char kubelet_dir[320];
static char cache_root[320];

static void st_reset(struct csi_status *st)
{
    csi_status_clear(st);
    csi_status_init(st);
}

/*--- request builder ---------------------------------------------------------*/

struct pub {
    Csi__V1__NodePublishVolumeRequest r;
    Csi__V1__VolumeCapability c;
    Csi__V1__VolumeCapability__MountVolume mv;
    Csi__V1__VolumeCapability__AccessMode am;
    Csi__V1__NodePublishVolumeRequest__SecretsEntry se[3], *sp[3];
    Csi__V1__NodePublishVolumeRequest__VolumeContextEntry ce[1], *cp[1];
    char *flags[4];
    char target[512];
};

static void pub_init(struct pub *p, const char *vol, const char *sub)
{
    memset(p, 0, sizeof(*p));
    csi__v1__node_publish_volume_request__init(&p->r);
    csi__v1__volume_capability__init(&p->c);
    csi__v1__volume_capability__mount_volume__init(&p->mv);
    csi__v1__volume_capability__access_mode__init(&p->am);
    p->am.mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER;
    p->c.access_mode = &p->am;
    p->c.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
    p->c.mount = &p->mv;
    snprintf(p->target, sizeof(p->target), "%s/pods/%s/mount", dir, sub);
    p->r.volume_id = (char *)vol;
    p->r.target_path = p->target;
    p->r.volume_capability = &p->c;
    static const char *const keys[] = { "metaurl", "access-key", "secret-key" };
    static const char *const vals[] = { "redis://:pa55w0rd@redis:6379/1", "AK", "SK/secret" };
    for (int i = 0; i < 3; i++) {
        csi__v1__node_publish_volume_request__secrets_entry__init(&p->se[i]);
        p->se[i].key = (char *)keys[i];
        p->se[i].value = (char *)vals[i];
        p->sp[i] = &p->se[i];
    }
    p->r.n_secrets = 3;
    p->r.secrets = p->sp;
    csi__v1__node_publish_volume_request__volume_context_entry__init(&p->ce[0]);
    p->ce[0].key = "metaurl";
    p->ce[0].value = "redis://redis:6379/1?ns=pvc-n1";
    p->cp[0] = &p->ce[0];
    p->r.n_volume_context = 1;
    p->r.volume_context = p->cp;
}

static int do_publish(struct pub *p, struct csi_status *st)
{
    Csi__V1__NodePublishVolumeResponse out = CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;
    st_reset(st);
    return csi_node_publish_volume(&ctx, &p->r, &out, st);
}

static int do_unpublish(const char *vol, const char *target, struct csi_status *st)
{
    Csi__V1__NodeUnpublishVolumeRequest r = CSI__V1__NODE_UNPUBLISH_VOLUME_REQUEST__INIT;
    Csi__V1__NodeUnpublishVolumeResponse out = CSI__V1__NODE_UNPUBLISH_VOLUME_RESPONSE__INIT;
    r.volume_id = (char *)vol;
    r.target_path = (char *)target;
    st_reset(st);
    return csi_node_unpublish_volume(&ctx, &r, &out, st);
}

static char *slurp(const char *path)
{
    static char buf[4096];
    FILE *fp = fopen(path, "r");
    if (!fp)
        return NULL;
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return buf;
}

static int setup(void **state)
{
    KEG_UNUSED(state);
    snprintf(dir, sizeof(dir), "/tmp/test_csi_node.XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
    memset(&ctx, 0, sizeof(ctx));
    ctx.mode = CSI_MODE_NODE;
    ctx.node_id = "node-1";
    ctx.state_dir = state_dir;
    snprintf(kubelet_dir, sizeof(kubelet_dir), "%s/pods", dir);
    assert_int_equal(mkdir(kubelet_dir, 0750), 0);
    ctx.target_root = kubelet_dir;
    snprintf(cache_root, sizeof(cache_root), "%s/cache", dir);
    assert_int_equal(mkdir(cache_root, 0700), 0);
    ctx.cache_root = cache_root;
    csi_ctx_init(&ctx);
    keg_log_set_level(LOG_ERR);
    assert_int_equal(csi_state_open(state_dir, &ctx.state), 0);
    fake_mm_reset();
    ctx.mm = fake_mm_create();
    assert_non_null(ctx.mm);
    return 0;
}

static int teardown(void **state)
{
    char cmd[400];
    KEG_UNUSED(state);
    ctx.mm->ops->destroy(ctx.mm);
    csi_state_close(ctx.state);
    csi_ctx_destroy(&ctx);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/*--- tests -------------------------------------------------------------------*/

static void test_publish_validation(void **state)
{
    struct pub p;
    struct csi_status st = { 0 };
    KEG_UNUSED(state);

    pub_init(&p, "", "a");
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    pub_init(&p, "../../etc", "a");
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    pub_init(&p, "pvc-n1", "a");
    p.r.target_path = "relative/path";
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_non_null(strstr(st.msg, "absolute"));

    pub_init(&p, "pvc-n1", "a");
    p.r.target_path = "/var/lib/kubelet/../../etc";
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    pub_init(&p, "pvc-n1", "a");
    p.r.target_path = "";
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    pub_init(&p, "pvc-n1", "a");
    p.r.volume_capability = NULL;
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    pub_init(&p, "pvc-n1", "a");
    p.c.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    pub_init(&p, "pvc-n1", "a");
    p.am.mode = 99;
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    pub_init(&p, "pvc-n1", "a");
    p.r.n_secrets = 0;
    p.r.n_volume_context = 0;
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_non_null(strstr(st.msg, "secret key 'metaurl' missing"));

    pub_init(&p, "pvc-n1", "a");
    p.flags[0] = "--evil";
    p.mv.n_mount_flags = 1;
    p.mv.mount_flags = p.flags;
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    assert_int_equal(fake_mm_ncalls("start"), 0);
    csi_status_clear(&st);
}

static void test_publish_unpublish(void **state)
{
    struct pub p, q;
    struct csi_status st = { 0 };
    struct csi_publish rec;
    struct stat sb;
    KEG_UNUSED(state);

    pub_init(&p, "pvc-n1", "a");
    p.flags[0] = "cache-size=100M";
    p.flags[1] = "ro";
    p.mv.n_mount_flags = 2;
    p.mv.mount_flags = p.flags;
    assert_int_equal(do_publish(&p, &st), 0);
    assert_int_equal(fake_mm_ncalls("start"), 1);
    const struct fake_mm_call *c = fake_mm_last("start");
    assert_string_equal(c->target, p.target);
    assert_string_equal(c->options, "cache-size=100M");
    assert_int_equal(c->readonly, 1);                        /* "ro" flag */
    assert_int_equal(stat(p.target, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));

    /* the config: 0600, META_URL with the Secret's password put back, keys */
    assert_int_equal(stat(c->config, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    char *cfg = slurp(c->config);
    assert_non_null(cfg);
    assert_non_null(strstr(cfg, "meta-url: \"redis://:pa55w0rd@redis:6379/1?ns=pvc-n1\""));
    assert_non_null(strstr(cfg, "access-key: \"AK\""));
    assert_non_null(strstr(cfg, "secret-key: \"SK/secret\""));

    /* the state records it, without secrets */
    assert_int_equal(csi_state_find(ctx.state, p.target, &rec), 0);
    assert_string_equal(rec.volume_id, "pvc-n1");
    assert_int_equal(rec.readonly, 1);
    assert_string_equal(rec.options, "cache-size=100M");
    assert_int_equal(rec.pid, c->pid);
    csi_publish_clear(&rec);
    char path[400];
    snprintf(path, sizeof(path), "%s/state.yaml", state_dir);
    char *sy = slurp(path);
    assert_non_null(sy);
    assert_null(strstr(sy, "pa55w0rd"));
    assert_null(strstr(sy, "SK/secret"));

    /* idempotent; incompatible flags -> ALREADY_EXISTS; other volume -> ALREADY_EXISTS */
    assert_int_equal(do_publish(&p, &st), 0);
    assert_int_equal(fake_mm_ncalls("start"), 1);
    p.mv.n_mount_flags = 1;
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_ALREADY_EXISTS);
    p.mv.n_mount_flags = 2;
    pub_init(&q, "pvc-other", "a");
    assert_int_equal(do_publish(&q, &st), -1);
    assert_int_equal(st.code, CSI_ALREADY_EXISTS);

    /* second target of the same volume (RWX), reader-only mode -> read-only */
    pub_init(&q, "pvc-n1", "b");
    q.am.mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY;
    assert_int_equal(do_publish(&q, &st), 0);
    assert_int_equal(fake_mm_ncalls("start"), 2);
    assert_int_equal(fake_mm_last("start")->readonly, 1);

    /* busy volume -> ABORTED */
    assert_int_equal(csi_key_trylock(&ctx, "pvc-n1"), 0);
    assert_int_equal(do_unpublish("pvc-n1", p.target, &st), -1);
    assert_int_equal(st.code, CSI_ABORTED);
    csi_key_unlock(&ctx, "pvc-n1");

    /* unpublish: stop, record and config gone, target removed; twice is fine */
    char config[512];
    snprintf(config, sizeof(config), "%s", c->config);
    assert_int_equal(do_unpublish("pvc-n1", p.target, &st), 0);
    assert_int_equal(fake_mm_ncalls("stop"), 1);
    assert_string_equal(fake_mm_last("stop")->target, p.target);
    assert_int_not_equal(fake_mm_last("stop")->pid, 0);
    assert_int_equal(csi_state_find(ctx.state, p.target, &rec), -ENOENT);
    assert_int_equal(access(config, F_OK), -1);
    assert_int_equal(access(p.target, F_OK), -1);
    assert_int_equal(do_unpublish("pvc-n1", p.target, &st), 0);
    assert_int_equal(do_unpublish("pvc-n1", q.target, &st), 0);
    assert_int_equal(do_unpublish("pvc-n1", "", &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_int_equal(do_unpublish("", q.target, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    /* a failing mounter: error with its reason, nothing recorded */
    fake_mm_start_rc = -EIO;
    pub_init(&p, "pvc-n2", "c");
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INTERNAL);
    assert_non_null(strstr(st.msg, "fake mounter failed"));
    assert_int_equal(csi_state_find(ctx.state, p.target, &rec), -ENOENT);
    csi_status_clear(&st);
}

static void test_static_volume_url(void **state)
{
    struct pub p;
    struct csi_status st = { 0 };
    KEG_UNUSED(state);

    /* no volume_context: the Secret's URL names the volume (static provisioning) */
    pub_init(&p, "static-vol", "s");
    p.r.n_volume_context = 0;
    p.se[0].value = "sqlite3:///var/lib/kegfs/";
    assert_int_equal(do_publish(&p, &st), 0);
    char *cfg = slurp(fake_mm_last("start")->config);
    assert_non_null(strstr(cfg, "meta-url: \"sqlite3:///var/lib/kegfs/static-vol.db\""));

    /* volume attributes only (no Secret) */
    pub_init(&p, "static-2", "t");
    p.r.n_secrets = 0;
    p.ce[0].value = "redis://r:6379/3?ns=static-2";
    assert_int_equal(do_publish(&p, &st), 0);
    cfg = slurp(fake_mm_last("start")->config);
    assert_non_null(strstr(cfg, "meta-url: \"redis://r:6379/3?ns=static-2\""));
    assert_null(strstr(cfg, "secret-key"));
    csi_status_clear(&st);
}

static void test_stats_info_caps(void **state)
{
    struct pub p;
    struct csi_status st = { 0 };
    KEG_UNUSED(state);

    pub_init(&p, "pvc-s", "a");
    assert_int_equal(do_publish(&p, &st), 0);

    Csi__V1__NodeGetVolumeStatsRequest r = CSI__V1__NODE_GET_VOLUME_STATS_REQUEST__INIT;
    Csi__V1__NodeGetVolumeStatsResponse out = CSI__V1__NODE_GET_VOLUME_STATS_RESPONSE__INIT;
    r.volume_id = "pvc-s";
    r.volume_path = p.target;
    st_reset(&st);
    assert_int_equal(csi_node_get_volume_stats(&ctx, &r, &out, &st), 0);
    assert_int_equal(out.n_usage, 2);
    assert_int_equal(out.usage[0]->unit, CSI__V1__VOLUME_USAGE__UNIT__BYTES);
    assert_true(out.usage[0]->total > 0);
    assert_true(out.usage[0]->used <= out.usage[0]->total);
    assert_int_equal(out.usage[1]->unit, CSI__V1__VOLUME_USAGE__UNIT__INODES);
    assert_non_null(out.volume_condition);
    assert_false(out.volume_condition->abnormal);

    /* dead mount: abnormal condition */
    fake_mm_set_state(p.target, -ENOTCONN);
    csi__v1__node_get_volume_stats_response__init(&out);
    st_reset(&st);
    assert_int_equal(csi_node_get_volume_stats(&ctx, &r, &out, &st), 0);
    assert_true(out.volume_condition->abnormal);
    assert_non_null(strstr(out.volume_condition->message, "dead"));
    assert_true(protobuf_c_message_get_packed_size(&out.base) > 0);

    /* unknown volume / path */
    r.volume_id = "pvc-nope";
    st_reset(&st);
    assert_int_equal(csi_node_get_volume_stats(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_NOT_FOUND);
    r.volume_id = "pvc-s";
    r.volume_path = "/no/such/path";
    st_reset(&st);
    assert_int_equal(csi_node_get_volume_stats(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_NOT_FOUND);
    /* a relative or ".." path is a path the volume is not published at
     * (csi-sanity: "some/path" must be NOT_FOUND) */
    r.volume_path = "some/path";
    st_reset(&st);
    assert_int_equal(csi_node_get_volume_stats(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_NOT_FOUND);
    r.volume_path = "/a/../b";
    st_reset(&st);
    assert_int_equal(csi_node_get_volume_stats(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_NOT_FOUND);
    r.volume_path = "";
    st_reset(&st);
    assert_int_equal(csi_node_get_volume_stats(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    Csi__V1__NodeGetInfoRequest ir = CSI__V1__NODE_GET_INFO_REQUEST__INIT;
    Csi__V1__NodeGetInfoResponse io = CSI__V1__NODE_GET_INFO_RESPONSE__INIT;
    st_reset(&st);
    assert_int_equal(csi_node_get_info(&ctx, &ir, &io, &st), 0);
    assert_string_equal(io.node_id, "node-1");

    Csi__V1__NodeGetCapabilitiesRequest cr = CSI__V1__NODE_GET_CAPABILITIES_REQUEST__INIT;
    Csi__V1__NodeGetCapabilitiesResponse co = CSI__V1__NODE_GET_CAPABILITIES_RESPONSE__INIT;
    assert_int_equal(csi_node_get_capabilities(&ctx, &cr, &co, &st), 0);
    int stats = 0, cond = 0, stage = 0;
    for (size_t i = 0; i < co.n_capabilities; i++) {
        stats |= co.capabilities[i]->rpc->type ==
                 CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS;
        cond |= co.capabilities[i]->rpc->type ==
                CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_CONDITION;
        stage |= co.capabilities[i]->rpc->type ==
                 CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME;
    }
    assert_true(stats && cond);
    assert_false(stage);
    csi_status_clear(&st);
}

static void test_recovery_and_state_reload(void **state)
{
    struct pub p, q;
    struct csi_status st = { 0 };
    struct csi_publish rec;
    KEG_UNUSED(state);

    pub_init(&p, "pvc-r", "a");
    pub_init(&q, "pvc-r", "b");
    assert_int_equal(do_publish(&p, &st), 0);
    assert_int_equal(do_publish(&q, &st), 0);
    assert_int_equal(fake_mm_ncalls("start"), 2);

    /* all alive: nothing to do */
    assert_int_equal(csi_node_recover(&ctx), 0);
    assert_int_equal(fake_mm_ncalls("start"), 2);

    /* both mounters die: detach + fresh mounter on the same target + same config */
    const char *cfg_a = NULL;
    assert_int_equal(csi_state_find(ctx.state, p.target, &rec), 0);
    pid_t old_pid = rec.pid;
    char cfg[512];
    snprintf(cfg, sizeof(cfg), "%s", rec.config);
    cfg_a = cfg;
    csi_publish_clear(&rec);
    fake_mm_set_state(p.target, -ENOTCONN);
    fake_mm_set_state(q.target, -ENOTCONN);
    assert_int_equal(csi_node_recover(&ctx), 2);
    assert_int_equal(fake_mm_ncalls("start"), 4);
    assert_int_equal(fake_mm_ncalls("detach"), 2);
    assert_int_equal(csi_state_find(ctx.state, p.target, &rec), 0);
    assert_int_not_equal(rec.pid, old_pid);
    assert_string_equal(rec.config, cfg_a);
    csi_publish_clear(&rec);

    /* a volume held by an RPC is skipped this round */
    fake_mm_set_state(p.target, -ENOTCONN);
    assert_int_equal(csi_key_trylock(&ctx, "pvc-r"), 0);
    assert_int_equal(csi_node_recover(&ctx), 0);
    csi_key_unlock(&ctx, "pvc-r");
    assert_int_equal(csi_node_recover(&ctx), 1);

    /* the state survives a restart of the plugin */
    csi_state_close(ctx.state);
    ctx.state = NULL;
    assert_int_equal(csi_state_open(state_dir, &ctx.state), 0);
    struct csi_publish *all = NULL;
    size_t n = 0;
    assert_int_equal(csi_state_snapshot(ctx.state, &all, &n), 0);
    assert_int_equal(n, 2);
    csi_publish_free_array(all, n);
    assert_int_equal(csi_state_find(ctx.state, q.target, &rec), 0);
    assert_string_equal(rec.volume_id, "pvc-r");
    csi_publish_clear(&rec);

    /* a record whose pod directory is gone is dropped */
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/pods/b'", dir);
    assert_int_equal(system(cmd), 0);
    fake_mm_set_state(q.target, -ENOENT);
    assert_int_equal(csi_node_recover(&ctx), 0);
    assert_int_equal(csi_state_find(ctx.state, q.target, &rec), -ENOENT);
    csi_status_clear(&st);
}

/*--- the try-lock table: RPCs and the watchdog ---------------------------------*/

struct locker {
    const char *key;
    int rc;
    int64_t got_ns;            /* when csi_key_trylock returned */
    int done;                  /* atomic */
};

static void *locker_main(void *arg)
{
    struct locker *l = arg;
    l->rc = csi_key_trylock(&ctx, l->key);
    l->got_ns = keg_mono_ns();
    __atomic_store_n(&l->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void test_key_lock_watchdog_vs_rpc(void **state)
{
    pthread_t th;
    KEG_UNUSED(state);
    ctx.key_wait_ms = 5000;

    /* an RPC holds the volume: a second RPC is ABORTED at once, the watchdog skips it */
    assert_int_equal(csi_key_trylock(&ctx, "pvc-k"), 0);
    int64_t t0 = keg_mono_ns();
    assert_int_equal(csi_key_trylock(&ctx, "pvc-k"), -EBUSY);
    assert_true((keg_mono_ns() - t0) / 1000000 < 1000);
    assert_int_equal(csi_key_trylock_background(&ctx, "pvc-k"), -EBUSY);
    csi_key_unlock(&ctx, "pvc-k");

    /* the watchdog holds it: an RPC waits for it instead of failing; other keys
     * are free; while the RPC waits, the watchdog takes no key */
    assert_int_equal(csi_key_trylock_background(&ctx, "pvc-k"), 0);
    assert_int_equal(csi_key_trylock_background(&ctx, "pvc-k"), -EBUSY);
    assert_int_equal(csi_key_trylock(&ctx, "pvc-other"), 0);
    csi_key_unlock(&ctx, "pvc-other");
    struct locker l = { .key = "pvc-k" };
    assert_int_equal(pthread_create(&th, NULL, locker_main, &l), 0);
    keg_sleep_ms(200);
    assert_int_equal(__atomic_load_n(&l.done, __ATOMIC_SEQ_CST), 0);
    assert_int_equal(csi_key_trylock_background(&ctx, "pvc-x"), -EBUSY);
    int64_t released = keg_mono_ns();
    csi_key_unlock(&ctx, "pvc-k");
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(l.rc, 0);
    assert_true(l.got_ns >= released);     /* it waited for the release */
    /* now the RPC holds it */
    assert_int_equal(csi_key_trylock_background(&ctx, "pvc-k"), -EBUSY);
    assert_int_equal(csi_key_trylock_background(&ctx, "pvc-x"), 0);
    csi_key_unlock(&ctx, "pvc-x");
    csi_key_unlock(&ctx, "pvc-k");

    /* the wait is bounded: a re-mount that outlasts it gives ABORTED */
    ctx.key_wait_ms = 100;
    assert_int_equal(csi_key_trylock_background(&ctx, "pvc-k"), 0);
    t0 = keg_mono_ns();
    assert_int_equal(csi_key_trylock(&ctx, "pvc-k"), -EBUSY);
    assert_true((keg_mono_ns() - t0) / 1000000 >= 90);
    csi_key_unlock(&ctx, "pvc-k");
    assert_int_equal(csi_key_trylock(&ctx, "pvc-k"), 0);
    csi_key_unlock(&ctx, "pvc-k");
    assert_int_equal(ctx.nbusy, 0);
    assert_int_equal(ctx.nwaiting, 0);
}

static int slow_check_entered;           /* atomic */
static int64_t slow_check_left_ns;       /* atomic: when the last slow check returned */
static unsigned slow_check_ms;

static void slow_check(const char *target)
{
    KEG_UNUSED(target);
    __atomic_store_n(&slow_check_entered, 1, __ATOMIC_SEQ_CST);
    keg_sleep_ms(slow_check_ms);
    __atomic_store_n(&slow_check_left_ns, keg_mono_ns(), __ATOMIC_SEQ_CST);
}

static void *recover_main(void *arg)
{
    KEG_UNUSED(arg);
    csi_node_recover(&ctx);
    return NULL;
}

/* holder mode, the holder started after the plugin: reconcile() fails until it
 * answers; the watchdog asks again every round, and stops once it succeeded */
static void test_watchdog_reconcile_retry(void **state)
{
    KEG_UNUSED(state);
    fake_mm_reconcile_fails = 3;
    ctx.watchdog_ms = 20;
    assert_int_equal(csi_node_watchdog_start(&ctx), 0);
    int64_t until = keg_mono_ns() + 5000000000LL;
    while (__atomic_load_n(&fake_mm_reconcile_calls, __ATOMIC_SEQ_CST) < 4 &&
           keg_mono_ns() < until)
        keg_sleep_ms(5);
    keg_sleep_ms(200);          /* ten more rounds: no call after the success */
    csi_node_watchdog_stop(&ctx);
    assert_int_equal(__atomic_load_n(&fake_mm_reconcile_calls, __ATOMIC_SEQ_CST), 4);
}

/* csi-sanity's NodeGetVolumeStats spec failed its cleanup with ABORTED: the
 * NodeUnpublishVolume came while the watchdog was checking the fresh mount. */
static void test_unpublish_during_watchdog_check(void **state)
{
    struct pub p;
    struct csi_status st = { 0 };
    struct csi_publish rec;
    pthread_t th;
    KEG_UNUSED(state);

    pub_init(&p, "pvc-w", "a");
    assert_int_equal(do_publish(&p, &st), 0);
    int stops = fake_mm_ncalls("stop");

    /* the watchdog is in its check of the volume for 300 ms */
    ctx.key_wait_ms = 5000;
    slow_check_ms = 300;
    __atomic_store_n(&slow_check_entered, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&slow_check_left_ns, INT64_MAX, __ATOMIC_SEQ_CST);
    fake_mm_check_hook = slow_check;
    assert_int_equal(pthread_create(&th, NULL, recover_main, NULL), 0);
    while (!__atomic_load_n(&slow_check_entered, __ATOMIC_SEQ_CST))
        keg_sleep_ms(5);
    assert_int_equal(do_unpublish("pvc-w", p.target, &st), 0);
    assert_int_equal(st.code, CSI_OK);
    /* it ran after the watchdog's check, not beside it */
    int64_t done = keg_mono_ns();
    assert_true(done >= __atomic_load_n(&slow_check_left_ns, __ATOMIC_SEQ_CST));
    assert_int_equal(pthread_join(th, NULL), 0);
    fake_mm_check_hook = NULL;
    assert_int_equal(fake_mm_ncalls("stop"), stops + 1);
    assert_int_not_equal(csi_state_find(ctx.state, p.target, &rec), 0);

    /* NodePublishVolume waits the same way */
    __atomic_store_n(&slow_check_entered, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&slow_check_left_ns, INT64_MAX, __ATOMIC_SEQ_CST);
    pub_init(&p, "pvc-w", "b");
    assert_int_equal(do_publish(&p, &st), 0);
    struct pub q;
    pub_init(&q, "pvc-w", "c");
    fake_mm_check_hook = slow_check;
    assert_int_equal(pthread_create(&th, NULL, recover_main, NULL), 0);
    while (!__atomic_load_n(&slow_check_entered, __ATOMIC_SEQ_CST))
        keg_sleep_ms(5);
    fake_mm_check_hook = NULL;    /* the publish's own checks answer at once */
    assert_int_equal(do_publish(&q, &st), 0);
    done = keg_mono_ns();
    assert_true(done >= __atomic_load_n(&slow_check_left_ns, __ATOMIC_SEQ_CST));
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(csi_state_find(ctx.state, q.target, &rec), 0);
    csi_publish_clear(&rec);

    /* a check that outlasts the wait: ABORTED, and the record stays */
    ctx.key_wait_ms = 100;
    slow_check_ms = 1000;
    __atomic_store_n(&slow_check_entered, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&slow_check_left_ns, INT64_MAX, __ATOMIC_SEQ_CST);
    fake_mm_check_hook = slow_check;
    assert_int_equal(pthread_create(&th, NULL, recover_main, NULL), 0);
    while (!__atomic_load_n(&slow_check_entered, __ATOMIC_SEQ_CST))
        keg_sleep_ms(5);
    assert_int_equal(do_unpublish("pvc-w", q.target, &st), -1);
    assert_int_equal(st.code, CSI_ABORTED);
    assert_int_equal(pthread_join(th, NULL), 0);
    fake_mm_check_hook = NULL;
    assert_int_equal(csi_state_find(ctx.state, q.target, &rec), 0);
    csi_publish_clear(&rec);
    assert_int_equal(do_unpublish("pvc-w", q.target, &st), 0);
    assert_int_equal(do_unpublish("pvc-w", p.target, &st), 0);
    csi_status_clear(&st);
}

static void test_state_roundtrip(void **state)
{
    struct csi_state *s = NULL;
    struct csi_publish p = {
        .volume_id = "v:1", .target = "/a path/with \"quotes\"\n and: colon", .readonly = 1,
        .options = "a=1,b", .config = "/c/d.yaml", .pid = 4242,
    }, got;
    char sdir[300];
    KEG_UNUSED(state);

    snprintf(sdir, sizeof(sdir), "%s/state2", dir);
    assert_int_equal(csi_state_open(sdir, &s), 0);
    assert_int_equal(csi_state_put(s, &p), 0);
    p.target = "/second";
    p.readonly = 0;
    assert_int_equal(csi_state_put(s, &p), 0);
    assert_int_equal(csi_state_remove(s, "/not-there"), 0);
    csi_state_close(s);

    s = NULL;
    assert_int_equal(csi_state_open(sdir, &s), 0);
    assert_int_equal(csi_state_find(s, "/a path/with \"quotes\"\n and: colon", &got), 0);
    assert_string_equal(got.volume_id, "v:1");
    assert_int_equal(got.readonly, 1);
    assert_string_equal(got.options, "a=1,b");
    assert_int_equal(got.pid, 4242);
    csi_publish_clear(&got);
    assert_int_equal(csi_state_remove(s, "/second"), 0);
    assert_int_equal(csi_state_find(s, "/second", &got), -ENOENT);
    csi_state_close(s);

    /* a corrupt file is an error, not an empty state */
    char path[400];
    snprintf(path, sizeof(path), "%s/state.yaml", sdir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("publishes: [ {volume_id: \"x\", target: \n", fp);
    fclose(fp);
    s = NULL;
    assert_int_equal(csi_state_open(sdir, &s), -EINVAL);
    assert_null(s);
}


/* Targets stay below the kubelet root, never through a link; mount flags come
 * from the whitelist, and a cache-dir stays below the cache root. */
static void test_publish_confinement(void **state)
{
    struct pub p;
    struct csi_status st = { 0 };
    char path[600], outside[400];
    struct stat sb;
    KEG_UNUSED(state);

    snprintf(outside, sizeof(outside), "%s/outside", dir);
    assert_int_equal(mkdir(outside, 0755), 0);

    /* a target outside the kubelet root: refused, nothing created */
    pub_init(&p, "pvc-c", "a");
    snprintf(p.target, sizeof(p.target), "%s/new/mount", outside);
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_non_null(strstr(st.msg, "is not below"));
    snprintf(path, sizeof(path), "%s/new", outside);
    assert_int_equal(access(path, F_OK), -1);

    /* a prefix that is not a path component boundary ("pods-evil") */
    pub_init(&p, "pvc-c", "a");
    snprintf(p.target, sizeof(p.target), "%s-evil/x/mount", kubelet_dir);
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    /* a link below the root, to a directory outside: refused, not followed */
    snprintf(path, sizeof(path), "%s/link", kubelet_dir);
    assert_int_equal(symlink(outside, path), 0);
    pub_init(&p, "pvc-c", "a");
    snprintf(p.target, sizeof(p.target), "%s/link/vol/mount", kubelet_dir);
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_non_null(strstr(st.msg, "symbolic link"));
    snprintf(path, sizeof(path), "%s/vol", outside);
    assert_int_equal(access(path, F_OK), -1);

    /* the target itself a link */
    pub_init(&p, "pvc-c", "a");
    snprintf(p.target, sizeof(p.target), "%s/link", kubelet_dir);
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_int_equal(fake_mm_ncalls("start"), 0);

    /* mount flags that name files or are unknown: refused */
    static const char *const bad[] = {
        "log-file=/etc/passwd", "ca-file=/etc/shadow", "config=/x", "debug", "nonsense",
        "cache-size=1G/../x", "writeback=$(id)", "ro=1", "cache-dir=", NULL,
    };
    for (int i = 0; bad[i]; i++) {
        pub_init(&p, "pvc-c", "a");
        p.flags[0] = (char *)bad[i];
        p.mv.n_mount_flags = 1;
        p.mv.mount_flags = p.flags;
        assert_int_equal(do_publish(&p, &st), -1);
        assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    }
    /* a cache-dir outside the cache root, or through a link: refused, not created */
    pub_init(&p, "pvc-c", "a");
    snprintf(path, sizeof(path), "cache-dir=%s/cachex", outside);
    p.flags[0] = path;
    p.mv.n_mount_flags = 1;
    p.mv.mount_flags = p.flags;
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    snprintf(path, sizeof(path), "%s/cachex", outside);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof(path), "%s/clink", cache_root);
    assert_int_equal(symlink(outside, path), 0);
    snprintf(path, sizeof(path), "cache-dir=%s/clink/v", cache_root);
    assert_int_equal(do_publish(&p, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    snprintf(path, sizeof(path), "%s/v", outside);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(fake_mm_ncalls("start"), 0);

    /* allowed: generic flags, tuning values, a cache-dir below the root */
    pub_init(&p, "pvc-c", "a");
    snprintf(path, sizeof(path), "cache-dir=%s/pvc-c", cache_root);
    p.flags[0] = "noatime";
    p.flags[1] = "writeback";
    p.flags[2] = "cache-size=2G";
    p.flags[3] = path;
    p.mv.n_mount_flags = 4;
    p.mv.mount_flags = p.flags;
    assert_int_equal(do_publish(&p, &st), 0);
    assert_int_equal(fake_mm_ncalls("start"), 1);
    snprintf(path, sizeof(path), "%s/pvc-c", cache_root);
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    csi_status_clear(&st);
}

/* Unpublish of a target the plugin never published touches nothing there. */
static void test_unpublish_unrecorded(void **state)
{
    struct csi_status st = { 0 };
    char target[400], file[450];
    KEG_UNUSED(state);

    snprintf(target, sizeof(target), "%s/someone-else", kubelet_dir);
    assert_int_equal(mkdir(target, 0755), 0);
    assert_int_equal(do_unpublish("pvc-x", target, &st), 0);
    assert_int_equal(fake_mm_ncalls("stop"), 0);
    assert_int_equal(access(target, F_OK), 0);          /* not removed */
    /* not even an empty directory is removed; a file in it stays too */
    snprintf(file, sizeof(file), "%s/keep", target);
    FILE *fp = fopen(file, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(do_unpublish("pvc-x", target, &st), 0);
    assert_int_equal(access(file, F_OK), 0);
    csi_status_clear(&st);
}

/*--- --metrics: records by state, live mounters, the mounters' metrics merged in -------*/

static size_t get_cb(char *p, size_t sz, size_t nm, void *arg)
{
    return fwrite(p, sz, nm, (FILE *)arg);
}

/* GET /metrics over the unix socket sock.  OWNERSHIP: caller free()s. */
static char *scrape_plugin(const char *sock, double *took)
{
    char *buf = NULL;
    size_t len = 0;
    long code = 0;
    FILE *f = open_memstream(&buf, &len);
    CURL *h = curl_easy_init();
    assert_non_null(f);
    assert_non_null(h);
    curl_easy_setopt(h, CURLOPT_URL, "http://localhost/metrics");
    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, get_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(h, CURLINFO_TOTAL_TIME, took);
    curl_easy_cleanup(h);
    fclose(f);
    assert_int_equal(code, 200);
    return buf;
}

static void render_mounter(void *arg, FILE *f)
{
    keg_metrics_family(f, "kegfs_written_bytes_total", "counter", "bytes written");
    keg_metrics_sample_u64(f, "kegfs_written_bytes_total", "volume=\"pvc-m\"",
                           (uint64_t)(uintptr_t)arg);
}

static int occurrences(const char *hay, const char *needle)
{
    int n = 0;
    size_t off = 0, nl = strlen(needle);
    while (hay[off]) {
        if (strncmp(hay + off, needle, nl) == 0)
            n++;
        off++;
    }
    return n;
}

static void test_metrics_endpoint(void **state)
{
    struct pub p, q;
    struct csi_status st = { 0 };
    struct csi_publish ra, rb;
    struct keg_metrics_server *ma = NULL, *mb = NULL;
    char plugin[300], addr[320], line[256], ha[17], hb[17];
    double took = 0;
    KEG_UNUSED(state);

    assert_true(strlen(dir) < sizeof(fake_mm_metrics_dir));
    memcpy(fake_mm_metrics_dir, dir, strlen(dir) + 1);
    ctx.mounter_metrics = 1;
    pub_init(&p, "pvc-m", "a");
    pub_init(&q, "pvc-m", "b");
    assert_int_equal(do_publish(&p, &st), 0);
    assert_int_equal(fake_mm_last("start")->metrics, 1);     /* asked for a socket */
    assert_int_equal(do_publish(&q, &st), 0);
    assert_int_equal(csi_state_find(ctx.state, p.target, &ra), 0);
    assert_int_equal(csi_state_find(ctx.state, q.target, &rb), 0);
    assert_int_equal(strncmp(ra.metrics, dir, strlen(dir)), 0); /* recorded */
    keg_fnv1a64_hex(p.target, ha);
    keg_fnv1a64_hex(q.target, hb);

    /* the two mounters of one volume serve their own counters */
    snprintf(addr, sizeof(addr), "unix:%s", ra.metrics);
    assert_int_equal(keg_metrics_start(addr, render_mounter, (void *)(uintptr_t)ra.pid, &ma,
                                       NULL), 0);
    snprintf(addr, sizeof(addr), "unix:%s", rb.metrics);
    assert_int_equal(keg_metrics_start(addr, render_mounter, (void *)(uintptr_t)rb.pid, &mb,
                                       NULL), 0);
    snprintf(plugin, sizeof(plugin), "%s/plugin.sock", dir);
    snprintf(addr, sizeof(addr), "unix:%s", plugin);
    assert_int_equal(csi_metrics_start(&ctx, addr), 0);

    char *t = scrape_plugin(plugin, &took);
    assert_non_null(strstr(t, "\nkegfs_csi_published_targets 2\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_volumes{state=\"live\"} 2\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_volumes{state=\"recovering\"} 0\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_volumes{state=\"failed\"} 0\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_live_mounters 2\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_mounters_scraped 2\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_mounter_scrape_errors_total 0\n"));
    assert_int_equal(occurrences(t, "# TYPE kegfs_written_bytes_total "), 1);
    snprintf(line, sizeof(line), "\nkegfs_written_bytes_total{mounter=\"%s\",volume=\"pvc-m\"} "
             "%ld\n", ha, (long)ra.pid);
    assert_non_null(strstr(t, line));
    snprintf(line, sizeof(line), "\nkegfs_written_bytes_total{mounter=\"%s\",volume=\"pvc-m\"} "
             "%ld\n", hb, (long)rb.pid);
    assert_non_null(strstr(t, line));
    assert_null(strstr(t, dir));                  /* no target or socket path, only hashes */
    free(t);    /* checksrc: ok -- open_memstream's buffer */

    /* a's mounter dies and cannot be started again: failed, not live, not scraped */
    keg_metrics_stop(ma);
    fake_mm_set_state(p.target, -ENOTCONN);
    fake_mm_start_rc = -EIO;
    csi_node_recover(&ctx);
    fake_mm_start_rc = 0;
    /* b's mounter is alive but stuck: its socket accepts and never answers */
    keg_metrics_stop(mb);
    int hung = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, rb.metrics, strlen(rb.metrics) + 1);
    assert_int_equal(bind(hung, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(hung, 4), 0);
    t = scrape_plugin(plugin, &took);
    assert_true(took < 3.0);                       /* one mounter timeout, bounded */
    assert_non_null(strstr(t, "\nkegfs_csi_volumes{state=\"live\"} 1\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_volumes{state=\"failed\"} 1\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_live_mounters 1\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_mounters_scraped 1\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_mounter_scrape_errors_total 1\n"));
    assert_null(strstr(t, "kegfs_written_bytes_total{"));   /* neither mounter's series */
    free(t);    /* checksrc: ok -- open_memstream's buffer */
    close(hung);

    /* unpublished: forgotten */
    assert_int_equal(do_unpublish("pvc-m", p.target, &st), 0);
    assert_int_equal(do_unpublish("pvc-m", q.target, &st), 0);
    t = scrape_plugin(plugin, &took);
    assert_non_null(strstr(t, "\nkegfs_csi_volumes{state=\"failed\"} 0\n"));
    assert_non_null(strstr(t, "\nkegfs_csi_live_mounters 0\n"));
    free(t);    /* checksrc: ok -- open_memstream's buffer */
    csi_metrics_stop();
    csi_publish_clear(&ra);
    csi_publish_clear(&rb);
    ctx.mounter_metrics = 0;
    csi_status_clear(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_validation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_unpublish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_confinement, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unpublish_unrecorded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_static_volume_url, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_info_caps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recovery_and_state_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_lock_watchdog_vs_rpc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watchdog_reconcile_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unpublish_during_watchdog_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_endpoint, setup, teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
