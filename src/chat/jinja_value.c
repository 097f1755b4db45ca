/*
 * jinja_value.c — the values a template computes with, and how they print.
 *
 * Place in the flow: tok/, used by jinja_eval.c while rendering.
 *
 * Values (jv) are small tagged unions passed by value; strings, lists and
 * dicts point into the render arena (or, for strings of the input context,
 * into the caller's jansson objects, which outlive the render). Nothing is
 * ever freed one by one: the arena goes at the end of the render, and its
 * byte cap bounds what a template can build.
 *
 * Printing follows Python, since that is what Jinja does: str() for
 * "{{ x }}" (None, True, 1.5, "['a', 'b']"), repr() inside containers, and
 * json.dumps(ensure_ascii=False) for tojson — the Hugging Face override
 * that keeps key order and does not escape HTML. Floats print as Python's
 * shortest round-trip repr ("0.1", "1e+16", "3.0").
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

/* ---- arena ------------------------------------------------------------------ */
struct jchunk {
    jchunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

_Thread_local unsigned long jinja__n_nomem;

void *jinja__arena_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jchunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > 32768 ? n : 32768;
        size_t total;
        if (!add_ok(size, sizeof(jchunk), &total)) return NULL;
        if (a->limit && (a->used + total > a->limit || total > a->limit)) return NULL;
        c = malloc(total);
        if (!c) {
            jinja__n_nomem++;
            return NULL;
        }
        c->size = size;
        c->used = 0;
        a->used += total;
        if (a->head && n > 32768) { /* a big one-off block: keep the current chunk in front */
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void jinja__arena_free(jarena *a) {
    jchunk *c = a->head;
    while (c) {
        jchunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- byte buffer ---------------------------------------------------------------- */
void jinja__buf_put(jbuf *b, const char *s, size_t n) {
    if (b->over || n == 0) return;
    size_t need;
    if (!add_ok(b->n, n + 1, &need) || (b->limit && need > b->limit)) {
        b->over = true;
        return;
    }
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap *= 2;
        if (b->limit && cap > b->limit + 1) cap = b->limit + 1;
        char *p = realloc(b->p, cap);
        if (!p) {
            jinja__n_nomem++;
            b->over = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jinja__buf_putc(jbuf *b, char c) { jinja__buf_put(b, &c, 1); }

void jinja__buf_printf(jbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) jinja__buf_put(b, tmp, (size_t)MIN((size_t)n, sizeof tmp - 1));
}

/* ---- containers ---------------------------------------------------------------- */
jlist *jinja__list_new(jarena *a, size_t n) {
    size_t bytes;
    if (!mul_ok(n, sizeof(jv), &bytes)) return NULL;
    jlist *l = jinja__arena_alloc(a, sizeof *l);
    if (!l) return NULL;
    l->n = n;
    if (n && !(l->v = jinja__arena_alloc(a, bytes))) return NULL;
    return l;
}

jdict *jinja__dict_new(jarena *a, size_t cap) {
    jdict *d = jinja__arena_alloc(a, sizeof *d);
    if (!d) return NULL;
    if (cap) {
        size_t bytes;
        if (!mul_ok(cap, sizeof(jv), &bytes)) return NULL;
        d->k = jinja__arena_alloc(a, bytes);
        d->v = jinja__arena_alloc(a, bytes);
        if (!d->k || !d->v) return NULL;
        d->cap = cap;
    }
    return d;
}

jv *jinja__dict_get(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jinja__value_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

jv *jinja__dict_get_str(const jdict *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].s.n == n && memcmp(d->k[i].s.p, k, n) == 0) return &d->v[i];
    return NULL;
}

bool jinja__dict_set(jarena *a, jdict *d, jv key, jv val) {
    jv *old = jinja__dict_get(d, key);
    if (old) {
        *old = val;
        return true;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *k = jinja__arena_alloc(a, cap * sizeof(jv)), *v = jinja__arena_alloc(a, cap * sizeof(jv));
        if (!k || !v) return false;
        if (d->n) {
            memcpy(k, d->k, d->n * sizeof(jv));
            memcpy(v, d->v, d->n * sizeof(jv));
        }
        d->k = k;
        d->v = v;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
    return true;
}

bool jinja__str_dup(jarena *a, const char *p, size_t n, jv *out) {
    char *s = jinja__arena_alloc(a, n + 1);
    if (!s) return false;
    if (n) memcpy(s, p, n);
    *out = jv_str(s, n);
    return true;
}

/* ---- printing ---------------------------------------------------------------- */

/* Python repr(float). */
static void put_float(jbuf *b, double x, bool json) {
    if (isnan(x)) { jinja__buf_put(b, json ? "NaN" : "nan", json ? 3 : 3); return; }
    if (isinf(x)) {
        if (json) jinja__buf_put(b, x < 0 ? "-Infinity" : "Infinity", x < 0 ? 9 : 8);
        else jinja__buf_put(b, x < 0 ? "-inf" : "inf", x < 0 ? 4 : 3);
        return;
    }
    char tmp[64];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    if (p > 17) p = 17;
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0;
    bool neg = tmp[0] == '-';
    const char *s = tmp + (neg ? 1 : 0);
    while (*s && *s != 'e') {
        if (*s != '.') digits[nd++] = *s;
        s++;
    }
    int ex = *s == 'e' ? atoi(s + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex >= 0) {
            for (int i = 0; i <= ex; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > ex + 1)
                for (int i = ex + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -ex - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        o += snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    jinja__buf_put(b, out, strlen(out));
}

static void put_repr_str(jbuf *b, const char *p, size_t n) {
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jinja__buf_putc(b, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\\') jinja__buf_put(b, "\\\\", 2);
        else if (c == (unsigned char)q) { jinja__buf_putc(b, '\\'); jinja__buf_putc(b, (char)c); }
        else if (c == '\n') jinja__buf_put(b, "\\n", 2);
        else if (c == '\r') jinja__buf_put(b, "\\r", 2);
        else if (c == '\t') jinja__buf_put(b, "\\t", 2);
        else if (c < 0x20 || c == 0x7f) jinja__buf_printf(b, "\\x%02x", c);
        else jinja__buf_putc(b, (char)c);
    }
    jinja__buf_putc(b, q);
}

static void put_seq_repr(jbuf *b, jv v, int depth);

void jinja__value_repr(jbuf *b, jv v) {
    if (v.t == JV_UNDEF) jinja__buf_put(b, "Undefined", 9);
    else if (v.t == JV_STR) put_repr_str(b, v.s.p, v.s.n);
    else if (v.t == JV_LIST || v.t == JV_DICT) put_seq_repr(b, v, 0);
    else jinja__value_str(b, v);
}

static void put_seq_repr(jbuf *b, jv v, int depth) {
    if (depth > 100) { /* a self-containing namespace cannot exist, but be safe */
        jinja__buf_put(b, "...", 3);
        return;
    }
    if (v.t == JV_LIST) {
        jinja__buf_putc(b, v.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.l->n && !b->over; i++) {
            if (i) jinja__buf_put(b, ", ", 2);
            jv x = v.l->v[i];
            if (x.t == JV_LIST || x.t == JV_DICT) put_seq_repr(b, x, depth + 1);
            else jinja__value_repr(b, x);
        }
        if (v.l->tuple && v.l->n == 1) jinja__buf_putc(b, ',');
        jinja__buf_putc(b, v.l->tuple ? ')' : ']');
    } else {
        jinja__buf_putc(b, '{');
        for (size_t i = 0; i < v.d->n && !b->over; i++) {
            if (i) jinja__buf_put(b, ", ", 2);
            jinja__value_repr(b, v.d->k[i]);
            jinja__buf_put(b, ": ", 2);
            jv x = v.d->v[i];
            if (x.t == JV_LIST || x.t == JV_DICT) put_seq_repr(b, x, depth + 1);
            else jinja__value_repr(b, x);
        }
        jinja__buf_putc(b, '}');
    }
}

void jinja__value_str(jbuf *b, jv v) {
    switch (v.t) {
    case JV_UNDEF: break;
    case JV_NONE: jinja__buf_put(b, "None", 4); break;
    case JV_BOOL: v.b ? jinja__buf_put(b, "True", 4) : jinja__buf_put(b, "False", 5); break;
    case JV_INT: jinja__buf_printf(b, "%lld", (long long)v.i); break;
    case JV_FLOAT: put_float(b, v.f, false); break;
    case JV_STR: jinja__buf_put(b, v.s.p, v.s.n); break;
    case JV_LIST: case JV_DICT: put_seq_repr(b, v, 0); break;
    case JV_NS: {
        jv d = {.t = JV_DICT, .d = v.d};
        jinja__buf_put(b, "<Namespace ", 11);
        put_seq_repr(b, d, 0);
        jinja__buf_putc(b, '>');
        break;
    }
    case JV_MACRO: jinja__buf_put(b, "<Macro>", 7); break;
    case JV_FUNC: jinja__buf_put(b, "<function>", 10); break;
    case JV_LOOP: jinja__buf_put(b, "<LoopContext>", 13); break;
    }
}

static void put_json_str(jbuf *b, const char *p, size_t n) {
    jinja__buf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char tmp[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", c);
                esc = tmp;
            }
        }
        if (esc) {
            jinja__buf_put(b, p + run, i - run);
            jinja__buf_put(b, esc, strlen(esc));
            run = i + 1;
        }
    }
    jinja__buf_put(b, p + run, n - run);
    jinja__buf_putc(b, '"');
}

static void newline_indent(jbuf *b, int indent, int level) {
    jinja__buf_putc(b, '\n');
    for (int i = 0; i < indent * level && !b->over; i++) jinja__buf_putc(b, ' ');
}

static int cmp_keys(const void *x, const void *y) {
    const jv *a = *(const jv *const *)x, *b = *(const jv *const *)y;
    size_t n = MIN(a->s.n, b->s.n);
    int c = memcmp(a->s.p, b->s.p, n);
    if (c) return c;
    return a->s.n < b->s.n ? -1 : a->s.n > b->s.n;
}

bool jinja__value_json(jbuf *b, jv v, int indent, const char *item_sep, const char *key_sep, bool sort_keys, int depth) {
    if (depth > 200) return false;
    size_t isl = strlen(item_sep), ksl = strlen(key_sep);
    switch (v.t) {
    case JV_NONE: jinja__buf_put(b, "null", 4); return true;
    case JV_BOOL: v.b ? jinja__buf_put(b, "true", 4) : jinja__buf_put(b, "false", 5); return true;
    case JV_INT: jinja__buf_printf(b, "%lld", (long long)v.i); return true;
    case JV_FLOAT: put_float(b, v.f, true); return true;
    case JV_STR: put_json_str(b, v.s.p, v.s.n); return true;
    case JV_LIST:
        if (v.l->n == 0) { jinja__buf_put(b, "[]", 2); return true; }
        jinja__buf_putc(b, '[');
        for (size_t i = 0; i < v.l->n && !b->over; i++) {
            if (i) jinja__buf_put(b, item_sep, isl);
            if (indent >= 0) newline_indent(b, indent, depth + 1);
            if (!jinja__value_json(b, v.l->v[i], indent, item_sep, key_sep, sort_keys, depth + 1)) return false;
        }
        if (indent >= 0) newline_indent(b, indent, depth);
        jinja__buf_putc(b, ']');
        return true;
    case JV_DICT:
    case JV_NS: {
        const jdict *d = v.d;
        if (d->n == 0) { jinja__buf_put(b, "{}", 2); return true; }
        const jv **order = malloc(d->n * sizeof *order);
        if (!order) { jinja__n_nomem++; b->over = true; return true; }
        bool all_str = true;
        for (size_t i = 0; i < d->n; i++) {
            order[i] = &d->k[i];
            if (d->k[i].t != JV_STR) all_str = false;
        }
        if (sort_keys && all_str) qsort(order, d->n, sizeof *order, cmp_keys);
        jinja__buf_putc(b, '{');
        bool ok = true;
        for (size_t i = 0; i < d->n && !b->over && ok; i++) {
            size_t idx = (size_t)(order[i] - d->k);
            jv k = d->k[idx];
            if (i) jinja__buf_put(b, item_sep, isl);
            if (indent >= 0) newline_indent(b, indent, depth + 1);
            if (k.t == JV_STR) put_json_str(b, k.s.p, k.s.n);
            else if (k.t == JV_INT) jinja__buf_printf(b, "\"%lld\"", (long long)k.i);
            else if (k.t == JV_BOOL) jinja__buf_put(b, k.b ? "\"true\"" : "\"false\"", k.b ? 6 : 7);
            else if (k.t == JV_NONE) jinja__buf_put(b, "\"null\"", 6);
            else if (k.t == JV_FLOAT) { jinja__buf_putc(b, '"'); put_float(b, k.f, true); jinja__buf_putc(b, '"'); }
            else ok = false;
            jinja__buf_put(b, key_sep, ksl);
            if (ok) ok = jinja__value_json(b, d->v[idx], indent, item_sep, key_sep, sort_keys, depth + 1);
        }
        free(order);
        if (!ok) return false;
        if (indent >= 0) newline_indent(b, indent, depth);
        jinja__buf_putc(b, '}');
        return true;
    }
    default: return false;
    }
}

/* ---- semantics ---------------------------------------------------------------- */
bool jinja__value_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return v.s.n != 0;
    case JV_LIST: return v.l->n != 0;
    case JV_DICT: return v.d->n != 0;
    default: return true;
    }
}

static bool is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num_f(jv v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : (double)v.b; }

/* Nesting deeper than this compares unequal rather than recursing on. */
#define EQ_MAX_DEPTH 200

static bool eq_depth(jv a, jv b, int depth);

bool jinja__value_eq(jv a, jv b) { return eq_depth(a, b, 0); }

static bool eq_depth(jv a, jv b, int depth) {
    if (depth > EQ_MAX_DEPTH) return false;
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_INT ? a.i : a.b, y = b.t == JV_INT ? b.i : b.b;
            return x == y;
        }
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.s.n == b.s.n && memcmp(a.s.p, b.s.p, a.s.n) == 0;
    case JV_LIST:
        if (a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!eq_depth(a.l->v[i], b.l->v[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            jv *o = jinja__dict_get(b.d, a.d->k[i]);
            if (!o || !eq_depth(a.d->v[i], *o, depth + 1)) return false;
        }
        return true;
    case JV_NS: return a.d == b.d;
    case JV_MACRO: return a.m == b.m;
    case JV_FUNC: return a.fn == b.fn;
    case JV_LOOP: return a.loop == b.loop;
    default: return false;
    }
}

const char *jinja__value_type(jv v) {
    static const char *const names[] = {"undefined", "none", "bool", "int", "float", "string", "list",
                                        "dict", "namespace", "macro", "function", "loop"};
    return v.t >= 0 && v.t < (int)ARRAY_LEN(names) ? names[v.t] : "?";
}

bool jinja__value_from_json(jarena *a, json_t *j, jv *out, int depth) {
    if (depth > 500) return false;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = jinja__dict_new(a, json_object_size(j));
        if (!d) return false;
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            jv kv = jv_str(k, strlen(k)), vv;
            if (!jinja__value_from_json(a, v, &vv, depth + 1)) return false;
            /* keys of a JSON object are unique: append without a lookup */
            d->k[d->n] = kv;
            d->v[d->n] = vv;
            d->n++;
        }
        out->t = JV_DICT;
        out->d = d;
        return true;
    }
    case JSON_ARRAY: {
        jlist *l = jinja__list_new(a, json_array_size(j));
        if (!l) return false;
        for (size_t i = 0; i < l->n; i++)
            if (!jinja__value_from_json(a, json_array_get(j, i), &l->v[i], depth + 1)) return false;
        out->t = JV_LIST;
        out->l = l;
        return true;
    }
    case JSON_STRING: *out = jv_str(json_string_value(j), json_string_length(j)); return true;
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return true;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return true;
    case JSON_TRUE: *out = jv_bool(true); return true;
    case JSON_FALSE: *out = jv_bool(false); return true;
    default: *out = jv_none(); return true;
    }
}
