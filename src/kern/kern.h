/*
 * kern.h — the compute kernels of a forward pass and their run-time dispatch.
 *
 * Place in the flow: kern/ sits under model/. model_forward calls these; they
 * call nothing above base/.
 *
 * Every kernel has a scalar reference (kern/scalar.c, always compiled) and
 * may have SIMD versions in their own files (kern/avx2.c, kern/avx512.c),
 * chosen once at start by kern_init from the CPU's features, or forced with
 * KVLOOM_KERNELS=scalar|avx2|avx512 (tests run every path).
 *
 * Matrix products: a weight matrix W (n_out rows of n_in elements, type t) is
 * multiplied by a batch of activation rows X (n_tok x n_in, f32):
 *     Y[i][r] = dot(W[r], X[i])
 * Quantised types first convert X rows to the type's activation format
 * (kern_act_type: Q8_0 blocks for Q4_0/Q8_0, Q8_K for K-quants) and then take
 * integer dot products block by block. F32, F16 and BF16 weights use the f32
 * rows of X as they are (F16/BF16 weights are widened exactly inside the dot
 * product). The formats are the same for every table, so any table's
 * converter feeds any table's dot product.
 *
 * Batch invariance: Y[i][r] depends only on W[r] and X[i] — never on n_tok,
 * on i, or on the thread count — because every path reduces each dot product
 * in the same fixed order. This is what lets a cached prefix produce the same
 * tokens as an uncached one. (Different tables may differ from each other in
 * the last bits; one process uses one table.)
 *
 * Thread: kernels run on pool workers inside one forward call; they allocate
 * nothing (scratch comes from the caller).
 */
#ifndef KVLOOM_KERN_H
#define KVLOOM_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "../base/pool.h"
#include "attn.h"
#include "types.h"

/* A weight matrix view into the mapped file. */
typedef struct kern_mat {
    uint32_t type;    /* dtype of the rows                      */
    int64_t n_in;     /* elements per row (dims[0])             */
    int64_t n_out;    /* rows (dims[1])                         */
    size_t row_bytes; /* dtype_row_bytes(type, n_in)            */
    const void *data; /* n_out * row_bytes bytes                */
} kern_mat;

/* Dot product of one weight row (n elements of the weight type) with one
 * activation row in that type's activation format; writes the result to *s.
 * The reduction order must depend on n only. */
typedef void (*kern_dot_fn)(int64_t n, float *s, const void *w, const void *a);
/* Converts n floats (a multiple of the activation block size) to the
 * activation format. Blocks are independent, so a row may be converted in
 * pieces. NULL in a table's act[] entry: the activations are the f32 rows. */
typedef void (*kern_act_fn)(const float *x, void *a, int64_t n);
/* Computes Y[t][r] for r in [r0, r1) and t in [0, n_tok) from the converted
 * activation rows act + t*act_row_bytes; y points at Y[0][0] and has row
 * stride ldy floats. r0 is a multiple of 8. Each element must be bitwise
 * equal to the same table's dot[] for that row and token, whatever r0, r1
 * or n_tok (batch invariance). Optional: NULL means "one dot per (row,
 * token)". */
typedef void (*kern_gemm_fn)(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes,
                             int n_tok, float *y, int64_t ldy);

typedef struct kern_ops {
    const char *name;                   /* "scalar", "avx2", "avx512", ... */
    kern_dot_fn dot[DT_COUNT];          /* by weight type                  */
    kern_act_fn act[DT_COUNT];          /* by weight type                  */
    kern_gemm_fn gemm[DT_COUNT];        /* by weight type, may be NULL     */
    attn_part_fn attn_part;             /* one attention chunk (attn.h)    */
    attn_part_fn attn_part_q8;          /* the same over a q8_0 cache      */
    void (*swiglu)(float *gate, const float *up, int n); /* kern_swiglu     */
    void (*f16_store)(uint16_t *dst, size_t stride, const float *x, int n); /* kern_f16_store */
} kern_ops;

/* The table in use (set by kern_init; the scalar table before that). It is
 * a merged copy of the chosen table whose NULL dot/act entries are filled
 * from the scalar table, so dot[t] is non-NULL for every supported t. */
extern const kern_ops *kern;
/* The scalar reference table, always available. */
extern const kern_ops kern_scalar_ops;

/* Chooses the table named by `force` ("scalar", "avx2", ...) when not NULL,
 * else by $KVLOOM_KERNELS when set, else (or for "auto") the best table this
 * CPU can run. Returns 0; ERR_NOTFOUND when a forced table is not compiled
 * in, ERR_UNSUPPORTED when the CPU lacks its features (the previous table
 * stays in use; an error is logged). Call once at start, before kernels run. */
