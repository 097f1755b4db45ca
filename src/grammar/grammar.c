/*
 * grammar.c — compiles a parsed GBNF grammar (gast, from gbnf.c) into the
 * byte-level pushdown automaton that gmatch.c runs, and checks it.
 *
 * Each rule becomes a Thompson-style automaton over bytes with one start
 * and one end state:
 *
 *   "ab"      s ─a─▶ · ─b─▶ t
 *   [α-ω]     code point ranges split into UTF-8 byte-range sequences; runs
 *             of continuation bytes share states (c1, c2, c3: "k more
 *             [80-BF] bytes, then t")
 *   x | y     both built from s, their ends ε-joined into a fresh t
 *   x*        s ─ε─▶ L (fresh loop state), x from L back to L, ends at L
 *   x{m,n}    m copies of x, then n-m copies each with an ε exit to one
 *             shared end (linear size, no nested optionals)
 *   name      s ─call(name)─▶ t: the matcher pushes t, runs the rule and
 *             pops back to t when the rule reaches its end
 *
 * A repeated item that is not small (cost x copies > LIFT_COST) is first
 * lifted into a rule of its own so that copies are one call edge each:
 * the size of x{0,10000} stays linear in 10000 plus the size of x.
 *
 * Checks, each linear in the automaton's size:
 *   nullable rules    a worklist that resumes a rule's search at a call's
 *                     return state when the callee becomes nullable;
 *   left recursion    a cycle among "rule A calls B before consuming a byte";
 *   productive rules  the same worklist with byte edges allowed: a rule that
 *                     can never reach its end is an error;
 *   trimming          states that cannot reach their rule's end are dropped,
 *                     so every stack the matcher keeps can still complete.
 *
 * Flags for the matcher: SF_BYTES (state has byte edges: a stack whose top
 * is here is kept in a stack set), SF_FINAL (rule end), SF_PURE (only ε to
 * the end: a call returning here needs no stack frame — a tail call, which
 * keeps right recursion like `list ::= item ("," list)?` at constant depth).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

#define GRAMMAR_MAX_STATES (1u << 22)
#define LIFT_COST 256

enum { BE_BYTE, BE_EPS, BE_CALL };

typedef struct bedge {
    uint32_t from, to, rule;
    uint8_t kind, lo, hi;
} bedge;

typedef struct brule {
    uint32_t start, end; /* states                                       */
    uint32_t pos;        /* for messages: the definition, or the repetition */
    uint32_t name;       /* the user rule whose name messages show         */
} brule;

typedef struct builder {
    gast *a;
    err_t *e;
    int err;
    uint32_t n_states;
    uint32_t *srule; /* state -> rule */
    size_t cap_srule;
    bedge *ed;
    size_t n_ed, cap_ed;
    brule *rules;
    size_t n_rules, cap_rules;
    uint32_t *lifted; /* per node: lifted rule + 1 */
    uint32_t *cost;   /* per node */
    uint32_t cur_rule;
} builder;

