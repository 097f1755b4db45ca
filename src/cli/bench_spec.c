/*
 * bench_spec.c — `kvloom bench` for speculative decoding (docs/perf.md,
 * "Speculative decoding"):
 *
 *   kvloom bench -m MODEL --verify [--depth D] [--kmax 16] [-r REPS] [-t N]
 *       the verify cost: one forward of B sequences x (1 + k) tokens (all
 *       with logits, as verification runs them) against B x 1, for
 *       B = 1, 4, 8 and k = 0..kmax, at context depth D (the sequences
 *       share the D-token prefix's blocks, as the radix cache shares a
 *       prompt). Median of REPS after a warm-up, and the ratio to k = 0.
 *   kvloom bench -m MODEL --spec-replay FILE... [--kmax 8]
 *       drafter acceptance on replayed text: each FILE is a prompt and an
 *       output separated by a line "=====OUTPUT=====", tokenized with the
 *       model's tokenizer; the output is replayed as if the model wrote it
 *       (every draft token equal to the next output token is accepted, the
 *       first mismatch ends the step), through the ngram and the suffix
 *       drafters (the suffix drafter's global store keeps the earlier files'
 *       outputs, in order). Reports tokens per verification step and the
 *       share of drafts accepted. This measures the drafters, not a model:
 *       the text is what an agent would emit.
 *   kvloom bench -m MODEL --spec-e2e --text FILE [--drafter suffix]
 *                [--kmax 8] [--tg N] [--depth D] [--seqs B] [-r ROUNDS]
 *       speculation end to end on MODEL (the engine's forwards,
 *       verification, rollback and streaming) with drafts that are right
 *       exactly where the drafter is right on FILE's replayed output: B
 *       sequences of D prompt tokens generate N tokens at temperature 0,
 *       ROUNDS rounds of speculation off and on, interleaved; decode
 *       tokens/s, passes and draft counts, checked against the pattern and
 *       the output against speculation off's (below, "end to end").
 *
 * Thread: the CLI's main thread; the model's pool runs the kernels.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "../model/model.h"
#include "../sample/sample.h"
#include "../sched/draft.h"
#include "../sched/engine.h"
#include "../sched/req.h"
#include "../tok/tok.h"
#include "cli.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int cli__bench_verify(const char *path, long depth, long kmax, long reps, long threads) {
    err_t e = {0};
    model *m;
    if (model_load(path, &m, &e)) {
        fprintf(stderr, "kvloom bench: %s: %s\n", path, e.msg);
        return 1;
    }
    const int bt = 16, B_max = 8, per = (int)kmax + 1;
    const int shared = (int)(depth / bt), own = (int)((depth % bt + per + bt - 1) / bt) + 1;
    const int n_tab = shared + own, n_blocks = shared + B_max * own;
    const int max_tokens = MAX(B_max * per, 512);
    model_kv *kv = model_kv_new(m, n_blocks, bt);
    model_state *st = model_state_new(m, max_tokens, (int)depth + per + 1, (int)threads);
    if (!kv || !st) {
        fprintf(stderr, "kvloom bench: out of memory for %d KV blocks\n", n_blocks);
        model_kv_free(kv);
        model_state_free(st);
        model_free(m);
        return 1;
    }
    int32_t *tables = xmalloc(sizeof(int32_t) * (size_t)B_max * n_tab);
    model_seq *seqs = xmalloc(sizeof(model_seq) * B_max);
    for (int s = 0; s < B_max; s++) {
        for (int i = 0; i < n_tab; i++) tables[s * n_tab + i] = i < shared ? i : shared + s * own + (i - shared);
        seqs[s] = (model_seq){tables + s * n_tab, n_tab};
    }
    int32_t *tok = xmalloc(sizeof(int32_t) * (size_t)max_tokens), *pos = xmalloc(sizeof(int32_t) * (size_t)max_tokens);
    int32_t *sid = xcalloc((size_t)max_tokens, sizeof(int32_t));
    uint8_t *want = xmalloc((size_t)max_tokens);
    float *logits = xmalloc(sizeof(float) * (size_t)max_tokens * (size_t)m->cfg.n_vocab);
    rng r;
    rng_seed(&r, 27);
    int rc = 0;
    /* the shared prefix, once (sequence 0's table; untimed) */
    for (long done = 0; done < depth && !rc;) {
        int k = (int)MIN(512, depth - done);
        for (int i = 0; i < k; i++) tok[i] = (int32_t)(rng_next(&r) % (uint64_t)m->cfg.n_vocab), pos[i] = (int)done + i, sid[i] = 0;
        model_batch b = {.n_tokens = k, .token = tok, .pos = pos, .seq = sid, .n_seqs = 1, .seqs = seqs};
        rc = model_forward(m, st, kv, &b, logits, &e) < 0;
        done += k;
    }
    printf("verify cost: %s, depth %ld, %ld threads, median of %ld (ms per forward; x = / k=0 at the batch)\n", path,
           depth, threads, reps);
    printf("%4s", "k");
    const int batches[3] = {1, 4, 8};
    for (int bi = 0; bi < 3; bi++) printf("    B=%d ms      x", batches[bi]);
    printf("\n");
    double base[3] = {0};
    double *v = xmalloc(sizeof(double) * (size_t)reps);
    for (int k = 0; k <= kmax && !rc; k++) {
        printf("%4d", k);
        for (int bi = 0; bi < 3 && !rc; bi++) {
            int B = batches[bi], n = 0;
            for (int s = 0; s < B; s++)
                for (int q = 0; q <= k; q++, n++) {
                    tok[n] = (int32_t)(rng_next(&r) % (uint64_t)m->cfg.n_vocab);
                    pos[n] = (int)depth + q;
                    sid[n] = s;
                    want[n] = 1;
                }
            model_batch b = {.n_tokens = n, .token = tok, .pos = pos, .seq = sid, .logits = want, .n_seqs = B, .seqs = seqs};
            rc = model_forward(m, st, kv, &b, logits, &e) < 0; /* warm-up */
            for (long i = 0; i < reps && !rc; i++) {
                double t0 = clock_ms();
                rc = model_forward(m, st, kv, &b, logits, &e) < 0;
                v[i] = clock_ms() - t0;
            }
            double med = median(v, (int)reps);
            if (k == 0) base[bi] = med;
            printf("  %8.3f %6.3f", med, med / base[bi]);
        }
        printf("\n");
        fflush(stdout);
    }
    if (rc) fprintf(stderr, "kvloom bench: %s\n", e.msg);
    free(v), free(tables), free(seqs), free(tok), free(pos), free(sid), free(want), free(logits);
    model_state_free(st);
    model_kv_free(kv);
    model_free(m);
    return rc;
}

