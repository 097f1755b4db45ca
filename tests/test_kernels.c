/* test_kernels.c — kern/: every fast kernel table against the scalar
 * reference and against double-precision references.
 *
 *   - activation converters: bitwise equal to the scalar ones (same rounding
 *     rule), on Gaussian, zero, tiny, huge and exactly-half inputs;
 *   - dot products of every weight type: within a per-type bound of the
 *     scalar dot and of a double dot over the dequantised rows, on odd sizes
 *     and tails, with weights from the quantiser and from raw random bytes;
 *   - kern_matmul_multi == kern_matmul bitwise (each table, 1 and 3 threads);
 *   - gemm == dot bitwise for 37-token batches (float types too), for 1-10 tokens (float
 *     types, a verification step's sizes), and for MXFP4 over all 256
 *     E8M0 scales (the scalar dot = isum * 2^(e-128) * d_a exactly);
 *   - attention chunk kernel against the scalar part and against a double
 *     softmax, odd head sizes and chunk lengths; attn_head over several
 *     chunks == parts computed out of order and merged;
 *   - the thread pool runs every share exactly once, many times over;
 *   - kern_rmsnorm_rows == kern_rmsnorm row by row, bitwise;
 *   - kern_f16_store == f32_to_fp16 bitwise, every table: random bit
 *     patterns of every exponent, the halfway cases of normal and
 *     subnormal halves, the overflow edge, +-0, inf, NaNs among finite
 *     values, strided and contiguous, runs of 1 to 37;
 *   - the forward pass of stories260K at > 2 attention chunks of context:
 *     a decode step alone (attention split over chunks) gives the same
 *     logits bits as inside a batch (unsplit), for every table; and a
 *     48-token prefill (per-token work spread over the pool) gives the same
 *     bits as decoding the tokens one by one.
 */
#include "base/base.h"
#include "base/pool.h"
#include "kern/attn.h"
#include "kern/kern.h"
#include "kern/quant.h"
#include "model/model.h"
#include "test.h"

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>


static const char *tables[8];
static int n_tables;

/* ---- norms ------------------------------------------------------------------------ */

/* kern_rmsnorm_rows (rows four at a time) == kern_rmsnorm row by row,
 * bitwise: 1..9 rows (whole groups of four and the rest), widths with and
 * without a weight, in place and into another buffer. */
static void test_rmsnorm_rows(void) {
    rng r;
    rng_seed(&r, 11);
    static const int widths[] = {1, 7, 64, 172};
    enum { MAXR = 9, MAXN = 172 };
    static float x[MAXR * MAXN], got[MAXR * MAXN], want[MAXR * MAXN], w[MAXN];
    for (size_t wi = 0; wi < ARRAY_LEN(widths); wi++)
        for (int rows = 1; rows <= MAXR; rows++)
            for (int in_place = 0; in_place < 2; in_place++)
                for (int with_w = 0; with_w < 2; with_w++) {
                    const int n = widths[wi];
                    for (int i = 0; i < rows * n; i++) x[i] = (float)(rng_uniform(&r) * 4 - 2) * (i % 5 == 0 ? 100 : 1);
                    for (int i = 0; i < n; i++) w[i] = (float)(rng_uniform(&r) * 2);
                    for (int k = 0; k < rows; k++)
                        kern_rmsnorm(want + k * n, x + k * n, with_w ? w : NULL, n, 1e-5f);
                    if (in_place) {
                        memcpy(got, x, sizeof(float) * (size_t)(rows * n));
                        kern_rmsnorm_rows(got, got, (size_t)n, with_w ? w : NULL, n, 1e-5f, rows);
                    } else {
                        kern_rmsnorm_rows(got, x, (size_t)n, with_w ? w : NULL, n, 1e-5f, rows);
                    }
                    CHECK(memcmp(got, want, sizeof(float) * (size_t)(rows * n)) == 0);
                }
}

/* ---- f16 stores ------------------------------------------------------------------- */

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_f16_store(void) {
    rng r;
    rng_seed(&r, 12);
    enum { N = 4096, MAXS = 5 };
    static float x[N];
    static uint16_t got[N * MAXS];
    int n = 0;
    /* halves' edges: every exponent's halfway points (mantissa bit 12 set,
     * the lower ones clear and not), the overflow edge, tiny values */
    for (uint32_t e = 90; e < 145 && n + 8 <= N; e++)
        for (uint32_t m = 0x1000; m < 0x4000 && n + 8 <= N; m += 0x1000) {
            const uint32_t u = e << 23 | (uint32_t)(rng_u64() & 0x7fc000) | m;
            x[n++] = bits_f32(u), x[n++] = -bits_f32(u), x[n++] = bits_f32(u + 1), x[n++] = bits_f32(u - 1);
        }
    const float edge[] = {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e30f, 0.0f, -0.0f, INFINITY, -INFINITY,
                          5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1035e-5f, 6.1e-5f, bits_f32(1), 1.0f, -1.0f, 0.1f};
    for (size_t i = 0; i < ARRAY_LEN(edge) && n < N; i++) x[n++] = edge[i];
    while (n < N) x[n++] = bits_f32((uint32_t)rng_u64()); /* any pattern: NaNs and all */
    /* NaNs: a quiet and a signalling one with payloads, inside runs of 8 */
    x[100] = bits_f32(0x7fc12345), x[205] = bits_f32(0xff800001), x[3001] = NAN;
    static const int lens[] = {1, 7, 8, 9, 32, 37, N};
    for (int tb = 0; tb < n_tables; tb++) {
        CHECK_EQ_INT(kern_select(tables[tb]), 0);
        for (size_t li = 0; li < ARRAY_LEN(lens); li++)
            for (int stride = 1; stride <= MAXS; stride += 4) {
                const int len = lens[li];
                for (int off = 0; off + len <= N; off += len > 64 ? N : 97) {
                    memset(got, 0xab, sizeof got);
                    kern_f16_store(got, (size_t)stride, x + off, len);
                    int bad = 0;
                    for (int i = 0; i < len; i++) bad += got[(size_t)i * stride] != f32_to_fp16(x[off + i]);
                    for (int i = 0; i < len * stride; i++) bad += i % stride != 0 && got[i] != 0xabab;
                    CHECK_MSG(bad == 0, "%s f16_store len %d stride %d off %d: %d wrong", tables[tb], len, stride, off, bad);
                }
            }
    }
    kern_select("scalar");
}

