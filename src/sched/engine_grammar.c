/*
 * engine_grammar.c — constrained decoding in the engine: the grammar's mask
 * on a sequence's logits (computed by the mask worker thread overlapped
 * with the forward pass, or inside the step), the mask budget, a lazy
 * grammar's trigger, and jump-forward (contract: engine_grammar.h).
 *
 * Threads: the engine thread, and the mask worker (mask_worker; it touches
 * only mjobs, under engine.mk_mu, and the grammar it holds the lock of).
 */
#include "engine_grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* mask_over_budget: the allowance, in tokens' worth of the budget */
#define ENGINE_MASK_GRACE 8

/* Masks off the engine thread (issue 26 finding 1). A constrained
 * sequence's next mask depends only on its matcher's state, which is known
 * once its token is sampled and its forced run appended; so the mask is
 * handed to the mask worker then and computed while the next forward pass
 * runs. At sampling time a sequence whose mask is not in yet (or whose
 * grammar the worker holds for another sequence) sits out: its logits row
 * is kept, it samples when the mask arrives and rejoins a later step, and
 * the others never wait for it. The worker takes the queued mask of the
 * sequence whose masks have cost the least CPU so far, so one slow grammar
 * does not queue a cheap one behind all its masks. The sequences of a
 * grammar share its cache, so the worker and the engine thread take turns
 * by grammar_lock (the engine thread only ever tries it: a busy grammar
 * makes its sequence sit out, never the engine wait), except when a lazy
 * grammar's trigger starts it (once per request, bounded by one mask).
 * Output is unchanged: the same mask, applied to the same logits. With
 * speculative decoding (a row's mask needs the previous row's token) or
 * engine_opts.mask_sync, masks run inside the step as before. States
 * (under mk_mu): IDLE -> QUEUED (engine) -> RUNNING (worker) -> DONE
 * (worker) -> IDLE (engine, when it samples with it). A sequence that ends
 * while its mask runs leaves the job, its matcher included, to the worker
 * (orphan). */
enum { MJ_IDLE, MJ_QUEUED, MJ_RUNNING, MJ_DONE };
typedef struct mjob {
    struct mjob *next;   /* the worker's queue                                 */
    gmatch *gm;          /* the sequence's matcher                              */
    uint64_t *mask;      /* (n_vocab/64 rounded up) the result                  */
    int n_ok;
    int64_t cpu_ns, wall_ns; /* the last mask's                                 */
    int64_t cost_ns;     /* CPU of all its masks so far: the worker's order     */
    int client;          /* its request's client_slot (the share's charge)      */
    int state;
    bool orphan;
    bool deferred;       /* passed over for its client's share (counted once)    */
} mjob;

/* Its logits row is no longer waited on (it sampled, ended or was preempted). */
void sched__hold_drop(engine *en, seq *s) {
    if (!s->out.held_ok) return;
    s->out.held_ok = false;
    en->n_held--;
}

/* Takes s's mask job back from the worker as s ends: a queued one leaves
 * the queue, a running one is left to the worker with the matcher (it
 * frees both when the mask is done). */
size_t sched__mjob_bytes(const engine *en, const seq *s) {
    return s->out.mj ? sizeof *s->out.mj + ((size_t)en->m->cfg.n_vocab + 63) / 64 * sizeof *s->out.mj->mask : 0;
}

void sched__mjob_release(engine *en, seq *s) {
    mjob *j = s->out.mj;
    if (!j) return;
    s->out.mj = NULL;
    pthread_mutex_lock(&en->mk_mu);
    if (j->state == MJ_QUEUED)
        for (mjob **p = &en->mk_queue; *p; p = &(*p)->next)
            if (*p == j) {
                *p = j->next;
                break;
            }
    bool orphan = j->state == MJ_RUNNING;
    if (orphan) {
        j->orphan = true;
        s->out.gm = NULL; /* the worker's now */
    }
    pthread_mutex_unlock(&en->mk_mu);
    if (!orphan) {
        free(j->mask);
        free(j);
    }
}

