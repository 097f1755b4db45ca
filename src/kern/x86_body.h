/*
 * x86_body.h — the body of the x86 SIMD kernel tables, shared by avx2.c and
 * avx512.c. Not a public header: each of those files defines the integer
 * primitives below for its instruction set, then includes this file once.
 * Everything here is static (static inline), so each table file compiles its
 * own copy with its own -m flags and no name leaves the file: no kern__
 * prefix is needed. The one external name is the table itself, KX_OPS_NAME
 * (kern__avx2_ops / kern__avx512_ops, kern/'s cross-file private prefix:
 * only kern.c references them).
 *
 * Place in the flow: kern/, under kern.c's dispatch (kern_matmul calls the
 * dot products and activation converters through the table built here).
 *
 * The including file provides, before the #include:
 *   KX_OPS_NAME       the table's symbol (kern__avx2_ops / kern__avx512_ops)
 *   KX_NAME           its name string ("avx2" / "avx512")
 *   mm_dot_i8(w, a)   8 x i32: lane k = sum of w[4k+j]*a[4k+j], j<4, both
 *                     signed bytes, a in -127..127 (so no lane saturates)
 *   mm_dot_u8_sc2(acc, u, s, c)
 *                     acc + 8 x i32: lane k = c[2k]*(u[4k]s[4k] + u[4k+1]s[4k+1])
 *                     + c[2k+1]*(u[4k+2]s[4k+2] + u[4k+3]s[4k+3]), u unsigned
 *                     in 0..63, s signed in -127..127, c 16 x i16 scales
 *                     (|c| <= 128; each pair of lanes of c holds one scale)
 *   KX_KT_R, KX_KT_T  the K-quant gemm tile: rows (1..2) x tokens (1..4)
 *   KX_FG_WIDE        the float gemm: 3..KX_FG_WIDE tokens run as 2 x T
 *                     tiles and 2 as 4 x 2 (0: never; 1 x 4 tiles and
 *                     2 x 2 / 2 x 1 tails)
 *   kxa_v, KXA_W      the attention kernel's vector: KXA_W f32 lanes (16 in
 *                     avx512.c, 8 in avx2.c), with kxa_zero, kxa_load,
 *                     kxa_store, kxa_set1, kxa_fma, kxa_mul, kxa_sub,
 *                     kxa_max, kxa_exp (kx_exp's operations lane by lane),
 *                     kxa_f16 (KXA_W halfs widened), kxa_hmax (max of the
 *                     lanes), kxa_sum16(e, n16) (8 lanes: e summed in 16-key
 *                     blocks into 16 lanes, then lanes 0-7 + 8-15) and the
 *                     register tiles KXA_QK_Q x KXA_QK_V, KXA_PV_Q x KXA_PV_V
 *                     (KXA_PV_Q1 x 1 when head_dim < KXA_PV_V x KXA_W)
 * Both primitives must be exact integer arithmetic, so the two tables
 * compute the same integers and differ only in how fast they get there.
 *
 * Order of summation (kern.h's batch-invariance contract): every dot product
 * accumulates per-block float terms into 8-lane vectors in block order (Q8_0
 * and Q4_0: even blocks into one vector, odd blocks into another, added at
 * the end) and reduces with hsum_ps, so the result depends on n and the two
 * rows only — except the row-octet kernels (avx2's Q4_0 and both tables'
 * MXFP4: oct_dot, oct_tile, oct_ptile), which finish each block's integer sum first and
 * accumulate one float per (row, token) in block order. Where a gemm exists
 * (tiles of several rows x several tokens: Q4_K/Q5_K and MXFP4 here; Q8_0,
 * Q4_0 and Q4_K in avx512.c, which brings its own 512-bit versions through
 * KX_Q0_GEMM and KX_K4_GEMM), the dot product is the gemm's 1x1 tile or
 * computes the same integers with the same float steps, so gemm == dot
 * bitwise; other types use kern_matmul's one-dot-per-(row, token) driver.
 * avx512.c's Q8_0 and Q4_K code follows the same float operations as
 * KX_Q0_DOT and k45_tile, so the two tables agree to the bit (test_kernels
 * checks it); its Q4_0 sums lanes of 8 elements, 4 blocks per register, and
 * may differ in the last bits.
 *
 * Attention (attn_part, attn.h): the grouped chunk kernel, at the end of
 * this file (its comment gives the order of every sum).
 *
 * Integer ranges: a lane of a Q8_0/Q4_0/MXFP4 block sums 4 products (< 2^16;
 * the MXFP4 octet kernel's unsigned bytes are at most 24, so its maddubs
 * pairs stay below 2*24*127); a
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
#include "kern_internal.h"
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
 * hardware prefetcher alone gets about half (docs/decisions.md,
 * 2026-11-21). Prefetches never
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
#define KX_FLOAT_DOT(NAME, WT, LOAD)                                                               \
    static void NAME(int64_t n, float *out, const void *wv, const void *av) {                       \
        const WT *w = wv;                                                                           \
        const float *a = av;                                                                        \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                                 \
        int64_t i = 0;                                                                              \
        for (; i + 32 <= n; i += 32) {                                                              \
            kx_pf_lines(w + i, (int)(32 * sizeof(WT) / 64));                                        \
            s0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(a + i), s0);                          \
            s1 = _mm256_fmadd_ps(LOAD(w + i + 8), _mm256_loadu_ps(a + i + 8), s1);                  \
            s2 = _mm256_fmadd_ps(LOAD(w + i + 16), _mm256_loadu_ps(a + i + 16), s2);                \
            s3 = _mm256_fmadd_ps(LOAD(w + i + 24), _mm256_loadu_ps(a + i + 24), s3);                \
        }                                                                                           \
        for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(a + i), s0);   \
        if (i < n) s0 = _mm256_fmadd_ps(LOAD##_tail(w + i, (int)(n - i)), load8_f32_tail(a + i, (int)(n - i)), s0); \
        *out = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));                \
    }

static inline __m256 load8_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 load8_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load8_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
/* The first n (1..7) elements, the other lanes +0: what the zero-padded
 * copy gave, so the tails keep their bits. f32 with a masked load (masked
 * lanes neither read nor fault): a copy to the stack and a vector load
 * of it stalls on store forwarding, and at n_in 172 (stories260K's
 * w_down: 5 x 32 + 8 + 4) the tails were most of the matrix's time. */
static inline __m256 load8_f32_tail(const float *p, int n) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(p, mask);
}
static inline __m256 load8_f16_tail(const uint16_t *p, int n) {
    uint16_t t[8] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)n);
    return load8_f16(t);
}
static inline __m256 load8_bf16_tail(const uint16_t *p, int n) {
    uint16_t t[8] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)n);
    return load8_bf16(t);
}

KX_FLOAT_DOT(dot_f32, float, load8_f32)
KX_FLOAT_DOT(dot_f16, uint16_t, load8_f16)
KX_FLOAT_DOT(dot_bf16, uint16_t, load8_bf16)

/* Float gemm: tiles of up to KX_FG_R rows x KX_FG_T tokens, each (row,
 * token) summed exactly as KX_FLOAT_DOT sums it — the four accumulator
 * chains s0..s3 over the 32-element steps in order, s0 continuing with the
 * 8-element steps and the zero-padded tail, then hsum_ps((s0 + s1) + (s2 +
 * s3)) — so gemm == dot bitwise, whatever the tile. The chains run two at a
 * time (s0, s1 then s2, s3), which keeps a tile's accumulators and its
 * weight and activation vectors in registers; a tile's sums are reduced
 * four at a time (kx_hsum4). Tokens go four at a time against one row (1 x
 * 4: each weight vector serves four tokens, and a matrix's rows are read
 * once per four tokens from L2 instead of once per two); the last 1-3
 * tokens in 2 x 2 / 2 x 1 tiles. A table with registers for it (KX_FG_WIDE)
 * runs 3..KX_FG_WIDE tokens — a verification step's 1 + k — as one 2 x T
 * tile per row pair instead, and 2 tokens as 4 x 2 tiles: with the 1 x 4
 * tiles and their tails, 3 tokens cost as much as 4 and 5 as much as 4 + 1
 * (the tail's 2 x 1 tiles are a decode step's whole matmul again;
 * stories260K's matrices, avx512: 2 tokens 29 -> 25 us, 3: 46 -> 37, 5: 70
 * -> 56, 7: 94 -> 75). What a tile saves over one dot
 * per (row, token) is weight loads and a call and most of a reduction per
 * output: on a small f32 model (stories260K, n_in 64-172) a verification
 * step's 1 + k tokens cost a fraction of that many decode steps' matmuls. */
#define KX_FG_R 4 /* 4 x 2 tiles (KX_FG_WIDE); every other tile has 1 or 2 rows */
#define KX_FG_T MAX(4, KX_FG_WIDE)
#define KX_FG_CHUNK 32 /* tokens whose f32 rows stay in L2 while a chunk's row tiles run */

/* hsum_ps of a, b, c, d in lanes 0, 4, 1, 5: the same additions in the
 * same order (lo + hi halves, then lanes 0 + 2 and 1 + 3, then those two),
 * four at a time. */
static inline __m256 kx_hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 x = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    const __m256 y = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    const __m256 g = _mm256_add_ps(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_hadd_ps(g, g);
}

/* A tile of R rows x T (3..KX_FG_T) tokens, T a constant in each case
 * (clamped so that a table with a smaller KX_FG_T still compiles). */
#define KX_FG_CASES(NAME, R)                                                                                           \
    switch (T) {                                                                                                       \
    case 3: NAME##_tile(R, 3, n, wr, wrb, at, arb, yt, ldy); break;                                                    \
    case 4: NAME##_tile(R, MIN(4, KX_FG_T), n, wr, wrb, at, arb, yt, ldy); break;                                      \
    case 5: NAME##_tile(R, MIN(5, KX_FG_T), n, wr, wrb, at, arb, yt, ldy); break;                                      \
    case 6: NAME##_tile(R, MIN(6, KX_FG_T), n, wr, wrb, at, arb, yt, ldy); break;                                      \
    case 7: NAME##_tile(R, MIN(7, KX_FG_T), n, wr, wrb, at, arb, yt, ldy); break;                                      \
    default: NAME##_tile(R, KX_FG_T, n, wr, wrb, at, arb, yt, ldy); break;                                             \
    }
