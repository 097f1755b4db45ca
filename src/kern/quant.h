/*
 * quant.h — the GGUF quantisation block formats we compute with, and the
 * reference conversions between them and f32.
 *
 * Place in the flow: kern/, under model/. The loader dequantises nothing (the
 * kernels read blocks in place from the mapped file); `kvloom quantize`, the
 * random-model generator and the tests use the row conversions below, and the
 * scalar kernels (scalar.c) use the block structs and the activation
 * quantisers.
 *
 * Layouts are exactly those of ggml (ggml-common.h), byte for byte, because the
 * blocks are read straight out of GGUF files written by llama.cpp. Every
 * struct's size is pinned with a static_assert. Scales stored as IEEE half
 * are kept as raw uint16_t bits (ggml_half) and decoded with fp16_to_f32
 * (base.h, the program's one half decoder).
 *
 *   Q8_0 (32 elements, 34 B)   d:f16 | qs[32]:i8                 x = d*q
 *   Q4_0 (32 elements, 18 B)   d:f16 | qs[16]:u8
 *        element j (j<16) is (qs[j] & 15) - 8, element j+16 is (qs[j] >> 4) - 8;
 *        x = d*q.
 *   Q4_K (256 elements, 144 B) d:f16 | dmin:f16 | scales[12] | qs[128]
 *        8 sub-blocks of 32; sub-block k has a 6-bit scale sc[k] and 6-bit
 *        min m[k] packed into scales[12]:
 *          k < 4:  sc = scales[k] & 63,            m = scales[k+4] & 63
 *          k >= 4: sc = (scales[k+4] & 15) | (scales[k-4] >> 6) << 4
 *                  m  = (scales[k+4] >> 4) | (scales[k]   >> 6) << 4
 *        element 32k+l (l<32) is the nibble of qs[32*(k/2)+l] (low nibble for
 *        even k, high for odd k); x = (d*sc)*q - dmin*m.
 *   Q5_K (256 elements, 176 B) d | dmin | scales[12] | qh[32] | qs[128]
 *        as Q4_K, plus bit k of qh[l] is bit 4 of element 32k+l (q in 0..31).
 *   Q6_K (256 elements, 210 B) ql[128] | qh[64] | scales[16]:i8 | d:f16
 *        two halves of 128; in half h element 128h+32s+l (s<4, l<32) takes
 *        its low 4 bits from ql[64h+l] (s=0 low nibble, s=2 high nibble) or
 *        ql[64h+32+l] (s=1 low, s=3 high), its high 2 bits from bits 2s..2s+1
 *        of qh[32h+l]; q = that 6-bit value - 32; element e has scale
 *        scales[e/16]; x = (d*scale)*q.
 *   Q8_K (256 elements, 292 B) d:f32 | qs[256]:i8 | bsums[16]:i16
 *        activations only: x = d*q; bsums[g] = sum of qs[16g..16g+15].
 *   MXFP4 (32 elements, 17 B)  e:u8 | qs[16]:u8   (GGUF type 39; OCP MX)
 *        e is an E8M0 scale, 2^(e-127) (no sign, no mantissa); each nibble
 *        is an E2M1 float: bit 3 sign, bits 2..1 exponent, bit 0 mantissa,
 *        magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6. Element j (j<16) is the low
 *        nibble of qs[j], element j+16 the high nibble (Q4_0's order);
 *        x = E2M1(q) * 2^(e-127). Computed as ggml does: the doubled value
 *        (an integer, quant_mxfp4_q2) times 2^(e-128), both exact in float,
 *        so every block decodes to exactly its defined value. e = 255 (NaN
 *        in the OCP spec) decodes as a scale of 2^128 like ggml, since llama.cpp reads
 *        such files that way.
 *
 * Alignment: a block of these types may be read through its struct, so weight
 * data must sit at 2-byte aligned addresses (4 for F32 and Q8_K); GGUF aligns
 * tensor data to general.alignment (32 by default).
 *
 * Threads: every function here is pure and may be called from any thread.
 */
#ifndef KVLOOM_KERN_QUANT_H
#define KVLOOM_KERN_QUANT_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "types.h"

#define QK8_0 32
#define QK4_0 32
#define QK_K 256
#define QK_K_SCALE_BYTES 12
#define QK_MXFP4 32

