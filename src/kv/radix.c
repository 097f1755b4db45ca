/*
 * radix.c — the prefix tree over full KV blocks (contract and diagrams in
 * radix.h, reference rules in docs/kv-cache.md).
 *
 * Representation. A node IS a block id: nodes[b] describes the node whose
 * block is b (if b is indexed), and nodes[root] with root = n_blocks is the
 * root. So the tree needs no allocation after radix_new, and "is block b
 * indexed" is nodes[b].parent != NIL.
 *
 *   nodes[]   per node: parent, first_child / next_sib / prev_sib (an
 *             intrusive doubly linked child list, for subtree walks), the
 *             number of children, state, last_use, the key hash, and the
 *             node's position in the eviction heap (-1 if not in it).
 *   tokens[]  (n_blocks, block_tokens): the edge label of node b.
 *   slots[]   one open-addressing hash table (linear probing, power-of-two
 *             size >= 2 * n_blocks) of all nodes, keyed by
 *             hash(parent id, label). Finding a child is one probe sequence
 *             plus a label compare, however many children the parent has.
 *             Deletion shifts the following cluster back (no tombstones).
 *   heap[]    a binary min-heap of the EVICTABLE nodes, ordered by
 *             (last_use, block id).
 *
 * Invariants (verified by radix_check):
 *   - every indexed node is reachable from the root through child lists, its
 *     parent is the root or an indexed node, and n_children is exact;
 *   - every indexed node is in the hash table exactly once under
 *     hash(parent, label), which is also stored in the node;
 *   - the tree holds one pool reference on every indexed block and has it
 *     watched; no other block is watched;
 *   - a node is in the heap iff it is indexed, has no children and its
 *     block's refcount is 1; the heap is ordered; heap_pos is exact;
 *   - n_cached / n_pending / n_idle count the indexed / PENDING / refcount-1
 *     nodes.
 * Hook discipline: the tree takes its reference on a new block BEFORE it
 * watches it and unwatches a block BEFORE dropping its reference, so the pool
 * hook only ever reports other holders' refs and unrefs.
 *
 * Debug builds: compiled with -DKVLOOM_KV_CHECK (the Makefile's
 * SANITIZER=address build, which `make test` runs), every public mutator
 * ends by running radix_check and kvpool_check and PANICs on the first
 * violation. Both are O(n_blocks) per call; measured under ASan this adds
 * ~1.5 s to the kv/engine unit tests and nothing measurable to the server
 * tests, so every mutation is checked (no sampling).
 *
 * Thread: the engine thread.
 */
#include "radix.h"

#include <stdlib.h>
#include <string.h>

#define NIL (-1)

typedef struct rnode {
    uint64_t last_use; /* logical clock of the last use (see radix.h)        */
    uint64_t salt;     /* a child of the root: its partition (radix_match_salted);
                          0 below (a path's salt is its first node's)      */
    uint64_t hash;     /* hash(parent, label), the key in slots[]            */
    int32_t parent;    /* node id, root, or NIL when not indexed             */
    int32_t first_child, next_sib, prev_sib;
    int32_t n_children;
    int32_t heap_pos; /* index in heap[], -1 when not evictable             */
    uint8_t state;    /* RADIX_NONE / RADIX_PENDING / RADIX_READY           */
    uint8_t mark;     /* scratch for radix_insert / radix_check             */
} rnode;

struct radix {
    kvpool *pool;
    int bt;       /* block_tokens                                       */
    int n_blocks; /* pool size; also the root's node id                 */
    int root;
    rnode *nodes;   /* (n_blocks + 1)                                    */
    int32_t *tokens; /* (n_blocks, bt)                                   */
    int32_t *slots;  /* (mask + 1) node ids or NIL                       */
    uint32_t mask;
    int32_t *heap; /* (n_blocks) evictable nodes                          */
    int n_heap;
    int32_t *stack; /* (n_blocks + 1) scratch for walks                  */
    int n_cached, n_pending;
    int n_idle; /* indexed nodes whose block's refcount is 1 (only ours) */
    uint64_t clock;
};

