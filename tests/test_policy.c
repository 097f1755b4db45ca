/* test_policy.c — sched/policy: the engine's scheduling rules, step by step
 * and without a model or a clock (time is a number passed in): the fair
 * order of admission and its gates, the agent policy's overdue boundary and
 * whose pins a waiting sequence may take, what admission does after a try,
 * the victim when the pool runs out of blocks and the one that yields to a
 * client below its fair share, the prefill pick and the virtual time a
 * returning client joins at, and the decode share between clients.
 *
 * Each rule is checked on hand-made cases whose answers follow from the
 * rule as policy.h states it, and the three picks (admission, KV victim,
 * prefill) against naive references on random cases: the admission pick
 * sorts the candidates by the documented key, the KV victim sums each
 * client's blocks in a table of clients, the prefill pick compares every
 * pair. The rules engine.c applied inline before (a new client's start in
 * the fair order, engine_submit's per-client refusals, the gate before a
 * try, the backpressure stall clock with parking, what a finished turn
 * leaves pinned) are checked the same way: boundaries and cases by hand,
 * and the client start and the stall clock
 * against references on random cases (the least served by sorting; the
 * stall clock from the whole history of a reader, not step by step). The
 * mask worker's share between clients: the decay against repeated halving,
 * the deferral's boundaries by hand, the worker's pick against a sort on
 * random queues, and a simulated run (8 agents' steps, one client whose
 * masks take 25 ms on the worker) in which the masks' client ends with at
 * most an equal share of what the server spent, where without the rule
 * its masks would take the worker's whole time. */
#include <stdlib.h>
#include <string.h>

#include "sched/policy.h"
#include "test.h"

#define MS(x) ((int64_t)(x) * 1000000)

static policy_limits limits(void) {
    return (policy_limits){.max_running = 8, .new_wait_max_ns = MS(500), .agent = true};
}

static policy_waiting waiting(int priority, int client, uint64_t order) {
    return (policy_waiting){.priority = priority, .client = client, .order = order, .need_blocks = 1};
}

/* The admission order: class, then (other clients) fewer running, then
 * less served, then arrival; a client's own requests go by arrival. */
static void test_admit_order(void) {
    policy_waiting a = waiting(0, 1, 10), b = waiting(0, 2, 5);
    CHECK(policy_admit_before(&b, &a)); /* all equal but arrival */
    a.c_running = 1, b.c_running = 2;
    CHECK(policy_admit_before(&a, &b)); /* fewer running beats arrival */
    b.c_running = 1, a.c_served = 300, b.c_served = 200;
    CHECK(policy_admit_before(&b, &a)); /* less served */
    a.priority = 0, b.priority = 1, b.c_running = 0, b.c_served = 0;
    CHECK(policy_admit_before(&a, &b)); /* the class first, whatever else */
    /* the same client: its counts do not order its own requests */
    policy_waiting c = waiting(0, 3, 7), d = waiting(0, 3, 8);
    c.c_running = 5, d.c_running = 0, c.c_served = 99, d.c_served = 0;
    CHECK(policy_admit_before(&c, &d));
    CHECK(!policy_admit_before(&d, &c));
    CHECK(!policy_admit_before(&c, &c));
}

/* Every gate of policy_may_try, one at a time. */
static void test_gates(void) {
    policy_limits l = limits();
    int64_t now = MS(10000);
    policy_waiting w = waiting(0, 1, 1);
    w.wait_start_ns = now - MS(100);
    CHECK(policy_may_try(&l, &w, 1, now, 0));
    CHECK(!policy_may_try(&l, &w, 0, now, 0)); /* pass 0: resuming or overdue only */
    w.resumes = true;
    CHECK(policy_may_try(&l, &w, 0, now, 0));
    w.resumes = false;
    w.wait_start_ns = now - MS(501);
    CHECK(policy_may_try(&l, &w, 0, now, 0)); /* overdue */
    l.agent = false;
    CHECK(!policy_may_try(&l, &w, 0, now, 0)); /* no overdue rule without pins */
    l = limits();
    w.tried = true;
    CHECK(!policy_may_try(&l, &w, 1, now, 0));
    w.tried = false;
    w.parked = true;
    CHECK(!policy_may_try(&l, &w, 1, now, 0));
    w.parked = false;
    l.client_max_running = 2, w.c_running = 1;
    CHECK(policy_may_try(&l, &w, 1, now, 0));
    w.c_running = 2;
    CHECK(!policy_may_try(&l, &w, 1, now, 0));
    l.client_max_running = 0;
    /* the prefilling cap binds only a client that already prefills */
    w.c_prefilling = 0;
    CHECK(policy_may_try(&l, &w, 1, now, POLICY_MAX_PREFILLING));
    w.c_prefilling = 1;
    CHECK(policy_may_try(&l, &w, 1, now, POLICY_MAX_PREFILLING - 1));
    CHECK(!policy_may_try(&l, &w, 1, now, POLICY_MAX_PREFILLING));
    w.c_prefilling = 0;
    /* kv_limit: within it, or alone */
    l.kv_limit = 10, w.c_kv_blocks = 6, w.need_blocks = 4, w.c_running = 1;
    CHECK(policy_may_try(&l, &w, 1, now, 0));
    w.need_blocks = 5;
    CHECK(!policy_may_try(&l, &w, 1, now, 0));
    w.c_running = 0, w.c_kv_blocks = 0, w.need_blocks = 50;
    CHECK(policy_may_try(&l, &w, 1, now, 0));
}

/* The overdue boundary (strictly longer than new_wait_max) and the pins a
 * waiting sequence may make yield, on an injected time. */
static void test_overdue_and_yield(void) {
    policy_limits l = limits();
    int64_t t0 = 123456789;
    CHECK(!policy_overdue(&l, t0, t0 + MS(500)));
    CHECK(policy_overdue(&l, t0, t0 + MS(500) + 1));
    policy_waiting w = waiting(0, 1, 1);
    w.wait_start_ns = t0;
    CHECK_EQ_INT(policy_yield_for(&l, &w, t0 + MS(500), 3), KVPOL_FOR_NEW);
    CHECK_EQ_INT(policy_yield_for(&l, &w, t0 + MS(500), 0), KVPOL_FOR_NEW_IDLE);
    CHECK_EQ_INT(policy_yield_for(&l, &w, t0 + MS(500) + 1, 3), KVPOL_FOR_RUNNING);
    w.resumes = true;
    CHECK_EQ_INT(policy_yield_for(&l, &w, t0, 3), KVPOL_FOR_RUNNING);
    w.resumes = false, w.admitted_once = true;
    CHECK_EQ_INT(policy_yield_for(&l, &w, t0, 3), KVPOL_FOR_RUNNING);
    w.admitted_once = false, l.agent = false;
    CHECK_EQ_INT(policy_yield_for(&l, &w, t0, 3), KVPOL_FOR_RUNNING);
    /* the limit: as set, else one pin's lifetime, at most the cap */
    CHECK_EQ_INT(policy_new_wait_ms(500, 60, 60000), 500);
    CHECK_EQ_INT(policy_new_wait_ms(0, 20, 60000), 20000);
    CHECK_EQ_INT(policy_new_wait_ms(0, 600, 60000), 60000);
    CHECK_EQ_INT(policy_new_wait_ms(-1, 0.25, 60000), 250);
}

