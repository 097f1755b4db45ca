/*
 * kern.c — kernel dispatch (which table runs) and the matmul driver.
 *
 * Place in the flow: kern/, called by model/ once per weight matrix per
 * forward pass; uses base/pool for parallelism.
 *
 * Tables: the scalar table (scalar.c) is always present. A SIMD table lives in
 * its own file (avx2.c, avx512.c, neon.c) that defines `kern_<name>_ops`; the
 * Makefile compiles only the files for the host architecture, and this file
 * references a table only when its source file exists (__has_include) on
 * that architecture — so adding src/kern/avx2.c is all it takes to register
 * it. A table is usable when the CPU has its features (__builtin_cpu_supports
 * on x86; NEON is baseline on aarch64).
 *
 * The table in use (`kern`) is a merged copy: every entry the chosen table
 * leaves NULL is taken from the scalar table. Activation formats are fixed
 * per weight type for all tables (kern_act_type), so a SIMD converter and a
 * scalar dot product (or the reverse) always agree on the bytes.
 *
 * kern_matmul:
 *   1. converts the n_tok activation rows once: the (token, block) pairs are
 *      split into contiguous ranges across the pool;
 *   2. splits the output rows into tiles of KERN_ROW_TILE and gives each
 *      thread a contiguous range of tiles; a thread computes its rows for
 *      every token (gemm when the table has one, else one dot per row and
 *      token, weight row outer so it stays in cache).
 * Each Y[i][r] is one dot product (or one gemm element, which must follow the
 * same rule) of W[r] and act[i], so it is bitwise the same whatever n_tok,
 * the thread count, or the position i.
 *
 * Thread: kern_init/kern_select run once at start (or in tests) while no
 * kernel runs; kern_matmul is called by the pool owner (the engine thread).
 */
#include "kern.h"

#include <stdlib.h>
#include <string.h>

#include "../base/base.h"

#define KERN_ROW_TILE 8

#if defined(__x86_64__) && defined(__has_include)
#if __has_include("avx2.c")
#define KERN_HAVE_AVX2 1
extern const kern_ops kern_avx2_ops;
#endif
#if __has_include("avx512.c")
#define KERN_HAVE_AVX512 1
extern const kern_ops kern_avx512_ops;
#endif
#endif
#if defined(__aarch64__) && defined(__has_include)
#if __has_include("neon.c")
#define KERN_HAVE_NEON 1
extern const kern_ops kern_neon_ops;
#endif
#endif

static bool cpu_any(void) { return true; }

#if defined(KERN_HAVE_AVX2)
static bool cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
#endif
#if defined(KERN_HAVE_AVX512)
static bool cpu_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
           __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}
#endif

typedef struct kern_entry {
    const kern_ops *ops;
    bool (*cpu_ok)(void);
} kern_entry;

/* Worst first, best last. */
static const kern_entry entries[] = {
    {&kern_scalar_ops, cpu_any},
#if defined(KERN_HAVE_NEON)
    {&kern_neon_ops, cpu_any},
#endif
#if defined(KERN_HAVE_AVX2)
    {&kern_avx2_ops, cpu_avx2},
#endif
#if defined(KERN_HAVE_AVX512)
    {&kern_avx512_ops, cpu_avx512},
#endif
};

static kern_ops active;
const kern_ops *kern = &kern_scalar_ops;

static void use_table(const kern_ops *t) {
    active = *t;
    for (int ty = 0; ty < DT_COUNT; ty++) {
        if (!active.dot[ty]) active.dot[ty] = kern_scalar_ops.dot[ty];
        if (!active.act[ty]) active.act[ty] = kern_scalar_ops.act[ty];
    }
    kern = &active;
}

int kern_available(const char **names, int cap) {
    int n = 0;
    for (size_t i = 0; i < ARRAY_LEN(entries); i++)
        if (entries[i].cpu_ok()) {
            if (n < cap) names[n] = entries[i].ops->name;
            n++;
        }
    return n;
}

int kern_select(const char *name) {
    for (size_t i = 0; i < ARRAY_LEN(entries); i++)
        if (strcmp(entries[i].ops->name, name) == 0) {
            if (!entries[i].cpu_ok()) return ERR_UNSUPPORTED;
            use_table(entries[i].ops);
            return 0;
        }
    return ERR_NOTFOUND;
}

