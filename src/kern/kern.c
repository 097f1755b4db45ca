/*
 * kern.c — kernel dispatch (which table runs) and the matmul driver.
 *
 * Place in the flow: kern/, called by model/ once per weight matrix per
 * forward pass; uses base/pool for parallelism.
 *
 * Tables: the scalar table (scalar.c) is always present. A SIMD table lives in
 * its own file (avx2.c, avx512.c) that defines `kern__<name>_ops`; the
 * Makefile compiles only the files for the host architecture and, for each
 * one, passes -DKVLOOM_KERN_<NAME> to this file, which references exactly
 * those tables (x86-64: AVX2 and AVX-512; other architectures have only the
 * scalar table so far). A table is usable when the CPU has its features
 * (__builtin_cpu_supports and CPUID).
 *
 * The table in use (`kern`) is a merged copy: every entry the chosen table
 * leaves NULL is taken from the scalar table. Activation formats are fixed
 * per weight type for all tables (kern_act_type), so a SIMD converter and a
 * scalar dot product (or the reverse) always agree on the bytes.
 *
 * kern_matmul:
 *   1. converts the n_tok activation rows once: the (token, block) pairs are
 *      split into contiguous ranges across the pool;
 *      (on the caller when there is little to convert, as in decode);
 *   2. splits the output rows into tiles of KERN_ROW_TILE and gives each
 *      thread a contiguous range of tiles; a thread computes its rows for
 *      every token (gemm when the table has one, else one dot per row and
 *      token: tokens in chunks of KERN_TOK_CHUNK, and within a chunk a tile
 *      of rows for each token, so the tile stays in L1 and the chunk's
 *      activations in L2).
 * kern_matmul_multi does the same for several matrices that read the same
 * input (q/k/v, gate/up): one conversion and one dispatch over all their
 * tiles, which matters in decode where each dispatch costs a pool sync.
 * Each Y[i][r] is one dot product (or one gemm element, which must follow the
 * same rule) of W[r] and act[i], so it is bitwise the same whatever n_tok,
 * the thread count, or the position i.
 *
 * Thread: kern_init/kern_select run once at start (or in tests) while no
 * kernel runs; kern_matmul is called by the pool owner (the engine thread).
 */
#include "kern.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "kern_internal.h"

#define KERN_ROW_TILE 8

/* KVLOOM_KERN_AVX2 / KVLOOM_KERN_AVX512 are set by the Makefile (KERN_DEFS)
 * for the table files it compiles; kern_internal.h declares the tables. */

static bool cpu_any(void) { return true; }

#if defined(KVLOOM_KERN_AVX2) || defined(KVLOOM_KERN_AVX512)
#include <cpuid.h>
/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does
 * not know the name. */
static bool cpu_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif
#if defined(KVLOOM_KERN_AVX2)
static bool cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c();
}
#endif
#if defined(KVLOOM_KERN_AVX512)
static bool cpu_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c() &&
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
#if defined(KVLOOM_KERN_AVX2)
    {&kern__avx2_ops, cpu_avx2},
#endif
#if defined(KVLOOM_KERN_AVX512)
    {&kern__avx512_ops, cpu_avx512},
#endif
};

static kern_ops active;
const kern_ops *kern = &kern_scalar_ops;

_Atomic size_t kern__buffer_bytes;
size_t kern_thread_buffer_bytes(void) { return atomic_load(&kern__buffer_bytes); }

/* The type table says which types have kernels (types.h): a type loads
 * (`supported`) exactly when the scalar table has its dot product, and has
 * an activation converter exactly when its activation format is not the f32
 * rows. A table that disagrees is a bug in the source, caught here. */
