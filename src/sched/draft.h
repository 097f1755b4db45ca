/*
 * draft.h — drafters for speculative decoding: cheap guesses of the next
 * tokens of a sequence, which the engine verifies in one forward pass.
 *
 * Place in the flow: sched/. The engine (engine.c) asks the drafter for
 * up to k tokens after a decoding sequence's context, runs its last token
 * and the k drafts through the model in the ragged batch (k + 1 rows of
 * logits), samples position by position and keeps the drafts while the
 * sampled token equals them:
 *
 *   context ... x    drafts d0 d1 d2        (one forward: x d0 d1 d2)
 *   logits after       x   d0  d1  d2
 *   sampled            d0  d1  y   -        y != d2: d0 d1 y accepted,
 *                                           d2's K/V is dropped
 *
 * The drafters here are deterministic (a point-mass draft distribution),
 * and for them "sample from the target, accept while equal" IS the
 * speculative-sampling rule (accept d with probability p(d), else draw
 * from the residual p with d removed, renormalised): the token at every
 * position has exactly the distribution of non-speculative decoding, at
 * any temperature. Because the sampler draws once per position with the
 * request's own RNG and batch invariance makes each row's logits the same
 * as in plain decoding, the output is token-for-token identical to plain
 * decoding with the same seed, not only equal in distribution.
 *
 * Drafters (draft_kind):
 *   NGRAM   prompt lookup: the most recent earlier occurrence of the last
 *           4..2 tokens of the sequence's own context, and what followed.
 *   SUFFIX  SuffixDecoding: the proposal of a suffix trie over the
 *           request's context (found by scanning it when the sequence
 *           drafts: suffix_scan_propose), and of one over a bounded global store
 *           of recent outputs of other requests (oldest evicted first);
 *           the longest matching suffix proposes the most frequent
 *           continuation, as long as the product of its empirical
 *           probabilities stays >= DRAFT_P_MIN (the draft length follows
 *           the match's statistics); of the two trees, the proposal with
 *           the larger expected accepted length wins.
 *   MODEL   a draft model (dmodel.h; `--spec draft --draft-model F`): the
 *           engine runs it; draft_propose proposes nothing for it, the
 *           drafter only keeps the policy's state. Its drafts are not
 *           deterministic above temperature 0, so they are verified by the
 *           general rule (sample.h, sampler_sample_spec).
 *
 * Policy (how many drafts are worth verifying): the j-th draft token is
 * expected to add P(tokens 0..j all accepted) tokens. A draft token costs
 * the step `token_cost` (relative to the step's fixed cost of reading the
 * weights), plus the drafter's own cost (a draft model's forward), and
 * every sequence in the step waits for it, so it pays when that
 * probability > draft_threshold(n_decode, n_tokens, token_cost,
 * draft_cost): at batch 1 nearly any draft pays; at large batches (decode
 * no longer bandwidth-bound) only confident ones do.
 *   NGRAM, SUFFIX: the probability is conditioned on the evidence each
 *   drafted token carries: a table shared by all sequences (learnt from
 *   every position a step reveals, drafted or not: draft_seq_feedback) of
 *   the acceptance rate per evidence class and position; the class is the
 *   drafter's match (ngram: the match length and the confidence the
 *   copied token was sampled with, draft_seq_note; suffix: the match
 *   depth, the token's count ratio and whether the sequence's last draft
 *   was accepted whole) and whether the sequence samples.
 *   P(0..j) is the product of the entries of positions 0..j
 *   (draft_plan_seq). So a long exact match in repetitive text drafts long
 *   from a sequence's first step, and the short matches random text
 *   offers stop being drafted once their class has been rejected, for
 *   every sequence.
 *   MODEL: no evidence per token; each sequence keeps an estimate alpha of
 *   the chance a drafted token is accepted (accepted / (accepted +
 *   rejections), decayed, weak prior) and P(0..j) = alpha^(j+1)
 *   (draft_plan).
 *
 * Thread: the engine thread only.
 */
#ifndef KVLOOM_DRAFT_H
#define KVLOOM_DRAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