/* ---- activation converters --------------------------------------------------- */

/* Fills x[n] with one of several patterns per 32-element block. */
static void fill_act(float *x, int64_t n, int pattern) {
    for (int64_t i = 0; i < n; i++) {
        const int blk = (int)(i / 32);
        switch ((pattern + blk) % 6) {
        case 0: x[i] = rng_gauss(); break;
        case 1: x[i] = 0; break;
        case 2: x[i] = rng_gauss() * 1e-30f; break;
        case 3: x[i] = rng_gauss() * 1e20f; break;
        case 4: x[i] = (float)((int)(rng_u64() % 255) - 127) * 0.5f; break; /* many exact .5 after scaling */
        default: x[i] = rng_gauss() + 3.0f; break;
        }
    }
}

static void test_act(void) {
    const uint32_t wtypes[2] = {DT_Q8_0, DT_Q4_K};
    for (int tb = 1; tb < n_tables; tb++) {
        CHECK_EQ_INT(kern_select(tables[tb]), 0);
        for (int wi = 0; wi < 2; wi++) {
            const uint32_t wt = wtypes[wi];
            for (int nb = 1; nb <= 9; nb += 4) {
                const int64_t n = nb * (wt == DT_Q8_0 ? 32 : 256);
                const size_t bytes = kern_act_row_bytes(wt, n);
                float *x = xmalloc(sizeof(float) * n);
                uint8_t *a = xmalloc(bytes), *r = xmalloc(bytes);
                for (int pat = 0; pat < 6; pat++) {
                    fill_act(x, n, pat);
                    kern->act[wt](x, a, n);
                    kern_scalar_ops.act[wt](x, r, n);
                    CHECK_MSG(memcmp(a, r, bytes) == 0, "%s act for %s n=%lld pattern %d differs from scalar",
                              tables[tb], dtype_name(wt), (long long)n, pat);
                }
                free(x), free(a), free(r);
            }
        }
    }
    kern_select("scalar");
}

/* ---- dot products ---------------------------------------------------------------- */

typedef struct dcase {
    uint32_t type;
    int blck; /* elements per weight block (1 for float types) */
} dcase;

static const dcase dcases[] = {{DT_F32, 1},   {DT_F16, 1},    {DT_BF16, 1},   {DT_Q8_0, 32},
                               {DT_Q4_0, 32}, {DT_Q4_K, 256}, {DT_Q5_K, 256}, {DT_Q6_K, 256},
                               {DT_MXFP4, 32}};

/* Random bytes for a weight row, with every f16 scale replaced by a sane
 * value so the row decodes to finite numbers (any other bit pattern goes). */
static void random_row(uint32_t type, uint8_t *w, int64_t n) {
    const size_t rb = dtype_row_bytes(type, n);
    for (size_t i = 0; i < rb; i++) w[i] = (uint8_t)rng_u64();
    const uint16_t d1 = f32_to_fp16(0.01f + 0.02f * (float)rng_unif()), d2 = f32_to_fp16(0.005f);
    if (type == DT_Q8_0)
        for (int64_t b = 0; b < n / 32; b++) memcpy(w + b * 34, &d1, 2);
    if (type == DT_Q4_0)
        for (int64_t b = 0; b < n / 32; b++) memcpy(w + b * 18, &d1, 2);
    if (type == DT_MXFP4) /* E8M0 scales 2^-9 .. 2^-5, every nibble goes */
        for (int64_t b = 0; b < n / 32; b++) w[b * 17] = (uint8_t)(118 + rng_u64() % 5);
    if (type == DT_Q4_K || type == DT_Q5_K) {
        const size_t bs = type == DT_Q4_K ? 144 : 176;
        for (int64_t b = 0; b < n / 256; b++) memcpy(w + b * bs, &d1, 2), memcpy(w + b * bs + 2, &d2, 2);
    }
    if (type == DT_Q6_K)
        for (int64_t b = 0; b < n / 256; b++) memcpy(w + b * 210 + 208, &d1, 2);
    if (type == DT_F16 || type == DT_BF16)
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = type == DT_F16 ? f32_to_fp16(rng_gauss()) : f32_to_bf16(rng_gauss());
            memcpy(w + 2 * i, &h, 2);
        }
    if (type == DT_F32)
        for (int64_t i = 0; i < n; i++) {
            float f = rng_gauss();
            memcpy(w + 4 * i, &f, 4);
        }
}

