/*
 * jinja_internal.h — shared between the files of the Jinja engine only
 * (jinja_lex.c, jinja_parse.c, jinja_value.c, jinja_eval.c). Nothing
 * outside src/chat/jinja*.c may include it. Its functions carry the
 * `jinja__` prefix (cross-file private, as tok/'s `tok__`); the public
 * ones (jinja.h) have one underscore.
 *
 *   jinja_lex.c    template bytes → tokens (text with whitespace control
 *                  already applied, tag delimiters, expression tokens)
 *   jinja_parse.c  tokens → AST (jnode), the public jinja_parse/jinja_free
 *   jinja_value.c  values (jv), the render arena, str()/repr()/tojson,
 *                  equality, truthiness
 *   jinja_eval.c   AST walk, scopes, operators, the public jinja_render
 *   jinja_builtins.c  tests, filters, methods, global functions
 *
 * Memory: a template's tokens and AST live in one arena owned by the
 * jinja_tmpl; every value made while rendering lives in a per-render arena
 * with a byte cap, freed in one go when the render ends.
 */
#ifndef KVLOOM_JINJA_INTERNAL_H
#define KVLOOM_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/utf8.h"
#include "chat/jinja.h"

/* ---- arena ----------------------------------------------------------------
 * Bump allocator over malloc'd chunks. jinja__arena_alloc returns zeroed memory or
 * NULL when the cap (`limit`, 0 = none) would be passed or malloc fails.   */
typedef struct jchunk jchunk;
typedef struct jarena {
    jchunk *head;
    size_t used;  /* bytes handed out plus chunk overheads */
    size_t limit; /* 0: unlimited */
} jarena;
void *jinja__arena_alloc(jarena *a, size_t n);
void jinja__arena_free(jarena *a);
/* malloc/realloc failures of the arenas and buffers on this thread so far:
 * the evaluator reports every refused allocation as "over the cap", and
 * jinja_render tells a real out-of-memory (ERR_NOMEM) from a template past
 * its caps (ERR_RANGE) by this count. */
extern _Thread_local unsigned long jinja__n_nomem;

/* ---- tokens ---------------------------------------------------------------- */
enum {
    TK_EOF,
    TK_TEXT,        /* literal template text                  */
    TK_VAR_BEGIN,   /* {{                                      */
    TK_VAR_END,     /* }}                                      */
    TK_BLOCK_BEGIN, /* {%                                      */
    TK_BLOCK_END,   /* %}                                      */
    TK_NAME,
    TK_STRING,      /* unescaped value in s/n                  */
    TK_INT,
    TK_FLOAT,
    TK_OP,          /* operator text in s/n: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : | */
};

typedef struct jtok {
    int kind;
    int line, col;
    const char *s; /* text / name / string value / operator (arena or source) */
    size_t n;
    int64_t i;
    double f;
} jtok;

/* Splits the template into tokens (array in the arena, ends with TK_EOF). */
int jinja__lex(const char *src, size_t len, jarena *a, jtok **out, size_t *n_out, err_t *e);

/* ---- values ---------------------------------------------------------------- */
enum {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,    /* namespace(): a dict whose attributes can be assigned */
    JV_MACRO, /* a {% macro %} definition                            */
    JV_FUNC,  /* a global function (range, namespace, ...)           */
    JV_LOOP,  /* the `loop` variable of a for loop                   */
};

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;
typedef struct jnode jnode;

typedef struct jv {
    int t;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        jlist *l;
        jdict *d;
        const jnode *m;
        int fn;
        jloop *loop;
    };
} jv;

struct jlist {
    size_t n;
    jv *v;
    bool tuple; /* prints as (a, b); otherwise a list */
};
struct jdict {
    size_t n, cap;
    jv *k, *v;
};
struct jloop {
    size_t index0, length;
    const jlist *items;
};

