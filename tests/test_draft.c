/*
 * test_draft.c — the drafters' structures (sched/suffix.h, sched/draft.h):
 *   - the suffix trie against a naive model (occurrences counted by scanning
 *     the stored sequences), randomized, suffix_check after every operation:
 *     adding, growing by a cursor token by token, removing the oldest
 *     sequences (FIFO eviction) down to an empty tree;
 *   - memory bounds: a trie never holds more than max_nodes nodes, refuses a
 *     sequence that may not fit (ERR_RANGE, unchanged), and a full cursor
 *     leaves strings out without breaking the counts' invariants;
 *   - proposals: the most frequent continuation with count ratios as
 *     probabilities, the longest matching suffix first, the p_min cut;
 *   - the n-gram drafter against a naive lookup;
 *   - the scan (suffix_scan_propose) against the trie of the context it
 *     stands for, randomized; the suffix drafter proposes the same drafts
 *     for a sequence drafting from its first token, one starting late and
 *     the eager trie it used to keep; it searches the newest seq_window
 *     tokens of the context, not older ones; the global store keeps
 *     its node bound, evicts the oldest outputs first and drafts from the
 *     ones it keeps;
 *   - the policy: thresholds grow with the batch, draft lengths with alpha;
 *   - the acceptance table (ngram, suffix): a class of evidence whose
 *     drafts are rejected stops being drafted, for new sequences too,
 *     without silencing other classes; after long accepted drafts a new
 *     sequence drafts them whole at once;
 *   - ngram's confidence evidence: draft_margin against a naive gap; the
 *     same tokens copied from places sampled with wide and with narrow
 *     margins are apart (one drafted whole, the other not), nothing noted
 *     is a third class; a declined class learns from the tokens the steps
 *     reveal and is drafted again once they agree, without drafting first;
 *     feedback scores the proposal's own places in a context that grew.
 */
#include <math.h>
#include <string.h>

#include "sched/draft.h"
#include "sched/suffix.h"
#include "test.h"