/* ---- hashing of (parent, label) ------------------------------------------ */

/* salt: the partition for a child of the root, 0 for every other node */
static uint64_t key_hash(const radix *t, int32_t parent, const int32_t *label, uint64_t salt) {
    return hash_bytes(label, (size_t)t->bt * sizeof(int32_t), ((uint64_t)(uint32_t)parent + 1) ^ salt);
}

static const int32_t *label_of(const radix *t, int32_t n) { return t->tokens + (size_t)n * (size_t)t->bt; }

static int32_t find_child(const radix *t, int32_t parent, const int32_t *label, uint64_t h, uint64_t salt) {
    uint32_t i = (uint32_t)h & t->mask;
    for (;;) {
        int32_t n = t->slots[i];
        if (n == NIL) return NIL;
        const rnode *x = &t->nodes[n];
        if (x->hash == h && x->parent == parent && x->salt == salt &&
            memcmp(label_of(t, n), label, (size_t)t->bt * sizeof(int32_t)) == 0)
            return n;
        i = (i + 1) & t->mask;
    }
}

static void slots_insert(radix *t, int32_t n) {
    uint32_t i = (uint32_t)t->nodes[n].hash & t->mask;
    while (t->slots[i] != NIL) i = (i + 1) & t->mask;
    t->slots[i] = n;
}

static void slots_remove(radix *t, int32_t n) {
    uint32_t i = (uint32_t)t->nodes[n].hash & t->mask;
    while (t->slots[i] != n) {
        ASSERT(t->slots[i] != NIL);
        i = (i + 1) & t->mask;
    }
    /* backward-shift deletion: move later members of the cluster into the
     * hole when their home slot does not lie cyclically in (hole, j]. */
    uint32_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & t->mask;
        int32_t m = t->slots[j];
        if (m == NIL) break;
        uint32_t home = (uint32_t)t->nodes[m].hash & t->mask;
        bool home_in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!home_in_range) {
            t->slots[hole] = m;
            hole = j;
        }
    }
    t->slots[hole] = NIL;
}

/* ---- eviction heap ------------------------------------------------------- */

static bool heap_less(const radix *t, int32_t a, int32_t b) {
    uint64_t ua = t->nodes[a].last_use, ub = t->nodes[b].last_use;
    return ua < ub || (ua == ub && a < b);
}

static void heap_set(radix *t, int pos, int32_t n) {
    t->heap[pos] = n;
    t->nodes[n].heap_pos = pos;
}

static void heap_sift_up(radix *t, int pos) {
    int32_t n = t->heap[pos];
    while (pos > 0) {
        int up = (pos - 1) / 2;
        if (!heap_less(t, n, t->heap[up])) break;
        heap_set(t, pos, t->heap[up]);
        pos = up;
    }
    heap_set(t, pos, n);
}

static void heap_sift_down(radix *t, int pos) {
    int32_t n = t->heap[pos];
    for (;;) {
        int c = 2 * pos + 1;
        if (c >= t->n_heap) break;
        if (c + 1 < t->n_heap && heap_less(t, t->heap[c + 1], t->heap[c])) c++;
        if (!heap_less(t, t->heap[c], n)) break;
        heap_set(t, pos, t->heap[c]);
        pos = c;
    }
    heap_set(t, pos, n);
}

static void heap_push(radix *t, int32_t n) {
    ASSERT(t->nodes[n].heap_pos < 0 && t->n_heap < t->n_blocks);
    heap_set(t, t->n_heap++, n);
    heap_sift_up(t, t->n_heap - 1);
}

static void heap_remove(radix *t, int32_t n) {
    int pos = t->nodes[n].heap_pos;
    ASSERT(pos >= 0 && pos < t->n_heap && t->heap[pos] == n);
    t->nodes[n].heap_pos = -1;
    int32_t last = t->heap[--t->n_heap];
    if (pos == t->n_heap) return;
    heap_set(t, pos, last);
    heap_sift_up(t, pos);
    heap_sift_down(t, t->nodes[last].heap_pos);
}

