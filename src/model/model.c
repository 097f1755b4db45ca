/*
 * model.c — loads a Llama-family GGUF into a `model`: hyper-parameters from
 * metadata, weight views into the mapping, validation of every tensor's
 * presence, type and shape. The forward pass is in forward.c.
 *
 * Supported: llama (Llama 2/3 incl. rope_freqs, TinyLlama, SmolLM, Mistral
 * without sliding window), qwen2 (QKV bias), qwen3 (per-head Q/K RMSNorm),
 * qwen3moe (qwen3 attention, mixture-of-experts FFN: model/moe.h).
 *
 * qwen3moe metadata and tensors, as the GGUF converter writes them:
 *   qwen3moe.expert_count, .expert_used_count, .expert_feed_forward_length
 *   blk.N.ffn_gate_inp.weight            router, dims {n_embd, n_expert}
 *   blk.N.ffn_{gate,up}_exps.weight      dims {n_embd, n_ff_exp, n_expert}
 *   blk.N.ffn_down_exps.weight           dims {n_ff_exp, n_embd, n_expert}
 * Gating: softmax over all experts, top-k, and the k weights renormalised to
 * sum 1. The converter writes no key for this (Qwen3-MoE's norm_topk_prob is
 * true in every released config and llama.cpp hard-codes it for the
 * architecture), so renormalising is the default; an
 * `{arch}.expert_weights_norm` bool, where present, decides.
 *
 * gpt-oss (gpt-oss-20b/120b) as the GGUF converter writes it:
 *   gpt-oss.attention.sliding_window      window of the windowed layers (128)
 *   gpt-oss.attention.sliding_window_pattern  optional period (default 2:
 *                                         layers 0, 2, 4... windowed)
 *   gpt-oss.rope.scaling.type "yarn", .factor, .original_context_length
 *   gpt-oss.expert_count/_used_count/_feed_forward_length as qwen3moe
 *   blk.N.attn_{q,k,v,output}.bias        attention biases
 *   blk.N.attn_sinks.weight               (n_head) one learned logit per
 *                                         query head, in every softmax's
 *                                         denominator
 *   blk.N.post_attention_norm.weight      the RMSNorm before the MoE FFN
 *                                         (there is no ffn_norm)
 *   blk.N.ffn_gate_inp.bias               router bias (n_expert)
 *   blk.N.ffn_{gate,up}_exps.bias         dims {n_ff_exp, n_expert}
 *   blk.N.ffn_down_exps.bias              dims {n_embd, n_expert}
 * Gating: the top-k of the router logits, softmax over those k; activation
 * the clamped SwiGLU with alpha 1.702 and limit 7 (no metadata key carries
 * them: llama.cpp and the reference implementation fix them for the
 * architecture). RoPE is NEOX-style over the whole head; attention scale
 * 1/sqrt(head_dim).
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kern/quant.h"

static const struct {
    const char *name;
    model_arch arch;
} arch_names[] = {
    {"llama", ARCH_LLAMA},
    {"mistral", ARCH_LLAMA},
    {"qwen2", ARCH_QWEN2},
    {"qwen3", ARCH_QWEN3},
    {"bert", ARCH_BERT},
    {"qwen3moe", ARCH_QWEN3MOE},
    {"gpt-oss", ARCH_GPTOSS},
};

/* gpt-oss's SwiGLU constants (see the top of this file). */
#define GPTOSS_SWIGLU_ALPHA 1.702f
#define GPTOSS_SWIGLU_LIMIT 7.0f

/* Reads "{arch}.{suffix}" as an integer; `required` makes absence an error. */
static int get_int(const gguf_ctx *g, const char *arch, const char *suffix, bool required, int64_t dflt, int64_t lo,
                   int64_t hi, int *out, err_t *e) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    if (gguf_find_key(g, key) < 0) {
        if (required) return err_set(e, ERR_NOTFOUND, "model: missing metadata key '%s'", key);
        v = dflt;
    } else if (!gguf_get_i64(g, key, &v)) {
        return err_set(e, ERR_FORMAT, "model: metadata key '%s' must be an integer", key);
    }
    if (v < lo || v > hi)
        return err_set(e, ERR_RANGE, "model: '%s' = %lld is out of range [%lld, %lld]", key, (long long)v,
                       (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

static int get_float(const gguf_ctx *g, const char *arch, const char *suffix, float dflt, float *out, err_t *e) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_find_key(g, key) < 0) {
        *out = dflt;
        return 0;
    }
    if (!gguf_get_f32(g, key, out) || !isfinite(*out))
        return err_set(e, ERR_FORMAT, "model: metadata key '%s' must be a finite float", key);
    return 0;
}

