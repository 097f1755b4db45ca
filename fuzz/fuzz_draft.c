/*
 * fuzz_draft.c — drives the drafters' structures (sched/suffix.h,
 * sched/draft.h) with an operation sequence read from the input bytes and
 * PANICs (abort) when a checker or an invariant fails:
 *   - a suffix trie of fuzzed depth and node bound: sequences added (or
 *     refused with ERR_RANGE, unchanged), the oldest removed, a cursor
 *     growing one sequence, proposals; suffix_check after every operation,
 *     the node bound always held, counts of stored strings >= 1, proposals
 *     within max and made of tokens that were added;
 *   - the n-gram and suffix drafters over the input as a token stream
 *     (tiny node bounds, so a request's trie rebuilds and the global store
 *     evicts), proposals within max and of tokens seen.
 * After removing every stored sequence the trie must be empty.
 */
#include "sched/draft.h"
#include "sched/suffix.h"

#include <stdlib.h>
#include <string.h>

typedef struct cursor {
    const uint8_t *p;
    size_t n, i;
} cursor;

static int next(cursor *c) { return c->i < c->n ? c->p[c->i++] : 0; }

enum { N_STORED = 16, SEQ_MAX = 64, VOCAB = 24 };

static void verify(const suffix_tree *t, const char *op) {
    err_t e = {0};
    if (suffix_check(t, &e)) PANIC("after %s: %s", op, e.msg);
    if (suffix_n_nodes(t) > suffix_max_nodes(t)) PANIC("after %s: %d nodes, bound %d", op, suffix_n_nodes(t), suffix_max_nodes(t));
}

static void check_draft(const int32_t *out, int k, int max, const char *who) {
    if (k < 0 || k > max) PANIC("%s proposed %d tokens (max %d)", who, k, max);
    for (int i = 0; i < k; i++)
        if (out[i] < 0 || out[i] >= VOCAB) PANIC("%s proposed token %d, never seen", who, out[i]);
}

static void fuzz_trie(cursor *c) {
    int depth = 2 + next(c) % 15, max_nodes = 16 + next(c) * 4;
    suffix_tree *t = suffix_new(depth, max_nodes);
    if (!t) return;
    int32_t *stored[N_STORED];
    int lens[N_STORED], head = 0, n = 0;
    suffix_tree *grown = suffix_new(depth, max_nodes);
    suffix_cursor cur;
    suffix_cursor_reset(&cur);
    int32_t ctx[SEQ_MAX], out[DRAFT_MAX];
    float prob[DRAFT_MAX];
    while (c->i < c->n) {
        int op = next(c) % 5;
        if (op == 0 && n < N_STORED) { /* add */
            int len = next(c) % SEQ_MAX;
            int32_t *s = malloc((size_t)(len + 1) * sizeof *s);
            for (int i = 0; i < len; i++) s[i] = next(c) % VOCAB;
            err_t e = {0};
            int before = suffix_n_nodes(t);
            int rc = suffix_add(t, s, len, &e);
            if (rc == 0) {
                stored[(head + n) % N_STORED] = s;
                lens[(head + n) % N_STORED] = len;
                n++;
                for (int i = 0; i < len; i++)
                    if (suffix_count(t, s + i, 1) < 1) PANIC("a stored token has count 0");
            } else {
                if (rc != ERR_RANGE || suffix_n_nodes(t) != before) PANIC("a refused add changed the trie (rc %d)", rc);
                free(s);
            }
            verify(t, "add");
        } else if (op == 1 && n > 0) { /* evict the oldest */
            suffix_remove(t, stored[head], lens[head]);
            free(stored[head]);
            head = (head + 1) % N_STORED;
            n--;
            verify(t, "remove");
        } else if (op == 2) { /* grow by the cursor */
            int k = 1 + next(c) % 8;
            for (int i = 0; i < k; i++) suffix_push(grown, &cur, next(c) % VOCAB);
            verify(grown, "push");
        } else { /* propose after a fuzzed context */
            int len = next(c) % SEQ_MAX, max = 1 + next(c) % DRAFT_MAX, mm = 1 + next(c) % 20;
            for (int i = 0; i < len; i++) ctx[i] = next(c) % VOCAB;
            float p_min = (float)(next(c) % 10) / 10.0f;
            int ml = -1;
            int k = suffix_propose(t, NULL, ctx, len, mm, max, p_min, out, prob, &ml);
            check_draft(out, k, max, "suffix_propose");
            if (ml < 0 || ml > mm || ml > len || (k > 0 && ml == 0)) PANIC("match length %d (max %d, context %d)", ml, mm, len);
            for (int i = 0; i < k; i++)
                if (!(prob[i] > 0 && prob[i] <= 1)) PANIC("probability %g", (double)prob[i]);
        }
    }
    while (n) {
        suffix_remove(t, stored[head], lens[head]);
        free(stored[head]);
        head = (head + 1) % N_STORED;
        n--;
    }
    verify(t, "remove all");
    if (suffix_n_nodes(t) != 0) PANIC("%d nodes left after removing everything", suffix_n_nodes(t));
    suffix_free(t);
    suffix_free(grown);
}

/* The drafters over the rest of the input as requests' token streams. */
static void fuzz_drafters(cursor *c) {
    for (int kind = DRAFT_NGRAM; kind < DRAFT_N_KINDS; kind++) {
        draft_opts o = draft_defaults((draft_kind)kind);
        o.max_draft = 1 + (int)(c->n % DRAFT_MAX);
        o.suffix_depth = 2 + (int)(c->n % 30);
        o.seq_window = 64;
        o.global_max_nodes = 512;
        drafter *d = draft_new(&o);
        if (!d) continue;
        int32_t toks[512], out[DRAFT_MAX];
        size_t i = c->i;
        while (i < c->n) {
            draft_seq *s = draft_seq_new(d);
            int n = 0, n_prompt = c->p[i] % 8;
            while (i < c->n && n < 512 && c->p[i] != 0xff) {
                toks[n++] = c->p[i++] % VOCAB;
                int max = 1 + toks[n - 1] % DRAFT_MAX;
                int k = draft_propose(d, s, toks, n, max, out);
                check_draft(out, k, MIN(max, o.max_draft), draft_kind_name((draft_kind)kind));
                int j = draft_plan_seq(d, s, k, 0.01 * (toks[n - 1] % 100));
                for (int q = 0; q < j; q++) { /* (a class always accepted may round to 1) */
                    double p = draft_seq_accept_p(d, s, q);
                    if (!(p > 0 && p <= 1)) PANIC("acceptance estimate %g", p);
                }
                /* the sampled token's confidence, then the outcome: from the
                 * context as it stands (the engine's way) or from the counts */
                draft_seq_note(s, n - 1, (float)(toks[n - 1] % 13) * 0.5f - 1.0f);
                draft_seq_feedback(d, s, j, j / 2, (toks[n - 1] & 1) ? toks : NULL, n);
                double a = draft_seq_alpha(s);
                if (!(a > 0 && a <= 1)) PANIC("alpha %g", a);
            }
            i++;
            draft_seq_end(d, s, toks, MIN(n_prompt, n), n, true);
            draft_stats st;
            draft_get_stats(d, &st);
            if (st.global_nodes > o.global_max_nodes) PANIC("global store: %d nodes", st.global_nodes);
        }
        draft_free(d);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cursor c = {data, size, 0};
    fuzz_trie(&c);
    cursor d = {data, size, 0};
    fuzz_drafters(&d);
    return 0;
}
