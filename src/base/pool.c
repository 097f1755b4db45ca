/*
 * pool.c — worker threads for kernels (see pool.h).
 *
 * Dispatch: the owner publishes (fn, arg), then increments `gen` (release).
 * Each worker waits for gen to change — spinning for a while, then sleeping
 * on a condition variable — runs its share, and increments `n_done`. The
 * owner runs share 0 and spins until n_done == n_workers.
 */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base.h"

#define SPIN_ITERS 200000

struct pool {
    int n_threads;
    pthread_t *threads;
    pool_fn fn;
    void *arg;
    _Atomic unsigned gen;
    _Atomic int n_done;
    _Atomic int stop;
    _Atomic int n_sleeping;
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
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->gen) == seen) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&p->stop)) return NULL;
        p->fn(p->arg, wa.ith, p->n_threads);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
    }
}

pool *pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    pool *p = xcalloc(1, sizeof *p);
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

static void publish(pool *p) {
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    if (atomic_load(&p->n_sleeping) > 0) pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void pool_free(pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    publish(p);
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
    /* Fast path: when no worker sleeps, a plain increment suffices. */
    if (atomic_load(&p->n_sleeping) == 0)
        atomic_fetch_add(&p->gen, 1); /* seq_cst: ordered before the re-check below */
    else
        publish(p);
    /* a worker may have gone to sleep between the check and the increment */
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->n_threads);
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) < p->n_threads - 1) cpu_relax();
}
