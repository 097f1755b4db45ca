/*
 * jinja_eval.c — renders a parsed template: the AST walk, scopes, operators,
 * attribute/item/slice access, macros, and the public jinja_render. The
 * filters, tests, methods and global functions it calls are in
 * jinja_builtins.c.
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

#include "chat/jinja_internal.h"

/* A scope: variables set here, then the enclosing scope's. */
typedef struct jframe {
    jdict *vars;
    struct jframe *parent;
} frame;

int jinja__eval_err(jrender *R, const jnode *n, int code, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n) return err_set(R->e, code, "%d:%d: %s", n->line, n->col, msg);
    return err_set(R->e, code, "%s", msg);
}
int jinja__eval_oom(jrender *R, const jnode *n) {
    return jinja__eval_err(R, n, ERR_RANGE, "template used more than %u bytes of memory", (unsigned)JINJA_MAX_MEMORY);
}
int jinja__eval_step(jrender *R, const jnode *n, long k) {
    R->steps += k;
    if (R->steps > JINJA_MAX_STEPS)
        return jinja__eval_err(R, n, ERR_RANGE, "template ran more than %d loop iterations/calls", JINJA_MAX_STEPS);
    return 0;
}


/* eval/exec recurse over the AST (and through macro calls); the C stack
 * they use is bounded by counting the nesting of these calls. */
static int eval_node(jrender *R, frame *f, const jnode *n, jv *out);
static int exec_node(jrender *R, frame *f, const jnode *n, jbuf *out);

static int eval(jrender *R, frame *f, const jnode *n, jv *out) {
    if (++R->rec > JINJA_MAX_RECURSION) {
        R->rec--;
        return jinja__eval_err(R, n, ERR_RANGE, "template nests expressions/calls more than %d deep", JINJA_MAX_RECURSION);
    }
    int rc = eval_node(R, f, n, out);
    R->rec--;
    return rc;
}

static int exec(jrender *R, frame *f, const jnode *n, jbuf *out) {
    if (++R->rec > JINJA_MAX_RECURSION) {
        R->rec--;
        return jinja__eval_err(R, n, ERR_RANGE, "template nests statements/calls more than %d deep", JINJA_MAX_RECURSION);
    }
    int rc = exec_node(R, f, n, out);
    R->rec--;
    return rc;
}

/* ---- helpers ------------------------------------------------------------------ */

/* str(v) as an arena string. */
int jinja__eval_to_str(jrender *R, const jnode *n, jv v, jv *out) {
    if (v.t == JV_STR) {
        *out = v;
        return 0;
    }
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    jinja__value_str(&b, v);
    if (b.over) {
        free(b.p);
        return jinja__eval_err(R, n, ERR_RANGE, "string longer than %u bytes", (unsigned)JINJA_MAX_OUTPUT);
    }
    bool ok = jinja__str_dup(&R->a, b.p ? b.p : "", b.n, out);
    free(b.p);
    return ok ? 0 : jinja__eval_oom(R, n);
}

int jinja__eval_buf_to_str(jrender *R, const jnode *n, jbuf *b, jv *out) {
    if (b->over) {
        free(b->p);
        return jinja__eval_err(R, n, ERR_RANGE, "string longer than %u bytes", (unsigned)JINJA_MAX_OUTPUT);
    }
    bool ok = jinja__str_dup(&R->a, b->p ? b->p : "", b->n, out);
    free(b->p);
    return ok ? 0 : jinja__eval_oom(R, n);
}

int jinja__eval_make_list(jrender *R, const jnode *n, size_t len, jv *out) {
    jlist *l = jinja__list_new(&R->a, len);
    if (!l) return jinja__eval_oom(R, n);
    out->t = JV_LIST;
    out->l = l;
    return 0;
}