#define KX_FG_LOOP(v, n) _Pragma("GCC unroll 8") for (int v = 0; v < (n); v++)
#define KX_FLOAT_GEMM(NAME, WT, LOAD)                                                                                 \
    static inline __attribute__((always_inline)) void NAME##_tile(const int R, const int T, int64_t n,                 \
                                                                  const uint8_t *wd, size_t wrb, const uint8_t *ab,    \
                                                                  size_t arb, float *y, int64_t ldy) {                 \
        const WT *w[KX_FG_R];                                                                                          \
        const float *a[KX_FG_T];                                                                                       \
        KX_FG_LOOP(r, R) w[r] = (const WT *)(wd + (size_t)r * wrb);                                                    \
        KX_FG_LOOP(t, T) a[t] = (const float *)(ab + (size_t)t * arb);                                                 \
        const int64_t n32 = n / 32 * 32;                                                                               \
        __m256 v01[KX_FG_R][KX_FG_T], s[KX_FG_R][KX_FG_T][2];                                                          \
        KX_FG_LOOP(h, 2) { /* chains 2h and 2h + 1 */                                                                  \
            KX_FG_LOOP(r, R) KX_FG_LOOP(t, T) s[r][t][0] = s[r][t][1] = _mm256_setzero_ps();                           \
            for (int64_t i = 16 * h; i < n32; i += 32) {                                                               \
                if (h == 0) KX_FG_LOOP(r, R) kx_pf_lines(w[r] + i, (int)(32 * sizeof(WT) / 64));                       \
                KX_FG_LOOP(c, 2) {                                                                                     \
                    __m256 wv[KX_FG_R];                                                                                \
                    KX_FG_LOOP(r, R) wv[r] = LOAD(w[r] + i + 8 * c);                                                   \
                    KX_FG_LOOP(t, T) {                                                                                 \
                        const __m256 av = _mm256_loadu_ps(a[t] + i + 8 * c);                                           \
                        KX_FG_LOOP(r, R) s[r][t][c] = _mm256_fmadd_ps(wv[r], av, s[r][t][c]);                          \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
            if (h == 1) break;                                                                                         \
            int64_t i = n32;                                                                                           \
            for (; i + 8 <= n; i += 8)                                                                                 \
                KX_FG_LOOP(r, R) KX_FG_LOOP(t, T) s[r][t][0] =                                                         \
                    _mm256_fmadd_ps(LOAD(w[r] + i), _mm256_loadu_ps(a[t] + i), s[r][t][0]);                           \
            if (i < n) {                                                                                               \
                __m256 at[KX_FG_T];                                                                                    \
                KX_FG_LOOP(t, T) at[t] = load8_f32_tail(a[t] + i, (int)(n - i));                                      \
                KX_FG_LOOP(r, R) {                                                                                     \
                    const __m256 wt = LOAD##_tail(w[r] + i, (int)(n - i));                                             \
                    KX_FG_LOOP(t, T) s[r][t][0] = _mm256_fmadd_ps(wt, at[t], s[r][t][0]);                              \
                }                                                                                                      \
            }                                                                                                          \
            KX_FG_LOOP(r, R) KX_FG_LOOP(t, T) v01[r][t] = _mm256_add_ps(s[r][t][0], s[r][t][1]);                       \
        }                                                                                                              \
        __m256 v[KX_FG_R][KX_FG_T];                                                                                    \
        KX_FG_LOOP(r, R) KX_FG_LOOP(t, T) v[r][t] = _mm256_add_ps(v01[r][t], _mm256_add_ps(s[r][t][0], s[r][t][1]));   \
        if (R == 2 && T == 2) {                                                                                        \
            const __m256 h4 = kx_hsum4(v[0][0], v[1][0], v[0][1], v[1][1]);                                            \
            const __m128 lo = _mm256_castps256_ps128(h4), hi = _mm256_extractf128_ps(h4, 1);                           \
            const __m128 rows = _mm_unpacklo_ps(lo, hi); /* (r0 t0) (r1 t0) (r0 t1) (r1 t1) */                         \
            _mm_storel_pi((__m64 *)y, rows);                                                                           \
            _mm_storeh_pi((__m64 *)(y + ldy), rows);                                                                   \
            return;                                                                                                    \
        }                                                                                                              \
        if (R * T >= 3) { /* four outputs at a time, k = t * R + r: k, k + 1 in lanes 0 4, k + 2, k + 3 in 1 5 */     \
            _Pragma("GCC unroll 4") for (int k = 0; k < R * T; k += 4) {                                               \
                const int k1 = MIN(k + 1, R * T - 1), k2 = MIN(k + 2, R * T - 1), k3 = MIN(k + 3, R * T - 1);          \
                const __m256 h4 = kx_hsum4(v[k % R][k / R], v[k1 % R][k1 / R], v[k2 % R][k2 / R], v[k3 % R][k3 / R]);  \
                const __m128 lo = _mm256_castps256_ps128(h4), hi = _mm256_extractf128_ps(h4, 1);                       \
                y[(size_t)(k / R) * ldy + k % R] = _mm_cvtss_f32(lo);                                                  \
                if (k + 1 < R * T) y[(size_t)(k1 / R) * ldy + k1 % R] = _mm_cvtss_f32(hi);                             \
                if (k + 2 < R * T) y[(size_t)(k2 / R) * ldy + k2 % R] = _mm_cvtss_f32(_mm_movehdup_ps(lo));            \
                if (k + 3 < R * T) y[(size_t)(k3 / R) * ldy + k3 % R] = _mm_cvtss_f32(_mm_movehdup_ps(hi));            \
            }                                                                                                          \
            return;                                                                                                    \
        }                                                                                                              \
        KX_FG_LOOP(r, R) KX_FG_LOOP(t, T) y[(size_t)t * ldy + r] = hsum_ps(v[r][t]);                                   \
    }                                                                                                                  \
    static void NAME(const kern_mat *wm, int64_t r0, int64_t r1, const void *act, size_t arb, int n_tok, float *y,    \
                     int64_t ldy) {                                                                                    \
        const uint8_t *wd = wm->data, *ab = act;                                                                       \
        const int64_t n = wm->n_in;                                                                                    \
        const size_t wrb = wm->row_bytes;                                                                              \
        for (int t0 = 0; t0 < n_tok; t0 += KX_FG_CHUNK) {                                                              \
            const int t1 = MIN(n_tok, t0 + KX_FG_CHUNK);                                                               \
            const int T = t1 - t0;                                                                                     \
            if (T >= 2 && T <= KX_FG_WIDE) { /* a verification step: 4 x 2 or 2 x T tiles, each row read once */     \
                const uint8_t *at = ab + (size_t)t0 * arb;                                                             \
                for (int64_t r = r0; r < r1;) {                                                                        \
                    const uint8_t *wr = wd + (size_t)r * wrb;                                                          \
                    float *yt = y + (size_t)t0 * ldy + r;                                                              \
                    const int R = T == 2 && r + 4 <= r1 ? 4 : r + 2 <= r1 ? 2 : 1;                                     \
                    if (T == 2 && R == 4)                                                                              \
                        NAME##_tile(4, 2, n, wr, wrb, at, arb, yt, ldy);                                               \
                    else if (T == 2 && R == 2)                                                                         \
                        NAME##_tile(2, 2, n, wr, wrb, at, arb, yt, ldy);                                               \
                    else if (T == 2)                                                                                   \
                        NAME##_tile(1, 2, n, wr, wrb, at, arb, yt, ldy);                                               \
                    else if (R == 2)                                                                                   \
                        KX_FG_CASES(NAME, 2)                                                                           \
                    else                                                                                               \
                        KX_FG_CASES(NAME, 1)                                                                           \
                    r += R;                                                                                            \
                }                                                                                                      \
                continue;                                                                                              \
            }                                                                                                          \
            const int t4 = T >= 4 ? t0 + T / 4 * 4 : t0;                                                               \
            for (int64_t r = r0; r < r1 && t4 > t0; r++) /* tokens in fours: one row's vector serves four */          \
                for (int t = t0; t < t4; t += 4)                                                                       \
                    NAME##_tile(1, 4, n, wd + (size_t)r * wrb, wrb, ab + (size_t)t * arb, arb, y + (size_t)t * ldy + r, \
                                ldy);                                                                                  \
            for (int64_t r = r0; r < r1 && t4 < t1; r += 2) /* decode, two tokens, the last 1-3 */                    \
                for (int t = t4; t < t1; t += 2) {                                                                     \
                    const uint8_t *wr = wd + (size_t)r * wrb, *at = ab + (size_t)t * arb;                              \
                    float *yt = y + (size_t)t * ldy + r;                                                               \
                    if (r + 2 <= r1 && t + 2 <= t1)                                                                    \
                        NAME##_tile(2, 2, n, wr, wrb, at, arb, yt, ldy);                                               \
                    else if (r + 2 <= r1)                                                                              \
                        NAME##_tile(2, 1, n, wr, wrb, at, arb, yt, ldy);                                               \
                    else if (t + 2 <= t1)                                                                              \
                        NAME##_tile(1, 2, n, wr, wrb, at, arb, yt, ldy);                                               \
                    else                                                                                               \
                        NAME##_tile(1, 1, n, wr, wrb, at, arb, yt, ldy);                                               \
                }                                                                                                      \
        }                                                                                                              \
    }

KX_FLOAT_GEMM(gemm_f32, float, load8_f32)
KX_FLOAT_GEMM(gemm_f16, uint16_t, load8_f16)
KX_FLOAT_GEMM(gemm_bf16, uint16_t, load8_bf16)

/* ---- 32-element blocks against Q8_0 ----------------------------------------- */

/* Blocks go in pairs: even blocks accumulate into one vector, odd blocks
 * into another (acc = fma(lanes, scale, acc)), and the two vectors are added
 * at the end; an odd last block leaves the odd accumulator at acc + 0*0. This is the order avx512.c's
 * 512-bit gemm (block pair per register) follows, so its dot can be its 1x1
 * tile and still equal this one. */
#define KX_Q0_DOT(NAME, BT, WLOAD, WD)                                                               \
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
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l0), _mm256_set1_ps(WD(&w[i]) * f16s(a[i].d)), acc0); \
            acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l1), _mm256_set1_ps(WD(&w[i + 1]) * f16s(a[i + 1].d)), acc1); \
        }                                                                                           \
        if (i < nb) {                                                                               \
            const __m256i l0 = mm_dot_i8(WLOAD(&w[i]), _mm256_loadu_si256((const __m256i *)a[i].qs));       \
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l0), _mm256_set1_ps(WD(&w[i]) * f16s(a[i].d)), acc0); \
            acc1 = _mm256_fmadd_ps(_mm256_setzero_ps(), _mm256_setzero_ps(), acc1);                \
        }                                                                                           \
        *out = hsum_ps(_mm256_add_ps(acc0, acc1));                                                  \
    }

static inline __m256i wload_q8_0(const block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
static inline __m256i wload_q4_0(const block_q4_0 *b) { return q4_0_unpack(b->qs); }
static inline float wd_f16_q8_0(const block_q8_0 *b) { return f16s(b->d); }
static inline float wd_f16_q4_0(const block_q4_0 *b) { return f16s(b->d); }

KX_Q0_DOT(dot_q8_0, block_q8_0, wload_q8_0, wd_f16_q8_0)
KX_Q0_DOT(dot_q4_0, block_q4_0, wload_q4_0, wd_f16_q4_0)

/* Integer reduction of the row-octet dot product below (avx2's Q4_0 and both
 * tables' MXFP4): the sum of the 8 lanes. */
static inline int kx_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Sum of an activation block's 32 values (|sum| <= 32 * 127). */
static inline int kx_q8_sum(const block_q8_0 *a) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)a->qs));
    return kx_hsum_i32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

#ifndef KX_Q0_GEMM /* a table may bring its own Q8_0/Q4_0 dot and gemm */
/* One row x T tokens (T in 1..4) of KX_Q0_DOT: each weight block is loaded
 * (and for Q4_0 unpacked) once for the T tokens, and its absolute value and
 * the row's scale are taken once; every (row, token) keeps KX_Q0_DOT's two
 * accumulators and runs the same float operations in the same order (its
 * integer lanes are the same exact integers), so the result is bitwise
 * KX_Q0_DOT's. Prefill and the MoE experts' GEMMs (model/moe.c) run here. */
#define KX_Q0_TILE(NAME, BT, WLOAD)                                                                 \
    static inline __attribute__((always_inline)) void NAME(const int T, int64_t nb, const BT *w,  \
                                                           const uint8_t *a, size_t arb, float *y,  \
                                                           int64_t ldy) {                           \
        __m256 acc0[4], acc1[4];                                                                    \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc0[t] = acc1[t] = _mm256_setzero_ps(); \
        int64_t i = 0;                                                                              \
        for (; i + 2 <= nb; i += 2) {                                                               \
            kx_pf_lines(&w[i], (int)(2 * sizeof(BT) + 63) / 64);                                    \
            const __m256i w0 = WLOAD(&w[i]), w1 = WLOAD(&w[i + 1]);                                 \
            const __m256i u0 = _mm256_sign_epi8(w0, w0), u1 = _mm256_sign_epi8(w1, w1);             \
            const float d0 = f16s(w[i].d), d1 = f16s(w[i + 1].d);                                   \
            _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                                   \
                const block_q8_0 *at = (const block_q8_0 *)(a + t * arb) + i;                        \
                const __m256i p0 = _mm256_maddubs_epi16(                                            \
                    u0, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)at[0].qs), w0));       \
                const __m256i p1 = _mm256_maddubs_epi16(                                            \
                    u1, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)at[1].qs), w1));       \
                const __m256i l0 = _mm256_madd_epi16(p0, _mm256_set1_epi16(1));                     \
                const __m256i l1 = _mm256_madd_epi16(p1, _mm256_set1_epi16(1));                     \
                acc0[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l0), _mm256_set1_ps(d0 * f16s(at[0].d)), acc0[t]); \
                acc1[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l1), _mm256_set1_ps(d1 * f16s(at[1].d)), acc1[t]); \
            }                                                                                       \
        }                                                                                           \
        if (i < nb) {                                                                               \
            const __m256i w0 = WLOAD(&w[i]);                                                        \
            const float d0 = f16s(w[i].d);                                                          \
            _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                                   \
                const block_q8_0 *at = (const block_q8_0 *)(a + t * arb) + i;                        \
                const __m256i l0 = mm_dot_i8(w0, _mm256_loadu_si256((const __m256i *)at[0].qs));   \
                acc0[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l0), _mm256_set1_ps(d0 * f16s(at[0].d)), acc0[t]); \
                acc1[t] = _mm256_fmadd_ps(_mm256_setzero_ps(), _mm256_setzero_ps(), acc1[t]);     \
            }                                                                                       \
        }                                                                                           \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) y[t * ldy] = hsum_ps(_mm256_add_ps(acc0[t], acc1[t])); \
    }

