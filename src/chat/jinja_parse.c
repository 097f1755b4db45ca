/*
 * jinja_parse.c — tokens (jinja_lex.c) → AST (jnode), and the public
 * jinja_parse / jinja_free.
 *
 * Place in the flow: tok/, load time. The grammar and operator precedence
 * follow Jinja2's parser, loosest first:
 *
 *   expr    := or ['if' or ['else' expr]]
 *   or      := and ('or' and)*          and := not ('and' not)*
 *   not     := 'not' not | compare      compare := add (cmpop add)*
 *   add     := concat (('+'|'-') concat)*
 *   concat  := mul ('~' mul)*           mul := pow (('*'|'/'|'//'|'%') pow)*
 *   pow     := unary ('**' unary)*
 *   unary   := ('-'|'+') unary | primary postfix* filter*
 *   postfix := '.' name | '[' subscript ']' | '(' args ')'
 *   filter  := '|' name ['(' args ')'] | 'is' ['not'] name [arg] | '(' args ')'
 *
 * so "messages|length - 1" is "(messages|length) - 1" and
 * "not x is defined" is "not (x is defined)", as in Jinja.
 *
 * Everything outside the supported subset is refused here, at load time,
 * with ERR_UNSUPPORTED naming the construct and its line:column: unknown
 * statements (include, call, filter blocks, raw...), recursive loops,
 * unknown filters, tests, methods and functions. Nesting is capped at
 * JINJA_MAX_NESTING so hostile input cannot overflow the C stack.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

typedef struct parser {
    jtok *t;
    size_t n, pos;
    jarena *a;
    err_t *e;
    int depth;
    /* calls of plain names, checked against macros once the whole template is read */
    jnode **calls;
    size_t n_calls, cap_calls;
    const char **macros;
    size_t n_macros, cap_macros;
} parser;

static const char *const FILTERS[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
    "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
    "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount",
};
static const char *const TESTS[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false",
    "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower",
    "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string", "true",
    "undefined", "upper", "==", "!=", "<", ">", "<=", ">=",
};
static const char *const METHODS[] = {
    /* str */ "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "upper", "lower", "title", "capitalize", "replace", "find", "rfind", "index", "count", "join",
    "format", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower",
    /* dict */ "items", "keys", "values", "get",
    /* loop */ "cycle",
};
static const char *const FUNCS[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};

static bool in_set(const char *s, const char *const *set, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, set[i]) == 0) return true;
    return false;
}

static jtok *cur(parser *P) { return &P->t[P->pos]; }
static jtok *peek(parser *P, size_t k) { return &P->t[P->pos + k < P->n ? P->pos + k : P->n - 1]; }
static void next(parser *P) {
    if (P->pos + 1 < P->n) P->pos++;
}

static bool is_op(jtok *t, const char *op) {
    return t->kind == TK_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}
static bool is_name(jtok *t, const char *name) {
    return t->kind == TK_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}

static const char *tok_desc(jtok *t, char *buf, size_t n) {
    switch (t->kind) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STRING: return "string literal";
    case TK_INT: case TK_FLOAT: return "number";
    default: snprintf(buf, n, "'%.*s'", (int)MIN(t->n, 40), t->s); return buf;
    }
}

static int fail(parser *P, jtok *t, const char *what) {
    char buf[64];
    return err_set(P->e, ERR_FORMAT, "%d:%d: expected %s, got %s", t->line, t->col, what, tok_desc(t, buf, sizeof buf));
}
static int unsupported(parser *P, jtok *t, const char *kind, const char *name) {
    return err_set(P->e, ERR_UNSUPPORTED, "%d:%d: unsupported %s '%s'", t->line, t->col, kind, name);
}
static int nomem(parser *P) { return err_set(P->e, ERR_NOMEM, "template too large"); }

