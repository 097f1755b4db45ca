/*
 * test_engine_fair.c — fairness between clients in the engine (engine.c,
 * "Fair admission"; issue 26 finding 7), without HTTP.
 *
 * Each check is about order and counts, not time: which requests got their
 * first token before which (req.t_first_ns, one clock), how many sequences
 * yielded, which submissions were refused. Under first-come-first-served
 * (the engine before this change) every check below fails: the second
 * client's first request started after all 36 requests the flooder had
 * queued ahead of it, the interactive request after every batch request,
 * and no client had a limit of its own.
 *
 * Reference for the outputs: each prompt run alone on the same engine;
 * preempted sequences must still give exactly those tokens (greedy).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "sched/engine.h"
#include "sched/policy.h"
#include "sched/req.h"
#include "test.h"

enum { N_FAM = 3, FAM_LEN = 20, A_GEN = 40, B_GEN = 4, N_A = 40, N_B = 4 };

static int32_t fam[N_FAM][FAM_LEN];
static int32_t ref[N_FAM][A_GEN];

static req *mk(int f, int max_tokens, uint64_t client, int priority) {
    int32_t *p = xmalloc(FAM_LEN * sizeof *p);
    memcpy(p, fam[f], sizeof fam[f]);
    req *r = req_new(p, FAM_LEN);
    r->max_tokens = max_tokens;
    r->ignore_eos = true;
    r->sp.temperature = 0;
    r->client = client;
    r->priority = priority;
    return r;
}

/* Waits for the end; returns the tokens generated (up to cap copied). */
static int finish(req *r, int32_t *out, int cap, req_finish *f) {
    int n = 0;
    *f = REQ_RUNNING;
    for (int spins = 0; spins < 3000 && *f == REQ_RUNNING; spins++) n = req_wait(r, n, 100, f);
    n = req_wait(r, 0, 0, f);
    req_token *t = xmalloc((size_t)(n ? n : 1) * sizeof *t);
    req_copy_tokens(r, 0, n, t);
    for (int i = 0; i < n && i < cap; i++) out[i] = t[i].id;
    free(t);
    return n;
}

static void wait_first(req *r) {
    req_finish f = REQ_RUNNING;
    for (int spins = 0; spins < 3000 && f == REQ_RUNNING && req_wait(r, 0, 100, &f) == 0;) spins++;
}

static engine *new_engine(const model *m, int max_running, int client_max_queued) {
    engine_opts o = engine_defaults();
    o.n_threads = 1;
    o.max_running = max_running;
    o.kv_mem_bytes = model_kv_block_bytes(m, 16) * 128;
    o.step_delay_us = 2000; /* submissions made back to back land in one step */
    o.client_max_queued = client_max_queued;
    o.check = true;
    engine *en = NULL;
    err_t e = {0};
    CHECK_MSG(engine_new(m, &o, &en, &e) == 0, "engine_new: %s", e.msg);
    return en;
}

/* One client (A) queues 40 long requests on 4 slots; then another (B)
 * sends 4 short ones. B's first request must start before any of A's
 * queued ones (A above its share of 2 slots yields one), all of B's before
 * at most 2 more of A's start, and every request of A still completes with
 * the reference tokens. */
