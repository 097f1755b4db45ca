/*
 * jinja_builtins.c — what templates can call: tests ("x is defined"),
 * filters ("x | tojson"), methods of strings, dicts and the loop object
 * ("s.strip()", "d.items()", "loop.cycle(...)") and the global functions
 * (range, namespace, dict, raise_exception, strftime_now).
 *
 * Place in the flow: tok/, called by jinja_eval.c while rendering.
 *
 * Semantics follow Python/Jinja2 as Hugging Face runs them: str methods
 * work on UTF-8 code points for lengths, indexes and strip sets, but case
 * mapping (upper/lower/title/capitalize) is ASCII-only; tojson is the
 * Hugging Face override (json.dumps with ensure_ascii=False, key order
 * kept); raise_exception's message is passed through verbatim. Every
 * per-item loop here counts against the render's step cap and every value
 * is built in the render arena, so no builtin can run away.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja_internal.h"

/* ---- tests ------------------------------------------------------------------ */

int jinja__builtins_test(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, bool *res) {
    const jv *arg = jinja__eval_arg(a, 0, NULL);
    jv x = arg ? *arg : jv_undef();
    if (!strcmp(name, "defined")) *res = v.t != JV_UNDEF;
    else if (!strcmp(name, "undefined")) *res = v.t == JV_UNDEF;
    else if (!strcmp(name, "none")) *res = v.t == JV_NONE;
    else if (!strcmp(name, "string")) *res = v.t == JV_STR;
    else if (!strcmp(name, "mapping")) *res = v.t == JV_DICT;
    else if (!strcmp(name, "iterable")) *res = v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    else if (!strcmp(name, "sequence")) *res = v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    else if (!strcmp(name, "number")) *res = jv_is_num(v);
    else if (!strcmp(name, "integer")) *res = v.t == JV_INT;
    else if (!strcmp(name, "float")) *res = v.t == JV_FLOAT;
    else if (!strcmp(name, "boolean")) *res = v.t == JV_BOOL;
    else if (!strcmp(name, "true")) *res = v.t == JV_BOOL && v.b;
    else if (!strcmp(name, "false")) *res = v.t == JV_BOOL && !v.b;
    else if (!strcmp(name, "callable")) *res = v.t == JV_MACRO || v.t == JV_FUNC;
    else if (!strcmp(name, "escaped")) *res = false;
    else if (!strcmp(name, "even") || !strcmp(name, "odd") || !strcmp(name, "divisibleby")) {
        /* Python: value % 2 == 0 / value % 2 == 1 / value % num == 0 */
        if (!jv_is_num(v)) return jinja__eval_err(R, n, ERR_INVALID, "test '%s' needs a number, got %s", name, jinja__value_type(v));
        jv d = name[0] == 'd' ? x : jv_int(2);
        if (!jv_is_num(d) || jv_num_of(d) == 0) return jinja__eval_err(R, n, ERR_INVALID, "divisibleby needs a non-zero number");
        jv m;
        int rc = jinja__eval_binop(R, n, OP_MOD, v, d, &m);
        if (rc) return rc;
        *res = name[0] == 'o' ? jv_num_of(m) == 1 : jv_num_of(m) == 0;
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) { /* str(v).islower() */
        int rc = jinja__eval_to_str(R, n, v, &v);
        if (rc) return rc;
        bool lower = name[0] == 'l', ok = true, cased = false;
        for (size_t i = 0; ok && i < v.s.n; i++) {
            char c = v.s.p[i];
            if (c >= 'a' && c <= 'z') { cased = true; if (!lower) ok = false; }
            if (c >= 'A' && c <= 'Z') { cased = true; if (lower) ok = false; }
        }
        *res = ok && cased;
    } else if (!strcmp(name, "sameas")) {
        *res = v.t == x.t && (v.t == JV_NONE || v.t == JV_UNDEF || (v.t == JV_BOOL && v.b == x.b) || jinja__value_eq(v, x));
    } else if (!strcmp(name, "in")) {
        return jinja__eval_compare(R, n, OP_IN, v, x, res);
    } else {
        int op = 0;
        if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) op = OP_EQ;
        else if (!strcmp(name, "ne") || !strcmp(name, "!=")) op = OP_NE;
        else if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) op = OP_LT;
        else if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">")) op = OP_GT;
        else if (!strcmp(name, "le") || !strcmp(name, "<=")) op = OP_LE;
        else if (!strcmp(name, "ge") || !strcmp(name, ">=")) op = OP_GE;
        if (!op) return jinja__eval_err(R, n, ERR_UNSUPPORTED, "unknown test '%s'", name);
        return jinja__eval_compare(R, n, op, v, x, res);
    }
    return 0;
}

/* ---- string functions ----------------------------------------------------------- */

static bool py_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f); }

static bool in_chars(jv chars, const char *p, size_t clen) {
    /* is the code point p[0..clen) one of `chars`? */
    for (size_t i = 0; i + clen <= chars.s.n;) {
        size_t l = utf8_char_len(chars.s.p + i, chars.s.n - i);
        if (l == clen && memcmp(chars.s.p + i, p, clen) == 0) return true;
        i += l;
    }
    return false;
}

/* strip/lstrip/rstrip with Python semantics; chars NULL → whitespace. */
static jv do_strip(jv s, const jv *chars, bool left, bool right) {
    const char *p = s.s.p;
    size_t a = 0, b = s.s.n;
    bool ws = !chars || chars->t != JV_STR;
    if (left) {
        while (a < b) {
            size_t l = utf8_char_len(p + a, b - a);
            if (ws ? !(l == 1 && py_space((unsigned char)p[a])) : !in_chars(*chars, p + a, l)) break;
            a += l;
        }
    }
    if (right) {
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
            size_t l = b - st;
            if (ws ? !(l == 1 && py_space((unsigned char)p[st])) : !in_chars(*chars, p + st, l)) break;
            b = st;
        }
    }
    return jv_str(p + a, b - a);
}

/* Simple case mapping of the two-byte UTF-8 letters Python maps one to one
 * within that range (Latin-1, Latin Extended-A, Greek, Cyrillic); 0 when c
 * is not a cased letter there. Others (ß → SS, ı, ...) stay unchanged. */
