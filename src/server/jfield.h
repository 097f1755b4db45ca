/*
 * jfield.h — reading a request body's fields: a member (null counts as
 * absent), its type and range checked, and a refusal that names the field
 * by its path, written the way the API at hand writes paths.
 *
 * Place in the flow: server/, on an HTTP thread, under every request reader
 * (oai.c's oai_parse, the Anthropic, Responses and Ollama translations,
 * embeddings and tokenize routes). Nothing here allocates.
 *
 * A reader (jf) stands at one object of the body, at a path: the body
 * itself ("") or, by jf_key and jf_index, a member or an element below it.
 * Every refusal is "PATH COMPLAINT", PATH the reader's path joined with the
 * field's name, in the reader's style:
 *
 *   JF_TAGGED  'messages[2].role' must be a string   the path tagged (ERR_F):
 *                                                     oai_parse's internal names,
 *                                                     each API renames them (api.h)
 *   JF_QUOTED  'messages[2].role' must be a string   an API's own names (Ollama,
 *                                                     embeddings, tokenize)
 *   JF_COLON   messages.2.role: must be a string     Anthropic (dot_index),
 *                                                     Responses (input[2].role)
 *   JF_BARE    input[2] must be a string              names written as they are
 *
 * and fills the oai_error: status 400, e.code ERR_INVALID, field the
 * reader's param (the top-level field an error object reports; static).
 * The functions return 0, or ERR_INVALID with the error filled, so a reader
 * writes `if (jf_...(...) < 0) return ERR_INVALID;`.
 *
 * Complaints the helpers write (the `what` of "must be WHAT"):
 *   jf_get       a string · a non-empty string · a boolean · an integer ·
 *                a number · an object · an array · a non-empty array, and
 *                "X or Y" for two types; or the caller's `what`
 *   jf_int       an integer · an integer in [lo, hi]; got x
 *   jf_num       a number · in [lo, hi]; got x (open ends as "(")
 *   jf_int_in    the caller's `what` (one message: wrong type or range)
 *   jf_enum      "a", "b" or "c"
 *   jf_typed     an object with a string 'type'
 *   jf_token_ids (for element i) a token id in [0, n_vocab)
 */
#ifndef KVLOOM_JFIELD_H
#define KVLOOM_JFIELD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oai.h"

enum { JF_TAGGED, JF_QUOTED, JF_COLON, JF_BARE };

/* How an API writes field paths in its refusals (each reader's file holds
 * its own, static). */
typedef struct jf_style {
    int quote;           /* JF_TAGGED, JF_QUOTED, JF_COLON, JF_BARE           */
    bool dot_index;      /* element i of P is P.i (Anthropic), else P[i]       */
    bool params;         /* a refusal reports its top-level field as param     */
    const char *missing; /* JF_NEEDED's complaint; NULL: "is required"         */
} jf_style;

/* A reader at one object of a request body (plain data, copied freely). */
typedef struct jf {
    const jf_style *style;
    oai_error *err;     /* where a refusal goes                                */
    const char *param;  /* what a refusal reports as its field (static), or
                           NULL; set by jf_key at the body (style->params)     */
    char path[160];     /* the object's path, "" at the body                   */
} jf;

/* The reader at the body: refusals into err (only written on a refusal). */
jf jf_body(const jf_style *s, oai_error *err);
/* The reader at member `name` (static) of r's object / at element i. At the
 * body, jf_key makes name the param when the style has params. */
jf jf_key(const jf *r, const char *name);
jf jf_index(const jf *r, size_t i);

/* A refusal naming r's path joined with name (NULL: r's path itself):
 * "PATH " (per style) and the formatted complaint. Returns ERR_INVALID. */
int jf_fail(const jf *r, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* jf_get's types and flags. */
enum {
    JF_STRING = 1 << 0,
    JF_BOOL = 1 << 1,
    JF_INT = 1 << 2,    /* a JSON integer                                     */
    JF_NUMBER = 1 << 3, /* an integer or a real                               */
    JF_OBJECT = 1 << 4,
    JF_ARRAY = 1 << 5,
    JF_NONEMPTY = 1 << 8, /* a string or an array: not empty                  */
    JF_REQUIRED = 1 << 9, /* absent is refused too, with the same complaint   */
    JF_NEEDED = 1 << 10,  /* absent is refused: "PATH is required" (or the
                             style's `missing`)                               */
};

/* The member `name` of o: *v NULL when absent or null (or o is not an
 * object), else the value when its type is one of `type`'s (no type: any);
 * otherwise a refusal "PATH must be WHAT" (what NULL: from the types,
 * above). */
int jf_get(const jf *r, json_t *o, const char *name, unsigned type, const char *what, json_t **v);
/* A boolean member into *out (left as it is when absent). */
int jf_bool(const jf *r, json_t *o, const char *name, bool *out);

/* OpenAI's numbers. An integer in [lo, hi] (integral reals such as 16.0
 * are taken) into *out; *present (may be NULL) says whether it was given.
 * A number in [lo, hi] (lo excluded when lo_open; finite) into *out, left
 * as it is when absent. */
int jf_int(const jf *r, json_t *o, const char *name, long long lo, long long hi, long long *out, bool *present);
int jf_num(const jf *r, json_t *o, const char *name, double lo, bool lo_open, double hi, double *out);
/* A JSON integer (what: "an integer >= 1") or a number (finite) in
 * [lo, hi], one complaint "must be WHAT" for a wrong type or range; *v as
 * jf_get's. */
int jf_int_in(const jf *r, json_t *o, const char *name, long long lo, long long hi, const char *what, json_t **v);
int jf_num_in(const jf *r, json_t *o, const char *name, double lo, double hi, const char *what, json_t **v);

/* A string member equal to one of opts[0..n): its index in *idx (left as it
 * is when absent); anything else is refused, "must be \"a\", \"b\" or
 * \"c\"". */
int jf_enum(const jf *r, json_t *o, const char *name, const char *const *opts, size_t n, int *idx);

/* Element or value `item` at r's path must be an object with a string
 * member "type": its value in *type; else "PATH must be an object with a
 * string 'type'" (PATH: r's path). */
int jf_typed(const jf *r, json_t *item, const char **type);

/* The array `a` at r's path as token ids in [0, n_vocab) into
 * ids[0 .. json_array_size(a)); element i otherwise refused, "PATH[i] must
 * be a token id in [0, n_vocab)". */
int jf_token_ids(const jf *r, json_t *a, int n_vocab, int32_t *ids);

#endif
