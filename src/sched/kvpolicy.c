/*
 * kvpolicy.c — pins with a predicted time-to-live (contract in kvpolicy.h).
 *
 * Pins live in one array (order of creation; released pins are removed by
 * moving the last one into their place). Every operation is O(pins) at most,
 * and there are at most KVPOLICY_MAX_PINS; the gap averages are in two
 * direct-mapped tables.
 */
#include "kvpolicy.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"

#define KVPOL_TABLE 512
#define KVPOL_EMA_ALPHA 0.3

const char *const kvpolicy_reason_names[KVPOL_N_REASONS] = {"resumed", "expired", "yielded", "superseded", "hint"};

typedef struct pin {
    int32_t *blocks;
    int n;
    int32_t tail;          /* the partial last block (kvpolicy_pin_tail), or -1 */
    int32_t *tail_tok;     /* (n_tail) its tokens                              */
    int n_tail;
    uint64_t session, tool;
    uint64_t owner;
    bool ttl_given;        /* kv_ttl or next_use_s: not re-predicted           */
    double predicted_gap;  /* seconds; < 0: no prediction (the default TTL)    */
    int64_t t_end_ns;      /* when the turn ended                              */
    int64_t expires_ns;
    int64_t return_ns;     /* predicted return (yield order)                   */
    bool returned;         /* its agent's next request has arrived             */
} pin;

typedef struct avg_slot {
    uint64_t key; /* 0: empty */
    double ema;
} avg_slot;

struct kvpolicy {
    kvpool *pool;
    double ttl_max, ttl_default;
    pin *pins;
    int n_pins;
    avg_slot tools[KVPOL_TABLE], sessions[KVPOL_TABLE];
    double all_ema;
    bool all_seen;
    kvpolicy_stats st;
};

uint64_t kvpolicy_session_hash(const char *key) {
    if (!key || !*key) return 0;
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *s = (const unsigned char *)key; *s; s++) h = (h ^ *s) * 1099511628211ull;
    return h ? h : 1;
}

kvpolicy *kvpolicy_new(kvpool *pool, double ttl_max_s, double ttl_default_s) {
    kvpolicy *p = xcalloc(1, sizeof *p);
    p->pool = pool;
    p->ttl_max = ttl_max_s > 0 ? ttl_max_s : 60;
    p->ttl_default = ttl_default_s > 0 ? MIN(ttl_default_s, p->ttl_max) : MIN(10.0, p->ttl_max);
    p->pins = xcalloc(KVPOLICY_MAX_PINS, sizeof *p->pins);
    return p;
}

static void release_at(kvpolicy *p, int i, kvpolicy_reason why) {
    pin *q = &p->pins[i];
    for (int k = 0; k < q->n; k++) kvpool_unref(p->pool, q->blocks[k]);
    p->st.n_pinned_refs -= q->n;
    if (q->tail >= 0) {
        kvpool_unref(p->pool, q->tail);
        p->st.n_pinned_refs--;
        p->st.n_tails--;
    }
    p->st.released[why]++;
    free(q->blocks);
    free(q->tail_tok);
    p->pins[i] = p->pins[--p->n_pins];
    p->st.n_pins = p->n_pins;
}

void kvpolicy_free(kvpolicy *p) {
    if (!p) return;
    while (p->n_pins) release_at(p, p->n_pins - 1, KVPOL_EXPIRED);
    free(p->pins);
    free(p);
}

static avg_slot *slot_of(avg_slot *table, uint64_t key) { return &table[key % KVPOL_TABLE]; }

/* The average gap for a key, or -1. */
static double avg_get(const avg_slot *table, uint64_t key) {
    if (!key) return -1;
    const avg_slot *s = &table[key % KVPOL_TABLE];
    return s->key == key ? s->ema : -1;
}

static void avg_put(avg_slot *table, uint64_t key, double x) {
    if (!key) return;
    avg_slot *s = slot_of(table, key);
    if (s->key != key) {
        s->key = key;
        s->ema = x;
    } else {
        s->ema += KVPOL_EMA_ALPHA * (x - s->ema);
    }
}

