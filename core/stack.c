/* stack.c -- assembles the object-store stack of a volume, in this one place.
 *
 * DESIGN
 * Today the stack is
 *     [faulty]  ->  file | s3 | mem
 * where the faulty layer is added only when the environment variable
 * KEG_FAULTY="seed=N,err=P,corrupt=P,delay=MS" is set (tests; every field
 * optional).  The memory cache, SSD cache and writeback layers will be
 * inserted here.  Each keg_obj_open() TAKES the layer below, so a failure
 * at any level has already closed everything beneath it: unwinding is free.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define KEG_LOG_TAG "stack"
#include "keg/log.h"
#include "keg/stack.h"

/* NULL for an empty string: the format stores "not set" as "". */
static const char *stack_str(const char *s)
{
    return s && *s ? s : NULL;
}

/* Parses KEG_FAULTY into conf.  Returns 0 or -EINVAL (message logged). */
static int stack_parse_faulty(const char *spec, struct keg_obj_conf *conf)
{
    const char *p = spec;

    while (*p) {
        const char *eq = strchr(p, '=');
        const char *end = strchr(p, ',');
        char *stop = NULL;
        size_t klen;

        if (!end)
            end = p + strlen(p);
        if (!eq || eq > end)
            goto bad;
        klen = (size_t)(eq - p);
        errno = 0;
        if (klen == 4 && strncmp(p, "seed", 4) == 0) {
            conf->seed = strtoull(eq + 1, &stop, 0);
        } else if (klen == 3 && strncmp(p, "err", 3) == 0) {
            conf->err_prob = strtod(eq + 1, &stop);
            if (conf->err_prob < 0 || conf->err_prob > 1)
                goto bad;
        } else if (klen == 7 && strncmp(p, "corrupt", 7) == 0) {
            conf->corrupt_prob = strtod(eq + 1, &stop);
            if (conf->corrupt_prob < 0 || conf->corrupt_prob > 1)
                goto bad;
        } else if (klen == 5 && strncmp(p, "delay", 5) == 0) {
            unsigned long v = strtoul(eq + 1, &stop, 10);
            if (v > 600000)
                goto bad;
            conf->delay_ms = (unsigned)v;
        } else {
            goto bad;
        }
        if (errno || stop == eq + 1 || stop != end)
            goto bad;
        p = *end ? end + 1 : end;
    }
    return 0;
bad:
    KEG_ERR("KEG_FAULTY=\"%s\" is invalid: expected seed=N,err=P,corrupt=P,delay=MS "
            "(probabilities in [0,1])", spec);
    return -EINVAL;
}

/* OWNERSHIP: caller closes *out with keg_obj_close().  BORROWS: f, sc.
 * Returns 0 or -errno: -EINVAL (unknown storage, bad KEG_FAULTY), -ENOTSUP
 * (storage not compiled in), or what the store's open returns. */
int keg_stack_open(const struct keg_format *f, const struct keg_stack_conf *sc,
                   struct keg_obj **out)
{
    struct keg_obj_conf conf = {0};
    struct keg_obj_conf fconf = {0};
    struct keg_obj *bottom = NULL, *top = NULL;
    const char *faulty = getenv("KEG_FAULTY");
    const char *storage = f->storage;
    int rc;

    *out = NULL;
    if (strcmp(storage, "file") != 0 && strcmp(storage, "s3") != 0 &&
        strcmp(storage, "mem") != 0) {
        KEG_ERR("volume %s: unknown storage \"%s\" (expected file, s3 or mem)", f->name, storage);
        return -EINVAL;
    }
    if (!keg_obj_find(storage)) {
        KEG_ERR("volume %s: storage \"%s\" is not compiled into this build", f->name, storage);
        return -ENOTSUP;
    }
    if (faulty && *faulty) {
        rc = stack_parse_faulty(faulty, &fconf);
        if (rc < 0)
            return rc;
    }

    conf.bucket = f->bucket;
    conf.access_key = stack_str(sc ? sc->access_key : NULL);
    conf.secret_key = stack_str(sc ? sc->secret_key : NULL);
    conf.session_token = stack_str(sc ? sc->session_token : NULL);
    if (!conf.access_key)
        conf.access_key = stack_str(f->access_key);
    if (!conf.secret_key)
        conf.secret_key = stack_str(f->secret_key);
    if (!conf.session_token)
        conf.session_token = stack_str(f->session_token);
    conf.region = stack_str(f->region);

    rc = keg_obj_open(storage, &conf, NULL, &bottom);
    if (rc < 0) {
        KEG_ERR("volume %s: cannot open %s storage: %s", f->name, storage, strerror(-rc));
        return rc;
    }
    top = bottom;
    if (faulty && *faulty) {
        rc = keg_obj_open("faulty", &fconf, top, &top);   /* TAKES top */
        if (rc < 0)
            return rc;
    }
    *out = top;
    return 0;
}
