/* test_quant.c — kern/quant: block layouts (hand-built blocks decoded against
 * values worked out from the format definition), quantise->dequantise error
 * per type, exact round trips, activation quantisers, and the scalar dot
 * products against double-precision dots of the dequantised rows. */
#include "base/base.h"
#include "kern/kern.h"
#include "kern/quant.h"
#include "test.h"

#include <stdint.h>


static uint16_t h16(float f) { return f32_to_fp16(f); }

/* ---- hand-built blocks ---- */

static void test_q8_0_block(void) {
    block_q8_0 b;
    b.d = 0x3800; /* 0.5 */
    for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)(j * 8 - 128); /* -128 .. 120 */
    float y[32];
    CHECK_EQ_INT(quant_dequant_row(DT_Q8_0, &b, y, 32), 0);
    CHECK(y[0] == -64.0f);
    CHECK(y[16] == 0.0f);
    CHECK(y[31] == 60.0f);
    int bad = 0;
    for (int j = 0; j < 32; j++) bad += y[j] != (j * 8 - 128) * 0.5f;
    CHECK_EQ_INT(bad, 0);
}

static void test_q4_0_block(void) {
    uint8_t raw[18];
    raw[0] = 0x00, raw[1] = 0x40; /* d = 2.0, little-endian f16 */
    for (int j = 0; j < 16; j++) raw[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    CHECK_EQ_INT(quant_dequant_row(DT_Q4_0, raw, y, 32), 0);
    CHECK(y[0] == -16.0f);  /* (0-8)*2   */
    CHECK(y[15] == 14.0f);  /* (15-8)*2  */
    CHECK(y[16] == 14.0f);  /* element 16: high nibble of qs[0] = 15 */
    CHECK(y[31] == -16.0f); /* element 31: high nibble of qs[15] = 0 */
    CHECK(y[5] == -6.0f);
    CHECK(y[21] == 4.0f); /* high nibble of qs[5] = 10 -> (10-8)*2 */
}

/* MXFP4 against the OCP definition worked out here by hand: nibble
 * s|ee|m is (-1)^s * (ee ? (1 + m/2) * 2^(ee-1) : m/2), times 2^(e-127). */
static void test_mxfp4_block(void) {
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    uint8_t raw[2 * 17];
    raw[0] = 129; /* scale 2^2 = 4 */
    for (int j = 0; j < 16; j++) raw[1 + j] = (uint8_t)(j | ((15 - j) << 4));
    raw[17] = 0; /* scale 2^-127, a subnormal */
    for (int j = 0; j < 16; j++) raw[18 + j] = (uint8_t)(7 | (1 << 4));
    float y[64];
    CHECK_EQ_INT(quant_dequant_row(DT_MXFP4, raw, y, 64), 0);
    CHECK(y[0] == 0.0f);
    CHECK(y[1] == 2.0f);   /* 0.5 * 4 */
    CHECK(y[7] == 24.0f);  /* 6 * 4 */
    CHECK(y[11] == -6.0f); /* nibble 1011: -1.5 * 4 */
    CHECK(y[16] == -24.0f); /* high nibble of qs[0] = 15: -6 * 4 */
    CHECK(y[31] == 0.0f);   /* high nibble of qs[15] = 0 */
    int bad = 0;
    for (int j = 0; j < 16; j++) bad += y[j] != e2m1[j] * 4 || y[16 + j] != e2m1[15 - j] * 4;
    for (int j = 0; j < 16; j++) bad += y[32 + j] != ldexpf(6, -127) || y[48 + j] != ldexpf(0.5f, -127);
    CHECK_EQ_INT(bad, 0);
    CHECK(y[32] > 0 && y[48] > 0); /* subnormal products survive */
    /* the largest scale 2^127: 1.5 * 2^127 is finite, 2 * 2^127 overflows
     * to inf (as in ggml, whose doubled-value product is the same) */
    raw[0] = 254;
    raw[1] = 3 | (4 << 4);
    CHECK_EQ_INT(quant_dequant_row(DT_MXFP4, raw, y, 32), 0);
    CHECK(y[0] == ldexpf(1.5f, 127));
    CHECK(isinf(y[16]) && y[16] > 0);
}

/* Scales and mins used for the Q4_K/Q5_K blocks, and their packing worked
 * out by hand from the layout:
 *   bytes 0..3: sc[0..3] | (sc[4..7] >> 4) << 6
 *   bytes 4..7: m[0..3]  | (m[4..7] >> 4) << 6
 *   bytes 8..11: (sc[4..7] & 15) | (m[4..7] & 15) << 4                    */
static const int k_sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
static const int k_m[8] = {0, 5, 10, 15, 20, 40, 60, 63};
static const uint8_t k_packed[12] = {65, 130, 195, 196, 64, 133, 202, 207, 0x41, 0x81, 0xC2, 0xFF};

static void test_q4_k_block(void) {
    block_q4_k b;
    b.d = 0x3c00;    /* 1.0 */
    b.dmin = 0x3800; /* 0.5 */
    memcpy(b.scales, k_packed, 12);
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)((i & 15) | (((i + 3) & 15) << 4));
    for (int k = 0; k < 8; k++) {
        uint8_t sc, m;
        quant_k_scale_min(b.scales, k, &sc, &m);
        CHECK_EQ_INT(sc, k_sc[k]);
        CHECK_EQ_INT(m, k_m[k]);
    }
    float y[256];
    CHECK_EQ_INT(quant_dequant_row(DT_Q4_K, &b, y, 256), 0);
    /* element 32k+l: nibble of qs[32*(k/2)+l], low for even k, high for odd */
    int bad = 0;
    for (int k = 0; k < 8; k++)
        for (int l = 0; l < 32; l++) {
            const int i = 32 * (k / 2) + l;
            const int q = (k % 2 == 0) ? (i & 15) : ((i + 3) & 15);
            bad += y[32 * k + l] != (float)(k_sc[k] * q) - 0.5f * k_m[k];
        }
    CHECK_EQ_INT(bad, 0);
    /* spot values by hand:
     * e=0:   k=0, qs[0] low = 0            -> 1*0 - 0       = 0
     * e=37:  k=1, l=5, qs[5] high = 8      -> 2*8 - 2.5     = 13.5
     * e=200: k=6, l=8, qs[104] low = 8     -> 50*8 - 30     = 370
     * e=255: k=7, l=31, qs[127] high = 2   -> 63*2 - 31.5   = 94.5 */
    CHECK(y[0] == 0.0f);
    CHECK(y[37] == 13.5f);
    CHECK(y[200] == 370.0f);
    CHECK(y[255] == 94.5f);
}

