/*
 * metrics.c — Prometheus text format for /metrics (see metrics.h).
 *
 * Names: kvloom_requests_running, kvloom_requests_waiting,
 * kvloom_prompt_tokens_total, kvloom_prompt_tokens_cached_total,
 * kvloom_prompt_tokens_computed_total, kvloom_kv_partial_tokens_total,
 * kvloom_generation_tokens_total,
 * kvloom_preemptions_total, kvloom_requests_stalled_total, kvloom_clients,
 * kvloom_fair_preemptions_total, kvloom_fair_decode_deferred_total,
 * kvloom_client_refused_total,
 * kvloom_requests_parked(_total),
 * kvloom_kv_blocks_{used,total,cached},
 * kvloom_constrained_tokens_total, kvloom_forced_tokens_total,
 * kvloom_grammar_mask_seconds_total, kvloom_decode_passes_total,
 * kvloom_spec_{drafted,accepted}_tokens_total{drafter}, kvloom_spec_global_{outputs,bytes,evicted_total}
 * (with --spec),
 * kvloom_kv_disk_blocks, kvloom_kv_disk_bytes,
 * kvloom_kv_disk_{read,written}_bytes_total, kvloom_kv_disk_restored_tokens_total,
 * kvloom_kv_disk_rejected_total{reason="corrupt"|"foreign"},
 * kvloom_kv_disk_write_errors_total, kvloom_kv_disk_writes_dropped_total,
 * kvloom_time_to_first_token_seconds, kvloom_time_per_output_token_seconds
 * (histograms) and kvloom_requests_total{status}.
 *
 * Beside them, the names the Kubernetes Gateway API Inference Extension's
 * endpoint picker (llm-d) and other gateways read from vLLM-compatible
 * servers (docs/scale-out.md): vllm:num_requests_running,
 * vllm:num_requests_waiting, vllm:kv_cache_usage_perc (0-1),
 * vllm:cache_config_info{block_size=...}, vllm:prefix_cache_queries_total and
 * vllm:prefix_cache_hits_total (tokens).
 */
#include "../sched/draft.h"
#include "../sched/kvpolicy.h"
#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define METRICS_MAX_CODES 32

#define METRICS_HIST_BUCKETS 14
/* A Prometheus-style histogram: counts[i] = observations <= le[i] (not
 * cumulative here; the renderer accumulates); the +Inf bucket is `count`. */
typedef struct hist_t {
    const double *le;
    uint64_t counts[METRICS_HIST_BUCKETS];
    double sum;
    uint64_t count;
} hist_t;

static const double ttft_le[METRICS_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                     1,     2.5,  5,     10,   20,  40,  80};
static const double tpot_le[METRICS_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05,
                                                     0.075, 0.1,    0.15,  0.2,  0.3,  0.5,  1};

struct metrics {
    pthread_mutex_t mu;
    hist_t ttft, tpot;
    double ttft_recent; /* exponential moving average, weight 1/8 */
    int codes[METRICS_MAX_CODES];
    unsigned long long counts[METRICS_MAX_CODES];
    int n_codes;
};

metrics *metrics_new(void) {
    metrics *m = xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.le = ttft_le;
    m->tpot.le = tpot_le;
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_count(metrics *m, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_codes && m->codes[i] != status) i++;
    if (i == m->n_codes && m->n_codes < METRICS_MAX_CODES) m->codes[m->n_codes++] = status;
    if (i < m->n_codes) m->counts[i]++;
    pthread_mutex_unlock(&m->mu);
}

/* A label value with Prometheus's escapes (\\, \", \n) into out. */
static void label_value(const char *v, char *out, size_t cap) {
    size_t k = 0;
    for (; *v && k + 3 < cap; v++) {
        if (*v == '\\' || *v == '"') out[k++] = '\\';
        if (*v == '\n') {
            out[k++] = '\\';
            out[k++] = 'n';
        } else {
            out[k++] = *v;
        }
    }
    out[k] = 0;
}

/* The labels of model i's samples: {model="NAME",extra} (names NULL: one
 * model served, unlabelled: {extra}, or nothing without extra). */
