/*
 * schema.c — JSON Schema to GBNF (see schema.h for the contract and
 * docs/grammar.md, "JSON Schema support", for the keyword table).
 *
 * Place in the flow: grammar/, called on an HTTP thread while a request is
 * validated. Nothing here is shared between calls: every call builds its
 * rules in a private buffer and appends them to the caller's only when the
 * whole schema compiled.
 *
 * How a schema becomes rules. gen_schema() writes a GBNF *expression* for a
 * schema into a buffer; expressions that would be repeated or are large
 * become rules of their own (object members, array elements, $ref targets).
 * The emitted grammar is plain ASCII: every non-ASCII code point is written
 * as \uHHHH or \UHHHHHHHH, so the text is safe in any transport.
 *
 *   schema ──gen_schema──▶ expression ─┬─▶ "name ::= expression"
 *                                      └─▶ helper rules "name-what-N ::= ..."
 *
 * gen_schema compiles one subschema in phases (gen_schema_once):
 *   1. check     `true` is any value; false, a non-object, too deep, too big
 *                or an unknown keyword is an error (schema_check)
 *   2. rewrite   if/then/else, dependentSchemas and `not` (other than of
 *                types or of values) become allOf/anyOf (rewrite_logic);
 *                allOf, and a $ref or anyOf/oneOf beside other keywords,
 *                merge into one schema (normalize); a rewritten schema
 *                starts again at 1 (schema_rewrite)
 *   3. dispatch  $ref (gen_ref), anyOf/oneOf (gen_alternatives), else 4
 *   4. types     a. type, nullable and a `not` of types (schema_types);
 *                b. enum/const: their values of those types (gen_values);
 *                c. else without type: the types whose keywords appear
 *                   (schema_infer_types), and
 *                d. one alternative per type (gen_types: gen_string,
 *                   gen_number, gen_integer, gen_object, gen_array)
 * and around them, when the compile is not strict and one keyword cannot be
 * enforced, gen_schema drops it and runs the phases again (relaxed).
 *
 * The layout is canonical (schema.h): no whitespace but one space after ':'
 * and ',', properties in schema order. Objects are written as a chain of
 * rules so that optional properties cost O(properties) rules:
 *
 *   S_i: at property i, nothing written yet (no comma before the next one)
 *   T_i: at property i, something written (every next one starts ", ")
 *   S_i ::= kv_i T_{i+1} | S_{i+1}     (optional; "kv_i T_{i+1}" if required)
 *   T_i ::= (", " kv_i)? T_{i+1}       (optional; ", " kv_i T_{i+1} if required)
 *   S_n / T_n: the additional properties, if allowed
 *
 * gen_object reaches that chain in phases, each a function object_* working
 * on what the ones before it learnt (an object_plan):
 *   1. keywords           properties, required and additionalProperties
 *                         (or unevaluatedProperties) checked; the required
 *                         names; whether additional members are allowed
 *   2. dependentRequired  the names it requires join the required ones
 *   3. members            the listed properties in schema order, then the
 *                         required names not listed
 *   4. kv rules           one rule `"key": value` per member
 *   5. additional keys    propertyNames and patternProperties checked:
 *                         which keys additional members may have
 *   6. counts             minProperties / maxProperties as bounds on the
 *                         number of additional members
 *   7. additional member  one rule `key ": " value` for them
 *   8. chain              the T_i and S_i rules; the expression "{" S_0 "}"
 *
 * gen_array likewise (array_*, over an array_plan):
 *   1. keywords           prefixItems and items (draft 4-7 tuples: items and
 *                         additionalItems; unevaluatedItems), minItems,
 *                         maxItems
 *   2. whole forms        uniqueItems (gen_unique) and contains
 *                         (gen_contains_count, or "[" (E ", ")* C (", " E)* "]"
 *                         for one match) write the whole array, and stop here
 *   3. element rules      one per prefix element that can appear, one for the
 *                         elements after them
 *   4. expression         "[" p0 (", " p1 (", " p2 tail)?)? "]", the required
 *                         prefix elements unwrapped, tail the counted rest
 *
 * Invariants: no expression matches the empty string except where it is
 * explicitly optional, and no repetition is applied to an expression that can
 * be empty (the matcher need not guard against empty loops); a $ref cycle that
 * does not pass through an object or array is refused (left recursion).
 * Hostile schemas are bounded by SCHEMA_MAX_DEPTH, the output size
 * (GRAMMAR_MAX_SRC_BYTES), the rule count (GRAMMAR_MAX_RULES) and repetition
 * bounds (GRAMMAR_MAX_REPEAT).
 */
#include "schema.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "regex.h"

#define SCHEMA_MAX_DEPTH 64       /* nested schemas, and nesting inside enum values */
#define SCHEMA_MAX_ENUM 4096      /* values of one enum                             */
#define SCHEMA_MAX_PATTERN 4096   /* bytes of one pattern                           */
#define SCHEMA_MAX_NAME 1024     /* bytes of one property name                     */
#define SCHEMA_INT_DIGITS 15      /* integer part of an unbounded number            */
#define SCHEMA_FRAC_DIGITS 15     /* fraction digits                                */
#define SCHEMA_EXP_DIGITS 3       /* exponent digits                                */
#define SCHEMA_INT_DEFAULT 999999999999999LL /* 10^15 - 1: default integer bound   */

/* ---- the generator ------------------------------------------------------ */

enum {
    P_VALUE = 1 << 0,
    P_OBJECT = 1 << 1,
    P_ARRAY = 1 << 2,
    P_STRING = 1 << 3,
    P_CHAR = 1 << 4,
    P_NUMBER = 1 << 5,
    P_INTEGER = 1 << 6,
    P_KEYCHAR = 1 << 7,
    P_PCHAR = 1 << 8, /* any code point, canonically escaped (pattern strings) */
};

typedef struct {
    char *ptr;  /* "#/$defs/x" as written in the schema                  */
    char *rule; /* its rule name                                          */
    bool done;  /* false while its body is being generated                */
    int n_cont; /* containers entered when its generation started       */
} refent;

/* The state of one compile (schema_compile, schema_any_object_gbnf): named
 * schema_compiler, not gen, so that it never reads as the server's
 * generation (server/generate.h). */
typedef struct {
    const char *prefix;
    json_t *root;
    sbuf rules; /* finished helper rules, one per line */
    int n_rules, counter;
    unsigned prims;
    refent *refs;
    int n_refs, cap_refs;
    int depth;  /* nesting of gen_schema                              */
    int n_cont; /* objects and arrays entered on the current path     */
    err_t *e;
    bool strict;      /* refuse what cannot be enforced (else relax it)    */
    bool unsat;       /* the last ERR_INVALID: this schema admits no value
                         (an anyOf branch like that is left out)          */
    sbuf relaxed;     /* "keyword at /pointer" entries, ", "-separated      */
    int n_relaxed;
    char *fail_kw;    /* the keyword and schema pointer of the last         */
    char *fail_ptr;   /* ERR_UNSUPPORTED, when one keyword is to blame      */
    json_t *owned;    /* relaxed copies of schemas (freed with the compiler)*/
} schema_compiler;

#define TOO_BIG(g) ((g)->rules.n > GRAMMAR_MAX_SRC_BYTES)

static int gen_schema(schema_compiler *g, json_t *s, const char *ptr, sbuf *out);
static json_t *negate(schema_compiler *g, json_t *x, int depth);
static json_t *deref(schema_compiler *g, json_t *s);
static unsigned parse_types(schema_compiler *g, json_t *t, const char *ptr, int *rc);

/* A JSON pointer one level down: ptr + "/" + key with ~ and / escaped. */
static char *ptr_join(const char *ptr, const char *key) {
    sbuf b = {0};
    sbuf_puts(&b, ptr);
    sbuf_puts(&b, "/");
    for (const char *k = key; *k; k++) {
        if (*k == '~') sbuf_puts(&b, "~0");
        else if (*k == '/') sbuf_puts(&b, "~1");
        else sbuf_put(&b, k, 1);
    }
    return b.p;
}
static char *ptr_index(const char *ptr, const char *key, size_t i) {
    char *p = ptr_join(ptr, key);
    sbuf b = {.p = p, .n = strlen(p), .cap = strlen(p) + 1};
    sbuf_printf(&b, "/%zu", i);
    return b.p;
}
static const char *ptr_show(const char *ptr) { return *ptr ? ptr : "/"; }

/* A fresh rule name: prefix-hint-N, hint reduced to [A-Za-z0-9_] (at most 24). */
static char *rule_name(schema_compiler *g, const char *hint) {
    sbuf b = {0};
    sbuf_puts(&b, g->prefix);
    sbuf_puts(&b, "-");
    int k = 0;
    for (const char *h = hint; *h && k < 24; h++) {
        unsigned char c = (unsigned char)*h;
        if (isalnum(c) || c == '_') {
            sbuf_put(&b, (const char *)&c, 1);
            k++;
        }
    }
    if (!k) sbuf_puts(&b, "r");
    sbuf_printf(&b, "-%d", ++g->counter);
    return b.p;
}

/* Appends "name ::= body\n" to the helper rules. */
static int add_rule(schema_compiler *g, const char *name, const char *body) {
    if (++g->n_rules > GRAMMAR_MAX_RULES - 16)
        return err_set(g->e, ERR_RANGE, "schema needs more than %d grammar rules", GRAMMAR_MAX_RULES - 16);
    sbuf_puts(&g->rules, name);
    sbuf_puts(&g->rules, " ::= ");
    sbuf_puts(&g->rules, body);
    sbuf_puts(&g->rules, "\n");
    if (TOO_BIG(g)) return err_set(g->e, ERR_RANGE, "schema grammar exceeds %u bytes", GRAMMAR_MAX_SRC_BYTES);
    return 0;
}

/* Name of a primitive rule (emitting it on first use). */
static void prim(schema_compiler *g, unsigned which, sbuf *out);

static void prim(schema_compiler *g, unsigned which, sbuf *out) {
    static const struct {
        unsigned bit;
        const char *suffix;
        const char *body; /* "@" stands for the prefix */
    } defs[] = {
        {P_VALUE, "value", "@-object | @-array | @-string | @-number | \"true\" | \"false\" | \"null\""},
        {P_OBJECT, "object", "\"{\" ( @-string \": \" @-value ( \", \" @-string \": \" @-value )* )? \"}\""},
        {P_ARRAY, "array", "\"[\" ( @-value ( \", \" @-value )* )? \"]\""},
        {P_STRING, "string", "\"\\\"\" @-char* \"\\\"\""},
        {P_CHAR, "char",
         "[^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-C] [0-9a-fA-F]{3} | [dD] [0-7] "
         "[0-9a-fA-F]{2} | [e-fE-F] [0-9a-fA-F]{3} ) )"},
        {P_NUMBER, "number",
         "\"-\"? ( \"0\" | [1-9] [0-9]{0,14} ) ( \".\" [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,3} )?"},
        {P_INTEGER, "integer", "\"0\" | \"-\"? [1-9] [0-9]{0,14}"},
        {P_KEYCHAR, "keychar", "[^\"\\\\\\x00-\\x1f]"},
        {P_PCHAR, "pchar",
         "[^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\bfnrt] | \"u000\" [0-7bef] | \"u001\" [0-9a-f] )"},
    };
    static const unsigned deps[][2] = {
        {P_VALUE, P_OBJECT | P_ARRAY | P_STRING | P_NUMBER},
        {P_OBJECT, P_STRING | P_VALUE},
        {P_ARRAY, P_VALUE},
        {P_STRING, P_CHAR},
    };
    for (size_t i = 0; i < ARRAY_LEN(defs); i++) {
        if (defs[i].bit != which) continue;
        if (out) sbuf_printf(out, "%s-%s", g->prefix, defs[i].suffix);
        if (g->prims & which) return;
        g->prims |= which;
        g->n_rules++;
        sbuf_printf(&g->rules, "%s-%s ::= ", g->prefix, defs[i].suffix);
        for (const char *c = defs[i].body; *c; c++) {
            if (*c == '@') sbuf_puts(&g->rules, g->prefix);
            else sbuf_put(&g->rules, c, 1);
        }
        sbuf_puts(&g->rules, "\n");
        for (size_t d = 0; d < ARRAY_LEN(deps); d++)
            if (deps[d][0] == which)
                for (unsigned bit = 1; bit <= P_PCHAR; bit <<= 1)
                    if (deps[d][1] & bit) prim(g, bit, NULL);
        return;
    }
    PANIC("unknown primitive %u", which);
}

/* ---- canonical JSON text and GBNF literals ------------------------------ */

/* Appends the canonical JSON encoding of the UTF-8 string s (n bytes) as
 * raw text: " \ and controls escaped (\n style where JSON has one, else
 * \u00xx lowercase), everything else as is. Returns false on bad UTF-8. */
static bool json_str_canon(sbuf *b, const char *s, size_t n) {
    sbuf_puts(b, "\"");
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (!k) return false;
        switch (cp) {
        case '"': sbuf_puts(b, "\\\""); break;
        case '\\': sbuf_puts(b, "\\\\"); break;
        case '\b': sbuf_puts(b, "\\b"); break;
        case '\f': sbuf_puts(b, "\\f"); break;
        case '\n': sbuf_puts(b, "\\n"); break;
        case '\r': sbuf_puts(b, "\\r"); break;
        case '\t': sbuf_puts(b, "\\t"); break;
        default:
            if (cp < 0x20) sbuf_printf(b, "\\u%04x", cp);
            else sbuf_put(b, s + i, (size_t)k);
        }
        i += (size_t)k;
    }
    sbuf_puts(b, "\"");
    return true;
}

/* Shortest %g form that reads back as the same double. */
static void real_canon(sbuf *b, double x) {
    char tmp[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*g", p, x);
        if (strtod(tmp, NULL) == x) break;
    }
    sbuf_puts(b, tmp);
}

/* Canonical JSON text of v. Returns false for values that have no JSON text
 * (non-finite reals, bad UTF-8) or nest deeper than SCHEMA_MAX_DEPTH. */
static bool json_canon(sbuf *b, json_t *v, int depth) {
    if (depth > SCHEMA_MAX_DEPTH) return false;
    switch (json_typeof(v)) {
    case JSON_NULL: sbuf_puts(b, "null"); return true;
    case JSON_TRUE: sbuf_puts(b, "true"); return true;
    case JSON_FALSE: sbuf_puts(b, "false"); return true;
    case JSON_INTEGER: sbuf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); return true;
    case JSON_REAL:
        if (!isfinite(json_real_value(v))) return false;
        real_canon(b, json_real_value(v));
        return true;
    case JSON_STRING: return json_str_canon(b, json_string_value(v), json_string_length(v));
    case JSON_ARRAY: {
        sbuf_puts(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sbuf_puts(b, ", ");
            if (!json_canon(b, json_array_get(v, i), depth + 1)) return false;
        }
        sbuf_puts(b, "]");
        return true;
    }
    case JSON_OBJECT: {
        sbuf_puts(b, "{");
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach(v, k, x) {
            if (!first) sbuf_puts(b, ", ");
            first = false;
            if (!json_str_canon(b, k, strlen(k))) return false;
            sbuf_puts(b, ": ");
            if (!json_canon(b, x, depth + 1)) return false;
        }
        sbuf_puts(b, "}");
        return true;
    }
    }
    return false;
}

/* Appends raw text (UTF-8) as one GBNF string literal. */
static void gbnf_lit(sbuf *b, const char *s, size_t n) {
    sbuf_puts(b, "\"");
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (!k) k = 1, cp = (unsigned char)s[i]; /* callers pass valid UTF-8 */
        gbnf_cp(b, cp, false);
        i += (size_t)k;
    }
    sbuf_puts(b, "\"");
}

/* ---- keywords ----------------------------------------------------------- */

static const char *const kw_annotation[] = {
    "title",      "description", "default",  "examples",  "$schema", "$id", "$comment",
    "deprecated", "readOnly",    "writeOnly", "$defs",    "definitions", "strict", "$anchor",
    "$dynamicAnchor", "$vocabulary", "contentEncoding", "contentMediaType", "contentSchema",
};
/* Keywords enforced (or relaxed keyword by keyword inside their handlers). */
static const char *const kw_supported[] = {
    "type",         "enum",      "const",     "properties", "required",  "additionalProperties",
    "items",        "prefixItems", "minItems", "maxItems",  "minLength", "maxLength",
    "pattern",      "format",    "minimum",   "maximum",    "exclusiveMinimum", "exclusiveMaximum",
    "anyOf",        "oneOf",     "allOf",     "$ref",       "multipleOf", "propertyNames",
    "patternProperties", "minProperties", "maxProperties", "additionalItems", "contains",
    "minContains",  "maxContains", "uniqueItems", "dependentRequired", "not", "if", "then", "else",
    "nullable",     "$recursiveRef", "$dynamicRef", "dependencies", "dependentSchemas",
    "unevaluatedProperties", "unevaluatedItems",
};

static bool in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}
static bool is_annotation(const char *k) { return in_list(k, kw_annotation, ARRAY_LEN(kw_annotation)); }

/* false, {"not": {}} or {"not": true}: no value (zod's never). */
static bool is_never(json_t *s) {
    if (json_is_false(s)) return true;
    if (!json_is_object(s) || json_object_size(s) != 1) return false;
    json_t *n = json_object_get(s, "not");
    return n && (json_is_true(n) || (json_is_object(n) && json_object_size(n) == 0));
}

/* Type bits. */
enum { T_STRING = 1, T_NUMBER = 2, T_INTEGER = 4, T_BOOLEAN = 8, T_NULL = 16, T_OBJECT = 32, T_ARRAY = 64, T_ALL = 127 };
static const char *const type_names[] = {"string", "number", "integer", "boolean", "null", "object", "array"};

/* Bits of the types v is an instance of (an integral real is an integer). */
static unsigned json_type_bits(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_STRING: return T_STRING;
    case JSON_INTEGER: return T_NUMBER | T_INTEGER;
    case JSON_REAL: {
        double x = json_real_value(v);
        return T_NUMBER | (isfinite(x) && x == floor(x) ? T_INTEGER : 0);
    }
    case JSON_TRUE:
    case JSON_FALSE: return T_BOOLEAN;
    case JSON_NULL: return T_NULL;
    case JSON_OBJECT: return T_OBJECT;
    case JSON_ARRAY: return T_ARRAY;
    }
    return 0;
}

/* ERR_UNSUPPORTED blamed on keyword kw of the schema at ptr: gen_schema drops
 * that keyword and tries again unless the compile is strict. */
