/*
 * routes.c — the OpenAI routes (see routes.h, server.h, docs/server.md).
 *
 * A generation request goes:
 *   body ─json─▶ oai_parse ─▶ prompt tokens (tok_encode, or the chat template
 *   then tok_encode) ─▶ req ─engine_submit─▶ ... tokens ... ─▶ gen_pump:
 *   tok_stream (UTF-8 assembly) ─▶ stop_feed (hold back a possible stop
 *   string) ─▶ JSON (non-streaming) or SSE chunks (streaming) ─▶ usage.
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
#include "oai.h"
#include "stop.h"
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

/* Encodes text; returns a malloc'd array and its length, or NULL (ERR set). */
static int32_t *encode(const tokenizer *t, const char *text, size_t len, bool add_bos, int *n_out, err_t *e) {
    int cap = (int)MIN(len + 8, (size_t)1 << 20);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return err_set(e, ERR_NOMEM, "out of memory"), NULL;
    int n = tok_encode(t, text, len, add_bos, true, ids, cap);
    if (n > cap) {
        int32_t *ids2 = realloc(ids, (size_t)n * sizeof *ids);
        if (!ids2) {
            free(ids);
            return err_set(e, ERR_NOMEM, "out of memory"), NULL;
        }
        ids = ids2;
        n = tok_encode(t, text, len, add_bos, true, ids, n);
    }
    if (n < 0) {
        free(ids);
        err_set(e, ERR_INVALID, "the text cannot be tokenized (too long?)");
        return NULL;
    }
    *n_out = n;
    return ids;
}

/* A token's text as a JSON string (invalid UTF-8 bytes become U+FFFD) and
 * its raw bytes as an array of integers (bytes may be NULL). */
static json_t *piece_json(const tokenizer *t, int32_t id, json_t **bytes) {
    char buf[256];
    int n = tok_piece(t, id, buf, (int)sizeof buf);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    if (bytes) {
        *bytes = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
    }
    json_t *s = json_stringn(buf, (size_t)n);
    if (s) return s;
    /* Not valid UTF-8 (a byte token): replace what does not decode. */
    char out[256 * 3 + 1];
    size_t k = 0;
    for (int i = 0; i < n;) {
        unsigned char c = (unsigned char)buf[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len && i + len <= n) {
            json_t *probe = json_stringn(buf + i, (size_t)len);
            if (probe) {
                json_decref(probe);
                memcpy(out + k, buf + i, (size_t)len);
                k += (size_t)len;
                i += len;
                continue;
            }
        }
        memcpy(out + k, "\xEF\xBF\xBD", 3);
        k += 3;
        i++;
    }
    return json_stringn(out, k);
}

/* A log-probability as JSON: -inf (a token the grammar refused) as -9999,
 * the value OpenAI uses for "impossible". */
static json_t *lp_json(float x) { return json_real(isfinite(x) ? (double)x : -9999.0); }

