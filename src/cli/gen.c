/*
 * gen.c — `kvloom gen`: random-weight GGUF models at the exact shapes of
 * real models, carrying a real vocabulary; and `kvloom quantize`.
 *
 * Speed depends on shapes and weight types, not trained values, so the
 * benchmarks run on these. Weights are N(0, 0.02) (norms 1), drawn from a
 * seeded RNG, so a (preset, type, seed) triple always gives the same bytes:
 * the test fixtures rely on that.
 *
 * Tensor bytes are made while the file is written (gguf_writer_add_tensor_fn),
 * one tensor in memory at a time, so a 17 GB model needs ~120 MB of RAM.
 * Random tensors draw from one RNG in file order, so the bytes do not depend
 * on how they are produced. The 3-D expert tensors of MoE models use a
 * cheaper approximate normal (the sum of four uniforms of 16 bits, scaled to
 * the same variance), and every tensor of a MoE model with at least 2^24
 * elements copies its rows from a pool of 16384 random rows per (type, row
 * length) (fill_random): qwen3-30b-a3b's 30 billion weights drawn and
 * quantised one by one took ~25 ns each on the shared 2-core machine, hours
 * in all. Speed does not depend on the values; every row is still a
 * quantised random row, and small models (the test fixtures) are drawn
 * weight by weight.
 *
 * MoE (qwen3moe, gpt-oss): the router blk.N.ffn_gate_inp.weight stays F32
 * whatever --type says, as the GGUF converter and llama.cpp's quantizer keep
 * it; the expert tensors get --expert-type (default: --type; gpt-oss:
 * MXFP4, as OpenAI released them and the converter writes them).
 *
 * gpt-oss: attention biases, sinks (N(0, 1): of the order of the random
 * scores, so they change the softmax visibly), random norms around 1, YaRN
 * (factor 32 over 4,096 positions, as gpt-oss-20b/120b), a window of
 * --n-swa (default 128) on the even layers.
 *
 * Weight types whose block does not divide a row (K-quants need rows that
 * are multiples of 256; SmolLM2's width is 576) fall back per tensor, as
 * llama.cpp's quantizer does: Q4_K -> Q4_0, Q5_K and Q6_K -> Q8_0.
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/base.h"
#include "../base/flags.h"
#include "../kern/quant.h"
#include "../model/gguf.h"
#include "../sample/sample.h"
#include "../tok/hfimport.h"
#include "cli.h"

typedef struct gen_shape {
    const char *name;
    const char *arch;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_theta, rms_eps;
    bool tied, rope_freqs; /* rope_freqs: Llama 3.1+ style scaling factors */
    const char *vocab;     /* path relative to the shared folder; "@NAME": a
                              vocabulary the project generates (NAME's
                              tokenizer.json under $KVLOOM_VOCAB_DIR, default
                              build/vocab: o200k_harmony from
                              tools/o200k_harmony.mjs)                       */
    int pooling;           /* {arch}.pooling_type: 0 none (a generator), 1 mean,
                              2 cls, 3 last (model_pooling)                  */
    int n_expert, n_expert_used, n_ff_exp; /* qwen3moe, gpt-oss            */
    int n_swa;             /* gpt-oss: attention.sliding_window              */
    const char *expert_type; /* default type of the expert tensors (NULL: --type) */
} gen_shape;

static const gen_shape presets[] = {
    {"smollm2-135m", "llama", 576, 30, 9, 3, 64, 1536, 49152, 8192, 100000, 1e-5f, true, false,
     "tokenizers/smollm2-135m-instruct/tokenizer.json", 0, 0, 0, 0, 0, NULL},
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 64, 4864, 151936, 32768, 1000000, 1e-6f, true, false,
     "tokenizers/qwen3/tokenizer.json", 0, 0, 0, 0, 0, NULL},
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1000000, 1e-6f, true, false,
     "tokenizers/qwen3/tokenizer.json", 0, 0, 0, 0, 0, NULL},
    {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000, 1e-5f, true, true,
     "tokenizers/llama3/tokenizer.json", 0, 0, 0, 0, 0, NULL},
    {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 64, 5632, 32000, 2048, 10000, 1e-5f, false, false,
     "vocab/ggml-vocab-llama-spm.gguf", 0, 0, 0, 0, 0, NULL},
    /* embedders: Qwen3-Embedding-0.6B (qwen3-0.6b's shape, 151669 embedding
     * rows, last-token pooling) and bge-small-en-v1.5 (bert, CLS pooling) */
    {"qwen3-embedding-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151669, 32768, 1000000, 1e-6f, true, false,
     "tokenizers/qwen3/tokenizer.json", 3, 0, 0, 0, 0, NULL},
    {"bge-small-en-v1.5", "bert", 384, 12, 12, 12, 32, 1536, 30522, 512, 0, 1e-12f, true, false,
     "vocab/ggml-vocab-bert-bge.gguf", 2, 0, 0, 0, 0, NULL},
    /* Qwen3-30B-A3B (and Qwen3-Coder-30B-A3B): n_ff is the config's dense
     * intermediate_size, written as metadata only (every layer is MoE) */
    {"qwen3-30b-a3b", "qwen3moe", 2048, 48, 32, 4, 128, 6144, 151936, 40960, 1000000, 1e-6f, false, false,
     "tokenizers/qwen3/tokenizer.json", 0, 128, 8, 768, 0, NULL},
    /* gpt-oss-20b: 64 query heads of 64 (q_dim 4096 > width 2880), experts
     * in MXFP4; --type BF16 gives the released file's other tensors */
    {"gpt-oss-20b", "gpt-oss", 2880, 24, 64, 8, 64, 2880, 201088, 131072, 150000, 1e-5f, false, false, "@o200k_harmony",
     0, 32, 4, 2880, 128, "MXFP4"},
};

