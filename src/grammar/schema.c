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

#define SCHEMA_MAX_DEPTH 64       /* nested schemas, and nesting inside enum values */
#define SCHEMA_MAX_ENUM 4096      /* values of one enum                             */
#define SCHEMA_MAX_PATTERN 4096   /* bytes of one pattern                           */
#define SCHEMA_MAX_NAME 1024     /* bytes of one property name                     */
#define SCHEMA_INT_DIGITS 15      /* integer part of an unbounded number            */
#define SCHEMA_FRAC_DIGITS 15     /* fraction digits                                */
#define SCHEMA_EXP_DIGITS 3       /* exponent digits                                */
#define SCHEMA_INT_DEFAULT 999999999999999LL /* 10^15 - 1: default integer bound   */

/* ---- a growable string -------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        b->p = xrealloc(b->p, c);
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    char *big = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}
static void sb_free(sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- UTF-8 -------------------------------------------------------------- */

/* Decodes one code point of s[0..n); returns its length, or 0 when invalid. */
static int utf8_dec(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0) len = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

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
    P_DATE = 1 << 9,
    P_TIME = 1 << 10,
    P_DATETIME = 1 << 11,
    P_UUID = 1 << 12,
};

typedef struct {
    char *ptr;  /* "#/$defs/x" as written in the schema                  */
    char *rule; /* its rule name                                          */
    bool done;  /* false while its body is being generated                */
    int n_cont; /* containers entered when its generation started       */
} refent;

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
} gen;

#define TOO_BIG(g) ((g)->rules.n > GRAMMAR_MAX_SRC_BYTES)

static int gen_schema(gen *g, json_t *s, const char *ptr, sbuf *out);

/* A JSON pointer one level down: ptr + "/" + key with ~ and / escaped. */
static char *ptr_join(const char *ptr, const char *key) {
    sbuf b = {0};
    sb_puts(&b, ptr);
    sb_puts(&b, "/");
    for (const char *k = key; *k; k++) {
        if (*k == '~') sb_puts(&b, "~0");
        else if (*k == '/') sb_puts(&b, "~1");
        else sb_put(&b, k, 1);
    }
    return b.p;
}
static char *ptr_index(const char *ptr, const char *key, size_t i) {
    char *p = ptr_join(ptr, key);
    sbuf b = {.p = p, .n = strlen(p), .cap = strlen(p) + 1};
    sb_printf(&b, "/%zu", i);
    return b.p;
}
static const char *ptr_show(const char *ptr) { return *ptr ? ptr : "/"; }

/* A fresh rule name: prefix-hint-N, hint reduced to [A-Za-z0-9_] (at most 24). */
static char *rule_name(gen *g, const char *hint) {
    sbuf b = {0};
    sb_puts(&b, g->prefix);
    sb_puts(&b, "-");
    int k = 0;
    for (const char *h = hint; *h && k < 24; h++) {
        unsigned char c = (unsigned char)*h;
        if (isalnum(c) || c == '_') {
            sb_put(&b, (const char *)&c, 1);
            k++;
        }
    }
    if (!k) sb_puts(&b, "r");
    sb_printf(&b, "-%d", ++g->counter);
    return b.p;
}

/* Appends "name ::= body\n" to the helper rules. */
static int add_rule(gen *g, const char *name, const char *body) {
    if (++g->n_rules > GRAMMAR_MAX_RULES - 16)
        return err_set(g->e, ERR_RANGE, "schema needs more than %d grammar rules", GRAMMAR_MAX_RULES - 16);
    sb_puts(&g->rules, name);
    sb_puts(&g->rules, " ::= ");
    sb_puts(&g->rules, body);
    sb_puts(&g->rules, "\n");
    if (TOO_BIG(g)) return err_set(g->e, ERR_RANGE, "schema grammar exceeds %u bytes", GRAMMAR_MAX_SRC_BYTES);
    return 0;
}

/* Name of a primitive rule (emitting it on first use). */
static void prim(gen *g, unsigned which, sbuf *out);

static void prim(gen *g, unsigned which, sbuf *out) {
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
        {P_DATE, "date",
         "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"},
        {P_TIME, "time",
         "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? ( \"Z\" | [-+] "
         "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
        {P_DATETIME, "date-time", "@-date \"T\" @-time"},
        {P_UUID, "uuid",
         "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}"},
    };
    static const unsigned deps[][2] = {
        {P_VALUE, P_OBJECT | P_ARRAY | P_STRING | P_NUMBER},
        {P_OBJECT, P_STRING | P_VALUE},
        {P_ARRAY, P_VALUE},
        {P_STRING, P_CHAR},
        {P_DATETIME, P_DATE | P_TIME},
    };
    for (size_t i = 0; i < ARRAY_LEN(defs); i++) {
        if (defs[i].bit != which) continue;
        if (out) sb_printf(out, "%s-%s", g->prefix, defs[i].suffix);
        if (g->prims & which) return;
        g->prims |= which;
        g->n_rules++;
        sb_printf(&g->rules, "%s-%s ::= ", g->prefix, defs[i].suffix);
        for (const char *c = defs[i].body; *c; c++) {
            if (*c == '@') sb_puts(&g->rules, g->prefix);
            else sb_put(&g->rules, c, 1);
        }
        sb_puts(&g->rules, "\n");
        for (size_t d = 0; d < ARRAY_LEN(deps); d++)
            if (deps[d][0] == which)
                for (unsigned bit = 1; bit <= P_UUID; bit <<= 1)
                    if (deps[d][1] & bit) prim(g, bit, NULL);
        return;
    }
    PANIC("unknown primitive %u", which);
}

/* ---- canonical JSON text and GBNF literals ------------------------------ */

/* Writes code point cp into a GBNF literal or class (ASCII-only text). */
static void gbnf_cp(sbuf *b, uint32_t cp, bool in_class) {
    if (cp == '"' && !in_class) sb_puts(b, "\\\"");
    else if (cp == '\\') sb_puts(b, "\\\\");
    else if (in_class && (cp == ']' || cp == '[' || cp == '^' || cp == '-')) sb_printf(b, "\\x%02x", cp);
    else if (cp >= 0x20 && cp < 0x7f) {
        char c = (char)cp;
        sb_put(b, &c, 1);
    } else if (cp < 0x80) sb_printf(b, "\\x%02x", cp);
    else if (cp <= 0xFFFF) sb_printf(b, "\\u%04x", cp);
    else sb_printf(b, "\\U%08x", cp);
}

/* Appends the canonical JSON encoding of the UTF-8 string s (n bytes) as
 * raw text: " \ and controls escaped (\n style where JSON has one, else
 * \u00xx lowercase), everything else as is. Returns false on bad UTF-8. */
static bool json_str_canon(sbuf *b, const char *s, size_t n) {
    sb_puts(b, "\"");
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = utf8_dec((const unsigned char *)s + i, n - i, &cp);
        if (!k) return false;
        switch (cp) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        default:
            if (cp < 0x20) sb_printf(b, "\\u%04x", cp);
            else sb_put(b, s + i, (size_t)k);
        }
        i += (size_t)k;
    }
    sb_puts(b, "\"");
    return true;
}

/* Shortest %g form that reads back as the same double. */
static void real_canon(sbuf *b, double x) {
    char tmp[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*g", p, x);
        if (strtod(tmp, NULL) == x) break;
    }
    sb_puts(b, tmp);
}

/* Canonical JSON text of v. Returns false for values that have no JSON text
 * (non-finite reals, bad UTF-8) or nest deeper than SCHEMA_MAX_DEPTH. */
