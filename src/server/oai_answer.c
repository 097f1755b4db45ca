/*
 * oai_answer.c — the output side of the OpenAI generation routes (contract
 * in oai_answer.h): the whole JSON answer or the SSE chunks
 * (gen_poll's events: text, reasoning and content deltas, tool-call deltas
 * with index, id and name first, then argument fragments), logprobs, the
 * finish reason and usage; an engine failure after a stream started is an
 * error chunk, then [DONE].
 */
#include "oai_answer.h"

#include "api.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The OpenAI side of one generation: ids, streaming state. */
typedef struct oai_out {
    routes_ctx *rc;
    gen *g;
    oai_kind kind;
    const oai_route *rt; /* oai_route_of(kind) */
    bool stream, include_usage, sent_role;
    bool failed; /* a stream cut short: out of memory building a chunk */
    bool done;   /* streams of several choices: this one has finished    */
    int index;   /* its choice's index                                   */
    int n_logprobs;
    char id[64];
    tc_events ev;
    gen_logprobs lps;  /* api_serve's answers: the entries of the poll (a
                          stream) or of the whole answer                  */
    json_t *lp;        /* a stream's logprobs of this poll, until a chunk
                          takes them                                      */
} oai_out;

static void oai_out_free(void *ctx) {
    oai_out *o = ctx;
    tc_events_free(&o->ev);
    gen_logprobs_free(&o->lps);
    json_decref(o->lp);
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

/* OpenAI's logprobs object of the entries l holds: completions {tokens,
 * token_logprobs, top_logprobs (an object: piece -> logprob, a repeated
 * piece once), text_offset}, chat {content: [{token, logprob, bytes,
 * top_logprobs: [{token, logprob, bytes}]}]}. */
static json_t *logprobs_json(const tokenizer *tk, oai_kind kind, const gen_logprobs *l) {
    if (kind == OAI_COMPLETION) {
        json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
        for (int j = 0; j < l->n; j++) {
            const req_token *t = &l->v[j].t;
            json_array_append_new(toks, gen_piece_json(tk, t->id, NULL));
            json_array_append_new(lps, gen_logprob_json(t->logprob));
            json_t *top = json_object();
            for (int i = 0; i < t->n_top; i++) {
                json_t *k = gen_piece_json(tk, t->top_ids[i], NULL);
                if (k && !json_object_get(top, json_string_value(k)))
                    json_object_set_new(top, json_string_value(k), gen_logprob_json(t->top_lps[i]));
                json_decref(k);
            }
            json_array_append_new(tops, top);
            json_array_append_new(offs, json_integer((json_int_t)l->v[j].text_offset));
        }
        return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                         "text_offset", offs);
    }
    json_t *content = json_array();
    for (int j = 0; j < l->n; j++) {
        const req_token *t = &l->v[j].t;
        json_t *bytes;
        json_t *tok = gen_piece_json(tk, t->id, &bytes);
        json_t *top = json_array();
        for (int i = 0; i < t->n_top; i++) {
            json_t *tb;
            json_t *ts = gen_piece_json(tk, t->top_ids[i], &tb);
            json_array_append_new(top, json_pack("{s:o, s:o, s:o}", "token", ts, "logprob",
                                                 gen_logprob_json(t->top_lps[i]), "bytes", tb));
        }
        json_array_append_new(content, json_pack("{s:o, s:o, s:o, s:o}", "token", tok, "logprob",
                                                 gen_logprob_json(t->logprob), "bytes", bytes, "top_logprobs", top));
    }
    return json_pack("{s:o}", "content", content);
}

/* The fields every answer and chunk starts with: id, object, created,
 * model. */
static json_t *answer_head(oai_out *o, bool chunk) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", o->id, "object", chunk ? o->rt->chunk_object : o->rt->object,
                     "created", (json_int_t)gen_created(o->g), "model", o->rc->model_id);
}

