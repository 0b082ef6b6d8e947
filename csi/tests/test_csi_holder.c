/* test_csi_holder.c -- the holder mount mode of the node plugin (mount_mgr.c)
 * against a fake `kegfs holder`: a thread serving a unix socket that records
 * each request (and the descriptor sent with it) and answers from a script. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "csi_i.h"
#include "keg/log.h"
#include "keg/mem.h"
#include "mount_mgr.h"
#include "state.h"

#define MAXREQ 8

static char dir[256], sock[300];
static int lfd = -1;
static pthread_t srv;
static const char *answers[MAXREQ];     /* the holder's answers, in order */
static char reqs[MAXREQ][4096];         /* what it received */
static char fdtext[MAXREQ][512];        /* content of the descriptor sent along */
static int nreq;

static void *serve(void *arg)
{
    (void)arg;
    for (int i = 0; i < MAXREQ && answers[i]; i++) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0)
            return NULL;
        size_t n = 0;
        int fd = -1;
        while (!strstr(reqs[i], "\n\n") && n < sizeof(reqs[i]) - 1) {
            union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int))];
            } cb;
            struct iovec iov = {.iov_base = reqs[i] + n, .iov_len = sizeof(reqs[i]) - 1 - n};
            struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
                                .msg_controllen = sizeof(cb.b)};
            ssize_t k = recvmsg(c, &mh, 0);
            if (k <= 0)
                break;
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
                if (cm->cmsg_type == SCM_RIGHTS)
                    memcpy(&fd, CMSG_DATA(cm), sizeof(int));
            n += (size_t)k;
            reqs[i][n] = '\0';
        }
        if (fd >= 0) {
            ssize_t k = pread(fd, fdtext[i], sizeof(fdtext[i]) - 1, 0);
            fdtext[i][k > 0 ? k : 0] = '\0';
            close(fd);
        }
        nreq = i + 1;
        if (write(c, answers[i], strlen(answers[i])) < 0)
            fail_msg("write: %s", strerror(errno));
        close(c);
    }
    return NULL;
}

static void holder_start(const char *a0, const char *a1, const char *a2)
{
    memset(reqs, 0, sizeof(reqs));
    memset(fdtext, 0, sizeof(fdtext));
    memset(answers, 0, sizeof(answers));
    answers[0] = a0;
    answers[1] = a1;
    answers[2] = a2;
    nreq = 0;
    assert_int_equal(pthread_create(&srv, NULL, serve, NULL), 0);
}

static void holder_join(void)
{
    pthread_join(srv, NULL);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_csi_holder.XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(sock, sizeof(sock), "%s/holder.sock", dir);
    lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(sock) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(lfd, 8), 0);
    return 0;
}