static bool json_canon(sbuf *b, json_t *v, int depth) {
    if (depth > SCHEMA_MAX_DEPTH) return false;
    switch (json_typeof(v)) {
    case JSON_NULL: sb_puts(b, "null"); return true;
    case JSON_TRUE: sb_puts(b, "true"); return true;
    case JSON_FALSE: sb_puts(b, "false"); return true;
    case JSON_INTEGER: sb_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); return true;
    case JSON_REAL:
        if (!isfinite(json_real_value(v))) return false;
        real_canon(b, json_real_value(v));
        return true;
    case JSON_STRING: return json_str_canon(b, json_string_value(v), json_string_length(v));
    case JSON_ARRAY: {
        sb_puts(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_puts(b, ", ");
            if (!json_canon(b, json_array_get(v, i), depth + 1)) return false;
        }
        sb_puts(b, "]");
        return true;
    }
    case JSON_OBJECT: {
        sb_puts(b, "{");
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach(v, k, x) {
            if (!first) sb_puts(b, ", ");
            first = false;
            if (!json_str_canon(b, k, strlen(k))) return false;
            sb_puts(b, ": ");
            if (!json_canon(b, x, depth + 1)) return false;
        }
        sb_puts(b, "}");
        return true;
    }
    }
    return false;
}

/* Appends raw text (UTF-8) as one GBNF string literal. */
static void gbnf_lit(sbuf *b, const char *s, size_t n) {
    sb_puts(b, "\"");
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = utf8_dec((const unsigned char *)s + i, n - i, &cp);
        if (!k) k = 1, cp = (unsigned char)s[i]; /* callers pass valid UTF-8 */
        gbnf_cp(b, cp, false);
        i += (size_t)k;
    }
    sb_puts(b, "\"");
}

/* ---- keywords ----------------------------------------------------------- */

static const char *const kw_annotation[] = {
    "title",      "description", "default",  "examples",  "$schema", "$id", "$comment",
    "deprecated", "readOnly",    "writeOnly", "$defs",    "definitions", "strict",
};
static const char *const kw_supported[] = {
    "type",         "enum",      "const",     "properties", "required",  "additionalProperties",
    "items",        "prefixItems", "minItems", "maxItems",  "minLength", "maxLength",
    "pattern",      "format",    "minimum",   "maximum",    "exclusiveMinimum", "exclusiveMaximum",
    "anyOf",        "oneOf",     "allOf",     "$ref",
};

static bool in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}
static bool is_annotation(const char *k) { return in_list(k, kw_annotation, ARRAY_LEN(kw_annotation)); }

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

static int unsupported_kw(gen *g, const char *kw, const char *ptr) {
    return err_set(g->e, ERR_UNSUPPORTED, "unsupported JSON Schema keyword '%s' at %s", kw, ptr_show(ptr));
}
static int invalid_kw(gen *g, const char *ptr, const char *kw, const char *what) {
    return err_set(g->e, ERR_INVALID, "%s/%s %s", ptr, kw, what);
}

/* A non-negative integer keyword (absent: def). Bounded by GRAMMAR_MAX_REPEAT. */
static int get_count(gen *g, json_t *s, const char *ptr, const char *kw, long long def, long long *out) {
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
        return err_set(g->e, ERR_UNSUPPORTED, "%s/%s: %lld is above the supported %d", ptr, kw, x,
                       GRAMMAR_MAX_REPEAT);
    *out = x;
    return 0;
}

/* ---- integers: exact digit grammars for a range -------------------------- */

/* Same-length decimal strings x <= y (n digits): a sequence matching exactly
 * the numbers between them. */
static void digits_range(sbuf *b, const char *x, const char *y, int n) {
    if (n == 0) return;
    if (x[0] == y[0]) {
        sb_put(b, "\"", 1);
        sb_put(b, x, 1);
        sb_put(b, "\"", 1);
        if (n > 1) {
            sb_puts(b, " ");
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
    sb_puts(b, "( ");
    if (!xlow) {
        sb_printf(b, "\"%c\" ", x[0]);
        digits_range(b, x + 1, nines, n - 1);
        lo++;
        first = false;
    }
    if (lo <= hi) {
        if (!yhigh && hi == y[0]) hi--;
        if (lo <= hi) {
            if (!first) sb_puts(b, " | ");
            if (lo == hi) sb_printf(b, "\"%c\"", lo);
            else sb_printf(b, "[%c-%c]", lo, hi);
            if (n > 1) sb_printf(b, " [0-9]{%d}", n - 1);
            first = false;
        }
    }
    if (!yhigh) {
        if (!first) sb_puts(b, " | ");
        sb_printf(b, "\"%c\" ", y[0]);
        digits_range(b, zeros, y + 1, n - 1);
    }
    sb_puts(b, " )");
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
        if (!*first) sb_puts(b, " | ");
        *first = false;
        digits_range(b, xs, ys, len);
    }
}

/* The integers lo..hi in canonical form ("0", no "-0", no leading zeros). */
static void int_range(sbuf *b, int64_t lo, int64_t hi) {
    bool first = true;
    sb_puts(b, "( ");
    if (lo < 0) {
        uint64_t mlo = hi < 0 ? (uint64_t)(-(hi + 1)) + 1 : 1; /* smallest magnitude */
        uint64_t mhi = (uint64_t)(-(lo + 1)) + 1;
        sb_puts(b, "\"-\" ( ");
        bool f2 = true;
        nonneg_range(b, mlo, mhi, &f2);
        sb_puts(b, " )");
        first = false;
    }
    if (hi >= 0) nonneg_range(b, lo < 0 ? 0 : (uint64_t)lo, (uint64_t)hi, &first);
    sb_puts(b, " )");
}

/* One bound: *have set when present; integer bounds rounded inward. */
static int int_bound(gen *g, json_t *s, const char *ptr, const char *kw, bool lower, bool excl, bool *have,
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

static int gen_integer(gen *g, json_t *s, const char *ptr, sbuf *out) {
    bool have_lo = false, have_hi = false;
    int64_t lo = 0, hi = 0;
    json_t *xmin = json_object_get(s, "exclusiveMinimum"), *xmax = json_object_get(s, "exclusiveMaximum");
    int rc;
    if ((rc = int_bound(g, s, ptr, "minimum", true, json_is_true(xmin), &have_lo, &lo))) return rc;
    if ((rc = int_bound(g, s, ptr, "maximum", false, json_is_true(xmax), &have_hi, &hi))) return rc;
    if ((rc = int_bound(g, s, ptr, "exclusiveMinimum", true, true, &have_lo, &lo))) return rc;
    if ((rc = int_bound(g, s, ptr, "exclusiveMaximum", false, true, &have_hi, &hi))) return rc;
    if (!have_lo && !have_hi) {
        prim(g, P_INTEGER, out);
        return 0;
    }
    if (!have_hi) hi = lo <= SCHEMA_INT_DEFAULT ? SCHEMA_INT_DEFAULT : INT64_MAX;
    if (!have_lo) lo = hi >= -SCHEMA_INT_DEFAULT ? -SCHEMA_INT_DEFAULT : INT64_MIN;
    if (lo > hi)
        return err_set(g->e, ERR_INVALID, "%s: no integer satisfies the minimum and maximum", ptr_show(ptr));
    int_range(out, lo, hi);
    return 0;
}

/* ---- patterns: a regular-expression subset ------------------------------ */

/* A set of code points: sorted, disjoint, non-adjacent intervals. */
typedef struct {
    uint32_t (*iv)[2];
    int n, cap;
} cpset;

static void cs_add(cpset *s, uint32_t a, uint32_t b) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->iv = xrealloc(s->iv, sizeof *s->iv * (size_t)s->cap);
    }
    s->iv[s->n][0] = a;
    s->iv[s->n][1] = b;
    s->n++;
}
static int iv_cmp(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}
/* Sorts and merges; removes surrogates. */
static void cs_norm(cpset *s) {
    qsort(s->iv, (size_t)s->n, sizeof *s->iv, iv_cmp);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->iv[i][0] <= s->iv[m - 1][1] + 1) {
            if (s->iv[i][1] > s->iv[m - 1][1]) s->iv[m - 1][1] = s->iv[i][1];
        } else {
            s->iv[m][0] = s->iv[i][0];
            s->iv[m][1] = s->iv[i][1];
            m++;
        }
    }
    s->n = m;
    /* cut out D800-DFFF */
    cpset t = {0};
    for (int i = 0; i < s->n; i++) {
        uint32_t a = s->iv[i][0], b = s->iv[i][1];
        if (b < 0xD800 || a > 0xDFFF) cs_add(&t, a, b);
        else {
            if (a < 0xD800) cs_add(&t, a, 0xD7FF);
            if (b > 0xDFFF) cs_add(&t, 0xE000, b);
        }
    }
    free(s->iv);
    *s = t;
}
static void cs_negate(cpset *s) {
    cs_norm(s);
    cpset t = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->iv[i][0] > next) cs_add(&t, next, s->iv[i][0] - 1);
        next = s->iv[i][1] + 1;
    }
    if (next <= 0x10FFFF) cs_add(&t, next, 0x10FFFF);
    free(s->iv);
    *s = t;
    cs_norm(s);
}

