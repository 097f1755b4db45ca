/*
 * pool.c — worker threads for kernels (see pool.h).
 *
 * Dispatch is one atomic generation counter and one completion counter, each
 * on its own cache line (so the owner's polling of `n_done` never steals the
 * line the workers read `gen` from, and the read-only task fields share no
 * line with either):
 *
 *   owner:   fn, arg = ...; n_done = 0; gen++ (release) ──▶ runs share 0
 *            ──▶ spins until n_done == n_threads-1 (acquire)
 *   worker:  spins until gen changes (acquire) ──▶ runs its share
 *            ──▶ n_done++ (release)
 *
 * No mutex is taken on this path. Waiting escalates in three steps so the
 * pool behaves both on an idle machine (decode syncs hundreds of times per
 * token: a wake-up must cost well under a microsecond) and on an
 * oversubscribed one (a spinning thread must not keep the thread it waits
 * for off the CPU): pause-spin for SPIN_PAUSE rounds, then sched_yield
 * between checks, and after SPIN_YIELD_NS of that a worker sleeps on a
 * condition variable; `n_sleeping` tells the owner whether a broadcast is
 * needed, re-checked after the increment so a worker that went to sleep in
 * between is still woken.
 *
 * Invariants: only the owner writes fn/arg/gen and resets n_done; a worker
 * touches n_done once per generation; workers never run a generation twice.
 */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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
    _Alignas(CACHE_LINE) _Atomic unsigned gen;
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

static void *worker_main(void *vp) {
    worker_arg wa = *(worker_arg *)vp;
    free(vp);
    pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        int64_t yield_start = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
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
            while (atomic_load(&p->gen) == seen) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
            yield_start = 0;
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return NULL;
        p->fn(p->arg, wa.ith, p->n_threads);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
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
    atomic_fetch_add(&p->gen, 1);
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
    atomic_fetch_add(&p->gen, 1); /* seq_cst: ordered before the n_sleeping check */
    /* A worker that checked gen before the increment and then went to sleep
     * registered in n_sleeping under the mutex before waiting; it re-checks
     * gen under the mutex, so this broadcast (or its own check) wakes it. */
    if (atomic_load(&p->n_sleeping) > 0) wake_sleepers(p);
    fn(arg, 0, p->n_threads);
    const int want = p->n_threads - 1;
    int spins = 0;
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) < want) {
        if (++spins < SPIN_PAUSE) {
            cpu_relax();
        } else {
            /* a worker may be off the CPU (oversubscribed machine) or asleep */
            if (atomic_load(&p->n_sleeping) > 0) wake_sleepers(p);
            sched_yield();
        }
    }
}
