/*
 * quant.c — reference conversions between f32 and the GGUF block formats
 * (layouts in quant.h).
 *
 * Dequantisation follows ggml's formulas operation for operation (for
 * example Q4_K computes (d*sc)*q - dmin*m in float), so a row decodes to the
 * same floats llama.cpp gets from it.
 *
 * Quantisation is our own. Q8_0/Q4_0/Q8_K are plain round-to-nearest with the
 * standard scale choice; MXFP4 rounds to the nearest E2M1 value under the
 * better of two power-of-two scales (quant.h). The K-quants search, per sub-block, a few candidate
 * scales around the range-fitting one; for each they round the elements and
 * refit scale (and min) by least squares, keeping the candidate with the
 * smallest squared error. The sub-block scales are then quantised to 6 bits
 * (Q4_K/Q5_K) or 8 bits (Q6_K) against an f16 super-scale and every element
 * is rounded again against the scale it will actually be decoded with.
 *
 * Measured RMSE / RMS of the data over 7 rows of 768 N(0,1) values, and over
 * N(2.5,1) values where the K-quant mins matter (test_quant prints these and
 * checks bounds a little above the N(0,1) column):
 *            N(0,1)   N(2.5,1)
 *   F16      0.00021  0.00021
 *   BF16     0.0016   0.0016
 *   Q8_0     0.0053   0.0039
 *   Q8_K     0.0073   0.0044
 *   Q6_K     0.0176   0.0123
 *   Q5_K     0.0358   0.0148
 *   Q4_K     0.0703   0.0302
 *   Q4_0     0.0863   0.0608
 *   MXFP4    0.1108   0.1005
 * (For comparison, plain rounding with step = range/levels of a Gaussian
 * block gives about step/sqrt(12): 0.08 for 4 bits over 32 values.)
 *
 * Invariants: no state; every function is pure and thread-safe.
 */
#include "quant.h"

#include <float.h>
#include <math.h>

#include "../base/base.h"
#include "kern_internal.h"

/* ---- dequantisation -------------------------------------------------------- */

void kern__dequant_row_q8_0(const void *src, float *y, int64_t n) {
    const block_q8_0 *b = src;
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = b[i].qs[j] * d;
    }
}

void kern__dequant_row_q4_0(const void *src, float *y, int64_t n) {
    const block_q4_0 *b = src;
    const int64_t nb = n / QK4_0;
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = ((b[i].qs[j] & 15) - 8) * d;
            y[j + QK4_0 / 2] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void kern__dequant_row_q4_k(const void *src, float *y, int64_t n) {
    const block_q4_k *b = src;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        for (int k = 0; k < 8; k++, y += 32) {
            uint8_t sc, m;
            quant_k_scale_min(b[i].scales, k, &sc, &m);
            const float dl = d * sc, ml = dmin * m;
            const uint8_t *q = b[i].qs + 32 * (k / 2);
            const int shift = (k & 1) * 4;
            for (int l = 0; l < 32; l++) y[l] = dl * ((q[l] >> shift) & 15) - ml;
        }
    }
}

void kern__dequant_row_q5_k(const void *src, float *y, int64_t n) {
    const block_q5_k *b = src;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        for (int k = 0; k < 8; k++, y += 32) {
            uint8_t sc, m;
            quant_k_scale_min(b[i].scales, k, &sc, &m);
            const float dl = d * sc, ml = dmin * m;
            const uint8_t *q = b[i].qs + 32 * (k / 2);
            const int shift = (k & 1) * 4;
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 15) | (((b[i].qh[l] >> k) & 1) << 4);
                y[l] = dl * v - ml;
            }
        }
    }
}

/* The 6-bit value (0..63) of element e (0..255) of a Q6_K block. */
static inline int q6_k_get(const block_q6_k *b, int e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b->ql[64 * h + 32 * (s & 1) + l];
    const int low4 = (s < 2) ? (lo & 15) : (lo >> 4);
    const int high2 = (b->qh[32 * h + l] >> (2 * s)) & 3;
    return low4 | (high2 << 4);
}

void kern__dequant_row_q6_k(const void *src, float *y, int64_t n) {
    const block_q6_k *b = src;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        const float d = fp16_to_f32(b[i].d);
        for (int e = 0; e < QK_K; e++) y[e] = d * b[i].scales[e / 16] * (q6_k_get(&b[i], e) - 32);
    }
}

void kern__dequant_row_q8_k(const void *src, float *y, int64_t n) {
    const block_q8_k *b = src;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, y += QK_K)
        for (int j = 0; j < QK_K; j++) y[j] = b[i].d * b[i].qs[j];
}

