/* test_matmul.c — kern/: kern_matmul for every weight type against a naive
 * double-precision matmul over the dequantised weights, on odd shapes, with
 * 1..7 tokens and 1..3 threads, for every kernel table this CPU can run;
 * batch invariance (bitwise equal rows whatever n_tok, position and thread
 * count); the dispatch API; and the small vector ops against double
 * references. */
#include "base/base.h"
#include "base/pool.h"
#include "kern/kern.h"
#include "kern/quant.h"
#include "test.h"

#include <stdint.h>


enum { N_OUT = 37, MAX_TOK = 7 };

typedef struct wcase {
    uint32_t type;
    int64_t n_in;
} wcase;

static const wcase cases[] = {
    {DT_F32, 77}, {DT_F16, 45}, {DT_BF16, 33}, {DT_Q8_0, 288}, {DT_Q4_0, 288},
    {DT_Q4_K, 512}, {DT_Q5_K, 512}, {DT_Q6_K, 768}, {DT_MXFP4, 288},
};

/* Largest error of one activation element of a block with max |x| = amax,
 * for the activation format `at` (see test_quant.c for the derivation). */
static double act_err(uint32_t at, double amax) {
    if (at == DT_Q8_0) return amax / 127 * 0.563;
    if (at == DT_Q8_K) return amax / 127 * 0.5001;
    return 0;
}

static int n_checked_tables;