/* Byte offsets of the code points of a UTF-8 string: off[i]..off[i+1]. */
int jinja__eval_cp_offsets(jrender *R, const jnode *n, jv s, size_t **off, size_t *n_cp) {
    size_t c = utf8_count(s.s.p, s.s.n);
    size_t *o = jinja__arena_alloc(&R->a, (c + 1) * sizeof *o);
    if (!o) return jinja__eval_oom(R, n);
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
int jinja__eval_iter(jrender *R, const jnode *n, jv v, jlist **out) {
    static jlist empty = {0, NULL, false};
    if (v.t == JV_LIST) { *out = v.l; return 0; }
    if (v.t == JV_UNDEF) { *out = &empty; return 0; }
    if (v.t == JV_DICT) {
        jlist *l = jinja__list_new(&R->a, v.d->n);
        if (!l) return jinja__eval_oom(R, n);
        for (size_t i = 0; i < v.d->n; i++) l->v[i] = v.d->k[i];
        *out = l;
        return 0;
    }
    if (v.t == JV_STR) {
        size_t *off, c;
        int rc = jinja__eval_cp_offsets(R, n, v, &off, &c);
        if (rc) return rc;
        jlist *l = jinja__list_new(&R->a, c);
        if (!l) return jinja__eval_oom(R, n);
        for (size_t i = 0; i < c; i++) l->v[i] = jv_str(v.s.p + off[i], off[i + 1] - off[i]);
        *out = l;
        return 0;
    }
    return jinja__eval_err(R, n, ERR_INVALID, "cannot iterate over a %s value", jinja__value_type(v));
}

static jv *lookup(frame *f, const char *name) {
    size_t n = strlen(name);
    for (; f; f = f->parent) {
        jv *v = jinja__dict_get_str(f->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

static int set_var(jrender *R, const jnode *n, frame *f, const char *name, jv v) {
    if (!jinja__dict_set(&R->a, f->vars, jv_str(name, strlen(name)), v)) return jinja__eval_oom(R, n);
    return 0;
}

static int new_frame(jrender *R, const jnode *n, frame *parent, frame **out) {
    frame *f = jinja__arena_alloc(&R->a, sizeof *f);
    if (!f || !(f->vars = jinja__dict_new(&R->a, 0))) return jinja__eval_oom(R, n);
    f->parent = parent;
    *out = f;
    return 0;
}

const jv *jinja__eval_arg(const jargs *a, int pos, const char *name) {
    for (int i = 0; i < a->n && a->names; i++)
        if (a->names[i] && name && strcmp(a->names[i], name) == 0) return &a->v[i];
    int k = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->names && a->names[i]) continue;
        if (k++ == pos) return &a->v[i];
    }
    return NULL;
}

int jinja__eval_n_positional(const jargs *a) {
    int k = 0;
    for (int i = 0; i < a->n; i++) k += !a->names || a->names[i] == NULL;
    return k;
}

static int eval_args(jrender *R, frame *f, const jnode *call, jargs *out) {
    out->n = call->n_list;
    out->v = NULL;
    out->names = call->names;
    if (!call->n_list) return 0;
    out->v = jinja__arena_alloc(&R->a, (size_t)call->n_list * sizeof(jv));
    if (!out->v) return jinja__eval_oom(R, call);
    for (int i = 0; i < call->n_list; i++) {
        int rc = eval(R, f, call->list[i], &out->v[i]);
        if (rc) return rc;
    }
    return 0;
}

/* Attribute lookup: dict keys, namespace attributes, loop fields. */
jv jinja__eval_attr(jv obj, const char *name) {
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jv *v = jinja__dict_get_str(obj.d, name, strlen(name));
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
jv jinja__eval_path(jv obj, jv path) {
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
            obj = jinja__eval_attr(obj, tmp);
        if (!dot) break;
        p = dot + 1;
    }
    return obj;
}

static int get_item(jrender *R, const jnode *n, jv obj, jv key, jv *out) {
    *out = jv_undef();
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jv *v = jinja__dict_get(obj.d, key);
        if (v) *out = *v;
        return 0;
    }
    if (obj.t == JV_LOOP && key.t == JV_STR) {
        char tmp[32];
        if (key.s.n < sizeof tmp) {
            memcpy(tmp, key.s.p, key.s.n);
            tmp[key.s.n] = 0;
            *out = jinja__eval_attr(obj, tmp);
        }
        return 0;
    }
    if ((obj.t == JV_LIST || obj.t == JV_STR) && jv_is_int_like(key)) {
        int64_t i = jv_int_of(key);
        if (obj.t == JV_LIST) {
            int64_t len = (int64_t)obj.l->n;
            if (i < 0) i += len;
            if (i >= 0 && i < len) *out = obj.l->v[i];
            return 0;
        }
        size_t *off, c;
        int rc = jinja__eval_cp_offsets(R, n, obj, &off, &c);
        if (rc) return rc;
        if (i < 0) i += (int64_t)c;
        if (i >= 0 && i < (int64_t)c) *out = jv_str(obj.s.p + off[i], off[i + 1] - off[i]);
        return 0;
    }
    return 0; /* like Jinja: a failed subscript is undefined */
}

int jinja__eval_slice(jrender *R, const jnode *n, jv obj, jv *parts, jv *out) {
    int64_t len;
    size_t *off = NULL, c = 0;
    int rc;
    if (obj.t == JV_LIST) {
        len = (int64_t)obj.l->n;
    } else if (obj.t == JV_STR) {
        if ((rc = jinja__eval_cp_offsets(R, n, obj, &off, &c))) return rc;
        len = (int64_t)c;
    } else if (obj.t == JV_UNDEF) {
        *out = jv_undef();
        return 0;
    } else {
        return jinja__eval_err(R, n, ERR_INVALID, "cannot slice a %s value", jinja__value_type(obj));
    }
    for (int k = 0; k < 3; k++)
        if (parts[k].t != JV_UNDEF && parts[k].t != JV_NONE && !jv_is_int_like(parts[k]))
            return jinja__eval_err(R, n, ERR_INVALID, "slice indices must be integers");
    int64_t st = parts[2].t == JV_INT || parts[2].t == JV_BOOL ? jv_int_of(parts[2]) : 1;
    if (st == 0) return jinja__eval_err(R, n, ERR_INVALID, "slice step cannot be zero");
    if (st < -len - 1 || st > len + 1) st = st < 0 ? -len - 1 : len + 1; /* same items, no overflow */
    int64_t a, b;
    bool has_a = jv_is_int_like(parts[0]), has_b = jv_is_int_like(parts[1]);
    if (st > 0) {
        a = has_a ? jv_int_of(parts[0]) : 0;
        b = has_b ? jv_int_of(parts[1]) : len;
        if (a < 0) a = a + len < 0 ? 0 : a + len;
        if (b < 0) b = b + len < 0 ? 0 : b + len;
        if (a > len) a = len;
        if (b > len) b = len;
    } else {
        a = has_a ? jv_int_of(parts[0]) : len - 1;
        b = has_b ? jv_int_of(parts[1]) : -1;
        if (has_a && a < 0) a = a + len < -1 ? -1 : a + len;
        if (has_b && b < 0) b = b + len < -1 ? -1 : b + len;
        if (a > len - 1) a = len - 1;
        if (b > len - 1) b = len - 1;
    }
    size_t count = 0;
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) count++;
    if (obj.t == JV_LIST) {
        if ((rc = jinja__eval_make_list(R, n, count, out))) return rc;
        out->l->tuple = obj.l->tuple;
        size_t k = 0;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) out->l->v[k++] = obj.l->v[i];
        return 0;
    }
    jbuf bb = {.limit = JINJA_MAX_OUTPUT};
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) jinja__buf_put(&bb, obj.s.p + off[i], off[i + 1] - off[i]);
    return jinja__eval_buf_to_str(R, n, &bb, out);
}

