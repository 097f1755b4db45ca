/*
 * api_responses.c — the OpenAI Responses API (apis.h; docs/server.md
 * "OpenAI Responses API"):
 *
 *   POST   /v1/responses       items ─▶ OpenAI chat body ─▶ oai_parse ─▶
 *                              gen_start ─▶ events ─▶ output items (JSON or SSE)
 *   GET    /v1/responses/ID    a stored response object
 *   DELETE /v1/responses/ID    forgets it
 *
 * Place in the flow: server/, on the HTTP thread of the request, dispatched
 * by routes.c after the API key check. The request is translated into a chat
 * body and goes through oai_parse, so every rule of the chat route (ranges,
 * tools, schemas, constrained decoding, reasoning) holds here too:
 *
 *   instructions                  ─▶ a system message, first
 *   previous_response_id          ─▶ the stored conversation of that response
 *                                    (its input and output items, and those
 *                                    of the responses it chained to)
 *   input: "text"                 ─▶ a user message
 *     {role, content}             ─▶ a message (content parts joined)
 *     reasoning                   ─▶ reasoning_content of the next assistant
 *                                    message (templates such as Qwen3's
 *                                    render it; the prefix cache then matches)
 *     function_call               ─▶ tool_calls of an assistant message
 *                                    (consecutive calls share one message)
 *     function_call_output        ─▶ a tool message
 *   tools [{type:"function",name,...}] ─▶ chat's {type, function:{...}}
 *   tool_choice {type, name}      ─▶ {type, function:{name}}
 *   text.format                   ─▶ response_format
 *   max_output_tokens             ─▶ max_tokens
 *   reasoning.effort              ─▶ chat_template_kwargs.enable_thinking
 *                                    ("none": false, another effort: true;
 *                                    ignored by models without reasoning),
 *                                    and reasoning_effort (gpt-oss's template)
 *
 * The answer is built by one state machine for both modes (so a stream and
 * a whole answer agree by construction). The generate.h events open and
 * fill output items; at most one item is open at a time:
 *
 *   REASONING ─▶ reasoning item   {type:"reasoning", content:[reasoning_text]}
 *   CONTENT   ─▶ message item     {type:"message", content:[output_text]}
 *   CALL_START, CALL_ARGS ─▶ function_call item {call_id, name, arguments}
 *
 * An event of another kind closes the open item. Content after a call means
 * the call broke (toolcall.h: its raw text follows as content): the call item
 * closes "incomplete"; at the end the open call is complete when its index is
 * below gen_n_calls. A response with neither a message nor a complete call
 * gets an empty message, so that clients always find the text. max_tokens
 * reached: status "incomplete", reason "max_output_tokens".
 *
 * Streaming (SSE, "event: TYPE\ndata: {...}" with sequence_number from 0):
 *   response.created, response.in_progress,
 *   per item: response.output_item.added, [response.content_part.added],
 *     response.output_text.delta | response.reasoning_text.delta |
 *     response.function_call_arguments.delta ...,
 *     response.output_text.done | response.reasoning_text.done |
 *     response.function_call_arguments.done, [response.content_part.done],
 *     response.output_item.done
 *   response.completed | response.incomplete | response.failed
 *
 * The store keeps finished responses (unless "store": false) for
 * previous_response_id and GET: at most RESP_STORE_MAX entries and
 * --responses-store bytes, each for RESP_STORE_TTL_S; past a bound the least
 * recently used entry of the identity (API key) holding the most bytes goes,
 * so a client that floods the store evicts its own entries first. One
 * mutex, shared by the HTTP threads. An entry holds the response as sent
 * (text) and the conversation as items; the item objects are shared between
 * the entries of one chain (jansson's reference counts are atomic) and
 * never modified once stored.
 *
 * Isolation: a response id is "resp_" and 128 bits from the OS's generator
 * (os_random), and an entry is visible only to the API key that created it
 * (GET, DELETE, previous_response_id by another key: 404, as for an unknown
 * id). Without --api-key every client is one identity: the ids are the
 * protection.
 *
 * Errors are OpenAI error objects naming the field
 * ("input[2].type: unsupported item type 'web_search_call'"); an unknown
 * previous_response_id is a 404.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/utf8.h"
#include "api.h"
#include "apis.h"
#include "generate.h"
#include "jfield.h"
#include "oai.h"

#define RESP_STORE_MAX 1000
#define RESP_STORE_TTL_S 3600
/* OpenAI's bounds of `metadata`: 16 pairs, keys of at most 64 characters,
 * values of at most 512. */
#define RESP_METADATA_MAX 16
#define RESP_METADATA_KEY_MAX 64
#define RESP_METADATA_VALUE_MAX 512

/* ---- the store ---- */

typedef struct resp_entry {
    struct resp_entry *prev, *next; /* most recently used first */
    char *id;
    int owner;       /* routes_key_index of the request that created it */
    size_t bytes;    /* what it holds: its text and its history's */
    int64_t t_ns;    /* clock_ns() when stored */
    char *json;      /* the response object as it was sent */
    json_t *history; /* the conversation: input items and output items */
} resp_entry;

struct resp_store {
    pthread_mutex_t mu;
    resp_entry *head, *tail;
    int n;
    size_t bytes;    /* the entries' bytes */
    size_t max_bytes; /* their bound */
};