static jnode *node(parser *P, int kind, jtok *at) {
    jnode *n = jinja__arena_alloc(P->a, sizeof *n);
    if (!n) return NULL;
    n->kind = kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static char *tok_str(parser *P, jtok *t) {
    char *s = jinja__arena_alloc(P->a, t->n + 1);
    if (s) memcpy(s, t->s, t->n);
    return s;
}

/* A growable list of nodes (+ optional names) built in the arena. */
typedef struct nlist {
    jnode **v;
    const char **names;
    int n, cap;
} nlist;

static bool nlist_push(parser *P, nlist *l, jnode *x, const char *name) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        jnode **v = jinja__arena_alloc(P->a, (size_t)cap * sizeof *v);
        const char **nm = jinja__arena_alloc(P->a, (size_t)cap * sizeof *nm);
        if (!v || !nm) return false;
        if (l->n) {
            memcpy(v, l->v, (size_t)l->n * sizeof *v);
            memcpy(nm, l->names, (size_t)l->n * sizeof *nm);
        }
        l->v = v;
        l->names = nm;
        l->cap = cap;
    }
    l->v[l->n] = x;
    l->names[l->n] = name;
    l->n++;
    return true;
}

static int expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char what[16];
        snprintf(what, sizeof what, "'%s'", op);
        return fail(P, cur(P), what);
    }
    next(P);
    return 0;
}

static int parse_expr(parser *P, jnode **out);
static int parse_unary(parser *P, jnode **out, bool with_filter);
static int parse_or(parser *P, jnode **out);

static int enter(parser *P) {
    if (++P->depth > JINJA_MAX_NESTING)
        return err_set(P->e, ERR_UNSUPPORTED, "%d:%d: template nested too deeply (more than %d levels)",
                       cur(P)->line, cur(P)->col, JINJA_MAX_NESTING);
    return 0;
}

/* '(' already consumed: positional and keyword arguments up to ')'. */
static int parse_args(parser *P, nlist *args) {
    while (!is_op(cur(P), ")")) {
        const char *kw = NULL;
        if (cur(P)->kind == TK_NAME && is_op(peek(P, 1), "=")) {
            kw = tok_str(P, cur(P));
            if (!kw) return nomem(P);
            next(P);
            next(P);
        }
        jnode *x;
        int rc = parse_expr(P, &x);
        if (rc) return rc;
        if (!nlist_push(P, args, x, kw)) return nomem(P);
        if (is_op(cur(P), ",")) {
            next(P);
            continue;
        }
        if (!is_op(cur(P), ")")) return fail(P, cur(P), "',' or ')' in argument list");
    }
    next(P);
    return 0;
}

static int note_call(parser *P, jnode *call) {
    if (P->n_calls == P->cap_calls) {
        size_t cap = P->cap_calls ? P->cap_calls * 2 : 16;
        jnode **v = jinja__arena_alloc(P->a, cap * sizeof *v);
        if (!v) return nomem(P);
        if (P->n_calls) memcpy(v, P->calls, P->n_calls * sizeof *v);
        P->calls = v;
        P->cap_calls = cap;
    }
    P->calls[P->n_calls++] = call;
    return 0;
}

static int finish_call(parser *P, jnode *callee, jtok *at, jnode **out) {
    jnode *n = node(P, E_CALL, at);
    if (!n) return nomem(P);
    nlist args = {0};
    int rc = parse_args(P, &args);
    if (rc) return rc;
    n->a = callee;
    n->list = args.v;
    n->names = args.names;
    n->n_list = args.n;
    if (callee->kind == E_ATTR && !in_set(callee->attr, METHODS, ARRAY_LEN(METHODS)))
        return unsupported(P, at, "method", callee->attr);
    if (callee->kind == E_NAME && (rc = note_call(P, n))) return rc;
    *out = n;
    return 0;
}