/* ---- operators ------------------------------------------------------------------ */

/* Python's "fmt % args": %s %r %d %i %f %e %g %x %o %c %% with flags, width
 * and precision; args a tuple, a single value, or a mapping for %(key)s. */
static int str_percent(jrender *R, const jnode *n, jv fmt, jv args, jv *out) {
    jbuf b = {.limit = JINJA_MAX_OUTPUT};
    bool tuple = args.t == JV_LIST && args.l->tuple;
    size_t next = 0;
    const char *p = fmt.s.p, *end = p + fmt.s.n;
    while (p < end && !b.over) {
        const char *pc = memchr(p, '%', (size_t)(end - p));
        if (!pc) {
            jinja__buf_put(&b, p, (size_t)(end - p));
            break;
        }
        jinja__buf_put(&b, p, (size_t)(pc - p));
        p = pc + 1;
        if (p < end && *p == '%') {
            jinja__buf_putc(&b, '%');
            p++;
            continue;
        }
        jv v;
        if (p < end && *p == '(') { /* %(key)s */
            const char *close = memchr(p, ')', (size_t)(end - p));
            if (!close || (args.t != JV_DICT && args.t != JV_NS)) goto bad;
            jv *x = jinja__dict_get_str(args.d, p + 1, (size_t)(close - p - 1));
            if (!x) goto bad;
            v = *x;
            p = close + 1;
        } else if (tuple) {
            if (next >= args.l->n) goto bad;
            v = args.l->v[next++];
        } else {
            if (next++ > 0) goto bad;
            v = args;
        }
        char spec[32];
        size_t k = 0;
        spec[k++] = '%';
        while (p < end && strchr("-+ #0", *p) && k < 8) spec[k++] = *p++;
        while (p < end && *p >= '0' && *p <= '9' && k < 16) spec[k++] = *p++;
        if (p < end && *p == '.') {
            spec[k++] = *p++;
            while (p < end && *p >= '0' && *p <= '9' && k < 24) spec[k++] = *p++;
        }
        if (p >= end) goto bad;
        char conv = *p++;
        char tmp[512];
        if (conv == 's' || conv == 'r') {
            jbuf sb = {.limit = JINJA_MAX_OUTPUT};
            if (conv == 's') jinja__value_str(&sb, v);
            else jinja__value_repr(&sb, v);
            spec[k++] = '*';
            spec[k] = 0;
            /* width/precision apply to the whole string: pad by hand */
            int width = 0, prec = -1;
            const char *q = spec + 1;
            bool left = false;
            while (*q && strchr("-+ #0", *q)) left |= *q++ == '-';
            width = atoi(q);
            const char *dot = strchr(spec, '.');
            if (dot) prec = atoi(dot + 1);
            size_t len = sb.n;
            if (prec >= 0 && (size_t)prec < len) len = (size_t)prec;
            size_t chars = utf8_count(sb.p ? sb.p : "", len);
            if (!left)
                for (size_t i = chars; (int)i < width; i++) jinja__buf_putc(&b, ' ');
            jinja__buf_put(&b, sb.p ? sb.p : "", len);
            if (left)
                for (size_t i = chars; (int)i < width; i++) jinja__buf_putc(&b, ' ');
            free(sb.p);
            continue;
        }
        if (!jv_is_num(v)) goto bad;
        if (strchr("dioxXc", conv)) {
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = conv == 'i' ? 'd' : conv;
            spec[k] = 0;
            long long iv = v.t == JV_FLOAT ? (long long)v.f : (long long)jv_int_of(v);
            snprintf(tmp, sizeof tmp, spec, iv);
        } else if (strchr("eEfFgG", conv)) {
            spec[k++] = conv;
            spec[k] = 0;
            snprintf(tmp, sizeof tmp, spec, jv_num_of(v));
        } else {
            goto bad;
        }
        jinja__buf_put(&b, tmp, strlen(tmp));
    }
    if (tuple ? next != args.l->n : (next == 0 && args.t != JV_DICT && args.t != JV_NS && args.t != JV_LIST)) {
        free(b.p);
        return jinja__eval_err(R, n, ERR_INVALID, "not all arguments converted during string formatting");
    }
    return jinja__eval_buf_to_str(R, n, &b, out);
bad:
    free(b.p);
    return jinja__eval_err(R, n, ERR_INVALID, "bad '%%' string formatting");
}

