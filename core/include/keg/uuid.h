/* uuid.h -- random (version 4) UUIDs. */
#ifndef KEG_UUID_H
#define KEG_UUID_H

#include <stdint.h>

#define KEG_UUID_STR_LEN 37   /* 36 characters and a NUL */

/* The 16 bytes b as "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lowercase hex). */
void keg_uuid_format(const uint8_t b[16], char out[KEG_UUID_STR_LEN]);

/* A fresh random UUID, "xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx" in
 * lowercase hex, from getrandom(2) (from the clock and pid should that fail). */
void keg_uuid_v4(char out[KEG_UUID_STR_LEN]);

#endif
