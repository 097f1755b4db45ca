/*
 * test_moe.c — the mixture-of-experts models (model/moe.h): qwen3moe and
 * gpt-oss, on the fixture models of tests/fixtures (tools/gen_fixtures.sh,
 * qwen3moe: 8 experts, 3 used, expert FF 256, every weight type; gpt-oss:
 * the same experts with biases and the clamped SwiGLU, sinks, YaRN, a
 * window on layer 0, in F32 and in BF16 with MXFP4 experts):
 *  - expert grouping: one batch of three sequences' prompts, interleaved,
 *    gives bitwise the logits of every token run alone (one token per
 *    forward, each sequence in its own cache), on 1 and 2 threads, for every
 *    weight type; and the batch really groups (some expert serves tokens of
 *    several sequences in one step);
 *  - routing: every token's selection is k distinct experts in descending
 *    router order, and its weights are positive and sum to 1 (qwen3moe
 *    renormalises the top-k);
 *  - greedy continuation equals the numpy reference's
 *    (tests/fixtures/ref/{qwen3moe,gptoss}-*.greedy, from gguf_ref.py greedy);
 *  - gpt-oss at 300 positions (windows of 4 and of 260 — more than one
 *    attention chunk — sliding, YaRN's ramp dims turned far): the last rows'
 *    logits within 1e-4 of the reference (ref/NAME.long; measured 2e-5,
 *    rounding YaRN's ramp ends as other yarn models do gives 4e-4), and the same bits
 *    whether the prompt runs as one batch, in chunks of 97, or its last
 *    tokens one at a time;
 *  - bad files: zero experts, top-k above the expert count, an expert tensor
 *    of the wrong shape or of a type kvloom cannot multiply, a missing
 *    router, a missing expert key: each a load error naming the key or
 *    tensor; gpt-oss: a window of 0 or above the context, a missing or
 *    misshapen sink, an MXFP4 expert tensor of the wrong size or cut short
 *    by the end of the file.
 */
#include <unistd.h>

#include "kern/kern.h"
#include "model/model.h"
#include "test.h"

static const char *fixture_dir(void) {
    const char *d = getenv("KVLOOM_FIXTURES");
    return d && *d ? d : "build/fixtures/models";
}

static model *load_fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.gguf", fixture_dir(), name);
    model *m = NULL;
    err_t e = {0};
    CHECK_MSG(model_load(path, &m, &e) == 0, "%s: %s", path, e.msg);
    return m;
}

/* ---- grouping == per token ---- */

#define NSEQ 3
static const int32_t prompts[NSEQ][6] = {{1, 17, 123, 299, 5, 42}, {1, 200, 7, 7}, {1, 9, 150, 42, 88}};
static const int plen[NSEQ] = {6, 4, 5};