static uint32_t cp_to_upper(uint32_t c) {
    if (c == 0x131) return 0; /* dotless i: Python gives ASCII I, leave it */
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) || (c >= 0x430 && c <= 0x44F)) return c - 0x20;
    if (c == 0xFF) return 0x178;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x450 && c <= 0x45F) return c - 0x50;
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & 1 ? c - 1 : 0;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c & 1 ? 0 : c - 1;
    return 0;
}
static uint32_t cp_to_lower(uint32_t c) {
    if (c == 0x130) return 0; /* dotted I lowers to two code points in Python */
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x410 && c <= 0x42F)) return c + 0x20;
    if (c == 0x178) return 0xFF;
    if (c >= 0x400 && c <= 0x40F) return c + 0x50;
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & 1 ? 0 : c + 1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c & 1 ? c + 1 : 0;
    return 0;
}

static int case_map(jrender *R, const jnode *n, jv s, int mode, jv *out) {
    /* mode 0 upper, 1 lower, 2 capitalize, 3 Python title, 4 Jinja title filter */
    char *p = jinja__arena_alloc(&R->a, s.s.n + 1);
    if (!p) return jinja__eval_oom(R, n);
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s.s.n;) {
        unsigned char c = (unsigned char)s.s.p[i];
        size_t l = 1;
        uint32_t cp = c;
        if (c >= 0xC0 && c < 0xE0 && i + 1 < s.s.n && ((unsigned char)s.s.p[i + 1] & 0xC0) == 0x80) {
            l = 2;
            cp = ((uint32_t)(c & 0x1F) << 6) | ((unsigned char)s.s.p[i + 1] & 0x3F);
        } else if (c >= 0x80) {
            l = utf8_char_len(s.s.p + i, s.s.n - i);
        }
        uint32_t up_cp = cp < 0x80 ? (cp >= 'a' && cp <= 'z' ? cp - 32 : 0) : l == 2 ? cp_to_upper(cp) : 0;
        uint32_t lo_cp = cp < 0x80 ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : 0) : l == 2 ? cp_to_lower(cp) : 0;
        bool is_lo = up_cp != 0, is_up = lo_cp != 0;
        bool upper;
        switch (mode) {
        case 0: upper = true; break;
        case 1: upper = false; break;
        case 2: upper = first; break;
        case 3: upper = !prev_cased; break;
        default: {
            char pc = i ? s.s.p[i - 1] : ' ';
            upper = i == 0 || py_space((unsigned char)pc) || pc == '-' || pc == '(' || pc == '{' || pc == '[' || pc == '<';
        }
        }
        uint32_t to = upper && is_lo ? up_cp : !upper && is_up ? lo_cp : 0;
        if (!to) {
            memcpy(p + i, s.s.p + i, l);
        } else if (to < 0x80) {
            p[i] = (char)to;
        } else { /* both in the two-byte range */
            p[i] = (char)(0xC0 | (to >> 6));
            p[i + 1] = (char)(0x80 | (to & 0x3F));
        }
        if (mode == 3) prev_cased = is_lo || is_up;
        first = false;
        i += l;
    }
    *out = jv_str(p, s.s.n);
    return 0;
}

static int str_replace(jrender *R, const jnode *n, jv s, jv old, jv rep, int64_t count, jv *out) {
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    if (old.s.n == 0) {
        int64_t done = 0;
        for (size_t i = 0; i <= s.s.n;) {
            if (count < 0 || done < count) {
                jinja__buf_put(&b, rep.s.p, rep.s.n);
                done++;
            }
            if (i == s.s.n) break;
            size_t l = utf8_char_len(s.s.p + i, s.s.n - i);
            jinja__buf_put(&b, s.s.p + i, l);
            i += l;
        }
    } else {
        size_t i = 0;
        int64_t done = 0;
        while (i < s.s.n && !b.over) {
            const char *hit = (count < 0 || done < count) ? memmem(s.s.p + i, s.s.n - i, old.s.p, old.s.n) : NULL;
            if (!hit) {
                jinja__buf_put(&b, s.s.p + i, s.s.n - i);
                break;
            }
            jinja__buf_put(&b, s.s.p + i, (size_t)(hit - (s.s.p + i)));
            jinja__buf_put(&b, rep.s.p, rep.s.n);
            i = (size_t)(hit - s.s.p) + old.s.n;
            done++;
        }
    }
    return jinja__eval_buf_to_str(R, n, &b, out);
}

static int str_split(jrender *R, const jnode *n, jv s, const jv *sep, int64_t maxsplit, jv *out) {
    bool ws = !sep || sep->t == JV_NONE || sep->t == JV_UNDEF;
    if (!ws && sep->t != JV_STR) return jinja__eval_err(R, n, ERR_INVALID, "split separator must be a string");
    if (!ws && sep->s.n == 0) return jinja__eval_err(R, n, ERR_INVALID, "empty split separator");
    const char *p = s.s.p;
    size_t len = s.s.n;
    jlist *l = NULL;
    size_t k = 0;
    /* pass 0 counts the pieces, pass 1 stores them */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && !(l = jinja__list_new(&R->a, k))) return jinja__eval_oom(R, n);
        size_t i = 0;
        k = 0;
#define EMIT(ptr, cnt)                                   \
    do {                                                 \
        if (l) l->v[k] = jv_str((ptr), (cnt));           \
        k++;                                             \
    } while (0)
        if (ws) {
            for (;;) {
                while (i < len && py_space((unsigned char)p[i])) i++;
                if (i >= len) break;
                if (maxsplit >= 0 && (int64_t)k == maxsplit) {
                    size_t e = len;
                    while (e > i && py_space((unsigned char)p[e - 1])) e--;
                    EMIT(p + i, e - i);
                    break;
                }
                size_t st = i;
                while (i < len && !py_space((unsigned char)p[i])) i++;
                EMIT(p + st, i - st);
            }
        } else {
            for (;;) {
                const char *hit = (maxsplit < 0 || (int64_t)k < maxsplit) ? memmem(p + i, len - i, sep->s.p, sep->s.n) : NULL;
                if (!hit) {
                    EMIT(p + i, len - i);
                    break;
                }
                EMIT(p + i, (size_t)(hit - (p + i)));
                i = (size_t)(hit - p) + sep->s.n;
            }
        }
#undef EMIT
    }
    out->t = JV_LIST;
    out->l = l;
    return 0;
}

static int join_items(jrender *R, const jnode *n, jlist *items, jv sep, const jv *attr, jv *out) {
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    for (size_t i = 0; i < items->n && !b.over; i++) {
        if (i) jinja__buf_put(&b, sep.s.p, sep.s.n);
        jv x = attr ? jinja__eval_path(items->v[i], *attr) : items->v[i];
        jinja__value_str(&b, x);
    }
    return jinja__eval_buf_to_str(R, n, &b, out);
}