static int parse_primary(parser *P, jnode **out) {
    jtok *t = cur(P);
    jnode *n;
    int rc;
    if (t->kind == TK_NAME) {
        n = node(P, E_CONST, t);
        if (!n) return nomem(P);
        if (is_name(t, "true") || is_name(t, "True")) n->val = jv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) n->val = jv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) n->val = jv_none();
        else {
            n->kind = E_NAME;
            if (!(n->name = tok_str(P, t))) return nomem(P);
        }
        next(P);
    } else if (t->kind == TK_STRING) {
        /* adjacent string literals are concatenated */
        size_t total = 0, k = 0;
        while (peek(P, k)->kind == TK_STRING) total += peek(P, k++)->n;
        char *s = jinja__arena_alloc(P->a, total + 1);
        if (!s) return nomem(P);
        size_t o = 0;
        while (cur(P)->kind == TK_STRING) {
            memcpy(s + o, cur(P)->s, cur(P)->n);
            o += cur(P)->n;
            next(P);
        }
        n = node(P, E_CONST, t);
        if (!n) return nomem(P);
        n->val = jv_str(s, total);
    } else if (t->kind == TK_INT || t->kind == TK_FLOAT) {
        n = node(P, E_CONST, t);
        if (!n) return nomem(P);
        n->val = t->kind == TK_INT ? jv_int(t->i) : jv_float(t->f);
        next(P);
    } else if (is_op(t, "(")) {
        next(P);
        if (is_op(cur(P), ")")) { /* empty tuple */
            next(P);
            n = node(P, E_LIST, t);
            if (!n) return nomem(P);
            n->op = 1; /* tuple */
        } else {
            if ((rc = parse_expr(P, &n))) return rc;
            if (is_op(cur(P), ",")) { /* tuple */
                nlist items = {0};
                if (!nlist_push(P, &items, n, NULL)) return nomem(P);
                while (is_op(cur(P), ",")) {
                    next(P);
                    if (is_op(cur(P), ")")) break;
                    jnode *x;
                    if ((rc = parse_expr(P, &x))) return rc;
                    if (!nlist_push(P, &items, x, NULL)) return nomem(P);
                }
                n = node(P, E_LIST, t);
                if (!n) return nomem(P);
                n->list = items.v;
                n->n_list = items.n;
                n->op = 1; /* tuple */
            }
            if ((rc = expect_op(P, ")"))) return rc;
        }
    } else if (is_op(t, "[")) {
        next(P);
        nlist items = {0};
        while (!is_op(cur(P), "]")) {
            jnode *x;
            if ((rc = parse_expr(P, &x))) return rc;
            if (!nlist_push(P, &items, x, NULL)) return nomem(P);
            if (is_op(cur(P), ",")) { next(P); continue; }
            if (!is_op(cur(P), "]")) return fail(P, cur(P), "',' or ']' in list");
        }
        next(P);
        n = node(P, E_LIST, t);
        if (!n) return nomem(P);
        n->list = items.v;
        n->n_list = items.n;
    } else if (is_op(t, "{")) {
        next(P);
        nlist items = {0};
        while (!is_op(cur(P), "}")) {
            jnode *k, *v;
            if ((rc = parse_expr(P, &k))) return rc;
            if ((rc = expect_op(P, ":"))) return rc;
            if ((rc = parse_expr(P, &v))) return rc;
            if (!nlist_push(P, &items, k, NULL) || !nlist_push(P, &items, v, NULL)) return nomem(P);
            if (is_op(cur(P), ",")) { next(P); continue; }
            if (!is_op(cur(P), "}")) return fail(P, cur(P), "',' or '}' in dict");
        }
        next(P);
        n = node(P, E_DICT, t);
        if (!n) return nomem(P);
        n->list = items.v;
        n->n_list = items.n;
    } else {
        return fail(P, t, "an expression");
    }
    *out = n;
    return 0;
}

static int parse_postfix(parser *P, jnode **io) {
    int rc;
    for (;;) {
        jtok *t = cur(P);
        if (is_op(t, ".")) {
            next(P);
            jtok *nm = cur(P);
            jnode *n = node(P, E_ATTR, t);
            if (!n) return nomem(P);
            n->a = *io;
            if (nm->kind == TK_NAME) {
                if (!(n->attr = tok_str(P, nm))) return nomem(P);
            } else if (nm->kind == TK_INT) { /* foo.0 is foo[0] */
                n->kind = E_ITEM;
                jnode *k = node(P, E_CONST, nm);
                if (!k) return nomem(P);
                k->val = jv_int(nm->i);
                n->b = k;
            } else {
                return fail(P, nm, "an attribute name after '.'");
            }
            next(P);
            *io = n;
        } else if (is_op(t, "[")) {
            next(P);
            jnode *parts[3] = {0};
            int n_colon = 0;
            for (;;) {
                if (is_op(cur(P), ":")) {
                    if (++n_colon > 2) return fail(P, cur(P), "']'");
                    next(P);
                    continue;
                }
                if (is_op(cur(P), "]")) break;
                if (parts[n_colon]) return fail(P, cur(P), "':' or ']'");
                if ((rc = parse_expr(P, &parts[n_colon]))) return rc;
            }
            next(P);
            jnode *n = node(P, n_colon ? E_SLICE : E_ITEM, t);
            if (!n) return nomem(P);
            n->a = *io;
            if (!n_colon && !parts[0]) return fail(P, t, "a subscript inside '[]'");
            n->b = parts[0];
            n->c = parts[1];
            n->d = parts[2];
            *io = n;
        } else if (is_op(t, "(")) {
            next(P);
            if ((rc = finish_call(P, *io, t, io))) return rc;
        } else {
            return 0;
        }
    }
}

