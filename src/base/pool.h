/*
 * pool.h — a fixed set of worker threads that run one parallel task at a time.
 *
 * Place in the flow: base/. The engine thread calls pool_run many times per
 * forward pass (a few times per layer), so a dispatch must be cheap: no
 * mutex on the hot path, workers spin on an atomic generation word (then
 * yield, then sleep when idle for milliseconds).
 *
 *   caller ── pool_run(fn, arg) ──▶ new generation ──▶ threads claim shares
 *      └─ claims shares itself too, then waits until every share is done.
 *
 * A task has exactly nth = pool_size shares, each run once, by whichever
 * thread claims it first (so a worker that is off the CPU delays nothing).
 * Callers may index per-share scratch by ith, but must not assume share ith
 * runs on thread ith. Only one thread (the owner) may call pool_run.
 */
#ifndef KVLOOM_POOL_H
#define KVLOOM_POOL_H

typedef struct pool pool;
typedef void (*pool_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 counts the caller: n_threads-1 workers are started. */
pool *pool_new(int n_threads);
void pool_free(pool *p); /* NULL is a no-op */
int pool_size(const pool *p);
/* Runs fn(arg, ith, nth) once for each ith in [0, nth), nth = pool_size(p),
 * spread over the pool's threads, and returns when all are done (their
 * writes are visible to the caller). p may be NULL: then fn(arg, 0, 1) runs
 * on the caller. */
void pool_run(pool *p, pool_fn fn, void *arg);

/* Splits [0, n) into nth near-equal contiguous parts; part ith is [*b, *e). */
static inline void pool_split(long n, int ith, int nth, long *b, long *e) {
    long per = n / nth, rem = n % nth;
    *b = ith * per + (ith < rem ? ith : rem);
    *e = *b + per + (ith < rem ? 1 : 0);
}

#endif
