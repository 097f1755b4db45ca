/* test_kvpolicy.c — sched/kvpolicy: pins with a predicted time-to-live, on a
 * real kvpool (the pins' references are checked there) and an injected clock
 * (no sleeps): TTL expiry at the predicted instant, prediction from observed
 * gaps (per tool, per session, overall, and the default before any), a tool
 * learnt after the pin re-predicting it, explicit kv_ttl / next_use_s and the
 * --kv-ttl-max clamp, yield order (furthest predicted return first), resume
 * by the matched blocks or by the session, supersede, release by hint, the
 * bound on the number of pins, the TTL-error statistics, and the reasons
 * counted, and the whole eviction order (LRU leaves, then pins as they
 * yield, with a real radix tree) block by block. The expected numbers are computed here from the documented
 * formula (kvpolicy.h), not read back from the module. */
#include <math.h>

#include <stdio.h>
#include <string.h>

#include "kv/kvpool.h"
#include "kv/radix.h"
#include "sched/kvpolicy.h"
#include "test.h"

#define S(x) ((int64_t)((x) * 1e9))

/* n fresh blocks (refcount 1 each, handed to a pin). */
static void fresh(kvpool *p, int32_t *b, int n) {
    for (int i = 0; i < n; i++) b[i] = kvpool_alloc(p);
}

/* The TTL the header's formula gives for gap, with k's mean prediction
 * error so far (its sum is checked against the trace in test_prediction). */
static double expected_ttl(const kvpolicy *k, double gap, double ttl_max) {
    kvpolicy_stats st;
    kvpolicy_get_stats(k, &st);
    double err = st.ttl_error_count ? st.ttl_error_sum_s / (double)st.ttl_error_count : 0;
    double t = KVPOLICY_TTL_FACTOR * gap + KVPOLICY_TTL_SLACK_S + KVPOLICY_TTL_ERR_MULT * err;
    if (t < KVPOLICY_TTL_MIN_S) t = KVPOLICY_TTL_MIN_S;
    return t > ttl_max ? ttl_max : t;
}

static void test_expiry_and_default(void) {
    kvpool *p = kvpool_new(16);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    int32_t b[4];
    fresh(p, b, 4);
    CHECK_EQ_INT(kvpool_n_free(p), 12);
    double ttl = kvpolicy_pin(k, b, 4, 0, NULL, -1, -1, 1, S(100));
    CHECK_MSG(fabs(ttl - 10) < 1e-9, "default TTL %g", ttl); /* nothing observed yet: the default */
    CHECK_EQ_INT(kvpool_n_free(p), 12);                      /* the pin holds the references */
    CHECK_EQ_INT(kvpolicy_expire(k, S(109.999)), 0);
    CHECK_EQ_INT(kvpool_n_free(p), 12);
    CHECK_EQ_INT(kvpolicy_expire(k, S(110)), 1);
    CHECK_EQ_INT(kvpool_n_free(p), 16);
    kvpolicy_stats st;
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT(st.n_pins, 0);
    CHECK_EQ_INT(st.n_pinned_refs, 0);
    CHECK_EQ_INT((int)st.released[KVPOL_EXPIRED], 1);
    kvpolicy_free(k);
    /* a cap below the default bounds it */
    k = kvpolicy_new(p, 5, 0);
    CHECK(fabs(kvpolicy_predict_ttl(k, 0, NULL) - 5) < 1e-9);
    kvpolicy_free(k);
    kvpool_free(p);
}