static void check_tree(const suffix_tree *t) {
    err_t e = {0};
    int rc = suffix_check(t, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
}

/* Occurrences of s[0, n) in the sequences (substring starts). */
static int naive_count(int32_t **seqs, const int *lens, int n_seqs, const int32_t *s, int n) {
    int c = 0;
    for (int k = 0; k < n_seqs; k++)
        for (int i = 0; i + n <= lens[k]; i++) c += !memcmp(seqs[k] + i, s, (size_t)n * sizeof *s);
    return c;
}

static void check_counts(const suffix_tree *t, int32_t **seqs, const int *lens, int n_seqs, int alpha) {
    int d = suffix_depth(t);
    int32_t q[16];
    int bad = 0;
    for (int trial = 0; trial < 300 && !bad; trial++) {
        int n = 1 + (int)(rng_u64() % (uint64_t)d);
        /* half the queries taken from a stored sequence, half random */
        if (n_seqs && trial % 2) {
            int k = (int)(rng_u64() % (uint64_t)n_seqs);
            if (lens[k] < n) continue;
            int at = (int)(rng_u64() % (uint64_t)(lens[k] - n + 1));
            memcpy(q, seqs[k] + at, (size_t)n * sizeof *q);
        } else {
            for (int i = 0; i < n; i++) q[i] = (int32_t)(rng_u64() % (uint64_t)alpha);
        }
        int want = naive_count(seqs, lens, n_seqs, q, n), got = suffix_count(t, q, n);
        CHECK_MSG(want == got, "count of a %d-token string: %d, naive %d", n, got, want);
        bad = want != got;
    }
}

static void test_trie_vs_naive(void) {
    for (int round = 0; round < 4; round++) {
        int depth = 2 + round * 3, alpha = 2 + round;
        suffix_tree *t = suffix_new(depth, 1 << 16);
        int32_t *seqs[32];
        int lens[32], head = 0, n = 0;
        for (int op = 0; op < 60; op++) {
            if (n < 32 && (rng_u64() % 3 || n == 0)) {
                int len = (int)(rng_u64() % 60);
                int32_t *s = xmalloc(((size_t)len + 1) * sizeof *s);
                for (int i = 0; i < len; i++) s[i] = (int32_t)(rng_u64() % (uint64_t)alpha);
                err_t e = {0};
                CHECK(suffix_add(t, s, len, &e) == 0);
                seqs[(head + n) % 32] = s;
                lens[(head + n) % 32] = len;
                n++;
            } else {
                suffix_remove(t, seqs[head], lens[head]);
                free(seqs[head]);
                head = (head + 1) % 32;
                n--;
            }
            check_tree(t);
            int32_t *view[32];
            int vl[32];
            for (int i = 0; i < n; i++) view[i] = seqs[(head + i) % 32], vl[i] = lens[(head + i) % 32];
            check_counts(t, view, vl, n, alpha);
        }
        while (n) {
            suffix_remove(t, seqs[head], lens[head]);
            free(seqs[head]);
            head = (head + 1) % 32;
            n--;
        }
        check_tree(t);
        CHECK_EQ_INT(suffix_n_nodes(t), 0);
        suffix_free(t);
    }
}

/* Growing by a cursor counts exactly what suffix_add of the whole does. */
static void test_cursor(void) {
    suffix_tree *a = suffix_new(6, 1 << 16), *b = suffix_new(6, 1 << 16);
    int32_t s[400];
    for (int i = 0; i < 400; i++) s[i] = (int32_t)(rng_u64() % 5);
    suffix_cursor c;
    suffix_cursor_reset(&c);
    for (int i = 0; i < 400; i++) CHECK_EQ_INT(suffix_push(a, &c, s[i]), 0);
    err_t e = {0};
    CHECK(suffix_add(b, s, 400, &e) == 0);
    check_tree(a);
    CHECK_EQ_INT(suffix_n_nodes(a), suffix_n_nodes(b));
    int32_t *v[1] = {s};
    int l[1] = {400};
    check_counts(a, v, l, 1, 5);
    suffix_free(a);
    suffix_free(b);
}

static void test_bounds(void) {
    suffix_tree *t = suffix_new(8, 500);
    suffix_cursor c;
    suffix_cursor_reset(&c);
    int full = 0;
    for (int i = 0; i < 10000; i++) full |= suffix_push(t, &c, (int32_t)(rng_u64() % 1000));
    CHECK(full);
    CHECK(suffix_n_nodes(t) <= 500);
    CHECK(suffix_bytes(t) < 64 * 1024);
    check_tree(t);
    /* a sequence that may not fit is refused whole */
    int before = suffix_n_nodes(t);
    int32_t s[100] = {0};
    err_t e = {0};
    CHECK_EQ_INT(suffix_add(t, s, 100, &e), ERR_RANGE);
    CHECK_EQ_INT(suffix_n_nodes(t), before);
    suffix_clear(t);
    CHECK_EQ_INT(suffix_n_nodes(t), 0);
    CHECK(suffix_add(t, s, 50, &e) == 0); /* 50 * 8 <= 500 */
    check_tree(t);
    suffix_free(t);
}

static void test_propose(void) {
    suffix_tree *t = suffix_new(8, 1 << 12);
    /* after "1 2": "3" three times, "4" once; after "3": "5" */
    int32_t s1[] = {1, 2, 3, 5, 9, 1, 2, 3, 5, 8, 1, 2, 4, 1, 2, 3, 5, 7};
    err_t e = {0};
    CHECK(suffix_add(t, s1, (int)ARRAY_LEN(s1), &e) == 0);
    int32_t ctx[] = {6, 6, 1, 2}, out[8];
    float p[8];
    int ml = 0;
    int k = suffix_propose(t, NULL, ctx, 4, 4, 8, 0.0f, out, p, &ml);
    CHECK_EQ_INT(ml, 2); /* "6 1 2" does not occur, "1 2" does */
    CHECK(k >= 2 && out[0] == 3 && out[1] == 5);
    CHECK_NEAR(p[0], 0.75, 1e-6);
    CHECK_NEAR(p[1], 1.0, 1e-6);
    /* the p_min cut: after "3 5" comes 9, 8 or 7 (1/3 each) */
    k = suffix_propose(t, NULL, ctx, 4, 4, 8, 0.5f, out, p, NULL);
    CHECK_EQ_INT(k, 2);
    /* the depth bounds match + draft */
    k = suffix_propose(t, NULL, ctx, 4, 4, 8, 0.0f, out, p, NULL);
    CHECK(k <= 8 - 2);
    /* nothing matches */
    int32_t none[] = {42};
    CHECK_EQ_INT(suffix_propose(t, NULL, none, 1, 4, 8, 0.0f, out, p, NULL), 0);
    suffix_free(t);
}

/* ---- drafters ---- */

static int naive_ngram(const int32_t *t, int n, int max, int32_t *out) {
    for (int g = 4; g >= 2; g--) {
        if (g > n - 1) continue;
        for (int i = n - g - 1; i >= 0; i--) {
            bool eq = true;
            for (int j = 0; j < g; j++) eq &= t[i + j] == t[n - g + j];
            if (!eq) continue;
            int k = 0;
            while (k < max && i + g + k < n) out[k] = t[i + g + k], k++;
            return k;
        }
    }
    return 0;
}

static void test_ngram(void) {
    draft_opts o = draft_defaults(DRAFT_NGRAM);
    drafter *d = draft_new(&o);
    draft_seq *s = draft_seq_new(d);
    int32_t t[300], a[DRAFT_MAX], b[DRAFT_MAX];
    for (int round = 0; round < 200; round++) {
        int n = 1 + (int)(rng_u64() % 300);
        int alpha = 2 + round % 6;
        for (int i = 0; i < n; i++) t[i] = (int32_t)(rng_u64() % (uint64_t)alpha);
        int max = 1 + round % 8;
        int ka = draft_propose(d, s, t, n, max, a), kb = naive_ngram(t, n, max, b);
        CHECK_EQ_INT(ka, kb);
        CHECK(ka == kb && !memcmp(a, b, (size_t)ka * sizeof *a));
    }
    draft_seq_end(d, s, t, 0, 0, true);
    draft_free(d);
}

/* The scan proposes what the trie of the context proposes: random
 * contexts over small alphabets (many repeats, ties, overlapping matches),
 * every depth and draft length, against suffix_propose on a trie built by
 * suffix_add of the whole context and on one grown by a cursor. */
static void test_scan_vs_trie(void) {
    static int32_t ctx[400], scratch[400 + 2 * 1024];
    CHECK(suffix_scan_scratch(400) <= ARRAY_LEN(scratch));
    int bad = 0;
    for (int round = 0; round < 400 && !bad; round++) {
        int n = 1 + (int)(rng_u64() % 400), alpha = 2 + round % 7, depth = 2 + (int)(rng_u64() % 23);
        for (int i = 0; i < n; i++) ctx[i] = (int32_t)(rng_u64() % (uint64_t)alpha) * 7 + 3;
        suffix_tree *t = suffix_new(depth, n * depth + 16), *g = suffix_new(depth, n * depth + 16);
        err_t e = {0};
        CHECK(suffix_add(t, ctx, n, &e) == 0);
        suffix_cursor c;
        suffix_cursor_reset(&c);
        for (int i = 0; i < n; i++) suffix_push(g, &c, ctx[i]);
        int mm = 1 + (int)(rng_u64() % 16), max = 1 + (int)(rng_u64() % DRAFT_MAX);
        float pmin = (float)(rng_u64() % 4) * 0.1f;
        int32_t a[DRAFT_MAX], b[DRAFT_MAX], gb[DRAFT_MAX];
        float pa[DRAFT_MAX], pb[DRAFT_MAX];
        int la = -1, lb = -1, lg = -1;
        int ka = suffix_scan_propose(ctx, n, depth, mm, max, pmin, scratch, a, pa, &la);
        int kb = suffix_propose(t, NULL, ctx, n, mm, max, pmin, b, pb, &lb);
        int kg = suffix_propose(g, &c, ctx, n, mm, max, pmin, gb, NULL, &lg);
        CHECK_MSG(ka == kb && la == lb, "n %d depth %d: scan %d tokens (match %d), trie %d (match %d)", n, depth, ka, la,
                  kb, lb);
        CHECK(kg == kb && lg == lb && !memcmp(gb, b, (size_t)kb * sizeof *b));
        bad = ka != kb || la != lb;
        for (int i = 0; i < ka && !bad; i++) {
            CHECK_EQ_INT(a[i], b[i]);
            CHECK(pa[i] == pb[i]);
            bad = a[i] != b[i] || pa[i] != pb[i];
        }
        suffix_free(t);
        suffix_free(g);
    }
}

/* The suffix drafter over a context grown token by token: a sequence that
 * drafts from its first token, one that drafts only from late on (nothing
 * was built for it before) and the eager trie the drafter used to keep (a
 * cursor grown over every token) propose the same. */
static void test_suffix_late(void) {
    draft_opts o = draft_defaults(DRAFT_SUFFIX);
    o.suffix_depth = 12;
    o.max_draft = 4;
    o.global_max_nodes = 0;
    drafter *d = draft_new(&o);
    draft_seq *early = draft_seq_new(d), *late = draft_seq_new(d);
    suffix_tree *t = suffix_new(12, 1 << 16);
    suffix_cursor c;
    suffix_cursor_reset(&c);
    static int32_t toks[3000];
    int32_t a[DRAFT_MAX], b[DRAFT_MAX], r[DRAFT_MAX];
    int n_drafts = 0;
    for (int n = 1; n <= 3000; n++) {
        /* phrases of 3-9 tokens from a small set, with noise: copies to find */
        toks[n - 1] = rng_u64() % 5 == 0 ? (int32_t)(rng_u64() % 50) : (int32_t)((n / (3 + n % 7)) % 11);
        suffix_push(t, &c, toks[n - 1]);
        int ka = draft_propose(d, early, toks, n, 4, a);
        int kr = suffix_propose(t, &c, toks, n, MIN(16, 12 - 4), 4, DRAFT_P_MIN, r, NULL, NULL);
        CHECK(ka == kr && !memcmp(a, r, (size_t)ka * sizeof *a));
        if (n < 2000 || n % 7) continue;
        int kb = draft_propose(d, late, toks, n, 4, b);
        CHECK(kb == ka && !memcmp(a, b, (size_t)ka * sizeof *a));
        n_drafts += kb > 0;
    }
    CHECK_MSG(n_drafts > 50, "%d of the late sequence's 143 proposals drafted", n_drafts);
    draft_seq_end(d, early, toks, 0, 3000, false);
    draft_seq_end(d, late, toks, 0, 3000, false);
    suffix_free(t);
    draft_free(d);
}

/* A request's context is searched in its newest seq_window tokens: a
 * pattern repeated there is drafted, one only older than that is not. */
static void test_suffix_window(void) {
    draft_opts o = draft_defaults(DRAFT_SUFFIX);
    o.seq_window = 2000;
    o.suffix_depth = 12;
    o.global_max_nodes = 0;
    drafter *d = draft_new(&o);
    draft_seq *s = draft_seq_new(d);
    static int32_t t[20000];
    int n = 0;
    int32_t pat[10] = {901, 902, 903, 904, 905, 906, 907, 908, 909, 910}, old[4] = {950, 951, 952, 953};
    int32_t out[DRAFT_MAX];
    for (int i = 0; i < 4; i++) t[n++] = old[i];
    for (int i = 0; i < 19000; i++) t[n++] = (int32_t)(rng_u64() % 800);
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 10; i++) t[n++] = pat[i];
    for (int i = 0; i < 3; i++) t[n++] = pat[i];
    int k = draft_propose(d, s, t, n, 8, out);
    CHECK_MSG(k >= 5 && out[0] == 904 && out[4] == 908, "drafted %d tokens, first %d", k, k ? out[0] : -1);
    t[n++] = 950;
    t[n++] = 951;
    CHECK_EQ_INT(draft_propose(d, s, t, n, 8, out), 0);
    draft_seq_end(d, s, t, 0, n, false);
    draft_free(d);
}

