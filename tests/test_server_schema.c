/*
 * test_server_schema.c — strict and relaxed JSON Schemas on every API of
 * `kvloom serve` (issue 22, docs/grammar.md "Strict and relaxed compiles"),
 * on the shared stories260K model (it knows no JSON: only the grammar makes
 * its output valid).
 *
 * The schema has one keyword the compiler does not enforce (uniqueItems on
 * /properties/tags: strings, not finitely many values) beside ones it does
 * (an enum, a pattern, maxItems, no extra members). For each of OpenAI chat (tools and response_format), Responses
 * (function tools and text.format), Anthropic (tools) and Ollama (format
 * and tools):
 *
 *   - without strict: 200, the answer carries X-Kvloom-Schema-Relaxed naming
 *     "uniqueItems at /properties/tags" (and the request field), and the
 *     output satisfies every other keyword (checked here);
 *   - with "strict": true: 400 whose message names the keyword and its
 *     pointer, the server still serving;
 *   - a schema with nothing to relax: no header.
 *
 * Anthropic's output_format is always strict (structured outputs promise the
 * schema): a 400 there too.
 */
#include "server_util.h"

static int g_port;

#define SCHEMA                                                                                                       \
    "{\"type\":\"object\",\"properties\":{\"mode\":{\"enum\":[\"fast\",\"slow\"]},\"tags\":{\"type\":\"array\","    \
    "\"items\":{\"type\":\"string\",\"pattern\":\"^[xy]$\"},\"maxItems\":2,\"uniqueItems\":true}},"              \
    "\"required\":[\"mode\",\"tags\"],"                                                                                \
    "\"additionalProperties\":false}"
#define PLAIN "{\"type\":\"object\",\"properties\":{\"mode\":{\"enum\":[\"fast\",\"slow\"]}},\"required\":[\"mode\"]}"

/* The value of header `name` in r's head (a malloc'd copy) or NULL. */
static char *header(const resp *r, const char *name) {
    size_t n = strlen(name);
    for (const char *p = r->head; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncasecmp(p, name, n) && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ') v++;
            size_t k = strcspn(v, "\r\n");
            char *out = xmalloc(k + 1);
            memcpy(out, v, k);
            out[k] = 0;
            return out;
        }
    }
    return NULL;
}

/* The enforced part of SCHEMA holds for the arguments (an object). */
static bool args_ok(json_t *a) {
    json_t *mode = json_object_get(a, "mode"), *tags = json_object_get(a, "tags");
    bool ok = json_is_object(a) && json_object_size(a) == 2 && json_is_string(mode) &&
              (!strcmp(json_string_value(mode), "fast") || !strcmp(json_string_value(mode), "slow")) &&
              json_is_array(tags) && json_array_size(tags) <= 2;
    for (size_t i = 0; ok && i < json_array_size(tags); i++) {
        const char *t = json_string_value(json_array_get(tags, i));
        ok = t && (!strcmp(t, "x") || !strcmp(t, "y"));
    }
    return ok;
}
static bool args_text_ok(const char *text) {
    json_t *a = text ? json_loads(text, 0, NULL) : NULL;
    bool ok = args_ok(a);
    json_decref(a);
    return ok;
}

typedef json_t *(*args_of_fn)(json_t *answer, char **text); /* the arguments (new ref) or their text */

/* POSTs body; relaxed: 200 with the header naming the keyword (and `field`),
 * the arguments found by args_of satisfying the rest; strict: a 400 whose
 * body names the keyword and its pointer. */
