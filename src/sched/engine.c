/*
 * engine.c — the engine thread: admission with prefix reuse, continuous
 * batching under a token budget, preemption, cancellation (contract and
 * state diagram in engine.h).
 *
 * Every sequence keeps the tokens it knows (prompt, then generated) and how
 * many of them already have K/V in the cache:
 *
 *   tokens:     [ t0 t1 ... | tc ... t(n-1) ]
 *                 computed    pending: run through the model next
 *
 * so prefill and decode are the same thing: each step runs a chunk of the
 * pending tokens (a whole chunk for a prompt, exactly one token in decode)
 * and samples a new token when the chunk reaches the end. A preempted
 * sequence drops its blocks and resumes later with computed = 0 (its
 * generated tokens simply become part of what it has to recompute; its
 * sampler, RNG and penalties included, is kept).
 *
 * Every scheduling rule (who is refused, admitted, tried, preempted,
 * parked, cut, charged, which prefill and decode rows run, what a finished
 * turn leaves pinned) is a pure function of sched/policy.h, and the cache's eviction order is
 * kvpolicy.h's ("Eviction order"); this file builds their inputs and
 * carries out their answers. At submission engine_submit refuses past a
 * client's limits (policy_submit_check) and take_submitted places a new
 * client in the fair order (policy_client_start).
 *
 * One step (engine_step):
 *   plan     (step_plan)
 *     1. take the submitted requests into the waiting list (arrival order);
 *        expire pins and apply tool names (agent policy), advance kv_hint
 *        prefetches (engine_disk.h);
 *     2. end cancelled, stalled (policy_stalled) and stopped sequences;
 *        sample the sequences whose grammar masks came in since they sat
 *        out; park running sequences (policy_park), unpark waiting ones
 *        (policy_unpark);
 *     3. give every running sequence a KV slot for its next token, oldest
 *        first; when the pool has no free block: evict cached blocks in
 *        the eviction order (kvpolicy.h, "Eviction order"), take back
 *        waiting sequences' disk-read blocks, then preempt policy_kv_victim
 *        (alone and still out of blocks, a sequence ends at `length`);
 *     4. one decode token per running sequence goes into the batch first;
 *     5. admission (pass 0 with the agent policy: returning agents and
 *        overdue sequences; pass 1: all), in the fair order among those
 *        policy_may_try allows, until policy_after_try stops it,
 *        policy_admit_gate finds no slot, or a preemption happened this
 *        step (a sequence that can never fit ends at `length`): try_admit
 *        radix_matches the known tokens (all but the last one, whose
 *        logits we need),
 *        copies the rows before the divergence when the match ends inside a
 *        block (docs/kv-cache.md "A partial last block"), makes a sequence
 *        whose next blocks another one is still computing (PENDING) wait
 *        rather than recompute, reads blocks past the RAM match back from
 *        the disk tier first (the sequence waits for its reads, then is
 *        matched again), allocates all blocks for its known tokens at once
 *        and indexes its full prompt blocks PENDING so later requests join
 *        them instead of recomputing;
 *     6. the first sequence that slots or blocks kept out may make one
 *        running sequence yield (policy_fair_victim); disk reads that are
 *        done go to the tree;
 *     7. prefill chunks (policy_pick_prefill) while the step has fewer than
 *        POLICY_PREFILL_STEP_MIN prefill tokens and budget; the decode
 *        share between clients (policy_decode_share: the client with the
 *        most tokens beside others sits some decode rows out); then drafts
 *        (speculative decoding) for the decoding sequences;
 *   build    one ragged batch (step_build); forward (step_forward);
 *   advance  (step_advance) count the computed positions, index newly full
 *            blocks READY and offer them to the disk tier, sample and post
 *            a token for each sequence at its end (or keep its logits row
 *            while its mask is not in), verify drafts, finish.
 *
 * Reference invariant: each entry of a sequence's block table holds exactly
 * one pool reference, dropped when the sequence finishes or is preempted;
 * the radix tree holds its own. `check` mode verifies the pool and the tree
 * after every step.
 *
 * Thread: everything below runs on the engine thread except engine_submit,
 * engine_get_stats and engine_new/free.
 */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_disk.h"
#include "engine_grammar.h"
#include "engine_impl.h"
#include "policy.h"

/* Speculative decoding: draft tokens in one step at most (each wants a row
 * of logits, n_vocab floats, beyond the one per running sequence). */
#define ENGINE_SPEC_ROWS 64
_Static_assert(DRAFT_N_KINDS <= 4, "engine_stats has 4 slots per drafter");





engine_opts engine_defaults(void) {
    engine_opts o = {0};
    o.n_threads = 1;
    o.kv_mem_bytes = 64u << 20;
    o.block_tokens = 16;
    o.max_batch_tokens = 512;
    o.max_running = 64;
    o.max_queue = 256;
    return o;
}

/* ---- small containers ---- */

static void list_push(seq_list *l, seq *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = s;
}

/* Inserts keeping arrival order (preempted sequences go back to their place). */
static void list_insert_ordered(seq_list *l, seq *s) {
    list_push(l, s);
    int i = l->n - 1;
    while (i > 0 && l->v[i - 1]->order > s->order) {
        l->v[i] = l->v[i - 1];
        i--;
    }
    l->v[i] = s;
}

static void list_remove_at(seq_list *l, int i) {
    memmove(l->v + i, l->v + i + 1, (size_t)(l->n - i - 1) * sizeof *l->v);
    l->n--;
}

static void list_remove(seq_list *l, seq *s) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i] == s) {
            list_remove_at(l, i);
            return;
        }
}

/* ---- the client table (fair admission) ---- */


/* With en->mu held: the entry of client `id`, made if new; -1 when the
 * table is full. */
static int client_get_locked(engine *en, uint64_t id) {
    int fr = -1;
    for (int i = 0; i < en->hi_clients; i++) {
        if (en->clients[i].used && en->clients[i].id == id) return i;
        if (!en->clients[i].used && fr < 0) fr = i;
    }
    if (fr < 0 && en->hi_clients < en->cap_clients) fr = en->hi_clients++;
    if (fr < 0) return -1;
    client *c = &en->clients[fr];
    c->id = id;
    c->used = true;
    c->fresh = true;
    c->n_inflight = 0;
    atomic_store(&c->n_running, 0);
    c->n_prefilling = 0;
    c->pf_vt = 0;
    c->pf_step = 0;
    atomic_store(&c->kv_held, 0);
    atomic_store(&c->n_parked, 0);
    en->n_clients++;
    return fr;
}

/* With en->mu held: one request of the entry finished (or was refused). */
static void client_put_locked(engine *en, int slot) {
    client *c = &en->clients[slot];
    if (--c->n_inflight > 0) return;
    c->used = false;
    en->n_clients--;
}

/* Engine thread, en->mu held: a new client's place in the fair order
 * (policy_client_start over the client table, in en->pcl). */
static void client_start_locked(engine *en, client *c) {
    if (!c->fresh) return;
    for (int i = 0; i < en->hi_clients; i++) {
        const client *o = &en->clients[i];
        en->pcl[i] = (policy_client){.active = o->used && !o->fresh, .served = o->served};
    }
    c->served = policy_client_start(en->pcl, en->hi_clients);
    c->fresh = false;
    pthread_mutex_lock(&en->mk_mu); /* (the worker reads a queued job's client) */
    c->mk_charge = 0; /* the mask worker's share: nothing charged yet */
    c->mk_at = 0;
    c->mk_pub = 0;
    c->mk_runnable = 0;
    pthread_mutex_unlock(&en->mk_mu);
}

static void seq_push_token(seq *s, int32_t t) {
    if (s->tok.n == s->tok.cap) {
        s->tok.cap = s->tok.cap ? s->tok.cap * 2 : 64;
        s->tok.ids = xrealloc(s->tok.ids, (size_t)s->tok.cap * sizeof *s->tok.ids);
    }
    s->tok.ids[s->tok.n++] = t;
}

static void seq_push_block(seq *s, int32_t b, bool pending) {
    if (s->kv.n_blocks == s->kv.cap_blocks) {
        s->kv.cap_blocks = s->kv.cap_blocks ? s->kv.cap_blocks * 2 : 16;
        s->kv.blocks = xrealloc(s->kv.blocks, (size_t)s->kv.cap_blocks * sizeof *s->kv.blocks);
        s->kv.pending = xrealloc(s->kv.pending, (size_t)s->kv.cap_blocks);
    }
    s->kv.blocks[s->kv.n_blocks] = b;
    s->kv.pending[s->kv.n_blocks] = pending;
    s->kv.n_blocks++;
}

void sched__seq_take_blocks(engine *en, seq *s, int n_matched, int n_new) {
    s->kv.n_blocks = 0;
    for (int i = 0; i < n_matched; i++) seq_push_block(s, en->scratch[i], false);
    for (int i = 0; i < n_new; i++) {
        int32_t b = kvpool_alloc(en->pool);
        ASSERT(b >= 0);
        seq_push_block(s, b, false);
    }
}

/* Gives s room for n tokens and their blocks, disk keys and read slots at
 * once, so that a request's state never grows (and never aborts the process
 * on an allocation failure) while it runs. false: out of memory (s keeps
 * what it had; seq_free frees it). */
bool sched__seq_reserve(engine *en, seq *s, int n) {
    int nb = n / en->o.block_tokens + 2;
    if (n > s->tok.cap) {
        int32_t *t = realloc(s->tok.ids, (size_t)n * sizeof *t);
        if (!t) return false;
        s->tok.ids = t;
        s->tok.cap = n;
    }
    if (nb > s->kv.cap_blocks) {
        int32_t *b = realloc(s->kv.blocks, (size_t)nb * sizeof *b);
        if (!b) return false;
        s->kv.blocks = b;
        uint8_t *p = realloc(s->kv.pending, (size_t)nb);
        if (!p) return false;
        s->kv.pending = p;
        s->kv.cap_blocks = nb;
    }
    if (en->disk && nb > s->disk.cap_keys) {
        uint64_t *k = realloc(s->disk.keys, (size_t)nb * sizeof *k);
        if (!k) return false;
        s->disk.keys = k;
        s->disk.cap_keys = nb;
        int *l = realloc(s->disk.load_slot, (size_t)nb * sizeof *l);
        if (!l) return false;
        s->disk.load_slot = l;
        s->disk.cap_load_slot = nb;
    }
    return true;
}

/* ---- blocks ---- */

/* Drops every block of s. Blocks it indexed as PENDING (not computed) leave
 * the tree with their subtree first, so nobody waits for them forever. */
void sched__seq_release_blocks(engine *en, seq *s) {
    for (int i = 0; i < s->kv.n_blocks; i++) {
        if (s->kv.pending[i] && radix_block_state(en->tree, s->kv.blocks[i]) == RADIX_PENDING) {
            radix_remove_pending(en->tree, s->kv.blocks[i]);
        }
    }
    for (int i = 0; i < s->kv.n_blocks; i++) kvpool_unref(en->pool, s->kv.blocks[i]);
    for (int i = 0; i < s->disk.n_loading; i++) kvdisk_read_drop(en->disk, s->disk.load_slot[i]);
    s->disk.n_loading = 0;
    s->kv.n_blocks = 0;
    s->tok.n_computed = 0;
    s->kv.n_indexed = 0;
    s->disk.n_done = 0;
}


/* Frees up to n cached blocks in the eviction order (kvpolicy.h,
 * "Eviction order": LRU leaves, then pins as `why` lets them yield).
 * Returns how many were freed. */
static int evict(engine *en, int n, kvpol_yield_for why) {
    /* the clock only when pins may have to yield (the LRU alone needs none) */
    int64_t now = en->pol && radix_n_evictable(en->tree) < n ? sched__now(en) : 0;
    int got = kvpolicy_evict(en->pol, en->tree, en->pool, n, now, why);
    en->cnt.kv_evicted_blocks_total += (uint64_t)got;
    return got;
}

/* A free block for a running sequence: evicting cached ones if needed
 * (kvpolicy.h, "Eviction order", as for running work), then taking back
 * the blocks of waiting sequences' disk reads; -1 when none can be had
 * (the caller preempts policy_kv_victim). */
static int32_t alloc_block(engine *en) {
    int32_t b = kvpool_alloc(en->pool);
    if (b >= 0) return b;
    if (evict(en, 1, KVPOL_FOR_RUNNING) > 0) b = kvpool_alloc(en->pool);
    if (b < 0 && sched__disk_cancel_loads(en)) return alloc_block(en);
    return b;
}

