/*
 * routes.h — the routes on top of http.h: the precheck (Host, API key,
 * cross-site forms), dispatch, and the routes of no single API (/tokenize,
 * /detokenize, /v1/models, /props, /metrics, /load, models load/unload).
 * The generation routes of every API go through api_serve (api.h).
 *
 * Place in the flow: server/, the precheck on http.c's I/O thread, the
 * handlers on its handler threads; a streamed answer is produced in steps
 * on handler threads (http_reply_stream) into a buffer the I/O thread
 * sends from: no request holds a thread of its own while it streams.
 */
#ifndef KVLOOM_ROUTES_H
#define KVLOOM_ROUTES_H

#include <stdatomic.h>

#include "../model/model.h"
#include "../chat/toolcall.h"
#include "../sched/engine.h"
#include "../tok/tok.h"
#include "http.h"
#include "metrics.h"
#include "constrain.h"

typedef struct routes_ctx {
    const struct server_opts *o; /* server.h */
    const model *m;
    const char *model_path;  /* its file (/props, /api/show)                    */
    const tokenizer *tok;
    void *chat;              /* chat template (chat/chat.h) or NULL             */
    tc_format tool_format;   /* the template's tool-call syntax                */
    bool reasoning;          /* the template writes <think>...</think>         */
    bool template_calls;     /* the template writes assistant tool_calls       */
    bool one_call;           /* the template takes one call per message
                                (chat_tmpl_one_call): answers hold one call   */
    constrainer *cons;       /* request fields -> grammars, with a cache       */
    struct resp_store *responses; /* stored Responses-API answers (apis.h)      */
    engine *en;              /* generation and decoder embeddings; NULL for an
                                encoder model (bert), which has enc instead   */
    struct encoder *enc;     /* sched/encoder.h, or NULL                       */
    metrics *met;
    char model_id[256];
    long long created;       /* unix time the server started                   */
    atomic_ullong next_id;   /* request ids and default seeds                  */
    atomic_int n_pending;    /* (the root's) generation requests inside their
                                handler: read, templated, tokenized, not yet
                                handed to an engine, which does not count
                                them yet; /load adds them to "waiting"       */
    struct models *models;   /* every served model (models.h)                  */
    struct models_entry *entry; /* this model's entry when several are served:
                                a request holds a reference (models_release) */
    int max_piece_bytes;     /* the longest token's bytes: a prompt text of more
                                than n_ctx times this cannot fit, and is refused
                                before it is tokenized (0: no such check)      */
} routes_ctx;

/* /detokenize takes at most max(the context, this) ids. */
#define ROUTES_MAX_DETOKENIZE 65536

/* The API key a request authenticated with: its index in o->api_keys,
 * ROUTES_NO_KEYS when the server has none (every client is one identity
 * then), ROUTES_BAD_KEY when neither Authorization: Bearer nor x-api-key
 * carries one of them. Compares every key in constant time. Any thread. */
#define ROUTES_NO_KEYS (-1)
#define ROUTES_BAD_KEY (-2)
int routes_key_index(const routes_ctx *rc, http_exchange *x);

/* The client a request counts for in the engine's fair admission
 * (req.client; never 0): its API key when the server has keys (a key
 * holder cannot split into several clients by naming users), else the
 * body's `user` (NULL or "": none), else the peer address as the
 * per-address cap counts it (every loopback address one). */
uint64_t routes_client_id(const routes_ctx *rc, http_exchange *x, const char *user);
/* A request's priority class (req.priority): the body's `priority`
 * raised to its API key's class (--api-key-file's `batch` /
 * `priority=N`), so a batch key's requests are batch whatever they ask,
 * and any key may still ask for a larger (less urgent) class. Without
 * keys, or for a key without a class, the body's. */
int routes_priority(const routes_ctx *rc, http_exchange *x, int requested);
/* The prefix cache's partition of a request (req.cache_salt): with API
 * keys each key has its own, mixed with the body's `cache_salt` when it
 * has one; without keys, `cache_salt`'s alone (0: none, the partition
 * every request without a salt shares). */
uint64_t routes_cache_salt(const routes_ctx *rc, http_exchange *x, const char *cache_salt);

/* A route: method, path, its handler, its API (the shape of its errors,
 * the HTTP layer's too: routes_error_body) and flags (routes.c's RF_*).
 * One table in routes.c holds every route of every API. */
typedef struct route route;
/* Answers the request: rc is the model that serves it, root the server's
 * own context. A generation route has none: api_serve (api.h) with its
 * ops answers it. */
typedef void route_fn(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x);
struct api_ops;
struct route {
    const char *method, *path;
    route_fn *handler;
    const struct api_ops *ops;
    unsigned flags;
};

/* The http_handler_fn of the server: ctx is a routes_ctx. */
void routes_handle(void *ctx, http_exchange *x);

/* The http_precheck_fn (http.h): refuses from the headers alone, in the
 * route's error shape, counted and logged: 403 a Host that is not this
 * server's (DNS rebinding; on a loopback address without an API key, or
 * with --allowed-hosts), 401 a missing or wrong API key (all but GET
 * /health, /load and the chat page; the only check of the key: every
 * request but OPTIONS passes here first), 415 a POST
 * from a browser (an Origin header) to a server without an API key whose
 * Content-Type a cross-site form can send (urlencoded, multipart,
 * text/plain). */
bool routes_precheck(void *ctx, http_exchange *x);

/* The chat template in use, as text (malloc'd): --chat-template-file's,
 * else the model's, or the ChatML fallback's Jinja when the server renders
 * with that (/api/show, /props). */
char *routes_template_source(const routes_ctx *rc);

/* The http_error_fn (http.h): errors of the HTTP layer (413, 408, 503, the
 * framing 400s) in the error shape of the path's route's API (its row's
 * api_ops; a path of no route: api_of_path, api.h):
 * Anthropic's under /v1/messages, Ollama's {"error": msg} under /api, the
 * OpenAI object elsewhere (Responses too). */
size_t routes_error_body(const char *path, int status, const char *code, const char *msg, char *out, size_t cap);

#endif