static void test_global_store(void) {
    draft_opts o = draft_defaults(DRAFT_SUFFIX);
    o.suffix_depth = 12;
    o.max_draft = 4;
    o.global_max_nodes = 6000;
    drafter *d = draft_new(&o);
    int32_t out[DRAFT_MAX];
    /* 200 outputs of 100 distinct tokens each (1,134 nodes each: 5 fit) */
    static int32_t outs[200][101];
    draft_stats st;
    for (int r = 0; r < 200; r++) {
        outs[r][0] = 7; /* a one-token "prompt" */
        for (int i = 1; i <= 100; i++) outs[r][i] = 1000 + r * 100 + i;
        draft_seq *s = draft_seq_new(d);
        draft_seq_end(d, s, outs[r], 1, 101, true);
        draft_get_stats(d, &st);
        CHECK(st.global_nodes <= 6000);
    }
    draft_get_stats(d, &st);
    CHECK_MSG(st.global_seqs >= 4 && st.global_seqs <= 6, "%d outputs kept", st.global_seqs);
    CHECK_EQ_INT((int)st.global_evicted_total, 200 - st.global_seqs);
    CHECK(st.global_bytes < 512 * 1024);
    /* the newest output drafts, the oldest is gone */
    draft_seq *s = draft_seq_new(d);
    int32_t ctx_new[3] = {5, outs[199][10], outs[199][11]};
    int k = draft_propose(d, s, ctx_new, 3, 4, out);
    CHECK(k == 4 && out[0] == outs[199][12] && out[3] == outs[199][15]);
    draft_seq_end(d, s, NULL, 0, 0, false);
    s = draft_seq_new(d);
    int32_t ctx_old[3] = {5, outs[0][10], outs[0][11]};
    CHECK_EQ_INT(draft_propose(d, s, ctx_old, 3, 4, out), 0);
    draft_seq_end(d, s, NULL, 0, 0, false);
    draft_free(d);
}

