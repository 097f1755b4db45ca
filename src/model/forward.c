/*
 * forward.c — model_forward: one transformer pass over a ragged batch.
 *
 * Reads top to bottom like llama2.c's forward(), but for T tokens at once,
 * each with its own sequence, position and block table:
 *
 *   x = embed(tokens)                                  (T, n_embd)
 *   for each layer:
 *     xb = rmsnorm(x) ; q,k,v = xb Wq,Wk,Wv (+bias)    (T, q_dim) (T, kv_dim)
 *     [qwen3] per-head rmsnorm of q and k
 *     rope(q, k) at each token's position
 *     write k, v into the paged cache at (seq, pos)
 *     att = attention of each token over its sequence's 0..pos
 *     x += att Wo
 *     xb = rmsnorm(x) ; x += (silu(xb Wgate) * xb Wup) Wdown
 *   logits = rmsnorm(x[rows]) Wout                     (rows, n_vocab)
 *
 * No allocation happens here: model_state holds every buffer, sized for
 * max_tokens and max_ctx when it was created.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kern/attn.h"
#include "../kern/quant.h"
#include "model.h"

/* Decode batches of at most this many tokens split attention over chunks. */
#define ATTN_SPLIT_T 4

struct model_state {
    int max_tokens, max_ctx, n_threads;
    pool *pool;
    float *x;      /* (T, n_embd) residual stream                        */
    float *xb;     /* (T, n_embd) normed input of a sub-layer            */
    float *q;      /* (T, n_head * head_dim)                             */
    float *k;      /* (T, kv_dim)                                        */
    float *v;      /* (T, kv_dim)                                        */
    float *att;    /* (T, n_head * head_dim) attention output            */
    float *o;      /* (T, n_embd) projection output                      */
    float *hb;     /* (T, n_ff) gate, then silu(gate)*up                 */
    float *hb2;    /* (T, n_ff) up                                       */
    float *cosv;   /* (T, n_rot/2) rope cos per token                    */
    float *sinv;   /* (T, n_rot/2)                                       */
    float *scores; /* (n_threads, attn_share_floats) attention scratch:  */
                   /* group*ATTN_CHUNK scores, then parts m, l, o        */
    size_t attn_share_floats;
    int max_chunks; /* ceil(max_ctx / ATTN_CHUNK)                        */
    float *part;   /* (ATTN_SPLIT_T, max_chunks, n_head, hd + 2) parts   */
                   /* of decode attention split over chunks              */
    int32_t *unit0; /* (T+1) first attention unit of each token          */
    void *act;     /* activation conversion buffer for the matmuls       */
    int32_t *rows; /* (T) batch indices of tokens that want logits       */
};

static size_t act_bytes_for(const kern_mat *w, int T) { return (size_t)T * kern_act_row_bytes(w->type, w->n_in); }

model_state *model_state_new(const model *m, int max_tokens, int max_ctx, int n_threads) {
    const model_config *c = &m->cfg;
    ASSERT(max_tokens > 0 && max_ctx > 0);
    model_state *s = xcalloc(1, sizeof *s);
    size_t T = (size_t)max_tokens, q_dim = (size_t)c->n_head * c->head_dim, kv_dim = (size_t)c->n_head_kv * c->head_dim;
    s->max_tokens = max_tokens;
    s->max_ctx = max_ctx;
    s->pool = pool_new(n_threads);
    s->n_threads = pool_size(s->pool);
    s->x = xaligned_alloc(T * c->n_embd * sizeof(float));
    s->xb = xaligned_alloc(T * c->n_embd * sizeof(float));
    s->o = xaligned_alloc(T * c->n_embd * sizeof(float));
    s->q = xaligned_alloc(T * q_dim * sizeof(float));
    s->att = xaligned_alloc(T * q_dim * sizeof(float));
    s->k = xaligned_alloc(T * kv_dim * sizeof(float));
    s->v = xaligned_alloc(T * kv_dim * sizeof(float));
    s->hb = xaligned_alloc(T * c->n_ff * sizeof(float));
    s->hb2 = xaligned_alloc(T * c->n_ff * sizeof(float));
    s->cosv = xaligned_alloc(T * (c->n_rot / 2) * sizeof(float));
    s->sinv = xaligned_alloc(T * (c->n_rot / 2) * sizeof(float));
    const size_t group = (size_t)(c->n_head / c->n_head_kv), hd = (size_t)c->head_dim;
    s->max_chunks = (max_ctx + ATTN_CHUNK - 1) / ATTN_CHUNK;
    s->attn_share_floats = group * ATTN_CHUNK + (size_t)s->max_chunks * group * (hd + 2);
    s->scores = xaligned_alloc((size_t)s->n_threads * s->attn_share_floats * sizeof(float));
    s->part = xaligned_alloc((size_t)ATTN_SPLIT_T * s->max_chunks * c->n_head * (hd + 2) * sizeof(float));
    s->unit0 = xmalloc((T + 1) * sizeof(int32_t));
    s->rows = xmalloc(T * sizeof(int32_t));
    size_t act = act_bytes_for(&m->output, max_tokens);
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const kern_mat *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < ARRAY_LEN(mats); i++) act = MAX(act, act_bytes_for(mats[i], max_tokens));
    }
    s->act = xaligned_alloc(act ? act : 64);
    return s;
}

