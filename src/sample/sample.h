/*
 * sample.h — picks the next token from a row of logits.
 *
 * Place in the flow: after model_forward, before the detokenizer. One
 * sampler per request; it keeps the request's RNG and the token history
 * that penalties need. Owned by the engine thread.
 *
 * The chain, in order (each stage optional):
 *
 *   logits ─▶ repetition / presence / frequency penalties (over history)
 *          ─▶ temperature == 0 ? argmax (greedy, lowest id wins ties)
 *          ─▶ top-k ─▶ softmax(logits / temperature) ─▶ top-p ─▶ min-p
 *          ─▶ draw with the request's seeded RNG
 *
 * Log-probabilities (when asked) are those of the model's distribution
 * after penalties, before temperature and truncation (log-softmax of the
 * penalised logits), as OpenAI and vLLM report them.
 */
#ifndef KVLOOM_SAMPLE_H
#define KVLOOM_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"

typedef struct sampler_params {
    float temperature;      /* 0 = greedy; default 1                              */
    int top_k;              /* <= 0: off                                          */
    float top_p;            /* 1 = off; (0, 1]                                    */
    float min_p;            /* 0 = off; [0, 1]                                    */
    float repeat_penalty;   /* 1 = off; > 0 (llama.cpp semantics)                 */
    int repeat_last_n;      /* history window for the penalties; default 64, -1 = all */
    float presence_penalty; /* 0 = off; [-2, 2] (OpenAI semantics)                */
    float frequency_penalty;/* 0 = off; [-2, 2]                                   */
    uint64_t seed;          /* RNG seed                                           */
} sampler_params;

/* Defaults: temperature 1, top_k 0, top_p 1, min_p 0, penalties off,
 * repeat_last_n 64, seed 0. */
sampler_params sampler_defaults(void);
/* Checks ranges; returns 0 or ERR_RANGE with a message naming the field. */
int sampler_params_check(const sampler_params *p, err_t *e);

/* Row scans every sampled token pays, over the whole vocabulary (150k
 * logits on Qwen3), four floats to a vector (GCC/clang vector types: SSE2,
 * NEON or scalar code); -O2 left the loops scalar, and an argmax loop
 * carries its index from one compare to the next. row_broken: whether a
 * logit is NaN or +inf. row_max: the largest of x[0, n) (-inf when n is 0;
 * x without NaN). row_argmax: the lowest index of the largest (n >= 1, x
 * without NaN), as the serial loop with `>` picks it. */
bool row_broken(const float *x, int n);
float row_max(const float *x, int n);
int32_t row_argmax(const float *x, int n);

typedef struct sampler sampler;
/* n_vocab > 0. NULL when out of memory. */
sampler *sampler_new(const sampler_params *p, int n_vocab);
void sampler_free(sampler *s);
/* The memory it holds (history ring, counts, candidate scratch). */
size_t sampler_bytes(const sampler *s);
/* Adds a token to the history (prompt tokens too, for the repeat penalty). */
void sampler_accept(sampler *s, int32_t token);
/* Picks a token; returns -1 when a logit is NaN or +inf (a broken model:
 * the caller fails the request). `logits` (n_vocab) is modified in place
 * (penalties); -inf logits (tokens a grammar refuses) are never picked
 * unless all are. When top_n_logprobs >= 0, writes the chosen token's logprob to
 * *chosen_logprob and the top_n most likely tokens (ids, logprobs, in
 * decreasing order) to top_ids/top_lps (arrays of at least top_n). */
int32_t sampler_sample(sampler *s, float *logits, int top_n_logprobs, float *chosen_logprob, int32_t *top_ids,
                       float *top_lps);

/* ---- speculative sampling with a draft model (sched/dmodel.h) ----
 *
 * A draft token d drawn from a draft distribution q is verified against the
 * target distribution p (what sampler_sample draws from) by the standard
 * rule: accept d with probability min(1, p(d) / q(d)); else draw from the
 * residual max(0, p - q), normalised. The output token is then distributed
 * exactly as p, whatever q is. */

/* The distribution sampler_sample draws from, without drawing: penalties
 * (s's history) are applied to `logits` in place, then probs (n_vocab) gets
 * the chain's probabilities (0 outside the kept set; temperature 0: 1 on
 * the argmax, the lowest id of ties). -1 when a logit is NaN or +inf, or
 * every logit is -inf. */
int sampler_dist(sampler *s, float *logits, float *probs);
/* The same chain for parameters p without penalties (the draft model's
 * proposal distribution q), logits unchanged; `s` only lends its scratch
 * (same n_vocab). */
int sampler_dist_params(sampler *s, const sampler_params *p, const float *logits, float *probs);
/* A draw from probs (n) with the uniform u in [0, 1): the first id whose
 * cumulative probability exceeds u * total (the last positive one when
 * rounding leaves u beyond it); -1 when probs are all 0. */
int32_t sampler_draw(const float *probs, int n, double u);
/* The rule above for draft d with q (NULL: a point mass on d) against the
 * target probs p, with uniforms u1 (acceptance) and u2 (the residual's
 * draw); *accepted tells which. Pure. */
int32_t sampler_spec_rule(const float *p, const float *q, int n, int32_t d, double u1, double u2, bool *accepted);
/* sampler_sample's counterpart for a draft: sampler_dist into probs
 * (scratch of n_vocab), the rule with s's RNG (no draw at temperature 0,
 * where the rule keeps d exactly when it is the argmax), and the logprobs
 * (of the penalised logits, as sampler_sample) of the token returned; the
 * caller then sampler_accepts it. -1 as sampler_dist. */
int32_t sampler_sample_spec(sampler *s, float *logits, int32_t d, const float *q, float *probs, bool *accepted,
                            int top_n_logprobs, float *chosen_logprob, int32_t *top_ids, float *top_lps);

/* (the RNG, rng_*, is base.h's) */

#endif
