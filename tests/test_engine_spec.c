/*
 * test_engine_spec.c — speculative decoding in the engine is exact:
 *   - at temperature 0, every drafter (ngram, suffix) gives token for token
 *     the output of decoding without speculation (ids, finish, logprobs),
 *     at batch sizes 1 and 8, on stories260K with its tokenizer and on
 *     random-weight llama and qwen3 fixtures (kvloom gen), with a grammar
 *     (drafts the grammar refuses are cut, jump-forward on and off), and
 *     with max_tokens landing inside a run of accepted drafts;
 *   - at temperature 1 (with top-k/top-p/min-p and penalties), the same
 *     seed gives the same tokens with and without speculation;
 *   - the drafts were really verified: drafted and accepted counters move
 *     and requests take fewer forward passes than tokens;
 *   - the suffix drafter's global store: a request repeating an earlier
 *     one's output is drafted from it (most tokens accepted);
 *   - a per-request switch (no_spec) turns speculation off;
 *   - the distribution at temperature 1 over many seeds: plain decoding
 *     (seeds 1..N) and speculative decoding (seeds N+1..2N) give the same
 *     token frequencies (chi-square homogeneity) and the same rate of
 *     tokens equal to the n-gram continuation (two-proportion z test),
 *     independent samples, so a wrong acceptance rule shows. Breaking the
 *     rule (accepting a draft without sampling, or re-drawing after a
 *     mismatch instead of keeping the sampled token) makes this check fail
 *     (docs/engine.md, "Speculative decoding");
 *   - the draft model (--spec draft): stories260K drafting for itself (at
 *     temperature 0 every draft accepted: its KV follows the sequence) and
 *     a random-weight model with its vocabulary (few accepted), and on the
 *     fixtures one architecture drafting for the other: outputs at
 *     temperature 0 identical to plain decoding (batch 1 and 8, logprobs,
 *     max_tokens inside accepted drafts, a grammar with and without
 *     jump-forward); at temperature 1 the distribution test above with a
 *     frequency penalty q lacks (each wrong rule fails it: engine.md,
 *     "Draft model"); draft files of another vocabulary (size, or the same
 *     size spelt otherwise) or no GGUF at all are refused naming what
 *     differs.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "base/pool.h"
#include "model/model.h"
#include "sched/dmodel.h"
#include "sched/draft.h"
#include "sched/engine.h"
#include "server/constrain.h"
#include "server/server.h"
#include "tok/tok.h"
#include "test.h"

#define MAX_OUT 256

static tokenizer *g_tok;
static model *g_rnd; /* random weights, stories260K's vocabulary (gen_draft) */

static bool eog_fn(void *ctx, int32_t id) { return tok_is_eog((const tokenizer *)ctx, id); }
static int piece_fn(void *ctx, int32_t id, char *buf, int cap) { return tok_piece((const tokenizer *)ctx, id, buf, cap); }
static int tokenize_fn(void *ctx, const char *text, size_t n, int32_t *out, int cap) {
    return tok_encode_continuation((const tokenizer *)ctx, text, n, out, cap);
}

typedef struct job {
    /* input */
    int32_t prompt[512];
    int n_prompt;
    sampler_params sp;
    int max_tokens;
    int n_logprobs;
    const char *gbnf;
    bool jump;
    bool no_spec;
    /* output */
    int32_t out[MAX_OUT];
    float lp[MAX_OUT];
    int32_t top0[MAX_OUT];
    int n_out;
    req_finish fin;
    int passes;
} job;

/* engine_opts.spec_token_cost of new engines: fixed, so the drafts do not
 * depend on this machine's step times (stories260K's steps are so short
 * that the learnt cost would turn most drafts off) */
#define TEST_TOKEN_COST 0.02
static double g_token_cost = TEST_TOKEN_COST;
static bool g_check = true;
/* the draft model of DRAFT_MODEL engines (the target's vocabulary) */
static const model *g_draft;

static engine *new_engine(const model *m, int spec, int max_running, gvocab *gv) {
    engine_opts o = engine_defaults();
    o.spec_token_cost = g_token_cost;
    o.kv_mem_bytes = 32u << 20;
    o.max_running = max_running;
    o.spec = spec;
    o.spec_max = 8;
    if (spec == DRAFT_MODEL) o.draft_model = g_draft;
    o.check = g_check;
    if (g_tok) {
        o.is_eog = eog_fn;
        o.eog_ctx = g_tok;
    }
    if (gv) {
        o.gvocab = gv;
        o.tokenize = tokenize_fn;
        o.piece = piece_fn;
        o.tok_ctx = g_tok;
    }
    engine *en = NULL;
    err_t e = {0};
    CHECK_MSG(engine_new(m, &o, &en, &e) == 0, "%s", e.msg);
    return en;
}

