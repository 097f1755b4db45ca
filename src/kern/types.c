/*
 * types.c — the table of GGUF element types: name, block size, bytes per
 * block, and what kvloom does with each (load it, the activation type of its
 * dot products, its row converters). The one place that knows this:
 * quant_supported, quant_dequant_row, quant_quantize_row and kern_act_type
 * read it; kern.c checks its kernel tables against it (types.h says why the
 * dot products are not columns here).
 */
#include "types.h"

#include <strings.h>

#include "kern_internal.h"
#include "quant.h"

/* The types kvloom computes with take their block sizes from quant.h's
 * structs (pinned there by static_asserts); the rest are the GGUF layouts.
 * CONV(x): the type's two converters from quant.c; NOCONV: it has none. */
#define NA DT_COUNT
#define CONV(to, from) to, from
#define NOCONV NULL, NULL
static const dtype_info table[DT_COUNT] = {
    /*          name    blck   bytes               load   act      converters */
    [DT_F32] = {"F32", 1, sizeof(float), true, DT_F32, CONV(kern__dequant_row_f32, kern__quant_row_f32)},
    [DT_F16] = {"F16", 1, sizeof(uint16_t), true, DT_F32, CONV(kern__dequant_row_f16, kern__quant_row_f16)},
    [DT_BF16] = {"BF16", 1, sizeof(uint16_t), true, DT_F32, CONV(kern__dequant_row_bf16, kern__quant_row_bf16)},
    [DT_Q4_0] = {"Q4_0", QK4_0, sizeof(block_q4_0), true, DT_Q8_0, CONV(kern__dequant_row_q4_0, kern__quant_row_q4_0)},
    [DT_Q8_0] = {"Q8_0", QK8_0, sizeof(block_q8_0), true, DT_Q8_0, CONV(kern__dequant_row_q8_0, quant_row_q8_0)},
    [DT_Q4_K] = {"Q4_K", QK_K, sizeof(block_q4_k), true, DT_Q8_K, CONV(kern__dequant_row_q4_k, kern__quant_row_q4_k)},
    [DT_Q5_K] = {"Q5_K", QK_K, sizeof(block_q5_k), true, DT_Q8_K, CONV(kern__dequant_row_q5_k, kern__quant_row_q5_k)},
    [DT_Q6_K] = {"Q6_K", QK_K, sizeof(block_q6_k), true, DT_Q8_K, CONV(kern__dequant_row_q6_k, kern__quant_row_q6_k)},
    [DT_MXFP4] = {"MXFP4", QK_MXFP4, sizeof(block_mxfp4), true, DT_Q8_0, CONV(kern__dequant_row_mxfp4, kern__quant_row_mxfp4)},
    [DT_Q8_K] = {"Q8_K", QK_K, sizeof(block_q8_k), false, NA, CONV(kern__dequant_row_q8_k, quant_row_q8_k)},
    [DT_Q4_1] = {"Q4_1", 32, 20, false, NA, NOCONV},
    [DT_Q5_0] = {"Q5_0", 32, 22, false, NA, NOCONV},
    [DT_Q5_1] = {"Q5_1", 32, 24, false, NA, NOCONV},
    [DT_Q8_1] = {"Q8_1", 32, 36, false, NA, NOCONV},
    [DT_Q2_K] = {"Q2_K", 256, 84, false, NA, NOCONV},
    [DT_Q3_K] = {"Q3_K", 256, 110, false, NA, NOCONV},
    [DT_IQ2_XXS] = {"IQ2_XXS", 256, 66, false, NA, NOCONV},
    [DT_IQ2_XS] = {"IQ2_XS", 256, 74, false, NA, NOCONV},
    [DT_IQ3_XXS] = {"IQ3_XXS", 256, 98, false, NA, NOCONV},
    [DT_IQ1_S] = {"IQ1_S", 256, 50, false, NA, NOCONV},
    [DT_IQ4_NL] = {"IQ4_NL", 32, 18, false, NA, NOCONV},
    [DT_IQ3_S] = {"IQ3_S", 256, 110, false, NA, NOCONV},
    [DT_IQ2_S] = {"IQ2_S", 256, 82, false, NA, NOCONV},
    [DT_IQ4_XS] = {"IQ4_XS", 256, 136, false, NA, NOCONV},
    [DT_I8] = {"I8", 1, 1, false, NA, NOCONV},
    [DT_I16] = {"I16", 1, 2, false, NA, NOCONV},
    [DT_I32] = {"I32", 1, 4, false, NA, NOCONV},
    [DT_I64] = {"I64", 1, 8, false, NA, NOCONV},
    [DT_F64] = {"F64", 1, 8, false, NA, NOCONV},
    [DT_IQ1_M] = {"IQ1_M", 256, 56, false, NA, NOCONV},
    [DT_TQ1_0] = {"TQ1_0", 256, 54, false, NA, NOCONV},
    [DT_TQ2_0] = {"TQ2_0", 256, 66, false, NA, NOCONV},
};
#undef NA
#undef CONV
#undef NOCONV

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

/* general.file_type's numbers (gaps are retired values) */
static const char *const file_types[] = {
    [0] = "F32",      [1] = "F16",      [2] = "Q4_0",     [3] = "Q4_1",     [7] = "Q8_0",    [8] = "Q5_0",
    [9] = "Q5_1",     [10] = "Q2_K",    [11] = "Q3_K_S",  [12] = "Q3_K_M",  [13] = "Q3_K_L", [14] = "Q4_K_S",
    [15] = "Q4_K_M",  [16] = "Q5_K_S",  [17] = "Q5_K_M",  [18] = "Q6_K",    [19] = "IQ2_XXS", [20] = "IQ2_XS",
    [21] = "Q2_K_S",  [22] = "IQ3_XS",  [23] = "IQ3_XXS", [24] = "IQ1_S",   [25] = "IQ4_NL", [26] = "IQ3_S",
    [27] = "IQ3_M",   [28] = "IQ2_S",   [29] = "IQ2_M",   [30] = "IQ4_XS",  [31] = "IQ1_M",  [32] = "BF16",
    [36] = "TQ1_0",   [37] = "TQ2_0",
};

const char *dtype_file_type_name(int64_t ft) {
    return ft >= 0 && ft < (int64_t)(sizeof file_types / sizeof file_types[0]) ? file_types[ft] : NULL;
}
