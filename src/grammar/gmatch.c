/*
 * gmatch.c — running a compiled grammar (grammar.c) over bytes: stacks,
 * stack sets, the vocabulary trie, token masks and their cache, accept and
 * jump-forward.
 *
 * Stacks. A matcher is inside several rules at once; a stack records where:
 * its top is an automaton state, below it the return states of the calls
 * that led there. Stacks are interned (hash-consed) in the grammar as
 * (state, parent stack id) nodes, id 0 being the empty stack, so a stack is
 * one 32-bit id, equal stacks have equal ids and pushing shares the rest:
 *
 *     id 7 = (s12, 3) ──▶ id 3 = (s40, 0) ──▶ empty      "in `value`, which
 *     id 9 = (s15, 3) ──┘                                  returns to s40"
 *
 * Stack sets. Grammars are nondeterministic ([0-9]+ ("." [0-9]+)?, anyOf),
 * so the matcher's state is a set of stacks, kept canonical: only stacks
 * whose top has byte edges ("kernel" stacks), sorted by id, plus a flag
 * can_end (some path reached the end of root). After a byte, the closure
 * follows ε edges, calls (push the return state; a tail call pushes nothing)
 * and rule ends (pop to the parent) until only kernel stacks remain; a mark
 * per stack id makes each closure visit a stack once.
 *
 * Lazy DFA. Each distinct stack set is interned once more as a gdstate with
 * a 256-entry transition table filled on demand (0 unknown, 1 dead, k+2
 * state k), a bitmap of the bytes that may come next, and its cached token
 * mask. After the first visit, stepping by a byte is one array load. This
 * is what makes the trie walk of a mask cheap:
 *
 * Masks. The vocabulary's tokens (except end-of-generation and never-allowed
 * ones) are a byte trie laid out in preorder; node i has a byte, a depth and
 * `end`, the index just past its subtree. gmatch_mask walks it from the
 * matcher's gdstate keeping one gdstate per depth; a dead transition skips
 * the subtree (i = end). Tokens at live nodes are allowed; EOG tokens are
 * allowed when can_end. Inside strings and character classes most tokens
 * are decided as sets instead, by the length of their run of one class
 * (see "Runs" below). The result is cached in the gdstate, so a state seen
 * before costs a memcpy of n_vocab/8 bytes.
 *
 * Memory. Interned stacks live as long as the grammar (a cap makes paths
 * that would need more stacks dead). Everything else is a cache, bounded by
 * the grammar's cache budget: masks are evicted least recently used; when
 * the gdstates and their tables pass their share, they are all dropped at the
 * start of the next gmatch_* call (generation counter; matchers keep their
 * stack ids and re-intern their set when the generation changed).
 *
 * Threads: everything here that touches g->c runs on the engine thread only
 * (grammar.h); gmatch_new reads only the grammar's immutable start set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

#define GM_MAX_STACKS (1u << 23) /* interned stacks per grammar               */
#define GM_MAX_SET 4096          /* stacks in one set (ambiguous grammars)     */
#define GM_DEFAULT_CACHE_BYTES ((size_t)64 << 20)
#define DEAD UINT32_MAX

/* A byte trie of token pieces, in preorder; node 0 is the root. */
typedef struct gtrie {
    struct tnode {
        uint32_t end;
        uint16_t depth;
        uint8_t byte;
    } *nodes;
    uint32_t n_nodes;
    uint32_t *node_tok; /* n_nodes + 1 offsets into toks */
    int32_t *toks;
    struct tkid {       /* the root's children: their byte and subtree size  */
        uint32_t size;
        uint8_t byte;
    } *kids;
    uint32_t n_kids;
} gtrie;

/* Runs. A token's leading run of one character class decides it as a set
 * where the grammar treats the class alike: when every unit of the class
 * takes DFA state d to one same next state, a token that begins with L
 * units is at the L-th state of that chain after them, whatever the units
 * were, so only its bytes after the run (its tail) need the trie walk, and
 * a token that is all run is allowed by its length alone. Three classes:
 *
 *   RUN_PLAIN  a complete UTF-8 code point other than '"', '\', a control
 *              character (< U+0020), U+2028 or U+2029: JSON string content,
 *              and a pattern's `.` (which refuses the last two)
 *   RUN_IDENT  [A-Za-z0-9_-]: nanoid, base64url, email local parts
 *   RUN_WORD   [A-Za-z0-9]: hostname labels, URI parts, email domains
 *
 * Per class the tokens are split by their run's length L (in units):
 * all-run tokens of at most GV_RUN_MAX units are the bitmaps le[k] (those of
 * <= k units); the others of L <= GV_RUN_MAX are tail[L], a trie of the
 * bytes after their run (the first tail byte is outside the class); those of
 * a longer run are `over`, a trie of all their bytes.
 *
 * Exceptions: a grammar often treats a few ASCII units of a class apart
 * (digits but not letters may end an email's domain; a key that must not be
 * "a" starts differently with 'a'; `[^a-z]` refuses part of RUN_PLAIN).
 * Then the chain follows the units that step alike (the most of them) and
 * the tokens with an exception unit x at run position k are found in `at`
 * (by k and x) and decided apart: refused when x is refused there (the
 * units before it were regular), by a walk of the whole trie's subtree of x
 * when k = 0, else stepped one by one. Each miss takes the way whose cost
 * estimate (run_chain, walk_estimate) is lowest. */
enum { RUN_PLAIN, RUN_IDENT, RUN_WORD, N_RUNS };
#define GV_RUN_MAX 16
#define RUN_COST_CHEAP 4096 /* the first way in order this cheap wins */

typedef struct grun {
    gtrie tail[GV_RUN_MAX + 1];
    gtrie over;
    uint64_t *le;                   /* GV_RUN_MAX + 1 bitmaps of n_vocab bits */
    int32_t n_le[GV_RUN_MAX + 1];
    /* at_tok[at_off[k * 128 + x] .. at_off[k * 128 + x + 1]): the tokens of
     * le and tail whose run has the ASCII byte x as its unit k */
    uint32_t *at_off;
    int32_t *at_tok;
} grun;

struct gvocab {
    int n_vocab;
    uint8_t *kind;     /* GV_*, empty normal tokens already GV_NEVER       */
    uint32_t *tok_off; /* n_vocab + 1, into bytes                          */
    uint8_t *bytes;
    int32_t *eog;
    int n_eog;
    gtrie all;         /* every normal token                               */
    uint32_t root_child[256]; /* the node of `all` for a first byte, or 0    */
    grun *run;         /* N_RUNS classes, or NULL (KVLOOM_NO_RUN_MASKS=1)   */
    uint32_t max_len;
};

struct gmatch {
    grammar *g;
    const gvocab *v;
    uint32_t *stacks; /* kernel stack ids, sorted */
    uint32_t n, cap;
    bool can_end, ended;
    uint32_t ds;  /* its gdstate when gen matches */
    uint64_t gen;
};

/* ---- interned stacks ------------------------------------------------------- */

static void cache_init(gcache *c) {
    if (c->cap_st) return;
    c->cap_st = 1024;
    c->st = xmalloc(c->cap_st * sizeof(gstack));
    c->mark = xcalloc(c->cap_st, sizeof(uint32_t));
    c->st[0] = (gstack){UINT32_MAX, 0}; /* the empty stack */
    c->n_st = 1;
    c->st_tab_cap = 2048;
    c->st_tab = xcalloc(c->st_tab_cap, sizeof(uint32_t));
    c->epoch = 1;
    c->gen = 1;
    c->cap_pool = 1024;
    c->pool = xmalloc(c->cap_pool * sizeof(uint32_t));
    if (!c->budget_bytes) c->budget_bytes = GM_DEFAULT_CACHE_BYTES;
}

