/*
 * attn.h — attention of query heads over a sequence's paged KV, in chunks of
 * positions whose partial softmax results are merged in a fixed order.
 *
 * Place in the flow: kern/, called by model_forward for every (token, kv
 * head). The per-chunk kernel is in the kernel table (kern_ops.attn_part:
 * scalar here, SIMD in avx2.c/avx512.c); the merge is here.
 *
 * The KV rows of a sequence live in fixed-size blocks listed by its block
 * table, as IEEE half values (uint16_t, widened exactly to f32 when read); this layer's K row of position p and kv head h is at
 *
 *   k + table[p / block_tokens] * block_stride + (p % block_tokens) * kv_dim + h * head_dim
 *
 * Chunks. Positions 0..n_pos-1 are cut at multiples of ATTN_CHUNK. For each
 * chunk c and query head g a part is (m, l, o):
 *     m = max score, l = sum exp(s - m), o[i] = sum exp(s - m) v[i]
 * and the result is merged in chunk order:
 *     M = max m_c,  L = sum_c l_c e^(m_c - M),  O = sum_c o_c e^(m_c - M),
 *     out = O / L
 * (an online softmax with one rescale per chunk: no score matrix larger
 * than one chunk exists). Chunk boundaries depend only on positions, and
 * every part depends only on q and the chunk's KV rows, so a result does
 * not depend on what else is in the batch, on which thread computes which
 * chunk, or on whether the chunks of one query ran on one thread or many.
 */
#ifndef KVLOOM_KERN_ATTN_H
#define KVLOOM_KERN_ATTN_H

#include <stddef.h>
#include <stdint.h>

#define ATTN_CHUNK 256

typedef struct attn_view {
    const uint16_t *k, *v;      /* this layer's f16 rows in block 0         */
    size_t block_stride;        /* elements from a block to the next        */
    int kv_dim;                 /* elements per token row (n_head_kv*head_dim) */
    int head_dim;
    int block_tokens;
    const int32_t *block_table; /* the sequence's blocks                    */
} attn_view;

/* Part of attention for n_q query heads that share kv head `kv_head`, over
 * positions [p0, p1) (p1 - p0 <= ATTN_CHUNK, p0 < p1): q holds the n_q query
 * rows back to back (n_q * head_dim floats, already rotated); writes m[g],
 * l[g] and o[g*head_dim ...] as described above; scratch holds at least
 * n_q * ATTN_CHUNK floats. Scores are q.k * scale. */
typedef void (*attn_part_fn)(const attn_view *v, int kv_head, const float *q, int n_q, int p0, int p1, float scale,
                             float *m, float *l, float *o, float *scratch);

/* The scalar reference part (the kernel table's default). */
void attn_part_scalar(const attn_view *v, int kv_head, const float *q, int n_q, int p0, int p1, float scale, float *m,
                      float *l, float *o, float *scratch);

/* Merges n_parts parts of one query head, given in chunk order: part c has
 * m[c * m_stride], l[c * m_stride] and o + c * o_stride; writes out[head_dim].
 * Also used for a single part, so one chunk or many give the same bits as
 * any split of the same chunks. */
void attn_merge(int n_parts, int head_dim, const float *m, const float *l, size_t m_stride, const float *o,
                size_t o_stride, float *out);

/* Whole attention of one query head over positions 0..n_pos-1 using the
 * current kernel table (chunks computed here one after another, then
 * merged). scratch holds ATTN_CHUNK + 2*n_chunks + n_chunks*head_dim floats
 * (attn_scratch_floats). For tests and simple callers. */
void attn_head(const attn_view *v, int kv_head, const float *q, int n_pos, float scale, float *out, float *scratch);
size_t attn_scratch_floats(int n_pos, int head_dim);

#endif
