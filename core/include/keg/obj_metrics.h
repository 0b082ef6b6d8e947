/* obj_metrics.h -- what the "metrics" layer (core/obj/obj_metrics.c) counted of the
 * requests that reached the object store. */
#ifndef KEG_OBJ_METRICS_H
#define KEG_OBJ_METRICS_H

#include <stdint.h>

#include "keg/metrics.h"
#include "keg/obj.h"

enum keg_obj_verb {
    KEG_OBJ_VERB_GET, KEG_OBJ_VERB_PUT, KEG_OBJ_VERB_DEL, KEG_OBJ_VERB_HEAD, KEG_OBJ_VERB_LIST,
    KEG_OBJ_VERB_N,
};

struct keg_obj_verb_stats {
    uint64_t requests;                 /* calls that returned (atomic) */
    uint64_t errors;                   /* calls that failed, -ENOENT aside (atomic) */
    uint64_t bytes;                    /* payload bytes of successful gets / puts (atomic) */
    uint64_t retries;                  /* repeats of those calls inside the store after a
                                        * transient failure (atomic) */
    struct keg_metrics_hist latency;
};

extern const struct keg_obj_ops keg_obj_metrics_ops;

/* The KEG_OBJ_VERB_N counters of the metrics layer at or below top, or NULL if the
 * stack has none.  BORROWS: top; the array lives as long as the stack. */
const struct keg_obj_verb_stats *keg_obj_metrics_stats(struct keg_obj *top);

#endif
