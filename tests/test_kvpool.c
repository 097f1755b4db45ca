/* test_kvpool.c — kv/kvpool: allocation order, references, exhaustion as a
 * state, the watch hook, misuse PANICs, and a randomized differential test
 * against a naive model (a refcount array and a LIFO list of free ids) with
 * kvpool_check after every operation. */
#include "kv/kvpool.h"
#include "test.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- hook recorder ---- */
static int hook_calls, hook_last_block, hook_last_rc;
static void *hook_last_ctx;
static void rec_hook(void *ctx, int32_t block, int refcount) {
    hook_calls++;
    hook_last_block = block;
    hook_last_rc = refcount;
    hook_last_ctx = ctx;
}

static int check_ok(const kvpool *p) {
    err_t e = {0};
    int rc = kvpool_check(p, &e);
    if (rc) fprintf(stderr, "kvpool_check: %s\n", e.msg);
    return rc;
}

/* Runs fn(p) in a child process and reports whether it died of SIGABRT
 * (a PANIC). The child's stderr goes to /dev/null. */
static bool panics(void (*fn)(kvpool *), kvpool *p) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        fn(p);
        _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return false;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}
static void do_unref_free(kvpool *p) { kvpool_unref(p, 3); }
static void do_ref_free(kvpool *p) { kvpool_ref(p, 3); }
static void do_ref_oob(kvpool *p) { kvpool_ref(p, 8); }
static void do_unref_neg(kvpool *p) { kvpool_unref(p, -1); }
static void do_unref_watched0(kvpool *p) { kvpool_unref(p, 0); }

/* uniform in [0, n), from test.h's reproducible xorshift */
static uint32_t rnd(uint32_t n) { return (uint32_t)((rng_u64() >> 11) % n); }

static void test_basic(void) {
    kvpool *p = kvpool_new(4);
    CHECK_EQ_INT(kvpool_n_blocks(p), 4);
    CHECK_EQ_INT(kvpool_n_free(p), 4);
    CHECK_EQ_INT(kvpool_n_used(p), 0);
    CHECK_EQ_INT(check_ok(p), 0);
    /* a fresh pool hands out 0, 1, 2, 3 with refcount 1 */
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(kvpool_alloc(p), i);
        CHECK_EQ_INT(kvpool_refcount(p, i), 1);
        CHECK_EQ_INT(check_ok(p), 0);
    }
    CHECK_EQ_INT(kvpool_n_free(p), 0);
    CHECK_EQ_INT(kvpool_n_used(p), 4);
    /* exhaustion is a state: -1, repeatedly, nothing changes */
    CHECK_EQ_INT(kvpool_alloc(p), -1);
    CHECK_EQ_INT(kvpool_alloc(p), -1);
    CHECK_EQ_INT(check_ok(p), 0);
    /* refs keep a block alive until the last unref */
    kvpool_ref(p, 2);
    kvpool_ref(p, 2);
    CHECK_EQ_INT(kvpool_refcount(p, 2), 3);
    CHECK_EQ_INT(kvpool_unref(p, 2), 2);
    CHECK_EQ_INT(kvpool_unref(p, 2), 1);
    CHECK_EQ_INT(kvpool_n_free(p), 0);
    CHECK_EQ_INT(kvpool_unref(p, 2), 0);
    CHECK_EQ_INT(kvpool_n_free(p), 1);
    CHECK_EQ_INT(kvpool_refcount(p, 2), 0);
    CHECK_EQ_INT(check_ok(p), 0);
    /* LIFO: the last freed block comes back first */
    CHECK_EQ_INT(kvpool_unref(p, 0), 0);
    CHECK_EQ_INT(kvpool_unref(p, 3), 0);
    CHECK_EQ_INT(kvpool_alloc(p), 3);
    CHECK_EQ_INT(kvpool_alloc(p), 0);
    CHECK_EQ_INT(kvpool_alloc(p), 2);
    CHECK_EQ_INT(kvpool_alloc(p), -1);
    CHECK_EQ_INT(check_ok(p), 0);
    kvpool_free(p);
    kvpool_free(NULL);
}

