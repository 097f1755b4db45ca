/*
 * dmodel.c — the draft model runner (contract and the step's diagram in
 * dmodel.h).
 *
 * Each sequence keeps its own draft block table over the runner's pool
 * (one reference per entry, like the target's tables, but never shared:
 * no tree indexes draft KV) and `n_computed`, the positions whose draft
 * K/V holds the sequence's tokens. A step's drafts are fed back into the
 * draft model at positions n, n+1, ...: after verification the accepted
 * ones are the sequence's tokens there, so their K/V stays (n_computed
 * moves past them) and the rest is overwritten later.
 */
#include "dmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kv/kvpool.h"

struct dmodel_seq {
    dmodel *d;
    int32_t *blocks; /* draft block table, one pool reference each       */
    int n_blocks, cap_blocks;
    int n_computed; /* positions whose draft K/V holds the tokens       */
    rng r;          /* draws from q                                     */
    /* this step */
    const int32_t *tokens;
    int n0;        /* context length                                   */
    int chunk;     /* catch-up positions in forward 0                  */
    int want;      /* drafts asked (0: catch-up only)                  */
    bool drafting; /* still drafting in this step's forwards           */
    int n_draft;
    int n_fed; /* drafts run through the draft model (K/V written) */
    int32_t draft[DRAFT_MAX];
    float *q[DRAFT_MAX];
    dmodel_how how;
    gmatch *probe; /* the grammar after the drafts so far              */
};

struct dmodel {
    const model *m;
    dmodel_opts o;
    model_kv *kv;
    kvpool *pool;
    model_state *st;
    int n_vocab;
    float *logits;    /* (max_seqs, n_vocab) one forward's rows           */
    float *qbuf;      /* (max_rows, n_vocab) this step's q rows           */
    uint64_t *mask;   /* a grammar's allowed tokens                       */
    sampler *scratch; /* lends its scratch to sampler_dist_params         */
    int32_t *b_tok, *b_pos, *b_seq;
    uint8_t *b_logits;
    model_seq *b_seqs;
    dmodel_seq **act; /* this step's sequences                            */
    int n_act, n_rows, n_budget;
    bool ran; /* the step's forwards ran: the next add starts anew */
};

int dmodel_new(const model *dm, const model *target, const dmodel_opts *o, dmodel **out, err_t *e) {
    *out = NULL;
    if (dm->cfg.n_vocab != target->cfg.n_vocab)
        return err_set(e, ERR_INVALID,
                       "the draft model has %d tokens in its vocabulary, the model %d: it must have "
                       "the model's vocabulary",
                       dm->cfg.n_vocab, target->cfg.n_vocab);
    if (dm->cfg.encoder)
        return err_set(e, ERR_INVALID, "the draft model is an encoder (%s): it cannot generate", dm->cfg.arch_name);
    if (o->n_blocks < 1 || o->max_tokens < 1 || o->max_seqs < 1 || o->max_rows < 1 || o->n_ctx < 2)
        return err_set(e, ERR_INVALID, "draft model: bad sizes");
    dmodel *d = calloc(1, sizeof *d);
    if (!d) return err_set(e, ERR_NOMEM, "out of memory for the draft model");
    d->m = dm;
    d->o = *o;
    d->n_vocab = dm->cfg.n_vocab;
    size_t nv = (size_t)d->n_vocab;
    int nb = MAX(o->max_tokens, o->max_seqs);
    d->kv = model_kv_new(dm, o->n_blocks, o->block_tokens);
    d->pool = kvpool_new(o->n_blocks);
    d->st = model_state_new_on(dm, nb, o->n_ctx, o->workers);
    d->logits = malloc((size_t)o->max_seqs * nv * sizeof *d->logits);
    d->qbuf = malloc((size_t)o->max_rows * nv * sizeof *d->qbuf);
    d->mask = malloc((nv + 63) / 64 * sizeof *d->mask);
    sampler_params sp = sampler_defaults();
    d->scratch = sampler_new(&sp, d->n_vocab);
    d->b_tok = malloc((size_t)nb * sizeof *d->b_tok);
    d->b_pos = malloc((size_t)nb * sizeof *d->b_pos);
    d->b_seq = malloc((size_t)nb * sizeof *d->b_seq);
    d->b_logits = malloc((size_t)nb);
    d->b_seqs = calloc((size_t)o->max_seqs, sizeof *d->b_seqs);
    d->act = calloc((size_t)o->max_seqs, sizeof *d->act);
    if (!d->kv || !d->pool || !d->st || !d->logits || !d->qbuf || !d->mask || !d->scratch || !d->b_tok || !d->b_pos ||
        !d->b_seq || !d->b_logits || !d->b_seqs || !d->act) {
        dmodel_free(d);
        return err_set(e, ERR_NOMEM, "out of memory for the draft model's %d KV blocks and buffers", o->n_blocks);
    }
    *out = d;
    return 0;
}

