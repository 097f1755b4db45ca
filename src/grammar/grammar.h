/*
 * grammar.h — constrained decoding: a context-free grammar (GBNF text) turned
 * into per-token masks over the vocabulary, and the forced runs that can be
 * appended without sampling (jump-forward).
 *
 * Place in the flow: grammar/ depends only on base/. The server compiles a
 * grammar from a JSON Schema (schema.h) or from GBNF text sent by the client,
 * hands it to the engine inside the req (sched/req.h), and the engine thread
 * keeps one matcher per sequence:
 *
 *   HTTP thread                          engine thread, every step
 *   ───────────                          ─────────────────────────
 *   grammar_from_gbnf(text) ─▶ grammar   gmatch_mask ─▶ logits of refused
 *   (immutable rules, plus a mask        tokens set to -inf ─▶ sample ─▶
 *    cache that only the engine          gmatch_accept(token) ─▶
 *    thread touches)                     gmatch_forced ─▶ append the run
 *
 * GBNF dialect (llama.cpp's): `name ::= alternatives`, one rule per
 * definition (a name may be defined once; a later line that starts with
 * `name ::=` begins a new rule), `|` alternation, sequences, `( ... )`
 * groups, postfix `*` `+` `?` `{m}` `{m,}` `{m,n}`, string literals "..."
 * with escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH, character classes
 * [a-z0-9_] and negated [^"\\] over Unicode code points (matched as their
 * UTF-8 bytes), `.` (any code point), `#` comments to the end of the line.
 * Rule names are [A-Za-z0-9_-]+. The start rule is `root`. Errors name the
 * line and column ("3:14: undefined rule 'value'").
 *
 * Matching is over bytes: a token is allowed when its bytes keep the output
 * a prefix of some string of the grammar's language. End-of-generation
 * tokens are allowed exactly when the output so far is a complete string of
 * the language. Tokens marked GV_NEVER in the vocabulary (unused or control
 * tokens that should never appear inside constrained text) are never allowed.
 *
 * Thread safety: a grammar's rules are immutable and the grammar is
 * refcounted (atomic), so the HTTP thread may create one and pass it on; its
 * mask cache is only read and written by gmatch_* calls, which must run on
 * one thread at a time: the engine thread and its mask worker take turns by
 * grammar_lock (a grammar's sequences share its cache). A gvocab is
 * immutable. A gmatch belongs to one sequence (one thread at a time).
 */
#ifndef KVLOOM_GRAMMAR_H
#define KVLOOM_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

typedef struct grammar grammar;
typedef struct gvocab gvocab;
typedef struct gmatch gmatch;

/* ---- grammars ---- */

/* Limits on untrusted grammar text (a larger input is ERR_RANGE, named). */
#define GRAMMAR_MAX_SRC_BYTES (1u << 20)
#define GRAMMAR_MAX_RULES 8192
#define GRAMMAR_MAX_REPEAT 10000 /* m and n of {m,n}                         */

/* Parses GBNF text (len bytes, need not be NUL-terminated) whose start rule
 * is `root`. On success *out holds one reference. Errors: ERR_FORMAT with
 * "line:col: what" for syntax errors, undefined rules, a missing root, left
 * recursion (a rule that can reach itself without consuming a byte), a rule
 * that can match nothing at all; ERR_RANGE for the limits above. */
int grammar_from_gbnf(const char *src, size_t len, grammar **out, err_t *e);
void grammar_ref(grammar *g);
/* Its references now (any thread; a snapshot: the constrainer's count of
 * cached grammars no request holds). */
int grammar_refs(const grammar *g);
/* Number of automaton states (its size: linear in the text, with
 * repetitions counted by their bounds). */
int grammar_n_states(const grammar *g);
/* Memory budget of the grammar's caches (masks, the lazy DFA), default
 * 64 MiB: least recently used masks are evicted, the DFA is rebuilt when it
 * outgrows its share. Interned stacks are not counted (they are kept for the
 * grammar's life, up to a fixed cap). Engine thread, like gmatch_*. */
void grammar_set_cache_bytes(grammar *g, size_t bytes);
/* The cache's lock: gmatch_mask, _accept, _accept_bytes, _forced and
 * grammar_cache_stats of the grammar's matchers are called with it held
 * when more than one thread uses the grammar (the engine's mask worker,
 * sched/engine.c). grammar_unlock also publishes the cache's size for
 * grammar_cache_bytes. */
