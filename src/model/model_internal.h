/*
 * model_internal.h — what the files of src/model/ share and nobody else
 * calls: model.c's checked tensor lookups, for the architecture files that
 * load their own weights (bert.c).
 */
#ifndef KVLOOM_MODEL_INTERNAL_H
#define KVLOOM_MODEL_INTERNAL_H

#include "model.h"

/* A matrix view of n_out rows of n_in (type and shape checked, named in e). */
int model__load_mat(const gguf_ctx *g, const char *name, int64_t n_in, int64_t n_out, kern_mat *m, err_t *e);
/* A vector of n values converted to f32 into dst (shape checked). */
int model__load_vec(const gguf_ctx *g, const char *name, int64_t n, float *dst, err_t *e);

#endif
