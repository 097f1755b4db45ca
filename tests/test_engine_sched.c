/*
 * test_engine_sched.c — the engine (sched/engine.h) without HTTP, under
 * stress: many requests with shared prefixes (so blocks are shared, joined
 * while PENDING, evicted and recomputed), a tiny KV pool (so sequences are
 * preempted), small token budgets (so prefills are chunked), random
 * cancellations at random times, and the pool/tree checker after every step.
 *
 * Reference: each request run alone on a roomy engine. Every request that is
 * not cancelled must produce exactly the reference tokens — greedy and also
 * seeded sampling (the sampler's RNG survives preemption) — and when all is
 * done no block may be held outside the prefix cache.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "sched/engine.h"
#include "sched/req.h"
#include "test.h"

enum { N_REQ = 24, MAX_GEN = 40 };

static uint64_t rs = 0x1234567ull;
static unsigned rnd(unsigned n) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (unsigned)(rs % n);
}

typedef struct spec {
    int32_t prompt[400];
    int n_prompt;
    int max_tokens;
    float temperature;
    uint64_t seed;
    int32_t ref[MAX_GEN];
    int n_ref;
} spec;

static req *make_req(const spec *s) {
    int32_t *p = xmalloc((size_t)s->n_prompt * sizeof *p);
    memcpy(p, s->prompt, (size_t)s->n_prompt * sizeof *p);
    req *r = req_new(p, s->n_prompt);
    r->max_tokens = s->max_tokens;
    r->ignore_eos = true;
    r->sp.temperature = s->temperature;
    r->sp.top_k = 40;
    r->sp.seed = s->seed;
    return r;
}

/* Waits for the end; copies up to MAX_GEN tokens. Returns the finish. */
static req_finish collect(req *r, int32_t *out, int *n_out) {
    req_finish f = REQ_RUNNING;
    int n = 0;
    for (int spins = 0; spins < 60000; spins++) {
        n = req_wait(r, n, 100, &f);
        if (f != REQ_RUNNING) break;
    }
    n = req_wait(r, 0, 0, &f);
    req_token *t = xmalloc((size_t)(n ? n : 1) * sizeof *t);
    req_copy_tokens(r, 0, n, t);
    for (int i = 0; i < n && i < MAX_GEN; i++) out[i] = t[i].id;
    *n_out = n;
    free(t);
    return f;
}

/* A request of n random tokens (after BOS) that generates 2 tokens. */
static req *order_req(int n, int nv) {
    int32_t *p = xmalloc((size_t)n * sizeof *p);
    for (int i = 0; i < n; i++) p[i] = i == 0 ? 1 : (int32_t)(3 + rnd((unsigned)nv - 3));
    req *r = req_new(p, n);
    r->max_tokens = 2;
    r->ignore_eos = true;
    r->sp.temperature = 0;
    return r;
}

static int64_t first_token_ns(req *r) {
    req_finish f = REQ_RUNNING;
    int n = 0;
    for (int spins = 0; spins < 60000 && f == REQ_RUNNING; spins++) n = req_wait(r, n, 100, &f);
    return r->t_first_ns;
}

/* check_prefill_order's plan_hook: in the first step that runs a chunk of
 * the long prompt, it submits the short ones, so they arrive together (the
 * next step) while the long one is under way, whatever the timing. */
typedef struct order_hook_ctx {
    engine *en;
    const req *lng;
    req *sh[3];
    _Atomic int fired; /* 1: submitted, 2: a submission failed */
} order_hook_ctx;
static void order_hook(void *ctx, uint64_t step, const engine_plan_row *rows, int n) {
    order_hook_ctx *c = ctx;
    (void)step;
    if (atomic_load(&c->fired)) return;
    for (int i = 0; i < n; i++)
        if (rows[i].r == c->lng && rows[i].prefill) {
            err_t e = {0};
            int bad = 0;
            for (int k = 0; k < 3; k++) bad |= engine_submit(c->en, c->sh[k], &e) != 0;
            atomic_store(&c->fired, bad ? 2 : 1);
            return;
        }
}

