/*
 * routes.c — the OpenAI routes (see routes.h, server.h, docs/server.md).
 *
 * A generation request goes:
 *   body ─json─▶ oai_parse ─▶ gen_start (generate.h: prompt, constraint,
 *   engine) ─▶ gen_poll events (text, reasoning, tool calls) ─▶ JSON
 *   (non-streaming, gen_collect) or SSE chunks (streaming) ─▶ usage.
 *
 * Every failure before submission is a 4xx with the OpenAI error object; after
 * submission the only errors are the engine's (500) or the client going away
 * (the request is cancelled and the status logged as 499). Every request is
 * answered exactly once and logged in one line.
 */
#include "routes.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "../chat/toolcall.h"
#include "../sched/req.h"
#include "apis.h"
#include "generate.h"
#include "oai.h"
#include "stop.h"
#include "webui.h"
#include "../tok/chat.h"

/* ---- small helpers ---- */

static void reply_json(routes_ctx *rc, http_exchange *x, int status, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    if (!s) s = xstrdup("{}");
    http_reply(x, status, "application/json", s, strlen(s), NULL, NULL);
    free(s);
    (void)rc;
}

static void reply_error(http_exchange *x, int status, const char *msg, const char *param, const char *code) {
    char *s = oai_error_json(msg, oai_error_type(status), param, code);
    http_reply(x, status, "application/json", s, strlen(s), status == 429 ? "Retry-After" : NULL,
               status == 429 ? "1" : NULL);
    free(s);
}

/* Parses the body as a JSON object; on failure answers 400 and returns NULL. */
static json_t *body_json(http_exchange *x) {
    size_t n;
    const char *b = http_body(x, &n);
    json_error_t je;
    json_t *o = json_loadb(b, n, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        char msg[400];
        snprintf(msg, sizeof msg, "invalid JSON in the request body at line %d column %d (byte %d): %s", je.line,
                 je.column, je.position, je.text);
        reply_error(x, 400, msg, NULL, "invalid_json");
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        reply_error(x, 400, "the request body must be a JSON object", NULL, "invalid_json");
        return NULL;
    }
    return o;
}

/* ---- OpenAI answers ---- */

/* The OpenAI side of one generation: ids, streaming state. */
typedef struct oai_out {
    routes_ctx *rc;
    gen *g;
    oai_kind kind;
    bool stream, include_usage, sent_role;
    int n_logprobs;
    char id[64];
    tc_events ev;
} oai_out;

static void oai_out_free(oai_out *o) {
    tc_events_free(&o->ev);
    free(o);
}

static json_t *usage_json(const gen *g) {
    int np, nc, cached;
    gen_usage(g, &np, &nc, &cached);
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", np, "completion_tokens", nc, "total_tokens", np + nc,
                     "prompt_tokens_details", "cached_tokens", cached);
}

static json_t *json_text(const http_buf *b) {
    json_t *s = json_stringn(b->p ? b->p : "", b->n);
    return s ? s : json_string("");
}

/* The chat message of a whole answer. */
static json_t *chat_message(const gen_result *res) {
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(msg, "content", res->n_calls && res->content.n == 0 ? json_null() : json_text(&res->content));
    if (res->reasoning.n) json_object_set_new(msg, "reasoning_content", json_text(&res->reasoning));
    if (res->n_calls) {
        json_t *calls = json_array();
        for (int i = 0; i < res->n_calls; i++)
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", res->calls[i].id, "type", "function",
                                                   "function", "name", res->calls[i].name, "arguments",
                                                   json_text(&res->calls[i].args)));
        json_object_set_new(msg, "tool_calls", calls);
    }
    return msg;
}

