/*
 * dmodel.h — the draft model of speculative decoding (`--spec draft
 * --draft-model FILE.gguf`): a small model with the target's vocabulary,
 * run by the engine thread in the same step, drafting k tokens per
 * sequence with its forward batched across the sequences that draft.
 *
 * Place in the flow: sched/. engine.c's spec_plan adds the sequences that
 * draft this step (dmodel_add), runs the draft forwards (dmodel_run), puts
 * the drafts into the target's batch; after verification each sequence's
 * draft KV is synchronised with the tokens it now has (dmodel_seq_sync).
 *
 * One step, for a sequence whose context is tokens[0, n) and whose draft
 * KV holds positions [0, c) (c < n):
 *
 *   forward 0:   tokens[c .. n-1]      (catch-up chunk; logits at n-1) -> d0
 *   forward 1:   d0 at position n                                      -> d1
 *   ...
 *   forward k-1: d(k-2) at n+k-2                                       -> d(k-1)
 *
 * k forwards for k drafts; every forward holds one row per drafting
 * sequence (and forward 0 the catch-up chunks), so the draft model's
 * weights are read once per forward for all sequences.
 *
 * KV: its own paged cache (model_kv of the draft model, same block size)
 * and its own block pool (kvpool), as many blocks as the target's pool; no
 * radix tree: a sequence's draft KV is private, made by the draft model
 * itself, lazily — the positions it lacks (a prompt served from the
 * target's prefix cache, tokens decoded while the sequence did not draft,
 * everything after a preemption) run as the catch-up chunk of the next
 * step in which it drafts, at most max_tokens catch-up positions per step
 * (a longer gap catches up in chunks, without drafting). A sequence that
 * finds no free draft block does not draft (it keeps what it has).
 *
 * Distributions: at temperature 0 the draft is the argmax of the draft
 * logits (q a point mass: no row stored); above, d ~ q = the request's
 * sampling chain (temperature, top-k, top-p, min-p; no penalties) over the
 * draft logits, and q's row is kept for the speculative-sampling rule
 * (sample.h, sampler_sample_spec). The request's logit bias and grammar
 * (a clone of its matcher walks the drafts) are applied to the draft
 * logits too, so q resembles the target's p; the rule is exact whatever q.
 *
 * Thread: the engine thread only.
 */
#ifndef KVLOOM_DMODEL_H
#define KVLOOM_DMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../grammar/grammar.h"
#include "../model/model.h"
#include "../sample/sample.h"
#include "draft.h"

typedef struct dmodel_opts {
    int n_blocks; /* draft KV blocks (the target pool's count)            */
    int block_tokens;
    int max_tokens;                           /* catch-up positions per step (forward 0's budget)     */
    int max_seqs;                             /* sequences drafting in one step at most               */
    int max_rows;                             /* drafts with a stored q row per step at most          */
    int n_ctx;                                /* positions per sequence                               */
    pool *workers;                            /* the target's worker pool (model_state_pool)          */
    bool (*is_eog)(void *ctx, int32_t token); /* drafting stops after one      */
    void *eog_ctx;
} dmodel_opts;

/* How the target samples a sequence (so that q resembles p). Pointers are
 * borrowed for the step. */
typedef struct dmodel_how {
    sampler_params sp;
    const gmatch *gm; /* the grammar's state after the context, or NULL     */
    const int32_t *bias_ids;
    const float *bias_vals;
    int n_bias;
    bool ignore_eos;
} dmodel_how;

typedef struct dmodel dmodel;
typedef struct dmodel_seq dmodel_seq;

/* The draft model `dm` (must outlive the runner) for target `target`:
 * ERR_INVALID when their vocabularies differ in size (the message names
 * both), ERR_NOMEM. */
int dmodel_new(const model *dm, const model *target, const dmodel_opts *o, dmodel **out, err_t *e);
void dmodel_free(dmodel *d); /* NULL is a no-op */
/* The draft model's bytes read per drafted token against the target's
 * (model_token_bytes): the draft's cost before it is measured. */
double dmodel_bytes_ratio(const dmodel *d, const model *target);
/* Memory: the draft KV pool and the q rows. */
uint64_t dmodel_bytes(const dmodel *d);
/* Its forward scratch, logits rows and sampler (the engine's "scratch"). */
uint64_t dmodel_scratch_bytes(const dmodel *d);

/* A sequence's draft state (its RNG seeded from `seed`); NULL when out of
 * memory (it does not draft). */
dmodel_seq *dmodel_seq_new(dmodel *d, uint64_t seed);
/* Frees its blocks and itself; NULL is a no-op. */
void dmodel_seq_free(dmodel_seq *s);
/* Preemption: its draft KV is dropped (recomputed when it drafts again). */
void dmodel_seq_drop(dmodel_seq *s);

/* ---- one step ---- */
/* Adds s, whose context is tokens[0, n) (the array must stay as it is
 * until dmodel_run returns), asking for up to k drafts. Returns the drafts
 * it may get (<= k; 0: it does not draft this step — no room in the step,
 * no draft blocks, or its catch-up is longer than the step's budget, in
 * which case a chunk of it runs). */
int dmodel_add(dmodel *d, dmodel_seq *s, const int32_t *tokens, int n, int k, const dmodel_how *how);
/* Runs the step's draft forwards; false when the draft model failed (no
 * drafts this step; the draft KV of the sequences involved is dropped).
 * *ms_per_forward: the mean time of its one-token forwards (0: none). */
bool dmodel_run(dmodel *d, double *ms_per_forward);
/* The positions whose draft K/V s holds (the rest of its context is the
 * catch-up its next draft runs first). */
int dmodel_seq_computed(const dmodel_seq *s);
/* s's drafts of this step (0 when it did not draft) and the q row of draft
 * j (NULL at temperature 0: a point mass; and for s NULL). */
int dmodel_seq_drafts(const dmodel_seq *s, const int32_t **drafts);
const float *dmodel_seq_q(const dmodel_seq *s, int j);
/* After verification: s's context is now tokens[0, n); the draft KV it
 * keeps is the prefix that holds these tokens. Ends s's step. */
void dmodel_seq_sync(dmodel_seq *s, const int32_t *tokens, int n);

#endif