/* Prefill order (sched/policy.h, POLICY_PREFILL_*): the shortest remaining
 * prefill goes first, so turns that arrive while a long prompt is
 * prefilling get their first tokens before it and in order of size; and a
 * long prompt under a steady stream of turns still advances (it finishes
 * before the stream does). Steps are slowed down so that the stream's
 * requests, submitted back to back, land in the same step. */
static void check_prefill_order(const model *m) {
    const int nv = m->cfg.n_vocab;
    static order_hook_ctx hc;
    engine_opts o = engine_defaults();
    o.n_threads = 1;
    o.kv_mem_bytes = model_kv_block_bytes(m, 16) * 1024;
    o.max_batch_tokens = 64;
    o.step_delay_us = 3000;
    o.check = true;
    o.plan_hook = order_hook;
    o.plan_hook_ctx = &hc;
    err_t e = {0};
    engine *en = NULL;
    CHECK(engine_new(m, &o, &en, &e) == 0);
    if (!en) return;
    req *lng = order_req(400, nv);
    const int sizes[3] = {90, 20, 50};
    req **sh = hc.sh;
    for (int i = 0; i < 3; i++) sh[i] = order_req(sizes[i], nv);
    hc.en = en;
    hc.lng = lng;
    CHECK(engine_submit(en, lng, &e) == 0); /* the short ones: order_hook */
    for (int i = 0; i < 10000 && !atomic_load(&hc.fired); i++) usleep(1000);
    if (atomic_load(&hc.fired) != 1) { /* (not submitted: nothing to wait for) */
        CHECK_MSG(0, "the short prompts were not submitted (%d)", atomic_load(&hc.fired));
        engine_free(en);
        for (int i = 0; i < 3; i++) req_unref(sh[i]);
        req_unref(lng);
        return;
    }
    const int64_t t90 = first_token_ns(sh[0]), t20 = first_token_ns(sh[1]), t50 = first_token_ns(sh[2]);
    const int64_t tl = first_token_ns(lng);
    CHECK(t20 > 0 && t50 > 0 && t90 > 0 && tl > 0);
    CHECK_MSG(t20 <= t50 && t50 <= t90, "first tokens not in order of prompt size: 20 at %lld, 50 at %lld, 90 at %lld",
              (long long)t20, (long long)t50, (long long)t90);
    CHECK_MSG(t90 < tl, "a 90-token prompt waited behind a 400-token one");
    for (int i = 0; i < 3; i++) req_unref(sh[i]);
    req_unref(lng);

    /* Starvation: 100 turns of 70 tokens (more than a step's 64) queued
     * together with a long prompt; the long one must not wait for all. */
    enum { N_STREAM = 100 };
    lng = order_req(400, nv);
    CHECK(engine_submit(en, lng, &e) == 0);
    req *st[N_STREAM];
    for (int i = 0; i < N_STREAM; i++) {
        st[i] = order_req(70, nv);
        CHECK(engine_submit(en, st[i], &e) == 0);
    }
    const int64_t t_long = first_token_ns(lng);
    int64_t t_last = 0;
    for (int i = 0; i < N_STREAM; i++) {
        const int64_t t = first_token_ns(st[i]);
        t_last = t > t_last ? t : t_last;
        req_unref(st[i]);
    }
    CHECK_MSG(t_long > 0 && t_long < t_last, "a long prompt starved behind a stream of short ones");
    req_unref(lng);
    engine_free(en);
}

/* The engine's clock (engine_opts.clock), moved by the test, and the
 * engine's step count (plan_hook). */
