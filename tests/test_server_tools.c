/*
 * test_server_tools.c — tool calls and structured output through the HTTP API
 * of `kvloom serve`, on the shared stories260K model (a story model that
 * knows nothing of JSON: only the constraint can make its output valid).
 * Its template is the ChatML fallback, so calls use the generic format.
 *
 *   - response_format json_schema / json_object, json_schema and grammar
 *     (GBNF) on both routes: the output parses and satisfies the schema,
 *     checked here field by field;
 *   - tool_choice required and named: tool_calls with finish_reason
 *     "tool_calls", arguments that satisfy the tool's schema; the streamed
 *     deltas (id and name first, then argument fragments) assemble to the
 *     same call; tool_choice none gives text;
 *   - the same constrained request alone and four at once (temperature 0):
 *     identical; jump-forward on and off both valid, and on appends forced
 *     tokens (kvloom_forced_tokens_total);
 *   - a tool round trip (assistant tool_calls + tool message) is accepted;
 *   - bad input: each a 400 naming the field, the server still serving;
 *   - on a tiny random-weight model with the Qwen3 vocabulary and template
 *     (made by `kvloom gen`): the hermes format is chosen at load, a required
 *     call comes back as tool_calls, and <think>...</think> goes to
 *     reasoning_content (JSON and streamed).
 */
#include <pthread.h>

#include "model/gguf.h"
#include "server/http.h"
#include "server_util.h"

static int g_port;

static const char *weather_tool =
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather in a city\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},"
    "\"required\":[\"city\",\"unit\",\"days\"],\"additionalProperties\":false}}}";
static const char *time_tool =
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"zone\":{\"enum\":[\"UTC\",\"CET\",\"PST\"]}},\"required\":[\"zone\"]}}}";

/* Code points of a UTF-8 string. */
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

/* A chat request with `extra` fields (max_tokens 200 unless extra sets it). */
static json_t *chat(const char *extra, int *status) {
    char body[8192];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}],\"temperature\":0,"
             "%s%s}",
             strstr(extra, "\"max_tokens\"") ? "" : "\"max_tokens\":200,", extra);
    return post_json(g_port, "/v1/chat/completions", body, status);
}