static void check_flood(const model *m) {
    engine *en = new_engine(m, 4, 0);
    if (!en) return;
    err_t e = {0};
    req *a[N_A], *b[N_B];
    for (int i = 0; i < N_A; i++) {
        a[i] = mk(i % N_FAM, A_GEN, 0xA, 0);
        CHECK(engine_submit(en, a[i], &e) == 0);
    }
    for (int i = 0; i < 4; i++) wait_first(a[i]); /* every slot is A's */
    int64_t t_b = clock_ns();
    for (int i = 0; i < N_B; i++) {
        b[i] = mk(i % N_FAM, B_GEN, 0xB, 0);
        CHECK(engine_submit(en, b[i], &e) == 0);
    }
    int32_t out[A_GEN];
    int64_t tb_first = INT64_MAX, tb_last = 0;
    for (int i = 0; i < N_B; i++) {
        req_finish f;
        int n = finish(b[i], out, A_GEN, &f);
        CHECK_EQ_INT(f, REQ_FINISH_LENGTH);
        CHECK_EQ_INT(n, B_GEN);
        CHECK_MSG(n == B_GEN && !memcmp(out, ref[i % N_FAM], B_GEN * sizeof *out), "B's request %d: wrong tokens", i);
        tb_first = MIN(tb_first, b[i]->t_first_ns);
        tb_last = MAX(tb_last, b[i]->t_first_ns);
    }
    int n_a_before_b1 = 0, n_a_before_b_last = 0, n_wrong = 0;
    for (int i = 0; i < N_A; i++) {
        req_finish f;
        int n = finish(a[i], out, A_GEN, &f);
        if (f != REQ_FINISH_LENGTH || n != A_GEN || memcmp(out, ref[i % N_FAM], A_GEN * sizeof *out)) n_wrong++;
        int64_t t = a[i]->t_first_ns;
        if (t > t_b && t < tb_first) n_a_before_b1++;
        if (t > t_b && t < tb_last) n_a_before_b_last++;
    }
    engine_stats st;
    engine_get_stats(en, &st);
    printf("  flood: A started %d requests before B's first, %d before B's last; %llu fair preemptions\n",
           n_a_before_b1, n_a_before_b_last, (unsigned long long)st.fair_preemptions_total);
    CHECK_MSG(n_a_before_b1 == 0, "%d of A's queued requests started before B's first (FCFS: 36)", n_a_before_b1);
    CHECK_MSG(n_a_before_b_last <= 2, "%d of A's queued requests started before B's last", n_a_before_b_last);
    CHECK_MSG(st.fair_preemptions_total >= 1, "no sequence of A yielded (%llu)",
              (unsigned long long)st.fair_preemptions_total);
    CHECK_MSG(n_wrong == 0, "%d of A's %d requests did not give the reference tokens", n_wrong, N_A);
    CHECK_EQ_INT(st.n_running, 0);
    CHECK_EQ_INT(st.n_waiting, 0);
    CHECK_EQ_INT(st.n_clients, 0);
    for (int i = 0; i < N_A; i++) req_unref(a[i]);
    for (int i = 0; i < N_B; i++) req_unref(b[i]);
    engine_free(en);
}

/* One client: 8 batch requests (priority 1) on 4 slots, then one
 * interactive (priority 0): it starts before the 4 batch requests still
 * queued, a batch one yields its slot. */
static void check_priority(const model *m) {
    engine *en = new_engine(m, 4, 0);
    if (!en) return;
    err_t e = {0};
    req *bt[8];
    for (int i = 0; i < 8; i++) {
        bt[i] = mk(i % N_FAM, A_GEN, 0xC, 1);
        CHECK(engine_submit(en, bt[i], &e) == 0);
    }
    for (int i = 0; i < 4; i++) wait_first(bt[i]);
    req *in = mk(1, B_GEN, 0xC, 0);
    CHECK(engine_submit(en, in, &e) == 0);
    int32_t out[A_GEN];
    req_finish f;
    CHECK_EQ_INT(finish(in, out, A_GEN, &f), B_GEN);
    int n_before = 0;
    for (int i = 0; i < 8; i++) {
        finish(bt[i], out, A_GEN, &f);
        CHECK_EQ_INT(f, REQ_FINISH_LENGTH);
        if (i >= 4 && bt[i]->t_first_ns < in->t_first_ns) n_before++;
    }
    engine_stats st;
    engine_get_stats(en, &st);
    CHECK_MSG(n_before == 0, "%d queued batch requests started before the interactive one", n_before);
    CHECK_MSG(st.fair_preemptions_total >= 1, "no batch sequence yielded to the interactive one");
    req_unref(in);
    for (int i = 0; i < 8; i++) req_unref(bt[i]);
    engine_free(en);
}

/* client_max_queued 3, one slot: a client's submissions are refused once 3
 * of its requests wait (the message names the limit), another client's are
 * still taken, and the refusals are counted. */