static _Atomic int64_t fake_ns;
static _Atomic uint64_t fake_steps;
static int64_t fake_clock(void *ctx) {
    (void)ctx;
    return atomic_load(&fake_ns);
}
static void count_step(void *ctx, uint64_t step, const engine_plan_row *rows, int n) {
    (void)ctx, (void)rows, (void)n;
    atomic_store(&fake_steps, step);
}
/* Waits (10 s at most) until the engine ran k more steps. */
static void wait_steps(int k) {
    uint64_t s0 = atomic_load(&fake_steps);
    for (int i = 0; i < 10000 && atomic_load(&fake_steps) < s0 + (uint64_t)k; i++) usleep(1000);
}
/* Tokens posted to r so far, without taking any (its reader stays at 0). */
static int posted(req *r, req_finish *f) { return req_wait(r, 0, 0, f); }

static req *clock_req(int max_tokens) {
    int32_t *p = xmalloc(8 * sizeof *p);
    for (int i = 0; i < 8; i++) p[i] = i == 0 ? 1 : 100 + 7 * i;
    req *r = req_new(p, 8);
    r->max_tokens = max_tokens;
    r->ignore_eos = true;
    r->sp.temperature = 0;
    return r;
}

/* A new conversation is not starved by agents that keep coming back (agent
 * policy): three agents with pinned 10-block contexts return every 100 ms
 * (of the engine's clock, moved by the test: a returning agent is admitted
 * first and re-pins), in a 48-block pool, while a new 30-block prompt waits.
 * A new conversation may not take a protected pin, so it waited as long as
 * the agents kept coming (the soak's 1,500-token prompts timed out after
 * 120 s); once it has waited strictly longer than new_wait_max_ms (500
 * here) it is served like running work. Exact on the injected clock: no
 * token before the wait passes 500 ms (the turns at +100 .. +500 ms), its
 * answer in the turn after (+600 ms). */
static void check_new_not_starved(const model *m) {
    engine_opts o = engine_defaults();
    o.n_threads = 1;
    o.kv_policy = ENGINE_KV_AGENT;
    o.kv_ttl_max_s = 60;
    o.kv_mem_bytes = model_kv_block_bytes(m, 16) * 48;
    o.new_wait_max_ms = 500;
    o.clock = fake_clock;
    atomic_store(&fake_ns, (int64_t)1 << 41);
    engine *en = NULL;
    err_t e;
    CHECK(engine_new(m, &o, &en, &e) == 0);
    if (!en) return;
    int nv = m->cfg.n_vocab;
    int32_t base[3][160];
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < 160; i++) base[a][i] = i == 0 ? 1 : (int32_t)(3 + rnd((unsigned)nv - 3));
    req *big = NULL;
    req_finish fb = REQ_RUNNING;
    int n_turns = 0, done_turn = -1;
    for (int turn = 0; turn < 10 && done_turn < 0; turn++) {
        for (int a = 0; a < 3; a++) {
            int n = 160 + turn % 8; /* the conversation grows a little, its prefix stays */
            int32_t *p = xmalloc((size_t)n * sizeof *p);
            memcpy(p, base[a], sizeof base[a]);
            for (int i = 160; i < n; i++) p[i] = 3 + (int32_t)((a * 7 + i) % (nv - 3));
            req *r = req_new(p, n);
            r->max_tokens = 2;
            r->ignore_eos = true;
            r->sp.temperature = 0;
            r->kv_pin = true;
            r->kv_session = 0x5e55100ull + (uint64_t)a;
            r->kv_ttl_s = -1;
            if (engine_submit(en, r, &e) == 0) {
                req_finish f = REQ_RUNNING;
                for (int spins = 0; spins < 600 && f == REQ_RUNNING; spins++) req_wait(r, 0, 100, &f);
                n_turns++;
            }
            req_unref(r);
        }
        if (turn == 0) { /* the agents' contexts are pinned: now the new one */
            int32_t *p = xmalloc(480 * sizeof *p);
            for (int i = 0; i < 480; i++) p[i] = i == 0 ? 1 : (int32_t)(3 + rnd((unsigned)nv - 3));
            big = req_new(p, 480);
            big->max_tokens = 4;
            big->ignore_eos = true;
            big->sp.temperature = 0;
            CHECK(engine_submit(en, big, &e) == 0);
        }
        if (turn == 6) /* overdue since the clock moved to +600 ms: served now */
            for (int spins = 0; spins < 100 && fb == REQ_RUNNING; spins++) req_wait(big, 0, 100, &fb);
        if (req_wait(big, 0, 0, &fb) > 0 && done_turn < 0) done_turn = turn;
        atomic_fetch_add(&fake_ns, 100 * 1000000ll);
    }
    CHECK_MSG(done_turn == 6, "the new 480-token prompt got its first token in turn %d (+%d ms), not at +600 ms",
              done_turn, done_turn * 100);
    CHECK_MSG(fb == REQ_FINISH_LENGTH, "the new prompt ended with %d", (int)fb);
    printf("  new 480-token prompt served in turn %d among %d agent turns\n", done_turn, n_turns);
    if (big) {
        req_cancel(big);
        req_unref(big);
    }
    engine_free(en);
}