/* s as admission sees it (policy.h). */
static policy_waiting waiting_view(engine *en, const seq *s) {
    const client *c = seq_client(en, s);
    int B = en->o.block_tokens;
    return (policy_waiting){.priority = s->r->priority,
                            .client = s->r->client_slot,
                            .order = s->order,
                            .tried = s->sch.tried_step == en->step_no,
                            .resumes = s->sch.resumes,
                            .admitted_once = s->sch.admitted_once,
                            .parked = s->sch.parked,
                            .wait_start_ns = s->sch.wait_start_ns,
                            .need_blocks = (s->tok.n + B - 1) / B,
                            .c_running = atomic_load(&c->n_running),
                            .c_prefilling = c->n_prefilling,
                            .c_kv_blocks = c->kv_blocks,
                            .c_served = c->served};
}

/* Which pins may yield memory to waiting s (policy_yield_for). */
static kvpol_yield_for yield_for(engine *en, const seq *s) {
    policy_waiting w = waiting_view(en, s);
    return policy_yield_for(&en->lim, &w, sched__now(en), en->running.n);
}

/* Makes sure free >= n blocks by evicting (and by the pins `why` allows
 * yielding); returns whether it worked. */
bool sched__ensure_free(engine *en, int n, kvpol_yield_for why) {
    int have = kvpool_n_free(en->pool);
    while (have < n) {
        int got = evict(en, n - have, why);
        if (got <= 0) return false;
        have = kvpool_n_free(en->pool);
    }
    return true;
}

void sched__scratch_reserve(engine *en, int n) {
    if (n > en->scratch_cap) {
        en->scratch_cap = n * 2;
        en->scratch = xrealloc(en->scratch, (size_t)en->scratch_cap * sizeof *en->scratch);
    }
}

/* Offers the computed full blocks of s that the tree has not seen to the tree
 * as READY (its own PENDING ones become READY). */
static void seq_index_computed(engine *en, seq *s) {
    int B = en->o.block_tokens;
    int n_full = s->tok.n_computed / B;
    if (n_full <= s->kv.n_indexed) return;
    sched__scratch_reserve(en, n_full);
    memcpy(en->scratch, s->kv.blocks, (size_t)n_full * sizeof *s->kv.blocks);
    if (radix_insert_salted(en->tree, s->salt, s->tok.ids, n_full, en->scratch, RADIX_READY) < 0) {
        log_warn("engine: radix_insert failed for a computed prefix (ignored)");
    }
    for (int i = 0; i < n_full; i++) s->kv.pending[i] = 0;
    s->kv.n_indexed = n_full;
}

static void sample_held(engine *en);

/* ---- finishing ---- */

/* The engine thread counts into en->cnt without locking and publishes a copy
 * (en->stats, under the mutex) once per step. */
/* The memory of the queued and running requests, and of their grammars'
 * caches (each grammar once, as of its last grammar_unlock; the server
 * counts the cached grammars no request uses, constrainer_idle_bytes). */
static void mem_publish(engine *en) {
    uint64_t req_b = 0, gr_b = 0;
    const grammar *seen[64]; /* grammars counted (more distinct ones: counted again, an overestimate) */
    int n_seen = 0;
    seq_list *lists[2] = {&en->running, &en->waiting};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < lists[k]->n; i++) {
            const seq *s = lists[k]->v[i];
            req_b += sizeof *s + (uint64_t)s->tok.cap * sizeof *s->tok.ids +
                     (uint64_t)s->kv.cap_blocks * (sizeof *s->kv.blocks + sizeof *s->kv.pending) +
                     (uint64_t)s->disk.cap_keys * sizeof *s->disk.keys + (uint64_t)s->disk.cap_load_slot * sizeof *s->disk.load_slot +
                     sampler_bytes(s->out.smp) + (uint64_t)s->r->cap_tokens * sizeof(req_token) +
                     (uint64_t)s->r->n_prompt * sizeof *s->r->prompt +
                     (s->out.held ? (uint64_t)en->m->cfg.n_vocab * sizeof *s->out.held : 0) +
                     sched__mjob_bytes(en, s);
            const grammar *g = s->r->grammar;
            if (!g) continue;
            int j = 0;
            while (j < n_seen && seen[j] != g) j++;
            if (j < n_seen) continue;
            if (n_seen < (int)ARRAY_LEN(seen)) seen[n_seen++] = g;
            gr_b += grammar_cache_bytes(g); /* (the mask worker may be in its cache) */
        }
    en->cnt.mem_requests = req_b;
    en->cnt.mem_grammar_caches = gr_b;
}

static void stats_publish(engine *en) {
    en->cnt.n_running = en->running.n;
    en->cnt.mask_deferred_total = atomic_load(&en->mk_deferred_total);
    en->cnt.n_waiting = en->waiting.n;
    en->cnt.kv_blocks_used = kvpool_n_used(en->pool);
    en->cnt.kv_blocks_cached = radix_n_cached(en->tree);
    en->cnt.kv_blocks_idle = radix_n_idle(en->tree);
    en->cnt.kv_block_tokens = en->o.block_tokens;
    if (en->dr) {
        draft_stats ds;
        draft_get_stats(en->dr, &ds);
        en->cnt.spec_global_seqs = ds.global_seqs;
        en->cnt.spec_global_bytes = ds.global_bytes;
        en->cnt.spec_global_evicted_total = ds.global_evicted_total;
    }
    if (en->pol) {
        kvpolicy_stats ps;
        kvpolicy_get_stats(en->pol, &ps);
        en->cnt.kv_pins = ps.n_pins;
        en->cnt.kv_pinned_blocks = ps.n_pinned_refs;
        en->cnt.kv_pinned_partial_blocks = ps.n_tails;
        for (int i = 0; i < KVPOL_N_REASONS && i < 5; i++) en->cnt.kv_pins_released_total[i] = ps.released[i];
        en->cnt.kv_ttl_error_seconds_sum = ps.ttl_error_sum_s;
        en->cnt.kv_ttl_error_count = ps.ttl_error_count;
    }
    pthread_mutex_lock(&en->mu);
    en->stats = en->cnt;
    en->stats.n_clients = en->n_clients;
    en->stats.client_refused_total = en->n_client_refused;
    en->n_waiting_shared = en->waiting.n;
    pthread_mutex_unlock(&en->mu);
}

/* What r leaves in the cache (policy_turn_keep); ended_ok: it ended at a
 * stop or its length. */
static policy_keep turn_keep(const req *r, bool ended_ok) {
    policy_turn t = {.ended_ok = ended_ok,
                     .kv_pin = r->kv_pin,
                     .kv_ttl_s = r->kv_ttl_s,
                     .kv_next_use_s = r->kv_next_use_s,
                     .kv_done = r->kv_done};
    return policy_turn_keep(&t);
}

/* A finished turn's kv_hint and (agent policy) its pin, as
 * policy_turn_keep says. */
static void seq_pin(engine *en, seq *s, req_finish why) {
    req *r = s->r;
    policy_keep keep = turn_keep(r, why == REQ_FINISH_STOP || why == REQ_FINISH_LENGTH);
    if (keep.drop_hint) sched__hint_drop_session(en, r->kv_session);
    if (keep.hint) sched__hint_add(en, s, r->kv_session, r->kv_next_use_s);
    if (!en->pol) return;
    if (keep.drop_session) kvpolicy_release_session(en->pol, r->kv_session);
    if (!keep.pin) return;
    /* The tree's blocks for the sequence's indexed prefix (its own may be
     * duplicates of blocks another sequence indexed first): a match takes
     * the references the pin keeps. */
    int B = en->o.block_tokens, n = s->kv.n_indexed;
    if (n <= 0) return;
    sched__scratch_reserve(en, n);
    int k = radix_match_salted(en->tree, s->salt, s->tok.ids, n * B, en->scratch, n, NULL);
    if (k <= 0) return;
    kvpolicy_pin(en->pol, en->scratch, k, r->kv_session, NULL, r->kv_ttl_s, r->kv_next_use_s, r->serial, sched__now(en));
    /* and the rows computed after them, in the turn's own partial block: the
     * next turn copies those its prompt repeats ("A partial last block") */
    int rows = s->tok.n_computed - k * B;
    if (k == n && rows > 0 && rows < B && s->kv.n_blocks > k && radix_block_state(en->tree, s->kv.blocks[k]) == RADIX_NONE)
        kvpolicy_pin_tail(en->pol, r->serial, s->kv.blocks[k], s->tok.ids + (size_t)k * B, rows);
}



/* Marks s parked or not, keeping its client's and the engine's counts. */
static void set_parked(engine *en, seq *s, bool on) {
    if (s->sch.parked == on) return;
    s->sch.parked = on;
    atomic_fetch_add(&seq_client(en, s)->n_parked, on ? 1 : -1);
    en->cnt.n_parked += on ? 1 : -1;
    if (on) en->cnt.parked_total++;
}

static void seq_finish(engine *en, seq *s, req_finish why, const char *msg) {
    sched__hold_drop(en, s);
    sched__mjob_release(en, s);
    if (why != REQ_FINISH_CANCEL) sched__disk_write_through(en, s);
    seq_pin(en, s, why);
    if (s->kv.n_blocks) sched__seq_release_blocks(en, s);
    draft_seq_end(en->dr, s->spec.ds, s->tok.ids, s->r->n_prompt, s->tok.n,
                  why == REQ_FINISH_STOP || why == REQ_FINISH_LENGTH);
    s->spec.ds = NULL;
    if (s->sch.running) atomic_fetch_sub(&seq_client(en, s)->n_running, 1);
    s->sch.running = false;
    set_parked(en, s, false); /* cut (stall_timeout_ms) or cancelled while parked */
    pthread_mutex_lock(&en->mu);
    client_put_locked(en, s->r->client_slot);
    pthread_mutex_unlock(&en->mu);
    /* a client that has its answer sees counters (/metrics) that include
     * its request: publish before waking it, not only at the step's end */
    stats_publish(en);
    sched__req_post_finish(s->r, why, msg);
    req_unref(s->r);
    sched__seq_free(s);
}

void sched__seq_spec_drop(seq *s) {
    draft_seq_end(NULL, s->spec.ds, NULL, 0, 0, false);
    s->spec.ds = NULL;
    dmodel_seq_free(s->spec.dms);
    s->spec.dms = NULL;
}

/* Frees a sequence's memory (its blocks already released). */
void sched__seq_free(seq *s) {
    sched__seq_spec_drop(s);
    sampler_free(s->out.smp);
    gmatch_free(s->out.gm);
    free(s->out.trig);
    free(s->out.held);
    free(s->tok.ids);
    free(s->kv.blocks);
    free(s->kv.pending);
    free(s->disk.keys);
    free(s->disk.load_slot);
    free(s);
}

/* Moves running s back to the waiting list without its blocks (they stay
 * in the tree as cache); it is computed again when admitted. */
static void unschedule(engine *en, seq *s) {
    sched__hold_drop(en, s); /* its row is computed again (its mask stays valid) */
    sched__seq_release_blocks(en, s);
    dmodel_seq_drop(s->spec.dms); /* recomputed by the draft model when it drafts again */
    s->disk.tried = false; /* its blocks may be on disk by the time it returns */
    s->sch.running = false;
    atomic_fetch_sub(&seq_client(en, s)->n_running, 1);
    list_remove(&en->running, s);
    list_insert_ordered(&en->waiting, s);
    s->sch.wait_start_ns = sched__now(en);
}

/* Unschedules s for memory or fairness: counted, and no admission this
 * step takes what it gave back. */
static void preempt(engine *en, seq *s) {
    unschedule(en, s);
    en->preempted_this_step = true;
    en->cnt.preemptions_total++;
    s->r->n_preemptions++;
    log_debug("engine: preempted request %llu (%d tokens)", (unsigned long long)s->order, s->tok.n);
}

/* ---- admission ---- */

/* Copy-on-write of a partial last block (docs/kv-cache.md, "A partial last
 * block"). The prompt of s matched n_ready whole blocks (en->scratch); the
 * rows right after them may already be computed elsewhere: in a READY block
 * of the tree that branches inside the block (radix_match_partial), in the
 * block a running sequence with the same prefix is still writing (its
 * computed rows only), or in a pinned turn's last block (kvpolicy_pin_tail).
 * Returns the block with the longest run of s's next tokens (at most
 * block_tokens - 1, and never s's last token: its logits are needed), a
 * reference held on it for the copy, and the run in *n_rows; -1 and 0 when
 * none shares the next token. Cost: a scan of the node's children, the
 * running sequences and the pins. */