static bool is_evictable(const radix *t, int32_t n) {
    const rnode *x = &t->nodes[n];
    return n != t->root && x->parent != NIL && x->n_children == 0 && kvpool_refcount(t->pool, n) == 1;
}

/* Puts n into the heap or takes it out so that membership == is_evictable. */
static void update_evictable(radix *t, int32_t n) {
    if (n == t->root) return;
    bool want = is_evictable(t, n), in = t->nodes[n].heap_pos >= 0;
    if (want && !in) heap_push(t, n);
    else if (!want && in) heap_remove(t, n);
}

/* last_use only grows, so a node in the heap only moves down. */
static void set_last_use(radix *t, int32_t n, uint64_t v) {
    rnode *x = &t->nodes[n];
    if (x->last_use == v) return;
    x->last_use = v;
    if (x->heap_pos >= 0) heap_sift_down(t, x->heap_pos);
}

/* The pool reports that another holder took (refcount 2) or dropped
 * (refcount 1) a reference on one of our blocks. A drop to 1 is a release:
 * the block's last outside user is gone, which counts as a use now. */
static void radix_hook(void *ctx, int32_t block, int refcount) {
    radix *t = ctx;
    ASSERT(block >= 0 && block < t->n_blocks && t->nodes[block].parent != NIL);
    if (refcount == 1) {
        t->nodes[block].last_use = ++t->clock;
        t->n_idle++;
    } else {
        t->n_idle--;
    }
    update_evictable(t, block);
}

/* ---- linking and unlinking nodes ---------------------------------------- */

static void link_node(radix *t, int32_t n, int32_t parent, const int32_t *label, uint64_t h, uint64_t salt,
                      int state) {
    rnode *x = &t->nodes[n], *p = &t->nodes[parent];
    ASSERT(x->parent == NIL);
    memcpy(t->tokens + (size_t)n * (size_t)t->bt, label, (size_t)t->bt * sizeof(int32_t));
    x->hash = h;
    x->salt = salt;
    x->parent = parent;
    x->first_child = NIL;
    x->n_children = 0;
    x->heap_pos = -1;
    x->state = (uint8_t)state;
    x->last_use = t->clock;
    x->prev_sib = NIL;
    x->next_sib = p->first_child;
    if (p->first_child != NIL) t->nodes[p->first_child].prev_sib = n;
    p->first_child = n;
    p->n_children++;
    slots_insert(t, n);
    t->n_cached++;
    if (state == RADIX_PENDING) t->n_pending++;
    kvpool_ref(t->pool, n); /* the tree's reference, taken before watching */
    kvpool_watch(t->pool, n, true);
    update_evictable(t, parent); /* it has a child now */
}

/* Removes a childless node and drops the tree's reference. Returns the
 * block's refcount afterwards (0 = it went back to the pool). */
static int unlink_node(radix *t, int32_t n) {
    rnode *x = &t->nodes[n];
    ASSERT(x->parent != NIL && x->n_children == 0);
    int32_t parent = x->parent;
    rnode *p = &t->nodes[parent];
    if (x->heap_pos >= 0) heap_remove(t, n);
    slots_remove(t, n);
    if (x->prev_sib != NIL) t->nodes[x->prev_sib].next_sib = x->next_sib;
    else p->first_child = x->next_sib;
    if (x->next_sib != NIL) t->nodes[x->next_sib].prev_sib = x->prev_sib;
    p->n_children--;
    t->n_cached--;
    if (x->state == RADIX_PENDING) t->n_pending--;
    x->parent = x->first_child = x->next_sib = x->prev_sib = NIL;
    x->state = RADIX_NONE;
    x->last_use = 0;
    kvpool_watch(t->pool, n, false); /* unwatch before dropping our reference */
    int rc = kvpool_unref(t->pool, n);
    if (rc == 0) t->n_idle--;
    update_evictable(t, parent);
    return rc;
}

#ifdef KVLOOM_KV_CHECK
static void debug_check(const radix *t, const char *where) {
    err_t e = {0};
    if (radix_check(t, &e) || kvpool_check(t->pool, &e)) PANIC("after %s: %s", where, e.msg);
}
#else
#define debug_check(t, where) ((void)0)
#endif

