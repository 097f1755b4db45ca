/*
 * policy.h — the engine's scheduling rules, as pure functions over a small
 * state: which submissions a client's limits refuse, where a new client
 * starts in the fair order, who is admitted next and which waiting
 * sequences may be tried at all, what admission does before and after a
 * try, whose memory a waiting sequence may take (the pins it may make
 * yield), which running sequence gives its blocks back when the pool is out
 * of them or yields its slot to a client below its fair share, which
 * prefill gets the step's prefill budget, which decode rows sit out for
 * the decode share, which sequences a reader that takes nothing gets
 * parked or cut (the stall clock), and what a finished turn leaves pinned.
 *
 * Place in the flow: sched/. engine.c owns the state (sequences, clients,
 * the KV pool) and the mechanics (matching, allocating, preempting); before
 * each decision it describes the candidates in the structs below and asks
 * here. Nothing here reads a clock, a lock or the engine: time comes in as
 * `now` (the engine's clock, engine_opts.clock), so tests/test_policy.c
 * replays the rules step by step without sleeping.
 *
 * At submission (engine_submit): policy_submit_check refuses a request
 * past its client's limits; the engine thread then places a new client in
 * the fair order (policy_client_start). One step, as the engine applies
 * these rules (engine.c, step_plan):
 *
 *   readers        the stall clock (policy_stall_since) of every sequence;
 *                  policy_stalled ones are cut, policy_park running ones
 *                  parked, policy_unpark waiting ones unparked;
 *   decode tokens  every running sequence's next token first (oldest first;
 *                  when the pool has no block for one: policy_kv_victim is
 *                  preempted, and cached blocks are evicted before that,
 *                  in kvpolicy.h's "Eviction order" for KVPOL_FOR_RUNNING);
 *   admission      pass 0 (agent policy only): sequences that resume a
 *                  pinned turn or are overdue (policy_overdue); pass 1:
 *                  everyone. Within a pass, policy_pick_waiting (the fair
 *                  order among those policy_may_try allows), tried once per
 *                  step; policy_admit_gate says whether it gets a slot or
 *                  can never fit, policy_after_try whether to go on. No
 *                  admission in a step that preempted (thrash); the memory
 *                  an admission may free is policy_yield_for's;
 *   fair yield     the first sequence that slots or blocks kept out may make
 *                  policy_fair_victim yield (one per step);
 *   prefill        policy_pick_prefill, repeatedly, while the step has fewer
 *                  than POLICY_PREFILL_STEP_MIN prefill tokens and budget;
 *   decode share   policy_decode_share: a client with more tokens in the
 *                  step than every other sits decode rows out.
 *
 * At a turn's end (and its session's pins at admission):
 * policy_turn_keep says what it leaves in the cache (pin, kv_hint).
 *
 * Who is charged: every token a step computes for a sequence (prompt,
 * decode, drafts) counts toward its client's `served` (step_advance), and
 * every prefill token scheduled toward its client's prefill virtual time
 * (prefill_plan); nothing else moves them.
 *
 * What stays in engine.c is mechanics: building the views below, matching
 * and allocating blocks (try_admit), the order in which a running sequence
 * short of a block takes memory (the cache's eviction order, kvpolicy.h
 * "Eviction order", then waiting sequences' disk reads, then
 * policy_kv_victim; alone and still short, it ends at `length`), and
 * preempting.
 *
 * Thread: any (pure functions).
 */
#ifndef KVLOOM_POLICY_H
#define KVLOOM_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpolicy.h"

/* Prefill order (LAPS, shortest remaining first). When several prefills
 * wait, the one with the fewest tokens left goes first, so a cache hit's new
 * turn never waits behind a cold prompt, and of k turns that arrive together
 * the i-th gets its first token after i turns' worth of work instead of all
 * of them: one step of prefill costs a fixed part (reading the weights once)
 * plus a part per token, and a turn of a few dozen tokens is already many
 * times the fixed part, so batching turns together only delays the first of
 * them. Further prefills join a step only while it has fewer than
 * POLICY_PREFILL_STEP_MIN prefill tokens (tiny ones still share steps).
 * A prefill that has not run for POLICY_PREFILL_STARVE_STEPS steps goes
 * first, oldest first, so a long prompt under a stream of short turns still
 * advances by a chunk at least that often.
 *
 * Between clients (issue 26) shortest-first is not fair: a client that
 * floods with prompts always has one further along (or shorter) than
 * another's, and the starvation rule then lets every one of its old
 * prompts go first; the other's prompt advanced by one chunk in 17 steps.
 * So the prefill budget goes by priority class, then to the client with
 * the least prefill tokens computed so far (virtual time, pf_vt: a client
 * that starts prefilling again starts at the least of those prefilling,
 * so idling earns no credit: policy_pf_vt_join), and shortest-first with
 * the starvation rule orders a client's own prefills. One client alone:
 * shortest-first. */