static void check_client_limit(const model *m) {
    engine *en = new_engine(m, 1, 3);
    if (!en) return;
    err_t e = {0};
    req *a[8];
    bool taken[8] = {0};
    int n_ok = 0, n_refused = 0;
    for (int i = 0; i < 8; i++) {
        a[i] = mk(i % N_FAM, A_GEN, 0xD, 0);
        e.msg[0] = 0;
        int rc = engine_submit(en, a[i], &e);
        if (rc == 0) {
            n_ok++;
            taken[i] = true;
        } else {
            n_refused++;
            CHECK_EQ_INT(rc, ERR_RANGE);
            CHECK_MSG(strstr(e.msg, "client-max-queued 3") != NULL, "message: %s", e.msg);
        }
    }
    /* 3 waiting, and at most the one running beside them */
    CHECK_MSG(n_ok == 3 || n_ok == 4, "%d of 8 submissions taken", n_ok);
    req *other = mk(0, B_GEN, 0xE, 0);
    CHECK_MSG(engine_submit(en, other, &e) == 0, "another client refused: %s", e.msg);
    engine_stats st;
    engine_get_stats(en, &st);
    CHECK_EQ_INT(st.client_refused_total, (uint64_t)n_refused);
    CHECK_EQ_INT(st.n_clients, 2);
    int32_t out[A_GEN];
    req_finish f;
    CHECK_EQ_INT(finish(other, out, A_GEN, &f), B_GEN);
    for (int i = 0; i < 8; i++) {
        req_cancel(a[i]);
        if (taken[i]) finish(a[i], out, A_GEN, &f);
        req_unref(a[i]);
    }
    req_unref(other);
    engine_free(en);
}

/* The pool runs out (40 blocks of 16 tokens; 4 sequences of client A and
 * then one of B, 170 tokens each, want 55): the sequence that gives its
 * blocks back is the newest of the client holding the most (A), never B's,
 * the newest overall (under "newest overall" B's is preempted again and
 * again and finishes last). Every output is the reference.
 *
 * Step-exact (plan_hook, no timing): B's request is submitted from the
 * hook in the first step that runs all four of A's, so it arrives at the
 * next step, the newest; the finishing order is the order of the steps
 * each request last ran in. Asserted on the request's own preemption
 * count, and on B finishing before the last of A's: the order among A's
 * also depends on whether a preempted A sequence finds its blocks still
 * cached when it comes back (CI, 2026-11-27: B finished 4th of 5 with the
 * right victims every time). */
typedef struct kvv_ctx {
    engine *en;
    req *rs[5];
    bool b_sent;
    uint64_t last[5]; /* the last step each request ran in */
} kvv_ctx;

static void kvv_hook(void *ctx, uint64_t step, const engine_plan_row *rows, int n) {
    kvv_ctx *c = ctx;
    int n_a = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < 5; i++)
            if (rows[j].r == c->rs[i]) c->last[i] = step, n_a += i < 4;
    if (!c->b_sent && n_a == 4) {
        err_t e = {0};
        CHECK(engine_submit(c->en, c->rs[4], &e) == 0);
        c->b_sent = true;
    }
}

static void check_kv_victim(const model *m) {
    static kvv_ctx c;
    memset(&c, 0, sizeof c);
    engine_opts o = engine_defaults();
    o.n_threads = 1;
    o.max_running = 8;
    o.kv_mem_bytes = model_kv_block_bytes(m, 16) * 40;
    o.check = true;
    o.plan_hook = kvv_hook;
    o.plan_hook_ctx = &c;
    err_t e = {0};
    for (int i = 0; i < 5; i++) c.rs[i] = mk(i % N_FAM, 150, i < 4 ? 0xA : 0xB, 0);
    CHECK_MSG(engine_new(m, &o, &c.en, &e) == 0, "engine_new: %s", e.msg);
    if (!c.en) return;
    for (int i = 0; i < 4; i++) CHECK(engine_submit(c.en, c.rs[i], &e) == 0);
    int32_t out[A_GEN];
    int n_ok = 0;
    for (int i = 0; i < 5; i++) {
        req_finish f;
        if (i == 4 && !c.b_sent) break; /* (checked below) */
        n_ok += finish(c.rs[i], out, A_GEN, &f) == 150 && f == REQ_FINISH_LENGTH &&
                !memcmp(out, ref[i % N_FAM], A_GEN * sizeof *out);
    }
    engine_stats st;
    engine_get_stats(c.en, &st);
    engine_free(c.en);
    int b_pos = 0; /* requests that ran last after B's */
    for (int i = 0; i < 4; i++) b_pos += c.last[i] < c.last[4];
    printf("  kv victim: B finished %d of 5, %llu preemptions (A's: %d %d %d %d, B's: %d)\n", b_pos + 1,
           (unsigned long long)st.preemptions_total, c.rs[0]->n_preemptions, c.rs[1]->n_preemptions,
           c.rs[2]->n_preemptions, c.rs[3]->n_preemptions, c.rs[4]->n_preemptions);
    CHECK_MSG(c.b_sent, "A's four never ran in one step");
    CHECK_EQ_INT(n_ok, 5);
    CHECK_MSG(st.preemptions_total > 0, "the pool never ran out");
    CHECK_MSG(c.rs[4]->n_preemptions == 0, "B's request (the newest) was preempted %d times", c.rs[4]->n_preemptions);
    CHECK_MSG(b_pos <= 3, "B's request finished %d of 5", b_pos + 1);
    for (int i = 0; i < 5; i++) req_unref(c.rs[i]);
}

