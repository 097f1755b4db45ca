/*
 * regex.h — the regular-expression subset of JSON Schema's `pattern` (and
 * of the string formats, which schema.c writes as patterns): parsing into a
 * syntax tree, writing it as a GBNF sequence over JSON-escaped code points,
 * lengths, and language inclusion between two patterns.
 *
 * Place in the flow: grammar/, used by schema.c on the HTTP thread while a
 * request's schema is compiled; nothing is shared between calls.
 *
 *   pattern text ──regex_parse──▶ regex_pat ──regex_emit──▶ GBNF (schema.c
 *                                    │                      quotes it)
 *                                    └──regex_subset(a, b)──▶ L(a) ⊆ L(b)?
 *
 * The subset (ECMA-262 syntax): literals, \d \w \s \D \W \S, \n \t \r \f \v
 * \0 \xHH \uHHHH, escaped punctuation, `.` (not \n \r U+2028 U+2029),
 * classes [a-z] [^...], groups ( ) (?: ), |, * + ? {m} {m,} {m,n} (lazy `?`
 * accepted: same language). ^ at the start and $ at the end of a top-level
 * branch (^a$|^b$); an end without them is searched (any code points may
 * come before / after). With REGEX_LOOKAHEAD, lookaheads (?=X) and (?!X)
 * anywhere outside another lookahead, X's branches possibly ending in $
 * (zod writes them): a pattern with them cannot be written by regex_emit,
 * only as an automaton (regex_dfa_build). Refused with ERR_UNSUPPORTED:
 * backreferences, lookbehind, nested lookaheads, \b, \p, flags, a
 * repetition of something that can be empty. Errors read "what at offset N".
 */
#ifndef KVLOOM_REGEX_H
#define KVLOOM_REGEX_H

#include "gtext.h"

/* A set of code points: sorted, disjoint, non-adjacent intervals, never a
 * surrogate once normalized. */
typedef struct regex_set {
    uint32_t (*iv)[2];
    int n, cap;
} regex_set;
void regex_set_add(regex_set *s, uint32_t lo, uint32_t hi);
/* The complement within U+0000..U+10FFFF (normalized). */
void regex_set_negate(regex_set *s);

typedef struct regex regex; /* a syntax tree */

enum { REGEX_LOOKAHEAD = 1 };

typedef struct regex_pat {
    regex *r;        /* the expression between the anchors                */
    bool start, end; /* anchored at the start / end                        */
    int n_look;      /* lookaheads in r (REGEX_LOOKAHEAD only): when not 0,
                        r is written by regex_dfa_build, not regex_emit   */
} regex_pat;

/* Parses n bytes of pattern text into *out (zeroed first). Returns 0, or
 * ERR_INVALID / ERR_UNSUPPORTED / ERR_RANGE with e naming the offset; *out
 * then holds nothing. */
int regex_parse(const char *s, size_t n, unsigned flags, regex_pat *out, err_t *e);
void regex_pat_free(regex_pat *p);

/* a := a ∩ b, as a leading lookahead of b in a (b is freed and zeroed).
 * False (nothing changed) when b has lookaheads itself. */
bool regex_and(regex_pat *a, regex_pat *b);
/* a := a minus b (a negative lookahead), likewise. */
bool regex_and_not(regex_pat *a, regex_pat *b);
/* a := a ∩ (strings of mn..mx code points; mx -1: any). False when a bound
 * exceeds GRAMMAR_MAX_REPEAT. */
bool regex_and_len(regex_pat *a, long long mn, long long mx);

/* Appends r (without lookaheads) as a GBNF sequence matching the JSON-escaped forms of its
 * strings (canonical escapes: \" \\ \b \f \n \r \t, \u00xx for other
 * controls); nothing for an empty r. */
void regex_emit(sbuf *b, const regex *r);
/* The same, matching the strings themselves (vLLM's guided_regex: the
 * output is the string, not a JSON string's body). */
void regex_emit_raw(sbuf *b, const regex *r);
/* Length range in code points (*hi -1: unbounded). */
void regex_len(const regex *r, long long *lo, long long *hi);
/* Narrows r, when it is pieces of fixed length and one repetition of a
 * single-character set, to total lengths mn..mx (mx -1: none); false (r
 * unchanged) otherwise or when no length fits. */
bool regex_clamp(regex *r, long long mn, long long mx);
/* Is every string matched by a also matched by b (lookaheads of both
 * included)? 1 yes, 0 no, -1 unknown (too large to decide: bounded by
 * REGEX_SUBSET_MAX_STATES automaton states or state pairs and
 * REGEX_MAX_WORK closure steps). */
#define REGEX_SUBSET_MAX_STATES 20000
#define REGEX_MAX_WORK 1000000L
int regex_subset(const regex_pat *a, const regex_pat *b);

/* A trimmed deterministic automaton of a whole pattern
 * (anchors and lookaheads included) over code points: state 0 is the start,
 * every state can reach an accepting one, transitions on disjoint sets. */
typedef struct regex_dfa {
    int n;
    bool *accept;
    int *n_tr;                 /* per state                                  */
    struct regex_tr {
        regex_set set;
        int to;
    } **tr;
} regex_dfa;
/* Builds it with at most max_states states. 0, 1 when no string matches
 * (out empty), -1 when larger than max_states or REGEX_MAX_WORK. */
int regex_dfa_build(const regex_pat *p, int max_states, regex_dfa *out);
void regex_dfa_free(regex_dfa *d);
/* Appends a set's code points as a GBNF group of their JSON-escaped forms
 * (canonical escapes, as regex_emit writes them). */
void regex_emit_set(sbuf *b, const regex_set *s);

#endif
