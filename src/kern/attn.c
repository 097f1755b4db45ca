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

/* q8_0 rows: the layer base of position p's block. */
static inline const int8_t *q8_base(const uint16_t *arr, const attn_view *v, int p) {
    return (const int8_t *)(arr + (size_t)v->block_table[p / v->block_tokens] * v->block_stride);
}

/* Element d of position p's key, kv head h. */
static inline float q8_k(const attn_view *v, int p, int h, int d) {
    const int B = v->block_tokens, j = p % B, e = h * v->head_dim + d;
    const int8_t *b = q8_base(v->k, v, p);
    const uint16_t *sc = (const uint16_t *)(b + (size_t)B * v->kv_dim);
    return fp16_to_f32(sc[(size_t)(e / v->q8_group) * B + j]) * (float)b[(size_t)e * B + j];
}

/* Element d of position p's value, kv head h. */
static inline float q8_v(const attn_view *v, int p, int h, int d) {
    const int B = v->block_tokens, j = p % B, e = h * v->head_dim + d;
    const int8_t *b = q8_base(v->v, v, p);
    const uint16_t *sc = (const uint16_t *)(b + (size_t)B * v->kv_dim);
    return fp16_to_f32(sc[(size_t)j * (v->kv_dim / v->q8_group) + e / v->q8_group]) * (float)b[(size_t)j * v->kv_dim + e];
}

/* The reference part of either cache type: one query at a time, scores and
 * their max, then exp-weights summed and applied in position order. A
 * position's f16 key and value rows are found once, not per element (this
 * loop is where the sanitizer builds of the server tests spend their time;
 * docs/decisions.md, 2026-11-27). */
static void part_ref(const attn_view *v, int kv_head, int n_head, const attn_query *qs, int n_tok, int p0, float scale,
                     float *scratch) {
    const int hd = v->head_dim;
    const size_t B = (size_t)v->block_tokens;
    for (int t = 0; t < n_tok; t++)
        for (int g = 0; g < n_head; g++) {
            const int n = qs[t].p1 - p0;
            const float *qg = qs[t].q + (size_t)g * hd;
            float *sc = scratch, *og = qs[t].o + (size_t)g * hd;
            float mx = -INFINITY;
            for (int i = 0; i < n; i++) {
                float s = 0;
                if (v->q8_group) {
                    for (int d = 0; d < hd; d++) s += qg[d] * q8_k(v, p0 + i, kv_head, d);
                } else {
                    const uint16_t *kp = k_at(v, p0 + i, kv_head);
                    for (int d = 0; d < hd; d++) s += qg[d] * fp16_to_f32(kp[(size_t)d * B]);
                }
                sc[i] = s * scale;
                mx = fmaxf(mx, sc[i]);
            }
            float sum = 0;
            memset(og, 0, sizeof(float) * (size_t)hd);
            for (int i = 0; i < n; i++) {
                const float e = expf(sc[i] - mx);
                sum += e;
                if (v->q8_group) {
                    for (int d = 0; d < hd; d++) og[d] += e * q8_v(v, p0 + i, kv_head, d);
                } else {
                    const uint16_t *vp = v_at(v, p0 + i, kv_head);
                    for (int d = 0; d < hd; d++) og[d] += e * fp16_to_f32(vp[d]);
                }
            }
            qs[t].m[g] = mx;
            qs[t].l[g] = sum;
        }
}

void attn_part_scalar(const attn_view *v, int kv_head, int n_head, const attn_query *qs, int n_tok, int p0,
                      float scale, float *scratch) {
    ASSERT(!v->q8_group);
    part_ref(v, kv_head, n_head, qs, n_tok, p0, scale, scratch);
}

void attn_part_q8_scalar(const attn_view *v, int kv_head, int n_head, const attn_query *qs, int n_tok, int p0,
                         float scale, float *scratch) {
    ASSERT(v->q8_group > 0);
    part_ref(v, kv_head, n_head, qs, n_tok, p0, scale, scratch);
}

void attn_q8_quantize(const float *x, int n, int g, int8_t *q, size_t q_stride, uint16_t *d, size_t d_stride) {
    for (int j = 0; j < n / g; j++) {
        const float *xg = x + (size_t)j * g;
        float amax = 0;
        for (int i = 0; i < g; i++) amax = fmaxf(amax, fabsf(xg[i]));
        const uint16_t dh = f32_to_fp16(amax / 127.0f);
        const float df = fp16_to_f32(dh), id = df > 0 ? 1.0f / df : 0.0f;
        for (int i = 0; i < g; i++) {
            float r = roundf(xg[i] * id);
            r = r > 127 ? 127 : r < -127 ? -127 : r; /* d rounded to f16 may be a little small */
            q[(size_t)(j * g + i) * q_stride] = (int8_t)r;
        }
        d[(size_t)j * d_stride] = dh;
    }
}

void attn_merge(int n_parts, int head_dim, const float *m, const float *l, size_t m_stride, const float *o,
                size_t o_stride, float sink, float *out) {
    float mx = sink;
    for (int c = 0; c < n_parts; c++) mx = fmaxf(mx, m[c * m_stride]);
    float sum = 0;
    for (int d = 0; d < head_dim; d++) out[d] = 0;
    /* expf(0) is 1 and expf(-inf) +0 exactly, so the parts at the max (all
     * of them in decode at a short context) and the absent sink skip the
     * call: the same bits, and two of the three expf of a one-part merge,
     * which runs per (token, head) and showed in a verification step's
     * profile (docs/perf.md) */
    for (int c = 0; c < n_parts; c++) {
        const float dm = m[c * m_stride] - mx;
        const float f = dm == 0 ? 1.0f : expf(dm);
        const float *oc = o + c * o_stride;
        sum += l[c * m_stride] * f;
        for (int d = 0; d < head_dim; d++) out[d] += oc[d] * f;
    }
    if (sink != -INFINITY) sum += expf(sink - mx);
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
