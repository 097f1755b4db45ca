/*
 * radix.h — the prefix tree over FULL KV blocks: maps token sequences to the
 * chains of pool blocks that already hold their K/V, so a new request reuses
 * every whole block of its prompt that some earlier (or running) request
 * computed.
 *
 * Place in the flow: kv/. sched/ calls it at admission (match, insert), while
 * a prefill runs (set_ready), on cancellation (remove_pending) and when the
 * pool is full (evict). It manages block ids and references only; the K/V
 * floats are in model_kv, owned by the engine.
 *
 * Each node is one block: its edge label is the block's block_tokens token
 * ids. A path from the root spells a token prefix, block by block. With
 * block_tokens = 4 and three sequences inserted:
 *
 *   "a b c d | e f g h | i j k l"   blocks 3, 7, 9
 *   "a b c d | e f g h | x y z w"   blocks 3, 7, 2   (shares 2 blocks)
 *   "p q r s"                       block  5
 *
 *                    (root)
 *                   /      \
 *          [a b c d]#3    [p q r s]#5  R
 *               |
 *          [e f g h]#7  R
 *            /      \
 *   [i j k l]#9 R   [x y z w]#2 P      R = READY, P = PENDING
 *
 * A trailing partial block is never indexed: only whole blocks are shared,
 * and a full block is immutable, so any number of sequences can read it.
 *
 * Node states:
 *   PENDING  a request is computing this block right now. Another request
 *            can join it (take a reference and wait) instead of recomputing.
 *   READY    the block's K/V is complete.
 *   PENDING ──radix_set_ready──▶ READY
 *   PENDING ──radix_remove_pending──▶ (gone, with its whole subtree)
 *
 * References (see docs/kv-cache.md): the tree holds exactly one pool reference
 * on every block it indexes. radix_match takes one more for the caller per
 * block it returns. A node whose block has refcount 1 (only the tree's) and
 * that has no children is EVICTABLE. The tree watches its blocks through the
 * pool hook (kvpool_set_hook), so it learns when a caller's kvpool_unref
 * leaves a block with only the tree's reference; callers just use kvpool_unref.
 *
 * Recency: a logical clock advances once per radix_match, once per
 * radix_insert and once per "release" (a watched block dropping to refcount 1).
 * A node's last_use is the clock of the last match/insert that walked through
 * it, or of its release, whichever is later. radix_evict frees evictable
 * leaves with the smallest last_use first (ties: lower block id), and a parent
 * whose last child went becomes evictable in turn (if only the tree holds it).
 *
 * Costs: a node is found from its parent through one hash table keyed by
 * (parent, block tokens), so match and insert are O(blocks walked *
 * block_tokens); evictable leaves are in a binary heap (O(log n) per change).
 * All storage is sized at radix_new from the pool size (a node per block id):
 * no allocation after creation.
 *
 * Thread: the engine thread only (the same that owns the pool).
 */
#ifndef KVLOOM_RADIX_H
#define KVLOOM_RADIX_H

#include "../base/base.h"
#include "kvpool.h"

typedef struct radix radix;

enum {
    RADIX_NONE = 0,    /* the block is not indexed                          */
    RADIX_PENDING = 1, /* indexed, its K/V is still being computed           */
    RADIX_READY = 2,   /* indexed and complete                               */
};

/* A tree over `pool`, whose blocks hold block_tokens (>= 1) tokens each.
 * Installs the pool hook: at most one tree per pool. Never returns NULL. */
radix *radix_new(kvpool *pool, int block_tokens);
/* Bytes of its storage (all sized at radix_new). */
size_t radix_bytes(const radix *t);
/* Drops the tree's reference on every indexed block (blocks only the tree
 * held return to the pool), removes the hook and frees the tree. NULL ok. */
void radix_free(radix *t);

/* Tokens per block, as given to radix_new. */
int radix_block_tokens(const radix *t);

/* Longest prefix of tokens[0..n_tokens) made of whole indexed blocks.
 * Writes the matched block ids, in order, into blocks[0..cap) and takes one
 * pool reference on each written block for the caller (who later drops each
 * with kvpool_unref). Returns the number of READY blocks written.
 *
 * If n_pending is not NULL, the walk goes on past the first PENDING block:
 * the blocks from there on (PENDING, or READY below a PENDING one) are written
 * after the ready ones and counted in *n_pending; the caller may hold them
 * and wait (radix_block_state) instead of recomputing. If n_pending is NULL
 * the walk stops at the first PENDING block and nothing past it is written.
 *
 * Matched nodes are marked used now. Note: a caller that needs logits for the
 * last prompt token should match at most n_tokens - 1 tokens, so at least one
 * token is left to compute. Returns ERR_INVALID if n_tokens or cap < 0. */
int radix_match(radix *t, const int32_t *tokens, int n_tokens, int32_t *blocks, int cap, int *n_pending);
/* Partitions (issue 26 finding 12: one tenant's prefixes must not reveal
 * themselves to another through cached_tokens or latency): a path inserted
 * with a salt is matched only with the same salt. The salt is the first
 * node's (a child of the root; its key hashes the salt too), so the paths
 * below need nothing more; radix_match / radix_insert are salt 0, the
 * shared partition. Same contracts otherwise. */
