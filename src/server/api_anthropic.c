/*
 * api_anthropic.c — the Anthropic Messages API (apis.h; docs/server.md
 * "Anthropic Messages API"):
 *
 *   POST /v1/messages               blocks ─▶ OpenAI chat body ─▶ oai_parse ─▶
 *                                   gen_start ─▶ events ─▶ content blocks
 *                                   (JSON or SSE)
 *   POST /v1/messages/count_tokens  the same translation ─▶ {input_tokens}
 *
 * Place in the flow: server/, on the HTTP thread of the request, dispatched
 * by routes.c after the API key check. The request becomes a chat body and
 * goes through oai_parse, so every rule of the chat route (ranges, tools,
 * schemas, constrained decoding, reasoning) holds here too:
 *
 *   system (string | text blocks)   ─▶ a system message, first
 *   user content: text blocks       ─▶ a user message (texts joined)
 *                 tool_result       ─▶ a tool message (tool_call_id =
 *                                      tool_use_id), before the user's text
 *   assistant content: text         ─▶ content
 *                      tool_use     ─▶ tool_calls {id, function {name,
 *                                      arguments = input}}
 *                      thinking     ─▶ reasoning_content
 *   a final assistant message       ─▶ a prefill: the answer continues it
 *   tools [{name, description, input_schema}] ─▶ function tools
 *   tool_choice auto | any | tool(name) | none ─▶ auto | required |
 *                                      named function | none;
 *                                      disable_parallel_tool_use ─▶
 *                                      parallel_tool_calls false
 *   output_format {type:"json_schema", schema} ─▶ response_format json_schema
 *   stop_sequences ─▶ stop · max_tokens ─▶ max_tokens · metadata.user_id ─▶
 *   user · thinking {type: enabled | adaptive | disabled} ─▶ enable_thinking (models
 *   with a reasoning template) · kvloom's extensions as on the chat route
 *   (seed, min_p, penalties, ignore_eos, jump_forward, grammar, json_schema)
 *
 * The answer is built by one state machine for both modes: generate.h
 * events open and fill content blocks, at most one open at a time:
 *
 *   REASONING ─▶ {type:"thinking", thinking, signature:""}
 *   CONTENT   ─▶ {type:"text", text}
 *   CALL_START, CALL_ARGS ─▶ {type:"tool_use", id:"toolu_...", name, input}
 *
 * stop_reason: "tool_use" (complete calls), "max_tokens", "stop_sequence"
 * (stop_sequence names it) or "end_turn". A call that text follows broke
 * (toolcall.h: its raw text comes as content): the whole answer leaves it
 * out; a stream has already shown its block. usage: input_tokens are the
 * prompt tokens computed, cache_read_input_tokens those served from the
 * prefix cache (the two add up to the prompt, as Anthropic counts them).
 *
 * Streaming (SSE, "event: TYPE\ndata: {...}"): message_start, ping, per
 * block content_block_start, content_block_delta (text_delta |
 * thinking_delta | input_json_delta) ..., content_block_stop; then
 * message_delta {stop_reason, stop_sequence, usage} and message_stop; a
 * failure after the start is an "error" event.
 *
 * Errors: {"type":"error","error":{"type":..,"message":..}} with the type
 * Anthropic gives the status (invalid_request_error, authentication_error,
 * not_found_error, request_too_large, rate_limit_error, api_error,
 * overloaded_error).
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "apis.h"
#include "generate.h"
#include "jfield.h"
#include "oai.h"

/* ---- replies ---- */