void grammar_lock(grammar *g);
bool grammar_trylock(grammar *g); /* true: locked; false: another holds it */
void grammar_unlock(grammar *g);
/* The cache's memory as of the last grammar_unlock (0 before the first);
 * any thread (/metrics reads the idle cached grammars' with it). */
size_t grammar_cache_bytes(const grammar *g);
typedef struct grammar_stats {
    size_t n_stacks;    /* interned stacks                                */
    size_t n_sets;      /* distinct stack sets (lazy DFA states) cached    */
    size_t n_masks;     /* masks cached                                   */
    size_t cache_bytes; /* memory held by all of the above                */
    uint64_t mask_hits, mask_misses;
    uint64_t mask_runs;      /* misses decided by a run class, not the whole trie */
    uint64_t mask_exceptions; /* of those, masks that decided exception tokens apart */
} grammar_stats;
void grammar_cache_stats(const grammar *g, grammar_stats *s);
/* Drops a reference; the last one frees the grammar. NULL is a no-op. */
void grammar_unref(grammar *g);

/* ---- vocabularies ---- */

enum { GV_NORMAL = 0, GV_EOG = 1, GV_NEVER = 2 };

/* Token bytes, as tok_piece writes them: returns the full length, writes at
 * most cap bytes; < 0 for a token without bytes. */
typedef int (*gvocab_piece_fn)(void *ctx, int32_t id, char *buf, int cap);

/* Builds the byte trie of a vocabulary of n_vocab tokens. kind[id] is one of
 * GV_* (NULL: all GV_NORMAL); tokens with empty bytes behave as GV_NEVER
 * unless they are GV_EOG. Built once per server (it is the expensive part:
 * ~tens of ms for 150k tokens). */
gvocab *gvocab_new(int n_vocab, gvocab_piece_fn piece, void *ctx, const uint8_t *kind);
void gvocab_free(gvocab *v);
/* Bytes of its tables (pieces, tries, run bitmaps): fixed after gvocab_new. */
size_t gvocab_bytes(const gvocab *v);
int gvocab_n_vocab(const gvocab *v);

/* ---- matching ---- */

/* A matcher at the start of g (takes a reference on g). `v` must outlive it;
 * it may be NULL for a matcher fed only with gmatch_accept_bytes. Every
 * grammar used with masks should be used with one vocabulary only (a change
 * of vocabulary drops the cache). gmatch_new, gmatch_clone, gmatch_free and
 * the can_end/must_end queries touch no shared cache and may run on any
 * thread; mask, accept, accept_bytes and forced run on the engine thread. */
gmatch *gmatch_new(grammar *g, const gvocab *v);
void gmatch_free(gmatch *m); /* NULL is a no-op */

/* The allowed tokens in the current state: bit id of `mask` (an array of
 * (n_vocab + 63) / 64 words) is set when token id is allowed. Returns how
 * many are allowed (0 only when the matcher is dead, which accept prevents).
 * Results are cached per matcher state inside the grammar. */
int gmatch_mask(gmatch *m, uint64_t *mask);

/* Advances by one token. Returns 0, or ERR_INVALID when the token is not
 * allowed (the state is then unchanged). An end-of-generation token is
 * accepted only where the output is complete, and ends the matcher. */
int gmatch_accept(gmatch *m, int32_t token);
/* Advances by raw bytes (text that is not a sampled token: a forced run, or
 * text after a trigger). Returns 0, or ERR_INVALID (state unchanged) when
 * the bytes do not continue a valid prefix. */
int gmatch_accept_bytes(gmatch *m, const char *bytes, size_t n);

/* The output so far is a complete string of the language. */
bool gmatch_can_end(const gmatch *m);
/* Complete, and no byte may follow (only end-of-generation is allowed). */
bool gmatch_must_end(const gmatch *m);

/* Jump-forward: the longest byte string that every valid continuation starts
 * with (stopping where the output could also end). Writes at most cap bytes
 * and returns the length written; 0 when the next byte is not forced. Does
 * not change the state. */
int gmatch_forced(gmatch *m, char *buf, int cap);

/* Copies a matcher (same state, same grammar reference); for speculation
 * and tests. */
gmatch *gmatch_clone(const gmatch *m);
/* The grammar a matcher runs (its lock: grammar_lock). */
grammar *gmatch_grammar(const gmatch *m);

#endif