/* "{} and {0} and {name}" with positional/keyword arguments. */
static int str_format(jrender *R, const jnode *n, jv fmt, const jargs *a, jv *out) {
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    int auto_idx = 0;
    for (size_t i = 0; i < fmt.s.n && !b.over; i++) {
        char c = fmt.s.p[i];
        if (c == '{' && i + 1 < fmt.s.n && fmt.s.p[i + 1] == '{') { jinja__buf_putc(&b, '{'); i++; continue; }
        if (c == '}' && i + 1 < fmt.s.n && fmt.s.p[i + 1] == '}') { jinja__buf_putc(&b, '}'); i++; continue; }
        if (c != '{') { jinja__buf_putc(&b, c); continue; }
        const char *close = memchr(fmt.s.p + i, '}', fmt.s.n - i);
        if (!close) { free(b.p); return jinja__eval_err(R, n, ERR_INVALID, "format: unmatched '{'"); }
        size_t fl = (size_t)(close - (fmt.s.p + i + 1));
        char field[64];
        if (fl >= sizeof field || memchr(fmt.s.p + i + 1, ':', fl) || memchr(fmt.s.p + i + 1, '!', fl)) {
            free(b.p);
            return jinja__eval_err(R, n, ERR_UNSUPPORTED, "format: only plain {} / {0} / {name} fields are supported");
        }
        memcpy(field, fmt.s.p + i + 1, fl);
        field[fl] = 0;
        const jv *v;
        if (fl == 0) v = jinja__eval_arg(a, auto_idx++, NULL);
        else if (field[0] >= '0' && field[0] <= '9') v = jinja__eval_arg(a, atoi(field), NULL);
        else v = jinja__eval_arg(a, 1 << 30, field);
        if (!v) { free(b.p); return jinja__eval_err(R, n, ERR_INVALID, "format: no argument for '{%s}'", field); }
        jinja__value_str(&b, *v);
        i += fl + 1;
    }
    return jinja__eval_buf_to_str(R, n, &b, out);
}

int jinja__builtins_method(jrender *R, const jnode *n, jv obj, const char *m, const jargs *a, jv *out) {
    const jv *a0 = jinja__eval_arg(a, 0, NULL), *a1 = jinja__eval_arg(a, 1, NULL);
    int rc;
    if (obj.t == JV_STR) {
        if (!strcmp(m, "strip")) { *out = do_strip(obj, a0, true, true); return 0; }
        if (!strcmp(m, "lstrip")) { *out = do_strip(obj, a0, true, false); return 0; }
        if (!strcmp(m, "rstrip")) { *out = do_strip(obj, a0, false, true); return 0; }
        if (!strcmp(m, "upper")) return case_map(R, n, obj, 0, out);
        if (!strcmp(m, "lower")) return case_map(R, n, obj, 1, out);
        if (!strcmp(m, "capitalize")) return case_map(R, n, obj, 2, out);
        if (!strcmp(m, "title")) return case_map(R, n, obj, 3, out);
        if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
            const jv *sep = jinja__eval_arg(a, 0, "sep"), *mx = jinja__eval_arg(a, 1, "maxsplit");
            int64_t maxsplit = mx && jv_is_int_like(*mx) ? jv_int_of(*mx) : -1;
            if (m[0] == 'r' && maxsplit >= 0)
                return jinja__eval_err(R, n, ERR_UNSUPPORTED, "rsplit with maxsplit is not supported");
            return str_split(R, n, obj, sep, maxsplit, out);
        }
        if (!strcmp(m, "splitlines")) {
            size_t lines = 1;
            for (size_t i = 0; i < obj.s.n; i++) lines += obj.s.p[i] == '\n' || obj.s.p[i] == '\r';
            jlist *l = jinja__list_new(&R->a, lines);
            if (!l) return jinja__eval_oom(R, n);
            size_t k = 0, st = 0;
            for (size_t i = 0; i < obj.s.n; i++) {
                if (obj.s.p[i] == '\n' || obj.s.p[i] == '\r') {
                    l->v[k++] = jv_str(obj.s.p + st, i - st);
                    if (obj.s.p[i] == '\r' && i + 1 < obj.s.n && obj.s.p[i + 1] == '\n') i++;
                    st = i + 1;
                }
            }
            if (st < obj.s.n) l->v[k++] = jv_str(obj.s.p + st, obj.s.n - st);
            l->n = k;
            out->t = JV_LIST;
            out->l = l;
            return 0;
        }
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            bool start = m[0] == 's', hit = false;
            if (!a0) return jinja__eval_err(R, n, ERR_INVALID, "%s needs an argument", m);
            jlist one = {1, (jv *)a0, false};
            const jlist *cands = a0->t == JV_LIST ? a0->l : &one;
            for (size_t i = 0; i < cands->n && !hit; i++) {
                jv c = cands->v[i];
                if (c.t != JV_STR) return jinja__eval_err(R, n, ERR_INVALID, "%s argument must be a string", m);
                if (c.s.n <= obj.s.n)
                    hit = memcmp(start ? obj.s.p : obj.s.p + obj.s.n - c.s.n, c.s.p, c.s.n) == 0;
            }
            *out = jv_bool(hit);
            return 0;
        }
        if (!strcmp(m, "replace")) {
            if (!a0 || !a1 || a0->t != JV_STR || a1->t != JV_STR) return jinja__eval_err(R, n, ERR_INVALID, "replace needs two strings");
            const jv *c = jinja__eval_arg(a, 2, "count");
            return str_replace(R, n, obj, *a0, *a1, c && jv_is_int_like(*c) ? jv_int_of(*c) : -1, out);
        }
        if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "count")) {
            if (!a0 || a0->t != JV_STR) return jinja__eval_err(R, n, ERR_INVALID, "%s needs a string argument", m);
            int64_t pos = -1, cnt = 0;
            for (size_t i = 0; i + a0->s.n <= obj.s.n;) {
                if (memcmp(obj.s.p + i, a0->s.p, a0->s.n) == 0) {
                    if (pos < 0 || m[0] == 'r') pos = (int64_t)utf8_count(obj.s.p, i);
                    cnt++;
                    if (m[0] == 'c') { i += a0->s.n ? a0->s.n : 1; continue; }
                    if (m[0] != 'r') break;
                }
                i++;
            }
            if (m[0] == 'c') { *out = jv_int(a0->s.n ? cnt : (int64_t)utf8_count(obj.s.p, obj.s.n) + 1); return 0; }
            if (m[0] == 'i' && pos < 0) return jinja__eval_err(R, n, ERR_INVALID, "substring not found");
            *out = jv_int(pos);
            return 0;
        }
        if (!strcmp(m, "join")) {
            if (!a0) return jinja__eval_err(R, n, ERR_INVALID, "join needs an argument");
            jlist *items;
            if ((rc = jinja__eval_iter(R, n, *a0, &items))) return rc;
            return join_items(R, n, items, obj, NULL, out);
        }
        if (!strcmp(m, "format")) return str_format(R, n, obj, a, out);
        if (!strncmp(m, "is", 2)) {
            bool ok = obj.s.n > 0, cased = false;
            for (size_t i = 0; i < obj.s.n && ok; i++) {
                unsigned char c = (unsigned char)obj.s.p[i];
                bool d = c >= '0' && c <= '9', al = (c | 32) >= 'a' && (c | 32) <= 'z';
                if (!strcmp(m, "isdigit")) ok = d;
                else if (!strcmp(m, "isalpha")) ok = al;
                else if (!strcmp(m, "isalnum")) ok = al || d;
                else if (!strcmp(m, "isspace")) ok = py_space(c);
                else if (!strcmp(m, "isupper")) { if (c >= 'a' && c <= 'z') ok = false; if (c >= 'A' && c <= 'Z') cased = true; }
                else if (!strcmp(m, "islower")) { if (c >= 'A' && c <= 'Z') ok = false; if (c >= 'a' && c <= 'z') cased = true; }
            }
            if (!strcmp(m, "isupper") || !strcmp(m, "islower")) ok = ok && cased;
            *out = jv_bool(ok);
            return 0;
        }
    } else if (obj.t == JV_DICT || (obj.t == JV_NS && !strcmp(m, "get"))) {
        const jdict *d = obj.d;
        if (!strcmp(m, "get")) {
            if (!a0) return jinja__eval_err(R, n, ERR_INVALID, "get needs a key");
            jv *v = jinja__dict_get(d, *a0);
            *out = v ? *v : a1 ? *a1 : jv_none();
            return 0;
        }
        int which = !strcmp(m, "items") ? 0 : !strcmp(m, "keys") ? 1 : !strcmp(m, "values") ? 2 : -1;
        if (which >= 0) {
            if ((rc = jinja__eval_make_list(R, n, d->n, out))) return rc;
            for (size_t i = 0; i < d->n; i++) {
                if (which == 1) out->l->v[i] = d->k[i];
                else if (which == 2) out->l->v[i] = d->v[i];
                else {
                    jv pair;
                    if ((rc = jinja__eval_make_list(R, n, 2, &pair))) return rc;
                    pair.l->tuple = true;
                    pair.l->v[0] = d->k[i];
                    pair.l->v[1] = d->v[i];
                    out->l->v[i] = pair;
                }
            }
            return 0;
        }
    } else if (obj.t == JV_LOOP && !strcmp(m, "cycle")) {
        int np = jinja__eval_n_positional(a);
        if (np == 0) return jinja__eval_err(R, n, ERR_INVALID, "loop.cycle needs arguments");
        *out = *jinja__eval_arg(a, (int)(obj.loop->index0 % (size_t)np), NULL);
        return 0;
    } else if (obj.t == JV_LIST && (!strcmp(m, "index") || !strcmp(m, "count"))) {
        if (!a0) return jinja__eval_err(R, n, ERR_INVALID, "%s needs an argument", m);
        int64_t cnt = 0, pos = -1;
        for (size_t i = 0; i < obj.l->n; i++)
            if (jinja__value_eq(obj.l->v[i], *a0)) {
                if (pos < 0) pos = (int64_t)i;
                cnt++;
            }
        if (m[0] == 'i' && pos < 0) return jinja__eval_err(R, n, ERR_INVALID, "value not in list");
        *out = jv_int(m[0] == 'c' ? cnt : pos);
        return 0;
    }
    return jinja__eval_err(R, n, ERR_INVALID, "a %s value has no method '%s'", jinja__value_type(obj), m);
}