static void run(const char *what, const char *path, const char *hdrs, const char *body, bool strict, const char *field,
                args_of_fn args_of) {
    resp r;
    CHECK_MSG(http_do(g_port, "POST", path, hdrs, body, &r) == 0, "%s: no answer", what);
    char *h = header(&r, "X-Kvloom-Schema-Relaxed");
    if (strict) {
        CHECK_MSG(r.status == 400, "%s: status %d, want 400: %s", what, r.status, r.body ? r.body : "");
        CHECK_MSG(r.body && strstr(r.body, "uniqueItems") && strstr(r.body, "/properties/tags"),
                  "%s: the 400 does not name the keyword and its pointer: %s", what, r.body ? r.body : "");
        CHECK_MSG(h == NULL, "%s: relaxed header on a 400", what);
    } else {
        CHECK_MSG(r.status == 200, "%s: status %d: %s", what, r.status, r.body ? r.body : "");
        CHECK_MSG(h && strstr(h, "uniqueItems at /properties/tags") && strstr(h, field),
                  "%s: X-Kvloom-Schema-Relaxed is '%s', want uniqueItems at /properties/tags and %s", what,
                  h ? h : "(absent)", field);
        json_t *o = r.body ? json_loads(r.body, 0, NULL) : NULL;
        char *text = NULL;
        json_t *a = args_of(o, &text);
        bool ok = a ? args_ok(a) : args_text_ok(text);
        CHECK_MSG(ok, "%s: the output breaks the enforced keywords: %s", what, r.body ? r.body : "");
        json_decref(a);
        free(text);
        json_decref(o);
    }
    free(h);
    resp_free(&r);
    int st;
    json_t *health = get_json(g_port, "/health", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(health);
}

static void no_header(const char *what, const char *path, const char *hdrs, const char *body) {
    resp r;
    CHECK_MSG(http_do(g_port, "POST", path, hdrs, body, &r) == 0, "%s: no answer", what);
    CHECK_MSG(r.status == 200, "%s: status %d: %s", what, r.status, r.body ? r.body : "");
    char *h = header(&r, "X-Kvloom-Schema-Relaxed");
    CHECK_MSG(h == NULL, "%s: X-Kvloom-Schema-Relaxed '%s' on a schema with nothing relaxed", what, h);
    free(h);
    resp_free(&r);
}

static char *dup_or_null(const char *s) { return s ? xstrdup(s) : NULL; }

static json_t *chat_call(json_t *o, char **text) {
    json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    json_t *fn = json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "function");
    *text = dup_or_null(json_string_value(json_object_get(fn, "arguments")));
    return NULL;
}
static json_t *chat_content(json_t *o, char **text) {
    json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    *text = dup_or_null(json_string_value(json_object_get(m, "content")));
    return NULL;
}
static json_t *resp_call(json_t *o, char **text) {
    json_t *out = json_object_get(o, "output");
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *it = json_array_get(out, i);
        if (!strcmp(json_string_value(json_object_get(it, "type")) ?: "", "function_call")) {
            *text = dup_or_null(json_string_value(json_object_get(it, "arguments")));
            return NULL;
        }
    }
    return NULL;
}
static json_t *resp_text(json_t *o, char **text) {
    json_t *out = json_object_get(o, "output");
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *c = json_object_get(json_array_get(out, i), "content");
        for (size_t k = 0; k < json_array_size(c); k++) {
            const char *t = json_string_value(json_object_get(json_array_get(c, k), "text"));
            if (t) {
                *text = xstrdup(t);
                return NULL;
            }
        }
    }
    return NULL;
}
static json_t *anth_call(json_t *o, char **text) {
    json_t *c = json_object_get(o, "content");
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *b = json_array_get(c, i);
        if (!strcmp(json_string_value(json_object_get(b, "type")) ?: "", "tool_use"))
            return json_incref(json_object_get(b, "input"));
    }
    return NULL;
}
static json_t *olla_content(json_t *o, char **text) {
    *text = dup_or_null(json_string_value(json_object_get(json_object_get(o, "message"), "content")));
    return NULL;
}

#define USER "\"messages\":[{\"role\":\"user\",\"content\":\"Pick a mode.\"}]"
#define TOOL(strict)                                                                                                 \
    "{\"type\":\"function\",\"function\":{\"name\":\"set_mode\",\"parameters\":" SCHEMA strict "}}"
#define ANTH "anthropic-version: 2023-06-01\r\n"

static void check_openai(void) {
    run("chat tools", "/v1/chat/completions", NULL,
        "{" USER ",\"max_tokens\":200,\"temperature\":0,\"tools\":[" TOOL("") "],\"tool_choice\":\"required\"}", false,
        "tools[0].function.parameters", chat_call);
    run("chat tools strict", "/v1/chat/completions", NULL,
        "{" USER ",\"max_tokens\":200,\"tools\":[" TOOL(",\"strict\":true") "],\"tool_choice\":\"required\"}", true,
        NULL, chat_call);
    run("chat response_format", "/v1/chat/completions", NULL,
        "{" USER ",\"max_tokens\":200,\"temperature\":0,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
        "{\"name\":\"m\",\"schema\":" SCHEMA "}}}",
        false, "response_format", chat_content);
    run("chat response_format strict", "/v1/chat/completions", NULL,
        "{" USER ",\"max_tokens\":200,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
        "{\"name\":\"m\",\"strict\":true,\"schema\":" SCHEMA "}}}",
        true, NULL, chat_content);
    run("chat json_schema (llama-server)", "/v1/chat/completions", NULL,
        "{" USER ",\"max_tokens\":200,\"temperature\":0,\"json_schema\":" SCHEMA "}", false, "json_schema",
        chat_content);
    no_header("chat tools, nothing relaxed", "/v1/chat/completions", NULL,
              "{" USER ",\"max_tokens\":100,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
              "\"parameters\":" PLAIN "}}],\"tool_choice\":\"required\"}");
}