enum { RX_EMPTY, RX_SET, RX_CAT, RX_ALT, RX_REP };
typedef struct rx {
    int kind;
    cpset set;
    struct rx *a, *b; /* CAT, ALT: a b; REP: a */
    int min, max;     /* REP; max -1 = unbounded */
} rx;

static void rx_free(rx *r) {
    if (!r) return;
    rx_free(r->a);
    rx_free(r->b);
    free(r->set.iv);
    free(r);
}
static rx *rx_new(int kind) {
    rx *r = xcalloc(1, sizeof *r);
    r->kind = kind;
    return r;
}
static bool rx_nullable(const rx *r) {
    switch (r->kind) {
    case RX_EMPTY: return true;
    case RX_SET: return false;
    case RX_CAT: return rx_nullable(r->a) && rx_nullable(r->b);
    case RX_ALT: return rx_nullable(r->a) || rx_nullable(r->b);
    case RX_REP: return r->min == 0 || rx_nullable(r->a);
    }
    return true;
}
static bool rx_is_empty(const rx *r) {
    switch (r->kind) {
    case RX_EMPTY: return true;
    case RX_CAT: return rx_is_empty(r->a) && rx_is_empty(r->b);
    case RX_ALT: return rx_is_empty(r->a) && rx_is_empty(r->b);
    case RX_REP: return r->max == 0 || rx_is_empty(r->a);
    }
    return false;
}

typedef struct {
    const char *s;
    size_t i, n;
    int depth;
    bool top_alt; /* a '|' outside every group */
    gen *g;
    const char *ptr;
    int rc;
} rxp;

static rx *rx_fail(rxp *p, int code, const char *what) {
    if (!p->rc)
        p->rc = err_set(p->g->e, code, "%s/pattern: %s at offset %zu", p->ptr, what, p->i);
    return NULL;
}

static void cs_class_escape(cpset *s, char c) {
    switch (c) {
    case 'd': cs_add(s, '0', '9'); break;
    case 'w':
        cs_add(s, '0', '9');
        cs_add(s, 'A', 'Z');
        cs_add(s, 'a', 'z');
        cs_add(s, '_', '_');
        break;
    case 's': {
        static const uint32_t ws[][2] = {{9, 13},         {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                         {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                         {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < ARRAY_LEN(ws); i++) cs_add(s, ws[i][0], ws[i][1]);
        break;
    }
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* After a backslash: a single code point escape into *cp (returns 1), a class
 * escape added to *set (returns 2), or 0 with p->rc set. */
static int rx_escape(rxp *p, uint32_t *cp, cpset *set) {
    if (p->i >= p->n) return rx_fail(p, ERR_INVALID, "trailing backslash"), 0;
    char c = p->s[p->i++];
    switch (c) {
    case 'd':
    case 'w':
    case 's':
        cs_class_escape(set, c);
        return 2;
    case 'D':
    case 'W':
    case 'S': {
        cpset t = {0};
        cs_class_escape(&t, (char)tolower((unsigned char)c));
        cs_negate(&t);
        for (int i = 0; i < t.n; i++) cs_add(set, t.iv[i][0], t.iv[i][1]);
        free(t.iv);
        return 2;
    }
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case '0': *cp = 0; return 1;
    case 'x':
    case 'u': {
        int nd = c == 'x' ? 2 : 4;
        if (p->i + (size_t)nd > p->n) return rx_fail(p, ERR_INVALID, "short \\x or \\u escape"), 0;
        uint32_t v = 0;
        for (int k = 0; k < nd; k++) {
            int h = hexval(p->s[p->i + (size_t)k]);
            if (h < 0) return rx_fail(p, ERR_INVALID, "bad hex digit in escape"), 0;
            v = v * 16 + (uint32_t)h;
        }
        p->i += (size_t)nd;
        if (v >= 0xD800 && v <= 0xDFFF) return rx_fail(p, ERR_UNSUPPORTED, "surrogate escape"), 0;
        *cp = v;
        return 1;
    }
    default:
        if (isalnum((unsigned char)c))
            return rx_fail(p, ERR_UNSUPPORTED, "unsupported escape (backreferences, \\b, \\p ... are not supported)"),
                   0;
        if ((unsigned char)c >= 0x80) return rx_fail(p, ERR_UNSUPPORTED, "escaped non-ASCII"), 0;
        *cp = (uint32_t)(unsigned char)c;
        return 1;
    }
}

/* One code point of the pattern (raw UTF-8). */
static int rx_cp(rxp *p, uint32_t *cp) {
    int k = utf8_dec((const unsigned char *)p->s + p->i, p->n - p->i, cp);
    if (!k) return rx_fail(p, ERR_INVALID, "bad UTF-8"), 0;
    p->i += (size_t)k;
    return 1;
}

static rx *rx_class(rxp *p) { /* after '[' */
    rx *r = rx_new(RX_SET);
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') neg = true, p->i++;
    bool first = true;
    for (;;) {
        if (p->i >= p->n) {
            rx_free(r);
            return rx_fail(p, ERR_INVALID, "unterminated character class");
        }
        if (p->s[p->i] == ']' && !first) {
            p->i++;
            break;
        }
        first = false;
        uint32_t a;
        int kind;
        if (p->s[p->i] == '\\') {
            p->i++;
            kind = rx_escape(p, &a, &r->set);
        } else kind = rx_cp(p, &a);
        if (!kind) {
            rx_free(r);
            return NULL;
        }
        if (kind == 2) continue;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            uint32_t b;
            int k2;
            if (p->s[p->i] == '\\') {
                p->i++;
                cpset junk = {0};
                k2 = rx_escape(p, &b, &junk);
                free(junk.iv);
                if (k2 == 2) {
                    rx_free(r);
                    return rx_fail(p, ERR_UNSUPPORTED, "class escape as a range end");
                }
            } else k2 = rx_cp(p, &b);
            if (!k2) {
                rx_free(r);
                return NULL;
            }
            if (b < a) {
                rx_free(r);
                return rx_fail(p, ERR_INVALID, "range out of order in character class");
            }
            cs_add(&r->set, a, b);
        } else cs_add(&r->set, a, a);
    }
    if (neg) cs_negate(&r->set);
    else cs_norm(&r->set);
    if (!r->set.n) {
        rx_free(r);
        return rx_fail(p, ERR_UNSUPPORTED, "character class that matches nothing");
    }
    return r;
}

static rx *rx_alt(rxp *p);

static rx *rx_atom(rxp *p) {
    char c = p->s[p->i];
    if (c == '(') {
        p->i++;
        if (p->i + 1 < p->n && p->s[p->i] == '?') {
            if (p->s[p->i + 1] == ':') p->i += 2;
            else return rx_fail(p, ERR_UNSUPPORTED, "lookaround, named group or inline flag");
        }
        if (++p->depth > SCHEMA_MAX_DEPTH) return rx_fail(p, ERR_RANGE, "groups nest too deep");
        rx *r = rx_alt(p);
        p->depth--;
        if (!r) return NULL;
        if (p->i >= p->n || p->s[p->i] != ')') {
            rx_free(r);
            return rx_fail(p, ERR_INVALID, "missing ')'");
        }
        p->i++;
        return r;
    }
    if (c == '[') {
        p->i++;
        return rx_class(p);
    }
    rx *r = rx_new(RX_SET);
    if (c == '.') {
        p->i++;
        cs_add(&r->set, '\n', '\n');
        cs_add(&r->set, '\r', '\r');
        cs_add(&r->set, 0x2028, 0x2029);
        cs_negate(&r->set);
        return r;
    }
    if (c == ')' || c == '*' || c == '+' || c == '?' || c == '{' || c == '|') {
        rx_free(r);
        return rx_fail(p, ERR_INVALID, "unexpected character");
    }
    if (c == '^' || c == '$') {
        rx_free(r);
        return rx_fail(p, ERR_UNSUPPORTED, "anchor '^' or '$' inside the pattern (only at its ends)");
    }
    uint32_t cp;
    int kind;
    if (c == '\\') {
        p->i++;
        kind = rx_escape(p, &cp, &r->set);
    } else kind = rx_cp(p, &cp);
    if (!kind) {
        rx_free(r);
        return NULL;
    }
    if (kind == 1) cs_add(&r->set, cp, cp);
    cs_norm(&r->set);
    return r;
}

static bool rx_int(rxp *p, int *out) {
    if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i])) return false;
    long v = 0;
    while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > 1000000) v = 1000000;
    }
    *out = (int)v;
    return true;
}