/* ---- filters ------------------------------------------------------------------ */

static int html_escape(jrender *R, const jnode *n, jv s, jv *out) {
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    for (size_t i = 0; i < s.s.n; i++) {
        char c = s.s.p[i];
        switch (c) {
        case '&': jinja__buf_put(&b, "&amp;", 5); break;
        case '<': jinja__buf_put(&b, "&lt;", 4); break;
        case '>': jinja__buf_put(&b, "&gt;", 4); break;
        case '"': jinja__buf_put(&b, "&#34;", 5); break;
        case '\'': jinja__buf_put(&b, "&#39;", 5); break;
        default: jinja__buf_putc(&b, c);
        }
    }
    return jinja__eval_buf_to_str(R, n, &b, out);
}

static int parse_int_str(jv s, int64_t *out) {
    jv t = do_strip(s, NULL, true, true);
    char tmp[64];
    size_t o = 0;
    for (size_t i = 0; i < t.s.n; i++) {
        if (t.s.p[i] == '_' && i > 0 && i + 1 < t.s.n) continue;
        if (o + 1 >= sizeof tmp) return -1;
        tmp[o++] = t.s.p[i];
    }
    tmp[o] = 0;
    if (!o) return -1;
    char *end;
    long long v = strtoll(tmp, &end, 10);
    if (*end) {
        double d = strtod(tmp, &end);
        if (*end || !isfinite(d) || fabs(d) > 9e18) return -1;
        v = (long long)d;
    }
    *out = v;
    return 0;
}

static int tojson_filter(jrender *R, const jnode *n, jv v, const jargs *a, jv *out) {
    const jv *ind = jinja__eval_arg(a, 0, "indent"), *sep = jinja__eval_arg(a, 99, "separators"), *sk = jinja__eval_arg(a, 99, "sort_keys");
    int indent = ind && jv_is_int_like(*ind) ? (int)MAX(MIN(jv_int_of(*ind), 64), 0) : -1;
    char item_sep[16] = ", ", key_sep[16] = ": ";
    if (indent >= 0) strcpy(item_sep, ",");
    if (sep && sep->t == JV_LIST && sep->l->n == 2 && sep->l->v[0].t == JV_STR && sep->l->v[1].t == JV_STR &&
        sep->l->v[0].s.n < sizeof item_sep && sep->l->v[1].s.n < sizeof key_sep) {
        memcpy(item_sep, sep->l->v[0].s.p, sep->l->v[0].s.n);
        item_sep[sep->l->v[0].s.n] = 0;
        memcpy(key_sep, sep->l->v[1].s.p, sep->l->v[1].s.n);
        key_sep[sep->l->v[1].s.n] = 0;
    }
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    if (!jinja__value_json(&b, v, indent, item_sep, key_sep, sk && jinja__value_truthy(*sk), 0)) {
        free(b.p);
        return jinja__eval_err(R, n, ERR_INVALID, "tojson: a %s value (or one inside it) is not JSON serializable", jinja__value_type(v));
    }
    return jinja__eval_buf_to_str(R, n, &b, out);
}

