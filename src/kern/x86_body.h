/*
 * x86_body.h — the body of the x86 SIMD kernel tables, shared by avx2.c and
 * avx512.c. Not a public header: each of those files defines the integer
 * primitives below for its instruction set, then includes this file once.
 *
 * Place in the flow: kern/, under kern.c's dispatch (kern_matmul calls the
 * dot products and activation converters through the table built here).
 *
 * The including file provides, before the #include:
 *   KX_OPS_NAME       the table's symbol (kern_avx2_ops / kern_avx512_ops)
 *   KX_NAME           its name string ("avx2" / "avx512")
 *   mm_dot_i8(w, a)   8 x i32: lane k = sum of w[4k+j]*a[4k+j], j<4, both
 *                     signed bytes, a in -127..127 (so no lane saturates)
 *   mm_dot_u8_sc2(acc, u, s, c)
 *                     acc + 8 x i32: lane k = c[2k]*(u[4k]s[4k] + u[4k+1]s[4k+1])
 *                     + c[2k+1]*(u[4k+2]s[4k+2] + u[4k+3]s[4k+3]), u unsigned
 *                     in 0..63, s signed in -127..127, c 16 x i16 scales
 *                     (|c| <= 128; each pair of lanes of c holds one scale)
 *   KX_KT_R, KX_KT_T  the K-quant gemm tile: rows (1..2) x tokens (1..4)
 * Both primitives must be exact integer arithmetic, so the two tables
 * compute the same integers and differ only in how fast they get there.
 *
 * Order of summation (kern.h's batch-invariance contract): every dot product
 * accumulates per-block float terms into 8-lane vectors in block order (Q8_0
 * and Q4_0: even blocks into one vector, odd blocks into another, added at
 * the end) and reduces with hsum_ps, so the result depends on n and the two
 * rows only. Where a gemm exists (tiles of several rows x several tokens:
 * Q4_K/Q5_K here, Q8_0/Q4_0 in avx512.c, which brings its own 512-bit
 * versions through KX_Q0_GEMM), the dot product is the gemm's 1x1 tile, so
 * gemm == dot holds by construction; other types use kern_matmul's
 * one-dot-per-(row, token) driver. avx512.c's Q8_0/Q4_0 code follows the
 * same float operations as KX_Q0_DOT, so the two tables agree to the bit
 * (test_kernels checks it).
 *
 * Attention (attn_part, attn.h): the chunk kernel with exp in SIMD.
 *
 * Integer ranges: a lane of a Q8_0/Q4_0 block sums 4 products (< 2^16); a
 * Q4_K/Q5_K lane sums 32 products times a 6-bit scale (< 2^22); a Q6_K lane
 * at most 32 * 63 * 127 * 128 < 2^24 before the offset is removed, so
 * converting a lane to float is exact.
 *
 * Thread: pure functions, called from pool workers.
 */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../base/base.h"
#include "attn.h"
#include "kern.h"
#include "quant.h"

/* ---- helpers -------------------------------------------------------------- */

/* Sum of the 8 lanes in a fixed order: (l0+l4)+(l2+l6) + (l1+l5)+(l3+l7). */
static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float f16s(uint16_t h) { return _cvtsh_ss(h); }

/* Weight rows are read once per decode step, front to back; prefetching this
 * far ahead (a few dozen rows of a small model, a dozen of a large one)
 * keeps enough misses in flight that one core streams near DRAM speed — the
 * hardware prefetcher alone gets about half (measured: SmolLM2-135M Q4_0
 * decode on one core went from 157 to 290 tokens/s). Prefetches never
 * fault, so running past the end of a matrix is harmless. */
#define KX_PF_BYTES 16384
/* always_inline: left out of line, GCC finds a function that only
 * prefetches side-effect free and drops the calls. */
