/*
 * jinja_eval.c — renders a parsed template: the AST walk, scopes, filters,
 * tests, string/dict methods and global functions, and the public
 * jinja_render.
 *
 * Place in the flow: tok/, per chat request (chat_render → here).
 *
 * Scopes follow Jinja: the root frame holds the globals and the caller's
 * variables; each for-loop iteration and each macro call gets a child
 * frame, so a `set` inside a loop does not leak out of it (templates use
 * namespace() objects for that), while `if` creates no scope.
 *
 * Undefined values: an unknown variable, a missing key or an index out of
 * range is `undefined` — prints as "", is falsy, iterates as empty, and
 * (more lenient than Jinja, as chat templates probe optional fields) its
 * attributes and items are undefined too. Arithmetic on it is an error.
 *
 * Bounds (jinja.h): every loop iteration, macro call and per-item filter
 * step counts against JINJA_MAX_STEPS; macro recursion against
 * JINJA_MAX_DEPTH; all values live in an arena capped at JINJA_MAX_MEMORY;
 * output and temporary strings are capped at JINJA_MAX_OUTPUT. Crossing a
 * cap returns ERR_RANGE.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tok/jinja_internal.h"

enum { FN_RANGE = 1, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME };

typedef struct frame {
    jdict *vars;
    struct frame *parent;
} frame;

typedef struct rctx {
    jarena a;
    err_t *e;
    long steps;
    int depth;
    int in_loop;
    int brk; /* 1: break pending, 2: continue pending */
    frame *root;
} rctx;

typedef struct args {
    int n;
    jv *v;
    const char **names; /* NULL entries for positional arguments */
} args;

static int rerr(rctx *R, const jnode *n, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int rerr(rctx *R, const jnode *n, int code, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n) return err_set(R->e, code, "%d:%d: %s", n->line, n->col, msg);
    return err_set(R->e, code, "%s", msg);
}
static int oom(rctx *R, const jnode *n) {
    return rerr(R, n, ERR_RANGE, "template used more than %u bytes of memory", (unsigned)JINJA_MAX_MEMORY);
}
static int step(rctx *R, const jnode *n, long k) {
    R->steps += k;
    if (R->steps > JINJA_MAX_STEPS)
        return rerr(R, n, ERR_RANGE, "template ran more than %d loop iterations/calls", JINJA_MAX_STEPS);
    return 0;
}

static int eval(rctx *R, frame *f, const jnode *n, jv *out);
static int exec(rctx *R, frame *f, const jnode *n, jbuf *out);

/* ---- helpers ------------------------------------------------------------------ */

static bool is_int_like(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t int_of(jv v) { return v.t == JV_INT ? v.i : v.t == JV_BOOL ? v.b : 0; }
static bool is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num_of(jv v) { return v.t == JV_FLOAT ? v.f : (double)int_of(v); }

/* str(v) as an arena string. */
static int to_str(rctx *R, const jnode *n, jv v, jv *out) {
    if (v.t == JV_STR) {
        *out = v;
        return 0;
    }
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    jv_to_str(&b, v);
    if (b.over) {
        free(b.p);
        return rerr(R, n, ERR_RANGE, "string longer than %u bytes", (unsigned)JINJA_MAX_OUTPUT);
    }
    bool ok = jv_str_dup(&R->a, b.p ? b.p : "", b.n, out);
    free(b.p);
    return ok ? 0 : oom(R, n);
}

static int buf_to_str(rctx *R, const jnode *n, jbuf *b, jv *out) {
    if (b->over) {
        free(b->p);
        return rerr(R, n, ERR_RANGE, "string longer than %u bytes", (unsigned)JINJA_MAX_OUTPUT);
    }
    bool ok = jv_str_dup(&R->a, b->p ? b->p : "", b->n, out);
    free(b->p);
    return ok ? 0 : oom(R, n);
}

static int make_list(rctx *R, const jnode *n, size_t len, jv *out) {
    jlist *l = jlist_new(&R->a, len);
    if (!l) return oom(R, n);
    out->t = JV_LIST;
    out->l = l;
    return 0;
}

/* Byte offsets of the code points of a UTF-8 string: off[i]..off[i+1]. */
static int cp_offsets(rctx *R, const jnode *n, jv s, size_t **off, size_t *n_cp) {
    size_t c = jutf8_len(s.s.p, s.s.n);
    size_t *o = jarena_alloc(&R->a, (c + 1) * sizeof *o);
    if (!o) return oom(R, n);
    size_t k = 0;
    for (size_t i = 0; i < s.s.n; i++)
        if (((unsigned char)s.s.p[i] & 0xC0) != 0x80) o[k++] = i;
    o[c] = s.s.n;
    *off = o;
    *n_cp = c;
    return 0;
}

/* Iterable → list of items: a list itself, a dict's keys, a string's
 * characters, nothing for undefined. */
static int iter_items(rctx *R, const jnode *n, jv v, jlist **out) {
    static jlist empty = {0, NULL};
    if (v.t == JV_LIST) { *out = v.l; return 0; }
    if (v.t == JV_UNDEF) { *out = &empty; return 0; }
    if (v.t == JV_DICT) {
        jlist *l = jlist_new(&R->a, v.d->n);
        if (!l) return oom(R, n);
        for (size_t i = 0; i < v.d->n; i++) l->v[i] = v.d->k[i];
        *out = l;
        return 0;
    }
    if (v.t == JV_STR) {
        size_t *off, c;
        int rc = cp_offsets(R, n, v, &off, &c);
        if (rc) return rc;
        jlist *l = jlist_new(&R->a, c);
        if (!l) return oom(R, n);
        for (size_t i = 0; i < c; i++) l->v[i] = jv_str(v.s.p + off[i], off[i + 1] - off[i]);
        *out = l;
        return 0;
    }
    return rerr(R, n, ERR_INVALID, "cannot iterate over a %s value", jv_type_name(v));
}

static jv *lookup(frame *f, const char *name) {
    size_t n = strlen(name);
    for (; f; f = f->parent) {
        jv *v = jdict_get_str(f->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

static int set_var(rctx *R, const jnode *n, frame *f, const char *name, jv v) {
    if (!jdict_set(&R->a, f->vars, jv_str(name, strlen(name)), v)) return oom(R, n);
    return 0;
}

static int new_frame(rctx *R, const jnode *n, frame *parent, frame **out) {
    frame *f = jarena_alloc(&R->a, sizeof *f);
    if (!f || !(f->vars = jdict_new(&R->a, 0))) return oom(R, n);
    f->parent = parent;
    *out = f;
    return 0;
}

static const jv *arg_get(const args *a, int pos, const char *name) {
    for (int i = 0; i < a->n && a->names; i++)
        if (a->names[i] && name && strcmp(a->names[i], name) == 0) return &a->v[i];
    int k = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->names && a->names[i]) continue;
        if (k++ == pos) return &a->v[i];
    }
    return NULL;
}

static int n_positional(const args *a) {
    int k = 0;
    for (int i = 0; i < a->n; i++) k += !a->names || a->names[i] == NULL;
    return k;
}

static int eval_args(rctx *R, frame *f, const jnode *call, args *out) {
    out->n = call->n_list;
    out->v = NULL;
    out->names = call->names;
    if (!call->n_list) return 0;
    out->v = jarena_alloc(&R->a, (size_t)call->n_list * sizeof(jv));
    if (!out->v) return oom(R, call);
    for (int i = 0; i < call->n_list; i++) {
        int rc = eval(R, f, call->list[i], &out->v[i]);
        if (rc) return rc;
    }
    return 0;
}

/* Attribute lookup: dict keys, namespace attributes, loop fields. */
static jv get_attr(jv obj, const char *name) {
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jv *v = jdict_get_str(obj.d, name, strlen(name));
        return v ? *v : jv_undef();
    }
    if (obj.t == JV_LOOP) {
        const jloop *L = obj.loop;
        if (!strcmp(name, "index")) return jv_int((int64_t)L->index0 + 1);
        if (!strcmp(name, "index0")) return jv_int((int64_t)L->index0);
        if (!strcmp(name, "first")) return jv_bool(L->index0 == 0);
        if (!strcmp(name, "last")) return jv_bool(L->index0 + 1 == L->length);
        if (!strcmp(name, "length")) return jv_int((int64_t)L->length);
        if (!strcmp(name, "revindex")) return jv_int((int64_t)(L->length - L->index0));
        if (!strcmp(name, "revindex0")) return jv_int((int64_t)(L->length - L->index0 - 1));
        if (!strcmp(name, "depth")) return jv_int(1);
        if (!strcmp(name, "depth0")) return jv_int(0);
        if (!strcmp(name, "previtem")) return L->index0 > 0 ? L->items->v[L->index0 - 1] : jv_undef();
        if (!strcmp(name, "nextitem")) return L->index0 + 1 < L->length ? L->items->v[L->index0 + 1] : jv_undef();
    }
    return jv_undef();
}

/* Attribute path "a.b.c" (selectattr, map, sort, join attribute=). */
static jv get_path(jv obj, jv path) {
    if (path.t == JV_INT) {
        if (obj.t == JV_LIST && path.i >= 0 && (size_t)path.i < obj.l->n) return obj.l->v[path.i];
        return jv_undef();
    }
    if (path.t != JV_STR) return jv_undef();
    const char *p = path.s.p, *end = p + path.s.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        char tmp[128];
        if (len >= sizeof tmp) return jv_undef();
        memcpy(tmp, p, len);
        tmp[len] = 0;
        char *endp;
        long idx = strtol(tmp, &endp, 10);
        if (len && *endp == 0 && obj.t == JV_LIST)
            obj = idx >= 0 && (size_t)idx < obj.l->n ? obj.l->v[idx] : jv_undef();
        else
            obj = get_attr(obj, tmp);
        if (!dot) break;
        p = dot + 1;
    }
    return obj;
}

