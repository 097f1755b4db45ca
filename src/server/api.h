/*
 * api.h — what every HTTP API the server speaks (OpenAI, Anthropic,
 * Responses, Ollama) has in common, in one place: one answer path
 * (api_serve: body, parse, gen_start, the answer whole or streamed, through
 * the API's callbacks), its error shape, its names for the request fields
 * the core validates, and the replies every handler writes (errors, whole
 * JSON answers, the request body as JSON with the out-of-memory checkpoint).
 *
 *   body ─api_body_json─▶ ops.parse ─▶ gen_start ─▶ ops.start ─▶
 *   [stream: ops.begin] ─▶ poll (ops.poll | gen_poll) ─▶ segments:
 *   ops.open / ops.delta / ops.close ... ─▶ ops.finish (or ops.fail) ─▶
 *   gen_done
 *
 * Place in the flow: server/, between routes.c (which finds a request's API
 * by its path and calls api_serve for the generation routes) and the API
 * files (oai_answer.c for OpenAI's chat and completions, api_anthropic.c,
 * api_responses.c, api_ollama.c), each of which defines its api_ops row: a
 * callback set of about 150 lines for an API's answer. The HTTP layer's own
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

#include "generate.h"
#include "http.h"
#include "oai.h"

/* ---- the answer: segments ----
 *
 * api_serve turns a generation's events (generate.h) into segments, at
 * most one open at a time: REASONING text, TEXT, and a tool CALL (opened by
 * its CALL_START, filled by its arguments). Text of another kind, or a new
 * call, closes the open segment; consecutive fragments of one kind reach
 * the API as one delta. A segment closes complete, except a call that text
 * follows (it broke: toolcall.h, its raw text comes as content), a call
 * the end cut (its index >= gen_n_calls) and text the end cut (gen_cut).
 * An API that answers with no segment (api_ops.empty) gets an empty TEXT
 * segment at the end: clients look for the text there. */
typedef enum api_seg_kind { API_SEG_REASONING, API_SEG_TEXT, API_SEG_CALL } api_seg_kind;

typedef struct api_seg {
    api_seg_kind kind;
    sbuf text;        /* the reasoning, the text, or the call's arguments */
    char *call_id, *name; /* a call's id and name from the parser (owned)     */
    int call_index;       /* a call's tc_event index                          */
    bool complete;        /* once closed (see above)                          */
    char id[64];          /* the API's id of the segment (its open fills it)  */
} api_seg;

typedef struct api_ops api_ops;

/* One answer in progress (api_serve's; the callbacks read and write it):
 * one generation, the answer's only choice or one of several (OpenAI's n,
 * best_of and prompt arrays: a->choices). */
typedef struct api_answer {
    const api_ops *api;
    routes_ctx *rc;
    gen *g;
    void *ctx;             /* the API's own state (its parse or start sets it) */
    int64_t t0_ns;         /* when the request arrived (clock_ns)             */
    const char *path;      /* the route's canonical path (api_serve's)        */
    bool stream;
    api_seg *segs;
    int n_segs;
    int open;              /* the segment receiving deltas, or -1             */
    sbuf *out;         /* a stream's output while the callbacks run; NULL
                              otherwise (api_emit then writes nothing)        */
    tc_events ev;
    bool started, failed;  /* failed: a stream cut short (out of memory)      */
    int index;             /* its choice's index, in request order            */
    int forks;             /* parse: generations per parameter set (0: one)   */
    bool done;             /* its generation finished                         */
    struct api_answer **choices; /* every choice, choices[0] first (the answer
                              api_serve drives); n_choices of them            */
    int n_choices;
} api_answer;

/* What an answer does when no segment answered (api_ops.empty). */
enum {
    API_EMPTY_NONE = 0,    /* nothing                                          */
    API_EMPTY_IF_NONE,     /* an empty TEXT segment when there is no segment   */
    API_EMPTY_IF_UNANSWERED, /* ... when there is no TEXT and no complete CALL */
};

/* How a stream frames its events (api_emit). */
enum {
    API_SSE = 0,  /* "event: TYPE\ndata: JSON\n\n" ("data: JSON\n\n" without a type) */
    API_NDJSON,   /* "JSON\n"                                                       */
};

struct api_ops {
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

    /* ---- generation (api_serve; NULL where the API has no such route) ----
     * parse: the body (only read) as oai_params: how many parameter sets
     * it filled in p[0 .. OAI_MAX_PROMPTS - 1] (one but for OpenAI's
     * prompt arrays), each started a->forks times (OpenAI's n and best_of;
     * forks differ by seed: seed + j), a choice each, in order (a->ctx may
     * hold the API's state for the answer); 0 when the API answered itself
     * (Ollama's load-only request); -1 with *err filled (refused). */
    int (*parse)(api_answer *a, http_exchange *x, json_t *body, oai_params *p, oai_error *err);
    /* Once a choice's generation started (a->g set; p its parameters, still
     * readable). Optional. */
    void (*start)(api_answer *a, const oai_params *p);
    /* Polls the generation into a->ev (gen_poll; an API that reads logprobs
     * adds them). Optional: gen_poll without. */
    bool (*poll)(api_answer *a, int timeout_ms);
    /* A stream's first events, before the first poll; true when it wrote
     * any (the first poll comes in the next call). Optional. */
    bool (*begin)(api_answer *a);
    /* Segment i opened (a->open is i), grew by text (already appended to
     * its text), closed (its complete set, a->open -1). */
    void (*open)(api_answer *a, int i);
    void (*delta)(api_answer *a, int i, const char *text, size_t n);
    void (*close)(api_answer *a, int i);
    /* After a poll's events of an unfinished generation. Optional. */
    void (*polled)(api_answer *a);
    /* A stream's choice finished (its segments closed): its last events,
     * before finish. Optional. */
    void (*end)(api_answer *a);
    /* Every generation finished (the segments closed), called on choices[0]:
     * a stream's last events (returns NULL), or the whole answer's body (a
     * new reference). */
    json_t *(*finish)(api_answer *a);
    /* A choice's generation failed: a stream's error events, its last (msg:
     * "generation failed: ...", status its HTTP status). */
    void (*fail)(api_answer *a, const char *msg, int status);
    /* Frees a->ctx (NULL: free()). */
    void (*free_ctx)(void *ctx);
    int empty;                 /* API_EMPTY_*                                  */
    int framing;               /* API_SSE, API_NDJSON                          */
    const char *stream_type;   /* a stream's Content-Type                      */
    /* A stream's last event when building one ran out of memory (static:
     * its message API_NOMEM_MSG). */
    const char *stream_nomem;
};
#define API_NOMEM_MSG "generation failed: out of memory building the answer"