static rx *rx_repeat(rxp *p) {
    rx *a = rx_atom(p);
    while (a && p->i < p->n) {
        char c = p->s[p->i];
        int mn, mx;
        if (c == '*') mn = 0, mx = -1, p->i++;
        else if (c == '+') mn = 1, mx = -1, p->i++;
        else if (c == '?') mn = 0, mx = 1, p->i++;
        else if (c == '{') {
            size_t save = p->i++;
            if (!rx_int(p, &mn)) {
                p->i = save;
                rx_free(a);
                return rx_fail(p, ERR_UNSUPPORTED, "'{' not starting a {m,n} quantifier (escape it)");
            }
            mx = mn;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                if (!rx_int(p, &mx)) mx = -1;
            }
            if (p->i >= p->n || p->s[p->i] != '}') {
                rx_free(a);
                return rx_fail(p, ERR_INVALID, "bad {m,n} quantifier");
            }
            p->i++;
            if ((mx >= 0 && mx < mn)) {
                rx_free(a);
                return rx_fail(p, ERR_INVALID, "{m,n} with n < m");
            }
            if (mn > GRAMMAR_MAX_REPEAT || mx > GRAMMAR_MAX_REPEAT) {
                rx_free(a);
                return rx_fail(p, ERR_UNSUPPORTED, "repetition count above 10000");
            }
        } else break;
        if (p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy: same language */
        else if (p->i < p->n && p->s[p->i] == '+') {
            rx_free(a);
            return rx_fail(p, ERR_UNSUPPORTED, "possessive quantifier");
        }
        if (mx != 0 && mx != 1 && rx_nullable(a) && !rx_is_empty(a)) {
            rx_free(a);
            return rx_fail(p, ERR_UNSUPPORTED, "repetition of an expression that can be empty or is repeated");
        }
        rx *r = rx_new(RX_REP);
        r->a = a;
        r->min = mn;
        r->max = mx;
        a = r;
    }
    return a;
}

static rx *rx_cat(rxp *p) {
    rx *r = NULL;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        if (p->s[p->i] == '$' && p->i + 1 == p->n) break; /* end anchor: the caller's */
        rx *x = rx_repeat(p);
        if (!x) {
            rx_free(r);
            return NULL;
        }
        if (!r) r = x;
        else {
            rx *c = rx_new(RX_CAT);
            c->a = r;
            c->b = x;
            r = c;
        }
    }
    return r ? r : rx_new(RX_EMPTY);
}

static rx *rx_alt(rxp *p) {
    rx *r = rx_cat(p);
    while (r && p->i < p->n && p->s[p->i] == '|') {
        if (p->depth == 0) p->top_alt = true;
        p->i++;
        rx *x = rx_cat(p);
        if (!x) {
            rx_free(r);
            return NULL;
        }
        rx *a = rx_new(RX_ALT);
        a->a = r;
        a->b = x;
        r = a;
    }
    return r;
}

/* Writes the JSON-escaped forms of the code points of a set. */
static void emit_set(sbuf *b, const cpset *s) {
    /* raw part: everything but " \ and controls */
    cpset raw = {0};
    bool esc[0x20] = {0}, quote = false, bslash = false;
    for (int i = 0; i < s->n; i++) {
        uint32_t a = s->iv[i][0], z = s->iv[i][1];
        for (uint32_t c = a; c <= z && c < 0x20; c++) esc[c] = true;
        if (a <= '"' && z >= '"') quote = true;
        if (a <= '\\' && z >= '\\') bslash = true;
        if (z < 0x20) continue;
        if (a < 0x20) a = 0x20;
        if (a <= '"' && z >= '"') {
            if (a < '"') cs_add(&raw, a, '"' - 1);
            a = '"' + 1;
        }
        if (a > z) continue;
        if (a <= '\\' && z >= '\\') {
            if (a < '\\') cs_add(&raw, a, '\\' - 1);
            a = '\\' + 1;
        }
        if (a <= z) cs_add(&raw, a, z);
    }
    int n_alt = 0;
    sb_puts(b, "( ");
    if (raw.n) {
        sb_puts(b, "[");
        for (int i = 0; i < raw.n; i++) {
            gbnf_cp(b, raw.iv[i][0], true);
            if (raw.iv[i][1] != raw.iv[i][0]) {
                sb_puts(b, "-");
                gbnf_cp(b, raw.iv[i][1], true);
            }
        }
        sb_puts(b, "]");
        n_alt++;
    }
    free(raw.iv);
    if (quote) sb_printf(b, "%s\"\\\\\\\"\"", n_alt++ ? " | " : "");
    if (bslash) sb_printf(b, "%s\"\\\\\\\\\"", n_alt++ ? " | " : "");
    static const char short_esc[][2] = {{'\b', 'b'}, {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};
    for (size_t k = 0; k < ARRAY_LEN(short_esc); k++)
        if (esc[(int)short_esc[k][0]]) {
            sb_printf(b, "%s\"\\\\%c\"", n_alt++ ? " | " : "", short_esc[k][1]);
            esc[(int)short_esc[k][0]] = false;
        }
    for (int hi = 0; hi < 2; hi++) {
        bool any = false;
        for (int lo = 0; lo < 16; lo++) any |= esc[hi * 16 + lo];
        if (!any) continue;
        sb_printf(b, "%s\"\\\\u00%d\" [", n_alt++ ? " | " : "", hi);
        for (int lo = 0; lo < 16; lo++)
            if (esc[hi * 16 + lo]) sb_printf(b, "%x", lo);
        sb_puts(b, "]");
    }
    sb_puts(b, " )");
}

/* Writes r as a GBNF sequence (nothing for an empty r). */
static void emit_rx(sbuf *b, const rx *r) {
    switch (r->kind) {
    case RX_EMPTY: return;
    case RX_SET: emit_set(b, &r->set); return;
    case RX_CAT: {
        size_t before = b->n;
        emit_rx(b, r->a);
        if (!rx_is_empty(r->b)) {
            if (b->n > before) sb_puts(b, " ");
            emit_rx(b, r->b);
        }
        return;
    }
    case RX_ALT: {
        /* flatten; empty branches make the whole group optional */
        bool a_e = rx_is_empty(r->a), b_e = rx_is_empty(r->b);
        if (a_e && b_e) return;
        sb_puts(b, "( ");
        if (a_e) emit_rx(b, r->b);
        else if (b_e) emit_rx(b, r->a);
        else {
            emit_rx(b, r->a);
            sb_puts(b, " | ");
            emit_rx(b, r->b);
        }
        sb_puts(b, " )");
        if (a_e || b_e) sb_puts(b, "?");
        return;
    }
    case RX_REP: {
        if (rx_is_empty(r)) return;
        sb_puts(b, "( ");
        emit_rx(b, r->a);
        sb_puts(b, " )");
        if (r->min == 0 && r->max == -1) sb_puts(b, "*");
        else if (r->min == 1 && r->max == -1) sb_puts(b, "+");
        else if (r->min == 0 && r->max == 1) sb_puts(b, "?");
        else if (r->max == -1) sb_printf(b, "{%d,}", r->min);
        else if (r->min == r->max) sb_printf(b, "{%d}", r->min);
        else sb_printf(b, "{%d,%d}", r->min, r->max);
        return;
    }
    }
}

static int gen_pattern(gen *g, json_t *v, const char *ptr, sbuf *out) {
    if (!json_is_string(v)) return invalid_kw(g, ptr, "pattern", "must be a string");
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n > SCHEMA_MAX_PATTERN)
        return err_set(g->e, ERR_RANGE, "%s/pattern is longer than %d bytes", ptr, SCHEMA_MAX_PATTERN);
    bool start = n > 0 && s[0] == '^';
    rxp p = {.s = s, .i = start ? 1 : 0, .n = n, .g = g, .ptr = ptr};
    rx *r = rx_alt(&p);
    if (!r) return p.rc;
    bool end = false;
    if (p.i < n && s[p.i] == '$' && p.i + 1 == n) end = true, p.i++;
    if (p.i != n) {
        rx_free(r);
        return err_set(g->e, ERR_INVALID, "%s/pattern: unexpected '%c' at offset %zu", ptr, s[p.i], p.i);
    }
    if ((start || end) && p.top_alt) {
        rx_free(r);
        return err_set(g->e, ERR_UNSUPPORTED,
                       "%s/pattern: an anchor beside a top-level '|' (write ^(a|b)$ for a whole-string choice)",
                       ptr);
    }
    sb_puts(out, "( \"\\\"\" ");
    if (!start) {
        prim(g, P_PCHAR, out);
        sb_puts(out, "* ");
    }
    size_t before = out->n;
    emit_rx(out, r);
    if (out->n > before) sb_puts(out, " ");
    if (!end) {
        prim(g, P_PCHAR, out);
        sb_puts(out, "* ");
    }
    sb_puts(out, "\"\\\"\" )");
    rx_free(r);
    return 0;
}