/* ---- acceptance on replayed text ---- */

typedef struct replay_file {
    int32_t *toks;
    int n, n_prompt;
} replay_file;

static int load_replay(tokenizer *tk, const char *path, replay_file *f, err_t *e) {
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, e)) return -1;
    const char *sep = "\n=====OUTPUT=====\n";
    char *at = strstr(text, sep);
    if (!at) {
        free(text);
        return err_set(e, ERR_FORMAT, "%s: no line '=====OUTPUT=====' between the prompt and the output", path);
    }
    size_t np = (size_t)(at - text), no = len - np - strlen(sep);
    int cap = (int)(len + 16);
    f->toks = xmalloc(sizeof(int32_t) * (size_t)cap);
    f->n_prompt = tok_encode(tk, text, np, true, false, f->toks, cap);
    int n_out = tok_encode_continuation(tk, at + strlen(sep), no, f->toks + f->n_prompt, cap - f->n_prompt);
    free(text);
    if (f->n_prompt < 0 || n_out < 0 || f->n_prompt + n_out > cap) return err_set(e, ERR_FORMAT, "%s: cannot tokenize", path);
    f->n = f->n_prompt + n_out;
    return 0;
}

int cli__bench_spec_replay(const char *path, const char **files, int n_files, long kmax) {
    err_t e = {0};
    gguf_ctx *g;
    tokenizer *tk;
    if (gguf_open(path, &g, &e) || tok_load(g, &tk, &e)) {
        fprintf(stderr, "kvloom bench: %s: %s\n", path, e.msg);
        return 1;
    }
    gguf_free(g);
    replay_file *fs = xcalloc((size_t)n_files, sizeof *fs);
    for (int i = 0; i < n_files; i++)
        if (load_replay(tk, files[i], &fs[i], &e)) {
            fprintf(stderr, "kvloom bench: %s\n", e.msg);
            return 1;
        }
    printf("drafter acceptance on replayed text (k <= %ld; tokens/step = output tokens / verification steps)\n", kmax);
    printf("%-40s %7s %7s  %-8s %10s %9s\n", "file", "prompt", "output", "drafter", "tok/step", "accepted");
    for (int kind = DRAFT_NGRAM; kind < DRAFT_N_KINDS; kind++) {
        draft_opts o = draft_defaults((draft_kind)kind);
        o.max_draft = (int)kmax;
        drafter *d = draft_new(&o);
        for (int i = 0; i < n_files; i++) {
            replay_file *f = &fs[i];
            draft_seq *s = draft_seq_new(d);
            int32_t out[DRAFT_MAX];
            long steps = 0, drafted = 0, acc = 0;
            for (int p = f->n_prompt; p < f->n;) {
                int k = draft_propose(d, s, f->toks, p, (int)MIN(kmax, f->n - p - 1), out);
                int a = 0;
                while (a < k && f->toks[p + a] == out[a]) a++;
                drafted += k, acc += a, steps++;
                if (k) draft_seq_feedback(d, s, k, a, NULL, 0);
                p += a + 1;
            }
            draft_seq_end(d, s, f->toks, f->n_prompt, f->n, true);
            const char *base = strrchr(files[i], '/');
            printf("%-40s %7d %7d  %-8s %10.2f %8.1f%%\n", base ? base + 1 : files[i], f->n_prompt, f->n - f->n_prompt,
                   draft_kind_name((draft_kind)kind), (double)(f->n - f->n_prompt) / (double)steps,
                   drafted ? 100.0 * acc / drafted : 0.0);
        }
        draft_free(d);
    }
    for (int i = 0; i < n_files; i++) free(fs[i].toks);
    free(fs);
    tok_free(tk);
    return 0;
}