/* The sign trick in the tile equals mm_dot_i8 only if mm_dot_i8 is that
 * same maddubs/madd sequence (avx2.c's); KX_Q0_TILE_OK says so. */
#ifdef KX_Q0_TILE_OK
KX_Q0_TILE(q8_0_tile, block_q8_0, wload_q8_0)

/* Rows r0..r1-1 of the one-row tile for the tokens [t0, t1). */
static void q8_0_rows(const kern_mat *wm, int64_t r0, int64_t r1, const uint8_t *act, size_t arb, int t0, int t1,
                      float *y, int64_t ldy) {
    const int64_t nb = wm->n_in / QK8_0;
    for (int64_t r = r0; r < r1; r++) {
        const block_q8_0 *w = (const block_q8_0 *)((const uint8_t *)wm->data + (size_t)r * wm->row_bytes);
        int t = t0;
        for (; t + 4 <= t1; t += 4) q8_0_tile(4, nb, w, act + (size_t)t * arb, arb, y + (size_t)t * ldy + r, ldy);
        switch (t1 - t) {
        case 3: q8_0_tile(3, nb, w, act + (size_t)t * arb, arb, y + (size_t)t * ldy + r, ldy); break;
        case 2: q8_0_tile(2, nb, w, act + (size_t)t * arb, arb, y + (size_t)t * ldy + r, ldy); break;
        case 1: q8_0_tile(1, nb, w, act + (size_t)t * arb, arb, y + (size_t)t * ldy + r, ldy); break;
        }
    }
}

/* ---- Q8_0 with rows in lanes (4 tokens and more) ------------------------------
 * The one-row tile spends, per (row, token, block), a sign, maddubs, madd,
 * convert and FMA on the 8 lanes of the block's products plus, in scalar,
 * the f16 activation scale's convert, the product d_w * d_a and its
 * broadcast: about 8 vector-unit operations, so with 8 sequences decoding
 * together the Q8_0 matrices (gpt-oss's attention and its 0.62 GB output
 * matrix) run below the memory's speed. Here 8 rows' blocks are transposed
 * (q8p_pack, per call into a stack buffer in L1, as oct_pack does) so that
 * vector j of a block holds elements 4j..4j+3 of each of the 8 rows, lane r
 * being row r. Against the activation block's dword j broadcast to every
 * lane, the sign trick, maddubs and madd give in lane r exactly the integer
 * that lane j of KX_Q0_DOT's mm_dot_i8 gives for row r; its convert and FMA
 * into accumulator j (even or odd block, as KX_Q0_DOT's acc0/acc1) with the
 * 8 rows' d_w times d_a as one vector are KX_Q0_DOT's float steps in its
 * order, and q8p_finish adds the accumulators in hsum_ps's order. So every
 * element is bitwise the table's dot product (test_matmul), and the
 * AVX-512 table, which keeps its own Q8_0 gemm and dot in that same float
 * order, still agrees with this one to the bit. Per (row, token, block) the
 * scalar work is gone and the vector work is about 5 operations.
 * The 16 accumulators of a token do not fit in registers beside the
 * operands, so a token runs its even blocks, then its odd ones (8 each),
 * and they wait between k-chunks in a carry buffer (cr, stack). */
#define KX_Q8P_KB 32 /* blocks per packed k-chunk: 16 KB of packed weights; even, so parity is the block's */
#define KX_Q8P_TC 64 /* tokens per chunk: 32 KB of carried accumulators */
/* Below KX_Q8P_PMIN tokens the one-row tile runs: the per-call transpose is
 * shared by too few tokens. Measured on an AVX2 AMD EPYC (`kvloom bench --pp
 * N`, TinyLlama-1.1B and SmolLM2 Q8_0 shapes, 2026-11-28): the tile was
 * 1.35-1.8x faster at 4 tokens, 1.15-1.4x at 8, even at 16, slower at 32+
 * (docs/perf.md, "The Q8_0 gemm's threshold"). Batch decode of 4-15
 * sequences and speculative verification of 3-15 drafts are those sizes. */
#define KX_Q8P_PMIN 16

/* Blocks [0, n) of rows r..r+7 (row stride rb from w0): wl[16 i + j] holds
 * dword j (elements 4j..4j+3) of the 8 rows as signed bytes, wl[16 i + 8 + j]
 * their absolute values (as unsigned bytes, -128 -> 128), dl[i] the 8 rows'
 * d_w. An 8 x 8 dword transpose: unpacks of 32 and 64 bits, then the
 * 128-bit halves of rows 0-3 and 4-7 joined. */
static inline __attribute__((always_inline)) void q8p_pack(const uint8_t *w0, size_t rb, int n, __m256i *wl,
                                                          __m256 *dl) {
    for (int i = 0; i < n; i++) {
        const uint8_t *b[8];
        __m256i v[8];
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
            b[r] = w0 + (size_t)r * rb + (size_t)i * sizeof(block_q8_0);
            v[r] = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)b[r])->qs);
        }
        __m256i u[8];
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m256i *q = v + 4 * h;
            const __m256i l01 = _mm256_unpacklo_epi32(q[0], q[1]), h01 = _mm256_unpackhi_epi32(q[0], q[1]);
            const __m256i l23 = _mm256_unpacklo_epi32(q[2], q[3]), h23 = _mm256_unpackhi_epi32(q[2], q[3]);
            /* u[4h + k]: dword k (low 128 bits) and k + 4 (high) of rows 4h..4h+3 */
            u[4 * h + 0] = _mm256_unpacklo_epi64(l01, l23);
            u[4 * h + 1] = _mm256_unpackhi_epi64(l01, l23);
            u[4 * h + 2] = _mm256_unpacklo_epi64(h01, h23);
            u[4 * h + 3] = _mm256_unpackhi_epi64(h01, h23);
        }
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const __m256i lo = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
            const __m256i hi = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
            _mm256_store_si256(&wl[16 * i + k], lo);
            _mm256_store_si256(&wl[16 * i + 4 + k], hi);
            _mm256_store_si256(&wl[16 * i + 8 + k], _mm256_sign_epi8(lo, lo));
            _mm256_store_si256(&wl[16 * i + 12 + k], _mm256_sign_epi8(hi, hi));
        }
#define KX_D(r) ((short)((const block_q8_0 *)b[r])->d)
        dl[i] = _mm256_cvtph_ps(_mm_setr_epi16(KX_D(0), KX_D(1), KX_D(2), KX_D(3), KX_D(4), KX_D(5), KX_D(6), KX_D(7)));
#undef KX_D
    }
}

/* One token's blocks par, par + 2, ... < n of the packed rows (ab: the
 * token's activation blocks of this k-chunk) into acc[0..8). */
static inline __attribute__((always_inline)) void q8p_run(const __m256i *wl, const __m256 *dl, int n, int par,
                                                         const block_q8_0 *ab, __m256 *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = par; i < n; i += 2) {
        const __m256 d = _mm256_mul_ps(dl[i], _mm256_set1_ps(f16s(ab[i].d)));
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
            int32_t q;
            memcpy(&q, ab[i].qs + 4 * j, 4);
            const __m256i s = _mm256_sign_epi8(_mm256_set1_epi32(q), _mm256_load_si256(&wl[16 * i + j]));
            const __m256i l = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_load_si256(&wl[16 * i + 8 + j]), s), ones);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l), d, acc[j]);
        }
    }
}

/* The 8 rows of one token from its carried accumulators (even c[0..8), odd
 * c[8..16)): lane j of KX_Q0_DOT's acc0 + acc1 is c[j] + c[8 + j], summed
 * as hsum_ps sums lanes. */
static inline void q8p_finish(const __m256 *c, float *y) {
    __m256 v[8];
    for (int j = 0; j < 8; j++) v[j] = _mm256_add_ps(c[j], c[8 + j]);
    const __m256 a = _mm256_add_ps(_mm256_add_ps(v[0], v[4]), _mm256_add_ps(v[2], v[6]));
    const __m256 b = _mm256_add_ps(_mm256_add_ps(v[1], v[5]), _mm256_add_ps(v[3], v[7]));
    _mm256_storeu_ps(y, _mm256_add_ps(a, b));
}

static void gemm_q8_0(const kern_mat *wm, int64_t r0, int64_t r1, const void *act, size_t arb, int n_tok, float *y,
                      int64_t ldy) {
    const int64_t nb = wm->n_in / QK8_0;
    const uint8_t *wd = wm->data, *ab = act;
    const size_t rb = wm->row_bytes;
    const int64_t r8 = r0 + ((r1 - r0) & ~(int64_t)7);
    __m256i wl[16 * KX_Q8P_KB];
    __m256 dl[KX_Q8P_KB], cr[16 * KX_Q8P_TC];
    for (int t0 = 0; t0 < n_tok; t0 += KX_Q8P_TC) {
        const int t1 = MIN(n_tok, t0 + KX_Q8P_TC), nt = t1 - t0;
        if (nt < KX_Q8P_PMIN) {
            q8_0_rows(wm, r0, r1, ab, arb, t0, t1, y, ldy);
            continue;
        }
        for (int64_t r = r0; r < r8; r += 8) {
            for (int k = 0; k < 16 * nt; k++) cr[k] = _mm256_setzero_ps();
            for (int64_t i0 = 0; i0 < nb; i0 += KX_Q8P_KB) {
                const int n = (int)MIN(KX_Q8P_KB, nb - i0);
                q8p_pack(wd + (size_t)r * rb + (size_t)i0 * sizeof(block_q8_0), rb, n, wl, dl);
                for (int t = 0; t < nt; t++) {
                    const block_q8_0 *at = (const block_q8_0 *)(ab + (size_t)(t0 + t) * arb) + i0;
                    __m256 acc[8];
                    _Pragma("GCC unroll 2") for (int par = 0; par < 2; par++) {
                        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) acc[j] = cr[16 * t + 8 * par + j];
                        q8p_run(wl, dl, n, par, at, acc);
                        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) cr[16 * t + 8 * par + j] = acc[j];
                    }
                }
            }
            for (int t = 0; t < nt; t++) q8p_finish(cr + 16 * t, y + (size_t)(t0 + t) * ldy + r);
        }
        q8_0_rows(wm, r8, r1, ab, arb, t0, t1, y, ldy);
    }
}

#define KX_DOT_Q8_0 dot_q8_0
#define KX_DOT_Q4_0 dot_q4_0r
#define KX_GEMM_Q8_0 gemm_q8_0
#define KX_GEMM_Q4_0 gemm_q4_0r
#else
#define KX_DOT_Q8_0 dot_q8_0
#define KX_DOT_Q4_0 dot_q4_0
#define KX_GEMM_Q8_0 NULL
#define KX_GEMM_Q4_0 NULL
#endif
#endif

