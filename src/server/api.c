/*
 * api.c — the replies every API writes, through its api_ops row (api.h).
 */
#include "api.h"

#include "models.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>

const api_ops *api_of_path(const char *path) {
    if (!strcmp(path, "/v1/messages") || !strncmp(path, "/v1/messages/", 13)) return &api_anthropic;
    if (!strcmp(path, "/v1/responses") || !strncmp(path, "/v1/responses/", 14)) return &api_responses;
    if (!strcmp(path, "/api") || !strncmp(path, "/api/", 5)) return &api_ollama_api;
    return &api_openai;
}

void api_reply_error(const api_ops *a, http_exchange *x, int status, const char *msg, const char *param,
                     const char *code) {
    char *s = a->error_json(status, msg, param, code);
    http_set_reason(x, msg);
    http_reply(x, status, "application/json", s, strlen(s), status == 429 ? "Retry-After" : NULL,
               status == 429 ? "1" : NULL);
    free(s);
}

void api_error_text(const api_ops *a, const char *tagged, char *out, size_t cap) {
    size_t k = 0;
    if (!cap) return;
    for (const char *s = tagged; *s && k + 1 < cap;) {
        const char *end = *s == OAI_TAG ? strchr(s + 1, OAI_TAG) : NULL;
        if (!end) {
            if (*s != OAI_TAG) out[k++] = *s; /* an unpaired tag (in quoted client text) is dropped */
            s++;
            continue;
        }
        char path[256], name[256];
        size_t n = (size_t)(end - s - 1) < sizeof path - 1 ? (size_t)(end - s - 1) : sizeof path - 1;
        memcpy(path, s + 1, n);
        path[n] = 0;
        if (a->field) a->field(path, name, sizeof name);
        else memcpy(name, path, n + 1);
        for (const char *p = name; *p && k + 1 < cap; p++) out[k++] = *p;
        s = end + 1;
    }
    out[k] = 0;
}

size_t api_field_rename(const char *const (*rows)[2], size_t n_rows, const char **s, char *out, size_t cap) {
    for (size_t i = 0; i < n_rows; i++) {
        size_t n = strlen(rows[i][0]);
        const char *p = *s;
        if (!strncmp(p, rows[i][0], n) && (!p[n] || p[n] == '.' || p[n] == '[')) {
            int k = snprintf(out, cap, "%s", rows[i][1]);
            *s += n;
            return k < 0 ? 0 : (size_t)k < cap ? (size_t)k : cap - 1;
        }
    }
    return 0;
}

int api_bad(oai_error *err, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->e.msg, sizeof err->e.msg, fmt, ap);
    va_end(ap);
    err->e.code = ERR_INVALID;
    err->status = 400;
    err->code = NULL;
    err->field = param;
    return ERR_INVALID;
}

const char *api_error_param(const api_ops *a, const oai_error *e) {
    if (!e->field) return NULL;
    return a->param ? a->param(e->field) : e->field;
}

void api_reply_refusal(const api_ops *a, http_exchange *x, const oai_error *e) {
    /* out of memory is the server's state, not the client's mistake */
    if (e->e.code == ERR_NOMEM || oai_json_failed()) {
        api_reply_error(a, x, 503, "out of memory starting the request", NULL, NULL);
        return;
    }
    char msg[sizeof e->e.msg + 160];
    const char *param = api_error_param(a, e);
    size_t k = 0;
    if (a->param_in_message && param) k = (size_t)snprintf(msg, sizeof msg, "%.150s: ", param);
    api_error_text(a, e->e.msg, msg + k, sizeof msg - k);
    api_reply_error(a, x, e->status ? e->status : 400, msg, a->param_in_message ? NULL : param, e->code);
}

void api_reply_json(const api_ops *a, http_exchange *x, json_t *o) {
    char *s = !oai_json_failed() ? oai_json_dump(o) : NULL;
    if (s)
        http_reply(x, 200, "application/json", s, strlen(s), NULL, NULL);
    else
        api_reply_error(a, x, 500, "out of memory building the answer", NULL, NULL);
    free(s);
}

json_t *api_body_json(const api_ops *a, http_exchange *x) {
    char msg[400];
    json_t *o = oai_load_body(x, msg, sizeof msg);
    if (o && oai_json_failed()) { /* a parse that succeeded but dropped something */
        json_decref(o);
        o = NULL;
    }
    /* jansson reports a refused allocation as a syntax error */
    if (!o && oai_json_failed())
        api_reply_error(a, x, 503, "out of memory reading the request body", NULL, NULL);
    else if (!o)
        api_reply_error(a, x, 400, msg, NULL, "invalid_json");
    return o;
}