static json_t *message(json_t *o) { return json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message"); }

/* A person record: {"name": string <= 10, "age": 0..120, "tags": 1-3 of an
 * enum, "address": {"zip": 5 digits pattern}} */
static const char *person_schema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":10},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"minItems\":1,\"maxItems\":3},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
    "\"required\":[\"zip\"]}},\"required\":[\"name\",\"age\",\"tags\",\"address\"],\"additionalProperties\":false}";

static bool person_valid(const char *text) {
    json_t *o = json_loads(text, 0, NULL);
    json_t *name = json_object_get(o, "name"), *age = json_object_get(o, "age"), *tags = json_object_get(o, "tags");
    json_t *zip = json_object_get(json_object_get(o, "address"), "zip");
    bool ok = json_is_object(o) && json_object_size(o) == 4 && json_is_string(name) &&
              utf8_len(json_string_value(name)) <= 10 && json_is_integer(age) &&
              json_integer_value(age) >= 0 && json_integer_value(age) <= 120 && json_is_array(tags) &&
              json_array_size(tags) >= 1 && json_array_size(tags) <= 3 && json_is_string(zip) &&
              strlen(json_string_value(zip)) == 5 && strspn(json_string_value(zip), "0123456789") == 5;
    for (size_t i = 0; ok && i < json_array_size(tags); i++) {
        const char *t = json_string_value(json_array_get(tags, i));
        ok = t && (!strcmp(t, "a") || !strcmp(t, "b") || !strcmp(t, "c"));
    }
    json_decref(o);
    return ok;
}

static void check_structured(void) {
    char extra[4096];
    int st;
    snprintf(extra, sizeof extra,
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,"
             "\"schema\":%s}}",
             person_schema);
    json_t *o = chat(extra, &st);
    CHECK_EQ_INT(st, 200);
    const char *content = json_string_value(json_object_get(message(o), "content"));
    CHECK_MSG(content && person_valid(content), "json_schema output: %s", content ? content : "(null)");
    CHECK_STR(choice_finish(o), "stop");
    json_decref(o);

    /* llama-server's json_schema field, on /v1/completions too */
    snprintf(extra, sizeof extra, "{\"prompt\":\"Once upon a time\",\"temperature\":0,\"max_tokens\":200,\"json_schema\":%s}",
             person_schema);
    o = post_json(g_port, "/v1/completions", extra, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(choice_text(o) && person_valid(choice_text(o)), "completions json_schema: %s",
              choice_text(o) ? choice_text(o) : "(null)");
    json_decref(o);

    /* json_object: some JSON object */
    o = chat("\"response_format\":{\"type\":\"json_object\"},\"max_tokens\":300", &st);
    CHECK_EQ_INT(st, 200);
    content = json_string_value(json_object_get(message(o), "content"));
    json_t *parsed = content ? json_loads(content, 0, NULL) : NULL;
    bool len_ok = !strcmp(choice_finish(o) ? choice_finish(o) : "", "length");
    CHECK_MSG(json_is_object(parsed) || len_ok, "json_object output: %s", content ? content : "(null)");
    json_decref(parsed);
    json_decref(o);

    /* GBNF */
    o = chat("\"grammar\":\"root ::= (\\\"yes\\\" | \\\"no\\\") \\\", because \\\" [a-z ]{1,20} \\\".\\\"\"", &st);
    CHECK_EQ_INT(st, 200);
    content = json_string_value(json_object_get(message(o), "content"));
    bool g_ok = content && (!strncmp(content, "yes, because ", 13) || !strncmp(content, "no, because ", 12)) &&
                content[strlen(content) - 1] == '.';
    CHECK_MSG(g_ok, "grammar output: %s", content ? content : "(null)");
    json_decref(o);
}

/* The tool calls of a non-streamed answer: returns the count and checks each. */
static int check_calls(json_t *o, const char *only) {
    json_t *calls = json_object_get(message(o), "tool_calls");
    CHECK_MSG(json_array_size(calls) >= 1, "no tool_calls: %s", json_dumps(o, 0));
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, i);
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *type = json_string_value(json_object_get(c, "type"));
        json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        CHECK(id && !strncmp(id, "call_", 5));
        CHECK_STR(type, "function");
        CHECK_MSG(name && (!strcmp(name, "get_weather") || !strcmp(name, "get_time")), "name %s", name ? name : "-");
        if (only) CHECK_STR(name, only);
        CHECK_MSG(name && args && args_valid(name, args), "%s arguments %s", name ? name : "-", args ? args : "-");
    }
    CHECK_STR(choice_finish(o), "tool_calls");
    return (int)json_array_size(calls);
}

/* Assembles the tool calls of an SSE chat stream as a non-streamed
 * tool_calls array; checks that id and name come before any arguments. */