static int get_item(rctx *R, const jnode *n, jv obj, jv key, jv *out) {
    *out = jv_undef();
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jv *v = jdict_get(obj.d, key);
        if (v) *out = *v;
        return 0;
    }
    if (obj.t == JV_LOOP && key.t == JV_STR) {
        char tmp[32];
        if (key.s.n < sizeof tmp) {
            memcpy(tmp, key.s.p, key.s.n);
            tmp[key.s.n] = 0;
            *out = get_attr(obj, tmp);
        }
        return 0;
    }
    if ((obj.t == JV_LIST || obj.t == JV_STR) && is_int_like(key)) {
        int64_t i = int_of(key);
        if (obj.t == JV_LIST) {
            int64_t len = (int64_t)obj.l->n;
            if (i < 0) i += len;
            if (i >= 0 && i < len) *out = obj.l->v[i];
            return 0;
        }
        size_t *off, c;
        int rc = cp_offsets(R, n, obj, &off, &c);
        if (rc) return rc;
        if (i < 0) i += (int64_t)c;
        if (i >= 0 && i < (int64_t)c) *out = jv_str(obj.s.p + off[i], off[i + 1] - off[i]);
        return 0;
    }
    return 0; /* like Jinja: a failed subscript is undefined */
}

static int do_slice(rctx *R, const jnode *n, jv obj, jv *parts, jv *out) {
    int64_t len;
    size_t *off = NULL, c = 0;
    int rc;
    if (obj.t == JV_LIST) {
        len = (int64_t)obj.l->n;
    } else if (obj.t == JV_STR) {
        if ((rc = cp_offsets(R, n, obj, &off, &c))) return rc;
        len = (int64_t)c;
    } else if (obj.t == JV_UNDEF) {
        *out = jv_undef();
        return 0;
    } else {
        return rerr(R, n, ERR_INVALID, "cannot slice a %s value", jv_type_name(obj));
    }
    for (int k = 0; k < 3; k++)
        if (parts[k].t != JV_UNDEF && parts[k].t != JV_NONE && !is_int_like(parts[k]))
            return rerr(R, n, ERR_INVALID, "slice indices must be integers");
    int64_t st = parts[2].t == JV_INT || parts[2].t == JV_BOOL ? int_of(parts[2]) : 1;
    if (st == 0) return rerr(R, n, ERR_INVALID, "slice step cannot be zero");
    if (st < -len - 1 || st > len + 1) st = st < 0 ? -len - 1 : len + 1; /* same items, no overflow */
    int64_t a, b;
    bool has_a = is_int_like(parts[0]), has_b = is_int_like(parts[1]);
    if (st > 0) {
        a = has_a ? int_of(parts[0]) : 0;
        b = has_b ? int_of(parts[1]) : len;
        if (a < 0) a = a + len < 0 ? 0 : a + len;
        if (b < 0) b = b + len < 0 ? 0 : b + len;
        if (a > len) a = len;
        if (b > len) b = len;
    } else {
        a = has_a ? int_of(parts[0]) : len - 1;
        b = has_b ? int_of(parts[1]) : -1;
        if (has_a && a < 0) a = a + len < -1 ? -1 : a + len;
        if (has_b && b < 0) b = b + len < -1 ? -1 : b + len;
        if (a > len - 1) a = len - 1;
        if (b > len - 1) b = len - 1;
    }
    size_t count = 0;
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) count++;
    if (obj.t == JV_LIST) {
        if ((rc = make_list(R, n, count, out))) return rc;
        size_t k = 0;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) out->l->v[k++] = obj.l->v[i];
        return 0;
    }
    jbuf bb = {.limit = JINJA_MAX_OUTPUT};
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) jbuf_put(&bb, obj.s.p + off[i], off[i + 1] - off[i]);
    return buf_to_str(R, n, &bb, out);
}

/* ---- operators ------------------------------------------------------------------ */

static int binop(rctx *R, const jnode *n, int op, jv a, jv b, jv *out) {
    static const char *const opname[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    int rc;
    if (op == OP_CONCAT) {
        jv sa, sb;
        if ((rc = to_str(R, n, a, &sa)) || (rc = to_str(R, n, b, &sb))) return rc;
        size_t len;
        if (!add_ok(sa.s.n, sb.s.n, &len)) return oom(R, n);
        char *p = jarena_alloc(&R->a, len + 1);
        if (!p) return oom(R, n);
        memcpy(p, sa.s.p, sa.s.n);
        memcpy(p + sa.s.n, sb.s.p, sb.s.n);
        *out = jv_str(p, len);
        return 0;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        return rerr(R, n, ERR_INVALID, "undefined value used with '%s'", opname[op]);
    if (is_num(a) && is_num(b)) {
        bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
        int64_t x = int_of(a), y = int_of(b), r;
        double fx = num_of(a), fy = num_of(b);
        switch (op) {
        case OP_ADD:
            if (ints) {
                if (__builtin_add_overflow(x, y, &r)) return rerr(R, n, ERR_RANGE, "integer overflow");
                *out = jv_int(r);
            } else *out = jv_float(fx + fy);
            return 0;
        case OP_SUB:
            if (ints) {
                if (__builtin_sub_overflow(x, y, &r)) return rerr(R, n, ERR_RANGE, "integer overflow");
                *out = jv_int(r);
            } else *out = jv_float(fx - fy);
            return 0;
        case OP_MUL:
            if (ints) {
                if (__builtin_mul_overflow(x, y, &r)) return rerr(R, n, ERR_RANGE, "integer overflow");
                *out = jv_int(r);
            } else *out = jv_float(fx * fy);
            return 0;
        case OP_DIV:
            if (fy == 0) return rerr(R, n, ERR_INVALID, "division by zero");
            *out = jv_float(fx / fy);
            return 0;
        case OP_FLOORDIV:
        case OP_MOD:
            if (fy == 0) return rerr(R, n, ERR_INVALID, "division by zero");
            if (ints) {
                if (x == INT64_MIN && y == -1) return rerr(R, n, ERR_RANGE, "integer overflow");
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q -= 1;
                    m += y;
                }
                *out = jv_int(op == OP_MOD ? m : q);
            } else {
                double q = floor(fx / fy), m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                *out = jv_float(op == OP_MOD ? m : q);
            }
            return 0;
        case OP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1, base = x, e2 = y;
                while (e2 > 0) {
                    if ((e2 & 1) && __builtin_mul_overflow(acc, base, &acc)) return rerr(R, n, ERR_RANGE, "integer overflow");
                    e2 >>= 1;
                    if (e2 && __builtin_mul_overflow(base, base, &base)) return rerr(R, n, ERR_RANGE, "integer overflow");
                }
                *out = jv_int(acc);
            } else {
                *out = jv_float(pow(fx, fy));
            }
            return 0;
        }
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        size_t len;
        if (!add_ok(a.s.n, b.s.n, &len)) return oom(R, n);
        char *p = jarena_alloc(&R->a, len + 1);
        if (!p) return oom(R, n);
        memcpy(p, a.s.p, a.s.n);
        memcpy(p + a.s.n, b.s.p, b.s.n);
        *out = jv_str(p, len);
        return 0;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        if ((rc = make_list(R, n, a.l->n + b.l->n, out))) return rc;
        if (a.l->n) memcpy(out->l->v, a.l->v, a.l->n * sizeof(jv));
        if (b.l->n) memcpy(out->l->v + a.l->n, b.l->v, b.l->n * sizeof(jv));
        return 0;
    }
    if (op == OP_MUL && ((a.t == JV_STR || a.t == JV_LIST) && is_int_like(b))) {
        jv t = a;
        a = b;
        b = t;
    }
    if (op == OP_MUL && is_int_like(a) && (b.t == JV_STR || b.t == JV_LIST)) {
        int64_t k = int_of(a);
        if (k < 0) k = 0;
        size_t unit = b.t == JV_STR ? b.s.n : b.l->n * sizeof(jv), total;
        if (!mul_ok(unit, (size_t)k, &total) || total > JINJA_MAX_MEMORY) return oom(R, n);
        if (b.t == JV_STR) {
            char *p = jarena_alloc(&R->a, total + 1);
            if (!p) return oom(R, n);
            for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * b.s.n, b.s.p, b.s.n);
            *out = jv_str(p, total);
        } else {
            if ((rc = make_list(R, n, b.l->n * (size_t)k, out))) return rc;
            for (int64_t i = 0; i < k; i++)
                if (b.l->n) memcpy(out->l->v + (size_t)i * b.l->n, b.l->v, b.l->n * sizeof(jv));
        }
        return 0;
    }
    return rerr(R, n, ERR_INVALID, "unsupported operand types for %s: %s and %s", opname[op], jv_type_name(a),
                jv_type_name(b));
}

