/* test_csi_controller.c -- Identity and Controller handlers without gRPC:
 * validation codes, idempotent CreateVolume, ALREADY_EXISTS on a capacity
 * mismatch, expand, delete with reclaim policies, secret-free messages and
 * request log lines. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "csi_fakes.h"
#include "csi_i.h"
#include "keg/log.h"
#include "keg/mem.h"

static struct csi_ctx ctx;

static void st_reset(struct csi_status *st)
{
    csi_status_clear(st);
    csi_status_init(st);
}

/*--- request builders ------------------------------------------------------*/

#define MAXE 8
struct kv {
    Csi__V1__CreateVolumeRequest__SecretsEntry e[MAXE];
    Csi__V1__CreateVolumeRequest__SecretsEntry *p[MAXE];
    size_t n;
};

static void kv_add(struct kv *kv, const char *k, const char *v)
{
    Csi__V1__CreateVolumeRequest__SecretsEntry *e = &kv->e[kv->n];
    csi__v1__create_volume_request__secrets_entry__init(e);
    e->key = (char *)k;
    e->value = (char *)v;
    kv->p[kv->n] = e;
    kv->n++;
}

static void std_secrets(struct kv *kv, const char *metaurl)
{
    kv->n = 0;
    kv_add(kv, "metaurl", metaurl);
    kv_add(kv, "storage", "file");
    kv_add(kv, "bucket", "/tmp/bucket");
    kv_add(kv, "access-key", "AKIA");
    kv_add(kv, "secret-key", "s3cr3t-key");
}

struct cap {
    Csi__V1__VolumeCapability c;
    Csi__V1__VolumeCapability__MountVolume mv;
    Csi__V1__VolumeCapability__BlockVolume bv;
    Csi__V1__VolumeCapability__AccessMode am;
    Csi__V1__VolumeCapability *pc[1];
};

static void cap_init(struct cap *c, int block, int mode)
{
    csi__v1__volume_capability__init(&c->c);
    csi__v1__volume_capability__mount_volume__init(&c->mv);
    csi__v1__volume_capability__block_volume__init(&c->bv);
    csi__v1__volume_capability__access_mode__init(&c->am);
    c->am.mode = mode;
    c->c.access_mode = &c->am;
    if (block) {
        c->c.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
        c->c.block = &c->bv;
    } else {
        c->c.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
        c->c.mount = &c->mv;
    }
    c->pc[0] = &c->c;
}

struct create {
    Csi__V1__CreateVolumeRequest r;
    Csi__V1__CapacityRange cr;
    struct kv secrets, params;
    struct cap cap;
};

static void create_init(struct create *c, const char *name, int64_t size)
{
    memset(c, 0, sizeof(*c));
    csi__v1__create_volume_request__init(&c->r);
    csi__v1__capacity_range__init(&c->cr);
    c->r.name = (char *)name;
    if (size) {
        c->cr.required_bytes = size;
        c->r.capacity_range = &c->cr;
    }
    cap_init(&c->cap, 0, CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER);
    c->r.n_volume_capabilities = 1;
    c->r.volume_capabilities = c->cap.pc;
    std_secrets(&c->secrets, "csifake://redis:pw0rd@host:6379/1");
    c->r.n_secrets = c->secrets.n;
    c->r.secrets = c->secrets.p;
}

static void create_params(struct create *c)
{
    c->r.n_parameters = c->params.n;
    c->r.parameters = (Csi__V1__CreateVolumeRequest__ParametersEntry **)c->params.p;
}

static int do_create(struct create *c, Csi__V1__CreateVolumeResponse *out, struct csi_status *st)
{
    csi__v1__create_volume_response__init(out);
    st_reset(st);
    c->r.n_secrets = c->secrets.n;
    return csi_controller_create_volume(&ctx, &c->r, out, st);
}