static inline __attribute__((always_inline)) void kx_pf_lines(const void *p, int n_lines) {
    for (int k = 0; k < n_lines; k++) _mm_prefetch((const char *)p + KX_PF_BYTES + 64 * k, _MM_HINT_T0);
}

/* 32 bytes of Q4_0 nibbles as signed values -8..7, in element order. */
static inline __m256i q4_0_unpack(const uint8_t *qs) {
    const __m128i x = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(x, m), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m);
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

/* ---- float rows ------------------------------------------------------------ */

/* The three float dot products share one shape: 4 accumulators over 32
 * elements, then 8 at a time into the first, then a zero-padded tail. */
#define KX_FLOAT_DOT(NAME, WT, LOAD8)                                                               \
    static void NAME(int64_t n, float *out, const void *wv, const void *av) {                       \
        const WT *w = wv;                                                                           \
        const float *a = av;                                                                        \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                                 \
        int64_t i = 0;                                                                              \
        for (; i + 32 <= n; i += 32) {                                                              \
            kx_pf_lines(w + i, (int)(32 * sizeof(WT) / 64));                                        \
            s0 = _mm256_fmadd_ps(LOAD8(w + i), _mm256_loadu_ps(a + i), s0);                         \
            s1 = _mm256_fmadd_ps(LOAD8(w + i + 8), _mm256_loadu_ps(a + i + 8), s1);                 \
            s2 = _mm256_fmadd_ps(LOAD8(w + i + 16), _mm256_loadu_ps(a + i + 16), s2);               \
            s3 = _mm256_fmadd_ps(LOAD8(w + i + 24), _mm256_loadu_ps(a + i + 24), s3);               \
        }                                                                                           \
        for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LOAD8(w + i), _mm256_loadu_ps(a + i), s0);  \
        if (i < n) {                                                                                \
            WT wt[8] = {0};                                                                         \
            float at[8] = {0};                                                                      \
            memcpy(wt, w + i, sizeof(WT) * (size_t)(n - i));                                        \
            memcpy(at, a + i, sizeof(float) * (size_t)(n - i));                                     \
            s0 = _mm256_fmadd_ps(LOAD8(wt), _mm256_loadu_ps(at), s0);                               \
        }                                                                                           \
        *out = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));                \
    }

static inline __m256 load8_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 load8_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load8_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

KX_FLOAT_DOT(dot_f32, float, load8_f32)
KX_FLOAT_DOT(dot_f16, uint16_t, load8_f16)
KX_FLOAT_DOT(dot_bf16, uint16_t, load8_bf16)

/* ---- 32-element blocks against Q8_0 ----------------------------------------- */

/* Blocks go in pairs: even blocks accumulate into one vector, odd blocks
 * into another (acc = fma(lanes, scale, acc)), and the two vectors are added
 * at the end; an odd last block leaves the odd accumulator at acc + 0*0. This is the order avx512.c's
 * 512-bit gemm (block pair per register) follows, so its dot can be its 1x1
 * tile and still equal this one. */
#define KX_Q0_DOT(NAME, BT, WLOAD)                                                                  \
    static __attribute__((unused)) void NAME(int64_t n, float *out, const void *wv, const void *av) { \
        const BT *w = wv;                                                                           \
        const block_q8_0 *a = av;                                                                   \
        const int64_t nb = n / QK8_0;                                                               \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;                                             \
        int64_t i = 0;                                                                              \
        for (; i + 2 <= nb; i += 2) {                                                               \
            kx_pf_lines(&w[i], (int)(2 * sizeof(BT) + 63) / 64);                                    \
            const __m256i l0 = mm_dot_i8(WLOAD(&w[i]), _mm256_loadu_si256((const __m256i *)a[i].qs));       \
            const __m256i l1 = mm_dot_i8(WLOAD(&w[i + 1]), _mm256_loadu_si256((const __m256i *)a[i + 1].qs)); \
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l0), _mm256_set1_ps(f16s(w[i].d) * f16s(a[i].d)), acc0); \
            acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l1), _mm256_set1_ps(f16s(w[i + 1].d) * f16s(a[i + 1].d)), acc1); \
        }                                                                                           \
        if (i < nb) {                                                                               \
            const __m256i l0 = mm_dot_i8(WLOAD(&w[i]), _mm256_loadu_si256((const __m256i *)a[i].qs));       \
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l0), _mm256_set1_ps(f16s(w[i].d) * f16s(a[i].d)), acc0); \
            acc1 = _mm256_fmadd_ps(_mm256_setzero_ps(), _mm256_setzero_ps(), acc1);                \
        }                                                                                           \
        *out = hsum_ps(_mm256_add_ps(acc0, acc1));                                                  \
    }

