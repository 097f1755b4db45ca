/*
 * kvpolicy.h — agent-aware KV lifetime: pins with a time-to-live on the
 * blocks of a finished turn, so that an agent coming back from a tool call
 * finds its context in the cache (Continuum), released furthest predicted
 * return first when the pool needs the memory (KVFlow), with the TTL
 * predicted from the gaps the server has observed.
 *
 * Place in the flow: sched/, on the engine thread only. The engine hands a
 * finished sequence's indexed (READY) blocks to kvpolicy_pin together with
 * their pool references; the pin keeps those references, so the radix tree
 * never sees the blocks as evictable while the pin lives. A pin ends:
 *
 *   resumed    a request whose prompt extends the pinned sequence (or of
 *              the same session) was admitted: the gap since the turn's end
 *              is observed, the pin's references dropped (the request holds
 *              its own by then);
 *   expired    its TTL passed (kvpolicy_expire, every step);
 *   yielded    the pool needs blocks and nothing unpinned is evictable
 *              (kvpolicy_yield: the pin whose predicted return is furthest
 *              away goes first) — pins never make a request wait or fail;
 *   superseded the same session pinned a newer turn;
 *   hint       the client said the context is done (kv_hint "done").
 *
 * TTL prediction: the gap between a turn's end and the request that resumes
 * it is observed per tool name (the first call of a turn that ended in a
 * tool call), per session (prompt_cache_key / user) and overall; each is an
 * exponential moving average. A new pin's TTL is
 *   clamp(TTL_FACTOR * gap + TTL_SLACK_S + TTL_ERR_MULT * err, TTL_MIN_S,
 *         ttl_max_s)
 * with the gap of the tool if known, else of the session, else overall,
 * else ttl_default_s; err is the mean |predicted - observed| gap of the
 * pins resumed so far (0 before any): the margin widens when returns
 * scatter around their average (an EMA of gaps drawn from 2-6 s predicts
 * 3 s after a few short ones, and the 6 s agent would find its pin gone). A request may set the TTL (kv_ttl, seconds) or the
 * predicted return (kv_hint next_use_s) itself. A tool name known only after
 * the pin (the server parses calls after the engine finished) re-predicts
 * the pin's TTL from then on (kvpolicy_set_tool).
 *
 * Bounded storage: at most KVPOLICY_MAX_PINS pins (the oldest is released
 * when one more comes), and fixed-size tables of gap averages (a new key
 * takes over a slot when its hash collides).
 */
#ifndef KVLOOM_KVPOLICY_H
#define KVLOOM_KVPOLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "../kv/kvpool.h"
#include "../kv/radix.h"

#define KVPOLICY_MAX_PINS 1024
#define KVPOLICY_TTL_FACTOR 1.5
#define KVPOLICY_TTL_SLACK_S 1.0
#define KVPOLICY_TTL_ERR_MULT 2.0
#define KVPOLICY_TTL_MIN_S 1.0

typedef enum kvpolicy_reason {
    KVPOL_RESUMED = 0,
    KVPOL_EXPIRED,
    KVPOL_YIELDED,
    KVPOL_SUPERSEDED,
    KVPOL_HINT,
    KVPOL_N_REASONS
} kvpolicy_reason;

/* Names of the reasons (metrics labels). */
extern const char *const kvpolicy_reason_names[KVPOL_N_REASONS];

typedef struct kvpolicy_stats {
    int n_pins;                      /* live pins                               */
    int n_pinned_refs;               /* block references they hold              */
    int n_tails;                     /* of them, partial last blocks (no tree   */
                                     /* indexes them: kvpolicy_pin_tail)       */
    uint64_t released[KVPOL_N_REASONS];
    double ttl_error_sum_s;          /* |predicted - observed| gap, resumed pins */
    uint64_t ttl_error_count;
    uint64_t gaps_observed;
} kvpolicy_stats;

typedef struct kvpolicy kvpolicy;

/* A policy over pool (references are dropped there). Every TTL, given by
 * the client or predicted, is at most ttl_max_s (<= 0: 60 s), which also
 * bounds how long a returned pin waits for its request's admission.
 * ttl_default_s is the TTL before any gap was observed (<= 0: 10 s; at most
 * the cap; the engine passes 0). */
