/* pool.c -- small fixed-size thread pools with a bounded job queue (uploads, block fetches).
 *
 * DESIGN
 * A pool is N threads taking jobs from one FIFO.  A job is a struct fs_job
 * embedded at the start of the submitter's own struct; the pool never
 * allocates.  The queue is bounded (max_queue jobs): fs_pool_submit either
 * waits for room (uploads: backpressure on the writer) or refuses with
 * -EAGAIN (prefetches: dropped, the reader fetches itself).  A pool with no
 * threads (tools opened without background threads) runs every job inline in
 * the submitter, so callers need no second code path.
 *
 * fs_pool_stop lets the threads finish the queued jobs and joins them; jobs
 * submitted afterwards run inline.
 *
 * LOCKS: pool->mu guards the queue and the counters; a job runs without it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define KEG_LOG_TAG "fs"
#include "keg/log.h"
#include "keg/mem.h"
#include "fs_i.h"

static void *pool_main(void *arg)
{
    struct fs_pool *p = arg;
    char name[16];

    snprintf(name, sizeof(name), "keg-%s", p->name);
    keg_thread_name(name);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct fs_job *j;
        while (!p->head && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        j = p->head;
        if (!j)
            break;              /* stopping and drained */
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        p->queued--;
        p->running++;
        pthread_cond_broadcast(&p->room_cv);
        pthread_mutex_unlock(&p->mu);
        j->fn(j);               /* the job frees itself */
        pthread_mutex_lock(&p->mu);
        p->running--;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int fs_pool_start(struct fs_pool *p, const char *name, unsigned nthreads, unsigned max_queue)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->room_cv, NULL);
    p->name = name;
    p->max_queue = max_queue ? max_queue : 1;
    if (nthreads > FS_POOL_MAX_THREADS)
        nthreads = FS_POOL_MAX_THREADS;
    for (unsigned i = 0; i < nthreads; i++) {
        int rc = pthread_create(&p->thr[i], NULL, pool_main, p);
        if (rc != 0) {
            KEG_ERR("cannot start %s thread: %s", name, strerror(rc));
            fs_pool_stop(p);
            return -rc;
        }
        p->nthreads++;
    }
    return 0;
}

void fs_pool_stop(struct fs_pool *p)
{
    unsigned n;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    n = p->nthreads;
    pthread_cond_broadcast(&p->cv);
    pthread_cond_broadcast(&p->room_cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < n; i++)
        pthread_join(p->thr[i], NULL);
    pthread_mutex_lock(&p->mu);
    p->nthreads = 0;
    pthread_mutex_unlock(&p->mu);
}

void fs_pool_destroy(struct fs_pool *p)
{
    KEG_ASSERT(p->nthreads == 0 && p->head == NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->room_cv);
}

int fs_pool_submit(struct fs_pool *p, struct fs_job *j, int wait)
{
    pthread_mutex_lock(&p->mu);
    if (p->nthreads == 0 || p->stopping) {
        pthread_mutex_unlock(&p->mu);
        if (!wait)
            return -EAGAIN;
        j->fn(j);               /* no threads: run it here */
        return 0;
    }
    while (p->queued >= p->max_queue && wait && !p->stopping)
        pthread_cond_wait(&p->room_cv, &p->mu);
    if (p->queued >= p->max_queue || p->stopping) {
        pthread_mutex_unlock(&p->mu);
        if (!wait)
            return -EAGAIN;
        j->fn(j);
        return 0;
    }
    j->next = NULL;
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    p->queued++;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

unsigned fs_pool_queued(struct fs_pool *p)
{
    unsigned n;
    pthread_mutex_lock(&p->mu);
    n = p->queued;
    pthread_mutex_unlock(&p->mu);
    return n;
}