static int32_t partial_source(engine *en, seq *s, int n_ready, int *n_rows) {
    int B = en->o.block_tokens;
    *n_rows = 0;
    int avail = MIN(B - 1, s->tok.n - 1 - n_ready * B);
    if (avail <= 0) return -1;
    const int32_t *want = s->tok.ids + (size_t)n_ready * B;
    int run = 0;
    int32_t best = radix_match_partial(en->tree, s->salt, s->tok.ids, s->tok.n - 1, en->scratch, n_ready, &run);
    int best_run = best >= 0 ? run : 0;
    int32_t other = -1;
    int other_run = 0;
    for (int i = 0; i < en->running.n; i++) {
        const seq *o = en->running.v[i];
        if (o == s || o->kv.n_blocks <= n_ready || o->salt != s->salt) continue;
        if (n_ready > 0 && o->kv.blocks[n_ready - 1] != en->scratch[n_ready - 1]) continue;
        if (radix_block_state(en->tree, o->kv.blocks[n_ready]) == RADIX_READY) continue; /* the tree's, above */
        int lim = MIN(avail, o->tok.n_computed - n_ready * B);
        int r = 0;
        while (r < lim && o->tok.ids[(size_t)n_ready * B + r] == want[r]) r++;
        if (r > other_run) other = o->kv.blocks[n_ready], other_run = r;
    }
    if (en->pol && n_ready > 0) {
        int r = 0;
        int32_t b = kvpolicy_find_tail(en->pol, en->scratch, n_ready, want, avail, &r);
        if (b >= 0 && r > other_run) other = b, other_run = r;
    }
    if (other >= 0 && other_run > best_run) {
        if (best >= 0) kvpool_unref(en->pool, best);
        kvpool_ref(en->pool, other);
        best = other, best_run = other_run;
    }
    *n_rows = best_run;
    return best;
}

/* Copies block src's K/V into dst, all layers at once: a block is one run
 * of bytes per K and V whatever the element type (f16, q8_0 with its
 * scales) and whichever layers are windowed. Rows past the ones the caller
 * counts as computed are overwritten before anything reads them (a position
 * attends only to rows before it, written first). */
static void kv_copy_block(engine *en, int32_t dst, int32_t src) {
    size_t E = en->kv->block_elems;
    memcpy(en->kv->k + (size_t)dst * E, en->kv->k + (size_t)src * E, E * sizeof *en->kv->k);
    memcpy(en->kv->v + (size_t)dst * E, en->kv->v + (size_t)src * E, E * sizeof *en->kv->v);
}

/* Tries to admit s (from the waiting list). Returns 1 admitted (s holds
 * its blocks), 0 it waits (its grammar's opening run, a PENDING prefix, its
 * disk reads, or a busy read queue), -1 the pool cannot give it its blocks
 * now; what admission does next is policy_after_try's. */
static int try_admit(engine *en, seq *s) {
    if (s->out.gm_start) { /* its opening forced run first (part of what it computes) */
        sched__grammar_start(en, s);
        if (s->out.gm_start) return 0;
    }
    int B = en->o.block_tokens;
    int n_need_blocks = (s->tok.n + B - 1) / B;
    int n_match_cap = (s->tok.n - 1) / B; /* keep the last token to compute */
    if (s->disk.n_loading > 0 && !sched__disk_restore(en, s)) return 0; /* blocks coming from disk */
    sched__scratch_reserve(en, n_need_blocks + 1);
    int n_pending = 0;
    int n_ready = radix_match_salted(en->tree, s->salt, s->tok.ids, s->tok.n - 1, en->scratch, n_match_cap, &n_pending);
    if (n_ready < 0) n_ready = 0, n_pending = 0;
    if (n_pending > 0) {
        /* Another sequence is computing our next blocks: wait for them. */
        for (int i = 0; i < n_ready + n_pending; i++) kvpool_unref(en->pool, en->scratch[i]);
        return 0;
    }
    if (en->disk && !s->disk.tried) {
        int q = sched__disk_prefetch(en, s, n_ready, n_match_cap, n_need_blocks, yield_for(en, s));
        if (q > 0) return 0;
        if (q < 0) {
            for (int i = 0; i < n_ready; i++) kvpool_unref(en->pool, en->scratch[i]);
            return 0;
        }
    }
    int n_new = n_need_blocks - n_ready; /* >= 1: the first takes the copied rows */
    int n_rows = 0;
    int32_t src = partial_source(en, s, n_ready, &n_rows);
    bool fits = sched__ensure_free(en, n_new, yield_for(en, s));
    if (!fits && src >= 0) {
        /* the source held for the copy may be the block the pool is short
         * of: recompute those rows instead */
        kvpool_unref(en->pool, src);
        src = -1, n_rows = 0;
        fits = sched__ensure_free(en, n_new, yield_for(en, s));
    }
    if (!fits) {
        for (int i = 0; i < n_ready; i++) kvpool_unref(en->pool, en->scratch[i]);
        s->disk.tried = false; /* what it restored may be evicted before it runs */
        return -1;
    }
    sched__seq_take_blocks(en, s, n_ready, n_new);
    s->tok.n_computed = n_ready * B;
    if (src >= 0) {
        kv_copy_block(en, s->kv.blocks[n_ready], src);
        kvpool_unref(en->pool, src);
        s->tok.n_computed += n_rows;
        en->cnt.kv_partial_tokens_total += (uint64_t)n_rows;
    }
    log_debug("engine: admit request %llu: %d tokens, %d from %d whole blocks + %d copied rows of a partial block",
              (unsigned long long)s->order, s->tok.n, s->tok.n_computed, n_ready, n_rows);
    s->kv.n_indexed = n_ready;
    s->tok.n_prefill_end = s->tok.n;
    /* Index the full blocks still to compute as PENDING: later requests with
     * the same prefix join them instead of recomputing. */
    int n_full = s->tok.n / B;
    if (n_full > n_ready) {
        memcpy(en->scratch, s->kv.blocks, (size_t)n_full * sizeof *s->kv.blocks);
        if (radix_insert_salted(en->tree, s->salt, s->tok.ids, n_full, en->scratch, RADIX_PENDING) >= 0) {
            for (int i = n_ready; i < n_full; i++) s->kv.pending[i] = en->scratch[i] == s->kv.blocks[i];
        }
    }
    if (!s->sch.admitted_once) {
        s->sch.admitted_once = true;
        /* (a forced run appended at submission is output, not prompt) */
        int cached = MIN(s->tok.n_computed, s->r->n_prompt);
        sched__req_set_cached(s->r, cached);
        en->cnt.prompt_tokens_total += (uint64_t)s->r->n_prompt;
        en->cnt.prompt_tokens_cached_total += (uint64_t)cached;
    }
    /* an agent back from its tool: its pin has done its work (a client that
     * says its context is done releases its session's pin as such) */
    if (en->pol) {
        if (turn_keep(s->r, false).drop_session) kvpolicy_release_session(en->pol, s->r->kv_session);
        kvpolicy_resume(en->pol, s->kv.blocks, n_ready, s->r->kv_session, sched__now(en));
    }
    s->sch.running = true;
    atomic_fetch_add(&seq_client(en, s)->n_running, 1);
    return 1;
}

/* ---- the step ---- */

/* With en->mu held: the queue's counts as they are now. A request handed
 * over by take_submitted, or admitted, moves between the counts that
 * engine_submit's limit and /metrics read (n_submitq, n_waiting_shared,
 * stats): published only at the step's end, it would be in neither (0
 * waiting, and one more admitted past max_queue) or in the old one (a
 * refusal with the queue empty) for a whole step. */
static void queue_publish_locked(engine *en) {
    en->n_waiting_shared = en->waiting.n;
    en->stats.n_waiting = en->waiting.n;
    en->stats.n_running = en->running.n;
}

static void take_submitted(engine *en) {
    pthread_mutex_lock(&en->mu);
    for (int i = 0; i < en->n_submitq; i++) {
        req *r = en->submitq[i];
        /* its whole state at once: prompt + max_tokens, at most the context
         * (+2: the step may look one past the end) */
        int64_t n_max = MIN((int64_t)r->n_prompt + r->max_tokens, (int64_t)en->n_ctx) + 2;
        seq *s = calloc(1, sizeof *s);
        /* the penalties' window: "all" (-1) is all of this sequence's
         * output, at most n_max tokens (not 1 << 20: 4 MiB a request) */
        sampler_params sp = r->sp;
        if (sp.repeat_last_n < 0 || sp.repeat_last_n > n_max) sp.repeat_last_n = (int)n_max;
        if (s) s->out.smp = sampler_new(&sp, en->m->cfg.n_vocab);
        if (!s || !s->out.smp || !sched__seq_reserve(en, s, (int)n_max)) {
            log_warn("engine: out of memory for a request of %d prompt tokens (room for %lld tokens); it fails",
                     r->n_prompt, (long long)n_max);
            if (s) sched__seq_free(s);
            client_put_locked(en, r->client_slot);
            sched__req_post_finish(r, REQ_FINISH_ERROR, "out of memory for the request's state");
            req_unref(r);
            continue;
        }
        s->r = r;
        s->salt = r->cache_salt;
        client_start_locked(en, seq_client(en, s));
        s->order = en->next_order++;
        s->sch.wait_start_ns = en->submit_ns[i];
        for (int j = 0; j < r->n_prompt; j++) seq_push_token(s, r->prompt[j]);
        if (en->pol) {
            /* an agent back from its tool: its pin yields last from now on */
            int cap = (s->tok.n - 1) / en->o.block_tokens;
            sched__scratch_reserve(en, cap + 1);
            int n = radix_match_salted(en->tree, s->salt, s->tok.ids, s->tok.n - 1, en->scratch, cap, NULL);
            s->sch.resumes = kvpolicy_returned(en->pol, en->scratch, n > 0 ? n : 0, r->kv_session, sched__now(en));
            for (int j = 0; j < n; j++) kvpool_unref(en->pool, en->scratch[j]);
        }
        sched__hint_drop_session(en, r->kv_session); /* its agent is back */
        if (en->dr && !r->no_spec && !r->embd) s->spec.ds = draft_seq_new(en->dr); /* NULL: it does not speculate */
        if (s->spec.ds) draft_seq_set_sampled(s->spec.ds, r->sp.temperature > 0);
        if (s->spec.ds && en->dm) s->spec.dms = dmodel_seq_new(en->dm, r->sp.seed);
        list_push(&en->waiting, s);
        s->out.in_skip = r->trigger_skip_now;
        if (r->grammar && !r->grammar_trigger) {
            /* A forced start (a call's opening syntax, "{\"" of a schema's
             * object...) joins the prompt's prefill. */
            s->out.gm = gmatch_new(r->grammar, en->o.gvocab);
            s->out.gm_start = true;
            sched__grammar_start(en, s);
        }
    }
    en->n_submitq = 0;
    queue_publish_locked(en);
    pthread_mutex_unlock(&en->mu);
}

/* s's reader as the backpressure rules see it (policy.h). */
static policy_reader reader_view(const seq *s) {
    return (policy_reader){.n_read = atomic_load(&s->r->n_read),
                           .n_posted = s->tok.n_generated,
                           .blocked = atomic_load(&s->r->reader_blocked),
                           .no_stall = s->r->no_stall};
}

/* Moves s's stall clock (policy_stall_since) and says whether it is
 * stalled (policy_stalled: cut). */
static bool seq_stalled(engine *en, seq *s, int64_t now) {
    policy_reader rd = reader_view(s);
    s->sch.stall_since_ns = policy_stall_since(&en->lim, s->sch.stall_since_ns, s->sch.stall_n_read, &rd, now);
    s->sch.stall_n_read = rd.n_read;
    return policy_stalled(&en->lim, s->sch.stall_since_ns, now);
}

/* Parks the running sequences policy_park names (the clock seq_stalled
 * keeps) and unparks the waiting ones policy_unpark names. A parked
 * sequence holds no slot and no block: a client that does not read costs
 * the engine nothing while it waits to be cut (docs/decisions.md, "the
 * engine's rules for clients that do not behave"). */
static void park_step(engine *en) {
    if (en->park_ms <= 0) return;
    int64_t now = sched__now(en);
    for (int i = en->waiting.n - 1; i >= 0; i--) {
        seq *s = en->waiting.v[i];
        policy_reader rd = reader_view(s);
        if (s->sch.parked && policy_unpark(&rd)) set_parked(en, s, false);
    }
    for (int i = en->running.n - 1; i >= 0; i--) {
        seq *s = en->running.v[i];
        bool blocked = atomic_load(&s->r->reader_blocked);
        if (!policy_park(&en->lim, s->sch.stall_since_ns, blocked, now)) continue;
        if (blocked)
            log_info("engine: request %llu parked: its client left --park-bytes of its output unread, or its "
                     "kernel took none of it for --park-timeout",
                     (unsigned long long)s->order);
        else
            log_info("engine: request %llu parked: its client took none of its output for %.1f s",
                     (unsigned long long)s->order, en->park_ms / 1000.0);
        unschedule(en, s); /* not a preemption: counted as parked */
        set_parked(en, s, true);
    }
}