static void test_type(const wcase *c, pool *pools[4]) {
    const uint32_t type = c->type, at = kern_act_type(type);
    const int64_t n_in = c->n_in;
    const size_t rb = dtype_row_bytes(type, n_in), arb = kern_act_row_bytes(type, n_in);
    CHECK(rb > 0 && arb > 0);
    uint8_t *wq = xmalloc(rb * N_OUT);
    float *wf = xmalloc(sizeof(float) * n_in), *wd = xmalloc(sizeof(float) * n_in * N_OUT);
    for (int r = 0; r < N_OUT; r++) {
        for (int64_t i = 0; i < n_in; i++) wf[i] = rng_gauss() * 0.2f + (r % 5 == 0 ? 0.1f : 0.0f);
        CHECK_EQ_INT(quant_quantize_row(type, wf, wq + r * rb, n_in), 0);
        CHECK_EQ_INT(quant_dequant_row(type, wq + r * rb, wd + r * n_in, n_in), 0);
    }
    kern_mat w = {.type = type, .n_in = n_in, .n_out = N_OUT, .row_bytes = rb, .data = wq};

    float *x = xmalloc(sizeof(float) * n_in * MAX_TOK);
    for (int64_t i = 0; i < n_in * MAX_TOK; i++) x[i] = rng_gauss() * (i < n_in ? 5.0f : 1.0f);

    /* references: over x itself, with a bound from the activation rounding */
    double *ref = xmalloc(sizeof(double) * MAX_TOK * N_OUT), *bound = xmalloc(sizeof(double) * MAX_TOK * N_OUT);
    const int blk = at == DT_F32 ? 1 : dtype_get(at)->blck;
    for (int t = 0; t < MAX_TOK; t++)
        for (int r = 0; r < N_OUT; r++) {
            const float *xt = x + t * n_in, *wr = wd + r * n_in;
            double s = 0, mag = 0, b = 0;
            for (int64_t i = 0; i < n_in; i++) s += (double)wr[i] * xt[i], mag += fabs((double)wr[i] * xt[i]);
            for (int64_t k = 0; k < n_in; k += blk) {
                double amax = 0, wsum = 0;
                for (int j = 0; j < blk; j++) amax = fmax(amax, fabs(xt[k + j])), wsum += fabs(wr[k + j]);
                b += wsum * act_err(at, amax);
            }
            ref[t * N_OUT + r] = s;
            bound[t * N_OUT + r] = b + 3e-6 * mag + 1e-30;
        }

    const char *names[8];
    const int n_tables = kern_available(names, 8);
    float *y = xmalloc(sizeof(float) * MAX_TOK * N_OUT), *y0 = xmalloc(sizeof(float) * MAX_TOK * N_OUT);
    float *y1 = xmalloc(sizeof(float) * N_OUT);
    uint8_t *act = xmalloc(arb * MAX_TOK);
    for (int tb = 0; tb < n_tables; tb++) {
        CHECK_EQ_INT(kern_select(names[tb]), 0);
        n_checked_tables++;
        /* the base result: all tokens, one thread */
        kern_matmul(pools[1], &w, x, MAX_TOK, y0, act);
        int far = 0;
        for (int i = 0; i < MAX_TOK * N_OUT; i++)
            if (!(fabs(y0[i] - ref[i]) <= bound[i])) {
                if (far++ < 3)
                    fprintf(stderr, "  %s/%s [%d][%d]: %.7g vs %.7g (bound %g)\n", names[tb], dtype_name(type),
                            i / N_OUT, i % N_OUT, y0[i], ref[i], bound[i]);
            }
        CHECK_MSG(far == 0, "%s %s: %d outputs out of bounds", names[tb], dtype_name(type), far);

        /* each output is the table's own dot product of its row and token */
        int diff = 0;
        for (int t = 0; t < MAX_TOK; t++) {
            const void *arow = x + t * n_in;
            if (kern->act[type]) {
                kern->act[type](x + t * n_in, act, n_in);
                arow = act;
            }
            for (int r = 0; r < N_OUT; r++) {
                float d = NAN;
                kern->dot[type](n_in, &d, wq + r * rb, arow);
                diff += memcmp(&d, &y0[t * N_OUT + r], sizeof d) != 0;
            }
        }
        CHECK_MSG(diff == 0, "%s %s: matmul differs from dot", names[tb], dtype_name(type));

        /* any n_tok, any thread count: the same bits */
        diff = 0;
        for (int pi = 0; pi < 4; pi++)
            for (int nt = 1; nt <= MAX_TOK; nt++) {
                for (int i = 0; i < MAX_TOK * N_OUT; i++) y[i] = NAN;
                kern_matmul(pools[pi], &w, x, nt, y, at == DT_F32 ? NULL : act);
                diff += memcmp(y, y0, sizeof(float) * nt * N_OUT) != 0;
                for (int i = nt * N_OUT; i < MAX_TOK * N_OUT; i++) diff += !isnan(y[i]); /* no write past */
            }
        CHECK_MSG(diff == 0, "%s %s: results depend on n_tok or threads", names[tb], dtype_name(type));

        /* batch invariance: token i alone == token i inside a batch of 5 */
        kern_matmul(pools[3], &w, x, 5, y, act);
        diff = 0;
        for (int i = 0; i < 5; i++) {
            kern_matmul(pools[1], &w, x + i * n_in, 1, y1, act);
            diff += memcmp(y1, y + i * N_OUT, sizeof(float) * N_OUT) != 0;
            kern_matmul(pools[3], &w, x + i * n_in, 1, y1, act);
            diff += memcmp(y1, y + i * N_OUT, sizeof(float) * N_OUT) != 0;
        }
        CHECK_MSG(diff == 0, "%s %s: not batch invariant", names[tb], dtype_name(type));

        /* few rows, more threads than tiles */
        kern_mat w3 = w;
        w3.n_out = 3;
        float y3[3 * 2];
        kern_matmul(pools[3], &w3, x, 2, y3, act);
        diff = 0;
        for (int t = 0; t < 2; t++)
            for (int r = 0; r < 3; r++) diff += memcmp(&y3[t * 3 + r], &y0[t * N_OUT + r], sizeof(float)) != 0;
        CHECK_MSG(diff == 0, "%s %s: n_out=3 differs", names[tb], dtype_name(type));
    }
    kern_select("scalar");
    free(wq), free(wf), free(wd), free(x), free(ref), free(bound), free(y), free(y0), free(y1), free(act);
}

/* Every table's gemm called directly, as the driver calls it: row ranges
 * [r0, r1) with r0 a multiple of 8 (a thread's share), n_tok around the
 * tile sizes (4), the point where the AVX-512 gemms start preparing the
 * weight side (8 tokens) and past a token chunk (64: avx2's Q4_0 and MXFP4
 * sums and packed rows), widths whose block count leaves every tail of a
 * 4-block group (Q4_0: 1, 2, 3), k-blocks (Q4_K: 8 super-blocks; avx2's
 * Q4_0 and MXFP4 pack 64 blocks: 8224 is 4 of them and 1 block) and
 * widths whose prepared activations do not fit one token chunk (Q4_0 and
 * MXFP4 8224, Q4_K 12288; MXFP4 2880 is gpt-oss's width), avx2's Q8_0
 * rows-in-lanes path (4 tokens on) over k-chunks of 32 blocks with a last
 * chunk of 1 block (1056, 8224), of 26 (2880) and rows of 1 and 3 blocks
 * (the odd block alone in the even accumulators), and the
 * eight-row decode path (up to 3 tokens) on rows cut in two k-chunks (1025
 * blocks). Each output must be bitwise the table's
 * dot product, within rounding of the exact product of the dequantised
 * rows, and nothing outside [r0, r1) x n_tok may be written. */
