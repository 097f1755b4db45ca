/*
 * test_engine_grammar.c — constrained decoding inside the engine, on the
 * shared stories260K model and its real tokenizer:
 *   - a lazy grammar starts at its trigger: the text before it is what the
 *     model writes unconstrained, the text after it follows the grammar;
 *     a trigger that never appears leaves the output untouched;
 *   - jump-forward appends a forced run as the tokenizer writes it (a fixed
 *     text comes out as exactly tok_encode of it, with no sampling at all);
 *   - every constrained output is in the grammar's language, with and without
 *     jump-forward, and jump-forward needs fewer forward passes;
 *   - max_tokens is kept when a forced run reaches it;
 *   - masks on the mask worker (the default) give the same tokens as masks
 *     inside the step (mask_sync), greedy and sampled, with requests of one
 *     grammar, of several and unconstrained ones running together;
 *   - a request whose masks are slow (mask_spin_us) sits out while its mask
 *     is computed: an unconstrained request beside it finishes while the
 *     slow one has at most 2 tokens (masks inside the step: in lockstep);
 *   - the mask worker's share between clients (policy_mask_defer): a client
 *     whose masks take 20 ms each beside another client's 200-token
 *     generation (steps 4 ms apart) gets no more masks meanwhile than the
 *     other's forward time pays for (its charge at most the other's, plus
 *     slack), where the worker alone would have run them back to back, and
 *     it is slowed, not failed: its request ends at its length.
 */
#include <string.h>

#include "model/model.h"
#include "sched/engine.h"
#include "server/constrain.h"
#include "tok/tok.h"
#include "test.h"

static tokenizer *g_tok;

static bool eog_fn(void *ctx, int32_t id) { return tok_is_eog((const tokenizer *)ctx, id); }
static int piece_fn(void *ctx, int32_t id, char *buf, int cap) { return tok_piece((const tokenizer *)ctx, id, buf, cap); }
static int tokenize_fn(void *ctx, const char *text, size_t n, int32_t *out, int cap) {
    return tok_encode_continuation((const tokenizer *)ctx, text, n, out, cap);
}

typedef struct result {
    char text[2048];
    int32_t ids[512];
    int n_ids;
    req_finish finish;
    int n_forced, n_passes;
} result;

/* Runs one greedy request; grammar may be NULL. */
static const char *g_skip_open, *g_skip_close; /* set around one run */

static void run(engine *en, const char *prompt, const char *gbnf, const char *trigger, bool jump, int max_tokens,
                result *out) {
    memset(out, 0, sizeof *out);
    int32_t *ids = xmalloc(256 * sizeof *ids);
    int n = tok_encode(g_tok, prompt, strlen(prompt), true, false, ids, 256);
    req *r = req_new(ids, n);
    r->sp.temperature = 0;
    r->max_tokens = max_tokens;
    r->no_jump_forward = !jump;
    if (gbnf) {
        err_t e = {0};
        CHECK_MSG(grammar_from_gbnf(gbnf, strlen(gbnf), &r->grammar, &e) == 0, "%s: %s", gbnf, e.msg);
        if (trigger) r->grammar_trigger = xstrdup(trigger);
        r->trigger_skip_open = g_skip_open;
        r->trigger_skip_close = g_skip_close;
    }
    err_t e = {0};
    CHECK(engine_submit(en, r, &e) == 0);
    req_finish fin = REQ_RUNNING;
    int seen = 0;
    while (fin == REQ_RUNNING) seen = req_wait(r, seen, 5000, &fin);
    out->finish = fin;
    out->n_ids = MIN(seen, 512);
    for (int i = 0; i < out->n_ids; i++) out->ids[i] = r->tokens[i].id;
    tok_decode(g_tok, out->ids, out->n_ids, true, out->text, (int)sizeof out->text);
    out->n_forced = r->n_forced;
    out->n_passes = r->n_forward_steps;
    req_unref(r);
}

/* Submits one request (grammar may be NULL; temperature 0: greedy). */
static req *submit(engine *en, const char *prompt, const char *gbnf, int max_tokens, float temperature, uint64_t seed) {
    int32_t *ids = xmalloc(256 * sizeof *ids);
    int n = tok_encode(g_tok, prompt, strlen(prompt), true, false, ids, 256);
    req *r = req_new(ids, n);
    r->sp.temperature = temperature;
    r->sp.seed = seed;
    r->max_tokens = max_tokens;
    err_t e = {0};
    if (gbnf) CHECK_MSG(grammar_from_gbnf(gbnf, strlen(gbnf), &r->grammar, &e) == 0, "%s: %s", gbnf, e.msg);
    CHECK(engine_submit(en, r, &e) == 0);
    return r;
}