/* The type a tensor of row length n_in gets when `want` does not fit. */
static uint32_t fit_type(uint32_t want, int64_t n_in) {
    const dtype_info *d = dtype_get(want);
    if (n_in % d->blck == 0) return want;
    uint32_t fb = want == DT_Q4_K ? DT_Q4_0 : DT_Q8_0;
    return n_in % dtype_get(fb)->blck == 0 ? fb : DT_F16;
}

typedef struct owned_list {
    void **p;
    int n, cap;
} owned_list;
static void *own(owned_list *l, void *p) {
    if (l->n == l->cap) l->p = xrealloc(l->p, sizeof(void *) * (size_t)(l->cap = l->cap ? 2 * l->cap : 64));
    return l->p[l->n++] = p;
}

/* Set for MoE models: tensors of at least BIG_TENSOR_ELEMS come from row
 * pools (fill_random). */
#define BIG_TENSOR_ELEMS ((int64_t)1 << 24)
static bool pool_big_tensors;

/* A random tensor, made when the writer asks for its bytes. */
typedef struct rand_spec {
    rng *r;
    uint32_t type;
    int64_t n_in, rows; /* rows: n_out * n_expert                          */
    float sd;
    bool fast;          /* the approximate normal (expert tensors)          */
    bool pooled;        /* rows from a row pool (big tensors of MoE models) */
} rand_spec;