/* ---- public API ---------------------------------------------------------- */

size_t radix_bytes(const radix *t) {
    const size_t n = (size_t)t->n_blocks;
    return sizeof *t + (n + 1) * sizeof *t->nodes + n * (size_t)t->bt * sizeof *t->tokens +
           ((size_t)t->mask + 1) * sizeof *t->slots + n * sizeof *t->heap + (n + 1) * sizeof *t->stack;
}

radix *radix_new(kvpool *pool, int block_tokens) {
    ASSERT(pool && block_tokens >= 1);
    int n = kvpool_n_blocks(pool);
    size_t label_ints;
    if (!mul_ok((size_t)n, (size_t)block_tokens, &label_ints)) PANIC("radix_new: n_blocks * block_tokens overflows");
    radix *t = xcalloc(1, sizeof *t);
    t->pool = pool;
    t->bt = block_tokens;
    t->n_blocks = n;
    t->root = n;
    t->nodes = xcalloc((size_t)n + 1, sizeof *t->nodes);
    for (int i = 0; i <= n; i++) {
        rnode *x = &t->nodes[i];
        x->parent = x->first_child = x->next_sib = x->prev_sib = NIL;
        x->heap_pos = -1;
    }
    t->tokens = xmalloc(label_ints * sizeof(int32_t));
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)n) cap *= 2;
    t->mask = cap - 1;
    t->slots = xmalloc((size_t)cap * sizeof *t->slots);
    for (uint32_t i = 0; i < cap; i++) t->slots[i] = NIL;
    t->heap = xmalloc((size_t)n * sizeof *t->heap);
    t->stack = xmalloc(((size_t)n + 1) * sizeof *t->stack);
    kvpool_set_hook(pool, radix_hook, t);
    return t;
}

void radix_free(radix *t) {
    if (!t) return;
    kvpool_set_hook(t->pool, NULL, NULL);
    for (int32_t b = 0; b < t->n_blocks; b++) {
        if (t->nodes[b].parent == NIL) continue;
        kvpool_watch(t->pool, b, false);
        kvpool_unref(t->pool, b);
    }
    free(t->nodes);
    free(t->tokens);
    free(t->slots);
    free(t->heap);
    free(t->stack);
    free(t);
}

int radix_block_tokens(const radix *t) { return t->bt; }

int radix_match(radix *t, const int32_t *tokens, int n_tokens, int32_t *blocks, int cap, int *n_pending) {
    return radix_match_salted(t, 0, tokens, n_tokens, blocks, cap, n_pending);
}

int radix_match_salted(radix *t, uint64_t salt, const int32_t *tokens, int n_tokens, int32_t *blocks, int cap,
                       int *n_pending) {
    if (n_pending) *n_pending = 0;
    if (n_tokens < 0 || cap < 0) return ERR_INVALID;
    int n_full = n_tokens / t->bt;
    uint64_t now = ++t->clock;
    int32_t cur = t->root;
    int n_ready = 0, n_wait = 0;
    for (int i = 0; i < n_full && n_ready + n_wait < cap; i++) {
        const int32_t *label = tokens + (size_t)i * (size_t)t->bt;
        uint64_t sl = cur == t->root ? salt : 0;
        int32_t c = find_child(t, cur, label, key_hash(t, cur, label, sl), sl);
        if (c == NIL) break;
        bool waiting = n_wait > 0 || t->nodes[c].state == RADIX_PENDING;
        if (waiting && !n_pending) break;
        kvpool_ref(t->pool, c); /* the caller's reference; the hook takes c off the heap */
        set_last_use(t, c, now);
        blocks[n_ready + n_wait] = c;
        if (waiting) n_wait++;
        else n_ready++;
        cur = c;
    }
    if (n_pending) *n_pending = n_wait;
    debug_check(t, "radix_match");
    return n_ready;
}