/* The rows (defined by the API's own file). */
extern const api_ops api_openai;    /* oai_answer.c: /v1/completions, /v1/chat/completions...    */
extern const api_ops api_anthropic; /* api_anthropic.c: /v1/messages...                         */
extern const api_ops api_responses; /* api_responses.c: /v1/responses...                        */
extern const api_ops api_ollama_api;/* api_ollama.c: /api and /api/...                          */
/* OpenAI's error object for an HTTP status (api_openai's error_json, which
 * the Responses API shares). */
char *api_openai_error_json(int status, const char *msg, const char *param, const char *code);

/* The API a request path belongs to (its error shape): OpenAI unless the
 * path is one of the other APIs'. */
const api_ops *api_of_path(const char *path);

/* Answers x with an error in a's shape (429: Retry-After: 1); msg becomes
 * the log line's reason. */
void api_reply_error(const api_ops *a, http_exchange *x, int status, const char *msg, const char *param,
                     const char *code);
/* Out of memory: every reply below checks oai_json_failed (oai.h), jansson
 * failing on this thread since the request's mark (routes_handle's).
 *
 * Answers oai_parse's or gen_start's refusal: its message and field in a's
 * terms; 503 when it ran out of memory (e->e.code ERR_NOMEM, or jansson
 * failed). */
void api_reply_refusal(const api_ops *a, http_exchange *x, const oai_error *e);
/* Answers o as JSON (200), or a 500 in a's shape when it could not be built
 * whole: o is NULL, or jansson failed (a member may be missing). */
void api_reply_json(const api_ops *a, http_exchange *x, json_t *o);
/* The request body as a JSON object (oai_load_body; the first JSON a
 * handler reads); on failure answers it in a's shape (400 with the parser's
 * message, code "invalid_json"; 503 when the parse ran out of memory) and
 * returns NULL. */
json_t *api_body_json(const api_ops *a, http_exchange *x);

/* After an API's translation (r: how many parameter sets it filled in p,
 * 0 when it answered itself, -1 when it refused with *err): r, or -1 when
 * it refused (answered: api_reply_refusal) or ran out of memory (a 503;
 * p freed). */
int api_parsed(const api_ops *a, http_exchange *x, int r, oai_params *p, const oai_error *err);

/* For an api_ops.field: when a row's internal name (row[i][0]) starts the
 * path *s up to a path boundary ('.', '[' or its end), writes the row's API
 * name (row[i][1]) to out and moves *s past it. Returns the bytes written
 * (0: no row matched). */
size_t api_field_rename(const char *const (*rows)[2], size_t n_rows, const char **s, char *out, size_t cap);

/* Serves a generation route of api: the body (api_body_json), api->parse,
 * gen_start for every choice (path names the route in the log line; all
 * started at once, so the engine batches them and the forks of a prompt
 * share its KV through the radix tree: docs/server.md), then the answer
 * streamed (http_reply_stream, api->framing; several choices' events
 * interleave as they come) or whole, through the callbacks; every refusal
 * and failure in the API's shape (one failed choice fails the answer, the
 * others cancelled), out of memory checked at each step (503 before the
 * answer, 500 or the stream's stream_nomem event after), a client that
 * leaves cancels, gen_done counts and logs each generation. Returns true
 * when the request reached the engine. */
bool api_serve(const api_ops *api, routes_ctx *rc, http_exchange *x, const char *path);

/* One event of a stream in api->framing (data taken; type NULL: an SSE
 * event without a type line); nothing when a->out is NULL (a whole answer). */
void api_emit(api_answer *a, const char *type, json_t *data);
/* api_emit's framing of one event, appended to out (data taken; nothing
 * when it cannot be written: out of memory, counted), for an answer written
 * outside api_serve. */
void api_frame(sbuf *out, int framing, const char *type, json_t *data);
/* Closes the open segment, if any, with `complete`. */
void api_seg_close(api_answer *a, bool complete);

/* An API's translation (its body -> the OpenAI body oai_parse checks)
 * refusing a request with a message that does not start with one field's
 * path (those: jfield.h): a 400 in *err naming param (in the API's own
 * terms, static; NULL: none) with the formatted message. Returns
 * ERR_INVALID, for `return api_bad(err, ...)`. */
int api_bad(oai_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* e's message with every tagged field path (OAI_F) in a's terms. */
void api_error_text(const api_ops *a, const char *tagged, char *out, size_t cap);
/* The param of e in a's terms (NULL: none). */
const char *api_error_param(const api_ops *a, const oai_error *e);

#endif