/* An engine of 32 slots and n_blocks blocks whose plan_hook is hook (the
 * step-exact checks below). */
static engine *hook_engine(const model *m, int max_batch_tokens, int n_blocks,
                           void (*hook)(void *, uint64_t, const engine_plan_row *, int), void *ctx,
                           bool no_decode_share) {
    engine_opts o = engine_defaults();
    o.no_decode_share = no_decode_share;
    o.n_threads = 1;
    o.max_running = 32;
    o.max_batch_tokens = max_batch_tokens;
    o.kv_mem_bytes = model_kv_block_bytes(m, 16) * (size_t)n_blocks;
    o.plan_hook = hook;
    o.plan_hook_ctx = ctx;
    engine *en = NULL;
    err_t e = {0};
    CHECK_MSG(engine_new(m, &o, &en, &e) == 0, "engine_new: %s", e.msg);
    return en;
}

/* Prefill order between clients, step by step (engine.c, "Prefill order";
 * engine_opts.plan_hook): no timing. Client A submits one 400-token
 * prompt, and 11 more at the first step; at the fourth step client B
 * submits 2 of the same length (the hook submits: each arrives at the next
 * step exactly). 128 tokens a step, max_tokens 1: every step is prefill.
 * From B's arrival until its last prompt is computed, B must get at least
 * 40% of the prefill tokens (fair: half) and finish within 2 x 800 / 128
 * steps + 2. Shortest-remaining-first (before) gave A's further-along
 * prompts the budget and B chunks mostly by the starvation rule: 16% of
 * the tokens, done after 42 steps. A alone afterwards gets the whole budget in at least 4 steps
 * of 5 (work conserving: a prompt's last chunk may leave some), and every
 * prompt gets its first token. With `many`, the late prompts are 3 of 3
 * clients (B, C, D: issue 26's setting of several clients beside one
 * that floods): while they prefill each must get at least 20% of the
 * tokens (fair: a quarter) and A at most 30%. */
enum { PF_LEN = 400, PF_NA = 12, PF_NB_MAX = 3, PF_BUDGET = 128 };
typedef struct pf_ctx {
    engine *en;
    req *a[PF_NA], *b[PF_NB_MAX];
    int n_b;
    uint64_t step0, b_arrive, b_done;
    long tok_a, tok_b, tok_bi[PF_NB_MAX]; /* prefill tokens from B's arrival until B is done */
    long a_alone_steps, a_alone_full; /* after B: steps, of them with a full budget */
    int b_left;         /* B's prompt tokens not yet scheduled                */
} pf_ctx;

static void pf_hook(void *ctx, uint64_t step, const engine_plan_row *rows, int n) {
    pf_ctx *c = ctx;
    err_t e = {0};
    if (!c->step0) {
        c->step0 = step;
        for (int i = 1; i < PF_NA; i++) CHECK(engine_submit(c->en, c->a[i], &e) == 0);
    } else if (step == c->step0 + 3) {
        for (int i = 0; i < c->n_b; i++) CHECK(engine_submit(c->en, c->b[i], &e) == 0);
        c->b_arrive = step + 1;
    }
    long ta = 0, tb = 0, tbi[PF_NB_MAX] = {0};
    for (int j = 0; j < n; j++) {
        if (!rows[j].prefill) continue;
        if (rows[j].r->client == 0xA) {
            ta += rows[j].n_tokens;
            continue;
        }
        tb += rows[j].n_tokens;
        for (int i = 0; i < c->n_b; i++)
            if (rows[j].r == c->b[i]) tbi[i] += rows[j].n_tokens;
    }
    if (c->b_arrive && step >= c->b_arrive && !c->b_done) {
        c->tok_a += ta;
        c->tok_b += tb;
        for (int i = 0; i < c->n_b; i++) c->tok_bi[i] += tbi[i];
        c->b_left -= (int)tb;
        /* every prompt begins with token 1: each of B's may find that row
         * in another prompt's block and copy it (docs/kv-cache.md, "A
         * partial last block"), so up to n_b tokens are never scheduled */
        if (c->b_left <= c->n_b) c->b_done = step;
    } else if (c->b_done && ta > 0) {
        c->a_alone_steps++;
        c->a_alone_full += ta >= PF_BUDGET;
    }
}