static void check_grouping(const char *name) {
    model *m = load_fixture(name);
    if (!m) return;
    const int V = m->cfg.n_vocab, K = m->cfg.n_expert_used;
    CHECK(m->cfg.n_expert == 8 && K == 3 && m->cfg.expert_norm == (m->cfg.arch == ARCH_QWEN3MOE));
    if (m->cfg.arch == ARCH_GPTOSS) /* the prompts (up to 6) pass the window of layer 0 */
        CHECK(m->layers[0].window == 4 && m->layers[1].window == 0 && m->layers[0].sinks);
    enum { BT = 4, NB = 2 }; /* 2 blocks of 4 per sequence */
    int total = 0;
    for (int s = 0; s < NSEQ; s++) total += plen[s];
    float *alone = xmalloc(sizeof(float) * (size_t)total * V), *batch = xmalloc(sizeof(float) * (size_t)total * V);
    err_t e = {0};
    for (int threads = 1; threads <= 2; threads++) {
        /* every token alone: sequence s in blocks [s*NB, s*NB+NB) of its own cache */
        model_kv *kv1 = model_kv_new(m, NSEQ * NB, BT);
        model_state *st = model_state_new(m, 32, 16, threads);
        int32_t tables[NSEQ][NB];
        model_seq seqs[NSEQ];
        for (int s = 0; s < NSEQ; s++) {
            for (int i = 0; i < NB; i++) tables[s][i] = s * NB + (NB - 1 - i);
            seqs[s] = (model_seq){tables[s], NB};
        }
        /* batch order: round robin over the sequences (interleaved) */
        int32_t tok[32], pos[32], sid[32], row_of[NSEQ][8];
        uint8_t want[32];
        int n = 0;
        for (int p = 0; p < 6; p++)
            for (int s = 0; s < NSEQ; s++)
                if (p < plen[s]) tok[n] = prompts[s][p], pos[n] = p, sid[n] = s, want[n] = 1, row_of[s][p] = n++;
        for (int s = 0; s < NSEQ; s++)
            for (int p = 0; p < plen[s]; p++) {
                int32_t z = 0;
                model_batch d = {.n_tokens = 1, .token = &prompts[s][p], .pos = &pos[row_of[s][p]], .seq = &z,
                                 .n_seqs = 1, .seqs = &seqs[s]};
                CHECK_EQ_INT(model_forward(m, st, kv1, &d, alone + (size_t)row_of[s][p] * V, &e), 1);
            }
        model_kv *kv2 = model_kv_new(m, NSEQ * NB, BT);
        model_batch b = {.n_tokens = n, .token = tok, .pos = pos, .seq = sid, .logits = want, .n_seqs = NSEQ,
                         .seqs = seqs};
        CHECK_EQ_INT(model_forward(m, st, kv2, &b, batch, &e), n);
        for (int i = 0; i < n; i++)
            CHECK_MSG(memcmp(alone + (size_t)i * V, batch + (size_t)i * V, sizeof(float) * V) == 0,
                      "%s (%d threads): token %d (seq %d pos %d) differs between the grouped batch and alone", name,
                      threads, i, sid[i], pos[i]);
        /* the last layer's routing of the batch: k distinct experts in
         * descending order, weights summing to 1, and real grouping */
        const int32_t *ex = moe_last_experts(model_state_moe(st));
        const float *w = moe_last_weights(model_state_moe(st));
        int shared = 0;
        for (int e2 = 0; e2 < m->cfg.n_expert; e2++) {
            int seen = 0; /* bitmask of sequences routed to e2 */
            for (int i = 0; i < n; i++)
                for (int k = 0; k < K; k++)
                    if (ex[i * K + k] == e2) seen |= 1 << sid[i];
            shared += __builtin_popcount(seen) >= 2;
        }
        CHECK_MSG(shared > 0, "%s: no expert served two sequences in one step (no grouping exercised)", name);
        for (int i = 0; i < n; i++) {
            double sum = 0;
            for (int k = 0; k < K; k++) {
                CHECK(ex[i * K + k] >= 0 && ex[i * K + k] < m->cfg.n_expert);
                for (int k2 = 0; k2 < k; k2++) CHECK(ex[i * K + k] != ex[i * K + k2]);
                CHECK(w[i * K + k] > 0);
                if (k) CHECK(w[i * K + k] <= w[i * K + k - 1]);
                sum += w[i * K + k];
            }
            CHECK_MSG(fabs(sum - 1) < 1e-5, "%s token %d: weights sum to %g", name, i, sum);
        }
        model_kv_free(kv1);
        model_kv_free(kv2);
        model_state_free(st);
    }
    free(alone);
    free(batch);
    model_free(m);
}

/* ---- greedy continuation == reference ---- */

static void check_greedy(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "tests/fixtures/ref/%s.greedy", name);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot read %s", path);
    if (!f) return;
    int32_t want[64];
    int n_prompt = 0, n = 0;
    CHECK(fscanf(f, "%d", &n_prompt) == 1 && n_prompt > 0 && n_prompt < 16);
    while (n < 64 && fscanf(f, "%d", &want[n]) == 1) n++;
    fclose(f);
    CHECK(n > n_prompt);
    model *m = load_fixture(name);
    if (!m) return;
    const int V = m->cfg.n_vocab;
    model_kv *kv = model_kv_new(m, 16, 4);
    model_state *st = model_state_new(m, 16, 64, 2);
    int32_t table[16], pos[64], sid[64] = {0}, got[64];
    for (int i = 0; i < 16; i++) table[i] = i;
    model_seq seq = {table, 16};
    float *logits = xmalloc(sizeof(float) * V);
    err_t e = {0};
    for (int i = 0; i < n_prompt; i++) pos[i] = i, got[i] = want[i];
    model_batch b = {.n_tokens = n_prompt, .token = got, .pos = pos, .seq = sid, .n_seqs = 1, .seqs = &seq};
    CHECK_EQ_INT(model_forward(m, st, kv, &b, logits, &e), 1);
    for (int i = n_prompt; i < n; i++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        got[i] = best;
        CHECK_MSG(got[i] == want[i], "%s: greedy token %d is %d, reference %d", name, i, got[i], want[i]);
        if (got[i] != want[i] || i + 1 == n) break;
        model_batch d = {.n_tokens = 1, .token = &got[i], .pos = &pos[0], .seq = sid, .n_seqs = 1, .seqs = &seq};
        pos[0] = i;
        CHECK_EQ_INT(model_forward(m, st, kv, &d, logits, &e), 1);
    }
    free(logits);
    model_state_free(st);
    model_kv_free(kv);
    model_free(m);
}