static int unsup(schema_compiler *g, const char *ptr, const char *kw, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int unsup(schema_compiler *g, const char *ptr, const char *kw, const char *fmt, ...) {
    char msg[sizeof g->e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(g->fail_kw);
    free(g->fail_ptr);
    g->fail_kw = xstrdup(kw);
    g->fail_ptr = xstrdup(ptr);
    return err_set(g->e, ERR_UNSUPPORTED, "%s", msg);
}
static int unsupported_kw(schema_compiler *g, const char *kw, const char *ptr) {
    return unsup(g, ptr, kw, "unsupported JSON Schema keyword '%s' at %s", kw, ptr_show(ptr));
}
static int invalid_kw(schema_compiler *g, const char *ptr, const char *kw, const char *what) {
    return err_set(g->e, ERR_INVALID, "%s/%s %s", ptr, kw, what);
}
/* ERR_INVALID for a well-formed schema that no value satisfies. */
static int unsat(schema_compiler *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int unsat(schema_compiler *g, const char *fmt, ...) {
    char msg[sizeof g->e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->unsat = true;
    return err_set(g->e, ERR_INVALID, "%s", msg);
}

/* A non-negative integer keyword (absent: def). Bounded by GRAMMAR_MAX_REPEAT. */
static int get_count(schema_compiler *g, json_t *s, const char *ptr, const char *kw, long long def, long long *out) {
    json_t *v = json_object_get(s, kw);
    *out = def;
    if (!v) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 1e18)
        x = (long long)json_real_value(v);
    else return invalid_kw(g, ptr, kw, "must be a non-negative integer");
    if (x < 0) return invalid_kw(g, ptr, kw, "must be a non-negative integer");
    if (x > GRAMMAR_MAX_REPEAT)
        return unsup(g, ptr, kw, "%s/%s: %lld is above the supported %d", ptr, kw, x, GRAMMAR_MAX_REPEAT);
    *out = x;
    return 0;
}

/* ---- integers: exact digit grammars for a range -------------------------- */

/* Same-length decimal strings x <= y (n digits): a sequence matching exactly
 * the numbers between them. */
static void digits_range(sbuf *b, const char *x, const char *y, int n) {
    if (n == 0) return;
    if (x[0] == y[0]) {
        sbuf_put(b, "\"", 1);
        sbuf_put(b, x, 1);
        sbuf_put(b, "\"", 1);
        if (n > 1) {
            sbuf_puts(b, " ");
            digits_range(b, x + 1, y + 1, n - 1);
        }
        return;
    }
    bool xlow = true, yhigh = true;
    for (int i = 1; i < n; i++) {
        if (x[i] != '0') xlow = false;
        if (y[i] != '9') yhigh = false;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    char lo = x[0], hi = y[0];
    bool first = true;
    sbuf_puts(b, "( ");
    if (!xlow) {
        sbuf_printf(b, "\"%c\" ", x[0]);
        digits_range(b, x + 1, nines, n - 1);
        lo++;
        first = false;
    }
    if (lo <= hi) {
        if (!yhigh && hi == y[0]) hi--;
        if (lo <= hi) {
            if (!first) sbuf_puts(b, " | ");
            if (lo == hi) sbuf_printf(b, "\"%c\"", lo);
            else sbuf_printf(b, "[%c-%c]", lo, hi);
            if (n > 1) sbuf_printf(b, " [0-9]{%d}", n - 1);
            first = false;
        }
    }
    if (!yhigh) {
        if (!first) sbuf_puts(b, " | ");
        sbuf_printf(b, "\"%c\" ", y[0]);
        digits_range(b, zeros, y + 1, n - 1);
    }
    sbuf_puts(b, " )");
}

static int n_digits(uint64_t x) {
    int n = 1;
    while (x >= 10) x /= 10, n++;
    return n;
}

/* Alternatives (joined by " | ", no parentheses) for a <= k <= b. */
static void nonneg_range(sbuf *b, uint64_t a, uint64_t hi, bool *first) {
    for (int len = n_digits(a); len <= n_digits(hi); len++) {
        uint64_t p = 1;
        for (int i = 1; i < len; i++) p *= 10;
        uint64_t lo = len == 1 ? 0 : p;
        uint64_t top = len == 20 ? UINT64_MAX : p * 10 - 1;
        if (lo < a) lo = a;
        if (top > hi) top = hi;
        if (lo > top) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%" PRIu64, lo);
        snprintf(ys, sizeof ys, "%" PRIu64, top);
        if (!*first) sbuf_puts(b, " | ");
        *first = false;
        digits_range(b, xs, ys, len);
    }
}

/* The integers lo..hi in canonical form ("0", no "-0", no leading zeros). */
static void int_range(sbuf *b, int64_t lo, int64_t hi) {
    bool first = true;
    sbuf_puts(b, "( ");
    if (lo < 0) {
        uint64_t mlo = hi < 0 ? (uint64_t)(-(hi + 1)) + 1 : 1; /* smallest magnitude */
        uint64_t mhi = (uint64_t)(-(lo + 1)) + 1;
        sbuf_puts(b, "\"-\" ( ");
        bool f2 = true;
        nonneg_range(b, mlo, mhi, &f2);
        sbuf_puts(b, " )");
        first = false;
    }
    if (hi >= 0) nonneg_range(b, lo < 0 ? 0 : (uint64_t)lo, (uint64_t)hi, &first);
    sbuf_puts(b, " )");
}

/* One bound: *have set when present; integer bounds rounded inward. */
static int int_bound(schema_compiler *g, json_t *s, const char *ptr, const char *kw, bool lower, bool excl, bool *have,
                     int64_t *out) {
    json_t *v = json_object_get(s, kw);
    if (!v) return 0;
    if (json_is_boolean(v)) {
        if (!excl) return invalid_kw(g, ptr, kw, "must be a number");
        /* draft 4: exclusiveMinimum: true makes minimum exclusive (handled by caller) */
        return 0;
    }
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
        if (excl) {
            if (lower && x == INT64_MAX) return invalid_kw(g, ptr, kw, "leaves no integer");
            if (!lower && x == INT64_MIN) return invalid_kw(g, ptr, kw, "leaves no integer");
            x = lower ? x + 1 : x - 1;
        }
    } else if (json_is_real(v) && isfinite(json_real_value(v))) {
        double r = json_real_value(v);
        double t = lower ? (excl ? floor(r) + 1 : ceil(r)) : (excl ? ceil(r) - 1 : floor(r));
        if (t >= 9.2e18) x = INT64_MAX;
        else if (t <= -9.2e18) x = INT64_MIN;
        else x = (int64_t)t;
    } else return invalid_kw(g, ptr, kw, "must be a number");
    if (!*have) *out = x;
    else *out = lower ? MAX(*out, x) : MIN(*out, x);
    *have = true;
    return 0;
}

/* multipleOf as a positive integer (*k 0: absent or 1); ERR_UNSUPPORTED
 * when it is not integral. */
static int int_multiple(schema_compiler *g, json_t *s, const char *ptr, int64_t *k) {
    json_t *v = json_object_get(s, "multipleOf");
    *k = 0;
    if (!v) return 0;
    double x = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (!(x > 0) || !isfinite(x)) return invalid_kw(g, ptr, "multipleOf", "must be a number above 0");
    if (x != floor(x) || x > 1e15) return unsup(g, ptr, "multipleOf", "%s/multipleOf: only integers are supported here", ptr);
    *k = x == 1 ? 0 : (int64_t)x;
    return 0;
}

#define SCHEMA_MAX_MULTIPLES 256 /* multiples of multipleOf written out one by one */

static int gen_integer(schema_compiler *g, json_t *s, const char *ptr, sbuf *out) {
    bool have_lo = false, have_hi = false;
    int64_t lo = 0, hi = 0, k;
    json_t *xmin = json_object_get(s, "exclusiveMinimum"), *xmax = json_object_get(s, "exclusiveMaximum");
    int rc;
    if ((rc = int_bound(g, s, ptr, "minimum", true, json_is_true(xmin), &have_lo, &lo))) return rc;
    if ((rc = int_bound(g, s, ptr, "maximum", false, json_is_true(xmax), &have_hi, &hi))) return rc;
    if ((rc = int_bound(g, s, ptr, "exclusiveMinimum", true, true, &have_lo, &lo))) return rc;
    if ((rc = int_bound(g, s, ptr, "exclusiveMaximum", false, true, &have_hi, &hi))) return rc;
    if ((rc = int_multiple(g, s, ptr, &k))) return rc;
    if (!have_lo && !have_hi && !k) {
        prim(g, P_INTEGER, out);
        return 0;
    }
    bool bounded = have_lo || have_hi;
    if (!have_hi) hi = lo <= SCHEMA_INT_DEFAULT ? SCHEMA_INT_DEFAULT : INT64_MAX;
    if (!have_lo) lo = hi >= -SCHEMA_INT_DEFAULT ? -SCHEMA_INT_DEFAULT : INT64_MIN;
    if (lo > hi)
        return unsat(g, "%s: no integer satisfies the minimum and maximum", ptr_show(ptr));
    if (!k) {
        int_range(out, lo, hi);
        return 0;
    }
    /* multiples of k: written out when few, else by their last digits when
     * k divides a power of ten (and there are no bounds) */
    int64_t first = lo >= 0 ? (lo + k - 1) / k * k : -((-lo) / k * k);
    if (bounded && (first > hi || (hi - first) / k < SCHEMA_MAX_MULTIPLES)) {
        if (first > hi) return unsat(g, "%s: no integer in range is a multiple of %" PRId64, ptr_show(ptr), k);
        sbuf_puts(out, "( ");
        for (int64_t x = first; x <= hi; x += k) {
            sbuf_printf(out, "%s\"%" PRId64 "\"", x == first ? "" : " | ", x);
            if (hi - x < k) break;
        }
        sbuf_puts(out, " )");
        return 0;
    }
    int m = 0;
    int64_t p10 = 1;
    while (m < 4 && p10 % k) p10 *= 10, m++;
    if (lo <= -SCHEMA_INT_DEFAULT && hi >= SCHEMA_INT_DEFAULT) bounded = false; /* the digit limit is narrower */
    if (bounded || p10 % k || p10 / k > SCHEMA_MAX_MULTIPLES)
        return unsup(g, ptr, "multipleOf", "%s/multipleOf %" PRId64 " is supported with few multiples in range, or "
                     "dividing 10000 without bounds", ptr, k);
    /* x = 0, or -? (the multiples below 10^m) or -? [1-9][0-9]* (m-digit suffixes that are multiples) */
    sbuf_puts(out, "( \"0\" | \"-\"? ( ");
    for (int64_t x = k; x < p10; x += k) sbuf_printf(out, "%s\"%" PRId64 "\"", x == k ? "" : " | ", x);
    sbuf_printf(out, " | [1-9] [0-9]{0,%d} ( ", SCHEMA_INT_DIGITS - m - 1);
    for (int64_t x = 0; x < p10; x += k) sbuf_printf(out, "%s\"%0*" PRId64 "\"", x == 0 ? "" : " | ", m, x);
    sbuf_puts(out, " ) ) )");
    return 0;
}

/* ---- numbers: decimal ranges --------------------------------------------- */

/* A bound as a decimal: integer part (no leading zeros) and fraction digits
 * (no trailing zeros). */
typedef struct {
    bool neg;
    char ip[48], fp[48];
    double val;
} decimal;

static bool dec_of(json_t *v, decimal *d) {
    memset(d, 0, sizeof *d);
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        d->neg = x < 0;
        snprintf(d->ip, sizeof d->ip, "%" PRIu64, x < 0 ? (uint64_t)(-(x + 1)) + 1 : (uint64_t)x);
        return true;
    }
    if (!json_is_real(v) || !isfinite(json_real_value(v))) return false;
    double x = json_real_value(v);
    d->neg = x < 0;
    char tmp[64];
    int p = 0;
    for (; p < 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p, fabs(x));
        if (strtod(tmp, NULL) == fabs(x)) break;
    }
    char dig[24];
    int nd = 0, ex;
    char *e = strchr(tmp, 'e');
    if (!e) return false;
    ex = atoi(e + 1);
    for (char *c = tmp; c < e; c++)
        if (isdigit((unsigned char)*c)) dig[nd++] = *c;
    if (ex > 30 || ex < -30) return false;
    /* value = dig[0].dig[1..] * 10^ex */
    int ipn = 0, fpn = 0;
    for (int i = 0; i <= ex && ex >= 0; i++) d->ip[ipn++] = i < nd ? dig[i] : '0';
    if (ex < 0) {
        d->ip[ipn++] = '0';
        for (int i = 0; i < -ex - 1; i++) d->fp[fpn++] = '0';
        for (int i = 0; i < nd; i++) d->fp[fpn++] = dig[i];
    } else
        for (int i = ex + 1; i < nd; i++) d->fp[fpn++] = dig[i];
    d->ip[ipn] = 0;
    while (fpn > 0 && d->fp[fpn - 1] == '0') fpn--;
    d->fp[fpn] = 0;
    return true;
}

static bool all_zero(const char *s) {
    for (; *s; s++)
        if (*s != '0') return false;
    return true;
}

/* Appends alternatives for fraction tails T (digits, 1 <= |T| <= r) with
 * 0.T >= 0.L (> when le) and <= 0.H (< when he); L or H NULL: no bound.
 * *empty: the empty tail (no fraction) qualifies. Returns false when no
 * non-empty tail does. */
static bool frac_tail(sbuf *b, const char *L, bool le, const char *H, bool he, int r, bool *empty) {
    if (L && !le && all_zero(L)) L = NULL;
    *empty = (!L || (all_zero(L) && !le)) && (!H || !he || !all_zero(H));
    if (r <= 0) return false;
    if (!L && !H) {
        sbuf_printf(b, "[0-9]{1,%d}", r);
        return true;
    }
    sbuf alt = {0};
    int n = 0;
    for (int d = 0; d <= 9;) {
        const char *ln = NULL, *hn = NULL;
        bool dead = false;
        if (L) {
            int l0 = *L ? *L - '0' : 0;
            if (d < l0) dead = true;
            else if (d == l0) ln = *L ? L + 1 : L;
        }
        if (H) {
            int h0 = *H ? *H - '0' : 0;
            if (d > h0) dead = true;
            else if (d == h0) hn = *H ? H + 1 : H;
        }
        if (dead) {
            d++;
            continue;
        }
        int d2 = d;
        if (!ln && !hn) /* a run of free digits */
            while (d2 < 9 && (!L || d2 + 1 > (*L ? *L - '0' : 0)) && (!H || d2 + 1 < (*H ? *H - '0' : 0))) d2++;
        sbuf sub = {0};
        bool sub_empty;
        bool sub_ok = !ln && !hn ? (r > 1 ? (sbuf_printf(&sub, "[0-9]{1,%d}", r - 1), true) : false)
                                 : frac_tail(&sub, ln, le, hn, he, r - 1, &sub_empty);
        if (!ln && !hn) sub_empty = true;
        if (sub_ok || sub_empty) {
            if (n++) sbuf_puts(&alt, " | ");
            if (d == d2) sbuf_printf(&alt, "\"%d\"", d);
            else sbuf_printf(&alt, "[%d-%d]", d, d2);
            if (sub_ok) sbuf_printf(&alt, sub_empty ? " ( %s )?" : " %s", sub.p);
        }
        sbuf_free(&sub);
        d = d2 + 1;
    }
    if (n) sbuf_printf(b, "( %s )", alt.p);
    sbuf_free(&alt);
    return n > 0;
}

/* One alternative: integer part `ip` then a fraction under the bounds. */
static void num_alt(sbuf *b, int *n, const char *ip_expr, const char *L, bool le, const char *H, bool he, int r) {
    sbuf f = {0};
    bool empty;
    bool ok = frac_tail(&f, L, le, H, he, r, &empty);
    if (ok || empty) {
        if ((*n)++) sbuf_puts(b, " | ");
        sbuf_printf(b, "%s", ip_expr);
        if (ok) sbuf_printf(b, empty ? " ( \".\" %s )?" : " \".\" %s", f.p);
    }
    sbuf_free(&f);
}

/* Magnitudes m with a <= m (< when ae) and m <= bd (< when be; bd NULL: up
 * to maxi with any fraction), r fraction digits at most. */
static void mag_range(sbuf *b, int *n, const decimal *a, bool ae, const decimal *bd, bool be, uint64_t maxi, int r) {
    uint64_t A = strtoull(a->ip, NULL, 10), B = bd ? strtoull(bd->ip, NULL, 10) : maxi;
    char lit[64];
    snprintf(lit, sizeof lit, "\"%" PRIu64 "\"", A);
    if (bd && A == B) {
        num_alt(b, n, lit, a->fp, ae, bd->fp, be, r);
        return;
    }
    num_alt(b, n, lit, a->fp, ae, NULL, false, r);
    uint64_t top = bd ? B - 1 : B;
    if (A + 1 <= top) {
        sbuf ir = {0};
        bool first = true;
        nonneg_range(&ir, A + 1, top, &first);
        sbuf ie = {0};
        sbuf_printf(&ie, "( %s )", ir.p);
        num_alt(b, n, ie.p, NULL, false, NULL, false, r);
        sbuf_free(&ir);
        sbuf_free(&ie);
    }
    if (bd) {
        snprintf(lit, sizeof lit, "\"%" PRIu64 "\"", B);
        num_alt(b, n, lit, NULL, false, bd->fp, be, r);
    }
}

/* A number bound: the stricter of `kw` and its draft-4 / exclusive forms. */
static int num_bound(schema_compiler *g, json_t *s, const char *ptr, bool lower, decimal *d, bool *excl, bool *have, bool *seen) {
    const char *kw = lower ? "minimum" : "maximum", *xkw = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    json_t *v = json_object_get(s, kw), *xv = json_object_get(s, xkw);
    *have = false;
    double best = 0;
    for (int i = 0; i < 2; i++) {
        json_t *x = i ? xv : v;
        if (!x || json_is_boolean(x)) continue;
        if (!json_is_number(x) || !isfinite(json_number_value(x))) return invalid_kw(g, ptr, i ? xkw : kw, "must be a number");
        bool e = i ? true : json_is_true(xv);
        double val = json_number_value(x);
        if (*have && (lower ? val < best || (val == best && !e) : val > best || (val == best && !e))) continue;
        decimal t;
        bool ok = dec_of(x, &t);
        if (!ok || strlen(t.ip) > SCHEMA_INT_DIGITS) {
            /* beyond every number written (15 integer digits): a lower bound
             * below them or an upper bound above them holds anyway */
            if (lower ? val < 0 : val > 0) {
                *seen = true; /* still no exponent form: 1e400 would break it */
                continue;
            }
            return unsup(g, ptr, i ? xkw : kw, "%s/%s: bound out of the supported range", ptr, i ? xkw : kw);
        }
        t.val = val;
        *d = t;
        *excl = e;
        best = val;
        *have = true;
    }
    return 0;
}

static int gen_number(schema_compiler *g, json_t *s, const char *ptr, sbuf *out) {
    decimal lo, hi;
    bool lx = false, hx = false, hl, hh, seen = false;
    int rc;
    if ((rc = num_bound(g, s, ptr, true, &lo, &lx, &hl, &seen))) return rc;
    if ((rc = num_bound(g, s, ptr, false, &hi, &hx, &hh, &seen))) return rc;
    json_t *mo = json_object_get(s, "multipleOf");
    int max_frac = -1;
    if (mo) {
        double k = json_is_number(mo) ? json_number_value(mo) : -1;
        if (!(k > 0) || !isfinite(k)) return invalid_kw(g, ptr, "multipleOf", "must be a number above 0");
        if (k == floor(k)) return gen_integer(g, s, ptr, out); /* integral multiples are integers */
        for (int n = 1; n <= 9 && max_frac < 0; n++)
            if (k == pow(10, -n)) max_frac = n;
        if (max_frac < 0)
            return unsup(g, ptr, "multipleOf", "%s/multipleOf on numbers: only 0.1, 0.01, ... are supported", ptr);
    }
    if (!hl && !hh && max_frac < 0 && !seen) {
        prim(g, P_NUMBER, out);
        return 0;
    }
    if (hl && hh && (lo.val > hi.val || (lo.val == hi.val && (lx || hx))))
        return unsat(g, "%s: no number satisfies the minimum and maximum", ptr_show(ptr));
    /* magnitudes: the default bound keeps 15 significant digits (so every
     * value written reads back as a distinct double, on the right side of
     * the bounds) */
    size_t nd = MAX(hl ? strlen(lo.ip) : 1, hh ? strlen(hi.ip) : 1);
    uint64_t maxi = nd <= 9 ? 999999999ull : SCHEMA_INT_DEFAULT;
    int r = SCHEMA_INT_DIGITS - (hl && hh ? (int)nd : n_digits(maxi));
    if (max_frac >= 0 && r > max_frac) r = max_frac;
    sbuf b = {0};
    int n = 0;
    decimal zero = {.ip = "0"};
    /* m >= 0 */
    bool lo_neg = hl && lo.neg && !(all_zero(lo.ip) && all_zero(lo.fp));
    bool hi_neg = hh && hi.neg && !(all_zero(hi.ip) && all_zero(hi.fp));
    if (!hh || !hi_neg) {
        if (hl && !lo_neg) mag_range(&b, &n, &lo, lx, hh ? &hi : NULL, hx, maxi, r);
        else mag_range(&b, &n, &zero, false, hh ? &hi : NULL, hx, maxi, r);
    }
    /* m < 0: "-" then magnitudes in (|hi| or 0, |lo|] */
    if (!hl || lo_neg) {
        sbuf nb = {0};
        int nn = 0;
        if (hh && hi_neg) mag_range(&nb, &nn, &hi, hx, hl ? &lo : NULL, lx, maxi, r);
        else mag_range(&nb, &nn, &zero, true, hl ? &lo : NULL, lx, maxi, r);
        if (nn) sbuf_printf(&b, "%s\"-\" ( %s )", n++ ? " | " : "", nb.p);
        sbuf_free(&nb);
    }
    if (!n) {
        sbuf_free(&b);
        return unsat(g, "%s: no number satisfies the bounds", ptr_show(ptr));
    }
    sbuf_printf(out, "( %s )", b.p);
    sbuf_free(&b);
    return 0;
}

/* Parses pattern text for keyword kw of the schema at ptr. */
static int rx_compile(schema_compiler *g, const char *s, size_t n, const char *ptr, const char *kw, unsigned flags, regex_pat *out) {
    if (n > SCHEMA_MAX_PATTERN)
        return err_set(g->e, ERR_RANGE, "%s/%s is longer than %d bytes", ptr, kw, SCHEMA_MAX_PATTERN);
    err_t e = {0};
    int rc = regex_parse(s, n, flags, out, &e);
    if (rc == ERR_UNSUPPORTED) return unsup(g, ptr, kw, "%s/%s: %s", ptr, kw, e.msg);
    if (rc) return err_set(g->e, rc, "%s/%s: %s", ptr, kw, e.msg);
    return 0;
}

/* A quoted string: [pad] r [pad], a pad being lo..hi pattern characters
 * (hi -1: any number; lo -1: no pad). */
static void emit_pattern_string(schema_compiler *g, const regex *r, long long llo, long long lhi, long long rlo, long long rhi,
                                sbuf *out) {
    sbuf_puts(out, "( \"\\\"\" ");
    for (int side = 0; side < 2; side++) {
        long long lo = side ? rlo : llo, hi = side ? rhi : lhi;
        if (side) {
            size_t before = out->n;
            regex_emit(out, r);
            if (out->n > before) sbuf_puts(out, " ");
        }
        if (lo < 0 || hi == 0) continue;
        prim(g, P_PCHAR, out);
        if (hi < 0) sbuf_printf(out, lo ? "{%lld,} " : "* ", lo);
        else if (lo == hi) sbuf_printf(out, "{%lld} ", lo);
        else sbuf_printf(out, "{%lld,%lld} ", lo, hi);
    }
    sbuf_puts(out, "\"\\\"\" )");
}

/* A string whose body is the automaton of p (lookaheads, or a format
 * intersected with a pattern), with lengths mn..mx intersected too: one
 * rule per state, `state ::= set next | set next ... ` with `( ... )?` on
 * accepting ones, so each step is a tail call. Too large: relaxed, blamed on
 * `blame` (or the length keyword when the lengths made it too large). */
#define SCHEMA_DFA_STATES 512
static int gen_dfa_string(schema_compiler *g, regex_pat *p, long long mn, long long mx, const char *ptr, const char *blame,
                          sbuf *out) {
    const char *len_kw = mx >= 0 ? "maxLength" : "minLength";
    if ((mn > 0 || mx >= 0) && !regex_and_len(p, mn, mx))
        return unsup(g, ptr, len_kw, "%s: %s together with this pattern is not supported", ptr_show(ptr), len_kw);
    regex_dfa d;
    int rc = regex_dfa_build(p, SCHEMA_DFA_STATES, &d);
    if (rc < 0)
        return unsup(g, ptr, mn > 0 || mx >= 0 ? len_kw : blame,
                     "%s: %s: the automaton of this pattern is larger than %d states", ptr_show(ptr),
                     mn > 0 || mx >= 0 ? len_kw : blame, SCHEMA_DFA_STATES);
    if (rc > 0) {
        if (strcmp(blame, "format") == 0 || mn > 0 || mx >= 0)
            return unsup(g, ptr, mn > 0 || mx >= 0 ? len_kw : blame,
                         "%s: no string satisfies the pattern, format and lengths together", ptr_show(ptr));
        return unsat(g, "%s/pattern: no string matches it", ptr);
    }
    char **names = xcalloc((size_t)d.n, sizeof *names);
    for (int i = 0; i < d.n; i++)
        if (d.n_tr[i]) names[i] = rule_name(g, "rx");
    rc = 0;
    for (int i = 0; i < d.n && !rc; i++) {
        if (!d.n_tr[i]) continue;
        sbuf b = {0};
        sbuf_puts(&b, "( ");
        for (int k = 0; k < d.n_tr[i]; k++) {
            if (k) sbuf_puts(&b, " | ");
            regex_emit_set(&b, &d.tr[i][k].set);
            if (names[d.tr[i][k].to]) sbuf_printf(&b, " %s", names[d.tr[i][k].to]);
        }
        sbuf_puts(&b, d.accept[i] ? " )?" : " )");
        rc = add_rule(g, names[i], b.p);
        sbuf_free(&b);
    }
    if (!rc) sbuf_printf(out, "( \"\\\"\" %s \"\\\"\" )", names[0] ? names[0] : "");
    for (int i = 0; i < d.n; i++) free(names[i]);
    free(names);
    regex_dfa_free(&d);
    return rc;
}

/* The string body for regex r under lengths mn..mx (mx -1: none): exact,
 * or a narrower language that still satisfies both; else the automaton of
 * both (gen_dfa_string). */
static int gen_rx_string(schema_compiler *g, regex_pat *p, long long mn, long long mx, const char *ptr, sbuf *out) {
    regex *r = p->r;
    bool start = p->start, end = p->end;
    long long lo, hi;
    regex_len(r, &lo, &hi);
    if (!start || !end) hi = -1;
    const char *len_kw = mx >= 0 ? "maxLength" : "minLength";
    if (lo >= mn && (mx < 0 || (hi >= 0 && hi <= mx))) {
        emit_pattern_string(g, r, start ? -1 : 0, -1, end ? -1 : 0, -1, out);
        return 0;
    }
    if (start && end) {
        if (!regex_clamp(r, mn, mx))
            return gen_dfa_string(g, p, mn, mx, ptr, len_kw, out);
        emit_pattern_string(g, r, -1, -1, -1, -1, out);
        return 0;
    }
    long long rlo, rhi;
    regex_len(r, &rlo, &rhi);
    if (rlo != rhi || (mx >= 0 && mx < rlo))
        return gen_dfa_string(g, p, mn, mx, ptr, len_kw, out);
    /* one pad takes the whole length budget; the other side is anchored */
    long long plo = MAX(0, mn - rlo), phi = mx < 0 ? -1 : mx - rlo;
    if (!end) emit_pattern_string(g, r, -1, -1, plo, phi, out);
    else emit_pattern_string(g, r, plo, phi, -1, -1, out);
    return 0;
}

/* Formats as ECMA-262 regular expressions (compiled like patterns). Each is
 * a subset of the format's RFC grammar, chosen so that every value it
 * admits is valid (docs/grammar.md lists what is left out). */
#define FX_DEC8 "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define FX_IPV4 "(?:" FX_DEC8 "\\.){3}" FX_DEC8
#define FX_H16 "[0-9a-fA-F]{1,4}"
#define FX_IPV6                                                                                                      \
    "(?:(?:" FX_H16 ":){7}" FX_H16 "|(?:" FX_H16 ":){1,7}:|(?:" FX_H16 ":){1,6}:" FX_H16 "|(?:" FX_H16                \
    ":){1,5}(?::" FX_H16 "){1,2}|(?:" FX_H16 ":){1,4}(?::" FX_H16 "){1,3}|(?:" FX_H16 ":){1,3}(?::" FX_H16           \
    "){1,4}|(?:" FX_H16 ":){1,2}(?::" FX_H16 "){1,5}|" FX_H16 ":(?::" FX_H16 "){1,6}|:(?:(?::" FX_H16                 \
    "){1,7}|:)|(?:" FX_H16 ":){6}" FX_IPV4 "|::(?:" FX_H16 ":){0,5}" FX_IPV4 ")"
#define FX_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?"
#define FX_MD                                                                                                        \
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define FX_DATE                                                                                                      \
    "(?:[0-9]{4}-" FX_MD "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)"
#define FX_TIME                                                                                                      \
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define FX_N "[0-9]{1,9}"
#define FX_DURT "T(?:" FX_N "H(?:" FX_N "M(?:" FX_N "S)?)?|" FX_N "M(?:" FX_N "S)?|" FX_N "S)"
#define FX_PCT "%[0-9A-Fa-f]{2}"
#define FX_PCH "(?:[A-Za-z0-9\\-._~!$&'()*+,;=:@]|" FX_PCT ")"
#define FX_PCHNC "(?:[A-Za-z0-9\\-._~!$&'()*+,;=@]|" FX_PCT ")"
#define FX_AUTH                                                                                                      \
    "(?:(?:[A-Za-z0-9\\-._~!$&'()*+,;=:]|" FX_PCT ")*@)?(?:[A-Za-z0-9\\-._~!$&'()*+,;=]|" FX_PCT                      \
    ")*(?::[0-9]{0,5})?"
#define FX_QF "(?:\\?(?:" FX_PCH "|[/?])*)?(?:#(?:" FX_PCH "|[/?])*)?"
#define FX_URI                                                                                                       \
    "[A-Za-z][A-Za-z0-9+.\\-]{0,15}:(?://" FX_AUTH "(?:/" FX_PCH "*)*|/(?:" FX_PCH "+(?:/" FX_PCH "*)*)?|" FX_PCH     \
    "+(?:/" FX_PCH "*)*)?" FX_QF
#define FX_RELREF                                                                                                    \
    "(?://" FX_AUTH "(?:/" FX_PCH "*)*|/(?:" FX_PCH "+(?:/" FX_PCH "*)*)?|" FX_PCHNC "+(?:/" FX_PCH "*)*)?" FX_QF
#define FX_JPTR "(?:/(?:[^~/]|~[01])*)*"
static const struct {
    const char *name;
    const char *rx;
} formats[] = {
    {"date", "^" FX_DATE "$"},
    {"time", "^" FX_TIME "$"},
    {"date-time", "^" FX_DATE "T" FX_TIME "$"},
    {"duration", "^P(?:(?:" FX_N "Y(?:" FX_N "M(?:" FX_N "D)?)?|" FX_N "M(?:" FX_N "D)?|" FX_N "D)(?:" FX_DURT
                 ")?|" FX_DURT "|" FX_N "W)$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"email", "^[A-Za-z0-9_+\\-]{1,15}(?:\\.[A-Za-z0-9_+\\-]{1,15}){0,3}@(?:[A-Za-z0-9](?:[A-Za-z0-9\\-]{0,44}"
              "[A-Za-z0-9])?\\.){1,3}[A-Za-z]{2,12}$"},
    {"hostname", "^" FX_LABEL "(?:\\." FX_LABEL "){0,3}$"},
    {"ipv4", "^" FX_IPV4 "$"},
    {"ipv6", "^" FX_IPV6 "$"},
    {"uri", "^" FX_URI "$"},
    {"uri-reference", "^(?:" FX_URI "|" FX_RELREF ")$"},
    {"json-pointer", "^" FX_JPTR "$"},
    {"relative-json-pointer", "^(?:0|[1-9][0-9]{0,8})(?:#|" FX_JPTR ")$"},
    /* the internationalized forms admit every value of the ASCII forms */
    {"iri", "^" FX_URI "$"},
    {"iri-reference", "^(?:" FX_URI "|" FX_RELREF ")$"},
    {"idn-email", "^[A-Za-z0-9_+\\-]{1,15}(?:\\.[A-Za-z0-9_+\\-]{1,15}){0,3}@(?:[A-Za-z0-9](?:[A-Za-z0-9\\-]{0,44}"
                  "[A-Za-z0-9])?\\.){1,3}[A-Za-z]{2,12}$"},
    {"idn-hostname", "^" FX_LABEL "(?:\\." FX_LABEL "){0,3}$"},
};

static int gen_string(schema_compiler *g, json_t *s, const char *ptr, sbuf *out) {
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long long mn, mx;
    int rc;
    if ((rc = get_count(g, s, ptr, "minLength", 0, &mn))) return rc;
    if ((rc = get_count(g, s, ptr, "maxLength", -1, &mx))) return rc;
    if (mx >= 0 && mx < mn) return unsat(g, "%s/maxLength is below minLength", ptr);
    if (fmt && !json_is_string(fmt)) return invalid_kw(g, ptr, "format", "must be a string");
    if (pat && !json_is_string(pat)) return invalid_kw(g, ptr, "pattern", "must be a string");
    /* formats outside the JSON Schema registry (zod's "cuid", OpenAPI's
     * "int64" ...) are annotations by the specification: ignored */
    static const char *const registry[] = {"regex", "uri-template"};
    if (fmt) {
        bool known = in_list(json_string_value(fmt), registry, ARRAY_LEN(registry));
        for (size_t i = 0; i < ARRAY_LEN(formats) && !known; i++) known = !strcmp(json_string_value(fmt), formats[i].name);
        if (!known) fmt = NULL;
    }
    const char *ftext = NULL;
    if (fmt) {
        for (size_t i = 0; i < ARRAY_LEN(formats) && !ftext; i++)
            if (!strcmp(json_string_value(fmt), formats[i].name)) ftext = formats[i].rx;
        if (!ftext) return unsup(g, ptr, "format", "unsupported format '%.64s' at %s", json_string_value(fmt), ptr_show(ptr));
    }
    regex_pat rp = {0}, fp = {0};
    const char *blame = "pattern";
    if (fmt && regex_parse(ftext, strlen(ftext), 0, &fp, g->e)) PANIC("format '%s' does not compile: %s", ftext, g->e->msg);
    if (pat) {
        const char *ps = json_string_value(pat);
        size_t pn = json_string_length(pat);
        rc = rx_compile(g, ps, pn, ptr, "pattern", REGEX_LOOKAHEAD, &rp);
        if (rc) {
            regex_pat_free(&fp);
            return rc;
        }
        if (fmt) {
            /* the narrower of the two is the intersection; else the
             * intersection itself, as an automaton (blamed on the format
             * when it is too large) */
            if (regex_subset(&fp, &rp) == 1) {
                regex_pat_free(&rp);
                rp = fp;
                memset(&fp, 0, sizeof fp);
            } else if (regex_subset(&rp, &fp) == 1) {
                regex_pat_free(&fp);
            } else {
                if (!regex_and(&rp, &fp)) PANIC("format '%s' has a lookahead", ftext);
                blame = "format";
            }
        }
    } else if (fmt) {
        rp = fp;
        memset(&fp, 0, sizeof fp);
    }
    if (rp.r && rp.n_look) {
        rc = gen_dfa_string(g, &rp, mn, mx, ptr, blame, out);
        regex_pat_free(&rp);
        return rc;
    }
    if (rp.r) {
        rc = gen_rx_string(g, &rp, mn, mx, ptr, out);
        regex_pat_free(&rp);
        return rc;
    }
    if (mn == 0 && mx < 0) {
        prim(g, P_STRING, out);
        return 0;
    }
    sbuf_puts(out, "( \"\\\"\" ");
    if (mx != 0) {
        prim(g, P_CHAR, out);
        if (mx < 0) sbuf_printf(out, "{%lld,}", mn);
        else if (mx == mn) sbuf_printf(out, "{%lld}", mn);
        else sbuf_printf(out, "{%lld,%lld}", mn, mx);
        sbuf_puts(out, " ");
    }
    sbuf_puts(out, "\"\\\"\" )");
    return 0;
}

/* The members of an object whose keys are given by patternProperties (and,
 * when rest is not NULL, additionalProperties for keys no pattern
 * matches): one alternative per set I of patterns a key can match together,
 * its key the strings matching exactly those (lookaheads: (?=p) for p in I,
 * (?!p) for the others, as an automaton), its value allOf the schemas of I.
 * Empty combinations are left out. Writes `( key ": " value | ... )`. */
#define SCHEMA_MAX_PATTERN_PROPS 4
static int gen_pattern_members(schema_compiler *g, json_t *pat, json_t *rest, const char *ptr, sbuf *out) {
    const char *keys[SCHEMA_MAX_PATTERN_PROPS];
    json_t *vals[SCHEMA_MAX_PATTERN_PROPS];
    int k = 0, rc = 0;
    const char *pk;
    json_t *pv;
    json_object_foreach(pat, pk, pv) keys[k] = pk, vals[k++] = pv;
    char *vp = ptr_join(ptr, "patternProperties");
    /* each pattern parses (errors and relaxation name the pattern) */
    for (int i = 0; i < k && !rc; i++) {
        regex_pat rp;
        rc = rx_compile(g, keys[i], strlen(keys[i]), ptr, "patternProperties", REGEX_LOOKAHEAD, &rp);
        if (!rc && rp.n_look) rc = unsup(g, ptr, "patternProperties", "%s/patternProperties: a pattern with lookaheads", ptr);
        regex_pat_free(&rp);
    }
    int n_alt = 0;
    sbuf b = {0};
    sbuf_puts(&b, "( ");
    for (unsigned set = rest ? 0 : 1; set < (1u << k) && !rc; set++) {
        regex_pat key = {0};
        err_t e = {0};
        regex_parse("", 0, REGEX_LOOKAHEAD, &key, &e);
        for (int i = 0; i < k; i++) {
            regex_pat p;
            regex_parse(keys[i], strlen(keys[i]), REGEX_LOOKAHEAD, &p, &e);
            if (!(set >> i & 1 ? regex_and(&key, &p) : regex_and_not(&key, &p))) regex_pat_free(&p);
        }
        regex_dfa d;
        int empty = regex_dfa_build(&key, SCHEMA_DFA_STATES, &d);
        if (empty == 0) regex_dfa_free(&d);
        if (empty == 1) { /* no key matches exactly these patterns */
            regex_pat_free(&key);
            continue;
        }
        json_t *all = json_array();
        for (int i = 0; i < k; i++)
            if (set >> i & 1) json_array_append(all, vals[i]);
        json_t *value = set ? json_pack("{s:o}", "allOf", all) : (json_decref(all), json_incref(rest));
        json_array_append_new(g->owned, value);
        size_t mark = b.n;
        sbuf item = {0};
        rc = gen_dfa_string(g, &key, 0, -1, ptr, "patternProperties", &item);
        regex_pat_free(&key);
        if (!rc) {
            sbuf_puts(&item, " \": \" ");
            g->unsat = false;
            rc = gen_schema(g, value, vp, &item);
            if (rc == ERR_INVALID && g->unsat) { /* keys whose value can be nothing: left out */
                rc = 0;
                sbuf_free(&item);
                continue;
            }
        }
        if (!rc) sbuf_printf(&b, "%s%s", n_alt++ ? " | " : "", item.p);
        else b.n = mark;
        sbuf_free(&item);
    }
    sbuf_puts(&b, " )");
    if (!rc && n_alt) sbuf_puts(out, b.p); /* none: only {} */
    sbuf_free(&b);
    free(vp);
    return rc;
}

/* ---- objects ------------------------------------------------------------- */

/* A trie over the code points of the listed property names, for the keys of
 * additional properties: a key that is none of the names. Such keys are
 * written without escapes, so names that need escapes cannot collide. */
typedef struct tnode {
    uint32_t cp;
    bool term;
    struct tnode *kids, *next;
} tnode;

static void trie_free(tnode *t) {
    while (t) {
        tnode *n = t->next;
        trie_free(t->kids);
        free(t);
        t = n;
    }
}

static void trie_add(tnode *root, const char *s) {
    size_t n = strlen(s), i = 0;
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c < 0x20 || c == '"' || c == '\\') return;
    }
    tnode *t = root;
    while (i < n) {
        uint32_t cp;
        int k = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (!k) return;
        i += (size_t)k;
        tnode *c = t->kids;
        while (c && c->cp != cp) c = c->next;
        if (!c) {
            c = xcalloc(1, sizeof *c);
            c->cp = cp;
            c->next = t->kids;
            t->kids = c;
        }
        t = c;
    }
    t->term = true;
}

/* Expression for the rest of a key (closing quote included) after the path
 * to t: anything that does not end exactly on a name. */
static int trie_emit(schema_compiler *g, tnode *t, sbuf *out) {
    sbuf b = {0};
    int n_alt = 0;
    if (!t->term) {
        sbuf_puts(&b, "\"\\\"\"");
        n_alt++;
    }
    /* a code point that is none of the children, then any tail */
    regex_set cs = {0};
    regex_set_add(&cs, 0, 0x1f);
    regex_set_add(&cs, '"', '"');
    regex_set_add(&cs, '\\', '\\');
    for (tnode *c = t->kids; c; c = c->next) regex_set_add(&cs, c->cp, c->cp);
    regex_set_negate(&cs);
    if (cs.n) {
        sbuf_printf(&b, "%s[", n_alt++ ? " | " : "");
        for (int i = 0; i < cs.n; i++) {
            gbnf_cp(&b, cs.iv[i][0], true);
            if (cs.iv[i][1] != cs.iv[i][0]) {
                sbuf_puts(&b, "-");
                gbnf_cp(&b, cs.iv[i][1], true);
            }
        }
        sbuf_puts(&b, "] ");
        prim(g, P_KEYCHAR, &b);
        sbuf_puts(&b, "* \"\\\"\"");
    }
    free(cs.iv);
    for (tnode *c = t->kids; c; c = c->next) {
        sbuf_printf(&b, "%s\"", n_alt++ ? " | " : "");
        gbnf_cp(&b, c->cp, false);
        sbuf_puts(&b, "\" ");
        int rc = trie_emit(g, c, &b);
        if (rc) {
            sbuf_free(&b);
            return rc;
        }
    }
    int rc = 0;
    if (!t->kids) { /* a leaf: inline */
        sbuf_printf(out, "( %s )", b.p);
    } else {
        char *name = rule_name(g, "key");
        rc = add_rule(g, name, b.p);
        sbuf_puts(out, name);
        free(name);
    }
    sbuf_free(&b);
    return rc;
}

typedef struct {
    const char *key;
    json_t *schema;
    bool required;
    char *kv; /* rule name of `"key": value` */
} member;

/* What gen_object's phases learn about one object schema, in phase order. */
typedef struct {
    /* 1. keywords */
    json_t *props, *req, *addl, *pat, *pnames; /* req: with dependentRequired's names (2) */
    json_t *req_set;      /* the required names, for lookups                    */
    bool extra;           /* additional members may be written                  */
    json_t *extra_schema; /* their value's schema, NULL for any value           */
    /* 2. dependentRequired */
    json_t *req_all;      /* owns req once dependentRequired added names        */
    /* 3. members */
    member *m;
    int n;
    json_t *banned;       /* properties whose schema is false                   */
    char *pp;             /* pointer of properties                              */
    /* 5. keys of the additional members */
    bool pn_trivial;      /* propertyNames says nothing beyond "a string"       */
    bool no_names;        /* no property is listed (nor banned)                 */
    bool pat_rest;        /* keys no pattern matches are additionalProperties  */
    json_t *pn_enum;      /* the additional keys as a string enum (owned by g)  */
    /* 6. counts */
    long long xlo, xhi;   /* bounds on the additional members, xhi -1: none    */
    /* 7. the additional member */
    char *xkv;            /* its rule, NULL when none can be written            */
} object_plan;

static void object_plan_free(object_plan *o) {
    for (int i = 0; i < o->n; i++) free(o->m[i].kv);
    free(o->m);
    free(o->pp);
    free(o->xkv);
    json_decref(o->req_set);
    json_decref(o->req_all);
    json_decref(o->banned);
}

/* Phase 1, keywords: s → o's properties, required, additionalProperties checked; required names; extra allowed. */
static int object_keywords(schema_compiler *g, json_t *s, const char *ptr, object_plan *o) {
    o->props = json_object_get(s, "properties");
    o->req = json_object_get(s, "required");
    o->addl = json_object_get(s, "additionalProperties");
    if (o->props && !json_is_object(o->props)) return invalid_kw(g, ptr, "properties", "must be an object");
    if (o->req && !json_is_array(o->req)) return invalid_kw(g, ptr, "required", "must be an array of strings");
    if (o->addl && !json_is_object(o->addl) && !json_is_boolean(o->addl))
        return invalid_kw(g, ptr, "additionalProperties", "must be a schema");
    o->req_set = json_object();
    for (size_t i = 0; o->req && i < json_array_size(o->req); i++) {
        json_t *r = json_array_get(o->req, i);
        int bad = !json_is_string(r) ? 1 : json_object_get(o->req_set, json_string_value(r)) ? 2 : 0;
        if (bad) return invalid_kw(g, ptr, "required", bad == 1 ? "must be an array of strings" : "has duplicates");
        json_object_set_new(o->req_set, json_string_value(r), json_true());
    }
    o->pat = json_object_get(s, "patternProperties");
    o->pnames = json_object_get(s, "propertyNames");
    json_t *uneval = json_object_get(s, "unevaluatedProperties");
    if (o->pat && json_is_object(o->pat) && json_object_size(o->pat) == 0) o->pat = NULL;
    if (uneval) { /* after merging, the properties evaluated here are all there is */
        if (o->addl || o->pat)
            return unsup(g, ptr, "unevaluatedProperties",
                         "%s: unevaluatedProperties beside additionalProperties or patternProperties is not supported",
                         ptr_show(ptr));
        o->addl = uneval;
    }
    /* absent additionalProperties: none when properties (or patternProperties) are listed (documented choice) */
    o->extra = o->addl ? !json_is_false(o->addl) : o->props == NULL && o->pat == NULL;
    o->extra_schema = o->addl && json_is_object(o->addl) ? o->addl : NULL;
    return 0;
}

/* Phase 2: s's dependentRequired (exact when a trigger is always or never there) → names added to o->req_set, req. */
static int object_dependent_required(schema_compiler *g, json_t *s, const char *ptr, object_plan *o) {
    json_t *dreq = json_object_get(s, "dependentRequired");
    for (int pass = 0; dreq && json_is_object(dreq) && pass < 64; pass++) {
        bool grew = false;
        const char *dk;
        json_t *dv;
        json_object_foreach(dreq, dk, dv) {
            if (!json_object_get(o->req_set, dk) || !json_is_array(dv)) continue;
            for (size_t i = 0; i < json_array_size(dv); i++) {
                json_t *x = json_array_get(dv, i);
                if (json_is_string(x) && !json_object_get(o->req_set, json_string_value(x))) {
                    json_object_set_new(o->req_set, json_string_value(x), json_true());
                    grew = true;
                }
            }
        }
        if (!grew) break;
    }
    if (dreq && json_is_object(dreq)) {
        const char *dk;
        json_t *dv;
        json_object_foreach(dreq, dk, dv) {
            if (!json_is_array(dv)) return invalid_kw(g, ptr, "dependentRequired", "must map names to arrays of names");
            bool can_appear = (o->props && json_object_get(o->props, dk) && !is_never(json_object_get(o->props, dk))) ||
                              (o->extra && !(o->props && json_object_get(o->props, dk)));
            bool ok = !can_appear || json_object_get(o->req_set, dk);
            for (size_t i = 0; i < json_array_size(dv) && !ok; i++) {
                json_t *x = json_array_get(dv, i);
                ok = json_is_string(x) && json_object_get(o->req_set, json_string_value(x));
            }
            if (!ok)
                return unsup(g, ptr, "dependentRequired",
                             "%s/dependentRequired: '%.64s' is optional; only dependencies of required or absent "
                             "properties are supported",
                             ptr, dk);
        }
    }
    /* the required names, with those dependentRequired added */
    json_t *req = o->req;
    o->req_all = json_array();
    for (size_t i = 0; req && i < json_array_size(req); i++) json_array_append(o->req_all, json_array_get(req, i));
    const char *rk;
    json_t *rv;
    json_object_foreach(o->req_set, rk, rv) {
        bool in = false;
        for (size_t i = 0; req && i < json_array_size(req) && !in; i++)
            in = !strcmp(json_string_value(json_array_get(req, i)), rk);
        if (!in) json_array_append_new(o->req_all, json_string(rk));
    }
    o->req = json_array_size(o->req_all) ? o->req_all : NULL;
    return 0;
}

/* Phase 3: o's keywords → o->m (listed properties, then required ones not listed), o->banned (schema false). */
static int object_members(schema_compiler *g, const char *ptr, object_plan *o) {
    json_t *props = o->props, *req = o->req;
    size_t cap = (props ? json_object_size(props) : 0) + (req ? json_array_size(req) : 0) + 1;
    o->m = xcalloc(cap, sizeof *o->m);
    o->banned = json_array();
    o->pp = props ? ptr_join(ptr, "properties") : NULL;
    const char *k;
    json_t *v;
    if (props) json_object_foreach(props, k, v) {
        bool is_req = json_object_get(o->req_set, k) != NULL;
        if (is_never(v)) {
            json_array_append_new(o->banned, json_string(k)); /* never written, and not an extra key either */
            if (is_req) return unsat(g, "%s/required: property '%.64s' is required but its schema is false", ptr, k);
            continue;
        }
        o->m[o->n++] = (member){.key = k, .schema = v, .required = is_req};
    }
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (props && json_object_get(props, r)) continue;
        if (o->addl && json_is_false(o->addl))
            return err_set(g->e, ERR_INVALID,
                           "%s/required: property '%.64s' is neither in properties nor allowed by "
                           "additionalProperties",
                           ptr, r);
        o->m[o->n++] = (member){.key = r, .schema = o->extra_schema ? o->extra_schema : json_true(), .required = true};
    }
    return 0;
}