static const char *finish_name(req_finish f) {
    switch (f) {
    case REQ_FINISH_STOP: return "stop";
    case REQ_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

/* ---- reading a request's output ---- */

typedef struct gen {
    routes_ctx *rc;
    req *r;
    oai_kind kind;
    bool stream, include_usage;
    int n_logprobs;
    char id[64];
    long long created;
    int64_t t0_ns;
    tok_stream ts;
    char *piece;          /* tok_stream output scratch                      */
    int piece_cap;
    stop_matcher *sm;
    int n_seen;           /* tokens consumed from the req                   */
    int n_completion;     /* tokens reported in usage                       */
    size_t text_offset;   /* bytes of detokenized text so far (logprobs)     */
    bool stop_hit;        /* a stop string ended the text                   */
    bool finished;        /* nothing more will come                         */
    req_finish finish;
    char error[256];
    bool sent_role;
    bool client_gone;
    const char *path;
    /* chat with tools or reasoning: the text goes through a tool-call parser */
    tc_parser *tp;
    tc_events ev;
    int n_calls;          /* complete calls parsed (finish "tool_calls")     */
} gen;

static gen *gen_new(routes_ctx *rc, req *r, const oai_params *p, const char *path, int64_t t0_ns) {
    gen *g = xcalloc(1, sizeof *g);
    g->rc = rc;
    g->r = r;
    g->kind = p->kind;
    g->stream = p->stream;
    g->include_usage = p->include_usage;
    g->n_logprobs = p->n_logprobs;
    unsigned long long id = atomic_fetch_add(&rc->next_id, 1);
    snprintf(g->id, sizeof g->id, "%s-%llx%06llx", p->kind == OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)rc->created, id);
    g->created = (long long)time(NULL);
    g->t0_ns = t0_ns;
    tok_stream_init(&g->ts, rc->tok, true);
    /* A prompt that ends with BOS (an empty text prompt) starts a fresh text:
     * the SentencePiece leading space of the first piece is dropped. */
    g->piece_cap = tok_stream_max_out(rc->tok) + 8;
    g->piece = xmalloc((size_t)g->piece_cap);
    if (r->n_prompt > 0 && r->prompt[r->n_prompt - 1] == tok_bos(rc->tok))
        tok_stream_push(&g->ts, r->prompt[r->n_prompt - 1], g->piece, g->piece_cap);
    g->sm = stop_new(p->stop, p->n_stop);
    g->path = path;
    return g;
}

static void gen_free(gen *g) {
    if (!g) return;
    tc_parser_free(g->tp);
    tc_events_free(&g->ev);
    stop_free(g->sm);
    free(g->piece);
    req_unref(g->r);
    free(g);
}

/* One logprobs entry for token t (appended to lp, whose shape depends on the
 * API: completions {tokens, token_logprobs, top_logprobs, text_offset},
 * chat {content: [...]}). */
static void add_logprob(gen *g, json_t *lp, const req_token *t, size_t offset) {
    const tokenizer *tk = g->rc->tok;
    if (g->kind == OAI_COMPLETION) {
        json_array_append_new(json_object_get(lp, "tokens"), piece_json(tk, t->id, NULL));
        json_array_append_new(json_object_get(lp, "token_logprobs"), lp_json(t->logprob));
        json_t *top = json_object();
        for (int i = 0; i < t->n_top; i++) {
            json_t *k = piece_json(tk, t->top_ids[i], NULL);
            if (k && !json_object_get(top, json_string_value(k)))
                json_object_set_new(top, json_string_value(k), lp_json(t->top_lps[i]));
            json_decref(k);
        }
        json_array_append_new(json_object_get(lp, "top_logprobs"), top);
        json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
    } else {
        json_t *bytes;
        json_t *tok = piece_json(tk, t->id, &bytes);
        json_t *top = json_array();
        for (int i = 0; i < t->n_top; i++) {
            json_t *tb;
            json_t *ts = piece_json(tk, t->top_ids[i], &tb);
            json_array_append_new(top, json_pack("{s:o, s:o, s:o}", "token", ts, "logprob", lp_json(t->top_lps[i]), "bytes", tb));
        }
        json_array_append_new(json_object_get(lp, "content"),
                              json_pack("{s:o, s:o, s:o, s:o}", "token", tok, "logprob", lp_json(t->logprob), "bytes",
                                        bytes, "top_logprobs", top));
    }
}

static json_t *logprobs_new(oai_kind kind) {
    if (kind == OAI_COMPLETION)
        return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
    return json_pack("{s:[]}", "content");
}

/* Waits up to timeout_ms for output; appends new text to `text` and, when lp
 * is not NULL, logprobs entries. Sets g->finished at the end. */
static void gen_pump(gen *g, int timeout_ms, http_buf *text, json_t *lp) {
    if (g->finished) return;
    req_finish fin;
    int n = req_wait(g->r, g->n_seen, timeout_ms, &fin);
    if (n > g->n_seen && !g->stop_hit) {
        int k = n - g->n_seen;
        req_token *toks = xmalloc((size_t)k * sizeof *toks);
        req_copy_tokens(g->r, g->n_seen, k, toks);
        for (int i = 0; i < k && !g->stop_hit; i++) {
            int m = tok_stream_push(&g->ts, toks[i].id, g->piece, g->piece_cap);
            if (m < 0) m = 0;
            g->n_completion++;
            if (lp && g->n_logprobs >= 0) add_logprob(g, lp, &toks[i], g->text_offset);
            g->text_offset += (size_t)m;
            const char *out;
            size_t out_n;
            if (stop_feed(g->sm, g->piece, (size_t)m, &out, &out_n)) {
                g->stop_hit = true;
                req_stop(g->r);
            }
            http_buf_add(text, out, out_n);
        }
        free(toks);
    }
    g->n_seen = n;
    if (g->stop_hit) {
        g->finished = true;
        g->finish = REQ_FINISH_STOP;
        return;
    }
    if (fin != REQ_RUNNING && req_wait(g->r, g->n_seen, 0, &fin) == g->n_seen) {
        /* Everything consumed: flush the held bytes and the held stop prefix. */
        int m = tok_stream_flush(&g->ts, g->piece, g->piece_cap);
        const char *out;
        size_t out_n;
        if (m > 0 && stop_feed(g->sm, g->piece, (size_t)m, &out, &out_n)) {
            http_buf_add(text, out, out_n);
            g->stop_hit = true;
            fin = REQ_FINISH_STOP;
        } else {
            if (m > 0) http_buf_add(text, out, out_n);
            stop_flush(g->sm, &out, &out_n);
            http_buf_add(text, out, out_n);
        }
        g->finished = true;
        g->finish = fin;
        req_get_finish(g->r, NULL, g->error, sizeof g->error);
    }
}

static json_t *usage_json(gen *g) {
    int n_cached = 0;
    req_get_finish(g->r, &n_cached, NULL, 0);
    int np = g->r->n_prompt;
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", np, "completion_tokens", g->n_completion,
                     "total_tokens", np + g->n_completion, "prompt_tokens_details", "cached_tokens", n_cached);
}