static int read_config(const gguf_ctx *g, model_config *c, err_t *e) {
    gguf_str a;
    if (!gguf_get_str(g, "general.architecture", &a))
        return err_set(e, ERR_NOTFOUND, "model: missing metadata key 'general.architecture'");
    if (a.len >= sizeof c->arch_name) return err_set(e, ERR_UNSUPPORTED, "model: architecture name too long");
    memcpy(c->arch_name, a.ptr, a.len);
    c->arch_name[a.len] = 0;
    c->arch = ARCH_COUNT;
    for (size_t i = 0; i < ARRAY_LEN(arch_names); i++)
        if (strcmp(c->arch_name, arch_names[i].name) == 0) c->arch = arch_names[i].arch;
    if (c->arch == ARCH_COUNT)
        return err_set(e, ERR_UNSUPPORTED,
                       "model: architecture '%s' is not supported (supported: llama, mistral, qwen2, qwen3, qwen3moe, "
                       "gpt-oss, bert)",
                       c->arch_name);
    const char *an = c->arch_name;
    char key[128];
    int r;
    if ((r = get_int(g, an, "embedding_length", true, 0, 1, 1 << 16, &c->n_embd, e))) return r;
    if ((r = get_int(g, an, "block_count", true, 0, 1, 1024, &c->n_layer, e))) return r;
    if (c->arch == ARCH_QWEN3MOE || c->arch == ARCH_GPTOSS) {
        if ((r = get_int(g, an, "expert_count", true, 0, 1, 4096, &c->n_expert, e))) return r;
        if ((r = get_int(g, an, "expert_used_count", true, 0, 1, 4096, &c->n_expert_used, e))) return r;
        if (c->n_expert_used > c->n_expert)
            return err_set(e, ERR_RANGE, "model: '%s.expert_used_count' = %d exceeds '%s.expert_count' = %d", an,
                           c->n_expert_used, an, c->n_expert);
        if ((r = get_int(g, an, "expert_feed_forward_length", true, 0, 1, 1 << 20, &c->n_ff_exp, e))) return r;
        c->expert_norm = c->arch == ARCH_QWEN3MOE; /* gpt-oss: softmax over the top-k (no renormalising) */
        snprintf(key, sizeof key, "%s.expert_weights_norm", an);
        if (gguf_find_key(g, key) >= 0 && !gguf_get_bool(g, key, &c->expert_norm))
            return err_set(e, ERR_FORMAT, "model: metadata key '%s' must be a bool", key);
    }
    /* MoE models carry the dense width too (unused by qwen3moe's layers) */
    if ((r = get_int(g, an, "feed_forward_length", c->n_expert == 0, c->n_ff_exp, 1, 1 << 20, &c->n_ff, e))) return r;
    if ((r = get_int(g, an, "attention.head_count", true, 0, 1, 1024, &c->n_head, e))) return r;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", an);
    int64_t kvi = gguf_find_key(g, key);
    if (kvi >= 0 && gguf_kv_type(g, kvi) == GGUF_ARRAY)
        return err_set(e, ERR_UNSUPPORTED, "model: per-layer '%s' (an array) is not supported", key);
    if ((r = get_int(g, an, "attention.head_count_kv", false, c->n_head, 1, c->n_head, &c->n_head_kv, e))) return r;
    if (c->n_head % c->n_head_kv)
        return err_set(e, ERR_FORMAT, "model: head_count %d is not a multiple of head_count_kv %d", c->n_head,
                       c->n_head_kv);
    if ((r = get_int(g, an, "context_length", false, 2048, 1, 1 << 24, &c->n_ctx_train, e))) return r;
    int dflt_hd = c->n_embd / c->n_head;
    if ((r = get_int(g, an, "attention.key_length", false, dflt_hd, 1, 4096, &c->head_dim, e))) return r;
    int vlen;
    if ((r = get_int(g, an, "attention.value_length", false, c->head_dim, 1, 4096, &vlen, e))) return r;
    if (vlen != c->head_dim)
        return err_set(e, ERR_UNSUPPORTED, "model: value_length %d != key_length %d is not supported", vlen,
                       c->head_dim);
    if ((r = get_int(g, an, "rope.dimension_count", false, c->head_dim, 2, c->head_dim, &c->n_rot, e))) return r;
    if (c->n_rot % 2) return err_set(e, ERR_FORMAT, "model: rope.dimension_count %d must be even", c->n_rot);
    if ((r = get_float(g, an, "attention.layer_norm_rms_epsilon", 1e-5f, &c->rms_eps, e))) return r;
    if ((r = get_float(g, an, "rope.freq_base", 10000.0f, &c->rope_theta, e))) return r;
    if (!(c->rms_eps > 0) || !(c->rope_theta > 0))
        return err_set(e, ERR_RANGE, "model: rms epsilon and rope.freq_base must be positive");
    c->rope = c->arch == ARCH_LLAMA ? ROPE_NORM : ROPE_NEOX;
    c->rope_scale = 1.0f;
    if (c->arch == ARCH_GPTOSS) {
        /* every layer windowed or not; the window is checked against the
         * context the model was trained for */
        if ((r = get_int(g, an, "attention.sliding_window", true, 0, 1, c->n_ctx_train, &c->n_swa, e))) return r;
        if ((r = get_int(g, an, "attention.sliding_window_pattern", false, 2, 1, 1 << 16, &c->swa_period, e)))
            return r;
        float fb_swa;
        if ((r = get_float(g, an, "rope.freq_base_swa", c->rope_theta, &fb_swa, e))) return r;
        if (fb_swa != c->rope_theta)
            return err_set(e, ERR_UNSUPPORTED, "model: '%s.rope.freq_base_swa' %g differs from rope.freq_base %g (not supported)",
                           an, (double)fb_swa, (double)c->rope_theta);
    }
    snprintf(key, sizeof key, "%s.rope.scaling.type", an);
    gguf_str st;
    if (gguf_get_str(g, key, &st) && !(st.len == 4 && memcmp(st.ptr, "none", 4) == 0)) {
        if (st.len == 6 && memcmp(st.ptr, "linear", 6) == 0) {
            if ((r = get_float(g, an, "rope.scaling.factor", 1.0f, &c->rope_scale, e))) return r;
            if (!(c->rope_scale > 0)) return err_set(e, ERR_RANGE, "model: rope.scaling.factor must be positive");
        } else if (st.len == 4 && memcmp(st.ptr, "yarn", 4) == 0) {
            c->rope_yarn = true;
            c->yarn_truncate = c->arch != ARCH_GPTOSS;
            if ((r = get_float(g, an, "rope.scaling.factor", 1.0f, &c->yarn_factor, e))) return r;
            if (!(c->yarn_factor >= 1 && c->yarn_factor <= 1024))
                return err_set(e, ERR_RANGE, "model: '%s.rope.scaling.factor' %g must be in [1, 1024] for yarn", an,
                               (double)c->yarn_factor);
            if ((r = get_int(g, an, "rope.scaling.original_context_length", true, 0, 1, 1 << 24, &c->yarn_orig_ctx, e)))
                return r;
            if ((r = get_float(g, an, "rope.scaling.yarn_beta_fast", 32.0f, &c->yarn_beta_fast, e))) return r;
            if ((r = get_float(g, an, "rope.scaling.yarn_beta_slow", 1.0f, &c->yarn_beta_slow, e))) return r;
            if ((r = get_float(g, an, "rope.scaling.yarn_attn_factor", 1.0f, &c->yarn_attn_factor, e))) return r;
            if (!(c->yarn_beta_fast > 0) || !(c->yarn_beta_slow > 0) || !(c->yarn_attn_factor > 0))
                return err_set(e, ERR_RANGE, "model: '%s.rope.scaling.yarn_*' values must be positive", an);
        } else {
            return err_set(e, ERR_UNSUPPORTED, "model: rope scaling type '%.*s' is not supported (linear, yarn)",
                           (int)MIN(st.len, 32), st.ptr);
        }
    }
    c->has_qkv_bias = c->arch == ARCH_QWEN2 || c->arch == ARCH_GPTOSS;
    c->has_sinks = c->arch == ARCH_GPTOSS;
    c->has_qk_norm = c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3MOE;
    c->encoder = c->arch == ARCH_BERT;
    int pool;
    if ((r = get_int(g, an, "pooling_type", false, c->encoder ? MODEL_POOL_MEAN : MODEL_POOL_NONE, 0, 4, &pool, e)))
        return r;
    if (pool == 4) /* rank: a reranker's classifier head, not an embedding */
        return err_set(e, ERR_UNSUPPORTED, "model: '%s.pooling_type' 4 (rank) is not supported", an);
    if (c->encoder && pool == MODEL_POOL_NONE)
        return err_set(e, ERR_UNSUPPORTED, "model: '%s.pooling_type' 0 (none): an encoder needs mean, cls or last", an);
    c->pooling = (model_pooling)pool;
    return 0;
}

