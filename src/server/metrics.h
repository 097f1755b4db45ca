/*
 * metrics.h — the Prometheus text exposition of /metrics: HTTP request
 * counters and the latency histograms (time to first token, time per
 * output token) kept here, observed from each finished generation's
 * timings; engine counters read from a snapshot (sched/engine.h).
 *
 * Thread safety: metrics_count and metrics_observe may be called from any
 * HTTP thread; render from any thread.
 */
#ifndef KVLOOM_METRICS_H
#define KVLOOM_METRICS_H

#include "../sched/engine.h"
#include "http.h"

typedef struct metrics metrics;

metrics *metrics_new(void);
void metrics_free(metrics *m); /* NULL is a no-op */
/* Counts one answered request by HTTP status (kvloom_requests_total{status}). */
void metrics_count(metrics *m, int status);
/* Observes one finished generation: seconds from submission to its first
 * token, and per output token after the first (each < 0: none). */
void metrics_observe(metrics *m, double ttft_s, double tpot_s);
/* A moving average of the recent times to first token (seconds; 0 before
 * the first): what GET /load reports for a balancer's TTFT estimate. */
double metrics_ttft_recent(metrics *m);
/* The share of the KV pool a new request cannot have: blocks held by running
 * or waiting requests or pins, not the idle prefix cache (0-1). */
double metrics_kv_usage(const engine_stats *st);
/* Appends the whole exposition (text/plain; version=0.0.4) to out: the
 * engine metrics of n models (st[i]), each sample labelled
 * model="names[i]" (names NULL: one model served, n 1, no label), then the
 * server's own (HTTP, latency histograms) once. */
void metrics_render(metrics *m, const engine_stats *st, const char *const *names, int n, sbuf *out);

#endif