static uint32_t stack_intern(gcache *c, uint32_t state, uint32_t parent) {
    uint64_t key = ((uint64_t)state << 32) | parent;
    uint32_t mask = c->st_tab_cap - 1;
    uint32_t k = (uint32_t)mix64(key) & mask;
    while (c->st_tab[k]) {
        uint32_t id = c->st_tab[k] - 1;
        if (c->st[id].state == state && c->st[id].parent == parent) return id;
        k = (k + 1) & mask;
    }
    if (c->n_st >= GM_MAX_STACKS) return DEAD;
    if (c->n_st == c->cap_st) {
        c->cap_st *= 2;
        c->st = xrealloc(c->st, c->cap_st * sizeof(gstack));
        c->mark = xrealloc(c->mark, c->cap_st * sizeof(uint32_t));
        memset(c->mark + c->n_st, 0, (c->cap_st - c->n_st) * sizeof(uint32_t));
    }
    uint32_t id = c->n_st++;
    c->st[id] = (gstack){state, parent};
    c->st_tab[k] = id + 1;
    if (2 * c->n_st > c->st_tab_cap) { /* rehash */
        uint32_t nc = c->st_tab_cap * 2;
        uint32_t *t = xcalloc(nc, sizeof(uint32_t));
        for (uint32_t i = 1; i < c->n_st; i++) {
            uint32_t j = (uint32_t)mix64(((uint64_t)c->st[i].state << 32) | c->st[i].parent) & (nc - 1);
            while (t[j]) j = (j + 1) & (nc - 1);
            t[j] = i + 1;
        }
        free(c->st_tab);
        c->st_tab = t;
        c->st_tab_cap = nc;
    }
    return id;
}

/* ---- closure ----------------------------------------------------------------
 * c->work holds the stacks to expand (each marked with the current epoch);
 * the kernel ones go to c->res. */

typedef struct clos {
    uint32_t n_work, n_res;
    bool can_end, overflow;
} clos;

static void clos_begin(gcache *c, clos *k) {
    memset(k, 0, sizeof *k);
    if (++c->epoch == 0) { /* wrapped: forget old marks */
        memset(c->mark, 0, c->cap_st * sizeof(uint32_t));
        c->epoch = 1;
    }
}

static inline void visit(gcache *c, clos *k, uint32_t id) {
    if (c->mark[id] == c->epoch) return;
    c->mark[id] = c->epoch;
    if (k->n_work == c->cap_work) {
        c->cap_work = c->cap_work ? 2 * c->cap_work : 256;
        c->work = xrealloc(c->work, c->cap_work * sizeof(uint32_t));
    }
    c->work[k->n_work++] = id;
}

