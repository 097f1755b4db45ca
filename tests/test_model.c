/*
 * test_model.c — the forward pass on the real stories260K model:
 *  - greedy generation reproduces ../shared/models/expected_greedy.json
 *    (an independent fp64 numpy forward) token for token;
 *  - the tokenizer turns each case's prompt into its prompt_ids;
 *  - a ragged batch of several sequences at different positions gives
 *    bitwise the same logits as running each sequence alone;
 *  - invalid batches are rejected with an error, never a crash;
 *  - the loader rejects malformed models with errors naming the problem
 *    (including a weight matrix of a type that converts but has no dot
 *    product, Q8_K, in a model made by `kvloom gen`).
 */
#include <unistd.h>
#include <jansson.h>

#include "cli/cli.h"
#include "kern/kern.h"
#include "kern/quant.h"
#include "model/model.h"
#include "tok/tok.h"
#include "test.h"

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Runs `ids` through a fresh KV and greedily extends to `total` tokens. */
static int greedy(const model *m, const int32_t *prompt, int n_prompt, int total, int32_t *out, int threads) {
    const int bt = 16, nb = (total + bt) / bt + 1;
    model_kv *kv = model_kv_new(m, nb, bt);
    model_state *st = model_state_new(m, 64, total + 1, threads);
    int32_t *table = xmalloc(sizeof(int32_t) * nb), *pos = xmalloc(sizeof(int32_t) * 64), sid[64] = {0};
    for (int i = 0; i < nb; i++) table[i] = nb - 1 - i; /* any block order must work */
    model_seq seq = {table, nb};
    float *logits = xmalloc(sizeof(float) * m->cfg.n_vocab);
    err_t e = {0};
    memcpy(out, prompt, sizeof(int32_t) * n_prompt);
    int n = n_prompt, done = 0;
    while (done < n_prompt) { /* prefill in chunks of up to 5 to exercise chunking */
        int k = MIN(5, n_prompt - done);
        for (int i = 0; i < k; i++) pos[i] = done + i;
        model_batch b = {.n_tokens = k, .token = out + done, .pos = pos, .seq = sid, .n_seqs = 1, .seqs = &seq};
        if (model_forward(m, st, kv, &b, logits, &e) != 1) return -1;
        done += k;
    }
    while (n < total) {
        int32_t t = argmax(logits, m->cfg.n_vocab);
        out[n] = t;
        pos[0] = n++;
        if (t == 2 || n == total) break; /* EOS */
        model_batch b = {.n_tokens = 1, .token = &t, .pos = pos, .seq = sid, .n_seqs = 1, .seqs = &seq};
        if (model_forward(m, st, kv, &b, logits, &e) != 1) return -1;
    }
    free(logits);
    free(table);
    free(pos);
    model_state_free(st);
    model_kv_free(kv);
    return n;
}

static void test_expected_greedy(const model *m, const tokenizer *tk) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/expected_greedy.json", test_shared_dir());
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK_MSG(root != NULL, "cannot read %s", path);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    size_t ci;
    json_t *c;
    json_array_foreach(cases, ci, c) {
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        json_t *pids = json_object_get(c, "prompt_ids"), *oids = json_object_get(c, "output_ids");
        int np = (int)json_array_size(pids), no = (int)json_array_size(oids);
        int32_t want[1024], got[1024], enc[1024];
        want[0] = 1; /* BOS, then everything fed after it */
        for (int i = 0; i < no; i++) want[i + 1] = (int32_t)json_integer_value(json_array_get(oids, i));
        /* tokenizer: prompt -> prompt_ids */
        int ne = tok_encode(tk, prompt, strlen(prompt), true, false, enc, 1024);
        bool same = ne == np;
        for (int i = 0; same && i < np; i++) same = enc[i] == json_integer_value(json_array_get(pids, i));
        CHECK_MSG(same, "case %zu: prompt '%s' tokenized differently", ci, prompt);
        for (int threads = 1; threads <= 2; threads++) {
            int n = greedy(m, want, np, no + 1, got, threads);
            CHECK_MSG(n == no + 1, "case %zu: generated %d tokens, expected %d", ci, n, no + 1);
            int first_diff = -1;
            for (int i = 0; i < MIN(n, no + 1); i++)
                if (got[i] != want[i]) {
                    first_diff = i;
                    break;
                }
            CHECK_MSG(first_diff < 0, "case %zu ('%s', %d threads): first difference at position %d", ci, prompt,
                      threads, first_diff);
        }
    }
    json_decref(root);
}