/* Looks up a tensor and checks its type and shape (dims[0] = n_in). */
static int find_tensor(const gguf_ctx *g, const char *name, int64_t d0, int64_t d1, bool optional,
                       const gguf_tensor **out, err_t *e) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    *out = t;
    if (!t) return optional ? 0 : err_set(e, ERR_NOTFOUND, "model: missing tensor '%s'", name);
    int64_t want_dims = d1 > 0 ? 2 : 1;
    bool shape_ok = t->dims[0] == d0 && (d1 > 0 ? t->dims[1] == d1 : true) && t->n_elems == d0 * (d1 > 0 ? d1 : 1);
    if (!shape_ok)
        return err_set(e, ERR_FORMAT, "model: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld] (%lld dims)",
                       name, (long long)t->dims[0], (long long)t->dims[1], (long long)d0, (long long)(d1 > 0 ? d1 : 1),
                       (long long)want_dims);
    if (!quant_supported(t->type))
        return err_set(e, ERR_UNSUPPORTED, "model: tensor '%s' has type %s, which is not supported", name,
                       dtype_name(t->type));
    return 0;
}

/* A kern_mat of n_out rows of n_in at the start of t's data. */
static kern_mat mat_view(const gguf_tensor *t, int64_t n_in, int64_t n_out) {
    return (kern_mat){.type = t->type, .n_in = n_in, .n_out = n_out, .row_bytes = dtype_row_bytes(t->type, n_in),
                      .data = t->data};
}