/* Sum of four 16-bit uniforms: mean 2, variance 4/12 (in units of 1). */
static inline float fast_normal(uint64_t v) {
    const float u = (float)(v & 0xffff) + (float)((v >> 16) & 0xffff) + (float)((v >> 32) & 0xffff) +
                    (float)(v >> 48);
    return (u * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* Rows [o0, o1) of a tensor from generator r. */
static void fill_rows(const rand_spec *sp, rng *r, char *dst, int64_t o0, int64_t o1) {
    const size_t rb = dtype_row_bytes(sp->type, sp->n_in);
    float *row = xmalloc(sizeof(float) * (size_t)sp->n_in);
    for (int64_t o = o0; o < o1; o++) {
        if (sp->fast)
            for (int64_t i = 0; i < sp->n_in; i++) row[i] = fast_normal(rng_next(r)) * sp->sd;
        else
            for (int64_t i = 0; i < sp->n_in; i++) row[i] = rng_normal(r) * sp->sd;
        quant_quantize_row(sp->type, row, dst + (size_t)o * rb, sp->n_in);
    }
    free(row);
}

/* Big tensors of MoE models (rand_spec.pooled): rows copied from a pool of
 * ROW_POOL random rows per (type, row length), made at first use from the
 * same generator, and picked by it. Every row is still a quantised random
 * row; the file is written at disk speed (qwen3-30b-a3b's 30 billion
 * weights took ~25 ns each to draw and quantise on the shared machine). */
#define ROW_POOL 16384
typedef struct row_pool {
    uint32_t type;
    int64_t n_in;
    char *rows;
} row_pool;
static row_pool row_pools[8];
static int n_row_pools;

static void fill_random(void *ctx, void *dst, uint64_t n_bytes) {
    const rand_spec *sp = ctx;
    const size_t rb = dtype_row_bytes(sp->type, sp->n_in);
    ASSERT(rb * (size_t)sp->rows == n_bytes);
    if (!sp->pooled) {
        fill_rows(sp, sp->r, dst, 0, sp->rows);
        return;
    }
    row_pool *rp = NULL;
    for (int i = 0; i < n_row_pools && !rp; i++)
        if (row_pools[i].type == sp->type && row_pools[i].n_in == sp->n_in) rp = &row_pools[i];
    if (!rp) {
        ASSERT(n_row_pools < (int)ARRAY_LEN(row_pools));
        rp = &row_pools[n_row_pools++];
        *rp = (row_pool){sp->type, sp->n_in, xmalloc(rb * ROW_POOL)};
        fill_rows(sp, sp->r, rp->rows, 0, ROW_POOL);
    }
    for (int64_t o = 0; o < sp->rows; o++)
        memcpy((char *)dst + (size_t)o * rb, rp->rows + (size_t)(rng_next(sp->r) % ROW_POOL) * rb, rb);
}

static void free_row_pools(void) {
    for (int i = 0; i < n_row_pools; i++) free(row_pools[i].rows);
    n_row_pools = 0;
}

/* Adds n_mat matrices (one 2-D tensor, or a 3-D expert tensor when n_mat >
 * 1) of n_out rows of n_in random N(0, sd) values in `type`. */
static void add_random_n(gguf_writer *w, owned_list *ol, rng *r, const char *name, uint32_t type, int64_t n_in,
                         int64_t n_out, int64_t n_mat, float sd) {
    rand_spec *sp = own(ol, xmalloc(sizeof *sp));
    *sp = (rand_spec){r, fit_type(type, n_in), n_in, n_out * n_mat, sd, n_mat > 1,
                      pool_big_tensors && n_in * n_out * n_mat >= BIG_TENSOR_ELEMS};
    int64_t dims[3] = {n_in, n_out, n_mat};
    gguf_writer_add_tensor_fn(w, name, sp->type, n_mat > 1 ? 3 : n_out > 1 ? 2 : 1, dims, fill_random, sp);
}

static void add_random(gguf_writer *w, owned_list *ol, rng *r, const char *name, uint32_t type, int64_t n_in,
                       int64_t n_out, float sd) {
    add_random_n(w, ol, r, name, type, n_in, n_out, 1, sd);
}

static void add_const(gguf_writer *w, owned_list *ol, const char *name, int64_t n, float v) {
    float *d = own(ol, xmalloc(sizeof(float) * (size_t)n));
    for (int64_t i = 0; i < n; i++) d[i] = v;
    gguf_writer_add_tensor(w, name, DT_F32, 1, &n, d);
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Writes tokenizer.* metadata from `vocab_path` (GGUF or tokenizer.json),
 * padding the token list to n_vocab with unused "[PADn]" tokens as the
 * llama.cpp converter does for models whose embedding has spare rows. */
static int add_vocab(gguf_writer *w, const char *vocab_path, int n_vocab, err_t *e) {
    gguf_ctx *src = NULL;
    char tmp[64] = "";
    int r;
    if (ends_with(vocab_path, ".json")) {
        gguf_writer *tw = gguf_writer_new();
        char cfg[4096];
        snprintf(cfg, sizeof cfg, "%.*s/tokenizer_config.json", (int)(strrchr(vocab_path, '/') - vocab_path),
                 vocab_path);
        r = tok_import_hf(vocab_path, access(cfg, R_OK) == 0 ? cfg : NULL, tw, e);
        snprintf(tmp, sizeof tmp, "/tmp/kvloom-vocab-%d.gguf", (int)getpid());
        if (!r) r = gguf_writer_write(tw, tmp, e);
        gguf_writer_free(tw);
        if (r) return r;
        vocab_path = tmp;
    }
    r = gguf_open(vocab_path, &src, e);
    if (tmp[0]) unlink(tmp);
    if (r) return r;
    uint64_t n_tok = 0;
    gguf_vtype et;
    if (!gguf_get_arr(src, "tokenizer.ggml.tokens", &et, &n_tok) || et != GGUF_STRING) {
        gguf_free(src);
        return err_set(e, ERR_FORMAT, "gen: '%s' has no tokenizer.ggml.tokens", vocab_path);
    }
    if (n_tok > (uint64_t)n_vocab) {
        gguf_free(src);
        return err_set(e, ERR_RANGE, "gen: vocabulary has %llu tokens, more than the model's %d rows",
                       (unsigned long long)n_tok, n_vocab);
    }
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        gguf_str k = gguf_key(src, i);
        if (k.len < 10 || memcmp(k.ptr, "tokenizer.", 10) != 0) continue;
        bool padded = (k.len == 21 && memcmp(k.ptr, "tokenizer.ggml.tokens", 21) == 0) ||
                      (k.len == 25 && memcmp(k.ptr, "tokenizer.ggml.token_type", 25) == 0) ||
                      (k.len == 21 && memcmp(k.ptr, "tokenizer.ggml.scores", 21) == 0);
        if (!padded || n_tok == (uint64_t)n_vocab) gguf_writer_copy_kv(w, src, i);
    }
    if (n_tok < (uint64_t)n_vocab) {
        char **strs = xmalloc(sizeof(char *) * (size_t)n_vocab);
        size_t *lens = xmalloc(sizeof(size_t) * (size_t)n_vocab);
        int32_t *types = xmalloc(sizeof(int32_t) * (size_t)n_vocab);
        float *scores = xcalloc((size_t)n_vocab, sizeof(float));
        const int32_t *src_types = gguf_arr_data(src, "tokenizer.ggml.token_type");
        const float *src_scores = gguf_arr_data(src, "tokenizer.ggml.scores");
        gguf_vtype tt = GGUF_INT32, st = GGUF_FLOAT32;
        uint64_t nt = 0, ns = 0;
        if (src_types && (!gguf_get_arr(src, "tokenizer.ggml.token_type", &tt, &nt) || tt != GGUF_INT32 || nt != n_tok))
            src_types = NULL;
        if (src_scores && (!gguf_get_arr(src, "tokenizer.ggml.scores", &st, &ns) || st != GGUF_FLOAT32 || ns != n_tok))
            src_scores = NULL;
        for (int i = 0; i < n_vocab; i++) {
            if ((uint64_t)i < n_tok) {
                gguf_str s = gguf_arr_str(src, "tokenizer.ggml.tokens", (uint64_t)i);
                strs[i] = xstrndup(s.ptr, s.len);
                lens[i] = s.len;
                int32_t ty = 1;
                float sc = 0;
                if (src_types) memcpy(&ty, (const char *)src_types + 4 * (size_t)i, 4);
                if (src_scores) memcpy(&sc, (const char *)src_scores + 4 * (size_t)i, 4);
                types[i] = ty;
                scores[i] = sc;
            } else {
                char buf[32];
                snprintf(buf, sizeof buf, "[PAD%d]", i);
                strs[i] = xstrdup(buf);
                lens[i] = strlen(buf);
                types[i] = 5; /* unused */
                scores[i] = -1e9f;
            }
        }
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)strs, lens, (uint64_t)n_vocab);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n_vocab);
        if (src_scores) gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, (uint64_t)n_vocab);
        for (int i = 0; i < n_vocab; i++) free(strs[i]);
        free(strs);
        free(lens);
        free(types);
        free(scores);
    }
    gguf_free(src);
    return 0;
}

/* A byte-level SentencePiece vocabulary for custom shapes without --vocab:
 * <unk> <s> </s>, the 256 byte tokens, then filler pieces. */