static inline __m256i wload_q8_0(const block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
static inline __m256i wload_q4_0(const block_q4_0 *b) { return q4_0_unpack(b->qs); }

KX_Q0_DOT(dot_q8_0, block_q8_0, wload_q8_0)
KX_Q0_DOT(dot_q4_0, block_q4_0, wload_q4_0)

#ifndef KX_Q0_GEMM /* a table may bring its own Q8_0/Q4_0 dot and gemm */
#define KX_DOT_Q8_0 dot_q8_0
#define KX_DOT_Q4_0 dot_q4_0
#define KX_GEMM_Q8_0 NULL
#define KX_GEMM_Q4_0 NULL
#endif

/* ---- 256-element super-blocks against Q8_K --------------------------------- */

/* The 8 six-bit sub-block scales of a Q4_K/Q5_K block as 8 bytes of *sc (in
 * the order of quant_k_scale_min), and the mins widened to 16 bits, each
 * twice: (m0,m0,m1,m1,...) to pair with the activation's 16 bsums. Three
 * 32-bit words hold the 12 packed bytes; the masks below are
 * quant_k_scale_min applied to four bytes at once. */
static inline __m256i k_unpack(const uint8_t *scales, uint64_t *sc) {
    uint32_t w[3];
    memcpy(w, scales, 12);
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t sc_lo = w[0] & lo6, m_lo = w[1] & lo6;
    const uint32_t sc_hi = (w[2] & lo4) | (((w[0] >> 6) & lo2) << 4);
    const uint32_t m_hi = ((w[2] >> 4) & lo4) | (((w[1] >> 6) & lo2) << 4);
    *sc = (uint64_t)sc_lo | (uint64_t)sc_hi << 32;
    const __m128i m8 = _mm_cvtsi64_si128((long long)((uint64_t)m_lo | (uint64_t)m_hi << 32));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
}

/* 16 x i16: scale c0 in the low 128 bits, c1 in the high. */
static inline __m256i kx_sc2(int c0, int c1) {
    return _mm256_set_m128i(_mm_set1_epi16((short)c1), _mm_set1_epi16((short)c0));
}

/* acc += a.d*d * sumi - a.d*dmin * summ, with the integer sums as 8 lanes. */
static inline __m256 k_finish(__m256 acc, __m256i isum, __m256i mins16, const block_q8_k *a, uint16_t d,
                              uint16_t dmin) {
    const __m256i summ = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), mins16);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(a->d * f16s(d)), _mm256_cvtepi32_ps(isum), acc);
    return _mm256_fmadd_ps(_mm256_set1_ps(-(a->d * f16s(dmin))), _mm256_cvtepi32_ps(summ), acc);
}

/* Q4_K and Q5_K, R rows x T tokens (the dot product is the 1x1 tile, so the
 * gemm gives the same bits for every (row, token)). Per super-block: the
 * rows' scales are unpacked once, each 32-byte quant load serves T tokens
 * and each activation load R rows; the integer sums of a (row, token) are
 * exact whatever the order, and its float accumulation (k_finish, once per
 * super-block) is the same sequence in every tile shape. */