static req *pf_req(uint64_t client, uint64_t *rs, int n_vocab) {
    int32_t *p = xmalloc(PF_LEN * sizeof *p);
    for (int i = 0; i < PF_LEN; i++) {
        *rs ^= *rs << 13, *rs ^= *rs >> 7, *rs ^= *rs << 17;
        p[i] = i == 0 ? 1 : (int32_t)(3 + *rs % (uint64_t)(n_vocab - 3));
    }
    req *r = req_new(p, PF_LEN);
    r->max_tokens = 1;
    r->ignore_eos = true;
    r->sp.temperature = 0;
    r->client = client;
    return r;
}

static void check_prefill_share(const model *m, bool many) {
    static pf_ctx c;
    memset(&c, 0, sizeof c);
    c.n_b = many ? 3 : 2;
    uint64_t rs = 0x9f3ull;
    for (int i = 0; i < PF_NA; i++) c.a[i] = pf_req(0xA, &rs, m->cfg.n_vocab);
    for (int i = 0; i < c.n_b; i++) c.b[i] = pf_req(many ? 0xB0 + (uint64_t)i : 0xB, &rs, m->cfg.n_vocab);
    c.b_left = c.n_b * PF_LEN;
    c.en = hook_engine(m, PF_BUDGET, 512, pf_hook, &c, false);
    if (!c.en) return;
    err_t e = {0};
    CHECK(engine_submit(c.en, c.a[0], &e) == 0);
    int32_t out[1];
    int n_ok = 0;
    for (int i = 0; i < PF_NA + c.n_b; i++) {
        req *r = i < PF_NA ? c.a[i] : c.b[i - PF_NA];
        req_finish f;
        n_ok += finish(r, out, 1, &f) == 1 && f == REQ_FINISH_LENGTH;
    }
    engine_free(c.en);
    long tot = c.tok_a + c.tok_b;
    double share = tot ? (double)c.tok_b / (double)tot : 0;
    long steps = c.b_done ? (long)(c.b_done - c.b_arrive + 1) : -1;
    printf("  prefill share%s: %s %ld of %ld prefill tokens (%.0f%%) in %ld steps after their arrival; A alone after: "
           "%ld of %ld steps with the whole budget\n",
           many ? ", 4 clients" : "", many ? "B, C, D" : "B", c.tok_b, tot, 100 * share, steps, c.a_alone_full,
           c.a_alone_steps);
    CHECK_EQ_INT(n_ok, PF_NA + c.n_b);
    CHECK_MSG(c.b_done, "B's prompts were never computed");
    if (many) {
        for (int i = 0; i < c.n_b; i++)
            CHECK_MSG(tot && c.tok_bi[i] * 5 >= tot, "client %d of the late ones got %ld of %ld prefill tokens (fair: "
                      "a quarter)", i, c.tok_bi[i], tot);
        CHECK_MSG(c.tok_a * 10 <= tot * 3, "A got %ld of %ld prefill tokens beside 3 clients (fair: a quarter)",
                  c.tok_a, tot);
    } else {
        CHECK_MSG(share >= 0.4, "B got %.0f%% of the prefill tokens while both prefilled (fair: 50%%)", 100 * share);
    }
    CHECK_MSG(steps > 0 && steps <= 2 * c.n_b * PF_LEN / PF_BUDGET + 2, "B's prompts took %ld steps", steps);
    CHECK_MSG(c.a_alone_steps > 0 && c.a_alone_full * 5 >= c.a_alone_steps * 4,
              "A alone used the whole budget in %ld of %ld steps", c.a_alone_full, c.a_alone_steps);
    for (int i = 0; i < PF_NA; i++) req_unref(c.a[i]);
    for (int i = 0; i < c.n_b; i++) req_unref(c.b[i]);
}

/* Decode share between clients, step by step (engine.c decode_share;
 * plan_hook, no timing). Client A runs 16 greedy generations of 40 tokens;
 * once all 16 decode, client B submits 6 of 12 tokens (their prompts are
 * cached: each is one row a step from its first, which gives its first
 * token). In every step with both clients in it, A may have no
 * more tokens than B (or 2), and no more than 2 in the steps that give B a
 * first token; before, A kept its 16 rows in every step (B's steps 2.2x as
 * many tokens as alone, 3.7x in its first-token step). A alone has all
 * 16 rows a step (work conserving: B is sent after 3 such steps); A's
 * sequences take turns (none sits out more than 8 steps in a row: 16 rows
 * in turns of 6, or of 2 in a first-token step); every output is the
 * reference's (sitting out changes no token). */