static int compare(rctx *R, const jnode *n, int op, jv a, jv b, bool *res) {
    if (op == OP_EQ) { *res = jv_eq(a, b); return 0; }
    if (op == OP_NE) { *res = !jv_eq(a, b); return 0; }
    if (op == OP_IN || op == OP_NOTIN) {
        bool found = false;
        if (b.t == JV_STR) {
            if (a.t != JV_STR)
                return rerr(R, n, ERR_INVALID, "'in <string>' requires a string on the left, not %s", jv_type_name(a));
            found = a.s.n == 0 || (a.s.n <= b.s.n && memmem(b.s.p, b.s.n, a.s.p, a.s.n) != NULL);
        } else if (b.t == JV_LIST) {
            for (size_t i = 0; i < b.l->n && !found; i++) found = jv_eq(a, b.l->v[i]);
        } else if (b.t == JV_DICT || b.t == JV_NS) {
            found = jdict_get(b.d, a) != NULL;
        } else if (b.t != JV_UNDEF) {
            return rerr(R, n, ERR_INVALID, "argument of type %s is not iterable", jv_type_name(b));
        }
        *res = op == OP_IN ? found : !found;
        return 0;
    }
    int c;
    if (is_num(a) && is_num(b)) {
        double x = num_of(a), y = num_of(b);
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) c = int_of(a) < int_of(b) ? -1 : int_of(a) > int_of(b);
        else c = x < y ? -1 : x > y;
    } else if (a.t == JV_STR && b.t == JV_STR) {
        int m = memcmp(a.s.p, b.s.p, MIN(a.s.n, b.s.n));
        c = m ? m : a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
    } else {
        return rerr(R, n, ERR_INVALID, "cannot compare %s with %s", jv_type_name(a), jv_type_name(b));
    }
    switch (op) {
    case OP_LT: *res = c < 0; break;
    case OP_GT: *res = c > 0; break;
    case OP_LE: *res = c <= 0; break;
    default: *res = c >= 0; break;
    }
    return 0;
}

/* Sort order for sort/min/max/dictsort: numbers, then strings. */
static int order(jv a, jv b, bool case_sensitive) {
    if (is_num(a) && is_num(b)) {
        double x = num_of(a), y = num_of(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = MIN(a.s.n, b.s.n);
        for (size_t i = 0; i < n; i++) {
            int x = (unsigned char)a.s.p[i], y = (unsigned char)b.s.p[i];
            if (!case_sensitive) {
                if (x >= 'A' && x <= 'Z') x += 32;
                if (y >= 'A' && y <= 'Z') y += 32;
            }
            if (x != y) return x < y ? -1 : 1;
        }
        return a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
    }
    return a.t < b.t ? -1 : a.t > b.t;
}

/* ---- tests ------------------------------------------------------------------ */

static int run_test(rctx *R, const jnode *n, const char *name, jv v, const args *a, bool *res) {
    const jv *arg = arg_get(a, 0, NULL);
    jv x = arg ? *arg : jv_undef();
    if (!strcmp(name, "defined")) *res = v.t != JV_UNDEF;
    else if (!strcmp(name, "undefined")) *res = v.t == JV_UNDEF;
    else if (!strcmp(name, "none")) *res = v.t == JV_NONE;
    else if (!strcmp(name, "string")) *res = v.t == JV_STR;
    else if (!strcmp(name, "mapping")) *res = v.t == JV_DICT;
    else if (!strcmp(name, "iterable")) *res = v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    else if (!strcmp(name, "sequence")) *res = v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR;
    else if (!strcmp(name, "number")) *res = is_num(v);
    else if (!strcmp(name, "integer")) *res = v.t == JV_INT;
    else if (!strcmp(name, "float")) *res = v.t == JV_FLOAT;
    else if (!strcmp(name, "boolean")) *res = v.t == JV_BOOL;
    else if (!strcmp(name, "true")) *res = v.t == JV_BOOL && v.b;
    else if (!strcmp(name, "false")) *res = v.t == JV_BOOL && !v.b;
    else if (!strcmp(name, "callable")) *res = v.t == JV_MACRO || v.t == JV_FUNC;
    else if (!strcmp(name, "escaped")) *res = false;
    else if (!strcmp(name, "even") || !strcmp(name, "odd") || !strcmp(name, "divisibleby")) {
        if (!is_int_like(v)) return rerr(R, n, ERR_INVALID, "test '%s' needs an integer, got %s", name, jv_type_name(v));
        int64_t d = name[0] == 'd' ? int_of(x) : 2;
        if (name[0] == 'd' && (!is_int_like(x) || d == 0)) return rerr(R, n, ERR_INVALID, "divisibleby needs a non-zero integer");
        int64_t m = d == -1 ? 0 : int_of(v) % d;
        *res = name[0] == 'o' ? m != 0 : m == 0;
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        bool lower = name[0] == 'l', ok = v.t == JV_STR, cased = false;
        for (size_t i = 0; ok && i < v.s.n; i++) {
            char c = v.s.p[i];
            if (c >= 'a' && c <= 'z') { cased = true; if (!lower) ok = false; }
            if (c >= 'A' && c <= 'Z') { cased = true; if (lower) ok = false; }
        }
        *res = ok && cased;
    } else if (!strcmp(name, "sameas")) {
        *res = v.t == x.t && (v.t == JV_NONE || v.t == JV_UNDEF || (v.t == JV_BOOL && v.b == x.b) || jv_eq(v, x));
    } else if (!strcmp(name, "in")) {
        return compare(R, n, OP_IN, v, x, res);
    } else {
        int op = 0;
        if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) op = OP_EQ;
        else if (!strcmp(name, "ne") || !strcmp(name, "!=")) op = OP_NE;
        else if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) op = OP_LT;
        else if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">")) op = OP_GT;
        else if (!strcmp(name, "le") || !strcmp(name, "<=")) op = OP_LE;
        else if (!strcmp(name, "ge") || !strcmp(name, ">=")) op = OP_GE;
        if (!op) return rerr(R, n, ERR_UNSUPPORTED, "unknown test '%s'", name);
        return compare(R, n, op, v, x, res);
    }
    return 0;
}

/* ---- string functions ----------------------------------------------------------- */

static bool py_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f); }

static bool in_chars(jv chars, const char *p, size_t clen) {
    /* is the code point p[0..clen) one of `chars`? */
    for (size_t i = 0; i + clen <= chars.s.n;) {
        size_t l = 1;
        while (i + l < chars.s.n && ((unsigned char)chars.s.p[i + l] & 0xC0) == 0x80) l++;
        if (l == clen && memcmp(chars.s.p + i, p, clen) == 0) return true;
        i += l;
    }
    return false;
}

static size_t cp_len_at(const char *p, size_t n) {
    size_t l = 1;
    while (l < n && ((unsigned char)p[l] & 0xC0) == 0x80) l++;
    return l;
}