int radix_match_salted(radix *t, uint64_t salt, const int32_t *tokens, int n_tokens, int32_t *blocks, int cap,
                       int *n_pending);

/* Copy-on-write of a partial last block (docs/kv-cache.md, "A partial last
 * block"): a prompt whose match ends INSIDE a block still finds the rows
 * before the divergence in the block another sequence completed there (an
 * edited message, a reply that the client re-tokenised differently). After
 * blocks[0..n_matched) — a radix_match of the same tokens and salt, all
 * READY — returns the READY child of blocks[n_matched - 1] (of the root
 * under `salt` when n_matched is 0) whose label shares the longest leading
 * run with tokens[n_matched * bt .. n_tokens), writes the run's length (1 ..
 * bt - 1: a whole block is radix_match's) to *n_rows and takes one pool
 * reference on it for the caller, who copies the first *n_rows rows of its
 * K/V into a block of its own and drops the reference (kvpool_unref). Ties:
 * the lowest block id. PENDING children are not considered: their rows are
 * still being written. Returns -1 (and *n_rows 0) when no READY child shares
 * the first token, or when n_matched or n_tokens is out of range. O(children
 * of that node x run length); neither the clock nor any last_use moves (the
 * caller's release counts as the use). */
int32_t radix_match_partial(radix *t, uint64_t salt, const int32_t *tokens, int n_tokens, const int32_t *blocks,
                            int n_matched, int *n_rows);

/* Registers that blocks[i] holds (or will hold) the tokens of full block i of
 * the sequence tokens[0 .. n_full_blocks * block_tokens), for every i.
 *   - where the tree already has a node for that prefix, the node is kept and
 *     blocks[i] is overwritten with the tree's block id. If it differs from
 *     the caller's, the caller may switch to the tree's block (taking a
 *     reference: kvpool_ref) and unref its own duplicate — or keep its own if
 *     the tree's is still PENDING. A PENDING node whose block is the caller's
 *     own becomes READY when `state` is RADIX_READY.
 *   - otherwise a node is created with the caller's block in `state`
 *     (RADIX_PENDING or RADIX_READY) and the tree takes its own reference.
 * The caller must hold a reference on every block it passes that the tree
 * does not already index at that position, and none of them may be indexed
 * elsewhere in the tree (a block holds one prefix).
 * Returns the number of nodes created (>= 0), or ERR_INVALID (bad state,
 * n_full_blocks < 0, a block id out of range, free, indexed elsewhere or
 * passed twice), in which case nothing has changed. */
int radix_insert(radix *t, const int32_t *tokens, int n_full_blocks, int32_t *blocks, int state);
int radix_insert_salted(radix *t, uint64_t salt, const int32_t *tokens, int n_full_blocks, int32_t *blocks, int state);

/* PENDING -> READY for an indexed block (no-op if READY). Returns 0, or
 * ERR_NOTFOUND if the block is not indexed (e.g. its node was removed). */
int radix_set_ready(radix *t, int32_t block);

/* The request computing `block` was cancelled: removes its node and the whole
 * subtree under it (their K/V depend on it) and drops the tree's references.
 * Callers holding references on those blocks keep them; radix_block_state
 * then reports RADIX_NONE, so waiters know to recompute. Returns the number
 * of nodes removed, ERR_NOTFOUND if the block is not indexed, or ERR_INVALID
 * if it is READY (ready blocks leave the tree only through radix_evict). */
int radix_remove_pending(radix *t, int32_t block);

/* RADIX_NONE, RADIX_PENDING or RADIX_READY for any block id in the pool's
 * range (RADIX_NONE for ids out of range). */
int radix_block_state(const radix *t, int32_t block);

/* Frees up to n_blocks blocks back to the pool by removing evictable leaves,
 * least recently used first (see Recency above). Returns how many blocks were
 * freed (fewer when nothing else is evictable; 0 for n_blocks <= 0). */
int radix_evict(radix *t, int n_blocks);

int radix_n_cached(const radix *t);    /* blocks indexed (nodes)              */
int radix_n_pending(const radix *t);   /* of which PENDING                    */
int radix_n_evictable(const radix *t); /* leaves only the tree references     */
/* Indexed blocks only the tree references (refcount 1), leaves or not. When
 * every holder holds whole prefixes (what match and insert hand out), a held
 * node's ancestors are held too, so all idle blocks can be freed by
 * radix_evict(radix_n_idle(t)): it is what an admission check may count as
 * reclaimable. Otherwise it is an upper bound. O(1). */
int radix_n_idle(const radix *t);
uint64_t radix_clock(const radix *t);  /* the logical clock (for tests/metrics) */
/* last_use of an indexed block's node, or 0 if not indexed. */
uint64_t radix_last_use(const radix *t, int32_t block);

/* Verifies structure and reference consistency in O(n_blocks): parent/child
 * links and counts, every node findable through the hash table, each indexed
 * block in use and watched, the heap's order and that it holds exactly the
 * evictable leaves, the counters, and pool refcount >= 1 on indexed blocks.
 * Returns 0, or ERR_INVALID with a message naming the block. */
int radix_check(const radix *t, err_t *e);

#endif