static inline void push_item(gcache *c, clos *k, uint32_t state, uint32_t parent) {
    uint32_t id = stack_intern(c, state, parent);
    if (id == DEAD) {
        k->overflow = true;
        return;
    }
    visit(c, k, id);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void clos_run(const grammar *g, gcache *c, clos *k) {
    for (uint32_t i = 0; i < k->n_work && !k->overflow; i++) {
        uint32_t id = c->work[i];
        uint32_t s = c->st[id].state, p = c->st[id].parent;
        uint8_t fl = g->sflags[s];
        if (fl & SF_BYTES) {
            if (k->n_res == c->cap_res) {
                c->cap_res = c->cap_res ? 2 * c->cap_res : 256;
                c->res = xrealloc(c->res, c->cap_res * sizeof(uint32_t));
            }
            c->res[k->n_res++] = id;
            if (k->n_res > GM_MAX_SET) k->overflow = true;
        }
        for (uint32_t e = g->eps_off[s]; e < g->eps_off[s + 1]; e++) push_item(c, k, g->eps[e], p);
        for (uint32_t e = g->call_off[s]; e < g->call_off[s + 1]; e++) {
            gcall cl = g->calls[e];
            uint32_t parent = p;
            if (!(g->sflags[cl.ret] & SF_PURE)) {
                parent = stack_intern(c, cl.ret, p);
                if (parent == DEAD) {
                    k->overflow = true;
                    break;
                }
            }
            push_item(c, k, g->rule_start[cl.rule], parent);
        }
        if (fl & SF_FINAL) {
            if (p == 0)
                k->can_end = true;
            else
                visit(c, k, p);
        }
    }
    if (k->n_res < 16) {
        for (uint32_t i = 1; i < k->n_res; i++) {
            uint32_t x = c->res[i], j = i;
            while (j && c->res[j - 1] > x) c->res[j] = c->res[j - 1], j--;
            c->res[j] = x;
        }
    } else {
        qsort(c->res, k->n_res, sizeof(uint32_t), cmp_u32);
    }
}

static void overflow_warn(gcache *c) {
    if (!c->warned) log_warn("grammar: a stack set passed its limit (%u stacks in a set, %u in all); that path is refused",
                             GM_MAX_SET, GM_MAX_STACKS);
    c->warned = true;
}

/* The compile-time limit on alternatives at one position. From a state
 * that branches (two or more epsilon or call edges, or more than
 * GM_MAX_SET byte edges: the first bytes of an alternation's literals all
 * leave one state), the byte-reading states reachable without reading a
 * byte (entering called rules, not returning from them) form one stack set,
 * and the edges that one byte value takes from them the next; more than
 * GM_MAX_SET in either could never be followed (the set would overflow
 * mid-output and the request fail with "no token can be sampled").
 * Counting stops at the limit. Returns 0 or ERR_RANGE naming the limit. */
static int check_alternatives(const grammar *g, err_t *e) {
    uint32_t *seen = calloc(g->n_states ? g->n_states : 1, sizeof *seen);
    uint32_t *stack = malloc(((size_t)g->n_states + 1) * sizeof *stack);
    int rc = 0;
    if (!seen || !stack) {
        rc = err_set(e, ERR_NOMEM, "out of memory checking the grammar");
        goto out;
    }
    for (uint32_t s0 = 0, epoch = 0; s0 < g->n_states && !rc; s0++) {
        uint32_t fan = (g->eps_off[s0 + 1] - g->eps_off[s0]) + (g->call_off[s0 + 1] - g->call_off[s0]);
        if (fan < 2 && g->edge_off[s0 + 1] - g->edge_off[s0] <= GM_MAX_SET) continue;
        epoch++;
        uint32_t top = 0, n_bytes = 0;
        int64_t per_byte[257] = {0}; /* a difference array over byte values */
        stack[top++] = s0;
        seen[s0] = epoch;
        while (top && n_bytes <= GM_MAX_SET) {
            uint32_t s = stack[--top];
            if (g->sflags[s] & SF_BYTES) n_bytes++;
            for (uint32_t k = g->edge_off[s]; k < g->edge_off[s + 1]; k++) {
                per_byte[g->edges[k].lo]++;
                per_byte[g->edges[k].hi + 1]--;
            }
            for (uint32_t k = g->eps_off[s]; k < g->eps_off[s + 1]; k++)
                if (seen[g->eps[k]] != epoch) seen[g->eps[k]] = epoch, stack[top++] = g->eps[k];
            for (uint32_t k = g->call_off[s]; k < g->call_off[s + 1]; k++) {
                uint32_t to = g->rule_start[g->calls[k].rule];
                if (seen[to] != epoch) seen[to] = epoch, stack[top++] = to;
            }
        }
        int64_t most = 0, run = 0;
        for (int b = 0; b < 256; b++) most = MAX(most, run += per_byte[b]);
        if (n_bytes > GM_MAX_SET || most > GM_MAX_SET)
            rc = err_set(e, ERR_RANGE,
                         "1:1: more than %u alternatives at one position (the limit of what one step can follow): "
                         "split the alternation, or let the model write the value free-form",
                         GM_MAX_SET);
    }
out:
    free(seen);
    free(stack);
    return rc;
}

int grammar__gmatch_init_start(grammar *g, err_t *e) {
    int rc = check_alternatives(g, e);
    if (rc) return rc;
    gcache *c = &g->c;
    cache_init(c);
    clos k;
    clos_begin(c, &k);
    push_item(c, &k, g->root_start, 0);
    clos_run(g, c, &k);
    if (k.overflow) return err_set(e, ERR_RANGE, "1:1: grammar too ambiguous at its start (more than %u stacks)", GM_MAX_SET);
    g->init = xmalloc(MAX(k.n_res, 1) * sizeof(uint32_t));
    if (k.n_res) memcpy(g->init, c->res, k.n_res * sizeof(uint32_t));
    g->n_init = k.n_res;
    g->init_end = k.can_end;
    return 0;
}

/* ---- stack sets (lazy DFA states) -------------------------------------------- */

static uint64_t set_hash(const uint32_t *ids, uint32_t n, bool can_end) {
    return hash_bytes(ids, n * sizeof(uint32_t), can_end ? 0x51 : 0x17);
}

static void ds_flush(gcache *c) {
    for (uint32_t i = 0; i < c->n_ds; i++) {
        free(c->ds[i].next);
        free(c->ds[i].mask);
    }
    /* the arrays go too: kept, their capacity (16 MiB of pool after a
     * pattern's masks) stayed allocated and resident but counted nowhere */
    free(c->ds), free(c->pool), free(c->ds_tab);
    c->ds = NULL, c->pool = NULL, c->ds_tab = NULL;
    c->cap_ds = 0, c->cap_pool = 0, c->ds_tab_cap = 0;
    c->n_ds = 0;
    c->n_pool = 0;
    c->n_masked = 0;
    c->next_bytes = c->mask_bytes = 0;
    c->gen++;
}

/* What the lazy DFA holds (the flush rule: cache_check) ... */
static size_t ds_bytes(const gcache *c) { return c->n_pool * 4 + (size_t)c->n_ds * (sizeof(gdstate) + 8) + c->next_bytes; }

/* ... and what the whole cache has allocated (the memory accounting,
 * grammar_cache_bytes): capacities, not uses */
static size_t cache_alloc_bytes(const gcache *c) {
    return c->cap_pool * 4 + (size_t)c->cap_ds * sizeof(gdstate) + (size_t)c->ds_tab_cap * 4 + c->next_bytes +
           c->mask_bytes + (size_t)c->cap_st * 12 + (size_t)c->st_tab_cap * 4;
}

/* At the start of a public call: drop the lazy DFA if it outgrew its share. */
static void cache_check(gcache *c) {
    if (ds_bytes(c) > c->budget_bytes / 2) ds_flush(c);
}

static uint32_t ds_intern(const grammar *g, gcache *c, const uint32_t *ids, uint32_t n, bool can_end) {
    uint64_t h = set_hash(ids, n, can_end);
    if (2 * (c->n_ds + 1) > c->ds_tab_cap) {
        uint32_t nc = c->ds_tab_cap ? 2 * c->ds_tab_cap : 1024;
        uint32_t *t = xcalloc(nc, sizeof(uint32_t));
        for (uint32_t i = 0; i < c->n_ds; i++) {
            uint32_t j = (uint32_t)c->ds[i].hash & (nc - 1);
            while (t[j]) j = (j + 1) & (nc - 1);
            t[j] = i + 1;
        }
        free(c->ds_tab);
        c->ds_tab = t;
        c->ds_tab_cap = nc;
    }
    uint32_t mask = c->ds_tab_cap - 1, j = (uint32_t)h & mask;
    while (c->ds_tab[j]) {
        const gdstate *d = &c->ds[c->ds_tab[j] - 1];
        if (d->hash == h && d->n == n && d->can_end == can_end &&
            (!n || !memcmp(c->pool + d->off, ids, n * sizeof(uint32_t))))
            return c->ds_tab[j] - 1;
        j = (j + 1) & mask;
    }
    if (c->n_ds == c->cap_ds) {
        c->cap_ds = c->cap_ds ? 2 * c->cap_ds : 256;
        c->ds = xrealloc(c->ds, c->cap_ds * sizeof(gdstate));
    }
    if (c->n_pool + n > c->cap_pool) {
        size_t nc = c->cap_pool ? c->cap_pool : 1024;
        while (nc < c->n_pool + n) nc *= 2;
        c->pool = xrealloc(c->pool, nc * sizeof(uint32_t));
        c->cap_pool = nc;
    }
    uint32_t id = c->n_ds++;
    gdstate *d = &c->ds[id];
    memset(d, 0, sizeof *d);
    d->off = (uint32_t)c->n_pool;
    d->n = n;
    d->hash = h;
    d->can_end = can_end;
    if (n) memcpy(c->pool + c->n_pool, ids, n * sizeof(uint32_t));
    c->n_pool += n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = c->st[ids[i]].state;
        for (uint32_t e = g->edge_off[s]; e < g->edge_off[s + 1]; e++)
            for (unsigned b = g->edges[e].lo; b <= g->edges[e].hi; b++) d->bytes[b >> 6] |= 1ull << (b & 63);
    }
    c->ds_tab[j] = id + 1;
    return id;
}

/* The state after byte b from state d (DEAD when b cannot come next).
 * Every byte in the same edges of d's stacks as b (an interval lo..hi
 * around b: the classes of a grammar are ranges) steps to the same state,
 * so one closure fills the table for all of them: a state inside `[A-Za-z]`
 * costs one closure for the letters, not 52. */
static uint32_t ds_step_slow(const grammar *g, gcache *c, uint32_t d, uint8_t b) {
    uint32_t r = DEAD;
    unsigned lo = 0, hi = 255;
    clos k;
    clos_begin(c, &k);
    uint32_t off = c->ds[d].off, n = c->ds[d].n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = c->pool[off + i];
        uint32_t s = c->st[id].state, p = c->st[id].parent;
        for (uint32_t e = g->edge_off[s]; e < g->edge_off[s + 1]; e++) {
            gedge ed = g->edges[e];
            if (ed.lo <= b && b <= ed.hi) {
                lo = MAX(lo, ed.lo), hi = MIN(hi, ed.hi);
                push_item(c, &k, ed.to, p);
            } else if (ed.hi < b) {
                lo = MAX(lo, (unsigned)ed.hi + 1);
            } else {
                hi = MIN(hi, (unsigned)ed.lo - 1);
            }
        }
    }
    if (k.n_work) {
        clos_run(g, c, &k);
        if (k.overflow)
            overflow_warn(c);
        else if (k.n_res || k.can_end)
            r = ds_intern(g, c, c->res, k.n_res, k.can_end);
    }
    gdstate *ds = &c->ds[d];
    if (!ds->next && c->next_bytes + 1024 <= c->budget_bytes / 4) {
        ds->next = xcalloc(256, sizeof(uint32_t));
        c->next_bytes += 256 * sizeof(uint32_t);
    }
    if (ds->next)
        for (unsigned x = lo; x <= hi; x++) ds->next[x] = r == DEAD ? 1 : r + 2;
    return r;
}

