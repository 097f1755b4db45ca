/*
 * types.h — the tensor element types of GGUF files and their block geometry.
 *
 * Place in the flow: bottom (kern/). The GGUF reader uses it to size tensor
 * data; kernels use it to pick a dot product; the loader rejects a weight
 * matrix whose row is not `supported` (model.c's load_mat) and a vector that
 * does not convert (quant_supported).
 *
 * Quantised types store elements in blocks: `blck` elements take `type_size`
 * bytes. A row of n elements (n a multiple of blck) takes n/blck*type_size.
 * The numeric values are those of the GGUF format (ggml_type) and never change.
 *
 * The type table (types.c, in the spirit of ggml's type traits) is the one
 * place that says what kvloom does with a type: its block geometry (from
 * quant.h's structs, pinned by their static_asserts), whether models of it
 * load (`supported`), the activation format of its dot products
 * (`act_type`), and its row converters to and from f32 (`to_f32`,
 * `from_f32`, defined in quant.c). A type converts exactly when its row
 * names both converters (there is no separate flag to disagree with them);
 * quant_dequant_row / quant_quantize_row call them. Adding a type: its row
 * here, its block struct in quant.h, its converters in quant.c, and — if it
 * loads — a dot product in scalar.c.
 *
 * Decision: the dot products, activation converters and gemms stay in the
 * per-ISA tables (kern_ops in scalar.c, avx2.c, avx512.c, indexed by the same
 * dtype) instead of columns here. A type has one layout and one pair of
 * reference converters but a dot product per instruction set; each ISA file
 * is compiled with its own -m flags and only when the Makefile selects it, so
 * a column here could not name their functions without #ifs, and kern.c must
 * be able to swap the whole set at once (kern_select). The table still
 * decides which types have kernels: `supported` means "the scalar table has a
 * dot product for it" (and an activation converter unless act_type is F32).
 * kern.c asserts this whenever it installs a table, and test_quant checks it
 * type by type, so the two cannot drift apart.
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
    DT_MXFP4 = 39,
    DT_COUNT = 40 /* table size; values >= DT_COUNT are unknown */
} dtype;

/* One row of n elements (a multiple of the block size, checked by the
 * caller) to n floats, and back (kern_internal.h names them). */
typedef void (*dtype_to_f32_fn)(const void *src, float *dst, int64_t n);
typedef void (*dtype_from_f32_fn)(const float *src, void *dst, int64_t n);

typedef struct dtype_info {
    const char *name; /* "Q4_K"; NULL for a value no GGUF type uses      */
    int blck;         /* elements per block (1 for plain types)          */
    int type_size;    /* bytes per block                                 */
    bool supported;   /* kvloom can load weights of this type: the scalar
                         kernel table has its dot product                */
    uint32_t act_type;/* what its dot products take as the activation row
                         (kern_act_type); DT_COUNT: not a weight type     */
    dtype_to_f32_fn to_f32;     /* NULL (both) when quant.c does not   */
    dtype_from_f32_fn from_f32; /* convert this type                   */
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
/* The name of a GGUF file type (the key general.file_type: llama.cpp's
 * numbering, which names mixes such as "Q4_K_M" besides the plain types),
 * or NULL for a number with no name. */
const char *dtype_file_type_name(int64_t ft);

#endif
