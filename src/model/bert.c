/*
 * bert.c — the BERT encoder family (bge, all-MiniLM, ...): weights and
 * model_encode, a bidirectional pass over whole sequences with no KV cache.
 *
 * Kept apart from forward.c on purpose: the decoder pass is paged, causal
 * and RMSNorm/SwiGLU; this one is post-norm with LayerNorm and GELU, learned
 * absolute positions and token types, and every token sees its whole
 * sequence. Per sequence of n tokens (all token type 0):
 *
 *   x = LN(tok_embd[id] + position_embd[p] + token_types[0])    (n, n_embd)
 *   for each layer:
 *     q,k,v = x Wq + bq, x Wk + bk, x Wv + bv
 *     att   = softmax(q k^T / sqrt(hd)) v     per head, over all n tokens
 *     x     = LN1(x + att Wo + bo)
 *     x     = LN2(x + gelu(x Wup + bup) Wdown + bdown)
 *   out = pool(x)   (mean, first token or last token; not normalised)
 *
 * GELU is the exact one (0.5 x (1 + erf(x / sqrt 2))), which is what BERT's
 * "gelu" activation means. Tensor and key names are the GGUF converter's:
 * token_embd, position_embd, token_types, token_embd_norm,
 * blk.N.{attn_q,attn_k,attn_v,attn_output,attn_output_norm,ffn_up,ffn_down,
 * layer_output_norm}.{weight,bias}; bert.attention.layer_norm_epsilon.
 *
 * No allocation in model_encode: model_enc_state holds every buffer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kern/quant.h"
#include "model_internal.h"

typedef struct bert_layer {
    kern_mat wq, wk, wv, wo, w_up, w_down;
    const float *bq, *bk, *bv, *bo;    /* (n_embd)                     */
    const float *ln1_w, *ln1_b;        /* attn_output_norm (n_embd)    */
    const float *b_up;                 /* (n_ff)                       */
    const float *b_down;               /* (n_embd)                     */
    const float *ln2_w, *ln2_b;        /* layer_output_norm (n_embd)   */
} bert_layer;

struct model_bert {
    kern_mat pos_embd;            /* (n_ctx_train rows of n_embd)   */
    kern_mat type_embd;           /* (n_token_types rows of n_embd) */
    const float *embd_ln_w, *embd_ln_b;
    bert_layer *layers;           /* (n_layer)                      */
    float *f32;                   /* the vectors above (owned)      */
};

void model__bert_free(struct model_bert *b) {
    if (!b) return;
    free(b->layers);
    free(b->f32);
    free(b);
}