static int load_mat(const gguf_ctx *g, const char *name, int64_t n_in, int64_t n_out, kern_mat *m, err_t *e) {
    const gguf_tensor *t;
    int r = find_tensor(g, name, n_in, n_out, false, &t, e);
    if (r) return r;
    if (!dtype_get(t->type)->supported) /* converts (Q8_K) but has no dot product */
        return err_set(e, ERR_UNSUPPORTED, "model: matrix '%s' has type %s, which kvloom cannot multiply", name,
                       dtype_name(t->type));
    *m = mat_view(t, n_in, n_out);
    return 0;
}

/* A 3-D expert tensor, dims {n_in, n_out, n_expert}: *m views expert 0 and
 * *stride is the bytes from one expert's matrix to the next. */
static int load_experts(const gguf_ctx *g, const char *name, int64_t n_in, int64_t n_out, int64_t n_expert,
                        kern_mat *m, size_t *stride, err_t *e) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return err_set(e, ERR_NOTFOUND, "model: missing tensor '%s'", name);
    if (t->n_dims != 3 || t->dims[0] != n_in || t->dims[1] != n_out || t->dims[2] != n_expert)
        return err_set(e, ERR_FORMAT,
                       "model: expert tensor '%s' has shape [%lld, %lld, %lld] (%u dims), expected [%lld, %lld, %lld]",
                       name, (long long)t->dims[0], (long long)t->dims[1], (long long)t->dims[2], t->n_dims,
                       (long long)n_in, (long long)n_out, (long long)n_expert);
    if (!dtype_get(t->type)->supported || kern_act_row_bytes(t->type, n_in) == 0)
        return err_set(e, ERR_UNSUPPORTED, "model: expert tensor '%s' has type %s, which kvloom cannot multiply", name,
                       dtype_name(t->type));
    *m = mat_view(t, n_in, n_out);
    *stride = m->row_bytes * (size_t)n_out;
    return 0;
}