/* E2M1 nibble -> twice its value: magnitudes 0 0.5 1 1.5 2 3 4 6 doubled,
 * then the same negated for the sign bit (8 is -0). */
const int8_t quant_mxfp4_q2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void kern__dequant_row_mxfp4(const void *src, float *y, int64_t n) {
    const block_mxfp4 *b = src;
    const int64_t nb = n / QK_MXFP4;
    for (int64_t i = 0; i < nb; i++, y += QK_MXFP4) {
        const float d = quant_mxfp4_half_scale(b[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            y[j] = quant_mxfp4_q2[b[i].qs[j] & 15] * d;
            y[j + QK_MXFP4 / 2] = quant_mxfp4_q2[b[i].qs[j] >> 4] * d;
        }
    }
}

/* ---- plain types ----------------------------------------------------------- */

void kern__dequant_row_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

void kern__quant_row_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

void kern__dequant_row_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = fp16_to_f32(h);
    }
}

void kern__quant_row_f16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = f32_to_fp16(src[i]);
        memcpy(d + 2 * i, &h, 2);
    }
}

void kern__dequant_row_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
    }
}

void kern__quant_row_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = f32_to_bf16(src[i]);
        memcpy(d + 2 * i, &h, 2);
    }
}

/* ---- the entry points: the type table names each type's two functions ------ */

/* The type's row of the table when quant.c converts it; NULL after setting
 * *rc to ERR_UNSUPPORTED (no functions) or ERR_INVALID (bad n). */
static const dtype_info *convertible(uint32_t type, int64_t n, int *rc) {
    const dtype_info *t = dtype_get(type);
    if (!t || !t->to_f32 || !t->from_f32) {
        *rc = ERR_UNSUPPORTED;
        return NULL;
    }
    if (n < 0 || n % t->blck) {
        *rc = ERR_INVALID;
        return NULL;
    }
    return t;
}

bool quant_supported(uint32_t type) {
    int rc;
    return convertible(type, 0, &rc) != NULL;
}

int quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    int rc = 0;
    const dtype_info *t = convertible(type, n, &rc);
    if (t) t->to_f32(src, dst, n);
    return rc;
}

int quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    int rc = 0;
    const dtype_info *t = convertible(type, n, &rc);
    if (t) t->from_f32(src, dst, n);
    return rc;
}

/* ---- round-to-nearest formats --------------------------------------------- */

/* Rounds x half away from zero (as ggml's roundf) and clamps it to [lo, hi].
 * The clamp comes first, in float, so a huge, infinite or NaN x (NaN gives
 * lo) never reaches an out-of-range float-to-int conversion. */
static inline int round_clamp(float x, int lo, int hi) {
    if (!(x > (float)lo)) return lo;
    if (!(x < (float)hi)) return hi;
    return (int)(x >= 0 ? x + 0.5f : x - 0.5f);
}

/* Largest |x|; NaN if any element is NaN (so a NaN activation shows up as a
 * NaN scale instead of vanishing). */
static inline float max_abs(const float *x, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a > m || a != a) m = a;
        if (m != m) break;
    }
    return m;
}

void quant_row_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        const float amax = max_abs(x, QK8_0);
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)round_clamp(x[j] * id, -127, 127);
    }
}

void kern__quant_row_q4_0(const float *x, void *dst, int64_t n) {
    block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float amax = 0, max = 0; /* max: the signed value of largest magnitude */
        for (int j = 0; j < QK4_0; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int q0 = round_clamp(x[j] * id, -8, 7) + 8;
            const int q1 = round_clamp(x[j + QK4_0 / 2] * id, -8, 7) + 8;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void quant_row_q8_k(const float *x, void *dst, int64_t n) {
    block_q8_k *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float amax = max_abs(x, QK_K);
        const float iscale = amax ? 127.0f / amax : 0.0f;
        y[i].d = amax ? 1.0f / iscale : 0.0f;
        for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)round_clamp(x[j] * iscale, -127, 127);
        for (int g = 0; g < QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)s;
        }
    }
}

/* The E2M1 code (0..15) nearest to v (in units of the block's scale): the
 * nearest of the 8 magnitudes, ties to the even code (even mantissa bit, as
 * IEEE rounding), the sign in bit 3; NaN gives 0, beyond 6 gives 6. *err2
 * receives the squared error in those units. */
static int mxfp4_code(float v, float *err2) {
    const float a = fabsf(v);
    int best = 0;
    float be = a == a ? a : 0; /* distance to magnitude 0 */
    for (int c = 1; c < 8; c++) {
        const float e = fabsf(a - 0.5f * quant_mxfp4_q2[c]);
        if (e < be || (e == be && !(c & 1) && (best & 1))) be = e, best = c;
    }
    *err2 = be * be;
    return best | (v < 0 && best ? 8 : 0);
}