int model__bert_load(const gguf_ctx *g, model *m, err_t *e) {
    model_config *c = &m->cfg;
    const int D = c->n_embd, F = c->n_ff;
    if (c->n_head_kv != c->n_head)
        return err_set(e, ERR_FORMAT, "model: bert needs head_count_kv == head_count (got %d, %d)", c->n_head_kv,
                       c->n_head);
    if (c->head_dim * c->n_head != D)
        return err_set(e, ERR_FORMAT, "model: bert needs head_count x key_length == embedding_length");
    c->norm_eps = 1e-12f;
    if (gguf_find_key(g, "bert.attention.layer_norm_epsilon") >= 0 &&
        (!gguf_get_f32(g, "bert.attention.layer_norm_epsilon", &c->norm_eps) || !(c->norm_eps > 0)))
        return err_set(e, ERR_FORMAT, "model: 'bert.attention.layer_norm_epsilon' must be a positive float");
    const gguf_tensor *tt = gguf_find_tensor(g, "token_types.weight");
    if (!tt) return err_set(e, ERR_NOTFOUND, "model: missing tensor 'token_types.weight'");
    if (tt->n_dims != 2 || tt->dims[1] < 1 || tt->dims[1] > 16)
        return err_set(e, ERR_FORMAT, "model: tensor 'token_types.weight' must be 2-D with 1..16 types");
    c->n_token_types = (int)tt->dims[1];
    c->rope = ROPE_NORM; /* unused: positions are learned */

    struct model_bert *b = xcalloc(1, sizeof *b);
    m->bert = b;
    size_t per_layer = 9 * (size_t)D + (size_t)F; /* 4 biases, 2 LayerNorms, ffn biases */
    b->f32 = xmalloc((2 * (size_t)D + (size_t)c->n_layer * per_layer) * sizeof(float));
    b->layers = xcalloc((size_t)c->n_layer, sizeof *b->layers);
    float *v = b->f32;
    int r;
#define VEC(dst, name, n)                                                                                          \
    do {                                                                                                           \
        if ((r = model__load_vec(g, name, n, v, e))) return r;                                                     \
        dst = v;                                                                                                   \
        v += (n);                                                                                                  \
    } while (0)
    if ((r = model__load_mat(g, "token_embd.weight", D, c->n_vocab, &m->tok_embd, e))) return r;
    if ((r = model__load_mat(g, "token_types.weight", D, c->n_token_types, &b->type_embd, e))) return r;
    const gguf_tensor *pe = gguf_find_tensor(g, "position_embd.weight");
    if (!pe) return err_set(e, ERR_NOTFOUND, "model: missing tensor 'position_embd.weight'");
    if (pe->n_dims != 2 || pe->dims[1] < c->n_ctx_train)
        return err_set(e, ERR_FORMAT, "model: tensor 'position_embd.weight' must have context_length (%d) rows",
                       c->n_ctx_train);
    if ((r = model__load_mat(g, "position_embd.weight", D, pe->dims[1], &b->pos_embd, e))) return r;
    VEC(b->embd_ln_w, "token_embd_norm.weight", D);
    VEC(b->embd_ln_b, "token_embd_norm.bias", D);
    char name[128];
    for (int l = 0; l < c->n_layer; l++) {
        bert_layer *L = &b->layers[l];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", l, s), name)
        if ((r = model__load_mat(g, NAME("attn_q.weight"), D, D, &L->wq, e))) return r;
        if ((r = model__load_mat(g, NAME("attn_k.weight"), D, D, &L->wk, e))) return r;
        if ((r = model__load_mat(g, NAME("attn_v.weight"), D, D, &L->wv, e))) return r;
        if ((r = model__load_mat(g, NAME("attn_output.weight"), D, D, &L->wo, e))) return r;
        if ((r = model__load_mat(g, NAME("ffn_up.weight"), D, F, &L->w_up, e))) return r;
        if ((r = model__load_mat(g, NAME("ffn_down.weight"), F, D, &L->w_down, e))) return r;
        VEC(L->bq, NAME("attn_q.bias"), D);
        VEC(L->bk, NAME("attn_k.bias"), D);
        VEC(L->bv, NAME("attn_v.bias"), D);
        VEC(L->bo, NAME("attn_output.bias"), D);
        VEC(L->ln1_w, NAME("attn_output_norm.weight"), D);
        VEC(L->ln1_b, NAME("attn_output_norm.bias"), D);
        VEC(L->b_up, NAME("ffn_up.bias"), F);
        VEC(L->b_down, NAME("ffn_down.bias"), D);
        VEC(L->ln2_w, NAME("layer_output_norm.weight"), D);
        VEC(L->ln2_b, NAME("layer_output_norm.bias"), D);
#undef NAME
    }
#undef VEC
    return 0;
}

/* ---- the pass ---- */

struct model_enc_state {
    int max_tokens;
    pool *pool;
    float *x;        /* (T, n_embd) hidden states                      */
    float *q, *k, *v; /* (T, n_embd)                                    */
    float *att;      /* (T, n_embd)                                     */
    float *o;        /* (T, n_embd) projection output                   */
    float *h;        /* (T, n_ff)                                       */
    float *row;      /* (n_embd) dequantised embedding rows             */
    float *scores;   /* (n_threads, max_tokens) attention scores        */
    int32_t *first;  /* (T) first token of each token's sequence        */
    int32_t *len;    /* (T) length of each token's sequence             */
    void *act;
};

static size_t act_bytes(const kern_mat *w, int T) { return (size_t)T * kern_act_row_bytes(w->type, w->n_in); }