enum { DS_NA = 16, DS_NB = 6, DS_B_GEN = 12 };
typedef struct ds_ctx {
    engine *en;
    req *a[DS_NA], *b[DS_NB];
    bool b_sent;
    uint64_t step0;
    long both_steps, over_share, b_rows, a_rows_both;
    long first_steps, first_over; /* steps with a first token of B's; of them, A over 2 tokens */
    bool b_seen[DS_NB];
    long a_alone_steps;
    uint64_t a_last[DS_NA]; /* the last step each of A's sequences ran */
    long a_gap_max;         /* steps in a row one of A's decoding sequences sat out, while B ran */
} ds_ctx;

static void ds_hook(void *ctx, uint64_t step, const engine_plan_row *rows, int n) {
    ds_ctx *c = ctx;
    err_t e = {0};
    if (!c->step0) { /* the rest of A's arrive together at the next step */
        c->step0 = step;
        for (int i = 1; i < DS_NA; i++) CHECK(engine_submit(c->en, c->a[i], &e) == 0);
    }
    long ta = 0, tb = 0, a_dec = 0, b_pre = 0;
    for (int j = 0; j < n; j++) {
        if (rows[j].r->client != 0xB) {
            ta += rows[j].n_tokens, a_dec += !rows[j].prefill;
            continue;
        }
        tb += rows[j].n_tokens;
        for (int i = 0; i < DS_NB; i++) /* B's first step: its prompt's end, its first token */
            if (rows[j].r == c->b[i] && !c->b_seen[i]) c->b_seen[i] = true, b_pre++;
    }
    for (int j = 0; j < n; j++) /* the steps each of A's sat out before this one */
        for (int i = 0; i < DS_NA; i++)
            if (rows[j].r == c->a[i]) {
                if (tb > 0 && c->a_last[i] && (long)(step - c->a_last[i] - 1) > c->a_gap_max)
                    c->a_gap_max = (long)(step - c->a_last[i] - 1);
                c->a_last[i] = step;
            }
    if (tb > 0 && ta > 0) {
        c->both_steps++;
        c->b_rows += tb;
        c->a_rows_both += ta;
        if (ta > (tb > 2 ? tb : 2)) c->over_share++;
        if (b_pre) c->first_steps++, c->first_over += ta > 2;
    } else if (!c->b_sent && a_dec == DS_NA) {
        c->a_alone_steps++;
    }
    if (!c->b_sent && c->a_alone_steps >= 3) {
        for (int i = 0; i < DS_NB; i++) CHECK(engine_submit(c->en, c->b[i], &e) == 0);
        c->b_sent = true;
    }
}

/* Waits for the n generations of v (family j % N_FAM each, want tokens);
 * returns how many gave their reference's tokens. */
static int finish_ref(req *const *v, int n, int want) {
    int32_t out[A_GEN];
    int n_ok = 0;
    for (int j = 0; j < n; j++) {
        req_finish f;
        memset(out, 0, sizeof out);
        n_ok += finish(v[j], out, A_GEN, &f) == want && f == REQ_FINISH_LENGTH &&
                !memcmp(out, ref[j % N_FAM], (size_t)want * sizeof *out);
    }
    return n_ok;
}