/* ---- Q4_0 and MXFP4, eight rows at a time ------------------------------------
 * The one-row tile above spends most of its instructions per (row, token,
 * block) on float work: a convert, a scale product, a broadcast and an FMA
 * into an 8-lane partial sum, plus the sign trick's extra op. Here a block's
 * integer dot product is finished first, for 8 rows at once: the weights as
 * unsigned bytes against the signed activations (maddubs, madd), the rows'
 * partial sums reduced into one vector whose lane r is row r's block sum,
 * minus the bytes' offset times the activation block's sum. Then one convert and one FMA per 8 rows: lane r gets
 *   acc = fma(float(isum), d_w * d_a, acc)
 * in block order, one accumulator per (row, token). The table's dot product
 * (oct_dot) computes the same integer by another route and applies the same
 * float steps, so every gemm element is bitwise the table's dot (kern.h).
 *   Q4_0 (avx2 only: avx512.c brings its own): the nibbles 0..15, offset 8,
 *        d_w the block's f16 scale.
 *   MXFP4 (both tables): each nibble looked up (pshufb, 16 entries) as its
 *        doubled E2M1 value plus 12 (0..24: maddubs's pair sums stay below
 *        2 * 24 * 127), offset 12; d_w = 2^(e-128), quant_mxfp4_half_scale
 *        of the E8M0 byte, built for the 8 rows in one vector.
 * Measured on qwen3-30b-a3b Q4_0 (docs/perf.md): the expert GEMMs of prefill
 * are 87% of its time; gpt-oss's are its MXFP4 experts. */
enum { OCT_Q4_0, OCT_MXFP4 };

/* The 32 nibbles of a block's 16 bytes as indices 0..15, in element order
 * (low nibbles are elements 0..15, high ones 16..31). */
static inline __m256i kx_nib(const uint8_t *qs) {
    const __m128i x = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(x, m));
}

/* The doubled E2M1 values plus 12, in both 128-bit lanes (for pshufb). */
static inline __m256i mx_lut_u(void) {
    return _mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_mxfp4_q2)),
                           _mm256_set1_epi8(12));
}

/* 8 lanes of quant_mxfp4_half_scale(e): (e-1) << 23 as float bits, and the
 * two subnormal cases e = 0, 1 as 2^21 << e. */
static inline __m256 mx_scale8(__m256i e) {
    const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(small, big, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}

static inline int oct_offset(const int ty) { return ty == OCT_MXFP4 ? 12 : 8; }

/* One row's dot product: per block the exact integer (mm_dot_i8 on the
 * signed values), then acc = fma(float(isum), d_w * d_a, acc). */
static inline __attribute__((always_inline)) void oct_dot(const int ty, int64_t n, float *out, const void *wv,
                                                         const void *av) {
    const block_q8_0 *a = av;
    const int64_t nb = n / QK8_0;
    const __m128i lut = _mm_loadu_si128((const __m128i *)quant_mxfp4_q2);
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i av8 = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i wq;
        float dw;
        if (ty == OCT_MXFP4) {
            const block_mxfp4 *b = (const block_mxfp4 *)wv + i;
            if ((i & 1) == 0) kx_pf_lines(b, 1);
            wq = _mm256_shuffle_epi8(_mm256_set_m128i(lut, lut), kx_nib(b->qs));
            dw = quant_mxfp4_half_scale(b->e);
        } else {
            const block_q4_0 *b = (const block_q4_0 *)wv + i;
            kx_pf_lines(b, 1);
            wq = q4_0_unpack(b->qs);
            dw = f16s(b->d);
        }
        const int isum = kx_hsum_i32(mm_dot_i8(wq, av8));
        acc = fmaf((float)isum, dw * f16s(a[i].d), acc);
    }
    *out = acc;
}

/* d_w of one block of 8 rows (b[r]: row r's block) as 8 floats, inserted
 * word by word (faster in the decode tile than combining them in general
 * registers or with an unpack tree: docs/decisions.md, 2026-11-27). */
static inline __attribute__((always_inline)) __m256 oct_scales(const int ty, const uint8_t *const *b) {
    if (ty == OCT_MXFP4) {
#define KX_E(r) (((const block_mxfp4 *)b[r])->e)
        return mx_scale8(_mm256_setr_epi32(KX_E(0), KX_E(1), KX_E(2), KX_E(3), KX_E(4), KX_E(5), KX_E(6), KX_E(7)));
#undef KX_E
    }
#define KX_D(r) ((short)((const block_q4_0 *)b[r])->d)
    return _mm256_cvtph_ps(_mm_setr_epi16(KX_D(0), KX_D(1), KX_D(2), KX_D(3), KX_D(4), KX_D(5), KX_D(6), KX_D(7)));
#undef KX_D
}

/* Rows r..r+7 (row stride rb bytes from w0) x T tokens (T in 1..4) over nb
 * blocks; cs[t * ncs + i] is the offset x token t's block i sum
 * (kx_q8_sum) and ds[t * ncs + i] its scale d_a as a float (converted once
 * per call, not once per row octet); y[t * ldy + 0..7] receives the 8 rows of token t, and holds
 * their partial sums on entry unless `first` (the float accumulator carried
 * between k-chunks: storing and reloading a float is exact).
 * Rows k and k+4 share a register: their 16 nibble bytes side by side, split
 * into low nibbles (elements 0..15 of both rows) and high ones (16..31), so
 * the activation block's halves, each broadcast to both 128-bit lanes, meet
 * their weights with two maddubs; the i16 sums of the two (at most
 * 2 x 2 x 24 x 128 < 2^15) go through one madd, leaving 4 lanes per row, and
 * two rounds of unpacks and adds put row r's block sum in lane r (cheaper
 * than three hadds; the layout against others: docs/decisions.md,
 * 2026-11-27). The unpacked weights go through a small buffer in L1 rather
 * than 8 registers: AVX2 has 16, and with them held the 4 accumulators
 * would be spilled and reloaded every block.
 * Prefetch: with pf set, one stream front to back over the matrix: block i
 * prefetches the 3 lines from pf + 8 i bsz (8 blocks' bytes per block, what
 * the tile consumes, so the stream keeps its distance), none from pf_end on;
 * oct_gemm puts pf one octet minus a row plus KX_OCT_LEAD ahead of the
 * octet (oct_pf). With pf NULL each row prefetches its own line KX_PF_BYTES
 * ahead, 8 streams. The single stream is the faster of the two from DRAM
 * (docs/decisions.md, 2026-11-28). */
static inline __attribute__((always_inline)) void oct_tile(const int ty, const int T, int64_t nb, const uint8_t *w0,
                                                          size_t rb, const uint8_t *a, size_t arb, const int32_t *cs,
                                                          const float *ds, size_t ncs, float *y, int64_t ldy,
                                                          int first, const uint8_t *pf, const uint8_t *pf_end) {
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[t] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + t * ldy);
    const __m256i ones = _mm256_set1_epi16(1), lut = mx_lut_u(), m = _mm256_set1_epi8(15);
    const size_t bsz = ty == OCT_MXFP4 ? sizeof(block_mxfp4) : sizeof(block_q4_0);
    const size_t qo = ty == OCT_MXFP4 ? offsetof(block_mxfp4, qs) : offsetof(block_q4_0, qs);
    __m256i wq[8];
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b[8];
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
            b[r] = w0 + (size_t)r * rb + (size_t)i * bsz;
            if (!pf && (i & 1) == 0) kx_pf_lines(b[r], 1);
        }
        if (pf && pf + (size_t)i * 8 * bsz < pf_end) {
            const char *q = (const char *)pf + (size_t)i * 8 * bsz;
            _mm_prefetch(q, _MM_HINT_T0);
            _mm_prefetch(q + 64, _MM_HINT_T0);
            _mm_prefetch(q + 128, _MM_HINT_T0);
        }
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const __m256i v = _mm256_loadu2_m128i((const __m128i *)(b[k + 4] + qo), (const __m128i *)(b[k] + qo));
            __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
            if (ty == OCT_MXFP4) lo = _mm256_shuffle_epi8(lut, lo), hi = _mm256_shuffle_epi8(lut, hi);
            _mm256_store_si256(&wq[2 * k], lo);
            _mm256_store_si256(&wq[2 * k + 1], hi);
        }
        const __m256 dw = oct_scales(ty, b);
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const block_q8_0 *ab = (const block_q8_0 *)(a + (size_t)t * arb) + i;
            const __m256i alo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ab->qs));
            const __m256i ahi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(ab->qs + 16)));
            __m256i v[4];
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
                v[k] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(_mm256_load_si256(&wq[2 * k]), alo),
                                                          _mm256_maddubs_epi16(_mm256_load_si256(&wq[2 * k + 1]), ahi)),
                                         ones);
            const __m256i p01 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[0], v[1]), _mm256_unpackhi_epi32(v[0], v[1]));
            const __m256i p23 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2], v[3]), _mm256_unpackhi_epi32(v[2], v[3]));
            const __m256i h = _mm256_add_epi32(_mm256_unpacklo_epi64(p01, p23), _mm256_unpackhi_epi64(p01, p23));
            const __m256i s = _mm256_sub_epi32(h, _mm256_set1_epi32(cs[(size_t)t * ncs + i]));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(ds[(size_t)t * ncs + i])), acc[t]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) _mm256_storeu_ps(y + t * ldy, acc[t]);
}

/* ---- the same with rows in lanes (prefill) -----------------------------------
 * oct_tile spends, per (8 rows, token, block), 4 madds and 9 unpacks and
 * adds on moving each row's lanes into one lane. With the 8 rows' weights transposed so that lane r of every vector is row r, the products
 * land in the right lane to begin with: vector j of a block holds 4 weights
 * of each row (elements 4j..4j+3 for j < 4, 16+4(j-4).. for j >= 4: the
 * low and high nibbles of the same 4 bytes) and is multiplied by the
 * activation block's dword j broadcast to every lane. The maddubs results
 * are added as i16 — all 8 for Q4_0 (a pair sum is at most 2 x 15 x 128,
 * eight of them 30720 < 2^15), 4 and 4 for MXFP4 (2 x 24 x 128 x 4 = 24576)
 * — then madd makes the i32 block sums, exact; the offset, the convert and
 * the FMA are oct_tile's, so each lane runs oct_dot's float steps on the
 * same integer and the result is bitwise the table's dot.
 *
 * The transposed copy is made per call in a stack buffer (oct_pack: 8 rows
 * x KX_OCT_KB blocks, 16 KB, in L1) and used for every token of the chunk,
 * so its cost is shared by up to KX_OCT_TC tokens. The mapped weights are
 * never written and no second copy of a model is kept (a load-time repack
 * would need one: the file is mapped read-only, and a model may be larger
 * than RAM). Below KX_OCT_PMIN tokens (decode) the transpose costs more than
 * it saves and oct_tile runs (what it gained: docs/decisions.md,
 * 2026-11-27). */
#define KX_OCT_KB 64
#define KX_OCT_TC 64
#define KX_OCT_PMIN 4

/* Blocks [0, n) of rows r..r+7 (row stride rb from w0) into wl[8 i + j] (the
 * weights as oct_tile's unsigned bytes) and dl[i] (the 8 rows' d_w). A row's
 * 16 nibble bytes are 4 dwords; rows r and r+4 share a register, and two
 * rounds of unpacks make dword j of the 8 rows one vector. */
static inline __attribute__((always_inline)) void oct_pack(const int ty, const uint8_t *w0, size_t rb, int n,
                                                          __m256i *wl, __m256 *dl) {
    const __m256i m = _mm256_set1_epi8(15), lut = mx_lut_u();
    const size_t bsz = ty == OCT_MXFP4 ? sizeof(block_mxfp4) : sizeof(block_q4_0);
    const size_t qo = ty == OCT_MXFP4 ? offsetof(block_mxfp4, qs) : offsetof(block_q4_0, qs);
    for (int i = 0; i < n; i++) {
        const uint8_t *b[8];
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
            b[r] = w0 + (size_t)r * rb + (size_t)i * bsz;
            if ((i & 1) == 0) kx_pf_lines(b[r], 1);
        }
        __m256i v[4];
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
            v[r] = _mm256_loadu2_m128i((const __m128i *)(b[r + 4] + qo), (const __m128i *)(b[r] + qo));
        const __m256i l01 = _mm256_unpacklo_epi32(v[0], v[1]), h01 = _mm256_unpackhi_epi32(v[0], v[1]);
        const __m256i l23 = _mm256_unpacklo_epi32(v[2], v[3]), h23 = _mm256_unpackhi_epi32(v[2], v[3]);
        const __m256i p[4] = {_mm256_unpacklo_epi64(l01, l23), _mm256_unpackhi_epi64(l01, l23),
                              _mm256_unpacklo_epi64(h01, h23), _mm256_unpackhi_epi64(h01, h23)};
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            __m256i lo = _mm256_and_si256(p[j], m), hi = _mm256_and_si256(_mm256_srli_epi16(p[j], 4), m);
            if (ty == OCT_MXFP4) lo = _mm256_shuffle_epi8(lut, lo), hi = _mm256_shuffle_epi8(lut, hi);
            _mm256_store_si256(&wl[8 * i + j], lo);
            _mm256_store_si256(&wl[8 * i + 4 + j], hi);
        }
        dl[i] = oct_scales(ty, b);
    }
}