#define KX_KT_MAX 4
static inline __attribute__((always_inline)) void k45_tile(const int R, const int T, const int q5, int64_t nsb,
                                                           const uint8_t *w, size_t wrb, const uint8_t *a,
                                                           size_t arb, float *y, int64_t ldy) {
    const size_t bs = q5 ? sizeof(block_q5_k) : sizeof(block_q4_k);
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    __m256 acc[KX_KT_MAX][KX_KT_MAX];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        uint64_t sc[KX_KT_MAX];
        __m256i mins16[KX_KT_MAX], isum[KX_KT_MAX][KX_KT_MAX], qh[KX_KT_MAX];
        const uint8_t *qs[KX_KT_MAX];
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * wrb + (size_t)i * bs;
            kx_pf_lines(blk, 3);
            mins16[r] = k_unpack(blk + 4, &sc[r]);
            qs[r] = blk + (q5 ? offsetof(block_q5_k, qs) : offsetof(block_q4_k, qs));
            if (q5) qh[r] = _mm256_loadu_si256((const __m256i *)(blk + offsetof(block_q5_k, qh)));
            _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) isum[r][t] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 4; j++) {
            __m256i lo[KX_KT_MAX], hi[KX_KT_MAX], cl[KX_KT_MAX], ch[KX_KT_MAX];
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs[r] + 32 * j));
                lo[r] = _mm256_and_si256(q, m4);
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (q5) {
                    const __m256i bl = _mm256_set1_epi8((char)(1 << (2 * j)));
                    const __m256i bh = _mm256_set1_epi8((char)(2 << (2 * j)));
                    lo[r] = _mm256_or_si256(lo[r], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh[r], bl), bl), b4));
                    hi[r] = _mm256_or_si256(hi[r], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh[r], bh), bh), b4));
                }
                cl[r] = _mm256_set1_epi16((short)((sc[r] >> (16 * j)) & 0xff));
                ch[r] = _mm256_set1_epi16((short)((sc[r] >> (16 * j + 8)) & 0xff));
            }
            _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
                const block_q8_k *at = (const block_q8_k *)(a + t * arb) + i;
                const __m256i a0 = _mm256_loadu_si256((const __m256i *)(at->qs + 64 * j));
                const __m256i a1 = _mm256_loadu_si256((const __m256i *)(at->qs + 64 * j + 32));
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                    isum[r][t] = mm_dot_u8_sc2(isum[r][t], lo[r], a0, cl[r]);
                    isum[r][t] = mm_dot_u8_sc2(isum[r][t], hi[r], a1, ch[r]);
                }
            }
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * wrb + (size_t)i * bs;
            uint16_t d, dmin;
            memcpy(&d, blk, 2);
            memcpy(&dmin, blk + 2, 2);
            _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
                acc[r][t] = k_finish(acc[r][t], isum[r][t], mins16[r], (const block_q8_k *)(a + t * arb) + i, d, dmin);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) y[t * ldy + r] = hsum_ps(acc[r][t]);
}

#define KX_TILE_CASE(FN, R, T, ...) \
    case (R - 1) * KX_KT_MAX + (T - 1): FN(R, T, __VA_ARGS__); break;

/* A tile of R x T (each in 1..KX_KT_R / KX_KT_T) dispatched to its unrolled instance. */
static inline __attribute__((always_inline)) void k45_tile_any(int R, int T, const int q5, int64_t nsb,
                                                               const uint8_t *w, size_t wrb, const uint8_t *a,
                                                               size_t arb, float *y, int64_t ldy) {
    switch ((R - 1) * KX_KT_MAX + (T - 1)) {
        KX_TILE_CASE(k45_tile, 1, 1, q5, nsb, w, wrb, a, arb, y, ldy)
        KX_TILE_CASE(k45_tile, 1, 2, q5, nsb, w, wrb, a, arb, y, ldy)
        KX_TILE_CASE(k45_tile, 1, 3, q5, nsb, w, wrb, a, arb, y, ldy)
        KX_TILE_CASE(k45_tile, 1, 4, q5, nsb, w, wrb, a, arb, y, ldy)
        KX_TILE_CASE(k45_tile, 2, 1, q5, nsb, w, wrb, a, arb, y, ldy)
        KX_TILE_CASE(k45_tile, 2, 2, q5, nsb, w, wrb, a, arb, y, ldy)
        KX_TILE_CASE(k45_tile, 2, 3, q5, nsb, w, wrb, a, arb, y, ldy)
        KX_TILE_CASE(k45_tile, 2, 4, q5, nsb, w, wrb, a, arb, y, ldy)
    }
}