/* Dequantised activation row (the exact values the integer dot multiplies). */
static void act_values(uint32_t wtype, const void *a, const float *x, int64_t n, double *out) {
    const uint32_t at = kern_act_type(wtype);
    if (at == DT_F32) {
        for (int64_t i = 0; i < n; i++) out[i] = x[i];
        return;
    }
    float *f = xmalloc(sizeof(float) * n);
    quant_dequant_row(at, a, f, n);
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
}

static void test_dot_case(const dcase *c, int64_t n, bool raw) {
    const size_t rb = dtype_row_bytes(c->type, n), arb = kern_act_row_bytes(c->type, n);
    uint8_t *w = xmalloc(rb), *a = xmalloc(arb ? arb : 4);
    float *x = xmalloc(sizeof(float) * n), *wf = xmalloc(sizeof(float) * n);
    double *av = xmalloc(sizeof(double) * n);
    if (raw) {
        random_row(c->type, w, n);
    } else {
        for (int64_t i = 0; i < n; i++) wf[i] = rng_gauss() * 0.3f + (n % 3 ? 0.2f : 0.0f);
        quant_quantize_row(c->type, wf, w, n);
    }
    quant_dequant_row(c->type, w, wf, n);
    for (int64_t i = 0; i < n; i++) x[i] = rng_gauss() * 2.0f;
    const void *arow = x;
    if (kern_scalar_ops.act[c->type]) {
        kern_scalar_ops.act[c->type](x, a, n);
        arow = a;
    }
    act_values(c->type, arow, x, n, av);
    double exact = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) exact += wf[i] * av[i], mag += fabs(wf[i] * av[i]);
    float ref = NAN;
    kern_scalar_ops.dot[c->type](n, &ref, w, arow);
    /* float summation over at most n/blck terms plus scale products: a few
     * ulps per term, relative to the sum of magnitudes */
    const double nterm = (double)(c->blck == 1 ? n : n / c->blck * 3);
    const double tol = 4 * 6e-8 * (8 + nterm) * mag + 1e-30;
    float prev = NAN;
    for (int tb = 1; tb < n_tables; tb++) {
        CHECK_EQ_INT(kern_select(tables[tb]), 0);
        float got = NAN;
        kern->dot[c->type](n, &got, w, arow);
        /* avx2 and avx512 compute the same integers and follow the same
         * float order (x86_body.h), so they agree to the bit — except Q4_0,
         * whose AVX-512 kernels sum lanes of 8 elements, 4 blocks per
         * register (avx512.c), and so round differently */
        if (tb > 1 && strcmp(tables[tb], "avx512") == 0 && strcmp(tables[tb - 1], "avx2") == 0 &&
            c->type != DT_Q4_0)
            CHECK_MSG(memcmp(&got, &prev, sizeof got) == 0, "avx512 %s n=%lld: %.9g, avx2 %.9g", dtype_name(c->type),
                      (long long)n, got, prev);
        prev = got;
        CHECK_MSG(fabs(got - ref) <= tol && fabs(got - exact) <= tol, "%s %s n=%lld %s: %.9g scalar %.9g exact %.9g tol %g",
                  tables[tb], dtype_name(c->type), (long long)n, raw ? "raw" : "quantised", got, ref, exact, tol);
        /* the table's own converter feeds its dot the same bytes */
        if (kern->act[c->type]) {
            uint8_t *a2 = xmalloc(arb);
            kern->act[c->type](x, a2, n);
            float got2 = NAN;
            kern->dot[c->type](n, &got2, w, a2);
            CHECK(memcmp(&got, &got2, sizeof got) == 0);
            free(a2);
        }
    }
    kern_select("scalar");
    free(w), free(a), free(x), free(wf), free(av);
}

static void test_dots(void) {
    static const int64_t float_sizes[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 100, 257, 1000, 2049};
    static const int64_t blocks[] = {1, 2, 3, 5, 8, 13, 24};
    for (size_t ci = 0; ci < ARRAY_LEN(dcases); ci++) {
        const dcase *c = &dcases[ci];
        if (c->blck == 1) {
            for (size_t s = 0; s < ARRAY_LEN(float_sizes); s++) test_dot_case(c, float_sizes[s], s % 2);
        } else {
            for (size_t s = 0; s < ARRAY_LEN(blocks); s++) {
                if (c->blck == 32 && blocks[s] > 13) continue;
                test_dot_case(c, blocks[s] * c->blck, false);
                test_dot_case(c, blocks[s] * c->blck, true);
            }
        }
    }
}

/* ---- matmul_multi == matmul ------------------------------------------------------ */

