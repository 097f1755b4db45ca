/*
 * scalar.c — the scalar reference kernels: one dot product per weight type,
 * the activation converters, and the small vector ops (RMSNorm, SwiGLU,
 * softmax). Always compiled; the SIMD files are tested against it.
 *
 * Place in the flow: kern/, called by kern_matmul (kern.c) and model/.
 *
 * Activation formats (kern_act_type in kern.c):
 *   F32, F16, BF16 weights -> the f32 activation rows themselves; F16/BF16
 *     weights are widened to f32 element by element inside the dot product
 *     (exact), so these paths lose nothing to activation rounding.
 *   Q8_0, Q4_0, MXFP4     -> Q8_0 blocks (32 elements, f16 scale).
 *   Q4_K, Q5_K, Q6_K       -> Q8_K blocks (256 elements, f32 scale, bsums).
 *
 * Order of summation (the batch-invariance contract of kern.h): within a
 * quantised block everything is integer arithmetic, which is exact; across
 * blocks the per-block float terms are added one after another from the first
 * block to the last. Float rows are summed in 8 interleaved partial sums
 * (element i goes to sum i%8) combined as ((s0+s4)+(s2+s6))+((s1+s5)+(s3+s7)).
 * Each dot product depends only on its two rows, never on where they sit in
 * a batch or which thread runs it.
 *
 * Integer ranges: a Q8_0/Q4_0 block sum is at most 32*127*127 < 2^19; a Q4_K
 * super-block sum is at most 8*63*32*31*127 < 2^26 (Q5_K bound); Q6_K at most
 * 16*16*32*128*127 < 2^28; all fit int32.
 *
 * Thread: pure functions, called from pool workers.
 */
#include <math.h>

#include "../base/base.h"
#include "kern.h"
#include "quant.h"

/* ---- float rows ------------------------------------------------------------ */

static inline float sum8(const float s[8]) { return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7])); }

static void dot_f32(int64_t n, float *out, const void *wv, const void *av) {
    const float *w = wv, *a = av;
    /* eight named lanes, so the main loop keeps them in registers even in
     * the sanitizer builds (an indexed stack array there is instrumented
     * memory: the server tests, which run the scalar table, spent half
     * their time here); the same sums in the same order as s[j] */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += w[i] * a[i];
        s1 += w[i + 1] * a[i + 1];
        s2 += w[i + 2] * a[i + 2];
        s3 += w[i + 3] * a[i + 3];
        s4 += w[i + 4] * a[i + 4];
        s5 += w[i + 5] * a[i + 5];
        s6 += w[i + 6] * a[i + 6];
        s7 += w[i + 7] * a[i + 7];
    }
    float s[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
    for (int j = 0; i < n; i++, j++) s[j] += w[i] * a[i];
    *out = sum8(s);
}

static void dot_f16(int64_t n, float *out, const void *wv, const void *av) {
    const uint16_t *w = wv;
    const float *a = av;
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += fp16_to_f32(w[i + j]) * a[i + j];
    for (int j = 0; i < n; i++, j++) s[j] += fp16_to_f32(w[i]) * a[i];
    *out = sum8(s);
}

static void dot_bf16(int64_t n, float *out, const void *wv, const void *av) {
    const uint16_t *w = wv;
    const float *a = av;
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += bf16_to_f32(w[i + j]) * a[i + j];
    for (int j = 0; i < n; i++, j++) s[j] += bf16_to_f32(w[i]) * a[i];
    *out = sum8(s);
}

/* ---- 32-element blocks against Q8_0 ----------------------------------------- */

static void dot_q8_0(int64_t n, float *out, const void *wv, const void *av) {
    const block_q8_0 *w = wv, *a = av;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int s = 0;
        for (int j = 0; j < QK8_0; j++) s += w[i].qs[j] * a[i].qs[j];
        sum += (float)s * (fp16_to_f32(w[i].d) * fp16_to_f32(a[i].d));
    }
    *out = sum;
}

