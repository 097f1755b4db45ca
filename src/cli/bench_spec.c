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
 *
 * Thread: the CLI's main thread; the model's pool runs the kernels.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "../model/model.h"
#include "../sched/draft.h"
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
                if (k) draft_seq_feedback(d, s, k, a);
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
