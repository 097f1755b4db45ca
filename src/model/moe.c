/*
 * moe.c — moe_forward: the MoE FFN layer of moe.h over a batch, tokens
 * grouped by expert.
 *
 * One call, T tokens, K = n_used selections each, S = T*K slots:
 *   1. router logits (kern_matmul over the pool), then on the caller the
 *      top-k and weights of every token, and the slots ordered by expert:
 *      expert e's tokens are slots off[e] .. off[e+1]-1, in token order;
 *   2. each token's input row converted to the gate/up activation format,
 *      then copied to its slots (slots of one expert are contiguous, so its
 *      GEMM reads them as one activation matrix);
 *   3. units of (expert, gate or up, rows r0..r1) over the pool: hg, hu;
 *   4. per slot: biases, act(), conversion to the down activation format;
 *   5. units of (expert, down rows r0..r1) over the pool: y;
 *   6. per token: out = sum_j w_j * y[slot of selection j] (+ down bias).
 * Steps 2, 4 and 6 run on the caller when they are small (decode), where a
 * pool dispatch would cost more than the work.
 */
#include "moe.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"

/* Below this many elements a per-row step runs on the caller. */
#define MOE_INLINE_ELEMS 32768
/* Units per thread the row blocks aim at: enough for the atomic counter to
 * even out experts of different loads, few enough to keep rows long. */
#define MOE_UNITS_PER_THREAD 8
#define MOE_MIN_ROWS 16

typedef struct moe_unit {
    int32_t e;      /* expert                       */
    int32_t which;  /* 0 gate, 1 up, 2 down         */
    int32_t r0, r1; /* rows                         */
} moe_unit;

struct moe_scratch {
    int max_tokens, max_used, max_expert, max_ff, n_embd, n_threads;
    float *logits;     /* (T, E) router output                                 */
    int32_t *sel;      /* (T, K) selected experts, in summation order          */
    float *wts;        /* (T, K) their weights                                 */
    int32_t *off;      /* (E+1) first slot of each expert                      */
    int32_t *fill;     /* (E) slots filled so far (grouping)                   */
    int32_t *slot_tok; /* (S) token of each slot                               */
    int32_t *tok_slot; /* (T, K) slot of each selection                        */
    uint8_t *taken;    /* (E) top-k marks                                      */
    void *act_r;       /* (T) router activation rows                           */
    void *act_g;       /* (S) slot rows in gate's activation format            */
    void *act_u;       /* act_g, or act_u_buf when up's format differs         */
    void *act_u_buf;   /* (S) slot rows in up's activation format              */
    void *act_tg;      /* (T) token rows in gate's activation format           */
    void *act_tu;      /* (T) ... up's (when it differs)                        */
    int32_t *slot_exp; /* (S) expert of each slot                              */
    void *act_d;       /* (S) hidden rows in down's activation format          */
    float *hg, *hu;    /* (S, F)                                               */
    float *y;          /* (S, n_embd) expert outputs                           */
    moe_unit *units;
    int max_units;
    size_t last_bytes;
    size_t bytes; /* the buffers (moe_scratch_bytes) */
};

static size_t act_rows_bytes(const kern_mat *w, size_t rows) {
    const size_t rb = kern_act_row_bytes(w->type, w->n_in);
    return rows * (rb ? rb : (size_t)w->n_in * sizeof(float));
}