/* ---- bad files ---- */

typedef struct edit {
    const char *key;      /* metadata key to change (u32 value) or drop */
    int64_t value;        /* -1: drop the key                            */
    const char *tensor;   /* tensor to change or drop                    */
    int mode;             /* 0 drop, 1 wrong shape, 2 wrong type, 3 data
                             cut short by the end of the file (the tensor
                             written last, the file truncated)             */
    const char *want;     /* substring the error must contain            */
} edit;

/* Copies the fixture with one edit and loads it; the error must name it. */
static void check_bad(const char *src_path, const edit *ed) {
    gguf_ctx *g;
    err_t e = {0};
    if (gguf_open(src_path, &g, &e)) {
        CHECK_MSG(0, "%s: %s", src_path, e.msg);
        return;
    }
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_key(g, i);
        if (ed->key && k.len == strlen(ed->key) && memcmp(k.ptr, ed->key, k.len) == 0) {
            if (ed->value >= 0) gguf_writer_set_u32(w, ed->key, (uint32_t)ed->value);
            continue;
        }
        gguf_writer_copy_kv(w, g, i);
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (ed->tensor && strcmp(name, ed->tensor) == 0) {
            if (ed->mode == 0 || ed->mode == 3) continue;
            if (ed->mode == 1) { /* one expert (one row of a vector) fewer */
                int64_t d[3] = {t->dims[0], t->dims[1], t->dims[2] - 1};
                if (t->n_dims == 1) d[0]--;
                gguf_writer_add_tensor(w, name, t->type, (int)t->n_dims, d, t->data);
                continue;
            }
            /* an integer type no kernel multiplies, same shape (zeros) */
            gguf_writer_add_tensor(w, name, DT_I32, (int)t->n_dims, t->dims, NULL);
            continue;
        }
        gguf_writer_add_tensor(w, name, t->type, (int)t->n_dims, t->dims, t->data);
    }
    const gguf_tensor *last = ed->mode == 3 ? gguf_find_tensor(g, ed->tensor) : NULL;
    if (last) gguf_writer_add_tensor(w, ed->tensor, last->type, (int)last->n_dims, last->dims, last->data);
    char out[64];
    snprintf(out, sizeof out, "/tmp/kvloom-test-moe-%d.gguf", (int)getpid());
    CHECK_EQ_INT(gguf_writer_write(w, out, &e), 0);
    gguf_writer_free(w);
    if (last) { /* the last tensor's data ends 9 bytes past the file's end */
        FILE *f = fopen(out, "rb");
        CHECK(f && fseek(f, 0, SEEK_END) == 0);
        long size = f ? ftell(f) : 0;
        if (f) fclose(f);
        CHECK(size > 9 && truncate(out, size - 9) == 0);
    }
    gguf_free(g);
    model *m = NULL;
    int r = model_load(out, &m, &e);
    unlink(out);
    CHECK_MSG(r < 0 && m == NULL, "load of a file with %s %s succeeded", ed->key ? ed->key : "", ed->tensor ? ed->tensor : "");
    CHECK_MSG(strstr(e.msg, ed->want) != NULL, "error '%s' does not name '%s'", e.msg, ed->want);
    model_free(m);
}

static void check_bad_files(void) {
    char src[1024];
    snprintf(src, sizeof src, "%s/qwen3moe-q8_0.gguf", fixture_dir());
    const edit edits[] = {
        {"qwen3moe.expert_count", 0, NULL, 0, "qwen3moe.expert_count"},
        {"qwen3moe.expert_count", -1, NULL, 0, "qwen3moe.expert_count"},
        {"qwen3moe.expert_used_count", 9, NULL, 0, "qwen3moe.expert_used_count"},
        {"qwen3moe.expert_used_count", 0, NULL, 0, "qwen3moe.expert_used_count"},
        {"qwen3moe.expert_feed_forward_length", -1, NULL, 0, "qwen3moe.expert_feed_forward_length"},
        {"qwen3moe.expert_feed_forward_length", 128, NULL, 0, "blk.0.ffn_gate_exps.weight"},
        {NULL, 0, "blk.1.ffn_gate_inp.weight", 0, "blk.1.ffn_gate_inp.weight"},
        {NULL, 0, "blk.0.ffn_up_exps.weight", 0, "blk.0.ffn_up_exps.weight"},
        {NULL, 0, "blk.1.ffn_down_exps.weight", 1, "blk.1.ffn_down_exps.weight"},
        {NULL, 0, "blk.0.ffn_gate_exps.weight", 2, "blk.0.ffn_gate_exps.weight"},
        {"qwen3moe.expert_count", 16, NULL, 0, "blk.0.ffn_gate_inp.weight"},
    };
    for (size_t i = 0; i < ARRAY_LEN(edits); i++) check_bad(src, &edits[i]);
}