/* Submits all jobs at once (they share steps up to max_running), waits. */
static void run_jobs(engine *en, job *jobs, int n) {
    req **rs = xcalloc((size_t)n, sizeof *rs);
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        int32_t *ids = xmalloc((size_t)j->n_prompt * sizeof *ids);
        memcpy(ids, j->prompt, (size_t)j->n_prompt * sizeof *ids);
        req *r = req_new(ids, j->n_prompt);
        r->sp = j->sp;
        r->max_tokens = j->max_tokens;
        r->n_logprobs = j->n_logprobs;
        r->no_jump_forward = !j->jump;
        r->no_spec = j->no_spec;
        if (j->gbnf) {
            err_t e = {0};
            CHECK_MSG(grammar_from_gbnf(j->gbnf, strlen(j->gbnf), &r->grammar, &e) == 0, "%s", e.msg);
        }
        err_t e = {0};
        CHECK_MSG(engine_submit(en, r, &e) == 0, "%s", e.msg);
        rs[i] = r;
    }
    for (int i = 0; i < n; i++) {
        req *r = rs[i];
        job *j = &jobs[i];
        req_finish fin = REQ_RUNNING;
        int seen = 0;
        while (fin == REQ_RUNNING) seen = req_wait(r, seen, 20000, &fin);
        j->fin = fin;
        j->n_out = MIN(seen, MAX_OUT);
        for (int k = 0; k < j->n_out; k++) {
            j->out[k] = r->tokens[k].id;
            j->lp[k] = r->tokens[k].logprob;
            j->top0[k] = r->tokens[k].n_top > 0 ? r->tokens[k].top_ids[0] : -1;
        }
        j->passes = r->n_forward_steps;
        req_unref(r);
    }
    free(rs);
}

/* Runs copies of `jobs` on en; checks them against the reference outputs.
 * A draft model's output equals plain decoding's token for token at
 * temperature 0 only (above, in distribution: test_distribution): its
 * sampled jobs are checked to run to their end. */
static void check_same(const char *what, engine *en, const job *ref, int n) {
    job *js = xmalloc((size_t)n * sizeof *js);
    memcpy(js, ref, (size_t)n * sizeof *js);
    run_jobs(en, js, n);
    engine_stats st;
    engine_get_stats(en, &st);
    for (int i = 0; i < n; i++) {
        const job *a = &ref[i], *b = &js[i];
        if (st.spec_kind == DRAFT_MODEL && a->sp.temperature > 0) {
            CHECK_MSG(b->fin != REQ_FINISH_ERROR && b->n_out > 0, "%s job %d (sampled): finish %d, %d tokens", what,
                      i, b->fin, b->n_out);
            continue;
        }
        int diff = -1;
        for (int k = 0; k < MIN(a->n_out, b->n_out) && diff < 0; k++)
            if (a->out[k] != b->out[k]) diff = k;
        CHECK_MSG(a->n_out == b->n_out && diff < 0 && a->fin == b->fin,
                  "%s job %d: %d tokens (finish %d) vs %d (finish %d), first difference at %d", what, i, a->n_out,
                  a->fin, b->n_out, b->fin, diff);
        if (a->n_logprobs >= 0)
            for (int k = 0; k < MIN(a->n_out, b->n_out); k++) {
                CHECK_MSG(a->lp[k] == b->lp[k] && a->top0[k] == b->top0[k], "%s job %d: logprob %d differs", what,
                          i, k);
                if (a->lp[k] != b->lp[k]) break;
            }
    }
    free(js);
}

static uint64_t accepted(engine *en, int kind, uint64_t *drafted) {
    engine_stats st;
    engine_get_stats(en, &st);
    if (drafted) *drafted = st.spec_drafted_tokens_total[kind];
    return st.spec_accepted_tokens_total[kind];
}

/* en's outputs of the three job sets (plain decoding's: ref greedy, hot
 * sampled, greedy_short with max_tokens inside runs of drafts) against
 * plain decoding's, token for token; prints and returns the accepted
 * drafts of `kind` (*drafted: how many were drafted). */
static uint64_t check_exact(const char *what, engine *en, int kind, const job *ref, const job *hot,
                            const job *greedy_short, int n, uint64_t *drafted) {
    check_same(what, en, ref, n);
    check_same(what, en, hot, n);
    check_same(what, en, greedy_short, n);
    uint64_t acc = accepted(en, kind, drafted);
    printf("# %s: %llu of %llu drafts accepted\n", what, (unsigned long long)acc, (unsigned long long)*drafted);
    return acc;
}

static int encode(const char *text, int32_t *out, int cap) {
    return tok_encode(g_tok, text, strlen(text), true, false, out, cap);
}

/* ---- exactness on stories260K ---- */

static const char *const prompts[] = {
    "Once upon a time",
    "Lily and Tom went to the park. Lily and Tom saw a dog. Lily and Tom",
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "One day, a little boy named Tim found a big red ball in the garden. He",
    "\"Can I play?\" asked Sue. \"Yes, you can play,\" said Mom. \"Can I",
    "Ben had a toy car. Ben liked his toy car. One day Ben",
};
#define N_PROMPTS ((int)ARRAY_LEN(prompts))

/* The first n (<= N_PROMPTS) prompts as jobs. */
static void set_jobs(job *js, int n, float temp, int max_tokens, int n_logprobs) {
    for (int i = 0; i < n; i++) {
        memset(&js[i], 0, sizeof js[i]);
        js[i].n_prompt = encode(prompts[i], js[i].prompt, 512);
        js[i].sp = sampler_defaults();
        js[i].sp.temperature = temp;
        js[i].sp.seed = 1000 + (uint64_t)i;
        js[i].max_tokens = max_tokens;
        js[i].n_logprobs = i % 2 ? n_logprobs : -1;
        js[i].jump = true;
    }
}