/* "generation failed: ..." (status: the HTTP status to answer, or NULL). */
static void failed_msg(gen *g, char *msg, size_t cap, int *status) {
    snprintf(msg, cap, "generation failed: %s", gen_error(g, status));
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

/* A whole answer's choice (lp taken). */
static json_t *choice_json(oai_kind kind, int index, const gen_result *res, json_t *lp, const char *fr) {
    if (kind == OAI_COMPLETION)
        return json_pack("{s:i, s:o, s:o, s:s}", "index", index, "text", json_text(&res->content), "logprobs",
                         lp ? lp : json_null(), "finish_reason", fr);
    return json_pack("{s:i, s:o, s:o, s:s}", "index", index, "message", chat_message(res), "logprobs",
                     lp ? lp : json_null(), "finish_reason", fr);
}

/* Completions' echo: the prompt's text goes before the answer's. */
static void add_echo(const gen *g, gen_result *res) {
    const char *echo = gen_echo(g);
    if (!echo || !*echo) return;
    http_buf b = {0};
    http_buf_add(&b, echo, strlen(echo));
    http_buf_add(&b, res->content.p ? res->content.p : "", res->content.n);
    http_buf_free(&res->content);
    res->content = b;
}

/* Sends ans (an answer jansson could not build whole is never sent as one);
 * returns the status sent. */
static int reply_answer(http_exchange *x, json_t *ans, unsigned long f0) {
    char *s = oai_json_nomem() == f0 ? oai_json_dump(ans) : NULL;
    int status = 200;
    if (s) {
        http_reply(x, 200, "application/json", s, strlen(s), NULL, NULL);
    } else {
        status = 500;
        oai_reply_error(x, status, "out of memory building the answer", NULL, NULL);
    }
    free(s);
    return status;
}


static int by_logprob_desc(const void *a, const void *b, void *ctx) {
    gen **gs = ctx;
    double x = gen_logprob_sum(gs[*(const int *)a]), y = gen_logprob_sum(gs[*(const int *)b]);
    return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b; /* ties: fork order */
}

/* One whole answer (not streamed) from n_gens generations started together
 * (taken): `per` per prompt, in prompt order. Each prompt answers n of its
 * forks: all of them (per == n), or best_of's n of the highest cumulative
 * logprob, best first (per > n; the forks were started with logprobs);
 * choice indexes run 0 .. n x prompts - 1. usage counts each prompt once
 * (its first fork's prompt and cached tokens) and every generated token. A
 * client that leaves cancels them all; a failed one fails the answer. */
static void oai_answer_many(routes_ctx *rc, gen **gs, int n_gens, int per, int n, const oai_params *p, oai_kind kind,
                            http_exchange *x) {
    unsigned long f0 = oai_json_nomem();
    oai_out head = {.rc = rc, .g = gs[0], .kind = kind, .rt = oai_route_of(kind)};
    snprintf(head.id, sizeof head.id, "%s-%llx%06llx", head.rt->id_prefix, (unsigned long long)rc->created,
             gen_serial(gs[0]));
    gen_result *res = xcalloc((size_t)n_gens, sizeof *res);
    json_t **lps = xcalloc((size_t)n_gens, sizeof *lps);
    int status = 200, np = 0, nc = 0, cached = 0;
    char msg[320] = "";
    for (int i = 0; i < n_gens; i++) {
        if (status != 200) {
            gen_cancel(gs[i]);
            continue;
        }
        gen_logprobs l = {0};
        bool ok = gen_collect(gs[i], x, &res[i], &l);
        lps[i] = ok && p->n_logprobs >= 0 ? logprobs_json(rc->tok, kind, &l) : NULL;
        gen_logprobs_free(&l);
        add_echo(gs[i], &res[i]);
        if (!ok) {
            status = 499;
            snprintf(msg, sizeof msg, "client closed the connection");
        } else if (!gen_finish_reason(gs[i])) {
            failed_msg(gs[i], msg, sizeof msg, &status);
        } else {
            int a, b, c;
            gen_usage(gs[i], &a, &b, &c);
            nc += b; /* every fork's tokens count, best_of's unanswered ones too (as OpenAI bills them) */
            if (i % per == 0) np += a, cached += c; /* a prompt counts once */
        }
    }
    if (status != 200) {
        oai_reply_error(x, status, msg, NULL, NULL);
    } else {
        /* best_of: each prompt's n forks of the highest cumulative logprob,
         * best first (vLLM's rule); else every fork in order */
        json_t *choices = json_array();
        int *order = xmalloc((size_t)per * sizeof *order);
        for (int pi = 0; pi < n_gens / per; pi++) {
            for (int k = 0; k < per; k++) order[k] = pi * per + k;
            if (per > n) qsort_r(order, (size_t)per, sizeof *order, by_logprob_desc, gs);
            for (int k = 0; k < n; k++) {
                int i = order[k];
                json_array_append_new(choices, choice_json(kind, pi * n + k, &res[i], lps[i], gen_finish_reason(gs[i])));
                lps[i] = NULL;
            }
        }
        free(order);
        json_t *ans = answer_head(&head, false);
        json_object_set_new(ans, "choices", choices);
        json_object_set_new(ans, "usage", json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", np, "completion_tokens", nc,
                                                    "total_tokens", np + nc, "prompt_tokens_details", "cached_tokens",
                                                    cached));
        status = reply_answer(x, ans, f0);
        json_decref(ans);
    }
    for (int i = 0; i < n_gens; i++) {
        if (lps[i]) json_decref(lps[i]);
        gen_result_free(&res[i]);
        gen_done(gs[i], "POST", status, false);
    }
    free(lps);
    free(res);
}