/* ---- strings ------------------------------------------------------------- */

static int gen_string(gen *g, json_t *s, const char *ptr, sbuf *out) {
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    bool has_len = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if ((pat != NULL) + (fmt != NULL) + has_len > 1)
        return err_set(g->e, ERR_UNSUPPORTED,
                       "%s: only one of pattern, format and minLength/maxLength is supported on one string",
                       ptr_show(ptr));
    if (pat) return gen_pattern(g, pat, ptr, out);
    if (fmt) {
        if (!json_is_string(fmt)) return invalid_kw(g, ptr, "format", "must be a string");
        const char *f = json_string_value(fmt);
        static const struct {
            const char *name;
            unsigned bit;
        } fmts[] = {{"date", P_DATE}, {"time", P_TIME}, {"date-time", P_DATETIME}, {"uuid", P_UUID}};
        for (size_t i = 0; i < ARRAY_LEN(fmts); i++)
            if (!strcmp(f, fmts[i].name)) {
                sb_puts(out, "( \"\\\"\" ");
                prim(g, fmts[i].bit, out);
                sb_puts(out, " \"\\\"\" )");
                return 0;
            }
        return err_set(g->e, ERR_UNSUPPORTED, "unsupported format '%.64s' at %s", f, ptr_show(ptr));
    }
    long long mn, mx;
    int rc;
    if ((rc = get_count(g, s, ptr, "minLength", 0, &mn))) return rc;
    if ((rc = get_count(g, s, ptr, "maxLength", -1, &mx))) return rc;
    if (mx >= 0 && mx < mn) return err_set(g->e, ERR_INVALID, "%s/maxLength is below minLength", ptr);
    if (mn == 0 && mx < 0) {
        prim(g, P_STRING, out);
        return 0;
    }
    sb_puts(out, "( \"\\\"\" ");
    if (mx != 0) {
        prim(g, P_CHAR, out);
        if (mx < 0) sb_printf(out, "{%lld,}", mn);
        else if (mx == mn) sb_printf(out, "{%lld}", mn);
        else sb_printf(out, "{%lld,%lld}", mn, mx);
        sb_puts(out, " ");
    }
    sb_puts(out, "\"\\\"\" )");
    return 0;
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
        int k = utf8_dec((const unsigned char *)s + i, n - i, &cp);
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
static int trie_emit(gen *g, tnode *t, sbuf *out) {
    sbuf b = {0};
    int n_alt = 0;
    if (!t->term) {
        sb_puts(&b, "\"\\\"\"");
        n_alt++;
    }
    /* a code point that is none of the children, then any tail */
    cpset cs = {0};
    cs_add(&cs, 0, 0x1f);
    cs_add(&cs, '"', '"');
    cs_add(&cs, '\\', '\\');
    for (tnode *c = t->kids; c; c = c->next) cs_add(&cs, c->cp, c->cp);
    cs_negate(&cs);
    if (cs.n) {
        sb_printf(&b, "%s[", n_alt++ ? " | " : "");
        for (int i = 0; i < cs.n; i++) {
            gbnf_cp(&b, cs.iv[i][0], true);
            if (cs.iv[i][1] != cs.iv[i][0]) {
                sb_puts(&b, "-");
                gbnf_cp(&b, cs.iv[i][1], true);
            }
        }
        sb_puts(&b, "] ");
        prim(g, P_KEYCHAR, &b);
        sb_puts(&b, "* \"\\\"\"");
    }
    free(cs.iv);
    for (tnode *c = t->kids; c; c = c->next) {
        sb_printf(&b, "%s\"", n_alt++ ? " | " : "");
        gbnf_cp(&b, c->cp, false);
        sb_puts(&b, "\" ");
        int rc = trie_emit(g, c, &b);
        if (rc) {
            sb_free(&b);
            return rc;
        }
    }
    int rc = 0;
    if (!t->kids) { /* a leaf: inline */
        sb_printf(out, "( %s )", b.p);
    } else {
        char *name = rule_name(g, "key");
        rc = add_rule(g, name, b.p);
        sb_puts(out, name);
        free(name);
    }
    sb_free(&b);
    return rc;
}

typedef struct {
    const char *key;
    json_t *schema;
    bool required;
    char *kv; /* rule name of `"key": value` */
} member;

static int gen_object(gen *g, json_t *s, const char *ptr, sbuf *out) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return invalid_kw(g, ptr, "properties", "must be an object");
    if (req && !json_is_array(req)) return invalid_kw(g, ptr, "required", "must be an array of strings");
    if (addl && !json_is_object(addl) && !json_is_boolean(addl))
        return invalid_kw(g, ptr, "additionalProperties", "must be a schema");
    json_t *req_set = json_object(); /* the required names, for lookups */
    json_t *banned = json_array();   /* properties whose schema is false */
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        json_t *r = json_array_get(req, i);
        int bad = !json_is_string(r) ? 1 : json_object_get(req_set, json_string_value(r)) ? 2 : 0;
        if (bad) {
            json_decref(req_set);
            json_decref(banned);
            return invalid_kw(g, ptr, "required", bad == 1 ? "must be an array of strings" : "has duplicates");
        }
        json_object_set_new(req_set, json_string_value(r), json_true());
    }
    /* absent additionalProperties: none when properties are listed (documented choice) */
    bool extra = addl ? !json_is_false(addl) : props == NULL;
    json_t *extra_schema = addl && json_is_object(addl) ? addl : NULL;

    size_t cap = (props ? json_object_size(props) : 0) + (req ? json_array_size(req) : 0) + 1;
    member *m = xcalloc(cap, sizeof *m);
    int n = 0, rc = 0;
    const char *k;
    json_t *v;
    char *pp = props ? ptr_join(ptr, "properties") : NULL;
    if (props) json_object_foreach(props, k, v) {
        bool is_req = json_object_get(req_set, k) != NULL;
        if (json_is_false(v)) {
            json_array_append_new(banned, json_string(k)); /* never written, and not an extra key either */
            if (is_req) {
                rc = err_set(g->e, ERR_INVALID, "%s/required: property '%.64s' is required but its schema is false",
                             ptr, k);
                goto done;
            }
            continue;
        }
        m[n].key = k;
        m[n].schema = v;
        m[n].required = is_req;
        n++;
    }
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (props && json_object_get(props, r)) continue;
        if (addl && json_is_false(addl)) {
            rc = err_set(g->e, ERR_INVALID,
                         "%s/required: property '%.64s' is neither in properties nor allowed by "
                         "additionalProperties",
                         ptr, r);
            goto done;
        }
        m[n].key = r;
        m[n].schema = extra_schema ? extra_schema : json_true();
        m[n].required = true;
        n++;
    }
    /* kv rules */
    for (int i = 0; i < n; i++)
        if (strlen(m[i].key) > SCHEMA_MAX_NAME) {
            rc = err_set(g->e, ERR_RANGE, "%s: a property name is longer than %d bytes", ptr_show(ptr),
                         SCHEMA_MAX_NAME);
            goto done;
        }
    for (int i = 0; i < n; i++) {
        sbuf body = {0};
        sbuf key = {0};
        json_str_canon(&key, m[i].key, strlen(m[i].key));
        sb_puts(&key, ": ");
        gbnf_lit(&body, key.p, key.n);
        sb_free(&key);
        sb_puts(&body, " ");
        char *vp;
        json_t *ps = props ? json_object_get(props, m[i].key) : NULL;
        if (ps == m[i].schema) vp = ptr_join(pp, m[i].key);
        else vp = ptr_join(ptr, "additionalProperties");
        rc = gen_schema(g, m[i].schema, vp, &body);
        free(vp);
        if (!rc) {
            m[i].kv = rule_name(g, m[i].key);
            rc = add_rule(g, m[i].kv, body.p);
        }
        sb_free(&body);
        if (rc) goto done;
    }
    /* the additional member: key (not a listed name) ": " value */
    char *xkv = NULL;
    if (extra) {
        sbuf body = {0};
        if (n == 0 && json_array_size(banned) == 0) prim(g, P_STRING, &body);
        else {
            tnode root = {0};
            for (int i = 0; i < n; i++) trie_add(&root, m[i].key);
            for (size_t i = 0; i < json_array_size(banned); i++)
                trie_add(&root, json_string_value(json_array_get(banned, i)));
            sb_puts(&body, "\"\\\"\" ");
            rc = trie_emit(g, &root, &body);
            trie_free(root.kids);
        }
        sb_puts(&body, " \": \" ");
        if (!rc) {
            char *vp = ptr_join(ptr, "additionalProperties");
            if (extra_schema) rc = gen_schema(g, extra_schema, vp, &body);
            else prim(g, P_VALUE, &body);
            free(vp);
        }
        if (!rc) {
            xkv = rule_name(g, "extra");
            rc = add_rule(g, xkv, body.p);
        }
        sb_free(&body);
        if (rc) {
            free(xkv);
            goto done;
        }
    }
    /* T_i chain, from the end; t_names[i] = rule for T_i or NULL when empty */
    char **t_names = xcalloc((size_t)n + 1, sizeof *t_names);
    if (extra) {
        t_names[n] = rule_name(g, "more");
        sbuf body = {0};
        sb_printf(&body, "( \", \" %s )*", xkv);
        rc = add_rule(g, t_names[n], body.p);
        sb_free(&body);
    }
    for (int i = n - 1; i >= 0 && !rc; i--) {
        sbuf body = {0};
        if (m[i].required) sb_printf(&body, "\", \" %s", m[i].kv);
        else sb_printf(&body, "( \", \" %s )?", m[i].kv);
        if (t_names[i + 1]) sb_printf(&body, " %s", t_names[i + 1]);
        t_names[i] = rule_name(g, "t");
        rc = add_rule(g, t_names[i], body.p);
        sb_free(&body);
    }
    /* S_i chain: s_expr for S_0 built from the end. S_n: extra (first without comma) */
    sbuf s_expr = {0};
    bool s_nullable = true;
    if (!rc && extra) sb_printf(&s_expr, "( %s %s )?", xkv, t_names[n]);
    for (int i = n - 1; i >= 0 && !rc; i--) {
        sbuf e2 = {0};
        sb_puts(&e2, m[i].kv);
        if (t_names[i + 1]) sb_printf(&e2, " %s", t_names[i + 1]);
        if (!m[i].required && s_expr.n) {
            /* kv_i T_{i+1} | S_{i+1}: S_{i+1} becomes a rule to keep this linear */
            char *sn = rule_name(g, "s");
            if (s_nullable) {
                /* S_{i+1} can be empty: written as an optional group */
                sbuf body = {0};
                sb_printf(&body, "%s", s_expr.p);
                rc = add_rule(g, sn, body.p);
                sb_free(&body);
                s_expr.n = 0;
                sb_printf(&s_expr, "( %s | %s )?", e2.p, sn);
            } else {
                rc = add_rule(g, sn, s_expr.p);
                s_expr.n = 0;
                sb_printf(&s_expr, "( %s | %s )", e2.p, sn);
            }
            free(sn);
        } else if (!m[i].required) {
            s_expr.n = 0;
            sb_printf(&s_expr, "( %s )?", e2.p);
            s_nullable = true;
        } else {
            s_expr.n = 0;
            sb_puts(&s_expr, e2.p);
            s_nullable = false;
        }
        sb_free(&e2);
    }
    if (!rc) {
        sb_puts(out, "( \"{\" ");
        if (s_expr.n) sb_printf(out, "%s ", s_expr.p);
        sb_puts(out, "\"}\" )");
    }
    sb_free(&s_expr);
    for (int i = 0; i <= n; i++) free(t_names[i]);
    free(t_names);
    free(xkv);
