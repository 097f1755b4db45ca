/*
 * bench_grammar.c — `kvloom bench -m MODEL --grammar`: the cost of
 * constrained decoding on a model's real vocabulary.
 *
 *   kvloom bench -m MODEL --grammar [--tools FILE.json] [-n OBJECTS] [-t N]
 *
 * The constraint is a tool call (Hermes syntax, tc_grammar) to the tools in
 * FILE (an OpenAI `tools` array; default: a nested flight-booking tool whose
 * arguments have fixed keys, enums, bounded strings, integers with ranges,
 * an array of objects). Three measurements:
 *
 *   1. mask time per token: OBJECTS random walks through the grammar (each
 *      step: gmatch_mask, then a random allowed token, then the forced run
 *      as jump-forward appends it), every gmatch_mask timed; median, p99 and
 *      max over all tokens, and how many masks came from the cache;
 *   2. decode speed: greedy generation through the engine (the serving path)
 *      of OBJECTS calls constrained without jump-forward, each followed by
 *      as many tokens unconstrained, one request at a time (interleaved, so
 *      load drift hits both alike): tokens/s after the first token;
 *   3. forward passes per generated call, with and without jump-forward.
 *
 * Random weights are fine: the grammar decides the shape of the output, the
 * model's shape decides the speed.
 *
 *   kvloom bench -m MODEL --grammar --schemas FILE.jsonl [-n WALKS]
 *
 * The schema corpus instead (the files of tests/schemas, one {"origin",
 * "schema"} a line): every schema compiled as the server does (relaxed,
 * schema_compile + grammar_from_gbnf; compile time per schema, mean / p50 /
 * p99, and the share enforced exactly), then WALKS random walks per schema
 * (each step timed as above, each schema's grammar compiled fresh, so its
 * first masks are cache misses): mask time per token over the whole corpus,
 * mean, p50, p99, p99.9 and max, and the schemas whose masks over 1 ms took
 * longest in all ("slow:" lines: where the tail comes from).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/base.h"
#include "../chat/toolcall.h"
#include "../grammar/grammar.h"
#include "../grammar/schema.h"
#include "../model/model.h"
#include "../sched/engine.h"
#include "../server/constrain.h"
#include "../tok/tok.h"
#include "cli.h"

static const char *default_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"book_flight\",\"description\":\"Book a flight\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"from\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":16},"
    "\"date\":{\"type\":\"string\",\"format\":\"date\"}},\"required\":[\"city\",\"date\"]},"
    "\"to\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":16},"
    "\"date\":{\"type\":\"string\",\"format\":\"date\"}},\"required\":[\"city\",\"date\"]},"
    "\"passengers\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":3,\"items\":{\"type\":\"object\","
    "\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},\"age\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":120},\"seat\":{\"enum\":[\"window\",\"aisle\",\"middle\"]}},\"required\":[\"name\",\"age\",\"seat\"]}},"
    "\"cabin\":{\"enum\":[\"economy\",\"premium\",\"business\",\"first\"]},"
    "\"refundable\":{\"type\":\"boolean\"}},"
    "\"required\":[\"from\",\"to\",\"passengers\",\"cabin\",\"refundable\"]}}}]";

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int piece_fn(void *ctx, int32_t id, char *buf, int cap) { return tok_piece((const tokenizer *)ctx, id, buf, cap); }
static int tokenize_fn(void *ctx, const char *text, size_t n, int32_t *out, int cap) {
    return tok_encode_continuation((const tokenizer *)ctx, text, n, out, cap);
}
static bool eog_fn(void *ctx, int32_t id) { return tok_is_eog((const tokenizer *)ctx, id); }

/* 1: random walks; returns 0 or 1 on a grammar failure. */
static int walk_masks(grammar *g, const gvocab *gv, int n_vocab, long n_objects) {
    uint64_t *mask = xmalloc(((size_t)n_vocab + 63) / 64 * sizeof *mask);
    int32_t *allowed = xmalloc((size_t)n_vocab * sizeof *allowed);
    size_t cap = 4096, n_t = 0;
    int64_t *t = xmalloc(cap * sizeof *t);
    rng rg;
    rng_seed(&rg, 0x2545F4914F6CDD1Dull);
    char forced[1024];
    long n_done = 0, n_bytes = 0;
    for (long o = 0; o < n_objects; o++) {
        gmatch *m = gmatch_new(g, gv);
        for (int step = 0; step < 4096 && !gmatch_must_end(m); step++) {
            int64_t t0 = clock_ns();
            int n_ok = gmatch_mask(m, mask);
            int64_t dt = clock_ns() - t0;
            if (n_t == cap) t = xrealloc(t, (cap *= 2) * sizeof *t);
            t[n_t++] = dt;
            int k = 0;
            for (int i = 0; i < n_vocab; i++)
                if (mask[i / 64] >> (i % 64) & 1) allowed[k++] = i;
            if (n_ok == 0 || k == 0) {
                fprintf(stderr, "kvloom bench: the grammar allows no token (walk %ld, step %d)\n", o, step);
                gmatch_free(m);
                free(mask), free(allowed), free(t);
                return 1;
            }
            int32_t tok = allowed[rng_next(&rg) % (uint64_t)k];
            if (gmatch_accept(m, tok) < 0) break;
            int nf = gmatch_forced(m, forced, (int)sizeof forced);
            if (nf > 0 && gmatch_accept_bytes(m, forced, (size_t)nf) == 0) n_bytes += nf;
        }
        n_done += gmatch_can_end(m);
        gmatch_free(m);
    }
    qsort(t, n_t, sizeof *t, cmp_i64);
    printf("mask time per token    median %.1f us   p99 %.1f us   max %.1f us   (%zu masks, %ld/%ld walks complete)\n",
           (double)t[n_t / 2] / 1e3, (double)t[(size_t)((double)n_t * 0.99)] / 1e3, (double)t[n_t - 1] / 1e3, n_t,
           n_done, n_objects);
    (void)n_bytes;
    free(mask), free(allowed), free(t);
    return 0;
}