/* Vectors (norms, biases) are converted to f32 into the owned arena. */
typedef struct vec_arena {
    float *buf;
    size_t used, cap;
} vec_arena;

/* A vector of d0 values, or (d1 > 0) d1 rows of d0 (per-expert biases). */
static int load_vec_2d(const gguf_ctx *g, const char *name, int64_t d0, int64_t d1, bool optional, vec_arena *a,
                       const float **out, err_t *e) {
    const gguf_tensor *t;
    *out = NULL;
    int r = find_tensor(g, name, d0, d1, optional, &t, e);
    if (r || !t) return r;
    const int64_t n = d0 * (d1 > 0 ? d1 : 1);
    ASSERT(a->used + (size_t)n <= a->cap);
    float *dst = a->buf + a->used;
    a->used += (size_t)n;
    if (t->type == DT_F32 || t->type == DT_F16 || t->type == DT_BF16) {
        quant_dequant_row(t->type, t->data, dst, n);
    } else { /* a block type: row by row (a row is a whole number of blocks) */
        if (d0 % dtype_get(t->type)->blck)
            return err_set(e, ERR_FORMAT, "model: tensor '%s' rows of %lld do not fill %s blocks", name,
                           (long long)d0, dtype_name(t->type));
        for (int64_t i = 0; i < n / d0; i++)
            quant_dequant_row(t->type, (const char *)t->data + (size_t)i * dtype_row_bytes(t->type, d0), dst + i * d0, d0);
    }
    *out = dst;
    return 0;
}

static int load_vec(const gguf_ctx *g, const char *name, int64_t n, bool optional, vec_arena *a, const float **out,
                    err_t *e) {
    return load_vec_2d(g, name, n, 0, optional, a, out, e);
}

int model_load(const char *path, model **out, err_t *e) {
    gguf_ctx *g;
    *out = NULL;
    int r = gguf_open(path, &g, e);
    if (r) return r;
    r = model_load_gguf(g, out, e);
    if (r) gguf_free(g);
    return r;
}