static void check_bad_gptoss(void) {
    char src[1024];
    snprintf(src, sizeof src, "%s/gptoss-bf16-mxfp4.gguf", fixture_dir());
    const edit edits[] = {
        {"gpt-oss.attention.sliding_window", 0, NULL, 0, "'gpt-oss.attention.sliding_window' = 0 is out of range"},
        {"gpt-oss.attention.sliding_window", 2049, NULL, 0, "'gpt-oss.attention.sliding_window' = 2049 is out of range"},
        {"gpt-oss.attention.sliding_window", -1, NULL, 0, "missing metadata key 'gpt-oss.attention.sliding_window'"},
        {"gpt-oss.rope.scaling.original_context_length", -1, NULL, 0, "gpt-oss.rope.scaling.original_context_length"},
        {NULL, 0, "blk.1.attn_sinks.weight", 0, "missing tensor 'blk.1.attn_sinks.weight'"},
        {NULL, 0, "blk.0.attn_sinks.weight", 1, "blk.0.attn_sinks.weight"},
        {NULL, 0, "blk.0.post_attention_norm.weight", 0, "blk.0.post_attention_norm.weight"},
        {NULL, 0, "blk.1.ffn_gate_inp.bias", 0, "blk.1.ffn_gate_inp.bias"},
        {NULL, 0, "blk.0.ffn_down_exps.bias", 0, "blk.0.ffn_down_exps.bias"},
        {NULL, 0, "blk.0.attn_output.bias", 0, "blk.0.attn_output.bias"},
        {NULL, 0, "blk.0.ffn_up_exps.weight", 1, "blk.0.ffn_up_exps.weight"},
        {NULL, 0, "blk.1.ffn_gate_exps.weight", 3, "blk.1.ffn_gate_exps.weight"},
    };
    for (size_t i = 0; i < ARRAY_LEN(edits); i++) check_bad(src, &edits[i]);
}

/* ---- gpt-oss at 300 positions ---- */

static void check_long(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "tests/fixtures/ref/%s.long", name);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot read %s", path);
    if (!f) return;
    int T = 0, V = 0, R = 0;
    bool ok = fscanf(f, "%d %d %d", &T, &V, &R) == 3 && T > 0 && T <= 512 && V > 0 && V < 100000 && R > 0 && R <= T;
    int32_t *tok = xmalloc(sizeof(int32_t) * 512);
    float *ref = xmalloc(sizeof(float) * (size_t)MAX(R, 1) * (size_t)MAX(V, 1));
    for (int i = 0; i < T && ok; i++) ok = fscanf(f, "%d", &tok[i]) == 1;
    for (long i = 0; i < (long)R * V && ok; i++) ok = fscanf(f, "%f", &ref[i]) == 1;
    fclose(f);
    CHECK_MSG(ok, "%s: malformed", path);
    model *m = ok ? load_fixture(name) : NULL;
    if (!m) {
        free(tok);
        free(ref);
        return;
    }
    CHECK_EQ_INT(m->cfg.n_vocab, V);
    enum { BT = 16 };
    const int nb = (T + BT - 1) / BT;
    int32_t *table = xmalloc(sizeof(int32_t) * (size_t)nb), *pos = xmalloc(sizeof(int32_t) * (size_t)T);
    int32_t *sid = xcalloc((size_t)T, sizeof(int32_t));
    uint8_t *want = xcalloc((size_t)T, 1);
    for (int i = 0; i < nb; i++) table[i] = (i * 7) % nb; /* scattered blocks (nb = 19, prime) */
    for (int i = 0; i < T; i++) pos[i] = i, want[i] = i >= T - R;
    model_seq seq = {table, nb};
    float *one = xmalloc(sizeof(float) * (size_t)R * V), *chunked = xmalloc(sizeof(float) * (size_t)R * V);
    err_t e = {0};
    model_state *st = model_state_new(m, T, T, 2);
    /* the whole prompt as one batch */
    model_kv *kv = model_kv_new(m, nb, BT);
    model_batch b = {.n_tokens = T, .token = tok, .pos = pos, .seq = sid, .logits = want, .n_seqs = 1, .seqs = &seq};
    CHECK_EQ_INT(model_forward(m, st, kv, &b, one, &e), R);
    double scale = 0, worst = 0;
    for (long i = 0; i < (long)R * V; i++) scale = fmax(scale, fabs(ref[i]));
    for (long i = 0; i < (long)R * V; i++) worst = fmax(worst, fabs(one[i] - ref[i]));
    CHECK_MSG(worst <= 1e-4 * scale, "%s: max |c - ref| = %.3g over the last %d of %d positions (scale %.3g)", name,
              worst, R, T, scale);
    /* chunks of 97, the last R tokens one at a time: the same bits */
    model_kv_free(kv);
    kv = model_kv_new(m, nb, BT);
    int done = 0, row = 0;
    while (done < T) {
        const int n = done < T - R ? MIN(97, T - R - done) : 1;
        model_batch c = {.n_tokens = n, .token = tok + done, .pos = pos + done, .seq = sid, .logits = want + done,
                         .n_seqs = 1, .seqs = &seq};
        int rows = model_forward(m, st, kv, &c, chunked + (size_t)row * V, &e);
        CHECK_MSG(rows >= 0, "%s: %s", name, e.msg);
        row += MAX(rows, 0);
        done += n;
    }
    CHECK_EQ_INT(row, R);
    CHECK_MSG(memcmp(one, chunked, sizeof(float) * (size_t)R * V) == 0,
              "%s: chunked prefill + decode differs from one batch (batch invariance with windows)", name);
    model_kv_free(kv);
    model_state_free(st);
    free(one);
    free(chunked);
    free(table);
    free(pos);
    free(sid);
    free(want);
    free(tok);
    free(ref);
    model_free(m);
}