/* ---- end to end with a replayed acceptance pattern ----
 *
 * The engine runs speculation on MODEL for real — forwards over 1 + k
 * positions, verification, rollback of the rejected drafts' K/V, streaming
 * to a reader — while the drafts follow the pattern the drafter (--drafter)
 * has on the replayed agent text of --text: at the replay's output position
 * p it proposes k(p) tokens of which the first a(p) equal the replayed
 * output. The model's own drafts are then its reference output (a first
 * pass with speculation off, temperature 0): drafts 0..a-1 are the true
 * next tokens, draft a (when a < k) a wrong one, the rest the true ones
 * again (never verified: the first mismatch ends the step). The model's
 * output position p maps to the replay's position start + p. So what is
 * simulated is only which drafts are right; the draft lengths are the
 * replayed drafter's; every cost is the engine's. */

typedef struct e2e_seq {
    int32_t *prompt;    /* (n_prompt) the model's prompt                     */
    int n_prompt;
    int32_t *ref;       /* (N) its output with speculation off               */
    uint8_t *k, *a;     /* (N) the replayed drafter at output position p     */
    int exp_passes;     /* decode passes the pattern implies (p = 1 .. N)    */
    long exp_drafted, exp_accepted;
    req *r;
    int seen;
    int64_t t_first, t_last; /* the reader's clock at the first / last token */
} e2e_seq;

