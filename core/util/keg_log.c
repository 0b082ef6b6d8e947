/* keg_log.c -- the log sink: level check, stderr or an installed sink, optional file. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "keg/log.h"

int keg_log_level = LOG_INFO;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static keg_log_fn *sink_fn;          /* protected by log_lock */
static void *sink_arg;               /* protected by log_lock */
static FILE *log_file;               /* protected by log_lock */

static const char *level_name(int level)
{
    switch (level) {
    case LOG_EMERG: case LOG_ALERT: case LOG_CRIT: return "FATAL";
    case LOG_ERR: return "ERROR";
    case LOG_WARNING: return "WARN";
    case LOG_NOTICE: case LOG_INFO: return "INFO";
    default: return "DEBUG";
    }
}

void keg_log_set_level(int level)
{
    keg_log_level = level;
}

void keg_log_set_sink(keg_log_fn *fn, void *arg)
{
    pthread_mutex_lock(&log_lock);
    sink_fn = fn;
    sink_arg = arg;
    pthread_mutex_unlock(&log_lock);
}

int keg_log_set_file(const char *path)
{
    FILE *f = NULL;
    if (path) {
        f = fopen(path, "ae");
        if (!f)
            return -errno;
        setvbuf(f, NULL, _IOLBF, 0);
    }
    pthread_mutex_lock(&log_lock);
    if (log_file)
        fclose(log_file);
    log_file = f;
    pthread_mutex_unlock(&log_lock);
    return 0;
}

static void write_line(FILE *out, int level, const char *tag, const char *fmt, va_list ap)
{
    struct timeval tv;
    struct tm tm;
    char ts[32];
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
    fprintf(out, "%s.%06ld kegfs[%d] %s [%s] ", ts, (long)tv.tv_usec, (int)getpid(),
            level_name(level), tag);
    char msg[4096];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    keg_log_fputs_escaped(out, msg);
    fputc('\n', out);
}

void keg_log_fputs_escaped(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
}

void keg_log_vmsg(int level, const char *tag, const char *fmt, va_list ap)
{
    int saved = errno;
    pthread_mutex_lock(&log_lock);
    if (sink_fn) {
        va_list cp;
        va_copy(cp, ap);
        sink_fn(sink_arg, level, tag, fmt, cp);
        va_end(cp);
    } else {
        va_list cp;
        va_copy(cp, ap);
        write_line(stderr, level, tag, fmt, cp);
        va_end(cp);
    }
    if (log_file) {
        va_list cp;
        va_copy(cp, ap);
        write_line(log_file, level, tag, fmt, cp);
        va_end(cp);
    }
    pthread_mutex_unlock(&log_lock);
    errno = saved;
}

void keg_log_msg(int level, const char *tag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    keg_log_vmsg(level, tag, fmt, ap);
    va_end(ap);
}
