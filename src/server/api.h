/*
 * api.h — what every HTTP API the server speaks (OpenAI, Anthropic,
 * Responses, Ollama) has in common, in one place: its error shape, its names
 * for the request fields the core validates, and the replies every handler
 * writes (errors, whole JSON answers, the request body as JSON with the
 * out-of-memory checkpoint).
 *
 * Place in the flow: server/, between routes.c (which finds a request's API
 * by its path) and the API files (oai.c, api_anthropic.c, api_responses.c,
 * api_ollama.c), each of which defines its api_ops row. The HTTP layer's own
 * errors (413, 408, 503, framing) are rendered through the row of the
 * request's path (routes_error_body), so a client reads its own API's shape
 * on every path.
 *
 * Field names: oai_parse and gen_start name the field at fault by its
 * internal path — the OpenAI chat body's names, which every API is
 * translated into (e.g. "messages[2].content", "tools[0].function.parameters",
 * "response_format.json_schema.schema") — in oai_error.field, and tag every
 * field path their messages mention (OAI_F, oai.h). api_error_text writes the
 * message with each tagged path in the API's own terms (api_ops.field), and
 * api_error_param the field an error object reports: no API rewrites another's
 * message text.
 */
#ifndef KVLOOM_API_H
#define KVLOOM_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "http.h"
#include "oai.h"

typedef struct api_ops {
    const char *name; /* "openai", "anthropic", "responses", "ollama" */
    /* The API's name for an internal field path (NUL-terminated, cut to
     * cap). NULL: the internal names are the API's (OpenAI). */
    void (*field)(const char *path, char *out, size_t cap);
    /* The field an error reports as its param (a top-level internal name,
     * e.g. "max_tokens"), in the API's terms, or NULL for none; may return
     * `field` itself. NULL: the internal name. */
    const char *(*param)(const char *field);
    /* An error's body in this API's shape (malloc'd JSON, never NULL): msg
     * plain text, param (already in the API's terms) and code NULL or
     * identifiers (an API without them leaves them out). */
    char *(*error_json)(int status, const char *msg, const char *param, const char *code);
    /* Its error objects have no param: a refusal names the field before
     * its message ("options.temperature: ...") — Ollama. */
    bool param_in_message;
} api_ops;

/* The rows (defined by the API's own file). */
extern const api_ops api_openai;    /* oai.c: /v1/completions, /v1/chat/completions and the rest */
extern const api_ops api_anthropic; /* api_anthropic.c: /v1/messages...                         */
extern const api_ops api_responses; /* api_responses.c: /v1/responses...                        */
extern const api_ops api_ollama_api;/* api_ollama.c: /api and /api/...                          */

/* The API a request path belongs to (its error shape): OpenAI unless the
 * path is one of the other APIs'. */
const api_ops *api_of_path(const char *path);

/* Answers x with an error in a's shape (429: Retry-After: 1); msg becomes
 * the log line's reason. */
void api_reply_error(const api_ops *a, http_exchange *x, int status, const char *msg, const char *param,
                     const char *code);
/* Answers oai_parse's or gen_start's refusal: its message and field in a's
 * terms; 503 when it ran out of memory (e->e.code ERR_NOMEM, or jansson
 * failed on this thread since nomem0). */
void api_reply_refusal(const api_ops *a, http_exchange *x, const oai_error *e, unsigned long nomem0);
/* Answers o (200 or status) as JSON, or a 500 in a's shape when it could not
 * be built whole: o is NULL, or jansson ran out of memory on this thread
 * since f0 (oai_json_nomem) — a member may be missing. */
void api_reply_json(const api_ops *a, http_exchange *x, int status, json_t *o, unsigned long f0);
/* The request body as a JSON object (oai_load_body); on failure answers it
 * in a's shape (400 with the parser's message, code "invalid_json"; 503 when
 * the parse ran out of memory) and returns NULL. */
json_t *api_body_json(const api_ops *a, http_exchange *x);

/* For an api_ops.field: when a row's internal name (row[i][0]) starts the
 * path *s up to a path boundary ('.', '[' or its end), writes the row's API
 * name (row[i][1]) to out and moves *s past it. Returns the bytes written
 * (0: no row matched). */
size_t api_field_rename(const char *const (*rows)[2], size_t n_rows, const char **s, char *out, size_t cap);

/* e's message with every tagged field path (OAI_F) in a's terms. */
void api_error_text(const api_ops *a, const char *tagged, char *out, size_t cap);
/* The param of e in a's terms (NULL: none). */
const char *api_error_param(const api_ops *a, const oai_error *e);

#endif