static void test_prediction(void) {
    kvpool *p = kvpool_new(64);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    uint64_t sa = kvpolicy_session_hash("agent-a"), sb = kvpolicy_session_hash("agent-b");
    CHECK(sa != 0 && sb != 0 && sa != sb && kvpolicy_session_hash("") == 0 && kvpolicy_session_hash(NULL) == 0);
    int32_t b[3];
    fresh(p, b, 3);
    kvpolicy_pin(k, b, 3, sa, "search", -1, -1, 1, S(0));
    /* agent a comes back 4 s later with the same prefix and more */
    int32_t m[4] = {b[0], b[1], b[2], kvpool_alloc(p)};
    CHECK(kvpolicy_resume(k, m, 4, sa, S(4)));
    kvpool_unref(p, m[3]);
    CHECK_EQ_INT(kvpool_n_free(p), 64); /* the pin's references are gone */
    double t4 = expected_ttl(k, 4, 60);
    CHECK(fabs(kvpolicy_predict_ttl(k, sa, "search") - t4) < 1e-9);
    CHECK(fabs(kvpolicy_predict_ttl(k, sb, "search") - t4) < 1e-9);   /* by the tool */
    CHECK(fabs(kvpolicy_predict_ttl(k, sa, "other") - t4) < 1e-9);    /* by the session */
    CHECK(fabs(kvpolicy_predict_ttl(k, sb, NULL) - t4) < 1e-9);       /* overall */
    /* another tool with a long gap: its own prediction, the overall average moves */
    fresh(p, b, 2);
    kvpolicy_pin(k, b, 2, sb, "build", -1, -1, 2, S(10));
    CHECK(kvpolicy_resume(k, b, 2, 0, S(30))); /* by the blocks: 20 s */
    CHECK(fabs(kvpolicy_predict_ttl(k, 0, "build") - expected_ttl(k, 20, 60)) < 1e-9);
    CHECK(fabs(kvpolicy_predict_ttl(k, 0, "search") - expected_ttl(k, 4, 60)) < 1e-9); /* (a wider margin now) */
    CHECK(expected_ttl(k, 4, 60) > t4);
    double overall = 4 + 0.3 * (20 - 4);
    CHECK_MSG(fabs(kvpolicy_predict_ttl(k, 0, NULL) - expected_ttl(k, overall, 60)) < 1e-9, "overall %g",
              kvpolicy_predict_ttl(k, 0, NULL));
    /* a session's average follows its gaps (EMA) */
    fresh(p, b, 1);
    kvpolicy_pin(k, b, 1, sa, NULL, -1, -1, 3, S(100));
    CHECK(kvpolicy_resume(k, NULL, 0, sa, S(106))); /* by the session: 6 s */
    CHECK(fabs(kvpolicy_predict_ttl(k, sa, NULL) - expected_ttl(k, 4 + 0.3 * 2, 60)) < 1e-9);
    /* the clamp */
    fresh(p, b, 1);
    kvpolicy_pin(k, b, 1, 0, "slow", -1, -1, 4, S(200));
    CHECK(kvpolicy_resume(k, b, 1, 0, S(500)));
    CHECK(fabs(kvpolicy_predict_ttl(k, 0, "slow") - 60) < 1e-9);
    /* the TTL error: |predicted gap - observed| of resumed pins with a prediction */
    kvpolicy_stats st;
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT((int)st.gaps_observed, 4);
    /* pin 1: no prediction (first); pin 2 (build, session b): overall 4 vs 20;
     * pin 3 (session a): 4 vs 6; pin 4 (slow, no session): the overall
     * average after three gaps vs 300 */
    double overall3 = overall + 0.3 * (6 - overall);
    CHECK_EQ_INT((int)st.ttl_error_count, 3);
    CHECK_MSG(fabs(st.ttl_error_sum_s - (16 + 2 + (300 - overall3))) < 1e-6, "ttl error sum %g", st.ttl_error_sum_s);
    CHECK_EQ_INT((int)st.released[KVPOL_RESUMED], 4);
    CHECK_EQ_INT(kvpool_n_free(p), 64);
    kvpolicy_free(k);
    kvpool_free(p);
}

static void test_tool_learnt_later(void) {
    kvpool *p = kvpool_new(16);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    int32_t b[2];
    fresh(p, b, 2);
    kvpolicy_pin(k, b, 2, 0, "grep", -1, -1, 1, S(0));
    CHECK(kvpolicy_resume(k, b, 2, 0, S(2))); /* grep: 2 s */
    fresh(p, b, 2);
    kvpolicy_pin(k, b, 2, 0, "ls", -1, -1, 2, S(3));
    CHECK(kvpolicy_resume(k, b, 2, 0, S(13))); /* ls: 10 s; overall 2 + 0.3 * 8 */
    double overall = 2 + 0.3 * 8;
    fresh(p, b, 2);
    double t77 = kvpolicy_pin(k, b, 2, 0, NULL, -1, -1, 77, S(20));
    CHECK_MSG(fabs(t77 - expected_ttl(k, overall, 60)) < 1e-9, "ttl %g", t77);
    int32_t c[1];
    fresh(p, c, 1);
    kvpolicy_pin(k, c, 1, 0, NULL, -1, 30, 78, S(20)); /* a hint: given, never re-predicted */
    /* the engine learns the tools after the fact: pin 77 is re-predicted */
    kvpolicy_set_tool(k, 77, "grep", S(20.1));
    kvpolicy_set_tool(k, 78, "grep", S(20.1));
    kvpolicy_set_tool(k, 999, "grep", S(20.1)); /* no such pin: nothing */
    double e = expected_ttl(k, 2, 60); /* grep's, shorter than the overall one */
    CHECK(e < t77);
    CHECK_EQ_INT(kvpolicy_expire(k, S(20) + S(e) - 1000), 0);
    CHECK_EQ_INT(kvpolicy_expire(k, S(20) + S(e)), 1);
    /* the hinted pin keeps its own TTL: from next_use_s = 30 */
    CHECK_EQ_INT(kvpolicy_expire(k, S(20) + S(expected_ttl(k, 30, 60)) - 1000), 0);
    CHECK_EQ_INT(kvpolicy_expire(k, S(20) + S(expected_ttl(k, 30, 60))), 1);
    CHECK_EQ_INT(kvpool_n_free(p), 16);
    kvpolicy_free(k);
    kvpool_free(p);
}

