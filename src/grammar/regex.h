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
 * accepted: same language). ^ only first, $ only last; without them the
 * pattern is searched (any code points may come before / after). With
 * REGEX_LOOKAHEAD, lookaheads (?=X) and (?!X) right after ^ are parsed too
 * (zod writes them): they cannot be emitted, only used by regex_subset.
 * Refused with ERR_UNSUPPORTED: backreferences, other lookaround, \b, \p,
 * flags, an anchor beside a top-level |, a repetition of something that can
 * be empty. Errors read "what at offset N".
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

#define REGEX_MAX_LOOK 8
enum { REGEX_LOOKAHEAD = 1 };

typedef struct regex_pat {
    regex *r;        /* the expression between the anchors                */
    bool start, end; /* ^ first, $ last                                   */
    int n_look;      /* leading lookaheads (REGEX_LOOKAHEAD only)         */
    regex *look[REGEX_MAX_LOOK];
    bool look_neg[REGEX_MAX_LOOK]; /* (?!X)                               */
    bool look_end[REGEX_MAX_LOOK]; /* X ends with $: X itself, not X.*     */
} regex_pat;

/* Parses n bytes of pattern text into *out (zeroed first). Returns 0, or
 * ERR_INVALID / ERR_UNSUPPORTED / ERR_RANGE with e naming the offset; *out
 * then holds nothing. */
int regex_parse(const char *s, size_t n, unsigned flags, regex_pat *out, err_t *e);
void regex_pat_free(regex_pat *p);

/* Appends r as a GBNF sequence matching the JSON-escaped forms of its
 * strings (canonical escapes: \" \\ \b \f \n \r \t, \u00xx for other
 * controls); nothing for an empty r. */
void regex_emit(sbuf *b, const regex *r);
/* Length range in code points (*hi -1: unbounded). */
void regex_len(const regex *r, long long *lo, long long *hi);
/* Narrows r, when it is pieces of fixed length and one repetition of a
 * single-character set, to total lengths mn..mx (mx -1: none); false (r
 * unchanged) otherwise or when no length fits. */
bool regex_clamp(regex *r, long long mn, long long mx);
/* Is every string matched by a also matched by b (lookaheads of b
 * included; a must have none)? 1 yes, 0 no, -1 unknown (too large to
 * decide: bounded by REGEX_SUBSET_MAX_STATES). */
#define REGEX_SUBSET_MAX_STATES 20000
int regex_subset(const regex_pat *a, const regex_pat *b);

#endif