/* This thread's CPU time (ns). */
static int64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* --mask-spin-us (testing): a mask that started at CPU time c0 takes at
 * least that long. */
static void mask_spin(const engine *en, int64_t c0) {
    if (en->o.mask_spin_us > 0)
        while (thread_cpu_ns() - c0 < (int64_t)en->o.mask_spin_us * 1000) {}
}

/* With mk_mu held: c charged ns more at `now` (the total too while c has
 * running work). */
static void share_charge_locked(engine *en, client *c, double ns, int64_t now) {
    c->mk_charge = policy_decay(c->mk_charge, now - c->mk_at) + ns;
    c->mk_at = now;
    if (c->mk_pub == en->mk_pub) {
        en->mk_total = policy_decay(en->mk_total, now - en->mk_total_at) + ns;
        en->mk_total_at = now;
    }
}

/* With mk_mu held: c's charge at `now`, and whether its masks wait
 * (policy_mask_defer against the last publication). A client that had no
 * running sequence then (one admitted in this step) counts as one more. */
static bool share_deferred_locked(const engine *en, const client *c, int64_t now, double *charge) {
    *charge = policy_decay(c->mk_charge, now - c->mk_at);
    double total = policy_decay(en->mk_total, now - en->mk_total_at);
    if (c->mk_pub == en->mk_pub)
        return policy_mask_defer(*charge, total, en->mk_n_active, en->mk_n_runnable - c->mk_runnable);
    return policy_mask_defer(*charge, total + *charge, en->mk_n_active + 1, en->mk_n_runnable);
}

/* With mk_mu held: the queued job to compute next (policy_pick_mask over
 * the queue), unlinked and RUNNING; NULL when every one waits for its
 * client's share. */
static mjob *pick_job_locked(engine *en) {
    int n = 0;
    for (mjob *p = en->mk_queue; p; p = p->next) n++;
    if (n > en->cap_mk_pick) {
        en->cap_mk_pick = MAX(n, 2 * en->cap_mk_pick);
        en->mk_pick = xrealloc(en->mk_pick, (size_t)en->cap_mk_pick * sizeof *en->mk_pick);
    }
    int64_t now = clock_ns();
    int i = 0;
    for (mjob *p = en->mk_queue; p; p = p->next, i++) {
        policy_mask_job *v = &en->mk_pick[i];
        v->deferred = share_deferred_locked(en, &en->clients[p->client], now, &v->c_charge);
        v->cost_ns = p->cost_ns;
        if (v->deferred) p->deferred = true;
    }
    int k = policy_pick_mask(en->mk_pick, n);
    if (k < 0) return NULL;
    mjob **at = &en->mk_queue;
    while (k-- > 0) at = &(*at)->next;
    mjob *j = *at;
    *at = j->next;
    return j;
}

/* CLOCK_MONOTONIC ms from now (the clock of mk_cv and cv). */
static struct timespec mono_in(int ms) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += ms * 1000000L;
    dl.tv_sec += dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    return dl;
}

/* The mask worker's loop ("Masks off the engine thread"). Jobs whose
 * clients are past their share wait (the worker idles, its CPU left to
 * the step) until a publication after a step or, at most 10 ms later, the
 * charges' decay lets one run. */