/* ---- streaming (SSE) ---- */

static void sse_event(http_buf *out, json_t *o) {
    char *s = oai_json_dump(o);
    if (!s) return;
    http_buf_add(out, "data: ", 6);
    http_buf_add(out, s, strlen(s));
    http_buf_add(out, "\n\n", 2);
    free(s);
}


/* A chunk with one choice (taken). */
static json_t *chunk_new(oai_out *o, json_t *choice) {
    json_t *c = answer_head(o, true);
    json_object_set_new(c, "choices", json_pack("[o]", choice));
    return c;
}

/* A chunk's payload with nothing new: a completion's "" or an empty chat
 * delta. */
static json_t *empty_payload(const oai_out *o) { return o->kind == OAI_COMPLETION ? json_string("") : json_object(); }

/* One chunk: a completion's text, or a chat delta (taken), with logprobs
 * (taken, may be NULL) and a finish reason (may be NULL). */
static void sse_choice(oai_out *o, http_buf *out, json_t *text_or_delta, json_t *lp, const char *finish) {
    json_t *c = chunk_new(o, json_pack("{s:i, s:o, s:o, s:o}", "index", o->index, o->rt->payload_key, text_or_delta,
                                       "logprobs", lp ? lp : json_null(), "finish_reason",
                                       finish ? json_string(finish) : json_null()));
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
    if (lp) sse_choice(o, out, empty_payload(o), lp, NULL);
    tc_events_clear(ev);
}

/* Out of memory while building this call's chunks (some may lack a member,
 * or be missing): they are dropped, the stream ends with an error event and
 * [DONE], and the generation is cancelled. */
static int stream_fail(oai_out *o, http_buf *out, size_t keep) {
    out->n = keep;
    char *s = oai_error_json("generation failed: out of memory building the answer", "server_error", NULL, NULL);
    http_buf_printf(out, "data: %s\n\n", s);
    free(s);
    http_buf_add(out, "data: [DONE]\n\n", 14);
    o->failed = true;
    gen_cancel(o->g);
    return 0;
}

/* The first chunk of a choice: chat's role, or completions' echo. False
 * when there is none (or it was sent). */
static bool stream_head(oai_out *o, http_buf *out) {
    if (o->sent_role) return false;
    o->sent_role = true;
    const char *echo = o->kind == OAI_COMPLETION ? gen_echo(o->g) : NULL;
    if (o->kind == OAI_CHAT)
        sse_choice(o, out, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL);
    else if (echo && *echo)
        sse_choice(o, out, oai_text_json(echo, strlen(echo)), NULL, NULL);
    else
        return false;
    return true;
}

/* Polls o's generation (up to timeout_ms) and writes its chunks; true when
 * it has ended, *fr its finish reason (NULL: it failed). */
static bool stream_poll(oai_out *o, http_buf *out, int timeout_ms, const char **fr) {
    gen_logprobs l = {0};
    bool done = gen_poll(o->g, timeout_ms, &o->ev, &l);
    json_t *lp = o->n_logprobs >= 0 && l.n ? logprobs_json(o->rc->tok, o->kind, &l) : NULL;
    gen_logprobs_free(&l);
    stream_events(o, out, lp);
    *fr = done ? gen_finish_reason(o->g) : NULL;
    return done;
}