static void log_request(gen *g, const char *method, int status) {
    int n_cached = 0;
    req_get_finish(g->r, &n_cached, NULL, 0);
    log_info("%s %s %d prompt=%d cached=%d generated=%d %.1fms%s", method, g->path, status, g->r->n_prompt, n_cached,
             g->n_completion, (double)(clock_ns() - g->t0_ns) / 1e6, g->stream ? " stream" : "");
}

/* ---- tool calls and reasoning ---- */

static const char *gen_finish_name(gen *g) {
    if (g->n_calls > 0 && g->finish == REQ_FINISH_STOP) return "tool_calls";
    return finish_name(g->finish);
}

/* The whole message of a chat answer whose text went through the parser. */
static json_t *parsed_message(gen *g, const http_buf *text) {
    tc_parser_feed(g->tp, text->p ? text->p : "", text->n, &g->ev);
    g->n_calls = tc_parser_finish(g->tp, g->finish == REQ_FINISH_LENGTH, &g->ev);
    http_buf content = {0}, reasoning = {0};
    json_t *calls = json_array();
    http_buf *args = NULL;
    int n_args = 0;
    for (int i = 0; i < g->ev.n; i++) {
        tc_event *ev = &g->ev.v[i];
        if (ev->kind == TC_EV_CONTENT) http_buf_add(&content, ev->text, ev->n);
        else if (ev->kind == TC_EV_REASONING) http_buf_add(&reasoning, ev->text, ev->n);
        else if (ev->index >= 0 && ev->index < g->n_calls) {
            if (ev->index >= n_args) {
                args = xrealloc(args, (size_t)(ev->index + 1) * sizeof *args);
                memset(args + n_args, 0, (size_t)(ev->index + 1 - n_args) * sizeof *args);
                n_args = ev->index + 1;
            }
            if (ev->kind == TC_EV_CALL_START) {
                while ((int)json_array_size(calls) <= ev->index) json_array_append_new(calls, json_object());
                json_t *c = json_array_get(calls, (size_t)ev->index);
                json_object_set_new(c, "id", json_string(ev->id));
                json_object_set_new(c, "type", json_string("function"));
                json_object_set_new(c, "function", json_pack("{s:s}", "name", ev->name));
            } else {
                http_buf_add(&args[ev->index], ev->text, ev->n);
            }
        }
    }
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *fn = json_object_get(json_array_get(calls, i), "function");
        json_t *a = (int)i < n_args ? json_stringn(args[i].p ? args[i].p : "", args[i].n) : NULL;
        if (fn) json_object_set_new(fn, "arguments", a ? a : json_string("{}"));
    }
    for (int i = 0; i < n_args; i++) http_buf_free(&args[i]);
    free(args);
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    json_t *c = json_stringn(content.p ? content.p : "", content.n);
    if (json_array_size(calls) && content.n == 0) {
        json_decref(c);
        c = json_null();
    }
    json_object_set_new(msg, "content", c ? c : json_string(""));
    if (reasoning.n) {
        json_t *r = json_stringn(reasoning.p, reasoning.n);
        json_object_set_new(msg, "reasoning_content", r ? r : json_string(""));
    }
    if (json_array_size(calls))
        json_object_set_new(msg, "tool_calls", calls);
    else
        json_decref(calls);
    http_buf_free(&content);
    http_buf_free(&reasoning);
    tc_events_clear(&g->ev);
    return msg;
}