static void add_byte_vocab(gguf_writer *w, int n_vocab) {
    char **strs = xmalloc(sizeof(char *) * (size_t)n_vocab);
    int32_t *types = xmalloc(sizeof(int32_t) * (size_t)n_vocab);
    float *scores = xcalloc((size_t)n_vocab, sizeof(float));
    for (int i = 0; i < n_vocab; i++) {
        char buf[32];
        if (i == 0) snprintf(buf, sizeof buf, "<unk>"), types[i] = 2;
        else if (i == 1) snprintf(buf, sizeof buf, "<s>"), types[i] = 3;
        else if (i == 2) snprintf(buf, sizeof buf, "</s>"), types[i] = 3;
        else if (i < 259) snprintf(buf, sizeof buf, "<0x%02X>", i - 3), types[i] = 6;
        else snprintf(buf, sizeof buf, "\xe2\x96\x81t%d", i), types[i] = 1, scores[i] = -(float)i;
        strs[i] = xstrdup(buf);
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)strs, NULL, (uint64_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, (uint64_t)n_vocab);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    for (int i = 0; i < n_vocab; i++) free(strs[i]);
    free(strs);
    free(types);
    free(scores);
}

/* A norm's or bias's values: base + N(0, sd) (random so that the reference
 * test sees a wrong weight/bias pairing); n1 > 1: a 2-D F32 tensor of n1
 * rows of n0 (per-expert biases). */
static void add_vec_2d(gguf_writer *w, owned_list *ol, rng *r, const char *name, int64_t n0, int64_t n1, float base,
                       float sd) {
    float *d = own(ol, xmalloc(sizeof(float) * (size_t)(n0 * n1)));
    for (int64_t i = 0; i < n0 * n1; i++) d[i] = base + rng_normal(r) * sd;
    int64_t dims[2] = {n0, n1};
    gguf_writer_add_tensor(w, name, DT_F32, n1 > 1 ? 2 : 1, dims, d);
}

static void add_vec(gguf_writer *w, owned_list *ol, rng *r, const char *name, int64_t n, float base, float sd) {
    add_vec_2d(w, ol, r, name, n, 1, base, sd);
}

/* The encoder tensors of a bert model, named as the GGUF converter names
 * them (token_embd is written by the caller). */