static void answer_whole(oai_out *o, http_exchange *x) {
    gen *g = o->g;
    json_t *lp = o->n_logprobs >= 0 ? gen_logprobs_new(o->kind) : NULL;
    gen_result res;
    bool ok = gen_collect(g, x, &res, lp);
    int status = 200;
    const char *fr = gen_finish_reason(g);
    if (!ok) {
        status = 499;
        reply_error(x, 499, "client closed the connection", NULL, NULL);
    } else if (!fr) {
        char msg[320];
        snprintf(msg, sizeof msg, "generation failed: %s", gen_error(g, &status));
        reply_error(x, status, msg, NULL, NULL);
    } else {
        json_t *choice;
        if (o->kind == OAI_COMPLETION)
            choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "text", json_text(&res.content), "logprobs",
                               lp ? lp : json_null(), "finish_reason", fr);
        else
            choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", chat_message(&res), "logprobs",
                               lp ? lp : json_null(), "finish_reason", fr);
        lp = NULL;
        json_t *ans = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", o->id, "object",
                                o->kind == OAI_COMPLETION ? "text_completion" : "chat.completion", "created",
                                (json_int_t)gen_created(g), "model", o->rc->model_id, "choices", choice, "usage",
                                usage_json(g));
        reply_json(o->rc, x, 200, ans);
        json_decref(ans);
    }
    if (lp) json_decref(lp);
    gen_result_free(&res);
    gen_done(g, "POST", status, false);
    oai_out_free(o);
}

/* ---- streaming (SSE) ---- */

static void sse_event(http_buf *out, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    if (!s) return;
    http_buf_add(out, "data: ", 6);
    http_buf_add(out, s, strlen(s));
    http_buf_add(out, "\n\n", 2);
    free(s);
}

static json_t *chunk_new(oai_out *o, json_t *choice) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", o->id, "object",
                     o->kind == OAI_COMPLETION ? "text_completion" : "chat.completion.chunk", "created",
                     (json_int_t)gen_created(o->g), "model", o->rc->model_id, "choices", choice);
}

/* One chunk: a completion's text, or a chat delta (taken), with logprobs
 * (taken, may be NULL) and a finish reason (may be NULL). */
static void sse_choice(oai_out *o, http_buf *out, json_t *text_or_delta, json_t *lp, const char *finish) {
    json_t *c = chunk_new(o, json_pack("{s:i, s:o, s:o, s:o}", "index", 0,
                                       o->kind == OAI_COMPLETION ? "text" : "delta", text_or_delta, "logprobs",
                                       lp ? lp : json_null(), "finish_reason", finish ? json_string(finish) : json_null()));
    sse_event(out, c);
    json_decref(c);
}

/* The events as chunks: text (completions), content and reasoning deltas,
 * and OpenAI tool_calls deltas (index, id, type and name first, then
 * argument fragments). Consecutive events of one kind share a chunk; lp
 * (taken) rides on the first. */
static void stream_events(oai_out *o, http_buf *out, json_t *lp) {
    tc_events *ev = &o->ev;
    for (int i = 0; i < ev->n;) {
        tc_event *e = &ev->v[i];
        json_t *payload;
        if (e->kind == TC_EV_CALL_START) {
            payload = json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", e->index, "id", e->id,
                                "type", "function", "function", "name", e->name, "arguments", "");
            i++;
        } else {
            http_buf b = {0};
            int j = i;
            for (; j < ev->n && ev->v[j].kind == e->kind && ev->v[j].index == e->index; j++)
                http_buf_add(&b, ev->v[j].text, ev->v[j].n);
            json_t *str = json_text(&b);
            http_buf_free(&b);
            if (o->kind == OAI_COMPLETION)
                payload = str;
            else if (e->kind == TC_EV_CALL_ARGS)
                payload = json_pack("{s:[{s:i, s:{s:o}}]}", "tool_calls", "index", e->index, "function", "arguments",
                                    str);
            else
                payload = json_pack("{s:o}", e->kind == TC_EV_CONTENT ? "content" : "reasoning_content", str);
            i = j;
        }
        sse_choice(o, out, payload, lp, NULL);
        lp = NULL;
    }
    if (lp) sse_choice(o, out, o->kind == OAI_COMPLETION ? json_string("") : json_object(), lp, NULL);
    tc_events_clear(ev);
}