static void test_multi(pool *pools[2]) {
    const int n_in = 512, n_tok = 5;
    const int n_out[3] = {37, 8, 77};
    const uint32_t types[3][3] = {{DT_Q8_0, DT_Q4_0, DT_MXFP4}, {DT_Q4_K, DT_Q6_K, DT_Q5_K}, {DT_Q4_K, DT_Q8_0, DT_F16}};
    float *x = xmalloc(sizeof(float) * n_in * n_tok);
    for (int i = 0; i < n_in * n_tok; i++) x[i] = rng_gauss();
    void *act = xmalloc(kern_act_row_bytes(DT_Q4_K, n_in) * n_tok + kern_act_row_bytes(DT_Q8_0, n_in) * n_tok);
    for (int tc = 0; tc < 3; tc++) {
        kern_mat w[3];
        uint8_t *data[3];
        float *y1[3], *y2[3];
        for (int m = 0; m < 3; m++) {
            const size_t rb = dtype_row_bytes(types[tc][m], n_in);
            data[m] = xmalloc(rb * n_out[m]);
            for (int r = 0; r < n_out[m]; r++) random_row(types[tc][m], data[m] + r * rb, n_in);
            w[m] = (kern_mat){.type = types[tc][m], .n_in = n_in, .n_out = n_out[m], .row_bytes = rb, .data = data[m]};
            y1[m] = xmalloc(sizeof(float) * n_out[m] * n_tok);
            y2[m] = xmalloc(sizeof(float) * n_out[m] * n_tok);
        }
        const kern_mat *ws[3] = {&w[0], &w[1], &w[2]};
        for (int tb = 0; tb < n_tables; tb++) {
            CHECK_EQ_INT(kern_select(tables[tb]), 0);
            for (int pi = 0; pi < 2; pi++) {
                for (int m = 0; m < 3; m++) kern_matmul(pools[0], &w[m], x, n_tok, y1[m], act);
                kern_matmul_multi(pools[pi], ws, 3, x, n_tok, y2, act);
                int diff = 0;
                for (int m = 0; m < 3; m++) diff += memcmp(y1[m], y2[m], sizeof(float) * n_out[m] * n_tok) != 0;
                CHECK_MSG(diff == 0, "%s: matmul_multi case %d (pool %d) differs from matmul", tables[tb], tc, pi);
            }
        }
        for (int m = 0; m < 3; m++) free(data[m]), free(y1[m]), free(y2[m]);
    }
    kern_select("scalar");
    free(x), free(act);
}

/* Larger batches than test_matmul uses (whose 7 tokens stay below the
 * gemm paths that prepare activations per token chunk): every output of a
 * 37-token matmul is bitwise its row's dot product, for widths where the
 * prepared chunk holds all tokens and where it holds fewer (n_in 8224). */
static void test_gemm_large(pool *p) {
    static const uint32_t types[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_MXFP4, DT_F32, DT_F16, DT_BF16};
    static const int64_t widths[] = {288, 8224, 2304, 172, 37, 7}; /* float tails: 172 = 5x32 + 8 + 4 */
    enum { NT = 37, NO = 13 };
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++)
        for (size_t wi = 0; wi < ARRAY_LEN(widths); wi++) {
            const uint32_t type = types[ti];
            const int64_t n_in = widths[wi];
            if (n_in % dtype_get(type)->blck) continue;
            const size_t rb = dtype_row_bytes(type, n_in), arb = kern_act_row_bytes(type, n_in);
            uint8_t *w = xmalloc(rb * NO), *act = xmalloc(arb ? arb * NT : 64);
            float *x = xmalloc(sizeof(float) * n_in * NT), *y = xmalloc(sizeof(float) * NO * NT);
            for (int r = 0; r < NO; r++) random_row(type, w + r * rb, n_in);
            for (int64_t i = 0; i < n_in * NT; i++) x[i] = rng_gauss();
            kern_mat m = {.type = type, .n_in = n_in, .n_out = NO, .row_bytes = rb, .data = w};
            for (int tb = 0; tb < n_tables; tb++) {
                CHECK_EQ_INT(kern_select(tables[tb]), 0);
                kern_matmul(p, &m, x, NT, y, act);
                int diff = 0;
                for (int t = 0; t < NT; t++) {
                    const void *at = x + t * n_in; /* float weights: the f32 rows as they are */
                    if (kern->act[type]) kern->act[type](x + t * n_in, act, n_in), at = act;
                    for (int r = 0; r < NO; r++) {
                        float d = NAN;
                        kern->dot[type](n_in, &d, w + r * rb, at);
                        diff += memcmp(&d, &y[t * NO + r], sizeof d) != 0;
                    }
                }
                CHECK_MSG(diff == 0, "%s %s n_in=%lld: %d of %d outputs of a %d-token matmul differ from dot",
                          tables[tb], dtype_name(type), (long long)n_in, diff, NT * NO, NT);
            }
            kern_select("scalar");
            free(w), free(act), free(x), free(y);
        }
}

/* The float gemm at a verification step's sizes: 1-10 tokens (avx512.c runs
 * 2 as 4 x 2 tiles and 3-8 as 2 x T, avx2.c 1 x 4 tiles and 2 x 2 / 2 x 1
 * tails), over row ranges whose last tiles are short (ranges that start
 * past row 0, as a thread's share does), each output bitwise its row's dot
 * product. */
