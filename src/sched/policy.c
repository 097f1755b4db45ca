/*
 * policy.c — the engine's scheduling rules (contract and the step's order
 * in policy.h). Pure functions: no clock, no locks, no engine state.
 */
#include <limits.h>
#include <math.h>

#include "policy.h"

#include "../base/base.h"

bool policy_overdue(const policy_limits *l, int64_t wait_start_ns, int64_t now) {
    return now - wait_start_ns > l->new_wait_max_ns;
}

int policy_new_wait_ms(int new_wait_max_ms, double ttl_max_s, int cap_ms) {
    if (new_wait_max_ms > 0) return new_wait_max_ms;
    return ttl_max_s * 1000 < cap_ms ? (int)(ttl_max_s * 1000) : cap_ms;
}

double policy_client_start(const policy_client *v, int n) {
    double least = 0;
    bool any = false;
    for (int i = 0; i < n; i++)
        if (v[i].active && (!any || v[i].served < least)) least = v[i].served, any = true;
    return least;
}

policy_submit policy_submit_check(const policy_limits *l, int c_parked, int c_kv_held, int c_waiting) {
    if (l->client_max_parked > 0 && c_parked >= l->client_max_parked) return POLICY_SUBMIT_PARKED;
    if (l->kv_limit && c_kv_held >= l->kv_limit) return POLICY_SUBMIT_KV;
    if (l->client_max_queued > 0 && c_waiting >= l->client_max_queued) return POLICY_SUBMIT_QUEUED;
    return POLICY_SUBMIT_OK;
}

kvpol_yield_for policy_yield_for(const policy_limits *l, const policy_waiting *w, int64_t now, int n_running) {
    if (!l->agent || w->resumes || w->admitted_once || policy_overdue(l, w->wait_start_ns, now))
        return KVPOL_FOR_RUNNING;
    return n_running == 0 ? KVPOL_FOR_NEW_IDLE : KVPOL_FOR_NEW;
}

bool policy_admit_before(const policy_waiting *a, const policy_waiting *b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    if (a->client != b->client) {
        if (a->c_running != b->c_running) return a->c_running < b->c_running;
        if (a->c_served != b->c_served) return a->c_served < b->c_served;
    }
    return a->order < b->order;
}

bool policy_may_try(const policy_limits *l, const policy_waiting *w, int pass, int64_t now, int n_prefilling) {
    if (w->tried) return false;
    if (pass == 0 && !w->resumes && !(l->agent && policy_overdue(l, w->wait_start_ns, now))) return false;
    if (l->client_max_running > 0 && w->c_running >= l->client_max_running) return false;
    if (n_prefilling >= POLICY_MAX_PREFILLING && w->c_prefilling > 0) return false;
    if (w->parked) return false;
    if (l->kv_limit && w->c_running > 0 && w->c_kv_blocks + w->need_blocks > l->kv_limit) return false;
    return true;
}

int policy_pick_waiting(const policy_limits *l, const policy_waiting *v, int n, int pass, int64_t now,
                        int n_prefilling) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!policy_may_try(l, &v[i], pass, now, n_prefilling)) continue;
        if (best < 0 || policy_admit_before(&v[i], &v[best])) best = i;
    }
    return best;
}

policy_gate policy_admit_gate(const policy_limits *l, int n_running, int need_blocks) {
    if (n_running >= l->max_running) return POLICY_GATE_NO_SLOT;
    if (need_blocks + 1 > l->pool_blocks) return POLICY_GATE_NEVER_FITS;
    return POLICY_GATE_TRY;
}

policy_after policy_after_try(int rc, bool overdue, int pass) {
    if (rc > 0) return POLICY_NEXT;
    if (rc == 0) return overdue ? POLICY_STOP : POLICY_NEXT;
    return overdue || pass == 1 ? POLICY_STOP : POLICY_END_PASS;
}

/* The blocks of v[i]'s client, as policy_kv_victim counts them. */
static int client_blocks(const policy_running *v, int n, int i) {
    int sum = 0;
    for (int j = 0; j < n; j++)
        if (v[j].client == v[i].client) sum += v[j].n_blocks + (v[j].n_blocks == 0);
    return sum;
}

