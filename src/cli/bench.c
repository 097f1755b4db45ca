/*
 * bench.c — `kvloom bench`: prefill and decode speed of a model on this
 * machine, next to the memory bandwidth measured in the same run.
 *
 *   kvloom bench -m MODEL [-t N] [--pp 512] [--tg 128] [--depth D] [-r REPS]
 *   kvloom bench -m MODEL --tokenizer [--text FILE] [-r REPS]
 *   kvloom bench -m MODEL --grammar [--tools FILE] [-n OBJECTS] (bench_grammar.c)
 *   kvloom bench -m MODEL --verify | --spec-replay | --spec-e2e ... (bench_spec.c)
 *
 * Place in the flow: cli/, beside run; it drives model_forward directly
 * (no scheduler, no tokenizer): token ids are drawn from a fixed-seed
 * generator, so any GGUF at a real shape measures the real cost.
 *
 * What is measured, each repeated REPS times after one warm-up run, and
 * reported as median [min..max]:
 *   - pp: one batch of --pp tokens from an empty context, logits for the
 *     last one (as llama-bench's ppN);
 *   - tg: --tg single-token steps from an empty context (llama-bench's tgN),
 *     and again after a --depth prefill (not timed) when --depth > 0;
 *   - pp @ depth: when --depth > 0, a batch of --pp tokens prefilled on top
 *     of the --depth cached ones (positions depth..depth+pp-1, rewritten by
 *     every repetition): an agent's next turn over its cached context;
 *   - tg @ depth x S: with --seqs S > 1 (and --depth, --tg), S sequences
 *     whose block tables share the blocks of the --depth prefix (as the
 *     radix cache shares a common prompt; the last partial block is each
 *     sequence's own copy) decode --tg steps together, one token each per
 *     batch; reported as the batch's total tokens per second;
 *   - bandwidth: every thread of the model's pool sums its share of a
 *     buffer much larger than the caches; measured before each repetition,
 *     so drift shows up in the spread.
 * The decode roofline is bandwidth / bytes read per decoded token (all
 * weight matrices — of a MoE layer the router and the selected experts
 * only —, one embedding row, plus the KV rows at the given depth); the report gives
 * decode as a percentage of it.
 *
 * --tokenizer measures the model's tokenizer instead: encoding MB/s of FILE
 * (default: a built-in mixed English/code/number/Unicode text repeated to
 * 1 MB), median over REPS runs of tok_bench_mb_per_s.
 *
 * Thread: the CLI's main thread; the model's pool runs the kernels and the
 * bandwidth probe.
 */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/base.h"
#include "../base/flags.h"
#include "../base/pool.h"
#include "../model/model.h"
#include "../sched/draft.h"
#include "../tok/tok.h"
#include "cli.h"

#define BENCH_BW_BYTES ((size_t)512 << 20) /* 16x the L3 of these machines */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct stats {
    double med, min, max;
} stats;

static stats stats_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    stats s = {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v[0], v[n - 1]};
    return s;
}

static void print_stats(const char *what, stats s, const char *unit) {
    printf("%-22s %9.2f %s   [%.2f .. %.2f]\n", what, s.med, unit, s.min, s.max);
}

/* ---- memory bandwidth ------------------------------------------------------ */

typedef struct bw_job {
    const uint64_t *buf;
    size_t n_words;
    uint64_t sink[64]; /* one slot per thread, 8 apart (own cache line) */
} bw_job;

static void bw_task(void *arg, int ith, int nth) {
    bw_job *j = arg;
    long b, e;
    pool_split((long)(j->n_words / 8), ith, nth, &b, &e);
    const uint64_t *p = j->buf + (size_t)b * 8;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (long i = b; i < e; i++, p += 8) {
        s0 += p[0] ^ p[4];
        s1 += p[1] ^ p[5];
        s2 += p[2] ^ p[6];
        s3 += p[3] ^ p[7];
    }
    j->sink[(ith % 8) * 8] += s0 + s1 + s2 + s3;
}

/* GB/s of one pass over the buffer by all threads. */
static double bw_measure(pool *p, bw_job *j) {
    const double t0 = clock_ms();
    pool_run(p, bw_task, j);
    const double ms = clock_ms() - t0;
    return (double)(j->n_words * 8) / (ms * 1e6);
}