static void test_gemm_float_small(void) {
    static const uint32_t types[] = {DT_F32, DT_F16, DT_BF16};
    static const int64_t widths[] = {172, 64, 37, 7};
    enum { MT = 10, NO = 13 };
    /* rows in 4s + 1, 4 + 1, 4 + 2, 2 + 1 (and in pairs + 1) */
    static const int ranges[4][2] = {{0, NO}, {8, NO}, {0, 6}, {8, 11}};
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++)
        for (size_t wi = 0; wi < ARRAY_LEN(widths); wi++) {
            const uint32_t type = types[ti];
            const int64_t n_in = widths[wi];
            const size_t rb = dtype_row_bytes(type, n_in), arb = sizeof(float) * (size_t)n_in;
            uint8_t *w = xmalloc(rb * NO);
            float *x = xmalloc(arb * MT), *y = xmalloc(sizeof(float) * NO * MT);
            for (int r = 0; r < NO; r++) random_row(type, w + r * rb, n_in);
            for (int64_t i = 0; i < n_in * MT; i++) x[i] = rng_gauss();
            kern_mat m = {.type = type, .n_in = n_in, .n_out = NO, .row_bytes = rb, .data = w};
            for (int tb = 0; tb < n_tables; tb++) {
                CHECK_EQ_INT(kern_select(tables[tb]), 0);
                for (int nt = 1; nt <= MT; nt++)
                    for (int ri = 0; ri < 4; ri++) {
                        const int r0 = ranges[ri][0], r1 = ranges[ri][1];
                        for (int i = 0; i < NO * MT; i++) y[i] = NAN;
                        kern_matmul_rows(&m, r0, r1, x, arb, nt, y, NO);
                        int diff = 0;
                        for (int t = 0; t < nt; t++)
                            for (int r = r0; r < r1; r++) {
                                float d = NAN;
                                kern->dot[type](n_in, &d, w + r * rb, x + t * n_in);
                                diff += memcmp(&d, &y[t * NO + r], sizeof d) != 0;
                            }
                        CHECK_MSG(diff == 0, "%s %s n_in=%lld: %d outputs of %d tokens x rows %d..%d differ from dot",
                                  tables[tb], dtype_name(type), (long long)n_in, diff, nt, r0, r1);
                    }
            }
            kern_select("scalar");
            free(w), free(x), free(y);
        }
}

/* Every E8M0 byte, subnormal (0, 1) and overflowing (255 x a large sum)
 * scales included: one MXFP4 block per row, row r carrying e = r, so the
 * 8-row gemms build each scale in vector lanes while the dot products and
 * the scalar reference take it from quant_mxfp4_half_scale. Each output must
 * be bitwise the table's dot, and the scalar dot (one block: a single
 * rounding of isum * 2^(e-128) * d_a) must be that product, infinities
 * included. */
static void test_mxfp4_scales(pool *p) {
    enum { NO = 256, NT = 5 };
    const size_t rb = sizeof(block_mxfp4), arb = kern_act_row_bytes(DT_MXFP4, 32);
    uint8_t *w = xmalloc(rb * NO), *act = xmalloc(arb * NT);
    float *x = xmalloc(sizeof(float) * 32 * NT), *y = xmalloc(sizeof(float) * NO * NT);
    for (int r = 0; r < NO; r++) {
        random_row(DT_MXFP4, w + r * rb, 32);
        w[r * rb] = (uint8_t)r;
    }
    for (int i = 0; i < 32 * NT; i++) x[i] = rng_gauss() * 3.0f;
    kern_mat m = {.type = DT_MXFP4, .n_in = 32, .n_out = NO, .row_bytes = rb, .data = w};
    int bad_ref = 0;
    for (int t = 0; t < NT; t++) {
        kern_scalar_ops.act[DT_MXFP4](x + t * 32, act, 32);
        const block_q8_0 *a = (const block_q8_0 *)act;
        for (int r = 0; r < NO; r++) {
            const block_mxfp4 *b = (const block_mxfp4 *)(w + r * rb);
            int64_t isum = 0;
            for (int j = 0; j < 16; j++)
                isum += quant_mxfp4_q2[b->qs[j] & 15] * a->qs[j] + quant_mxfp4_q2[b->qs[j] >> 4] * a->qs[j + 16];
            const float want = (float)((double)isum * ldexp(1.0, r - 128) * fp16_to_f32(a->d));
            float got = NAN;
            kern_scalar_ops.dot[DT_MXFP4](32, &got, b, a);
            bad_ref += memcmp(&got, &want, sizeof got) != 0;
        }
    }
    CHECK_MSG(bad_ref == 0, "scalar MXFP4: %d one-block dots are not isum * 2^(e-128) * d_a", bad_ref);
    for (int tb = 0; tb < n_tables; tb++) {
        CHECK_EQ_INT(kern_select(tables[tb]), 0);
        kern_matmul(p, &m, x, NT, y, act);
        int diff = 0;
        for (int t = 0; t < NT; t++) {
            kern->act[DT_MXFP4](x + t * 32, act, 32);
            for (int r = 0; r < NO; r++) {
                float d = NAN;
                kern->dot[DT_MXFP4](32, &d, w + r * rb, act);
                diff += memcmp(&d, &y[t * NO + r], sizeof d) != 0;
            }
        }
        CHECK_MSG(diff == 0, "%s MXFP4: %d of %d outputs over every E8M0 scale differ from dot", tables[tb], diff, NO * NT);
    }
    kern_select("scalar");
    free(w), free(act), free(x), free(y);
}

