/* keg_hash.c -- FNV-1a (keg/hash.h). */
#include <stdio.h>
#include <string.h>

#include "keg/hash.h"

uint64_t keg_fnv1a64_update(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= KEG_FNV1A64_PRIME;
    }
    return h;
}

uint64_t keg_fnv1a64(const void *p, size_t n)
{
    return keg_fnv1a64_update(KEG_FNV1A64_INIT, p, n);
}

uint64_t keg_fnv1a64_str(const char *s)
{
    return keg_fnv1a64(s, strlen(s));
}

void keg_fnv1a64_hex(const char *s, char out[17])
{
    snprintf(out, 17, "%016llx", (unsigned long long)keg_fnv1a64_str(s));
}

uint32_t keg_fnv1a32_str(const char *s)
{
    uint32_t h = KEG_FNV1A32_INIT;
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++)
        h = (h ^ *p) * KEG_FNV1A32_PRIME;
    return h;
}