kvpolicy *kvpolicy_new(kvpool *pool, double ttl_max_s, double ttl_default_s);
/* Releases every pin (drops its references) and frees. NULL is a no-op. */
void kvpolicy_free(kvpolicy *p);

/* Pins blocks[0..n) (n >= 1), taking over one pool reference on each, at
 * time now_ns. session: a hash of the client's session key (0: none);
 * tool: the turn's tool name or NULL; ttl_s >= 0 sets the TTL (< 0:
 * predicted); next_use_s >= 0 says when the client expects to come back (<
 * 0: unknown, the TTL is the prediction). owner: an opaque tag (e.g. the
 * request) for kvpolicy_set_tool. A pin of the same session is superseded.
 * Returns the TTL given, in seconds. */
double kvpolicy_pin(kvpolicy *p, const int32_t *blocks, int n, uint64_t session, const char *tool, double ttl_s,
                    double next_use_s, uint64_t owner, int64_t now_ns);

/* A pinned turn's partial last block (copy-on-write, docs/kv-cache.md, "A
 * partial last block"): `block` (no tree indexes it) holds the K/V of
 * tokens[0..n_rows) (1 <= n_rows), the positions right after the blocks of
 * the pin of `owner` (owner != 0). That pin takes its own pool reference on
 * the block and a copy of the tokens, and drops the reference when it ends,
 * however it ends (counted in n_pinned_refs and in what kvpolicy_yield
 * returns). Returns false, changing nothing, when owner has no pin or its
 * pin has a tail already. */
bool kvpolicy_pin_tail(kvpolicy *p, uint64_t owner, int32_t block, const int32_t *tokens, int n_rows);

/* The tail (kvpolicy_pin_tail) of a pin whose blocks are exactly
 * blocks[0..n) (n >= 1; pinned blocks stay indexed, so the last id names
 * the prefix) whose tokens share the longest leading run with
 * tokens[0..n_avail): returns its block (no reference taken) and the run in
 * *n_rows (>= 1); -1 and 0 when no tail shares the first token. */
int32_t kvpolicy_find_tail(const kvpolicy *p, const int32_t *blocks, int n, const int32_t *tokens, int n_avail,
                           int *n_rows);

/* The tool of the turn `owner` pinned became known: the pin's TTL is
 * predicted again for that tool (unless it was given). */
void kvpolicy_set_tool(kvpolicy *p, uint64_t owner, const char *tool, int64_t now_ns);

/* A request was admitted with blocks[0..n) matched from the cache: the pin
 * whose last block is among them, or else of its session (if session != 0),
 * is resumed (the gap observed, the pin released). Returns whether one was. */
bool kvpolicy_resume(kvpolicy *p, const int32_t *blocks, int n, uint64_t session, int64_t now_ns);

/* A request arrived whose prompt extends a pin (blocks[0..n) are the
 * prompt's blocks the cache holds, or a request of its session): its agent
 * is back. The gap is observed now (queueing is not the tool's time) and the
 * pin yields last from now on; it is released by kvpolicy_resume when the
 * request is admitted. Returns whether a pin matched. */
bool kvpolicy_returned(kvpolicy *p, const int32_t *blocks, int n, uint64_t session, int64_t now_ns);

/* Releases the pins of session (kv_hint "done"). Returns how many. */
int kvpolicy_release_session(kvpolicy *p, uint64_t session);

/* Releases the pins whose TTL has passed. Returns how many. */
int kvpolicy_expire(kvpolicy *p, int64_t now_ns);

