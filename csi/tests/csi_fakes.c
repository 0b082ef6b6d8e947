/* csi_fakes.c -- fakes for the kegfs-csi handler tests (see csi_fakes.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "csi_fakes.h"
#include "keg/mem.h"
#include "state.h"

#define FAKE_MAX 64

/*----------------------------------------------------------------------------
 * Metadata engine
 *--------------------------------------------------------------------------*/

struct fake_ns {
    char url[512];
    struct keg_format f;
};
static struct fake_ns fake_nss[FAKE_MAX];
static int fake_nns;
int fake_meta_destroys;
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;

struct fake_meta_priv {
    char url[512];
};

void fake_meta_reset(void)
{
    fake_nns = 0;
    fake_meta_destroys = 0;
}

static struct fake_ns *fake_find(const char *url)
{
    for (int i = 0; i < fake_nns; i++)
        if (strcmp(fake_nss[i].url, url) == 0)
            return &fake_nss[i];
    return NULL;
}

int fake_meta_get(const char *url, struct keg_format *f)
{
    struct fake_ns *ns = fake_find(url);
    if (ns && f)
        *f = ns->f;
    return ns != NULL;
}

int fake_meta_count(void)
{
    return fake_nns;
}

static int fm_open(struct keg_meta *m, const char *url)
{
    struct fake_meta_priv *p = m->priv;
    if (strstr(url, "unreachable"))
        return -ECONNREFUSED;
    snprintf(p->url, sizeof(p->url), "%s", url);
    return 0;
}

static void fm_close(struct keg_meta *m)
{
    KEG_UNUSED(m);
}

static int fm_format_init(struct keg_meta *m, const struct keg_format *f, uint32_t root_mode,
                          uint32_t uid, uint32_t gid, int force)
{
    struct fake_meta_priv *p = m->priv;
    KEG_UNUSED(root_mode);
    KEG_UNUSED(uid);
    KEG_UNUSED(gid);
    pthread_mutex_lock(&fake_lock);
    struct fake_ns *ns = fake_find(p->url);
    int rc = 0;
    if (ns && !force)
        rc = -EEXIST;
    else if (!ns && fake_nns == FAKE_MAX)
        rc = -ENOSPC;
    else {
        if (!ns) {
            ns = &fake_nss[fake_nns++];
            snprintf(ns->url, sizeof(ns->url), "%s", p->url);
        }
        ns->f = *f;
    }
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

static int fm_format_load(struct keg_meta *m, struct keg_format *f)
{
    struct fake_meta_priv *p = m->priv;
    pthread_mutex_lock(&fake_lock);
    struct fake_ns *ns = fake_find(p->url);
    if (ns)
        *f = ns->f;
    pthread_mutex_unlock(&fake_lock);
    return ns ? 0 : -ENOENT;
}

static int fm_destroy(struct keg_meta *m)
{
    struct fake_meta_priv *p = m->priv;
    pthread_mutex_lock(&fake_lock);
    struct fake_ns *ns = fake_find(p->url);
    if (ns)
        *ns = fake_nss[--fake_nns];
    fake_meta_destroys++;
    pthread_mutex_unlock(&fake_lock);
    return 0;
}

static const struct keg_meta_ops fake_meta_ops = {
    .name = "csifake",
    .version = 1,
    .caps = KEG_META_CAP_SHARED,
    .priv_size = sizeof(struct fake_meta_priv),
    .open = fm_open,
    .close = fm_close,
    .format_init = fm_format_init,
    .format_load = fm_format_load,
    .destroy = fm_destroy,
};

__attribute__((constructor)) static void fake_register(void)
{
    keg_meta_register(&fake_meta_ops);
}

/*----------------------------------------------------------------------------
 * Object store
 *--------------------------------------------------------------------------*/

struct fake_obj {
    char key[256];
    char val[160];
};
static struct fake_obj fake_objs[FAKE_MAX * 4];
static int fake_nobjs;
int fake_store_fail;

void fake_obj_reset(void)
{
    fake_nobjs = 0;
    fake_store_fail = 0;
}

int fake_obj_put(const char *key, const char *val)
{
    for (int i = 0; i < fake_nobjs; i++) {
        if (strcmp(fake_objs[i].key, key) == 0) {
            snprintf(fake_objs[i].val, sizeof(fake_objs[i].val), "%s", val);
            return 0;
        }
    }
    if (fake_nobjs == FAKE_MAX * 4)
        return -ENOSPC;
    snprintf(fake_objs[fake_nobjs].key, sizeof(fake_objs[0].key), "%s", key);
    snprintf(fake_objs[fake_nobjs].val, sizeof(fake_objs[0].val), "%s", val);
    fake_nobjs++;
    return 0;
}

const char *fake_obj_get(const char *key)
{
    for (int i = 0; i < fake_nobjs; i++)
        if (strcmp(fake_objs[i].key, key) == 0)
            return fake_objs[i].val;
    return NULL;
}

int fake_obj_count_prefix(const char *prefix)
{
    int n = 0;
    for (int i = 0; i < fake_nobjs; i++)
        if (strncmp(fake_objs[i].key, prefix, strlen(prefix)) == 0)
            n++;
    return n;
}

static int fo_open(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    KEG_UNUSED(o);
    KEG_UNUSED(conf);
    return 0;
}

static void fo_close(struct keg_obj *o)
{
    KEG_UNUSED(o);
}

static ssize_t fo_get(struct keg_obj *o, const char *key, uint64_t off, void *buf, size_t len)
{
    KEG_UNUSED(o);
    const char *v = fake_obj_get(key);
    if (!v)
        return -ENOENT;
    size_t n = strlen(v);
    if (off >= n)
        return 0;
    n = KEG_MIN(n - off, len);
    memcpy(buf, v + off, n);
    return (ssize_t)n;
}

static int fo_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    char tmp[160];
    KEG_UNUSED(o);
    snprintf(tmp, sizeof(tmp), "%.*s", (int)KEG_MIN(len, sizeof(tmp) - 1), (const char *)buf);
    return fake_obj_put(key, tmp);
}