static int do_delete(const char *id, struct kv *secrets, struct csi_status *st)
{
    Csi__V1__DeleteVolumeRequest r;
    Csi__V1__DeleteVolumeResponse out;
    csi__v1__delete_volume_request__init(&r);
    csi__v1__delete_volume_response__init(&out);
    r.volume_id = (char *)id;
    r.n_secrets = secrets->n;
    r.secrets = (Csi__V1__DeleteVolumeRequest__SecretsEntry **)secrets->p;
    st_reset(st);
    return csi_controller_delete_volume(&ctx, &r, &out, st);
}

static int setup(void **state)
{
    KEG_UNUSED(state);
    memset(&ctx, 0, sizeof(ctx));
    ctx.mode = CSI_MODE_CONTROLLER;
    ctx.open_store = fake_open_store;
    ctx.ready = 1;
    csi_ctx_init(&ctx);
    keg_log_set_level(LOG_WARNING);
    fake_meta_reset();
    fake_obj_reset();
    return 0;
}

static int teardown(void **state)
{
    KEG_UNUSED(state);
    csi_ctx_destroy(&ctx);
    return 0;
}

/*--- tests -------------------------------------------------------------------*/

static void test_identity(void **state)
{
    struct csi_status st = { 0 };
    KEG_UNUSED(state);
    st_reset(&st);

    Csi__V1__GetPluginInfoRequest ir = CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT;
    Csi__V1__GetPluginInfoResponse io = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;
    assert_int_equal(csi_identity_get_plugin_info(&ctx, &ir, &io, &st), 0);
    assert_string_equal(io.name, "csi.kegfs.io");
    assert_string_equal(io.vendor_version, KEG_VERSION);

    Csi__V1__GetPluginCapabilitiesRequest cr = CSI__V1__GET_PLUGIN_CAPABILITIES_REQUEST__INIT;
    Csi__V1__GetPluginCapabilitiesResponse co = CSI__V1__GET_PLUGIN_CAPABILITIES_RESPONSE__INIT;
    assert_int_equal(csi_identity_get_plugin_capabilities(&ctx, &cr, &co, &st), 0);
    assert_int_equal(co.n_capabilities, 2);
    assert_int_equal(co.capabilities[0]->service->type,
                     CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE);
    assert_int_equal(co.capabilities[1]->volume_expansion->type,
                     CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE);

    /* a node-only plugin does not claim the controller service */
    ctx.mode = CSI_MODE_NODE;
    Csi__V1__GetPluginCapabilitiesResponse co2 = CSI__V1__GET_PLUGIN_CAPABILITIES_RESPONSE__INIT;
    assert_int_equal(csi_identity_get_plugin_capabilities(&ctx, &cr, &co2, &st), 0);
    assert_int_equal(co2.n_capabilities, 1);
    ctx.mode = CSI_MODE_CONTROLLER;

    Csi__V1__ProbeRequest pr = CSI__V1__PROBE_REQUEST__INIT;
    Csi__V1__ProbeResponse po = CSI__V1__PROBE_RESPONSE__INIT;
    ctx.ready = 0;
    assert_int_equal(csi_identity_probe(&ctx, &pr, &po, &st), 0);
    assert_non_null(po.ready);
    assert_false(po.ready->value);
    ctx.ready = 1;
    assert_int_equal(csi_identity_probe(&ctx, &pr, &po, &st), 0);
    assert_true(po.ready->value);

    /* responses pack (the server would send them) */
    assert_true(protobuf_c_message_get_packed_size(&co.base) > 0);
    csi_status_clear(&st);
}