/* strip/lstrip/rstrip with Python semantics; chars NULL → whitespace. */
static jv do_strip(jv s, const jv *chars, bool left, bool right) {
    const char *p = s.s.p;
    size_t a = 0, b = s.s.n;
    bool ws = !chars || chars->t != JV_STR;
    if (left) {
        while (a < b) {
            size_t l = cp_len_at(p + a, b - a);
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

static int case_map(rctx *R, const jnode *n, jv s, int mode, jv *out) {
    /* mode 0 upper, 1 lower, 2 capitalize, 3 Python title, 4 Jinja title filter */
    char *p = jarena_alloc(&R->a, s.s.n + 1);
    if (!p) return oom(R, n);
    bool prev_cased = false;
    for (size_t i = 0; i < s.s.n; i++) {
        char c = s.s.p[i];
        bool up = c >= 'A' && c <= 'Z', lo = c >= 'a' && c <= 'z';
        bool upper;
        switch (mode) {
        case 0: upper = true; break;
        case 1: upper = false; break;
        case 2: upper = i == 0; break;
        case 3: upper = !prev_cased; break;
        default: {
            char pc = i ? s.s.p[i - 1] : ' ';
            upper = i == 0 || py_space((unsigned char)pc) || pc == '-' || pc == '(' || pc == '{' || pc == '[' || pc == '<';
        }
        }
        if (upper && lo) c = (char)(c - 32);
        else if (!upper && up) c = (char)(c + 32);
        p[i] = c;
        if (mode == 3) prev_cased = up || lo || ((unsigned char)c >= 0x80 && prev_cased);
    }
    *out = jv_str(p, s.s.n);
    return 0;
}

static int str_replace(rctx *R, const jnode *n, jv s, jv old, jv rep, int64_t count, jv *out) {
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    if (old.s.n == 0) {
        int64_t done = 0;
        for (size_t i = 0; i <= s.s.n;) {
            if (count < 0 || done < count) {
                jbuf_put(&b, rep.s.p, rep.s.n);
                done++;
            }
            if (i == s.s.n) break;
            size_t l = cp_len_at(s.s.p + i, s.s.n - i);
            jbuf_put(&b, s.s.p + i, l);
            i += l;
        }
    } else {
        size_t i = 0;
        int64_t done = 0;
        while (i < s.s.n && !b.over) {
            const char *hit = (count < 0 || done < count) ? memmem(s.s.p + i, s.s.n - i, old.s.p, old.s.n) : NULL;
            if (!hit) {
                jbuf_put(&b, s.s.p + i, s.s.n - i);
                break;
            }
            jbuf_put(&b, s.s.p + i, (size_t)(hit - (s.s.p + i)));
            jbuf_put(&b, rep.s.p, rep.s.n);
            i = (size_t)(hit - s.s.p) + old.s.n;
            done++;
        }
    }
    return buf_to_str(R, n, &b, out);
}

static int str_split(rctx *R, const jnode *n, jv s, const jv *sep, int64_t maxsplit, jv *out) {
    /* at most s.n + 1 pieces */
    jlist *l = jlist_new(&R->a, s.s.n + 1);
    if (!l) return oom(R, n);
    size_t k = 0;
    const char *p = s.s.p;
    size_t len = s.s.n, i = 0;
    if (!sep || sep->t == JV_NONE || sep->t == JV_UNDEF) {
        for (;;) {
            while (i < len && py_space((unsigned char)p[i])) i++;
            if (i >= len) break;
            if (maxsplit >= 0 && (int64_t)k == maxsplit) {
                size_t e = len;
                while (e > i && py_space((unsigned char)p[e - 1])) e--;
                l->v[k++] = jv_str(p + i, e - i);
                break;
            }
            size_t st = i;
            while (i < len && !py_space((unsigned char)p[i])) i++;
            l->v[k++] = jv_str(p + st, i - st);
        }
    } else {
        if (sep->t != JV_STR) return rerr(R, n, ERR_INVALID, "split separator must be a string");
        if (sep->s.n == 0) return rerr(R, n, ERR_INVALID, "empty split separator");
        for (;;) {
            const char *hit = (maxsplit < 0 || (int64_t)k < maxsplit) ? memmem(p + i, len - i, sep->s.p, sep->s.n) : NULL;
            if (!hit) {
                l->v[k++] = jv_str(p + i, len - i);
                break;
            }
            l->v[k++] = jv_str(p + i, (size_t)(hit - (p + i)));
            i = (size_t)(hit - p) + sep->s.n;
        }
    }
    l->n = k;
    out->t = JV_LIST;
    out->l = l;
    return 0;
}

static int join_items(rctx *R, const jnode *n, jlist *items, jv sep, const jv *attr, jv *out) {
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    for (size_t i = 0; i < items->n && !b.over; i++) {
        if (i) jbuf_put(&b, sep.s.p, sep.s.n);
        jv x = attr ? get_path(items->v[i], *attr) : items->v[i];
        jv_to_str(&b, x);
    }
    return buf_to_str(R, n, &b, out);
}

/* "{} and {0} and {name}" with positional/keyword arguments. */
static int str_format(rctx *R, const jnode *n, jv fmt, const args *a, jv *out) {
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    int auto_idx = 0;
    for (size_t i = 0; i < fmt.s.n && !b.over; i++) {
        char c = fmt.s.p[i];
        if (c == '{' && i + 1 < fmt.s.n && fmt.s.p[i + 1] == '{') { jbuf_putc(&b, '{'); i++; continue; }
        if (c == '}' && i + 1 < fmt.s.n && fmt.s.p[i + 1] == '}') { jbuf_putc(&b, '}'); i++; continue; }
        if (c != '{') { jbuf_putc(&b, c); continue; }
        const char *close = memchr(fmt.s.p + i, '}', fmt.s.n - i);
        if (!close) { free(b.p); return rerr(R, n, ERR_INVALID, "format: unmatched '{'"); }
        size_t fl = (size_t)(close - (fmt.s.p + i + 1));
        char field[64];
        if (fl >= sizeof field || memchr(fmt.s.p + i + 1, ':', fl) || memchr(fmt.s.p + i + 1, '!', fl)) {
            free(b.p);
            return rerr(R, n, ERR_UNSUPPORTED, "format: only plain {} / {0} / {name} fields are supported");
        }
        memcpy(field, fmt.s.p + i + 1, fl);
        field[fl] = 0;
        const jv *v;
        if (fl == 0) v = arg_get(a, auto_idx++, NULL);
        else if (field[0] >= '0' && field[0] <= '9') v = arg_get(a, atoi(field), NULL);
        else v = arg_get(a, 1 << 30, field);
        if (!v) { free(b.p); return rerr(R, n, ERR_INVALID, "format: no argument for '{%s}'", field); }
        jv_to_str(&b, *v);
        i += fl + 1;
    }
    return buf_to_str(R, n, &b, out);
}

static int call_method(rctx *R, const jnode *n, jv obj, const char *m, const args *a, jv *out) {
    const jv *a0 = arg_get(a, 0, NULL), *a1 = arg_get(a, 1, NULL);
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
            const jv *sep = arg_get(a, 0, "sep"), *mx = arg_get(a, 1, "maxsplit");
            int64_t maxsplit = mx && is_int_like(*mx) ? int_of(*mx) : -1;
            if (m[0] == 'r' && maxsplit >= 0)
                return rerr(R, n, ERR_UNSUPPORTED, "rsplit with maxsplit is not supported");
            return str_split(R, n, obj, sep, maxsplit, out);
        }
        if (!strcmp(m, "splitlines")) {
            jlist *l = jlist_new(&R->a, obj.s.n + 1);
            if (!l) return oom(R, n);
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
            if (!a0) return rerr(R, n, ERR_INVALID, "%s needs an argument", m);
            jlist one = {1, (jv *)a0};
            const jlist *cands = a0->t == JV_LIST ? a0->l : &one;
            for (size_t i = 0; i < cands->n && !hit; i++) {
                jv c = cands->v[i];
                if (c.t != JV_STR) return rerr(R, n, ERR_INVALID, "%s argument must be a string", m);
                if (c.s.n <= obj.s.n)
                    hit = memcmp(start ? obj.s.p : obj.s.p + obj.s.n - c.s.n, c.s.p, c.s.n) == 0;
            }
            *out = jv_bool(hit);
            return 0;
        }
        if (!strcmp(m, "replace")) {
            if (!a0 || !a1 || a0->t != JV_STR || a1->t != JV_STR) return rerr(R, n, ERR_INVALID, "replace needs two strings");
            const jv *c = arg_get(a, 2, "count");
            return str_replace(R, n, obj, *a0, *a1, c && is_int_like(*c) ? int_of(*c) : -1, out);
        }
        if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "count")) {
            if (!a0 || a0->t != JV_STR) return rerr(R, n, ERR_INVALID, "%s needs a string argument", m);
            int64_t pos = -1, cnt = 0;
            for (size_t i = 0; i + a0->s.n <= obj.s.n;) {
                if (memcmp(obj.s.p + i, a0->s.p, a0->s.n) == 0) {
                    if (pos < 0 || m[0] == 'r') pos = (int64_t)jutf8_len(obj.s.p, i);
                    cnt++;
                    if (m[0] == 'c') { i += a0->s.n ? a0->s.n : 1; continue; }
                    if (m[0] != 'r') break;
                }
                i++;
            }
            if (m[0] == 'c') { *out = jv_int(a0->s.n ? cnt : (int64_t)jutf8_len(obj.s.p, obj.s.n) + 1); return 0; }
            if (m[0] == 'i' && pos < 0) return rerr(R, n, ERR_INVALID, "substring not found");
            *out = jv_int(pos);
            return 0;
        }
        if (!strcmp(m, "join")) {
            if (!a0) return rerr(R, n, ERR_INVALID, "join needs an argument");
            jlist *items;
            if ((rc = iter_items(R, n, *a0, &items))) return rc;
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
            if (!a0) return rerr(R, n, ERR_INVALID, "get needs a key");
            jv *v = jdict_get(d, *a0);
            *out = v ? *v : a1 ? *a1 : jv_none();
            return 0;
        }
        int which = !strcmp(m, "items") ? 0 : !strcmp(m, "keys") ? 1 : !strcmp(m, "values") ? 2 : -1;
        if (which >= 0) {
            if ((rc = make_list(R, n, d->n, out))) return rc;
            for (size_t i = 0; i < d->n; i++) {
                if (which == 1) out->l->v[i] = d->k[i];
                else if (which == 2) out->l->v[i] = d->v[i];
                else {
                    jv pair;
                    if ((rc = make_list(R, n, 2, &pair))) return rc;
                    pair.l->v[0] = d->k[i];
                    pair.l->v[1] = d->v[i];
                    out->l->v[i] = pair;
                }
            }
            return 0;
        }
    } else if (obj.t == JV_LOOP && !strcmp(m, "cycle")) {
        int np = n_positional(a);
        if (np == 0) return rerr(R, n, ERR_INVALID, "loop.cycle needs arguments");
        *out = *arg_get(a, (int)(obj.loop->index0 % (size_t)np), NULL);
        return 0;
    } else if (obj.t == JV_LIST && (!strcmp(m, "index") || !strcmp(m, "count"))) {
        if (!a0) return rerr(R, n, ERR_INVALID, "%s needs an argument", m);
        int64_t cnt = 0, pos = -1;
        for (size_t i = 0; i < obj.l->n; i++)
            if (jv_eq(obj.l->v[i], *a0)) {
                if (pos < 0) pos = (int64_t)i;
                cnt++;
            }
        if (m[0] == 'i' && pos < 0) return rerr(R, n, ERR_INVALID, "value not in list");
        *out = jv_int(m[0] == 'c' ? cnt : pos);
        return 0;
    }
    return rerr(R, n, ERR_INVALID, "a %s value has no method '%s'", jv_type_name(obj), m);
}