/* The buffers are counted in s->bytes (moe_scratch_bytes). */
#define ALLOC_A(n) (s->bytes += (n), xaligned_alloc(n))
#define ALLOC_M(n) (s->bytes += (n), xmalloc(n))
moe_scratch *moe_scratch_new(const moe_ffn *const *layers, int n_layers, int max_tokens, int n_threads) {
    ASSERT(n_layers > 0 && max_tokens > 0);
    moe_scratch *s = xcalloc(1, sizeof *s);
    s->max_tokens = max_tokens;
    s->n_threads = MAX(1, n_threads);
    size_t ar = 0, ag = 0, au = 0, ad = 0, atg = 0, atu = 0;
    int max_units = 0;
    for (int l = 0; l < n_layers; l++) {
        const moe_ffn *f = layers[l];
        s->max_used = MAX(s->max_used, f->n_used);
        s->max_expert = MAX(s->max_expert, f->n_expert);
        s->max_ff = MAX(s->max_ff, f->n_ff);
        s->n_embd = MAX(s->n_embd, f->n_embd);
        const size_t S = (size_t)max_tokens * (size_t)f->n_used;
        ar = MAX(ar, act_rows_bytes(&f->router, (size_t)max_tokens));
        ag = MAX(ag, act_rows_bytes(&f->gate, S));
        au = MAX(au, act_rows_bytes(&f->up, S));
        ad = MAX(ad, act_rows_bytes(&f->down, S));
        atg = MAX(atg, act_rows_bytes(&f->gate, (size_t)max_tokens));
        atu = MAX(atu, act_rows_bytes(&f->up, (size_t)max_tokens));
        /* units: every expert's rows in blocks of at least 8 */
        max_units = MAX(max_units, f->n_expert * (int)((2 * (int64_t)f->n_ff + 7) / 8 + 2));
        max_units = MAX(max_units, f->n_expert * (int)(((int64_t)f->n_embd + 7) / 8 + 1));
    }
    const size_t T = (size_t)max_tokens, K = (size_t)s->max_used, E = (size_t)s->max_expert, S = T * K;
    s->logits = ALLOC_A(T * E * sizeof(float));
    s->sel = ALLOC_M(S * sizeof(int32_t));
    s->wts = ALLOC_M(S * sizeof(float));
    s->off = ALLOC_M((E + 1) * sizeof(int32_t));
    s->fill = ALLOC_M(E * sizeof(int32_t));
    s->slot_tok = ALLOC_M(S * sizeof(int32_t));
    s->tok_slot = ALLOC_M(S * sizeof(int32_t));
    s->taken = ALLOC_M(E);
    s->act_r = ALLOC_A(MAX(ar, (size_t)64));
    s->act_g = ALLOC_A(MAX(ag, (size_t)64));
    s->act_u_buf = ALLOC_A(MAX(au, (size_t)64));
    s->slot_exp = ALLOC_M(S * sizeof(int32_t));
    s->act_tg = ALLOC_A(MAX(atg, (size_t)64));
    s->act_tu = ALLOC_A(MAX(atu, (size_t)64));
    s->act_d = ALLOC_A(MAX(ad, (size_t)64));
    s->hg = ALLOC_A(S * (size_t)s->max_ff * sizeof(float));
    s->hu = ALLOC_A(S * (size_t)s->max_ff * sizeof(float));
    s->y = ALLOC_A(S * (size_t)s->n_embd * sizeof(float));
    s->max_units = max_units;
    s->units = ALLOC_M((size_t)max_units * sizeof(moe_unit));
    return s;
}

#undef ALLOC_A
#undef ALLOC_M

size_t moe_scratch_bytes(const moe_scratch *s) { return s ? sizeof *s + s->bytes : 0; }

void moe_scratch_free(moe_scratch *s) {
    if (!s) return;
    void *bufs[] = {s->logits, s->sel,   s->wts,   s->off,   s->fill, s->slot_tok, s->tok_slot, s->taken,
                    s->act_r,  s->act_g, s->act_u_buf, s->slot_exp, s->act_tg, s->act_tu, s->act_d, s->hg,   s->hu,       s->y,        s->units};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(s);
}

const int32_t *moe_last_experts(const moe_scratch *s) { return s->sel; }
const float *moe_last_weights(const moe_scratch *s) { return s->wts; }
size_t moe_last_bytes(const moe_scratch *s) { return s->last_bytes; }

/* ---- routing ---- */