/* ---- attention ------------------------------------------------------------------- */

typedef struct kvfix {
    uint16_t *k, *v; /* f16, as the model's KV cache */
    int32_t table[64];
    attn_view view;
} kvfix;

/* A paged K/V of n_blocks blocks with a shuffled block table. */
static void kvfix_init(kvfix *f, int n_kv, int hd, int bt, int n_blocks) {
    const int kv_dim = n_kv * hd;
    const size_t stride = (size_t)bt * kv_dim + 5; /* an odd block stride: rows may be unaligned */
    f->k = xmalloc(sizeof(uint16_t) * stride * n_blocks);
    f->v = xmalloc(sizeof(uint16_t) * stride * n_blocks);
    for (size_t i = 0; i < stride * (size_t)n_blocks; i++)
        f->k[i] = f32_to_fp16(rng_gauss()), f->v[i] = f32_to_fp16(rng_gauss());
    for (int i = 0; i < n_blocks; i++) f->table[i] = (int32_t)((i * 7 + 3) % n_blocks);
    f->view = (attn_view){.k = f->k, .v = f->v, .block_stride = stride, .kv_dim = kv_dim, .head_dim = hd,
                          .block_tokens = bt, .block_table = f->table};
}

/* V row of position p, kv head h (row-major in its block, attn.h). */
static const uint16_t *kvfix_vrow(const kvfix *f, int p, int h) {
    const attn_view *v = &f->view;
    return f->v + (size_t)v->block_table[p / v->block_tokens] * v->block_stride +
           (size_t)(p % v->block_tokens) * v->kv_dim + (size_t)h * v->head_dim;
}
/* Element d of position p's key, kv head h (K^T in its block, attn.h). */
static float kvfix_k(const kvfix *f, int p, int h, int d) {
    const attn_view *v = &f->view;
    const int B = v->block_tokens;
    return fp16_to_f32(f->k[(size_t)v->block_table[p / B] * v->block_stride + ((size_t)h * v->head_dim + d) * B + p % B]);
}