/* Phase 4, kv rules: o->m → a rule `"key": value` per member, its name in kv. */
static int object_member_rules(schema_compiler *g, const char *ptr, object_plan *o) {
    for (int i = 0; i < o->n; i++)
        if (strlen(o->m[i].key) > SCHEMA_MAX_NAME)
            return err_set(g->e, ERR_RANGE, "%s: a property name is longer than %d bytes", ptr_show(ptr),
                           SCHEMA_MAX_NAME);
    for (int i = 0; i < o->n; i++) {
        member *mi = &o->m[i];
        sbuf body = {0};
        sbuf key = {0};
        json_str_canon(&key, mi->key, strlen(mi->key));
        sbuf_puts(&key, ": ");
        gbnf_lit(&body, key.p, key.n);
        sbuf_free(&key);
        sbuf_puts(&body, " ");
        json_t *ps = o->props ? json_object_get(o->props, mi->key) : NULL;
        char *vp = ps == mi->schema ? ptr_join(o->pp, mi->key) : ptr_join(ptr, "additionalProperties");
        int rc = gen_schema(g, mi->schema, vp, &body);
        free(vp);
        if (!rc) {
            mi->kv = rule_name(g, mi->key);
            rc = add_rule(g, mi->kv, body.p);
        }
        sbuf_free(&body);
        if (rc) return rc;
    }
    return 0;
}