static void add_bert(gguf_writer *w, owned_list *ol, rng *r, const gen_shape *s, uint32_t type) {
    const float sd = 0.02f;
    const int D = s->n_embd, F = s->n_ff;
    char name[96];
    add_random(w, ol, r, "position_embd.weight", type, D, s->n_ctx, sd);
    /* F32 whatever --type says, as the GGUF converter writes it: llama.cpp
     * adds row 0 to the F32 activations as a view, which its CPU backend
     * cannot do from F16 (llama-server aborted on the F16 file) */
    add_random(w, ol, r, "token_types.weight", DT_F32, D, 2, sd);
    add_vec(w, ol, r, "token_embd_norm.weight", D, 1.0f, 0.1f);
    add_vec(w, ol, r, "token_embd_norm.bias", D, 0.0f, 0.1f);
    for (int l = 0; l < s->n_layer; l++) {
#define N(x) (snprintf(name, sizeof name, "blk.%d.%s", l, x), name)
        const char *mats[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
        for (int i = 0; i < 4; i++) {
            char wn[64], bn[64];
            snprintf(wn, sizeof wn, "%s.weight", mats[i]);
            snprintf(bn, sizeof bn, "%s.bias", mats[i]);
            add_random(w, ol, r, N(wn), type, D, D, sd);
            add_vec(w, ol, r, N(bn), D, 0.0f, sd);
        }
        add_vec(w, ol, r, N("attn_output_norm.weight"), D, 1.0f, 0.1f);
        add_vec(w, ol, r, N("attn_output_norm.bias"), D, 0.0f, 0.1f);
        add_random(w, ol, r, N("ffn_up.weight"), type, D, F, sd);
        add_vec(w, ol, r, N("ffn_up.bias"), F, 0.0f, sd);
        add_random(w, ol, r, N("ffn_down.weight"), type, F, D, sd);
        add_vec(w, ol, r, N("ffn_down.bias"), D, 0.0f, sd);
        add_vec(w, ol, r, N("layer_output_norm.weight"), D, 1.0f, 0.1f);
        add_vec(w, ol, r, N("layer_output_norm.bias"), D, 0.0f, 0.1f);
#undef N
    }
}

/* Llama 3.1+ rope scaling written as per-frequency divisors, as the GGUF
 * converter does (factor 32, low/high frequency factors 1 and 4, original
 * context 8192 for Llama 3.2). */
static void llama3_rope_freqs(float *out, int n_rot, float base) {
    const double factor = 32, low = 1, high = 4, orig = 8192, pi = 3.14159265358979323846;
    double low_wavelen = orig / low, high_wavelen = orig / high;
    for (int i = 0; i < n_rot / 2; i++) {
        double freq = pow(base, -2.0 * i / n_rot), wavelen = 2 * pi / freq;
        if (wavelen < high_wavelen) out[i] = 1.0f;
        else if (wavelen > low_wavelen) out[i] = (float)factor;
        else {
            double smooth = (orig / wavelen - low) / (high - low);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}

/* gen's options (its flag table's fields). */
typedef struct gen_opts {
    gen_shape s;
    const char *out, *vocab, *type_name, *template_path, *shared;
    uint64_t seed;
    bool have_preset;
} gen_opts;

static int gen_preset(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    gen_opts *o = opts;
    for (size_t k = 0; k < ARRAY_LEN(presets); k++)
        if (strcmp(presets[k].name, v) == 0) {
            o->s = presets[k];
            o->have_preset = true;
            return 0;
        }
    return err_set(e, ERR_INVALID, "unknown preset '%s'", v);
}
static int gen_arch(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    ((gen_opts *)opts)->s.arch = ((gen_opts *)opts)->s.name = v;
    return 0;
}
static int gen_pooling(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    int p = !strcmp(v, "mean") ? 1 : !strcmp(v, "cls") ? 2 : !strcmp(v, "last") ? 3 : -1;
    if (p < 0) return err_set(e, ERR_INVALID, "--pooling must be mean, cls or last");
    ((gen_opts *)opts)->s.pooling = p;
    return 0;
}
static int gen_seed(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end || errno || v[0] == '-')
        return err_set(e, ERR_INVALID, "--seed: expected a non-negative integer, got '%s'", v);
    ((gen_opts *)opts)->seed = x;
    return 0;
}
static int gen_untied(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    ((gen_opts *)opts)->s.tied = false;
    return 0;
}

#define GO(field) offsetof(gen_opts, field)
#define SHAPE(flag, field, help) FLAG_ROW(flag, NULL, "N", help, FLAG_INT, GO(s.field), 0, 1 << 30)
static const flag_row gen_flags[] = {
    FLAG_ROW("--preset", NULL, "NAME", "a preset's shape and vocabulary (below)", FLAG_FN, .set = gen_preset),
    FLAG_ROW("--arch", NULL, "ARCH", "the architecture (below)", FLAG_FN, .set = gen_arch),
    SHAPE("--n-embd", n_embd, "width"),
    SHAPE("--n-layer", n_layer, "layers"),
    SHAPE("--n-head", n_head, "query heads"),
    SHAPE("--n-head-kv", n_head_kv, "KV heads (default: --n-head)"),
    SHAPE("--head-dim", head_dim, "head width (default: --n-embd / --n-head)"),
    SHAPE("--n-ff", n_ff, "feed-forward width"),
    SHAPE("--n-vocab", n_vocab, "vocabulary size"),
    SHAPE("--n-ctx", n_ctx, "training context (default 2048)"),
    FLAG_ROW("--pooling", NULL, "mean|cls|last", "an embedding model's pooling", FLAG_FN, .set = gen_pooling),
    SHAPE("--n-expert", n_expert, "experts (qwen3moe, gpt-oss)"),
    SHAPE("--n-expert-used", n_expert_used, "experts per token"),
    SHAPE("--n-ff-exp", n_ff_exp, "an expert's feed-forward width"),
    SHAPE("--n-swa", n_swa, "gpt-oss: sliding window (default 128)"),
    FLAG_ROW("--expert-type", NULL, "TYPE", "the expert tensors' type (default: --type)", FLAG_STR, GO(s.expert_type)),
    FLAG_ROW("--type", NULL, "TYPE", "the weights' type (default F16)", FLAG_STR, GO(type_name)),
    FLAG_ROW("--seed", NULL, "S", "the random weights' seed (default 1)", FLAG_FN, .set = gen_seed),
    FLAG_ROW("--vocab", NULL, "FILE", "a GGUF with tokenizer.* metadata or a Hugging Face tokenizer.json\n(default: "
             "the preset's; none for custom shapes = a byte vocabulary)", FLAG_STR, GO(vocab)),
    FLAG_ROW("--shared", NULL, "DIR", "the shared data folder (presets' vocabularies)", FLAG_STR, GO(shared)),
    FLAG_ROW("--template", NULL, "FILE.jinja", "the chat template to store", FLAG_STR, GO(template_path)),
    FLAG_ROW("-o", NULL, "OUT.gguf", "the file to write (required)", FLAG_STR, GO(out)),
    FLAG_ROW("--rope-freqs", NULL, NULL, "Llama 3.1+ RoPE scaling factors", FLAG_ON, GO(s.rope_freqs)),
    FLAG_ROW("--tied", NULL, NULL, "output weights tied to the embeddings", FLAG_ON, GO(s.tied)),
    FLAG_ROW("--untied", NULL, NULL, "output weights of their own", FLAG_FN, .set = gen_untied),
};
#undef SHAPE
#undef GO

/* gen's usage (the presets are the table's). */
static void gen_cmd_init(flag_cmd *c, char *tail, size_t cap) {
    size_t k = (size_t)snprintf(tail, cap,
                                "  ARCH: llama qwen2 qwen3 qwen3moe (mixture of experts) gpt-oss (MoE, sinks, sliding "
                                "windows, YaRN)\n        bert (an encoder: bidirectional, LayerNorm, GELU, learned "
                                "positions)\n  every shape flag also overrides a preset's value (reduced test shapes)\n"
                                "  presets:");
    for (size_t i = 0; i < ARRAY_LEN(presets) && k < cap; i++) k += (size_t)snprintf(tail + k, cap - k, " %s", presets[i].name);
    if (k < cap) snprintf(tail + k, cap - k, "\n  TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K MXFP4\n");
    *c = (flag_cmd){"gen",
                    "usage: kvloom gen (--preset NAME | --arch ARCH --n-embd N --n-layer N --n-head N --n-ff N "
                    "--n-vocab N) -o OUT.gguf [options]\n",
                    tail, gen_flags, ARRAY_LEN(gen_flags)};
}

int cli__gen(int argc, char **argv) {
    char shared_buf[PATH_MAX], tail[1024];
    gen_opts o = {.type_name = "F16", .seed = 1, .s = {.n_ctx = 2048, .rope_theta = 10000, .rms_eps = 1e-5f}};
    o.shared = cli__shared_dir(shared_buf, sizeof shared_buf);
    flag_cmd cmd;
    gen_cmd_init(&cmd, tail, sizeof tail);
    err_t e = {0};
    int rc = flags_parse(&cmd, argc, argv, &o, &e);
    if (rc > 0) return 0; /* --help */
    if (rc < 0) {
        fprintf(stderr, "kvloom gen: %s\n", e.msg);
        flags_usage(&cmd, stderr);
        return 2;
    }
    gen_shape s = o.s;
    const char *out = o.out, *vocab = o.vocab, *type_name = o.type_name, *template_path = o.template_path;
    const char *shared = o.shared;
    uint64_t seed = o.seed;
    bool have_preset = o.have_preset;
    int type = dtype_from_name(type_name);
    if (type < 0 || !quant_supported((uint32_t)type)) {
        fprintf(stderr, "kvloom gen: unsupported --type '%s'\n", type_name);
        return 2;
    }
    if (!out || !s.arch || s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_ff <= 0 || s.n_vocab <= 3) {
        flags_usage(&cmd, stderr);
        return 2;
    }
    const bool oss = strcmp(s.arch, "gpt-oss") == 0;
    const bool moe = strcmp(s.arch, "qwen3moe") == 0 || oss;
    pool_big_tensors = moe;
    if (strcmp(s.arch, "llama") && strcmp(s.arch, "qwen2") && strcmp(s.arch, "qwen3") && strcmp(s.arch, "bert") && !moe) {
        fprintf(stderr, "kvloom gen: --arch must be llama, qwen2, qwen3, qwen3moe, gpt-oss or bert\n");
        return 2;
    }
    if (moe && (s.n_expert <= 0 || s.n_expert_used <= 0 || s.n_expert_used > s.n_expert || s.n_ff_exp <= 0)) {
        fprintf(stderr, "kvloom gen: %s needs --n-expert N, --n-expert-used K (1..N) and --n-ff-exp N\n", s.arch);
        return 2;
    }
    if (!moe && (s.n_expert || s.n_expert_used || s.n_ff_exp || s.expert_type)) {
        fprintf(stderr, "kvloom gen: --n-expert, --n-expert-used, --n-ff-exp and --expert-type are for MoE archs\n");
        return 2;
    }
    if (oss && s.n_swa <= 0) s.n_swa = 128;
    if (oss && s.n_swa > s.n_ctx) {
        fprintf(stderr, "kvloom gen: --n-swa %d exceeds the context %d\n", s.n_swa, s.n_ctx);
        return 2;
    }
    if (!oss && s.n_swa) {
        fprintf(stderr, "kvloom gen: --n-swa is for --arch gpt-oss\n");
        return 2;
    }
    int etype = s.expert_type ? dtype_from_name(s.expert_type) : type;
    if (etype < 0 || !quant_supported((uint32_t)etype)) {
        fprintf(stderr, "kvloom gen: unsupported --expert-type '%s'\n", s.expert_type);
        return 2;
    }
    bool bert = strcmp(s.arch, "bert") == 0;
    if (bert) {
        s.n_head_kv = s.n_head;
        s.head_dim = 0;
        if (!have_preset) s.rms_eps = 1e-12f;
        if (!s.pooling) s.pooling = 1;
        if (s.n_ctx <= 0 || s.n_ctx > 65536) {
            fprintf(stderr, "kvloom gen: bert --n-ctx must be in 1..65536 (rows of position_embd)\n");
            return 2;
        }
    }
    if (s.n_head_kv <= 0) s.n_head_kv = s.n_head;
    if (s.head_dim <= 0) s.head_dim = s.n_embd / s.n_head;
    if (s.n_head % s.n_head_kv || s.head_dim % 2) {
        fprintf(stderr, "kvloom gen: n_head must be a multiple of n_head_kv and head_dim even\n");
        return 2;
    }
    if (strcmp(s.arch, "qwen2") == 0 || strcmp(s.arch, "qwen3") == 0 || moe)
        s.rope_theta = have_preset ? s.rope_theta : oss ? 150000 : 1000000;

    gguf_writer *w = gguf_writer_new();
    e = (err_t){0};
    char key[128];
    gguf_writer_set_str(w, "general.architecture", s.arch);
    gguf_writer_set_str(w, "general.name", have_preset ? s.name : "kvloom random test model");
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", s.arch, suffix), key)
    gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)s.n_ctx);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)s.n_embd);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)s.n_layer);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)s.n_ff);
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)s.n_head);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s.n_head_kv);
    if (s.head_dim != s.n_embd / s.n_head) {
        gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)s.head_dim);
        gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)s.head_dim);
    }
    if (bert) {
        gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), s.rms_eps);
        gguf_writer_set_bool(w, KEY("attention.causal"), false);
        gguf_writer_set_u32(w, "tokenizer.ggml.token_type_count", 2);
    } else {
        gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)s.head_dim);
        gguf_writer_set_f32(w, KEY("rope.freq_base"), s.rope_theta);
        gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), s.rms_eps);
    }
    if (s.pooling) gguf_writer_set_u32(w, KEY("pooling_type"), (uint32_t)s.pooling);
    gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)s.n_vocab);
    if (moe) {
        gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)s.n_expert);
        gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)s.n_expert_used);
        gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)s.n_ff_exp);
    }
    if (oss) {
        gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)s.n_swa);
        gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn");
        gguf_writer_set_f32(w, KEY("rope.scaling.factor"), 32.0f);
        gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), 4096);
    }
