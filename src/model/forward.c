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
 *       [gpt-oss] windowed layers: over pos-window+1..pos only; sinks: a
 *       learned logit per head in every softmax's denominator
 *     x += att Wo (+bias)
 *     xb = rmsnorm(x) ; x += (silu(xb Wgate) * xb Wup) Wdown
 *       [MoE] x += moe_forward(xb): router, top-k, experts (moe.h)
 *   logits = rmsnorm(x[rows]) Wout                     (rows, n_vocab)
 *
 * No allocation happens here: model_state holds every buffer, sized for
 * max_tokens and max_ctx when it was created.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../kern/attn.h"
#include "../kern/quant.h"
#include "model.h"

/* Attention parts are held for at most this many bytes per batch; larger
 * batches at long contexts run attention in waves of tokens (tests force
 * small waves with KVLOOM_ATTN_PARTS=pairs). */
#define ATTN_PART_BYTES ((size_t)16 << 20)

/* A group of tokens that attend to chunk c of the same rows (attention()). */
typedef struct attn_grp {
    int32_t c;    /* chunk: positions [c*ATTN_CHUNK, (c+1)*ATTN_CHUNK)          */
    int32_t seq;  /* batch sequence whose block table addresses the rows        */
    int32_t off;  /* first of its tokens in attn_tok                            */
    int32_t n;    /* tokens                                                     */
    int64_t cost; /* sum over its tokens of the positions each sees in chunk c  */
    int32_t p0;   /* first position of the part (c*ATTN_CHUNK unless windowed)  */
} attn_grp;

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
    /* attention (see "attention over the pool" below) */
    int max_chunks;     /* ceil(max_ctx / ATTN_CHUNK)                      */
    int part_cap;       /* (token, chunk) pairs one wave may hold          */
    float *part_m;      /* (part_cap, n_head) parts: max score             */
    float *part_l;      /* (part_cap, n_head) exp sum                      */
    float *part_o;      /* (part_cap, n_head, hd) weighted values          */
    int32_t *pbase;     /* (T+1) first part pair of each token of a wave   */
    attn_grp *grp;      /* (part_cap) the wave's groups, largest first     */
    attn_grp *grp_raw;  /* (part_cap) groups before splitting              */
    int32_t *attn_tok;  /* (part_cap) tokens of the groups                 */
    int32_t *tok_d;     /* (T) distinct-sequence index of each token       */
    int32_t *dseq;      /* (T) distinct sequences of the wave              */
    int32_t *dmax;      /* (T) last position of each distinct sequence     */
    int32_t *dcls;      /* (3T) classes and group numbers, per distinct seq */
    int n_grp;          /* groups in grp                                   */
    int plan_window;    /* the window the plan is for (0: full attention)  */
    float *attn_scratch; /* (n_threads, attn_scratch_floats) kernel scratch */
    size_t attn_scratch_floats;
    attn_query *aq;     /* (n_threads, T) query lists of a group           */
    void *act;     /* activation conversion buffer for the matmuls       */
    int32_t *rows; /* (T) batch indices of tokens that want logits       */
    moe_scratch *moe; /* MoE models: the expert layers' scratch          */
    bool own_pool;    /* pool is ours (model_state_new), not borrowed       */
    size_t bytes;     /* the buffers above (model_state_bytes)              */
};

static size_t act_bytes_for(const kern_mat *w, int T) { return (size_t)T * kern_act_row_bytes(w->type, w->n_in); }

model_state *model_state_new(const model *m, int max_tokens, int max_ctx, int n_threads) {
    model_state *s = model_state_new_on(m, max_tokens, max_ctx, pool_new(n_threads));
    s->own_pool = true;
    return s;
}

/* Every buffer below is counted in s->bytes (model_state_bytes: the
 * server's memory accounting, part "scratch"). */
