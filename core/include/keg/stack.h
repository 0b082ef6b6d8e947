/* stack.h -- assembles the object-store stack of a volume in one place.
 *
 *   [faulty (tests, KEG_FAULTY env)] -> file | s3 | mem
 *
 * Later layers (memory cache, SSD cache, writeback) are inserted here too.
 */
#ifndef KEG_STACK_H
#define KEG_STACK_H

#include "keg/meta.h"
#include "keg/obj.h"

struct keg_stack_conf {
    const char *access_key;       /* overrides of the stored credentials, or NULL */
    const char *secret_key;
    const char *session_token;
};

/* Open the stack for volume f.  Unwinds everything on failure.
 * KEG_FAULTY="seed=N,err=P,corrupt=P,delay=MS" (tests) wraps the bottom store.
 * OWNERSHIP: caller closes with keg_obj_close().  Returns 0 or -errno. */
int keg_stack_open(const struct keg_format *f, const struct keg_stack_conf *sc,
                   struct keg_obj **out);

#endif