static void check_decode_share(const model *m, bool off) {
    static ds_ctx c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < DS_NA; i++) c.a[i] = mk(i % N_FAM, A_GEN, 0xA, 0);
    for (int i = 0; i < DS_NB; i++) c.b[i] = mk(i % N_FAM, DS_B_GEN, 0xB, 0);
    c.en = hook_engine(m, engine_defaults().max_batch_tokens, 256, ds_hook, &c, off);
    if (!c.en) return;
    err_t e = {0};
    CHECK(engine_submit(c.en, c.a[0], &e) == 0);
    int n_ok = finish_ref(c.a, DS_NA, A_GEN);
    if (c.b_sent) n_ok += finish_ref(c.b, DS_NB, DS_B_GEN); /* (else checked below) */
    engine_stats st;
    engine_get_stats(c.en, &st);
    engine_free(c.en);
    printf("  decode share%s: %ld steps with both clients: A %.1f tokens a step, B %.1f; %ld over B's; A alone "
           "%ld steps with its 16 rows; longest sit-out %ld steps; %llu rows deferred; %ld of %ld first-token steps "
           "with A over 2\n",
           off ? " off (--no-fair-decode)" : "", c.both_steps, c.both_steps ? (double)c.a_rows_both / (double)c.both_steps : 0,
           c.both_steps ? (double)c.b_rows / (double)c.both_steps : 0, c.over_share, c.a_alone_steps, c.a_gap_max, (unsigned long long)st.decode_deferred_total,
           c.first_over, c.first_steps);
    CHECK_EQ_INT(n_ok, DS_NA + DS_NB);
    /* B is sent once A alone had its 16 rows in 3 steps (work conserving) */
    CHECK_MSG(c.b_sent, "A alone never had its 16 rows in 3 steps");
    CHECK_MSG(c.both_steps >= DS_B_GEN, "B ran beside A in %ld steps", c.both_steps);
    if (off) { /* the rule off: A keeps every row beside B, nothing deferred */
        CHECK_MSG(c.over_share == c.both_steps, "rule off: A had no more tokens than B in %ld of %ld steps",
                  c.both_steps - c.over_share, c.both_steps);
        CHECK_EQ_INT((long)st.decode_deferred_total, 0);
        goto done;
    }
    CHECK_MSG(c.over_share == 0, "A had more tokens than B in %ld of %ld steps", c.over_share, c.both_steps);
    CHECK_MSG(c.first_steps > 0 && c.first_over == 0, "A had more than 2 tokens in %ld of B's %ld first-token steps",
              c.first_over, c.first_steps);
    CHECK_MSG(c.a_gap_max <= 8, "one of A's sequences sat out %ld steps in a row", c.a_gap_max);
    CHECK(st.decode_deferred_total > 0);
done:
    for (int i = 0; i < DS_NA; i++) req_unref(c.a[i]);
    for (int i = 0; i < DS_NB; i++) req_unref(c.b[i]);
}

/* The decode share among several clients (issue 26's benchmark with one
 * key per agent), step by step: client A runs 16 generations; once they
 * all decode, 6 clients of one generation each arrive (cached prompts: one
 * row a step), and 3 steps later client P's 100-token prompt, whose first
 * chunk is the widest thing in its step. In every step with another client
 * A keeps at most 2 tokens (the share's minimum: every other client brings
 * at most one row, or a first token) — also in P's first-token step, where
 * the rule cut only the widest client (P, whose chunk cannot sit out) and
 * A ran its 16 rows. Every output of A and of the 6 is the reference's. */
enum { DM_NB = 6, DM_P_LEN = 100 };
typedef struct dm_ctx {
    engine *en;
    req *a[DS_NA], *b[DM_NB], *p;
    uint64_t step0, b_step;
    long a_alone_steps, shared_steps, a_over, a_rows, other_rows;
    long p_first_a;        /* A's tokens in P's first-token step (-1: none seen) */
} dm_ctx;

static void dm_hook(void *ctx, uint64_t step, const engine_plan_row *rows, int n) {
    dm_ctx *c = ctx;
    err_t e = {0};
    if (!c->step0) {
        c->step0 = step;
        for (int i = 1; i < DS_NA; i++) CHECK(engine_submit(c->en, c->a[i], &e) == 0);
    }
    long ta = 0, tother = 0, a_dec = 0;
    bool p_first = false;
    for (int j = 0; j < n; j++) {
        if (rows[j].r->client == 0xA) {
            ta += rows[j].n_tokens, a_dec += !rows[j].prefill;
            continue;
        }
        tother += rows[j].n_tokens;
        p_first |= rows[j].r == c->p && rows[j].n_tokens > 1;
    }
    if (ta > 0 && tother > 0) {
        c->shared_steps++;
        c->a_rows += ta, c->other_rows += tother;
        c->a_over += ta > POLICY_DECODE_SHARE_MIN;
        if (p_first) c->p_first_a = ta;
    } else if (!c->b_step && a_dec == DS_NA) {
        c->a_alone_steps++;
    }
    if (!c->b_step && c->a_alone_steps >= 3) {
        for (int i = 0; i < DM_NB; i++) CHECK(engine_submit(c->en, c->b[i], &e) == 0);
        c->b_step = step;
    } else if (c->b_step && step == c->b_step + 3) {
        CHECK(engine_submit(c->en, c->p, &e) == 0);
    }
}

