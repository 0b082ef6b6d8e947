/* keg_mountinfo.c -- find the mount at a path in /proc/self/mountinfo. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keg/mountinfo.h"

/* Undo the octal escapes (\040 for a space) of /proc/self/mountinfo in place. */
static void mountinfo_unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

int keg_mountinfo_find(const char *abs, char *fstype, size_t fstype_size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char *line = NULL;
    size_t cap = 0;
    int found = 0;
    if (!f)
        return -errno;
    if (fstype && fstype_size)
        fstype[0] = '\0';
    while (getline(&line, &cap, f) > 0) {
        /* id parent maj:min root mountpoint options [optional...] - fstype source super */
        char *save = NULL;
        char *fld[5] = {0};
        char *tok = strtok_r(line, " ", &save);
        for (int i = 0; i < 5 && tok; i++) {
            fld[i] = tok;
            tok = i < 4 ? strtok_r(NULL, " ", &save) : tok;
        }
        if (!fld[4])
            continue;
        mountinfo_unescape(fld[4]);
        if (strcmp(fld[4], abs) != 0)
            continue;
        found = 1;   /* keep going: the last matching line is the top mount */
        if (fstype && fstype_size) {
            char *rest = save ? strstr(save, " - ") : NULL;
            if (rest) {
                rest += 3;
                size_t n = strcspn(rest, " ");
                if (n >= fstype_size)
                    n = fstype_size - 1;
                memcpy(fstype, rest, n);
                fstype[n] = '\0';
            }
        }
    }
    free(line);     /* checksrc: ok -- getline's buffer */
    fclose(f);
    return found;
}