resp_store *resp_store_new(size_t max_bytes) {
    resp_store *s = xcalloc(1, sizeof *s);
    s->max_bytes = max_bytes ? max_bytes : RESP_STORE_DEFAULT_BYTES;
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

static void entry_free(resp_entry *e) {
    free(e->id);
    free(e->json);
    json_decref(e->history);
    free(e);
}

static void store_unlink(resp_store *s, resp_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else s->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else s->tail = e->prev;
    e->prev = e->next = NULL;
    s->n--;
    s->bytes -= e->bytes;
}

static void store_push_front(resp_store *s, resp_entry *e) {
    e->prev = NULL;
    e->next = s->head;
    if (s->head) s->head->prev = e;
    s->head = e;
    if (!s->tail) s->tail = e;
    s->n++;
    s->bytes += e->bytes;
}

/* Drops the entries older than the TTL (the list is in use order, not age
 * order: all are looked at; there are at most RESP_STORE_MAX). */
static void store_expire_locked(resp_store *s) {
    int64_t now = clock_ns();
    for (resp_entry *e = s->head, *next; e; e = next) {
        next = e->next;
        if (now - e->t_ns > (int64_t)RESP_STORE_TTL_S * 1000000000LL) {
            store_unlink(s, e);
            entry_free(e);
        }
    }
}

/* The entry `id` of `owner` (another owner's is not found). */
static resp_entry *store_find_locked(resp_store *s, int owner, const char *id) {
    for (resp_entry *e = s->head; e; e = e->next)
        if (e->owner == owner && !strcmp(e->id, id)) return e;
    return NULL;
}

/* The entry to evict: the least recently used of the owner that holds the
 * most bytes (a flooding client pays first). O(entries x owners), with at
 * most RESP_STORE_MAX entries. */
static resp_entry *store_victim_locked(resp_store *s) {
    int top = 0;
    size_t top_bytes = 0;
    for (resp_entry *e = s->head; e; e = e->next) {
        bool seen = false;
        for (resp_entry *f = s->head; f != e && !seen; f = f->next) seen = f->owner == e->owner;
        if (seen) continue;
        size_t b = 0;
        for (resp_entry *f = e; f; f = f->next) b += f->owner == e->owner ? f->bytes : 0;
        if (b > top_bytes || !top_bytes) top = e->owner, top_bytes = b;
    }
    for (resp_entry *e = s->tail; e; e = e->prev)
        if (e->owner == top) return e;
    return s->tail;
}

/* Keeps a response of `owner` (json and history taken). */
static void store_put(resp_store *s, int owner, const char *id, char *json, json_t *history) {
    resp_entry *e = xcalloc(1, sizeof *e);
    e->id = xstrdup(id);
    e->owner = owner;
    e->t_ns = clock_ns();
    e->json = json;
    e->history = history;
    /* the history's items are shared along a chain: counting each entry's
     * whole conversation overcounts, which only makes the bound safer */
    e->bytes = strlen(json) + json_dumpb(history, NULL, 0, JSON_COMPACT) + sizeof *e;
    pthread_mutex_lock(&s->mu);
    store_expire_locked(s);
    while (s->n && (s->n >= RESP_STORE_MAX || s->bytes + e->bytes > s->max_bytes)) {
        resp_entry *old = store_victim_locked(s);
        store_unlink(s, old);
        entry_free(old);
    }
    store_push_front(s, e);
    pthread_mutex_unlock(&s->mu);
}

void resp_store_stats(resp_store *s, int *n, size_t *bytes) {
    pthread_mutex_lock(&s->mu);
    *n = s->n;
    *bytes = s->bytes;
    pthread_mutex_unlock(&s->mu);
}

/* Looks a response of `owner` up (and marks it used): a copy of its JSON
 * text and/or a new reference to its history. False when unknown, expired
 * or another owner's. */
static bool store_get(resp_store *s, int owner, const char *id, char **json, json_t **history) {
    pthread_mutex_lock(&s->mu);
    store_expire_locked(s);
    resp_entry *e = store_find_locked(s, owner, id);
    if (e) {
        store_unlink(s, e);
        store_push_front(s, e);
        if (json) *json = xstrdup(e->json);
        if (history) *history = json_incref(e->history);
    }
    pthread_mutex_unlock(&s->mu);
    return e != NULL;
}

static bool store_delete(resp_store *s, int owner, const char *id) {
    pthread_mutex_lock(&s->mu);
    store_expire_locked(s);
    resp_entry *e = store_find_locked(s, owner, id);
    if (e) {
        store_unlink(s, e);
        entry_free(e);
    }
    pthread_mutex_unlock(&s->mu);
    return e != NULL;
}

void resp_store_free(resp_store *s) {
    if (!s) return;
    for (resp_entry *e = s->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- replies ---- */

/* The Responses name of an internal (OpenAI chat) field path:
 * response_format(.json_schema) -> text.format, max_tokens ->
 * max_output_tokens, tools[N].function.X -> tools[N].X (likewise a
 * message's tool_calls), tool_choice.function.name -> tool_choice.name. */
static void field_name(const char *path, char *out, size_t cap) {
    static const char *const pre[][2] = {{"response_format.json_schema.schema", "text.format.schema"},
                                         {"response_format.json_schema", "text.format"},
                                         {"response_format", "text.format"},
                                         {"tool_choice.function.name", "tool_choice.name"},
                                         {"max_tokens", "max_output_tokens"}};
    const char *s = path;
    size_t k = api_field_rename(pre, ARRAY_LEN(pre), &s, out, cap);
    while (*s && k + 1 < cap) {
        if (!strncmp(s, "].function.", 11)) { /* a tool's or a call's fields are the item's own */
            out[k++] = ']';
            s += 10;
        } else {
            out[k++] = *s++;
        }
    }
    out[k < cap ? k : cap - 1] = 0;
}

/* The field an error names, as the Responses request names it. */
static const char *param_name(const char *field) {
    if (!strcmp(field, "messages")) return "input";
    if (!strcmp(field, "max_tokens")) return "max_output_tokens";
    if (!strcmp(field, "response_format")) return "text.format";
    return field;
}


static void reply_error(http_exchange *x, int status, const char *msg, const char *param, const char *code) {
    api_reply_error(&api_responses, x, status, msg, param, code);
}



/* ---- request translation: Responses body -> OpenAI chat body ---- */

/* What the translation keeps for the answer. */
typedef struct resp_req {
    json_t *chat;     /* the chat body for oai_parse                          */
    json_t *history;  /* the conversation so far as items: the previous
                         response's, then this request's input (normalized) */
    /* echoed in the response object (new references) */
    json_t *tools, *tool_choice, *text, *reasoning, *metadata;
    char *instructions, *previous_id, *user;
    long long max_output_tokens; /* -1: none */
    bool store, parallel;
    int owner;        /* routes_key_index: whose stored responses it sees */
} resp_req;

static void resp_req_free(resp_req *rq) {
    json_decref(rq->chat);
    json_decref(rq->history);
    json_decref(rq->tools);
    json_decref(rq->tool_choice);
    json_decref(rq->text);
    json_decref(rq->reasoning);
    json_decref(rq->metadata);
    free(rq->instructions);
    free(rq->previous_id);
    free(rq->user);
    memset(rq, 0, sizeof *rq);
}

/* The chat messages being built from items. */
typedef struct conv {
    json_t *msgs;       /* chat messages                                      */
    json_t *asst;       /* the last message, when it is an assistant message
                           that following calls join (borrowed), else NULL   */
    json_t *call_ids;   /* the call_ids seen so far (an object used as a set) */
    sbuf reasoning; /* reasoning waiting for the next assistant message   */
} conv;

/* The Responses API writes paths as the body has them (input[2].content),
 * and an error reports its top-level field as param. */
static const jf_style names = {.quote = JF_COLON, .params = true};

/* The text of a content at w (an item's content, a call output's output):
 * a string, or the text of its parts joined. */
static int content_text(json_t *c, const jf *w, sbuf *out) {
    if (json_is_string(c)) {
        sbuf_put(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c)) return jf_fail(w, NULL, "must be a string or an array of content parts");
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *part = json_array_get(c, j), *text;
        jf pj = jf_index(w, j);
        const char *t;
        if (jf_typed(&pj, part, &t) < 0) return ERR_INVALID;
        const char *key = !strcmp(t, "refusal") ? "refusal" : "text";
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") && strcmp(t, "refusal"))
            return jf_fail(&pj, "type", "'%.64s' is not supported (this server takes text only)", t);
        if (jf_get(&pj, part, key, JF_STRING | JF_REQUIRED, NULL, &text) < 0) return ERR_INVALID;
        sbuf_put(out, json_string_value(text), json_string_length(text));
    }
    return 0;
}

/* A new assistant message (with the reasoning waiting for it). */
static json_t *conv_assistant(conv *c, json_t *content) {
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content", content);
    if (c->reasoning.n) json_object_set_new(m, "reasoning_content", oai_buf_json(&c->reasoning));
    c->reasoning.n = 0;
    /* out of memory (the append freed m): NULL, and the request fails with
     * 503 by the out-of-memory count; never a freed message kept in c->asst */
    if (json_array_append_new(c->msgs, m) < 0) m = NULL;
    c->asst = m;
    return m;
}

static int conv_message(conv *c, json_t *it, const jf *w) {
    json_t *role, *content;
    if (jf_get(w, it, "role", JF_STRING | JF_REQUIRED, NULL, &role) < 0) return ERR_INVALID;
    const char *r = json_string_value(role);
    if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "assistant"))
        return jf_fail(w, "role", "must be \"user\", \"system\", \"developer\" or \"assistant\"; got \"%.40s\"", r);
    if (jf_get(w, it, "content", JF_NEEDED, NULL, &content) < 0) return ERR_INVALID;
    sbuf text = {0};
    jf cw = jf_key(w, "content");
    if (content_text(content, &cw, &text) < 0) {
        sbuf_free(&text);
        return ERR_INVALID;
    }
    if (!strcmp(r, "assistant")) {
        conv_assistant(c, oai_buf_json(&text));
    } else {
        json_array_append_new(c->msgs, json_pack("{s:s, s:o}", "role", r, "content", oai_buf_json(&text)));
        c->asst = NULL;
        c->reasoning.n = 0;
    }
    sbuf_free(&text);
    return 0;
}

