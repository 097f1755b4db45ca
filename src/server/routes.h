/*
 * routes.h — the OpenAI routes on top of http.h: auth, dispatch, request
 * validation (oai.h), tokenization, submission to the engine, and the JSON or
 * SSE answers built from the tokens the engine posts.
 *
 * Place in the flow: server/, on HTTP connection threads. Each generation
 * request is read back on its own connection thread: detokenized
 * (tok_stream), checked for stop strings (stop.h), formatted.
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
#include "server.h"

typedef struct routes_ctx {
    const server_opts *o;
    const model *m;
    const tokenizer *tok;
    void *chat;              /* chat template (tok/chat.h) or NULL             */
    tc_format tool_format;   /* the template's tool-call syntax                */
    bool reasoning;          /* the template writes <think>...</think>         */
    bool template_calls;     /* the template writes assistant tool_calls       */
    constrainer *cons;       /* request fields -> grammars, with a cache       */
    struct resp_store *responses; /* stored Responses-API answers (apis.h)      */
    engine *en;
    metrics *met;
    char model_id[256];
    long long created;       /* unix time the server started                   */
    atomic_ullong next_id;   /* request ids and default seeds                  */
} routes_ctx;

/* The http_handler_fn of the server: ctx is a routes_ctx. */
void routes_handle(void *ctx, http_exchange *x);

#endif