static void test_explicit_ttl(void) {
    kvpool *p = kvpool_new(16);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    int32_t b[2];
    fresh(p, b, 1);
    CHECK(fabs(kvpolicy_pin(k, b, 1, 0, NULL, 3, -1, 1, S(0)) - 3) < 1e-9);
    fresh(p, b + 1, 1);
    CHECK(fabs(kvpolicy_pin(k, b + 1, 1, 0, NULL, 1000, -1, 2, S(0)) - 60) < 1e-9); /* --kv-ttl-max */
    CHECK_EQ_INT(kvpolicy_expire(k, S(2.9)), 0);
    CHECK_EQ_INT(kvpolicy_expire(k, S(3)), 1);
    CHECK_EQ_INT(kvpolicy_expire(k, S(59.9)), 0);
    CHECK_EQ_INT(kvpolicy_expire(k, S(60)), 1);
    kvpolicy_free(k);
    kvpool_free(p);
}

static void test_yield_order(void) {
    kvpool *p = kvpool_new(32);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    int32_t a[2], b[3], c[4];
    fresh(p, a, 2);
    fresh(p, b, 3);
    fresh(p, c, 4);
    kvpolicy_pin(k, a, 2, 0, NULL, -1, 5, 1, S(0));   /* back in 5 s   */
    kvpolicy_pin(k, b, 3, 0, NULL, -1, 50, 2, S(0));  /* back in 50 s  */
    kvpolicy_pin(k, c, 4, 0, NULL, -1, 20, 3, S(1));  /* back at 21 s  */
    CHECK_EQ_INT(kvpolicy_yield(k, 0, KVPOL_FOR_RUNNING), 3); /* the furthest return first */
    CHECK_EQ_INT(kvpool_refcount(p, b[0]), 0);
    CHECK_EQ_INT(kvpool_refcount(p, c[0]), 1);
    CHECK_EQ_INT(kvpolicy_yield(k, 0, KVPOL_FOR_RUNNING), 4);
    CHECK_EQ_INT(kvpolicy_yield(k, 0, KVPOL_FOR_RUNNING), 2);
    CHECK_EQ_INT(kvpolicy_yield(k, 0, KVPOL_FOR_RUNNING), 0); /* nothing left: never blocks */
    kvpolicy_stats st;
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT((int)st.released[KVPOL_YIELDED], 3);
    CHECK_EQ_INT(kvpool_n_free(p), 32);
    kvpolicy_free(k);
    kvpool_free(p);
}

static void test_resume_supersede_hint(void) {
    kvpool *p = kvpool_new(32);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    uint64_t s = kvpolicy_session_hash("s");
    int32_t b[3];
    fresh(p, b, 3);
    kvpolicy_pin(k, b, 3, 0, NULL, -1, -1, 1, S(0));
    /* a prompt covering only part of the pinned sequence is not its resumption */
    CHECK(!kvpolicy_resume(k, b, 2, 0, S(1)));
    /* other blocks at the pin's last position: not it either */
    int32_t other[3] = {b[0], b[1], kvpool_alloc(p)};
    CHECK(!kvpolicy_resume(k, other, 3, 0, S(1)));
    kvpool_unref(p, other[2]);
    /* turn 2 of the same conversation pins its longer sequence too; a request
     * extending turn 2 resumes it, and turn 1's pin (covered) goes with it */
    int32_t b2[5] = {b[0], b[1], b[2], kvpool_alloc(p), kvpool_alloc(p)};
    kvpool_ref(p, b[0]);
    kvpool_ref(p, b[1]);
    kvpool_ref(p, b[2]);
    kvpolicy_pin(k, b2, 5, 0, NULL, -1, -1, 2, S(2));
    CHECK(kvpolicy_resume(k, b2, 5, 0, S(3)));
    kvpolicy_stats st;
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT(st.n_pins, 0);
    CHECK_EQ_INT((int)st.released[KVPOL_RESUMED], 2);
    CHECK_EQ_INT((int)st.gaps_observed, 1); /* one return, observed once */
    CHECK_EQ_INT(kvpool_n_free(p), 32);
    /* one pin per session: a newer turn supersedes */
    fresh(p, b, 2);
    kvpolicy_pin(k, b, 2, s, NULL, -1, -1, 3, S(10));
    fresh(p, b2, 3);
    kvpolicy_pin(k, b2, 3, s, NULL, -1, -1, 4, S(11));
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT(st.n_pins, 1);
    CHECK_EQ_INT(st.n_pinned_refs, 3);
    CHECK_EQ_INT((int)st.released[KVPOL_SUPERSEDED], 1);
    /* kv_hint "done" */
    CHECK_EQ_INT(kvpolicy_release_session(k, s), 1);
    CHECK_EQ_INT(kvpolicy_release_session(k, 0), 0);
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT((int)st.released[KVPOL_HINT], 1);
    CHECK_EQ_INT(kvpool_n_free(p), 32);
    CHECK(!strcmp(kvpolicy_reason_names[KVPOL_YIELDED], "yielded"));
    kvpolicy_free(k);
    kvpool_free(p);
}

