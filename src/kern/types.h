/*
 * types.h — the tensor element types of GGUF files and their block geometry.
 *
 * Place in the flow: bottom (kern/). The GGUF reader uses it to size tensor
 * data; kernels use it to pick a dot product; the loader uses
 * `dtype_supported` to reject files we cannot run.
 *
 * Quantised types store elements in blocks: `blck` elements take `type_size`
 * bytes. A row of n elements (n a multiple of blck) takes n/blck*type_size.
 * The numeric values are those of the GGUF format (ggml_type) and never change.
 */
#ifndef KVLOOM_KERN_TYPES_H
#define KVLOOM_KERN_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum dtype {
    DT_F32 = 0,
    DT_F16 = 1,
    DT_Q4_0 = 2,
    DT_Q4_1 = 3,
    DT_Q5_0 = 6,
    DT_Q5_1 = 7,
    DT_Q8_0 = 8,
    DT_Q8_1 = 9,
    DT_Q2_K = 10,
    DT_Q3_K = 11,
    DT_Q4_K = 12,
    DT_Q5_K = 13,
    DT_Q6_K = 14,
    DT_Q8_K = 15,
    DT_IQ2_XXS = 16,
    DT_IQ2_XS = 17,
    DT_IQ3_XXS = 18,
    DT_IQ1_S = 19,
    DT_IQ4_NL = 20,
    DT_IQ3_S = 21,
    DT_IQ2_S = 22,
    DT_IQ4_XS = 23,
    DT_I8 = 24,
    DT_I16 = 25,
    DT_I32 = 26,
    DT_I64 = 27,
    DT_F64 = 28,
    DT_IQ1_M = 29,
    DT_BF16 = 30,
    DT_TQ1_0 = 34,
    DT_TQ2_0 = 35,
    DT_COUNT = 40 /* table size; values >= DT_COUNT are unknown */
} dtype;

typedef struct dtype_info {
    const char *name; /* "Q4_K"; NULL for a value no GGUF type uses      */
    int blck;         /* elements per block (1 for plain types)          */
    int type_size;    /* bytes per block                                 */
    bool supported;   /* kvloom can load weights of this type            */
    bool convert;     /* quant.c converts rows to and from F32            */
    uint32_t act_type;/* what its dot products take as the activation row
                         (kern_act_type); DT_COUNT: not a weight type     */
} dtype_info;

/* Returns the row for `t`, or NULL when `t` is not a known GGUF type. */
const dtype_info *dtype_get(uint32_t t);
/* Name of `t`, or "unknown" */
const char *dtype_name(uint32_t t);
/* Parses a name such as "q4_k" or "F16" (case-insensitive); -1 if unknown. */
int dtype_from_name(const char *name);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or `t` is unknown. */
size_t dtype_row_bytes(uint32_t t, int64_t n);

#endif
