/*
 * regex.c — the pattern subset of JSON Schema (see regex.h): a recursive
 * descent parser into a syntax tree of code point sets, GBNF output, and
 * an inclusion test between two patterns by exploring the product of their
 * Thompson automata (subset construction on both, on the fly).
 */
#include "regex.h"

#include <ctype.h>

#include "grammar.h"

#define RX_MAX_DEPTH 64 /* nested groups */

typedef regex_set cpset;

void regex_set_add(cpset *s, uint32_t a, uint32_t b) {
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
    if (s->n) qsort(s->iv, (size_t)s->n, sizeof *s->iv, iv_cmp); /* iv is NULL when empty */
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
        if (b < 0xD800 || a > 0xDFFF) regex_set_add(&t, a, b);
        else {
            if (a < 0xD800) regex_set_add(&t, a, 0xD7FF);
            if (b > 0xDFFF) regex_set_add(&t, 0xE000, b);
        }
    }
    free(s->iv);
    *s = t;
}
void regex_set_negate(cpset *s) {
    cs_norm(s);
    cpset t = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->iv[i][0] > next) regex_set_add(&t, next, s->iv[i][0] - 1);
        next = s->iv[i][1] + 1;
    }
    if (next <= 0x10FFFF) regex_set_add(&t, next, 0x10FFFF);
    free(s->iv);
    *s = t;
    cs_norm(s);
}

enum { RX_EMPTY, RX_SET, RX_CAT, RX_ALT, RX_REP, RX_LOOK };
typedef struct regex rx;
struct regex {
    int kind;
    cpset set;
    struct regex *a, *b; /* CAT, ALT: a b; REP, LOOK: a */
    int min, max;     /* REP; max -1 = unbounded. LOOK: min 1 for (?!X), max 1 when X ends in $ */
};

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
    case RX_LOOK: return true;
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
    unsigned flags;
    err_t *e;
    bool in_look; /* inside a lookahead (they do not nest)               */
    int n_look;
    int rc;
} rxp;

static rx *rx_fail(rxp *p, int code, const char *what) {
    if (!p->rc) p->rc = err_set(p->e, code, "%s at offset %zu", what, p->i);
    return NULL;
}

