/*
 * jinja_lex.c — turns template bytes into tokens for jinja_parse.c.
 *
 * Place in the flow: tok/, load time (chat_tmpl_new → jinja_parse → here).
 *
 * What it reproduces from Jinja2's lexer as Hugging Face configures it
 * (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
 *   - newlines are normalised to "\n" and one trailing newline is dropped;
 *   - "{%-" / "{{-" / "{#-" strip all whitespace before the tag, "-%}" /
 *     "-}}" / "-#}" all whitespace after it;
 *   - lstrip_blocks: spaces/tabs between the start of a line and a "{%" or
 *     "{#" are removed ("{%+" keeps them; "{{" is never lstripped);
 *   - trim_blocks: the first newline after "%}" or "#}" is removed ("+%}"
 *     keeps it; "}}" never trims);
 *   - a tag's end delimiter only counts when its brackets are balanced, so
 *     "{{ {'a': {'b': 1}} }}" lexes as Jinja does;
 *   - string literals are unescaped like Python literals (\n \t \xhh \uXXXX
 *     ...; an unknown escape keeps its backslash).
 * Invariant: every token's text lives in the template arena or the
 * normalised copy of the source (also in the arena), so tokens outlive the
 * caller's buffer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

typedef struct lexer {
    const char *s;
    size_t n, pos;
    int line, col;
    jarena *a;
    jtok *toks;
    size_t n_toks, cap_toks;
    err_t *e;
} lexer;

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Moves the cursor to `to`, keeping line:column up to date. */
static void advance_to(lexer *L, size_t to) {
    while (L->pos < to) {
        if (L->s[L->pos] == '\n') {
            L->line++;
            L->col = 1;
        } else {
            L->col++;
        }
        L->pos++;
    }
}

static jtok *push(lexer *L, int kind, int line, int col) {
    if (L->n_toks == L->cap_toks) {
        size_t cap = L->cap_toks ? L->cap_toks * 2 : 256;
        jtok *t = jinja__arena_alloc(L->a, cap * sizeof *t);
        if (!t) return NULL;
        if (L->n_toks) memcpy(t, L->toks, L->n_toks * sizeof *t);
        L->toks = t;
        L->cap_toks = cap;
    }
    jtok *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->line = line;
    t->col = col;
    return t;
}