static void check_decode_share_many(const model *m) {
    static dm_ctx c;
    memset(&c, 0, sizeof c);
    c.p_first_a = -1;
    for (int i = 0; i < DS_NA; i++) c.a[i] = mk(i % N_FAM, A_GEN, 0xA, 0);
    for (int i = 0; i < DM_NB; i++) c.b[i] = mk(i % N_FAM, DS_B_GEN, 0xB0 + (uint64_t)i, 0);
    int32_t *pp = xmalloc(DM_P_LEN * sizeof *pp);
    uint64_t rs = 0x77e1ull;
    for (int i = 0; i < DM_P_LEN; i++) {
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        pp[i] = i == 0 ? 1 : (int32_t)(3 + rs % (uint64_t)(m->cfg.n_vocab - 3));
    }
    c.p = req_new(pp, DM_P_LEN);
    c.p->max_tokens = 4;
    c.p->ignore_eos = true;
    c.p->sp.temperature = 0;
    c.p->client = 0xC;
    c.en = hook_engine(m, engine_defaults().max_batch_tokens, 256, dm_hook, &c, false);
    if (!c.en) return;
    err_t e = {0};
    CHECK(engine_submit(c.en, c.a[0], &e) == 0);
    int n_ok = finish_ref(c.a, DS_NA, A_GEN);
    if (c.b_step) n_ok += finish_ref(c.b, DM_NB, DS_B_GEN); /* (else checked below) */
    int32_t out[A_GEN];
    req_finish f;
    int n_p = c.b_step ? finish(c.p, out, A_GEN, &f) : 0;
    engine_free(c.en);
    printf("  decode share, 8 clients: %ld steps with A and others: A %.1f tokens a step, the others %.1f; A over %d "
           "in %ld; in P's first-token step A had %ld\n",
           c.shared_steps, c.shared_steps ? (double)c.a_rows / (double)c.shared_steps : 0,
           c.shared_steps ? (double)c.other_rows / (double)c.shared_steps : 0, POLICY_DECODE_SHARE_MIN, c.a_over,
           c.p_first_a);
    CHECK_MSG(c.b_step, "A alone never had its 16 rows in 3 steps");
    CHECK_EQ_INT(n_ok, DS_NA + DM_NB);
    CHECK_EQ_INT(n_p, 4);
    CHECK_MSG(c.shared_steps >= DS_B_GEN, "the others ran beside A in %ld steps", c.shared_steps);
    CHECK_MSG(c.a_over == 0, "A had more than %d tokens in %ld of %ld steps with other clients",
              POLICY_DECODE_SHARE_MIN, c.a_over, c.shared_steps);
    CHECK_MSG(c.p_first_a >= 0 && c.p_first_a <= POLICY_DECODE_SHARE_MIN,
              "A had %ld tokens in the step of P's first token (its chunk the widest)", c.p_first_a);
    for (int i = 0; i < DS_NA; i++) req_unref(c.a[i]);
    for (int i = 0; i < DM_NB; i++) req_unref(c.b[i]);
    req_unref(c.p);
}

int main(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    model *m = NULL;
    err_t e = {0};
    if (model_load(path, &m, &e) < 0) {
        CHECK_MSG(0, "model_load: %s", e.msg);
        return test_summary("test_engine_fair");
    }
    uint64_t rs = 0xfa1full;
    for (int f = 0; f < N_FAM; f++)
        for (int i = 0; i < FAM_LEN; i++) {
            rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
            fam[f][i] = i == 0 ? 1 : (int32_t)(3 + rs % (uint64_t)(m->cfg.n_vocab - 3));
        }
    /* references: each prompt alone */
    engine *en = new_engine(m, 4, 0);
    if (en) {
        for (int f = 0; f < N_FAM; f++) {
            req *r = mk(f, A_GEN, 1, 0);
            CHECK(engine_submit(en, r, &e) == 0);
            req_finish fin;
            CHECK_EQ_INT(finish(r, ref[f], A_GEN, &fin), A_GEN);
            req_unref(r);
        }
        engine_free(en);
    }
    check_flood(m);
    check_priority(m);
    check_client_limit(m);
    check_kv_victim(m);
    check_prefill_share(m, false);
    check_prefill_share(m, true);
    check_decode_share(m, false);
    check_decode_share(m, true);
    check_decode_share_many(m);
    model_free(m);
    return test_summary("test_engine_fair");
}