static void test_after_try(void) {
    for (int pass = 0; pass < 2; pass++) {
        CHECK_EQ_INT(policy_after_try(1, false, pass), POLICY_NEXT);
        CHECK_EQ_INT(policy_after_try(1, true, pass), POLICY_NEXT);
        CHECK_EQ_INT(policy_after_try(0, false, pass), POLICY_NEXT);
        CHECK_EQ_INT(policy_after_try(0, true, pass), POLICY_STOP);
        CHECK_EQ_INT(policy_after_try(-1, true, pass), POLICY_STOP);
    }
    CHECK_EQ_INT(policy_after_try(-1, false, 0), POLICY_END_PASS);
    CHECK_EQ_INT(policy_after_try(-1, false, 1), POLICY_STOP);
}

/* A naive admission pick: the allowed candidates sorted by the documented
 * key (class, then for different clients running and served, then
 * arrival), the first. With distinct arrival numbers and per-client counts
 * the key is a total order except across clients, where it is exactly
 * (class, running, served, arrival) and within a client (class, arrival). */
static int ref_pick_waiting(const policy_limits *l, const policy_waiting *v, int n, int pass, int64_t now, int npf) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!policy_may_try(l, &v[i], pass, now, npf)) continue;
        /* v[i] wins if no allowed candidate precedes it */
        bool first = true;
        for (int j = 0; j < n && first; j++) {
            if (j == i || !policy_may_try(l, &v[j], pass, now, npf)) continue;
            const policy_waiting *a = &v[j], *b = &v[i];
            bool before;
            if (a->priority != b->priority) before = a->priority < b->priority;
            else if (a->client != b->client && a->c_running != b->c_running) before = a->c_running < b->c_running;
            else if (a->client != b->client && a->c_served != b->c_served) before = a->c_served < b->c_served;
            else before = a->order < b->order;
            if (before) first = false;
        }
        if (first) {
            best = i;
            break;
        }
    }
    return best;
}

/* A naive KV victim: each client's blocks summed in a table of clients. */
static int ref_kv_victim(const policy_running *v, int n) {
    int ids[64], sums[64], n_cl = 0, held = 0;
    for (int i = 0; i < n; i++) {
        held += v[i].n_blocks;
        int k = 0;
        while (k < n_cl && ids[k] != v[i].client) k++;
        if (k == n_cl) ids[n_cl] = v[i].client, sums[n_cl++] = 0;
        sums[k] += v[i].n_blocks > 0 ? v[i].n_blocks : 1;
    }
    int top = 0;
    for (int k = 1; k < n_cl; k++)
        if (sums[k] > sums[top]) top = k;
    if (n_cl > 1 && sums[top] > held / n_cl)
        for (int i = n - 1; i >= 0; i--)
            if (v[i].client == ids[top]) return i;
    return n - 1;
}

static void test_random_picks(void) {
    rng_state = 0x5ced01ull;
    policy_limits l = limits();
    for (int iter = 0; iter < 3000; iter++) {
        enum { N = 24 };
        int n = 1 + (int)(rng_u64() % N), n_clients = 1 + (int)(rng_u64() % 5);
        int running[6], prefilling[6], kvb[6];
        double served[6];
        for (int c = 0; c < 6; c++)
            running[c] = (int)(rng_u64() % 4), prefilling[c] = (int)(rng_u64() % 2), kvb[c] = (int)(rng_u64() % 8),
            served[c] = (double)(rng_u64() % 3) * 100;
        l.client_max_running = (int)(rng_u64() % 4);
        l.kv_limit = (int)(rng_u64() % 12);
        policy_waiting v[N];
        int64_t now = MS(1000);
        for (int i = 0; i < n; i++) {
            int c = (int)(rng_u64() % (uint64_t)n_clients);
            v[i] = waiting((int)(rng_u64() % 2), c, (uint64_t)(i * 7 + 3) % 97);
            v[i].tried = rng_u64() % 6 == 0;
            v[i].resumes = rng_u64() % 3 == 0;
            v[i].parked = rng_u64() % 8 == 0;
            v[i].wait_start_ns = now - MS(rng_u64() % 1000);
            v[i].need_blocks = 1 + (int)(rng_u64() % 6);
            v[i].c_running = running[c], v[i].c_prefilling = prefilling[c], v[i].c_kv_blocks = kvb[c];
            v[i].c_served = served[c];
        }
        int pass = (int)(rng_u64() % 2), npf = (int)(rng_u64() % 20);
        int got = policy_pick_waiting(&l, v, n, pass, now, npf), want = ref_pick_waiting(&l, v, n, pass, now, npf);
        if (got != want) {
            CHECK_MSG(0, "admission pick, case %d: %d, the reference %d", iter, got, want);
            return;
        }
        policy_running r[N];
        for (int i = 0; i < n; i++)
            r[i] = (policy_running){.client = (int)(rng_u64() % (uint64_t)n_clients),
                                    .n_blocks = (int)(rng_u64() % 5)};
        got = policy_kv_victim(r, n), want = ref_kv_victim(r, n);
        if (got != want) {
            CHECK_MSG(0, "kv victim, case %d: %d, the reference %d", iter, got, want);
            return;
        }
    }
    CHECK(1);
}

/* Scenarios of the KV victim (policy.h's soak case). */
static void test_kv_victim(void) {
    /* one client (A: 0) holds 12 of 16 blocks over three sequences; B (1)
     * holds 4 and is newest: A's newest gives its blocks back */
    policy_running v[4] = {{0, 0, 4, 3}, {0, 0, 4, 3}, {0, 0, 4, 3}, {0, 1, 4, 1}};
    CHECK_EQ_INT(policy_kv_victim(v, 4), 2);
    /* even shares: the newest overall */
    policy_running e[4] = {{0, 0, 4, 2}, {0, 1, 4, 2}, {0, 0, 4, 2}, {0, 1, 4, 2}};
    CHECK_EQ_INT(policy_kv_victim(e, 4), 3);
    /* one client only: its newest */
    CHECK_EQ_INT(policy_kv_victim(v, 3), 2);
    /* a tie for the most blocks: the client seen first (arrival) */
    policy_running t[3] = {{0, 1, 6, 1}, {0, 0, 6, 1}, {0, 2, 0, 1}};
    CHECK_EQ_INT(policy_kv_victim(t, 3), 0); /* 6 > 12 / 3 */
}