static const char *error_type(int status) {
    switch (status) {
    case 400: case 405: case 415: case 422: return "invalid_request_error";
    case 413: return "request_too_large";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static char *error_json(int status, const char *msg, const char *param, const char *code) {
    (void)param, (void)code; /* Anthropic's errors carry neither */
    json_t *o = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", error_type(status), "message", msg);
    if (!o) o = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", error_type(status), "message",
                          "(the error message is not valid UTF-8)");
    char *s = oai_json_dump(o);
    json_decref(o);
    if (!s)
        s = xstrdup("{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"out of memory\"}}");
    return s;
}

/* The Anthropic name of an internal (OpenAI chat) field path, written with
 * dots as Anthropic does: messages[2].content -> messages.2.content,
 * tools[0].function.parameters -> tools.0.input_schema, tools[0].function.X
 * -> tools.0.X, tool_choice.function.name -> tool_choice.name, stop[1] ->
 * stop_sequences.1, response_format(.json_schema).schema ->
 * output_format.schema. */
static void field_name(const char *path, char *out, size_t cap) {
    static const char *const top[][2] = {{"stop", "stop_sequences"}, {"response_format", "output_format"}};
    const char *s = path;
    size_t k = api_field_rename(top, ARRAY_LEN(top), &s, out, cap);
    while (*s && k + 1 < cap) {
        if (*s == '[') { /* an index: .N */
            out[k++] = '.';
            s++;
            while (*s && *s != ']' && k + 1 < cap) out[k++] = *s++;
            if (*s == ']') s++;
        } else if (!strncmp(s, ".function.parameters", 20)) {
            k += (size_t)snprintf(out + k, cap - k, ".input_schema");
            s += 20;
        } else if (!strncmp(s, ".json_schema", 12) && !strncmp(path, "response_format", 15)) {
            s += 12; /* output_format holds the schema itself */
        } else if (!strncmp(s, ".function", 9) && (s[9] == '.' || !s[9])) {
            s += 9;
        } else {
            out[k++] = *s++;
        }
    }
    out[k < cap ? k : cap - 1] = 0;
}


/* ---- request translation: Messages body -> OpenAI chat body ---- */

/* Anthropic writes paths with dots (messages.2.content.0.text), an absent
 * field is "Field required", and its errors carry no param. */
static const jf_style names = {.quote = JF_COLON, .dot_index = true, .missing = "Field required"};

/* The text of a content (at w) given as a string or as text blocks (other
 * block types refused, naming where). */
static int text_of(json_t *c, const jf *w, sbuf *out) {
    if (json_is_string(c)) {
        sbuf_put(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c)) return jf_fail(w, NULL, "must be a string or an array of text blocks");
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *b = json_array_get(c, j), *text;
        jf bj = jf_index(w, j);
        const char *t;
        if (jf_typed(&bj, b, &t) < 0) return ERR_INVALID;
        if (strcmp(t, "text")) return jf_fail(&bj, "type", "'%.64s' blocks are not supported here (text only)", t);
        if (jf_get(&bj, b, "text", JF_STRING | JF_REQUIRED, NULL, &text) < 0) return ERR_INVALID;
        sbuf_put(out, json_string_value(text), json_string_length(text));
    }
    return 0;
}

/* The tool_use ids seen so far (an object used as a set) live in `ids`; w
 * is the message's content. */
static int user_message(json_t *msgs, json_t *content, json_t *ids, const jf *w) {
    if (json_is_string(content)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", content));
        return 0;
    }
    if (!json_is_array(content)) return jf_fail(w, NULL, "must be a string or an array of content blocks");
    sbuf text = {0};
    bool any_text = false;
    int r = 0;
    for (size_t j = 0; j < json_array_size(content) && r == 0; j++) {
        json_t *b = json_array_get(content, j), *s, *id, *err;
        jf bj = jf_index(w, j);
        const char *t;
        if ((r = jf_typed(&bj, b, &t)) < 0) break;
        if (!strcmp(t, "text")) {
            if ((r = jf_get(&bj, b, "text", JF_STRING | JF_REQUIRED, NULL, &s)) < 0) break;
            if (any_text) sbuf_put(&text, "\n", 1);
            sbuf_put(&text, json_string_value(s), json_string_length(s));
            any_text = true;
        } else if (!strcmp(t, "tool_result")) {
            json_t *c = oai_field(b, "content");
            if ((r = jf_get(&bj, b, "tool_use_id", JF_STRING | JF_NONEMPTY | JF_REQUIRED, NULL, &id)) < 0) break;
            if (!json_object_get(ids, json_string_value(id))) {
                r = jf_fail(&bj, "tool_use_id", "'%.100s' matches no tool_use block of an earlier assistant message",
                            json_string_value(id));
                break;
            }
            if ((r = jf_get(&bj, b, "is_error", JF_BOOL, NULL, &err)) < 0) break;
            sbuf out = {0};
            jf cw = jf_key(&bj, "content");
            if (c) r = text_of(c, &cw, &out);
            if (r == 0) {
                json_t *m = json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content",
                                      json_is_true(err) && !out.n ? json_string("error") : oai_buf_json(&out));
                json_array_append_new(msgs, m);
            }
            sbuf_free(&out);
        } else {
            r = jf_fail(&bj, "type", "'%.64s' blocks are not supported in user messages (text and tool_result only)", t);
        }
    }
    if (r == 0 && any_text) json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "user", "content", oai_buf_json(&text)));
    sbuf_free(&text);
    return r;
}