/* Publishes the blocks each client's running sequences hold (client_max_kv). */
static void clients_kv_count(engine *en) {
    if (!en->kv_limit) return;
    for (int i = 0; i < en->hi_clients; i++) en->clients[i].kv_blocks = 0;
    for (int i = 0; i < en->running.n; i++) seq_client(en, en->running.v[i])->kv_blocks += en->running.v[i]->kv.n_blocks;
    for (int i = 0; i < en->hi_clients; i++) {
        client *c = &en->clients[i];
        bool runs = atomic_load(&c->n_running) > 0;
        atomic_store(&c->kv_held, runs ? c->kv_blocks : 0);
    }
}

static void drop_finished_controls(engine *en) {
    seq_list *lists[2] = {&en->running, &en->waiting};
    /* park_step reads the clock seq_stalled keeps: it is kept when either
     * --stall-timeout or parking is on (either may be off alone) */
    int64_t now = en->o.stall_timeout_ms > 0 || en->park_ms > 0 ? sched__now(en) : 0;
    for (int k = 0; k < 2; k++) {
        seq_list *l = lists[k];
        for (int i = 0; i < l->n;) {
            seq *s = l->v[i];
            if (atomic_load(&s->r->cancel)) {
                list_remove_at(l, i);
                seq_finish(en, s, REQ_FINISH_CANCEL, NULL);
            } else if (seq_stalled(en, s, now)) {
                char msg[96];
                snprintf(msg, sizeof msg, "the client did not read its output for %.1f s",
                         en->o.stall_timeout_ms / 1000.0);
                log_info("engine: request %llu cancelled: %s", (unsigned long long)s->order, msg);
                list_remove_at(l, i);
                en->cnt.stalled_total++;
                seq_finish(en, s, REQ_FINISH_CANCEL, msg);
            } else if (atomic_load(&s->r->stop)) {
                list_remove_at(l, i);
                seq_finish(en, s, REQ_FINISH_STOP, NULL);
            } else {
                i++;
            }
        }
    }
}

/* The running sequences as preemption sees them (policy.h), in en->pr. */
static policy_running *running_views(engine *en) {
    for (int i = 0; i < en->running.n; i++) {
        const seq *s = en->running.v[i];
        en->pr[i] = (policy_running){.priority = s->r->priority,
                                     .client = s->r->client_slot,
                                     .n_blocks = s->kv.n_blocks,
                                     .c_running = atomic_load(&seq_client(en, s)->n_running)};
    }
    return en->pr;
}

/* The sequence that gives its blocks back when the pool is out of them
 * (policy_kv_victim). */
static seq *kv_victim(engine *en) {
    return en->running.v[policy_kv_victim(running_views(en), en->running.n)];
}

/* Ensures every running sequence has a slot for its next decode token.
 * Oldest first; preempts the newest when the pool cannot give a block. */
static void reserve_decode_slots(engine *en) {
    int B = en->o.block_tokens;
    for (int i = 0; i < en->running.n; i++) {
        seq *s = en->running.v[i];
        int last_pos = s->tok.n - 1; /* the last token is always computed */
        while (s->kv.n_blocks * B <= last_pos) {
            int32_t b = alloc_block(en);
            if (b >= 0) {
                seq_push_block(s, b, false);
                continue;
            }
            seq *victim = kv_victim(en);
            if (victim == s && en->running.n == 1) {
                /* Alone and still out of blocks: the pool cannot hold it. */
                list_remove_at(&en->running, i);
                seq_finish(en, s, REQ_FINISH_LENGTH, NULL);
                s = NULL;
                i--;
                break;
            }
            int vi = 0;
            while (en->running.v[vi] != victim) vi++;
            preempt(en, victim);
            if (victim == s) {
                s = NULL;
                i--;
                break;
            }
            if (vi < i) i--; /* the list moved up under s */
        }
    }
}












/* Appends one generated token (not end-of-generation) to s and its req. */
void sched__push_generated(engine *en, seq *s, const req_token *t) {
    sched__req_post_token(s->r, t);
    s->tok.n_generated++;
    seq_push_token(s, t->id);
    en->cnt.generation_tokens_total++;
}


/* A draft model's draft at a verified row: the token and its q row (NULL:
 * a point mass). */
typedef struct spec_row {
    int32_t d;
    const float *q;
} spec_row;

/* Samples the next token of s from its logits row (masked by its grammar),
 * posts it, and appends a forced run after it. With `sr` (a draft model's
 * draft at this row) the token comes from the speculative-sampling rule
 * instead (sampler_sample_spec: the draft or the residual's draw).
 * Returns REQ_RUNNING, or how the request ends: REQ_FINISH_STOP (end of
 * generation, or the grammar's output is complete), REQ_FINISH_ERROR
 * (NaN/inf logits, or a grammar that allows nothing). */
static req_finish post_token(engine *en, seq *s, const float *row, const spec_row *sr) {
    req *r = s->r;
    req_token t = {0};
    float *lg = (float *)row;
    if (s->out.gm) {
        if (gmatch_must_end(s->out.gm)) return REQ_FINISH_STOP;
        if (sched__apply_mask(en, s, lg) == 0) return REQ_FINISH_ERROR;
        if (sched__mask_over_budget(en, s)) return REQ_FINISH_ERROR;
    }
    for (int k = 0; k < r->n_bias; k++) lg[r->bias_ids[k]] += r->bias_vals[k]; /* -inf + b stays -inf */
    int top_n = r->n_logprobs;
    if (top_n > REQ_MAX_TOP_LOGPROBS) top_n = REQ_MAX_TOP_LOGPROBS;
    bool kept;
    t.id = sr ? sampler_sample_spec(s->out.smp, lg, sr->d, sr->q, en->spec_p, &kept, top_n, &t.logprob, t.top_ids,
                                    t.top_lps)
              : sampler_sample(s->out.smp, lg, top_n, &t.logprob, t.top_ids, t.top_lps);
    if (t.id < 0) return REQ_FINISH_ERROR;
    t.n_top = top_n > 0 ? top_n : 0;
    sampler_accept(s->out.smp, t.id);
    if (s->out.gm && gmatch_accept(s->out.gm, t.id) < 0) return REQ_FINISH_ERROR;
    bool eog = !r->ignore_eos && en->o.is_eog && en->o.is_eog(en->o.eog_ctx, t.id);
    if (eog) return REQ_FINISH_STOP;
    /* ngram's evidence: how sure the model was of this token (one more pass
     * over the row, like the argmax's) */
    if (s->spec.ds && draft_get_kind(en->dr) == DRAFT_NGRAM)
        draft_seq_note(s->spec.ds, s->tok.n, draft_margin(lg, en->m->cfg.n_vocab, t.id));
    sched__push_generated(en, s, &t);
    sched__grammar_watch(en, s, t.id);
    sched__jump_forward(en, s);
    if (s->out.gm && gmatch_must_end(s->out.gm)) return REQ_FINISH_STOP;
    return REQ_RUNNING;
}

/* Puts the next chunk of s (as much of its pending tokens as the budget
 * allows) into this step's batch. */
static void schedule(engine *en, seq *s, int budget, int *n_tok, int *n_bs) {
    int c = MIN(s->tok.n - s->tok.n_computed, budget - *n_tok);
    if (c <= 0) return;
    en->b_owner[*n_bs] = s;
    en->b_chunk[*n_bs] = c;
    if (s->sch.sched_step != en->step_no) s->sch.prev_sched = s->sch.sched_step;
    s->sch.sched_step = en->step_no;
    (*n_bs)++;
    *n_tok += c;
}

/* ---- speculative decoding (draft.h) ----
 *
 * After the step's plan, each decoding sequence may get drafts: they go
 * into the batch after its last token (positions n_tokens ..), each with a
 * row of logits. step_advance samples row by row as in plain decoding
 * (penalties, grammar, logprobs, jump-forward, stop tests all unchanged)
 * and goes on to the next row only while the sampled token equals the
 * draft there. Only the K/V of drafts that were accepted counts as
 * computed, so a rejected draft's K/V is never indexed by the radix tree
 * or written to disk; its slot is overwritten by the next step. */

/* Cuts the drafts the grammar refuses (the engine would mask them anyway:
 * verifying them is wasted work). */
static int spec_cut_grammar(engine *en, seq *s, int k) {
    if (!s->out.gm || k == 0) return k;
    gmatch *probe = gmatch_clone(s->out.gm);
    if (!probe) return 0;
    grammar *g = gmatch_grammar(probe);
    if (en->mk_on) grammar_lock(g); /* the worker may be in its cache (another sequence's mask) */
    int ok = 0;
    while (ok < k && !gmatch_must_end(probe) && gmatch_accept(probe, s->spec.draft[ok]) == 0) ok++;
    if (en->mk_on) grammar_unlock(g);
    gmatch_free(probe);
    return ok;
}

/* KV slots for k drafts after s's last token, from free blocks only (a
 * draft never evicts cached blocks or preempts anyone); returns how many
 * drafts have a slot. */
static int spec_reserve(engine *en, seq *s, int k) {
    int B = en->o.block_tokens;
    while (s->kv.n_blocks * B < s->tok.n + k && kvpool_n_free(en->pool) > 0) {
        int32_t b = kvpool_alloc(en->pool);
        ASSERT(b >= 0);
        seq_push_block(s, b, false);
    }
    return MIN(k, s->kv.n_blocks * B - s->tok.n);
}

/* The cost of one more token in this step relative to the step's fixed
 * cost (draft_threshold's token_cost), and with a draft model the cost of
 * drafting it (draft_cost): one of its one-token forwards against the
 * target step's fixed part (until both are measured: the ratio of the
 * bytes the two models read per token). A fixed spec_token_cost replaces
 * both. */
static double spec_cost(engine *en, double *draft_cost) {
    *draft_cost = 0;
    if (en->o.spec_token_cost > 0) return en->o.spec_token_cost;
    if (en->dm) {
        double fixed = draft_cost_fixed(&en->cost);
        *draft_cost = fixed > 0 && en->dm_ms > 0 ? en->dm_ms / fixed : en->dm_ratio;
    }
    return draft_cost_token(&en->cost, ENGINE_SPEC_TOKEN_COST);
}

/* Whether a draft model's drafting of s pays for the catch-up it needs
 * first: the draft K/V lacks the positions [computed, n - 1) (a new
 * prompt, tokens decoded while s did not draft, everything after a
 * preemption), and drafting starts with the draft model's prefill of them,
 * g tokens at ~token_cost * dm_ratio of a step's fixed part each. That is
 * paid once; what pays it back is drafting in the decode steps after it
 * (at their threshold: no prefill chunk in them to hide the drafts in),
 * counted over at most ENGINE_SPEC_CATCHUP_STEPS steps of what s may still
 * generate. Without this, a step carrying a prefill chunk makes drafts look
 * nearly free, and a whole context's catch-up starts for a few drafted
 * tokens (docs/decisions.md, 2026-11-27). */
#define ENGINE_SPEC_CATCHUP_STEPS 64
static bool spec_catchup_pays(engine *en, seq *s, int n_decode, double cost, double dcost) {
    int g = s->tok.n - 1 - dmodel_seq_computed(s->spec.dms);
    if (g <= 0 || en->o.spec_token_cost > 0) return true; /* (a fixed cost: drafts forced, tests) */
    double thr = draft_threshold(n_decode, n_decode, cost, dcost), alpha = draft_seq_alpha(s->spec.ds), e = 1, gain = 0;
    for (int j = 0; j < draft_max(en->dr); j++) {
        e *= alpha;
        if (e <= thr) break;
        gain += e - thr;
    }
    int steps = MIN(ENGINE_SPEC_CATCHUP_STEPS, s->r->max_tokens - s->tok.n_generated);
    double lost = g * cost * en->dm_ratio * MAX(n_decode, 1) / (1 + cost * MAX(n_decode, 1));
    return gain * steps > lost;
}

/* The draft model's drafts of the sequences dmodel_add took: its forwards
 * run, each sequence's drafts go into the batch after its last token. */