#define POLICY_PREFILL_STEP_MIN 64
#define POLICY_PREFILL_STARVE_STEPS 16
/* Waiting sequences are admitted while fewer than this many running
 * sequences are still prefilling (a client with none prefilling may pass
 * the cap), so the shortest-first choice sees a whole burst of turns at
 * once while the blocks of a flood of cold prompts are not all taken
 * before they can run. */
#define POLICY_MAX_PREFILLING 16

/* The limits the rules read (from engine_opts, as the engine applies them). */
typedef struct policy_limits {
    int max_running;          /* sequences in one batch at most               */
    int client_max_running;   /* running sequences per client (0: none)       */
    int kv_limit;             /* client_max_kv in blocks (0: none)            */
    int64_t new_wait_max_ns;  /* agent policy: a wait longer than this is
                                 overdue (engine_opts.new_wait_max_ms)        */
    bool agent;               /* the agent KV policy (pins) is on             */
    int pool_blocks;          /* the KV pool's blocks                         */
    int client_max_queued;    /* waiting requests per client (0: none)        */
    int client_max_parked;    /* parked sequences per client (0: none)        */
    int stall_timeout_ms;     /* reader stall that cuts a sequence (0: never) */
    int park_ms;              /* reader stall that parks one (0: never; as
                                 applied: policy_park_ms)                     */
} policy_limits;

/* A waiting sequence as admission sees it, with its client's counts. */
typedef struct policy_waiting {
    int priority;             /* req.priority: smaller goes first             */
    int client;               /* its client (equal: the same client)          */
    uint64_t order;           /* arrival number: lower is older               */
    bool tried;               /* admission tried it this step already         */
    bool resumes;             /* agent policy: it extends a pinned turn       */
    bool admitted_once;       /* it ran before (a preempted sequence)         */
    bool parked;              /* its reader took nothing: not admitted        */
    int64_t wait_start_ns;    /* submitted, or last preempted (engine clock)  */
    int need_blocks;          /* blocks its known tokens take                 */
    int c_running;            /* its client's running sequences               */
    int c_prefilling;         /* of them, still prefilling                    */
    int c_kv_blocks;          /* the blocks they hold (with kv_limit)         */
    double c_served;          /* tokens computed for its client (virtual time) */
} policy_waiting;

/* A running sequence as preemption sees it (arrays in arrival order). */
typedef struct policy_running {
    int priority;
    int client;
    int n_blocks;             /* blocks it holds                              */
    int c_running;            /* its client's running sequences               */
} policy_running;

/* A running sequence as the prefill pick sees it. */
typedef struct policy_prefill {
    int priority;
    int client;
    bool eligible;            /* has prompt tokens left and no chunk this step */
    bool starved;             /* no chunk for POLICY_PREFILL_STARVE_STEPS steps */
    int pending;              /* tokens still to compute                      */
    double c_pf_vt;           /* its client's prefill virtual time            */
} policy_prefill;

/* Agent policy: a waiting sequence (a new conversation, or one preempted)
 * whose wait began more than new_wait_max_ns ago (strictly). Agents that
 * come back every few seconds re-pin their contexts and are admitted first,
 * so in a small pool a long new prompt could wait for ever
 * (test_engine_sched check_new_not_starved): an overdue one is admitted
 * with the returning agents (pass 0), may take any pin (the most overdue
 * first), and nobody is admitted past it while it is not (no blocks yet,
 * or its blocks still being read from disk: policy_after_try). */
bool policy_overdue(const policy_limits *l, int64_t wait_start_ns, int64_t now);

/* The overdue limit in ms: new_wait_max_ms when > 0, else one pin's
 * lifetime (ttl_max_s, --kv-ttl-max) at most cap_ms (ENGINE_NEW_WAIT_MAX_MS):
 * a new conversation that waited longer than a pin lives is kept out by the
 * agents' returns re-pinning, not by one pin. */
