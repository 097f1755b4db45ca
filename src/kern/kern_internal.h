/*
 * kern_internal.h — names shared by the files of src/kern/ and by no one
 * else: the per-type row converters of quant.c that the type table (types.c)
 * points at, and the SIMD tables that kern.c dispatches to. Not for use
 * outside src/kern/ (everyone else converts through quant_dequant_row /
 * quant_quantize_row, which check their arguments, and multiplies through
 * kern_matmul).
 *
 * Cross-file private names of kern/ carry the kern__ prefix (as tok__ in
 * src/tok/ and jinja__ in src/chat/); the public API (kern.h, quant.h,
 * types.h, attn.h) has one underscore.
 *
 * Each converter takes n elements, n a multiple of the type's block size
 * (the caller checked it), and the row of dtype_row_bytes(type, n) bytes.
 * Pure, thread-safe.
 */
#ifndef KVLOOM_KERN_INTERNAL_H
#define KVLOOM_KERN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kern.h"

/* The SIMD tables (avx2.c, avx512.c, built from x86_body.h), defined only
 * when the Makefile compiles their files (KVLOOM_KERN_AVX2/AVX512). */
extern const kern_ops kern__avx2_ops;
extern const kern_ops kern__avx512_ops;

/* What kern_thread_buffer_bytes reports: the SIMD tables add and subtract
 * the bytes of the per-thread buffers they map and unmap. */
extern _Atomic size_t kern__buffer_bytes;

/* to_f32: a row of the type -> n floats (every bit pattern decodes). */
void kern__dequant_row_f32(const void *src, float *dst, int64_t n);
void kern__dequant_row_f16(const void *src, float *dst, int64_t n);
void kern__dequant_row_bf16(const void *src, float *dst, int64_t n);
void kern__dequant_row_q8_0(const void *src, float *dst, int64_t n);
void kern__dequant_row_q4_0(const void *src, float *dst, int64_t n);
void kern__dequant_row_q4_k(const void *src, float *dst, int64_t n);
void kern__dequant_row_q5_k(const void *src, float *dst, int64_t n);
void kern__dequant_row_q6_k(const void *src, float *dst, int64_t n);
void kern__dequant_row_q8_k(const void *src, float *dst, int64_t n);
void kern__dequant_row_mxfp4(const void *src, float *dst, int64_t n);

/* from_f32: n floats -> a row of the type (Q8_0 and Q8_K use the public
 * activation quantisers of quant.h, quant_row_q8_0 and quant_row_q8_k). */
void kern__quant_row_f32(const float *src, void *dst, int64_t n);
void kern__quant_row_f16(const float *src, void *dst, int64_t n);
void kern__quant_row_bf16(const float *src, void *dst, int64_t n);
void kern__quant_row_q4_0(const float *src, void *dst, int64_t n);
void kern__quant_row_q4_k(const float *src, void *dst, int64_t n);
void kern__quant_row_q5_k(const float *src, void *dst, int64_t n);
void kern__quant_row_q6_k(const float *src, void *dst, int64_t n);
void kern__quant_row_mxfp4(const float *src, void *dst, int64_t n);

#endif