/* ---- filters ------------------------------------------------------------------ */

static int apply_filter(rctx *R, frame *f, const jnode *n, const char *name, jv v, const args *a, jv *out);

static int html_escape(rctx *R, const jnode *n, jv s, jv *out) {
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    for (size_t i = 0; i < s.s.n; i++) {
        char c = s.s.p[i];
        switch (c) {
        case '&': jbuf_put(&b, "&amp;", 5); break;
        case '<': jbuf_put(&b, "&lt;", 4); break;
        case '>': jbuf_put(&b, "&gt;", 4); break;
        case '"': jbuf_put(&b, "&#34;", 5); break;
        case '\'': jbuf_put(&b, "&#39;", 5); break;
        default: jbuf_putc(&b, c);
        }
    }
    return buf_to_str(R, n, &b, out);
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

static int tojson_filter(rctx *R, const jnode *n, jv v, const args *a, jv *out) {
    const jv *ind = arg_get(a, 0, "indent"), *sep = arg_get(a, 99, "separators"), *sk = arg_get(a, 99, "sort_keys");
    int indent = ind && is_int_like(*ind) ? (int)MAX(MIN(int_of(*ind), 64), 0) : -1;
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
    if (!jv_to_json(&b, v, indent, item_sep, key_sep, sk && jv_truthy(*sk), 0)) {
        free(b.p);
        return rerr(R, n, ERR_INVALID, "tojson: a %s value (or one inside it) is not JSON serializable", jv_type_name(v));
    }
    return buf_to_str(R, n, &b, out);
}

/* selectattr/rejectattr/select/reject */
static int select_items(rctx *R, const jnode *n, jv v, const args *a, bool by_attr, bool keep, jv *out) {
    jlist *items;
    int rc = iter_items(R, n, v, &items);
    if (rc) return rc;
    if ((rc = step(R, n, (long)items->n))) return rc;
    const jv *attr = by_attr ? arg_get(a, 0, NULL) : NULL;
    if (by_attr && !attr) return rerr(R, n, ERR_INVALID, "selectattr/rejectattr need an attribute name");
    int ti = by_attr ? 1 : 0;
    const jv *test = arg_get(a, ti, NULL);
    if (test && test->t != JV_STR) return rerr(R, n, ERR_INVALID, "test name must be a string");
    char tname[32] = "";
    if (test) {
        if (test->s.n >= sizeof tname) return rerr(R, n, ERR_UNSUPPORTED, "unknown test");
        memcpy(tname, test->s.p, test->s.n);
        tname[test->s.n] = 0;
    }
    /* the remaining positional arguments go to the test */
    args targs = {0};
    int np = n_positional(a);
    if (np > ti + 1) {
        targs.n = np - ti - 1;
        targs.v = jarena_alloc(&R->a, (size_t)targs.n * sizeof(jv));
        targs.names = jarena_alloc(&R->a, (size_t)targs.n * sizeof(char *));
        if (!targs.v || !targs.names) return oom(R, n);
        for (int i = 0; i < targs.n; i++) targs.v[i] = *arg_get(a, ti + 1 + i, NULL);
    }
    jlist *res = jlist_new(&R->a, items->n);
    if (!res) return oom(R, n);
    size_t k = 0;
    for (size_t i = 0; i < items->n; i++) {
        jv x = by_attr ? get_path(items->v[i], *attr) : items->v[i];
        bool t;
        if (test) {
            if ((rc = run_test(R, n, tname, x, &targs, &t))) return rc;
        } else {
            t = jv_truthy(x);
        }
        if (t == keep) res->v[k++] = items->v[i];
    }
    res->n = k;
    out->t = JV_LIST;
    out->l = res;
    return 0;
}

static int sort_items(rctx *R, const jnode *n, jlist *items, const jv *attr, bool reverse, bool cs, jv *out) {
    int rc;
    if ((rc = make_list(R, n, items->n, out))) return rc;
    if ((rc = step(R, n, (long)items->n))) return rc;
    /* insertion sort on indices (stable, no global state); lists in chat templates are small */
    size_t len = items->n;
    jv *keys = jarena_alloc(&R->a, (len + 1) * sizeof(jv));
    size_t *idx = jarena_alloc(&R->a, (len + 1) * sizeof(size_t));
    if (!keys || !idx) return oom(R, n);
    if (len > 4096) return rerr(R, n, ERR_RANGE, "sort of more than 4096 items");
    for (size_t i = 0; i < len; i++) {
        keys[i] = attr ? get_path(items->v[i], *attr) : items->v[i];
        idx[i] = i;
    }
    for (size_t i = 1; i < len; i++) {
        size_t x = idx[i], j = i;
        while (j > 0) {
            int c = order(keys[idx[j - 1]], keys[x], cs);
            if (reverse ? c >= 0 : c <= 0) break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
    for (size_t i = 0; i < len; i++) out->l->v[i] = items->v[idx[i]];
    return 0;
}

static int apply_filter(rctx *R, frame *f, const jnode *n, const char *name, jv v, const args *a, jv *out) {
    const jv *a0 = arg_get(a, 0, NULL);
    jv s;
    int rc;
#define AS_STR()                                                     \
    do {                                                             \
        if ((rc = to_str(R, n, v, &s))) return rc;                   \
    } while (0)
    if (!strcmp(name, "safe")) { *out = v; return 0; }
    if (!strcmp(name, "trim")) {
        AS_STR();
        const jv *chars = arg_get(a, 0, "chars");
        *out = do_strip(s, chars, true, true);
        return 0;
    }
    if (!strcmp(name, "tojson")) return tojson_filter(R, n, v, a, out);
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        switch (v.t) {
        case JV_STR: *out = jv_int((int64_t)jutf8_len(v.s.p, v.s.n)); return 0;
        case JV_LIST: *out = jv_int((int64_t)v.l->n); return 0;
        case JV_DICT: case JV_NS: *out = jv_int((int64_t)v.d->n); return 0;
        case JV_UNDEF: *out = jv_int(0); return 0;
        default: return rerr(R, n, ERR_INVALID, "object of type %s has no length", jv_type_name(v));
        }
    }
    if (!strcmp(name, "upper")) { AS_STR(); return case_map(R, n, s, 0, out); }
    if (!strcmp(name, "lower")) { AS_STR(); return case_map(R, n, s, 1, out); }
    if (!strcmp(name, "capitalize")) { AS_STR(); return case_map(R, n, s, 2, out); }
    if (!strcmp(name, "title")) { AS_STR(); return case_map(R, n, s, 4, out); }
    if (!strcmp(name, "string")) return to_str(R, n, v, out);
    if (!strcmp(name, "escape") || !strcmp(name, "e")) { AS_STR(); return html_escape(R, n, s, out); }
    if (!strcmp(name, "replace")) {
        AS_STR();
        const jv *a1 = arg_get(a, 1, NULL), *c = arg_get(a, 2, "count");
        jv o, r;
        if (!a0 || !a1) return rerr(R, n, ERR_INVALID, "replace needs two arguments");
        if ((rc = to_str(R, n, *a0, &o)) || (rc = to_str(R, n, *a1, &r))) return rc;
        return str_replace(R, n, s, o, r, c && is_int_like(*c) ? int_of(*c) : -1, out);
    }
    if (!strcmp(name, "join")) {
        jlist *items;
        if ((rc = iter_items(R, n, v, &items))) return rc;
        const jv *sep = arg_get(a, 0, "d");
        jv sj = jv_str("", 0);
        if (sep && (rc = to_str(R, n, *sep, &sj))) return rc;
        return join_items(R, n, items, sj, arg_get(a, 1, "attribute"), out);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        jlist *items;
        if (v.t == JV_DICT) return rerr(R, n, ERR_UNSUPPORTED, "%s of a dict", name);
        if ((rc = iter_items(R, n, v, &items))) return rc;
        *out = items->n == 0 ? jv_undef() : items->v[name[0] == 'f' ? 0 : items->n - 1];
        return 0;
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const jv *dv = arg_get(a, 0, "default_value"), *bo = arg_get(a, 1, "boolean");
        bool use = bo && jv_truthy(*bo) ? !jv_truthy(v) : v.t == JV_UNDEF;
        *out = use ? (dv ? *dv : jv_str("", 0)) : v;
        return 0;
    }
    if (!strcmp(name, "int")) {
        const jv *dv = arg_get(a, 0, "default");
        int64_t i;
        if (is_int_like(v)) *out = jv_int(int_of(v));
        else if (v.t == JV_FLOAT && isfinite(v.f) && fabs(v.f) < 9e18) *out = jv_int((int64_t)v.f);
        else if (v.t == JV_STR && parse_int_str(v, &i) == 0) *out = jv_int(i);
        else *out = dv ? *dv : jv_int(0);
        return 0;
    }
    if (!strcmp(name, "float")) {
        const jv *dv = arg_get(a, 0, "default");
        if (is_num(v)) { *out = jv_float(num_of(v)); return 0; }
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
    if (!strcmp(name, "list")) {
        jlist *items;
        if ((rc = iter_items(R, n, v, &items))) return rc;
        out->t = JV_LIST;
        out->l = items;
        return 0;
    }
    if (!strcmp(name, "items")) {
        if (v.t == JV_UNDEF) return make_list(R, n, 0, out);
        if (v.t != JV_DICT) return rerr(R, n, ERR_INVALID, "items filter needs a mapping, got %s", jv_type_name(v));
        args none = {0};
        return call_method(R, n, v, "items", &none, out);
    }
    if (!strcmp(name, "dictsort")) {
        if (v.t != JV_DICT) return rerr(R, n, ERR_INVALID, "dictsort needs a mapping");
        args none = {0};
        jv pairs;
        if ((rc = call_method(R, n, v, "items", &none, &pairs))) return rc;
        const jv *cs = arg_get(a, 0, "case_sensitive"), *by = arg_get(a, 1, "by"), *rev = arg_get(a, 2, "reverse");
        jv key = jv_int(by && by->t == JV_STR && by->s.n == 5 && !memcmp(by->s.p, "value", 5) ? 1 : 0);
        return sort_items(R, n, pairs.l, &key, rev && jv_truthy(*rev), cs && jv_truthy(*cs), out);
    }
    if (!strcmp(name, "selectattr")) return select_items(R, n, v, a, true, true, out);
    if (!strcmp(name, "rejectattr")) return select_items(R, n, v, a, true, false, out);
    if (!strcmp(name, "select")) return select_items(R, n, v, a, false, true, out);
    if (!strcmp(name, "reject")) return select_items(R, n, v, a, false, false, out);
    if (!strcmp(name, "map")) {
        jlist *items;
        if ((rc = iter_items(R, n, v, &items))) return rc;
        if ((rc = step(R, n, (long)items->n))) return rc;
        const jv *attr = arg_get(a, 99, "attribute"), *dv = arg_get(a, 99, "default");
        if ((rc = make_list(R, n, items->n, out))) return rc;
        if (attr) {
            for (size_t i = 0; i < items->n; i++) {
                jv x = get_path(items->v[i], *attr);
                out->l->v[i] = x.t == JV_UNDEF && dv ? *dv : x;
            }
            return 0;
        }
        if (!a0 || a0->t != JV_STR) return rerr(R, n, ERR_INVALID, "map needs attribute= or a filter name");
        char fname[32];
        if (a0->s.n >= sizeof fname) return rerr(R, n, ERR_UNSUPPORTED, "map: unknown filter");
        memcpy(fname, a0->s.p, a0->s.n);
        fname[a0->s.n] = 0;
        if (!strcmp(fname, "map")) return rerr(R, n, ERR_UNSUPPORTED, "map: nested map");
        args rest = {0};
        int np = n_positional(a);
        if (np > 1) {
            rest.n = np - 1;
            rest.v = jarena_alloc(&R->a, (size_t)rest.n * sizeof(jv));
            rest.names = jarena_alloc(&R->a, (size_t)rest.n * sizeof(char *));
            if (!rest.v || !rest.names) return oom(R, n);
            for (int i = 0; i < rest.n; i++) rest.v[i] = *arg_get(a, 1 + i, NULL);
        }
        for (size_t i = 0; i < items->n; i++)
            if ((rc = apply_filter(R, f, n, fname, items->v[i], &rest, &out->l->v[i]))) return rc;
        return 0;
    }
    if (!strcmp(name, "abs")) {
        if (v.t == JV_INT) *out = v.i == INT64_MIN ? jv_float(9223372036854775808.0) : jv_int(v.i < 0 ? -v.i : v.i);
        else if (v.t == JV_FLOAT) *out = jv_float(fabs(v.f));
        else if (v.t == JV_BOOL) *out = jv_int(v.b);
        else return rerr(R, n, ERR_INVALID, "abs of a %s value", jv_type_name(v));
        return 0;
    }
    if (!strcmp(name, "round")) {
        if (!is_num(v)) return rerr(R, n, ERR_INVALID, "round of a %s value", jv_type_name(v));
        const jv *pr = arg_get(a, 0, "precision"), *me = arg_get(a, 1, "method");
        int p = pr && is_int_like(*pr) ? (int)MAX(MIN(int_of(*pr), 15), -15) : 0;
        double x = num_of(v), m = pow(10, p), r;
        char how = me && me->t == JV_STR && me->s.n ? me->s.p[0] : 'c';
        if (how == 'f') r = floor(x * m) / m;
        else if (how == 'c' && me && me->s.n > 1 && me->s.p[1] == 'e') r = ceil(x * m) / m;
        else r = round(x * m) / m;
        *out = jv_float(r);
        return 0;
    }
    if (!strcmp(name, "reverse")) {
        if (v.t == JV_STR) {
            jv parts[3] = {jv_undef(), jv_undef(), jv_int(-1)};
            return do_slice(R, n, v, parts, out);
        }
        jlist *items;
        if ((rc = iter_items(R, n, v, &items))) return rc;
        if ((rc = make_list(R, n, items->n, out))) return rc;
        for (size_t i = 0; i < items->n; i++) out->l->v[i] = items->v[items->n - 1 - i];
        return 0;
    }
    if (!strcmp(name, "sort")) {
        jlist *items;
        if ((rc = iter_items(R, n, v, &items))) return rc;
        const jv *rev = arg_get(a, 0, "reverse"), *cs = arg_get(a, 1, "case_sensitive"), *at = arg_get(a, 2, "attribute");
        return sort_items(R, n, items, at, rev && jv_truthy(*rev), cs && jv_truthy(*cs), out);
    }
    if (!strcmp(name, "unique")) {
        jlist *items;
        if ((rc = iter_items(R, n, v, &items))) return rc;
        if ((rc = step(R, n, (long)items->n))) return rc;
        if (items->n > 4096) return rerr(R, n, ERR_RANGE, "unique of more than 4096 items");
        if ((rc = make_list(R, n, items->n, out))) return rc;
        size_t k = 0;
        for (size_t i = 0; i < items->n; i++) {
            bool dup = false;
            for (size_t j = 0; j < k && !dup; j++) dup = jv_eq(out->l->v[j], items->v[i]);
            if (!dup) out->l->v[k++] = items->v[i];
        }
        out->l->n = k;
        return 0;
    }
    if (!strcmp(name, "min") || !strcmp(name, "max")) {
        jlist *items;
        if ((rc = iter_items(R, n, v, &items))) return rc;
        const jv *at = arg_get(a, 1, "attribute"), *cs = arg_get(a, 0, "case_sensitive");
        *out = jv_undef();
        for (size_t i = 0; i < items->n; i++) {
            if (i == 0) { *out = items->v[0]; continue; }
            jv x = at ? get_path(items->v[i], *at) : items->v[i], y = at ? get_path(*out, *at) : *out;
            int c = order(x, y, cs && jv_truthy(*cs));
            if (name[1] == 'i' ? c < 0 : c > 0) *out = items->v[i];
        }
        return 0;
    }
    if (!strcmp(name, "sum")) {
        jlist *items;
        if ((rc = iter_items(R, n, v, &items))) return rc;
        const jv *at = arg_get(a, 0, "attribute"), *st = arg_get(a, 1, "start");
        jv acc = st ? *st : jv_int(0);
        for (size_t i = 0; i < items->n; i++)
            if ((rc = binop(R, n, OP_ADD, acc, at ? get_path(items->v[i], *at) : items->v[i], &acc))) return rc;
        *out = acc;
        return 0;
    }
    if (!strcmp(name, "attr")) {
        if (!a0 || a0->t != JV_STR) return rerr(R, n, ERR_INVALID, "attr needs a name");
        *out = get_path(v, *a0);
        return 0;
    }
    if (!strcmp(name, "wordcount")) {
        AS_STR();
        jv words;
        if ((rc = str_split(R, n, s, NULL, -1, &words))) return rc;
        *out = jv_int((int64_t)words.l->n);
        return 0;
    }
    if (!strcmp(name, "indent")) {
        AS_STR();
        const jv *w = arg_get(a, 0, "width"), *first = arg_get(a, 1, "first"), *blank = arg_get(a, 2, "blank");
        jv pad = jv_str("    ", 4);
        if (w && w->t == JV_STR) pad = *w;
        else if (w && is_int_like(*w)) {
            int64_t k = MAX(MIN(int_of(*w), 256), 0);
            char *p = jarena_alloc(&R->a, (size_t)k + 1);
            if (!p) return oom(R, n);
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
                if ((!first_line || (first && jv_truthy(*first))) && (!is_blank || (blank && jv_truthy(*blank))))
                    jbuf_put(&b, pad.s.p, pad.s.n);
                at_start = false;
            }
            jbuf_putc(&b, s.s.p[i]);
            if (s.s.p[i] == '\n') {
                at_start = true;
                first_line = false;
            }
        }
        if (s.s.n == 0 && first && jv_truthy(*first) && blank && jv_truthy(*blank)) jbuf_put(&b, pad.s.p, pad.s.n);
        return buf_to_str(R, n, &b, out);
    }
#undef AS_STR
    return rerr(R, n, ERR_UNSUPPORTED, "unknown filter '%s'", name);
}

/* ---- functions and macros ------------------------------------------------------- */

static const char *fixed_date(void) { return getenv("KVLOOM_FIXED_DATE"); }

static int call_func(rctx *R, const jnode *n, int fn, const args *a, jv *out) {
    int rc;
    switch (fn) {
    case FN_RANGE: {
        int np = n_positional(a);
        int64_t v[3] = {0, 0, 1};
        if (np < 1 || np > 3) return rerr(R, n, ERR_INVALID, "range takes 1 to 3 arguments");
        for (int i = 0; i < np; i++) {
            const jv *x = arg_get(a, i, NULL);
            if (!is_int_like(*x)) return rerr(R, n, ERR_INVALID, "range arguments must be integers");
            v[np == 1 ? 1 : i] = int_of(*x);
        }
        if (v[2] == 0) return rerr(R, n, ERR_INVALID, "range step cannot be zero");
        double cnt = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2]) : ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
        if (cnt < 0) cnt = 0;
        if (cnt > JINJA_MAX_STEPS) return rerr(R, n, ERR_RANGE, "range of %.0f items is too long", cnt);
        if ((rc = step(R, n, (long)cnt))) return rc;
        if ((rc = make_list(R, n, (size_t)cnt, out))) return rc;
        for (size_t i = 0; i < (size_t)cnt; i++) out->l->v[i] = jv_int(v[0] + (int64_t)i * v[2]);
        return 0;
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        jdict *d = jdict_new(&R->a, 0);
        if (!d) return oom(R, n);
        for (int i = 0; i < a->n; i++) {
            if (a->names[i]) {
                if (!jdict_set(&R->a, d, jv_str(a->names[i], strlen(a->names[i])), a->v[i])) return oom(R, n);
            } else if (a->v[i].t == JV_DICT || a->v[i].t == JV_NS) {
                for (size_t k = 0; k < a->v[i].d->n; k++)
                    if (!jdict_set(&R->a, d, a->v[i].d->k[k], a->v[i].d->v[k])) return oom(R, n);
            } else {
                return rerr(R, n, ERR_INVALID, "%s() takes keyword arguments or a mapping", fn == FN_DICT ? "dict" : "namespace");
            }
        }
        out->t = fn == FN_DICT ? JV_DICT : JV_NS;
        out->d = d;
        return 0;
    }
    case FN_RAISE: {
        const jv *m = arg_get(a, 0, NULL);
        jbuf b = {.limit = 300};
        if (m) jv_to_str(&b, *m);
        rc = err_set(R->e, ERR_INVALID, "raise_exception: %.*s", (int)b.n, b.p ? b.p : "");
        free(b.p);
        return rc;
    }
    case FN_STRFTIME: {
        const jv *fmt = arg_get(a, 0, NULL);
        if (!fmt || fmt->t != JV_STR || fmt->s.n > 200) return rerr(R, n, ERR_INVALID, "strftime_now needs a format string");
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
        return jv_str_dup(&R->a, res, len, out) ? 0 : oom(R, n);
    }
    }
    return rerr(R, n, ERR_INVALID, "not callable");
}