static int nomem(lexer *L) { return err_set(L->e, ERR_NOMEM, "template too large"); }

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Lexes a quoted string at L->pos into token t (Python escape rules). */
static int lex_string(lexer *L, jtok *t) {
    char q = L->s[L->pos];
    size_t i = L->pos + 1;
    while (i < L->n && L->s[i] != q) {
        if (L->s[i] == '\\' && i + 1 < L->n) i++;
        i++;
    }
    if (i >= L->n) return err_set(L->e, ERR_FORMAT, "%d:%d: unterminated string literal", t->line, t->col);
    const char *p = L->s + L->pos + 1;
    size_t len = (size_t)(L->s + i - p);
    char *d = jinja__arena_alloc(L->a, len + 1);
    if (!d) return nomem(L);
    size_t o = 0;
    for (size_t k = 0; k < len; k++) {
        char c = p[k];
        if (c != '\\' || k + 1 >= len) { d[o++] = c; continue; }
        char x = p[++k];
        switch (x) {
        case 'n': d[o++] = '\n'; break;
        case 't': d[o++] = '\t'; break;
        case 'r': d[o++] = '\r'; break;
        case 'a': d[o++] = '\a'; break;
        case 'b': d[o++] = '\b'; break;
        case 'f': d[o++] = '\f'; break;
        case 'v': d[o++] = '\v'; break;
        case '\\': d[o++] = '\\'; break;
        case '\'': d[o++] = '\''; break;
        case '"': d[o++] = '"'; break;
        case '\n': break; /* line continuation */
        case 'x': case 'u': case 'U': {
            int nd = x == 'x' ? 2 : x == 'u' ? 4 : 8;
            uint32_t cp = 0;
            int got = 0;
            while (got < nd && k + 1 < len && hexval(p[k + 1]) >= 0) {
                cp = cp * 16 + (uint32_t)hexval(p[++k]);
                got++;
            }
            if (got != nd)
                return err_set(L->e, ERR_FORMAT, "%d:%d: bad \\%c escape in string literal", t->line, t->col, x);
            /* an escape never grows the text: \xhh is 4 source bytes → ≤ 2 out */
            o += (size_t)utf8_encode(cp, d + o);
            break;
        }
        default:
            if (x >= '0' && x <= '7') {
                uint32_t cp = (uint32_t)(x - '0');
                for (int m = 0; m < 2 && k + 1 < len && p[k + 1] >= '0' && p[k + 1] <= '7'; m++)
                    cp = cp * 8 + (uint32_t)(p[++k] - '0');
                o += (size_t)utf8_encode(cp, d + o);
            } else {
                d[o++] = '\\';
                d[o++] = x;
            }
        }
    }
    d[o] = 0;
    t->s = d;
    t->n = o;
    advance_to(L, i + 1);
    return 0;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-*/%~<>=()[]{},.:|";

/* Lexes the inside of a {{ }} or {% %} tag up to and including its end
 * delimiter. `block` says which end to look for. Sets *end_ctl to the
 * whitespace-control sign of the end ('-', '+' or 0). */
static int lex_tag(lexer *L, bool block, char *end_ctl) {
    int depth = 0;
    for (;;) {
        while (L->pos < L->n && is_ws(L->s[L->pos])) advance_to(L, L->pos + 1);
        if (L->pos >= L->n) return err_set(L->e, ERR_FORMAT, "%d:%d: unclosed '%s' tag", L->line, L->col, block ? "{%" : "{{");
        const char *c = L->s + L->pos;
        size_t left = L->n - L->pos;
        int line = L->line, col = L->col;
        if (depth == 0) {
            char e1 = block ? '%' : '}';
            size_t k = 0;
            char ctl = 0;
            if ((c[0] == '-' || (block && c[0] == '+')) && left >= 3) { ctl = c[0]; k = 1; }
            if (left >= k + 2 && c[k] == e1 && c[k + 1] == '}') {
                if (!push(L, block ? TK_BLOCK_END : TK_VAR_END, line, col)) return nomem(L);
                advance_to(L, L->pos + k + 2);
                *end_ctl = ctl;
                return 0;
            }
        }
        jtok *t = push(L, TK_EOF, line, col);
        if (!t) return nomem(L);
        if (is_name0(c[0])) {
            size_t k = 1;
            while (k < left && (is_name0(c[k]) || is_digit(c[k]))) k++;
            t->kind = TK_NAME;
            t->s = c;
            t->n = k;
            advance_to(L, L->pos + k);
        } else if (is_digit(c[0])) {
            bool after_dot = L->pos > 0 && L->s[L->pos - 1] == '.';
            size_t k = 0;
            char num[128];
            size_t o = 0;
            bool is_float = false;
            while (k < left && (is_digit(c[k]) || (c[k] == '_' && k + 1 < left && is_digit(c[k + 1])))) {
                if (c[k] != '_' && o < sizeof num - 1) num[o++] = c[k];
                k++;
            }
            if (!after_dot && k + 1 < left && c[k] == '.' && is_digit(c[k + 1])) {
                is_float = true;
                if (o < sizeof num - 1) num[o++] = '.';
                k++;
                while (k < left && (is_digit(c[k]) || (c[k] == '_' && k + 1 < left && is_digit(c[k + 1])))) {
                    if (c[k] != '_' && o < sizeof num - 1) num[o++] = c[k];
                    k++;
                }
            }
            if (!after_dot && k < left && (c[k] == 'e' || c[k] == 'E')) {
                size_t m = k + 1;
                if (m < left && (c[m] == '+' || c[m] == '-')) m++;
                if (m < left && is_digit(c[m])) {
                    is_float = true;
                    if (o < sizeof num - 1) num[o++] = 'e';
                    for (size_t z = k + 1; z < m; z++)
                        if (o < sizeof num - 1) num[o++] = c[z];
                    k = m;
                    while (k < left && is_digit(c[k])) {
                        if (o < sizeof num - 1) num[o++] = c[k];
                        k++;
                    }
                }
            }
            num[o] = 0;
            if (is_float) {
                t->kind = TK_FLOAT;
                t->f = strtod(num, NULL);
            } else {
                t->kind = TK_INT;
                char *endp;
                unsigned long long v = strtoull(num, &endp, 10);
                if (o > 18 && (v > (unsigned long long)INT64_MAX || o > 19))
                    return err_set(L->e, ERR_UNSUPPORTED, "%d:%d: integer literal too large", line, col);
                t->i = (int64_t)v;
            }
            t->s = c;
            t->n = k;
            advance_to(L, L->pos + k);
        } else if (c[0] == '\'' || c[0] == '"') {
            t->kind = TK_STRING;
            int rc = lex_string(L, t);
            if (rc) return rc;
        } else {
            size_t k = 0;
            for (size_t m = 0; m < ARRAY_LEN(OPS2); m++)
                if (left >= 2 && c[0] == OPS2[m][0] && c[1] == OPS2[m][1]) k = 2;
            if (!k && strchr(OPS1, c[0]) && c[0]) k = 1;
            if (!k) {
                if ((unsigned char)c[0] >= 0x20 && (unsigned char)c[0] < 0x7f)
                    return err_set(L->e, ERR_FORMAT, "%d:%d: unexpected character '%c' in tag", line, col, c[0]);
                return err_set(L->e, ERR_FORMAT, "%d:%d: unexpected byte 0x%02x in tag", line, col, (unsigned char)c[0]);
            }
            if (k == 1 && (c[0] == '(' || c[0] == '[' || c[0] == '{')) depth++;
            if (k == 1 && (c[0] == ')' || c[0] == ']' || c[0] == '}') && depth > 0) depth--;
            t->kind = TK_OP;
            t->s = c;
            t->n = k;
            advance_to(L, L->pos + k);
        }
    }
}

int jinja__lex(const char *src, size_t len, jarena *a, jtok **out, size_t *n_out, err_t *e) {
    /* Normalise newlines (\r\n and \r → \n), drop one trailing newline. */
    char *s = jinja__arena_alloc(a, len + 1);
    if (!s) return err_set(e, ERR_NOMEM, "template too large (%zu bytes)", len);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;

    lexer L = {.s = s, .n = n, .line = 1, .col = 1, .a = a, .e = e};
    bool line_starting = true;
    for (;;) {
        /* find the next tag start */
        size_t t0 = L.pos;
        while (t0 + 1 < n && !(s[t0] == '{' && (s[t0 + 1] == '{' || s[t0 + 1] == '%' || s[t0 + 1] == '#'))) t0++;
        bool have_tag = t0 + 1 < n;
        if (!have_tag) t0 = n;
        size_t text_end = t0;
        char ctl = 0, kind = 0;
        if (have_tag) {
            kind = s[t0 + 1];
            if (t0 + 2 < n && (s[t0 + 2] == '-' || s[t0 + 2] == '+')) ctl = s[t0 + 2];
            if (ctl == '-') {
                while (text_end > L.pos && is_ws(s[text_end - 1])) text_end--;
            } else if (ctl != '+' && kind != '{') {
                /* lstrip_blocks */
                size_t l = t0;
                while (l > L.pos && s[l - 1] != '\n') l--;
                bool at_line = l > L.pos || line_starting;
                bool only_ws = l < t0;
                for (size_t k = l; k < t0; k++)
                    if (!is_ws(s[k])) only_ws = false;
                if (at_line && only_ws) text_end = l;
            }
        }
        if (text_end > L.pos) {
            jtok *t = push(&L, TK_TEXT, L.line, L.col);
            if (!t) return nomem(&L);
            t->s = s + L.pos;
            t->n = text_end - L.pos;
        }
        if (!have_tag) break;
        advance_to(&L, t0);
        int tline = L.line, tcol = L.col;
        advance_to(&L, t0 + 2 + (ctl ? 1 : 0));
        char end_ctl = 0;
        if (kind == '#') {
            size_t k = L.pos;
            while (k + 1 < n && !(s[k] == '#' && s[k + 1] == '}')) k++;
            if (k + 1 >= n) return err_set(e, ERR_FORMAT, "%d:%d: unclosed comment", tline, tcol);
            if (k > L.pos && s[k - 1] == '-') end_ctl = '-';
            advance_to(&L, k + 2);
        } else {
            jtok *b = push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, tline, tcol);
            if (!b) return nomem(&L);
            int rc = lex_tag(&L, kind == '%', &end_ctl);
            if (rc) return rc;
        }
        /* whitespace after the tag */
        line_starting = false;
        if (end_ctl == '-') {
            size_t k = L.pos;
            while (k < n && is_ws(s[k])) k++;
            if (k > L.pos) line_starting = s[k - 1] == '\n';
            advance_to(&L, k);
        } else if (end_ctl != '+' && kind != '{') {
            if (L.pos < n && s[L.pos] == '\n') {
                advance_to(&L, L.pos + 1);
                line_starting = true;
            }
        }
    }
    advance_to(&L, n);
    jtok *t = push(&L, TK_EOF, L.line, L.col);
    if (!t) return nomem(&L);
    *out = L.toks;
    *n_out = L.n_toks;
    return 0;
}