#define ALLOC_A(n) (s->bytes += (n), xaligned_alloc(n))
#define ALLOC_M(n) (s->bytes += (n), xmalloc(n))
model_state *model_state_new_on(const model *m, int max_tokens, int max_ctx, pool *workers) {
    const model_config *c = &m->cfg;
    ASSERT(max_tokens > 0 && max_ctx > 0);
    ASSERT(!c->encoder); /* encoders run through model_encode (bert.c) */
    model_state *s = xcalloc(1, sizeof *s);
    size_t T = (size_t)max_tokens, q_dim = (size_t)c->n_head * c->head_dim, kv_dim = (size_t)c->n_head_kv * c->head_dim;
    s->max_tokens = max_tokens;
    s->max_ctx = max_ctx;
    s->pool = workers;
    s->n_threads = pool_size(s->pool);
    s->x = ALLOC_A(T * c->n_embd * sizeof(float));
    s->xb = ALLOC_A(T * c->n_embd * sizeof(float));
    s->o = ALLOC_A(T * c->n_embd * sizeof(float));
    s->q = ALLOC_A(T * q_dim * sizeof(float));
    s->att = ALLOC_A(T * q_dim * sizeof(float));
    s->k = ALLOC_A(T * kv_dim * sizeof(float));
    s->v = ALLOC_A(T * kv_dim * sizeof(float));
    const size_t dense_ff = c->n_expert > 0 ? 1 : (size_t)c->n_ff; /* MoE layers use moe scratch */
    s->hb = ALLOC_A(T * dense_ff * sizeof(float));
    s->hb2 = ALLOC_A(T * dense_ff * sizeof(float));
    s->cosv = ALLOC_A(T * (c->n_rot / 2) * sizeof(float));
    s->sinv = ALLOC_A(T * (c->n_rot / 2) * sizeof(float));
    const size_t hd = (size_t)c->head_dim;
    s->max_chunks = (max_ctx + ATTN_CHUNK - 1) / ATTN_CHUNK;
    const size_t pair_bytes = (size_t)c->n_head * (hd + 2) * sizeof(float);
    s->part_cap = (int)MIN(T * (size_t)s->max_chunks, MAX((size_t)s->max_chunks, ATTN_PART_BYTES / pair_bytes));
    const char *cap = getenv("KVLOOM_ATTN_PARTS"); /* tests: force waves of few tokens */
    if (cap && atoi(cap) > 0) s->part_cap = MAX(s->max_chunks, MIN(s->part_cap, atoi(cap)));
    const size_t n_pair = (size_t)s->part_cap;
    s->part_m = ALLOC_A(n_pair * c->n_head * sizeof(float));
    s->part_l = ALLOC_A(n_pair * c->n_head * sizeof(float));
    s->part_o = ALLOC_A(n_pair * c->n_head * hd * sizeof(float));
    s->pbase = ALLOC_M((T + 1) * sizeof(int32_t));
    s->grp = ALLOC_M(n_pair * sizeof(attn_grp));
    s->grp_raw = ALLOC_M(n_pair * sizeof(attn_grp));
    s->attn_tok = ALLOC_M(n_pair * sizeof(int32_t));
    s->tok_d = ALLOC_M(T * sizeof(int32_t));
    s->dseq = ALLOC_M(T * sizeof(int32_t));
    s->dmax = ALLOC_M(T * sizeof(int32_t));
    s->dcls = ALLOC_M(3 * T * sizeof(int32_t));
    s->attn_scratch_floats = (attn_part_scratch_floats((int)hd) + 15) & ~(size_t)15; /* 64-byte aligned shares */
    s->attn_scratch = ALLOC_A((size_t)s->n_threads * s->attn_scratch_floats * sizeof(float));
    s->aq = ALLOC_M((size_t)s->n_threads * T * sizeof(attn_query));
    s->rows = ALLOC_M(T * sizeof(int32_t));
    size_t act = act_bytes_for(&m->output, max_tokens);
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const kern_mat *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < ARRAY_LEN(mats); i++) act = MAX(act, act_bytes_for(mats[i], max_tokens));
    }
    s->act = ALLOC_A(act ? act : 64);
    if (c->n_expert > 0) {
        const moe_ffn **ls = xmalloc(sizeof(moe_ffn *) * (size_t)c->n_layer);
        for (int l = 0; l < c->n_layer; l++) ls[l] = &m->layers[l].moe;
        s->moe = moe_scratch_new(ls, c->n_layer, max_tokens, s->n_threads);
        free(ls);
        s->bytes += moe_scratch_bytes(s->moe);
    }
    return s;
}

#undef ALLOC_A
#undef ALLOC_M

size_t model_state_bytes(const model_state *s) { return s ? sizeof *s + s->bytes : 0; }