static void spec_run_model(engine *en, int *n_tok, int n_bs) {
    double ms;
    if (!dmodel_run(en->dm, &ms)) return;
    if (ms > 0) en->dm_ms = en->dm_ms > 0 ? 0.9 * en->dm_ms + 0.1 * ms : ms;
    for (int j = 0; j < n_bs; j++) {
        seq *s = en->b_owner[j];
        if (!s->spec.dms || en->b_chunk[j] != 1 || s->tok.n - s->tok.n_computed != 1) continue;
        const int32_t *d;
        int k = dmodel_seq_drafts(s->spec.dms, &d);
        if (k <= 0) continue;
        memcpy(s->spec.draft, d, (size_t)k * sizeof *d);
        /* (fewer target slots than drafts: the rest is not verified; the
         * cut depends on the pool, not on the drafts, so the rule stays exact) */
        k = spec_reserve(en, s, k);
        if (k <= 0) continue;
        s->spec.n_draft = k;
        en->b_chunk[j] += k;
        *n_tok += k;
    }
}

/* Gives the decoding sequences of the planned batch their drafts within
 * the step's budget: a single decoding sequence (ngram, suffix, learnt
 * costs) the count that gives the most tokens per unit of time by the
 * step times measured (draft_pick), else as many as pay
 * (draft_threshold; draft_plan_seq or draft_plan). */
static void spec_plan(engine *en, int *n_tok, int n_bs) {
    if (!en->dr) return;
    int n_decode = 0;
    for (int j = 0; j < n_bs; j++) {
        seq *s = en->b_owner[j];
        s->spec.n_draft = 0;
        n_decode += s->tok.n - s->tok.n_computed == 1;
    }
    double dcost, cost = spec_cost(en, &dcost);
    /* (at the threshold of a decode-only step: an accepted draft saves the
     * sequence a slot in a later decode step, whatever else is in this one;
     * counting a prefill chunk's tokens in this step would make its drafts
     * look nearly free: docs/decisions.md, 2026-11-27) */
    double thr = draft_threshold(n_decode, n_decode, cost, dcost);
    /* ngram, suffix with learnt costs: what a draft was measured to cost at
     * this batch size, once known (draft_cost_threshold) */
    if (!en->dm && en->o.spec_token_cost <= 0) thr = draft_cost_threshold(&en->cost, n_decode, thr);
    int rows = en->spec_rows, room = en->o.max_batch_tokens - *n_tok;
    /* (one decoding sequence only: with more, a step's time moves with
     * whose contexts are in it as much as with the drafts, the count's
     * cells each see a few such steps and the pick chased their noise: 8
     * agents measured 0.973x against the threshold, docs/perf.md) */
    bool pick = !en->dm && en->o.spec_token_cost <= 0 && !en->o.spec_drafts && n_decode == 1;
    for (int j = 0; j < n_bs && rows > 0; j++) {
        seq *s = en->b_owner[j];
        if (!s->spec.ds || en->b_chunk[j] != 1 || s->tok.n - s->tok.n_computed != 1) continue;
        int max = MIN(MIN(MIN(rows, room), en->n_ctx - s->tok.n), draft_max(en->dr));
        max = MIN(max, s->r->max_tokens - s->tok.n_generated - 1); /* the last token needs no draft */
        if (en->dm) { /* drafted below, in the draft model's batched forwards */
            int want = draft_plan(max, draft_seq_alpha(s->spec.ds), thr);
            if (want <= 0 || !s->spec.dms) {
                if (want <= 0) draft_seq_idle(s->spec.ds);
                continue;
            }
            if (!spec_catchup_pays(en, s, n_decode, cost, dcost)) {
                draft_seq_idle(s->spec.ds);
                continue;
            }
            req *r = s->r;
            dmodel_how how = {.sp = r->sp, .gm = s->out.gm, .bias_ids = r->bias_ids, .bias_vals = r->bias_vals,
                              .n_bias = r->n_bias, .ignore_eos = r->ignore_eos};
            int k = dmodel_add(en->dm, s->spec.dms, s->tok.ids, s->tok.n, want, &how);
            rows -= k;
            room -= k;
            continue;
        }
        /* ngram, suffix: the proposal first, then how much of it its
         * evidence says pays (no estimate reaches 1: nothing pays above) */
        int k;
        if (en->o.spec_drafts) { /* (bench --spec-e2e: its drafts, all verified) */
            if (max <= 0) continue;
            k = MAX(0, MIN(max, en->o.spec_drafts(en->o.spec_drafts_ctx, s->r, s->tok.ids, s->tok.n, max,
                                                  s->spec.draft)));
        } else if (pick) { /* the count that gives the most tokens per unit of time */
            if (max <= 0) continue;
            double E[DRAFT_MAX];
            k = draft_propose(en->dr, s->spec.ds, s->tok.ids, s->tok.n, max, s->spec.draft);
            draft_seq_expect(en->dr, s->spec.ds, k, E);
            int d = draft_pick(&en->cost, E, k);
            k = d >= 0 ? d : thr >= 1 ? 0 : draft_plan_seq(en->dr, s->spec.ds, k, thr); /* (no step times yet) */
        } else {
            if (max <= 0 || thr >= 1) continue;
            k = draft_propose(en->dr, s->spec.ds, s->tok.ids, s->tok.n, max, s->spec.draft);
            k = draft_plan_seq(en->dr, s->spec.ds, k, thr);
        }
        k = spec_reserve(en, s, spec_cut_grammar(en, s, k));
        if (k <= 0) continue;
        s->spec.n_draft = k;
        en->b_chunk[j] += k;
        *n_tok += k;
        rows -= k;
        room -= k;
    }
    if (en->dm) spec_run_model(en, n_tok, n_bs);
}

/* After post_token sampled row0 (the token after position n0 - 1): goes on
 * sampling the rows of s's drafts while each sampled token equals the draft
 * it was run as. Returns how the request stands (as post_token), and
 * counts the drafts' K/V that holds the tokens now at their positions as
 * computed (at most up to the last token, which is always left to run). */
static req_finish spec_verify(engine *en, seq *s, int n0, int nd, int row0, req_finish why) {
    size_t n_vocab = (size_t)en->m->cfg.n_vocab;
    int a = 0;
    while (why == REQ_RUNNING && a < nd && s->tok.n == n0 + a + 1 && s->tok.ids[n0 + a] == s->spec.draft[a] &&
           s->tok.n_generated < s->r->max_tokens && s->tok.n <= en->n_ctx) {
        a++;
        spec_row sr = {a < nd ? s->spec.draft[a] : -1, dmodel_seq_q(s->spec.dms, a)}; /* a draft model's: the rule */
        why = post_token(en, s, en->logits + (size_t)(row0 + a) * n_vocab, en->dm && a < nd ? &sr : NULL);
    }
    int n_acc = 0; /* drafts equal to the tokens sampled (or forced) at their place */
    while (n_acc < nd && n0 + n_acc < s->tok.n && s->tok.ids[n0 + n_acc] == s->spec.draft[n_acc]) n_acc++;
    s->tok.n_computed += MAX(0, MIN(n_acc, s->tok.n - 1 - n0));
    en->cnt.spec_drafted_tokens_total[draft_get_kind(en->dr)] += (uint64_t)nd;
    en->cnt.spec_accepted_tokens_total[draft_get_kind(en->dr)] += (uint64_t)n_acc;
    draft_seq_feedback(en->dr, s->spec.ds, nd, n_acc, s->tok.ids, s->tok.n);
    return why;
}

/* Pins: tool names learnt since the last step, expiry. */
static void pins_step(engine *en) {
    if (!en->pol) return;
    int64_t now = sched__now(en);
    pthread_mutex_lock(&en->mu);
    for (int i = 0; i < en->n_toolq; i++) kvpolicy_set_tool(en->pol, en->toolq[i].serial, en->toolq[i].tool, now);
    en->n_toolq = 0;
    pthread_mutex_unlock(&en->mu);
    kvpolicy_expire(en->pol, now);
}

/* The next waiting sequence to try this step (policy_pick_waiting), or
 * NULL. O(waiting). */
static seq *fair_pick(engine *en, int pass, int64_t now, int n_prefilling) {
    if (en->waiting.n > en->cap_pw) {
        en->cap_pw = en->waiting.n * 2;
        en->pw = xrealloc(en->pw, (size_t)en->cap_pw * sizeof *en->pw);
    }
    for (int i = 0; i < en->waiting.n; i++) en->pw[i] = waiting_view(en, en->waiting.v[i]);
    int i = policy_pick_waiting(&en->lim, en->pw, en->waiting.n, pass, now, n_prefilling);
    return i < 0 ? NULL : en->waiting.v[i];
}

/* Slots or blocks kept `w` out: the sequence policy_fair_victim names
 * yields, preempted now, so w is admitted at the next step. One per step
 * (the preemption stops this step's admissions); the victim's decode token
 * leaves the step's batch (n_tok, n_bs). */
static void fair_yield(engine *en, seq *w, int *n_tok, int *n_bs) {
    /* the clients with work (engine-side count: en->n_clients is engine_submit's) */
    int n_active = 0;
    seq_list *lists[2] = {&en->running, &en->waiting};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < lists[k]->n; i++) {
            client *c = seq_client(en, lists[k]->v[i]);
            if (c->seen_step != en->step_no) c->seen_step = en->step_no, n_active++;
        }
    policy_waiting wv = waiting_view(en, w);
    int share;
    int vi = policy_fair_victim(&en->lim, running_views(en), en->running.n, &wv, n_active, &share);
    if (vi < 0) return;
    seq *victim = en->running.v[vi];
    log_debug("engine: request %llu yields to request %llu (fair share %d of %d clients)",
              (unsigned long long)victim->order, (unsigned long long)w->order, share, n_active);
    for (int j = 0; j < *n_bs; j++) /* its decode token is in the batch already */
        if (en->b_owner[j] == victim) {
            *n_tok -= en->b_chunk[j];
            memmove(en->b_owner + j, en->b_owner + j + 1, (size_t)(*n_bs - j - 1) * sizeof *en->b_owner);
            memmove(en->b_chunk + j, en->b_chunk + j + 1, (size_t)(*n_bs - j - 1) * sizeof *en->b_chunk);
            (*n_bs)--;
            break;
        }
    preempt(en, victim);
    en->cnt.fair_preemptions_total++;
}

/* The step's prefill chunks (after the decode tokens), in the order of
 * policy_pick_prefill, while the step has fewer than
 * POLICY_PREFILL_STEP_MIN prefill tokens and budget is left. */
static void prefill_plan(engine *en, int budget, int *n_tok, int *n_bs) {
    /* clients that start prefilling again start at the least virtual time
     * of those that prefilled last step */
    double v = 0;
    bool any = false;
    for (int i = 0; i < en->running.n; i++) {
        seq *s = en->running.v[i];
        if (s->tok.n - s->tok.n_computed < 1 || s->sch.sched_step == en->step_no) continue;
        client *c = seq_client(en, s);
        if (c->pf_step != en->step_no) {
            c->pf_vt = policy_pf_vt_join(c->pf_vt, c->pf_step, en->step_no, en->pf_v);
            c->pf_step = en->step_no;
        }
        if (!any || c->pf_vt < v) v = c->pf_vt, any = true;
    }
    if (any) en->pf_v = v;
    int prefill_tok = 0;
    while (*n_tok < budget && prefill_tok < POLICY_PREFILL_STEP_MIN) {
        for (int i = 0; i < en->running.n; i++) {
            const seq *s = en->running.v[i];
            int pend = s->tok.n - s->tok.n_computed;
            en->pp[i] = (policy_prefill){.priority = s->r->priority,
                                         .client = s->r->client_slot,
                                         .eligible = pend >= 1 && s->sch.sched_step != en->step_no,
                                         .starved = en->step_no - s->sch.wait_from > POLICY_PREFILL_STARVE_STEPS,
                                         .pending = pend,
                                         .c_pf_vt = seq_client(en, s)->pf_vt};
        }
        int bi = policy_pick_prefill(en->pp, en->running.n);
        if (bi < 0) break;
        seq *best = en->running.v[bi];
        int before = *n_tok;
        schedule(en, best, budget, n_tok, n_bs);
        best->sch.wait_from = en->step_no;
        prefill_tok += *n_tok - before;
        seq_client(en, best)->pf_vt += *n_tok - before;
    }
}

/* The decode share between clients (policy_decode_share): the rows it
 * picks leave the batch and sit out the step (their pending token runs in
 * a later one; nothing is freed or recomputed). */