static inline uint32_t ds_step(const grammar *g, gcache *c, uint32_t d, uint8_t b) {
    const uint32_t *nt = c->ds[d].next;
    if (nt && nt[b]) return nt[b] == 1 ? DEAD : nt[b] - 2;
    return ds_step_slow(g, c, d, b);
}

static uint32_t m_state(gmatch *m) {
    gcache *c = &m->g->c;
    if (m->gen != c->gen) {
        m->ds = ds_intern(m->g, c, m->stacks, m->n, m->can_end);
        m->gen = c->gen;
    }
    return m->ds;
}

static void m_set(gmatch *m, uint32_t d) {
    gcache *c = &m->g->c;
    const gdstate *s = &c->ds[d];
    if (s->n > m->cap) {
        m->cap = s->n;
        m->stacks = xrealloc(m->stacks, m->cap * sizeof(uint32_t));
    }
    if (s->n) memcpy(m->stacks, c->pool + s->off, s->n * sizeof(uint32_t));
    m->n = s->n;
    m->can_end = s->can_end;
    m->ds = d;
    m->gen = c->gen;
}

void grammar__gcache_free(gcache *c) {
    ds_flush(c);
    free(c->st), free(c->mark), free(c->st_tab), free(c->ds), free(c->ds_tab), free(c->pool);
    free(c->masked), free(c->work), free(c->res), free(c->walk);
    memset(c, 0, sizeof *c);
}

void grammar_set_cache_bytes(grammar *g, size_t bytes) {
    if (g) g->c.budget_bytes = MAX(bytes, (size_t)1 << 16);
}

void grammar_lock(grammar *g) { pthread_mutex_lock(&g->mu); }

bool grammar_trylock(grammar *g) { return pthread_mutex_trylock(&g->mu) == 0; }

void grammar_unlock(grammar *g) {
    const gcache *c = &g->c;
    atomic_store_explicit(&g->cache_bytes, cache_alloc_bytes(c), memory_order_relaxed);
    pthread_mutex_unlock(&g->mu);
}

size_t grammar_cache_bytes(const grammar *g) {
    return g ? atomic_load_explicit(&((grammar *)g)->cache_bytes, memory_order_relaxed) : 0;
}

grammar *gmatch_grammar(const gmatch *m) { return m ? m->g : NULL; }

void grammar_cache_stats(const grammar *g, grammar_stats *s) {
    memset(s, 0, sizeof *s);
    if (!g) return;
    const gcache *c = &g->c;
    s->n_stacks = c->n_st;
    s->n_sets = c->n_ds;
    s->n_masks = c->n_masked;
    s->cache_bytes = cache_alloc_bytes(c);
    s->mask_hits = c->mask_hits;
    s->mask_misses = c->mask_misses;
    s->mask_runs = c->mask_runs;
    s->mask_exceptions = c->mask_exceptions;
}

/* ---- vocabulary ------------------------------------------------------------------ */

/* A token from byte `start` on: a trie's entry (tails skip their run). */
typedef struct tokref {
    int32_t id;
    uint32_t start;
} tokref;

