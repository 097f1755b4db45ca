/*
 * engine_impl.h — the engine's state, shared by the files of the engine
 * thread: engine.c (the step: admission, batching, preemption, sampling),
 * engine_disk.c (the disk tier's protocol, engine_disk.h), engine_grammar.c
 * (constrained decoding, engine_grammar.h) and policy.c's callers. Not for
 * use outside src/sched/ (engine.h is the contract).
 *
 * Cross-file functions carry the sched__ prefix (sched_internal.h).
 *
 * Thread: the engine thread, except the fields marked otherwise (under
 * engine.mu or engine.mk_mu, or atomic).
 */
#ifndef KVLOOM_ENGINE_IMPL_H
#define KVLOOM_ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../kv/disk.h"
#include "../kv/kvpool.h"
#include "../kv/radix.h"
#include "../sample/sample.h"
#include "dmodel.h"
#include "draft.h"
#include "engine.h"
#include "kvpolicy.h"
#include "policy.h"
#include "sched_internal.h"

/* Jump-forward: at most this many bytes of a forced run are appended at once. */
#define ENGINE_FORCED_MAX 1024

/* A request as the engine holds it, grouped by concern. Every group reads
 * `r` (the request: prompt, sampling parameters, limits, where tokens are
 * posted), so it stays at the top with the sequence's identity. */
typedef struct seq {
    /* identity */
    req *r;
    uint64_t order;      /* arrival number: lower is older                     */
    uint64_t salt;       /* the prefix cache's partition (req.cache_salt): its
                            tree paths and its disk keys' first seed       */
    char fail[256];      /* why it failed with REQ_FINISH_ERROR, when not the default */
    /* tokens and positions */
    struct {
        int32_t *ids;    /* (n) prompt followed by generated tokens            */
        int n, cap;
        int n_computed;  /* positions with K/V in the cache                    */
        int n_generated;
        int n_prefill_end; /* positions < this count as prompt work (metrics)  */
    } tok;
    /* KV blocks */
    struct {
        int32_t *blocks; /* block table, one pool reference per entry          */
        uint8_t *pending; /* blocks[i] is indexed PENDING by this sequence     */
        int n_blocks, cap_blocks;
        int n_indexed;   /* leading full blocks the tree holds READY for us    */
    } kv;
    /* the disk tier (engine_disk.h) */
    struct {
        uint64_t *keys;  /* (n_keys) prefix hash of each full block (kv/disk.h) */
        int n_keys, cap_keys;
        int n_done;      /* leading indexed blocks offered to the disk         */
        int *load_slot;  /* (n_loading) disk reads of blocks[n_load_from ..]   */
        int cap_load_slot;
        int n_loading, n_load_from;
        bool tried;      /* looked in the disk index since admission/preemption */
    } disk;
    /* output: sampling and the grammar (engine_grammar.h) */
    struct {
        sampler *smp;
        gmatch *gm;      /* the grammar's state after the tokens, or NULL      */
        bool gm_failed;  /* a lazy grammar's trigger came with text it refuses */
        bool gm_start;   /* the grammar's opening forced run is still to append
                            (its grammar was busy at submission)            */
        char *trig;      /* lazy grammar: the newest output bytes (trigger scan) */
        int n_trig;
        bool in_skip;    /* between trigger_skip_open and _close               */
        int64_t mask_ns; /* time its grammar masks took (mask_over_budget)     */
        int n_masks;
        struct mjob *mj; /* its next mask on the mask worker, or NULL          */
        grammar *g_locked; /* its grammar, while the engine thread holds its lock */
        float *held;     /* (n_vocab) its logits row while it sits out waiting
                            for its mask, when held_ok                       */
        bool held_ok;
    } out;
    /* speculative decoding: the drafter's state, and this step's drafts
     * (positions tok.n.., run after the last token, verified in
     * step_advance; they never enter tok.ids unless sampled) */
    struct {
        draft_seq *ds;
        dmodel_seq *dms; /* the draft model's state (--spec draft), or NULL    */
        int32_t draft[DRAFT_MAX];
        int n_draft;
    } spec;
    /* scheduling, accounting and parking (policy.h reads these) */
    struct {
        bool running;
        bool admitted_once; /* prompt metrics and cached count recorded        */
        bool resumes;    /* agent policy: it extends a pinned turn (arrived back) */
        bool parked;     /* its reader took nothing for park_ms: not admitted
                            until it has taken every posted token             */
        uint64_t sched_step; /* the step that last put it in a batch           */
        uint64_t prev_sched; /* sched_step before that (policy_decode_share)   */
        uint64_t wait_from; /* step of admission or of its last prefill chunk  */
        uint64_t tried_step; /* the step admission last tried it in (fair_pick) */
        int64_t wait_start_ns; /* submitted, or last preempted (policy_overdue) */
        /* backpressure (stall_timeout_ms): the reader's n_read when last seen
         * to move, and since when posted tokens have waited without it moving */
        int stall_n_read;
        int64_t stall_since_ns; /* 0: nothing waits for the reader            */
    } sch;
} seq;