static int conv_call(conv *c, json_t *it, const jf *w) {
    json_t *status = oai_field(it, "status"), *id, *name, *args;
    /* a call cut by max_output_tokens (or broken) was never a call */
    if (json_is_string(status) && !strcmp(json_string_value(status), "incomplete")) return 0;
    if (jf_get(w, it, "call_id", JF_STRING | JF_NONEMPTY | JF_REQUIRED, NULL, &id) < 0 ||
        jf_get(w, it, "name", JF_STRING | JF_REQUIRED, NULL, &name) < 0 ||
        jf_get(w, it, "arguments", JF_STRING | JF_OBJECT | JF_REQUIRED, "a string (the arguments as JSON text)", &args) < 0)
        return ERR_INVALID;
    json_t *m = c->asst ? c->asst : conv_assistant(c, json_null());
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls) {
        calls = json_array();
        /* a failed set frees calls: stop (out of memory, counted: a 503) */
        if (!m || json_object_set_new(m, "tool_calls", calls) < 0) return api_bad(w->err, "input", "out of memory");
    }
    json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function", "name",
                                           name, "arguments", args));
    json_object_set_new(c->call_ids, json_string_value(id), json_true());
    return 0;
}

static int conv_call_output(conv *c, json_t *it, const jf *w) {
    json_t *id, *output;
    if (jf_get(w, it, "call_id", JF_STRING | JF_REQUIRED, "a string (the call_id of the call it answers)", &id) < 0)
        return ERR_INVALID;
    if (!json_object_get(c->call_ids, json_string_value(id)))
        return jf_fail(w, "call_id", "'%.100s' matches no function_call before it", json_string_value(id));
    if (jf_get(w, it, "output", JF_NEEDED, NULL, &output) < 0) return ERR_INVALID;
    sbuf text = {0};
    jf ow = jf_key(w, "output");
    if (content_text(output, &ow, &text) < 0) {
        sbuf_free(&text);
        return ERR_INVALID;
    }
    json_array_append_new(c->msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content",
                                             oai_buf_json(&text)));
    sbuf_free(&text);
    c->asst = NULL;
    return 0;
}