/* The error event of a generation that failed. */
static void stream_error(gen *g, http_buf *out) {
    char msg[320];
    failed_msg(g, msg, sizeof msg, NULL);
    char *s = oai_error_json(msg, "server_error", NULL, NULL);
    http_buf_printf(out, "data: %s\n\n", s);
    free(s);
}



/* ---- streaming several choices (n > 1, several prompts) ---- */

/* The forks of one streamed answer: each its own oai_out (index, events,
 * role/echo sent); one id; chunks interleave as the forks produce. */
typedef struct oai_multi {
    oai_out **o;
    int n_gens, per; /* per: forks per prompt (usage counts a prompt once) */
    int n_done;
    bool include_usage;
} oai_multi;

static void multi_cancel(oai_multi *m) {
    for (int i = 0; i < m->n_gens; i++) gen_cancel(m->o[i]->g);
}

static int multi_next(void *sctx, http_buf *out) {
    oai_multi *m = sctx;
    unsigned long f0 = oai_json_nomem();
    size_t keep = out->n;
    bool head = false;
    for (int i = 0; i < m->n_gens; i++) head |= stream_head(m->o[i], out);
    if (head && oai_json_nomem() != f0) {
        stream_fail(m->o[0], out, keep);
        multi_cancel(m);
        return 0;
    }
    if (head) return 1;
    /* the engine steps every fork together: wait on the first that runs,
     * then take what the others have */
    int waited = 0;
    for (int i = 0; i < m->n_gens; i++) {
        oai_out *o = m->o[i];
        if (o->done) continue;
        const char *fr;
        bool done = stream_poll(o, out, waited++ ? 0 : 20, &fr);
        if (oai_json_nomem() != f0) {
            stream_fail(o, out, keep);
            multi_cancel(m);
            return 0;
        }
        if (!done) continue;
        if (!fr) { /* one failed: the answer fails */
            stream_error(o->g, out);
            multi_cancel(m);
            http_buf_add(out, "data: [DONE]\n\n", 14);
            return 0;
        }
        sse_choice(o, out, empty_payload(o), NULL, fr);
        o->done = true;
        m->n_done++;
    }
    if (m->n_done < m->n_gens) return 1;
    if (m->include_usage) {
        int np = 0, nc = 0, cached = 0;
        for (int i = 0; i < m->n_gens; i++) {
            int a, b, c;
            gen_usage(m->o[i]->g, &a, &b, &c);
            nc += b;
            if (i % m->per == 0) np += a, cached += c;
        }
        json_t *u = answer_head(m->o[0], true);
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", np, "completion_tokens",
                                                  nc, "total_tokens", np + nc, "prompt_tokens_details",
                                                  "cached_tokens", cached));
        sse_event(out, u);
        json_decref(u);
        if (oai_json_nomem() != f0) {
            stream_fail(m->o[0], out, keep);
            return 0;
        }
    }
    http_buf_add(out, "data: [DONE]\n\n", 14);
    return 0;
}

static void multi_block(void *sctx, bool blocked) {
    oai_multi *m = sctx;
    for (int i = 0; i < m->n_gens; i++) gen_reader_blocked(m->o[i]->g, blocked);
}

static void multi_done(void *sctx, bool completed) {
    oai_multi *m = sctx;
    bool failed = false;
    for (int i = 0; i < m->n_gens; i++) failed |= m->o[i]->failed;
    for (int i = 0; i < m->n_gens; i++) {
        if (!completed) gen_cancel(m->o[i]->g);
        gen_done(m->o[i]->g, "POST", !completed ? 499 : failed ? 500 : 200, true);
        oai_out_free(m->o[i]);
    }
    free(m->o);
    free(m);
}

/* The same streamed (n per prompt, no best_of): every fork's chunks carry
 * its choice index (OpenAI's n > 1 streams), interleaved as they come;
 * each choice gets its role (chat) or echo first and its finish chunk; one
 * usage chunk with stream_options.include_usage, one [DONE]. A failed fork
 * ends the stream with an error event and [DONE], the others cancelled. */