static int cmp_tokref(const void *a, const void *b, void *ctx) {
    const gvocab *v = ctx;
    const tokref *x = a, *y = b;
    uint32_t lx = v->tok_off[x->id + 1] - v->tok_off[x->id] - x->start;
    uint32_t ly = v->tok_off[y->id + 1] - v->tok_off[y->id] - y->start;
    int c = memcmp(v->bytes + v->tok_off[x->id] + x->start, v->bytes + v->tok_off[y->id] + y->start, MIN(lx, ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Bytes of the unit of run class `cls` at s (n > 0 bytes left), or 0 when
 * s does not start with one (see RUN_PLAIN). */
static uint32_t run_unit(int cls, const uint8_t *s, uint32_t n) {
    uint8_t c = s[0];
    if (cls != RUN_PLAIN) {
        bool alnum = (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
        return alnum || (cls == RUN_IDENT && (c == '_' || c == '-'));
    }
    uint32_t cp;
    int len = utf8_decode(s, n, &cp);
    if (len <= 0) return 0;
    if (cp < 0x20 || cp == '"' || cp == '\\' || cp == 0x2028 || cp == 0x2029) return 0;
    return (uint32_t)len;
}

/* The preorder trie of the tokens of r[0..m) (sorted by cmp_tokref), each
 * from its start byte on. */
static void trie_build(const gvocab *v, const tokref *r, int m, gtrie *t) {
    size_t n = 0;
    for (int i = 0; i < m; i++) n += v->tok_off[r[i].id + 1] - v->tok_off[r[i].id] - r[i].start;
    t->nodes = xmalloc((n + 1) * sizeof(struct tnode));
    t->node_tok = xmalloc((n + 2) * sizeof(uint32_t));
    t->toks = xmalloc(((size_t)m + 1) * sizeof(int32_t));
    uint32_t *path = xmalloc(((size_t)v->max_len + 1) * sizeof(uint32_t));
    uint32_t nn = 1, nt = 0, plen = 0;
    t->nodes[0] = (struct tnode){0, 0, 0};
    t->node_tok[0] = 0;
    path[0] = 0;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    for (int i = 0; i < m; i++) {
        int32_t id = r[i].id;
        const uint8_t *s = v->bytes + v->tok_off[id] + r[i].start;
        uint32_t len = v->tok_off[id + 1] - v->tok_off[id] - r[i].start, l = 0;
        while (l < len && l < prev_len && prev[l] == s[l]) l++;
        for (uint32_t d = plen; d > l; d--) t->nodes[path[d]].end = nn;
        plen = l;
        for (uint32_t d = l + 1; d <= len; d++) {
            t->nodes[nn] = (struct tnode){0, (uint16_t)d, s[d - 1]};
            t->node_tok[nn] = nt;
            path[d] = nn++;
        }
        plen = len;
        t->toks[nt++] = id;
        prev = s;
        prev_len = len;
    }
    for (uint32_t d = plen; d > 0; d--) t->nodes[path[d]].end = nn;
    t->nodes[0].end = nn;
    t->node_tok[nn] = nt;
    t->n_nodes = nn;
    t->nodes = xrealloc(t->nodes, (size_t)nn * sizeof(struct tnode));
    t->node_tok = xrealloc(t->node_tok, ((size_t)nn + 1) * sizeof(uint32_t));
    free(path);
    t->kids = xmalloc(256 * sizeof *t->kids);
    for (uint32_t i = 1; i < nn; i = t->nodes[i].end) t->kids[t->n_kids++] = (struct tkid){t->nodes[i].end - i, t->nodes[i].byte};
}

static void trie_free(gtrie *t) { free(t->nodes), free(t->node_tok), free(t->toks), free(t->kids); }

/* Builds v->run[cls] from the normal tokens all[0..m) (sorted). */
static void run_build(gvocab *v, int cls, const tokref *all, int m) {
    grun *run = &v->run[cls];
    size_t words = ((size_t)v->n_vocab + 63) / 64;
    run->le = xcalloc(words * (GV_RUN_MAX + 1), sizeof(uint64_t));
    tokref *r = xmalloc(((size_t)m + 1) * sizeof *r);
    uint8_t *group = xmalloc((size_t)m + 1); /* a tail's run length, GV_RUN_MAX + 1: over */
    uint32_t *start = xmalloc(((size_t)m + 1) * sizeof *start);
    for (int i = 0; i < m; i++) {
        int32_t id = all[i].id;
        const uint8_t *b = v->bytes + v->tok_off[id];
        uint32_t len = v->tok_off[id + 1] - v->tok_off[id], pos = 0, u;
        int k = 0;
        while (pos < len && k <= GV_RUN_MAX && (u = run_unit(cls, b + pos, len - pos))) pos += u, k++;
        group[i] = (uint8_t)k;
        start[i] = k > GV_RUN_MAX ? 0 : pos;
        if (k > GV_RUN_MAX || pos < len) continue;
        for (int j = k; j <= GV_RUN_MAX; j++) {
            run->le[(size_t)j * words + (size_t)(id >> 6)] |= 1ull << (id & 63);
            run->n_le[j]++;
        }
        group[i] = UINT8_MAX; /* all run: in the bitmaps only */
    }
    /* the index of ASCII units by run position (two passes: count, fill) */
    run->at_off = xcalloc((size_t)GV_RUN_MAX * 128 + 1, sizeof(uint32_t));
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < m; i++) {
            if (group[i] == GV_RUN_MAX + 1) continue; /* over: walked whole */
            int32_t id = all[i].id;
            const uint8_t *b = v->bytes + v->tok_off[id];
            uint32_t end = group[i] == UINT8_MAX ? v->tok_off[id + 1] - v->tok_off[id] : start[i];
            for (uint32_t pos = 0, k = 0; pos < end; k++) {
                uint32_t u = run_unit(cls, b + pos, end - pos);
                if (u == 1) {
                    uint32_t slot = k * 128 + b[pos];
                    if (pass == 0) run->at_off[slot + 1]++;
                    else run->at_tok[run->at_off[slot]++] = id;
                }
                pos += u;
            }
        }
        if (pass == 0) {
            for (size_t j = 0; j < (size_t)GV_RUN_MAX * 128; j++) run->at_off[j + 1] += run->at_off[j];
            run->at_tok = xmalloc(((size_t)run->at_off[GV_RUN_MAX * 128] + 1) * sizeof(int32_t));
        } else { /* the fill moved every start to the next one's */
            memmove(run->at_off + 1, run->at_off, (size_t)GV_RUN_MAX * 128 * sizeof(uint32_t));
            run->at_off[0] = 0;
        }
    }
    for (int k = 0; k <= GV_RUN_MAX + 1; k++) {
        int n = 0;
        for (int i = 0; i < m; i++)
            if (group[i] == k) r[n++] = (tokref){all[i].id, start[i]};
        if (k <= GV_RUN_MAX) qsort_r(r, (size_t)n, sizeof *r, cmp_tokref, v); /* `over` keeps all's order */
        trie_build(v, r, n, k <= GV_RUN_MAX ? &run->tail[k] : &run->over);
    }
    free(r), free(group), free(start);
}

gvocab *gvocab_new(int n_vocab, gvocab_piece_fn piece, void *ctx, const uint8_t *kind) {
    if (n_vocab < 0 || !piece) return NULL;
    gvocab *v = xcalloc(1, sizeof *v);
    v->n_vocab = n_vocab;
    v->kind = xcalloc((size_t)n_vocab + 1, 1);
    v->tok_off = xmalloc(((size_t)n_vocab + 1) * sizeof(uint32_t));
    size_t cap = 1 << 16, n = 0;
    v->bytes = xmalloc(cap);
    int buf_cap = 256;
    char *buf = xmalloc((size_t)buf_cap);
    int n_norm = 0;
    for (int id = 0; id < n_vocab; id++) {
        v->tok_off[id] = (uint32_t)n;
        uint8_t k = kind ? kind[id] : GV_NORMAL;
        if (k > GV_NEVER) k = GV_NEVER;
        int len = piece(ctx, id, buf, buf_cap);
        if (len > buf_cap && len <= 65535) {
            buf_cap = len;
            buf = xrealloc(buf, (size_t)buf_cap);
            len = piece(ctx, id, buf, buf_cap);
        }
        if (len < 0 || len > 65535 || len > buf_cap) len = 0, k = k == GV_EOG ? GV_EOG : GV_NEVER;
        if (len == 0 && k == GV_NORMAL) k = GV_NEVER;
        v->kind[id] = k;
        if (k == GV_EOG) v->n_eog++;
        if (k != GV_NORMAL) continue;
        if (n + (size_t)len > cap || n + (size_t)len > UINT32_MAX) {
            if (n + (size_t)len > UINT32_MAX) { /* absurd vocabulary: token unusable */
                v->kind[id] = GV_NEVER;
                continue;
            }
            while (n + (size_t)len > cap) cap *= 2;
            v->bytes = xrealloc(v->bytes, cap);
        }
        memcpy(v->bytes + n, buf, (size_t)len);
        n += (size_t)len;
        n_norm++;
        v->max_len = MAX(v->max_len, (uint32_t)len);
    }
    v->tok_off[n_vocab] = (uint32_t)n;
    free(buf);
    v->eog = xmalloc(((size_t)v->n_eog + 1) * sizeof(int32_t));
    v->n_eog = 0;
    tokref *order = xmalloc(((size_t)n_norm + 1) * sizeof *order);
    int m = 0;
    for (int id = 0; id < n_vocab; id++) {
        if (v->kind[id] == GV_EOG) v->eog[v->n_eog++] = id;
        if (v->kind[id] == GV_NORMAL) order[m++] = (tokref){id, 0};
    }
    qsort_r(order, (size_t)m, sizeof *order, cmp_tokref, v);
    trie_build(v, order, m, &v->all);
    for (uint32_t i = 1; i < v->all.n_nodes; i = v->all.nodes[i].end) v->root_child[v->all.nodes[i].byte] = i;
    /* the runs (KVLOOM_NO_RUN_MASKS=1: none, every miss walks the whole
     * trie; for benchmarks and tests side by side) */
    const char *off = getenv("KVLOOM_NO_RUN_MASKS");
    if (!(off && *off == '1')) {
        v->run = xcalloc(N_RUNS, sizeof *v->run);
        for (int cls = 0; cls < N_RUNS; cls++) run_build(v, cls, order, m);
        log_debug("gvocab: %d tokens, trie of %u nodes over %zu bytes; %d all-plain tokens of <= %d code points, "
                  "%d all-word tokens",
                  n_vocab, v->all.n_nodes, n, v->run[RUN_PLAIN].n_le[GV_RUN_MAX], GV_RUN_MAX,
                  v->run[RUN_WORD].n_le[GV_RUN_MAX]);
    }
    free(order);
    return v;
}

static size_t trie_bytes(const gtrie *t) {
    if (!t->nodes) return 0;
    return (size_t)t->n_nodes * sizeof *t->nodes + ((size_t)t->n_nodes + 1) * sizeof *t->node_tok +
           ((size_t)t->node_tok[t->n_nodes] + 1) * sizeof *t->toks + (t->kids ? 256 * sizeof *t->kids : 0);
}

size_t gvocab_bytes(const gvocab *v) {
    if (!v) return 0;
    size_t used = v->tok_off[v->n_vocab], cap = 1 << 16; /* v->bytes grew by doubling */
    while (cap < used) cap *= 2;
    size_t b = sizeof *v + ((size_t)v->n_vocab + 1) * (1 + sizeof *v->tok_off) + cap +
               ((size_t)v->n_eog + 1) * sizeof *v->eog + trie_bytes(&v->all);
    if (v->run) {
        const size_t words = ((size_t)v->n_vocab + 63) / 64;
        for (int cls = 0; cls < N_RUNS; cls++) {
            const grun *r = &v->run[cls];
            b += sizeof *r + words * (GV_RUN_MAX + 1) * sizeof(uint64_t) + trie_bytes(&r->over) +
                 ((size_t)GV_RUN_MAX * 128 + 1) * sizeof *r->at_off +
                 (r->at_tok ? ((size_t)r->at_off[GV_RUN_MAX * 128] + 1) * sizeof *r->at_tok : 0);
            for (int k = 0; k <= GV_RUN_MAX; k++) b += trie_bytes(&r->tail[k]);
        }
    }
    return b;
}

void gvocab_free(gvocab *v) {
    if (!v) return;
    free(v->kind), free(v->tok_off), free(v->bytes), free(v->eog);
    trie_free(&v->all);
    for (int cls = 0; v->run && cls < N_RUNS; cls++) {
        for (int k = 0; k <= GV_RUN_MAX; k++) trie_free(&v->run[cls].tail[k]);
        trie_free(&v->run[cls].over);
        free(v->run[cls].le), free(v->run[cls].at_off), free(v->run[cls].at_tok);
    }
    free(v->run);
    free(v);
}

int gvocab_n_vocab(const gvocab *v) { return v ? v->n_vocab : 0; }

/* ---- matchers ------------------------------------------------------------------- */

gmatch *gmatch_new(grammar *g, const gvocab *v) {
    if (!g) return NULL;
    gmatch *m = xcalloc(1, sizeof *m);
    grammar_ref(g);
    m->g = g;
    m->v = v;
    m->cap = MAX(g->n_init, 1);
    m->stacks = xmalloc(m->cap * sizeof(uint32_t));
    if (g->n_init) memcpy(m->stacks, g->init, g->n_init * sizeof(uint32_t));
    m->n = g->n_init;
    m->can_end = g->init_end;
    m->gen = 0; /* no gdstate yet: the cache belongs to the engine thread */
    return m;
}

void gmatch_free(gmatch *m) {
    if (!m) return;
    grammar_unref(m->g);
    free(m->stacks);
    free(m);
}

gmatch *gmatch_clone(const gmatch *m) {
    if (!m) return NULL;
    gmatch *c = xmalloc(sizeof *c);
    *c = *m;
    c->cap = MAX(m->n, 1);
    c->stacks = xmalloc(c->cap * sizeof(uint32_t));
    if (m->n) memcpy(c->stacks, m->stacks, m->n * sizeof(uint32_t));
    grammar_ref(m->g);
    return c;
}

bool gmatch_can_end(const gmatch *m) { return m && m->can_end; }
bool gmatch_must_end(const gmatch *m) { return m && m->can_end && (m->n == 0 || m->ended); }

int gmatch_accept_bytes(gmatch *m, const char *bytes, size_t n) {
    if (!m || m->ended || (n && !bytes)) return ERR_INVALID;
    if (!n) return 0;
    grammar *g = m->g;
    gcache *c = &g->c;
    cache_check(c);
    uint32_t d = m_state(m);
    for (size_t i = 0; i < n; i++) {
        d = ds_step(g, c, d, (uint8_t)bytes[i]);
        if (d == DEAD) return ERR_INVALID;
    }
    m_set(m, d);
    return 0;
}

int gmatch_accept(gmatch *m, int32_t token) {
    if (!m || !m->v || m->ended || token < 0 || token >= m->v->n_vocab) return ERR_INVALID;
    const gvocab *v = m->v;
    switch (v->kind[token]) {
    case GV_NEVER: return ERR_INVALID;
    case GV_EOG:
        if (!m->can_end) return ERR_INVALID;
        m->ended = true;
        return 0;
    default:
        return gmatch_accept_bytes(m, (const char *)v->bytes + v->tok_off[token],
                                   v->tok_off[token + 1] - v->tok_off[token]);
    }
}

int gmatch_forced(gmatch *m, char *buf, int cap) {
    if (!m || m->ended || cap <= 0) return 0;
    grammar *g = m->g;
    gcache *c = &g->c;
    cache_check(c);
    uint32_t d = m_state(m);
    int n = 0;
    while (n < cap) {
        const gdstate *s = &c->ds[d];
        if (s->can_end) break;
        int count = 0, b = -1;
        for (int w = 0; w < 4 && count < 2; w++) {
            uint64_t x = s->bytes[w];
            if (!x) continue;
            count += __builtin_popcountll(x);
            b = w * 64 + __builtin_ctzll(x);
        }
        if (count != 1) break;
        uint32_t nd = ds_step(g, c, d, (uint8_t)b);
        if (nd == DEAD) break;
        buf[n++] = (char)b;
        d = nd;
    }
    return n;
}

/* Frees the least recently used masks until `need` more bytes fit. */
static void masks_make_room(gcache *c, size_t need) {
    size_t budget = c->budget_bytes / 2;
    while (c->n_masked && c->mask_bytes + need > budget) {
        uint32_t best = 0;
        for (uint32_t i = 1; i < c->n_masked; i++)
            if (c->ds[c->masked[i]].lru < c->ds[c->masked[best]].lru) best = i;
        gdstate *d = &c->ds[c->masked[best]];
        free(d->mask);
        d->mask = NULL;
        c->mask_bytes -= need; /* all masks have the same size */
        c->masked[best] = c->masked[--c->n_masked];
    }
}

/* How the units of a run class (gvocab, RUN_*) step from state d: the
 * most of its ASCII units (and, for RUN_PLAIN, every multi-byte one) to the
 * same live state (PK_UNIFORM, run_next) or to DEAD (PK_DEAD), the other
 * ASCII units being the exceptions (run_exc); else PK_MIXED (multi-byte
 * code points that do not step alike). For RUN_PLAIN, checked over every
 * valid UTF-8 encoding through the DFA, continuation bytes shared by memo.
 * Memoized in the gdstate. */
enum { PK_UNKNOWN = 0, PK_UNIFORM, PK_DEAD, PK_MIXED };

typedef struct {
    uint32_t x[64];
    uint8_t k[64];
    int n;
} cont_memo;

/* Every k-continuation-byte tail from x (first byte in lo..hi) ends at T. */
static bool cont_ok(const grammar *g, gcache *c, uint32_t x, int k, uint8_t lo, uint8_t hi, uint32_t T, cont_memo *mm) {
    if (x == DEAD) return T == DEAD;
    if (k == 0) return x == T;
    bool full = lo == 0x80 && hi == 0xBF;
    for (int i = 0; full && i < mm->n; i++)
        if (mm->x[i] == x && mm->k[i] == k) return true;
    for (unsigned b = lo; b <= hi; b++)
        if (!cont_ok(g, c, ds_step(g, c, x, (uint8_t)b), k - 1, 0x80, 0xBF, T, mm)) return false;
    if (full && mm->n < 64) mm->x[mm->n] = x, mm->k[mm->n++] = (uint8_t)k;
    return true;
}

/* Is byte b a one-byte unit of class cls? (RUN_PLAIN: ASCII only.) */
static inline bool run_byte(int cls, unsigned b) {
    if (cls == RUN_PLAIN) return b >= 0x20 && b < 0x80 && b != '"' && b != '\\';
    uint8_t u = (uint8_t)b;
    return run_unit(cls, &u, 1) == 1;
}

static int run_kind(const grammar *g, gcache *c, int cls, uint32_t d) {
    if (c->ds[d].run_kind[cls]) return c->ds[d].run_kind[cls];
    /* the ASCII units' targets; T: the most common one */
    uint32_t to[128], cand[8];
    int votes[8], n_cand = 0, n_other = 0;
    for (unsigned b = 0; b < 128; b++) {
        if (!run_byte(cls, b)) continue;
        to[b] = c->ds[d].bytes[b >> 6] >> (b & 63) & 1 ? ds_step(g, c, d, (uint8_t)b) : DEAD;
        int i = 0;
        while (i < n_cand && cand[i] != to[b]) i++;
        if (i == n_cand && n_cand < 8) cand[n_cand] = to[b], votes[n_cand++] = 0;
        if (i < n_cand) votes[i]++;
        else n_other++;
    }
    int best = 0;
    for (int i = 1; i < n_cand; i++)
        if (votes[i] > votes[best]) best = i;
    uint32_t T = cand[best];
    uint64_t exc[2] = {0, 0};
    for (unsigned b = 0; b < 128; b++)
        if (run_byte(cls, b) && to[b] != T) exc[b >> 6] |= 1ull << (b & 63);
    /* many exceptions make too many irregular tokens anyway: do not pay
     * for the multi-byte check (hundreds of steps on a new state) */
    bool ok = __builtin_popcountll(exc[0]) + __builtin_popcountll(exc[1]) <= 16;
    if (ok && cls == RUN_PLAIN) { /* the multi-byte code points go to T too */
        static const struct {
            uint8_t lead_lo, lead_hi, lo, hi, k;
        } seqs[] = {{0xC2, 0xDF, 0x80, 0xBF, 1}, {0xE0, 0xE0, 0xA0, 0xBF, 2}, {0xE1, 0xE1, 0x80, 0xBF, 2},
                    {0xE2, 0xE2, 0x81, 0xBF, 2}, {0xE3, 0xEC, 0x80, 0xBF, 2}, {0xED, 0xED, 0x80, 0x9F, 2},
                    {0xEE, 0xEF, 0x80, 0xBF, 2}, {0xF0, 0xF0, 0x90, 0xBF, 3}, {0xF1, 0xF3, 0x80, 0xBF, 3},
                    {0xF4, 0xF4, 0x80, 0x8F, 3}};
        cont_memo mm = {.n = 0};
        for (size_t i = 0; i < sizeof seqs / sizeof seqs[0] && ok; i++)
            for (unsigned l = seqs[i].lead_lo; l <= seqs[i].lead_hi && ok; l++)
                ok = cont_ok(g, c, ds_step(g, c, d, (uint8_t)l), seqs[i].k, seqs[i].lo, seqs[i].hi, T, &mm);
        if (ok) { /* E2 80 xx: all but U+2028 and U+2029 (E2 80 A8, A9) */
            uint32_t x = ds_step(g, c, d, 0xE2);
            uint32_t y = x == DEAD ? DEAD : ds_step(g, c, x, 0x80);
            ok = y == DEAD ? T == DEAD
                           : cont_ok(g, c, y, 1, 0x80, 0xA7, T, &mm) && cont_ok(g, c, y, 1, 0xAA, 0xBF, T, &mm);
        }
    }
    int kind = !ok ? PK_MIXED : T == DEAD ? PK_DEAD : PK_UNIFORM;
    gdstate *ds = &c->ds[d];
    ds->run_kind[cls] = (uint8_t)kind;
    ds->run_next[cls] = T;
    ds->run_exc[cls][0] = exc[0], ds->run_exc[cls][1] = exc[1];
    return kind;
}

/* Sets the bits of the tokens of trie t in nodes from..stop-1 (the whole
 * trie: 1..n_nodes-1; a subtree: i..end(i)) whose bytes can follow state
 * d0, the state at the parent of `from`; returns how many were not set. */
static int trie_walk(const grammar *g, gcache *c, const gtrie *t, uint32_t from, uint32_t stop, uint32_t d0,
                     uint64_t *mask) {
    uint32_t *walk = c->walk;
    int count = 0;
    const struct tnode *nodes = t->nodes;
    if (from >= stop) return 0;
    walk[nodes[from].depth - 1] = d0;
    for (uint32_t i = from; i < stop;) {
        struct tnode n = nodes[i];
        uint32_t d = ds_step(g, c, walk[n.depth - 1], n.byte);
        if (d == DEAD) {
            i = n.end;
            continue;
        }
        walk[n.depth] = d;
        for (uint32_t k = t->node_tok[i]; k < t->node_tok[i + 1]; k++) {
            int32_t id = t->toks[k];
            uint64_t bit = 1ull << (id & 63);
            count += !(mask[id >> 6] & bit);
            mask[id >> 6] |= bit;
        }
        i++;
    }
    return count;
}

/* At most how many nodes a walk of t from state d visits: the subtrees of
 * the root's children whose byte may come next. */
static int64_t walk_estimate(const gcache *c, const gtrie *t, uint32_t d) {
    const uint64_t *bytes = c->ds[d].bytes;
    int64_t n = 0;
    for (uint32_t i = 0; i < t->n_kids; i++)
        if (bytes[t->kids[i].byte >> 6] >> (t->kids[i].byte & 63) & 1) n += t->kids[i].size;
    return n;
}

/* The chain of class cls from d0 (see RUN_PLAIN): chain[0] = d0, chain[k+1]
 * the state after any regular unit from chain[k]; returns its last live
 * position (chain[0..top] are live, a regular unit from chain[top] is
 * refused unless top == GV_RUN_MAX), or -1 when a step is mixed or the
 * mask would cost more than `limit` (its estimate in *cost: trie nodes
 * walked, at most, a token stepped alone counting 8, one refused by its
 * list 1/8). */
static int run_chain(const grammar *g, gcache *c, const gvocab *v, int cls, uint32_t d0, uint32_t *chain,
                     int64_t limit, int64_t *cost) {
    const grun *run = &v->run[cls];
    int top = 0;
    int64_t n = 0;
    chain[0] = d0;
    for (; top < GV_RUN_MAX; top++) {
        int kind = run_kind(g, c, cls, chain[top]);
        if (kind == PK_MIXED) return -1;
        const gdstate *s = &c->ds[chain[top]];
        uint64_t exc[2] = {s->run_exc[cls][0], s->run_exc[cls][1]};
        uint32_t next = s->run_next[cls];
        for (int w = 0; w < 2; w++)
            for (uint64_t x = exc[w]; x; x &= x - 1) {
                unsigned b = (unsigned)(w * 64 + __builtin_ctzll(x));
                uint32_t slot = (uint32_t)top * 128 + b, n_tok = run->at_off[slot + 1] - run->at_off[slot];
                bool dead = ds_step(g, c, chain[top], (uint8_t)b) == DEAD;
                n += n_tok / 8;
                if (!dead && top) n += 8 * (int64_t)n_tok;
                else if (!dead && v->root_child[b]) n += v->all.nodes[v->root_child[b]].end - v->root_child[b];
            }
        n += walk_estimate(c, &run->tail[top], chain[top]);
        if (n > limit) return -1;
        if (kind == PK_DEAD) break;
        chain[top + 1] = next;
    }
    if (top == GV_RUN_MAX) n += walk_estimate(c, &run->tail[top], chain[top]);
    n += walk_estimate(c, &run->over, d0);
    if (n > limit) return -1;
    *cost = n;
    return top;
}

/* Token id's bytes from state d: still live at the end? */
static bool tok_live(const grammar *g, gcache *c, const gvocab *v, uint32_t d, int32_t id) {
    for (uint32_t i = v->tok_off[id]; i < v->tok_off[id + 1] && d != DEAD; i++) d = ds_step(g, c, d, v->bytes[i]);
    return d != DEAD;
}

/* The tokens of `at` for (k, x): their bits cleared; returns how many were
 * set. */
static int at_clear(const grun *run, int k, unsigned x, uint64_t *mask) {
    uint32_t slot = (uint32_t)k * 128 + x;
    int n = 0;
    for (uint32_t j = run->at_off[slot]; j < run->at_off[slot + 1]; j++) {
        int32_t id = run->at_tok[j];
        uint64_t bit = 1ull << (id & 63);
        n += !!(mask[id >> 6] & bit);
        mask[id >> 6] &= ~bit;
    }
    return n;
}

/* The mask of d0 through the chain of class cls (top from run_chain).
 * Tokens whose run is L units long continue from chain[L] with their tail;
 * all-run ones are allowed when chain[L] is live; those with a run longer
 * than the live chain are refused, except `over`, whose whole bytes are
 * walked. Then the irregular tokens (an exception unit at some position)
 * are decided apart, overwriting what the chain said of them: first those
 * refused by their list, then the exact ones (a subtree walk, one by one),
 * so a token with both kinds of exception ends up exact. Returns how many
 * tokens are allowed. */
static int run_mask(const grammar *g, gcache *c, const gvocab *v, int cls, const uint32_t *chain, int top,
                    uint64_t *mask) {
    const grun *run = &v->run[cls];
    size_t words = ((size_t)v->n_vocab + 63) / 64;
    memcpy(mask, run->le + (size_t)top * words, words * sizeof(uint64_t));
    int count = run->n_le[top]; /* le, the tails and over are disjoint */
    for (int k = 0; k <= top; k++) count += trie_walk(g, c, &run->tail[k], 1, run->tail[k].n_nodes, chain[k], mask);
    count += trie_walk(g, c, &run->over, 1, run->over.n_nodes, chain[0], mask);
    int n_k = MIN(top + 1, GV_RUN_MAX);
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < n_k; k++) {
            const gdstate *s = &c->ds[chain[k]];
            uint64_t exc[2] = {s->run_exc[cls][0], s->run_exc[cls][1]};
            for (int w = 0; w < 2; w++)
                for (uint64_t x = exc[w]; x; x &= x - 1) {
                    unsigned b = (unsigned)(w * 64 + __builtin_ctzll(x));
                    bool dead = ds_step(g, c, chain[k], (uint8_t)b) == DEAD;
                    uint32_t kid = v->root_child[b];
                    if (pass == 0) {
                        if (dead || k == 0) count -= at_clear(run, k, b, mask);
                    } else if (!dead && k == 0) {
                        if (kid) count += trie_walk(g, c, &v->all, kid, v->all.nodes[kid].end, chain[0], mask);
                    } else if (!dead) {
                        uint32_t slot = (uint32_t)k * 128 + b;
                        for (uint32_t j = run->at_off[slot]; j < run->at_off[slot + 1]; j++) {
                            int32_t id = run->at_tok[j];
                            uint64_t bit = 1ull << (id & 63), was = mask[id >> 6] & bit;
                            bool live = tok_live(g, c, v, chain[0], id);
                            count += live - !!was;
                            mask[id >> 6] = live ? mask[id >> 6] | bit : mask[id >> 6] & ~bit;
                        }
                    }
                }
        }
    return count;
}

int gmatch_mask(gmatch *m, uint64_t *mask) {
    if (!m || !m->v) return 0;
    const gvocab *v = m->v;
    size_t words = ((size_t)v->n_vocab + 63) / 64, bytes = words * sizeof(uint64_t);
    memset(mask, 0, bytes);
    if (m->ended) return 0;
    grammar *g = m->g;
    gcache *c = &g->c;
    cache_check(c);
    if (c->vocab != v) { /* masks of another vocabulary mean nothing here */
        ds_flush(c);
        c->vocab = v;
    }
    uint32_t d0 = m_state(m);
    if (c->ds[d0].mask) {
        c->mask_hits++;
        c->ds[d0].lru = ++c->tick;
        memcpy(mask, c->ds[d0].mask, bytes);
        return c->ds[d0].n_allowed;
    }
    c->mask_misses++;
    if (c->cap_walk < v->max_len + 1) {
        c->cap_walk = v->max_len + 1;
        c->walk = xrealloc(c->walk, c->cap_walk * sizeof(uint32_t));
    }
    /* Inside strings and character classes most tokens are one run (see
     * RUN_PLAIN): the first class whose mask is cheap, else the cheapest,
     * unless the whole trie's walk is cheaper still. */
    int count = -1, best = -1, best_top = 0;
    int64_t best_cost = v->run ? walk_estimate(c, &v->all, d0) : 0;
    uint32_t chain[GV_RUN_MAX + 1], best_chain[GV_RUN_MAX + 1];
    for (int cls = 0; v->run && cls < N_RUNS && best_cost > RUN_COST_CHEAP; cls++) {
        int64_t cost = 0;
        int top = run_chain(g, c, v, cls, d0, chain, best_cost - 1, &cost);
        if (top < 0) continue;
        best = cls, best_top = top, best_cost = cost;
        memcpy(best_chain, chain, sizeof chain);
    }
    if (best >= 0) {
        count = run_mask(g, c, v, best, best_chain, best_top, mask);
        c->mask_runs++;
        for (int k = 0; k <= best_top && k < GV_RUN_MAX; k++) {
            const gdstate *s = &c->ds[best_chain[k]];
            if (s->run_exc[best][0] | s->run_exc[best][1]) {
                c->mask_exceptions++;
                break;
            }
        }
    } else count = trie_walk(g, c, &v->all, 1, v->all.n_nodes, d0, mask);
    if (c->ds[d0].can_end) {
        for (int k = 0; k < v->n_eog; k++) {
            int32_t id = v->eog[k];
            mask[id >> 6] |= 1ull << (id & 63);
            count++;
        }
    }
    if (bytes <= c->budget_bytes / 2) {
        masks_make_room(c, bytes);
        gdstate *s = &c->ds[d0];
        s->mask = xmalloc(bytes);
        memcpy(s->mask, mask, bytes);
        s->n_allowed = count;
        s->lru = ++c->tick;
        if (c->n_masked == c->cap_masked) {
            c->cap_masked = c->cap_masked ? 2 * c->cap_masked : 64;
            c->masked = xrealloc(c->masked, c->cap_masked * sizeof(uint32_t));
        }
        c->masked[c->n_masked++] = d0;
        c->mask_bytes += bytes;
    }
    return count;
}