static void decode_share(engine *en, int *n_tok, int *n_bs) {
    if (en->o.no_decode_share) return;
    for (int j = 0; j < *n_bs; j++) {
        const seq *s = en->b_owner[j];
        int c = en->b_chunk[j];
        en->pd[j] = (policy_row){.client = s->r->client_slot,
                                 .n_tokens = c,
                                 .decode = c == 1 && s->tok.n_generated > 0,
                                 .first = s->tok.n_generated == 0 && s->tok.n_computed + c >= s->tok.n,
                                 .last_ran = s->sch.prev_sched,
                                 .order = s->order,
                                 .priority = s->r->priority};
    }
    if (!policy_decode_share(en->pd, *n_bs, en->pd_out)) return;
    int k = 0;
    for (int j = 0; j < *n_bs; j++) {
        seq *s = en->b_owner[j];
        if (en->pd_out[j]) {
            s->sch.sched_step = s->sch.prev_sched; /* it did not run */
            *n_tok -= en->b_chunk[j];
            en->cnt.decode_deferred_total++;
            continue;
        }
        en->b_owner[k] = s;
        en->b_chunk[k++] = en->b_chunk[j];
    }
    *n_bs = k;
}

/* plan_hook's view of the planned step. */
static void plan_report(engine *en, int n_bs) {
    if (!en->o.plan_hook) return;
    for (int j = 0; j < n_bs; j++) {
        seq *s = en->b_owner[j];
        en->plan_rows[j] = (engine_plan_row){s->r, en->b_chunk[j], s->tok.n - s->tok.n_computed > 1};
    }
    en->o.plan_hook(en->o.plan_hook_ctx, en->step_no, en->plan_rows, n_bs);
}

/* The step reads top to bottom in four phases: step_plan, step_build,
 * step_forward, step_advance (the list at the top of this file). */

/* Plans the step's batch (en->b_owner / b_chunk: n_bs sequences, n_tok
 * tokens): the plan's steps 1-7 at the top of this file. */
static void step_plan(engine *en, int *n_tok, int *n_bs) {
    int B = en->o.block_tokens;
    take_submitted(en);
    pins_step(en);
    sched__hints_step(en);
    drop_finished_controls(en);
    sample_held(en);
    en->preempted_this_step = false;
    park_step(en);
    reserve_decode_slots(en);
    clients_kv_count(en);

    int budget = en->o.max_batch_tokens;
    *n_tok = 0;
    *n_bs = 0;

    /* The budget goes first to one decode token per running sequence. Then
     * waiting sequences are admitted (policy_pick_waiting), and the prefill
     * tokens go by policy_pick_prefill (prefill_plan). */
    en->step_no++;
    for (int i = 0; i < en->running.n && *n_tok < budget; i++) {
        seq *s = en->running.v[i];
        if (s->tok.n - s->tok.n_computed == 1) schedule(en, s, budget, n_tok, n_bs);
    }
    int n_prefilling = 0;
    for (int i = 0; i < en->running.n; i++) seq_client(en, en->running.v[i])->n_prefilling = 0;
    for (int i = 0; i < en->running.n; i++) {
        seq *s = en->running.v[i];
        bool pre = s->tok.n - s->tok.n_computed > 1;
        n_prefilling += pre;
        seq_client(en, s)->n_prefilling += pre;
    }
    /* Agents coming back (agent policy) are admitted first: their context
     * is in the cache, so they cost little and free their pins; so are new
     * conversations that waited too long (policy_overdue). Within a pass,
     * the fair order (fair_pick). */
    int64_t now = en->pol ? sched__now(en) : 0;
    bool stop_admit = false;
    seq *blocked = NULL; /* the first in the fair order that slots or blocks kept out */
    for (int pass = en->pol ? 0 : 1; pass < 2 && !stop_admit; pass++)
    while (!en->preempted_this_step) {
        seq *s = fair_pick(en, pass, now, n_prefilling);
        if (!s) break;
        s->sch.tried_step = en->step_no;
        policy_gate g = policy_admit_gate(&en->lim, en->running.n, (s->tok.n + B - 1) / B);
        if (g == POLICY_GATE_NO_SLOT) {
            if (!blocked) blocked = s;
            break;
        }
        if (g == POLICY_GATE_NEVER_FITS) {
            list_remove(&en->waiting, s);
            seq_finish(en, s, REQ_FINISH_LENGTH, NULL);
            continue;
        }
        bool overdue = en->lim.agent && policy_overdue(&en->lim, s->sch.wait_start_ns, now);
        int rc = try_admit(en, s);
        if (rc < 0 && !blocked) blocked = s;
        policy_after next = policy_after_try(rc, overdue, pass);
        if (next == POLICY_STOP) stop_admit = true;
        if (next != POLICY_NEXT) break;
        if (rc == 0) continue;
        list_remove(&en->waiting, s);
        list_insert_ordered(&en->running, s);
        s->sch.wait_from = en->step_no;
        seq_client(en, s)->kv_blocks += s->kv.n_blocks;
        bool pre = s->tok.n - s->tok.n_computed > 1;
        n_prefilling += pre;
        seq_client(en, s)->n_prefilling += pre;
    }
    if (blocked && !en->preempted_this_step) fair_yield(en, blocked, n_tok, n_bs);
    clients_kv_count(en);
    /* Blocks read back from disk for a waiting sequence go to the tree
     * (READY, evictable) as soon as they are in, also when admission
     * stopped before it: held by a sequence that is not tried, they kept an
     * overdue request from the blocks it waited for, and nothing moved until
     * its client gave up (soak run 5: every request stalled for 120 s). */
    for (int i = 0; i < en->waiting.n; i++)
        if (en->waiting.v[i]->disk.n_loading > 0) sched__disk_restore(en, en->waiting.v[i]);
    pthread_mutex_lock(&en->mu);
    queue_publish_locked(en);
    pthread_mutex_unlock(&en->mu);
    prefill_plan(en, budget, n_tok, n_bs);
    decode_share(en, n_tok, n_bs);
    spec_plan(en, n_tok, *n_bs);
}

/* Lays the planned chunks out as one ragged batch; counts the rows of
 * logits wanted and the prompt positions in it. */
static model_batch step_build(engine *en, int n_tok, int n_bs, int *n_logits, uint64_t *n_prompt_work) {
    int k = 0;
    *n_logits = 0;
    *n_prompt_work = 0;
    for (int j = 0; j < n_bs; j++) {
        seq *s = en->b_owner[j];
        int c = en->b_chunk[j];
        for (int q = 0; q < c; q++) {
            int p = s->tok.n_computed + q;
            en->b_tok[k] = p < s->tok.n ? s->tok.ids[p] : s->spec.draft[p - s->tok.n];
            en->b_pos[k] = p;
            en->b_seq[k] = j;
            /* the last token and its drafts (embeddings: model_hidden) */
            en->b_logits[k] = p >= s->tok.n - 1 && !s->r->embd;
            *n_logits += en->b_logits[k];
            if (p < s->tok.n_prefill_end && p < s->tok.n) (*n_prompt_work)++;
            k++;
        }
        en->b_seqs[j].block_table = s->kv.blocks;
        en->b_seqs[j].n_blocks = s->kv.n_blocks;
    }
    return (model_batch){.n_tokens = n_tok,
                         .token = en->b_tok,
                         .pos = en->b_pos,
                         .seq = en->b_seq,
                         .logits = en->b_logits,
                         .n_seqs = n_bs,
                         .seqs = en->b_seqs};
}

/* Runs the batch; false (its requests failed, the server lives) when the
 * model rejects it. */
static bool step_forward(engine *en, const model_batch *b, int n_logits) {
    err_t e = {0};
    int rows = model_forward(en->m, en->st, en->kv, b, en->logits, &e);
    if (rows < 0) {
        /* A batch the model rejects is our bug or a bad token; fail the
         * requests in it rather than the server. */
        log_error("engine: model_forward failed: %s", e.msg);
        for (int j = 0; j < b->n_seqs; j++) {
            seq *s = en->b_owner[j];
            list_remove(&en->running, s);
            seq_finish(en, s, REQ_FINISH_ERROR, e.msg);
        }
        return false;
    }
    ASSERT(rows == n_logits);
    return true;
}

/* After s sampled (why: post_token's, or spec_verify's): ends it when it
 * failed, stopped or reached its length. True when it left the running list. */
static bool seq_after_sample(engine *en, seq *s, req_finish why) {
    if (why == REQ_FINISH_ERROR) {
        list_remove(&en->running, s);
        seq_finish(en, s, why,
                   s->fail[0] ? s->fail
                   : s->out.gm    ? "no token can be sampled: the model's logits hold NaN/inf, or the grammar allows none"
                              : "the model's logits hold NaN or inf (a broken model file?)");
        return true;
    }
    if (why == REQ_RUNNING && (s->tok.n_generated >= s->r->max_tokens || s->tok.n > en->n_ctx))
        why = REQ_FINISH_LENGTH; /* max_tokens, or the context cannot take the next token */
    if (why == REQ_RUNNING) return false;
    list_remove(&en->running, s);
    seq_finish(en, s, why, NULL);
    return true;
}


/* The sequences that sat out for their masks and whose masks are in now
 * sample from their kept rows (before the step's plan: they join it). */
static void sample_held(engine *en) {
    if (!en->n_held) return;
    for (int i = 0; i < en->running.n; i++) {
        seq *s = en->running.v[i];
        if (!s->out.held_ok || !sched__mask_gate(en, s)) continue;
        sched__hold_drop(en, s);
        req_finish why = post_token(en, s, s->out.held, NULL);
        sched__mask_gate_end(en, s, why);
        if (seq_after_sample(en, s, why)) i--;
    }
}

/* Advances each sequence of the batch: computed positions, the prefix
 * index and the disk, then a token for those at their end (or, when its
 * mask is not in, its row kept for later: seq_hold), and finishing. */
static void step_advance(engine *en, int n_bs) {
    int row = 0;
    for (int j = 0, k_end = 0; j < n_bs; j++) {
        seq *s = en->b_owner[j];
        int nd = s->spec.n_draft, n0 = s->tok.n;
        s->spec.n_draft = 0;
        s->tok.n_computed += en->b_chunk[j] - nd;
        k_end += en->b_chunk[j];
        seq_client(en, s)->served += en->b_chunk[j];
        s->r->n_forward_steps++;
        seq_index_computed(en, s);
        sched__disk_write_through(en, s);
        if (s->tok.n_computed < s->tok.n) continue;
        if (s->r->embd) { /* an embedding: the last token's hidden state, nothing generated */
            model_hidden(en->m, en->st, k_end - 1, s->r->embd);
            list_remove(&en->running, s);
            seq_finish(en, s, REQ_FINISH_STOP, NULL);
            continue;
        }
        en->cnt.decode_passes_total++;
        const float *lg = en->logits + (size_t)row * en->m->cfg.n_vocab;
        /* (a forced run at admission may already have reached max_tokens) */
        if (s->tok.n_generated < s->r->max_tokens && !sched__mask_gate(en, s)) {
            ASSERT(nd == 0); /* (no worker with speculation) */
            sched__seq_hold(en, s, lg);
            row++;
            continue;
        }
        spec_row sr = {nd > 0 ? s->spec.draft[0] : -1, dmodel_seq_q(s->spec.dms, 0)}; /* a draft model's: the rule */
        req_finish why = s->tok.n_generated >= s->r->max_tokens ? REQ_FINISH_LENGTH
                                                             : post_token(en, s, lg, en->dm && nd > 0 ? &sr : NULL);
        if (nd > 0) {
            why = spec_verify(en, s, n0, nd, row, why);
            row += nd;
            seq_index_computed(en, s);
        } else if (s->spec.ds && !en->dm) { /* a proposal not drafted: its first place is known now */
            draft_seq_feedback(en->dr, s->spec.ds, 0, 0, s->tok.ids, s->tok.n);
        }
        sched__mask_gate_end(en, s, why);
        if (s->spec.dms) dmodel_seq_sync(s->spec.dms, s->tok.ids, s->tok.n);
        row++;
        seq_after_sample(en, s, why);
    }
}