/* ---- non-streaming ---- */

static void answer_whole(gen *g, http_exchange *x) {
    http_buf text = {0};
    json_t *lp = g->n_logprobs >= 0 ? logprobs_new(g->kind) : NULL;
    while (!g->finished) {
        gen_pump(g, 20, &text, lp);
        if (!g->finished && http_client_gone(x)) {
            req_cancel(g->r);
            g->client_gone = true;
            break;
        }
    }
    if (g->client_gone) {
        reply_error(x, 499, "client closed the connection", NULL, NULL);
        metrics_count(g->rc->met, 499);
        log_request(g, "POST", 499);
    } else if (!finish_name(g->finish)) {
        char msg[320];
        snprintf(msg, sizeof msg, "generation failed: %s", g->error[0] ? g->error : "the server is shutting down");
        reply_error(x, g->finish == REQ_FINISH_CANCEL ? 503 : 500, msg, NULL, NULL);
        metrics_count(g->rc->met, http_status(x));
        log_request(g, "POST", http_status(x));
    } else {
        json_t *content = json_stringn(text.p ? text.p : "", text.n);
        if (!content) content = json_string("");
        json_t *choice;
        if (g->kind == OAI_COMPLETION) {
            choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "text", content, "logprobs", lp ? lp : json_null(),
                               "finish_reason", finish_name(g->finish));
        } else {
            json_t *msg;
            if (g->tp) {
                json_decref(content);
                msg = parsed_message(g, &text);
            } else {
                msg = json_pack("{s:s, s:o}", "role", "assistant", "content", content);
            }
            choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs", lp ? lp : json_null(),
                               "finish_reason", gen_finish_name(g));
        }
        lp = NULL;
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", g->id, "object",
                              g->kind == OAI_COMPLETION ? "text_completion" : "chat.completion", "created",
                              (json_int_t)g->created, "model", g->rc->model_id, "choices", choice, "usage",
                              usage_json(g));
        reply_json(g->rc, x, 200, o);
        json_decref(o);
        metrics_count(g->rc->met, 200);
        log_request(g, "POST", 200);
    }
    if (lp) json_decref(lp);
    http_buf_free(&text);
    gen_free(g);
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