static void cs_class_escape(cpset *s, char c) {
    switch (c) {
    case 'd': regex_set_add(s, '0', '9'); break;
    case 'w':
        regex_set_add(s, '0', '9');
        regex_set_add(s, 'A', 'Z');
        regex_set_add(s, 'a', 'z');
        regex_set_add(s, '_', '_');
        break;
    case 's': {
        static const uint32_t ws[][2] = {{9, 13},         {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                         {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                         {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < ARRAY_LEN(ws); i++) regex_set_add(s, ws[i][0], ws[i][1]);
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
        regex_set_negate(&t);
        for (int i = 0; i < t.n; i++) regex_set_add(set, t.iv[i][0], t.iv[i][1]);
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
    int k = utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, cp);
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
            regex_set_add(&r->set, a, b);
        } else regex_set_add(&r->set, a, a);
    }
    if (neg) regex_set_negate(&r->set);
    else cs_norm(&r->set);
    if (!r->set.n) {
        rx_free(r);
        return rx_fail(p, ERR_UNSUPPORTED, "character class that matches nothing");
    }
    return r;
}

/* Anchor contexts of an alternation: none (a group), the whole pattern (a
 * branch may start with ^ and end with $), a lookahead (a branch may end
 * with $). */
enum { AN_NONE, AN_TOP, AN_LOOK };
static rx *rx_alt(rxp *p, int ctx, bool *start, bool *end);

static rx *rx_atom(rxp *p) {
    char c = p->s[p->i];
    if (c == '(') {
        p->i++;
        bool look = false, neg = false;
        if (p->i + 1 < p->n && p->s[p->i] == '?') {
            char k = p->s[p->i + 1];
            if (k == ':') p->i += 2;
            else if ((k == '=' || k == '!') && (p->flags & REGEX_LOOKAHEAD) && !p->in_look) {
                p->i += 2;
                look = true;
                neg = k == '!';
            } else return rx_fail(p, ERR_UNSUPPORTED, "lookbehind, nested lookahead, named group or inline flag");
        }
        if (++p->depth > RX_MAX_DEPTH) return rx_fail(p, ERR_RANGE, "groups nest too deep");
        bool at_end = false;
        if (look) p->in_look = true;
        rx *r = rx_alt(p, look ? AN_LOOK : AN_NONE, NULL, &at_end);
        p->in_look = false;
        p->depth--;
        if (!r) return NULL;
        if (p->i >= p->n || p->s[p->i] != ')') {
            rx_free(r);
            return rx_fail(p, ERR_INVALID, "missing ')'");
        }
        p->i++;
        if (look) {
            rx *l = rx_new(RX_LOOK);
            l->a = r;
            l->min = neg;
            l->max = at_end;
            p->n_look++;
            return l;
        }
        return r;
    }
    if (c == '[') {
        p->i++;
        return rx_class(p);
    }
    rx *r = rx_new(RX_SET);
    if (c == '.') {
        p->i++;
        regex_set_add(&r->set, '\n', '\n');
        regex_set_add(&r->set, '\r', '\r');
        regex_set_add(&r->set, 0x2028, 0x2029);
        regex_set_negate(&r->set);
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
    if (kind == 1) regex_set_add(&r->set, cp, cp);
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

/* any code point, any number of times: what an unanchored end searches past */
static rx *rx_any_star(void) {
    rx *a = rx_new(RX_SET);
    regex_set_add(&a->set, 0, 0x10FFFF);
    regex_set_negate(&a->set);
    regex_set_negate(&a->set); /* normalized: surrogates removed */
    rx *r = rx_new(RX_REP);
    r->a = a;
    r->max = -1;
    return r;
}

static rx *rx_concat(rx *a, rx *b) {
    if (!a) return b;
    rx *c = rx_new(RX_CAT);
    c->a = a;
    c->b = b;
    return c;
}

/* One branch of an alternation; in an anchor context, a leading ^ (top
 * level) and a trailing $ (before '|' or the context's end) set *bs, *be. */
static rx *rx_cat(rxp *p, int ctx, bool *bs, bool *be) {
    rx *r = NULL;
    *bs = *be = false;
    if (ctx == AN_TOP && p->i < p->n && p->s[p->i] == '^') *bs = true, p->i++;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        if (p->s[p->i] == '$' && ctx != AN_NONE) {
            bool last = p->i + 1 == p->n ? ctx == AN_TOP
                                          : p->s[p->i + 1] == '|' || (ctx == AN_LOOK && p->s[p->i + 1] == ')');
            if (last) {
                *be = true;
                p->i++;
                break;
            }
        }
        rx *x = rx_repeat(p);
        if (!x) {
            rx_free(r);
            return NULL;
        }
        r = rx_concat(r, x);
    }
    return r ? r : rx_new(RX_EMPTY);
}

/* Branches a | b | ...; in an anchor context, when some branch is anchored
 * at an end the whole is, and the branches that are not get any* there
 * (JSON Schema searches unanchored patterns): ^a|b is ^(a.*|.*b.*). */
static rx *rx_alt(rxp *p, int ctx, bool *start, bool *end) {
    rx *br[256];
    bool bs[256], be[256];
    int n = 0;
    bool any_s = false, any_e = false;
    for (;;) {
        if (n == 256) {
            while (n) rx_free(br[--n]);
            return rx_fail(p, ERR_RANGE, "more than 256 alternatives in one group");
        }
        br[n] = rx_cat(p, ctx, &bs[n], &be[n]);
        if (!br[n]) {
            while (n) rx_free(br[--n]);
            return NULL;
        }
        any_s |= bs[n];
        any_e |= be[n];
        n++;
        if (p->i < p->n && p->s[p->i] == '|') p->i++;
        else break;
    }
    rx *r = NULL;
    for (int i = 0; i < n; i++) {
        rx *x = br[i];
        if (any_s && !bs[i]) x = rx_concat(rx_any_star(), x);
        if (any_e && !be[i]) x = rx_concat(x, rx_any_star());
        if (!r) r = x;
        else {
            rx *a = rx_new(RX_ALT);
            a->a = r;
            a->b = x;
            r = a;
        }
    }
    if (start) *start = any_s;
    if (end) *end = any_e;
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
            if (a < '"') regex_set_add(&raw, a, '"' - 1);
            a = '"' + 1;
        }
        if (a > z) continue;
        if (a <= '\\' && z >= '\\') {
            if (a < '\\') regex_set_add(&raw, a, '\\' - 1);
            a = '\\' + 1;
        }
        if (a <= z) regex_set_add(&raw, a, z);
    }
    int n_alt = 0;
    sbuf_puts(b, "( ");
    if (raw.n) {
        sbuf_puts(b, "[");
        for (int i = 0; i < raw.n; i++) {
            gbnf_cp(b, raw.iv[i][0], true);
            if (raw.iv[i][1] != raw.iv[i][0]) {
                sbuf_puts(b, "-");
                gbnf_cp(b, raw.iv[i][1], true);
            }
        }
        sbuf_puts(b, "]");
        n_alt++;
    }
    free(raw.iv);
    if (quote) sbuf_printf(b, "%s\"\\\\\\\"\"", n_alt++ ? " | " : "");
    if (bslash) sbuf_printf(b, "%s\"\\\\\\\\\"", n_alt++ ? " | " : "");
    static const char short_esc[][2] = {{'\b', 'b'}, {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};
    for (size_t k = 0; k < ARRAY_LEN(short_esc); k++)
        if (esc[(int)short_esc[k][0]]) {
            sbuf_printf(b, "%s\"\\\\%c\"", n_alt++ ? " | " : "", short_esc[k][1]);
            esc[(int)short_esc[k][0]] = false;
        }
    for (int hi = 0; hi < 2; hi++) {
        bool any = false;
        for (int lo = 0; lo < 16; lo++) any |= esc[hi * 16 + lo];
        if (!any) continue;
        sbuf_printf(b, "%s\"\\\\u00%d\" [", n_alt++ ? " | " : "", hi);
        for (int lo = 0; lo < 16; lo++)
            if (esc[hi * 16 + lo]) sbuf_printf(b, "%x", lo);
        sbuf_puts(b, "]");
    }
    sbuf_puts(b, " )");
}

void regex_emit_set(sbuf *b, const regex_set *s) { emit_set(b, s); }

/* A set as one GBNF class of the code points themselves (guided_regex). */
static void emit_set_raw(sbuf *b, const cpset *s) {
    sbuf_puts(b, "[");
    for (int i = 0; i < s->n; i++) {
        gbnf_cp(b, s->iv[i][0], true);
        if (s->iv[i][1] != s->iv[i][0]) {
            sbuf_puts(b, "-");
            gbnf_cp(b, s->iv[i][1], true);
        }
    }
    sbuf_puts(b, "]");
}

/* Writes r as a GBNF sequence (nothing for an empty r): of JSON-escaped
 * forms, or of the code points themselves (raw). */
static void emit(sbuf *b, const rx *r, bool raw) {
    switch (r->kind) {
    case RX_LOOK: PANIC("regex_emit: a lookahead (the caller must use regex_dfa_build)");
    case RX_EMPTY: return;
    case RX_SET:
        if (raw) emit_set_raw(b, &r->set);
        else emit_set(b, &r->set);
        return;
    case RX_CAT: {
        size_t before = b->n;
        emit(b, r->a, raw);
        if (!rx_is_empty(r->b)) {
            if (b->n > before) sbuf_puts(b, " ");
            emit(b, r->b, raw);
        }
        return;
    }
    case RX_ALT: {
        /* flatten; empty branches make the whole group optional */
        bool a_e = rx_is_empty(r->a), b_e = rx_is_empty(r->b);
        if (a_e && b_e) return;
        sbuf_puts(b, "( ");
        if (a_e) emit(b, r->b, raw);
        else if (b_e) emit(b, r->a, raw);
        else {
            emit(b, r->a, raw);
            sbuf_puts(b, " | ");
            emit(b, r->b, raw);
        }
        sbuf_puts(b, " )");
        if (a_e || b_e) sbuf_puts(b, "?");
        return;
    }
    case RX_REP: {
        if (rx_is_empty(r)) return;
        sbuf_puts(b, "( ");
        emit(b, r->a, raw);
        sbuf_puts(b, " )");
        if (r->min == 0 && r->max == -1) sbuf_puts(b, "*");
        else if (r->min == 1 && r->max == -1) sbuf_puts(b, "+");
        else if (r->min == 0 && r->max == 1) sbuf_puts(b, "?");
        else if (r->max == -1) sbuf_printf(b, "{%d,}", r->min);
        else if (r->min == r->max) sbuf_printf(b, "{%d}", r->min);
        else sbuf_printf(b, "{%d,%d}", r->min, r->max);
        return;
    }
    }
}

void regex_emit(sbuf *b, const rx *r) { emit(b, r, false); }

void regex_emit_raw(sbuf *b, const rx *r) { emit(b, r, true); }

/* Length range of r in code points (*hi -1: unbounded). */
void regex_len(const rx *r, long long *lo, long long *hi) {
    long long a, b, c, d;
    switch (r->kind) {
    case RX_LOOK:
    case RX_EMPTY: *lo = *hi = 0; return;
    case RX_SET: *lo = *hi = 1; return;
    case RX_CAT:
        regex_len(r->a, &a, &b);
        regex_len(r->b, &c, &d);
        *lo = a + c;
        *hi = b < 0 || d < 0 ? -1 : b + d;
        return;
    case RX_ALT:
        regex_len(r->a, &a, &b);
        regex_len(r->b, &c, &d);
        *lo = MIN(a, c);
        *hi = b < 0 || d < 0 ? -1 : MAX(b, d);
        return;
    case RX_REP:
        regex_len(r->a, &a, &b);
        *lo = a * r->min;
        *hi = r->max < 0 || b < 0 ? (b == 0 ? 0 : -1) : b * r->max;
        return;
    }
}

/* Narrows an anchored regex whose pieces have fixed lengths but one, a
 * repetition of a one-character set, to total lengths mn..mx. */
bool regex_clamp(rx *r, long long mn, long long mx) {
    rx *var = NULL;
    long long fixed = 0;
    rx *stack[64];
    int n = 0;
    stack[n++] = r;
    while (n) {
        rx *x = stack[--n];
        if (x->kind == RX_CAT) {
            if (n + 2 > 64) return false;
            stack[n++] = x->b;
            stack[n++] = x->a;
            continue;
        }
        long long lo, hi;
        regex_len(x, &lo, &hi);
        if (lo == hi) {
            fixed += lo;
            continue;
        }
        if (var || x->kind != RX_REP || x->a->kind != RX_SET) return false;
        var = x;
    }
    if (!var) return fixed >= mn && (mx < 0 || fixed <= mx);
    long long lo = MAX((long long)var->min, mn - fixed);
    long long hi = var->max < 0 ? (mx < 0 ? -1 : mx - fixed) : (mx < 0 ? var->max : MIN(var->max, mx - fixed));
    if (hi >= 0 && hi < lo) return false;
    if (lo > GRAMMAR_MAX_REPEAT || hi > GRAMMAR_MAX_REPEAT) return false;
    var->min = (int)lo;
    var->max = (int)hi;
    return true;
}


/* ---- parsing a whole pattern -------------------------------------------- */

void regex_pat_free(regex_pat *p) {
    if (!p) return;
    rx_free(p->r);
    memset(p, 0, sizeof *p);
}

int regex_parse(const char *s, size_t n, unsigned flags, regex_pat *out, err_t *e) {
    memset(out, 0, sizeof *out);
    rxp p = {.s = s, .n = n, .e = e, .flags = flags};
    rx *r = rx_alt(&p, AN_TOP, &out->start, &out->end);
    if (!r) return p.rc;
    if (p.i != n) {
        rx_free(r);
        return err_set(e, ERR_INVALID, "unexpected '%c' at offset %zu", s[p.i], p.i);
    }
    out->r = r;
    out->n_look = p.n_look;
    return 0;
}

static bool and_look(regex_pat *a, regex_pat *b, bool neg) {
    if (b->n_look || !b->r) return false;
    rx *l = rx_new(RX_LOOK);
    l->min = neg;
    l->a = b->r;
    if (!b->start) l->a = rx_concat(rx_any_star(), l->a);
    l->max = b->end;
    b->r = NULL;
    regex_pat_free(b);
    rx *body = a->r;
    if (!a->start) body = rx_concat(rx_any_star(), body);
    a->r = rx_concat(l, body);
    a->start = true;
    a->n_look++;
    return true;
}

bool regex_and(regex_pat *a, regex_pat *b) { return and_look(a, b, false); }
bool regex_and_not(regex_pat *a, regex_pat *b) { return and_look(a, b, true); }

bool regex_and_len(regex_pat *a, long long mn, long long mx) {
    if (mn > GRAMMAR_MAX_REPEAT || mx > GRAMMAR_MAX_REPEAT) return false;
    rx *rep = rx_any_star();
    rep->min = (int)mn;
    rep->max = (int)mx;
    regex_pat b = {.r = rep, .start = true, .end = true};
    return regex_and(a, &b);
}

/* ---- automata: Thompson NFAs, threads with lookahead obligations --------
 * Each pattern becomes an NFA over code points (one state per set edge or
 * split; bounded repetitions are copied out). A lookahead (?=X) is a state
 * that starts X's own fragment of the NFA as an *obligation* of the thread
 * passing through it: the thread is (NFA state, obligations), each
 * obligation (which lookahead, the closed set of fragment states it is in)
 * steps along with the thread's own input. A positive obligation is
 * discharged when its fragment accepts (or must accept at the input's end
 * for X$) and kills the thread when its set empties; a negative one the
 * other way round. The deterministic automaton's states are the interned
 * sets of threads (subset construction, on the fly).
 *
 * L(a) ⊆ L(b) is decided by a breadth-first walk over pairs of such states:
 * at each pair the code points are cut at every interval boundary of the
 * edges leaving either, one representative per piece is stepped, and a pair
 * where a accepts and b does not is a counterexample. regex_dfa_build walks
 * one pattern's states the same way. State, pair and work counts are
 * bounded (REGEX_SUBSET_MAX_STATES, REGEX_MAX_WORK): past that, "unknown". */

typedef struct {
    int set;    /* index into sets, or -1: epsilon                         */
    int out1, out2; /* -1: none                                             */
    int look;   /* >= 0: entering lookahead `look` (epsilon to out1)      */
} nst;

typedef struct {
    int start, accept; /* the lookahead's fragment                         */
    bool neg, end;     /* (?!X); X ends in $                                */
} nlook;

typedef struct {
    nst *st;
    int n, cap;
    const cpset **sets;
    int n_sets, cap_sets;
    nlook *looks;
    int n_looks, cap_looks;
    cpset own[2]; /* "any code point" and "any but line terminators"     */
    bool over;
} nfa;

static int nfa_add(nfa *a, int set, int o1, int o2) {
    if (a->n >= REGEX_SUBSET_MAX_STATES) {
        a->over = true;
        return -1;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->st = xrealloc(a->st, sizeof *a->st * (size_t)a->cap);
    }
    a->st[a->n] = (nst){set, o1, o2, -1};
    return a->n++;
}
/* Adds an epsilon edge from -> to (each state has two slots). */
static void link(nfa *a, int from, int to) {
    if (a->st[from].set >= 0 || a->st[from].look >= 0) a->over = true;
    else if (a->st[from].out1 < 0) a->st[from].out1 = to;
    else if (a->st[from].out2 < 0) a->st[from].out2 = to;
    else a->over = true;
}

static int nfa_set(nfa *a, const cpset *s) {
    if (a->n_sets == a->cap_sets) {
        a->cap_sets = a->cap_sets ? a->cap_sets * 2 : 16;
        a->sets = xrealloc(a->sets, sizeof *a->sets * (size_t)a->cap_sets);
    }
    a->sets[a->n_sets] = s;
    return a->n_sets++;
}
static void nfa_free(nfa *a) {
    free(a->st);
    free(a->sets);
    free(a->looks);
    free(a->own[0].iv);
    free(a->own[1].iv);
}

/* Builds r from state `from`; returns the state where it ends (-1 over). */
static int nfa_build(nfa *a, const rx *r, int from) {
    if (from < 0) return -1;
    switch (r->kind) {
    case RX_EMPTY: return from;
    case RX_SET: {
        int to = nfa_add(a, -1, -1, -1);
        if (to < 0) return -1;
        /* from ──set──▶ to: `from` is a fresh state (out1 unused so far) */
        int mid = nfa_add(a, nfa_set(a, &r->set), to, -1);
        if (mid < 0) return -1;
        link(a, from, mid);
        return to;
    }
    case RX_CAT: return nfa_build(a, r->b, nfa_build(a, r->a, from));
    case RX_ALT: {
        int s1 = nfa_add(a, -1, -1, -1), s2 = nfa_add(a, -1, -1, -1), end = nfa_add(a, -1, -1, -1);
        if (end < 0) return -1;
        link(a, from, s1);
        int split = nfa_add(a, -1, s2, -1);
        if (split < 0) return -1;
        a->st[s1].out2 = split; /* s1 also reaches s2, through split */
        int e1 = nfa_build(a, r->a, s1), e2 = nfa_build(a, r->b, s2);
        if (e1 < 0 || e2 < 0) return -1;
        link(a, e1, end);
        link(a, e2, end);
        return end;
    }
    case RX_REP: {
        int cur = from;
        for (int i = 0; i < r->min && cur >= 0; i++) {
            int nx = nfa_add(a, -1, -1, -1);
            if (nx < 0) return -1;
            link(a, cur, nx);
            cur = nfa_build(a, r->a, nx);
        }
        if (cur < 0) return -1;
        int end = nfa_add(a, -1, -1, -1);
        if (end < 0) return -1;
        if (r->max < 0) { /* loop: cur ─▶ body ─▶ cur, cur ─▶ end */
            int body = nfa_add(a, -1, -1, -1);
            if (body < 0) return -1;
            int hub = nfa_add(a, -1, body, end);
            if (hub < 0) return -1;
            link(a, cur, hub);
            int be = nfa_build(a, r->a, body);
            if (be < 0) return -1;
            link(a, be, hub);
            return end;
        }
        for (int i = r->min; i < r->max && cur >= 0; i++) {
            int nx = nfa_add(a, -1, -1, -1);
            if (nx < 0) return -1;
            int hub = nfa_add(a, -1, nx, end);
            if (hub < 0) return -1;
            link(a, cur, hub);
            cur = nfa_build(a, r->a, nx);
        }
        if (cur < 0) return -1;
        link(a, cur, end);
        return end;
    }
    case RX_LOOK: {
        /* X's fragment stands apart: entered only as an obligation */
        int ls = nfa_add(a, -1, -1, -1);
        int la = nfa_build(a, r->a, ls);
        int to = nfa_add(a, -1, -1, -1);
        if (la < 0 || to < 0) return -1;
        if (a->n_looks == a->cap_looks) {
            a->cap_looks = a->cap_looks ? a->cap_looks * 2 : 4;
            a->looks = xrealloc(a->looks, sizeof *a->looks * (size_t)a->cap_looks);
        }
        int k = a->n_looks++;
        a->looks[k] = (nlook){ls, la, r->min != 0, r->max != 0};
        int l = nfa_add(a, -1, to, -1);
        if (l < 0) return -1;
        a->st[l].look = k;
        link(a, from, l);
        return to;
    }
    }
    return -1;
}

/* The NFA of: [any*] r [any*] (per anchors). Start state 0; *accept the
 * accepting state. */
static bool nfa_of(nfa *a, const rx *r, bool start, bool end, int *accept) {
    memset(a, 0, sizeof *a);
    regex_set_add(&a->own[0], 0, 0x10FFFF);
    regex_set_negate(&a->own[0]);
    regex_set_negate(&a->own[0]); /* normalized: surrogates removed */
    int any = nfa_set(a, &a->own[0]);
    int s0 = nfa_add(a, -1, -1, -1);
    int cur = s0;
    if (!start) { /* s0 ─▶ hub, hub ─any─▶ hub, hub ─▶ next */
        int next = nfa_add(a, -1, -1, -1);
        int hub = nfa_add(a, -1, -1, next);
        int loop = nfa_add(a, any, hub, -1);
        a->st[hub].out1 = loop;
        a->st[s0].out1 = hub;
        cur = next;
    }
    cur = nfa_build(a, r, cur);
    if (cur >= 0 && !end) {
        int next = nfa_add(a, -1, -1, -1);
        int hub = nfa_add(a, -1, -1, next);
        int loop = nfa_add(a, any, hub, -1);
        if (next < 0 || hub < 0 || loop < 0) return false;
        a->st[hub].out1 = loop;
        link(a, cur, hub);
        cur = next;
    }
    *accept = cur;
    return cur >= 0 && !a->over;
}

/* Interned int vectors. */
typedef struct {
    int *pool;
    size_t n_pool, cap_pool;
    int (*rng)[2]; /* (offset, length) per vector */
    int n, cap;
    int *tab;
    int tab_cap;
} setstore;

static uint64_t ints_hash(const int *v, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)v[i]) * 1099511628211ull;
    return h;
}