int policy_new_wait_ms(int new_wait_max_ms, double ttl_max_s, int cap_ms);

/* A client's place in the fair order when it comes (virtual time): a
 * client with nothing in flight that submits starts at the least `served`
 * of the clients that already have work (0 when none), so it is not owed
 * what it never asked for, and coming and going gives no credit. */
typedef struct policy_client {
    bool active;              /* has requests in flight, its start already set */
    double served;            /* tokens computed for it (virtual time)        */
} policy_client;
double policy_client_start(const policy_client *v, int n);

/* engine_submit's per-client limits, checked in this order (the first that
 * binds is the refusal, its message naming the limit): the client's parked
 * sequences at client_max_parked, the blocks its running sequences hold at
 * kv_limit, its waiting requests at client_max_queued (0: no such limit).
 * The queue's own bound (max_queue) and the client table's size are
 * engine_submit's, checked before these. */
typedef enum {
    POLICY_SUBMIT_OK,
    POLICY_SUBMIT_PARKED,
    POLICY_SUBMIT_KV,
    POLICY_SUBMIT_QUEUED,
} policy_submit;
policy_submit policy_submit_check(const policy_limits *l, int c_parked, int c_kv_held, int c_waiting);

/* Whose memory w may take (docs/kv-cache.md, "Who may take a pin's
 * memory"; the order in which pins yield: kvpolicy.h, "Eviction order"):
 * pins yield to running work, to agents coming back, to sequences that ran
 * before and to overdue ones (KVPOL_FOR_RUNNING); a new conversation takes
 * only pins without a prediction and otherwise waits (KVPOL_FOR_NEW) —
 * unless nothing runs (n_running 0): waiting would leave the cores idle, so
 * it also takes the pins whose agent is overdue (KVPOL_FOR_NEW_IDLE).
 * Without the agent policy there are no pins: KVPOL_FOR_RUNNING. */
kvpol_yield_for policy_yield_for(const policy_limits *l, const policy_waiting *w, int64_t now, int n_running);

/* The fair order of admission: priority class, then (different clients)
 * the client with fewer running sequences, then the client served fewer
 * tokens, then arrival. A client that floods the queue gets its turn after
 * every other client with work got one, whatever the order of arrival. */
bool policy_admit_before(const policy_waiting *a, const policy_waiting *b);

/* Whether admission may try w now (pass 0: only those that resume a pinned
 * turn or, with the agent policy, are overdue). Passed over: sequences
 * tried this step, parked ones, those of a client at client_max_running,
 * of a client that already prefills while POLICY_MAX_PREFILLING sequences
 * do (n_prefilling: the running ones still prefilling), and those that
 * would take a client that runs something past kv_limit (a prompt larger
 * than the share still runs when its client runs nothing else). */
bool policy_may_try(const policy_limits *l, const policy_waiting *w, int pass, int64_t now, int n_prefilling);

/* The next waiting sequence to try: the first in the fair order among
 * those policy_may_try allows; its index in v, or -1. O(n). */
int policy_pick_waiting(const policy_limits *l, const policy_waiting *v, int n, int pass, int64_t now,
                        int n_prefilling);

/* What admission does with the sequence policy_pick_waiting named, before
 * trying it: with max_running sequences running there is no slot (it is
 * the step's candidate for policy_fair_victim, and nobody else is tried);
 * a sequence whose known tokens need more than pool_blocks - 1 blocks can
 * never run (it ends at `length`; the one block left is its next token's);
 * else it is tried. */
typedef enum {
    POLICY_GATE_TRY,
    POLICY_GATE_NO_SLOT,
    POLICY_GATE_NEVER_FITS,
} policy_gate;
policy_gate policy_admit_gate(const policy_limits *l, int n_running, int need_blocks);

/* What admission does after trying a sequence (try_admit's result: 1
 * admitted, 0 must wait, -1 no blocks; overdue: policy_overdue of it). */
typedef enum {
    POLICY_NEXT,      /* try the next one                                     */
    POLICY_END_PASS,  /* blocked: nobody else in this pass (pass 1 is tried)   */
    POLICY_STOP,      /* nobody else this step                                 */
} policy_after;
/* Admitted, or waiting for its blocks (a PENDING prefix, disk reads): the
 * next one. An overdue one that waits stops admission (its blocks are on
 * their way: nobody goes past it); one that found no blocks ends the pass,
 * and stops admission when overdue or in pass 1 (nobody goes past it). */