/* The 8 packed rows x T tokens (T in 1..4) over the n blocks of wl/dl, with
 * oct_tile's other arguments. One token's 8 products of a block are summed
 * before the next token's; the weight vectors are reloaded from L1 for each
 * token (kept in registers across tokens, they make the compiler spill the
 * accumulators); the activation dwords are broadcast from memory. */
static inline __attribute__((always_inline)) void oct_ptile(const int ty, const int T, int n, const __m256i *wl,
                                                           const __m256 *dl, const uint8_t *a, size_t arb,
                                                           const int32_t *cs, const float *ds, size_t ncs, float *y,
                                                           int64_t ldy, int first) {
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[t] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + t * ldy);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < n; i++) {
        const __m256 d = dl[i];
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const block_q8_0 *ab = (const block_q8_0 *)(a + (size_t)t * arb) + i;
            __m256i s = _mm256_setzero_si256(), s2 = s;
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
                int32_t q;
                memcpy(&q, ab->qs + 4 * j, 4);
                const __m256i p = _mm256_maddubs_epi16(_mm256_load_si256(&wl[8 * i + j]), _mm256_set1_epi32(q));
                if (ty == OCT_MXFP4 && j >= 4) s2 = j == 4 ? p : _mm256_add_epi16(s2, p);
                else s = j ? _mm256_add_epi16(s, p) : p;
            }
            __m256i is = _mm256_madd_epi16(s, ones);
            if (ty == OCT_MXFP4) is = _mm256_add_epi32(is, _mm256_madd_epi16(s2, ones));
            is = _mm256_sub_epi32(is, _mm256_set1_epi32(cs[(size_t)t * ncs + i]));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(d, _mm256_set1_ps(ds[(size_t)t * ncs + i])), acc[t]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) _mm256_storeu_ps(y + t * ldy, acc[t]);
}

/* Tokens go in chunks of KX_OCT_TC and blocks in k-chunks: KX_OCT_KB for the
 * packed tiles (their buffer), KX_OCT_KR for oct_tile (decode streams each
 * row front to back; rows up to 32768 wide are not cut). The activation
 * sums of a chunk are on the stack (KX_OCT_SUMS); the partial sums of a
 * k-chunk wait in y. Every width runs the same code. */
#define KX_OCT_KR 1024
/* oct_tile's single prefetch stream (decode): at block i of an octet (rows
 * r..r+7 at w) the tile has read i blocks of each row, and prefetches
 * 7 rb + KX_OCT_LEAD + 8 i bsz bytes past w, so row r+7's block i is
 * fetched KX_OCT_LEAD bytes of stream (about 0.1 us at a core's share of
 * DRAM bandwidth) before the tile reaches it, and every row of the next
 * octet before its turn. The lines fetched ahead and not yet used are
 * 7 rb + KX_OCT_LEAD bytes: rows wider than KX_OCT_PF_MAX / 7 (about 11,000
 * Q4_0 weights) or a row cut in k-chunks keep the 8 per-row streams rather
 * than overrun L1 (32 KB). Measured on qwen3-30b-a3b's shapes (2 threads, from DRAM, a
 * 2048-wide matrix; docs/perf.md): lead 512-2048 about equal, 4096 slower. */
#define KX_OCT_LEAD 1024
#define KX_OCT_PF_MAX 24576
static inline const uint8_t *oct_pf(bool packed, bool whole_rows, const uint8_t *w, size_t rb) {
    return !packed && whole_rows && 7 * rb + KX_OCT_LEAD <= KX_OCT_PF_MAX ? w + 7 * rb + KX_OCT_LEAD : NULL;
}
#define KX_OCT_SUMS MAX(KX_OCT_KR * (KX_OCT_PMIN - 1), KX_OCT_KB * KX_OCT_TC)
static inline __attribute__((always_inline)) void oct_gemm(const int ty, const kern_mat *wm, int64_t r0, int64_t r1,
                                                          const void *act, size_t arb, int n_tok, float *y,
                                                          int64_t ldy) {
    const int64_t nb = wm->n_in / QK8_0;
    const uint8_t *wd = wm->data, *ab = act;
    const size_t rb = wm->row_bytes, bsz = ty == OCT_MXFP4 ? sizeof(block_mxfp4) : sizeof(block_q4_0);
    const int64_t r8 = r0 + ((r1 - r0) & ~(int64_t)7);
    const uint8_t *pf_end = wd + (size_t)r8 * rb; /* nothing past this call's rows */
    int32_t cs[KX_OCT_SUMS];
    float ds[KX_OCT_SUMS];
    __m256i wl[8 * KX_OCT_KB];
    __m256 dl[KX_OCT_KB];
    for (int t0 = 0; t0 < n_tok; t0 += KX_OCT_TC) {
        const int t1 = MIN(n_tok, t0 + KX_OCT_TC), nt = t1 - t0;
        const bool packed = nt >= KX_OCT_PMIN;
        const int64_t kb = packed ? KX_OCT_KB : KX_OCT_KR;
        for (int64_t i0 = 0; i0 < nb && r8 > r0; i0 += kb) {
            const int64_t n = MIN(kb, nb - i0);
            for (int t = t0; t < t1; t++) {
                const block_q8_0 *at = (const block_q8_0 *)(ab + (size_t)t * arb) + i0;
                for (int64_t i = 0; i < n; i++) {
                    cs[(size_t)(t - t0) * n + i] = oct_offset(ty) * kx_q8_sum(&at[i]);
                    ds[(size_t)(t - t0) * n + i] = f16s(at[i].d);
                }
            }
            const uint8_t *a0 = ab + (size_t)t0 * arb + (size_t)i0 * sizeof(block_q8_0);
            const int first = i0 == 0;
            for (int64_t r = r0; r < r8; r += 8) {
                const uint8_t *w = wd + (size_t)r * rb + (size_t)i0 * bsz;
                float *yr = y + (size_t)t0 * ldy + r;
                if (packed) oct_pack(ty, w, rb, (int)n, wl, dl);
                const uint8_t *pf = oct_pf(packed, n == nb, w, rb);
                for (int t = 0; t < nt; t += 4) {
                    const uint8_t *aa = a0 + (size_t)t * arb;
                    const int32_t *ct = cs + (size_t)t * n;
                    const float *dt = ds + (size_t)t * n;
                    float *yt = yr + (size_t)t * ldy;
                    if (packed) switch (MIN(4, nt - t)) {
                        case 4: oct_ptile(ty, 4, (int)n, wl, dl, aa, arb, ct, dt, n, yt, ldy, first); break;
                        case 3: oct_ptile(ty, 3, (int)n, wl, dl, aa, arb, ct, dt, n, yt, ldy, first); break;
                        case 2: oct_ptile(ty, 2, (int)n, wl, dl, aa, arb, ct, dt, n, yt, ldy, first); break;
                        case 1: oct_ptile(ty, 1, (int)n, wl, dl, aa, arb, ct, dt, n, yt, ldy, first); break;
                        }
                    else switch (MIN(4, nt - t)) {
                        case 4: oct_tile(ty, 4, n, w, rb, aa, arb, ct, dt, n, yt, ldy, first, pf, pf_end); break;
                        case 3: oct_tile(ty, 3, n, w, rb, aa, arb, ct, dt, n, yt, ldy, first, pf, pf_end); break;
                        case 2: oct_tile(ty, 2, n, w, rb, aa, arb, ct, dt, n, yt, ldy, first, pf, pf_end); break;
                        case 1: oct_tile(ty, 1, n, w, rb, aa, arb, ct, dt, n, yt, ldy, first, pf, pf_end); break;
                        }
                }
            }
        }
        for (int64_t r = r8; r < r1; r++)
            for (int t = t0; t < t1; t++) oct_dot(ty, wm->n_in, &y[t * ldy + r], wd + r * rb, ab + (size_t)t * arb);
    }
}
#undef KX_OCT_SUMS
#undef KX_OCT_KR
#undef KX_OCT_LEAD
#undef KX_OCT_PF_MAX

static __attribute__((unused)) void dot_q4_0r(int64_t n, float *out, const void *w, const void *a) {
    oct_dot(OCT_Q4_0, n, out, w, a);
}
static __attribute__((unused)) void gemm_q4_0r(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t arb,
                                               int n_tok, float *y, int64_t ldy) {
    oct_gemm(OCT_Q4_0, w, r0, r1, act, arb, n_tok, y, ldy);
}
static void dot_mxfp4(int64_t n, float *out, const void *w, const void *a) { oct_dot(OCT_MXFP4, n, out, w, a); }
static void gemm_mxfp4(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t arb, int n_tok, float *y,
                       int64_t ldy) {
    oct_gemm(OCT_MXFP4, w, r0, r1, act, arb, n_tok, y, ldy);
}

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

static __attribute__((unused)) void gemm_q4_k(const kern_mat *w, int64_t r0, int64_t r1, const void *act,
                                              size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    k45_gemm(0, w, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
static void gemm_q5_k(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes, int n_tok,
                      float *y, int64_t ldy) {
    k45_gemm(1, w, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
static __attribute__((unused)) void dot_q4_k(int64_t n, float *out, const void *w, const void *a) {
    k45_tile(1, 1, 0, n / QK_K, w, 0, a, 0, out, 0);
}
static void dot_q5_k(int64_t n, float *out, const void *w, const void *a) {
    k45_tile(1, 1, 1, n / QK_K, w, 0, a, 0, out, 0);
}
#ifndef KX_K4_GEMM /* a table may bring its own Q4_K dot and gemm (same bits) */
#define KX_DOT_Q4_K dot_q4_k
#define KX_GEMM_Q4_K gemm_q4_k
#endif
#ifndef KX_K6_GEMM /* a table may bring a Q6_K gemm (dot_q6_k's bits) */
#define KX_K6_GEMM NULL
#endif

/* The 6-bit values of half h (elements 128h..128h+127) of a Q6_K block, as
 * unsigned bytes: q[k] holds elements 128h + 32k .. 128h + 32k + 31. */
static inline void q6k_unpack(const block_q6_k *b, int h, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(0x30);
    const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
    q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
}

/* Q6_K: q = 6-bit unsigned value; the -32 offset is taken out once per
 * super-block as 32 * sum over groups of scale * bsum. */
static void dot_q6_k(int64_t n, float *out, const void *wv, const void *av) {
    const block_q6_k *w = wv;
    const block_q8_k *a = av;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        kx_pf_lines(&w[i], 4);
        const int8_t *sc = w[i].scales;
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6k_unpack(&w[i], h, q);
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
 * 2^n through the exponent bits. One fma finds n: t = x log2e + M with M =
 * 1.5 * 2^23 + 127 lands in [2^23, 2^24), where floats are the integers, so
 * it rounds x log2e to the nearest integer n and t's low mantissa bits hold
 * n + 127 — shifted left by 23, the exponent field of 2^n — and t - M is n
 * exactly. x is clamped at -88 first, where n = -127 and the exponent field
 * is 0: the result is +0 from about -87.7 down (and for -inf); from there
 * to -87.3 it is 2^-126 p, which may round to a subnormal, as e^x does. Four
 * operations fewer than round, convert and a compare-and-mask for the zero
 * (attention runs one exp per query and key: at head_dim 8 the softmax was a
 * third of a verification step's attention, docs/perf.md). */
static inline __m256 kx_exp(__m256 x) {
    const __m256 magic = _mm256_set1_ps(12583039.0f); /* 1.5 * 2^23 + 127 */
    x = _mm256_max_ps(x, _mm256_set1_ps(-88.0f));
    const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
    const __m256 n = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23)));
}

/* silu(g) * u, 8 at a time: with z = e^-|g| (<= 1, so kx_exp's range),
 * sigmoid(g) = 1 / (1 + z) for g >= 0 and z / (1 + z) below; a scalar tail
 * runs the same formula on a zero-padded vector. */
static inline __m256 kx_swiglu8(__m256 g, __m256 u) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 z = kx_exp(_mm256_or_ps(g, sign)); /* e^-|g| */
    const __m256 neg = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 num = _mm256_blendv_ps(one, z, neg);
    return _mm256_mul_ps(_mm256_mul_ps(g, _mm256_div_ps(num, _mm256_add_ps(one, z))), u);
}

static void swiglu(float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, kx_swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(g, kx_swiglu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, sizeof(float) * (size_t)(n - i));
    }
}

/* ---- f16 stores (kern_f16_store) ----------------------------------------------
 *
 * vcvtps2ph with round-to-nearest-even gives f32_to_fp16's bits for every
 * value but NaN (overflow to inf from 65520 on, subnormal halves rounded,
 * +-0 and inf kept); a NaN's payload differs, so a run of 8 holding one
 * goes to f32_to_fp16. The KV writes of every token of a forward pass come
 * here: ~20 operations a value in f32_to_fp16, a few percent of a small
 * model's verification step (docs/perf.md). */
static void f16_store(uint16_t *dst, size_t stride, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int j = i; j < i + 8; j++) dst[(size_t)j * stride] = f32_to_fp16(x[j]);
            continue;
        }
        const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (stride == 1) {
            _mm_storeu_si128((__m128i *)(dst + i), h);
            continue;
        }
        uint16_t t[8];
        _mm_storeu_si128((__m128i *)t, h);
        for (int j = 0; j < 8; j++) dst[(size_t)(i + j) * stride] = t[j];
    }
    for (; i < n; i++) dst[(size_t)i * stride] = f32_to_fp16(x[i]);
}