typedef struct run_result {
    long tokens, forced, passes, objects;
    long decode_tokens; /* tokens after each request's first                */
    double decode_s;    /* from each request's first token to its finish    */
} run_result;

/* One request through the engine (nothing else running), added to *out. */
static int run_request(engine *en, const int32_t *prompt, int n_prompt, grammar *g, bool jump, int max_tokens,
                       run_result *out) {
    int32_t *p = xmalloc((size_t)n_prompt * sizeof *p);
    memcpy(p, prompt, (size_t)n_prompt * sizeof *p);
    req *r = req_new(p, n_prompt);
    r->sp.temperature = 0;
    r->max_tokens = max_tokens;
    r->ignore_eos = g == NULL;
    if (g) {
        grammar_ref(g);
        r->grammar = g;
    }
    r->no_jump_forward = !jump;
    err_t e = {0};
    if (engine_submit(en, r, &e) < 0) {
        fprintf(stderr, "kvloom bench: %s\n", e.msg);
        req_unref(r);
        return -1;
    }
    req_finish fin = REQ_RUNNING;
    int seen = 0;
    while (fin == REQ_RUNNING) seen = req_wait(r, seen, 1000, &fin);
    int64_t t_end = clock_ns();
    if (fin == REQ_FINISH_ERROR) {
        fprintf(stderr, "kvloom bench: generation failed: %s\n", r->error);
        req_unref(r);
        return -1;
    }
    out->tokens += seen;
    out->forced += r->n_forced;
    out->passes += r->n_forward_steps;
    out->objects += fin == REQ_FINISH_STOP;
    if (seen > 1) {
        out->decode_tokens += seen - 1;
        out->decode_s += (double)(t_end - r->t_first_ns) / 1e9;
    }
    req_unref(r);
    return seen;
}


