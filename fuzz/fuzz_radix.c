/*
 * fuzz_radix.c — drives kv/radix + kv/kvpool with an operation sequence read
 * from the input bytes (match, insert with arbitrary block ids, unref,
 * set_ready, remove_pending, evict, extra refs) and PANICs (abort) when a
 * checker or a global invariant fails:
 *   - radix_check and kvpool_check after every operation;
 *   - sum of all refcounts == blocks the tree indexes + references the
 *     harness holds;
 *   - after releasing everything, evicting everything returns the pool to
 *     all-free.
 * The harness keeps the reference rules (it only unrefs what it holds), so
 * any abort is a bug in kv/. Block ids passed to radix_insert are partly
 * arbitrary bytes: invalid ones must be rejected with ERR_INVALID.
 */
#include "kv/kvpool.h"
#include "kv/radix.h"

#include <stdlib.h>
#include <string.h>

typedef struct cursor {
    const uint8_t *p;
    size_t n, i;
} cursor;

static int next(cursor *c) { return c->i < c->n ? c->p[c->i++] : 0; }

enum { MAXD = 6, MAXBT = 4, HELD_CAP = 4096 };

typedef struct harness {
    kvpool *pool;
    radix *t;
    int n_blocks, bt;
    int32_t held[HELD_CAP];
    int n_held;
} harness;

static void hold(harness *h, int32_t b) {
    if (h->n_held < HELD_CAP) h->held[h->n_held++] = b;
    else kvpool_unref(h->pool, b);
}

static void verify(harness *h, const char *op) {
    err_t e = {0};
    if (radix_check(h->t, &e)) PANIC("after %s: %s", op, e.msg);
    if (kvpool_check(h->pool, &e)) PANIC("after %s: %s", op, e.msg);
    long sum = 0;
    for (int b = 0; b < h->n_blocks; b++) sum += kvpool_refcount(h->pool, b);
    if (sum != (long)radix_n_cached(h->t) + h->n_held)
        PANIC("after %s: refcounts sum to %ld, expected %d cached + %d held", op, sum, radix_n_cached(h->t),
              h->n_held);
}

static int read_tokens(cursor *c, int32_t *toks, int n) {
    for (int i = 0; i < n; i++) toks[i] = next(c) % 3;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cursor c = {data, size, 0};
    harness *h = calloc(1, sizeof *h);
    int cfg = next(&c);
    h->n_blocks = 1 + (cfg & 31);
    h->bt = 1 + ((cfg >> 5) & 3);
    h->pool = kvpool_new(h->n_blocks);
    h->t = radix_new(h->pool, h->bt);
    int32_t toks[MAXD * MAXBT + MAXBT], blk[MAXD + 1], mine[MAXD];
    int n_ops = 0;
    while (c.i < c.n && n_ops++ < 2000) {
        int op = next(&c) % 8;
        switch (op) {
        case 0: { /* match */
            int n_tok = read_tokens(&c, toks, next(&c) % (MAXD * h->bt + h->bt));
            int cap = next(&c) % (MAXD + 2);
            int flags = next(&c), np = 0;
            int r = radix_match(h->t, toks, n_tok, blk, cap, (flags & 1) ? &np : NULL);
            if (r < 0 || np < 0 || r + np > cap) PANIC("match returned %d + %d for cap %d", r, np, cap);
            for (int i = 0; i < r + np; i++) hold(h, blk[i]);
            break;
        }
        case 1: { /* insert */
            int nb = next(&c) % (MAXD + 1);
            read_tokens(&c, toks, nb * h->bt);
            for (int i = 0; i < nb; i++) {
                int sel = next(&c);
                mine[i] = -1;
                if (sel & 1) {
                    blk[i] = (int32_t)(sel >> 1) - 2; /* arbitrary, maybe invalid */
                    continue;
                }
                if (kvpool_n_free(h->pool) == 0) radix_evict(h->t, 1);
                blk[i] = mine[i] = kvpool_alloc(h->pool); /* -1 when still full: invalid */
            }
            int state = (next(&c) & 1) ? RADIX_READY : RADIX_PENDING;
            int before = radix_n_cached(h->t);
            int r = radix_insert(h->t, toks, nb, blk, state);
            if (r == ERR_INVALID) {
                if (radix_n_cached(h->t) != before) PANIC("rejected insert changed the tree");
            } else if (r < 0 || r > nb || radix_n_cached(h->t) != before + r) {
                PANIC("insert returned %d for %d blocks (cached %d -> %d)", r, nb, before, radix_n_cached(h->t));
            }
            for (int i = 0; i < nb; i++) {
                if (mine[i] < 0) continue;
                if (r >= 0 && blk[i] != mine[i] && radix_block_state(h->t, blk[i]) == RADIX_NONE)
                    PANIC("insert returned unindexed block %d", (int)blk[i]);
                hold(h, mine[i]); /* keep our block either way; unref later */
            }
            break;
        }
        case 2:
        case 3: { /* unref something we hold */
            if (!h->n_held) break;
            int i = next(&c) % h->n_held;
            int32_t b = h->held[i];
            h->held[i] = h->held[--h->n_held];
            kvpool_unref(h->pool, b);
            break;
        }
        case 4: { /* set_ready on any id */
            int32_t b = (int32_t)(next(&c) % (h->n_blocks + 2)) - 1;
            int was = radix_block_state(h->t, b);
            int r = radix_set_ready(h->t, b);
            if ((was == RADIX_NONE) != (r == ERR_NOTFOUND)) PANIC("set_ready(%d) returned %d", (int)b, r);
            if (r == 0 && radix_block_state(h->t, b) != RADIX_READY) PANIC("set_ready(%d) did not", (int)b);
            break;
        }
        case 5: { /* remove_pending on any id */
            int32_t b = (int32_t)(next(&c) % (h->n_blocks + 2)) - 1;
            int was = radix_block_state(h->t, b);
            int before = radix_n_cached(h->t);
            int r = radix_remove_pending(h->t, b);
            int want_err = was == RADIX_NONE ? ERR_NOTFOUND : was == RADIX_READY ? ERR_INVALID : 0;
            if (want_err ? r != want_err : (r < 1 || radix_n_cached(h->t) != before - r))
                PANIC("remove_pending(%d) returned %d (state %d)", (int)b, r, was);
            break;
        }
        case 6: { /* evict */
            int n = next(&c) % 5, free0 = kvpool_n_free(h->pool);
            int ev0 = radix_n_evictable(h->t);
            int r = radix_evict(h->t, n);
            if (r < 0 || r > n || kvpool_n_free(h->pool) != free0 + r || (ev0 > 0 && n > 0 && r == 0))
                PANIC("evict(%d) returned %d", n, r);
            break;
        }
        case 7: { /* one more reference on a held block */
            if (!h->n_held) break;
            int32_t b = h->held[next(&c) % h->n_held];
            kvpool_ref(h->pool, b);
            hold(h, b);
            break;
        }
        }
        verify(h, "op");
    }
    while (h->n_held) kvpool_unref(h->pool, h->held[--h->n_held]);
    verify(h, "drain");
    radix_evict(h->t, h->n_blocks);
    if (radix_n_cached(h->t) != 0 || kvpool_n_free(h->pool) != h->n_blocks)
        PANIC("after evicting everything: %d cached, %d free of %d", radix_n_cached(h->t), kvpool_n_free(h->pool),
              h->n_blocks);
    radix_free(h->t);
    kvpool_free(h->pool);
    free(h);
    return 0;
}