static json_t *sse_calls(const char *body, char *finish, size_t cap) {
    json_t *calls = json_array();
    finish[0] = 0;
    for (const char *p = body; (p = strstr(p, "data: "));) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (!end || !strncmp(p, "[DONE]", 6)) break;
        json_t *o = json_loadb(p, (size_t)(end - p), 0, NULL);
        json_t *c = json_array_get(json_object_get(o, "choices"), 0);
        json_t *fr = json_object_get(c, "finish_reason");
        if (json_is_string(fr)) snprintf(finish, cap, "%s", json_string_value(fr));
        json_t *tcs = json_object_get(json_object_get(c, "delta"), "tool_calls");
        for (size_t i = 0; i < json_array_size(tcs); i++) {
            json_t *d = json_array_get(tcs, i);
            int idx = (int)json_integer_value(json_object_get(d, "index"));
            json_t *fn = json_object_get(d, "function");
            if (json_object_get(d, "id")) {
                CHECK_EQ_INT(idx, (int)json_array_size(calls));
                CHECK(json_is_string(json_object_get(fn, "name")));
                json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", json_object_get(d, "id"), "type",
                                                       "function", "function", "name", json_object_get(fn, "name"),
                                                       "arguments", ""));
            }
            json_t *call = json_array_get(calls, (size_t)idx);
            CHECK_MSG(call != NULL, "arguments before the call's id and name (index %d)", idx);
            json_t *frag = json_object_get(fn, "arguments");
            if (call && json_is_string(frag) && json_string_length(frag)) {
                json_t *cf = json_object_get(call, "function");
                const char *have = json_string_value(json_object_get(cf, "arguments"));
                size_t n = strlen(have) + json_string_length(frag) + 1;
                char *joined = xmalloc(n);
                snprintf(joined, n, "%s%s", have, json_string_value(frag));
                json_object_set_new(cf, "arguments", json_string(joined));
                free(joined);
            }
        }
        json_decref(o);
        p = end;
    }
    return calls;
}

