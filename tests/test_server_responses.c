/*
 * test_server_responses.c — the OpenAI Responses API of `kvloom serve`
 * (POST /v1/responses, GET|DELETE /v1/responses/{id}) over real sockets, on
 * the shared stories260K model (ChatML fallback template: generic tool
 * format; only constrained decoding makes its calls valid):
 *
 *   - string input, item input (text parts), instructions: the prompt is the
 *     chat route's for the same messages (token counts equal);
 *   - streaming: "event:" names match the data's type, sequence numbers
 *     count from 0, the events come in the documented order, and the deltas
 *     concatenate to the non-streamed text (temperature 0);
 *   - tool_choice required / named: function_call items whose arguments
 *     satisfy the schema; streamed argument deltas assemble to the same call;
 *   - a tool round trip (function_call + function_call_output), inline and
 *     through previous_response_id;
 *   - previous_response_id chains (recursively): the prompt is the chat
 *     route's prompt of the whole conversation, and comes from the cache;
 *   - the store: GET gives the created object, DELETE forgets it, store:false
 *     keeps nothing, an unknown previous_response_id is a 404 naming it, the
 *     oldest of more than 1000 entries is evicted (least recently used);
 *   - text.format json_schema: the output satisfies the schema;
 *   - a client that leaves mid-stream: the request is cancelled;
 *   - bad input: each a 4xx naming the field;
 *   - on a tiny random-weight Qwen3 (reasoning template): a reasoning item
 *     before the message (JSON and streamed), reasoning.effort "none"
 *     switches thinking off.
 */
#include <pthread.h>

#include "server/http.h"
#include "server_util.h"

static int g_port;

static const char *weather_tool =
    "{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather in a city\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},"
    "\"required\":[\"city\",\"unit\",\"days\"],\"additionalProperties\":false},\"strict\":true}";
static const char *time_tool =
    "{\"type\":\"function\",\"name\":\"get_time\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"zone\":{\"enum\":[\"UTC\",\"CET\",\"PST\"]}},\"required\":[\"zone\"]}}";

