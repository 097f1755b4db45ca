/*
 * grammar_internal.h — what the three files of the grammar engine share:
 *
 *   gbnf.c     GBNF text ──parse──▶ gast (rules of syntax trees)
 *   grammar.c  gast ──compile──▶ byte automaton (one sub-automaton per rule,
 *              call edges between them), checks (left recursion, empty rules),
 *              trimming, refcounting
 *   gmatch.c   stacks, stack sets (DFA states built lazily), the vocabulary
 *              trie, masks and their cache, accept, forced runs
 *
 * Not a public header: only the .c files of src/grammar include it. Its
 * functions carry the grammar__ prefix (cross-file private, as tok__ and
 * jinja__); its types keep their short g-names (no linkage, never seen
 * outside src/grammar).
 */
#ifndef KVLOOM_GRAMMAR_INTERNAL_H
#define KVLOOM_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../base/utf8.h"
#include "grammar.h"

/* ---- syntax trees (gbnf.c) ------------------------------------------------
 * Nodes live in one array; index 0 is unused so 0 can mean "none". Children
 * of SEQ, ALT and REP are a linked list (first, next). */
enum { GN_SEQ = 1, GN_ALT, GN_LIT, GN_CLASS, GN_ANY, GN_REF, GN_REP };
#define GN_INF UINT32_MAX /* REP: no upper bound */

typedef struct gnode {
    uint8_t kind;
    uint8_t neg;         /* CLASS: [^...]                                   */
    uint32_t pos;        /* byte offset in the source, for messages         */
    uint32_t first, next;
    uint32_t a, b;       /* LIT: offset, length in gast.lit; CLASS: offset, count
                            of (lo, hi) pairs in gast.ranges; REF: rule index;
                            REP: min, max (GN_INF)                          */
} gnode;

typedef struct grule_def {
    uint32_t name_off, name_len; /* in the source                          */
    uint32_t body;               /* node index, 0 while only referenced     */
    uint32_t def_pos;            /* where `name ::=` starts                 */
    uint32_t ref_pos;            /* first reference (for "undefined rule")  */
} grule_def;

typedef struct gast {
    const char *src;
    size_t src_len;
    gnode *nodes;
    size_t n_nodes, cap_nodes;
    uint8_t *lit;
    size_t n_lit, cap_lit;
    uint32_t *ranges; /* (lo, hi) code point pairs */
    size_t n_ranges, cap_ranges;
    grule_def *rules;
    size_t n_rules, cap_rules;
    uint32_t *name_tab; /* open addressing: rule index + 1, 0 = empty */
    size_t name_cap;
} gast;

/* Parses src into *a (zeroed by the caller); on error *a still holds what
 * it allocated: free it with grammar__gast_free. Checks syntax, limits,
 * duplicate and undefined rules and the presence of root. */
int grammar__gbnf_parse(const char *src, size_t len, gast *a, err_t *e);
void grammar__gast_free(gast *a);
/* "line:col" of a byte offset, for messages. */
void grammar__gbnf_linecol(const char *src, size_t len, size_t off, uint32_t *line, uint32_t *col);

/* ---- the automaton (grammar.c) --------------------------------------------
 * States are numbered over the whole grammar; each belongs to one rule. A
 * state has byte edges (ranges lo..hi), epsilon edges and call edges (run
 * rule `rule` from its start; when it ends continue at `ret`). Each rule has
 * one end state (SF_FINAL). After trimming every state can reach its rule's
 * end, so a non-empty stack set is always a valid prefix. */
typedef struct gedge {
    uint8_t lo, hi;
    uint32_t to;
} gedge;
typedef struct gcall {
    uint32_t rule, ret;
} gcall;

enum {
    SF_FINAL = 1, /* the end of its rule                                     */
    SF_BYTES = 2, /* has byte edges: kept in stack sets                      */
    SF_PURE = 4,  /* no bytes or calls in its epsilon closure, only the end:
                     a call returning here is a tail call                     */
};

/* ---- matcher caches (gmatch.c) ------------------------------------------ */
typedef struct gstack {
    uint32_t state, parent; /* parent: stack id, 0 = the empty stack        */
} gstack;

typedef struct gdstate {
    uint32_t off, n;   /* kernel stack ids in gcache.pool, sorted            */
    uint64_t hash;
    uint32_t *next;    /* 256 entries or NULL: 0 unknown, 1 dead, k+2 state k */
    uint64_t *mask;    /* cached mask or NULL                                */
    int32_t n_allowed;
    uint8_t can_end;
    uint64_t lru;
    uint64_t bytes[4]; /* the bytes that may come next                       */
    uint32_t run_next[3];    /* the state after a regular unit of a run class */
    uint64_t run_exc[3][2];  /* its exceptions: ASCII units that step elsewhere */
    uint8_t run_kind[3];     /* PK_*: how the units of each run class step (gmatch.c) */
} gdstate;

typedef struct gcache {
    /* interned stacks: never flushed while the grammar lives */
    gstack *st;
    uint32_t n_st, cap_st;
    uint32_t *st_tab; /* open addressing, stack id + 1 (0 empty) */
    uint32_t st_tab_cap;
    uint32_t *mark; /* per stack: epoch of the last closure that saw it */
    uint32_t epoch;
    /* stack sets (lazy DFA states): flushed when over budget */
    gdstate *ds;
    uint32_t n_ds, cap_ds;
    uint32_t *ds_tab; /* open addressing, state id + 1 */
    uint32_t ds_tab_cap;
    uint32_t *pool;
    size_t n_pool, cap_pool;
    size_t next_bytes, mask_bytes;
    uint32_t *masked; /* ids of states holding a mask */
    uint32_t n_masked, cap_masked;
    uint64_t gen;  /* bumped by every flush (matchers re-intern then) */
    uint64_t tick; /* LRU clock */
    const gvocab *vocab; /* the vocabulary the masks were made for */
    /* scratch */
    uint32_t *work, *res;
    uint32_t cap_work, cap_res;
    uint32_t *walk; /* per trie depth */
    uint32_t cap_walk;
    size_t budget_bytes;
    uint64_t mask_hits, mask_misses, mask_runs, mask_exceptions;
    bool warned;
} gcache;

struct grammar {
    atomic_int refs;
    pthread_mutex_t mu;         /* grammar_lock: the cache's users, one at a time */
    atomic_size_t cache_bytes;  /* the cache's size at the last grammar_unlock    */
    uint32_t n_states, n_rules;
    uint32_t *edge_off; /* n_states + 1 */
    gedge *edges;
    uint32_t *eps_off;
    uint32_t *eps;
    uint32_t *call_off;
    gcall *calls;
    uint8_t *sflags;
    uint32_t *rule_start;
    uint32_t root_start;
    /* the start: closure of (root start, empty stack) */
    uint32_t *init;
    uint32_t n_init;
    bool init_end;
    gcache c;
};

/* gmatch.c: the closure of the single stack (state, empty); fills g->init.
 * Called once by grammar_from_gbnf before the grammar is shared. */
int grammar__gmatch_init_start(grammar *g, err_t *e);
void grammar__gcache_free(gcache *c);

#endif
