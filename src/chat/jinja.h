/*
 * jinja.h — a Jinja2-subset template engine, enough for the chat templates
 * that models ship in tokenizer.chat_template (GGUF) / tokenizer_config.json.
 *
 * Place in the flow: tok/. chat.c parses a model's template once at load time
 * and renders it for every chat request (the server's I/O side). The engine
 * reproduces what Hugging Face transformers does when it renders a chat
 * template: a sandboxed Jinja2 environment with trim_blocks=True,
 * lstrip_blocks=True, the loopcontrols extension (break/continue), a tojson
 * filter that does not escape HTML and keeps key order, and the globals
 * raise_exception(msg) and strftime_now(fmt).
 *
 *   template text ──jinja_parse──▶ jinja_tmpl (immutable AST)
 *                                      │
 *   json_t context ──jinja_render──────┴──▶ malloc'd UTF-8 string
 *
 * The supported subset is listed in docs/chat-templates.md. Anything outside
 * it (include, extends, call blocks, recursive loops, unknown filters or
 * tests...) is refused by jinja_parse with ERR_UNSUPPORTED and a message
 * naming the construct and its line:column, so a model whose template we
 * cannot run is detected at load time, not on the first request.
 *
 * Rendering is bounded: loop iterations, macro recursion, evaluator
 * recursion (C stack), memory and output bytes are all capped (JINJA_MAX_*);
 * going past a cap is an error, never a hang or a crash. A template's
 * raise_exception("...") is an error whose message is the template's text.
 * The output may contain NUL bytes when the context's strings do (use
 * out_len).
 *
 * Thread safety: a parsed jinja_tmpl is read-only, so any number of threads
 * may render it at the same time.
 */
#ifndef KVLOOM_JINJA_H
#define KVLOOM_JINJA_H

#include <jansson.h>
#include <stddef.h>

#include "base/base.h"

/* Caps applied while rendering one template. */
#define JINJA_MAX_STEPS 2000000          /* loop iterations + macro calls + filter items */
#define JINJA_MAX_DEPTH 64               /* nested macro calls                          */
#define JINJA_MAX_OUTPUT (16u << 20)     /* output bytes                                */
#define JINJA_MAX_MEMORY (128u << 20)    /* bytes of values built while rendering       */
#define JINJA_MAX_NESTING 200            /* parser nesting of blocks and expressions    */
#define JINJA_MAX_RECURSION 1000         /* evaluator recursion; needs ~0.5 MiB of stack */

typedef struct jinja_tmpl jinja_tmpl;

/* Parses `len` bytes of template source (need not be NUL-terminated).
 * On success *out owns the template (free with jinja_free) and 0 is returned.
 * On failure returns ERR_FORMAT (syntax) or ERR_UNSUPPORTED (a construct
 * outside the subset), *out is NULL and `e` names the problem and its
 * line:column. */
int jinja_parse(const char *src, size_t len, jinja_tmpl **out, err_t *e);

/* Frees a template; NULL is a no-op. */
void jinja_free(jinja_tmpl *t);

/* Renders `t` with the variables of the JSON object `ctx` (may be NULL: no
 * variables). `ctx` is only read. On success *out is a malloc'd
 * NUL-terminated string the caller frees, *out_len (if not NULL) its length,
 * and 0 is returned. On failure returns a negative ERR_* code, *out is NULL,
 * and `e` says why: ERR_INVALID for a runtime error of the template (a type
 * error, raise_exception — whose message is passed through verbatim after
 * "raise_exception: "), ERR_RANGE when a cap was hit, ERR_NOMEM when
 * malloc refused memory below the caps.
 * Environment: KVLOOM_FIXED_DATE (e.g. "2024-07-26") fixes strftime_now's
 * date, for reproducible tests. */
int jinja_render(const jinja_tmpl *t, json_t *ctx, char **out, size_t *out_len, err_t *e);

#endif