static void test_policy(void) {
    double t1 = draft_threshold(1, 1, 0.05, 0), t8 = draft_threshold(8, 8, 0.05, 0), t64 = draft_threshold(64, 64, 0.05, 0);
    CHECK(t1 < t8 && t8 < t64 && t64 < 1);
    /* a draft that costs a step of its own (a draft model as large as the
     * target) never pays at batch 8, however sure; a cheap one may */
    CHECK(draft_threshold(8, 8, 1.0, 9.0) > 1);
    CHECK(draft_threshold(8, 8, 1.0, 0.01) < 1);
    CHECK_EQ_INT(draft_plan(8, 0.9, t1), 8);
    CHECK_EQ_INT(draft_plan(8, 0.1, 0.2), 0);
    CHECK_EQ_INT(draft_plan(8, 0.5, 0.1), 3); /* 0.5, 0.25, 0.125 > 0.1; 0.0625 not */
    CHECK(draft_plan(16, 0.8, t64) < draft_plan(16, 0.8, t1));
    /* alpha follows feedback and drifts back when idle */
    draft_opts o = draft_defaults(DRAFT_NGRAM);
    drafter *d = draft_new(&o);
    draft_seq *s = draft_seq_new(d);
    CHECK_NEAR(draft_seq_alpha(s), 0.5, 1e-9);
    for (int i = 0; i < 30; i++) draft_seq_feedback(d, s, 8, 0, NULL, 0);
    CHECK(draft_seq_alpha(s) < 0.15);
    /* drafts never accepted stop even where a draft costs little (a
     * draft model's one-token draft: ~3% of a step at batch 1, docs/perf.md)
     * within a few steps, and are tried again only now and then */
    draft_seq *r = draft_seq_new(d);
    int n_drafting = 0;
    for (int step = 0; step < 200; step++) {
        int k = draft_plan(8, draft_seq_alpha(r), draft_threshold(1, 1, 0.03, 0));
        if (k > 0) draft_seq_feedback(d, r, k, 0, NULL, 0);
        else draft_seq_idle(r);
        n_drafting += k > 0;
        if (step == 9) CHECK_MSG(n_drafting <= 3, "%d of the first 10 steps drafted", n_drafting);
    }
    CHECK_MSG(n_drafting <= 20, "%d of 200 steps drafted with no draft ever accepted", n_drafting);
    draft_seq_end(d, r, NULL, 0, 0, false);
    for (int i = 0; i < 300; i++) draft_seq_idle(s);
    CHECK(draft_seq_alpha(s) > 0.45);
    for (int i = 0; i < 30; i++) draft_seq_feedback(d, s, 8, 8, NULL, 0);
    CHECK(draft_seq_alpha(s) > 0.85);
    draft_seq_end(d, s, NULL, 0, 0, false);
    draft_free(d);
    err_t e = {0};
    draft_kind k;
    CHECK(draft_kind_parse("suffix", &k, &e) == 0 && k == DRAFT_SUFFIX);
    CHECK(draft_kind_parse("eagle", &k, &e) == ERR_INVALID && strstr(e.msg, "eagle"));
}

/* The learnt token cost: a line through the steps' times. */
static void test_cost(void) {
    draft_cost c = {0};
    CHECK_NEAR(draft_cost_token(&c, 0.05), 0.05, 1e-12); /* nothing seen */
    for (int i = 0; i < 20; i++) draft_cost_observe(&c, 1, 10.0);
    CHECK_NEAR(draft_cost_token(&c, 0.05), 0.05, 1e-12); /* one size only */
    for (int i = 0; i < 200; i++) {
        int n = 1 + i % 9;
        draft_cost_observe(&c, n, 10.0 + 0.2 * n); /* fixed 10 ms, 0.2 ms a token */
    }
    CHECK_NEAR(draft_cost_token(&c, 0.05), 0.02, 1e-3);
    draft_cost_observe(&c, 500, 1e6); /* a prefill chunk: not decode-sized, ignored */
    CHECK_NEAR(draft_cost_token(&c, 0.05), 0.02, 1e-3);
    draft_cost d = {0};
    for (int i = 0; i < 100; i++) draft_cost_observe(&d, 1 + i % 5, 1.0 * (1 + i % 5)); /* no fixed part */
    CHECK(draft_cost_token(&d, 0.05) >= 1);
}

/* The cost of drafts per batch size (draft_cost_threshold), against a
 * reference: a simulated machine whose decode step of n sequences and k
 * drafts takes F + a n + b k ms (times jittered by +-5%, deterministic).
 * A draft accepted with probability p pays when it saves more than it
 * costs: p times a sequence's share of a draft-free step, (F + a n) / n,
 * against b; the threshold must split p exactly there. */
