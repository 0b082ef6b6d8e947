/* hash.h -- FNV-1a, the one non-cryptographic hash of KegFS.
 *
 * Some of its values name things that outlive a process (CSI volume ids,
 * config and state files of the CSI node, the run-directory files of a
 * mount): the algorithm, offset basis and prime below must never change. */
#ifndef KEG_HASH_H
#define KEG_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KEG_FNV1A64_INIT  0xcbf29ce484222325ULL   /* offset basis */
#define KEG_FNV1A64_PRIME 0x100000001b3ULL
#define KEG_FNV1A32_INIT  2166136261u
#define KEG_FNV1A32_PRIME 16777619u

/* h continued over n bytes at p (start with KEG_FNV1A64_INIT). */
uint64_t keg_fnv1a64_update(uint64_t h, const void *p, size_t n);

/* FNV-1a 64 of n bytes at p, and of the bytes of string s (without its NUL). */
uint64_t keg_fnv1a64(const void *p, size_t n);
uint64_t keg_fnv1a64_str(const char *s);

/* keg_fnv1a64_str(s) as 16 lowercase hex digits and a NUL. */
void keg_fnv1a64_hex(const char *s, char out[17]);

/* FNV-1a 32 of the bytes of string s (NULL hashes as ""). */
uint32_t keg_fnv1a32_str(const char *s);

#endif
