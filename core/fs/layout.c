/* layout.c -- visible segments of a chunk from its slice list.
 *
 * DESIGN
 * A chunk's slice list is ordered oldest first; a later slice shadows earlier
 * ones where they overlap, and bytes no slice covers read as zeros.  fs_layout
 * "paints" from the newest slice to the oldest: it keeps the list of ranges
 * still uncovered (gaps) and lets each slice claim the parts of the gaps it
 * overlaps.  A slice can only split one gap into two, so there are at most
 * n+1 gaps and 2n+1 segments; the cost is O(n * gaps) with an early stop as
 * soon as everything is covered (the newest slices usually cover the range).
 * The result is sorted and normalised (adjacent holes merged, contiguous
 * pieces of one slice merged) so that equal contents give equal layouts.
 * It is a pure function, unit-tested against a byte-map model
 * (tests/unit/test_fs_layout.c).
 */
#include <stdlib.h>
#include <string.h>

#include "keg/mem.h"
#include "fs_i.h"

struct gap {
    uint64_t lo, hi;
};

static int seg_cmp(const void *a, const void *b)
{
    const struct fs_seg *x = a;
    const struct fs_seg *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int seg_push(struct fs_seg **v, size_t *n, size_t *cap, const struct fs_seg *s)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        struct fs_seg *nv = keg_realloc(*v, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        *v = nv;
        *cap = ncap;
    }
    (*v)[(*n)++] = *s;
    return 0;
}

/* Merge neighbours that are the same source: two holes, or two pieces of one
 * slice where the second continues the first inside the slice. */
static size_t seg_normalise(struct fs_seg *v, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w > 0) {
            struct fs_seg *p = &v[w - 1];
            int same = p->id == v[i].id &&
                       (p->id == 0 || (uint64_t)p->soff + p->len == v[i].soff);
            if (same && (uint64_t)p->pos + p->len == v[i].pos) {
                p->len += v[i].len;
                continue;
            }
        }
        v[w++] = v[i];
    }
    return w;
}

int fs_layout(const struct keg_slice *sl, size_t n, uint32_t from, uint32_t to,
              struct fs_seg **out, size_t *nout)
{
    struct gap *gaps = NULL;
    struct gap *tmp = NULL;
    struct fs_seg *segs = NULL;
    size_t ngaps = 0;
    size_t nsegs = 0;
    size_t csegs = 0;
    int rc = 0;

    *out = NULL;
    *nout = 0;
    if (from >= to)
        return 0;
    gaps = keg_malloc((n + 2) * sizeof(*gaps));
    tmp = keg_malloc((n + 2) * sizeof(*tmp));
    if (!gaps || !tmp) {
        rc = -ENOMEM;
        goto out;
    }
    gaps[0].lo = from;
    gaps[0].hi = to;
    ngaps = 1;

    for (size_t k = n; k > 0 && ngaps > 0; k--) {
        const struct keg_slice *s = &sl[k - 1];
        uint64_t a = s->pos;
        uint64_t b = (uint64_t)s->pos + s->len;
        size_t nt = 0;
        if (s->len == 0 || b <= from || a >= to) {
            continue;
        }
        for (size_t j = 0; j < ngaps; j++) {
            struct gap g = gaps[j];
            if (b <= g.lo || a >= g.hi) {
                tmp[nt++] = g;
                continue;
            }
            uint64_t lo = KEG_MAX(a, g.lo);
            uint64_t hi = KEG_MIN(b, g.hi);
            struct fs_seg sg = {
                .pos = (uint32_t)lo,
                .len = (uint32_t)(hi - lo),
                .id = s->id,
                .size = s->id ? s->size : 0,
                .soff = s->id ? (uint32_t)(s->off + (lo - a)) : 0,
            };
            rc = seg_push(&segs, &nsegs, &csegs, &sg);
            if (rc < 0)
                goto out;
            if (g.lo < lo) {
                tmp[nt].lo = g.lo;
                tmp[nt].hi = lo;
                nt++;
            }
            if (hi < g.hi) {
                tmp[nt].lo = hi;
                tmp[nt].hi = g.hi;
                nt++;
            }
        }
        KEG_ASSERT(nt <= n + 2);
        struct gap *sw = gaps;
        gaps = tmp;
        tmp = sw;
        ngaps = nt;
    }
    for (size_t j = 0; j < ngaps; j++) {
        struct fs_seg sg = {
            .pos = (uint32_t)gaps[j].lo,
            .len = (uint32_t)(gaps[j].hi - gaps[j].lo),
        };
        rc = seg_push(&segs, &nsegs, &csegs, &sg);
        if (rc < 0)
            goto out;
    }
    qsort(segs, nsegs, sizeof(*segs), seg_cmp);
    nsegs = seg_normalise(segs, nsegs);
    *out = segs;
    *nout = nsegs;
    segs = NULL;
out:
    keg_free(segs);
    keg_free(gaps);
    keg_free(tmp);
    return rc;
}
