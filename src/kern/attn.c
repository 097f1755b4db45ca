/*
 * attn.c — scalar paged attention (see attn.h). Two passes over the keys:
 * scores and their max, then exp-normalised weights applied to the values.
 * Sums run in position order so the result is independent of batching.
 */
#include "attn.h"

#include <math.h>
#include <string.h>

void attn_head(const attn_view *v, int kv_head, const float *q, int n_pos, float scale, float *out, float *scores) {
    const int hd = v->head_dim, bt = v->block_tokens;
    float mx = -INFINITY;
    for (int p = 0; p < n_pos; p++) {
        const float *kr = v->k + (size_t)v->block_table[p / bt] * v->block_stride + (size_t)(p % bt) * v->kv_dim +
                          (size_t)kv_head * hd;
        float s = 0;
        for (int i = 0; i < hd; i++) s += q[i] * kr[i];
        s *= scale;
        scores[p] = s;
        if (s > mx) mx = s;
    }
    float sum = 0;
    for (int p = 0; p < n_pos; p++) {
        scores[p] = expf(scores[p] - mx);
        sum += scores[p];
    }
    float inv = 1.0f / sum;
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int p = 0; p < n_pos; p++) {
        const float *vr = v->v + (size_t)v->block_table[p / bt] * v->block_stride + (size_t)(p % bt) * v->kv_dim +
                          (size_t)kv_head * hd;
        float w = scores[p] * inv;
        for (int i = 0; i < hd; i++) out[i] += w * vr[i];
    }
}