int kern_init(const char *force) {
    if (!force) force = getenv("KVLOOM_KERNELS");
    if (force && *force && strcmp(force, "auto") != 0) {
        int rc = kern_select(force);
        if (rc < 0) log_error("kernels '%s' are %s on this machine", force,
                              rc == ERR_NOTFOUND ? "not compiled in" : "not supported by the CPU");
        return rc;
    }
    const kern_ops *best = &kern_scalar_ops;
    for (size_t i = 0; i < ARRAY_LEN(entries); i++)
        if (entries[i].cpu_ok()) best = entries[i].ops;
    use_table(best);
    log_debug("kernels: %s", best->name);
    return 0;
}

uint32_t kern_act_type(uint32_t wtype) {
    switch (wtype) {
    case DT_F32: case DT_F16: case DT_BF16:
        return DT_F32;
    case DT_Q8_0: case DT_Q4_0:
        return DT_Q8_0;
    case DT_Q4_K: case DT_Q5_K: case DT_Q6_K:
        return DT_Q8_K;
    default:
        return DT_COUNT;
    }
}

size_t kern_act_row_bytes(uint32_t wtype, int64_t n) {
    uint32_t at = kern_act_type(wtype);
    return at == DT_COUNT ? 0 : dtype_row_bytes(at, n);
}

/* ---- matmul driver ---------------------------------------------------------- */

typedef struct matmul_job {
    const kern_mat *w;
    const float *x;
    int n_tok;
    float *y;
    const uint8_t *act; /* converted rows (or x itself)      */
    uint8_t *act_out;   /* where step 1 writes               */
    size_t act_row_bytes;
    int act_blck;       /* elements per activation block     */
    size_t act_blck_bytes;
    kern_act_fn act_fn;
    kern_dot_fn dot;
    kern_gemm_fn gemm;
} matmul_job;

static void act_task(void *arg, int ith, int nth) {
    const matmul_job *j = arg;
    const long nb = (long)(j->w->n_in / j->act_blck);
    long b, e;
    pool_split(nb * j->n_tok, ith, nth, &b, &e);
    while (b < e) { /* one token's share of the range per iteration */
        const long t = b / nb, k0 = b % nb, k1 = MIN(nb, k0 + (e - b));
        j->act_fn(j->x + t * j->w->n_in + k0 * j->act_blck,
                  j->act_out + (size_t)t * j->act_row_bytes + (size_t)k0 * j->act_blck_bytes,
                  (k1 - k0) * j->act_blck);
        b += k1 - k0;
    }
}

static void rows_task(void *arg, int ith, int nth) {
    const matmul_job *j = arg;
    const kern_mat *w = j->w;
    const long n_tiles = (long)((w->n_out + KERN_ROW_TILE - 1) / KERN_ROW_TILE);
    long b, e;
    pool_split(n_tiles, ith, nth, &b, &e);
    const int64_t r0 = b * KERN_ROW_TILE, r1 = MIN(w->n_out, (int64_t)e * KERN_ROW_TILE);
    if (r0 >= r1) return;
    if (j->gemm) {
        j->gemm(w, r0, r1, j->act, j->act_row_bytes, j->n_tok, j->y, w->n_out);
        return;
    }
    const uint8_t *wd = w->data;
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = wd + (size_t)r * w->row_bytes;
        for (int t = 0; t < j->n_tok; t++)
            j->dot(w->n_in, &j->y[(size_t)t * w->n_out + r], wr, j->act + (size_t)t * j->act_row_bytes);
    }
}

void kern_matmul(pool *p, const kern_mat *w, const float *x, int n_tok, float *y, void *act_buf) {
    const uint32_t at = kern_act_type(w->type);
    ASSERT(at != DT_COUNT && kern->dot[w->type]);
    if (n_tok <= 0 || w->n_out <= 0) return;
    matmul_job j = {
        .w = w,
        .x = x,
        .n_tok = n_tok,
        .y = y,
        .act_fn = kern->act[w->type],
        .dot = kern->dot[w->type],
        .gemm = kern->gemm[w->type],
    };
    if (j.act_fn) {
        const dtype_info *ai = dtype_get(at);
        ASSERT(act_buf && w->n_in % ai->blck == 0);
        j.act_blck = ai->blck;
        j.act_blck_bytes = (size_t)ai->type_size;
        j.act_row_bytes = dtype_row_bytes(at, w->n_in);
        j.act_out = act_buf;
        j.act = act_buf;
        pool_run(p, act_task, &j);
    } else {
        j.act = (const uint8_t *)x;
        j.act_row_bytes = (size_t)w->n_in * sizeof(float);
    }
    pool_run(p, rows_task, &j);
}