policy_after policy_after_try(int rc, bool overdue, int pass);

/* The running sequence that gives its blocks back when the pool is out of
 * them: the newest running sequence of the client holding the most blocks
 * (the first such client in arrival order on a tie), when that client holds
 * more than an even share of what the running hold (soak with tenants: 8
 * streams of one client that never read grew to fill the pool and the
 * newest sequence, usually an agent's, was the one preempted, until agents'
 * requests timed out after 120 s); else the newest running sequence. A
 * sequence with no block counts as one toward its client's total (so a
 * client is counted even then). v in arrival order, n >= 1; returns an index.
 * O(n^2) over the running sequences (at most max_running). */
int policy_kv_victim(const policy_running *v, int n);

/* Slots or blocks kept w out. The running sequence that yields to it (its
 * index in v, arrival order), or -1: of the running ones of a larger
 * priority class than w's, the newest of the largest class; else, when w's
 * client runs fewer than its fair share (max_running over the n_active
 * clients with work, at least 1), the newest running sequence of the same
 * class of the client furthest above its share, provided that client runs
 * more than the share and more than w's client + 1 (no ping-pong). The
 * share is written to *share (logs). */
int policy_fair_victim(const policy_limits *l, const policy_running *v, int n, const policy_waiting *w, int n_active,
                       int *share);

/* Whether running sequence a's prefill goes before b's: priority class,
 * then (different clients) the client with less prefill service, then a
 * starved one, then (neither starved) the shortest remaining. */
bool policy_prefill_before(const policy_prefill *a, const policy_prefill *b);

/* The prefill that gets the next chunk: the first in that order among the
 * eligible ones (v in arrival order: ties go to the oldest); -1: none. */
int policy_pick_prefill(const policy_prefill *v, int n);

/* A client's prefill virtual time as it prefills in step `step`, having
 * last prefilled in `last_step`: one that starts prefilling again (it did
 * not prefill in the step before) starts at least at pf_v, the least
 * virtual time of the clients that prefilled in the step before. */
double policy_pf_vt_join(double pf_vt, uint64_t last_step, uint64_t step, double pf_v);

/* What a request leaves in the cache, from its kv fields (req.h) and how
 * it ended (ended_ok: at a stop or its length; not cancelled nor failed):
 *   drop_session  kv_hint "done" or kv_ttl 0: its session's pins are
 *                 released (at its admission and at its end);
 *   drop_hint     "done": its session's kv_hint prefetch is dropped;
 *   hint          it ended ok and is not "done": its next_use_s becomes a
 *                 kv_hint prefetch (engine_disk.h; with the disk tier and a
 *                 next_use_s > 0);
 *   pin           it ended ok, asked for a pin (kv_pin, a kv_ttl > 0, or a
 *                 next_use_s >= 0) and is neither "done" nor kv_ttl 0: its
 *                 indexed blocks are pinned (agent policy; kvpolicy_pin). */
typedef struct policy_turn {
    bool ended_ok;
    bool kv_pin;
    double kv_ttl_s;          /* < 0: predicted; 0: no pin                    */
    double kv_next_use_s;     /* < 0: unknown                                 */
    bool kv_done;
} policy_turn;
typedef struct policy_keep {
    bool drop_session, drop_hint, hint, pin;
} policy_keep;
policy_keep policy_turn_keep(const policy_turn *t);

/* Backpressure on a reader that does not take its output (engine_opts
 * stall_timeout_ms, park_ms). Each running or waiting sequence keeps a
 * stall clock: `since` (0: nothing waits for the reader) is set when posted
 * tokens wait untaken, or a blocked reader (--park-bytes: it has taken
 * every token while its client still takes nothing) holds them, and set
 * again whenever the reader takes some: a slow reader is not a stalled
 * one; it is 0 while the reader has everything. The clock runs only when
 * one of the two limits is set and the request has not opted out
 * (no_stall). A sequence is stalled (cut, as cancelled) when the clock
 * shows strictly more than stall_timeout_ms; a running one is parked (it
 * gives back its slot and blocks, and is not admitted) when its reader is
 * blocked or the clock shows strictly more than park_ms; a parked one is
 * unparked once its reader has taken every token posted and is not
 * blocked. */