static int set_intern(setstore *s, const int *v, int n) {
    if (s->n * 2 >= s->tab_cap) {
        int cap = s->tab_cap ? s->tab_cap * 2 : 256;
        int *t = xmalloc(sizeof *t * (size_t)cap);
        for (int i = 0; i < cap; i++) t[i] = -1;
        for (int k = 0; k < s->n; k++) {
            uint64_t h = ints_hash(s->pool + s->rng[k][0], s->rng[k][1]);
            int j = (int)(h & (uint64_t)(cap - 1));
            while (t[j] >= 0) j = (j + 1) & (cap - 1);
            t[j] = k;
        }
        free(s->tab);
        s->tab = t;
        s->tab_cap = cap;
    }
    uint64_t h = ints_hash(v, n);
    int j = (int)(h & (uint64_t)(s->tab_cap - 1));
    while (s->tab[j] >= 0) {
        int k = s->tab[j];
        if (s->rng[k][1] == n && (n == 0 || !memcmp(s->pool + s->rng[k][0], v, sizeof *v * (size_t)n))) return k;
        j = (j + 1) & (s->tab_cap - 1);
    }
    if (s->n_pool + (size_t)n > s->cap_pool) {
        s->cap_pool = (s->n_pool + (size_t)n) * 2 + 64;
        s->pool = xrealloc(s->pool, sizeof *s->pool * s->cap_pool);
    }
    if (n) memcpy(s->pool + s->n_pool, v, sizeof *v * (size_t)n);
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->rng = xrealloc(s->rng, sizeof *s->rng * (size_t)s->cap);
    }
    s->rng[s->n][0] = (int)s->n_pool;
    s->rng[s->n][1] = n;
    s->n_pool += (size_t)n;
    s->tab[j] = s->n;
    return s->n++;
}