/* Metadata that asks for more norm and bias values than the file holds
 * (qwen2: q/k/v biases of head_count x key_length per layer) is a load
 * error naming the keys, not a ~50 GB allocation that aborts. */
static void check_oversized_metadata(void) {
    char src[1024];
    snprintf(src, sizeof src, "%s/qwen2-q8_0.gguf", fixture_dir());
    gguf_ctx *g;
    err_t e = {0};
    if (gguf_open(src, &g, &e)) {
        CHECK_MSG(0, "%s: %s", src, e.msg);
        return;
    }
    static const struct {
        const char *key;
        uint32_t value;
    } big[] = {{"qwen2.block_count", 1024},
               {"qwen2.attention.head_count", 1024},
               {"qwen2.attention.head_count_kv", 1024},
               {"qwen2.attention.key_length", 4096},
               {"qwen2.attention.value_length", 4096}};
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_key(g, i);
        bool replaced = false;
        for (size_t j = 0; j < ARRAY_LEN(big); j++)
            if (k.len == strlen(big[j].key) && memcmp(k.ptr, big[j].key, k.len) == 0) replaced = true;
        if (!replaced) gguf_writer_copy_kv(w, g, i);
    }
    for (size_t j = 0; j < ARRAY_LEN(big); j++) gguf_writer_set_u32(w, big[j].key, big[j].value);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        gguf_writer_add_tensor(w, name, t->type, (int)t->n_dims, t->dims, t->data);
    }
    char out[64];
    snprintf(out, sizeof out, "/tmp/kvloom-test-moe-big-%d.gguf", (int)getpid());
    CHECK_EQ_INT(gguf_writer_write(w, out, &e), 0);
    gguf_writer_free(w);
    gguf_free(g);
    model *m = NULL;
    int r = model_load(out, &m, &e);
    unlink(out);
    CHECK_MSG(r < 0 && m == NULL, "a file whose metadata asks for ~50 GB of vectors loaded");
    CHECK_MSG(strstr(e.msg, "block_count 1024") && strstr(e.msg, "more than the file"), "error '%s'", e.msg);
    model_free(m);
}

int main(void) {
    kern_init(NULL);
    static const char *types[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"};
    char name[64];
    for (size_t i = 0; i < ARRAY_LEN(types); i++) {
        snprintf(name, sizeof name, "qwen3moe-%s", types[i]);
        check_grouping(name);
    }
    check_grouping("gptoss-f32");
    check_grouping("gptoss-bf16-mxfp4");
    check_greedy("qwen3moe-f32");
    check_greedy("qwen3moe-bf16");
    check_greedy("gptoss-f32");
    check_long("gptoss-f32");
    check_long("gptoss-w260-f32");
    check_bad_files();
    check_bad_gptoss();
    check_oversized_metadata();
    printf("kernels: %s\n", kern->name);
    return test_summary("test_moe");
}