static double sim_ms(double F, double a, double b, int n, int k, uint32_t *rng) {
    *rng = *rng * 1664525u + 1013904223u;
    double jitter = 0.95 + 0.1 * (double)(*rng >> 8) / (double)(1u << 24);
    return (F + a * n + b * k) * jitter;
}

static void check_machine(double F, double a, double b) {
    draft_cost c = {0};
    uint32_t rng = 7;
    CHECK_NEAR(draft_cost_threshold(&c, 8, 0.123), 0.123, 1e-12); /* nothing seen: the fallback */
    for (int i = 0; i < 50; i++) draft_cost_observe_decode(&c, 8, 0, sim_ms(F, a, b, 8, 0, &rng));
    CHECK_NEAR(draft_cost_threshold(&c, 8, 0.123), 0.123, 1e-12); /* no drafts yet: no slope */
    for (int i = 0; i < 400; i++) { /* mostly draft-free steps, some with 1-12 drafts */
        int k = i % 5 == 0 ? 1 + (i / 5) % 12 : 0;
        draft_cost_observe_decode(&c, 8, k, sim_ms(F, a, b, 8, k, &rng));
        int k1 = i % 3 == 0 ? (i / 3) % 9 : 0;
        draft_cost_observe_decode(&c, 1, k1, sim_ms(F, a, b, 1, k1, &rng));
    }
    for (int n = 1; n <= 8; n += 7) {
        double thr = draft_cost_threshold(&c, n, 0.123), share = (F + a * n) / n;
        CHECK_MSG(fabs(thr - b / share) < 0.05 * (b / share) + 0.01, "n=%d: threshold %.4f, the machine's %.4f", n, thr,
                  b / share);
        for (double p = 0.05; p < 1; p += 0.05) { /* the decision against the reference's, outside a 5% band */
            double gain = p * share - b;
            if (fabs(gain) > 0.05 * b) CHECK_MSG((p > thr) == (gain > 0), "n=%d p=%.2f: thr %.4f", n, p, thr);
        }
    }
    /* a batch size seen without drafts takes the nearest one's draft cost */
    for (int i = 0; i < 20; i++) draft_cost_observe_decode(&c, 6, 0, sim_ms(F, a, b, 6, 0, &rng));
    double thr6 = draft_cost_threshold(&c, 6, 0.123), share6 = (F + a * 6) / 6;
    CHECK_MSG(fabs(thr6 - b / share6) < 0.05 * (b / share6) + 0.01, "n=6: %.4f against %.4f", thr6, b / share6);
    CHECK_NEAR(draft_cost_threshold(&c, 3, 0.123), 0.123, 1e-12); /* never seen: the fallback */
    /* the slope is held when the drafts stop (the steps no longer vary),
     * for DRAFT_HELD_STEPS steps (test_cost_stale) */
    double before = draft_cost_threshold(&c, 8, 0.123);
    for (int i = 0; i < DRAFT_HELD_STEPS; i++) draft_cost_observe_decode(&c, 8, 0, sim_ms(F, a, b, 8, 0, &rng));
    CHECK_NEAR(draft_cost_threshold(&c, 8, 0.123), before, 0.05 * before);
}

/* A slope measured too high (a load spike during the steps that carried
 * drafts) prices every draft out, so no later step drafts to correct it: it
 * expires after DRAFT_HELD_STEPS draft-free steps of its batch size, the
 * engine falls back, and the drafts that pay measure it again. */
static void test_cost_stale(void) {
    draft_cost c = {0};
    for (int i = 0; i < 40; i++) { /* ~0.1 ms steps, and 2-4 drafts "costing" 1 ms each */
        int d = i % 4 == 0 ? 2 + i % 3 : 0;
        draft_cost_observe_decode(&c, 1, d, 0.1 + 1.0 * d);
    }
    const double E[4] = {0.95, 0.9, 0.85, 0.8};
    CHECK_EQ_INT(draft_pick(&c, E, 4), 0); /* priced out */
    int held = 0; /* draft-free steps until it expires (the first ones still determine it) */
    while (held < 4 * DRAFT_HELD_STEPS && draft_pick(&c, E, 4) == 0) {
        CHECK(draft_cost_threshold(&c, 1, 0.05) > 1);
        draft_cost_observe_decode(&c, 1, 0, 0.1);
        held++;
    }
    CHECK_MSG(held > DRAFT_HELD_STEPS && held < 2 * DRAFT_HELD_STEPS, "held for %d steps", held);
    CHECK_EQ_INT(draft_pick(&c, E, 4), -1); /* expired: no step times, the engine's fallback */
    CHECK_NEAR(draft_cost_threshold(&c, 1, 0.05), 0.05, 1e-12);
    for (int i = 0; i < 200; i++) { /* the fallback's drafts: what they really cost (10 us each) */
        int d = i % 2 ? 3 : 1;
        draft_cost_observe_decode(&c, 1, d, 0.1 + 0.01 * d);
    }
    CHECK_EQ_INT(draft_pick(&c, E, 4), 4);
    CHECK_NEAR(draft_cost_threshold(&c, 1, 0.05), 0.1, 0.02); /* 0.01 ms a draft, 0.1 ms a step */
}