static void test_volume_id_and_url(void **state)
{
    char id[64], id2[64];
    char *url = NULL;
    const char *err = NULL;
    KEG_UNUSED(state);

    csi_volume_id_from_name("pvc-0a1b2c3d-1111-2222-3333-444455556666", id);
    assert_string_equal(id, "pvc-0a1b2c3d-1111-2222-3333-444455556666");
    csi_volume_id_from_name("My Volume/../x", id);
    assert_int_equal(strncmp(id, "kegfs-", 6), 0);
    assert_int_equal(strlen(id), 22);
    assert_int_equal(keg_format_check_name(id), 0);
    csi_volume_id_from_name("My Volume/../x", id2);
    assert_string_equal(id, id2);                       /* deterministic */
    csi_volume_id_from_name("My Volume/../y", id2);
    assert_string_not_equal(id, id2);

    assert_int_equal(csi_volume_meta_url("redis://:pw@h:6379/1", "v1", &url, &err), 0);
    assert_string_equal(url, "redis://:pw@h:6379/1?ns=v1");
    keg_free(url);
    assert_int_equal(csi_volume_meta_url("redis://h/2?ns=old&timeout=5", "v1", &url, &err), 0);
    assert_string_equal(url, "redis://h/2?timeout=5&ns=v1");
    keg_free(url);
    assert_int_equal(csi_volume_meta_url("sqlite3:///var/lib/kegfs/", "v1", &url, &err), 0);
    assert_string_equal(url, "sqlite3:///var/lib/kegfs/v1.db");
    keg_free(url);
    assert_int_equal(csi_volume_meta_url("sqlite3:///var/lib/kegfs/meta.db", "v1", &url, &err),
                     -EINVAL);
    assert_null(url);
    assert_non_null(strstr(err, "directory"));
}

static void test_create_validation(void **state)
{
    struct create c;
    struct csi_status st = { 0 };
    Csi__V1__CreateVolumeResponse out;
    KEG_UNUSED(state);
    st_reset(&st);

    create_init(&c, "", 1 << 20);
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_non_null(strstr(st.msg, "name"));

    create_init(&c, "vol-a", 1 << 20);
    c.r.n_volume_capabilities = 0;
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    create_init(&c, "vol-a", 1 << 20);
    cap_init(&c.cap, 1, CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER);
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_non_null(strstr(st.msg, "block"));

    create_init(&c, "vol-a", 1 << 20);
    c.cap.am.mode = 42;
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_non_null(strstr(st.msg, "access mode"));

    create_init(&c, "vol-a", 1 << 20);
    c.cr.limit_bytes = 1000;
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_OUT_OF_RANGE);

    /* missing Secret keys are named */
    create_init(&c, "vol-a", 1 << 20);
    c.secrets.n = 0;
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_non_null(strstr(st.msg, "secret key 'metaurl' missing"));
    create_init(&c, "vol-a", 1 << 20);
    c.secrets.n = 1;
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_non_null(strstr(st.msg, "secret key 'storage' missing"));

    /* StorageClass parameters */
    static const char *const bad[][2] = {
        { "block-size", "3K" }, { "block-size", "32M" }, { "compress", "gzip" },
        { "trash-days", "-1" }, { "reclaim", "keep" }, { "colour", "blue" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        create_init(&c, "vol-a", 1 << 20);
        kv_add(&c.params, bad[i][0], bad[i][1]);
        create_params(&c);
        assert_int_equal(do_create(&c, &out, &st), -1);
        assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
        assert_non_null(strstr(st.msg, bad[i][0]));
    }
    assert_int_equal(fake_meta_count(), 0);

    /* an unreachable engine: UNAVAILABLE, and the password is not in the message */
    create_init(&c, "vol-a", 1 << 20);
    std_secrets(&c.secrets, "csifake://:topsecretpw@unreachable:6379/1");
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_UNAVAILABLE);
    assert_null(strstr(st.msg, "topsecretpw"));
    assert_non_null(strstr(st.msg, "unreachable"));

    /* a SQLite directory that cannot be created: said so, nothing formatted */
    create_init(&c, "vol-a", 1 << 20);
    std_secrets(&c.secrets, "sqlite3:///dev/null/sub/");
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_UNAVAILABLE);
    assert_non_null(strstr(st.msg, "cannot create the directory /dev/null/sub"));
    assert_non_null(strstr(st.msg, strerror(ENOTDIR)));
    assert_int_equal(fake_meta_count(), 0);

    /* object store failure: nothing formatted */
    create_init(&c, "vol-a", 1 << 20);
    fake_store_fail = -EACCES;
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_UNAVAILABLE);
    assert_int_equal(fake_meta_count(), 0);
    csi_status_clear(&st);
}