/* selectattr/rejectattr/select/reject */
static int select_items(jrender *R, const jnode *n, jv v, const jargs *a, bool by_attr, bool keep, jv *out) {
    jlist *items;
    if (!jinja__value_truthy(v)) return jinja__eval_make_list(R, n, 0, out); /* Jinja: `if seq:` */
    int rc = jinja__eval_iter(R, n, v, &items);
    if (rc) return rc;
    if ((rc = jinja__eval_step(R, n, (long)items->n))) return rc;
    const jv *attr = by_attr ? jinja__eval_arg(a, 0, NULL) : NULL;
    if (by_attr && !attr) return jinja__eval_err(R, n, ERR_INVALID, "selectattr/rejectattr need an attribute name");
    int ti = by_attr ? 1 : 0;
    const jv *test = jinja__eval_arg(a, ti, NULL);
    if (test && test->t != JV_STR) return jinja__eval_err(R, n, ERR_INVALID, "test name must be a string");
    char tname[32] = "";
    if (test) {
        if (test->s.n >= sizeof tname) return jinja__eval_err(R, n, ERR_UNSUPPORTED, "unknown test");
        memcpy(tname, test->s.p, test->s.n);
        tname[test->s.n] = 0;
    }
    /* the remaining positional arguments go to the test */
    jargs targs = {0};
    int np = jinja__eval_n_positional(a);
    if (np > ti + 1) {
        targs.n = np - ti - 1;
        targs.v = jinja__arena_alloc(&R->a, (size_t)targs.n * sizeof(jv));
        targs.names = jinja__arena_alloc(&R->a, (size_t)targs.n * sizeof(char *));
        if (!targs.v || !targs.names) return jinja__eval_oom(R, n);
        for (int i = 0; i < targs.n; i++) targs.v[i] = *jinja__eval_arg(a, ti + 1 + i, NULL);
    }
    jlist *res = jinja__list_new(&R->a, items->n);
    if (!res) return jinja__eval_oom(R, n);
    size_t k = 0;
    for (size_t i = 0; i < items->n; i++) {
        jv x = by_attr ? jinja__eval_path(items->v[i], *attr) : items->v[i];
        bool t;
        if (test) {
            if ((rc = jinja__builtins_test(R, n, tname, x, &targs, &t))) return rc;
        } else {
            t = jinja__value_truthy(x);
        }
        if (t == keep) res->v[k++] = items->v[i];
    }
    res->n = k;
    out->t = JV_LIST;
    out->l = res;
    return 0;
}

