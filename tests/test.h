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

/* Path of the shared data folder: $KVLOOM_SHARED or ../shared. */
static inline const char *test_shared_dir(void) {
    const char *s = getenv("KVLOOM_SHARED");
    return s && *s ? s : "../shared";
}

static inline int test_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, test_n_pass, test_n_fail);
    fflush(stdout);
    return test_n_fail ? 1 : 0;
}

#endif