/* ---- tokenizer throughput ------------------------------------------------------ */

/* Needs only the tokenizer, so vocabulary-only GGUFs work too. */
static int bench_tokenizer(const char *path, const char *text_path, long reps) {
    err_t e = {0};
    gguf_ctx *g;
    tokenizer *tk;
    if (gguf_open(path, &g, &e) || tok_load(g, &tk, &e)) {
        fprintf(stderr, "kvloom bench: %s: %s\n", path, e.msg);
        return 1;
    }
    gguf_free(g); /* the tokenizer copies what it needs */
    char *text = NULL;
    size_t len = 0;
    if (text_path) {
        if (file_read_all(text_path, &text, &len, &e)) {
            fprintf(stderr, "kvloom bench: %s\n", e.msg);
            tok_free(tk);
            return 1;
        }
    } else {
        static const char piece[] =
            "The quick brown fox jumps over the lazy dog. def add(a, b):\n    return a + b  # 12345 67.89\n"
            "Agents call tools: {\"name\": \"search\", \"args\": [1, 2, 3]} \xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac "
            "\xf0\x9f\x99\x82\n";
        const size_t n = sizeof piece - 1, want = (size_t)1 << 20;
        text = xmalloc(want + n + 1);
        while (len < want) memcpy(text + len, piece, n), len += n;
        text[len] = 0;
    }
    double *v = xmalloc(sizeof(double) * (size_t)reps);
    tok_bench_mb_per_s(tk, text, len, 1); /* warm-up */
    for (long r = 0; r < reps; r++) v[r] = tok_bench_mb_per_s(tk, text, len, 1);
    printf("tokenizer %s (pre %s), %.2f MB of text\n", tok_model_name(tk), tok_pre_name(tk), len / 1e6);
    print_stats("encode", stats_of(v, (int)reps), "MB/s");
    free(v);
    free(text);
    tok_free(tk);
    return 0;
}

/* ---- model runs ------------------------------------------------------------- */

typedef struct bench_ctx {
    const model *m;
    model_state *st;
    model_kv *kv;
    model_seq seq;
    int32_t *tok, *pos, *sid;
    int max_tokens;
    float *logits;
    rng rng;
} bench_ctx;

static int32_t bench_token(bench_ctx *b) {
    return (int32_t)(rng_next(&b->rng) % (uint64_t)b->m->cfg.n_vocab);
}

/* Runs positions [p0, p0+n) in batches of at most max_tokens; 0 or <0. */
static int bench_prefill(bench_ctx *b, int p0, int n, err_t *e) {
    for (int done = 0; done < n;) {
        const int k = MIN(b->max_tokens, n - done);
        for (int i = 0; i < k; i++) b->tok[i] = bench_token(b), b->pos[i] = p0 + done + i;
        model_batch batch = {.n_tokens = k, .token = b->tok, .pos = b->pos, .seq = b->sid, .n_seqs = 1, .seqs = &b->seq};
        int r = model_forward(b->m, b->st, b->kv, &batch, b->logits, e);
        if (r < 0) return r;
        done += k;
    }
    return 0;
}

static int bench_decode(bench_ctx *b, int p0, int n, err_t *e) {
    for (int i = 0; i < n; i++) {
        int32_t tok = bench_token(b), pos = p0 + i;
        model_batch batch = {.n_tokens = 1, .token = &tok, .pos = &pos, .seq = b->sid, .n_seqs = 1, .seqs = &b->seq};
        int r = model_forward(b->m, b->st, b->kv, &batch, b->logits, e);
        if (r < 0) return r;
    }
    return 0;
}

/* S sequences sharing the blocks of positions [0, depth / bt * bt) with
 * b->seq (already computed) run positions [p_begin, p_end) together, one
 * token each per batch (their own blocks follow first_own_block); 0 or <0. */