/* ---- the answer ---- */

void api_frame(sbuf *out, int framing, const char *type, json_t *data) {
    char *s = oai_json_dump(data);
    json_decref(data);
    if (!s) return; /* out of memory (counted: a stream fails) */
    if (framing == API_NDJSON) {
        sbuf_put(out, s, strlen(s));
        sbuf_put(out, "\n", 1);
    } else {
        if (type) {
            sbuf_put(out, "event: ", 7);
            sbuf_put(out, type, strlen(type));
            sbuf_put(out, "\n", 1);
        }
        sbuf_put(out, "data: ", 6);
        sbuf_put(out, s, strlen(s));
        sbuf_put(out, "\n\n", 2);
    }
    free(s);
}

void api_emit(api_answer *a, const char *type, json_t *data) {
    if (a->out) api_frame(a->out, a->api->framing, type, data);
    else json_decref(data); /* a whole answer: nothing streams */
}

static void seg_open(api_answer *a, api_seg_kind kind, const tc_event *call) {
    a->segs = xrealloc(a->segs, (size_t)(a->n_segs + 1) * sizeof *a->segs);
    api_seg *s = &a->segs[a->n_segs];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    if (call) {
        s->call_id = xstrdup(call->id ? call->id : "");
        s->name = xstrdup(call->name ? call->name : "");
        s->call_index = call->index;
    }
    a->open = a->n_segs++;
    a->api->open(a, a->open);
}

static void seg_delta(api_answer *a, const char *text, size_t n) {
    sbuf_put(&a->segs[a->open].text, text, n);
    a->api->delta(a, a->open, text, n);
}

void api_seg_close(api_answer *a, bool complete) {
    int i = a->open;
    if (i < 0) return;
    a->segs[i].complete = complete;
    a->open = -1;
    a->api->close(a, i);
}

/* Closes the open segment because `next` comes: a call that text follows
 * broke (toolcall.h), anything else is complete. */
static void seg_close_for(api_answer *a, api_seg_kind next) {
    if (a->open >= 0) api_seg_close(a, !(a->segs[a->open].kind == API_SEG_CALL && next != API_SEG_CALL));
}

static void seg_text(api_answer *a, api_seg_kind kind, const char *text, size_t n) {
    if (n == 0) return;
    if (a->open < 0 || a->segs[a->open].kind != kind) {
        seg_close_for(a, kind);
        seg_open(a, kind, NULL);
    }
    seg_delta(a, text, n);
}

/* The new events into segments (consecutive fragments of one kind become
 * one delta). */
static void answer_events(api_answer *a) {
    tc_events *ev = &a->ev;
    for (int i = 0; i < ev->n;) {
        tc_event *e = &ev->v[i];
        if (e->kind == TC_EV_CALL_START) {
            seg_close_for(a, API_SEG_CALL);
            seg_open(a, API_SEG_CALL, e);
            i++;
            continue;
        }
        sbuf b = {0};
        int j = i;
        for (; j < ev->n && ev->v[j].kind == e->kind && ev->v[j].index == e->index; j++)
            sbuf_put(&b, ev->v[j].text, ev->v[j].n);
        if (e->kind == TC_EV_CONTENT) {
            seg_text(a, API_SEG_TEXT, b.p, b.n);
        } else if (e->kind == TC_EV_REASONING) {
            seg_text(a, API_SEG_REASONING, b.p, b.n);
        } else if (a->open >= 0 && a->segs[a->open].kind == API_SEG_CALL && a->segs[a->open].call_index == e->index &&
                   b.n) {
            seg_delta(a, b.p, b.n);
        }
        sbuf_free(&b);
        i = j;
    }
    tc_events_clear(ev);
}

static bool answer_poll(api_answer *a, int timeout_ms) {
    bool done = a->api->poll ? a->api->poll(a, timeout_ms) : gen_poll(a->g, timeout_ms, &a->ev, NULL);
    answer_events(a);
    if (!done && a->api->polled) a->api->polled(a);
    return done;
}

/* The end of a finished generation: the open segment closed (a call
 * complete when the parser completed it, text when the output was not
 * cut), the empty-answer rule, then a stream's end of the choice. */
static void answer_end(api_answer *a) {
    bool cut = gen_cut(a->g);
    if (a->open >= 0) {
        const api_seg *s = &a->segs[a->open];
        api_seg_close(a, s->kind == API_SEG_CALL ? s->call_index < gen_n_calls(a->g) : !cut);
    }
    bool answered = a->n_segs > 0;
    if (a->api->empty == API_EMPTY_IF_UNANSWERED) {
        answered = false;
        for (int i = 0; i < a->n_segs; i++)
            answered |= a->segs[i].kind == API_SEG_TEXT || (a->segs[i].kind == API_SEG_CALL && a->segs[i].complete);
    }
    if (!answered && a->api->empty != API_EMPTY_NONE) {
        seg_open(a, API_SEG_TEXT, NULL);
        api_seg_close(a, !cut);
    }
    a->done = true;
    if (a->stream && a->api->end) a->api->end(a);
}