int model_load_gguf(gguf_ctx *g, model **out, err_t *e) {
    *out = NULL;
    model *m = xcalloc(1, sizeof *m);
    model_config *c = &m->cfg;
    char name[128];
    int r = read_config(g, c, e);
    if (r) goto fail;
    const gguf_tensor *te;
    te = gguf_find_tensor(g, "token_embd.weight");
    if (!te) {
        r = err_set(e, ERR_NOTFOUND, "model: missing tensor 'token_embd.weight'");
        goto fail;
    }
    if (te->n_dims != 2 || te->dims[1] < 1 || te->dims[1] > (1 << 24)) {
        r = err_set(e, ERR_FORMAT, "model: tensor 'token_embd.weight' must be 2-D with a sane vocabulary size");
        goto fail;
    }
    c->n_vocab = (int)te->dims[1];
    if (c->encoder) {
        if ((r = model__bert_load(g, m, e))) goto fail;
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) m->weight_bytes += gguf_tensor_at(g, i)->n_bytes;
        m->gguf = g;
        *out = m;
        return 0;
    }
    int hd = c->head_dim, q_dim = c->n_head * hd, kv_dim = c->n_head_kv * hd;
    if ((r = load_mat(g, "token_embd.weight", c->n_embd, c->n_vocab, &m->tok_embd, e))) goto fail;

    /* size of the f32 arena for vectors */
    size_t per_layer = 2 * (size_t)c->n_embd + (c->has_qkv_bias ? (size_t)q_dim + 2 * (size_t)kv_dim : 0) +
                       (c->has_qk_norm ? 2 * (size_t)hd : 0);
    if (c->arch == ARCH_GPTOSS) /* bo, sinks, router bias, expert biases */
        per_layer += (size_t)c->n_embd + (size_t)c->n_head + (size_t)c->n_expert +
                     (size_t)c->n_expert * (2 * (size_t)c->n_ff_exp + (size_t)c->n_embd);
    vec_arena a = {0};
    a.cap = (size_t)c->n_embd + (size_t)c->n_layer * per_layer + (size_t)c->n_rot / 2;
    /* Every one of these values comes from a tensor of the file (rope_freqs,
     * at most n_rot / 2, aside), stored in one bit or more: metadata that
     * asks for more (a crafted file: 1,024 layers of 1,024 heads of 4,096
     * with q/k/v biases is ~50 GB) is refused here, not allocated. */
    if (a.cap > 8 * gguf_file_size(g) + (size_t)c->n_rot) {
        r = err_set(e, ERR_FORMAT,
                    "model: the metadata (block_count %d, head_count %d, head_count_kv %d, key_length %d) asks "
                    "for %zu norm and bias values, more than the file's %zu bytes hold",
                    c->n_layer, c->n_head, c->n_head_kv, hd, a.cap, gguf_file_size(g));
        goto fail;
    }
    a.buf = xmalloc(a.cap * sizeof(float));
    m->f32_owned = a.buf;

    if ((r = load_vec(g, "output_norm.weight", c->n_embd, false, &a, &m->out_norm, e))) goto fail;
    if (gguf_find_tensor(g, "output.weight")) {
        if ((r = load_mat(g, "output.weight", c->n_embd, c->n_vocab, &m->output, e))) goto fail;
    } else {
        c->tied_output = true;
        m->output = m->tok_embd;
    }
    if ((r = load_vec(g, "rope_freqs.weight", c->n_rot / 2, true, &a, &m->rope_freqs, e))) goto fail;
    c->has_rope_freqs = m->rope_freqs != NULL;

    m->layers = xcalloc((size_t)c->n_layer, sizeof(model_layer));
    for (int l = 0; l < c->n_layer; l++) {
        model_layer *L = &m->layers[l];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", l, s), name)
        if ((r = load_vec(g, NAME("attn_norm.weight"), c->n_embd, false, &a, &L->attn_norm, e))) goto fail;
        if ((r = load_mat(g, NAME("attn_q.weight"), c->n_embd, q_dim, &L->wq, e))) goto fail;
        if ((r = load_mat(g, NAME("attn_k.weight"), c->n_embd, kv_dim, &L->wk, e))) goto fail;
        if ((r = load_mat(g, NAME("attn_v.weight"), c->n_embd, kv_dim, &L->wv, e))) goto fail;
        if ((r = load_mat(g, NAME("attn_output.weight"), q_dim, c->n_embd, &L->wo, e))) goto fail;
        if (c->has_qkv_bias) {
            if ((r = load_vec(g, NAME("attn_q.bias"), q_dim, false, &a, &L->bq, e))) goto fail;
            if ((r = load_vec(g, NAME("attn_k.bias"), kv_dim, false, &a, &L->bk, e))) goto fail;
            if ((r = load_vec(g, NAME("attn_v.bias"), kv_dim, false, &a, &L->bv, e))) goto fail;
        }
        if (c->has_qk_norm) {
            if ((r = load_vec(g, NAME("attn_q_norm.weight"), hd, false, &a, &L->q_norm, e))) goto fail;
            if ((r = load_vec(g, NAME("attn_k_norm.weight"), hd, false, &a, &L->k_norm, e))) goto fail;
        }
        const bool oss = c->arch == ARCH_GPTOSS;
        if (oss) {
            if ((r = load_vec(g, NAME("attn_output.bias"), c->n_embd, false, &a, &L->bo, e))) goto fail;
            if ((r = load_vec(g, NAME("attn_sinks.weight"), c->n_head, false, &a, &L->sinks, e))) goto fail;
            L->window = l % c->swa_period < c->swa_period - 1 ? c->n_swa : 0;
        }
        if ((r = load_vec(g, oss ? NAME("post_attention_norm.weight") : NAME("ffn_norm.weight"), c->n_embd, false, &a,
                          &L->ffn_norm, e)))
            goto fail;
        if (c->n_expert > 0) {
            moe_ffn *f = &L->moe;
            *f = (moe_ffn){.n_expert = c->n_expert, .n_used = c->n_expert_used, .n_embd = c->n_embd,
                           .n_ff = c->n_ff_exp, .gating = c->expert_norm ? MOE_GATE_SOFTMAX_NORM : MOE_GATE_SOFTMAX,
                           .act = MOE_ACT_SILU};
            if (oss) {
                f->gating = MOE_GATE_TOPK_SOFTMAX;
                f->act = MOE_ACT_SWIGLU_OAI;
                f->alpha = GPTOSS_SWIGLU_ALPHA;
                f->limit = GPTOSS_SWIGLU_LIMIT;
                if ((r = load_vec(g, NAME("ffn_gate_inp.bias"), c->n_expert, false, &a, &f->router_bias, e))) goto fail;
                if ((r = load_vec_2d(g, NAME("ffn_gate_exps.bias"), c->n_ff_exp, c->n_expert, false, &a, &f->gate_bias, e)))
                    goto fail;
                if ((r = load_vec_2d(g, NAME("ffn_up_exps.bias"), c->n_ff_exp, c->n_expert, false, &a, &f->up_bias, e)))
                    goto fail;
                if ((r = load_vec_2d(g, NAME("ffn_down_exps.bias"), c->n_embd, c->n_expert, false, &a, &f->down_bias, e)))
                    goto fail;
            }
            if ((r = load_mat(g, NAME("ffn_gate_inp.weight"), c->n_embd, c->n_expert, &f->router, e))) goto fail;
            if ((r = load_experts(g, NAME("ffn_gate_exps.weight"), c->n_embd, c->n_ff_exp, c->n_expert, &f->gate,
                                  &f->gate_stride, e)))
                goto fail;
            if ((r = load_experts(g, NAME("ffn_up_exps.weight"), c->n_embd, c->n_ff_exp, c->n_expert, &f->up,
                                  &f->up_stride, e)))
                goto fail;
            if ((r = load_experts(g, NAME("ffn_down_exps.weight"), c->n_ff_exp, c->n_embd, c->n_expert, &f->down,
                                  &f->down_stride, e)))
                goto fail;
            continue;
        }
        if ((r = load_mat(g, NAME("ffn_gate.weight"), c->n_embd, c->n_ff, &L->w_gate, e))) goto fail;
        if ((r = load_mat(g, NAME("ffn_up.weight"), c->n_embd, c->n_ff, &L->w_up, e))) goto fail;
        if ((r = load_mat(g, NAME("ffn_down.weight"), c->n_ff, c->n_embd, &L->w_down, e))) goto fail;
#undef NAME
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) m->weight_bytes += gguf_tensor_at(g, i)->n_bytes;
    m->gguf = g;
    *out = m;
    return 0;
