/*
 * sample.c — the sampler chain (see sample.h for the order of stages).
 *
 * Candidates are kept as (id, logit) pairs; truncation stages shrink the
 * candidate list. The only allocations happen in sampler_new.
 */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float v;
    int32_t id;
} cand;

struct sampler {
    sampler_params p;
    int n_vocab;
    int32_t *hist;    /* ring of the last `hist_cap` tokens           */
    int hist_cap, hist_n, hist_head;
    int32_t *counts;  /* (n_vocab) occurrences within the window      */
    struct cand *cands; /* (n_vocab) candidate scratch                */
    rng r;
};

size_t sampler_bytes(const sampler *s) {
    if (!s) return 0;
    return sizeof *s + (size_t)s->hist_cap * sizeof *s->hist + (size_t)s->n_vocab * (sizeof *s->counts + sizeof *s->cands);
}

sampler_params sampler_defaults(void) {
    sampler_params p = {0};
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    return p;
}

int sampler_params_check(const sampler_params *p, err_t *e) {
    if (!(p->temperature >= 0 && p->temperature <= 100))
        return err_set(e, ERR_RANGE, "temperature must be in [0, 100], got %g", p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1)) return err_set(e, ERR_RANGE, "top_p must be in (0, 1], got %g", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1)) return err_set(e, ERR_RANGE, "min_p must be in [0, 1], got %g", p->min_p);
    if (p->top_k < 0) return err_set(e, ERR_RANGE, "top_k must be >= 0, got %d", p->top_k);
    if (!(p->repeat_penalty > 0 && p->repeat_penalty <= 100))
        return err_set(e, ERR_RANGE, "repeat_penalty must be in (0, 100], got %g", p->repeat_penalty);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return err_set(e, ERR_RANGE, "presence_penalty must be in [-2, 2], got %g", p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return err_set(e, ERR_RANGE, "frequency_penalty must be in [-2, 2], got %g", p->frequency_penalty);
    if (p->repeat_last_n < -1) return err_set(e, ERR_RANGE, "repeat_last_n must be >= -1, got %d", p->repeat_last_n);
    return 0;
}

sampler *sampler_new(const sampler_params *p, int n_vocab) {
    ASSERT(n_vocab > 0);
    /* request-sized (a vocabulary's worth, up to 4 MiB of history): out of
     * memory fails the request, not the process */
    sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->hist_cap = p->repeat_last_n < 0 ? 1 << 20 : (p->repeat_last_n == 0 ? 1 : p->repeat_last_n);
    s->hist = malloc(sizeof(int32_t) * (size_t)s->hist_cap);
    s->counts = calloc((size_t)n_vocab, sizeof(int32_t));
    s->cands = malloc(sizeof(struct cand) * (size_t)n_vocab);
    if (!s->hist || !s->counts || !s->cands) {
        sampler_free(s);
        return NULL;
    }
    rng_seed(&s->r, p->seed);
    return s;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->counts);
    free(s->cands);
    free(s);
}

void sampler_accept(sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab || s->p.repeat_last_n == 0) return;
    if (s->hist_n == s->hist_cap) { /* drop the oldest */
        int32_t old = s->hist[s->hist_head];
        s->counts[old]--;
        s->hist[s->hist_head] = token;
        s->hist_head = (s->hist_head + 1) % s->hist_cap;
    } else {
        s->hist[(s->hist_head + s->hist_n) % s->hist_cap] = token;
        s->hist_n++;
    }
    s->counts[token]++;
}

static void apply_penalties(sampler *s, float *logits) {
    const sampler_params *p = &s->p;
    if (p->repeat_penalty == 1.0f && p->presence_penalty == 0 && p->frequency_penalty == 0) return;
    /* visit each distinct token of the window once */
    for (int i = 0; i < s->hist_n; i++) {
        int32_t t = s->hist[(s->hist_head + i) % s->hist_cap];
        int c = s->counts[t];
        if (c <= 0) continue;
        float l = logits[t];
        if (p->repeat_penalty != 1.0f) l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= p->presence_penalty + p->frequency_penalty * (float)c;
        logits[t] = l;
        s->counts[t] = -c; /* mark visited */
    }
    for (int i = 0; i < s->hist_n; i++) {
        int32_t t = s->hist[(s->hist_head + i) % s->hist_cap];
        if (s->counts[t] < 0) s->counts[t] = -s->counts[t];
    }
}

