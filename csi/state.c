/* state.c -- the node plugin's publish records, persisted as one YAML file.
 *
 * DESIGN
 * The whole record set is kept in memory (a node has tens of publishes, not
 * millions) and written out whole after every change:
 *
 *     <dir>/state.yaml          version: 1
 *                               publishes:
 *                                 - volume_id: pvc-1
 *                                   target: /var/lib/kubelet/pods/.../mount
 *                                   readonly: false
 *                                   options: ""
 *                                   config: <dir>/mounts/<hash>.yaml
 *                                   pid: 1234
 *                                   metrics: <dir>/metrics/<hash>.sock   (or "")
 *
 * Writing is temp file + fsync + rename + fsync(dir), so a crash at any point
 * leaves the previous or the new state.  YAML is emitted and parsed with
 * libyaml (no hand-rolled parser).  Unknown keys are ignored, so a newer plugin
 * can add fields.  The file holds no secrets.
 *
 * LOCKS: s->lock protects recs/n/cap and serialises file writes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "keg/keg.h"
#include "keg/mem.h"
#include "state.h"
#define KEG_LOG_TAG "csi.state"
#include "keg/log.h"

struct csi_state {
    char *dir;
    char *path;                       /* <dir>/state.yaml */
    pthread_mutex_t lock;
    struct csi_publish *recs;         /* protected by lock */
    size_t n, cap;                    /* protected by lock */
};

/*----------------------------------------------------------------------------
 * Records
 *--------------------------------------------------------------------------*/

void csi_publish_clear(struct csi_publish *p)
{
    keg_free(p->volume_id);
    keg_free(p->target);
    keg_free(p->options);
    keg_free(p->config);
    keg_free(p->metrics);
    memset(p, 0, sizeof(*p));
}

void csi_publish_free_array(struct csi_publish *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        csi_publish_clear(&a[i]);
    keg_free(a);
}

static char *state_dup(const char *s)
{
    return keg_strdup(s ? s : "");
}

int csi_publish_copy(struct csi_publish *dst, const struct csi_publish *src)
{
    memset(dst, 0, sizeof(*dst));
    dst->volume_id = state_dup(src->volume_id);
    dst->target = state_dup(src->target);
    dst->options = state_dup(src->options);
    dst->config = state_dup(src->config);
    dst->metrics = state_dup(src->metrics);
    dst->readonly = src->readonly;
    dst->pid = src->pid;
    if (!dst->volume_id || !dst->target || !dst->options || !dst->config || !dst->metrics) {
        csi_publish_clear(dst);
        return -ENOMEM;
    }
    return 0;
}

/*----------------------------------------------------------------------------
 * Emitting
 *--------------------------------------------------------------------------*/

static int state_scalar(yaml_emitter_t *em, const char *v, int quoted)
{
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)v, (int)strlen(v), 1, 1,
                                      quoted ? YAML_DOUBLE_QUOTED_SCALAR_STYLE
                                             : YAML_ANY_SCALAR_STYLE))
        return -ENOMEM;
    return yaml_emitter_emit(em, &ev) ? 0 : -EIO;
}

static int state_kv(yaml_emitter_t *em, const char *k, const char *v, int quoted)
{
    int rc = state_scalar(em, k, 0);
    return rc < 0 ? rc : state_scalar(em, v, quoted);
}

static int state_yaml_write(void *data, unsigned char *buf, size_t size)
{
    return fwrite(buf, 1, size, (FILE *)data) == size;
}

/* LOCKS: caller holds s->lock. */
static int state_emit(struct csi_state *s, FILE *fp)
{
    yaml_emitter_t em;
    yaml_event_t ev;
    int rc = -EIO;
    char num[32];

    if (!yaml_emitter_initialize(&em))
        return -ENOMEM;
    yaml_emitter_set_output(&em, state_yaml_write, fp);
    yaml_emitter_set_unicode(&em, 1);
    if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) ||
        !yaml_emitter_emit(&em, &ev))
        goto out;
    if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) ||
        !yaml_emitter_emit(&em, &ev))
        goto out;
    if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) ||
        !yaml_emitter_emit(&em, &ev))
        goto out;
    if (state_kv(&em, "version", "1", 0) < 0 || state_scalar(&em, "publishes", 0) < 0)
        goto out;
    if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE) ||
        !yaml_emitter_emit(&em, &ev))
        goto out;
    for (size_t i = 0; i < s->n; i++) {
        const struct csi_publish *p = &s->recs[i];
        if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                 YAML_BLOCK_MAPPING_STYLE) ||
            !yaml_emitter_emit(&em, &ev))
            goto out;
        snprintf(num, sizeof(num), "%ld", (long)p->pid);
        if (state_kv(&em, "volume_id", p->volume_id, 1) < 0 ||
            state_kv(&em, "target", p->target, 1) < 0 ||
            state_kv(&em, "readonly", p->readonly ? "true" : "false", 0) < 0 ||
            state_kv(&em, "options", p->options, 1) < 0 ||
            state_kv(&em, "config", p->config, 1) < 0 ||
            state_kv(&em, "pid", num, 0) < 0 ||
            state_kv(&em, "metrics", p->metrics ? p->metrics : "", 1) < 0)
            goto out;
        if (!yaml_mapping_end_event_initialize(&ev) || !yaml_emitter_emit(&em, &ev))
            goto out;
    }
    if (!yaml_sequence_end_event_initialize(&ev) || !yaml_emitter_emit(&em, &ev))
        goto out;
    if (!yaml_mapping_end_event_initialize(&ev) || !yaml_emitter_emit(&em, &ev))
        goto out;
    if (!yaml_document_end_event_initialize(&ev, 1) || !yaml_emitter_emit(&em, &ev))
        goto out;
    if (!yaml_stream_end_event_initialize(&ev) || !yaml_emitter_emit(&em, &ev))
        goto out;
    if (!yaml_emitter_flush(&em))
        goto out;
    rc = 0;