/* A reasoning item: its reasoning_text parts, else its summary. */
static void conv_reasoning(conv *c, json_t *it) {
    json_t *content = oai_field(it, "content");
    const char *want = "reasoning_text";
    if (!json_array_size(content)) content = oai_field(it, "summary"), want = "summary_text";
    for (size_t j = 0; j < json_array_size(content); j++) {
        json_t *part = json_array_get(content, j);
        json_t *type = oai_field(part, "type"), *text = oai_field(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), want) || !json_is_string(text)) continue;
        if (c->reasoning.n) sbuf_put(&c->reasoning, "\n", 1);
        sbuf_put(&c->reasoning, json_string_value(text), json_string_length(text));
    }
}

static int conv_item(conv *c, json_t *it, const jf *w) {
    if (!json_is_object(it)) return jf_fail(w, NULL, "must be an object (an input item)");
    json_t *type = oai_field(it, "type");
    const char *t;
    if (!type) {
        if (!oai_field(it, "role")) return jf_fail(w, "type", "is required (or a 'role' for a message)");
        t = "message";
    } else if (!json_is_string(type)) {
        return jf_fail(w, "type", "must be a string");
    } else {
        t = json_string_value(type);
    }
    if (!strcmp(t, "message")) return conv_message(c, it, w);
    if (!strcmp(t, "function_call")) return conv_call(c, it, w);
    if (!strcmp(t, "function_call_output")) return conv_call_output(c, it, w);
    if (!strcmp(t, "reasoning")) {
        conv_reasoning(c, it);
        return 0;
    }
    return jf_fail(w, "type",
                   "unsupported item type '%.64s' (supported: message, function_call, function_call_output, reasoning)",
                   t);
}

/* tools: the flat Responses shape to chat's. */
static int map_tools(const jf *b, json_t *tools, json_t *chat) {
    jf ts = jf_key(b, "tools");
    if (!json_is_array(tools)) return jf_fail(&ts, NULL, "must be an array");
    if (json_array_size(tools) == 0) return 0; /* agents send [] for no tools */
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        jf ti = jf_index(&ts, i);
        const char *type;
        if (jf_typed(&ti, t, &type) < 0) return ERR_INVALID;
        if (strcmp(type, "function"))
            return jf_fail(&ti, "type", "unsupported tool type '%.64s' (only function tools run on this server)", type);
        json_t *fn = json_object();
        static const char *const keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; k < ARRAY_LEN(keys); k++)
            if (oai_field(t, keys[k])) json_object_set(fn, keys[k], oai_field(t, keys[k]));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return 0;
}

static int map_tool_choice(const jf *b, json_t *tc, json_t *chat) {
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", tc);
        return 0;
    }
    jf w = jf_key(b, "tool_choice");
    json_t *type, *name;
    if (!json_is_object(tc)) return jf_fail(&w, NULL, "must be a string or an object");
    if (jf_get(&w, tc, "type", JF_STRING | JF_REQUIRED, NULL, &type) < 0) return ERR_INVALID;
    if (strcmp(json_string_value(type), "function"))
        return jf_fail(&w, "type", "'%.64s' is not supported (\"function\" only)", json_string_value(type));
    if (jf_get(&w, tc, "name", JF_STRING | JF_REQUIRED, NULL, &name) < 0) return ERR_INVALID;
    json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    return 0;
}