/* Top-k of token t's logits and their weights (moe.h). */
static void route_token(const moe_ffn *f, moe_scratch *s, int t) {
    const int E = f->n_expert, K = f->n_used;
    float *lg = s->logits + (size_t)t * E;
    if (f->router_bias)
        for (int i = 0; i < E; i++) lg[i] += f->router_bias[i];
    int32_t *sel = s->sel + (size_t)t * K;
    float *w = s->wts + (size_t)t * K;
    memset(s->taken, 0, (size_t)E);
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int i = 0; i < E; i++) /* strict >: the lower index wins a tie */
            if (!s->taken[i] && (best < 0 || lg[i] > lg[best])) best = i;
        s->taken[best] = 1;
        sel[j] = best;
    }
    const double mx = lg[sel[0]];
    double sum_sel = 0;
    for (int j = 0; j < K; j++) sum_sel += exp((double)lg[sel[j]] - mx);
    switch (f->gating) {
    case MOE_GATE_SOFTMAX_NORM: /* p_j / sum_sel p = e_j / sum_sel e: the full normaliser cancels */
    case MOE_GATE_TOPK_SOFTMAX:
        for (int j = 0; j < K; j++) w[j] = (float)(exp((double)lg[sel[j]] - mx) / sum_sel);
        break;
    case MOE_GATE_SOFTMAX: {
        double z = 0;
        for (int i = 0; i < E; i++) z += exp((double)lg[i] - mx);
        for (int j = 0; j < K; j++) w[j] = (float)(exp((double)lg[sel[j]] - mx) / z);
        break;
    }
    }
}

/* ---- per-row steps ---- */

typedef struct moe_job {
    const moe_ffn *f;
    moe_scratch *s;
    const float *x;
    float *out;
    int T, S;
    int n_units;
    _Atomic int next;
} moe_job;

/* Step 2a: each token's row in the gate/up activation formats (once per
 * token, not once per slot). */
static void conv_tok(const moe_job *j, long a, long b) {
    const moe_ffn *f = j->f;
    moe_scratch *s = j->s;
    const kern_act_fn ag = kern->act[f->gate.type], au = kern->act[f->up.type];
    const size_t rg = kern_act_row_bytes(f->gate.type, f->n_embd), ru = kern_act_row_bytes(f->up.type, f->n_embd);
    for (long t = a; t < b; t++) {
        const float *xr = j->x + (size_t)t * f->n_embd;
        if (ag) ag(xr, (char *)s->act_tg + (size_t)t * rg, f->n_embd);
        if (au && s->act_u != s->act_g) au(xr, (char *)s->act_tu + (size_t)t * ru, f->n_embd);
    }
}

/* Step 2b: the rows gathered in slot order (an expert's tokens contiguous). */
static void gather(const moe_job *j, long a, long b) {
    const moe_ffn *f = j->f;
    moe_scratch *s = j->s;
    const bool cg = kern->act[f->gate.type] != NULL, cu = kern->act[f->up.type] != NULL;
    const size_t rg = act_rows_bytes(&f->gate, 1), ru = act_rows_bytes(&f->up, 1);
    for (long i = a; i < b; i++) {
        const size_t t = (size_t)s->slot_tok[i];
        memcpy((char *)s->act_g + (size_t)i * rg, cg ? (const char *)s->act_tg + t * rg : (const char *)(j->x + t * f->n_embd), rg);
        if (s->act_u == s->act_g) continue;
        memcpy((char *)s->act_u + (size_t)i * ru, cu ? (const char *)s->act_tu + t * ru : (const char *)(j->x + t * f->n_embd), ru);
    }
}

/* gpt-oss's activation (moe.h): with g' = min(g, limit) and
 * u' = clamp(u, -limit, limit), g' sigmoid(alpha g') (u' + 1) =
 * silu(alpha g') (u' + 1) / alpha, so the clamps and scalings run here
 * (comparisons the compiler can vectorise; fminf/fmaxf were library calls)
 * and the exponentials in the table's SIMD SwiGLU. A NaN gate or up becomes
 * the limit, as with fminf/fmaxf. Each element depends only on its own g
 * and u (batch invariance). u is scratch: overwritten. */