/* Tokens in chunks that keep their activations in L2; tiles of KX_KT_R rows
 * x KX_KT_T tokens within a chunk. */
#define KX_TOK_CHUNK 64
static inline __attribute__((always_inline)) void k45_gemm(const int q5, const kern_mat *wm, int64_t r0, int64_t r1,
                                                           const void *act, size_t arb, int n_tok, float *y,
                                                           int64_t ldy) {
    const int64_t nsb = wm->n_in / QK_K;
    const uint8_t *wd = wm->data;
    for (int t0 = 0; t0 < n_tok; t0 += KX_TOK_CHUNK) {
        const int t1 = MIN(n_tok, t0 + KX_TOK_CHUNK);
        for (int64_t r = r0; r < r1; r += KX_KT_R) {
            const int R = (int)MIN(KX_KT_R, r1 - r);
            for (int t = t0; t < t1; t += KX_KT_T) {
                const int T = MIN(KX_KT_T, t1 - t);
                k45_tile_any(R, T, q5, nsb, wd + (size_t)r * wm->row_bytes, wm->row_bytes,
                             (const uint8_t *)act + (size_t)t * arb, arb, y + (size_t)t * ldy + r, ldy);
            }
        }
    }
}

static void gemm_q4_k(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes, int n_tok,
                      float *y, int64_t ldy) {
    k45_gemm(0, w, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
static void gemm_q5_k(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes, int n_tok,
                      float *y, int64_t ldy) {
    k45_gemm(1, w, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
static void dot_q4_k(int64_t n, float *out, const void *w, const void *a) {
    k45_tile(1, 1, 0, n / QK_K, w, 0, a, 0, out, 0);
}
static void dot_q5_k(int64_t n, float *out, const void *w, const void *a) {
    k45_tile(1, 1, 1, n / QK_K, w, 0, a, 0, out, 0);
}

/* Q6_K: q = 6-bit unsigned value; the -32 offset is taken out once per
 * super-block as 32 * sum over groups of scale * bsum. */
static void dot_q6_k(int64_t n, float *out, const void *wv, const void *av) {
    const block_q6_k *w = wv;
    const block_q8_k *a = av;
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        kx_pf_lines(&w[i], 4);
        const int8_t *sc = w[i].scales;
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
            for (int s = 0; s < 4; s++) {
                const __m256i av8 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 128 * h + 32 * s));
                isum = mm_dot_u8_sc2(isum, q[s], av8, kx_sc2(sc[8 * h + 2 * s], sc[8 * h + 2 * s + 1]));
            }
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[i].bsums), sc16);
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(a[i].d * f16s(w[i].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *out = hsum_ps(acc);
}

/* ---- activation converters -------------------------------------------------- */

/* Largest |x| of 8k floats (k >= 1) as the max of the absolute bit
 * patterns: a NaN (any payload) beats every number, as in the reference. */
static inline float kx_amax(const float *x, int n) {
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
    __m256i m = _mm256_setzero_si256();
    for (int i = 0; i < n; i += 8)
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), absmask));
    __m128i s = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    s = _mm_max_epu32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_max_epu32(s, _mm_shuffle_epi32(s, 0xb1));
    const uint32_t bits = (uint32_t)_mm_cvtsi128_si32(s);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* round_clamp of quant.c, 8 at a time: x*id clamped to [-127, 127] (NaN ->
 * -127), then rounded half away from zero by adding +-0.5 in float and
 * truncating — the same operations as the scalar reference, so the same
 * bytes. */