static void test_stories(const model *m, gvocab *gv) {
    job ref[N_PROMPTS], hot[N_PROMPTS], greedy_short[N_PROMPTS];
    set_jobs(ref, N_PROMPTS, 0, 200, 3);
    engine *plain = new_engine(m, DRAFT_OFF, 8, gv);
    run_jobs(plain, ref, N_PROMPTS);
    /* temperature 1 with truncation and penalties */
    set_jobs(hot, N_PROMPTS, 1, 120, 2);
    for (int i = 0; i < N_PROMPTS; i++) {
        hot[i].sp.top_k = i % 3 == 0 ? 40 : 0;
        hot[i].sp.top_p = i % 3 == 1 ? 0.9f : 1;
        hot[i].sp.min_p = i % 3 == 2 ? 0.05f : 0;
        hot[i].sp.repeat_penalty = i == 4 ? 1.1f : 1;
        hot[i].sp.frequency_penalty = i == 5 ? 0.5f : 0;
    }
    run_jobs(plain, hot, N_PROMPTS);
    /* max_tokens inside a run of accepted drafts */
    set_jobs(greedy_short, N_PROMPTS, 0, 7, -1);
    run_jobs(plain, greedy_short, N_PROMPTS);
    engine_free(plain);

    /* the draft model: stories260K itself (its drafts are the target's
     * argmax: all accepted at temperature 0) and a random-weight model
     * with its vocabulary (few accepted) */
    for (int spec = DRAFT_NGRAM; spec <= DRAFT_MODEL + 1; spec++)
        for (int mr = spec > DRAFT_MODEL ? 8 : 1; mr <= 8; mr += 7) { /* (the random draft: batch 8 only) */
            int kind = MIN(spec, DRAFT_MODEL);
            g_draft = spec == DRAFT_MODEL ? m : g_rnd;
            char what[64];
            snprintf(what, sizeof what, "%s%s, batch %d", draft_kind_name(kind),
                     spec > DRAFT_MODEL ? " (random)" : spec == DRAFT_MODEL ? " (itself)" : "", mr);
            engine *en = new_engine(m, kind, mr, gv);
            uint64_t drafted, acc = check_exact(what, en, kind, ref, hot, greedy_short, N_PROMPTS, &drafted);
            if (spec > DRAFT_MODEL) /* (its drafts stop within a few steps: draft.c, ALPHA_PRIOR) */
                CHECK_MSG(drafted > 40 && acc * 2 < drafted, "%s: %llu of %llu drafts accepted", what,
                          (unsigned long long)acc, (unsigned long long)drafted);
            else
                CHECK_MSG(acc > 100 && drafted >= acc, "%s: %llu of %llu drafts accepted", what, (unsigned long long)acc,
                          (unsigned long long)drafted);
            engine_free(en);
        }
    /* learnt costs (what `kvloom run` and serve use): a lone sequence's
     * drafts by the step times measured (draft_pick), batches by the learnt
     * threshold. How much they draft depends on this machine's step times,
     * so only exactness is asserted here (the rules themselves: test_draft) */
    g_token_cost = 0;
    for (int spec = DRAFT_NGRAM; spec <= DRAFT_SUFFIX; spec++)
        for (int mr = 1; mr <= 8; mr += 7) {
            char what[64];
            snprintf(what, sizeof what, "%s, learnt costs, batch %d", draft_kind_name(spec), mr);
            engine *en = new_engine(m, spec, mr, gv);
            uint64_t drafted;
            check_exact(what, en, spec, ref, hot, greedy_short, N_PROMPTS, &drafted);
            engine_free(en);
        }
    g_token_cost = TEST_TOKEN_COST;
    /* drafting for itself at temperature 0, the draft model proposes the
     * target's own argmax: every draft is accepted, which holds only if
     * its KV follows the sequence (catch-up, rollback) exactly */
    g_draft = m;
    engine *self = new_engine(m, DRAFT_MODEL, 8, gv);
    check_same("draft (itself), greedy", self, ref, N_PROMPTS);
    uint64_t drafted, acc = accepted(self, DRAFT_MODEL, &drafted);
    CHECK_MSG(drafted > 200 && acc == drafted, "draft (itself), greedy: %llu of %llu drafts accepted",
              (unsigned long long)acc, (unsigned long long)drafted);
    engine_free(self);

    /* the drafts pay: fewer forward passes than tokens (prompt 2 repeats
     * itself); and no_spec turns it off for one request */
    engine *en = new_engine(m, DRAFT_NGRAM, 8, gv);
    job one[2];
    memcpy(&one[0], &ref[2], sizeof one[0]);
    memcpy(&one[1], &ref[2], sizeof one[1]);
    one[1].no_spec = true;
    run_jobs(en, one, 2);
    CHECK_MSG(one[0].passes * 10 < one[0].n_out * 8, "%d passes for %d tokens", one[0].passes, one[0].n_out);
    CHECK_MSG(one[1].passes >= one[1].n_out, "no_spec: %d passes for %d tokens", one[1].passes, one[1].n_out);
    engine_free(en);
}

/* The suffix drafter's global store: the second time a prompt's output is
 * asked for, it is drafted from the first one's. */