static void swiglu_oai(float *g, float *u, int n, float alpha, float limit) {
    const float inv = 1.0f / alpha;
    for (int k = 0; k < n; k++) {
        const float x = g[k] < limit ? g[k] : limit, y0 = u[k] > -limit ? u[k] : -limit, y = y0 < limit ? y0 : limit;
        g[k] = alpha * x;
        u[k] = (y + 1.0f) * inv;
    }
    kern_swiglu(g, u, n);
}

/* Step 4: biases, act(), the down activation format. */
static void mid(const moe_job *j, long a, long b) {
    const moe_ffn *f = j->f;
    moe_scratch *s = j->s;
    const int F = f->n_ff;
    const kern_act_fn ad = kern->act[f->down.type];
    const size_t rd = kern_act_row_bytes(f->down.type, F);
    for (long i = a; i < b; i++) {
        float *g = s->hg + (size_t)i * F, *u = s->hu + (size_t)i * F;
        if (f->gate_bias || f->up_bias) {
            const int ex = s->slot_exp[i];
            if (f->gate_bias)
                for (int k = 0; k < F; k++) g[k] += f->gate_bias[(size_t)ex * F + k];
            if (f->up_bias)
                for (int k = 0; k < F; k++) u[k] += f->up_bias[(size_t)ex * F + k];
        }
        switch (f->act) {
        case MOE_ACT_SILU:
            kern_swiglu(g, u, F);
            break;
        case MOE_ACT_SWIGLU_OAI:
            swiglu_oai(g, u, F, f->alpha, f->limit);
            break;
        }
        if (ad) ad(g, (char *)s->act_d + (size_t)i * rd, F);
        else memcpy((float *)s->act_d + (size_t)i * F, g, sizeof(float) * (size_t)F);
    }
}

/* Step 6: each token's weighted sum, in its selection order. */
static void combine(const moe_job *j, long a, long b) {
    const moe_ffn *f = j->f;
    const moe_scratch *s = j->s;
    const int D = f->n_embd, K = f->n_used;
    for (long t = a; t < b; t++) {
        float *o = j->out + (size_t)t * D;
        memset(o, 0, sizeof(float) * (size_t)D);
        for (int k = 0; k < K; k++) {
            const float w = s->wts[t * K + k];
            const float *yr = s->y + (size_t)s->tok_slot[t * K + k] * D;
            const float *db = f->down_bias ? f->down_bias + (size_t)s->sel[t * K + k] * D : NULL;
            if (db)
                for (int i = 0; i < D; i++) o[i] += w * (yr[i] + db[i]);
            else
                for (int i = 0; i < D; i++) o[i] += w * yr[i];
        }
    }
}

typedef void (*row_fn)(const moe_job *, long, long);
typedef struct row_task {
    const moe_job *j;
    row_fn fn;
    long n;
} row_task;

static void row_task_run(void *arg, int ith, int nth) {
    const row_task *r = arg;
    long a, b;
    pool_split(r->n, ith, nth, &a, &b);
    r->fn(r->j, a, b);
}

static void per_rows(pool *p, const moe_job *j, row_fn fn, long n, long elems_per_row) {
    if (n * elems_per_row <= MOE_INLINE_ELEMS || !p) {
        fn(j, 0, n);
        return;
    }
    row_task r = {j, fn, n};
    pool_run(p, row_task_run, &r);
}

/* ---- expert GEMM units ---- */

/* Cuts every active expert's rows of the given matrices into blocks of about
 * equal cost (rows x tokens), multiples of 8 rows. */
