/*
 * req.h — one generation request as the HTTP side and the engine share it.
 *
 * Place in the flow: sched/. An HTTP thread fills a req (prompt tokens,
 * sampling parameters, limits), submits it to the engine (engine.h), then
 * reads the tokens the engine posts until the request finishes. The engine
 * thread owns everything about *how* the request runs (blocks, sampler,
 * scheduling state, see engine.c); the req carries only the contract:
 *
 *   HTTP thread                         engine thread
 *   ───────────                         ─────────────
 *   req_new, fill the input fields
 *   engine_submit ────────────────────▶ queued (WAITING)
 *                                       step ... sched__req_post_token ─┐
 *   req_wait ◀────────────────── (mutex + condvar) ◀────────────────────┘
 *   req_cancel (client gone)  ────────▶ seen at the next step, blocks freed
 *   req_stop (stop string seen) ──────▶ finished as "stop" at the next step
 *                                       sched__req_post_finish
 *   req_unref                           req_unref
 *
 * Lifetime: refcounted; the creator holds one reference and engine_submit
 * takes one more. The input fields are written before submission and are
 * read-only afterwards. The output (tokens, finish) is guarded by the req's
 * mutex and only grows: tokens are appended, never changed, and the finish
 * record is written once, after the last token.
 */
#ifndef KVLOOM_REQ_H
#define KVLOOM_REQ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../grammar/grammar.h"
#include "../sample/sample.h"

#define REQ_MAX_TOP_LOGPROBS 20
/* The start of a finish error that is the request's own doing: its
 * grammar's masks took longer than the engine's budget (engine.h
 * mask_budget_us; the server answers 400, not 500). */
#define REQ_ERR_MASK_BUDGET "the grammar's masks took"

typedef enum req_finish {
    REQ_RUNNING = 0,   /* not finished yet                                      */
    REQ_FINISH_STOP,   /* end-of-generation token, or a stop string (req_stop)  */
    REQ_FINISH_LENGTH, /* max_tokens or the context / KV capacity reached       */
    REQ_FINISH_CANCEL, /* req_cancel: the client went away                      */
    REQ_FINISH_ERROR,  /* an internal failure; `error` says what                */
} req_finish;

/* One generated token and, when asked for, its log-probabilities. */
typedef struct req_token {
    int32_t id;
    float logprob;                           /* valid when n_logprobs >= 0 */
    int n_top;                               /* entries in top_*           */
    int32_t top_ids[REQ_MAX_TOP_LOGPROBS];
    float top_lps[REQ_MAX_TOP_LOGPROBS];
} req_token;