/* The agent's request arrives (returned) before it is admitted (resume): the
 * gap is the time to arrival, the pin yields last meanwhile, and the resume
 * releases it without observing twice. */
static void test_returned(void) {
    kvpool *p = kvpool_new(16);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    int32_t a[2], b[2];
    fresh(p, a, 2);
    fresh(p, b, 2);
    kvpolicy_pin(k, a, 2, 0, NULL, -1, 2, 1, S(0));  /* back in 2 s: yields last...   */
    kvpolicy_pin(k, b, 2, 0, NULL, -1, 50, 2, S(0)); /* ...but not after b returned   */
    CHECK(!kvpolicy_returned(k, a, 1, 0, S(3)));      /* a prefix of it: not a return */
    CHECK(kvpolicy_returned(k, b, 2, 0, S(3)));
    CHECK(kvpolicy_returned(k, b, 2, 0, S(4)));       /* twice: observed once */
    kvpolicy_stats st;
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT((int)st.gaps_observed, 1);
    CHECK_MSG(fabs(st.ttl_error_sum_s - 47) < 1e-9, "error %g", st.ttl_error_sum_s); /* predicted 50, came at 3 */
    /* a returned pin does not expire with its TTL while its request waits */
    CHECK_EQ_INT(kvpolicy_expire(k, S(3) + S(expected_ttl(k, 50, 60)) - 1000), 1); /* a's (1.5*2+1 = 4 s) only */
    CHECK_EQ_INT(kvpool_refcount(p, b[0]), 1);
    fresh(p, a, 2);
    kvpolicy_pin(k, a, 2, 0, NULL, -1, 2, 3, S(10));
    CHECK_EQ_INT(kvpolicy_yield(k, 0, KVPOL_FOR_RUNNING), 2);               /* a's, though b's return was later */
    CHECK_EQ_INT(kvpool_refcount(p, a[0]), 0);
    CHECK(kvpolicy_resume(k, b, 2, 0, S(9)));
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT((int)st.gaps_observed, 1);
    CHECK_EQ_INT(st.n_pins, 0);
    CHECK_EQ_INT(kvpool_n_free(p), 16);
    kvpolicy_free(k);
    kvpool_free(p);
}

/* For a new conversation (protect), pins yield only when nothing says their
 * agent is coming: no prediction, or overdue past the slack; returned pins
 * never. Running work (no protect) takes any. */
static void test_protection(void) {
    kvpool *p = kvpool_new(16);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    int32_t u[1], e[1], r[1];
    fresh(p, u, 1);
    fresh(p, e, 1);
    fresh(p, r, 1);
    kvpolicy_pin(k, u, 1, 0, NULL, -1, -1, 1, S(0));  /* nothing learnt: no prediction */
    kvpolicy_pin(k, e, 1, 0, NULL, -1, 5, 2, S(0));   /* expected back at 5 s */
    double ttl = expected_ttl(k, 5, 60);               /* e's TTL: its protection */
    kvpolicy_pin(k, r, 1, 0, NULL, -1, 40, 3, S(0));
    CHECK(kvpolicy_returned(k, r, 1, 0, S(1)));        /* r's agent is back */
    /* u: no prediction, but nothing has gone unused yet: kept until it expires */
    CHECK_EQ_INT(kvpolicy_yield(k, S(1), KVPOL_FOR_NEW), 0);
    /* three pins expire unused: the rate (0 + 1) / (3 + 2) is below 1/4,
     * unpredicted pins protect nothing any more */
    for (int i = 0; i < 3; i++) {
        int32_t x;
        fresh(p, &x, 1);
        kvpolicy_pin(k, &x, 1, 0, NULL, 0.5, -1, 10 + (uint64_t)i, S(0));
    }
    CHECK_EQ_INT(kvpolicy_expire(k, S(1)), 3);
    CHECK(0.2 < KVPOLICY_PROTECT_MIN_RATE);
    CHECK_EQ_INT(kvpolicy_yield(k, S(1), KVPOL_FOR_NEW), 1);    /* u */
    CHECK_EQ_INT(kvpool_refcount(p, u[0]), 0);
    CHECK_EQ_INT(kvpolicy_yield(k, S(1), KVPOL_FOR_NEW), 0);    /* e is expected, r returned */
    CHECK_EQ_INT(kvpolicy_yield(k, S(ttl) - 1000, KVPOL_FOR_NEW), 0);
    CHECK_EQ_INT(kvpolicy_expire(k, S(ttl)), 1);       /* e's TTL ends its protection and the pin */
    CHECK_EQ_INT(kvpool_refcount(p, e[0]), 0);
    CHECK_EQ_INT(kvpolicy_yield(k, S(100), KVPOL_FOR_NEW), 0);  /* r: never for a new conversation */
    CHECK_EQ_INT(kvpolicy_yield(k, S(100), KVPOL_FOR_RUNNING), 1); /* running work takes it */
    CHECK_EQ_INT(kvpool_n_free(p), 16);
    kvpolicy_free(k);
    kvpool_free(p);
}