/* The backpressure rules on an injected clock, at their exact boundaries
 * (before, the server tests could only sleep past them): a reader that
 * takes nothing is cut when its posted tokens have waited strictly longer
 * than stall_timeout_ms (not at exactly that long), and parked strictly
 * after park_ms: then it generates nothing, and once its reader takes
 * everything it resumes and ends with the tokens it gives unparked. */
static void check_clock_backpressure(const model *m) {
    engine_opts o = engine_defaults();
    o.n_threads = 1;
    o.kv_mem_bytes = model_kv_block_bytes(m, 16) * 64;
    o.step_delay_us = 1000;
    o.check = true;
    o.clock = fake_clock;
    o.plan_hook = count_step;
    const int64_t t0 = (int64_t)1 << 40;
    err_t e = {0};
    req_finish f;
    engine_stats st;

    /* stall_timeout_ms 1000 */
    atomic_store(&fake_ns, t0);
    o.stall_timeout_ms = 1000;
    engine *en = NULL;
    CHECK(engine_new(m, &o, &en, &e) == 0);
    if (!en) return;
    req *r = clock_req(400);
    CHECK(engine_submit(en, r, &e) == 0);
    for (int i = 0; i < 10000 && posted(r, &f) < 2 && f == REQ_RUNNING; i++) usleep(1000);
    atomic_store(&fake_ns, t0 + 1000 * 1000000ll); /* waited exactly the timeout */
    wait_steps(3);
    int n_at = posted(r, &f);
    CHECK_MSG(f == REQ_RUNNING, "cut at exactly stall_timeout_ms (finish %d)", (int)f);
    atomic_store(&fake_ns, t0 + 1000 * 1000000ll + 1);
    for (int i = 0; i < 10000 && f == REQ_RUNNING; i++) usleep(1000), posted(r, &f);
    char msg[256] = "";
    req_get_finish(r, NULL, msg, sizeof msg);
    engine_get_stats(en, &st);
    CHECK_EQ_INT(f, REQ_FINISH_CANCEL);
    CHECK_MSG(strstr(msg, "did not read its output"), "cut with \"%s\"", msg);
    CHECK_EQ_INT((int)st.stalled_total, 1);
    CHECK_MSG(posted(r, &f) < 400 && n_at >= 2, "%d tokens at the timeout", n_at);
    req_unref(r);
    engine_free(en);

    /* park_ms 300 (no stall timeout) */
    atomic_store(&fake_ns, t0);
    o.stall_timeout_ms = 0;
    o.park_ms = 300;
    CHECK(engine_new(m, &o, &en, &e) == 0);
    if (!en) return;
    enum { N_GEN = MAX_GEN }; /* collect copies at most MAX_GEN tokens */
    int32_t ref[N_GEN], out[N_GEN];
    int n_ref = 0, n_out = 0;
    r = clock_req(N_GEN); /* read as it comes: never parked (the clock stands still) */
    CHECK(engine_submit(en, r, &e) == 0);
    CHECK_EQ_INT(collect(r, ref, &n_ref), REQ_FINISH_LENGTH);
    req_unref(r);
    r = clock_req(N_GEN);
    CHECK(engine_submit(en, r, &e) == 0);
    for (int i = 0; i < 10000 && posted(r, &f) < 2 && f == REQ_RUNNING; i++) usleep(1000);
    atomic_store(&fake_ns, t0 + 300 * 1000000ll);
    wait_steps(3);
    engine_get_stats(en, &st);
    CHECK_MSG(st.n_parked == 0, "parked at exactly park_ms");
    atomic_store(&fake_ns, t0 + 300 * 1000000ll + 1);
    for (int i = 0; i < 10000 && st.n_parked == 0; i++) usleep(1000), engine_get_stats(en, &st);
    CHECK_EQ_INT(st.n_parked, 1);
    int p1 = posted(r, &f);
    wait_steps(3);
    CHECK_MSG(posted(r, &f) == p1 && f == REQ_RUNNING, "a parked request went on: %d tokens, then %d", p1,
              posted(r, &f));
    CHECK_EQ_INT(collect(r, out, &n_out), REQ_FINISH_LENGTH); /* reads everything: unparked */
    CHECK_MSG(n_out == n_ref && !memcmp(out, ref, (size_t)n_ref * sizeof *out), "parked and resumed: other tokens");
    engine_get_stats(en, &st);
    CHECK_EQ_INT((int)st.parked_total, 1);
    CHECK_EQ_INT(st.n_parked, 0);
    req_unref(r);
    engine_free(en);
}

