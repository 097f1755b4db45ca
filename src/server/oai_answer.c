/*
 * oai_answer.c — the OpenAI generation routes (/v1/completions,
 * /v1/chat/completions) on api_serve (api.h): api_openai's callbacks. The
 * whole JSON answer or the SSE chunks (text, reasoning and content deltas,
 * tool-call deltas with index, id and name first, then argument fragments),
 * logprobs, the finish reason and usage; an engine failure after a stream
 * started is an error chunk, then [DONE]. n > 1, best_of and several
 * prompts are choices of one answer (api_serve starts them all at once):
 * a stream's chunks carry each choice's index, interleaved as they come.
 */
#include "api.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What differs between the two routes, in one place: answers read these
 * words instead of testing the kind at every use. */
typedef struct oai_route {
    const char *object;       /* "object" of a whole answer            */
    const char *chunk_object; /* "object" of an SSE chunk              */
    const char *id_prefix;    /* answer ids: "<prefix>-<hex>"          */
    const char *payload_key;  /* a chunk choice's new output           */
} oai_route;

static const oai_route routes[] = {
    [OAI_COMPLETION] = {"text_completion", "text_completion", "cmpl", "text"},
    [OAI_CHAT] = {"chat.completion", "chat.completion.chunk", "chatcmpl", "delta"},
};

/* The OpenAI side of one choice (api_answer.ctx). */
typedef struct oai_out {
    oai_kind kind;
    const oai_route *rt;
    bool include_usage;
    int n_logprobs;    /* what the client asked (best_of's forks read them
                          for the ranking without answering them)         */
    int n, per;        /* choices answered per prompt, generations per
                          prompt (best_of: the best n of per answered)     */
    char id[64];
    gen_logprobs lps;  /* the entries of the poll (a stream) or of the
                          whole answer                                    */
    json_t *lp;        /* a stream's logprobs of this poll, until a chunk
                          takes them                                      */
} oai_out;

static void oai_out_free(void *ctx) {
    oai_out *o = ctx;
    gen_logprobs_free(&o->lps);
    json_decref(o->lp);
    free(o);
}

/* usage: each prompt counted once (its first generation's prompt and
 * cached tokens), every generated token (best_of's unanswered ones too, as
 * OpenAI bills them). */
static json_t *usage_json(const api_answer *a) {
    const oai_out *o = a->ctx;
    int np = 0, nc = 0, cached = 0;
    for (int i = 0; i < a->n_choices; i++) {
        int p, c, k;
        gen_usage(a->choices[i]->g, &p, &c, &k);
        nc += c;
        if (i % o->per == 0) np += p, cached += k;
    }
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", np, "completion_tokens", nc, "total_tokens", np + nc,
                     "prompt_tokens_details", "cached_tokens", cached);
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
static json_t *answer_head(const api_answer *a, bool chunk) {
    const oai_out *o = a->ctx;
    return json_pack("{s:s, s:s, s:I, s:s}", "id", o->id, "object", chunk ? o->rt->chunk_object : o->rt->object,
                     "created", (json_int_t)gen_created(a->g), "model", a->rc->model_id);
}

/* A whole answer's choice (index: its place in the answer): the text
 * (after completions' echo), the reasoning, the complete calls. */
static json_t *choice_json(const api_answer *a, int index) {
    const oai_out *o = a->ctx;
    sbuf text = {0}, reasoning = {0};
    const char *echo = gen_echo(a->g);
    if (echo) sbuf_put(&text, echo, strlen(echo));
    json_t *calls = json_array();
    for (int i = 0; i < a->n_segs; i++) {
        const api_seg *s = &a->segs[i];
        if (s->kind != API_SEG_CALL)
            sbuf_put(s->kind == API_SEG_TEXT ? &text : &reasoning, s->text.p ? s->text.p : "", s->text.n);
        else if (s->call_index < gen_n_calls(a->g))
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", s->call_id, "type", "function",
                                                   "function", "name", s->name, "arguments", oai_buf_json(&s->text)));
    }
    json_t *out;
    if (o->kind == OAI_COMPLETION) {
        out = oai_buf_json(&text);
    } else {
        out = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(out, "content", json_array_size(calls) && !text.n ? json_null() : oai_buf_json(&text));
        if (reasoning.n) json_object_set_new(out, "reasoning_content", oai_buf_json(&reasoning));
        if (json_array_size(calls)) json_object_set(out, "tool_calls", calls);
    }
    json_decref(calls);
    sbuf_free(&text);
    sbuf_free(&reasoning);
    json_t *lp = o->n_logprobs >= 0 ? logprobs_json(a->rc->tok, o->kind, &o->lps) : NULL;
    return json_pack("{s:i, s:o, s:o, s:s}", "index", index, o->kind == OAI_COMPLETION ? "text" : "message", out,
                     "logprobs", lp ? lp : json_null(), "finish_reason", gen_finish_reason(a->g));
}