/* ---- attention: the grouped chunk kernel (attn.h) ---------------------------
 *
 * One call serves a group of queries (n_tok tokens x n_head heads) over one
 * chunk of at most ATTN_CHUNK positions. Work per chunk and kv head:
 *
 *   1. K^T: the cache holds K transposed per block (attn.h), so W keys of
 *      a block (W = vector lanes: 16 with AVX-512, 8 with AVX2) are W
 *      contiguous halfs per dimension; they are widened once into
 *      kt[j][d][0..W) = K[jW .. jW+W)[d], keys past the group's end zero —
 *      or, for a group of at most KXA_DIRECT_Q queries (decode), not at
 *      all: step 2 widens them straight from the cache;
 *   2. for up to ATTN_QBLOCK queries at a time: S = Q K^T as a small f32
 *      matmul, register tiles of KXA_QK_Q queries x KXA_QK_V key vectors
 *      (each K^T element loaded once per tile, each q element broadcast);
 *   3. per query: keys at or past its p1 set to -inf, max, e = exp(s - max)
 *      in place, l = sum of e;
 *   4. O = E V, register tiles of KXA_PV_Q queries x KXA_PV_V vectors of
 *      dims (KXA_PV_Q1 queries x 1 vector at small head sizes), each V row
 *      widened once per tile.
 * A group of G queries reads and widens every K and V row once instead of
 * G/n_head times, and the tiles do several FMAs per load, so a prefill turn
 * over a long cached context runs at FMA speed from L1/L2 instead of
 * re-streaming the context for every token.
 *
 * Bits. Every query's result is fixed by its own inputs, whatever the group:
 *   - score(q, key) = (fma chain over d = 0..hd-1 in order, from 0) * scale:
 *     one lane of one accumulator, the same chain in every tile shape;
 *   - max over its keys < p1 (exact, order-free);
 *   - exp lane by lane (kx_exp / avx512.c's kx_exp512: the same float operations);
 *   - l: e added in 16-key blocks from p0 into 16 lanes (lane = key mod
 *     16), blocks in order, up to its own last block (padding lanes hold
 *     +0), then lanes 0-7 + 8-15 and hsum_ps — the AVX2 table keeps the 16
 *     lanes in two vectors, so both tables give the same l;
 *   - o[d] = fma chain over its keys 0..p1-1 in order, from 0; a tile runs
 *     the keys all its queries see together, then each query's remaining
 *     keys on its own accumulators (the same chain continued); a dim tail
 *     shorter than a vector uses fmaf, which rounds exactly as the vector
 *     fma does.
 * So the two x86 tables agree to the bit with each other, and a query alone
 * (decode: n_tok = 1) gets the same bits as inside any group. The scalar
 * reference differs in the last bits (plain sums, expf).
 */

/* The vector primitives of the attention kernel (kxa_v, KXA_W, kxa_*,
 * KXA_QK_*, KXA_PV_*) come from the including table file: 16 lanes in
 * avx512.c, 8 in avx2.c (see the contract at the top of this file). */