static void test_attn(void) {
    static const int hds[] = {64, 128, 80, 40, 7};
    for (size_t hi = 0; hi < ARRAY_LEN(hds); hi++) {
        const int hd = hds[hi], n_kv = 2, bt = 16, n_blocks = 48; /* 768 positions */
        kvfix f;
        kvfix_init(&f, n_kv, hd, bt, n_blocks);
        const int n_q = 4;
        float *q = xmalloc(sizeof(float) * n_q * hd);
        for (int i = 0; i < n_q * hd; i++) q[i] = rng_gauss() * 2;
        const float scale = 1.0f / sqrtf((float)hd);
        float *scratch = xaligned_alloc(sizeof(float) * attn_scratch_floats(768, hd));
        float m0[4], l0[4], m1[4], l1[4];
        float *o0 = xmalloc(sizeof(float) * n_q * hd), *o1 = xmalloc(sizeof(float) * n_q * hd);
        static const int spans[][2] = {{0, 1}, {0, 7}, {5, 21}, {256, 512}, {512, 767}, {3, 259}};
        /* parts: fast vs scalar */
        for (size_t si = 0; si < ARRAY_LEN(spans); si++) {
            const int p0 = spans[si][0], p1 = spans[si][1];
            const attn_query aq0 = {q, m0, l0, o0, p1}, aq1 = {q, m1, l1, o1, p1};
            attn_part_scalar(&f.view, 1, n_q, &aq0, 1, p0, scale, scratch);
            for (int tb = 1; tb < n_tables; tb++) {
                CHECK_EQ_INT(kern_select(tables[tb]), 0);
                kern->attn_part(&f.view, 1, n_q, &aq1, 1, p0, scale, scratch);
                int bad = 0;
                for (int g = 0; g < n_q; g++) {
                    bad += !(fabsf(m1[g] - m0[g]) <= 1e-5f * (1 + fabsf(m0[g])));
                    bad += !(fabsf(l1[g] - l0[g]) <= 1e-5f * l0[g]);
                    for (int d = 0; d < hd; d++)
                        bad += !(fabsf(o1[g * hd + d] - o0[g * hd + d]) <= 2e-5f * (float)(p1 - p0) + 1e-5f * fabsf(o0[g * hd + d]));
                }
                CHECK_MSG(bad == 0, "%s attn_part hd=%d [%d,%d): %d values out of bounds", tables[tb], hd, p0, p1, bad);
            }
            kern_select("scalar");
        }
        /* whole heads against a double softmax; split parts merged == attn_head */
        static const int n_pos_list[] = {1, 255, 256, 257, 700, 768};
        for (size_t ni = 0; ni < ARRAY_LEN(n_pos_list); ni++) {
            const int n_pos = n_pos_list[ni];
            double *sc = xmalloc(sizeof(double) * n_pos), ref[128] = {0}, mx = -INFINITY, sum = 0;
            for (int p = 0; p < n_pos; p++) {
                double s = 0;
                for (int d = 0; d < hd; d++) s += (double)q[d] * kvfix_k(&f, p, 0, d);
                sc[p] = s * scale;
                mx = fmax(mx, sc[p]);
            }
            for (int p = 0; p < n_pos; p++) {
                const double e = exp(sc[p] - mx);
                sum += e;
                const uint16_t *vr = kvfix_vrow(&f, p, 0);
                for (int d = 0; d < hd; d++) ref[d] += e * fp16_to_f32(vr[d]);
            }
            for (int d = 0; d < hd; d++) ref[d] /= sum;
            for (int tb = 0; tb < n_tables; tb++) {
                CHECK_EQ_INT(kern_select(tables[tb]), 0);
                float out[128], out2[128];
                attn_head(&f.view, 0, q, n_pos, scale, out, scratch);
                int bad = 0;
                for (int d = 0; d < hd; d++) bad += !(fabs(out[d] - ref[d]) <= 2e-5);
                CHECK_MSG(bad == 0, "%s attn_head hd=%d n_pos=%d: %d values off the double reference", tables[tb], hd,
                          n_pos, bad);
                /* the chunks computed last-first, each as one query of a group of 1, then merged */
                const int nc = (n_pos + ATTN_CHUNK - 1) / ATTN_CHUNK;
                float pm[4], pl[4], *po = xmalloc(sizeof(float) * 4 * hd);
                for (int c = nc - 1; c >= 0; c--) {
                    const attn_query aq = {q, &pm[c], &pl[c], po + c * hd, MIN(n_pos, (c + 1) * ATTN_CHUNK)};
                    kern->attn_part(&f.view, 0, 1, &aq, 1, c * ATTN_CHUNK, scale, scratch);
                }
                attn_merge(nc, hd, pm, pl, 1, po, (size_t)hd, -INFINITY, out2);
                CHECK_MSG(memcmp(out, out2, sizeof(float) * hd) == 0, "%s attn split/merge differs", tables[tb]);
                /* the same query inside a group of 4: same bits for query 0 */
                float gm[4], gl[4], *go = xmalloc(sizeof(float) * 4 * hd);
                for (int c = 0; c < nc; c++) {
                    const attn_query aq = {q, gm, gl, go, MIN(n_pos, (c + 1) * ATTN_CHUNK)};
                    kern->attn_part(&f.view, 0, 4, &aq, 1, c * ATTN_CHUNK, scale, scratch);
                    CHECK(memcmp(&gm[0], &pm[c], 4) == 0 && memcmp(&gl[0], &pl[c], 4) == 0 &&
                          memcmp(go, po + c * hd, sizeof(float) * hd) == 0);
                }
                free(po), free(go);
            }
            kern_select("scalar");
            free(sc);
        }
        free(q), free(scratch), free(o0), free(o1), free(f.k), free(f.v);
    }
}

/* ---- pool ------------------------------------------------------------------------ */

typedef struct pool_probe {
    _Atomic int hits[8];
    _Atomic long total;
    _Atomic int nth_seen;
} pool_probe;

static void probe_fn(void *arg, int ith, int nth) {
    pool_probe *pp = arg;
    atomic_fetch_add(&pp->hits[ith], 1);
    atomic_fetch_add(&pp->total, ith + 1);
    atomic_store(&pp->nth_seen, nth);
}