static void *mask_worker(void *arg) {
    engine *en = arg;
    pthread_mutex_lock(&en->mk_mu);
    for (;;) {
        while (!en->mk_stop && !en->mk_queue) pthread_cond_wait(&en->mk_cv, &en->mk_mu);
        if (en->mk_stop) break;
        mjob *j = pick_job_locked(en);
        if (!j) {
            struct timespec dl = mono_in(10);
            pthread_cond_timedwait(&en->mk_cv, &en->mk_mu, &dl);
            continue;
        }
        if (j->deferred) atomic_fetch_add(&en->mk_deferred_total, 1);
        j->deferred = false;
        j->next = NULL;
        j->state = MJ_RUNNING;
        pthread_mutex_unlock(&en->mk_mu);
        grammar *g = gmatch_grammar(j->gm);
        int64_t t0 = clock_ns();
        grammar_lock(g);
        int64_t c0 = thread_cpu_ns();
        int n_ok = gmatch_mask(j->gm, j->mask);
        mask_spin(en, c0);
        int64_t cpu = thread_cpu_ns() - c0;
        grammar_unlock(g);
        int64_t wall = clock_ns() - t0;
        pthread_mutex_lock(&en->mk_mu);
        if (j->orphan) {
            gmatch_free(j->gm);
            free(j->mask);
            free(j);
        } else {
            j->n_ok = n_ok;
            j->cpu_ns = cpu;
            j->wall_ns = wall;
            j->cost_ns += cpu;
            j->state = MJ_DONE;
            share_charge_locked(en, &en->clients[j->client], (double)cpu, clock_ns());
        }
        pthread_mutex_unlock(&en->mk_mu);
        pthread_mutex_lock(&en->mu);
        en->mask_gen++;
        pthread_cond_broadcast(&en->cv);
        pthread_mutex_unlock(&en->mu);
        pthread_mutex_lock(&en->mk_mu);
    }
    pthread_mutex_unlock(&en->mk_mu);
    return NULL;
}

/* Hands s's next mask to the worker (its matcher is at the state the next
 * token is sampled in). No-op without the worker, or when the grammar's
 * output is complete (no mask is needed). */
static void mask_launch(engine *en, seq *s) {
    if (!en->mk_on || !s->out.gm || s->spec.ds || gmatch_must_end(s->out.gm)) return;
    if (!s->out.mj) {
        s->out.mj = xcalloc(1, sizeof *s->out.mj);
        s->out.mj->mask = xmalloc(((size_t)en->m->cfg.n_vocab + 63) / 64 * sizeof *s->out.mj->mask);
    }
    mjob *j = s->out.mj;
    pthread_mutex_lock(&en->mk_mu);
    ASSERT(j->state == MJ_IDLE);
    j->gm = s->out.gm;
    j->client = s->r->client_slot;
    j->state = MJ_QUEUED;
    j->next = en->mk_queue;
    en->mk_queue = j;
    pthread_cond_signal(&en->mk_cv);
    pthread_mutex_unlock(&en->mk_mu);
}

/* Whether s may sample now. A constrained sequence needs its mask (when
 * the worker computes it) and its grammar's lock, which it then holds
 * (s->out.g_locked) until mask_gate_end. */
bool sched__mask_gate(engine *en, seq *s) {
    if (!s->out.gm) return true;
    if (s->out.mj) {
        pthread_mutex_lock(&en->mk_mu);
        int st = s->out.mj->state;
        pthread_mutex_unlock(&en->mk_mu);
        if (st == MJ_QUEUED || st == MJ_RUNNING) return false;
    }
    grammar *g = gmatch_grammar(s->out.gm);
    if (s->spec.ds)
        grammar_lock(g); /* its masks are the step's (drafts): at most one worker mask of the same grammar */
    else if (!grammar_trylock(g))
        return false;
    s->out.g_locked = g;
    return true;
}

/* Whether s's client is past its share of the mask worker now. */
static bool share_deferred(engine *en, const seq *s) {
    pthread_mutex_lock(&en->mk_mu);
    double charge;
    bool d = share_deferred_locked(en, seq_client(en, (seq *)s), clock_ns(), &charge);
    pthread_mutex_unlock(&en->mk_mu);
    return d;
}

/* After s sampled: its grammar's lock back, its next mask to the worker.
 * A speculating sequence's masks are the step's (a draft row's mask needs
 * the row before it sampled), so they are everyone's wait: once its client
 * is past its share it stops speculating, and its masks go to the worker,
 * where the share holds them back. */