/* Phase 5: propertyNames, patternProperties checked → the keys of additional members (o->pn_*, pat_rest, extra). */
static int object_extra_keys(schema_compiler *g, const char *ptr, object_plan *o) {
    json_t *pnames = o->pnames;
    const char *k;
    json_t *v;
    o->pn_trivial = !pnames || json_is_true(pnames);
    if (json_is_object(pnames)) {
        o->pn_trivial = true;
        json_object_foreach(pnames, k, v) if (!is_annotation(k) &&
                                              !(!strcmp(k, "type") && json_is_string(v) &&
                                                !strcmp(json_string_value(v), "string"))) o->pn_trivial = false;
    }
    o->no_names = o->n == 0 && json_array_size(o->banned) == 0;
    if (o->pat) {
        if (!json_is_object(o->pat)) return invalid_kw(g, ptr, "patternProperties", "must be an object");
        if (json_object_size(o->pat) > SCHEMA_MAX_PATTERN_PROPS || !o->no_names || !o->pn_trivial)
            return unsup(g, ptr, "patternProperties",
                         "%s/patternProperties: supported as at most %d patterns on an object without properties or "
                         "propertyNames",
                         ptr, SCHEMA_MAX_PATTERN_PROPS);
        o->pat_rest = o->extra; /* keys no pattern matches: additionalProperties */
        o->extra = true;
    }
    /* propertyNames as an enum of names: the additional keys are the names
     * not listed (every listed one must be among them) */
    if (!o->pn_trivial && json_is_object(pnames) && json_is_array(json_object_get(pnames, "enum")) && !o->no_names) {
        json_t *pn_enum = json_array();
        json_t *en = json_object_get(pnames, "enum");
        bool all_in = json_array_size(o->banned) == 0;
        for (int i = 0; i < o->n && all_in; i++) {
            bool in = false;
            for (size_t j = 0; j < json_array_size(en) && !in; j++)
                in = json_is_string(json_array_get(en, j)) &&
                     !strcmp(json_string_value(json_array_get(en, j)), o->m[i].key);
            all_in = in;
        }
        for (size_t j = 0; j < json_array_size(en) && all_in; j++) {
            json_t *x = json_array_get(en, j);
            bool listed = false;
            for (int i = 0; i < o->n && !listed; i++)
                listed = json_is_string(x) && !strcmp(json_string_value(x), o->m[i].key);
            if (json_is_string(x) && !listed) json_array_append(pn_enum, x);
        }
        if (!all_in) json_decref(pn_enum);
        else {
            json_t *ks = json_pack("{s:s, s:O}", "type", "string", "enum", pn_enum);
            json_decref(pn_enum);
            json_array_append_new(g->owned, ks);
            o->pn_enum = ks;
            if (!json_array_size(json_object_get(ks, "enum"))) o->extra = false;
        }
    }
    if (!o->pn_trivial && !o->pn_enum && (!o->no_names || !o->extra))
        return unsup(g, ptr, "propertyNames", "%s/propertyNames: supported on objects without listed properties", ptr);
    return 0;
}

/* Phase 6: minProperties / maxProperties → o->xlo, o->xhi, bounds on the number of additional members. */
static int object_counts(schema_compiler *g, json_t *s, const char *ptr, object_plan *o) {
    long long pmin, pmax;
    int rc;
    o->xhi = -1;
    if ((rc = get_count(g, s, ptr, "minProperties", 0, &pmin)) || (rc = get_count(g, s, ptr, "maxProperties", -1, &pmax)))
        return rc;
    int n = o->n, n_req = 0;
    for (int i = 0; i < n; i++) n_req += o->m[i].required;
    bool all_req = n_req == n;
    if (pmax >= 0 && pmax < n_req)
        return err_set(g->e, ERR_INVALID, "%s: more properties are required than maxProperties allows", ptr_show(ptr));
    if (pmin <= n_req && (pmax < 0 || (!o->extra && pmax >= n))) {
    } else if (all_req && o->extra) {
        o->xlo = MAX(0, pmin - n);
        o->xhi = pmax < 0 ? -1 : pmax - n;
    } else {
        return unsup(g, ptr, pmax >= 0 ? "maxProperties" : "minProperties",
                     "%s: minProperties/maxProperties are supported when every listed property is required",
                     ptr_show(ptr));
    }
    if (!o->extra && pmin > n)
        return err_set(g->e, ERR_INVALID, "%s: minProperties asks for more properties than are allowed", ptr_show(ptr));
    return 0;
}

/* Phase 7: the keys of phase 5 → o->xkv, the rule `key ": " value` of an additional member (or o->extra false). */
static int object_extra_rule(schema_compiler *g, const char *ptr, object_plan *o) {
    if (!o->extra) return 0;
    int rc = 0;
    sbuf body = {0};
    if (o->pat) {
        rc = gen_pattern_members(g, o->pat, o->pat_rest ? (o->extra_schema ? o->extra_schema : json_true()) : NULL, ptr,
                                 &body);
    } else {
        if (o->pn_enum) {
            char *vp = ptr_join(ptr, "propertyNames");
            rc = gen_schema(g, o->pn_enum, vp, &body);
            free(vp);
        } else if (!o->pn_trivial) {
            json_t *ks = json_copy(o->pnames);
            json_object_set_new(ks, "type", json_string("string"));
            json_array_append_new(g->owned, ks);
            char *vp = ptr_join(ptr, "propertyNames");
            rc = gen_schema(g, ks, vp, &body);
            free(vp);
        } else if (o->no_names) prim(g, P_STRING, &body);
        else {
            tnode root = {0};
            for (int i = 0; i < o->n; i++) trie_add(&root, o->m[i].key);
            for (size_t i = 0; i < json_array_size(o->banned); i++)
                trie_add(&root, json_string_value(json_array_get(o->banned, i)));
            sbuf_puts(&body, "\"\\\"\" ");
            rc = trie_emit(g, &root, &body);
            trie_free(root.kids);
        }
        sbuf_puts(&body, " \": \" ");
        if (!rc) {
            if (o->extra_schema) {
                char *vp = ptr_join(ptr, "additionalProperties");
                rc = gen_schema(g, o->extra_schema, vp, &body);
                free(vp);
            } else prim(g, P_VALUE, &body);
        }
    }
    if (!rc && body.n == 0) o->extra = false; /* no key pattern can be written */
    else if (!rc) {
        o->xkv = rule_name(g, "extra");
        rc = add_rule(g, o->xkv, body.p);
    }
    sbuf_free(&body);
    return rc;
}