static void test_pool(void) {
    for (int nt = 1; nt <= 4; nt++) {
        pool *p = pool_new(nt);
        CHECK_EQ_INT(pool_size(p), nt);
        int bad = 0;
        for (int rep = 0; rep < 20000; rep++) {
            pool_probe pp = {0};
            pool_run(p, probe_fn, &pp);
            for (int i = 0; i < nt; i++) bad += atomic_load(&pp.hits[i]) != 1;
            bad += atomic_load(&pp.total) != (long)nt * (nt + 1) / 2;
            bad += atomic_load(&pp.nth_seen) != nt;
            if (rep == 10000) { /* let the workers fall asleep, then wake them */
                struct timespec ts = {0, 5 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        CHECK_MSG(bad == 0, "pool of %d: %d runs went wrong", nt, bad);
        pool_free(p);
    }
    pool_free(NULL);
}

/* ---- forward: split decode attention is batch-invariant ------------------------ */

static void test_forward_split(void) {
    model *m = test_load_stories();
    if (!m) return;
    err_t e = {0};
    const int V = m->cfg.n_vocab, bt = 16, L = 600; /* 3 chunks of context */
    const int nb = (L + 8 + bt - 1) / bt;
    int32_t *toks = xmalloc(sizeof(int32_t) * (L + 8)), *pos = xmalloc(sizeof(int32_t) * (L + 8));
    int32_t *sid = xcalloc(L + 8, sizeof(int32_t));
    for (int i = 0; i < L + 8; i++) toks[i] = (int32_t)(1 + (i * 37) % (V - 1)), pos[i] = i;
    float *lg = xmalloc(sizeof(float) * V * 8), *alone = xmalloc(sizeof(float) * V * 2);
    for (int tb = 0; tb < n_tables; tb++) {
        CHECK_EQ_INT(kern_select(tables[tb]), 0);
        /* two identical sequences in one pool */
        model_kv *kv = model_kv_new(m, 2 * nb, bt);
        model_state *st = model_state_new(m, 256, L + 8, 2);
        int32_t *t0 = xmalloc(sizeof(int32_t) * nb), *t1 = xmalloc(sizeof(int32_t) * nb);
        for (int i = 0; i < nb; i++) t0[i] = 2 * i, t1[i] = 2 * (nb - 1 - i) + 1;
        model_seq seqs[2] = {{t0, nb}, {t1, nb}};
        for (int s = 0; s < 2; s++)
            for (int done = 0; done < L;) {
                int32_t ss[256];
                const int n = MIN(256, L - done);
                for (int i = 0; i < n; i++) ss[i] = s;
                model_batch b = {.n_tokens = n, .token = toks + done, .pos = pos + done, .seq = ss, .n_seqs = 2, .seqs = seqs};
                CHECK(model_forward(m, st, kv, &b, lg, &e) >= 0);
                done += n;
            }
        /* sequence 0 decodes alone (split attention, T=1) */
        model_batch d = {.n_tokens = 1, .token = toks + L, .pos = pos + L, .seq = sid, .n_seqs = 2, .seqs = seqs};
        CHECK_EQ_INT(model_forward(m, st, kv, &d, alone, &e), 1);
        /* sequence 1 decodes the same token inside a batch of 6 (unsplit) */
        int32_t bt6[6], bp6[6], bs6[6];
        uint8_t want[6] = {0, 0, 1, 0, 0, 0};
        for (int i = 0; i < 6; i++) bt6[i] = toks[L + (i == 2 ? 0 : 1 + i)], bp6[i] = i == 2 ? L : L - 6 + i, bs6[i] = i == 2;
        model_batch d6 = {.n_tokens = 6, .token = bt6, .pos = bp6, .seq = bs6, .logits = want, .n_seqs = 2, .seqs = seqs};
        CHECK_EQ_INT(model_forward(m, st, kv, &d6, lg, &e), 1);
        CHECK_MSG(memcmp(lg, alone, sizeof(float) * V) == 0, "%s: decode at %d positions differs alone vs batched",
                  tables[tb], L);
        model_state_free(st);
        model_kv_free(kv);
        free(t0), free(t1);
    }
    /* a prefill batch large enough for the per-token work to be spread over
     * the pool gives the same logits bits as decoding token by token */
    {
        enum { N = 48 };
        float *all = xmalloc(sizeof(float) * V * N), *one = xmalloc(sizeof(float) * V);
        uint8_t want[N];
        memset(want, 1, sizeof want);
        for (int tb = 0; tb < n_tables; tb++) {
            CHECK_EQ_INT(kern_select(tables[tb]), 0);
            model_kv *kv = model_kv_new(m, 4, bt);
            model_state *st = model_state_new(m, N, N, 2);
            int32_t table[4] = {3, 1, 0, 2};
            model_seq seq = {table, 4};
            model_batch pb = {.n_tokens = N, .token = toks, .pos = pos, .seq = sid, .logits = want, .n_seqs = 1, .seqs = &seq};
            CHECK_EQ_INT(model_forward(m, st, kv, &pb, all, &e), N);
            int diff = 0;
            for (int i = 0; i < N; i++) {
                model_batch d = {.n_tokens = 1, .token = toks + i, .pos = pos + i, .seq = sid, .n_seqs = 1, .seqs = &seq};
                CHECK_EQ_INT(model_forward(m, st, kv, &d, one, &e), 1);
                diff += memcmp(one, all + (size_t)i * V, sizeof(float) * V) != 0;
            }
            CHECK_MSG(diff == 0, "%s: %d of %d prefill rows differ from token-by-token decode", tables[tb], diff, N);
            model_state_free(st);
            model_kv_free(kv);
        }
        free(all), free(one);
    }
    kern_select("scalar");
    free(toks), free(pos), free(sid), free(lg), free(alone);
    model_free(m);
}

/* KVLOOM_KERNELS picks the table kern_init uses (kernels_test.sh relies on it). */
static void test_env(void) {
    const char *want = getenv("KVLOOM_KERNELS");
    CHECK_EQ_INT(kern_init(NULL), 0);
    if (want && *want && strcmp(want, "auto") != 0) CHECK_STR(kern->name, want);
    else CHECK_STR(kern->name, tables[n_tables - 1]);
    kern_select("scalar");
}

int main(void) {
    n_tables = kern_available(tables, 8);
    printf("kernel tables on this CPU:");
    for (int i = 0; i < n_tables; i++) printf(" %s", tables[i]);
    printf("\n");
    CHECK(n_tables >= 1);
    pool *pools[2] = {pool_new(1), pool_new(3)};
    test_env();
    test_rmsnorm_rows();
    test_f16_store();
    test_act();
    test_dots();
    test_multi(pools);
    test_gemm_large(pools[1]);
    test_gemm_float_small();
    test_mxfp4_scales(pools[1]);
    test_attn();
    test_pool();
    test_forward_split();
    pool_free(pools[0]);
    pool_free(pools[1]);
    return test_summary("test_kernels");
}
