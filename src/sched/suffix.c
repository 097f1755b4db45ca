/*
 * suffix.c — the depth-limited suffix trie with counts (contract and
 * picture in suffix.h).
 *
 * Nodes live in parallel arrays indexed by node id; node 0 is the root.
 * A node's children are a doubly linked sibling list (to find the most
 * frequent one, and to unlink in O(1)); a child is found from its parent
 * through one open-addressing hash table keyed by (parent, token), linear
 * probing with backward-shift deletion (no tombstones, so a long-lived
 * global store does not slow down as sequences come and go). Freed nodes
 * go on a free list threaded through next_sib. Storage doubles up to
 * max_nodes: a request's small tree costs little, a full one is bounded.
 */
#include "suffix.h"

#include <stdlib.h>
#include <string.h>

#define ROOT 0

struct suffix_tree {
    int depth, max_nodes;
    int cap;              /* node slots allocated (root included)            */
    int n_nodes;          /* live nodes, root excluded                        */
    int32_t *tok, *parent, *count, *first_child, *next_sib, *prev_sib;
    int32_t free_head;    /* free list through next_sib (-1: none)            */
    int32_t n_used;       /* slots ever handed out (ids < n_used)             */
    int32_t *slot;        /* (hcap) node id or -1                              */
    uint32_t hcap;        /* power of two, > 2 * cap                           */
};

/* A multiplicative hash of the pair (its high half is well mixed): every
 * lookup and insertion hashes, and hash_bytes' general loop was a fifth of
 * the trie's time (perf, docs/perf.md) */
static uint32_t hkey(int32_t parent, int32_t tok) {
    uint64_t k = ((uint64_t)(uint32_t)parent << 32 | (uint32_t)tok) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32) ^ (uint32_t)k;
}

static int32_t find(const suffix_tree *t, int32_t parent, int32_t tok) {
    uint32_t m = t->hcap - 1, i = hkey(parent, tok) & m;
    for (;;) {
        int32_t id = t->slot[i];
        if (id < 0) return -1;
        if (t->parent[id] == parent && t->tok[id] == tok) return id;
        i = (i + 1) & m;
    }
}

static void hash_put(suffix_tree *t, int32_t id) {
    uint32_t m = t->hcap - 1, i = hkey(t->parent[id], t->tok[id]) & m;
    while (t->slot[i] >= 0) i = (i + 1) & m;
    t->slot[i] = id;
}

static void hash_del(suffix_tree *t, int32_t id) {
    uint32_t m = t->hcap - 1, i = hkey(t->parent[id], t->tok[id]) & m;
    while (t->slot[i] != id) i = (i + 1) & m;
    /* backward shift: pull later entries of the run into the hole when their
     * home is not between the hole and themselves */
    uint32_t j = i;
    for (;;) {
        t->slot[i] = -1;
        for (;;) {
            j = (j + 1) & m;
            if (t->slot[j] < 0) return;
            uint32_t h = hkey(t->parent[t->slot[j]], t->tok[t->slot[j]]) & m;
            bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
            if (!stays) break;
        }
        t->slot[i] = t->slot[j];
        i = j;
    }
}

/* Grows node storage to hold `want` slots (root included) and the hash
 * table to match. false: out of memory (nothing changed). */
static bool grow(suffix_tree *t, int want) {
    if (want <= t->cap) return true;
    int cap = t->cap;
    while (cap < want) cap = cap * 2;
    if (cap > t->max_nodes + 1) cap = t->max_nodes + 1;
    int32_t **arrs[6] = {&t->tok, &t->parent, &t->count, &t->first_child, &t->next_sib, &t->prev_sib};
    for (int k = 0; k < 6; k++) {
        int32_t *p = realloc(*arrs[k], (size_t)cap * sizeof *p);
        if (!p) return false; /* the arrays grown so far stay valid and larger */
        *arrs[k] = p;
    }
    uint32_t hcap = t->hcap;
    while (hcap < 2u * (uint32_t)cap + 2) hcap *= 2;
    if (hcap != t->hcap) {
        int32_t *s = malloc((size_t)hcap * sizeof *s);
        if (!s) return false;
        free(t->slot);
        t->slot = s;
        t->hcap = hcap;
        memset(t->slot, 0xff, (size_t)hcap * sizeof *s);
        for (int32_t id = 1; id < t->n_used; id++)
            if (t->parent[id] >= 0) hash_put(t, id);
    }
    t->cap = cap;
    return true;
}