static void check_tool_calls(void) {
    char extra[4096];
    int st;
    snprintf(extra, sizeof extra, "\"tools\":[%s,%s],\"tool_choice\":\"required\",\"parallel_tool_calls\":false", weather_tool, time_tool);
    json_t *o = chat(extra, &st);
    CHECK_EQ_INT(st, 200);
    check_calls(o, NULL);
    json_t *whole = json_deep_copy(json_object_get(message(o), "tool_calls"));
    json_decref(o);

    /* streamed: the deltas assemble to the same calls */
    char body[8192];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}],\"temperature\":0,"
             "\"max_tokens\":200,\"stream\":true,%s}",
             extra);
    resp r;
    CHECK(http_do(g_port, "POST", "/v1/chat/completions", NULL, body, &r) == 0);
    CHECK_EQ_INT(r.status, 200);
    char finish[32];
    json_t *streamed = sse_calls(r.body ? r.body : "", finish, sizeof finish);
    CHECK_STR(finish, "tool_calls");
    CHECK_EQ_INT(json_array_size(streamed), json_array_size(whole));
    for (size_t i = 0; i < json_array_size(whole) && i < json_array_size(streamed); i++) {
        json_t *a = json_object_get(json_array_get(whole, i), "function");
        json_t *b = json_object_get(json_array_get(streamed, i), "function");
        CHECK(json_equal(a, b));
    }
    json_decref(streamed);
    json_decref(whole);
    resp_free(&r);

    /* parallel calls: every complete call is valid */
    snprintf(extra, sizeof extra, "\"tools\":[%s,%s],\"tool_choice\":\"required\",\"max_tokens\":400", weather_tool,
             time_tool);
    o = chat(extra, &st);
    CHECK_EQ_INT(st, 200);
    const char *fin = choice_finish(o);
    CHECK_MSG(fin && (!strcmp(fin, "tool_calls") || !strcmp(fin, "length")), "finish %s", fin ? fin : "-");
    json_t *pcalls = json_object_get(message(o), "tool_calls");
    if (fin && !strcmp(fin, "tool_calls")) CHECK(json_array_size(pcalls) >= 1);
    for (size_t i = 0; i < json_array_size(pcalls); i++) {
        json_t *fn = json_object_get(json_array_get(pcalls, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        CHECK_MSG(name && args && args_valid(name, args), "parallel call %zu", i);
    }
    json_decref(o);

    /* a named function */
    snprintf(extra, sizeof extra,
             "\"tools\":[%s,%s],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}",
             weather_tool, time_tool);
    o = chat(extra, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(check_calls(o, "get_time"), 1);
    json_decref(o);

    /* none: text, no calls */
    snprintf(extra, sizeof extra, "\"tools\":[%s],\"tool_choice\":\"none\",\"max_tokens\":8", weather_tool);
    o = chat(extra, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(json_object_get(message(o), "tool_calls") == NULL);
    CHECK(json_is_string(json_object_get(message(o), "content")));
    json_decref(o);

    /* a round trip: the call and its result go back, the server answers */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Use tools.\"}]},"
             "{\"role\":\"user\",\"content\":\"Weather?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
             "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"unit\\\": "
             "\\\"celsius\\\", \\\"days\\\": 1}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"21 C, sunny\"}],"
             "\"tools\":[%s],\"max_tokens\":8,\"temperature\":0}",
             weather_tool);
    o = post_json(g_port, "/v1/chat/completions", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(json_is_object(message(o)));
    long n1 = usage_int(o, "prompt_tokens");
    json_decref(o);
    /* The fallback template does not write tool calls itself: the call is in
     * the prompt all the same (longer arguments, longer prompt). */
    char *longer = strstr(body, "Paris");
    CHECK(longer != NULL);
    if (longer) {
        char body2[8192];
        snprintf(body2, sizeof body2, "%.*sRio de Janeiro do Sul%s", (int)(longer - body), body, longer + 5);
        o = post_json(g_port, "/v1/chat/completions", body2, &st);
        CHECK_EQ_INT(st, 200);
        CHECK_MSG(usage_int(o, "prompt_tokens") > n1, "prompt %ld vs %ld tokens", usage_int(o, "prompt_tokens"), n1);
        json_decref(o);
    }
}

typedef struct par_job {
    const char *body;
    char *out;
} par_job;

static void *par_run(void *arg) {
    par_job *j = arg;
    int st;
    json_t *o = post_json(g_port, "/v1/chat/completions", j->body, &st);
    j->out = o ? json_dumps(json_object_get(message(o), "tool_calls"), JSON_COMPACT) : NULL;
    if (j->out) {
        /* ids differ per request; compare names and arguments */
        json_t *calls = json_object_get(message(o), "tool_calls");
        for (size_t i = 0; i < json_array_size(calls); i++) json_object_del(json_array_get(calls, i), "id");
        free(j->out);
        j->out = json_dumps(calls, JSON_COMPACT);
    }
    json_decref(o);
    return NULL;
}

static void check_concurrency_and_jump(void) {
    char body[8192];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me the weather.\"}],\"temperature\":0,"
             "\"max_tokens\":200,\"tools\":[%s,%s],\"tool_choice\":\"required\",\"parallel_tool_calls\":false}",
             weather_tool, time_tool);
    par_job alone = {body, NULL};
    par_run(&alone);
    CHECK(alone.out != NULL);
    par_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (par_job){body, NULL};
        pthread_create(&th[i], NULL, par_run, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(jobs[i].out && alone.out && !strcmp(jobs[i].out, alone.out), "concurrent %d: %s vs %s", i,
                  jobs[i].out ? jobs[i].out : "-", alone.out ? alone.out : "-");
        free(jobs[i].out);
    }
    free(alone.out);

    /* the same request again: its prompt comes from the cache, and the
     * forced start of the output (cached too) is not counted as prompt */
    {
        int st2;
        json_t *o2 = post_json(g_port, "/v1/chat/completions", body, &st2);
        long np = usage_int(o2, "prompt_tokens"), nc = usage_int(o2, "cached_tokens");
        CHECK_MSG(nc > 0 && nc <= np, "cached %ld of %ld prompt tokens", nc, np);
        json_decref(o2);
    }

    /* jump-forward appends forced tokens; without it the output is valid too */
    double forced0 = metric(g_port, "kvloom_forced_tokens_total");
    char extra[4096];
    snprintf(extra, sizeof extra, "\"tools\":[%s],\"tool_choice\":\"required\",\"parallel_tool_calls\":false", weather_tool);
    int st;
    json_t *o = chat(extra, &st);
    check_calls(o, "get_weather");
    json_decref(o);
    double forced1 = metric(g_port, "kvloom_forced_tokens_total");
    CHECK_MSG(forced1 > forced0 + 5, "jump-forward appended %g tokens", forced1 - forced0);
    snprintf(extra, sizeof extra, "\"tools\":[%s],\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"jump_forward\":false",
             weather_tool);
    o = chat(extra, &st);
    check_calls(o, "get_weather");
    json_decref(o);
    CHECK(metric(g_port, "kvloom_forced_tokens_total") == forced1);
    CHECK(metric(g_port, "kvloom_constrained_tokens_total") > 0);
}

static void expect_400(const char *body, const char *param, const char *needle) {
    resp r;
    CHECK(http_do(g_port, "POST", "/v1/chat/completions", NULL, body, &r) == 0);
    CHECK_MSG(r.status == 400, "status %d for %s: %s", r.status, body, r.body ? r.body : "");
    json_t *o = r.body ? json_loads(r.body, 0, NULL) : NULL;
    json_t *err = json_object_get(o, "error");
    const char *p = json_string_value(json_object_get(err, "param"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    CHECK_MSG(p && !strcmp(p, param), "param %s, want %s (%s)", p ? p : "null", param, body);
    CHECK_MSG(msg && strstr(msg, needle), "message '%s' lacks '%s'", msg ? msg : "", needle);
    json_decref(o);
    resp_free(&r);
    int st;
    json_t *h = get_json(g_port, "/health", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(h);
}

static void check_bad_input(void) {
    char b[8192];
#define U "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
    expect_400("{" U ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,"
               "\"schema\":{\"type\":\"object\",\"patternProperties\":{\"a\":{},\"b\":{},\"c\":{},\"d\":{},\"e\":{}}}}}}",
               "response_format", "patternProperties"); /* five: the compiler takes up to four */
    expect_400("{" U ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":"
               "{\"type\":\"string\",\"maxLength\":-1}}}}",
               "response_format", "maxLength");
    expect_400("{" U ",\"response_format\":{\"type\":\"xml\"}}", "response_format", "response_format.type");
    expect_400("{" U ",\"response_format\":{\"type\":\"json_schema\"}}", "response_format", "json_schema");
    expect_400("{" U ",\"json_schema\":{\"type\":\"strin\"}}", "json_schema", "type");
    expect_400("{" U ",\"grammar\":\"root ::= value\"}", "grammar", "value");
    expect_400("{" U ",\"grammar\":\"root ::= \\\"a\"}", "grammar", "grammar");
    expect_400("{" U ",\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{}}", "grammar", "only one");
    expect_400("{" U ",\"tools\":{}}", "tools", "tools");
    expect_400("{" U ",\"tools\":[1]}", "tools", "tools[0]");
    expect_400("{" U ",\"tools\":[{\"type\":\"function\",\"function\":{}}]}", "tools", "name");
    snprintf(b, sizeof b, "{" U ",\"tools\":[%s],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
             weather_tool);
    expect_400(b, "tool_choice", "nope");
    snprintf(b, sizeof b, "{" U ",\"tools\":[%s],\"tool_choice\":\"sometimes\"}", weather_tool);
    expect_400(b, "tool_choice", "tool_choice");
    expect_400("{" U ",\"tool_choice\":\"required\"}", "tool_choice", "tools");
    snprintf(b, sizeof b,
             "{" U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
             "\"properties\":{\"x\":{\"type\":\"string\",\"format\":\"regex\"}}},\"strict\":true}}],"
             "\"tool_choice\":\"required\"}");
    expect_400(b, "tools", "regex");
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"tool\",\"content\":\"x\"}]}", "messages",
               "tool_call_id");
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"tool\",\"tool_call_id\":\"call_9\","
               "\"content\":\"x\"}]}",
               "messages", "call_9");
    expect_400("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
               "\"function\":{\"name\":\"f\"}}]}]}",
               "messages", "arguments");
    expect_400("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":"
               "\"f\",\"arguments\":\"{}\"}}]}]}",
               "messages", "id");
#undef U
}

/* Reasoning and hermes calls on a Qwen3-vocabulary model. */
static void check_qwen3(void) {
    const char *bin = getenv("KVLOOM_BIN") && *getenv("KVLOOM_BIN") ? getenv("KVLOOM_BIN") : "build/kvloom";
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "/tmp/kvloom_tools_qwen3_%d.gguf", (int)getpid());
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
    char extra[4096];
    snprintf(extra, sizeof extra, "\"tools\":[%s,%s],\"tool_choice\":\"required\",\"parallel_tool_calls\":false",
             weather_tool, time_tool);
    json_t *o = chat(extra, &st);
    CHECK_EQ_INT(st, 200);
    check_calls(o, NULL);
    json_decref(o);

    /* reasoning: a grammar makes the random model think, then answer */
    const char *g = "\"grammar\":\"root ::= \\\"<think>\\\\n\\\" [a-z]{3,8} \\\"\\\\n</think>\\\\n\\\\n\\\" "
                    "[A-Z]{2,6}\",\"max_tokens\":64";
    o = chat(g, &st);
    CHECK_EQ_INT(st, 200);
    const char *rs = json_string_value(json_object_get(message(o), "reasoning_content"));
    const char *ct = json_string_value(json_object_get(message(o), "content"));
    CHECK_MSG(rs && strlen(rs) >= 3 && strspn(rs, "abcdefghijklmnopqrstuvwxyz") == strlen(rs), "reasoning '%s'",
              rs ? rs : "(null)");
    CHECK_MSG(ct && strlen(ct) >= 2 && strspn(ct, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == strlen(ct), "content '%s'",
              ct ? ct : "(null)");
    /* streamed: the same split */
    char body[4096];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}],\"temperature\":0,"
             "\"stream\":true,%s}",
             g);
    resp r;
    CHECK(http_do(g_port, "POST", "/v1/chat/completions", NULL, body, &r) == 0);
    sbuf srs = {0}, sct = {0};
    for (const char *p = r.body ? r.body : ""; (p = strstr(p, "data: "));) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (!end || !strncmp(p, "[DONE]", 6)) break;
        json_t *c = json_loadb(p, (size_t)(end - p), 0, NULL);
        json_t *d = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "delta");
        json_t *a = json_object_get(d, "reasoning_content"), *b = json_object_get(d, "content");
        if (json_is_string(a)) sbuf_put(&srs, json_string_value(a), json_string_length(a));
        if (json_is_string(b)) sbuf_put(&sct, json_string_value(b), json_string_length(b));
        json_decref(c);
        p = end;
    }
    CHECK_MSG(rs && srs.n == strlen(rs) && !memcmp(srs.p, rs, srs.n), "streamed reasoning '%.*s'", (int)srs.n,
              srs.p ? srs.p : "");
    CHECK_MSG(ct && sct.n == strlen(ct) && !memcmp(sct.p, ct, sct.n), "streamed content '%.*s'", (int)sct.n,
              sct.p ? sct.p : "");
    sbuf_free(&srs);
    sbuf_free(&sct);
    resp_free(&r);
    json_decref(o);

    /* the format chosen at load is logged */
    FILE *f = fopen(s.log_path, "r");
    char line[512];
    bool logged = false;
    while (f && fgets(line, sizeof line, f)) logged |= strstr(line, "tool calls in the hermes format") != NULL;
    if (f) fclose(f);
    CHECK(logged);
    CHECK(wait_idle(s.port, 10));
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
    g_port = saved;
    unlink(path);
}