/* Scenarios of the fair yield. */
static void test_fair_victim(void) {
    policy_limits l = limits(); /* max_running 8 */
    int share;
    /* A (client 0) runs 7, B (1) runs 1 and waits for a second: share 4 */
    policy_running v[8];
    for (int i = 0; i < 8; i++) v[i] = (policy_running){0, i == 3 ? 1 : 0, 2, i == 3 ? 1 : 7};
    policy_waiting w = waiting(0, 1, 100);
    w.c_running = 1;
    CHECK_EQ_INT(policy_fair_victim(&l, v, 8, &w, 2, &share), 7); /* A's newest */
    CHECK_EQ_INT(share, 4);
    /* B at its share: nobody yields */
    w.c_running = 4;
    CHECK_EQ_INT(policy_fair_victim(&l, v, 8, &w, 2, &share), -1);
    /* share 2 (max_running 4): A runs 3, above it, but B already has its
     * 2: nobody yields (no ping-pong) */
    for (int i = 0; i < 8; i++) v[i].c_running = v[i].client == 0 ? 3 : 2;
    w.c_running = 2;
    l.max_running = 4;
    CHECK_EQ_INT(policy_fair_victim(&l, v, 8, &w, 2, &share), -1);
    l.max_running = 8;
    /* a larger class yields to a smaller one first, the largest class,
     * newest first, whatever the shares */
    for (int i = 0; i < 8; i++) v[i] = (policy_running){i == 2 || i == 5 ? 2 : i == 6 ? 1 : 0, 0, 1, 8};
    w = waiting(0, 1, 100);
    w.c_running = 100;
    CHECK_EQ_INT(policy_fair_victim(&l, v, 8, &w, 2, &share), 5);
    w.priority = 1;
    CHECK_EQ_INT(policy_fair_victim(&l, v, 8, &w, 2, &share), 5);
    w.priority = 2;
    CHECK_EQ_INT(policy_fair_victim(&l, v, 8, &w, 2, &share), -1); /* same class, w above its share */
    /* among clients above their share, the one furthest above (its newest);
     * share 2 with 4 active clients */
    policy_running f[8] = {{0, 0, 1, 3}, {0, 0, 1, 3}, {0, 0, 1, 3}, {0, 2, 1, 4},
                           {0, 2, 1, 4}, {0, 2, 1, 4}, {0, 2, 1, 4}, {0, 3, 1, 1}};
    w = waiting(0, 1, 100);
    CHECK_EQ_INT(policy_fair_victim(&l, f, 8, &w, 4, &share), 6);
    CHECK_EQ_INT(share, 2);
}

/* The naive prefill pick: the eligible one that no other eligible one
 * precedes, the oldest of those. */
static int ref_pick_prefill(const policy_prefill *v, int n) {
    for (int i = 0; i < n; i++) {
        if (!v[i].eligible) continue;
        bool first = true;
        for (int j = 0; j < n && first; j++)
            if (j != i && v[j].eligible &&
                (policy_prefill_before(&v[j], &v[i]) || (j < i && !policy_prefill_before(&v[i], &v[j]))))
                first = false;
        if (first) return i;
    }
    return -1;
}

static void test_prefill(void) {
    /* one client: shortest first, a starved one first, ties to the oldest */
    policy_prefill v[4] = {{0, 0, true, false, 300, 0}, {0, 0, true, false, 20, 0},
                           {0, 0, true, false, 50, 0}, {0, 0, false, false, 5, 0}};
    CHECK_EQ_INT(policy_pick_prefill(v, 4), 1); /* 20 (5 is not eligible) */
    v[0].starved = true;
    CHECK_EQ_INT(policy_pick_prefill(v, 4), 0);
    v[2].starved = true;
    CHECK_EQ_INT(policy_pick_prefill(v, 4), 0); /* starved ones: oldest first */
    v[0].starved = v[2].starved = false;
    v[2].pending = 20;
    CHECK_EQ_INT(policy_pick_prefill(v, 4), 1); /* a tie: the oldest */
    /* two clients: less virtual time first, even over a starved or shorter
     * one of the other client; the class before all */
    policy_prefill c[3] = {{0, 0, true, true, 10, 500}, {0, 1, true, false, 900, 100}, {1, 1, true, false, 1, 0}};
    CHECK_EQ_INT(policy_pick_prefill(c, 3), 1);
    c[1].c_pf_vt = 500; /* equal virtual time: the starved one */
    CHECK_EQ_INT(policy_pick_prefill(c, 3), 0);
    c[2].priority = -1;
    CHECK_EQ_INT(policy_pick_prefill(c, 3), 2);
    CHECK_EQ_INT(policy_pick_prefill(c, 0), -1);
    /* random cases against the pairwise reference */
    rng_state = 0x9f111ull;
    for (int iter = 0; iter < 3000; iter++) {
        policy_prefill r[12];
        double vt[3] = {(double)(rng_u64() % 3), (double)(rng_u64() % 3), (double)(rng_u64() % 3)};
        int n = (int)(rng_u64() % 12);
        for (int i = 0; i < n; i++) {
            int c = (int)(rng_u64() % 3);
            r[i] = (policy_prefill){(int)(rng_u64() % 2), c, rng_u64() % 4 != 0, rng_u64() % 4 == 0,
                                    1 + (int)(rng_u64() % 5), vt[c]};
        }
        int got = policy_pick_prefill(r, n), want = ref_pick_prefill(r, n);
        if (got != want) {
            CHECK_MSG(0, "prefill pick, case %d: %d, the reference %d", iter, got, want);
            return;
        }
    }
    /* a client joins at least at the least virtual time of last step's
     * prefilling clients, unless it prefilled in the step before */
    CHECK_NEAR(policy_pf_vt_join(10, 3, 9, 400), 400, 0);
    CHECK_NEAR(policy_pf_vt_join(900, 3, 9, 400), 900, 0);
    CHECK_NEAR(policy_pf_vt_join(10, 8, 9, 400), 10, 0);
}

/* The decode share (policy.h): a client with 16 decode rows beside one
 * with 6 keeps 6 (equal tokens), the ones that ran most recently sitting
 * out; in a step with the other's first token it keeps 2; alone, or when
 * it is not the widest, it keeps all; prefill rows never sit out (a
 * client whose tokens are a prefill chunk keeps it, and counts it). */
static policy_row row(int client, int n_tokens, uint64_t last_ran, uint64_t order) {
    return (policy_row){.client = client, .n_tokens = n_tokens, .decode = n_tokens == 1, .last_ran = last_ran,
                        .order = order};
}

static int tokens_kept(const policy_row *v, int n, const bool *out, int client) {
    int t = 0;
    for (int j = 0; j < n; j++) t += v[j].client == client && !out[j] ? v[j].n_tokens : 0;
    return t;
}