static int call_macro(rctx *R, const jnode *n, const jnode *m, const args *a, jv *out) {
    int rc;
    if (R->depth >= JINJA_MAX_DEPTH) return rerr(R, n, ERR_RANGE, "macro calls nested deeper than %d", JINJA_MAX_DEPTH);
    if ((rc = step(R, n, 1))) return rc;
    frame *f;
    if ((rc = new_frame(R, n, R->root, &f))) return rc;
    int pos = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->names[i]) {
            bool known = false;
            for (int p = 0; p < m->n_names; p++) known |= !strcmp(m->names[p], a->names[i]);
            if (!known) return rerr(R, n, ERR_INVALID, "macro '%s' has no parameter '%s'", m->name, a->names[i]);
        } else if (pos++ >= m->n_names) {
            return rerr(R, n, ERR_INVALID, "macro '%s' takes %d arguments", m->name, m->n_names);
        }
    }
    for (int p = 0; p < m->n_names; p++) {
        const jv *v = arg_get(a, p, m->names[p]);
        jv val = jv_undef();
        if (v) val = *v;
        else if (m->list[p] && (rc = eval(R, f, m->list[p], &val))) return rc;
        if ((rc = set_var(R, n, f, m->names[p], val))) return rc;
    }
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    int saved_loop = R->in_loop;
    R->in_loop = 0;
    R->depth++;
    rc = exec(R, f, m->b, &b);
    R->depth--;
    R->in_loop = saved_loop;
    if (rc) {
        free(b.p);
        return rc;
    }
    return buf_to_str(R, n, &b, out);
}

