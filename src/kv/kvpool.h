/*
 * kvpool.h — the paged KV block pool: a fixed number of block ids, each with
 * a reference count. It manages ids only; the K/V floats of block b live in
 * model_kv (model/model.h) at index b and belong to the engine.
 *
 * Place in the flow: kv/, below sched/ and above model/. The radix tree
 * (kv/radix.h) indexes full blocks of this pool; the scheduler allocates the
 * blocks a request still has to compute.
 *
 *   block id:   0     1     2     3     4     5     6     7
 *   refcount:  [2]   [0]   [1]   [0]   [3]   [1]   [0]   [0]
 *                     │           │                 │     │
 *   free stack: 7, 6, 3, 1  (top ──▶ next alloc)   ◀┘─────┘
 *
 * Invariants (checked by kvpool_check):
 *   - refcount[b] >= 0 for every block; a block is FREE iff refcount[b] == 0;
 *   - the free stack holds exactly the free blocks, each once;
 *   - n_free + n_used == n_blocks;
 *   - a watched block (see kvpool_set_hook) is never free.
 *
 * Reference rules: kvpool_alloc returns a block with refcount 1 that belongs
 * to the caller. Whoever keeps a block id (a request's block table, the radix
 * tree, a waiter) holds exactly one reference for it and drops it with
 * kvpool_unref when done. At refcount 0 the block returns to the free stack
 * and its contents are garbage. A full pool is a state, not an error:
 * kvpool_alloc returns -1 and the caller evicts (radix_evict), queues or
 * preempts.
 *
 * Misuse by the program (an id out of range, ref of a free block, unref below
 * zero) is a bug and PANICs: block ids never come from untrusted input.
 *
 * Thread: the engine thread owns the pool; nothing here is locked.
 */
#ifndef KVLOOM_KVPOOL_H
#define KVLOOM_KVPOOL_H

#include "../base/base.h"

typedef struct kvpool kvpool;

/* Called when the refcount of a watched block crosses between 1 and 2:
 * `refcount` is the new value (1 after an unref from 2, 2 after a ref from 1).
 * The radix tree uses it to learn when a cached block's last outside user
 * is gone (it then becomes evictable) without every caller having to tell it.
 * The hook may not ref/unref the same block. */
typedef void (*kvpool_hook_fn)(void *ctx, int32_t block, int refcount);

/* A pool of n_blocks (>= 1) free blocks. Never returns NULL (aborts on OOM). */
kvpool *kvpool_new(int n_blocks);
/* Bytes of its block bookkeeping (the blocks' KV is the model's). */
size_t kvpool_bytes(const kvpool *p);
/* Frees the pool (NULL is a no-op). References still held are simply gone. */
void kvpool_free(kvpool *p);

/* Takes a free block, sets its refcount to 1 and returns its id; returns -1
 * when no block is free (a state: evict, queue or preempt). */
int32_t kvpool_alloc(kvpool *p);
/* Adds a reference to a block in use (refcount >= 1). */
void kvpool_ref(kvpool *p, int32_t block);
/* Drops a reference; at 0 the block returns to the free list. Returns the new
 * refcount. */
int kvpool_unref(kvpool *p, int32_t block);

/* Current refcount of a block (0 = free). PANICs on an id out of range. */
int kvpool_refcount(const kvpool *p, int32_t block);
int kvpool_n_blocks(const kvpool *p); /* as given to kvpool_new        */
int kvpool_n_free(const kvpool *p);   /* blocks with refcount 0, O(1)   */
int kvpool_n_used(const kvpool *p);   /* n_blocks - n_free              */

/* Installs the one watcher of this pool (fn NULL removes it). PANICs if a
 * different hook is already installed: one radix tree per pool. */
void kvpool_set_hook(kvpool *p, kvpool_hook_fn fn, void *ctx);
/* Marks a block in use as watched (the hook fires for it) or not. */
void kvpool_watch(kvpool *p, int32_t block, bool on);
/* Whether the hook fires for this block (for checkers). */
bool kvpool_is_watched(const kvpool *p, int32_t block);

/* Verifies every invariant above in O(n_blocks). Returns 0, or ERR_INVALID
 * with a message in `e` naming the block and what is wrong. Tests and debug
 * builds call it after every mutation. */
int kvpool_check(const kvpool *p, err_t *e);

#endif