suffix_tree *suffix_new(int depth, int max_nodes) {
    ASSERT(depth >= 2 && depth <= SUFFIX_MAX_DEPTH && max_nodes >= 16);
    suffix_tree *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->depth = depth;
    t->max_nodes = max_nodes;
    t->cap = 1;
    t->hcap = 4;
    t->slot = malloc(t->hcap * sizeof *t->slot);
    if (!t->slot || !grow(t, MIN(max_nodes + 1, 256)) || t->cap < 2) {
        suffix_free(t);
        return NULL;
    }
    suffix_clear(t);
    return t;
}

void suffix_free(suffix_tree *t) {
    if (!t) return;
    free(t->tok);
    free(t->parent);
    free(t->count);
    free(t->first_child);
    free(t->next_sib);
    free(t->prev_sib);
    free(t->slot);
    free(t);
}

void suffix_clear(suffix_tree *t) {
    memset(t->slot, 0xff, (size_t)t->hcap * sizeof *t->slot);
    t->n_nodes = 0;
    t->n_used = 1;
    t->free_head = -1;
    t->tok[ROOT] = -1;
    t->parent[ROOT] = -1;
    t->count[ROOT] = 0;
    t->first_child[ROOT] = -1;
    t->next_sib[ROOT] = t->prev_sib[ROOT] = -1;
}

int suffix_depth(const suffix_tree *t) { return t->depth; }
int suffix_n_nodes(const suffix_tree *t) { return t->n_nodes; }
int suffix_max_nodes(const suffix_tree *t) { return t->max_nodes; }

size_t suffix_bytes(const suffix_tree *t) {
    return sizeof *t + (size_t)t->cap * 6 * sizeof(int32_t) + (size_t)t->hcap * sizeof(int32_t);
}

/* A new child of parent for tok with count 0, or -1 when the tree is full. */
static int32_t node_new(suffix_tree *t, int32_t parent, int32_t tok) {
    if (t->n_nodes >= t->max_nodes) return -1;
    int32_t id;
    if (t->free_head >= 0) {
        id = t->free_head;
        t->free_head = t->next_sib[id];
    } else {
        if (t->n_used >= t->cap && !grow(t, t->n_used + 1)) return -1;
        id = t->n_used++;
    }
    t->tok[id] = tok;
    t->parent[id] = parent;
    t->count[id] = 0;
    t->first_child[id] = -1;
    t->prev_sib[id] = -1;
    t->next_sib[id] = t->first_child[parent];
    if (t->first_child[parent] >= 0) t->prev_sib[t->first_child[parent]] = id;
    t->first_child[parent] = id;
    hash_put(t, id);
    t->n_nodes++;
    return id;
}

static void node_del(suffix_tree *t, int32_t id) {
    ASSERT(id != ROOT && t->count[id] == 0 && t->first_child[id] < 0);
    hash_del(t, id);
    int32_t p = t->parent[id];
    if (t->prev_sib[id] >= 0) t->next_sib[t->prev_sib[id]] = t->next_sib[id];
    else t->first_child[p] = t->next_sib[id];
    if (t->next_sib[id] >= 0) t->prev_sib[t->next_sib[id]] = t->prev_sib[id];
    t->parent[id] = -1;
    t->next_sib[id] = t->free_head;
    t->free_head = id;
    t->n_nodes--;
}

void suffix_cursor_reset(suffix_cursor *c) {
    for (int i = 0; i < SUFFIX_MAX_DEPTH; i++) c->node[i] = -1;
    c->node[0] = ROOT;
    c->n_tokens = 0;
}

int suffix_push(suffix_tree *t, suffix_cursor *c, int32_t tok) {
    ASSERT(tok >= 0);
    int d = t->depth, max_l = MIN(c->n_tokens, d - 1), full = 0;
    int32_t nw[SUFFIX_MAX_DEPTH + 1];
    for (int l = 0; l <= max_l; l++) {
        int32_t p = l == 0 ? ROOT : c->node[l];
        nw[l + 1] = -1;
        if (p < 0) continue;
        int32_t ch = find(t, p, tok);
        if (ch < 0) ch = node_new(t, p, tok);
        if (ch < 0) {
            full = 1;
            continue;
        }
        t->count[ch]++;
        nw[l + 1] = ch;
    }
    for (int l = 1; l <= max_l + 1 && l < d; l++) c->node[l] = nw[l];
    c->n_tokens++;
    return full;
}