static int bench_decode_shared(bench_ctx *b, int S, int depth, int p_begin, int p_end, int tg, int bt,
                               int first_own_block, err_t *e) {
    const int shared = depth / bt, n_tab = (depth + tg + bt - 1) / bt + 1;
    int32_t *tables = xmalloc(sizeof(int32_t) * (size_t)S * n_tab);
    model_seq *seqs = xmalloc(sizeof(model_seq) * (size_t)S);
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < n_tab; i++)
            tables[s * n_tab + i] = i < shared ? b->seq.block_table[i] : first_own_block + s * (n_tab - shared) + (i - shared);
        seqs[s] = (model_seq){tables + s * n_tab, n_tab};
    }
    int r = 0;
    for (int p = p_begin; p < p_end && !r; p++) {
        for (int s = 0; s < S; s++) b->tok[s] = bench_token(b), b->pos[s] = p, b->sid[s] = s;
        model_batch batch = {.n_tokens = S, .token = b->tok, .pos = b->pos, .seq = b->sid, .n_seqs = S, .seqs = seqs};
        r = model_forward(b->m, b->st, b->kv, &batch, b->logits, e); /* logits of the last token only */
        r = r < 0 ? r : 0;
    }
    for (int s = 0; s < S; s++) b->sid[s] = 0;
    free(tables), free(seqs);
    return r;
}


/* bench's options (its flag table's fields). */
typedef struct bench_opts {
    const char *path, *text_path, *tools_path, *schemas_path;
    bool tokenizer_mode, grammar_mode, verify_mode, replay_mode, e2e_mode;
    const char *drafter;
    const char *texts[16];
    int n_texts;
    long kmax, n_objects, threads, pp, tg, depth, reps, n_seqs;
    model_kv_type kv_type;
} bench_opts;

static int bench_text(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    bench_opts *o = opts;
    if (!o->text_path) o->text_path = v;
    if (o->n_texts < (int)ARRAY_LEN(o->texts)) o->texts[o->n_texts++] = v;
    return 0;
}
static int bench_kv_type(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    if (!model_kv_type_parse(v, &((bench_opts *)opts)->kv_type))
        return err_set(e, ERR_INVALID, "--kv-type: '%s' is not a KV cache type (f16 or q8_0)", v);
    return 0;
}

#define BO(field) offsetof(bench_opts, field)
static const flag_row bench_flags[] = {
    FLAG_ROW("-m", NULL, "MODEL.gguf", "the model (required)", FLAG_STR, BO(path)),
    FLAG_ROW("-t", NULL, "THREADS", "compute threads (default: the CPUs, up to 64)", FLAG_LONG, BO(threads), 1, 256),
    FLAG_ROW("--pp", NULL, "N", "prompt tokens of the prefill test (default 512)", FLAG_LONG, BO(pp), 0, 1 << 16),
    FLAG_ROW("--tg", NULL, "N", "tokens of the generation test (default 128)", FLAG_LONG, BO(tg), 0, 1 << 16),
    FLAG_ROW("--depth", NULL, "D", "tokens already in the context (default 0)", FLAG_LONG, BO(depth), 0, 1 << 20),
    FLAG_ROW("--seqs", NULL, "S", "sequences decoded together (default 1)", FLAG_LONG, BO(n_seqs), 1, 256),
    FLAG_ROW("-r", NULL, "REPS", "repetitions, the median reported (default 3)", FLAG_LONG, BO(reps), 1, 1000),
    FLAG_ROW("--kv-type", NULL, "f16|q8_0", "KV cache type (default f16)", FLAG_FN, .set = bench_kv_type),
    FLAG_ROW("--verify", NULL, NULL, "speculative verification: K draft tokens checked in one step", FLAG_ON,
             BO(verify_mode)),
    FLAG_ROW("--spec-replay", NULL, NULL, "the drafters replayed over --text files", FLAG_ON, BO(replay_mode)),
    FLAG_ROW("--spec-e2e", NULL, NULL,
             "speculation end to end with the drafts right where --drafter is on --text's replayed output",
             FLAG_ON, BO(e2e_mode)),
    FLAG_ROW("--drafter", NULL, "ngram|suffix", "--spec-e2e's replayed drafter (default suffix)", FLAG_STR, BO(drafter)),
    FLAG_ROW("--kmax", NULL, "K", "draft tokens at most (--verify 16, --spec-replay 8)", FLAG_LONG, BO(kmax), 1,
             DRAFT_MAX),
    FLAG_ROW("--tokenizer", NULL, NULL, "tokenizer speed over --text (or a built-in text)", FLAG_ON,
             BO(tokenizer_mode)),
    FLAG_ROW("--text", NULL, "FILE", "a text file (--spec-replay: repeatable, up to 16)", FLAG_FN, .set = bench_text),
    FLAG_ROW("--grammar", NULL, NULL, "constrained decoding: masks per token over tool schemas", FLAG_ON,
             BO(grammar_mode)),
    FLAG_ROW("--tools", NULL, "FILE.json", "--grammar's tools (default: built-in ones)", FLAG_STR, BO(tools_path)),
    FLAG_ROW("--schemas", NULL, "FILE.jsonl", "--grammar over the schemas of FILE, one walk each", FLAG_STR,
             BO(schemas_path)),
    FLAG_ROW("-n", NULL, "N", "--grammar's objects or walks (default 20)", FLAG_LONG, BO(n_objects), 1, 100000),
};
#undef BO