/* Prefetches the `bytes` bytes at p (one hint per cache line) into L1. */
static inline __attribute__((always_inline)) void kx_prefetch(const void *p, int bytes) {
    for (int o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* How far ahead (in positions) step 1 prefetches K (V rows: half as far).
 * Decode reads a layer's K and V from DRAM and a W-key step of step 1 is
 * short, so the hints run several steps ahead; they are issued between
 * score tiles (attn_part), so the reads are in flight while the FMAs run. */
#define KXA_PF_ROWS 32
/* Queries per call up to which step 2 reads K straight from the cache. */
#define KXA_DIRECT_Q 8

/* Prefetches what key j's dims occupy in K^T (one hint per cache line:
 * with B >= 32 every dim is a line of its own, with smaller blocks a line
 * holds 32 / B dims of the same keys). */
static inline __attribute__((always_inline)) void kxa_prefetch_kcol(const uint16_t *kc, int hd, int B) {
    const int step = B >= 32 ? 1 : 32 / B;
    for (int d = 0; d < hd; d += step) _mm_prefetch((const char *)(kc + (size_t)d * B), _MM_HINT_T0);
}

/* Prefetch hints for the W-key step at k0: the K^T lines of the key
 * KXA_PF_ROWS further on (every dim of the W keys that start there when
 * steps are block-aligned, as in decode) and the V rows of the keys half as
 * far on. */
static inline __attribute__((always_inline)) void kxa_prefetch_ahead(const uint16_t *const *kcol,
                                                                     const uint16_t *const *vrow, int k0, int nk, int hd,
                                                                     int B) {
    if (k0 + KXA_PF_ROWS < nk) kxa_prefetch_kcol(kcol[k0 + KXA_PF_ROWS], hd, B);
    for (int j = k0 + KXA_PF_ROWS / 2; j < MIN(nk, k0 + KXA_PF_ROWS / 2 + KXA_W); j++)
        kx_prefetch(vrow[j], hd * (int)sizeof(uint16_t));
}

/* Step 1 for keys [k_begin, k_end) (multiples of W): kt = K^T of those
 * keys, widened, keys at or past nk zero. kcol[i] is key i's element 0 in
 * the cache's K^T (attn.h), B the block's keys, so dim d of W keys that
 * sit in one block is W contiguous halfs: one load and one widening per
 * (d, W keys). Keys that straddle blocks (B not a multiple of W, or a
 * chunk that starts inside a block) and the last keys take the lane-wise
 * path. attn_part interleaves this with step 2 tile by tile, so the loads
 * of a chunk's keys overlap the score FMAs instead of running as a phase
 * of their own. */
static void kxa_widen_k(const uint16_t *const *kcol, const uint16_t *const *vrow, int p0, int k_begin, int k_end, int nk,
                        int hd, int B, float *kt) {
    for (int k0 = k_begin; k0 < k_end; k0 += KXA_W) {
        kxa_prefetch_ahead(kcol, vrow, k0, nk, hd, B);
        float *dst = kt + (size_t)(k0 / KXA_W) * hd * KXA_W;
        const int nj = MAX(0, MIN(KXA_W, nk - k0));
        if (nj == KXA_W && (p0 + k0) % B + KXA_W <= B) { /* W keys of one block */
            const uint16_t *kc = kcol[k0];
            _Pragma("GCC unroll 4") for (int d = 0; d < hd; d++) kxa_store(dst + (size_t)d * KXA_W, kxa_f16(kc + (size_t)d * B));
            continue;
        }
        for (int d = 0; d < hd; d++)
            for (int j = 0; j < KXA_W; j++) dst[(size_t)d * KXA_W + j] = j < nj ? f16s(kcol[k0 + j][(size_t)d * B]) : 0.0f;
    }
}

/* Step 2 for one tile: S[q][keys of NV vectors] for NQ queries; s[q]
 * points at the tile's first score of query q. The keys come widened from
 * kt (the tile's first key vector), or (DIRECT) straight from the cache:
 * vector b is the W contiguous halfs of dim d at kd[b] + d * B. Either way
 * every score is the same fma chain over d. */
static inline __attribute__((always_inline)) void kxa_qk_tile(const float *const *q, const float *kt,
                                                              const uint16_t *const *kd, int B, int hd, float scale,
                                                              float *const *s, const int NQ, const int NV,
                                                              const int DIRECT) {
    kxa_v acc[KXA_QK_Q][KXA_QK_V];
    _Pragma("GCC unroll 4") for (int a = 0; a < NQ; a++) _Pragma("GCC unroll 4") for (int b = 0; b < NV; b++) acc[a][b] = kxa_zero();
    for (int d = 0; d < hd; d++) {
        kxa_v k[KXA_QK_V];
        _Pragma("GCC unroll 4") for (int b = 0; b < NV; b++)
            k[b] = DIRECT ? kxa_f16(kd[b] + (size_t)d * B) : kxa_load(kt + ((size_t)b * hd + d) * KXA_W);
        _Pragma("GCC unroll 4") for (int a = 0; a < NQ; a++) {
            const kxa_v qa = kxa_set1(q[a][d]);
            _Pragma("GCC unroll 4") for (int b = 0; b < NV; b++) acc[a][b] = kxa_fma(qa, k[b], acc[a][b]);
        }
    }
    const kxa_v sc = kxa_set1(scale);
    _Pragma("GCC unroll 4") for (int a = 0; a < NQ; a++) _Pragma("GCC unroll 4") for (int b = 0; b < NV; b++)
        kxa_store(s[a] + b * KXA_W, kxa_mul(acc[a][b], sc));
}

#define KXA_QK_CASES(KT, KD, S, NV, DIRECT)                                                                            \
    switch (nq) {                                                                                                      \
    case 1: kxa_qk_tile(q, KT, KD, B, hd, scale, S, 1, NV, DIRECT); break;                                             \
    case 2: kxa_qk_tile(q, KT, KD, B, hd, scale, S, 2, NV, DIRECT); break;                                             \
    case 3: kxa_qk_tile(q, KT, KD, B, hd, scale, S, 3, NV, DIRECT); break;                                             \
    default: kxa_qk_tile(q, KT, KD, B, hd, scale, S, 4, NV, DIRECT); break;                                            \
    }
/* A tile of nq <= KXA_QK_Q queries x nv <= KXA_QK_V key vectors, keys from
 * kt or (kd != NULL) from the cache. */
static void kxa_qk_tile_any(const float *const *q, const float *kt, const uint16_t *const *kd, int B, int hd,
                            float scale, float *const *s, int nq, int nv) {
    if (nv == KXA_QK_V) {
        if (kd)
            KXA_QK_CASES(kt, kd, s, KXA_QK_V, 1)
        else
            KXA_QK_CASES(kt, kd, s, KXA_QK_V, 0)
        return;
    }
    for (int b = 0; b < nv; b++) { /* a short last tile: one key vector at a time */
        float *sb[KXA_QK_Q];
        for (int a = 0; a < nq; a++) sb[a] = s[a] + b * KXA_W;
        const float *ktb = kt + (size_t)b * hd * KXA_W;
        if (kd)
            KXA_QK_CASES(ktb, kd + b, sb, 1, 1)
        else
            KXA_QK_CASES(ktb, kd, sb, 1, 0)
    }
}

/* Step 4 for one tile: o[q][d0 .. d0 + NV*W) for NQ queries; query a sees
 * keys [0, n[a]) with weights e[a * ATTN_CHUNK + i] (attn_part's score
 * rows: one base pointer; with a pointer per query, tiles of 8 queries ran
 * out of registers and reloaded a pointer for every fma); every query's
 * keys [0, n_min) run
 * together, then each query's own remaining keys. */
static inline __attribute__((always_inline)) void kxa_pv_tile(const uint16_t *const *vrow, int d0, const float *e,
                                                              const int *n, int n_min, float *const *o, const int NQ,
                                                              const int NV) {
    kxa_v acc[KXA_PV_QMAX][KXA_PV_V];
    _Pragma("GCC unroll 16") for (int a = 0; a < NQ; a++) _Pragma("GCC unroll 4") for (int b = 0; b < NV; b++) acc[a][b] = kxa_zero();
    for (int i = 0; i < n_min; i++) {
        kxa_v vv[KXA_PV_V];
        const uint16_t *vr = vrow[i] + d0;
        _Pragma("GCC unroll 4") for (int b = 0; b < NV; b++) vv[b] = kxa_f16(vr + b * KXA_W);
        _Pragma("GCC unroll 16") for (int a = 0; a < NQ; a++) {
            const kxa_v w = kxa_set1(e[(size_t)a * ATTN_CHUNK + i]);
            _Pragma("GCC unroll 4") for (int b = 0; b < NV; b++) acc[a][b] = kxa_fma(w, vv[b], acc[a][b]);
        }
    }
    _Pragma("GCC unroll 16") for (int a = 0; a < NQ; a++) {
        for (int i = n_min; i < n[a]; i++) {
            const kxa_v w = kxa_set1(e[(size_t)a * ATTN_CHUNK + i]);
            _Pragma("GCC unroll 4") for (int b = 0; b < NV; b++) acc[a][b] = kxa_fma(w, kxa_f16(vrow[i] + d0 + b * KXA_W), acc[a][b]);
        }
        _Pragma("GCC unroll 4") for (int b = 0; b < NV; b++) kxa_store(o[a] + d0 + b * KXA_W, acc[a][b]);
    }
}

/* nq (1..KXA_PV_Q) as a constant; cases above KXA_PV_Q never run (they are
 * clamped only so that both tables compile). KXA_PV_CASE1: nq up to
 * KXA_PV_Q1 (16 in avx512.c) for single vectors of dims (kxa_pv_rows). The
 * tiles' query loops unroll up to 16: a loop over more queries than it
 * unrolls keeps acc[] on the stack, and every fma then waits for a store
 * and a reload (tiles of 10-16 queries at head_dim 8 ran ~2x the time of
 * 8, which is why larger PV tiles once measured no better). */
#define KXA_PV_CASE(nv)                                                                                                \
    switch (nq) {                                                                                                      \
    case 1: kxa_pv_tile(vrow, d0, e, n, n_min, o, 1, nv); break;                                                       \
    case 2: kxa_pv_tile(vrow, d0, e, n, n_min, o, 2, nv); break;                                                       \
    case 3: kxa_pv_tile(vrow, d0, e, n, n_min, o, 3 < KXA_PV_Q ? 3 : KXA_PV_Q, nv); break;                            \
    case 4: kxa_pv_tile(vrow, d0, e, n, n_min, o, 4 < KXA_PV_Q ? 4 : KXA_PV_Q, nv); break;                            \
    case 5: kxa_pv_tile(vrow, d0, e, n, n_min, o, 5 < KXA_PV_Q ? 5 : KXA_PV_Q, nv); break;                            \
    default: kxa_pv_tile(vrow, d0, e, n, n_min, o, KXA_PV_Q, nv); break;                                               \
    }

/* nq (1..KXA_PV_QMAX) as a constant for CALL(q), nq above KXA_PV_QMAX
 * clamped so that both tables compile (they never run): KXA_PV_CASE1 and
 * KXA_PV8_CASE, the tiles of single vectors of dims. */
#define KXA_PV_QC(q) ((q) < KXA_PV_QMAX ? (q) : KXA_PV_QMAX)
#define KXA_PV_SWITCH(CALL)                                                                                            \
    switch (nq) {                                                                                                      \
    case 1: CALL(1); break;                                                                                            \
    case 2: CALL(2); break;                                                                                            \
    case 3: CALL(3); break;                                                                                            \
    case 4: CALL(4); break;                                                                                            \
    case 5: CALL(5); break;                                                                                            \
    case 6: CALL(6); break;                                                                                            \
    case 7: CALL(KXA_PV_QC(7)); break;                                                                                 \
    case 8: CALL(KXA_PV_QC(8)); break;                                                                                 \
    case 9: CALL(KXA_PV_QC(9)); break;                                                                                 \
    case 10: CALL(KXA_PV_QC(10)); break;                                                                               \
    case 11: CALL(KXA_PV_QC(11)); break;                                                                               \
    case 12: CALL(KXA_PV_QC(12)); break;                                                                               \
    case 13: CALL(KXA_PV_QC(13)); break;                                                                               \
    case 14: CALL(KXA_PV_QC(14)); break;                                                                               \
    case 15: CALL(KXA_PV_QC(15)); break;                                                                               \
    default: CALL(KXA_PV_QMAX); break;                                                                                 \
    }
#define KXA_PV1_CALL(q) kxa_pv_tile(vrow, d0, e, n, n_min, o, q, 1)
#define KXA_PV_CASE1 KXA_PV_SWITCH(KXA_PV1_CALL)

/* Step 4 for 8 dims at d0 with 8-lane vectors, in a table whose vector is
 * wider (avx512.c at head_dim 8, 24, 40, ...: before, those dims ran as
 * scalar fmaf chains, ~3-5x the avx2 table's attention on stories260K):
 * the same chains as kxa_pv_tile (a vector fma rounds as fmaf does), so
 * the tables still agree to the bit. */
#if KXA_W > 8
static inline __attribute__((always_inline)) void kxa_pv8_tile(const uint16_t *const *vrow, int d0, const float *e,
                                                               const int *n, int n_min, float *const *o, const int NQ) {
    __m256 acc[KXA_PV_QMAX];
    _Pragma("GCC unroll 16") for (int a = 0; a < NQ; a++) acc[a] = _mm256_setzero_ps();
    for (int i = 0; i < n_min; i++) {
        const __m256 vv = load8_f16(vrow[i] + d0);
        _Pragma("GCC unroll 16") for (int a = 0; a < NQ; a++) acc[a] = _mm256_fmadd_ps(_mm256_set1_ps(e[(size_t)a * ATTN_CHUNK + i]), vv, acc[a]);
    }
    _Pragma("GCC unroll 16") for (int a = 0; a < NQ; a++) {
        for (int i = n_min; i < n[a]; i++) acc[a] = _mm256_fmadd_ps(_mm256_set1_ps(e[(size_t)a * ATTN_CHUNK + i]), load8_f16(vrow[i] + d0), acc[a]);
        _mm256_storeu_ps(o[a] + d0, acc[a]);
    }
}
#define KXA_PV8_CALL(q) kxa_pv8_tile(vrow, d0, e, n, n_min, o, q)
#define KXA_PV8_CASE KXA_PV_SWITCH(KXA_PV8_CALL)
#endif

/* All of step 4 for nq queries (at most KXA_PV_Q, or KXA_PV_Q1 when hd <
 * KXA_PV_V * W): whole tiles of dims, single vectors, 8 dims with 8-lane
 * vectors when W is wider, then the last dims (fewer than 8) with fmaf in
 * the same order. With hd below a whole tile
 * each query has a single accumulator per vector of dims, whose fma chain
 * over the keys is latency-bound; KXA_PV_Q1 chains side by side keep the
 * FMA units busy (a verification group's 1 + k tokens at head_dim 8). */
static void kxa_pv_rows(const uint16_t *const *vrow, int hd, const float *e, const int *n, float *const *o, int nq) {
    int n_min = n[0];
    for (int a = 1; a < nq; a++) n_min = MIN(n_min, n[a]);
    int d0 = 0;
    for (; d0 + KXA_PV_V * KXA_W <= hd; d0 += KXA_PV_V * KXA_W) KXA_PV_CASE(KXA_PV_V)
    for (; d0 + KXA_W <= hd; d0 += KXA_W) KXA_PV_CASE1
#if KXA_W > 8
    for (; d0 + 8 <= hd; d0 += 8) KXA_PV8_CASE
#endif
    for (; d0 < hd; d0++)
        for (int a = 0; a < nq; a++) {
            float acc = 0;
            for (int i = 0; i < n[a]; i++) acc = fmaf(e[(size_t)a * ATTN_CHUNK + i], f16s(vrow[i][d0]), acc);
            o[a][d0] = acc;
        }
}

/* attn_part over a q8_0 cache (attn.h), each G-dim group's scale folded
 * in once: a score is sum over the groups of d_group * (sum_d q[d] * k8[d]),
 * 8 positions at a time (K^T: a block's positions are contiguous, values
 * and scales), and the output o[d] = sum_i (e_i * d_i) * v8_i[d], 8 dims at
 * a time (G is 32 or hd: 8 dims share a scale). Queries go Q8_QB at a time
 * sharing each operand vector, each with its own FMA chains in a fixed
 * order (a vector lane and the scalar tail's fmaf give the same bits).
 * Small groups (decode) widen the int8 rows as they use them; larger ones
 * (prefill) widen the chunk once into f32 tiles of the int8 values and of
 * the scales first. An int8 widens to f32 exactly, so both read the same
 * operands and a query's bits never depend on its group. Needs head_dim %
 * 8 == 0 (else the scalar part). */
#define Q8_QB 4
static void attn_part_q8(const attn_view *v, int kv_head, int n_head, const attn_query *qs, int n_tok, int p0,
                         float scale, float *scratch) {
    const int hd = v->head_dim, B = v->block_tokens, G = v->q8_group, kv_dim = v->kv_dim, ng = kv_dim / G;
    if (hd % 8) {
        attn_part_q8_scalar(v, kv_head, n_head, qs, n_tok, p0, scale, scratch);
        return;
    }
    const int e0 = kv_head * hd, n_q = n_tok * n_head, hg = hd / G;
    int nk_all = 0;
    for (int t = 0; t < n_tok; t++) nk_all = MAX(nk_all, qs[t].p1 - p0);
    const bool tiled = n_q > Q8_QB;
    /* tiles (attn_part_scratch_floats: 2 hd + 48 floats a position) */
    float *sc0 = scratch, *kt = sc0 + (size_t)Q8_QB * ATTN_CHUNK, *vt = kt + (size_t)hd * ATTN_CHUNK;
    float *ksc = vt + (size_t)hd * ATTN_CHUNK, *vsc = ksc + (size_t)hg * ATTN_CHUNK;
    if (tiled)
        for (int i = 0; i < nk_all;) {
            const int p = p0 + i, j = p % B, run = MIN(B - j, nk_all - i);
            const int8_t *kb = (const int8_t *)(v->k + (size_t)v->block_table[p / B] * v->block_stride);
            const int8_t *vb = (const int8_t *)(v->v + (size_t)v->block_table[p / B] * v->block_stride);
            const uint16_t *ks = (const uint16_t *)(kb + (size_t)B * kv_dim), *vs = (const uint16_t *)(vb + (size_t)B * kv_dim);
            for (int d = 0; d < hd; d++)
                for (int r = 0; r < run; r++) kt[(size_t)d * ATTN_CHUNK + i + r] = (float)kb[(size_t)(e0 + d) * B + j + r];
            for (int g = 0; g < hg; g++)
                for (int r = 0; r < run; r++) ksc[(size_t)g * ATTN_CHUNK + i + r] = f16s(ks[(size_t)(e0 / G + g) * B + j + r]);
            for (int r = 0; r < run; r++) {
                for (int d = 0; d < hd; d += 8)
                    _mm256_storeu_ps(vt + (size_t)(i + r) * hd + d,
                                     _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                         _mm_loadl_epi64((const __m128i *)(vb + (size_t)(j + r) * kv_dim + e0 + d)))));
                for (int g = 0; g < hg; g++) vsc[(size_t)(i + r) * hg + g] = f16s(vs[(size_t)(j + r) * ng + e0 / G + g]);
            }
            i += run;
        }
    for (int r0 = 0; r0 < n_q; r0 += Q8_QB) {
        const int nb = MIN(Q8_QB, n_q - r0);
        const float *qv[Q8_QB];
        float *sc[Q8_QB];
        int n[Q8_QB], nk = 0;
        for (int a = 0; a < nb; a++) {
            const int t = (r0 + a) / n_head, g = (r0 + a) % n_head;
            qv[a] = qs[t].q + (size_t)g * hd;
            sc[a] = sc0 + (size_t)a * ATTN_CHUNK;
            n[a] = qs[t].p1 - p0;
            nk = MAX(nk, n[a]);
        }
        /* scores */
        for (int i = 0; i < nk;) {
            const int p = p0 + i, j = p % B, run = MIN(B - j, nk - i);
            const int8_t *kb = (const int8_t *)(v->k + (size_t)v->block_table[p / B] * v->block_stride);
            const uint16_t *ks = (const uint16_t *)(kb + (size_t)B * kv_dim);
            int r = 0;
            for (; r + 8 <= run; r += 8) {
                __m256 acc[Q8_QB];
                for (int a = 0; a < nb; a++) acc[a] = _mm256_setzero_ps();
                for (int g = 0; g < hg; g++) {
                    __m256 ag[Q8_QB];
                    for (int a = 0; a < nb; a++) ag[a] = _mm256_setzero_ps();
                    for (int d = g * G; d < (g + 1) * G; d++) {
                        const __m256 x = tiled ? _mm256_loadu_ps(kt + (size_t)d * ATTN_CHUNK + i + r)
                                               : _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                                     (const __m128i *)(kb + (size_t)(e0 + d) * B + j + r))));
                        for (int a = 0; a < nb; a++) ag[a] = _mm256_fmadd_ps(_mm256_set1_ps(qv[a][d]), x, ag[a]);
                    }
                    const __m256 dv = tiled ? _mm256_loadu_ps(ksc + (size_t)g * ATTN_CHUNK + i + r)
                                            : load8_f16(ks + (size_t)(e0 / G + g) * B + j + r);
                    for (int a = 0; a < nb; a++) acc[a] = _mm256_fmadd_ps(dv, ag[a], acc[a]);
                }
                for (int a = 0; a < nb; a++) _mm256_storeu_ps(sc[a] + i + r, _mm256_mul_ps(acc[a], _mm256_set1_ps(scale)));
            }
            for (; r < run; r++)
                for (int a = 0; a < nb; a++) {
                    float acc = 0;
                    for (int g = 0; g < hg; g++) {
                        float ag = 0;
                        for (int d = g * G; d < (g + 1) * G; d++)
                            ag = fmaf(qv[a][d], tiled ? kt[(size_t)d * ATTN_CHUNK + i + r] : (float)kb[(size_t)(e0 + d) * B + j + r], ag);
                        acc = fmaf(tiled ? ksc[(size_t)g * ATTN_CHUNK + i + r] : f16s(ks[(size_t)(e0 / G + g) * B + j + r]), ag, acc);
                    }
                    sc[a][i + r] = acc * scale;
                }
            i += run;
        }
        /* softmax weights, each query over its own positions in order */
        float mx[Q8_QB], sum[Q8_QB];
        for (int a = 0; a < nb; a++) {
            mx[a] = -INFINITY, sum[a] = 0;
            for (int i = 0; i < n[a]; i++) mx[a] = fmaxf(mx[a], sc[a][i]);
            for (int i = 0; i < n[a]; i++) {
                sc[a][i] = expf(sc[a][i] - mx[a]);
                sum[a] += sc[a][i];
            }
        }
        /* values */
        for (int d = 0; d < hd; d += 8) {
            __m256 acc[Q8_QB];
            for (int a = 0; a < nb; a++) acc[a] = _mm256_setzero_ps();
            for (int i = 0; i < nk; i++) {
                float dv;
                __m256 x;
                if (tiled) {
                    dv = vsc[(size_t)i * hg + d / G];
                    x = _mm256_loadu_ps(vt + (size_t)i * hd + d);
                } else {
                    const int p = p0 + i, j = p % B;
                    const int8_t *vb = (const int8_t *)(v->v + (size_t)v->block_table[p / B] * v->block_stride);
                    dv = f16s(((const uint16_t *)(vb + (size_t)B * kv_dim))[(size_t)j * ng + (e0 + d) / G]);
                    x = _mm256_cvtepi32_ps(
                        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(vb + (size_t)j * kv_dim + e0 + d))));
                }
                for (int a = 0; a < nb; a++)
                    if (i < n[a]) acc[a] = _mm256_fmadd_ps(_mm256_set1_ps(sc[a][i] * dv), x, acc[a]);
            }
            for (int a = 0; a < nb; a++) {
                const int t = (r0 + a) / n_head, g = (r0 + a) % n_head;
                _mm256_storeu_ps(qs[t].o + (size_t)g * hd + d, acc[a]);
            }
        }
        for (int a = 0; a < nb; a++) {
            const int t = (r0 + a) / n_head, g = (r0 + a) % n_head;
            qs[t].m[g] = mx[a];
            qs[t].l[g] = sum[a];
        }
    }
}