static inline __m256i kx_round8(const float *x, __m256 id) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), id);
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    const __m256 half = _mm256_or_ps(_mm256_set1_ps(0.5f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    return _mm256_cvttps_epi32(_mm256_add_ps(v, half));
}

/* 32 rounded values -> 32 int8 in order. */
static inline void kx_store32(int8_t *dst, const float *x, __m256 id) {
    const __m256i i0 = kx_round8(x, id), i1 = kx_round8(x + 8, id);
    const __m256i i2 = kx_round8(x + 16, id), i3 = kx_round8(x + 24, id);
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, p);
}

static void act_q8_0(const float *x, void *av, int64_t n) {
    block_q8_0 *y = av;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        const float amax = kx_amax(x, QK8_0);
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        kx_store32(y[i].qs, x, _mm256_set1_ps(id));
    }
}

static void act_q8_k(const float *x, void *av, int64_t n) {
    block_q8_k *y = av;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float amax = kx_amax(x, QK_K);
        const float iscale = amax ? 127.0f / amax : 0.0f;
        y[i].d = amax ? 1.0f / iscale : 0.0f;
        const __m256 id = _mm256_set1_ps(iscale);
        for (int j = 0; j < QK_K; j += 32) kx_store32(y[i].qs + j, x + j, id);
        /* bsums: pairwise byte sums to 16 bits, then groups of 16 bytes */
        const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
        for (int j = 0; j < QK_K; j += 32) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(y[i].qs + j));
            const __m256i s16 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16); /* 8 x 4-byte sums */
            const __m256i s2 = _mm256_hadd_epi32(s16, s16); /* 128-bit halves: (g0a g0b) (g1a g1b) */
            const __m256i s4 = _mm256_hadd_epi32(s2, s2);
            y[i].bsums[j / 16] = (int16_t)_mm256_extract_epi32(s4, 0);
            y[i].bsums[j / 16 + 1] = (int16_t)_mm256_extract_epi32(s4, 4);
        }
    }
}

/* ---- attention ------------------------------------------------------------- */

/* e^x for x <= 0 (scores minus their max), 8 at a time: x = n ln2 + r with
 * |r| <= ln2/2, e^r by a degree-6 polynomial (relative error ~2e-7), times
 * 2^n through the exponent bits. Below -87 the result is 0 (e^-87 < 2^-125),
 * which also covers -inf. */
static inline __m256 kx_exp(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* q.k over hd values (k in f16): 8-lane fma in order, zero-padded tail,
 * hsum_ps. */
static inline float kx_dot_row(const float *q, const uint16_t *k, int hd) {
    __m256 s = _mm256_setzero_ps();
    int d = 0;
    for (; d + 8 <= hd; d += 8) s = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8_f16(k + d), s);
    if (d < hd) {
        float qt[8] = {0};
        uint16_t kt[8] = {0};
        memcpy(qt, q + d, sizeof(float) * (size_t)(hd - d));
        memcpy(kt, k + d, sizeof(uint16_t) * (size_t)(hd - d));
        s = _mm256_fmadd_ps(_mm256_loadu_ps(qt), load8_f16(kt), s);
    }
    return hsum_ps(s);
}

/* q.k for 8 rows at once (hd a multiple of 8): 8 lane-vectors of partial
 * sums, then a fixed transpose-and-add tree that leaves score j in lane j. */
