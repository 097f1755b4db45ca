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

enum { RX_EMPTY, RX_SET, RX_CAT, RX_ALT, RX_REP };
typedef struct regex rx;
struct regex {
    int kind;
    cpset set;
    struct regex *a, *b; /* CAT, ALT: a b; REP: a */
    int min, max;     /* REP; max -1 = unbounded */
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
    err_t *e;
    bool in_look; /* inside a leading lookahead: "$)" ends it            */
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

static rx *rx_alt(rxp *p);

static rx *rx_atom(rxp *p) {
    char c = p->s[p->i];
    if (c == '(') {
        p->i++;
        if (p->i + 1 < p->n && p->s[p->i] == '?') {
            if (p->s[p->i + 1] == ':') p->i += 2;
            else return rx_fail(p, ERR_UNSUPPORTED, "lookaround, named group or inline flag");
        }
        if (++p->depth > RX_MAX_DEPTH) return rx_fail(p, ERR_RANGE, "groups nest too deep");
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

static rx *rx_cat(rxp *p) {
    rx *r = NULL;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        if (p->s[p->i] == '$' && (p->i + 1 == p->n || (p->in_look && p->depth == 1 && p->s[p->i + 1] == ')')))
            break; /* end anchor: the caller's */
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
void regex_emit(sbuf *b, const rx *r) {
    switch (r->kind) {
    case RX_EMPTY: return;
    case RX_SET: emit_set(b, &r->set); return;
    case RX_CAT: {
        size_t before = b->n;
        regex_emit(b, r->a);
        if (!rx_is_empty(r->b)) {
            if (b->n > before) sb_puts(b, " ");
            regex_emit(b, r->b);
        }
        return;
    }
    case RX_ALT: {
        /* flatten; empty branches make the whole group optional */
        bool a_e = rx_is_empty(r->a), b_e = rx_is_empty(r->b);
        if (a_e && b_e) return;
        sb_puts(b, "( ");
        if (a_e) regex_emit(b, r->b);
        else if (b_e) regex_emit(b, r->a);
        else {
            regex_emit(b, r->a);
            sb_puts(b, " | ");
            regex_emit(b, r->b);
        }
        sb_puts(b, " )");
        if (a_e || b_e) sb_puts(b, "?");
        return;
    }
    case RX_REP: {
        if (rx_is_empty(r)) return;
        sb_puts(b, "( ");
        regex_emit(b, r->a);
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

/* Length range of r in code points (*hi -1: unbounded). */
void regex_len(const rx *r, long long *lo, long long *hi) {
    long long a, b, c, d;
    switch (r->kind) {
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
    for (int i = 0; i < p->n_look; i++) rx_free(p->look[i]);
    memset(p, 0, sizeof *p);
}

int regex_parse(const char *s, size_t n, unsigned flags, regex_pat *out, err_t *e) {
    memset(out, 0, sizeof *out);
    out->start = n > 0 && s[0] == '^';
    rxp p = {.s = s, .i = out->start ? 1 : 0, .n = n, .e = e};
    /* leading lookaheads: (?=X) (?!X), X possibly ending in $ */
    while ((flags & REGEX_LOOKAHEAD) && out->start && p.i + 3 <= n && s[p.i] == '(' && s[p.i + 1] == '?' &&
           (s[p.i + 2] == '=' || s[p.i + 2] == '!')) {
        if (out->n_look == REGEX_MAX_LOOK) {
            regex_pat_free(out);
            return err_set(e, ERR_UNSUPPORTED, "more than %d lookaheads at offset %zu", REGEX_MAX_LOOK, p.i);
        }
        bool neg = s[p.i + 2] == '!';
        p.i += 3;
        p.depth = 1;
        p.in_look = true;
        rx *x = rx_alt(&p);
        p.in_look = false;
        bool at_end = false;
        if (x && p.i < n && s[p.i] == '$' && p.i + 1 < n && s[p.i + 1] == ')') at_end = true, p.i++;
        if (x && (p.i >= n || s[p.i] != ')')) {
            rx_free(x);
            x = rx_fail(&p, ERR_INVALID, "missing ')'");
        }
        if (!x) {
            regex_pat_free(out);
            return p.rc;
        }
        p.i++;
        p.depth = 0;
        p.top_alt = false;
        out->look[out->n_look] = x;
        out->look_neg[out->n_look] = neg;
        out->look_end[out->n_look++] = at_end;
    }
    rx *r = rx_alt(&p);
    if (!r) {
        regex_pat_free(out);
        return p.rc;
    }
    if (p.i < n && s[p.i] == '$' && p.i + 1 == n) out->end = true, p.i++;
    if (p.i != n) {
        rx_free(r);
        regex_pat_free(out);
        return err_set(e, ERR_INVALID, "unexpected '%c' at offset %zu", s[p.i], p.i);
    }
    if ((out->start || out->end) && p.top_alt) {
        rx_free(r);
        regex_pat_free(out);
        return err_set(e, ERR_UNSUPPORTED, "an anchor beside a top-level '|' (write ^(a|b)$ for a whole-string choice)");
    }
    out->r = r;
    return 0;
}

/* ---- inclusion: the product of two Thompson automata --------------------
 * Each pattern becomes an NFA over code points (one state per set edge or
 * split; bounded repetitions are copied out). L(a) ⊆ L(b) is decided by a
 * breadth-first walk over pairs (closure set of a, closure set of b): at
 * each pair the code points are cut at every interval boundary of the
 * edges leaving either set, one representative per piece is stepped, and a
 * pair where a accepts and b does not is a counterexample. Set and pair
 * counts are bounded (REGEX_SUBSET_MAX_STATES): past that, "unknown". */

typedef struct {
    int set;    /* index into sets, or -1: epsilon                         */
    int out1, out2; /* -1: none                                             */
} nst;

typedef struct {
    nst *st;
    int n, cap;
    const cpset **sets;
    int n_sets, cap_sets;
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
    a->st[a->n] = (nst){set, o1, o2};
    return a->n++;
}
/* Adds an epsilon edge from -> to (each state has two slots). */
static void link(nfa *a, int from, int to) {
    if (a->st[from].set >= 0) a->over = true;
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
    }
    return -1;
}

/* The NFA of: [any*] r [any*] (per anchors); for a lookahead, X then any*
 * unless X ends in $. Start state 0; *accept the accepting state. */
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

/* Interned state sets of one NFA. */
typedef struct {
    int *pool;
    size_t n_pool, cap_pool;
    int (*rng)[2]; /* (offset, length) per set */
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

static int int_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

/* The epsilon closure of seeds (n of them) in a, sorted, into out (a->n
 * entries of room); returns its size. mark: a->n ints, epoch-stamped. */
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

typedef struct {
    nfa a;
    int accept;
    setstore ss;
    int *buf, *mark, *stack, *seeds;
    int epoch;
} side;

static int side_step(side *sd, int set_id, uint32_t c) {
    const int *v = sd->ss.pool + sd->ss.rng[set_id][0];
    int n = sd->ss.rng[set_id][1], k = 0;
    for (int i = 0; i < n; i++) {
        const nst *t = &sd->a.st[v[i]];
        if (t->set >= 0 && set_has(sd->a.sets[t->set], c)) sd->seeds[k++] = t->out1;
    }
    int m = closure(&sd->a, sd->seeds, k, sd->buf, sd->mark, ++sd->epoch, sd->stack);
    return set_intern(&sd->ss, sd->buf, m);
}

static bool side_accepts(const side *sd, int set_id) {
    const int *v = sd->ss.pool + sd->ss.rng[set_id][0];
    int n = sd->ss.rng[set_id][1];
    for (int i = 0; i < n; i++)
        if (v[i] == sd->accept) return true;
    return false;
}

static bool side_init(side *sd, const rx *r, bool start, bool end) {
    memset(sd, 0, sizeof *sd);
    if (!nfa_of(&sd->a, r, start, end, &sd->accept)) return false;
    int n = sd->a.n + 1;
    sd->buf = xmalloc(sizeof(int) * (size_t)n);
    sd->mark = xcalloc((size_t)n, sizeof(int));
    sd->stack = xmalloc(sizeof(int) * (size_t)n * 2 + 16);
    sd->seeds = xmalloc(sizeof(int) * (size_t)n);
    int s0 = 0;
    int m = closure(&sd->a, &s0, 1, sd->buf, sd->mark, ++sd->epoch, sd->stack);
    set_intern(&sd->ss, sd->buf, m); /* id 0: the start */
    return true;
}

static void side_free(side *sd) {
    nfa_free(&sd->a);
    setstore_free(&sd->ss);
    free(sd->buf);
    free(sd->mark);
    free(sd->stack);
    free(sd->seeds);
}

static int u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* disjoint: is L(a) ∩ L(b) empty; else: is L(a) ⊆ L(b). 1 / 0 / -1. */
static int product(side *A, side *B, bool disjoint) {
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
    seen[(first * 0x9E3779B97F4A7C15ull >> 54) & (seen_cap - 1)] = first + 1;
    n_seen = 1;
    while (qh < qt) {
        uint64_t pr = queue[qh++];
        int sa = (int)(pr >> 32), sb = (int)(uint32_t)pr;
        bool acc_a = side_accepts(A, sa), acc_b = sb >= 0 && side_accepts(B, sb);
        if (disjoint ? acc_a && acc_b : acc_a && !acc_b) {
            result = 0;
            break;
        }
        /* boundaries of every interval leaving either set */
        size_t nc = 0;
        for (int w = 0; w < 2; w++) {
            side *sd = w ? B : A;
            int id = w ? sb : sa;
            const int *v = sd->ss.pool + sd->ss.rng[id][0];
            for (int i = 0; i < sd->ss.rng[id][1]; i++) {
                const nst *t = &sd->a.st[v[i]];
                if (t->set < 0) continue;
                const cpset *cs = sd->a.sets[t->set];
                if (nc + 2 * (size_t)cs->n > cut_cap) {
                    cut_cap = (nc + 2 * (size_t)cs->n) * 2;
                    cuts = xrealloc(cuts, sizeof *cuts * cut_cap);
                }
                for (int k = 0; k < cs->n; k++) {
                    cuts[nc++] = cs->iv[k][0];
                    cuts[nc++] = cs->iv[k][1] + 1;
                }
            }
        }
        if (nc) qsort(cuts, nc, sizeof *cuts, u32_cmp);
        for (size_t k = 0; k < nc; k++) {
            if (k && cuts[k] == cuts[k - 1]) continue;
            uint32_t c = cuts[k];
            if (c > 0x10FFFF) continue;
            int na = side_step(A, sa, c);
            if (A->ss.rng[na][1] == 0) continue;
            int nb = side_step(B, sb, c);
            if (disjoint && B->ss.rng[nb][1] == 0) continue;
            if (A->ss.n > REGEX_SUBSET_MAX_STATES || B->ss.n > REGEX_SUBSET_MAX_STATES ||
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
                        size_t j = ((seen[i] - 1) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
                        while (t[j]) j = (j + 1) & (cap - 1);
                        t[j] = seen[i];
                    }
                free(seen);
                seen = t;
                seen_cap = cap;
            }
            size_t j = (key * 0x9E3779B97F4A7C15ull >> 20) & (seen_cap - 1);
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

static int subset_one(const regex_pat *a, const rx *b, bool b_start, bool b_end, bool disjoint) {
    side A, B;
    bool ok_a = side_init(&A, a->r, a->start, a->end);
    bool ok_b = ok_a && side_init(&B, b, b_start, b_end);
    int res = -1;
    if (ok_a && ok_b) res = product(&A, &B, disjoint);
    if (ok_a) side_free(&A);
    if (ok_b) side_free(&B);
    else if (ok_a) nfa_free(&B.a);
    return res;
}

int regex_subset(const regex_pat *a, const regex_pat *b) {
    if (a->n_look) return -1;
    int res = subset_one(a, b->r, b->start, b->end, false);
    for (int i = 0; i < b->n_look && res == 1; i++)
        res = subset_one(a, b->look[i], true, b->look_end[i], b->look_neg[i]);
    return res;
}