static const flag_cmd bench_cmd = {
    "bench",
    "usage: kvloom bench -m MODEL.gguf [-t THREADS] [--pp 512] [--tg 128] [--depth D] [--seqs S] [-r REPS]\n"
    "                    [--kv-type f16|q8_0]\n"
    "       kvloom bench -m MODEL.gguf --verify [--depth D] [--kmax 16] [-r REPS] [-t THREADS]\n"
    "       kvloom bench -m MODEL.gguf --spec-replay --text FILE [--text FILE ...] [--kmax 8]\n"
    "       kvloom bench -m MODEL.gguf --spec-e2e --text FILE [--drafter suffix] [--kmax 8] [--tg N] [--depth D]\n"
    "                    [--seqs B] [-r ROUNDS] [-t THREADS]\n"
    "       kvloom bench -m MODEL.gguf --tokenizer [--text FILE] [-r REPS]\n"
    "       kvloom bench -m MODEL.gguf --grammar [--tools FILE.json] [-n OBJECTS] [-t THREADS]\n"
    "       kvloom bench -m MODEL.gguf --grammar --schemas FILE.jsonl [-n WALKS]\n",
    NULL,
    bench_flags,
    ARRAY_LEN(bench_flags),
};

int cli__bench(int argc, char **argv) {
    bench_opts o = {.kmax = -1, .n_objects = 20, .pp = 512, .tg = 128, .reps = 3, .n_seqs = 1, .kv_type = MODEL_KV_F16};
    err_t e = {0};
    int rc = flags_parse(&bench_cmd, argc, argv, &o, &e);
    if (rc > 0) return 0; /* --help */
    if (rc < 0 || !o.path) {
        if (rc < 0) fprintf(stderr, "kvloom: %s\n", e.msg);
        flags_usage(&bench_cmd, stderr);
        return 2;
    }
    const char *path = o.path, *text_path = o.text_path, *tools_path = o.tools_path, *schemas_path = o.schemas_path;
    bool tokenizer_mode = o.tokenizer_mode, grammar_mode = o.grammar_mode, verify_mode = o.verify_mode;
    bool replay_mode = o.replay_mode;
    const char **texts = o.texts;
    int n_texts = o.n_texts;
    long kmax = o.kmax, n_objects = o.n_objects, threads = o.threads, pp = o.pp, tg = o.tg, depth = o.depth;
    long reps = o.reps, n_seqs = o.n_seqs;
    model_kv_type kv_type = o.kv_type;
    if (threads == 0) threads = MIN(sysconf(_SC_NPROCESSORS_ONLN), 64);

    if (tokenizer_mode) return bench_tokenizer(path, text_path, reps);
    if (verify_mode) return cli__bench_verify(path, depth, kmax > 0 ? kmax : 16, reps, threads);
    if (o.e2e_mode)
        return cli__bench_spec_e2e(path, text_path, o.drafter ? o.drafter : "suffix", kmax > 0 ? kmax : 8, tg, depth,
                                   n_seqs, reps, threads);
    if (replay_mode) return cli__bench_spec_replay(path, texts, n_texts, kmax > 0 ? kmax : 8);
    if (grammar_mode && schemas_path) return cli__bench_grammar_schemas(path, schemas_path, n_objects);
    if (grammar_mode) return cli__bench_grammar(path, tools_path, n_objects, threads);
    model *m;
    if (model_load(path, &m, &e)) {
        fprintf(stderr, "kvloom bench: %s: %s\n", path, e.msg);
        return 1;
    }
    const model_config *c = &m->cfg;
    const long n_ctx = MAX(pp, depth + MAX(tg, pp)) + 1;
    if (n_ctx > INT_MAX / 2) {
        fprintf(stderr, "kvloom bench: context of %ld positions is too large\n", n_ctx);
        model_free(m);
        return 2;
    }
    const int bt = 16, n_blocks = (int)((n_ctx + bt - 1) / bt);
    const bool shared_run = n_seqs > 1 && depth > 0 && tg > 0;
    const int own_blocks = shared_run ? (int)n_seqs * (int)((depth % bt + tg + bt - 1) / bt + 1) : 0;
    bench_ctx b = {.m = m};
    rng_seed(&b.rng, 0x9e3779b97f4a7c15ull);
    b.max_tokens = (int)MAX(1, MIN(pp, 512));
    b.kv = model_kv_new_type(m, n_blocks + own_blocks, bt, kv_type);
    b.st = model_state_new(m, (int)MAX(b.max_tokens, n_seqs), (int)n_ctx, (int)threads);
    int32_t *table = xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++) table[i] = i;
    b.seq = (model_seq){table, n_blocks};
    b.tok = xmalloc(sizeof(int32_t) * (size_t)MAX(b.max_tokens, n_seqs));
    b.pos = xmalloc(sizeof(int32_t) * (size_t)MAX(b.max_tokens, n_seqs));
    b.sid = xcalloc((size_t)MAX(b.max_tokens, n_seqs), sizeof(int32_t));
    b.logits = xmalloc(sizeof(float) * (size_t)c->n_vocab);
    pool *p = model_state_pool(b.st);

    /* bytes a decode step reads: model_token_bytes, plus KV rows */
    const size_t wbytes = model_token_bytes(m);
    const double kv_per_pos = (double)model_kv_block_bytes_type(m, bt, kv_type) / bt; /* K and V */

    bw_job bj = {.n_words = BENCH_BW_BYTES / 8};
    uint64_t *bwbuf = xaligned_alloc(BENCH_BW_BYTES);
    for (size_t i = 0; i < bj.n_words; i++) bwbuf[i] = i * 0x9e3779b97f4a7c15ull;
    bj.buf = bwbuf;

    printf("model    %s (%s, %d layers, n_embd %d, n_ff %d, vocab %d, %s weights)\n", path, c->arch_name, c->n_layer,
           c->n_embd, c->n_ff, c->n_vocab, dtype_name(m->layers[0].wq.type));
    if (c->n_expert > 0)
        printf("experts  %d per layer, %d used, expert n_ff %d, %s expert weights\n", c->n_expert, c->n_expert_used,
               c->n_ff_exp, dtype_name(m->layers[0].moe.gate.type));
    printf("threads  %ld, kernels %s, reps %ld, KV cache %s\n", threads, kern->name, reps, model_kv_type_name(kv_type));
    printf("weights read per decoded token: %.1f MB (+ %.1f KB of KV per context position)\n", wbytes / 1e6,
           kv_per_pos / 1e3);

    double *v_bw = xmalloc(sizeof(double) * (size_t)reps * 3), *v_pp = xmalloc(sizeof(double) * (size_t)reps);
    double *v_tg = xmalloc(sizeof(double) * (size_t)reps), *v_tgd = xmalloc(sizeof(double) * (size_t)reps);
    double *v_ppd = xmalloc(sizeof(double) * (size_t)reps), *v_tgs = xmalloc(sizeof(double) * (size_t)reps);
    int n_bw = 0, r = 0;
    bw_measure(p, &bj); /* warm-up: page in the buffer */
    if (pp > 0) r = bench_prefill(&b, 0, (int)pp, &e); /* warm-up runs */
    if (!r && tg > 0) r = bench_decode(&b, 0, (int)MIN(tg, 16), &e);
    for (long rep = 0; rep < reps && !r; rep++) {
        for (int k = 0; k < 3; k++) v_bw[n_bw++] = bw_measure(p, &bj);
        if (pp > 0) {
            const double t0 = clock_ms();
            r = bench_prefill(&b, 0, (int)pp, &e);
            v_pp[rep] = pp / ((clock_ms() - t0) / 1000);
        }
        if (!r && tg > 0) {
            const double t0 = clock_ms();
            r = bench_decode(&b, 0, (int)tg, &e);
            v_tg[rep] = tg / ((clock_ms() - t0) / 1000);
        }
    }
    if (!r && depth > 0 && (tg > 0 || pp > 0)) {
        r = bench_prefill(&b, 0, (int)depth, &e);
        for (long rep = 0; rep < reps && !r && tg > 0; rep++) {
            const double t0 = clock_ms();
            r = bench_decode(&b, (int)depth, (int)tg, &e);
            v_tgd[rep] = tg / ((clock_ms() - t0) / 1000);
        }
        if (!r && pp > 0) r = bench_prefill(&b, (int)depth, (int)pp, &e); /* warm-up */
        for (long rep = 0; rep < reps && !r && pp > 0; rep++) {
            const double t0 = clock_ms();
            r = bench_prefill(&b, (int)depth, (int)pp, &e);
            v_ppd[rep] = pp / ((clock_ms() - t0) / 1000);
        }
        const int D = (int)depth, T = (int)tg, S = (int)n_seqs;
        if (!r && shared_run) /* each sequence's own tail of the prefix, and a warm-up */
            r = bench_decode_shared(&b, S, D, D / bt * bt, D + MIN(T, 4), T, bt, n_blocks, &e);
        for (long rep = 0; rep < reps && !r && shared_run; rep++) {
            const double t0 = clock_ms();
            r = bench_decode_shared(&b, S, D, D, D + T, T, bt, n_blocks, &e);
            v_tgs[rep] = n_seqs * tg / ((clock_ms() - t0) / 1000);
        }
    }
    if (r) {
        fprintf(stderr, "kvloom bench: %s\n", e.msg);
    } else {
        char what[64];
        const stats bw = stats_of(v_bw, n_bw);
        print_stats("bandwidth (read)", bw, "GB/s");
        if (pp > 0) {
            snprintf(what, sizeof what, "pp%ld", pp);
            print_stats(what, stats_of(v_pp, (int)reps), "t/s");
        }
        if (tg > 0) {
            const stats t = stats_of(v_tg, (int)reps);
            snprintf(what, sizeof what, "tg%ld", tg);
            print_stats(what, t, "t/s");
            /* average KV read per step over the run: positions 0..tg-1 */
            const double bytes = wbytes + kv_per_pos * (tg - 1) / 2.0;
            printf("%-22s %9.2f GB/s = %.0f%% of the %.1f t/s roofline (best bandwidth: %.0f%%)\n", "  streamed",
                   t.med * bytes / 1e9, 100 * t.med * bytes / (bw.med * 1e9), bw.med * 1e9 / bytes,
                   100 * t.med * bytes / (bw.max * 1e9));
        }
        if (depth > 0 && tg > 0) {
            const stats t = stats_of(v_tgd, (int)reps);
            snprintf(what, sizeof what, "tg%ld @ depth %ld", tg, depth);
            print_stats(what, t, "t/s");
            const double bytes = wbytes + kv_per_pos * (depth + (tg - 1) / 2.0);
            printf("%-22s %9.2f GB/s = %.0f%% of the %.1f t/s roofline (best bandwidth: %.0f%%)\n", "  streamed",
                   t.med * bytes / 1e9, 100 * t.med * bytes / (bw.med * 1e9), bw.med * 1e9 / bytes,
                   100 * t.med * bytes / (bw.max * 1e9));
        }
        if (depth > 0 && pp > 0) {
            snprintf(what, sizeof what, "pp%ld @ depth %ld", pp, depth);
            print_stats(what, stats_of(v_ppd, (int)reps), "t/s");
        }
        if (shared_run) {
            snprintf(what, sizeof what, "tg%ld @ depth %ld x %ld", tg, depth, n_seqs);
            print_stats(what, stats_of(v_tgs, (int)reps), "t/s");
        }
    }
    free(v_bw), free(v_pp), free(v_tg), free(v_tgd), free(v_ppd), free(v_tgs), free(bwbuf);
    free(table), free(b.tok), free(b.pos), free(b.sid), free(b.logits);
    model_state_free(b.st);
    model_kv_free(b.kv);
    model_free(m);
    return r ? 1 : 0;
}