static void test_bounded(void) {
    int n = KVPOLICY_MAX_PINS + 5;
    kvpool *p = kvpool_new(n);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    for (int i = 0; i < n; i++) {
        int32_t b = kvpool_alloc(p);
        kvpolicy_pin(k, &b, 1, 0, NULL, -1, -1, (uint64_t)i, S(i));
    }
    kvpolicy_stats st;
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT(st.n_pins, KVPOLICY_MAX_PINS);
    CHECK_EQ_INT(kvpool_n_free(p), 5); /* the 5 oldest went */
    kvpolicy_free(k);                  /* releases the rest */
    CHECK_EQ_INT(kvpool_n_free(p), n);
    kvpool_free(p);
}

/* While the engine has nothing to run (KVPOL_FOR_NEW_IDLE), a new
 * conversation also takes a protected pin once its predicted return has
 * passed, the most overdue first; a pin not yet due and a returned pin
 * still wait. */
static void test_idle_overdue(void) {
    kvpool *p = kvpool_new(16);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    int32_t a[2], b[1], r[1];
    fresh(p, a, 2);
    fresh(p, b, 1);
    fresh(p, r, 1);
    kvpolicy_pin(k, a, 2, 0, NULL, -1, 3, 1, S(0)); /* due at 3 s */
    kvpolicy_pin(k, b, 1, 0, NULL, -1, 5, 2, S(0)); /* due at 5 s */
    kvpolicy_pin(k, r, 1, 0, NULL, -1, 1, 3, S(0)); /* due at 1 s, and back */
    CHECK(kvpolicy_returned(k, r, 1, 0, S(2)));
    CHECK_EQ_INT(kvpolicy_yield(k, S(2), KVPOL_FOR_NEW_IDLE), 0); /* a, b not due; r back */
    CHECK_EQ_INT(kvpolicy_yield(k, S(4), KVPOL_FOR_NEW), 0);      /* busy: a new conversation waits */
    /* overdue means later than predicted by more than max(1 s, the mean
     * prediction error): nothing resumed yet, so 1 s */
    CHECK_EQ_INT(kvpolicy_yield(k, S(3.9), KVPOL_FOR_NEW_IDLE), 0);
    CHECK_EQ_INT(kvpolicy_yield(k, S(6.5), KVPOL_FOR_NEW_IDLE), 2); /* a: the most overdue */
    CHECK_EQ_INT(kvpool_refcount(p, a[0]), 0);
    CHECK_EQ_INT(kvpool_refcount(p, b[0]), 1);
    CHECK_EQ_INT(kvpolicy_yield(k, S(6.5), KVPOL_FOR_NEW_IDLE), 1); /* then b */
    CHECK_EQ_INT(kvpolicy_yield(k, S(6.5), KVPOL_FOR_NEW_IDLE), 0); /* r: never for a new conversation */
    kvpolicy_stats st;
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT((int)st.released[KVPOL_YIELDED], 2);
    kvpolicy_free(k);
    kvpool_free(p);
}

/* Running work takes an overdue pin (its agent later than predicted by
 * more than the slack: an agent's last turn, say) before pins due back
 * soon, the most overdue first; then the furthest predicted return. */
