/* keg_uuid.c -- random UUIDs (keg/uuid.h). */
#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <unistd.h>

#include "keg/keg.h"
#include "keg/uuid.h"

void keg_uuid_format(const uint8_t b[16], char out[KEG_UUID_STR_LEN])
{
    snprintf(out, KEG_UUID_STR_LEN,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

void keg_uuid_v4(char out[KEG_UUID_STR_LEN])
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        /* getrandom does not fail for 16 bytes after boot; fall back anyway */
        uint64_t t = (uint64_t)keg_now_ns() ^ (uint64_t)getpid();
        for (size_t i = 0; i < sizeof(b); i++)
            b[i] = (unsigned char)(t >> ((i % 8) * 8)) ^ (unsigned char)(i * 37);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    keg_uuid_format(b, out);
}