static void test_gemm_ranges(void) {
    static const struct {
        uint32_t type;
        int64_t n_in;
        int max_tok; /* 0: every n_toks */
    } gcases[] = {
        {DT_Q4_0, 32, 0}, {DT_Q4_0, 64, 0}, {DT_Q4_0, 96, 0}, {DT_Q4_0, 160, 0}, {DT_Q4_0, 224, 0},
        {DT_Q4_0, 576, 0}, {DT_Q4_0, 8224, 0}, {DT_Q8_0, 32, 0}, {DT_Q8_0, 96, 0}, {DT_Q8_0, 1056, 0}, {DT_Q8_0, 2880, 0},
        {DT_Q8_0, 8224, 0}, {DT_Q4_K, 256, 0},
        {DT_Q4_K, 768, 0}, {DT_Q4_K, 2304, 0}, {DT_Q4_K, 12288, 0}, {DT_Q5_K, 768, 0}, {DT_Q6_K, 256, 0},
        {DT_Q6_K, 2304, 0}, {DT_Q6_K, 12288, 0}, {DT_MXFP4, 32, 0}, {DT_MXFP4, 96, 0}, {DT_MXFP4, 2880, 0},
        {DT_MXFP4, 8224, 0}, {DT_Q4_0, 32800, 3}, {DT_MXFP4, 32800, 3},
    };
    static const int n_toks[] = {1, 3, 4, 7, 8, 9, 13, 37, 70};
    static const int ranges[][2] = {{0, 21}, {8, 21}, {8, 16}, {16, 19}, {0, 1}};
    enum { NO = 21, MAXT = 70 };
    const char *names[8];
    const int n_tables = kern_available(names, 8);
    for (size_t ci = 0; ci < ARRAY_LEN(gcases); ci++) {
        const uint32_t type = gcases[ci].type, at = kern_act_type(type);
        const int64_t n_in = gcases[ci].n_in;
        const size_t rb = dtype_row_bytes(type, n_in), arb = kern_act_row_bytes(type, n_in);
        uint8_t *wq = xmalloc(rb * NO), *act = xmalloc(arb * MAXT);
        float *f = xmalloc(sizeof(float) * n_in), *x = xmalloc(sizeof(float) * n_in * MAXT);
        double *wd = xmalloc(sizeof(double) * n_in * NO), *ad = xmalloc(sizeof(double) * n_in * MAXT);
        float *y = xmalloc(sizeof(float) * NO * MAXT);
        for (int r = 0; r < NO; r++) {
            for (int64_t i = 0; i < n_in; i++) f[i] = rng_gauss() * 0.3f + (r % 3 == 0 ? 0.2f : 0.0f);
            CHECK_EQ_INT(quant_quantize_row(type, f, wq + r * rb, n_in), 0);
            quant_dequant_row(type, wq + r * rb, f, n_in);
            for (int64_t i = 0; i < n_in; i++) wd[r * n_in + i] = f[i];
        }
        for (int64_t i = 0; i < n_in * MAXT; i++) x[i] = rng_gauss() * (i % 97 == 0 ? 8.0f : 1.0f);
        for (int tb = 0; tb < n_tables; tb++) {
            CHECK_EQ_INT(kern_select(names[tb]), 0);
            if (!kern->gemm[type]) continue;
            for (int t = 0; t < MAXT; t++) {
                kern->act[type](x + t * n_in, act + t * arb, n_in);
                quant_dequant_row(at, act + t * arb, f, n_in);
                for (int64_t i = 0; i < n_in; i++) ad[t * n_in + i] = f[i];
            }
            int bad_dot = 0, bad_ref = 0, bad_write = 0;
            for (size_t ni = 0; ni < ARRAY_LEN(n_toks); ni++)
                for (size_t ri = 0; ri < ARRAY_LEN(ranges); ri++) {
                    const int nt = n_toks[ni], r0 = ranges[ri][0], r1 = ranges[ri][1];
                    if (gcases[ci].max_tok && nt > gcases[ci].max_tok) continue;
                    for (int i = 0; i < NO * MAXT; i++) y[i] = NAN;
                    kern->gemm[type](&(kern_mat){.type = type, .n_in = n_in, .n_out = NO, .row_bytes = rb, .data = wq},
                                     r0, r1, act, arb, nt, y, NO);
                    for (int t = 0; t < MAXT; t++)
                        for (int r = 0; r < NO; r++) {
                            const float got = y[t * NO + r];
                            if (t >= nt || r < r0 || r >= r1) {
                                bad_write += !isnan(got);
                                continue;
                            }
                            float d = NAN;
                            kern->dot[type](n_in, &d, wq + r * rb, act + t * arb);
                            bad_dot += memcmp(&d, &got, sizeof d) != 0;
                            double exact = 0, mag = 0;
                            for (int64_t i = 0; i < n_in; i++) {
                                const double p = wd[r * n_in + i] * ad[t * n_in + i];
                                exact += p, mag += fabs(p);
                            }
                            bad_ref += !(fabs(got - exact) <= 4 * 6e-8 * (8 + 3.0 * n_in / 32) * mag + 1e-30);
                        }
                }
            CHECK_MSG(bad_dot == 0, "%s %s n_in=%lld: %d gemm outputs differ from dot", names[tb], dtype_name(type),
                      (long long)n_in, bad_dot);
            CHECK_MSG(bad_ref == 0, "%s %s n_in=%lld: %d gemm outputs off the exact product", names[tb],
                      dtype_name(type), (long long)n_in, bad_ref);
            CHECK_MSG(bad_write == 0, "%s %s n_in=%lld: %d writes outside the range", names[tb], dtype_name(type),
                      (long long)n_in, bad_write);
        }
        kern_select("scalar");
        free(wq), free(act), free(f), free(x), free(wd), free(ad), free(y);
    }
}