/* text: {format: {type: text | json_object | json_schema}, verbosity}. */
static int map_text(const jf *b, json_t *body, json_t *chat, resp_req *rq) {
    json_t *text, *verb = NULL, *fmt = NULL;
    jf tw = jf_key(b, "text"), fw = jf_key(&tw, "format");
    fw.param = "text.format";
    if (jf_get(b, body, "text", JF_OBJECT, NULL, &text) < 0 || jf_get(&tw, text, "verbosity", JF_STRING, NULL, &verb) < 0)
        return ERR_INVALID;
    if (text) fmt = oai_field(text, "format");
    if (fmt) {
        const char *t;
        if (jf_typed(&fw, fmt, &t) < 0) return ERR_INVALID;
        if (!strcmp(t, "json_object")) {
            json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        } else if (!strcmp(t, "json_schema")) {
            json_t *name, *schema, *strict;
            if (jf_get(&fw, fmt, "name", JF_STRING, NULL, &name) < 0 ||
                jf_get(&fw, fmt, "schema", JF_OBJECT | JF_BOOL | JF_REQUIRED, "a JSON Schema object", &schema) < 0 ||
                jf_get(&fw, fmt, "strict", JF_BOOL, NULL, &strict) < 0)
                return ERR_INVALID;
            json_t *js = json_pack("{s:O}", "schema", schema);
            if (name) json_object_set(js, "name", name);
            if (strict) json_object_set(js, "strict", strict);
            json_object_set_new(chat, "response_format", json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
        } else if (strcmp(t, "text")) {
            return jf_fail(&fw, "type", "must be \"text\", \"json_object\" or \"json_schema\"; got \"%.64s\"", t);
        }
    }
    rq->text = json_pack("{s:o}", "format", fmt ? json_incref(fmt) : json_pack("{s:s}", "type", "text"));
    if (verb) json_object_set(rq->text, "verbosity", verb);
    return 0;
}

/* reasoning: {effort, summary}; effort switches a reasoning template's
 * thinking on or off (unless chat_template_kwargs already does). */
static int map_reasoning(routes_ctx *rc, const jf *b, json_t *body, json_t *chat, resp_req *rq) {
    json_t *rs, *effort = NULL;
    jf rw = jf_key(b, "reasoning");
    int level = -1;
    if (jf_get(b, body, "reasoning", JF_OBJECT, NULL, &rs) < 0 ||
        jf_enum(&rw, rs, "effort", oai_efforts, OAI_N_EFFORTS, &level) < 0)
        return ERR_INVALID;
    if (level >= 0) effort = oai_field(rs, "effort");
    rq->reasoning = json_pack("{s:O?, s:n}", "effort", effort, "summary");
    if (effort) json_object_set(chat, "reasoning_effort", effort); /* the template variable (oai.c) */
    if (!effort || !rc->reasoning) return 0;
    json_t *kw = json_object_get(chat, "chat_template_kwargs");
    if (!json_is_object(kw)) return 0; /* oai_parse names it */
    if (!json_object_get(kw, "enable_thinking"))
        json_object_set_new(kw, "enable_thinking", json_boolean(strcmp(json_string_value(effort), "none") != 0));
    return 0;
}

/* Fields refused because what they ask for does not exist here. */
static int check_unsupported(const jf *b, json_t *body) {
    static const char *const truncation[] = {"auto", "disabled"};
    json_t *v;
    int i;
    if ((v = oai_field(body, "background")) && !json_is_false(v))
        return jf_fail(b, "background", "background responses are not supported by this server");
    if (oai_field(body, "conversation"))
        return jf_fail(b, "conversation", "conversations are not supported; chain responses with previous_response_id");
    if (oai_field(body, "prompt"))
        return jf_fail(b, "prompt", "stored prompt templates are not supported; send instructions and input");
    if (jf_enum(b, body, "truncation", truncation, ARRAY_LEN(truncation), &i) < 0 ||
        jf_get(b, body, "include", JF_ARRAY, NULL, &v) < 0)
        return ERR_INVALID;
    return 0;
}

static int translate(routes_ctx *rc, json_t *body, int owner, resp_req *rq, oai_error *err) {
    memset(rq, 0, sizeof *rq);
    rq->owner = owner;
    rq->max_output_tokens = -1;
    rq->store = rq->parallel = true;
    json_t *chat = rq->chat = json_object();
    rq->history = json_array();
    conv c = {json_array(), NULL, json_object(), {0}};
    jf b = jf_body(&names, err);
    int r = -1;
    json_t *v;
    if (check_unsupported(&b, body) < 0) goto out;

    /* fields of the same name and meaning; kvloom's sampling extensions */
    static const char *const same[] = {"model",    "temperature",      "top_p",     "parallel_tool_calls", "stream",
                                       "user",     "seed",             "top_k",     "min_p",               "stop",
                                       "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos",
                                       "jump_forward", "speculative", "grammar", "prompt_cache_key", "kv_ttl", "kv_hint",
                                       "priority", "cache_salt"};
    for (size_t i = 0; i < ARRAY_LEN(same); i++)
        if ((v = oai_field(body, same[i]))) json_object_set(chat, same[i], v);
    if ((v = oai_field(body, "chat_template_kwargs"))) json_object_set_new(chat, "chat_template_kwargs", json_deep_copy(v));
    else if (rc->reasoning) json_object_set_new(chat, "chat_template_kwargs", json_object());
    if ((v = oai_field(body, "parallel_tool_calls")) && json_is_boolean(v)) rq->parallel = json_is_true(v);
    if ((v = oai_field(body, "user")) && json_is_string(v)) rq->user = xstrdup(json_string_value(v));

    if (jf_int_in(&b, body, "max_output_tokens", 1, INT32_MAX, "an integer >= 1", &v) < 0) goto out;
    if (v) {
        rq->max_output_tokens = json_integer_value(v);
        json_object_set(chat, "max_tokens", v);
    }
    if (jf_bool(&b, body, "store", &rq->store) < 0 ||
        jf_get(&b, body, "metadata", JF_OBJECT, "an object of strings", &v) < 0)
        goto out;
    if (v) {
        const char *k;
        json_t *mv;
        if (json_object_size(v) > RESP_METADATA_MAX) {
            jf_fail(&b, "metadata", "%zu pairs, at most %d", json_object_size(v), RESP_METADATA_MAX);
            goto out;
        }
        json_object_foreach(v, k, mv) {
            if (utf8_count(k, strlen(k)) > RESP_METADATA_KEY_MAX) {
                jf_fail(&b, "metadata", "the key '%.64s...' is longer than %d characters", k, RESP_METADATA_KEY_MAX);
                goto out;
            }
            if (!json_is_string(mv)) {
                api_bad(err, "metadata", "metadata.%.64s: must be a string", k);
                goto out;
            }
            if (utf8_count(json_string_value(mv), json_string_length(mv)) > RESP_METADATA_VALUE_MAX) {
                api_bad(err, "metadata", "metadata.%.64s: longer than %d characters", k, RESP_METADATA_VALUE_MAX);
                goto out;
            }
        }
        rq->metadata = json_incref(v);
    }
    if ((v = oai_field(body, "tools"))) {
        if (map_tools(&b, v, chat) < 0) goto out;
        rq->tools = json_incref(v);
    }
    if ((v = oai_field(body, "tool_choice"))) {
        if (map_tool_choice(&b, v, chat) < 0) goto out;
        rq->tool_choice = json_incref(v);
    }
    if (map_text(&b, body, chat, rq) < 0 || map_reasoning(rc, &b, body, chat, rq) < 0) goto out;

    /* the conversation: the previous response's, then the input */
    if (jf_get(&b, body, "previous_response_id", JF_STRING, NULL, &v) < 0) goto out;
    if (v) {
        rq->previous_id = xstrdup(json_string_value(v));
        json_t *prev = NULL;
        if (!store_get(rc->responses, owner, rq->previous_id, NULL, &prev)) {
            jf_fail(&b, "previous_response_id",
                    "no stored response with id '%.100s' (unknown, deleted, expired, or created with store: false)",
                    rq->previous_id);
            err->status = 404;
            err->code = "previous_response_not_found";
            goto out;
        }
        json_array_extend(rq->history, prev);
        json_decref(prev);
        jf pw = jf_key(&b, "previous_response_id");
        pw.param = "input"; /* its items were an input once */
        for (size_t i = 0; i < json_array_size(rq->history); i++)
            if (conv_item(&c, json_array_get(rq->history, i), &pw) < 0) goto out;
    }
    json_t *input = oai_field(body, "input");
    jf iw = jf_key(&b, "input");
    if (json_is_string(input)) {
        json_t *it = json_pack("{s:s, s:s, s:O}", "type", "message", "role", "user", "content", input);
        /* our own reference until conv_item is done with it: a failed append
         * (out of memory) would otherwise free it under conv_item */
        json_array_append(rq->history, it);
        int rc_it = conv_item(&c, it, &iw);
        json_decref(it);
        if (rc_it < 0) goto out;
    } else if (json_is_array(input) && json_array_size(input)) {
        for (size_t i = 0; i < json_array_size(input); i++) {
            jf ii = jf_index(&iw, i);
            json_t *it = json_array_get(input, i);
            if (conv_item(&c, it, &ii) < 0) goto out;
            json_array_append(rq->history, it);
        }
    } else {
        jf_fail(&b, "input", input ? "must be a string or a non-empty array of items" : "is required");
        goto out;
    }
    if (jf_get(&b, body, "instructions", JF_STRING, NULL, &v) < 0) goto out;
    if (v) {
        rq->instructions = xstrdup(json_string_value(v));
        json_array_insert_new(c.msgs, 0, json_pack("{s:s, s:O}", "role", "system", "content", v));
    }
    json_object_set(chat, "messages", c.msgs);
    r = 0;
out:
    json_decref(c.msgs);
    json_decref(c.call_ids);
    sbuf_free(&c.reasoning);
    return r;
}

/* ---- the answer: output items from api_serve's segments (api.h) ---- */

/* The Responses side of an answer (api_answer.ctx). */
typedef struct resp_out {
    resp_req rq;
    char id[64], base[48];
    int seq;                /* the next sequence_number */
    float temperature, top_p;
} resp_out;

static void out_free(void *ctx) {
    resp_out *o = ctx;
    resp_req_free(&o->rq);
    free(o);
}

/* One SSE event (ev taken, its "type" and "sequence_number" set); nothing
 * when not streaming. */
static void emit(api_answer *a, const char *type, json_t *ev) {
    resp_out *o = a->ctx;
    if (!a->out) {
        json_decref(ev);
        return;
    }
    json_object_set_new(ev, "type", json_string(type));
    json_object_set_new(ev, "sequence_number", json_integer(o->seq++));
    api_emit(a, type, ev);
}

/* An item's status: open, or closed complete or not. */
static const char *item_status(const api_answer *a, int i) {
    return i == a->open ? "in_progress" : a->segs[i].complete ? "completed" : "incomplete";
}

/* A content part of a message or reasoning item. */
static json_t *part_json(const api_seg *it) {
    if (it->kind == API_SEG_REASONING)
        return json_pack("{s:s, s:o}", "type", "reasoning_text", "text", oai_buf_json(&it->text));
    return json_pack("{s:s, s:o, s:[]}", "type", "output_text", "text", oai_buf_json(&it->text), "annotations");
}

static json_t *item_json(const api_answer *a, int i) {
    const api_seg *it = &a->segs[i];
    const char *status = item_status(a, i);
    bool open = i == a->open;
    switch (it->kind) {
    case API_SEG_REASONING:
        return json_pack("{s:s, s:s, s:[], s:o, s:s}", "type", "reasoning", "id", it->id, "summary", "content",
                         open ? json_array() : json_pack("[o]", part_json(it)), "status", status);
    case API_SEG_TEXT:
        return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", it->id, "status", status, "role",
                         "assistant", "content", open ? json_array() : json_pack("[o]", part_json(it)));
    default:
        return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s}", "type", "function_call", "id", it->id, "call_id",
                         it->call_id, "name", it->name, "arguments", oai_buf_json(&it->text), "status", status);
    }
}

