/*
 * api.c — the replies every API writes, through its api_ops row (api.h).
 */
#include "api.h"

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

int api_bad(api_fail *f, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->status = 400;
    f->param = param;
    return -1;
}

void api_fail_error(const api_fail *f, oai_error *err) {
    memset(err, 0, sizeof *err);
    err->status = f->status;
    err->code = f->code;
    err->field = f->param;
    err_set(&err->e, f->status == 503 ? ERR_NOMEM : ERR_INVALID, "%s", f->msg);
}

const char *api_error_param(const api_ops *a, const oai_error *e) {
    if (!e->field) return NULL;
    return a->param ? a->param(e->field) : e->field;
}

void api_reply_refusal(const api_ops *a, http_exchange *x, const oai_error *e, unsigned long nomem0) {
    /* out of memory is the server's state, not the client's mistake */
    if (e->e.code == ERR_NOMEM || oai_json_nomem() != nomem0) {
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

void api_reply_json(const api_ops *a, http_exchange *x, int status, json_t *o, unsigned long f0) {
    char *s = oai_json_nomem() == f0 ? oai_json_dump(o) : NULL;
    if (s)
        http_reply(x, status, "application/json", s, strlen(s), NULL, NULL);
    else
        api_reply_error(a, x, 500, "out of memory building the answer", NULL, NULL);
    free(s);
}

json_t *api_body_json(const api_ops *a, http_exchange *x) {
    char msg[400];
    unsigned long f0 = oai_json_nomem();
    json_t *o = oai_load_body(x, msg, sizeof msg);
    if (o && oai_json_nomem() != f0) { /* a parse that succeeded but dropped something */
        json_decref(o);
        o = NULL;
    }
    /* jansson reports a refused allocation as a syntax error */
    if (!o && oai_json_nomem() != f0)
        api_reply_error(a, x, 503, "out of memory reading the request body", NULL, NULL);
    else if (!o)
        api_reply_error(a, x, 400, msg, NULL, "invalid_json");
    return o;
}

/* ---- the answer ---- */

void api_emit(api_answer *a, const char *type, json_t *data) {
    char *s = a->out ? oai_json_dump(data) : NULL;
    json_decref(data);
    if (!s) return; /* not streaming, or out of memory (counted: the stream fails) */
    if (a->api->framing == API_NDJSON) {
        http_buf_add(a->out, s, strlen(s));
        http_buf_add(a->out, "\n", 1);
    } else {
        if (type) {
            http_buf_add(a->out, "event: ", 7);
            http_buf_add(a->out, type, strlen(type));
            http_buf_add(a->out, "\n", 1);
        }
        http_buf_add(a->out, "data: ", 6);
        http_buf_add(a->out, s, strlen(s));
        http_buf_add(a->out, "\n\n", 2);
    }
    free(s);
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
    http_buf_add(&a->segs[a->open].text, text, n);
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
        http_buf b = {0};
        int j = i;
        for (; j < ev->n && ev->v[j].kind == e->kind && ev->v[j].index == e->index; j++)
            http_buf_add(&b, ev->v[j].text, ev->v[j].n);
        if (e->kind == TC_EV_CONTENT) {
            seg_text(a, API_SEG_TEXT, b.p, b.n);
        } else if (e->kind == TC_EV_REASONING) {
            seg_text(a, API_SEG_REASONING, b.p, b.n);
        } else if (a->open >= 0 && a->segs[a->open].kind == API_SEG_CALL && a->segs[a->open].call_index == e->index &&
                   b.n) {
            seg_delta(a, b.p, b.n);
        }
        http_buf_free(&b);
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
 * cut), the empty-answer rule, then the API's finish. */
static json_t *answer_finish(api_answer *a) {
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
    return a->api->finish(a);
}

static void answer_free(api_answer *a) {
    for (int i = 0; i < a->n_segs; i++) {
        http_buf_free(&a->segs[i].text);
        free(a->segs[i].call_id);
        free(a->segs[i].name);
    }
    free(a->segs);
    tc_events_free(&a->ev);
    if (a->ctx) (a->api->free_ctx ? a->api->free_ctx : free)(a->ctx);
    free(a);
}

static void answer_whole(api_answer *a, http_exchange *x) {
    bool done = false;
    while (!done) {
        done = answer_poll(a, 20);
        if (!done && http_client_gone(x)) break;
    }
    int status = 200;
    if (!done) {
        gen_cancel(a->g);
        status = 499;
        api_reply_error(a->api, x, 499, "client closed the connection", NULL, NULL);
    } else if (!gen_finish_reason(a->g)) {
        char msg[320];
        snprintf(msg, sizeof msg, "generation failed: %s", gen_error(a->g, &status));
        api_reply_error(a->api, x, status, msg, NULL, NULL);
    } else {
        json_t *r = answer_finish(a);
        if (oai_json_nomem() != a->nomem0) status = 500;
        api_reply_json(a->api, x, 200, r, a->nomem0);
        json_decref(r);
    }
    gen_done(a->g, "POST", status, false);
    answer_free(a);
}

/* Out of memory while building this call's events (one may lack a member,
 * or be missing): they are dropped, the stream ends with the API's error
 * event, and the generation is cancelled. */
static int stream_fail(api_answer *a, http_buf *out, size_t keep) {
    out->n = keep;
    http_buf_add(out, a->api->stream_nomem, strlen(a->api->stream_nomem));
    a->out = NULL;
    a->failed = true;
    gen_cancel(a->g);
    return 0;
}

static int stream_next(void *sctx, http_buf *out) {
    api_answer *a = sctx;
    unsigned long f0 = oai_json_nomem();
    size_t keep = out->n;
    a->out = out;
    bool first = !a->started;
    a->started = true;
    if (first && a->api->begin && a->api->begin(a)) {
        a->out = NULL;
        return oai_json_nomem() == f0 ? 1 : stream_fail(a, out, keep);
    }
    bool done = answer_poll(a, 20);
    if (done) {
        if (!gen_finish_reason(a->g)) {
            char msg[320];
            int status = 500;
            snprintf(msg, sizeof msg, "generation failed: %s", gen_error(a->g, &status));
            a->api->fail(a, msg, status);
        } else {
            json_decref(answer_finish(a));
        }
    }
    if (oai_json_nomem() != f0) return stream_fail(a, out, keep);
    a->out = NULL;
    return done ? 0 : 1;
}

static void stream_block(void *sctx, bool blocked) { gen_reader_blocked(((api_answer *)sctx)->g, blocked); }

static void stream_done(void *sctx, bool completed) {
    api_answer *a = sctx;
    if (!completed) gen_cancel(a->g);
    gen_done(a->g, "POST", !completed ? 499 : a->failed ? 500 : 200, true);
    answer_free(a);
}

bool api_serve(const api_ops *api, routes_ctx *rc, http_exchange *x, const char *path) {
    int64_t t0 = clock_ns();
    unsigned long f0 = oai_json_nomem();
    json_t *body = api_body_json(api, x);
    if (!body) return false;
    api_answer *a = xcalloc(1, sizeof *a);
    a->api = api;
    a->rc = rc;
    a->t0_ns = t0;
    a->path = path;
    a->open = -1;
    a->nomem0 = f0;
    oai_params p;
    oai_error err;
    int r = api->parse(a, x, body, &p, &err);
    json_decref(body);
    if (r == 2) { /* answered, and counted and logged by its generations */
        answer_free(a);
        return true;
    }
    if (r > 0 && oai_json_nomem() != f0) { /* read with a part missing */
        oai_params_free(&p);
        r = -1;
    }
    if (r < 0) {
        /* out of memory is the server's state, not the client's mistake */
        if (oai_json_nomem() != f0) api_reply_error(api, x, 503, "out of memory reading the request", NULL, NULL);
        else api_reply_refusal(api, x, &err, f0);
    }
    if (r <= 0) {
        answer_free(a);
        return false;
    }
    gen_fail gf;
    a->g = gen_start(rc, x, &p, path, t0, &gf);
    if (!a->g) {
        api_reply_refusal(api, x, &gf.err, f0);
        oai_params_free(&p);
        answer_free(a);
        return false;
    }
    gen_add_headers(a->g, x);
    a->stream = p.stream;
    if (oai_json_nomem() != f0) { /* the prompt was rendered with a part missing */
        gen_cancel(a->g);
        gen_done(a->g, "POST", 503, p.stream);
        api_reply_error(api, x, 503, "out of memory starting the request", NULL, NULL);
        oai_params_free(&p);
        answer_free(a);
        return true;
    }
    if (api->start) api->start(a, &p);
    oai_params_free(&p);
    if (a->stream)
        http_reply_stream(x, 200, api->stream_type, stream_next, stream_done, stream_block, a);
    else
        answer_whole(a, x);
    return true;
}
