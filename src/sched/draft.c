/*
 * draft.c — the drafters and the speculation policy (contract in draft.h).
 *
 * NGRAM keeps no state: a backwards scan of the context per proposal
 * (a few microseconds for thousands of tokens, far below a forward pass).
 * SUFFIX keeps nothing per request either: a proposal scans the request's
 * context (its newest seq_window tokens) for the places its suffix occurs
 * and counts what followed them, which is exactly what a suffix trie of
 * the context would propose (suffix_scan_propose), keeping nothing and
 * costing one pass over the context per proposal (why not a kept trie:
 * docs/decisions.md, 2026-11-27). The global store is a FIFO of earlier
 * outputs, each added to one shared trie; the oldest are removed (exactly
 * what they added) until a new one fits in the trie's node bound.
 */
#include "draft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../sample/sample.h"
#include "suffix.h"

#define NGRAM_MAX 4
#define NGRAM_MIN 2
/* ngram evidence: the match length, counted up to NGRAM_LONG tokens (the
 * occurrence's common suffix with the context, beyond the n-gram found) */
#define NGRAM_LONG 10
/* suffix: the longest suffix of the context matched against a trie */
#define SUFFIX_MATCH_MAX 16
/* acceptance estimate: counts decay by ALPHA_DECAY per feedback, so the
 * estimate follows the last few dozen drafts, and by ALPHA_IDLE_DECAY per
 * step without drafts (back toward the prior: a sequence whose drafts
 * stopped paying tries again, about every 15 steps when they are always
 * rejected). The prior is ALPHA_PRIOR accepted and rejected: weak, so that
 * drafts that are never accepted bring the estimate near 0 (with a prior of
 * one each it could not fall below 1/12, which a draft model's one-token
 * draft at ~3% of a step beats, so drafts that never pay would never stop;
 * docs/decisions.md, 2026-11-27) */
#define ALPHA_DECAY 0.9
#define ALPHA_IDLE_DECAY 0.97
#define ALPHA_PRIOR 0.05

/* The acceptance table (NGRAM, SUFFIX; draft.h "Policy"): one entry per
 * evidence class and draft position, shared by all sequences.
 * Evidence: the sampling (greedy or not) and the drafter's match: ngram
 * the match length (2-3, 4-9, 10+) and the confidence of the token the
 * draft copies where it was sampled (draft_seq_note's classes); suffix the
 * match depth (1, 2, 3, 4-7, 8+), the token's count ratio (>= 0.99,
 * >= 0.5, below) and whether the sequence's last verified draft was
 * accepted whole. Positions 0..6, then 7 and later together.
 * An entry's estimate is (accepted + EV_PRIOR * m) / (tried + EV_PRIOR),
 * where m is the estimate of the entry one position earlier (0.5 at
 * position 0): a position never reached yet inherits its predecessor's
 * rate, so a class whose first tokens are always accepted drafts long at
 * once. Counts decay by EV_DECAY per update of the entry (it follows the
 * last ~50 observations of its class, across sequences). An entry learns
 * from every position whose outcome the step reveals, drafted or not
 * (draft_seq_feedback with the tokens now there): the accepted drafts,
 * the first rejected one, and the proposal's token at the position the
 * step sampled without drafting it; so a declined class keeps being
 * observed (it is drafted again once it pays) and the rate of the first
 * undrafted position is learnt at every step. Without those observations
 * (a table learning from drafted positions only) a class that fell below
 * the threshold had to drift back to its prior to be retried, and on
 * stories260K's greedy continuations a run drafted 1,046 positions with
 * 598 accepted in 902 passes where it now drafts ~1,090 with ~640 in ~860
 * (docs/perf.md, "Drafting precision"). */
#define EV_POS 8
#define EV_NGRAM (3 * DRAFT_CONF_N)
#define EV_SUFFIX (5 * 3)
#define EV_CLASSES (4 * MAX(EV_NGRAM, EV_SUFFIX))
#define EV_PRIOR 0.2
#define EV_DECAY 0.98

typedef struct stored {
    int32_t *toks;
    int n;
} stored;