model_enc_state *model_enc_state_new(const model *m, int max_tokens, int n_threads) {
    const model_config *c = &m->cfg;
    ASSERT(m->bert && max_tokens > 0);
    model_enc_state *s = xcalloc(1, sizeof *s);
    size_t T = (size_t)max_tokens, D = (size_t)c->n_embd;
    s->max_tokens = max_tokens;
    s->pool = pool_new(n_threads);
    s->x = xaligned_alloc(T * D * sizeof(float));
    s->q = xaligned_alloc(T * D * sizeof(float));
    s->k = xaligned_alloc(T * D * sizeof(float));
    s->v = xaligned_alloc(T * D * sizeof(float));
    s->att = xaligned_alloc(T * D * sizeof(float));
    s->o = xaligned_alloc(T * D * sizeof(float));
    s->h = xaligned_alloc(T * (size_t)c->n_ff * sizeof(float));
    s->row = xaligned_alloc(D * sizeof(float));
    s->scores = xaligned_alloc((size_t)pool_size(s->pool) * T * sizeof(float));
    s->first = xmalloc(T * sizeof(int32_t));
    s->len = xmalloc(T * sizeof(int32_t));
    size_t act = 64;
    for (int l = 0; l < c->n_layer; l++) {
        const bert_layer *L = &m->bert->layers[l];
        const kern_mat *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_up, &L->w_down};
        for (size_t i = 0; i < ARRAY_LEN(ms); i++) act = MAX(act, act_bytes(ms[i], max_tokens));
    }
    s->act = xaligned_alloc(act);
    return s;
}

void model_enc_state_free(model_enc_state *s) {
    if (!s) return;
    pool_free(s->pool);
    void *bufs[] = {s->x, s->q, s->k, s->v, s->att, s->o, s->h, s->row, s->scores, s->first, s->len, s->act};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(s);
}

/* out = (x - mean) / sqrt(var + eps) * w + b, statistics in double. */
static void layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= n;
    float inv = (float)(1.0 / sqrt(var + eps));
    for (int i = 0; i < n; i++) out[i] = ((float)(x[i] - mean)) * inv * w[i] + b[i];
}

static void add_bias(float *y, const float *b, int n) {
    for (int i = 0; i < n; i++) y[i] += b[i];
}

typedef struct enc_job {
    const model *m;
    model_enc_state *s;
    int T, layer;
} enc_job;

/* Attention of every (token, head): token t sees its whole sequence. */
static void attn_task(void *arg, int ith, int nth) {
    const enc_job *j = arg;
    const model_config *c = &j->m->cfg;
    model_enc_state *s = j->s;
    const int D = c->n_embd, hd = c->head_dim;
    const float scale = 1.0f / sqrtf((float)hd);
    float *sc = s->scores + (size_t)ith * s->max_tokens;
    long b, e;
    pool_split((long)j->T * c->n_head, ith, nth, &b, &e);
    for (long u = b; u < e; u++) {
        int t = (int)(u / c->n_head), h = (int)(u % c->n_head);
        const float *q = s->q + (size_t)t * D + (size_t)h * hd;
        int f = s->first[t], n = s->len[t];
        for (int i = 0; i < n; i++) {
            const float *k = s->k + (size_t)(f + i) * D + (size_t)h * hd;
            float d = 0;
            for (int x = 0; x < hd; x++) d += q[x] * k[x];
            sc[i] = d * scale;
        }
        kern_softmax(sc, n);
        float *o = s->att + (size_t)t * D + (size_t)h * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int i = 0; i < n; i++) {
            const float *v = s->v + (size_t)(f + i) * D + (size_t)h * hd;
            for (int x = 0; x < hd; x++) o[x] += sc[i] * v[x];
        }
    }
}

typedef enum { EP_QKV_BIAS, EP_ATTN_OUT, EP_GELU, EP_FFN_OUT } enc_phase;
typedef struct enc_tok_job {
    const model *m;
    model_enc_state *s;
    int T, layer;
    enc_phase ph;
} enc_tok_job;

static void tok_task(void *arg, int ith, int nth) {
    const enc_tok_job *j = arg;
    const model_config *c = &j->m->cfg;
    const bert_layer *L = &j->m->bert->layers[j->layer];
    model_enc_state *s = j->s;
    const int D = c->n_embd, F = c->n_ff;
    long b, e;
    pool_split(j->T, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        float *x = s->x + (size_t)t * D, *o = s->o + (size_t)t * D;
        switch (j->ph) {
        case EP_QKV_BIAS:
            add_bias(s->q + (size_t)t * D, L->bq, D);
            add_bias(s->k + (size_t)t * D, L->bk, D);
            add_bias(s->v + (size_t)t * D, L->bv, D);
            break;
        case EP_ATTN_OUT:
            for (int i = 0; i < D; i++) x[i] += o[i] + L->bo[i];
            layernorm(x, x, L->ln1_w, L->ln1_b, D, c->norm_eps);
            break;
        case EP_GELU: {
            float *h = s->h + (size_t)t * F;
            for (int i = 0; i < F; i++) {
                float u = h[i] + L->b_up[i];
                h[i] = 0.5f * u * (1.0f + erff(u * 0.70710678118654752f));
            }
            break;
        }
        case EP_FFN_OUT:
            for (int i = 0; i < D; i++) x[i] += o[i] + L->b_down[i];
            layernorm(x, x, L->ln2_w, L->ln2_b, D, c->norm_eps);
            break;
        }
    }
}