void model_state_free(model_state *s) {
    if (!s) return;
    if (s->own_pool) pool_free(s->pool);
    moe_scratch_free(s->moe);
    void *bufs[] = {s->x,      s->xb,     s->o,       s->q,     s->att,    s->k,      s->v,
                    s->hb,     s->hb2,    s->cosv,    s->sinv,  s->act,    s->rows,   s->part_m,
                    s->part_l, s->part_o, s->pbase,   s->grp,   s->grp_raw, s->attn_tok, s->tok_d,
                    s->dseq,   s->dmax,   s->dcls,    s->attn_scratch, s->aq};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(s);
}

pool *model_state_pool(model_state *s) { return s->pool; }
moe_scratch *model_state_moe(model_state *s) { return s->moe; }

/* ---- rope ---- */

/* YaRN's blend of pair i (model.h): the factor its frequency is multiplied
 * by, between 1/factor (interpolated, low frequencies) and 1 (extrapolated,
 * high frequencies), with a linear ramp between the corrected dims. */
static double yarn_freq_mul(const model_config *c, int i) {
    const double pi = 3.14159265358979323846, lb = log((double)c->rope_theta);
    const double d_fast = c->n_rot * log(c->yarn_orig_ctx / (2 * pi * c->yarn_beta_fast)) / (2 * lb);
    const double d_slow = c->n_rot * log(c->yarn_orig_ctx / (2 * pi * c->yarn_beta_slow)) / (2 * lb);
    const double lo = MAX(0.0, c->yarn_truncate ? floor(d_fast) : d_fast);
    const double hi = MIN((double)(c->n_rot - 1), c->yarn_truncate ? ceil(d_slow) : d_slow);
    const double y = (i - lo) / MAX(0.001, hi - lo);
    const double ramp = 1.0 - MIN(1.0, MAX(0.0, y)); /* 1: extrapolate */
    return (1.0 - ramp) / c->yarn_factor + ramp;
}

/* Angles for each token: theta_i = pos / scale * base^(-2i/n_rot) / freq[i]
 * (YaRN: times yarn_freq_mul, cos and sin scaled by its mscale), computed
 * in double so the tables match an f64 reference closely. */