typedef struct req {
    /* ---- input: written by the creator before engine_submit ---- */
    int32_t *prompt;       /* (n_prompt) token ids, owned by the req             */
    int n_prompt;          /* >= 1                                               */
    sampler_params sp;     /* checked by the creator                             */
    int max_tokens;        /* >= 1; the engine also stops at its context limit   */
    bool ignore_eos;       /* do not stop at end-of-generation tokens            */
    int n_logprobs;        /* -1: none; 0..REQ_MAX_TOP_LOGPROBS: chosen + top-n  */
    grammar *grammar;      /* output constraint (one reference, owned) or NULL   */
    char *grammar_trigger; /* NULL: the grammar holds from the first token; else
                              it holds from the first occurrence of this text in
                              the output on (a lazy grammar; owned)             */
    bool no_jump_forward;  /* sample forced runs token by token (benchmarks)     */
    /* logit_bias: added to these tokens' logits before sampling, after the
     * grammar's mask (a masked token stays masked); -INFINITY bans one.
     * (n_bias) ids < n_vocab and values, owned by the req (freed with it). */
    int32_t *bias_ids;
    float *bias_vals;
    int n_bias;
    bool no_spec;          /* no speculative decoding for this request           */
    bool no_stall;         /* exempt from engine_opts.stall_timeout_ms: its reader
                              takes its tokens only in turn (a fork of a
                              non-streamed n > 1 answer, read after the ones
                              before it); its client's socket is watched
                              instead                                        */
    const char *trigger_skip_open;  /* a lazy grammar's trigger does not count  */
    const char *trigger_skip_close; /* between these (static strings, e.g. the
                                       reasoning of "<think>" ... "</think>")  */
    bool trigger_skip_now; /* the output starts between them (prompt opened it) */
    /* Fairness between clients (sched/policy.h; engine_impl.h, "Fair admission"): who sent it (a
     * hash of the API key, else of `user`, else of the peer address; 0: the
     * anonymous client, all such requests one client) and its priority
     * class (0: interactive, the default and the highest; larger values are
     * served only when no smaller one waits, and yield to them). */
    uint64_t client;
    int priority;
    int client_slot;       /* the engine's entry for `client` (set by engine_submit) */
    /* The prefix cache's partition: blocks computed under one salt are
     * matched only by requests of the same salt (0: the shared one), in
     * RAM and on disk (issue 26 finding 12). */
    uint64_t cache_salt;
    int64_t t_submit_ns;   /* clock_ns() at submission (set by engine_submit)    */
    uint64_t serial;       /* unique per engine (set by engine_submit)           */
    /* KV lifetime (kvpolicy.h; the agent policy only) */
    bool kv_pin;           /* pin the blocks when it ends (a turn to be extended) */
    uint64_t kv_session;   /* hash of prompt_cache_key / user (0: none)          */
    double kv_ttl_s;       /* < 0: predicted; 0: no pin (and drop the session's) */
    double kv_next_use_s;  /* < 0: unknown; else the client's predicted return   */
    bool kv_done;          /* kv_hint "done": no pin, the session's pin dropped  */
    /* Embedding (set embd to ask for one; the req frees it): the prompt is
     * run, nothing is generated, and the pooled final hidden state
     * (n_embd floats, not normalised) is written here before the finish
     * record (REQ_FINISH_STOP). Decoders pool the last token. */
    float *embd;

    /* ---- control: any thread ---- */
    atomic_bool cancel;    /* set by req_cancel                                  */
    atomic_bool stop;      /* set by req_stop                                    */
    atomic_int refs;
    atomic_int n_read;     /* tokens the reader has taken: req_wait's n_seen (the
                              engine cancels a request whose posted tokens stay
                              untaken for engine_opts.stall_timeout_ms)         */
    atomic_bool reader_blocked; /* its reader stopped taking tokens: what it
                              holds for its client passed a byte bound
                              (--park-bytes); the engine parks it at once
                              rather than after park_ms                         */

    /* ---- output: guarded by `mu`, written by the engine thread ---- */
    void *sync;            /* mutex + condvar (private to req.c)                 */
    req_token *tokens;     /* (n_tokens) generated so far                        */
    int n_tokens, cap_tokens;
    req_finish finish;     /* REQ_RUNNING until sched__req_post_finish           */
    int n_cached;          /* prompt tokens served from the prefix cache         */
    int64_t t_first_ns;    /* clock_ns() of the first generated token (0: none)  */
    /* written by the engine thread before the finish record (read them after
     * req_wait reports the finish): */
    int n_forced;          /* generated tokens appended by jump-forward          */
    int n_forward_steps;   /* forward passes that ran this request's tokens      */
    int n_preemptions;     /* times its blocks were taken back (pool out, or a
                              fair yield) and it went back to waiting        */
    char error[256];       /* message when finish == REQ_FINISH_ERROR            */
} req;

/* A new request with one reference, taking ownership of `prompt` (malloc'd,
 * n_prompt >= 1 tokens). Sampling parameters default to sampler_defaults();
 * max_tokens to INT32_MAX; n_logprobs to -1. */
req *req_new(int32_t *prompt, int n_prompt);
void req_ref(req *r);
/* Drops a reference; the last one frees the request. NULL is a no-op. */
void req_unref(req *r);

/* Any thread: ask the engine to drop the request (client disconnected). */
void req_cancel(req *r);
/* Any thread: ask the engine to finish the request as "stop" (the reader
 * found a stop string in the text). */
void req_stop(req *r);

/* ---- engine thread ----
 * The writer side (sched__req_post_token, sched__req_post_finish,
 * sched__req_set_cached) is declared in sched_internal.h: only the engine
 * calls it. */

/* ---- reader (HTTP thread) ---- */
/* Waits until more than `n_seen` tokens exist or the request finished, for at
 * most timeout_ms (< 0: no limit). Returns the current token count and writes
 * the finish state to *finish (REQ_RUNNING while running). Tokens [0, count)
 * may be read from r->tokens after this returns: they never change. Because
 * the array may grow (realloc) under the mutex, copy what you need with
 * req_copy_tokens instead of keeping pointers. */
int req_wait(req *r, int n_seen, int timeout_ms, req_finish *finish);
/* A reader that takes tokens through req_wait tells the engine how far it has
 * read with every call (n_seen, stored in r->n_read): a streaming reader
 * that is pulled only when its client's socket takes bytes stops calling
 * it when the client stops reading, and that is how a never-reading client
 * is seen (engine_opts.stall_timeout_ms). */
/* Copies tokens [from, from+n) into out (n entries). */
void req_copy_tokens(req *r, int from, int n, req_token *out);
/* Snapshot of the finish record (reason, cached count, error message). */
req_finish req_get_finish(req *r, int *n_cached, char *error, size_t error_size);

#endif