static int assistant_message(json_t *msgs, json_t *content, json_t *ids, const jf *w) {
    if (json_is_string(content)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "assistant", "content", content));
        return 0;
    }
    if (!json_is_array(content)) return jf_fail(w, NULL, "must be a string or an array of content blocks");
    sbuf text = {0}, thinking = {0};
    json_t *calls = json_array();
    int r = 0;
    for (size_t j = 0; j < json_array_size(content) && r == 0; j++) {
        json_t *b = json_array_get(content, j), *s, *id, *name, *input;
        jf bj = jf_index(w, j);
        const char *t;
        if ((r = jf_typed(&bj, b, &t)) < 0) break;
        if (!strcmp(t, "text")) {
            if ((r = jf_get(&bj, b, "text", JF_STRING | JF_REQUIRED, NULL, &s)) < 0) break;
            sbuf_put(&text, json_string_value(s), json_string_length(s));
        } else if (!strcmp(t, "thinking")) {
            if ((r = jf_get(&bj, b, "thinking", JF_STRING | JF_REQUIRED, NULL, &s)) < 0) break;
            sbuf_put(&thinking, json_string_value(s), json_string_length(s));
        } else if (!strcmp(t, "redacted_thinking")) {
            /* nothing a local model can read */
        } else if (!strcmp(t, "tool_use")) {
            if ((r = jf_get(&bj, b, "id", JF_STRING | JF_NONEMPTY | JF_REQUIRED, NULL, &id)) < 0 ||
                (r = jf_get(&bj, b, "name", JF_STRING | JF_NONEMPTY | JF_REQUIRED, NULL, &name)) < 0 ||
                (r = jf_get(&bj, b, "input", JF_OBJECT | JF_REQUIRED, NULL, &input)) < 0)
                break;
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function",
                                                   "function", "name", name, "arguments", input));
            json_object_set_new(ids, json_string_value(id), json_true());
        } else {
            r = jf_fail(&bj, "type",
                        "'%.64s' blocks are not supported in assistant messages (text, thinking and tool_use only)", t);
        }
    }
    if (r == 0) {
        json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content",
                              text.n || !json_array_size(calls) ? oai_buf_json(&text) : json_null());
        if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
        if (thinking.n) json_object_set_new(m, "reasoning_content", oai_buf_json(&thinking));
        json_array_append_new(msgs, m);
    }
    json_decref(calls);
    sbuf_free(&text);
    sbuf_free(&thinking);
    return r;
}