static int fo_del(struct keg_obj *o, const char *key)
{
    KEG_UNUSED(o);
    for (int i = 0; i < fake_nobjs; i++) {
        if (strcmp(fake_objs[i].key, key) == 0) {
            fake_objs[i] = fake_objs[--fake_nobjs];
            break;
        }
    }
    return 0;
}

static int fo_list(struct keg_obj *o, const char *prefix, keg_obj_list_cb *cb, void *arg)
{
    KEG_UNUSED(o);
    for (int i = 0; i < fake_nobjs; i++) {
        if (strncmp(fake_objs[i].key, prefix, strlen(prefix)) == 0) {
            int rc = cb(arg, fake_objs[i].key, strlen(fake_objs[i].val));
            if (rc)
                return rc;
        }
    }
    return 0;
}

static const struct keg_obj_ops fake_obj_ops = {
    .name = "csifake",
    .version = 1,
    .caps = KEG_OBJ_CAP_LIST,
    .priv_size = 0,
    .open = fo_open,
    .close = fo_close,
    .get = fo_get,
    .put = fo_put,
    .del = fo_del,
    .list = fo_list,
};

int fake_open_store(const struct keg_format *f, const char *access_key, const char *secret_key,
                    struct keg_obj **out)
{
    KEG_UNUSED(f);
    KEG_UNUSED(access_key);
    KEG_UNUSED(secret_key);
    *out = NULL;
    if (fake_store_fail)
        return fake_store_fail;
    if (!keg_obj_find("csifake"))
        keg_obj_register(&fake_obj_ops);
    return keg_obj_open("csifake", NULL, NULL, out);
}

/*----------------------------------------------------------------------------
 * Mount manager
 *--------------------------------------------------------------------------*/

static struct fake_mm_call fake_calls[256];
static int fake_ncalls;
int fake_mm_start_rc;
char fake_mm_metrics_dir[64];
int fake_mm_reconcile_fails;
int fake_mm_reconcile_calls;
static struct {
    char target[256];
    int  rc;
} fake_targets[FAKE_MAX];
static int fake_ntargets;
static pid_t fake_next_pid = 1000;

void fake_mm_reset(void)
{
    fake_ncalls = 0;
    fake_ntargets = 0;
    fake_mm_start_rc = 0;
    fake_mm_metrics_dir[0] = '\0';
    fake_mm_check_hook = NULL;
    fake_mm_reconcile_fails = 0;
    fake_mm_reconcile_calls = 0;
}

void fake_mm_set_state(const char *target, int check_rc)
{
    for (int i = 0; i < fake_ntargets; i++) {
        if (strcmp(fake_targets[i].target, target) == 0) {
            fake_targets[i].rc = check_rc;
            return;
        }
    }
    if (fake_ntargets < FAKE_MAX) {
        snprintf(fake_targets[fake_ntargets].target, 256, "%s", target);
        fake_targets[fake_ntargets++].rc = check_rc;
    }
}