static int parse_filters(parser *P, jnode **io) {
    int rc;
    for (;;) {
        jtok *t = cur(P);
        if (is_op(t, "|")) {
            next(P);
            jtok *nm = cur(P);
            if (nm->kind != TK_NAME) return fail(P, nm, "a filter name after '|'");
            /* dotted filter names do not exist in our set; read one name */
            jnode *n = node(P, E_FILTER, nm);
            if (!n || !(n->name = tok_str(P, nm))) return nomem(P);
            if (!in_set(n->name, FILTERS, ARRAY_LEN(FILTERS))) return unsupported(P, nm, "filter", n->name);
            next(P);
            n->a = *io;
            if (is_op(cur(P), "(")) {
                next(P);
                nlist args = {0};
                if ((rc = parse_args(P, &args))) return rc;
                n->list = args.v;
                n->names = args.names;
                n->n_list = args.n;
            }
            *io = n;
        } else if (is_name(t, "is")) {
            next(P);
            jnode *n = node(P, E_TEST, t);
            if (!n) return nomem(P);
            if (is_name(cur(P), "not")) {
                n->op = 1;
                next(P);
            }
            jtok *nm = cur(P);
            if (nm->kind != TK_NAME && !(nm->kind == TK_OP && (is_op(nm, "==") || is_op(nm, "!=") || is_op(nm, "<") || is_op(nm, ">") || is_op(nm, "<=") || is_op(nm, ">="))))
                return fail(P, nm, "a test name after 'is'");
            if (!(n->name = tok_str(P, nm))) return nomem(P);
            if (!in_set(n->name, TESTS, ARRAY_LEN(TESTS))) return unsupported(P, nm, "test", n->name);
            next(P);
            n->a = *io;
            jtok *c = cur(P);
            if (is_op(c, "(")) {
                next(P);
                nlist args = {0};
                if ((rc = parse_args(P, &args))) return rc;
                n->list = args.v;
                n->names = args.names;
                n->n_list = args.n;
            } else if ((c->kind == TK_NAME || c->kind == TK_STRING || c->kind == TK_INT || c->kind == TK_FLOAT ||
                        is_op(c, "[") || is_op(c, "{")) &&
                       !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is")) return err_set(P->e, ERR_FORMAT, "%d:%d: cannot chain tests with 'is'", c->line, c->col);
                jnode *arg;
                if ((rc = parse_primary(P, &arg))) return rc;
                if ((rc = parse_postfix(P, &arg))) return rc;
                n->list = jinja__arena_alloc(P->a, sizeof(jnode *));
                n->names = jinja__arena_alloc(P->a, sizeof(char *));
                if (!n->list || !n->names) return nomem(P);
                n->list[0] = arg;
                n->n_list = 1;
            }
            *io = n;
        } else if (is_op(t, "(")) {
            next(P);
            if ((rc = finish_call(P, *io, t, io))) return rc;
        } else {
            return 0;
        }
    }
}

static int parse_unary(parser *P, jnode **out, bool with_filter) {
    int rc = enter(P);
    if (rc) return rc;
    jtok *t = cur(P);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        jnode *x;
        if ((rc = parse_unary(P, &x, false))) return rc;
        n = node(P, is_op(t, "-") ? E_NEG : E_POS, t);
        if (!n) return nomem(P);
        n->a = x;
    } else {
        if ((rc = parse_primary(P, &n))) return rc;
    }
    if ((rc = parse_postfix(P, &n))) return rc;
    if (with_filter && (rc = parse_filters(P, &n))) return rc;
    P->depth--;
    *out = n;
    return 0;
}

static jnode *binary(parser *P, int kind, int op, jtok *at, jnode *a, jnode *b) {
    jnode *n = node(P, kind, at);
    if (n) {
        n->op = op;
        n->a = a;
        n->b = b;
    }
    return n;
}