static json_t *chunk_new(gen *g, json_t *choice) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", g->id, "object",
                     g->kind == OAI_COMPLETION ? "text_completion" : "chat.completion.chunk", "created",
                     (json_int_t)g->created, "model", g->rc->model_id, "choices", choice);
}

static json_t *choice_delta(gen *g, const char *text, size_t n, json_t *lp, const char *finish, bool role) {
    json_t *content = json_stringn(text ? text : "", n);
    if (!content) content = json_string("");
    json_t *fr = finish ? json_string(finish) : json_null();
    if (g->kind == OAI_COMPLETION)
        return json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "text", content, "logprobs", lp ? lp : json_null(),
                         "finish_reason", fr);
    json_t *delta = json_object();
    if (role) json_object_set_new(delta, "role", json_string("assistant"));
    if (finish && n == 0)
        json_decref(content);
    else
        json_object_set_new(delta, "content", content);
    return json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs", lp ? lp : json_null(),
                     "finish_reason", fr);
}

/* A chat chunk whose delta is `delta` (taken). */
static void sse_delta(gen *g, http_buf *out, json_t *delta, json_t *lp) {
    json_t *c = chunk_new(g, json_pack("{s:i, s:o, s:o, s:n}", "index", 0, "delta", delta, "logprobs",
                                       lp ? lp : json_null(), "finish_reason"));
    sse_event(out, c);
    json_decref(c);
}

/* Streams the parser's events for the new text: content and reasoning
 * deltas, and OpenAI tool_calls deltas (index, id, type and name first, then
 * argument fragments). Consecutive events of one kind share a chunk. */
static void stream_parsed(gen *g, http_buf *out, const http_buf *text, json_t *lp) {
    if (text->n) tc_parser_feed(g->tp, text->p, text->n, &g->ev);
    if (g->finished) g->n_calls = tc_parser_finish(g->tp, g->finish == REQ_FINISH_LENGTH, &g->ev);
    for (int i = 0; i < g->ev.n;) {
        tc_event *ev = &g->ev.v[i];
        json_t *delta;
        if (ev->kind == TC_EV_CONTENT || ev->kind == TC_EV_REASONING || ev->kind == TC_EV_CALL_ARGS) {
            http_buf b = {0};
            int j = i;
            while (j < g->ev.n && g->ev.v[j].kind == ev->kind && g->ev.v[j].index == ev->index) {
                http_buf_add(&b, g->ev.v[j].text, g->ev.v[j].n);
                j++;
            }
            json_t *str = json_stringn(b.p ? b.p : "", b.n);
            if (!str) str = json_string("");
            http_buf_free(&b);
            if (ev->kind == TC_EV_CALL_ARGS)
                delta = json_pack("{s:[{s:i, s:{s:o}}]}", "tool_calls", "index", ev->index, "function", "arguments",
                                  str);
            else
                delta = json_pack("{s:o}", ev->kind == TC_EV_CONTENT ? "content" : "reasoning_content", str);
            i = j;
        } else {
            delta = json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", ev->index, "id", ev->id,
                              "type", "function", "function", "name", ev->name, "arguments", "");
            i++;
        }
        sse_delta(g, out, delta, lp);
        lp = NULL;
    }
    if (lp) sse_delta(g, out, json_object(), lp);
    tc_events_clear(&g->ev);
}

