/*
 * engine_grammar.h — constrained decoding in the engine (req.grammar):
 * what the step calls to mask a sequence's logits with its grammar, to
 * start a lazy grammar at its trigger, and to append a grammar's forced
 * run (jump-forward). Engine files only (engine_impl.h).
 *
 * Per sampled token of a constrained sequence, the step does:
 *
 *   sched__mask_gate        may it sample now? (its mask is in, its
 *                           grammar's lock taken) — else sched__seq_hold
 *                           keeps its logits row and it sits out;
 *   sched__apply_mask       the mask on the row (the worker's, or computed
 *                           here), then sched__mask_over_budget;
 *   (sampling, sampler_accept, gmatch_accept)
 *   sched__grammar_watch    a lazy grammar's trigger in the new bytes;
 *   sched__jump_forward     the forced continuation appended;
 *   sched__mask_gate_end    the lock back, the next mask to the worker.
 *
 * Per step (with the worker), the clients' share of it (policy.h, "The
 * mask worker's share between clients"): sched__mask_share_charge before
 * the step's tokens are advanced (its forward time to the clients of its
 * rows), sched__mask_share_publish after (who has running work).
 *
 * Thread: the engine thread (the worker is engine_grammar.c's own).
 */
#ifndef KVLOOM_ENGINE_GRAMMAR_H
#define KVLOOM_ENGINE_GRAMMAR_H

#include "engine_impl.h"

/* Jump-forward: at most this many bytes of a forced run are appended at once. */
#define ENGINE_FORCED_MAX 1024

/* Starts the mask worker thread (engine_new, when masks run off the engine
 * thread); false when it cannot be started. */
bool sched__mask_worker_start(engine *en);
/* Stops it (after the engine thread: every sequence has ended). */
void sched__mask_worker_stop(engine *en);

/* Whether s may sample now: a constrained sequence needs its mask (when
 * the worker computes it) and its grammar's lock, held until
 * sched__mask_gate_end. */
bool sched__mask_gate(engine *en, seq *s);
/* After s sampled (why: how it stands): its grammar's lock back, its next
 * mask to the worker while it runs. */
void sched__mask_gate_end(engine *en, seq *s, req_finish why);
/* Sits s out of sampling until its mask is in: keeps its logits row. */
void sched__seq_hold(engine *en, seq *s, const float *row);
/* Its logits row is no longer waited on (it sampled, ended or was preempted). */
void sched__hold_drop(engine *en, seq *s);
/* Takes s's mask job back from the worker as s ends. */
void sched__mjob_release(engine *en, seq *s);
/* Bytes of s's mask job (0 without one): the request's memory. */
size_t sched__mjob_bytes(const engine *en, const seq *s);

/* The step's forward time (fw_ns, n_tok tokens in n_bs batch sequences
 * en->b_owner / en->b_chunk) charged to their clients. */
void sched__mask_share_charge(engine *en, int n_bs, int n_tok, int64_t fw_ns);
/* Publishes the clients with running sequences and how many of those wait
 * for no mask, for the worker's deferral; wakes the worker when masks wait. */
void sched__mask_share_publish(engine *en);

/* Sets the logits the grammar refuses to -inf; returns how many tokens are
 * allowed (0: none, the request fails). */
int sched__apply_mask(engine *en, seq *s, float *lg);
/* True when s's masks took more than mask_budget_us per token on average
 * (s->fail written, the request fails). */
bool sched__mask_over_budget(engine *en, seq *s);

/* The opening forced run of s's grammar (out.gm_start), unless the worker
 * holds the grammar now (then out.gm_start stays set: retried at admission). */
void sched__grammar_start(engine *en, seq *s);
/* A lazy grammar starts at its trigger: scans the newest output bytes
 * (token id just posted) for it. */
void sched__grammar_watch(engine *en, seq *s, int32_t id);
/* Appends the grammar's forced continuation of s (jump-forward). */
void sched__jump_forward(engine *en, seq *s);

#endif
