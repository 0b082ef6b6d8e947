/* server.c -- the gRPC-core side of kegfs-csi: completion queue, worker
 * threads, per-call state machine, dispatch by method name, status mapping.
 *
 * DESIGN
 * One completion queue, served by a small pool of worker threads that each
 * loop on grpc_completion_queue_next() with a 200 ms deadline.  A fixed number
 * of "call slots" are kept requested from the server (grpc_server_request_call);
 * each slot walks this state machine, driven by the completion of its tag:
 *
 *   WAIT_CALL --(new call)--> WAIT_RECV --(message read; handler runs on this
 *       worker; reply sent)--> WAIT_SEND --(batch done)--> freed
 *
 * Every accepted call immediately requests a replacement slot, so up to
 * `nthreads` handlers run at once (NodePublishVolume may block for the mount).
 *   WAIT_CALL  tag completes with success=0 only at shutdown: the slot is freed.
 *   WAIT_RECV  batch 1 = RECV_MESSAGE.
 *   WAIT_SEND  batch 2 = SEND_INITIAL_METADATA + SEND_MESSAGE (if OK) +
 *              SEND_STATUS_FROM_SERVER + RECV_CLOSE_ON_SERVER.
 * The handlers never see a gRPC type: they get unpacked protobuf-c messages
 * and fill a struct csi_status (csi_i.h).  Unknown methods get UNIMPLEMENTED.
 *
 * Shutdown (SIGTERM/SIGINT, caught with sigtimedwait in the main thread):
 * grpc_server_shutdown_and_notify, cancel all calls, wait for the notify tag,
 * shut the queue down, workers drain it until GRPC_QUEUE_SHUTDOWN and exit.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "csi_i.h"
#include "keg/mem.h"
#define KEG_LOG_TAG "csi"
#include "keg/log.h"

/*----------------------------------------------------------------------------
 * Dispatch table
 *--------------------------------------------------------------------------*/

typedef int csi_generic_fn(struct csi_ctx *ctx, const ProtobufCMessage *req,
                           ProtobufCMessage *resp, struct csi_status *st);