fail:
    model__bert_free(m->bert);
    free(m->f32_owned);
    free(m->layers);
    free(m);
    return r;
}

void model_free(model *m) {
    if (!m) return;
    gguf_free(m->gguf);
    model__bert_free(m->bert);
    free(m->f32_owned);
    free(m->layers);
    free(m);
}

static size_t mat_bytes(const kern_mat *w) { return (size_t)w->n_out * w->row_bytes; }

size_t model_token_bytes(const model *m) {
    const model_config *c = &m->cfg;
    if (c->encoder) return m->weight_bytes; /* bert (bert.c): a pass reads every weight; no m->layers */
    size_t b = mat_bytes(&m->output) + m->tok_embd.row_bytes;
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        b += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo);
        if (c->n_expert > 0) /* at batch 1 the n_used selections are distinct experts */
            b += mat_bytes(&L->moe.router) +
                 (size_t)L->moe.n_used * (L->moe.gate_stride + L->moe.up_stride + L->moe.down_stride);
        else
            b += mat_bytes(&L->w_gate) + mat_bytes(&L->w_up) + mat_bytes(&L->w_down);
    }
    return b;
}

/* MemAvailable from /proc/meminfo (Linux), else free pages; 0 if unknown.
 * $KVLOOM_MEM_AVAILABLE (bytes) overrides it, so tests can check the
 * over-memory note and that serving goes on without a machine that small. */
size_t model_mem_available(void) {
    const char *ov = getenv("KVLOOM_MEM_AVAILABLE");
    if (ov && *ov) return (size_t)strtoull(ov, NULL, 10);
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return (size_t)kb * 1024;
            }
        fclose(f);
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
}

