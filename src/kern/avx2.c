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

/* acc + scaled byte products (see x86_body.h): maddubs gives the i16 pair
 * sums (at most 63*127*2, no saturation), madd scales and adds pairs. */
static inline __m256i mm_dot_u8_sc2(__m256i acc, __m256i u, __m256i s, __m256i c) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), c));
}

#define KX_KT_R 2
#define KX_KT_T 2
#define KX_OPS_NAME kern_avx2_ops
#define KX_NAME "avx2"
#include "x86_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
