/* meta_redis_i.h -- Redis engine extras that are not part of the keg_meta_ops
 * vtable (used by tools and tests through core/meta/). */
#ifndef KEG_META_REDIS_I_H
#define KEG_META_REDIS_I_H

#include <stddef.h>

#include "keg/meta.h"

extern const struct keg_meta_ops keg_meta_redis_ops;

/* Writes the server's maxmemory-policy (e.g. "noeviction") into buf (always
 * NUL-terminated).  m must be an open Redis engine instance.
 * Returns 1 if it is "noeviction", 0 if it is another policy, or -errno
 * (-ENOTSUP when the server hides both CONFIG and INFO). */
int keg_meta_redis_policy(struct keg_meta *m, char *buf, size_t len);

#endif
