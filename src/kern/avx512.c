/*
 * avx512.c — the AVX-512 kernel table (AVX-512 F/BW/VL/DQ + VNNI, with AVX2,
 * FMA and F16C), chosen by kern.c when the CPU has all of them.
 *
 * Place in the flow: kern/, under kern_matmul. The kernels are in x86_body.h
 * (shared with avx2.c); this file supplies the integer primitives with VNNI:
 * vpdpbusd (u8 x s8 summed four at a time into i32, no intermediate i16 and
 * so no saturation) and vpdpwssd (i16 pairs times i16 scales, added into
 * i32) on 256-bit registers (AVX512VL), and its own 512-bit Q8_0/Q4_0 dot
 * product and gemm below. Signed x signed
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
#include <string.h>

#include "../base/base.h"
#include "kern.h"

/* lane k = sum_{j<4} w[4k+j]*a[4k+j] for signed bytes (|a| <= 127). */
static inline __m256i mm_dot_i8(__m256i w, __m256i a) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
}

/* acc + scaled byte products (see x86_body.h): maddubs gives the i16 pair
 * sums (at most 63*127*2, no saturation), vpdpwssd multiplies them by the
 * scales and adds pairs into acc in one instruction. */
static inline __m256i mm_dot_u8_sc2(__m256i acc, __m256i u, __m256i s, __m256i c) {
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), c);
}

#define KX_Q0_GEMM 1
#define KX_DOT_Q8_0 avx512_dot_q8_0
#define KX_DOT_Q4_0 avx512_dot_q4_0
#define KX_GEMM_Q8_0 avx512_gemm_q8_0
#define KX_GEMM_Q4_0 avx512_gemm_q4_0
static void avx512_dot_q8_0(int64_t n, float *s, const void *w, const void *a);
static void avx512_dot_q4_0(int64_t n, float *s, const void *w, const void *a);
static void avx512_gemm_q8_0(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes,
                             int n_tok, float *y, int64_t ldy);
static void avx512_gemm_q4_0(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes,
                             int n_tok, float *y, int64_t ldy);

#define KX_KT_R 2
#define KX_KT_T 4
#define KX_OPS_NAME kern_avx512_ops
#define KX_NAME "avx512"
#include "x86_body.h"

/* ---- Q8_0 / Q4_0: 512-bit dot and gemm -----------------------------------------
 *
 * A zmm register holds a pair of blocks (2 x 32 quants). The weight quants
 * stay signed and the activation quants are offset to unsigned (a + 128),
 * so one vpdpbusd per (row, token) and block pair gives sum (a+128) w; the
 * 128 * sum w term is removed by starting the accumulation from its
 * negation, computed once per row and pair. Lane k of the low half is then
 * exactly the i32 lane k of the first block's product (x86_body.h), lane k
 * of the high half that of the second block, and
 *     acc = fma(float(lanes), d_w * d_a, acc)      (per half)
 * is KX_Q0_DOT's even/odd accumulation, done for both halves at once. An odd
 * last block pairs with an all-zero block and zero scales.
 *
 * The dot product is the 1x1 tile of the same code, so gemm == dot bitwise
 * for every (row, token), as kern.h requires. Tiles are up to 4 rows x 4
 * tokens: 16 accumulators plus 4 weight pairs, their corrections and scales
 * fit in the 32 zmm registers. */

static inline uint32_t q0_half(const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return h;
}

/* The f16 scales of two blocks (h0, h1 as raw halves) as 8 x s0 | 8 x s1. */
static inline __m512 q0_pair_scale(uint32_t h0, uint32_t h1) {
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(h0 | h1 << 16)));
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

/* The quants of blocks b0, b1 as signed bytes in element order (b1 == NULL:
 * zeros). Q4_0: both blocks' nibble bytes in one register, low and high
 * nibbles split, then the qwords put in element order by one permute. */
static inline __m512i q0_pair_quants(const uint8_t *b0, const uint8_t *b1, const int is_q4) {
    if (!is_q4) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(b0 + 2));
        if (!b1) return _mm512_zextsi256_si512(w0);
        return _mm512_inserti64x4(_mm512_castsi256_si512(w0), _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
    }
    const __m128i x0 = _mm_loadu_si128((const __m128i *)(b0 + 2));
    const __m256i x = b1 ? _mm256_inserti128_si256(_mm256_castsi128_si256(x0), _mm_loadu_si128((const __m128i *)(b1 + 2)), 1)
                         : _mm256_zextsi128_si256(x0);
    const __m256i m = _mm256_set1_epi8(15);
    const __m256i lo = _mm256_and_si256(x, m), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m);
    const __m512i idx = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i q = _mm512_sub_epi8(
        _mm512_permutex2var_epi64(_mm512_castsi256_si512(lo), idx, _mm512_castsi256_si512(hi)), _mm512_set1_epi8(8));
    return b1 ? q : _mm512_maskz_mov_epi64(0x0f, q);
}