void model_state_free(model_state *s) {
    if (!s) return;
    pool_free(s->pool);
    void *bufs[] = {s->x, s->xb, s->o, s->q, s->att, s->k, s->v, s->hb, s->hb2, s->cosv, s->sinv, s->scores, s->act, s->rows, s->part, s->unit0};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(s);
}

pool *model_state_pool(model_state *s) { return s->pool; }

/* ---- rope ---- */

/* Angles for each token: theta_i = pos / scale * base^(-2i/n_rot) / freq[i],
 * computed in double so the tables match an f64 reference closely. */
static void rope_tables(const model *m, model_state *s, const model_batch *b) {
    const model_config *c = &m->cfg;
    int half = c->n_rot / 2;
    for (int t = 0; t < b->n_tokens; t++) {
        double pos = (double)b->pos[t] / c->rope_scale;
        for (int i = 0; i < half; i++) {
            double inv_freq = pow((double)c->rope_theta, -2.0 * i / c->n_rot);
            if (m->rope_freqs) inv_freq /= m->rope_freqs[i];
            double a = pos * inv_freq;
            s->cosv[(size_t)t * half + i] = (float)cos(a);
            s->sinv[(size_t)t * half + i] = (float)sin(a);
        }
    }
}

/* Rotates n_heads heads of one token in place. */
static void rope_apply(const model_config *c, float *x, int n_heads, const float *cs, const float *sn) {
    int half = c->n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *hx = x + (size_t)h * c->head_dim;
        for (int i = 0; i < half; i++) {
            int a = c->rope == ROPE_NORM ? 2 * i : i;
            int bi = c->rope == ROPE_NORM ? 2 * i + 1 : i + half;
            float x0 = hx[a], x1 = hx[bi];
            hx[a] = x0 * cs[i] - x1 * sn[i];
            hx[bi] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

/* ---- attention over the pool ----
 *
 * A unit of work is (token, kv head) — all chunks of that token's context,
 * merged at once (prefill: there are many units) — or, in decode batches of
 * at most ATTN_SPLIT_T tokens with more than one chunk of context, (token,
 * kv head, chunk), whose parts go to s->part and are merged by a second
 * dispatch. Either way each query head's result is attn_merge over the same
 * parts in chunk order, so both give the same bits (see attn.h). */

typedef struct attn_job {
    const model *m;
    model_state *s;
    const model_kv *kv;
    const model_batch *b;
    int layer;
    bool split; /* units are (token, kv head, chunk)                      */
} attn_job;

static attn_view attn_view_of(const attn_job *j, int t) {
    const model_config *c = &j->m->cfg;
    const int kv_dim = c->n_head_kv * c->head_dim;
    attn_view v = {
        .k = j->kv->k + (size_t)j->layer * j->kv->block_tokens * kv_dim,
        .v = j->kv->v + (size_t)j->layer * j->kv->block_tokens * kv_dim,
        .block_stride = j->kv->block_elems,
        .kv_dim = kv_dim,
        .head_dim = c->head_dim,
        .block_tokens = j->kv->block_tokens,
        .block_table = j->b->seqs[j->b->seq[t]].block_table,
    };
    return v;
}

static inline int n_chunks_of(int n_pos) { return (n_pos + ATTN_CHUNK - 1) / ATTN_CHUNK; }

static void attn_worker(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    const model_config *c = &j->m->cfg;
    model_state *s = j->s;
    const int hd = c->head_dim, q_dim = c->n_head * hd, group = c->n_head / c->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scratch = s->scores + (size_t)ith * s->attn_share_floats;
    /* units are strided over the shares: a token late in a prefill chunk
     * attends over more positions, so contiguous ranges would be unequal */
    const long n_units = s->unit0[j->b->n_tokens];
    int t = 0;
    for (long u = ith; u < n_units; u += nth) {
        while (s->unit0[t + 1] <= u) t++;
        const int n_pos = j->b->pos[t] + 1, nc = n_chunks_of(n_pos);
        const attn_view v = attn_view_of(j, t);
        const float *qt = s->q + (size_t)t * q_dim;
        const long k = u - s->unit0[t];
        if (j->split) { /* one chunk; parts at [t][chunk][head] */
            const int h = (int)(k / nc), ch = (int)(k % nc);
            const int p0 = ch * ATTN_CHUNK, p1 = MIN(n_pos, p0 + ATTN_CHUNK);
            const size_t pi = ((size_t)t * s->max_chunks + ch) * c->n_head + (size_t)h * group;
            float *pm = s->part, *pl = pm + (size_t)ATTN_SPLIT_T * s->max_chunks * c->n_head;
            float *po = pl + (size_t)ATTN_SPLIT_T * s->max_chunks * c->n_head;
            kern->attn_part(&v, h, qt + (size_t)h * group * hd, group, p0, p1, scale, pm + pi, pl + pi, po + pi * hd,
                            scratch);
        } else { /* every chunk here, parts at [chunk][g] in scratch */
            const int h = (int)k;
            float *pm = scratch + (size_t)group * ATTN_CHUNK, *pl = pm + (size_t)s->max_chunks * group;
            float *po = pl + (size_t)s->max_chunks * group;
            for (int ch = 0; ch < nc; ch++) {
                const int p0 = ch * ATTN_CHUNK, p1 = MIN(n_pos, p0 + ATTN_CHUNK);
                const size_t pi = (size_t)ch * group;
                kern->attn_part(&v, h, qt + (size_t)h * group * hd, group, p0, p1, scale, pm + pi, pl + pi,
                                po + pi * hd, scratch);
            }
            for (int g = 0; g < group; g++)
                attn_merge(nc, hd, pm + g, pl + g, (size_t)group, po + (size_t)g * hd, (size_t)group * hd,
                           s->att + (size_t)t * q_dim + (size_t)(h * group + g) * hd);
        }
    }
}

static void attn_merge_worker(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    const model_config *c = &j->m->cfg;
    const model_state *s = j->s;
    const int hd = c->head_dim, q_dim = c->n_head * hd;
    const size_t n_part = (size_t)ATTN_SPLIT_T * s->max_chunks * c->n_head;
    const float *pm = s->part, *pl = pm + n_part, *po = pl + n_part;
    long begin, end;
    pool_split((long)j->b->n_tokens * c->n_head, ith, nth, &begin, &end);
    for (long u = begin; u < end; u++) {
        const int t = (int)(u / c->n_head), h = (int)(u % c->n_head);
        const size_t pi = (size_t)t * s->max_chunks * c->n_head + (size_t)h;
        attn_merge(n_chunks_of(j->b->pos[t] + 1), hd, pm + pi, pl + pi, (size_t)c->n_head, po + pi * hd,
                   (size_t)c->n_head * hd, s->att + (size_t)t * q_dim + (size_t)h * hd);
    }
}

static void attention(const model *m, model_state *s, const model_kv *kv, const model_batch *b, int layer) {
    const int n_kv = m->cfg.n_head_kv, T = b->n_tokens;
    int max_nc = 1;
    for (int t = 0; t < T; t++) max_nc = MAX(max_nc, n_chunks_of(b->pos[t] + 1));
    attn_job job = {m, s, kv, b, layer, T <= ATTN_SPLIT_T && max_nc > 1};
    s->unit0[0] = 0;
    for (int t = 0; t < T; t++) s->unit0[t + 1] = s->unit0[t] + n_kv * (job.split ? n_chunks_of(b->pos[t] + 1) : 1);
    pool_run(s->pool, attn_worker, &job);
    if (job.split) pool_run(s->pool, attn_merge_worker, &job);
}

/* ---- validation ---- */

static int check_batch(const model *m, const model_state *s, const model_kv *kv, const model_batch *b, err_t *e) {
    if (b->n_tokens < 1 || b->n_tokens > s->max_tokens)
        return err_set(e, ERR_RANGE, "forward: batch of %d tokens (allowed 1..%d)", b->n_tokens, s->max_tokens);
    if (b->n_seqs < 1) return err_set(e, ERR_INVALID, "forward: batch has no sequences");
    for (int si = 0; si < b->n_seqs; si++)
        for (int i = 0; i < b->seqs[si].n_blocks; i++) {
            int32_t blk = b->seqs[si].block_table[i];
            if (blk < 0 || blk >= kv->n_blocks)
                return err_set(e, ERR_RANGE, "forward: sequence %d block %d is %d (pool has %d)", si, i, blk,
                               kv->n_blocks);
        }
    for (int t = 0; t < b->n_tokens; t++) {
        if (b->token[t] < 0 || b->token[t] >= m->cfg.n_vocab)
            return err_set(e, ERR_RANGE, "forward: token %d id %d out of vocabulary (%d)", t, b->token[t],
                           m->cfg.n_vocab);
        if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs)
            return err_set(e, ERR_RANGE, "forward: token %d sequence %d out of range", t, b->seq[t]);
        int p = b->pos[t];
        if (p < 0 || p >= s->max_ctx)
            return err_set(e, ERR_RANGE, "forward: token %d position %d outside [0, %d)", t, p, s->max_ctx);
        if (p / kv->block_tokens >= b->seqs[b->seq[t]].n_blocks)
            return err_set(e, ERR_RANGE, "forward: token %d position %d beyond its block table (%d blocks)", t, p,
                           b->seqs[b->seq[t]].n_blocks);
    }
    return 0;
}

/* ---- the pass ---- */

static inline uint16_t *kv_row(const model_kv *kv, uint16_t *base, const model_config *c, const model_seq *sq,
                               int layer, int pos) {
    size_t kv_dim = (size_t)c->n_head_kv * c->head_dim;
    return base + (size_t)sq->block_table[pos / kv->block_tokens] * kv->block_elems +
           ((size_t)layer * kv->block_tokens + (size_t)(pos % kv->block_tokens)) * kv_dim;
}

/* ---- per-token work between the matmuls ----
 *
 * The norms, rope, KV writes, residual adds and SwiGLU touch each token's
 * rows only, so a prefill batch spreads them over the pool by token; a small
 * batch (decode) runs them on the caller, which is cheaper than a dispatch.
 * Each token's arithmetic is the same either way. */

#define TOK_PAR_MIN 32 /* tokens from which the per-token work is dispatched */

typedef enum tok_phase { PH_NORM_ATTN, PH_QKV_POST, PH_RESID_NORM_FFN, PH_SWIGLU, PH_RESID } tok_phase;

typedef struct tok_job {
    const model *m;
    model_state *s;
    model_kv *kv;
    const model_batch *b;
    int layer;
    tok_phase phase;
} tok_job;

static void token_ops(const tok_job *j, int t0, int t1) {
    const model_config *c = &j->m->cfg;
    const model_layer *L = &j->m->layers[j->layer];
    model_state *s = j->s;
    const int D = c->n_embd, hd = c->head_dim, q_dim = c->n_head * hd, kv_dim = c->n_head_kv * hd;
    const int half = c->n_rot / 2;
    for (int t = t0; t < t1; t++) {
        float *x = s->x + (size_t)t * D, *xb = s->xb + (size_t)t * D, *o = s->o + (size_t)t * D;
        switch (j->phase) {
        case PH_NORM_ATTN:
            kern_rmsnorm(xb, x, L->attn_norm, D, c->rms_eps);
            break;
        case PH_QKV_POST: {
            float *q = s->q + (size_t)t * q_dim, *k = s->k + (size_t)t * kv_dim, *v = s->v + (size_t)t * kv_dim;
            if (L->bq) {
                for (int i = 0; i < q_dim; i++) q[i] += L->bq[i];
                for (int i = 0; i < kv_dim; i++) k[i] += L->bk[i], v[i] += L->bv[i];
            }
            if (L->q_norm) {
                for (int h = 0; h < c->n_head; h++) kern_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, c->rms_eps);
                for (int h = 0; h < c->n_head_kv; h++) kern_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, c->rms_eps);
            }
            rope_apply(c, q, c->n_head, s->cosv + (size_t)t * half, s->sinv + (size_t)t * half);
            rope_apply(c, k, c->n_head_kv, s->cosv + (size_t)t * half, s->sinv + (size_t)t * half);
            const model_seq *sq = &j->b->seqs[j->b->seq[t]];
            /* the cache is f16: one rounding rule (nearest-even, f32_to_fp16)
             * whichever kernel table reads it back */
            uint16_t *kr = kv_row(j->kv, j->kv->k, c, sq, j->layer, j->b->pos[t]);
            uint16_t *vr = kv_row(j->kv, j->kv->v, c, sq, j->layer, j->b->pos[t]);
            for (int i = 0; i < kv_dim; i++) kr[i] = f32_to_fp16(k[i]), vr[i] = f32_to_fp16(v[i]);
            break;
        }
        case PH_RESID_NORM_FFN:
            for (int i = 0; i < D; i++) x[i] += o[i];
            kern_rmsnorm(xb, x, L->ffn_norm, D, c->rms_eps);
            break;
        case PH_SWIGLU:
            kern_swiglu(s->hb + (size_t)t * c->n_ff, s->hb2 + (size_t)t * c->n_ff, c->n_ff);
            break;
        case PH_RESID:
            for (int i = 0; i < D; i++) x[i] += o[i];
            break;
        }
    }
}