static void test_global_store(const model *m) {
    engine *en = new_engine(m, DRAFT_SUFFIX, 8, NULL);
    job js[2];
    set_jobs(js, 2, 0, 200, -1);
    memcpy(&js[1], &js[0], sizeof js[1]);
    run_jobs(en, &js[0], 1);
    uint64_t d0, a0 = accepted(en, DRAFT_SUFFIX, &d0);
    run_jobs(en, &js[1], 1);
    uint64_t d1, a1 = accepted(en, DRAFT_SUFFIX, &d1);
    CHECK(js[0].n_out == js[1].n_out && memcmp(js[0].out, js[1].out, sizeof js[0].out) == 0);
    CHECK_MSG(a1 - a0 >= (uint64_t)js[1].n_out * 8 / 10, "second run: %llu of %d tokens accepted",
              (unsigned long long)(a1 - a0), js[1].n_out);
    CHECK_MSG(js[1].passes * 3 < js[0].passes, "passes: %d the first time, %d the second", js[0].passes,
              js[1].passes);
    engine_stats st;
    engine_get_stats(en, &st);
    CHECK_EQ_INT(st.spec_global_seqs, 2);
    engine_free(en);
}

/* A grammar over words the story repeats: drafts outside it are cut,
 * the output is the same as without speculation. */
static void test_grammar(const model *m, gvocab *gv) {
    const char *g = "root ::= (\" Lily\" | \" and\" | \" Tom\" | \" went\" | \" to\" | \" the\" | \" park\" | \".\")+";
    job ref[4];
    set_jobs(ref, 4, 0, 60, -1);
    for (int i = 0; i < 4; i++) {
        ref[i].gbnf = g;
        ref[i].jump = i % 2 == 0;
        ref[i].sp.temperature = i < 2 ? 0 : 1;
        ref[i].max_tokens = 60;
        memcpy(ref[i].prompt, ref[1].prompt, sizeof ref[i].prompt);
        ref[i].n_prompt = ref[1].n_prompt;
    }
    engine *plain = new_engine(m, DRAFT_OFF, 8, gv);
    run_jobs(plain, ref, 4);
    engine_free(plain);
    for (int spec = DRAFT_NGRAM; spec <= DRAFT_MODEL + 1; spec++) {
        int kind = MIN(spec, DRAFT_MODEL);
        g_draft = spec == DRAFT_MODEL ? m : g_rnd;
        engine *en = new_engine(m, kind, 4, gv);
        check_same(draft_kind_name(kind), en, ref, 4);
        uint64_t drafted, acc = accepted(en, kind, &drafted);
        CHECK_MSG(spec > DRAFT_MODEL ? drafted > 20 : acc > 20, "grammar, %s: %llu of %llu drafts accepted",
                  draft_kind_name(kind), (unsigned long long)acc, (unsigned long long)drafted);
        engine_free(en);
    }
}

/* Random-weight fixtures: prompts of random ids with a repeated stretch. */
static model *load_fixture(const char *name) {
    char path[1024];
    const char *dir = getenv("KVLOOM_FIXTURES");
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "build/fixtures/models", name);
    model *m = NULL;
    err_t e = {0};
    CHECK_MSG(model_load(path, &m, &e) == 0, "%s: %s (make fixtures)", path, e.msg);
    return m;
}

/* name's model, with the draft model `draft_name` (another fixture of the
 * same vocabulary, another architecture) for DRAFT_MODEL. */
static void test_fixture(const char *name, const char *draft_name) {
    model *m = load_fixture(name), *dm = load_fixture(draft_name);
    if (!m || !dm) {
        model_free(m);
        model_free(dm);
        return;
    }
    g_draft = dm;
    job ref[8];
    uint64_t x = 12345;
    for (int i = 0; i < 8; i++) {
        memset(&ref[i], 0, sizeof ref[i]);
        int n = 24 + 10 * i;
        for (int k = 0; k < n; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            ref[i].prompt[k] = k >= n / 2 ? ref[i].prompt[k - n / 2] : (int32_t)((x >> 33) % (uint64_t)m->cfg.n_vocab);
        }
        ref[i].n_prompt = n;
        ref[i].sp = sampler_defaults();
        ref[i].sp.temperature = i < 6 ? 0 : 1;
        ref[i].sp.seed = (uint64_t)i;
        ref[i].max_tokens = 100;
        ref[i].n_logprobs = i % 3 == 0 ? 1 : -1;
    }
    tokenizer *keep = g_tok;
    g_tok = NULL; /* no EOG test: the fixtures' vocabularies are ids only */
    engine *plain = new_engine(m, DRAFT_OFF, 8, NULL);
    run_jobs(plain, ref, 8);
    engine_free(plain);
    for (int spec = DRAFT_NGRAM; spec < DRAFT_N_KINDS; spec++)
        for (int mr = 1; mr <= 8; mr += 7) {
            char what[128];
            snprintf(what, sizeof what, "%s, %s, batch %d", name, draft_kind_name(spec), mr);
            engine *en = new_engine(m, spec, mr, NULL);
            check_same(what, en, ref, 8);
            uint64_t d, a = accepted(en, spec, &d);
            CHECK_MSG(d > 0, "%s: nothing drafted", what);
            printf("# %s: %llu of %llu drafts accepted\n", what, (unsigned long long)a, (unsigned long long)d);
            engine_free(en);
        }
    g_tok = keep;
    model_free(m);
    model_free(dm);
}

