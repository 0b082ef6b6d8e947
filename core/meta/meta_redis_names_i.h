/* meta_redis_names_i.h -- the Redis engine's cache of directory names
 * (meta_redis_names.c), which answers lookups of names that do not exist
 * without a round trip.  Internal to the Redis engine and its tests. */
#ifndef KEG_META_REDIS_NAMES_I_H
#define KEG_META_REDIS_NAMES_I_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "keg/meta.h"

#define MR_NAMES_DEFAULT  100000    /* names cached at most (dircache=), all directories */
#define MR_NAMES_DIR_MAX  10000     /* a directory with more names is not cached */

struct mr_names;

/* Dials a connection to the volume's current master (as the pool does);
 * *gen = the address generation of the address it dialled.
 * Returns 0 or -errno with *why set. */
typedef int mr_names_dial_fn(void *arg, redisContext **out, uint64_t *gen, char *why,
                             size_t whylen);

/* Starts the subscriber thread for channel (e.g. "{NS}n").  cap: names cached
 * at most.  addr_gen: bumped by the engine whenever the server's address changes
 * (read atomically).  OWNERSHIP: free with mr_names_free().  NULL: out of memory
 * or no thread. */
struct mr_names *mr_names_new(size_t cap, const char *channel, mr_names_dial_fn *dial,
                              void *arg, const uint64_t *addr_gen);
void mr_names_free(struct mr_names *nc);

/* Before a lookup of name in dir: 1 when name is certainly not there (answer
 * ENOENT).  Else 0, and *want is the number of names the lookup script may
 * send back with a "no such name" answer (0: send none), with a *ticket for
 * mr_names_fill_end (0: none). */
int mr_names_lookup(struct mr_names *nc, uint64_t dir, const char *name, uint64_t *ticket,
                    uint32_t *want);

/* After that round trip: names is the array of the directory's names the
 * script sent, or NULL (none sent, or the call failed). */
void mr_names_fill_end(struct mr_names *nc, uint64_t dir, uint64_t ticket,
                       const redisReply *names);

/* Before this mounter adds name to dir (mknod, link, rename): keeps the
 * cached set a superset while the reply and the announcement are under way. */
void mr_names_add(struct mr_names *nc, uint64_t dir, const char *name);

/* The counters behind `kegfs stats` (the name_cache_stats op). */
void mr_names_get_stats(struct mr_names *nc, struct keg_meta_name_cache *st);

#endif