/* Phase 8, the chain: o's kv rules and xkv → the T_i / S_i rules, and `( "{" S_0 "}" )` appended to out. */
static int object_chain(schema_compiler *g, object_plan *o, sbuf *out) {
    member *m = o->m;
    int n = o->n, rc = 0;
    long long xlo = o->xlo, xhi = o->xhi;
    const char *xkv = o->xkv;
    bool extra = o->extra && xhi != 0;
    /* T_i chain, from the end; t_names[i] = rule for T_i or NULL when empty */
    char **t_names = xcalloc((size_t)n + 1, sizeof *t_names);
    bool s_nullable = true;
    sbuf s_expr = {0};
    if (extra && n == 0 && (xlo > 0 || xhi >= 0)) {
        /* counted members, the first without a comma */
        sbuf_printf(&s_expr, "%s ( \", \" %s )", xkv, xkv);
        long long l1 = xlo > 0 ? xlo - 1 : 0, h1 = xhi < 0 ? -1 : xhi - 1;
        if (h1 < 0) sbuf_printf(&s_expr, "{%lld,}", l1);
        else sbuf_printf(&s_expr, "{%lld,%lld}", l1, h1);
        if (xlo == 0) {
            sbuf t2 = {0};
            sbuf_printf(&t2, "( %s )?", s_expr.p);
            sbuf_free(&s_expr);
            s_expr = t2;
        } else s_nullable = false;
    } else if (extra) {
        t_names[n] = rule_name(g, "more");
        sbuf body = {0};
        if (xlo == 0 && xhi < 0) sbuf_printf(&body, "( \", \" %s )*", xkv);
        else if (xhi < 0) sbuf_printf(&body, "( \", \" %s ){%lld,}", xkv, xlo);
        else sbuf_printf(&body, "( \", \" %s ){%lld,%lld}", xkv, xlo, xhi);
        rc = add_rule(g, t_names[n], body.p);
        sbuf_free(&body);
        if (!rc && n == 0) sbuf_printf(&s_expr, "( %s %s )?", xkv, t_names[n]);
    }
    for (int i = n - 1; i >= 0 && !rc; i--) {
        sbuf body = {0};
        if (m[i].required) sbuf_printf(&body, "\", \" %s", m[i].kv);
        else sbuf_printf(&body, "( \", \" %s )?", m[i].kv);
        if (t_names[i + 1]) sbuf_printf(&body, " %s", t_names[i + 1]);
        t_names[i] = rule_name(g, "t");
        rc = add_rule(g, t_names[i], body.p);
        sbuf_free(&body);
    }
    /* S_i chain: s_expr for S_0 built from the end. S_n: extra (first without comma) */
    if (!rc && extra && n > 0) sbuf_printf(&s_expr, "( %s %s )?", xkv, t_names[n]);
    for (int i = n - 1; i >= 0 && !rc; i--) {
        sbuf e2 = {0};
        sbuf_puts(&e2, m[i].kv);
        if (t_names[i + 1]) sbuf_printf(&e2, " %s", t_names[i + 1]);
        if (!m[i].required && s_expr.n) {
            /* kv_i T_{i+1} | S_{i+1}: S_{i+1} becomes a rule to keep this linear */
            char *sn = rule_name(g, "s");
            if (s_nullable) {
                /* S_{i+1} can be empty: written as an optional group */
                sbuf body = {0};
                sbuf_printf(&body, "%s", s_expr.p);
                rc = add_rule(g, sn, body.p);
                sbuf_free(&body);
                s_expr.n = 0;
                sbuf_printf(&s_expr, "( %s | %s )?", e2.p, sn);
            } else {
                rc = add_rule(g, sn, s_expr.p);
                s_expr.n = 0;
                sbuf_printf(&s_expr, "( %s | %s )", e2.p, sn);
            }
            free(sn);
        } else if (!m[i].required) {
            s_expr.n = 0;
            sbuf_printf(&s_expr, "( %s )?", e2.p);
            s_nullable = true;
        } else {
            s_expr.n = 0;
            sbuf_puts(&s_expr, e2.p);
            s_nullable = false;
        }
        sbuf_free(&e2);
    }
    if (!rc) {
        sbuf_puts(out, "( \"{\" ");
        if (s_expr.n) sbuf_printf(out, "%s ", s_expr.p);
        sbuf_puts(out, "\"}\" )");
    }
    sbuf_free(&s_expr);
    for (int i = 0; i <= n; i++) free(t_names[i]);
    free(t_names);
    return rc;
}

/* An object schema: the phases of the opening comment in order, each on
 * what the ones before it learnt. */
static int gen_object(schema_compiler *g, json_t *s, const char *ptr, sbuf *out) {
    object_plan o = {0};
    int rc = object_keywords(g, s, ptr, &o);
    if (!rc) rc = object_dependent_required(g, s, ptr, &o);
    if (!rc) rc = object_members(g, ptr, &o);
    if (!rc) rc = object_member_rules(g, ptr, &o);
    if (!rc) rc = object_extra_keys(g, ptr, &o);
    if (!rc) rc = object_counts(g, s, ptr, &o);
    if (!rc) rc = object_extra_rule(g, ptr, &o);
    if (!rc) rc = object_chain(g, &o, out);
    object_plan_free(&o);
    return rc;
}

/* ---- arrays -------------------------------------------------------------- */

/* Equal as JSON Schema compares values (1 and 1.0 are one number). */
static bool same_value(json_t *x, json_t *y) {
    return json_equal(x, y) || (json_is_number(x) && json_is_number(y) && json_number_value(x) == json_number_value(y));
}

/* The values of a schema that admits finitely many (enum or const, filtered
 * by a type beside them; type boolean and/or null), deduplicated as JSON
 * Schema compares them (1 and 1.0 are one value); NULL otherwise. */
static json_t *finite_values(schema_compiler *g, json_t *s) {
    s = deref(g, s);
    if (!json_is_object(s)) return NULL;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (!is_annotation(k) && strcmp(k, "enum") && strcmp(k, "const") && strcmp(k, "type"))
        return NULL;
    json_t *t = json_object_get(s, "type"), *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    unsigned types = T_ALL;
    if (t) {
        err_t junk = {0}, *save = g->e;
        int rc = 0;
        g->e = &junk;
        types = parse_types(g, t, "", &rc);
        g->e = save;
        if (rc) return NULL;
    }
    json_t *vals = json_array();
    if (cn) json_array_append(vals, cn);
    else if (json_is_array(en)) json_array_extend(vals, en);
    else if (!en && !cn && t && !(types & ~(unsigned)(T_BOOLEAN | T_NULL))) {
        if (types & T_BOOLEAN) json_array_append_new(vals, json_false()), json_array_append_new(vals, json_true());
        if (types & T_NULL) json_array_append_new(vals, json_null());
    } else {
        json_decref(vals);
        return NULL;
    }
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(vals); i++) {
        json_t *x = json_array_get(vals, i);
        if (!(json_type_bits(x) & types)) continue;
        bool dup = false;
        for (size_t j = 0; j < json_array_size(out) && !dup; j++) {
            json_t *y = json_array_get(out, j);
            dup = same_value(x, y);
        }
        if (!dup) json_array_append(out, x);
    }
    json_decref(vals);
    return out;
}

#define SCHEMA_MAX_COUNTER_RULES 2048 /* rules of one counted array grammar */

/* uniqueItems over items of finitely many values: the elements are written
 * in the order of those values, each at most once (a subset of the unique
 * arrays, never a duplicate), minItems..maxItems of them. U(i, c): at value
 * i with c elements written (c capped where only "c > 0" and "c >= minItems"
 * matter):  U(i, c) ::= [", "] v_i U(i+1, c+1) | U(i+1, c). */
static int gen_unique(schema_compiler *g, json_t *vals, long long mn, long long mx, const char *ptr, sbuf *out) {
    long long n = (long long)json_array_size(vals);
    if (mx > n) mx = n;
    long long cap = mx >= 0 ? mx : MAX(mn, 1);
    if (mn > n || (mx >= 0 && mx < mn))
        return unsat(g, "%s: no array of distinct values has minItems..maxItems elements", ptr_show(ptr));
    if ((n + 1) * (cap + 1) > SCHEMA_MAX_COUNTER_RULES)
        return unsup(g, ptr, "uniqueItems", "%s/uniqueItems: %lld values and %lld elements need too many rules", ptr, n,
                     cap);
    char **v = xcalloc((size_t)n, sizeof *v);
    int rc = 0;
    for (long long i = 0; i < n && !rc; i++) {
        sbuf b = {0};
        json_t *c = json_pack("{s:O}", "const", json_array_get(vals, (size_t)i));
        json_array_append_new(g->owned, c);
        rc = gen_schema(g, c, ptr, &b);
        v[i] = b.p ? b.p : xstrdup("");
    }
    /* names[i][c]: NULL dead, "" the empty string, else a rule */
    char ***nm = xcalloc((size_t)n + 1, sizeof *nm);
    for (long long i = 0; i <= n; i++) nm[i] = xcalloc((size_t)cap + 1, sizeof **nm);
    for (long long c = 0; c <= cap; c++) nm[n][c] = c >= mn ? xstrdup("") : NULL;
    for (long long i = n - 1; i >= 0 && !rc; i--)
        for (long long c = 0; c <= cap && !rc; c++) {
            if (c + (n - i) < mn) continue;
            long long c2 = mx >= 0 ? c + 1 : MIN(c + 1, cap);
            const char *take = mx >= 0 && c + 1 > mx ? NULL : nm[i + 1][c2], *skip = nm[i + 1][c];
            if (!take && !skip) continue;
            sbuf b = {0};
            sbuf_puts(&b, "( ");
            if (take) sbuf_printf(&b, "%s%s %s", c ? "\", \" " : "", v[i], take);
            if (skip && *skip) sbuf_printf(&b, "%s%s", take ? " | " : "", skip);
            sbuf_puts(&b, " )");
            if (skip && !*skip) sbuf_puts(&b, "?");
            if (!take && !*skip) nm[i][c] = xstrdup("");
            else {
                nm[i][c] = rule_name(g, "uniq");
                rc = add_rule(g, nm[i][c], b.p);
            }
            sbuf_free(&b);
        }
    if (!rc) {
        if (!nm[0][0]) rc = unsat(g, "%s: no array of distinct values has minItems..maxItems elements", ptr_show(ptr));
        else sbuf_printf(out, "( \"[\" %s \"]\" )", nm[0][0]);
    }
    for (long long i = 0; i <= n; i++) {
        for (long long c = 0; c <= cap; c++) free(nm[i][c]);
        free(nm[i]);
    }
    free(nm);
    for (long long i = 0; i < n; i++) free(v[i]);
    free(v);
    return rc;
}

/* contains with counts: every element is E and C (a match) or E and not C
 * (negate), so matches are counted exactly. R(t, m): t elements written, m
 * of them matches (each capped where only the bounds matter):
 *   R(t, m) ::= [", "] EC R(t+1, m+1) | [", "] EN R(t+1, m)  (| "" when done)
 * States that cannot reach "done" are left out. */
static int gen_contains_count(schema_compiler *g, json_t *items, json_t *contains, json_t *ncont, long long mn, long long mx,
                              long long cmin, long long cmax, const char *ptr, sbuf *out) {
    long long tcap = mx >= 0 ? mx : MAX(mn, 1), mcap = cmax >= 0 ? cmax : cmin;
    if (mx >= 0 && cmax > mx) mcap = cmax = mx;
    if ((tcap + 1) * (mcap + 1) > SCHEMA_MAX_COUNTER_RULES)
        return unsup(g, ptr, "contains", "%s/contains: the counts need more than %d rules", ptr, SCHEMA_MAX_COUNTER_RULES);
    json_t *e = items ? items : json_true();
    json_t *sub[2] = {json_pack("{s:[O,O]}", "allOf", e, contains), json_pack("{s:[O,o]}", "allOf", e, ncont)};
    char *el[2] = {NULL, NULL};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        json_array_append_new(g->owned, sub[k]);
        if (json_is_false(e)) continue;
        sbuf b = {0};
        char *p = ptr_join(ptr, k ? "items" : "contains");
        g->unsat = false;
        rc = gen_schema(g, sub[k], p, &b);
        free(p);
        if (rc == ERR_INVALID && g->unsat) rc = 0; /* no such element */
        else if (!rc) {
            el[k] = rule_name(g, k ? "other" : "match");
            rc = add_rule(g, el[k], b.p);
        }
        sbuf_free(&b);
    }
    long long ns = (tcap + 1) * (mcap + 1);
    bool *live = xcalloc((size_t)ns, sizeof *live);
    char **nm = xcalloc((size_t)ns, sizeof *nm);
#define ST(t, m) ((t) * (mcap + 1) + (m))
    for (bool changed = true; changed && !rc;) {
        changed = false;
        for (long long t = 0; t <= tcap; t++)
            for (long long m = 0; m <= mcap; m++) {
                if (live[ST(t, m)]) continue;
                bool ok = t >= mn && m >= cmin;
                for (int k = 0; k < 2 && !ok; k++) {
                    if (!el[k] || (mx >= 0 && t + 1 > mx) || (k == 0 && cmax >= 0 && m + 1 > cmax)) continue;
                    long long t2 = mx >= 0 ? t + 1 : MIN(t + 1, tcap), m2 = k ? m : (cmax >= 0 ? m + 1 : MIN(m + 1, mcap));
                    ok = live[ST(t2, m2)];
                }
                if (ok) live[ST(t, m)] = changed = true;
            }
    }
    if (!rc && !live[0]) rc = unsat(g, "%s: no array satisfies contains with its counts and the item bounds", ptr_show(ptr));
    for (long long i = 0; i < ns && !rc; i++)
        if (live[i]) nm[i] = rule_name(g, "count");
    for (long long t = 0; t <= tcap && !rc; t++)
        for (long long m = 0; m <= mcap && !rc; m++) {
            if (!live[ST(t, m)]) continue;
            sbuf b = {0};
            int n_alt = 0;
            sbuf_puts(&b, "( ");
            for (int k = 0; k < 2; k++) {
                if (!el[k] || (mx >= 0 && t + 1 > mx) || (k == 0 && cmax >= 0 && m + 1 > cmax)) continue;
                long long t2 = mx >= 0 ? t + 1 : MIN(t + 1, tcap), m2 = k ? m : (cmax >= 0 ? m + 1 : MIN(m + 1, mcap));
                if (!live[ST(t2, m2)]) continue;
                sbuf_printf(&b, "%s%s%s %s", n_alt++ ? " | " : "", t ? "\", \" " : "", el[k], nm[ST(t2, m2)]);
            }
            bool done = t >= mn && m >= cmin;
            if (!n_alt) sbuf_puts(&b, "\"\"");
            sbuf_puts(&b, n_alt && done ? " )?" : " )");
            rc = add_rule(g, nm[ST(t, m)], b.p);
            sbuf_free(&b);
        }
#undef ST
    if (!rc) sbuf_printf(out, "( \"[\" %s \"]\" )", nm[0]);
    for (long long i = 0; i < ns; i++) free(nm[i]);
    free(nm);
    free(live);
    free(el[0]);
    free(el[1]);
    return rc;
}

/* What gen_array's phases learn about one array schema, in phase order. */
typedef struct {
    /* 1. keywords */
    json_t *items, *prefix;        /* the elements after the prefix; the prefix (either NULL)    */
    const char *items_kw, *pre_kw; /* the keywords they came from, for pointers                 */
    long long mn, mx;              /* minItems, maxItems (-1: none; phase 3 caps it)             */
    /* 3. element rules */
    size_t k;                      /* prefix length                                              */
    size_t n_pre;                  /* prefix elements that can appear                            */
    char **el;                     /* their rules (k + 1 slots)                                  */
    char *rest;                    /* the rule of an element after them, NULL when none can be   */
} array_plan;

static void array_plan_free(array_plan *a) {
    for (size_t i = 0; a->el && i <= a->k; i++) free(a->el[i]);
    free(a->el);
    free(a->rest);
}

/* Phase 1, keywords: s → a's prefix and items (draft 4-7 tuples, unevaluatedItems read too), minItems, maxItems. */
static int array_keywords(schema_compiler *g, json_t *s, const char *ptr, array_plan *a) {
    a->items = json_object_get(s, "items");
    a->prefix = json_object_get(s, "prefixItems");
    a->pre_kw = "prefixItems";
    a->items_kw = "items";
    if (a->prefix && !json_is_array(a->prefix)) return invalid_kw(g, ptr, "prefixItems", "must be an array of schemas");
    if (a->items && json_is_array(a->items)) {
        /* draft 4-7 tuples: items is the prefix, additionalItems the rest */
        if (a->prefix) return invalid_kw(g, ptr, "items", "cannot be an array beside prefixItems");
        a->prefix = a->items, a->pre_kw = "items";
        a->items = json_object_get(s, "additionalItems"), a->items_kw = "additionalItems";
    }
    json_t *uneval = json_object_get(s, "unevaluatedItems");
    if (uneval) {
        if (a->items)
            return unsup(g, ptr, "unevaluatedItems", "%s: unevaluatedItems beside items is not supported", ptr_show(ptr));
        a->items = uneval, a->items_kw = "unevaluatedItems";
    }
    if (a->items && !json_is_object(a->items) && !json_is_boolean(a->items))
        return invalid_kw(g, ptr, a->items_kw, "must be a schema");
    int rc;
    if ((rc = get_count(g, s, ptr, "minItems", 0, &a->mn))) return rc;
    return get_count(g, s, ptr, "maxItems", -1, &a->mx);
}

/* Phase 2a, uniqueItems: a's items of finitely many values → the array on out (gen_unique); refused otherwise. */
static int gen_array_unique(schema_compiler *g, json_t *s, const char *ptr, const array_plan *a, sbuf *out) {
    json_t *vals =
        a->prefix || json_object_get(s, "contains") ? NULL : finite_values(g, a->items ? a->items : json_true());
    if (!vals)
        return unsup(g, ptr, "uniqueItems",
                     "%s/uniqueItems: enforced for items of finitely many values (enum, const, boolean, null) "
                     "without prefixItems or contains", ptr);
    int rc = gen_unique(g, vals, a->mn, a->mx, ptr, out);
    json_decref(vals);
    return rc;
}

/* Phase 2b, contains: s's contains, min/maxContains → the array on out and *done, or *done false if nothing asked. */
static int gen_array_contains(schema_compiler *g, json_t *s, const char *ptr, const array_plan *a, sbuf *out,
                              bool *done) {
    json_t *items = a->items, *prefix = a->prefix;
    long long mn = a->mn, mx = a->mx;
    json_t *contains = json_object_get(s, "contains");
    long long cmin, cmax;
    int rc;
    *done = true;
    if ((rc = get_count(g, s, ptr, "minContains", 1, &cmin)) || (rc = get_count(g, s, ptr, "maxContains", -1, &cmax)))
        return rc;
    if (contains && (cmin > 0 || cmax >= 0) &&
        (prefix || mn > 1 || mx >= 0 || cmin > 1 || cmax >= 0 || json_is_false(items))) {
        json_t *nc = prefix ? NULL : negate(g, contains, 0);
        if (nc) return gen_contains_count(g, items, contains, nc, mn, mx, cmin, cmax, ptr, out);
    }
    if (!contains || cmin <= 0) {
        *done = false;
        return 0;
    }
    /* "[" (E ", ")* (E and C) (", " E)* "]": exact for one required match */
    if (prefix || mn > 1 || mx >= 0 || cmin > 1 || cmax >= 0 || json_is_false(items))
        return unsup(g, ptr, "contains",
                     "%s/contains: supported without prefixItems, minItems above 1, maxItems, minContains above 1 "
                     "and maxContains", ptr);
    json_t *both = json_pack("{s:[O,O]}", "allOf", items ? items : json_true(), contains);
    json_array_append_new(g->owned, both);
    sbuf e = {0}, ec = {0};
    char *ep = ptr_join(ptr, a->items_kw), *cp = ptr_join(ptr, "contains");
    if (items && !json_is_true(items)) rc = gen_schema(g, items, ep, &e);
    else prim(g, P_VALUE, &e);
    if (!rc) rc = gen_schema(g, both, cp, &ec);
    char *en = NULL, *cn = NULL;
    if (!rc) {
        en = rule_name(g, "item");
        rc = add_rule(g, en, e.p);
    }
    if (!rc) {
        cn = rule_name(g, "contains");
        rc = add_rule(g, cn, ec.p);
    }
    if (!rc) sbuf_printf(out, "( \"[\" ( %s \", \" )* %s ( \", \" %s )* \"]\" )", en, cn, en);
    free(en);
    free(cn);
    free(ep);
    free(cp);
    sbuf_free(&e);
    sbuf_free(&ec);
    return rc;
}