/* Parking and the per-client parked limit on the injected clock, step by
 * step (test_server_backpressure checks them end to end over sockets, where
 * it can only wait "until it happens"): a sequence whose reader holds its
 * client's bytes (reader_blocked: --park-bytes) is parked at its next step
 * with the clock standing still, one whose reader takes nothing only
 * strictly after park_ms; parked sequences hold no slot and no block
 * outside the prefix cache; their client, at client_max_parked (2), is
 * refused with the limit named while another client is served; a parked
 * sequence whose reader takes everything resumes and ends normally. */
static void check_clock_parked_limit(const model *m) {
    engine_opts o = engine_defaults();
    o.n_threads = 1;
    o.kv_mem_bytes = model_kv_block_bytes(m, 16) * 64;
    o.step_delay_us = 1000; /* 480 tokens take >= 0.48 s: neither ends before it is parked */
    o.check = true;
    o.clock = fake_clock;
    o.plan_hook = count_step;
    o.park_ms = 300;
    o.client_max_parked = 2;
    const int64_t t0 = (int64_t)1 << 40;
    atomic_store(&fake_ns, t0);
    engine *en = NULL;
    err_t e = {0};
    CHECK(engine_new(m, &o, &en, &e) == 0);
    if (!en) return;
    req *a = clock_req(480), *b = clock_req(480);
    a->client = b->client = 0x57;
    CHECK(engine_submit(en, a, &e) == 0);
    CHECK(engine_submit(en, b, &e) == 0);
    req_finish fa = REQ_RUNNING, fb = REQ_RUNNING;
    for (int i = 0; i < 10000 && (posted(a, &fa) < 2 || posted(b, &fb) < 2) && fa == REQ_RUNNING; i++) usleep(1000);
    engine_stats st;
    atomic_store(&a->reader_blocked, true); /* a: its client's bytes past the bound */
    engine_get_stats(en, &st);
    for (int i = 0; i < 10000 && st.n_parked < 1; i++) usleep(1000), engine_get_stats(en, &st);
    CHECK_MSG(st.n_parked == 1, "a blocked reader was not parked with the clock standing still (%d parked)",
              st.n_parked);
    atomic_store(&fake_ns, t0 + 300 * 1000000ll); /* b's reader took nothing for exactly park_ms */
    wait_steps(3);
    engine_get_stats(en, &st);
    CHECK_MSG(st.n_parked == 1, "parked at exactly park_ms (%d parked)", st.n_parked);
    atomic_store(&fake_ns, t0 + 300 * 1000000ll + 1);
    for (int i = 0; i < 10000 && st.n_parked < 2; i++) usleep(1000), engine_get_stats(en, &st);
    wait_steps(2); /* (the counts of the step that parked it are published) */
    engine_get_stats(en, &st);
    CHECK_EQ_INT(st.n_parked, 2);
    CHECK_MSG(st.n_running == 0 && st.kv_blocks_used == st.kv_blocks_cached,
              "parked sequences hold capacity: %d running, %d blocks used, %d cached", st.n_running,
              st.kv_blocks_used, st.kv_blocks_cached);
    CHECK_MSG(posted(a, &fa) < 480 && posted(b, &fb) < 480 && fa == REQ_RUNNING && fb == REQ_RUNNING,
              "a parked sequence ended (%d, %d)", (int)fa, (int)fb);
    /* their client is at client_max_parked; another is served */
    req *c = clock_req(4), *d = clock_req(4);
    c->client = 0x57, d->client = 0x58;
    e.msg[0] = 0;
    CHECK_EQ_INT(engine_submit(en, c, &e), ERR_RANGE);
    CHECK_MSG(strstr(e.msg, "client-max-parked 2") != NULL, "refusal: %s", e.msg);
    CHECK(engine_submit(en, d, &e) == 0);
    int32_t out[MAX_GEN];
    int n_out = 0;
    CHECK_EQ_INT(collect(d, out, &n_out), REQ_FINISH_LENGTH);
    CHECK_EQ_INT(n_out, 4);
    engine_get_stats(en, &st);
    CHECK_EQ_INT((int)st.client_refused_total, 1);
    CHECK_EQ_INT((int)st.parked_total, 2);
    /* a's reader takes everything and is no longer blocked: a resumes */
    atomic_store(&a->reader_blocked, false);
    CHECK_EQ_INT(collect(a, out, &n_out), REQ_FINISH_LENGTH);
    CHECK_EQ_INT(n_out, 480);
    req_cancel(b);
    CHECK_EQ_INT(collect(b, out, &n_out), REQ_FINISH_CANCEL);
    req_unref(a), req_unref(b), req_unref(c), req_unref(d);
    engine_free(en);
}