void dmodel_free(dmodel *d) {
    if (!d) return;
    model_kv_free(d->kv);
    kvpool_free(d->pool);
    model_state_free(d->st);
    free(d->logits);
    free(d->qbuf);
    free(d->mask);
    sampler_free(d->scratch);
    free(d->b_tok);
    free(d->b_pos);
    free(d->b_seq);
    free(d->b_logits);
    free(d->b_seqs);
    free(d->act);
    free(d);
}

double dmodel_bytes_ratio(const dmodel *d, const model *target) {
    return (double)model_token_bytes(d->m) / (double)MAX(model_token_bytes(target), 1);
}

uint64_t dmodel_bytes(const dmodel *d) {
    return (uint64_t)d->o.n_blocks * model_kv_block_bytes(d->m, d->o.block_tokens) +
           (uint64_t)d->o.max_rows * (uint64_t)d->n_vocab * sizeof(float);
}

uint64_t dmodel_scratch_bytes(const dmodel *d) {
    const size_t nv = (size_t)d->n_vocab;
    return model_state_bytes(d->st) + (size_t)d->o.max_seqs * nv * sizeof *d->logits +
           (nv + 63) / 64 * sizeof *d->mask + sampler_bytes(d->scratch);
}

dmodel_seq *dmodel_seq_new(dmodel *d, uint64_t seed) {
    dmodel_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->d = d;
    rng_seed(&s->r, seed ^ 0x5bd1e9955bd1e995ull);
    return s;
}

void dmodel_seq_drop(dmodel_seq *s) {
    if (!s) return;
    for (int i = 0; i < s->n_blocks; i++) kvpool_unref(s->d->pool, s->blocks[i]);
    s->n_blocks = 0;
    s->n_computed = 0;
    s->n_draft = s->n_fed = 0;
}

void dmodel_seq_free(dmodel_seq *s) {
    if (!s) return;
    dmodel_seq_drop(s);
    gmatch_free(s->probe);
    /* a sequence freed between dmodel_add and dmodel_run leaves the step */
    dmodel *d = s->d;
    for (int i = 0; i < d->n_act; i++)
        if (d->act[i] == s) {
            memmove(d->act + i, d->act + i + 1, (size_t)(d->n_act - i - 1) * sizeof *d->act);
            d->n_act--;
            break;
        }
    free(s->blocks);
    free(s);
}

/* Draft blocks for positions [0, n); false when the pool runs out (s keeps
 * what it got). */
static bool seq_blocks(dmodel *d, dmodel_seq *s, int n) {
    int B = d->o.block_tokens, need = (n + B - 1) / B;
    if (need > s->cap_blocks) {
        int cap = MAX(need, 2 * s->cap_blocks);
        int32_t *b = realloc(s->blocks, (size_t)cap * sizeof *b);
        if (!b) return false;
        s->blocks = b;
        s->cap_blocks = cap;
    }
    while (s->n_blocks < need) {
        int32_t b = kvpool_alloc(d->pool);
        if (b < 0) return false;
        s->blocks[s->n_blocks++] = b;
    }
    return true;
}