int jinja__eval_binop(jrender *R, const jnode *n, int op, jv a, jv b, jv *out) {
    static const char *const opname[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    int rc;
    if (op == OP_CONCAT) {
        jv sa, sb;
        if ((rc = jinja__eval_to_str(R, n, a, &sa)) || (rc = jinja__eval_to_str(R, n, b, &sb))) return rc;
        size_t len;
        if (!add_ok(sa.s.n, sb.s.n, &len)) return jinja__eval_oom(R, n);
        char *p = jinja__arena_alloc(&R->a, len + 1);
        if (!p) return jinja__eval_oom(R, n);
        memcpy(p, sa.s.p, sa.s.n);
        memcpy(p + sa.s.n, sb.s.p, sb.s.n);
        *out = jv_str(p, len);
        return 0;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        return jinja__eval_err(R, n, ERR_INVALID, "undefined value used with '%s'", opname[op]);
    if (jv_is_num(a) && jv_is_num(b)) {
        bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
        int64_t x = jv_int_of(a), y = jv_int_of(b), r;
        double fx = jv_num_of(a), fy = jv_num_of(b);
        switch (op) {
        case OP_ADD:
            if (ints) {
                if (__builtin_add_overflow(x, y, &r)) return jinja__eval_err(R, n, ERR_RANGE, "integer overflow");
                *out = jv_int(r);
            } else *out = jv_float(fx + fy);
            return 0;
        case OP_SUB:
            if (ints) {
                if (__builtin_sub_overflow(x, y, &r)) return jinja__eval_err(R, n, ERR_RANGE, "integer overflow");
                *out = jv_int(r);
            } else *out = jv_float(fx - fy);
            return 0;
        case OP_MUL:
            if (ints) {
                if (__builtin_mul_overflow(x, y, &r)) return jinja__eval_err(R, n, ERR_RANGE, "integer overflow");
                *out = jv_int(r);
            } else *out = jv_float(fx * fy);
            return 0;
        case OP_DIV:
            if (fy == 0) return jinja__eval_err(R, n, ERR_INVALID, "division by zero");
            *out = jv_float(fx / fy);
            return 0;
        case OP_FLOORDIV:
        case OP_MOD:
            if (fy == 0) return jinja__eval_err(R, n, ERR_INVALID, "division by zero");
            if (ints) {
                if (x == INT64_MIN && y == -1) return jinja__eval_err(R, n, ERR_RANGE, "integer overflow");
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
                    if ((e2 & 1) && __builtin_mul_overflow(acc, base, &acc)) return jinja__eval_err(R, n, ERR_RANGE, "integer overflow");
                    e2 >>= 1;
                    if (e2 && __builtin_mul_overflow(base, base, &base)) return jinja__eval_err(R, n, ERR_RANGE, "integer overflow");
                }
                *out = jv_int(acc);
            } else {
                *out = jv_float(pow(fx, fy));
            }
            return 0;
        }
    }
    if (op == OP_MOD && a.t == JV_STR) return str_percent(R, n, a, b, out);
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        size_t len;
        if (!add_ok(a.s.n, b.s.n, &len)) return jinja__eval_oom(R, n);
        char *p = jinja__arena_alloc(&R->a, len + 1);
        if (!p) return jinja__eval_oom(R, n);
        memcpy(p, a.s.p, a.s.n);
        memcpy(p + a.s.n, b.s.p, b.s.n);
        *out = jv_str(p, len);
        return 0;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        if ((rc = jinja__eval_make_list(R, n, a.l->n + b.l->n, out))) return rc;
        out->l->tuple = a.l->tuple && b.l->tuple;
        if (a.l->n) memcpy(out->l->v, a.l->v, a.l->n * sizeof(jv));
        if (b.l->n) memcpy(out->l->v + a.l->n, b.l->v, b.l->n * sizeof(jv));
        return 0;
    }
    if (op == OP_MUL && ((a.t == JV_STR || a.t == JV_LIST) && jv_is_int_like(b))) {
        jv t = a;
        a = b;
        b = t;
    }
    if (op == OP_MUL && jv_is_int_like(a) && (b.t == JV_STR || b.t == JV_LIST)) {
        int64_t k = jv_int_of(a);
        if (k < 0) k = 0;
        size_t unit = b.t == JV_STR ? b.s.n : b.l->n * sizeof(jv), total;
        if (!mul_ok(unit, (size_t)k, &total) || total > JINJA_MAX_MEMORY) return jinja__eval_oom(R, n);
        if (b.t == JV_STR) {
            char *p = jinja__arena_alloc(&R->a, total + 1);
            if (!p) return jinja__eval_oom(R, n);
            for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * b.s.n, b.s.p, b.s.n);
            *out = jv_str(p, total);
        } else {
            if ((rc = jinja__eval_make_list(R, n, b.l->n * (size_t)k, out))) return rc;
            for (int64_t i = 0; i < k; i++)
                if (b.l->n) memcpy(out->l->v + (size_t)i * b.l->n, b.l->v, b.l->n * sizeof(jv));
        }
        return 0;
    }
    return jinja__eval_err(R, n, ERR_INVALID, "unsupported operand types for %s: %s and %s", opname[op], jinja__value_type(a),
                jinja__value_type(b));
}