/* Sorts candidates by value, descending; ties by id ascending. */
static int cmp_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id - y->id;
}

/* Partial selection: moves the k best of c[0..n) to the front, sorted. */
static void top_sorted(cand *c, int n, int k) {
    if (k >= n || n <= 256) {
        qsort(c, (size_t)n, sizeof *c, cmp_desc);
        return;
    }
    /* quickselect puts the k best in front, then only they are sorted */
    int lo = 0, hi = n - 1;
    while (lo < hi) { /* quickselect for position k */
        cand pivot = c[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cmp_desc(&c[i], &pivot) < 0) i++;
            while (cmp_desc(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                cand t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else break;
    }
    qsort(c, (size_t)k, sizeof *c, cmp_desc);
}

static void log_softmax_top(const float *logits, int n, int top_n, int32_t chosen, float *chosen_lp, int32_t *top_ids,
                            float *top_lps, cand *scratch) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - mx));
    double lse = (double)mx + log(sum);
    if (chosen_lp) *chosen_lp = (float)((double)logits[chosen] - lse);
    if (top_n > 0) {
        for (int i = 0; i < n; i++) scratch[i] = (cand){logits[i], i};
        int k = top_n < n ? top_n : n;
        top_sorted(scratch, n, k);
        for (int i = 0; i < k; i++) {
            top_ids[i] = scratch[i].id;
            top_lps[i] = (float)((double)scratch[i].v - lse);
        }
    }
}

/* The truncating chain's kept set (top-k, then top-p over the softmax with
 * temperature, then min-p): cands[0, m) sorted best first, m returned, the
 * best logit in *mx. sampler_sample draws from it and chain_probs (the
 * speculative rule's p) weighs it: one code for both, so p is exactly what
 * plain decoding samples. */
static int kept_cands(const sampler_params *p, const float *logits, int n, cand *cands, double *mx_out) {
    for (int i = 0; i < n; i++) cands[i] = (cand){logits[i], i};
    int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    top_sorted(cands, n, k);
    int m = k;
    /* softmax over the survivors with temperature */
    double mx = cands[0].v, sum = 0;
    for (int i = 0; i < m; i++) sum += exp(((double)cands[i].v - mx) / p->temperature);
    /* top-p: smallest prefix with mass >= top_p */
    if (p->top_p < 1.0f) {
        double acc = 0;
        for (int i = 0; i < m; i++) {
            acc += exp(((double)cands[i].v - mx) / p->temperature) / sum;
            if (acc >= p->top_p) {
                m = i + 1;
                break;
            }
        }
    }
    /* min-p: keep tokens with prob >= min_p * max prob */
    if (p->min_p > 0) {
        double lim = log(p->min_p) * p->temperature; /* logit gap allowed */
        int keep = 1;
        while (keep < m && (double)cands[keep].v - mx >= lim) keep++;
        m = keep;
    }
    *mx_out = mx;
    return m;
}

/* ---- row scans (sample.h) ---- */

typedef float row_v4 __attribute__((vector_size(16)));
typedef int32_t row_m4 __attribute__((vector_size(16)));

static inline row_v4 row_ld4(const float *p) {
    row_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline bool row_m4_any(row_m4 m) { return (m[0] | m[1] | m[2] | m[3]) != 0; }

static inline row_v4 row_max4(row_v4 a, row_v4 b) {
    const row_m4 gt = b > a;
    return (row_v4)(((row_m4)b & gt) | ((row_m4)a & ~gt));
}

bool row_broken(const float *x, int n) {
    const row_v4 inf = {INFINITY, INFINITY, INFINITY, INFINITY};
    row_m4 acc = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const row_v4 v = row_ld4(x + i);
        acc |= (v != v) | (v == inf);
    }
    bool broken = row_m4_any(acc);
    for (; i < n; i++) broken |= isnan(x[i]) || x[i] == INFINITY;
    return broken;
}