/* The queue count between a request's hand-over and the step's end: the
 * engine takes submitted requests into its waiting list at a step's start
 * and published its counts only at the step's end, so during that step a
 * request was in neither count — /metrics showed 0 waiting, and
 * engine_submit let one more in past max_queue (seen as a flaky 429 probe
 * under TSan, whose slow steps widen the window). One running, then one
 * submitted (max_queue 1) twenty times over: in the 30 ms after each
 * submission, every read of the counts (a tight loop, so the step after the
 * submission is covered) must see it waiting, and every further submission
 * is refused. */
static void check_queue_count(const model *m) {
    engine_opts o = engine_defaults();
    o.n_threads = 1;
    o.max_running = 1;
    o.max_queue = 1;
    engine *en = NULL;
    err_t e;
    CHECK(engine_new(m, &o, &en, &e) == 0);
    if (!en) return;
    req *r1 = order_req(4, m->cfg.n_vocab);
    r1->max_tokens = 100000; /* runs to the context's end, cancelled below */
    CHECK(engine_submit(en, r1, &e) == 0);
    req_finish f = REQ_RUNNING;
    for (int spins = 0; spins < 600 && req_wait(r1, 0, 100, &f) == 0 && f == REQ_RUNNING; spins++) {}
    int n_bad = 0, n_admitted = 0, n_refused = 0;
    long n_reads = 0;
    for (int rep = 0; rep < 20; rep++) {
        req *r2 = order_req(4, m->cfg.n_vocab);
        r2->max_tokens = 100;
        if (engine_submit(en, r2, &e) != 0) n_refused++;
        engine_stats st;
        int64_t t0 = clock_ns(), next_try = 0;
        while (clock_ns() - t0 < 30000000LL) {
            engine_get_stats(en, &st);
            n_reads++;
            if (st.n_waiting != 1 || st.n_running != 1) n_bad++;
            if (clock_ns() >= next_try) {
                req *r3 = order_req(4, m->cfg.n_vocab);
                if (engine_submit(en, r3, &e) == 0) {
                    n_admitted++;
                    req_cancel(r3);
                }
                req_unref(r3);
                next_try = clock_ns() + 1000000;
            }
        }
        req_cancel(r2);
        for (int spins = 0; spins < 600; spins++) {
            req_wait(r2, 0, 100, &f);
            if (f != REQ_RUNNING) break;
        }
        req_unref(r2);
    }
    CHECK_MSG(n_refused == 0, "%d of 20 submissions refused with nothing waiting", n_refused);
    CHECK_MSG(n_bad == 0, "%d of %ld reads saw other than 1 running and 1 waiting", n_bad, n_reads);
    CHECK_MSG(n_admitted == 0, "%d requests admitted past max_queue 1", n_admitted);
    req_cancel(r1);
    engine_free(en);
    req_unref(r1);
}