/* ---- the draft model's files ---- */

/* A random-weight model (kvloom gen) with vocab_from's vocabulary (NULL: a
 * byte vocabulary of n_vocab) and another shape than stories260K's,
 * written to path: a draft that is rarely right. */
static model *gen_draft(const char *path, const char *vocab_from, const char *n_vocab) {
    char *argv[32] = {"--arch", "llama", "--n-embd", "64", "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2",
                      "--n-ff", "128", "--n-vocab", (char *)n_vocab, "--type", "F32", "--seed", "7", "-o", (char *)path};
    int argc = 20;
    if (vocab_from) argv[argc++] = "--vocab", argv[argc++] = (char *)vocab_from; /* else a byte vocabulary */
    CHECK_EQ_INT(cli__gen(argc, argv), 0);
    model *m = NULL;
    err_t e = {0};
    CHECK_MSG(model_load(path, &m, &e) == 0, "%s: %s", path, e.msg);
    return m;
}

/* Draft files that cannot draft are refused with what differs: another
 * vocabulary size (by the engine too), the same size spelt otherwise, a
 * file that is no GGUF. */
static void test_bad_drafts(const model *m) {
    err_t e = {0};
    model *dm = NULL;
    char path[256], bytes_path[256];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    snprintf(bytes_path, sizeof bytes_path, "/tmp/kvloom-test-draft-bytes-%d.gguf", (int)getpid());
    model *other = gen_draft(bytes_path, NULL, "512"); /* 512 tokens, not stories260K's */
    CHECK(server_load_draft(bytes_path, g_tok, "stories", &dm, &e) < 0 && !dm);
    CHECK_MSG(strstr(e.msg, "token 259") && strstr(e.msg, "differ"), "%s", e.msg);
    model_free(other);
    remove(bytes_path);
    const char *fx = getenv("KVLOOM_FIXTURES");
    char fpath[1024];
    snprintf(fpath, sizeof fpath, "%s/llama-f32.gguf", fx ? fx : "build/fixtures/models");
    CHECK(server_load_draft(fpath, g_tok, "stories", &dm, &e) < 0 && !dm);
    CHECK_MSG(strstr(e.msg, "300 tokens") && strstr(e.msg, "512"), "%s", e.msg);
    CHECK(server_load_draft("Makefile", g_tok, "stories", &dm, &e) < 0 && !dm);
    CHECK_MSG(strstr(e.msg, "--draft-model") && strstr(e.msg, "GGUF"), "%s", e.msg);
    CHECK(server_load_draft("/nonexistent.gguf", g_tok, "stories", &dm, &e) < 0 && !dm);
    CHECK(server_load_draft(path, g_tok, "stories", &dm, &e) == 0 && dm);
    model_free(dm);
    /* the engine: a draft model of another vocabulary size, and one
     * without spec draft */
    model *fixture = NULL;
    CHECK(model_load(fpath, &fixture, &e) == 0);
    engine_opts o = engine_defaults();
    o.spec = DRAFT_MODEL;
    o.draft_model = fixture;
    engine *en = NULL;
    CHECK(engine_new(m, &o, &en, &e) == ERR_INVALID && !en);
    CHECK_MSG(strstr(e.msg, "300") && strstr(e.msg, "512"), "%s", e.msg);
    o.draft_model = NULL;
    CHECK(engine_new(m, &o, &en, &e) == ERR_INVALID && strstr(e.msg, "draft model"));
    o.spec = DRAFT_NGRAM;
    o.draft_model = m;
    CHECK(engine_new(m, &o, &en, &e) == ERR_INVALID && strstr(e.msg, "spec draft"));
    model_free(fixture);
}

/* ---- the draft model's pool ---- */

/* One draft step of s over ctx[0, n) at temperature 0: the drafts (k
 * asked) into out, their count returned; the step ends as if none were
 * accepted (the context stays ctx[0, n)). */
static int dm_step(dmodel *d, dmodel_seq *s, const int32_t *ctx, int n, int k, int32_t *out) {
    dmodel_how how = {.sp = sampler_defaults()};
    how.sp.temperature = 0;
    int got = dmodel_add(d, s, ctx, n, k, &how);
    double ms;
    CHECK(dmodel_run(d, &ms));
    const int32_t *dr;
    int nd = dmodel_seq_drafts(s, &dr);
    CHECK_MSG(nd <= got, "%d drafts, %d promised", nd, got);
    memcpy(out, dr, (size_t)nd * sizeof *dr);
    dmodel_seq_sync(s, ctx, n);
    return nd;
}

/* A draft pool that runs out stops a sequence's drafting (the output stays
 * exact: it decodes without drafts), and drafting comes back when blocks
 * are freed: a sequence that got none, and one that got part of its
 * context's blocks (its catch-up runs in the part it has), draft again
 * once another sequence ends, and their drafts are those of a draft model
 * with room to spare (the reused blocks' old K/V does not leak in). */