void sched__mask_gate_end(engine *en, seq *s, req_finish why) {
    if (s->out.g_locked) grammar_unlock(s->out.g_locked);
    s->out.g_locked = NULL;
    if (why != REQ_RUNNING) return;
    if (en->mk_on && s->spec.ds && s->out.gm && share_deferred(en, s)) {
        sched__seq_spec_drop(s);
        en->cnt.mask_spec_dropped_total++;
    }
    mask_launch(en, s);
}

/* The opening forced run of s's grammar (s->out.gm_start), appended at
 * submission, or later when the mask worker held the grammar then: the
 * engine thread does not wait for it. Then its first mask to the worker. */
void sched__grammar_start(engine *en, seq *s) {
    grammar *g = gmatch_grammar(s->out.gm);
    if (!grammar_trylock(g)) return;
    sched__jump_forward(en, s);
    grammar_unlock(g);
    s->out.gm_start = false;
    mask_launch(en, s);
}

/* Sets the logits of the tokens the grammar refuses to -inf: with the
 * worker's mask when it computed one (mask_gate saw it in), else computed
 * here. Returns how many tokens are allowed. */
int sched__apply_mask(engine *en, seq *s, float *lg) {
    const uint64_t *mask = en->mask;
    int n_ok;
    int64_t wall, cpu;
    if (s->out.mj && s->out.mj->state == MJ_DONE) { /* (only the engine thread moves it from DONE) */
        mjob *j = s->out.mj;
        mask = j->mask;
        n_ok = j->n_ok;
        wall = j->wall_ns;
        cpu = j->cpu_ns;
        j->state = MJ_IDLE;
    } else {
        int64_t t0 = clock_ns(), c0 = thread_cpu_ns();
        n_ok = gmatch_mask(s->out.gm, en->mask);
        mask_spin(en, c0);
        wall = clock_ns() - t0;
        cpu = thread_cpu_ns() - c0; /* CPU, not wall: a descheduled engine thread is not the grammar's cost */
        if (en->mk_on) {
            pthread_mutex_lock(&en->mk_mu);
            share_charge_locked(en, seq_client(en, s), (double)cpu, clock_ns());
            pthread_mutex_unlock(&en->mk_mu);
        }
    }
    en->cnt.mask_ns_total += (uint64_t)wall;
    s->out.mask_ns += cpu;
    s->out.n_masks++;
    en->cnt.constrained_tokens_total++;
    int n_vocab = en->m->cfg.n_vocab;
    for (int w = 0; w * 64 < n_vocab; w++) {
        uint64_t m = mask[w];
        if (m == ~0ull) continue;
        int end = MIN(64, n_vocab - w * 64);
        for (int i = 0; i < end; i++)
            if (!(m >> i & 1)) lg[w * 64 + i] = -INFINITY;
    }
    return n_ok;
}

/* The grammar's masks run on the engine thread, inside the step every
 * running request waits for: a schema `pattern` or a GBNF grammar whose
 * masks take 100-300 ms per token stalled everyone's steps by that much
 * (16 such requests took an unrelated 16-token chat from 0.04 s to 72 s,
 * issue 26 finding 1). So a request's masks may take mask_budget_us of CPU
 * per constrained token on average, counted from ENGINE_MASK_GRACE tokens'
 * worth of allowance (a slow first mask, a DFA cache warming up); past it
 * the request fails with an error that says so (the server answers 400:
 * the grammar is the request's), and the others lose at most that
 * allowance plus one mask to it. True when over (s->fail written). */
bool sched__mask_over_budget(engine *en, seq *s) {
    int64_t budget = (int64_t)en->o.mask_budget_us * 1000;
    if (budget <= 0 || s->out.mask_ns <= budget * (s->out.n_masks + ENGINE_MASK_GRACE)) return false;
    snprintf(s->fail, sizeof s->fail,
             REQ_ERR_MASK_BUDGET " %.1f ms per token over %d tokens (budget %.1f ms per token, --grammar-mask-budget): "
             "a simpler schema or grammar (fewer nested repetitions, shorter patterns) fits",
             (double)s->out.mask_ns / 1e6 / s->out.n_masks, s->out.n_masks, (double)budget / 1e6);
    log_info("engine: request %llu failed: %s", (unsigned long long)s->order, s->fail);
    en->cnt.mask_budget_failed_total++;
    return true;
}