static req *submit_as(engine *en, const char *prompt, const char *gbnf, int max_tokens, uint64_t client) {
    int32_t *ids = xmalloc(256 * sizeof *ids);
    int n = tok_encode(g_tok, prompt, strlen(prompt), true, false, ids, 256);
    req *r = req_new(ids, n);
    r->max_tokens = max_tokens;
    r->ignore_eos = true;
    r->client = client;
    err_t e = {0};
    if (gbnf) CHECK_MSG(grammar_from_gbnf(gbnf, strlen(gbnf), &r->grammar, &e) == 0, "%s: %s", gbnf, e.msg);
    CHECK(engine_submit(en, r, &e) == 0);
    return r;
}

static int wait_done(req *r, req_finish *fin) {
    int seen = 0;
    *fin = REQ_RUNNING;
    while (*fin == REQ_RUNNING) seen = req_wait(r, seen, 10000, fin);
    return seen;
}

/* The same mixed load on an engine with the mask worker and on one with
 * masks inside the step: every request's tokens equal. */
#define N_MIX 8
static void mix_run(engine *en, int32_t out[N_MIX][64], int n_out[N_MIX], req_finish fin[N_MIX]) {
    static const char *const gr[3] = {
        "root ::= [a-z ]{1,60} \".\"",
        "root ::= \"{\\\"n\\\": \" [1-9] [0-9]{0,3} \", \\\"w\\\": \\\"\" [a-z]{1,12} \"\\\"}\"",
        "root ::= (\" the\" | \" a\" | \" cat\" | \" dog\" | \" ran\" | \" sat\")+ \".\"",
    };
    static const char *const pr[4] = {"Once upon a time", "The cat", "Lily wanted", "One day"};
    req *r[N_MIX];
    for (int i = 0; i < N_MIX; i++)
        r[i] = submit(en, pr[i % 4], i % 4 == 3 ? NULL : gr[i % 3], 16, i % 2 ? 0.8f : 0.0f, 1000 + (uint64_t)i);
    for (int i = 0; i < N_MIX; i++) {
        n_out[i] = MIN(wait_done(r[i], &fin[i]), 64);
        for (int k = 0; k < n_out[i]; k++) out[i][k] = r[i]->tokens[k].id;
        req_unref(r[i]);
    }
}

