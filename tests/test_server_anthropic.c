/*
 * test_server_anthropic.c — the Anthropic Messages API of `kvloom serve`
 * (POST /v1/messages, POST /v1/messages/count_tokens) over real sockets, on
 * the shared stories260K model (ChatML fallback template: generic tool
 * format; only constrained decoding makes its calls valid). The reference for
 * every answer is the OpenAI chat route of the same server:
 *
 *   - system + text blocks: the prompt and the greedy text are the chat
 *     route's for the same messages; usage adds up (input + cache read);
 *   - streaming: the events in Anthropic's order (message_start, ping,
 *     content_block_start/delta/stop, message_delta, message_stop), "event:"
 *     names equal the data's type, the text deltas concatenate to the whole
 *     answer;
 *   - tool_choice any / tool: tool_use blocks whose input satisfies the
 *     schema, stop_reason tool_use; streamed input_json_delta fragments
 *     assemble to the same input;
 *   - a tool round trip (tool_use, then tool_result) gives the chat route's
 *     prompt for tool_calls + a tool message;
 *   - stop_sequences, max_tokens, a prefill (final assistant message),
 *     count_tokens;
 *   - bad input: each a 4xx in Anthropic's error shape naming the field;
 *     unknown fields and cache_control marks are ignored (same answer);
 *     is_error adds nothing to the prompt (count_tokens); every value of a
 *     full request replaced by each JSON type: a 200 or a 400 in that shape;
 *     the API key (x-api-key) and a 401 in that shape;
 *   - a client that leaves (streamed or not) cancels its request: a 499,
 *     few tokens generated; a failure after a stream started (shutdown) is
 *     an "error" event, a whole answer's a 503 overloaded_error;
 *   - on a tiny random-weight Qwen3 (reasoning template): a thinking block
 *     before the text, streamed as thinking_delta.
 */
#include <pthread.h>

#include "server/http.h"
#include "server_util.h"

static int g_port;

static const char *weather_tool =
    "{\"name\":\"get_weather\",\"description\":\"Weather in a city\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},"
    "\"required\":[\"city\",\"unit\",\"days\"],\"additionalProperties\":false}}";
static const char *time_tool = "{\"name\":\"get_time\",\"input_schema\":{\"type\":\"object\","
                               "\"properties\":{\"zone\":{\"enum\":[\"UTC\",\"CET\",\"PST\"]}},\"required\":[\"zone\"]}}";