done:
    for (int i = 0; i < n; i++) free(m[i].kv);
    free(m);
    free(pp);
    json_decref(req_set);
    json_decref(banned);
    return rc;
}

/* ---- arrays -------------------------------------------------------------- */

static int gen_array(gen *g, json_t *s, const char *ptr, sbuf *out) {
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    if (prefix && !json_is_array(prefix)) return invalid_kw(g, ptr, "prefixItems", "must be an array of schemas");
    if (items && json_is_array(items))
        return err_set(g->e, ERR_UNSUPPORTED, "%s/items: the array form (draft 4 tuples) is not supported; use prefixItems",
                       ptr);
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return invalid_kw(g, ptr, "items", "must be a schema");
    long long mn, mx;
    int rc;
    if ((rc = get_count(g, s, ptr, "minItems", 0, &mn))) return rc;
    if ((rc = get_count(g, s, ptr, "maxItems", -1, &mx))) return rc;
    size_t k = prefix ? json_array_size(prefix) : 0;
    if (k > GRAMMAR_MAX_REPEAT) return err_set(g->e, ERR_RANGE, "%s/prefixItems has too many elements", ptr);
    bool more = !json_is_false(items); /* elements after the prefix */
    if (!more && (mx < 0 || mx > (long long)k)) mx = (long long)k;
    if (mx >= 0 && mx < mn)
        return err_set(g->e, ERR_INVALID, "%s: no array length satisfies minItems, maxItems and items", ptr_show(ptr));
    /* element rules */
    char **el = xcalloc(k + 1, sizeof *el);
    size_t n_pre = mx >= 0 && (size_t)mx < k ? (size_t)mx : k; /* prefix elements that can appear */
    for (size_t i = 0; i < n_pre && !rc; i++) {
        sbuf body = {0};
        char *ep = ptr_index(ptr, "prefixItems", i);
        rc = gen_schema(g, json_array_get(prefix, i), ep, &body);
        free(ep);
        if (!rc) {
            el[i] = rule_name(g, "item");
            rc = add_rule(g, el[i], body.p);
        }
        sb_free(&body);
    }
    char *rest = NULL;
    bool rest_possible = more && (mx < 0 || (size_t)mx > k);
    if (!rc && rest_possible) {
        sbuf body = {0};
        char *ep = ptr_join(ptr, "items");
        if (items && !json_is_true(items)) rc = gen_schema(g, items, ep, &body);
        else prim(g, P_VALUE, &body);
        free(ep);
        if (!rc) {
            rest = rule_name(g, "item");
            rc = add_rule(g, rest, body.p);
        }
        sb_free(&body);
    }
    if (rc) goto done;
    /* Elements n_pre.. come from `rest`: count between lo and hi (-1 = no bound). */
    long long lo = mn > (long long)n_pre ? mn - (long long)n_pre : 0;
    long long hi = mx < 0 ? -1 : mx - (long long)n_pre;
    sbuf tail = {0}; /* elements after the prefix, each with its leading ", " if n_pre > 0 */
    if (rest && hi != 0) {
        if (n_pre > 0) {
            sb_printf(&tail, "( \", \" %s )", rest);
            if (lo == 0 && hi < 0) sb_puts(&tail, "*");
            else if (hi < 0) sb_printf(&tail, "{%lld,}", lo);
            else if (lo == hi) sb_printf(&tail, "{%lld}", lo);
            else sb_printf(&tail, "{%lld,%lld}", lo, hi);
        } else {
            /* first element without comma */
            sb_printf(&tail, "%s ( \", \" %s )", rest, rest);
            long long l1 = lo > 0 ? lo - 1 : 0, h1 = hi < 0 ? -1 : hi - 1;
            if (l1 == 0 && h1 < 0) sb_puts(&tail, "*");
            else if (h1 < 0) sb_printf(&tail, "{%lld,}", l1);
            else if (l1 == h1) sb_printf(&tail, "{%lld}", l1);
            else sb_printf(&tail, "{%lld,%lld}", l1, h1);
            if (lo == 0) {
                sbuf t2 = {0};
                sb_printf(&t2, "( %s )?", tail.p);
                sb_free(&tail);
                tail = t2;
            }
        }
    }
    /* prefix elements nest: p0 (", " p1 (", " p2 tail)?)? with required ones unwrapped */
    sbuf expr = {0};
    sb_puts(&expr, tail.p ? tail.p : "");
    for (size_t i = n_pre; i-- > 0;) {
        sbuf e2 = {0};
        if (i > 0) sb_puts(&e2, "\", \" ");
        sb_puts(&e2, el[i]);
        if (expr.n) sb_printf(&e2, " %s", expr.p);
        sb_free(&expr);
        if ((long long)i >= mn) {
            sb_printf(&expr, "( %s )?", e2.p);
            sb_free(&e2);
        } else expr = e2;
    }
    sb_puts(out, "( \"[\" ");
    if (expr.n) sb_printf(out, "%s ", expr.p);
    sb_puts(out, "\"]\" )");
    sb_free(&expr);
    sb_free(&tail);
done:
    for (size_t i = 0; i <= k; i++) free(el[i]);
    free(el);
    free(rest);
    return rc;
}