/* The gap to expect for a turn of session/tool, or -1 when nothing is known. */
static double predict_gap(const kvpolicy *p, uint64_t session, uint64_t tool) {
    double g = avg_get(p->tools, tool);
    if (g < 0) g = avg_get(p->sessions, session);
    if (g < 0 && p->all_seen) g = p->all_ema;
    return g;
}

/* The mean |predicted - observed| gap of the pins resumed so far (0 before any). */
static double mean_error(const kvpolicy *p) {
    return p->st.ttl_error_count ? p->st.ttl_error_sum_s / (double)p->st.ttl_error_count : 0;
}

static double ttl_of_gap(const kvpolicy *p, double gap) {
    if (gap < 0) return p->ttl_default;
    double err = mean_error(p);
    double t = KVPOLICY_TTL_FACTOR * gap + KVPOLICY_TTL_SLACK_S + KVPOLICY_TTL_ERR_MULT * err;
    if (t < KVPOLICY_TTL_MIN_S) t = KVPOLICY_TTL_MIN_S;
    return t > p->ttl_max ? p->ttl_max : t;
}

double kvpolicy_predict_ttl(const kvpolicy *p, uint64_t session, const char *tool) {
    return ttl_of_gap(p, predict_gap(p, session, kvpolicy_session_hash(tool)));
}

/* Sets a pin's expiry and predicted return from its gap (or the default). */
static double pin_schedule(kvpolicy *p, pin *q, double ttl) {
    q->expires_ns = q->t_end_ns + (int64_t)(ttl * 1e9);
    double ret = q->predicted_gap >= 0 ? q->predicted_gap : ttl;
    q->return_ns = q->t_end_ns + (int64_t)(ret * 1e9);
    (void)p;
    return ttl;
}

double kvpolicy_pin(kvpolicy *p, const int32_t *blocks, int n, uint64_t session, const char *tool, double ttl_s,
                    double next_use_s, uint64_t owner, int64_t now_ns) {
    if (session)
        for (int i = 0; i < p->n_pins; i++)
            if (p->pins[i].session == session) {
                release_at(p, i, KVPOL_SUPERSEDED);
                break; /* at most one pin per session */
            }
    if (p->n_pins == KVPOLICY_MAX_PINS) {
        int oldest = 0;
        for (int i = 1; i < p->n_pins; i++)
            if (p->pins[i].t_end_ns < p->pins[oldest].t_end_ns) oldest = i;
        release_at(p, oldest, KVPOL_YIELDED);
    }
    pin *q = &p->pins[p->n_pins++];
    memset(q, 0, sizeof *q);
    q->blocks = xmalloc((size_t)n * sizeof *q->blocks);
    memcpy(q->blocks, blocks, (size_t)n * sizeof *blocks);
    q->n = n;
    q->tail = -1;
    q->session = session;
    q->tool = kvpolicy_session_hash(tool);
    q->owner = owner;
    q->t_end_ns = now_ns;
    p->st.n_pins = p->n_pins;
    p->st.n_pinned_refs += n;
    double ttl;
    if (next_use_s >= 0) {
        q->ttl_given = true;
        q->predicted_gap = next_use_s;
        ttl = ttl_of_gap(p, next_use_s);
    } else {
        q->predicted_gap = predict_gap(p, session, q->tool);
        ttl = ttl_of_gap(p, q->predicted_gap);
    }
    if (ttl_s >= 0) {
        q->ttl_given = true;
        ttl = MIN(ttl_s, p->ttl_max);
    }
    return pin_schedule(p, q, ttl);
}

