/* identity.c -- the CSI Identity service: plugin info, capabilities, probe. */
#include <string.h>

#include "csi_i.h"

int csi_identity_get_plugin_info(struct csi_ctx *ctx, const Csi__V1__GetPluginInfoRequest *req,
                                 Csi__V1__GetPluginInfoResponse *out, struct csi_status *st)
{
    KEG_UNUSED(req);
    out->name = csi_strdup(st, ctx->driver_name);
    out->vendor_version = csi_strdup(st, KEG_VERSION);
    if (!out->name || !out->vendor_version)
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    return 0;
}

int csi_identity_get_plugin_capabilities(struct csi_ctx *ctx,
                                         const Csi__V1__GetPluginCapabilitiesRequest *req,
                                         Csi__V1__GetPluginCapabilitiesResponse *out,
                                         struct csi_status *st)
{
    KEG_UNUSED(req);
    Csi__V1__PluginCapability **caps = csi_alloc(st, 2 * sizeof(*caps));
    Csi__V1__PluginCapability *svc = csi_alloc(st, sizeof(*svc));
    Csi__V1__PluginCapability *exp = csi_alloc(st, sizeof(*exp));
    Csi__V1__PluginCapability__Service *s = csi_alloc(st, sizeof(*s));
    Csi__V1__PluginCapability__VolumeExpansion *e = csi_alloc(st, sizeof(*e));
    if (!caps || !svc || !exp || !s || !e)
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    size_t n = 0;

    if (ctx->mode & CSI_MODE_CONTROLLER) {
        csi__v1__plugin_capability__init(svc);
        csi__v1__plugin_capability__service__init(s);
        s->type = CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE;
        svc->type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
        svc->service = s;
        caps[n++] = svc;
    }
    csi__v1__plugin_capability__init(exp);
    csi__v1__plugin_capability__volume_expansion__init(e);
    e->type = CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE;
    exp->type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION;
    exp->volume_expansion = e;
    caps[n++] = exp;

    out->capabilities = caps;
    out->n_capabilities = n;
    return 0;
}

int csi_identity_probe(struct csi_ctx *ctx, const Csi__V1__ProbeRequest *req,
                       Csi__V1__ProbeResponse *out, struct csi_status *st)
{
    KEG_UNUSED(req);
    Google__Protobuf__BoolValue *b = csi_alloc(st, sizeof(*b));
    if (!b)
        return csi_fail(st, CSI_INTERNAL, "out of memory");
    google__protobuf__bool_value__init(b);
    b->value = ctx->ready ? 1 : 0;
    out->ready = b;
    return 0;
}