typedef struct e2e_ctx {
    e2e_seq *s;
    int B, N, n_vocab;
} e2e_ctx;

/* engine_opts.spec_drafts: the pattern's drafts for r's context tokens[0, n). */
static int e2e_drafts(void *ctx, const req *r, const int32_t *tokens, int n, int max, int32_t *out) {
    (void)tokens;
    e2e_ctx *c = ctx;
    for (int i = 0; i < c->B; i++) {
        e2e_seq *q = &c->s[i];
        if (q->r != r) continue;
        int p = n - q->n_prompt; /* tokens generated: the drafts guess ref[p ...] */
        if (p < 1 || p >= c->N) return 0;
        int k = MIN(MIN((int)q->k[p], max), c->N - p), a = MIN((int)q->a[p], k);
        for (int j = 0; j < k; j++) out[j] = q->ref[p + j];
        if (a < k) out[a] = (q->ref[p + a] + 1) % c->n_vocab;
        return k;
    }
    return 0;
}

/* The replayed drafter's (k, a) at every output position p in [1, N) of the
 * window starting at the replay's output position `start`, and the path a
 * speculating engine takes through it from p = 1 (the first token comes
 * from the prefill). */
static int e2e_pattern(const replay_file *f, draft_kind kind, int kmax, int start, int N, e2e_seq *q) {
    draft_opts o = draft_defaults(kind);
    o.max_draft = kmax;
    drafter *d = draft_new(&o);
    draft_seq *ds = d ? draft_seq_new(d) : NULL;
    if (!ds) {
        draft_free(d);
        return -1;
    }
    q->k = xcalloc((size_t)N, 1);
    q->a = xcalloc((size_t)N, 1);
    int32_t out[DRAFT_MAX];
    const int32_t *want = f->toks + f->n_prompt + start;
    for (int p = 1; p < N; p++) {
        int k = draft_propose(d, ds, f->toks, f->n_prompt + start + p, MIN(kmax, N - p - 1), out), a = 0;
        while (a < k && out[a] == want[p + a]) a++;
        q->k[p] = (uint8_t)k, q->a[p] = (uint8_t)a;
    }
    draft_seq_end(d, ds, f->toks, f->n_prompt, f->n_prompt, false);
    draft_free(d);
    q->exp_passes = 0, q->exp_drafted = q->exp_accepted = 0;
    for (int p = 1; p < N; p += q->a[p] + 1) q->exp_passes++, q->exp_drafted += q->k[p], q->exp_accepted += q->a[p];
    return 0;
}

typedef struct e2e_run_out {
    double tps;                 /* decode tokens/s (the reader's clock)         */
    long passes, prefill_passes; /* forward passes over all sequences; of them
                                    the ones up to each first token            */
    long drafted, accepted;
    int mismatches;             /* tokens that differ from the reference       */
} e2e_run_out;

/* One run: B requests of N tokens at temperature 0 through `en` (with
 * speculation unless `off`), read as they stream; `record`: the tokens
 * become the references. */
