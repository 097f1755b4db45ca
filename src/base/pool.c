/*
 * pool.c — worker threads for kernels (see pool.h).
 *
 * A task has nth = n_threads shares. The shares of the current generation
 * are claimed from one atomic word, `claim` = (generation << 32) | next
 * share, each on its own cache line apart from the completion counter:
 *
 *   owner:   fn, arg = ...; n_done = 0; claim = (gen+1) << 32  (release)
 *            then claims and runs shares like a worker, then spins until
 *            n_done == nth (acquire)
 *   worker:  waits until claim's generation changes; then, while a share is
 *            left, CASes claim from (gen, i) to (gen, i+1), runs share i and
 *            increments n_done (release)
 *
 * Claiming instead of a fixed share per thread means a worker that is off
 * the CPU (an oversubscribed machine) costs nothing: the owner runs its
 * share. Share i is still run exactly once per generation, so callers may
 * use ith to index per-share scratch. A CAS tagged with the generation can
 * only succeed while that generation's shares are not all done, so a late
 * worker never runs a share of a finished task; fn/arg are read after a
 * successful claim, when the owner cannot be rewriting them.
 *
 * No mutex is taken on this path. Waiting escalates in three steps so the
 * pool behaves both on an idle machine (decode syncs hundreds of times per
 * token: a wake-up must cost well under a microsecond) and on a busy one:
 * pause-spin for SPIN_PAUSE rounds, then sched_yield between checks, and
 * after SPIN_YIELD_NS of that a worker sleeps on a condition variable;
 * `n_sleeping` tells the owner whether a broadcast is needed; it is checked
 * after the generation is published and a sleeper re-checks the generation
 * under the mutex, so no wake-up is lost.
 */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "base.h"

#define SPIN_PAUSE 4096             /* pause rounds before yielding          */
#define SPIN_YIELD_NS 2000000       /* yield-spin this long before sleeping  */
#define CACHE_LINE 64

struct pool {
    /* read-mostly: the task of the current generation */
    int n_threads;
    pthread_t *threads;
    pool_fn fn;
    void *arg;
    _Alignas(CACHE_LINE) _Atomic uint64_t claim; /* gen << 32 | next share */
    _Atomic int stop;
    _Alignas(CACHE_LINE) _Atomic int n_done;
    _Alignas(CACHE_LINE) _Atomic int n_sleeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct worker_arg {
    pool *p;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static inline unsigned claim_gen(uint64_t c) { return (unsigned)(c >> 32); }

/* Claims and runs shares of generation g until none is left. */
static void run_shares(pool *p, unsigned g) {
    const int nth = p->n_threads;
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    while (claim_gen(c) == g && (int)(uint32_t)c < nth) {
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire))
            continue; /* c was reloaded */
        p->fn(p->arg, (int)(uint32_t)c, nth);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *worker_main(void *vp) {
    worker_arg wa = *(worker_arg *)vp;
    free(vp);
    pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        int64_t yield_start = 0;
        while ((g = claim_gen(atomic_load_explicit(&p->claim, memory_order_acquire))) == seen) {
            if (spins < SPIN_PAUSE) {
                spins++;
                cpu_relax();
                continue;
            }
            if (yield_start == 0) yield_start = clock_ns();
            if (clock_ns() - yield_start < SPIN_YIELD_NS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (claim_gen(atomic_load(&p->claim)) == seen) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
            yield_start = 0;
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        run_shares(p, g);
    }
}

pool *pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    pool *p = xaligned_alloc(sizeof *p);
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = xcalloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = xmalloc(sizeof *wa);
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) PANIC("pthread_create failed");
    }
    return p;
}

static void wake_sleepers(pool *p) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void pool_free(pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->claim, (uint64_t)1 << 32);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int pool_size(const pool *p) { return p ? p->n_threads : 1; }

void pool_run(pool *p, pool_fn fn, void *arg) {
    if (!p || p->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    const unsigned g = claim_gen(atomic_load_explicit(&p->claim, memory_order_relaxed)) + 1;
    atomic_store(&p->claim, (uint64_t)g << 32); /* seq_cst: before the n_sleeping check */
    if (atomic_load(&p->n_sleeping) > 0) wake_sleepers(p);
    run_shares(p, g);
    const int want = p->n_threads;
    int spins = 0;
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) < want) {
        if (++spins < SPIN_PAUSE) {
            cpu_relax();
        } else {
            if (atomic_load(&p->n_sleeping) > 0) wake_sleepers(p);
            sched_yield();
        }
    }
}