static void test_create_idempotent(void **state)
{
    struct create c;
    struct csi_status st = { 0 };
    Csi__V1__CreateVolumeResponse out;
    struct keg_format f;
    KEG_UNUSED(state);
    st_reset(&st);

    create_init(&c, "pvc-1234", 5 << 20);
    kv_add(&c.params, "block-size", "1M");
    kv_add(&c.params, "compress", "zstd");
    kv_add(&c.params, "trash-days", "3");
    kv_add(&c.params, "csi.storage.k8s.io/pv/name", "ignored");
    create_params(&c);
    assert_int_equal(do_create(&c, &out, &st), 0);
    assert_non_null(out.volume);
    assert_string_equal(out.volume->volume_id, "pvc-1234");
    assert_int_equal(out.volume->capacity_bytes, 5 << 20);
    const char *vc = csi_map_get((csi_map_entry *const *)out.volume->volume_context,
                                 out.volume->n_volume_context, "metaurl");
    assert_non_null(vc);
    assert_string_equal(vc, "csifake://redis@host:6379/1?ns=pvc-1234");   /* no password */
    assert_true(protobuf_c_message_get_packed_size(&out.base) > 0);

    assert_true(fake_meta_get("csifake://redis:pw0rd@host:6379/1?ns=pvc-1234", &f));
    assert_int_equal(f.capacity, 5 << 20);
    assert_int_equal(f.block_size, 1 << 20);
    assert_string_equal(f.compress, "zstd");
    assert_int_equal(f.trash_days, 3);
    assert_string_equal(f.name, "pvc-1234");
    assert_string_equal(f.storage, "file");
    assert_string_equal(f.bucket, "/tmp/bucket");
    assert_string_equal(fake_obj_get("pvc-1234/.csi/reclaim"), "delete");

    /* same name, same size: same volume */
    assert_int_equal(do_create(&c, &out, &st), 0);
    assert_string_equal(out.volume->volume_id, "pvc-1234");
    assert_int_equal(fake_meta_count(), 1);

    /* same name, other size: ALREADY_EXISTS */
    c.cr.required_bytes = 10 << 20;
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_ALREADY_EXISTS);

    /* a call in progress on the volume: ABORTED */
    c.cr.required_bytes = 5 << 20;
    assert_int_equal(csi_key_trylock(&ctx, "pvc-1234"), 0);
    assert_int_equal(csi_key_trylock(&ctx, "pvc-1234"), -EBUSY);
    assert_int_equal(do_create(&c, &out, &st), -1);
    assert_int_equal(st.code, CSI_ABORTED);
    csi_key_unlock(&ctx, "pvc-1234");
    assert_int_equal(do_create(&c, &out, &st), 0);

    /* default capacity */
    create_init(&c, "no-size", 0);
    assert_int_equal(do_create(&c, &out, &st), 0);
    assert_int_equal(out.volume->capacity_bytes, (int64_t)CSI_DEFAULT_CAPACITY);
    csi_status_clear(&st);
}