static void test_running_overdue_first(void) {
    kvpool *p = kvpool_new(16);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    int32_t a[1], b[2], c[3], d[4];
    fresh(p, a, 1);
    fresh(p, b, 2);
    fresh(p, c, 3);
    fresh(p, d, 4);
    kvpolicy_pin(k, a, 1, 0, NULL, -1, 2, 1, S(0));  /* due at 2 s: overdue at 10 s   */
    kvpolicy_pin(k, b, 2, 0, NULL, -1, 1, 2, S(0));  /* due at 1 s: the most overdue  */
    kvpolicy_pin(k, c, 3, 0, NULL, -1, 3, 3, S(9));  /* due at 12 s                   */
    kvpolicy_pin(k, d, 4, 0, NULL, -1, 30, 4, S(9)); /* due at 39 s                   */
    CHECK_EQ_INT(kvpolicy_yield(k, S(1.5), KVPOL_FOR_RUNNING), 4); /* none overdue yet: d, furthest */
    CHECK_EQ_INT(kvpolicy_yield(k, S(10), KVPOL_FOR_RUNNING), 2);  /* b, then a, before c */
    CHECK_EQ_INT(kvpool_refcount(p, b[0]), 0);
    CHECK_EQ_INT(kvpolicy_yield(k, S(10), KVPOL_FOR_RUNNING), 1);
    CHECK_EQ_INT(kvpool_refcount(p, c[0]), 1);
    CHECK_EQ_INT(kvpolicy_yield(k, S(10), KVPOL_FOR_NEW), 0); /* c is protected from new work */
    CHECK_EQ_INT(kvpolicy_yield(k, S(10), KVPOL_FOR_RUNNING), 3);
    CHECK_EQ_INT(kvpool_n_free(p), 16);
    kvpolicy_free(k);
    kvpool_free(p);
}

/* Pinned partial last blocks (kvpolicy_pin_tail / kvpolicy_find_tail):
 * found only after exactly the pin's blocks, the longest run of the next
 * tokens, never past the tokens given; the pin's own reference, counted
 * and dropped however the pin ends (yield returns it too); one tail per
 * pin, none for an unknown owner. */
static void test_tails(void) {
    kvpool *p = kvpool_new(16);
    kvpolicy *k = kvpolicy_new(p, 60, 0);
    int32_t a[2], b[3];
    fresh(p, a, 2);
    fresh(p, b, 3);
    kvpolicy_pin(k, a, 2, 0, NULL, -1, -1, 11, S(1));
    kvpolicy_pin(k, b, 3, 0, NULL, -1, -1, 12, S(2));
    int32_t ta = kvpool_alloc(p), tb = kvpool_alloc(p), tc = kvpool_alloc(p);
    int32_t tok_a[5] = {1, 2, 3, 4, 5}, tok_b[3] = {1, 2, 9};
    CHECK(kvpolicy_pin_tail(k, 11, ta, tok_a, 5));
    CHECK(!kvpolicy_pin_tail(k, 11, tc, tok_a, 5)); /* one per pin */
    CHECK(!kvpolicy_pin_tail(k, 99, tc, tok_a, 5)); /* no such pin */
    CHECK(!kvpolicy_pin_tail(k, 0, tc, tok_a, 5));
    CHECK(kvpolicy_pin_tail(k, 12, tb, tok_b, 3));
    CHECK_EQ_INT(kvpool_refcount(p, ta), 2); /* the caller's and the pin's */
    CHECK_EQ_INT(kvpool_refcount(p, tc), 1);
    kvpool_unref(p, ta);
    kvpool_unref(p, tb);
    kvpool_unref(p, tc);
    kvpolicy_stats st;
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT(st.n_pinned_refs, 2 + 3 + 2);
    int rows = -1;
    int32_t want[6] = {1, 2, 3, 7, 7, 7};
    CHECK_EQ_INT(kvpolicy_find_tail(k, a, 2, want, 6, &rows), ta);
    CHECK_EQ_INT(rows, 3);
    CHECK_EQ_INT(kvpolicy_find_tail(k, a, 2, want, 2, &rows), ta); /* capped by the tokens given */
    CHECK_EQ_INT(rows, 2);
    CHECK_EQ_INT(kvpolicy_find_tail(k, a, 2, tok_a, 5, &rows), ta);
    CHECK_EQ_INT(rows, 5);
    int32_t other[2] = {a[0], b[1]}; /* the same length, another last block */
    CHECK_EQ_INT(kvpolicy_find_tail(k, other, 2, want, 6, &rows), -1);
    CHECK_EQ_INT(rows, 0);
    CHECK_EQ_INT(kvpolicy_find_tail(k, a, 1, want, 6, &rows), -1); /* only after all of a pin's blocks */
    CHECK_EQ_INT(kvpolicy_find_tail(k, b, 3, want, 6, &rows), tb);
    CHECK_EQ_INT(rows, 2);
    int32_t none[3] = {8, 8, 8};
    CHECK_EQ_INT(kvpolicy_find_tail(k, b, 3, none, 3, &rows), -1);
    CHECK_EQ_INT(kvpolicy_find_tail(k, b, 0, none, 3, &rows), -1);
    /* a yield returns the tail's reference too, and frees the block */
    int got = kvpolicy_yield(k, S(3), KVPOL_FOR_RUNNING);
    CHECK(got == 3 || got == 4);
    int32_t gone = got == 3 ? ta : tb, left = got == 3 ? tb : ta;
    CHECK_EQ_INT(kvpool_refcount(p, gone), 0);
    CHECK_EQ_INT(kvpool_refcount(p, left), 1);
    kvpolicy_get_stats(k, &st);
    CHECK_EQ_INT(st.n_pinned_refs, 2 + 3 + 2 - got);
    /* and freeing the policy drops the rest: back to the pool's 16 */
    kvpolicy_free(k);
    CHECK_EQ_INT(kvpool_n_free(p), 16);
    CHECK_EQ_INT(kvpool_check(p, NULL), 0);
    kvpool_free(p);
}