static int e2e_run(engine *en, e2e_ctx *c, bool off, bool record, draft_kind kind, e2e_run_out *o, err_t *e) {
    engine_stats st0, st1;
    engine_get_stats(en, &st0);
    memset(o, 0, sizeof *o);
    for (int i = 0; i < c->B; i++) {
        e2e_seq *q = &c->s[i];
        int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)q->n_prompt);
        memcpy(ids, q->prompt, sizeof(int32_t) * (size_t)q->n_prompt);
        q->r = req_new(ids, q->n_prompt); /* takes ids */
        q->r->sp = sampler_defaults();
        q->r->sp.temperature = 0;
        q->r->max_tokens = c->N;
        q->r->no_spec = off;
        q->seen = 0, q->t_first = q->t_last = 0;
    }
    int rc = 0;
    for (int i = 0; i < c->B && !rc; i++) rc = engine_submit(en, c->s[i].r, e);
    /* the reader: every request's new tokens as they are posted */
    int64_t *arrive = xmalloc(sizeof(int64_t) * (size_t)c->B * (size_t)c->N);
    for (int done = 0; !rc && done < c->B;) {
        done = 0;
        bool any = false;
        for (int i = 0; i < c->B; i++) {
            e2e_seq *q = &c->s[i];
            req_finish fin;
            int n = req_wait(q->r, q->seen, 0, &fin);
            int64_t now = clock_ns();
            for (; q->seen < n && q->seen < c->N; q->seen++) {
                req_token t;
                req_copy_tokens(q->r, q->seen, 1, &t);
                if (record) q->ref[q->seen] = t.id;
                else o->mismatches += t.id != q->ref[q->seen];
                arrive[(size_t)i * c->N + q->seen] = now;
                any = true;
            }
            if (fin != REQ_RUNNING && req_wait(q->r, q->seen, 0, &fin) == q->seen) {
                if (fin == REQ_FINISH_ERROR) {
                    char msg[256] = "";
                    req_get_finish(q->r, NULL, msg, sizeof msg);
                    rc = err_set(e, ERR_RANGE, "request %d: %s", i, msg);
                }
                done++;
            }
        }
        if (!any && done < c->B) /* wait for the first unfinished one */
            for (int i = 0; i < c->B; i++) {
                req_finish fin;
                if (req_wait(c->s[i].r, c->s[i].seen, 0, &fin) == c->s[i].seen && fin == REQ_RUNNING) {
                    req_wait(c->s[i].r, c->s[i].seen, 5, &fin);
                    break;
                }
            }
    }
    if (!rc) {
        /* decode: the tokens that arrived after every sequence had its first
         * one and up to the first sequence's last one (B = 1: tokens 1..N-1) */
        int64_t t0 = 0, t1 = INT64_MAX;
        for (int i = 0; i < c->B; i++) {
            e2e_seq *q = &c->s[i];
            if (q->seen != c->N) rc = err_set(e, ERR_RANGE, "request %d: %d of %d tokens", i, q->seen, c->N);
            else {
                t0 = MAX(t0, arrive[(size_t)i * c->N]);
                t1 = MIN(t1, arrive[(size_t)i * c->N + c->N - 1]);
            }
            o->passes += q->r->n_forward_steps;
        }
        long n = 0;
        for (int i = 0; i < c->B && !rc; i++)
            for (int p = 0; p < c->N; p++) n += arrive[(size_t)i * c->N + p] > t0 && arrive[(size_t)i * c->N + p] <= t1;
        o->tps = t1 > t0 ? n / ((double)(t1 - t0) / 1e9) : 0;
    }
    free(arrive);
    for (int i = 0; i < c->B; i++) req_unref(c->s[i].r), c->s[i].r = NULL;
    engine_get_stats(en, &st1);
    o->drafted = (long)(st1.spec_drafted_tokens_total[kind] - st0.spec_drafted_tokens_total[kind]);
    o->accepted = (long)(st1.spec_accepted_tokens_total[kind] - st0.spec_accepted_tokens_total[kind]);
    return rc;
}

static engine *e2e_engine(const model *m, e2e_ctx *c, draft_kind spec, int kmax, long threads, err_t *e) {
    engine_opts eo = engine_defaults();
    int n_ctx = 0, bt = eo.block_tokens, blocks = 16;
    for (int i = 0; i < c->B; i++) {
        n_ctx = MAX(n_ctx, c->s[i].n_prompt + c->N);
        blocks += 2 * ((c->s[i].n_prompt + c->N + kmax) / bt + 2); /* its run and the cached prompt */
    }
    eo.n_threads = (int)threads;
    eo.n_ctx = n_ctx;
    eo.kv_mem_bytes = model_kv_block_bytes(m, bt) * (size_t)blocks;
    eo.max_running = c->B;
    eo.spec = spec;
    eo.spec_max = kmax;
    if (spec != DRAFT_OFF) eo.spec_drafts = e2e_drafts, eo.spec_drafts_ctx = c;
    engine *en;
    return engine_new(m, &eo, &en, e) ? NULL : en;
}