static int by_logprob_desc(const void *x, const void *y, void *ctx) {
    api_answer **as = ctx;
    double u = gen_logprob_sum(as[*(const int *)x]->g), v = gen_logprob_sum(as[*(const int *)y]->g);
    return u < v ? 1 : u > v ? -1 : *(const int *)x - *(const int *)y; /* ties: fork order */
}

/* The whole answer: each prompt's n choices, in prompt order: every
 * generation (per == n), or best_of's n of the highest cumulative logprob,
 * best first (vLLM's rule); choice indexes run 0 .. n x prompts - 1. */
static json_t *whole_answer(api_answer *a) {
    const oai_out *o = a->ctx;
    json_t *choices = json_array();
    int *order = xmalloc((size_t)o->per * sizeof *order);
    for (int pi = 0; pi < a->n_choices / o->per; pi++) {
        for (int k = 0; k < o->per; k++) order[k] = pi * o->per + k;
        if (o->per > o->n) qsort_r(order, (size_t)o->per, sizeof *order, by_logprob_desc, a->choices);
        for (int k = 0; k < o->n; k++) json_array_append_new(choices, choice_json(a->choices[order[k]], pi * o->n + k));
    }
    free(order);
    json_t *ans = answer_head(a, false);
    json_object_set_new(ans, "choices", choices);
    json_object_set_new(ans, "usage", usage_json(a));
    return ans;
}

/* ---- a stream (SSE) ---- */

/* A chunk's payload with nothing new: a completion's "" or an empty chat
 * delta. */
static json_t *empty_payload(const oai_out *o) { return o->kind == OAI_COMPLETION ? json_string("") : json_object(); }

/* One chunk of the stream, of the choice's index (lp: the poll's logprobs,
 * which ride on its first chunk). */
