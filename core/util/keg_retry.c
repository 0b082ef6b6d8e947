/* keg_retry.c -- sleeping, backoff and jitter (keg/retry.h). */
#include <errno.h>
#include <time.h>

#include "keg/keg.h"
#include "keg/retry.h"

void keg_sleep_ns(int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void keg_sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

uint64_t keg_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms)
{
    if (attempt < 64 && base_ms <= (cap_ms >> attempt))
        return base_ms << attempt;
    return cap_ms;
}

/* splitmix64 on a per-thread state. */
uint64_t keg_rand64(void)
{
    static _Thread_local uint64_t st;
    if (!st)
        st = (uint64_t)keg_mono_ns() ^ ((uint64_t)(uintptr_t)&st << 17);
    uint64_t z = (st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