static void test_dispatch(void) {
    const char *names[8];
    int n = kern_available(names, 8);
    CHECK(n >= 1);
    CHECK_STR(names[0], "scalar");
    CHECK_EQ_INT(kern_select("no-such-table"), ERR_NOTFOUND);
    CHECK_EQ_INT(kern_init("no-such-table"), ERR_NOTFOUND);
    CHECK_EQ_INT(kern_init("scalar"), 0);
    CHECK_STR(kern->name, "scalar");
    setenv("KVLOOM_KERNELS", "scalar", 1);
    CHECK_EQ_INT(kern_init(NULL), 0);
    CHECK_STR(kern->name, "scalar");
    unsetenv("KVLOOM_KERNELS");
    CHECK_EQ_INT(kern_init(NULL), 0);
    CHECK_STR(kern->name, names[n - 1]); /* best last */
    CHECK_EQ_INT(kern_init("auto"), 0);
    CHECK_STR(kern->name, names[n - 1]);
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) CHECK(kern->dot[cases[c].type] != NULL);
    kern_select("scalar");

    CHECK_EQ_INT(kern_act_type(DT_F32), DT_F32);
    CHECK_EQ_INT(kern_act_type(DT_F16), DT_F32);
    CHECK_EQ_INT(kern_act_type(DT_BF16), DT_F32);
    CHECK_EQ_INT(kern_act_type(DT_Q8_0), DT_Q8_0);
    CHECK_EQ_INT(kern_act_type(DT_Q4_0), DT_Q8_0);
    CHECK_EQ_INT(kern_act_type(DT_Q4_K), DT_Q8_K);
    CHECK_EQ_INT(kern_act_type(DT_Q5_K), DT_Q8_K);
    CHECK_EQ_INT(kern_act_type(DT_Q6_K), DT_Q8_K);
    CHECK_EQ_INT(kern_act_type(DT_Q4_1), DT_COUNT);
    CHECK_EQ_INT(kern_act_type(4000), DT_COUNT);
    CHECK_EQ_INT(kern_act_row_bytes(DT_Q4_K, 512), 2 * 292);
    CHECK_EQ_INT(kern_act_row_bytes(DT_Q4_0, 64), 2 * 34);
    CHECK_EQ_INT(kern_act_row_bytes(DT_F16, 10), 40);
    CHECK_EQ_INT(kern_act_row_bytes(DT_Q4_1, 32), 0);
    CHECK_EQ_INT(kern_act_row_bytes(DT_Q8_0, 33), 0);
}