static int plan_units(const moe_ffn *f, moe_scratch *s, bool down, int n_threads) {
    const int E = f->n_expert;
    const int64_t rows_each = down ? f->n_embd : f->n_ff;
    const int n_mat = down ? 1 : 2;
    int64_t total = 0;
    for (int e = 0; e < E; e++) total += (int64_t)(s->off[e + 1] - s->off[e]) * rows_each * n_mat;
    const int64_t target = MAX((int64_t)1, total / ((int64_t)n_threads * MOE_UNITS_PER_THREAD));
    int n = 0;
    for (int e = 0; e < E; e++) {
        const int nt = s->off[e + 1] - s->off[e];
        if (!nt) continue;
        int64_t rows = (target + nt - 1) / nt;
        rows = MAX((int64_t)MOE_MIN_ROWS, (rows + 7) & ~(int64_t)7);
        if (n_threads == 1) rows = rows_each;
        for (int m = 0; m < n_mat; m++)
            for (int64_t r0 = 0; r0 < rows_each; r0 += rows) {
                ASSERT(n < s->max_units);
                s->units[n++] = (moe_unit){e, down ? 2 : m, (int32_t)r0, (int32_t)MIN(rows_each, r0 + rows)};
            }
    }
    return n;
}

static void unit_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    moe_job *j = arg;
    const moe_ffn *f = j->f;
    moe_scratch *s = j->s;
    for (;;) {
        const int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= j->n_units) break;
        const moe_unit *un = &s->units[u];
        const int e = un->e, o = s->off[e], nt = s->off[e + 1] - o;
        const kern_mat *base;
        size_t stride;
        const void *act;
        float *y;
        int64_t ldy;
        if (un->which == 0) base = &f->gate, stride = f->gate_stride, act = s->act_g, y = s->hg, ldy = f->n_ff;
        else if (un->which == 1) base = &f->up, stride = f->up_stride, act = s->act_u, y = s->hu, ldy = f->n_ff;
        else base = &f->down, stride = f->down_stride, act = s->act_d, y = s->y, ldy = f->n_embd;
        const kern_mat w = moe_expert(base, stride, e);
        const size_t arb = act_rows_bytes(base, 1);
        kern_matmul_rows(&w, un->r0, un->r1, (const char *)act + (size_t)o * arb, arb, nt, y + (size_t)o * ldy, ldy);
    }
}

static void run_units(pool *p, moe_job *j, bool down) {
    j->n_units = plan_units(j->f, j->s, down, p ? pool_size(p) : 1);
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    if (p) pool_run(p, unit_worker, j);
    else unit_worker(j, 0, 1);
}

void moe_forward(const moe_ffn *f, moe_scratch *s, pool *p, const float *x, int T, float *out) {
    ASSERT(T >= 1 && T <= s->max_tokens && f->n_used <= s->max_used && f->n_expert <= s->max_expert);
    const int E = f->n_expert, K = f->n_used, S = T * K;
    /* 1. routing, then the slots grouped by expert (counting sort, token order within an expert) */
    kern_matmul(p, &f->router, x, T, s->logits, s->act_r);
    memset(s->off, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int t = 0; t < T; t++) {
        route_token(f, s, t);
        for (int k = 0; k < K; k++) s->off[s->sel[t * K + k] + 1]++;
    }
    for (int e = 0; e < E; e++) s->off[e + 1] += s->off[e], s->fill[e] = 0;
    s->last_bytes = (size_t)f->router.n_out * f->router.row_bytes;
    for (int e = 0; e < E; e++)
        if (s->off[e + 1] > s->off[e]) s->last_bytes += f->gate_stride + f->up_stride + f->down_stride;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            const int e = s->sel[t * K + k], slot = s->off[e] + s->fill[e]++;
            s->slot_tok[slot] = t;
            s->slot_exp[slot] = e;
            s->tok_slot[t * K + k] = slot;
        }
    /* the up rows share the gate's converted rows when their formats agree */
    s->act_u = kern_act_type(f->up.type) == kern_act_type(f->gate.type) ? s->act_g : s->act_u_buf;
    moe_job j = {.f = f, .s = s, .x = x, .out = out, .T = T, .S = S};
    per_rows(p, &j, conv_tok, T, f->n_embd);    /* 2 */
    per_rows(p, &j, gather, S, f->n_embd / 8);  /*   (a copy: cheap per element) */
    run_units(p, &j, false);                    /* 3 */
    per_rows(p, &j, mid, S, f->n_ff);           /* 4 */
    run_units(p, &j, true);                     /* 5 */
    per_rows(p, &j, combine, T, (long)K * f->n_embd); /* 6 */
}