static int stream_next(void *sctx, http_buf *out) {
    oai_out *o = sctx;
    gen *g = o->g;
    if (o->kind == OAI_CHAT && !o->sent_role) {
        o->sent_role = true;
        sse_choice(o, out, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL);
        return 1;
    }
    json_t *lp = o->n_logprobs >= 0 ? gen_logprobs_new(o->kind) : NULL;
    bool done = gen_poll(g, 20, &o->ev, lp);
    bool has_lp = lp && (o->kind == OAI_COMPLETION ? json_array_size(json_object_get(lp, "tokens"))
                                                   : json_array_size(json_object_get(lp, "content")));
    if (lp && !has_lp) {
        json_decref(lp);
        lp = NULL;
    }
    stream_events(o, out, lp);
    if (!done) return 1;
    const char *fr = gen_finish_reason(g);
    if (!fr) {
        char msg[320];
        snprintf(msg, sizeof msg, "generation failed: %s", gen_error(g, NULL));
        char *s = oai_error_json(msg, "server_error", NULL, NULL);
        http_buf_printf(out, "data: %s\n\n", s);
        free(s);
    } else {
        sse_choice(o, out, o->kind == OAI_COMPLETION ? json_string("") : json_object(), NULL, fr);
        if (o->include_usage) {
            json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", o->id, "object",
                                  o->kind == OAI_COMPLETION ? "text_completion" : "chat.completion.chunk", "created",
                                  (json_int_t)gen_created(g), "model", o->rc->model_id, "choices", "usage",
                                  usage_json(g));
            sse_event(out, u);
            json_decref(u);
        }
    }
    http_buf_add(out, "data: [DONE]\n\n", 14);
    return 0;
}

static void stream_done(void *sctx, bool completed) {
    oai_out *o = sctx;
    if (!completed) gen_cancel(o->g);
    gen_done(o->g, "POST", completed ? 200 : 499, true);
    oai_out_free(o);
}

/* ---- generation routes ---- */

/* Returns true when the request reached the engine (it then counts and logs
 * itself when it ends). */
static bool handle_generate(routes_ctx *rc, http_exchange *x, oai_kind kind) {
    int64_t t0 = clock_ns();
    json_t *body = body_json(x);
    if (!body) return false;
    oai_params p;
    const char *param = NULL;
    err_t e = {0};
    int rc_ = oai_parse(body, kind, tok_n_vocab(rc->tok), &p, &param, &e);
    json_decref(body);
    if (rc_ < 0) {
        reply_error(x, 400, e.msg, param, NULL);
        return false;
    }
    gen_fail f;
    gen *g = gen_start(rc, &p, kind == OAI_COMPLETION ? "/v1/completions" : "/v1/chat/completions", t0, &f);
    if (!g) {
        reply_error(x, f.status, f.e.msg, f.param, f.code);
        oai_params_free(&p);
        return false;
    }
    oai_out *o = xcalloc(1, sizeof *o);
    o->rc = rc;
    o->g = g;
    o->kind = kind;
    o->stream = p.stream;
    o->include_usage = p.include_usage;
    o->n_logprobs = p.n_logprobs;
    snprintf(o->id, sizeof o->id, "%s-%llx%06llx", kind == OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)rc->created, gen_serial(g));
    oai_params_free(&p);
    if (o->stream)
        http_reply_stream(x, 200, "text/event-stream", stream_next, stream_done, o);
    else
        answer_whole(o, x);
    return true;
}

/* ---- other routes ---- */

/* GET /v1/models (id NULL) or /v1/models/{id}. */
static void handle_models(routes_ctx *rc, http_exchange *x, const char *id) {
    if (id && strcmp(id, rc->model_id) != 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist; this server serves '%.256s'", id, rc->model_id);
        reply_error(x, 404, msg, "model", "model_not_found");
        return;
    }
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:{s:i, s:i, s:I}}", "id", rc->model_id, "object", "model", "created",
                          (json_int_t)rc->created, "owned_by", "kvloom", "meta", "n_vocab", rc->m->cfg.n_vocab, "n_ctx",
                          engine_n_ctx(rc->en), "weight_bytes", (json_int_t)rc->m->weight_bytes);
    json_t *o = id ? m : json_pack("{s:s, s:[o]}", "object", "list", "data", m);
    reply_json(rc, x, 200, o);
    json_decref(o);
}