/* Phase 3, element rules: a → a->el, a rule per prefix element that can appear, and a->rest, one for those after it. */
static int array_element_rules(schema_compiler *g, const char *ptr, array_plan *a) {
    json_t *items = a->items;
    a->k = a->prefix ? json_array_size(a->prefix) : 0;
    size_t k = a->k;
    if (k > GRAMMAR_MAX_REPEAT) return err_set(g->e, ERR_RANGE, "%s/prefixItems has too many elements", ptr);
    bool more = !json_is_false(items); /* elements after the prefix */
    if (!more && (a->mx < 0 || a->mx > (long long)k)) a->mx = (long long)k;
    long long mn = a->mn, mx = a->mx;
    if (mx >= 0 && mx < mn)
        return unsat(g, "%s: no array length satisfies minItems, maxItems and items", ptr_show(ptr));
    a->el = xcalloc(k + 1, sizeof *a->el);
    a->n_pre = mx >= 0 && (size_t)mx < k ? (size_t)mx : k;
    int rc = 0;
    for (size_t i = 0; i < a->n_pre && !rc; i++) {
        sbuf body = {0};
        char *ep = ptr_index(ptr, a->pre_kw, i);
        rc = gen_schema(g, json_array_get(a->prefix, i), ep, &body);
        free(ep);
        if (!rc) {
            a->el[i] = rule_name(g, "item");
            rc = add_rule(g, a->el[i], body.p);
        }
        sbuf_free(&body);
    }
    bool rest_possible = more && (mx < 0 || (size_t)mx > k);
    if (!rc && rest_possible) {
        sbuf body = {0};
        char *ep = ptr_join(ptr, a->items_kw);
        if (items && !json_is_true(items)) rc = gen_schema(g, items, ep, &body);
        else prim(g, P_VALUE, &body);
        free(ep);
        if (!rc) {
            a->rest = rule_name(g, "item");
            rc = add_rule(g, a->rest, body.p);
        }
        sbuf_free(&body);
    }
    return rc;
}

/* Phase 4, the expression: a's element rules and length bounds → `( "[" p0 (", " p1 tail)? "]" )` appended to out. */
static void array_expr(const array_plan *a, sbuf *out) {
    size_t n_pre = a->n_pre;
    long long mn = a->mn, mx = a->mx;
    const char *rest = a->rest;
    /* Elements n_pre.. come from `rest`: count between lo and hi (-1 = no bound). */
    long long lo = mn > (long long)n_pre ? mn - (long long)n_pre : 0;
    long long hi = mx < 0 ? -1 : mx - (long long)n_pre;
    sbuf tail = {0}; /* elements after the prefix, each with its leading ", " if n_pre > 0 */
    if (rest && hi != 0) {
        if (n_pre > 0) {
            sbuf_printf(&tail, "( \", \" %s )", rest);
            if (lo == 0 && hi < 0) sbuf_puts(&tail, "*");
            else if (hi < 0) sbuf_printf(&tail, "{%lld,}", lo);
            else if (lo == hi) sbuf_printf(&tail, "{%lld}", lo);
            else sbuf_printf(&tail, "{%lld,%lld}", lo, hi);
        } else {
            /* first element without comma */
            sbuf_printf(&tail, "%s ( \", \" %s )", rest, rest);
            long long l1 = lo > 0 ? lo - 1 : 0, h1 = hi < 0 ? -1 : hi - 1;
            if (l1 == 0 && h1 < 0) sbuf_puts(&tail, "*");
            else if (h1 < 0) sbuf_printf(&tail, "{%lld,}", l1);
            else if (l1 == h1) sbuf_printf(&tail, "{%lld}", l1);
            else sbuf_printf(&tail, "{%lld,%lld}", l1, h1);
            if (lo == 0) {
                sbuf t2 = {0};
                sbuf_printf(&t2, "( %s )?", tail.p);
                sbuf_free(&tail);
                tail = t2;
            }
        }
    }
    /* prefix elements nest: p0 (", " p1 (", " p2 tail)?)? with required ones unwrapped */
    sbuf expr = {0};
    sbuf_puts(&expr, tail.p ? tail.p : "");
    for (size_t i = n_pre; i-- > 0;) {
        sbuf e2 = {0};
        if (i > 0) sbuf_puts(&e2, "\", \" ");
        sbuf_puts(&e2, a->el[i]);
        if (expr.n) sbuf_printf(&e2, " %s", expr.p);
        sbuf_free(&expr);
        if ((long long)i >= mn) {
            sbuf_printf(&expr, "( %s )?", e2.p);
            sbuf_free(&e2);
        } else expr = e2;
    }
    sbuf_puts(out, "( \"[\" ");
    if (expr.n) sbuf_printf(out, "%s ", expr.p);
    sbuf_puts(out, "\"]\" )");
    sbuf_free(&expr);
    sbuf_free(&tail);
}

/* An array schema: the phases of the opening comment in order; uniqueItems and contains write the whole array. */
static int gen_array(schema_compiler *g, json_t *s, const char *ptr, sbuf *out) {
    array_plan a = {0};
    int rc = array_keywords(g, s, ptr, &a);
    if (rc) return rc;
    if (json_is_true(json_object_get(s, "uniqueItems")) && (a.mx < 0 || a.mx > 1))
        return gen_array_unique(g, s, ptr, &a, out);
    bool done;
    rc = gen_array_contains(g, s, ptr, &a, out, &done);
    if (done) return rc;
    rc = array_element_rules(g, ptr, &a);
    if (!rc) array_expr(&a, out);
    array_plan_free(&a);
    return rc;
}

/* ---- enum / const -------------------------------------------------------- */

static int gen_enum(schema_compiler *g, json_t *s, const char *ptr, unsigned types, sbuf *out) {
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en && !json_is_array(en)) return invalid_kw(g, ptr, "enum", "must be an array");
    if (en && json_array_size(en) > SCHEMA_MAX_ENUM)
        return err_set(g->e, ERR_RANGE, "%s/enum has more than %d values", ptr, SCHEMA_MAX_ENUM);
    json_t *vals = json_array();
    if (cn) {
        bool in = true;
        if (en) {
            in = false;
            for (size_t i = 0; i < json_array_size(en); i++) in |= json_equal(cn, json_array_get(en, i));
        }
        if (in) json_array_append(vals, cn);
    } else {
        for (size_t i = 0; i < json_array_size(en); i++) {
            json_t *x = json_array_get(en, i);
            bool dup = false;
            for (size_t j = 0; j < json_array_size(vals) && !dup; j++) dup = json_equal(x, json_array_get(vals, j));
            if (!dup) json_array_append(vals, x);
        }
    }
    int rc = 0, n = 0;
    sbuf b = {0};
    sbuf_puts(&b, "( ");
    for (size_t i = 0; i < json_array_size(vals); i++) {
        json_t *x = json_array_get(vals, i);
        if (!(json_type_bits(x) & types)) continue;
        sbuf t = {0};
        if (!json_canon(&t, x, 0)) {
            sbuf_free(&t);
            rc = err_set(g->e, ERR_INVALID, "%s/%s: value %zu cannot be written as JSON (or nests too deep)", ptr,
                         cn ? "const" : "enum", i);
            break;
        }
        if (n++) sbuf_puts(&b, " | ");
        gbnf_lit(&b, t.p, t.n);
        sbuf_free(&t);
        if (b.n > GRAMMAR_MAX_SRC_BYTES) {
            rc = err_set(g->e, ERR_RANGE, "%s/enum: grammar exceeds %u bytes", ptr, GRAMMAR_MAX_SRC_BYTES);
            break;
        }
    }
    sbuf_puts(&b, " )");
    if (!rc && n == 0)
        rc = unsat(g, "%s: no value satisfies %s%s", ptr_show(ptr), cn ? "const" : "enum",
                     json_object_get(s, "type") ? " and type" : (cn && en ? " and enum" : ""));
    if (!rc) sbuf_puts(out, b.p);
    sbuf_free(&b);
    json_decref(vals);
    return rc;
}

/* ---- $ref ---------------------------------------------------------------- */

/* Resolves "#", "#/a/b" (JSON pointer with ~0 ~1) against the root. */
/* The subschema of v (depth-first) whose $anchor or $dynamicAnchor is name. */
static json_t *find_anchor(json_t *v, const char *name, int depth) {
    if (depth > SCHEMA_MAX_DEPTH) return NULL;
    if (json_is_object(v)) {
        json_t *a = json_object_get(v, "$anchor"), *d = json_object_get(v, "$dynamicAnchor");
        if ((json_is_string(a) && !strcmp(json_string_value(a), name)) ||
            (json_is_string(d) && !strcmp(json_string_value(d), name)))
            return v;
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            if (!strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "default") || !strcmp(k, "examples")) continue;
            json_t *r = find_anchor(x, name, depth + 1);
            if (r) return r;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *r = find_anchor(json_array_get(v, i), name, depth + 1);
            if (r) return r;
        }
    }
    return NULL;
}

static json_t *resolve_ref(json_t *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    if (ref[1] && ref[1] != '/') return find_anchor(root, ref + 1, 0);
    const char *p = ref + 1;
    json_t *cur = root;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        sbuf tok = {0};
        sbuf_puts(&tok, "");
        while (*p && *p != '/') {
            if (p[0] == '~' && p[1] == '0') sbuf_puts(&tok, "~"), p += 2;
            else if (p[0] == '~' && p[1] == '1') sbuf_puts(&tok, "/"), p += 2;
            else sbuf_put(&tok, p++, 1);
        }
        if (json_is_object(cur)) cur = json_object_get(cur, tok.p);
        else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(tok.p, &end, 10);
            cur = *end || !*tok.p ? NULL : json_array_get(cur, i);
        } else cur = NULL;
        sbuf_free(&tok);
        if (!cur) return NULL;
    }
    return cur;
}

static int gen_ref(schema_compiler *g, json_t *refv, const char *ptr, const char *kw, sbuf *out) {
    if (!json_is_string(refv)) return invalid_kw(g, ptr, kw, "must be a string");
    const char *ref = json_string_value(refv);
    for (int i = 0; i < g->n_refs; i++) {
        if (strcmp(g->refs[i].ptr, ref)) continue;
        if (!g->refs[i].done && g->refs[i].n_cont == g->n_cont)
            return err_set(g->e, ERR_INVALID,
                           "%s/$ref: '%.100s' refers back to itself without an object or array in between", ptr, ref);
        sbuf_puts(out, g->refs[i].rule);
        return 0;
    }
    json_t *target = resolve_ref(g->root, ref);
    if (!target) {
        if (ref[0] != '#')
            return unsup(g, ptr, kw, "%s/%s: cannot resolve '%.100s' (only local references \"#...\" are supported)",
                         ptr, kw, ref);
        return err_set(g->e, ERR_INVALID, "%s/%s: cannot resolve '%.100s'", ptr, kw, ref);
    }
    if (g->n_refs == g->cap_refs) {
        g->cap_refs = g->cap_refs ? g->cap_refs * 2 : 8;
        g->refs = xrealloc(g->refs, sizeof *g->refs * (size_t)g->cap_refs);
    }
    int idx = g->n_refs++;
    const char *slash = strrchr(ref, '/');
    g->refs[idx] = (refent){.ptr = xstrdup(ref),
                            .rule = rule_name(g, slash ? slash + 1 : "root"),
                            .done = false,
                            .n_cont = g->n_cont};
    sbuf body = {0};
    int rc = gen_schema(g, target, ref[1] == '/' || !ref[1] ? ref + 1 : ref, &body);
    if (!rc) rc = add_rule(g, g->refs[idx].rule, body.p);
    sbuf_free(&body);
    g->refs[idx].done = true;
    if (!rc) sbuf_puts(out, g->refs[idx].rule);
    else { /* forget it: its rule was never written */
        free(g->refs[idx].ptr);
        free(g->refs[idx].rule);
        memmove(g->refs + idx, g->refs + idx + 1, sizeof *g->refs * (size_t)(g->n_refs - idx - 1));
        g->n_refs--;
    }
    return rc;
}

/* ---- a schema ------------------------------------------------------------ */

static unsigned parse_types(schema_compiler *g, json_t *t, const char *ptr, int *rc) {
    unsigned bits = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    if (json_is_array(t) && n == 0) {
        *rc = invalid_kw(g, ptr, "type", "must not be an empty array");
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
        unsigned bit = 0;
        for (size_t k = 0; json_is_string(x) && k < ARRAY_LEN(type_names); k++)
            if (!strcmp(json_string_value(x), type_names[k])) bit = 1u << k;
        if (!bit) {
            *rc = invalid_kw(g, ptr, "type", "must be a type name or an array of type names");
            return 0;
        }
        if (bits & bit) {
            *rc = invalid_kw(g, ptr, "type", "has duplicates");
            return 0;
        }
        bits |= bit;
    }
    return bits;
}

static json_t *deref(schema_compiler *g, json_t *s);
static int relax(schema_compiler *g, const char *kw, const char *ptr);

/* The types a oneOf branch admits, as far as a glance tells (T_ALL else). */
static unsigned branch_types(json_t *x) {
    unsigned bits = 0;
    json_t *t = json_object_get(x, "type"), *c = json_object_get(x, "const"), *en = json_object_get(x, "enum");
    if (json_is_string(t) || json_is_array(t)) {
        for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1); i++) {
            json_t *y = json_is_array(t) ? json_array_get(t, i) : t;
            for (size_t k = 0; json_is_string(y) && k < ARRAY_LEN(type_names); k++)
                if (!strcmp(json_string_value(y), type_names[k])) bits |= 1u << k;
        }
    } else if (c) bits = json_type_bits(c);
    else if (json_is_array(en))
        for (size_t i = 0; i < json_array_size(en); i++) bits |= json_type_bits(json_array_get(en, i));
    else return T_ALL;
    if (bits & T_NUMBER) bits |= T_INTEGER;
    return bits;
}

/* A required property of both whose const values differ. */
static bool discriminated(json_t *a, json_t *b) {
    json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required");
    if (!json_is_object(pa) || !json_is_object(pb) || !json_is_array(ra) || !json_is_array(rb)) return false;
    for (size_t i = 0; i < json_array_size(ra); i++) {
        const char *k = json_string_value(json_array_get(ra, i));
        bool in_b = false;
        for (size_t j = 0; k && j < json_array_size(rb); j++)
            in_b |= json_is_string(json_array_get(rb, j)) && !strcmp(json_string_value(json_array_get(rb, j)), k);
        if (!in_b) continue;
        json_t *x = json_object_get(pa, k), *y = json_object_get(pb, k);
        json_t *cx = json_object_get(x, "const"), *cy = json_object_get(y, "const");
        if (!cx && json_array_size(json_object_get(x, "enum")) == 1) cx = json_array_get(json_object_get(x, "enum"), 0);
        if (!cy && json_array_size(json_object_get(y, "enum")) == 1) cy = json_array_get(json_object_get(y, "enum"), 0);
        if (cx && cy && !json_equal(cx, cy)) return true;
    }
    return false;
}

static int gen_alternatives(schema_compiler *g, json_t *arr, const char *ptr, const char *kw, sbuf *out) {
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return invalid_kw(g, ptr, kw, "must be a non-empty array of schemas");
    /* oneOf is written as anyOf: exact when no value can match two
     * branches (different types, or a required property with different
     * const values); else reported as relaxed */
    bool overlap = false;
    for (size_t i = 0; !strcmp(kw, "oneOf") && !g->strict && i < json_array_size(arr) && !overlap; i++)
        for (size_t j = 0; j < i && !overlap; j++) {
            json_t *a = deref(g, json_array_get(arr, i)), *b = deref(g, json_array_get(arr, j));
            if (is_never(a) || is_never(b)) continue;
            if (!json_is_object(a) || !json_is_object(b)) overlap = true;
            else overlap = (branch_types(a) & branch_types(b)) && !discriminated(a, b);
        }
    if (overlap) relax(g, "oneOf", ptr);
    sbuf b = {0};
    int n = 0, rc = 0;
    sbuf_puts(&b, "( ");
    for (size_t i = 0; i < json_array_size(arr) && !rc; i++) {
        json_t *x = json_array_get(arr, i);
        if (is_never(x)) continue;
        size_t mark = b.n;
        if (n++) sbuf_puts(&b, " | ");
        char *p = ptr_index(ptr, kw, i);
        g->unsat = false;
        rc = gen_schema(g, x, p, &b);
        free(p);
        if (rc == ERR_INVALID && g->unsat) { /* a branch no value satisfies: left out */
            rc = 0;
            n--;
            b.n = mark;
            b.p[mark] = 0;
        }
    }
    sbuf_puts(&b, " )");
    if (!rc && n == 0) rc = unsat(g, "%s/%s: every alternative is false", ptr, kw);
    if (!rc) sbuf_puts(out, b.p);
    sbuf_free(&b);
    return rc;
}

/* ---- merging (allOf, $ref and combinators beside other keywords) -------- */

/* Records a relaxed keyword (or, when strict, refuses it). */
static int relax(schema_compiler *g, const char *kw, const char *ptr) {
    if (g->strict)
        return err_set(g->e, ERR_UNSUPPORTED, "'%s' at %s cannot be enforced together with the rest of the schema", kw,
                       ptr_show(ptr));
    if (g->n_relaxed++ < 64) {
        if (g->relaxed.n) sbuf_puts(&g->relaxed, ", ");
        sbuf_printf(&g->relaxed, "%s at %s", kw, ptr_show(ptr));
    }
    return 0;
}

static bool is_lower(const char *k) {
    return !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum") || !strcmp(k, "minLength") ||
           !strcmp(k, "minItems") || !strcmp(k, "minProperties") || !strcmp(k, "minContains");
}
static bool is_upper(const char *k) {
    return !strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum") || !strcmp(k, "maxLength") ||
           !strcmp(k, "maxItems") || !strcmp(k, "maxProperties") || !strcmp(k, "maxContains");
}

/* A schema with only a $ref (and annotations): its target; else s. */
static json_t *deref(schema_compiler *g, json_t *s) {
    for (int i = 0; i < 16 && json_is_object(s); i++) {
        json_t *r = json_object_get(s, "$ref");
        if (!json_is_string(r)) return s;
        const char *k;
        json_t *v;
        json_object_foreach(s, k, v) if (strcmp(k, "$ref") && !is_annotation(k)) return s;
        json_t *t = resolve_ref(g->root, json_string_value(r));
        if (!t) return s;
        s = t;
    }
    return s;
}

/* The one keyword of a `not` schema when it has only type, or only
 * enum / const (as "enum"); NULL otherwise. */
static const char *not_kind(json_t *x) {
    if (!json_is_object(x) || json_object_size(x) != 1) return NULL;
    if (json_object_get(x, "type")) return "type";
    if (json_object_get(x, "enum") || json_object_get(x, "const")) return "enum";
    return NULL;
}
static json_t *as_list(json_t *x, const char *kind) {
    json_t *v = json_object_get(x, kind);
    if (!v && !strcmp(kind, "enum")) return json_pack("[O]", json_object_get(x, "const"));
    return json_is_array(v) ? json_copy(v) : json_pack("[O]", v);
}
/* A schema for "not a and not b" as one `not` (a new reference). */
static json_t *not_union(json_t *a, json_t *b) {
    const char *ka = not_kind(a), *kb = not_kind(b);
    if (ka && kb && !strcmp(ka, kb)) {
        json_t *u = as_list(a, ka), *w = as_list(b, kb);
        for (size_t i = 0; i < json_array_size(w); i++) {
            bool in = false;
            for (size_t j = 0; j < json_array_size(u) && !in; j++) in = json_equal(json_array_get(u, j), json_array_get(w, i));
            if (!in) json_array_append(u, json_array_get(w, i));
        }
        json_decref(w);
        return json_pack("{s:o}", ka, u);
    }
    return json_pack("{s:[O,O]}", "anyOf", a, b);
}

/* dst (a fresh object) gets the constraints of src as well: the stricter
 * bound, the union of required, properties merged (a name in both becomes
 * {"allOf": [a, b]}), types intersected; a keyword that cannot be combined
 * keeps dst's value and is relaxed. */