static int map_messages(const jf *a, json_t *body, json_t *chat, bool *prefill) {
    json_t *messages, *system = oai_field(body, "system");
    if (jf_get(a, body, "messages", JF_ARRAY | JF_NONEMPTY | JF_NEEDED, "a non-empty array of messages", &messages) < 0)
        return ERR_INVALID;
    json_t *msgs = json_array(), *ids = json_object();
    int r = 0;
    if (system) {
        sbuf s = {0};
        jf sw = jf_key(a, "system");
        r = text_of(system, &sw, &s);
        if (r == 0) json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", oai_buf_json(&s)));
        sbuf_free(&s);
    }
    const char *role_s = NULL;
    jf ms = jf_key(a, "messages");
    for (size_t i = 0; i < json_array_size(messages) && r == 0; i++) {
        json_t *m = json_array_get(messages, i), *role, *content;
        jf mi = jf_index(&ms, i), cw = jf_key(&mi, "content");
        if (!json_is_object(m)) {
            r = jf_fail(&mi, NULL, "must be an object");
            break;
        }
        if ((r = jf_get(&mi, m, "role", JF_STRING | JF_REQUIRED, "\"user\" or \"assistant\"", &role)) < 0 ||
            (r = jf_get(&mi, m, "content", JF_NEEDED, NULL, &content)) < 0)
            break;
        role_s = json_string_value(role);
        if (json_is_array(content) && !json_array_size(content) &&
            !(i + 1 == json_array_size(messages) && !strcmp(role_s, "assistant"))) {
            /* as Anthropic: only a final assistant message may be empty */
            r = jf_fail(&cw, NULL, "must not be empty (only a final assistant message may be)");
            break;
        }
        if (!strcmp(role_s, "user")) r = user_message(msgs, content, ids, &cw);
        else if (!strcmp(role_s, "assistant")) r = assistant_message(msgs, content, ids, &cw);
        else r = jf_fail(&mi, "role", "must be \"user\" or \"assistant\"; got \"%.40s\"", role_s);
    }
    if (r == 0) {
        /* A final assistant message (text only) is the answer's beginning. */
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        *prefill = role_s && !strcmp(role_s, "assistant") && !json_object_get(last, "tool_calls");
        if (role_s && !strcmp(role_s, "assistant") && json_object_get(last, "tool_calls"))
            r = jf_fail(a, "messages", "the last message is an assistant message with tool_use blocks; send their "
                        "tool_result blocks in a user message");
    }
    if (r == 0) json_object_set(chat, "messages", msgs);
    json_decref(msgs);
    json_decref(ids);
    return r;
}

static int map_tools(const jf *a, json_t *body, json_t *chat) {
    json_t *tools;
    if (jf_get(a, body, "tools", JF_ARRAY, NULL, &tools) < 0) return ERR_INVALID;
    if (!json_array_size(tools)) return 0;
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    jf ts = jf_key(a, "tools");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i), *name, *desc, *schema, *strict;
        jf ti = jf_index(&ts, i);
        if (!json_is_object(t)) return jf_fail(&ti, NULL, "must be an object");
        json_t *type = oai_field(t, "type");
        if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "custom")))
            return jf_fail(&ti, "type", "%s%.64s%s tools are not supported (custom tools with an input_schema only)",
                           json_is_string(type) ? "'" : "", json_is_string(type) ? json_string_value(type) : "non-string",
                           json_is_string(type) ? "'" : "");
        /* in the order OpenAI clients send (the generic tool prompt writes
         * the tools as given: the same tools give the same prompt) */
        if (jf_get(&ti, t, "name", JF_STRING | JF_NONEMPTY | JF_REQUIRED, NULL, &name) < 0 ||
            jf_get(&ti, t, "description", JF_STRING, NULL, &desc) < 0 ||
            jf_get(&ti, t, "input_schema", JF_OBJECT | JF_NEEDED, "a JSON Schema object", &schema) < 0 ||
            jf_get(&ti, t, "strict", JF_BOOL, NULL, &strict) < 0)
            return ERR_INVALID;
        json_t *fn = json_pack("{s:O}", "name", name);
        if (desc) json_object_set(fn, "description", desc);
        json_object_set(fn, "parameters", schema);
        if (strict) json_object_set(fn, "strict", strict); /* a keyword that cannot be enforced is a 400 */
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return 0;
}

static int map_tool_choice(const jf *a, json_t *body, json_t *chat) {
    json_t *tc = oai_field(body, "tool_choice"), *type, *name, *dp;
    if (!tc) return 0;
    jf w = jf_key(a, "tool_choice");
    if (!json_is_object(tc)) return jf_fail(&w, NULL, "must be an object {\"type\": ...}");
    if (jf_get(&w, tc, "type", JF_STRING | JF_REQUIRED, NULL, &type) < 0 ||
        jf_get(&w, tc, "disable_parallel_tool_use", JF_BOOL, NULL, &dp) < 0)
        return ERR_INVALID;
    if (json_is_true(dp)) json_object_set_new(chat, "parallel_tool_calls", json_false());
    const char *t = json_string_value(type);
    if (!strcmp(t, "auto")) json_object_set_new(chat, "tool_choice", json_string("auto"));
    else if (!strcmp(t, "any")) json_object_set_new(chat, "tool_choice", json_string("required"));
    else if (!strcmp(t, "none")) json_object_set_new(chat, "tool_choice", json_string("none"));
    else if (!strcmp(t, "tool")) {
        if (jf_get(&w, tc, "name", JF_STRING | JF_REQUIRED, "a string (the tool to call)", &name) < 0) return ERR_INVALID;
        json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    } else {
        return jf_fail(&w, "type", "must be \"auto\", \"any\", \"tool\" or \"none\"; got \"%.40s\"", t);
    }
    return 0;
}

