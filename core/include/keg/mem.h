/* mem.h -- allocation wrappers.  All KegFS allocations go through these so that
 * tests can fail the Nth allocation (env KEG_ALLOC_FAIL_AT=N, or keg_mem_fail_at()). */
#ifndef KEG_MEM_H
#define KEG_MEM_H

#include <stddef.h>

void *keg_malloc(size_t n);
void *keg_calloc(size_t nmemb, size_t size);
void *keg_realloc(void *p, size_t n);
/* n bytes aligned to align (a power of two, a multiple of sizeof(void *)); keg_free frees it. */
void *keg_malloc_aligned(size_t align, size_t n);
char *keg_strdup(const char *s);
char *keg_strndup(const char *s, size_t n);
void  keg_free(void *p);
/* Make the Nth allocation from now fail (0 disables).  For tests. */
void  keg_mem_fail_at(long n);
/* printf into a new string.  OWNERSHIP: caller frees with keg_free().  NULL on ENOMEM. */
char *keg_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