int32_t radix_match_partial(radix *t, uint64_t salt, const int32_t *tokens, int n_tokens, const int32_t *blocks,
                            int n_matched, int *n_rows) {
    *n_rows = 0;
    if (n_matched < 0 || n_tokens < 0 || (int64_t)n_matched * t->bt >= n_tokens) return -1;
    int32_t parent = t->root;
    if (n_matched > 0) {
        parent = blocks[n_matched - 1];
        if (parent < 0 || parent >= t->n_blocks || t->nodes[parent].parent == NIL) return -1;
    }
    const int32_t *want = tokens + (size_t)n_matched * (size_t)t->bt;
    int avail = MIN(n_tokens - n_matched * t->bt, t->bt - 1);
    int32_t best = -1;
    int best_run = 0;
    for (int32_t c = t->nodes[parent].first_child; c != NIL; c = t->nodes[c].next_sib) {
        const rnode *x = &t->nodes[c];
        if (x->state != RADIX_READY || (parent == t->root && x->salt != salt)) continue;
        const int32_t *label = label_of(t, c);
        int run = 0;
        while (run < avail && label[run] == want[run]) run++;
        if (run > best_run || (run == best_run && run > 0 && c < best)) best = c, best_run = run;
    }
    if (best < 0) return -1;
    kvpool_ref(t->pool, best); /* the caller's; the hook takes it off the heap */
    *n_rows = best_run;
    debug_check(t, "radix_match_partial");
    return best;
}

int radix_insert(radix *t, const int32_t *tokens, int n_full_blocks, int32_t *blocks, int state) {
    return radix_insert_salted(t, 0, tokens, n_full_blocks, blocks, state);
}

int radix_insert_salted(radix *t, uint64_t salt, const int32_t *tokens, int n_full_blocks, int32_t *blocks, int state) {
    if (state != RADIX_PENDING && state != RADIX_READY) return ERR_INVALID;
    if (n_full_blocks < 0) return ERR_INVALID;
    /* 1. walk the part of the path that already exists (read-only) */
    int32_t cur = t->root;
    int k = 0;
    while (k < n_full_blocks) {
        const int32_t *label = tokens + (size_t)k * (size_t)t->bt;
        uint64_t sl = cur == t->root ? salt : 0;
        int32_t c = find_child(t, cur, label, key_hash(t, cur, label, sl), sl);
        if (c == NIL) break;
        t->stack[k++] = c;
        cur = c;
    }
    /* 2. validate the caller's blocks for the new nodes; change nothing yet */
    int bad = -1;
    for (int i = k; i < n_full_blocks; i++) {
        int32_t b = blocks[i];
        if (b < 0 || b >= t->n_blocks || kvpool_refcount(t->pool, b) < 1 || t->nodes[b].parent != NIL ||
            t->nodes[b].mark) {
            bad = i;
            break;
        }
        t->nodes[b].mark = 1;
    }
    for (int i = k; i < (bad < 0 ? n_full_blocks : bad); i++) t->nodes[blocks[i]].mark = 0;
    if (bad >= 0) return ERR_INVALID;
    /* 3. existing nodes: report the tree's blocks, mark them used */
    uint64_t now = ++t->clock;
    for (int i = 0; i < k; i++) {
        int32_t c = t->stack[i];
        if (blocks[i] == c && state == RADIX_READY && t->nodes[c].state == RADIX_PENDING) {
            t->nodes[c].state = RADIX_READY;
            t->n_pending--;
        }
        blocks[i] = c;
        set_last_use(t, c, now);
    }
    /* 4. new nodes below */
    for (int i = k; i < n_full_blocks; i++) {
        const int32_t *label = tokens + (size_t)i * (size_t)t->bt;
        uint64_t sl = cur == t->root ? salt : 0;
        link_node(t, blocks[i], cur, label, key_hash(t, cur, label, sl), sl, state);
        cur = blocks[i];
    }
    debug_check(t, "radix_insert");
    return n_full_blocks - k;
}

int radix_set_ready(radix *t, int32_t block) {
    if (block < 0 || block >= t->n_blocks || t->nodes[block].parent == NIL) return ERR_NOTFOUND;
    if (t->nodes[block].state == RADIX_PENDING) {
        t->nodes[block].state = RADIX_READY;
        t->n_pending--;
    }
    debug_check(t, "radix_set_ready");
    return 0;
}