int dmodel_add(dmodel *d, dmodel_seq *s, const int32_t *tokens, int n, int k, const dmodel_how *how) {
    if (d->ran) d->n_act = d->n_rows = d->n_budget = 0, d->ran = false;
    s->n_draft = s->n_fed = 0;
    if (k <= 0 || d->n_act == d->o.max_seqs) return 0;
    k = MIN(k, DRAFT_MAX);
    if (s->n_computed > n - 1) s->n_computed = n - 1; /* (cannot happen: sync keeps it below n) */
    int gap = n - s->n_computed;
    bool greedy = how->sp.temperature <= 0;
    if (!greedy) k = MIN(k, d->o.max_rows - d->n_rows);
    int room = d->o.max_tokens - d->n_budget;
    if (k <= 0 || room <= 0) return 0;
    int B = d->o.block_tokens;
    if (gap > room) { /* a chunk of the catch-up, no drafts */
        if (!seq_blocks(d, s, s->n_computed + room) && s->n_blocks * B <= s->n_computed) return 0;
        s->chunk = MIN(room, s->n_blocks * B - s->n_computed);
        s->want = 0;
    } else {
        seq_blocks(d, s, n + k - 1);
        if (s->n_blocks * B < n) { /* no room for the context itself */
            if (s->n_blocks * B <= s->n_computed) return 0;
            s->chunk = s->n_blocks * B - s->n_computed;
            s->want = 0;
        } else {
            s->chunk = gap;
            s->want = MIN(k, s->n_blocks * B - n + 1);
        }
    }
    s->tokens = tokens;
    s->n0 = n;
    s->how = *how;
    s->drafting = s->want > 0;
    gmatch_free(s->probe);
    s->probe = s->want > 0 && how->gm ? gmatch_clone(how->gm) : NULL;
    if (s->want > 0 && how->gm && !s->probe) s->want = 0, s->drafting = false;
    d->act[d->n_act++] = s;
    d->n_budget += s->chunk;
    if (!greedy) d->n_rows += s->want;
    return s->want;
}

/* Picks draft j of s from its logits row (bias, grammar, then the argmax
 * or a draw from q); false when drafting stops here. */
static bool pick(dmodel *d, dmodel_seq *s, float *lg) {
    const dmodel_how *h = &s->how;
    int n = d->n_vocab;
    for (int i = 0; i < h->n_bias; i++) lg[h->bias_ids[i]] += h->bias_vals[i];
    if (s->probe) {
        if (gmatch_must_end(s->probe) || gmatch_mask(s->probe, d->mask) == 0) return false;
        for (int w = 0; w * 64 < n; w++) {
            uint64_t m = d->mask[w];
            if (m == ~0ull) continue;
            int end = MIN(64, n - w * 64);
            for (int i = 0; i < end; i++)
                if (!(m >> i & 1)) lg[w * 64 + i] = -INFINITY;
        }
    }
    int j = s->n_draft;
    int32_t t;
    float *q = NULL;
    if (h->sp.temperature <= 0) {
        t = 0;
        for (int i = 1; i < n; i++)
            if (lg[i] > lg[t]) t = i;
        if (lg[t] == -INFINITY || isnan(lg[t])) return false;
    } else {
        q = d->qbuf + (size_t)(d->n_rows++) * (size_t)n;
        if (sampler_dist_params(d->scratch, &h->sp, lg, q) < 0) return false;
        t = sampler_draw(q, n, rng_uniform(&s->r));
        if (t < 0) return false;
    }
    if (s->probe && gmatch_accept(s->probe, t) < 0) return false;
    s->draft[j] = t;
    s->q[j] = q;
    s->n_draft = j + 1;
    /* nothing follows the end of the output */
    if (!h->ignore_eos && d->o.is_eog && d->o.is_eog(d->o.eog_ctx, t)) return false;
    return true;
}

