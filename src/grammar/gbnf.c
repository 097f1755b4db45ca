/*
 * gbnf.c — the GBNF parser (llama.cpp's dialect, grammar.h describes it):
 * text from an HTTP client becomes a gast, rules of syntax trees, that
 * grammar.c compiles to an automaton.
 *
 *   grammar  := ws (rule ws)*
 *   rule     := name ws "::=" ws alts
 *   alts     := seq ("|" ws seq)*
 *   seq      := (item postfix*)*      ends at "|", ")", the end, or `name ::=`
 *   item     := "\"" chars "\"" | "[" "^"? class "]" | "." | "(" alts ")" | name
 *   postfix  := "*" | "+" | "?" | "{" m "}" | "{" m "," "}" | "{" m "," n "}"
 *
 * Whitespace (spaces, tabs, newlines, `#` comments) may appear between any
 * two items; a rule ends where the next `name ::=` begins. Literals are kept
 * as UTF-8 bytes (escapes name code points: \xE9 is U+00E9, two bytes);
 * classes as sorted code point ranges, negated later.
 *
 * The input is untrusted: every read goes through the cursor's bounds, every
 * array grows through a checked realloc (ERR_NOMEM), nesting is bounded
 * (ERR_RANGE) so recursion depth is too, and every error says "line:col:".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

#define GBNF_MAX_NEST 128   /* parentheses                               */
#define GBNF_MAX_POSTFIX 8  /* postfix operators on one item             */

typedef struct cur {
    const char *s;
    size_t n, i;
    gast *a;
    err_t *e;
    int depth;
} cur;