static int sort_items(jrender *R, const jnode *n, jlist *items, const jv *attr, bool reverse, bool cs, jv *out) {
    int rc;
    if ((rc = jinja__eval_make_list(R, n, items->n, out))) return rc;
    if ((rc = jinja__eval_step(R, n, (long)items->n))) return rc;
    /* insertion sort on indices (stable, no global state); lists in chat templates are small */
    size_t len = items->n;
    jv *keys = jinja__arena_alloc(&R->a, (len + 1) * sizeof(jv));
    size_t *idx = jinja__arena_alloc(&R->a, (len + 1) * sizeof(size_t));
    if (!keys || !idx) return jinja__eval_oom(R, n);
    if (len > 4096) return jinja__eval_err(R, n, ERR_RANGE, "sort of more than 4096 items");
    for (size_t i = 0; i < len; i++) {
        keys[i] = attr ? jinja__eval_path(items->v[i], *attr) : items->v[i];
        idx[i] = i;
    }
    for (size_t i = 1; i < len; i++) {
        size_t x = idx[i], j = i;
        while (j > 0) {
            int c = jinja__eval_order(keys[idx[j - 1]], keys[x], cs);
            if (reverse ? c >= 0 : c <= 0) break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
    for (size_t i = 0; i < len; i++) out->l->v[i] = items->v[idx[i]];
    return 0;
}

/* ---- filters ------------------------------------------------------------------
 * One function per filter (aliases share one), found by name in `filters`. */

typedef int jinja_filter_fn(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out);

static int filter_safe(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    *out = v;
    return 0;
}

static int filter_trim(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    jv s;
    int rc;
    if ((rc = jinja__eval_to_str(R, n, v, &s))) return rc;
    const jv *chars = jinja__eval_arg(a, 0, "chars");
    *out = do_strip(s, chars, true, true);
    return 0;
}

static int filter_tojson(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    return tojson_filter(R, n, v, a, out);
}

static int filter_length(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    switch (v.t) {
    case JV_STR: *out = jv_int((int64_t)utf8_count(v.s.p, v.s.n)); return 0;
    case JV_LIST: *out = jv_int((int64_t)v.l->n); return 0;
    case JV_DICT: case JV_NS: *out = jv_int((int64_t)v.d->n); return 0;
    case JV_UNDEF: *out = jv_int(0); return 0;
    default: return jinja__eval_err(R, n, ERR_INVALID, "object of type %s has no length", jinja__value_type(v));
    }
}

/* upper, lower, capitalize, title: case_map's modes 0, 1, 2, 4 */
static int filter_case(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    jv s;
    int rc;
    if ((rc = jinja__eval_to_str(R, n, v, &s))) return rc;
    int mode = name[0] == 'u' ? 0 : name[0] == 'l' ? 1 : name[0] == 'c' ? 2 : 4;
    return case_map(R, n, s, mode, out);
}




static int filter_string(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    return jinja__eval_to_str(R, n, v, out);
}

static int filter_escape(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    jv s;
    int rc;
    if ((rc = jinja__eval_to_str(R, n, v, &s))) return rc;
    return html_escape(R, n, s, out);
}

static int filter_replace(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    const jv *a0 = jinja__eval_arg(a, 0, NULL);
    jv s;
    int rc;
    if ((rc = jinja__eval_to_str(R, n, v, &s))) return rc;
    const jv *a1 = jinja__eval_arg(a, 1, NULL), *c = jinja__eval_arg(a, 2, "count");
    jv o, r;
    if (!a0 || !a1) return jinja__eval_err(R, n, ERR_INVALID, "replace needs two arguments");
    if ((rc = jinja__eval_to_str(R, n, *a0, &o)) || (rc = jinja__eval_to_str(R, n, *a1, &r))) return rc;
    return str_replace(R, n, s, o, r, c && jv_is_int_like(*c) ? jv_int_of(*c) : -1, out);
}

static int filter_join(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    int rc;
    jlist *items;
    if ((rc = jinja__eval_iter(R, n, v, &items))) return rc;
    const jv *sep = jinja__eval_arg(a, 0, "d");
    jv sj = jv_str("", 0);
    if (sep && (rc = jinja__eval_to_str(R, n, *sep, &sj))) return rc;
    return join_items(R, n, items, sj, jinja__eval_arg(a, 1, "attribute"), out);
}

static int filter_first_last(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    int rc;
    jlist *items;
    if ((rc = jinja__eval_iter(R, n, v, &items))) return rc;
    *out = items->n == 0 ? jv_undef() : items->v[name[0] == 'f' ? 0 : items->n - 1];
    return 0;
}

static int filter_default(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    const jv *dv = jinja__eval_arg(a, 0, "default_value"), *bo = jinja__eval_arg(a, 1, "boolean");
    bool use = bo && jinja__value_truthy(*bo) ? !jinja__value_truthy(v) : v.t == JV_UNDEF;
    *out = use ? (dv ? *dv : jv_str("", 0)) : v;
    return 0;
}

static int filter_int(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    const jv *dv = jinja__eval_arg(a, 0, "default");
    int64_t i;
    if (jv_is_int_like(v)) *out = jv_int(jv_int_of(v));
    else if (v.t == JV_FLOAT && isfinite(v.f) && fabs(v.f) < 9e18) *out = jv_int((int64_t)v.f);
    else if (v.t == JV_STR && parse_int_str(v, &i) == 0) *out = jv_int(i);
    else *out = dv ? *dv : jv_int(0);
    return 0;
}

static int filter_float(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    const jv *dv = jinja__eval_arg(a, 0, "default");
    if (jv_is_num(v)) { *out = jv_float(jv_num_of(v)); return 0; }
    if (v.t == JV_STR) {
        jv t = do_strip(v, NULL, true, true);
        char tmp[64];
        if (t.s.n && t.s.n < sizeof tmp) {
            memcpy(tmp, t.s.p, t.s.n);
            tmp[t.s.n] = 0;
            char *end;
            double d = strtod(tmp, &end);
            if (!*end) { *out = jv_float(d); return 0; }
        }
    }
    *out = dv ? *dv : jv_float(0.0);
    return 0;
}

static int filter_list(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    int rc;
    jlist *items;
    if ((rc = jinja__eval_iter(R, n, v, &items))) return rc;
    if (items->tuple) { /* list(a_tuple) is a list */
        if ((rc = jinja__eval_make_list(R, n, items->n, out))) return rc;
        if (items->n) memcpy(out->l->v, items->v, items->n * sizeof(jv));
        return 0;
    }
    out->t = JV_LIST;
    out->l = items;
    return 0;
}

static int filter_items(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    if (v.t == JV_UNDEF) return jinja__eval_make_list(R, n, 0, out);
    if (v.t != JV_DICT) return jinja__eval_err(R, n, ERR_INVALID, "items filter needs a mapping, got %s", jinja__value_type(v));
    jargs none = {0};
    return jinja__builtins_method(R, n, v, "items", &none, out);
}

static int filter_dictsort(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    int rc;
    if (v.t != JV_DICT) return jinja__eval_err(R, n, ERR_INVALID, "dictsort needs a mapping");
    jargs none = {0};
    jv pairs;
    if ((rc = jinja__builtins_method(R, n, v, "items", &none, &pairs))) return rc;
    const jv *cs = jinja__eval_arg(a, 0, "case_sensitive"), *by = jinja__eval_arg(a, 1, "by"), *rev = jinja__eval_arg(a, 2, "reverse");
    jv key = jv_int(by && by->t == JV_STR && by->s.n == 5 && !memcmp(by->s.p, "value", 5) ? 1 : 0);
    return sort_items(R, n, pairs.l, &key, rev && jinja__value_truthy(*rev), cs && jinja__value_truthy(*cs), out);
}

static int filter_selectattr(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    return select_items(R, n, v, a, true, true, out);
}

static int filter_rejectattr(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    return select_items(R, n, v, a, true, false, out);
}

static int filter_select(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    return select_items(R, n, v, a, false, true, out);
}

static int filter_reject(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    return select_items(R, n, v, a, false, false, out);
}

static int filter_map(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    const jv *a0 = jinja__eval_arg(a, 0, NULL);
    int rc;
    jlist *items;
    if (!jinja__value_truthy(v)) return jinja__eval_make_list(R, n, 0, out); /* Jinja: `if value:` */
    if ((rc = jinja__eval_iter(R, n, v, &items))) return rc;
    if ((rc = jinja__eval_step(R, n, (long)items->n))) return rc;
    const jv *attr = jinja__eval_arg(a, 99, "attribute"), *dv = jinja__eval_arg(a, 99, "default");
    if ((rc = jinja__eval_make_list(R, n, items->n, out))) return rc;
    if (attr) {
        for (size_t i = 0; i < items->n; i++) {
            jv x = jinja__eval_path(items->v[i], *attr);
            out->l->v[i] = x.t == JV_UNDEF && dv ? *dv : x;
        }
        return 0;
    }
    if (!a0 || a0->t != JV_STR) return jinja__eval_err(R, n, ERR_INVALID, "map needs attribute= or a filter name");
    char fname[32];
    if (a0->s.n >= sizeof fname) return jinja__eval_err(R, n, ERR_UNSUPPORTED, "map: unknown filter");
    memcpy(fname, a0->s.p, a0->s.n);
    fname[a0->s.n] = 0;
    if (!strcmp(fname, "map")) return jinja__eval_err(R, n, ERR_UNSUPPORTED, "map: nested map");
    jargs rest = {0};
    int np = jinja__eval_n_positional(a);
    if (np > 1) {
        rest.n = np - 1;
        rest.v = jinja__arena_alloc(&R->a, (size_t)rest.n * sizeof(jv));
        rest.names = jinja__arena_alloc(&R->a, (size_t)rest.n * sizeof(char *));
        if (!rest.v || !rest.names) return jinja__eval_oom(R, n);
        for (int i = 0; i < rest.n; i++) rest.v[i] = *jinja__eval_arg(a, 1 + i, NULL);
    }
    for (size_t i = 0; i < items->n; i++)
        if ((rc = jinja__builtins_filter(R, n, fname, items->v[i], &rest, &out->l->v[i]))) return rc;
    return 0;
}

static int filter_abs(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    if (v.t == JV_INT) *out = v.i == INT64_MIN ? jv_float(9223372036854775808.0) : jv_int(v.i < 0 ? -v.i : v.i);
    else if (v.t == JV_FLOAT) *out = jv_float(fabs(v.f));
    else if (v.t == JV_BOOL) *out = jv_int(v.b);
    else return jinja__eval_err(R, n, ERR_INVALID, "abs of a %s value", jinja__value_type(v));
    return 0;
}

static int filter_round(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    if (!jv_is_num(v)) return jinja__eval_err(R, n, ERR_INVALID, "round of a %s value", jinja__value_type(v));
    const jv *pr = jinja__eval_arg(a, 0, "precision"), *me = jinja__eval_arg(a, 1, "method");
    int p = pr && jv_is_int_like(*pr) ? (int)MAX(MIN(jv_int_of(*pr), 15), -15) : 0;
    double x = jv_num_of(v), m = pow(10, p), r;
    char how = me && me->t == JV_STR && me->s.n ? me->s.p[0] : 'c';
    bool common = how != 'f' && !(how == 'c' && me && me->s.n > 1 && me->s.p[1] == 'e');
    if (common && jv_is_int_like(v)) { /* Python round(int, p) stays an int */
        int64_t i = jv_int_of(v), unit = 1;
        for (int k = 0; k < -p && unit < INT64_MAX / 10; k++) unit *= 10;
        if (unit > 1) {
            int64_t q = i / unit, rem = i % unit;
            if (rem < 0) { q -= 1; rem += unit; }
            if (2 * rem > unit || (2 * rem == unit && (q & 1))) q += 1; /* half to even */
            i = q * unit;
        }
        *out = jv_int(i);
        return 0;
    }
    if (how == 'f') r = floor(x * m) / m;
    else if (how == 'c' && me && me->s.n > 1 && me->s.p[1] == 'e') r = ceil(x * m) / m;
    else r = nearbyint(x * m) / m; /* half to even, like Python round() */
    *out = jv_float(r);
    return 0;
}

static int filter_reverse(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    int rc;
    if (v.t == JV_STR) {
        jv parts[3] = {jv_undef(), jv_undef(), jv_int(-1)};
        return jinja__eval_slice(R, n, v, parts, out);
    }
    jlist *items;
    if ((rc = jinja__eval_iter(R, n, v, &items))) return rc;
    if ((rc = jinja__eval_make_list(R, n, items->n, out))) return rc;
    for (size_t i = 0; i < items->n; i++) out->l->v[i] = items->v[items->n - 1 - i];
    return 0;
}

static int filter_sort(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    int rc;
    jlist *items;
    if ((rc = jinja__eval_iter(R, n, v, &items))) return rc;
    const jv *rev = jinja__eval_arg(a, 0, "reverse"), *cs = jinja__eval_arg(a, 1, "case_sensitive"), *at = jinja__eval_arg(a, 2, "attribute");
    return sort_items(R, n, items, at, rev && jinja__value_truthy(*rev), cs && jinja__value_truthy(*cs), out);
}

static int filter_unique(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    int rc;
    jlist *items;
    if ((rc = jinja__eval_iter(R, n, v, &items))) return rc;
    if ((rc = jinja__eval_step(R, n, (long)items->n))) return rc;
    if (items->n > 4096) return jinja__eval_err(R, n, ERR_RANGE, "unique of more than 4096 items");
    if ((rc = jinja__eval_make_list(R, n, items->n, out))) return rc;
    size_t k = 0;
    for (size_t i = 0; i < items->n; i++) {
        bool dup = false;
        for (size_t j = 0; j < k && !dup; j++) dup = jinja__value_eq(out->l->v[j], items->v[i]);
        if (!dup) out->l->v[k++] = items->v[i];
    }
    out->l->n = k;
    return 0;
}

static int filter_min_max(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    int rc;
    jlist *items;
    if ((rc = jinja__eval_iter(R, n, v, &items))) return rc;
    const jv *at = jinja__eval_arg(a, 1, "attribute"), *cs = jinja__eval_arg(a, 0, "case_sensitive");
    *out = jv_undef();
    for (size_t i = 0; i < items->n; i++) {
        if (i == 0) { *out = items->v[0]; continue; }
        jv x = at ? jinja__eval_path(items->v[i], *at) : items->v[i], y = at ? jinja__eval_path(*out, *at) : *out;
        int c = jinja__eval_order(x, y, cs && jinja__value_truthy(*cs));
        if (name[1] == 'i' ? c < 0 : c > 0) *out = items->v[i];
    }
    return 0;
}

static int filter_sum(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    int rc;
    jlist *items;
    if ((rc = jinja__eval_iter(R, n, v, &items))) return rc;
    const jv *at = jinja__eval_arg(a, 0, "attribute"), *st = jinja__eval_arg(a, 1, "start");
    jv acc = st ? *st : jv_int(0);
    for (size_t i = 0; i < items->n; i++)
        if ((rc = jinja__eval_binop(R, n, OP_ADD, acc, at ? jinja__eval_path(items->v[i], *at) : items->v[i], &acc))) return rc;
    *out = acc;
    return 0;
}

static int filter_attr(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    const jv *a0 = jinja__eval_arg(a, 0, NULL);
    if (!a0 || a0->t != JV_STR) return jinja__eval_err(R, n, ERR_INVALID, "attr needs a name");
    *out = jinja__eval_path(v, *a0);
    return 0;
}

static int filter_wordcount(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) { /* Jinja counts runs of \w */
    jv s;
    int rc;
    if ((rc = jinja__eval_to_str(R, n, v, &s))) return rc;
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.s.n; i++) {
        unsigned char ch = (unsigned char)s.s.p[i];
        bool w = ch >= 0x80 || ch == '_' || (ch >= '0' && ch <= '9') || ((ch | 32) >= 'a' && (ch | 32) <= 'z');
        if (w && !in_word) words++;
        in_word = w;
    }
    *out = jv_int(words);
    return 0;
}

static int filter_indent(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    jv s;
    int rc;
    if ((rc = jinja__eval_to_str(R, n, v, &s))) return rc;
    const jv *w = jinja__eval_arg(a, 0, "width"), *first = jinja__eval_arg(a, 1, "first"), *blank = jinja__eval_arg(a, 2, "blank");
    jv pad = jv_str("    ", 4);
    if (w && w->t == JV_STR) pad = *w;
    else if (w && jv_is_int_like(*w)) {
        int64_t k = MAX(MIN(jv_int_of(*w), 256), 0);
        char *p = jinja__arena_alloc(&R->a, (size_t)k + 1);
        if (!p) return jinja__eval_oom(R, n);
        memset(p, ' ', (size_t)k);
        pad = jv_str(p, (size_t)k);
    }
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    bool at_start = true, first_line = true;
    for (size_t i = 0; i < s.s.n; i++) {
        if (at_start) {
            /* is this line blank? */
            size_t e = i;
            while (e < s.s.n && s.s.p[e] != '\n') e++;
            bool is_blank = e == i;
            if ((!first_line || (first && jinja__value_truthy(*first))) && (!is_blank || (blank && jinja__value_truthy(*blank))))
                jinja__buf_put(&b, pad.s.p, pad.s.n);
            at_start = false;
        }
        jinja__buf_putc(&b, s.s.p[i]);
        if (s.s.p[i] == '\n') {
            at_start = true;
            first_line = false;
        }
    }
    if (s.s.n == 0 && first && jinja__value_truthy(*first) && blank && jinja__value_truthy(*blank)) jinja__buf_put(&b, pad.s.p, pad.s.n);
    return jinja__eval_buf_to_str(R, n, &b, out);
}

static const struct {
    const char *name;
    jinja_filter_fn *fn;
} filters[] = {
    {"safe", filter_safe},
    {"trim", filter_trim},
    {"tojson", filter_tojson},
    {"length", filter_length},
    {"count", filter_length},
    {"upper", filter_case},
    {"lower", filter_case},
    {"capitalize", filter_case},
    {"title", filter_case},
    {"string", filter_string},
    {"escape", filter_escape},
    {"e", filter_escape},
    {"replace", filter_replace},
    {"join", filter_join},
    {"first", filter_first_last},
    {"last", filter_first_last},
    {"default", filter_default},
    {"d", filter_default},
    {"int", filter_int},
    {"float", filter_float},
    {"list", filter_list},
    {"items", filter_items},
    {"dictsort", filter_dictsort},
    {"selectattr", filter_selectattr},
    {"rejectattr", filter_rejectattr},
    {"select", filter_select},
    {"reject", filter_reject},
    {"map", filter_map},
    {"abs", filter_abs},
    {"round", filter_round},
    {"reverse", filter_reverse},
    {"sort", filter_sort},
    {"unique", filter_unique},
    {"min", filter_min_max},
    {"max", filter_min_max},
    {"sum", filter_sum},
    {"attr", filter_attr},
    {"wordcount", filter_wordcount},
    {"indent", filter_indent},
};

int jinja__builtins_filter(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (!strcmp(name, filters[i].name)) return filters[i].fn(R, n, name, v, a, out);
    return jinja__eval_err(R, n, ERR_UNSUPPORTED, "unknown filter '%s'", name);
}

/* ---- global functions ------------------------------------------------------- */

static const char *fixed_date(void) { return getenv("KVLOOM_FIXED_DATE"); }

int jinja__builtins_call(jrender *R, const jnode *n, int fn, const jargs *a, jv *out) {
    int rc;
    switch (fn) {
    case FN_RANGE: {
        int np = jinja__eval_n_positional(a);
        int64_t v[3] = {0, 0, 1};
        if (np < 1 || np > 3) return jinja__eval_err(R, n, ERR_INVALID, "range takes 1 to 3 arguments");
        for (int i = 0; i < np; i++) {
            const jv *x = jinja__eval_arg(a, i, NULL);
            if (!jv_is_int_like(*x)) return jinja__eval_err(R, n, ERR_INVALID, "range arguments must be integers");
            v[np == 1 ? 1 : i] = jv_int_of(*x);
        }
        if (v[2] == 0) return jinja__eval_err(R, n, ERR_INVALID, "range step cannot be zero");
        double cnt = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2]) : ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
        if (cnt < 0) cnt = 0;
        if (cnt > JINJA_MAX_STEPS) return jinja__eval_err(R, n, ERR_RANGE, "range of %.0f items is too long", cnt);
        if ((rc = jinja__eval_step(R, n, (long)cnt))) return rc;
        if ((rc = jinja__eval_make_list(R, n, (size_t)cnt, out))) return rc;
        for (size_t i = 0; i < (size_t)cnt; i++) out->l->v[i] = jv_int(v[0] + (int64_t)i * v[2]);
        return 0;
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        jdict *d = jinja__dict_new(&R->a, 0);
        if (!d) return jinja__eval_oom(R, n);
        for (int i = 0; i < a->n; i++) {
            if (a->names[i]) {
                if (!jinja__dict_set(&R->a, d, jv_str(a->names[i], strlen(a->names[i])), a->v[i])) return jinja__eval_oom(R, n);
            } else if (a->v[i].t == JV_DICT || a->v[i].t == JV_NS) {
                for (size_t k = 0; k < a->v[i].d->n; k++)
                    if (!jinja__dict_set(&R->a, d, a->v[i].d->k[k], a->v[i].d->v[k])) return jinja__eval_oom(R, n);
            } else {
                return jinja__eval_err(R, n, ERR_INVALID, "%s() takes keyword arguments or a mapping", fn == FN_DICT ? "dict" : "namespace");
            }
        }
        out->t = fn == FN_DICT ? JV_DICT : JV_NS;
        out->d = d;
        return 0;
    }
    case FN_RAISE: {
        const jv *m = jinja__eval_arg(a, 0, NULL);
        jbuf b = {.limit = 300};
        if (m) jinja__value_str(&b, *m);
        rc = err_set(R->e, ERR_INVALID, "raise_exception: %.*s", (int)b.n, b.p ? b.p : "");
        free(b.p);
        return rc;
    }
    case FN_STRFTIME: {
        const jv *fmt = jinja__eval_arg(a, 0, NULL);
        if (!fmt || fmt->t != JV_STR || fmt->s.n > 200) return jinja__eval_err(R, n, ERR_INVALID, "strftime_now needs a format string");
        char f[256], res[512];
        memcpy(f, fmt->s.p, fmt->s.n);
        f[fmt->s.n] = 0;
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        const char *fd = fixed_date();
        int y, mo, d;
        if (fd && sscanf(fd, "%d-%d-%d", &y, &mo, &d) == 3) {
            tm.tm_year = y - 1900;
            tm.tm_mon = mo - 1;
            tm.tm_mday = d;
            tm.tm_hour = 12;
            time_t t = timegm(&tm); /* normalises and fills tm_wday/tm_yday */
            gmtime_r(&t, &tm);
        } else {
            time_t t = time(NULL);
            localtime_r(&t, &tm);
        }
        size_t len = strftime(res, sizeof res, f, &tm);
        return jinja__str_dup(&R->a, res, len, out) ? 0 : jinja__eval_oom(R, n);
    }
    }
    return jinja__eval_err(R, n, ERR_INVALID, "not callable");
}