static void test_cost_by_batch(void) {
    CHECK_NEAR(draft_threshold_measured(8, 4.0, 0.25), 0.5, 1e-12);
    CHECK_NEAR(draft_threshold_measured(1, 1.0, 0.25), 0.25, 1e-12);
    CHECK(draft_threshold_measured(8, 0, 0.25) > 1); /* no time measured: nothing pays */
    check_machine(0.0, 0.68, 0.5);  /* stories260K at batch 8 here: all attention (docs/perf.md) */
    check_machine(0.07, 0.27, 0.2); /* its batch 1 */
    check_machine(20.0, 0.4, 0.4);  /* a bandwidth-bound 1B model: drafts nearly free */
    /* the old rule over the same steps (one line through all tokens, at
     * batch sizes 1-8 as sequences come and go): a draft and a further
     * sequence cost differently, so its threshold is not the machine's */
    draft_cost c = {0};
    uint32_t rng = 3;
    for (int i = 0; i < 400; i++) {
        int n = 1 + i % 8, k = i % 5 == 0 ? 1 + (i / 5) % 12 : 0;
        draft_cost_observe(&c, n + k, sim_ms(0.0, 0.68, 0.5, n, k, &rng));
    }
    double old = draft_threshold(8, 8, draft_cost_token(&c, 0.05), 0), truth = 0.5 / 0.68;
    CHECK_MSG(fabs(old - truth) > 0.1, "old %.3f truth %.3f", old, truth);
}

/* One proposal of a new sequence on d after ctx[0, n), planned at
 * threshold thr, then the step's outcome as the engine reports it: the
 * true continuation is the proposal's first `accept` tokens (-1: all of
 * it) and then another token; the drafts agreeing with it are accepted and
 * the token sampled after them is revealed too. Returns how many were
 * planned. */
static int episode(drafter *d, const int32_t *ctx, int n, double thr, int accept) {
    draft_seq *s = draft_seq_new(d);
    int32_t out[DRAFT_MAX], all[64 + DRAFT_MAX + 1];
    int k = draft_propose(d, s, ctx, n, 8, out);
    int j = draft_plan_seq(d, s, k, thr);
    int a = accept < 0 ? k : MIN(accept, k); /* the continuation agrees with the proposal up to a */
    ASSERT(n <= 64);
    memcpy(all, ctx, (size_t)n * sizeof *ctx);
    int acc = MIN(j, a), m = n;
    for (int i = 0; i < acc; i++) all[m++] = out[i];
    all[m++] = acc < a ? out[acc] : 1000 + acc; /* the sampled token: the proposal's where it agrees */
    draft_seq_feedback(d, s, j, acc, all, m);
    draft_seq_end(d, s, NULL, 0, 0, false);
    return j;
}

/* draft_margin against a naive gap; ngram's confidence classes (the
 * margin a copied token was sampled with) are evidence apart from each
 * other; a declined class is learnt from the tokens the steps reveal and
 * drafted again once they agree with it, without being drafted first. */
static void test_confidence(void) {
    float row[40];
    for (int round = 0; round < 200; round++) {
        int n = 2 + round % 39;
        for (int i = 0; i < n; i++) row[i] = (float)(rng_u64() % 64) / 8.0f - 4.0f; /* ties too */
        if (round % 5 == 0) row[rng_u64() % (uint64_t)n] = -INFINITY; /* a masked token */
        int32_t id = (int32_t)(rng_u64() % (uint64_t)n);
        float best = -INFINITY;
        for (int i = 0; i < n; i++)
            if (i != id) best = row[i] > best ? row[i] : best;
        float want = row[id] - best, got = draft_margin(row, n, id);
        CHECK_MSG(got == want || (isnan(got) && isnan(want)), "margin %g, naive %g", got, want);
    }
    /* a 4-gram match (1 2 3 4) whose continuation 5..12 was sampled with a
     * margin of `m` (NAN: nothing noted) */
    int32_t ctx[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4};
    int n = (int)ARRAY_LEN(ctx);
    double thr1 = draft_threshold(1, 1, 0.05, 0), thr8 = draft_threshold(8, 8, 0.1, 0);
    draft_opts o = draft_defaults(DRAFT_NGRAM);
    drafter *d = draft_new(&o);
    int32_t out[DRAFT_MAX], all[40];
    /* wide margins always copied right, narrow ones always wrong */
    for (int ep = 0; ep < 60; ep++) {
        bool wide = ep % 2;
        draft_seq *s = draft_seq_new(d);
        for (int i = 4; i < 12; i++) draft_seq_note(s, i, wide ? 6.0f : 0.2f);
        int k = draft_propose(d, s, ctx, n, 8, out);
        CHECK_EQ_INT(k, 8);
        int j = draft_plan_seq(d, s, k, thr1);
        memcpy(all, ctx, sizeof ctx);
        int acc = wide ? j : 0;
        for (int i = 0; i < acc; i++) all[n + i] = out[i];
        all[n + acc] = wide ? (acc < k ? out[acc] : 99) : 77;
        draft_seq_feedback(d, s, j, acc, all, n + acc + 1);
        draft_seq_end(d, s, NULL, 0, 0, false);
    }
    for (int wide = 0; wide < 2; wide++) {
        draft_seq *s = draft_seq_new(d);
        for (int i = 4; i < 12; i++) draft_seq_note(s, i, wide ? 6.0f : 0.2f);
        int k = draft_propose(d, s, ctx, n, 8, out);
        CHECK_EQ_INT(draft_plan_seq(d, s, k, thr8), wide ? 8 : 0);
        draft_seq_end(d, s, NULL, 0, 0, false);
    }
    /* the same tokens with nothing noted: a class of its own, on the prior */
    draft_seq *u = draft_seq_new(d);
    CHECK_EQ_INT(draft_propose(d, u, ctx, n, 8, out), 8);
    CHECK_NEAR(draft_seq_accept_p(d, u, 0), 0.5, 1e-6);
    draft_seq_end(d, u, NULL, 0, 0, false);
    /* the narrow class, declined at batch 1 now, is observed without being
     * drafted: once the sampled tokens agree with its first token, it is
     * drafted again within a few steps */
    int steps = 0, j = 0;
    for (; steps < 40 && j == 0; steps++) {
        draft_seq *s = draft_seq_new(d);
        for (int i = 4; i < 12; i++) draft_seq_note(s, i, 0.2f);
        int k = draft_propose(d, s, ctx, n, 8, out);
        j = draft_plan_seq(d, s, k, thr1);
        if (steps == 0) CHECK_EQ_INT(j, 0);
        memcpy(all, ctx, sizeof ctx);
        all[n] = out[0]; /* nothing drafted: the sampled token is the proposal's */
        draft_seq_feedback(d, s, 0, 0, all, j == 0 ? n + 1 : n);
        draft_seq_end(d, s, NULL, 0, 0, false);
    }
    CHECK_MSG(j > 0 && steps <= 12, "the declined class drafted again after %d agreeing steps (j %d)", steps, j);
    /* feedback reads the tokens after the context the proposal was made
     * for: a context that grew meanwhile still scores the proposal's own
     * places (here: the proposal's first token, a miss, at place n) */
    drafter *d2 = draft_new(&o);
    draft_seq *s = draft_seq_new(d2);
    CHECK_EQ_INT(draft_propose(d2, s, ctx, n, 8, out), 8);
    memcpy(all, ctx, sizeof ctx);
    all[n] = 77, all[n + 1] = out[0], all[n + 2] = out[1];
    draft_seq_feedback(d2, s, 0, 0, all, n + 3);
    CHECK_EQ_INT(draft_propose(d2, s, ctx, n, 8, out), 8);
    CHECK(draft_seq_accept_p(d2, s, 0) < 0.2); /* (0 + 0.1) / (1 + 0.2) */
    draft_seq_end(d2, s, NULL, 0, 0, false);
    draft_free(d2);
    draft_free(d);
}