typedef enum draft_kind { DRAFT_OFF = 0, DRAFT_NGRAM, DRAFT_SUFFIX, DRAFT_MODEL, DRAFT_N_KINDS } draft_kind;

#define DRAFT_MAX 32     /* tokens per proposal at most (--spec-max)        */
#define DRAFT_P_MIN 0.1f /* suffix: stop when the path's probability drops  */

typedef struct draft_opts {
    draft_kind kind;
    int max_draft;        /* 1..DRAFT_MAX                                   */
    int suffix_depth;     /* suffix trie depth (match + draft), 2..64; at
                             least max_draft + 8 is used                    */
    int seq_window;       /* SUFFIX: the newest tokens of a request's
                             context it searches (>= 1)                     */
    int global_max_nodes; /* the global store's trie; 0: no global store    */
} draft_opts;

/* kind with max_draft 8, depth 24, a request's newest 32 Ki tokens (an
 * agent copying from its prompt finds it; a proposal over 32 Ki varied
 * tokens takes ~60 us on the 2-core test machine, ~3 ms over one token
 * repeated 32 Ki times: well below a 1B model's step), 256 Ki nodes global. */
draft_opts draft_defaults(draft_kind kind);
/* "off", "ngram", "suffix", "draft" -> kind; ERR_INVALID naming the value otherwise. */
int draft_kind_parse(const char *name, draft_kind *out, err_t *e);
const char *draft_kind_name(draft_kind k);

typedef struct drafter drafter;
typedef struct draft_seq draft_seq;

/* NULL for DRAFT_OFF or when out of memory. */
drafter *draft_new(const draft_opts *o);
void draft_free(drafter *d);
draft_kind draft_get_kind(const drafter *d);
int draft_max(const drafter *d);

/* A sequence's drafting state (NULL when out of memory: it does not
 * speculate). */
draft_seq *draft_seq_new(drafter *d);
/* Whether the sequence samples (temperature > 0): part of its drafts'
 * evidence (greedy decoding accepts more of the same drafts). */
void draft_seq_set_sampled(draft_seq *s, bool sampled);
/* The confidence a token was sampled with: its logit's gap to the best
 * other token's (draft_margin), in classes 1..5 (< 0.5, < 1, < 2, < 4,
 * >= 4 nats); 0: not known (prompt tokens, forced ones). NGRAM's evidence:
 * a copy of a token the model once chose by a wide margin is repeated far
 * more often than one it chose by a hair (stories260K at temperature 0:
 * ~97% against ~45% for the first drafted token; docs/perf.md). */
#define DRAFT_CONF_N 6
/* logits[id] minus the largest other logit of the row (n >= 2). */
float draft_margin(const float *logits, int n, int32_t id);
/* Records the confidence (draft_margin) of the token sampled at position
 * pos of s's context. Positions never noted count as not known. */
void draft_seq_note(draft_seq *s, int pos, float margin);
/* Up to max (<= DRAFT_MAX) tokens likely to follow tokens[0, n), the whole
 * context so far (prompt and output). Between calls the context only
 * grows (a sequence's tokens never change). Returns the count; s keeps
 * each token's evidence class for draft_plan_seq and the feedback. */
int draft_propose(drafter *d, draft_seq *s, const int32_t *tokens, int n, int max, int32_t *out);
/* NGRAM, SUFFIX: how many of the first n tokens of s's last proposal to
 * verify: the largest j with P(tokens 0..j-1 accepted) > threshold, from
 * the acceptance table. (A declined proposal is still learnt from: the
 * step's sampled token reveals its first position, draft_seq_feedback.) */
int draft_plan_seq(drafter *d, draft_seq *s, int n, double threshold);
/* The table's estimate that token j of s's last proposal is accepted,
 * given tokens 0..j-1 were (j < the proposal's length). */