static void token_task(void *arg, int ith, int nth) {
    const tok_job *j = arg;
    long b, e;
    pool_split(j->b->n_tokens, ith, nth, &b, &e);
    token_ops(j, (int)b, (int)e);
}

static void run_tokens(tok_job *j, tok_phase phase) {
    j->phase = phase;
    if (j->b->n_tokens < TOK_PAR_MIN)
        token_ops(j, 0, j->b->n_tokens);
    else
        pool_run(j->s->pool, token_task, j);
}

int model_forward(const model *m, model_state *s, model_kv *kv, const model_batch *b, float *logits, err_t *e) {
    const model_config *c = &m->cfg;
    int r = check_batch(m, s, kv, b, e);
    if (r) return r;
    const int T = b->n_tokens, D = c->n_embd;
    pool *p = s->pool;

    for (int t = 0; t < T; t++)
        quant_dequant_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)b->token[t] * m->tok_embd.row_bytes,
                          s->x + (size_t)t * D, D);
    rope_tables(m, s, b);

    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        tok_job tj = {m, s, kv, b, l, PH_NORM_ATTN};
        /* attention block */
        run_tokens(&tj, PH_NORM_ATTN);
        {
            const kern_mat *ws[3] = {&L->wq, &L->wk, &L->wv};
            float *ys[3] = {s->q, s->k, s->v};
            kern_matmul_multi(p, ws, 3, s->xb, T, ys, s->act);
        }
        run_tokens(&tj, PH_QKV_POST); /* bias, qk-norm, rope, K/V into the cache */
        attention(m, s, kv, b, l);
        kern_matmul(p, &L->wo, s->att, T, s->o, s->act);

        /* feed-forward block */
        run_tokens(&tj, PH_RESID_NORM_FFN);
        {
            const kern_mat *ws[2] = {&L->w_gate, &L->w_up};
            float *ys[2] = {s->hb, s->hb2};
            kern_matmul_multi(p, ws, 2, s->xb, T, ys, s->act);
        }
        run_tokens(&tj, PH_SWIGLU);
        kern_matmul(p, &L->w_down, s->hb, T, s->o, s->act);
        run_tokens(&tj, PH_RESID);
    }

    /* logits for the rows that asked for them, gathered contiguously */
    int n_rows = 0;
    for (int t = 0; t < T; t++)
        if (b->logits ? b->logits[t] != 0 : t == T - 1) s->rows[n_rows++] = t;
    if (n_rows == 0) return 0;
    for (int i = 0; i < n_rows; i++)
        kern_rmsnorm(s->xb + (size_t)i * D, s->x + (size_t)s->rows[i] * D, m->out_norm, D, c->rms_eps);
    kern_matmul(p, &m->output, s->xb, n_rows, logits, s->act);
    return n_rows;
}