int cli__bench_spec_e2e(const char *path, const char *file, const char *drafter_name, long kmax, long N, long depth,
                        long B, long rounds, long threads) {
    err_t e = {0};
    draft_kind kind;
    if (draft_kind_parse(drafter_name, &kind, &e) < 0 || (kind != DRAFT_NGRAM && kind != DRAFT_SUFFIX)) {
        fprintf(stderr, "kvloom bench: --drafter: '%s' is not ngram or suffix\n", drafter_name);
        return 2;
    }
    if (!file) {
        fprintf(stderr, "kvloom bench: --spec-e2e needs --text FILE (a replayed prompt and output)\n");
        return 2;
    }
    model *m;
    tokenizer *tk;
    if (model_load(path, &m, &e)) {
        fprintf(stderr, "kvloom bench: %s: %s\n", path, e.msg);
        return 1;
    }
    if (tok_load(m->gguf, &tk, &e)) {
        fprintf(stderr, "kvloom bench: %s: %s\n", path, e.msg);
        model_free(m);
        return 1;
    }
    replay_file f = {0};
    int rc = 1;
    double *t_off = xmalloc(sizeof(double) * (size_t)rounds), *t_spec = xmalloc(sizeof(double) * (size_t)rounds);
    double *ratio = xmalloc(sizeof(double) * (size_t)rounds);
    e2e_ctx c = {.B = (int)B, .N = (int)N, .n_vocab = m->cfg.n_vocab};
    c.s = xcalloc((size_t)B, sizeof *c.s);
    engine *en = NULL;
    if (load_replay(tk, file, &f, &e)) {
        fprintf(stderr, "kvloom bench: %s\n", e.msg);
        goto out;
    }
    int n_out = f.n - f.n_prompt, D = (int)MAX(depth, 1);
    if (n_out < N + 1 || D + N > m->cfg.n_ctx_train) {
        fprintf(stderr, "kvloom bench: %s has %d output tokens (needs more than --tg %ld), or --depth %ld + --tg %ld passes "
                        "the model's context of %d\n", file, n_out, N, depth, N, m->cfg.n_ctx_train);
        goto out;
    }
    /* sequence i: a D-token prompt of the replay's prompt tokens (cycled,
     * from offset 97 i: the sequences differ), and the replay window at
     * output position i (n_out - N) / B */
    long pat_steps = 0, pat_drafted = 0, pat_acc = 0, hist[DRAFT_MAX + 1] = {0};
    for (int i = 0; i < B; i++) {
        e2e_seq *q = &c.s[i];
        q->n_prompt = D;
        q->prompt = xmalloc(sizeof(int32_t) * (size_t)D);
        int lo = f.n_prompt > 1 ? 1 : 0, span = f.n_prompt - lo;
        for (int j = 0; j < D; j++) q->prompt[j] = j < lo ? f.toks[0] : f.toks[lo + (97 * i + j - lo) % span];
        q->ref = xcalloc((size_t)N, sizeof(int32_t));
        int start = (int)(i * (long)(n_out - N) / B);
        if (e2e_pattern(&f, kind, (int)kmax, start, (int)N, q) < 0) {
            fprintf(stderr, "kvloom bench: out of memory\n");
            goto out;
        }
        pat_steps += q->exp_passes, pat_drafted += q->exp_drafted, pat_acc += q->exp_accepted;
        for (int p = 1; p < N; p += q->a[p] + 1) hist[q->k[p]]++;
        printf("sequence %d: prompt %d tokens, replay window %d..%ld of %d output tokens: %d decode passes for %ld tokens "
               "(%.2f tokens per pass), %ld drafted, %ld accepted\n",
               i, D, start, start + N, n_out, q->exp_passes, N - 1, (double)(N - 1) / q->exp_passes, q->exp_drafted,
               q->exp_accepted);
    }
    printf("pattern (%s, k <= %ld): decode passes by draft length k:", draft_kind_name(kind), kmax);
    for (int k = 0; k <= kmax; k++)
        if (hist[k]) printf(" k=%d:%ld", k, hist[k]);
    printf("\n");
    fflush(stdout);
    /* the references: an engine with speculation off */
    e2e_run_out ro;
    en = e2e_engine(m, &c, DRAFT_OFF, (int)kmax, threads, &e);
    if (!en || e2e_run(en, &c, true, true, kind, &ro, &e)) goto fail;
    printf("reference (--spec off engine): %.2f tokens/s, %ld passes\n", ro.tps, ro.passes);
    engine_free(en);
    /* the rounds: one engine with the pattern's drafts; the off runs opt out
     * per request (req.no_spec), so both reuse the cached prompt */
    en = e2e_engine(m, &c, kind, (int)kmax, threads, &e);
    if (!en || e2e_run(en, &c, true, false, kind, &ro, &e)) goto fail; /* warm-up: caches the prompts */
    long differ = ro.mismatches, off_count = 0;
    printf("%5s %10s %10s %8s  %10s %8s %8s %8s %7s\n", "round", "off t/s", "spec t/s", "ratio", "spec passes",
           "drafted", "accepted", "expected", "differ");
    rc = 0;
    for (long i = 0; i < rounds && !rc; i++) {
        e2e_run_out a, b;
        bool spec_first = i % 2;
        if (e2e_run(en, &c, !spec_first, false, kind, spec_first ? &b : &a, &e) ||
            e2e_run(en, &c, spec_first, false, kind, spec_first ? &a : &b, &e))
            goto fail;
        t_off[i] = a.tps, t_spec[i] = b.tps, ratio[i] = b.tps / a.tps;
        long dp = b.passes - (a.passes - B * (N - 1)); /* (the prefill's passes: as many in both runs) */
        differ += a.mismatches + b.mismatches;
        off_count += dp != pat_steps || b.drafted != pat_drafted || b.accepted != pat_acc;
        printf("%5ld %10.2f %10.2f %8.3f  %10ld %8ld %8ld %8s %7d\n", i + 1, a.tps, b.tps, ratio[i], dp, b.drafted,
               b.accepted, dp == pat_steps && b.drafted == pat_drafted && b.accepted == pat_acc ? "yes" : "NO",
               a.mismatches + b.mismatches);
        fflush(stdout);
    }
    double mo = median(t_off, (int)rounds), ms = median(t_spec, (int)rounds), mr = median(ratio, (int)rounds);
    printf("median: off %.2f tokens/s, spec %.2f tokens/s (%.3fx); paired ratio median %.3fx over %ld rounds\n", mo, ms,
           ms / mo, mr, rounds);
    printf("pattern: %ld decode passes for %ld tokens (%.2f tokens per pass), %ld drafted, %ld accepted\n", pat_steps,
           B * (N - 1), (double)(B * (N - 1)) / pat_steps, pat_drafted, pat_acc);
    printf("outputs: %ld tokens differ from the --spec off engine's; runs whose passes or counts differ from the "
           "pattern: %ld of %ld\n", differ, off_count, rounds);
    rc = differ || off_count ? 1 : 0;
    goto out;
fail:
    fprintf(stderr, "kvloom bench: %s\n", e.msg);
    rc = 1;
out:
    engine_free(en);
    free(t_off), free(t_spec), free(ratio);
    for (int i = 0; i < B; i++) free(c.s[i].prompt), free(c.s[i].ref), free(c.s[i].k), free(c.s[i].a);
    free(c.s);
    free(f.toks);
    tok_free(tk);
    model_free(m);
    return rc;
}