static void emit_choice(api_answer *a, json_t *text_or_delta, const char *finish) {
    oai_out *o = a->ctx;
    json_t *lp = o->lp;
    o->lp = NULL;
    json_t *c = answer_head(a, true);
    json_object_set_new(c, "choices", json_pack("[{s:i, s:o, s:o, s:o}]", "index", a->index, o->rt->payload_key,
                                                text_or_delta, "logprobs", lp ? lp : json_null(), "finish_reason",
                                                finish ? json_string(finish) : json_null()));
    api_emit(a, NULL, c);
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

/* A choice's last chunk: its finish reason. */
static void one_end(api_answer *a) {
    emit_lp(a);
    emit_choice(a, empty_payload(a->ctx), gen_finish_reason(a->g));
}

static json_t *one_finish(api_answer *a) {
    oai_out *o = a->ctx;
    if (!a->stream) return whole_answer(a);
    if (o->include_usage) {
        json_t *u = answer_head(a, true);
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", usage_json(a));
        api_emit(a, NULL, u);
    }
    sbuf_put(a->out, "data: [DONE]\n\n", 14);
    return NULL;
}

static void one_fail(api_answer *a, const char *msg, int status) {
    (void)status;
    emit_lp(a);
    char *s = oai_error_json(msg, "server_error", NULL, NULL);
    sbuf_printf(a->out, "data: %s\n\ndata: [DONE]\n\n", s);
    free(s);
}

/* n > 1, best_of > 1 or several prompts: each prompt is the body with that
 * prompt and n 1, parsed as a request of its own into p[i], started
 * a->forks times (best_of with logprobs on for the ranking). */
static int forks_parse(api_answer *a, json_t *body, oai_params *p, oai_error *err) {
    oai_out *o = a->ctx;
    oai_params whole = p[0];
    int n_prompts = MAX(whole.n_prompts, 1), k = 0;
    json_t *prompts = json_object_get(body, "prompt");
    for (; k < n_prompts; k++) {
        json_t *b = json_copy(body);
        if (b && o->kind == OAI_COMPLETION && whole.n_prompts > 1) json_object_set(b, "prompt", json_array_get(prompts, k));
        if (b) json_object_set_new(b, "n", json_integer(1));
        /* the whole request's logprob budget, not each fork's (oai.c) */
        if (b && whole.max_tokens > 0) json_object_set_new(b, "max_tokens", json_integer(whole.max_tokens));
        if (b && o->kind == OAI_COMPLETION) json_object_set_new(b, "best_of", json_integer(1));
        memset(&p[k], 0, sizeof p[k]);
        memset(err, 0, sizeof *err);
        int r = b ? oai_parse(b, o->kind, tok_n_vocab(a->rc->tok), &p[k], err) : err_set(&err->e, ERR_NOMEM, "out of memory");
        err->status = b ? 400 : 503;
        json_decref(b);
        if (r < 0) {
            oai_params_free(&p[k]);
            break;
        }
        if (o->per > o->n && p[k].n_logprobs < 0) p[k].n_logprobs = 0; /* the ranking needs each token's logprob */
        /* not streamed, the choices are read one after the other: the later
         * ones' tokens wait untaken, which is not a stalled client (their
         * --stall-timeout cancelled them under load: the soak with tenants) */
        p[k].no_stall = !whole.stream;
    }
    oai_params_free(&whole);
    if (k == n_prompts) return k;
    for (int i = 0; i < k; i++) oai_params_free(&p[i]);
    return -1;
}

static int one_parse(api_answer *a, http_exchange *x, json_t *body, oai_params *p, oai_error *err) {
    oai_kind kind = strstr(a->path, "chat") ? OAI_CHAT : OAI_COMPLETION;
    if (oai_parse(body, kind, tok_n_vocab(a->rc->tok), p, err) < 0) {
        err->status = 400; /* the body's fault, whatever it ran out of */
        err->e.code = ERR_INVALID;
        return -1;
    }
    oai_out *o = a->ctx = xcalloc(1, sizeof *o);
    o->kind = kind;
    o->rt = &routes[kind];
    o->include_usage = p->include_usage;
    o->n_logprobs = p->n_logprobs;
    o->n = p->n;
    o->per = a->forks = MAX(p->best_of, p->n);
    return o->per > 1 || p->n_prompts > 1 ? forks_parse(a, body, p, err) : 1;
}

/* Every choice's ctx: the first's (its parse's) copied; one id for all. */
static void one_start(api_answer *a, const oai_params *p) {
    (void)p;
    const oai_out *first = a->choices[0]->ctx;
    if (!a->ctx) {
        oai_out *o = a->ctx = xmalloc(sizeof *o);
        *o = *first;
        memset(&o->lps, 0, sizeof o->lps);
        o->lp = NULL;
    }
    oai_out *o = a->ctx;
    snprintf(o->id, sizeof o->id, "%s-%llx%06llx", o->rt->id_prefix, (unsigned long long)a->rc->created,
             gen_serial(a->choices[0]->g));
}

char *api_openai_error_json(int status, const char *msg, const char *param, const char *code) {
    return oai_error_json(msg, oai_error_type(status), param, code);
}

/* OpenAI's row: its names are the internal ones; chat and completions (the
 * route's path tells them apart) answer in chunks without event lines,
 * ending with [DONE]. */
const api_ops api_openai = {
    .name = "openai",
    .error_json = api_openai_error_json,
    .parse = one_parse,
    .start = one_start,
    .poll = one_poll,
    .begin = one_begin,
    .open = one_open,
    .delta = one_delta,
    .close = one_close,
    .polled = one_polled,
    .end = one_end,
    .finish = one_finish,
    .fail = one_fail,
    .free_ctx = oai_out_free,
    .empty = API_EMPTY_NONE,
    .framing = API_SSE,
    .stream_type = "text/event-stream",
    .stream_nomem = "data: {\"error\":{\"message\":\"" API_NOMEM_MSG "\","
                    "\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\ndata: [DONE]\n\n",
};
