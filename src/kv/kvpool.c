/*
 * kvpool.c — the KV block pool: refcounts and a LIFO stack of free block ids.
 *
 * Every operation is O(1) except kvpool_check, which is O(n_blocks). The
 * free stack is LIFO so a block freed a moment ago (still warm in the CPU
 * caches) is the next one handed out. free_pos[b] is b's index in the stack
 * (or -1 when b is in use), which lets kvpool_check verify the stack against
 * the refcounts in one pass.
 *
 * Invariants and reference rules: see kvpool.h. Thread: the engine thread.
 */
#include "kvpool.h"

#include <stdlib.h>

struct kvpool {
    int n_blocks;
    int n_free;
    int32_t *refcount;   /* (n_blocks)                                  */
    int32_t *free_stack; /* (n_blocks) free ids in [0, n_free), top last */
    int32_t *free_pos;   /* (n_blocks) index in free_stack, -1 if used  */
    uint8_t *watched;    /* (n_blocks) 1 = the hook fires for it        */
    kvpool_hook_fn hook;
    void *hook_ctx;
};

static void check_id(const kvpool *p, int32_t block) {
    if (block < 0 || block >= p->n_blocks)
        PANIC("kvpool: block id %d out of range [0, %d)", (int)block, p->n_blocks);
}

size_t kvpool_bytes(const kvpool *p) {
    const size_t n = (size_t)p->n_blocks;
    return sizeof *p + n * (sizeof *p->refcount + sizeof *p->free_stack + sizeof *p->free_pos + 1);
}

kvpool *kvpool_new(int n_blocks) {
    ASSERT(n_blocks >= 1);
    kvpool *p = xcalloc(1, sizeof *p);
    p->n_blocks = n_blocks;
    p->refcount = xcalloc((size_t)n_blocks, sizeof *p->refcount);
    p->free_stack = xmalloc((size_t)n_blocks * sizeof *p->free_stack);
    p->free_pos = xmalloc((size_t)n_blocks * sizeof *p->free_pos);
    p->watched = xcalloc((size_t)n_blocks, 1);
    /* push in reverse so the first allocations return 0, 1, 2, ... */
    for (int i = 0; i < n_blocks; i++) {
        int32_t b = n_blocks - 1 - i;
        p->free_stack[i] = b;
        p->free_pos[b] = i;
    }
    p->n_free = n_blocks;
    return p;
}

void kvpool_free(kvpool *p) {
    if (!p) return;
    free(p->refcount);
    free(p->free_stack);
    free(p->free_pos);
    free(p->watched);
    free(p);
}

int32_t kvpool_alloc(kvpool *p) {
    if (p->n_free == 0) return -1;
    int32_t b = p->free_stack[--p->n_free];
    p->free_pos[b] = -1;
    ASSERT(p->refcount[b] == 0);
    p->refcount[b] = 1;
    return b;
}

void kvpool_ref(kvpool *p, int32_t block) {
    check_id(p, block);
    if (p->refcount[block] <= 0) PANIC("kvpool_ref: block %d is free", (int)block);
    if (p->refcount[block] == INT32_MAX) PANIC("kvpool_ref: block %d refcount overflow", (int)block);
    int rc = ++p->refcount[block];
    if (rc == 2 && p->watched[block] && p->hook) p->hook(p->hook_ctx, block, rc);
}

int kvpool_unref(kvpool *p, int32_t block) {
    check_id(p, block);
    if (p->refcount[block] <= 0) PANIC("kvpool_unref: block %d is already free", (int)block);
    int rc = --p->refcount[block];
    if (rc == 0) {
        if (p->watched[block])
            PANIC("kvpool_unref: watched block %d dropped its last reference", (int)block);
        p->free_pos[block] = p->n_free;
        p->free_stack[p->n_free++] = block;
    } else if (rc == 1 && p->watched[block] && p->hook) {
        p->hook(p->hook_ctx, block, rc);
    }
    return rc;
}

int kvpool_refcount(const kvpool *p, int32_t block) {
    check_id(p, block);
    return p->refcount[block];
}

int kvpool_n_blocks(const kvpool *p) { return p->n_blocks; }
int kvpool_n_free(const kvpool *p) { return p->n_free; }
int kvpool_n_used(const kvpool *p) { return p->n_blocks - p->n_free; }

void kvpool_set_hook(kvpool *p, kvpool_hook_fn fn, void *ctx) {
    if (fn && p->hook && (p->hook != fn || p->hook_ctx != ctx))
        PANIC("kvpool_set_hook: the pool already has a watcher");
    p->hook = fn;
    p->hook_ctx = fn ? ctx : NULL;
}

void kvpool_watch(kvpool *p, int32_t block, bool on) {
    check_id(p, block);
    if (on && p->refcount[block] <= 0) PANIC("kvpool_watch: block %d is free", (int)block);
    p->watched[block] = on ? 1 : 0;
}

bool kvpool_is_watched(const kvpool *p, int32_t block) {
    check_id(p, block);
    return p->watched[block] != 0;
}

int kvpool_check(const kvpool *p, err_t *e) {
    if (p->n_free < 0 || p->n_free > p->n_blocks)
        return err_set(e, ERR_INVALID, "kvpool: n_free %d outside [0, %d]", p->n_free, p->n_blocks);
    int n_zero = 0;
    for (int32_t b = 0; b < p->n_blocks; b++) {
        int rc = p->refcount[b];
        int pos = p->free_pos[b];
        if (rc < 0) return err_set(e, ERR_INVALID, "kvpool: block %d has refcount %d", (int)b, rc);
        if (rc == 0) {
            n_zero++;
            if (pos < 0 || pos >= p->n_free)
                return err_set(e, ERR_INVALID, "kvpool: free block %d not on the free stack (pos %d, n_free %d)",
                               (int)b, pos, p->n_free);
            if (p->free_stack[pos] != b)
                return err_set(e, ERR_INVALID, "kvpool: free stack slot %d holds %d, expected block %d", pos,
                               (int)p->free_stack[pos], (int)b);
            if (p->watched[b]) return err_set(e, ERR_INVALID, "kvpool: free block %d is watched", (int)b);
        } else if (pos != -1) {
            return err_set(e, ERR_INVALID, "kvpool: block %d in use (refcount %d) but free_pos is %d", (int)b, rc,
                           pos);
        }
    }
    if (n_zero != p->n_free)
        return err_set(e, ERR_INVALID, "kvpool: %d blocks have refcount 0 but n_free is %d", n_zero, p->n_free);
    /* each stack slot names a distinct free block: slot i -> block whose pos is i */
    for (int i = 0; i < p->n_free; i++) {
        int32_t b = p->free_stack[i];
        if (b < 0 || b >= p->n_blocks || p->free_pos[b] != i)
            return err_set(e, ERR_INVALID, "kvpool: free stack slot %d holds bad or duplicate block %d", i, (int)b);
    }
    return 0;
}
