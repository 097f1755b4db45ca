/*
 * engine.h — the engine thread: continuous batching over a paged KV cache
 * with a radix prefix cache.
 *
 * Place in the flow: sched/. HTTP threads hand it tokenized requests
 * (req.h) through engine_submit; one engine thread owns the scheduler, the
 * KV pool (kv/kvpool.h), the radix tree (kv/radix.h), the model state and
 * every sampler, runs model_forward over one ragged batch per step and posts
 * each sampled token back to its req.
 *
 * Request states (engine.c):
 *
 *   submit ─▶ WAITING ──admit──▶ PREFILL ──last prompt token──▶ DECODE ─▶ DONE
 *               ▲  │ (prefix matched,     (chunks under the        │
 *               │  │  blocks allocated)     token budget)           │
 *               │  └─ joined a PENDING block: waits until READY     │
 *               └────────────── PREEMPTED (pool full: blocks freed, ┘
 *                               generated tokens kept, recomputed later)
 *
 * A cancelled request (req_cancel) leaves from any state at the next step.
 *
 * Thread safety: engine_submit and engine_get_stats may be called from any
 * thread; everything else happens on the engine thread.
 */
#ifndef KVLOOM_ENGINE_H
#define KVLOOM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../model/model.h"
#include "req.h"

typedef bool (*engine_eog_fn)(void *ctx, int32_t token);
/* Tokenizes `n` bytes of generated text (no BOS, special tokens parsed) into
 * at most cap ids; returns the full count (like tok_encode). */
typedef int (*engine_tokenize_fn)(void *ctx, const char *text, size_t n, int32_t *out, int cap);
/* A token's bytes (like tok_piece). */
typedef int (*engine_piece_fn)(void *ctx, int32_t token, char *buf, int cap);

struct engine_plan_row;