static void handle_metrics(routes_ctx *rc, http_exchange *x) {
    engine_stats st;
    engine_get_stats(rc->en, &st);
    http_buf b = {0};
    metrics_render(rc->met, &st, &b);
    http_reply(x, 200, "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "", b.n, NULL, NULL);
    http_buf_free(&b);
}

static void handle_tokenize(routes_ctx *rc, http_exchange *x) {
    json_t *body = body_json(x);
    if (!body) return;
    json_t *c = json_object_get(body, "content");
    const char *param = "content";
    if (!c) c = json_object_get(body, "prompt"), param = "prompt";
    json_t *as = json_object_get(body, "add_special");
    json_t *wp = json_object_get(body, "with_pieces");
    if (!json_is_string(c)) {
        reply_error(x, 400, "'content' must be a string", param, NULL);
    } else if (as && !json_is_boolean(as)) {
        reply_error(x, 400, "'add_special' must be a boolean", "add_special", NULL);
    } else if (wp && !json_is_boolean(wp)) {
        reply_error(x, 400, "'with_pieces' must be a boolean", "with_pieces", NULL);
    } else {
        bool add = as ? json_is_true(as) : true;
        err_t e = {0};
        int n = 0;
        int32_t *ids = gen_encode(rc->tok, json_string_value(c), json_string_length(c), add && tok_add_bos(rc->tok), &n, &e);
        if (!ids) {
            reply_error(x, 400, e.msg, param, NULL);
        } else {
            json_t *arr = json_array();
            for (int i = 0; i < n; i++) {
                if (wp && json_is_true(wp))
                    json_array_append_new(arr, json_pack("{s:i, s:o}", "id", ids[i], "piece",
                                                         gen_piece_json(rc->tok, ids[i], NULL)));
                else
                    json_array_append_new(arr, json_integer(ids[i]));
            }
            json_t *o = json_pack("{s:o}", "tokens", arr);
            reply_json(rc, x, 200, o);
            json_decref(o);
            free(ids);
        }
    }
    json_decref(body);
}

static void handle_detokenize(routes_ctx *rc, http_exchange *x) {
    json_t *body = body_json(x);
    if (!body) return;
    json_t *t = json_object_get(body, "tokens");
    int nv = tok_n_vocab(rc->tok);
    if (!json_is_array(t)) {
        reply_error(x, 400, "'tokens' must be an array of token ids", "tokens", NULL);
        json_decref(body);
        return;
    }
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; ids && i < n; i++) {
        json_t *v = json_array_get(t, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv) {
            char msg[120];
            snprintf(msg, sizeof msg, "'tokens[%zu]' must be a token id in [0, %d)", i, nv);
            reply_error(x, 400, msg, "tokens", NULL);
            free(ids);
            json_decref(body);
            return;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    if (!ids) {
        reply_error(x, 500, "out of memory", NULL, NULL);
        json_decref(body);
        return;
    }
    int need = tok_decode(rc->tok, ids, (int)n, true, NULL, 0);
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (text) tok_decode(rc->tok, ids, (int)n, true, text, need + 1);
    if (!text) {
        reply_error(x, 400, "the tokens cannot be decoded", "tokens", NULL);
    } else {
        json_t *s = json_stringn(text, (size_t)need);
        json_t *o = json_pack("{s:o}", "content", s ? s : json_string(""));
        reply_json(rc, x, 200, o);
        json_decref(o);
    }
    free(text);
    free(ids);
    json_decref(body);
}

/* ---- dispatch ---- */

/* Constant-time comparison of the key: "Authorization: Bearer KEY", or
 * Anthropic clients' "x-api-key: KEY". */
static bool key_ok(const char *want, const char *auth, const char *x_api_key) {
    const char *got = x_api_key;
    if (!got) {
        if (!auth || strncasecmp(auth, "Bearer ", 7) != 0) return false;
        got = auth + 7;
    }
    while (*got == ' ') got++;
    size_t a = strlen(want), b = strlen(got);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < b ? got[i] : 0);
    return diff == 0;
}

typedef struct route {
    const char *path;
    const char *method;
    int id;
} route;

enum {
    R_COMPL, R_CHAT, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_TOKENIZE, R_DETOKENIZE,
    R_ANTHROPIC, R_ANTHROPIC_COUNT, R_RESPONSES, R_RESPONSE_ITEM, R_OLLAMA
};

static const route routes[] = {
    {"/v1/completions", "POST", R_COMPL},     {"/completions", "POST", R_COMPL},
    {"/v1/chat/completions", "POST", R_CHAT}, {"/chat/completions", "POST", R_CHAT},
    {"/v1/models", "GET", R_MODELS},          {"/models", "GET", R_MODELS},
    {"/health", "GET", R_HEALTH},             {"/metrics", "GET", R_METRICS},
    {"/tokenize", "POST", R_TOKENIZE},        {"/detokenize", "POST", R_DETOKENIZE},
    {"/v1/messages", "POST", R_ANTHROPIC},    {"/v1/responses", "POST", R_RESPONSES},
    {"/v1/messages/count_tokens", "POST", R_ANTHROPIC_COUNT},
    {"/api/chat", "POST", R_OLLAMA},          {"/api/generate", "POST", R_OLLAMA},
    {"/api/tags", "GET", R_OLLAMA},           {"/api/show", "POST", R_OLLAMA},
    {"/api/version", "GET", R_OLLAMA},
};

void routes_handle(void *ctx, http_exchange *x) {
    routes_ctx *rc = ctx;
    int64_t t0 = clock_ns();
    const char *method = http_method(x), *path = http_path(x);
    const route *rt = NULL;
    bool path_known = false;
    for (size_t i = 0; i < ARRAY_LEN(routes); i++) {
        if (strcmp(routes[i].path, path) != 0) continue;
        path_known = true;
        if (strcmp(routes[i].method, method) == 0 || (strcmp(method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0))
            rt = &routes[i];
    }
    /* GET /v1/models/{id} */
    if (!rt && !strncmp(path, "/v1/models/", 11) && (!strcmp(method, "GET") || !strcmp(method, "HEAD"))) {
        static const route model_route = {"/v1/models/", "GET", R_MODEL};
        rt = &model_route;
    }
    /* GET|DELETE /v1/responses/{id} */
    if (!rt && !strncmp(path, "/v1/responses/", 14) && (!strcmp(method, "GET") || !strcmp(method, "DELETE"))) {
        static const route item_route = {"/v1/responses/", "GET", R_RESPONSE_ITEM};
        rt = &item_route;
    }
    /* Anthropic's clients read errors on its paths in its shape */
    bool anthropic = !strcmp(path, "/v1/messages") || !strncmp(path, "/v1/messages/", 13);
    bool generation = false;
    if (!rt && webui_serve(x)) {
        /* the chat page and its assets: public, no API key (webui.h) */
    } else if (rc->o->api_key && rc->o->api_key[0] && !(rt && rt->id == R_HEALTH) &&
        !key_ok(rc->o->api_key, http_header(x, "Authorization"), http_header(x, "x-api-key"))) {
        const char *msg = http_header(x, "Authorization") || http_header(x, "x-api-key")
                              ? "invalid API key"
                              : "missing API key (Authorization: Bearer KEY, or x-api-key: KEY)";
        if (anthropic) api_anthropic_error(x, 401, msg);
        else reply_error(x, 401, msg, NULL, "invalid_api_key");
    } else if (!rt) {
        char msg[300];
        snprintf(msg, sizeof msg, path_known ? "method %s is not allowed on %s" : "no route %s %s", method, path);
        if (!path_known) snprintf(msg, sizeof msg, "no route for %s %.200s", method, path);
        if (anthropic) api_anthropic_error(x, path_known ? 405 : 404, msg);
        else reply_error(x, path_known ? 405 : 404, msg, NULL, NULL);
    } else {
        switch (rt->id) {
        case R_COMPL: generation = handle_generate(rc, x, OAI_COMPLETION); break;
        case R_CHAT: generation = handle_generate(rc, x, OAI_CHAT); break;
        case R_MODELS: handle_models(rc, x, NULL); break;
        case R_MODEL: handle_models(rc, x, path + 11); break;
        case R_HEALTH: http_reply(x, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL, NULL); break;
        case R_METRICS: handle_metrics(rc, x); break;
        case R_TOKENIZE: handle_tokenize(rc, x); break;
        case R_DETOKENIZE: handle_detokenize(rc, x); break;
        case R_ANTHROPIC: generation = api_anthropic_messages(rc, x); break;
        case R_ANTHROPIC_COUNT: api_anthropic_count_tokens(rc, x); break;
        case R_RESPONSES: generation = api_responses_create(rc, x); break;
        case R_RESPONSE_ITEM: api_responses_item(rc, x, path + 14); break;
        case R_OLLAMA: generation = api_ollama(rc, x, path); break;
        }
    }
    /* Generation requests that reached the engine count and log themselves
     * when they end (a stream ends after this handler returns). */
    if (generation) return;
    metrics_count(rc->met, http_status(x));
    log_info("%s %.200s %d %.1fms", method, path, http_status(x), (double)(clock_ns() - t0) / 1e6);
}