/* {"item_id", "output_index"[, "content_index": 0]} of item i. */
static json_t *ev_at(const api_answer *a, int i, bool content_index) {
    json_t *ev = json_pack("{s:s, s:i}", "item_id", a->segs[i].id, "output_index", i);
    if (content_index) json_object_set_new(ev, "content_index", json_integer(0));
    return ev;
}

static void item_open(api_answer *a, int i) {
    resp_out *o = a->ctx;
    api_seg *it = &a->segs[i];
    static const char *const prefix[] = {"rs", "msg", "fc"}; /* by api_seg_kind */
    snprintf(it->id, sizeof it->id, "%s_%s%02x", prefix[it->kind], o->base, (unsigned)i & 0xff);
    emit(a, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", i, "item", item_json(a, i)));
    if (it->kind != API_SEG_CALL) {
        json_t *ev = ev_at(a, i, true);
        json_object_set_new(ev, "part", part_json(it));
        emit(a, "response.content_part.added", ev);
    }
}

static void item_delta(api_answer *a, int i, const char *text, size_t n) {
    api_seg_kind k = a->segs[i].kind;
    json_t *ev = ev_at(a, i, k != API_SEG_CALL);
    json_object_set_new(ev, "delta", oai_text_json(text, n));
    if (k == API_SEG_TEXT) json_object_set_new(ev, "logprobs", json_array());
    emit(a, k == API_SEG_TEXT        ? "response.output_text.delta"
            : k == API_SEG_REASONING ? "response.reasoning_text.delta"
                                     : "response.function_call_arguments.delta",
         ev);
}

static void item_close(api_answer *a, int i) {
    const api_seg *it = &a->segs[i];
    json_t *ev = ev_at(a, i, it->kind != API_SEG_CALL);
    if (it->kind == API_SEG_CALL) {
        json_object_set_new(ev, "name", json_string(it->name));
        json_object_set_new(ev, "arguments", oai_buf_json(&it->text));
        emit(a, "response.function_call_arguments.done", ev);
    } else {
        json_object_set_new(ev, "text", oai_buf_json(&it->text));
        if (it->kind == API_SEG_TEXT) json_object_set_new(ev, "logprobs", json_array());
        emit(a, it->kind == API_SEG_TEXT ? "response.output_text.done" : "response.reasoning_text.done", ev);
        ev = ev_at(a, i, true);
        json_object_set_new(ev, "part", part_json(it));
        emit(a, "response.content_part.done", ev);
    }
    emit(a, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", i, "item", item_json(a, i)));
}

static json_t *usage_json(const gen *g) {
    int np, nc, cached;
    gen_usage(g, &np, &nc, &cached);
    return json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", np, "input_tokens_details", "cached_tokens",
                     cached, "output_tokens", nc, "output_tokens_details", "reasoning_tokens", 0, "total_tokens",
                     np + nc);
}

/* The response object: status "in_progress" (no output yet), "completed",
 * "incomplete" or "failed" (error: the message). */
static json_t *response_json(api_answer *a, const char *status, const char *error) {
    resp_out *o = a->ctx;
    resp_req *rq = &o->rq;
    bool final = strcmp(status, "in_progress") != 0;
    json_t *output = json_array();
    for (int i = 0; final && i < a->n_segs; i++) json_array_append_new(output, item_json(a, i));
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:b, s:o, s:o}", "id", o->id, "object", "response", "created_at",
                          (json_int_t)gen_created(a->g), "status", status, "background", 0, "error",
                          error ? json_pack("{s:s, s:s}", "code", "server_error", "message", error) : json_null(),
                          "incomplete_details",
                          strcmp(status, "incomplete") ? json_null()
                                                        : json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_set_new(r, "instructions", rq->instructions ? json_string(rq->instructions) : json_null());
    json_object_set_new(r, "max_output_tokens",
                        rq->max_output_tokens > 0 ? json_integer(rq->max_output_tokens) : json_null());
    json_object_set_new(r, "metadata", rq->metadata ? json_incref(rq->metadata) : json_object());
    json_object_set_new(r, "model", json_string(a->rc->model_id));
    json_object_set_new(r, "output", output);
    json_object_set_new(r, "parallel_tool_calls", json_boolean(rq->parallel));
    json_object_set_new(r, "previous_response_id", rq->previous_id ? json_string(rq->previous_id) : json_null());
    json_object_set_new(r, "reasoning", json_incref(rq->reasoning));
    json_object_set_new(r, "store", json_boolean(rq->store));
    json_object_set_new(r, "temperature", json_real(o->temperature));
    json_object_set_new(r, "text", json_incref(rq->text));
    json_object_set_new(r, "tool_choice", rq->tool_choice ? json_incref(rq->tool_choice) : json_string("auto"));
    json_object_set_new(r, "tools", rq->tools ? json_incref(rq->tools) : json_array());
    json_object_set_new(r, "top_p", json_real(o->top_p));
    json_object_set_new(r, "truncation", json_string("disabled"));
    json_object_set_new(r, "usage", final ? usage_json(a->g) : json_null());
    if (rq->user) json_object_set_new(r, "user", json_string(rq->user));
    if (final) json_object_set_new(r, "completed_at", json_integer((json_int_t)time(NULL)));
    return r;
}