static int translate(routes_ctx *rc, json_t *body, bool count_only, json_t **chat_out, bool *prefill, oai_error *err) {
    json_t *chat = *chat_out = json_object();
    jf a = jf_body(&names, err);
    json_t *v;
    *prefill = false;
    if (jf_get(&a, body, "model", JF_STRING, NULL, &v) < 0) return ERR_INVALID;
    if (v) json_object_set(chat, "model", v);
    if (!count_only) {
        if (jf_get(&a, body, "max_tokens", JF_NEEDED, NULL, &v) < 0 ||
            jf_int_in(&a, body, "max_tokens", 1, INT32_MAX, "an integer >= 1", &v) < 0)
            return ERR_INVALID;
        json_object_set(chat, "max_tokens", v);
    }
    if (jf_num_in(&a, body, "temperature", 0, 1, "a number in [0, 1]", &v) < 0) return ERR_INVALID;
    if (v) json_object_set(chat, "temperature", v);
    if ((v = oai_field(body, "top_p"))) json_object_set(chat, "top_p", v);
    if (jf_int_in(&a, body, "top_k", 0, INT64_MAX, "an integer >= 0", &v) < 0) return ERR_INVALID;
    if (v) json_object_set(chat, "top_k", v);
    if ((v = oai_field(body, "stream"))) json_object_set(chat, "stream", v);
    if (jf_get(&a, body, "stop_sequences", JF_ARRAY, "an array of strings", &v) < 0) return ERR_INVALID;
    jf sw = jf_key(&a, "stop_sequences");
    for (size_t i = 0; i < json_array_size(v); i++) {
        jf si = jf_index(&sw, i);
        if (!json_is_string(json_array_get(v, i)) || !json_string_length(json_array_get(v, i)))
            return jf_fail(&si, NULL, "must be a non-empty string");
    }
    if (json_array_size(v)) json_object_set(chat, "stop", v);
    jf mw = jf_key(&a, "metadata");
    if (jf_get(&a, body, "metadata", JF_OBJECT, NULL, &v) < 0 || jf_get(&mw, v, "user_id", JF_STRING, NULL, &v) < 0)
        return ERR_INVALID;
    if (v) json_object_set(chat, "user", v);
    /* kvloom's extensions, named as on the chat route */
    static const char *const ext[] = {"seed", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
                                      "ignore_eos", "jump_forward", "speculative", "grammar", "json_schema", "kv_ttl",
                                      "kv_hint", "priority", "cache_salt"};
    for (size_t i = 0; i < ARRAY_LEN(ext); i++)
        if ((v = oai_field(body, ext[i]))) json_object_set(chat, ext[i], v);
    json_t *kw;
    if (jf_get(&a, body, "chat_template_kwargs", JF_OBJECT, NULL, &kw) < 0) return ERR_INVALID;
    kw = kw ? json_deep_copy(kw) : json_object();
    json_object_set_new(chat, "chat_template_kwargs", kw);
    if ((v = oai_field(body, "thinking"))) {
        jf tw = jf_key(&a, "thinking");
        json_t *type = json_is_object(v) ? oai_field(v, "type") : NULL, *budget;
        const char *tt = json_is_string(type) ? json_string_value(type) : "";
        if (strcmp(tt, "enabled") && strcmp(tt, "adaptive") && strcmp(tt, "disabled"))
            return jf_fail(&tw, "type", "must be \"enabled\", \"adaptive\" or \"disabled\"");
        if (jf_int_in(&tw, v, "budget_tokens", 0, INT64_MAX, "an integer >= 0", &budget) < 0) return ERR_INVALID;
        if (rc->reasoning && !json_object_get(kw, "enable_thinking"))
            json_object_set_new(kw, "enable_thinking", json_boolean(strcmp(tt, "disabled") != 0));
    }
    if ((v = oai_field(body, "output_format"))) {
        /* structured outputs: {type: "json_schema", schema} */
        jf ow = jf_key(&a, "output_format");
        json_t *type = json_is_object(v) ? oai_field(v, "type") : NULL, *schema;
        if (!json_is_string(type) || strcmp(json_string_value(type), "json_schema"))
            return jf_fail(&ow, "type", "must be \"json_schema\"");
        if (jf_get(&ow, v, "schema", JF_OBJECT | JF_REQUIRED, "a JSON Schema object", &schema) < 0) return ERR_INVALID;
        json_object_set_new(chat, "response_format",
                            json_pack("{s:s, s:{s:s, s:O, s:b}}", "type", "json_schema", "json_schema", "name", "output",
                                      "schema", schema, "strict", 1));
    }
    if (map_tools(&a, body, chat) < 0 || map_tool_choice(&a, body, chat) < 0) return ERR_INVALID;
    return map_messages(&a, body, chat, prefill);
}