/* Codes of one block for exponent e (0..254); returns the squared error of
 * the decoded block (in double: the scales of two exponents compare). */
static double mxfp4_block(const float *x, int e, uint8_t q[QK_MXFP4]) {
    const float half = quant_mxfp4_half_scale((uint8_t)e), inv = 0.5f / half; /* 2^(127-e): exact */
    double err = 0;
    for (int j = 0; j < QK_MXFP4; j++) {
        float unused;
        q[j] = (uint8_t)mxfp4_code(x[j] * inv, &unused);
        const double d = (double)x[j] - (double)quant_mxfp4_q2[q[j]] * half;
        err += d * d;
    }
    return err;
}

void kern__quant_row_mxfp4(const float *x, void *dst, int64_t n) {
    block_mxfp4 *y = dst;
    uint8_t q[QK_MXFP4], q2[QK_MXFP4];
    for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
        const float amax = max_abs(x, QK_MXFP4);
        /* the smallest e with 6 * 2^(e-127) >= amax (no element clips) */
        int e = 0;
        if (!(amax <= FLT_MAX)) {
            e = 254; /* inf or NaN */
        } else if (amax > 0) {
            int ex;
            frexpf(amax / 6, &ex); /* amax/6 in [2^(ex-1), 2^ex): e - 127 is about ex */
            e = MAX(0, MIN(254, ex + 126));
            while (e < 254 && 12 * quant_mxfp4_half_scale((uint8_t)e) < amax) e++;
            while (e > 0 && 12 * quant_mxfp4_half_scale((uint8_t)(e - 1)) >= amax) e--;
        }
        const double err = mxfp4_block(x, e, q);
        if (e > 0 && amax > 0 && mxfp4_block(x, e - 1, q2) < err) { /* a finer step may win despite one clip */
            memcpy(q, q2, sizeof q);
            e--;
        }
        y[i].e = (uint8_t)e;
        for (int j = 0; j < QK_MXFP4 / 2; j++) y[i].qs[j] = (uint8_t)(q[j] | (q[j + QK_MXFP4 / 2] << 4));
    }
}

/* ---- K-quant scale search --------------------------------------------------- */

/* Fits x[0..n) ~ scale*q - min with integer q in [0, nmax] and min >= 0.
 * Tries iscale = (nmax + t) / (hi - lo) for t in [-1, 1] step 0.1, rounds,
 * refits (scale, min) by least squares, and keeps the best. */
static void fit_scale_min(const float *x, int n, int nmax, float *scale_out, float *min_out) {
    float lo = 0, hi = x[0];
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    if (hi <= lo) { /* all zero, or all equal and negative */
        *scale_out = 0;
        *min_out = -lo;
        return;
    }
    double sxx = 0;
    for (int i = 0; i < n; i++) sxx += (double)x[i] * x[i];
    double best_err = INFINITY;
    float best_a = (hi - lo) / nmax, best_b = lo;
    for (int step = -10; step <= 10; step++) {
        const float iscale = (nmax + 0.1f * step) / (hi - lo);
        double sq = 0, sqq = 0, sx = 0, sqx = 0;
        for (int i = 0; i < n; i++) {
            const int q = round_clamp(iscale * (x[i] - lo), 0, nmax);
            sq += q, sqq += (double)q * q, sx += x[i], sqx += (double)q * x[i];
        }
        const double det = n * sqq - sq * sq;
        if (det <= 0) continue;
        double a = (n * sqx - sq * sx) / det, b = (sqq * sx - sq * sqx) / det;
        if (b > 0) { /* the offset must be <= 0 (min >= 0) */
            b = 0;
            a = sqx / sqq;
        }
        if (a <= 0) continue;
        /* sum (a*q + b - x)^2, expanded */
        const double err = a * a * sqq + 2 * a * b * sq + n * b * b - 2 * a * sqx - 2 * b * sx + sxx;
        if (err < best_err) best_err = err, best_a = (float)a, best_b = (float)b;
    }
    *scale_out = best_a;
    *min_out = -best_b;
}

/* Fits x[0..n) ~ scale*q with integer q in [-nneg, npos] (scale of any sign).
 * Candidates map the value of largest magnitude to about -nneg. */
static float fit_scale_symmetric(const float *x, int n, int nneg, int npos) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (amax == 0) return 0;
    double best = -1;
    float best_a = max / -nneg;
    for (int step = -10; step <= 10; step++) {
        const float iscale = -(nneg + 0.1f * step) / max;
        double sxq = 0, sqq = 0;
        for (int i = 0; i < n; i++) {
            const int q = round_clamp(iscale * x[i], -nneg, npos);
            sxq += (double)x[i] * q, sqq += (double)q * q;
        }
        if (sqq == 0) continue;
        const double gain = sxq * sxq / sqq; /* error = sum x^2 - gain */
        if (gain > best) best = gain, best_a = (float)(sxq / sqq);
    }
    return best_a;
}

