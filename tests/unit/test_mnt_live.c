/* test_mnt_live.c -- the mounter's handle table (ids, epochs, stale ids, the dirty
 * record that outlives a crashed worker) and its stats file (write, read back,
 * prune of a dead mounter's file). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* The files are compiled into this test; each sets its own log tag. */
#include "../../mounter/mnt_util.c"
#undef KEG_LOG_TAG
#include "../../mounter/mnt_stats.c"
#undef KEG_LOG_TAG
#include "../../mounter/mnt_handle.c"

/* Ids are epoch-tagged, unique, and map back to their handle and kind. */
static void test_handle_ids(void **state)
{
    int a, b, c;
    mnt_handle_setup(NULL, 3, 0, 0);
    uint64_t ia = mnt_handle_new(0, &a, 10);
    uint64_t ib = mnt_handle_new(0, &b, 11);
    uint64_t ic = mnt_handle_new(1, &c, 12);
    assert_true(ia && ib && ic);
    assert_true(ia != ib && ib != ic && ia != ic);
    assert_int_equal(ia >> 48, 3);
    assert_int_equal(ic >> 48, 3);

    struct keg_fh *fh = NULL;
    struct keg_dh *dh = NULL;
    assert_int_equal(mnt_handle_file(ia, 10, &fh), 0);
    assert_ptr_equal(fh, &a);
    assert_int_equal(mnt_handle_dir(ic, 12, &dh), 0);
    assert_ptr_equal(dh, &c);
    /* the kind must match: a file id is not a directory handle */
    assert_int_equal(mnt_handle_dir(ia, 10, &dh), -EBADF);
    assert_null(dh);

    assert_ptr_equal(mnt_handle_remove(ia, 0), &a);
    assert_null(mnt_handle_remove(ia, 0));              /* twice: unknown */
    assert_int_equal(mnt_handle_file(ia, 10, &fh), -EBADF);
    assert_null(fh);
    /* a fresh id is never a reused one */
    uint64_t id2 = mnt_handle_new(0, &a, 10);
    assert_true(id2 != ia);
    assert_ptr_equal(mnt_handle_remove(id2, 0), &a);
    assert_ptr_equal(mnt_handle_remove(ib, 0), &b);
    assert_ptr_equal(mnt_handle_remove(ic, 1), &c);
}

/* A handle opened with direct I/O says so by its id, which is all a worker
 * that adopts it has; it is filed and found like any other. */
static void test_handle_direct(void **state)
{
    int a, b;
    struct keg_fh *fh = NULL;
    mnt_handle_setup(NULL, 0xffff, 0, 0);
    uint64_t ia = mnt_handle_new(MNT_HANDLE_DIRECT, &a, 10);
    uint64_t ib = mnt_handle_new(0, &b, 10);
    assert_true(ia && ib && ia != ib);
    assert_int_equal(ia >> 48, 0xffff);     /* the epoch keeps its 16 bits */
    assert_true(mnt_handle_direct(ia));
    assert_false(mnt_handle_direct(ib));
    assert_int_equal(mnt_handle_file(ia, 10, &fh), 0);
    assert_ptr_equal(fh, &a);
    assert_int_equal(mnt_handle_file(ib, 10, &fh), 0);
    assert_ptr_equal(fh, &b);
    assert_ptr_equal(mnt_handle_remove(ia, 0), &a);
    assert_ptr_equal(mnt_handle_remove(ib, 0), &b);
    /* an earlier worker's direct handle, adopted: the bit is still read */
    assert_true(mnt_handle_direct((2ULL << 48) | (1ULL << 47) | 7));
    assert_false(mnt_handle_direct((2ULL << 48) | 7));
}

/* A fresh worker refuses ids it did not hand out (a bug), and so does a
 * restarted worker for an id of its own epoch: only earlier workers' ids are
 * reopened. */