#define CSI_ADAPT(fn, Req, Resp) \
    static int fn##_g(struct csi_ctx *c, const ProtobufCMessage *rq, ProtobufCMessage *rs, \
                      struct csi_status *st) \
    { \
        return fn(c, (const Csi__V1__##Req *)rq, (Csi__V1__##Resp *)rs, st); \
    }

CSI_ADAPT(csi_identity_get_plugin_info, GetPluginInfoRequest, GetPluginInfoResponse)
CSI_ADAPT(csi_identity_get_plugin_capabilities, GetPluginCapabilitiesRequest,
          GetPluginCapabilitiesResponse)
CSI_ADAPT(csi_identity_probe, ProbeRequest, ProbeResponse)
CSI_ADAPT(csi_controller_create_volume, CreateVolumeRequest, CreateVolumeResponse)
CSI_ADAPT(csi_controller_delete_volume, DeleteVolumeRequest, DeleteVolumeResponse)
CSI_ADAPT(csi_controller_validate_volume_capabilities, ValidateVolumeCapabilitiesRequest,
          ValidateVolumeCapabilitiesResponse)
CSI_ADAPT(csi_controller_get_capabilities, ControllerGetCapabilitiesRequest,
          ControllerGetCapabilitiesResponse)
CSI_ADAPT(csi_controller_expand_volume, ControllerExpandVolumeRequest,
          ControllerExpandVolumeResponse)
CSI_ADAPT(csi_node_publish_volume, NodePublishVolumeRequest, NodePublishVolumeResponse)
CSI_ADAPT(csi_node_unpublish_volume, NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse)
CSI_ADAPT(csi_node_get_volume_stats, NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse)
CSI_ADAPT(csi_node_get_capabilities, NodeGetCapabilitiesRequest, NodeGetCapabilitiesResponse)
CSI_ADAPT(csi_node_get_info, NodeGetInfoRequest, NodeGetInfoResponse)

struct csi_method {
    const char *name;                         /* "/csi.v1.Identity/Probe" */
    unsigned    mode;                         /* CSI_MODE_* that serve it (0: always) */
    const ProtobufCMessageDescriptor *req;
    const ProtobufCMessageDescriptor *resp;
    csi_generic_fn *fn;
};

#define M(svc, rpc, mode, Req, Resp, fn) \
    { "/csi.v1." svc "/" rpc, mode, &csi__v1__##Req##__descriptor, \
      &csi__v1__##Resp##__descriptor, fn##_g }

static const struct csi_method csi_methods[] = {
    M("Identity", "GetPluginInfo", 0, get_plugin_info_request, get_plugin_info_response,
      csi_identity_get_plugin_info),
    M("Identity", "GetPluginCapabilities", 0, get_plugin_capabilities_request,
      get_plugin_capabilities_response, csi_identity_get_plugin_capabilities),
    M("Identity", "Probe", 0, probe_request, probe_response, csi_identity_probe),
    M("Controller", "CreateVolume", CSI_MODE_CONTROLLER, create_volume_request,
      create_volume_response, csi_controller_create_volume),
    M("Controller", "DeleteVolume", CSI_MODE_CONTROLLER, delete_volume_request,
      delete_volume_response, csi_controller_delete_volume),
    M("Controller", "ValidateVolumeCapabilities", CSI_MODE_CONTROLLER,
      validate_volume_capabilities_request, validate_volume_capabilities_response,
      csi_controller_validate_volume_capabilities),
    M("Controller", "ControllerGetCapabilities", CSI_MODE_CONTROLLER,
      controller_get_capabilities_request, controller_get_capabilities_response,
      csi_controller_get_capabilities),
    M("Controller", "ControllerExpandVolume", CSI_MODE_CONTROLLER,
      controller_expand_volume_request, controller_expand_volume_response,
      csi_controller_expand_volume),
    M("Node", "NodePublishVolume", CSI_MODE_NODE, node_publish_volume_request,
      node_publish_volume_response, csi_node_publish_volume),
    M("Node", "NodeUnpublishVolume", CSI_MODE_NODE, node_unpublish_volume_request,
      node_unpublish_volume_response, csi_node_unpublish_volume),
    M("Node", "NodeGetVolumeStats", CSI_MODE_NODE, node_get_volume_stats_request,
      node_get_volume_stats_response, csi_node_get_volume_stats),
    M("Node", "NodeGetCapabilities", CSI_MODE_NODE, node_get_capabilities_request,
      node_get_capabilities_response, csi_node_get_capabilities),
    M("Node", "NodeGetInfo", CSI_MODE_NODE, node_get_info_request, node_get_info_response,
      csi_node_get_info),
};
#undef M

static const struct csi_method *srv_find_method(const grpc_slice *name)
{
    for (size_t i = 0; i < sizeof(csi_methods) / sizeof(csi_methods[0]); i++)
        if (grpc_slice_str_cmp(*name, csi_methods[i].name) == 0)
            return &csi_methods[i];
    return NULL;
}

/*----------------------------------------------------------------------------
 * Server and call state
 *--------------------------------------------------------------------------*/

enum srv_call_state { SRV_WAIT_CALL, SRV_WAIT_RECV, SRV_WAIT_SEND };

struct srv_call {
    enum srv_call_state state;
    grpc_call          *call;
    grpc_call_details   details;
    grpc_metadata_array req_md;
    grpc_byte_buffer   *recv_buf;      /* request bytes (batch 1) */
    grpc_byte_buffer   *send_buf;      /* reply bytes (batch 2) */
    grpc_slice          status_details;
    int                 has_details;
    int                 cancelled;     /* RECV_CLOSE_ON_SERVER */
};

struct srv {
    struct csi_ctx         *ctx;
    grpc_server            *server;
    grpc_completion_queue  *cq;
    int                     shutdown_tag;        /* its address is the notify tag */
    pthread_mutex_t         lock;
    pthread_cond_t          cond;
    int                     shutdown_seen;       /* protected by lock */
    volatile int            shutting_down;
};

static int64_t srv_now_us(void)
{
    return keg_mono_ns() / 1000;
}

static void srv_call_free(struct srv_call *c)
{
    if (c->call)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->req_md);
    if (c->recv_buf)
        grpc_byte_buffer_destroy(c->recv_buf);
    if (c->send_buf)
        grpc_byte_buffer_destroy(c->send_buf);
    if (c->has_details)
        grpc_slice_unref(c->status_details);
    keg_free(c);
}

/* Ask the server for one more incoming call.  Returns 0 or -1. */
static int srv_request_call(struct srv *s)
{
    struct srv_call *c = keg_calloc(1, sizeof(*c));
    if (!c)
        return -1;
    c->state = SRV_WAIT_CALL;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->req_md);
    grpc_call_error e = grpc_server_request_call(s->server, &c->call, &c->details, &c->req_md,
                                                 s->cq, s->cq, c);
    if (e != GRPC_CALL_OK) {
        if (!s->shutting_down)
            KEG_ERR("grpc_server_request_call: error %d", (int)e);
        srv_call_free(c);
        return -1;
    }
    return 0;
}

/* Unpack, dispatch, pack.  Fills c->send_buf (NULL on error) and the status. */
static void srv_handle(struct srv *s, struct srv_call *c, int *code)
{
    struct csi_status st;
    ProtobufCMessage *req = NULL, *resp = NULL;
    char method[128];
    int64_t t0 = srv_now_us();
    grpc_slice body = grpc_empty_slice();
    int have_body = 0;

    csi_status_init(&st);
    size_t mlen = KEG_MIN(GRPC_SLICE_LENGTH(c->details.method), sizeof(method) - 1);
    memcpy(method, GRPC_SLICE_START_PTR(c->details.method), mlen);
    method[mlen] = '\0';

    const struct csi_method *m = srv_find_method(&c->details.method);
    if (!m || (m->mode && !(s->ctx->mode & m->mode))) {
        csi_fail(&st, CSI_UNIMPLEMENTED, "method %s is not served by this plugin (mode %s)",
                 method, s->ctx->mode == CSI_MODE_ALL ? "all" :
                 s->ctx->mode == CSI_MODE_NODE ? "node" : "controller");
        goto out;
    }
    if (c->recv_buf) {
        grpc_byte_buffer_reader rd;
        if (!grpc_byte_buffer_reader_init(&rd, c->recv_buf)) {
            csi_fail(&st, CSI_INTERNAL, "cannot read the request");
            goto out;
        }
        body = grpc_byte_buffer_reader_readall(&rd);
        have_body = 1;
        grpc_byte_buffer_reader_destroy(&rd);
    }
    req = protobuf_c_message_unpack(m->req, &csi_pb_allocator, GRPC_SLICE_LENGTH(body),
                                    GRPC_SLICE_START_PTR(body));
    if (!req) {
        csi_fail(&st, CSI_INVALID_ARGUMENT, "cannot decode the %s request", method);
        goto out;
    }
    resp = keg_calloc(1, m->resp->sizeof_message);
    if (!resp) {
        csi_fail(&st, CSI_INTERNAL, "out of memory");
        goto out;
    }
    m->resp->message_init(resp);
    if (m->fn(s->ctx, req, resp, &st) == 0 && st.code == CSI_OK) {
        size_t n = protobuf_c_message_get_packed_size(resp);
        grpc_slice out = grpc_slice_malloc(n);
        protobuf_c_message_pack(resp, GRPC_SLICE_START_PTR(out));
        c->send_buf = grpc_raw_byte_buffer_create(&out, 1);
        grpc_slice_unref(out);
    } else if (st.code == CSI_OK) {
        csi_fail(&st, CSI_INTERNAL, "handler failed without a status");
    }
out:
    csi_log_request(method, req, srv_now_us() - t0, &st);
    csi_metrics_rpc(m ? (int)(m - csi_methods) : -1, st.code, srv_now_us() - t0);
    *code = st.code;
    if (st.code != CSI_OK) {
        c->status_details = grpc_slice_from_copied_string(st.msg);
        c->has_details = 1;
    }
    keg_free(resp);     /* its fields live in st's arena or borrow req */
    if (req)
        protobuf_c_message_free_unpacked(req, &csi_pb_allocator);
    if (have_body)
        grpc_slice_unref(body);
    csi_status_clear(&st);
}

static void srv_step(struct srv *s, struct srv_call *c, int ok)
{
    grpc_op ops[4];
    grpc_call_error e;

    switch (c->state) {
    case SRV_WAIT_CALL:
        if (!ok) {
            srv_call_free(c);               /* server is shutting down */
            return;
        }
        if (!s->shutting_down)
            srv_request_call(s);            /* keep the pool of slots full */
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_RECV_MESSAGE;
        ops[0].data.recv_message.recv_message = &c->recv_buf;
        c->state = SRV_WAIT_RECV;
        e = grpc_call_start_batch(c->call, ops, 1, c, NULL);
        if (e != GRPC_CALL_OK) {
            KEG_ERR("grpc_call_start_batch(recv): error %d", (int)e);
            srv_call_free(c);
        }
        return;
    case SRV_WAIT_RECV: {
        int code = CSI_INTERNAL;
        if (ok)
            srv_handle(s, c, &code);
        else {
            c->status_details = grpc_slice_from_static_string("request not received");
            c->has_details = 1;
        }
        size_t n = 0;
        memset(ops, 0, sizeof(ops));
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].data.send_initial_metadata.count = 0;
        n++;
        if (code == CSI_OK && c->send_buf) {
            ops[n].op = GRPC_OP_SEND_MESSAGE;
            ops[n].data.send_message.send_message = c->send_buf;
            n++;
        }
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.trailing_metadata_count = 0;
        ops[n].data.send_status_from_server.status = (grpc_status_code)code;
        ops[n].data.send_status_from_server.status_details =
            c->has_details ? &c->status_details : NULL;
        n++;
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n].data.recv_close_on_server.cancelled = &c->cancelled;
        n++;
        c->state = SRV_WAIT_SEND;
        e = grpc_call_start_batch(c->call, ops, n, c, NULL);
        if (e != GRPC_CALL_OK) {
            KEG_ERR("grpc_call_start_batch(send): error %d", (int)e);
            srv_call_free(c);
        }
        return;
    }
    case SRV_WAIT_SEND:
        srv_call_free(c);
        return;
    }
}

