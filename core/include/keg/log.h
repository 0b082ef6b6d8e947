/* log.h -- the one log sink of KegFS.
 *
 * Every module logs through KEG_ERR/WARN/INFO/DEBUG with a component tag; the
 * level is checked before the message is formatted.  The sink is installable and
 * thread-safe; it writes to stderr by default.  Secrets never reach it: URLs go
 * through keg_url_redact() first.
 *
 * Usage in a .c file:
 *     #define KEG_LOG_TAG "obj_s3"
 *     #include "keg/log.h"
 *     KEG_ERR("GET %s: %s", key, msg);
 */
#ifndef KEG_LOG_H
#define KEG_LOG_H

#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>   /* LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */

#include "keg/keg.h"

typedef void keg_log_fn(void *arg, int level, const char *tag, const char *fmt, va_list ap);

extern int keg_log_level;               /* messages above this level are dropped */

void keg_log_set_level(int level);
/* Install a sink (NULL restores stderr).  The sink must be thread-safe. */
void keg_log_set_sink(keg_log_fn *fn, void *arg);
/* Also append log lines to this file (NULL: stop).  Returns 0 or -errno. */
int keg_log_set_file(const char *path);
/* Writes s to out with control bytes (< 0x20, 0x7f) as \xNN, so that a name
 * from the command line or the network cannot drive the terminal or forge a
 * log line.  Every log line goes through it. */
void keg_log_fputs_escaped(FILE *out, const char *s);
void keg_log_msg(int level, const char *tag, const char *fmt, ...) KEG_PRINTF(3, 4);
void keg_log_vmsg(int level, const char *tag, const char *fmt, va_list ap);

#ifndef KEG_LOG_TAG
#define KEG_LOG_TAG "keg"
#endif

#define KEG_LOG_AT(lvl, ...) \
    do { if ((lvl) <= keg_log_level) keg_log_msg((lvl), KEG_LOG_TAG, __VA_ARGS__); } while (0)
#define KEG_ERR(...)   KEG_LOG_AT(LOG_ERR, __VA_ARGS__)
#define KEG_WARN(...)  KEG_LOG_AT(LOG_WARNING, __VA_ARGS__)
#define KEG_INFO(...)  KEG_LOG_AT(LOG_INFO, __VA_ARGS__)
#define KEG_DEBUG(...) KEG_LOG_AT(LOG_DEBUG, __VA_ARGS__)
#ifdef KEG_TRACE_ENABLE
#define KEG_TRACE(...) KEG_LOG_AT(LOG_DEBUG, __VA_ARGS__)
#else
#define KEG_TRACE(...) ((void)0)
#endif

#endif