static void test_handle_unknown(void **state)
{
    struct keg_fh *fh = (struct keg_fh *)1;
    mnt_handle_setup(NULL, 1, 0, 0);
    assert_int_equal(mnt_handle_file((2ULL << 48) | 5, 9, &fh), -EBADF);
    assert_null(fh);
    mnt_handle_setup(NULL, 2, 1, 0);
    assert_int_equal(mnt_handle_file((2ULL << 48) | 999, 9, &fh), -EBADF);
    assert_null(mnt_handle_remove((1ULL << 48) | 5, 0));   /* release of a stale id: no-op */
}

/* Slots of the dirty record in use. */
static unsigned dirty_used(const struct mnt_dirty_tab *t)
{
    unsigned n = 0;
    for (unsigned i = 0; i < t->nslots; i++)
        n += t->slot[i].id != 0;
    return n;
}

/* The dirty record: one slot per handle per dirty period, emptied by a commit
 * that covered every write of the inode (not one with a write in flight or
 * begun during it, not a failed one), freed at release; a restarted worker
 * marks an adopted id found there lost (writes and commits fail with EIO, the
 * slot stays until the release), and assumes the worst when the record
 * overflowed or is missing. */
static void test_dirty_record(void **state)
{
    int a, b, c, x, y;
    struct keg_fh *fh = NULL;
    struct mnt_dtok wt, k;
    void *winner;
    int lost = -1;
    struct mnt_dirty_tab *t = mnt_dirty_create();
    assert_non_null(t);
    mnt_handle_use_dirty(t);
    mnt_handle_setup(NULL, 1, 0, 0);
    uint64_t ia = mnt_handle_new(0, &a, 10);
    uint64_t ib = mnt_handle_new(0, &b, 10);
    uint64_t ic = mnt_handle_new(0, &c, 11);

    assert_int_equal(mnt_handle_write_begin(ia, 10, &fh, &wt), 0);
    assert_ptr_equal(fh, &a);
    assert_int_equal(dirty_used(t), 1);      /* recorded before the write is buffered */
    mnt_handle_write_end(&wt);
    for (int i = 0; i < 3; i++) {            /* more writes: no new slot */
        assert_int_equal(mnt_handle_write_begin(ia, 10, &fh, &wt), 0);
        mnt_handle_write_end(&wt);
    }
    assert_int_equal(dirty_used(t), 1);
    assert_int_equal(mnt_handle_write_begin(ib, 10, &fh, &wt), 0);
    mnt_handle_write_end(&wt);
    assert_int_equal(mnt_handle_write_begin(ic, 11, &fh, &wt), 0);
    mnt_handle_write_end(&wt);
    assert_int_equal(dirty_used(t), 3);

    /* a write begun during the commit: it may not be in it */
    mnt_handle_commit_begin(ib, 10, &k);
    assert_int_equal(mnt_handle_write_begin(ia, 10, &fh, &wt), 0);
    mnt_handle_write_end(&wt);
    assert_int_equal(mnt_handle_commit_end(&k, 0), 0);
    assert_int_equal(dirty_used(t), 3);
    /* a write in flight when the commit began */
    assert_int_equal(mnt_handle_write_begin(ia, 10, &fh, &wt), 0);
    mnt_handle_commit_begin(ib, 10, &k);
    mnt_handle_write_end(&wt);
    assert_int_equal(mnt_handle_commit_end(&k, 0), 0);
    assert_int_equal(dirty_used(t), 3);
    /* a failed commit */
    mnt_handle_commit_begin(ib, 10, &k);
    assert_int_equal(mnt_handle_commit_end(&k, -EIO), -EIO);
    assert_int_equal(dirty_used(t), 3);
    /* a clean commit through one handle cleans every handle of the inode */
    mnt_handle_commit_begin(ib, 10, &k);
    assert_int_equal(mnt_handle_commit_end(&k, 0), 0);
    assert_int_equal(dirty_used(t), 1);
    assert_int_equal(mnt_dirty_report(t, 4242, "died with"), 1);
    /* release frees the slot of a dirty handle */
    assert_ptr_equal(mnt_handle_remove(ic, 0), &c);
    assert_int_equal(dirty_used(t), 0);
    assert_ptr_equal(mnt_handle_remove(ia, 0), &a);
    assert_ptr_equal(mnt_handle_remove(ib, 0), &b);

    /* worker 2 after a crash: worker 1's handle 7 (inode 20) had uncommitted data */
    uint64_t old_lost = (1ULL << 48) | 7, old_clean = (1ULL << 48) | 8;
    uint64_t old_gone = (1ULL << 48) | 9;
    t->slot[5].ino = 20;
    t->slot[5].id = old_lost;
    t->slot[6].ino = 21;
    t->slot[6].id = old_gone;
    mnt_handle_setup(NULL, 2, 1, 0);
    assert_int_equal(insert(old_lost, 20, 0, &x, &winner, &lost), old_lost);
    assert_int_equal(lost, 1);
    assert_int_equal(insert(old_clean, 20, 0, &y, &winner, &lost), old_clean);
    assert_int_equal(lost, 0);
    assert_int_equal(mnt_handle_write_begin(old_lost, 20, &fh, &wt), -EIO);
    assert_null(fh);
    assert_int_equal(mnt_handle_file_w(old_lost, 20, &fh), -EIO);
    assert_int_equal(mnt_handle_file(old_lost, 20, &fh), 0);     /* reads work */
    assert_ptr_equal(fh, &x);
    mnt_handle_commit_begin(old_lost, 20, &k);
    assert_int_equal(mnt_handle_commit_end(&k, 0), -EIO);       /* fsync, close */
    mnt_handle_commit_begin(old_lost, 20, &k);
    assert_int_equal(mnt_handle_commit_end(&k, 0), -EIO);       /* every time */
    assert_int_equal(mnt_handle_file_w(old_clean, 20, &fh), 0);
    assert_int_equal(mnt_handle_write_begin(old_clean, 20, &fh, &wt), 0);
    assert_ptr_equal(fh, &y);
    mnt_handle_write_end(&wt);
    assert_int_equal(dirty_used(t), 3);                          /* lost, gone, old_clean */
    mnt_handle_commit_begin(old_clean, 20, &k);
    assert_int_equal(mnt_handle_commit_end(&k, 0), 0);
    assert_int_equal(dirty_used(t), 2);                          /* a lost slot stays */
    assert_ptr_equal(mnt_handle_remove(old_lost, 0), &x);
    assert_null(mnt_handle_remove(old_gone, 0));                 /* released, never used */
    assert_int_equal(dirty_used(t), 0);
    assert_ptr_equal(mnt_handle_remove(old_clean, 0), &y);

    /* the record overflowed in worker 2: every older file handle is lost */
    t->overflow = 1;
    mnt_handle_setup(NULL, 3, 1, 0);
    assert_int_equal(t->overflow, 0);
    uint64_t old2 = (2ULL << 48) | 1;
    assert_int_equal(insert(old2, 30, 0, &x, &winner, &lost), old2);
    assert_int_equal(lost, 1);
    assert_ptr_equal(mnt_handle_remove(old2, 0), &x);
    /* no record at all (it could not be mapped): the same */
    mnt_handle_use_dirty(NULL);
    mnt_handle_setup(NULL, 4, 1, 0);
    uint64_t old3 = (3ULL << 48) | 1;
    assert_int_equal(insert(old3, 30, 0, &x, &winner, &lost), old3);
    assert_int_equal(lost, 1);
    assert_ptr_equal(mnt_handle_remove(old3, 0), &x);

    dtab = NULL;
    have_dtab = 0;
    mnt_dirty_free(t);
}