static void test_decode_share(void) {
    policy_row v[32];
    bool out[32];
    int n = 0;
    for (int i = 0; i < 16; i++) v[n++] = row(0, 1, i < 10 ? 99 : 98, (uint64_t)i); /* A: 10 ran last step */
    for (int i = 0; i < 6; i++) v[n++] = row(1, 1, 99, (uint64_t)(100 + i));
    CHECK_EQ_INT(policy_decode_share(v, n, out), 10);
    CHECK_EQ_INT(tokens_kept(v, n, out, 0), 6);
    CHECK_EQ_INT(tokens_kept(v, n, out, 1), 6);
    for (int i = 10; i < 16; i++) CHECK(!out[i]); /* the six that sat out last step run */
    v[16].first = true; /* B's first token: A keeps POLICY_DECODE_SHARE_MIN */
    CHECK_EQ_INT(policy_decode_share(v, n, out), 16 - POLICY_DECODE_SHARE_MIN);
    CHECK_EQ_INT(tokens_kept(v, n, out, 0), POLICY_DECODE_SHARE_MIN);
    CHECK(!out[10] && !out[11]); /* the oldest of those that waited longest */
    v[16].first = false;
    CHECK_EQ_INT(policy_decode_share(v, 16, out), 0); /* A alone */
    /* B with one row: A keeps the minimum, not one */
    CHECK_EQ_INT(policy_decode_share(v, 17, out), 16 - POLICY_DECODE_SHARE_MIN);
    /* A's 16 rows beside B's prefill chunk of 40: A is not the widest, nothing sits out */
    v[16] = row(1, 40, 99, 100);
    CHECK_EQ_INT(policy_decode_share(v, 17, out), 0);
    /* B's chunk of 10 beside A's 16 rows: A keeps 10; B's chunk never sits out */
    v[16] = row(1, 10, 99, 100);
    v[16].decode = false;
    CHECK_EQ_INT(policy_decode_share(v, 17, out), 6);
    CHECK(!out[16]);
    CHECK_EQ_INT(tokens_kept(v, 17, out, 0), 10);
    /* priority classes: A (16 rows) interactive beside B (6 rows) of the
     * batch class is not cut; A batch beside B interactive is */
    for (int i = 0; i < 16; i++) v[i].priority = 0;
    for (int i = 16; i < 22; i++) v[i] = row(1, 1, 99, (uint64_t)(100 + i)), v[i].priority = 1;
    CHECK_EQ_INT(policy_decode_share(v, 22, out), 0);
    for (int i = 0; i < 16; i++) v[i].priority = 1;
    for (int i = 16; i < 22; i++) v[i].priority = 0;
    CHECK_EQ_INT(policy_decode_share(v, 22, out), 10);
    CHECK_EQ_INT(tokens_kept(v, 22, out, 0), 6);
    /* A's tokens all prefill: nothing can sit out */
    policy_row w[2] = {row(0, 64, 1, 0), row(1, 1, 1, 1)};
    w[0].decode = false;
    CHECK_EQ_INT(policy_decode_share(w, 2, out), 0);

    /* Nine clients (issue 26's benchmark with one key per agent): a flood
     * of 16 rows beside 8 clients of one row keeps the minimum, 2 of the
     * step's 10 rows. */
    n = 0;
    for (int i = 0; i < 16; i++) v[n++] = row(0, 1, 99, (uint64_t)i);
    for (int c = 1; c <= 8; c++) v[n++] = row(c, 1, 99, (uint64_t)(100 + c));
    CHECK_EQ_INT(policy_decode_share(v, n, out), 16 - POLICY_DECODE_SHARE_MIN);
    CHECK_EQ_INT(tokens_kept(v, n, out, 0), POLICY_DECODE_SHARE_MIN);
    for (int j = 16; j < n; j++) CHECK(!out[j]);
    /* ... and when one of the 8 ends a prompt of 60 tokens in the step, the
     * widest client is that one (its chunk cannot sit out): the flood still
     * keeps only the minimum (before: the widest alone was cut, so the
     * flood ran its 16 rows in every step that gave another client its
     * first token) */
    v[16] = row(1, 60, 99, 101);
    v[16].first = true;
    CHECK_EQ_INT(policy_decode_share(v, n, out), 16 - POLICY_DECODE_SHARE_MIN);
    CHECK_EQ_INT(tokens_kept(v, n, out, 0), POLICY_DECODE_SHARE_MIN);
    for (int j = 16; j < n; j++) CHECK(!out[j]);
    /* one key for the 8 agents: their 7 decode rows and a first chunk of
     * 60 beside a flood of 16: the flood keeps 2 (the agents' first
     * token), the agents' client, widest, its chunk (its decode rows wait
     * a step, as beside any narrower client) */
    n = 0;
    for (int i = 0; i < 16; i++) v[n++] = row(0, 1, 99, (uint64_t)i);
    for (int i = 0; i < 7; i++) v[n++] = row(1, 1, 99, (uint64_t)(100 + i));
    v[n] = row(1, 60, 99, 107), v[n++].first = true;
    CHECK_EQ_INT(policy_decode_share(v, n, out), 16 - POLICY_DECODE_SHARE_MIN + 7);
    CHECK_EQ_INT(tokens_kept(v, n, out, 0), POLICY_DECODE_SHARE_MIN);
    CHECK_EQ_INT(tokens_kept(v, n, out, 1), 60);
    /* three wide clients, no first token: 16, 12 and 1 rows: the widest
     * comes down to the second's 12, the second keeps its 12 */
    n = 0;
    for (int i = 0; i < 16; i++) v[n++] = row(0, 1, 99, (uint64_t)i);
    for (int i = 0; i < 12; i++) v[n++] = row(1, 1, 99, (uint64_t)(100 + i));
    v[n++] = row(2, 1, 99, 200);
    CHECK_EQ_INT(policy_decode_share(v, n, out), 4);
    CHECK_EQ_INT(tokens_kept(v, n, out, 0), 12);
    CHECK_EQ_INT(tokens_kept(v, n, out, 1), 12);
    /* the same with the third's first token: both wide ones keep 2 */
    v[n - 1].first = true;
    CHECK_EQ_INT(policy_decode_share(v, n, out), 28 - 2 * POLICY_DECODE_SHARE_MIN);
    CHECK_EQ_INT(tokens_kept(v, n, out, 0), POLICY_DECODE_SHARE_MIN);
    CHECK_EQ_INT(tokens_kept(v, n, out, 1), POLICY_DECODE_SHARE_MIN);
}

/* The decode share on random steps against its contract (policy.h), with
 * the clients' tokens summed in a table: afterwards no client with a
 * decode row left in has more tokens than its level (the most tokens
 * another client of its class or a better one brought, at least the
 * minimum; the minimum with another's first token), a client cut has
 * exactly its level left unless none of its decode rows is left, only
 * decode rows sit out, a client's rows that sit out ran no earlier than
 * those that run, and a step of one client is untouched. */