/* ---- enum / const -------------------------------------------------------- */

static int gen_enum(gen *g, json_t *s, const char *ptr, unsigned types, sbuf *out) {
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
    sb_puts(&b, "( ");
    for (size_t i = 0; i < json_array_size(vals); i++) {
        json_t *x = json_array_get(vals, i);
        if (!(json_type_bits(x) & types)) continue;
        sbuf t = {0};
        if (!json_canon(&t, x, 0)) {
            sb_free(&t);
            rc = err_set(g->e, ERR_INVALID, "%s/%s: value %zu cannot be written as JSON (or nests too deep)", ptr,
                         cn ? "const" : "enum", i);
            break;
        }
        if (n++) sb_puts(&b, " | ");
        gbnf_lit(&b, t.p, t.n);
        sb_free(&t);
        if (b.n > GRAMMAR_MAX_SRC_BYTES) {
            rc = err_set(g->e, ERR_RANGE, "%s/enum: grammar exceeds %u bytes", ptr, GRAMMAR_MAX_SRC_BYTES);
            break;
        }
    }
    sb_puts(&b, " )");
    if (!rc && n == 0)
        rc = err_set(g->e, ERR_INVALID, "%s: no value satisfies %s%s", ptr_show(ptr), cn ? "const" : "enum",
                     json_object_get(s, "type") ? " and type" : (cn && en ? " and enum" : ""));
    if (!rc) sb_puts(out, b.p);
    sb_free(&b);
    json_decref(vals);
    return rc;
}

/* ---- $ref ---------------------------------------------------------------- */

/* Resolves "#", "#/a/b" (JSON pointer with ~0 ~1) against the root. */
static json_t *resolve_ref(json_t *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    const char *p = ref + 1;
    json_t *cur = root;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        sbuf tok = {0};
        sb_puts(&tok, "");
        while (*p && *p != '/') {
            if (p[0] == '~' && p[1] == '0') sb_puts(&tok, "~"), p += 2;
            else if (p[0] == '~' && p[1] == '1') sb_puts(&tok, "/"), p += 2;
            else sb_put(&tok, p++, 1);
        }
        if (json_is_object(cur)) cur = json_object_get(cur, tok.p);
        else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(tok.p, &end, 10);
            cur = *end || !*tok.p ? NULL : json_array_get(cur, i);
        } else cur = NULL;
        sb_free(&tok);
        if (!cur) return NULL;
    }
    return cur;
}

static int gen_ref(gen *g, json_t *refv, const char *ptr, sbuf *out) {
    if (!json_is_string(refv)) return invalid_kw(g, ptr, "$ref", "must be a string");
    const char *ref = json_string_value(refv);
    for (int i = 0; i < g->n_refs; i++) {
        if (strcmp(g->refs[i].ptr, ref)) continue;
        if (!g->refs[i].done && g->refs[i].n_cont == g->n_cont)
            return err_set(g->e, ERR_INVALID,
                           "%s/$ref: '%.100s' refers back to itself without an object or array in between", ptr, ref);
        sb_puts(out, g->refs[i].rule);
        return 0;
    }
    json_t *target = resolve_ref(g->root, ref);
    if (!target)
        return err_set(g->e, strncmp(ref, "#", 1) ? ERR_UNSUPPORTED : ERR_INVALID,
                       "%s/$ref: cannot resolve '%.100s' (only local references \"#...\" are supported)", ptr, ref);
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
    int rc = gen_schema(g, target, ref + 1, &body);
    if (!rc) rc = add_rule(g, g->refs[idx].rule, body.p);
    sb_free(&body);
    g->refs[idx].done = true;
    if (!rc) sb_puts(out, g->refs[idx].rule);
    return rc;
}

/* ---- a schema ------------------------------------------------------------ */