typedef struct block_q8_0 {
    uint16_t d;       /* f16 scale        */
    int8_t qs[QK8_0]; /* quants           */
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 must be 34 bytes");

typedef struct block_q4_0 {
    uint16_t d;            /* f16 scale                                */
    uint8_t qs[QK4_0 / 2]; /* nibbles: j in low, j+16 in high of qs[j] */
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must be 18 bytes");

typedef struct block_q4_k {
    uint16_t d;                        /* f16 super-scale of the sub-block scales */
    uint16_t dmin;                     /* f16 super-scale of the sub-block mins   */
    uint8_t scales[QK_K_SCALE_BYTES];  /* 8 scales + 8 mins, 6 bits each          */
    uint8_t qs[QK_K / 2];              /* nibbles                                 */
} block_q4_k;
static_assert(sizeof(block_q4_k) == 144, "block_q4_k must be 144 bytes");

typedef struct block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[QK_K_SCALE_BYTES];
    uint8_t qh[QK_K / 8]; /* bit k of qh[l]: high bit of element 32k+l */
    uint8_t qs[QK_K / 2]; /* low nibbles, as Q4_K                      */
} block_q5_k;
static_assert(sizeof(block_q5_k) == 176, "block_q5_k must be 176 bytes");

typedef struct block_q6_k {
    uint8_t ql[QK_K / 2];     /* low 4 bits                  */
    uint8_t qh[QK_K / 4];     /* high 2 bits                 */
    int8_t scales[QK_K / 16]; /* one per 16 elements         */
    uint16_t d;               /* f16 super-scale             */
} block_q6_k;
static_assert(sizeof(block_q6_k) == 210, "block_q6_k must be 210 bytes");

typedef struct block_q8_k {
    float d;                  /* f32 scale                   */
    int8_t qs[QK_K];          /* quants                      */
    int16_t bsums[QK_K / 16]; /* sums of groups of 16 quants */
} block_q8_k;
static_assert(sizeof(block_q8_k) == 292, "block_q8_k must be 292 bytes");

typedef struct block_mxfp4 {
    uint8_t e;                /* E8M0 scale: 2^(e-127)                    */
    uint8_t qs[QK_MXFP4 / 2]; /* E2M1 nibbles: j low, j+16 high of qs[j]  */
} block_mxfp4;
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 must be 17 bytes");

/* Twice the E2M1 value of each nibble (integers -12..12), indexed by the
 * nibble: the dot products multiply these by int8 activations exactly. */
extern const int8_t quant_mxfp4_q2[16];

/* Half the E8M0 scale, 2^(e-128), as a float built from its bits (exact for
 * every e: e 0 and 1 are the subnormals 2^-128 and 2^-127). The scale the
 * doubled values of quant_mxfp4_q2 take. */
static inline float quant_mxfp4_half_scale(uint8_t e) {
    const uint32_t bits = e < 2 ? (uint32_t)0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Unpacks the 6-bit scale and min of sub-block k (0..7) of a Q4_K/Q5_K block
 * from its 12 packed bytes. */
static inline void quant_k_scale_min(const uint8_t *scales, int k, uint8_t *sc, uint8_t *m) {
    if (k < 4) {
        *sc = scales[k] & 63;
        *m = scales[k + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[k + 4] & 15) | ((scales[k - 4] >> 6) << 4));
        *m = (uint8_t)((scales[k + 4] >> 4) | ((scales[k] >> 6) << 4));
    }
}

/* True when quant_dequant_row / quant_quantize_row handle `type`: its row of
 * the type table (types.c) names both converters. Today F32, F16, BF16, Q8_0,
 * Q4_0, Q4_K, Q5_K, Q6_K, Q8_K and MXFP4. */
bool quant_supported(uint32_t type);

/* Converts one row of n elements of `type` (dtype_row_bytes(type, n) bytes at
 * src) to n floats at dst. The bytes may come from any file: every bit pattern
 * decodes to some float (NaN/inf included) and nothing is read past the row.
 * Returns 0, ERR_UNSUPPORTED for a type outside quant_supported, or ERR_INVALID
 * when n is negative or not a multiple of the type's block size. */
int quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Converts n floats to one row of `type` (dtype_row_bytes(type, n) bytes).
 * Q8_0: d = max|x|/127, q = round(x/d). Q4_0: d = (signed value of largest
 * magnitude)/-8, q = round(x/d)+8 clamped to 0..15. Q8_K: d = max|x|/127.
 * Q4_K/Q5_K/Q6_K: a per-sub-block search of scale (and min) followed by
 * 6-bit (8-bit for Q6_K) quantisation of the sub-block scales; see quant.c
 * for the error this gives. MXFP4: per block the shared exponent that fits
 * the largest magnitude in 6 (and the one below it, which clips that value
 * but halves the step), each element rounded to the nearest E2M1 value
 * (ties to even mantissa), keeping the exponent with the smaller squared
 * error. Inputs should be finite. Same return values as
 * quant_dequant_row. */
int quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* The activation quantisers (y: n/32 block_q8_0, or n/256 block_q8_k),
 * exported for the kernel tables; they are also the Q8_0 and Q8_K rows'
 * from_f32 in the type table, and have the kern_act_fn signature. n must be
 * a multiple of the block size (the caller guarantees it; not checked). */
void quant_row_q8_0(const float *x, void *y, int64_t n);
void quant_row_q8_k(const float *x, void *y, int64_t n);

#endif