static void dot_q4_0(int64_t n, float *out, const void *wv, const void *av) {
    const block_q4_0 *w = wv;
    const block_q8_0 *a = av;
    float sum = 0;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int s = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            s += ((w[i].qs[j] & 15) - 8) * a[i].qs[j];
            s += ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + QK4_0 / 2];
        }
        sum += (float)s * (fp16_to_f32(w[i].d) * fp16_to_f32(a[i].d));
    }
    *out = sum;
}

/* MXFP4: the doubled E2M1 values times the activation quants, exact in
 * integers (|sum| <= 32*12*127 < 2^14), then times 2^(e-128) * d. */
static void dot_mxfp4(int64_t n, float *out, const void *wv, const void *av) {
    const block_mxfp4 *w = wv;
    const block_q8_0 *a = av;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        int s = 0;
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            s += quant_mxfp4_q2[w[i].qs[j] & 15] * a[i].qs[j];
            s += quant_mxfp4_q2[w[i].qs[j] >> 4] * a[i].qs[j + QK_MXFP4 / 2];
        }
        sum += (float)s * (quant_mxfp4_half_scale(w[i].e) * fp16_to_f32(a[i].d));
    }
    *out = sum;
}

/* ---- 256-element super-blocks against Q8_K --------------------------------- */

/* Sum of mins: sum over sub-blocks k of m[k] * (sum of the 32 activation
 * quants of sub-block k), from the activation's group sums. */
static inline int k_min_sum(const uint8_t m[8], const block_q8_k *a) {
    int s = 0;
    for (int k = 0; k < 8; k++) s += m[k] * (a->bsums[2 * k] + a->bsums[2 * k + 1]);
    return s;
}

static void dot_q4_k(int64_t n, float *out, const void *wv, const void *av) {
    const block_q4_k *w = wv;
    const block_q8_k *a = av;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        for (int k = 0; k < 8; k++) quant_k_scale_min(w[i].scales, k, &sc[k], &m[k]);
        int sumi = 0;
        for (int k = 0; k < 8; k += 2) {
            const uint8_t *q = w[i].qs + 16 * k;
            const int8_t *a0 = a[i].qs + 32 * k, *a1 = a0 + 32;
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q[l] & 15) * a0[l];
                s1 += (q[l] >> 4) * a1[l];
            }
            sumi += sc[k] * s0 + sc[k + 1] * s1;
        }
        const int summ = k_min_sum(m, &a[i]);
        sum += a[i].d * (fp16_to_f32(w[i].d) * (float)sumi - fp16_to_f32(w[i].dmin) * (float)summ);
    }
    *out = sum;
}

static void dot_q5_k(int64_t n, float *out, const void *wv, const void *av) {
    const block_q5_k *w = wv;
    const block_q8_k *a = av;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        for (int k = 0; k < 8; k++) quant_k_scale_min(w[i].scales, k, &sc[k], &m[k]);
        int sumi = 0;
        for (int k = 0; k < 8; k += 2) {
            const uint8_t *q = w[i].qs + 16 * k, *qh = w[i].qh;
            const int8_t *a0 = a[i].qs + 32 * k, *a1 = a0 + 32;
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += ((q[l] & 15) | (((qh[l] >> k) & 1) << 4)) * a0[l];
                s1 += ((q[l] >> 4) | (((qh[l] >> (k + 1)) & 1) << 4)) * a1[l];
            }
            sumi += sc[k] * s0 + sc[k + 1] * s1;
        }
        const int summ = k_min_sum(m, &a[i]);
        sum += a[i].d * (fp16_to_f32(w[i].d) * (float)sumi - fp16_to_f32(w[i].dmin) * (float)summ);
    }
    *out = sum;
}