/* ---- expressions ------------------------------------------------------------------ */

static int eval(rctx *R, frame *f, const jnode *n, jv *out) {
    int rc;
    jv a, b;
    switch (n->kind) {
    case E_CONST: *out = n->val; return 0;
    case E_NAME: {
        jv *v = lookup(f, n->name);
        *out = v ? *v : jv_undef();
        return 0;
    }
    case E_ATTR:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        *out = get_attr(a, n->attr);
        return 0;
    case E_ITEM:
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval(R, f, n->b, &b))) return rc;
        return get_item(R, n, a, b, out);
    case E_SLICE: {
        jv parts[3] = {jv_undef(), jv_undef(), jv_undef()};
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if (n->b && (rc = eval(R, f, n->b, &parts[0]))) return rc;
        if (n->c && (rc = eval(R, f, n->c, &parts[1]))) return rc;
        if (n->d && (rc = eval(R, f, n->d, &parts[2]))) return rc;
        return do_slice(R, n, a, parts, out);
    }
    case E_CALL: {
        args ar;
        if (n->a->kind == E_ATTR) {
            if ((rc = eval(R, f, n->a->a, &a))) return rc;
            jv field = get_attr(a, n->a->attr);
            if ((rc = eval_args(R, f, n, &ar))) return rc;
            if (field.t == JV_MACRO && a.t == JV_NS) return call_macro(R, n, field.m, &ar, out);
            if (a.t == JV_UNDEF)
                return rerr(R, n, ERR_INVALID, "cannot call method '%s' of an undefined value", n->a->attr);
            return call_method(R, n, a, n->a->attr, &ar, out);
        }
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if ((rc = eval_args(R, f, n, &ar))) return rc;
        if (a.t == JV_MACRO) return call_macro(R, n, a.m, &ar, out);
        if (a.t == JV_FUNC) return call_func(R, n, a.fn, &ar, out);
        if (n->a->kind == E_NAME) return rerr(R, n, ERR_INVALID, "'%s' is not callable (%s)", n->a->name, jv_type_name(a));
        return rerr(R, n, ERR_INVALID, "a %s value is not callable", jv_type_name(a));
    }
    case E_FILTER: {
        args ar;
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval_args(R, f, n, &ar))) return rc;
        return apply_filter(R, f, n, n->name, a, &ar, out);
    }
    case E_TEST: {
        args ar;
        bool res;
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval_args(R, f, n, &ar))) return rc;
        if ((rc = run_test(R, n, n->name, a, &ar, &res))) return rc;
        *out = jv_bool(n->op ? !res : res);
        return 0;
    }
    case E_BIN:
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval(R, f, n->b, &b))) return rc;
        return binop(R, n, n->op, a, b, out);
    case E_CMP: {
        bool res;
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval(R, f, n->b, &b))) return rc;
        if ((rc = compare(R, n, n->op, a, b, &res))) return rc;
        *out = jv_bool(res);
        return 0;
    }
    case E_AND:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if (!jv_truthy(a)) { *out = a; return 0; }
        return eval(R, f, n->b, out);
    case E_OR:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if (jv_truthy(a)) { *out = a; return 0; }
        return eval(R, f, n->b, out);
    case E_NOT:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        *out = jv_bool(!jv_truthy(a));
        return 0;
    case E_NEG:
    case E_POS:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if (!is_num(a)) return rerr(R, n, ERR_INVALID, "bad operand type for unary %c: %s", n->kind == E_NEG ? '-' : '+', jv_type_name(a));
        if (n->kind == E_POS) *out = a.t == JV_BOOL ? jv_int(a.b) : a;
        else if (a.t == JV_FLOAT) *out = jv_float(-a.f);
        else if (int_of(a) == INT64_MIN) return rerr(R, n, ERR_RANGE, "integer overflow");
        else *out = jv_int(-int_of(a));
        return 0;
    case E_COND:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if (jv_truthy(a)) return eval(R, f, n->b, out);
        if (n->c) return eval(R, f, n->c, out);
        *out = jv_undef();
        return 0;
    case E_LIST:
        if ((rc = make_list(R, n, (size_t)n->n_list, out))) return rc;
        for (int i = 0; i < n->n_list; i++)
            if ((rc = eval(R, f, n->list[i], &out->l->v[i]))) return rc;
        return 0;
    case E_DICT: {
        jdict *d = jdict_new(&R->a, (size_t)n->n_list / 2);
        if (!d) return oom(R, n);
        for (int i = 0; i + 1 < n->n_list; i += 2) {
            if ((rc = eval(R, f, n->list[i], &a)) || (rc = eval(R, f, n->list[i + 1], &b))) return rc;
            if (!jdict_set(&R->a, d, a, b)) return oom(R, n);
        }
        out->t = JV_DICT;
        out->d = d;
        return 0;
    }
    }
    return rerr(R, n, ERR_INVALID, "internal: bad expression node %d", n->kind);
}