int model_encode(const model *m, model_enc_state *s, const int32_t *tokens, const int *seq_len, int n_seqs,
                 float *out, err_t *e) {
    const model_config *c = &m->cfg;
    const struct model_bert *b = m->bert;
    if (!b) return err_set(e, ERR_INVALID, "model_encode: '%s' is not an encoder", c->arch_name);
    const int D = c->n_embd;
    int T = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (seq_len[i] < 1 || seq_len[i] > c->n_ctx_train)
            return err_set(e, ERR_RANGE, "model_encode: sequence %d has %d tokens (1..%d)", i, seq_len[i],
                           c->n_ctx_train);
        if (seq_len[i] > s->max_tokens - T)
            return err_set(e, ERR_RANGE, "model_encode: more than %d tokens in one call", s->max_tokens);
        T += seq_len[i];
    }
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return err_set(e, ERR_RANGE, "model_encode: token %d id %d out of range [0, %d)", t, tokens[t],
                           c->n_vocab);
    /* embeddings */
    for (int i = 0, t = 0; i < n_seqs; i++)
        for (int p = 0; p < seq_len[i]; p++, t++) {
            float *x = s->x + (size_t)t * D;
            s->first[t] = t - p;
            s->len[t] = seq_len[i];
            quant_dequant_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes,
                              x, D);
            quant_dequant_row(b->pos_embd.type, (const char *)b->pos_embd.data + (size_t)p * b->pos_embd.row_bytes,
                              s->row, D);
            for (int k = 0; k < D; k++) x[k] += s->row[k];
            quant_dequant_row(b->type_embd.type, b->type_embd.data, s->row, D);
            for (int k = 0; k < D; k++) x[k] += s->row[k];
            layernorm(x, x, b->embd_ln_w, b->embd_ln_b, D, c->norm_eps);
        }
    pool *p = s->pool;
    for (int l = 0; l < c->n_layer; l++) {
        const bert_layer *L = &b->layers[l];
        enc_tok_job tj = {m, s, T, l, EP_QKV_BIAS};
        const kern_mat *ws[3] = {&L->wq, &L->wk, &L->wv};
        float *ys[3] = {s->q, s->k, s->v};
        kern_matmul_multi(p, ws, 3, s->x, T, ys, s->act);
        pool_run(p, tok_task, &tj);
        enc_job aj = {m, s, T, l};
        pool_run(p, attn_task, &aj);
        kern_matmul(p, &L->wo, s->att, T, s->o, s->act);
        tj.ph = EP_ATTN_OUT;
        pool_run(p, tok_task, &tj);
        kern_matmul(p, &L->w_up, s->x, T, s->h, s->act);
        tj.ph = EP_GELU;
        pool_run(p, tok_task, &tj);
        kern_matmul(p, &L->w_down, s->h, T, s->o, s->act);
        tj.ph = EP_FFN_OUT;
        pool_run(p, tok_task, &tj);
    }
    /* pooling */
    for (int i = 0, t0 = 0; i < n_seqs; t0 += seq_len[i], i++) {
        float *y = out + (size_t)i * D;
        int n = seq_len[i];
        if (c->pooling == MODEL_POOL_MEAN) {
            for (int k = 0; k < D; k++) {
                double sum = 0;
                for (int t = 0; t < n; t++) sum += s->x[(size_t)(t0 + t) * D + k];
                y[k] = (float)(sum / n);
            }
        } else {
            int t = c->pooling == MODEL_POOL_CLS ? t0 : t0 + n - 1;
            memcpy(y, s->x + (size_t)t * D, (size_t)D * sizeof(float));
        }
    }
    return 0;
}