typedef struct policy_reader {
    int n_read;               /* tokens its reader took (req.n_read)          */
    int n_posted;             /* tokens posted to it (generated)              */
    bool blocked;             /* req.reader_blocked                           */
    bool no_stall;            /* req.no_stall: never stalled nor parked       */
} policy_reader;
/* The stall clock after seeing r at `now`, from `since` and `seen` (the
 * n_read it saw last time); the caller keeps r->n_read as the next `seen`. */
int64_t policy_stall_since(const policy_limits *l, int64_t since, int seen, const policy_reader *r, int64_t now);
bool policy_stalled(const policy_limits *l, int64_t since, int64_t now);
bool policy_park(const policy_limits *l, int64_t since, bool blocked, int64_t now);
bool policy_unpark(const policy_reader *r);
/* park_ms as applied: 0 when <= 0; at most half of stall_timeout_ms when
 * that is set (a sequence is parked before it would be cut). */
int policy_park_ms(int park_ms, int stall_timeout_ms);

/* A streamed answer's client seen through its TCP receive window (issue 26;
 * server/http.c samples tcp_info's tcpi_bytes_acked and tcpi_snd_wnd). The
 * window's right edge, acked + window, moves only when the client's
 * application reads: its kernel never takes back space it advertised, so
 * while nothing is read each acknowledged byte comes off the window (Linux
 * 6.18 on loopback: the edge still creeps by 0.2-0.4 of the bytes, the
 * window being rounded up to its scale and recomputed from the buffer's
 * bytes-to-payload ratio), and once the client reads, the next
 * acknowledgement shows the space freed. So a client whose edge advanced by
 * at most half of what it acknowledged since it last consumed, for at least
 * park_ms, whose window is `shrink` bytes or more below the largest seen
 * since, has read nothing for that long although its receive buffer still
 * takes bytes: it is parked as if its buffer were full.
 *
 *   consumed   edge - edge0 > (acked - acked0) / 2: the clock restarts
 *              (since, acked0, edge0 and wnd_max from this sample);
 *   idle       not consumed, something acknowledged since, now - since
 *              >= park_ms, and
 *              wnd_max - wnd >= shrink.
 *
 * The shrink bound is what a reader cannot reach. A reader's window is
 * bounded by its kernel's recomputed window (the free space at the moment
 * an acknowledgement leaves, capped by rcv_ssthresh), which may sit below
 * the window first promised: until the promise is used up a reader's edge
 * creeps like a non-reader's (measured: 62 KB of window over the first
 * ~100 KB of 200-byte events, the kernel's deferred frees holding 64 read
 * segments). A window that grows while nothing is read (the kernel raising
 * rcv_ssthresh towards the buffer's free space) moves the edge and restarts
 * the clock; it cannot grow past the free space, so it only delays the
 * verdict. A small window (a buffer under `shrink`, no window scaling:
 * 64 KiB at most) never reaches the bound: that client is found, as
 * before, once nothing is acknowledged (its buffer full). A zero window is
 * a full buffer, the same. */
typedef struct policy_rwnd {
    int64_t since;            /* the sample the clock starts at (0: none)     */
    uint64_t acked0;          /* bytes acknowledged then                      */
    uint64_t edge0;           /* acked0 + the window then                     */
    uint32_t wnd_max;         /* the largest window since                     */
} policy_rwnd;
/* Feeds one sample (acked, wnd) taken at `now` (> 0); returns true when the
 * client consumed since the clock started (and restarts it; the first
 * sample starts it and returns false). */
bool policy_rwnd_consumed(policy_rwnd *w, uint64_t acked, uint32_t wnd, int64_t now);
/* Feeds one sample like policy_rwnd_consumed; returns true when the client
 * is idle as above (park_ms <= 0: never). */
bool policy_rwnd_idle(policy_rwnd *w, uint64_t acked, uint32_t wnd, int park_ms, uint32_t shrink, int64_t now);