/* ---- statements ------------------------------------------------------------------ */

static int output_over(rctx *R, const jnode *n) {
    return rerr(R, n, ERR_RANGE, "output longer than %u bytes", (unsigned)JINJA_MAX_OUTPUT);
}

static int bind_targets(rctx *R, const jnode *n, frame *f, jv item) {
    if (n->n_names == 1) return set_var(R, n, f, n->names[0], item);
    jlist *parts;
    int rc;
    if (item.t == JV_LIST) parts = item.l;
    else if ((rc = iter_items(R, n, item, &parts))) return rc;
    if ((int)parts->n != n->n_names)
        return rerr(R, n, ERR_INVALID, "cannot unpack %zu values into %d loop variables", parts->n, n->n_names);
    for (int i = 0; i < n->n_names; i++)
        if ((rc = set_var(R, n, f, n->names[i], parts->v[i]))) return rc;
    return 0;
}

static int exec_for(rctx *R, frame *f, const jnode *n, jbuf *out) {
    jv it;
    jlist *items;
    int rc;
    if ((rc = eval(R, f, n->a, &it))) return rc;
    if (it.t == JV_NONE) return rerr(R, n, ERR_INVALID, "cannot iterate over none");
    if ((rc = iter_items(R, n, it, &items))) return rc;
    if (n->d) { /* loop filter: `for x in xs if cond` */
        jlist *kept = jlist_new(&R->a, items->n);
        if (!kept) return oom(R, n);
        size_t k = 0;
        for (size_t i = 0; i < items->n; i++) {
            frame *lf;
            jv c;
            if ((rc = step(R, n, 1)) || (rc = new_frame(R, n, f, &lf)) || (rc = bind_targets(R, n, lf, items->v[i])) ||
                (rc = eval(R, lf, n->d, &c)))
                return rc;
            if (jv_truthy(c)) kept->v[k++] = items->v[i];
        }
        kept->n = k;
        items = kept;
    }
    jloop *L = jarena_alloc(&R->a, sizeof *L);
    if (!L) return oom(R, n);
    L->length = items->n;
    L->items = items;
    R->in_loop++;
    for (size_t i = 0; i < items->n; i++) {
        frame *lf;
        if ((rc = step(R, n, 1)) || (rc = new_frame(R, n, f, &lf)) || (rc = bind_targets(R, n, lf, items->v[i]))) break;
        L->index0 = i;
        jv lv = {.t = JV_LOOP, .loop = L};
        if ((rc = set_var(R, n, lf, "loop", lv))) break;
        if ((rc = exec(R, lf, n->b, out))) break;
        if (R->brk == 1) {
            R->brk = 0;
            break;
        }
        R->brk = 0;
    }
    R->in_loop--;
    if (rc) return rc;
    if (items->n == 0 && n->c) return exec(R, f, n->c, out);
    return 0;
}

static int exec(rctx *R, frame *f, const jnode *n, jbuf *out) {
    int rc;
    jv v;
    switch (n->kind) {
    case N_BODY:
        for (int i = 0; i < n->n_list && !R->brk; i++)
            if ((rc = exec(R, f, n->list[i], out))) return rc;
        return 0;
    case N_TEXT:
        jbuf_put(out, n->val.s.p, n->val.s.n);
        return out->over ? output_over(R, n) : 0;
    case N_OUTPUT:
        if ((rc = eval(R, f, n->a, &v))) return rc;
        jv_to_str(out, v);
        return out->over ? output_over(R, n) : 0;
    case N_IF:
        if ((rc = eval(R, f, n->a, &v))) return rc;
        if (jv_truthy(v)) return exec(R, f, n->b, out);
        return n->c ? exec(R, f, n->c, out) : 0;
    case N_FOR: return exec_for(R, f, n, out);
    case N_SET:
        if (n->a) {
            if ((rc = eval(R, f, n->a, &v))) return rc;
        } else {
            jbuf b = {.limit = JINJA_MAX_OUTPUT};
            if ((rc = exec(R, f, n->b, &b))) {
                free(b.p);
                return rc;
            }
            if ((rc = buf_to_str(R, n, &b, &v))) return rc;
        }
        if (n->attr) {
            jv *ns = lookup(f, n->name);
            if (!ns || ns->t != JV_NS)
                return rerr(R, n, ERR_INVALID, "cannot set attribute '%s' of '%s': not a namespace", n->attr, n->name);
            if (!jdict_set(&R->a, ns->d, jv_str(n->attr, strlen(n->attr)), v)) return oom(R, n);
            return 0;
        }
        return set_var(R, n, f, n->name, v);
    case N_MACRO: {
        jv m = {.t = JV_MACRO, .m = n};
        return set_var(R, n, f, n->name, m);
    }
    case N_BREAK:
    case N_CONTINUE:
        if (!R->in_loop) return rerr(R, n, ERR_INVALID, "'%s' outside a loop", n->kind == N_BREAK ? "break" : "continue");
        R->brk = n->kind == N_BREAK ? 1 : 2;
        return 0;
    }
    return rerr(R, n, ERR_INVALID, "internal: bad statement node %d", n->kind);
}

int jinja_render(const jinja_tmpl *t, json_t *ctx, char **out, size_t *out_len, err_t *e) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return err_set(e, ERR_INVALID, "no template");
    if (ctx && !json_is_object(ctx)) return err_set(e, ERR_INVALID, "render context must be a JSON object");
    rctx R = {.e = e};
    R.a.limit = JINJA_MAX_MEMORY;
    int rc = 0;
    frame *root;
    if ((rc = new_frame(&R, NULL, NULL, &root))) goto done;
    R.root = root;
    static const struct { const char *name; int fn; } globals[] = {
        {"range", FN_RANGE}, {"namespace", FN_NAMESPACE}, {"dict", FN_DICT},
        {"raise_exception", FN_RAISE}, {"strftime_now", FN_STRFTIME},
    };
    for (size_t i = 0; i < ARRAY_LEN(globals); i++) {
        jv fv = {.t = JV_FUNC, .fn = globals[i].fn};
        if ((rc = set_var(&R, NULL, root, globals[i].name, fv))) goto done;
    }
    if (ctx) {
        const char *k;
        json_t *v;
        json_object_foreach(ctx, k, v) {
            jv x;
            if (!jv_from_json(&R.a, v, &x, 0)) {
                rc = err_set(e, ERR_RANGE, "context value '%s' too large or too deeply nested", k);
                goto done;
            }
            if ((rc = set_var(&R, NULL, root, k, x))) goto done;
        }
    }
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    rc = exec(&R, root, t->root, &b);
    if (rc) {
        free(b.p);
        goto done;
    }
    if (!b.p) b.p = xstrdup("");
    *out = b.p;
    if (out_len) *out_len = b.n;
done:
    jarena_free(&R.a);
    return rc;
}