static void test_draft_pool(const model *m) {
    pool *w = pool_new(1);
    dmodel_opts o = {.n_blocks = 4, .block_tokens = 16, .max_tokens = 256, .max_seqs = 4, .max_rows = 8,
                     .n_ctx = 256, .workers = w};
    dmodel *small = NULL, *big = NULL;
    err_t e = {0};
    CHECK_MSG(dmodel_new(m, m, &o, &small, &e) == 0, "%s", e.msg);
    o.n_blocks = 64;
    CHECK_MSG(dmodel_new(m, m, &o, &big, &e) == 0, "%s", e.msg);
    if (!small || !big) goto out;
    int32_t ctx_a[64], ctx_b[64], ref[8], got[8];
    int na = encode(prompts[3], ctx_a, 64), nb = encode(prompts[4], ctx_b, 64);
    CHECK_MSG(na > 16 && na + 7 <= 48 && nb > 32 && nb + 7 <= 64, "prompt lengths %d, %d", na, nb);
    dmodel_seq *a = dmodel_seq_new(small, 1), *b = dmodel_seq_new(small, 2), *c = dmodel_seq_new(small, 3);
    dmodel_seq *rb = dmodel_seq_new(big, 2), *rc = dmodel_seq_new(big, 3);
    /* a takes 2-3 of the 4 blocks; b (4 blocks) gets the rest, too few
     * for its context: no drafts, its catch-up runs in what it has */
    CHECK(dm_step(small, a, ctx_a, na, 8, got) == 8);
    CHECK_EQ_INT(dm_step(small, b, ctx_b, nb, 8, got), 0);
    /* c gets nothing at all */
    CHECK_EQ_INT(dm_step(small, c, ctx_a, na, 8, got), 0);
    CHECK_EQ_INT(dm_step(small, b, ctx_b, nb, 8, got), 0);
    /* a ends: b drafts, as the roomy runner does */
    dmodel_seq_free(a);
    int n_ref = dm_step(big, rb, ctx_b, nb, 8, ref);
    CHECK_EQ_INT(n_ref, 8);
    CHECK_EQ_INT(dm_step(small, b, ctx_b, nb, 8, got), n_ref);
    CHECK_MSG(!memcmp(got, ref, sizeof ref), "b's drafts after the pool freed up differ from a roomy pool's");
    /* b ends: c drafts (in blocks a and b wrote before) */
    dmodel_seq_free(b);
    n_ref = dm_step(big, rc, ctx_a, na, 8, ref);
    CHECK_EQ_INT(dm_step(small, c, ctx_a, na, 8, got), n_ref);
    CHECK_MSG(n_ref == 8 && !memcmp(got, ref, sizeof ref), "c's drafts after the pool freed up differ");
    dmodel_seq_free(c);
    dmodel_seq_free(rb);
    dmodel_seq_free(rc);
out:
    dmodel_free(small);
    dmodel_free(big);
    pool_free(w);
}

/* ---- the distribution at temperature 1 ---- */

/* The n-gram continuation of ctx[0, n) (as the NGRAM drafter's rule, written
 * again here: last 4..2 tokens' latest earlier occurrence), or -1. */
static int32_t ngram_next(const int32_t *ctx, int n) {
    for (int g = MIN(4, n - 1); g >= 2; g--)
        for (int i = n - g - 1; i >= 0; i--)
            if (!memcmp(ctx + i, ctx + n - g, (size_t)g * sizeof *ctx)) return ctx[i + g];
    return -1;
}

/* Upper tail of the chi-square distribution (Wilson-Hilferty). */
static double chi2_sf(double x, int k) {
    double z = (pow(x / k, 1.0 / 3) - (1 - 2.0 / (9 * k))) / sqrt(2.0 / (9 * k));
    return 0.5 * erfc(z / sqrt(2));
}

#define DIST_TOKENS 64
#define DIST_POS 4 /* generated positions whose token frequencies are compared */
static const int dist_pos[DIST_POS] = {4, 16, 32, 48};

/* Per sequence (so every statistic is over independent samples): the
 * tokens at dist_pos, and the share of its tokens equal to the n-gram
 * continuation of what came before (where the drafter proposes, so where a
 * wrong rule acts). */
typedef struct sample {
    int32_t at[DIST_POS];
    double rate;
    double lp;     /* mean log-probability (the target's) of its tokens   */
    double rep;    /* share of its tokens already in its context           */
} sample;

static void collect(engine *en, const int32_t *prompt, int n_prompt, int seed0, int n_seeds, const sampler_params *sp,
                    sample *out) {
    const int batch = 64;
    job *js = xcalloc((size_t)batch, sizeof *js);
    int32_t ctx[600];
    for (int s0 = 0; s0 < n_seeds; s0 += batch) {
        int nb = MIN(batch, n_seeds - s0);
        for (int i = 0; i < nb; i++) {
            memcpy(js[i].prompt, prompt, (size_t)n_prompt * sizeof *prompt);
            js[i].n_prompt = n_prompt;
            js[i].sp = *sp;
            js[i].sp.seed = (uint64_t)(seed0 + s0 + i);
            js[i].max_tokens = DIST_TOKENS;
            js[i].n_logprobs = 0;
            js[i].jump = true;
        }
        run_jobs(en, js, nb);
        for (int i = 0; i < nb; i++) {
            sample *sm = &out[s0 + i];
            memcpy(ctx, prompt, (size_t)n_prompt * sizeof *prompt);
            int opp = 0, hit = 0, seen = 0;
            double lp = 0;
            for (int k = 0; k < js[i].n_out; k++) {
                int32_t tk = js[i].out[k];
                int32_t guess = ngram_next(ctx, n_prompt + k);
                opp += guess >= 0;
                hit += guess >= 0 && guess == tk;
                for (int q = 0; q < n_prompt + k; q++)
                    if (ctx[q] == tk) {
                        seen++;
                        break;
                    }
                lp += js[i].lp[k];
                ctx[n_prompt + k] = tk;
            }
            sm->lp = js[i].n_out ? lp / js[i].n_out : 0;
            sm->rep = js[i].n_out ? (double)seen / js[i].n_out : 0;
            for (int p = 0; p < DIST_POS; p++) sm->at[p] = dist_pos[p] < js[i].n_out ? js[i].out[dist_pos[p]] : -1;
            sm->rate = opp ? (double)hit / opp : 0;
        }
    }
    free(js);
}