double draft_seq_accept_p(const drafter *d, const draft_seq *s, int j);
/* The step's outcome: of the n_drafted (0: none) first tokens of the last
 * proposal (NGRAM, SUFFIX) or of a draft model's draft, n_accepted were
 * kept, and tokens[0, n) is the sequence's context now. Updates the
 * sequence's alpha (when it drafted) and the table: with tokens, from
 * every proposed position they reveal (the tokens past the context the
 * proposal was made for) up to the first miss, drafted or not; without
 * (NULL), from the drafted positions up to the first rejection. d may be
 * NULL: alpha only. Ends the proposal. */
void draft_seq_feedback(drafter *d, draft_seq *s, int n_drafted, int n_accepted, const int32_t *tokens, int n);
/* A step the sequence decoded without drafting: the estimate drifts back
 * toward the prior, so a sequence whose drafts stopped paying tries again
 * later. */
void draft_seq_idle(draft_seq *s);
/* The acceptance estimate in (0, 1). */
double draft_seq_alpha(const draft_seq *s);
/* Ends a sequence: with `keep`, its output tokens[n_prompt, n) go to the
 * global store (SUFFIX). Frees s; NULL is a no-op. */
void draft_seq_end(drafter *d, draft_seq *s, const int32_t *tokens, int n_prompt, int n, bool keep);

/* ---- policy (pure) ---- */
/* The expected tokens a draft must add to pay for itself in a step with
 * n_decode decoding sequences and n_tokens tokens so far, where a token
 * costs token_cost of the step's fixed part and drafting it draft_cost
 * more (0 for ngram and suffix). Above 1: no draft can pay. */
double draft_threshold(int n_decode, int n_tokens, double token_cost, double draft_cost);
/* How many of n proposed drafts to verify (MODEL): the largest j with
 * alpha^j > threshold. */
int draft_plan(int n, double alpha, double threshold);

/* The cost of one more token in a step, learnt from the steps' times: a
 * least-squares line time = fixed + per_token * n_tokens over recent steps
 * of at most DRAFT_COST_MAX_TOKENS tokens (decode-sized: big prefill chunks
 * would decide the line), decayed so it follows the load. token_cost =
 * per_token / fixed: about 0.01-0.05 for a 1B model whose decode streams
 * the weights, near 1 for a toy model whose step is all overhead (then
 * drafts do not pay). Plain data: zero it to start. */
#define DRAFT_COST_MAX_TOKENS 64
/* What drafts cost at one batch size n (draft_cost_observe_decode): a line
 * time = T(n) + slope * drafts over the decode-only steps of n decoding
 * sequences (decayed sums over (drafts, ms)), and the last slope the line
 * determined, held while later steps, drafting little, no longer do — for
 * DRAFT_HELD_STEPS steps of that size: a slope measured too high (a step
 * that a load spike slowed while it carried drafts) prices every draft out,
 * so no later step drafts to correct it (stories260K, one sequence: ~1 run
 * in 100-150 stopped drafting for good after a few hundred tokens, 4 in 250
 * under bursts of other load; docs/perf.md). Expired, the batch size has no
 * slope, the engine falls back to the threshold of the cost line over all
 * steps, and the drafts it pays for measure the slope again. */
#define DRAFT_COST_NB 64 /* batch sizes 1..DRAFT_COST_NB (larger: the last) */
#define DRAFT_HELD_STEPS 400
typedef struct draft_line {
    double w, sx, sxx, sy, sxy;
    double held; /* the last determined slope; 0: none yet                   */
    int age;     /* steps of this size since `held` was determined           */
} draft_line;
/* A lone sequence's step time by its count of drafts (draft_step_time):
 * per count d (0..DRAFT_MAX), decayed sums of the decode-only steps of one
 * decoding sequence; every such step decays every cell, so a count no
 * longer chosen fades back to the line and is tried again. */
typedef struct draft_cell {
    double w, sy;
} draft_cell;
typedef struct draft_cost {
    double w, sx, sxx, sy, sxy; /* decayed sums over (n_tokens, ms)         */
    draft_line by_n[DRAFT_COST_NB];
    draft_cell lone[DRAFT_MAX + 1];
} draft_cost;
void draft_cost_observe(draft_cost *c, int n_tokens, double ms);
/* A decode-only step (every row a decoding sequence's token or a draft):
 * n_decode sequences, n_drafts drafts between them, ms long. */