static const char *str(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

static size_t utf8_len(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* A tool_use input satisfies its tool's schema. */
static bool input_valid(const char *name, json_t *a) {
    bool ok = json_is_object(a) && name;
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
    return ok;
}

static json_t *create(const char *body, int *status) { return post_json(g_port, "/v1/messages", body, status); }

static long usage_of(json_t *m, const char *k) {
    json_t *v = json_object_get(json_object_get(m, "usage"), k);
    return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

/* All prompt tokens of an answer (computed + read from the cache). */
static long prompt_of(json_t *m) { return usage_of(m, "input_tokens") + usage_of(m, "cache_read_input_tokens"); }

/* The text blocks of a message, joined (a malloc'd string). */
static char *text_of(json_t *m) {
    sbuf b = {0};
    json_t *c = json_object_get(m, "content");
    for (size_t i = 0; i < json_array_size(c); i++)
        if (!strcmp(str(json_array_get(c, i), "type"), "text")) {
            const char *t = str(json_array_get(c, i), "text");
            sbuf_put(&b, t, strlen(t));
        }
    sbuf_put(&b, "", 1);
    return b.p;
}

/* The blocks of one type (new array of borrowed-then-increfed blocks). */
static json_t *blocks_of(json_t *m, const char *type) {
    json_t *a = json_array(), *c = json_object_get(m, "content");
    for (size_t i = 0; i < json_array_size(c); i++)
        if (!strcmp(str(json_array_get(c, i), "type"), type)) json_array_append(a, json_array_get(c, i));
    return a;
}

static void check_shape(json_t *m) {
    const char *id = str(m, "id"), *sr = str(m, "stop_reason");
    CHECK_MSG(id && !strncmp(id, "msg_", 4), "id %s", id ? id : "-");
    CHECK_STR(str(m, "type"), "message");
    CHECK_STR(str(m, "role"), "assistant");
    CHECK(str(m, "model") != NULL);
    CHECK(json_is_array(json_object_get(m, "content")) && json_array_size(json_object_get(m, "content")) >= 1);
    CHECK_MSG(sr && (!strcmp(sr, "end_turn") || !strcmp(sr, "max_tokens") || !strcmp(sr, "stop_sequence") ||
                     !strcmp(sr, "tool_use")),
              "stop_reason %s", sr ? sr : "-");
    CHECK(usage_of(m, "input_tokens") >= 0 && usage_of(m, "cache_read_input_tokens") >= 0 &&
          usage_of(m, "cache_creation_input_tokens") == 0 && usage_of(m, "output_tokens") >= 0);
    CHECK(prompt_of(m) > 0);
    json_t *ss = json_object_get(m, "stop_sequence");
    CHECK(sr && (!strcmp(sr, "stop_sequence") ? json_is_string(ss) : json_is_null(ss)));
}

/* ---- SSE ---- */

static char *post_stream(const char *body) {
    resp r;
    if (http_do(g_port, "POST", "/v1/messages", NULL, body, &r) < 0) return xstrdup("");
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.head && strcasestr(r.head, "content-type: text/event-stream"));
    char *b = r.body;
    r.body = NULL;
    resp_free(&r);
    return b ? b : xstrdup("");
}

/* A stream's blocks rebuilt from its events, checking their order: the
 * message as the SDKs accumulate it. */
static json_t *sse_message(sse_ev *evs, int n) {
    CHECK_MSG(n >= 5, "%d events", n);
    if (n < 5) return json_object();
    CHECK_STR(evs[0].type, "message_start");
    CHECK_STR(evs[1].type, "ping");
    CHECK_STR(evs[n - 2].type, "message_delta");
    CHECK_STR(evs[n - 1].type, "message_stop");
    json_t *m = json_deep_copy(json_object_get(evs[0].data, "message"));
    CHECK(m && json_array_size(json_object_get(m, "content")) == 0 && json_is_null(json_object_get(m, "stop_reason")));
    if (!m) return json_object();
    json_t *content = json_object_get(m, "content");
    sbuf acc = {0};
    int open = -1;
    for (int i = 2; i < n - 2; i++) {
        json_t *d = evs[i].data;
        int index = (int)json_integer_value(json_object_get(d, "index"));
        if (!strcmp(evs[i].type, "content_block_start")) {
            CHECK_MSG(open < 0 && index == (int)json_array_size(content), "block %d starts while %d is open", index, open);
            open = index;
            json_array_append(content, json_object_get(d, "content_block"));
            acc.n = 0;
        } else if (!strcmp(evs[i].type, "content_block_delta")) {
            CHECK_MSG(index == open && open >= 0, "delta for block %d, open %d", index, open);
            json_t *delta = json_object_get(d, "delta"), *b = json_array_get(content, (size_t)index);
            const char *dt = str(delta, "type");
            if (!dt || !b) continue;
            if (!strcmp(dt, "text_delta")) {
                CHECK_STR(str(b, "type"), "text");
                size_t k = strlen(str(b, "text"));
                char *t = xmalloc(k + strlen(str(delta, "text")) + 1);
                sprintf(t, "%s%s", str(b, "text"), str(delta, "text"));
                json_object_set_new(b, "text", json_string(t));
                free(t);
            } else if (!strcmp(dt, "thinking_delta")) {
                CHECK_STR(str(b, "type"), "thinking");
                size_t k = strlen(str(b, "thinking"));
                char *t = xmalloc(k + strlen(str(delta, "thinking")) + 1);
                sprintf(t, "%s%s", str(b, "thinking"), str(delta, "thinking"));
                json_object_set_new(b, "thinking", json_string(t));
                free(t);
            } else if (!strcmp(dt, "input_json_delta")) {
                CHECK_STR(str(b, "type"), "tool_use");
                const char *pj = str(delta, "partial_json");
                if (pj) sbuf_put(&acc, pj, strlen(pj));
            } else if (!strcmp(dt, "signature_delta")) {
                CHECK_STR(str(b, "type"), "thinking");
            } else {
                CHECK_MSG(0, "unknown delta type %s", dt);
            }
        } else if (!strcmp(evs[i].type, "content_block_stop")) {
            CHECK_MSG(index == open, "stop of block %d, open %d", index, open);
            json_t *b = json_array_get(content, (size_t)index);
            if (b && !strcmp(str(b, "type"), "tool_use")) {
                json_t *in = json_loadb(acc.p ? acc.p : "", acc.n, 0, NULL);
                CHECK_MSG(json_is_object(in), "streamed tool input '%.*s'", (int)acc.n, acc.p ? acc.p : "");
                json_object_set_new(b, "input", in ? in : json_object());
            }
            open = -1;
        } else {
            CHECK_MSG(0, "unexpected event %s at %d", evs[i].type, i);
        }
    }
    CHECK(open < 0);
    json_t *md = evs[n - 2].data;
    json_object_set(m, "stop_reason", json_object_get(json_object_get(md, "delta"), "stop_reason"));
    json_object_set(m, "stop_sequence", json_object_get(json_object_get(md, "delta"), "stop_sequence"));
    json_object_set(m, "usage", json_object_get(md, "usage"));
    sbuf_free(&acc);
    return m;
}

/* ---- tests ---- */

static void check_text(void) {
    int st;
    const char *body = "{\"model\":\"stories\",\"max_tokens\":24,\"temperature\":0,\"system\":[{\"type\":\"text\","
                       "\"text\":\"You tell \"},{\"type\":\"text\",\"text\":\"stories.\"}],\"messages\":[{\"role\":"
                       "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Once upon a time\"}]}]}";
    json_t *m = create(body, &st);
    CHECK_EQ_INT(st, 200);
    check_shape(m);
    char *text = text_of(m);
    json_t *c = post_json(g_port, "/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"system\",\"content\":\"You tell stories.\"},{\"role\":\"user\","
                          "\"content\":\"Once upon a time\"}],\"max_tokens\":24,\"temperature\":0}",
                          &st);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(prompt_of(m) == usage_int(c, "prompt_tokens"), "prompt %ld vs chat %ld", prompt_of(m),
              usage_int(c, "prompt_tokens"));
    CHECK_MSG(choice_text(c) && !strcmp(text, choice_text(c)), "text '%s' vs chat '%s'", text,
              choice_text(c) ? choice_text(c) : "-");
    CHECK_EQ_INT((int)usage_of(m, "output_tokens"), (int)usage_int(c, "completion_tokens"));
    CHECK_STR(str(m, "stop_reason"), !strcmp(choice_finish(c), "length") ? "max_tokens" : "end_turn");
    json_decref(c);

    /* count_tokens: the same prompt */
    json_t *ct = post_json(g_port, "/v1/messages/count_tokens", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT((int)json_integer_value(json_object_get(ct, "input_tokens")), (int)prompt_of(m));
    json_decref(ct);

    /* streamed: the events in order, the deltas == the whole text */
    char sb[2048];
    snprintf(sb, sizeof sb, "%.*s,\"stream\":true}", (int)strlen(body) - 1, body);
    char *sse = post_stream(sb);
    sse_ev evs[200];
    int n = sse_events(sse, evs, 200);
    json_t *sm = sse_message(evs, n);
    check_shape(sm);
    char *stext = text_of(sm);
    CHECK_MSG(!strcmp(stext, text), "streamed '%s' vs whole '%s'", stext, text);
    CHECK_EQ_INT((int)json_array_size(json_object_get(sm, "content")), 1);
    CHECK_STR(str(sm, "stop_reason"), str(m, "stop_reason"));
    CHECK_EQ_INT((int)usage_of(sm, "output_tokens"), (int)usage_of(m, "output_tokens"));
    CHECK_EQ_INT((int)prompt_of(sm), (int)prompt_of(m));
    /* the second time the prompt comes from the cache */
    CHECK_MSG(usage_of(sm, "cache_read_input_tokens") > 0, "cache read %ld", usage_of(sm, "cache_read_input_tokens"));
    free(stext);
    json_decref(sm);
    sse_events_free(evs, n);
    free(sse);

    /* max_tokens */
    json_t *m2 = create("{\"max_tokens\":3,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_STR(str(m2, "stop_reason"), "max_tokens");
    CHECK_EQ_INT((int)usage_of(m2, "output_tokens"), 3);
    json_decref(m2);

    /* stop_sequences: a piece of the greedy text ends it right before the
     * piece's first occurrence */
    size_t tl = strlen(text);
    if (tl >= 8) {
        char piece[8];
        snprintf(piece, sizeof piece, "%.3s", text + tl / 2);
        const char *at = strstr(text, piece);
        char sq[4096], esc[64];
        json_t *ps = json_string(piece);
        char *pj = json_dumps(ps, JSON_ENCODE_ANY);
        snprintf(esc, sizeof esc, "%s", pj ? pj : "\"\"");
        free(pj);
        json_decref(ps);
        snprintf(sq, sizeof sq, "%.*s,\"stop_sequences\":[\"zzzq\",%s]}", (int)strlen(body) - 1, body, esc);
        json_t *m3 = create(sq, &st);
        CHECK_EQ_INT(st, 200);
        check_shape(m3);
        char *t3 = text_of(m3);
        CHECK_STR(str(m3, "stop_reason"), "stop_sequence");
        CHECK_STR(str(m3, "stop_sequence"), piece);
        CHECK_MSG(at && strlen(t3) == (size_t)(at - text) && !strncmp(t3, text, strlen(t3)), "stopped text '%s' of '%s' at '%s'",
                  t3, text, piece);
        free(t3);
        json_decref(m3);
    }

    /* a prefill: the answer continues the final assistant message, as the
     * completions route continues the ChatML prompt (the fallback template
     * of stories260K) written out by hand */
    json_t *p1 = create("{\"max_tokens\":12,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"Tell\"},"
                        "{\"role\":\"assistant\",\"content\":\"Once upon a time\"}]}",
                        &st);
    CHECK_EQ_INT(st, 200);
    json_t *p2 = post_json(g_port, "/v1/completions",
                           "{\"prompt\":\"<|im_start|>user\\nTell<|im_end|>\\n<|im_start|>assistant\\nOnce upon a time\","
                           "\"max_tokens\":12,\"temperature\":0}",
                           &st);
    CHECK_EQ_INT(st, 200);
    char *t1 = text_of(p1);
    CHECK_MSG(prompt_of(p1) == usage_int(p2, "prompt_tokens"), "prefill prompt %ld vs completions %ld", prompt_of(p1),
              usage_int(p2, "prompt_tokens"));
    CHECK_MSG(choice_text(p2) && !strcmp(t1, choice_text(p2)), "prefill answer '%s' vs completions '%s'", t1,
              choice_text(p2) ? choice_text(p2) : "-");
    free(t1);
    json_decref(p1);
    json_decref(p2);

    free(text);
    json_decref(m);
}

static void check_tools(void) {
    char b[8192];
    int st;
    snprintf(b, sizeof b,
             "{\"max_tokens\":200,\"temperature\":0,\"tools\":[%s,%s],\"tool_choice\":{\"type\":\"any\","
             "\"disable_parallel_tool_use\":true},\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in "
             "Paris?\"}]}",
             weather_tool, time_tool);
    json_t *m = create(b, &st);
    CHECK_EQ_INT(st, 200);
    check_shape(m);
    CHECK_STR(str(m, "stop_reason"), "tool_use");
    json_t *uses = blocks_of(m, "tool_use");
    CHECK_EQ_INT((int)json_array_size(uses), 1);
    json_t *u = json_array_get(uses, 0);
    const char *id = str(u, "id"), *name = str(u, "name");
    CHECK_MSG(id && !strncmp(id, "toolu_", 6), "id %s", id ? id : "-");
    char *in_text = json_dumps(json_object_get(u, "input"), JSON_COMPACT);
    CHECK_MSG(input_valid(name, json_object_get(u, "input")), "call %s(%s)", name ? name : "-", in_text ? in_text : "-");

    /* streamed: the same call from input_json_delta fragments */
    snprintf(b + strlen(b) - 1, sizeof b - strlen(b) + 1, ",\"stream\":true}");
    char *sse = post_stream(b);
    sse_ev evs[400];
    int n = sse_events(sse, evs, 400);
    json_t *sm = sse_message(evs, n);
    CHECK_STR(str(sm, "stop_reason"), "tool_use");
    json_t *su = blocks_of(sm, "tool_use");
    CHECK_EQ_INT((int)json_array_size(su), 1);
    CHECK_STR(str(json_array_get(su, 0), "name"), name ? name : "-");
    CHECK_MSG(json_equal(json_object_get(json_array_get(su, 0), "input"), json_object_get(u, "input")),
              "streamed input differs from %s", in_text ? in_text : "-");
    json_decref(su);
    json_decref(sm);
    sse_events_free(evs, n);
    free(sse);

    /* a named tool */
    snprintf(b, sizeof b,
             "{\"max_tokens\":100,\"tools\":[%s,%s],\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_time\"},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Time?\"}]}",
             weather_tool, time_tool);
    json_t *m2 = create(b, &st);
    CHECK_EQ_INT(st, 200);
    json_t *u2 = blocks_of(m2, "tool_use");
    CHECK_EQ_INT((int)json_array_size(u2), 1);
    CHECK_STR(str(json_array_get(u2, 0), "name"), "get_time");
    CHECK(input_valid("get_time", json_object_get(json_array_get(u2, 0), "input")));
    json_decref(u2);
    json_decref(m2);

    /* the round trip: tool_use + tool_result render as the chat route's
     * tool_calls + tool message */
    if (id && name && in_text) {
        char rb[8192], cb[8192];
        snprintf(rb, sizeof rb,
                 "{\"max_tokens\":16,\"temperature\":0,\"tools\":[%s,%s],\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"What is the weather in Paris?\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":"
                 "\"%s\",\"name\":\"%s\",\"input\":%s}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
                 "\"tool_use_id\":\"%s\",\"content\":[{\"type\":\"text\",\"text\":\"Sunny, 21 C\"}]}]}]}",
                 weather_tool, time_tool, id, name, in_text, id);
        json_t *r = create(rb, &st);
        CHECK_EQ_INT(st, 200);
        check_shape(r);
        char wt[2048], tt[1024];
        /* the same tools in the chat route's shape */
        json_t *w = json_loads(weather_tool, 0, NULL), *t = json_loads(time_tool, 0, NULL);
        json_object_set(w, "parameters", json_object_get(w, "input_schema"));
        json_object_del(w, "input_schema");
        json_object_set(t, "parameters", json_object_get(t, "input_schema"));
        json_object_del(t, "input_schema");
        char *ws = json_dumps(w, JSON_COMPACT | JSON_PRESERVE_ORDER), *ts = json_dumps(t, JSON_COMPACT | JSON_PRESERVE_ORDER);
        snprintf(wt, sizeof wt, "%s", ws);
        snprintf(tt, sizeof tt, "%s", ts);
        free(ws);
        free(ts);
        json_decref(w);
        json_decref(t);
        json_t *args = json_string(in_text);
        char *args_s = json_dumps(args, JSON_ENCODE_ANY);
        json_decref(args);
        snprintf(cb, sizeof cb,
                 "{\"max_tokens\":16,\"temperature\":0,\"tools\":[{\"type\":\"function\",\"function\":%s},{\"type\":"
                 "\"function\",\"function\":%s}],\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in "
                 "Paris?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"%s\",\"type\":\"function\","
                 "\"function\":{\"name\":\"%s\",\"arguments\":%s}}]},{\"role\":\"tool\",\"tool_call_id\":\"%s\","
                 "\"content\":\"Sunny, 21 C\"}]}",
                 wt, tt, id, name, args_s, id);
        free(args_s);
        json_t *c = post_json(g_port, "/v1/chat/completions", cb, &st);
        CHECK_EQ_INT(st, 200);
        CHECK_MSG(prompt_of(r) == usage_int(c, "prompt_tokens"), "round trip prompt %ld vs chat %ld", prompt_of(r),
                  usage_int(c, "prompt_tokens"));
        char *rt = text_of(r);
        if (choice_text(c)) CHECK_MSG(!strcmp(rt, choice_text(c)), "round trip text '%s' vs chat '%s'", rt, choice_text(c));
        free(rt);
        json_decref(c);
        json_decref(r);
    }
    free(in_text);
    json_decref(uses);
    json_decref(m);
}

typedef struct bad_case {
    const char *body;
    int status;
    const char *needle; /* in the message */
} bad_case;

static void check_bad_input(void) {
    static const bad_case cases[] = {
        {"{", 400, "invalid JSON"},
        {"[1]", 400, "JSON object"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "max_tokens"},
        {"{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "max_tokens"},
        {"{\"max_tokens\":\"5\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "max_tokens"},
        {"{\"max_tokens\":5}", 400, "messages"},
        {"{\"max_tokens\":5,\"messages\":{}}", 400, "messages"},
        {"{\"max_tokens\":5,\"messages\":[]}", 400, "messages"},
        {"{\"max_tokens\":5,\"messages\":[1]}", 400, "messages.0"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", 400, "messages.0.role"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":7,\"content\":\"x\"}]}", 400, "messages.0.role"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\"}]}", 400, "messages.0.content"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages.0.content"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[]}]}", 400, "messages.0.content"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":[]},"
         "{\"role\":\"user\",\"content\":\"y\"}]}",
         400, "messages.1.content"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}", 400,
         "'image'"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", 400, "type"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":3}]}]}", 400,
         "messages.0.content.0.text"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":\"x\"}]}]}",
         400, "tool_use_id"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
         "\"toolu_nope\",\"content\":\"x\"}]}]}",
         400, "toolu_nope"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\","
         "\"name\":\"f\",\"input\":[]}]}]}",
         400, "input"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"name\":\"f\","
         "\"input\":{}}]}]}",
         400, "id"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":"
         "[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":{}}]}]}",
         400, "tool_result"},
        {"{\"max_tokens\":5,\"system\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "system"},
        {"{\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "system.0.type"},
        {"{\"max_tokens\":5,\"temperature\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "temperature"},
        {"{\"max_tokens\":5,\"temperature\":\"hot\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "temperature"},
        {"{\"max_tokens\":5,\"top_k\":-1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "top_k"},
        {"{\"max_tokens\":5,\"top_p\":7,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "top_p"},
        {"{\"max_tokens\":5,\"stream\":\"yes\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "stream"},
        {"{\"max_tokens\":5,\"stop_sequences\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "stop_sequences"},
        {"{\"max_tokens\":5,\"stop_sequences\":[\"\"],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "stop_sequences.0"},
        {"{\"max_tokens\":5,\"metadata\":[],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "metadata"},
        {"{\"max_tokens\":5,\"metadata\":{\"user_id\":1},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "metadata.user_id"},
        {"{\"max_tokens\":5,\"thinking\":{\"type\":\"maybe\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "thinking.type"},
        {"{\"max_tokens\":5,\"tools\":{},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "tools"},
        {"{\"max_tokens\":5,\"tools\":[{\"name\":\"f\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "tools.0.input_schema"},
        {"{\"max_tokens\":5,\"tools\":[{\"input_schema\":{}}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "tools.0.name"},
        {"{\"max_tokens\":5,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],\"messages\":[{"
         "\"role\":\"user\",\"content\":\"x\"}]}",
         400, "web_search_20250305"},
        {"{\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"strict\":true,\"input_schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"array\",\"uniqueItems\":true}}}}],"
         "\"tool_choice\":{\"type\":\"any\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         400, "uniqueItems"},
        {"{\"max_tokens\":5,\"tool_choice\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "tool_choice"},
        {"{\"max_tokens\":5,\"tool_choice\":{\"type\":\"sometimes\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         400, "tool_choice.type"},
        {"{\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{"
         "\"type\":\"tool\",\"name\":\"g\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         400, "g"},
        {"{\"max_tokens\":5,\"tool_choice\":{\"type\":\"any\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "tool"},
        {"{\"max_tokens\":5,\"model\":7,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "model"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        resp r;
        if (http_do(g_port, "POST", "/v1/messages", NULL, cases[i].body, &r) < 0) {
            CHECK_MSG(0, "case %zu: no answer", i);
            continue;
        }
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        json_t *err = json_object_get(o, "error");
        const char *msg = str(err, "message");
        CHECK_MSG(r.status == cases[i].status, "case %zu (%s): status %d, want %d (%s)", i, cases[i].body, r.status,
                  cases[i].status, r.body ? r.body : "");
        CHECK_MSG(o && !strcmp(str(o, "type") ? str(o, "type") : "", "error") &&
                      !strcmp(str(err, "type") ? str(err, "type") : "", "invalid_request_error"),
                  "case %zu: not Anthropic's error shape: %s", i, r.body ? r.body : "");
        CHECK_MSG(msg && strstr(msg, cases[i].needle), "case %zu: message '%s' does not name '%s'", i, msg ? msg : "-",
                  cases[i].needle);
        json_decref(o);
        resp_free(&r);
    }
}

/* Accepted and ignored: what clients send that a local engine has no use
 * for (unknown top-level fields, cache_control marks, service_tier,
 * anthropic-version), and tool_choice none with tools. The answer is the
 * same greedy text as without them. */
static void check_ignored(void) {
    int st;
    json_t *a = create("{\"max_tokens\":6,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}]}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *b = create("{\"max_tokens\":6,\"temperature\":0,\"service_tier\":\"auto\",\"container\":null,"
                       "\"some_future_field\":{\"x\":[1,2]},\"metadata\":{\"user_id\":\"u-1\"},\"top_k\":0,"
                       "\"system\":[{\"type\":\"text\",\"text\":\"\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
                       "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Once\","
                       "\"cache_control\":{\"type\":\"ephemeral\"}}]}]}",
                       &st);
    CHECK_MSG(st == 200, "ignored fields: status %d", st);
    char *ta = text_of(a), *tb = text_of(b);
    CHECK_MSG(!strcmp(ta, tb), "with ignored fields '%s' vs '%s'", tb, ta);
    free(ta);
    free(tb);
    json_decref(a);
    json_decref(b);
    char body[4096];
    snprintf(body, sizeof body,
             "{\"max_tokens\":6,\"temperature\":0,\"tools\":[%s],\"tool_choice\":{\"type\":\"none\"},\"messages\":[{"
             "\"role\":\"user\",\"content\":\"Once\"}]}",
             weather_tool);
    json_t *c = create(body, &st);
    CHECK_EQ_INT(st, 200);
    json_t *uses = blocks_of(c, "tool_use");
    CHECK_EQ_INT((int)json_array_size(uses), 0);
    CHECK_MSG(str(c, "stop_reason") && strcmp(str(c, "stop_reason"), "tool_use"), "tool_choice none: stop_reason %s",
              str(c, "stop_reason") ? str(c, "stop_reason") : "-");
    json_decref(uses);
    json_decref(c);
}

/* is_error adds nothing to the prompt; an error result without content
 * reads "error" (count_tokens of the same conversation). */
static void check_is_error(void) {
    static const char *fmt =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":[{\"type\":"
        "\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},{\"role\":\"user\","
        "\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\"%s}]}]}";
    const char *variants[] = {",\"content\":\"timeout\"", ",\"content\":\"timeout\",\"is_error\":true",
                              ",\"content\":\"error\"", ",\"is_error\":true", ",\"content\":[],\"is_error\":true"};
    long n[5];
    for (int i = 0; i < 5; i++) {
        char body[1024];
        int st;
        snprintf(body, sizeof body, fmt, variants[i]);
        json_t *ct = post_json(g_port, "/v1/messages/count_tokens", body, &st);
        CHECK_MSG(st == 200, "is_error variant %d: status %d", i, st);
        n[i] = (long)json_integer_value(json_object_get(ct, "input_tokens"));
        json_decref(ct);
    }
    CHECK_MSG(n[0] > 0 && n[0] == n[1], "is_error with content: %ld vs %ld tokens", n[1], n[0]);
    CHECK_MSG(n[2] > 0 && n[2] == n[3] && n[2] == n[4], "error result without content: %ld, %ld vs %ld tokens", n[3], n[4],
              n[2]);
}

/* A client that leaves cancels its request in the engine: streamed (gone
 * after the first delta) and whole (gone while it generates). Each counts
 * as a 499 and generates far fewer tokens than the whole context it asked
 * for (max_tokens beyond the context, ignore_eos). */
static void check_disconnect(void) {
    const char *st_499 = "kvloom_requests_total{status=\"499\"}";
    for (int streamed = 1; streamed >= 0; streamed--) {
        CHECK(wait_idle(g_port, 20));
        double n499 = metric(g_port, st_499), gen0 = metric(g_port, "kvloom_generation_tokens_total");
        if (n499 < 0) n499 = 0;
        char body[256];
        snprintf(body, sizeof body,
                 "{\"max_tokens\":100000,\"ignore_eos\":true,\"stream\":%s,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"Once\"}]}",
                 streamed ? "true" : "false");
        int fd = su_send_request(g_port, "POST", "/v1/messages", NULL, body, strlen(body), 30);
        CHECK(fd >= 0);
        if (fd < 0) continue;
        if (streamed) {
            CHECK(su_read_until(fd, "content_block_delta", 20));
        } else {
            double t0 = su_now();
            while (metric(g_port, "kvloom_generation_tokens_total") <= gen0 && su_now() - t0 < 20) usleep(2000);
        }
        close(fd);
        CHECK(wait_idle(g_port, 20));
        double n = metric(g_port, st_499), gen = metric(g_port, "kvloom_generation_tokens_total") - gen0;
        CHECK_MSG(n == n499 + 1, "%s: 499s %g -> %g", streamed ? "stream" : "whole", n499, n);
        CHECK_MSG(gen > 0 && gen < 250, "%s: %g tokens generated after the client left", streamed ? "stream" : "whole",
                  gen);
    }
}

/* The k-th value below v in pre-order (objects' members, arrays' items):
 * its container and its key or index; false when there are fewer. */
static bool nth_value(json_t *v, int *k, json_t **parent, const char **key, size_t *idx) {
    if (json_is_object(v)) {
        const char *kk;
        json_t *c;
        json_object_foreach(v, kk, c) {
            if ((*k)-- == 0) {
                *parent = v, *key = kk;
                return true;
            }
            if (nth_value(c, k, parent, key, idx)) return true;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            if ((*k)-- == 0) {
                *parent = v, *key = NULL, *idx = i;
                return true;
            }
            if (nth_value(json_array_get(v, i), k, parent, key, idx)) return true;
        }
    }
    return false;
}

/* One answer of check_wrong_types: a 200 (a message, a whole stream, or
 * count_tokens' count) or a 400 in Anthropic's error shape with a message. */
static bool wrong_type_answer(const char *path, const char *body, int *status) {
    resp rs;
    if (http_do(g_port, "POST", path, NULL, body, &rs) < 0) {
        CHECK_MSG(0, "%s %s: no answer", path, body);
        return false;
    }
    json_t *o = json_loads(rs.body ? rs.body : "", 0, NULL), *err = json_object_get(o, "error");
    const char *t = str(o, "type");
    bool count = strstr(path, "count_tokens") != NULL;
    bool streamed = rs.body && !strncmp(rs.body, "event: message_start\n", 21) && strstr(rs.body, "event: message_stop\n");
    bool good = (rs.status == 200 && (count ? json_is_integer(json_object_get(o, "input_tokens"))
                                            : streamed || (t && !strcmp(t, "message")))) ||
                (rs.status == 400 && t && !strcmp(t, "error") && str(err, "message") && *str(err, "message") &&
                 str(err, "type") && !strcmp(str(err, "type"), "invalid_request_error"));
    CHECK_MSG(good, "%s %s: status %d: %.300s", path, body, rs.status, rs.body ? rs.body : "");
    *status = rs.status;
    json_decref(o);
    resp_free(&rs);
    return good;
}

/* Every value of a request that uses every feature, replaced in turn by
 * each JSON type (and out-of-range numbers): each answer is a 200 or a 400
 * in Anthropic's error shape with a message, never a 5xx or a dropped
 * connection, and the server stays up. The replacements go to count_tokens
 * (the same translation and validation, without generating: a changed
 * prompt is not prefilled); those of top-level fields (max_tokens, which
 * count_tokens does not read, among them) to /v1/messages as well. */
static void check_wrong_types(void) {
    char body[4096];
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"max_tokens\":2,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":5,\"stop_sequences\":[\"zz\"],"
             "\"stream\":false,\"metadata\":{\"user_id\":\"u\"},\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},"
             "\"system\":[{\"type\":\"text\",\"text\":\"S\"}],\"tools\":[%s],\"tool_choice\":{\"type\":\"auto\","
             "\"disable_parallel_tool_use\":false},\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
             "\"text\":\"Hi\"}]},{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"t\","
             "\"signature\":\"\"},{\"type\":\"text\",\"text\":\"A\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":"
             "\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
             "\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"sunny\"}],\"is_error\":false},"
             "{\"type\":\"text\",\"text\":\"And?\"}]}]}",
             weather_tool);
    json_t *base = json_loads(body, 0, NULL);
    CHECK(base != NULL);
    int st;
    json_t *ok = create(body, &st);
    CHECK_MSG(st == 200, "the full request: %d", st);
    json_decref(ok);
    static const char *repl[] = {"null", "7", "-1", "0.5", "1e300", "\"s\"", "\"\"", "[]", "[1]", "{}", "{\"a\":1}", "true"};
    int n_req = 0, n_400 = 0, n_top = 0, n_top_values = 0;
    for (int k = 0;; k++) {
        json_t *b = json_deep_copy(base), *parent = NULL;
        const char *key = NULL;
        size_t idx = 0;
        int kk = k;
        if (!nth_value(b, &kk, &parent, &key, &idx)) {
            json_decref(b);
            break;
        }
        n_top_values += parent == b;
        for (size_t r = 0; r < ARRAY_LEN(repl); r++) {
            if ((k + (int)r) % SU_SWEEP_STRIDE) continue; /* (under ASan: a rotating quarter) */
            json_t *v = json_loads(repl[r], JSON_DECODE_ANY, NULL);
            if (key) json_object_set_new(parent, key, v);
            else json_array_set_new(parent, idx, v);
            char *s = json_dumps(b, JSON_COMPACT);
            n_req++;
            if (wrong_type_answer("/v1/messages/count_tokens", s, &st)) n_400 += st == 400;
            if (parent == b) {
                n_top++;
                wrong_type_answer("/v1/messages", s, &st);
            }
            free(s);
        }
        json_decref(b);
    }
    /* every value was replaced, and most replacements are errors */
    CHECK_MSG(n_req * SU_SWEEP_STRIDE >= 12 * 60 && n_top_values == 13 && n_top * SU_SWEEP_STRIDE >= 12 * 13 - 3 &&
                  n_400 > n_req / 2,
              "%d requests (%d top-level, of %d values), %d 400s", n_req, n_top, n_top_values, n_400);
    json_decref(base);
}

/* Errors on Anthropic's paths outside the handlers (no route, wrong method)
 * in its shape too; an empty final assistant message is accepted. */
static void check_route_errors(void) {
    static const struct {
        const char *method, *path;
        int status;
        const char *type;
    } cases[] = {{"GET", "/v1/messages", 405, "invalid_request_error"},
                 {"POST", "/v1/messages/batches", 404, "not_found_error"}};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        resp r;
        CHECK(http_do(g_port, cases[i].method, cases[i].path, NULL, !strcmp(cases[i].method, "POST") ? "{}" : NULL, &r) == 0);
        CHECK_EQ_INT(r.status, cases[i].status);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        CHECK_MSG(str(o, "type") && !strcmp(str(o, "type"), "error"), "%s %s: %s", cases[i].method, cases[i].path,
                  r.body ? r.body : "");
        CHECK_STR(str(json_object_get(o, "error"), "type"), cases[i].type);
        json_decref(o);
        resp_free(&r);
    }
    int st;
    json_t *m = create("{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":"
                       "\"assistant\",\"content\":[]}]}",
                       &st);
    CHECK_EQ_INT(st, 200);
    json_decref(m);
}

static void check_auth(void) {
    srv s;
    const char *flags[] = {"--api-key", "sk-ant-test", "--kv-mem", "16M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "keyed server did not start");
    if (rc) return;
    const char *body = "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}";
    resp r;
    CHECK(http_do(s.port, "POST", "/v1/messages", NULL, body, &r) == 0);
    CHECK_EQ_INT(r.status, 401);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_STR(str(o, "type"), "error");
    CHECK_STR(str(json_object_get(o, "error"), "type"), "authentication_error");
    json_decref(o);
    resp_free(&r);
    CHECK(http_do(s.port, "POST", "/v1/messages", "x-api-key: wrong\r\n", body, &r) == 0);
    CHECK_EQ_INT(r.status, 401);
    resp_free(&r);
    /* a path under /v1/messages that has no route: the 401 comes first, in Anthropic's shape */
    CHECK(http_do(s.port, "POST", "/v1/messages/batches", NULL, "{}", &r) == 0);
    CHECK_EQ_INT(r.status, 401);
    CHECK(r.body && strstr(r.body, "\"authentication_error\""));
    resp_free(&r);
    CHECK(http_do(s.port, "POST", "/v1/messages", "x-api-key: sk-ant-test\r\nanthropic-version: 2023-06-01\r\n", body,
                  &r) == 0);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* Everything left on fd until the peer closes (raw bytes: chunk sizes
 * included), NUL-terminated. */
static char *read_rest(int fd) {
    sbuf b = {0};
    char tmp[4096];
    for (;;) {
        ssize_t k = recv(fd, tmp, sizeof tmp, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        sbuf_put(&b, tmp, (size_t)k);
    }
    sbuf_put(&b, "", 1);
    return b.p;
}

/* A failure after a stream started is an "error" event in Anthropic's
 * shape (and no message_stop); a whole answer cut the same way is a 503
 * overloaded_error. The failure: SIGTERM with --shutdown-timeout 1 while
 * both generate (slowed by --step-delay-us). */
static void check_stream_error(void) {
    srv s;
    const char *flags[] = {"--step-delay-us", "20000", "--shutdown-timeout", "1", "--kv-mem", "16M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "server did not start");
    if (rc) return;
    const char *sb = "{\"max_tokens\":100000,\"ignore_eos\":true,\"stream\":true,\"messages\":[{\"role\":\"user\","
                     "\"content\":\"Once\"}]}";
    const char *wb = "{\"max_tokens\":100000,\"ignore_eos\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}]}";
    int fs = su_send_request(s.port, "POST", "/v1/messages", NULL, sb, strlen(sb), 30);
    CHECK(fs >= 0 && su_read_until(fs, "content_block_delta", 20));
    int fw = su_send_request(s.port, "POST", "/v1/messages", NULL, wb, strlen(wb), 30);
    CHECK(fw >= 0);
    double t0 = su_now();
    while (metric(s.port, "kvloom_requests_running") < 2 && su_now() - t0 < 20) usleep(10000);
    kill(s.pid, SIGTERM);
    if (fs >= 0) {
        char *rest = read_rest(fs);
        close(fs);
        char *ev = strstr(rest, "event: error\ndata: ");
        CHECK_MSG(ev && strstr(ev, "\"type\":\"overloaded_error\"") && strstr(ev, "shutting down") &&
                      !strstr(rest, "message_stop"),
                  "the stream's end: %s", rest + (strlen(rest) > 400 ? strlen(rest) - 400 : 0));
        free(rest);
    }
    if (fw >= 0) {
        resp r;
        CHECK(su_read_response(fw, &r) == 0);
        CHECK_EQ_INT(r.status, 503);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        CHECK_STR(str(o, "type"), "error");
        CHECK_STR(str(json_object_get(o, "error"), "type"), "overloaded_error");
        json_decref(o);
        resp_free(&r);
    }
    CHECK_EQ_INT(srv_stop(&s), 0);
}

static void check_qwen3(void) {
    const char *bin = getenv("KVLOOM_BIN") && *getenv("KVLOOM_BIN") ? getenv("KVLOOM_BIN") : "build/kvloom";
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "/tmp/kvloom_anth_qwen3_%d.gguf", (int)getpid());
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
    const char *b = "{\"max_tokens\":64,\"temperature\":0,\"system\":\"Think, then answer in capitals.\",\"thinking\":{\"type\":"
                    "\"enabled\",\"budget_tokens\":1024},\"grammar\":\"root ::= \\\"<think>\\\\n\\\" [a-z]{3,8} "
                    "\\\"\\\\n</think>\\\\n\\\\n\\\" [A-Z]{2,6}\",\"messages\":[{\"role\":\"user\",\"content\":\"Think.\"}]}";
    json_t *m = create(b, &st);
    CHECK_EQ_INT(st, 200);
    json_t *c = json_object_get(m, "content");
    CHECK_EQ_INT((int)json_array_size(c), 2);
    json_t *th = json_array_get(c, 0);
    CHECK_STR(str(th, "type"), "thinking");
    const char *tt = str(th, "thinking");
    CHECK_MSG(tt && strlen(tt) >= 3 && strspn(tt, "abcdefghijklmnopqrstuvwxyz") == strlen(tt), "thinking '%s'",
              tt ? tt : "-");
    char *text = text_of(m);
    CHECK_MSG(strlen(text) >= 2 && strspn(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == strlen(text), "text '%s'", text);
    /* streamed: the same blocks */
    char sb[2048];
    snprintf(sb, sizeof sb, "%.*s,\"stream\":true}", (int)strlen(b) - 1, b);
    char *sse = post_stream(sb);
    sse_ev evs[200];
    int n = sse_events(sse, evs, 200);
    json_t *sm = sse_message(evs, n);
    CHECK_STR(str(json_array_get(json_object_get(sm, "content"), 0), "type"), "thinking");
    CHECK_STR(str(json_array_get(json_object_get(sm, "content"), 0), "thinking"), tt ? tt : "-");
    char *stext = text_of(sm);
    CHECK_STR(stext, text);
    free(stext);
    json_decref(sm);
    sse_events_free(evs, n);
    free(sse);
    free(text);
    json_decref(m);
    CHECK(wait_idle(s.port, 10));
    g_port = saved;
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
    unlink(path);
}

int main(void) {
    (void)sse_text; /* server_util.h helpers of the chat tests */
    su_watchdog(300);
    srv s;
    const char *flags[] = {"--check", "--kv-mem", "32M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "server did not start");
    if (rc != 0) {
        srv_print_log(&s);
        return test_summary("test_server_anthropic");
    }
    g_port = s.port;
    check_text();
    check_tools();
    check_bad_input();
    check_ignored();
    check_is_error();
    check_route_errors();
    check_wrong_types();
    check_disconnect();
    CHECK(wait_idle(s.port, 10));
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
    check_auth();
    check_stream_error();
    check_qwen3();
    return test_summary("test_server_anthropic");
}