bool kvpolicy_pin_tail(kvpolicy *p, uint64_t owner, int32_t block, const int32_t *tokens, int n_rows) {
    if (!owner || n_rows < 1) return false;
    for (int i = 0; i < p->n_pins; i++) {
        pin *q = &p->pins[i];
        if (q->owner != owner) continue;
        if (q->tail >= 0) return false;
        q->tail_tok = xmalloc((size_t)n_rows * sizeof *q->tail_tok);
        memcpy(q->tail_tok, tokens, (size_t)n_rows * sizeof *tokens);
        q->n_tail = n_rows;
        q->tail = block;
        kvpool_ref(p->pool, block);
        p->st.n_pinned_refs++;
        p->st.n_tails++;
        return true;
    }
    return false;
}

int32_t kvpolicy_find_tail(const kvpolicy *p, const int32_t *blocks, int n, const int32_t *tokens, int n_avail,
                           int *n_rows) {
    int32_t best = -1;
    int best_run = 0;
    for (int i = 0; n >= 1 && i < p->n_pins; i++) {
        const pin *q = &p->pins[i];
        if (q->tail < 0 || q->n != n || q->blocks[n - 1] != blocks[n - 1]) continue;
        int run = 0, lim = MIN(q->n_tail, n_avail);
        while (run < lim && q->tail_tok[run] == tokens[run]) run++;
        if (run > best_run) best = q->tail, best_run = run;
    }
    *n_rows = best_run;
    return best;
}

void kvpolicy_set_tool(kvpolicy *p, uint64_t owner, const char *tool, int64_t now_ns) {
    (void)now_ns;
    for (int i = 0; i < p->n_pins; i++) {
        pin *q = &p->pins[i];
        if (q->owner != owner) continue;
        q->tool = kvpolicy_session_hash(tool);
        if (!q->ttl_given && !q->returned) {
            q->predicted_gap = predict_gap(p, q->session, q->tool);
            pin_schedule(p, q, ttl_of_gap(p, q->predicted_gap));
        }
        return;
    }
}

static void observe(kvpolicy *p, const pin *q, int64_t now_ns) {
    double gap = (double)(now_ns - q->t_end_ns) / 1e9;
    if (gap < 0) gap = 0;
    if (q->predicted_gap >= 0) {
        p->st.ttl_error_sum_s += fabs(gap - q->predicted_gap);
        p->st.ttl_error_count++;
    }
    avg_put(p->tools, q->tool, gap);
    avg_put(p->sessions, q->session, gap);
    p->all_ema = p->all_seen ? p->all_ema + KVPOL_EMA_ALPHA * (gap - p->all_ema) : gap;
    p->all_seen = true;
    p->st.gaps_observed++;
}

/* The pin a request with these cached blocks / session resumes, or -1: the
 * deepest pin that the matched prefix covers (the shallower ones it covers
 * are earlier turns of the same conversation), else its session's. */
static int find_resumed(const kvpolicy *p, const int32_t *blocks, int n, uint64_t session) {
    int best = -1;
    for (int i = 0; i < p->n_pins; i++) {
        const pin *q = &p->pins[i];
        if (q->n <= n && blocks[q->n - 1] == q->blocks[q->n - 1] && (best < 0 || q->n > p->pins[best].n)) best = i;
    }
    if (best < 0 && session)
        for (int i = 0; i < p->n_pins; i++)
            if (p->pins[i].session == session) best = i;
    return best;
}

bool kvpolicy_returned(kvpolicy *p, const int32_t *blocks, int n, uint64_t session, int64_t now_ns) {
    int i = find_resumed(p, blocks, n, session);
    if (i < 0) return false;
    pin *q = &p->pins[i];
    if (!q->returned) {
        observe(p, q, now_ns);
        q->returned = true;
        q->return_ns = INT64_MIN; /* yields last */
        /* it stays while its request waits for admission (bounded: a request
         * cancelled in the queue does not hold it for ever) */
        q->expires_ns = now_ns + (int64_t)(p->ttl_max * 1e9);
    }
    return true;
}