static void rope_tables(const model *m, model_state *s, const model_batch *b) {
    const model_config *c = &m->cfg;
    int half = c->n_rot / 2;
    const double mscale = c->rope_yarn ? c->yarn_attn_factor * (1.0 + 0.1 * log((double)c->yarn_factor)) : 1.0;
    for (int t = 0; t < b->n_tokens; t++) {
        double pos = (double)b->pos[t] / c->rope_scale;
        for (int i = 0; i < half; i++) {
            double inv_freq = pow((double)c->rope_theta, -2.0 * i / c->n_rot);
            if (m->rope_freqs) inv_freq /= m->rope_freqs[i];
            if (c->rope_yarn) inv_freq *= yarn_freq_mul(c, i);
            double a = pos * inv_freq;
            s->cosv[(size_t)t * half + i] = (float)(cos(a) * mscale);
            s->sinv[(size_t)t * half + i] = (float)(sin(a) * mscale);
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
 * Token t (position pos) attends to chunks 0 .. pos/ATTN_CHUNK of its
 * sequence; each chunk gives one part per query head (attn.h) and the parts
 * are merged in chunk order. The work is planned once per batch (at layer
 * 0; the plan holds for every layer):
 *
 *   - groups: for each chunk c, the tokens that read the same rows of it
 *     become one group — every token that sees all of chunk c and whose
 *     sequence maps the chunk's positions to the same physical blocks (the
 *     tokens of one prefill; decode tokens of sequences that share a cached
 *     prefix through the radix tree), and, for the chunk a token sees only
 *     in part (the diagonal of a prefill), the tokens of its sequence that
 *     end in it. kern->attn_part then reads and widens every K and V row of
 *     the chunk once per group and kv head instead of once per token.
 *   - units: (group, kv head), largest first; groups much larger than an
 *     even share of the work are cut into runs of tokens first. The pool's
 *     threads claim units from an atomic counter, so the threads finish
 *     together whatever the mix of sizes.
 *   - parts go to part_m/part_l/part_o at [pbase[t] + c][head]; a second
 *     dispatch merges each (token, head) in chunk order into att. When every
 *     token has one chunk the unit merges its own tokens (no second
 *     dispatch: decode at a short context).
 *
 * Bits: attn_part gives each query the same part whatever group it is in,
 * the parts of a (token, head) are merged by attn_merge in chunk order, and
 * which thread runs which unit changes nothing — so a token's attention is
 * the same alone, in any batch, prefilled at once or in pieces, or over a
 * prefix computed by another sequence. A batch whose parts would not fit in
 * part_cap runs in waves of whole tokens, each planned on its own. */

typedef struct attn_job {
    const model *m;
    model_state *s;
    const model_kv *kv;
    const model_batch *b;
    int layer;
    int window;        /* the plan's window (0: full)                    */
    const float *sinks; /* the layer's (n_head) or NULL                  */
    int t0, t1;        /* the wave's tokens                              */
    int n_units;       /* n_grp * n_head_kv                              */
    bool merge_inline; /* every token of the wave has one chunk          */
    _Atomic int next;  /* next unit to claim                             */
} attn_job;

static inline int n_chunks_of(int n_pos) { return (n_pos + ATTN_CHUNK - 1) / ATTN_CHUNK; }

/* Windows. A token at pos in a layer of window w > 0 sees positions
 * attn_lo .. pos; its parts are pieces of ATTN_CHUNK positions from
 * attn_lo (one piece when w <= ATTN_CHUNK), so they depend on its position
 * alone (batch invariance). With w = 0, or while pos < w, that is the
 * aligned chunking of full attention. */
static inline int attn_lo(int pos, int w) { return w > 0 && pos >= w ? pos - w + 1 : 0; }
static inline int n_parts_of(int pos, int w) { return n_chunks_of(pos + 1 - attn_lo(pos, w)); }

/* Do sequences a and b map the positions of chunk c to the same blocks?
 * (Both hold the whole chunk: a token of each sees all of it.) */
static bool same_chunk_rows(const model_batch *b, int bt, int sa, int sb, int c) {
    if (sa == sb) return true;
    const int32_t *ta = b->seqs[sa].block_table, *tb = b->seqs[sb].block_table;
    for (int i = c * ATTN_CHUNK / bt; i <= ((c + 1) * ATTN_CHUNK - 1) / bt; i++)
        if (ta[i] != tb[i]) return false;
    return true;
}

static int grp_cmp(const void *pa, const void *pb) {
    const attn_grp *a = pa, *b = pb;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    if (a->c != b->c) return a->c - b->c;
    return a->off - b->off;
}

/* Plans tokens [t0, t1) of the batch: pbase, groups (see above). */
static void attn_plan(const model *m, model_state *s, const model_kv *kv, const model_batch *b, int t0, int t1) {
    const int bt = kv->block_tokens;
    int n_d = 0, max_nc = 0;
    s->pbase[0] = 0;
    for (int t = t0; t < t1; t++) { /* distinct sequences, in order of first appearance */
        int d = 0;
        while (d < n_d && s->dseq[d] != b->seq[t]) d++;
        if (d == n_d) s->dseq[n_d] = b->seq[t], s->dmax[n_d++] = -1;
        s->tok_d[t - t0] = d;
        s->dmax[d] = MAX(s->dmax[d], b->pos[t]);
        const int nc = n_chunks_of(b->pos[t] + 1);
        max_nc = MAX(max_nc, nc);
        s->pbase[t - t0 + 1] = s->pbase[t - t0] + nc;
    }
    int n_raw = 0, n_tok = 0;
    /* per distinct sequence: its class in chunk c, the group of its class
     * (whole chunk) and its own group (part of the chunk) */
    int32_t *cls = s->dcls, *full = s->dcls + n_d, *diag = s->dcls + 2 * n_d;
    for (int c = 0; c < max_nc; c++) {
        const int cbeg = c * ATTN_CHUNK, cend = cbeg + ATTN_CHUNK;
        /* classes of the sequences that hold the whole chunk: the first
         * earlier sequence with the same blocks, else themselves */
        for (int d = 0; d < n_d; d++) {
            cls[d] = -1, full[d] = -1, diag[d] = -1;
            if (s->dmax[d] + 1 < cend) continue;
            for (int r = 0; r < d && cls[d] < 0; r++)
                if (cls[r] == r && same_chunk_rows(b, bt, s->dseq[r], s->dseq[d], c)) cls[d] = r;
            if (cls[d] < 0) cls[d] = d;
        }
        /* count each group's tokens (groups numbered in order of their
         * first token), then give out offsets and fill in batch order */
        const int g0 = n_raw;
        for (int fill = 0; fill < 2; fill++) {
            for (int t = t0; t < t1; t++) {
                const int pos = b->pos[t], d = s->tok_d[t - t0];
                if (pos < cbeg) continue;
                int32_t *gi = pos + 1 >= cend ? &full[cls[d]] : &diag[d];
                if (*gi < 0) {
                    *gi = n_raw++;
                    s->grp_raw[*gi] = (attn_grp){c, b->seq[t], 0, 0, 0, cbeg};
                }
                attn_grp *g = &s->grp_raw[*gi];
                if (fill) s->attn_tok[g->off + g->n] = t;
                g->n++;
            }
            if (!fill)
                for (int k = g0; k < n_raw; k++) s->grp_raw[k].off = n_tok, n_tok += s->grp_raw[k].n, s->grp_raw[k].n = 0;
        }
        for (int k = g0; k < n_raw; k++) {
            attn_grp *g = &s->grp_raw[k];
            g->cost = 0;
            for (int i = 0; i < g->n; i++) g->cost += MIN(b->pos[s->attn_tok[g->off + i]] + 1, cend) - cbeg;
        }
    }
    /* cut groups larger than 1/8 of a thread's share into runs of tokens */
    int64_t total = 0;
    for (int k = 0; k < n_raw; k++) total += s->grp_raw[k].cost;
    const int64_t target = MAX(1, total * m->cfg.n_head_kv / (8 * s->n_threads));
    s->n_grp = 0;
    for (int k = 0; k < n_raw; k++) {
        const attn_grp g = s->grp_raw[k];
        int pieces = s->n_threads > 1 ? (int)MIN((int64_t)g.n, (g.cost + target - 1) / target) : 1;
        pieces = MAX(1, MIN(pieces, g.n / 8)); /* runs of at least 8 tokens */
        for (int i = 0; i < pieces; i++) {
            const int a = (int)((int64_t)g.n * i / pieces), e = (int)((int64_t)g.n * (i + 1) / pieces);
            attn_grp p = {g.c, g.seq, g.off + a, e - a, 0, g.p0};
            for (int j = a; j < e; j++) p.cost += MIN(b->pos[s->attn_tok[g.off + j]] + 1, (g.c + 1) * ATTN_CHUNK) - g.c * ATTN_CHUNK;
            s->grp[s->n_grp++] = p;
        }
    }
    qsort(s->grp, (size_t)s->n_grp, sizeof(attn_grp), grp_cmp);
}

/* Plans tokens [t0, t1) of a windowed layer where some token's window
 * starts past 0: every (token, part) is a group of its own (parts of
 * different tokens start at different positions, so they share no rows in
 * the kernel's sense; a window of 128 is a few K/V rows a token). */
static void attn_plan_window(model_state *s, const model_batch *b, int t0, int t1, int w) {
    int n = 0;
    s->pbase[0] = 0;
    for (int t = t0; t < t1; t++) {
        const int pos = b->pos[t], lo = attn_lo(pos, w), np = n_parts_of(pos, w);
        s->pbase[t - t0 + 1] = s->pbase[t - t0] + np;
        for (int c = 0; c < np; c++, n++) {
            const int p0 = lo + c * ATTN_CHUNK;
            s->attn_tok[n] = t;
            s->grp[n] = (attn_grp){c, b->seq[t], n, 1, MIN(pos + 1, p0 + ATTN_CHUNK) - p0, p0};
        }
    }
    s->n_grp = n;
    qsort(s->grp, (size_t)s->n_grp, sizeof(attn_grp), grp_cmp);
}

static void attn_worker(void *arg, int ith, int nth) {
    (void)nth;
    attn_job *j = arg;
    const model_config *c = &j->m->cfg;
    model_state *s = j->s;
    const int hd = c->head_dim, q_dim = c->n_head * hd, group = c->n_head / c->n_head_kv;
    const int kv_dim = c->n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scratch = s->attn_scratch + (size_t)ith * s->attn_scratch_floats;
    attn_query *aq = s->aq + (size_t)ith * s->max_tokens;
    for (;;) {
        const int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= j->n_units) break;
        const attn_grp *g = &s->grp[u / c->n_head_kv];
        const int h = u % c->n_head_kv, p0 = g->p0;
        const attn_view v = {
            .k = j->kv->k + (size_t)j->layer * j->kv->layer_elems,
            .v = j->kv->v + (size_t)j->layer * j->kv->layer_elems,
            .block_stride = j->kv->block_elems,
            .q8_group = j->kv->group,
            .kv_dim = kv_dim,
            .head_dim = hd,
            .block_tokens = j->kv->block_tokens,
            .block_table = j->b->seqs[g->seq].block_table,
        };
        for (int i = 0; i < g->n; i++) {
            const int t = s->attn_tok[g->off + i];
            const size_t pr = ((size_t)s->pbase[t - j->t0] + g->c) * c->n_head + (size_t)h * group;
            aq[i] = (attn_query){s->q + (size_t)t * q_dim + (size_t)h * group * hd, s->part_m + pr, s->part_l + pr,
                                 s->part_o + pr * hd, MIN(j->b->pos[t] + 1, p0 + ATTN_CHUNK)};
        }
        (v.q8_group ? kern->attn_part_q8 : kern->attn_part)(&v, h, group, aq, g->n, p0, scale, scratch);
        if (j->merge_inline)
            for (int i = 0; i < g->n; i++)
                for (int k = 0; k < group; k++)
                    attn_merge(1, hd, aq[i].m + k, aq[i].l + k, 1, aq[i].o + (size_t)k * hd, (size_t)hd,
                               j->sinks ? j->sinks[h * group + k] : -INFINITY,
                               s->att + (size_t)s->attn_tok[g->off + i] * q_dim + (size_t)(h * group + k) * hd);
    }
}

static void attn_merge_worker(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    const model_config *c = &j->m->cfg;
    const model_state *s = j->s;
    const int hd = c->head_dim, q_dim = c->n_head * hd;
    long begin, end;
    pool_split((long)(j->t1 - j->t0) * c->n_head, ith, nth, &begin, &end);
    for (long u = begin; u < end; u++) {
        const int t = j->t0 + (int)(u / c->n_head), h = (int)(u % c->n_head);
        const size_t pi = (size_t)s->pbase[t - j->t0] * c->n_head + (size_t)h;
        attn_merge(n_parts_of(j->b->pos[t], j->window), hd, s->part_m + pi, s->part_l + pi, (size_t)c->n_head,
                   s->part_o + pi * hd, (size_t)c->n_head * hd, j->sinks ? j->sinks[h] : -INFINITY,
                   s->att + (size_t)t * q_dim + (size_t)h * hd);
    }
}

static void attention(const model *m, model_state *s, const model_kv *kv, const model_batch *b, int layer) {
    const int T = b->n_tokens;
    const model_layer *L = &m->layers[layer];
    /* a windowed layer plans as a full one until some window starts past 0 */
    int w = 0;
    for (int t = 0; t < T && L->window > 0; t++)
        if (b->pos[t] >= L->window) w = L->window;
    long pairs = 0;
    for (int t = 0; t < T; t++) pairs += n_parts_of(b->pos[t], w);
    const bool one_wave = pairs <= s->part_cap;
    for (int t0 = 0; t0 < T;) {
        int t1 = t0, n_pairs = 0, max_nc = 0;
        while (t1 < T && n_pairs + n_parts_of(b->pos[t1], w) <= s->part_cap) {
            max_nc = MAX(max_nc, n_parts_of(b->pos[t1], w));
            n_pairs += n_parts_of(b->pos[t1++], w);
        }
        if (layer == 0 || !one_wave || w != s->plan_window) {
            if (w) attn_plan_window(s, b, t0, t1, w);
            else attn_plan(m, s, kv, b, t0, t1);
            s->plan_window = w;
        }
        attn_job job = {m, s, kv, b, layer, w, L->sinks, t0, t1, s->n_grp * m->cfg.n_head_kv, max_nc == 1, 0};
        pool_run(s->pool, attn_worker, &job);
        if (!job.merge_inline) pool_run(s->pool, attn_merge_worker, &job);
        t0 = t1;
    }
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
    if (j->phase == PH_NORM_ATTN) {
        kern_rmsnorm_rows(s->xb + (size_t)t0 * D, s->x + (size_t)t0 * D, (size_t)D, L->attn_norm, D, c->rms_eps, t1 - t0);
        return;
    }
    for (int t = t0; t < t1; t++) {
        float *x = s->x + (size_t)t * D, *o = s->o + (size_t)t * D;
        switch (j->phase) {
        case PH_NORM_ATTN:
            break;
        case PH_QKV_POST: {
            float *q = s->q + (size_t)t * q_dim, *k = s->k + (size_t)t * kv_dim, *v = s->v + (size_t)t * kv_dim;
            if (L->bq) {
                for (int i = 0; i < q_dim; i++) q[i] += L->bq[i];
                for (int i = 0; i < kv_dim; i++) k[i] += L->bk[i], v[i] += L->bv[i];
            }
            if (L->q_norm) {
                kern_rmsnorm_rows(q, q, (size_t)hd, L->q_norm, hd, c->rms_eps, c->n_head);
                kern_rmsnorm_rows(k, k, (size_t)hd, L->k_norm, hd, c->rms_eps, c->n_head_kv);
            }
            rope_apply(c, q, c->n_head, s->cosv + (size_t)t * half, s->sinv + (size_t)t * half);
            rope_apply(c, k, c->n_head_kv, s->cosv + (size_t)t * half, s->sinv + (size_t)t * half);
            const model_seq *sq = &j->b->seqs[j->b->seq[t]];
            /* the cache is f16: one rounding rule (nearest-even, f32_to_fp16)
             * whichever kernel table reads it back */
            const int pos = j->b->pos[t], bt = j->kv->block_tokens;
            if (j->kv->type == MODEL_KV_Q8_0) { /* attn.h's q8_0 layout, the one quantizer */
                const model_kv *kv = j->kv;
                const size_t blk = (size_t)sq->block_table[pos / bt] * kv->block_elems + (size_t)j->layer * kv->layer_elems;
                int8_t *kb = (int8_t *)(kv->k + blk), *vb = (int8_t *)(kv->v + blk);
                uint16_t *ks = (uint16_t *)(kb + (size_t)bt * kv_dim), *vs = (uint16_t *)(vb + (size_t)bt * kv_dim);
                const int jj = pos % bt, ng = kv_dim / kv->group;
                attn_q8_quantize(k, kv_dim, kv->group, kb + jj, (size_t)bt, ks + jj, (size_t)bt);
                attn_q8_quantize(v, kv_dim, kv->group, vb + (size_t)jj * kv_dim, 1, vs + (size_t)jj * ng, 1);
                break;
            }
            uint16_t *vr = kv_row(j->kv, j->kv->v, c, sq, j->layer, pos);
            /* K is stored transposed in its block (attn.h): element i of
             * this key is bt further than element i-1 */
            uint16_t *kc = kv_row(j->kv, j->kv->k, c, sq, j->layer, pos - pos % bt) + pos % bt;
            kern_f16_store(kc, (size_t)bt, k, kv_dim);
            kern_f16_store(vr, 1, v, kv_dim);
            break;
        }
        case PH_RESID_NORM_FFN: /* the norms after the loop */
            if (L->bo)
                for (int i = 0; i < D; i++) x[i] += o[i] + L->bo[i];
            else
                for (int i = 0; i < D; i++) x[i] += o[i];
            break;
        case PH_SWIGLU:
            kern_swiglu(s->hb + (size_t)t * c->n_ff, s->hb2 + (size_t)t * c->n_ff, c->n_ff);
            break;
        case PH_RESID:
            for (int i = 0; i < D; i++) x[i] += o[i];
            break;
        }
    }
    if (j->phase == PH_RESID_NORM_FFN)
        kern_rmsnorm_rows(s->xb + (size_t)t0 * D, s->x + (size_t)t0 * D, (size_t)D, L->ffn_norm, D, c->rms_eps, t1 - t0);
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
        if (c->n_expert > 0) {
            moe_forward(&L->moe, s->moe, p, s->xb, T, s->o);
            run_tokens(&tj, PH_RESID);
            continue;
        }
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
    if (s->rows[n_rows - 1] - s->rows[0] == n_rows - 1) /* one run of rows (decode, verification) */
        kern_rmsnorm_rows(s->xb, s->x + (size_t)s->rows[0] * D, (size_t)D, m->out_norm, D, c->rms_eps, n_rows);
    else
        for (int i = 0; i < n_rows; i++)
            kern_rmsnorm(s->xb + (size_t)i * D, s->x + (size_t)s->rows[i] * D, m->out_norm, D, c->rms_eps);
    kern_matmul(p, &m->output, s->xb, n_rows, logits, s->act);
    return n_rows;
}

void model_hidden(const model *m, const model_state *s, int t, float *out) {
    const model_config *c = &m->cfg;
    ASSERT(t >= 0 && t < s->max_tokens);
    kern_rmsnorm(out, s->x + (size_t)t * c->n_embd, m->out_norm, c->n_embd, c->rms_eps);
}