/* Where `what` first occurs in w[0, n), or NULL (what may be NULL). */
static char *find_in(char *w, int n, const char *what) {
    return what && *what ? memmem(w, (size_t)n, what, strlen(what)) : NULL;
}

/* A lazy grammar starts at its trigger: scans the newest bytes of the
 * output for it and, once found, starts the matcher on the bytes after it.
 * A trigger between trigger_skip_open and trigger_skip_close (reasoning) does
 * not count, so engine and output parser agree on what is a call. */
void sched__grammar_watch(engine *en, seq *s, int32_t id) {
    req *r = s->r;
    if (!r->grammar || s->out.gm || s->out.gm_failed) return;
    char piece[512];
    int n = en->o.piece(en->o.tok_ctx, id, piece, (int)sizeof piece);
    if (n <= 0) return;
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    /* keep the bytes before this piece that a marker may span */
    int span = (int)strlen(r->grammar_trigger);
    if (r->trigger_skip_open) span = MAX(span, (int)MAX(strlen(r->trigger_skip_open), strlen(r->trigger_skip_close)));
    int keep = MIN(s->out.n_trig, span - 1);
    char *w = xmalloc((size_t)(keep + n) + 1);
    if (keep) memcpy(w, s->out.trig + s->out.n_trig - keep, (size_t)keep);
    memcpy(w + keep, piece, (size_t)n);
    free(s->out.trig);
    s->out.trig = w;
    s->out.n_trig = keep + n;
    for (;;) {
        if (s->out.in_skip) {
            char *end = find_in(w, s->out.n_trig, r->trigger_skip_close);
            if (!end) return;
            end += strlen(r->trigger_skip_close);
            s->out.in_skip = false;
            s->out.n_trig -= (int)(end - w);
            memmove(w, end, (size_t)s->out.n_trig);
            continue;
        }
        char *hit = find_in(w, s->out.n_trig, r->grammar_trigger);
        char *open = find_in(w, s->out.n_trig, r->trigger_skip_open);
        if (open && (!hit || open < hit)) {
            char *after = open + strlen(r->trigger_skip_open);
            s->out.in_skip = true;
            s->out.n_trig -= (int)(after - w);
            memmove(w, after, (size_t)s->out.n_trig);
            continue;
        }
        if (!hit) return;
        s->out.gm = gmatch_new(r->grammar, en->o.gvocab);
        /* (the worker may hold it for another sequence: at most one mask,
         * once per request) */
        grammar_lock(r->grammar);
        s->out.g_locked = r->grammar;
        size_t tlen = strlen(r->grammar_trigger);
        size_t rest = (size_t)(w + s->out.n_trig - (hit + tlen));
        if (rest && gmatch_accept_bytes(s->out.gm, hit + tlen, rest) < 0) {
            /* The token that completed the trigger went on with text the
             * grammar refuses: the output cannot be constrained any more. */
            log_debug("engine: request %llu: the text after the trigger does not fit the grammar",
                      (unsigned long long)s->order);
            gmatch_free(s->out.gm);
            s->out.gm = NULL;
            s->out.gm_failed = true;
        }
        return;
    }
}

/* Jump-forward: where the grammar admits a single continuation, its tokens
 * are appended at once (they run through the model together in the next
 * step, like a prompt chunk) instead of being sampled one per step. The run
 * is tokenized as the tokenizer would have written it; its last token is left
 * to the model (it may merge with what follows) unless the output ends
 * there. Not for requests that want logprobs: forced tokens have none. */
