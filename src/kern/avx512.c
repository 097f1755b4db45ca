/*
 * avx512.c — the AVX-512 kernel table (AVX-512 F/BW/VL/DQ + VNNI, with AVX2,
 * FMA and F16C), chosen by kern.c when the CPU has all of them.
 *
 * Place in the flow: kern/, under kern_matmul. The kernels are in x86_body.h
 * (shared with avx2.c); this file supplies the integer primitives with VNNI's
 * vpdpbusd (u8 x s8 summed four at a time into i32, no intermediate i16 and
 * so no saturation) on 256-bit registers (AVX512VL). Signed x signed
 * products move the sign of w onto a, as in avx2.c; the results are exactly
 * the integers avx2.c computes, so the two tables differ only in speed.
 *
 * Built with the AVX-512 flags by the Makefile; the target pragma below lets
 * other builds (the clang fuzz build) compile it too.
 */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), \
                             apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif

#include <immintrin.h>

/* lane k = sum_{j<4} w[4k+j]*a[4k+j] for signed bytes (|a| <= 127). */
static inline __m256i mm_dot_i8(__m256i w, __m256i a) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
}

/* lane k = c * sum_{j<4} u[4k+j]*s[4k+j]; c = c0 for lanes 0..3, c1 after. */
static inline __m256i mm_dot_u8_sc2(__m256i u, __m256i s, int c0, int c1) {
    const __m256i c = _mm256_set_m128i(_mm_set1_epi32(c1), _mm_set1_epi32(c0));
    return _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s), c);
}

#define KX_OPS_NAME kern_avx512_ops
#define KX_NAME "avx512"
#include "x86_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