/* One block pair (two = 1) or a last single block (two = 0) of a tile. */
static inline __attribute__((always_inline)) void q0_step(const int R, const int T, const int is_q4, const int two,
                                                          int64_t i, const uint8_t *w, size_t wrb, const uint8_t *a,
                                                          size_t arb, __m512 acc[4][4]) {
    const size_t wbs = is_q4 ? 18 : 34;
    const __m512i off = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    __m512i wv[4], cv[4];
    __m512 dw[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        const uint8_t *b0 = w + r * wrb + (size_t)i * wbs;
#ifdef Q0_PF_ROWS
        _mm_prefetch((const char *)(b0 + Q0_PF_ROWS * wrb), _MM_HINT_T0);
#endif
        wv[r] = q0_pair_quants(b0, two ? b0 + wbs : NULL, is_q4);
        cv[r] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, wv[r]));
        dw[r] = q0_pair_scale(q0_half(b0), two ? q0_half(b0 + wbs) : 0);
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
        const uint8_t *c0 = a + t * arb + (size_t)i * 34;
        const __m512i av = _mm512_xor_si512(q0_pair_quants(c0, two ? c0 + 34 : NULL, 0), off);
        const __m512 da = q0_pair_scale(q0_half(c0), two ? q0_half(c0 + 34) : 0);
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            /* the same float products as the 256-bit dot: d_w * d_a */
            const __m512 sc = _mm512_mul_ps(dw[r], da);
            const __m512i l = _mm512_dpbusd_epi32(cv[r], av, wv[r]);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(l), sc, acc[r][t]);
        }
    }
}

/* Rows w + r*wrb (r < R) times activations a + t*arb (t < T), nb blocks;
 * writes y[t*ldy + r]. */
static inline __attribute__((always_inline)) void q0_tile(const int R, const int T, const int is_q4, int64_t nb,
                                                          const uint8_t *w, size_t wrb, const uint8_t *a,
                                                          size_t arb, float *y, int64_t ldy) {
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) q0_step(R, T, is_q4, 1, i, w, wrb, a, arb, acc);
    if (i < nb) q0_step(R, T, is_q4, 0, i, w, wrb, a, arb, acc);
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const __m512 v = acc[r][t];
            y[t * ldy + r] = hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
        }
}

/* Dispatches a tile of R x T with R, T in 1..4 to its unrolled instance. */
#define Q0_TILE_CASE(R, T) \
    case (R - 1) * 4 + (T - 1): q0_tile(R, T, is_q4, nb, w, wrb, a, arb, y, ldy); break;
static inline __attribute__((always_inline)) void q0_tile_any(int R, int T, const int is_q4, int64_t nb,
                                                              const uint8_t *w, size_t wrb, const uint8_t *a,
                                                              size_t arb, float *y, int64_t ldy) {
    switch ((R - 1) * 4 + (T - 1)) {
        Q0_TILE_CASE(1, 1) Q0_TILE_CASE(1, 2) Q0_TILE_CASE(1, 3) Q0_TILE_CASE(1, 4)
        Q0_TILE_CASE(2, 1) Q0_TILE_CASE(2, 2) Q0_TILE_CASE(2, 3) Q0_TILE_CASE(2, 4)
        Q0_TILE_CASE(3, 1) Q0_TILE_CASE(3, 2) Q0_TILE_CASE(3, 3) Q0_TILE_CASE(3, 4)
        Q0_TILE_CASE(4, 1) Q0_TILE_CASE(4, 2) Q0_TILE_CASE(4, 3) Q0_TILE_CASE(4, 4)
    }
}

/* Tokens in chunks that keep their activations in L2; within a chunk, tiles
 * of 4 rows x 4 tokens. */
#define Q0_TOK_CHUNK 64
#ifndef Q0_TR
#define Q0_TR 4
#define Q0_TT 4
#endif
static inline __attribute__((always_inline)) void q0_gemm(const int is_q4, const kern_mat *wm, int64_t r0, int64_t r1,
                                                          const void *act, size_t arb, int n_tok, float *y,
                                                          int64_t ldy) {
    const int64_t nb = wm->n_in / 32;
    const uint8_t *wd = wm->data;
    for (int t0 = 0; t0 < n_tok; t0 += Q0_TOK_CHUNK) {
        const int t1 = MIN(n_tok, t0 + Q0_TOK_CHUNK);
        for (int64_t r = r0; r < r1; r += Q0_TR) {
            const int R = (int)MIN(Q0_TR, r1 - r);
            for (int t = t0; t < t1; t += Q0_TT) {
                const int T = MIN(Q0_TT, t1 - t);
                q0_tile_any(R, T, is_q4, nb, wd + (size_t)r * wm->row_bytes, wm->row_bytes,
                            (const uint8_t *)act + (size_t)t * arb, arb, y + (size_t)t * ldy + r, ldy);
            }
        }
    }
}

static void avx512_gemm_q8_0(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes,
                             int n_tok, float *y, int64_t ldy) {
    q0_gemm(0, w, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
static void avx512_gemm_q4_0(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes,
                             int n_tok, float *y, int64_t ldy) {
    q0_gemm(1, w, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
static void avx512_dot_q8_0(int64_t n, float *s, const void *w, const void *a) {
    q0_tile(1, 1, 0, n / 32, w, 0, a, 0, s, 0);
}
static void avx512_dot_q4_0(int64_t n, float *s, const void *w, const void *a) {
    q0_tile(1, 1, 1, n / 32, w, 0, a, 0, s, 0);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
