/* test_radix.c — kv/radix: directed tests of the contract (LRU eviction
 * order, referenced blocks never evicted, parents evictable after their
 * children, PENDING reporting, duplicate inserts, cancellation of a pending
 * subtree, partial blocks, many children) and a randomized differential test
 * against a naive model: a flat table of indexed prefixes searched by linear
 * scan, with its own refcounts and logical clock, checked against the tree
 * and the pool (radix_check + kvpool_check) after every operation. */
#include "kv/kvpool.h"
#include "kv/radix.h"
#include "test.h"

static int checks_ok(const radix *t, const kvpool *p) {
    err_t e = {0};
    int rc = radix_check(t, &e);
    if (rc) fprintf(stderr, "radix_check: %s\n", e.msg);
    int rc2 = kvpool_check(p, &e);
    if (rc2) fprintf(stderr, "kvpool_check: %s\n", e.msg);
    return rc ? rc : rc2;
}

/* uniform in [0, n), from test.h's reproducible xorshift */
static uint32_t rnd(uint32_t n) { return (uint32_t)((rng_u64() >> 11) % n); }

/* ---- directed tests ------------------------------------------------------- */

/* Inserts one READY block holding `label` (bt tokens) under the root with a
 * fresh block, keeps nothing: the caller's reference is dropped at once. */
static int32_t insert_one_ready(radix *t, kvpool *p, const int32_t *label) {
    int32_t b = kvpool_alloc(p);
    int32_t blk[1] = {b};
    CHECK_EQ_INT(radix_insert(t, label, 1, blk, RADIX_READY), 1);
    CHECK_EQ_INT(blk[0], b);
    kvpool_unref(p, b);
    return b;
}

static void test_lru_order(void) {
    kvpool *p = kvpool_new(8);
    radix *t = radix_new(p, 2);
    int32_t la[2] = {1, 1}, lb[2] = {2, 2}, lc[2] = {3, 3};
    int32_t a = kvpool_alloc(p), b = kvpool_alloc(p), c = kvpool_alloc(p);
    int32_t x[1];
    x[0] = a; CHECK_EQ_INT(radix_insert(t, la, 1, x, RADIX_READY), 1);
    x[0] = b; CHECK_EQ_INT(radix_insert(t, lb, 1, x, RADIX_READY), 1);
    x[0] = c; CHECK_EQ_INT(radix_insert(t, lc, 1, x, RADIX_READY), 1);
    CHECK_EQ_INT(radix_n_evictable(t), 0); /* the callers still hold them */
    /* release order B, A, C: B is the least recently used */
    kvpool_unref(p, b);
    kvpool_unref(p, a);
    kvpool_unref(p, c);
    CHECK_EQ_INT(radix_n_evictable(t), 3);
    CHECK(radix_last_use(t, b) < radix_last_use(t, a));
    CHECK(radix_last_use(t, a) < radix_last_use(t, c));
    CHECK_EQ_INT(checks_ok(t, p), 0);
    CHECK_EQ_INT(radix_evict(t, 1), 1);
    CHECK_EQ_INT(radix_block_state(t, b), RADIX_NONE);
    CHECK_EQ_INT(kvpool_refcount(p, b), 0);
    /* a match (and its release) makes A the most recent: C goes next */
    int32_t got[4];
    CHECK_EQ_INT(radix_match(t, la, 2, got, 4, NULL), 1);
    CHECK_EQ_INT(got[0], a);
    CHECK_EQ_INT(kvpool_refcount(p, a), 2);
    CHECK_EQ_INT(radix_n_evictable(t), 1);
    kvpool_unref(p, a);
    CHECK_EQ_INT(radix_evict(t, 1), 1);
    CHECK_EQ_INT(radix_block_state(t, c), RADIX_NONE);
    CHECK_EQ_INT(radix_block_state(t, a), RADIX_READY);
    CHECK_EQ_INT(radix_evict(t, 5), 1);
    CHECK_EQ_INT(radix_n_cached(t), 0);
    CHECK_EQ_INT(kvpool_n_free(p), 8);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    /* an insert that walks an existing node also refreshes it */
    int32_t d = insert_one_ready(t, p, la), e = insert_one_ready(t, p, lb);
    CHECK(radix_last_use(t, d) < radix_last_use(t, e));
    int32_t y[1] = {kvpool_alloc(p)};
    int32_t own = y[0];
    CHECK_EQ_INT(radix_insert(t, la, 1, y, RADIX_READY), 0);
    CHECK_EQ_INT(y[0], d);
    kvpool_unref(p, own);
    CHECK(radix_last_use(t, d) > radix_last_use(t, e));
    CHECK_EQ_INT(radix_evict(t, 1), 1);
    CHECK_EQ_INT(radix_block_state(t, e), RADIX_NONE);
    CHECK_EQ_INT(radix_block_state(t, d), RADIX_READY);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    radix_free(t);
    CHECK_EQ_INT(kvpool_n_free(p), 8);
    CHECK_EQ_INT(kvpool_check(p, NULL), 0);
    kvpool_free(p);
}

static void test_referenced_and_parents(void) {
    kvpool *p = kvpool_new(6);
    radix *t = radix_new(p, 3);
    int32_t toks[9] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    int32_t blk[3] = {kvpool_alloc(p), kvpool_alloc(p), kvpool_alloc(p)};
    int32_t mine[3] = {blk[0], blk[1], blk[2]};
    CHECK_EQ_INT(radix_insert(t, toks, 3, blk, RADIX_READY), 3);
    CHECK_EQ_INT(kvpool_refcount(p, mine[0]), 2);
    /* every block is referenced by the caller: nothing can go */
    CHECK_EQ_INT(radix_n_evictable(t), 0);
    CHECK_EQ_INT(radix_evict(t, 10), 0);
    CHECK_EQ_INT(radix_n_cached(t), 3);
    /* release the two first: still nothing, the leaf (block 3) is held */
    kvpool_unref(p, mine[0]);
    kvpool_unref(p, mine[1]);
    CHECK_EQ_INT(radix_n_evictable(t), 0);
    CHECK_EQ_INT(radix_evict(t, 10), 0);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    /* another reader holds the middle block: leaf goes, middle stays */
    int32_t got[3];
    CHECK_EQ_INT(radix_match(t, toks, 6, got, 3, NULL), 2);
    kvpool_unref(p, got[0]);
    kvpool_unref(p, mine[2]);
    CHECK_EQ_INT(radix_n_evictable(t), 1);
    CHECK_EQ_INT(radix_evict(t, 10), 1);
    CHECK_EQ_INT(radix_block_state(t, mine[2]), RADIX_NONE);
    CHECK_EQ_INT(radix_n_evictable(t), 0); /* middle is a leaf now, but held */
    CHECK_EQ_INT(checks_ok(t, p), 0);
    kvpool_unref(p, got[1]);
    /* parent becomes evictable once its child is gone: both go, leaf first */
    CHECK_EQ_INT(radix_n_evictable(t), 1);
    CHECK_EQ_INT(radix_evict(t, 1), 1);
    CHECK_EQ_INT(radix_block_state(t, mine[1]), RADIX_NONE);
    CHECK_EQ_INT(radix_block_state(t, mine[0]), RADIX_READY);
    CHECK_EQ_INT(radix_n_evictable(t), 1);
    CHECK_EQ_INT(radix_evict(t, 10), 1);
    CHECK_EQ_INT(radix_n_cached(t), 0);
    CHECK_EQ_INT(kvpool_n_free(p), 6);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    /* a whole chain released at once is evicted deepest first in one call */
    int32_t b2[3] = {kvpool_alloc(p), kvpool_alloc(p), kvpool_alloc(p)};
    int32_t m2[3] = {b2[0], b2[1], b2[2]};
    CHECK_EQ_INT(radix_insert(t, toks, 3, b2, RADIX_READY), 3);
    CHECK_EQ_INT(radix_n_idle(t), 0);
    for (int i = 0; i < 3; i++) kvpool_unref(p, m2[i]);
    CHECK_EQ_INT(radix_n_idle(t), 3);
    CHECK_EQ_INT(radix_n_evictable(t), 1);
    CHECK_EQ_INT(radix_evict(t, 2), 2);
    CHECK_EQ_INT(radix_n_idle(t), 1);
    CHECK_EQ_INT(radix_block_state(t, m2[0]), RADIX_READY);
    CHECK_EQ_INT(radix_block_state(t, m2[1]), RADIX_NONE);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    radix_free(t);
    CHECK_EQ_INT(kvpool_n_free(p), 6);
    kvpool_free(p);
}

