/* retry.h -- sleeping, exponential backoff and jitter for retry loops.
 *
 * These are the pieces only: how often and how long a layer retries is
 * that layer's policy (docs/durability.md). */
#ifndef KEG_RETRY_H
#define KEG_RETRY_H

#include <stdint.h>

/* Sleep ns nanoseconds (ms milliseconds); a signal does not cut it short.
 * ns <= 0 returns at once. */
void keg_sleep_ns(int64_t ns);
void keg_sleep_ms(uint64_t ms);

/* min(cap_ms, base_ms * 2^attempt), without overflow. */
uint64_t keg_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms);

/* A pseudo-random number from a per-thread generator seeded from the clock:
 * for jitter only, never for anything that must be unpredictable. */
uint64_t keg_rand64(void);

#endif