int api_anthropic_params(routes_ctx *rc, json_t *body, bool count_only, oai_params *p, oai_error *err) {
    json_t *chat = NULL;
    bool prefill = false;
    int r = translate(rc, body, count_only, &chat, &prefill, err);
    if (r < 0) {
        json_decref(chat);
        return -1;
    }
    r = oai_parse(chat, OAI_CHAT, tok_n_vocab(rc->tok), p, err);
    json_decref(chat); /* p holds its own references */
    if (r < 0) {
        err->status = 400;
        err->e.code = ERR_INVALID;
        return -1;
    }
    p->continue_final = prefill;
    return 0;
}

/* ---- the answer: content blocks from api_serve's segments (api.h) ---- */

/* One SSE event (ev taken, its "type" set); nothing when not streaming. */
static void emit(api_answer *a, const char *type, json_t *ev) {
    json_object_set_new(ev, "type", json_string(type));
    api_emit(a, type, ev);
}

/* A segment as the whole answer's content block (final) or a stream's
 * content_block_start shows it (empty). */
static json_t *block_json(const api_seg *b, bool final) {
    switch (b->kind) {
    case API_SEG_REASONING:
        return json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                         final ? oai_buf_json(&b->text) : json_string(""), "signature", "");
    case API_SEG_TEXT:
        return json_pack("{s:s, s:o}", "type", "text", "text", final ? oai_buf_json(&b->text) : json_string(""));
    default: {
        json_t *input = final ? json_loadb(b->text.p ? b->text.p : "", b->text.n, 0, NULL) : NULL;
        if (!json_is_object(input)) {
            json_decref(input);
            input = json_object();
        }
        return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", b->id, "name", b->name, "input", input);
    }
    }
}

static void block_open(api_answer *a, int i) {
    api_seg *b = &a->segs[i];
    /* The call's id from the parser, as an Anthropic id: the round trip
     * sends it back in tool_result, whatever it looks like. */
    if (b->kind == API_SEG_CALL) snprintf(b->id, sizeof b->id, "toolu_%s", b->call_id);
    emit(a, "content_block_start", json_pack("{s:i, s:o}", "index", i, "content_block", block_json(b, false)));
}

static void block_delta(api_answer *a, int i, const char *text, size_t n) {
    api_seg_kind k = a->segs[i].kind;
    json_t *d = k == API_SEG_TEXT        ? json_pack("{s:s, s:o}", "type", "text_delta", "text", oai_text_json(text, n))
                : k == API_SEG_REASONING ? json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking", oai_text_json(text, n))
                                         : json_pack("{s:s, s:o}", "type", "input_json_delta", "partial_json",
                                                     oai_text_json(text, n));
    emit(a, "content_block_delta", json_pack("{s:i, s:o}", "index", i, "delta", d));
}

static void block_close(api_answer *a, int i) {
    if (a->segs[i].kind == API_SEG_REASONING)
        emit(a, "content_block_delta",
             json_pack("{s:i, s:{s:s, s:s}}", "index", i, "delta", "type", "signature_delta", "signature", ""));
    emit(a, "content_block_stop", json_pack("{s:i}", "index", i));
}

static const char *stop_reason(const gen *g) {
    const char *fr = gen_finish_reason(g);
    if (!strcmp(fr, "tool_calls")) return "tool_use";
    if (!strcmp(fr, "length")) return "max_tokens";
    return gen_stop_string(g) ? "stop_sequence" : "end_turn";
}