static void test_decode_share_random(void) {
    rng_state = 0xd5a2eull;
    for (int iter = 0; iter < 3000; iter++) {
        enum { N = 40, NC = 6 };
        policy_row v[N];
        bool out[N];
        int n = 1 + (int)(rng_u64() % N), n_clients = 1 + (int)(rng_u64() % NC);
        for (int j = 0; j < n; j++) {
            int c = (int)(rng_u64() % (uint64_t)n_clients), kind = (int)(rng_u64() % 8);
            v[j] = row(c, kind == 0 ? 1 + (int)(rng_u64() % 70) : 1, rng_u64() % 4, (uint64_t)j);
            v[j].first = kind == 0 && rng_u64() % 2 == 0;
            v[j].decode = kind != 0 && kind != 1; /* kind 1: a 1-token prefill chunk */
            v[j].priority = (int)(rng_u64() % 3 == 0);
        }
        int n_out = policy_decode_share(v, n, out);
        int kept[NC] = {0}, brought[NC] = {0}, pri[NC], in_dec[NC] = {0}, n_cut[NC] = {0}, cnt = 0, n_cl = 0;
        bool has[NC] = {0};
        for (int c = 0; c < NC; c++) pri[c] = 99;
        for (int j = 0; j < n; j++) {
            int c = v[j].client;
            n_cl += !has[c];
            has[c] = true;
            pri[c] = v[j].priority < pri[c] ? v[j].priority : pri[c];
            brought[c] += v[j].n_tokens;
            if (out[j]) {
                n_cut[c]++, cnt++;
                if (!v[j].decode) CHECK_MSG(0, "case %d: a row that is not a decode sat out", iter);
            } else {
                kept[c] += v[j].n_tokens, in_dec[c] += v[j].decode;
            }
        }
        if (n_out != cnt) CHECK_MSG(0, "case %d: returned %d, %d rows out", iter, n_out, cnt);
        if (n_cl == 1 && cnt) CHECK_MSG(0, "case %d: one client alone was cut", iter);
        for (int c = 0; c < NC; c++) {
            if (!has[c]) continue;
            int lvl = 0;
            bool fo = false;
            for (int d = 0; d < NC; d++)
                if (d != c && has[d] && pri[d] <= pri[c]) lvl = brought[d] > lvl ? brought[d] : lvl;
            for (int j = 0; j < n; j++) /* a first token of a row of c's class or a better one */
                fo |= v[j].client != c && v[j].first && v[j].priority <= pri[c];
            if (lvl == 0) {
                if (n_cut[c]) CHECK_MSG(0, "case %d: client %d cut with no other client of its class", iter, c);
                continue;
            }
            lvl = fo ? POLICY_DECODE_SHARE_MIN : (lvl > POLICY_DECODE_SHARE_MIN ? lvl : POLICY_DECODE_SHARE_MIN);
            if (in_dec[c] && kept[c] > lvl)
                CHECK_MSG(0, "case %d: client %d kept %d tokens with decode rows in, level %d", iter, c, kept[c], lvl);
            if (n_cut[c] && in_dec[c] && kept[c] != lvl)
                CHECK_MSG(0, "case %d: client %d cut to %d, level %d", iter, c, kept[c], lvl);
            if (n_cut[c] && !in_dec[c] && kept[c] < lvl)
                CHECK_MSG(0, "case %d: client %d cut below its level (%d < %d)", iter, c, kept[c], lvl);
            for (int j = 0; j < n; j++) /* those that sat out ran no earlier than any that runs */
                for (int k = 0; k < n; k++)
                    if (v[j].client == c && v[k].client == c && out[j] && !out[k] && v[k].decode &&
                        (v[j].last_ran < v[k].last_ran || (v[j].last_ran == v[k].last_ran && v[j].order < v[k].order)))
                        CHECK_MSG(0, "case %d: client %d's row %d sat out before row %d", iter, c, j, k);
        }
    }
    CHECK(1);
}

/* A new client's start: the least served of the active clients, inactive
 * ones (free entries, or new themselves) not counted; 0 with none. The
 * reference sorts the active ones' served and takes the first. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_client_start(void) {
    policy_client v[4] = {{true, 300}, {false, 5}, {true, 120}, {true, 900}};
    CHECK_NEAR(policy_client_start(v, 4), 120, 0); /* 5: not active */
    CHECK_NEAR(policy_client_start(v, 0), 0, 0);
    v[0].active = v[2].active = v[3].active = false;
    CHECK_NEAR(policy_client_start(v, 4), 0, 0); /* nobody active: 0, not 5 */
    rng_state = 0xc11e47ull;
    for (int iter = 0; iter < 2000; iter++) {
        policy_client r[16];
        double act[16];
        int n = (int)(rng_u64() % 16), n_act = 0;
        for (int i = 0; i < n; i++) {
            r[i] = (policy_client){rng_u64() % 3 != 0, (double)(rng_u64() % 1000) + 0.5};
            if (r[i].active) act[n_act++] = r[i].served;
        }
        qsort(act, (size_t)n_act, sizeof *act, cmp_double);
        double want = n_act ? act[0] : 0, got = policy_client_start(r, n);
        if (got != want) {
            CHECK_MSG(0, "client start, case %d: %g, the reference %g", iter, got, want);
            return;
        }
    }
    CHECK(1);
}

/* engine_submit's per-client refusals: each limit at its boundary (a
 * client at the limit is refused, one below is not), 0 turns it off, and
 * when several bind the first in the documented order names the refusal. */
static void test_submit_check(void) {
    policy_limits l = limits();
    CHECK_EQ_INT(policy_submit_check(&l, 100, 100, 100), POLICY_SUBMIT_OK); /* no limits */
    l.client_max_parked = 2, l.kv_limit = 10, l.client_max_queued = 3;
    CHECK_EQ_INT(policy_submit_check(&l, 1, 9, 2), POLICY_SUBMIT_OK);
    CHECK_EQ_INT(policy_submit_check(&l, 2, 9, 2), POLICY_SUBMIT_PARKED);
    CHECK_EQ_INT(policy_submit_check(&l, 1, 10, 2), POLICY_SUBMIT_KV);
    CHECK_EQ_INT(policy_submit_check(&l, 1, 9, 3), POLICY_SUBMIT_QUEUED);
    CHECK_EQ_INT(policy_submit_check(&l, 2, 10, 3), POLICY_SUBMIT_PARKED);
    CHECK_EQ_INT(policy_submit_check(&l, 0, 10, 3), POLICY_SUBMIT_KV);
    l.client_max_parked = 0, l.kv_limit = 0;
    CHECK_EQ_INT(policy_submit_check(&l, 50, 50, 3), POLICY_SUBMIT_QUEUED);
    l.client_max_queued = 0;
    CHECK_EQ_INT(policy_submit_check(&l, 50, 50, 50), POLICY_SUBMIT_OK);
}

/* The gate before a try: no slot at max_running (whatever the blocks), a
 * sequence that needs more than pool_blocks - 1 blocks never fits. */
static void test_admit_gate(void) {
    policy_limits l = limits(); /* max_running 8 */
    l.pool_blocks = 10;
    CHECK_EQ_INT(policy_admit_gate(&l, 7, 9), POLICY_GATE_TRY);
    CHECK_EQ_INT(policy_admit_gate(&l, 7, 10), POLICY_GATE_NEVER_FITS);
    CHECK_EQ_INT(policy_admit_gate(&l, 8, 1), POLICY_GATE_NO_SLOT);
    CHECK_EQ_INT(policy_admit_gate(&l, 8, 50), POLICY_GATE_NO_SLOT); /* the slot first */
    CHECK_EQ_INT(policy_admit_gate(&l, 0, 1), POLICY_GATE_TRY);
}