static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The corpus mode (see the top of the file). KVLOOM_NO_RUN_MASKS=1 in the
 * environment turns the run classes off (gvocab_new: every miss walks the
 * whole trie), for a side by side run. */
int cli__bench_grammar_schemas(const char *path, const char *schemas_path, long walks) {
    err_t e = {0};
    model *m = NULL;
    tokenizer *tk = NULL;
    if (model_load(path, &m, &e) < 0 || tok_load(m->gguf, &tk, &e) < 0) {
        fprintf(stderr, "kvloom bench: %s: %s\n", path, e.msg);
        return 1;
    }
    FILE *f = fopen(schemas_path, "r");
    if (!f) {
        fprintf(stderr, "kvloom bench: cannot open %s\n", schemas_path);
        return 1;
    }
    gvocab *gv = constrain_vocab_new(tk);
    int n_vocab = tok_n_vocab(tk);
    uint64_t *mask = xmalloc(((size_t)n_vocab + 63) / 64 * sizeof *mask);
    size_t cap = 1 << 16, n_t = 0, cap_c = 1024, n_c = 0;
    double *t = xmalloc(cap * sizeof *t), *tc = xmalloc(cap_c * sizeof *tc);
    rng rg;
    rng_seed(&rg, 0x2545F4914F6CDD1Dull);
    char *line = NULL, forced[1024];
    size_t lcap = 0;
    int n_schemas = 0, n_exact = 0, n_failed = 0;
    /* the schemas whose masks took longest over 1 ms in all, for finding the
     * tail (origin, count of such masks, their total, the largest) */
    enum { N_SLOW = 8 };
    struct {
        char origin[96];
        int n;
        double total, max;
    } slow[N_SLOW] = {0};
    while (getline(&line, &lcap, f) > 0) {
        json_t *doc = json_loads(line, 0, NULL), *s = json_object_get(doc, "schema");
        if (!s) s = doc;
        char *gbnf = NULL, *relaxed = NULL;
        size_t len = 0;
        grammar *g = NULL;
        int64_t t0 = clock_ns();
        int rc = s ? schema_compile(s, "root", false, &relaxed, &gbnf, &len, &e) : -1;
        if (rc == 0) rc = grammar_from_gbnf(gbnf, len, &g, &e);
        if (n_c == cap_c) tc = xrealloc(tc, (cap_c *= 2) * sizeof *tc);
        tc[n_c++] = (double)(clock_ns() - t0) / 1e3;
        n_schemas++;
        if (rc) n_failed++;
        else n_exact += relaxed == NULL;
        int n_over = 0;
        double over = 0, top = 0;
        for (long w = 0; g && w < walks; w++) {
            gmatch *mt = gmatch_new(g, gv);
            for (int step = 0; step < 400 && !gmatch_must_end(mt); step++) {
                int64_t t1 = clock_ns();
                int n_ok = gmatch_mask(mt, mask);
                if (n_t == cap) t = xrealloc(t, (cap *= 2) * sizeof *t);
                double us = (double)(clock_ns() - t1) / 1e3;
                t[n_t++] = us;
                if (us > 1000) n_over++, over += us;
                top = MAX(top, us);
                /* the r-th allowed token, found by counting bits per word (a
                 * string state allows ~147k tokens: listing them all would
                 * cost more than the masks being measured) */
                if (n_ok <= 0) break;
                uint64_t r = rng_next(&rg) % (uint64_t)n_ok;
                int32_t tok = -1;
                for (size_t w = 0; tok < 0 && w < ((size_t)n_vocab + 63) / 64; w++) {
                    uint64_t bits = mask[w], c = (uint64_t)__builtin_popcountll(bits);
                    if (r >= c) {
                        r -= c;
                        continue;
                    }
                    while (r--) bits &= bits - 1;
                    tok = (int32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
                }
                if (tok < 0 || gmatch_accept(mt, tok) < 0) break;
                int nf = gmatch_forced(mt, forced, (int)sizeof forced);
                if (nf > 0) gmatch_accept_bytes(mt, forced, (size_t)nf);
            }
            gmatch_free(mt);
        }
        int worst = 0;
        for (int i = 1; i < N_SLOW; i++)
            if (slow[i].total < slow[worst].total) worst = i;
        if (over > slow[worst].total) {
            const char *o = json_string_value(json_object_get(doc, "origin"));
            snprintf(slow[worst].origin, sizeof slow[worst].origin, "%s", o ? o : "?");
            slow[worst].n = n_over, slow[worst].total = over, slow[worst].max = top;
        }
        grammar_unref(g);
        free(gbnf);
        free(relaxed);
        json_decref(doc);
    }
    free(line);
    fclose(f);
    qsort(t, n_t, sizeof *t, cmp_dbl);
    qsort(tc, n_c, sizeof *tc, cmp_dbl);
    double st = 0, sc = 0;
    for (size_t i = 0; i < n_t; i++) st += t[i];
    for (size_t i = 0; i < n_c; i++) sc += tc[i];
    printf("corpus %s: %d schemas, %d enforced exactly (%.1f%%), %d relaxed, %d not compiled; vocabulary %d tokens\n",
           schemas_path, n_schemas, n_exact, n_schemas ? 100.0 * n_exact / n_schemas : 0, n_schemas - n_exact - n_failed,
           n_failed, n_vocab);
    if (n_c)
        printf("compile per schema     mean %.1f us   p50 %.1f us   p99 %.1f us   max %.1f us\n", sc / (double)n_c,
               tc[n_c / 2], tc[(size_t)((double)n_c * 0.99)], tc[n_c - 1]);
    if (n_t)
        printf("mask time per token    mean %.1f us   p50 %.1f us   p99 %.1f us   p99.9 %.1f us   max %.1f us   (%zu masks, "
               "%ld walks a schema)\n",
               st / (double)n_t, t[n_t / 2], t[(size_t)((double)n_t * 0.99)], t[(size_t)((double)n_t * 0.999)],
               t[n_t - 1], n_t, walks);
    for (int k = 0; k < N_SLOW; k++) { /* largest first */
        int b = -1;
        for (int i = 0; i < N_SLOW; i++)
            if (slow[i].total > 0 && (b < 0 || slow[i].total > slow[b].total)) b = i;
        if (b < 0) break;
        printf("slow: %4d masks over 1 ms, %8.1f ms in all, max %6.1f ms: %s\n", slow[b].n, slow[b].total / 1e3,
               slow[b].max / 1e3, slow[b].origin);
        slow[b].total = 0;
    }
    free(t), free(tc), free(mask);
    gvocab_free(gv);
    tok_free(tk);
    model_free(m);
    return 0;
}

int cli__bench_grammar(const char *path, const char *tools_path, long n_objects, long threads) {
    err_t e = {0};
    model *m = NULL;
    tokenizer *tk = NULL;
    gvocab *gv = NULL;
    grammar *g = NULL;
    engine *en = NULL;
    json_t *tools = NULL;
    char *gbnf = NULL, *trigger = NULL;
    int rc = 1;
    if (model_load(path, &m, &e) < 0 || tok_load(m->gguf, &tk, &e) < 0) {
        fprintf(stderr, "kvloom bench: %s: %s\n", path, e.msg);
        goto out;
    }
    json_error_t je;
    tools = tools_path ? json_load_file(tools_path, 0, &je) : json_loads(default_tools, 0, &je);
    if (!tools) {
        fprintf(stderr, "kvloom bench: %s: %s (line %d)\n", tools_path ? tools_path : "built-in tools", je.text, je.line);
        goto out;
    }
    if (tc_check_tools(tools, &e) < 0 || tc_grammar(TC_HERMES, tools, NULL, false, false, &gbnf, &trigger, &e) < 0 ||
        grammar_from_gbnf(gbnf, strlen(gbnf), &g, &e) < 0) {
        fprintf(stderr, "kvloom bench: tools: %s\n", e.msg);
        goto out;
    }
    int64_t t0 = clock_ns();
    gv = constrain_vocab_new(tk);
    printf("model %s, vocabulary %d tokens (trie built in %.1f ms), %ld objects\n", path, tok_n_vocab(tk),
           (double)(clock_ns() - t0) / 1e6, n_objects);
    if (walk_masks(g, gv, tok_n_vocab(tk), n_objects)) goto out;

    engine_opts eo = engine_defaults();
    eo.n_threads = (int)threads;
    eo.kv_mem_bytes = (size_t)256 << 20;
    eo.n_ctx = 4096;
    eo.is_eog = eog_fn;
    eo.eog_ctx = tk;
    eo.gvocab = gv;
    eo.tokenize = tokenize_fn;
    eo.piece = piece_fn;
    eo.tok_ctx = tk;
    if (engine_new(m, &eo, &en, &e) < 0) {
        fprintf(stderr, "kvloom bench: %s\n", e.msg);
        goto out;
    }
    const char *prompt_text = "<|im_start|>user\nBook me a flight.<|im_end|>\n<|im_start|>assistant\n";
    int32_t prompt[256];
    int n_prompt = tok_encode(tk, prompt_text, strlen(prompt_text), tok_add_bos(tk), true, prompt, 256);
    if (n_prompt <= 0 || n_prompt > 256) {
        fprintf(stderr, "kvloom bench: cannot tokenize the prompt\n");
        goto out;
    }
    /* Interleaved, so that the machine's drift hits the three alike: a call
     * without jump-forward, as many tokens unconstrained, a call with it. */
    run_result slow = {0}, fast = {0}, free_run = {0};
    for (long i = 0; i < n_objects; i++) {
        int n = run_request(en, prompt, n_prompt, g, false, 1024, &slow);
        if (n < 0 || run_request(en, prompt, n_prompt, NULL, false, MAX(n, 2), &free_run) < 0 ||
            run_request(en, prompt, n_prompt, g, true, 1024, &fast) < 0)
            goto out;
    }
    double tps_c = slow.decode_s > 0 ? (double)slow.decode_tokens / slow.decode_s : 0;
    double tps_u = free_run.decode_s > 0 ? (double)free_run.decode_tokens / free_run.decode_s : 0;
    printf("decode, unconstrained  %.2f tokens/s (%ld tokens)\n", tps_u, free_run.tokens);
    printf("decode, constrained    %.2f tokens/s (%ld tokens, no jump-forward)   ratio %.3f\n", tps_c, slow.tokens,
           tps_u > 0 ? tps_c / tps_u : 0);
    engine_stats st;
    engine_get_stats(en, &st);
    printf("masks in the engine    %.1f us per constrained token on average (%llu tokens)\n",
           st.constrained_tokens_total ? (double)st.mask_ns_total / 1e3 / (double)st.constrained_tokens_total : 0.0,
           (unsigned long long)st.constrained_tokens_total);
    printf("forward passes / call  %.1f without jump-forward, %.1f with (%.2fx fewer; %ld of %ld tokens forced), "
           "%ld/%ld and %ld/%ld calls complete\n",
           (double)slow.passes / (double)n_objects, (double)fast.passes / (double)n_objects,
           fast.passes ? (double)slow.passes / (double)fast.passes : 0, fast.forced, fast.tokens, slow.objects,
           n_objects, fast.objects, n_objects);
    rc = 0;
out:
    engine_free(en);
    grammar_unref(g);
    gvocab_free(gv);
    free(gbnf);
    free(trigger);
    if (tools) json_decref(tools);
    tok_free(tk);
    model_free(m);
    return rc;
}