static int merge_into(schema_compiler *g, json_t *dst, json_t *src, const char *ptr) {
    src = deref(g, src);
    if (json_is_true(src)) return 0;
    if (json_is_false(src)) return unsat(g, "%s/allOf: an element is the schema false", ptr);
    if (!json_is_object(src)) return invalid_kw(g, ptr, "allOf", "elements must be schemas");
    const char *k;
    json_t *v;
    json_object_foreach(src, k, v) {
        json_t *d = json_object_get(dst, k);
        if (is_annotation(k) && strcmp(k, "$defs") && strcmp(k, "definitions")) continue;
        if (!d) {
            json_object_set(dst, k, v);
            continue;
        }
        if (json_equal(d, v)) continue;
        if (!strcmp(k, "required") && json_is_array(d) && json_is_array(v)) {
            json_t *u = json_copy(d);
            for (size_t i = 0; i < json_array_size(v); i++) {
                bool in = false;
                for (size_t j = 0; j < json_array_size(u); j++) in |= json_equal(json_array_get(u, j), json_array_get(v, i));
                if (!in) json_array_append(u, json_array_get(v, i));
            }
            json_object_set_new(dst, k, u);
        } else if ((!strcmp(k, "properties") || !strcmp(k, "$defs") || !strcmp(k, "definitions") ||
                    !strcmp(k, "patternProperties")) &&
                   json_is_object(d) && json_is_object(v)) {
            json_t *u = json_copy(d);
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                json_t *old = json_object_get(u, pk);
                if (!old || json_equal(old, pv) || json_is_true(old) || is_never(pv)) json_object_set(u, pk, pv);
                else if (json_is_true(pv) || is_never(old)) continue;
                else json_object_set_new(u, pk, json_pack("{s:[O,O]}", "allOf", old, pv));
            }
            json_object_set_new(dst, k, u);
        } else if ((!strcmp(k, "items") || !strcmp(k, "additionalProperties") || !strcmp(k, "contains") ||
                    !strcmp(k, "propertyNames") || !strcmp(k, "additionalItems")) &&
                   !json_is_array(d) && !json_is_array(v)) {
            if (json_is_false(d) || json_is_false(v)) json_object_set_new(dst, k, json_false());
            else json_object_set_new(dst, k, json_pack("{s:[O,O]}", "allOf", d, v));
        } else if (!strcmp(k, "type")) {
            json_t *u = json_array();
            for (size_t i = 0; i < (json_is_array(d) ? json_array_size(d) : 1); i++) {
                json_t *x = json_is_array(d) ? json_array_get(d, i) : d;
                bool in = false;
                for (size_t j = 0; j < (json_is_array(v) ? json_array_size(v) : 1); j++) {
                    json_t *y = json_is_array(v) ? json_array_get(v, j) : v;
                    in |= json_equal(x, y) || (json_is_string(x) && json_is_string(y) &&
                                               !strcmp(json_string_value(x), "integer") &&
                                               !strcmp(json_string_value(y), "number"));
                    if (json_is_string(x) && json_is_string(y) && !strcmp(json_string_value(x), "number") &&
                        !strcmp(json_string_value(y), "integer"))
                        x = y, in = true;
                }
                if (in) json_array_append(u, x);
            }
            if (!json_array_size(u)) {
                json_decref(u);
                return unsat(g, "%s: no value has every type allOf asks for", ptr_show(ptr));
            }
            json_object_set_new(dst, k, u);
        } else if (json_is_number(d) && json_is_number(v) && (is_lower(k) || is_upper(k))) {
            double a = json_number_value(d), b = json_number_value(v);
            if (is_lower(k) ? b > a : b < a) json_object_set(dst, k, v);
        } else if (!strcmp(k, "enum") && json_is_array(d) && json_is_array(v)) {
            json_t *u = json_array();
            for (size_t i = 0; i < json_array_size(d); i++) {
                bool in = false;
                for (size_t j = 0; j < json_array_size(v); j++) in |= json_equal(json_array_get(d, i), json_array_get(v, j));
                if (in) json_array_append(u, json_array_get(d, i));
            }
            json_object_set_new(dst, k, u);
        } else if (!strcmp(k, "anyOf") && json_is_array(d) && json_is_array(v) &&
                   json_array_size(d) * json_array_size(v) <= 64) {
            /* (a1 | a2) & (b1 | b2) = a1&b1 | a1&b2 | a2&b1 | a2&b2 */
            json_t *u = json_array();
            for (size_t i = 0; i < json_array_size(d); i++)
                for (size_t j = 0; j < json_array_size(v); j++)
                    json_array_append_new(u, json_pack("{s:[O,O]}", "allOf", json_array_get(d, i), json_array_get(v, j)));
            json_object_set_new(dst, k, u);
        } else if (!strcmp(k, "not")) {
            /* not A and not B = not (A or B): types and values united */
            json_object_set_new(dst, k, not_union(d, v));
        } else if (!strcmp(k, "allOf") && json_is_array(d) && json_is_array(v)) {
            json_t *u = json_copy(d);
            json_array_extend(u, v);
            json_object_set_new(dst, k, u);
        } else {
            int rc = relax(g, k, ptr);
            if (rc) return rc;
        }
    }
    json_t *en = json_object_get(dst, "enum"), *cn = json_object_get(dst, "const");
    if (json_is_array(en) && cn) { /* both: the enum's values equal to the const */
        json_t *u = json_array();
        for (size_t i = 0; i < json_array_size(en); i++)
            if (json_equal(json_array_get(en, i), cn)) json_array_append(u, cn);
        json_object_set_new(dst, "enum", u);
        json_object_del(dst, "const");
    }
    return 0;
}

/* s without the keywords in drop (a new reference). */
static json_t *without(json_t *s, const char *const *drop, size_t n) {
    json_t *c = json_copy(s);
    for (size_t i = 0; i < n; i++) json_object_del(c, drop[i]);
    return c;
}

/* ---- negation: not, if/then/else, dependentSchemas ----------------------
 * not X is rewritten into keywords the generator has when X is a
 * conjunction of keywords each of which has a complement it can write: a
 * disjunct per keyword, restricted to the type the keyword applies to
 * (not {minimum: 3} = {type: number, exclusiveMaximum: 3}, or any non-number
 * through `not: {type: number}`; not {required: [a]} = an object without a;
 * not {properties: {a: S}} = an object whose a fails S; not of enum/const is
 * left as `not: {enum}` and filtered against the sibling enum or a finite
 * type). Anything else: NULL (the caller relaxes or refuses). */
static json_t *negate(schema_compiler *g, json_t *x, int depth);

/* Adds "not of type t" and "t with kw: val" as two disjuncts. */
static void neg_bound(json_t *dis, const char *type, const char *kw, json_t *val) {
    json_array_append_new(dis, json_pack("{s:{s:s}}", "not", "type", type));
    if (val) json_array_append_new(dis, json_pack("{s:s,s:O}", "type", type, kw, val));
}

static json_t *negate(schema_compiler *g, json_t *x, int depth) {
    if (depth > 8) return NULL;
    x = deref(g, x);
    if (json_is_true(x)) return json_false();
    if (json_is_false(x)) return json_true();
    if (!json_is_object(x)) return NULL;
    static const struct {
        const char *kw, *type, *flip; /* kw v -> type with flip (v -/+ 1 for counts) */
        int delta;
    } bounds[] = {
        {"minimum", "number", "exclusiveMaximum", 0},   {"exclusiveMinimum", "number", "maximum", 0},
        {"maximum", "number", "exclusiveMinimum", 0},   {"exclusiveMaximum", "number", "minimum", 0},
        {"minLength", "string", "maxLength", -1},       {"maxLength", "string", "minLength", 1},
        {"minItems", "array", "maxItems", -1},          {"maxItems", "array", "minItems", 1},
        {"minProperties", "object", "maxProperties", -1}, {"maxProperties", "object", "minProperties", 1},
    };
    json_t *dis = json_array();
    const char *k;
    json_t *v;
    bool ok = true;
    json_object_foreach(x, k, v) {
        if (!ok) break;
        if (is_annotation(k)) continue;
        size_t b = 0;
        while (b < ARRAY_LEN(bounds) && strcmp(bounds[b].kw, k)) b++;
        if (!strcmp(k, "not")) json_array_append(dis, v);
        else if (!strcmp(k, "type") || !strcmp(k, "enum")) json_array_append_new(dis, json_pack("{s:{s:O}}", "not", k, v));
        else if (!strcmp(k, "const")) json_array_append_new(dis, json_pack("{s:{s:[O]}}", "not", "enum", v));
        else if (!strcmp(k, "anyOf") && json_is_array(v)) {
            json_t *all = json_array();
            for (size_t i = 0; i < json_array_size(v) && ok; i++) {
                json_t *n = negate(g, json_array_get(v, i), depth + 1);
                if (n) json_array_append_new(all, n);
                else ok = false;
            }
            json_array_append_new(dis, json_pack("{s:o}", "allOf", all));
        } else if (!strcmp(k, "allOf") && json_is_array(v)) {
            for (size_t i = 0; i < json_array_size(v) && ok; i++) {
                json_t *n = negate(g, json_array_get(v, i), depth + 1);
                if (n) json_array_append_new(dis, n);
                else ok = false;
            }
        } else if (!strcmp(k, "required") && json_is_array(v)) {
            for (size_t i = 0; i < json_array_size(v) && ok; i++) {
                json_t *name = json_array_get(v, i);
                if (!json_is_string(name)) ok = false;
                else
                    json_array_append_new(dis, json_pack("{s:s,s:{s:b}}", "type", "object", "properties",
                                                         json_string_value(name), 0));
            }
            if (json_array_size(v)) json_array_append_new(dis, json_pack("{s:{s:s}}", "not", "type", "object"));
        } else if (!strcmp(k, "properties") && json_is_object(v)) {
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                json_t *n = negate(g, pv, depth + 1);
                if (!n) {
                    ok = false;
                    break;
                }
                if (json_is_false(n)) {
                    json_decref(n);
                    continue; /* {a: true}: nothing to fail */
                }
                json_array_append_new(dis, json_pack("{s:s,s:[s],s:{s:o}}", "type", "object", "required", pk,
                                                     "properties", pk, n));
            }
            if (json_object_size(v)) json_array_append_new(dis, json_pack("{s:{s:s}}", "not", "type", "object"));
        } else if (b < ARRAY_LEN(bounds) && json_is_number(v)) {
            json_t *val = json_incref(v);
            if (bounds[b].delta) {
                json_int_t n = json_is_integer(v) ? json_integer_value(v) : (json_int_t)json_number_value(v);
                json_decref(val);
                val = n + bounds[b].delta < 0 ? NULL : json_integer(n + bounds[b].delta);
            }
            neg_bound(dis, bounds[b].type, bounds[b].flip, val);
            json_decref(val);
        } else ok = false;
    }
    if (!ok) {
        json_decref(dis);
        return NULL;
    }
    if (json_array_size(dis) == 0) {
        json_decref(dis);
        return json_false(); /* x admits everything */
    }
    if (json_array_size(dis) == 1) {
        json_t *one = json_incref(json_array_get(dis, 0));
        json_decref(dis);
        return one;
    }
    return json_pack("{s:o}", "anyOf", dis);
}

/* Adds schema c (a new reference) to the conjunction m: into m's allOf. */
static void conjoin(json_t *m, json_t *c) {
    json_t *all = json_object_get(m, "allOf");
    if (!json_is_array(all)) {
        all = json_array();
        json_object_set_new(m, "allOf", all);
    }
    json_array_append_new(all, c);
}

/* x's pattern: ^(?!(?:v1|v2)$) for the strings of vals, every code point
 * of them escaped (ASCII punctuation as \uHHHH). */
static void not_strings_pattern(json_t *x, json_t *vals) {
    sbuf b = {0};
    sbuf_puts(&b, "^(?!(?:");
    int n = 0;
    for (size_t j = 0; j < json_array_size(vals); j++) {
        json_t *v = json_array_get(vals, j);
        if (!json_is_string(v)) continue;
        if (n++) sbuf_puts(&b, "|");
        const unsigned char *c = (const unsigned char *)json_string_value(v);
        size_t len = json_string_length(v);
        for (size_t i = 0; i < len;) {
            uint32_t cp;
            int k = utf8_decode(c + i, len - i, &cp);
            if (!k) break;
            if (cp < 0x80 && !isalnum((int)cp)) sbuf_printf(&b, "\\u%04x", (unsigned)cp);
            else sbuf_put(&b, (const char *)c + i, (size_t)k);
            i += (size_t)k;
        }
    }
    sbuf_puts(&b, ")$)");
    json_object_set_new(x, "pattern", json_string(b.p));
    sbuf_free(&b);
}

/* s's `not: {enum: nv}`: *m (created from s when NULL) gets, instead of
 * it, the enum of s's values (s's enum or const, or every value of a type
 * boolean / null) that are not in nv, or for strings a pattern that refuses
 * exactly those strings. */
static int not_values(schema_compiler *g, json_t *s, json_t *nv, const char *ptr, json_t **m) {
    json_t *vals = json_object_get(s, "enum");
    json_t *owned = NULL;
    if (!vals && json_object_get(s, "const")) vals = owned = json_pack("[O]", json_object_get(s, "const"));
    json_t *t = json_object_get(s, "type");
    int rc = 0;
    unsigned types = T_ALL;
    if (t) types = parse_types(g, t, ptr, &rc);
    if (rc) return rc;
    if (!vals && types && !(types & ~(unsigned)(T_BOOLEAN | T_NULL))) {
        vals = owned = json_array();
        if (types & T_BOOLEAN) json_array_append_new(vals, json_true()), json_array_append_new(vals, json_false());
        if (types & T_NULL) json_array_append_new(vals, json_null());
    }
    if (!*m) *m = json_copy(s);
    json_object_del(*m, "not");
    if (vals) {
        json_t *keep = json_array();
        for (size_t i = 0; i < json_array_size(vals); i++) {
            bool out = false;
            for (size_t j = 0; j < json_array_size(nv); j++) out |= same_value(json_array_get(vals, i), json_array_get(nv, j));
            if (!out) json_array_append(keep, json_array_get(vals, i));
        }
        json_object_del(*m, "const");
        json_object_set_new(*m, "enum", keep);
        json_decref(owned);
        return 0;
    }
    /* one branch per type: the listed values of that type left out */
    json_t *br = json_array();
    int rc2 = 0;
    if (types & T_NUMBER) types &= ~(unsigned)T_INTEGER;
    for (unsigned bit = 1; bit <= T_ARRAY && !rc2; bit <<= 1) {
        if (!(types & bit)) continue;
        const char *tn = type_names[__builtin_ctz(bit)];
        json_t *same = json_array();
        for (size_t j = 0; j < json_array_size(nv); j++)
            if (json_type_bits(json_array_get(nv, j)) & (bit == T_NUMBER ? T_NUMBER | T_INTEGER : bit))
                json_array_append(same, json_array_get(nv, j));
        if (!json_array_size(same)) json_array_append_new(br, json_pack("{s:s}", "type", tn));
        else if (bit == T_NULL) {
        } else if (bit == T_BOOLEAN) {
            json_t *keep = json_array();
            for (int tv = 0; tv < 2; tv++) {
                bool out = false;
                for (size_t j = 0; j < json_array_size(same); j++) out |= json_is_true(json_array_get(same, j)) == (tv == 1);
                if (!out) json_array_append_new(keep, json_boolean(tv));
            }
            if (json_array_size(keep)) json_array_append_new(br, json_pack("{s:s,s:O}", "type", tn, "enum", keep));
            json_decref(keep);
        } else if (bit == T_NUMBER || bit == T_INTEGER) {
            /* x != v: x < v or x > v, for each v */
            json_t *all = json_array();
            for (size_t j = 0; j < json_array_size(same); j++)
                json_array_append_new(all, json_pack("{s:[{s:O},{s:O}]}", "anyOf", "exclusiveMaximum",
                                                     json_array_get(same, j), "exclusiveMinimum", json_array_get(same, j)));
            json_array_append_new(br, json_pack("{s:s,s:o}", "type", tn, "allOf", all));
        } else if (bit == T_STRING && !json_object_get(s, "pattern")) {
            json_t *x = json_pack("{s:s}", "type", tn);
            not_strings_pattern(x, same);
            json_array_append_new(br, x);
        } else
            rc2 = unsup(g, ptr, "not", "%s/not: a 'not' of %s values is supported beside enum or const only (or for "
                        "strings without pattern)", ptr, tn);
        json_decref(same);
    }
    if (rc2) {
        json_decref(br);
        return rc2;
    }
    if (!json_array_size(br)) {
        json_decref(br);
        return unsat(g, "%s/not excludes every value", ptr);
    }
    conjoin(*m, json_pack("{s:o}", "anyOf", br));
    return 0;
}

/* Rewrites if/then/else, dependentSchemas (and dependencies), not (other
 * than of types and of enum/const, which the generator reads itself) into
 * allOf/anyOf: *out the equivalent schema (owned by g), or NULL. */
static int rewrite_logic(schema_compiler *g, json_t *s, const char *ptr, bool with_not, json_t **out) {
    *out = NULL;
    json_t *ifs = json_object_get(s, "if"), *then = json_object_get(s, "then"), *els = json_object_get(s, "else");
    json_t *ds = json_object_get(s, "dependentSchemas"), *dep = json_object_get(s, "dependencies");
    json_t *not = with_not ? json_object_get(s, "not") : NULL;
    json_t *m = NULL;
    if (ifs && (then || els)) {
        json_t *ni = negate(g, ifs, 0);
        if (!ni) return unsup(g, ptr, "if", "%s: if/then/else is supported where 'if' has a complement (if/then/else is "
                              "not supported here)", ptr_show(ptr));
        /* (if & then) | (not if & else) */
        json_t *a = json_pack("{s:[O,O]}", "allOf", ifs, then ? then : json_true());
        json_t *b = json_pack("{s:[o,O]}", "allOf", ni, els ? els : json_true());
        static const char *const drop[] = {"if", "then", "else"};
        m = without(s, drop, 3);
        conjoin(m, json_pack("{s:[o,o]}", "anyOf", a, b));
    } else if (ifs || then || els) {
        static const char *const drop[] = {"if", "then", "else"}; /* alone: no effect */
        m = without(s, drop, 3);
    }
    if (json_is_object(dep) && json_object_size(dep)) {
        if (!m) m = json_copy(s);
        json_t *dr = json_object(), *dsn = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(dep, k, v) json_object_set(json_is_array(v) ? dr : dsn, k, v);
        json_object_del(m, "dependencies");
        if (json_object_size(dr)) conjoin(m, json_pack("{s:o}", "dependentRequired", dr));
        else json_decref(dr);
        if (json_object_size(dsn)) conjoin(m, json_pack("{s:o}", "dependentSchemas", dsn));
        else json_decref(dsn);
    }
    json_t *dr = m ? json_object_get(m, "dependentRequired") : json_object_get(s, "dependentRequired");
    json_t *req = json_object_get(s, "required");
    if (json_is_object(dr) && json_object_size(dr)) {
        /* a trigger that is not required: p absent, or p and its
         * dependents present (a required trigger is read directly) */
        json_t *keep = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(dr, k, v) {
            bool required = false;
            for (size_t i = 0; i < json_array_size(req); i++)
                required |= json_is_string(json_array_get(req, i)) && !strcmp(json_string_value(json_array_get(req, i)), k);
            if (required || !json_is_array(v)) {
                json_object_set(keep, k, v);
                continue;
            }
            if (!m) m = json_copy(s);
            json_t *need = json_pack("[s]", k);
            json_array_extend(need, v);
            conjoin(m, json_pack("{s:[{s:{s:b}},{s:o}]}", "anyOf", "properties", k, 0, "required", need));
        }
        if (m && json_object_size(keep) != json_object_size(dr)) {
            if (json_object_size(keep)) json_object_set(m, "dependentRequired", keep);
            else json_object_del(m, "dependentRequired");
        }
        json_decref(keep);
    }
    if (json_is_object(ds) && json_object_size(ds)) {
        if (!m) m = json_copy(s);
        json_object_del(m, "dependentSchemas");
        const char *k;
        json_t *v;
        /* p absent, or p present and the schema holds */
        json_object_foreach(ds, k, v) conjoin(m, json_pack("{s:[{s:{s:b}},{s:[s],s:[O]}]}", "anyOf", "properties", k, 0,
                                                           "required", k, "allOf", v));
    }
    json_t *nv = json_is_object(not) ? json_object_get(not, "enum") : NULL;
    if (!nv && json_is_object(not) && json_object_get(not, "const")) nv = json_pack("[O]", json_object_get(not, "const"));
    else json_incref(nv);
    if (nv && json_is_array(nv) && json_object_size(not) == 1) {
        /* not of values: filtered out of a finite set of values, or
         * refused to strings by a negative lookahead */
        int rc = not_values(g, m ? m : s, nv, ptr, &m);
        json_decref(nv);
        if (rc) {
            json_decref(m);
            return rc;
        }
        not = NULL;
    } else json_decref(nv);
    if (not && !is_never(s)) {
        bool simple = json_is_object(not) && json_object_size(not) > 0;
        const char *k;
        json_t *v;
        json_object_foreach(not, k, v) if (strcmp(k, "type") && strcmp(k, "enum") && strcmp(k, "const") &&
                                           !is_annotation(k)) simple = false;
        if (!simple && !json_is_true(not) && !(json_is_object(not) && json_object_size(not) == 0)) {
            json_t *nn = negate(g, not, 0);
            if (!nn) {
                json_decref(m);
                return unsup(g, ptr, "not", "%s/not: this 'not' has no complement the grammar can write", ptr);
            }
            if (!m) m = json_copy(s);
            json_object_del(m, "not");
            conjoin(m, nn);
        }
    }
    if (m) {
        json_array_append_new(g->owned, m);
        *out = m;
    }
    return 0;
}