int main(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    model *m = NULL;
    err_t e = {0};
    if (model_load(path, &m, &e) < 0) {
        CHECK_MSG(0, "model_load: %s", e.msg);
        return test_summary("test_engine_sched");
    }
    int nv = m->cfg.n_vocab;

    /* Three shared "system prompts" and per-request suffixes. */
    int32_t fam[3][300];
    int fam_n[3] = {150, 230, 97};
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < fam_n[f]; i++) fam[f][i] = i == 0 ? 1 : (int32_t)(3 + rnd((unsigned)nv - 3));
    static spec specs[N_REQ];
    for (int k = 0; k < N_REQ; k++) {
        spec *s = &specs[k];
        int f = (int)rnd(3);
        memcpy(s->prompt, fam[f], (size_t)fam_n[f] * sizeof(int32_t));
        s->n_prompt = fam_n[f];
        int extra = k % 5 == 0 ? 0 : (int)rnd(60); /* some are exactly the shared prefix */
        for (int i = 0; i < extra; i++) s->prompt[s->n_prompt++] = (int32_t)(3 + rnd((unsigned)nv - 3));
        s->max_tokens = 8 + (int)rnd(MAX_GEN - 8);
        s->temperature = k % 3 == 0 ? 0.8f : 0.0f;
        s->seed = 1000 + (uint64_t)k;
    }

    /* References: one at a time on a roomy engine. */
    engine_opts o = engine_defaults();
    o.n_threads = 2;
    o.kv_mem_bytes = model_kv_block_bytes(m, 16) * 512;
    o.check = true;
    engine *ref = NULL;
    CHECK(engine_new(m, &o, &ref, &e) == 0);
    if (!ref) {
        model_free(m);
        return test_summary("test_engine_sched");
    }
    for (int k = 0; k < N_REQ; k++) {
        req *r = make_req(&specs[k]);
        CHECK(engine_submit(ref, r, &e) == 0);
        req_finish f = collect(r, specs[k].ref, &specs[k].n_ref);
        CHECK_EQ_INT(f, REQ_FINISH_LENGTH);
        CHECK_EQ_INT(specs[k].n_ref, specs[k].max_tokens);
        req_unref(r);
    }
    engine_free(ref);

    /* Stress rounds: a pool of 40 blocks (640 tokens) for 24 requests of up
     * to ~330 tokens each, small budgets, random cancellations. */
    int budgets[3] = {48, 100, 16};
    for (int round = 0; round < 3; round++) {
        engine_opts so = engine_defaults();
        so.n_threads = 2;
        so.kv_mem_bytes = model_kv_block_bytes(m, 16) * 40;
        so.max_batch_tokens = budgets[round];
        so.max_running = 6;
        so.max_queue = 1000;
        so.check = true;
        engine *en = NULL;
        CHECK(engine_new(m, &so, &en, &e) == 0);
        if (!en) break;
        req *rs_[N_REQ];
        bool cancel[N_REQ];
        for (int k = 0; k < N_REQ; k++) {
            rs_[k] = make_req(&specs[k]);
            cancel[k] = rnd(4) == 0;
            CHECK(engine_submit(en, rs_[k], &e) == 0);
        }
        /* Cancel some at random moments while the others run. */
        for (int k = 0; k < N_REQ; k++)
            if (cancel[k]) {
                usleep(rnd(3000));
                req_cancel(rs_[k]);
            }
        int n_ok = 0;
        for (int k = 0; k < N_REQ; k++) {
            int32_t got[MAX_GEN];
            int n_got = 0;
            req_finish f = collect(rs_[k], got, &n_got);
            if (cancel[k]) {
                CHECK(f == REQ_FINISH_CANCEL || f == REQ_FINISH_LENGTH);
            } else {
                CHECK_EQ_INT(f, REQ_FINISH_LENGTH);
                CHECK_MSG(n_got == specs[k].n_ref && !memcmp(got, specs[k].ref, (size_t)n_got * sizeof *got),
                          "round %d request %d (T=%.1f): output differs from the reference", round, k,
                          specs[k].temperature);
                n_ok++;
            }
            /* Whatever was produced before a cancel is a prefix of the reference. */
            if (cancel[k] && n_got <= specs[k].n_ref)
                CHECK(!memcmp(got, specs[k].ref, (size_t)n_got * sizeof *got));
            req_unref(rs_[k]);
        }
        engine_stats st;
        for (int w = 0; w < 200; w++) {
            engine_get_stats(en, &st);
            if (st.n_running == 0 && st.n_waiting == 0) break;
            usleep(10000);
        }
        CHECK_EQ_INT(st.n_running, 0);
        CHECK_EQ_INT(st.n_waiting, 0);
        CHECK_MSG(st.kv_blocks_used == st.kv_blocks_cached, "round %d: %d blocks used, %d cached", round,
                  st.kv_blocks_used, st.kv_blocks_cached);
        CHECK_MSG(st.preemptions_total > 0, "round %d: no preemption", round);
        CHECK(st.prompt_tokens_cached_total > 0);
        CHECK(n_ok > 0);
        engine_free(en);
    }

    check_prefill_order(m);
    check_queue_count(m);
    check_new_not_starved(m);
    check_clock_backpressure(m);
    check_clock_parked_limit(m);

    /* Refusals: a prompt longer than the context or the pool; a full queue. */
    engine_opts qo = engine_defaults();
    qo.n_threads = 1;
    qo.kv_mem_bytes = model_kv_block_bytes(m, 16) * 8;
    qo.max_queue = 0;
    engine *q = NULL;
    CHECK(engine_new(m, &qo, &q, &e) == 0);
    if (q) {
        req *r = make_req(&specs[0]); /* >= 97 tokens: more than 7 blocks of 16? */
        int32_t *big = xcalloc(200, sizeof *big);
        req *rb = req_new(big, 200);
        CHECK_EQ_INT(engine_submit(q, rb, &e), ERR_INVALID); /* 13 blocks > 8 */
        int32_t *one = xcalloc(1, sizeof *one);
        req *r1 = req_new(one, 1);
        CHECK_EQ_INT(engine_submit(q, r1, &e), ERR_RANGE); /* max_queue 0 */
        req_unref(r);
        req_unref(rb);
        req_unref(r1);
        engine_free(q);
    }
    engine_opts bad = engine_defaults();
    bad.kv_mem_bytes = 10;
    engine *nb = NULL;
    CHECK(engine_new(m, &bad, &nb, &e) == ERR_RANGE && nb == NULL);
    bad = engine_defaults();
    bad.kv_mem_bytes = (size_t)1 << 50; /* more than any test machine holds */
    CHECK(engine_new(m, &bad, &nb, &e) == ERR_RANGE && nb == NULL);
    bad = engine_defaults();
    bad.max_batch_tokens = 0;
    CHECK(engine_new(m, &bad, &nb, &e) == ERR_INVALID && nb == NULL);
    model_free(m);
    return test_summary("test_engine_sched");
}
