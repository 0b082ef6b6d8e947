/* uuid.h -- random (version 4) UUIDs. */
#ifndef KEG_UUID_H
#define KEG_UUID_H

#define KEG_UUID_STR_LEN 37   /* 36 characters and a NUL */

/* A fresh random UUID, "xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx" in
 * lowercase hex, from getrandom(2) (from the clock and pid should that fail). */
void keg_uuid_v4(char out[KEG_UUID_STR_LEN]);

#endif