/* The stall clock, stalling and parking. By hand: the boundaries (strictly
 * longer than the limit), a slow reader restarting the clock, a blocked
 * reader, the opt-out. On random reader traces, step by step against a
 * reference that looks at the whole history: the clock at observation k
 * is the time of the first observation of the run, ending at k, of
 * observations in which the reader is behind (or blocked) with the same
 * n_read as at k; 0 when it is not behind at k. */
static bool behind(const policy_reader *r) { return r->n_read < r->n_posted || r->blocked; }

static int64_t ref_since(const int64_t *t, const policy_reader *h, int k) {
    if (!behind(&h[k])) return 0;
    int j = k;
    while (j > 0 && h[j - 1].n_read == h[k].n_read && behind(&h[j - 1])) j--;
    return t[j];
}

static void test_stall(void) {
    policy_limits l = limits();
    l.stall_timeout_ms = 1000, l.park_ms = policy_park_ms(600, 1000);
    CHECK_EQ_INT(l.park_ms, 500); /* at most half the stall timeout */
    CHECK_EQ_INT(policy_park_ms(300, 1000), 300);
    CHECK_EQ_INT(policy_park_ms(300, 0), 300);
    CHECK_EQ_INT(policy_park_ms(0, 1000), 0);
    CHECK_EQ_INT(policy_park_ms(-5, 1000), 0);
    int64_t t0 = MS(7);
    policy_reader r = {.n_read = 3, .n_posted = 5};
    int64_t since = policy_stall_since(&l, 0, 0, &r, t0);
    CHECK(since == t0);
    CHECK(policy_stall_since(&l, since, 3, &r, t0 + MS(900)) == t0); /* nothing taken: the clock runs */
    CHECK(!policy_stalled(&l, since, t0 + MS(1000)));
    CHECK(policy_stalled(&l, since, t0 + MS(1000) + 1));
    CHECK(!policy_park(&l, since, false, t0 + MS(500)));
    CHECK(policy_park(&l, since, false, t0 + MS(500) + 1));
    CHECK(policy_park(&l, since, true, t0)); /* blocked: at once */
    CHECK(!policy_park(&l, 0, true, t0));    /* (but only on a running clock) */
    r.n_read = 4; /* it took one: a slow reader, the clock restarts */
    CHECK(policy_stall_since(&l, since, 3, &r, t0 + MS(900)) == t0 + MS(900));
    r.n_read = 5; /* it has everything */
    CHECK(policy_stall_since(&l, since, 4, &r, t0 + MS(900)) == 0);
    CHECK(!policy_stalled(&l, 0, t0 + MS(5000)));
    CHECK(policy_unpark(&r));
    r.blocked = true; /* everything taken, but its client takes nothing */
    CHECK(!policy_unpark(&r));
    CHECK(policy_stall_since(&l, 0, 5, &r, t0 + MS(10)) == t0 + MS(10));
    r.no_stall = true;
    CHECK(policy_stall_since(&l, 0, 5, &r, t0 + MS(10)) == 0); /* opted out */
    r.no_stall = false;
    policy_limits off = l;
    off.stall_timeout_ms = 0, off.park_ms = 0;
    CHECK(policy_stall_since(&off, 0, 5, &r, t0 + MS(10)) == 0); /* neither limit set */
    CHECK(!policy_stalled(&off, t0, t0 + MS(100000)));
    CHECK(!policy_park(&off, t0, true, t0 + MS(100000)));
    /* random traces */
    rng_state = 0x57a11ull;
    for (int iter = 0; iter < 500; iter++) {
        enum { K = 40 };
        int64_t t[K];
        policy_reader h[K];
        int posted = 0, read = 0, seen = 0;
        int64_t now = MS(1), clk = 0;
        policy_limits lr = l;
        lr.stall_timeout_ms = 50 + (int)(rng_u64() % 200);
        lr.park_ms = policy_park_ms((int)(rng_u64() % 150), lr.stall_timeout_ms);
        for (int k = 0; k < K; k++) {
            now += MS(rng_u64() % 60);
            posted += (int)(rng_u64() % 3);
            if (rng_u64() % 3 == 0) read += (int)(rng_u64() % (uint64_t)(posted - read + 1));
            t[k] = now;
            h[k] = (policy_reader){.n_read = read, .n_posted = posted, .blocked = rng_u64() % 7 == 0};
            clk = policy_stall_since(&lr, clk, seen, &h[k], now);
            seen = h[k].n_read;
            int64_t want = ref_since(t, h, k);
            bool stalled = want && now - want > MS(lr.stall_timeout_ms);
            bool park = lr.park_ms > 0 && want && (h[k].blocked || now - want > MS(lr.park_ms));
            if (clk != want || policy_stalled(&lr, clk, now) != stalled || policy_park(&lr, clk, h[k].blocked, now) != park) {
                CHECK_MSG(0, "stall clock, trace %d step %d: since %lld (reference %lld)", iter, k, (long long)clk,
                          (long long)want);
                return;
            }
        }
    }
    CHECK(1);
}

/* A client seen through its receive window (policy_rwnd). By hand: the
 * first sample starts the clock, the two boundaries (park_ms reached, not
 * passed; the shrink bound reached), the consumption boundary (an edge
 * that advanced by exactly half of what was acknowledged is not
 * consumption, one byte more is), nothing acknowledged, park_ms 0. On
 * random traces against a reference that recomputes from the whole
 * history: the clock's start is found by walking the samples from the
 * first, the largest window by scanning from the start. And on a model of
 * a receiving kernel (a buffer whose segments cost more than their bytes,
 * windows rounded up to the scale, an edge never taken back, a window first
 * promised above what it settles at): a client that reads every
 * acknowledgement's worth before park_ms passes is never idle, one that
 * reads nothing is found before its buffer is full, within the bound's
 * worth of bytes at the kernel's rate (the edge creeping by at most
 * 0.45 of them: the window shrinks by >= 0.55 a byte). */
typedef struct rwnd_sample {
    int64_t t;
    uint64_t acked;
    uint32_t wnd;
} rwnd_sample;

static bool ref_rwnd_idle(const rwnd_sample *h, int i, int park_ms, uint32_t shrink) {
    int s = 0;
    for (int k = 1; k <= i; k++) {
        uint64_t e0 = h[s].acked + h[s].wnd, e = h[k].acked + h[k].wnd;
        if (e > e0 && 2 * (e - e0) > h[k].acked - h[s].acked + ((h[k].acked - h[s].acked) & 1)) s = k;
    }
    if (s == i || park_ms <= 0) return false;
    uint32_t mx = 0;
    for (int k = s; k <= i; k++) mx = h[k].wnd > mx ? h[k].wnd : mx;
    return h[i].acked > h[s].acked && h[i].t - h[s].t >= MS(park_ms) && mx - h[i].wnd >= shrink;
}