int main(void) {
    model *m = test_load_stories();
    if (!m) return test_summary("test_engine_grammar");
    err_t e = {0};
    CHECK(tok_load(m->gguf, &g_tok, &e) == 0);
    gvocab *gv = constrain_vocab_new(g_tok);
    engine_opts o = engine_defaults();
    o.kv_mem_bytes = 16u << 20;
    o.is_eog = eog_fn;
    o.eog_ctx = g_tok;
    o.gvocab = gv;
    o.tokenize = tokenize_fn;
    o.piece = piece_fn;
    o.tok_ctx = g_tok;
    o.check = true;
    engine *en;
    CHECK(engine_new(m, &o, &en, &e) == 0);

    /* The unconstrained reference: ", there was a little girl named ..." */
    result free_run, lazy, never;
    run(en, "Once upon a time", NULL, NULL, true, 12, &free_run);
    CHECK_MSG(strncmp(free_run.text, ", there was", 11) == 0, "reference: %s", free_run.text);

    /* A lazy grammar: free text up to " there", then " was a cat." or
     * " was a dog." and the end. */
    run(en, "Once upon a time", "root ::= \" was a \" (\"cat\" | \"dog\") \".\"", " there", true, 40, &lazy);
    CHECK_MSG(!strcmp(lazy.text, ", there was a cat.") || !strcmp(lazy.text, ", there was a dog."), "lazy: '%s'",
              lazy.text);
    CHECK_EQ_INT(lazy.finish, REQ_FINISH_STOP);
    CHECK(lazy.n_forced > 0);

    /* A trigger that never comes: the same text as unconstrained. */
    run(en, "Once upon a time", "root ::= \"x\"", "<never>", true, 12, &never);
    CHECK_STR(never.text, free_run.text);
    CHECK_EQ_INT(never.finish, REQ_FINISH_LENGTH);

    /* A trigger between the skip markers does not count (reasoning): " was"
     * comes between " there" and " little", so the output stays free. */
    result skipped, not_skipped;
    g_skip_open = " there";
    g_skip_close = " little";
    run(en, "Once upon a time", "root ::= \" a cat.\"", " was", true, 12, &skipped);
    g_skip_open = g_skip_close = NULL;
    CHECK_STR(skipped.text, free_run.text);
    run(en, "Once upon a time", "root ::= \" a cat.\"", " was", true, 12, &not_skipped);
    CHECK_STR(not_skipped.text, ", there was a cat.");

    /* A fixed text is appended whole, as the tokenizer writes it, before any
     * sampling: the ids are exactly tok_encode's. */
    const char *fixed = " The end of the story is near.";
    result fx;
    run(en, "Once upon a time", "root ::= \" The end of the story is near.\"", NULL, true, 100, &fx);
    CHECK_STR(fx.text, fixed);
    int32_t want[64];
    int n_want = tok_encode_continuation(g_tok, fixed, strlen(fixed), want, 64);
    CHECK_EQ_INT(fx.n_ids, n_want);
    CHECK(fx.n_ids == n_want && memcmp(fx.ids, want, (size_t)n_want * sizeof *want) == 0);
    CHECK_EQ_INT(fx.n_forced, n_want);
    CHECK_EQ_INT(fx.finish, REQ_FINISH_STOP);

    /* max_tokens holds even when the forced run is longer */
    result cut;
    run(en, "Once upon a time", "root ::= \" The end of the story is near.\"", NULL, true, 3, &cut);
    CHECK_EQ_INT(cut.n_ids, 3);
    CHECK_EQ_INT(cut.finish, REQ_FINISH_LENGTH);

    /* A JSON-like grammar with fixed keys: valid with and without
     * jump-forward, and fewer forward passes with it. */
    const char *obj = "root ::= \"{\\\"name\\\": \\\"\" [a-z]{1,8} \"\\\", \\\"kind\\\": \\\"\" (\"cat\" | \"dog\") "
                      "\"\\\", \\\"age\\\": \" [1-9] [0-9]? \"}\"";
    result with_jf, without_jf;
    run(en, "The cat", obj, NULL, true, 100, &with_jf);
    run(en, "The cat", obj, NULL, false, 100, &without_jf);
    for (int k = 0; k < 2; k++) {
        result *r = k ? &without_jf : &with_jf;
        grammar *g = NULL;
        CHECK(grammar_from_gbnf(obj, strlen(obj), &g, &e) == 0);
        gmatch *gm = gmatch_new(g, gv);
        CHECK_MSG(gmatch_accept_bytes(gm, r->text, strlen(r->text)) == 0 && gmatch_can_end(gm), "output %d: %s", k,
                  r->text);
        gmatch_free(gm);
        grammar_unref(g);
        CHECK_EQ_INT(r->finish, REQ_FINISH_STOP);
    }
    CHECK_EQ_INT(without_jf.n_forced, 0);
    CHECK_MSG(with_jf.n_passes * 3 / 2 <= without_jf.n_passes, "forward passes %d with jump-forward, %d without",
              with_jf.n_passes, without_jf.n_passes);

    engine_free(en);

    /* The mask worker against masks inside the step: same tokens. */
    {
        int32_t a[N_MIX][64], b[N_MIX][64];
        int na[N_MIX], nb[N_MIX];
        req_finish fa[N_MIX], fb[N_MIX];
        engine_opts os = o;
        os.mask_sync = true;
        engine *ew, *es;
        CHECK(engine_new(m, &o, &ew, &e) == 0);
        CHECK(engine_new(m, &os, &es, &e) == 0);
        mix_run(ew, a, na, fa);
        mix_run(es, b, nb, fb);
        for (int i = 0; i < N_MIX; i++) {
            CHECK_MSG(fa[i] == fb[i] && na[i] == nb[i], "request %d: finish %d/%d, %d/%d tokens", i, fa[i], fb[i],
                      na[i], nb[i]);
            CHECK_MSG(na[i] == nb[i] && memcmp(a[i], b[i], (size_t)na[i] * sizeof **a) == 0,
                      "request %d: the worker's tokens differ from the step's", i);
            CHECK(na[i] > 0);
        }
        engine_stats st;
        engine_get_stats(ew, &st);
        CHECK(st.constrained_tokens_total > 0);
        engine_free(ew);
        engine_free(es);
    }

    /* A slow grammar (every mask spins 100 ms of CPU: far more than a
     * step of this model, under sanitizers too) beside an unconstrained
     * request of 8 tokens: with the worker, the unconstrained one is done
     * while the slow one has at most 2 of its 4 tokens (it sat out its
     * masks); inside the step each of its masks held back the other's step
     * as well (lockstep: the slow one is done first). */
    for (int sync = 0; sync < 2; sync++) {
        engine_opts os = o;
        os.mask_spin_us = 100000;
        os.check = false;
        os.mask_sync = sync;
        engine *es;
        CHECK(engine_new(m, &os, &es, &e) == 0);
        req *slow = submit(es, "The cat", "root ::= [a-z ]{1,200} \".\"", 4, 0, 1);
        req *quick = submit(es, "Once upon a time", NULL, 8, 0, 1);
        req_finish fq, fs;
        int nq = wait_done(quick, &fq);
        int n_slow_then = req_wait(slow, 0, 0, &fs);
        CHECK_EQ_INT(nq, 8);
        if (!sync) req_cancel(slow);
        int n_slow = wait_done(slow, &fs);
        if (!sync)
            CHECK_MSG(n_slow_then <= 2, "the slow request had %d tokens when the other's 8 were done", n_slow_then);
        else
            CHECK_MSG(n_slow_then >= MIN(n_slow, 4), "inside the step: %d tokens of %d (lockstep expected)",
                      n_slow_then, n_slow);
        req_unref(slow);
        req_unref(quick);
        engine_free(es);
    }
    /* The mask worker's share between clients. Client 1's masks spin 20 ms
     * of CPU each; client 2 generates 200 unconstrained tokens, its steps
     * 4 ms apart (step_delay: time nobody is charged). Client 1 may start a
     * mask only while its charge (its masks, its rows' forward time) is at
     * most half of both clients' (decayed, half-life 1 s), so meanwhile its
     * masks' time is at most client 2's forward time (+ one mask, + the
     * decay's tilt toward the older charge): bound = 3 + 2 x forward / 20 ms,
     * the forward time at most the wall time less the steps' delays. Without
     * the rule the worker runs its masks back to back (~0.5 s for its 22
     * tokens, greedy, ending at the grammar's ".") and client 1 is done
     * before client 2 (~0.9 s). */
    {
        engine_opts os = o;
        os.mask_spin_us = 20000;
        os.step_delay_us = 4000;
        os.mask_budget_us = 0;
        os.check = false;
        engine *es;
        CHECK(engine_new(m, &os, &es, &e) == 0);
        engine_stats s0, s1;
        engine_get_stats(es, &s0);
        int64_t t0 = clock_ns();
        req *slow = submit_as(es, "The cat", "root ::= [a-z ]{1,200} \".\"", 24, 1);
        req *other = submit_as(es, "Once upon a time", NULL, 200, 2);
        req_finish fo, fs;
        int no = wait_done(other, &fo);
        double wall_ms = (double)(clock_ns() - t0) / 1e6;
        int n_slow_then = req_wait(slow, 0, 0, &fs);
        engine_get_stats(es, &s1);
        double fw_ms = (double)(s1.forward_ns_total - s0.forward_ns_total) / 1e6;
        double bound = 3 + 2 * MAX(fw_ms, 0) / 20;
        CHECK_EQ_INT(no, 200);
        CHECK_MSG(n_slow_then <= bound,
                  "client 1 had %d tokens (masks of 20 ms) when client 2's 200 were done: more than %.1f "
                  "(its forward time %.1f ms of %.1f ms)",
                  n_slow_then, bound, fw_ms, wall_ms);
        int n_slow = wait_done(slow, &fs);
        CHECK_MSG(fs == REQ_FINISH_STOP || fs == REQ_FINISH_LENGTH, "client 1's request ended %d (slowed, never failed)",
                  fs);
        CHECK(n_slow >= n_slow_then);
        if (getenv("TEST_VERBOSE"))
            fprintf(stderr, "mask share: client 1 had %d of %d tokens when client 2 was done; bound %.1f (forward %.1f ms of %.1f)\n",
                    n_slow_then, n_slow, bound, fw_ms, wall_ms);
        engine_get_stats(es, &s1);
        CHECK(s1.mask_deferred_total > 0);
        req_unref(slow);
        req_unref(other);
        engine_free(es);
    }
    gvocab_free(gv);
    tok_free(g_tok);
    model_free(m);
    return test_summary("test_engine_grammar");
}