struct drafter {
    draft_opts o;
    /* global store (SUFFIX): a ring of outputs, oldest at head */
    suffix_tree *global;
    stored *ring;
    int ring_cap, ring_head, ring_n;
    size_t ring_bytes;
    uint64_t evicted;
    int32_t *scan;          /* suffix_scan_propose's scratch for scan_cap tokens */
    int scan_cap;
    /* the acceptance table: decayed accepted and tried counts */
    float ev_acc[EV_CLASSES][EV_POS], ev_try[EV_CLASSES][EV_POS];
};

struct draft_seq {
    double acc, rej; /* decayed accepted tokens and rejections (DRAFT_MODEL) */
    bool sampled;    /* temperature > 0 (draft_seq_set_sampled)               */
    bool whole;      /* its last verified draft was accepted whole            */
    int n_ev;        /* the last proposal's tokens and their evidence classes */
    uint8_t ev[DRAFT_MAX];
    int32_t prop[DRAFT_MAX];
    int at;          /* the context's length when proposed: prop[0]'s place   */
    uint8_t *conf;   /* (n_conf) draft_seq_note's class of each position; 0
                        beyond n_conf and where nothing was noted            */
    int n_conf, cap_conf;
};

draft_opts draft_defaults(draft_kind kind) {
    return (draft_opts){.kind = kind, .max_draft = 8, .suffix_depth = 24, .seq_window = 1 << 15,
                        .global_max_nodes = 1 << 18};
}

static const char *const kind_names[DRAFT_N_KINDS] = {"off", "ngram", "suffix", "draft"};

int draft_kind_parse(const char *name, draft_kind *out, err_t *e) {
    for (int k = 0; k < DRAFT_N_KINDS; k++)
        if (!strcmp(name, kind_names[k])) {
            *out = (draft_kind)k;
            return 0;
        }
    return err_set(e, ERR_INVALID, "'%s' is not a drafter (off, ngram, suffix or draft)", name);
}

const char *draft_kind_name(draft_kind k) { return k >= 0 && k < DRAFT_N_KINDS ? kind_names[k] : "?"; }

drafter *draft_new(const draft_opts *o) {
    if (o->kind == DRAFT_OFF) return NULL;
    ASSERT(o->max_draft >= 1 && o->max_draft <= DRAFT_MAX && o->seq_window >= 1);
    drafter *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->o = *o;
    /* room for a useful match (8 tokens) above the longest draft */
    d->o.suffix_depth = MIN(SUFFIX_MAX_DEPTH, MAX(o->suffix_depth, o->max_draft + 8));
    if (o->kind == DRAFT_SUFFIX && o->global_max_nodes > 0) {
        d->global = suffix_new(d->o.suffix_depth, o->global_max_nodes);
        if (!d->global) {
            free(d);
            return NULL;
        }
    }
    return d;
}

static void ring_pop(drafter *d) {
    stored *s = &d->ring[d->ring_head];
    suffix_remove(d->global, s->toks, s->n);
    d->ring_bytes -= (size_t)s->n * sizeof *s->toks;
    free(s->toks);
    d->ring_head = (d->ring_head + 1) % d->ring_cap;
    d->ring_n--;
    d->evicted++;
}

void draft_free(drafter *d) {
    if (!d) return;
    while (d->ring_n) ring_pop(d);
    free(d->ring);
    suffix_free(d->global);
    free(d->scan);
    free(d);
}

draft_kind draft_get_kind(const drafter *d) { return d ? d->o.kind : DRAFT_OFF; }
int draft_max(const drafter *d) { return d ? d->o.max_draft : 0; }

draft_seq *draft_seq_new(drafter *d) {
    (void)d;
    return calloc(1, sizeof(draft_seq));
}

/* ---- NGRAM ---- */

/* The most recent earlier occurrence of the context's last g tokens
 * (g = NGRAM_MAX .. NGRAM_MIN, longest first), and the tokens after it,
 * which start at *from. *match is the occurrence's common suffix with the
 * context, counted up to NGRAM_LONG (the n-gram found is its lower bound).
 *
 * One backward pass serves every g: an occurrence of the last g tokens
 * ending at e (e <= n - 2) is a place where the context up to e and the
 * whole context share a suffix of at least g tokens, and every such place
 * ends with the context's last two tokens. So the pass looks for those two
 * (16 places at a time, four to a vector), measures each hit's common
 * suffix, stops at the first that reaches the longest g and keeps the first
 * (most recent) for each shorter g. The scan it replaces went over the
 * context once per g with a branch per token: with 8 agents at ~2,000
 * tokens of context it was ~2% of the engine thread's time, where every
 * step waits for it (docs/perf.md, "Speculation at 8 agents: what the loss
 * was"). */
