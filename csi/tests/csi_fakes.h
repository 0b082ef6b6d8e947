/* csi_fakes.h -- fakes for the kegfs-csi handler tests: a metadata engine
 * ("csifake://"), an object store and a mount manager that record calls.  The fake
 * mounters are alive (alive()) while check() says their target is mounted. */
#ifndef KEG_CSI_FAKES_H
#define KEG_CSI_FAKES_H

#include <sys/types.h>

#include "csi_i.h"
#include "keg/meta.h"
#include "keg/obj.h"
#include "mount_mgr.h"

/* --- metadata engine: scheme "csifake", namespaces keyed by the whole URL.
 * A URL containing "unreachable" fails to open with -ECONNREFUSED. */
void fake_meta_reset(void);
/* 1 and *f if url is formatted. */
int  fake_meta_get(const char *url, struct keg_format *f);
int  fake_meta_count(void);
extern int fake_meta_destroys;

/* --- object store: one global key space. */
void fake_obj_reset(void);
int  fake_obj_count_prefix(const char *prefix);
int  fake_obj_put(const char *key, const char *val);
const char *fake_obj_get(const char *key);
csi_open_store_fn fake_open_store;
extern int fake_store_fail;           /* open_store returns this when non-zero */

/* --- mount manager */
struct fake_mm_call {
    char op[8];                        /* "start", "stop", "detach" */
    char target[256];
    char config[512];
    char options[256];
    int  readonly;
    int  metrics;                      /* the request asked for a metrics socket */
    pid_t pid;
};
struct csi_mount_mgr *fake_mm_create(void);
void fake_mm_reset(void);
int  fake_mm_ncalls(const char *op);
const struct fake_mm_call *fake_mm_last(const char *op);
/* What check() answers for target (default after start: 0; else -EINVAL). */
void fake_mm_set_state(const char *target, int check_rc);
extern int fake_mm_start_rc;           /* start() result (0) */
/* Where start() puts the metrics sockets it names ("<dir>/<pid>.sock") when the
 * request asks for one; "" (the default): "/fake/metrics". */
extern char fake_mm_metrics_dir[64];
/* Called by check() before it answers, when set (e.g. to hold the watchdog in
 * a check while the test calls an RPC from another thread). */
extern void (*fake_mm_check_hook)(const char *target);
extern int fake_mm_reconcile_fails;    /* reconcile()'s first N calls answer -ECONNREFUSED */
extern int fake_mm_reconcile_calls;    /* reconcile() calls so far (atomic) */

#endif
