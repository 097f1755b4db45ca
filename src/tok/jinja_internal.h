/*
 * jinja_internal.h — shared between the files of the Jinja engine only
 * (jinja_lex.c, jinja_parse.c, jinja_value.c, jinja_eval.c). Nothing
 * outside src/tok/jinja*.c may include it.
 *
 *   jinja_lex.c    template bytes → tokens (text with whitespace control
 *                  already applied, tag delimiters, expression tokens)
 *   jinja_parse.c  tokens → AST (jnode), the public jinja_parse/jinja_free
 *   jinja_value.c  values (jv), the render arena, str()/repr()/tojson,
 *                  equality, truthiness
 *   jinja_eval.c   AST walk, filters, tests, methods, the public jinja_render
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

#include "tok/jinja.h"

/* ---- arena ----------------------------------------------------------------
 * Bump allocator over malloc'd chunks. jarena_alloc returns zeroed memory or
 * NULL when the cap (`limit`, 0 = none) would be passed or malloc fails.   */
typedef struct jchunk jchunk;
typedef struct jarena {
    jchunk *head;
    size_t used;  /* bytes handed out plus chunk overheads */
    size_t limit; /* 0: unlimited */
} jarena;
void *jarena_alloc(jarena *a, size_t n);
void jarena_free(jarena *a);

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
int jinja_lex(const char *src, size_t len, jarena *a, jtok **out, size_t *n_out, err_t *e);

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
void jbuf_put(jbuf *b, const char *s, size_t n);
void jbuf_putc(jbuf *b, char c);
void jbuf_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Arena-backed containers; NULL / false when the arena cap is hit. */
jlist *jlist_new(jarena *a, size_t n);
jdict *jdict_new(jarena *a, size_t cap);
bool jdict_set(jarena *a, jdict *d, jv key, jv val);
jv *jdict_get(const jdict *d, jv key);         /* NULL when absent */
jv *jdict_get_str(const jdict *d, const char *k, size_t n);
bool jv_str_dup(jarena *a, const char *p, size_t n, jv *out);

/* Conversions. Returns false only when the buffer overflowed. */
void jv_to_str(jbuf *b, jv v);   /* Python str(): what {{ v }} prints */
void jv_to_repr(jbuf *b, jv v);  /* Python repr(): used inside lists/dicts */
/* Python json.dumps(v, ensure_ascii=False, indent=indent (<0: none),
 * separators=(item_sep, key_sep), sort_keys). Returns false when `v` holds
 * something JSON cannot express (undefined, a macro...). */
bool jv_to_json(jbuf *b, jv v, int indent, const char *item_sep, const char *key_sep, bool sort_keys, int depth);
bool jv_truthy(jv v);
bool jv_eq(jv a, jv b);
const char *jv_type_name(jv v);
/* Converts a jansson value into an arena value; false on cap. */
bool jv_from_json(jarena *a, json_t *j, jv *out, int depth);
/* UTF-8 helpers */
size_t jutf8_len(const char *p, size_t n); /* number of code points */

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

#endif