static void *srv_worker(void *arg)
{
    struct srv *s = arg;
    keg_thread_name("csi-rpc");
    for (;;) {
        gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                       gpr_time_from_millis(200, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(s->cq, dl, NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_QUEUE_TIMEOUT)
            continue;
        if (ev.tag == &s->shutdown_tag) {
            pthread_mutex_lock(&s->lock);
            s->shutdown_seen = 1;
            pthread_cond_broadcast(&s->cond);
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        srv_step(s, ev.tag, ev.success);
    }
    return NULL;
}

/*----------------------------------------------------------------------------
 * Endpoint
 *--------------------------------------------------------------------------*/

/* "unix:///csi/csi.sock", "unix:/csi/csi.sock" or "/csi/csi.sock" -> the path. */
static const char *srv_socket_path(const char *endpoint)
{
    if (strncmp(endpoint, "unix://", 7) == 0)
        return endpoint + 7;
    if (strncmp(endpoint, "unix:", 5) == 0)
        return endpoint + 5;
    if (endpoint[0] == '/')
        return endpoint;
    return NULL;
}

static int srv_prepare_socket(const char *path)
{
    struct stat sb;
    if (path[0] != '/') {
        KEG_ERR("endpoint socket path '%s' must be absolute (unix:///csi/csi.sock)", path);
        return -EINVAL;
    }
    char *dir = keg_strdup(path);
    if (!dir)
        return -ENOMEM;
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0750) < 0 && errno != EEXIST)
            KEG_WARN("cannot create %s: %s", dir, strerror(errno));
    }
    keg_free(dir);
    if (lstat(path, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode)) {
            KEG_ERR("endpoint %s exists and is not a socket; remove it", path);
            return -EEXIST;
        }
        unlink(path);       /* stale socket of a previous run */
    }
    return 0;
}