void grammar__gbnf_linecol(const char *src, size_t len, size_t off, uint32_t *line, uint32_t *col) {
    uint32_t l = 1, c = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static int fail_at(cur *c, size_t off, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail_at(cur *c, size_t off, int code, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t line, col;
    grammar__gbnf_linecol(c->s, c->n, off, &line, &col);
    return err_set(c->e, code, "%u:%u: %s", line, col, msg);
}

/* Grows *p (elements of `size` bytes) to hold `need`; false when out of
 * memory. The sizes come from the input, hence plain realloc. */
static bool grow(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 16, bytes;
    while (nc < need) nc *= 2;
    if (!mul_ok(nc, size, &bytes)) return false;
    void *q = realloc(*p, bytes);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

static uint32_t node_new(cur *c, uint8_t kind, size_t pos) {
    gast *a = c->a;
    if (a->n_nodes == 0) a->n_nodes = 1; /* index 0 means none */
    if (a->n_nodes >= UINT32_MAX / 2 || !grow((void **)&a->nodes, &a->cap_nodes, a->n_nodes + 1, sizeof(gnode))) {
        fail_at(c, pos, ERR_NOMEM, "out of memory");
        return 0;
    }
    gnode *nd = &a->nodes[a->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    nd->pos = (uint32_t)pos;
    return (uint32_t)a->n_nodes++;
}

/* ---- whitespace and names ------------------------------------------------ */

static void skip_ws(cur *c) {
    while (c->i < c->n) {
        char ch = c->s[c->i];
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') {
            c->i++;
        } else if (ch == '#') {
            while (c->i < c->n && c->s[c->i] != '\n') c->i++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
           ch == '-';
}

static size_t name_end(const cur *c, size_t i) {
    while (i < c->n && is_name_char(c->s[i])) i++;
    return i;
}

/* Does a rule definition (`name ::=`) start at offset i? */
static bool at_definition(const cur *c, size_t i) {
    size_t j = name_end(c, i);
    if (j == i) return false;
    cur t = *c;
    t.i = j;
    skip_ws(&t);
    return t.n - t.i >= 3 && memcmp(t.s + t.i, "::=", 3) == 0;
}

/* The rule index of a name, created on first sight. */
static int rule_lookup(cur *c, size_t off, size_t len, uint32_t *out) {
    gast *a = c->a;
    if (a->n_rules * 2 >= a->name_cap) {
        size_t nc = a->name_cap ? a->name_cap * 2 : 64;
        uint32_t *t = calloc(nc, sizeof *t);
        if (!t) return fail_at(c, off, ERR_NOMEM, "out of memory");
        for (size_t r = 0; r < a->n_rules; r++) {
            uint64_t h = hash_bytes(c->s + a->rules[r].name_off, a->rules[r].name_len, 7);
            size_t k = h & (nc - 1);
            while (t[k]) k = (k + 1) & (nc - 1);
            t[k] = (uint32_t)r + 1;
        }
        free(a->name_tab);
        a->name_tab = t;
        a->name_cap = nc;
    }
    uint64_t h = hash_bytes(c->s + off, len, 7);
    size_t k = h & (a->name_cap - 1);
    while (a->name_tab[k]) {
        grule_def *r = &a->rules[a->name_tab[k] - 1];
        if (r->name_len == len && memcmp(c->s + r->name_off, c->s + off, len) == 0) {
            *out = a->name_tab[k] - 1;
            return 0;
        }
        k = (k + 1) & (a->name_cap - 1);
    }
    if (a->n_rules >= GRAMMAR_MAX_RULES)
        return fail_at(c, off, ERR_RANGE, "more than %d rules", GRAMMAR_MAX_RULES);
    if (!grow((void **)&a->rules, &a->cap_rules, a->n_rules + 1, sizeof(grule_def)))
        return fail_at(c, off, ERR_NOMEM, "out of memory");
    grule_def *r = &a->rules[a->n_rules];
    memset(r, 0, sizeof *r);
    r->name_off = (uint32_t)off;
    r->name_len = (uint32_t)len;
    r->ref_pos = UINT32_MAX;
    a->name_tab[k] = (uint32_t)a->n_rules + 1;
    *out = (uint32_t)a->n_rules++;
    return 0;
}

/* ---- characters ------------------------------------------------------------ */

static int hex_val(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Decodes one UTF-8 code point of the source at c->i (strict). */
static int read_utf8(cur *c, uint32_t *cp) {
    size_t i = c->i;
    int k = utf8_decode(c->s + i, c->n - i, cp);
    if (k > 0) {
        c->i += (size_t)k;
        return 0;
    }
    uint8_t b0 = (uint8_t)c->s[i];
    int need = utf8_lead_len(b0);
    if (!need) return fail_at(c, i, ERR_FORMAT, "invalid UTF-8 byte 0x%02X", b0);
    if (c->n - i < (size_t)need) return fail_at(c, i, ERR_FORMAT, "truncated UTF-8 sequence");
    return fail_at(c, i, ERR_FORMAT, "invalid UTF-8 sequence");
}

/* One character of a literal or class: an escape or a UTF-8 code point. */
static int read_char(cur *c, uint32_t *cp, bool in_class) {
    size_t at = c->i;
    if (c->s[c->i] != '\\') return read_utf8(c, cp);
    if (c->n - c->i < 2) return fail_at(c, at, ERR_FORMAT, "unterminated escape");
    char k = c->s[c->i + 1];
    c->i += 2;
    int digits = 0;
    switch (k) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case '\\': case '"': case '[': case ']': case '/': case '\'':
        *cp = (uint8_t)k;
        return 0;
    case '-': case '^':
        if (!in_class) break;
        *cp = (uint8_t)k;
        return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: break;
    }
    if (!digits) {
        if ((uint8_t)k >= 0x20 && (uint8_t)k < 0x7F)
            return fail_at(c, at, ERR_FORMAT, "unknown escape '\\%c'", k);
        return fail_at(c, at, ERR_FORMAT, "unknown escape");
    }
    uint32_t v = 0;
    for (int d = 0; d < digits; d++) {
        int h = c->i < c->n ? hex_val(c->s[c->i]) : -1;
        if (h < 0) return fail_at(c, at, ERR_FORMAT, "escape '\\%c' needs %d hex digits", k, digits);
        v = (v << 4) | (uint32_t)h;
        c->i++;
    }
    if (v > 0x10FFFF) return fail_at(c, at, ERR_FORMAT, "code point 0x%X is past U+10FFFF", v);
    *cp = v;
    return 0;
}

static int parse_literal(cur *c, uint32_t *out) {
    size_t start = c->i;
    gast *a = c->a;
    c->i++; /* the quote */
    uint32_t nd = node_new(c, GN_LIT, start);
    if (!nd) return ERR_NOMEM;
    size_t off = a->n_lit;
    if (off > UINT32_MAX / 2) return fail_at(c, start, ERR_RANGE, "literals too long");
    for (;;) {
        if (c->i >= c->n) return fail_at(c, start, ERR_FORMAT, "unterminated string literal");
        char ch = c->s[c->i];
        if (ch == '"') break;
        if (!grow((void **)&a->lit, &a->cap_lit, a->n_lit + 4, 1)) return fail_at(c, start, ERR_NOMEM, "out of memory");
        if (ch == '\\') {
            uint32_t cp;
            int rc = read_char(c, &cp, false);
            if (rc) return rc;
            a->n_lit += (size_t)utf8_encode(cp, (char *)a->lit + a->n_lit);
        } else {
            a->lit[a->n_lit++] = (uint8_t)ch; /* bytes as written */
            c->i++;
        }
    }
    c->i++;
    a->nodes[nd].a = (uint32_t)off;
    a->nodes[nd].b = (uint32_t)(a->n_lit - off);
    *out = nd;
    return 0;
}

static int cmp_range(const void *x, const void *y) {
    const uint32_t *p = x, *q = y;
    return p[0] < q[0] ? -1 : p[0] > q[0] ? 1 : (p[1] < q[1] ? -1 : p[1] > q[1]);
}

static int parse_class(cur *c, uint32_t *out) {
    size_t start = c->i;
    gast *a = c->a;
    c->i++; /* [ */
    uint32_t nd = node_new(c, GN_CLASS, start);
    if (!nd) return ERR_NOMEM;
    if (c->i < c->n && c->s[c->i] == '^') {
        a->nodes[nd].neg = 1;
        c->i++;
    }
    size_t off = a->n_ranges;
    if (off > UINT32_MAX / 4) return fail_at(c, start, ERR_RANGE, "classes too long");
    for (;;) {
        if (c->i >= c->n) return fail_at(c, start, ERR_FORMAT, "unterminated character class");
        if (c->s[c->i] == ']') break;
        size_t at = c->i;
        uint32_t lo, hi;
        int rc = read_char(c, &lo, true);
        if (rc) return rc;
        hi = lo;
        if (c->n - c->i >= 2 && c->s[c->i] == '-' && c->s[c->i + 1] != ']') {
            c->i++;
            rc = read_char(c, &hi, true);
            if (rc) return rc;
            if (hi < lo) return fail_at(c, at, ERR_FORMAT, "range end U+%04X before its start U+%04X", hi, lo);
        }
        if (!grow((void **)&a->ranges, &a->cap_ranges, a->n_ranges + 2, sizeof(uint32_t)))
            return fail_at(c, start, ERR_NOMEM, "out of memory");
        a->ranges[a->n_ranges++] = lo;
        a->ranges[a->n_ranges++] = hi;
    }
    c->i++;
    /* sort and merge */
    uint32_t *r = a->ranges ? a->ranges + off : NULL; /* "[]" first: nothing allocated yet */
    size_t n = (a->n_ranges - off) / 2, m = 0;
    if (n > 1) qsort(r, n, 2 * sizeof(uint32_t), cmp_range);
    for (size_t k = 0; k < n; k++) {
        if (m && r[2 * k] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * k + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * k + 1];
        } else {
            r[2 * m] = r[2 * k];
            r[2 * m + 1] = r[2 * k + 1];
            m++;
        }
    }
    a->n_ranges = off + 2 * m;
    a->nodes[nd].a = (uint32_t)off;
    a->nodes[nd].b = (uint32_t)m;
    *out = nd;
    return 0;
}

static int parse_count(cur *c, uint32_t *v) {
    size_t at = c->i;
    if (c->i >= c->n || c->s[c->i] < '0' || c->s[c->i] > '9')
        return fail_at(c, at, ERR_FORMAT, "expected a number in a repetition");
    uint64_t x = 0;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        x = x * 10 + (uint64_t)(c->s[c->i] - '0');
        if (x > GRAMMAR_MAX_REPEAT)
            return fail_at(c, at, ERR_RANGE, "repetition count exceeds %d", GRAMMAR_MAX_REPEAT);
        c->i++;
    }
    *v = (uint32_t)x;
    return 0;
}

static int parse_alts(cur *c, uint32_t *out);

static int parse_item(cur *c, uint32_t *out) {
    char ch = c->s[c->i];
    size_t at = c->i;
    if (ch == '"') return parse_literal(c, out);
    if (ch == '[') return parse_class(c, out);
    if (ch == '.') {
        c->i++;
        *out = node_new(c, GN_ANY, at);
        return *out ? 0 : ERR_NOMEM;
    }
    if (ch == '(') {
        if (++c->depth > GBNF_MAX_NEST) return fail_at(c, at, ERR_RANGE, "groups nested deeper than %d", GBNF_MAX_NEST);
        c->i++;
        int rc = parse_alts(c, out);
        if (rc) return rc;
        skip_ws(c);
        if (c->i >= c->n || c->s[c->i] != ')') return fail_at(c, at, ERR_FORMAT, "unclosed '('");
        c->i++;
        c->depth--;
        return 0;
    }
    if (is_name_char(ch)) {
        size_t j = name_end(c, at);
        uint32_t r;
        int rc = rule_lookup(c, at, j - at, &r);
        if (rc) return rc;
        if (c->a->rules[r].ref_pos == UINT32_MAX) c->a->rules[r].ref_pos = (uint32_t)at;
        c->i = j;
        uint32_t nd = node_new(c, GN_REF, at);
        if (!nd) return ERR_NOMEM;
        c->a->nodes[nd].a = r;
        *out = nd;
        return 0;
    }
    if ((uint8_t)ch >= 0x20 && (uint8_t)ch < 0x7F) return fail_at(c, at, ERR_FORMAT, "unexpected '%c'", ch);
    return fail_at(c, at, ERR_FORMAT, "unexpected byte 0x%02X", (uint8_t)ch);
}

/* Wraps `item` in a repetition node. */
static int wrap_rep(cur *c, uint32_t *item, size_t at, uint32_t min, uint32_t max) {
    uint32_t nd = node_new(c, GN_REP, at);
    if (!nd) return ERR_NOMEM;
    c->a->nodes[nd].first = *item;
    c->a->nodes[nd].a = min;
    c->a->nodes[nd].b = max;
    *item = nd;
    return 0;
}

static int parse_postfix(cur *c, uint32_t *item) {
    int n_post = 0;
    for (;;) {
        skip_ws(c);
        if (c->i >= c->n) return 0;
        char ch = c->s[c->i];
        size_t at = c->i;
        uint32_t min, max;
        if (ch == '*') {
            min = 0, max = GN_INF;
            c->i++;
        } else if (ch == '+') {
            min = 1, max = GN_INF;
            c->i++;
        } else if (ch == '?') {
            min = 0, max = 1;
            c->i++;
        } else if (ch == '{') {
            c->i++;
            skip_ws(c);
            int rc = parse_count(c, &min);
            if (rc) return rc;
            skip_ws(c);
            max = min;
            if (c->i < c->n && c->s[c->i] == ',') {
                c->i++;
                skip_ws(c);
                max = GN_INF;
                if (c->i < c->n && c->s[c->i] != '}') {
                    rc = parse_count(c, &max);
                    if (rc) return rc;
                    skip_ws(c);
                }
            }
            if (c->i >= c->n || c->s[c->i] != '}') return fail_at(c, at, ERR_FORMAT, "expected '}' to close the repetition");
            c->i++;
            if (max < min) return fail_at(c, at, ERR_FORMAT, "repetition {%u,%u}: maximum below minimum", min, max);
        } else {
            return 0;
        }
        if (++n_post > GBNF_MAX_POSTFIX)
            return fail_at(c, at, ERR_RANGE, "more than %d repetition operators on one item", GBNF_MAX_POSTFIX);
        int rc = wrap_rep(c, item, at, min, max);
        if (rc) return rc;
    }
}

/* A sequence: returns a SEQ node (possibly without children). */
static int parse_seq(cur *c, uint32_t *out) {
    uint32_t seq = node_new(c, GN_SEQ, c->i), last = 0;
    if (!seq) return ERR_NOMEM;
    for (;;) {
        skip_ws(c);
        if (c->i >= c->n) break;
        char ch = c->s[c->i];
        if (ch == '|' || ch == ')') break;
        if (is_name_char(ch) && at_definition(c, c->i)) break;
        if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
            return fail_at(c, c->i, ERR_FORMAT, "'%c' without an item before it", ch);
        uint32_t item;
        int rc = parse_item(c, &item);
        if (rc) return rc;
        rc = parse_postfix(c, &item);
        if (rc) return rc;
        if (last)
            c->a->nodes[last].next = item;
        else
            c->a->nodes[seq].first = item;
        last = item;
    }
    *out = seq;
    return 0;
}

static int parse_alts(cur *c, uint32_t *out) {
    uint32_t alt = node_new(c, GN_ALT, c->i), last = 0;
    if (!alt) return ERR_NOMEM;
    for (;;) {
        uint32_t seq = 0;
        int rc = parse_seq(c, &seq);
        if (rc) return rc;
        if (last)
            c->a->nodes[last].next = seq;
        else
            c->a->nodes[alt].first = seq;
        last = seq;
        skip_ws(c);
        if (c->i < c->n && c->s[c->i] == '|') {
            c->i++;
            continue;
        }
        break;
    }
    /* one alternative: the sequence itself */
    *out = c->a->nodes[alt].first == last ? last : alt;
    return 0;
}

int grammar__gbnf_parse(const char *src, size_t len, gast *a, err_t *e) {
    a->src = src;
    a->src_len = len;
    cur c = {.s = src, .n = len, .i = 0, .a = a, .e = e};
    if (len > GRAMMAR_MAX_SRC_BYTES)
        return err_set(e, ERR_RANGE, "1:1: grammar of %zu bytes exceeds the limit of %u", len, GRAMMAR_MAX_SRC_BYTES);
    for (;;) {
        skip_ws(&c);
        if (c.i >= c.n) break;
        size_t at = c.i;
        size_t j = name_end(&c, at);
        if (j == at || !at_definition(&c, at)) {
            char ch = c.s[at];
            if ((uint8_t)ch >= 0x20 && (uint8_t)ch < 0x7F)
                return fail_at(&c, at, ERR_FORMAT, "expected a rule definition 'name ::= ...', found '%c'", ch);
            return fail_at(&c, at, ERR_FORMAT, "expected a rule definition 'name ::= ...'");
        }
        uint32_t r;
        int rc = rule_lookup(&c, at, j - at, &r);
        if (rc) return rc;
        if (a->rules[r].body) {
            uint32_t l0, c0;
            grammar__gbnf_linecol(src, len, a->rules[r].def_pos, &l0, &c0);
            return fail_at(&c, at, ERR_FORMAT, "rule '%.*s' defined twice (first at %u:%u)", (int)MIN(j - at, 64),
                           src + at, l0, c0);
        }
        a->rules[r].def_pos = (uint32_t)at;
        c.i = j;
        skip_ws(&c);
        c.i += 3; /* ::= (at_definition checked it) */
        uint32_t body;
        rc = parse_alts(&c, &body);
        if (rc) return rc;
        if (c.i < c.n && c.s[c.i] == ')') return fail_at(&c, c.i, ERR_FORMAT, "unexpected ')'");
        a->rules[r].body = body;
    }
    for (size_t r = 0; r < a->n_rules; r++) {
        if (!a->rules[r].body)
            return fail_at(&c, a->rules[r].ref_pos, ERR_FORMAT, "undefined rule '%.*s'",
                           (int)MIN(a->rules[r].name_len, 64), src + a->rules[r].name_off);
    }
    uint32_t root = UINT32_MAX;
    for (size_t r = 0; r < a->n_rules; r++)
        if (a->rules[r].name_len == 4 && memcmp(src + a->rules[r].name_off, "root", 4) == 0) root = (uint32_t)r;
    if (root == UINT32_MAX) return fail_at(&c, len, ERR_FORMAT, "missing rule 'root'");
    return 0;
}

void grammar__gast_free(gast *a) {
    if (!a) return;
    free(a->nodes);
    free(a->lit);
    free(a->ranges);
    free(a->rules);
    free(a->name_tab);
    memset(a, 0, sizeof *a);
}
