/*
 * pool.h — a fixed set of worker threads that run one parallel task at a time.
 *
 * Place in the flow: base/. The engine thread calls pool_run many times per
 * forward pass (once per matmul/attention), so a dispatch must be cheap: the
 * workers spin briefly on an atomic generation counter before sleeping.
 *
 *   caller ── pool_run(fn, arg) ──▶ gen++ ──▶ workers wake, run fn(arg, i, n)
 *      └─ runs fn(arg, 0, n) itself, then waits until all workers are done.
 *
 * Only one thread (the owner) may call pool_run on a pool.
 */
#ifndef KVLOOM_POOL_H
#define KVLOOM_POOL_H

typedef struct pool pool;
typedef void (*pool_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 counts the caller: n_threads-1 workers are started. */
pool *pool_new(int n_threads);
void pool_free(pool *p); /* NULL is a no-op */
int pool_size(const pool *p);
/* Runs fn(arg, ith, nth) for ith in [0, nth) and returns when all are done.
 * p may be NULL: then fn(arg, 0, 1) runs on the caller. */
void pool_run(pool *p, pool_fn fn, void *arg);

/* Splits [0, n) into nth near-equal contiguous parts; part ith is [*b, *e). */
static inline void pool_split(long n, int ith, int nth, long *b, long *e) {
    long per = n / nth, rem = n % nth;
    *b = ith * per + (ith < rem ? ith : rem);
    *e = *b + per + (ith < rem ? 1 : 0);
}

#endif
