/*
 * suffix.h — a depth-limited suffix trie with occurrence counts: the
 * structure the suffix drafter (draft.h, SuffixDecoding) proposes tokens
 * from.
 *
 * Place in the flow: sched/, below draft.c. It knows token ids only.
 *
 * Every substring of length <= depth of the token sequences added is a
 * path from the root; a node's count is how many times its string occurs
 * (as the start of a suffix, truncated at depth). With depth 3 and the one
 * sequence "a b a b":
 *
 *            (root)
 *           /      \
 *        a:2        b:2          count(a b) = 2: "a b" occurs twice
 *         |          |
 *       b:2         a:1
 *         |          |
 *       a:1         b:1
 *
 * so after a context ending in "a", the child "b" was seen 2 of the 2
 * times "a" was: the draft continues with the most frequent child, and
 * count(child) / count(node) estimates the chance it is right.
 * Invariant: count(child) <= count(parent) (each occurrence of "w t" is one
 * of "w"), and every node has count >= 1 (a node whose count reaches 0 is
 * freed, its children have reached 0 first).
 *
 * Memory is bounded: at most max_nodes nodes, storage grown by doubling up
 * to that bound. suffix_add refuses (ERR_RANGE, nothing changed) a sequence
 * that might need more nodes than are free (n * depth at most), so the
 * caller evicts first (suffix_remove of an earlier sequence, exactly the
 * tokens it added) or adds less.
 *
 * Growing one sequence token by token (a request's own context) goes
 * through a cursor: it holds the nodes of the context's last depth-1
 * suffixes, so each new token costs depth lookups. A cursor's nodes are
 * valid until suffix_remove or suffix_clear.
 *
 * Thread: one owner (the engine thread); no locking.
 */
#ifndef KVLOOM_SUFFIX_H
#define KVLOOM_SUFFIX_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

#define SUFFIX_MAX_DEPTH 64

typedef struct suffix_tree suffix_tree;

/* The nodes of the last suffixes of a sequence being grown (node[L] spells
 * its last L tokens; -1: not in the tree). Plain data, zero it with
 * suffix_cursor_reset before the first token. */
typedef struct suffix_cursor {
    int32_t node[SUFFIX_MAX_DEPTH];
    int n_tokens; /* tokens of the sequence seen so far */
} suffix_cursor;

/* depth in [2, SUFFIX_MAX_DEPTH], max_nodes >= 16. NULL when out of memory. */
suffix_tree *suffix_new(int depth, int max_nodes);
void suffix_free(suffix_tree *t);
/* Removes every node (keeps the storage). Cursors become invalid. */
void suffix_clear(suffix_tree *t);
int suffix_depth(const suffix_tree *t);
int suffix_n_nodes(const suffix_tree *t);
int suffix_max_nodes(const suffix_tree *t);
/* Bytes of storage held (nodes and hash table). */
size_t suffix_bytes(const suffix_tree *t);

void suffix_cursor_reset(suffix_cursor *c);
/* Appends one token to the sequence the cursor follows: every suffix of the
 * sequence ending at the token (length <= depth) gets one more occurrence.
 * When the tree is full the strings that would need new nodes are left out
 * (returns 1), else 0. tok >= 0. */
int suffix_push(suffix_tree *t, suffix_cursor *c, int32_t tok);

/* Adds all substrings of toks[0, n) (length <= depth) at once. ERR_RANGE
 * (nothing added) when n * depth nodes might not fit: evict, then retry. */
int suffix_add(suffix_tree *t, const int32_t *toks, int n, err_t *e);
/* Takes back exactly what suffix_add(toks, n) added (the caller keeps the
 * sequences it added; removing one it did not add is a bug, caught by
 * ASSERT when a count would go below 0). */
void suffix_remove(suffix_tree *t, const int32_t *toks, int n);

/* Occurrences of the string s[0, n) (n <= depth), 0 when absent. */
int suffix_count(const suffix_tree *t, const int32_t *s, int n);

/* Proposes a continuation of ctx[0, n): finds the longest suffix of ctx of
 * length <= match_max (< depth) that occurs with a continuation, then
 * follows the most frequent child (ties: lowest token) while the product
 * of count(child)/count(node) stays >= p_min, at most max tokens and never
 * past depth. Writes the tokens to out and each one's conditional
 * probability estimate to prob (may be NULL); returns how many, and the
 * match length to *match_len (may be NULL). When `c` is given it must
 * follow ctx (c->n_tokens == n): its nodes are used instead of lookups. */
int suffix_propose(const suffix_tree *t, const suffix_cursor *c, const int32_t *ctx, int n, int match_max, int max,
                   float p_min, int32_t *out, float *prob, int *match_len);

/* What suffix_propose gives on a trie of this depth holding ctx[0, n)
 * alone (suffix_add(ctx, n), or a cursor grown over it), found by scanning
 * ctx instead: nothing is built or kept, so a sequence costs nothing until
 * it asks for a draft, and a proposal costs O(n) (one pass, then the
 * places of the last token: each step of the draft counts the tokens after
 * the places still matching) (the suffix drafter's request context: why it
 * scans rather than keeps a trie, docs/decisions.md, 2026-11-27).
 * scratch: suffix_scan_scratch(n)
 * int32. depth in [2, SUFFIX_MAX_DEPTH]. */
size_t suffix_scan_scratch(int n);
int suffix_scan_propose(const int32_t *ctx, int n, int depth, int match_max, int max, float p_min, int32_t *scratch,
                        int32_t *out, float *prob, int *match_len);

/* Checks the structure (counts, child links, hash table); 0 or ERR_INVALID
 * naming the first broken node. For tests. */
int suffix_check(const suffix_tree *t, err_t *e);

#endif