/* Chi-square homogeneity p-value of two samples of categories (ids >= -1:
 * -1 = the sequence ended before) over n_vocab + 1 bins, bins with fewer
 * than 8 expected in either sample pooled. */
static double homogeneity_p(const sample *a, const sample *b, int n, int pos, int nv, double *chi_out, int *dof) {
    int *ca = xcalloc((size_t)nv + 1, sizeof *ca), *cb = xcalloc((size_t)nv + 1, sizeof *cb);
    for (int i = 0; i < n; i++) {
        ca[a[i].at[pos] + 1]++;
        cb[b[i].at[pos] + 1]++;
    }
    double chi = 0;
    int bins = 0;
    long ra = 0, rb = 0;
    for (int t = 0; t <= nv; t++) {
        double e = (ca[t] + cb[t]) / 2.0; /* equal sample sizes */
        if (e < 8) {
            ra += ca[t], rb += cb[t];
            continue;
        }
        chi += (ca[t] - e) * (ca[t] - e) / e + (cb[t] - e) * (cb[t] - e) / e;
        bins++;
    }
    if (ra + rb > 0) {
        double e = (ra + rb) / 2.0;
        chi += (ra - e) * (ra - e) / e + (rb - e) * (rb - e) / e;
        bins++;
    }
    free(ca);
    free(cb);
    *chi_out = chi;
    *dof = bins - 1;
    return bins > 1 ? chi2_sf(chi, bins - 1) : 1;
}

/* Under a sanitizer (several times dearer) the statistics run on fewer
 * seeds: the plain build's run is the one with the power to see a wrong
 * rule; this one runs the same paths (64 seeds keep the counters' checks
 * below ~3 standard deviations clear). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DIST_SEEDS 64
#else
#define DIST_SEEDS 512
#endif

/* Welch's t of a per-sequence statistic (offset into sample) a vs b. */
static double welch_t(const sample *a, const sample *b, int n, size_t off, double *ma_out, double *mb_out) {
    double ma = 0, mb = 0, va = 0, vb = 0;
#define STAT(x, i) (*(const double *)((const char *)&(x)[i] + off))
    for (int i = 0; i < n; i++) ma += STAT(a, i), mb += STAT(b, i);
    ma /= n, mb /= n;
    for (int i = 0; i < n; i++)
        va += (STAT(a, i) - ma) * (STAT(a, i) - ma), vb += (STAT(b, i) - mb) * (STAT(b, i) - mb);
#undef STAT
    va /= n - 1, vb /= n - 1;
    *ma_out = ma, *mb_out = mb;
    return (ma - mb) / sqrt(va / n + vb / n + 1e-300);
}

/* Plain decoding's sample a against a speculative one b: the token
 * frequencies at dist_pos (chi-square homogeneity, Bonferroni) and three
 * per-sequence statistics where a wrong rule shows (Welch's t): the rate
 * of tokens equal to the n-gram continuation (the n-gram drafter's
 * proposal), the mean log-probability of the tokens (a rule that keeps
 * too many drafts of a draft model gives less likely tokens), the share
 * of tokens already in the context (penalties act on them). */
static void compare(const char *what, const sample *a, const sample *b, int n, int nv) {
    double p_min = 1;
    for (int p = 0; p < DIST_POS; p++) {
        double chi;
        int dof;
        double pv = homogeneity_p(a, b, n, p, nv, &chi, &dof);
        printf("# %s: token %d: chi2 %.1f on %d dof, p %.3g\n", what, dist_pos[p], chi, dof, pv);
        p_min = MIN(p_min, pv);
    }
    CHECK_MSG(p_min * DIST_POS > 1e-3, "%s: token frequencies differ (smallest p %.3g of %d tests)", what, p_min,
              DIST_POS);
    static const struct {
        const char *name;
        size_t off;
    } stats[] = {{"n-gram continuation rate", offsetof(sample, rate)},
                 {"mean logprob", offsetof(sample, lp)},
                 {"repeated-token share", offsetof(sample, rep)}};
    for (size_t k = 0; k < ARRAY_LEN(stats); k++) {
        double ma, mb, t = welch_t(a, b, n, stats[k].off, &ma, &mb);
        printf("# %s: %s %.4f plain vs %.4f speculative (t %.2f)\n", what, stats[k].name, ma, mb, t);
        CHECK_MSG(fabs(t) < 3.5, "%s: %s %.4f plain vs %.4f speculative (t %.2f)", what, stats[k].name, ma, mb, t);
    }
}