static int parse_pow(parser *P, jnode **out) {
    int rc = parse_unary(P, out, true);
    while (!rc && is_op(cur(P), "**")) {
        jtok *t = cur(P);
        next(P);
        jnode *b;
        if ((rc = parse_unary(P, &b, true))) break;
        if (!(*out = binary(P, E_BIN, OP_POW, t, *out, b))) return nomem(P);
    }
    return rc;
}

static int parse_mul(parser *P, jnode **out) {
    int rc = parse_pow(P, out);
    for (;;) {
        if (rc) return rc;
        jtok *t = cur(P);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV : is_op(t, "%") ? OP_MOD : 0;
        if (!op) return 0;
        next(P);
        jnode *b;
        if ((rc = parse_pow(P, &b))) return rc;
        if (!(*out = binary(P, E_BIN, op, t, *out, b))) return nomem(P);
    }
}

static int parse_concat(parser *P, jnode **out) {
    int rc = parse_mul(P, out);
    while (!rc && is_op(cur(P), "~")) {
        jtok *t = cur(P);
        next(P);
        jnode *b;
        if ((rc = parse_mul(P, &b))) break;
        if (!(*out = binary(P, E_BIN, OP_CONCAT, t, *out, b))) return nomem(P);
    }
    return rc;
}

static int parse_add(parser *P, jnode **out) {
    int rc = parse_concat(P, out);
    for (;;) {
        if (rc) return rc;
        jtok *t = cur(P);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!op) return 0;
        next(P);
        jnode *b;
        if ((rc = parse_concat(P, &b))) return rc;
        if (!(*out = binary(P, E_BIN, op, t, *out, b))) return nomem(P);
    }
}

static int parse_compare(parser *P, jnode **out) {
    int rc = parse_add(P, out);
    jnode *chain = NULL; /* a < b < c  →  (a < b) and (b < c) */
    for (;;) {
        if (rc) return rc;
        jtok *t = cur(P);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, ">") ? OP_GT
               : is_op(t, "<=") ? OP_LE : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN : 0;
        if (!op && is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            next(P);
        }
        if (!op) break;
        next(P);
        jnode *b;
        if ((rc = parse_add(P, &b))) return rc;
        jnode *lhs = chain ? chain->b : *out;
        jnode *cmp = binary(P, E_CMP, op, t, lhs, b);
        if (!cmp) return nomem(P);
        if (!chain) {
            chain = cmp;
            *out = cmp;
        } else {
            if (!(*out = binary(P, E_AND, 0, t, *out, cmp))) return nomem(P);
            chain = cmp;
        }
    }
    return 0;
}

static int parse_not(parser *P, jnode **out) {
    jtok *t = cur(P);
    if (is_name(t, "not")) {
        int rc = enter(P);
        if (rc) return rc;
        next(P);
        jnode *x;
        if ((rc = parse_not(P, &x))) return rc;
        P->depth--;
        jnode *n = node(P, E_NOT, t);
        if (!n) return nomem(P);
        n->a = x;
        *out = n;
        return 0;
    }
    return parse_compare(P, out);
}

static int parse_and(parser *P, jnode **out) {
    int rc = parse_not(P, out);
    while (!rc && is_name(cur(P), "and")) {
        jtok *t = cur(P);
        next(P);
        jnode *b;
        if ((rc = parse_not(P, &b))) break;
        if (!(*out = binary(P, E_AND, 0, t, *out, b))) return nomem(P);
    }
    return rc;
}

static int parse_or(parser *P, jnode **out) {
    int rc = parse_and(P, out);
    while (!rc && is_name(cur(P), "or")) {
        jtok *t = cur(P);
        next(P);
        jnode *b;
        if ((rc = parse_and(P, &b))) break;
        if (!(*out = binary(P, E_OR, 0, t, *out, b))) return nomem(P);
    }
    return rc;
}

static int parse_expr(parser *P, jnode **out) {
    int rc = enter(P);
    if (rc) return rc;
    if ((rc = parse_or(P, out))) return rc;
    while (is_name(cur(P), "if")) {
        jtok *t = cur(P);
        next(P);
        jnode *cond, *other = NULL;
        if ((rc = parse_or(P, &cond))) return rc;
        if (is_name(cur(P), "else")) {
            next(P);
            if ((rc = parse_expr(P, &other))) return rc;
        }
        jnode *n = node(P, E_COND, t);
        if (!n) return nomem(P);
        n->a = cond;
        n->b = *out;
        n->c = other;
        *out = n;
    }
    P->depth--;
    return 0;
}