static void attn_part(const attn_view *v, int kv_head, int n_head, const attn_query *qs, int n_tok, int p0, float scale,
                      float *scratch) {
    const int hd = v->head_dim, n_q = n_tok * n_head;
    int nk = 0; /* keys any query of the group sees */
    for (int t = 0; t < n_tok; t++) nk = MAX(nk, qs[t].p1 - p0);
    const int B = v->block_tokens;
    const uint16_t *kcol[ATTN_CHUNK], *vrow[ATTN_CHUNK];
    for (int i = 0; i < nk;) { /* key addresses, resolved once per block */
        const int p = p0 + i, in_blk = p % B, cnt = MIN(nk - i, B - in_blk);
        const size_t blk = (size_t)v->block_table[p / B] * v->block_stride;
        const uint16_t *kc = v->k + blk + (size_t)kv_head * hd * B + in_blk;
        const uint16_t *vr = v->v + blk + (size_t)in_blk * v->kv_dim + (size_t)kv_head * hd;
        for (int j = 0; j < cnt; j++) {
            kcol[i + j] = kc + j;
            vrow[i + j] = vr + (size_t)j * v->kv_dim;
        }
        i += cnt;
    }
    for (int j = 0; j < MIN(nk, KXA_PF_ROWS); j++)
        if (j == 0 || kcol[j] != kcol[j - 1] + 1) kxa_prefetch_kcol(kcol[j], hd, B);
    for (int j = 0; j < MIN(nk, KXA_PF_ROWS / 2); j++) kx_prefetch(vrow[j], hd * (int)sizeof(uint16_t));
    float *kt = scratch, *S = scratch + (size_t)ATTN_CHUNK * hd;
    const int nvec_all = (nk + 15) / 16 * (16 / KXA_W); /* key vectors of K^T */
    /* A few queries (decode: one token's heads) read the keys straight
     * from the cache when every W keys sit in one block: widening them into
     * kt would cost more than the few times the tiles widen them again. */
    const int direct = n_q <= KXA_DIRECT_Q && B % KXA_W == 0 && p0 % KXA_W == 0;

    for (int r0 = 0; r0 < n_q; r0 += ATTN_QBLOCK) { /* query r is token r / n_head, head r % n_head */
        const int nr = MIN(ATTN_QBLOCK, n_q - r0);
        const float *qr[ATTN_QBLOCK];
        float *sr[ATTN_QBLOCK];
        int nr_keys[ATTN_QBLOCK], nkb = 0;
        for (int r = 0; r < nr; r++) {
            const attn_query *aq = &qs[(r0 + r) / n_head];
            const int g = (r0 + r) % n_head;
            qr[r] = aq->q + (size_t)g * hd;
            sr[r] = S + (size_t)r * ATTN_CHUNK;
            nr_keys[r] = aq->p1 - p0;
            nkb = MAX(nkb, nr_keys[r]);
        }
        /* 1. (with the first block of queries) K^T, a tile of keys at a
         * time; 2. scores of the keys this block of queries sees */
        const int nvec = (nkb + 15) / 16 * (16 / KXA_W);
        for (int j = 0; j < (r0 == 0 ? nvec_all : nvec); j += KXA_QK_V) {
            const uint16_t *kd[KXA_QK_V] = {0};
            if (direct) { /* keys past nk: any W keys of a block (scores masked in step 3) */
                for (int k0 = j * KXA_W; k0 < MIN(j + KXA_QK_V, nvec_all) * KXA_W; k0 += KXA_W)
                    kxa_prefetch_ahead(kcol, vrow, k0, nk, hd, B);
                for (int b = 0; b < KXA_QK_V; b++) kd[b] = (j + b) * KXA_W < nk ? kcol[(j + b) * KXA_W] : kcol[0];
            } else if (r0 == 0) {
                kxa_widen_k(kcol, vrow, p0, j * KXA_W, MIN(j + KXA_QK_V, nvec_all) * KXA_W, nk, hd, B, kt);
            }
            if (j >= nvec) continue;
            const int nv = MIN(KXA_QK_V, nvec - j);
            const float *ktj = kt + (size_t)j * hd * KXA_W;
            for (int a = 0; a < nr; a += KXA_QK_Q) {
                float *sa[KXA_QK_Q];
                const int nq = MIN(KXA_QK_Q, nr - a);
                for (int b = 0; b < nq; b++) sa[b] = sr[a + b] + j * KXA_W;
                kxa_qk_tile_any(qr + a, ktj, direct ? kd : NULL, B, hd, scale, sa, nq, nv);
            }
        }
        /* 3. softmax weights of each query over its own keys */
        for (int r = 0; r < nr; r++) {
            float *s = sr[r];
            const int n = nr_keys[r], n16 = (n + 15) / 16;
            for (int i = n; i < 16 * n16; i++) s[i] = -INFINITY;
            kxa_v mx = kxa_set1(-INFINITY);
            for (int i = 0; i < 16 * n16; i += KXA_W) mx = kxa_max(mx, kxa_load(s + i));
            const float mxs = kxa_hmax(mx);
            const kxa_v mv = kxa_set1(mxs);
            for (int i = 0; i < 16 * n16; i += KXA_W) kxa_store(s + i, kxa_exp(kxa_sub(kxa_load(s + i), mv)));
            const attn_query *aq = &qs[(r0 + r) / n_head];
            const int g = (r0 + r) % n_head;
            aq->m[g] = mxs;
            aq->l[g] = hsum_ps(kxa_sum16(s, n16));
        }
        /* 4. weighted sums of the V rows */
        const int pv_q = hd < KXA_PV_V * KXA_W ? KXA_PV_Q1 : KXA_PV_Q;
        for (int a = 0; a < nr; a += pv_q) {
            const int nq = MIN(pv_q, nr - a);
            float *o[KXA_PV_QMAX];
            for (int b = 0; b < nq; b++) {
                const attn_query *aq = &qs[(r0 + a + b) / n_head];
                o[b] = aq->o + (size_t)((r0 + a + b) % n_head) * hd;
            }
            kxa_pv_rows(vrow, hd, sr[a], nr_keys + a, o, nq);
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
            [DT_Q4_K] = KX_DOT_Q4_K,
            [DT_Q5_K] = dot_q5_k,
            [DT_Q6_K] = dot_q6_k,
            [DT_MXFP4] = dot_mxfp4,
        },
    .act =
        {
            [DT_Q8_0] = act_q8_0,
            [DT_Q4_0] = act_q8_0,
            [DT_MXFP4] = act_q8_0,
            [DT_Q4_K] = act_q8_k,
            [DT_Q5_K] = act_q8_k,
            [DT_Q6_K] = act_q8_k,
        },
    .gemm =
        {
            [DT_F32] = gemm_f32,
            [DT_F16] = gemm_f16,
            [DT_BF16] = gemm_bf16,
            [DT_Q8_0] = KX_GEMM_Q8_0,
            [DT_Q4_0] = KX_GEMM_Q4_0,
            [DT_Q4_K] = KX_GEMM_Q4_K,
            [DT_Q6_K] = KX_K6_GEMM,
            [DT_Q5_K] = gemm_q5_k,
            [DT_MXFP4] = gemm_mxfp4,
        },
    .attn_part = attn_part,
    .attn_part_q8 = attn_part_q8,
    .swiglu = swiglu,
    .f16_store = f16_store,
};