/* "generation failed: ..." of a choice whose generation failed; *status
 * the HTTP status to answer it with. */
static void failed_msg(const api_answer *a, char *msg, size_t cap, int *status) {
    snprintf(msg, cap, "generation failed: %s", gen_error(a->g, status));
}

static api_answer *answer_new(const api_ops *api, routes_ctx *rc, int64_t t0, const char *path) {
    api_answer *a = xcalloc(1, sizeof *a);
    a->api = api;
    a->rc = rc;
    a->t0_ns = t0;
    a->path = path;
    a->open = -1;
    return a;
}

static void answer_free(api_answer *a) {
    for (int i = 0; i < a->n_segs; i++) {
        sbuf_free(&a->segs[i].text);
        free(a->segs[i].call_id);
        free(a->segs[i].name);
    }
    free(a->segs);
    tc_events_free(&a->ev);
    if (a->ctx) (a->api->free_ctx ? a->api->free_ctx : free)(a->ctx);
    free(a);
}

/* Frees every choice of the answer (a: choices[0]). */
static void answers_free(api_answer *a) {
    for (int i = 1; i < a->n_choices; i++) answer_free(a->choices[i]);
    free(a->choices);
    answer_free(a);
}

static void cancel_all(api_answer *a) {
    for (int i = 0; i < a->n_choices; i++) gen_cancel(a->choices[i]->g);
}

/* Every choice read to its end in order (the engine runs them together),
 * then one answer; a failed one or a client that leaves fails it, the
 * others cancelled. */
static void answer_whole(api_answer *a, http_exchange *x) {
    int status = 200;
    char msg[320];
    for (int i = 0; i < a->n_choices && status == 200; i++) {
        api_answer *c = a->choices[i];
        bool done = false;
        while (!done) {
            done = answer_poll(c, 20);
            if (!done && http_client_gone(x)) break;
        }
        if (!done) {
            status = 499;
            snprintf(msg, sizeof msg, "client closed the connection");
        } else if (!gen_finish_reason(c->g)) {
            failed_msg(c, msg, sizeof msg, &status);
        } else {
            answer_end(c);
        }
    }
    if (status != 200) {
        cancel_all(a);
        api_reply_error(a->api, x, status, msg, NULL, NULL);
    } else {
        json_t *r = a->api->finish(a);
        if (oai_json_failed()) status = 500;
        api_reply_json(a->api, x, r);
        json_decref(r);
    }
    for (int i = 0; i < a->n_choices; i++) gen_done(a->choices[i]->g, "POST", status, false);
    answers_free(a);
}

/* Out of memory while building this call's events (one may lack a member,
 * or be missing): they are dropped, the stream ends with the API's error
 * event, and the generations are cancelled. */
static int stream_fail(api_answer *a, sbuf *out, size_t keep) {
    out->n = keep;
    sbuf_put(out, a->api->stream_nomem, strlen(a->api->stream_nomem));
    for (int i = 0; i < a->n_choices; i++) a->choices[i]->out = NULL;
    a->failed = true;
    cancel_all(a);
    return 0;
}

static int stream_next(void *sctx, sbuf *out) {
    api_answer *a = sctx;
    oai_json_mark();
    size_t keep = out->n;
    bool first = !a->started, wrote = false;
    a->started = true;
    for (int i = 0; first && a->api->begin && i < a->n_choices; i++) {
        a->choices[i]->out = out;
        wrote |= a->api->begin(a->choices[i]);
        a->choices[i]->out = NULL;
    }
    if (wrote) return !oai_json_failed() ? 1 : stream_fail(a, out, keep);
    /* the engine steps every choice together: wait on the first that runs,
     * then take what the others have */
    int waited = 0, n_done = 0;
    for (int i = 0; i < a->n_choices; i++) {
        api_answer *c = a->choices[i];
        if (c->done) {
            n_done++;
            continue;
        }
        c->out = out;
        bool done = answer_poll(c, waited++ ? 0 : 20);
        if (done && !gen_finish_reason(c->g)) { /* one failed: the answer fails */
            char msg[320];
            int status = 500;
            failed_msg(c, msg, sizeof msg, &status);
            a->api->fail(c, msg, status);
            c->out = NULL;
            cancel_all(a);
            return !oai_json_failed() ? 0 : stream_fail(a, out, keep);
        }
        if (done) answer_end(c), n_done++;
        c->out = NULL;
        if (oai_json_failed()) return stream_fail(a, out, keep);
    }
    if (n_done < a->n_choices) return 1;
    a->out = out;
    json_decref(a->api->finish(a));
    a->out = NULL;
    return !oai_json_failed() ? 0 : stream_fail(a, out, keep);
}