static json_t *usage_json(const gen *g, bool final) {
    int np, nc, cached;
    gen_usage(g, &np, &nc, &cached);
    if (!final) cached = 0, nc = 0;
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", np - cached, "output_tokens", nc,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", cached);
}

/* The message object: empty (a stream's message_start) or final. */
static json_t *message_json(api_answer *a, bool final) {
    json_t *content = json_array();
    int n_calls = final ? gen_n_calls(a->g) : 0;
    for (int i = 0; final && i < a->n_segs; i++) {
        const api_seg *b = &a->segs[i];
        if (b->kind == API_SEG_CALL && b->call_index >= n_calls) continue; /* broken: its text follows */
        json_array_append_new(content, block_json(b, true));
    }
    const char *sseq = final ? gen_stop_string(a->g) : NULL;
    json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", (const char *)a->ctx, "type", "message", "role",
                          "assistant", "model", a->rc->model_id, "content", content);
    json_object_set_new(m, "stop_reason", final ? json_string(stop_reason(a->g)) : json_null());
    json_object_set_new(m, "stop_sequence", sseq ? oai_text_json(sseq, strlen(sseq)) : json_null());
    json_object_set_new(m, "usage", usage_json(a->g, final));
    return m;
}

static int answer_parse(api_answer *a, http_exchange *x, json_t *body, oai_params *p, oai_error *err) {
    (void)x;
    return api_anthropic_params(a->rc, body, false, p, err) < 0 ? -1 : 1;
}

static void answer_start(api_answer *a, const oai_params *p) {
    (void)p;
    a->ctx = xmalloc(64); /* the message id */
    snprintf(a->ctx, 64, "msg_%llx%06llx", (unsigned long long)a->rc->created, gen_serial(a->g));
}

static bool answer_begin(api_answer *a) {
    emit(a, "message_start", json_pack("{s:o}", "message", message_json(a, false)));
    emit(a, "ping", json_object());
    return true;
}

static json_t *answer_finish(api_answer *a) {
    if (!a->stream) return message_json(a, true);
    const char *sseq = gen_stop_string(a->g);
    emit(a, "message_delta",
         json_pack("{s:{s:s, s:o}, s:o}", "delta", "stop_reason", stop_reason(a->g), "stop_sequence",
                   sseq ? oai_text_json(sseq, strlen(sseq)) : json_null(), "usage", usage_json(a->g, true)));
    emit(a, "message_stop", json_object());
    return NULL;
}

static void answer_fail(api_answer *a, const char *msg, int status) {
    char *s = error_json(status, msg, NULL, NULL);
    sbuf_put(a->out, "event: error\ndata: ", 19);
    sbuf_put(a->out, s, strlen(s));
    sbuf_put(a->out, "\n\n", 2);
    free(s);
}

const api_ops api_anthropic = {
    .name = "anthropic",
    .field = field_name,
    .error_json = error_json,
    .parse = answer_parse,
    .start = answer_start,
    .begin = answer_begin,
    .open = block_open,
    .delta = block_delta,
    .close = block_close,
    .finish = answer_finish,
    .fail = answer_fail,
    .empty = API_EMPTY_IF_NONE,
    .framing = API_SSE,
    .stream_type = "text/event-stream",
    .stream_nomem = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                    "\"message\":\"" API_NOMEM_MSG "\"}}\n\n",
};

/* ---- routes ---- */

void api_anthropic_count_tokens(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    json_t *body = api_body_json(&api_anthropic, x);
    if (!body) return;
    oai_params p;
    oai_error err;
    int r = api_anthropic_params(rc, body, true, &p, &err);
    json_decref(body);
    if (api_parsed(&api_anthropic, x, r < 0 ? -1 : 1, &p, &err) < 0) return;
    int n = gen_count_prompt(rc, &p, &err);
    oai_params_free(&p);
    if (n < 0) {
        api_reply_refusal(&api_anthropic, x, &err);
        return;
    }
    json_t *o = json_pack("{s:i}", "input_tokens", n);
    api_reply_json(&api_anthropic, x, o);
    json_decref(o);
}
