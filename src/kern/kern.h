/*
 * kern.h — the compute kernels of a forward pass and their run-time dispatch.
 *
 * Place in the flow: kern/ sits under model/. model_forward calls these; they
 * call nothing above base/.
 *
 * Every kernel has a scalar reference (kern/scalar.c, always compiled) and
 * may have SIMD versions in their own files (kern/avx2.c, kern/avx512.c,
 * kern/neon.c), chosen once at start by kern_init from the CPU's features, or
 * forced with KVLOOM_KERNELS=scalar|avx2|avx512|neon (tests run every path).
 *
 * Matrix products: a weight matrix W (n_out rows of n_in elements, type t) is
 * multiplied by a batch of activation rows X (n_tok x n_in, f32):
 *     Y[i][r] = dot(W[r], X[i])
 * Quantised types first convert X rows to the type's activation format
 * (kern_act_type: Q8_0 blocks for Q4_0/Q8_0, Q8_K for K-quants, F32/F16/BF16
 * rows otherwise) and then take integer dot products block by block.
 *
 * Batch invariance: Y[i][r] depends only on W[r] and X[i] — never on n_tok,
 * on i, or on the thread count — because every path reduces each dot product
 * in the same fixed order. This is what lets a cached prefix produce the same
 * tokens as an uncached one.
 *
 * Thread: kernels run on pool workers inside one forward call; they allocate
 * nothing (scratch comes from the caller).
 */
#ifndef KVLOOM_KERN_H
#define KVLOOM_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "../base/pool.h"
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
 * activation row in that type's activation format. */
typedef void (*kern_dot_fn)(int64_t n, float *s, const void *w, const void *a);
/* Converts n floats to the activation format. */
typedef void (*kern_act_fn)(const float *x, void *a, int64_t n);
/* Computes Y rows [r0, r1) for all n_tok activation rows (already converted).
 * y has row stride ldy floats. Optional: NULL means "loop over dot". */
typedef void (*kern_gemm_fn)(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes,
                             int n_tok, float *y, int64_t ldy);

typedef struct kern_ops {
    const char *name;                   /* "scalar", "avx2", "avx512", ... */
    kern_dot_fn dot[DT_COUNT];          /* by weight type                  */
    kern_act_fn act[DT_COUNT];          /* by weight type                  */
    kern_gemm_fn gemm[DT_COUNT];        /* by weight type, may be NULL     */
} kern_ops;

/* The table in use (set by kern_init; the scalar table before that). */
extern const kern_ops *kern;
/* The scalar reference table, always available. */
extern const kern_ops kern_scalar_ops;

/* Chooses the best table for this CPU, or `force` ("scalar", "avx2", ...)
 * when not NULL, else $KVLOOM_KERNELS. Returns 0, or <0 when a forced path
 * is not available on this CPU or not compiled in. Call once at start. */
int kern_init(const char *force);
/* Names of the tables this CPU can run, best last (for tests). */
int kern_available(const char **names, int cap);
/* Selects a table by name (tests). Returns 0 or <0 if unavailable. */
int kern_select(const char *name);

/* Activation format for a weight type, and the bytes of one converted row. */
uint32_t kern_act_type(uint32_t wtype);
size_t kern_act_row_bytes(uint32_t wtype, int64_t n);

/* Y = X W^T for n_tok rows: x (n_tok, w->n_in), y (n_tok, w->n_out).
 * act_buf holds at least n_tok * kern_act_row_bytes(w->type, w->n_in) bytes
 * (may be NULL for F32 weights). Parallel over the pool. */
void kern_matmul(pool *p, const kern_mat *w, const float *x, int n_tok, float *y, void *act_buf);

/* ---- small vector ops (scalar; cheap next to the matmuls) ---- */
/* out = x / rms(x) * w  (w may be NULL for no weight) */
void kern_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* In place: x = silu(gate) * up, n elements, written into gate. */
void kern_swiglu(float *gate, const float *up, int n);
void kern_softmax(float *x, int n);

#endif
