/*
 * metrics.h — the Prometheus text exposition of /metrics: HTTP request
 * counters kept here, engine counters and histograms read from a snapshot
 * (sched/engine.h).
 *
 * Thread safety: metrics_count may be called from any HTTP thread; render
 * from any thread.
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
/* Appends the whole exposition (text/plain; version=0.0.4) to out. */
void metrics_render(metrics *m, const engine_stats *st, http_buf *out);

#endif
