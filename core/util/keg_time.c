/* keg_time.c -- clocks, panic and caller-context helpers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "keg/keg.h"
#include "keg/log.h"

int64_t keg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t keg_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void keg_panic(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kegfs: PANIC at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

int keg_ctx_in_group(const struct keg_ctx *ctx, uint32_t gid)
{
    if (ctx->uid == 0 || ctx->gid == gid)
        return 1;
    for (uint32_t i = 0; i < ctx->ngroups && i < KEG_CTX_MAX_GROUPS; i++)
        if (ctx->groups[i] == gid)
            return 1;
    return 0;
}