static void labels(const char *const *names, int i, const char *extra, char *out, size_t cap) {
    char v[600];
    if (names) label_value(names[i], v, sizeof v);
    if (names) snprintf(out, cap, "{model=\"%s\"%s%s}", v, extra ? "," : "", extra ? extra : "");
    else if (extra) snprintf(out, cap, "{%s}", extra);
    else out[0] = 0;
}

static void head(sbuf *b, const char *name, const char *help, const char *type) {
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(sbuf *b, const char *name, const char *const *names, int i, const char *extra, double v) {
    char lab[700];
    labels(names, i, extra, lab, sizeof lab);
    sbuf_printf(b, "%s%s %.17g\n", name, lab, v);
}

/* One metric: its header, then one sample per model, `expr` read from
 * `s`, that model's statistics. */
#define EACH(b, name, help, type, expr)                                                                                \
    do {                                                                                                               \
        head(b, name, help, type);                                                                                     \
        for (int i_ = 0; i_ < n; i_++) {                                                                               \
            const engine_stats *s = &st[i_];                                                                           \
            sample(b, name, names, i_, NULL, (double)(expr));                                                          \
        }                                                                                                              \
    } while (0)

static void hist_observe(hist_t *h, double x) {
    for (int i = 0; i < METRICS_HIST_BUCKETS; i++)
        if (x <= h->le[i]) {
            h->counts[i]++;
            break;
        }
    h->sum += x;
    h->count++;
}

void metrics_observe(metrics *m, double ttft_s, double tpot_s) {
    pthread_mutex_lock(&m->mu);
    if (ttft_s >= 0) {
        hist_observe(&m->ttft, ttft_s);
        m->ttft_recent = m->ttft.count == 1 ? ttft_s : m->ttft_recent + (ttft_s - m->ttft_recent) / 8;
    }
    if (tpot_s >= 0) hist_observe(&m->tpot, tpot_s);
    pthread_mutex_unlock(&m->mu);
}

double metrics_ttft_recent(metrics *m) {
    pthread_mutex_lock(&m->mu);
    double v = m->ttft_recent;
    pthread_mutex_unlock(&m->mu);
    return v;
}

double metrics_kv_usage(const engine_stats *st) {
    if (st->kv_blocks_total <= 0) return 0;
    int held = st->kv_blocks_used - st->kv_blocks_idle;
    return held <= 0 ? 0 : (double)held / st->kv_blocks_total;
}

/* The gateway names (vLLM's), from the same snapshot as kvloom's own. */
static void render_gateway(const engine_stats *st, const char *const *names, int n, sbuf *b) {
    EACH(b, "vllm:num_requests_running", "Requests running (= kvloom_requests_running).", "gauge", s->n_running);
    EACH(b, "vllm:num_requests_waiting", "Requests waiting (= kvloom_requests_waiting).", "gauge", s->n_waiting);
    EACH(b, "vllm:kv_cache_usage_perc",
         "KV pool share held by requests and pins, 0-1 (the idle prefix cache counts as free).", "gauge",
         metrics_kv_usage(s));
    head(b, "vllm:cache_config_info", "KV cache configuration (labels).", "gauge");
    for (int i = 0; i < n; i++) {
        char extra[200];
        snprintf(extra, sizeof extra, "block_size=\"%d\",num_gpu_blocks=\"%d\",cache_dtype=\"%s\","
                 "enable_prefix_caching=\"True\"", st[i].kv_block_tokens, st[i].kv_blocks_total,
                 model_kv_type_name((model_kv_type)st[i].kv_type));
        sample(b, "vllm:cache_config_info", names, i, extra, 1);
    }
    EACH(b, "vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", "counter",
         (double)s->prompt_tokens_total);
    EACH(b, "vllm:prefix_cache_hits_total", "Of those, tokens found (RAM or disk tier).", "counter",
         (double)s->prompt_tokens_cached_total);
}

/* (called with m->mu held) */
static void hist(sbuf *b, const char *name, const char *help, const hist_t *h) {
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    unsigned long long acc = 0;
    for (int i = 0; i < METRICS_HIST_BUCKETS; i++) {
        acc += h->counts[i];
        sbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], acc);
    }
    sbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
                    (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

/* A speculative-decoding counter, one sample per model labelled with its
 * drafter: drafted, or accepted. */
static void spec_counter(sbuf *b, const char *name, const char *help, const engine_stats *st,
                         const char *const *names, int n, bool accepted) {
    head(b, name, help, "counter");
    for (int i = 0; i < n; i++) {
        char extra[64];
        snprintf(extra, sizeof extra, "drafter=\"%s\"", draft_kind_name((draft_kind)st[i].spec_kind));
        const uint64_t *v = accepted ? st[i].spec_accepted_tokens_total : st[i].spec_drafted_tokens_total;
        sample(b, name, names, i, extra, (double)v[st[i].spec_kind]);
    }
}

void metrics_render(metrics *m, const engine_stats *st, const char *const *names, int n, sbuf *b) {
    EACH(b, "kvloom_requests_running", "Requests admitted to the engine and not finished.", "gauge", s->n_running);
    EACH(b, "kvloom_requests_waiting", "Requests queued, preempted or waiting for a shared block.", "gauge",
         s->n_waiting);
    EACH(b, "kvloom_prompt_tokens_total", "Prompt tokens of admitted requests.", "counter",
         (double)s->prompt_tokens_total);
    EACH(b, "kvloom_prompt_tokens_cached_total", "Prompt tokens served from the prefix cache.", "counter",
         (double)s->prompt_tokens_cached_total);
    EACH(b, "kvloom_kv_partial_tokens_total",
         "Of the cached prompt tokens, those copied from a partially matching block (copy-on-write).", "counter",
         (double)s->kv_partial_tokens_total);
    EACH(b, "kvloom_prompt_tokens_computed_total",
         "Prompt tokens run through the model (prefill, including recomputation after preemption).", "counter",
         (double)s->prompt_tokens_computed_total);
    EACH(b, "kvloom_generation_tokens_total", "Generated tokens.", "counter", (double)s->generation_tokens_total);
    EACH(b, "kvloom_preemptions_total", "Sequences preempted because the KV pool was full.", "counter",
         (double)s->preemptions_total);
    EACH(b, "kvloom_engine_steps_total", "Batches run by the engine.", "counter", (double)s->steps_total);
    EACH(b, "kvloom_requests_stalled_total",
         "Requests cancelled because their client took none of their output for --stall-timeout seconds.",
         "counter", (double)s->stalled_total);
    EACH(b, "kvloom_clients", "Clients (API keys, users, addresses) with requests queued or running.", "gauge",
         s->n_clients);
    EACH(b, "kvloom_fair_preemptions_total",
         "Sequences preempted so that a client below its fair share (or a smaller priority class) could start.",
         "counter", (double)s->fair_preemptions_total);
    EACH(b, "kvloom_fair_decode_deferred_total",
         "Decode tokens that sat out a step because their client had more tokens in it than any other client.",
         "counter", (double)s->decode_deferred_total);
    EACH(b, "kvloom_client_refused_total",
         "Requests refused (429) at a per-client limit: --client-max-queued, --client-max-kv, --client-max-parked.",
         "counter", (double)s->client_refused_total);
    EACH(b, "kvloom_requests_parked",
         "Requests parked: their client took none of their output for --park-timeout; they hold no slot and no KV "
         "block until it reads, and are cut at --stall-timeout.",
         "gauge", s->n_parked);
    EACH(b, "kvloom_requests_parked_total", "Times a request was parked (--park-timeout).", "counter",
         (double)s->parked_total);
    head(b, "kvloom_memory_bytes",
         "Memory by part: weights (mapped read-only), kv_pool (allocated at start), requests (queued and running "
         "requests' tokens, tables, samplers and posted output), grammar_caches (of the grammars in use), grammar_idle "
         "(of the cached grammars no request holds; all cached ones together are bounded by --grammar-cache), kv_disk "
         "(the disk tier's buffers and index), scratch (the forward pass's buffers, logits rows and batch arrays, "
         "sized at start), tables (the tokenizer's and the grammar vocabulary's, the model file outside its "
         "tensors). Request bodies, stream buffers and stored responses: "
         "kvloom_http_body_bytes, kvloom_http_stream_bytes, kvloom_responses_stored_bytes; "
         "kvloom_memory_accounted_bytes sums them all.",
         "gauge");
    static const char *const parts[] = {"weights",      "kv_pool", "requests", "grammar_caches",
                                        "grammar_idle", "kv_disk", "scratch",  "tables"};
    for (int p = 0; p < 8; p++)
        for (int i = 0; i < n; i++) {
            char extra[40];
            snprintf(extra, sizeof extra, "part=\"%s\"", parts[p]);
            const engine_stats *s = &st[i];
            uint64_t v = p == 0   ? s->mem_weights
                         : p == 1 ? s->mem_kv_pool
                         : p == 2 ? s->mem_requests
                         : p == 3 ? s->mem_grammar_caches
                         : p == 4 ? s->mem_grammar_idle
                         : p == 5 ? s->mem_kv_disk
                         : p == 6 ? s->mem_scratch
                                  : s->mem_tables;
            sample(b, "kvloom_memory_bytes", names, i, extra, (double)v);
        }
    EACH(b, "kvloom_grammar_mask_budget_failed_total",
         "Requests failed because their grammar masks took more than --grammar-mask-budget per token.", "counter",
         (double)s->mask_budget_failed_total);
    EACH(b, "kvloom_grammar_mask_deferred_total",
         "Grammar masks held back on the mask worker while their client was past its share of the server's time.",
         "counter", (double)s->mask_deferred_total);
    EACH(b, "kvloom_grammar_mask_spec_dropped_total",
         "Constrained requests that stopped speculating (their masks went to the mask worker) for their client's share.",
         "counter", (double)s->mask_spec_dropped_total);
    EACH(b, "kvloom_constrained_tokens_total", "Tokens sampled under a grammar mask (tools, JSON schemas).", "counter",
         (double)s->constrained_tokens_total);
    EACH(b, "kvloom_forced_tokens_total", "Tokens appended by jump-forward without sampling.", "counter",
         (double)s->forced_tokens_total);
    /* speculative decoding: per drafter (only the server's --spec drafter
     * counts; the others stay 0) */
    bool spec = false;
    for (int i = 0; i < n; i++) spec |= st[i].spec_kind != DRAFT_OFF;
    if (spec) {
        spec_counter(b, "kvloom_spec_drafted_tokens_total", "Draft tokens verified by speculative decoding.", st, names,
                     n, false);
        spec_counter(b, "kvloom_spec_accepted_tokens_total",
                     "Draft tokens accepted (equal to the token sampled at their position).", st, names, n, true);
        EACH(b, "kvloom_spec_global_outputs", "Earlier outputs in the suffix drafter's global store.", "gauge",
             s->spec_global_seqs);
        EACH(b, "kvloom_spec_global_bytes", "Memory of the suffix drafter's global store.", "gauge",
             (double)s->spec_global_bytes);
        EACH(b, "kvloom_spec_global_evicted_total", "Outputs evicted from the suffix drafter's global store.",
             "counter", (double)s->spec_global_evicted_total);
    }
    EACH(b, "kvloom_decode_passes_total",
         "Sequence-steps that sampled a token (generated tokens per pass: speculative decoding's gain).", "counter",
         (double)s->decode_passes_total);
    EACH(b, "kvloom_grammar_mask_seconds_total", "Time spent computing grammar masks.", "counter",
         (double)s->mask_ns_total / 1e9);
    EACH(b, "kvloom_kv_blocks_total", "KV blocks in the pool.", "gauge", s->kv_blocks_total);
    EACH(b, "kvloom_kv_blocks_used", "KV blocks holding a reference (requests or the prefix cache).", "gauge",
         s->kv_blocks_used);
    EACH(b, "kvloom_kv_blocks_cached", "KV blocks indexed by the prefix cache.", "gauge", s->kv_blocks_cached);
    EACH(b, "kvloom_kv_disk_blocks", "KV blocks on disk (--kv-disk).", "gauge", (double)s->kv_disk_blocks);
    EACH(b, "kvloom_kv_disk_bytes", "Bytes of the KV block files on disk.", "gauge", (double)s->kv_disk_bytes);
    EACH(b, "kvloom_kv_disk_read_bytes_total", "Bytes of KV block files read back from disk.", "counter",
         (double)s->kv_disk_read_bytes_total);
    EACH(b, "kvloom_kv_disk_written_bytes_total", "Bytes of KV block files written to disk.", "counter",
         (double)s->kv_disk_written_bytes_total);
    EACH(b, "kvloom_kv_disk_restored_tokens_total",
         "Prompt tokens whose KV was read back from disk instead of recomputed.", "counter",
         (double)s->kv_disk_restored_tokens_total);
    EACH(b, "kvloom_kv_hint_prefetched_tokens_total",
         "Of those, tokens read back ahead of an agent's return announced by kv_hint next_use_s.", "counter",
         (double)s->kv_hint_prefetched_tokens_total);
    head(b, "kvloom_kv_disk_rejected_total",
         "KV block files never served: corrupt (deleted) or of another model or format version (ignored).", "counter");
    for (int i = 0; i < n; i++) {
        sample(b, "kvloom_kv_disk_rejected_total", names, i, "reason=\"corrupt\"",
               (double)st[i].kv_disk_rejected_corrupt_total);
        sample(b, "kvloom_kv_disk_rejected_total", names, i, "reason=\"foreign\"",
               (double)st[i].kv_disk_rejected_foreign_total);
    }
    EACH(b, "kvloom_kv_disk_write_errors_total", "KV block writes that failed (a full disk): recomputed later.",
         "counter", (double)s->kv_disk_write_errors_total);
    EACH(b, "kvloom_kv_disk_writes_dropped_total", "KV blocks not written: the I/O queue was full or a file is "
         "larger than --kv-disk-size.", "counter", (double)s->kv_disk_writes_dropped_total);
    EACH(b, "kvloom_kv_evicted_blocks_total", "Cached KV blocks given back to the pool (least recently used first).",
         "counter", (double)s->kv_evicted_blocks_total);
    EACH(b, "kvloom_kv_pins", "Finished turns whose KV blocks are pinned for the agent's return (--kv-policy agent).",
         "gauge", s->kv_pins);
    EACH(b, "kvloom_kv_pinned_blocks", "KV block references held by pins.", "gauge", s->kv_pinned_blocks);
    EACH(b, "kvloom_kv_pinned_partial_blocks",
         "Of them, pinned turns' partial last blocks (used, not indexed by the prefix tree).", "gauge",
         s->kv_pinned_partial_blocks);
    head(b, "kvloom_kv_pins_released_total",
         "Pins ended, by reason: resumed (the agent came back), expired (TTL), yielded (the pool needed the blocks), "
         "superseded (a newer turn of the session), hint (kv_hint done / kv_ttl 0).", "counter");
    for (int i = 0; i < n; i++)
        for (int r = 0; r < KVPOL_N_REASONS; r++) {
            char extra[64];
            snprintf(extra, sizeof extra, "reason=\"%s\"", kvpolicy_reason_names[r]);
            sample(b, "kvloom_kv_pins_released_total", names, i, extra, (double)st[i].kv_pins_released_total[r]);
        }
    EACH(b, "kvloom_kv_ttl_error_seconds_sum", "Sum over resumed pins of |predicted - observed| return gap.", "counter",
         s->kv_ttl_error_seconds_sum);
    EACH(b, "kvloom_kv_ttl_error_seconds_count", "Resumed pins whose return gap was predicted.", "counter",
         (double)s->kv_ttl_error_count);
    pthread_mutex_lock(&m->mu);
    hist(b, "kvloom_time_to_first_token_seconds", "Time from submission to the first generated token.", &m->ttft);
    hist(b, "kvloom_time_per_output_token_seconds", "Time per generated token after the first.", &m->tpot);
    pthread_mutex_unlock(&m->mu);
    render_gateway(st, names, n, b);
    sbuf_printf(b, "# HELP kvloom_requests_total HTTP requests answered, by status.\n"
                       "# TYPE kvloom_requests_total counter\n");
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < m->n_codes; i++)
        sbuf_printf(b, "kvloom_requests_total{status=\"%d\"} %llu\n", m->codes[i], m->counts[i]);
    pthread_mutex_unlock(&m->mu);
}