/* Quantises sub-block values v (0 <= v <= vmax) against a 6-bit code: the
 * super-scale is max/63 stored as f16, codes round(v/super) clamped. Returns
 * the decoded super-scale. */
static float quant_6bit(const float *v, int n, uint16_t *half_out, uint8_t *codes) {
    float vmax = 0;
    for (int i = 0; i < n; i++) vmax = fmaxf(vmax, v[i]);
    *half_out = f32_to_fp16(vmax / 63);
    const float s = fp16_to_f32(*half_out), is = s > 0 ? 1.0f / s : 0.0f;
    for (int i = 0; i < n; i++) codes[i] = (uint8_t)round_clamp(v[i] * is, 0, 63);
    return s;
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): chooses the packed scales and
 * d/dmin of one super-block and the final element codes q[256]. */
static void quant_k_super(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out, uint8_t scales[12],
                          uint8_t q[QK_K]) {
    float sc[8], mn[8];
    for (int k = 0; k < 8; k++) fit_scale_min(x + 32 * k, 32, nmax, &sc[k], &mn[k]);
    uint8_t ls[8], lm[8];
    const float d = quant_6bit(sc, 8, d_out, ls);
    const float dmin = quant_6bit(mn, 8, dmin_out, lm);
    memset(scales, 0, QK_K_SCALE_BYTES);
    for (int k = 0; k < 8; k++) {
        if (k < 4) {
            scales[k] |= ls[k];
            scales[k + 4] |= lm[k];
        } else {
            scales[k + 4] = (uint8_t)((ls[k] & 15) | ((lm[k] & 15) << 4));
            scales[k - 4] |= (uint8_t)((ls[k] >> 4) << 6);
            scales[k] |= (uint8_t)((lm[k] >> 4) << 6);
        }
    }
    for (int k = 0; k < 8; k++) {
        uint8_t s6, m6;
        quant_k_scale_min(scales, k, &s6, &m6);
        const float dl = d * s6, ml = dmin * m6, idl = dl > 0 ? 1.0f / dl : 0.0f;
        for (int l = 0; l < 32; l++)
            q[32 * k + l] = (uint8_t)round_clamp((x[32 * k + l] + ml) * idl, 0, nmax);
    }
}

void kern__quant_row_q4_k(const float *x, void *dst, int64_t n) {
    block_q4_k *y = dst;
    uint8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quant_k_super(x, 15, &y[i].d, &y[i].dmin, y[i].scales, q);
        for (int k = 0; k < 8; k += 2)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * (k / 2) + l] = (uint8_t)(q[32 * k + l] | (q[32 * (k + 1) + l] << 4));
    }
}

void kern__quant_row_q5_k(const float *x, void *dst, int64_t n) {
    block_q5_k *y = dst;
    uint8_t q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quant_k_super(x, 31, &y[i].d, &y[i].dmin, y[i].scales, q);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int k = 0; k < 8; k++)
            for (int l = 0; l < 32; l++) y[i].qh[l] |= (uint8_t)((q[32 * k + l] >> 4) << k);
        for (int k = 0; k < 8; k += 2)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * (k / 2) + l] = (uint8_t)((q[32 * k + l] & 15) | ((q[32 * (k + 1) + l] & 15) << 4));
    }
}

void kern__quant_row_q6_k(const float *x, void *dst, int64_t n) {
    block_q6_k *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float sc[16], amax = 0;
        for (int g = 0; g < 16; g++) {
            sc[g] = fit_scale_symmetric(x + 16 * g, 16, 32, 31);
            amax = fmaxf(amax, fabsf(sc[g]));
        }
        y[i].d = f32_to_fp16(amax / 127);
        const float d = fp16_to_f32(y[i].d), id = d > 0 ? 1.0f / d : 0.0f;
        for (int g = 0; g < 16; g++) y[i].scales[g] = (int8_t)round_clamp(sc[g] * id, -127, 127);
        memset(y[i].ql, 0, sizeof y[i].ql);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int e = 0; e < QK_K; e++) {
            const float dl = d * y[i].scales[e / 16];
            const int q = dl != 0 ? round_clamp(x[e] / dl, -32, 31) + 32 : 32;
            const int h = e / 128, s = (e % 128) / 32, l = e % 32;
            y[i].ql[64 * h + 32 * (s & 1) + l] |= (uint8_t)((q & 15) << (s < 2 ? 0 : 4));
            y[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * s));
        }
    }
}