static int teardown(void **state)
{
    char cmd[400];
    (void)state;
    close(lfd);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* mount: the request carries the volume and the config as a descriptor, never the
 * secrets as text; the pid of the answer comes back; an error answer is an error */
static void test_start_stop(void **state)
{
    struct csi_mount_mgr *mm = NULL;
    char cfg[400], err[512];
    struct csi_mount_res res;
    (void)state;
    snprintf(cfg, sizeof(cfg), "%s/cfg.yaml", dir);
    write_file(cfg, "meta-url: \"redis://:pa55w0rd@redis:6379/1\"\n");
    assert_int_equal(csi_mount_mgr_holder_create(sock, "/bin/true", dir, 0, &mm), 0);
    assert_string_equal(mm->ops->name, "holder");
    assert_true(mm->ops->self_healing);

    holder_start("ok\npid=4242\nmetrics=/h/metrics/00ff.sock\n\n",
                 "error 5\nmessage=the mounter exited: boom\n\n", "ok\n\n");
    struct csi_mount_req r = {.volume_id = "pvc-1", .target = "/pods/a/mount",
                              .config = cfg, .options = "noatime", .readonly = 1,
                              .metrics = 1};
    assert_int_equal(mm->ops->start(mm, &r, &res, err, sizeof(err)), 0);
    assert_int_equal(res.pid, 4242);
    assert_string_equal(res.metrics, "/h/metrics/00ff.sock");   /* the holder names it */
    assert_string_equal(reqs[0], "mount\nvolume_id=pvc-1\ntarget=/pods/a/mount\n"
                                 "options=noatime\nreadonly=1\nmetrics=1\n\n");
    assert_non_null(strstr(fdtext[0], "pa55w0rd"));     /* by descriptor ... */
    assert_null(strstr(reqs[0], "pa55w0rd"));           /* ... never as text */

    assert_int_equal(mm->ops->start(mm, &r, &res, err, sizeof(err)), -EIO);
    assert_int_equal(res.pid, 0);
    assert_string_equal(res.metrics, "");
    assert_non_null(strstr(err, "boom"));

    assert_int_equal(mm->ops->stop(mm, "/pods/a/mount", 4242), 0);
    assert_string_equal(reqs[2], "unmount\ntarget=/pods/a/mount\n\n");
    holder_join();
    assert_int_equal(nreq, 3);

    /* no holder: an internal error, not "mounter binary missing" (-ENOENT) */
    mm->ops->destroy(mm);
    assert_int_equal(csi_mount_mgr_holder_create("/nonexistent/holder.sock", "/bin/true", dir,
                                                 0, &mm), 0);
    assert_int_equal(mm->ops->start(mm, &r, &res, err, sizeof(err)), -EIO);
    assert_non_null(strstr(err, "/nonexistent/holder.sock"));
    unsigned char alive[1] = {1};
    struct csi_publish one = {.volume_id = "pvc-1", .target = "/pods/a/mount"};
    assert_true(mm->ops->alive(mm, &one, 1, 500, alive) < 0);   /* cannot tell */
    mm->ops->destroy(mm);
}

/* reconcile: pids of recorded targets come from the holder; a held mount whose pod
 * directory is gone is unmounted; one whose pod exists is left alone; then the
 * plugin's kegfs is copied to bin/kegfs-<hash> and the holder asked to upgrade */
static void test_reconcile(void **state)
{
    struct csi_mount_mgr *mm = NULL;
    struct csi_state *st = NULL;
    char sdir[400], t1[400], t2[400], t3[400], list[2048], bin[400], up[600];
    (void)state;
    snprintf(sdir, sizeof(sdir), "%s/state", dir);
    snprintf(t1, sizeof(t1), "%s/pods/p1/mount", dir);
    snprintf(t2, sizeof(t2), "%s/gone/p2/mount", dir);
    snprintf(t3, sizeof(t3), "%s/pods/p3/mount", dir);
    char p1[420];
    snprintf(p1, sizeof(p1), "%s/pods", dir);
    mkdir(p1, 0755);
    snprintf(p1, sizeof(p1), "%s/pods/p1", dir);
    mkdir(p1, 0755);
    snprintf(p1, sizeof(p1), "%s/pods/p3", dir);
    mkdir(p1, 0755);
    assert_int_equal(csi_state_open(sdir, &st), 0);
    struct csi_publish rec = {.volume_id = "pvc-1", .target = t1, .options = "",
                              .config = "", .pid = 11};
    assert_int_equal(csi_state_put(st, &rec), 0);
    snprintf(list, sizeof(list),
             "ok\nmounter=/x\ncount=3\nmount=%s\nvolume_id=pvc-1\npid=77\nstate=live\n"
             "metrics=/h/metrics/0011.sock\n"
             "mount=%s\nvolume_id=pvc-2\npid=78\nstate=live\n"
             "mount=%s\nvolume_id=pvc-3\npid=79\nstate=live\n\n", t1, t2, t3);
    snprintf(bin, sizeof(bin), "%s/mykegfs", dir);
    write_file(bin, "#!/bin/sh\nexit 0\n");
    chmod(bin, 0755);
    snprintf(up, sizeof(up), "%s/bin", dir);
    assert_int_equal(csi_mount_mgr_holder_create(sock, bin, up, 1, &mm), 0);
    holder_start(list, "ok\n\n", "ok\nbinary=x\ncount=3\nfailed=0\n\n");
    assert_int_equal(mm->ops->reconcile(mm, st), 0);
    holder_join();
    assert_int_equal(nreq, 3);
    assert_string_equal(reqs[0], "list\n\n");
    char want[600];
    snprintf(want, sizeof(want), "unmount\ntarget=%s\n\n", t2);
    assert_string_equal(reqs[1], want);
    assert_int_equal(strncmp(reqs[2], "upgrade\nbinary=", 15), 0);
    char copy[600];
    snprintf(copy, sizeof(copy), "%.*s", (int)(strchr(reqs[2] + 15, '\n') - (reqs[2] + 15)),
             reqs[2] + 15);
    assert_int_equal(strncmp(copy, up, strlen(up)), 0);
    assert_non_null(strstr(copy, "/kegfs-"));
    assert_int_equal(access(copy, X_OK), 0);           /* a copy of the plugin's kegfs */
    struct csi_publish got;
    assert_int_equal(csi_state_find(st, t1, &got), 0);
    assert_int_equal(got.pid, 77);
    assert_string_equal(got.metrics, "/h/metrics/0011.sock");  /* the re-adopted socket */
    csi_publish_clear(&got);
    assert_int_equal(csi_state_find(st, t3, &got), -ENOENT);   /* not adopted */

    /* alive: from the holder's list, by target and state, never by a local pid */
    struct csi_publish recs[3] = {
        {.volume_id = "pvc-1", .target = t1, .pid = 1},
        {.volume_id = "pvc-3", .target = t3, .pid = 1},
        {.volume_id = "pvc-9", .target = "/nowhere", .pid = 1},
    };
    unsigned char alive[3] = {9, 9, 9};
    snprintf(list, sizeof(list),
             "ok\nmounter=/x\ncount=2\nmount=%s\nvolume_id=pvc-1\npid=77\nstate=live\n"
             "mount=%s\nvolume_id=pvc-3\npid=0\nstate=restarting\n\n", t1, t3);
    holder_start(list, NULL, NULL);
    assert_int_equal(mm->ops->alive(mm, recs, 3, 1000, alive), 0);
    holder_join();
    assert_int_equal(alive[0], 1);
    assert_int_equal(alive[1], 0);
    assert_int_equal(alive[2], 0);
    mm->ops->destroy(mm);
    csi_state_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_start_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconcile, setup, teardown),
    };
    keg_log_set_level(LOG_WARNING);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
