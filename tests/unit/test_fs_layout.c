/* test_fs_layout.c -- fs_layout (visible segments of a chunk) against a
 * brute-force byte-map model, on 10k random slice lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "keg/keg.h"
#include "keg/mem.h"
#include "fs/fs_i.h"

#define SPAN 1200

struct owner {
    uint64_t id;      /* 0: hole */
    uint32_t size;
    uint32_t soff;
};

static uint64_t rng_state = 88172645463325252ULL;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return n ? (uint32_t)(rng_state % n) : 0;
}

/* The model: for every byte, the newest slice covering it. */
static void model(const struct keg_slice *sl, size_t n, uint64_t base, uint32_t span,
                  struct owner *m)
{
    memset(m, 0, span * sizeof(*m));
    for (size_t k = 0; k < n; k++) {
        for (uint32_t i = 0; i < sl[k].len; i++) {
            uint64_t p = (uint64_t)sl[k].pos + i;
            if (p < base || p >= base + span)
                continue;
            struct owner *o = &m[p - base];
            o->id = sl[k].id;
            o->size = sl[k].id ? sl[k].size : 0;
            o->soff = sl[k].id ? sl[k].off + i : 0;
        }
    }
}

static void check(const struct keg_slice *sl, size_t n, uint64_t base, uint32_t from, uint32_t to)
{
    static struct owner m[SPAN + 64];
    struct fs_seg *seg = NULL;
    size_t nseg = 0;
    uint32_t span = (uint32_t)(to > base ? to - base : 0);

    assert_true(span <= SPAN + 64);
    model(sl, n, base, span, m);
    assert_int_equal(fs_layout(sl, n, from, to, &seg, &nseg), 0);
    if (from >= to) {
        assert_null(seg);
        assert_int_equal(nseg, 0);
        return;
    }
    assert_true(nseg > 0);
    assert_int_equal(seg[0].pos, from);
    uint64_t p = from;
    for (size_t k = 0; k < nseg; k++) {
        assert_int_equal(seg[k].pos, p);
        assert_true(seg[k].len > 0);
        for (uint32_t i = 0; i < seg[k].len; i++) {
            const struct owner *o = &m[p + i - base];
            assert_int_equal(o->id, seg[k].id);
            if (o->id) {
                assert_int_equal(o->size, seg[k].size);
                assert_int_equal(o->soff, seg[k].soff + i);
            }
        }
        if (k > 0) {
            /* normalised: neighbours are never the same contiguous source */
            const struct fs_seg *a = &seg[k - 1];
            int mergeable = a->id == seg[k].id &&
                            (a->id == 0 || a->soff + a->len == seg[k].soff);
            assert_false(mergeable);
        }
        p += seg[k].len;
    }
    assert_int_equal(p, to);
    keg_free(seg);
}

static void random_list(struct keg_slice *sl, size_t n, uint32_t base, uint32_t span)
{
    for (size_t k = 0; k < n; k++) {
        int hole = rnd(6) == 0;
        uint32_t len = rnd(4) == 0 ? 0 : 1 + rnd(span / 2);
        sl[k].pos = base + rnd(span);
        sl[k].len = len;
        sl[k].off = rnd(3) == 0 ? rnd(500) : 0;
        sl[k].size = sl[k].off + len + rnd(50);
        sl[k].id = hole ? 0 : 1 + rnd(8);    /* repeated ids: shared slices */
        if (hole) {
            sl[k].off = 0;
            sl[k].size = len;
        }
    }
}

static void test_layout_random(void **state)
{
    struct keg_slice sl[40];
    (void)state;
    for (int c = 0; c < 10000; c++) {
        size_t n = rnd(c < 5000 ? 8 : 40);
        uint32_t from = rnd(SPAN);
        uint32_t to = from + rnd(SPAN - from + 1);
        random_list(sl, n, 0, 1000);
        check(sl, n, 0, from, to);
    }
}

/* Positions near the end of a 64 MiB chunk: no 32-bit overflow. */
static void test_layout_chunk_end(void **state)
{
    struct keg_slice sl[20];
    uint32_t base = (uint32_t)KEG_CHUNK_SIZE - 1000;
    (void)state;
    for (int c = 0; c < 2000; c++) {
        size_t n = rnd(20);
        for (size_t k = 0; k < n; k++) {
            uint32_t pos = rnd(1000);
            uint32_t len = 1 + rnd(1000 - pos);
            sl[k].pos = base + pos;
            sl[k].len = len;
            sl[k].off = 0xFFFF0000u - len - rnd(1000);
            sl[k].size = sl[k].off + len;
            sl[k].id = 1 + rnd(4);
        }
        uint32_t from = base + rnd(1000);
        uint32_t to = from + rnd((uint32_t)KEG_CHUNK_SIZE - from + 1);
        check(sl, n, base, from, to);
    }
}

static void test_layout_basic(void **state)
{
    struct fs_seg *seg = NULL;
    size_t n = 0;
    (void)state;

    /* empty list: one hole */
    assert_int_equal(fs_layout(NULL, 0, 0, 100, &seg, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(seg[0].id, 0);
    assert_int_equal(seg[0].len, 100);
    keg_free(seg);

    /* newer slice in the middle of an older one */
    struct keg_slice sl[2] = {
        {.id = 7, .size = 100, .off = 0, .len = 100, .pos = 0},
        {.id = 9, .size = 10, .off = 0, .len = 10, .pos = 40},
    };
    assert_int_equal(fs_layout(sl, 2, 0, 100, &seg, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(seg[0].id, 7);
    assert_int_equal(seg[0].len, 40);
    assert_int_equal(seg[1].id, 9);
    assert_int_equal(seg[1].pos, 40);
    assert_int_equal(seg[2].id, 7);
    assert_int_equal(seg[2].pos, 50);
    assert_int_equal(seg[2].soff, 50);
    keg_free(seg);

    /* whole-chunk range */
    assert_int_equal(fs_layout(sl, 2, 0, (uint32_t)KEG_CHUNK_SIZE, &seg, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(seg[3].id, 0);
    assert_int_equal(seg[3].pos + seg[3].len, KEG_CHUNK_SIZE);
    keg_free(seg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_basic),
        cmocka_unit_test(test_layout_random),
        cmocka_unit_test(test_layout_chunk_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