float row_max(const float *x, int n) {
    float best = -INFINITY;
    int i = 0;
    if (n >= 8) { /* two vectors: a max's latency per vector would bound one */
        row_v4 m0 = row_ld4(x), m1 = row_ld4(x + 4);
        for (i = 8; i + 8 <= n; i += 8) m0 = row_max4(m0, row_ld4(x + i)), m1 = row_max4(m1, row_ld4(x + i + 4));
        m0 = row_max4(m0, m1);
        for (int l = 0; l < 4; l++) best = m0[l] > best ? m0[l] : best;
    }
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    return best;
}

int32_t row_argmax(const float *x, int n) {
    const float best = row_max(x, n);
    const row_v4 b = {best, best, best, best};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        if (row_m4_any(row_ld4(x + i) == b)) break;
    for (; i < n; i++)
        if (x[i] == best) return i;
    return 0; /* (n is 0) */
}

int32_t sampler_sample(sampler *s, float *logits, int top_n_logprobs, float *chosen_logprob, int32_t *top_ids,
                       float *top_lps) {
    const sampler_params *p = &s->p;
    int n = s->n_vocab;
    apply_penalties(s, logits);
    /* NaN or +inf logits (a broken model) order nothing: refuse them rather
     * than walk the selection off its array */
    if (row_broken(logits, n)) return -1;
    cand *cands = s->cands;
    int32_t chosen;
    if (p->temperature <= 0) {
        chosen = row_argmax(logits, n);
    } else if ((p->top_k <= 0 || p->top_k >= n) && p->top_p >= 1.0f) {
        /* No top-k, no top-p: nothing needs the tokens in order (a sort of a
         * 150k vocabulary would cost more than the draw, ~30 ms). Min-p keeps
         * the tokens within a logit gap of the best; draw over the rest in id
         * order. */
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
        double lim = p->min_p > 0 ? log(p->min_p) * p->temperature : -INFINITY;
        double total = 0;
        for (int i = 0; i < n; i++)
            if ((double)logits[i] - mx >= lim) total += exp(((double)logits[i] - mx) / p->temperature);
        double u = rng_uniform(&s->r) * total, acc = 0;
        chosen = -1;
        for (int i = 0; i < n; i++) {
            if (!((double)logits[i] - mx >= lim) || logits[i] == -INFINITY) continue;
            chosen = i; /* the last kept token, should rounding leave u beyond acc */
            acc += exp(((double)logits[i] - mx) / p->temperature);
            if (u < acc) break;
        }
        if (chosen < 0) return -1; /* every logit -inf */
    } else {
        double mx;
        int m = kept_cands(p, logits, n, cands, &mx);
        double total = 0;
        for (int i = 0; i < m; i++) total += exp(((double)cands[i].v - mx) / p->temperature);
        double u = rng_uniform(&s->r) * total, acc = 0;
        chosen = cands[m - 1].id;
        for (int i = 0; i < m; i++) {
            acc += exp(((double)cands[i].v - mx) / p->temperature);
            if (u < acc) {
                chosen = cands[i].id;
                break;
            }
        }
    }
    if (top_n_logprobs >= 0)
        log_softmax_top(logits, n, top_n_logprobs, chosen, chosen_logprob, top_ids, top_lps, cands);
    return chosen;
}

/* ---- speculative sampling (sample.h) ---- */

/* The chain's distribution for p over logits (no penalties): the same
 * candidate sets and weights, in the same arithmetic, as sampler_sample
 * draws from, so that p here is exactly what plain decoding samples. */