int kern_init(const char *force);
/* Writes the names of the tables this CPU can run, scalar first and best
 * last, into names[0..cap) and returns how many there are (for tests). */
int kern_available(const char **names, int cap);
/* Selects a table by name (tests, kern_init). Returns 0, ERR_NOTFOUND or
 * ERR_UNSUPPORTED as kern_init. Not while kernels run. */
int kern_select(const char *name);

/* Bytes the kernels hold now in per-thread buffers: the AVX-512 table's
 * prepared gemms map ~1 MiB at a thread's first use and unmap it when the
 * thread ends (0 with the other tables). For the memory accounting. */
size_t kern_thread_buffer_bytes(void);

/* Activation format for a weight type: DT_F32 for F32/F16/BF16, DT_Q8_0 for
 * Q8_0/Q4_0/MXFP4, DT_Q8_K for Q4_K/Q5_K/Q6_K, DT_COUNT for a type we cannot
 * multiply. */
uint32_t kern_act_type(uint32_t wtype);
/* Bytes of one activation row of n elements for weights of `wtype` (0 when
 * unsupported or n is not a multiple of the activation block). */
size_t kern_act_row_bytes(uint32_t wtype, int64_t n);

/* Y = X W^T for n_tok rows: x (n_tok, w->n_in), y (n_tok, w->n_out), both
 * dense row-major. act_buf holds at least
 * n_tok * kern_act_row_bytes(w->type, w->n_in) bytes (may be NULL when the
 * activation type is DT_F32); its contents are scratch. Parallel over the
 * pool (p may be NULL); call from the pool's owner thread. The weight type
 * must be one kern_act_type accepts (the loader checks; a bug otherwise). */
void kern_matmul(pool *p, const kern_mat *w, const float *x, int n_tok, float *y, void *act_buf);
/* kern_matmul for n_w (1..4) matrices that take the same input x: ys[i] =
 * x ws[i]^T. When the matrices share n_in and activation format, x is
 * converted once and all rows run in one pool dispatch; otherwise this is
 * n_w kern_matmul calls. Each output is bitwise what kern_matmul gives. */
void kern_matmul_multi(pool *p, const kern_mat *const *ws, int n_w, const float *x, int n_tok, float *const *ys,
                       void *act_buf);

/* The building block of both: Y[t][r] for rows [r0, r1) of w (r0 a multiple
 * of 8) and n_tok activation rows already in w's activation format (act +
 * t*act_row_bytes; the f32 rows themselves when kern_act_type is DT_F32),
 * written to y + t*ldy + r. Runs on the calling thread; each element is
 * bitwise what kern_matmul gives for that row and activation row. For
 * callers that schedule their own work over the pool (model/moe.c: one
 * matrix per expert over the tokens routed to it). */
void kern_matmul_rows(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes, int n_tok,
                      float *y, int64_t ldy);

/* ---- small vector ops (scalar; cheap next to the matmuls) ---- */
/* out = x / sqrt(mean(x^2) + eps) * w  (w may be NULL for no weight); out
 * may equal x. The sum of squares is taken in double, in index order. */
void kern_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* kern_rmsnorm of `rows` rows at x + r*stride into out + r*stride, each
 * bitwise what kern_rmsnorm gives it: rows go four at a time, their sums'
 * chains side by side (one row's sum in double, in order, is a chain of
 * dependent adds: at n_embd 64 its latency, not its arithmetic, was a
 * verification step's norms). */
void kern_rmsnorm_rows(float *out, const float *x, size_t stride, const float *w, int n, float eps, int rows);
/* In place: x = silu(gate) * up, n elements, written into gate (through the
 * table: the SIMD tables use a polynomial e^x, relative error ~1e-6; each
 * element depends only on its own gate and up, so batch invariance holds). */
void kern_swiglu(float *gate, const float *up, int n);
/* dst[i * stride] = f32_to_fp16(x[i]) for i < n, bitwise (round to nearest
 * even; NaN as f32_to_fp16 writes it): the f16 KV cache's writes (through
 * the table: the x86 tables convert 8 at a time with F16C, which rounds
 * every non-NaN value as f32_to_fp16 does, and hand a run holding a NaN to
 * f32_to_fp16). */
void kern_f16_store(uint16_t *dst, size_t stride, const float *x, int n);
/* In place, max-subtracted; the normaliser is summed in double, in order. */
void kern_softmax(float *x, int n);

#endif
