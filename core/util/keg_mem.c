/* keg_mem.c -- the only place that calls malloc/free directly.
 *
 * Allocation-failure testing: KEG_ALLOC_FAIL_AT=N (env, read once) or
 * keg_mem_fail_at(N) makes the Nth allocation from then on return NULL. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keg/mem.h"

static atomic_long fail_countdown = -1;   /* -1: not armed; read env lazily */
static atomic_int  env_read;

static int should_fail(void)
{
    /* a plain load first: an exchange on every allocation would move this
     * cache line between the CPUs of every allocating thread */
    if (!atomic_load_explicit(&env_read, memory_order_acquire) && !atomic_exchange(&env_read, 1)) {
        const char *e = getenv("KEG_ALLOC_FAIL_AT");
        if (e && *e)
            atomic_store(&fail_countdown, strtol(e, NULL, 10));
    }
    long v = atomic_load(&fail_countdown);
    if (v <= 0)
        return 0;
    return atomic_fetch_sub(&fail_countdown, 1) == 1;
}

void keg_mem_fail_at(long n)
{
    atomic_store(&env_read, 1);
    atomic_store(&fail_countdown, n > 0 ? n : -1);
}

void *keg_malloc(size_t n)
{
    if (should_fail())
        return NULL;
    return malloc(n ? n : 1);
}

void *keg_calloc(size_t nmemb, size_t size)
{
    if (should_fail())
        return NULL;
    return calloc(nmemb ? nmemb : 1, size ? size : 1);
}

void *keg_realloc(void *p, size_t n)
{
    if (should_fail())
        return NULL;
    return realloc(p, n ? n : 1);
}

char *keg_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = keg_malloc(len + 1);
    if (!p)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *keg_strdup(const char *s)
{
    return keg_strndup(s, strlen(s));
}

void *keg_malloc_aligned(size_t align, size_t n)
{
    void *p = NULL;

    if (should_fail() || posix_memalign(&p, align, n ? n : 1) != 0)
        return NULL;
    return p;
}

void keg_free(void *p)
{
    free(p);
}

char *keg_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *p = keg_malloc((size_t)n + 1);
    if (!p)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}