typedef struct engine_opts {
    int n_threads;          /* kernel worker threads (>= 1)                       */
    size_t kv_mem_bytes;    /* KV pool size in bytes (>= one block per ctx)       */
    model_kv_type kv_type;  /* the cache's element type (f16: 0, the default)     */
    int block_tokens;       /* tokens per KV block (16)                           */
    int max_batch_tokens;   /* token budget of one step (>= 1)                    */
    int max_running;        /* sequences in one batch at most (>= 1)              */
    int max_queue;          /* waiting requests beyond this: engine_submit refuses */
    int n_ctx;              /* positions per sequence (prompt + generated)        */
    engine_eog_fn is_eog;   /* end-of-generation test (NULL: none)                */
    void *eog_ctx;
    /* Constrained decoding (req.grammar): the vocabulary's byte trie for the
     * masks, and the tokenizer for jump-forward and lazy-grammar triggers.
     * A request with a grammar needs all three (engine_submit refuses it
     * otherwise). */
    const gvocab *gvocab;
    engine_tokenize_fn tokenize;
    engine_piece_fn piece;
    void *tok_ctx;
    bool check;             /* run kvpool_check/radix_check after every step      */
    /* Disk tier (kv/disk.h): NULL = off. Every block that becomes READY is
     * written through to DIR; a prompt's blocks beyond the RAM match that are
     * on disk are read back at admission instead of recomputed. */
    const char *kv_disk_dir;
    uint64_t kv_disk_max_bytes; /* size cap of DIR's block files; 0 = none        */
    int step_delay_us;      /* testing: sleep this long after every step          */
    int mask_spin_us;       /* testing: every grammar mask also spins this long on
                               the CPU (a slow grammar whatever the grammar
                               engine's speed: the mask budget's test)       */
    /* KV lifetime (kvpolicy.h): ENGINE_KV_LRU keeps nothing beyond the radix
     * tree's recency order; ENGINE_KV_AGENT pins a finished turn's blocks
     * (req.kv_pin) for a predicted TTL, at most kv_ttl_max_s (> 0). */
    int kv_policy;
    double kv_ttl_max_s;
    /* Agent policy: a waiting request (new, or preempted) that waited this
     * long is served like running work and nobody is admitted past it
     * (0: kv_ttl_max_s, at most ENGINE_NEW_WAIT_MAX_MS: one pin's lifetime.
     * 10 s made every first turn of a loaded server, queued 20-30 s behind
     * others' prefills, take the pins of agents about to return). */
    int new_wait_max_ms;
    /* Backpressure: a request whose reader has taken none of its posted
     * tokens for this long (req.n_read did not move while tokens waited) is
     * cancelled, its blocks freed: a client that never reads its stream
     * costs at most this much engine time and, because the request ends, at
     * most its context's worth of posted tokens. 0: never. */
    int stall_timeout_ms;
    /* Speculative decoding (draft.h): the drafter (DRAFT_OFF: none), tokens
     * per proposal at most (1..DRAFT_MAX), and the cost of one more token
     * in a step relative to the step's fixed cost, which decides how many
     * drafts pay at a given batch size (0: learnt from the steps' times,
     * draft_cost; ENGINE_SPEC_TOKEN_COST until they determine it). */
    int spec;
    int spec_max;
    double spec_token_cost;
    /* spec DRAFT_MODEL: the draft model (the model's vocabulary; it must
     * outlive the engine), run by the engine thread (sched/dmodel.h) with
     * its own KV pool of as many blocks as this one. */
    const model *draft_model;
    /* Benchmarking only (`kvloom bench --spec-e2e`, cli/bench_spec.c; serve
     * and run never set it): with spec ngram or suffix, a decoding
     * sequence's drafts come from this function instead of the drafter's
     * proposal (up to `max` tokens after r's context tokens[0, n); returns
     * the count), and every one of them is verified (the cost policy is
     * skipped; free KV blocks and the step's rows still cut them). The
     * forward over 1 + k positions, the verification, the rollback of the
     * rejected drafts' K/V and the streaming stay the engine's own. */
    int (*spec_drafts)(void *ctx, const req *r, const int32_t *tokens, int n, int max, int32_t *out);
    void *spec_drafts_ctx;
    /* Fairness between clients (req.client; sched/policy.h and engine_impl.h, "Fair admission").
     * Waiting requests are admitted lowest priority class first, then the
     * client with the fewest running sequences, then the one served the
     * fewest tokens, then in arrival order; when slots or blocks run out
     * and a client below its fair share (max_running over the clients with
     * work) waits, the newest sequence of the client furthest above its
     * share (or of a larger priority class) is preempted: one per step.
     * client_max_running: running sequences per client at most (0: only
     * the fair share's rule); client_max_queued: a client's waiting
     * requests beyond this are refused by engine_submit (ERR_RANGE; 0: only
     * max_queue). */
    int client_max_running;
    int client_max_queued;
    /* Per-client limits (issue 26), each refused by engine_submit with
     * ERR_RANGE and a message naming it (the server answers 429):
     * client_max_kv: the share of the pool's blocks (0..1; 0: none) a
     * client's running sequences may hold — at or past it its new requests
     * are refused, and its waiting ones are admitted only within it (one
     * at a time when it runs nothing); client_max_parked: a client's parked
     * requests (below) at most (0: none).
     * park_ms: a running request whose reader has taken none of its posted
     * tokens for this long is parked: preempted (slot and blocks given back,
     * its output kept, its full blocks cached) and not admitted again until
     * its reader has taken everything posted; stall_timeout_ms then cuts it
     * (0: never parked; at most half of stall_timeout_ms when that is set). */
    double client_max_kv;
    int client_max_parked;
    int park_ms;
    /* Grammar masks (issue 26 finding 1): a request whose masks take more
     * than this per constrained token on average (after 8 tokens' worth of
     * allowance) fails with REQ_ERR_MASK_BUDGET (engine_grammar.c,
     * sched__mask_over_budget). 0: no budget. */
    int mask_budget_us;
    /* Masks inside the step, on the engine thread (the reference path:
     * tests compare the worker's output with it). Default false: a
     * mask worker thread computes them overlapped with the forward pass
     * (engine_grammar.c, "Masks off the engine thread"); a speculating
     * sequence's masks stay inside the step until its client is past its
     * share (policy_mask_defer), then it stops speculating. */
    bool mask_sync;
    /* No decode share between clients (policy_decode_share): every running
     * client's decode rows run in every step (for a server whose clients
     * trust each other and want throughput). */
    bool no_decode_share;
    /* Testing: called on the engine thread after every step's plan, with
     * the batch's rows (engine_plan_row), before the forward pass; it may
     * call engine_submit (the request arrives at the next step). Makes a
     * scheduler test step-exact without timing (test_engine_fair). */
    void (*plan_hook)(void *ctx, uint64_t step, const struct engine_plan_row *rows, int n);
    void *plan_hook_ctx;
    /* The scheduling clock, ns on a monotonic scale (NULL: CLOCK_MONOTONIC,
     * clock_ns): the waits, stalls, parking, pins' lifetimes and kv_hint
     * times the scheduling rules read (sched/policy.h). A test passes its
     * own to replay a schedule without sleeping (test_engine_sched). Called
     * on the engine thread, and by engine_submit (any thread, under the
     * engine's lock). The times the engine measures for costs (masks, a
     * step's forward for speculation) and req.t_submit_ns / t_first_ns
     * stay on CLOCK_MONOTONIC. */
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
} engine_opts;