static void test_distribution(const model *m) {
    const int n_seeds = DIST_SEEDS;
    int32_t prompt[128];
    int n_prompt = encode(prompts[2], prompt, 128);
    int nv = m->cfg.n_vocab;
    sample *a = xcalloc((size_t)n_seeds, sizeof *a), *b = xcalloc((size_t)n_seeds, sizeof *b);
    sampler_params sp = sampler_defaults(); /* temperature 1, no truncation */
    /* drafts at every chance, even at batch 64; no checker (speed) */
    g_token_cost = 1e-9;
    g_check = false;
    engine *plain0 = new_engine(m, DRAFT_OFF, 64, NULL);
    collect(plain0, prompt, n_prompt, 1, n_seeds, &sp, a);
    engine_free(plain0);
    engine *spec = new_engine(m, DRAFT_NGRAM, 64, NULL);
    collect(spec, prompt, n_prompt, 1 + n_seeds, n_seeds, &sp, b);
    uint64_t drafted, acc = accepted(spec, DRAFT_NGRAM, &drafted);
    engine_free(spec);
    printf("# distribution: ngram: %llu of %llu drafts accepted\n", (unsigned long long)acc,
           (unsigned long long)drafted);
    CHECK_MSG(acc > 2u * (unsigned)n_seeds, "only %llu drafts accepted: the test would not see a wrong rule",
              (unsigned long long)acc);
    compare("ngram", a, b, n_seeds, nv);
    engine *plain;
    /* the draft model (q is not a point mass: the general rule):
     * stories260K itself with a frequency penalty, which the draft's q
     * does not have, so q != p where the story repeats itself (~75% of the
     * drafts accepted). Broken on purpose, the rule fails here: always
     * keeping the draft t = -12.8, drawing from p instead of the residual
     * t = -4.6, keeping d with probability p(d) t = 10.6 (the
     * repeated-token share; threshold 3.5). Fewer seeds lose that power:
     * at 256 seeds (with penalty 1.0 and 4 drafts per step, which
     * strengthen the other two: t = -13.9 and 11.2) drawing from p gave
     * t = -2.6, unseen. */
    sp.frequency_penalty = 0.5f;
    plain = new_engine(m, DRAFT_OFF, 64, NULL);
    collect(plain, prompt, n_prompt, 1 + 3 * n_seeds, n_seeds, &sp, a);
    engine_free(plain);
    g_draft = m;
    spec = new_engine(m, DRAFT_MODEL, 64, NULL);
    collect(spec, prompt, n_prompt, 1 + 2 * n_seeds, n_seeds, &sp, b);
    acc = accepted(spec, DRAFT_MODEL, &drafted);
    engine_free(spec);
    printf("# distribution: draft model: %llu of %llu drafts accepted\n", (unsigned long long)acc,
           (unsigned long long)drafted);
    CHECK_MSG(drafted > 8u * (unsigned)n_seeds && acc < drafted, "%llu of %llu drafts accepted: the test would not see a "
              "wrong rule", (unsigned long long)acc, (unsigned long long)drafted);
    compare("draft model", a, b, n_seeds, nv);
    g_token_cost = TEST_TOKEN_COST;
    g_check = true;
    free(a);
    free(b);
}

int main(void) {
    CHECK(kern_init(NULL) == 0); /* the machine's fastest kernels, as the server runs */
    model *m = test_load_stories();
    if (!m) return test_summary("test_engine_spec");
    err_t e = {0};
    CHECK(tok_load(m->gguf, &g_tok, &e) == 0);
    gvocab *gv = constrain_vocab_new(g_tok);
    char rnd_path[256], stories_path[256];
    snprintf(rnd_path, sizeof rnd_path, "/tmp/kvloom-test-draft-%d.gguf", (int)getpid());
    snprintf(stories_path, sizeof stories_path, "%s/models/stories260K.gguf", test_shared_dir());
    g_rnd = gen_draft(rnd_path, stories_path, "512");
    remove(rnd_path); /* (mapped: stays readable) */
    if (!g_rnd) return test_summary("test_engine_spec");
    int64_t t0 = clock_ns();
    if (getenv("TEST_SPEC_DIST_ONLY")) goto dist; /* checking the distribution test alone */
    test_stories(m, gv);
    printf("# stories: %.1f s\n", (clock_ns() - t0) / 1e9);
    test_global_store(m);
    test_bad_drafts(m);
    test_draft_pool(m);
    test_grammar(m, gv);
    printf("# grammar: %.1f s\n", (clock_ns() - t0) / 1e9);
    test_fixture("qwen3-f32.gguf", "llama-q8_0.gguf");
    test_fixture("llama-q8_0.gguf", "qwen3-f32.gguf");
    printf("# fixtures: %.1f s\n", (clock_ns() - t0) / 1e9);
dist:
    test_distribution(m);
    printf("# distribution: %.1f s\n", (clock_ns() - t0) / 1e9);
    gvocab_free(gv);
    model_free(g_rnd);
    tok_free(g_tok);
    model_free(m);
    return test_summary("test_engine_spec");
}