static void setstore_free(setstore *s) {
    free(s->pool);
    free(s->rng);
    free(s->tab);
}

#define SS_V(s, id) ((s)->pool + (s)->rng[id][0])
#define SS_N(s, id) ((s)->rng[id][1])

static int int_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}
static int pair_cmp(const void *a, const void *b) {
    const int *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* The epsilon closure of seeds (n of them) in a fragment without
 * lookaheads, sorted, into out (a->n entries of room); returns its size.
 * mark: a->n ints, epoch-stamped. */
static int closure(const nfa *a, const int *seeds, int n, int *out, int *mark, int epoch, int *stack) {
    int sp = 0, m = 0;
    for (int i = 0; i < n; i++) stack[sp++] = seeds[i];
    while (sp) {
        int s = stack[--sp];
        if (s < 0 || mark[s] == epoch) continue;
        mark[s] = epoch;
        const nst *t = &a->st[s];
        if (t->set >= 0 || (t->out1 < 0 && t->out2 < 0)) out[m++] = s; /* a set edge, or a dead end (accept) */
        if (t->set < 0) {
            if (t->out1 >= 0) stack[sp++] = t->out1;
            if (t->out2 >= 0) stack[sp++] = t->out2;
        }
    }
    qsort(out, (size_t)m, sizeof *out, int_cmp);
    return m;
}

static bool set_has(const cpset *s, uint32_t c) {
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < s->iv[mid][0]) hi = mid - 1;
        else if (c > s->iv[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

/* One pattern's automaton, determinized on the fly. */
typedef struct {
    nfa a;
    int accept;
    setstore ss; /* closed state sets of lookahead fragments              */
    setstore os; /* obligation lists: sorted (lookahead, set) pairs       */
    setstore ds; /* automaton states: sorted (NFA state, obligations)     */
    int *buf, *mark, *stack, *seeds, *look_s0;
    int epoch;
    int *tv;            /* thread work: pairs                             */
    size_t n_tv, cap_tv;
    int *tst;           /* closure stack: pairs                           */
    size_t n_tst, cap_tst;
    uint64_t *vis;      /* visited (state, obligations) of one closure    */
    size_t vis_cap, n_vis;
    int *ob;            /* obligation scratch: pairs                      */
    size_t cap_ob;
    uint32_t *cpool;    /* each state's sorted distinct cuts, once known  */
    size_t n_cpool, cap_cpool;
    long *coff;         /* per state: offset into cpool, -1 unknown       */
    int *clen;
    int ccap;
    uint64_t *memo;     /* (state, code point) -> state + 1, cached steps */
    int *memo_to;
    size_t memo_cap, n_memo;
    long work;
    bool over;
} side;

/* A slot for a 64-bit key in a power-of-two table. */
static size_t hslot(uint64_t k, size_t cap) { return (size_t)mix64(k) & (cap - 1); }

static void push_pair(int **v, size_t *n, size_t *cap, int x, int y) {
    if (*n + 2 > *cap) {
        *cap = (*n + 2) * 2 + 32;
        *v = xrealloc(*v, sizeof **v * *cap);
    }
    (*v)[(*n)++] = x;
    (*v)[(*n)++] = y;
}

/* Steps a closed fragment set by c: the interned closure. */
static int frag_step(side *sd, int set_id, uint32_t c) {
    int n = SS_N(&sd->ss, set_id), k = 0;
    for (int i = 0; i < n; i++) {
        const nst *t = &sd->a.st[SS_V(&sd->ss, set_id)[i]];
        if (t->set >= 0 && set_has(sd->a.sets[t->set], c)) sd->seeds[k++] = t->out1;
    }
    int m = closure(&sd->a, sd->seeds, k, sd->buf, sd->mark, ++sd->epoch, sd->stack);
    sd->work += m + n;
    return set_intern(&sd->ss, sd->buf, m);
}

static bool frag_has(const side *sd, int set_id, int state) {
    const int *v = SS_V(&sd->ss, set_id);
    int lo = 0, hi = SS_N(&sd->ss, set_id) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (v[mid] == state) return true;
        if (v[mid] < state) lo = mid + 1;
        else hi = mid - 1;
    }
    return false;
}

/* What becomes of obligation (k, set): 1 keep, 0 drop (met, or a negative
 * one that can no longer match), -1 the thread dies. */
static int oblig_fate(const side *sd, int k, int set) {
    const nlook *l = &sd->a.looks[k];
    if (SS_N(&sd->ss, set) == 0) return l->neg ? 0 : -1;
    if (!l->end && frag_has(sd, set, l->accept)) return l->neg ? -1 : 0;
    return 1;
}

/* Interns the obligation pairs in sd->ob[0..n) (sorted, deduplicated). */
static int oblig_intern(side *sd, size_t n) {
    if (n > 2) qsort(sd->ob, n / 2, sizeof(int) * 2, pair_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i += 2)
        if (!m || sd->ob[m - 2] != sd->ob[i] || sd->ob[m - 1] != sd->ob[i + 1]) {
            sd->ob[m++] = sd->ob[i];
            sd->ob[m++] = sd->ob[i + 1];
        }
    return set_intern(&sd->os, sd->ob, (int)m);
}

static void ob_room(side *sd, size_t n) {
    if (n > sd->cap_ob) {
        sd->cap_ob = n * 2 + 16;
        sd->ob = xrealloc(sd->ob, sizeof *sd->ob * sd->cap_ob);
    }
}

/* Obligations o after the code point c; -1: the thread dies. */
static int oblig_step(side *sd, int o, uint32_t c) {
    int n = SS_N(&sd->os, o);
    if (!n) return o;
    ob_room(sd, (size_t)n);
    size_t m = 0;
    sd->work += n;
    for (int i = 0; i < n; i += 2) {
        int k = SS_V(&sd->os, o)[i];
        int s2 = frag_step(sd, SS_V(&sd->os, o)[i + 1], c);
        int f = oblig_fate(sd, k, s2);
        if (f < 0) return -1;
        if (f) {
            sd->ob[m++] = k;
            sd->ob[m++] = s2;
        }
    }
    return oblig_intern(sd, m);
}

/* Obligations o with lookahead k entered; -1: the thread dies. */
static int oblig_enter(side *sd, int o, int k) {
    if (sd->look_s0[k] < 0) {
        int s = sd->a.looks[k].start;
        int m = closure(&sd->a, &s, 1, sd->buf, sd->mark, ++sd->epoch, sd->stack);
        sd->look_s0[k] = set_intern(&sd->ss, sd->buf, m);
    }
    int s0 = sd->look_s0[k];
    int f = oblig_fate(sd, k, s0);
    if (f <= 0) return f < 0 ? -1 : o;
    int n = SS_N(&sd->os, o);
    ob_room(sd, (size_t)n + 2);
    if (n) memcpy(sd->ob, SS_V(&sd->os, o), sizeof(int) * (size_t)n);
    sd->ob[n] = k;
    sd->ob[n + 1] = s0;
    return oblig_intern(sd, (size_t)n + 2);
}

static bool vis_add(side *sd, uint64_t key) {
    if (sd->n_vis * 2 + 2 >= sd->vis_cap) {
        size_t cap = sd->vis_cap ? sd->vis_cap * 2 : 256;
        uint64_t *t = xcalloc(cap, sizeof *t);
        for (size_t i = 0; i < sd->vis_cap; i++)
            if (sd->vis[i]) {
                size_t j = hslot(sd->vis[i], cap);
                while (t[j]) j = (j + 1) & (cap - 1);
                t[j] = sd->vis[i];
            }
        free(sd->vis);
        sd->vis = t;
        sd->vis_cap = cap;
    }
    key++;
    size_t j = hslot(key, sd->vis_cap);
    while (sd->vis[j]) {
        if (sd->vis[j] == key) return false;
        j = (j + 1) & (sd->vis_cap - 1);
    }
    sd->vis[j] = key;
    sd->n_vis++;
    return true;
}

/* The closure of the thread pairs in sd->tst, interned as a state. */
static int thread_closure(side *sd) {
    if (sd->n_vis) memset(sd->vis, 0, sizeof *sd->vis * sd->vis_cap);
    sd->n_vis = 0;
    sd->n_tv = 0;
    while (sd->n_tst) {
        int o = sd->tst[--sd->n_tst], q = sd->tst[--sd->n_tst];
        if (q < 0 || !vis_add(sd, ((uint64_t)(uint32_t)q << 32) | (uint32_t)o)) continue;
        sd->work++;
        const nst *t = &sd->a.st[q];
        if (t->set >= 0 || (t->out1 < 0 && t->out2 < 0)) push_pair(&sd->tv, &sd->n_tv, &sd->cap_tv, q, o);
        if (t->set >= 0) continue;
        if (t->look >= 0) {
            int o2 = oblig_enter(sd, o, t->look);
            if (o2 >= 0) push_pair(&sd->tst, &sd->n_tst, &sd->cap_tst, t->out1, o2);
            continue;
        }
        if (t->out1 >= 0) push_pair(&sd->tst, &sd->n_tst, &sd->cap_tst, t->out1, o);
        if (t->out2 >= 0) push_pair(&sd->tst, &sd->n_tst, &sd->cap_tst, t->out2, o);
    }
    if (sd->n_tv > 2) qsort(sd->tv, sd->n_tv / 2, sizeof(int) * 2, pair_cmp);
    sd->work += (long)sd->n_tv + (long)sd->vis_cap / 8; /* the sort, the table cleared */
    return set_intern(&sd->ds, sd->tv, (int)sd->n_tv);
}

static int side_step_raw(side *sd, int id, uint32_t c) {
    sd->n_tst = 0;
    int n = SS_N(&sd->ds, id);
    sd->work += n / 2;
    for (int i = 0; i < n; i += 2) {
        int q = SS_V(&sd->ds, id)[i], o = SS_V(&sd->ds, id)[i + 1];
        const nst *t = &sd->a.st[q];
        if (t->set < 0 || !set_has(sd->a.sets[t->set], c)) continue;
        int o2 = oblig_step(sd, o, c);
        if (o2 >= 0) push_pair(&sd->tst, &sd->n_tst, &sd->cap_tst, t->out1, o2);
    }
    int r = thread_closure(sd);
    if (sd->work > REGEX_MAX_WORK) sd->over = true;
    return r;
}

/* side_step_raw, remembered: product walks revisit a state with the same
 * code points many times (each pair it is part of). */
static int side_step(side *sd, int id, uint32_t c) {
    uint64_t key = (((uint64_t)(uint32_t)id << 32) | c) + 1;
    if (sd->n_memo * 2 + 2 >= sd->memo_cap) {
        size_t cap = sd->memo_cap ? sd->memo_cap * 2 : 1024;
        uint64_t *t = xcalloc(cap, sizeof *t);
        int *tt = xmalloc(sizeof *tt * cap);
        for (size_t i = 0; i < sd->memo_cap; i++)
            if (sd->memo[i]) {
                size_t j = hslot(sd->memo[i], cap);
                while (t[j]) j = (j + 1) & (cap - 1);
                t[j] = sd->memo[i];
                tt[j] = sd->memo_to[i];
            }
        free(sd->memo);
        free(sd->memo_to);
        sd->memo = t;
        sd->memo_to = tt;
        sd->memo_cap = cap;
    }
    size_t j = hslot(key, sd->memo_cap);
    while (sd->memo[j]) {
        if (sd->memo[j] == key) return sd->memo_to[j];
        j = (j + 1) & (sd->memo_cap - 1);
    }
    int r = side_step_raw(sd, id, c);
    /* the table did not grow in between: side_step_raw does not touch it */
    sd->memo[j] = key;
    sd->memo_to[j] = r;
    sd->n_memo++;
    return r;
}

static bool side_dead(const side *sd, int id) { return SS_N(&sd->ds, id) == 0; }

/* Accepting: a thread at the end whose obligations hold at the input's end. */
static bool side_accepts(const side *sd, int id) {
    int n = SS_N(&sd->ds, id);
    for (int i = 0; i < n; i += 2) {
        if (SS_V(&sd->ds, id)[i] != sd->accept) continue;
        int o = SS_V(&sd->ds, id)[i + 1], m = SS_N(&sd->os, o);
        bool ok = true;
        for (int j = 0; j < m && ok; j += 2) {
            const nlook *l = &sd->a.looks[SS_V(&sd->os, o)[j]];
            bool at = frag_has(sd, SS_V(&sd->os, o)[j + 1], l->accept);
            ok = l->neg ? !at : at;
        }
        if (ok) return true;
    }
    return false;
}

/* Appends the interval boundaries of every edge leaving state id. */
static void side_cuts(const side *sd, int id, uint32_t **cuts, size_t *nc, size_t *cap) {
    int n = SS_N(&sd->ds, id);
    for (int i = 0; i < n; i += 2) {
        int q = SS_V(&sd->ds, id)[i], o = SS_V(&sd->ds, id)[i + 1];
        int m = SS_N(&sd->os, o);
        for (int j = -2; j < m; j += 2) {
            int cnt = j < 0 ? 1 : SS_N(&sd->ss, SS_V(&sd->os, o)[j + 1]);
            for (int x = 0; x < cnt; x++) {
                const nst *t = &sd->a.st[j < 0 ? q : SS_V(&sd->ss, SS_V(&sd->os, o)[j + 1])[x]];
                if (t->set < 0) continue;
                const cpset *cs = sd->a.sets[t->set];
                if (*nc + 2 * (size_t)cs->n > *cap) {
                    *cap = (*nc + 2 * (size_t)cs->n) * 2;
                    *cuts = xrealloc(*cuts, sizeof **cuts * *cap);
                }
                for (int k = 0; k < cs->n; k++) {
                    (*cuts)[(*nc)++] = cs->iv[k][0];
                    (*cuts)[(*nc)++] = cs->iv[k][1] + 1;
                }
            }
        }
    }
}

static bool side_init(side *sd, const rx *r, bool start, bool end) {
    memset(sd, 0, sizeof *sd);
    if (!nfa_of(&sd->a, r, start, end, &sd->accept)) return false;
    int n = sd->a.n + 1;
    sd->buf = xmalloc(sizeof(int) * (size_t)n);
    sd->mark = xcalloc((size_t)n, sizeof(int));
    sd->stack = xmalloc(sizeof(int) * (size_t)n * 2 + 16);
    sd->seeds = xmalloc(sizeof(int) * (size_t)n);
    sd->look_s0 = xmalloc(sizeof(int) * (size_t)(sd->a.n_looks + 1));
    for (int k = 0; k < sd->a.n_looks; k++) sd->look_s0[k] = -1;
    int none = set_intern(&sd->os, NULL, 0);
    sd->n_tst = 0;
    push_pair(&sd->tst, &sd->n_tst, &sd->cap_tst, 0, none);
    thread_closure(sd); /* id 0: the start */
    return true;
}

static void side_free(side *sd) {
    nfa_free(&sd->a);
    setstore_free(&sd->ss);
    setstore_free(&sd->os);
    setstore_free(&sd->ds);
    free(sd->buf);
    free(sd->mark);
    free(sd->stack);
    free(sd->seeds);
    free(sd->look_s0);
    free(sd->tv);
    free(sd->tst);
    free(sd->vis);
    free(sd->ob);
    free(sd->memo);
    free(sd->memo_to);
    free(sd->cpool);
    free(sd->coff);
    free(sd->clen);
}

static int u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* State id's sorted distinct cuts (computed once per state). */
static const uint32_t *state_cuts(side *sd, int id, int *n, uint32_t **tmp, size_t *tmp_cap) {
    if (id >= sd->ccap) {
        int cap = MAX(id + 1, sd->ccap * 2 + 64);
        sd->coff = xrealloc(sd->coff, sizeof *sd->coff * (size_t)cap);
        sd->clen = xrealloc(sd->clen, sizeof *sd->clen * (size_t)cap);
        for (int i = sd->ccap; i < cap; i++) sd->coff[i] = -1;
        sd->ccap = cap;
    }
    if (sd->coff[id] < 0) {
        size_t nc = 0;
        side_cuts(sd, id, tmp, &nc, tmp_cap);
        if (nc) qsort(*tmp, nc, sizeof **tmp, u32_cmp);
        size_t m = 0;
        for (size_t k = 0; k < nc; k++)
            if ((!m || (*tmp)[m - 1] != (*tmp)[k]) && (*tmp)[k] <= 0x10FFFF) (*tmp)[m++] = (*tmp)[k];
        if (!sd->cpool || sd->n_cpool + m > sd->cap_cpool) { /* never NULL once asked: cpool + 0 */
            sd->cap_cpool = (sd->n_cpool + m) * 2 + 64;
            sd->cpool = xrealloc(sd->cpool, sizeof *sd->cpool * sd->cap_cpool);
        }
        if (m) memcpy(sd->cpool + sd->n_cpool, *tmp, sizeof **tmp * m);
        sd->coff[id] = (long)sd->n_cpool;
        sd->clen[id] = (int)m;
        sd->n_cpool += m;
    }
    *n = sd->clen[id];
    return sd->cpool + sd->coff[id];
}

/* The sorted distinct cuts of state sa of A and sb of B (B may be NULL)
 * into *cuts; returns their number. */
static size_t cuts_of(side *A, int sa, side *B, int sb, uint32_t **cuts, size_t *cap) {
    int na, nb = 0;
    const uint32_t *ca = state_cuts(A, sa, &na, cuts, cap), *cb = B ? state_cuts(B, sb, &nb, cuts, cap) : NULL;
    ca = A->cpool + A->coff[sa]; /* B's call may not move A's pool, but be plain */
    if ((size_t)(na + nb) > *cap) {
        *cap = (size_t)(na + nb) * 2 + 16;
        *cuts = xrealloc(*cuts, sizeof **cuts * *cap);
    }
    size_t m = 0;
    int i = 0, j = 0;
    while (i < na || j < nb) {
        uint32_t c = j >= nb || (i < na && ca[i] <= cb[j]) ? ca[i] : cb[j];
        if (i < na && ca[i] == c) i++;
        if (j < nb && cb[j] == c) j++;
        (*cuts)[m++] = c;
    }
    return m;
}

/* Is L(a) ⊆ L(b)? 1 / 0 / -1. */
static int product(side *A, side *B) {
    uint64_t *seen = NULL;
    size_t seen_cap = 0, n_seen = 0;
    uint64_t *queue = NULL;
    size_t qh = 0, qt = 0, qcap = 0;
    uint32_t *cuts = NULL;
    size_t cut_cap = 0;
    int result = 1;
#define PAIR(x, y) (((uint64_t)(uint32_t)(x) << 32) | (uint32_t)(y))
    uint64_t first = PAIR(0, 0);
    /* open addressing set of pairs (value+1 so 0 is empty) */
    seen_cap = 1024;
    seen = xcalloc(seen_cap, sizeof *seen);
    queue = xmalloc(sizeof *queue * (qcap = 256));
    queue[qt++] = first;
    seen[hslot(first + 1, seen_cap)] = first + 1;
    n_seen = 1;
    while (qh < qt) {
        uint64_t pr = queue[qh++];
        int sa = (int)(pr >> 32), sb = (int)(uint32_t)pr;
        if (side_accepts(A, sa) && !side_accepts(B, sb)) {
            result = 0;
            break;
        }
        size_t nc = cuts_of(A, sa, B, sb, &cuts, &cut_cap);
        for (size_t k = 0; k < nc; k++) {
            uint32_t c = cuts[k];
            int na = side_step(A, sa, c);
            if (side_dead(A, na)) continue;
            int nb = side_step(B, sb, c);
            if (A->over || B->over || A->ds.n > REGEX_SUBSET_MAX_STATES || B->ds.n > REGEX_SUBSET_MAX_STATES ||
                n_seen > REGEX_SUBSET_MAX_STATES) {
                result = -1;
                goto out;
            }
            uint64_t key = PAIR(na, nb);
            if (n_seen * 2 >= seen_cap) {
                size_t cap = seen_cap * 2;
                uint64_t *t = xcalloc(cap, sizeof *t);
                for (size_t i = 0; i < seen_cap; i++)
                    if (seen[i]) {
                        size_t j = hslot(seen[i], cap);
                        while (t[j]) j = (j + 1) & (cap - 1);
                        t[j] = seen[i];
                    }
                free(seen);
                seen = t;
                seen_cap = cap;
            }
            size_t j = hslot(key + 1, seen_cap);
            bool found = false;
            while (seen[j]) {
                if (seen[j] == key + 1) {
                    found = true;
                    break;
                }
                j = (j + 1) & (seen_cap - 1);
            }
            if (found) continue;
            seen[j] = key + 1;
            n_seen++;
            if (qt == qcap) queue = xrealloc(queue, sizeof *queue * (qcap *= 2));
            queue[qt++] = key;
        }
    }
out:
#undef PAIR
    free(seen);
    free(queue);
    free(cuts);
    return result;
}

static int subset_raw(const rx *ar, bool as, bool ae, const rx *br, bool bs, bool be) {
    side A, B;
    bool ok_a = side_init(&A, ar, as, ae);
    bool ok_b = ok_a && side_init(&B, br, bs, be);
    int res = -1;
    if (ok_a && ok_b) res = product(&A, &B);
    if (ok_a) side_free(&A);
    else nfa_free(&A.a);
    if (ok_b) side_free(&B);
    else if (ok_a) nfa_free(&B.a);
    return res;
}

/* The union of the code point sets of r. */
static void rx_alphabet(const rx *r, cpset *out) {
    if (!r) return;
    if (r->kind == RX_SET)
        for (int i = 0; i < r->set.n; i++) regex_set_add(out, r->set.iv[i][0], r->set.iv[i][1]);
    if (r->kind != RX_LOOK) {
        rx_alphabet(r->a, out);
        rx_alphabet(r->b, out);
    }
}

static bool rx_has_look(const rx *r) {
    return r && (r->kind == RX_LOOK || rx_has_look(r->a) || rx_has_look(r->b));
}

int regex_subset(const regex_pat *a, const regex_pat *b) {
    /* A leading positive lookahead of b (zod's length checks, (?=.{1,253}$))
     * multiplies the pairs to explore by the lengths it counts. When a has
     * no lookaheads and a bounded length, first try its shadow S{lo,hi}
     * (S: every code point a uses), a superset of a with one state per
     * length: inside the lookahead's language, so is a, and the lookahead
     * can be left out of the full test. */
    const rx *seq[64];
    int n = 0;
    const rx *stack[64];
    int sp = 0;
    if (b->start && !rx_has_look(a->r) && a->start && a->end) stack[sp++] = b->r;
    while (sp && n < 64) { /* b's top-level sequence, in order */
        const rx *x = stack[--sp];
        if (x->kind == RX_CAT && sp + 2 <= 64) {
            stack[sp++] = x->b;
            stack[sp++] = x->a;
        } else seq[n++] = x;
    }
    int k = 0;
    long long lo, hi;
    regex_len(a->r, &lo, &hi);
    if (sp == 0 && hi >= 0 && hi <= GRAMMAR_MAX_REPEAT) {
        rx shadow = {.kind = RX_REP, .min = (int)lo, .max = (int)hi};
        rx set = {.kind = RX_SET};
        rx_alphabet(a->r, &set.set);
        cs_norm(&set.set);
        shadow.a = &set;
        while (k < n && seq[k]->kind == RX_LOOK && !seq[k]->min && set.set.n &&
               subset_raw(&shadow, true, true, seq[k]->a, true, seq[k]->max != 0) == 1)
            k++;
        free(set.set.iv);
    }
    if (!k) return subset_raw(a->r, a->start, a->end, b->r, b->start, b->end);
    /* b without its first k lookaheads */
    rx *tmp[64];
    int nt = 0;
    const rx *rest = k < n ? seq[k] : NULL;
    for (int i = k + 1; i < n; i++) {
        rx *c = tmp[nt++] = rx_new(RX_CAT);
        c->a = (rx *)rest;
        c->b = (rx *)seq[i];
        rest = c;
    }
    rx empty = {.kind = RX_EMPTY};
    int res = subset_raw(a->r, a->start, a->end, rest ? rest : &empty, b->start, b->end);
    for (int i = 0; i < nt; i++) free(tmp[i]); /* the children are b's */
    return res;
}

/* ---- a pattern as a deterministic automaton ------------------------------ */

void regex_dfa_free(regex_dfa *d) {
    for (int i = 0; i < d->n; i++) {
        for (int k = 0; k < d->n_tr[i]; k++) free(d->tr[i][k].set.iv);
        free(d->tr[i]);
    }
    free(d->tr);
    free(d->n_tr);
    free(d->accept);
    memset(d, 0, sizeof *d);
}

typedef struct {
    int from, to;
    uint32_t lo, hi;
} dedge;

static int dedge_cmp(const void *a, const void *b) {
    const dedge *x = a, *y = b;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    if (x->to != y->to) return x->to < y->to ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int regex_dfa_build(const regex_pat *p, int max_states, regex_dfa *out) {
    memset(out, 0, sizeof *out);
    side S;
    if (!side_init(&S, p->r, p->start, p->end)) {
        nfa_free(&S.a);
        return -1;
    }
    dedge *ed = NULL;
    size_t n_ed = 0, cap_ed = 0;
    uint32_t *cuts = NULL;
    size_t cut_cap = 0;
    int res = 0;
    /* states are interned in discovery order: walking ids is a BFS */
    for (int id = 0; id < S.ds.n; id++) {
        if (side_dead(&S, id)) continue;
        size_t nc = cuts_of(&S, id, NULL, 0, &cuts, &cut_cap);
        for (size_t k = 0; k + 1 <= nc; k++) {
            uint32_t lo = cuts[k], hi = k + 1 < nc ? cuts[k + 1] - 1 : 0x10FFFF;
            int to = side_step(&S, id, lo);
            if (S.over || S.ds.n > max_states) {
                res = -1;
                goto done;
            }
            if (side_dead(&S, to)) continue;
            if (n_ed == cap_ed) ed = xrealloc(ed, sizeof *ed * (cap_ed = cap_ed * 2 + 64));
            ed[n_ed++] = (dedge){id, to, lo, hi};
        }
    }
    int n = S.ds.n;
    /* trim: states that can reach an accepting one (backward fixpoint) */
    bool *live = xcalloc((size_t)n, sizeof *live);
    for (int i = 0; i < n; i++) live[i] = side_accepts(&S, i);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t e = 0; e < n_ed; e++)
            if (live[ed[e].to] && !live[ed[e].from]) live[ed[e].from] = changed = true;
    }
    if (!live[0]) {
        free(live);
        res = 1;
        goto done;
    }
    int *num = xmalloc(sizeof *num * (size_t)n);
    int m = 0;
    for (int i = 0; i < n; i++) num[i] = live[i] ? m++ : -1;
    out->n = m;
    out->accept = xcalloc((size_t)m, sizeof *out->accept);
    out->n_tr = xcalloc((size_t)m, sizeof *out->n_tr);
    out->tr = xcalloc((size_t)m, sizeof *out->tr);
    for (int i = 0; i < n; i++)
        if (live[i]) out->accept[num[i]] = side_accepts(&S, i);
    if (n_ed) qsort(ed, n_ed, sizeof *ed, dedge_cmp); /* ed is NULL when no edge was made */
    for (size_t e = 0; e < n_ed;) {
        size_t f = e;
        while (f < n_ed && ed[f].from == ed[e].from && ed[f].to == ed[e].to) f++;
        if (live[ed[e].from] && live[ed[e].to]) {
            int s = num[ed[e].from], k = out->n_tr[s]++;
            out->tr[s] = xrealloc(out->tr[s], sizeof **out->tr * (size_t)out->n_tr[s]);
            out->tr[s][k].to = num[ed[e].to];
            memset(&out->tr[s][k].set, 0, sizeof out->tr[s][k].set);
            for (size_t x = e; x < f; x++) regex_set_add(&out->tr[s][k].set, ed[x].lo, ed[x].hi);
            cs_norm(&out->tr[s][k].set);
        }
        e = f;
    }
    free(num);
    free(live);
done:
    free(ed);
    free(cuts);
    side_free(&S);
    return res;
}