static void oai_answer_many_stream(routes_ctx *rc, gen **gs, int n_gens, int n, const oai_params *p, oai_kind kind,
                                   http_exchange *x) {
    oai_multi *m = xcalloc(1, sizeof *m);
    m->o = xcalloc((size_t)n_gens, sizeof *m->o);
    m->n_gens = n_gens;
    m->per = n;
    m->include_usage = p->include_usage;
    for (int i = 0; i < n_gens; i++) {
        oai_out *o = m->o[i] = xcalloc(1, sizeof *o);
        o->rc = rc;
        o->g = gs[i];
        o->kind = kind;
        o->rt = oai_route_of(kind);
        o->stream = true;
        o->n_logprobs = p->n_logprobs;
        o->index = i;
        snprintf(o->id, sizeof o->id, "%s-%llx%06llx", o->rt->id_prefix, (unsigned long long)rc->created,
                 gen_serial(gs[0]));
    }
    http_reply_stream(x, 200, "text/event-stream", multi_next, multi_done, multi_block, m);
}

const oai_route *oai_route_of(oai_kind kind) {
    static const oai_route routes[] = {
        [OAI_COMPLETION] = {"/v1/completions", "text_completion", "text_completion", "cmpl", "text"},
        [OAI_CHAT] = {"/v1/chat/completions", "chat.completion", "chat.completion.chunk", "chatcmpl", "delta"},
    };
    ASSERT(kind == OAI_COMPLETION || kind == OAI_CHAT);
    return &routes[kind];
}


/* ---- one generation: api_serve's callbacks (api.h) ---- */

/* One chunk of the stream (lp: the poll's logprobs, which ride on its first
 * chunk). */
static void emit_choice(api_answer *a, json_t *text_or_delta, const char *finish) {
    oai_out *o = a->ctx;
    json_t *lp = o->lp;
    o->lp = NULL;
    api_emit(a, NULL, chunk_new(o, json_pack("{s:i, s:o, s:o, s:o}", "index", o->index, o->rt->payload_key,
                                             text_or_delta, "logprobs", lp ? lp : json_null(), "finish_reason",
                                             finish ? json_string(finish) : json_null())));
}

/* The poll's logprobs that no chunk took: a chunk of their own. */
static void emit_lp(api_answer *a) {
    oai_out *o = a->ctx;
    if (o->lp) emit_choice(a, empty_payload(o), NULL);
}

static bool one_poll(api_answer *a, int timeout_ms) {
    oai_out *o = a->ctx;
    if (a->stream) o->lps.n = 0; /* a stream's chunks carry each poll's entries */
    bool done = gen_poll(a->g, timeout_ms, &a->ev, &o->lps);
    if (a->stream && o->n_logprobs >= 0 && o->lps.n) o->lp = logprobs_json(a->rc->tok, o->kind, &o->lps);
    return done;
}

/* The first chunk: chat's role, or completions' echo. */
static bool one_begin(api_answer *a) {
    oai_out *o = a->ctx;
    const char *echo = o->kind == OAI_COMPLETION ? gen_echo(a->g) : NULL;
    if (o->kind == OAI_CHAT)
        emit_choice(a, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL);
    else if (echo && *echo)
        emit_choice(a, oai_text_json(echo, strlen(echo)), NULL);
    else
        return false;
    return true;
}

/* A call's first chunk: its index, id, type and name. */
static void one_open(api_answer *a, int i) {
    const api_seg *s = &a->segs[i];
    oai_out *o = a->ctx;
    if (s->kind != API_SEG_CALL || !a->stream || o->kind == OAI_COMPLETION) return;
    emit_choice(a, json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", s->call_index, "id",
                             s->call_id, "type", "function", "function", "name", s->name, "arguments", ""),
                NULL);
}

/* Text (completions), a content or reasoning delta, or a call's argument
 * fragment. */
static void one_delta(api_answer *a, int i, const char *text, size_t n) {
    const api_seg *s = &a->segs[i];
    oai_out *o = a->ctx;
    if (!a->stream) return;
    json_t *str = oai_text_json(text, n), *payload;
    if (o->kind == OAI_COMPLETION)
        payload = str;
    else if (s->kind == API_SEG_CALL)
        payload = json_pack("{s:[{s:i, s:{s:o}}]}", "tool_calls", "index", s->call_index, "function", "arguments", str);
    else
        payload = json_pack("{s:o}", s->kind == API_SEG_TEXT ? "content" : "reasoning_content", str);
    emit_choice(a, payload, NULL);
}