static void test_hook(void) {
    kvpool *p = kvpool_new(4);
    int ctx_token;
    kvpool_set_hook(p, rec_hook, &ctx_token);
    int32_t a = kvpool_alloc(p), b = kvpool_alloc(p);
    kvpool_watch(p, a, true);
    CHECK(kvpool_is_watched(p, a));
    CHECK(!kvpool_is_watched(p, b));
    hook_calls = 0;
    kvpool_ref(p, a); /* 1 -> 2: fires */
    CHECK_EQ_INT(hook_calls, 1);
    CHECK_EQ_INT(hook_last_block, a);
    CHECK_EQ_INT(hook_last_rc, 2);
    CHECK(hook_last_ctx == &ctx_token);
    kvpool_ref(p, a); /* 2 -> 3: silent */
    CHECK_EQ_INT(hook_calls, 1);
    kvpool_unref(p, a); /* 3 -> 2: silent */
    CHECK_EQ_INT(hook_calls, 1);
    kvpool_unref(p, a); /* 2 -> 1: fires */
    CHECK_EQ_INT(hook_calls, 2);
    CHECK_EQ_INT(hook_last_rc, 1);
    kvpool_ref(p, b); /* unwatched: silent */
    kvpool_unref(p, b);
    CHECK_EQ_INT(hook_calls, 2);
    CHECK_EQ_INT(check_ok(p), 0);
    /* dropping the last reference of a watched block is a bug */
    CHECK_EQ_INT(a, 0);
    CHECK(panics(do_unref_watched0, p));
    kvpool_watch(p, a, false);
    CHECK_EQ_INT(kvpool_unref(p, a), 0);
    CHECK_EQ_INT(hook_calls, 2);
    kvpool_set_hook(p, NULL, NULL);
    CHECK_EQ_INT(check_ok(p), 0);
    kvpool_free(p);
}

static void test_panics(void) {
    kvpool *p = kvpool_new(8);
    for (int i = 0; i < 3; i++) kvpool_alloc(p); /* 0,1,2 used; 3.. free */
    CHECK(panics(do_unref_free, p));
    CHECK(panics(do_ref_free, p));
    CHECK(panics(do_ref_oob, p));
    CHECK(panics(do_unref_neg, p));
    /* the parent's pool is untouched by what the children did */
    CHECK_EQ_INT(kvpool_n_free(p), 5);
    CHECK_EQ_INT(check_ok(p), 0);
    kvpool_free(p);
}

/* Differential: the model keeps refcounts and the free ids as a LIFO list
 * (top = last element), so it predicts every allocation exactly. */
static void test_random(int n_blocks, int n_ops) {
    kvpool *p = kvpool_new(n_blocks);
    int *ref = calloc((size_t)n_blocks, sizeof *ref);
    int *lifo = malloc((size_t)n_blocks * sizeof *lifo);
    int n_lifo = 0;
    for (int b = n_blocks - 1; b >= 0; b--) lifo[n_lifo++] = b;
    int bad_check = 0, bad_alloc = 0, bad_rc = 0, n_exhausted = 0;
    for (int op = 0; op < n_ops; op++) {
        uint32_t r = rnd(10);
        if (r < 4) { /* alloc */
            int32_t got = kvpool_alloc(p);
            int want = n_lifo ? lifo[--n_lifo] : -1;
            if (got != want) bad_alloc++;
            if (want >= 0) ref[want] = 1;
            if (want < 0) n_exhausted++;
        } else if (r < 6) { /* ref a used block */
            int b = (int)rnd((uint32_t)n_blocks);
            if (ref[b] > 0) {
                kvpool_ref(p, b);
                ref[b]++;
            }
        } else { /* unref a used block */
            int b = (int)rnd((uint32_t)n_blocks);
            if (ref[b] > 0) {
                int rc = kvpool_unref(p, b);
                if (rc != --ref[b]) bad_rc++;
                if (ref[b] == 0) lifo[n_lifo++] = b;
            }
        }
        if (check_ok(p)) bad_check++;
        if (kvpool_n_free(p) != n_lifo) bad_rc++;
        if (op % 64 == 0)
            for (int b = 0; b < n_blocks; b++)
                if (kvpool_refcount(p, b) != ref[b]) bad_rc++;
    }
    CHECK_EQ_INT(bad_check, 0);
    CHECK_EQ_INT(bad_alloc, 0);
    CHECK_EQ_INT(bad_rc, 0);
    CHECK_MSG(n_exhausted > 0, "the random walk should exhaust the pool at least once (n_blocks %d)", n_blocks);
    free(ref);
    free(lifo);
    kvpool_free(p);
}

int main(void) {
    test_basic();
    test_hook();
    test_panics();
    test_random(1, 2000);
    test_random(7, 20000);
    test_random(64, 50000);
    return test_summary("test_kvpool");
}
