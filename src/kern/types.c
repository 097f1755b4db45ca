/*
 * types.c — the table of GGUF element types: name, block size, bytes per
 * block, and what kvloom does with each (load, convert, the activation type
 * of its dot products). The one place that knows this: quant_supported and
 * kern_act_type read it.
 */
#include "types.h"

#include <strings.h>

#include "quant.h"

/* The types kvloom computes with take their block sizes from quant.h's
 * structs (pinned there by static_asserts); the rest are the GGUF layouts. */
#define NA DT_COUNT
static const dtype_info table[DT_COUNT] = {
    /*            name       blck  bytes                 load   convert act */
    [DT_F32] = {"F32", 1, sizeof(float), true, true, DT_F32},
    [DT_F16] = {"F16", 1, sizeof(uint16_t), true, true, DT_F32},
    [DT_BF16] = {"BF16", 1, sizeof(uint16_t), true, true, DT_F32},
    [DT_Q4_0] = {"Q4_0", QK4_0, sizeof(block_q4_0), true, true, DT_Q8_0},
    [DT_Q8_0] = {"Q8_0", QK8_0, sizeof(block_q8_0), true, true, DT_Q8_0},
    [DT_Q4_K] = {"Q4_K", QK_K, sizeof(block_q4_k), true, true, DT_Q8_K},
    [DT_Q5_K] = {"Q5_K", QK_K, sizeof(block_q5_k), true, true, DT_Q8_K},
    [DT_Q6_K] = {"Q6_K", QK_K, sizeof(block_q6_k), true, true, DT_Q8_K},
    [DT_Q8_K] = {"Q8_K", QK_K, sizeof(block_q8_k), false, true, NA},
    [DT_Q4_1] = {"Q4_1", 32, 20, false, false, NA},
    [DT_Q5_0] = {"Q5_0", 32, 22, false, false, NA},
    [DT_Q5_1] = {"Q5_1", 32, 24, false, false, NA},
    [DT_Q8_1] = {"Q8_1", 32, 36, false, false, NA},
    [DT_Q2_K] = {"Q2_K", 256, 84, false, false, NA},
    [DT_Q3_K] = {"Q3_K", 256, 110, false, false, NA},
    [DT_IQ2_XXS] = {"IQ2_XXS", 256, 66, false, false, NA},
    [DT_IQ2_XS] = {"IQ2_XS", 256, 74, false, false, NA},
    [DT_IQ3_XXS] = {"IQ3_XXS", 256, 98, false, false, NA},
    [DT_IQ1_S] = {"IQ1_S", 256, 50, false, false, NA},
    [DT_IQ4_NL] = {"IQ4_NL", 32, 18, false, false, NA},
    [DT_IQ3_S] = {"IQ3_S", 256, 110, false, false, NA},
    [DT_IQ2_S] = {"IQ2_S", 256, 82, false, false, NA},
    [DT_IQ4_XS] = {"IQ4_XS", 256, 136, false, false, NA},
    [DT_I8] = {"I8", 1, 1, false, false, NA},
    [DT_I16] = {"I16", 1, 2, false, false, NA},
    [DT_I32] = {"I32", 1, 4, false, false, NA},
    [DT_I64] = {"I64", 1, 8, false, false, NA},
    [DT_F64] = {"F64", 1, 8, false, false, NA},
    [DT_IQ1_M] = {"IQ1_M", 256, 56, false, false, NA},
    [DT_TQ1_0] = {"TQ1_0", 256, 54, false, false, NA},
    [DT_TQ2_0] = {"TQ2_0", 256, 66, false, false, NA},
};
#undef NA

const dtype_info *dtype_get(uint32_t t) {
    if (t >= DT_COUNT || !table[t].name) return NULL;
    return &table[t];
}

const char *dtype_name(uint32_t t) {
    const dtype_info *d = dtype_get(t);
    return d ? d->name : "unknown";
}

int dtype_from_name(const char *name) {
    for (int t = 0; t < DT_COUNT; t++)
        if (table[t].name && strcasecmp(table[t].name, name) == 0) return t;
    return -1;
}

size_t dtype_row_bytes(uint32_t t, int64_t n) {
    const dtype_info *d = dtype_get(t);
    if (!d || n < 0 || n % d->blck) return 0;
    return (size_t)(n / d->blck) * (size_t)d->type_size;
}