static void one_close(api_answer *a, int i) { (void)a, (void)i; }

static void one_polled(api_answer *a) {
    if (a->stream) emit_lp(a);
}

/* The whole answer's parts from the segments: the text (after completions'
 * echo), the reasoning, the complete calls. */
static void one_result(api_answer *a, gen_result *res) {
    memset(res, 0, sizeof *res);
    const char *echo = gen_echo(a->g);
    if (echo) http_buf_add(&res->content, echo, strlen(echo));
    int n_calls = gen_n_calls(a->g);
    for (int i = 0; i < a->n_segs; i++) {
        const api_seg *s = &a->segs[i];
        if (s->kind == API_SEG_TEXT) {
            http_buf_add(&res->content, s->text.p ? s->text.p : "", s->text.n);
        } else if (s->kind == API_SEG_REASONING) {
            http_buf_add(&res->reasoning, s->text.p ? s->text.p : "", s->text.n);
        } else if (s->call_index < n_calls) {
            res->calls = xrealloc(res->calls, (size_t)(res->n_calls + 1) * sizeof *res->calls);
            gen_call *c = &res->calls[res->n_calls++];
            memset(c, 0, sizeof *c);
            c->id = xstrdup(s->call_id);
            c->name = xstrdup(s->name);
            http_buf_add(&c->args, s->text.p ? s->text.p : "", s->text.n);
        }
    }
}

static json_t *one_finish(api_answer *a) {
    oai_out *o = a->ctx;
    const char *fr = gen_finish_reason(a->g);
    if (!a->stream) {
        gen_result res;
        one_result(a, &res);
        json_t *lp = o->n_logprobs >= 0 ? logprobs_json(a->rc->tok, o->kind, &o->lps) : NULL;
        json_t *ans = answer_head(o, false);
        json_object_set_new(ans, "choices", json_pack("[o]", choice_json(o->kind, 0, &res, lp, fr)));
        json_object_set_new(ans, "usage", usage_json(a->g));
        gen_result_free(&res);
        return ans;
    }
    emit_lp(a);
    emit_choice(a, empty_payload(o), fr);
    if (o->include_usage) {
        json_t *u = answer_head(o, true);
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", usage_json(a->g));
        api_emit(a, NULL, u);
    }
    http_buf_add(a->out, "data: [DONE]\n\n", 14);
    return NULL;
}

static void one_fail(api_answer *a, const char *msg, int status) {
    (void)status;
    emit_lp(a);
    char *s = oai_error_json(msg, "server_error", NULL, NULL);
    http_buf_printf(a->out, "data: %s\n\n", s);
    free(s);
    http_buf_add(a->out, "data: [DONE]\n\n", 14);
}

/* n > 1, best_of > 1 or several prompts: every generation is started at
 * once (prompt by prompt, n forks each, or best_of with logprobs on for
 * the ranking), so the engine batches them and the forks of a
 * prompt share its KV through the radix tree: the first computes the
 * prompt's blocks, the others join them while they are PENDING, and only
 * each fork's last partial block is computed again (docs/server.md). Each
 * prompt is the body with that prompt and n 1, parsed as a request of its
 * own. Returns true when a generation reached the engine. */