/* An upgrade passes the record's memory file to the new binary, which maps the
 * same table again: slots, the overflow count and the session carry over, and a
 * record of another layout is refused. */
static void test_dirty_record_handover(void **state)
{
    struct mnt_dirty_tab *t = mnt_dirty_create();
    assert_non_null(t);
    int fd = mnt_dirty_fd(t);
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    mnt_dirty_set_session(t, 77);
    t->slot[3].ino = 40;
    t->slot[3].id = (5ULL << 48) | 2;
    t->overflow = 1;
    int fd2 = dup(fd);                       /* what the exec'd binary inherits */
    assert_true(fd2 >= 0);
    struct mnt_dirty_tab *u = mnt_dirty_attach(fd2);
    assert_non_null(u);
    assert_ptr_not_equal(u, t);
    assert_int_equal(mnt_dirty_session(u), 77);
    assert_int_equal(u->slot[3].id, (5ULL << 48) | 2);
    assert_int_equal(u->slot[3].ino, 40);
    assert_int_equal(u->overflow, 1);
    u->slot[3].id = 0;                       /* one memory: the other mapping sees it */
    assert_int_equal(t->slot[3].id, 0);
    assert_int_equal(mnt_dirty_fd(u), fd2);
    munmap(t, sizeof(*t));                   /* the old image's mapping goes at exec */
    close(fd);
    mnt_dirty_free(u);
    assert_int_equal(fcntl(fd2, F_GETFD), -1);   /* closed with the table */

    /* a memory file of another size, or without the magic, is not used */
    int bad = memfd_create("x", MFD_CLOEXEC);
    assert_true(bad >= 0);
    assert_int_equal(ftruncate(bad, 4096), 0);
    assert_null(mnt_dirty_attach(bad));
    bad = memfd_create("y", MFD_CLOEXEC);
    assert_true(bad >= 0);
    assert_int_equal(ftruncate(bad, (off_t)sizeof(struct mnt_dirty_tab)), 0);
    assert_null(mnt_dirty_attach(bad));
    (void)state;
}