/* Three sequences at different depths in one ragged batch == each alone. */
static void test_ragged_batch(const model *m) {
    const int V = m->cfg.n_vocab, bt = 4;
    const int lens[3] = {7, 13, 3}; /* prompt lengths */
    int32_t toks[3][16];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 16; i++) toks[s][i] = (int32_t)(1 + (s * 37 + i * 11) % (V - 1));
    /* alone: each sequence gets logits for its prompt (all rows) then 2 decode steps */
    float alone[3][3][512];
    for (int s = 0; s < 3; s++) {
        model_kv *kv = model_kv_new(m, 8, bt);
        model_state *st = model_state_new(m, 16, 32, 1);
        int32_t table[8] = {0, 1, 2, 3, 4, 5, 6, 7}, pos[16], sid[16] = {0};
        model_seq seq = {table, 8};
        float lg[16 * 512];
        for (int i = 0; i < lens[s]; i++) pos[i] = i;
        err_t e;
        model_batch b = {.n_tokens = lens[s], .token = toks[s], .pos = pos, .seq = sid, .n_seqs = 1, .seqs = &seq};
        CHECK_EQ_INT(model_forward(m, st, kv, &b, lg, &e), 1);
        memcpy(alone[s][0], lg, sizeof(float) * V);
        for (int step = 1; step < 3; step++) {
            int32_t p = lens[s] + step - 1;
            model_batch d = {.n_tokens = 1, .token = &toks[s][p], .pos = &p, .seq = sid, .n_seqs = 1, .seqs = &seq};
            CHECK_EQ_INT(model_forward(m, st, kv, &d, lg, &e), 1);
            memcpy(alone[s][step], lg, sizeof(float) * V);
        }
        model_state_free(st);
        model_kv_free(kv);
    }
    /* together: one shared pool, interleaved block tables, 2 threads */
    model_kv *kv = model_kv_new(m, 24, bt);
    model_state *st = model_state_new(m, 32, 32, 2);
    int32_t tables[3][8];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 8; i++) tables[s][i] = i * 3 + (2 - s);
    model_seq seqs[3] = {{tables[0], 8}, {tables[1], 8}, {tables[2], 8}};
    int32_t tk[32], pos[32], sid[32];
    uint8_t want[32];
    int n = 0;
    for (int s = 2; s >= 0; s--) /* not in sequence order */
        for (int i = 0; i < lens[s]; i++) {
            tk[n] = toks[s][i], pos[n] = i, sid[n] = s, want[n] = i == lens[s] - 1;
            n++;
        }
    float lg[3 * 512];
    err_t e;
    model_batch b = {.n_tokens = n, .token = tk, .pos = pos, .seq = sid, .logits = want, .n_seqs = 3, .seqs = seqs};
    CHECK_EQ_INT(model_forward(m, st, kv, &b, lg, &e), 3);
    for (int r = 0; r < 3; r++) { /* rows come in batch order: seq 2, 1, 0 */
        int s = 2 - r;
        CHECK_MSG(memcmp(lg + r * V, alone[s][0], sizeof(float) * V) == 0, "prefill logits of seq %d differ", s);
    }
    for (int step = 1; step < 3; step++) {
        for (int s = 0; s < 3; s++) {
            int p = lens[s] + step - 1;
            tk[s] = toks[s][p], pos[s] = p, sid[s] = s, want[s] = 1;
        }
        model_batch d = {.n_tokens = 3, .token = tk, .pos = pos, .seq = sid, .logits = want, .n_seqs = 3, .seqs = seqs};
        CHECK_EQ_INT(model_forward(m, st, kv, &d, lg, &e), 3);
        for (int s = 0; s < 3; s++)
            CHECK_MSG(memcmp(lg + s * V, alone[s][step], sizeof(float) * V) == 0, "decode step %d of seq %d differs",
                      step, s);
    }
    /* invalid batches are errors */
    int32_t badtok = V, p0 = 0, s0 = 0, far = 40;
    model_batch bad = {.n_tokens = 1, .token = &badtok, .pos = &p0, .seq = &s0, .n_seqs = 3, .seqs = seqs};
    CHECK(model_forward(m, st, kv, &bad, lg, &e) == ERR_RANGE && strstr(e.msg, "vocabulary"));
    bad.token = tk;
    bad.pos = &far;
    CHECK(model_forward(m, st, kv, &bad, lg, &e) == ERR_RANGE);
    int32_t bad_tables[1] = {99};
    model_seq bs = {bad_tables, 1};
    bad.pos = &p0;
    bad.seqs = &bs;
    bad.n_seqs = 1;
    CHECK(model_forward(m, st, kv, &bad, lg, &e) == ERR_RANGE && strstr(e.msg, "block"));
    model_state_free(st);
    model_kv_free(kv);
}