static void stream_block(void *sctx, bool blocked) {
    api_answer *a = sctx;
    for (int i = 0; i < a->n_choices; i++) gen_reader_blocked(a->choices[i]->g, blocked);
}

static void stream_done(void *sctx, bool completed) {
    api_answer *a = sctx;
    for (int i = 0; i < a->n_choices; i++) {
        if (!completed) gen_cancel(a->choices[i]->g);
        gen_done(a->choices[i]->g, "POST", !completed ? 499 : a->failed ? 500 : 200, true);
    }
    answers_free(a);
}

int api_parsed(const api_ops *a, http_exchange *x, int r, oai_params *p, const oai_error *err) {
    if (r > 0 && oai_json_failed()) { /* read with a part missing */
        for (int i = 0; i < r; i++) oai_params_free(&p[i]);
        r = -1;
    }
    /* out of memory is the server's state, not the client's mistake */
    if (r < 0 && oai_json_failed()) api_reply_error(a, x, 503, "out of memory reading the request", NULL, NULL);
    else if (r < 0) api_reply_refusal(a, x, err);
    return r;
}

/* Starts the generation of every choice: n_p parameter sets, a->forks of
 * each. False when one was refused (the started ones then end with its
 * status, and it is answered). */
static bool answer_start(api_answer *a, http_exchange *x, oai_params *p, int n_p) {
    int forks = MAX(a->forks, 1), total = n_p * forks;
    oai_error err;
    a->choices = xcalloc((size_t)total, sizeof *a->choices);
    uint64_t seed0 = 0;
    for (int i = 0; i < total; i++) {
        oai_params *q = &p[i / forks];
        api_answer *c = a->choices[i] = i ? answer_new(a->api, a->rc, a->t0_ns, a->path) : a;
        a->n_choices = i + 1;
        c->index = i;
        c->stream = q->stream;
        if (i % forks == 0) seed0 = q->sp.seed;
        if (q->seed_set) q->sp.seed = seed0 + (uint64_t)(i % forks); /* forks differ, reproducibly */
        if (!(c->g = gen_start(a->rc, x, q, a->path, a->t0_ns, &err))) break;
        if (i) models_retain(a->rc); /* each generation's gen_done releases the model */
    }
    for (int i = 0; i < a->n_choices; i++) {
        a->choices[i]->choices = a->choices;
        a->choices[i]->n_choices = a->n_choices;
    }
    if (a->choices[a->n_choices - 1]->g) return true;
    for (int i = 0; i < a->n_choices - 1; i++) {
        gen_cancel(a->choices[i]->g);
        gen_done(a->choices[i]->g, "POST", err.e.code == ERR_NOMEM ? 503 : err.status, false);
    }
    api_reply_refusal(a->api, x, &err);
    return false;
}

bool api_serve(const api_ops *api, routes_ctx *rc, http_exchange *x, const char *path) {
    int64_t t0 = clock_ns();
    json_t *body = api_body_json(api, x);
    if (!body) return false;
    api_answer *a = answer_new(api, rc, t0, path);
    oai_params p[OAI_MAX_PROMPTS];
    oai_error err;
    int n_p = api->parse(a, x, body, p, &err);
    json_decref(body);
    n_p = api_parsed(api, x, n_p, p, &err);
    bool started = n_p > 0 && answer_start(a, x, p, n_p);
    bool reached = started || (a->n_choices > 1);
    if (started) {
        gen_add_headers(a->g, x);
        if (oai_json_failed()) { /* a prompt was rendered with a part missing */
            cancel_all(a);
            for (int i = 0; i < a->n_choices; i++) gen_done(a->choices[i]->g, "POST", 503, a->stream);
            api_reply_error(api, x, 503, "out of memory starting the request", NULL, NULL);
            started = false;
        }
    }
    for (int i = 0; started && api->start && i < a->n_choices; i++)
        api->start(a->choices[i], &p[i / MAX(a->forks, 1)]);
    for (int i = 0; i < n_p; i++) oai_params_free(&p[i]);
    if (!started) {
        answers_free(a);
        return reached;
    }
    if (a->stream)
        http_reply_stream(x, 200, api->stream_type, stream_next, stream_done, stream_block, a);
    else
        answer_whole(a, x);
    return true;
}
