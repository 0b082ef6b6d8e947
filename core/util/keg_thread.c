/* keg_thread.c -- names for the threads a process starts. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

#include "keg/keg.h"

void keg_thread_name(const char *name)
{
    char comm[16];              /* the kernel keeps 15 bytes and the NUL */
    snprintf(comm, sizeof(comm), "%s", name);
    (void)pthread_setname_np(pthread_self(), comm);   /* a name only helps; never fatal */
}