/* The receiving kernel's model: `space` bytes of window when empty, each
 * payload byte costing `cost` of it until read, the window rounded up to
 * 1 << scale and never taking back its right edge, `cap` the most it
 * offers (the first promise `promise` may be above it). */
typedef struct rwnd_peer {
    double space, cost, unread, cap;
    uint64_t acked, edge;
    int scale;
} rwnd_peer;

static uint32_t peer_ack(rwnd_peer *p, uint32_t bytes) {
    p->acked += bytes, p->unread += bytes;
    double free_ = p->space - p->cost * p->unread;
    double w = free_ < p->cap ? free_ : p->cap;
    if (w < 0) w = 0;
    uint64_t win = ((uint64_t)w + (1u << p->scale) - 1) >> p->scale << p->scale;
    if (p->acked + win < p->edge) win = p->edge - p->acked; /* never taken back */
    p->edge = p->acked + win;
    return (uint32_t)win;
}

static void test_rwnd(void) {
    policy_rwnd w = {0};
    const uint32_t M = 1000;
    CHECK(!policy_rwnd_idle(&w, 100, 5000, 10, M, MS(1))); /* starts the clock */
    CHECK(w.since == MS(1));
    CHECK(!policy_rwnd_idle(&w, 1100, 4500, 10, M, MS(11) - 1)); /* edge +500 of 1000: not consumed; early */
    CHECK(!policy_rwnd_idle(&w, 1100, 4500, 10, M, MS(11)));     /* shrank 500 < M */
    policy_rwnd w1 = w; /* (the same client, the bound one byte larger) */
    CHECK(policy_rwnd_idle(&w, 2100, 4000, 10, M, MS(12)));       /* shrank 1000: idle */
    CHECK(!policy_rwnd_idle(&w1, 2100, 4000, 10, M + 1, MS(12))); /* (1000 < 1001) */
    CHECK(w.since == MS(1) && w.wnd_max == 5000);
    CHECK(!policy_rwnd_idle(&w, 2100, 4000, 0, M, MS(12))); /* park_ms 0: never */
    /* edge at exactly half of what was acknowledged since: not consumed */
    CHECK(!policy_rwnd_consumed(&w, 3100, 5000 - 3000 / 2, MS(13)));
    CHECK(policy_rwnd_consumed(&w, 3100, 5000 - 3000 / 2 + 1, MS(13))); /* one more byte */
    CHECK(w.since == MS(13) && w.acked0 == 3100 && w.wnd_max == 3501);
    /* nothing acknowledged, whatever the time and the window */
    policy_rwnd z = {0};
    CHECK(!policy_rwnd_idle(&z, 100, 9000, 10, M, MS(1)));
    CHECK(!policy_rwnd_idle(&z, 100, 8000, 10, M, MS(500)));
    CHECK(!policy_rwnd_idle(&z, 100, 0, 10, M, MS(900))); /* a zero window: the byte rule's */
    /* random traces against the reference */
    rng_state = 0x3a11dull;
    for (int iter = 0; iter < 400; iter++) {
        enum { K = 48 };
        rwnd_sample h[K];
        policy_rwnd st = {0};
        int park_ms = (int)(rng_u64() % 80);
        uint32_t shrink = 1 + (uint32_t)(rng_u64() % 4000);
        uint64_t acked = rng_u64() % 1000, edge = acked + 2000 + rng_u64() % 6000;
        int64_t now = MS(1);
        for (int k = 0; k < K; k++) {
            now += MS(rng_u64() % 20);
            acked += rng_u64() % 4 ? rng_u64() % 700 : 0;
            if (acked > edge) acked = edge;
            switch (rng_u64() % 4) { /* the edge: still, creeping, a read, exactly half */
            case 1: edge += rng_u64() % 200; break;
            case 2: edge += rng_u64() % 3000; break;
            case 3: edge = h[k ? k - 1 : 0].acked + (acked - h[k ? k - 1 : 0].acked) / 2 + h[k ? k - 1 : 0].wnd; break;
            }
            if (edge < acked) edge = acked;
            h[k] = (rwnd_sample){now, acked, (uint32_t)(edge - acked)};
            bool got = policy_rwnd_idle(&st, acked, h[k].wnd, park_ms, shrink, now);
            if (got != ref_rwnd_idle(h, k, park_ms, shrink)) {
                CHECK_MSG(0, "rwnd trace %d step %d: idle %d, the reference %d", iter, k, got, !got);
                return;
            }
        }
    }
    /* the kernel's model: readers never idle, non-readers found early */
    for (int iter = 0; iter < 300; iter++) {
        const int park_ms = 500;
        const uint32_t shrink = 256 * 1024;
        bool reads = iter % 2;
        rwnd_peer p = {.space = (double)(1 << 20) * (4 + rng_u64() % 28), .cost = 1.0 + (rng_u64() % 200) / 100.0,
                       .scale = 7 + (int)(rng_u64() % 7)};
        p.cap = p.space - (double)(rng_u64() % (150 * 1024)); /* the promise is above the cap */
        p.edge = (uint64_t)p.space;
        uint32_t seg = 100 + (uint32_t)(rng_u64() % 4000);
        int every_ms = 1 + (int)(rng_u64() % 40), read_ms = 1 + (int)(rng_u64() % (park_ms / 2));
        policy_rwnd st = {0};
        int64_t now = MS(1), last_read = now;
        bool found = false;
        for (int k = 0; k < 200000 && !found; k++) {
            now += MS(every_ms);
            if (reads && now - last_read >= MS(read_ms)) p.unread = 0, last_read = now;
            if (p.cost * (p.unread + seg) > p.space) break; /* full */
            uint32_t wnd = peer_ack(&p, seg);
            found = policy_rwnd_idle(&st, p.acked, wnd, park_ms, shrink, now);
            if (found && reads) {
                CHECK_MSG(0, "a reader (every %d ms, %u-byte segments, cost %.2f) idle at %llu bytes", read_ms, seg,
                          p.cost, (unsigned long long)p.acked);
                return;
            }
        }
        if (reads) continue;
        /* the bytes the window needs to shrink by the bound, the cap's
         * distance from the promise, and park_ms of segments */
        double bound = (shrink + 150.0 * 1024) / (1 - 0.45) + (park_ms / every_ms + 2) * (double)seg;
        if (!found || p.acked > bound) {
            CHECK_MSG(0, "a non-reader (%u-byte segments every %d ms, cost %.2f, buffer %.0f) %s at %llu bytes", seg,
                      every_ms, p.cost, p.space, found ? "found late" : "not found", (unsigned long long)p.acked);
            return;
        }
    }
    CHECK(1);
}

/* What a finished turn leaves in the cache, case by case as policy.h
 * states it: a turn that asked for a pin (kv_pin, a TTL, a next_use_s,
 * 0 included) is pinned when it ended ok, never when cancelled or failed;
 * kv_ttl 0 pins nothing and drops the session's pins, even with kv_pin;
 * "done" pins nothing and drops the session's pins and hint; a turn that
 * asked for nothing is not pinned but still leaves its hint. */