int policy_kv_victim(const policy_running *v, int n) {
    int n_cl = 0, held = 0, top = -1, top_blocks = 0;
    for (int i = 0; i < n; i++) {
        held += v[i].n_blocks;
        int first = 0;
        while (v[first].client != v[i].client) first++;
        if (first != i) continue; /* its client is counted at its first sequence */
        n_cl++;
        int b = client_blocks(v, n, i);
        if (top < 0 || b > top_blocks) top = i, top_blocks = b;
    }
    if (n_cl > 1 && top >= 0 && top_blocks > held / n_cl)
        for (int i = n - 1; i >= 0; i--)
            if (v[i].client == v[top].client) return i;
    return n - 1;
}

int policy_fair_victim(const policy_limits *l, const policy_running *v, int n, const policy_waiting *w, int n_active,
                       int *share) {
    int sh = MAX(1, l->max_running / MAX(1, n_active));
    *share = sh;
    int victim = -1;
    for (int i = n - 1; i >= 0; i--) /* newest first */
        if (v[i].priority > w->priority && (victim < 0 || v[i].priority > v[victim].priority)) victim = i;
    if (victim >= 0 || w->c_running >= sh) return victim;
    int v_run = 0;
    for (int i = n - 1; i >= 0; i--) {
        int run = v[i].c_running;
        /* above its share, and by more than w's client has (no ping-pong) */
        if (v[i].client != w->client && v[i].priority == w->priority && run > sh && run > w->c_running + 1 &&
            run > v_run)
            victim = i, v_run = run;
    }
    return victim;
}

bool policy_prefill_before(const policy_prefill *a, const policy_prefill *b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    if (a->client != b->client && a->c_pf_vt != b->c_pf_vt) return a->c_pf_vt < b->c_pf_vt;
    if (a->starved != b->starved) return a->starved;
    return !a->starved && a->pending < b->pending;
}

int policy_pick_prefill(const policy_prefill *v, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (v[i].eligible && (best < 0 || policy_prefill_before(&v[i], &v[best]))) best = i;
    return best;
}

double policy_pf_vt_join(double pf_vt, uint64_t last_step, uint64_t step, double pf_v) {
    return last_step + 1 != step ? MAX(pf_vt, pf_v) : pf_vt;
}

/* client's tokens in v, the rows out aside (out NULL: all) */
static int client_tokens(const policy_row *v, int n, const bool *out, int client) {
    int t = 0;
    for (int j = 0; j < n; j++)
        if (v[j].client == client && !(out && out[j])) t += v[j].n_tokens;
    return t;
}

/* The level client `client` (of best class `pri`) is cut to: the most
 * tokens another client of its class or a better one brought to the step
 * (before any cut: cutting one client never lowers another's level, so
 * the clients are not cut down one after the other to the minimum), at
 * least POLICY_DECODE_SHARE_MIN; only POLICY_DECODE_SHARE_MIN when one of
 * them ends its prompt in the step; INT_MAX when there is none. */
static int share_level(const policy_row *v, int n, int client, int pri) {
    int level = 0;
    bool first = false;
    for (int j = 0; j < n; j++)
        if (v[j].client != client && v[j].priority <= pri) {
            level = MAX(level, client_tokens(v, n, NULL, v[j].client));
            first |= v[j].first;
        }
    if (level == 0) return INT_MAX; /* alone among its class and the better ones */
    return first ? POLICY_DECODE_SHARE_MIN : MAX(level, POLICY_DECODE_SHARE_MIN);
}