static unsigned parse_types(gen *g, json_t *t, const char *ptr, int *rc) {
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

static int gen_alternatives(gen *g, json_t *arr, const char *ptr, const char *kw, sbuf *out) {
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return invalid_kw(g, ptr, kw, "must be a non-empty array of schemas");
    sbuf b = {0};
    int n = 0, rc = 0;
    sb_puts(&b, "( ");
    for (size_t i = 0; i < json_array_size(arr) && !rc; i++) {
        json_t *x = json_array_get(arr, i);
        if (json_is_false(x)) continue;
        if (n++) sb_puts(&b, " | ");
        char *p = ptr_index(ptr, kw, i);
        rc = gen_schema(g, x, p, &b);
        free(p);
    }
    sb_puts(&b, " )");
    if (!rc && n == 0) rc = err_set(g->e, ERR_INVALID, "%s/%s: every alternative is false", ptr, kw);
    if (!rc) sb_puts(out, b.p);
    sb_free(&b);
    return rc;
}

static int gen_schema(gen *g, json_t *s, const char *ptr, sbuf *out) {
    if (json_is_true(s)) {
        prim(g, P_VALUE, out);
        return 0;
    }
    if (json_is_false(s))
        return err_set(g->e, ERR_UNSUPPORTED, "%s: the schema false admits no value", ptr_show(ptr));
    if (!json_is_object(s)) return err_set(g->e, ERR_INVALID, "%s must be a schema (an object or a boolean)", ptr_show(ptr));
    if (g->depth >= SCHEMA_MAX_DEPTH)
        return err_set(g->e, ERR_RANGE, "schema nests deeper than %d at %s", SCHEMA_MAX_DEPTH, ptr_show(ptr));
    if (TOO_BIG(g) || out->n > GRAMMAR_MAX_SRC_BYTES)
        return err_set(g->e, ERR_RANGE, "schema grammar exceeds %u bytes", GRAMMAR_MAX_SRC_BYTES);

    /* Every keyword must be known; combinators and $ref take only annotations beside them. */
    const char *k;
    json_t *v;
    const char *combinator = NULL;
    int n_constraints = 0;
    json_object_foreach(s, k, v) {
        if (is_annotation(k)) continue;
        if (!in_list(k, kw_supported, ARRAY_LEN(kw_supported))) return unsupported_kw(g, k, ptr);
        n_constraints++;
        if (!strcmp(k, "$ref") || !strcmp(k, "anyOf") || !strcmp(k, "oneOf") || !strcmp(k, "allOf")) {
            if (combinator)
                return err_set(g->e, ERR_UNSUPPORTED, "%s: '%s' together with '%s' is not supported", ptr_show(ptr),
                               k, combinator);
            combinator = k;
        }
    }
    if (combinator && n_constraints > 1) {
        json_object_foreach(s, k, v) if (!is_annotation(k) && strcmp(k, combinator)) return err_set(
            g->e, ERR_UNSUPPORTED, "%s: '%s' beside '%s' is not supported (only annotations may stand beside it)",
            ptr_show(ptr), k, combinator);
    }
    int rc = 0;
    g->depth++;
    if (combinator && !strcmp(combinator, "$ref")) rc = gen_ref(g, json_object_get(s, "$ref"), ptr, out);
    else if (combinator && !strcmp(combinator, "allOf")) {
        json_t *a = json_object_get(s, "allOf");
        if (!json_is_array(a) || json_array_size(a) == 0) rc = invalid_kw(g, ptr, "allOf", "must be a non-empty array");
        else if (json_array_size(a) > 1)
            rc = err_set(g->e, ERR_UNSUPPORTED, "%s/allOf with %zu elements is not supported (only one)", ptr,
                         json_array_size(a));
        else {
            char *p = ptr_index(ptr, "allOf", 0);
            rc = gen_schema(g, json_array_get(a, 0), p, out);
            free(p);
        }
    } else if (combinator) rc = gen_alternatives(g, json_object_get(s, combinator), ptr, combinator, out);
    else {
        json_t *t = json_object_get(s, "type");
        unsigned types = T_ALL;
        if (t) types = parse_types(g, t, ptr, &rc);
        if (!rc && (json_object_get(s, "enum") || json_object_get(s, "const"))) {
            json_object_foreach(s, k, v) if (!is_annotation(k) && strcmp(k, "enum") && strcmp(k, "const") &&
                                             strcmp(k, "type")) {
                rc = err_set(g->e, ERR_UNSUPPORTED, "%s: '%s' beside enum/const is not supported (only type)",
                             ptr_show(ptr), k);
                break;
            }
            if (!rc) rc = gen_enum(g, s, ptr, types, out);
        } else if (!rc) {
            if (!t) {
                /* no type: the types whose keywords appear (none: any value) */
                static const struct {
                    const char *kw;
                    unsigned bits;
                } infer[] = {
                    {"properties", T_OBJECT},     {"required", T_OBJECT},   {"additionalProperties", T_OBJECT},
                    {"items", T_ARRAY},           {"prefixItems", T_ARRAY}, {"minItems", T_ARRAY},
                    {"maxItems", T_ARRAY},        {"minLength", T_STRING},  {"maxLength", T_STRING},
                    {"pattern", T_STRING},        {"format", T_STRING},     {"minimum", T_NUMBER},
                    {"maximum", T_NUMBER},        {"exclusiveMinimum", T_NUMBER}, {"exclusiveMaximum", T_NUMBER},
                };
                unsigned inf = 0;
                for (size_t i = 0; i < ARRAY_LEN(infer); i++)
                    if (json_object_get(s, infer[i].kw)) inf |= infer[i].bits;
                if (inf) types = inf;
            }
            if (types == T_ALL) prim(g, P_VALUE, out);
            else {
                if (types & T_NUMBER) types &= ~(unsigned)T_INTEGER;
                int n = 0;
                sb_puts(out, "( ");
                for (unsigned bit = 1; bit <= T_ARRAY && !rc; bit <<= 1) {
                    if (!(types & bit)) continue;
                    if (n++) sb_puts(out, " | ");
                    switch (bit) {
                    case T_STRING: rc = gen_string(g, s, ptr, out); break;
                    case T_NUMBER: {
                        static const char *const bounds[] = {"minimum", "maximum", "exclusiveMinimum",
                                                             "exclusiveMaximum"};
                        for (size_t i = 0; i < ARRAY_LEN(bounds) && !rc; i++)
                            if (json_object_get(s, bounds[i]))
                                rc = err_set(g->e, ERR_UNSUPPORTED,
                                             "unsupported JSON Schema keyword '%s' at %s on type number (bounds are "
                                             "supported on integers only)",
                                             bounds[i], ptr_show(ptr));
                        if (!rc) prim(g, P_NUMBER, out);
                        break;
                    }
                    case T_INTEGER: rc = gen_integer(g, s, ptr, out); break;
                    case T_BOOLEAN: sb_puts(out, "\"true\" | \"false\""); break;
                    case T_NULL: sb_puts(out, "\"null\""); break;
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
                sb_puts(out, " )");
            }
        }
    }
    g->depth--;
    if (!rc && (TOO_BIG(g) || out->n > GRAMMAR_MAX_SRC_BYTES))
        rc = err_set(g->e, ERR_RANGE, "schema grammar exceeds %u bytes", GRAMMAR_MAX_SRC_BYTES);
    return rc;
}

/* ---- entry points -------------------------------------------------------- */

static int check_name(const char *name, err_t *e) {
    if (!name || !*name || strlen(name) > 64) return err_set(e, ERR_INVALID, "grammar rule name must be 1-64 characters");
    for (const char *c = name; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
            return err_set(e, ERR_INVALID, "grammar rule name '%s' must be [A-Za-z0-9_-]+", name);
    return 0;
}

static void gen_free(gen *g) {
    sb_free(&g->rules);
    for (int i = 0; i < g->n_refs; i++) {
        free(g->refs[i].ptr);
        free(g->refs[i].rule);
    }
    free(g->refs);
}

/* Appends "name ::= top\n" + rules to *buf. */
static int finish(gen *g, const char *top, char **buf, size_t *len, err_t *e) {
    size_t old = *buf ? *len : 0;
    size_t add = strlen(g->prefix) + 5 + strlen(top) + 1 + g->rules.n;
    if (old + add > GRAMMAR_MAX_SRC_BYTES)
        return err_set(e, ERR_RANGE, "schema grammar exceeds %u bytes", GRAMMAR_MAX_SRC_BYTES);
    sbuf b = {.p = *buf, .n = old, .cap = *buf ? old + 1 : 0};
    sb_printf(&b, "%s ::= %s\n", g->prefix, top);
    if (g->rules.n) sb_put(&b, g->rules.p, g->rules.n);
    *buf = b.p;
    *len = b.n;
    return 0;
}

int schema_to_gbnf(json_t *schema, const char *name, char **buf, size_t *len, err_t *e) {
    int rc = check_name(name, e);
    if (rc) return rc;
    if (!schema) return err_set(e, ERR_INVALID, "no schema");
    gen g = {.prefix = name, .root = schema, .e = e};
    sbuf top = {0};
    rc = gen_schema(&g, schema, "", &top);
    if (!rc) rc = finish(&g, top.p, buf, len, e);
    sb_free(&top);
    gen_free(&g);
    return rc;
}

int schema_any_object_gbnf(const char *name, char **buf, size_t *len, err_t *e) {
    int rc = check_name(name, e);
    if (rc) return rc;
    gen g = {.prefix = name, .e = e};
    sbuf top = {0};
    prim(&g, P_OBJECT, &top);
    rc = finish(&g, top.p, buf, len, e);
    sb_free(&top);
    gen_free(&g);
    return rc;
}
