/* crc32c_i.h -- private: the two CRC32C implementations behind keg_crc32c(),
 * exposed so that tests can check that they agree. */
#ifndef KEG_CRC32C_I_H
#define KEG_CRC32C_I_H

#include <stddef.h>
#include <stdint.h>

/* Portable slicing-by-8. */
uint32_t keg_crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* 1 if this CPU has the SSE4.2 crc32 instruction (keg_crc32c_hw is usable). */
int keg_crc32c_hw_available(void);
/* SSE4.2 crc32 instruction; only call when keg_crc32c_hw_available(). */
uint32_t keg_crc32c_hw(uint32_t crc, const void *buf, size_t len);

#endif