static inline __m256 kx_dot8(const float *q, const uint16_t *const *kr, int hd) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(qv, load8_f16(kr[0] + d), a0);
        a1 = _mm256_fmadd_ps(qv, load8_f16(kr[1] + d), a1);
        a2 = _mm256_fmadd_ps(qv, load8_f16(kr[2] + d), a2);
        a3 = _mm256_fmadd_ps(qv, load8_f16(kr[3] + d), a3);
        a4 = _mm256_fmadd_ps(qv, load8_f16(kr[4] + d), a4);
        a5 = _mm256_fmadd_ps(qv, load8_f16(kr[5] + d), a5);
        a6 = _mm256_fmadd_ps(qv, load8_f16(kr[6] + d), a6);
        a7 = _mm256_fmadd_ps(qv, load8_f16(kr[7] + d), a7);
    }
    const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

/* A row of zeros standing in for K rows past the end of a chunk. */
#define KX_ZERO_ROW 512
static const uint16_t kx_zero_row[KX_ZERO_ROW];

/* Prefetches the `bytes` bytes at p (one hint per cache line) into L1. */
static inline __attribute__((always_inline)) void kx_prefetch(const void *p, int bytes) {
    for (int o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

#define KX_PREFETCH_ROWS 8

/* The chunk kernel (attn.h): row addresses are resolved once per block of
 * the table, each K row is read once for all n_q queries while the K and V
 * rows a few positions ahead are prefetched (a block table scatters the
 * rows, so the hardware prefetcher loses the stream at every block), exp
 * runs 8 scores at a time, and each V row is added into the n_q output
 * rows. K and V rows are f16, widened with F16C (exact, so every table
 * sees the same values as the scalar part). Sums run in position order; the
 * result depends only on q and the chunk's rows. */
static void attn_part(const attn_view *v, int kv_head, const float *q, int n_q, int p0, int p1, float scale,
                      float *m, float *l, float *o, float *scratch) {
    const int hd = v->head_dim, n = p1 - p0, row_bytes = hd * (int)sizeof(uint16_t);
    const uint16_t *krow[ATTN_CHUNK + 8], *vrow[ATTN_CHUNK];
    for (int i = 0; i < n;) {
        const int p = p0 + i, in_blk = p % v->block_tokens, cnt = MIN(n - i, v->block_tokens - in_blk);
        const size_t off = (size_t)v->block_table[p / v->block_tokens] * v->block_stride +
                           (size_t)in_blk * v->kv_dim + (size_t)kv_head * hd;
        for (int j = 0; j < cnt; j++) {
            krow[i + j] = v->k + off + (size_t)j * v->kv_dim;
            vrow[i + j] = v->v + off + (size_t)j * v->kv_dim;
        }
        i += cnt;
    }
    for (int i = 0; i < MIN(n, KX_PREFETCH_ROWS); i++) kx_prefetch(krow[i], row_bytes);
    if (hd % 8 == 0 && hd <= KX_ZERO_ROW) {
        /* 8 positions at a time (a short last group reads zero rows) */
        const int n8 = (n + 7) & ~7;
        for (int i = n; i < n8; i++) krow[i] = kx_zero_row;
        for (int i = 0; i < n8; i += 8) {
            for (int j = i + KX_PREFETCH_ROWS; j < MIN(n, i + 8 + KX_PREFETCH_ROWS); j++) {
                kx_prefetch(krow[j], row_bytes);
                kx_prefetch(vrow[j], row_bytes);
            }
            for (int g = 0; g < n_q; g++)
                _mm256_storeu_ps(scratch + (size_t)g * ATTN_CHUNK + i,
                                 _mm256_mul_ps(kx_dot8(q + (size_t)g * hd, krow + i, hd), _mm256_set1_ps(scale)));
        }
    } else {
        for (int i = 0; i < n; i++) {
            if (i + KX_PREFETCH_ROWS < n) {
                kx_prefetch(krow[i + KX_PREFETCH_ROWS], row_bytes);
                kx_prefetch(vrow[i + KX_PREFETCH_ROWS], row_bytes);
            }
            for (int g = 0; g < n_q; g++)
                scratch[(size_t)g * ATTN_CHUNK + i] = kx_dot_row(q + (size_t)g * hd, krow[i], hd) * scale;
        }
    }
    for (int g = 0; g < n_q; g++) {
        float *sc = scratch + (size_t)g * ATTN_CHUNK;
        for (int i = n; i < ((n + 7) & ~7); i++) sc[i] = -INFINITY; /* pad to whole vectors */
        __m256 mx = _mm256_set1_ps(-INFINITY);
        for (int i = 0; i < n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sc + i));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float mxs = _mm_cvtss_f32(m4);
        const __m256 mv = _mm256_set1_ps(mxs);
        __m256 sum = _mm256_setzero_ps();
        for (int i = 0; i < n; i += 8) {
            const __m256 e = kx_exp(_mm256_sub_ps(_mm256_loadu_ps(sc + i), mv));
            _mm256_storeu_ps(sc + i, e);
            sum = _mm256_add_ps(sum, e);
        }
        m[g] = mxs;
        l[g] = hsum_ps(sum);
    }
    /* o[g] = sum_i e[g][i] v_i, 64 (or 32) dims at a time in registers */
    for (int g = 0; g < n_q; g++) {
        const float *e = scratch + (size_t)g * ATTN_CHUNK;
        float *og = o + (size_t)g * hd;
        int d = 0;
        for (; d + 64 <= hd; d += 64) { /* 8 independent chains hide the fma latency */
            __m256 a[8];
            for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
            for (int i = 0; i < n; i++) {
                const uint16_t *vr = vrow[i] + d;
                const __m256 w = _mm256_set1_ps(e[i]);
                _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) a[k] = _mm256_fmadd_ps(w, load8_f16(vr + 8 * k), a[k]);
            }
            for (int k = 0; k < 8; k++) _mm256_storeu_ps(og + d + 8 * k, a[k]);
        }
        for (; d + 32 <= hd; d += 32) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int i = 0; i < n; i++) {
                const uint16_t *vr = vrow[i] + d;
                const __m256 w = _mm256_set1_ps(e[i]);
                a0 = _mm256_fmadd_ps(w, load8_f16(vr), a0);
                a1 = _mm256_fmadd_ps(w, load8_f16(vr + 8), a1);
                a2 = _mm256_fmadd_ps(w, load8_f16(vr + 16), a2);
                a3 = _mm256_fmadd_ps(w, load8_f16(vr + 24), a3);
            }
            _mm256_storeu_ps(og + d, a0);
            _mm256_storeu_ps(og + d + 8, a1);
            _mm256_storeu_ps(og + d + 16, a2);
            _mm256_storeu_ps(og + d + 24, a3);
        }
        for (; d < hd; d++) {
            float a = 0;
            for (int i = 0; i < n; i++) a += e[i] * f16s(vrow[i][d]);
            og[d] = a;
        }
    }
}

const kern_ops KX_OPS_NAME = {
    .name = KX_NAME,
    .dot =
        {
            [DT_F32] = dot_f32,
            [DT_F16] = dot_f16,
            [DT_BF16] = dot_bf16,
            [DT_Q8_0] = KX_DOT_Q8_0,
            [DT_Q4_0] = KX_DOT_Q4_0,
            [DT_Q4_K] = dot_q4_k,
            [DT_Q5_K] = dot_q5_k,
            [DT_Q6_K] = dot_q6_k,
        },
    .act =
        {
            [DT_Q8_0] = act_q8_0,
            [DT_Q4_0] = act_q8_0,
            [DT_Q4_K] = act_q8_k,
            [DT_Q5_K] = act_q8_k,
            [DT_Q6_K] = act_q8_k,
        },
    .gemm =
        {
            [DT_Q8_0] = KX_GEMM_Q8_0,
            [DT_Q4_0] = KX_GEMM_Q4_0,
            [DT_Q4_K] = gemm_q4_k,
            [DT_Q5_K] = gemm_q5_k,
        },
    .attn_part = attn_part,
};