static bool answer_begin(api_answer *a) {
    emit(a, "response.created", json_pack("{s:o}", "response", response_json(a, "in_progress", NULL)));
    emit(a, "response.in_progress", json_pack("{s:o}", "response", response_json(a, "in_progress", NULL)));
    return true;
}

/* The final response, stored unless "store": false; the Responses shape
 * says a cut per item and in the status: a cut after complete calls is
 * "incomplete" here (the calls are items of their own). */
static json_t *answer_finish(api_answer *a) {
    resp_out *o = a->ctx;
    bool truncated = gen_cut(a->g);
    json_t *r = response_json(a, truncated ? "incomplete" : "completed", NULL);
    if (o->rq.store) {
        /* never store an answer jansson could not build whole */
        char *text = !oai_json_failed() ? oai_json_dump(r) : NULL;
        json_t *history = json_array();
        json_array_extend(history, o->rq.history);
        for (int i = 0; i < a->n_segs; i++) json_array_append_new(history, item_json(a, i));
        if (text) store_put(a->rc->responses, o->rq.owner, o->id, text, history);
        else json_decref(history);
    }
    if (!a->stream) return r;
    emit(a, truncated ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", r));
    return NULL;
}

static void answer_fail(api_answer *a, const char *msg, int status) {
    (void)status;
    api_seg_close(a, false);
    emit(a, "response.failed", json_pack("{s:o}", "response", response_json(a, "failed", msg)));
}

/* The body translated and checked by oai_parse (*p, owned on success). */
static int parse_request(routes_ctx *rc, json_t *body, int owner, resp_req *rq, oai_params *p, oai_error *err);

static int answer_parse(api_answer *a, http_exchange *x, json_t *body, oai_params *p, oai_error *err) {
    resp_out *o = xcalloc(1, sizeof *o);
    a->ctx = o;
    return parse_request(a->rc, body, routes_key_index(a->rc, x), &o->rq, p, err) < 0 ? -1 : 1;
}

static void answer_start(api_answer *a, const oai_params *p) {
    resp_out *o = a->ctx;
    json_decref(o->rq.chat);
    o->rq.chat = NULL;
    o->temperature = p->sp.temperature;
    o->top_p = p->sp.top_p;
    /* unguessable: the id is all a client needs to read, continue or
     * delete a stored response (item ids share it) */
    os_random_hex(o->base, 16);
    snprintf(o->id, sizeof o->id, "resp_%s", o->base);
}

const api_ops api_responses = {
    .name = "responses",
    .field = field_name,
    .param = param_name,
    .error_json = api_openai_error_json, /* OpenAI's error object */
    .parse = answer_parse,
    .start = answer_start,
    .begin = answer_begin,
    .open = item_open,
    .delta = item_delta,
    .close = item_close,
    .finish = answer_finish,
    .fail = answer_fail,
    .free_ctx = out_free,
    .empty = API_EMPTY_IF_UNANSWERED,
    .framing = API_SSE,
    .stream_type = "text/event-stream",
    .stream_nomem = "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\","
                    "\"message\":\"" API_NOMEM_MSG "\",\"param\":null}\n\n",
};

/* ---- routes ---- */

/* The body translated (*rq, freed by the caller either way) and checked by
 * oai_parse (*p, owned on success). */
static int parse_request(routes_ctx *rc, json_t *body, int owner, resp_req *rq, oai_params *p, oai_error *err) {
    if (translate(rc, body, owner, rq, err) < 0) return -1;
    if (oai_parse(rq->chat, OAI_CHAT, tok_n_vocab(rc->tok), p, err) < 0) {
        err->status = 400;
        err->e.code = ERR_INVALID;
        return -1;
    }
    return 0;
}

int api_responses_params(routes_ctx *rc, json_t *body, oai_params *p, oai_error *err) {
    resp_req rq;
    int r = parse_request(rc, body, ROUTES_NO_KEYS, &rq, p, err);
    resp_req_free(&rq);
    return r;
}

void api_responses_item(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    const char *id = http_path(x) + strlen(rt->path);
    char msg[300];
    if (!*id || strchr(id, '/')) {
        snprintf(msg, sizeof msg, "no route for %s /v1/responses/%.200s", http_method(x), id);
        reply_error(x, 404, msg, NULL, NULL);
        return;
    }
    snprintf(msg, sizeof msg, "no stored response with id '%.200s'", id);
    if (!strcmp(http_method(x), "DELETE")) {
        if (!store_delete(rc->responses, routes_key_index(rc, x), id)) {
            reply_error(x, 404, msg, NULL, "response_not_found");
            return;
        }
        json_t *o = json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1);
        if (!o) o = json_pack("{s:s, s:b}", "object", "response", "deleted", 1); /* id not UTF-8 */
        api_reply_json(&api_responses, x, o);
        json_decref(o);
        return;
    }
    char *json = NULL;
    if (!store_get(rc->responses, routes_key_index(rc, x), id, &json, NULL)) {
        reply_error(x, 404, msg, NULL, "response_not_found");
        return;
    }
    http_reply(x, 200, "application/json", json, strlen(json), NULL, NULL);
    free(json);
}