int radix_remove_pending(radix *t, int32_t block) {
    if (block < 0 || block >= t->n_blocks || t->nodes[block].parent == NIL) return ERR_NOTFOUND;
    if (t->nodes[block].state != RADIX_PENDING) return ERR_INVALID;
    /* preorder walk of the subtree into stack[]; unlinking it in reverse
     * order removes every node after all of its descendants */
    int n = 0, next = 0;
    t->stack[n++] = block;
    while (next < n) {
        int32_t x = t->stack[next++];
        for (int32_t c = t->nodes[x].first_child; c != NIL; c = t->nodes[c].next_sib) t->stack[n++] = c;
    }
    for (int i = n - 1; i >= 0; i--) unlink_node(t, t->stack[i]);
    debug_check(t, "radix_remove_pending");
    return n;
}

int radix_block_state(const radix *t, int32_t block) {
    if (block < 0 || block >= t->n_blocks) return RADIX_NONE;
    return t->nodes[block].state;
}

int radix_evict(radix *t, int n_blocks) {
    int freed = 0;
    while (freed < n_blocks && t->n_heap > 0) {
        int rc = unlink_node(t, t->heap[0]); /* may push its parent */
        ASSERT(rc == 0);
        freed++;
    }
    debug_check(t, "radix_evict");
    return freed;
}

int radix_n_cached(const radix *t) { return t->n_cached; }
int radix_n_pending(const radix *t) { return t->n_pending; }
int radix_n_evictable(const radix *t) { return t->n_heap; }
int radix_n_idle(const radix *t) { return t->n_idle; }
uint64_t radix_clock(const radix *t) { return t->clock; }

uint64_t radix_last_use(const radix *t, int32_t block) {
    if (block < 0 || block >= t->n_blocks || t->nodes[block].parent == NIL) return 0;
    return t->nodes[block].last_use;
}