static void check_against_types(const kern_ops *t) {
    for (int ty = 0; ty < DT_COUNT; ty++) {
        const dtype_info *d = dtype_get((uint32_t)ty);
        const bool weight = d && d->supported;
        if ((kern_scalar_ops.dot[ty] != NULL) != weight)
            PANIC("kernels: type %s is %s in types.c but the scalar table %s a dot product", dtype_name((uint32_t)ty),
                  weight ? "supported" : "not supported", weight ? "lacks" : "has");
        if (weight && ((t->act[ty] != NULL) != (d->act_type != DT_F32)))
            PANIC("kernels: table %s: type %s's activation converter disagrees with its act_type %s", t->name,
                  d->name, dtype_name(d->act_type));
    }
}

static void use_table(const kern_ops *t) {
    active = *t;
    for (int ty = 0; ty < DT_COUNT; ty++) {
        if (!active.dot[ty]) active.dot[ty] = kern_scalar_ops.dot[ty];
        if (!active.act[ty]) active.act[ty] = kern_scalar_ops.act[ty];
    }
    if (!active.attn_part) active.attn_part = kern_scalar_ops.attn_part;
    if (!active.attn_part_q8) active.attn_part_q8 = kern_scalar_ops.attn_part_q8;
    if (!active.swiglu) active.swiglu = kern_scalar_ops.swiglu;
    if (!active.f16_store) active.f16_store = kern_scalar_ops.f16_store;
    check_against_types(&active);
    kern = &active;
}

void kern_swiglu(float *gate, const float *up, int n) { kern->swiglu(gate, up, n); }
void kern_f16_store(uint16_t *dst, size_t stride, const float *x, int n) { kern->f16_store(dst, stride, x, n); }

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
    const dtype_info *d = dtype_get(wtype);
    return d ? d->act_type : DT_COUNT;
}

size_t kern_act_row_bytes(uint32_t wtype, int64_t n) {
    uint32_t at = kern_act_type(wtype);
    return at == DT_COUNT ? 0 : dtype_row_bytes(at, n);
}

/* ---- matmul driver ---------------------------------------------------------- */

/* Tokens per pass over a thread's rows: the weight rows are streamed once per
 * chunk while the chunk's activation rows stay in L2. */
#define KERN_TOK_CHUNK 64
/* Below this many activation elements the conversion runs on the caller:
 * cheaper than waking the pool (decode converts one row of n_in). */
#define KERN_ACT_INLINE 16384
#define KERN_MAX_MULTI 4

typedef struct matmul_job {
    const kern_mat *w[KERN_MAX_MULTI]; /* matrices sharing the input x     */
    float *y[KERN_MAX_MULTI];
    long tile_end[KERN_MAX_MULTI]; /* cumulative tile counts            */
    int n_w;
    const float *x;
    int n_tok;
    int64_t n_in;
    const uint8_t *act; /* converted rows (or x itself)      */
    uint8_t *act_out;   /* where step 1 writes               */
    size_t act_row_bytes;
    int act_blck;       /* elements per activation block     */
    size_t act_blck_bytes;
    kern_act_fn act_fn;
} matmul_job;

static void act_task(void *arg, int ith, int nth) {
    const matmul_job *j = arg;
    const long nb = (long)(j->n_in / j->act_blck);
    long b, e;
    pool_split(nb * j->n_tok, ith, nth, &b, &e);
    while (b < e) { /* one token's share of the range per iteration */
        const long t = b / nb, k0 = b % nb, k1 = MIN(nb, k0 + (e - b));
        j->act_fn(j->x + t * j->n_in + k0 * j->act_blck,
                  j->act_out + (size_t)t * j->act_row_bytes + (size_t)k0 * j->act_blck_bytes,
                  (k1 - k0) * j->act_blck);
        b += k1 - k0;
    }
}