static void test_evidence(void) {
    double thr1 = draft_threshold(1, 1, 0.05, 0); /* batch 1, ~0.048 */
    /* ngram: "20 30" recurs (a 2-gram match, 6 tokens after it to draft);
     * "1 2 3 4" recurs with 10 after it (a 4-gram match) */
    int32_t g2[] = {10, 20, 30, 40, 50, 60, 70, 80, 99, 20, 30};
    int32_t g4[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 1, 2, 3, 4};
    int n2 = (int)(sizeof g2 / sizeof *g2), n4 = (int)(sizeof g4 / sizeof *g4);
    draft_opts o = draft_defaults(DRAFT_NGRAM);
    drafter *d = draft_new(&o);
    /* a fresh table drafts a few tokens on the prior (0.5 each) */
    int first = episode(d, g4, n4, thr1, 0);
    CHECK_MSG(first >= 1 && first <= 5, "a fresh table planned %d", first);
    /* rejected 2-gram drafts: new sequences soon stop drafting them */
    int drafted = 0, late = 0;
    for (int i = 0; i < 200; i++) {
        int j = episode(d, g2, n2, thr1, 0);
        drafted += j > 0;
        late += j > 0 && i >= 100;
    }
    CHECK_MSG(drafted >= 2 && drafted <= 16, "2-gram drafts always rejected: %d of 200 drafted", drafted);
    CHECK_MSG(late <= 6, "%d of the last 100 drafted", late);
    /* which does not silence the 4-gram class: accepted whole, it soon
     * drafts all 8 at batch 8's threshold (a token costing 0.1) */
    double thr8 = draft_threshold(8, 8, 0.1, 0); /* ~0.44 */
    for (int i = 0; i < 30; i++) episode(d, g4, n4, thr1, -1);
    CHECK_EQ_INT(episode(d, g4, n4, thr8, -1), 8);
    /* ... while a 2-gram proposal still is not */
    CHECK_EQ_INT(episode(d, g2, n2, thr8, 0), 0);
    /* accepted 3 tokens at a time: the 4-gram class learns to stop there */
    drafter *d3 = draft_new(&o);
    for (int i = 0; i < 60; i++) episode(d3, g4, n4, thr1, 3);
    int j3 = episode(d3, g4, n4, thr8, 3);
    CHECK_MSG(j3 >= 3 && j3 <= 4, "drafts accepted 3 at a time: %d planned at batch 8", j3);
    draft_free(d3);
    /* the estimates stay in (0, 1] (a class always accepted approaches 1:
     * each position inherits its predecessor's small gap, so deep positions
     * may round to it) */
    draft_seq *s = draft_seq_new(d);
    int32_t out[DRAFT_MAX];
    int k = draft_propose(d, s, g4, n4, 8, out);
    for (int j = 0; j < k; j++) {
        double p = draft_seq_accept_p(d, s, j);
        CHECK_MSG(p > 0 && p <= 1, "position %d: %.17g", j, p);
    }
    CHECK(draft_seq_accept_p(d, s, 0) > 0.9);
    draft_seq_end(d, s, NULL, 0, 0, false);
    /* the sampled class is apart from the greedy one: on the prior still */
    s = draft_seq_new(d);
    draft_seq_set_sampled(s, true);
    CHECK_EQ_INT(draft_propose(d, s, g4, n4, 8, out), 8);
    CHECK_NEAR(draft_seq_accept_p(d, s, 0), 0.5, 1e-6);
    draft_seq_end(d, s, NULL, 0, 0, false);
    draft_free(d);

    /* suffix: the match depth is evidence. One token repeated after
     * varied ones (a depth-1 match: "7" always followed by something else)
     * is rejected; a long repeated phrase (depth 8+) accepted. */
    o = draft_defaults(DRAFT_SUFFIX);
    o.global_max_nodes = 0;
    d = draft_new(&o);
    int32_t sh[64], lg[64];
    int ns = 0, nl = 0;
    for (int i = 0; i < 20; i++) sh[ns++] = i % 2 ? 7 : 100 + i;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 16; i++) lg[nl++] = 200 + i;
    for (int i = 0; i < 9; i++) lg[nl++] = 200 + i;
    sh[ns++] = 7;
    drafted = 0;
    for (int i = 0; i < 100; i++) drafted += episode(d, sh, ns, thr1, 0) > 0;
    CHECK_MSG(drafted <= 10, "depth-1 suffix drafts always rejected: %d of 100 drafted", drafted);
    for (int i = 0; i < 30; i++) episode(d, lg, nl, thr1, -1);
    CHECK_EQ_INT(episode(d, lg, nl, thr8, -1), 8);
    CHECK_EQ_INT(episode(d, sh, ns, thr8, 0), 0);
    draft_free(d);
}