typedef struct seq_list {
    seq **v;
    int n, cap;
} seq_list;

/* Fair admission (the rules: policy.h). A client (req.client) with
 * requests queued or running
 * has an entry here; the table has room for every request the engine can
 * hold at once (max_queue + max_running + 1, at most ENGINE_MAX_CLIENTS),
 * so a request finds its client's entry or makes one, and an entry is free
 * again once its last request finished. Why this shape:
 *   - the order of admission is (priority class, the client's running
 *     sequences, the client's served tokens, arrival): a client that floods
 *     the queue gets its turn after every other client with work got one,
 *     whatever the order of arrival (first-come-first-served let 300 parked
 *     streams of one client delay another's 4-token completion by ~128 s,
 *     issue 26 finding 7); `served` (the tokens computed for it) breaks the
 *     ties toward the client that got less, and a new client starts at the
 *     least served of the active ones (virtual time), so coming and going
 *     gives no credit;
 *   - being first in the order is not enough when the flooder holds every
 *     slot or block with long generations: then the newest sequence of the
 *     client furthest above its share (max_running over the clients with
 *     work) is preempted, one per step, so the other client starts within
 *     a step or two (work conserving: with nobody else waiting, one client
 *     may use the whole engine). A larger priority class yields the same
 *     way to a smaller one. The preempted sequence keeps its output and its
 *     blocks stay in the cache: it costs a recompute of at most a block.
 * Threads: id, used, fresh, n_inflight under en->mu (engine_submit counts
 * a client's waiting requests); n_running is written by the engine thread
 * and read by engine_submit; served and n_prefilling are the engine
 * thread's. */
#define ENGINE_MAX_CLIENTS 65536
typedef struct client {
    uint64_t id;
    bool used;
    bool fresh;          /* its `served` is not set yet (take_submitted does) */
    int n_inflight;      /* submitted and not finished                         */
    atomic_int n_running;
    double served;       /* tokens computed for it (virtual time)              */
    int n_prefilling;    /* running sequences still prefilling (this step)     */
    uint64_t seen_step;  /* fair_yield's count of the clients with work        */
    int kv_blocks;       /* the blocks its running hold (clients_kv_count)     */
    double pf_vt;        /* prefill tokens scheduled for it (prefill order)     */
    atomic_int kv_held;  /* blocks its running sequences hold (client_max_kv)  */
    atomic_int n_parked; /* its parked sequences (client_max_parked)           */
    uint64_t pf_step;    /* the last step it had a prefill to schedule          */
    /* the mask worker's share (policy_mask_defer), under engine.mk_mu: */
    double mk_charge;    /* forward time of its tokens + its masks' CPU (ns,
                            decayed to mk_at)                                 */
    int64_t mk_at;
    uint64_t mk_pub;     /* engine.mk_pub when it last had running sequences  */
    int mk_runnable;     /* then: its running sequences not waiting for a mask */
} client;

struct mjob;

struct engine {
    const model *m;
    engine_opts o;
    int n_ctx;
    kvpool *pool;
    radix *tree;
    model_kv *kv;
    model_state *st;
    float *logits;       /* (max_running, n_vocab)                              */
    /* batch scratch (max_batch_tokens / max_running entries) */
    int32_t *b_tok, *b_pos, *b_seq;
    uint8_t *b_logits;
    model_seq *b_seqs;
    seq **b_owner;       /* sequence of each batch sequence slot               */
    int *b_chunk;        /* tokens of that sequence in the batch               */
    int32_t *scratch;    /* block ids for radix_insert                          */
    int scratch_cap;
    uint64_t *mask;      /* (n_vocab/64 rounded up) allowed tokens of a grammar  */
    char *forced;        /* (ENGINE_FORCED_MAX) a forced run's bytes            */
    int32_t *forced_ids; /* (ENGINE_FORCED_MAX) and its tokens                  */
    drafter *dr;         /* speculative decoding's drafter, or NULL            */
    draft_cost cost;     /* the steps' times: what one more token costs        */
    int spec_rows;       /* draft tokens per step at most (extra logits rows)  */
    dmodel *dm;          /* the draft model's runner (--spec draft), or NULL   */
    float *spec_p;       /* (n_vocab) the target's distribution at a verified row */
    double dm_ms;        /* a one-token draft forward's time (decayed mean)    */
    double dm_ratio;     /* its cost against the target's before it is measured */

    seq_list running;    /* in arrival order                                    */
    seq_list waiting;    /* in arrival order (preempted ones keep theirs)       */
    uint64_t next_order;
    uint64_t step_no;