/* Lock owners noted per handle: a flush of the owner forgets it, a release of
 * this worker's handle forgets its owners silently (core releases them), a
 * release of an earlier worker's handle hands them out to be released; the
 * notes survive into the next worker. */
static uint64_t got_ino[32], got_owner[32];
static unsigned ngot;

static void got_one(void *arg, uint64_t ino, uint64_t owner)
{
    assert_ptr_equal(arg, &ngot);
    assert_true(ngot < 32);
    got_ino[ngot] = ino;
    got_owner[ngot++] = owner;
}

static void test_lock_owners(void **state)
{
    int a, b;
    struct mnt_dirty_tab *t = mnt_dirty_create();
    assert_non_null(t);
    mnt_handle_use_dirty(t);
    mnt_handle_setup(NULL, 1, 0, 0);
    uint64_t ia = mnt_handle_new(0, &a, 50), ib = mnt_handle_new(0, &b, 51);
    mnt_handle_lock_note(ia, 50, 0xa1);        /* an OFD owner */
    mnt_handle_lock_note(ia, 50, 0xa1);        /* noted once */
    mnt_handle_lock_note(ia, 50, 0xf1);        /* a process's file table */
    mnt_handle_lock_note(ib, 51, 0xb1);
    assert_int_equal(t->nowners, 3);
    mnt_handle_lock_flushed(50, 0xf1);         /* close(2) by that process */
    assert_int_equal(t->nowners, 2);
    mnt_handle_lock_flushed(51, 0xa1);         /* another inode: nothing */
    assert_int_equal(t->nowners, 2);
    ngot = 0;
    assert_ptr_equal(mnt_handle_remove(ib, 0), &b);
    mnt_handle_lock_release(ib, got_one, &ngot);    /* this worker's: core knows */
    assert_int_equal(ngot, 0);
    assert_int_equal(t->nowners, 1);

    /* worker 2 after a crash: ia's OFD owner is released at ia's release */
    t->nowners = 7;                            /* a count the crash left wrong */
    mnt_handle_setup(NULL, 2, 1, 0);
    assert_int_equal(t->nowners, 1);
    mnt_handle_lock_release(ia, got_one, &ngot);
    assert_int_equal(ngot, 1);
    assert_int_equal(got_ino[0], 50);
    assert_int_equal(got_owner[0], 0xa1);
    assert_int_equal(t->nowners, 0);
    mnt_handle_lock_release(ia, got_one, &ngot);    /* once */
    assert_int_equal(ngot, 1);

    /* more owners of one handle than a batch, all handed out */
    uint64_t old = (1ULL << 48) | 99;
    for (uint64_t o = 1; o <= 20; o++)
        mnt_handle_lock_note(old, 60, o);
    assert_int_equal(t->nowners, 20);
    ngot = 0;
    mnt_handle_lock_release(old, got_one, &ngot);
    assert_int_equal(ngot, 20);
    uint64_t sum = 0;
    for (unsigned i = 0; i < ngot; i++)
        sum += got_owner[i];
    assert_int_equal(sum, 210);
    assert_int_equal(t->nowners, 0);

    /* unlocks still to do: kept once per (inode, owner, kind), cleared when done */
    mnt_handle_unlock_hook(NULL, 70, 0xc1, 1, 1);
    mnt_handle_unlock_hook(NULL, 70, 0xc1, 1, 1);
    mnt_handle_unlock_hook(NULL, 70, 0xc1, 0, 1);      /* its byte-range locks: another */
    unsigned used = 0;
    for (unsigned k = 0; k < MNT_UNLOCK_SLOTS; k++)
        used += t->unl[k].key != 0;
    assert_int_equal(used, 2);
    mnt_handle_unlock_hook(NULL, 70, 0xc1, 1, 0);
    used = 0;
    for (unsigned k = 0; k < MNT_UNLOCK_SLOTS; k++)
        used += t->unl[k].key == MNT_UNLOCK_POSIX && t->unl[k].ino == 70;
    assert_int_equal(used, 1);
    /* a worker that did not take the session over forgets them */
    assert_int_equal(mnt_handle_unlocks_adopt(NULL, 0), 0);
    for (unsigned k = 0; k < MNT_UNLOCK_SLOTS; k++)
        assert_int_equal(t->unl[k].key, 0);
    dtab = NULL;
    have_dtab = 0;
    mnt_dirty_free(t);
    (void)state;
}

