/*
 * avx2.c — the AVX2 kernel table (AVX2 + FMA + F16C), chosen by kern.c when
 * the CPU has those features and nothing better.
 *
 * Place in the flow: kern/, under kern_matmul. The kernels themselves are in
 * x86_body.h (shared with avx512.c); this file supplies the two integer
 * primitives they are written in, using the classic AVX2 sequence:
 * maddubs (u8 x s8 -> pairs of i16) then madd (pairs -> i32). The ranges in
 * x86_body.h keep every i16 pair sum below 2^15, so nothing saturates and the
 * integers are exact — the same integers the AVX-512 VNNI table computes.
 *
 * Built with -mavx2 -mfma -mf16c by the Makefile; the target pragma below
 * lets other builds (the clang fuzz build) compile it too.
 */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

/* lane k = sum_{j<4} w[4k+j]*a[4k+j] for signed bytes (|a| <= 127): the sign
 * of w is moved onto a so maddubs sees |w| as unsigned. */
static inline __m256i mm_dot_i8(__m256i w, __m256i a) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* x86_body.h's Q8_0/Q4_0 gemm tile may split mm_dot_i8 into its steps */
#define KX_Q0_TILE_OK 1

/* acc + scaled byte products (see x86_body.h): maddubs gives the i16 pair
 * sums (at most 63*127*2, no saturation), madd scales and adds pairs. */
static inline __m256i mm_dot_u8_sc2(__m256i acc, __m256i u, __m256i s, __m256i c) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), c));
}

#define KX_KT_R 2
#define KX_KT_T 2
/* No 2 x T float gemm tiles: with 16 registers they spill (4T accumulators
 * live); 3-8 tokens go as 1 x 4 tiles and 2 x 2 / 2 x 1 tails. */
#define KX_FG_WIDE 0
#define KX_OPS_NAME kern__avx2_ops
#define KX_NAME "avx2"

/* Attention vector primitives (x86_body.h's attention kernel): 8 f32 lanes;
 * kx_exp and load8_f16 are x86_body.h's (macros, expanded where used). */
typedef __m256 kxa_v;
#define KXA_W 8
#define kxa_zero() _mm256_setzero_ps()
#define kxa_load(p) _mm256_loadu_ps(p)
#define kxa_store(p, x) _mm256_storeu_ps(p, x)
#define kxa_set1(x) _mm256_set1_ps(x)
#define kxa_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define kxa_mul(a, b) _mm256_mul_ps(a, b)
#define kxa_sub(a, b) _mm256_sub_ps(a, b)
#define kxa_max(a, b) _mm256_max_ps(a, b)
#define kxa_exp(x) kx_exp(x)
#define kxa_f16(p) load8_f16(p)
#define KXA_QK_Q 4 /* 8 accumulators + 2 K^T vectors + a broadcast (16 registers) */
#define KXA_QK_V 2
#define KXA_PV_Q 2 /* 8 accumulators + 4 V vectors + a broadcast */
#define KXA_PV_V 4
#define KXA_PV_Q1 8 /* single vectors of dims: 8 accumulators + a V vector + a broadcast */
#define KXA_PV_QMAX (KXA_PV_Q1 > KXA_PV_Q ? KXA_PV_Q1 : KXA_PV_Q)
static inline float kxa_hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
/* l of one query before hsum_ps: the 16 lanes of avx512.c's kxa_sum16 kept
 * in two vectors (lanes 0-7 in a, 8-15 in b), then a + b: the same sums. */
static inline __m256 kxa_sum16(const float *e, int n16) {
    __m256 a = _mm256_setzero_ps(), b = a;
    for (int k = 0; k < n16; k++) {
        a = _mm256_add_ps(a, _mm256_loadu_ps(e + 16 * k));
        b = _mm256_add_ps(b, _mm256_loadu_ps(e + 16 * k + 8));
    }
    return _mm256_add_ps(a, b);
}

#include "x86_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