#undef KEY
    int r = 0;
    if (vocab || s.vocab) {
        char path[4096];
        if (vocab) snprintf(path, sizeof path, "%s", vocab);
        else if (s.vocab[0] == '@') {
            const char *vd = getenv("KVLOOM_VOCAB_DIR");
            snprintf(path, sizeof path, "%s/%s/tokenizer.json", vd && *vd ? vd : "build/vocab", s.vocab + 1);
            if (access(path, R_OK) != 0)
                r = err_set(&e, ERR_NOTFOUND,
                            "gen: %s is missing: make it with `node tools/o200k_harmony.mjs %.*s` (or pass --vocab)",
                            path, (int)(strrchr(path, '/') - path), path);
        } else snprintf(path, sizeof path, "%s/%s", shared, s.vocab);
        if (!r) r = add_vocab(w, path, s.n_vocab, &e);
    } else {
        add_byte_vocab(w, s.n_vocab);
    }
    if (!r && template_path) { /* replaces the vocabulary's chat template */
        size_t n = 0;
        char *t = NULL;
        r = file_read_all(template_path, &t, &n, &e);
        if (!r) gguf_writer_set_str_n(w, "tokenizer.chat_template", t, n);
        free(t);
    }
    if (r) {
        fprintf(stderr, "kvloom gen: %s\n", e.msg);
        gguf_writer_free(w);
        return 1;
    }

    owned_list ol = {0};
    rng rg;
    rng_seed(&rg, seed);
    const float sd = 0.02f;
    int q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
    char name[96];
    add_random(w, &ol, &rg, "token_embd.weight", (uint32_t)type, s.n_embd, s.n_vocab, sd);
    if (bert) {
        add_bert(w, &ol, &rg, &s, (uint32_t)type);
        goto write;
    }
    add_const(w, &ol, "output_norm.weight", s.n_embd, 1.0f);
    if (!s.tied) add_random(w, &ol, &rg, "output.weight", (uint32_t)type, s.n_embd, s.n_vocab, sd);
    if (s.rope_freqs) {
        float *f = own(&ol, xmalloc(sizeof(float) * (size_t)(s.head_dim / 2)));
        llama3_rope_freqs(f, s.head_dim, s.rope_theta);
        int64_t n = s.head_dim / 2;
        gguf_writer_add_tensor(w, "rope_freqs.weight", DT_F32, 1, &n, f);
    }
    for (int l = 0; l < s.n_layer; l++) {
#define N(x) (snprintf(name, sizeof name, "blk.%d.%s", l, x), name)
        if (oss) {
            add_vec(w, &ol, &rg, N("attn_norm.weight"), s.n_embd, 1.0f, 0.1f);
            add_vec(w, &ol, &rg, N("post_attention_norm.weight"), s.n_embd, 1.0f, 0.1f);
        } else {
            add_const(w, &ol, N("attn_norm.weight"), s.n_embd, 1.0f);
        }
        add_random(w, &ol, &rg, N("attn_q.weight"), (uint32_t)type, s.n_embd, q_dim, sd);
        add_random(w, &ol, &rg, N("attn_k.weight"), (uint32_t)type, s.n_embd, kv_dim, sd);
        add_random(w, &ol, &rg, N("attn_v.weight"), (uint32_t)type, s.n_embd, kv_dim, sd);
        add_random(w, &ol, &rg, N("attn_output.weight"), (uint32_t)type, q_dim, s.n_embd, sd);
        if (oss) {
            add_vec(w, &ol, &rg, N("attn_q.bias"), q_dim, 0.0f, sd);
            add_vec(w, &ol, &rg, N("attn_k.bias"), kv_dim, 0.0f, sd);
            add_vec(w, &ol, &rg, N("attn_v.bias"), kv_dim, 0.0f, sd);
            add_vec(w, &ol, &rg, N("attn_output.bias"), s.n_embd, 0.0f, sd);
            add_vec(w, &ol, &rg, N("attn_sinks.weight"), s.n_head, 0.0f, 1.0f);
            add_random(w, &ol, &rg, N("ffn_gate_inp.weight"), DT_F32, s.n_embd, s.n_expert, sd);
            add_vec(w, &ol, &rg, N("ffn_gate_inp.bias"), s.n_expert, 0.0f, sd);
            add_random_n(w, &ol, &rg, N("ffn_gate_exps.weight"), (uint32_t)etype, s.n_embd, s.n_ff_exp, s.n_expert, sd);
            add_vec_2d(w, &ol, &rg, N("ffn_gate_exps.bias"), s.n_ff_exp, s.n_expert, 0.0f, sd);
            add_random_n(w, &ol, &rg, N("ffn_up_exps.weight"), (uint32_t)etype, s.n_embd, s.n_ff_exp, s.n_expert, sd);
            add_vec_2d(w, &ol, &rg, N("ffn_up_exps.bias"), s.n_ff_exp, s.n_expert, 0.0f, sd);
            add_random_n(w, &ol, &rg, N("ffn_down_exps.weight"), (uint32_t)etype, s.n_ff_exp, s.n_embd, s.n_expert, sd);
            add_vec_2d(w, &ol, &rg, N("ffn_down_exps.bias"), s.n_embd, s.n_expert, 0.0f, sd);
            continue;
        }
        if (strcmp(s.arch, "qwen2") == 0) {
            add_random(w, &ol, &rg, N("attn_q.bias"), DT_F32, q_dim, 1, sd);
            add_random(w, &ol, &rg, N("attn_k.bias"), DT_F32, kv_dim, 1, sd);
            add_random(w, &ol, &rg, N("attn_v.bias"), DT_F32, kv_dim, 1, sd);
        }
        if (strcmp(s.arch, "qwen3") == 0 || moe) {
            add_const(w, &ol, N("attn_q_norm.weight"), s.head_dim, 1.0f);
            add_const(w, &ol, N("attn_k_norm.weight"), s.head_dim, 1.0f);
        }
        add_const(w, &ol, N("ffn_norm.weight"), s.n_embd, 1.0f);
        if (moe) {
            add_random(w, &ol, &rg, N("ffn_gate_inp.weight"), DT_F32, s.n_embd, s.n_expert, sd);
            add_random_n(w, &ol, &rg, N("ffn_gate_exps.weight"), (uint32_t)etype, s.n_embd, s.n_ff_exp, s.n_expert, sd);
            add_random_n(w, &ol, &rg, N("ffn_up_exps.weight"), (uint32_t)etype, s.n_embd, s.n_ff_exp, s.n_expert, sd);
            add_random_n(w, &ol, &rg, N("ffn_down_exps.weight"), (uint32_t)etype, s.n_ff_exp, s.n_embd, s.n_expert, sd);
            continue;
        }
        add_random(w, &ol, &rg, N("ffn_gate.weight"), (uint32_t)type, s.n_embd, s.n_ff, sd);
        add_random(w, &ol, &rg, N("ffn_up.weight"), (uint32_t)type, s.n_embd, s.n_ff, sd);
        add_random(w, &ol, &rg, N("ffn_down.weight"), (uint32_t)type, s.n_ff, s.n_embd, sd);
#undef N
    }