static bool answer_forks(routes_ctx *rc, http_exchange *x, oai_kind kind, json_t *body, const oai_params *p,
                         int64_t t0) {
    int per = MAX(p->best_of, p->n); /* best_of: forks per prompt, the best n answered */
    int n_prompts = MAX(p->n_prompts, 1), total = n_prompts * per;
    gen **gs = xcalloc((size_t)total, sizeof *gs);
    json_t *prompts = json_object_get(body, "prompt");
    int k = 0;
    for (int pi = 0; pi < n_prompts; pi++) {
        json_t *b = json_copy(body);
        if (b && kind == OAI_COMPLETION && p->n_prompts > 1) json_object_set(b, "prompt", json_array_get(prompts, pi));
        if (b) json_object_set_new(b, "n", json_integer(1));
        /* the whole request's logprob budget, not each fork's (oai.c) */
        if (b && p->max_tokens > 0) json_object_set_new(b, "max_tokens", json_integer(p->max_tokens));
        if (b && kind == OAI_COMPLETION) json_object_set_new(b, "best_of", json_integer(1));
        oai_params q;
        memset(&q, 0, sizeof q);
        gen_fail f = {0};
        int st = !b ? 503 : oai_parse(b, kind, tok_n_vocab(rc->tok), &q, &f.err) < 0 ? 400 : 0;
        json_decref(b);
        if (per > p->n && q.n_logprobs < 0) q.n_logprobs = 0; /* the ranking needs each token's logprob */
        /* not streamed, the forks are read one after the other: the later
         * ones' tokens wait untaken, which is not a stalled client (their
         * --stall-timeout cancelled them under load: the soak with tenants) */
        q.no_stall = !p->stream;
        for (int j = 0; !st && j < per; j++) {
            if (q.seed_set) q.sp.seed = p->sp.seed + (uint64_t)j; /* forks differ, reproducibly */
            if (!(gs[k] = gen_start(rc, x, &q, oai_route_of(kind)->path, t0, &f))) {
                st = f.err.status;
            } else {
                k++;
            }
        }
        oai_params_free(&q);
        if (st) {
            for (int i = 0; i < k; i++) {
                gen_cancel(gs[i]);
                gen_done(gs[i], "POST", st, false);
            }
            free(gs);
            char msg[sizeof f.err.e.msg];
            api_error_text(&api_openai, f.err.e.msg, msg, sizeof msg);
            oai_reply_error(x, st, st == 503 ? "out of memory starting the request" : msg, st == 503 ? NULL : f.err.field,
                            NULL);
            return k > 0;
        }
    }
    if (p->stream) oai_answer_many_stream(rc, gs, total, p->n, p, kind, x);
    else oai_answer_many(rc, gs, total, per, p->n, p, kind, x);
    free(gs);
    return true;
}

static int one_parse(api_answer *a, http_exchange *x, json_t *body, oai_params *p, oai_error *err) {
    oai_kind kind = !strcmp(a->path, oai_route_of(OAI_COMPLETION)->path) ? OAI_COMPLETION : OAI_CHAT;
    if (oai_parse(body, kind, tok_n_vocab(a->rc->tok), p, err) < 0) {
        err->status = 400; /* the body's fault, whatever it ran out of */
        err->e.code = ERR_INVALID;
        return -1;
    }
    if (p->n > 1 || p->n_prompts > 1 || p->best_of > 1) {
        bool started = answer_forks(a->rc, x, kind, body, p, a->t0_ns);
        oai_params_free(p);
        return started ? 2 : 0;
    }
    oai_out *o = xcalloc(1, sizeof *o);
    a->ctx = o;
    o->kind = kind;
    o->rt = oai_route_of(kind);
    return 1;
}

static void one_start(api_answer *a, const oai_params *p) {
    oai_out *o = a->ctx;
    o->rc = a->rc;
    o->g = a->g;
    o->stream = p->stream;
    o->include_usage = p->include_usage;
    o->n_logprobs = p->n_logprobs;
    snprintf(o->id, sizeof o->id, "%s-%llx%06llx", o->rt->id_prefix, (unsigned long long)a->rc->created,
             gen_serial(a->g));
}

static char *openai_error_json(int status, const char *msg, const char *param, const char *code) {
    return oai_error_json(msg, oai_error_type(status), param, code);
}

/* OpenAI's row: its names are the internal ones; chat and completions (the
 * route's path tells them apart) answer in chunks without event lines,
 * ending with [DONE]. */
const api_ops api_openai = {
    .name = "openai",
    .error_json = openai_error_json,
    .parse = one_parse,
    .start = one_start,
    .poll = one_poll,
    .begin = one_begin,
    .open = one_open,
    .delta = one_delta,
    .close = one_close,
    .polled = one_polled,
    .finish = one_finish,
    .fail = one_fail,
    .free_ctx = oai_out_free,
    .empty = API_EMPTY_NONE,
    .framing = API_SSE,
    .stream_type = "text/event-stream",
    .stream_nomem = "data: {\"error\":{\"message\":\"generation failed: out of memory building the answer\","
                    "\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\ndata: [DONE]\n\n",
};