/* One sequence's part of a step (engine_opts.plan_hook). */
typedef struct engine_plan_row {
    const req *r;
    int n_tokens;   /* its tokens in the step                                  */
    bool prefill;   /* a prompt (or recompute) chunk, not one decode token     */
} engine_plan_row;

enum { ENGINE_KV_LRU = 0, ENGINE_KV_AGENT = 1 };
#define ENGINE_NEW_WAIT_MAX_MS 60000
/* One more token in a decode step, relative to the step's fixed cost of
 * reading the weights, until the engine has learnt it from its own steps
 * (docs/perf.md, "Speculative decoding": 0.01-0.03 on 1B models). */
#define ENGINE_SPEC_TOKEN_COST 0.05

/* Defaults: 1 thread, 64 MiB, 16-token blocks, 512-token budget, 64 running,
 * 256 queued, n_ctx 0 (= the model's n_ctx_train), no EOG test, no checks,
 * no speculation (spec_max 8 when it is turned on). */
engine_opts engine_defaults(void);


typedef struct engine_stats {
    int n_running;                  /* admitted and not finished                  */
    int n_waiting;                  /* queued, preempted or waiting on a block    */
    uint64_t prompt_tokens_total;   /* prompt tokens of admitted requests         */
    uint64_t prompt_tokens_cached_total;   /* of which served from the cache      */
    uint64_t prompt_tokens_computed_total; /* prompt tokens run through the model */
    uint64_t kv_partial_tokens_total; /* of the cached, rows copied from a partial
                                         block (docs/kv-cache.md)              */
    uint64_t generation_tokens_total;
    uint64_t preemptions_total;
    uint64_t constrained_tokens_total;  /* tokens sampled under a grammar mask   */
    uint64_t forced_tokens_total;       /* tokens appended by jump-forward       */
    uint64_t mask_ns_total;             /* time spent computing masks            */
    uint64_t steps_total;
    uint64_t forward_ns_total;      /* wall time of the steps' forward passes     */
    int kv_blocks_total;
    int kv_blocks_used;             /* blocks with a reference (tree or request)  */
    int kv_blocks_cached;           /* blocks indexed by the radix tree           */
    int kv_blocks_idle;             /* of them, held by nothing else (evictable)  */
    int kv_block_tokens;            /* tokens per block                           */
    int kv_type;                    /* model_kv_type of the cache                 */
    /* disk tier (all 0 without --kv-disk) */
    uint64_t kv_disk_blocks;        /* blocks on disk (indexed)                   */
    uint64_t kv_disk_bytes;         /* their bytes                                */
    uint64_t kv_disk_read_bytes_total, kv_disk_written_bytes_total;
    uint64_t kv_disk_restored_tokens_total; /* prompt tokens read back from disk  */
    uint64_t kv_hint_prefetched_tokens_total; /* of them, read ahead of a kv_hint */
    uint64_t kv_disk_rejected_corrupt_total, kv_disk_rejected_foreign_total;
    uint64_t kv_disk_write_errors_total;    /* failed writes (full disk ...)      */
    uint64_t kv_disk_writes_dropped_total;  /* not written: queue full or too big  */
    /* KV lifetime (the agent policy; kvpolicy.h) */
    uint64_t kv_evicted_blocks_total; /* blocks the radix tree gave back          */
    int kv_pins;                    /* live pins                                  */
    int kv_pinned_blocks;           /* block references they hold                 */
    int kv_pinned_partial_blocks;   /* of them, turns' partial last blocks        */
    uint64_t kv_pins_released_total[5]; /* by kvpolicy_reason                     */
    double kv_ttl_error_seconds_sum; /* |predicted - observed| return gap         */
    uint64_t kv_ttl_error_count;
    uint64_t stalled_total;         /* cancelled: the reader did not take tokens */
    /* speculative decoding (by draft_kind; all 0 with --spec off) */
    int spec_kind;                  /* the engine's drafter (draft_kind)          */
    uint64_t spec_drafted_tokens_total[4];  /* drafts verified                   */
    uint64_t spec_accepted_tokens_total[4]; /* of them, equal to the sampled token */
    uint64_t decode_passes_total;   /* sequence-steps that sampled (tokens per
                                       forward = generated / this)               */
    int spec_global_seqs;           /* outputs in the suffix drafter's store      */
    uint64_t spec_global_bytes;     /* its memory                                 */
    uint64_t spec_global_evicted_total;
    /* fairness between clients */
    int n_clients;                  /* clients with requests queued or running   */
    uint64_t fair_preemptions_total;   /* sequences preempted for a client below
                                          its share or a smaller priority class */
    uint64_t decode_deferred_total; /* decode rows that sat out a step for
                                       another client's share (decode_share)  */
    uint64_t client_refused_total;  /* engine_submit refusals at a per-client limit
                                       (client_max_queued, _kv, _parked)        */
    int n_parked;                   /* requests parked (their reader took nothing) */
    uint64_t parked_total;          /* times a request was parked                */
    uint64_t mask_budget_failed_total; /* requests failed: masks over mask_budget_us */
    uint64_t mask_deferred_total;   /* masks the worker computed after holding them
                                       back for their client's share (policy.h,
                                       "The mask worker's share between clients") */
    uint64_t mask_spec_dropped_total; /* constrained sequences that stopped
                                       speculating for their client's share      */
    /* memory (bytes; /metrics kvloom_memory_bytes{part}) */
    uint64_t mem_weights;           /* the model's tensors (mapped read-only)     */
    uint64_t mem_kv_pool;           /* the KV pool, allocated at start            */
    uint64_t mem_requests;          /* queued and running requests' state: tokens,
                                       block tables, disk keys, samplers, posted
                                       output (req_token arrays)                 */
    uint64_t mem_grammar_caches;    /* mask and DFA caches of the grammars the
                                       requests use now (each counted once)       */
    uint64_t mem_grammar_idle;      /* those of the cached grammars no request
                                       holds (filled by the server: models_stats) */
    uint64_t mem_kv_disk;           /* the disk tier's buffers and index         */
    uint64_t mem_scratch;           /* buffers sized at start: the forward pass's
                                       scratch, logits rows, batch arrays          */
    uint64_t mem_tables;            /* the tokenizer's and the grammar vocabulary's
                                       tables, the model file outside its tensors
                                       (filled by the server: models_stats)       */
    uint64_t mem_model_meta;        /* of mem_tables, the model file's bytes outside
                                       its tensors (mapped, not allocated)        */
} engine_stats;