out:
    yaml_emitter_delete(&em);
    return rc;
}

/* Write the state file atomically.  LOCKS: caller holds s->lock. */
static int state_save(struct csi_state *s)
{
    char *tmp = keg_asprintf("%s.tmp.%ld", s->path, (long)getpid());
    int rc, fd = -1;
    FILE *fp = NULL;
    if (!tmp)
        return -ENOMEM;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    fp = fdopen(fd, "w");
    if (!fp) {
        rc = -errno;
        close(fd);
        goto out;
    }
    rc = state_emit(s, fp);
    if (rc == 0 && fflush(fp) != 0)
        rc = -errno;
    if (rc == 0 && fsync(fileno(fp)) != 0)
        rc = -errno;
    if (fclose(fp) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, s->path) != 0)
        rc = -errno;
    if (rc == 0) {
        int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
out:
    if (rc < 0) {
        unlink(tmp);
        KEG_ERR("cannot write %s: %s", s->path, strerror(-rc));
    }
    keg_free(tmp);
    return rc;
}

/*----------------------------------------------------------------------------
 * Parsing
 *--------------------------------------------------------------------------*/

/* Append rec (TAKES its fields).  LOCKS: caller holds s->lock or owns s alone. */
static int state_append(struct csi_state *s, struct csi_publish *rec)
{
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 16;
        struct csi_publish *nr = keg_realloc(s->recs, ncap * sizeof(*nr));
        if (!nr) {
            csi_publish_clear(rec);
            return -ENOMEM;
        }
        s->recs = nr;
        s->cap = ncap;
    }
    s->recs[s->n++] = *rec;
    memset(rec, 0, sizeof(*rec));
    return 0;
}

static int state_set_field(struct csi_publish *p, const char *k, const char *v)
{
    char **dst = NULL;
    if (strcmp(k, "volume_id") == 0)
        dst = &p->volume_id;
    else if (strcmp(k, "target") == 0)
        dst = &p->target;
    else if (strcmp(k, "options") == 0)
        dst = &p->options;
    else if (strcmp(k, "config") == 0)
        dst = &p->config;
    else if (strcmp(k, "metrics") == 0)
        dst = &p->metrics;
    else if (strcmp(k, "readonly") == 0)
        p->readonly = strcmp(v, "true") == 0;
    else if (strcmp(k, "pid") == 0)
        p->pid = (pid_t)strtol(v, NULL, 10);
    if (dst) {
        keg_free(*dst);
        *dst = keg_strdup(v);
        if (!*dst)
            return -ENOMEM;
    }
    return 0;
}