static void test_q5_k_block(void) {
    block_q5_k b;
    b.d = 0x3c00;
    b.dmin = 0x3800;
    memcpy(b.scales, k_packed, 12);
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)((i & 15) | (((i + 3) & 15) << 4));
    for (int l = 0; l < 32; l++) b.qh[l] = (uint8_t)(l * 37);
    float y[256];
    CHECK_EQ_INT(quant_dequant_row(DT_Q5_K, &b, y, 256), 0);
    int bad = 0;
    for (int k = 0; k < 8; k++)
        for (int l = 0; l < 32; l++) {
            const int i = 32 * (k / 2) + l;
            const int lo = (k % 2 == 0) ? (i & 15) : ((i + 3) & 15);
            const int q = lo + 16 * ((((l * 37) & 255) >> k) & 1);
            bad += y[32 * k + l] != (float)(k_sc[k] * q) - 0.5f * k_m[k];
        }
    CHECK_EQ_INT(bad, 0);
    /* e=200: k=6, l=8: low nibble of qs[104] = 8; qh[8] = 296&255 = 40 =
     * 0b00101000, bit 6 = 0 -> q = 8 -> 50*8 - 30 = 370.
     * e=165: k=5, l=5: high nibble of qs[69] = (72&15) = 8; qh[5] = 185 =
     * 0b10111001, bit 5 = 1 -> q = 24 -> 33*24 - 20 = 772.
     * e=3:   k=0, l=3: qs[3] low = 3; qh[3] = 111 = 0b01101111, bit 0 = 1
     * -> q = 19 -> 1*19 - 0 = 19. */
    CHECK(y[200] == 370.0f);
    CHECK(y[165] == 772.0f);
    CHECK(y[3] == 19.0f);
}