typedef struct engine engine;

/* Creates the KV pool (kv_mem_bytes / model_kv_block_bytes blocks), the radix
 * tree and the model state, and starts the engine thread. `m` must outlive
 * the engine. Errors: ERR_INVALID for bad options (named), ERR_RANGE when the
 * KV memory holds fewer than 2 blocks or exceeds 90% of physical memory. */
int engine_new(const model *m, const engine_opts *o, engine **out, err_t *e);
/* Stops the thread: every request still known finishes as cancelled and
 * engine_submit refuses from then on (ERR_RANGE). Idempotent; the object
 * stays valid for concurrent engine_submit / engine_get_stats callers. */
void engine_stop(engine *en);
/* engine_stop, then frees everything. No other thread may use `en` then. */
void engine_free(engine *en);

/* Positions per sequence, and the number of tokens the whole pool holds. */
int engine_n_ctx(const engine *en);
int engine_capacity_tokens(const engine *en);

/* Queues a request (takes a reference on success). The caller has checked
 * r->n_prompt < engine_n_ctx and token ids. Returns 0, or ERR_RANGE when
 * the waiting queue already holds max_queue requests, or r->client's
 * client_max_queued (the message names the limit; the server answers 429),
 * or ERR_INVALID (named) when the request can never run (prompt longer
 * than the context or than the whole pool). */
int engine_submit(engine *en, req *r, err_t *e);

/* Any thread: the turn of r ended in a call to `tool` (the server parses
 * calls after the engine finished): its pin's TTL is predicted for that
 * tool from then on. A no-op without the agent policy. */
void engine_turn_tool(engine *en, const req *r, const char *tool);

/* A consistent snapshot of the counters. */
void engine_get_stats(engine *en, engine_stats *out);

#endif
