/*
 * test.h — the in-tree test harness. A test file is a main() that calls
 * CHECK-style macros and ends with `return test_summary("name");`, which
 * prints "name: N passed, N failed" as its last line.
 *
 * A CHECK counts one assertion; a failing one prints file:line and the
 * condition (plus an optional formatted message) and the test goes on.
 */
#ifndef KVLOOM_TEST_H
#define KVLOOM_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_n_pass, test_n_fail;

#define CHECK(cond) CHECK_MSG(cond, "%s", "")
#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        if (cond) {                                                              \
            test_n_pass++;                                                       \
        } else {                                                                 \
            test_n_fail++;                                                       \
            fprintf(stderr, "FAIL %s:%d: %s ", __FILE__, __LINE__, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                       \
    do {                                                                         \
        long long test_a_ = (long long)(a), test_b_ = (long long)(b);            \
        CHECK_MSG(test_a_ == test_b_, "(%lld != %lld)", test_a_, test_b_);       \
    } while (0)
#define CHECK_STR(a, b)                                                          \
    do {                                                                         \
        const char *test_a_ = (a), *test_b_ = (b);                               \
        CHECK_MSG(test_a_ && test_b_ && strcmp(test_a_, test_b_) == 0,           \
                  "(\"%s\" != \"%s\")", test_a_ ? test_a_ : "(null)",            \
                  test_b_ ? test_b_ : "(null)");                                 \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                    \
    do {                                                                         \
        double test_a_ = (a), test_b_ = (b);                                     \
        CHECK_MSG(fabs(test_a_ - test_b_) <= (tol), "(%.9g vs %.9g, tol %g)",    \
                  test_a_, test_b_, (double)(tol));                              \
    } while (0)

/* Deterministic random numbers (xorshift64), so every run sees the same
 * inputs; a test may set rng_state for its own sequence. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline uint64_t rng_u64(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
/* uniform in (0, 1) */
static inline double rng_unif(void) { return ((rng_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
/* standard normal (Box-Muller) */
static inline float rng_gauss(void) {
    double u = rng_unif(), v = rng_unif();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* Path of the shared data folder: $KVLOOM_SHARED or ../shared. */
static inline const char *test_shared_dir(void) {
    const char *s = getenv("KVLOOM_SHARED");
    return s && *s ? s : "../shared";
}

#ifdef KVLOOM_MODEL_H
/* The shared trained model (stories260K), or NULL after a failed check
 * naming why. For test files that include model/model.h first. */
static inline model *test_load_stories(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    model *m = NULL;
    err_t e = {0};
    CHECK_MSG(model_load(path, &m, &e) == 0, "%s: %s", path, e.msg);
    return m;
}
#endif

#if defined(KVLOOM_TOK_H) && defined(KVLOOM_TOK_HFIMPORT_H)
#include <unistd.h>
/* A tokenizer from ../shared/tokenizers/DIR/tokenizer.json (and cfg_name, a
 * file beside it such as "tokenizer_config.json", or NULL), or NULL after a
 * failed check naming why. For test files that include tok/tok.h and
 * tok/hfimport.h first. */
static inline tokenizer *test_load_hf_tokenizer(const char *dir, const char *cfg_name) {
    char tj[512], cj[512], out[256];
    snprintf(tj, sizeof tj, "%s/tokenizers/%s/tokenizer.json", test_shared_dir(), dir);
    snprintf(cj, sizeof cj, "%s/tokenizers/%s/%s", test_shared_dir(), dir, cfg_name ? cfg_name : "");
    snprintf(out, sizeof out, "/tmp/kvloom_test_hf_%d.gguf", (int)getpid());
    gguf_writer *w = gguf_writer_new();
    err_t e = {0};
    int rc = tok_import_hf(tj, cfg_name ? cj : NULL, w, &e);
    CHECK_MSG(rc == 0, "import %s: %s", dir, e.msg);
    if (rc == 0) {
        rc = gguf_writer_write(w, out, &e);
        CHECK_MSG(rc == 0, "write %s: %s", out, e.msg);
    }
    gguf_writer_free(w);
    if (rc) return NULL;
    gguf_ctx *g = NULL;
    rc = gguf_open(out, &g, &e);
    CHECK_MSG(rc == 0, "open %s: %s", out, e.msg);
    tokenizer *t = NULL;
    if (rc == 0) {
        rc = tok_load(g, &t, &e);
        CHECK_MSG(rc == 0, "tok_load %s: %s", dir, e.msg);
    }
    gguf_free(g);
    unlink(out);
    return t;
}
#endif

static inline int test_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, test_n_pass, test_n_fail);
    fflush(stdout);
    return test_n_fail ? 1 : 0;
}

#endif