static void dot_q6_k(int64_t n, float *out, const void *wv, const void *av) {
    const block_q6_k *w = wv;
    const block_q8_k *a = av;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            const int8_t *aq = a[i].qs + 128 * h;
            const int8_t *sc = w[i].scales + 8 * h;
            int s[8] = {0}; /* per 16-element group: s[2*quarter + l/16] */
            for (int l = 0; l < 32; l++) {
                const int g = l / 16;
                const int q0 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32;
                const int q1 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                s[0 + g] += q0 * aq[l];
                s[2 + g] += q1 * aq[l + 32];
                s[4 + g] += q2 * aq[l + 64];
                s[6 + g] += q3 * aq[l + 96];
            }
            for (int j = 0; j < 8; j++) sumi += sc[j] * s[j];
        }
        sum += a[i].d * fp16_to_f32(w[i].d) * (float)sumi;
    }
    *out = sum;
}

static void swiglu_scalar(float *gate, const float *up, int n);

static void f16_store_scalar(uint16_t *dst, size_t stride, const float *x, int n) {
    for (int i = 0; i < n; i++) dst[(size_t)i * stride] = f32_to_fp16(x[i]);
}

/* The types with a dot product here are exactly the `supported` rows of the
 * type table (types.c); kern.c asserts it when it installs a table. */
const kern_ops kern_scalar_ops = {
    .name = "scalar",
    .dot =
        {
            [DT_F32] = dot_f32,
            [DT_F16] = dot_f16,
            [DT_BF16] = dot_bf16,
            [DT_Q8_0] = dot_q8_0,
            [DT_Q4_0] = dot_q4_0,
            [DT_Q4_K] = dot_q4_k,
            [DT_Q5_K] = dot_q5_k,
            [DT_Q6_K] = dot_q6_k,
            [DT_MXFP4] = dot_mxfp4,
        },
    .act = /* the reference activation quantisers of quant.c */
        {
            [DT_Q8_0] = quant_row_q8_0,
            [DT_Q4_0] = quant_row_q8_0,
            [DT_MXFP4] = quant_row_q8_0,
            [DT_Q4_K] = quant_row_q8_k,
            [DT_Q5_K] = quant_row_q8_k,
            [DT_Q6_K] = quant_row_q8_k,
        },
    .attn_part = attn_part_scalar,
    .attn_part_q8 = attn_part_q8_scalar,
    .swiglu = swiglu_scalar,
    .f16_store = f16_store_scalar,
};

/* ---- small vector ops ------------------------------------------------------- */

/* The sum of squares is taken in double, in index order: exact enough that
 * the result does not depend on n's factorisation, and deterministic. */
void kern_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (n > 0 ? n : 1) + eps));
    if (w)
        for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    else
        for (int i = 0; i < n; i++) out[i] = x[i] * scale;
}

void kern_rmsnorm_rows(float *out, const float *x, size_t stride, const float *w, int n, float eps, int rows) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) { /* four independent chains, each kern_rmsnorm's */
        const float *x0 = x + (size_t)r * stride, *x1 = x0 + stride, *x2 = x1 + stride, *x3 = x2 + stride;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int i = 0; i < n; i++) {
            s0 += (double)x0[i] * x0[i];
            s1 += (double)x1[i] * x1[i];
            s2 += (double)x2[i] * x2[i];
            s3 += (double)x3[i] * x3[i];
        }
        const double ss[4] = {s0, s1, s2, s3};
        for (int k = 0; k < 4; k++) {
            const float *xk = x + (size_t)(r + k) * stride;
            float *ok = out + (size_t)(r + k) * stride;
            const float scale = (float)(1.0 / sqrt(ss[k] / (n > 0 ? n : 1) + eps));
            if (w)
                for (int i = 0; i < n; i++) ok[i] = xk[i] * scale * w[i];
            else
                for (int i = 0; i < n; i++) ok[i] = xk[i] * scale;
        }
    }
    for (; r < rows; r++) kern_rmsnorm(out + (size_t)r * stride, x + (size_t)r * stride, w, n, eps);
}

static void swiglu_scalar(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* Max-subtracted for range; the normaliser is summed in double, in order. */
void kern_softmax(float *x, int n) {
    if (n <= 0) return;
    float max = x[0];
    for (int i = 1; i < n; i++) max = fmaxf(max, x[i]);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}