/* An expression that may be an unparenthesised tuple ("a, b"). */
static int parse_tuple(parser *P, jnode **out, bool condexpr) {
    jtok *t = cur(P);
    int rc = condexpr ? parse_expr(P, out) : parse_or(P, out);
    if (rc || !is_op(cur(P), ",")) return rc;
    nlist items = {0};
    if (!nlist_push(P, &items, *out, NULL)) return nomem(P);
    while (is_op(cur(P), ",")) {
        next(P);
        if (cur(P)->kind == TK_BLOCK_END || cur(P)->kind == TK_VAR_END) break;
        jnode *x;
        if ((rc = condexpr ? parse_expr(P, &x) : parse_or(P, &x))) return rc;
        if (!nlist_push(P, &items, x, NULL)) return nomem(P);
    }
    jnode *n = node(P, E_LIST, t);
    if (!n) return nomem(P);
    n->list = items.v;
    n->n_list = items.n;
    n->op = 1; /* tuple */
    *out = n;
    return 0;
}

/* ---- statements ----------------------------------------------------------- */

static int parse_body(parser *P, const char *const *ends, int n_ends, jnode **out);

static int expect_block_end(parser *P) {
    if (cur(P)->kind != TK_BLOCK_END) return fail(P, cur(P), "'%}'");
    next(P);
    return 0;
}

/* After "{% name": checks the end tag of a body and consumes it. */
static int end_tag(parser *P, const char *name) {
    /* parse_body stopped at "{%" followed by an end name */
    next(P); /* {% */
    if (!is_name(cur(P), name)) {
        char what[32];
        snprintf(what, sizeof what, "'%s'", name);
        return fail(P, cur(P), what);
    }
    next(P);
    return expect_block_end(P);
}

static int parse_if(parser *P, jtok *at, jnode **out) {
    static const char *const ends[] = {"elif", "else", "endif"};
    jnode *n = node(P, N_IF, at);
    if (!n) return nomem(P);
    int rc;
    if ((rc = parse_tuple(P, &n->a, true)) || (rc = expect_block_end(P))) return rc;
    if ((rc = parse_body(P, ends, 3, &n->b))) return rc;
    next(P); /* {% */
    jtok *kw = cur(P);
    if (is_name(kw, "elif")) {
        next(P);
        if ((rc = enter(P))) return rc;
        if ((rc = parse_if(P, kw, &n->c))) return rc;
        P->depth--;
        *out = n;
        return 0;
    }
    if (is_name(kw, "else")) {
        next(P);
        if ((rc = expect_block_end(P))) return rc;
        if ((rc = parse_body(P, ends + 2, 1, &n->c))) return rc;
        next(P);
    }
    if (!is_name(cur(P), "endif")) return fail(P, cur(P), "'endif'");
    next(P);
    if ((rc = expect_block_end(P))) return rc;
    *out = n;
    return 0;
}

static int parse_for(parser *P, jtok *at, jnode **out) {
    static const char *const ends[] = {"else", "endfor"};
    jnode *n = node(P, N_FOR, at);
    if (!n) return nomem(P);
    nlist targets = {0};
    bool paren = is_op(cur(P), "(");
    if (paren) next(P);
    for (;;) {
        if (cur(P)->kind != TK_NAME) return fail(P, cur(P), "a loop variable name");
        const char *nm = tok_str(P, cur(P));
        if (!nm || !nlist_push(P, &targets, NULL, nm)) return nomem(P);
        next(P);
        if (!is_op(cur(P), ",")) break;
        next(P);
    }
    int rc;
    if (paren && (rc = expect_op(P, ")"))) return rc;
    n->names = targets.names;
    n->n_names = targets.n;
    if (!is_name(cur(P), "in")) return fail(P, cur(P), "'in'");
    next(P);
    if ((rc = parse_tuple(P, &n->a, false))) return rc;
    if (is_name(cur(P), "if")) {
        next(P);
        if ((rc = parse_expr(P, &n->d))) return rc;
    }
    if (is_name(cur(P), "recursive")) return unsupported(P, cur(P), "construct", "recursive for loop");
    if ((rc = expect_block_end(P))) return rc;
    if ((rc = parse_body(P, ends, 2, &n->b))) return rc;
    next(P);
    if (is_name(cur(P), "else")) {
        next(P);
        if ((rc = expect_block_end(P))) return rc;
        if ((rc = parse_body(P, ends + 1, 1, &n->c))) return rc;
        next(P);
    }
    if (!is_name(cur(P), "endfor")) return fail(P, cur(P), "'endfor'");
    next(P);
    if ((rc = expect_block_end(P))) return rc;
    *out = n;
    return 0;
}

