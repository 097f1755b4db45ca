/*
 * attn.h — attention of query heads over a sequence's paged KV, in chunks of
 * positions whose partial softmax results are merged in a fixed order.
 *
 * Place in the flow: kern/, called by model_forward for every (token, kv
 * head). The per-chunk kernel is in the kernel table (kern_ops.attn_part:
 * scalar here, SIMD in avx2.c/avx512.c); the merge is here.
 *
 * The KV of a sequence lives in fixed-size blocks listed by its block
 * table, as IEEE half values (uint16_t, widened exactly to f32 when read).
 * With B = block_tokens, j = p % B and blk = table[p / B], this layer's
 * V row of position p and kv head h is at
 *
 *   v + blk * block_stride + j * kv_dim + h * head_dim           (row-major)
 *
 * and K is stored transposed within the block: element d of that key is at
 *
 *   k + blk * block_stride + (h * head_dim + d) * B + j           (K^T)
 *
 * so the B keys of a block are contiguous for every dimension: attention
 * widens them W at a time straight into the K^T tiles its score products
 * run on (a conversion, not a transpose), which is most of what decode at
 * a long context costs. A block stays a self-contained run of bytes
 * (copied, shared and spilled whole).
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
 *
 * Groups. Many queries read the same chunk: the heads of a token that share
 * a kv head, every token of a prefill batch that sees the whole chunk (an
 * agent's new turn over its cached context), and decode tokens of
 * sequences whose block tables map the chunk to the same physical blocks (a
 * shared cached prefix). attn_part takes such a group and reads and widens
 * each K and V row once for all of its queries. Every query's arithmetic is
 * fixed by its own inputs (see attn_part), so grouping changes the speed,
 * never the bits: model_forward may group a token's chunks differently from
 * one batch to the next and still produce the same logits.
 */
#ifndef KVLOOM_KERN_ATTN_H
#define KVLOOM_KERN_ATTN_H

#include <stddef.h>
#include <stdint.h>

#define ATTN_CHUNK 256

typedef struct attn_view {
    const uint16_t *k, *v;      /* this layer's f16 K^T / V rows in block 0 */
    size_t block_stride;        /* elements from a block to the next        */
    int q8_group;               /* 0: f16 (above); else q8_0 (model.h's
                                   model_kv): from a block's layer base, the
                                   int8 K^T (kv_dim x B) then its f16 scales
                                   (kv_dim / G x B), G = q8_group; the int8 V
                                   rows (B x kv_dim) then their scales
                                   (B x kv_dim / G). Read by attn_part_q8. */
    int kv_dim;                 /* elements per token row (n_head_kv*head_dim) */
    int head_dim;
    int block_tokens;
    const int32_t *block_table; /* the sequence's blocks                    */
} attn_view;

/* The queries of one token in a part: n_head query heads (all reading the
 * same kv head), their outputs, and how far this token sees. */
typedef struct attn_query {
    const float *q; /* n_head rows of head_dim floats, back to back (rotated) */
    float *m, *l;   /* n_head values each                                  */
    float *o;       /* n_head rows of head_dim floats                      */
    int p1;         /* the token sees positions < p1: p0 < p1 <= p0 + ATTN_CHUNK */
} attn_query;

/* Floats of scratch an attn_part call needs (per thread). */
#define ATTN_QBLOCK 48 /* queries whose scores are held at once */
static inline size_t attn_part_scratch_floats(int head_dim) {
    /* f16: a K^T tile and a block of scores; q8_0: K^T and V tiles and one
     * query's scores */
    return (size_t)ATTN_CHUNK * ((size_t)2 * head_dim + ATTN_QBLOCK) + 64;
}

/* Part of attention over the chunk that starts at p0 (model_forward: a
 * multiple of ATTN_CHUNK; any p0 >= 0 works) for a group of n_tok >= 1
 * tokens whose rows in that chunk are the rows `v` addresses (the same
 * sequence, or sequences sharing the chunk's physical blocks); `v` must
 * address every position below the largest p1. For token i and head g <
 * n_head, over positions
 * [p0, qs[i].p1), writes qs[i].m[g], qs[i].l[g] and qs[i].o + g*head_dim as
 * described above; scores are q.k * scale. Each query's results depend only
 * on its q row, p0, its p1 and the rows — never on n_tok, n_head or the
 * other queries of the group — so a group computes, bit for bit, what each
 * token would get alone (the caller groups tokens only to read and widen
 * the chunk's K and V rows once for all of them). Rows past a query's p1 do
 * not influence it, even when other queries of the group read them.
 * scratch: attn_part_scratch_floats(head_dim) floats, 64-byte aligned.
 * Thread: pure; any number of calls may run at once on different scratch. */
typedef void (*attn_part_fn)(const attn_view *v, int kv_head, int n_head, const attn_query *qs, int n_tok, int p0,
                             float scale, float *scratch);

/* The scalar reference part (the kernel table's default). */
void attn_part_scalar(const attn_view *v, int kv_head, int n_head, const attn_query *qs, int n_tok, int p0,
                      float scale, float *scratch);
/* The same contract over a q8_0 cache (v->q8_group > 0): each element read
 * as d * q (d widened from f16), then the scalar part's arithmetic. */
void attn_part_q8_scalar(const attn_view *v, int kv_head, int n_head, const attn_query *qs, int n_tok, int p0,
                         float scale, float *scratch);
/* The q8_0 rule of one row of n values in groups of g (n % g == 0):
 * d = max|x| / 127 rounded to f16, q = round(x / d) in [-127, 127]; q[i]
 * goes to q[i * q_stride], group j's d to d[j * d_stride]. */
void attn_q8_quantize(const float *x, int n, int g, int8_t *q, size_t q_stride, uint16_t *d, size_t d_stride);

/* Merges n_parts parts of one query head, given in chunk order: part c has
 * m[c * m_stride], l[c * m_stride] and o + c * o_stride; writes out[head_dim].
 * Also used for a single part, so one chunk or many give the same bits as
 * any split of the same chunks. sink: the head's attention-sink logit
 * (gpt-oss), a score that joins the denominator and weighs no value —
 * after the parts, M = max(M, sink), L += e^(sink - M) —, or -INFINITY for
 * none (then the bits are those of no sink). */
void attn_merge(int n_parts, int head_dim, const float *m, const float *l, size_t m_stride, const float *o,
                size_t o_stride, float sink, float *out);

/* Whole attention of one query head over positions 0..n_pos-1 using the
 * current kernel table (chunks computed here one after another, then
 * merged). scratch holds attn_scratch_floats(n_pos, head_dim) floats,
 * 64-byte aligned. For tests and simple callers. */
void attn_head(const attn_view *v, int kv_head, const float *q, int n_pos, float scale, float *out, float *scratch);
size_t attn_scratch_floats(int n_pos, int head_dim);

#endif