static void test_q6_k_block(void) {
    block_q6_k b;
    for (int i = 0; i < 128; i++) b.ql[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 64; i++) b.qh[i] = (uint8_t)(i * 29 + 3);
    for (int g = 0; g < 16; g++) b.scales[g] = (int8_t)(g * 9 - 70);
    b.d = 0x3400; /* 0.25 */
    float y[256];
    CHECK_EQ_INT(quant_dequant_row(DT_Q6_K, &b, y, 256), 0);
    /* element e = 128h + 32s + l:
     *   low 4 bits: s=0 low nibble of ql[64h+l], s=1 low of ql[64h+32+l],
     *               s=2 high of ql[64h+l],      s=3 high of ql[64h+32+l];
     *   high 2 bits: bits 2s..2s+1 of qh[32h+l]; value - 32; scale e/16. */
    int bad = 0;
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, s = (e / 32) % 4, l = e % 32;
        const int qlb = ((64 * h + (s % 2) * 32 + l) * 7 + 1) & 255;
        const int lo = s < 2 ? (qlb & 15) : (qlb >> 4);
        const int hi = ((((32 * h + l) * 29 + 3) & 255) >> (2 * s)) & 3;
        const int q = (lo | (hi << 4)) - 32;
        bad += y[e] != 0.25f * (float)((e / 16) * 9 - 70) * (float)q;
    }
    CHECK_EQ_INT(bad, 0);
    /* e=0: ql[0]=1 -> lo 1; qh[0]=3 -> bits 0..1 = 3 -> q = 49-32 = 17;
     *      scale -70 -> 0.25*-70*17 = -297.5
     * e=100: h=0,s=3,l=4: ql[36] = 253 = 0xFD high = 15; qh[4] = 119 =
     *      0b01110111 bits 6..7 = 1 -> q = 31-32 = -1; scale[6] = -16
     *      -> 0.25*-16*-1 = 4
     * e=200: h=1,s=2,l=8: ql[72] = 505&255 = 249 = 0xF9 high = 15; qh[40] =
     *      1163&255 = 139 = 0b10001011, bits 4..5 = 0 -> q = 15-32 = -17;
     *      scale[12] = 38 -> 0.25*38*-17 = -161.5 */
    CHECK(y[0] == -297.5f);
    CHECK(y[100] == 4.0f);
    CHECK(y[200] == -161.5f);
}

static void test_q8_k_block(void) {
    block_q8_k b;
    b.d = 0.125f;
    for (int j = 0; j < 256; j++) b.qs[j] = (int8_t)(j - 128);
    for (int g = 0; g < 16; g++) b.bsums[g] = 0;
    float y[256];
    CHECK_EQ_INT(quant_dequant_row(DT_Q8_K, &b, y, 256), 0);
    CHECK(y[0] == -16.0f);
    CHECK(y[255] == 15.875f);
}

/* ---- conversions, round trips and errors ---- */

/* An independent half decoder, field by field (subnormals normalised by
 * shifting), for fp16_to_f32's exhaustive check. */
static uint32_t ref_half_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 31) return sign | 0x7f800000u | (mant << 13);
    if (exp > 0) return sign | ((exp + 127 - 15) << 23) | (mant << 13);
    if (mant == 0) return sign;
    int e = 0;
    while (!(mant & 0x400)) mant <<= 1, e++;
    return sign | ((uint32_t)(127 - 15 + 1 - e) << 23) | ((mant & 0x3ff) << 13);
}

static void test_halves(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = fp16_to_f32((uint16_t)h);
        uint32_t bits;
        memcpy(&bits, &a, 4);
        bad += bits != ref_half_bits((uint16_t)h);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(bf16_to_f32(0x3f80) == 1.0f);
    CHECK(bf16_to_f32(0xc049) == -3.140625f);
}

