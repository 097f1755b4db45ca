/*
 * attn.c — the scalar reference of chunked paged attention and the merge of
 * chunk parts (see attn.h for the scheme and why it is batch-invariant).
 *
 * Place in the flow: kern/; model_forward calls kern->attn_part per (group
 * of tokens, kv head, chunk) and attn_merge per (token, head).
 *
 * The reference part handles one query at a time, in two passes over its
 * positions: scores and their max, then exp-weights summed and applied to
 * the values, in position order (so grouping is trivially invisible). The
 * merge adds parts in chunk order in float. Thread: pure functions.
 */
#include "attn.h"

#include <math.h>
#include <string.h>

#include "../base/base.h"
#include "kern.h"

/* V row of position p (row-major). */
static inline const uint16_t *v_at(const attn_view *v, int p, int kv_head) {
    return v->v + (size_t)v->block_table[p / v->block_tokens] * v->block_stride +
           (size_t)(p % v->block_tokens) * v->kv_dim + (size_t)kv_head * v->head_dim;
}
/* Element 0 of position p's key (K^T: element d is block_tokens * d further). */
static inline const uint16_t *k_at(const attn_view *v, int p, int kv_head) {
    return v->k + (size_t)v->block_table[p / v->block_tokens] * v->block_stride +
           (size_t)kv_head * v->head_dim * v->block_tokens + (size_t)(p % v->block_tokens);
}

void attn_part_scalar(const attn_view *v, int kv_head, int n_head, const attn_query *qs, int n_tok, int p0,
                      float scale, float *scratch) {
    const int hd = v->head_dim;
    for (int t = 0; t < n_tok; t++)
        for (int g = 0; g < n_head; g++) {
            const int n = qs[t].p1 - p0;
            const float *qg = qs[t].q + (size_t)g * hd;
            float *sc = scratch, *og = qs[t].o + (size_t)g * hd;
            float mx = -INFINITY;
            for (int i = 0; i < n; i++) {
                const uint16_t *kr = k_at(v, p0 + i, kv_head);
                float s = 0;
                for (int d = 0; d < hd; d++) s += qg[d] * fp16_to_f32(kr[(size_t)d * v->block_tokens]);
                sc[i] = s * scale;
                mx = fmaxf(mx, sc[i]);
            }
            float sum = 0;
            memset(og, 0, sizeof(float) * (size_t)hd);
            for (int i = 0; i < n; i++) {
                const float e = expf(sc[i] - mx);
                const uint16_t *vr = v_at(v, p0 + i, kv_head);
                sum += e;
                for (int d = 0; d < hd; d++) og[d] += e * fp16_to_f32(vr[d]);
            }
            qs[t].m[g] = mx;
            qs[t].l[g] = sum;
        }
}

void attn_merge(int n_parts, int head_dim, const float *m, const float *l, size_t m_stride, const float *o,
                size_t o_stride, float sink, float *out) {
    float mx = sink;
    for (int c = 0; c < n_parts; c++) mx = fmaxf(mx, m[c * m_stride]);
    float sum = 0;
    for (int d = 0; d < head_dim; d++) out[d] = 0;
    for (int c = 0; c < n_parts; c++) {
        const float f = expf(m[c * m_stride] - mx);
        const float *oc = o + c * o_stride;
        sum += l[c * m_stride] * f;
        for (int d = 0; d < head_dim; d++) out[d] += oc[d] * f;
    }
    sum += expf(sink - mx); /* +0 with no sink */
    const float inv = 1.0f / sum;
    for (int d = 0; d < head_dim; d++) out[d] *= inv;
}

size_t attn_scratch_floats(int n_pos, int head_dim) {
    const size_t nc = (size_t)(n_pos + ATTN_CHUNK - 1) / ATTN_CHUNK;
    return attn_part_scratch_floats(head_dim) + 2 * nc + nc * (size_t)head_dim;
}

void attn_head(const attn_view *v, int kv_head, const float *q, int n_pos, float scale, float *out, float *scratch) {
    const int nc = (n_pos + ATTN_CHUNK - 1) / ATTN_CHUNK, hd = v->head_dim;
    float *m = scratch + attn_part_scratch_floats(hd), *l = m + nc, *o = l + nc;
    for (int c = 0; c < nc; c++) {
        const int p0 = c * ATTN_CHUNK;
        const attn_query aq = {q, &m[c], &l[c], o + (size_t)c * hd, p0 + ATTN_CHUNK < n_pos ? p0 + ATTN_CHUNK : n_pos};
        kern->attn_part(v, kv_head, 1, &aq, 1, p0, scale, scratch);
    }
    attn_merge(nc, hd, m, l, 1, o, (size_t)hd, -INFINITY, out);
}