bool kvpolicy_resume(kvpolicy *p, const int32_t *blocks, int n, uint64_t session, int64_t now_ns) {
    int best = find_resumed(p, blocks, n, session);
    if (best < 0) return false;
    if (!p->pins[best].returned) observe(p, &p->pins[best], now_ns);
    release_at(p, best, KVPOL_RESUMED);
    for (int i = 0; i < p->n_pins;) {
        const pin *q = &p->pins[i];
        if (q->n <= n && blocks[q->n - 1] == q->blocks[q->n - 1]) release_at(p, i, KVPOL_RESUMED);
        else i++;
    }
    return true;
}

int kvpolicy_release_session(kvpolicy *p, uint64_t session) {
    int k = 0;
    for (int i = 0; session && i < p->n_pins;) {
        if (p->pins[i].session == session) release_at(p, i, KVPOL_HINT), k++;
        else i++;
    }
    return k;
}

int kvpolicy_expire(kvpolicy *p, int64_t now_ns) {
    int k = 0;
    for (int i = 0; i < p->n_pins;) {
        if (p->pins[i].expires_ns <= now_ns) release_at(p, i, KVPOL_EXPIRED), k++;
        else i++;
    }
    return k;
}

static bool protected_pin(const kvpolicy *p, const pin *q, int64_t now_ns) {
    if (q->returned) return true;
    if (q->predicted_gap < 0) {
        /* nothing predicted yet: protected until it expires while pins
         * have been coming back (or too few ended to tell) */
        double resumed = (double)p->st.released[KVPOL_RESUMED];
        double lost = (double)(p->st.released[KVPOL_EXPIRED] + p->st.released[KVPOL_YIELDED]);
        return (resumed + 1) / (resumed + lost + 2) >= KVPOLICY_PROTECT_MIN_RATE && now_ns < q->expires_ns;
    }
    return now_ns < q->expires_ns; /* its TTL covers the predicted return with margin */
}

int kvpolicy_yield(kvpolicy *p, int64_t now_ns, kvpol_yield_for why) {
    int far = -1, overdue = -1;
    /* overdue: later than predicted by more than predictions usually miss */
    double err = mean_error(p);
    int64_t slack = (int64_t)((err > 1 ? err : 1) * 1e9);
    for (int i = 0; i < p->n_pins; i++) {
        const pin *q = &p->pins[i];
        bool late = !q->returned && q->return_ns + slack < now_ns;
        if (late && why != KVPOL_FOR_NEW && (overdue < 0 || q->return_ns < p->pins[overdue].return_ns)) overdue = i;
        if (why != KVPOL_FOR_RUNNING && protected_pin(p, q, now_ns)) continue;
        if (why == KVPOL_FOR_RUNNING && late) continue; /* taken first, above */
        if (far < 0 || q->return_ns > p->pins[far].return_ns) far = i;
    }
    /* Running work takes the most overdue pin first (its agent is late: the
     * pin of an agent's last turn, that nobody comes back for, is the usual
     * case), then the furthest predicted return. A new conversation takes
     * unprotected pins only, and an overdue one when nothing runs. */
    int take = why == KVPOL_FOR_RUNNING ? (overdue >= 0 ? overdue : far) : (far >= 0 ? far : overdue);
    if (take < 0) return 0;
    int n = p->pins[take].n + (p->pins[take].tail >= 0);
    release_at(p, take, KVPOL_YIELDED);
    return n;
}

int kvpolicy_evict(kvpolicy *p, radix *t, kvpool *pool, int n, int64_t now_ns, kvpol_yield_for why) {
    /* counted as blocks the pool got back: a yielded pin's partial last
     * block (kvpolicy_pin_tail) is freed by the yield itself, not by the tree */
    int free0 = kvpool_n_free(pool);
    radix_evict(t, n);
    while (kvpool_n_free(pool) - free0 < n && p && kvpolicy_yield(p, now_ns, why) > 0)
        radix_evict(t, n - (kvpool_n_free(pool) - free0));
    return kvpool_n_free(pool) - free0;
}

void kvpolicy_get_stats(const kvpolicy *p, kvpolicy_stats *out) { *out = p->st; }