static size_t utf8_len(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* The arguments of get_weather / get_time satisfy their schemas. */
static bool args_valid(const char *name, const char *args) {
    json_t *a = json_loads(args, 0, NULL);
    bool ok = json_is_object(a);
    if (ok && !strcmp(name, "get_weather")) {
        json_t *city = json_object_get(a, "city"), *unit = json_object_get(a, "unit"), *days = json_object_get(a, "days");
        ok = json_object_size(a) == 3 && json_is_string(city) && utf8_len(json_string_value(city)) <= 12 &&
             json_is_string(unit) &&
             (!strcmp(json_string_value(unit), "celsius") || !strcmp(json_string_value(unit), "fahrenheit")) &&
             json_is_integer(days) && json_integer_value(days) >= 1 && json_integer_value(days) <= 7;
    } else if (ok && !strcmp(name, "get_time")) {
        json_t *z = json_object_get(a, "zone");
        ok = json_object_size(a) == 1 && json_is_string(z) &&
             (!strcmp(json_string_value(z), "UTC") || !strcmp(json_string_value(z), "CET") ||
              !strcmp(json_string_value(z), "PST"));
    } else {
        ok = false;
    }
    json_decref(a);
    return ok;
}

static json_t *create(const char *body, int *status) { return post_json(g_port, "/v1/responses", body, status); }

static long usage_of(json_t *r, const char *k) {
    json_t *u = json_object_get(r, "usage");
    if (!strcmp(k, "cached_tokens")) u = json_object_get(u, "input_tokens_details");
    json_t *v = json_object_get(u, k);
    return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

static const char *str(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

/* The text of the response's message items, joined (NULL: none). */
static char *output_text(json_t *r) {
    json_t *out = json_object_get(r, "output");
    sbuf b = {0};
    bool any = false;
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *it = json_array_get(out, i);
        if (strcmp(str(it, "type") ? str(it, "type") : "", "message")) continue;
        json_t *c = json_array_get(json_object_get(it, "content"), 0);
        const char *t = str(c, "text");
        if (t) sbuf_put(&b, t, strlen(t)), any = true;
    }
    sbuf_put(&b, "", 1);
    if (!any) {
        sbuf_free(&b);
        return NULL;
    }
    return b.p;
}

/* The output items of one type. */
static json_t *items_of(json_t *r, const char *type) {
    json_t *a = json_array(), *out = json_object_get(r, "output");
    for (size_t i = 0; i < json_array_size(out); i++)
        if (!strcmp(str(json_array_get(out, i), "type") ? str(json_array_get(out, i), "type") : "", type))
            json_array_append(a, json_array_get(out, i));
    return a;
}

/* The response's basic shape. */
static void check_shape(json_t *r) {
    const char *id = str(r, "id"), *st = str(r, "status");
    CHECK_MSG(id && !strncmp(id, "resp_", 5), "id %s", id ? id : "-");
    CHECK_STR(str(r, "object"), "response");
    CHECK_MSG(st && (!strcmp(st, "completed") || !strcmp(st, "incomplete")), "status %s", st ? st : "-");
    CHECK(json_is_integer(json_object_get(r, "created_at")));
    CHECK(json_is_null(json_object_get(r, "error")));
    long in = usage_of(r, "input_tokens"), out = usage_of(r, "output_tokens");
    CHECK(in > 0 && out >= 0 && usage_of(r, "total_tokens") == in + out);
    CHECK(usage_of(r, "cached_tokens") >= 0 && usage_of(r, "cached_tokens") <= in);
    if (st && !strcmp(st, "incomplete"))
        CHECK_STR(str(json_object_get(r, "incomplete_details"), "reason"), "max_output_tokens");
}

/* ---- SSE ---- */

/* sse_events (server_util.h), checking that sequence numbers count from 0. */
static int sse_parse(const char *body, sse_ev *evs, int cap) {
    int n = sse_events(body, evs, cap);
    for (int i = 0; i < n; i++) {
        json_t *seq = json_object_get(evs[i].data, "sequence_number");
        CHECK_MSG(json_is_integer(seq) && json_integer_value(seq) == i, "sequence_number of event %d", i);
    }
    return n;
}

static char *post_stream(const char *body) {
    resp r;
    if (http_do(g_port, "POST", "/v1/responses", NULL, body, &r) < 0) return xstrdup("");
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.head && strcasestr(r.head, "content-type: text/event-stream"));
    char *b = r.body;
    r.body = NULL;
    resp_free(&r);
    return b ? b : xstrdup("");
}

/* The body of a request: input, then extra fields. */
static void body_of(char *buf, size_t cap, const char *input, const char *extra) {
    snprintf(buf, cap, "{\"model\":\"stories\",\"input\":%s,\"temperature\":0%s%s}", input, *extra ? "," : "", extra);
}

/* ---- tests ---- */

static void check_text(void) {
    char b[4096];
    int st;
    body_of(b, sizeof b, "\"Once upon a time\"", "\"max_output_tokens\":24");
    json_t *r = create(b, &st);
    CHECK_EQ_INT(st, 200);
    check_shape(r);
    char *text = output_text(r);
    CHECK(text != NULL);
    json_t *msgs = items_of(r, "message");
    CHECK_EQ_INT((int)json_array_size(msgs), 1);
    json_t *m = json_array_get(msgs, 0);
    CHECK(str(m, "id") && !strncmp(str(m, "id"), "msg_", 4));
    CHECK_STR(str(m, "role"), "assistant");
    CHECK_STR(str(json_array_get(json_object_get(m, "content"), 0), "type"), "output_text");
    CHECK(json_is_array(json_object_get(json_array_get(json_object_get(m, "content"), 0), "annotations")));
    CHECK(usage_of(r, "output_tokens") <= 24 && usage_of(r, "output_tokens") > 0);
    CHECK_EQ_INT((int)json_integer_value(json_object_get(r, "max_output_tokens")), 24);
    long n_plain = usage_of(r, "input_tokens");
    json_decref(msgs);

    /* the same as an item with text parts: the same prompt and text */
    body_of(b, sizeof b,
            "[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Once upon \"},"
            "{\"type\":\"input_text\",\"text\":\"a time\"}]}]",
            "\"max_output_tokens\":24");
    json_t *r2 = create(b, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT((int)usage_of(r2, "input_tokens"), (int)n_plain);
    char *text2 = output_text(r2);
    CHECK_MSG(text && text2 && !strcmp(text, text2), "item input text '%s' vs '%s'", text2 ? text2 : "-", text ? text : "-");
    free(text2);
    json_decref(r2);

    /* instructions: a system message first, as the chat route renders it */
    body_of(b, sizeof b, "\"Once upon a time\"", "\"max_output_tokens\":4,\"instructions\":\"You tell stories.\"");
    r2 = create(b, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_STR(str(r2, "instructions"), "You tell stories.");
    json_t *c = post_json(g_port, "/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"system\",\"content\":\"You tell stories.\"},{\"role\":\"user\","
                          "\"content\":\"Once upon a time\"}],\"max_tokens\":1}",
                          &st);
    CHECK_MSG(usage_of(r2, "input_tokens") == usage_int(c, "prompt_tokens") && usage_of(r2, "input_tokens") > n_plain,
              "instructions: %ld tokens, chat %ld, plain %ld", usage_of(r2, "input_tokens"), usage_int(c, "prompt_tokens"),
              n_plain);
    json_decref(c);
    json_decref(r2);

    /* streamed: the events in order, deltas == the whole text */
    body_of(b, sizeof b, "\"Once upon a time\"", "\"max_output_tokens\":24,\"stream\":true");
    char *sse = post_stream(b);
    sse_ev evs[200];
    int n = sse_parse(sse, evs, 200);
    static const char *const order[] = {"response.created", "response.in_progress", "response.output_item.added",
                                        "response.content_part.added"};
    CHECK_MSG(n >= 9, "%d events", n);
    for (int i = 0; i < 4 && i < n; i++) CHECK_STR(evs[i].type, order[i]);
    sbuf d = {0};
    int i = 4;
    for (; i < n && !strcmp(evs[i].type, "response.output_text.delta"); i++) {
        const char *delta = str(evs[i].data, "delta");
        CHECK(delta && str(evs[i].data, "item_id") && json_integer_value(json_object_get(evs[i].data, "output_index")) == 0);
        if (delta) sbuf_put(&d, delta, strlen(delta));
    }
    sbuf_put(&d, "", 1);
    CHECK_MSG(text && !strcmp(d.p, text), "streamed '%s' vs whole '%s'", d.p, text ? text : "-");
    static const char *const tail[] = {"response.output_text.done", "response.content_part.done",
                                       "response.output_item.done"};
    for (int k = 0; k < 3; k++) CHECK_MSG(i + k < n && !strcmp(evs[i + k].type, tail[k]), "event %d: %s", i + k,
                                          i + k < n ? evs[i + k].type : "-");
    if (i < n) CHECK_STR(str(evs[i].data, "text"), d.p);
    CHECK_MSG(i + 4 == n, "%d events after the deltas, want 4", n - i);
    const char *last = n ? evs[n - 1].type : "";
    CHECK_MSG(!strcmp(last, "response.completed") || !strcmp(last, "response.incomplete"), "last event %s", last);
    json_t *fin = n ? json_object_get(evs[n - 1].data, "response") : NULL;
    char *ftext = fin ? output_text(fin) : NULL;
    CHECK(ftext && !strcmp(ftext, d.p));
    CHECK(fin && json_is_object(json_object_get(fin, "usage")));
    CHECK(n >= 2 && json_is_null(json_object_get(json_object_get(evs[0].data, "response"), "usage")));
    CHECK_STR(str(json_object_get(evs[0].data, "response"), "status"), "in_progress");
    if (fin) check_shape(fin);
    free(ftext);
    sbuf_free(&d);
    sse_events_free(evs, n);
    free(sse);
    free(text);
    json_decref(r);
}

static void check_tools(void) {
    char b[8192], extra[4096];
    int st;
    snprintf(extra, sizeof extra, "\"tools\":[%s,%s],\"tool_choice\":\"required\",\"parallel_tool_calls\":false,"
                                  "\"max_output_tokens\":200",
             weather_tool, time_tool);
    body_of(b, sizeof b, "\"What is the weather in Paris?\"", extra);
    json_t *r = create(b, &st);
    CHECK_EQ_INT(st, 200);
    check_shape(r);
    CHECK_STR(str(r, "status"), "completed");
    json_t *calls = items_of(r, "function_call");
    CHECK_EQ_INT((int)json_array_size(calls), 1);
    json_t *c = json_array_get(calls, 0);
    const char *name = str(c, "name"), *args = str(c, "arguments");
    CHECK(str(c, "id") && !strncmp(str(c, "id"), "fc_", 3));
    CHECK(str(c, "call_id") && !strncmp(str(c, "call_id"), "call_", 5));
    CHECK_STR(str(c, "status"), "completed");
    CHECK_MSG(name && args && args_valid(name, args), "call %s(%s)", name ? name : "-", args ? args : "-");
    CHECK_STR(str(json_array_get(json_object_get(r, "tools"), 0), "name"), "get_weather");
    CHECK_STR(str(r, "tool_choice"), "required");
    CHECK(json_is_false(json_object_get(r, "parallel_tool_calls")));

    /* streamed: the same call from the deltas */
    snprintf(b + strlen(b) - 1, sizeof b - strlen(b) + 1, ",\"stream\":true}");
    char *sse = post_stream(b);
    sse_ev evs[400];
    int n = sse_parse(sse, evs, 400);
    sbuf d = {0};
    int n_added = 0, n_done = 0;
    const char *done_args = NULL, *item_id = NULL;
    for (int i = 0; i < n; i++) {
        json_t *it = json_object_get(evs[i].data, "item");
        if (!strcmp(evs[i].type, "response.output_item.added") && !strcmp(str(it, "type"), "function_call")) {
            n_added++;
            item_id = str(it, "id");
            CHECK_STR(str(it, "arguments"), "");
            CHECK_STR(str(it, "name"), name ? name : "-");
            CHECK_STR(str(it, "status"), "in_progress");
        } else if (!strcmp(evs[i].type, "response.function_call_arguments.delta")) {
            CHECK_MSG(item_id && !strcmp(str(evs[i].data, "item_id"), item_id), "delta before its item");
            sbuf_put(&d, str(evs[i].data, "delta"), strlen(str(evs[i].data, "delta")));
        } else if (!strcmp(evs[i].type, "response.function_call_arguments.done")) {
            n_done++;
            done_args = str(evs[i].data, "arguments");
            CHECK_STR(str(evs[i].data, "name"), name ? name : "-");
        }
    }
    sbuf_put(&d, "", 1);
    CHECK_EQ_INT(n_added, 1);
    CHECK_EQ_INT(n_done, 1);
    CHECK_MSG(args && !strcmp(d.p, args) && done_args && !strcmp(done_args, args), "streamed args '%s' vs '%s'", d.p,
              args ? args : "-");
    CHECK_STR(n ? evs[n - 1].type : "", "response.completed");
    sbuf_free(&d);
    sse_events_free(evs, n);
    free(sse);
    json_decref(calls);
    json_decref(r);

    /* a named function */
    snprintf(extra, sizeof extra, "\"tools\":[%s,%s],\"tool_choice\":{\"type\":\"function\",\"name\":\"get_time\"},"
                                  "\"max_output_tokens\":200",
             weather_tool, time_tool);
    body_of(b, sizeof b, "\"What time is it?\"", extra);
    r = create(b, &st);
    CHECK_EQ_INT(st, 200);
    calls = items_of(r, "function_call");
    CHECK(json_array_size(calls) >= 1);
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *ci = json_array_get(calls, i);
        if (strcmp(str(ci, "status"), "completed")) continue;
        CHECK_STR(str(ci, "name"), "get_time");
        CHECK(args_valid("get_time", str(ci, "arguments")));
    }
    json_decref(calls);
    json_decref(r);

    /* the round trip, inline: a call and its output, then text */
    snprintf(extra, sizeof extra, "\"tools\":[%s],\"max_output_tokens\":8", weather_tool);
    body_of(b, sizeof b,
            "[{\"role\":\"user\",\"content\":\"Weather?\"},{\"type\":\"function_call\",\"call_id\":\"call_1\","
            "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"unit\\\": \\\"celsius\\\", "
            "\\\"days\\\": 1}\"},{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"21 C, sunny\"}]",
            extra);
    r = create(b, &st);
    CHECK_MSG(st == 200, "round trip: %d", st);
    long n_inline = usage_of(r, "input_tokens");
    json_decref(r);
    /* the same conversation through the chat route: the same prompt (the
     * tool in chat's shape) */
    json_t *wt = json_loads(weather_tool, 0, NULL);
    json_object_del(wt, "type");
    json_t *cb = json_pack("{s:[{s:s, s:s}, {s:s, s:n, s:[{s:s, s:s, s:{s:s, s:s}}]}, {s:s, s:s, s:s}], s:[{s:s, s:o}], "
                           "s:i}",
                           "messages", "role", "user", "content", "Weather?", "role", "assistant", "content",
                           "tool_calls", "id", "call_1", "type", "function", "function", "name", "get_weather",
                           "arguments", "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 1}", "role", "tool",
                           "tool_call_id", "call_1", "content", "21 C, sunny", "tools", "type", "function", "function",
                           wt, "max_tokens", 1);
    char *cbs = json_dumps(cb, 0);
    json_t *c2 = post_json(g_port, "/v1/chat/completions", cbs, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(usage_int(c2, "prompt_tokens") == n_inline, "round trip prompt %ld vs chat %ld", n_inline,
              usage_int(c2, "prompt_tokens"));
    json_decref(c2);
    free(cbs);
    json_decref(cb);

    /* the round trip through previous_response_id */
    snprintf(extra, sizeof extra, "\"tools\":[%s],\"tool_choice\":\"required\",\"parallel_tool_calls\":false,"
                                  "\"max_output_tokens\":200",
             weather_tool);
    body_of(b, sizeof b, "\"Weather in Oslo?\"", extra);
    r = create(b, &st);
    calls = items_of(r, "function_call");
    const char *cid = str(json_array_get(calls, 0), "call_id");
    CHECK(cid != NULL);
    if (cid) {
        char input[512];
        snprintf(input, sizeof input, "[{\"type\":\"function_call_output\",\"call_id\":\"%s\",\"output\":\"-3 C\"}]",
                 cid);
        snprintf(extra, sizeof extra, "\"previous_response_id\":\"%s\",\"tools\":[%s],\"max_output_tokens\":8",
                 str(r, "id"), weather_tool);
        body_of(b, sizeof b, input, extra);
        json_t *r2 = create(b, &st);
        CHECK_MSG(st == 200, "round trip by previous_response_id: %d", st);
        CHECK_STR(str(r2, "previous_response_id"), str(r, "id"));
        CHECK_MSG(usage_of(r2, "input_tokens") > usage_of(r, "input_tokens") + usage_of(r, "output_tokens") - 8 &&
                      usage_of(r2, "cached_tokens") >= usage_of(r, "input_tokens") - 16,
                  "chained call: %ld input (%ld cached) after %ld + %ld", usage_of(r2, "input_tokens"),
                  usage_of(r2, "cached_tokens"), usage_of(r, "input_tokens"), usage_of(r, "output_tokens"));
        json_decref(r2);
    }
    json_decref(calls);
    json_decref(r);
}

/* previous_response_id: the prompt is the chat route's for the whole
 * conversation, and its earlier part comes from the prefix cache. */
static void check_chain(void) {
    char b[4096];
    int st;
    body_of(b, sizeof b, "\"Tell me a story.\"", "\"instructions\":\"Be brief.\",\"max_output_tokens\":10");
    json_t *r1 = create(b, &st);
    CHECK_EQ_INT(st, 200);
    char extra[512];
    snprintf(extra, sizeof extra, "\"instructions\":\"Be brief.\",\"max_output_tokens\":10,\"previous_response_id\":\"%s\"",
             str(r1, "id"));
    body_of(b, sizeof b, "\"More!\"", extra);
    json_t *r2 = create(b, &st);
    CHECK_EQ_INT(st, 200);
    snprintf(extra, sizeof extra, "\"instructions\":\"Be brief.\",\"max_output_tokens\":10,\"previous_response_id\":\"%s\"",
             str(r2, "id"));
    body_of(b, sizeof b, "[{\"role\":\"user\",\"content\":\"The end?\"}]", extra);
    json_t *r3 = create(b, &st);
    CHECK_EQ_INT(st, 200);
    char *t1 = output_text(r1), *t2 = output_text(r2);
    json_t *cb = json_pack("{s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}], s:i}", "messages",
                           "role", "system", "content", "Be brief.", "role", "user", "content", "Tell me a story.", "role",
                           "assistant", "content", t1 ? t1 : "", "role", "user", "content", "More!", "role", "assistant",
                           "content", t2 ? t2 : "", "role", "user", "content", "The end?", "max_tokens", 1);
    char *cbs = json_dumps(cb, 0);
    json_t *c = post_json(g_port, "/v1/chat/completions", cbs, &st);
    CHECK_MSG(usage_of(r3, "input_tokens") == usage_int(c, "prompt_tokens"), "chain of 3: %ld tokens, chat %ld",
              usage_of(r3, "input_tokens"), usage_int(c, "prompt_tokens"));
    long in1 = usage_of(r1, "input_tokens"), in2 = usage_of(r2, "input_tokens"), in3 = usage_of(r3, "input_tokens");
    CHECK_MSG(in2 > in1 + usage_of(r1, "output_tokens") && in3 > in2 + usage_of(r2, "output_tokens"), "inputs %ld %ld %ld",
              in1, in2, in3);
    CHECK_MSG(usage_of(r2, "cached_tokens") > 0 && usage_of(r3, "cached_tokens") >= in2 - 16, "cached %ld, %ld of %ld",
              usage_of(r2, "cached_tokens"), usage_of(r3, "cached_tokens"), in2);
    free(cbs);
    json_decref(cb);
    json_decref(c);
    free(t1);
    free(t2);
    json_decref(r1);
    json_decref(r2);
    json_decref(r3);
}

static void expect_error(const char *method, const char *path, const char *body, int status, const char *param,
                         const char *needle) {
    resp r;
    CHECK(http_do(g_port, method, path, NULL, body, &r) == 0);
    CHECK_MSG(r.status == status, "status %d (want %d) for %s: %s", r.status, status, body ? body : path,
              r.body ? r.body : "");
    json_t *o = r.body ? json_loads(r.body, 0, NULL) : NULL;
    json_t *err = json_object_get(o, "error");
    const char *p = str(err, "param"), *msg = str(err, "message");
    CHECK_MSG(param ? (p && !strcmp(p, param)) : json_is_null(json_object_get(err, "param")), "param %s, want %s (%s)",
              p ? p : "null", param ? param : "null", body ? body : path);
    CHECK_MSG(msg && strstr(msg, needle), "message '%s' lacks '%s'", msg ? msg : "", needle);
    CHECK(json_is_string(json_object_get(err, "type")));
    json_decref(o);
    resp_free(&r);
}

static void check_store(void) {
    char b[4096], path[160];
    int st;
    body_of(b, sizeof b, "\"Hello\"", "\"max_output_tokens\":5,\"metadata\":{\"k\":\"v\"}");
    resp cr;
    CHECK(http_do(g_port, "POST", "/v1/responses", NULL, b, &cr) == 0);
    json_t *r = json_loads(cr.body ? cr.body : "", 0, NULL);
    CHECK_STR(str(json_object_get(r, "metadata"), "k"), "v");
    const char *id = str(r, "id");
    snprintf(path, sizeof path, "/v1/responses/%s", id ? id : "x");
    json_t *g = get_json(g_port, path, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(json_equal(g, r), "GET differs from the created response");
    json_decref(g);
    resp dr;
    CHECK(http_do(g_port, "DELETE", path, NULL, NULL, &dr) == 0);
    json_t *d = json_loads(dr.body ? dr.body : "", 0, NULL);
    CHECK_EQ_INT(dr.status, 200);
    CHECK(json_is_true(json_object_get(d, "deleted")) && !strcmp(str(d, "id") ? str(d, "id") : "", id ? id : "-") &&
          !strcmp(str(d, "object"), "response"));
    json_decref(d);
    resp_free(&dr);
    expect_error("GET", path, NULL, 404, NULL, id ? id : "-");
    expect_error("DELETE", path, NULL, 404, NULL, id ? id : "-");
    snprintf(b, sizeof b, "{\"input\":\"x\",\"previous_response_id\":\"%s\"}", id ? id : "x");
    expect_error("POST", "/v1/responses", b, 404, "previous_response_id", id ? id : "-");
    json_decref(r);
    resp_free(&cr);

    /* store: false keeps nothing */
    body_of(b, sizeof b, "\"Hello\"", "\"max_output_tokens\":2,\"store\":false");
    r = create(b, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(json_is_false(json_object_get(r, "store")));
    snprintf(path, sizeof path, "/v1/responses/%s", str(r, "id") ? str(r, "id") : "x");
    expect_error("GET", path, NULL, 404, NULL, "no stored response");
    json_decref(r);
    expect_error("POST", "/v1/responses", "{\"input\":\"x\",\"previous_response_id\":\"resp_nope\"}", 404,
                 "previous_response_id", "resp_nope");
    expect_error("GET", "/v1/responses/resp_nope/input_items", NULL, 404, NULL, "no route");
}

/* More than 1000 stored responses: the least recently used goes first. */
static void check_eviction(void) {
    int st;
    char ids[2][64], path[128];
    for (int i = 0; i < 2; i++) {
        json_t *r = create("{\"input\":\"Hi\",\"max_output_tokens\":1}", &st);
        snprintf(ids[i], sizeof ids[i], "%s", str(r, "id") ? str(r, "id") : "-");
        json_decref(r);
    }
    double t0 = su_now();
    for (int i = 0; i < 1000; i++) {
        if (i == 500) { /* use ids[1]: it becomes the most recent */
            snprintf(path, sizeof path, "/v1/responses/%s", ids[1]);
            json_decref(get_json(g_port, path, &st));
            CHECK_EQ_INT(st, 200);
        }
        json_t *r = create("{\"input\":\"Hi\",\"max_output_tokens\":1}", &st);
        if (st != 200) CHECK_EQ_INT(st, 200);
        json_decref(r);
    }
    snprintf(path, sizeof path, "/v1/responses/%s", ids[0]);
    json_decref(get_json(g_port, path, &st));
    CHECK_MSG(st == 404, "the oldest entry after 1000 more: %d", st);
    snprintf(path, sizeof path, "/v1/responses/%s", ids[1]);
    json_decref(get_json(g_port, path, &st));
    CHECK_MSG(st == 200, "an entry used recently: %d", st);
    fprintf(stderr, "eviction: 1000 responses in %.1f s\n", su_now() - t0);
}

static const char *person_schema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":10},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120}},\"required\":[\"name\",\"age\"],"
    "\"additionalProperties\":false}";

static void check_structured(void) {
    char b[4096], extra[2048];
    int st;
    snprintf(extra, sizeof extra,
             "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"person\",\"strict\":true,\"schema\":%s}},"
             "\"max_output_tokens\":100",
             person_schema);
    body_of(b, sizeof b, "\"Who?\"", extra);
    json_t *r = create(b, &st);
    CHECK_EQ_INT(st, 200);
    char *t = output_text(r);
    json_t *o = t ? json_loads(t, 0, NULL) : NULL;
    json_t *name = json_object_get(o, "name"), *age = json_object_get(o, "age");
    CHECK_MSG(json_is_object(o) && json_object_size(o) == 2 && json_is_string(name) &&
                  utf8_len(json_string_value(name)) <= 10 && json_is_integer(age) && json_integer_value(age) >= 0 &&
                  json_integer_value(age) <= 120,
              "json_schema output: %s", t ? t : "(none)");
    CHECK_STR(str(json_object_get(json_object_get(r, "text"), "format"), "type"), "json_schema");
    json_decref(o);
    free(t);
    json_decref(r);
    body_of(b, sizeof b, "\"Who?\"", "\"text\":{\"format\":{\"type\":\"json_object\"},\"max_output_tokens\":60}");
    r = create(b, &st);
    CHECK_EQ_INT(st, 200);
    t = output_text(r);
    o = t ? json_loads(t, 0, NULL) : NULL;
    CHECK_MSG(json_is_object(o) || !strcmp(str(r, "status"), "incomplete"), "json_object output: %s", t ? t : "-");
    json_decref(o);
    free(t);
    json_decref(r);
}

/* A client that leaves in the middle of a stream: the request is cancelled
 * (the engine goes idle) and the server keeps serving. */
static void check_cancel(void) {
    const char *body = "{\"input\":\"Once\",\"max_output_tokens\":5000,\"ignore_eos\":true,\"stream\":true}";
    int fd = su_send_request(g_port, "POST", "/v1/responses", NULL, body, strlen(body), 30);
    CHECK(fd >= 0);
    CHECK(su_read_until(fd, "response.output_text.delta", 20));
    if (fd >= 0) close(fd);
    CHECK(wait_idle(g_port, 20));
}

static void check_bad_input(void) {
    char b[4096];
#define E(body, param, needle) expect_error("POST", "/v1/responses", body, 400, param, needle)
    E("{\"input\":5}", "input", "input");
    E("{\"model\":\"x\"}", "input", "input: is required");
    E("{\"input\":[]}", "input", "non-empty");
    E("{\"input\":[{\"type\":\"web_search_call\",\"id\":\"ws_1\"}]}", "input", "input[0].type: unsupported item type 'web_search_call'");
    E("{\"input\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":[{\"type\":\"input_image\","
      "\"image_url\":\"x\"}]}]}",
      "input", "input[1].content[0].type: 'input_image'");
    E("{\"input\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "input", "input[0].role");
    E("{\"input\":[{\"role\":\"user\"}]}", "input", "input[0].content");
    E("{\"input\":[{\"content\":\"x\"}]}", "input", "input[0].type");
    E("{\"input\":[5]}", "input", "input[0]");
    E("{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"call_nope\",\"output\":\"x\"}]}", "input",
      "input[0].call_id: 'call_nope'");
    E("{\"input\":[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]}", "input", "input[0].call_id");
    E("{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":5}]}", "input",
      "input[0].arguments");
    E("{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"},"
      "{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":[{\"type\":\"input_file\"}]}]}",
      "input", "input[1].output[0].type");
    E("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools", "tools[0].type: unsupported tool type 'web_search'");
    E("{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "tools", "tools[0].name");
    E("{\"input\":\"x\",\"tools\":{}}", "tools", "tools");
    snprintf(b, sizeof b, "{\"input\":\"x\",\"tools\":[%s],\"tool_choice\":{\"type\":\"function\",\"name\":\"nope\"}}",
             weather_tool);
    E(b, "tool_choice", "nope");
    snprintf(b, sizeof b, "{\"input\":\"x\",\"tools\":[%s],\"tool_choice\":{\"type\":\"file_search\"}}", weather_tool);
    E(b, "tool_choice", "file_search");
    E("{\"input\":\"x\",\"tool_choice\":\"required\"}", "tool_choice", "tools");
    E("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format", "text.format.type");
    E("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\"}}}", "text.format",
      "text.format.schema");
    E("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\",\"strict\":true,\"schema\":"
      "{\"type\":\"object\",\"patternProperties\":{\"a\":{},\"b\":{},\"c\":{},\"d\":{},\"e\":{}}}}}}",
      "text.format", "patternProperties"); /* five: the compiler takes up to four */
    E("{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", "max_output_tokens");
    E("{\"input\":\"x\",\"temperature\":5}", "temperature", "temperature");
    E("{\"input\":\"x\",\"top_p\":0}", "top_p", "top_p");
    E("{\"input\":\"x\",\"reasoning\":{\"effort\":\"extreme\"}}", "reasoning", "reasoning.effort");
    E("{\"input\":\"x\",\"instructions\":5}", "instructions", "instructions");
    E("{\"input\":\"x\",\"previous_response_id\":5}", "previous_response_id", "previous_response_id");
    E("{\"input\":\"x\",\"metadata\":\"m\"}", "metadata", "metadata");
    E("{\"input\":\"x\",\"metadata\":{\"a\":1}}", "metadata", "metadata.a");
    E("{\"input\":\"x\",\"store\":\"yes\"}", "store", "store");
    E("{\"input\":\"x\",\"stream\":\"yes\"}", "stream", "stream");
    E("{\"input\":\"x\",\"background\":true}", "background", "background");
    E("{\"input\":\"x\",\"conversation\":\"conv_1\"}", "conversation", "previous_response_id");
    E("{\"input\":\"x\",\"truncation\":\"sometimes\"}", "truncation", "truncation");
    E("{\"input\":", NULL, "invalid JSON");
    E("[1]", NULL, "JSON object");
#undef E
    /* accepted and ignored: what a client sends by default */
    int st;
    json_t *r = create("{\"input\":\"x\",\"max_output_tokens\":2,\"truncation\":\"auto\",\"include\":[],\"user\":\"u\","
                       "\"reasoning\":{\"effort\":\"low\",\"summary\":\"auto\"},\"text\":{\"verbosity\":\"low\"},"
                       "\"parallel_tool_calls\":null,\"service_tier\":\"auto\",\"prompt_cache_key\":\"k\",\"tools\":[]}",
                       &st);
    CHECK_MSG(st == 200, "client defaults: %d %s", st, r ? json_dumps(r, 0) : "");
    json_decref(r);
    /* a reasoning item before a message is accepted on a model without reasoning */
    r = create("{\"input\":[{\"role\":\"user\",\"content\":\"a\"},{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]},"
               "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"b\"}]},"
               "{\"role\":\"developer\",\"content\":\"c\"},{\"role\":\"user\",\"content\":\"d\"}],\"max_output_tokens\":2}",
               &st);
    CHECK_EQ_INT(st, 200);
    json_decref(r);
}

/* Concurrent creates, chained reads and deletes from several threads. */
static void *par_chain(void *arg) {
    int *fails = arg;
    for (int k = 0; k < 5; k++) {
        int st;
        json_t *r = create("{\"input\":\"Hi\",\"max_output_tokens\":3}", &st);
        const char *id = str(r, "id");
        char b[256];
        snprintf(b, sizeof b, "{\"input\":\"Again\",\"max_output_tokens\":3,\"previous_response_id\":\"%s\"}",
                 id ? id : "x");
        json_t *r2 = create(b, &st);
        if (st != 200) (*fails)++;
        snprintf(b, sizeof b, "/v1/responses/%s", id ? id : "x");
        resp dr;
        if (http_do(g_port, "DELETE", b, NULL, NULL, &dr) < 0 || dr.status != 200) (*fails)++;
        resp_free(&dr);
        json_decref(r2);
        json_decref(r);
    }
    return NULL;
}

static void check_concurrency(void) {
    pthread_t th[4];
    int fails[4] = {0};
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, par_chain, &fails[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(fails[i], 0);
    }
}

/* A reasoning template: reasoning items, reasoning.effort. */
static void check_qwen3(void) {
    const char *bin = getenv("KVLOOM_BIN") && *getenv("KVLOOM_BIN") ? getenv("KVLOOM_BIN") : "build/kvloom";
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "/tmp/kvloom_resp_qwen3_%d.gguf", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "%s gen --preset qwen3-0.6b --n-layer 1 --n-embd 64 --n-head 2 --n-head-kv 1 --head-dim 32 --n-ff 128 "
             "--type Q8_0 --shared %s -o %s 2>/dev/null",
             bin, test_shared_dir(), path);
    CHECK_MSG(system(cmd) == 0, "%s", cmd);
    srv s;
    const char *flags[] = {"-m", path, "--check", "--kv-mem", "64M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "qwen3 server did not start");
    if (rc) {
        srv_print_log(&s);
        unlink(path);
        return;
    }
    int saved = g_port;
    g_port = s.port;
    int st;
    const char *g = "\"instructions\":\"You are a careful assistant: think step by step before you answer, then "
                    "answer in capitals.\",\"grammar\":\"root ::= \\\"<think>\\\\n\\\" [a-z]{3,8} \\\"\\\\n</think>\\\\n\\\\n\\\" "
                    "[A-Z]{2,6}\",\"max_output_tokens\":64";
    char b[4096];
    body_of(b, sizeof b, "\"Think.\"", g);
    json_t *r = create(b, &st);
    CHECK_EQ_INT(st, 200);
    json_t *out = json_object_get(r, "output");
    json_t *rs = json_array_get(out, 0), *msg = json_array_get(out, 1);
    CHECK_EQ_INT((int)json_array_size(out), 2);
    CHECK_STR(str(rs, "type"), "reasoning");
    CHECK(str(rs, "id") && !strncmp(str(rs, "id"), "rs_", 3));
    const char *rt = str(json_array_get(json_object_get(rs, "content"), 0), "text");
    CHECK_MSG(rt && strlen(rt) >= 3 && strspn(rt, "abcdefghijklmnopqrstuvwxyz") == strlen(rt), "reasoning '%s'",
              rt ? rt : "-");
    CHECK_STR(str(json_array_get(json_object_get(rs, "content"), 0), "type"), "reasoning_text");
    CHECK_STR(str(msg, "type"), "message");
    char *t = output_text(r);
    CHECK_MSG(t && strlen(t) >= 2 && strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == strlen(t), "text '%s'", t ? t : "-");
    /* streamed: the same split */
    snprintf(b + strlen(b) - 1, sizeof b - strlen(b) + 1, ",\"stream\":true}");
    char *sse = post_stream(b);
    sse_ev evs[200];
    int n = sse_parse(sse, evs, 200);
    sbuf sr = {0}, sc = {0};
    for (int i = 0; i < n; i++) {
        if (!strcmp(evs[i].type, "response.reasoning_text.delta"))
            sbuf_put(&sr, str(evs[i].data, "delta"), strlen(str(evs[i].data, "delta")));
        if (!strcmp(evs[i].type, "response.output_text.delta"))
            sbuf_put(&sc, str(evs[i].data, "delta"), strlen(str(evs[i].data, "delta")));
    }
    sbuf_put(&sr, "", 1);
    sbuf_put(&sc, "", 1);
    CHECK_MSG(rt && !strcmp(sr.p, rt), "streamed reasoning '%s' vs '%s'", sr.p, rt ? rt : "-");
    CHECK_MSG(t && !strcmp(sc.p, t), "streamed text '%s' vs '%s'", sc.p, t ? t : "-");
    CHECK(n > 3 && !strcmp(evs[2].type, "response.output_item.added") &&
          !strcmp(str(json_object_get(evs[2].data, "item"), "type"), "reasoning"));
    sbuf_free(&sr);
    sbuf_free(&sc);
    sse_events_free(evs, n);
    free(sse);

    /* the next turn: the reasoning item goes back with the message; the
     * prompt of this turn comes from the cache */
    char extra[512];
    snprintf(extra, sizeof extra,
             "\"previous_response_id\":\"%s\",\"max_output_tokens\":4,\"instructions\":\"You are a careful assistant: "
             "think step by step before you answer, then answer in capitals.\"",
             str(r, "id"));
    body_of(b, sizeof b, "\"Again.\"", extra);
    json_t *r2 = create(b, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(usage_of(r2, "cached_tokens") > 0, "cached %ld", usage_of(r2, "cached_tokens"));
    json_decref(r2);

    /* effort "none" turns thinking off (Qwen3 then writes an empty think
     * block into the prompt) */
    json_t *on = create("{\"input\":\"Hi\",\"max_output_tokens\":1,\"reasoning\":{\"effort\":\"low\"}}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *off = create("{\"input\":\"Hi\",\"max_output_tokens\":1,\"reasoning\":{\"effort\":\"none\"}}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(usage_of(off, "input_tokens") > usage_of(on, "input_tokens"), "effort none %ld vs low %ld tokens",
              usage_of(off, "input_tokens"), usage_of(on, "input_tokens"));
    CHECK_STR(str(json_object_get(off, "reasoning"), "effort"), "none");
    json_decref(on);
    json_decref(off);
    free(t);
    json_decref(r);
    CHECK(wait_idle(s.port, 10));
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
    g_port = saved;
    unlink(path);
}

int main(void) {
    (void)sse_text; /* server_util.h helpers of the chat tests */
    (void)choice_text;
    (void)choice_finish;
    su_watchdog(300);
    srv s;
    const char *flags[] = {"--check", "--kv-mem", "32M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "server did not start");
    if (rc != 0) {
        srv_print_log(&s);
        return test_summary("test_server_responses");
    }
    g_port = s.port;
    check_text();
    check_tools();
    check_chain();
    check_store();
    check_structured();
    check_cancel();
    check_bad_input();
    check_concurrency();
    check_eviction();
    check_qwen3();
    CHECK(wait_idle(s.port, 10));
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
    return test_summary("test_server_responses");
}