    pthread_t thread;
    pthread_mutex_t mu;  /* guards submitq, stop, stats, n_waiting_shared       */
    pthread_cond_t cv;
    req **submitq;
    int64_t *submit_ns;  /* (cap_submitq) each one's submission, engine clock  */
    int n_submitq, cap_submitq;
    bool stop;
    bool preempted_this_step; /* no admission right after a preemption (thrash) */
    int n_waiting_shared;
    engine_stats stats;  /* published copy (under mu)                         */
    engine_stats cnt;    /* the engine thread's own counters                  */
    int n_blocks;        /* pool size, constant                                */
    kvdisk *disk;        /* the disk tier, or NULL                             */
    kvpolicy *pol;       /* the agent KV policy's pins, or NULL (LRU)          */
    uint64_t next_serial;/* req.serial (under mu)                              */
    struct {
        uint64_t serial;
        char tool[64];
    } toolq[64];         /* engine_turn_tool's news (under mu)                 */
    int n_toolq;
    /* kv_hint prefetch (disk tier): contexts whose agent said when it is
     * back; their spilled blocks are read back ENGINE_HINT_LEAD_S before */
    struct hint {
        uint64_t session;
        int64_t start_ns;  /* start reading at                               */
        int64_t return_ns; /* the agent's predicted return                   */
        seq *s;            /* tokens (whole blocks) and the reads in flight  */
        bool loaded;       /* some blocks were read back                     */
    } *hints;
    int n_hints;
    /* fair admission (the client table above) */
    client *clients;
    int cap_clients, hi_clients; /* capacity; entries [0, hi) were ever used */
    int n_clients;               /* used entries (under mu)                    */
    uint64_t n_client_refused;   /* engine_submit's refusals at client_max_queued (under mu) */
    double pf_v;                 /* the least pf_vt of the clients prefilling last step */
    int kv_limit;                /* client_max_kv in blocks (0: none)              */
    int park_ms;                 /* park_ms as applied (below stall_timeout_ms)     */
    /* the scheduling rules' inputs (policy.h): the limits, and the views of
     * the waiting (cap_pw) and running (max_running) sequences */
    policy_limits lim;
    policy_client *pcl;          /* (cap_clients) client_start_locked's view  */
    policy_waiting *pw;
    int cap_pw;
    policy_running *pr;
    policy_prefill *pp;
    policy_row *pd;              /* (max_running) decode_share's rows        */
    bool *pd_out;
    engine_plan_row *plan_rows;  /* (max_running) plan_hook's rows, or NULL          */
    /* the mask worker ("Masks off the engine thread"); mk_on false: none */
    bool mk_on;
    pthread_t mk_thread;
    pthread_mutex_t mk_mu; /* guards mk_queue, mk_stop and every mjob's state */
    pthread_cond_t mk_cv;
    struct mjob *mk_queue;
    bool mk_stop;
    uint64_t mask_gen;   /* masks the worker finished (under mu: wakes the engine) */
    /* the clients' share of it (policy_mask_defer; sched__mask_share_*),
     * under mk_mu: published after every step */
    uint64_t mk_pub;     /* publications so far                                */
    double mk_total;     /* the charges of the clients with running sequences
                            (ns, decayed to mk_total_at)                      */
    int64_t mk_total_at;
    int mk_n_active;     /* those clients                                      */
    int mk_n_runnable;   /* their running sequences not waiting for a mask     */
    policy_mask_job *mk_pick; /* (cap_mk_pick) the worker's view of its queue  */
    int cap_mk_pick;
    atomic_uint_fast64_t mk_deferred_total; /* masks computed after being deferred */
    int n_held;          /* running sequences sitting out for their mask       */
};

static inline client *seq_client(engine *en, const seq *s) { return &en->clients[s->r->client_slot]; }

/* The scheduling clock (engine_opts.clock): ns, monotonic. */
static inline int64_t sched__now(const engine *en) { return en->o.clock(en->o.clock_ctx); }

/* engine.c's helpers for the other engine files */

/* Gives s room for n tokens and their blocks, disk keys and read slots at
 * once; false: out of memory (s keeps what it had). */
bool sched__seq_reserve(engine *en, seq *s, int n);
/* s's block table becomes the n_matched blocks in en->scratch (their
 * references taken over) and n_new fresh ones (the pool has them free). */
void sched__seq_take_blocks(engine *en, seq *s, int n_matched, int n_new);
/* Drops every block of s (its PENDING ones leave the tree first). */
void sched__seq_release_blocks(engine *en, seq *s);
/* Frees a sequence's memory (its blocks already released). */
/* Ends s's speculation: its drafter state and draft model's go (nothing
 * learnt from them), s decodes one token a step from now on. */
void sched__seq_spec_drop(seq *s);
void sched__seq_free(seq *s);
/* Makes sure the pool has n free blocks, evicting (and yielding the pins
 * `why` allows); false when it cannot. */
bool sched__ensure_free(engine *en, int n, kvpol_yield_for why);
/* en->scratch holds at least n block ids. */
void sched__scratch_reserve(engine *en, int n);
/* Appends one generated token (not end-of-generation) to s and its req. */
void sched__push_generated(engine *en, seq *s, const req_token *t);

#endif