static bool grow(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64, bytes;
    while (nc < need) nc *= 2;
    if (!mul_ok(nc, size, &bytes)) return false;
    void *q = realloc(*p, bytes);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

static void rule_name(const builder *b, uint32_t r, const char **s, int *n) {
    const grule_def *d = &b->a->rules[b->rules[r].name];
    *s = b->a->src + d->name_off;
    *n = (int)MIN(d->name_len, 64);
}

static int fail_pos(builder *b, uint32_t pos, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail_pos(builder *b, uint32_t pos, int code, const char *fmt, ...) {
    if (b->err) return b->err;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t line, col;
    grammar__gbnf_linecol(b->a->src, b->a->src_len, pos, &line, &col);
    b->err = err_set(b->e, code, "%u:%u: %s", line, col, msg);
    return b->err;
}

static uint32_t new_state(builder *b) {
    if (b->err) return 0;
    if (b->n_states >= GRAMMAR_MAX_STATES) {
        fail_pos(b, 0, ERR_RANGE, "grammar too large: more than %u automaton states", GRAMMAR_MAX_STATES);
        return 0;
    }
    if (!grow((void **)&b->srule, &b->cap_srule, b->n_states + 1, sizeof(uint32_t))) {
        fail_pos(b, 0, ERR_NOMEM, "out of memory");
        return 0;
    }
    b->srule[b->n_states] = b->cur_rule;
    return b->n_states++;
}

static void add_edge(builder *b, uint8_t kind, uint32_t from, uint32_t to, uint32_t rule, uint8_t lo, uint8_t hi) {
    if (b->err) return;
    if (!grow((void **)&b->ed, &b->cap_ed, b->n_ed + 1, sizeof(bedge))) {
        fail_pos(b, 0, ERR_NOMEM, "out of memory");
        return;
    }
    b->ed[b->n_ed++] = (bedge){.from = from, .to = to, .rule = rule, .kind = kind, .lo = lo, .hi = hi};
}

static uint32_t new_rule(builder *b, uint32_t name, uint32_t pos) {
    if (b->err) return 0;
    if (!grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof(brule))) {
        fail_pos(b, 0, ERR_NOMEM, "out of memory");
        return 0;
    }
    b->rules[b->n_rules] = (brule){.pos = pos, .name = name};
    return (uint32_t)b->n_rules++;
}

/* ---- code point classes as UTF-8 byte ranges ------------------------------ */

typedef struct cls_ctx {
    builder *b;
    uint32_t from, to;
    uint32_t cont[4]; /* cont[k]: k more continuation bytes then `to`; 0 = not made */
} cls_ctx;

static uint32_t cont_state(cls_ctx *x, int k) {
    if (k == 0) return x->to;
    if (!x->cont[k]) {
        uint32_t next = cont_state(x, k - 1);
        uint32_t s = new_state(x->b);
        add_edge(x->b, BE_BYTE, s, next, 0, 0x80, 0xBF);
        x->cont[k] = s;
    }
    return x->cont[k];
}

/* lo..hi encode with the same number of bytes n; emits byte-range runs. */
static void split_same(cls_ctx *x, uint32_t lo, uint32_t hi, int n) {
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                split_same(x, lo, lo | m, n);
                split_same(x, (lo | m) + 1, hi, n);
                return;
            }
            if ((hi & m) != m) {
                split_same(x, lo, (hi & ~m) - 1, n);
                split_same(x, hi & ~m, hi, n);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    utf8_encode(lo, (char *)a);
    utf8_encode(hi, (char *)z);
    /* the longest tail of full continuation ranges shares states */
    int j = n;
    while (j > 1 && a[j - 1] == 0x80 && z[j - 1] == 0xBF) j--;
    uint32_t s = x->from;
    for (int k = 0; k < j; k++) {
        uint32_t t = k == j - 1 ? cont_state(x, n - j) : new_state(x->b);
        add_edge(x->b, BE_BYTE, s, t, 0, a[k], z[k]);
        s = t;
    }
}

static void cls_range(cls_ctx *x, uint32_t lo, uint32_t hi) {
    if (lo <= 0xDFFF && hi >= 0xD800) { /* no surrogates in UTF-8 */
        if (lo < 0xD800) cls_range(x, lo, 0xD7FF);
        if (hi > 0xDFFF) cls_range(x, 0xE000, hi);
        return;
    }
    static const uint32_t band_hi[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    uint32_t band_lo = 0;
    for (int n = 1; n <= 4; n++) {
        uint32_t a = MAX(lo, band_lo), z = MIN(hi, band_hi[n - 1]);
        if (a <= z) split_same(x, a, z, n);
        band_lo = band_hi[n - 1] + 1;
    }
}

/* ranges: count sorted disjoint (lo, hi) pairs */
static uint32_t build_class(builder *b, const uint32_t *r, uint32_t count, bool neg, uint32_t from) {
    cls_ctx x = {.b = b, .from = from, .to = new_state(b)};
    if (!neg) {
        for (uint32_t k = 0; k < count; k++) cls_range(&x, r[2 * k], MIN(r[2 * k + 1], 0x10FFFF));
    } else {
        uint32_t next = 0;
        for (uint32_t k = 0; k < count; k++) {
            if (r[2 * k] > next) cls_range(&x, next, r[2 * k] - 1);
            next = r[2 * k + 1] + 1;
        }
        if (next <= 0x10FFFF) cls_range(&x, next, 0x10FFFF);
    }
    return x.to;
}

/* ---- syntax trees to automata --------------------------------------------- */

static uint32_t sat_mul(uint32_t a, uint32_t b) {
    uint64_t p = (uint64_t)a * b;
    return p > (1u << 30) ? (1u << 30) : (uint32_t)p;
}

static uint32_t rep_copies(const gnode *n) { return n->b == GN_INF ? MAX(n->a, 1) : MAX(n->b, 1); }

/* Approximate automaton size of a node, memoized (nodes form a tree). */
static uint32_t node_cost(builder *b, uint32_t i) {
    if (b->cost[i]) return b->cost[i];
    const gnode *n = &b->a->nodes[i];
    uint32_t c = 1;
    switch (n->kind) {
    case GN_LIT: c = MAX(n->b, 1); break;
    case GN_CLASS: c = sat_mul(n->b, 6) + 4; break;
    case GN_ANY: c = 12; break;
    case GN_REF: c = 1; break;
    case GN_SEQ:
    case GN_ALT:
        for (uint32_t k = n->first; k; k = b->a->nodes[k].next) c = MIN(c + node_cost(b, k), 1u << 30);
        break;
    case GN_REP: {
        uint32_t x = node_cost(b, n->first), copies = rep_copies(n);
        c = (copies > 1 && sat_mul(x, copies) > LIFT_COST) ? sat_mul(2, copies) : sat_mul(x, copies);
        break;
    }
    }
    b->cost[i] = c;
    return c;
}

static uint32_t build(builder *b, uint32_t i, uint32_t from);

/* One copy of a repeated item: a call to its lifted rule, or the item. */
static uint32_t rep_unit(builder *b, uint32_t item, uint32_t lifted, uint32_t from) {
    if (!lifted) return build(b, item, from);
    uint32_t t = new_state(b);
    add_edge(b, BE_CALL, from, t, lifted - 1, 0, 0);
    return t;
}

static uint32_t build_rep(builder *b, uint32_t i, uint32_t from) {
    const gnode n = b->a->nodes[i];
    uint32_t item = n.first, copies = rep_copies(&n), lifted = 0;
    if (copies > 1 && b->a->nodes[item].kind != GN_REF && sat_mul(node_cost(b, item), copies) > LIFT_COST) {
        if (!b->lifted[i]) {
            uint32_t r = new_rule(b, b->rules[b->cur_rule].name, n.pos), saved = b->cur_rule;
            if (b->err) return 0;
            b->cur_rule = r;
            uint32_t s = new_state(b), e = build(b, item, s), end = new_state(b);
            add_edge(b, BE_EPS, e, end, 0, 0, 0);
            b->rules[r].start = s;
            b->rules[r].end = end;
            b->cur_rule = saved;
            b->lifted[i] = r + 1;
        }
        lifted = b->lifted[i];
    }
    uint32_t cur = from;
    if (n.a == 0 && n.b == 1) { /* x? */
        uint32_t e = rep_unit(b, item, lifted, from), to = new_state(b);
        add_edge(b, BE_EPS, e, to, 0, 0, 0);
        add_edge(b, BE_EPS, from, to, 0, 0, 0);
        return to;
    }
    if (n.b == GN_INF) { /* m copies then a loop: x{m,} with x* and x+ as m = 0, 1 */
        uint32_t m = n.a;
        if (m > 0) m--; /* the last required copy is the loop's first pass */
        for (uint32_t k = 0; k < m && !b->err; k++) cur = rep_unit(b, item, lifted, cur);
        uint32_t loop = new_state(b);
        add_edge(b, BE_EPS, cur, loop, 0, 0, 0);
        uint32_t e = rep_unit(b, item, lifted, loop);
        if (n.a == 0) {
            add_edge(b, BE_EPS, e, loop, 0, 0, 0);
            return loop;
        }
        uint32_t out = new_state(b);
        add_edge(b, BE_EPS, e, out, 0, 0, 0);
        add_edge(b, BE_EPS, out, loop, 0, 0, 0);
        return out;
    }
    for (uint32_t k = 0; k < n.a && !b->err; k++) cur = rep_unit(b, item, lifted, cur);
    if (n.b == n.a) return cur;
    uint32_t exit = new_state(b);
    for (uint32_t k = n.a; k < n.b && !b->err; k++) {
        add_edge(b, BE_EPS, cur, exit, 0, 0, 0);
        cur = rep_unit(b, item, lifted, cur);
    }
    add_edge(b, BE_EPS, cur, exit, 0, 0, 0);
    return exit;
}

static uint32_t build(builder *b, uint32_t i, uint32_t from) {
    if (b->err) return 0;
    const gnode *n = &b->a->nodes[i];
    switch (n->kind) {
    case GN_LIT: {
        uint32_t off = n->a, len = n->b, cur = from;
        for (uint32_t k = 0; k < len && !b->err; k++) {
            uint32_t t = new_state(b);
            uint8_t ch = b->a->lit[off + k];
            add_edge(b, BE_BYTE, cur, t, 0, ch, ch);
            cur = t;
        }
        return cur;
    }
    case GN_CLASS: /* ranges is NULL when every class is empty ("[]") */
        return build_class(b, b->a->ranges ? b->a->ranges + n->a : NULL, n->b, n->neg, from);
    case GN_ANY: {
        static const uint32_t all[2] = {0, 0x10FFFF};
        return build_class(b, all, 1, false, from);
    }
    case GN_REF: {
        uint32_t t = new_state(b);
        add_edge(b, BE_CALL, from, t, n->a, 0, 0);
        return t;
    }
    case GN_SEQ: {
        uint32_t cur = from;
        for (uint32_t k = n->first; k && !b->err; k = b->a->nodes[k].next) cur = build(b, k, cur);
        return cur;
    }
    case GN_ALT: {
        uint32_t to = new_state(b);
        for (uint32_t k = n->first; k && !b->err; k = b->a->nodes[k].next) {
            uint32_t e = build(b, k, from);
            add_edge(b, BE_EPS, e, to, 0, 0, 0);
        }
        return to;
    }
    case GN_REP: return build_rep(b, i, from);
    }
    return from;
}

/* ---- checks on the automaton ----------------------------------------------- */

/* Compressed adjacency of the builder's edges, by source state. */
typedef struct adj {
    uint32_t *off; /* n_states + 1 */
    uint32_t *idx; /* edge indices */
} adj;

static int adj_build(builder *b, adj *g, bool reverse) {
    g->off = calloc((size_t)b->n_states + 1, sizeof(uint32_t));
    g->idx = malloc(MAX(b->n_ed, 1) * sizeof(uint32_t));
    if (!g->off || !g->idx) return fail_pos(b, 0, ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < b->n_ed; k++) g->off[(reverse ? b->ed[k].to : b->ed[k].from) + 1]++;
    for (uint32_t s = 0; s < b->n_states; s++) g->off[s + 1] += g->off[s];
    uint32_t *fill = malloc(((size_t)b->n_states + 1) * sizeof(uint32_t));
    if (!fill) return fail_pos(b, 0, ERR_NOMEM, "out of memory");
    memcpy(fill, g->off, ((size_t)b->n_states + 1) * sizeof(uint32_t));
    for (size_t k = 0; k < b->n_ed; k++) g->idx[fill[reverse ? b->ed[k].to : b->ed[k].from]++] = (uint32_t)k;
    free(fill);
    return 0;
}

static void adj_free(adj *g) {
    free(g->off);
    free(g->idx);
}

/* Marks the rules that can reach their end (flag[r] = 1) moving along ε,
 * calls to marked rules and, when `bytes`, byte edges; reached[s] = 1 for the
 * states so reached from their rule's start. Linear: a call to a rule not yet
 * marked waits on that rule and resumes when it is. */
static int reach_rules(builder *b, const adj *g, bool bytes, uint8_t *flag, uint8_t *reached) {
    size_t nr = b->n_rules, ns = b->n_states;
    uint32_t *queue = malloc(MAX(ns, 1) * sizeof(uint32_t));
    uint32_t *wait_head = malloc(MAX(nr, 1) * sizeof(uint32_t));
    uint32_t *wait_next = malloc(MAX(b->n_ed, 1) * sizeof(uint32_t));
    if (!queue || !wait_head || !wait_next) {
        free(queue), free(wait_head), free(wait_next);
        return fail_pos(b, 0, ERR_NOMEM, "out of memory");
    }
    memset(flag, 0, nr);
    memset(reached, 0, ns);
    for (size_t r = 0; r < nr; r++) wait_head[r] = UINT32_MAX;
    size_t qh = 0, qt = 0;
#define PUSH(s)                                                                                                        \
    do {                                                                                                               \
        uint32_t s_ = (s);                                                                                             \
        if (!reached[s_]) reached[s_] = 1, queue[qt++] = s_;                                                           \
    } while (0)
    for (size_t r = 0; r < nr; r++) PUSH(b->rules[r].start);
    while (qh < qt) {
        uint32_t s = queue[qh++], r = b->srule[s];
        if (s == b->rules[r].end && !flag[r]) {
            flag[r] = 1;
            for (uint32_t k = wait_head[r]; k != UINT32_MAX; k = wait_next[k]) PUSH(b->ed[k].to);
        }
        for (uint32_t k = g->off[s]; k < g->off[s + 1]; k++) {
            const bedge *ed = &b->ed[g->idx[k]];
            if (ed->kind == BE_EPS || (bytes && ed->kind == BE_BYTE)) {
                PUSH(ed->to);
            } else if (ed->kind == BE_CALL) {
                if (flag[ed->rule]) {
                    PUSH(ed->to);
                } else {
                    wait_next[g->idx[k]] = wait_head[ed->rule];
                    wait_head[ed->rule] = g->idx[k];
                }
            }
        }
    }
#undef PUSH
    free(queue), free(wait_head), free(wait_next);
    return 0;
}

/* A cycle among "rule A calls B from a state reached without consuming". */
static int check_left_recursion(builder *b, const adj *g, const uint8_t *reached) {
    size_t nr = b->n_rules;
    /* rule graph edges, by caller */
    uint32_t *off = calloc(nr + 1, sizeof(uint32_t));
    uint32_t *to = malloc(MAX(b->n_ed, 1) * sizeof(uint32_t));
    uint8_t *color = calloc(MAX(nr, 1), 1);
    uint32_t *stk = malloc(MAX(nr, 1) * sizeof(uint32_t)), *it = malloc(MAX(nr, 1) * sizeof(uint32_t));
    int rc = 0;
    if (!off || !to || !color || !stk || !it) {
        rc = fail_pos(b, 0, ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < b->n_ed; k++)
        if (b->ed[k].kind == BE_CALL && reached[b->ed[k].from]) off[b->srule[b->ed[k].from] + 1]++;
    for (size_t r = 0; r < nr; r++) off[r + 1] += off[r];
    {
        uint32_t *fill = malloc((nr + 1) * sizeof(uint32_t));
        if (!fill) {
            rc = fail_pos(b, 0, ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(fill, off, (nr + 1) * sizeof(uint32_t));
        for (size_t k = 0; k < b->n_ed; k++)
            if (b->ed[k].kind == BE_CALL && reached[b->ed[k].from]) to[fill[b->srule[b->ed[k].from]]++] = b->ed[k].rule;
        free(fill);
    }
    (void)g;
    /* iterative DFS: color 1 on the path, 2 done */
    for (size_t r0 = 0; r0 < nr && !rc; r0++) {
        if (color[r0]) continue;
        size_t sp = 0;
        stk[sp] = (uint32_t)r0, it[sp] = off[r0], sp++;
        color[r0] = 1;
        while (sp) {
            uint32_t r = stk[sp - 1];
            if (it[sp - 1] == off[r + 1]) {
                color[r] = 2;
                sp--;
                continue;
            }
            uint32_t x = to[it[sp - 1]++];
            if (color[x] == 1) {
                const char *a, *c;
                int na, nc;
                rule_name(b, x, &a, &na);
                rule_name(b, r, &c, &nc);
                if (x == r)
                    rc = fail_pos(b, b->rules[x].pos, ERR_FORMAT,
                                  "left recursion: rule '%.*s' can reach itself without consuming input", na, a);
                else
                    rc = fail_pos(b, b->rules[x].pos, ERR_FORMAT,
                                  "left recursion: rule '%.*s' can reach itself through '%.*s' without consuming input",
                                  na, a, nc, c);
                break;
            }
            if (!color[x]) {
                color[x] = 1;
                stk[sp] = x, it[sp] = off[x], sp++;
            }
        }
    }
done:
    free(off), free(to), free(color), free(stk), free(it);
    return rc;
}

/* ---- the compiled form ------------------------------------------------------ */

static int finish(builder *b, grammar *g, const uint8_t *prod) {
    size_t ns = b->n_states, ne = b->n_ed;
    /* co-reachability: states from which the rule's end can be reached */
    adj rv = {0};
    uint8_t *co = calloc(MAX(ns, 1), 1);
    uint32_t *queue = malloc(MAX(ns, 1) * sizeof(uint32_t));
    if (!co || !queue || adj_build(b, &rv, true)) {
        free(co), free(queue), adj_free(&rv);
        return fail_pos(b, 0, ERR_NOMEM, "out of memory");
    }
    size_t qh = 0, qt = 0;
    for (size_t r = 0; r < b->n_rules; r++) co[b->rules[r].end] = 1, queue[qt++] = b->rules[r].end;
    /* a call edge s -call(R)-> t lets s reach what t reaches when R is productive */
    while (qh < qt) {
        uint32_t t = queue[qh++];
        for (uint32_t k = rv.off[t]; k < rv.off[t + 1]; k++) {
            const bedge *ed = &b->ed[rv.idx[k]];
            if (ed->kind == BE_CALL && !prod[ed->rule]) continue;
            if (!co[ed->from]) co[ed->from] = 1, queue[qt++] = ed->from;
        }
    }
    adj_free(&rv);
    free(queue);

    g->n_states = (uint32_t)ns;
    g->n_rules = (uint32_t)b->n_rules;
    g->edge_off = calloc(ns + 1, sizeof(uint32_t));
    g->eps_off = calloc(ns + 1, sizeof(uint32_t));
    g->call_off = calloc(ns + 1, sizeof(uint32_t));
    g->sflags = calloc(MAX(ns, 1), 1);
    g->rule_start = malloc(MAX(b->n_rules, 1) * sizeof(uint32_t));
    size_t n_byte = 0, n_eps = 0, n_call = 0;
    for (size_t k = 0; k < ne; k++) {
        const bedge *ed = &b->ed[k];
        bool keep = co[ed->from] && co[ed->to] && (ed->kind != BE_CALL || prod[ed->rule]);
        if (!keep) {
            b->ed[k].kind = 255;
            continue;
        }
        if (ed->kind == BE_BYTE) n_byte++, g->edge_off[ed->from + 1]++;
        if (ed->kind == BE_EPS) n_eps++, g->eps_off[ed->from + 1]++;
        if (ed->kind == BE_CALL) n_call++, g->call_off[ed->from + 1]++;
    }
    g->edges = malloc(MAX(n_byte, 1) * sizeof(gedge));
    g->eps = malloc(MAX(n_eps, 1) * sizeof(uint32_t));
    g->calls = malloc(MAX(n_call, 1) * sizeof(gcall));
    uint32_t *fe = malloc((ns + 1) * sizeof(uint32_t) * 3);
    if (!g->edge_off || !g->eps_off || !g->call_off || !g->sflags || !g->rule_start || !g->edges || !g->eps ||
        !g->calls || !fe) {
        free(co), free(fe);
        return fail_pos(b, 0, ERR_NOMEM, "out of memory");
    }
    for (size_t s = 0; s < ns; s++) {
        g->edge_off[s + 1] += g->edge_off[s];
        g->eps_off[s + 1] += g->eps_off[s];
        g->call_off[s + 1] += g->call_off[s];
    }
    uint32_t *f1 = fe, *f2 = fe + ns + 1, *f3 = fe + 2 * (ns + 1);
    memcpy(f1, g->edge_off, (ns + 1) * sizeof(uint32_t));
    memcpy(f2, g->eps_off, (ns + 1) * sizeof(uint32_t));
    memcpy(f3, g->call_off, (ns + 1) * sizeof(uint32_t));
    for (size_t k = 0; k < ne; k++) {
        const bedge *ed = &b->ed[k];
        if (ed->kind == BE_BYTE) g->edges[f1[ed->from]++] = (gedge){.lo = ed->lo, .hi = ed->hi, .to = ed->to};
        if (ed->kind == BE_EPS) g->eps[f2[ed->from]++] = ed->to;
        if (ed->kind == BE_CALL) g->calls[f3[ed->from]++] = (gcall){.rule = ed->rule, .ret = ed->to};
    }
    for (size_t r = 0; r < b->n_rules; r++) {
        g->rule_start[r] = b->rules[r].start;
        g->sflags[b->rules[r].end] |= SF_FINAL;
    }
    /* SF_PURE: no byte or call edge reachable by ε; computed backwards from
     * the "impure" states over reversed ε edges. */
    uint8_t *impure = co; /* reuse */
    memset(impure, 0, ns);
    uint32_t *rq = f1, *roff = f2, *ridx = malloc(MAX(n_eps, 1) * sizeof(uint32_t));
    if (!ridx) {
        free(co), free(fe);
        return fail_pos(b, 0, ERR_NOMEM, "out of memory");
    }
    memset(roff, 0, (ns + 1) * sizeof(uint32_t));
    for (size_t s = 0; s < ns; s++)
        for (uint32_t k = g->eps_off[s]; k < g->eps_off[s + 1]; k++) roff[g->eps[k] + 1]++;
    for (size_t s = 0; s < ns; s++) roff[s + 1] += roff[s];
    memcpy(f3, roff, (ns + 1) * sizeof(uint32_t));
    for (size_t s = 0; s < ns; s++)
        for (uint32_t k = g->eps_off[s]; k < g->eps_off[s + 1]; k++) ridx[f3[g->eps[k]]++] = (uint32_t)s;
    qh = qt = 0;
    for (size_t s = 0; s < ns; s++) {
        if (g->edge_off[s] < g->edge_off[s + 1]) g->sflags[s] |= SF_BYTES;
        if (g->edge_off[s] < g->edge_off[s + 1] || g->call_off[s] < g->call_off[s + 1])
            impure[s] = 1, rq[qt++] = (uint32_t)s;
    }
    while (qh < qt) {
        uint32_t t = rq[qh++];
        for (uint32_t k = roff[t]; k < roff[t + 1]; k++)
            if (!impure[ridx[k]]) impure[ridx[k]] = 1, rq[qt++] = ridx[k];
    }
    for (size_t s = 0; s < ns; s++)
        if (!impure[s]) g->sflags[s] |= SF_PURE; /* trimmed: reaches the end by ε */
    free(ridx), free(fe), free(co);
    return 0;
}

static void builder_free(builder *b) {
    free(b->srule), free(b->ed), free(b->rules);
    free(b->lifted), free(b->cost);
}

static void grammar_free(grammar *g) {
    if (!g) return;
    free(g->edge_off), free(g->edges), free(g->eps_off), free(g->eps), free(g->call_off), free(g->calls);
    free(g->sflags), free(g->rule_start), free(g->init);
    grammar__gcache_free(&g->c);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int grammar_from_gbnf(const char *src, size_t len, grammar **out, err_t *e) {
    *out = NULL;
    if (!src && len) return err_set(e, ERR_INVALID, "grammar text is NULL");
    gast a = {0};
    builder b = {.a = &a, .e = e};
    grammar *g = NULL;
    uint8_t *flag = NULL, *reached = NULL, *prod = NULL;
    adj fw = {0};
    int rc = grammar__gbnf_parse(src ? src : "", len, &a, e);
    if (rc) goto done;
    b.lifted = calloc(a.n_nodes, sizeof(uint32_t));
    b.cost = calloc(a.n_nodes, sizeof(uint32_t));
    if (!b.lifted || !b.cost) {
        rc = fail_pos(&b, 0, ERR_NOMEM, "out of memory");
        goto done;
    }
    uint32_t root = 0;
    for (size_t r = 0; r < a.n_rules; r++) {
        if (a.rules[r].name_len == 4 && memcmp(a.src + a.rules[r].name_off, "root", 4) == 0) root = (uint32_t)r;
        new_rule(&b, (uint32_t)r, a.rules[r].def_pos);
    }
    for (size_t r = 0; r < a.n_rules && !b.err; r++) {
        b.cur_rule = (uint32_t)r;
        uint32_t s = new_state(&b), end;
        end = build(&b, a.rules[r].body, s);
        uint32_t t = new_state(&b);
        add_edge(&b, BE_EPS, end, t, 0, 0, 0);
        b.rules[r].start = s;
        b.rules[r].end = t;
    }
    if ((rc = b.err)) goto done;
    flag = malloc(MAX(b.n_rules, 1));
    prod = malloc(MAX(b.n_rules, 1));
    reached = malloc(MAX(b.n_states, 1));
    if (!flag || !prod || !reached) {
        rc = fail_pos(&b, 0, ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((rc = adj_build(&b, &fw, false))) goto done;
    if ((rc = reach_rules(&b, &fw, false, flag, reached))) goto done;
    if ((rc = check_left_recursion(&b, &fw, reached))) goto done;
    if ((rc = reach_rules(&b, &fw, true, prod, reached))) goto done;
    /* name an empty rule whose callees are all fine, when there is one: the
     * rules that call it are empty only because of it */
    size_t culprit = SIZE_MAX;
    memset(flag, 0, b.n_rules); /* flag: calls another empty user rule */
    for (size_t k = 0; k < b.n_ed; k++) {
        const bedge *ed = &b.ed[k];
        uint32_t caller = b.rules[b.srule[ed->from]].name;
        if (ed->kind == BE_CALL && !prod[ed->rule] && b.rules[ed->rule].name != caller) flag[caller] = 1;
    }
    for (size_t r = 0; r < a.n_rules && culprit == SIZE_MAX; r++)
        if (!prod[r] && !flag[r]) culprit = r;
    for (size_t r = 0; r < a.n_rules; r++) {
        if (culprit != SIZE_MAX) r = culprit;
        if (!prod[r]) {
            const char *s;
            int n;
            rule_name(&b, (uint32_t)r, &s, &n);
            rc = fail_pos(&b, b.rules[r].pos, ERR_FORMAT, "rule '%.*s' can never match (no finite string satisfies it)", n, s);
            goto done;
        }
    }
    g = calloc(1, sizeof *g);
    if (!g) {
        rc = fail_pos(&b, 0, ERR_NOMEM, "out of memory");
        goto done;
    }
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    atomic_init(&g->cache_bytes, 0);
    if ((rc = finish(&b, g, prod))) goto done;
    g->root_start = g->rule_start[root];
    rc = grammar__gmatch_init_start(g, e);
done:
    adj_free(&fw);
    free(flag), free(prod), free(reached);
    builder_free(&b);
    grammar__gast_free(&a);
    if (rc) {
        grammar_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void grammar_ref(grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
}

int grammar_refs(const grammar *g) { return g ? atomic_load(&((grammar *)g)->refs) : 0; }

void grammar_unref(grammar *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_free(g);
}

int grammar_n_states(const grammar *g) { return g ? (int)g->n_states : 0; }