static int parse_set(parser *P, jtok *at, jnode **out) {
    static const char *const ends[] = {"endset"};
    jnode *n = node(P, N_SET, at);
    if (!n) return nomem(P);
    if (cur(P)->kind != TK_NAME) return fail(P, cur(P), "a variable name after 'set'");
    if (!(n->name = tok_str(P, cur(P)))) return nomem(P);
    next(P);
    int rc;
    if (is_op(cur(P), ".")) {
        next(P);
        if (cur(P)->kind != TK_NAME) return fail(P, cur(P), "an attribute name");
        if (!(n->attr = tok_str(P, cur(P)))) return nomem(P);
        next(P);
    } else if (is_op(cur(P), ",")) {
        return unsupported(P, cur(P), "construct", "tuple assignment in set");
    }
    if (is_op(cur(P), "=")) {
        next(P);
        if ((rc = parse_tuple(P, &n->a, true)) || (rc = expect_block_end(P))) return rc;
    } else if (cur(P)->kind == TK_BLOCK_END) {
        if (n->attr) return fail(P, cur(P), "'='");
        next(P);
        if ((rc = parse_body(P, ends, 1, &n->b)) || (rc = end_tag(P, "endset"))) return rc;
    } else if (is_op(cur(P), "|")) {
        return unsupported(P, cur(P), "construct", "filtered block set");
    } else {
        return fail(P, cur(P), "'='");
    }
    *out = n;
    return 0;
}

static int parse_macro(parser *P, jtok *at, jnode **out) {
    static const char *const ends[] = {"endmacro"};
    jnode *n = node(P, N_MACRO, at);
    if (!n) return nomem(P);
    if (cur(P)->kind != TK_NAME) return fail(P, cur(P), "a macro name");
    if (!(n->name = tok_str(P, cur(P)))) return nomem(P);
    next(P);
    int rc;
    if ((rc = expect_op(P, "("))) return rc;
    nlist params = {0};
    while (!is_op(cur(P), ")")) {
        if (cur(P)->kind != TK_NAME) return fail(P, cur(P), "a parameter name");
        const char *nm = tok_str(P, cur(P));
        if (!nm) return nomem(P);
        next(P);
        jnode *def = NULL;
        if (is_op(cur(P), "=")) {
            next(P);
            if ((rc = parse_expr(P, &def))) return rc;
        }
        if (!nlist_push(P, &params, def, nm)) return nomem(P);
        if (is_op(cur(P), ",")) { next(P); continue; }
        if (!is_op(cur(P), ")")) return fail(P, cur(P), "',' or ')' in macro parameters");
    }
    next(P);
    n->list = params.v;
    n->names = params.names;
    n->n_list = n->n_names = params.n;
    if ((rc = expect_block_end(P))) return rc;
    if ((rc = parse_body(P, ends, 1, &n->b)) || (rc = end_tag(P, "endmacro"))) return rc;
    if (P->n_macros == P->cap_macros) {
        size_t cap = P->cap_macros ? P->cap_macros * 2 : 8;
        const char **v = jinja__arena_alloc(P->a, cap * sizeof *v);
        if (!v) return nomem(P);
        if (P->n_macros) memcpy(v, P->macros, P->n_macros * sizeof *v);
        P->macros = v;
        P->cap_macros = cap;
    }
    P->macros[P->n_macros++] = n->name;
    *out = n;
    return 0;
}

