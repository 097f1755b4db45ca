/*
 * api.c — the replies every API writes, through its api_ops row (api.h).
 */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
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