/* Rewrites s when allOf, a $ref beside other keywords, or anyOf/oneOf beside
 * other keywords need merging: *out is the equivalent schema (owned by g),
 * or NULL when s is fine as it is. */
static int normalize(schema_compiler *g, json_t *s, const char *ptr, json_t **out) {
    *out = NULL;
    int n_kw = 0;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (!is_annotation(k)) n_kw++;
    json_t *allof = json_object_get(s, "allOf"), *ref = json_object_get(s, "$ref");
    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (!ref) ref = json_object_get(s, "$recursiveRef");
    if (!ref) ref = json_object_get(s, "$dynamicRef");
    int rc = 0;
    if (allof) {
        if (!json_is_array(allof) || json_array_size(allof) == 0)
            return invalid_kw(g, ptr, "allOf", "must be a non-empty array");
        static const char *const drop[] = {"allOf"};
        json_t *m = without(s, drop, 1);
        for (size_t i = 0; i < json_array_size(allof) && !rc; i++) {
            /* an element's if/then/else becomes an allOf of its own first
             * (two of them would clash as keywords) */
            json_t *x = deref(g, json_array_get(allof, i)), *rx = NULL;
            if (json_is_object(x)) rc = rewrite_logic(g, x, ptr, false, &rx);
            if (!rc) rc = merge_into(g, m, rx ? rx : x, ptr);
        }
        if (rc) {
            json_decref(m);
            return rc;
        }
        json_array_append_new(g->owned, m);
        *out = m;
        return 0;
    }
    if (ref && n_kw > 1) {
        json_t *t = json_is_string(ref) ? resolve_ref(g->root, json_string_value(ref)) : NULL;
        if (!t) return 0; /* reported by gen_ref */
        static const char *const drop[] = {"$ref", "$recursiveRef", "$dynamicRef"};
        json_t *m = without(s, drop, 3);
        rc = merge_into(g, m, t, ptr);
        if (rc) {
            json_decref(m);
            return rc;
        }
        json_array_append_new(g->owned, m);
        *out = m;
        return 0;
    }
    if (any && one) return unsup(g, ptr, "oneOf", "%s: anyOf together with oneOf is not supported", ptr_show(ptr));
    json_t *alts = any ? any : one;
    if (alts && n_kw > 1) {
        const char *kw = any ? "anyOf" : "oneOf";
        if (!json_is_array(alts) || json_array_size(alts) == 0)
            return invalid_kw(g, ptr, kw, "must be a non-empty array of schemas");
        static const char *const drop[] = {"anyOf", "oneOf"};
        json_t *base = without(s, drop, 2);
        json_t *branches = json_array();
        for (size_t i = 0; i < json_array_size(alts) && !rc; i++) {
            json_t *x = json_array_get(alts, i);
            if (json_is_false(x)) continue;
            json_t *m = json_copy(base);
            g->unsat = false;
            rc = merge_into(g, m, x, ptr);
            if (rc == ERR_INVALID && g->unsat) { /* no value in this branch */
                rc = 0;
                json_decref(m);
                continue;
            }
            json_array_append_new(branches, m);
        }
        json_decref(base);
        if (!rc && !json_array_size(branches)) rc = unsat(g, "%s/%s: no branch admits a value", ptr, kw);
        if (rc) {
            json_decref(branches);
            return rc;
        }
        json_t *m = json_object();
        json_object_set_new(m, kw, branches);
        json_array_append_new(g->owned, m);
        *out = m;
    }
    return 0;
}

/* ---- a schema ------------------------------------------------------------ */

/* Phase 1, check: s → 0 when it is a schema object within the limits, with known keywords; else the error. */
static int schema_check(schema_compiler *g, json_t *s, const char *ptr, sbuf *out) {
    if (is_never(s))
        return err_set(g->e, ERR_UNSUPPORTED, "%s: the schema false admits no value", ptr_show(ptr));
    if (!json_is_object(s)) return err_set(g->e, ERR_INVALID, "%s must be a schema (an object or a boolean)", ptr_show(ptr));
    if (g->depth >= SCHEMA_MAX_DEPTH)
        return err_set(g->e, ERR_RANGE, "schema nests deeper than %d at %s", SCHEMA_MAX_DEPTH, ptr_show(ptr));
    if (TOO_BIG(g) || out->n > GRAMMAR_MAX_SRC_BYTES)
        return err_set(g->e, ERR_RANGE, "schema grammar exceeds %u bytes", GRAMMAR_MAX_SRC_BYTES);

    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (is_annotation(k)) continue;
        if (!in_list(k, kw_supported, ARRAY_LEN(kw_supported))) return unsupported_kw(g, k, ptr);
    }
    /* keywords enforced nowhere else: refuse (or relax) them up front */
    json_t *ux = json_object_get(s, "uniqueItems");
    if (ux && !json_is_boolean(ux)) return invalid_kw(g, ptr, "uniqueItems", "must be a boolean");
    static const char *const objects_of_schemas[] = {"dependentSchemas", "dependencies"};
    for (size_t i = 0; i < ARRAY_LEN(objects_of_schemas); i++) {
        json_t *x = json_object_get(s, objects_of_schemas[i]);
        if (x && !json_is_object(x)) return invalid_kw(g, ptr, objects_of_schemas[i], "must be an object");
    }
    return 0;
}

/* Phase 2, rewrite: s → *norm, the equivalent schema without logic keywords or merges (owned by g), or NULL if none. */
static int schema_rewrite(schema_compiler *g, json_t *s, const char *ptr, json_t **norm) {
    const char *k;
    json_t *v;
    /* allOf and $ref merges first, so that rewritten `not`s meet the
     * enums beside them */
    bool merges = json_object_get(s, "allOf") != NULL;
    if (!merges && (json_object_get(s, "$ref") || json_object_get(s, "$recursiveRef") || json_object_get(s, "$dynamicRef")))
        json_object_foreach(s, k, v) merges |= !is_annotation(k) && strcmp(k, "$ref") && strcmp(k, "$recursiveRef") &&
                                               strcmp(k, "$dynamicRef");
    int rc = rewrite_logic(g, s, ptr, !merges, norm);
    if (rc || *norm) return rc;
    return normalize(g, s, ptr, norm);
}

/* Phase 4a, types: s's type, nullable and a `not` of types → *types (T_ALL without type); 0 or the error. */
static int schema_types(schema_compiler *g, json_t *s, const char *ptr, unsigned *types) {
    int rc = 0;
    const char *k;
    json_t *v;
    json_t *t = json_object_get(s, "type");
    *types = T_ALL;
    if (t) *types = parse_types(g, t, ptr, &rc);
    if (!rc && t && json_is_true(json_object_get(s, "nullable"))) *types |= T_NULL; /* OpenAPI 3.0 */
    json_t *not = json_object_get(s, "not");
    if (!rc && not) {
        /* simple not: of types only */
        json_t *nt = json_is_object(not) ? json_object_get(not, "type") : NULL;
        bool only_type = nt != NULL;
        json_object_foreach(not, k, v) if (strcmp(k, "type") && !is_annotation(k)) only_type = false;
        if (!only_type) rc = unsup(g, ptr, "not", "%s/not: only a 'not' of types is supported", ptr);
        else {
            unsigned nb = parse_types(g, nt, ptr, &rc);
            if (nb & T_NUMBER) nb |= T_INTEGER;
            if (nb & T_INTEGER && !(nb & T_NUMBER) && (*types & T_NUMBER))
                rc = unsup(g, ptr, "not", "%s/not: a 'not' of integer beside number is not supported", ptr);
            *types &= ~nb;
            if (!rc && !*types) rc = unsat(g, "%s/not excludes every type", ptr);
        }
    }
    return rc;
}

/* Phase 4b, values: s's enum / const (only type, not, nullable beside) of the given types → the alternatives on out. */
static int gen_values(schema_compiler *g, json_t *s, const char *ptr, unsigned types, sbuf *out) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (!is_annotation(k) && strcmp(k, "enum") && strcmp(k, "const") &&
                                     strcmp(k, "type") && strcmp(k, "not") && strcmp(k, "nullable"))
        return unsup(g, ptr, k, "%s: '%s' beside enum/const is not supported (only type)", ptr_show(ptr), k);
    return gen_enum(g, s, ptr, types, out);
}

/* Phase 4c, inferred types: s without type → *types narrowed to the types whose keywords appear (none: unchanged). */
static int schema_infer_types(schema_compiler *g, json_t *s, const char *ptr, unsigned *types) {
    static const struct {
        const char *kw;
        unsigned bits;
    } infer[] = {
        {"properties", T_OBJECT},     {"required", T_OBJECT},   {"additionalProperties", T_OBJECT},
        {"propertyNames", T_OBJECT},  {"patternProperties", T_OBJECT}, {"minProperties", T_OBJECT},
        {"maxProperties", T_OBJECT},  {"dependentRequired", T_OBJECT},
        {"items", T_ARRAY},           {"prefixItems", T_ARRAY}, {"minItems", T_ARRAY},
        {"maxItems", T_ARRAY},        {"additionalItems", T_ARRAY}, {"contains", T_ARRAY},
        {"minLength", T_STRING},      {"maxLength", T_STRING},
        {"pattern", T_STRING},        {"format", T_STRING},     {"minimum", T_NUMBER},
        {"maximum", T_NUMBER},        {"exclusiveMinimum", T_NUMBER}, {"exclusiveMaximum", T_NUMBER},
        {"multipleOf", T_NUMBER},
    };
    unsigned inf = 0;
    for (size_t i = 0; i < ARRAY_LEN(infer); i++)
        if (json_object_get(s, infer[i].kw)) inf |= infer[i].bits;
    if (inf) *types = (*types & ~(unsigned)T_ALL) | (inf & *types);
    if (!*types) return unsat(g, "%s/not excludes every type", ptr);
    return 0;
}

/* Phase 4d, per type: s and its types → any value, or `( a | b )` with one generator's expression per type, on out. */
static int gen_types(schema_compiler *g, json_t *s, const char *ptr, unsigned types, sbuf *out) {
    if (types == T_ALL) {
        prim(g, P_VALUE, out);
        return 0;
    }
    if (types & T_NUMBER) types &= ~(unsigned)T_INTEGER;
    int n = 0, rc = 0;
    sbuf_puts(out, "( ");
    for (unsigned bit = 1; bit <= T_ARRAY && !rc; bit <<= 1) {
        if (!(types & bit)) continue;
        if (n++) sbuf_puts(out, " | ");
        switch (bit) {
        case T_STRING: rc = gen_string(g, s, ptr, out); break;
        case T_NUMBER: rc = gen_number(g, s, ptr, out); break;
        case T_INTEGER: rc = gen_integer(g, s, ptr, out); break;
        case T_BOOLEAN: sbuf_puts(out, "\"true\" | \"false\""); break;
        case T_NULL: sbuf_puts(out, "\"null\""); break;
        case T_OBJECT:
            g->n_cont++;
            rc = gen_object(g, s, ptr, out);
            g->n_cont--;
            break;
        case T_ARRAY:
            g->n_cont++;
            rc = gen_array(g, s, ptr, out);
            g->n_cont--;
            break;
        }
    }
    sbuf_puts(out, " )");
    return rc;
}

/* Phase 3, dispatch: a checked, rewritten s → its expression on out ($ref, anyOf/oneOf, else phase 4 on its types). */
static int gen_dispatch(schema_compiler *g, json_t *s, const char *ptr, sbuf *out) {
    json_t *refv = json_object_get(s, "$ref");
    const char *ref_kw = "$ref";
    if (!refv && (refv = json_object_get(s, "$recursiveRef"))) ref_kw = "$recursiveRef";
    if (!refv && (refv = json_object_get(s, "$dynamicRef"))) ref_kw = "$dynamicRef";
    if (refv) return gen_ref(g, refv, ptr, ref_kw, out);
    if (json_object_get(s, "anyOf")) return gen_alternatives(g, json_object_get(s, "anyOf"), ptr, "anyOf", out);
    if (json_object_get(s, "oneOf")) return gen_alternatives(g, json_object_get(s, "oneOf"), ptr, "oneOf", out);
    unsigned types;
    int rc = schema_types(g, s, ptr, &types);
    if (rc) return rc;
    if (json_object_get(s, "enum") || json_object_get(s, "const")) return gen_values(g, s, ptr, types, out);
    if (!json_object_get(s, "type") && (rc = schema_infer_types(g, s, ptr, &types))) return rc;
    return gen_types(g, s, ptr, types, out);
}

/* One subschema, nothing relaxed: the phases of the opening comment in order; a rewritten schema starts again. */
static int gen_schema_once(schema_compiler *g, json_t *s, const char *ptr, sbuf *out) {
    if (json_is_true(s)) {
        prim(g, P_VALUE, out);
        return 0;
    }
    json_t *norm = NULL;
    int rc = schema_check(g, s, ptr, out);
    if (!rc) rc = schema_rewrite(g, s, ptr, &norm);
    if (rc) return rc;
    if (norm) return gen_schema(g, norm, ptr, out);
    g->depth++;
    rc = gen_dispatch(g, s, ptr, out);
    g->depth--;
    if (!rc && (TOO_BIG(g) || out->n > GRAMMAR_MAX_SRC_BYTES))
        rc = err_set(g->e, ERR_RANGE, "schema grammar exceeds %u bytes", GRAMMAR_MAX_SRC_BYTES);
    return rc;
}

/* gen_schema_once, and when it fails on one keyword of this schema that
 * cannot be enforced (and the compile is not strict): the same schema
 * without that keyword, recorded as relaxed. */
static int gen_schema(schema_compiler *g, json_t *s, const char *ptr, sbuf *out) {
    size_t mark = out->n;
    for (int tries = 0;; tries++) {
        free(g->fail_kw);
        free(g->fail_ptr);
        g->fail_kw = g->fail_ptr = NULL;
        int rc = gen_schema_once(g, s, ptr, out);
        if (rc != ERR_UNSUPPORTED || g->strict || !g->fail_kw || strcmp(g->fail_ptr, ptr) || !json_is_object(s) ||
            !json_object_get(s, g->fail_kw) || tries >= 64)
            return rc;
        const char *drop[] = {g->fail_kw, NULL, NULL};
        size_t nd = 1;
        if (!strcmp(g->fail_kw, "if")) drop[1] = "then", drop[2] = "else", nd = 3;
        json_t *c = without(s, drop, nd);
        json_array_append_new(g->owned, c);
        relax(g, g->fail_kw, ptr);
        s = c;
        out->n = mark;
        if (out->p) out->p[mark] = 0;
    }
}

/* ---- entry points -------------------------------------------------------- */

static int check_name(const char *name, err_t *e) {
    if (!name || !*name || strlen(name) > 64) return err_set(e, ERR_INVALID, "grammar rule name must be 1-64 characters");
    for (const char *c = name; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
            return err_set(e, ERR_INVALID, "grammar rule name '%s' must be [A-Za-z0-9_-]+", name);
    return 0;
}

static void gen_free(schema_compiler *g) {
    sbuf_free(&g->rules);
    sbuf_free(&g->relaxed);
    for (int i = 0; i < g->n_refs; i++) {
        free(g->refs[i].ptr);
        free(g->refs[i].rule);
    }
    free(g->refs);
    free(g->fail_kw);
    free(g->fail_ptr);
    json_decref(g->owned);
}

static int finish(schema_compiler *g, const char *top, char **buf, size_t *len, err_t *e) {
    size_t old = *buf ? *len : 0;
    size_t add = strlen(g->prefix) + 5 + strlen(top) + 1 + g->rules.n;
    if (old + add > GRAMMAR_MAX_SRC_BYTES)
        return err_set(e, ERR_RANGE, "schema grammar exceeds %u bytes", GRAMMAR_MAX_SRC_BYTES);
    sbuf b = {.p = *buf, .n = old, .cap = *buf ? old + 1 : 0};
    sbuf_printf(&b, "%s ::= %s\n", g->prefix, top);
    if (g->rules.n) sbuf_put(&b, g->rules.p, g->rules.n);
    *buf = b.p;
    *len = b.n;
    return 0;
}

int schema_compile(json_t *schema, const char *name, bool strict, char **relaxed, char **buf, size_t *len,
                   err_t *e) {
    if (relaxed) *relaxed = NULL;
    int rc = check_name(name, e);
    if (rc) return rc;
    if (!schema) return err_set(e, ERR_INVALID, "no schema");
    schema_compiler g = {.prefix = name, .root = schema, .e = e, .strict = strict, .owned = json_array()};
    sbuf top = {0};
    rc = gen_schema(&g, schema, "", &top);
    if (!rc) rc = finish(&g, top.p, buf, len, e);
    if (!rc && g.n_relaxed && relaxed) {
        if (g.n_relaxed > 64) sbuf_printf(&g.relaxed, " and %d more", g.n_relaxed - 64);
        *relaxed = g.relaxed.p;
        g.relaxed.p = NULL;
    }
    sbuf_free(&top);
    gen_free(&g);
    return rc;
}

int schema_to_gbnf(json_t *schema, const char *name, char **buf, size_t *len, err_t *e) {
    return schema_compile(schema, name, true, NULL, buf, len, e);
}

int schema_any_object_gbnf(const char *name, char **buf, size_t *len, err_t *e) {
    int rc = check_name(name, e);
    if (rc) return rc;
    schema_compiler g = {.prefix = name, .e = e, .strict = true, .owned = json_array()};
    sbuf top = {0};
    prim(&g, P_OBJECT, &top);
    rc = finish(&g, top.p, buf, len, e);
    sbuf_free(&top);
    gen_free(&g);
    return rc;
}