/* Rewrites stories260K with one change and checks the loader's error. */
static void expect_load_error(const char *src_path, const char *drop_tensor, const char *set_arch, int want_code,
                              const char *want_sub) {
    err_t e = {0};
    gguf_ctx *g;
    CHECK(gguf_open(src_path, &g, &e) == 0);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) gguf_writer_copy_kv(w, g, i);
    if (set_arch) gguf_writer_set_str(w, "general.architecture", set_arch);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (drop_tensor && strcmp(name, drop_tensor) == 0) continue;
        gguf_writer_add_tensor(w, name, t->type, (int)t->n_dims, t->dims, t->data);
    }
    char tmp[64];
    snprintf(tmp, sizeof tmp, "/tmp/kvloom-test-model-bad-%d.gguf", (int)getpid());
    CHECK(gguf_writer_write(w, tmp, &e) == 0);
    gguf_writer_free(w);
    gguf_free(g);
    model *m = NULL;
    int r = model_load(tmp, &m, &e);
    CHECK_MSG(r == want_code && strstr(e.msg, want_sub), "got %d '%s', want %d '%s'", r, e.msg, want_code, want_sub);
    CHECK(m == NULL);
    remove(tmp);
}

/* A Q8_K weight matrix dequantises (types.c names its converters) but no
 * kernel table multiplies it: the loader refuses it by name instead of the
 * matmul asserting later. The model is generated (F32, rows of 256 so they
 * fit Q8_K's blocks) and one matrix rewritten as Q8_K. */
static void test_unmultipliable_matrix(void) {
    const char *f32 = "/tmp/kvloom-test-model-f32.gguf", *bad = "/tmp/kvloom-test-model-q8k.gguf";
    char *argv[] = {"--arch", "llama", "--n-embd", "256", "--n-layer", "1", "--n-head", "4", "--n-ff", "256",
                    "--n-vocab", "64", "--type", "F32", "-o", (char *)f32, NULL};
    CHECK_EQ_INT(cli__gen((int)ARRAY_LEN(argv) - 1, argv), 0);
    err_t e = {0};
    gguf_ctx *g = NULL;
    CHECK_MSG(gguf_open(f32, &g, &e) == 0, "%s", e.msg);
    if (!g) return;
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) gguf_writer_copy_kv(w, g, i);
    void *q8k = NULL;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (strcmp(name, "blk.0.ffn_up.weight") == 0 && t->type == DT_F32) {
            q8k = xmalloc(dtype_row_bytes(DT_Q8_K, t->n_elems));
            CHECK_EQ_INT(quant_quantize_row(DT_Q8_K, t->data, q8k, t->n_elems), 0);
            gguf_writer_add_tensor(w, name, DT_Q8_K, (int)t->n_dims, t->dims, q8k);
        } else {
            gguf_writer_add_tensor(w, name, t->type, (int)t->n_dims, t->dims, t->data);
        }
    }
    CHECK_MSG(q8k != NULL, "the generated model has no F32 blk.0.ffn_up.weight");
    CHECK(gguf_writer_write(w, bad, &e) == 0);
    gguf_writer_free(w);
    free(q8k);
    gguf_free(g);
    model *m = NULL;
    CHECK_MSG(model_load(f32, &m, &e) == 0, "the F32 model loads: %s", e.msg);
    model_free(m);
    m = NULL;
    int r = model_load(bad, &m, &e);
    CHECK_MSG(r == ERR_UNSUPPORTED && strstr(e.msg, "blk.0.ffn_up.weight") && strstr(e.msg, "Q8_K"),
              "got %d '%s'", r, e.msg);
    CHECK(m == NULL);
    remove(f32);
    remove(bad);
}

int main(void) {
    kern_init(NULL);
    test_unmultipliable_matrix();
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    model *m = NULL;
    err_t e = {0};
    CHECK_MSG(model_load(path, &m, &e) == 0, "%s", e.msg);
    if (!m) return test_summary("test_model");
    CHECK_EQ_INT(m->cfg.n_vocab, 512);
    CHECK_EQ_INT(m->cfg.n_embd, 64);
    CHECK_EQ_INT(m->cfg.n_layer, 5);
    CHECK_EQ_INT(m->cfg.n_head, 8);
    CHECK_EQ_INT(m->cfg.n_head_kv, 4);
    CHECK(!m->cfg.tied_output); /* stories260K ships output.weight */
    tokenizer *tk = NULL;
    CHECK_MSG(tok_load(m->gguf, &tk, &e) == 0, "%s", e.msg);
    if (tk) test_expected_greedy(m, tk);
    test_ragged_batch(m);
    tok_free(tk);
    model_free(m);

    expect_load_error(path, "blk.3.ffn_up.weight", NULL, ERR_NOTFOUND, "blk.3.ffn_up.weight");
    expect_load_error(path, "output_norm.weight", NULL, ERR_NOTFOUND, "output_norm.weight");
    expect_load_error(path, NULL, "gpt2", ERR_UNSUPPORTED, "gpt2");
    CHECK(model_load("/nonexistent/model.gguf", &m, &e) == ERR_IO && strstr(e.msg, "/nonexistent/model.gguf"));
    return test_summary("test_model");
}