write:
    r = gguf_writer_write(w, out, &e);
    if (r) fprintf(stderr, "kvloom gen: %s\n", e.msg);
    else fprintf(stderr, "kvloom gen: wrote %s (%s %s, %d layers, vocab %d)\n", out, s.name, dtype_name((uint32_t)type),
                 s.n_layer, s.n_vocab);
    gguf_writer_free(w);
    free_row_pools();
    for (int i = 0; i < ol.n; i++) free(ol.p[i]);
    free(ol.p);
    return r ? 1 : 0;
}

int cli__quantize(int argc, char **argv) {
    const char *usage = "usage: kvloom quantize IN.gguf OUT.gguf TYPE   (TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K MXFP4)\n"
                        "  converts IN's F32/F16/BF16 weights to TYPE; other tensors are copied unchanged\n";
    if (argc == 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc != 3) {
        fputs(usage, stderr);
        return 2;
    }
    int type = dtype_from_name(argv[2]);
    if (type < 0 || !quant_supported((uint32_t)type)) {
        fprintf(stderr, "kvloom quantize: unsupported type '%s'\n", argv[2]);
        return 2;
    }
    err_t e = {0};
    gguf_ctx *g;
    if (gguf_open(argv[0], &g, &e)) {
        fprintf(stderr, "kvloom quantize: %s\n", e.msg);
        return 1;
    }
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) gguf_writer_copy_kv(w, g, i);
    owned_list ol = {0};
    int r = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g) && !r; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)MIN(t->name.len, 255), t->name.ptr);
        /* matrices and 3-D expert tensors; the MoE router stays as it is (see above) */
        bool is_matrix = (t->n_dims == 2 || t->n_dims == 3) && ends_with(name, ".weight") &&
                         !ends_with(name, "ffn_gate_inp.weight");
        bool from_float = t->type == DT_F32 || t->type == DT_F16 || t->type == DT_BF16;
        if (!is_matrix || !from_float) {
            if (is_matrix && t->type != (uint32_t)type)
                log_warn("quantize: '%s' is %s, copied unchanged (only F32/F16/BF16 are converted)", name,
                         dtype_name(t->type));
            gguf_writer_add_tensor(w, name, t->type, (int)t->n_dims, t->dims, t->data);
            continue;
        }
        int64_t n_in = t->dims[0], rows = t->n_elems / n_in;
        uint32_t tt = fit_type((uint32_t)type, n_in);
        if (tt != (uint32_t)type)
            log_warn("quantize: '%s' rows of %lld do not fit %s blocks: using %s", name, (long long)n_in,
                     dtype_name((uint32_t)type), dtype_name(tt));
        size_t in_rb = dtype_row_bytes(t->type, n_in), out_rb = dtype_row_bytes(tt, n_in);
        char *dst = own(&ol, xmalloc(out_rb * (size_t)rows));
        float *row = xmalloc(sizeof(float) * (size_t)n_in);
        for (int64_t o = 0; o < rows; o++) {
            quant_dequant_row(t->type, (const char *)t->data + (size_t)o * in_rb, row, n_in);
            quant_quantize_row(tt, row, dst + (size_t)o * out_rb, n_in);
        }
        free(row);
        gguf_writer_add_tensor(w, name, tt, (int)t->n_dims, t->dims, dst);
    }
    r = gguf_writer_write(w, argv[1], &e);
    if (r) fprintf(stderr, "kvloom quantize: %s\n", e.msg);
    gguf_writer_free(w);
    gguf_free(g);
    for (int i = 0; i < ol.n; i++) free(ol.p[i]);
    free(ol.p);
    return r ? 1 : 0;
}