static void test_pending(void) {
    kvpool *p = kvpool_new(8);
    radix *t = radix_new(p, 2);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t blk[3] = {kvpool_alloc(p), kvpool_alloc(p), kvpool_alloc(p)};
    int32_t mine[3] = {blk[0], blk[1], blk[2]};
    /* request A registers three blocks it is about to compute */
    CHECK_EQ_INT(radix_insert(t, toks, 3, blk, RADIX_PENDING), 3);
    CHECK_EQ_INT(radix_n_pending(t), 3);
    CHECK_EQ_INT(radix_block_state(t, mine[0]), RADIX_PENDING);
    /* B without n_pending: nothing ready, nothing taken */
    int32_t got[4] = {-7, -7, -7, -7};
    CHECK_EQ_INT(radix_match(t, toks, 8, got, 4, NULL), 0);
    CHECK_EQ_INT(got[0], -7);
    CHECK_EQ_INT(kvpool_refcount(p, mine[0]), 2);
    /* B with n_pending: 0 ready, 3 pending, references on all three */
    int np = -1;
    CHECK_EQ_INT(radix_match(t, toks, 8, got, 4, &np), 0);
    CHECK_EQ_INT(np, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(got[i], mine[i]);
        CHECK_EQ_INT(kvpool_refcount(p, mine[i]), 3);
    }
    for (int i = 0; i < 3; i++) kvpool_unref(p, got[i]);
    /* A finishes the first block */
    CHECK_EQ_INT(radix_set_ready(t, mine[0]), 0);
    CHECK_EQ_INT(radix_set_ready(t, mine[0]), 0); /* idempotent */
    CHECK_EQ_INT(radix_n_pending(t), 2);
    CHECK_EQ_INT(radix_match(t, toks, 8, got, 4, &np), 1);
    CHECK_EQ_INT(np, 2);
    for (int i = 0; i < 3; i++) kvpool_unref(p, got[i]);
    /* a READY block below a PENDING one still counts as pending */
    CHECK_EQ_INT(radix_set_ready(t, mine[2]), 0);
    CHECK_EQ_INT(radix_match(t, toks, 8, got, 4, &np), 1);
    CHECK_EQ_INT(np, 2);
    for (int i = 0; i < 3; i++) kvpool_unref(p, got[i]);
    /* cap limits what is written and referenced */
    CHECK_EQ_INT(radix_match(t, toks, 8, got, 2, &np), 1);
    CHECK_EQ_INT(np, 1);
    CHECK_EQ_INT(kvpool_refcount(p, mine[2]), 2);
    kvpool_unref(p, got[0]);
    kvpool_unref(p, got[1]);
    CHECK_EQ_INT(radix_match(t, toks, 8, got, 0, &np), 0);
    CHECK_EQ_INT(np, 0);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    /* B waits on block 1; A is cancelled: block 1 and its subtree go */
    CHECK_EQ_INT(radix_match(t, toks, 8, got, 4, &np), 1);
    CHECK_EQ_INT(radix_remove_pending(t, mine[0]), ERR_INVALID); /* READY */
    CHECK_EQ_INT(radix_remove_pending(t, mine[1]), 2);
    CHECK_EQ_INT(radix_remove_pending(t, mine[1]), ERR_NOTFOUND);
    CHECK_EQ_INT(radix_block_state(t, mine[1]), RADIX_NONE);
    CHECK_EQ_INT(radix_block_state(t, mine[2]), RADIX_NONE);
    CHECK_EQ_INT(radix_set_ready(t, mine[1]), ERR_NOTFOUND);
    CHECK_EQ_INT(radix_n_cached(t), 1);
    CHECK_EQ_INT(radix_n_pending(t), 0);
    /* B (got) and A (mine) still hold theirs: refcount 2 each, not freed */
    CHECK_EQ_INT(kvpool_refcount(p, mine[1]), 2);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    for (int i = 0; i < 3; i++) kvpool_unref(p, got[i]);
    for (int i = 1; i < 3; i++) CHECK_EQ_INT(kvpool_unref(p, mine[i]), 0);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    /* A still holds block 0: a match returns it, the next blocks are gone */
    CHECK_EQ_INT(radix_match(t, toks, 8, got, 4, &np), 1);
    CHECK_EQ_INT(np, 0);
    kvpool_unref(p, got[0]);
    kvpool_unref(p, mine[0]);
    CHECK_EQ_INT(kvpool_n_used(p), 1);
    /* PENDING → READY through a re-insert of the caller's own block */
    int32_t c[2] = {mine[0], kvpool_alloc(p)};
    int32_t c1 = c[1];
    CHECK_EQ_INT(radix_insert(t, toks, 2, c, RADIX_PENDING), 1);
    CHECK_EQ_INT(radix_block_state(t, c1), RADIX_PENDING);
    int32_t other[2] = {mine[0], kvpool_alloc(p)};
    int32_t o1 = other[1];
    CHECK_EQ_INT(radix_insert(t, toks, 2, other, RADIX_READY), 0);
    CHECK_EQ_INT(other[1], c1);
    CHECK_EQ_INT(radix_block_state(t, c1), RADIX_PENDING); /* not the inserter's block */
    kvpool_unref(p, o1);
    CHECK_EQ_INT(radix_insert(t, toks, 2, c, RADIX_READY), 0);
    CHECK_EQ_INT(radix_block_state(t, c1), RADIX_READY);
    CHECK_EQ_INT(radix_n_pending(t), 0);
    kvpool_unref(p, c1);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    radix_free(t);
    CHECK_EQ_INT(kvpool_n_free(p), 8);
    kvpool_free(p);
}

