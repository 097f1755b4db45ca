/*
 * types.c — the table of GGUF element types. Sizes follow the GGUF block
 * layouts (see quant.h for the block structs of the types we compute with).
 */
#include "types.h"

#include <strings.h>

static const dtype_info table[DT_COUNT] = {
    [DT_F32] = {"F32", 1, 4, true},
    [DT_F16] = {"F16", 1, 2, true},
    [DT_Q4_0] = {"Q4_0", 32, 18, true},
    [DT_Q4_1] = {"Q4_1", 32, 20, false},
    [DT_Q5_0] = {"Q5_0", 32, 22, false},
    [DT_Q5_1] = {"Q5_1", 32, 24, false},
    [DT_Q8_0] = {"Q8_0", 32, 34, true},
    [DT_Q8_1] = {"Q8_1", 32, 36, false},
    [DT_Q2_K] = {"Q2_K", 256, 84, false},
    [DT_Q3_K] = {"Q3_K", 256, 110, false},
    [DT_Q4_K] = {"Q4_K", 256, 144, true},
    [DT_Q5_K] = {"Q5_K", 256, 176, true},
    [DT_Q6_K] = {"Q6_K", 256, 210, true},
    [DT_Q8_K] = {"Q8_K", 256, 292, false},
    [DT_IQ2_XXS] = {"IQ2_XXS", 256, 66, false},
    [DT_IQ2_XS] = {"IQ2_XS", 256, 74, false},
    [DT_IQ3_XXS] = {"IQ3_XXS", 256, 98, false},
    [DT_IQ1_S] = {"IQ1_S", 256, 50, false},
    [DT_IQ4_NL] = {"IQ4_NL", 32, 18, false},
    [DT_IQ3_S] = {"IQ3_S", 256, 110, false},
    [DT_IQ2_S] = {"IQ2_S", 256, 82, false},
    [DT_IQ4_XS] = {"IQ4_XS", 256, 136, false},
    [DT_I8] = {"I8", 1, 1, false},
    [DT_I16] = {"I16", 1, 2, false},
    [DT_I32] = {"I32", 1, 4, false},
    [DT_I64] = {"I64", 1, 8, false},
    [DT_F64] = {"F64", 1, 8, false},
    [DT_IQ1_M] = {"IQ1_M", 256, 56, false},
    [DT_BF16] = {"BF16", 1, 2, true},
    [DT_TQ1_0] = {"TQ1_0", 256, 54, false},
    [DT_TQ2_0] = {"TQ2_0", 256, 66, false},
};

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