int suffix_add(suffix_tree *t, const int32_t *toks, int n, err_t *e) {
    if (n <= 0) return 0;
    if ((int64_t)n * t->depth > (int64_t)(t->max_nodes - t->n_nodes))
        return err_set(e, ERR_RANGE, "suffix tree: %d tokens may need %lld nodes, %d are free", n,
                       (long long)n * t->depth, t->max_nodes - t->n_nodes);
    suffix_cursor c;
    suffix_cursor_reset(&c);
    for (int i = 0; i < n; i++) {
        int full = suffix_push(t, &c, toks[i]);
        ASSERT(!full); /* the bound above: out of memory only */
    }
    return 0;
}

void suffix_remove(suffix_tree *t, const int32_t *toks, int n) {
    int32_t path[SUFFIX_MAX_DEPTH];
    for (int s = 0; s < n; s++) {
        int len = MIN(t->depth, n - s);
        int32_t cur = ROOT;
        for (int l = 0; l < len; l++) {
            cur = find(t, cur, toks[s + l]);
            ASSERT(cur > 0 && t->count[cur] > 0); /* removing what was not added */
            t->count[cur]--;
            path[l] = cur;
        }
        for (int l = len - 1; l >= 0; l--)
            if (t->count[path[l]] == 0) node_del(t, path[l]);
    }
}

/* The node spelling s[0, n), or -1. */
static int32_t walk(const suffix_tree *t, const int32_t *s, int n) {
    int32_t cur = ROOT;
    for (int i = 0; i < n && cur >= 0; i++) cur = find(t, cur, s[i]);
    return cur;
}

int suffix_count(const suffix_tree *t, const int32_t *s, int n) {
    if (n <= 0 || n > t->depth) return 0;
    int32_t id = walk(t, s, n);
    return id > 0 ? t->count[id] : 0;
}

int suffix_propose(const suffix_tree *t, const suffix_cursor *c, const int32_t *ctx, int n, int match_max, int max,
                   float p_min, int32_t *out, float *prob, int *match_len) {
    if (match_len) *match_len = 0;
    match_max = MIN(MIN(match_max, t->depth - 1), n);
    if (c) ASSERT(c->n_tokens == n);
    int32_t node = -1;
    int l = match_max;
    for (; l >= 1; l--) {
        node = c ? c->node[l] : walk(t, ctx + n - l, l);
        if (node > 0 && t->first_child[node] >= 0) break;
    }
    if (l < 1) return 0;
    if (match_len) *match_len = l;
    int k = 0;
    double p = 1;
    for (int dep = l; k < max && dep < t->depth; dep++) {
        int32_t best = -1;
        for (int32_t ch = t->first_child[node]; ch >= 0; ch = t->next_sib[ch])
            if (best < 0 || t->count[ch] > t->count[best] || (t->count[ch] == t->count[best] && t->tok[ch] < t->tok[best]))
                best = ch;
        if (best < 0) break;
        double q = (double)t->count[best] / (double)t->count[node];
        p *= q;
        if (p < p_min) break;
        out[k] = t->tok[best];
        if (prob) prob[k] = (float)q;
        k++;
        node = best;
    }
    return k;
}