static void test_expand(void **state)
{
    struct create c;
    struct csi_status st = { 0 };
    Csi__V1__CreateVolumeResponse cout;
    struct keg_format f;
    KEG_UNUSED(state);
    st_reset(&st);

    create_init(&c, "vol-exp", 1 << 20);
    assert_int_equal(do_create(&c, &cout, &st), 0);

    Csi__V1__ControllerExpandVolumeRequest r = CSI__V1__CONTROLLER_EXPAND_VOLUME_REQUEST__INIT;
    Csi__V1__ControllerExpandVolumeResponse out = CSI__V1__CONTROLLER_EXPAND_VOLUME_RESPONSE__INIT;
    Csi__V1__CapacityRange cr = CSI__V1__CAPACITY_RANGE__INIT;
    r.volume_id = "vol-exp";
    r.n_secrets = c.secrets.n;
    r.secrets = (Csi__V1__ControllerExpandVolumeRequest__SecretsEntry **)c.secrets.p;

    assert_int_equal(csi_controller_expand_volume(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);          /* no capacity_range */

    cr.required_bytes = 8 << 20;
    r.capacity_range = &cr;
    st_reset(&st);
    assert_int_equal(csi_controller_expand_volume(&ctx, &r, &out, &st), 0);
    assert_int_equal(out.capacity_bytes, 8 << 20);
    assert_false(out.node_expansion_required);
    assert_true(fake_meta_get("csifake://redis:pw0rd@host:6379/1?ns=vol-exp", &f));
    assert_int_equal(f.capacity, 8 << 20);

    cr.required_bytes = 2 << 20;        /* never shrinks */
    assert_int_equal(csi_controller_expand_volume(&ctx, &r, &out, &st), 0);
    assert_int_equal(out.capacity_bytes, 8 << 20);

    r.volume_id = "vol-none";
    assert_int_equal(csi_controller_expand_volume(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_NOT_FOUND);
    st_reset(&st);
    r.volume_id = "../etc";
    assert_int_equal(csi_controller_expand_volume(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    csi_status_clear(&st);
}

static void test_delete(void **state)
{
    struct create c, k;
    struct csi_status st = { 0 };
    Csi__V1__CreateVolumeResponse out;
    KEG_UNUSED(state);
    st_reset(&st);

    create_init(&c, "vol-del", 1 << 20);
    assert_int_equal(do_create(&c, &out, &st), 0);
    fake_obj_put("vol-del/chunks/0/0/1_0_4096", "x");
    fake_obj_put("vol-del/chunks/0/0/2_0_4096", "y");
    fake_obj_put("vol-delx/chunks/0/0/1_0_4096", "other volume");

    create_init(&k, "vol-keep", 1 << 20);
    kv_add(&k.params, "reclaim", "retain");
    create_params(&k);
    assert_int_equal(do_create(&k, &out, &st), 0);
    fake_obj_put("vol-keep/chunks/0/0/1_0_4096", "z");

    assert_int_equal(do_delete("vol-del", &c.secrets, &st), 0);
    assert_int_equal(fake_obj_count_prefix("vol-del/"), 0);
    assert_int_equal(fake_obj_count_prefix("vol-delx/"), 1);
    assert_false(fake_meta_get("csifake://redis:pw0rd@host:6379/1?ns=vol-del", NULL));

    /* again, and an id that never existed: success */
    assert_int_equal(do_delete("vol-del", &c.secrets, &st), 0);
    assert_int_equal(do_delete("never-was", &c.secrets, &st), 0);

    /* reclaim=retain keeps the namespace and the data */
    assert_int_equal(do_delete("vol-keep", &k.secrets, &st), 0);
    assert_int_equal(fake_obj_count_prefix("vol-keep/"), 3);      /* with the volume marker */
    assert_true(fake_meta_get("csifake://redis:pw0rd@host:6379/1?ns=vol-keep", NULL));

    /* the prefix claimed by another volume: create is refused, delete deletes nothing */
    struct create o2;
    char other[40], mine[40];
    fake_obj_put("vol-taken/" KEG_VOLUME_MARKER,
                 "kegfs-volume 1\nname=vol-taken\nuuid=99999999-9999-4999-8999-999999999999\n");
    fake_obj_put("vol-taken/chunks/0/0/1_0_4096", "theirs");
    create_init(&o2, "vol-taken", 1 << 20);
    assert_int_equal(do_create(&o2, &out, &st), -1);
    assert_int_equal(st.code, CSI_FAILED_PRECONDITION);
    assert_non_null(strstr(st.msg, "already used"));
    st_reset(&st);
    assert_int_equal(fake_obj_count_prefix("vol-taken/"), 2);
    create_init(&o2, "vol-mine", 1 << 20);
    assert_int_equal(do_create(&o2, &out, &st), 0);
    fake_obj_put("vol-mine/chunks/0/0/1_0_4096", "mine");
    struct keg_obj *fo = NULL;
    assert_int_equal(fake_open_store(NULL, NULL, NULL, &fo), 0);
    assert_int_equal(keg_volume_marker_read(fo, "vol-mine", mine), 0);
    fake_obj_put("vol-mine/" KEG_VOLUME_MARKER,            /* another volume took it over */
                 "kegfs-volume 1\nname=vol-mine\nuuid=99999999-9999-4999-8999-999999999999\n");
    assert_int_equal(do_delete("vol-mine", &o2.secrets, &st), -1);
    assert_int_equal(st.code, CSI_FAILED_PRECONDITION);
    assert_non_null(strstr(st.msg, "another volume"));
    st_reset(&st);
    assert_int_equal(fake_obj_count_prefix("vol-mine/"), 3);
    /* no marker at all: objects that nothing proves are the volume's stay */
    char mkey[128];
    keg_volume_marker_key(mkey, sizeof(mkey), "vol-mine");
    assert_int_equal(keg_obj_del(fo, mkey), 0);
    assert_int_equal(do_delete("vol-mine", &o2.secrets, &st), -1);
    assert_int_equal(st.code, CSI_FAILED_PRECONDITION);
    assert_non_null(strstr(st.msg, "no volume marker"));
    st_reset(&st);
    assert_int_equal(fake_obj_count_prefix("vol-mine/"), 2);
    /* its own marker again: everything deleted, the marker too */
    assert_int_equal(keg_volume_marker_claim(fo, "vol-mine", mine, other), 0);
    assert_int_equal(do_delete("vol-mine", &o2.secrets, &st), 0);
    assert_int_equal(fake_obj_count_prefix("vol-mine/"), 0);
    keg_obj_close(fo);

    /* bad input */
    assert_int_equal(do_delete("", &c.secrets, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_int_equal(do_delete("a/b", &c.secrets, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    assert_int_equal(do_delete("a..b", &c.secrets, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);
    struct kv none = { .n = 0 };
    assert_int_equal(do_delete("vol-x", &none, &st), -1);
    assert_non_null(strstr(st.msg, "secret key 'metaurl' missing"));
    csi_status_clear(&st);
}

static void test_validate_and_caps(void **state)
{
    struct create c;
    struct csi_status st = { 0 };
    Csi__V1__CreateVolumeResponse cout;
    struct cap ok, blk;
    KEG_UNUSED(state);
    st_reset(&st);

    create_init(&c, "vol-val", 1 << 20);
    assert_int_equal(do_create(&c, &cout, &st), 0);

    Csi__V1__ValidateVolumeCapabilitiesRequest r = CSI__V1__VALIDATE_VOLUME_CAPABILITIES_REQUEST__INIT;
    Csi__V1__ValidateVolumeCapabilitiesResponse out =
        CSI__V1__VALIDATE_VOLUME_CAPABILITIES_RESPONSE__INIT;
    r.volume_id = "vol-val";
    r.n_secrets = c.secrets.n;
    r.secrets = (Csi__V1__ValidateVolumeCapabilitiesRequest__SecretsEntry **)c.secrets.p;
    assert_int_equal(csi_controller_validate_volume_capabilities(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_INVALID_ARGUMENT);

    static const int modes[] = {
        CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER,
        CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY,
        CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY,
        CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_SINGLE_WRITER,
        CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER,
    };
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        cap_init(&ok, 0, modes[i]);
        r.n_volume_capabilities = 1;
        r.volume_capabilities = ok.pc;
        csi__v1__validate_volume_capabilities_response__init(&out);
        st_reset(&st);
        assert_int_equal(csi_controller_validate_volume_capabilities(&ctx, &r, &out, &st), 0);
        assert_non_null(out.confirmed);
        assert_int_equal(out.confirmed->n_volume_capabilities, 1);
        assert_true(protobuf_c_message_get_packed_size(&out.base) > 0);
    }
    cap_init(&blk, 1, CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER);
    r.volume_capabilities = blk.pc;
    csi__v1__validate_volume_capabilities_response__init(&out);
    assert_int_equal(csi_controller_validate_volume_capabilities(&ctx, &r, &out, &st), 0);
    assert_null(out.confirmed);
    assert_non_null(strstr(out.message, "block"));

    r.volume_id = "vol-missing";
    r.volume_capabilities = ok.pc;
    assert_int_equal(csi_controller_validate_volume_capabilities(&ctx, &r, &out, &st), -1);
    assert_int_equal(st.code, CSI_NOT_FOUND);

    Csi__V1__ControllerGetCapabilitiesRequest gr = CSI__V1__CONTROLLER_GET_CAPABILITIES_REQUEST__INIT;
    Csi__V1__ControllerGetCapabilitiesResponse go = CSI__V1__CONTROLLER_GET_CAPABILITIES_RESPONSE__INIT;
    st_reset(&st);
    assert_int_equal(csi_controller_get_capabilities(&ctx, &gr, &go, &st), 0);
    assert_int_equal(go.n_capabilities, 2);
    assert_int_equal(go.capabilities[0]->rpc->type,
                     CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME);
    assert_int_equal(go.capabilities[1]->rpc->type,
                     CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME);
    csi_status_clear(&st);
}

static void test_request_log_strips_secrets(void **state)
{
    struct create c;
    struct csi_status st = { 0 };
    char line[1024];
    KEG_UNUSED(state);

    create_init(&c, "pvc-log", 1 << 20);
    st_reset(&st);
    csi_format_request(line, sizeof(line), "/csi.v1.Controller/CreateVolume", &c.r.base, 1500,
                       &st);
    assert_non_null(strstr(line, "/csi.v1.Controller/CreateVolume"));
    assert_non_null(strstr(line, "name=pvc-log"));
    assert_non_null(strstr(line, "duration=1.500ms"));
    assert_non_null(strstr(line, "status=OK"));
    assert_null(strstr(line, "pw0rd"));
    assert_null(strstr(line, "s3cr3t"));
    assert_null(strstr(line, "AKIA"));

    Csi__V1__NodePublishVolumeRequest np = CSI__V1__NODE_PUBLISH_VOLUME_REQUEST__INIT;
    np.volume_id = "pvc-log";
    np.target_path = "/var/lib/kubelet/pods/x/mount";
    np.n_secrets = c.secrets.n;
    np.secrets = (Csi__V1__NodePublishVolumeRequest__SecretsEntry **)c.secrets.p;
    csi_fail(&st, CSI_NOT_FOUND, "volume pvc-log is not published");
    csi_format_request(line, sizeof(line), "/csi.v1.Node/NodePublishVolume", &np.base, 2, &st);
    assert_non_null(strstr(line, "volume_id=pvc-log"));
    assert_non_null(strstr(line, "target=/var/lib/kubelet/pods/x/mount"));
    assert_non_null(strstr(line, "status=NOT_FOUND"));
    assert_null(strstr(line, "s3cr3t"));
    assert_null(strstr(line, "pw0rd"));

    /* the errno mapping of STYLE.md 4.6 */
    assert_int_equal(csi_code_from_errno(-EINVAL), CSI_INVALID_ARGUMENT);
    assert_int_equal(csi_code_from_errno(-ENOENT), CSI_NOT_FOUND);
    assert_int_equal(csi_code_from_errno(-EEXIST), CSI_ALREADY_EXISTS);
    assert_int_equal(csi_code_from_errno(-EBUSY), CSI_ABORTED);
    assert_int_equal(csi_code_from_errno(-ECONNREFUSED), CSI_UNAVAILABLE);
    assert_int_equal(csi_code_from_errno(-ENOMEM), CSI_INTERNAL);
    csi_status_clear(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_identity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_volume_id_and_url, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_validation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_idempotent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validate_and_caps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_log_strips_secrets, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