/* One step. Returns false when there was nothing to run. */
static bool engine_step(engine *en) {
    int n_tok, n_bs;
    int64_t t_step = clock_ns();
    step_plan(en, &n_tok, &n_bs);
    plan_report(en, n_bs);
    if (n_bs == 0) {
        sched__mask_share_publish(en);
        mem_publish(en);
        stats_publish(en);
        return false;
    }
    int n_logits;
    uint64_t n_prompt_work;
    model_batch b = step_build(en, n_tok, n_bs, &n_logits, &n_prompt_work);
    int64_t t0 = clock_ns();
    if (!step_forward(en, &b, n_logits)) return true;
    int64_t fw = clock_ns() - t0;
    int n_decode = 0, n_drafts = 0;
    if (en->dr) {
        draft_cost_observe(&en->cost, n_tok, (double)fw / 1e6);
        for (int j = 0; j < n_bs && n_decode >= 0; j++) { /* decode-only: every row a decode token or a draft */
            seq *s = en->b_owner[j];
            bool dec = s->tok.n - s->tok.n_computed == 1 && en->b_chunk[j] == 1 + s->spec.n_draft;
            n_decode = dec ? n_decode + 1 : -1;
            n_drafts += s->spec.n_draft;
        }
    }
    en->cnt.forward_ns_total += (uint64_t)fw;
    sched__mask_share_charge(en, n_bs, n_tok, fw);
    step_advance(en, n_bs);
    /* the whole step (drafting, the forward, verification and sampling):
     * what an accepted draft saves of a later step and what drafting adds
     * to this one */
    if (n_decode > 0) draft_cost_observe_decode(&en->cost, n_decode, n_drafts, (double)(clock_ns() - t_step) / 1e6);
    sched__mask_share_publish(en);
    en->cnt.prompt_tokens_computed_total += n_prompt_work;
    en->cnt.steps_total++;
    mem_publish(en); /* once a step (not at every finish: it walks every request) */
    stats_publish(en);
    return true;
}

static void check_state(engine *en) {
    err_t e = {0};
    if (kvpool_check(en->pool, &e) < 0) PANIC("kvpool_check: %s", e.msg);
    if (radix_check(en->tree, &e) < 0) PANIC("radix_check: %s", e.msg);
    /* Every reference is accounted for: sequences' tables, pins, the tree. */
    long refs = 0;
    for (int b = 0; b < kvpool_n_blocks(en->pool); b++) refs += kvpool_refcount(en->pool, b);
    long held = radix_n_cached(en->tree);
    if (en->pol) {
        kvpolicy_stats ps;
        kvpolicy_get_stats(en->pol, &ps);
        held += ps.n_pinned_refs;
    }
    for (int i = 0; i < en->running.n; i++) held += en->running.v[i]->kv.n_blocks;
    for (int i = 0; i < en->waiting.n; i++) held += en->waiting.v[i]->kv.n_blocks;
    for (int i = 0; i < en->n_hints; i++) held += en->hints[i].s->kv.n_blocks;
    if (refs != held) PANIC("engine: %ld pool references but %ld held", refs, held);
}

/* CLOCK_MONOTONIC 20 ms from now (en->cv's clock): the engine's idle waits. */
static struct timespec mono_in_20ms(void) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += 20 * 1000000L;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    return dl;
}

static void *engine_thread(void *arg) {
    engine *en = arg;
    for (;;) {
        pthread_mutex_lock(&en->mu);
        bool stop = en->stop;
        uint64_t gen = en->mask_gen;
        bool idle = en->n_submitq == 0 && en->running.n == 0;
        if (!stop && idle) {
            struct timespec dl = mono_in_20ms();
            /* Live pins expire on time while nothing runs too (a second
             * late at most): their blocks go back to the pool and /metrics
             * shows them gone, not only at the next arrival. */
            if (en->waiting.n == 0 && en->n_hints == 0 && en->cnt.kv_pins > 0) dl.tv_sec += 1;
            if (en->waiting.n == 0 && en->n_hints == 0 && en->cnt.kv_pins == 0)
                pthread_cond_wait(&en->cv, &en->mu);
            else
                pthread_cond_timedwait(&en->cv, &en->mu, &dl);
            stop = en->stop;
        }
        pthread_mutex_unlock(&en->mu);
        if (stop) break;
        bool ran = engine_step(en);
        if (en->o.check) check_state(en);
        if (!ran && en->n_held > 0) {
            /* every running sequence waits for its mask: until one is in
             * (or a request comes, or 20 ms for cancellations) */
            pthread_mutex_lock(&en->mu);
            if (en->mask_gen == gen && en->n_submitq == 0 && !en->stop) {
                struct timespec dl = mono_in_20ms();
                pthread_cond_timedwait(&en->cv, &en->mu, &dl);
            }
            pthread_mutex_unlock(&en->mu);
        }
        if (ran && en->o.step_delay_us > 0) {
            struct timespec d = {en->o.step_delay_us / 1000000, (long)(en->o.step_delay_us % 1000000) * 1000L};
            nanosleep(&d, NULL);
        }
    }
    /* Shutdown: every request still known ends as cancelled. */
    take_submitted(en);
    while (en->running.n) {
        seq *s = en->running.v[en->running.n - 1];
        en->running.n--;
        seq_finish(en, s, REQ_FINISH_CANCEL, NULL);
    }
    while (en->waiting.n) {
        seq *s = en->waiting.v[en->waiting.n - 1];
        en->waiting.n--;
        seq_finish(en, s, REQ_FINISH_CANCEL, NULL);
    }
    return NULL;
}

/* ---- public ---- */

/* engine_opts.clock's default. */
static int64_t clock_monotonic(void *ctx) {
    (void)ctx;
    return clock_ns();
}

/* An I/O thread finished a disk read: wake an idle engine thread. */
static void engine_wake(void *ctx) {
    engine *en = ctx;
    pthread_mutex_lock(&en->mu);
    pthread_cond_broadcast(&en->cv);
    pthread_mutex_unlock(&en->mu);
}