static int stream_next(void *sctx, http_buf *out) {
    gen *g = sctx;
    if (g->kind == OAI_CHAT && !g->sent_role) {
        g->sent_role = true;
        json_t *c = chunk_new(g, choice_delta(g, "", 0, NULL, NULL, true));
        sse_event(out, c);
        json_decref(c);
        return 1;
    }
    http_buf text = {0};
    json_t *lp = g->n_logprobs >= 0 ? logprobs_new(g->kind) : NULL;
    gen_pump(g, 20, &text, lp);
    bool has_lp = lp && (g->kind == OAI_COMPLETION ? json_array_size(json_object_get(lp, "tokens"))
                                                   : json_array_size(json_object_get(lp, "content")));
    if (g->tp) {
        stream_parsed(g, out, &text, has_lp ? lp : NULL);
        if (has_lp) lp = NULL;
    } else if (text.n || has_lp) {
        json_t *c = chunk_new(g, choice_delta(g, text.p, text.n, has_lp ? lp : NULL, NULL, false));
        if (has_lp) lp = NULL;
        sse_event(out, c);
        json_decref(c);
    }
    if (lp) json_decref(lp);
    http_buf_free(&text);
    if (!g->finished) return 1;
    const char *fr = finish_name(g->finish);
    if (!fr) {
        char msg[320];
        snprintf(msg, sizeof msg, "generation failed: %s", g->error[0] ? g->error : "the server is shutting down");
        char *s = oai_error_json(msg, "server_error", NULL, NULL);
        http_buf_printf(out, "data: %s\n\n", s);
        free(s);
    } else {
        json_t *c = chunk_new(g, choice_delta(g, "", 0, NULL, gen_finish_name(g), false));
        sse_event(out, c);
        json_decref(c);
        if (g->include_usage) {
            json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", g->id, "object",
                                  g->kind == OAI_COMPLETION ? "text_completion" : "chat.completion.chunk", "created",
                                  (json_int_t)g->created, "model", g->rc->model_id, "choices", "usage", usage_json(g));
            sse_event(out, u);
            json_decref(u);
        }
    }
    http_buf_add(out, "data: [DONE]\n\n", 14);
    return 0;
}

static void stream_done(void *sctx, bool completed) {
    gen *g = sctx;
    int status = 200;
    if (!completed) {
        req_cancel(g->r);
        status = 499;
    }
    metrics_count(g->rc->met, status);
    log_request(g, "POST", status);
    gen_free(g);
}

/* ---- generation routes ---- */

/* The messages as the template should see them: tool-call arguments sent as
 * JSON text become objects (templates such as Llama 3's write them with
 * tojson, and ours writes the same canonical text the grammar produced, so
 * the next turn's prompt still matches the cached one); for templates
 * without a tool syntax of their own, the tools and the call format go into
 * the system message. A new reference. */
/* Mistral's template accepts only tool-call ids of 9 letters and digits:
 * other ids are mapped to 9 characters derived from them (a call and the
 * tool message answering it map alike). */
static void mistral_id(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 9 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == 9) return;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    static const char an[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char id[10];
    for (int i = 0; i < 9; i++, h /= 62) id[i] = an[h % 62];
    id[9] = 0;
    json_object_set_new(o, key, json_string(id));
}

static json_t *template_messages(routes_ctx *rc, const oai_params *p) {
    json_t *msgs = json_deep_copy(p->messages);
    if (!msgs) return NULL;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *calls = json_object_get(json_array_get(msgs, i), "tool_calls");
        if (rc->tool_format == TC_MISTRAL) mistral_id(json_array_get(msgs, i), "tool_call_id");
        for (size_t j = 0; j < json_array_size(calls); j++) {
            if (rc->tool_format == TC_MISTRAL) mistral_id(json_array_get(calls, j), "id");
            json_t *fn = json_object_get(json_array_get(calls, j), "function");
            json_t *a = json_object_get(fn, "arguments");
            if (!json_is_string(a)) continue;
            json_t *obj = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
            if (json_is_object(obj))
                json_object_set_new(fn, "arguments", obj);
            else
                json_decref(obj);
        }
    }
    if (rc->tool_format == TC_GENERIC && p->tools && p->tool_choice != OAI_TOOLS_NONE) {
        char *sys = tc_generic_system_prompt(p->tools);
        json_t *first = json_array_get(msgs, 0);
        json_t *role = json_object_get(first, "role");
        json_t *c = json_object_get(first, "content");
        if (json_is_string(role) && !strcmp(json_string_value(role), "system") && json_is_string(c)) {
            size_t n = json_string_length(c) + strlen(sys) + 3;
            char *joined = xmalloc(n);
            snprintf(joined, n, "%s\n\n%s", json_string_value(c), sys);
            json_object_set_new(first, "content", json_string(joined));
            free(joined);
        } else {
            json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system", "content", sys));
        }
        free(sys);
    }
    return msgs;
}