static void test_args(void) {
    float y[256], x[256] = {0};
    uint8_t buf[1024];
    CHECK(quant_supported(DT_Q4_K));
    CHECK(!quant_supported(DT_Q4_1));
    CHECK(!quant_supported(999));
    CHECK_EQ_INT(quant_dequant_row(DT_Q4_1, buf, y, 32), ERR_UNSUPPORTED);
    CHECK_EQ_INT(quant_dequant_row(12345, buf, y, 32), ERR_UNSUPPORTED);
    CHECK_EQ_INT(quant_dequant_row(DT_Q8_0, buf, y, 33), ERR_INVALID);
    CHECK_EQ_INT(quant_dequant_row(DT_Q4_K, buf, y, 128), ERR_INVALID);
    CHECK_EQ_INT(quant_dequant_row(DT_F32, buf, y, -1), ERR_INVALID);
    CHECK_EQ_INT(quant_quantize_row(DT_Q6_K, x, buf, 100), ERR_INVALID);
    CHECK_EQ_INT(quant_quantize_row(DT_IQ2_XS, x, buf, 256), ERR_UNSUPPORTED);
    CHECK_EQ_INT(quant_quantize_row(DT_Q4_0, x, buf, 0), 0);
    /* struct sizes agree with the type table */
    CHECK_EQ_INT(dtype_get(DT_Q8_0)->type_size, sizeof(block_q8_0));
    CHECK_EQ_INT(dtype_get(DT_Q4_0)->type_size, sizeof(block_q4_0));
    CHECK_EQ_INT(dtype_get(DT_Q4_K)->type_size, sizeof(block_q4_k));
    CHECK_EQ_INT(dtype_get(DT_Q5_K)->type_size, sizeof(block_q5_k));
    CHECK_EQ_INT(dtype_get(DT_Q6_K)->type_size, sizeof(block_q6_k));
    CHECK_EQ_INT(dtype_get(DT_Q8_K)->type_size, sizeof(block_q8_k));
    CHECK_EQ_INT(dtype_get(DT_MXFP4)->type_size, sizeof(block_mxfp4));
    CHECK_EQ_INT(quant_dequant_row(DT_MXFP4, buf, y, 48), ERR_INVALID);
    CHECK(dtype_from_name("mxfp4") == DT_MXFP4);
    /* general.file_type names, by llama.cpp's LLAMA_FTYPE_MOSTLY_* numbers
     * (llama.h): 15 Q4_K_M, 7 Q8_0, 32 BF16; 4 (retired) and values past
     * the table have none */
    CHECK_STR(dtype_file_type_name(15), "Q4_K_M");
    CHECK_STR(dtype_file_type_name(7), "Q8_0");
    CHECK_STR(dtype_file_type_name(32), "BF16");
    CHECK(dtype_file_type_name(4) == NULL);
    CHECK(dtype_file_type_name(38) == NULL && dtype_file_type_name(-1) == NULL);
}

static const uint32_t all_types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_Q8_K, DT_MXFP4};

/* Random bytes decode without reading past the row (ASan) or crashing. */
static void test_garbage(void) {
    for (size_t t = 0; t < ARRAY_LEN(all_types); t++) {
        const int64_t n = 512;
        size_t nb = dtype_row_bytes(all_types[t], n);
        uint8_t *raw = xmalloc(nb);
        float *y = xmalloc(n * sizeof(float));
        for (size_t i = 0; i < nb; i++) raw[i] = (uint8_t)rng_u64();
        CHECK_EQ_INT(quant_dequant_row(all_types[t], raw, y, n), 0);
        free(raw);
        free(y);
    }
}