int engine_new(const model *m, const engine_opts *o, engine **out, err_t *e) {
    *out = NULL;
    if (o->n_threads < 1) return err_set(e, ERR_INVALID, "threads must be >= 1 (got %d)", o->n_threads);
    if (o->block_tokens < 1 || o->block_tokens > 1024)
        return err_set(e, ERR_INVALID, "block tokens must be in [1, 1024] (got %d)", o->block_tokens);
    if (o->max_batch_tokens < 1) return err_set(e, ERR_INVALID, "max-batch-tokens must be >= 1 (got %d)", o->max_batch_tokens);
    if (o->max_running < 1) return err_set(e, ERR_INVALID, "max-running must be >= 1 (got %d)", o->max_running);
    if (o->max_queue < 0) return err_set(e, ERR_INVALID, "max-queue must be >= 0 (got %d)", o->max_queue);
    if (!(o->client_max_kv >= 0 && o->client_max_kv <= 1))
        return err_set(e, ERR_INVALID, "client-max-kv must be a share in [0, 1] (got %g)", o->client_max_kv);
    if (o->spec < DRAFT_OFF || o->spec >= DRAFT_N_KINDS) return err_set(e, ERR_INVALID, "spec: unknown drafter %d", o->spec);
    if (o->spec_max < 0 || o->spec_max > DRAFT_MAX)
        return err_set(e, ERR_INVALID, "spec-max must be in [1, %d] (got %d)", DRAFT_MAX, o->spec_max);
    if (o->spec == DRAFT_MODEL && !o->draft_model)
        return err_set(e, ERR_INVALID, "spec draft needs a draft model (--draft-model FILE.gguf)");
    if (o->draft_model && o->spec != DRAFT_MODEL)
        return err_set(e, ERR_INVALID, "a draft model drafts only with spec draft (got spec %s)",
                       draft_kind_name((draft_kind)o->spec));
    if (o->draft_model && o->draft_model->cfg.n_vocab != m->cfg.n_vocab)
        return err_set(e, ERR_INVALID, "the draft model has %d tokens in its vocabulary, the model %d: it must have "
                       "the model's vocabulary", o->draft_model->cfg.n_vocab, m->cfg.n_vocab);
    int n_ctx = o->n_ctx > 0 ? o->n_ctx : m->cfg.n_ctx_train;
    if (n_ctx < 2) return err_set(e, ERR_INVALID, "context size must be >= 2 (got %d)", n_ctx);
    if (o->kv_type != MODEL_KV_F16 && o->kv_type != MODEL_KV_Q8_0)
        return err_set(e, ERR_INVALID, "kv type: unknown type %d", (int)o->kv_type);
    size_t bb = model_kv_block_bytes_type(m, o->block_tokens, o->kv_type);
    size_t n_blocks = bb ? o->kv_mem_bytes / bb : 0;
    if (n_blocks < 2)
        return err_set(e, ERR_RANGE, "kv-mem %zu bytes holds %zu blocks of %zu bytes; need at least 2", o->kv_mem_bytes,
                       n_blocks, bb);
    if (n_blocks > (1u << 30)) n_blocks = 1u << 30;
    /* The pool is allocated (and zeroed) at once: refuse sizes the machine
     * cannot hold instead of dying in the allocator. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && (double)n_blocks * (double)bb > 0.9 * (double)pages * (double)page)
        return err_set(e, ERR_RANGE, "kv-mem %zu bytes is more than 90%% of this machine's %.1f GiB of memory",
                       o->kv_mem_bytes, (double)pages * (double)page / (1 << 30));

    engine *en = xcalloc(1, sizeof *en);
    en->m = m;
    en->o = *o;
    if (!en->o.clock) en->o.clock = clock_monotonic;
    double ttl_max_s = o->kv_ttl_max_s > 0 ? o->kv_ttl_max_s : 60;
    en->o.new_wait_max_ms = policy_new_wait_ms(o->new_wait_max_ms, ttl_max_s, ENGINE_NEW_WAIT_MAX_MS);
    en->o.max_running = MIN(o->max_running, o->max_batch_tokens);
    en->n_ctx = n_ctx;
    en->kv = model_kv_new_type(m, (int)n_blocks, o->block_tokens, o->kv_type);
    if (!en->kv) {
        free(en);
        return err_set(e, ERR_NOMEM, "cannot allocate %zu KV blocks", n_blocks);
    }
    en->pool = kvpool_new((int)n_blocks);
    en->tree = radix_new(en->pool, o->block_tokens);
    if (o->kv_policy == ENGINE_KV_AGENT) en->pol = kvpolicy_new(en->pool, ttl_max_s, 0);
    en->st = model_state_new(m, o->max_batch_tokens, n_ctx, o->n_threads);
    int mr = en->o.max_running, mb = o->max_batch_tokens;
    if (o->spec != DRAFT_OFF) {
        draft_opts dop = draft_defaults((draft_kind)o->spec);
        if (o->spec_max > 0) dop.max_draft = MIN(o->spec_max, DRAFT_MAX);
        en->dr = draft_new(&dop);
        if (!en->dr) log_warn("engine: out of memory for the drafter: no speculative decoding");
        en->spec_rows = en->dr ? MIN(ENGINE_SPEC_ROWS, mb) : 0;
    }
    en->cnt.spec_kind = draft_get_kind(en->dr);
    en->logits = xmalloc((size_t)MIN(mr + en->spec_rows, mb) * (size_t)m->cfg.n_vocab * sizeof(float));
    en->b_tok = xmalloc((size_t)mb * sizeof(int32_t));
    en->b_pos = xmalloc((size_t)mb * sizeof(int32_t));
    en->b_seq = xmalloc((size_t)mb * sizeof(int32_t));
    en->b_logits = xmalloc((size_t)mb);
    en->b_seqs = xcalloc((size_t)mr, sizeof *en->b_seqs);
    en->b_owner = xcalloc((size_t)mr, sizeof *en->b_owner);
    en->b_chunk = xcalloc((size_t)mr, sizeof *en->b_chunk);
    en->pr = xcalloc((size_t)mr, sizeof *en->pr);
    en->pp = xcalloc((size_t)mr, sizeof *en->pp);
    en->pd = xcalloc((size_t)mr, sizeof *en->pd);
    en->pd_out = xcalloc((size_t)mr, sizeof *en->pd_out);
    if (o->plan_hook) en->plan_rows = xcalloc((size_t)mr, sizeof *en->plan_rows);
    en->mask = xmalloc(((size_t)m->cfg.n_vocab + 63) / 64 * sizeof *en->mask);
    en->forced = xmalloc(ENGINE_FORCED_MAX);
    en->forced_ids = xmalloc(ENGINE_FORCED_MAX * sizeof *en->forced_ids);
    en->cap_clients = (int)MIN((int64_t)o->max_queue + en->o.max_running + 1, (int64_t)ENGINE_MAX_CLIENTS);
    en->clients = xcalloc((size_t)en->cap_clients, sizeof *en->clients);
    en->pcl = xcalloc((size_t)en->cap_clients, sizeof *en->pcl);
    pthread_mutex_init(&en->mu, NULL);
    pthread_mutex_init(&en->mk_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&en->mk_cv, &ca); /* (the worker's timed waits for a client's share) */
    pthread_cond_init(&en->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (en->dr && o->spec == DRAFT_MODEL) {
        /* its KV: as many blocks as the target's pool (docs/engine.md,
         * "Draft model") */
        dmodel_opts dmo = {.n_blocks = (int)n_blocks,
                           .block_tokens = o->block_tokens,
                           .max_tokens = mb,
                           .max_seqs = MIN(mr, en->spec_rows),
                           .max_rows = en->spec_rows,
                           .n_ctx = n_ctx,
                           .workers = model_state_pool(en->st),
                           .is_eog = o->is_eog,
                           .eog_ctx = o->eog_ctx};
        int rc = dmodel_new(o->draft_model, m, &dmo, &en->dm, e);
        if (rc < 0) {
            engine_free(en);
            return rc;
        }
        en->spec_p = xmalloc((size_t)m->cfg.n_vocab * sizeof *en->spec_p);
        en->dm_ratio = dmodel_bytes_ratio(en->dm, m);
    }
    en->cnt.kv_blocks_total = (int)n_blocks;
    en->cnt.kv_block_tokens = o->block_tokens;
    en->cnt.mem_weights = m->weight_bytes + (en->dm ? o->draft_model->weight_bytes : 0);
    en->cnt.mem_kv_pool = (uint64_t)n_blocks * bb + (en->dm ? dmodel_bytes(en->dm) : 0);
    /* the buffers sized at start for max_batch_tokens and max_running rows:
     * the forward pass's, the logits rows, the batch arrays, the draft
     * model's, the pool's bookkeeping and the prefix tree (docs/server.md,
     * "Memory budget") */
    {
        const uint64_t nv = (uint64_t)m->cfg.n_vocab;
        en->cnt.mem_scratch = model_state_bytes(en->st) + (en->dm ? dmodel_scratch_bytes(en->dm) : 0) +
                              kvpool_bytes(en->pool) + radix_bytes(en->tree) +
                              (uint64_t)MIN(mr + en->spec_rows, mb) * nv * sizeof *en->logits +
                              (uint64_t)mb * (3 * sizeof(int32_t) + 1) +
                              (uint64_t)mr * (sizeof *en->b_seqs + sizeof *en->b_owner + sizeof *en->b_chunk +
                                              sizeof *en->pr + sizeof *en->pp + sizeof *en->pd + sizeof *en->pd_out +
                                              (en->plan_rows ? sizeof *en->plan_rows : 0)) +
                              (nv + 63) / 64 * sizeof *en->mask + ENGINE_FORCED_MAX * (1 + sizeof *en->forced_ids) +
                              (uint64_t)en->cap_clients * sizeof *en->clients + (en->spec_p ? nv * sizeof *en->spec_p : 0);
    }
    en->cnt.kv_type = o->kv_type;
    en->stats = en->cnt;
    en->n_blocks = (int)n_blocks;
    en->kv_limit = o->client_max_kv > 0 ? (int)MIN(n_blocks, MAX(1, (int64_t)ceil(o->client_max_kv * (double)n_blocks))) : 0;
    en->lim = (policy_limits){.max_running = en->o.max_running,
                              .client_max_running = o->client_max_running,
                              .kv_limit = en->kv_limit,
                              .new_wait_max_ns = (int64_t)en->o.new_wait_max_ms * 1000000,
                              .agent = en->pol != NULL,
                              .pool_blocks = (int)n_blocks,
                              .client_max_queued = o->client_max_queued,
                              .client_max_parked = o->client_max_parked,
                              .stall_timeout_ms = o->stall_timeout_ms,
                              .park_ms = policy_park_ms(o->park_ms, o->stall_timeout_ms)};
    en->park_ms = en->lim.park_ms;
    if (o->kv_disk_dir) {
        kvdisk_opts ko = {.dir = o->kv_disk_dir,
                          .max_bytes = o->kv_disk_max_bytes,
                          /* a q8_0 block's bytes are another format: its
                           * files are foreign to an f16 server and back */
                          .fingerprint = o->kv_type == MODEL_KV_F16
                                             ? kvdisk_fingerprint(m, o->block_tokens, o->kv_disk_dir)
                                             : hash_bytes("kv q8_0", 7, kvdisk_fingerprint(m, o->block_tokens, o->kv_disk_dir)) | 1,
                          .block_tokens = o->block_tokens,
                          .payload_bytes = bb,
                          .n_threads = 2,
                          .n_slots = 64,
                          .on_read_done = engine_wake,
                          .on_read_done_ctx = en};
        int rc = kvdisk_open(&ko, &en->disk, e);
        if (rc < 0) {
            engine_free(en);
            return rc;
        }
    }
    if (!o->mask_sync && o->gvocab && !sched__mask_worker_start(en)) {
        engine_free(en);
        return err_set(e, ERR_NOMEM, "cannot start the grammar mask worker thread");
    }
    if (pthread_create(&en->thread, NULL, engine_thread, en) != 0) {
        engine_free(en);
        return err_set(e, ERR_NOMEM, "cannot start the engine thread");
    }
    *out = en;
    return 0;
}

void engine_stop(engine *en) {
    if (!en || !en->thread) return;
    pthread_mutex_lock(&en->mu);
    en->stop = true;
    pthread_cond_broadcast(&en->cv);
    pthread_mutex_unlock(&en->mu);
    pthread_join(en->thread, NULL);
    en->thread = 0;
}


void engine_free(engine *en) {
    if (!en) return;
    engine_stop(en);
    sched__mask_worker_stop(en);
    for (int i = 0; i < en->n_submitq; i++) {
        sched__req_post_finish(en->submitq[i], REQ_FINISH_CANCEL, NULL);
        req_unref(en->submitq[i]);
    }
    free(en->submitq);
    free(en->submit_ns);
    free(en->pw);
    free(en->pr);
    free(en->pp);
    free(en->pd);
    free(en->pd_out);
    sched__hints_free(en);
    free(en->hints);
    free(en->running.v);
    free(en->waiting.v);
    kvdisk_close(en->disk); /* finishes queued writes */
    kvpolicy_free(en->pol);
    radix_free(en->tree);
    kvpool_free(en->pool);
    model_kv_free(en->kv);
    model_state_free(en->st);
    free(en->logits);
    free(en->b_tok);
    free(en->b_pos);
    free(en->b_seq);
    free(en->b_logits);
    free(en->b_seqs);
    free(en->b_owner);
    free(en->plan_rows);
    free(en->b_chunk);
    free(en->scratch);
    free(en->mask);
    free(en->mk_pick);
    free(en->forced);
    free(en->forced_ids);
    free(en->clients);
    free(en->pcl);
    draft_free(en->dr);
    dmodel_free(en->dm);
    free(en->spec_p);
    pthread_mutex_destroy(&en->mu);
    pthread_cond_destroy(&en->cv);
    pthread_mutex_destroy(&en->mk_mu);
    pthread_cond_destroy(&en->mk_cv);
    free(en);
}

int engine_n_ctx(const engine *en) { return en->n_ctx; }

int engine_capacity_tokens(const engine *en) { return en->n_blocks * en->o.block_tokens; }

int engine_submit(engine *en, req *r, err_t *e) {
    if (r->n_prompt < 1) return err_set(e, ERR_INVALID, "the prompt is empty");
    if (r->grammar && (!en->o.gvocab || !en->o.tokenize || !en->o.piece))
        return err_set(e, ERR_UNSUPPORTED, "constrained output is not available on this engine");
    if (r->grammar && gvocab_n_vocab(en->o.gvocab) != en->m->cfg.n_vocab)
        return err_set(e, ERR_UNSUPPORTED, "the grammar vocabulary does not match the model");
    if (r->n_prompt >= en->n_ctx)
        return err_set(e, ERR_INVALID,
                       "the prompt has %d tokens; the context holds %d (prompt + at least 1 generated; --ctx raises "
                       "it, up to the model's %d)",
                       r->n_prompt, en->n_ctx, en->m->cfg.n_ctx_train);
    int B = en->o.block_tokens;
    if ((r->n_prompt + B - 1) / B + 1 > en->n_blocks)
        return err_set(e, ERR_INVALID, "the prompt has %d tokens; the KV cache holds %d (--kv-mem raises it)",
                       r->n_prompt, (en->n_blocks - 1) * B);
    pthread_mutex_lock(&en->mu);
    if (en->stop || en->n_submitq + en->n_waiting_shared >= en->o.max_queue) {
        int n_queued = en->n_submitq + en->n_waiting_shared; /* read under mu: the engine thread writes them */
        pthread_mutex_unlock(&en->mu);
        return err_set(e, ERR_RANGE, "the server is busy: %d requests are waiting (max-queue %d)", n_queued,
                       en->o.max_queue);
    }
    int slot = client_get_locked(en, r->client);
    if (slot < 0) {
        int n = en->n_clients;
        pthread_mutex_unlock(&en->mu);
        return err_set(e, ERR_RANGE, "the server is busy: %d clients have requests in flight", n);
    }
    client *c = &en->clients[slot];
    /* the per-client limits, each named in its refusal */
    int c_parked = atomic_load(&c->n_parked), c_kv = atomic_load(&c->kv_held);
    int c_waiting = c->n_inflight - atomic_load(&c->n_running);
    char why[256] = "";
    policy_submit refusal = policy_submit_check(&en->lim, c_parked, c_kv, c_waiting);
    if (refusal == POLICY_SUBMIT_PARKED)
        snprintf(why, sizeof why,
                 "per-client parked stream limit (client-max-parked %d) reached: %d of this client's streams are not "
                 "being read (each is cut after --stall-timeout)",
                 en->o.client_max_parked, c_parked);
    else if (refusal == POLICY_SUBMIT_KV)
        snprintf(why, sizeof why,
                 "per-client KV share limit (client-max-kv %g%%: %d of %d blocks) reached: this client's running "
                 "requests hold %d blocks; retry when they finish",
                 en->o.client_max_kv * 100, en->kv_limit, en->n_blocks, c_kv);
    else if (refusal == POLICY_SUBMIT_QUEUED)
        snprintf(why, sizeof why,
                 "this client already has %d request%s waiting (client-max-queued %d); others' requests are admitted "
                 "before its next ones",
                 c_waiting, c_waiting == 1 ? "" : "s", en->o.client_max_queued);
    if (why[0]) {
        en->n_client_refused++;
        en->stats.client_refused_total = en->n_client_refused;
        pthread_mutex_unlock(&en->mu);
        return err_set(e, ERR_RANGE, "%s", why);
    }
    c->n_inflight++;
    r->client_slot = slot;
    if (en->n_submitq == en->cap_submitq) {
        en->cap_submitq = en->cap_submitq ? en->cap_submitq * 2 : 16;
        en->submitq = xrealloc(en->submitq, (size_t)en->cap_submitq * sizeof *en->submitq);
        en->submit_ns = xrealloc(en->submit_ns, (size_t)en->cap_submitq * sizeof *en->submit_ns);
    }
    req_ref(r);
    r->t_submit_ns = clock_ns();
    r->serial = ++en->next_serial;
    en->submit_ns[en->n_submitq] = sched__now(en);
    en->submitq[en->n_submitq++] = r;
    pthread_cond_broadcast(&en->cv);
    pthread_mutex_unlock(&en->mu);
    return 0;
}

void engine_turn_tool(engine *en, const req *r, const char *tool) {
    if (!en->pol || !tool || !*tool) return;
    pthread_mutex_lock(&en->mu);
    if (en->n_toolq < (int)ARRAY_LEN(en->toolq)) {
        en->toolq[en->n_toolq].serial = r->serial;
        snprintf(en->toolq[en->n_toolq].tool, sizeof en->toolq[0].tool, "%s", tool);
        en->n_toolq++;
    }
    pthread_mutex_unlock(&en->mu);
}

void engine_get_stats(engine *en, engine_stats *out) {
    pthread_mutex_lock(&en->mu);
    *out = en->stats;
    out->n_waiting += en->n_submitq;
    out->n_clients = en->n_clients; /* engine_submit's count, current */
    pthread_mutex_unlock(&en->mu);
    if (en->disk) { /* the store's own counters, current (its I/O threads move them) */
        kvdisk_stats ds;
        kvdisk_get_stats(en->disk, &ds);
        out->mem_kv_disk = ds.mem_bytes;
        out->kv_disk_blocks = ds.n_files;
        out->kv_disk_bytes = ds.n_bytes;
        out->kv_disk_read_bytes_total = ds.bytes_read;
        out->kv_disk_written_bytes_total = ds.bytes_written;
        out->kv_disk_rejected_corrupt_total = ds.rejected_corrupt;
        out->kv_disk_rejected_foreign_total = ds.rejected_foreign;
        out->kv_disk_write_errors_total = ds.write_errors;
        out->kv_disk_writes_dropped_total = ds.writes_dropped;
    }
}