static inline jv jv_undef(void) { jv v = {.t = JV_UNDEF}; return v; }
static inline jv jv_none(void) { jv v = {.t = JV_NONE}; return v; }
static inline jv jv_bool(bool b) { jv v = {.t = JV_BOOL, .b = b}; return v; }
static inline jv jv_int(int64_t i) { jv v = {.t = JV_INT, .i = i}; return v; }
static inline jv jv_float(double f) { jv v = {.t = JV_FLOAT, .f = f}; return v; }
static inline jv jv_str(const char *p, size_t n) { jv v = {.t = JV_STR}; v.s.p = p; v.s.n = n; return v; }

/* A growable byte buffer in plain malloc memory with a size cap. */
typedef struct jbuf {
    char *p;
    size_t n, cap, limit;
    bool over; /* an append was refused because of the cap or malloc */
} jbuf;
void jinja__buf_put(jbuf *b, const char *s, size_t n);
void jinja__buf_putc(jbuf *b, char c);
void jinja__buf_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Arena-backed containers; NULL / false when the arena cap is hit. */
jlist *jinja__list_new(jarena *a, size_t n);
jdict *jinja__dict_new(jarena *a, size_t cap);
bool jinja__dict_set(jarena *a, jdict *d, jv key, jv val);
jv *jinja__dict_get(const jdict *d, jv key);         /* NULL when absent */
jv *jinja__dict_get_str(const jdict *d, const char *k, size_t n);
bool jinja__str_dup(jarena *a, const char *p, size_t n, jv *out);

/* Conversions. Returns false only when the buffer overflowed. */
void jinja__value_str(jbuf *b, jv v);   /* Python str(): what {{ v }} prints */
void jinja__value_repr(jbuf *b, jv v);  /* Python repr(): used inside lists/dicts */
/* Python json.dumps(v, ensure_ascii=False, indent=indent (<0: none),
 * separators=(item_sep, key_sep), sort_keys). Returns false when `v` holds
 * something JSON cannot express (undefined, a macro...). */
bool jinja__value_json(jbuf *b, jv v, int indent, const char *item_sep, const char *key_sep, bool sort_keys, int depth);
bool jinja__value_truthy(jv v);
bool jinja__value_eq(jv a, jv b);
const char *jinja__value_type(jv v);
/* Converts a jansson value into an arena value; false on cap. */
bool jinja__value_from_json(jarena *a, json_t *j, jv *out, int depth);
/* UTF-8 helpers */

/* ---- AST --------------------------------------------------------------------
 * Statements and expressions share one node type; `kind` says which fields
 * are used (see the comments on each kind in jinja_parse.c).              */
enum {
    /* statements */
    N_BODY,     /* list: statements                                        */
    N_TEXT,     /* name: text                                              */
    N_OUTPUT,   /* a: expression                                           */
    N_IF,       /* a: cond, b: then body, c: else body (or NULL)           */
    N_FOR,      /* names: targets, a: iterable, b: body, c: else, d: filter */
    N_SET,      /* name: variable, attr: optional ns attribute, a: value or b: body */
    N_MACRO,    /* name, names: params, list: defaults (NULL entries), b: body */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    E_CONST,    /* val                                                     */
    E_NAME,     /* name                                                    */
    E_ATTR,     /* a.name                                                  */
    E_ITEM,     /* a[b]                                                    */
    E_SLICE,    /* a[b:c:d] (NULL parts omitted)                           */
    E_CALL,     /* a(list...), names: keyword names (NULL for positional)  */
    E_FILTER,   /* a|name(list...), names: keyword names                   */
    E_TEST,     /* a is [not] name(list...), op: 1 when negated            */
    E_BIN,      /* a op b: + - * / // % ** ~                               */
    E_CMP,      /* a op b: == != < > <= >= in notin                        */
    E_AND,
    E_OR,
    E_NOT,
    E_NEG,
    E_POS,
    E_COND,     /* b if a else c (c NULL: undefined)                       */
    E_LIST,     /* list                                                    */
    E_DICT,     /* list: key, value, key, value...                         */
};

enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN };

struct jnode {
    int kind;
    int op;
    int line, col;
    const char *name; /* NUL-terminated */
    const char *attr;
    jnode *a, *b, *c, *d;
    jnode **list;
    const char **names;
    int n_list, n_names;
    jv val;
};

struct jinja_tmpl {
    jarena arena;
    jnode *root;
};

/* ---- rendering (jinja_eval.c) ------------------------------------------------
 * State of one render; lives on jinja_render's stack.                    */
enum { FN_RANGE = 1, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME }; /* JV_FUNC ids */

typedef struct jrender {
    jarena a;            /* every value of this render; capped at JINJA_MAX_MEMORY */
    err_t *e;
    long steps;          /* loop iterations + calls + per-item filter work so far   */
    int depth;           /* nested macro calls                                     */
    int rec;             /* nested eval/exec calls (C stack use)                   */
    int in_loop;         /* for loops around the current statement                 */
    int brk;             /* 1: break pending, 2: continue pending                  */
    struct jframe *root; /* globals and the caller's variables                     */
} jrender;

/* Call arguments: names[i] is NULL for a positional argument (names may be NULL). */
typedef struct jargs {
    int n;
    jv *v;
    const char **names;
} jargs;

static inline bool jv_is_int_like(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static inline int64_t jv_int_of(jv v) { return v.t == JV_INT ? v.i : v.t == JV_BOOL ? v.b : 0; }
static inline bool jv_is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static inline double jv_num_of(jv v) { return v.t == JV_FLOAT ? v.f : (double)jv_int_of(v); }

/* Records "line:col: message" (from node n, may be NULL) and returns code. */
int jinja__eval_err(jrender *R, const jnode *n, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int jinja__eval_oom(jrender *R, const jnode *n);            /* ERR_RANGE: memory cap */
int jinja__eval_step(jrender *R, const jnode *n, long k);   /* counts k steps; ERR_RANGE past the cap */
int jinja__eval_to_str(jrender *R, const jnode *n, jv v, jv *out);   /* str(v) in the arena */
int jinja__eval_buf_to_str(jrender *R, const jnode *n, jbuf *b, jv *out); /* frees b */
int jinja__eval_make_list(jrender *R, const jnode *n, size_t len, jv *out);
int jinja__eval_cp_offsets(jrender *R, const jnode *n, jv s, size_t **off, size_t *n_cp);
int jinja__eval_iter(jrender *R, const jnode *n, jv v, jlist **out); /* items of an iterable */
const jv *jinja__eval_arg(const jargs *a, int pos, const char *name); /* by name, else pos-th positional */
int jinja__eval_n_positional(const jargs *a);
jv jinja__eval_attr(jv obj, const char *name);             /* obj.name, undefined if absent */
jv jinja__eval_path(jv obj, jv path);                      /* "a.b.0" attribute path */
int jinja__eval_slice(jrender *R, const jnode *n, jv obj, jv *parts, jv *out);
int jinja__eval_binop(jrender *R, const jnode *n, int op, jv a, jv b, jv *out);
int jinja__eval_compare(jrender *R, const jnode *n, int op, jv a, jv b, bool *res);
int jinja__eval_order(jv a, jv b, bool case_sensitive);    /* sort order for sort/min/max */

/* ---- builtins (jinja_builtins.c) -------------------------------------------- */
int jinja__builtins_test(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, bool *res);
int jinja__builtins_method(jrender *R, const jnode *n, jv obj, const char *m, const jargs *a, jv *out);
int jinja__builtins_filter(jrender *R, const jnode *n, const char *name, jv v, const jargs *a, jv *out);
int jinja__builtins_call(jrender *R, const jnode *n, int fn, const jargs *a, jv *out); /* FN_* */

#endif