/* The eviction order (kvpolicy.h, "Eviction order"), exactly, on a real
 * pool and radix tree: a 4-token block each, the scene at time 10 s:
 *   unpinned  A = [a0 a1] (a chain), C = [c0]; released in the order a0,
 *             c0, a1, so the LRU leaves are c0 (older) and a1, and a0 has a
 *             child until a1 goes;
 *   held      H = [h0]: a sequence holds it (never evicted);
 *   pins      O [o0]: back at 1 s, overdue; F [f0 f1] + a partial block ft:
 *             back at 50 s; N [n0]: back at 20 s; R [r0]: back at 9 s, and
 *             its agent returned then (so the mean prediction error is 0
 *             and O's slack 1 s). Every pin's TTL is 60 s (none expired).
 * Evicting one block at a time, the blocks come back in the documented
 * order: c0, a1, a0 (LRU; the parent after its child even though it was
 * released first); then for running work the overdue pin (o0), the
 * furthest predicted return (F: its partial block at the yield, then f1,
 * f0 as LRU leaves), N, and the returned pin last; never h0. A new
 * conversation gets the LRU blocks only (every pin is protected), one
 * while nothing runs also the overdue pin. Evicting 3 at once at the pins
 * frees o0, ft, f1: a yielded pin's blocks go before the next pin yields. */
enum { EV_B = 4, EV_N = 32 };
typedef struct ev_scene {
    kvpool *pool;
    radix *t;
    kvpolicy *k;
    int32_t a[2], c[1], h[1], o[1], f[2], ft, n[1], r[1];
} ev_scene;

/* Indexes n fresh blocks under tokens seed.. (the caller keeps a reference). */
static void ev_insert(ev_scene *s, int32_t *b, int nb, int seed) {
    int32_t tok[8];
    for (int i = 0; i < nb * EV_B; i++) tok[i] = seed * 100 + i;
    fresh(s->pool, b, nb);
    int32_t tmp[2] = {b[0], nb > 1 ? b[1] : -1};
    CHECK_EQ_INT(radix_insert(s->t, tok, nb, tmp, RADIX_READY), nb);
}

static void ev_build(ev_scene *s) {
    s->pool = kvpool_new(EV_N);
    s->t = radix_new(s->pool, EV_B);
    s->k = kvpolicy_new(s->pool, 60, 0);
    ev_insert(s, s->a, 2, 1);
    ev_insert(s, s->c, 1, 2);
    ev_insert(s, s->h, 1, 3);
    kvpool_unref(s->pool, s->a[0]); /* releases: a0, c0, a1 */
    kvpool_unref(s->pool, s->c[0]);
    kvpool_unref(s->pool, s->a[1]);
    ev_insert(s, s->o, 1, 4);
    kvpolicy_pin(s->k, s->o, 1, 0, NULL, 60, 1, 1, S(0));
    ev_insert(s, s->f, 2, 5);
    kvpolicy_pin(s->k, s->f, 2, 0, NULL, 60, 50, 2, S(0));
    fresh(s->pool, &s->ft, 1);
    int32_t rows[2] = {7, 8};
    CHECK(kvpolicy_pin_tail(s->k, 2, s->ft, rows, 2));
    kvpool_unref(s->pool, s->ft); /* the pin's reference only */
    ev_insert(s, s->n, 1, 6);
    kvpolicy_pin(s->k, s->n, 1, 0, NULL, 60, 20, 3, S(0));
    ev_insert(s, s->r, 1, 7);
    kvpolicy_pin(s->k, s->r, 1, 0, NULL, 60, 9, 4, S(0)); /* back on time: no error */
    CHECK(kvpolicy_returned(s->k, s->r, 1, 0, S(9)));
}