int suffix_check(const suffix_tree *t, err_t *e) {
    int live = 0;
    for (int32_t id = 1; id < t->n_used; id++) {
        if (t->parent[id] < 0) continue; /* free */
        live++;
        int32_t p = t->parent[id];
        if (t->count[id] < 1) return err_set(e, ERR_INVALID, "suffix node %d: count %d", id, t->count[id]);
        if (p != ROOT && t->count[id] > t->count[p])
            return err_set(e, ERR_INVALID, "suffix node %d: count %d above its parent's %d", id, t->count[id], t->count[p]);
        if (find(t, p, t->tok[id]) != id) return err_set(e, ERR_INVALID, "suffix node %d: not found by hash", id);
        long sum = 0;
        int32_t prev = -1;
        for (int32_t ch = t->first_child[id]; ch >= 0; ch = t->next_sib[ch]) {
            if (t->parent[ch] != id || t->prev_sib[ch] != prev)
                return err_set(e, ERR_INVALID, "suffix node %d: child %d badly linked", id, ch);
            sum += t->count[ch];
            prev = ch;
        }
        if (sum > t->count[id])
            return err_set(e, ERR_INVALID, "suffix node %d: children count %ld above its %d", id, sum, t->count[id]);
    }
    if (live != t->n_nodes) return err_set(e, ERR_INVALID, "suffix tree: %d live nodes, %d counted", live, t->n_nodes);
    int in_hash = 0;
    for (uint32_t i = 0; i < t->hcap; i++) in_hash += t->slot[i] >= 0;
    if (in_hash != t->n_nodes) return err_set(e, ERR_INVALID, "suffix tree: %d hash entries, %d nodes", in_hash, t->n_nodes);
    return 0;
}

/* ---- the scan: suffix_propose of a one-sequence trie, without the trie ---- */

/* The hash table of the children's counts: a power of two >= 2 * n slots. */
static int scan_hcap(int n) {
    int h = 4;
    while (h < 2 * n) h *= 2;
    return h;
}

size_t suffix_scan_scratch(int n) { return (size_t)n + 2 * (size_t)scan_hcap(n); }

int suffix_scan_propose(const int32_t *ctx, int n, int depth, int match_max, int max, float p_min, int32_t *scratch,
                        int32_t *out, float *prob, int *match_len) {
    if (match_len) *match_len = 0;
    match_max = MIN(MIN(match_max, depth - 1), n);
    if (match_max < 1 || max <= 0) return 0;
    /* occ: the places of the last token that have a token after them
     * (branch-free, the one pass over the whole context), then each one's
     * match backwards; the trie's longest suffix with a child is the
     * longest match */
    int32_t *occ = scratch, *key = scratch + n, *cnt = key + scan_hcap(n);
    const int32_t last = ctx[n - 1];
    int n_occ = 0;
    for (int e = 0; e + 1 < n; e++) {
        occ[n_occ] = e;
        n_occ += ctx[e] == last;
    }
    int l = 0;
    for (int i = 0; i < n_occ; i++) {
        int e = occ[i], m = 1;
        while (m < match_max && e - m >= 0 && ctx[e - m] == ctx[n - 1 - m]) m++;
        key[i] = m; /* (key: free until the counting below) */
        if (m > l) l = m;
    }
    if (l < 1) return 0;
    if (match_len) *match_len = l;
    /* occ: where the path's string ends (its occurrences: the node's count);
     * the context's own end is one of them, with no token after it */
    int w = 0;
    for (int i = 0; i < n_occ; i++)
        if (key[i] >= l) occ[w++] = occ[i];
    n_occ = w;
    occ[n_occ++] = n - 1;
    int k = 0;
    double p = 1;
    for (int dep = l; k < max && dep < depth; dep++) {
        /* the children: the tokens after the occurrences, counted in a hash
         * table; the most frequent (ties: the lowest token) */
        int hcap = scan_hcap(n_occ), best_c = 0;
        int32_t best = -1;
        for (int i = 0; i < hcap; i++) cnt[i] = 0;
        for (int i = 0; i < n_occ; i++) {
            if (occ[i] + 1 >= n) continue;
            int32_t t = ctx[occ[i] + 1];
            uint32_t h = (uint32_t)(((uint64_t)(uint32_t)t * 0x9E3779B97F4A7C15ull) >> 32) & (uint32_t)(hcap - 1);
            while (cnt[h] && key[h] != t) h = (h + 1) & (uint32_t)(hcap - 1);
            key[h] = t;
            int c = ++cnt[h];
            if (c > best_c || (c == best_c && t < best)) best_c = c, best = t;
        }
        if (!best_c) break;
        double q = (double)best_c / (double)n_occ;
        p *= q;
        if (p < p_min) break;
        out[k] = best;
        if (prob) prob[k] = (float)q;
        k++;
        w = 0;
        for (int i = 0; i < n_occ; i++)
            if (occ[i] + 1 < n && ctx[occ[i] + 1] == best) occ[w++] = occ[i] + 1;
        n_occ = w;
    }
    return k;
}