/* Renders the messages with the model's chat template (or ChatML). */
static int render_chat(routes_ctx *rc, const oai_params *p, char **out, err_t *e) {
    const tokenizer *t = rc->tok;
    chat_opts co = {0};
    co.bos_token = tok_bos(t) >= 0 ? tok_piece_str(t, tok_bos(t)) : NULL;
    co.eos_token = tok_eos(t) >= 0 ? tok_piece_str(t, tok_eos(t)) : NULL;
    co.add_generation_prompt = true;
    co.tools = p->tools;
    co.extra = p->template_kwargs;
    json_t *msgs = template_messages(rc, p);
    if (!msgs) return err_set(e, ERR_NOMEM, "out of memory copying the messages");
    int r = chat_render(rc->chat, msgs, &co, out, e);
    json_decref(msgs);
    return r;
}

/* The rendered prompt leaves the model inside <think> (its answer starts
 * with reasoning). */
static bool ends_in_think(const char *text) {
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
    return n >= 7 && memcmp(text + n - 7, "<think>", 7) == 0;
}

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
    const char *prompt_param = kind == OAI_COMPLETION ? "prompt" : "messages";
    grammar *gr = NULL;
    char *trigger = NULL;
    bool think_open = false;
    int32_t *ids = NULL;
    int n_ids = 0;
    req *r = NULL;
    if (constrain_request(rc->cons, &p, rc->tool_format, &gr, &trigger, &param, &e) < 0) {
        reply_error(x, 400, e.msg, param, NULL);
        goto fail;
    }
    if (kind == OAI_COMPLETION && p.prompt_tokens) {
        ids = p.prompt_tokens;
        n_ids = p.n_prompt_tokens;
        p.prompt_tokens = NULL;
    } else if (kind == OAI_COMPLETION) {
        ids = encode(rc->tok, p.prompt_text, strlen(p.prompt_text), tok_add_bos(rc->tok), &n_ids, &e);
    } else {
        char *text = NULL;
        if (render_chat(rc, &p, &text, &e) < 0) {
            reply_error(x, 400, e.msg, "messages", NULL);
            goto fail;
        }
        think_open = rc->reasoning && ends_in_think(text);
        /* Templates that want BOS write it themselves; otherwise add it as
         * plain completions do. */
        const char *bos = tok_bos(rc->tok) >= 0 ? tok_piece_str(rc->tok, tok_bos(rc->tok)) : NULL;
        bool add_bos = tok_add_bos(rc->tok) && !(bos && *bos && strncmp(text, bos, strlen(bos)) == 0);
        ids = encode(rc->tok, text, strlen(text), add_bos, &n_ids, &e);
        free(text);
    }
    if (!ids) {
        reply_error(x, 400, e.msg, prompt_param, NULL);
        goto fail;
    }
    if (n_ids == 0) {
        reply_error(x, 400, "the prompt is empty after tokenization", prompt_param, NULL);
        goto fail;
    }
    int n_ctx = engine_n_ctx(rc->en);
    if (n_ids >= n_ctx) {
        char msg[200];
        snprintf(msg, sizeof msg, "the prompt has %d tokens; this model's context is %d tokens", n_ids, n_ctx);
        reply_error(x, 400, msg, prompt_param, "context_length_exceeded");
        goto fail;
    }
    r = req_new(ids, n_ids);
    ids = NULL;
    r->grammar = gr;
    r->grammar_trigger = trigger;
    gr = NULL;
    trigger = NULL;
    r->no_jump_forward = !p.jump_forward;
    r->sp = p.sp;
    if (!p.seed_set) r->sp.seed = (uint64_t)clock_ns() ^ (atomic_fetch_add(&rc->next_id, 1) * 0x9E3779B97F4A7C15ull);
    r->max_tokens = p.max_tokens > 0 ? p.max_tokens : INT32_MAX;
    r->ignore_eos = p.ignore_eos;
    r->n_logprobs = p.n_logprobs;
    int src = engine_submit(rc->en, r, &e);
    if (src < 0) {
        if (src == ERR_RANGE)
            reply_error(x, 429, e.msg, NULL, "queue_full");
        else
            reply_error(x, 400, e.msg, prompt_param, src == ERR_INVALID ? "context_length_exceeded" : NULL);
        goto fail;
    }
    gen *g = gen_new(rc, r, &p, kind == OAI_COMPLETION ? "/v1/completions" : "/v1/chat/completions", t0);
    bool tools_on = p.tools && p.tool_choice != OAI_TOOLS_NONE;
    if (kind == OAI_CHAT && (tools_on || rc->reasoning))
        g->tp = tc_parser_new(rc->tool_format, tools_on, rc->reasoning, think_open,
                              (unsigned long long)rc->created * 1000003ull + atomic_fetch_add(&rc->next_id, 1));
    oai_params_free(&p);
    if (g->stream)
        http_reply_stream(x, 200, "text/event-stream", stream_next, stream_done, g);
    else
        answer_whole(g, x);
    return true;