/* Mistral's template takes only 9-character tool-call ids: a round trip
 * with OpenAI-style ids still renders (they are mapped), and a required call
 * comes back in the mistral syntax, parsed. */
static void check_mistral(void) {
    srv s;
    const char *flags[] = {"--chat-template-file", "tests/fixtures/templates/mistral-v03.jinja", "--kv-mem", "32M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "mistral server did not start");
    if (rc) {
        srv_print_log(&s);
        return;
    }
    int saved = g_port;
    g_port = s.port;
    char body[8192];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_Xy12\",\"type\":\"function\","
             "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"unit\\\": "
             "\\\"celsius\\\", \\\"days\\\": 1}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"call_Xy12\",\"content\":\"21 C\"}],"
             "\"tools\":[%s],\"max_tokens\":4,\"temperature\":0}",
             weather_tool);
    int st;
    json_t *o = post_json(g_port, "/v1/chat/completions", body, &st);
    CHECK_MSG(st == 200, "mistral round trip: %d %s", st, json_dumps(o, 0));
    json_decref(o);
    char extra[4096];
    snprintf(extra, sizeof extra, "\"tools\":[%s],\"tool_choice\":\"required\",\"parallel_tool_calls\":false",
             weather_tool);
    o = chat(extra, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(check_calls(o, "get_weather"), 1);
    json_decref(o);
    CHECK(wait_idle(s.port, 10));
    CHECK_EQ_INT(srv_stop(&s), 0);
    g_port = saved;
}

/* A model whose logits are NaN (one weight set to NaN, as a flipped byte
 * does): every sampling path answers 500 naming the cause, and the server
 * keeps serving. */
static void check_nan_model(void) {
    char src[512], path[256];
    snprintf(src, sizeof src, "%s/models/stories260K.gguf", test_shared_dir());
    snprintf(path, sizeof path, "/tmp/kvloom_nan_%d.gguf", (int)getpid());
    char *buf = NULL;
    size_t n = 0;
    err_t e = {0};
    CHECK(file_read_all(src, &buf, &n, &e) == 0);
    gguf_ctx *g = NULL;
    CHECK(gguf_open(src, &g, &e) == 0);
    const gguf_tensor *t = g ? gguf_find_tensor(g, "output_norm.weight") : NULL;
    CHECK(t != NULL);
    if (!t || !buf) {
        gguf_free(g);
        free(buf);
        return;
    }
    size_t off = gguf_data_offset(g) + t->offset;
    float nan = NAN;
    memcpy(buf + off, &nan, sizeof nan);
    gguf_free(g);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n);
    if (f) fclose(f);
    free(buf);
    srv s;
    const char *flags[] = {"-m", path, "--kv-mem", "16M", NULL};
    if (srv_start(&s, flags) != 0) {
        CHECK_MSG(0, "NaN server did not start");
        unlink(path);
        return;
    }
    const char *bodies[] = {
        "{\"prompt\":\"Once\",\"max_tokens\":4,\"temperature\":0}",
        "{\"prompt\":\"Once\",\"max_tokens\":4,\"temperature\":0.8,\"top_k\":40}",
        "{\"prompt\":\"Once\",\"max_tokens\":4,\"temperature\":0.8,\"logprobs\":5}",
        "{\"prompt\":\"Once\",\"max_tokens\":4,\"json_schema\":{\"type\":\"integer\"}}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bodies); i++) {
        resp r;
        CHECK(http_do(s.port, "POST", "/v1/completions", NULL, bodies[i], &r) == 0);
        CHECK_MSG(r.status == 500 && r.body && strstr(r.body, "NaN"), "NaN model, body %zu: %d %s", i, r.status,
                  r.body ? r.body : "");
        resp_free(&r);
        int st;
        json_t *h = get_json(s.port, "/health", &st);
        CHECK_EQ_INT(st, 200);
        json_decref(h);
    }
    CHECK_EQ_INT(srv_stop(&s), 0);
    unlink(path);
}

int main(void) {
    (void)sse_text; /* a server_util.h helper of the chat tests */
    su_watchdog(300);
    srv s;
    const char *flags[] = {"--check", "--kv-mem", "32M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "server did not start");
    if (rc != 0) {
        srv_print_log(&s);
        return test_summary("test_server_tools");
    }
    g_port = s.port;
    check_structured();
    check_tool_calls();
    check_concurrency_and_jump();
    check_bad_input();
    check_qwen3();
    check_mistral();
    check_nan_model();
    CHECK(wait_idle(s.port, 10));
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
    return test_summary("test_server_tools");
}
