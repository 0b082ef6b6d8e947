/* test_store_helpers.h -- shared by the object-stack layer tests (test_cache_ssd.c,
 * test_wb.c): a "counting" store layer and the small helpers around it.
 *
 * The counting layer sits between the layer under test and the bottom store and
 * counts the gets, puts and dels that reach it, and the most puts in it at once.  Knobs (all 0 = off; a test that
 * sets one resets it in its fixture):
 *   cnt_get_delay_ms  each get sleeps this long first
 *   cnt_put_delay_ms  each put sleeps this long first
 *   cnt_put_err       a -errno every put returns (not counted, not passed on)
 * Register it once in main() with keg_obj_register(&cnt_ops), then stack it with
 * keg_obj_open("counting", NULL, inner, &o).
 *
 * Block helpers (make_block, put_block): a test that wants them defines
 * TEST_BLOCK_BYTE(id, i), the i-th raw byte of block id, before including this
 * (after <cmocka.h>).
 */
#ifndef TEST_STORE_HELPERS_H
#define TEST_STORE_HELPERS_H

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "keg/obj.h"
#include "keg/stack.h"

struct cnt {
    atomic_int gets, puts, dels;
    atomic_int del_calls;      /* del_keys calls (each counts its keys in dels) */
    atomic_int puts_now;       /* puts in this layer at the moment */
    atomic_int puts_max;       /* the most puts that were in it at once */
};
static atomic_uint cnt_get_delay_ms;
static atomic_uint cnt_put_delay_ms;
static atomic_int cnt_put_err;       /* a -errno every put returns, 0 for none */

static inline void ms_sleep(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static inline int cnt_open(struct keg_obj *o, const struct keg_obj_conf *conf)
{
    (void)conf;
    return o->inner ? 0 : -EINVAL;
}
static inline void cnt_close(struct keg_obj *o)
{
    (void)o;
}
static inline ssize_t cnt_get(struct keg_obj *o, const char *key, uint64_t off, void *buf,
                              size_t len)
{
    struct cnt *c = o->priv;
    atomic_fetch_add(&c->gets, 1);
    if (atomic_load(&cnt_get_delay_ms))
        ms_sleep(atomic_load(&cnt_get_delay_ms));
    return keg_obj_get(o->inner, key, off, buf, len);
}
static inline int cnt_put(struct keg_obj *o, const char *key, const void *buf, size_t len)
{
    struct cnt *c = o->priv;
    int err = atomic_load(&cnt_put_err);
    int now = atomic_fetch_add(&c->puts_now, 1) + 1, max = atomic_load(&c->puts_max);
    int rc;
    while (now > max && !atomic_compare_exchange_weak(&c->puts_max, &max, now))
        ;
    if (atomic_load(&cnt_put_delay_ms))
        ms_sleep(atomic_load(&cnt_put_delay_ms));
    if (err) {
        rc = err;
    } else {
        atomic_fetch_add(&c->puts, 1);
        rc = keg_obj_put(o->inner, key, buf, len);
    }
    atomic_fetch_sub(&c->puts_now, 1);
    return rc;
}
static inline int cnt_del(struct keg_obj *o, const char *key)
{
    struct cnt *c = o->priv;
    atomic_fetch_add(&c->dels, 1);
    return keg_obj_del(o->inner, key);
}
static inline int cnt_del_keys(struct keg_obj *o, const char *const *keys, size_t n)
{
    struct cnt *c = o->priv;
    atomic_fetch_add(&c->dels, (int)n);
    atomic_fetch_add(&c->del_calls, 1);
    return keg_obj_del_keys(o->inner, keys, n);
}
static const struct keg_obj_ops cnt_ops = {
    .name = "counting",
    .version = 1,
    .priv_size = sizeof(struct cnt),
    .open = cnt_open,
    .close = cnt_close,
    .get = cnt_get,
    .put = cnt_put,
    .del = cnt_del,
    .del_keys = cnt_del_keys,
    .head = keg_obj_def_head,
    .list = keg_obj_def_list,
    .sync = keg_obj_def_sync,
    .sync_keys = keg_obj_def_sync_keys,
};

/* The counters of the counting layer in the stack top, NULL if there is none. */
static inline struct cnt *cnt_of(struct keg_obj *top)
{
    for (struct keg_obj *o = top; o; o = o->inner) {
        if (o->ops == &cnt_ops)
            return o->priv;
    }
    return NULL;
}

#ifdef TEST_BLOCK_BYTE
/* Encodes block id (blen raw bytes of TEST_BLOCK_BYTE) into enc[0..cap) and its
 * key into key[0..ksize).  Returns the encoded length. */
static inline size_t make_block(uint64_t id, uint32_t blen, uint8_t *enc, size_t cap, char *key,
                                size_t ksize)
{
    uint8_t *raw = malloc(blen ? blen : 1);
    struct keg_block_id bid = {.slice = id, .indx = 0, .blen = blen};
    size_t olen = 0;
    for (uint32_t i = 0; i < blen; i++)
        raw[i] = TEST_BLOCK_BYTE(id, i);
    assert_int_equal(keg_block_encode(KEG_CODEC_NONE, &bid, raw, blen, enc, cap, &olen), 0);
    free(raw);
    keg_block_key(key, ksize, "vol1", id, 0, blen);
    return olen;
}

static inline void put_block(struct keg_obj *o, uint64_t id, uint32_t blen)
{
    size_t cap = KEG_BLOCK_HDR + blen;
    uint8_t *enc = malloc(cap);
    char key[128];
    size_t olen = make_block(id, blen, enc, cap, key, sizeof(key));
    assert_int_equal(keg_obj_put(o, key, enc, olen), 0);
    free(enc);
}
#endif

#endif