void sched__jump_forward(engine *en, seq *s) {
    req *r = s->r;
    if (!s->out.gm || r->no_jump_forward || r->n_logprobs >= 0) return;
    int n = gmatch_forced(s->out.gm, en->forced, ENGINE_FORCED_MAX);
    if (n <= 0) return;
    int nt = en->o.tokenize(en->o.tok_ctx, en->forced, (size_t)n, en->forced_ids, ENGINE_FORCED_MAX);
    if (nt <= 0) return;
    bool whole = nt <= ENGINE_FORCED_MAX;
    if (!whole) nt = ENGINE_FORCED_MAX;
    bool ends = false;
    if (whole) {
        gmatch *probe = gmatch_clone(s->out.gm);
        ends = gmatch_accept_bytes(probe, en->forced, (size_t)n) == 0 && gmatch_must_end(probe);
        gmatch_free(probe);
    }
    int keep = ends ? nt : nt - 1;
    for (int i = 0; i < keep; i++) {
        if (s->tok.n_generated >= r->max_tokens || s->tok.n >= en->n_ctx) break;
        if (gmatch_accept(s->out.gm, en->forced_ids[i]) < 0) break; /* a token split the grammar does not take */
        req_token t = {.id = en->forced_ids[i]};
        sched__push_generated(en, s, &t);
        r->n_forced++;
        en->cnt.forced_tokens_total++;
    }
}

void sched__mask_share_charge(engine *en, int n_bs, int n_tok, int64_t fw_ns) {
    if (!en->mk_on || n_tok <= 0) return;
    int64_t now = clock_ns();
    pthread_mutex_lock(&en->mk_mu);
    for (int j = 0; j < n_bs; j++)
        share_charge_locked(en, seq_client(en, en->b_owner[j]), (double)fw_ns * en->b_chunk[j] / n_tok, now);
    pthread_mutex_unlock(&en->mk_mu);
}

void sched__mask_share_publish(engine *en) {
    if (!en->mk_on) return;
    int64_t now = clock_ns();
    pthread_mutex_lock(&en->mk_mu);
    uint64_t pub = ++en->mk_pub;
    double total = 0;
    int n_active = 0, n_runnable = 0;
    for (int i = 0; i < en->running.n; i++) {
        seq *s = en->running.v[i];
        client *c = seq_client(en, s);
        if (c->mk_pub != pub) {
            c->mk_pub = pub;
            c->mk_runnable = 0;
            c->mk_charge = policy_decay(c->mk_charge, now - c->mk_at);
            c->mk_at = now;
            total += c->mk_charge;
            n_active++;
        }
        bool waits = s->out.held_ok || (s->out.mj && (s->out.mj->state == MJ_QUEUED || s->out.mj->state == MJ_RUNNING));
        if (!waits) c->mk_runnable++, n_runnable++;
    }
    en->mk_total = total;
    en->mk_total_at = now;
    en->mk_n_active = n_active;
    en->mk_n_runnable = n_runnable;
    if (en->mk_queue) pthread_cond_signal(&en->mk_cv);
    pthread_mutex_unlock(&en->mk_mu);
}

/* Sits s out of sampling until its mask is in: keeps its logits row. */
void sched__seq_hold(engine *en, seq *s, const float *row) {
    size_t n_vocab = (size_t)en->m->cfg.n_vocab;
    if (!s->out.held) s->out.held = xmalloc(n_vocab * sizeof *s->out.held);
    memcpy(s->out.held, row, n_vocab * sizeof *row);
    s->out.held_ok = true;
    en->n_held++;
}

/* After the engine thread: its sequences have ended, so the queue is empty
 * and a running orphan is freed by the worker before it sees mk_stop. */
bool sched__mask_worker_start(engine *en) {
    if (pthread_create(&en->mk_thread, NULL, mask_worker, en) != 0) return false;
    en->mk_on = true;
    return true;
}

void sched__mask_worker_stop(engine *en) {
    if (!en->mk_on) return;
    pthread_mutex_lock(&en->mk_mu);
    en->mk_stop = true;
    pthread_cond_broadcast(&en->mk_cv);
    pthread_mutex_unlock(&en->mk_mu);
    pthread_join(en->mk_thread, NULL);
    en->mk_on = false;
}