/* The step's time by its drafts (draft_step_time) and the count of a lone
 * sequence's drafts that gives the most tokens per unit of time
 * (draft_pick), against a simulated machine whose decode step goes up in
 * stairs (stories260K's at depth 750 on the AVX-512 machine, ms, +-5%
 * jitter): the learnt times against the machine's, the pick against every
 * count (brute force), and a case where the per-draft threshold drafts one
 * more than pays. */
static const double stair_ms[9] = {0.112, 0.137, 0.179, 0.206, 0.274, 0.305, 0.344, 0.373, 0.451};

/* Tokens per ms of a step carrying E's first d drafts, by c's step times. */
static double stair_obj(const draft_cost *c, const double *E, int d) {
    double sum = 1, t = draft_step_time(c, d);
    for (int i = 0; i < d; i++) sum += E[i];
    return t > 0 ? sum / t : 0;
}

static void test_step_pick(void) {
    draft_cost c = {0};
    uint32_t rng = 11;
    const double e0[3] = {0.8, 0.48, 0.216};
    CHECK_EQ_INT(draft_pick(&c, e0, 3), -1); /* nothing measured */
    for (int i = 0; i < 3000; i++) {
        int d = i % 2 ? (i / 2) % 9 : 0;
        rng = rng * 1664525u + 1013904223u;
        draft_cost_observe_decode(&c, 1, d, stair_ms[d] * (0.95 + 0.1 * (double)(rng >> 8) / (double)(1u << 24)));
    }
    for (int d = 0; d <= 8; d++)
        CHECK_MSG(fabs(draft_step_time(&c, d) - stair_ms[d]) < 0.06 * stair_ms[d], "d=%d: %.4f against %.4f", d,
                  draft_step_time(&c, d), stair_ms[d]);
    CHECK(draft_step_time(&c, 12) > stair_ms[8]); /* never seen: the line */
    CHECK(draft_step_time(&c, DRAFT_MAX + 1) < 0);
    { /* a step the machine stalled (40x) counts as at most twice its prediction */
        draft_cost sp = c;
        draft_cost_observe_decode(&sp, 1, 4, 40 * stair_ms[4]);
        for (int d = 0; d <= 8; d++)
            CHECK_MSG(fabs(draft_step_time(&sp, d) - stair_ms[d]) < 0.15 * stair_ms[d], "after a stall, d=%d: %.4f against %.4f",
                      d, draft_step_time(&sp, d), stair_ms[d]);
    }
    draft_cost_observe_decode(&c, 2, 5, 100.0); /* (a step of two sequences: not a lone one's) */
    CHECK_MSG(fabs(draft_step_time(&c, 5) - stair_ms[5]) < 0.06 * stair_ms[5], "%.4f", draft_step_time(&c, 5));
    /* the stairs: one draft gives 1.8 / 0.137, two 2.28 / 0.179 (less);
     * the line's threshold (its slope over the step) lets two through */
    CHECK_EQ_INT(draft_pick(&c, e0, 3), 1);
    double thr = draft_cost_threshold(&c, 1, 0.5);
    CHECK_MSG(e0[1] > thr, "the threshold %.3f would not draft the second either", thr);
    /* against brute force: up to 8 proposed drafts */
    for (int round = 0; round < 500; round++) {
        double E[8], e = 1;
        rng = rng * 1664525u + 1013904223u;
        int k = (int)(rng >> 28) % 9;
        for (int i = 0; i < k; i++) {
            rng = rng * 1664525u + 1013904223u;
            E[i] = e *= 0.3 + 0.7 * (double)(rng >> 8) / (double)(1u << 24);
        }
        int d = draft_pick(&c, E, k), best = 0;
        CHECK(d >= 0 && d <= k);
        for (int j = 1; j <= k; j++)
            if (stair_obj(&c, E, j) > stair_obj(&c, E, best)) best = j;
        CHECK_MSG(stair_obj(&c, E, d) >= stair_obj(&c, E, best) - 1e-9, "round %d: picked %d, best %d", round, d,
                  best);
    }
    /* a count no longer chosen fades back to the batch size's line */
    draft_cost f = c;
    for (int i = 0; i < DRAFT_HELD_STEPS - 10; i++) draft_cost_observe_decode(&f, 1, 0, stair_ms[0]);
    const draft_line *l = &f.by_n[0];
    double line2 = (l->sy - l->held * l->sx) / l->w + 2 * l->held;
    CHECK_MSG(fabs(draft_step_time(&f, 2) - line2) < 0.01 * line2, "%.4f against the line's %.4f",
              draft_step_time(&f, 2), line2);
}

int main(void) {
    test_cost();
    test_step_pick();
    test_cost_by_batch();
    test_cost_stale();
    test_trie_vs_naive();
    test_cursor();
    test_bounds();
    test_propose();
    test_ngram();
    test_scan_vs_trie();
    test_suffix_late();
    test_suffix_window();
    test_global_store();
    test_policy();
    test_evidence();
    test_confidence();
    return test_summary("test_draft");
}