static void check_responses(void) {
    run("responses tools", "/v1/responses", NULL,
        "{\"input\":\"Pick a mode.\",\"max_output_tokens\":200,\"temperature\":0,\"tools\":[{\"type\":\"function\","
        "\"name\":\"set_mode\",\"parameters\":" SCHEMA "}],\"tool_choice\":\"required\"}",
        false, "tools[0].function.parameters", resp_call);
    run("responses tools strict", "/v1/responses", NULL,
        "{\"input\":\"Pick a mode.\",\"max_output_tokens\":200,\"tools\":[{\"type\":\"function\","
        "\"name\":\"set_mode\",\"strict\":true,\"parameters\":" SCHEMA "}],\"tool_choice\":\"required\"}",
        true, NULL, resp_call);
    run("responses text.format", "/v1/responses", NULL,
        "{\"input\":\"Pick a mode.\",\"max_output_tokens\":200,\"temperature\":0,\"text\":{\"format\":{\"type\":"
        "\"json_schema\",\"name\":\"m\",\"schema\":" SCHEMA "}}}",
        false, "response_format", resp_text);
    run("responses text.format strict", "/v1/responses", NULL,
        "{\"input\":\"Pick a mode.\",\"max_output_tokens\":200,\"text\":{\"format\":{\"type\":\"json_schema\","
        "\"name\":\"m\",\"strict\":true,\"schema\":" SCHEMA "}}}",
        true, NULL, resp_text);
}

static void check_anthropic(void) {
    run("anthropic tools", "/v1/messages", ANTH,
        "{\"model\":\"m\"," USER ",\"max_tokens\":200,\"temperature\":0,\"tools\":[{\"name\":\"set_mode\","
        "\"input_schema\":" SCHEMA "}],\"tool_choice\":{\"type\":\"any\"}}",
        false, "tools[0].function.parameters", anth_call);
    run("anthropic tools strict", "/v1/messages", ANTH,
        "{\"model\":\"m\"," USER ",\"max_tokens\":200,\"tools\":[{\"name\":\"set_mode\",\"strict\":true,"
        "\"input_schema\":" SCHEMA "}],\"tool_choice\":{\"type\":\"any\"}}",
        true, NULL, anth_call);
    run("anthropic output_format (always strict)", "/v1/messages", ANTH,
        "{\"model\":\"m\"," USER ",\"max_tokens\":200,\"output_format\":{\"type\":\"json_schema\",\"schema\":" SCHEMA
        "}}",
        true, NULL, anth_call);
}

static void check_ollama(void) {
    /* the model must be named as the server names it */
    int st;
    json_t *models = get_json(g_port, "/v1/models", &st);
    const char *id = json_string_value(json_object_get(json_array_get(json_object_get(models, "data"), 0), "id"));
    CHECK_MSG(id != NULL, "no model id from /v1/models");
    char b[4096];
    snprintf(b, sizeof b,
             "{\"model\":\"%s\",\"stream\":false," USER ",\"options\":{\"num_predict\":200,\"temperature\":0},"
             "\"format\":" SCHEMA "}",
             id ? id : "");
    run("ollama format", "/api/chat", NULL, b, false, "json_schema", olla_content);
    snprintf(b, sizeof b, "{\"model\":\"%s\",\"stream\":false," USER ",\"tools\":[" TOOL(",\"strict\":true") "]}",
             id ? id : "");
    run("ollama tools strict", "/api/chat", NULL, b, true, NULL, olla_content);
    json_decref(models);
}

int main(void) {
    (void)sse_text; /* server_util.h helpers of the chat tests */
    (void)choice_text;
    (void)choice_finish;
    (void)usage_int;
    su_watchdog(300);
    srv s;
    const char *flags[] = {"--check", "--kv-mem", "32M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "server did not start");
    if (rc != 0) {
        srv_print_log(&s);
        return test_summary("test_server_schema");
    }
    g_port = s.port;
    check_openai();
    check_responses();
    check_anthropic();
    check_ollama();
    CHECK(wait_idle(s.port, 10));
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
    return test_summary("test_server_schema");
}