int jinja__eval_compare(jrender *R, const jnode *n, int op, jv a, jv b, bool *res) {
    if (op == OP_EQ) { *res = jinja__value_eq(a, b); return 0; }
    if (op == OP_NE) { *res = !jinja__value_eq(a, b); return 0; }
    if (op == OP_IN || op == OP_NOTIN) {
        bool found = false;
        if (b.t == JV_STR) {
            if (a.t != JV_STR)
                return jinja__eval_err(R, n, ERR_INVALID, "'in <string>' requires a string on the left, not %s", jinja__value_type(a));
            found = a.s.n == 0 || (a.s.n <= b.s.n && memmem(b.s.p, b.s.n, a.s.p, a.s.n) != NULL);
        } else if (b.t == JV_LIST) {
            for (size_t i = 0; i < b.l->n && !found; i++) found = jinja__value_eq(a, b.l->v[i]);
        } else if (b.t == JV_DICT || b.t == JV_NS) {
            found = jinja__dict_get(b.d, a) != NULL;
        } else if (b.t != JV_UNDEF) {
            return jinja__eval_err(R, n, ERR_INVALID, "argument of type %s is not iterable", jinja__value_type(b));
        }
        *res = op == OP_IN ? found : !found;
        return 0;
    }
    int c;
    if (a.t == JV_LIST && b.t == JV_LIST) { /* lexicographic, as Python */
        size_t i = 0;
        while (i < a.l->n && i < b.l->n && jinja__value_eq(a.l->v[i], b.l->v[i])) i++;
        if (i < a.l->n && i < b.l->n) {
            if (R->rec > JINJA_MAX_RECURSION) return jinja__eval_err(R, n, ERR_RANGE, "lists nested too deeply to compare");
            R->rec++;
            int rc = jinja__eval_compare(R, n, op, a.l->v[i], b.l->v[i], res);
            R->rec--;
            return rc;
        }
        c = a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    } else if (jv_is_num(a) && jv_is_num(b)) {
        double x = jv_num_of(a), y = jv_num_of(b);
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) c = jv_int_of(a) < jv_int_of(b) ? -1 : jv_int_of(a) > jv_int_of(b);
        else c = x < y ? -1 : x > y;
    } else if (a.t == JV_STR && b.t == JV_STR) {
        int m = memcmp(a.s.p, b.s.p, MIN(a.s.n, b.s.n));
        c = m ? m : a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
    } else {
        return jinja__eval_err(R, n, ERR_INVALID, "cannot compare %s with %s", jinja__value_type(a), jinja__value_type(b));
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
int jinja__eval_order(jv a, jv b, bool case_sensitive) {
    if (jv_is_num(a) && jv_is_num(b)) {
        double x = jv_num_of(a), y = jv_num_of(b);
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

/* ---- macros ------------------------------------------------------------------ */

static int call_macro(jrender *R, const jnode *n, const jnode *m, const jargs *a, jv *out) {
    int rc;
    if (R->depth >= JINJA_MAX_DEPTH) return jinja__eval_err(R, n, ERR_RANGE, "macro calls nested deeper than %d", JINJA_MAX_DEPTH);
    if ((rc = jinja__eval_step(R, n, 1))) return rc;
    frame *f;
    if ((rc = new_frame(R, n, R->root, &f))) return rc;
    int pos = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->names[i]) {
            bool known = false;
            for (int p = 0; p < m->n_names; p++) known |= !strcmp(m->names[p], a->names[i]);
            if (!known) return jinja__eval_err(R, n, ERR_INVALID, "macro '%s' has no parameter '%s'", m->name, a->names[i]);
        } else if (pos++ >= m->n_names) {
            return jinja__eval_err(R, n, ERR_INVALID, "macro '%s' takes %d arguments", m->name, m->n_names);
        }
    }
    for (int p = 0; p < m->n_names; p++) {
        const jv *v = jinja__eval_arg(a, p, m->names[p]);
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
    return jinja__eval_buf_to_str(R, n, &b, out);
}

/* ---- expressions ------------------------------------------------------------------ */

static int eval_node(jrender *R, frame *f, const jnode *n, jv *out) {
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
        *out = jinja__eval_attr(a, n->attr);
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
        return jinja__eval_slice(R, n, a, parts, out);
    }
    case E_CALL: {
        jargs ar;
        if (n->a->kind == E_ATTR) {
            if ((rc = eval(R, f, n->a->a, &a))) return rc;
            jv field = jinja__eval_attr(a, n->a->attr);
            if ((rc = eval_args(R, f, n, &ar))) return rc;
            if (field.t == JV_MACRO && a.t == JV_NS) return call_macro(R, n, field.m, &ar, out);
            if (a.t == JV_UNDEF)
                return jinja__eval_err(R, n, ERR_INVALID, "cannot call method '%s' of an undefined value", n->a->attr);
            return jinja__builtins_method(R, n, a, n->a->attr, &ar, out);
        }
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if ((rc = eval_args(R, f, n, &ar))) return rc;
        if (a.t == JV_MACRO) return call_macro(R, n, a.m, &ar, out);
        if (a.t == JV_FUNC) return jinja__builtins_call(R, n, a.fn, &ar, out);
        if (n->a->kind == E_NAME) return jinja__eval_err(R, n, ERR_INVALID, "'%s' is not callable (%s)", n->a->name, jinja__value_type(a));
        return jinja__eval_err(R, n, ERR_INVALID, "a %s value is not callable", jinja__value_type(a));
    }
    case E_FILTER: {
        jargs ar;
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval_args(R, f, n, &ar))) return rc;
        return jinja__builtins_filter(R, n, n->name, a, &ar, out);
    }
    case E_TEST: {
        jargs ar;
        bool res;
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval_args(R, f, n, &ar))) return rc;
        if ((rc = jinja__builtins_test(R, n, n->name, a, &ar, &res))) return rc;
        *out = jv_bool(n->op ? !res : res);
        return 0;
    }
    case E_BIN:
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval(R, f, n->b, &b))) return rc;
        return jinja__eval_binop(R, n, n->op, a, b, out);
    case E_CMP: {
        bool res;
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval(R, f, n->b, &b))) return rc;
        if ((rc = jinja__eval_compare(R, n, n->op, a, b, &res))) return rc;
        *out = jv_bool(res);
        return 0;
    }
    case E_AND:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if (!jinja__value_truthy(a)) { *out = a; return 0; }
        return eval(R, f, n->b, out);
    case E_OR:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if (jinja__value_truthy(a)) { *out = a; return 0; }
        return eval(R, f, n->b, out);
    case E_NOT:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        *out = jv_bool(!jinja__value_truthy(a));
        return 0;
    case E_NEG:
    case E_POS:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if (!jv_is_num(a)) return jinja__eval_err(R, n, ERR_INVALID, "bad operand type for unary %c: %s", n->kind == E_NEG ? '-' : '+', jinja__value_type(a));
        if (n->kind == E_POS) *out = a.t == JV_BOOL ? jv_int(a.b) : a;
        else if (a.t == JV_FLOAT) *out = jv_float(-a.f);
        else if (jv_int_of(a) == INT64_MIN) return jinja__eval_err(R, n, ERR_RANGE, "integer overflow");
        else *out = jv_int(-jv_int_of(a));
        return 0;
    case E_COND:
        if ((rc = eval(R, f, n->a, &a))) return rc;
        if (jinja__value_truthy(a)) return eval(R, f, n->b, out);
        if (n->c) return eval(R, f, n->c, out);
        *out = jv_undef();
        return 0;
    case E_LIST:
        if ((rc = jinja__eval_make_list(R, n, (size_t)n->n_list, out))) return rc;
        out->l->tuple = n->op == 1;
        for (int i = 0; i < n->n_list; i++)
            if ((rc = eval(R, f, n->list[i], &out->l->v[i]))) return rc;
        return 0;
    case E_DICT: {
        jdict *d = jinja__dict_new(&R->a, (size_t)n->n_list / 2);
        if (!d) return jinja__eval_oom(R, n);
        for (int i = 0; i + 1 < n->n_list; i += 2) {
            if ((rc = eval(R, f, n->list[i], &a)) || (rc = eval(R, f, n->list[i + 1], &b))) return rc;
            if (a.t != JV_STR && a.t != JV_INT && a.t != JV_FLOAT && a.t != JV_BOOL && a.t != JV_NONE)
                return jinja__eval_err(R, n->list[i], ERR_INVALID, "unhashable dict key of type %s", jinja__value_type(a));
            if (!jinja__dict_set(&R->a, d, a, b)) return jinja__eval_oom(R, n);
        }
        out->t = JV_DICT;
        out->d = d;
        return 0;
    }
    }
    return jinja__eval_err(R, n, ERR_INVALID, "internal: bad expression node %d", n->kind);
}