void draft_cost_observe_decode(draft_cost *c, int n_decode, int n_drafts, double ms);
/* The threshold of draft_threshold for a decode-only step of n_decode
 * sequences, from what drafts were measured to cost at that batch size:
 * draft_threshold_measured(n_decode, T(n), slope), where a draft's
 * marginal time (the slope) and the step's time without drafts (T(n)) are
 * the per-batch-size line's. Why not the line over all steps: a draft is a
 * further query of a sequence already in the batch, and on a model whose
 * step is mostly attention it costs less than a further sequence's token
 * (stories260K at batch 8 on the AVX-512 test machine: ~0.5 ms a draft,
 * ~0.68 ms a sequence's token, no fixed part to speak of); the one line
 * mixed both, its fixed part was an extrapolation to zero tokens, and the
 * ratio swung between 0.05 and 10 within one run (docs/perf.md,
 * "Speculation at 8 agents"). Returns `fallback` while that batch size's
 * line has too few steps, or no batch size has a slope yet (one
 * that has none takes the nearest batch size's). */
double draft_cost_threshold(const draft_cost *c, int n_decode, double fallback);
/* The pure rule: an accepted draft saves its sequence a slot in a later
 * decode step of n_decode sequences, worth that step's share per
 * sequence, step_ms / n_decode; drafting it costs draft_ms now. It pays
 * when P(accepted) * step_ms / n_decode > draft_ms:
 * threshold = draft_ms * n_decode / step_ms (above 1: nothing pays;
 * step_ms <= 0 counts as nothing pays). */
double draft_threshold_measured(int n_decode, double step_ms, double draft_ms);
/* The time (ms) of a decode-only step of one decoding sequence carrying d
 * drafts: the mean of such steps (cell d) drawn toward batch size 1's line,
 * T(1) + slope * d, by DRAFT_CELL_PRIOR steps' weight; the line alone where
 * the cell saw nothing lately; < 0 while the line is undetermined
 * (draft_cost_threshold's conditions) or d > DRAFT_MAX. A line alone
 * misprices a step whose time goes up in stairs: on stories260K at depth
 * 750 (AVX-512) a first draft added ~25 us to a ~112 us step, a second ~42,
 * a third ~27, a fourth ~68, as the gemm's and PV's tiles fill (docs/perf.md,
 * "A lone sequence's drafts by the measured step times"). */
double draft_step_time(const draft_cost *c, int d);
/* How many of a lone decoding sequence's k proposed drafts to verify: the
 * count d <= k that gives the most tokens per unit of time,
 * (1 + E[0] + ... + E[d - 1]) / draft_step_time(d), where E[j] is the
 * chance that drafts 0..j are all accepted (draft_seq_expect). Returns -1
 * while draft_step_time(0) is unknown. Why not a threshold per draft:
 * with stairs, the marginal draft's price swings around the line's slope
 * (docs/perf.md, "A lone sequence's drafts by the measured step times"). */
int draft_pick(const draft_cost *c, const double *E, int k);
/* E[j] (j < n <= the proposal's length) = the chance that s's first j + 1
 * proposed drafts are all accepted: the product of draft_seq_accept_p of
 * positions 0..j (non-increasing in j). */
void draft_seq_expect(const drafter *d, const draft_seq *s, int n, double *E);
/* The learnt token_cost, or `fallback` while the steps seen do not
 * determine a line (too few, or all of one size). */
double draft_cost_token(const draft_cost *c, double fallback);
/* The line's fixed part (ms of a step of 0 tokens), or 0 while undetermined. */
double draft_cost_fixed(const draft_cost *c);

typedef struct draft_stats {
    int global_seqs;             /* outputs in the global store             */
    int global_nodes;            /* its trie's nodes                        */
    size_t global_bytes;         /* its memory (trie and tokens)            */
    uint64_t global_evicted_total; /* outputs evicted to make room          */
} draft_stats;
void draft_get_stats(const drafter *d, draft_stats *out);

#endif