/* The pool needs memory: releases the pin whose predicted return is
 * furthest away. Returns the number of references it dropped (0: no pin).
 * For running work (KVPOL_FOR_RUNNING) an overdue pin goes first, the most
 * overdue first (its agent is later than predicted by more than max(1 s,
 * the mean prediction error): the pin of an agent's last turn, which nobody
 * comes back for, is the usual case; ordering it by its predicted return,
 * now past, would keep it until the last while contexts due back in seconds
 * were taken).
 * For a new conversation (KVPOL_FOR_NEW), protected pins are not released: those whose agent has returned, and those with a predicted
 * return (a gap was observed for them) until they expire (the TTL is the
 * gap with a margin: 1.5 x gap + 1 s). A pin without a prediction is
 * protected until it expires only while pins come back: while (resumed + 1)
 * / (resumed + expired + yielded + 2) >= KVPOLICY_PROTECT_MIN_RATE, so that
 * agents get their first gaps observed, and traffic that never resumes its
 * turns soon gets the memory as under LRU.
 * KVPOL_FOR_NEW_IDLE (nothing runs: waiting for a pin would leave the cores
 * idle) also takes a protected pin whose agent is overdue — later than its
 * predicted return by more than max(1 s, the mean prediction error so far)
 * — the most overdue first (an agent's last turn leaves a pin that nobody comes
 * back for); a pin whose agent is not yet due, or has returned, still
 * waits. */
typedef enum {
    KVPOL_FOR_RUNNING,  /* running work or a returning agent: any pin,     */
                        /* overdue ones first                            */
    KVPOL_FOR_NEW,      /* a new conversation: unprotected pins only       */
    KVPOL_FOR_NEW_IDLE, /* the same while the engine has nothing to run:   */
                        /* also a protected pin whose agent is overdue     */
} kvpol_yield_for;
int kvpolicy_yield(kvpolicy *p, int64_t now_ns, kvpol_yield_for why);
#define KVPOLICY_PROTECT_MIN_RATE 0.25

/* Eviction order: which cached block goes back to the pool first when the
 * engine needs blocks (engine.c evict; the whole order, in one place):
 *
 *   0. Never: a block a sequence holds (running, waiting for its disk
 *      reads, or a kv_hint prefetch), a PENDING block being computed, and
 *      a parent while it has a child: none is an evictable leaf (refcount
 *      > 1, or children). Pins hold a reference too (below).
 *   1. TTL: a pin whose TTL passed was released by kvpolicy_expire at the
 *      start of the step (and a returned, resumed, superseded or "done"
 *      one when that happened); its blocks are then plain cache, in 2.
 *   2. Unpinned leaves, least recently used first: the smallest radix
 *      last_use (a match, an insert or a release through the node), ties
 *      to the lower block id; a parent whose last child went joins the
 *      order with its own last_use (radix.h, "Recency").
 *   3. When no unpinned leaf is left, one pin at a time yields (kvpolicy_yield,
 *      in the order above for `why`: running work takes the most overdue
 *      pin first, then the furthest predicted return, returned agents'
 *      last; a new conversation only unprotected pins, furthest return
 *      first; one while nothing runs also an overdue protected pin). The
 *      yielded pin's partial last block goes back at once; its indexed
 *      blocks become plain cache and go by 2 (LRU among themselves and
 *      with any other), before the next pin yields.
 *   Without the agent policy (p NULL) there are no pins: 2 alone.
 *
 * The disk tier does not change the order: every full indexed block was
 * offered to the disk when it was computed (write-through), so evicting
 * one costs a disk read later instead of a recompute; the store deletes
 * its own files oldest first past its size (kv/disk.h). Beyond the cache,
 * a running sequence short of a block then takes back waiting sequences'
 * disk-read blocks and finally preempts policy_kv_victim (engine.c
 * alloc_block, reserve_decode_slots; policy.h).
 *
 * kvpolicy_evict frees up to n blocks in that order (p may be NULL) and
 * returns how many the pool got back (a yielded pin's partial block
 * counts). */
int kvpolicy_evict(kvpolicy *p, radix *t, kvpool *pool, int n, int64_t now_ns, kvpol_yield_for why);

/* The TTL a new pin would get now (tests, logs). */
double kvpolicy_predict_ttl(const kvpolicy *p, uint64_t session, const char *tool);

void kvpolicy_get_stats(const kvpolicy *p, kvpolicy_stats *out);

/* A session key's hash (never 0 for a non-empty key; 0 for NULL/""). */
uint64_t kvpolicy_session_hash(const char *key);

#endif
