/*
 * attn.h — attention of one query head over a sequence's paged KV.
 *
 * Place in the flow: kern/, called by model_forward once per (token, head).
 *
 * The KV rows of a sequence live in fixed-size blocks listed by its block
 * table; this layer's K row of position p and kv head h is at
 *
 *   k + table[p / block_tokens] * block_stride + (p % block_tokens) * kv_dim + h * head_dim
 *
 * The result for one (token, head) depends only on q and the KV rows — never
 * on what else is in the batch — so attention is batch-invariant.
 */
#ifndef KVLOOM_KERN_ATTN_H
#define KVLOOM_KERN_ATTN_H

#include <stddef.h>
#include <stdint.h>

typedef struct attn_view {
    const float *k, *v;         /* this layer's rows in block 0             */
    size_t block_stride;        /* floats from a block to the next          */
    int kv_dim;                 /* floats per token row (n_head_kv*head_dim) */
    int head_dim;
    int block_tokens;
    const int32_t *block_table; /* the sequence's blocks                    */
} attn_view;

/* out[head_dim] = softmax(q . K[0..n_pos) * scale) V[0..n_pos) for kv head
 * `kv_head`. `scores` is scratch of at least n_pos floats. */
void attn_head(const attn_view *v, int kv_head, const float *q, int n_pos, float scale, float *out, float *scores);

#endif
