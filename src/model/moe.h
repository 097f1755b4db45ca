/*
 * moe.h — a mixture-of-experts feed-forward layer: router -> top-k -> the
 * selected experts' FFNs -> their weighted sum, over a batch of tokens with
 * the tokens grouped by expert.
 *
 * Place in the flow: model/. forward.c calls moe_forward in place of the
 * dense FFN for layers that have experts; it calls kern/ (kern_matmul for the
 * router, kern_matmul_rows for the experts). It knows nothing of sequences or
 * the KV cache: its input is T normed rows, its output T rows to add to the
 * residual stream.
 *
 * For token t with input row h (n_embd):
 *
 *   logits = h R^T (+ router_bias)                       (n_expert)
 *   sel    = the n_used largest logits (ties: lower expert index first),
 *            in descending order
 *   w      = MOE_GATE_SOFTMAX_NORM:  p = softmax(logits over all experts),
 *                                    w_j = p[sel_j] / sum_i p[sel_i]
 *            MOE_GATE_SOFTMAX:       w_j = p[sel_j] (no renormalisation)
 *            MOE_GATE_TOPK_SOFTMAX:  w = softmax(logits[sel]) (gpt-oss)
 *   out    = sum_j w_j * down_e(act(gate_e h (+gb_e), up_e h (+ub_e))) (+db_e)
 *            with e = sel_j, summed in j order
 *   act    = MOE_ACT_SILU: silu(g) * u (qwen3moe)
 *            MOE_ACT_SWIGLU_OAI (gpt-oss): g' = min(g, limit),
 *            u' = clamp(u, -limit, limit), g' * sigmoid(alpha * g') * (u' + 1)
 *
 * (top-k of the logits equals top-k of their softmax, which is monotonic;
 * the softmax is summed in double, in expert order.)
 *
 * Grouping. At batch > 1 every expert that any token selected runs once per
 * step as one GEMM over all the tokens routed to it (prefill too), so its
 * weights are read once per step, not once per token. The work is cut into
 * units of (expert, block of rows) of about equal cost, which the pool's
 * threads claim from an atomic counter: an expert with many tokens is split
 * into many units, so uneven loads keep every thread busy.
 *
 * Batch invariance: the router logits come from kern_matmul and the expert
 * rows from kern_matmul_rows, whose elements do not depend on the other
 * tokens; the top-k and the weighted sum use only the token's own values in
 * a fixed order. A token's output is bitwise the same whichever tokens share
 * its step (tests/test_moe.c checks it against tokens run one at a time).
 *
 * Expert tensors are 3-D in GGUF, dims {n_in, n_out, n_expert}: expert e's
 * matrix is the n_out rows starting at data + e * n_out * row_bytes.
 *
 * No allocation in moe_forward: moe_scratch is sized once for max_tokens.
 * Thread: called by the pool's owner thread.
 */
#ifndef KVLOOM_MOE_H
#define KVLOOM_MOE_H

#include "../base/pool.h"
#include "../kern/kern.h"

typedef enum moe_gating {
    MOE_GATE_SOFTMAX_NORM = 0, /* softmax over all, top-k, renormalise (qwen3moe) */
    MOE_GATE_SOFTMAX,          /* softmax over all, top-k, as they are          */
    MOE_GATE_TOPK_SOFTMAX,     /* top-k of the logits, softmax over those       */
} moe_gating;

typedef enum moe_act {
    MOE_ACT_SILU = 0, /* silu(gate) * up                                      */
    MOE_ACT_SWIGLU_OAI, /* clamped, alpha-scaled (gpt-oss): see above          */
} moe_act;

/* One MoE FFN layer (views into the mapped file, biases converted at load). */
typedef struct moe_ffn {
    int n_expert;              /* experts (router rows)                       */
    int n_used;                /* selected per token, 1..n_expert             */
    int n_embd, n_ff;          /* model width, expert FF width                */
    moe_gating gating;
    moe_act act;
    float alpha, limit;        /* MOE_ACT_SWIGLU_OAI                          */
    kern_mat router;           /* (n_expert rows of n_embd)                   */
    const float *router_bias;  /* (n_expert) or NULL                          */
    kern_mat gate, up, down;   /* expert 0's matrix; n_out rows per expert    */
    size_t gate_stride, up_stride, down_stride; /* bytes from expert e to e+1 */
    const float *gate_bias, *up_bias; /* (n_expert, n_ff) or NULL             */
    const float *down_bias;    /* (n_expert, n_embd) or NULL                  */
} moe_ffn;

/* Expert e's matrix of an expert tensor whose expert 0 is `m`. */
static inline kern_mat moe_expert(const kern_mat *m, size_t stride, int e) {
    kern_mat r = *m;
    r.data = (const char *)m->data + stride * (size_t)e;
    return r;
}

/* Scratch of moe_forward for at most max_tokens tokens, shared by every MoE
 * layer of a model (layers' shapes may differ: pass each layer once). */
typedef struct moe_scratch moe_scratch;
moe_scratch *moe_scratch_new(const moe_ffn *const *layers, int n_layers, int max_tokens, int n_threads);
void moe_scratch_free(moe_scratch *s);
/* Bytes of its buffers (all allocated by moe_scratch_new). */
size_t moe_scratch_bytes(const moe_scratch *s);

/* out[t] = the layer's output for input row x[t], t in [0, T) (T <= the
 * scratch's max_tokens); rows of n_embd floats. out may not alias x. */
void moe_forward(const moe_ffn *f, moe_scratch *s, pool *p, const float *x, int T, float *out);

/* The routing of the last moe_forward call (tests, benchmarks): token t's
 * selected experts and weights, n_used each, in the order they are summed. */
const int32_t *moe_last_experts(const moe_scratch *s);
const float *moe_last_weights(const moe_scratch *s);

/* Bytes of expert weights read by the last moe_forward call (each selected
 * expert's gate, up and down once) and the router's: for roofline numbers. */
size_t moe_last_bytes(const moe_scratch *s);

#endif
