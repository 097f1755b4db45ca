/*
 * apis.h — the other HTTP APIs the server speaks on the same engine, each in
 * its own file, each translating its request into oai_params and defining
 * the callbacks of its answer (its api_ops row, api.h: the generation
 * routes run through api_serve):
 *
 *   POST /v1/messages            Anthropic Messages        (api_anthropic.c)
 *   POST /v1/messages/count_tokens
 *   POST /v1/responses           OpenAI Responses          (api_responses.c)
 *   GET|DELETE /v1/responses/ID  a stored response
 *   /api/chat, /api/generate, /api/tags, /api/show, /api/version
 *                                Ollama                    (api_ollama.c)
 *
 * Place in the flow: server/, on HTTP threads, dispatched by routes.c after
 * the API key check. Each handler answers exactly once, in its API's own
 * error shape, and returns true when the request reached the engine (it then
 * counts and logs itself through gen_done when it ends).
 *
 * Naming (decided in issue 13): this is part of the server's internal
 * contract, like every header of src/server/ but server.h — http.h,
 * generate.h, oai.h, api.h, metrics.h, ... — each of which declares
 * the functions of one file named after that file (api_anthropic_*,
 * api_responses_*, api_ollama_*; resp_store_* is api_responses.c's store).
 * The module__ prefix (tok__, jinja__, grammar__, kern__, sched__, cli__) is
 * for what a module's internal header (*_internal.h, cli.h) shares among its
 * files beside their per-file contracts; the server splits its internals
 * into per-file headers instead (as kv/ does with kvpool.h and radix.h), so
 * its names keep one underscore. Only routes.c (and server.c for the store)
 * calls these; the tests call the two *_params translators directly.
 */
#ifndef KVLOOM_APIS_H
#define KVLOOM_APIS_H

#include <stdbool.h>

#include <jansson.h>

#include "http.h"
#include "oai.h"
#include "routes.h"

/* The Anthropic Messages body (only read) as the chat request it becomes:
 * translated, checked by oai_parse, continue_final set for a prefill;
 * count_only: the count_tokens form (max_tokens not required). Returns 0
 * (free *p with oai_params_free), or -1 with *err filled (its message's
 * field paths tagged: api_error_text with api_anthropic names them as
 * Anthropic does). */
int api_anthropic_params(routes_ctx *rc, json_t *body, bool count_only, oai_params *p, oai_error *err);
/* POST /v1/messages/count_tokens. */
void api_anthropic_count_tokens(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x);

/* Responses kept for previous_response_id (bounded in count and time). */
typedef struct resp_store resp_store;
/* The store of the Responses API; at most max_bytes of entries (0:
 * RESP_STORE_DEFAULT_BYTES). */
#define RESP_STORE_DEFAULT_BYTES ((size_t)256 << 20)
resp_store *resp_store_new(size_t max_bytes);
void resp_store_free(resp_store *s); /* NULL is a no-op */
/* Entries and their bytes now (/metrics). Any thread. */
void resp_store_stats(resp_store *s, int *n, size_t *bytes);
/* The Responses body (only read) as the chat request it becomes (with the
 * stored conversation of previous_response_id): 0 (free *p with
 * oai_params_free), or -1 with *err filled, as POST /v1/responses answers
 * it through api_responses (api.h). */
int api_responses_params(routes_ctx *rc, json_t *body, oai_params *p, oai_error *err);
/* GET or DELETE /v1/responses/{id} (the id after rt->path). */
void api_responses_item(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x);

/* An Ollama /api/chat (chat) or /api/generate body (only read) as the
 * request it becomes: 1 (free *p with oai_params_free; *kind the OpenAI
 * kind, *stream Ollama's default true unless false), 0 for a load-only
 * request (no messages, or an empty prompt; *stream set), or -1 with *err
 * filled (400, 503 out of memory), answered through api_ollama_api (api.h),
 * which names the field as Ollama does. */
int api_ollama_params(routes_ctx *rc, json_t *body, bool chat, oai_params *p, oai_kind *kind, bool *stream,
                      oai_error *err);
/* Ollama's routes of no generation (routes.c's rows; /api/chat and
 * /api/generate are api_serve's with api_ollama_api, /api/embed and
 * /api/embeddings embed.h's): GET /api/tags (one model: several are
 * routes.c's listing), POST /api/show, GET /api/version, and the model
 * management routes (pull, push, create, copy, delete), refused with 501. */
void api_ollama_tags(routes_ctx *rc, http_exchange *x);
void api_ollama_show(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x);
void api_ollama_version(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x);
void api_ollama_unsupported(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x);

#endif