static policy_turn turn(bool ok, bool pin, double ttl, double next, bool done) {
    return (policy_turn){.ended_ok = ok, .kv_pin = pin, .kv_ttl_s = ttl, .kv_next_use_s = next, .kv_done = done};
}

static bool keep_is(policy_keep k, bool drop_session, bool drop_hint, bool hint, bool pin) {
    return k.drop_session == drop_session && k.drop_hint == drop_hint && k.hint == hint && k.pin == pin;
}

static void test_turn_keep(void) {
    policy_turn t = turn(true, true, -1, -1, false);
    CHECK(keep_is(policy_turn_keep(&t), false, false, true, true)); /* kv_pin */
    t = turn(true, false, 30, -1, false);
    CHECK(keep_is(policy_turn_keep(&t), false, false, true, true)); /* a TTL */
    t = turn(true, false, -1, 0, false);
    CHECK(keep_is(policy_turn_keep(&t), false, false, true, true)); /* next_use_s 0 counts */
    t = turn(true, false, -1, -1, false);
    CHECK(keep_is(policy_turn_keep(&t), false, false, true, false)); /* asked for nothing */
    t = turn(false, true, 30, 5, false);
    CHECK(keep_is(policy_turn_keep(&t), false, false, false, false)); /* cancelled: nothing */
    t = turn(true, true, 0, 5, false);
    CHECK(keep_is(policy_turn_keep(&t), true, false, true, false)); /* kv_ttl 0 */
    t = turn(false, false, 0, -1, false);
    CHECK(keep_is(policy_turn_keep(&t), true, false, false, false)); /* (at admission) */
    t = turn(true, true, 30, 5, true);
    CHECK(keep_is(policy_turn_keep(&t), true, true, false, false)); /* "done" */
    t = turn(false, false, -1, -1, true);
    CHECK(keep_is(policy_turn_keep(&t), true, true, false, false));
}

/* The mask worker's share (policy.h, "The mask worker's share between
 * clients"). */
static int ref_pick_mask(const policy_mask_job *v, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (v[i].deferred) continue;
        bool before = true; /* i before best: a strict sort key (charge, cost, index) */
        if (best >= 0) {
            double ka[3] = {v[i].c_charge, (double)v[i].cost_ns, i}, kb[3] = {v[best].c_charge, (double)v[best].cost_ns,
                                                                             best};
            int k = 0;
            while (k < 3 && ka[k] == kb[k]) k++;
            before = ka[k] < kb[k];
        }
        if (before) best = i;
    }
    return best;
}

static void test_mask_share(void) {
    /* decay: halves every half-life; composes; no time, no decay */
    int64_t hl = MS(POLICY_MASK_HALF_LIFE_MS);
    CHECK(policy_decay(8, hl) == 4);
    CHECK(policy_decay(8, 2 * hl) == 2);
    CHECK(policy_decay(8, 0) == 8 && policy_decay(8, -5) == 8);
    double v = 1000, w = 1000;
    for (int i = 0; i < 16; i++) v = policy_decay(v, hl / 16);
    w /= 2;
    CHECK_MSG(v > w * 0.999999 && v < w * 1.000001, "16 sixteenths of a half-life: %f, want %f", v, w);

    /* deferral: past an equal share of the active clients' total, and only
     * with another client's sequence that can step */
    CHECK(!policy_mask_defer(100, 900, 9, 8));  /* exactly the share */
    CHECK(policy_mask_defer(101, 900, 9, 8));   /* past it */
    CHECK(!policy_mask_defer(101, 900, 9, 0));  /* nobody else could step: the CPU would idle */
    CHECK(!policy_mask_defer(900, 900, 1, 3));  /* alone: work conserving */
    CHECK(policy_mask_defer(600, 1000, 2, 1));
    CHECK(!policy_mask_defer(0, 0, 2, 1));      /* nothing charged yet */

    /* the pick against a sort on random queues */
    rng_state = 0x3a5cull;
    for (int iter = 0; iter < 3000; iter++) {
        enum { N = 24 };
        policy_mask_job q[N];
        int n = (int)(rng_u64() % (N + 1));
        for (int i = 0; i < n; i++)
            q[i] = (policy_mask_job){.c_charge = (double)(rng_u64() % 5), .cost_ns = (int64_t)(rng_u64() % 4),
                                     .deferred = rng_u64() % 3 == 0};
        int got = policy_pick_mask(q, n), want = ref_pick_mask(q, n);
        CHECK_MSG(got == want, "iteration %d: pick %d, reference %d", iter, got, want);
    }

    /* A simulated run, 1 ms at a time over 60 s: 8 agent clients, each one
     * decode row in every step of 80 ms forward; client 8's masks take 25 ms
     * of CPU each on the worker, one after the other whenever the rule lets
     * one start (its sequence always has its next mask queued). Charges as
     * the engine makes them: a step's time split among its rows at its end,
     * a mask's CPU when it is done. Its share of all the charges is at most
     * 1/9 (+ one mask's worth of slack); without the rule the worker would
     * spend the whole 60 s on its masks. */
    double ch[9] = {0};
    int64_t now = 0, step_end = MS(80), mask_end = -1;
    double mask_cpu = 0, step_cpu = 0;
    int n_masks = 0;
    for (; now < MS(60000); now += MS(1)) {
        for (int c = 0; c < 9; c++) ch[c] = policy_decay(ch[c], MS(1));
        if (now >= step_end) {
            for (int c = 0; c < 8; c++) ch[c] += MS(80) / 8.0;
            step_cpu += MS(80);
            step_end = now + MS(80);
        }
        if (mask_end >= 0 && now >= mask_end) {
            ch[8] += MS(25);
            mask_cpu += MS(25);
            n_masks++;
            mask_end = -1;
        }
        if (mask_end < 0) {
            double total = 0;
            for (int c = 0; c < 9; c++) total += ch[c];
            if (!policy_mask_defer(ch[8], total, 9, 8)) mask_end = now + MS(25);
        }
    }
    double share = mask_cpu / (mask_cpu + step_cpu);
    CHECK_MSG(share <= 1.0 / 9 + 0.01, "the masks' client took %.3f of the time (%d masks), its share is %.3f", share,
              n_masks, 1.0 / 9);
    CHECK_MSG(share >= 1.0 / 9 - 0.02, "the masks' client took %.3f of the time (%d masks): starved below its share",
              share, n_masks);
}

int main(void) {
    test_admit_order();
    test_gates();
    test_overdue_and_yield();
    test_after_try();
    test_kv_victim();
    test_fair_victim();
    test_random_picks();
    test_prefill();
    test_decode_share();
    test_decode_share_random();
    test_client_start();
    test_submit_check();
    test_admit_gate();
    test_stall();
    test_rwnd();
    test_turn_keep();
    test_mask_share();
    return test_summary("test_policy");
}