/*----------------------------------------------------------------------------
 * Serve
 *--------------------------------------------------------------------------*/

/* Tell metrics.c the names of the method indexes it is given. */
static void srv_name_methods(void)
{
    const char *names[sizeof(csi_methods) / sizeof(csi_methods[0])];
    size_t n = sizeof(csi_methods) / sizeof(csi_methods[0]);
    for (size_t i = 0; i < n; i++)
        names[i] = strrchr(csi_methods[i].name, '/') + 1;
    csi_metrics_methods(names, n);
}

int csi_serve(struct csi_ctx *ctx, const char *endpoint, unsigned nthreads)
{
    struct srv s;
    pthread_t *th = NULL;
    unsigned started = 0;
    int rc = 0;
    char target[4096];
    sigset_t sigs;

    const char *path = srv_socket_path(endpoint);
    if (!path) {
        KEG_ERR("endpoint '%s' is not a unix socket (expected unix:///path/csi.sock)", endpoint);
        return -EINVAL;
    }
    rc = srv_prepare_socket(path);
    if (rc < 0)
        return rc;
    snprintf(target, sizeof(target), "unix:%s", path);

    srv_name_methods();
    memset(&s, 0, sizeof(s));
    s.ctx = ctx;
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.cond, NULL);
    if (nthreads == 0)
        nthreads = 4;

    grpc_init();
    s.cq = grpc_completion_queue_create_for_next(NULL);
    s.server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(s.server, s.cq, NULL);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    mode_t old_umask = umask(0117);             /* the socket is created 0660 */
    int port = grpc_server_add_http2_port(s.server, target, creds);
    umask(old_umask);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        KEG_ERR("cannot listen on %s (directory missing or not writable?)", endpoint);
        rc = -EADDRINUSE;
        grpc_server_destroy(s.server);
        grpc_completion_queue_shutdown(s.cq);
        while (grpc_completion_queue_next(s.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(s.cq);
        goto out_grpc;
    }
    grpc_server_start(s.server);
    if (chmod(path, 0660) < 0)
        KEG_WARN("chmod 0660 %s: %s", path, strerror(errno));

    for (unsigned i = 0; i < nthreads * 2; i++)
        srv_request_call(&s);
    th = keg_calloc(nthreads, sizeof(*th));
    if (!th) {
        rc = -ENOMEM;
        goto shutdown;
    }
    for (; started < nthreads; started++) {
        if (pthread_create(&th[started], NULL, srv_worker, &s) != 0) {
            rc = -EAGAIN;
            goto shutdown;
        }
    }
    KEG_INFO("%s %s serving on %s (mode %s, node %s, %u workers)", ctx->driver_name,
             KEG_VERSION, endpoint,
             ctx->mode == CSI_MODE_ALL ? "all" : ctx->mode == CSI_MODE_NODE ? "node"
                                                                               : "controller",
             ctx->node_id ? ctx->node_id : "-", nthreads);

    /* The signals were blocked by main() before any thread started. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    for (;;) {
        struct timespec ts = { .tv_sec = 1, .tv_nsec = 0 };
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT) {
            KEG_INFO("signal %d: shutting down", sig);
            break;
        }
    }

shutdown:
    s.shutting_down = 1;
    grpc_server_shutdown_and_notify(s.server, s.cq, &s.shutdown_tag);
    grpc_server_cancel_all_calls(s.server);
    if (started) {
        pthread_mutex_lock(&s.lock);
        while (!s.shutdown_seen)
            pthread_cond_wait(&s.cond, &s.lock);
        pthread_mutex_unlock(&s.lock);
    } else {
        grpc_event ev;
        do {
            ev = grpc_completion_queue_next(s.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            if (ev.type == GRPC_OP_COMPLETE && ev.tag != &s.shutdown_tag)
                srv_call_free(ev.tag);
        } while (!(ev.type == GRPC_OP_COMPLETE && ev.tag == &s.shutdown_tag));
    }
    grpc_completion_queue_shutdown(s.cq);
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (!started) {
        while (grpc_completion_queue_next(s.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
    }
    keg_free(th);
    grpc_server_destroy(s.server);
    grpc_completion_queue_destroy(s.cq);
    unlink(path);
out_grpc:
    grpc_shutdown();
    pthread_mutex_destroy(&s.lock);
    pthread_cond_destroy(&s.cond);
    KEG_INFO("stopped");
    return rc;
}