void kern_matmul_rows(const kern_mat *w, int64_t r0, int64_t r1, const void *act, size_t act_row_bytes, int n_tok,
                      float *y, int64_t ldy) {
    const kern_dot_fn dot = kern->dot[w->type];
    const kern_gemm_fn gemm = kern->gemm[w->type];
    if (gemm) {
        gemm(w, r0, r1, act, act_row_bytes, n_tok, y, ldy);
        return;
    }
    const uint8_t *wd = w->data, *ab = act;
    for (int t0 = 0; t0 < n_tok; t0 += KERN_TOK_CHUNK) {
        const int t1 = MIN(n_tok, t0 + KERN_TOK_CHUNK);
        for (int64_t rt = r0; rt < r1; rt += KERN_ROW_TILE) {
            const int64_t re = MIN(r1, rt + KERN_ROW_TILE);
            for (int t = t0; t < t1; t++) {
                const uint8_t *at = ab + (size_t)t * act_row_bytes;
                float *yt = y + (size_t)t * ldy;
                for (int64_t r = rt; r < re; r++) dot(w->n_in, &yt[r], wd + (size_t)r * w->row_bytes, at);
            }
        }
    }
}

/* Rows [r0, r1) of one matrix for every token. */
static void rows_range(const matmul_job *j, const kern_mat *w, float *y, int64_t r0, int64_t r1) {
    kern_matmul_rows(w, r0, r1, j->act, j->act_row_bytes, j->n_tok, y, w->n_out);
}

/* The tiles of all matrices form one list; each thread takes a contiguous
 * range of it. */
static void rows_task(void *arg, int ith, int nth) {
    const matmul_job *j = arg;
    long b, e;
    pool_split(j->tile_end[j->n_w - 1], ith, nth, &b, &e);
    long base = 0;
    for (int m = 0; m < j->n_w && b < e; m++) {
        const long end = j->tile_end[m];
        if (b < end) {
            const long te = MIN(e, end);
            const kern_mat *w = j->w[m];
            rows_range(j, w, j->y[m], (b - base) * KERN_ROW_TILE, MIN(w->n_out, (int64_t)(te - base) * KERN_ROW_TILE));
            b = te;
        }
        base = end;
    }
}

void kern_matmul_multi(pool *p, const kern_mat *const *ws, int n_w, const float *x, int n_tok, float *const *ys,
                       void *act_buf) {
    ASSERT(n_w >= 1 && n_w <= KERN_MAX_MULTI);
    const uint32_t at = kern_act_type(ws[0]->type);
    ASSERT(at != DT_COUNT);
    for (int m = 1; m < n_w; m++)
        if (kern_act_type(ws[m]->type) != at || ws[m]->n_in != ws[0]->n_in) {
            for (int i = 0; i < n_w; i++) kern_matmul(p, ws[i], x, n_tok, ys[i], act_buf);
            return;
        }
    if (n_tok <= 0) return;
    matmul_job j = {.n_w = n_w, .x = x, .n_tok = n_tok, .n_in = ws[0]->n_in};
    long tiles = 0;
    for (int m = 0; m < n_w; m++) {
        ASSERT(kern->dot[ws[m]->type]);
        j.w[m] = ws[m];
        j.y[m] = ys[m];
        tiles += (long)((ws[m]->n_out + KERN_ROW_TILE - 1) / KERN_ROW_TILE);
        j.tile_end[m] = tiles;
    }
    if (tiles == 0) return;
    j.act_fn = kern->act[ws[0]->type];
    if (j.act_fn) {
        const dtype_info *ai = dtype_get(at);
        ASSERT(act_buf && j.n_in % ai->blck == 0);
        j.act_blck = ai->blck;
        j.act_blck_bytes = (size_t)ai->type_size;
        j.act_row_bytes = dtype_row_bytes(at, j.n_in);
        j.act_out = act_buf;
        j.act = act_buf;
        if ((int64_t)n_tok * j.n_in <= KERN_ACT_INLINE)
            act_task(&j, 0, 1);
        else
            pool_run(p, act_task, &j);
    } else {
        j.act = (const uint8_t *)x;
        j.act_row_bytes = (size_t)j.n_in * sizeof(float);
    }
    pool_run(p, rows_task, &j);
}

void kern_matmul(pool *p, const kern_mat *w, const float *x, int n_tok, float *y, void *act_buf) {
    kern_matmul_multi(p, &w, 1, x, n_tok, &y, act_buf);
}