/* Parse the file.  Shape: mapping { publishes: sequence of mappings }. */
static int state_load(struct csi_state *s, FILE *fp)
{
    yaml_parser_t ps;
    yaml_event_t ev;
    int rc = 0, done = 0, depth = 0, in_pubs = 0, want_key = 1;
    struct csi_publish cur;
    char *key = NULL;

    memset(&cur, 0, sizeof(cur));
    if (!yaml_parser_initialize(&ps))
        return -ENOMEM;
    yaml_parser_set_input_file(&ps, fp);
    while (!done) {
        if (!yaml_parser_parse(&ps, &ev)) {
            KEG_ERR("%s: YAML error at line %zu: %s", s->path, ps.problem_mark.line + 1,
                    ps.problem ? ps.problem : "?");
            rc = -EINVAL;
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_MAPPING_START_EVENT:
            depth++;
            want_key = 1;
            if (in_pubs && depth == 2)
                memset(&cur, 0, sizeof(cur));
            break;
        case YAML_MAPPING_END_EVENT:
            if (in_pubs && depth == 2) {
                if (cur.target && cur.volume_id && cur.target[0] == '/') {
                    if (!cur.options)
                        cur.options = keg_strdup("");
                    if (!cur.config)
                        cur.config = keg_strdup("");
                    if (!cur.metrics)
                        cur.metrics = keg_strdup("");   /* a record of an older plugin */
                    rc = state_append(s, &cur);
                } else {
                    KEG_WARN("%s: skipping a publish record without volume_id/target", s->path);
                    csi_publish_clear(&cur);
                }
            }
            depth--;
            want_key = 1;
            break;
        case YAML_SEQUENCE_START_EVENT:
            if (depth == 1 && key && strcmp(key, "publishes") == 0)
                in_pubs = 1;
            keg_free(key);
            key = NULL;
            if (depth != 1 || !in_pubs)
                depth += 100;       /* ignore unknown nested sequences */
            break;
        case YAML_SEQUENCE_END_EVENT:
            if (depth >= 100)
                depth -= 100;
            else
                in_pubs = 0;
            want_key = 1;
            break;
        case YAML_SCALAR_EVENT: {
            const char *v = (const char *)ev.data.scalar.value;
            if (want_key) {
                keg_free(key);
                key = keg_strdup(v);
                if (!key)
                    rc = -ENOMEM;
                want_key = 0;
            } else {
                if (in_pubs && depth == 2 && key)
                    rc = state_set_field(&cur, key, v);
                keg_free(key);
                key = NULL;
                want_key = 1;
            }
            break;
        }
        default:
            break;
        }
        yaml_event_delete(&ev);
        if (rc < 0)
            break;
    }
    csi_publish_clear(&cur);
    keg_free(key);
    yaml_parser_delete(&ps);
    return rc;
}

/*----------------------------------------------------------------------------
 * API
 *--------------------------------------------------------------------------*/

int csi_state_open(const char *dir, struct csi_state **out)
{
    struct csi_state *s;
    int rc;

    *out = NULL;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        rc = -errno;
        KEG_ERR("cannot create state directory %s: %s", dir, strerror(-rc));
        return rc;
    }
    s = keg_calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    pthread_mutex_init(&s->lock, NULL);
    s->dir = keg_strdup(dir);
    s->path = keg_asprintf("%s/state.yaml", dir);
    if (!s->dir || !s->path) {
        rc = -ENOMEM;
        goto fail;
    }
    FILE *fp = fopen(s->path, "re");
    if (fp) {
        rc = state_load(s, fp);
        fclose(fp);
        if (rc < 0)
            goto fail;
    } else if (errno != ENOENT) {
        rc = -errno;
        KEG_ERR("cannot read %s: %s", s->path, strerror(-rc));
        goto fail;
    }
    KEG_INFO("state %s: %zu publish record(s)", s->path, s->n);
    *out = s;
    return 0;
fail:
    csi_state_close(s);
    return rc;
}

void csi_state_close(struct csi_state *s)
{
    if (!s)
        return;
    csi_publish_free_array(s->recs, s->n);
    keg_free(s->dir);
    keg_free(s->path);
    pthread_mutex_destroy(&s->lock);
    keg_free(s);
}

/* LOCKS: caller holds s->lock. */
static ssize_t state_index(struct csi_state *s, const char *target)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->recs[i].target, target) == 0)
            return (ssize_t)i;
    return -1;
}

int csi_state_find(struct csi_state *s, const char *target, struct csi_publish *out)
{
    int rc = -ENOENT;
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&s->lock);
    ssize_t i = state_index(s, target);
    if (i >= 0)
        rc = csi_publish_copy(out, &s->recs[i]);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int csi_state_put(struct csi_state *s, const struct csi_publish *p)
{
    struct csi_publish copy, old;
    int rc = csi_publish_copy(&copy, p);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&s->lock);
    ssize_t i = state_index(s, p->target);
    if (i >= 0) {
        old = s->recs[i];
        s->recs[i] = copy;
        rc = state_save(s);
        if (rc < 0) {
            s->recs[i] = old;           /* keep memory and file in agreement */
            csi_publish_clear(&copy);
        } else {
            csi_publish_clear(&old);
        }
    } else {
        rc = state_append(s, &copy);
        if (rc == 0) {
            rc = state_save(s);
            if (rc < 0)
                csi_publish_clear(&s->recs[--s->n]);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int csi_state_remove(struct csi_state *s, const char *target)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    ssize_t i = state_index(s, target);
    if (i >= 0) {
        struct csi_publish gone = s->recs[i];
        s->recs[i] = s->recs[--s->n];
        rc = state_save(s);
        if (rc < 0) {
            s->recs[s->n++] = s->recs[i];
            s->recs[i] = gone;
        } else {
            csi_publish_clear(&gone);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int csi_state_snapshot(struct csi_state *s, struct csi_publish **out, size_t *n)
{
    int rc = 0;
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&s->lock);
    if (s->n) {
        struct csi_publish *a = keg_calloc(s->n, sizeof(*a));
        if (!a) {
            rc = -ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < s->n; i++) {
            rc = csi_publish_copy(&a[i], &s->recs[i]);
            if (rc < 0) {
                csi_publish_free_array(a, i);
                goto out;
            }
        }
        *out = a;
        *n = s->n;
    }
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}