/* Decode share between clients (issue 26). On a CPU a step costs a fixed
 * part plus a part per token, so every decode row of one client lengthens
 * the step of every other: a client with 16 streams beside 8 agents made
 * the agents' steps about twice as long although slots and blocks never
 * ran out (docs/reliability.md, "Agents beside a hostile tenant"). So when more than one client has
 * tokens in a step, every client gives up decode rows until it has no more
 * than the largest other client (at least POLICY_DECODE_SHARE_MIN, so a
 * lone chat beside a flood does not cut the flood to one row, wasting the
 * step's fixed part): beside 8 one-stream clients a flood keeps
 * POLICY_DECODE_SHARE_MIN rows. In a step that gives another client a
 * first token (its prompt's end) a client keeps only
 * POLICY_DECODE_SHARE_MIN: TTFT is what an agent waits for, and such steps
 * are few beside a generation's (docs/decisions.md). The rows that sit out are those that
 * ran most recently, then the newest, so the client's sequences take
 * turns; only decode rows sit out (prefill chunks are the prefill order's,
 * and count as their client's tokens). Every client, not only the widest:
 * a client whose prefill chunk made it the widest cannot sit out, and the
 * flood beside it then ran all its rows in the step of that client's first
 * token. A client alone in a step, or with no more than the others, is
 * never cut (work conserving); nor is one for clients of a larger (worse)
 * priority class only: batch work beside an interactive client is the one
 * that yields. engine_opts.no_decode_share turns it off. */
#define POLICY_DECODE_SHARE_MIN 2
typedef struct policy_row {
    int client;
    int n_tokens;             /* its tokens in the step                       */
    bool decode;              /* one token of a sequence that has generated:
                                 it may sit out                               */
    bool first;               /* it ends its prompt: its first token          */
    uint64_t last_ran;        /* the step it last ran in before this one      */
    uint64_t order;           /* arrival: lower is older                      */
    int priority;             /* its request's class (smaller: more urgent)   */
} policy_row;

/* The rows of a step's batch (v, n) that sit out for the decode share:
 * out[j] set for each; returns how many. Afterwards no client with a
 * decode row left in has more tokens than its level: the most tokens
 * another client of its class or a better one brought to the step (before
 * any cut), at least the minimum; the minimum when one of those ends its
 * prompt in the step. O(n) for one client; O(n^2) for each client above
 * the minimum otherwise. */
int policy_decode_share(const policy_row *v, int n, bool *out);

/* The mask worker's share between clients (issue 26 finding 1). Grammar
 * masks run on one worker thread beside the forward pass, but on a small
 * machine the worker's CPU is the forward's: a client whose masks cost
 * 20-30 ms each kept the worker busy all the time, and 8 agents beside it
 * lost about half their throughput (docs/reliability.md, "The masks
 * attack: where the agents lost"). So each client is charged for what it
 * costs the server: every step's forward time, split among the clients by
 * their tokens in it, plus the CPU of its grammar masks (on the worker or
 * in the step). Charges decay (half-life POLICY_MASK_HALF_LIFE_MS: a rate,
 * not a lifetime's total). A client whose charge is more than an equal
 * share of the charges of the clients with running work (n_active of
 * them; the client itself among them) has its masks deferred: the worker
 * leaves them queued (and idles if nothing else is queued) until the
 * charge has decayed below the share, so its sequences sit out steps and
 * it is the one slowed; the others never wait for it. Work conserving: a
 * client is never deferred when it is the only one with work, or when no
 * other client has a running sequence that could step (others_runnable:
 * not itself waiting for a mask), since then the CPU would go unused. */
#define POLICY_MASK_HALF_LIFE_MS 1000
/* v after dt_ns of decay (dt_ns <= 0: v). */
double policy_decay(double v, int64_t dt_ns);
/* Whether a client charged c_charge (decayed to now, like total: the
 * charges of the n_active clients with running work, its own included)
 * has its masks deferred; others_runnable: the running sequences of the
 * other clients that do not wait for a mask. */
bool policy_mask_defer(double c_charge, double total, int n_active, int others_runnable);
/* A queued mask as the worker sees it. */
typedef struct policy_mask_job {
    double c_charge;          /* its client's charge (decayed to now)         */
    int64_t cost_ns;          /* CPU of its sequence's masks so far           */
    bool deferred;            /* policy_mask_defer of its client              */
} policy_mask_job;
/* The job the worker computes next (its index in v, queue order), or -1
 * when every job is deferred: of the others, the one whose client is
 * charged least, then whose sequence's masks cost least so far (one slow
 * grammar does not queue a cheap one behind all its masks), then the first
 * in v. O(n). */
int policy_pick_mask(const policy_mask_job *v, int n);

#endif