static int parse_stmt(parser *P, jnode **out) {
    jtok *at = cur(P); /* {% */
    next(P);
    jtok *kw = cur(P);
    if (kw->kind != TK_NAME) return fail(P, kw, "a statement name after '{%'");
    next(P);
    int rc;
    if (is_name(kw, "if")) return parse_if(P, at, out);
    if (is_name(kw, "for")) return parse_for(P, at, out);
    if (is_name(kw, "set")) return parse_set(P, at, out);
    if (is_name(kw, "macro")) return parse_macro(P, at, out);
    if (is_name(kw, "break") || is_name(kw, "continue")) {
        if ((rc = expect_block_end(P))) return rc;
        if (!(*out = node(P, is_name(kw, "break") ? N_BREAK : N_CONTINUE, at))) return nomem(P);
        return 0;
    }
    if (is_name(kw, "generation")) { /* HF's assistant-mask marker: renders its body */
        static const char *const ends[] = {"endgeneration"};
        if ((rc = expect_block_end(P))) return rc;
        if ((rc = parse_body(P, ends, 1, out))) return rc;
        return end_tag(P, "endgeneration");
    }
    char name[48];
    snprintf(name, sizeof name, "%.*s", (int)MIN(kw->n, 40), kw->s);
    static const char *const known[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration"};
    if (in_set(name, known, ARRAY_LEN(known)))
        return err_set(P->e, ERR_FORMAT, "%d:%d: unexpected '%s'", kw->line, kw->col, name);
    return unsupported(P, kw, "tag", name);
}

/* Parses statements until EOF (ends == NULL) or "{% <one of ends>", which is
 * left unconsumed. */
static int parse_body(parser *P, const char *const *ends, int n_ends, jnode **out) {
    int rc = enter(P);
    if (rc) return rc;
    jnode *body = node(P, N_BODY, cur(P));
    if (!body) return nomem(P);
    nlist items = {0};
    for (;;) {
        jtok *t = cur(P);
        jnode *s = NULL;
        if (t->kind == TK_EOF) {
            if (n_ends) {
                char what[64];
                snprintf(what, sizeof what, "'{%% %s %%}'", ends[n_ends - 1]);
                return fail(P, t, what);
            }
            break;
        }
        if (t->kind == TK_TEXT) {
            if (!(s = node(P, N_TEXT, t))) return nomem(P);
            s->val = jv_str(t->s, t->n);
            next(P);
        } else if (t->kind == TK_VAR_BEGIN) {
            next(P);
            if (!(s = node(P, N_OUTPUT, t))) return nomem(P);
            if ((rc = parse_tuple(P, &s->a, true))) return rc;
            if (cur(P)->kind != TK_VAR_END) return fail(P, cur(P), "'}}'");
            next(P);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            jtok *kw = peek(P, 1);
            bool is_end = false;
            for (int i = 0; i < n_ends; i++)
                if (is_name(kw, ends[i])) is_end = true;
            if (is_end) break;
            if ((rc = parse_stmt(P, &s))) return rc;
        } else {
            return fail(P, t, "text or a tag");
        }
        if (!nlist_push(P, &items, s, NULL)) return nomem(P);
    }
    body->list = items.v;
    body->n_list = items.n;
    *out = body;
    P->depth--;
    return 0;
}

int jinja_parse(const char *src, size_t len, jinja_tmpl **out, err_t *e) {
    *out = NULL;
    jinja_tmpl *t = xcalloc(1, sizeof *t);
    t->arena.limit = 0;
    jtok *toks;
    size_t n_toks;
    int rc = jinja__lex(src ? src : "", src ? len : 0, &t->arena, &toks, &n_toks, e);
    if (rc) goto fail;
    parser P = {.t = toks, .n = n_toks, .a = &t->arena, .e = e};
    if ((rc = parse_body(&P, NULL, 0, &t->root))) goto fail;
    for (size_t i = 0; i < P.n_calls; i++) {
        const char *fn = P.calls[i]->a->name;
        bool ok = in_set(fn, FUNCS, ARRAY_LEN(FUNCS));
        for (size_t m = 0; m < P.n_macros && !ok; m++) ok = strcmp(P.macros[m], fn) == 0;
        if (!ok) {
            rc = err_set(e, ERR_UNSUPPORTED, "%d:%d: unsupported function '%s'", P.calls[i]->line, P.calls[i]->col, fn);
            goto fail;
        }
    }
    *out = t;
    return 0;
fail:
    jinja_free(t);
    return rc;
}

void jinja_free(jinja_tmpl *t) {
    if (!t) return;
    jinja__arena_free(&t->arena);
    free(t);
}