int policy_decode_share(const policy_row *v, int n, bool *out) {
    bool several = false;
    for (int j = 0; j < n; j++) out[j] = false, several |= v[j].client != v[0].client;
    if (!several) return 0; /* one client: the common case, O(n) */
    /* Every client, not only the widest: a client's prefill chunk (it
     * cannot sit out) used to make it the widest, and a flood's 16 rows
     * beside it then all ran in the step of its first token. */
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        int c = v[i].client, first_row = 0;
        while (v[first_row].client != c) first_row++;
        if (first_row != i) continue; /* its client is done at its first row */
        int tok = client_tokens(v, n, NULL, c);
        if (tok <= POLICY_DECODE_SHARE_MIN) continue;
        int pri = INT_MAX; /* c's best (smallest) priority class in the step */
        for (int j = 0; j < n; j++)
            if (v[j].client == c) pri = MIN(pri, v[j].priority);
        int level = share_level(v, n, c, pri);
        while (tok > level) {
            int w = -1; /* a decode row of c's: ran most recently, then the newest */
            for (int j = 0; j < n; j++) {
                if (v[j].client != c || out[j] || !v[j].decode) continue;
                if (w < 0 || v[j].last_ran > v[w].last_ran ||
                    (v[j].last_ran == v[w].last_ran && v[j].order > v[w].order))
                    w = j;
            }
            if (w < 0) break;
            out[w] = true;
            tok -= v[w].n_tokens;
            n_out++;
        }
    }
    return n_out;
}

int64_t policy_stall_since(const policy_limits *l, int64_t since, int seen, const policy_reader *r, int64_t now) {
    if ((l->stall_timeout_ms <= 0 && l->park_ms <= 0) || r->no_stall) return since;
    if (r->n_read >= r->n_posted && !r->blocked) return 0;
    return r->n_read != seen || !since ? now : since;
}

bool policy_stalled(const policy_limits *l, int64_t since, int64_t now) {
    return l->stall_timeout_ms > 0 && since && now - since > (int64_t)l->stall_timeout_ms * 1000000;
}

bool policy_park(const policy_limits *l, int64_t since, bool blocked, int64_t now) {
    return l->park_ms > 0 && since && (blocked || now - since > (int64_t)l->park_ms * 1000000);
}

bool policy_unpark(const policy_reader *r) { return r->n_read >= r->n_posted && !r->blocked; }

int policy_park_ms(int park_ms, int stall_timeout_ms) {
    if (park_ms <= 0) return 0;
    return stall_timeout_ms > 0 ? MIN(park_ms, stall_timeout_ms / 2) : park_ms;
}

bool policy_rwnd_consumed(policy_rwnd *w, uint64_t acked, uint32_t wnd, int64_t now) {
    uint64_t edge = acked + wnd;
    bool consumed = w->since && edge > w->edge0 && edge - w->edge0 > (acked - w->acked0) / 2;
    if (!w->since || consumed) *w = (policy_rwnd){.since = now, .acked0 = acked, .edge0 = edge, .wnd_max = wnd};
    else w->wnd_max = MAX(w->wnd_max, wnd);
    return consumed;
}

bool policy_rwnd_idle(policy_rwnd *w, uint64_t acked, uint32_t wnd, int park_ms, uint32_t shrink, int64_t now) {
    bool started = w->since != 0;
    if (policy_rwnd_consumed(w, acked, wnd, now) || !started || park_ms <= 0) return false;
    return acked > w->acked0 && now - w->since >= (int64_t)park_ms * 1000000 && w->wnd_max - wnd >= shrink;
}

policy_keep policy_turn_keep(const policy_turn *t) {
    bool off = t->kv_done || t->kv_ttl_s == 0;
    bool asked = t->kv_pin || t->kv_ttl_s > 0 || t->kv_next_use_s >= 0;
    return (policy_keep){.drop_session = off,
                         .drop_hint = t->kv_done,
                         .hint = t->ended_ok && !t->kv_done,
                         .pin = t->ended_ok && asked && !off};
}

double policy_decay(double v, int64_t dt_ns) {
    if (dt_ns <= 0) return v;
    return v * exp2(-(double)dt_ns / (POLICY_MASK_HALF_LIFE_MS * 1e6));
}

bool policy_mask_defer(double c_charge, double total, int n_active, int others_runnable) {
    if (n_active < 2 || others_runnable <= 0) return false;
    return c_charge * n_active > total;
}

int policy_pick_mask(const policy_mask_job *v, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (v[i].deferred) continue;
        if (best < 0 || v[i].c_charge < v[best].c_charge ||
            (v[i].c_charge == v[best].c_charge && v[i].cost_ns < v[best].cost_ns))
            best = i;
    }
    return best;
}