static int chain_probs(const sampler_params *p, int n, const float *logits, float *probs, cand *cands) {
    for (int i = 0; i < n; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY) return -1;
    memset(probs, 0, (size_t)n * sizeof *probs);
    if (p->temperature <= 0) {
        int32_t chosen = 0;
        for (int i = 1; i < n; i++)
            if (logits[i] > logits[chosen]) chosen = i;
        probs[chosen] = 1;
        return 0;
    }
    if ((p->top_k <= 0 || p->top_k >= n) && p->top_p >= 1.0f) {
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
        double lim = p->min_p > 0 ? log(p->min_p) * p->temperature : -INFINITY;
        double total = 0;
        for (int i = 0; i < n; i++)
            if ((double)logits[i] - mx >= lim && logits[i] != -INFINITY) total += exp(((double)logits[i] - mx) / p->temperature);
        if (!(total > 0)) return -1;
        for (int i = 0; i < n; i++)
            if ((double)logits[i] - mx >= lim && logits[i] != -INFINITY)
                probs[i] = (float)(exp(((double)logits[i] - mx) / p->temperature) / total);
        return 0;
    }
    double mx;
    int m = kept_cands(p, logits, n, cands, &mx);
    if (mx == -INFINITY) return -1;
    double total = 0;
    for (int i = 0; i < m; i++) total += exp(((double)cands[i].v - mx) / p->temperature);
    for (int i = 0; i < m; i++) probs[cands[i].id] = (float)(exp(((double)cands[i].v - mx) / p->temperature) / total);
    return 0;
}

int sampler_dist(sampler *s, float *logits, float *probs) {
    apply_penalties(s, logits);
    return chain_probs(&s->p, s->n_vocab, logits, probs, s->cands);
}

int sampler_dist_params(sampler *s, const sampler_params *p, const float *logits, float *probs) {
    return chain_probs(p, s->n_vocab, logits, probs, s->cands);
}

int32_t sampler_draw(const float *probs, int n, double u) {
    double total = 0;
    for (int i = 0; i < n; i++) total += probs[i];
    double target = u * total, acc = 0;
    int32_t chosen = -1;
    for (int i = 0; i < n; i++) {
        if (!(probs[i] > 0)) continue;
        chosen = i;
        acc += probs[i];
        if (target < acc) break;
    }
    return chosen;
}

/* max(0, p - q) at i; q NULL: a point mass on d */
static double residual(const float *p, const float *q, int32_t d, int i) {
    double r = (double)p[i] - (q ? (double)q[i] : i == d ? 1.0 : 0.0);
    return r > 0 ? r : 0;
}

/* The rule's first half: keep d with probability min(1, p(d) / q(d)). */
static bool spec_keep(const float *p, const float *q, int32_t d, double u1) {
    double qd = q ? q[d] : 1, pd = p[d];
    return qd > 0 && u1 * qd < pd;
}

/* Its second half: a draw from max(0, p - q), normalised. */
static int32_t spec_residual(const float *p, const float *q, int n, int32_t d, double u2) {
    double total = 0;
    for (int i = 0; i < n; i++) total += residual(p, q, d, i);
    if (!(total > 0)) return sampler_draw(p, n, u2); /* p == q to rounding (then d is nearly always kept) */
    double target = u2 * total, acc = 0;
    int32_t chosen = -1;
    for (int i = 0; i < n; i++) {
        double r = residual(p, q, d, i);
        if (!(r > 0)) continue;
        chosen = i;
        acc += r;
        if (target < acc) break;
    }
    return chosen;
}

int32_t sampler_spec_rule(const float *p, const float *q, int n, int32_t d, double u1, double u2, bool *accepted) {
    *accepted = spec_keep(p, q, d, u1);
    return *accepted ? d : spec_residual(p, q, n, d, u2);
}

int32_t sampler_sample_spec(sampler *s, float *logits, int32_t d, const float *q, float *probs, bool *accepted,
                            int top_n_logprobs, float *chosen_logprob, int32_t *top_ids, float *top_lps) {
    *accepted = false;
    if (sampler_dist(s, logits, probs) < 0) return -1;
    int n = s->n_vocab;
    /* at temperature 0 p is a point mass: no draw (d is kept exactly when
     * it is the argmax, else the argmax is the residual) */
    bool greedy = s->p.temperature <= 0;
    *accepted = spec_keep(probs, q, d, greedy ? 0 : rng_uniform(&s->r));
    int32_t chosen = *accepted ? d : spec_residual(probs, q, n, d, greedy ? 0 : rng_uniform(&s->r));
    if (chosen < 0) return -1;
    if (top_n_logprobs >= 0)
        log_softmax_top(logits, n, top_n_logprobs, chosen, chosen_logprob, top_ids, top_lps, s->cands);
    return chosen;
}