static void test_vector_ops(void) {
    enum { N = 203 };
    float x[N], w[N], out[N], g[N], u[N];
    for (int i = 0; i < N; i++) x[i] = rng_gauss() * 3, w[i] = rng_gauss(), g[i] = rng_gauss() * 4, u[i] = rng_gauss();
    double ss = 0;
    for (int i = 0; i < N; i++) ss += (double)x[i] * x[i];
    const double sc = 1 / sqrt(ss / N + 1e-5);
    kern_rmsnorm(out, x, w, N, 1e-5f);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += fabs(out[i] - x[i] * sc * w[i]) > 1e-5 * fabs(x[i] * sc * w[i]) + 1e-7;
    CHECK_EQ_INT(bad, 0);
    float xs[N];
    memcpy(xs, x, sizeof x);
    kern_rmsnorm(xs, xs, NULL, N, 1e-5f); /* in place, no weight */
    bad = 0;
    for (int i = 0; i < N; i++) bad += fabs(xs[i] - x[i] * sc) > 1e-5 * fabs(x[i] * sc) + 1e-7;
    CHECK_EQ_INT(bad, 0);

    float gg[N];
    memcpy(gg, g, sizeof g);
    kern_swiglu(gg, u, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        const double e = g[i] / (1 + exp(-(double)g[i])) * u[i];
        bad += fabs(gg[i] - e) > 1e-5 * fabs(e) + 1e-7;
    }
    CHECK_EQ_INT(bad, 0);
    float big[2] = {-200.0f, 1.0f};
    kern_swiglu(big, (float[]){1.0f, 1.0f}, 2);
    CHECK(big[0] == 0.0f && fabsf(big[1] - 0.7310586f) < 1e-6f);

    float s[N];
    for (int i = 0; i < N; i++) s[i] = x[i] * 10; /* wide range */
    double m = -INFINITY, z = 0;
    for (int i = 0; i < N; i++) m = fmax(m, s[i]);
    for (int i = 0; i < N; i++) z += exp(s[i] - m);
    float s0[N];
    memcpy(s0, s, sizeof s);
    kern_softmax(s, N);
    double tot = 0;
    bad = 0;
    for (int i = 0; i < N; i++) {
        const double e = exp(s0[i] - m) / z;
        bad += fabs(s[i] - e) > 1e-5 * e + 1e-12;
        tot += s[i];
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_NEAR(tot, 1.0, 1e-5);
    float one[1] = {123.0f};
    kern_softmax(one, 1);
    CHECK(one[0] == 1.0f);
}

/* kern_swiglu on every table against a double reference: random gates over
 * a wide range, every tail length, and the saturated ends (silu(-200) = -0
 * or 0, silu(200) = 200, silu(0) = 0). */
static void test_swiglu_tables(void) {
    enum { N = 203 };
    const char *names[8];
    const int n_tables = kern_available(names, 8);
    float g[N], u[N];
    for (int i = 0; i < N; i++) g[i] = rng_gauss() * (i % 3 == 0 ? 30 : 4), u[i] = rng_gauss();
    for (int tb = 0; tb < n_tables; tb++) {
        CHECK_EQ_INT(kern_select(names[tb]), 0);
        for (int n = 1; n <= N; n += (n < 20 ? 1 : 37)) {
            float gg[N];
            memcpy(gg, g, sizeof g);
            kern_swiglu(gg, u, n);
            int bad = 0;
            for (int i = 0; i < n; i++) {
                const double e = g[i] / (1 + exp(-(double)g[i])) * u[i];
                bad += !(fabs(gg[i] - e) <= 2e-6 * fabs(e) + 1e-30);
            }
            CHECK_MSG(bad == 0, "table %s, n %d: %d values off", names[tb], n, bad);
            CHECK(!memcmp(gg + n, g + n, sizeof(float) * (size_t)(N - n))); /* nothing past n */
        }
        float e[5] = {-200.0f, 200.0f, 0.0f, -1e-20f, 88.5f};
        kern_swiglu(e, (float[]){1, 1, 1, 1, 2}, 5);
        CHECK_MSG(fabsf(e[0]) < 1e-30f && e[1] == 200.0f && e[2] == 0.0f && fabsf(e[3] + 5e-21f) < 1e-26f &&
                      e[4] == 177.0f,
                  "table %s: swiglu ends %g %g %g %g %g", names[tb], e[0], e[1], e[2], e[3], e[4]);
    }
    kern_select("scalar");
}

int main(void) {
    rng_state = 0x243f6a8885a308d3ull; /* this file's own sequence */
    pool *pools[4] = {NULL, pool_new(1), pool_new(2), pool_new(3)};
    test_dispatch();
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) test_type(&cases[c], pools);
    CHECK(n_checked_tables >= (int)ARRAY_LEN(cases));
    test_vector_ops();
    test_swiglu_tables();
    test_gemm_ranges();
    for (int i = 0; i < 4; i++) pool_free(pools[i]);
    return test_summary("test_matmul");
}