static void ev_free(ev_scene *s) {
    kvpolicy_free(s->k);
    kvpool_unref(s->pool, s->h[0]);
    radix_free(s->t);
    kvpool_free(s->pool);
}

/* Evicts one block at a time until nothing more comes back; the blocks in
 * the order the pool got them (each call must free exactly one). */
static int ev_order(ev_scene *s, kvpol_yield_for why, int32_t *out) {
    int n = 0;
    for (;;) {
        int before[EV_N];
        for (int b = 0; b < EV_N; b++) before[b] = kvpool_refcount(s->pool, b);
        int got = kvpolicy_evict(s->k, s->t, s->pool, 1, S(10), why);
        if (got == 0) break;
        CHECK_EQ_INT(got, 1);
        for (int b = 0; b < EV_N; b++)
            if (before[b] > 0 && kvpool_refcount(s->pool, b) == 0) out[n++] = b;
        if (n > EV_N - 1) break;
    }
    return n;
}

static void check_order(const char *what, const int32_t *got, int n_got, const int32_t *want, int n_want) {
    bool same = n_got == n_want;
    for (int i = 0; same && i < n_want; i++) same = got[i] == want[i];
    char g[256] = "", w[256] = "";
    for (int i = 0; i < n_got; i++) snprintf(g + strlen(g), sizeof g - strlen(g), " %d", got[i]);
    for (int i = 0; i < n_want; i++) snprintf(w + strlen(w), sizeof w - strlen(w), " %d", want[i]);
    CHECK_MSG(same, "%s: blocks freed in the order%s, the documented order%s", what, g, w);
}

static void test_eviction_order(void) {
    ev_scene s;
    int32_t got[EV_N];
    ev_build(&s);
    int32_t run[] = {s.c[0], s.a[1], s.a[0], s.o[0], s.ft, s.f[1], s.f[0], s.n[0], s.r[0]};
    check_order("running work", got, ev_order(&s, KVPOL_FOR_RUNNING, got), run, (int)ARRAY_LEN(run));
    CHECK_EQ_INT(kvpool_refcount(s.pool, s.h[0]), 2); /* held: never */
    CHECK_EQ_INT(radix_n_cached(s.t), 1);
    ev_free(&s);

    ev_build(&s);
    int32_t nw[] = {s.c[0], s.a[1], s.a[0]};
    check_order("a new conversation", got, ev_order(&s, KVPOL_FOR_NEW, got), nw, (int)ARRAY_LEN(nw));
    ev_free(&s);

    ev_build(&s);
    int32_t idle[] = {s.c[0], s.a[1], s.a[0], s.o[0]};
    check_order("a new conversation, nothing running", got, ev_order(&s, KVPOL_FOR_NEW_IDLE, got), idle,
                (int)ARRAY_LEN(idle));
    ev_free(&s);

    /* n at once: a yielded pin's blocks before the next pin yields */
    ev_build(&s);
    CHECK_EQ_INT(kvpolicy_evict(s.k, s.t, s.pool, 3, S(10), KVPOL_FOR_RUNNING), 3); /* c0 a1 a0 */
    CHECK_EQ_INT(kvpolicy_evict(s.k, s.t, s.pool, 3, S(10), KVPOL_FOR_RUNNING), 3); /* o0 ft f1 */
    CHECK_EQ_INT(kvpool_refcount(s.pool, s.f[1]), 0);
    CHECK_EQ_INT(kvpool_refcount(s.pool, s.f[0]), 1); /* F's, evictable now */
    CHECK_EQ_INT(kvpool_refcount(s.pool, s.n[0]), 2); /* N still pinned */
    CHECK_EQ_INT(kvpool_n_free(s.pool), EV_N - 4);    /* f0, n0, r0, h0 */
    ev_free(&s);
    /* without pins: the LRU alone */
    kvpool *p = kvpool_new(8);
    radix *t = radix_new(p, EV_B);
    int32_t b[2], tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    fresh(p, b, 2);
    int32_t tmp[2] = {b[0], b[1]};
    radix_insert(t, tok, 2, tmp, RADIX_READY);
    kvpool_unref(p, b[1]);
    CHECK_EQ_INT(kvpolicy_evict(NULL, t, p, 5, S(10), KVPOL_FOR_RUNNING), 1); /* b0 is held */
    kvpool_unref(p, b[0]);
    radix_free(t);
    kvpool_free(p);
}

int main(void) {
    test_tails();
    test_expiry_and_default();
    test_prediction();
    test_tool_learnt_later();
    test_explicit_ttl();
    test_yield_order();
    test_running_overdue_first();
    test_idle_overdue();
    test_resume_supersede_hint();
    test_returned();
    test_protection();
    test_bounded();
    test_eviction_order();
    return test_summary("test_kvpolicy");
}