fail:
    req_unref(r);
    free(ids);
    grammar_unref(gr);
    free(trigger);
    oai_params_free(&p);
    return false;
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
        int32_t *ids = encode(rc->tok, json_string_value(c), json_string_length(c), add && tok_add_bos(rc->tok), &n, &e);
        if (!ids) {
            reply_error(x, 400, e.msg, param, NULL);
        } else {
            json_t *arr = json_array();
            for (int i = 0; i < n; i++) {
                if (wp && json_is_true(wp))
                    json_array_append_new(arr, json_pack("{s:i, s:o}", "id", ids[i], "piece",
                                                         piece_json(rc->tok, ids[i], NULL)));
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

/* Constant-time comparison of the bearer token. */
static bool key_ok(const char *want, const char *auth) {
    if (!auth) return false;
    if (strncasecmp(auth, "Bearer ", 7) != 0) return false;
    const char *got = auth + 7;
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

enum { R_COMPL, R_CHAT, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_TOKENIZE, R_DETOKENIZE };

static const route routes[] = {
    {"/v1/completions", "POST", R_COMPL},     {"/completions", "POST", R_COMPL},
    {"/v1/chat/completions", "POST", R_CHAT}, {"/chat/completions", "POST", R_CHAT},
    {"/v1/models", "GET", R_MODELS},          {"/models", "GET", R_MODELS},
    {"/health", "GET", R_HEALTH},             {"/metrics", "GET", R_METRICS},
    {"/tokenize", "POST", R_TOKENIZE},        {"/detokenize", "POST", R_DETOKENIZE},
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
    bool generation = false;
    if (rc->o->api_key && rc->o->api_key[0] && !(rt && rt->id == R_HEALTH) &&
        !key_ok(rc->o->api_key, http_header(x, "Authorization"))) {
        reply_error(x, 401,
                    http_header(x, "Authorization") ? "invalid API key" : "missing API key (Authorization: Bearer KEY)",
                    NULL, "invalid_api_key");
    } else if (!rt) {
        char msg[300];
        snprintf(msg, sizeof msg, path_known ? "method %s is not allowed on %s" : "no route %s %s", method, path);
        if (!path_known) snprintf(msg, sizeof msg, "no route for %s %.200s", method, path);
        reply_error(x, path_known ? 405 : 404, msg, NULL, NULL);
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
        }
    }
    /* Generation requests that reached the engine count and log themselves
     * when they end (a stream ends after this handler returns). */
    if (generation) return;
    metrics_count(rc->met, http_status(x));
    log_info("%s %.200s %d %.1fms", method, path, http_status(x), (double)(clock_ns() - t0) / 1e6);
}