int radix_check(const radix *t, err_t *e) {
    const rnode *N = t->nodes;
    int n_indexed = 0, n_pend = 0, n_evictable = 0, n_idle = 0;
    for (int32_t b = 0; b < t->n_blocks; b++) {
        const rnode *x = &N[b];
        if (x->mark) return err_set(e, ERR_INVALID, "radix: block %d has a stale mark", (int)b);
        if (x->parent == NIL) {
            if (x->state != RADIX_NONE || x->heap_pos != -1 || x->first_child != NIL || x->n_children != 0)
                return err_set(e, ERR_INVALID, "radix: unindexed block %d has node state", (int)b);
            if (kvpool_is_watched(t->pool, b))
                return err_set(e, ERR_INVALID, "radix: unindexed block %d is watched", (int)b);
            continue;
        }
        n_indexed++;
        if (x->state == RADIX_PENDING) n_pend++;
        else if (x->state != RADIX_READY)
            return err_set(e, ERR_INVALID, "radix: block %d has bad state %d", (int)b, x->state);
        if (x->parent < 0 || x->parent > t->root || (x->parent != t->root && N[x->parent].parent == NIL))
            return err_set(e, ERR_INVALID, "radix: block %d has bad parent %d", (int)b, (int)x->parent);
        int rc = kvpool_refcount(t->pool, b);
        if (rc < 1) return err_set(e, ERR_INVALID, "radix: indexed block %d has refcount %d", (int)b, rc);
        if (!kvpool_is_watched(t->pool, b))
            return err_set(e, ERR_INVALID, "radix: indexed block %d is not watched", (int)b);
        if (x->last_use > t->clock)
            return err_set(e, ERR_INVALID, "radix: block %d last_use %llu is after the clock %llu", (int)b,
                           (unsigned long long)x->last_use, (unsigned long long)t->clock);
        const int32_t *label = label_of(t, b);
        if (x->salt && x->parent != t->root)
            return err_set(e, ERR_INVALID, "radix: block %d has a salt below the root", (int)b);
        uint64_t h = key_hash(t, x->parent, label, x->salt);
        if (x->hash != h) return err_set(e, ERR_INVALID, "radix: block %d has a stale hash", (int)b);
        if (find_child(t, x->parent, label, h, x->salt) != b)
            return err_set(e, ERR_INVALID, "radix: block %d is not found under its parent %d", (int)b,
                           (int)x->parent);
        n_idle += rc == 1;
        bool want = x->n_children == 0 && rc == 1;
        if (want) n_evictable++;
        if (want != (x->heap_pos >= 0))
            return err_set(e, ERR_INVALID, "radix: block %d evictable=%d but heap_pos=%d", (int)b, want,
                           (int)x->heap_pos);
    }
    if (n_indexed != t->n_cached)
        return err_set(e, ERR_INVALID, "radix: %d nodes indexed but n_cached is %d", n_indexed, t->n_cached);
    if (n_idle != t->n_idle)
        return err_set(e, ERR_INVALID, "radix: %d nodes idle but n_idle is %d", n_idle, t->n_idle);
    if (n_pend != t->n_pending)
        return err_set(e, ERR_INVALID, "radix: %d nodes pending but n_pending is %d", n_pend, t->n_pending);
    /* child lists: walk from the root; each node is visited once, its list is
     * doubly linked, its count exact, and every indexed node is reached */
    int32_t *stack = t->stack;
    int n = 0, visited = 0;
    stack[n++] = t->root;
    while (n > 0) {
        int32_t p = stack[--n];
        int cnt = 0;
        int32_t prev = NIL;
        for (int32_t c = N[p].first_child; c != NIL; c = N[c].next_sib) {
            if (c < 0 || c >= t->n_blocks || N[c].parent != p)
                return err_set(e, ERR_INVALID, "radix: child list of %d holds %d whose parent differs", (int)p,
                               (int)c);
            if (N[c].prev_sib != prev)
                return err_set(e, ERR_INVALID, "radix: block %d has a bad prev_sib", (int)c);
            if (++cnt > N[p].n_children || ++visited > n_indexed)
                return err_set(e, ERR_INVALID, "radix: child list of %d is longer than n_children %d", (int)p,
                               (int)N[p].n_children);
            stack[n++] = c;
            prev = c;
        }
        if (cnt != N[p].n_children)
            return err_set(e, ERR_INVALID, "radix: node %d lists %d children, n_children %d", (int)p, cnt,
                           (int)N[p].n_children);
    }
    if (visited != n_indexed)
        return err_set(e, ERR_INVALID, "radix: %d of %d indexed nodes reachable from the root", visited, n_indexed);
    if (N[t->root].parent != NIL || N[t->root].heap_pos != -1)
        return err_set(e, ERR_INVALID, "radix: the root has a parent or is in the heap");
    /* hash table: exactly the indexed nodes */
    int n_slots = 0;
    for (uint32_t i = 0; i <= t->mask; i++) {
        int32_t m = t->slots[i];
        if (m == NIL) continue;
        n_slots++;
        if (m < 0 || m >= t->n_blocks || N[m].parent == NIL)
            return err_set(e, ERR_INVALID, "radix: hash slot %u holds unindexed block %d", i, (int)m);
    }
    if (n_slots != n_indexed)
        return err_set(e, ERR_INVALID, "radix: %d hash slots used for %d nodes", n_slots, n_indexed);
    /* heap */
    if (t->n_heap != n_evictable)
        return err_set(e, ERR_INVALID, "radix: heap holds %d nodes, %d are evictable", t->n_heap, n_evictable);
    for (int i = 0; i < t->n_heap; i++) {
        int32_t m = t->heap[i];
        if (m < 0 || m >= t->n_blocks || N[m].heap_pos != i)
            return err_set(e, ERR_INVALID, "radix: heap slot %d holds block %d with heap_pos mismatch", i, (int)m);
        if (i > 0 && heap_less(t, m, t->heap[(i - 1) / 2]))
            return err_set(e, ERR_INVALID, "radix: heap order broken at slot %d (block %d)", i, (int)m);
    }
    return 0;
}