/* ---- statements ------------------------------------------------------------------ */

static int output_over(jrender *R, const jnode *n) {
    return jinja__eval_err(R, n, ERR_RANGE, "output longer than %u bytes", (unsigned)JINJA_MAX_OUTPUT);
}

static int bind_targets(jrender *R, const jnode *n, frame *f, jv item) {
    if (n->n_names == 1) return set_var(R, n, f, n->names[0], item);
    jlist *parts;
    int rc;
    if (item.t == JV_LIST) parts = item.l;
    else if ((rc = jinja__eval_iter(R, n, item, &parts))) return rc;
    if ((int)parts->n != n->n_names)
        return jinja__eval_err(R, n, ERR_INVALID, "cannot unpack %zu values into %d loop variables", parts->n, n->n_names);
    for (int i = 0; i < n->n_names; i++)
        if ((rc = set_var(R, n, f, n->names[i], parts->v[i]))) return rc;
    return 0;
}

static int exec_for(jrender *R, frame *f, const jnode *n, jbuf *out) {
    jv it;
    jlist *items;
    int rc;
    if ((rc = eval(R, f, n->a, &it))) return rc;
    if (it.t == JV_NONE) return jinja__eval_err(R, n, ERR_INVALID, "cannot iterate over none");
    if ((rc = jinja__eval_iter(R, n, it, &items))) return rc;
    if (n->d) { /* loop filter: `for x in xs if cond` */
        jlist *kept = jinja__list_new(&R->a, items->n);
        if (!kept) return jinja__eval_oom(R, n);
        size_t k = 0;
        for (size_t i = 0; i < items->n; i++) {
            frame *lf;
            jv c;
            if ((rc = jinja__eval_step(R, n, 1)) || (rc = new_frame(R, n, f, &lf)) || (rc = bind_targets(R, n, lf, items->v[i])) ||
                (rc = eval(R, lf, n->d, &c)))
                return rc;
            if (jinja__value_truthy(c)) kept->v[k++] = items->v[i];
        }
        kept->n = k;
        items = kept;
    }
    jloop *L = jinja__arena_alloc(&R->a, sizeof *L);
    if (!L) return jinja__eval_oom(R, n);
    L->length = items->n;
    L->items = items;
    R->in_loop++;
    for (size_t i = 0; i < items->n; i++) {
        frame *lf;
        if ((rc = jinja__eval_step(R, n, 1)) || (rc = new_frame(R, n, f, &lf)) || (rc = bind_targets(R, n, lf, items->v[i]))) break;
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

static int exec_node(jrender *R, frame *f, const jnode *n, jbuf *out) {
    int rc;
    jv v;
    switch (n->kind) {
    case N_BODY:
        for (int i = 0; i < n->n_list && !R->brk; i++)
            if ((rc = exec(R, f, n->list[i], out))) return rc;
        return 0;
    case N_TEXT:
        jinja__buf_put(out, n->val.s.p, n->val.s.n);
        return out->over ? output_over(R, n) : 0;
    case N_OUTPUT:
        if ((rc = eval(R, f, n->a, &v))) return rc;
        jinja__value_str(out, v);
        return out->over ? output_over(R, n) : 0;
    case N_IF:
        if ((rc = eval(R, f, n->a, &v))) return rc;
        if (jinja__value_truthy(v)) return exec(R, f, n->b, out);
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
            if ((rc = jinja__eval_buf_to_str(R, n, &b, &v))) return rc;
        }
        if (n->attr) {
            jv *ns = lookup(f, n->name);
            if (!ns || ns->t != JV_NS)
                return jinja__eval_err(R, n, ERR_INVALID, "cannot set attribute '%s' of '%s': not a namespace", n->attr, n->name);
            if (!jinja__dict_set(&R->a, ns->d, jv_str(n->attr, strlen(n->attr)), v)) return jinja__eval_oom(R, n);
            return 0;
        }
        return set_var(R, n, f, n->name, v);
    case N_MACRO: {
        jv m = {.t = JV_MACRO, .m = n};
        return set_var(R, n, f, n->name, m);
    }
    case N_BREAK:
    case N_CONTINUE:
        if (!R->in_loop) return jinja__eval_err(R, n, ERR_INVALID, "'%s' outside a loop", n->kind == N_BREAK ? "break" : "continue");
        R->brk = n->kind == N_BREAK ? 1 : 2;
        return 0;
    }
    return jinja__eval_err(R, n, ERR_INVALID, "internal: bad statement node %d", n->kind);
}

int jinja_render(const jinja_tmpl *t, json_t *ctx, char **out, size_t *out_len, err_t *e) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return err_set(e, ERR_INVALID, "no template");
    if (ctx && !json_is_object(ctx)) return err_set(e, ERR_INVALID, "render context must be a JSON object");
    unsigned long nomem0 = jinja__n_nomem;
    jrender R = {.e = e};
    R.a.limit = JINJA_MAX_MEMORY;
    int rc = 0;
    struct jframe *root;
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
            if (!jinja__value_from_json(&R.a, v, &x, 0)) {
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
    jinja__arena_free(&R.a);
    if (jinja__n_nomem != nomem0) { /* malloc refused: not the template's fault, and the output may lack a part */
        free(*out);
        *out = NULL;
        if (out_len) *out_len = 0;
        rc = err_set(e, ERR_NOMEM, "out of memory rendering the template");
    }
    return rc;
}