static void fail_step(dmodel *d, const char *msg) {
    log_error("engine: the draft model's forward failed: %s (no drafts this step)", msg);
    for (int i = 0; i < d->n_act; i++) {
        dmodel_seq_drop(d->act[i]);
        d->act[i]->want = 0;
    }
    d->ran = true;
}

bool dmodel_run(dmodel *d, double *ms_per_forward) {
    *ms_per_forward = 0;
    if (d->ran || d->n_act == 0) {
        d->ran = true;
        return true;
    }
    int nv = d->n_vocab;
    d->n_rows = 0; /* q rows are handed out by pick, in order */
    int64_t t_one = 0;
    int n_one = 0;
    for (int f = 0;; f++) {
        int nt = 0, ns = 0;
        for (int i = 0; i < d->n_act; i++) {
            dmodel_seq *s = d->act[i];
            int from, len;
            if (f == 0) {
                from = s->n_computed, len = s->chunk;
            } else {
                if (!s->drafting) continue;
                from = s->n0 + s->n_fed, len = 1;
            }
            if (len <= 0) continue;
            for (int q = 0; q < len; q++) {
                int p = from + q;
                d->b_tok[nt] = p < s->n0 ? s->tokens[p] : s->draft[p - s->n0];
                d->b_pos[nt] = p;
                d->b_seq[nt] = ns;
                d->b_logits[nt] = q == len - 1 && s->drafting;
                nt++;
            }
            d->b_seqs[ns] = (model_seq){.block_table = s->blocks, .n_blocks = s->n_blocks};
            ns++;
        }
        if (nt == 0) break;
        model_batch b = {.n_tokens = nt,
                         .token = d->b_tok,
                         .pos = d->b_pos,
                         .seq = d->b_seq,
                         .logits = d->b_logits,
                         .n_seqs = ns,
                         .seqs = d->b_seqs};
        err_t e = {0};
        int64_t t0 = clock_ns();
        int rows = model_forward(d->m, d->st, d->kv, &b, d->logits, &e);
        if (rows < 0) {
            fail_step(d, e.msg);
            return false;
        }
        if (f > 0) t_one += clock_ns() - t0, n_one++;
        int row = 0;
        for (int i = 0; i < d->n_act; i++) {
            dmodel_seq *s = d->act[i];
            if (f == 0) {
                s->n_computed += s->chunk; /* = n0 when it drafts */
                if (s->want == 0) continue;
            } else {
                if (!s->drafting) continue;
                s->n_fed++;
            }
            if (!s->drafting) continue;
            bool more = pick(d, s, d->logits + (size_t)row * (size_t)nv);
            row++;
            if (!more || s->n_draft >= s->want) s->drafting = false;
        }
        ASSERT(row == rows);
    }
    for (int i = 0; i < d->n_act; i++) {
        gmatch_free(d->act[i]->probe);
        d->act[i]->probe = NULL;
    }
    d->ran = true;
    if (n_one) *ms_per_forward = (double)t_one / 1e6 / n_one;
    return true;
}

int dmodel_seq_computed(const dmodel_seq *s) { return s->n_computed; }

int dmodel_seq_drafts(const dmodel_seq *s, const int32_t **drafts) {
    *drafts = s->draft;
    return s->n_draft;
}

const float *dmodel_seq_q(const dmodel_seq *s, int j) { return s && j >= 0 && j < s->n_draft ? s->q[j] : NULL; }

void dmodel_seq_sync(dmodel_seq *s, const int32_t *tokens, int n) {
    int a = 0;
    while (a < s->n_fed && s->n0 + a < n && tokens[s->n0 + a] == s->draft[a]) a++;
    if (s->n_fed > 0) s->n_computed = s->n0 + a;
    if (s->n_computed > n - 1) s->n_computed = MAX(n - 1, 0);
    s->n_draft = s->n_fed = 0;
    s->want = 0;
}