bool model_mem_note(const model *m, char *buf, size_t n) {
    const size_t avail = model_mem_available();
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    const double total = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
    const double w = (double)m->weight_bytes, tok = (double)model_token_bytes(m);
    const bool over = avail > 0 && w > (double)avail;
    int k = snprintf(buf, n, "weights %.2f GB memory-mapped, %.2f GB of %.2f GB RAM available", w / 1e9,
                     (double)avail / 1e9, total / 1e9);
    if (k < 0 || (size_t)k >= n) return over;
    if (m->cfg.n_expert > 0)
        k += snprintf(buf + k, n - (size_t)k, "; a decoded token reads %.2f GB (%d of %d experts per layer)",
                      tok / 1e9, m->cfg.n_expert_used, m->cfg.n_expert);
    if (over && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k,
                 "; the weights do not fit in memory: they are read from the file as used, so decode runs at "
                 "the disk's speed for the part the page cache cannot hold");
    return over;
}

/* q8_0's group along the head dimension (model.h). */
static int kv_group(const model_config *c) { return c->head_dim % 32 == 0 ? 32 : c->head_dim; }

/* uint16_t units of one layer of one block, K (= V). */
static size_t kv_layer_elems(const model_config *c, int block_tokens, model_kv_type t) {
    const size_t row = (size_t)c->n_head_kv * (size_t)c->head_dim, B = (size_t)block_tokens;
    if (t == MODEL_KV_F16) return B * row;
    return (B * row + 1) / 2 + B * (row / (size_t)kv_group(c)); /* int8 values, then f16 scales */
}

size_t model_kv_block_bytes_type(const model *m, int block_tokens, model_kv_type t) {
    return 2 * sizeof(uint16_t) * (size_t)m->cfg.n_layer * kv_layer_elems(&m->cfg, block_tokens, t);
}

size_t model_kv_block_bytes(const model *m, int block_tokens) {
    return model_kv_block_bytes_type(m, block_tokens, MODEL_KV_F16);
}

const char *model_kv_type_name(model_kv_type t) { return t == MODEL_KV_Q8_0 ? "q8_0" : "f16"; }

bool model_kv_type_parse(const char *s, model_kv_type *t) {
    if (!strcmp(s, "f16")) *t = MODEL_KV_F16;
    else if (!strcmp(s, "q8_0")) *t = MODEL_KV_Q8_0;
    else return false;
    return true;
}

model_kv *model_kv_new_type(const model *m, int n_blocks, int block_tokens, model_kv_type t) {
    const model_config *c = &m->cfg;
    ASSERT(n_blocks > 0 && block_tokens > 0);
    model_kv *kv = xcalloc(1, sizeof *kv);
    kv->n_blocks = n_blocks;
    kv->block_tokens = block_tokens;
    kv->type = t;
    kv->group = t == MODEL_KV_Q8_0 ? kv_group(c) : 0;
    kv->layer_elems = kv_layer_elems(c, block_tokens, t);
    kv->block_elems = (size_t)c->n_layer * kv->layer_elems;
    kv->k = xaligned_alloc(kv->block_elems * (size_t)n_blocks * sizeof(uint16_t));
    kv->v = xaligned_alloc(kv->block_elems * (size_t)n_blocks * sizeof(uint16_t));
    return kv;
}

model_kv *model_kv_new(const model *m, int n_blocks, int block_tokens) {
    return model_kv_new_type(m, n_blocks, block_tokens, MODEL_KV_F16);
}

void model_kv_free(model_kv *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv);
}

/* ---- for the other architecture files (model_internal.h) ---- */

int model__load_mat(const gguf_ctx *g, const char *name, int64_t n_in, int64_t n_out, kern_mat *m, err_t *e) {
    return load_mat(g, name, n_in, n_out, m, e);
}

int model__load_vec(const gguf_ctx *g, const char *name, int64_t n, float *dst, err_t *e) {
    const gguf_tensor *t;
    int r = find_tensor(g, name, n, 0, false, &t, e);
    if (r) return r;
    quant_dequant_row(t->type, t->data, dst, n);
    return 0;
}