static void test_duplicates_and_errors(void) {
    kvpool *p = kvpool_new(10);
    radix *t = radix_new(p, 4);
    CHECK_EQ_INT(radix_block_tokens(t), 4);
    int32_t toks[12] = {9, 9, 9, 9, 8, 8, 8, 8, 7, 7, 7, 7};
    int32_t a[2] = {kvpool_alloc(p), kvpool_alloc(p)};
    int32_t am[2] = {a[0], a[1]};
    CHECK_EQ_INT(radix_insert(t, toks, 2, a, RADIX_READY), 2);
    /* a second request computed the same two blocks plus one more */
    int32_t b[3] = {kvpool_alloc(p), kvpool_alloc(p), kvpool_alloc(p)};
    int32_t bm[3] = {b[0], b[1], b[2]};
    CHECK_EQ_INT(radix_insert(t, toks, 3, b, RADIX_READY), 1);
    CHECK_EQ_INT(b[0], am[0]);
    CHECK_EQ_INT(b[1], am[1]);
    CHECK_EQ_INT(b[2], bm[2]);
    CHECK_EQ_INT(kvpool_refcount(p, am[0]), 2); /* unchanged: A's + tree's */
    CHECK_EQ_INT(kvpool_refcount(p, bm[0]), 1); /* B's duplicate is B's alone */
    CHECK_EQ_INT(radix_block_state(t, bm[0]), RADIX_NONE);
    CHECK_EQ_INT(radix_n_cached(t), 3);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    /* invalid inserts change nothing */
    int32_t lab[4] = {1, 2, 3, 4};
    int32_t x[2];
    x[0] = am[1]; /* indexed elsewhere */
    CHECK_EQ_INT(radix_insert(t, lab, 1, x, RADIX_READY), ERR_INVALID);
    x[0] = 9; /* free */
    CHECK_EQ_INT(kvpool_refcount(p, 9), 0);
    CHECK_EQ_INT(radix_insert(t, lab, 1, x, RADIX_READY), ERR_INVALID);
    x[0] = 10; /* out of range */
    CHECK_EQ_INT(radix_insert(t, lab, 1, x, RADIX_READY), ERR_INVALID);
    x[0] = -1;
    CHECK_EQ_INT(radix_insert(t, lab, 1, x, RADIX_READY), ERR_INVALID);
    int32_t lab2[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    x[0] = x[1] = bm[0]; /* the same block twice */
    CHECK_EQ_INT(radix_insert(t, lab2, 2, x, RADIX_READY), ERR_INVALID);
    CHECK_EQ_INT(x[0], bm[0]);
    x[0] = bm[0];
    CHECK_EQ_INT(radix_insert(t, lab, 1, x, 7), ERR_INVALID); /* bad state */
    CHECK_EQ_INT(radix_insert(t, lab, -1, x, RADIX_READY), ERR_INVALID);
    CHECK_EQ_INT(radix_insert(t, lab, 0, x, RADIX_READY), 0);
    CHECK_EQ_INT(radix_match(t, lab, -1, x, 2, NULL), ERR_INVALID);
    CHECK_EQ_INT(radix_match(t, lab, 4, x, -1, NULL), ERR_INVALID);
    CHECK_EQ_INT(radix_n_cached(t), 3);
    CHECK_EQ_INT(kvpool_refcount(p, bm[0]), 1);
    CHECK_EQ_INT(radix_set_ready(t, -3), ERR_NOTFOUND);
    CHECK_EQ_INT(radix_set_ready(t, 99), ERR_NOTFOUND);
    CHECK_EQ_INT(radix_remove_pending(t, 99), ERR_NOTFOUND);
    CHECK_EQ_INT(radix_block_state(t, 99), RADIX_NONE);
    CHECK_EQ_INT(radix_evict(t, 0), 0);
    CHECK_EQ_INT(radix_evict(t, -5), 0);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    /* partial blocks are ignored by match: 11 tokens = 2 full blocks */
    int32_t got[3];
    CHECK_EQ_INT(radix_match(t, toks, 11, got, 3, NULL), 2);
    kvpool_unref(p, got[0]);
    kvpool_unref(p, got[1]);
    CHECK_EQ_INT(radix_match(t, toks, 3, got, 3, NULL), 0);
    /* a different token inside a block is a miss from that block on */
    int32_t near[12];
    memcpy(near, toks, sizeof near);
    near[6] = 0;
    CHECK_EQ_INT(radix_match(t, near, 12, got, 3, NULL), 1);
    kvpool_unref(p, got[0]);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    radix_free(t);
    /* the tree's references are gone; the test's own remain */
    CHECK_EQ_INT(kvpool_refcount(p, am[0]), 1);
    CHECK_EQ_INT(kvpool_refcount(p, bm[2]), 1);
    CHECK_EQ_INT(kvpool_n_used(p), 5);
    CHECK_EQ_INT(kvpool_check(p, NULL), 0);
    for (int i = 0; i < 2; i++) kvpool_unref(p, am[i]);
    for (int i = 0; i < 3; i++) kvpool_unref(p, bm[i]);
    CHECK_EQ_INT(kvpool_n_free(p), 10);
    kvpool_free(p);
}

/* A root with thousands of children and long shared chains: every lookup
 * finds its own block; eviction of everything leaves a clean pool. */
static void test_many_children(void) {
    enum { N = 6000, BT = 4 };
    kvpool *p = kvpool_new(N);
    radix *t = radix_new(p, BT);
    int32_t lab[BT];
    for (int i = 0; i < 3000; i++) {
        for (int j = 0; j < BT; j++) lab[j] = (j == 0) ? i : 7; /* siblings share the tail */
        int32_t b[1] = {kvpool_alloc(p)};
        int32_t own = b[0];
        CHECK_EQ_INT(radix_insert(t, lab, 1, b, RADIX_READY), 1);
        kvpool_unref(p, own);
    }
    /* one chain of 2000 blocks */
    int32_t *chain = malloc(2000 * BT * sizeof *chain), *cb = malloc(2000 * sizeof *cb);
    for (int i = 0; i < 2000 * BT; i++) chain[i] = 100000 + i;
    for (int i = 0; i < 2000; i++) cb[i] = kvpool_alloc(p);
    CHECK_EQ_INT(radix_insert(t, chain, 2000, cb, RADIX_READY), 2000);
    for (int i = 0; i < 2000; i++) kvpool_unref(p, cb[i]);
    CHECK_EQ_INT(radix_n_cached(t), 5000);
    CHECK_EQ_INT(radix_n_evictable(t), 3001);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    int bad = 0;
    for (int i = 0; i < 3000; i++) {
        for (int j = 0; j < BT; j++) lab[j] = (j == 0) ? i : 7;
        int32_t got[1];
        if (radix_match(t, lab, BT, got, 1, NULL) != 1 || got[0] != i) bad++;
        else kvpool_unref(p, got[0]);
    }
    CHECK_EQ_INT(bad, 0);
    int32_t *got = malloc(2000 * sizeof *got);
    CHECK_EQ_INT(radix_match(t, chain, 2000 * BT, got, 2000, NULL), 2000);
    CHECK(memcmp(got, cb, 2000 * sizeof *got) == 0);
    for (int i = 0; i < 2000; i++) kvpool_unref(p, got[i]);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    /* evict half, check, then everything */
    CHECK_EQ_INT(radix_evict(t, 2500), 2500);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    CHECK_EQ_INT(radix_evict(t, N), 2500);
    CHECK_EQ_INT(radix_n_cached(t), 0);
    CHECK_EQ_INT(kvpool_n_free(p), N);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    free(chain);
    free(cb);
    free(got);
    radix_free(t);
    kvpool_free(p);
}

/* radix_match_partial: a match that ends inside a block finds the READY
 * block whose label starts with the next tokens (mid-block), nothing at a
 * block edge, never a PENDING block (still being written) until it is READY,
 * the run capped by the tokens given and by bt - 1, salts at the root, the
 * lowest id on ties; the source is held while the caller copies (not
 * evictable: under memory pressure the caller drops it and evicts, i.e.
 * recomputes), and every reference comes back. */
static void test_partial(void) {
    kvpool *p = kvpool_new(8);
    radix *t = radix_new(p, 4);
    /* blocks 0 [1 2 3 4], below it 1 [5 6 7 8] and 2 [5 6 7 9] READY, and
     * 3 [5 6 7 1] PENDING (its computing request holds it) */
    int32_t path[8] = {1, 2, 3, 4, 5, 6, 7, 8}, sib[8] = {1, 2, 3, 4, 5, 6, 7, 9}, pend[8] = {1, 2, 3, 4, 5, 6, 7, 1};
    int32_t x[2] = {kvpool_alloc(p), kvpool_alloc(p)};
    CHECK_EQ_INT(radix_insert(t, path, 2, x, RADIX_READY), 2);
    int32_t b0 = x[0], b1 = x[1];
    x[1] = kvpool_alloc(p);
    int32_t b2 = x[1];
    CHECK_EQ_INT(radix_insert(t, sib, 2, x, RADIX_READY), 1);
    x[1] = kvpool_alloc(p);
    int32_t b3 = x[1];
    CHECK_EQ_INT(radix_insert(t, pend, 2, x, RADIX_PENDING), 1);
    CHECK(b0 == 0 && b1 == 1 && b2 == 2 && b3 == 3);
    kvpool_unref(p, b0);
    kvpool_unref(p, b1);
    kvpool_unref(p, b2);
    CHECK_EQ_INT(radix_n_evictable(t), 2);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    int32_t got[4];
    int rows = -1;
    /* 1. mid-block: [1 2 3 4 | 5 6 7 1 2] matches one block, then 3 rows of
     *    a READY child (1 and 2 tie: the lower id), never the PENDING 3 */
    int32_t q1[9] = {1, 2, 3, 4, 5, 6, 7, 1, 2};
    CHECK_EQ_INT(radix_match(t, q1, 9, got, 4, NULL), 1);
    CHECK_EQ_INT(got[0], b0);
    uint64_t clock0 = radix_clock(t);
    int32_t src = radix_match_partial(t, 0, q1, 9, got, 1, &rows);
    CHECK_EQ_INT(src, b1);
    CHECK_EQ_INT(rows, 3);
    CHECK_EQ_INT(radix_clock(t), clock0); /* the release counts as the use */
    CHECK_EQ_INT(kvpool_refcount(p, b1), 2);
    CHECK_EQ_INT(radix_n_evictable(t), 1); /* held for the copy: only 2 is evictable */
    CHECK_EQ_INT(checks_ok(t, p), 0);
    kvpool_unref(p, b1);
    CHECK(radix_last_use(t, b1) > clock0);
    /* the tokens given cap the run: [1 2 3 4 | 5 6] */
    CHECK_EQ_INT(radix_match_partial(t, 0, q1, 6, got, 1, &rows), b1);
    CHECK_EQ_INT(rows, 2);
    kvpool_unref(p, b1);
    /* a whole matching block is radix_match's: the run stops at bt - 1 */
    CHECK_EQ_INT(radix_match_partial(t, 0, path, 8, got, 1, &rows), b1);
    CHECK_EQ_INT(rows, 3);
    kvpool_unref(p, b1);
    /* [1 2 3 4 | 5 9]: one row */
    int32_t q4[6] = {1, 2, 3, 4, 5, 9};
    CHECK_EQ_INT(radix_match_partial(t, 0, q4, 6, got, 1, &rows), b1);
    CHECK_EQ_INT(rows, 1);
    kvpool_unref(p, b1);
    /* no token left after the match, or none shared: nothing */
    CHECK_EQ_INT(radix_match_partial(t, 0, q1, 4, got, 1, &rows), -1);
    CHECK_EQ_INT(rows, 0);
    int32_t q3[6] = {1, 2, 3, 4, 9, 5};
    CHECK_EQ_INT(radix_match_partial(t, 0, q3, 6, got, 1, &rows), -1);
    CHECK_EQ_INT(rows, 0);
    kvpool_unref(p, got[0]);
    /* 2. the match ends exactly at a block edge: [1 2 3 4 | 5 6 7 8 | 3]
     *    matches two blocks and there is nothing below to copy */
    int32_t q2[9] = {1, 2, 3, 4, 5, 6, 7, 8, 3};
    CHECK_EQ_INT(radix_match(t, q2, 9, got, 4, NULL), 2);
    CHECK_EQ_INT(radix_match_partial(t, 0, q2, 9, got, 2, &rows), -1);
    CHECK_EQ_INT(rows, 0);
    kvpool_unref(p, got[0]);
    kvpool_unref(p, got[1]);
    /* 3. the block still being written (3, PENDING) matches [5 6 7 1] in
     *    full but is not used; once READY it is: all three share 3 rows
     *    with [.. | 5 6 7 1 2] (the cap), the lowest id, then, with a 4th
     *    block differing from the start, 3 alone */
    CHECK_EQ_INT(radix_match(t, q1, 9, got, 4, NULL), 1);
    CHECK_EQ_INT(radix_match_partial(t, 0, pend, 8, got, 1, &rows), b1);
    kvpool_unref(p, b1);
    CHECK_EQ_INT(radix_set_ready(t, b3), 0);
    kvpool_unref(p, b3); /* its computing request is done */
    CHECK_EQ_INT(radix_match_partial(t, 0, pend, 8, got, 1, &rows), b1);
    CHECK_EQ_INT(rows, 3);
    kvpool_unref(p, b1);
    int32_t x4[2] = {b0, kvpool_alloc(p)};
    int32_t b4 = x4[1];
    int32_t other[8] = {1, 2, 3, 4, 8, 8, 8, 8};
    CHECK_EQ_INT(radix_insert(t, other, 2, x4, RADIX_PENDING), 1);
    int32_t q5[7] = {1, 2, 3, 4, 8, 8, 0};
    CHECK_EQ_INT(radix_match_partial(t, 0, q5, 7, got, 1, &rows), -1); /* 4 is PENDING */
    radix_set_ready(t, b4);
    CHECK_EQ_INT(radix_match_partial(t, 0, q5, 7, got, 1, &rows), b4);
    CHECK_EQ_INT(rows, 2);
    kvpool_unref(p, b4);
    kvpool_unref(p, b4);
    kvpool_unref(p, got[0]);
    /* 4. at the root (nothing matched): salts separate the partitions */
    int32_t q8[3] = {1, 2, 9};
    CHECK_EQ_INT(radix_match_partial(t, 0, q8, 3, got, 0, &rows), b0);
    CHECK_EQ_INT(rows, 2);
    kvpool_unref(p, b0);
    CHECK_EQ_INT(radix_match_partial(t, 5, q8, 3, got, 0, &rows), -1);
    /* bad inputs: an unindexed or out-of-range block, negative counts */
    int32_t bogus[1] = {7};
    CHECK_EQ_INT(radix_match_partial(t, 0, q1, 9, bogus, 1, &rows), -1);
    bogus[0] = 99;
    CHECK_EQ_INT(radix_match_partial(t, 0, q1, 9, bogus, 1, &rows), -1);
    CHECK_EQ_INT(radix_match_partial(t, 0, q1, -1, got, 0, &rows), -1);
    CHECK_EQ_INT(radix_match_partial(t, 0, q1, 9, got, -1, &rows), -1);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    CHECK_EQ_INT(radix_n_cached(t), 5);
    CHECK_EQ_INT(radix_n_idle(t), 5); /* every reference taken above came back */
    /* 5. memory pressure: the pool full, the source held for the copy is
     *    not evictable, so the caller (engine.c try_admit) drops it and
     *    evicts: the rows are recomputed, nothing fails */
    int32_t fill[8];
    int n_fill = 0;
    while (n_fill < 8 && (fill[n_fill] = kvpool_alloc(p)) >= 0) n_fill++;
    CHECK_EQ_INT(n_fill, 3);
    int32_t q9[9] = {1, 2, 3, 4, 5, 6, 7, 2, 2};
    CHECK_EQ_INT(radix_match(t, q9, 9, got, 4, NULL), 1);
    src = radix_match_partial(t, 0, q9, 9, got, 1, &rows);
    CHECK_EQ_INT(src, b1);
    kvpool_unref(p, got[0]);
    CHECK_EQ_INT(radix_evict(t, 8), 3); /* 2, 3 and 4; 1 is held, 0 is its parent */
    CHECK_EQ_INT(radix_block_state(t, src), RADIX_READY);
    for (int i = 0; i < 3; i++) CHECK((fill[n_fill++] = kvpool_alloc(p)) >= 0);
    CHECK_EQ_INT(kvpool_alloc(p), -1);
    CHECK_EQ_INT(radix_evict(t, 1), 0);
    kvpool_unref(p, src);               /* fall back: drop the source ... */
    CHECK_EQ_INT(radix_evict(t, 1), 1); /* ... and it is the block freed */
    CHECK_EQ_INT(radix_block_state(t, src), RADIX_NONE);
    CHECK_EQ_INT(kvpool_alloc(p), src);
    fill[n_fill++] = src;
    CHECK_EQ_INT(checks_ok(t, p), 0);
    /* 6. no leak: the test's references back, everything evicted */
    for (int i = 0; i < n_fill; i++) kvpool_unref(p, fill[i]);
    CHECK_EQ_INT(radix_evict(t, 8), 1);
    CHECK_EQ_INT(radix_n_cached(t), 0);
    CHECK_EQ_INT(kvpool_n_free(p), 8);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    radix_free(t);
    kvpool_free(p);
}

/* ---- randomized differential test ---------------------------------------- */

enum { MAXD = 7, MAXBT = 4, MAXTOK = MAXD * MAXBT + MAXBT };

typedef struct ment { /* model entry, indexed by block id */
    bool live;
    int nb; /* prefix length in blocks */
    int32_t toks[MAXD * MAXBT];
    int state;
    uint64_t last_use;
} ment;

typedef struct model {
    int n, bt, alpha;
    ment *e;       /* (n) */
    int *ref;      /* (n) refcounts as the model sees them */
    uint64_t clock;
    int32_t *held; /* the test's references (a multiset) */
    int n_held, cap_held;
} model;

static int m_find(const model *m, const int32_t *toks, int nb) {
    for (int b = 0; b < m->n; b++)
        if (m->e[b].live && m->e[b].nb == nb && memcmp(m->e[b].toks, toks, (size_t)(nb * m->bt) * 4) == 0) return b;
    return -1;
}

static bool m_is_leaf(const model *m, int b) {
    const ment *x = &m->e[b];
    for (int c = 0; c < m->n; c++)
        if (m->e[c].live && m->e[c].nb == x->nb + 1 && memcmp(m->e[c].toks, x->toks, (size_t)(x->nb * m->bt) * 4) == 0)
            return false;
    return true;
}

static bool m_evictable(const model *m, int b) { return m->e[b].live && m->ref[b] == 1 && m_is_leaf(m, b); }

static void m_hold(model *m, int32_t b) {
    if (m->n_held == m->cap_held) {
        m->cap_held = m->cap_held ? 2 * m->cap_held : 64;
        m->held = realloc(m->held, (size_t)m->cap_held * sizeof *m->held);
    }
    m->held[m->n_held++] = b;
}

static int n_bad;
#define EXPECT(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            if (n_bad++ < 10) {                                                              \
                fprintf(stderr, "differential mismatch (%s:%d) %s: ", __FILE__, __LINE__, #cond); \
                fprintf(stderr, __VA_ARGS__);                                                \
                fputc('\n', stderr);                                                         \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* Drops one reference through the pool, mirroring the clock rule: a block the
 * tree indexes whose refcount falls to 1 is "released" now. */
static void m_unref(model *m, kvpool *p, int32_t b) {
    int rc = kvpool_unref(p, b);
    m->ref[b]--;
    EXPECT(rc == m->ref[b], "unref %d: pool says %d, model %d", (int)b, rc, m->ref[b]);
    if (m->e[b].live && m->ref[b] == 1) m->e[b].last_use = ++m->clock;
}

/* The model's eviction: the evictable entry with the least (last_use, id). */
static int m_evict(model *m, int n) {
    int freed = 0;
    while (freed < n) {
        int best = -1;
        for (int b = 0; b < m->n; b++) {
            if (!m_evictable(m, b)) continue;
            if (best < 0 || m->e[b].last_use < m->e[best].last_use) best = b;
        }
        if (best < 0) break;
        m->e[best].live = false;
        m->ref[best]--;
        freed++;
    }
    return freed;
}

static void do_evict(model *m, radix *t, int n) {
    int want = m_evict(m, n);
    int got = radix_evict(t, n);
    EXPECT(got == want, "evict(%d): tree %d, model %d", n, got, want);
}

/* A random token sequence: often the prefix of an indexed entry, extended by
 * random blocks over a small alphabet (so prefixes collide), plus a partial
 * block. Returns the number of tokens. */
static int gen_seq(model *m, int32_t *toks, int max_blocks) {
    int nb = 0;
    if (rnd(3) != 0) {
        int b = (int)rnd((uint32_t)m->n);
        if (m->e[b].live) {
            nb = (int)rnd((uint32_t)m->e[b].nb + 1);
            memcpy(toks, m->e[b].toks, (size_t)(nb * m->bt) * 4);
        }
    }
    int extra = (int)rnd(4);
    while (extra-- > 0 && nb < max_blocks) {
        for (int j = 0; j < m->bt; j++) toks[nb * m->bt + j] = (int32_t)rnd((uint32_t)m->alpha);
        nb++;
    }
    int n_tok = nb * m->bt;
    int part = (int)rnd((uint32_t)m->bt);
    for (int j = 0; j < part; j++) toks[n_tok++] = (int32_t)rnd((uint32_t)m->alpha);
    return n_tok;
}

typedef struct stats {
    int match_ready, match_pending, ins_new, ins_dup, ins_invalid, evicted, removed, alloc_fail, partial;
} stats;

static void op_match(model *m, radix *t, stats *st) {
    int32_t toks[MAXTOK], got[MAXD + 1], want[MAXD + 1];
    int n_tok = gen_seq(m, toks, MAXD);
    int cap = rnd(4) ? MAXD + 1 : (int)rnd(MAXD + 1);
    bool use_pending = rnd(2);
    int nr = 0, nw = 0;
    for (int i = 0; i < n_tok / m->bt && nr + nw < cap; i++) {
        int b = m_find(m, toks, i + 1);
        if (b < 0) break;
        bool waiting = nw > 0 || m->e[b].state == RADIX_PENDING;
        if (waiting && !use_pending) break;
        want[nr + nw] = b;
        if (waiting) nw++;
        else nr++;
    }
    int np = -1;
    int r = radix_match(t, toks, n_tok, got, cap, use_pending ? &np : NULL);
    m->clock++;
    EXPECT(r == nr, "match: ready %d, model %d", r, nr);
    if (use_pending) EXPECT(np == nw, "match: pending %d, model %d", np, nw);
    for (int i = 0; i < nr + nw; i++) {
        EXPECT(got[i] == want[i], "match: block %d is %d, model %d", i, (int)got[i], (int)want[i]);
        m->ref[want[i]]++;
        m->e[want[i]].last_use = m->clock;
        m_hold(m, want[i]);
    }
    if (nr) st->match_ready++;
    if (nw) st->match_pending++;
}

/* A ready match (no waiting), then radix_match_partial after it: the model
 * picks, among its READY entries one block longer than the match with the
 * same prefix, the longest run of the next tokens (at most bt - 1 and the
 * tokens left), the lowest id on ties. */
static void op_match_partial(model *m, radix *t, stats *st) {
    int32_t toks[MAXTOK], got[MAXD + 1];
    int n_tok = gen_seq(m, toks, MAXD), bt = m->bt;
    int nr = 0;
    while (nr < n_tok / bt) {
        int b = m_find(m, toks, nr + 1);
        if (b < 0 || m->e[b].state == RADIX_PENDING) break;
        nr++;
    }
    int r = radix_match(t, toks, n_tok, got, MAXD + 1, NULL);
    m->clock++;
    EXPECT(r == nr, "partial's match: ready %d, model %d", r, nr);
    if (r != nr) return;
    for (int i = 0; i < nr; i++) {
        m->ref[got[i]]++;
        m->e[got[i]].last_use = m->clock;
        m_hold(m, got[i]);
    }
    int want = -1, want_run = 0;
    int avail = MIN(n_tok - nr * bt, bt - 1);
    for (int b = 0; b < m->n && avail > 0; b++) {
        const ment *x = &m->e[b];
        if (!x->live || x->state != RADIX_READY || x->nb != nr + 1 || memcmp(x->toks, toks, (size_t)(nr * bt) * 4))
            continue;
        int run = 0;
        while (run < avail && x->toks[nr * bt + run] == toks[nr * bt + run]) run++;
        if (run > want_run) want = b, want_run = run;
    }
    int rows = -1;
    int32_t src = radix_match_partial(t, 0, toks, n_tok, got, nr, &rows);
    EXPECT(src == want && rows == want_run, "partial after %d blocks: block %d rows %d, model %d rows %d", nr,
           (int)src, rows, want, want_run);
    if (src >= 0 && src == want) {
        m->ref[src]++;
        m_hold(m, src);
        st->partial++;
    }
}

static void op_insert(model *m, radix *t, kvpool *p, stats *st) {
    int32_t toks[MAXTOK], blk[MAXD], want[MAXD];
    bool fresh[MAXD];
    int nb = gen_seq(m, toks, MAXD) / m->bt;
    int k = 0; /* existing path length */
    while (k < nb && m_find(m, toks, k + 1) >= 0) k++;
    int n_fresh = 0;
    for (int i = 0; i < nb; i++) {
        fresh[i] = !(i < k && rnd(2));
        n_fresh += fresh[i];
    }
    if (kvpool_n_free(p) < n_fresh) do_evict(m, t, n_fresh - kvpool_n_free(p));
    if (kvpool_n_free(p) < n_fresh) {
        st->alloc_fail++;
        return;
    }
    for (int i = 0; i < nb; i++) /* the eviction may have taken part of the path */
        if (!fresh[i] && m_find(m, toks, i + 1) < 0) return;
    for (int i = 0; i < nb; i++) {
        if (fresh[i]) {
            blk[i] = kvpool_alloc(p);
            EXPECT(blk[i] >= 0 && m->ref[blk[i]] == 0, "alloc gave %d (model refcount %d)", (int)blk[i],
                   blk[i] >= 0 ? m->ref[blk[i]] : -1);
            if (blk[i] < 0) return;
            m->ref[blk[i]] = 1;
        } else {
            blk[i] = m_find(m, toks, i + 1);
        }
    }
    int state = rnd(2) ? RADIX_READY : RADIX_PENDING;
    /* sometimes break the contract on a new position: must change nothing */
    if (k < nb && rnd(8) == 0) {
        int j = k + (int)rnd((uint32_t)(nb - k));
        int32_t saved[MAXD];
        memcpy(saved, blk, sizeof saved);
        int32_t bad = -1;
        int kind = (int)rnd(3);
        if (kind == 0) { /* a block indexed elsewhere */
            for (int b = 0; b < m->n && bad < 0; b++)
                if (m->e[b].live) bad = b;
        } else if (kind == 1) { /* a free block */
            for (int b = 0; b < m->n && bad < 0; b++)
                if (m->ref[b] == 0) bad = b;
        } else if (nb - k >= 2) { /* a duplicate among the new ones */
            bad = blk[j == k ? k + 1 : k];
        }
        if (bad >= 0) {
            int32_t keep = blk[j];
            blk[j] = bad;
            uint64_t c0 = radix_clock(t);
            int r = radix_insert(t, toks, nb, blk, state);
            EXPECT(r == ERR_INVALID, "invalid insert (kind %d) returned %d", kind, r);
            EXPECT(radix_clock(t) == c0, "invalid insert moved the clock");
            saved[j] = bad;
            EXPECT(memcmp(saved, blk, sizeof(int32_t) * (size_t)nb) == 0, "invalid insert changed blocks[]");
            blk[j] = keep;
            st->ins_invalid++;
            for (int i = 0; i < nb; i++)
                if (fresh[i]) m_unref(m, p, blk[i]);
            return;
        }
    }
    /* model insert */
    m->clock++;
    int created = 0;
    for (int i = 0; i < nb; i++) {
        int e = m_find(m, toks, i + 1);
        if (e >= 0) {
            if (blk[i] == e && state == RADIX_READY && m->e[e].state == RADIX_PENDING) m->e[e].state = RADIX_READY;
            want[i] = e;
            m->e[e].last_use = m->clock;
        } else {
            ment *x = &m->e[blk[i]];
            x->live = true;
            x->nb = i + 1;
            memcpy(x->toks, toks, (size_t)((i + 1) * m->bt) * 4);
            x->state = state;
            x->last_use = m->clock;
            m->ref[blk[i]]++;
            want[i] = blk[i];
            created++;
        }
    }
    int32_t mine[MAXD];
    memcpy(mine, blk, sizeof mine);
    int r = radix_insert(t, toks, nb, blk, state);
    EXPECT(r == created, "insert: created %d, model %d", r, created);
    for (int i = 0; i < nb; i++) EXPECT(blk[i] == want[i], "insert: block %d is %d, model %d", i, (int)blk[i], (int)want[i]);
    /* the caller keeps its new blocks (as the computing request would) and
     * drops duplicates, sometimes switching to the tree's block */
    for (int i = 0; i < nb; i++) {
        if (!fresh[i]) continue;
        if (want[i] == mine[i]) {
            m_hold(m, mine[i]);
            st->ins_new++;
        } else {
            m_unref(m, p, mine[i]);
            st->ins_dup++;
            if (rnd(2)) {
                kvpool_ref(p, want[i]);
                m->ref[want[i]]++;
                m_hold(m, want[i]);
            }
        }
    }
}

static void op_unref(model *m, kvpool *p) {
    if (!m->n_held) return;
    int i = (int)rnd((uint32_t)m->n_held);
    int32_t b = m->held[i];
    m->held[i] = m->held[--m->n_held];
    m_unref(m, p, b);
}

static void op_set_ready(model *m, radix *t) {
    int32_t b = (int32_t)rnd((uint32_t)m->n + 2) - 1; /* includes -1 and n */
    int want = (b >= 0 && b < m->n && m->e[b].live) ? 0 : ERR_NOTFOUND;
    int r = radix_set_ready(t, b);
    EXPECT(r == want, "set_ready(%d): %d, model %d", (int)b, r, want);
    if (want == 0) m->e[b].state = RADIX_READY;
}

static void op_remove_pending(model *m, radix *t, stats *st) {
    int32_t b = (int32_t)rnd((uint32_t)m->n);
    if (rnd(5)) /* prefer a pending block */
        for (int i = 0; i < m->n; i++) {
            int c = (b + i) % m->n;
            if (m->e[c].live && m->e[c].state == RADIX_PENDING) {
                b = c;
                break;
            }
        }
    int want;
    if (!m->e[b].live) want = ERR_NOTFOUND;
    else if (m->e[b].state != RADIX_PENDING) want = ERR_INVALID;
    else {
        want = 0;
        ment *x = &m->e[b];
        int nb = x->nb;
        int32_t pre[MAXD * MAXBT];
        memcpy(pre, x->toks, (size_t)(nb * m->bt) * 4);
        for (int c = 0; c < m->n; c++) {
            if (m->e[c].live && m->e[c].nb >= nb && memcmp(m->e[c].toks, pre, (size_t)(nb * m->bt) * 4) == 0) {
                m->e[c].live = false;
                m->ref[c]--;
                want++;
            }
        }
        st->removed += want;
    }
    int r = radix_remove_pending(t, b);
    EXPECT(r == want, "remove_pending(%d): %d, model %d", (int)b, r, want);
}

static void compare_all(const model *m, const radix *t, const kvpool *p, int op) {
    EXPECT(checks_ok(t, p) == 0, "checkers failed after op %d", op);
    int n_live = 0, n_pend = 0, n_evict = 0, n_idle = 0;
    for (int b = 0; b < m->n; b++) {
        const ment *x = &m->e[b];
        EXPECT(kvpool_refcount(p, b) == m->ref[b], "op %d block %d: refcount %d, model %d", op, b,
               kvpool_refcount(p, b), m->ref[b]);
        int st = x->live ? x->state : RADIX_NONE;
        EXPECT(radix_block_state(t, b) == st, "op %d block %d: state %d, model %d", op, b, radix_block_state(t, b),
               st);
        uint64_t lu = x->live ? x->last_use : 0;
        EXPECT(radix_last_use(t, b) == lu, "op %d block %d: last_use %llu, model %llu", op, b,
               (unsigned long long)radix_last_use(t, b), (unsigned long long)lu);
        n_live += x->live;
        n_pend += x->live && x->state == RADIX_PENDING;
        n_evict += m_evictable(m, b);
        n_idle += x->live && m->ref[b] == 1;
    }
    EXPECT(radix_n_cached(t) == n_live, "op %d: n_cached %d, model %d", op, radix_n_cached(t), n_live);
    EXPECT(radix_n_pending(t) == n_pend, "op %d: n_pending %d, model %d", op, radix_n_pending(t), n_pend);
    EXPECT(radix_n_evictable(t) == n_evict, "op %d: n_evictable %d, model %d", op, radix_n_evictable(t), n_evict);
    EXPECT(radix_n_idle(t) == n_idle, "op %d: n_idle %d, model %d", op, radix_n_idle(t), n_idle);
    EXPECT(radix_clock(t) == m->clock, "op %d: clock %llu, model %llu", op, (unsigned long long)radix_clock(t),
           (unsigned long long)m->clock);
}

static void test_differential(int n_blocks, int bt, int alpha, int n_ops, uint64_t seed) {
    rng_state = seed;
    kvpool *p = kvpool_new(n_blocks);
    radix *t = radix_new(p, bt);
    model m = {.n = n_blocks, .bt = bt, .alpha = alpha};
    m.e = calloc((size_t)n_blocks, sizeof *m.e);
    m.ref = calloc((size_t)n_blocks, sizeof *m.ref);
    stats st = {0};
    n_bad = 0;
    for (int op = 0; op < n_ops && n_bad == 0; op++) {
        uint32_t r = rnd(18);
        if (r < 3) op_match(&m, t, &st);
        else if (r >= 16) op_match_partial(&m, t, &st);
        else if (r < 7) op_insert(&m, t, p, &st);
        else if (r < 12) { /* release a few references; phases of hoarding fill the pool */
            bool hoard = (op / 1000) % 2 == 1;
            if (!hoard || rnd(4) == 0)
                for (int k = 1 + (int)rnd(m.n_held > n_blocks / 2 ? 6 : 3); k > 0; k--) op_unref(&m, p);
        }
        else if (r < 13) op_set_ready(&m, t);
        else if (r < 14) op_remove_pending(&m, t, &st);
        else {
            int before = kvpool_n_free(p);
            do_evict(&m, t, (int)rnd(5));
            st.evicted += kvpool_n_free(p) - before;
        }
        compare_all(&m, t, p, op);
    }
    /* drain: release every reference; then everything is evictable */
    while (m.n_held) op_unref(&m, p);
    compare_all(&m, t, p, n_ops);
    EXPECT(radix_n_evictable(t) > 0 || radix_n_cached(t) == 0, "nothing evictable after the drain");
    do_evict(&m, t, n_blocks);
    compare_all(&m, t, p, n_ops + 1);
    CHECK_EQ_INT(radix_n_cached(t), 0);
    CHECK_EQ_INT(kvpool_n_free(p), n_blocks);
    CHECK_MSG(n_bad == 0, "%d differential mismatches (n_blocks %d, bt %d, alpha %d)", n_bad, n_blocks, bt, alpha);
    /* the random walk must actually exercise every path */
    CHECK_MSG(st.match_ready > 0 && st.match_pending > 0, "matches: ready %d pending %d", st.match_ready,
              st.match_pending);
    CHECK_MSG(st.ins_new > 0 && st.ins_dup > 0 && st.ins_invalid > 0, "inserts: new %d dup %d invalid %d",
              st.ins_new, st.ins_dup, st.ins_invalid);
    CHECK_MSG(st.evicted > 0 && st.removed > 0 && st.alloc_fail > 0, "evicted %d removed %d alloc_fail %d",
              st.evicted, st.removed, st.alloc_fail);
    CHECK_MSG(bt == 1 || st.partial > 0, "partial matches %d", st.partial);
    printf("differential n_blocks=%d bt=%d alpha=%d: match ready %d pending %d, insert new %d dup %d invalid %d, "
           "evicted %d, removed %d, pool full %d, partial %d\n",
           n_blocks, bt, alpha, st.match_ready, st.match_pending, st.ins_new, st.ins_dup, st.ins_invalid,
           st.evicted, st.removed, st.alloc_fail, st.partial);
    radix_free(t);
    CHECK_EQ_INT(kvpool_check(p, NULL), 0);
    kvpool_free(p);
    free(m.e);
    free(m.ref);
    free(m.held);
}

/* Partitions: the same two blocks inserted under salts 0, 7 and 9 are
 * three paths; each salt matches only its own (issue 26 finding 12), the
 * blocks below the first inherit its partition, and eviction and the
 * checker see ordinary nodes. */
static void test_salts(void) {
    kvpool *p = kvpool_new(16);
    radix *t = radix_new(p, 2);
    int32_t toks[4] = {5, 6, 7, 8};
    const uint64_t salts[3] = {0, 7, 9};
    int32_t own[3][2];
    for (int k = 0; k < 3; k++) {
        own[k][0] = kvpool_alloc(p);
        own[k][1] = kvpool_alloc(p);
        int32_t x[2] = {own[k][0], own[k][1]};
        CHECK_EQ_INT(radix_insert_salted(t, salts[k], toks, 2, x, RADIX_READY), 2); /* new nodes, not shared */
        CHECK(x[0] == own[k][0] && x[1] == own[k][1]);
    }
    CHECK_EQ_INT(radix_n_cached(t), 6);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    int32_t got[4];
    for (int k = 0; k < 3; k++) {
        int n = radix_match_salted(t, salts[k], toks, 4, got, 4, NULL);
        CHECK_EQ_INT(n, 2);
        CHECK(n == 2 && got[0] == own[k][0] && got[1] == own[k][1]);
        for (int i = 0; i < n; i++) kvpool_unref(p, got[i]);
    }
    CHECK_EQ_INT(radix_match(t, toks, 4, got, 4, NULL), 2); /* salt 0 is the plain one */
    CHECK(got[0] == own[0][0]);
    kvpool_unref(p, got[0]);
    kvpool_unref(p, got[1]);
    CHECK_EQ_INT(radix_match_salted(t, 8, toks, 4, got, 4, NULL), 0); /* an unknown salt: nothing */
    for (int k = 0; k < 3; k++) kvpool_unref(p, own[k][0]), kvpool_unref(p, own[k][1]);
    CHECK_EQ_INT(radix_evict(t, 16), 6);
    CHECK_EQ_INT(checks_ok(t, p), 0);
    radix_free(t);
    CHECK_EQ_INT(kvpool_n_free(p), 16);
    kvpool_free(p);
}

int main(void) {
    rng_state = 0x2545f4914f6cdd1dULL; /* this file's own sequence */
    test_salts();
    test_lru_order();
    test_referenced_and_parents();
    test_pending();
    test_duplicates_and_errors();
    test_many_children();
    test_partial();
    test_differential(48, 2, 3, 20000, 0x1234567ULL);
    test_differential(16, 1, 4, 20000, 0xdeadbeefULL);
    test_differential(64, 4, 2, 20000, 0xabcdef12345ULL);
    test_differential(8, 3, 2, 10000, 0x77ULL);
    return test_summary("test_radix");
}