static void fake_record(const char *op, const char *target, const struct csi_mount_req *req,
                        pid_t pid)
{
    if (fake_ncalls == 256)
        return;
    struct fake_mm_call *c = &fake_calls[fake_ncalls++];
    memset(c, 0, sizeof(*c));
    snprintf(c->op, sizeof(c->op), "%s", op);
    snprintf(c->target, sizeof(c->target), "%s", target);
    if (req) {
        snprintf(c->config, sizeof(c->config), "%s", req->config);
        snprintf(c->options, sizeof(c->options), "%s", req->options ? req->options : "");
        c->readonly = req->readonly;
        c->metrics = req->metrics;
    }
    c->pid = pid;
}

int fake_mm_ncalls(const char *op)
{
    int n = 0;
    for (int i = 0; i < fake_ncalls; i++)
        if (strcmp(fake_calls[i].op, op) == 0)
            n++;
    return n;
}

const struct fake_mm_call *fake_mm_last(const char *op)
{
    for (int i = fake_ncalls - 1; i >= 0; i--)
        if (strcmp(fake_calls[i].op, op) == 0)
            return &fake_calls[i];
    return NULL;
}

static int fmm_start(struct csi_mount_mgr *mm, const struct csi_mount_req *req,
                     struct csi_mount_res *res, char *err, size_t errlen)
{
    KEG_UNUSED(mm);
    memset(res, 0, sizeof(*res));
    if (fake_mm_start_rc) {
        snprintf(err, errlen, "fake mounter failed");
        fake_record("start", req->target, req, 0);
        return fake_mm_start_rc;
    }
    res->pid = fake_next_pid++;
    if (req->metrics)
        snprintf(res->metrics, sizeof(res->metrics), "%s/%d.sock",
                 fake_mm_metrics_dir[0] ? fake_mm_metrics_dir : "/fake/metrics",
                 (int)res->pid);
    fake_record("start", req->target, req, res->pid);
    fake_mm_set_state(req->target, 0);
    return 0;
}

static int fmm_stop(struct csi_mount_mgr *mm, const char *target, pid_t pid)
{
    KEG_UNUSED(mm);
    fake_record("stop", target, NULL, pid);
    fake_mm_set_state(target, -EINVAL);
    return 0;
}

void (*fake_mm_check_hook)(const char *target);

static int fmm_check(struct csi_mount_mgr *mm, const char *target)
{
    KEG_UNUSED(mm);
    if (fake_mm_check_hook)
        fake_mm_check_hook(target);
    for (int i = 0; i < fake_ntargets; i++)
        if (strcmp(fake_targets[i].target, target) == 0)
            return fake_targets[i].rc;
    return -EINVAL;
}

static int fmm_detach(struct csi_mount_mgr *mm, const char *target)
{
    KEG_UNUSED(mm);
    fake_record("detach", target, NULL, 0);
    fake_mm_set_state(target, -EINVAL);
    return 0;
}

/* called from the watchdog thread: counted atomically, not in fake_calls */
static int fmm_reconcile(struct csi_mount_mgr *mm, struct csi_state *state)
{
    KEG_UNUSED(mm);
    KEG_UNUSED(state);
    int n = __atomic_add_fetch(&fake_mm_reconcile_calls, 1, __ATOMIC_SEQ_CST);
    return n <= __atomic_load_n(&fake_mm_reconcile_fails, __ATOMIC_SEQ_CST) ? -ECONNREFUSED : 0;
}

/* alive: what check() would answer is 0 (the fake's mounters live while mounted) */
static int fmm_alive(struct csi_mount_mgr *mm, const struct csi_publish *recs, size_t n,
                     unsigned timeout_ms, unsigned char *alive)
{
    KEG_UNUSED(timeout_ms);
    for (size_t i = 0; i < n; i++) {
        alive[i] = 0;
        for (int t = 0; t < fake_ntargets; t++)
            if (strcmp(fake_targets[t].target, recs[i].target) == 0)
                alive[i] = fake_targets[t].rc == 0;
    }
    KEG_UNUSED(mm);
    return 0;
}

static void fmm_destroy(struct csi_mount_mgr *mm)
{
    keg_free(mm);
}

static const struct csi_mount_mgr_ops fake_mm_ops = {
    .name = "fake",
    .start = fmm_start,
    .stop = fmm_stop,
    .check = fmm_check,
    .detach = fmm_detach,
    .reap = NULL,
    .reconcile = fmm_reconcile,
    .alive = fmm_alive,
    .destroy = fmm_destroy,
};

struct csi_mount_mgr *fake_mm_create(void)
{
    struct csi_mount_mgr *mm = keg_calloc(1, sizeof(*mm));
    if (mm)
        mm->ops = &fake_mm_ops;
    return mm;
}