typedef int32_t ngram_v4 __attribute__((vector_size(16))); /* (GCC and clang vectors: SSE2, NEON or scalar) */
static inline ngram_v4 ngram_ld4(const int32_t *p) {
    ngram_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static int ngram_propose(const int32_t *t, int n, int max, int32_t *out, int *match, int *from) {
    const int gmax = MIN(NGRAM_MAX, n - 1), cap = MAX(NGRAM_LONG, gmax);
    if (gmax < NGRAM_MIN) return 0;
    const int32_t a = t[n - 2], b = t[n - 1];
    int best[NGRAM_MAX + 1] = {0}, best_l[NGRAM_MAX + 1] = {0}, found = 0; /* (e + 1, so 0 is none) */
    for (int hi = n - 2; hi >= 1 && !found;) {
        const int lo = MAX(1, hi - 15);
        int any = 0;
        if (hi - lo == 15) {
            ngram_v4 acc = {0, 0, 0, 0};
            for (int e = lo; e <= hi; e += 4) acc |= (ngram_ld4(t + e - 1) == a) & (ngram_ld4(t + e) == b);
            any = (acc[0] | acc[1] | acc[2] | acc[3]) != 0;
        } else {
            for (int e = lo; e <= hi; e++) any |= (t[e - 1] == a) & (t[e] == b);
        }
        for (int e = hi; any && e >= lo; e--) {
            if (t[e - 1] != a || t[e] != b) continue;
            int l = 2;
            while (l < cap && e - l >= 0 && t[e - l] == t[n - 1 - l]) l++;
            for (int g = MIN(l, gmax); g >= NGRAM_MIN && !best[g]; g--) best[g] = e + 1, best_l[g] = l;
            if (l >= gmax) {
                found = 1;
                break;
            }
        }
        hi = lo - 1;
    }
    for (int g = gmax; g >= NGRAM_MIN; g--) {
        if (!best[g]) continue;
        int k = 0;
        for (int j = best[g]; j < n && k < max; j++) out[k++] = t[j];
        *match = MIN(best_l[g], NGRAM_LONG);
        *from = best[g];
        return k;
    }
    return 0;
}

/* ---- SUFFIX ---- */

/* Expected accepted tokens of a proposal: the sum of its path's
 * probabilities. */
static double score(const float *prob, int k) {
    double p = 1, sum = 0;
    for (int i = 0; i < k; i++) sum += p *= prob[i];
    return sum;
}

static int suffix_draft(drafter *d, const int32_t *tokens, int n, int max, int32_t *out, float *prob, int *match) {
    int32_t a[DRAFT_MAX], b[DRAFT_MAX];
    float pa[DRAFT_MAX], pb[DRAFT_MAX];
    int na = 0, nb = 0, la = 0, lb = 0;
    /* a match leaves room for the draft below the trie's depth */
    int match_max = MAX(1, MIN(SUFFIX_MATCH_MAX, d->o.suffix_depth - max));
    int w = MIN(n, d->o.seq_window); /* the request's newest context */
    if (w > d->scan_cap) {           /* (grows to the longest context seen, at most the window) */
        int cap = MAX(w, MIN(2 * d->scan_cap, d->o.seq_window));
        int32_t *p = realloc(d->scan, suffix_scan_scratch(cap) * sizeof *p);
        if (p) d->scan = p, d->scan_cap = cap;
    }
    if (w <= d->scan_cap)
        na = suffix_scan_propose(tokens + n - w, w, d->o.suffix_depth, match_max, max, DRAFT_P_MIN, d->scan, a, pa, &la);
    if (d->global && d->ring_n) nb = suffix_propose(d->global, NULL, tokens, n, match_max, max, DRAFT_P_MIN, b, pb, &lb);
    if (nb > 0 && score(pb, nb) > score(pa, na)) {
        memcpy(out, b, (size_t)nb * sizeof *b);
        memcpy(prob, pb, (size_t)nb * sizeof *pb);
        *match = lb;
        return nb;
    }
    memcpy(out, a, (size_t)na * sizeof *a);
    memcpy(prob, pa, (size_t)na * sizeof *pa);
    *match = la;
    return na;
}

/* The evidence class of a proposal's token (see EV_PRIOR): ngram by the
 * match length and the copied token's confidence class (conf), suffix by
 * the match depth, the token's count ratio and whether the last draft was
 * accepted whole (for ngram that split measured no better: fewer classes
 * learn faster; docs/perf.md, "Drafting precision"). */
static int ev_class(const drafter *d, const draft_seq *s, int match, float prob, int conf) {
    int c;
    bool whole = s->whole;
    if (d->o.kind == DRAFT_NGRAM) {
        c = (match >= NGRAM_LONG ? 2 : match >= NGRAM_MAX ? 1 : 0) * DRAFT_CONF_N + conf;
        whole = false;
    } else {
        c = (match >= 8 ? 4 : match >= 4 ? 3 : MAX(match, 1) - 1) * 3 + (prob >= 0.99f ? 0 : prob >= 0.5f ? 1 : 2);
    }
    return (c * 2 + whole) * 2 + s->sampled;
}

int draft_propose(drafter *d, draft_seq *s, const int32_t *tokens, int n, int max, int32_t *out) {
    max = MIN(max, d->o.max_draft);
    s->n_ev = 0;
    if (max <= 0 || n <= 0) return 0;
    float prob[DRAFT_MAX];
    int k = 0, match = 0, from = 0;
    switch (d->o.kind) {
    case DRAFT_NGRAM: k = ngram_propose(tokens, n, max, out, &match, &from); break;
    case DRAFT_SUFFIX: k = suffix_draft(d, tokens, n, max, out, prob, &match); break;
    default: return 0;
    }
    for (int i = 0; i < k; i++) {
        int conf = d->o.kind == DRAFT_NGRAM && from + i < s->n_conf ? s->conf[from + i] : 0;
        s->ev[i] = (uint8_t)ev_class(d, s, match, d->o.kind == DRAFT_SUFFIX ? prob[i] : 1, conf);
        s->prop[i] = out[i];
    }
    s->n_ev = k;
    s->at = n;
    return k;
}

void draft_seq_set_sampled(draft_seq *s, bool sampled) { s->sampled = sampled; }

double draft_seq_accept_p(const drafter *d, const draft_seq *s, int j) {
    ASSERT(j >= 0 && j < s->n_ev);
    double m = 0.5;
    for (int i = 0; i <= j; i++) {
        int c = s->ev[i], p = MIN(i, EV_POS - 1);
        m = (d->ev_acc[c][p] + EV_PRIOR * m) / (d->ev_try[c][p] + EV_PRIOR);
    }
    return m;
}

int draft_plan_seq(drafter *d, draft_seq *s, int n, double threshold) {
    double E[DRAFT_MAX];
    n = MIN(n, s->n_ev);
    draft_seq_expect(d, s, n, E);
    int j = 0;
    while (j < n && E[j] > threshold) j++;
    return j;
}

static void ev_update(drafter *d, const draft_seq *s, int i, bool accepted) {
    int c = s->ev[i], p = MIN(i, EV_POS - 1);
    d->ev_acc[c][p] = d->ev_acc[c][p] * (float)EV_DECAY + accepted;
    d->ev_try[c][p] = d->ev_try[c][p] * (float)EV_DECAY + 1;
}

void draft_seq_feedback(drafter *d, draft_seq *s, int n_drafted, int n_accepted, const int32_t *tokens, int n) {
    if (n_drafted > 0) {
        s->acc = s->acc * ALPHA_DECAY + n_accepted;
        s->rej = s->rej * ALPHA_DECAY + (n_accepted < n_drafted);
        s->whole = n_accepted >= n_drafted;
    }
    if (d && tokens) { /* every position the tokens now there reveal, up to the first miss */
        for (int i = 0; i < s->n_ev && s->at + i < n; i++) {
            bool hit = s->prop[i] == tokens[s->at + i];
            ev_update(d, s, i, hit);
            if (!hit) break;
        }
    } else if (d && n_drafted <= s->n_ev) { /* positions up to the first rejection were tried */
        for (int i = 0; i < n_drafted && i <= n_accepted; i++) ev_update(d, s, i, i < n_accepted);
    }
    s->n_ev = 0;
}

float draft_margin(const float *logits, int n, int32_t id) {
    const float lo = row_max(logits, id), hi = row_max(logits + id + 1, n - id - 1);
    return logits[id] - (lo > hi ? lo : hi);
}

void draft_seq_note(draft_seq *s, int pos, float margin) {
    if (pos < 0) return;
    if (pos >= s->cap_conf) {
        int cap = MAX(pos + 1, 2 * s->cap_conf);
        uint8_t *c = realloc(s->conf, (size_t)cap);
        if (!c) return; /* (the position stays unknown) */
        s->conf = c;
        s->cap_conf = cap;
    }
    if (pos >= s->n_conf) {
        memset(s->conf + s->n_conf, 0, (size_t)(pos + 1 - s->n_conf));
        s->n_conf = pos + 1;
    }
    s->conf[pos] = (uint8_t)(margin < 0.5f ? 1 : margin < 1 ? 2 : margin < 2 ? 3 : margin < 4 ? 4 : 5);
}

void draft_seq_idle(draft_seq *s) {
    s->acc *= ALPHA_IDLE_DECAY;
    s->rej *= ALPHA_IDLE_DECAY;
}

double draft_seq_alpha(const draft_seq *s) { return (s->acc + ALPHA_PRIOR) / (s->acc + s->rej + 2 * ALPHA_PRIOR); }

/* Adds an output to the global store, evicting the oldest until it fits. */
static void global_add(drafter *d, const int32_t *toks, int n) {
    int fit = d->o.global_max_nodes / d->o.suffix_depth;
    if (n > fit) { /* its newest part */
        toks += n - fit;
        n = fit;
    }
    if (n < 2) return;
    int32_t *copy = malloc((size_t)n * sizeof *copy);
    if (!copy) return;
    memcpy(copy, toks, (size_t)n * sizeof *copy);
    err_t e = {0};
    while (suffix_add(d->global, copy, n, &e) < 0) {
        if (!d->ring_n) { /* cannot happen: n * depth <= max_nodes */
            free(copy);
            return;
        }
        ring_pop(d);
    }
    if (d->ring_n == d->ring_cap) {
        int cap = d->ring_cap ? d->ring_cap * 2 : 64;
        stored *r = malloc((size_t)cap * sizeof *r);
        if (!r) {
            suffix_remove(d->global, copy, n);
            free(copy);
            return;
        }
        for (int i = 0; i < d->ring_n; i++) r[i] = d->ring[(d->ring_head + i) % d->ring_cap];
        free(d->ring);
        d->ring = r;
        d->ring_cap = cap;
        d->ring_head = 0;
    }
    d->ring[(d->ring_head + d->ring_n) % d->ring_cap] = (stored){copy, n};
    d->ring_n++;
    d->ring_bytes += (size_t)n * sizeof *copy;
}

void draft_seq_end(drafter *d, draft_seq *s, const int32_t *tokens, int n_prompt, int n, bool keep) {
    if (!s) return;
    if (keep && d && d->global && n > n_prompt) global_add(d, tokens + n_prompt, n - n_prompt);
    free(s->conf);
    free(s);
}

double draft_threshold(int n_decode, int n_tokens, double token_cost, double draft_cost) {
    /* One more token makes the step (1 + token_cost * n_tokens) longer by
     * token_cost + draft_cost, and the step yields about n_decode tokens:
     * the draft pays when it adds more than the share those tokens lose.
     * (A draft model's forwards are added to the step, they do not scale
     * it: with them in the step's length too, the threshold would stay
     * below 1 however dear the draft; docs/decisions.md, 2026-11-27) */
    return (token_cost + draft_cost) * MAX(n_decode, 1) / (1 + token_cost * n_tokens);
}

int draft_plan(int n, double alpha, double threshold) {
    int j = 0;
    double e = 1;
    while (j < n && (e *= alpha) > threshold) j++;
    return j;
}

void draft_cost_observe(draft_cost *c, int n_tokens, double ms) {
    if (n_tokens < 1 || n_tokens > DRAFT_COST_MAX_TOKENS || !(ms > 0)) return;
    const double k = 0.98, x = n_tokens;
    c->w = c->w * k + 1;
    c->sx = c->sx * k + x;
    c->sxx = c->sxx * k + x * x;
    c->sy = c->sy * k + ms;
    c->sxy = c->sxy * k + x * ms;
}

/* The least-squares line's slope and fixed part; false while the steps
 * seen do not determine it (too few, or all of one size). */
static bool cost_line(const draft_cost *c, double *slope, double *fixed) {
    if (c->w < 8) return false;
    double var = c->sxx / c->w - (c->sx / c->w) * (c->sx / c->w);
    if (var < 0.25) return false; /* every step the same size */
    *slope = (c->sxy / c->w - (c->sx / c->w) * (c->sy / c->w)) / var;
    *fixed = c->sy / c->w - *slope * c->sx / c->w;
    return true;
}

/* decode-only steps: per batch size, decayed by DRAFT_LINE_DECAY per step
 * of that size (~100 steps); a slope is determined once the drafts' count
 * varied over the steps seen (centered sum of squares >= DRAFT_LINE_VAR:
 * e.g. 4 steps with one draft more or less than the mean), and the step
 * time T(n) needs DRAFT_LINE_MIN_W steps */
#define DRAFT_LINE_DECAY 0.99
/* draft_step_time's cells: decayed by DRAFT_CELL_DECAY per step of one
 * decoding sequence (a cell chosen in every step holds ~100 steps' weight; one
 * not chosen for ~300 steps is back at the line), drawn toward the line by
 * DRAFT_CELL_PRIOR steps */
#define DRAFT_CELL_DECAY 0.99
#define DRAFT_CELL_PRIOR 2.0
#define DRAFT_LINE_VAR 4.0
#define DRAFT_LINE_MIN_W 4.0

/* a step's time counts at most DRAFT_SPIKE times what the batch size's
 * line predicts for it: a step the machine stalled (another process, a page
 * fault) is not what its drafts cost, and one such step of 5 ms among ~0.1 ms
 * ones with 4 drafts moved the least-squares slope by ~0.04 ms, as much as a
 * draft costs (docs/perf.md, "A slope that went stale") */
#define DRAFT_SPIKE 2.0

/* The batch size's line: T(n) and the slope (a batch size that never
 * drafted enough to measure a slope, as the few steps of a run's tail at 3
 * or 5 sequences, takes the nearest batch size's: a draft's cost moves
 * little with the batch); false while undetermined. */
static bool step_line(const draft_cost *c, int n_decode, double *t0, double *slope) {
    int i = MIN(MAX(n_decode, 1), DRAFT_COST_NB) - 1;
    const draft_line *l = &c->by_n[i];
    if (l->w < DRAFT_LINE_MIN_W) return false;
    *slope = 0;
    for (int d = 0; d < DRAFT_COST_NB && !(*slope > 0); d++) {
        if (i - d >= 0 && c->by_n[i - d].held > 0) *slope = c->by_n[i - d].held;
        else if (i + d < DRAFT_COST_NB && c->by_n[i + d].held > 0) *slope = c->by_n[i + d].held;
    }
    if (!(*slope > 0)) return false;
    *t0 = (l->sy - *slope * l->sx) / l->w; /* (the line's time at 0 drafts) */
    return true;
}

void draft_cost_observe_decode(draft_cost *c, int n_decode, int n_drafts, double ms) {
    if (n_decode < 1 || n_drafts < 0 || !(ms > 0)) return;
    double t0, slope;
    if (step_line(c, n_decode, &t0, &slope) && t0 > 0) ms = MIN(ms, DRAFT_SPIKE * (t0 + slope * n_drafts));
    if (n_decode == 1) {
        for (int d = 0; d <= DRAFT_MAX; d++) c->lone[d].w *= DRAFT_CELL_DECAY, c->lone[d].sy *= DRAFT_CELL_DECAY;
        if (n_drafts <= DRAFT_MAX) c->lone[n_drafts].w += 1, c->lone[n_drafts].sy += ms;
    }
    draft_line *l = &c->by_n[MIN(n_decode, DRAFT_COST_NB) - 1];
    const double k = DRAFT_LINE_DECAY, x = n_drafts;
    l->w = l->w * k + 1;
    l->sx = l->sx * k + x;
    l->sxx = l->sxx * k + x * x;
    l->sy = l->sy * k + ms;
    l->sxy = l->sxy * k + x * ms;
    double sxx_c = l->sxx - l->sx * l->sx / l->w; /* centered: w * variance */
    if (sxx_c >= DRAFT_LINE_VAR) {
        double slope = (l->sxy - l->sx * l->sy / l->w) / sxx_c;
        l->held = slope > 1e-9 ? slope : 1e-9; /* (a draft never costs nothing) */
        l->age = 0;
    } else if (l->held > 0 && ++l->age > DRAFT_HELD_STEPS) {
        l->held = 0; /* stale (draft.h): measured again once drafts pay by the fallback */
    }
}

double draft_threshold_measured(int n_decode, double step_ms, double draft_ms) {
    if (!(step_ms > 0)) return 2;
    return draft_ms * MAX(n_decode, 1) / step_ms;
}

double draft_cost_threshold(const draft_cost *c, int n_decode, double fallback) {
    double t0, slope;
    if (!step_line(c, n_decode, &t0, &slope)) return fallback;
    return draft_threshold_measured(n_decode, t0, slope);
}

/* draft_step_time given batch size 1's line (t0, slope) */
static double cell_time(const draft_cost *c, int d, double t0, double slope) {
    const draft_cell *x = &c->lone[d];
    return (x->sy + DRAFT_CELL_PRIOR * (t0 + slope * d)) / (x->w + DRAFT_CELL_PRIOR);
}

double draft_step_time(const draft_cost *c, int d) {
    double t0, slope;
    if (d < 0 || d > DRAFT_MAX || !step_line(c, 1, &t0, &slope) || !(t0 > 0)) return -1;
    return cell_time(c, d, t0, slope);
}

int draft_pick(const draft_cost *c, const double *E, int k) {
    double t0, slope; /* (the line once, not once per count) */
    if (!step_line(c, 1, &t0, &slope) || !(t0 > 0)) return -1;
    double sum = 0, best = 1 / cell_time(c, 0, t0, slope);
    int best_d = 0;
    for (int d = 1; d <= MIN(k, DRAFT_MAX); d++) {
        sum += E[d - 1];
        double td = cell_time(c, d, t0, slope);
        if ((1 + sum) / td > best) best = (1 + sum) / td, best_d = d;
    }
    return best_d;
}

void draft_seq_expect(const drafter *d, const draft_seq *s, int n, double *E) {
    ASSERT(n <= s->n_ev);
    double e = 1, m = 0.5;
    for (int j = 0; j < n; j++) {
        int c = s->ev[j], p = MIN(j, EV_POS - 1);
        m = (d->ev_acc[c][p] + EV_PRIOR * m) / (d->ev_try[c][p] + EV_PRIOR);
        E[j] = e *= m;
    }
}

double draft_cost_fixed(const draft_cost *c) {
    double slope, fixed;
    return cost_line(c, &slope, &fixed) && fixed > 0 ? fixed : 0;
}

double draft_cost_token(const draft_cost *c, double fallback) {
    double slope, fixed;
    if (!cost_line(c, &slope, &fixed)) return fallback;
    if (!(fixed > 0)) return 10; /* all per-token work: drafts never pay */
    double r = slope / fixed;
    return r < 0.001 ? 0.001 : r > 10 ? 10 : r;
}

void draft_get_stats(const drafter *d, draft_stats *out) {
    memset(out, 0, sizeof *out);
    if (!d || !d->global) return;
    out->global_seqs = d->ring_n;
    out->global_nodes = suffix_n_nodes(d->global);
    out->global_bytes = suffix_bytes(d->global) + d->ring_bytes + (size_t)d->ring_cap * sizeof(stored);
    out->global_evicted_total = d->evicted;
}