static void test_exact_round_trips(void) {
    enum { N = 96 };
    float x[N], y[N];
    uint8_t buf[N * 4];
    for (int i = 0; i < N; i++) x[i] = rng_gauss() * 3;
    CHECK_EQ_INT(quant_quantize_row(DT_F32, x, buf, N), 0);
    CHECK_EQ_INT(quant_dequant_row(DT_F32, buf, y, N), 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* halves of values already representable */
    for (int i = 0; i < N; i++) x[i] = (float)(i - 48) * 0.125f + 1.0f / 64; /* <= 9 significant bits */
    CHECK_EQ_INT(quant_quantize_row(DT_F16, x, buf, N), 0);
    CHECK_EQ_INT(quant_dequant_row(DT_F16, buf, y, N), 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    for (int i = 0; i < N; i++) x[i] = (float)(i - 48) * 0.25f;
    CHECK_EQ_INT(quant_quantize_row(DT_BF16, x, buf, N), 0);
    CHECK_EQ_INT(quant_dequant_row(DT_BF16, buf, y, N), 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* Q8_0 on its grid: each block has d an exact half and one |q| = 127 */
    for (int b = 0; b < N / 32; b++) {
        const float d = fp16_to_f32(h16(0.013f * (b + 1)));
        for (int j = 0; j < 32; j++) x[32 * b + j] = d * (float)((int)(rng_u64() % 255) - 127);
        x[32 * b + 7] = (b & 1 ? -127 : 127) * d;
    }
    CHECK_EQ_INT(quant_quantize_row(DT_Q8_0, x, buf, N), 0);
    CHECK_EQ_INT(quant_dequant_row(DT_Q8_0, buf, y, N), 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* Q4_0 on its grid: the value of largest magnitude is -8d */
    for (int b = 0; b < N / 32; b++) {
        const float d = fp16_to_f32(h16(b & 1 ? -0.37f : 0.21f));
        for (int j = 0; j < 32; j++) x[32 * b + j] = d * (float)((int)(rng_u64() % 16) - 8);
        x[32 * b + 30] = -8 * d;
    }
    CHECK_EQ_INT(quant_quantize_row(DT_Q4_0, x, buf, N), 0);
    CHECK_EQ_INT(quant_dequant_row(DT_Q4_0, buf, y, N), 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* MXFP4 on its grid: E2M1 values times a power of two per block, one of
     * them 6 (tiny, normal and huge scales) */
    static const int exps[3] = {-126, 3, 100};
    for (int b = 0; b < N / 32; b++) {
        for (int j = 0; j < 32; j++) {
            const int c = (int)(rng_u64() % 16);
            x[32 * b + j] = ldexpf(quant_mxfp4_q2[c] * 0.5f, exps[b]);
        }
        x[32 * b + 9] = ldexpf(b & 1 ? -6.0f : 6.0f, exps[b]);
    }
    CHECK_EQ_INT(quant_quantize_row(DT_MXFP4, x, buf, N), 0);
    CHECK_EQ_INT(quant_dequant_row(DT_MXFP4, buf, y, N), 0);
    int mx_bad = 0;
    for (int i = 0; i < N; i++) mx_bad += x[i] != y[i]; /* -0 == 0 */
    CHECK_EQ_INT(mx_bad, 0);
    /* an all-zero row stays zero (no NaN from 0/0) */
    for (uint32_t t = 0; t < ARRAY_LEN(all_types); t++) {
        float z[512] = {0}, out[512];
        uint8_t q[2048];
        quant_quantize_row(all_types[t], z, q, 512);
        quant_dequant_row(all_types[t], q, out, 512);
        int bad = 0;
        for (int i = 0; i < 512; i++) bad += out[i] != 0.0f;
        CHECK_MSG(bad == 0, "type %s", dtype_name(all_types[t]));
    }
}

/* RMSE/RMS of quantise->dequantise over `rows` rows of n Gaussian values
 * (scaled by `scale`, shifted by `shift`). */
static double round_trip_rel_rmse(uint32_t type, int rows, int64_t n, float scale, float shift) {
    float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
    uint8_t *q = xmalloc(dtype_row_bytes(type, n));
    double se = 0, ss = 0;
    for (int r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) x[i] = rng_gauss() * scale + shift;
        CHECK_EQ_INT(quant_quantize_row(type, x, q, n), 0);
        CHECK_EQ_INT(quant_dequant_row(type, q, y, n), 0);
        for (int64_t i = 0; i < n; i++) {
            se += (double)(x[i] - y[i]) * (x[i] - y[i]);
            ss += (double)x[i] * x[i];
        }
    }
    free(x);
    free(y);
    free(q);
    return sqrt(se / ss);
}

#define MXFP4_BOUND 0.12
static void test_round_trip_error(void) {
    /* bounds: a little above the measured values documented in quant.c */
    static const struct { uint32_t type; double bound; } cases[] = {
        {DT_F16, 0.0004}, {DT_BF16, 0.0025}, {DT_Q8_0, 0.006}, {DT_Q8_K, 0.008}, {DT_Q6_K, 0.02},
        {DT_Q5_K, 0.04},  {DT_Q4_0, 0.095},  {DT_Q4_K, 0.078}, {DT_MXFP4, MXFP4_BOUND},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        double e = round_trip_rel_rmse(cases[c].type, 7, 768, 1.0f, 0.0f);
        printf("  %-5s N(0,1)   rmse/rms = %.5f\n", dtype_name(cases[c].type), e);
        CHECK_MSG(e < cases[c].bound, "%s: %g >= %g", dtype_name(cases[c].type), e, cases[c].bound);
        /* a tiny scale and a positive offset (mins in use) stay as accurate */
        double e2 = round_trip_rel_rmse(cases[c].type, 3, 512, 1e-3f, 0.0f);
        CHECK_MSG(e2 < cases[c].bound * 1.2, "%s small scale: %g", dtype_name(cases[c].type), e2);
        double e3 = round_trip_rel_rmse(cases[c].type, 3, 512, 1.0f, 2.5f);
        printf("  %-5s N(2.5,1) rmse/rms = %.5f\n", dtype_name(cases[c].type), e3);
        CHECK_MSG(e3 < cases[c].bound, "%s shifted: %g", dtype_name(cases[c].type), e3);
    }
    /* a row whose sub-blocks are constant is reproduced closely */
    float x[256], y[256];
    uint8_t q[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i / 32) - 3.0f;
    const uint32_t kt[] = {DT_Q4_K, DT_Q5_K, DT_Q6_K};
    for (int t = 0; t < 3; t++) {
        quant_quantize_row(kt[t], x, q, 256);
        quant_dequant_row(kt[t], q, y, 256);
        double m = 0;
        for (int i = 0; i < 256; i++) m = fmax(m, fabs(x[i] - y[i]));
        CHECK_MSG(m < 0.05, "%s constant sub-blocks: max err %g", dtype_name(kt[t]), m);
    }
}

/* ---- activation quantisers ---- */

static void test_act_q8_k(void) {
    enum { N = 512 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = rng_gauss() * (i < 256 ? 1.0f : 0.01f);
    block_q8_k a[N / 256];
    quant_row_q8_k(x, a, N);
    for (int b = 0; b < N / 256; b++) {
        float amax = 0;
        for (int j = 0; j < 256; j++) amax = fmaxf(amax, fabsf(x[256 * b + j]));
        CHECK_NEAR(a[b].d, amax / 127, amax * 1e-6);
        int bad = 0, top = 0;
        for (int j = 0; j < 256; j++) {
            bad += fabsf(x[256 * b + j] - a[b].d * a[b].qs[j]) > a[b].d * 0.5001f;
            top += abs(a[b].qs[j]) == 127;
        }
        CHECK_EQ_INT(bad, 0);
        CHECK(top >= 1);
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += a[b].qs[16 * g + j];
            CHECK_EQ_INT(a[b].bsums[g], s);
        }
    }
}

static void test_act_q8_0(void) {
    enum { N = 96 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = rng_gauss() * (float)(1 + i / 32);
    block_q8_0 a[N / 32];
    quant_row_q8_0(x, a, N);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const float d = fp16_to_f32(a[b].d);
        CHECK_NEAR(d, amax / 127, amax / 127 / 1024);
        int bad = 0;
        for (int j = 0; j < 32; j++) {
            /* q = round(x / (amax/127)); decoding with the f16 d adds at most 127*|d - d16| */
            bad += abs(a[b].qs[j] - (int)lround(x[32 * b + j] * 127 / amax)) > 0;
        }
        CHECK_EQ_INT(bad, 0);
    }
}

/* ---- dot products ---- */

/* For each weight type: the scalar dot of a quantised row with the converted
 * activation equals the double dot of the dequantised weight row and the
 * dequantised activation row (to float rounding), and differs from the dot
 * with the unquantised activations by no more than the activation rounding
 * allows: sum |w_i| * (max error of a_i). */
static void test_dots(void) {
    static const uint32_t wt[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_MXFP4};
    for (size_t t = 0; t < ARRAY_LEN(wt); t++) {
        const uint32_t type = wt[t];
        const int64_t n = (type == DT_F32 || type == DT_F16 || type == DT_BF16) ? 771 : 768;
        float *x = xmalloc(n * sizeof(float)), *wf = xmalloc(n * sizeof(float));
        float *wd = xmalloc(n * sizeof(float)), *ad = xmalloc(n * sizeof(float));
        uint8_t *w = xmalloc(dtype_row_bytes(type, n));
        uint8_t *a = xmalloc(kern_act_row_bytes(type, n) + 1);
        for (int rep = 0; rep < 5; rep++) {
            for (int64_t i = 0; i < n; i++) {
                wf[i] = rng_gauss() * 0.1f + (rep == 4 ? 0.05f : 0.0f);
                x[i] = rng_gauss() * (rep == 3 ? 100.0f : 1.0f);
            }
            CHECK_EQ_INT(quant_quantize_row(type, wf, w, n), 0);
            CHECK_EQ_INT(quant_dequant_row(type, w, wd, n), 0);
            const uint32_t at = kern_act_type(type);
            const void *arow = x;
            if (kern_scalar_ops.act[type]) {
                kern_scalar_ops.act[type](x, a, n);
                CHECK_EQ_INT(quant_dequant_row(at, a, ad, n), 0);
                arow = a;
            } else {
                CHECK_EQ_INT(at, DT_F32);
                memcpy(ad, x, n * sizeof(float));
            }
            float got = 0;
            kern_scalar_ops.dot[type](n, &got, w, arow);
            double ref = 0, mag = 0, ref_x = 0, act_bound = 0;
            const int blk = at == DT_Q8_0 ? 32 : at == DT_Q8_K ? 256 : 1;
            for (int64_t b = 0; b < n; b += blk) {
                double amax = 0;
                for (int j = 0; j < blk; j++) amax = fmax(amax, fabs(x[b + j]));
                /* Q8_0: |x - d16*q| <= d/2 + 127*|d - d16| <= d*(0.5 + 127/2048) */
                const double e = at == DT_Q8_0 ? amax / 127 * 0.563 : at == DT_Q8_K ? amax / 127 * 0.5001 : 0;
                for (int j = 0; j < blk; j++) act_bound += fabs(wd[b + j]) * e;
            }
            for (int64_t i = 0; i < n; i++) {
                ref += (double)wd[i] * ad[i];
                mag += fabs((double)wd[i] * ad[i]);
                ref_x += (double)wd[i] * x[i];
            }
            CHECK_MSG(fabs(got - ref) <= 2e-6 * mag + 1e-30, "%s rep %d: %.9g vs %.9g", dtype_name(type), rep,
                      got, ref);
            CHECK_MSG(fabs(got - ref_x) <= act_bound + 2e-6 * mag + 1e-30, "%s rep %d vs x: %.9g vs %.9g (bound %g)",
                      dtype_name(type), rep, got, ref_x, act_bound);
        }
        free(x), free(wf), free(wd), free(ad), free(w), free(a);
    }
}

/* Non-finite inputs never reach undefined float-to-int conversions (UBSan
 * checks this) and a NaN activation makes the dot product NaN rather than
 * silently vanishing. */
static void test_nonfinite(void) {
    static const uint32_t wt[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_MXFP4};
    const float specials[] = {NAN, INFINITY, -INFINITY, 3e38f};
    for (size_t t = 0; t < ARRAY_LEN(wt); t++)
        for (size_t k = 0; k < ARRAY_LEN(specials); k++) {
            float x[512], y[512];
            uint8_t w[2048], a[2048];
            for (int i = 0; i < 512; i++) x[i] = rng_gauss();
            x[77] = specials[k];
            CHECK_EQ_INT(quant_quantize_row(wt[t], x, w, 512), 0);
            CHECK_EQ_INT(quant_dequant_row(wt[t], w, y, 512), 0);
            for (int i = 0; i < 512; i++) x[i] = rng_gauss();
            CHECK_EQ_INT(quant_quantize_row(wt[t], x, w, 512), 0);
            x[300] = specials[k];
            kern_scalar_ops.act[wt[t]](x, a, 512);
            float d = 0;
            kern_scalar_ops.dot[wt[t]](512, &d, w, a);
            if (isnan(specials[k])) CHECK_MSG(isnan(d), "%s: NaN activation gave %g", dtype_name(wt[t]), d);
        }
}

/* The type table against the GGUF layouts written out here (bytes per
 * block as the format defines them) and the pairing of weight and
 * activation types the kernels use. */
static void test_type_table(void) {
    static const struct {
        uint32_t t;
        int blck, bytes;
        bool load, convert;
        uint32_t act;
    } want[] = {
        {DT_F32, 1, 4, true, true, DT_F32},        {DT_F16, 1, 2, true, true, DT_F32},
        {DT_BF16, 1, 2, true, true, DT_F32},       {DT_Q4_0, 32, 2 + 16, true, true, DT_Q8_0},
        {DT_Q8_0, 32, 2 + 32, true, true, DT_Q8_0}, {DT_Q4_K, 256, 4 + 12 + 128, true, true, DT_Q8_K},
        {DT_Q5_K, 256, 4 + 12 + 32 + 128, true, true, DT_Q8_K},
        {DT_Q6_K, 256, 128 + 64 + 16 + 2, true, true, DT_Q8_K},
        {DT_Q8_K, 256, 4 + 256 + 32, false, true, DT_COUNT},
        {DT_MXFP4, 32, 1 + 16, true, true, DT_Q8_0},
        {DT_Q4_1, 32, 20, false, false, DT_COUNT},  {DT_Q3_K, 256, 110, false, false, DT_COUNT},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const dtype_info *d = dtype_get(want[i].t);
        CHECK_MSG(d && d->blck == want[i].blck && d->type_size == want[i].bytes, "%s: block %d, %d bytes",
                  dtype_name(want[i].t), d ? d->blck : -1, d ? d->type_size : -1);
        CHECK_MSG(d && d->supported == want[i].load, "%s: loadable", dtype_name(want[i].t));
        CHECK_MSG(quant_supported(want[i].t) == want[i].convert, "%s: convert", dtype_name(want[i].t));
        CHECK_MSG(kern_act_type(want[i].t) == want[i].act, "%s: activation type", dtype_name(want[i].t));
    }
    CHECK(dtype_get(DT_COUNT) == NULL && kern_act_type(DT_COUNT) == DT_COUNT);
    /* Every row: both converters or neither; a loadable type converts (the
     * loader dequantises its vectors), has an activation format, and has a
     * scalar dot product (an activation converter unless it takes f32 rows);
     * a type that does not load has no dot product. */
    for (uint32_t t = 0; t < DT_COUNT; t++) {
        const dtype_info *d = dtype_get(t);
        if (!d) {
            CHECK_MSG(!kern_scalar_ops.dot[t] && !kern_scalar_ops.act[t], "type %u: kernels for an unknown type", t);
            continue;
        }
        CHECK_MSG((d->to_f32 == NULL) == (d->from_f32 == NULL), "%s: one converter without the other", d->name);
        CHECK_MSG(quant_supported(t) == (d->to_f32 != NULL), "%s: quant_supported", d->name);
        CHECK_MSG((kern_scalar_ops.dot[t] != NULL) == d->supported, "%s: scalar dot product", d->name);
        if (!d->supported) continue;
        CHECK_MSG(d->to_f32 && d->act_type != DT_COUNT, "%s: loadable but no converter or activation type", d->name);
        CHECK_MSG((kern_scalar_ops.act[t] != NULL) == (d->act_type != DT_F32), "%s: scalar activation converter",
                  d->name);
        const dtype_info *a = dtype_get(d->act_type);
        CHECK_MSG(a && a->from_f32, "%s: activation type %s converts", d->name, dtype_name(d->act_type));
    }
}

int main(void) {
    test_type_table();
    test_q8_0_block();
    test_q4_0_block();
    test_mxfp4_block();
    test_q4_k_block();
    test_q5_k_block();
    test_q6_k_block();
    test_q8_k_block();
    test_halves();
    test_args();
    test_garbage();
    test_exact_round_trips();
    test_round_trip_error();
    test_act_q8_k();
    test_act_q8_0();
    test_dots();
    test_nonfinite();
    return test_summary("test_quant");
}