/* Writes and commits from many threads on a few handles of two inodes: no
 * deadlock, no bookkeeping left behind, and a final commit with nothing in
 * flight cleans every handle. */
#define DR_THREADS 6
#define DR_HANDLES 4
static uint64_t dr_ids[DR_HANDLES];

static void *dirty_stress_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < 20000; i++) {
        unsigned r = (unsigned)rand_r(&seed);
        int hi = (int)(r % DR_HANDLES);
        uint64_t ino = 100 + (uint64_t)(hi % 2);
        struct keg_fh *fh = NULL;
        struct mnt_dtok t;
        if ((r >> 8) % 3) {
            if (mnt_handle_write_begin(dr_ids[hi], ino, &fh, &t) == 0)
                mnt_handle_write_end(&t);
        } else {
            mnt_handle_commit_begin(dr_ids[hi], ino, &t);
            (void)mnt_handle_commit_end(&t, (r >> 12) % 5 ? 0 : -EIO);
        }
    }
    return NULL;
}

static void test_dirty_record_threads(void **state)
{
    static int objs[DR_HANDLES];
    pthread_t th[DR_THREADS];
    struct mnt_dtok t;
    struct mnt_dirty_tab *tab = mnt_dirty_create();
    assert_non_null(tab);
    mnt_handle_use_dirty(tab);
    mnt_handle_setup(NULL, 1, 0, 0);
    for (int i = 0; i < DR_HANDLES; i++)
        dr_ids[i] = mnt_handle_new(0, &objs[i], 100 + (uint64_t)(i % 2));
    for (int i = 0; i < DR_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, dirty_stress_thread,
                                        (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < DR_THREADS; i++)
        pthread_join(th[i], NULL);
    for (uint64_t ino = 100; ino < 102; ino++) {
        mnt_handle_commit_begin(0, ino, &t);
        assert_int_equal(mnt_handle_commit_end(&t, 0), 0);
    }
    assert_int_equal(dirty_used(tab), 0);
    for (unsigned b = 0; b < NDINO; b++)
        assert_null(dinos[b]);                  /* no bookkeeping left */
    for (int i = 0; i < DR_HANDLES; i++)
        assert_ptr_equal(mnt_handle_remove(dr_ids[i], 0), &objs[i]);
    dtab = NULL;
    have_dtab = 0;
    mnt_dirty_free(tab);
}

/* Many handles: all found, counts in the stats follow. */
static void test_handle_many(void **state)
{
    static int objs[5000];
    static uint64_t ids[5000];
    mnt_handle_setup(NULL, 1, 0, 0);
    for (int i = 0; i < 5000; i++) {
        ids[i] = mnt_handle_new(i % 2, &objs[i], (uint64_t)i);
        assert_true(ids[i] != 0);
    }
    assert_int_equal(__atomic_load_n(&open_files_n, __ATOMIC_RELAXED), 2500);
    assert_int_equal(__atomic_load_n(&open_dirs_n, __ATOMIC_RELAXED), 2500);
    for (int i = 0; i < 5000; i++)
        assert_ptr_equal(mnt_handle_remove(ids[i], i % 2), &objs[i]);
    assert_int_equal(__atomic_load_n(&open_files_n, __ATOMIC_RELAXED), 0);
    assert_int_equal(__atomic_load_n(&open_dirs_n, __ATOMIC_RELAXED), 0);
}

/* The stats file: what is written is read back; a dead mounter's is pruned. */
static void test_stats_file(void **state)
{
    char dir[] = "/tmp/kegfs-test-live-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("KEGFS_RUN_DIR", dir, 1);
    char *mdir = keg_asprintf("%s/mounts", dir);
    assert_int_equal(mkdir(mdir, 0700), 0);

    struct mnt_live l, r;
    memset(&l, 0, sizeof(l));
    l.pid = (uint64_t)getpid();
    l.time = 1000;
    l.started = 990;
    l.has_writeback = 1;
    l.staged_bytes = 123456789;
    l.staged_objects = 31;
    l.uploading = 4;
    l.upload_rate_bps = 1 << 20;
    l.cache_hits = 7;
    l.open_files = 3;
    l.restarts = 2;
    snprintf(l.phase, sizeof(l.phase), "draining");
    assert_int_equal(mnt_stats_read("/mnt/s", &r), -ENOENT);
    char *path = stats_path("/mnt/s");
    assert_int_equal(write_live(path, &l), 0);
    assert_int_equal(mnt_stats_read("/mnt/s", &r), 0);
    assert_memory_equal(&l, &r, sizeof(l));

    /* printing names the figures (and the restarts) */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mnt_stats_print(f, &r, "  ");
    fclose(f);
    assert_non_null(strstr(buf, "draining"));
    assert_non_null(strstr(buf, "31 objects"));
    assert_non_null(strstr(buf, "4 in flight"));
    assert_non_null(strstr(buf, "restarted 2 times"));
    assert_non_null(strstr(buf, "no SSD cache"));
    free(buf);    /* checksrc: ok -- open_memstream's buffer */

    /* a dead mounter's stats file is removed by the next mount's prune */
    pid_t dead = fork();
    assert_true(dead >= 0);
    if (dead == 0)
        _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    l.pid = (uint64_t)dead;
    assert_int_equal(write_live(path, &l), 0);
    mnt_state_prune();
    assert_int_equal(mnt_stats_read("/mnt/s", &r), -ENOENT);
    keg_free(path);
    rmdir(mdir);
    rmdir(dir);
    keg_free(mdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handle_ids),
        cmocka_unit_test(test_handle_direct),
        cmocka_unit_test(test_handle_unknown),
        cmocka_unit_test(test_handle_many),
        cmocka_unit_test(test_dirty_record),
        cmocka_unit_test(test_dirty_record_threads),
        cmocka_unit_test(test_dirty_record_handover),
        cmocka_unit_test(test_lock_owners),
        cmocka_unit_test(test_stats_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
