/* reqlog.c -- the one log line per CSI request, with secrets stripped.
 *
 * DESIGN
 * Rather than printing a request and blanking what looks secret (a blacklist
 * that a new field could slip past), the line is built from a whitelist of
 * scalar string fields looked up by name in the message descriptor: name,
 * volume_id, target_path, volume_path.  Maps (secrets, volume_context,
 * parameters) and mount flags are never printed.  Status messages are written
 * by the handlers without secrets (URLs go through keg_url_redact()).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "csi_i.h"
#define KEG_LOG_TAG "csi"
#include "keg/log.h"

static const char *reqlog_field(const ProtobufCMessage *m, const char *name)
{
    if (!m)
        return NULL;
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
    if (!fd || fd->type != PROTOBUF_C_TYPE_STRING || fd->label == PROTOBUF_C_LABEL_REPEATED)
        return NULL;
    const char *const *p = (const char *const *)((const char *)m + fd->offset);
    return (*p && **p) ? *p : NULL;
}

char *csi_format_request(char *buf, size_t len, const char *method, const ProtobufCMessage *req,
                         int64_t dur_us, const struct csi_status *st)
{
    static const char *const fields[] = { "name", "volume_id", "target_path", "volume_path" };
    static const char *const labels[] = { "name", "volume_id", "target", "target" };
    size_t o = 0;
    int n = snprintf(buf, len, "%s", method);
    o = n > 0 ? KEG_MIN((size_t)n, len - 1) : 0;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        const char *v = reqlog_field(req, fields[i]);
        if (!v || o >= len - 1)
            continue;
        n = snprintf(buf + o, len - o, " %s=%.256s", labels[i], v);
        o = n > 0 ? KEG_MIN(o + (size_t)n, len - 1) : o;
    }
    if (o < len - 1) {
        n = snprintf(buf + o, len - o, " duration=%" PRId64 ".%03" PRId64 "ms status=%s",
                     dur_us / 1000, dur_us % 1000, csi_code_name(st->code));
        o = n > 0 ? KEG_MIN(o + (size_t)n, len - 1) : o;
    }
    if (st->code != CSI_OK && st->msg[0] && o < len - 1)
        snprintf(buf + o, len - o, " error=\"%s\"", st->msg);
    return buf;
}

void csi_log_request(const char *method, const ProtobufCMessage *req, int64_t dur_us,
                     const struct csi_status *st)
{
    char line[1024];
    /* Probe and the capability queries are frequent: debug level (host-path logGRPC). */
    int quiet = strstr(method, "/Probe") || strstr(method, "Capabilities") ||
                strstr(method, "GetPluginInfo") || strstr(method, "NodeGetVolumeStats");
    int level = st->code != CSI_OK ? LOG_WARNING : (quiet ? LOG_DEBUG : LOG_INFO);
    if (level > keg_log_level)
        return;
    csi_format_request(line, sizeof(line), method, req, dur_us, st);
    keg_log_msg(level, KEG_LOG_TAG, "%s", line);
}
