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
 *     (docs/engine.md, "Speculative decoding").
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "sched/draft.h"
#include "sched/engine.h"
#include "server/constrain.h"
#include "tok/tok.h"
#include "test.h"

#define MAX_OUT 256

static tokenizer *g_tok;

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

static engine *new_engine(const model *m, int spec, int max_running, gvocab *gv) {
    engine_opts o = engine_defaults();
    o.spec_token_cost = g_token_cost;
    o.kv_mem_bytes = 32u << 20;
    o.max_running = max_running;
    o.spec = spec;
    o.spec_max = 8;
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

/* Runs copies of `jobs` on en; checks them against the reference outputs. */
static void check_same(const char *what, engine *en, const job *ref, int n) {
    job *js = xmalloc((size_t)n * sizeof *js);
    memcpy(js, ref, (size_t)n * sizeof *js);
    run_jobs(en, js, n);
    for (int i = 0; i < n; i++) {
        const job *a = &ref[i], *b = &js[i];
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

    for (int spec = DRAFT_NGRAM; spec < DRAFT_N_KINDS; spec++)
        for (int mr = 1; mr <= 8; mr += 7) {
            char what[64];
            snprintf(what, sizeof what, "%s, batch %d", draft_kind_name(spec), mr);
            engine *en = new_engine(m, spec, mr, gv);
            check_same(what, en, ref, N_PROMPTS);
            check_same(what, en, hot, N_PROMPTS);
            check_same(what, en, greedy_short, N_PROMPTS);
            uint64_t drafted, acc = accepted(en, spec, &drafted);
            CHECK_MSG(acc > 100 && drafted >= acc, "%s: %llu of %llu drafts accepted", what, (unsigned long long)acc,
                      (unsigned long long)drafted);
            engine_free(en);
        }

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
    for (int spec = DRAFT_NGRAM; spec < DRAFT_N_KINDS; spec++) {
        engine *en = new_engine(m, spec, 4, gv);
        check_same(draft_kind_name(spec), en, ref, 4);
        uint64_t acc = accepted(en, spec, NULL);
        CHECK_MSG(acc > 20, "grammar, %s: %llu drafts accepted", draft_kind_name(spec), (unsigned long long)acc);
        engine_free(en);
    }
}

/* Random-weight fixtures: prompts of random ids with a repeated stretch. */
static void test_fixture(const char *name) {
    char path[1024];
    const char *dir = getenv("KVLOOM_FIXTURES");
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "build/fixtures/models", name);
    model *m = NULL;
    err_t e = {0};
    if (model_load(path, &m, &e) < 0) {
        CHECK_MSG(0, "%s: %s (make fixtures)", path, e.msg);
        return;
    }
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
} sample;

static void collect(engine *en, const int32_t *prompt, int n_prompt, int seed0, int n_seeds, sample *out) {
    const int batch = 64;
    job *js = xcalloc((size_t)batch, sizeof *js);
    int32_t ctx[600];
    for (int s0 = 0; s0 < n_seeds; s0 += batch) {
        int nb = MIN(batch, n_seeds - s0);
        for (int i = 0; i < nb; i++) {
            memcpy(js[i].prompt, prompt, (size_t)n_prompt * sizeof *prompt);
            js[i].n_prompt = n_prompt;
            js[i].sp = sampler_defaults(); /* temperature 1, no truncation */
            js[i].sp.seed = (uint64_t)(seed0 + s0 + i);
            js[i].max_tokens = DIST_TOKENS;
            js[i].n_logprobs = -1;
            js[i].jump = true;
        }
        run_jobs(en, js, nb);
        for (int i = 0; i < nb; i++) {
            sample *sm = &out[s0 + i];
            memcpy(ctx, prompt, (size_t)n_prompt * sizeof *prompt);
            int opp = 0, hit = 0;
            for (int k = 0; k < js[i].n_out; k++) {
                int32_t tk = js[i].out[k];
                int32_t guess = ngram_next(ctx, n_prompt + k);
                opp += guess >= 0;
                hit += guess >= 0 && guess == tk;
                ctx[n_prompt + k] = tk;
            }
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
 * rule; this one runs the same paths. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DIST_SEEDS 128
#else
#define DIST_SEEDS 512
#endif

static void test_distribution(const model *m) {
    const int n_seeds = DIST_SEEDS;
    int32_t prompt[128];
    int n_prompt = encode(prompts[2], prompt, 128);
    int nv = m->cfg.n_vocab;
    sample *a = xcalloc((size_t)n_seeds, sizeof *a), *b = xcalloc((size_t)n_seeds, sizeof *b);
    /* drafts at every chance, even at batch 64; no checker (speed) */
    g_token_cost = 1e-9;
    g_check = false;
    engine *plain = new_engine(m, DRAFT_OFF, 64, NULL);
    collect(plain, prompt, n_prompt, 1, n_seeds, a);
    engine_free(plain);
    engine *spec = new_engine(m, DRAFT_NGRAM, 64, NULL);
    collect(spec, prompt, n_prompt, 1 + n_seeds, n_seeds, b);
    uint64_t drafted, acc = accepted(spec, DRAFT_NGRAM, &drafted);
    engine_free(spec);
    g_token_cost = TEST_TOKEN_COST;
    g_check = true;
    CHECK_MSG(acc > 2u * (unsigned)n_seeds, "only %llu drafts accepted: the test would not see a wrong rule",
              (unsigned long long)acc);
    /* token frequencies at fixed positions, one token per sequence */
    double p_min = 1;
    for (int p = 0; p < DIST_POS; p++) {
        double chi;
        int dof;
        double pv = homogeneity_p(a, b, n_seeds, p, nv, &chi, &dof);
        printf("# distribution: token %d: chi2 %.1f on %d dof, p %.3g\n", dist_pos[p], chi, dof, pv);
        p_min = MIN(p_min, pv);
    }
    CHECK_MSG(p_min * DIST_POS > 1e-3, "token frequencies differ (smallest p %.3g of %d tests)", p_min, DIST_POS);
    /* the per-sequence n-gram continuation rate: Welch's t */
    double ma = 0, mb = 0, va = 0, vb = 0;
    for (int i = 0; i < n_seeds; i++) ma += a[i].rate, mb += b[i].rate;
    ma /= n_seeds, mb /= n_seeds;
    for (int i = 0; i < n_seeds; i++) va += (a[i].rate - ma) * (a[i].rate - ma), vb += (b[i].rate - mb) * (b[i].rate - mb);
    va /= n_seeds - 1, vb /= n_seeds - 1;
    double t = (ma - mb) / sqrt(va / n_seeds + vb / n_seeds);
    printf("# distribution: n-gram continuation rate %.4f plain vs %.4f speculative (t %.2f); %llu of %llu drafts "
           "accepted\n",
           ma, mb, t, (unsigned long long)acc, (unsigned long long)drafted);
    CHECK_MSG(fabs(t) < 3.3, "n-gram continuation rate %.4f plain vs %.4f speculative (t %.2f)", ma, mb, t);
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
    int64_t t0 = clock_ns();
    if (getenv("TEST_SPEC_DIST_ONLY")) goto dist; /* checking the distribution test alone */
    test_stories(m, gv);
    printf("# stories: %.1f s\n", (clock_ns() - t0) / 1e9);
    test_global_store(m);
    test_grammar(m, gv);
    printf("# grammar: %.1f s\n", (clock_ns() - t0) / 1e9);
    test_fixture("qwen3-f32.gguf");
    test_fixture("llama-q8_0.gguf");
    printf("# fixtures: %.1f s\n", (clock_ns() - t0) / 1e9);
dist:
    test_distribution(m);
    printf("# distribution: %.1f s\n", (clock_ns() - t0) / 1e9);
    gvocab_free(gv);
    tok_free(g_tok);
    model_free(m);
    return test_summary("test_engine_spec");
}
